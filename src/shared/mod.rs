//! [`SharedNotifier`]: eventfd semantics across processes, at memory speed.
//!
//! The state (the count and the wake bookkeeping) lives in a one-page memfd that both
//! processes map; the protocol over it is in `protocol` (with its proofs; its unit tests
//! and loom models in `protocol/tests.rs`), bound to this OS in `os` (the mapped words, the
//! shared futex, the doorbell). The public face:
//!
//! - `notifier`: [`SharedNotifier`], its builder and [`SharedStats`]: creation, passing over
//!   a Unix socket, validation of what arrives, and the operations;
//! - `fd_view`: [`SharedFdView`], a real fd readable while the count is non-zero;
//! - `asyncio`: `read_async` / `write_async`, for any executor;
//! - `source`: the [`Source`](crate::Source) impl, so an [`Epoll`](crate::Epoll) watches it.

pub(crate) mod protocol;

#[cfg(not(evfd_loom))]
mod asyncio;
#[cfg(not(evfd_loom))]
mod fd_view;
#[cfg(not(evfd_loom))]
mod notifier;
#[cfg(not(evfd_loom))]
mod os;
#[cfg(not(evfd_loom))]
mod source;
#[cfg(not(evfd_loom))]
pub use fd_view::SharedFdView;
#[cfg(not(evfd_loom))]
pub use notifier::{SharedNotifier, SharedNotifierBuilder, SharedStats};
