//! The blocking wait: the one register / re-check / park / unregister / hand-on routine
//! ([`wait`]) behind every blocking call of the crate — `Notifier::read`, `read_timeout` and
//! `write`, and `Epoll::wait` — and the parked thread it wakes ([`ThreadWaiter`]).
//!
//! What differs between callers is a [`Sleeper`]: what to try and what to hand on (its
//! [`WaitFor`], the same one the async wait of `super::task` uses), how to publish interest
//! (an entry in a [`WaitQueue`]), and how to sleep (`park`/`unpark` with an optional spin,
//! or, for an epoll with kernel fds, `poll(2)` on its kernel epoll and the thread's [`Bell`],
//! which a wake rings instead of unparking). The protocol, also the async wait's:
//!
//! 1. Try the operation. Done if it succeeds. (The caller does this step, before it builds
//!    its [`Sleeper`] and calls [`wait`].)
//!    Then spin, *unregistered*, for a time learned from this wait site's recent waits
//!    ([`SpinGauge`]; a fixed time for an epoll with `set_spin(Some(..))`), polling the
//!    operation's lock-free readiness probe ([`WaitFor::probe`]) and trying again when it
//!    says so. A state change that lands meanwhile finds no entry to wake: it costs its
//!    waker nothing, and neither side makes a syscall. The spin makes no syscall, stops
//!    when it sees it lost its CPU, and never outlasts the deadline (`super::spin`).
//! 2. Register (publish interest, `SeqCst`, under the queue lock), then re-check: a state
//!    change that lands between 1 and 2 either sees the interest and wakes the waiter, or
//!    is seen by the re-check (the Dekker pair of `super`).
//! 3. Sleep until woken or the deadline passes; unregister. A waiter whose entry a wake had
//!    already removed was *claimed* by that wake.
//! 4. Not claimed and the deadline passed: one last try, then time out — so a change that
//!    races the timeout is never lost to a waiter that gives up.
//! 5. Try again. A success here used the wake that claimed the waiter, if one did. A claimed
//!    waiter that fails lost the wake to a barging caller or was woken for nothing: it goes
//!    back to 2, registering at the head so it keeps its turn — unless the deadline has
//!    passed: then it leaves, and hands the wake on.
//!
//! A success of the re-check in 2 by a waiter that a wake claimed meanwhile hands on too
//! (the hand-on rule of [`WaitFor`]).
//!
//! # LOCKING
//!
//! No lock of its own. The queue's lock is taken only through the [`WaitQueue`] API (`add`,
//! `remove`); `unpark` runs from the waker's `WakeBatch`, after its lock is released. The
//! spin takes no lock at all.

use std::sync::Arc;
use std::time::Instant;

use super::list::Key;
use super::spin::{current_cpu, Spin, SpinGauge, SpinPlan, NO_CPU};
use super::{Target, WaitFor, WaitQueue};
use crate::events::Events;
use crate::loom::sync::atomic::{
    AtomicBool, AtomicU32,
    Ordering::{Acquire, Relaxed, Release},
};
use crate::loom::thread::{self, Thread};

/// How a sleep ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Parked {
    /// Woken (or, for a kernel sleep, it returned before the deadline).
    Woken,
    /// The deadline passed.
    TimedOut,
}

/// What the re-check after registering found.
#[derive(Debug)]
pub(crate) enum Recheck<R> {
    /// The operation succeeded.
    Done(R),
    /// Something may be ready: unregister and try (a cheap look that cannot consume).
    Retry,
    /// Nothing: sleep.
    Sleep,
}

