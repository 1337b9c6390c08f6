//! The bell slot: a lock-free place in a [`WaitQueue`](super::WaitQueue) for one edge-only
//! fd view's hook (`crate::fd`, "fill mode"), which hears only fills (`KEY_FILLED`) and
//! rings its doorbell at each, beside the locked list.
//!
//! Through the list, a fill reaches that hook by the queue lock, the list walk, a clone of
//! the hook's `Arc` into a wake batch, the unlock, and the batch's post-wake. Every one of
//! those lines is cold on a writer that wakes an idle event loop every few hundred
//! microseconds: measured on a 2-vCPU AMD EPYC, the path from `notify` to the doorbell's
//! `write(2)` took ~1.2 µs more than mio's `Waker::wake` takes to reach its own (see
//! `docs/benchmarks.md`, `waker`). In the slot, the hook sits behind a state word: a fill
//! rings it with two compare-and-swaps, no lock, no clone, no batch.
//!
//! # The protocol
//!
//! The state word is `generation << 4 | LEAVE | AGAIN | phase`. The phase says who may
//! touch the cell:
//!
//! ```text
//! EMPTY    nobody is armed; the cell is None.
//! WRITING  the owner (arming, or leaving from ARMED) fills or empties the cell.
//! ARMED    the cell holds the hook; a ring moves ARMED → RINGING.
//! RINGING  one ringer calls the hook (through a reference: the cell is not emptied);
//!          other rings set AGAIN instead, and the owner leaving sets LEAVE. When its call
//!          returns, the ringer calls again if AGAIN was set (clearing it), else empties the
//!          cell if LEAVE was set (EMPTY, next generation), else moves back to ARMED.
//! ```
//!
//! Only the owner arms and leaves, and it never waits: a leave that finds a ring in flight
//! hands the hook's `Arc` to that ringer, who drops it. A stale ringer (it loaded `ARMED`
//! of a generation since left) fails its exchange: it rings no later owner's hook.
//!
//! # Against lost rings
//!
//! The owner stores `ARMED` and then sets the queue's `BELL` bit (a `SeqCst` RMW, under
//! the queue lock with the entry's mask), so a fill's `SeqCst` load of `interest` that sees
//! the bit also sees the slot armed (or later). A fill that sees the bit either claims
//! `RINGING` (its own call follows its count change) or, finding a ring in flight, sets
//! `AGAIN` with an RMW — even if it is set already, so that the release of its count change
//! heads a release sequence the ringer's next exchange reads from: that ringer's next call
//! follows the fill and sees its count. The hook itself (the view's `ring_fill`) decides
//! under the view's `rung` lock whether the view is still in fill mode, as it does for a
//! fill that came through the list. loom: `tests::loom_bell` (the slot at the queue level)
//! and `tests::loom_fd::edge_only_*` (every edge-only view there is in the slot).
//!
//! # LOCKING
//!
//! ```text
//! This module owns no lock. The phase word grants the cell to one side at a time (above).
//! A ringer calls the hook (the view's post-wake: it takes the view's `rung` and makes the
//! doorbell's syscall) holding nothing but the phase, as the batch it replaces would have
//! run it after the queue's unlock; callers ring with no lock held. The owner arms and
//! leaves under the queue lock and drops what it takes out after unlocking.
//! ```
#![allow(unsafe_code)]

use std::sync::Arc;

use super::PostWake;
use crate::events::Events;
use crate::loom::cell::UnsafeCell;
use crate::loom::sync::atomic::{
    AtomicU64,
    Ordering::{AcqRel, Acquire, Relaxed, Release},
};

const EMPTY: u64 = 0;
const WRITING: u64 = 1;
const ARMED: u64 = 2;
const RINGING: u64 = 3;
const PHASE: u64 = 3;
/// A ring came while one was in flight: the ringer calls the hook again.
const AGAIN: u64 = 4;
/// The owner left while a ring was in flight: the ringer empties the cell.
const LEAVE: u64 = 8;
const GEN: u64 = 16;

/// The hook a ring calls.
type Hook = Arc<dyn PostWake>;

/// One fd view's lock-free place (module docs).
pub(crate) struct BellSlot {
    /// `generation << 4 | LEAVE | AGAIN | phase`.
    state: AtomicU64,
    /// The armed hook. Written only by whoever holds `WRITING`, or `RINGING` with `LEAVE`
    /// set; read by whoever holds `RINGING`.
    cell: UnsafeCell<Option<Hook>>,
}

