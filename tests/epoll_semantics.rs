//! docs/semantics.md §4, one named test per rule, on evfd's `Epoll` (single-threaded;
//! the threaded rules are in `epoll_threads.rs`, the random programs against the kernel in
//! `diff_epoll.rs`).

use std::io::{self, ErrorKind};
use std::time::Duration;

use evfd::{Epoll, Event, Events, Mode, Notifier};

mod util;

const Z: Option<Duration> = Some(Duration::ZERO);

/// `wait(max, timeout 0)` as `(bits, data)` pairs.
fn wait(ep: &Epoll, max: usize) -> Vec<(Events, u64)> {
    let mut buf = vec![Event::default(); max];
    let n = ep.wait(&mut buf, Z).expect("wait");
    buf[..n].iter().map(|e| (e.events, e.data)).collect()
}

/// The data values of `wait(max, timeout 0)`.
fn datas(ep: &Epoll, max: usize) -> Vec<u64> {
    wait(ep, max).into_iter().map(|e| e.1).collect()
}

fn notifier(mode: Mode, initial: u64) -> Notifier {
    Notifier::builder()
        .mode(mode)
        .initial(initial)
        .build()
        .unwrap()
}

fn eloop() -> ErrorKind {
    io::Error::from_raw_os_error(libc::ELOOP).kind()
}

fn kind<T: std::fmt::Debug>(r: io::Result<T>) -> ErrorKind {
    r.unwrap_err().kind()
}

const IN: Events = Events::IN;
const OUT: Events = Events::OUT;
const ET: Events = Events::ET;
const ONESHOT: Events = Events::ONESHOT;
const EXCLUSIVE: Events = Events::EXCLUSIVE;

// ---------------------------------------------------------------------------------------
// §4.2 the error table; after every error, nothing changed

#[test]
fn add_twice_is_already_exists_and_keeps_the_first_registration() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, IN, 1).unwrap();
    assert_eq!(kind(ep.add(&n, OUT, 2)), ErrorKind::AlreadyExists);
    assert_eq!(
        kind(ep.add(&n, IN | EXCLUSIVE, 2)),
        ErrorKind::AlreadyExists
    );
    assert_eq!(ep.len(), 1);
    // Still IN-only (OUT would be ready at count 0) with the first data.
    assert_eq!(wait(&ep, 8), vec![]);
    n.notify().unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
}

#[test]
fn modify_and_delete_of_an_unregistered_source_are_not_found() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    let other = Epoll::new();
    assert_eq!(kind(ep.modify(&n, IN, 1)), ErrorKind::NotFound);
    assert_eq!(kind(ep.delete(&n)), ErrorKind::NotFound);
    assert_eq!(kind(ep.modify(&other, IN, 1)), ErrorKind::NotFound);
    assert_eq!(kind(ep.delete(&other)), ErrorKind::NotFound);
    assert_eq!(ep.len(), 0);
    assert_eq!(wait(&ep, 8), vec![]);
    // A deleted source is not found any more either.
    ep.add(&n, IN, 1).unwrap();
    ep.delete(&n).unwrap();
    assert_eq!(kind(ep.delete(&n)), ErrorKind::NotFound);
    assert_eq!(kind(ep.modify(&n, IN, 1)), ErrorKind::NotFound);
    assert_eq!(wait(&ep, 8), vec![], "delete also dropped the queued event");
}

#[test]
fn an_epoll_cannot_watch_itself() {
    let ep = Epoll::new();
    assert_eq!(kind(ep.add(&ep, IN, 0)), ErrorKind::InvalidInput);
    assert_eq!(kind(ep.add(&ep.clone(), IN, 0)), ErrorKind::InvalidInput);
    assert_eq!(kind(ep.modify(&ep, IN, 0)), ErrorKind::InvalidInput);
    assert_eq!(kind(ep.delete(&ep)), ErrorKind::InvalidInput);
    assert_eq!(ep.len(), 0);
    assert!(ep.poll(IN).is_empty());
}

#[test]
fn exclusive_only_on_add() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    // MOD with EXCLUSIVE: EINVAL, checked before the lookup (so also for an unknown source).
    assert_eq!(
        kind(ep.modify(&n, IN | EXCLUSIVE, 1)),
        ErrorKind::InvalidInput
    );
    ep.add(&n, IN, 1).unwrap();
    assert_eq!(
        kind(ep.modify(&n, IN | EXCLUSIVE, 2)),
        ErrorKind::InvalidInput
    );
    assert_eq!(wait(&ep, 8), vec![(IN, 1)], "mask and data unchanged");
}

