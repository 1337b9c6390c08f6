//! loom models of the mini-epoll's lock-free and cross-lock protocols, one scenario each.

use std::time::Duration;

use loom::thread;

use crate::epoll::Epoll;
use crate::events::{Event, Events};
use crate::notifier::Notifier;

fn wait0(ep: &Epoll) -> Vec<Event> {
    let mut buf = [Event::default(); 4];
    let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
    buf[..n].to_vec()
}

/// The callback reads the mask before the epoll lock; `modify` stores the new mask, then
/// polls (a Dekker pair, `loom::dekker_fence`). A write racing a modify that widens the mask to `IN` is never
/// lost: one side or the other queues the item.
#[test]
fn callback_vs_modify() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::PRI, 1).unwrap();
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap());
        ep.modify(&n, Events::IN | Events::ET, 2).unwrap();
        w.join().unwrap();
        assert_eq!(
            wait0(&ep),
            vec![Event {
                events: Events::IN,
                data: 2
            }]
        );
    });
}

/// A wake that arrives while a harvest runs goes to the overflow list and is delivered by
/// the next wait, exactly once for an edge-triggered item.
#[test]
fn callback_vs_harvest() {
    loom::model(|| {
        let ep = Epoll::new();
        let a = Notifier::builder().initial(1).build().unwrap();
        let b = Notifier::new();
        ep.add(&a, Events::IN | Events::ET, 0).unwrap();
        ep.add(&b, Events::IN | Events::ET, 1).unwrap();
        let b2 = b.clone();
        let w = thread::spawn(move || b2.write(1).unwrap());
        let first = wait0(&ep);
        w.join().unwrap();
        let second = wait0(&ep);
        let b_reports = first
            .iter()
            .chain(second.iter())
            .filter(|e| e.data == 1)
            .count();
        assert_eq!(b_reports, 1, "first {first:?} second {second:?}");
        assert_eq!(first.iter().filter(|e| e.data == 0).count(), 1);
        assert!(wait0(&ep).is_empty());
    });
}

/// The last handle of a source dropped while its wake and a harvest are in flight: the item
/// leaves silently, nothing deadlocks, nothing dangles.
#[test]
fn callback_vs_source_drop() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 7).unwrap();
        let w = thread::spawn(move || {
            n.write(1).unwrap();
            drop(n);
        });
        let got = wait0(&ep);
        assert!(
            got.is_empty()
                || got
                    == vec![Event {
                        events: Events::IN,
                        data: 7
                    }]
        );
        w.join().unwrap();
        assert!(wait0(&ep).is_empty());
        assert_eq!(ep.len(), 0);
    });
}

/// A waiter whose timeout races a wake: if it reports the timeout, the event is still there
/// for the next wait; it is never lost and (ET) never doubled.
#[test]
fn waiter_timeout_vs_wake() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 3).unwrap();
        let ep2 = ep.clone();
        let waiter = thread::spawn(move || {
            let mut buf = [Event::default(); 2];
            ep2.wait(&mut buf, Some(Duration::from_millis(1))).unwrap()
        });
        n.write(1).unwrap();
        let got = waiter.join().unwrap();
        let later = wait0(&ep).len();
        assert_eq!(got + later, 1, "waiter got {got}, later {later}");
    });
}

/// The callback's lock-free coalescing (item already queued, no scan running, nobody
/// waiting) racing a harvest that drops the item as not ready: the write after the drain
/// must still leave the item queued.
#[test]
fn coalescing_fast_path_vs_harvest_drop() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::builder().initial(1).build().unwrap();
        ep.add(&n, Events::IN, 5).unwrap(); // queued at add: linked
        let n2 = n.clone();
        let w = thread::spawn(move || {
            n2.try_read().unwrap();
            n2.write(1).unwrap();
        });
        let first = wait0(&ep);
        w.join().unwrap();
        assert!(first.len() <= 1);
        // The count is 1 and the item is level-triggered: it must be reported now.
        assert_eq!(
            wait0(&ep),
            vec![Event {
                events: Events::IN,
                data: 5
            }],
            "first {first:?}"
        );
    });
}

