//! `read_async` / `write_async` / `stream()` on three executors: `futures::executor::block_on`,
//! tokio current-thread and tokio multi-thread; plus adversarial wakers.
//!
//! Every test runs under [`bounded`]: a hang (a lost wakeup, a deadlock) fails the test after
//! a few seconds instead of stalling CI.

use std::future::Future;
use std::pin::{pin, Pin};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Wake, Waker};
use std::thread;
use std::time::Duration;

use evfd::{Mode, Notifier};

mod util;
use futures::stream::{FuturesUnordered, StreamExt};

const LIMIT_SECS: u64 = 20;

/// Run `f` on a fresh thread; fail if it does not finish within `LIMIT_SECS`. A panic in `f`
/// is re-raised here.
fn bounded<R: Send + 'static>(f: impl FnOnce() -> R + Send + 'static) -> R {
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(LIMIT_SECS)) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Ok(_) => unreachable!("sent before returning"),
            Err(p) => std::panic::resume_unwind(p),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!("test hung for {LIMIT_SECS} s"),
    }
}

#[derive(Clone, Copy, Debug)]
enum Exec {
    BlockOn,
    TokioCurrent,
    TokioMulti,
}

const EXECS: [Exec; 3] = [Exec::BlockOn, Exec::TokioCurrent, Exec::TokioMulti];

/// Run the future built by `make` to completion on `exec`, bounded in time.
fn run_on<F, Fut>(exec: Exec, make: F)
where
    F: FnOnce() -> Fut + Send + 'static,
    Fut: Future<Output = ()> + Send + 'static,
{
    bounded(move || match exec {
        Exec::BlockOn => futures::executor::block_on(make()),
        Exec::TokioCurrent => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(make()),
        Exec::TokioMulti => tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap()
            // Spawned, so that it runs on a worker, not on the calling thread.
            .block_on(async move { tokio::spawn(make()).await.unwrap() }),
    })
}

fn sem() -> Notifier {
    Notifier::builder().mode(Mode::Semaphore).build().unwrap()
}

/// Write `n` from another OS thread after `delay`.
fn write_later(n: &Notifier, v: u64, delay: Duration) -> thread::JoinHandle<()> {
    let n = n.clone();
    thread::spawn(move || {
        thread::sleep(delay);
        n.write(v).unwrap();
    })
}

/// `fut`, awaited, with `n.write(v)` from another OS thread once `fut`'s first poll returned
/// `Pending` (so the write wakes it).
async fn write_once_pending<F: Future>(n: &Notifier, v: u64, fut: F) -> F::Output {
    let n = n.clone();
    util::once_pending(fut, move || n.write(v).unwrap()).await.0
}

/// Poll a future once with the current task's waker.
async fn poll_once<F: Future + Unpin>(f: &mut F) -> Poll<F::Output> {
    std::future::poll_fn(|cx| Poll::Ready(Pin::new(&mut *f).poll(cx))).await
}

/// How many entries wait in `n`'s queue (from its `Debug`).
fn waiters(n: &Notifier) -> usize {
    let d = format!("{n:?}");
    let tail = &d[d.find("waiters: ").expect("Debug shows waiters") + 9..];
    tail[..tail
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(tail.len())]
        .parse()
        .unwrap()
}

/// Poll a wait future with the current task until it has an entry in `n`'s queue: its first
/// poll may yield once instead of registering (see `TaskWait`'s "Yield once").
async fn park<F: Future + Unpin>(n: &Notifier, f: &mut F) {
    let before = waiters(n);
    for _ in 0..2 {
        assert!(poll_once(f).await.is_pending());
        if waiters(n) > before {
            return;
        }
    }
    panic!("not registered after two polls");
}

/// As [`park`], with a given waker, outside any executor.
fn park_with<F: Future + Unpin>(n: &Notifier, f: &mut F, w: &Waker) {
    let before = waiters(n);
    for _ in 0..2 {
        assert!(poll_with(f, w).is_pending());
        if waiters(n) > before {
            return;
        }
    }
    panic!("not registered after two polls");
}

// ---------------------------------------------------------------------------------------------
// The evidence of issue 4, on each executor.

