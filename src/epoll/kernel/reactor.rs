//! Route 3 of `super`: the async wait of an epoll ([`KernelWake`], held by `wait_async`'s
//! future and the stream), which hears kernel readiness through the current tokio
//! runtime's reactor when it can (feature `tokio`, Linux), else through the watcher.
//!
//! # Kernel readiness through the tokio reactor
//!
//! Polled inside a tokio runtime, a wait registers `kfd` with that runtime's reactor (a
//! [`Slot`] of the kernel side: a duplicate of `kfd` in a `tokio::io::unix::AsyncFd`
//! ([`KernelReactor`]), one per epoll and runtime; or of its one eventfd: "Direct
//! registration") and is woken by it, not by the watcher.
//! Its entry on `waiters` has the mask `KEY_KSLEEP`, so it arms nothing. Anywhere else
//! (another executor, a runtime without I/O, a runtime that shut down) it relies on the
//! process-wide watcher thread (`super::watcher`, invariant W). The choice is made at each
//! poll while the wait is not queued, and a queued wait whose choice no longer holds
//! re-queues.
//!
//! The no-lost-wake argument for it (W's counterpart, not modelled in loom, which cannot
//! run tokio): a wait keeps a place in tokio's list of readiness waiters (a boxed
//! `AsyncFd::readable`), made at its first try; each try polls it first. Pending, it says
//! that the readiness was clear when the place was made and that no edge came since (an
//! edge sets the readiness and marks every waiter), so the try harvests only if memory has
//! something queued (no syscall otherwise) and clears nothing. (The second try of one poll,
//! the re-check after the registration on `waiters`, takes the first one's Pending as its
//! own: the place holds this poll's waker, so an edge between the two wakes the task and
//! its next poll looks again.) Ready, the try takes the
//! reactor's readiness tick *before* its harvest and clears it only if that harvest
//! delivered nothing (it collected from `kfd` with every slot free) or left `kfd` drained
//! (`fds`, "Drained": it collected with a slot to spare, and nothing it delivered stays
//! ready — an edge-triggered or one-shot item, an AutoReset eventfd its read emptied);
//! then, if it delivered nothing, it makes a new place. Every later kernel event is a wake
//! of `kfd`, hence an edge in the reactor's edge-triggered epoll, recorded with a new tick:
//! before the clear (the clear's tick is stale: nothing is cleared), or after it (the
//! readiness is set again: the new place sees it or is woken by it). So a wake that
//! delivers a lone AutoReset `KernelNotifier` costs one syscall, its read: the clearing
//! harvest is the delivering one, and the next wait finds its place pending. Such a wait
//! does not yield once. docs/design.md has the whole design.
//!
//! # Direct registration
//!
//! While the kernel epoll holds one AutoReset `KernelNotifier` for `IN` and nothing else
//! (`fds`, "One eventfd"), the registration is a duplicate of that eventfd instead of
//! `kfd`'s: every kernel event of `kfd` is then a wake of the eventfd, so its edges are the
//! same, and the reactor's `epoll_wait` polls the eventfd without scanning `kfd` (the
//! nesting). The argument above holds word for word with "a wake of the eventfd" for "a
//! wake of `kfd`" — as long as the registrations keep that shape. So the shape has a
//! generation (`KernelPoll::shape`), moved under `registry` by any `add`/`modify`/`delete`
//! (or drop of a `KernelNotifier`) that changes which eventfd, if any, `Fds::one` names; a
//! registration records the generation it was made for ([`KernelReactor::current`]).
//! After a move, once `registry` is released, the change wakes every `KEY_KSLEEP` entry of
//! `waiters` (`fds::wake_shape`: the route's tasks; a kernel sleeper takes it as a spurious
//! wake) and drops the kept registrations made for an older shape (`Slot::take_stale`: a
//! duplicate of an eventfd deleted or closed does not outlive it). Each try compares the
//! generation first and, if it moved, wakes its own task and returns, so the next poll
//! chooses the registration of the new shape. A task that
//! registered on `waiters` before the change's wake is woken by it; one that registers
//! after it compares after the move (the queue's lock orders the two), and sees it. loom
//! model: `loom_kernel_reactor` (`src/tests/`).
//!
//! # Bare
//!
//! An epoll that has never held an in-memory source has nothing in memory to wake a
//! task: the only wakes of `waiters` it can see are the epoll's first in-memory `add` and
//! a change of the shape (`fds::wake_shape`). So one task at a time — the holder of the
//! kernel side's [`BareTask`] slot — waits in the reactor alone, with no entry on
//! `waiters` (no entry made, linked, unlinked and freed per wait). Those two wakes find
//! its waker in the slot instead. The holder keeps its waker in the slot (under the
//! slot's lock) *before* it reads the sticky `memory` flag and, in its try, the shape;
//! the `add` sets `memory`, and a shape change moves the shape, *before* taking the
//! slot's lock to take the waker. The lock orders the two: either the waker kept is seen
//! and woken, or the flag (or the moved shape) is seen by the holder, which then leaves
//! for the general path (or chooses again). loom: `loom_kernel_reactor_bare_task_*`.
//!
//! Kernel events reach the holder through a registration of its own, the *bare
//! registration* (a second [`Slot`] of the kernel side, made like the shared one: a
//! duplicate of the one eventfd, or of `kfd`), which no other wait polls. So it needs no
//! place in tokio's list of waiters: it looks with `poll_read_ready`, whose one-task slot
//! is then its own (on the shared registration another task's look, finding the readiness
//! cleared, would put its own waker there and take the holder's wake). Not set, tokio keeps
//! the holder's waker in that slot, and the next edge wakes it; set, the try takes the
//! readiness tick before its harvest and clears it only if the harvest delivered nothing
//! or left `kfd` drained, as above. The argument is the one above with "the slot holds this
//! poll's waker" for "the place is pending". That drops, per wake, the boxed place (made,
//! polled twice and unlinked under tokio's waiter lock, then freed) and the shared slot's
//! look-up. When both registrations exist, each kernel event is an edge of both, and the
//! reactor wakes the waiters of each. A holder woken looks at that readiness before
//! anything else: set, its harvest delivers what there is (kernel and memory alike, as any
//! harvest) and the wait ends, without the checks only a wait that goes back to sleep
//! needs — its runtime (a waker left in another runtime's reactor would not be woken), its
//! waker kept in the bare slot, `memory` and the shape — which it makes otherwise.
//!
//! # LOCKING
//!
//! ```text
//! BareTask leaf Mutex (the holder's waker), see "Bare".
//! Slot    leaf Mutex: the reactor registration for one runtime and shape (two slots: the
//!         shared registration and the bare one, "Bare"). No tokio code
//!         runs under it: a registration is made before it is taken, and one it replaces
//!         is dropped after it is released. `Slot::get` reads the shape under `registry`
//!         (held alone: never with `Slot` or the kernel side's lock).
//! ```
//! The reactor (tokio code) is called with no lock held.

