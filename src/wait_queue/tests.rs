//! Unit tests of the wait queue: walk order, `nr_exclusive`, the interest fast path, task
//! wakers, detach, and adversarial wakers (re-entrant, panicking).
//!
//! Plain `std` threads and types: these run under `cargo test` and Miri
//! (`cargo +nightly miri test --lib`); the loom models are in `src/tests/`.
#![cfg(not(evfd_loom))]

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::sync::{mpsc, Arc, Mutex};
use std::task::{Wake, Waker};
use std::time::Duration;

use super::*;

/// Log of callback invocations: (entry id, key), in call order.
type Log = Arc<Mutex<Vec<(u32, Events)>>>;

/// A test epoll-item stand-in: logs each wake, answers `accept`, counts detaches, and can
/// schedule a post-unlock action.
struct TestCallback {
    id: u32,
    accept: bool,
    log: Log,
    calls: AtomicUsize,
    detached: AtomicUsize,
    post: Option<Arc<dyn PostWake>>,
}

impl TestCallback {
    fn new(id: u32, accept: bool, log: &Log) -> Arc<Self> {
        Arc::new(TestCallback {
            id,
            accept,
            log: Arc::clone(log),
            calls: AtomicUsize::new(0),
            detached: AtomicUsize::new(0),
            post: None,
        })
    }
}

impl Callback for TestCallback {
    fn wake(&self, key: Events, batch: &mut WakeBatch) -> bool {
        self.calls.fetch_add(1, SeqCst);
        self.log.lock().unwrap().push((self.id, key));
        if let Some(p) = &self.post {
            batch.push_post(Arc::clone(p), key);
        }
        self.accept
    }

    fn detach(&self) {
        self.detached.fetch_add(1, SeqCst);
    }
}

fn callback(cb: &Arc<TestCallback>) -> Target {
    Target::Callback(Arc::clone(cb) as Arc<dyn Callback>)
}

fn new_log() -> Log {
    Arc::new(Mutex::new(Vec::new()))
}

fn ids(log: &Log) -> Vec<u32> {
    log.lock().unwrap().drain(..).map(|(id, _)| id).collect()
}

/// A task waker that counts its wakes.
#[derive(Default)]
struct CountWaker(AtomicUsize);

impl Wake for CountWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A task waker that panics when woken (a hostile foreign waker).
struct PanicWaker;

impl Wake for PanicWaker {
    fn wake(self: Arc<Self>) {
        panic!("adversarial waker panics in wake()");
    }
}

/// A thread entry for the calling thread (its wake only leaves an unpark token).
fn thread_entry() -> (Arc<ThreadWaiter>, Target) {
    let w = Arc::new(ThreadWaiter::new());
    let t = Target::Thread(Arc::clone(&w));
    (w, t)
}

/// Runs `f` on a helper thread and fails if it does not finish in time: a deadlock (a lock
/// taken where it must not be) fails the test instead of hanging it.
fn finishes<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(()) => h.join().unwrap(),
        Err(_) => panic!("{what}: did not finish (deadlock?)"),
    }
}

#[test]
fn empty_queue_wake_is_a_no_op() {
    let wq = WaitQueue::new();
    assert_eq!(wq.interest(), Events::empty());
    wq.wake(Events::all(), usize::MAX);
    assert_eq!(wq.len(), 0);
}