/// One blocked thread's side of [`wait`]: what it waits for (its [`WaitFor`]) and how it
/// sleeps.
pub(crate) trait Sleeper: WaitFor {
    /// Publish this thread's interest. `again`: after a wake that it could not use.
    fn register(&mut self, again: bool);
    /// The re-check after `register` (default: try the operation).
    fn recheck(&mut self) -> Recheck<Self::Output> {
        match self.try_now() {
            Some(r) => Recheck::Done(r),
            None => Recheck::Sleep,
        }
    }
    /// Sleep until woken or `deadline` (`None`: no deadline).
    fn park(&mut self, deadline: Option<Instant>) -> Parked;
    /// Withdraw the interest published by `register`. Returns `true` if a wake had already
    /// claimed this waiter (removed its entry).
    fn unregister(&mut self) -> bool;
    /// How long to spin before registering: by default learned from the operation's
    /// [`SpinGauge`] ([`WaitFor::spin_gauge`]), no spin without one.
    fn spin_plan(&self) -> SpinPlan {
        self.spin_gauge()
            .map_or(SpinPlan::Fixed(0), |g| SpinPlan::Adaptive(g.budget_ns()))
    }
    /// The CPU the wake that claimed this waiter ran on (called after `park`, before
    /// `unregister`); [`NO_CPU`] if unknown.
    fn waker_cpu(&self) -> u32 {
        NO_CPU
    }
}

/// The blocking wait (module docs), from step 2: the caller has tried once (step 1) and
/// must wait. `None`: the deadline passed first.
///
/// Step 1 is the caller's so that it stays in the caller's fast path: an uncontended
/// `read` or `write` costs what `try_read`/`try_write` cost, and builds no [`Sleeper`].
#[inline(never)]
pub(crate) fn wait<S: Sleeper>(s: &mut S, deadline: Option<Instant>) -> Option<S::Output> {
    let mut spin = Spin::new(s.spin_plan());
    let mut again = false;
    loop {
        if spin.spin(deadline, || s.probe()) {
            if let Some(r) = s.try_now() {
                spin.learn(s.spin_gauge(), spin.spun());
                return Some(r);
            }
            // A stale look (someone else took it): go on spinning within the same budget.
            continue;
        }
        s.register(again);
        let claimed = match s.recheck() {
            Recheck::Done(r) => {
                if s.unregister() {
                    // Claimed between `register` and here (the hand-on rule).
                    s.hand_on();
                }
                return Some(r);
            }
            Recheck::Retry => s.unregister(),
            Recheck::Sleep => {
                spin.before_park(s.spin_gauge());
                let parked = s.park(deadline);
                let from = s.waker_cpu();
                let claimed = s.unregister();
                spin.learn(s.spin_gauge(), spin.parked(claimed, from));
                if !claimed && parked == Parked::TimedOut {
                    // Never woken: one last look, then time out.
                    return s.try_now();
                }
                claimed
            }
        };
        if let Some(r) = s.try_now() {
            return Some(r);
        }
        if deadline.is_some_and(crate::loom::past) {
            if claimed {
                s.hand_on();
            }
            return None;
        }
        again = true;
    }
}

/// A thread's entry in a [`WaitQueue`]: the registration of a [`Sleeper`] that sleeps in
/// `park` (or a short spin first).
#[derive(Debug)]
pub(crate) struct Entry {
    waiter: Arc<ThreadWaiter>,
    key: Key,
}

impl Entry {
    /// Queue the calling thread: at the head if `front`, else at the tail.
    pub(crate) fn add(wq: &WaitQueue, mask: Events, exclusive: bool, front: bool) -> Entry {
        let waiter = ThreadWaiter::current();
        let key = wq.add(mask, exclusive, front, Target::Thread(Arc::clone(&waiter)));
        Entry { waiter, key }
    }

    // --- kernel sleep (kwait): a waiter woken through a `Bell` ---

    /// Queue `waiter` (one for the calling thread with a [`Bell`], fresh or reset; not the
    /// reused per-thread waiter of [`add`](Self::add)).
    pub(crate) fn add_waiter(
        wq: &WaitQueue,
        mask: Events,
        exclusive: bool,
        front: bool,
        waiter: Arc<ThreadWaiter>,
    ) -> Entry {
        let key = wq.add(mask, exclusive, front, Target::Thread(Arc::clone(&waiter)));
        Entry { waiter, key }
    }

