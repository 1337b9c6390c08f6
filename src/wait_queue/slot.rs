//! The task slot: a lock-free place in a [`WaitQueue`](super::WaitQueue) for one task that
//! waits exclusively for `IN` (a `read_async`), beside the locked list.
//!
//! A task that registers in the list pays for the queue lock twice (its `add`, then the
//! waker's walk and `remove`) and for the list's bookkeeping; a one-reader hand-off — the
//! common async shape, a producer and its consumer — needs none of it. The slot holds that
//! one waiter's `Waker` behind a state word; registering, being woken and leaving are each
//! one compare-and-swap on it, no lock, no allocation.
//!
//! # The protocol
//!
//! The state word is `generation << 2 | phase`. The phase says who may touch the waker
//! cell:
//!
//! ```text
//! EMPTY    nobody is registered; the cell is None.
//! WRITING  the owner (who moved EMPTY → WRITING) fills the cell; nobody else touches it.
//! ARMED    the cell holds the owner's waker; whoever moves ARMED → TAKING may take it.
//! TAKING   the taker (a waker side claiming the owner, or the owner leaving) empties the
//!          cell, clears SLOT in `interest`, then stores EMPTY with the next generation.
//! ```
//!
//! The owner remembers the generation it armed. It learns whether a wake claimed it with one
//! look: the word is still `ARMED` at its generation (not claimed: it takes its own waker
//! back), or anything else (a taker has its generation, or has finished with it: claimed).
//! A generation is never reused, so a later owner's `ARMED` is never mistaken for ours.
//! The claim is a release (and the owner's look an acquire): an owner that learns it was
//! claimed also sees the state change the wake announced, which its hand-on looks at.
//!
//! # Against lost wakeups
//!
//! The slot's `SLOT` bit lives in the queue's `interest` word, so a waker side's one
//! `SeqCst` load (the waker half of the queue's Dekker pair) sees the list and the slot at
//! once. The owner stores `ARMED` and then sets `SLOT` (a `SeqCst` RMW), then re-checks
//! its operation: either the waker side's load comes after the RMW and it claims the owner,
//! or the owner's re-check comes after the state change and sees it. `SLOT` is cleared only
//! by a taker, before it stores `EMPTY`, so no later owner's bit is ever cleared by an
//! earlier taker. loom: `tests::loom_async` (every model there puts its first reader in the
//! slot) and `tests::loom_slot`.
//!
//! # LOCKING
//!
//! ```text
//! This module owns no lock. The phase word grants the cell to one side at a time (above);
//! no foreign code (Waker::clone, wake or drop) runs inside a phase: a taken waker is
//! returned to the caller, who wakes or drops it after everything else.
//! ```
//!
//! The cell is the crate's one `UnsafeCell` outside `sys`: the phase word is its lock-free
//! guard, checked by loom's cell (which reports any two accesses not ordered by it).
#![allow(unsafe_code)]

use std::task::Waker;

use crate::loom::cell::UnsafeCell;
use crate::loom::sync::atomic::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release, SeqCst},
};

const EMPTY: u64 = 0;
const WRITING: u64 = 1;
const ARMED: u64 = 2;
const TAKING: u64 = 3;
const PHASE: u64 = 3;
const GEN: u64 = 4;

/// The generation an owner armed: its ticket to leave or learn it was claimed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Ticket(u64);

/// One task's lock-free place (module docs).
pub(crate) struct TaskSlot {
    /// `generation << 2 | phase`.
    state: AtomicU64,
    /// The owner's waker. Accessed only by whoever holds the `WRITING` or `TAKING` phase.
    cell: UnsafeCell<Option<Waker>>,
}

// SAFETY: the cell is only read or written by the one thread that moved the phase word to
// WRITING or TAKING (a compare-and-swap, so at most one at a time), and the phase
// hand-overs are Release stores read by Acquire RMWs, so each access happens after the
// previous one. A `Waker` is `Send + Sync`.
unsafe impl Sync for TaskSlot {}
// SAFETY: as above; the cell holds a `Waker`, which is `Send`.
unsafe impl Send for TaskSlot {}

