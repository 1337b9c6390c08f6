//! Registering evfd fds with tokio's reactor (`AsyncFd`).
//!
//! `AsyncFd::register_with_interest` is `unsafe` (tokio ≥ 1.51.6): the fd must stay open
//! and be the same fd for the `AsyncFd`'s whole life. [`AsyncSource`] is a closed set of
//! our own types for which that holds, so the one `unsafe` block lives here.
#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsRawFd, RawFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::{FdView, KernelNotifier, Notifier};

/// What an `AsyncFdNotifier` watches.
#[derive(Debug)]
pub(crate) enum AsyncSource {
    /// An in-memory notifier through a fd view of it: readable only (the doorbell shows
    /// `IN`; room to write is waited for on the notifier's own queue).
    View { notifier: Notifier, view: FdView },
    /// A kernel eventfd: readable and writable, as the kernel reports.
    Kernel(KernelNotifier),
}

impl AsRawFd for AsyncSource {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            AsyncSource::View { view, .. } => view.as_raw_fd(),
            AsyncSource::Kernel(k) => k.as_raw_fd(),
        }
    }
}

impl AsyncSource {
    /// Register with the current tokio reactor.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled (tokio's own panic).
    pub(crate) fn register(self) -> io::Result<AsyncFd<AsyncSource>> {
        let interest = match self {
            AsyncSource::View { .. } => Interest::READABLE,
            AsyncSource::Kernel(_) => Interest::READABLE | Interest::WRITABLE,
        };
        // SAFETY: the fd is owned by the value that moves into the AsyncFd and is never
        // replaced: a FdView's fd is its doorbell's, owned by the view's core, which the
        // view keeps alive and never swaps; a KernelNotifier's is an OwnedFd field that no
        // method replaces or closes. So it stays open and `as_raw_fd` returns the same fd
        // until the AsyncFd drops or gives the value back.
        unsafe { AsyncFd::register_with_interest(self, interest) }.map_err(io::Error::from)
    }
}
