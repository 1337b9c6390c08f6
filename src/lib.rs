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
//! - `futures`: the `evfd::stream` module (`NotifierStream`, `EpollStream`) and
//!   `FusedFuture` impls.
//! - `tokio`: the `evfd::tokio` module (`AsyncNotifierFd`, `AsyncEpollFd`),
//!   `FdView::into_async_fd` and `KernelNotifier::into_async_fd`: evfd fds in tokio's
//!   reactor with no `unsafe`.
//! - `mio`: `mio::event::Source` for [`FdView`] and [`KernelNotifier`].
//!
//! # Platforms
//!
//! Linux (and Android) has everything. On other Unixes (FreeBSD and macOS are checked in
//! CI) the in-memory core builds and works as on Linux: [`Notifier`], [`Epoll`] over
//! in-memory sources, the blocking, timed and async waits, the `futures`, `tokio` and `mio`
//! integrations, and [`FdView`]s, whose fd is then a pipe instead of an eventfd. The
//! kernel-eventfd parts are Linux-only and absent elsewhere: [`KernelNotifier`] (and what
//! takes one). The kick/call [`halves`] work over pipes on every Unix (blocking and timed
//! reads and writes, `poll`, `consume`); on Linux, macOS and FreeBSD they are also `Epoll`
//! sources with `read_async`/`write_async` — the kernel-backed notifier there — as are
//! kernel fds (`BorrowedFd`): an `Epoll`'s kernel side is a kqueue on macOS and FreeBSD
//! (compiled in CI, not run there: docs/design.md, "The kernel side off Linux").
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
//                                halves (notifier/halves.rs, public as `evfd::halves`)
//   epoll                        the user-space epoll (+ its futures, kernel fds)
//   fd                           fd views over notifiers and epolls
//   event_notifier, kernel_async the trait over every kind; the async waits of the kernel-fd
//                                kinds (KernelNotifier, the halves)
//   shared                       SharedNotifier: one notifier across processes (sys: shm, futex, scm)
//   tokio_fd, tokio_view         tokio AsyncFd glue (tokio_view: safe AsyncFds, AsyncEpollFd)
//   mio_source                   mio::event::Source impls
//   vmm                          rust-vmm (vmm-sys-util) conversions for KernelNotifier
mod epoll;
mod error;
mod event_notifier;
mod events;
mod fd;
#[cfg(evfd_kernel_side)]
mod kernel_async;
mod loom;
#[cfg(feature = "mio")]
mod mio_source;
mod mode;
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

// What a user names: the notifier kinds, the epoll and its vocabulary, the fd views.
pub use epoll::{Epoll, Source};
pub use event_notifier::EventNotifier;
pub use events::{Event, Events};
pub use fd::FdView;
pub use mode::{flags, Mode, LIMIT};
pub use notifier::halves;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub use notifier::kernel::KernelNotifier;
#[cfg(not(evfd_loom))]
pub use notifier::signal::SignalNotifier;
pub use notifier::Notifier;
#[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
pub use shared::{SharedFdView, SharedNotifier};

/// The builders of the notifier kinds, each made by its kind's `builder()`.
///
/// ```
/// use evfd::builder::NotifierBuilder;
/// use evfd::{Mode, Notifier};
/// let b: NotifierBuilder = Notifier::builder().mode(Mode::Semaphore).initial(2);
/// assert_eq!(b.build()?.read()?, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub mod builder {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    pub use crate::notifier::kernel::KernelNotifierBuilder;
    pub use crate::notifier::NotifierBuilder;
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
    pub use crate::shared::SharedNotifierBuilder;
}

/// The futures returned by the async methods (`read_async`, `write_async`, `read_owned`,
/// `write_owned`, [`Epoll::wait_async`]): named here so that a struct can hold one.
///
/// ```
/// use evfd::future::ReadFuture;
/// let n = evfd::Notifier::new();
/// n.write(3)?;
/// let f: ReadFuture<'_> = n.read_async();
/// assert_eq!(futures::executor::block_on(f)?, 3);
/// # Ok::<(), std::io::Error>(())
/// ```
pub mod future {
    pub use crate::epoll::future::EpollWaitFuture;
    pub use crate::notifier::future::{OwnedReadFuture, OwnedWriteFuture, ReadFuture, WriteFuture};
}

/// `futures::Stream`s of reads and of epoll events (feature `futures`).
///
/// ```
/// use futures::StreamExt;
/// let n = evfd::Notifier::new();
/// n.write(2)?;
/// let mut s: evfd::stream::NotifierStream = n.stream();
/// assert_eq!(futures::executor::block_on(s.next()).transpose()?, Some(2));
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(feature = "futures")]
#[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
pub mod stream {
    pub use crate::epoll::future::EpollStream;
    pub use crate::notifier::stream::NotifierStream;
}

/// Counters for diagnostics and benchmarks: how often fd views rang their doorbells, what a
/// shared notifier's protocol did.
///
/// ```
/// let n = evfd::Notifier::new();
/// let view = n.fd_view()?;
/// n.notify()?;
/// let s: evfd::stats::DoorbellStats = view.doorbell_stats();
/// assert!(s.rings >= 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub mod stats {
    #[doc(hidden)]
    #[cfg(evfd_kernel_side)]
    pub use crate::epoll::watcher::watcher_stats;
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
    pub use crate::shared::SharedStats;
    #[doc(hidden)]
    pub use crate::sys::doorbell_stats;
    pub use crate::sys::DoorbellStats;
}

/// tokio's reactor over evfd's fds (feature `tokio`), with no `unsafe` in user code.
///
/// [`AsyncNotifierFd`](tokio::AsyncNotifierFd) is not a fourth notifier kind: it is a
/// notifier's fd (a fd view, or a [`KernelNotifier`]'s eventfd) registered once in tokio's
/// reactor. [`AsyncEpollFd`](tokio::AsyncEpollFd) is an [`Epoll`]'s fd view in the reactor.
/// Every kind's own `read_async`/`write_async` and [`Epoll::wait_async`] also work inside
/// tokio, with no fd at all for in-memory waits.
///
/// ```
/// # tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(async {
/// let n = evfd::Notifier::new();
/// let a = evfd::tokio::AsyncNotifierFd::new(&n)?;
/// n.write(4)?;
/// assert_eq!(a.read().await?, 4);
/// # Ok::<(), std::io::Error>(())
/// # })?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg(feature = "tokio")]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub mod tokio {
    pub use crate::tokio_fd::AsyncNotifierFd;
    pub use crate::tokio_view::AsyncEpollFd;
}

#[cfg(all(test, evfd_loom))]
mod tests;

/// The README's examples, compiled and run as doctests.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeDoctests;
