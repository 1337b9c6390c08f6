//! Concurrent first arms of both kinds on a new epoll: a task's `wait_async` outside tokio
//! (one-shot) and an outer epoll's `add` (edge-triggered, the first poller) race for the
//! watcher's first registration of the epoll's kernel epoll. Whatever their order, the
//! registration must end edge-triggered: the outer epoll hears every later kernel event,
//! not one shot.
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::future::Future;
use std::pin::pin;
use std::sync::Barrier;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

/// The outer epoll hears a kernel event on `k` within a generous timeout.
fn hears(outer: &Epoll, k: &KernelNotifier) -> bool {
    let mut evs = [Event::default(); 4];
    k.write(1).unwrap();
    let n = outer.wait(&mut evs, Some(Duration::from_secs(5))).unwrap();
    let _ = k.read();
    // Drain the level-triggered requeue before the next round.
    while outer.wait(&mut evs, Some(Duration::ZERO)).unwrap() > 0 {}
    n > 0
}

#[test]
fn first_arms_race_leaves_edge_triggered() {
    let rounds = 3000;
    let barrier = Barrier::new(2);
    for round in 0..rounds {
        let inner = Epoll::new();
        // ET: the outer item is requeued by wakes only, so only the watcher can report.
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        inner.add(&k, Events::IN, 7).unwrap();
        let outer = Epoll::new();
        let mut buf = [Event::default(); 2];
        std::thread::scope(|s| {
            s.spawn(|| {
                barrier.wait();
                outer.add(&inner, Events::IN | Events::ET, 1).unwrap();
            });
            let mut fut = pin!(inner.wait_async(&mut buf));
            let mut cx = Context::from_waker(Waker::noop());
            barrier.wait();
            // Registers the task and arms one-shot (no tokio runtime here).
            assert!(matches!(fut.as_mut().poll(&mut cx), Poll::Pending));
        });
        for shot in 0..3 {
            assert!(hears(&outer, &k), "round {round}: deaf at shot {shot}");
        }
    }
}
