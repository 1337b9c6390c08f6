//! `KernelNotifier::read_async` / `write_async` on any executor: they complete when another
//! thread (or the kernel) writes the eventfd, are cancel-safe, go back to waiting when a
//! competing consumer takes the count, do not spin while a large write still does not fit,
//! and never block the runtime thread, even after a peer clears `O_NONBLOCK`. The read
//! futures of one notifier wait in one kernel epoll, made by the first that waits and kept:
//! many of them at once count every unit, and one dropped after its wake strands no other.
#![cfg(target_os = "linux")]

use std::future::Future;
use std::os::fd::AsFd;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::time::{Duration, Instant};

use evfd::{KernelNotifier, Mode, LIMIT};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

mod util;
use util::{concurrent_reads, epolls_watching, fd_in_debug, reporting_first_poll, ReadFuture};

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
    let (tx, rx) = std::sync::mpsc::channel();
    let pending = |tx: std::sync::mpsc::Sender<bool>| move |p| tx.send(p).unwrap();
    let first = pending(tx.clone());
    let ha = rt.spawn(async move { reporting_first_poll(a.read_async(), first).await.unwrap() });
    let first = pending(tx);
    let hb = rt.spawn(async move { reporting_first_poll(b.read_async(), first).await.unwrap() });
    // Both pending before the write.
    for p in rx.iter().take(2) {
        assert!(p, "a read was ready before the write");
    }
    k.write(5).unwrap();
    let t0 = Instant::now();
    while !ha.is_finished() && !hb.is_finished() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the write woke no reader"
        );
        std::thread::sleep(Duration::from_micros(200));
    }
    // And the other, 50 ms on, still waits.
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
    let (tx, rx) = std::sync::mpsc::channel();
    let hs: Vec<_> = (0..3)
        .map(|_| {
            let (k, tx) = (k.clone(), tx.clone());
            let first = move |p| tx.send(p).unwrap();
            rt.spawn(async move { reporting_first_poll(k.read_async(), first).await.unwrap() })
        })
        .collect();
    // All three pending before the write.
    for p in rx.iter().take(3) {
        assert!(p, "a read was ready before the write");
    }
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

/// A waker that records that it was woken.
#[derive(Default)]
struct Flag(AtomicBool);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.store(true, SeqCst);
    }
}

impl Flag {
    fn woken(&self) -> bool {
        self.0.load(SeqCst)
    }
}

/// Poll `f` once with `w`.
fn poll_with<F: Future + ?Sized>(f: std::pin::Pin<&mut F>, w: &Arc<Flag>) -> Poll<F::Output> {
    f.poll(&mut Context::from_waker(&Waker::from(Arc::clone(w))))
}

const MODES: [Mode; 3] = [Mode::Counter, Mode::Semaphore, Mode::AutoReset];

#[test]
fn sequential_read_futures_wait_in_one_kept_epoll() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for mode in MODES {
        for on_tokio in [false, true] {
            let k = KernelNotifier::new(mode).unwrap();
            // Its number without lending it (a private AutoReset count stays in memory).
            let num = fd_in_debug(&k);
            assert_eq!(epolls_watching(num), Vec::<i32>::new(), "{mode:?}");
            let mut kept = None;
            for round in 1..=5u64 {
                let one_wait = async {
                    let mut f = pin!(k.read_async());
                    assert!(futures::poll!(f.as_mut()).is_pending(), "nothing written");
                    // Waiting: in one epoll, the one the first wait made.
                    let eps = epolls_watching(num);
                    assert_eq!(eps.len(), 1, "{mode:?} round {round}: {eps:?}");
                    assert_eq!(*kept.get_or_insert(eps[0]), eps[0], "{mode:?} {round}");
                    k.write(round).unwrap();
                    f.await.unwrap()
                };
                let got = if on_tokio {
                    rt.block_on(one_wait)
                } else {
                    futures::executor::block_on(one_wait)
                };
                assert_eq!(got, if mode == Mode::Semaphore { 1 } else { round });
                if mode == Mode::Semaphore {
                    for _ in 1..round {
                        assert_eq!(k.try_read().unwrap(), 1);
                    }
                }
                // Completed: the epoll is kept for the next.
                assert_eq!(epolls_watching(num), vec![kept.unwrap()], "{mode:?}");
            }
            // Given away, the eventfd has left it (the number is still this eventfd's).
            let fd = std::os::fd::OwnedFd::from(k);
            assert_eq!(epolls_watching(num), Vec::<i32>::new(), "{mode:?}");
            drop(fd);
        }
    }
}

/// Six read futures wait at once on one notifier while another thread writes 600 units in
/// writes of 1 to 3: every unit is read once (`util::concurrent_reads`: tokio tasks, the
/// reactor's route, or threads in `block_on`, the watcher's).
#[test]
fn concurrent_read_futures_count_every_unit() {
    fn read(k: &KernelNotifier) -> ReadFuture<'_> {
        Box::pin(k.read_async())
    }
    for mode in MODES {
        for on_tokio in [true, false] {
            let k = Arc::new(KernelNotifier::new(mode).unwrap());
            let what = format!("{mode:?}");
            let writer = Arc::clone(&k);
            concurrent_reads(&what, Arc::clone(&k), read, (6, 600, on_tokio), |n| {
                writer.write(n).unwrap()
            });
            assert_eq!(k.count().unwrap(), 0, "{mode:?} tokio {on_tokio}");
        }
    }
}

/// Two read futures wait in the shared epoll; one write of 1 wakes one of them, which is
/// dropped without being polled again: the other is woken and reads the unit.
#[test]
fn a_read_future_dropped_after_its_wake_strands_no_other() {
    for mode in MODES {
        for round in 0..20 {
            let k = KernelNotifier::new(mode).unwrap();
            let (wa, wb) = (Arc::new(Flag::default()), Arc::new(Flag::default()));
            let mut a = Box::pin(k.read_async());
            let mut b = Box::pin(k.read_async());
            assert!(poll_with(a.as_mut(), &wa).is_pending());
            assert!(poll_with(b.as_mut(), &wb).is_pending());
            k.write(1).unwrap();
            let deadline = Instant::now() + Duration::from_secs(10);
            while !wa.woken() && !wb.woken() {
                assert!(Instant::now() < deadline, "{mode:?} {round}: nobody woken");
                std::thread::yield_now();
            }
            // Drop the woken one (a if both were), poll the other once it is woken.
            let (mut other, w) = if wa.woken() {
                drop(a);
                (b, wb)
            } else {
                drop(b);
                (a, wa)
            };
            while !w.woken() {
                assert!(
                    Instant::now() < deadline,
                    "{mode:?} {round}: the wake was not handed on"
                );
                std::thread::yield_now();
            }
            assert_eq!(
                poll_with(other.as_mut(), &w).map(Result::unwrap),
                Poll::Ready(1),
                "{mode:?} {round}"
            );
        }
    }
}
