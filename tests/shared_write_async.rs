//! `SharedNotifier::write_async` on a full counter: woken by a read in another thread or
//! process through the doorbell (no helper thread), cancel-safe, and every unit counted.

mod shared_util;

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use evfd::{Mode, SharedNotifier, LIMIT};
use shared_util::{connected, rt};

/// Every wait in these tests gives up after this.
const LONG: Duration = Duration::from_secs(10);

/// The peer's entry point (does nothing in a normal test run).
#[test]
fn peer_entry() {
    shared_util::peer_main();
}

/// Until the region shows `n` waiting writers (panics after `LONG`).
fn wait_writers(s: &SharedNotifier, n: u64) {
    let end = Instant::now() + LONG;
    while s.sleepers().1 < n {
        assert!(
            Instant::now() < end,
            "writers never registered: {:?}",
            s.sleepers()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn pending_write_async_woken_by_a_read_in_another_thread_each_mode() {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let s = SharedNotifier::builder()
            .mode(mode)
            .initial(LIMIT)
            .build()
            .unwrap();
        let s2 = s.clone();
        let reader = std::thread::spawn(move || {
            wait_writers(&s2, 1);
            // Counter/AutoReset: one read empties; Semaphore: three reads make room for 3.
            let reads = if mode == Mode::Semaphore { 3 } else { 1 };
            let mut got = 0;
            for _ in 0..reads {
                std::thread::sleep(Duration::from_millis(5));
                got += s2.read_timeout(LONG).unwrap();
            }
            got
        });
        rt().block_on(async { tokio::time::timeout(LONG, s.write_async(3)).await })
            .expect("write_async woken in time")
            .unwrap();
        let got = reader.join().unwrap();
        assert_eq!(
            u128::from(LIMIT) + 3,
            u128::from(got) + u128::from(s.count()),
            "{mode:?}: conservation"
        );
        assert_eq!(s.sleepers(), (0, 0, 0), "{mode:?}: unregistered");
    }
}

#[test]
fn pending_write_async_woken_by_an_autoreset_delivery() {
    let s = SharedNotifier::builder()
        .mode(Mode::AutoReset)
        .initial(LIMIT)
        .build()
        .unwrap();
    let s2 = s.clone();
    let t = std::thread::spawn(move || {
        wait_writers(&s2, 1);
        s2.consume().unwrap()
    });
    rt().block_on(async { tokio::time::timeout(LONG, s.write_async(1)).await })
        .expect("write_async woken in time")
        .unwrap();
    assert!(t.join().unwrap().contains(evfd::Events::IN));
    assert_eq!(s.count(), 1);
}

#[test]
fn pending_write_async_woken_by_a_peer_process_each_mode() {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let (s, mut p) = connected(mode, LIMIT);
        p.send("wait_sleepers 0 1 0");
        p.send("s tr");
        rt().block_on(async { tokio::time::timeout(LONG, s.write_async(1)).await })
            .expect("write_async woken in time")
            .unwrap();
        assert_eq!(p.reply(), "ok 0 1 0", "{mode:?}");
        let took = if mode == Mode::Semaphore { 1 } else { LIMIT };
        assert_eq!(p.reply(), format!("ok {took}"), "{mode:?}");
        assert_eq!(s.count(), LIMIT - took + 1, "{mode:?}");
        assert_eq!(s.sleepers(), (0, 0, 0), "{mode:?}");
    }
}

#[test]
fn dropped_pending_write_async_leaves_nothing_behind() {
    let s = SharedNotifier::builder().initial(LIMIT).build().unwrap();
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut f = pin!(s.write_async(5));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            s.sleepers(),
            (0, 1, 0),
            "pending: one writer waiting for room"
        );
    }
    assert_eq!(s.sleepers(), (0, 0, 0), "dropped: unregistered");
    assert_eq!(s.count(), LIMIT, "a dropped write added nothing");
    let rings = s.stats().rings;
    assert_eq!(s.read().unwrap(), LIMIT);
    assert_eq!(s.stats().rings, rings, "nobody waits for room: no pulse");
    s.write(2).unwrap();
    assert_eq!(s.read().unwrap(), 2);

    // A second pending future is still woken after the first was dropped with its event
    // pending (a consumption happened while both were registered).
    s.write(LIMIT).unwrap();
    let mut kept = pin!(s.write_async(1));
    assert!(kept.as_mut().poll(&mut cx).is_pending());
    {
        let mut dropped = pin!(s.write_async(1));
        assert!(dropped.as_mut().poll(&mut cx).is_pending());
        assert_eq!(s.sleepers().1, 2);
        assert_eq!(s.read().unwrap(), LIMIT); // pulses both
    }
    let end = Instant::now() + LONG;
    loop {
        match kept.as_mut().poll(&mut cx) {
            Poll::Ready(r) => break r.unwrap(),
            Poll::Pending => {
                assert!(Instant::now() < end, "the kept future never completed");
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    assert_eq!(s.count(), 1);
    assert_eq!(s.sleepers(), (0, 0, 0));
}

/// Several async writers on a counter kept near the limit by a Semaphore reader thread:
/// most writes wait for room; the units written equal the units read plus what is left.
#[test]
fn write_async_stress_against_a_reader_thread_counts_every_unit() {
    const TASKS: u64 = 4;
    const PER_TASK: u64 = 300;
    let start = LIMIT - 4;
    let s = SharedNotifier::builder()
        .mode(Mode::Semaphore)
        .initial(start)
        .build()
        .unwrap();
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (s2, done2) = (s.clone(), Arc::clone(&done));
    let reader = std::thread::spawn(move || {
        let mut got = 0u64;
        let end = Instant::now() + Duration::from_secs(60);
        let mut i = 0u64;
        while !done2.load(std::sync::atomic::Ordering::SeqCst) {
            assert!(Instant::now() < end, "reader watchdog");
            match s2.read_timeout(Duration::from_millis(50)) {
                Ok(v) => got += v,
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut),
            }
            i += 1;
            if i % 16 == 0 {
                // Pauses: the writers really wait (and must be woken) now and then.
                std::thread::sleep(Duration::from_micros(300));
            }
        }
        got
    });
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap();
    let written: u64 = rt.block_on(async {
        let mut tasks = Vec::new();
        for t in 0..TASKS {
            let s = s.clone();
            tasks.push(tokio::spawn(async move {
                let mut sum = 0;
                for i in 0..PER_TASK {
                    let n = 1 + (t + i) % 3;
                    tokio::time::timeout(LONG, s.write_async(n))
                        .await
                        .expect("write_async woken in time")
                        .unwrap();
                    sum += n;
                }
                sum
            }));
        }
        let mut total = 0;
        for t in tasks {
            total += t.await.unwrap();
        }
        total
    });
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let read = reader.join().unwrap();
    assert_eq!(
        u128::from(start) + u128::from(written),
        u128::from(read) + u128::from(s.count()),
        "conservation"
    );
    assert!(
        read >= written - 4,
        "most writes had to wait for the reader"
    );
    assert_eq!(s.sleepers(), (0, 0, 0));
}

/// The same against a reader in a peer process (blocking reads there, futex wakes).
#[test]
fn write_async_stress_against_a_peer_reader_counts_every_unit() {
    const UNITS: u64 = 2000;
    let start = LIMIT - 3;
    let (s, mut p) = connected(Mode::Semaphore, start);
    // The peer takes UNITS units (one per read, under a 10 s timeout each).
    p.send(&format!("reads {UNITS} 10000 7"));
    let written = rt().block_on(async {
        let mut sum = 0u64;
        let mut i = 0u64;
        while sum < UNITS {
            let n = (1 + i % 3).min(UNITS - sum);
            tokio::time::timeout(LONG, s.write_async(n))
                .await
                .expect("write_async woken in time")
                .unwrap();
            sum += n;
            i += 1;
        }
        sum
    });
    assert_eq!(p.reply(), format!("ok {UNITS}"));
    assert_eq!(
        u128::from(start) + u128::from(written),
        u128::from(UNITS) + u128::from(s.count()),
        "conservation"
    );
    assert_eq!(s.count(), start);
    assert_eq!(s.sleepers(), (0, 0, 0));
}

/// A peer killed while its `write_async` waits for room leaves its registration in the
/// region; it costs this side at most one pulse (and no futex wake), not one per read.
#[test]
fn peer_killed_with_a_pending_write_async_costs_at_most_one_pulse() {
    let (s, mut p) = connected(Mode::Counter, LIMIT);
    assert_eq!(p.cmd("write_async_bg 1"), "ok");
    // Registered, and (after its first re-check) asking for a pulse.
    assert_eq!(p.cmd("wait_sleepers 0 1 0"), "ok 0 1 0");
    std::thread::sleep(Duration::from_millis(20));
    p.kill();
    assert_eq!(s.sleepers().1, 1, "the dead writer's count stays");
    let before = s.stats();
    for _ in 0..200 {
        assert_eq!(s.try_read().unwrap(), LIMIT); // a consumption, a "writer" registered
        s.try_write(LIMIT).unwrap();
    }
    let after = s.stats();
    assert!(
        after.rings - before.rings <= 1,
        "{} pulses for 200 reads after the writer died",
        after.rings - before.rings
    );
    assert_eq!(
        after.futex_wakes, before.futex_wakes,
        "no blocked writer: no futex wake"
    );
    assert_eq!(s.count(), LIMIT, "the dead writer added nothing");
}