/// Non-exclusive entries go to the head, exclusive ones to the tail (the kernel's
/// convention); the walk runs head to tail and stops after `nr_exclusive` exclusive entries.
#[test]
fn walk_order_non_exclusive_first_then_nr_exclusive() {
    let log = new_log();
    let wq = WaitQueue::new();
    let a = TestCallback::new(1, true, &log);
    let b = TestCallback::new(2, true, &log);
    let x = TestCallback::new(3, true, &log);
    let y = TestCallback::new(4, true, &log);
    wq.add(Events::IN, true, false, callback(&x));
    wq.add(Events::IN, false, true, callback(&a));
    wq.add(Events::IN, true, false, callback(&y));
    wq.add(Events::IN, false, true, callback(&b));
    // Queue: b, a (front-inserted, LIFO), x, y (tail-inserted, FIFO).

    wq.wake(Events::IN, 1);
    assert_eq!(
        ids(&log),
        [2, 1, 3],
        "non-exclusive all woken, then one exclusive"
    );

    // At most one exclusive *callback* (an EXCLUSIVE epoll item) accepts a wake, whatever
    // the budget: the kernel wakes an eventfd's queue with nr_exclusive = 1.
    wq.wake(Events::IN, 2);
    assert_eq!(ids(&log), [2, 1, 3]);

    wq.wake(Events::IN, usize::MAX);
    assert_eq!(ids(&log), [2, 1, 3]);
    // Callbacks stay queued when woken.
    assert_eq!(wq.len(), 4);
    assert_eq!(y.calls.load(SeqCst), 0);
    // Leave nothing queued: a queue dropped with entries is a bug (debug assertion).
    wq.detach_all();
}

/// `nr_exclusive == 0` is treated like the kernel's "stop at the first accepting exclusive".
#[test]
fn nr_exclusive_zero_still_stops_at_first_exclusive() {
    let log = new_log();
    let wq = WaitQueue::new();
    let x = TestCallback::new(1, true, &log);
    let y = TestCallback::new(2, true, &log);
    wq.add(Events::IN, true, false, callback(&x));
    wq.add(Events::IN, true, false, callback(&y));
    wq.wake(Events::IN, 0);
    assert_eq!(ids(&log), [1]);
    // Leave nothing queued: a queue dropped with entries is a bug (debug assertion).
    wq.detach_all();
}

/// An exclusive entry that refuses the wake (an epoll with nobody waiting) does not count
/// against `nr_exclusive`: the walk goes on to the next exclusive entry.
#[test]
fn refused_exclusive_wake_does_not_end_the_walk() {
    let log = new_log();
    let wq = WaitQueue::new();
    let no = TestCallback::new(1, false, &log);
    let yes = TestCallback::new(2, true, &log);
    let after = TestCallback::new(3, true, &log);
    wq.add(Events::IN, true, false, callback(&no));
    wq.add(Events::IN, true, false, callback(&yes));
    wq.add(Events::IN, true, false, callback(&after));
    wq.wake(Events::IN, 1);
    assert_eq!(ids(&log), [1, 2]);
    // Leave nothing queued: a queue dropped with entries is a bug (debug assertion).
    wq.detach_all();
}

/// Exclusive thread entries are woken FIFO, `nr_exclusive` at a time, and removed
/// (autoremove); a woken waiter's `remove` then reports `false`.
#[test]
fn nr_exclusive_threads_fifo_and_autoremove() {
    let wq = WaitQueue::new();
    let entries: Vec<_> = (0..3)
        .map(|_| {
            let (w, t) = thread_entry();
            (w, wq.add(Events::IN, true, false, t))
        })
        .collect();
    wq.wake(Events::IN, 2);
    let notified: Vec<bool> = entries.iter().map(|(w, _)| w.is_notified()).collect();
    assert_eq!(notified, [true, true, false]);
    assert_eq!(wq.len(), 1);
    assert!(!wq.remove(entries[0].1), "woken entry is already gone");
    assert!(wq.remove(entries[2].1), "unwoken entry is still queued");
    assert_eq!(wq.len(), 0);
    assert_eq!(wq.interest(), Events::empty());
}

