//! In-crate epoll tests: fast paths that are only visible from inside, and a Miri-sized
//! tour of the unsafe-free but pointer-heavy lifetimes (items, nesting, drops).

use std::sync::atomic::Ordering::Relaxed;
use std::time::Duration;

use crate::epoll::Epoll;
use crate::events::{Event, Events};
use crate::mode::Mode;
use crate::notifier::Notifier;

fn wait0(ep: &Epoll) -> Vec<(u32, u64)> {
    let mut buf = [Event::default(); 8];
    let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
    buf[..n].iter().map(|e| (e.events.bits(), e.data)).collect()
}

#[test]
fn unwanted_wakes_take_no_lock() {
    // PRI only: neither the write's IN nor the read's OUT reaches the wait-queue lock.
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::PRI, 0).unwrap();
    for _ in 0..100 {
        n.write(1).unwrap();
        n.read().unwrap();
    }
    assert_eq!(n.core.wq.slow_wakes.load(Relaxed), 0);
    // IN: the first write queues the item (lock), the second finds it queued and settles
    // the queue (lock), the rest skip the lock; the reads' OUT wakes never take it.
    ep.modify(&n, Events::IN, 0).unwrap();
    assert!(!n.core.wq.is_settled());
    for _ in 0..100 {
        n.write(1).unwrap();
        n.read().unwrap();
    }
    assert_eq!(n.core.wq.slow_wakes.load(Relaxed), 2);
    assert!(n.core.wq.is_settled());
    // Drained by the reads: the stale entry is dropped. The harvest that dropped it
    // cleared the mark: the next write takes the lock again and is reported.
    assert_eq!(wait0(&ep), vec![]);
    assert!(!n.core.wq.is_settled());
    n.write(1).unwrap();
    assert_eq!(n.core.wq.slow_wakes.load(Relaxed), 3);
    assert_eq!(wait0(&ep), vec![(1, 0)]);
}

/// What clears the settled mark: a harvest's poll, a `modify`, another entry (a blocked
/// reader, a second epoll), a poller of the epoll (an outer epoll, an fd view).
#[test]
fn settled_mark_is_cleared_by_every_change() {
    let settle = |n: &Notifier| {
        n.write(1).unwrap();
        n.write(1).unwrap();
        assert!(n.core.wq.is_settled());
    };
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 0).unwrap();
    settle(&n);
    ep.modify(&n, Events::IN | Events::ET, 1).unwrap();
    assert!(!n.core.wq.is_settled(), "modify");
    settle(&n);
    let other = Epoll::new();
    other.add(&n, Events::IN | Events::ET, 2).unwrap();
    assert!(!n.core.wq.is_settled(), "a second epoll's item");
    // Both items queued (the add found the count non-zero): the next write settles again.
    n.write(1).unwrap();
    assert!(n.core.wq.is_settled());
    let outer = Epoll::new();
    outer.add(&ep, Events::IN | Events::ET, 3).unwrap();
    assert!(
        !n.core.wq.is_settled(),
        "an outer epoll of the watching epoll"
    );
    // With a poller on `ep`, a write never settles (it must reach the outer item).
    n.write(1).unwrap();
    assert!(!n.core.wq.is_settled());
    drop(outer);
    assert_eq!(wait0(&other), vec![(1, 2)]);
    assert_eq!(wait0(&ep), vec![(1, 1)]);
    assert_eq!(n.read().unwrap(), 6);
}