#[test]
fn exclusive_allows_only_in_out_err_hup_wakeup_et() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    for bad in [
        Events::ONESHOT,
        Events::PRI,
        Events::RDHUP,
        Events::RDNORM,
        Events::from_bits_retain(0x0010_0000),
    ] {
        let e = ep.add(&n, IN | EXCLUSIVE | bad, 1).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:?}");
        assert_eq!(ep.len(), 0, "nothing registered after {bad:?}");
    }
    assert_eq!(wait(&ep, 8), vec![]);
    // Every allowed bit together is fine.
    ep.add(
        &n,
        IN | OUT | Events::ERR | Events::HUP | Events::WAKEUP | ET | EXCLUSIVE,
        7,
    )
    .unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 7)]);
}

#[test]
fn exclusive_cannot_target_an_epoll() {
    let outer = Epoll::new();
    let inner = Epoll::new();
    assert_eq!(
        kind(outer.add(&inner, IN | EXCLUSIVE, 0)),
        ErrorKind::InvalidInput
    );
    assert_eq!(outer.len(), 0);
    // Nothing half-made: a plain add of the same inner epoll works afterwards.
    outer.add(&inner, IN, 0).unwrap();
}

#[test]
fn an_exclusive_item_can_never_be_modified_but_can_be_deleted() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    ep.add(&n, IN | EXCLUSIVE, 1).unwrap();
    // Even a MOD whose new mask lacks EXCLUSIVE.
    assert_eq!(kind(ep.modify(&n, IN, 2)), ErrorKind::InvalidInput);
    assert_eq!(kind(ep.modify(&n, OUT, 2)), ErrorKind::InvalidInput);
    assert_eq!(wait(&ep, 8), vec![(IN, 1)], "mask and data unchanged");
    ep.delete(&n).unwrap();
    assert_eq!(ep.len(), 0);
    // Re-adding without EXCLUSIVE makes it modifiable again.
    ep.add(&n, IN, 3).unwrap();
    ep.modify(&n, OUT, 4).unwrap();
    assert_eq!(wait(&ep, 8), vec![(OUT, 4)]);
}

#[test]
fn a_cycle_of_two_epolls_is_refused() {
    let a = Epoll::new();
    let b = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    b.add(&n, IN, 10).unwrap();
    a.add(&b, IN, 1).unwrap();
    assert_eq!(kind(b.add(&a, IN, 2)), eloop());
    assert_eq!(b.len(), 1, "nothing changed in b");
    assert_eq!(a.len(), 1);
    // The existing link still works; b still does not contain a.
    assert_eq!(wait(&a, 8), vec![(IN, 1)]);
    assert_eq!(wait(&b, 8), vec![(IN, 10)]);
    assert_eq!(kind(b.delete(&a)), ErrorKind::NotFound);
    // Once the link is gone, the other direction is fine.
    a.delete(&b).unwrap();
    b.add(&a, IN, 2).unwrap();
}

#[test]
fn a_cycle_of_three_epolls_is_refused() {
    let (a, b, c) = (Epoll::new(), Epoll::new(), Epoll::new());
    a.add(&b, IN, 0).unwrap();
    b.add(&c, IN, 0).unwrap();
    let e = c.add(&a, IN, 0).unwrap_err();
    assert_eq!(e.kind(), eloop());
    assert_eq!(e.raw_os_error(), Some(libc::ELOOP), "{e}");
    assert_eq!(c.len(), 0);
    // Nothing changed: the chain a ⊃ b ⊃ c still propagates.
    let n = Notifier::new();
    c.add(&n, IN, 0).unwrap();
    n.notify().unwrap();
    assert_eq!(wait(&a, 8), vec![(IN, 0)]);
    // A link that closes no cycle (a ⊃ c directly) is fine.
    a.add(&c, IN, 1).unwrap();
}

#[test]
fn a_sixth_nesting_level_is_refused_with_eloop() {
    // e[0] ⊃ e[1] ⊃ e[2] ⊃ e[3] ⊃ e[4]: five levels, four links: allowed.
    let e: Vec<Epoll> = (0..6).map(|_| Epoll::new()).collect();
    for i in 0..4 {
        e[i].add(&e[i + 1], IN, i as u64).unwrap();
    }
    // A sixth level below...
    let err = e[4].add(&e[5], IN, 4).unwrap_err();
    assert_eq!(err.kind(), eloop());
    assert_eq!(
        err.raw_os_error(),
        Some(libc::ELOOP),
        "the kernel's errno: {err}"
    );
    // ... or above.
    let err = e[5].add(&e[0], IN, 5).unwrap_err();
    assert_eq!(err.kind(), eloop());
    assert_eq!(err.raw_os_error(), Some(libc::ELOOP), "{err}");
    // ... or in the middle: e[5] ⊃ f hung under e[3] makes e[0] ⊃ … ⊃ e[3] ⊃ e[5] ⊃ f,
    // 3 + 1 + 1 = 5 links.
    let f = Epoll::new();
    e[5].add(&f, IN, 0).unwrap();
    assert_eq!(kind(e[3].add(&e[5], IN, 0)), eloop());
    // Nothing changed: e[4] and e[5] are unlinked, the chain still propagates.
    assert_eq!(e[4].len(), 0);
    assert_eq!(e[5].len(), 1);
    let n = Notifier::new();
    e[4].add(&n, IN, 99).unwrap();
    n.notify().unwrap();
    assert_eq!(wait(&e[0], 8), vec![(IN, 0)]);
    assert_eq!(wait(&e[4], 8), vec![(IN, 99)]);
    // A shorter branch is still fine: e[2] ⊃ e[5] ⊃ f is 2 + 1 + 1 links.
    e[2].add(&e[5], IN, 0).unwrap();
}

