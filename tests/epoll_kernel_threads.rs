//! Threads and tasks on an `Epoll` that holds kernel fds next to in-memory sources: the LT
//! cascade reaches every blocked waiter, an AutoReset kernel delivery happens at most once
//! per reset that succeeded, and a storm of cancelled `wait_async`s loses and duplicates
//! nothing. Every blocking call has a deadline.

use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod util;

fn bounded<T: Send + 'static>(what: &str, secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what}: hung"))
}

/// Three threads wait; a level-triggered "stop" notifier that nobody reads becomes ready:
/// all three must return with it at once (the kernel's LT cascade), round after round. A
/// waiter that sleeps on (its own timeout is a minute) is a lost wake: the watchdog gives
/// the three 5 s.
fn lt_cascade(setup: impl Fn(&Epoll) + Send + Sync + 'static, what: &'static str) {
    const ROUNDS: usize = 30;
    const WAITERS: usize = 3;
    for round in 0..ROUNDS {
        let ep = Epoll::new();
        setup(&ep);
        let stop = Notifier::new();
        ep.add(&stop, Events::IN, 77).unwrap();
        let start = Arc::new(Barrier::new(WAITERS + 1));
        let (tx, rx) = std::sync::mpsc::channel();
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        for _ in 0..WAITERS {
            let ep = ep.clone();
            let start = start.clone();
            let (tx, tid_tx) = (tx.clone(), tid_tx.clone());
            std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                start.wait();
                tid_tx.send(util::this_tid()).unwrap();
                let n = ep.wait(&mut buf, Some(Duration::from_secs(60))).unwrap();
                let _ = tx.send((n, buf[0].data));
            });
        }
        start.wait();
        // All three asleep in their waits.
        for tid in tid_rx.iter().take(WAITERS) {
            util::wait_until_blocked(tid, what);
        }
        stop.notify().unwrap();
        for i in 0..WAITERS {
            match rx.recv_timeout(Duration::from_secs(5)) {
                Ok((1, 77)) => {}
                other => panic!(
                    "{what}, round {round}: waiter {} of {WAITERS} missed the LT event: {other:?}",
                    i + 1
                ),
            }
        }
    }
}

#[test]
fn lt_cascade_in_memory_only() {
    lt_cascade(|_| {}, "in-memory only");
}

#[test]
fn lt_cascade_with_a_kernel_notifier() {
    lt_cascade(
        |ep| {
            let k = KernelNotifier::new(Mode::Counter).unwrap();
            ep.add(&k, Events::IN, 1).unwrap();
            // Keep it registered (and open) for the round.
            std::mem::forget(k);
        },
        "with a KernelNotifier",
    );
}

#[test]
fn lt_cascade_with_a_socket() {
    lt_cascade(
        |ep| {
            let (a, b) = UnixStream::pair().unwrap();
            ep.add(&a.as_fd(), Events::IN, 1).unwrap();
            std::mem::forget((a, b));
        },
        "with a socket",
    );
}

#[test]
fn lt_cascade_after_a_failed_kernel_add() {
    lt_cascade(
        |ep| {
            let f = std::fs::File::open(std::env::current_exe().unwrap()).unwrap();
            let e = ep.add(&f.as_fd(), Events::IN, 1).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EPERM));
        },
        "after a failed kernel add",
    );
}

