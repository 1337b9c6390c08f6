//! A thread blocked in `Epoll::wait` on an epoll with kernel fds sleeps in the kernel itself
//! (`poll(2)` on the kernel epoll and its own eventfd): a kernel event wakes it with no
//! watcher thread at all, and in-memory wakes still reach it, including the level-triggered
//! cascade to every blocked thread and after `fork`. One test per concern, in its own binary
//! (the watcher is process-wide, so "no thread started" is checked before anything else
//! could start it: the tests here never use a future, a fd view or a nested epoll).
#![cfg(target_os = "linux")]

use std::sync::Arc;
use std::time::Duration;

use evfd::stats::watcher_stats;
use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod util;
use util::asleep_in_wait;

const WATCHDOG: Duration = Duration::from_secs(10);

/// A thread blocks in `ep.wait`; `wake` must make it return exactly `[IN, data]`.
fn wake_blocked(ep: &Epoll, wake: impl FnOnce(), data: u64, what: &str) {
    let rx = asleep_in_wait(ep, 8);
    wake();
    let got = rx
        .recv_timeout(WATCHDOG)
        .unwrap_or_else(|_| panic!("watchdog: {what} lost"));
    let want = Event {
        events: Events::IN,
        data,
    };
    assert_eq!(got, vec![want], "{what}");
}

#[test]
fn blocked_wait_sleeps_in_the_kernel() {
    let ep = Epoll::new();
    let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
    let n = Notifier::new();
    ep.add(&*k, Events::IN, 1).unwrap();
    ep.add(&n, Events::IN | Events::ET, 2).unwrap();

    for round in 0..50 {
        // A kernel event wakes the blocked thread directly.
        wake_blocked(
            &ep,
            || k.notify().unwrap(),
            1,
            &format!("kernel event, round {round}"),
        );
        assert_eq!(k.count().unwrap(), 0, "AutoReset: the delivery reset it");
        // An in-memory event wakes it through its bell.
        wake_blocked(
            &ep,
            || n.notify().unwrap(),
            2,
            &format!("in-memory wake, round {round}"),
        );
    }
    assert_eq!(
        watcher_stats(),
        (0, false),
        "blocked threads never needed the watcher"
    );

    // Timeouts still hold in the kernel sleep.
    let mut buf = [Event::default(); 4];
    let t0 = std::time::Instant::now();
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(30))).unwrap(),
        0
    );
    assert!(t0.elapsed() >= Duration::from_millis(30));

    // A spin (on the in-memory wake) still ends at the deadline.
    ep.set_spin(Some(Duration::from_secs(2)));
    let t0 = std::time::Instant::now();
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(10))).unwrap(),
        0
    );
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(10), "{took:?}");
    assert!(
        took < Duration::from_secs(1),
        "the spin overran the deadline: {took:?}"
    );
    // And a kernel event after the spin still wakes the sleeper.
    ep.set_spin(Some(Duration::from_micros(200)));
    wake_blocked(&ep, || k.notify().unwrap(), 1, "kernel event after a spin");
    ep.set_spin(None);

    // LT cascade: three threads in a kernel sleep, one never-read LT in-memory "stop":
    // every one of them returns.
    let stop = Notifier::new();
    ep.add(&stop, Events::IN, 3).unwrap();
    let rxs: Vec<_> = (0..3).map(|_| asleep_in_wait(&ep, 8)).collect();
    stop.notify().unwrap();
    for rx in rxs {
        let got = rx
            .recv_timeout(WATCHDOG)
            .expect("watchdog: LT cascade lost");
        assert!(got.contains(&Event {
            events: Events::IN,
            data: 3
        }));
    }
    assert_eq!(watcher_stats(), (0, false));
}
