//! loom models of the kernel sleep of `Epoll::wait` (`crate::epoll::kernel::sleep`): a thread
//! with kernel fds sleeps in `poll(2)` on the kernel epoll and its own bell; an in-memory
//! wake rings the bell; a kernel event makes the kernel epoll readable. No wake may be lost,
//! a late (stale) ring must not hang a later sleep, and an in-memory wake must reach the
//! kernel sleeper through the real wait queue (its `KEY_KSLEEP` mask, the `WAITER_KEY`
//! wake).
//!
//! Real parts: the wait routine (`thread::wait`), `WaitQueue` (register, wake, claim,
//! remove), `ThreadWaiter` with a [`Bell`]. Mocked: the kernel — `poll(2)` on
//! `[kfd, bell]` is a mutex-guarded pair (kfd readable, bell count) with a condvar, which
//! is what the kernel's wait queues give `poll`: a change after the check wakes the
//! sleeper. A lost wake is a sleeper blocked forever: loom reports it as a deadlock.

use std::sync::Arc;
use std::time::Instant;

use loom::sync::{Condvar, Mutex};
use loom::thread;

use crate::epoll::{KEY_KSLEEP, WAITER_KEY};
use crate::wait_queue::thread::{
    self as wait, Bell, Entry, Parked, Recheck, Sleeper, ThreadWaiter,
};
use crate::wait_queue::{WaitFor, WaitQueue};

/// The mock kernel: (kfd holds an event, the bell's count), and the `poll` wait queue.
struct Kernel {
    state: Mutex<(bool, u64)>,
    cv: Condvar,
}

impl std::fmt::Debug for Kernel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Kernel")
    }
}

/// The sleeper's bell (an eventfd write).
#[derive(Debug)]
struct MockBell(Arc<Kernel>);

impl Bell for MockBell {
    fn ring(&self) {
        self.0.state.lock().unwrap().1 += 1;
        self.0.cv.notify_all();
    }
}

struct Model {
    kernel: Arc<Kernel>,
    /// The epoll's `waiters`.
    waiters: WaitQueue,
    /// `EpInner::ready`: an in-memory event queued.
    ready: Mutex<bool>,
}

impl Model {
    fn new() -> Arc<Model> {
        Arc::new(Model {
            kernel: Arc::new(Kernel {
                state: Mutex::new((false, 0)),
                cv: Condvar::new(),
            }),
            waiters: WaitQueue::new(),
            ready: Mutex::new(false),
        })
    }

    /// An in-memory event: queue it, then wake one waiter (`EpInner::post_wake`).
    fn mem_event(&self) {
        *self.ready.lock().unwrap() = true;
        self.waiters.wake(WAITER_KEY, 1);
    }

    /// A kernel event: kfd becomes readable (the kernel wakes its `poll` waiters).
    fn kernel_event(&self) {
        self.kernel.state.lock().unwrap().0 = true;
        self.kernel.cv.notify_all();
    }
}

/// `EpollSleeper` in a kernel sleep: the events it collects (1 = in-memory, 2 = kernel).
struct KSleeper<'a> {
    m: &'a Model,
    entry: Option<Entry>,
}

impl WaitFor for KSleeper<'_> {
    type Output = u8;

    /// A harvest: the ready list, then a non-blocking collect from kfd.
    fn try_now(&mut self) -> Option<u8> {
        if std::mem::take(&mut *self.m.ready.lock().unwrap()) {
            return Some(1);
        }
        std::mem::replace(&mut self.m.kernel.state.lock().unwrap().0, false).then_some(2)
    }

    fn hand_on(&mut self) {
        if *self.m.ready.lock().unwrap() {
            self.m.waiters.wake(WAITER_KEY, 1);
        }
    }
}

impl Sleeper for KSleeper<'_> {
    fn register(&mut self, _again: bool) {
        let bell = Arc::new(MockBell(Arc::clone(&self.m.kernel))) as Arc<dyn Bell>;
        self.entry = Some(Entry::add_waiter(
            &self.m.waiters,
            KEY_KSLEEP,
            true,
            true,
            Arc::new(ThreadWaiter::with_bell(bell)),
        ));
    }

    /// `has_ready`: the ready list only (kfd is watched by the sleep itself).
    fn recheck(&mut self) -> Recheck<u8> {
        if *self.m.ready.lock().unwrap() {
            Recheck::Retry
        } else {
            Recheck::Sleep
        }
    }

    /// `KernelSleep::park` (no spin, no deadline): check the flag, then `poll`.
    fn park(&mut self, _deadline: Option<Instant>) -> Parked {
        let Some(e) = &self.entry else {
            return Parked::Woken;
        };
        if e.waiter().is_notified() {
            return Parked::Woken;
        }
        let mut s = self.m.kernel.state.lock().unwrap();
        while !s.0 && s.1 == 0 {
            s = self.m.kernel.cv.wait(s).unwrap();
        }
        // The bell is drained by its own thread only, after `poll` returned.
        s.1 = 0;
        Parked::Woken
    }

    fn unregister(&mut self) -> bool {
        self.entry.take().is_some_and(|e| e.remove(&self.m.waiters))
    }
}

/// `Epoll::wait` with no timeout: step 1, then the wait routine.
fn epoll_wait(m: &Model) -> u8 {
    let mut s = KSleeper { m, entry: None };
    if let Some(r) = s.try_now() {
        return r;
    }
    wait::wait(&mut s, None).expect("no deadline")
}

/// One sleeper collects an in-memory event and a kernel event, whatever their order and
/// whatever the order of its sleeps: the second sleep may start with the first event's
/// ring still pending or landing late (a stale ring), and must still see the second event.
#[test]
fn kernel_sleep_mem_and_kernel_events() {
    loom::model(|| {
        let m = Model::new();
        let a = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.mem_event())
        };
        let s = {
            let m = Arc::clone(&m);
            thread::spawn(move || epoll_wait(&m) + epoll_wait(&m))
        };
        m.kernel_event();
        a.join().unwrap();
        assert_eq!(s.join().unwrap(), 3);
    });
}

/// Two kernel sleepers, one in-memory event and one kernel event: each event reaches a
/// sleeper (the in-memory wake claims exactly one through the queue; the kernel event wakes
/// whoever polls kfd), so both return.
#[test]
fn kernel_sleep_two_sleepers() {
    loom::model(|| {
        let m = Model::new();
        let s: Vec<_> = (0..2)
            .map(|_| {
                let m = Arc::clone(&m);
                thread::spawn(move || epoll_wait(&m))
            })
            .collect();
        m.mem_event();
        m.kernel_event();
        let got: u8 = s.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(got, 3);
    });
}
