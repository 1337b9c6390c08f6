//! Cancellation storms: `read_async` and `wait_async` futures dropped at random points
//! (before their first poll, pending, or after a wake they won) while writers run. Every
//! unit written is read exactly once, and the last one is read without anybody polling
//! again: a dropped future that had won a wake hands it on.

use std::future::Future;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Mode, Notifier};

use crate::harness::{
    bounded, counting_waker, join_within, scale, serial, wait_until, writer_pause, Rng, OPS,
    UNITS_CHECKED,
};

const LIMIT: Duration = Duration::from_secs(120);

struct Counts {
    read: AtomicU64,
    cancelled: AtomicU64,
    stop: AtomicBool,
}

/// `tasks` tokio tasks race `read_async` (or `wait_async` + drain) against a random short
/// timer and drop the loser; 2 writer threads write `per_writer` units each.
fn storm(mode: Mode, via_epoll: bool, per_writer: u64, seed: u64) -> (u64, u64) {
    let n = Notifier::builder().mode(mode).build().unwrap();
    let ep = Epoll::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let c = Arc::new(Counts {
        read: AtomicU64::new(0),
        cancelled: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let mut tasks = Vec::new();
    for t in 0..3u64 {
        let (n, ep, c) = (n.clone(), ep.clone(), Arc::clone(&c));
        tasks.push(rt.spawn(async move {
            let mut rng = Rng(seed ^ (t + 1).wrapping_mul(0x2545_f491_4f6c_dd1d) | 1);
            let mut evs = [Event::default(); 2];
            while !c.stop.load(SeqCst) {
                let pause = Duration::from_micros(rng.below(200));
                if via_epoll {
                    tokio::select! {
                        r = ep.wait_async(&mut evs) => {
                            r.expect("wait_async");
                            while let Ok(v) = n.try_read() {
                                c.read.fetch_add(v, SeqCst);
                            }
                        }
                        _ = tokio::time::sleep(pause) => { c.cancelled.fetch_add(1, SeqCst); }
                    }
                } else {
                    tokio::select! {
                        r = n.read_async() => { c.read.fetch_add(r.expect("read_async"), SeqCst); }
                        _ = tokio::time::sleep(pause) => { c.cancelled.fetch_add(1, SeqCst); }
                    }
                }
                OPS.fetch_add(1, SeqCst);
            }
        }));
    }
    // A thread that polls futures by hand and drops them: pending, and right after a wake.
    let hand = {
        let (n, c) = (n.clone(), Arc::clone(&c));
        thread::spawn(move || {
            let (woken, waker) = counting_waker();
            let mut cx = Context::from_waker(&waker);
            while !c.stop.load(SeqCst) {
                let mut f = pin!(n.read_async());
                for _ in 0..2 {
                    if let Poll::Ready(r) = f.as_mut().poll(&mut cx) {
                        c.read.fetch_add(r.expect("read_async"), SeqCst);
                        break;
                    }
                }
                let w0 = woken.0.load(SeqCst);
                let t0 = Instant::now();
                // Wait (briefly) for a wake, then drop the future without polling it.
                while woken.0.load(SeqCst) == w0 && t0.elapsed() < Duration::from_micros(300) {
                    std::hint::spin_loop();
                }
                c.cancelled.fetch_add(1, SeqCst);
                OPS.fetch_add(1, SeqCst);
            }
        })
    };
    let writers: Vec<_> = (0..2u64)
        .map(|w| {
            let n = n.clone();
            thread::spawn(move || {
                let mut rng = Rng(seed.wrapping_add(w * 7 + 3) | 1);
                let mut sum = 0;
                for _ in 0..per_writer {
                    let v = 1 + rng.below(2);
                    n.write(v).expect("write");
                    sum += v;
                    OPS.fetch_add(1, SeqCst);
                    writer_pause(&mut rng);
                }
                sum
            })
        })
        .collect();
    let total: u64 = writers
        .into_iter()
        .map(|w| join_within("storm writer", LIMIT, w))
        .sum();
    // Everything written is read by the storm itself: nobody else polls.
    wait_until("storm reads every unit", LIMIT, || {
        c.read.load(SeqCst) >= total
    });
    c.stop.store(true, SeqCst);
    join_within("hand-polling thread", LIMIT, hand);
    let t0 = Instant::now();
    let mut sentinels = 0;
    while !tasks.iter().all(|t| t.is_finished()) {
        assert!(t0.elapsed() < LIMIT, "watchdog: storm tasks did not leave");
        n.write(1).unwrap();
        sentinels += 1;
        thread::sleep(Duration::from_millis(1));
    }
    for t in tasks {
        rt.block_on(t).expect("storm task");
    }
    let read = c.read.load(SeqCst);
    assert_eq!(
        read + n.count(),
        total + sentinels,
        "{mode:?} via_epoll={via_epoll}"
    );
    // Nothing is left registered by the dropped futures.
    assert_eq!(
        crate::harness::debug_field(&format!("{n:?}"), "waiters"),
        1,
        "the epoll item only"
    );
    UNITS_CHECKED.fetch_add(total, SeqCst);
    (total, c.cancelled.load(SeqCst))
}

fn run(via_epoll: bool) {
    let _g = serial();
    let per_writer = scale(40_000, 1_000_000);
    // AutoReset through an epoll: the delivery consumes the units, nothing to count.
    let modes: &[Mode] = if via_epoll {
        &[Mode::Counter, Mode::Semaphore]
    } else {
        &[Mode::Counter, Mode::Semaphore, Mode::AutoReset]
    };
    for (i, &mode) in modes.iter().enumerate() {
        let t0 = Instant::now();
        let (units, cancelled) = bounded("cancellation storm", LIMIT * 2, move || {
            storm(mode, via_epoll, per_writer, 0xdead_beef + i as u64)
        });
        eprintln!(
            "cancel storm {mode:?} via_epoll={via_epoll}: {units} units, {cancelled} futures dropped, {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn cancellation_storm_read_async() {
    run(false);
}

#[test]
fn cancellation_storm_wait_async() {
    run(true);
}