/// An `EXCLUSIVE` callback (epoll item) and exclusive threads (blocked readers) have
/// separate budgets: a wake with `nr_exclusive = 1` wakes one reader *and* one exclusive
/// callback, in either queue order, and still never a second exclusive callback. (An
/// `EXCLUSIVE` item queued before a blocked reader used to take the reader's wake.)
#[test]
fn exclusive_callbacks_and_exclusive_threads_have_separate_budgets() {
    for callback_first in [true, false] {
        let log = new_log();
        let wq = WaitQueue::new();
        let x = TestCallback::new(1, true, &log);
        let y = TestCallback::new(2, true, &log);
        let (w1, t1) = thread_entry();
        let (w2, t2) = thread_entry();
        if callback_first {
            wq.add(Events::IN, true, false, callback(&x));
            wq.add(Events::IN, true, false, t1);
        } else {
            wq.add(Events::IN, true, false, t1);
            wq.add(Events::IN, true, false, callback(&x));
        }
        wq.add(Events::IN, true, false, callback(&y));
        let k2 = wq.add(Events::IN, true, false, t2);
        // The exclusive callback's stored mask carries the EXCLUSIVE marker.
        assert!(wq.interest().contains(Events::EXCLUSIVE));
        wq.wake(Events::IN, 1);
        assert!(w1.is_notified(), "callback_first={callback_first}");
        assert!(!w2.is_notified(), "one reader per unit of budget");
        assert_eq!(ids(&log), [1], "one exclusive callback");
        assert!(wq.remove(k2));
        wq.detach_all();
        assert_eq!(wq.interest(), Events::empty());
    }
}

/// Non-exclusive thread entries are all woken, whatever `nr_exclusive` says.
#[test]
fn non_exclusive_threads_all_woken() {
    let wq = WaitQueue::new();
    let ws: Vec<_> = (0..3)
        .map(|_| {
            let (w, t) = thread_entry();
            wq.add(Events::OUT, false, false, t);
            w
        })
        .collect();
    wq.wake(Events::OUT, 1);
    assert!(ws.iter().all(|w| w.is_notified()));
    assert_eq!(wq.len(), 0);
    assert_eq!(wq.interest(), Events::empty());
}

/// Only entries whose mask intersects the key are visited; `interest` is the union of the
/// masks and follows removals.
#[test]
fn mask_filter_and_interest_union() {
    let log = new_log();
    let wq = WaitQueue::new();
    let pri = TestCallback::new(1, true, &log);
    let inout = TestCallback::new(2, true, &log);
    let kp = wq.add(Events::PRI, false, true, callback(&pri));
    assert_eq!(wq.interest(), Events::PRI);

    // Fast path: nobody wants IN; the PRI entry is not invoked.
    wq.wake(Events::IN, usize::MAX);
    assert_eq!(pri.calls.load(SeqCst), 0);

    let kio = wq.add(Events::IN | Events::OUT, false, true, callback(&inout));
    assert_eq!(wq.interest(), Events::IN | Events::OUT | Events::PRI);

    // Slow path (someone wants IN): the PRI entry is still skipped by the walk.
    wq.wake(Events::IN, usize::MAX);
    assert_eq!(pri.calls.load(SeqCst), 0);
    assert_eq!(inout.calls.load(SeqCst), 1);
    wq.wake(Events::PRI, usize::MAX);
    assert_eq!(ids(&log), [2, 1]);
    assert_eq!(log.lock().unwrap().len(), 0);

    assert!(wq.set_mask(kio, Events::OUT));
    assert_eq!(wq.interest(), Events::OUT | Events::PRI);
    assert!(wq.remove(kp));
    assert_eq!(wq.interest(), Events::OUT);
    assert!(!wq.remove(kp), "a stale key finds nothing");
    assert!(!wq.set_mask(kp, Events::IN), "a stale key finds nothing");
    assert!(wq.remove(kio));
    assert_eq!(wq.interest(), Events::empty());
}

/// A key nobody wants costs no lock: the wake returns even while another thread holds the
/// queue's lock. (If it took the lock it would wait for the holder and the test would fail.)
#[test]
fn unwanted_key_takes_no_lock() {
    let log = new_log();
    let wq = Arc::new(WaitQueue::new());
    let pri = TestCallback::new(1, true, &log);
    wq.add(Events::PRI, false, true, callback(&pri));

    let guard = crate::loom::lock(&wq.list);
    let wq2 = Arc::clone(&wq);
    let (tx, rx) = mpsc::channel();
    let h = std::thread::spawn(move || {
        wq2.wake(Events::IN | Events::OUT, usize::MAX);
        let _ = tx.send(());
    });
    let done = rx.recv_timeout(Duration::from_secs(10)).is_ok();
    drop(guard);
    h.join().unwrap();
    assert!(done, "a wake for an unwanted key waited for the queue lock");
    assert_eq!(pri.calls.load(SeqCst), 0);
    // Leave nothing queued: a queue dropped with entries is a bug (debug assertion).
    wq.detach_all();
}