/// One writer, `consumers` waiting threads spread over `epolls`: after each write the writer
/// waits until it was delivered (or 2 s), so every write must be delivered exactly once; a
/// delivery without a successful reset shows up as one delivery too many.
fn autoreset_once_per_write(epolls: usize, consumers: usize) {
    const WRITES: u64 = 10_000;
    bounded("autoreset delivery", 120, move || {
        let kick = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let eps: Vec<Epoll> = (0..epolls).map(|_| Epoll::new()).collect();
        for ep in &eps {
            ep.add(&*kick, Events::IN, 1).unwrap();
        }
        let delivered = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let ts: Vec<_> = (0..consumers)
            .map(|i| {
                let ep = eps[i % epolls].clone();
                let delivered = delivered.clone();
                let stop = stop.clone();
                std::thread::spawn(move || {
                    let mut buf = [Event::default(); 4];
                    while !stop.load(SeqCst) {
                        let n = ep.wait(&mut buf, Some(Duration::from_millis(20))).unwrap();
                        for e in &buf[..n] {
                            assert!(e.events.contains(Events::IN));
                            delivered.fetch_add(1, SeqCst);
                        }
                    }
                })
            })
            .collect();
        for w in 1..=WRITES {
            kick.notify().unwrap();
            let t0 = Instant::now();
            while delivered.load(SeqCst) < w {
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "write {w} never delivered"
                );
                std::hint::spin_loop();
                std::thread::yield_now();
            }
        }
        std::thread::sleep(Duration::from_millis(50));
        stop.store(true, SeqCst);
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(
            delivered.load(SeqCst),
            WRITES,
            "{WRITES} writes to an AutoReset KernelNotifier, each delivered once"
        );
        assert_eq!(kick.count().unwrap(), 0);
    });
}

#[test]
fn autoreset_kernel_delivered_once_three_threads_one_epoll() {
    autoreset_once_per_write(1, 3);
}

#[test]
fn autoreset_kernel_delivered_once_two_epolls_two_threads_each() {
    autoreset_once_per_write(2, 4);
}

/// `KernelNotifier::consume` reports `IN` only for a reset it made itself.
#[test]
fn consume_reports_in_only_for_its_own_reset() {
    const WRITES: u64 = 1000;
    bounded("consume", 120, || {
        let kick = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let seen = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let ts: Vec<_> = (0..2)
            .map(|_| {
                let (kick, seen, stop) = (kick.clone(), seen.clone(), stop.clone());
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        if kick.consume().unwrap().contains(Events::IN) {
                            seen.fetch_add(1, SeqCst);
                        }
                    }
                })
            })
            .collect();
        for w in 1..=WRITES {
            kick.notify().unwrap();
            let t0 = Instant::now();
            while seen.load(SeqCst) < w {
                assert!(
                    t0.elapsed() < Duration::from_secs(2),
                    "write {w} never consumed"
                );
                std::thread::yield_now();
            }
        }
        std::thread::sleep(Duration::from_millis(20));
        stop.store(true, SeqCst);
        for t in ts {
            t.join().unwrap();
        }
        assert_eq!(seen.load(SeqCst), WRITES, "one IN per write");
    });
}

/// A pending `wait_async` dropped after its kernel source became ready delivered nothing: the
/// AutoReset kick keeps its count for the next wait, which delivers it once.
#[test]
fn cancelled_wait_async_consumes_no_kernel_kick() {
    use std::future::Future;
    use std::task::Context;
    let ep = Epoll::new();
    let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
    ep.add(&kick, Events::IN, 4).unwrap();
    let mut buf = [Event::default(); 2];
    {
        let mut f = ep.wait_async(&mut buf);
        let waker = futures::task::noop_waker();
        let mut cx = Context::from_waker(&waker);
        assert!(std::pin::Pin::new(&mut f).poll(&mut cx).is_pending());
        kick.notify().unwrap();
        std::thread::sleep(Duration::from_millis(50));
        // Dropped without another poll.
    }
    assert_eq!(
        kick.count().unwrap(),
        1,
        "a cancelled wait consumed the kick"
    );
    let mut buf = [Event::default(); 2];
    assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(buf[0].data, 4);
    assert_eq!(kick.count().unwrap(), 0);
    assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 0);
}