// ---------------------------------------------------------------------------------------
// §4.2 / §4.3 masks

#[test]
fn mask_zero_is_accepted_and_err_hup_are_added() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    // Mask 0 becomes ERR|HUP: accepted, registered, and (a notifier never raising either)
    // silent. The stored mask is checked by the unit test in src/epoll.
    ep.add(&n, Events::empty(), 1).unwrap();
    assert_eq!(ep.len(), 1);
    assert_eq!(wait(&ep, 8), vec![]);
    assert_eq!(kind(ep.add(&n, IN, 1)), ErrorKind::AlreadyExists);
    // Undefined bits are stored, never reported.
    ep.modify(&n, IN | Events::from_bits_retain(0x00f0_0000), 2)
        .unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 2)]);
    // Control bits are never reported either.
    ep.modify(&n, IN | OUT | ONESHOT | ET | Events::WAKEUP, 3)
        .unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 3)]);
}

// ---------------------------------------------------------------------------------------
// §4.5 ADD and MOD poll at once

#[test]
fn add_of_a_ready_source_queues_it_even_with_et() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 2);
    ep.add(&n, IN | ET, 5).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 5)]);
    assert_eq!(wait(&ep, 8), vec![], "ET: reported once");
    assert_eq!(n.count(), 2, "nothing consumed");
}

#[test]
fn modify_of_a_still_ready_et_item_reports_again() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    ep.add(&n, IN | ET, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    assert_eq!(wait(&ep, 8), vec![]);
    // Same mask: still a new edge.
    ep.modify(&n, IN | ET, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    ep.modify(&n, IN | OUT | ET, 2).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 2)]);
    assert_eq!(wait(&ep, 8), vec![]);
}

/// A poll that finds an item drained drops it, as `epoll_wait` does: an item queued after
/// that poll comes before it when its next write queues it again. (Found by the kernel
/// differential test: a poll that left the drained item queued, for the sake of the next
/// write's cost, kept its old place ahead of the later item.)
#[test]
fn a_drained_item_dropped_by_a_poll_queues_behind_later_items() {
    let ep = Epoll::new();
    let (a, b) = (Notifier::new(), Notifier::new());
    ep.add(&a, IN, 1).unwrap();
    ep.add(&b, IN, 2).unwrap();
    a.write(1).unwrap();
    assert_eq!(wait(&ep, 1), vec![(IN, 1)]);
    a.read().unwrap();
    assert_eq!(wait(&ep, 1), vec![], "drained: dropped");
    b.write(1).unwrap();
    a.write(1).unwrap();
    assert_eq!(wait(&ep, 1), vec![(IN, 2)], "b was queued first");
    assert_eq!(
        wait(&ep, 2),
        vec![(IN, 1), (IN, 2)],
        "b, delivered, went behind a"
    );
    // The same with the only registration: a later `add` comes first.
    let ep = Epoll::new();
    let (a, b) = (Notifier::new(), notifier(Mode::Counter, 1));
    ep.add(&a, IN, 1).unwrap();
    a.write(1).unwrap();
    assert_eq!(wait(&ep, 1), vec![(IN, 1)]);
    a.read().unwrap();
    assert_eq!(wait(&ep, 1), vec![]);
    ep.add(&b, IN, 2).unwrap();
    a.write(1).unwrap();
    assert_eq!(wait(&ep, 1), vec![(IN, 2)]);
}