/// `update_waker` swaps a queued task's waker (the new one is woken, the old one is dropped
/// and never woken); on an entry that is gone it reports `false`.
#[test]
fn update_waker_replaces_and_drops_the_old_waker() {
    let wq = WaitQueue::new();
    let old = Arc::new(CountWaker::default());
    let new = Arc::new(CountWaker::default());
    let key = wq.add(
        Events::IN,
        true,
        false,
        Target::Task(Waker::from(Arc::clone(&old))),
    );
    assert_eq!(Arc::strong_count(&old), 2);

    assert!(wq.update_waker(key, Waker::from(Arc::clone(&new))).is_ok());
    assert_eq!(Arc::strong_count(&old), 1, "the replaced waker was dropped");

    wq.wake(Events::IN, 1);
    assert_eq!(old.0.load(SeqCst), 0);
    assert_eq!(new.0.load(SeqCst), 1);
    assert_eq!(Arc::strong_count(&new), 1, "the woken waker was consumed");
    assert_eq!(wq.len(), 0);

    let again = Arc::new(CountWaker::default());
    assert!(wq
        .update_waker(key, Waker::from(Arc::clone(&again)))
        .is_err());
    assert_eq!(
        Arc::strong_count(&again),
        1,
        "the refused waker was dropped"
    );
}

/// `detach_all` (the source is going away): every callback's `detach` runs once, and
/// nothing is left.
#[test]
fn detach_all_detaches_callbacks() {
    let log = new_log();
    let wq = WaitQueue::new();
    let c1 = TestCallback::new(1, true, &log);
    let c2 = TestCallback::new(2, true, &log);
    wq.add(Events::IN, false, true, callback(&c1));
    wq.add(Events::OUT | Events::IN, true, false, callback(&c2));

    wq.detach_all();
    assert_eq!(c1.detached.load(SeqCst), 1);
    assert_eq!(c2.detached.load(SeqCst), 1);
    assert_eq!(c1.calls.load(SeqCst), 0, "detach is not a wake");
    assert_eq!(wq.len(), 0);
    assert_eq!(wq.interest(), Events::empty());
    // A second detach finds nothing.
    wq.detach_all();
    assert_eq!(c1.detached.load(SeqCst), 1);
}

/// A thread or task still queued when its source goes away is a bug (they hold the source
/// alive): a debug assertion, not a silent wake.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "outlived its source")]
fn detach_all_with_a_task_left_is_a_bug() {
    let wq = WaitQueue::new();
    let task = Arc::new(CountWaker::default());
    wq.add(Events::IN, true, false, Target::Task(Waker::from(task)));
    wq.detach_all();
}

/// As above, for a blocked thread.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "outlived its source")]
fn detach_all_with_a_thread_left_is_a_bug() {
    let wq = WaitQueue::new();
    let (_w, t) = thread_entry();
    wq.add(Events::OUT, false, false, t);
    wq.detach_all();
}

/// Dropping a queue that still holds an entry is a bug too.
#[test]
#[cfg(debug_assertions)]
#[should_panic(expected = "dropped with 1 entries")]
fn dropping_a_non_empty_queue_is_a_bug() {
    let log = new_log();
    let wq = WaitQueue::new();
    wq.add(
        Events::IN,
        false,
        true,
        callback(&TestCallback::new(1, true, &log)),
    );
    drop(wq);
}

