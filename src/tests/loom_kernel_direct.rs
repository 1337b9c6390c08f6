//! loom models of the direct sleep of `Epoll::wait` (`crate::epoll::kernel::sleep`, "Direct
//! sleep"): the thread holding the epoll's direct slot sleeps in `epoll_wait` on the kernel
//! epoll itself, which hands it the kernel events it takes (the seed, delivered by its next
//! harvest); an in-memory wake rings the epoll's bell, an eventfd registered in the kernel
//! epoll edge-triggered, whose one edge any `epoll_wait` on the kernel epoll may take — the
//! sleeper's, or another harvest's collect, which then rings again if the slot is held.
//! No wake may be lost, no kernel event taken may go undelivered, and a stale ring (one
//! that lands after its sleeper left) must not hang a later sleep.
//!
//! Real parts: the wait routine (`thread::wait`), `WaitQueue`, `ThreadWaiter` with a
//! [`Bell`], the slot flag. Mocked: the kernel epoll — a mutex-guarded pair (a kernel event
//! pending, the bell's edge pending) with a condvar for its `epoll_wait` sleepers; an
//! `epoll_wait` takes both (the edge is consumed, as edge-triggered items are). A lost wake
//! is a sleeper blocked forever: loom reports it as a deadlock.

use std::sync::Arc;
use std::time::Instant;

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::{Condvar, Mutex};
use loom::thread;

use crate::epoll::{KEY_KSLEEP, WAITER_KEY};
use crate::wait_queue::thread::{
    self as wait, Bell, Entry, Parked, Recheck, Sleeper, ThreadWaiter,
};
use crate::wait_queue::{WaitFor, WaitQueue};

/// The mock kernel epoll: (a kernel event pending, the bell's edge pending).
struct Kfd {
    state: Mutex<(bool, bool)>,
    cv: Condvar,
}

impl std::fmt::Debug for Kfd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kfd")
    }
}

impl Kfd {
    /// A non-blocking `epoll_wait`: take what is pending.
    fn take(&self) -> (bool, bool) {
        std::mem::take(&mut *self.state.lock().unwrap())
    }
}

/// The direct bell (`DirectBell::ring`: an eventfd write, one edge).
#[derive(Debug)]
struct MockBell(Arc<Kfd>);

impl Bell for MockBell {
    fn ring(&self) {
        self.0.state.lock().unwrap().1 = true;
        self.0.cv.notify_all();
    }
}

struct Model {
    kfd: Arc<Kfd>,
    /// `Direct::held`.
    held: AtomicBool,
    waiters: WaitQueue,
    /// An in-memory event queued (level-triggered: a harvest that sees it reports it, the
    /// one in `try_now` also consumes it).
    ready: Mutex<bool>,
    /// `Direct::waiter`: the slot's one waiter, reset and reused by every holder.
    waiter: Arc<ThreadWaiter>,
    /// `KernelSide::memory`: the epoll has held an in-memory source (the bare sleep's end).
    memory: AtomicBool,
}

impl Model {
    fn new() -> Arc<Model> {
        let kfd = Arc::new(Kfd {
            state: Mutex::new((false, false)),
            cv: Condvar::new(),
        });
        let bell = Arc::new(MockBell(Arc::clone(&kfd))) as Arc<dyn Bell>;
        Arc::new(Model {
            kfd,
            held: AtomicBool::new(false),
            waiters: WaitQueue::new(),
            ready: Mutex::new(false),
            waiter: Arc::new(ThreadWaiter::with_bell(bell)),
            memory: AtomicBool::new(false),
        })
    }

    fn mem_event(&self) {
        *self.ready.lock().unwrap() = true;
        self.waiters.wake(WAITER_KEY, 1);
    }