/// `modify` switching a still-ready item between level-triggered, ET and ONESHOT changes
/// how the next harvests report it, whether the item is the ready list's only one (the
/// one-item harvest) or one of a run (the scan), and both ways: LT → ET → LT → ONESHOT → LT.
#[test]
fn modify_between_lt_et_and_oneshot_changes_the_harvest_of_a_ready_item() {
    for others in [0usize, 3] {
        let ep = Epoll::new();
        let rest: Vec<Notifier> = (0..others).map(|_| notifier(Mode::Counter, 1)).collect();
        for (i, r) in rest.iter().enumerate() {
            ep.add(r, IN, 100 + i as u64).unwrap();
        }
        let mine = |v: Vec<(Events, u64)>| -> Vec<(Events, u64)> {
            assert_eq!(v.len() - v.iter().filter(|e| e.1 < 100).count(), others);
            v.into_iter().filter(|e| e.1 < 100).collect()
        };
        let n = notifier(Mode::Semaphore, 2);
        ep.add(&n, IN, 1).unwrap();
        assert_eq!(mine(wait(&ep, 8)), vec![(IN, 1)]);
        assert_eq!(mine(wait(&ep, 8)), vec![(IN, 1)], "LT: again");
        ep.modify(&n, IN | ET, 2).unwrap();
        assert_eq!(mine(wait(&ep, 8)), vec![(IN, 2)]);
        assert_eq!(mine(wait(&ep, 8)), vec![], "ET: once");
        ep.modify(&n, IN, 3).unwrap();
        assert_eq!(mine(wait(&ep, 8)), vec![(IN, 3)]);
        assert_eq!(mine(wait(&ep, 8)), vec![(IN, 3)], "LT again: again");
        ep.modify(&n, IN | OUT | ONESHOT, 4).unwrap();
        assert_eq!(mine(wait(&ep, 8)), vec![(IN | OUT, 4)]);
        assert_eq!(mine(wait(&ep, 8)), vec![], "ONESHOT: disarmed");
        ep.modify(&n, IN, 5).unwrap();
        assert_eq!(mine(wait(&ep, 8)), vec![(IN, 5)]);
        assert_eq!(mine(wait(&ep, 8)), vec![(IN, 5)]);
        assert_eq!(n.count(), 2, "nothing consumed");
    }
}

#[test]
fn modify_of_a_queued_item_keeps_its_place_and_delivers_the_new_data() {
    let ep = Epoll::new();
    let (a, b) = (Notifier::new(), Notifier::new());
    ep.add(&a, IN, 1).unwrap();
    ep.add(&b, IN, 2).unwrap();
    a.notify().unwrap();
    b.notify().unwrap();
    ep.modify(&a, IN | OUT, 10).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 10), (IN, 2)]);
    // Narrowing the mask of a queued item: dropped at delivery, no slot used.
    ep.modify(&a, Events::PRI, 11).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 2)]);
}

// ---------------------------------------------------------------------------------------
// §4.3 / §4.6 ONESHOT and ET

#[test]
fn oneshot_disarms_until_modify_rearms_it() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, IN | ONESHOT, 1).unwrap();
    n.notify().unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    // Disarmed: still ready (count 1), new writes, nothing reported; even OUT-able now.
    assert_eq!(wait(&ep, 8), vec![]);
    n.notify().unwrap();
    assert_eq!(wait(&ep, 8), vec![]);
    assert!(
        ep.poll(IN).is_empty(),
        "a disarmed item does not make the epoll readable"
    );
    assert_eq!(ep.len(), 1, "still registered");
    // Re-armed by MOD (which also polls at once).
    ep.modify(&n, IN | ONESHOT, 2).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 2)]);
    assert_eq!(wait(&ep, 8), vec![]);
    // Re-armed as level-triggered.
    ep.modify(&n, IN, 3).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 3)]);
    assert_eq!(wait(&ep, 8), vec![(IN, 3)]);
    assert_eq!(n.count(), 2);
}

#[test]
fn et_is_rearmed_by_write_zero_when_the_count_is_positive() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    ep.add(&n, IN | ET, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    assert_eq!(wait(&ep, 8), vec![]);
    n.write(0).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)], "any IN wake is an edge");
    assert_eq!(wait(&ep, 8), vec![]);
}

#[test]
fn et_is_not_rearmed_by_write_zero_when_the_count_is_zero() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, IN | ET, 1).unwrap();
    n.write(0).unwrap();
    // Queued by the wake, filtered out at harvest.
    assert_eq!(wait(&ep, 8), vec![]);
    assert_eq!(wait(&ep, 8), vec![]);
}

#[test]
fn et_in_out_at_count_zero_and_write_zero_reports_out() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, IN | OUT | ET, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(OUT, 1)], "ADD: OUT is ready at count 0");
    assert_eq!(wait(&ep, 8), vec![]);
    n.write(0).unwrap();
    assert_eq!(wait(&ep, 8), vec![(OUT, 1)]);
    assert_eq!(wait(&ep, 8), vec![]);
}

