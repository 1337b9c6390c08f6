//! The embedded kernel epoll: kernel-fd sources of an [`Epoll`](crate::Epoll).
//!
//! Kernel fds (a `BorrowedFd`, a [`KernelNotifier`](crate::KernelNotifier)) are registered in
//! one kernel epoll per `Epoll`, created at the first such `add`. The kernel applies its own
//! LT/ET/ONESHOT/EXCLUSIVE rules to them; `wait` collects their events after the in-memory
//! ones, into the same buffer.
//!
//! A `wait` with nothing ready blocks in `epoll_wait` on that kernel epoll, which also
//! watches the epoll's own doorbell eventfd. In-memory wakes ring the doorbell only while a
//! waiter may be asleep in the kernel (`EpInner::kernel_sleepers`, QEMU's `notify_me`): the
//! waiter increments it and then looks at the ready list under `ready`; a callback queues
//! under `ready` and reads it there, so one of them sees the other (the same argument as for
//! `EpInner::waiters`).
//!
//! # LOCKING
//!
//! ```text
//! No lock of its own. `Registry::kitems` is guarded by EpInner::registry; the kernel epoll
//! fd and the doorbell are immutable once created (OnceLock) and used without a lock —
//! `epoll_wait` is never called with a lock held.
//! ```

use std::io;
use std::os::fd::{AsFd, OwnedFd};

use crate::sys;
use crate::Events;

/// The kernel event data that marks the doorbell.
pub(crate) const BELL: u64 = u64::MAX;

/// The kernel epoll and its doorbell.
pub(crate) struct KernelSide {
    pub(crate) epfd: OwnedFd,
    bell: OwnedFd,
}

impl KernelSide {
    pub(crate) fn new() -> io::Result<KernelSide> {
        let epfd = sys::epoll::create()?;
        let bell = sys::eventfd::create(0, false, true)?;
        sys::epoll::add(epfd.as_fd(), bell.as_fd(), Events::IN, BELL)?;
        Ok(KernelSide { epfd, bell })
    }

    /// Wake a waiter asleep in `epoll_wait`. A saturated counter (`EAGAIN`) is rung already.
    pub(crate) fn ring(&self) {
        let _ = sys::eventfd::write(self.bell.as_fd(), 1);
    }

    /// Reset the doorbell after it woke someone.
    pub(crate) fn drain(&self) {
        let _ = sys::eventfd::read(self.bell.as_fd());
    }
}

/// A registered kernel fd. Guarded by `EpInner::registry`.
pub(crate) struct KItem {
    /// The user's data.
    pub(crate) data: u64,
    /// For an AutoReset [`KernelNotifier`](crate::KernelNotifier): a duplicate of its fd,
    /// which is what is registered in the kernel epoll, and what the delivery of `IN` reads.
    /// Holding it keeps the file open, so such an item stays until `delete` (the kernel's
    /// rule for a file that another descriptor still refers to).
    pub(crate) dup: Option<OwnedFd>,
}

impl KItem {
    /// Deliver a kernel event: AutoReset reads the eventfd (the count becomes 0).
    pub(crate) fn deliver(&self, ev: Events) {
        if let (Some(d), true) = (&self.dup, ev.contains(Events::IN)) {
            let _ = sys::eventfd::read(d.as_fd());
        }
    }
}