#[test]
fn pending_read_completes_after_write_from_another_thread() {
    for exec in EXECS {
        for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
            run_on(exec, move || async move {
                let n = Notifier::builder().mode(mode).build().unwrap();
                let got = write_once_pending(&n, 3, n.read_async()).await.unwrap();
                let want = if mode == Mode::Semaphore { 1 } else { 3 };
                assert_eq!(got, want, "{exec:?} {mode:?}");
                assert_eq!(n.count(), 3 - want);
            });
        }
    }
}

#[test]
fn dropped_pending_read_leaves_the_count_readable() {
    for exec in EXECS {
        run_on(exec, move || async move {
            let n = sem();
            let mut a = n.read_async();
            let mut b = n.read_owned();
            park(&n, &mut a).await;
            park(&n, &mut b).await;
            // The write wakes `a` (FIFO); `a` is dropped without using it.
            write_later(&n, 1, Duration::ZERO).join().unwrap();
            drop(a);
            // The wake was handed on: `b` completes.
            assert_eq!(b.await.unwrap(), 1);

            // And with nobody else waiting, the unit simply stays in the count.
            let mut c = n.read_async();
            park(&n, &mut c).await;
            write_later(&n, 2, Duration::ZERO).join().unwrap();
            drop(c);
            assert_eq!(n.count(), 2, "{exec:?}");
            assert_eq!(n.try_read().unwrap(), 1);
            assert_eq!(n.try_read().unwrap(), 1);
        });
    }
}

#[test]
fn dropped_by_timeout_consumes_nothing() {
    for exec in [Exec::TokioCurrent, Exec::TokioMulti] {
        run_on(exec, move || async move {
            let n = Notifier::new();
            let r = tokio::time::timeout(Duration::from_millis(10), n.read_async()).await;
            assert!(r.is_err(), "timed out");
            n.write(5).unwrap();
            assert_eq!(n.try_read().unwrap(), 5);
        });
    }
}

#[test]
fn semaphore_three_pending_two_units() {
    for exec in EXECS {
        run_on(exec, move || async move {
            let n = sem();
            let mut set: FuturesUnordered<_> = (0..3).map(|_| n.read_owned()).collect();
            assert!(poll_once(&mut set.next()).await.is_pending());
            write_later(&n, 2, Duration::from_millis(5));
            assert_eq!(set.next().await.unwrap().unwrap(), 1);
            assert_eq!(set.next().await.unwrap().unwrap(), 1);
            // The third stays pending, even after other tasks had time to run.
            for _ in 0..3 {
                assert!(poll_once(&mut set.next()).await.is_pending(), "{exec:?}");
                thread::sleep(Duration::from_millis(5));
            }
            write_later(&n, 1, Duration::from_millis(5));
            assert_eq!(set.next().await.unwrap().unwrap(), 1);
            assert_eq!(n.count(), 0);
        });
    }
}

#[test]
fn semaphore_three_spawned_tasks_two_units() {
    bounded(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let n = sem();
            let done = Arc::new(AtomicUsize::new(0));
            let tasks: Vec<_> = (0..3)
                .map(|_| {
                    let (n, done) = (n.clone(), done.clone());
                    tokio::spawn(async move {
                        assert_eq!(n.read_async().await.unwrap(), 1);
                        done.fetch_add(1, SeqCst);
                    })
                })
                .collect();
            tokio::time::sleep(Duration::from_millis(20)).await;
            n.write(2).unwrap();
            while done.load(SeqCst) < 2 {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
            tokio::time::sleep(Duration::from_millis(30)).await;
            assert_eq!(done.load(SeqCst), 2, "exactly two complete");
            n.write(1).unwrap();
            for t in tasks {
                t.await.unwrap();
            }
            assert_eq!(done.load(SeqCst), 3);
            assert_eq!(n.count(), 0);
        });
    });
}

/// A waker that counts its wakes.
#[derive(Default)]
struct Count(AtomicUsize);

