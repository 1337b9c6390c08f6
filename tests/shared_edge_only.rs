//! Edge-only fd views of a `SharedNotifier` (`SharedFdView::set_edge_only`), seen by real
//! kernel pollers: an edge-triggered epoll gets one event per 0 → positive edge and the
//! doorbell is never drained; a peer process's writes wake this side asleep in the epoll;
//! a level view beside an edge-only one stays level-exact; going back to level drains a
//! doorbell left rung at count 0. (A fork child's copy of a view: `fork_shared_edge_only.rs`.)

mod shared_util;
mod util;

use std::time::Duration;

use evfd::{Events, Mode, SharedNotifier};
use shared_util::{connected, readable};
use util::Kep;

const LONG: Duration = Duration::from_secs(10);

/// The peer's entry point (does nothing in a normal test run).
#[test]
fn peer_entry() {
    shared_util::peer_main();
}

/// An AutoReset notifier, N rounds of notify → the edge-triggered epoll reports one edge
/// → consume: one ring per round, no drain, and the region counts the view as edge-only.
#[test]
fn one_edge_per_notify_no_drain() {
    const N: u64 = 200;
    let kick = SharedNotifier::new(Mode::AutoReset).unwrap();
    let view = kick.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    view.set_edge_only(true).unwrap(); // no change
    assert!(view.is_edge_only());
    assert_eq!((kick.sleepers().2, kick.edge_consumers()), (0, 1));
    let et = Kep::new(&view, true);
    assert!(!et.ready_now(), "nothing rung yet");
    let base = kick.stats();
    for round in 1..=N {
        kick.notify().unwrap();
        kick.notify().unwrap(); // the count is positive already: no ring, no edge
        assert_eq!(et.wait(Some(LONG)), 1, "round {round}: one edge");
        assert!(!et.ready_now(), "round {round}: reported once");
        assert!(view.consume().unwrap().contains(Events::IN));
        assert_eq!(kick.count(), 0);
        assert!(!et.ready_now(), "round {round}: emptying makes no edge");
        let st = kick.stats();
        assert_eq!(
            (st.rings - base.rings, st.drains - base.drains),
            (round, 0),
            "round {round}"
        );
    }
    drop(view);
    assert_eq!((kick.sleepers().2, kick.edge_consumers()), (0, 0));
    kick.notify().unwrap();
    assert_eq!(
        kick.stats().rings,
        base.rings + N,
        "no consumer left: no ring"
    );
}

/// A peer saturates the shared doorbell (a write of `u64::MAX - 1` through its copy of the
/// description): a ring can add nothing then, yet each 0 → positive edge of the count
/// still reaches an edge-triggered watcher (the ring's write of 0), and the doorbell is
/// never drained.
#[test]
fn saturated_doorbell_still_makes_edges() {
    let kick = SharedNotifier::new(Mode::AutoReset).unwrap();
    let view = kick.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    let et = Kep::new(&view, true);
    let drains = kick.stats().drains; // the view's creation (level) synced it once
    rustix::io::write(&view, &(u64::MAX - 1).to_ne_bytes()).unwrap();
    assert_eq!(et.wait(Some(LONG)), 1, "the peer's write is an edge");
    assert!(!et.ready_now());
    for round in 0..3 {
        kick.notify().unwrap();
        assert_eq!(et.wait(Some(LONG)), 1, "round {round}: an edge, saturated");
        assert!(!et.ready_now(), "round {round}: reported once");
        assert!(view.consume().unwrap().contains(Events::IN));
    }
    assert_eq!(kick.stats().drains, drains, "nobody drained it");
    assert!(readable(&view));
}

/// A peer process writes while this side waits in the edge-triggered epoll: each write
/// (after a sleep, so that this side is asleep by then) wakes it; the rings are the
/// peer's, and nobody drains.
#[test]
fn peer_writes_wake_this_side_asleep() {
    const ROUNDS: u64 = 20;
    let (s, mut p) = connected(Mode::AutoReset, 0);
    let view = s.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    let et = Kep::new(&view, true);
    let drains = s.stats().drains;
    for round in 1..=ROUNDS {
        p.send("sleep 5");
        p.send("s notify");
        assert_eq!(et.wait(Some(LONG)), 1, "round {round}: woken by the peer");
        assert_eq!(p.reply(), "ok");
        assert_eq!(p.reply(), "ok 0");
        assert!(view.consume().unwrap().contains(Events::IN));
        assert!(!et.ready_now(), "round {round}");
    }
    // The peer's counters: "ok wakes waits rings drains".
    let peer: Vec<u64> = p
        .cmd("stats")
        .split(' ')
        .skip(1)
        .map(|v| v.parse().unwrap())
        .collect();
    assert_eq!((peer[2], peer[3]), (ROUNDS, 0), "peer rings, drains");
    assert_eq!(s.stats().drains, drains, "no drain here");
}