/// Writers add units to an in-memory Counter notifier, a Counter `KernelNotifier` and a
/// socket (one byte per unit) while tasks on a multi-thread runtime wait on one epoll with
/// `wait_async`s that are mostly cancelled (polled once, or cut by a tiny timeout). Every
/// delivered event is followed by reading its source; in the end every unit written was
/// read exactly once. A never-read level-triggered "stop" notifier then ends every task
/// (each must be woken by it).
#[test]
fn cancellation_storm_counts_every_unit() {
    const PER_WRITER: u64 = 3000;
    bounded("cancellation storm", 180, || {
        let ep = Epoll::new();
        let mem = Notifier::new();
        let kn = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        let (sa, sb) = UnixStream::pair().unwrap();
        sa.set_nonblocking(true).unwrap();
        let sa = Arc::new(sa);
        ep.add(&mem, Events::IN | Events::ET, 0).unwrap();
        ep.add(&*kn, Events::IN | Events::ET, 1).unwrap();
        ep.add(&sa.as_fd(), Events::IN | Events::ET, 2).unwrap();
        let total = 3 * PER_WRITER;
        let read = Arc::new(AtomicU64::new(0));
        let stop = Notifier::new();
        ep.add(&stop, Events::IN, 99).unwrap();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let drain = {
            let (mem, kn, sa, read) = (mem.clone(), kn.clone(), sa.clone(), read.clone());
            move |data: u64| {
                let got = match data {
                    0 => mem.try_read().unwrap_or(0),
                    1 => kn.try_read().unwrap_or(0),
                    _ => {
                        let mut b = [0u8; 4096];
                        let mut got = 0;
                        while let Ok(n) = std::io::Read::read(&mut &*sa, &mut b) {
                            if n == 0 {
                                break;
                            }
                            got += n as u64;
                        }
                        got
                    }
                };
                read.fetch_add(got, SeqCst);
            }
        };
        let tasks: Vec<_> = (0..3)
            .map(|t| {
                let ep = ep.clone();
                let drain = drain.clone();
                rt.spawn(async move {
                    use futures::FutureExt;
                    let mut buf = [Event::default(); 4];
                    let mut i = 0u64;
                    loop {
                        i += 1;
                        let got = match (i + t) % 4 {
                            // Polled once, then dropped if pending.
                            0 => ep.wait_async(&mut buf).now_or_never(),
                            // Cut by a tiny timeout.
                            1 | 2 => tokio::time::timeout(
                                Duration::from_micros(20 + 37 * (i % 7)),
                                ep.wait_async(&mut buf),
                            )
                            .await
                            .ok(),
                            // A long wait: only a source's wake ends it.
                            _ => tokio::time::timeout(
                                Duration::from_secs(3),
                                ep.wait_async(&mut buf),
                            )
                            .await
                            .ok(),
                        };
                        if let Some(n) = got {
                            let evs = &buf[..n.unwrap()];
                            for e in evs.iter().filter(|e| e.data != 99) {
                                drain(e.data);
                            }
                            if evs.iter().any(|e| e.data == 99) {
                                return;
                            }
                        }
                        tokio::task::yield_now().await;
                    }
                })
            })
            .collect();
        let writers = [
            std::thread::spawn({
                let mem = mem.clone();
                move || {
                    for _ in 0..PER_WRITER {
                        mem.write(1).unwrap();
                    }
                }
            }),
            std::thread::spawn({
                let kn = kn.clone();
                move || {
                    for _ in 0..PER_WRITER {
                        kn.write(1).unwrap();
                    }
                }
            }),
            std::thread::spawn({
                let sb = sb.try_clone().unwrap();
                move || {
                    for _ in 0..PER_WRITER {
                        std::io::Write::write_all(&mut &sb, b"x").unwrap();
                    }
                }
            }),
        ];
        for w in writers {
            w.join().unwrap();
        }
        let t0 = Instant::now();
        while read.load(SeqCst) < total && t0.elapsed() < Duration::from_secs(60) {
            std::thread::sleep(Duration::from_millis(1));
        }
        assert_eq!(read.load(SeqCst), total, "every unit read exactly once");
        stop.notify().unwrap();
        rt.block_on(async {
            for t in tasks {
                tokio::time::timeout(Duration::from_secs(10), t)
                    .await
                    .expect("a task missed the stop event")
                    .unwrap();
            }
        });
        assert_eq!(read.load(SeqCst), total, "nothing read twice");
        assert_eq!(mem.count(), 0);
        assert_eq!(kn.count().unwrap(), 0);
        drop(sb);
    });
}