impl Wake for Count {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn counting() -> (Arc<Count>, Waker) {
    let c = Arc::new(Count::default());
    (c.clone(), Waker::from(c))
}

#[test]
fn two_wakers_the_last_one_is_woken() {
    bounded(|| {
        let n = Notifier::new();
        let (c1, w1) = counting();
        let (c2, w2) = counting();
        let mut f = pin!(n.read_async());
        park_with(&n, &mut f, &w1);
        let c1_before = c1.0.load(SeqCst);
        assert!(f.as_mut().poll(&mut Context::from_waker(&w2)).is_pending());
        assert_eq!(waiters(&n), 1, "the entry is reused");
        write_later(&n, 1, Duration::ZERO).join().unwrap();
        assert_eq!((c1.0.load(SeqCst) - c1_before, c2.0.load(SeqCst)), (0, 1));
        assert!(f.as_mut().poll(&mut Context::from_waker(&w2)).is_ready());
    });
}

#[test]
fn future_moved_between_tasks_wakes_the_new_task() {
    for exec in EXECS {
        run_on(exec, move || async move {
            let n = Notifier::new();
            let mut f = n.read_owned();
            // Registered with a counting waker (think: polled by a task that then gave it up).
            let (c1, w1) = counting();
            park_with(&n, &mut f, &w1);
            let c1_before = c1.0.load(SeqCst);
            // Now awaited by this task: its waker must replace the first (the write comes once
            // it has been polled here).
            assert_eq!(write_once_pending(&n, 4, f).await.unwrap(), 4);
            assert_eq!(
                c1.0.load(SeqCst) - c1_before,
                0,
                "{exec:?}: the old waker was not woken"
            );
        });
    }
    // And across tokio tasks on different workers.
    bounded(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let n = Notifier::new();
            let mut f = n.read_owned();
            let n2 = n.clone();
            // Registered by one task (handed back in a tuple: the future is the payload)...
            let (f,) = tokio::spawn(async move {
                park(&n2, &mut f).await;
                (f,)
            })
            .await
            .unwrap();
            // ...and completed by another (the write comes once that one has polled it).
            let (tx, rx) = mpsc::channel();
            let task = tokio::spawn(util::reporting_first_poll(f, move |pending| {
                assert!(pending, "ready before the write");
                tx.send(()).unwrap();
            }));
            let t = thread::spawn(move || {
                if rx.recv().is_ok() {
                    n.write(6).unwrap();
                }
            });
            assert_eq!(task.await.unwrap().unwrap(), 6);
            t.join().unwrap();
        });
    });
}

#[test]
fn write_async_waits_for_room_on_every_executor() {
    for exec in EXECS {
        run_on(exec, move || async move {
            let n = Notifier::builder()
                .initial(evfd::LIMIT - 1)
                .build()
                .unwrap();
            let n2 = n.clone();
            // The read makes room once the write is pending.
            let (w, r) = util::once_pending(n.write_async(5), move || n2.read().unwrap()).await;
            w.unwrap();
            assert_eq!(r, evfd::LIMIT - 1);
            assert_eq!(n.count(), 5, "{exec:?}");
            let e = n.write_async(u64::MAX).await.unwrap_err();
            assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
        });
    }
}

#[test]
fn many_tasks_and_threads_conserve_units() {
    // Semaphore work counter: 4 tasks (read_async) and 2 threads (read) drain what 2 writer
    // threads put in; every unit is taken exactly once.
    const PER_WRITER: u64 = 20_000;
    bounded(|| {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let n = sem();
        let taken = Arc::new(AtomicUsize::new(0));
        let total = 2 * PER_WRITER as usize;
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let n = n.clone();
                thread::spawn(move || (0..PER_WRITER).for_each(|_| n.write(1).unwrap()))
            })
            .collect();
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let (n, taken) = (n.clone(), taken.clone());
                thread::spawn(move || {
                    while taken.load(SeqCst) < total {
                        if let Ok(v) = n.read_timeout(Duration::from_millis(2)) {
                            taken.fetch_add(v as usize, SeqCst);
                        }
                    }
                })
            })
            .collect();
        rt.block_on(async {
            let tasks: Vec<_> = (0..4)
                .map(|_| {
                    let (n, taken) = (n.clone(), taken.clone());
                    tokio::spawn(async move {
                        while taken.load(SeqCst) < total {
                            let r = tokio::time::timeout(Duration::from_millis(2), n.read_async());
                            if let Ok(v) = r.await {
                                taken.fetch_add(v.unwrap() as usize, SeqCst);
                            }
                        }
                    })
                })
                .collect();
            for t in tasks {
                t.await.unwrap();
            }
        });
        writers.into_iter().for_each(|w| w.join().unwrap());
        readers.into_iter().for_each(|r| r.join().unwrap());
        assert_eq!(taken.load(SeqCst), total);
        assert_eq!(n.count(), 0);
    });
}