use std::sync::Arc;
use std::task::{Context, Poll};

use crate::epoll::harvest::Harvest;
use crate::epoll::EpInner;
use crate::events::{Event, Events};
use crate::wait_queue::task::TaskWait;
use crate::wait_queue::WaitFor;
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
use {crate::sys::tokio::register_stable, std::io, std::os::fd::BorrowedFd};

/// Whether the kernel-readiness path through a tokio reactor exists in this build.
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
use via_tokio::Reactor;

/// A stand-in when the reactor path is not built: never chosen.
#[cfg(not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))))]
#[derive(Debug, Default)]
struct Reactor(());

#[cfg(not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))))]
impl Reactor {
    fn choose(&mut self, _ep: &EpInner) -> bool {
        false
    }

    fn try_harvest(
        &mut self,
        _ep: &Arc<EpInner>,
        _out: &mut [Event],
        _cx: &mut Context<'_>,
    ) -> Option<usize> {
        None
    }

    fn new_poll(&mut self) {}

    fn bare_choose(&mut self, _ep: &EpInner) -> bool {
        false
    }

    fn bare_ready(
        &mut self,
        _ep: &Arc<EpInner>,
        _out: &mut [Event],
        _cx: &mut Context<'_>,
    ) -> Option<usize> {
        None
    }

    fn bare_harvest(
        &mut self,
        _ep: &Arc<EpInner>,
        _out: &mut [Event],
        _cx: &mut Context<'_>,
    ) -> Poll<usize> {
        Poll::Pending
    }
}

/// The async wait of an epoll (`wait_async`, the stream): the wait queue's [`TaskWait`] on
/// `waiters`, plus how kernel readiness reaches it (module docs).
///
/// Through the watcher, the entry asks for `IN` (so `listened` counts it and a harvest
/// that finds nothing arms the watcher: invariant W). Through a reactor, it asks for
/// [`KEY_KSLEEP`](crate::epoll::KEY_KSLEEP), as a thread that watches the kernel epoll itself
/// does: every wake of `waiters` reaches it, and it arms nothing.
#[derive(Debug)]
pub(crate) struct KernelWake {
    wait: TaskWait,
    /// The entry's mask is `KEY_KSLEEP` (reactor path), not `IN`.
    direct: bool,
    reactor: Reactor,
    /// Holds the epoll's bare task slot ([`BareTask`]): waits with no entry on `waiters`.
    bare: bool,
}

impl KernelWake {
    pub(crate) fn new() -> Self {
        KernelWake {
            wait: TaskWait::new(Events::IN, true),
            direct: false,
            reactor: Reactor::default(),
            bare: false,
        }
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.wait.is_registered()
    }