/// `modify` racing the one-item harvest (`EpInner::harvest_single`, which holds only
/// `ready`): the event reported is one `modify`'s pair of mask and data, old or new, never
/// the mask of one and the data of the other.
#[test]
fn single_item_harvest_vs_modify() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::builder().initial(1).build().unwrap();
        ep.add(&n, Events::IN, 1).unwrap(); // queued at add: the ready list's only item
        let (ep2, n2) = (ep.clone(), n.clone());
        let m = thread::spawn(move || ep2.modify(&n2, Events::IN | Events::OUT, 2).unwrap());
        let got = wait0(&ep);
        m.join().unwrap();
        let old = Event {
            events: Events::IN,
            data: 1,
        };
        let new = Event {
            events: Events::IN | Events::OUT,
            data: 2,
        };
        assert!(got == vec![old] || got == vec![new], "torn: {got:?}");
        assert_eq!(wait0(&ep), vec![new]);
    });
}

/// A waiter blocked in `wait(None)` and a `write`: the waiter registers on `waiters` and
/// re-checks under `ready`; the callback queues the item under `ready`, sees the sleeper and
/// takes its entry off `waiters` from inside the source's wake walk, unparking it after every
/// lock is released. The waiter is always woken (no deadlock) and gets the event once.
#[test]
fn blocking_wait_vs_write() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 7).unwrap();
        let ep2 = ep.clone();
        let waiter = thread::spawn(move || {
            let mut buf = [Event::default(); 2];
            let k = ep2.wait(&mut buf, None).unwrap();
            buf[..k].to_vec()
        });
        n.write(1).unwrap();
        let got = waiter.join().unwrap();
        assert_eq!(
            got,
            vec![Event {
                events: Events::IN,
                data: 7
            }]
        );
        assert_eq!(
            ep.inner.waiters.len(),
            0,
            "the waiter's entry was left behind"
        );
    });
}

/// One thread waits twice in a row with its one reused `ThreadWaiter`, while another
/// writes twice: the second wait must not be satisfied by the first wake's `notified` flag
/// or unpark (it would return with nothing queued and report 0 events for `None`, which
/// `wait` never does), and both events arrive.
#[test]
fn reused_waiter_two_waits() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 1).unwrap();
        let ep2 = ep.clone();
        let n2 = n.clone();
        let waiter = thread::spawn(move || {
            let mut buf = [Event::default(); 2];
            let a = ep2.wait(&mut buf, None).unwrap();
            n2.try_read().unwrap();
            let b = ep2.wait(&mut buf, None).unwrap();
            (a, b)
        });
        n.write(1).unwrap();
        // The second write only after the first was consumed, so that it is a new edge.
        while n.count() != 0 {
            thread::yield_now();
        }
        n.write(1).unwrap();
        assert_eq!(waiter.join().unwrap(), (1, 1));
    });
}

/// Two writes racing a harvest of an edge-triggered item: the first may go to the overflow
/// list under `ready`, the second may be coalesced lock-free because the item is already
/// on it. The event is reported exactly once across the two waits and the count read after
/// is 2: nothing lost, nothing doubled.
#[test]
fn ovf_coalescing_vs_harvest() {
    loom::model(|| {
        let ep = Epoll::new();
        let a = Notifier::builder().initial(1).build().unwrap();
        let b = Notifier::new();
        ep.add(&a, Events::IN | Events::ET, 0).unwrap();
        ep.add(&b, Events::IN | Events::ET, 1).unwrap();
        let b2 = b.clone();
        let w = thread::spawn(move || {
            b2.write(1).unwrap();
            b2.write(1).unwrap();
        });
        let first = wait0(&ep);
        w.join().unwrap();
        let second = wait0(&ep);
        let b_reports = first
            .iter()
            .chain(second.iter())
            .filter(|e| e.data == 1)
            .count();
        assert!(b_reports >= 1, "first {first:?} second {second:?}");
        // ET: at most one report per edge that a wait saw; the last edge is never lost.
        assert!(b_reports <= 2, "first {first:?} second {second:?}");
        assert_eq!(b.try_read().unwrap(), 2);
        assert_eq!(wait0(&ep).iter().filter(|e| e.data == 1).count(), 0);
    });
}