#[cfg(feature = "futures")]
#[test]
fn stream_over_1e5_writes_from_two_threads_yields_the_total() {
    const WRITES_PER_THREAD: u64 = 50_000;
    for exec in EXECS {
        for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
            run_on(exec, move || async move {
                let n = Notifier::builder().mode(mode).build().unwrap();
                let writers: Vec<_> = (0..2u64)
                    .map(|k| {
                        let n = n.clone();
                        // Thread 0 writes 1s, thread 1 writes 1, 2, 3, 1, 2, 3, …
                        thread::spawn(move || {
                            (0..WRITES_PER_THREAD)
                                .map(|i| if k == 0 { 1 } else { 1 + i % 3 })
                                .inspect(|&v| n.write(v).unwrap())
                                .sum::<u64>()
                        })
                    })
                    .collect();
                let total: u64 =
                    WRITES_PER_THREAD + (0..WRITES_PER_THREAD).map(|i| 1 + i % 3).sum::<u64>();
                let mut s = n.stream();
                let (mut got, mut items) = (0u64, 0u64);
                while got < total {
                    got += s.next().await.unwrap().unwrap();
                    items += 1;
                }
                let written: u64 = writers.into_iter().map(|w| w.join().unwrap()).sum();
                assert_eq!(got, written, "{exec:?} {mode:?}");
                if mode == Mode::Semaphore {
                    assert_eq!(items, written, "one item per unit");
                }
            });
        }
    }
}

#[cfg(feature = "futures")]
#[test]
fn stream_awaited_with_next_completes_on_wake() {
    for exec in EXECS {
        run_on(exec, move || async move {
            let n = sem();
            let mut s = n.stream();
            let three: Vec<u64> =
                write_once_pending(&n, 3, (&mut s).take(3).map(Result::unwrap).collect()).await;
            assert_eq!(three, vec![1, 1, 1], "{exec:?}");
            assert!(!futures::stream::FusedStream::is_terminated(&s));
        });
    }
}

// ---------------------------------------------------------------------------------------------
// Adversarial wakers (in the style of tokio's `sync/tests/notify.rs`).

/// A waker whose `clone`, `wake` and `drop` call `hook` with the notifier. Reference counted
/// through an `Arc`, as a real waker is.
struct Hooked {
    n: Notifier,
    on_clone: fn(&Notifier),
    on_wake: fn(&Notifier),
    on_drop: fn(&Notifier),
    wakes: AtomicUsize,
}

fn noop(_: &Notifier) {}

fn hooked(
    n: &Notifier,
    on_clone: fn(&Notifier),
    on_wake: fn(&Notifier),
    on_drop: fn(&Notifier),
) -> (Arc<Hooked>, Waker) {
    let h = Arc::new(Hooked {
        n: n.clone(),
        on_clone,
        on_wake,
        on_drop,
        wakes: AtomicUsize::new(0),
    });
    let raw = RawWaker::new(Arc::into_raw(h.clone()) as *const (), &HOOKED_VTABLE);
    // SAFETY: the vtable below upholds the RawWaker contract: `data` is an `Arc<Hooked>` raw
    // pointer owning one strong count per waker.
    (h, unsafe { Waker::from_raw(raw) })
}

static HOOKED_VTABLE: RawWakerVTable =
    RawWakerVTable::new(hooked_clone, hooked_wake, hooked_wake_by_ref, hooked_drop);

fn hooked_clone(p: *const ()) -> RawWaker {
    // SAFETY: `p` is an `Arc<Hooked>` pointer owning a strong count (see `hooked`).
    unsafe { Arc::increment_strong_count(p as *const Hooked) };
    // SAFETY: as above; the count just added keeps it alive.
    let h = unsafe { &*(p as *const Hooked) };
    (h.on_clone)(&h.n);
    RawWaker::new(p, &HOOKED_VTABLE)
}

fn hooked_wake(p: *const ()) {
    hooked_wake_by_ref(p);
    hooked_drop(p);
}

fn hooked_wake_by_ref(p: *const ()) {
    // SAFETY: `p` is a live `Arc<Hooked>` pointer (the waker owns a count).
    let h = unsafe { &*(p as *const Hooked) };
    h.wakes.fetch_add(1, SeqCst);
    (h.on_wake)(&h.n);
}

