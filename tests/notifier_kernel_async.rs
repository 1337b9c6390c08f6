//! `KernelNotifier::read_async` / `write_async` on any executor: they complete when another
//! thread (or the kernel) writes the eventfd, are cancel-safe, go back to waiting when a
//! competing consumer takes the count, do not spin while a large write still does not fit,
//! and never block the runtime thread, even after a peer clears `O_NONBLOCK`.
#![cfg(target_os = "linux")]

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{KernelNotifier, Mode, LIMIT};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

fn later(
    k: &Arc<KernelNotifier>,
    after: Duration,
    f: fn(&KernelNotifier),
) -> std::thread::JoinHandle<()> {
    let k = k.clone();
    std::thread::spawn(move || {
        std::thread::sleep(after);
        f(&k);
    })
}

/// This thread's CPU time.
fn cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

#[test]
fn read_async_completes_on_every_executor() {
    let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
    // futures' executor: no reactor at all (the crate's watcher thread carries the wake).
    let t = later(&k, Duration::from_millis(10), |k| k.write(3).unwrap());
    assert_eq!(futures::executor::block_on(k.read_async()).unwrap(), 3);
    t.join().unwrap();
    // tokio, current-thread with and without I/O, and multi-thread.
    let rts = [
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap(),
        tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap(),
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap(),
    ];
    for (i, rt) in rts.iter().enumerate() {
        let t = later(&k, Duration::from_millis(10), |k| k.write(4).unwrap());
        let got = rt.block_on(async {
            tokio::time::timeout(Duration::from_secs(10), k.read_async()).await
        });
        assert_eq!(got.expect("watchdog").unwrap(), 4, "runtime {i}");
        t.join().unwrap();
    }
}

#[test]
fn read_async_is_cancel_safe() {
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let start = Instant::now();
        let r = tokio::time::timeout(Duration::from_millis(30), k.read_async()).await;
        assert!(r.is_err(), "nothing was written");
        assert!(
            start.elapsed() < Duration::from_secs(2),
            "{:?}",
            start.elapsed()
        );
        k.write(7).unwrap();
        // A dropped future took nothing; a ready one takes all.
        drop(k.read_async());
        assert_eq!(k.count().unwrap(), 7);
        assert_eq!(k.read_async().await.unwrap(), 7);
    });
}

#[test]
fn a_competing_consumer_sends_the_future_back_to_waiting() {
    // Two pending reads, one write: exactly one completes; the other keeps waiting (no error,
    // no spin) and completes on the next write.
    let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (a, b) = (k.clone(), k.clone());
    let ha = rt.spawn(async move { a.read_async().await.unwrap() });
    let hb = rt.spawn(async move { b.read_async().await.unwrap() });
    std::thread::sleep(Duration::from_millis(30));
    k.write(5).unwrap();
    std::thread::sleep(Duration::from_millis(50));
    let done = [ha.is_finished(), hb.is_finished()];
    assert_eq!(
        done.iter().filter(|d| **d).count(),
        1,
        "one write, one reader: {done:?}"
    );
    k.write(6).unwrap();
    let got = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(10), async {
            (ha.await.unwrap(), hb.await.unwrap())
        })
        .await
    });
    let (x, y) = got.expect("watchdog");
    assert_eq!(x + y, 11, "every unit read once");
}

#[test]
fn semaphore_futures_take_one_each() {
    let k = Arc::new(KernelNotifier::new(Mode::Semaphore).unwrap());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let hs: Vec<_> = (0..3)
        .map(|_| {
            let k = k.clone();
            rt.spawn(async move { k.read_async().await.unwrap() })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(20));
    k.write(3).unwrap();
    let got: u64 = rt.block_on(async {
        let mut s = 0;
        for h in hs {
            s += tokio::time::timeout(Duration::from_secs(10), h)
                .await
                .expect("watchdog")
                .unwrap();
        }
        s
    });
    assert_eq!(got, 3);
    assert_eq!(k.count().unwrap(), 0);
}

#[test]
fn write_async_waits_for_room_without_spinning() {
    // Room for 1 but not for 10: the kernel reports OUT all along, which must not turn into
    // a busy loop.
    let k = Arc::new(
        KernelNotifier::builder()
            .initial(LIMIT - 5)
            .build()
            .unwrap(),
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let reader = later(&k, Duration::from_millis(150), |k| {
        assert_eq!(k.read().unwrap(), LIMIT - 5);
    });
    let (cpu_used, took) = rt.block_on(async {
        let (c0, t0) = (cpu(), Instant::now());
        tokio::time::timeout(Duration::from_secs(10), k.write_async(10))
            .await
            .expect("watchdog")
            .unwrap();
        (cpu() - c0, t0.elapsed())
    });
    reader.join().unwrap();
    assert!(
        took >= Duration::from_millis(100),
        "it waited for the read: {took:?}"
    );
    assert!(
        cpu_used < Duration::from_millis(25),
        "spun for {cpu_used:?} of {took:?}"
    );
    assert_eq!(k.count().unwrap(), 10);
    // A write that does not fit while nobody reads times out on time, adding nothing.
    k.write(LIMIT - 10).unwrap();
    rt.block_on(async {
        let r = tokio::time::timeout(Duration::from_millis(30), k.write_async(1)).await;
        assert!(r.is_err());
    });
    assert_eq!(k.count().unwrap(), LIMIT);
    assert_eq!(
        futures::executor::block_on(k.write_async(u64::MAX))
            .unwrap_err()
            .kind(),
        std::io::ErrorKind::InvalidInput
    );
}

#[test]
fn a_peer_clearing_o_nonblock_does_not_block_the_runtime() {
    let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
    // The peer shares the open file description (a dup, as a process that got it over a
    // socket would) and clears the flag on it.
    let peer = k.try_clone().unwrap();
    let fl = fcntl_getfl(peer.as_fd()).unwrap();
    fcntl_setfl(peer.as_fd(), fl - OFlags::NONBLOCK).unwrap();
    assert!(!fcntl_getfl(k.as_fd()).unwrap().contains(OFlags::NONBLOCK));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ticks, r) = rt.block_on(async {
        let ticker = tokio::spawn(async {
            for _ in 0..10 {
                tokio::time::sleep(Duration::from_millis(3)).await;
            }
            10
        });
        let r = tokio::time::timeout(Duration::from_millis(100), k.read_async()).await;
        (ticker.await.unwrap(), r)
    });
    assert!(r.is_err(), "nothing was written");
    assert_eq!(ticks, 10, "the runtime thread was blocked");
    peer.write(2).unwrap();
    assert_eq!(futures::executor::block_on(k.read_async()).unwrap(), 2);
}