#[test]
fn semaphore_et_in_out_read_leaving_one_reports_again() {
    let ep = Epoll::new();
    let n = notifier(Mode::Semaphore, 2);
    ep.add(&n, IN | OUT | ET, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 1)]);
    assert_eq!(wait(&ep, 8), vec![]);
    assert_eq!(n.try_read().unwrap(), 1);
    // The read's OUT wake matched OUT: a new edge, reported with the current readiness.
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 1)]);
    assert_eq!(wait(&ep, 8), vec![]);
}

#[test]
fn semaphore_et_in_only_read_leaving_one_reports_nothing() {
    let ep = Epoll::new();
    let n = notifier(Mode::Semaphore, 2);
    ep.add(&n, IN | ET, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    assert_eq!(n.try_read().unwrap(), 1);
    assert_eq!(wait(&ep, 8), vec![]);
}

// ---------------------------------------------------------------------------------------
// §4.6 harvest order

#[test]
fn round_robin_over_five_lt_items_with_maxevents_two() {
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..5).map(|_| Notifier::new()).collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, IN, i as u64).unwrap();
    }
    for i in [3, 1, 4, 0, 2] {
        ns[i].notify().unwrap();
    }
    let rounds: Vec<Vec<u64>> = (0..6).map(|_| datas(&ep, 2)).collect();
    assert_eq!(
        rounds,
        vec![
            vec![3, 1],
            vec![4, 0],
            vec![2, 3],
            vec![1, 4],
            vec![0, 2],
            vec![3, 1]
        ]
    );
}

#[test]
fn a_drained_item_disappears_without_using_a_slot_and_a_rewoken_one_rejoins_at_the_tail() {
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..3).map(|_| Notifier::new()).collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, IN, i as u64).unwrap();
        n.notify().unwrap();
    }
    // Ready list [0, 1, 2]; drain 1.
    assert_eq!(ns[1].try_read().unwrap(), 1);
    assert_eq!(datas(&ep, 2), vec![0, 2], "1 skipped without using a slot");
    // 1 woken again: after the LT requeues of 0 and 2.
    ns[1].notify().unwrap();
    assert_eq!(datas(&ep, 8), vec![0, 2, 1]);
    assert_eq!(datas(&ep, 1), vec![0]);
    assert_eq!(datas(&ep, 8), vec![2, 1, 0]);
}

#[test]
fn leftovers_come_before_new_arrivals_and_lt_requeues() {
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..4).map(|_| Notifier::new()).collect();
    for (i, n) in ns.iter().enumerate().take(3) {
        ep.add(n, IN, i as u64).unwrap();
        n.notify().unwrap();
    }
    ep.add(&ns[3], IN | ET, 3).unwrap();
    assert_eq!(datas(&ep, 1), vec![0]); // [1, 2, 0]
    ns[3].notify().unwrap(); // [1, 2, 0, 3]
    assert_eq!(datas(&ep, 2), vec![1, 2]); // [0, 3, 1, 2]
    assert_eq!(datas(&ep, 8), vec![0, 3, 1, 2]); // ET 3 not requeued
    assert_eq!(datas(&ep, 8), vec![0, 1, 2]);
}

// ---------------------------------------------------------------------------------------
// §4.9 nesting

#[test]
fn a_nested_epoll_reports_in_and_never_out() {
    let outer = Epoll::new();
    let inner = Epoll::new();
    let n = Notifier::new();
    inner.add(&n, IN, 0).unwrap();
    outer.add(&inner, IN | OUT, 1).unwrap();
    // Empty inner: not readable, and never writable.
    assert_eq!(wait(&outer, 8), vec![]);
    assert_eq!(inner.poll(IN | OUT), Events::empty());
    n.notify().unwrap();
    assert_eq!(wait(&outer, 8), vec![(IN, 1)]);
    assert_eq!(inner.poll(IN | OUT), IN);
    // An OUT-only outer item never fires.
    outer.modify(&inner, OUT, 2).unwrap();
    n.notify().unwrap();
    assert_eq!(wait(&outer, 8), vec![]);
    // RDNORM is part of the readiness.
    outer.modify(&inner, Events::RDNORM, 3).unwrap();
    assert_eq!(wait(&outer, 8), vec![(Events::RDNORM, 3)]);
}

