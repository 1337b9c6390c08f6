//! The protocol's binding to this OS (`protocol::{Words, Os}`): the region's words as
//! atomics in the shared mapping ([`Region`]), and the shared futex, the readers' sleep bell
//! and the doorbell, two eventfds ([`SysOs`]), with the syscall counters behind
//! `SharedNotifier::stats`.

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::protocol::{self, Futex, Os, Wait, Woke, Words};
use crate::sys::{eventfd, futex, shm};

/// The region's words, as atomics in the mapping.
pub(super) struct Region(pub(super) shm::Mapping);

impl Words for Region {
    #[inline]
    fn magic(&self) -> &AtomicU64 {
        self.0.u64_at(protocol::OFF_MAGIC)
    }
    #[inline]
    fn meta(&self) -> &AtomicU64 {
        self.0.u64_at(protocol::OFF_META)
    }
    #[inline]
    fn count(&self) -> &AtomicU64 {
        self.0.u64_at(protocol::OFF_COUNT)
    }
    #[inline]
    fn sleepers(&self) -> &AtomicU64 {
        self.0.u64_at(protocol::OFF_SLEEPERS)
    }
    #[inline]
    fn edges(&self) -> &AtomicU64 {
        self.0.u64_at(protocol::OFF_EDGES)
    }
    #[inline]
    fn rseq(&self) -> &AtomicU32 {
        self.0.u32_at(protocol::OFF_RSEQ)
    }
    #[inline]
    fn wseq(&self) -> &AtomicU32 {
        self.0.u32_at(protocol::OFF_WSEQ)
    }
    #[inline]
    fn rslot(&self) -> &AtomicU32 {
        self.0.u32_at(protocol::OFF_RSLOT)
    }
    #[inline]
    fn waker_cpu(&self, which: Futex) -> Option<&AtomicU32> {
        Some(self.0.u32_at(match which {
            Futex::Readers => protocol::OFF_RWAKER,
            Futex::Writers => protocol::OFF_WWAKER,
        }))
    }
}

/// The OS side: the shared futex, the readers' sleep bell and the doorbell.
pub(super) struct SysOs {
    /// Shared with the epoll registrations (`SharedCore::regs`), which must delete themselves
    /// while it is open.
    pub(super) bell: Arc<crate::sys::fd::Fd>,
    /// The readers' sleep bell (`protocol`, "The sleep bell"): an eventfd made blocking,
    /// which only the holder of `rslot` reads.
    pub(super) sleep: OwnedFd,
    pub(super) futex_wakes: AtomicU64,
    pub(super) futex_waits: AtomicU64,
    pub(super) bell_wakes: AtomicU64,
    pub(super) bell_waits: AtomicU64,
    pub(super) rings: AtomicU64,
    pub(super) drains: AtomicU64,
}

impl Os for SysOs {
    fn futex_wait(
        &self,
        _: Futex,
        word: &AtomicU32,
        expected: u32,
        deadline: Option<Instant>,
    ) -> io::Result<Woke> {
        self.futex_waits.fetch_add(1, Relaxed);
        Ok(match futex::wait(word, expected, deadline)? {
            futex::Woke::Maybe => Woke::Maybe,
            futex::Woke::TimedOut => Woke::TimedOut,
        })
    }

    fn futex_wake(&self, _: Futex, word: &AtomicU32, n: u32) {
        self.futex_wakes.fetch_add(1, Relaxed);
        // EFAULT/EINVAL cannot happen on a mapped, aligned word; nothing to report to.
        let _ = futex::wake(word, n);
    }

    // Inlined into `Protocol::block`, so that the sleep's `read(2)` sits in the caller's frame
    // (`protocol` docs, "Syscalls in the caller's frame").
    #[inline(always)]
    fn bell_sleep(&self, deadline: Option<Instant>) -> io::Result<Woke> {
        self.bell_waits.fetch_add(1, Relaxed);
        Ok(if eventfd::sleep_read(self.sleep.as_fd(), deadline)? {
            Woke::Maybe
        } else {
            Woke::TimedOut
        })
    }

    // Inlined into the writer's call, for the same reason (a write's ring is where the
    // sleeper it wakes preempts the writer on one CPU).
    #[inline(always)]
    fn bell_ring(&self, wait: Wait) {
        self.bell_wakes.fetch_add(1, Relaxed);
        // EAGAIN: saturated (a peer's doing), so readable: the holder wakes anyway.
        let _ = match wait {
            Wait::Allowed => eventfd::ring_waiting(self.sleep.as_fd()),
            Wait::Never => bell_write(self.sleep.as_fd(), 1),
        };
    }

    fn ring(&self) {
        self.rings.fetch_add(1, Relaxed);
        // EAGAIN: saturated (a peer wrote the count up to the limit), so readable: rung for
        // level watchers. An edge-triggered watcher (an edge-only view, which nobody
        // drains) still needs an edge: a write of 0 fits below the limit and wakes the
        // eventfd's queue, which is an edge, and changes nothing.
        if let Err(e) = bell_write(self.bell.as_fd(), 1) {
            if e.kind() == io::ErrorKind::WouldBlock {
                let _ = bell_write(self.bell.as_fd(), 0);
            }
        }
    }

    fn drain(&self) {
        self.drains.fetch_add(1, Relaxed);
        // EAGAIN: already 0.
        let _ = bell_read(self.bell.as_fd());
    }

    fn pulse(&self) {
        self.rings.fetch_add(1, Relaxed);
        // A write of 0 wakes the doorbell's watchers and changes nothing; it cannot fail on
        // an eventfd (not EAGAIN: it adds nothing).
        let _ = bell_write(self.bell.as_fd(), 0);
    }

    fn backoff(&self, deadline: Option<Instant>) {
        let mut d = Duration::from_millis(1);
        if let Some(dl) = deadline {
            d = d.min(dl.saturating_duration_since(Instant::now()));
        }
        std::thread::sleep(d);
    }
}

impl SysOs {
    pub(super) fn new(bell: OwnedFd, sleep: OwnedFd) -> SysOs {
        SysOs {
            // The peer process holds it by design.
            bell: Arc::new(crate::sys::fd::Fd::shared(bell)),
            sleep,
            futex_wakes: AtomicU64::new(0),
            futex_waits: AtomicU64::new(0),
            bell_wakes: AtomicU64::new(0),
            bell_waits: AtomicU64::new(0),
            rings: AtomicU64::new(0),
            drains: AtomicU64::new(0),
        }
    }
}

/// Every doorbell and sleep-bell write of this module (ring, pulse, `bell_ring`). Both
/// open file descriptions are the peer's too, so a peer can change `O_NONBLOCK` on them
/// (the sleep bell is blocking by design) and fill the count: the write never waits,
/// whatever that flag says (`eventfd::write_now`).
fn bell_write(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    eventfd::write_now(fd, n)
}

/// Every doorbell read of this module (drain); as [`bell_write`].
fn bell_read(fd: BorrowedFd<'_>) -> io::Result<u64> {
    eventfd::read_now(fd)
}
