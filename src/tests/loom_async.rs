//! loom models of the async path: a task's entry in the wait queue against writes, drops
//! and re-polls.
//!
//! Run with
//! `RUSTFLAGS="--cfg evfd_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=3 cargo test --release --lib loom_async`.
//!
//! The executor is emulated: a pending future is polled again only when its waker was woken
//! since its last poll. So a lost wakeup shows up as a future that stays pending while the
//! count it waits for is there.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;

use crate::mode::Mode;
use crate::notifier::future::OwnedReadFuture;
use crate::notifier::Notifier;

/// A waker that counts its wakes in a loom atomic.
struct Flag(AtomicUsize);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// A future, its waker, and the wakes seen at its last poll.
struct Task {
    fut: OwnedReadFuture,
    flag: Arc<Flag>,
    waker: Waker,
    seen: usize,
    got: Option<u64>,
}

impl Task {
    fn new(n: &Notifier) -> Task {
        let flag = Arc::new(Flag(AtomicUsize::new(0)));
        Task {
            fut: n.read_owned(),
            waker: Waker::from(flag.clone()),
            flag,
            seen: 0,
            got: None,
        }
    }

    /// Poll once (recording the wakes seen so far).
    fn poll(&mut self) -> Poll<io::Result<u64>> {
        self.seen = self.flag.0.load(SeqCst);
        let r = Pin::new(&mut self.fut).poll(&mut Context::from_waker(&self.waker));
        if let Poll::Ready(Ok(v)) = &r {
            self.got = Some(*v);
        }
        r
    }

    fn woken_since_poll(&self) -> bool {
        self.flag.0.load(SeqCst) > self.seen
    }

    /// Single-threaded set-up: poll until the future has an entry in `n`'s queue (its first
    /// poll may yield once instead of registering).
    fn park(&mut self, n: &Notifier) {
        let before = n.core.wq.len();
        for _ in 0..2 {
            assert!(self.poll().is_pending());
            if n.core.wq.len() > before {
                return;
            }
        }
        panic!("not registered after two polls");
    }

    /// What an executor does: poll, and poll again for as long as the task was woken.
    fn drive(&mut self) {
        let _ = self.poll();
        while self.got.is_none() && self.woken_since_poll() {
            let _ = self.poll();
        }
    }
}

/// `loom::model` with a preemption bound of at most 3, whatever `LOOM_MAX_PREEMPTIONS` says:
/// for the three-thread models whose two futures each make a Semaphore read and a
/// registration, whose seeding loads are RMWs under loom (`crate::loom::SeedLoad`); at 4
/// each ran for more than six minutes, at 3 for 16 and 62 seconds.
fn model_at_most_3(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    b.preemption_bound = Some(b.preemption_bound.map_or(3, |p| p.min(3)));
    b.check(f);
}

fn sem() -> Notifier {
    Notifier::builder().mode(Mode::Semaphore).build().unwrap()
}

/// A thread that makes a read future of `n` and drives it (first poll, which may yield
/// once, then registration), then hands the task back.
fn spawn_driven(n: &Notifier) -> thread::JoinHandle<Task> {
    let n = n.clone();
    thread::spawn(move || {
        let mut t = Task::new(&n);
        t.drive();
        t
    })
}

/// The executor: re-poll every pending task that was woken, until none is. Returns how many
/// tasks completed in total.
fn run(tasks: &mut [Task]) -> usize {
    loop {
        let mut progress = false;
        for t in tasks.iter_mut() {
            if t.got.is_none() && t.woken_since_poll() {
                progress = true;
                let _ = t.poll();
            }
        }
        if !progress {
            return tasks.iter().filter(|t| t.got.is_some()).count();
        }
    }
}

/// Two futures A, B pending in Semaphore mode. One thread writes 1 while another drops A.
/// Whichever order: if the write's wake went to A, A's drop hands it on; B is woken and
/// takes the unit.
#[test]
fn loom_async_drop_vs_write_hands_on() {
    loom::model(|| {
        let n = sem();
        let mut a = Task::new(&n);
        let mut b = Task::new(&n);
        a.park(&n);
        b.park(&n);

        let n2 = n.clone();
        let writer = thread::spawn(move || n2.write(1).unwrap());
        let dropper = thread::spawn(move || drop(a));
        writer.join().unwrap();
        dropper.join().unwrap();

        assert!(b.woken_since_poll(), "the unit's wake reached b");
        assert_eq!(run(std::slice::from_mut(&mut b)), 1);
        assert_eq!(b.got, Some(1));
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.wq.len(), 0);
    });
}

