//! The loom doorbell: an in-memory flag, no syscalls.
//!
//! It asserts the protocol's promise to every backend: `drain` only while rung. (`ring`
//! while rung is the protocol's deliberate re-ring, see `crate::fd`; it is counted.)

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use super::{Counters, Doorbell, DoorbellStats};

/// A flag standing for the fd's readability. Guarded by the protocol's mutex, so plain
/// `std` atomics suffice (no interleaving of its own to explore).
#[derive(Debug, Default)]
pub(crate) struct MockDoorbell {
    rung: AtomicBool,
    counters: Counters,
}

impl MockDoorbell {
    /// Whether "the fd" is readable now.
    pub(crate) fn is_rung(&self) -> bool {
        self.rung.load(Relaxed)
    }
}

impl Doorbell for MockDoorbell {
    fn create(_cloexec: bool) -> io::Result<Self> {
        Ok(MockDoorbell::default())
    }

    fn ring(&self) -> io::Result<()> {
        self.counters.note_ring();
        self.rung.store(true, Relaxed);
        Ok(())
    }

    fn ring_edge(&self) -> io::Result<()> {
        self.ring()
    }

    fn drain(&self) -> io::Result<()> {
        self.counters.note_drain();
        assert!(self.rung.swap(false, Relaxed), "drain of an empty doorbell");
        Ok(())
    }

    fn as_fd(&self) -> BorrowedFd<'_> {
        unreachable!("the loom doorbell has no fd")
    }

    fn lend(&self) -> BorrowedFd<'_> {
        unreachable!("the loom doorbell has no fd")
    }

    fn stats(&self) -> DoorbellStats {
        self.counters.get()
    }
}
