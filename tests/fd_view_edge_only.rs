//! Edge-only fd views (`FdView::set_edge_only`), seen by real kernel pollers: an
//! edge-triggered epoll gets one event per edge of the source and the doorbell is never
//! drained; a level-triggered epoll sees the fd stay readable (the documented cost); going
//! back to level drains it; a doorbell that edge-only rings fill (a pipe, under
//! `--cfg evfd_force_pipe`) still makes every edge; an `Epoll`'s view; a producer thread
//! against a consumer asleep in an edge-triggered kernel epoll, every unit counted.

use std::time::Duration;

use evfd::{Epoll, Event, Events, FdView, Mode, Notifier};

mod util;
use util::{poll_readable, Kep};

/// Events an edge-triggered epoll reports now (0 or 1: one fd).
fn edges(et: &Kep) -> usize {
    et.wait(Some(Duration::ZERO))
}

/// An AutoReset kick, its edge-only view, and an edge-triggered epoll watching the view.
fn edge_only_kick() -> (Notifier, FdView, Kep) {
    let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    let view = kick.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    let et = Kep::new(&view, true);
    (kick, view, et)
}

#[test]
fn one_event_per_edge_and_no_drain() {
    let (kick, view, et) = edge_only_kick();
    assert_eq!(edges(&et), 0, "nothing rung yet");
    for round in 1..=50u64 {
        kick.notify().unwrap();
        kick.notify().unwrap(); // the source is readable already: no ring, no edge
        assert_eq!(edges(&et), 1, "round {round}: one edge");
        assert_eq!(edges(&et), 0, "round {round}: reported once");
        assert!(view.consume().contains(Events::IN));
        assert_eq!(edges(&et), 0, "round {round}: emptying makes no edge");
        let s = view.doorbell_stats();
        assert_eq!((s.rings, s.drains), (round, 0), "round {round}");
    }
}

#[test]
fn counter_source_drained_until_would_block() {
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    let et = Kep::new(&view, true);
    let mut total = 0;
    for round in 1..=20u64 {
        n.write(round).unwrap();
        assert_eq!(edges(&et), 1, "round {round}");
        while let Ok(v) = n.try_read() {
            total += v;
        }
        assert_eq!(edges(&et), 0);
    }
    assert_eq!(total, (1..=20).sum::<u64>());
    assert_eq!(view.doorbell_stats().drains, 0);
}

#[test]
fn level_pollers_see_it_readable_until_set_back() {
    let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    let view = kick.fd_view().unwrap();
    let lt = Kep::new(&view, false);
    view.set_edge_only(true).unwrap();
    kick.notify().unwrap();
    view.consume();
    assert_eq!(kick.count(), 0);
    // The documented cost: the fd stays readable, to poll(2) and a level-triggered epoll.
    assert!(poll_readable(&view));
    assert!(lt.ready_now());
    view.set_edge_only(false).unwrap();
    assert!(!view.is_edge_only());
    assert!(
        !poll_readable(&view),
        "level again: drained, as the source is empty"
    );
    assert!(!lt.ready_now());
    assert_eq!(view.doorbell_stats().drains, 1);
    // And it is level-exact from then on.
    kick.notify().unwrap();
    assert!(poll_readable(&view));
    view.consume();
    assert!(!poll_readable(&view));
}

#[test]
fn set_back_while_readable_keeps_it_rung() {
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    view.set_edge_only(true).unwrap(); // no change
    n.write(3).unwrap();
    view.set_edge_only(false).unwrap();
    assert!(poll_readable(&view), "the source is readable: rung");
    assert_eq!(view.doorbell_stats().drains, 0);
    assert_eq!(n.read().unwrap(), 3);
    assert!(!poll_readable(&view));
}

#[test]
fn clones_share_the_setting() {
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    let other = view.clone();
    view.set_edge_only(true).unwrap();
    assert!(other.is_edge_only());
    // A second view of the same source is a view of its own: level.
    let second = n.fd_view().unwrap();
    assert!(!second.is_edge_only());
}

/// Enough rings to fill a pipe doorbell (~64 KiB) several times: each edge is still an
/// edge. With the eventfd doorbell the counter only climbs.
#[test]
fn full_doorbell_still_makes_edges() {
    let (kick, view, et) = edge_only_kick();
    const ROUNDS: u64 = 200_000;
    for _ in 0..ROUNDS {
        kick.notify().unwrap();
        view.consume();
    }
    let _ = edges(&et); // whatever the rounds left pending
    for round in 0..100 {
        kick.notify().unwrap();
        assert_eq!(edges(&et), 1, "round {round} after {ROUNDS} rings");
        view.consume();
    }
    assert!(view.doorbell_stats().rings >= ROUNDS + 100);
}

#[test]
fn epoll_view_edge_only() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 9).unwrap();
    let view = ep.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    let et = Kep::new(&view, true);
    let mut buf = [Event::default(); 4];
    for round in 1..=20u64 {
        n.notify().unwrap();
        assert_eq!(edges(&et), 1, "round {round}");
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(buf[0].data, 9);
        assert_eq!(n.read().unwrap(), 1);
        // The harvest after the read finds nothing: the epoll is empty again.
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 0);
        assert_eq!(edges(&et), 0);
    }
    assert_eq!(view.doorbell_stats().drains, 0);
}

/// A consumer asleep in an edge-triggered kernel epoll on an edge-only view, a producer
/// writing: every unit written is read, and no edge is missed (the consumer sleeps only
/// after `WouldBlock`, and fails if no edge comes within 10 s).
#[test]
fn producer_against_sleeping_et_consumer() {
    const UNITS: u64 = 100_000;
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    let et = Kep::new(&view, true);
    let producer = {
        let n = n.clone();
        std::thread::spawn(move || {
            for i in 0..UNITS {
                n.notify().unwrap();
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        })
    };
    let mut got = 0;
    loop {
        while let Ok(v) = n.try_read() {
            got += v;
        }
        if got == UNITS {
            break;
        }
        // WouldBlock with units still to come: the next write must make an edge.
        let woke = et.wait(Some(Duration::from_secs(10)));
        assert_eq!(
            woke,
            1,
            "no edge in 10 s with {got} of {UNITS} units read (count {})",
            n.count()
        );
    }
    producer.join().unwrap();
    assert_eq!(got, UNITS);
    assert_eq!(view.doorbell_stats().drains, 0);
}

/// tokio's reactor (edge-triggered) on an edge-only view: a task awaits readability and
/// drains until `WouldBlock`, a thread writes; every unit arrives, and no drain is made.
#[cfg(feature = "tokio")]
#[test]
fn tokio_async_fd_on_an_edge_only_view() {
    const UNITS: u64 = 20_000;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .enable_time()
        .build()
        .unwrap();
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    view.set_edge_only(true).unwrap();
    let producer = {
        let n = n.clone();
        std::thread::spawn(move || {
            for i in 0..UNITS {
                n.notify().unwrap();
                if i % 128 == 0 {
                    std::thread::sleep(Duration::from_micros(50));
                }
            }
        })
    };
    let got = rt.block_on(async {
        let afd = view.clone().into_async_fd().unwrap();
        let mut got = 0;
        while got < UNITS {
            let mut guard = tokio::time::timeout(Duration::from_secs(10), afd.readable())
                .await
                .expect("no edge in 10 s")
                .unwrap();
            match n.try_read() {
                Ok(v) => got += v,
                Err(_) => guard.clear_ready(),
            }
        }
        got
    });
    producer.join().unwrap();
    assert_eq!(got, UNITS);
    assert_eq!(view.doorbell_stats().drains, 0);
}