/// "Settled" (`wait_queue`): once an item is queued and a write found it so, later writes
/// skip the notifier's lock. A harvest clears the mark before it polls, so a write that
/// skipped while the harvest ran is seen by that poll or marks the item again: whenever the
/// count is left non-zero, the edge-triggered item is reported.
#[test]
fn settled_skip_vs_harvest() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 9).unwrap();
        n.write(1).unwrap(); // queues the item
        n.write(1).unwrap(); // finds it queued: settles
        assert!(n.core.wq.is_settled());
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap()); // skips, or not
        let first = wait0(&ep);
        assert_eq!(first.len(), 1);
        let got = n.try_read().unwrap();
        w.join().unwrap();
        let left = n.count();
        assert_eq!(got + left, 3);
        let later = wait0(&ep);
        assert_eq!(later.len(), usize::from(left > 0), "got {got}, left {left}");
    });
}

/// The settle itself (set, then look again) racing a harvest that unlinks the item: a mark
/// set while the item was being unlinked never survives, so the write after both is not
/// skipped and its edge is reported.
#[test]
fn settle_vs_harvest_unlink() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 4).unwrap();
        n.write(1).unwrap(); // queued, not settled yet
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap()); // the settle attempt
        let first = wait0(&ep);
        let _ = n.try_read();
        w.join().unwrap();
        let _ = n.try_read();
        let _ = wait0(&ep);
        // Everything consumed, the item unlinked: a new write is a new edge.
        n.write(1).unwrap();
        assert_eq!(wait0(&ep).len(), 1, "first {first:?}");
    });
}

/// An epoll whose item is settled gains a poller (an outer epoll, edge-triggered): the mark
/// is cleared, so every later write re-arms the outer item as the kernel's
/// `ep_poll_callback` → `ep_poll_safewake` does, even though the inner item stays queued.
#[test]
fn settled_vs_new_poller() {
    loom::model(|| {
        let inner = Epoll::new();
        let outer = Epoll::new();
        let first = Notifier::builder().initial(1).build().unwrap();
        let n = Notifier::new();
        // `first` ahead of `n` on the inner ready list: the outer epoll's polls of the
        // inner one stop at `first` and never poll `n` (nor clear its mark).
        inner.add(&first, Events::IN, 0).unwrap();
        inner.add(&n, Events::IN, 1).unwrap();
        n.write(1).unwrap();
        n.write(1).unwrap(); // settled
        assert!(n.core.wq.is_settled());
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap());
        outer.add(&inner, Events::IN | Events::ET, 2).unwrap();
        assert_eq!(wait0(&outer).len(), 1); // the add found the inner ready
        w.join().unwrap();
        let _ = wait0(&outer); // the racing write's edge, if it came after the add
        n.write(1).unwrap(); // the inner item is still queued: a new edge for the outer
        assert_eq!(wait0(&outer).len(), 1);
    });
}

/// A level-triggered item stays queued while its harvests find it ready, so its source
/// stays settled across them; the harvest that finds it empty clears the mark and looks
/// again before dropping it. A write that skipped its wake is seen by that second look (or
/// takes the lock and queues the item): whenever the count is left non-zero, the item is
/// reported.
#[test]
fn settled_level_triggered_drop_vs_write() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 6).unwrap();
        n.write(1).unwrap(); // queued
        n.write(1).unwrap(); // settled
        assert!(n.core.wq.is_settled());
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap()); // skips, or not
        let got = n.try_read().unwrap_or(0);
        let first = wait0(&ep); // finds it empty (drop) or the write's count (requeue)
        w.join().unwrap();
        let left = n.count();
        assert_eq!(got + left, 3);
        assert_eq!(wait0(&ep).len(), usize::from(left > 0), "first {first:?}");
    });
}

/// The same for an AutoReset item, whose delivery is the reset: the second look after the
/// clear delivers a count that a skipped write left.
#[test]
fn settled_autoreset_delivery_vs_write() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::builder()
            .mode(crate::mode::Mode::AutoReset)
            .build()
            .unwrap();
        ep.add(&n, Events::IN, 8).unwrap();
        n.write(1).unwrap(); // queued
        n.write(1).unwrap(); // settled
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap());
        let first = wait0(&ep); // delivers 2 or 3
        let second = wait0(&ep); // delivers the write's unit if the first did not
        w.join().unwrap();
        assert_eq!(first.len(), 1);
        let left = n.count();
        assert_eq!(wait0(&ep).len(), usize::from(left > 0), "second {second:?}");
        assert!(second.len() + usize::from(left > 0) <= 1);
    });
}