/// A settled queue keeps its `IN` entries' bit under `SETTLED` (`wait_queue`, "Settled"):
/// an entry that joins without `IN` (an `OUT`-only item) must give it back with the mark's
/// clear, or the next writes would find no `IN` entry and skip the wake for good.
#[test]
fn an_entry_without_in_joining_a_settled_queue_keeps_in() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN | Events::ET, 0).unwrap();
    n.write(1).unwrap();
    n.write(1).unwrap();
    assert!(n.core.wq.is_settled());
    let out_only = Epoll::new();
    out_only.add(&n, Events::OUT, 1).unwrap();
    assert!(!n.core.wq.is_settled());
    assert_eq!(n.core.wq.stored_bits(), (true, false, false), "IN back");
    assert!(n.core.wq.interest().contains(Events::IN | Events::OUT));
    // The ET item is delivered and leaves the ready list; each later write queues it again.
    assert_eq!(wait0(&ep), vec![(1, 0)]);
    assert_eq!(wait0(&ep), vec![]);
    n.write(1).unwrap();
    assert_eq!(
        wait0(&ep),
        vec![(1, 0)],
        "a write after the OUT-only entry joined"
    );
    assert_eq!(n.read().unwrap(), 3);
}

#[test]
fn lifetimes_items_nesting_drops() {
    let outer = Epoll::new();
    let inner = Epoll::new();
    let a = Notifier::new();
    let b = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    inner.add(&a, Events::IN, 1).unwrap();
    inner.add(&b, Events::IN | Events::ET, 2).unwrap();
    outer.add(&inner, Events::IN, 10).unwrap();
    a.notify().unwrap();
    b.notify().unwrap();
    assert_eq!(wait0(&outer), vec![(1, 10)]);
    assert_eq!(
        b.count(),
        1,
        "polling through the outer epoll does not deliver"
    );
    assert_eq!(wait0(&inner), vec![(1, 1), (1, 2)]);
    assert_eq!(b.count(), 0, "the inner wait delivered the AutoReset IN");
    drop(a);
    assert_eq!(wait0(&inner), vec![]);
    assert_eq!(inner.len(), 1);
    drop(inner);
    assert_eq!(wait0(&outer), vec![]);
    assert_eq!(outer.len(), 0);
    b.notify().unwrap();
    assert_eq!(b.core.wq.len(), 0, "the dropped epoll unhooked its items");
}

#[test]
fn harvest_order_overflow_and_round_robin() {
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..5).map(|_| Notifier::new()).collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, Events::IN, i as u64).unwrap();
    }
    for i in [3, 1, 4, 0, 2] {
        ns[i].notify().unwrap();
    }
    let mut buf = [Event::default(); 2];
    let mut seen = Vec::new();
    for _ in 0..6 {
        let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
        seen.push(buf[..n].iter().map(|e| e.data).collect::<Vec<_>>());
    }
    assert_eq!(
        seen,
        vec![
            vec![3, 1],
            vec![4, 0],
            vec![2, 3],
            vec![1, 4],
            vec![0, 2],
            vec![3, 1]
        ]
    );
    // A drained item disappears without using a slot.
    ns[4].read().unwrap();
    let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
    assert_eq!(
        buf[..n].iter().map(|e| e.data).collect::<Vec<_>>(),
        vec![0, 2]
    );
}

#[test]
fn exclusive_item_return_value_matches_locked_path() {
    // An exclusive item whose epoll has no sleeper does not "accept": the next exclusive
    // epoll is still queued (both ready lists get the item).
    let e1 = Epoll::new();
    let e2 = Epoll::new();
    let n = Notifier::new();
    e1.add(&n, Events::IN | Events::EXCLUSIVE, 1).unwrap();
    e2.add(&n, Events::IN | Events::EXCLUSIVE, 2).unwrap();
    n.notify().unwrap();
    assert_eq!(wait0(&e1), vec![(1, 1)]);
    assert_eq!(wait0(&e2), vec![(1, 2)]);
}

mod stored_mask {

    use super::*;

    /// The mask stored for `n` in `ep` (not observable through the public API while no
    /// source raises `ERR`/`HUP`).
    fn stored(ep: &Epoll, n: &Notifier) -> Events {
        let reg = crate::loom::lock(&ep.inner.registry);
        reg.items[&n.core.id].item.events()
    }