    /// One poll: a harvest into `out`, or `Pending` with this task registered for every
    /// kind of source.
    pub(crate) fn poll(
        &mut self,
        ep: &Arc<EpInner>,
        cx: &mut Context<'_>,
        out: &mut [Event],
    ) -> Poll<usize> {
        // The bare holder woken: its registration's readiness first. Set, its harvest
        // delivers whatever is there (kernel and memory alike), whichever runtime polls
        // and whatever else changed: only a wait that goes back to sleep needs the checks
        // of `poll_bare` (its runtime's reactor, the waker in the bare slot, `memory`, the
        // shape), which it then makes.
        if self.bare {
            if let Some(n) = self.reactor.bare_ready(ep, out, cx) {
                ep.kernel.bare_task_leave(&mut self.bare);
                return Poll::Ready(n);
            }
        }
        if !self.wait.is_registered() {
            if let Some(got) = self.poll_bare(ep, cx, out) {
                return got;
            }
        }
        let direct = self.reactor.choose(ep);
        if direct != self.direct {
            // The way kernel readiness reaches us changed (the first kernel fd, another
            // runtime, a runtime gone): leave the queue (handing on a wake we had won but
            // not used) and come back with the other mask.
            self.wait
                .cancel(&ep.waiters, &mut Harvest { ep, out: &mut [] });
            self.wait = if direct {
                TaskWait::new(crate::epoll::KEY_KSLEEP, true).without_yield()
            } else {
                TaskWait::new(Events::IN, true)
            };
            self.direct = direct;
        }
        if !direct {
            return self.wait.poll(&ep.waiters, cx, &mut Harvest { ep, out });
        }
        // Two contexts over the one waker: the wait queue's and the reactor's.
        let waker = cx.waker();
        let mut qcx = Context::from_waker(waker);
        let mut rcx = Context::from_waker(waker);
        self.reactor.new_poll();
        self.wait.poll(
            &ep.waiters,
            &mut qcx,
            &mut ReactorHarvest {
                ep,
                out,
                reactor: &mut self.reactor,
                cx: &mut rcx,
            },
        )
    }

    /// The bare wait ("Bare" in the module docs): on an epoll that has never held an
    /// in-memory source, the task that holds the bare slot waits on the bare registration
    /// alone, with no entry on `waiters`. `None`: the general path (no runtime or no
    /// registration for it, the slot is another task's, or the epoll gained an in-memory
    /// source), with the slot left.
    fn poll_bare(
        &mut self,
        ep: &Arc<EpInner>,
        cx: &mut Context<'_>,
        out: &mut [Event],
    ) -> Option<Poll<usize>> {
        if !self.reactor.bare_choose(ep) || !ep.kernel.bare_task_enter(&mut self.bare, cx.waker()) {
            ep.kernel.bare_task_leave(&mut self.bare);
            return None;
        }
        let got = self.reactor.bare_harvest(ep, out, cx);
        if got.is_ready() {
            ep.kernel.bare_task_leave(&mut self.bare);
        }
        Some(got)
    }

    /// A child process's copy of a pre-fork wait goes away: leak its reactor side. Dropping
    /// it would take tokio's locks (which another parent thread may have held at the fork)
    /// and could deregister the parent's registration from the reactor's epoll, which the
    /// child shares with the parent.
    // (Without the reactor path the stand-in has nothing to leak.)
    #[cfg_attr(
        not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))),
        allow(clippy::forget_non_drop)
    )]
    pub(crate) fn forget_in_child(&mut self) {
        std::mem::forget(std::mem::take(&mut self.reactor));
    }

    /// The owner goes away: leave the queue (handing on a wake won and not used); a
    /// pending reactor registration goes with it.
    pub(crate) fn cancel(&mut self, ep: &Arc<EpInner>) {
        ep.kernel.bare_task_leave(&mut self.bare);
        self.wait
            .cancel(&ep.waiters, &mut Harvest { ep, out: &mut [] });
    }
}

/// The epoll's bare task slot ("Bare" in the module docs): whether a task holds it, and
/// its waker, where the two wakes it would otherwise have had through `waiters` find it:
/// the epoll's first in-memory `add` and a change of the kernel shape. One task at a time
/// (any other waits through `waiters`).
///
/// LOCKING: `waker` is a leaf lock; no waker is cloned, woken or dropped under it.
// (Where there is no kernel side, nothing makes one.)
#[cfg_attr(not(evfd_kernel_side), allow(dead_code))]
#[derive(Default)]
pub(crate) struct BareTask {
    held: crate::loom::sync::atomic::AtomicBool,
    waker: crate::loom::sync::Mutex<Option<std::task::Waker>>,
}

#[cfg_attr(not(evfd_kernel_side), allow(dead_code))]
impl BareTask {
    /// Take the slot (SeqCst) unless `*held` says this wait has it; `false` if another
    /// task holds it.
    pub(crate) fn take(&self, held: &mut bool) -> bool {
        use crate::loom::sync::atomic::Ordering::SeqCst;
        if !*held {
            *held = self
                .held
                .compare_exchange(false, true, SeqCst, SeqCst)
                .is_ok();
        }
        *held
    }

