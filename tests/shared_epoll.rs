//! A `SharedNotifier` in an `Epoll`, woken by a peer process, through every face of the
//! epoll: blocking `wait`, `wait_async`, an outer epoll nesting it, and the epoll's fd view.
//!
//! The shared notifier is a kernel-fd source (its doorbell), which every face of an epoll
//! hears; an AutoReset delivery resets the shared count, and dropping the notifier removes
//! it from the epoll although the peer keeps the doorbell open.

mod shared_util;

use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Mode};
use shared_util::{connected, readable};

const LONG: Duration = Duration::from_secs(10);

/// The peer's entry point (does nothing in a normal test run).
#[test]
fn peer_entry() {
    shared_util::peer_main();
}

#[test]
fn blocking_wait_level_triggered_follows_the_count() {
    let (s, mut p) = connected(Mode::Semaphore, 0);
    let ep = Epoll::new();
    ep.add(&s, Events::IN, 5).unwrap();
    let mut evs = [Event::default(); 2];
    p.send("sleep 30");
    p.send("s w 2");
    assert_eq!(ep.wait(&mut evs, Some(LONG)).unwrap(), 1);
    assert_eq!(
        evs[0],
        Event {
            events: Events::IN,
            data: 5
        }
    );
    assert_eq!(p.reply(), "ok");
    assert_eq!(p.reply(), "ok 0");
    // Level-triggered: still readable after one of two units.
    assert_eq!(s.read().unwrap(), 1);
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(p.cmd("s tr"), "ok 1");
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 0);
    // Edge-triggered: one event per 0 -> non-zero edge.
    ep.modify(&s, Events::IN | Events::ET, 6).unwrap();
    assert_eq!(p.cmd("s w 1"), "ok 0");
    assert_eq!(p.cmd("s w 1"), "ok 0");
    assert_eq!(ep.wait(&mut evs, Some(LONG)).unwrap(), 1);
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 0);
    ep.delete(&s).unwrap();
}

#[test]
fn wait_async_woken_by_peer() {
    let (s, mut p) = connected(Mode::Counter, 0);
    let ep = Epoll::new();
    ep.add(&s, Events::IN, 1).unwrap();
    p.send("sleep 30");
    p.send("s w 1");
    let mut evs = [Event::default(); 2];
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap();
    let n = rt
        .block_on(async {
            tokio::time::timeout(Duration::from_secs(5), ep.wait_async(&mut evs)).await
        })
        .expect("woken in time")
        .unwrap();
    assert_eq!(n, 1);
    assert_eq!(evs[0].data, 1);
}

#[test]
fn nested_epoll_woken_by_peer() {
    let (s, mut p) = connected(Mode::Counter, 0);
    let inner = Epoll::new();
    inner.add(&s, Events::IN, 1).unwrap();
    let outer = Epoll::new();
    outer.add(&inner, Events::IN, 2).unwrap();
    p.send("sleep 30");
    p.send("s w 1");
    let mut evs = [Event::default(); 2];
    assert_eq!(outer.wait(&mut evs, Some(LONG)).unwrap(), 1);
    assert_eq!(evs[0].data, 2);
    assert_eq!(inner.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(evs[0].data, 1);
}

#[test]
fn epoll_fd_view_woken_by_peer() {
    let (s, mut p) = connected(Mode::Counter, 0);
    let ep = Epoll::new();
    ep.add(&s, Events::IN, 1).unwrap();
    let view = ep.fd_view().unwrap();
    assert!(!readable(view.as_fd()));
    p.send("s w 1");
    assert_eq!(p.reply(), "ok 0");
    let start = Instant::now();
    while !readable(view.as_fd()) {
        assert!(
            start.elapsed() < LONG,
            "the epoll's view never became readable"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    let mut evs = [Event::default(); 2];
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1);
}

#[test]
fn autoreset_delivery_through_epoll_resets() {
    let (s, mut p) = connected(Mode::AutoReset, 0);
    let ep = Epoll::new();
    ep.add(&s, Events::IN, 1).unwrap();
    assert_eq!(p.cmd("s w 3"), "ok 0");
    let mut evs = [Event::default(); 2];
    assert_eq!(ep.wait(&mut evs, Some(LONG)).unwrap(), 1);
    assert_eq!(s.count(), 0, "delivered: reset");
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 0);
}

#[test]
fn dropped_shared_notifier_leaves_the_epoll() {
    let (s, mut p) = connected(Mode::Counter, 0);
    let ep = Epoll::new();
    ep.add(&s, Events::IN, 1).unwrap();
    drop(s);
    assert_eq!(p.cmd("s w 1"), "ok 0");
    let mut evs = [Event::default(); 2];
    assert_eq!(
        ep.wait(&mut evs, Some(Duration::from_millis(50))).unwrap(),
        0
    );
    assert_eq!(ep.len(), 0);
}