#[test]
fn polling_a_nested_epoll_does_not_consume_its_events() {
    // Selftest epoll18: outer LT, inner ET.
    let outer = Epoll::new();
    let inner = Epoll::new();
    let n = Notifier::new();
    inner.add(&n, IN | ET, 0).unwrap();
    outer.add(&inner, IN, 1).unwrap();
    n.notify().unwrap();
    assert_eq!(wait(&outer, 1).len(), 1);
    assert_eq!(wait(&outer, 1).len(), 1);
    assert_eq!(wait(&inner, 1), vec![(IN, 0)]);
    assert_eq!(wait(&outer, 1).len(), 0);
    // Epoll::poll does not consume either.
    n.notify().unwrap();
    assert_eq!(inner.poll(IN), IN);
    assert_eq!(inner.poll(IN), IN);
    assert_eq!(wait(&inner, 1), vec![(IN, 0)]);
    assert_eq!(inner.poll(IN), Events::empty());
}

#[test]
fn wakes_propagate_up_a_chain_of_five() {
    let e: Vec<Epoll> = (0..5).map(|_| Epoll::new()).collect();
    for i in 0..4 {
        e[i].add(&e[i + 1], IN | ET, i as u64).unwrap();
    }
    let n = Notifier::new();
    e[4].add(&n, IN, 4).unwrap();
    for ep in &e {
        assert!(ep.poll(IN).is_empty());
    }
    n.notify().unwrap();
    for ep in &e {
        assert_eq!(ep.poll(IN), IN);
    }
    assert_eq!(wait(&e[0], 8), vec![(IN, 0)]);
    assert_eq!(wait(&e[0], 8), vec![], "ET at the top");
    assert_eq!(wait(&e[4], 8), vec![(IN, 4)]);
}

// ---------------------------------------------------------------------------------------
// docs/semantics.md §2.8: AutoReset is reset by delivery and only by it

#[test]
fn autoreset_is_not_reset_by_add_or_modify() {
    let ep = Epoll::new();
    let n = notifier(Mode::AutoReset, 3);
    ep.add(&n, IN | ET, 1).unwrap();
    assert_eq!(n.count(), 3);
    ep.modify(&n, IN | ET, 2).unwrap();
    assert_eq!(n.count(), 3);
    assert_eq!(wait(&ep, 8), vec![(IN, 2)]);
    assert_eq!(n.count(), 0, "the delivery reset it");
    assert_eq!(wait(&ep, 8), vec![]);
}

/// The hand-off shape (one AutoReset item, watched for `IN` alone, delivered to the thread
/// that waits): each delivery resets the count, the item stays quiet between kicks, and the
/// reset's wakes reach whoever waits for them — the fd view's doorbell is drained (not
/// readable at 0) and a writer blocked on a full count gets in.
#[test]
fn autoreset_hand_off_resets_drains_the_view_and_frees_a_blocked_writer() {
    let readable = |v: &evfd::FdView| {
        let mut fds = [rustix::event::PollFd::new(v, rustix::event::PollFlags::IN)];
        rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())).unwrap() == 1
    };
    let ep = Epoll::new();
    let n = notifier(Mode::AutoReset, 0);
    let view = n.fd_view().unwrap();
    ep.add(&n, IN, 9).unwrap();
    for kick in 1..=50u64 {
        assert!(
            !readable(&view),
            "kick {kick}: drained by the last delivery"
        );
        n.write(kick).unwrap();
        assert!(readable(&view));
        assert_eq!(wait(&ep, 8), vec![(IN, 9)], "kick {kick}");
        assert_eq!(n.count(), 0, "kick {kick}: the delivery reset it");
        assert_eq!(wait(&ep, 8), vec![], "kick {kick}: nothing new");
    }
    assert!(!readable(&view));
    // A writer blocked on the full count gets in once a delivery resets it.
    n.write(evfd::LIMIT).unwrap();
    let n2 = n.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let w = std::thread::spawn(move || {
        tx.send(util::this_tid()).unwrap();
        n2.write(2).unwrap()
    });
    util::wait_until_blocked(rx.recv().unwrap(), "write(2) on the full count");
    assert!(!w.is_finished(), "the writer waits for room");
    assert_eq!(n.count(), evfd::LIMIT, "the writer waits for room");
    assert_eq!(wait(&ep, 8), vec![(IN, 9)]);
    w.join().unwrap();
    assert_eq!(n.count(), 2, "the blocked write landed after the reset");
    assert!(readable(&view));
}

#[test]
fn autoreset_is_not_reset_by_epoll_poll() {
    let ep = Epoll::new();
    let n = notifier(Mode::AutoReset, 0);
    ep.add(&n, IN, 1).unwrap();
    n.write(5).unwrap();
    assert_eq!(ep.poll(IN), IN);
    assert_eq!(ep.poll(IN | OUT), IN);
    assert_eq!(n.count(), 5);
    assert_eq!(
        n.poll(IN | OUT),
        IN | OUT,
        "Notifier::poll does not reset either"
    );
    assert_eq!(n.count(), 5);
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    assert_eq!(n.count(), 0);
}