    /// Keep `w` as the holder's waker (a clone made with no lock held, only if the one
    /// kept would not wake the same task).
    pub(crate) fn set_waker(&self, w: &std::task::Waker) {
        if crate::loom::lock(&self.waker)
            .as_ref()
            .is_some_and(|k| k.will_wake(w))
        {
            return;
        }
        let new = w.clone();
        let old = crate::loom::lock(&self.waker).replace(new);
        drop(old);
    }

    /// Leave the slot, if `*held`. The waker stays: the next holder is usually the same
    /// task, whose `set_waker` then finds it in place (a wake of a waker left behind is a
    /// spurious wake of a task that no longer waits here).
    pub(crate) fn leave(&self, held: &mut bool) {
        if std::mem::take(held) {
            self.held
                .store(false, crate::loom::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Wake the holder, if any (taking its waker: its next poll keeps a new one). Runs the
    /// waker with no lock held.
    pub(crate) fn wake(&self) {
        let w = crate::loom::lock(&self.waker).take();
        if let Some(w) = w {
            w.wake();
        }
    }
}

/// The harvest of a wait that hears kernel readiness through a reactor.
struct ReactorHarvest<'a, 'c, 'w> {
    ep: &'a Arc<EpInner>,
    out: &'a mut [Event],
    reactor: &'a mut Reactor,
    cx: &'c mut Context<'w>,
}

impl WaitFor for ReactorHarvest<'_, '_, '_> {
    type Output = usize;

    fn try_now(&mut self) -> Option<usize> {
        self.reactor.try_harvest(self.ep, self.out, self.cx)
    }

    fn hand_on(&mut self) {
        self.ep.hand_on();
    }
}

#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
mod via_tokio {
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use super::KernelReactor;
    use crate::epoll::EpInner;
    use crate::events::Event;

    /// A registration in tokio's list of waiters for the kernel epoll's readiness.
    type Armed = Pin<Box<dyn Future<Output = io::Result<()>> + Send + Sync>>;

    /// How many reactor edges one `try_harvest` follows before it yields instead.
    const ROUNDS: usize = 3;

    /// The reactor side of one async wait (module docs).
    #[derive(Default)]
    pub(super) struct Reactor {
        /// The registration this wait uses (its runtime's).
        fd: Option<Arc<KernelReactor>>,
        /// This wait's place in tokio's waiters of `fd`'s readiness.
        armed: Option<Armed>,
        /// `fd` failed (its runtime shut down): choose again at the next poll.
        failed: bool,
        /// `armed` was found pending by a try of this poll (with this poll's waker): a
        /// later try of the same poll does not look again (`try_harvest`).
        seen: bool,
        /// The bare registration this wait uses while it holds the bare slot ("Bare").
        bare: Option<Arc<KernelReactor>>,
    }

    impl std::fmt::Debug for Reactor {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Reactor")
                .field("fd", &self.fd)
                .field("armed", &self.armed.is_some())
                .finish()
        }
    }

    /// One look through `fd` ([`KernelReactor::around`]): its readiness taken, and if it
    /// was set, the delivering harvest — the one-eventfd shape's lean one where it applies
    /// (`fds`), else the general one — after which the readiness is cleared if the harvest
    /// delivered nothing or left the kernel epoll drained (module docs). `Ok(None)`: not
    /// set (nothing harvested); `Err`: the reactor is gone.
    #[inline(always)]
    fn look(
        fd: &KernelReactor,
        ep: &Arc<EpInner>,
        out: &mut [Event],
        cx: &mut Context<'_>,
    ) -> io::Result<Option<usize>> {
        fd.around(cx, |taken| {
            if !taken {
                return (None, false);
            }
            let (n, drained) = super::super::fds::harvest_one(ep, out, None)
                .unwrap_or_else(|| ep.harvest_drained(out));
            (Some(n), n == 0 || drained)
        })
    }

    impl Reactor {
        /// Whether this poll hears kernel readiness through the current tokio runtime's
        /// reactor: the epoll holds kernel fds, a runtime is current and the kernel epoll
        /// is (or can now be) registered with it. Without kernel fds this is one load.
        pub(super) fn choose(&mut self, ep: &EpInner) -> bool {
            // One load without kernel fds (no kernel side).
            if !ep.kernel.present() {
                return self.drop_fd();
            }
            let Some(rt) = KernelReactor::current_runtime() else {
                return self.drop_fd();
            };
            // The registration this wait used last time, still in its runtime, working,
            // and of the registrations' current shape ("Direct registration").
            if !self.failed
                && self
                    .fd
                    .as_ref()
                    .is_some_and(|fd| fd.runtime() == rt && fd.current())
            {
                return true;
            }
            // A new wait (or one whose registration went stale): the epoll's registration
            // for this runtime and shape, if there is one, without taking the kernel side.
            if !self.failed {
                if let Some(fd) = ep.kernel.reactor.cached(rt) {
                    self.armed = None;
                    self.fd = Some(fd);
                    return true;
                }
            }
            let Some(side) = ep.kernel.side() else {
                return self.drop_fd();
            };
            if !side.poll.has_fds() {
                return self.drop_fd();
            }
            if self.failed {
                if let Some(fd) = self.fd.take() {
                    ep.kernel.reactor.forget(&fd);
                }
                self.armed = None;
                self.failed = false;
            }
            self.armed = None;
            self.fd = ep.kernel.reactor.get(rt, ep, &side);
            self.fd.is_some()
        }