    #[test]
    fn err_hup_are_forced_undefined_bits_stored_oneshot_keeps_control_bits() {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::empty(), 0).unwrap();
        assert_eq!(stored(&ep, &n), Events::ERR | Events::HUP);
        let undefined = Events::from_bits_retain(0x00f0_0000);
        ep.modify(&n, undefined | Events::IN, 0).unwrap();
        assert_eq!(
            stored(&ep, &n),
            undefined | Events::IN | Events::ERR | Events::HUP
        );
        ep.modify(&n, Events::IN | Events::ONESHOT | Events::ET, 0)
            .unwrap();
        n.notify().unwrap();
        let mut evs = [Event::default(); 2];
        assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1);
        // Disarmed: only the control bits are left (fdinfo shows the same on Linux).
        assert_eq!(stored(&ep, &n), Events::ONESHOT | Events::ET);
    }
}

/// The one-item harvest (`EpInner::harvest_single`) keeps the reference of the item it
/// drops for the item's next queue (`ReadyState::kept`): a hand-off's drop and requeue
/// neither make nor drop a reference. That reference goes with the item: at `delete`, at
/// the source's close, and at the epoll's close (where it would otherwise keep the item and
/// its epoll alive through each other).
#[test]
fn kept_reference_of_a_dropped_item_goes_with_the_item() {
    use std::sync::{Arc, Weak};
    fn item_of(ep: &Epoll) -> Weak<super::item::Item> {
        let reg = crate::loom::lock(&ep.inner.core.registry);
        Arc::downgrade(&reg.items.values().next().expect("one item").item)
    }
    // A hand-off: delivered, read, dropped by the next harvest — on another thread: the
    // thread it was delivered to leaves it queued (`quiet_item_stays_queued_for_its_reader`).
    fn hand_off(ep: &Epoll, n: &Notifier) {
        n.write(1).unwrap();
        assert_eq!(wait0(ep), vec![(Events::IN.bits(), 7)]);
        n.read().unwrap();
        std::thread::scope(|s| assert_eq!(s.spawn(|| wait0(ep)).join().unwrap(), vec![]));
    }
    // delete
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 7).unwrap();
    let w = item_of(&ep);
    let base = w.strong_count(); // the registry's, the source's wait queue's
    for _ in 0..3 {
        hand_off(&ep, &n);
        // And the kept one; the requeue takes it back.
        assert_eq!(w.strong_count(), base + 1);
    }
    assert!(ep.inner.core.ready.lock().is_empty());
    ep.delete(&n).unwrap();
    assert_eq!(w.strong_count(), 0, "delete left the kept reference");
    // the source's close
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 7).unwrap();
    let w = item_of(&ep);
    hand_off(&ep, &n);
    drop(n);
    let m = Notifier::new();
    ep.add(&m, Events::IN, 8).unwrap(); // purges the registry
    assert_eq!(w.strong_count(), 0, "the close left the kept reference");
    // the epoll's close
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 7).unwrap();
    let w = item_of(&ep);
    hand_off(&ep, &n);
    drop(ep);
    assert_eq!(
        w.strong_count(),
        0,
        "the epoll's close left the kept reference"
    );
}