fn hooked_drop(p: *const ()) {
    {
        // SAFETY: `p` is a live `Arc<Hooked>` pointer (the waker owns a count).
        let h = unsafe { &*(p as *const Hooked) };
        (h.on_drop)(&h.n);
    }
    // SAFETY: gives back the strong count this waker owned.
    drop(unsafe { Arc::from_raw(p as *const Hooked) });
}

fn poll_with<F: Future + Unpin>(f: &mut F, w: &Waker) -> Poll<F::Output> {
    Pin::new(f).poll(&mut Context::from_waker(w))
}

#[test]
fn waker_clone_that_writes_does_not_deadlock() {
    bounded(|| {
        let n = Notifier::new();
        let (h, w) = hooked(&n, |n| n.write(1).unwrap(), noop, noop);
        // First poll: yields once (no clone). Second: the read fails, the clone (before any
        // lock) writes 1, the re-check after registering reads it.
        let mut f = n.read_async();
        assert!(poll_with(&mut f, &w).is_pending());
        assert_eq!(poll_with(&mut f, &w).map(Result::unwrap), Poll::Ready(1));
        // Re-poll path: register with a plain waker, re-poll with the writing one. Its clone
        // writes and so wakes (claims) our own registration; we register again and
        // take the count.
        let (_, plain) = counting();
        let mut g = n.read_async();
        park_with(&n, &mut g, &plain);
        assert_eq!(poll_with(&mut g, &w).map(Result::unwrap), Poll::Ready(1));
        drop(w);
        assert_eq!(n.count(), 0);
        assert_eq!(Arc::strong_count(&h), 1, "every clone was dropped");
    });
}

#[test]
fn waker_clone_that_writes_and_reads_does_not_deadlock() {
    bounded(|| {
        let n = sem();
        // The clone writes 1 (waking whatever is queued) and takes it back: net zero, but it
        // re-enters the notifier from both sides while we are between `op` and the lock.
        let (h, w) = hooked(
            &n,
            |n| {
                n.write(1).unwrap();
                n.try_read().unwrap();
            },
            noop,
            noop,
        );
        let mut f = n.read_async();
        // First poll: yields once (wakes itself, no clone).
        assert!(poll_with(&mut f, &w).is_pending());
        assert_eq!(h.wakes.load(SeqCst), 1);
        // Register path: the clone runs before `add`.
        assert!(poll_with(&mut f, &w).is_pending());
        assert_eq!(waiters(&n), 1);
        // Update path: the clone's write wakes (claims) our own registration; we see it and
        // we re-register (at the head) without a second clone.
        assert!(poll_with(&mut f, &w).is_pending());
        assert_eq!(
            h.wakes.load(SeqCst),
            2,
            "the clone's write woke the registered waker"
        );
        assert_eq!(n.count(), 0);
        n.write(1).unwrap();
        assert_eq!(h.wakes.load(SeqCst), 3, "the re-registered entry is woken");
        assert_eq!(poll_with(&mut f, &w).map(Result::unwrap), Poll::Ready(1));
        drop(w);
        assert_eq!(n.count(), 0);
        assert!(format!("{n:?}").contains("waiters: 0"), "{n:?}");
        assert_eq!(Arc::strong_count(&h), 1, "every clone was dropped");
    });
}

#[test]
fn waker_wake_that_reenters_does_not_deadlock() {
    bounded(|| {
        let n = sem();
        // a's wake writes one more unit (which must reach b) and reads nothing.
        let (ha, wa) = hooked(&n, noop, |n| n.write(1).unwrap(), noop);
        let (cb, wb) = counting();
        let mut a = n.read_async();
        let mut b = n.read_async();
        // Register `a` with a plain waker (its first poll wakes itself), then swap in `wa`.
        park_with(&n, &mut a, &counting().1);
        assert!(poll_with(&mut a, &wa).is_pending());
        park_with(&n, &mut b, &wb);
        assert_eq!(cb.0.load(SeqCst), 0);
        n.write(1).unwrap(); // wakes a, whose wake writes 1, which wakes b
        assert_eq!(ha.wakes.load(SeqCst), 1);
        assert_eq!(cb.0.load(SeqCst), 1);
        assert_eq!(n.count(), 2);
        assert!(poll_with(&mut a, &wa).is_ready());
        assert!(poll_with(&mut b, &wb).is_ready());
        assert_eq!(n.count(), 0);

        // A wake that reads (try_read) and polls a fresh future of the same notifier.
        let (_, wc) = hooked(
            &n,
            noop,
            |n| {
                let _ = n.try_read();
                let (_, w) = counting();
                let mut f = n.read_async();
                let _ = poll_with(&mut f, &w);
            },
            noop,
        );
        let mut c = n.read_async();
        park_with(&n, &mut c, &counting().1);
        assert!(poll_with(&mut c, &wc).is_pending());
        n.write(1).unwrap();
        // The wake's try_read took the unit; the nested future was polled and dropped.
        assert_eq!(n.count(), 0);
        assert!(poll_with(&mut c, &wc).is_pending());
    });
}