#[test]
fn autoreset_is_not_reset_when_an_outer_epoll_polls_the_inner_one() {
    let outer = Epoll::new();
    let inner = Epoll::new();
    let n = notifier(Mode::AutoReset, 0);
    inner.add(&n, IN, 7).unwrap();
    outer.add(&inner, IN, 1).unwrap();
    n.notify().unwrap();
    assert_eq!(wait(&outer, 8), vec![(IN, 1)]);
    assert_eq!(wait(&outer, 8), vec![(IN, 1)]);
    assert_eq!(
        n.count(),
        1,
        "the outer harvest only polled the inner epoll"
    );
    assert_eq!(wait(&inner, 8), vec![(IN, 7)]);
    assert_eq!(n.count(), 0, "the inner delivery reset it");
    assert_eq!(wait(&outer, 8), vec![]);
}

#[test]
fn autoreset_lt_reports_once_per_burst() {
    let ep = Epoll::new();
    let n = notifier(Mode::AutoReset, 0);
    ep.add(&n, IN, 1).unwrap();
    for _ in 0..3 {
        n.notify().unwrap();
    }
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    assert_eq!(n.count(), 0);
    assert_eq!(wait(&ep, 8), vec![], "LT re-poll finds the count reset");
    n.write(2).unwrap();
    n.write(2).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    assert_eq!(wait(&ep, 8), vec![]);
    assert_eq!(n.try_read().unwrap_err().kind(), ErrorKind::WouldBlock);
}

#[test]
fn autoreset_delivery_of_out_only_does_not_reset() {
    let ep = Epoll::new();
    let n = notifier(Mode::AutoReset, 4);
    ep.add(&n, OUT, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(OUT, 1)]);
    assert_eq!(n.count(), 4);
    // With IN|OUT the delivery resets, and OUT holds afterwards.
    ep.modify(&n, IN | OUT, 2).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 2)]);
    assert_eq!(n.count(), 0);
    assert_eq!(wait(&ep, 8), vec![(OUT, 2)]);
}

/// The shapes where the kernel differential cannot emulate AutoReset (a `read(2)` after the
/// kernel's harvest is not a reset during it), pinned here against docs/semantics.md §2.8: the reset is
/// part of the delivery, and its `OUT` wake is an ordinary wake arriving during the harvest.
#[test]
fn autoreset_reset_wakes_its_own_et_out_item_ahead_of_lt_requeues() {
    let ep = Epoll::new();
    let lt = notifier(Mode::Counter, 1);
    let x = notifier(Mode::AutoReset, 1);
    ep.add(&lt, IN, 1).unwrap();
    ep.add(&x, IN | OUT | ET, 2).unwrap();
    // Harvest: lt (requeued at the tail), then x: IN delivered, count reset, and the reset's
    // OUT wake is a new edge for x, arriving during the harvest (overflow list: ahead of the
    // level-triggered requeue).
    assert_eq!(wait(&ep, 8), vec![(IN, 1), (IN | OUT, 2)]);
    assert_eq!(x.count(), 0);
    assert_eq!(wait(&ep, 8), vec![(OUT, 2), (IN, 1)]);
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
}

#[test]
fn autoreset_is_delivered_once_across_nested_registrations() {
    let outer = Epoll::new();
    let inner = Epoll::new();
    let x = notifier(Mode::AutoReset, 0);
    inner.add(&x, IN, 1).unwrap();
    outer.add(&inner, IN, 2).unwrap();
    outer.add(&x, IN, 3).unwrap();
    // x's queue: outer's entry (added last, at the head), then inner's. The write queues
    // [x, inner] on the outer epoll.
    x.notify().unwrap();
    // The outer harvest delivers x (reset), then polls the inner epoll: x is no longer
    // ready there, so the inner epoll is not reported.
    assert_eq!(wait(&outer, 8), vec![(IN, 3)]);
    assert_eq!(x.count(), 0);
    assert_eq!(wait(&inner, 8), vec![]);
    assert_eq!(wait(&outer, 8), vec![]);
}

#[test]
fn autoreset_oneshot_is_disarmed_after_its_delivery() {
    let ep = Epoll::new();
    let x = notifier(Mode::AutoReset, 1);
    ep.add(&x, IN | OUT | ONESHOT, 1).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN | OUT, 1)]);
    assert_eq!(x.count(), 0);
    // The reset's OUT wake met the item before it was disarmed; the queued entry is found
    // disarmed at the next harvest and dropped.
    assert_eq!(wait(&ep, 8), vec![]);
    assert!(ep.poll(IN).is_empty());
    x.notify().unwrap();
    assert_eq!(wait(&ep, 8), vec![]);
    assert_eq!(x.count(), 1, "nothing delivered, nothing reset");
    ep.modify(&x, IN | ONESHOT, 2).unwrap();
    assert_eq!(wait(&ep, 8), vec![(IN, 2)]);
    assert_eq!(x.count(), 0);
}