/// A panicking foreign waker in the middle of a batch: the panic reaches the caller, the
/// other wakes of the batch still run, and the queue is consistent and usable afterwards
/// (the waker ran after the lock was released, so nothing is poisoned or half-walked).
#[test]
fn panicking_waker_leaves_queue_consistent() {
    let wq = WaitQueue::new();
    let before = Arc::new(CountWaker::default());
    let after = Arc::new(CountWaker::default());
    let (w, t) = thread_entry();
    wq.add(
        Events::IN,
        false,
        false,
        Target::Task(Waker::from(Arc::clone(&before))),
    );
    wq.add(
        Events::IN,
        false,
        false,
        Target::Task(Waker::from(Arc::new(PanicWaker))),
    );
    wq.add(
        Events::IN,
        false,
        false,
        Target::Task(Waker::from(Arc::clone(&after))),
    );
    wq.add(Events::IN, false, false, t);
    let untouched = Arc::new(CountWaker::default());
    let ku = wq.add(
        Events::OUT,
        false,
        false,
        Target::Task(Waker::from(Arc::clone(&untouched))),
    );

    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        wq.wake(Events::IN, usize::MAX)
    }));
    assert!(r.is_err(), "the waker's panic propagates to the caller");
    assert_eq!(before.0.load(SeqCst), 1);
    assert_eq!(
        after.0.load(SeqCst),
        1,
        "wakes after the panicking one still ran"
    );
    assert!(w.is_notified());
    assert_eq!(Arc::strong_count(&after), 1);

    assert_eq!(wq.len(), 1);
    assert_eq!(wq.interest(), Events::OUT);
    assert!(!wq.list.is_poisoned(), "no foreign code ran under the lock");

    // Still fully usable.
    wq.wake(Events::OUT, 1);
    assert_eq!(untouched.0.load(SeqCst), 1);
    assert!(!wq.remove(ku));
    assert_eq!(wq.len(), 0);
    assert_eq!(wq.interest(), Events::empty());
}

/// A re-entrant waker: its `wake` adds to and wakes the very queue that is waking it. That
/// only works because wakes run after the lock is released; under the lock it would
/// deadlock (and fail the time bound).
#[test]
fn reentrant_waker_runs_outside_the_lock() {
    struct Reenter {
        wq: Arc<WaitQueue>,
        hit: AtomicBool,
    }
    impl Wake for Reenter {
        fn wake(self: Arc<Self>) {
            let inner = Arc::new(CountWaker::default());
            self.wq
                .add(Events::IN, false, false, Target::Task(Waker::from(inner)));
            self.wq.wake(Events::OUT, usize::MAX);
            let _ = self.wq.len();
            self.hit.store(true, SeqCst);
        }
    }

    let hit = finishes("re-entrant waker", || {
        let wq = Arc::new(WaitQueue::new());
        let r = Arc::new(Reenter {
            wq: Arc::clone(&wq),
            hit: AtomicBool::new(false),
        });
        wq.add(
            Events::IN,
            true,
            false,
            Target::Task(Waker::from(Arc::clone(&r))),
        );
        wq.wake(Events::IN, 1);
        assert_eq!(wq.len(), 1, "the entry added from inside the waker");
        assert_eq!(wq.interest(), Events::IN);
        // Leave nothing queued: wake the entry added from inside the waker.
        wq.wake(Events::IN, usize::MAX);
        assert_eq!(wq.len(), 0);
        r.hit.load(SeqCst)
    });
    assert!(hit);
}

/// Work a callback defers (`WakeBatch::push_post`) runs after the queue's lock is released,
/// with the key it was given.
#[test]
fn post_wake_runs_after_unlock() {
    struct Probe {
        wq: std::sync::Weak<WaitQueue>,
        unlocked: Mutex<Vec<(bool, Events)>>,
    }
    impl PostWake for Probe {
        fn post_wake(&self, key: Events) {
            let wq = self.wq.upgrade().expect("queue alive during its own wake");
            let free = wq.list.try_lock().is_ok();
            self.unlocked.lock().unwrap().push((free, key));
        }
    }

    let log = new_log();
    let wq = Arc::new(WaitQueue::new());
    let probe = Arc::new(Probe {
        wq: Arc::downgrade(&wq),
        unlocked: Mutex::new(Vec::new()),
    });
    let cb = Arc::new(TestCallback {
        id: 1,
        accept: true,
        log: Arc::clone(&log),
        calls: AtomicUsize::new(0),
        detached: AtomicUsize::new(0),
        post: Some(Arc::clone(&probe) as Arc<dyn PostWake>),
    });
    wq.add(Events::IN | Events::OUT, false, true, callback(&cb));
    wq.wake(Events::OUT, usize::MAX);
    assert_eq!(*probe.unlocked.lock().unwrap(), [(true, Events::OUT)]);
    assert_eq!(ids(&log), [1]);
    // Leave nothing queued: a queue dropped with entries is a bug (debug assertion).
    wq.detach_all();
}