/// Three parties: a write whose walk settles the queue (and then looks again), a second
/// write that may skip its wake because it saw the mark, and a harvest that drains and
/// drops the level-triggered item in between. A settle whose second look fails must walk
/// again, or the skipping write's unit sits in the count with its item unqueued.
#[test]
fn settle_second_look_fails_walks_again() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::builder().initial(1).build().unwrap();
        ep.add(&n, Events::IN, 3).unwrap(); // queued by the add, not settled
        let (n2, n3) = (n.clone(), n.clone());
        let w2 = thread::spawn(move || n2.write(1).unwrap());
        let w3 = thread::spawn(move || n3.write(1).unwrap());
        let _ = n.try_read();
        let _ = wait0(&ep); // finds it empty (drops it) or a later count (keeps it)
        w2.join().unwrap();
        w3.join().unwrap();
        let left = n.count();
        assert_eq!(wait0(&ep).len(), usize::from(left > 0), "left {left}");
    });
}

/// An item the one-item harvest dropped, its reference kept and its `linked` flag left set
/// (`Ready::parked`), written twice while the harvester delivers, reads and drops it again:
/// the first write takes the kept reference back under `ready`, the second may coalesce
/// lock-free on a flag that says linked — only if the item is not parked. Whenever the count
/// is left non-zero the item is reported, once.
#[test]
fn parked_item_requeue_vs_coalescing() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 3).unwrap();
        n.write(1).unwrap(); // queued
        assert_eq!(wait0(&ep).len(), 1);
        n.try_read().unwrap();
        assert!(wait0(&ep).is_empty()); // dropped: parked
        let n2 = n.clone();
        let w = thread::spawn(move || {
            n2.write(1).unwrap(); // takes the kept reference back
            n2.write(1).unwrap(); // coalesces, or not
        });
        let first = wait0(&ep);
        let got = n.try_read().unwrap_or(0);
        let second = wait0(&ep); // may drop it (parked) again
        w.join().unwrap();
        let left = n.count();
        assert_eq!(got + left, 2);
        assert!(first.len() <= 1 && second.len() <= 1);
        let ev = Event {
            events: Events::IN,
            data: 3,
        };
        let last = wait0(&ep);
        assert_eq!(last.len(), usize::from(left > 0), "{first:?} {second:?}");
        assert!(last.iter().all(|e| *e == ev));
    });
}

/// A parked item written while a general harvest (two other items queued) runs: the wake
/// goes to the overflow list, and the scan's end puts the item back on the ready list from
/// its kept reference — once, so the next harvest reports it once.
#[test]
fn parked_item_overflow_vs_scan() {
    loom::model(|| {
        let ep = Epoll::new();
        let a = Notifier::new();
        ep.add(&a, Events::IN, 0).unwrap();
        a.write(1).unwrap();
        assert_eq!(wait0(&ep).len(), 1);
        a.try_read().unwrap();
        assert!(wait0(&ep).is_empty()); // `a` parked
        let b = Notifier::builder().initial(1).build().unwrap();
        let c = Notifier::builder().initial(1).build().unwrap();
        ep.add(&b, Events::IN, 1).unwrap();
        ep.add(&c, Events::IN, 2).unwrap(); // two queued: the general harvest
        let a2 = a.clone();
        let w = thread::spawn(move || a2.write(1).unwrap());
        let first = wait0(&ep);
        w.join().unwrap();
        assert!(first.iter().filter(|e| e.data == 0).count() <= 1);
        let next = wait0(&ep);
        assert_eq!(
            next.iter().filter(|e| e.data == 0).count(),
            1,
            "{first:?} {next:?}"
        );
        assert_eq!(next.len(), 3);
    });
}

/// A parked item deleted while it is written: the delete drops the kept reference (or the
/// requeued one), and nothing is reported after it; the item is freed.
#[test]
fn parked_item_delete_vs_write() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 8).unwrap();
        n.write(1).unwrap();
        assert_eq!(wait0(&ep).len(), 1);
        n.try_read().unwrap();
        assert!(wait0(&ep).is_empty()); // parked
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap());
        ep.delete(&n).unwrap();
        w.join().unwrap();
        assert!(wait0(&ep).is_empty());
        assert_eq!(ep.inner.ready.lock().len(), 0);
    });
}