        /// Whether this poll may wait bare through the current tokio runtime's reactor:
        /// the epoll holds kernel fds, never held an in-memory source, a runtime is
        /// current and the bare registration for it and the current shape is (or can now
        /// be) made ("Bare"). Without kernel fds this is one load.
        pub(super) fn bare_choose(&mut self, ep: &EpInner) -> bool {
            if !ep.kernel.present() || !ep.kernel.bare_possible() {
                self.bare = None;
                return false;
            }
            let Some(rt) = KernelReactor::current_runtime() else {
                self.bare = None;
                return false;
            };
            if self
                .bare
                .as_ref()
                .is_some_and(|fd| fd.runtime() == rt && fd.current())
            {
                return true;
            }
            if let Some(fd) = ep.kernel.bare_reactor.cached(rt) {
                self.bare = Some(fd);
                return true;
            }
            let Some(side) = ep.kernel.side() else {
                self.bare = None;
                return false;
            };
            if !side.poll.has_fds() {
                self.bare = None;
                return false;
            }
            self.bare = ep.kernel.bare_reactor.get(rt, ep, &side);
            self.bare.is_some()
        }

        /// The bare holder's first look after a wake ("Bare"): if the bare registration's
        /// readiness is set, the harvest (cleared as in [`bare_harvest`](Self::bare_harvest));
        /// `Some(n)` if it delivered. `None` (not set, nothing delivered, or the reactor
        /// gone): the caller takes the whole bare path. Not set leaves the waker in
        /// tokio's slot, which the whole path's look leaves there too.
        #[inline(always)]
        pub(super) fn bare_ready(
            &mut self,
            ep: &Arc<EpInner>,
            out: &mut [Event],
            cx: &mut Context<'_>,
        ) -> Option<usize> {
            match look(self.bare.as_ref()?, ep, out, cx) {
                Ok(Some(n)) if n > 0 => Some(n),
                _ => None,
            }
        }

        /// The bare holder's look ("Bare"): the bare registration's readiness through
        /// tokio's one-task slot (`poll_read_ready`), which only the holder of the bare
        /// slot polls. Not set: the waker is in tokio's slot (an edge since the last
        /// clear wakes it), and only memory may have something. Set: taken *before* the
        /// harvest, and cleared only if the harvest delivered nothing or left the kernel
        /// epoll drained, as `try_harvest` does with the shared registration.
        pub(super) fn bare_harvest(
            &mut self,
            ep: &Arc<EpInner>,
            out: &mut [Event],
            cx: &mut Context<'_>,
        ) -> Poll<usize> {
            let Some(fd) = self.bare.as_ref() else {
                cx.waker().wake_by_ref();
                return Poll::Pending;
            };
            let mut failed = false;
            for _ in 0..ROUNDS {
                // The shape moved since this registration was made (after the waker went
                // into the bare slot: the pair with `wake_shape`): choose again.
                if !fd.current() {
                    break;
                }
                match look(fd, ep, out, cx) {
                    // Not ready: the waker is in tokio's slot.
                    Ok(None) => {
                        let n = ep.harvest_now_mem(out);
                        return if n > 0 { Poll::Ready(n) } else { Poll::Pending };
                    }
                    Ok(Some(0)) => {}
                    Ok(Some(n)) => return Poll::Ready(n),
                    Err(_) => {
                        failed = true;
                        break;
                    }
                }
            }
            if failed {
                // The reactor is gone (its runtime shut down): the next poll makes a new
                // registration, or takes the general path.
                if let Some(fd) = self.bare.take() {
                    ep.kernel.bare_reactor.forget(&fd);
                }
            } else if self.bare.as_ref().is_some_and(|fd| !fd.current()) {
                self.bare = None;
            }
            // A moved shape, a failed reactor, or edges that keep coming while others
            // take the events: let the executor run others, then choose again.
            cx.waker().wake_by_ref();
            Poll::Pending
        }

        fn drop_fd(&mut self) -> bool {
            self.armed = None;
            self.fd = None;
            self.failed = false;
            false
        }

        /// A new poll of the future begins (a new waker, maybe): its first try looks at
        /// the place again.
        pub(super) fn new_poll(&mut self) {
            self.seen = false;
        }