#[test]
fn waker_drop_that_reenters_does_not_deadlock() {
    bounded(|| {
        let n = Notifier::new();
        // Dropping any clone of this waker writes 1: the queue drops a replaced or removed
        // waker only after unlocking.
        let (_, w) = hooked(&n, noop, noop, |n| n.write(1).unwrap());
        let mut f = n.read_async();
        park_with(&n, &mut f, &w);
        let (_, plain) = counting();
        // The re-poll drops the old (hooked) waker last, with no lock held: it writes 1, which wakes
        // our entry (now with `plain`).
        let r = poll_with(&mut f, &plain);
        assert!(r.is_pending());
        assert_eq!(n.count(), 1);
        assert!(poll_with(&mut f, &plain).is_ready());
        let mut g = n.read_async();
        let (_, w2) = hooked(&n, noop, noop, |n| drop(n.try_read()));
        park_with(&n, &mut g, &w2);
        drop(g); // remove drops the waker after unlocking
        drop(w2);
        drop(w); // the test's own copy writes 1 more
        assert_eq!(n.count(), 1);
    });
}

/// A waker that panics when woken.
struct Panics;

impl Wake for Panics {
    fn wake(self: Arc<Self>) {
        panic!("adversarial waker panics in wake");
    }
}

#[test]
fn waker_panic_in_wake_leaves_the_queue_consistent() {
    bounded(|| {
        let n = sem();
        let wp = Waker::from(Arc::new(Panics));
        let (cb, wb) = counting();
        let mut a = n.read_async();
        let mut b = n.read_async();
        // Register `a` with a plain waker (its first poll wakes itself), then swap in `wp`.
        park_with(&n, &mut a, &counting().1);
        assert!(poll_with(&mut a, &wp).is_pending());
        park_with(&n, &mut b, &wb);
        assert_eq!(cb.0.load(SeqCst), 0);
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| n.write(2)));
        assert!(r.is_err(), "the panic reached the writer");
        // The write happened, and b's wake (collected in the same batch) was still delivered.
        assert_eq!(n.count(), 2);
        assert_eq!(cb.0.load(SeqCst), 1);
        assert!(poll_with(&mut a, &wb).is_ready());
        assert!(poll_with(&mut b, &wb).is_ready());
        assert_eq!(n.count(), 0);
        // The queue still works: later futures wait, are woken, and complete.
        for exec in EXECS {
            let n = n.clone();
            run_on(exec, move || async move {
                let t = write_later(&n, 1, Duration::from_millis(5));
                assert_eq!(n.read_async().await.unwrap(), 1);
                t.join().unwrap();
            });
        }
        assert_eq!(n.count(), 0);
        assert!(format!("{n:?}").contains("waiters: 0"), "{n:?}");
    });
}

#[test]
fn waker_drop_that_reenters_from_the_list_does_not_deadlock() {
    bounded(|| {
        let n = Notifier::new();
        // A first reader holds the task slot, so the hooked one queues in the list.
        let (_, first) = counting();
        let mut a = n.read_async();
        park_with(&n, &mut a, &first);
        let (_, w) = hooked(&n, noop, noop, |n| n.write(1).unwrap());
        let mut f = n.read_async();
        park_with(&n, &mut f, &w);
        assert_eq!(waiters(&n), 2);
        let (_, plain) = counting();
        // update_waker drops the old (hooked) waker after unlocking: its write wakes the
        // slot's reader (ahead of us), not a deadlock.
        assert!(poll_with(&mut f, &plain).is_pending());
        assert_eq!(n.count(), 1);
        assert!(poll_with(&mut a, &first).is_ready());
        drop(f);
        drop(w);
        assert_eq!(n.count(), 1, "the test's own copy wrote 1 more");
    });
}
