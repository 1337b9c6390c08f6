//! tokio's reactor, below every evfd type that uses it (feature `tokio`).
//!
//! `AsyncFd::register_with_interest` is `unsafe` (tokio ≥ 1.51.6): the fd must stay open
//! and be the same fd for the `AsyncFd`'s whole life. [`StableFd`] marks the types for
//! which that holds, so the one `unsafe` block lives here, in [`register_stable`]. It needs
//! only tokio and `OwnedFd`, so the epoll's reactor route (`crate::epoll::kernel::reactor`)
//! uses it from below the tokio glue, and the glue (`crate::tokio_fd`, `crate::tokio_view`)
//! implements [`StableFd`] for the public types it wraps.

use std::io;
use std::os::fd::AsRawFd;

use ::tokio::io::unix::AsyncFd;
use ::tokio::io::Interest;

/// Types whose `as_raw_fd` is a fd they own, open and the same for their whole life.
///
/// # Safety
///
/// An implementor's `as_raw_fd` must return the same open fd from creation to drop: the fd
/// is owned by the value (not borrowed) and no method closes or replaces it.
#[allow(unsafe_code)]
pub(crate) unsafe trait StableFd: AsRawFd {}

// SAFETY: an `OwnedFd` owns its fd and never changes it (it has no method that could).
#[allow(unsafe_code)]
unsafe impl StableFd for std::os::fd::OwnedFd {}

/// Register a [`StableFd`] with the current tokio reactor.
///
/// # Panics
///
/// Outside a tokio runtime with I/O enabled (tokio's own panic).
#[allow(unsafe_code)]
pub(crate) fn register_stable<T: StableFd>(t: T, interest: Interest) -> io::Result<AsyncFd<T>> {
    // SAFETY: `StableFd`: the fd moves into the AsyncFd with its owner, stays open and is
    // what `as_raw_fd` returns until the AsyncFd drops or gives the value back.
    unsafe { AsyncFd::register_with_interest(t, interest) }.map_err(io::Error::from)
}