        /// A look at this wait's place in the reactor's waiters, then, if the readiness is
        /// set, a harvest that clears it only when it found the kernel epoll empty or left
        /// it drained (module docs). `None`: wait; a reactor readiness that came meanwhile,
        /// or a failed reactor, has woken the task already.
        pub(super) fn try_harvest(
            &mut self,
            ep: &Arc<EpInner>,
            out: &mut [Event],
            cx: &mut Context<'_>,
        ) -> Option<usize> {
            let fd = self.fd.as_ref()?;
            for _ in 0..ROUNDS {
                // The shape moved (a kernel fd added, modified or deleted) since this
                // registration was made: it may not hear every kernel fd any more. Choose
                // again at the next poll. (After this wait's registration on `waiters`,
                // the check pairs with the shape's wake: `wake_shape` in `fds`.)
                if !fd.current() {
                    self.fd = None;
                    self.armed = None;
                    cx.waker().wake_by_ref();
                    return None;
                }
                // This wait's place in tokio's waiters of the readiness first: pending, it
                // says that the readiness was clear when it was made (at the wait's first
                // try, or after a clear that found the kernel epoll drained) and that no
                // edge came since — an edge sets the readiness and marks every waiter — so
                // the kernel epoll has nothing this wait has not seen, or has one whose
                // edge will wake us. Then only memory may have something (a harvest if
                // its hint is set, which collects the kernel epoll too, as `epoll_wait`
                // returns every ready item), and nothing is cleared. (No look at the
                // readiness itself here: `poll_read_ready` costs a lock and a waker in
                // tokio's one-task slot, on every try of a wait that sleeps.)
                //
                // A second try of the same poll (the re-check after the registration on
                // `waiters`) does not poll the place again: the first left this poll's waker
                // in it, so an edge since then wakes the task, whose next poll looks.
                let made = self.armed.is_none();
                let armed = self
                    .armed
                    .get_or_insert_with(|| Box::pin(Arc::clone(fd).readable()));
                let place = if self.seen && !made {
                    Poll::Pending
                } else {
                    armed.as_mut().poll(cx)
                };
                match place {
                    Poll::Pending => {
                        self.seen = true;
                        let n = ep.harvest_now_mem(out);
                        if n > 0 {
                            self.armed = None;
                            return Some(n);
                        }
                        return None;
                    }
                    Poll::Ready(Ok(())) => self.armed = None,
                    Poll::Ready(Err(_)) => return self.fail(cx),
                }
                // The readiness is set (an edge since, or set when the wait began). With
                // it taken: a harvest that delivered nothing (it collected from the kernel
                // epoll with every slot free, as the route always did), or one that left
                // the kernel epoll drained (it collected with a slot to spare, and nothing
                // it delivered stays ready: `fds`, "Drained"), clears it. Without it
                // (another wait cleared it meanwhile): as above, memory only, nothing
                // cleared.
                let got = look(fd, ep, out, cx)
                    .map(|taken| taken.unwrap_or_else(|| ep.harvest_now_mem(out)));
                match got {
                    Ok(0) => {}
                    Ok(n) => return Some(n),
                    Err(_) => return self.fail(cx),
                }
            }
            // Edges keep coming and others take the events: let the executor run others.
            cx.waker().wake_by_ref();
            None
        }

        /// The reactor is gone (its runtime shut down): wake the task so that its next poll
        /// chooses again (another runtime's reactor, or the watcher).
        fn fail(&mut self, cx: &mut Context<'_>) -> Option<usize> {
            self.armed = None;
            self.failed = true;
            cx.waker().wake_by_ref();
            None
        }
    }
}

/// The kernel epoll in one tokio runtime's reactor (module docs): the runtime it was tried
/// for, and the registration, `None` if it could not be made there (no I/O driver). Leaf
/// lock; tokio is never called under it.
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
#[derive(Default)]
pub(crate) struct Slot(crate::loom::sync::Mutex<Option<SlotEntry>>);

/// A [`Slot`]'s registration: the runtime and shape it was made for, and the registration
/// (`None` if it could not be made there).
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
type SlotEntry = (::tokio::runtime::Id, u64, Option<Arc<KernelReactor>>);

#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
impl Slot {
    /// The registration kept for runtime `rt`, if it is of the registrations' current shape
    /// and the kernel epoll holds fds: what [`Slot::get`] returns without making one. One
    /// lock of the slot; the kernel side is not taken.
    pub(super) fn cached(&self, rt: ::tokio::runtime::Id) -> Option<Arc<KernelReactor>> {
        match &*crate::loom::lock(&self.0) {
            Some((id, _, Some(r))) if *id == rt && r.current() && r.poll.has_fds() => {
                Some(Arc::clone(r))
            }
            _ => None,
        }
    }