// SAFETY: the cell is written only by the one thread that moved the phase word to WRITING
// (a compare-and-swap) or that holds RINGING with LEAVE set (the ringer, alone in RINGING),
// and read only by the one that holds RINGING; every hand-over of the phase is a Release
// RMW or store read by an Acquire RMW, so each access happens after the previous one. The
// cell holds an `Arc<dyn PostWake>`, which is `Send + Sync` (`PostWake: Send + Sync`).
unsafe impl Sync for BellSlot {}
// SAFETY: as above.
unsafe impl Send for BellSlot {}

impl std::fmt::Debug for BellSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let s = self.state.load(Relaxed);
        f.debug_struct("BellSlot")
            .field("generation", &(s / GEN))
            .field("flags", &(s & (AGAIN | LEAVE)))
            .field("phase", &(s & PHASE))
            .finish()
    }
}

impl BellSlot {
    pub(crate) fn new() -> Self {
        BellSlot {
            state: AtomicU64::new(EMPTY),
            cell: UnsafeCell::new(None),
        }
    }

    /// Store `hook` in the slot. `Err(hook)` if it is not free (another view's, or a leave
    /// whose ring is still in flight). The caller then publishes the queue's `BELL` bit.
    pub(crate) fn arm(&self, hook: Hook) -> Result<(), Hook> {
        let cur = self.state.load(Relaxed);
        if cur & PHASE != EMPTY
            || self
                .state
                .compare_exchange(cur, cur | WRITING, Acquire, Relaxed)
                .is_err()
        {
            return Err(hook);
        }
        // SAFETY: we moved the phase to WRITING: the cell is ours until we store ARMED.
        let old = self.cell.with_mut(|c| unsafe { (*c).replace(hook) });
        debug_assert!(old.is_none(), "an EMPTY bell slot held a hook");
        self.state.store(cur | ARMED, Release);
        Ok(())
    }

    /// Ring the armed hook with `key` (its `post_wake`): now, on this thread, or — a ring
    /// is in flight — by that ringer once its call returns. Nothing if nobody is armed.
    /// Must be called with no lock held.
    pub(crate) fn ring(&self, key: Events) {
        let mut cur = self.state.load(Acquire);
        loop {
            let next = match cur & PHASE {
                ARMED => cur - ARMED + RINGING,
                // Set even if set already: an RMW, so that the ringer's next exchange
                // reads from it and its next call sees this thread's change (module docs).
                RINGING => cur | AGAIN,
                _ => return,
            };
            match self.state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) if cur & PHASE == ARMED => break,
                Ok(_) => return,
                Err(seen) => cur = seen,
            }
        }
        // We hold RINGING.
        loop {
            // SAFETY: we hold RINGING: nobody writes the cell until we move the phase on
            // (a leave sets LEAVE instead), so the reference stays valid through the call.
            let hook: *const Hook = self.cell.with_mut(|c| unsafe {
                (*c).as_ref().expect("a RINGING bell slot held no hook") as *const Hook
            });
            // SAFETY: as above.
            unsafe { (*hook).post_wake(key) };
            // Hand the phase on: again, empty (the owner left), or back to ARMED.
            let mut seen = self.state.load(Acquire);
            let next = loop {
                let next = if seen & AGAIN != 0 {
                    seen & !AGAIN
                } else if seen & LEAVE != 0 {
                    (seen & !(PHASE | LEAVE)) | WRITING
                } else {
                    seen - RINGING + ARMED
                };
                match self
                    .state
                    .compare_exchange_weak(seen, next, AcqRel, Acquire)
                {
                    Ok(_) => break next,
                    Err(s) => seen = s,
                }
            };
            match next & PHASE {
                RINGING => {}
                WRITING => {
                    drop(self.take(next));
                    return;
                }
                _ => return,
            }
        }
    }

    /// The owner leaves: the hook back (for the caller to drop after unlocking), or `None`
    /// if a ring is in flight (that ringer drops it) or nobody was armed.
    pub(crate) fn disarm(&self) -> Option<Hook> {
        let mut cur = self.state.load(Acquire);
        loop {
            let next = match cur & PHASE {
                ARMED => cur - ARMED + WRITING,
                RINGING => cur | LEAVE,
                _ => {
                    debug_assert!(false, "a bell slot left by a non-owner");
                    return None;
                }
            };
            match self.state.compare_exchange_weak(cur, next, AcqRel, Acquire) {
                Ok(_) if next & PHASE == WRITING => return Some(self.take(next)),
                Ok(_) => return None,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Holding `WRITING` (word `cur`): empty the cell, free the slot (next generation).
    fn take(&self, cur: u64) -> Hook {
        // SAFETY: we moved the phase to WRITING: the cell is ours until we store EMPTY.
        let hook = self.cell.with_mut(|c| unsafe { (*c).take() });
        self.state
            .store((cur & !(PHASE | AGAIN | LEAVE)) + GEN, Release);
        hook.expect("an armed bell slot held no hook")
    }
}