    /// The queued waiter (a [`Sleeper`] that sleeps in the kernel reads its flag).
    pub(crate) fn waiter(&self) -> &ThreadWaiter {
        &self.waiter
    }

    // --- end kernel sleep ---

    /// Sleep until woken or `deadline` (the spin, if any, came before registering).
    pub(crate) fn park(&self, deadline: Option<Instant>) -> Parked {
        if self.waiter.wait(deadline) {
            Parked::Woken
        } else {
            Parked::TimedOut
        }
    }

    /// The CPU of the wake that removed this entry ([`NO_CPU`] if none did).
    pub(crate) fn waker_cpu(&self) -> u32 {
        self.waiter.waker_cpu()
    }

    /// Leave the queue; `true` if a wake had already removed the entry (no lock taken then:
    /// the flag is set under the queue lock by the wake that removed it).
    pub(crate) fn remove(self, wq: &WaitQueue) -> bool {
        self.waiter.is_notified() || !wq.remove(self.key)
    }
}

/// The [`Sleeper`] of a plain queue wait: one entry in `wq` with `mask`, parked after the
/// spin `what` asks for, for `what`. `Notifier`'s blocking calls use it.
pub(crate) struct QueueSleeper<'a, W> {
    wq: &'a WaitQueue,
    mask: Events,
    exclusive: bool,
    what: W,
    entry: Option<Entry>,
}

impl<'a, W: WaitFor> QueueSleeper<'a, W> {
    pub(crate) fn new(wq: &'a WaitQueue, mask: Events, exclusive: bool, what: W) -> Self {
        QueueSleeper {
            wq,
            mask,
            exclusive,
            what,
            entry: None,
        }
    }
}

impl<W: WaitFor> WaitFor for QueueSleeper<'_, W> {
    type Output = W::Output;

    // A forwarder, on the path of every parked hand-off: inlined like what it forwards to.
    #[inline(always)]
    fn try_now(&mut self) -> Option<W::Output> {
        self.what.try_now()
    }

    fn hand_on(&mut self) {
        self.what.hand_on();
    }

    fn probe(&self) -> bool {
        self.what.probe()
    }

    fn spin_gauge(&self) -> Option<&SpinGauge> {
        self.what.spin_gauge()
    }
}

impl<W: WaitFor> Sleeper for QueueSleeper<'_, W> {
    fn register(&mut self, again: bool) {
        // FIFO; back at the head after a wake it could not use, to keep its turn.
        self.entry = Some(Entry::add(self.wq, self.mask, self.exclusive, again));
    }

    fn park(&mut self, deadline: Option<Instant>) -> Parked {
        match &self.entry {
            Some(e) => e.park(deadline),
            None => Parked::Woken,
        }
    }

    fn waker_cpu(&self) -> u32 {
        self.entry.as_ref().map_or(NO_CPU, Entry::waker_cpu)
    }

    fn unregister(&mut self) -> bool {
        self.entry.take().is_some_and(|e| e.remove(self.wq))
    }
}

/// A thread waiting in a blocking call. The waker sets `notified` (with the queue's lock
/// held) and unparks after unlocking; the sleeper loops on `park` until it sees the flag or
/// its deadline passes, so spurious unparks are harmless.
#[derive(Debug)]
pub(crate) struct ThreadWaiter {
    /// Set once per wait, by the wake that removed this waiter's entry. Release pairs with
    /// the Acquire load in `wait`.
    notified: AtomicBool,
    /// The CPU the waking thread ran on (written before `notified`), so that the sleeper can
    /// tell whether spinning could have caught the wake: a waker on the sleeper's own CPU
    /// could not run while the sleeper spun.
    waker_cpu: AtomicU32,
    thread: Thread,
    /// kwait: set for a thread asleep in the kernel (`poll(2)` on its own bell and a kernel
    /// epoll) rather than in `park`: a wake rings the bell instead of unparking.
    bell: Option<Arc<dyn Bell>>,
}