    /// The epoll's kernel readiness in the reactor of runtime `rt` (the current one), for
    /// the registrations' current shape ("Direct registration": the one eventfd's
    /// duplicate, else `kfd`'s), registered by the first call from that runtime and shape
    /// (one `dup` and one `epoll_ctl`); `None` if it cannot be (the caller falls back to
    /// the watcher). One registration is kept, for the runtime and shape asked for last:
    /// waits in other runtimes hold their own `Arc`. Takes `registry` (to read the shape)
    /// only to make one; never holds two locks.
    fn get(
        &self,
        rt: ::tokio::runtime::Id,
        ep: &EpInner,
        side: &super::Side,
    ) -> Option<Arc<KernelReactor>> {
        use crate::loom::sync::atomic::Ordering::SeqCst;
        use std::os::fd::AsFd;
        let now = side.poll.shape.load(SeqCst);
        if let Some((id, shape, r)) = &*crate::loom::lock(&self.0) {
            if *id == rt && *shape == now {
                return r.clone();
            }
        }
        // The shape and its eventfd, read together under `registry`.
        let (shape, one) = {
            let reg = crate::loom::lock(&ep.registry);
            let (shape, one) = reg.kernel.shape();
            (shape, one.and_then(|w| w.upgrade()))
        };
        // Registered with no lock held (tokio code).
        let fd = one.as_ref().map_or(side.poll.kfd.as_fd(), |e| e.as_fd());
        let made = KernelReactor::new(fd, rt, Arc::clone(&side.poll), shape).map(Arc::new);
        if made.is_some() && one.is_some() {
            // The route hears the eventfd itself now: `kfd` need not ("Parked" in `fds`).
            super::fds::park(ep, side, shape);
        }
        let old = {
            let mut slot = crate::loom::lock(&self.0);
            match &*slot {
                // Another wait of this runtime was quicker: use its registration.
                Some((id, s, r)) if *id == rt && *s == shape => return r.clone(),
                // The epoll closed (`close` cleared `present`, then took the slot): keep
                // nothing, which only `close` would have dropped.
                _ if !ep.kernel.present() => None,
                _ => slot.replace((rt, shape, made.clone())),
            }
        };
        // An older registration goes (tokio code) after the unlock.
        drop(old);
        made
    }

    /// `r` failed (its runtime shut down): forget it, so that the next wait of a live
    /// runtime registers again. Drops it after the unlock.
    fn forget(&self, r: &Arc<KernelReactor>) {
        let old = {
            let mut slot = crate::loom::lock(&self.0);
            match &*slot {
                Some((_, _, Some(cur))) if Arc::ptr_eq(cur, r) => slot.take(),
                _ => None,
            }
        };
        drop(old);
    }

    /// Take the registration out if the shape moved since it was made (`fds::wake_shape`),
    /// to be dropped by the caller once it holds no lock: a duplicate of an eventfd the
    /// epoll no longer holds (or of `kfd`, for a shape gone) keeps nothing open past the
    /// change. Waits that took it hold their own `Arc` until they choose again (the
    /// shape's wake). The look is under the slot's lock, so a registration `get` put in
    /// for a newer shape is kept.
    pub(super) fn take_stale(&self) -> Option<Arc<KernelReactor>> {
        let mut slot = crate::loom::lock(&self.0);
        match &*slot {
            Some((_, _, Some(r))) if !r.current() => slot.take().and_then(|(_, _, r)| r),
            _ => None,
        }
    }

    /// Take the registration out, to be dropped by the caller once it holds no lock
    /// (`close`: `KernelLeft`).
    pub(super) fn take(&self) -> Option<Arc<KernelReactor>> {
        crate::loom::lock(&self.0).take().and_then(|(_, _, r)| r)
    }
}

/// An epoll's kernel epoll in one tokio runtime's reactor: the fast path of
/// `Epoll::wait_async` and `EpollStream` for kernel-fd sources (module docs).
///
/// It owns a duplicate of the kernel epoll's fd (the same open file, so the reactor sees
/// the kernel epoll become readable), or of its one eventfd ("Direct registration"),
/// registered for `READABLE` with the runtime that was current when it was made. The reactor watches it edge-triggered: every wake of the
/// kernel epoll (each kernel event of one of its fds) is an edge, and an edge bumps the
/// `AsyncFd`'s readiness tick, so a clear made with an older tick does not take effect.
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
pub(crate) struct KernelReactor {
    rt: ::tokio::runtime::Id,
    fd: ::tokio::io::unix::AsyncFd<std::os::fd::OwnedFd>,
    /// The kernel epoll whose shape this registration was made for, and that shape.
    poll: Arc<super::KernelPoll>,
    shape: u64,
}

#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
impl std::fmt::Debug for KernelReactor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KernelReactor")
            .field("rt", &self.rt)
            .field("fd", &self.fd)
            .field("shape", &self.shape)
            .finish()
    }
}

#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
impl KernelReactor {
    /// The current tokio runtime's id, if the caller runs inside one.
    pub(crate) fn current_runtime() -> Option<::tokio::runtime::Id> {
        ::tokio::runtime::Handle::try_current().ok().map(|h| h.id())
    }