/// Many entries, interleaved adds, removes and wakes: the interest word always equals the
/// union of what is queued (checked against a model).
#[test]
fn interest_tracks_the_queued_masks() {
    let wq = WaitQueue::new();
    let bits = [
        Events::IN,
        Events::OUT,
        Events::PRI,
        Events::IN | Events::OUT,
    ];
    let mut live: Vec<(Key, Events, Arc<ThreadWaiter>)> = Vec::new();
    let rounds = if cfg!(miri) { 40 } else { 400 };
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..rounds {
        match next() % 3 {
            0 => {
                let m = bits[(next() % 4) as usize];
                let (w, t) = thread_entry();
                let k = wq.add(m, next() % 2 == 0, next() % 2 == 0, t);
                live.push((k, m, w));
            }
            1 if !live.is_empty() => {
                let i = (next() as usize) % live.len();
                let (k, _, _) = live.swap_remove(i);
                assert!(wq.remove(k));
            }
            _ => {
                let key = bits[(next() % 3) as usize];
                wq.wake(key, 1 + (next() % 3) as usize);
                live.retain(|(_, _, w)| !w.is_notified());
            }
        }
        let want = live.iter().fold(Events::empty(), |u, (_, m, _)| u | *m);
        assert_eq!(wq.interest(), want);
        assert_eq!(wq.len(), live.len());
    }
    // Leave nothing queued: a queue dropped with entries is a bug (debug assertion).
    for (k, _, _) in live {
        assert!(wq.remove(k));
    }
    assert_eq!(wq.interest(), Events::empty());
}

/// A batch past its inline slots (the spill) runs every item once, in order, whether it is
/// run or only dropped; either way it keeps no reference to what it ran (its slots are not
/// dropped by glue: `Drop` empties them).
#[test]
fn wake_batch_spill_runs_each_item_once_and_keeps_nothing() {
    struct Count(Mutex<Vec<Events>>);
    impl PostWake for Count {
        fn post_wake(&self, key: Events) {
            self.0.lock().unwrap().push(key);
        }
    }
    let keys = [
        Events::IN,
        Events::OUT,
        Events::ERR,
        Events::HUP,
        Events::PRI,
    ];
    for run in [true, false] {
        let c = Arc::new(Count(Mutex::new(Vec::new())));
        let mut b = WakeBatch::new();
        for k in keys {
            b.push_post(Arc::clone(&c) as Arc<dyn PostWake>, k);
        }
        assert_eq!(Arc::strong_count(&c), 1 + keys.len());
        if run {
            b.run();
        } else {
            drop(b);
        }
        assert_eq!(*c.0.lock().unwrap(), keys, "run: {run}");
        assert_eq!(Arc::strong_count(&c), 1, "run: {run}");
    }
}

/// A fill hook for the bell slot: counts its calls; checks that no queue lock is held (it
/// takes the queue's lock itself, which would deadlock under the walk).
struct FillHook {
    wq: std::sync::Weak<WaitQueue>,
    calls: AtomicUsize,
}

impl PostWake for FillHook {
    fn post_wake(&self, key: Events) {
        assert!(key.contains(KEY_FILLED));
        if let Some(wq) = self.wq.upgrade() {
            // The queue's lock is free: the ring runs after every unlock.
            drop(crate::loom::lock(&wq.list));
        }
        self.calls.fetch_add(1, SeqCst);
    }
}