/// The spin's look (`EpInner::nothing_new`): the thread a quiet item's event was delivered
/// to, finding it at 0 again, leaves it queued (no harvest), so the notifier's queue stays
/// settled and the next write takes no lock; any other change makes the look harvest. (A
/// poll harvests: see `Epoll::wait`.)
#[test]
fn quiet_item_stays_queued_for_its_reader() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 7).unwrap();
    n.write(1).unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN.bits(), 7)]);
    assert_eq!(n.core.wq.slow_wakes.load(Relaxed), 1);
    for _ in 0..50 {
        n.read().unwrap();
        assert!(ep.inner.core.nothing_new(), "the spin's look: nothing new");
        assert!(!ep.inner.core.ready.lock().is_empty(), "left queued");
        n.write(1).unwrap();
        assert_eq!(wait0(&ep), vec![(Events::IN.bits(), 7)]);
    }
    // One more lock: the write that settled the queue.
    assert_eq!(n.core.wq.slow_wakes.load(Relaxed), 2);
    assert!(n.core.wq.is_settled());
    // A blocking wait with a timeout goes to sleep through a real harvest: the item is
    // dropped, the mark cleared, and the next write wakes (takes the lock).
    n.read().unwrap();
    let mut buf = [Event::default(); 1];
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(5))).unwrap(),
        0
    );
    assert!(
        ep.inner.core.ready.lock().is_empty(),
        "dropped before sleeping"
    );
    assert!(!n.core.wq.is_settled());
    n.write(1).unwrap();
    assert_eq!(n.core.wq.slow_wakes.load(Relaxed), 3);
    assert_eq!(wait0(&ep), vec![(Events::IN.bits(), 7)]);
    // Another notifier queued beside it: the look harvests (and delivers it).
    n.read().unwrap();
    let m = Notifier::new();
    ep.add(&m, Events::IN, 8).unwrap();
    m.write(1).unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN.bits(), 8)]);
    // A mask with OUT: never quiet (a count of 0 is ready for OUT).
    m.read().unwrap();
    assert_eq!(wait0(&ep), vec![]);
    n.write(1).unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN.bits(), 7)]);
    n.read().unwrap();
    ep.modify(&n, Events::IN | Events::OUT, 7).unwrap();
    assert_eq!(wait0(&ep), vec![(Events::OUT.bits(), 7)]);
    // Written from another thread while left queued: seen by the next look.
    ep.modify(&n, Events::IN, 7).unwrap();
    n.write(1).unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN.bits(), 7)]);
    n.read().unwrap();
    assert_eq!(wait0(&ep), vec![]);
    let n2 = n.clone();
    std::thread::spawn(move || n2.write(3).unwrap())
        .join()
        .unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN.bits(), 7)]);
    assert_eq!(n.read().unwrap(), 3);
}

/// The harvest requeues level-triggered items where they lie in the transfer list
/// (`ready::Tx`): an item before them that leaves (edge-triggered, one-shot) closes up, and
/// a harvest that stops early leaves `[leftovers] ++ [arrivals during the scan] ++
/// [requeued]`, the kernel's order (`ep_done_scan`).
#[test]
fn requeue_in_place_keeps_the_kernels_order() {
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..5).map(|_| Notifier::new()).collect();
    let flags = [
        Events::IN,
        Events::IN | Events::ET,
        Events::IN,
        Events::IN | Events::ONESHOT,
        Events::IN,
    ];
    for (i, (n, f)) in ns.iter().zip(flags).enumerate() {
        ep.add(n, f, i as u64).unwrap();
        n.write(1).unwrap();
    }
    let wait = |room: usize| -> Vec<u64> {
        let mut buf = [Event::default(); 8];
        let n = ep.wait(&mut buf[..room], Some(Duration::ZERO)).unwrap();
        buf[..n].iter().map(|e| e.data).collect()
    };
    assert_eq!(wait(8), vec![0, 1, 2, 3, 4]);
    // 1 (ET) and 3 (one-shot) left; 0, 2, 4 closed up, in order.
    assert_eq!(wait(8), vec![0, 2, 4]);
    // Room for two: 4 is left over, ahead of the two requeued.
    assert_eq!(wait(2), vec![0, 2]);
    assert_eq!(wait(2), vec![4, 0]);
    // An edge of 1 between harvests queues it at the tail.
    ns[1].write(1).unwrap();
    assert_eq!(wait(8), vec![2, 4, 0, 1]);
    assert_eq!(wait(8), vec![2, 4, 0]);
    // A drained item leaves from the middle; the others close up.
    ns[4].read().unwrap();
    assert_eq!(wait(8), vec![2, 0]);
    assert_eq!(wait(1), vec![2]);
    assert_eq!(wait(8), vec![0, 2]);
}
