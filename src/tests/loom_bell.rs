//! loom models of the bell slot (`wait_queue::bell`) at the wait-queue level: fills that
//! ring it while a ring is in flight, and its owner leaving while a ring is in flight.
//! (`loom_fd::edge_only_*` cover it through real fd views, whose edge-only hooks sit in the
//! slot.)
//!
//! A "fill" here is what a notifier's write from 0 does: a `SeqCst` RMW of the state, then
//! a wake with `IN | KEY_FILLED`. The hook records the highest state it saw when called.
//! loom's `UnsafeCell` checks the slot's cell: two accesses not ordered by the phase word
//! fail the model.

use std::sync::Arc;

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use loom::thread;

use crate::events::{Events, KEY_FILLED};
use crate::wait_queue::{Callback, PostWake, Target, WaitQueue, WakeBatch};

/// The hook: counts its calls and keeps the highest `state` it saw.
struct Hook {
    state: Arc<AtomicU64>,
    calls: AtomicUsize,
    seen: AtomicU64,
}

impl PostWake for Hook {
    fn post_wake(&self, key: Events) {
        assert!(key.contains(KEY_FILLED), "a bell rung for no fill");
        self.calls.fetch_add(1, SeqCst);
        self.seen.fetch_max(self.state.load(SeqCst), SeqCst);
    }
}

/// The view's list entry: in list fill mode (the slot was taken), it hears fills under
/// the queue lock and defers the hook's call to after the unlock, as an fd view's does.
struct Entry(Arc<Hook>);

impl Callback for Entry {
    fn wake(&self, key: Events, batch: &mut WakeBatch) -> bool {
        if key.contains(KEY_FILLED) {
            batch.push_post(self.0.clone() as Arc<dyn PostWake>, key);
        }
        true
    }
    fn detach(&self) {}
}

fn hook(state: &Arc<AtomicU64>) -> Arc<Hook> {
    Arc::new(Hook {
        state: state.clone(),
        calls: AtomicUsize::new(0),
        seen: AtomicU64::new(0),
    })
}

/// A view's entry (no mask yet) with `hook`, put in fill mode: whether in the slot.
fn enter(wq: &WaitQueue, hook: &Arc<Hook>) -> (crate::wait_queue::list::Key, bool) {
    let key = wq.add(
        Events::empty(),
        false,
        false,
        Target::Callback(Arc::new(Entry(hook.clone()))),
    );
    let in_slot = wq.enter_fill_mode(key, hook.clone() as Arc<dyn PostWake>, || {});
    (key, in_slot)
}

/// A queue with a hook armed in its bell slot, and the hook's entry.
fn armed() -> (
    Arc<WaitQueue>,
    Arc<AtomicU64>,
    Arc<Hook>,
    crate::wait_queue::list::Key,
) {
    let wq = Arc::new(WaitQueue::new());
    let state = Arc::new(AtomicU64::new(0));
    let h = hook(&state);
    let (key, in_slot) = enter(&wq, &h);
    assert!(in_slot, "a free slot");
    assert!(wq.interest().contains(KEY_FILLED));
    (wq, state, h, key)
}

/// A fill: the state's RMW, then the wake a write from 0 makes.
fn fill(wq: &WaitQueue, state: &AtomicU64) {
    state.fetch_add(1, SeqCst);
    wq.wake(Events::IN | KEY_FILLED, 1);
}

/// A fill on a thread of its own.
fn racing_fill(wq: &Arc<WaitQueue>, state: &Arc<AtomicU64>) -> thread::JoinHandle<()> {
    let (wq, state) = (wq.clone(), state.clone());
    thread::spawn(move || fill(&wq, &state))
}

/// Two fills race: one may find the other's ring in flight and leave its ring to it
/// (`AGAIN`). Every fill is followed by a call that sees it: the last call saw both.
#[test]
fn bell_two_fills() {
    super::model("bell_two_fills", 3, || {
        let (wq, state, h, key) = armed();
        let other = racing_fill(&wq, &state);
        fill(&wq, &state);
        other.join().unwrap();
        assert_eq!(h.seen.load(SeqCst), 2, "a fill no ring followed");
        let calls = h.calls.load(SeqCst);
        assert_eq!(
            calls, 2,
            "one call per fill (its own, or an AGAIN of the ring in flight)"
        );
        assert!(wq.remove_from_bell(key));
        assert_eq!(Arc::strong_count(&h), 1, "the slot kept the hook");
        assert_eq!(wq.interest(), Events::empty());
    });
}

/// The owner leaves (its view dropped) while a fill rings: the hook's `Arc` is dropped
/// exactly once, by whichever of the two holds the cell last, and the slot is free again:
/// a new owner arms it and hears the next fill.
#[test]
fn bell_leave_vs_ring() {
    super::model("bell_leave_vs_ring", 3, || {
        let (wq, state, h, key) = armed();
        let filler = racing_fill(&wq, &state);
        assert!(wq.remove_from_bell(key));
        filler.join().unwrap();
        assert!(h.calls.load(SeqCst) <= 1);
        assert_eq!(Arc::strong_count(&h), 1, "the hook leaked or was kept");
        assert_eq!(wq.interest(), Events::empty(), "a stale BELL bit");
        let next = hook(&state);
        let (k2, in_slot) = enter(&wq, &next);
        assert!(in_slot, "the slot was not freed");
        fill(&wq, &state);
        assert_eq!(next.calls.load(SeqCst), 1);
        assert_eq!(next.seen.load(SeqCst), 2);
        assert!(wq.remove_from_bell(k2));
        assert_eq!(Arc::strong_count(&next), 1);
    });
}

/// The owner leaves fill mode (its entry back to a list mask) while a fill rings, then
/// enters it again: it finds the slot free, or the ring still in flight and its hook
/// listening in the list instead. Either way the next fill reaches it once, and nothing
/// is kept at the end.
#[test]
fn bell_leave_and_reenter_vs_ring() {
    super::model("bell_leave_and_reenter_vs_ring", 3, || {
        let (wq, state, h, key) = armed();
        let filler = racing_fill(&wq, &state);
        assert!(wq.leave_fill_mode(key, Events::empty(), true, || {}));
        let in_slot = wq.enter_fill_mode(key, h.clone() as Arc<dyn PostWake>, || {});
        filler.join().unwrap();
        let before = h.calls.load(SeqCst);
        fill(&wq, &state);
        assert_eq!(h.calls.load(SeqCst), before + 1, "in slot: {in_slot}");
        assert_eq!(h.seen.load(SeqCst), 2);
        if in_slot {
            assert!(wq.remove_from_bell(key));
        } else {
            assert!(wq.remove(key));
        }
        assert_eq!(Arc::strong_count(&h), 1, "in slot: {in_slot}");
        assert_eq!(wq.interest(), Events::empty());
    });
}