    /// The epoll's first in-memory `add`, of a source that is ready: `memory_added` (set
    /// the flag, then ring a holder of the slot), then the source queues its item.
    fn first_mem_add(&self) {
        let first = !self.memory.swap(true, SeqCst);
        crate::loom::dekker_fence();
        if first && self.held.load(SeqCst) {
            MockBell(Arc::clone(&self.kfd)).ring();
        }
        self.mem_event();
    }

    fn kernel_event(&self) {
        self.kfd.state.lock().unwrap().0 = true;
        self.kfd.cv.notify_all();
    }

    /// `fds::collect`: a non-blocking `epoll_wait` on the kernel epoll; the bell's edge,
    /// if it took it, is rung again while the slot is held (`Direct::ring_holder`).
    /// Whether it took a kernel event.
    fn collect(&self) -> bool {
        let (kernel, edge) = self.kfd.take();
        if edge && self.held.load(SeqCst) {
            MockBell(Arc::clone(&self.kfd)).ring();
        }
        kernel
    }
}

/// `EpollSleeper` with the direct slot: the events it delivers (1 = in-memory, 2 = kernel).
struct Direct<'a> {
    m: &'a Model,
    entry: Option<Entry>,
    /// Holds the slot (`KernelSleep` with `How::Direct`).
    direct: bool,
    /// A kernel event its sleep took (`EpollSleeper::seed`).
    seed: bool,
}

impl WaitFor for Direct<'_> {
    type Output = u8;

    /// `harvest_seeded` if the sleep took a kernel event, else `harvest_now`.
    fn try_now(&mut self) -> Option<u8> {
        let mut r = 0;
        if std::mem::take(&mut *self.m.ready.lock().unwrap()) {
            r |= 1;
        }
        if std::mem::take(&mut self.seed) || self.m.collect() {
            r |= 2;
        }
        (r != 0).then_some(r)
    }

    fn hand_on(&mut self) {
        if *self.m.ready.lock().unwrap() {
            self.m.waiters.wake(WAITER_KEY, 1);
        }
    }
}

impl Sleeper for Direct<'_> {
    /// `KernelSleep::new`: take the slot (the model's sleepers always get it, or the
    /// test says otherwise), then queue the slot's waiter (woken by the epoll's bell), reset
    /// for this holder (`Direct::acquire`).
    fn register(&mut self, _again: bool) {
        self.direct = self
            .m
            .held
            .compare_exchange(false, true, SeqCst, SeqCst)
            .is_ok();
        assert!(self.direct, "one direct sleeper per model");
        let w = Arc::clone(&self.m.waiter);
        w.reset();
        self.entry = Some(Entry::add_waiter(
            &self.m.waiters,
            KEY_KSLEEP,
            true,
            true,
            w,
        ));
    }

    fn recheck(&mut self) -> Recheck<u8> {
        if *self.m.ready.lock().unwrap() {
            Recheck::Retry
        } else {
            Recheck::Sleep
        }
    }

    /// `sleep::direct`: check the flag, `epoll_wait`; the bell's edge alone means look at
    /// the flag again.
    fn park(&mut self, _deadline: Option<Instant>) -> Parked {
        let Some(e) = &self.entry else {
            return Parked::Woken;
        };
        loop {
            if e.waiter().is_notified() {
                return Parked::Woken;
            }
            let mut s = self.m.kfd.state.lock().unwrap();
            while !s.0 && !s.1 {
                s = self.m.kfd.cv.wait(s).unwrap();
            }
            let (kernel, _edge) = std::mem::take(&mut *s);
            drop(s);
            if kernel {
                self.seed = true;
                return Parked::Woken;
            }
        }
    }

    /// `EpollSleeper::unregister`: leave the queue, then the slot (whose waiter the next
    /// holder reuses).
    fn unregister(&mut self) -> bool {
        let claimed = self.entry.take().is_some_and(|e| e.remove(&self.m.waiters));
        if std::mem::take(&mut self.direct) {
            self.m.held.store(false, SeqCst);
        }
        claimed
    }
}

