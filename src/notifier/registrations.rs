//! Where a kernel-fd source is registered ([`Registrations`]), and the delivery rule of a
//! source that has one ([`KernelDeliver`]): shared by every kind an `Epoll` watches as a
//! kernel fd — [`KernelNotifier`](crate::KernelNotifier) and `SharedNotifier` (Linux) and
//! the kick/call halves (`evfd::halves`, wherever an `Epoll` has a kernel side: Linux,
//! macOS, FreeBSD).

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::{Arc, Weak};

use crate::sys::fd::Fd;

use crate::events::Events;
use crate::loom::sync::Mutex;

/// A kernel-fd source's (a `KernelNotifier`'s, a half's) registrations in epolls' kernel
/// sides: (epoll, token) pairs.
/// Dropping it removes each from its epoll (`EPOLL_CTL_DEL` while the fd is still open), so
/// a dropped notifier leaves silently in every mode, whatever other fds refer to the
/// eventfd, and its number is free for the next `add` at once.
///
/// LOCKING: `list` is a leaf mutex, taken by an epoll's kernel `add`/`delete` under that
/// epoll's registry, and by `Drop` alone (which then takes each epoll's registry). Always
/// inside a fork guard (`sys::fork::guard`), so a child never inherits it held: a child
/// that adds a `KernelNotifier` shared with its parent to its own epoll cannot deadlock.
pub(crate) struct Registrations {
    /// The fork epoch it was made in (`sys::fork`): see `Drop`.
    born: u32,
    fd: Arc<Fd>,
    reset: Weak<dyn KernelDeliver>,
    list: Mutex<Vec<(Weak<dyn KernelFdSet>, u64)>>,
}

/// The delivery of a kernel event to a source that has its own delivery rule, per kind: an
/// AutoReset `KernelNotifier` resets its eventfd, an AutoReset `SharedNotifier` its shared
/// count, a pipe consumer drains its pipe (or reports what it holds). An AutoReset kind
/// delivers `IN` only if its reset took something: at most one delivery per reset that
/// succeeded.
pub(crate) trait KernelDeliver: Send + Sync {
    /// Reset; `true` iff this call took a non-zero count.
    fn deliver_in(&self) -> bool;

    /// The events to deliver for the events `ev` the kernel reported for the registered fd
    /// (empty: deliver nothing). By default, a reset ([`deliver_in`](Self::deliver_in)) on
    /// `IN`, which stays only if the reset took something.
    fn deliver(&self, mut ev: Events) -> Events {
        if ev.contains(Events::IN) && !self.deliver_in() {
            ev.remove(Events::IN);
        }
        ev
    }
}

/// What holds a registration of a kernel fd (an epoll's kernel side). Implemented above this
/// module (`crate::epoll`), so that the notifier layer imports nothing from the epoll.
pub(crate) trait KernelFdSet: Send + Sync {
    /// Remove registration `token` of `fd` (still open): the owner was dropped.
    fn forget_kernel_fd(&self, token: u64, fd: BorrowedFd<'_>);
}

impl Registrations {
    /// For an object that owns the kernel fd `fd` it is registered by, and resets itself
    /// through `reset` when an AutoReset `IN` is delivered (a `KernelNotifier`: its
    /// eventfd's `read(2)`; another owner may reset in-memory state instead).
    pub(crate) fn new(fd: Arc<Fd>, reset: Weak<dyn KernelDeliver>) -> Registrations {
        Registrations {
            born: crate::sys::fork::epoch(),
            fd,
            reset,
            list: Mutex::new(Vec::new()),
        }
    }

    /// What delivers an AutoReset `IN` (held weakly by the epoll items).
    pub(crate) fn reset(&self) -> Weak<dyn KernelDeliver> {
        Weak::clone(&self.reset)
    }

    /// The kernel fd the owner is registered by, held weakly (an epoll's kernel side reads
    /// an AutoReset `KernelNotifier`'s eventfd through it: `epoll::kernel::fds`).
    pub(crate) fn fd_weak(&self) -> Weak<Fd> {
        Arc::downgrade(&self.fd)
    }

    /// The kernel fd the owner is registered by.
    pub(crate) fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The events a kernel epoll registration of the fd is made with, for `events` asked:
    /// edge-triggered while memory keeps the count (`sys::mem_count`), whose
    /// base count would keep a level-triggered item ready for ever; an item for more than
    /// `IN` puts the count in the kernel first.
    pub(crate) fn kernel_events(&self, events: Events) -> io::Result<Events> {
        if self.fd.mem_kept() && events.difference(Events::ET) != Events::IN {
            self.fd.flush()?;
        }
        Ok(self.fd.kernel_events(events))
    }

    /// The owner gives its fd away (`From<_> for OwnedFd`): leave every epoll first (as a
    /// drop would), then take `fd` back, which nothing else holds strongly once the
    /// registrations are gone.
    pub(crate) fn release(self, fd: Arc<Fd>) -> OwnedFd {
        drop(self);
        crate::sys::unshare_fd(fd)
    }

    /// Registered in `ep` as `token`.
    pub(crate) fn record(&self, set: Weak<dyn KernelFdSet>, token: u64) {
        let _fork = crate::sys::fork::guard();
        let mut l = crate::loom::lock(&self.list);
        l.retain(|(w, _)| w.strong_count() > 0);
        l.push((set, token));
    }

    /// `token` left its set (deleted). Tokens are unique process-wide.
    pub(crate) fn forget(&self, token: u64) {
        let _fork = crate::sys::fork::guard();
        crate::loom::lock(&self.list).retain(|(_, t)| *t != token);
    }
}

impl Drop for Registrations {
    fn drop(&mut self) {
        let list = if crate::sys::fork::forked(self.born) {
            // In a child process (`sys::fork`): `list` may have been locked at the fork by a
            // thread that does not exist here. Only a free lock is taken; epolls made before
            // the fork ignore the call (`forget_kernel_fd`), the child's own are forgotten.
            match self.list.try_lock() {
                Ok(mut l) => std::mem::take(&mut *l),
                Err(std::sync::TryLockError::Poisoned(p)) => std::mem::take(&mut *p.into_inner()),
                Err(std::sync::TryLockError::WouldBlock) => return,
            }
        } else {
            let _fork = crate::sys::fork::guard();
            std::mem::take(&mut *crate::loom::lock(&self.list))
        };
        for (w, token) in list {
            if let Some(set) = w.upgrade() {
                set.forget_kernel_fd(token, self.fd.as_fd());
            }
        }
    }
}