/// A parked item (`a`) written while the one-item harvest drops another item (`b`) and so
/// lets go of `a`'s kept reference (clearing its `linked` flag and parking `b`): the write's
/// lock-free look must never see `a` as queued from a mix of the two states (its old flag
/// and the new parked address), or `a`'s wake would be coalesced into a queue it is not on.
#[test]
fn parked_item_released_by_another_drop_vs_write() {
    loom::model(|| {
        let ep = Epoll::new();
        let a = Notifier::new();
        let b = Notifier::new();
        ep.add(&a, Events::IN, 0).unwrap();
        ep.add(&b, Events::IN, 1).unwrap();
        a.write(1).unwrap();
        assert_eq!(wait0(&ep).len(), 1);
        a.try_read().unwrap();
        assert!(wait0(&ep).is_empty()); // `a` parked
        b.write(1).unwrap();
        assert_eq!(wait0(&ep).len(), 1);
        b.try_read().unwrap(); // `b` queued, at 0
        let a2 = a.clone();
        let w = thread::spawn(move || a2.write(1).unwrap());
        let first = wait0(&ep); // drops `b`, releasing `a`'s kept reference
        w.join().unwrap();
        let next = wait0(&ep);
        let a_now = next.iter().filter(|e| e.data == 0).count();
        assert_eq!(a_now, 1, "first {first:?} next {next:?}");
    });
}

/// The spin's look (`EpInner::nothing_new`): the thread a quiet item's event was delivered
/// to leaves it queued (and its notifier's queue settled) while its count is 0, so a write
/// may skip its wake. Whatever the order of that write and the waiter's looks, a blocking
/// wait gets the event: its re-check sees the item queued and harvests for real. A Counter
/// is emptied by its reader's `read`; an AutoReset one by the delivery itself (the
/// one-item harvest's reset, under `ready`).
fn quiet_item_vs_write(mode: crate::Mode) {
    loom::model(move || {
        let ep = Epoll::new();
        let n = Notifier::builder().mode(mode).build().unwrap();
        // The count is emptied; a Counter's reader takes `units`.
        let empty = |n: &Notifier, units: u64| {
            if mode == crate::Mode::AutoReset {
                assert_eq!(n.count(), 0, "the delivery reset it");
            } else {
                assert_eq!(n.read().unwrap(), units);
            }
        };
        ep.add(&n, Events::IN, 5).unwrap();
        n.write(1).unwrap(); // queued
        n.write(1).unwrap(); // settled
        assert_eq!(wait0(&ep).len(), 1); // delivered here: this thread's quiet item
        empty(&n, 2);
        assert!(ep.inner.core.nothing_new()); // the spin's look: left queued, settled
        assert!(!ep.inner.core.ready.lock().is_empty() && n.core.wq.is_settled());
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap()); // skips its wake, or not
        let mut buf = [Event::default(); 2];
        let k = ep.wait(&mut buf, None).unwrap();
        w.join().unwrap();
        assert_eq!(
            buf[..k].to_vec(),
            vec![Event {
                events: Events::IN,
                data: 5
            }]
        );
        empty(&n, 1);
    });
}

#[test]
fn quiet_item_left_queued_vs_write() {
    quiet_item_vs_write(crate::Mode::Counter);
}

#[test]
fn quiet_autoreset_item_left_queued_vs_write() {
    quiet_item_vs_write(crate::Mode::AutoReset);
}

/// The one-item harvest's AutoReset delivery owes a wake to a writer blocked on the full
/// count: the writer registers and looks at the count, the harvest swaps it and then looks
/// at the queue's interest (the Dekker pair), and the wake runs after `ready` is released.
/// Whatever the order, the writer's unit lands.
#[test]
fn autoreset_single_delivery_vs_blocked_writer() {
    loom::model(|| {
        let ep = Epoll::new();
        let n = Notifier::builder()
            .mode(crate::Mode::AutoReset)
            .initial(crate::LIMIT)
            .build()
            .unwrap();
        ep.add(&n, Events::IN, 7).unwrap(); // queued: the count is ready
        let n2 = n.clone();
        let w = thread::spawn(move || n2.write(1).unwrap()); // no room until the reset
        let got = wait0(&ep);
        assert_eq!(
            got,
            vec![Event {
                events: Events::IN,
                data: 7
            }]
        );
        w.join().unwrap();
        assert_eq!(n.count(), 1, "the blocked write landed after the reset");
    });
}