/// The bell slot (`bell`): a fill reaches the armed hook without the list, once per fill;
/// a second view's hook finds the slot taken and listens in the list; leaving and dropping
/// give every `Arc` back. Under Miri: the slot's cell and its phase word.
#[test]
fn bell_slot_rings_the_armed_hook_once_per_fill() {
    let wq = Arc::new(WaitQueue::new());
    let hook = |wq: &Arc<WaitQueue>| {
        Arc::new(FillHook {
            wq: Arc::downgrade(wq),
            calls: AtomicUsize::new(0),
        })
    };
    let log: Log = Arc::default();
    let (h1, h2) = (hook(&wq), hook(&wq));
    let k1 = wq.add(
        Events::IN,
        false,
        false,
        Target::Callback(TestCallback::new(1, true, &log)),
    );
    let mut cb2 = TestCallback::new(2, true, &log);
    Arc::get_mut(&mut cb2).unwrap().post = Some(h2.clone());
    let k2 = wq.add(Events::IN, false, false, Target::Callback(cb2));
    assert!(wq.enter_fill_mode(k1, h1.clone(), || {}), "a free slot");
    assert!(
        !wq.enter_fill_mode(k2, h2.clone(), || {}),
        "taken: the list instead"
    );
    assert_eq!(wq.interest(), KEY_FILLED);
    for i in 1..=3 {
        wq.wake(Events::IN | KEY_FILLED, 1);
        assert_eq!(h1.calls.load(SeqCst), i, "the slot's hook");
        assert_eq!(h2.calls.load(SeqCst), i, "the list's hook");
    }
    // Entry 1 is never walked (its mask is empty while its hook is in the slot).
    assert!(log.lock().unwrap().iter().all(|&(id, _)| id == 2));
    wq.wake(Events::IN, 1);
    assert_eq!(
        h1.calls.load(SeqCst),
        3,
        "a wake that is no fill rings nothing"
    );
    // Leave, and come back: the slot is free again.
    assert!(wq.leave_fill_mode(k1, Events::IN, true, || {}));
    assert_eq!(Arc::strong_count(&h1), 1);
    assert!(wq.enter_fill_mode(k1, h1.clone(), || {}));
    assert!(wq.remove_from_bell(k1));
    assert!(wq.remove(k2));
    assert_eq!(Arc::strong_count(&h1), 1);
    assert_eq!(wq.interest(), Events::empty());
}

/// Fills from several threads at once: some find a ring in flight and leave theirs to it
/// (`AGAIN`); every fill is followed by a call (the last call comes after the last fill),
/// and there are never more calls than fills. Under Miri: the data-race check on the cell.
#[test]
fn bell_slot_fills_from_threads_are_all_heard() {
    const THREADS: usize = 3;
    const FILLS: usize = if cfg!(miri) { 10 } else { 2000 };
    let wq = Arc::new(WaitQueue::new());
    let h = Arc::new(FillHook {
        wq: Arc::downgrade(&wq),
        calls: AtomicUsize::new(0),
    });
    let log: Log = Arc::default();
    let k = wq.add(
        Events::empty(),
        false,
        false,
        Target::Callback(TestCallback::new(1, true, &log)),
    );
    assert!(wq.enter_fill_mode(k, h.clone(), || {}));
    let fills = Arc::new(AtomicUsize::new(0));
    std::thread::scope(|s| {
        for _ in 0..THREADS {
            s.spawn(|| {
                for _ in 0..FILLS {
                    fills.fetch_add(1, SeqCst);
                    wq.wake(Events::IN | KEY_FILLED, 1);
                }
            });
        }
    });
    let calls = h.calls.load(SeqCst);
    assert!((1..=THREADS * FILLS).contains(&calls), "{calls} calls");
    // Quiescent: the next fill is its own ring.
    wq.wake(Events::IN | KEY_FILLED, 1);
    assert_eq!(h.calls.load(SeqCst), calls + 1);
    assert!(wq.remove_from_bell(k));
    assert_eq!(Arc::strong_count(&h), 1);
}