impl std::fmt::Debug for TaskSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.load(Relaxed);
        f.debug_struct("TaskSlot")
            .field("generation", &(s >> 2))
            .field("phase", &(s & PHASE))
            .finish()
    }
}

impl TaskSlot {
    pub(crate) fn new() -> Self {
        TaskSlot {
            state: AtomicU64::new(EMPTY),
            cell: UnsafeCell::new(None),
        }
    }

    /// Whether a waiter is armed here (a snapshot, for `len` and tests).
    pub(crate) fn is_armed(&self) -> bool {
        self.state.load(SeqCst) & PHASE == ARMED
    }

    /// Take the slot and store `waker` in it. `Err(waker)` if it is not free. The caller
    /// then publishes the slot's `SLOT` bit and re-checks its operation (module docs).
    pub(crate) fn arm(&self, waker: Waker) -> Result<Ticket, Waker> {
        let cur = self.state.load(Relaxed);
        if cur & PHASE != EMPTY
            || self
                .state
                .compare_exchange(cur, cur | WRITING, Acquire, Relaxed)
                .is_err()
        {
            return Err(waker);
        }
        // SAFETY: we moved the phase to WRITING: the cell is ours until we store ARMED.
        let old = self.cell.with_mut(|c| unsafe { (*c).replace(waker) });
        debug_assert!(old.is_none(), "an EMPTY slot held a waker");
        self.state.store(cur | ARMED, Release);
        Ok(Ticket(cur))
    }

    /// Claim the armed waiter, if any: its waker, for the caller to wake after everything
    /// else (`clear_bit` clears `SLOT` in the queue's `interest`). `None` if nobody is armed.
    pub(crate) fn claim(&self, clear_bit: impl FnOnce()) -> Option<Waker> {
        let mut cur = self.state.load(Acquire);
        loop {
            if cur & PHASE != ARMED {
                return None;
            }
            match self
                .state
                .compare_exchange_weak(cur, cur - ARMED + TAKING, AcqRel, Acquire)
            {
                Ok(_) => return Some(self.take(cur - ARMED, clear_bit)),
                Err(seen) => cur = seen,
            }
        }
    }

    /// The owner leaves (done, cancelled, or re-registering): its own waker back (for the
    /// caller to drop or reuse after the rest), or `Claimed` if a wake claimed it first.
    pub(crate) fn disarm(&self, t: Ticket, clear_bit: impl FnOnce()) -> Result<Waker, Claimed> {
        // The common case after a wake, answered by a load: a taker has moved the word on.
        // Acquire, as the failed exchange below: what the claimer did before its claim (the
        // write the wake announces) is seen by what the owner does next (its hand-on's look
        // at the count).
        if self.state.load(Acquire) != t.0 | ARMED {
            return Err(Claimed);
        }
        match self
            .state
            .compare_exchange(t.0 | ARMED, t.0 | TAKING, Acquire, Acquire)
        {
            Ok(_) => Ok(self.take(t.0, clear_bit)),
            Err(_) => Err(Claimed),
        }
    }

    /// Holding `TAKING` at generation `gen`: empty the cell, clear `SLOT`, free the slot.
    fn take(&self, gen: u64, clear_bit: impl FnOnce()) -> Waker {
        // SAFETY: we moved the phase to TAKING: the cell is ours until we store EMPTY.
        let w = self.cell.with_mut(|c| unsafe { (*c).take() });
        // Before the slot can be armed again, so that a later owner's bit is never cleared.
        clear_bit();
        self.state.store(gen + GEN, Release);
        w.expect("an ARMED slot held no waker")
    }
}

/// A wake claimed the owner before it left.
#[derive(Debug)]
pub(crate) struct Claimed;