// ---------------------------------------------------------------------------------------
// §4.10 closing

#[test]
fn a_source_dropped_while_registered_disappears() {
    let ep = Epoll::new();
    let a = notifier(Mode::Counter, 1);
    let b = notifier(Mode::Counter, 1);
    ep.add(&a, IN, 1).unwrap();
    ep.add(&b, IN, 2).unwrap();
    assert_eq!(ep.len(), 2);
    // Ready and queued when dropped: no event (no HUP either), no slot used.
    drop(a);
    assert_eq!(ep.len(), 1);
    assert_eq!(wait(&ep, 1), vec![(IN, 2)]);
    drop(b);
    assert_eq!(wait(&ep, 8), vec![]);
    assert_eq!(ep.len(), 0);
    assert!(ep.is_empty());
    assert!(ep.poll(IN).is_empty());
}

#[test]
fn a_clone_keeps_the_source_registered() {
    let ep = Epoll::new();
    let a = notifier(Mode::Counter, 1);
    let a2 = a.clone();
    ep.add(&a, IN, 1).unwrap();
    drop(a);
    assert_eq!(ep.len(), 1);
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
    drop(a2);
    assert_eq!(wait(&ep, 8), vec![]);
}

#[test]
fn an_epoll_dropped_with_items_unregisters_them() {
    let n = notifier(Mode::Counter, 0);
    let s = notifier(Mode::Semaphore, 2);
    {
        let ep = Epoll::new();
        ep.add(&n, IN | OUT, 1).unwrap();
        ep.add(&s, IN | ET, 2).unwrap();
        n.notify().unwrap();
        // Dropped with items registered and queued.
    }
    // The notifiers behave as before.
    assert_eq!(n.count(), 1);
    n.write(2).unwrap();
    assert_eq!(n.try_read().unwrap(), 3);
    assert_eq!(s.try_read().unwrap(), 1);
    assert_eq!(s.count(), 1);
    // ... and can be registered elsewhere.
    let ep2 = Epoll::new();
    ep2.add(&n, IN, 3).unwrap();
    ep2.add(&s, IN, 4).unwrap();
    assert_eq!(wait(&ep2, 8), vec![(IN, 4)]);
    // A clone of an epoll keeps it alive.
    let ep3 = Epoll::new();
    ep3.add(&s, IN, 5).unwrap();
    let ep3b = ep3.clone();
    drop(ep3);
    assert_eq!(wait(&ep3b, 8), vec![(IN, 5)]);
}

#[test]
fn a_nested_epoll_dropped_leaves_the_outer_one() {
    let outer = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    outer.add(&n, IN, 1).unwrap();
    let inner = Epoll::new();
    let m = notifier(Mode::Counter, 1);
    inner.add(&m, IN, 0).unwrap();
    outer.add(&inner, IN, 2).unwrap();
    assert_eq!(outer.len(), 2);
    assert_eq!(wait(&outer, 8), vec![(IN, 1), (IN, 2)]);
    drop(inner);
    assert_eq!(outer.len(), 1);
    assert_eq!(wait(&outer, 8), vec![(IN, 1)]);
    // The inner's notifier is untouched.
    assert_eq!(m.try_read().unwrap(), 1);
    // And a dropped outer epoll leaves the inner one usable.
    let outer2 = Epoll::new();
    let inner2 = Epoll::new();
    outer2.add(&inner2, IN, 0).unwrap();
    inner2.add(&m, IN, 9).unwrap();
    drop(outer2);
    m.notify().unwrap();
    assert_eq!(wait(&inner2, 8), vec![(IN, 9)]);
}

// ---------------------------------------------------------------------------------------
// §4.7

#[test]
fn an_empty_event_buffer_is_invalid_input() {
    let ep = Epoll::new();
    let n = notifier(Mode::Counter, 1);
    ep.add(&n, IN, 1).unwrap();
    for t in [None, Some(Duration::ZERO), Some(Duration::from_millis(1))] {
        let e = ep.wait(&mut [], t).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    // Nothing consumed.
    assert_eq!(wait(&ep, 8), vec![(IN, 1)]);
}

#[test]
fn a_timeout_returns_zero_after_waiting() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, IN, 1).unwrap();
    let t = std::time::Instant::now();
    let mut buf = [Event::default(); 4];
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(20))).unwrap(),
        0
    );
    assert!(t.elapsed() >= Duration::from_millis(20));
}
