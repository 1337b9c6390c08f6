//! docs/semantics.md §4.7–§4.8 with real threads: LIFO wake of `wait`ers, ET wakes one, LT
//! cascades, EXCLUSIVE across epolls, timeout races, no zero-timeout false negatives, and a
//! producer/poller stress. Every test body runs on its own thread and fails if it does not
//! finish within 30 s, so a hang fails instead of stalling CI.
//!
//! "Who blocked last" is arranged with a barrier and staggered sleeps (150 ms apart); the
//! machines this runs on are small and shared, so the margins are generous.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Mode, Notifier};

const BOUND: Duration = Duration::from_secs(30);
const STAGGER: Duration = Duration::from_millis(150);

/// Run `body` on a thread; fail if it panics or does not finish within [`BOUND`].
fn bounded<F: FnOnce() + Send + 'static>(body: F) {
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        body();
        let _ = tx.send(());
    });
    match rx.recv_timeout(BOUND) {
        Ok(()) => h.join().unwrap(),
        Err(RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(()) => unreachable!("the body sends before it returns"),
        },
        Err(RecvTimeoutError::Timeout) => panic!("test body did not finish within {BOUND:?}"),
    }
}

fn wait_n(ep: &Epoll, max: usize, timeout: Option<Duration>) -> Vec<Event> {
    let mut buf = vec![Event::default(); max];
    let n = ep.wait(&mut buf, timeout).expect("wait");
    buf.truncate(n);
    buf
}

// ---------------------------------------------------------------------------------------
// §4.8 same epoll, several waiters

/// `k` threads block in `wait` one after the other on an ET item; each write wakes exactly
/// one of them, the most recent sleeper first.
fn lifo(k: usize) {
    bounded(move || {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 7).unwrap();
        let start = Arc::new(Barrier::new(k + 1));
        let (tx, rx) = mpsc::channel();
        let hs: Vec<_> = (0..k)
            .map(|i| {
                let (ep, start, tx) = (ep.clone(), Arc::clone(&start), tx.clone());
                thread::spawn(move || {
                    start.wait();
                    thread::sleep(STAGGER * i as u32);
                    let evs = wait_n(&ep, 1, Some(Duration::from_secs(20)));
                    tx.send((i, evs)).unwrap();
                })
            })
            .collect();
        start.wait();
        thread::sleep(STAGGER * k as u32 + Duration::from_millis(300));
        for expect in (0..k).rev() {
            n.write(1).unwrap();
            let (who, evs) = rx
                .recv_timeout(Duration::from_secs(5))
                .expect("a waiter woke");
            assert_eq!(who, expect, "the most recent sleeper is woken first");
            assert_eq!(
                evs,
                vec![Event {
                    events: Events::IN,
                    data: 7
                }]
            );
            // Nobody else woke for this write.
            assert!(rx.recv_timeout(Duration::from_millis(100)).is_err());
        }
        for h in hs {
            h.join().unwrap();
        }
    });
}

#[test]
fn waiters_are_woken_lifo_two() {
    lifo(2);
}

#[test]
fn waiters_are_woken_lifo_three() {
    lifo(3);
}

#[test]
fn et_wakes_exactly_one_waiter() {
    bounded(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 1).unwrap();
        let start = Arc::new(Barrier::new(3));
        let (tx, rx) = mpsc::channel();
        let timeout = Duration::from_millis(1500);
        for i in 0..2 {
            let (ep, start, tx) = (ep.clone(), Arc::clone(&start), tx.clone());
            thread::spawn(move || {
                start.wait();
                let evs = wait_n(&ep, 4, Some(timeout));
                tx.send((i, evs.len(), Instant::now())).unwrap();
            });
        }
        start.wait();
        thread::sleep(Duration::from_millis(300));
        let written = Instant::now();
        n.write(1).unwrap();
        let (_, got, at) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(got, 1, "the first to return got the event");
        assert!(
            at.duration_since(written) < Duration::from_millis(200),
            "woken within 200 ms (took {:?})",
            at.duration_since(written)
        );
        let (_, got, at) = rx.recv_timeout(Duration::from_secs(5)).unwrap();
        assert_eq!(got, 0, "the other one timed out");
        assert!(at.duration_since(written) >= Duration::from_millis(1000));
    });
}

