//! A [`SignalNotifier`](crate::SignalNotifier)'s slot: the handler half of its write and
//! the relay half (`flush`), apart from the relay thread so that loom models them
//! (`tests::loom_signal`). Protocol: `super::signal`'s module docs.

use std::io;

use crate::events::{Events, KEY_FILLED};
use crate::loom::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use crate::loom::SeedLoad;
use crate::mode::{self, Mode, WriteRefused};

use super::Notifier;

/// One handle's recorded wakes.
pub(crate) struct Slot {
    notifier: Notifier,
    /// Writes made in handlers whose wake is still owed.
    writes: AtomicU64,
    /// Their units (Semaphore mode wakes one reader per unit).
    units: AtomicU64,
    /// One of them was a fill (`KEY_FILLED`) that an edge-only fd view listens for.
    fills: AtomicBool,
}

impl Slot {
    /// A slot for `notifier` with nothing recorded.
    pub(crate) fn new(notifier: Notifier) -> Slot {
        Slot {
            notifier,
            writes: AtomicU64::new(0),
            units: AtomicU64::new(0),
            fills: AtomicBool::new(false),
        }
    }

    /// The notifier it writes.
    pub(crate) fn notifier(&self) -> &Notifier {
        &self.notifier
    }

    /// Whether a wake is recorded.
    pub(crate) fn owes(&self) -> bool {
        self.writes.load(SeqCst) != 0
    }

    /// The handler half of a write (module docs): the lock-free CAS, then, if an entry
    /// wants `IN`, the record. Returns whether a wake was recorded (the caller rings the
    /// relay). Async-signal-safe.
    pub(crate) fn write(&self, n: u64) -> io::Result<bool> {
        let inner = &self.notifier.core;
        if inner.forked() {
            return Err(io::ErrorKind::Unsupported.into());
        }
        // The same lock-free CAS as `Inner::try_write`.
        let mut cur = inner.count.seed_load();
        loop {
            let next = match mode::write(cur, n) {
                Ok(next) => next,
                Err(WriteRefused::Invalid) => return Err(crate::error::invalid()),
                Err(WriteRefused::Full) => return Err(crate::error::would_block()),
            };
            match inner.count.compare_exchange_weak(cur, next, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
        // `WaitQueue::wake`'s fast path: nobody wants IN (nor, for a write from 0, a
        // fill's `KEY_FILLED`: an edge-only fd view), no wake is owed.
        crate::loom::dekker_fence();
        let interest = inner.wq.interest();
        let filled = cur == 0 && interest.contains(KEY_FILLED);
        if !interest.contains(Events::IN) && !filled {
            return Ok(false);
        }
        if filled {
            self.fills.store(true, SeqCst);
        }
        self.units.fetch_add(n, SeqCst);
        self.writes.fetch_add(1, SeqCst);
        Ok(true)
    }

    /// Make the owed wakes, if any (relay thread, or the handle's drop).
    pub(crate) fn flush(&self) {
        let writes = self.writes.swap(0, SeqCst);
        if writes == 0 {
            return;
        }
        let units = self.units.swap(0, SeqCst);
        let key = if self.fills.swap(false, SeqCst) {
            Events::IN | KEY_FILLED
        } else {
            Events::IN
        };
        let inner = &self.notifier.core;
        if inner.forked() {
            return;
        }
        // As `Inner::wake_readers` for each write: one exclusive reader per write
        // (Counter, AutoReset) or per unit (Semaphore).
        let nr = match inner.mode {
            Mode::Semaphore => units.max(writes),
            Mode::Counter | Mode::AutoReset => writes,
        };
        inner
            .wq
            .wake(key, usize::try_from(nr).unwrap_or(usize::MAX));
    }
}
