//! # evfd
//!
//! eventfd(2) semantics — Counter, Semaphore and the AutoReset mode the kernel never merged —
//! at memory speed, with blocking, timed and async waits on the same object, and an embedded
//! user-space epoll.
//!
//! | | [`Mode::Counter`] | [`Mode::Semaphore`] | [`Mode::AutoReset`] |
//! |---|---|---|---|
//! | `write(n)` | `count += n` (waits / `WouldBlock` past [`LIMIT`]) | same | same |
//! | `read()` | returns `count`, sets 0 | returns 1, `count -= 1` | as Counter |
//! | delivery of `IN` | nothing | nothing | resets the count to 0 |
//!
//! ```
//! use evfd::{Mode, Notifier};
//!
//! let jobs = Notifier::builder().mode(Mode::Semaphore).build()?;
//! let worker = {
//!     let jobs = jobs.clone();
//!     std::thread::spawn(move || (0..3).map(|_| jobs.read().unwrap()).sum::<u64>())
//! };
//! jobs.write(3)?;
//! assert_eq!(worker.join().unwrap(), 3);
//! # Ok::<(), std::io::Error>(())
//! ```
//!
//! The uncontended `write` + `read` pair is two atomic read-modify-writes: no lock, no
//! syscall. Wakes that no waiter asked for cost one atomic load.
//!
//! # Features
//!
//! - `futures`: `Stream`s (`NotifierStream`, `EpollStream`) and `FusedFuture` impls.
//! - `tokio`: `AsyncFdNotifier`, `AsyncEpoll`, `FdView::into_async_fd` and
//!   `KernelNotifier::into_async_fd`: evfd fds in tokio's reactor with no `unsafe`.
//! - `mio`: `mio::event::Source` for [`FdView`] and [`KernelNotifier`].
//!
//! # Platforms
//!
//! Linux (and Android) has everything. On other Unixes (FreeBSD and macOS are checked in
//! CI) the in-memory core builds and works as on Linux: [`Notifier`], [`Epoll`] over
//! in-memory sources, the blocking, timed and async waits, the `futures`, `tokio` and `mio`
//! integrations, and [`FdView`]s, whose fd is then a pipe instead of an eventfd. The
//! kernel-eventfd parts are Linux-only and absent elsewhere: [`KernelNotifier`] (and what
//! takes one), and kernel fds (`BorrowedFd`) as [`Epoll`] sources.
#![cfg_attr(docsrs, feature(doc_cfg))]
#![deny(unsafe_code)]
#![deny(missing_docs)]
#![doc(test(attr(deny(warnings))))]
// Under loom the OS layer and the spin are stubbed out (loom models no syscalls and no
// clocks), which leaves their helpers unused in that build only.
#![cfg_attr(evfd_loom, allow(dead_code, unused_imports))]

// Layers, bottom first; a module imports only from the layers below it, by the defining
// module's path:
//   events, loom, mode, sys      vocabulary, sync primitives, arithmetic, OS calls
//   wait_queue                   the wait queue, the blocking wait and the async wait
//   notifier                     Notifier (+ futures, stream), KernelNotifier, the kick/call
//                                halves (notifier/halves.rs, public as `halves`)
//   epoll                        the user-space epoll (+ its futures, kernel fds)
//   fd                           fd views over notifiers and epolls
//   shared                       SharedNotifier: one notifier across processes (sys: shm, futex, scm)
//   tokio_fd, tokio_view         tokio AsyncFd glue (tokio_view: safe AsyncFds, AsyncEpoll)
//   mio_source                   mio::event::Source impls
//   vmm                          rust-vmm (vmm-sys-util) conversions for KernelNotifier
mod epoll;
mod error;
mod events;
mod fd;
mod loom;
#[cfg(feature = "mio")]
mod mio_source;
mod mode;
// A notifier kind, public as a module of its own (`evfd::halves`).
#[path = "notifier/halves.rs"]
pub mod halves;
mod notifier;
#[cfg(any(target_os = "linux", target_os = "android"))]
mod shared;
mod sys;
#[cfg(feature = "tokio")]
mod tokio_fd;
#[cfg(feature = "tokio")]
mod tokio_view;
#[cfg(all(
    feature = "vmm-sys-util",
    any(target_os = "linux", target_os = "android")
))]
mod vmm;
mod wait_queue;

#[cfg(feature = "futures")]
pub use epoll::future::EpollStream;
pub use epoll::future::EpollWaitFuture;
#[doc(hidden)]
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use epoll::watcher::watcher_stats;
pub use epoll::{Epoll, Source};
pub use events::{Event, Events};
pub use fd::FdView;
pub use mode::{flags, Mode, LIMIT};
pub use notifier::api::EventNotifier;
pub use notifier::future::{OwnedReadFuture, OwnedWriteFuture, ReadFuture, WriteFuture};
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use notifier::kernel::{KernelNotifier, KernelNotifierBuilder};
#[cfg(not(evfd_loom))]
pub use notifier::signal::SignalNotifier;
#[cfg(feature = "futures")]
pub use notifier::stream::NotifierStream;
pub use notifier::{Notifier, NotifierBuilder};
#[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
pub use shared::{SharedFdView, SharedNotifier, SharedNotifierBuilder, SharedStats};
#[doc(hidden)]
pub use sys::doorbell_stats;
pub use sys::DoorbellStats;
#[cfg(feature = "tokio")]
pub use tokio_fd::AsyncFdNotifier;
#[cfg(feature = "tokio")]
pub use tokio_view::AsyncEpoll;

#[cfg(all(test, evfd_loom))]
mod tests;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
