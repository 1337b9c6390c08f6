//! The embedded kernel epoll: kernel-fd sources of an [`Epoll`](crate::Epoll), all of it —
//! the kernel epoll and its doorbell, the registrations, `add`/`modify`/`delete` of a kernel
//! fd, and their harvest. The blocking `wait` sleeps in `epoll_wait` here (`kernel_collect`)
//! once kernel fds exist: the kernel half of `super::EpollSleeper`.
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
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use super::source::sealed::KernelRef;
use super::{EpInner, Registry};
use crate::events::{Event, Events};
use crate::sys;

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

/// `ENOENT`, as the kernel answers for an fd it does not watch (no kernel epoll yet).
fn not_registered_kernel() -> io::Error {
    io::Error::from_raw_os_error(rustix::io::Errno::NOENT.raw_os_error())
}

/// The fd registered in the kernel epoll for `k`: the dup of an AutoReset
/// `KernelNotifier` (see [`KItem::dup`]), else `k`'s own fd.
fn kernel_target<'a>(reg: &'a Registry, k: &KernelRef<'a>) -> BorrowedFd<'a> {
    match reg
        .kitems
        .get(&k.fd.as_raw_fd())
        .and_then(|i| i.dup.as_ref())
    {
        Some(d) => d.as_fd(),
        None => k.fd,
    }
}

impl EpInner {
    pub(super) fn kernel_side(&self) -> io::Result<&KernelSide> {
        if let Some(k) = self.kernel.get() {
            return Ok(k);
        }
        let k = KernelSide::new()?;
        // Creation happens with `registry` held, so there is no race to lose.
        Ok(self.kernel.get_or_init(|| k))
    }

    /// `add` of a kernel fd: the kernel's `EPOLL_CTL_ADD` on the embedded kernel epoll.
    pub(super) fn kernel_add(&self, k: KernelRef<'_>, events: Events, data: u64) -> io::Result<()> {
        let mut reg = crate::loom::lock(&self.registry);
        let side = self.kernel_side()?;
        let user = k.fd.as_raw_fd();
        let dup = if k.autoreset {
            Some(sys::eventfd::dup(k.fd, true)?)
        } else {
            None
        };
        let target = dup.as_ref().map_or(k.fd, |d| d.as_fd());
        // An old entry under this number whose fd was closed meanwhile (the kernel dropped
        // its item): the kernel's answer decides, and a stale entry is replaced.
        if let Some(old) = reg.kitems.get(&user) {
            if old.dup.is_some() || k.autoreset {
                // A registered AutoReset dup is still in the kernel epoll: that is EEXIST.
                return Err(io::Error::from_raw_os_error(
                    rustix::io::Errno::EXIST.raw_os_error(),
                ));
            }
        }
        sys::epoll::add(side.epfd.as_fd(), target, events, user as u64)?;
        reg.kitems.insert(user, KItem { data, dup });
        drop(reg);
        // A waiter may be asleep in the in-memory path: let it go to the kernel side.
        self.wake_one_waiter();
        Ok(())
    }

    /// `modify` of a kernel fd (`EPOLL_CTL_MOD`).
    pub(super) fn kernel_modify(
        &self,
        k: KernelRef<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        let mut reg = crate::loom::lock(&self.registry);
        let user = k.fd.as_raw_fd();
        let side = self.kernel.get().ok_or_else(not_registered_kernel)?;
        let target = kernel_target(&reg, &k);
        sys::epoll::modify(side.epfd.as_fd(), target, events, user as u64)?;
        reg.kitems
            .entry(user)
            .and_modify(|i| i.data = data)
            .or_insert(KItem { data, dup: None });
        Ok(())
    }

    /// `delete` of a kernel fd (`EPOLL_CTL_DEL`).
    pub(super) fn kernel_delete(&self, k: KernelRef<'_>) -> io::Result<()> {
        let mut reg = crate::loom::lock(&self.registry);
        let user = k.fd.as_raw_fd();
        let side = self.kernel.get().ok_or_else(not_registered_kernel)?;
        let r = sys::epoll::delete(side.epfd.as_fd(), kernel_target(&reg, &k));
        if r.is_ok() || reg.kitems.get(&user).is_some_and(|i| i.dup.is_none()) {
            // Success, or the kernel no longer knows a plain fd we still listed (closed).
            reg.kitems.remove(&user);
        }
        r
    }

    /// Collect kernel events into `out`: wait in `epoll_wait` until `deadline` (`Some(now)`:
    /// don't block), then map them under `registry`. Returns the number delivered. Must be
    /// called with no lock held.
    pub(super) fn kernel_collect(
        &self,
        out: &mut [Event],
        deadline: Option<Instant>,
    ) -> io::Result<usize> {
        let Some(side) = self.kernel.get() else {
            return Ok(0);
        };
        let mut got = Vec::new();
        sys::epoll::wait(side.epfd.as_fd(), &mut got, out.len(), deadline)?;
        if got.is_empty() {
            return Ok(0);
        }
        let reg = crate::loom::lock(&self.registry);
        let mut n = 0;
        for (ev, tok) in got {
            if tok == BELL {
                side.drain();
                continue;
            }
            let Some(item) = reg.kitems.get(&(tok as i32)) else {
                continue;
            };
            item.deliver(ev);
            out[n] = Event {
                events: ev,
                data: item.data,
            };
            n += 1;
        }
        Ok(n)
    }
}

impl super::Epoll {
    /// A duplicate of the embedded kernel epoll's fd, creating the kernel epoll if there is
    /// none yet: readable while a kernel-fd source has an event to deliver, for a reactor to
    /// watch next to the epoll's fd view (`AsyncEpoll`). From then on this epoll's blocking
    /// `wait` sleeps in `epoll_wait`, as it does once a kernel fd is added.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn kernel_epoll_dup(&self) -> io::Result<OwnedFd> {
        let ep = &self.inner.core;
        // Created with `registry` held, as `kernel_add` does.
        let _reg = crate::loom::lock(&ep.registry);
        let side = ep.kernel_side()?;
        sys::eventfd::dup(side.epfd.as_fd(), true)
    }
}