/// `Epoll::wait` with no timeout: step 1 (nothing queued in memory: no harvest), then the
/// wait routine.
fn epoll_wait(m: &Model) -> u8 {
    if std::mem::take(&mut *m.ready.lock().unwrap()) {
        return 1;
    }
    let mut s = Direct {
        m,
        entry: None,
        direct: false,
        seed: false,
    };
    wait::wait(&mut s, None).expect("no deadline")
}

/// `Epoll::wait` on an epoll of kernel fds alone: the bare sleep (`sleep::bare`: the slot,
/// `epoll_wait`, no entry on `waiters`) while the epoll never held an in-memory source,
/// else (or when a ring says it gained one) the wait above.
fn bare_wait(m: &Model) -> u8 {
    if !m.memory.load(SeqCst) && m.held.compare_exchange(false, true, SeqCst, SeqCst).is_ok() {
        crate::loom::dekker_fence();
        let got = loop {
            // After the slot is taken (the Dekker pair with `first_mem_add`).
            if m.memory.load(SeqCst) {
                break None;
            }
            let mut s = m.kfd.state.lock().unwrap();
            while !s.0 && !s.1 {
                s = m.kfd.cv.wait(s).unwrap();
            }
            let (kernel, _edge) = std::mem::take(&mut *s);
            drop(s);
            if kernel {
                break Some(2);
            }
        };
        m.held.store(false, SeqCst);
        if let Some(got) = got {
            return got;
        }
    }
    epoll_wait(m)
}

/// A bare sleeper and the epoll's first in-memory `add` of a ready source: the add's ring
/// (or the sleeper's look at the flag) sends it to the general path, which delivers the
/// event.
#[test]
fn bare_sleep_vs_first_memory_add() {
    loom::model(|| {
        let m = Model::new();
        let s = {
            let m = Arc::clone(&m);
            thread::spawn(move || bare_wait(&m))
        };
        m.first_mem_add();
        assert_eq!(s.join().unwrap(), 1);
    });
}

/// A bare sleeper, two waits, a kernel event and the first in-memory `add` in any order:
/// both events are delivered, the second wait (bare again, or general) is not hung by a
/// ring the first one left.
#[test]
fn bare_sleep_kernel_event_and_memory_add() {
    loom::model(|| {
        let m = Model::new();
        let a = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.first_mem_add())
        };
        let s = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                let first = bare_wait(&m);
                if first == 3 {
                    first
                } else {
                    first + bare_wait(&m)
                }
            })
        };
        m.kernel_event();
        a.join().unwrap();
        assert_eq!(s.join().unwrap(), 3);
    });
}

/// A direct sleeper, an in-memory event, and another thread's collect that may take the
/// bell's edge first: the sleeper still wakes and delivers the event.
#[test]
fn direct_sleep_edge_taken_by_collect() {
    loom::model(|| {
        let m = Model::new();
        let s = {
            let m = Arc::clone(&m);
            thread::spawn(move || epoll_wait(&m))
        };
        let c = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                // No kernel event in this model: a collect takes only the bell's edge.
                assert!(!m.collect());
            })
        };
        m.mem_event();
        c.join().unwrap();
        assert_eq!(s.join().unwrap(), 1);
    });
}

/// One direct sleeper, two waits, an in-memory event and a kernel event in any order: the
/// kernel event its sleep takes is delivered (the seed), a ring that lands after its
/// first wait returned (stale) does not hang the second, and the second wait's reset of
/// the slot's reused waiter meets no wake of the first wait's entry.
#[test]
fn direct_sleep_mem_and_kernel_events() {
    loom::model(|| {
        let m = Model::new();
        let a = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.mem_event())
        };
        let s = {
            let m = Arc::clone(&m);
            thread::spawn(move || {
                let first = epoll_wait(&m);
                if first == 3 {
                    first
                } else {
                    first + epoll_wait(&m)
                }
            })
        };
        m.kernel_event();
        a.join().unwrap();
        assert_eq!(s.join().unwrap(), 3);
    });
}