/// How a wake reaches a thread that sleeps in the kernel instead of `park` (kwait): its own
/// eventfd, which only that thread drains (`crate::epoll::kernel_sleep`).
pub(crate) trait Bell: Send + Sync + std::fmt::Debug {
    /// Wake the sleeper. Foreign to any lock, like `unpark`.
    fn ring(&self);
}

// One waiter per thread, reused by every blocking wait of that thread: a thread is in at
// most one wait at a time, and a wait leaves only after its entry is off the queue
// (removed by itself, or by the wake that set `notified` under the queue lock), so the
// next wait's reset of `notified` (before its `add`, which takes that lock) cannot race a
// wake of the previous one. A stale `unpark` from that wake is a spurious unpark, which
// `wait` tolerates. (loom model: `tests::loom_epoll::reused_waiter_two_waits`.)
#[cfg(not(evfd_loom))]
thread_local! {
    static WAITER: Arc<ThreadWaiter> = Arc::new(ThreadWaiter::new());
}
#[cfg(evfd_loom)]
loom::thread_local! {
    static WAITER: Arc<ThreadWaiter> = Arc::new(ThreadWaiter::new());
}

impl ThreadWaiter {
    /// A fresh waiter for the calling thread (tests that queue several entries of one
    /// thread; blocking calls use [`current`](Self::current)).
    pub(crate) fn new() -> Self {
        ThreadWaiter {
            notified: AtomicBool::new(false),
            waker_cpu: AtomicU32::new(NO_CPU),
            thread: thread::current(),
            bell: None,
        }
    }

    /// A waiter for the calling thread, woken by ringing `bell` (kwait).
    #[cfg_attr(
        not(any(target_os = "linux", target_os = "android", evfd_loom)),
        allow(dead_code)
    )]
    pub(crate) fn with_bell(bell: Arc<dyn Bell>) -> Self {
        ThreadWaiter {
            bell: Some(bell),
            ..ThreadWaiter::new()
        }
    }

    /// The calling thread's waiter, reset for a new wait.
    pub(crate) fn current() -> Arc<Self> {
        let w = WAITER.with(Arc::clone);
        w.notified.store(false, Relaxed);
        w
    }

    /// Ready for a new wait: no longer notified. Only by a waiter's owner, with no entry of
    /// it queued (the one from its last wait removed, by a wake or by leaving).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn reset(&self) {
        self.notified.store(false, Relaxed);
    }

    /// Called by the wake that removed this waiter's entry, with the queue's lock held.
    pub(crate) fn set_notified(&self) {
        self.waker_cpu.store(current_cpu(), Relaxed);
        self.notified.store(true, Release);
    }

    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Acquire)
    }

    /// The CPU of the wake that set `notified` ([`NO_CPU`] if none did).
    fn waker_cpu(&self) -> u32 {
        if self.is_notified() {
            self.waker_cpu.load(Relaxed)
        } else {
            NO_CPU
        }
    }

    /// Unpark the thread. Foreign to any lock: called from `WakeBatch::run`.
    pub(crate) fn unpark(&self) {
        match &self.bell {
            Some(b) => b.ring(),
            None => self.thread.unpark(),
        }
    }

    /// Sleep until notified or `deadline`. Returns whether it was notified.
    pub(crate) fn wait(&self, deadline: Option<Instant>) -> bool {
        loop {
            if self.is_notified() {
                return true;
            }
            match deadline {
                None => thread::park(),
                Some(d) => {
                    #[cfg(evfd_loom)]
                    {
                        let _ = d;
                        thread::park_timeout(std::time::Duration::ZERO);
                        return self.is_notified();
                    }
                    #[cfg(not(evfd_loom))]
                    {
                        let now = Instant::now();
                        if now >= d {
                            return self.is_notified();
                        }
                        thread::park_timeout(d - now);
                    }
                }
            }
        }
    }
}