/// A level view and an edge-only view at once, with writes from here and from a peer:
/// after every step the level view is readable iff the count is positive (`poll(2)`,
/// zero timeout), and each 0 → positive edge reaches the edge-triggered epoll once.
#[test]
fn level_and_edge_only_views_together() {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let (s, mut p) = connected(mode, 0);
        let level = s.fd_view().unwrap();
        let edge = s.fd_view().unwrap();
        edge.set_edge_only(true).unwrap();
        assert_eq!((s.sleepers().2, s.edge_consumers()), (1, 1), "{mode:?}");
        let et = Kep::new(&edge, true);
        let check = |what: &str| {
            assert_eq!(
                readable(&level),
                s.count() > 0,
                "{mode:?} after {what}: level view, count {}",
                s.count()
            );
        };
        check("start");
        let mut edges = 0;
        for round in 0..10 {
            let was = s.count();
            if round % 2 == 0 {
                s.write(2).unwrap();
            } else {
                assert_eq!(p.cmd("s tw 2"), "ok 0");
            }
            check("a write");
            if was == 0 {
                edges += 1;
                assert!(et.ready_now(), "{mode:?} round {round}: an edge");
            }
            assert!(!et.ready_now(), "{mode:?} round {round}: once");
            if round % 3 == 0 {
                // Empty it.
                while s.try_read().is_ok() {
                    check("a read");
                }
            } else if round % 3 == 1 {
                assert!(p.cmd("s tr").starts_with("ok "), "{mode:?}");
                check("a peer's read");
                assert!(p.cmd("s consume").starts_with("ok "), "{mode:?}");
                check("a peer's delivery");
            }
            assert!(
                !et.ready_now(),
                "{mode:?} round {round}: no edge from a read"
            );
        }
        assert!(edges > 0);
        // The level view leaving: the edge-only one still gets its edges.
        while s.try_read().is_ok() {}
        drop(level);
        assert_eq!((s.sleepers().2, s.edge_consumers()), (0, 1), "{mode:?}");
        assert_eq!(p.cmd("s tw 1"), "ok 0");
        assert!(et.ready_now(), "{mode:?}: the peer's fill");
    }
}

/// Edge-only with no level consumer leaves the doorbell readable at count 0 (the
/// documented cost); back to level, it is drained and level-exact again. Back to level
/// while the count is positive, it stays readable.
#[test]
fn back_to_level_at_zero_is_not_readable() {
    let kick = SharedNotifier::new(Mode::AutoReset).unwrap();
    let view = kick.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    kick.notify().unwrap();
    assert!(view.consume().unwrap().contains(Events::IN));
    assert_eq!(kick.count(), 0);
    assert!(readable(&view), "edge-only: left rung");
    let drains = kick.stats().drains;
    view.set_edge_only(false).unwrap();
    assert!(!view.is_edge_only());
    assert!(!readable(&view), "level again: drained, as the count is 0");
    assert_eq!(kick.stats().drains, drains + 1);
    assert_eq!((kick.sleepers().2, kick.edge_consumers()), (1, 0));
    kick.notify().unwrap();
    assert!(readable(&view));
    view.consume().unwrap();
    assert!(!readable(&view));

    // Edge-only and back while the count is positive: rung throughout, no drain.
    view.set_edge_only(true).unwrap();
    kick.notify().unwrap();
    let drains = kick.stats().drains;
    view.set_edge_only(false).unwrap();
    assert!(readable(&view));
    assert_eq!(kick.stats().drains, drains);
    view.consume().unwrap();
    assert!(!readable(&view));
    drop(view);
    assert_eq!((kick.sleepers().2, kick.edge_consumers()), (0, 0));
}

/// A view that becomes edge-only while the count is positive gets a ring at once: a fresh
/// edge-triggered watch registered before the switch reports it.
#[test]
fn switching_on_a_positive_count_rings() {
    let s = SharedNotifier::builder().initial(3).build().unwrap();
    let view = s.fd_view().unwrap();
    let et = Kep::new(&view, true);
    assert!(et.ready_now(), "readable at the watch's registration");
    let rings = s.stats().rings;
    view.set_edge_only(true).unwrap();
    assert_eq!(s.stats().rings, rings + 1);
    assert!(et.ready_now(), "the switch's ring is an edge");
}