    /// Register a duplicate of `fd` (`kfd`, or the one eventfd of shape `shape` of `poll`)
    /// with the current runtime's reactor (`rt`). `None` if
    /// it cannot be: the duplicate or the registration failed, or the runtime has no I/O
    /// driver (the caller then uses the watcher thread).
    ///
    /// tokio offers no way to ask whether a runtime has an I/O driver: its registration
    /// panics in a runtime built without `enable_io`. So the first registration in each
    /// runtime is a probe ([`quietly`]: caught, with the process's panic hook kept silent
    /// for it); a runtime found without I/O is remembered and never probed again. With
    /// `panic = "abort"` a panic cannot be caught, so no registration is tried at all.
    pub(crate) fn new(
        fd: BorrowedFd<'_>,
        rt: ::tokio::runtime::Id,
        poll: Arc<super::KernelPoll>,
        shape: u64,
    ) -> Option<KernelReactor> {
        if !cfg!(panic = "unwind") || no_io(rt, false) {
            return None;
        }
        let dup = fd.try_clone_to_owned().ok()?;
        // Nothing of ours is borrowed or locked across it, and the duplicate closes on
        // unwind.
        let Some(made) = quietly(move || register_stable(dup, ::tokio::io::Interest::READABLE))
        else {
            no_io(rt, true);
            return None;
        };
        Some(KernelReactor {
            rt,
            fd: made.ok()?,
            poll,
            shape,
        })
    }

    /// The runtime this was registered with.
    pub(crate) fn runtime(&self) -> ::tokio::runtime::Id {
        self.rt
    }

    /// Whether the registrations still have the shape this was made for (one load).
    pub(crate) fn current(&self) -> bool {
        self.poll
            .shape
            .load(crate::loom::sync::atomic::Ordering::SeqCst)
            == self.shape
    }

    /// One look through the reactor around a harvest: take the reactor's readiness of the
    /// kernel epoll (if set) *before* running `harvest` (told whether it was taken); if
    /// `harvest` reports that it left the kernel epoll drained (`true` in its result:
    /// nothing to report until its next wake), clear that readiness — which tokio
    /// does only if no edge came since it was taken (the tick), so an event that arrived
    /// after the harvest looked keeps it set. `Err` if the reactor is gone (its runtime
    /// shut down). Calls tokio with no lock held (the caller holds none).
    #[inline(always)]
    pub(crate) fn around<R>(
        &self,
        cx: &mut std::task::Context<'_>,
        harvest: impl FnOnce(bool) -> (R, bool),
    ) -> io::Result<R> {
        let guard = match self.fd.poll_read_ready(cx) {
            std::task::Poll::Ready(Ok(g)) => Some(g),
            std::task::Poll::Ready(Err(e)) => return Err(e),
            // Not ready (tokio stored the waker in its one-task slot: at worst a spurious
            // wake later), or out of coop budget (tokio woke the task already).
            std::task::Poll::Pending => None,
        };
        let (r, empty) = harvest(guard.is_some());
        if let (Some(mut g), true) = (guard, empty) {
            g.clear_ready();
        }
        Ok(r)
    }

    /// A future that resolves once the reactor reports the kernel epoll readable (at once
    /// if its readiness is set). Unlike `poll_read_ready`, whose one waker slot only the
    /// last task to poll would keep, it waits in tokio's list of waiters, so every pending
    /// wait of the epoll is woken.
    pub(crate) async fn readable(self: std::sync::Arc<Self>) -> io::Result<()> {
        self.fd.readable().await.map(drop)
    }
}

/// Runtimes found without an I/O driver (`KernelReactor::new`), the most recent first:
/// whether `rt` is one, after adding it if `add`. Bounded: a process that makes runtimes
/// without I/O by the thousand probes again only the ones it forgot.
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
fn no_io(rt: ::tokio::runtime::Id, add: bool) -> bool {
    use std::sync::Mutex;
    const KEEP: usize = 64;
    static NO_IO: Mutex<Vec<::tokio::runtime::Id>> = Mutex::new(Vec::new());
    let mut v = NO_IO
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    if add && !v.contains(&rt) {
        v.insert(0, rt);
        v.truncate(KEEP);
    }
    v.contains(&rt)
}

#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
thread_local! {
    /// Set while this thread runs a probe in [`quietly`].
    static QUIET: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// Run `f`, catching a panic (`None`) without running the process's panic hook for it: a
/// hook is installed once, in front of whatever hook the process had then, that stays
/// silent for a panic on a thread inside `quietly` and passes every other panic on. (A
/// hook the program installs later replaces it; a probe then runs that hook, once per
/// runtime without I/O.)
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
fn quietly<R>(f: impl FnOnce() -> R) -> Option<R> {
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| {
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if !QUIET.try_with(std::cell::Cell::get).unwrap_or(false) {
                before(info);
            }
        }));
    });
    let was = QUIET.with(|q| q.replace(true));
    let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    QUIET.with(|q| q.set(was));
    r.ok()
}