#[test]
fn lt_cascades_to_every_waiter() {
    bounded(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 1).unwrap();
        let start = Arc::new(Barrier::new(3));
        let (tx, rx) = mpsc::channel();
        for _ in 0..2 {
            let (ep, start, tx) = (ep.clone(), Arc::clone(&start), tx.clone());
            thread::spawn(move || {
                start.wait();
                let evs = wait_n(&ep, 1, Some(Duration::from_secs(10)));
                tx.send(evs).unwrap();
            });
        }
        start.wait();
        thread::sleep(Duration::from_millis(300));
        n.write(1).unwrap();
        for _ in 0..2 {
            let evs = rx.recv_timeout(Duration::from_secs(5)).expect("both wake");
            assert_eq!(
                evs,
                vec![Event {
                    events: Events::IN,
                    data: 1
                }]
            );
        }
        assert_eq!(n.count(), 1, "nothing consumed");
    });
}

#[test]
fn two_ready_items_and_two_waiters_with_maxevents_one_get_one_each() {
    for et in [false, true] {
        bounded(move || {
            let ep = Epoll::new();
            let (a, b) = (Notifier::new(), Notifier::new());
            let et = if et { Events::ET } else { Events::empty() };
            ep.add(&a, Events::IN | et, 1).unwrap();
            ep.add(&b, Events::IN | et, 2).unwrap();
            let start = Arc::new(Barrier::new(3));
            let (tx, rx) = mpsc::channel();
            for _ in 0..2 {
                let (ep, start, tx) = (ep.clone(), Arc::clone(&start), tx.clone());
                thread::spawn(move || {
                    start.wait();
                    tx.send(wait_n(&ep, 1, Some(Duration::from_secs(10))))
                        .unwrap();
                });
            }
            start.wait();
            thread::sleep(Duration::from_millis(300));
            a.write(1).unwrap();
            b.write(1).unwrap();
            let x = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            let y = rx.recv_timeout(Duration::from_secs(5)).unwrap();
            assert_eq!((x.len(), y.len()), (1, 1));
            if et.is_empty() {
                // LT: each gets one; which one depends on the race.
                assert!(x[0].data == 1 || x[0].data == 2);
            } else {
                let mut d = [x[0].data, y[0].data];
                d.sort_unstable();
                assert_eq!(d, [1, 2], "ET: one each");
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// §4.8 several epolls on one source, EXCLUSIVE

#[test]
fn exclusive_across_epolls_wakes_exactly_one_waiter() {
    bounded(|| {
        let n = Notifier::new();
        let eps: Vec<Epoll> = (0..3).map(|_| Epoll::new()).collect();
        for (i, ep) in eps.iter().enumerate() {
            ep.add(&n, Events::IN | Events::EXCLUSIVE, i as u64)
                .unwrap();
        }
        let start = Arc::new(Barrier::new(4));
        let (tx, rx) = mpsc::channel();
        let timeout = Duration::from_millis(1500);
        for (i, ep) in eps.iter().enumerate() {
            let (ep, start, tx) = (ep.clone(), Arc::clone(&start), tx.clone());
            thread::spawn(move || {
                start.wait();
                let evs = wait_n(&ep, 4, Some(timeout));
                tx.send((i, evs, Instant::now())).unwrap();
            });
        }
        start.wait();
        thread::sleep(Duration::from_millis(300));
        let written = Instant::now();
        n.write(1).unwrap();
        let mut results: Vec<_> = (0..3)
            .map(|_| rx.recv_timeout(Duration::from_secs(5)).unwrap())
            .collect();
        results.sort_by_key(|r| r.0);
        let woken: Vec<usize> = results
            .iter()
            .filter(|r| !r.1.is_empty())
            .map(|r| r.0)
            .collect();
        assert_eq!(woken, vec![0], "exactly one: the first registered");
        assert_eq!(results[0].1[0].data, 0);
        assert!(results[0].2.duration_since(written) < Duration::from_millis(1000));
        for r in &results[1..] {
            assert!(r.2.duration_since(written) >= Duration::from_millis(1000));
        }
        // The walk stopped at the first epoll: the others never got the item.
        assert!(wait_n(&eps[1], 4, Some(Duration::ZERO)).is_empty());
        assert!(wait_n(&eps[2], 4, Some(Duration::ZERO)).is_empty());
    });
}

#[test]
fn exclusive_skips_an_epoll_without_sleeper_but_still_queues_there() {
    bounded(|| {
        let n = Notifier::new();
        let eps: Vec<Epoll> = (0..3).map(|_| Epoll::new()).collect();
        for (i, ep) in eps.iter().enumerate() {
            ep.add(&n, Events::IN | Events::EXCLUSIVE, i as u64)
                .unwrap();
        }
        // Only epoll 1 has a sleeper.
        let (tx, rx) = mpsc::channel();
        let ep1 = eps[1].clone();
        thread::spawn(move || {
            tx.send(wait_n(&ep1, 4, Some(Duration::from_secs(10))))
                .unwrap();
        });
        thread::sleep(Duration::from_millis(300));
        n.write(1).unwrap();
        let evs = rx
            .recv_timeout(Duration::from_secs(5))
            .expect("epoll 1 woke");
        assert_eq!(evs.len(), 1);
        assert_eq!(evs[0].data, 1);
        // Epoll 0 had no sleeper: skipped, but its ready list got the item.
        assert_eq!(wait_n(&eps[0], 4, Some(Duration::ZERO)).len(), 1);
        // Epoll 2 comes after the one that accepted: never visited.
        assert!(wait_n(&eps[2], 4, Some(Duration::ZERO)).is_empty());
    });
}

#[test]
fn non_exclusive_epolls_are_all_woken() {
    bounded(|| {
        let n = Notifier::new();
        let eps: Vec<Epoll> = (0..4).map(|_| Epoll::new()).collect();
        let (tx, rx) = mpsc::channel();
        let start = Arc::new(Barrier::new(eps.len() + 1));
        for (i, ep) in eps.iter().enumerate() {
            ep.add(&n, Events::IN | Events::ET, i as u64).unwrap();
            let (ep, start, tx) = (ep.clone(), Arc::clone(&start), tx.clone());
            thread::spawn(move || {
                start.wait();
                tx.send(wait_n(&ep, 4, Some(Duration::from_secs(10))).len())
                    .unwrap();
            });
        }
        start.wait();
        thread::sleep(Duration::from_millis(300));
        n.write(1).unwrap();
        for _ in 0..eps.len() {
            assert_eq!(rx.recv_timeout(Duration::from_secs(5)).unwrap(), 1);
        }
    });
}

// ---------------------------------------------------------------------------------------
// §4.7 timeouts and zero timeouts under concurrency

/// A writer against two waiters on an ET item: one with short, varying timeouts (racing its
/// timeout against the wakes), one without a timeout (epoll61's shape: a wake taken by a
/// waiter that timed out must not be lost to the other). Every unit written is read.
#[test]
fn timeout_races_lose_no_wake() {
    bounded(|| {
        const UNITS: u64 = 4000;
        const STOP: u64 = u64::MAX;
        let ep = Epoll::new();
        let n = Notifier::new();
        let stop = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 0).unwrap();
        ep.add(&stop, Events::IN, STOP).unwrap();
        let total = Arc::new(AtomicU64::new(0));
        let timeouts = Arc::new(AtomicU64::new(0));
        let waiter = |short: bool| {
            let (ep, n, total, timeouts) = (
                ep.clone(),
                n.clone(),
                Arc::clone(&total),
                Arc::clone(&timeouts),
            );
            thread::spawn(move || {
                let mut i = 0u64;
                loop {
                    i += 1;
                    let t = short.then(|| Duration::from_micros(i % 300));
                    let evs = wait_n(&ep, 2, t);
                    if evs.is_empty() {
                        timeouts.fetch_add(1, SeqCst);
                    }
                    for e in evs {
                        if e.data == STOP {
                            return;
                        }
                        if let Ok(v) = n.try_read() {
                            total.fetch_add(v, SeqCst);
                        }
                    }
                }
            })
        };
        let ws = [waiter(true), waiter(false)];
        let writer = {
            let n = n.clone();
            thread::spawn(move || {
                for i in 0..UNITS {
                    n.write(1).unwrap();
                    match i % 7 {
                        0 => thread::sleep(Duration::from_micros(50 + i % 200)),
                        1 | 2 => thread::yield_now(),
                        _ => {}
                    }
                }
            })
        };
        writer.join().unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        while total.load(SeqCst) < UNITS {
            assert!(
                Instant::now() < deadline,
                "units left unread: {} of {UNITS} read, count {}",
                total.load(SeqCst),
                n.count()
            );
            thread::sleep(Duration::from_millis(1));
        }
        stop.write(1).unwrap();
        for w in ws {
            w.join().unwrap();
        }
        assert_eq!(total.load(SeqCst), UNITS);
        assert_eq!(n.count(), 0);
        eprintln!(
            "timeout_races_lose_no_wake: {UNITS} units, {} timed-out waits",
            timeouts.load(SeqCst)
        );
    });
}

/// A waiter's timeout expiring while a write comes in, many times over: the wait returns
/// either the event or 0, and in the latter case the event is still there for the next call.
#[test]
fn a_wake_racing_a_timeout_is_kept() {
    bounded(|| {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 1).unwrap();
        for i in 0..400u64 {
            let (ep2, go) = (ep.clone(), Arc::new(Barrier::new(2)));
            let go2 = Arc::clone(&go);
            let t = thread::spawn(move || {
                go2.wait();
                wait_n(&ep2, 1, Some(Duration::from_micros(200))).len()
            });
            go.wait();
            thread::sleep(Duration::from_micros(150 + (i % 100)));
            n.write(1).unwrap();
            let got = t.join().unwrap();
            if got == 0 {
                // Lost by the racing waiter? It must still be queued.
                assert_eq!(
                    wait_n(&ep, 1, Some(Duration::from_secs(5))).len(),
                    1,
                    "iteration {i}: the wake was lost"
                );
            }
            assert_eq!(n.try_read().unwrap(), 1);
            assert!(wait_n(&ep, 1, Some(Duration::ZERO)).is_empty());
        }
    });
}

/// epoll65: two threads harvest a permanently ready LT item with timeout 0; while one is in
/// the middle of a harvest, the other must not see an empty epoll.
#[test]
fn zero_timeout_never_reports_a_false_negative() {
    bounded(|| {
        const ROUNDS: usize = 20_000;
        let ep = Epoll::new();
        let n = Notifier::builder().initial(1).build().unwrap();
        ep.add(&n, Events::IN, 1).unwrap();
        let misses = Arc::new(AtomicUsize::new(0));
        let go = Arc::new(Barrier::new(3));
        let hs: Vec<_> = (0..3)
            .map(|t| {
                let (ep, misses, go) = (ep.clone(), Arc::clone(&misses), Arc::clone(&go));
                thread::spawn(move || {
                    go.wait();
                    for _ in 0..ROUNDS {
                        let got = wait_n(&ep, 1 + 3 * t, Some(Duration::ZERO));
                        if got.len() != 1 {
                            misses.fetch_add(1, SeqCst);
                        }
                    }
                })
            })
            .collect();
        for h in hs {
            h.join().unwrap();
        }
        assert_eq!(misses.load(SeqCst), 0, "zero-timeout waits that returned 0");
    });
}

// ---------------------------------------------------------------------------------------
// stress

/// 4 producers, each writing to its own 2 notifiers; all 8 in one epoll as `IN | ET`; 2
/// pollers loop `wait` + `try_read` of each returned notifier. Sum read == sum written.
fn stress(spin: Option<Duration>, mode: Mode) {
    bounded(move || {
        const PRODUCERS: usize = 4;
        const PER: usize = 2;
        const WRITES: u64 = 3000;
        let ep = Epoll::new();
        ep.set_spin(spin);
        let ns: Arc<Vec<Notifier>> = Arc::new(
            (0..PRODUCERS * PER)
                .map(|_| Notifier::builder().mode(mode).build().unwrap())
                .collect(),
        );
        for (i, n) in ns.iter().enumerate() {
            ep.add(n, Events::IN | Events::ET, i as u64).unwrap();
        }
        let stop = Notifier::new();
        ep.add(&stop, Events::IN, u64::MAX).unwrap();
        let written = Arc::new(AtomicU64::new(0));
        let read = Arc::new(AtomicU64::new(0));
        let pollers: Vec<_> = (0..2)
            .map(|p| {
                let (ep, ns, read) = (ep.clone(), Arc::clone(&ns), Arc::clone(&read));
                thread::spawn(move || loop {
                    let evs = wait_n(&ep, 1 + 3 * p, Some(Duration::from_millis(50)));
                    for e in evs {
                        if e.data == u64::MAX {
                            return;
                        }
                        // Semaphore: one unit per read; drain what is there.
                        while let Ok(v) = ns[e.data as usize].try_read() {
                            read.fetch_add(v, SeqCst);
                        }
                    }
                })
            })
            .collect();
        let producers: Vec<_> = (0..PRODUCERS)
            .map(|p| {
                let (ns, written) = (Arc::clone(&ns), Arc::clone(&written));
                thread::spawn(move || {
                    for i in 0..WRITES {
                        let v = 1 + (i % 3);
                        ns[p * PER + (i as usize % PER)].write(v).unwrap();
                        written.fetch_add(v, SeqCst);
                        if i % 64 == 0 {
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        let want = written.load(SeqCst);
        let deadline = Instant::now() + Duration::from_secs(20);
        while read.load(SeqCst) < want {
            assert!(
                Instant::now() < deadline,
                "read {} of {want}; counts {:?}",
                read.load(SeqCst),
                ns.iter().map(Notifier::count).collect::<Vec<_>>()
            );
            thread::sleep(Duration::from_millis(1));
        }
        stop.write(1).unwrap();
        for p in pollers {
            p.join().unwrap();
        }
        assert_eq!(read.load(SeqCst), want);
        assert!(ns.iter().all(|n| n.count() == 0));
    });
}

#[test]
fn stress_producers_and_pollers_et() {
    stress(None, Mode::Counter);
}

#[test]
fn stress_producers_and_pollers_et_semaphore_with_spin() {
    stress(Some(Duration::from_micros(50)), Mode::Semaphore);
}

// ---------------------------------------------------------------------------------------
// EXCLUSIVE against the kernel: one epoll per event, whatever the notifier's own wake budget

/// How many of two epolls — each with one thread blocked in `wait`, each holding the
/// notifier with `EXCLUSIVE` — wake for one event. The event is a `write(2)` (IN), or, with
/// `out`, a read of a full counter (OUT). Returns `(kernel, evfd)`.
fn exclusive_wakes(semaphore: bool, out: bool) -> (usize, usize) {
    use rustix::event::{epoll, eventfd, EventfdFlags, Timespec};
    let timeout = Duration::from_millis(800);
    let kernel = {
        let mut f = EventfdFlags::NONBLOCK;
        if semaphore {
            f |= EventfdFlags::SEMAPHORE;
        }
        let n = eventfd(0, f).unwrap();
        if out {
            rustix::io::write(&n, &evfd::LIMIT.to_ne_bytes()).unwrap();
        }
        let (tx, rx) = mpsc::channel();
        let bit = if out {
            epoll::EventFlags::OUT
        } else {
            epoll::EventFlags::IN
        };
        for _ in 0..2 {
            let ep = epoll::create(epoll::CreateFlags::CLOEXEC).unwrap();
            epoll::add(
                &ep,
                &n,
                epoll::EventData::new_u64(0),
                bit | epoll::EventFlags::EXCLUSIVE,
            )
            .unwrap();
            let tx = tx.clone();
            thread::spawn(move || {
                let mut buf = [epoll::Event {
                    flags: epoll::EventFlags::empty(),
                    data: epoll::EventData::new_u64(0),
                }; 4];
                let ts = Timespec {
                    tv_sec: 0,
                    tv_nsec: timeout.as_nanos() as i64,
                };
                tx.send(epoll::wait(&ep, &mut buf[..], Some(&ts)).unwrap())
                    .unwrap();
            });
        }
        thread::sleep(Duration::from_millis(200));
        if out {
            rustix::io::read(&n, &mut [0u8; 8]).unwrap();
        } else {
            rustix::io::write(&n, &2u64.to_ne_bytes()).unwrap();
        }
        rx.recv().unwrap() + rx.recv().unwrap()
    };
    let ours = {
        let mode = if semaphore {
            Mode::Semaphore
        } else {
            Mode::Counter
        };
        let n = Notifier::builder().mode(mode).build().unwrap();
        if out {
            n.write(evfd::LIMIT).unwrap();
        }
        let (tx, rx) = mpsc::channel();
        let bit = if out { Events::OUT } else { Events::IN };
        for _ in 0..2 {
            let ep = Epoll::new();
            ep.add(&n, bit | Events::EXCLUSIVE, 0).unwrap();
            let tx = tx.clone();
            thread::spawn(move || tx.send(wait_n(&ep, 4, Some(timeout)).len()).unwrap());
        }
        thread::sleep(Duration::from_millis(200));
        if out {
            n.try_read().unwrap();
        } else {
            n.write(2).unwrap();
        }
        rx.recv().unwrap() + rx.recv().unwrap()
    };
    (kernel, ours)
}

#[test]
fn exclusive_counter_write_wakes_one_epoll_like_the_kernel() {
    bounded(|| assert_eq!(exclusive_wakes(false, false), (1, 1)));
}

/// Regression: a Semaphore `write(n)` wakes up to `n` exclusive entries (so that each unit
/// can go to one of evfd's exclusive blocked readers); `EXCLUSIVE` epoll items used to share
/// that budget, so `write(2)` woke two epolls. eventfd wakes with `nr_exclusive = 1` always
/// (its blocked readers are not exclusive): one epoll.
#[test]
fn exclusive_semaphore_write_wakes_one_epoll_like_the_kernel() {
    bounded(|| assert_eq!(exclusive_wakes(true, false), (1, 1)));
}

/// Regression: a read's `OUT` wake is sent with `nr_exclusive = usize::MAX` (every blocked
/// writer re-checks), so every `EXCLUSIVE|OUT` epoll with a sleeper used to wake; eventfd's
/// read wakes with `nr_exclusive = 1`: one epoll.
#[test]
fn exclusive_out_wake_of_a_read_wakes_one_epoll_like_the_kernel() {
    bounded(|| assert_eq!(exclusive_wakes(false, true), (1, 1)));
}

/// Wakes propagating up nested epolls (inline, under the source's queue lock) while another
/// thread churns the outer epoll's interest set and AutoReset deliveries wake writers during
/// harvests: no deadlock, no lost unit.
#[test]
fn nested_stress_with_churn() {
    bounded(|| {
        const WRITES: u64 = 20_000;
        let outer = Epoll::new();
        let inners: Vec<Epoll> = (0..2).map(|_| Epoll::new()).collect();
        // Notifiers 0..4 counted (two per inner epoll, ET); 4 AutoReset doorbells (IN|OUT|ET,
        // one per inner epoll and one directly in the outer) only make harvest-time wakes.
        let counted: Arc<Vec<Notifier>> = Arc::new((0..4).map(|_| Notifier::new()).collect());
        let bells: Arc<Vec<Notifier>> = Arc::new(
            (0..3)
                .map(|_| Notifier::builder().mode(Mode::AutoReset).build().unwrap())
                .collect(),
        );
        for (i, n) in counted.iter().enumerate() {
            inners[i / 2]
                .add(n, Events::IN | Events::ET, i as u64)
                .unwrap();
        }
        for (j, inner) in inners.iter().enumerate() {
            inner
                .add(
                    &bells[j],
                    Events::IN | Events::OUT | Events::ET,
                    100 + j as u64,
                )
                .unwrap();
            outer.add(inner, Events::IN, 10 + j as u64).unwrap();
        }
        outer
            .add(&bells[2], Events::IN | Events::OUT | Events::ET, 102)
            .unwrap();
        let stop = Notifier::new();
        outer.add(&stop, Events::IN, u64::MAX).unwrap();
        let read = Arc::new(AtomicU64::new(0));
        let consumer = {
            let (outer, inners, counted, read) = (
                outer.clone(),
                inners.clone(),
                Arc::clone(&counted),
                Arc::clone(&read),
            );
            thread::spawn(move || loop {
                for e in wait_n(&outer, 8, Some(Duration::from_millis(20))) {
                    match e.data {
                        u64::MAX => return,
                        10 | 11 => {
                            let inner = &inners[(e.data - 10) as usize];
                            for ie in wait_n(inner, 8, Some(Duration::ZERO)) {
                                if ie.data < 4 {
                                    while let Ok(v) = counted[ie.data as usize].try_read() {
                                        read.fetch_add(v, SeqCst);
                                    }
                                }
                            }
                        }
                        _ => {}
                    }
                }
            })
        };
        let churn = {
            let (outer, inners) = (outer.clone(), inners.clone());
            thread::spawn(move || {
                for k in 0..3000u64 {
                    let inner = &inners[(k % 2) as usize];
                    let data = 10 + k % 2;
                    match k % 3 {
                        0 => outer.modify(inner, Events::IN | Events::ET, data).unwrap(),
                        1 => outer.modify(inner, Events::IN, data).unwrap(),
                        _ => {
                            outer.delete(inner).unwrap();
                            outer.add(inner, Events::IN, data).unwrap();
                        }
                    }
                    thread::yield_now();
                }
                for (j, inner) in inners.iter().enumerate() {
                    outer.modify(inner, Events::IN, 10 + j as u64).unwrap();
                }
            })
        };
        let producers: Vec<_> = (0..2)
            .map(|p| {
                let (counted, bells) = (Arc::clone(&counted), Arc::clone(&bells));
                thread::spawn(move || {
                    for i in 0..WRITES {
                        counted[2 * p + (i as usize % 2)].write(1).unwrap();
                        bells[(i as usize + p) % 3].notify().unwrap();
                        if i % 32 == 0 {
                            thread::yield_now();
                        }
                    }
                })
            })
            .collect();
        for p in producers {
            p.join().unwrap();
        }
        churn.join().unwrap();
        let want = 2 * WRITES;
        let deadline = Instant::now() + Duration::from_secs(20);
        while read.load(SeqCst) < want {
            assert!(
                Instant::now() < deadline,
                "read {} of {want}; counts {:?}",
                read.load(SeqCst),
                counted.iter().map(Notifier::count).collect::<Vec<_>>()
            );
            thread::sleep(Duration::from_millis(1));
        }
        stop.write(1).unwrap();
        consumer.join().unwrap();
        assert_eq!(read.load(SeqCst), want);
    });
}

/// A spinning hand-off leaves its drained level-triggered item queued for the thread it
/// was delivered to (the quiet item, docs/handoff.md), while a third thread's polls of the
/// same epolls harvest it for real (dropping it at 0, delivering it otherwise) and the
/// two sides keep bouncing one unit. Every round trip's unit arrives exactly once and no
/// wait times out, whatever the spin setting.
fn quiet_item_bounce(spin: Option<Duration>, rounds: u64) {
    bounded(move || {
        let (a, b) = (Notifier::new(), Notifier::new());
        let (ea, eb) = (Epoll::new(), Epoll::new());
        ea.add(&a, Events::IN, 1).unwrap();
        eb.add(&b, Events::IN, 2).unwrap();
        ea.set_spin(spin);
        eb.set_spin(spin);
        let stop = Arc::new(AtomicUsize::new(0));
        let disturber = {
            let (ea, eb, stop) = (ea.clone(), eb.clone(), stop.clone());
            thread::spawn(move || {
                let mut seen = 0u64;
                while stop.load(SeqCst) == 0 {
                    seen += wait_n(&ea, 1, Some(Duration::ZERO)).len() as u64;
                    seen += wait_n(&eb, 1, Some(Duration::ZERO)).len() as u64;
                    thread::yield_now();
                }
                seen
            })
        };
        let echo = {
            let (a, b, eb) = (a.clone(), b.clone(), eb.clone());
            thread::spawn(move || {
                for i in 0..rounds {
                    let got = wait_n(&eb, 1, Some(Duration::from_secs(5)));
                    assert_eq!(got.len(), 1, "echo: round {i} timed out");
                    assert_eq!(got[0].data, 2);
                    assert_eq!(b.read().unwrap(), 1, "echo: round {i}");
                    a.write(1).unwrap();
                }
            })
        };
        for i in 0..rounds {
            b.write(1).unwrap();
            let got = wait_n(&ea, 1, Some(Duration::from_secs(5)));
            assert_eq!(got.len(), 1, "main: round {i} timed out");
            assert_eq!(got[0].data, 1);
            assert_eq!(a.read().unwrap(), 1, "main: round {i}");
        }
        echo.join().unwrap();
        stop.store(1, SeqCst);
        disturber.join().unwrap();
        assert_eq!((a.count(), b.count()), (0, 0), "a unit left behind");
    });
}

#[test]
fn quiet_item_bounce_spinning() {
    quiet_item_bounce(Some(Duration::from_micros(100)), 20_000);
}

#[test]
fn quiet_item_bounce_adaptive() {
    quiet_item_bounce(None, 20_000);
}

#[test]
fn quiet_item_bounce_parking() {
    quiet_item_bounce(Some(Duration::ZERO), 5_000);
}