/// Two futures register concurrently (driven in their own threads: a first poll that may
/// yield, then registration) while a third thread writes one unit: exactly one completes; the
/// other completes after a second write.
#[test]
fn loom_async_two_futures_one_unit() {
    model_at_most_3(|| {
        let n = sem();
        let ta = spawn_driven(&n);
        let tb = spawn_driven(&n);
        n.write(1).unwrap();
        let mut tasks = [ta.join().unwrap(), tb.join().unwrap()];

        assert_eq!(run(&mut tasks), 1, "one unit, one completion");
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.wq.len(), 1, "the loser is still queued");

        n.write(1).unwrap();
        assert_eq!(run(&mut tasks), 2, "the second unit reaches the loser");
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.wq.len(), 0);
    });
}

/// Two futures register concurrently while two single-unit writes land: both complete. The
/// window this covers: a future whose re-check (after `add`) takes a unit that came with no
/// wake (nobody was queued yet), while a later write's wake claims its entry before it
/// unlinks it. That wake was not used by the success; unless it is handed on, the other
/// future sleeps next to a unit.
#[test]
fn loom_async_two_futures_two_units() {
    model_at_most_3(|| {
        let n = sem();
        let ta = spawn_driven(&n);
        let tb = spawn_driven(&n);
        n.write(1).unwrap();
        n.write(1).unwrap();
        let mut tasks = [ta.join().unwrap(), tb.join().unwrap()];

        assert_eq!(
            run(&mut tasks),
            2,
            "a unit was left behind a pending future"
        );
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.wq.len(), 0);
    });
}

/// A pending future is re-polled with a new waker while another thread writes: either the
/// re-poll completes, or the wake goes to the new waker (never only to the old one).
#[test]
fn loom_async_repoll_new_waker_vs_write() {
    loom::model(|| {
        let n = Notifier::new();
        let mut t = Task::new(&n);
        t.park(&n);
        let old = t.flag.clone();

        let n2 = n.clone();
        let writer = thread::spawn(move || n2.write(1).unwrap());
        // Re-poll with a fresh waker.
        t.flag = Arc::new(Flag(AtomicUsize::new(0)));
        t.waker = Waker::from(t.flag.clone());
        let first = t.poll();
        writer.join().unwrap();

        if first.is_pending() {
            assert!(t.woken_since_poll(), "the write woke the new waker");
            assert_eq!(run(std::slice::from_mut(&mut t)), 1);
        }
        assert_eq!(t.got, Some(1));
        let _ = old;
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.wq.len(), 0);
    });
}

/// A woken future loses its unit to a barging `try_read` in another thread; a second write
/// must still reach it (it re-registered before re-checking).
#[test]
fn loom_async_barging_reader() {
    loom::model(|| {
        let n = sem();
        let mut a = Task::new(&n);
        a.park(&n);

        let n2 = n.clone();
        let barger = thread::spawn(move || n2.try_read().ok());
        n.write(1).unwrap();
        let barged = barger.join().unwrap();

        let done = run(std::slice::from_mut(&mut a));
        match barged {
            Some(1) => {
                assert_eq!(done, 0);
                n.write(1).unwrap();
                assert_eq!(run(std::slice::from_mut(&mut a)), 1);
            }
            None => assert_eq!(done, 1),
            Some(v) => unreachable!("semaphore read of {v}"),
        }
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.wq.len(), 0);
    });
}

/// A write future waits at the limit while another thread reads: it completes, nothing is
/// lost or written twice.
#[test]
fn loom_async_write_waits_for_room() {
    loom::model(|| {
        let n = Notifier::builder()
            .initial(crate::mode::LIMIT)
            .build()
            .unwrap();
        let flag = Arc::new(Flag(AtomicUsize::new(0)));
        let waker = Waker::from(flag.clone());
        let mut w = n.write_owned(2);

        let n2 = n.clone();
        let reader = thread::spawn(move || n2.try_read().unwrap());
        let mut seen = flag.0.load(SeqCst);
        let mut r = Pin::new(&mut w).poll(&mut Context::from_waker(&waker));
        assert_eq!(reader.join().unwrap(), crate::mode::LIMIT);
        while r.is_pending() {
            assert!(flag.0.load(SeqCst) > seen, "the read woke the writer");
            seen = flag.0.load(SeqCst);
            r = Pin::new(&mut w).poll(&mut Context::from_waker(&waker));
        }
        assert!(matches!(r, Poll::Ready(Ok(()))));
        assert_eq!(n.count(), 2);
        assert_eq!(n.core.wq.len(), 0);
    });
}
