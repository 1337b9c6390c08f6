//! The kernel side of an [`Epoll`](crate::Epoll), behind one facade ([`KernelSide`]):
//! kernel-fd sources (a `BorrowedFd`, a [`KernelNotifier`](crate::KernelNotifier)), their
//! kernel epoll, and the three routes by which their readiness reaches a waiter.
//!
//! The in-memory epoll (`super`: `mod.rs`, `item.rs`, `ready.rs`, `harvest.rs`,
//! `future.rs`) reads without this module, as `fs/eventpoll.c` reads without its callers:
//! it calls the facade's methods on `EpInner::kernel` at the few points where kernel fds
//! change what it does, and each is one load when the epoll never held a kernel fd.
//!
//! | file | what |
//! |---|---|
//! | `mod.rs` | the facade, the kernel item, invariant W |
//! | `fds.rs` | registrations and tokens: `add`/`modify`/`delete`/`len`, the harvest's collect |
//! | `poll.rs` | [`KernelPoll`], the kernel epoll as the kernel item's source |
//! | `watcher.rs` | route 1: the process-wide watcher thread (tasks, parked threads, pollers) |
//! | `sleep.rs` | route 2: a blocked `Epoll::wait` sleeps in `epoll_wait` on the kernel epoll (direct slot) or in `poll(2)` on it |
//! | `reactor.rs` | route 3: an async wait in a tokio runtime, woken by its reactor |
//! | `stub.rs` | neither epoll nor kqueue: stand-ins with the same names (nothing runs) |
//!
//! On macOS and FreeBSD the same files run over kqueue: `sys::epoll` there is
//! `sys::kqueue`, kqueue with epoll's meaning under epoll's names, and `sys::eventfd` its
//! one-fd `EVFILT_USER` bell; "kernel epoll" below then reads "kqueue" (docs/design.md, "The
//! kernel side off Linux", has what differs). Route 3 (`reactor`) is Linux's: there a task
//! in a tokio runtime is woken through the watcher.
//!
//! # One more source on the ready list
//!
//! Kernel fds are registered in one kernel epoll per `Epoll` (`KernelPoll::kfd`), created by
//! the first kernel `add` that succeeds. It holds nothing else (no doorbell). The `Epoll`
//! sees it through its **kernel item**: an `Item` like any other, on the in-memory ready
//! list while `kfd` may have events, whose source is `kfd` (`SourceCore::Kernel`). It is
//! never hooked into a wait queue; it is queued
//!
//! - by a kernel `add`/`modify` that leaves `kfd` readable (the kernel polls the fd at
//!   `EPOLL_CTL_ADD`/`MOD`, as the in-memory `add` does),
//! - by a harvest that collected kernel events (level-triggered requeue: more may be ready),
//! - by the process-wide watcher (`watcher`) when `kfd` becomes readable while someone may
//!   wait: that is how every face hears of kernel readiness.
//!
//! Its wake is the ordinary item callback, so blocking waiters, tasks, fd views (whose
//! `any_live` counts it) and outer epolls (on `pollers`) are woken as for a notifier. The
//! harvest delivers its events where it meets it in the ready list: a non-blocking
//! `epoll_wait` on `kfd` into the remaining slots ([`Collector`]; while `kfd` holds one
//! AutoReset `KernelNotifier` for `IN` and nothing else, that eventfd's own reset `read`,
//! which decides what the kernel would report: `fds`, "One eventfd"). A harvest that does not
//! meet it still collects once at its end, so a zero-timeout `wait` never misses a kernel
//! event.
//!
//! # Invariant W (no lost wake)
//!
//! (A thread blocked in `wait` while kernel fds are registered sleeps on `kfd` itself, in
//! `epoll_wait` or `poll(2)`, registered with the mask `KEY_KSLEEP`: `sleep`. A task polled in a tokio
//! runtime watches `kfd` through the reactor, also with `KEY_KSLEEP`: `reactor`. Neither
//! needs this, and `listened` counts neither.)
//!
//! While a waiter with mask `IN` (a task, a parked thread) is registered in `waiters` or a
//! poller is hooked on `pollers`, and `kfd` holds an undelivered event, the kernel item is
//! linked (on the ready list or a running scan's transfer list), or `kfd` is armed in the
//! watcher, or the watcher is between clearing `armed` and queueing the item.
//!
//! - A waiter registers (SeqCst, under its queue's lock), then looks at `linked` under
//!   `ready` and arms if it is clear ([`KernelSide::watch`]).
//! - A harvest that collected kernel events without meeting the kernel item requeues it
//!   under `ready` if someone listens; it gives up on a look without the lock that finds
//!   nobody (SeqCst: a waiter that registered before it is seen; one that registers after
//!   it finds the item unlinked and arms, as above).
//! - A scan that drops the kernel item (it delivered nothing) clears `linked` before its
//!   end, and at its end, under `ready`, reads `has_sleeper()` and `pollers`; if either is
//!   set, it arms ([`KernelSide::dropped`]). `ready` orders the two: one of them arms.
//! - A kernel `add` publishes the side (`present`, SeqCst) and then, under `ready`, reads
//!   the waiters; a waiter registers and then reads `present`: one sees the other.
//! - Arming is `epoll_ctl(MOD, IN | ONESHOT)` on the watcher's epoll, which polls `kfd`:
//!   readiness that predates the arm fires at once, later readiness through the kernel's
//!   callback. The watcher clears `armed` and then queues, so a concurrent waiter either
//!   sees the item linked or arms again (a redundant fire is harmless).
//!
//! The loom models `kernel_item_*` in `src/tests/loom_kernel_item.rs` check W. (Their
//! harvest, when the item is not linked, collects without requeueing it: the case of
//! `Collector::finish` when nobody listens.)
//!
//! # Nesting
//!
//! An epoll that holds a kernel fd, or nests one that does, is marked `below` (sticky) and
//! tells its outer epolls; their harvests then look at it at once
//! ([`KernelSide::queue_nested`]) instead of waiting for the watcher's hop.
//!
//! # LOCKING
//!
//! ```text
//! Registry::kernel    (Fds) guarded by EpInner::registry (1).
//! KernelSide::side    leaf Mutex<Option<Arc<Side>>>: written with registry held (the
//!                     first kernel add, close), read anywhere (clone the Arc and go).
//! KernelSide::present AtomicBool mirror of `side.is_some()`, written with it (invariant W).
//! KernelSide::memory  AtomicBool, sticky: set by the first in-memory `add` before it
//!                     rings the direct slot's holder (`sleep`, "Bare") and wakes the
//!                     bare task (`reactor`, "Bare").
//! KernelSide::bare_task  leaf Mutex (a waker) and flag: `reactor`, "Bare".
//! KernelPoll::armed   AtomicBool, see invariant W.
//! KernelPoll::arming  Mutex<()> (std): serialises this kernel epoll's arms in the
//!                     watcher (`watcher::arm`), taken with no crate lock held; under it
//!                     only the watcher's own (its fork guard, `CHILD`, `sides`,
//!                     `running`: `watcher`'s LOCKING block) and `epoll_ctl`.
//! KernelPoll::shape   AtomicU64, written under `registry` (`fds`), read anywhere: the
//!                     reactor route's generation (`reactor`, "Direct registration").
//! KernelPoll::one     leaf Mutex (std): the one eventfd's `Weak`, written under
//!                     `registry` with the shape, cloned out by `readiness` (no syscall
//!                     under it).
//! KernelPoll::park    two AtomicBools (`parked`, written under `registry`; `used`,
//!                     sticky): the Dekker pair of `fds`, "Parked".
//! KernelSide::reactor leaf Mutex (feature tokio): the reactor registration of `kfd` or
//!                     of its one eventfd (`reactor`), beside `side` (a new async wait
//!                     finds it without taking `side`). No tokio code runs under it;
//!                     `close` takes it out after clearing `present`.
//! KernelSide::bare_reactor  the same, for the bare task's own registration (`reactor`,
//!                     "Bare"), polled by the bare slot's holder only.
//! Side::direct        the direct slot (AtomicBool) and bell (OnceLock, made and registered
//!                     in `kfd` by the first direct sleep, no crate lock held): `sleep`.
//! ```
//! `epoll_ctl` and non-blocking `epoll_wait` on `kfd` run with `registry` held (they never
//! block). A `KernelNotifier`'s registration list is a leaf taken under `registry`.

#[cfg(evfd_kernel_side)]
mod fds;
#[cfg(evfd_kernel_side)]
mod poll;
mod reactor;
#[cfg(evfd_kernel_side)]
mod sleep;
#[cfg(not(evfd_kernel_side))]
mod stub;
#[cfg(evfd_kernel_side)]
pub(crate) mod watcher;

#[cfg(evfd_kernel_side)]
pub(crate) use fds::{Collector, Fds};
#[cfg(evfd_kernel_side)]
pub(crate) use poll::KernelPoll;
#[cfg(all(test, evfd_loom, evfd_kernel_side))]
pub(crate) use poll::Park;
#[cfg(all(test, evfd_loom))]
pub(crate) use reactor::BareTask;
pub(crate) use reactor::KernelWake;
#[cfg(evfd_kernel_side)]
pub(crate) use sleep::KernelSleep;
#[cfg(not(evfd_kernel_side))]
pub(crate) use stub::{Collector, Fds, KernelPoll, KernelSide, KernelSleep};

/// A kernel-fd `epoll_ctl`: what [`KernelSide::ctl`] does. (Where there is neither epoll
/// nor kqueue the stub's `ctl` never reads it: no kernel fd is ever added.)
#[derive(Clone, Copy)]
#[cfg_attr(not(evfd_kernel_side), allow(dead_code))]
pub(crate) enum Ctl {
    /// `EPOLL_CTL_ADD` (events, data).
    Add(crate::events::Events, u64),
    /// `EPOLL_CTL_MOD` (events, data).
    Mod(crate::events::Events, u64),
    /// `EPOLL_CTL_DEL`.
    Del,
}

#[cfg(evfd_kernel_side)]
pub(crate) use linux::{KernelSide, Side};

#[cfg(evfd_kernel_side)]
mod linux {
    use std::io;
    use std::sync::{Arc, Weak};

    use super::{Collector, Ctl, Fds, KernelPoll, KernelSleep};
    use crate::epoll::item::Item;
    use crate::epoll::source::sealed::KernelRef;
    use crate::epoll::source::SourceCore;
    use crate::epoll::EpInner;
    use crate::events::Events;
    use crate::loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
    use crate::loom::sync::Mutex;
    use crate::wait_queue::{PostWake, WakeBatch};

    /// The kernel side of one epoll: the facade the in-memory epoll calls (module docs).
    pub(crate) struct KernelSide {
        /// Whether `side` is set (SeqCst; invariant W): lets every path without kernel fds
        /// skip it with one load.
        present: AtomicBool,
        /// This epoll or one nested below it has held a kernel fd (sticky): its outer
        /// epolls look at it in their harvest ("Nesting").
        below: AtomicBool,
        /// An in-memory `add` was made on this epoll (sticky, SeqCst; set even if the add
        /// then failed): until then a blocked `wait` may sleep bare (`sleep::bare`) and a
        /// task wait bare (`reactor`, "Bare").
        memory: AtomicBool,
        /// The kernel epoll and kernel item, created by the first kernel-fd `add` that
        /// succeeds.
        side: Mutex<Option<Arc<Side>>>,
        /// The kernel epoll in one tokio runtime's reactor (`reactor`): here rather than in
        /// [`Side`], so that a new async wait finds it without taking `side`.
        #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
        pub(super) reactor: super::reactor::Slot,
        /// The bare task slot of route 3 (`reactor`, "Bare").
        bare_task: super::reactor::BareTask,
        /// The bare task's own registration in one tokio runtime's reactor (`reactor`,
        /// "Bare"): only the holder of `bare_task` polls it.
        #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
        pub(super) bare_reactor: super::reactor::Slot,
    }

    /// The kernel epoll and the kernel item.
    pub(crate) struct Side {
        pub(crate) poll: Arc<KernelPoll>,
        pub(crate) item: Arc<Item>,
        /// The direct sleep's slot and bell (`sleep`).
        pub(super) direct: super::sleep::Direct,
    }

    /// A closed epoll's kernel side, dropped by `close` after it released `registry`, with
    /// its reactor registration (feature `tokio`), taken out of the slot by `close` and
    /// dropped then, whoever else still holds the side, because dropping it runs tokio code
    /// (the deregistration).
    pub(crate) struct KernelLeft {
        _side: Option<Arc<Side>>,
        #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
        _reactor: Option<Arc<super::reactor::KernelReactor>>,
        #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
        _bare_reactor: Option<Arc<super::reactor::KernelReactor>>,
    }

    /// The deferred arm after a scan dropped the kernel item while someone waits.
    struct ArmWatch(Arc<EpInner>);

    impl PostWake for ArmWatch {
        fn post_wake(&self, _key: Events) {
            self.0.kernel.watch(&self.0);
        }
    }

    impl KernelSide {
        pub(crate) fn new() -> KernelSide {
            KernelSide {
                present: AtomicBool::new(false),
                below: AtomicBool::new(false),
                memory: AtomicBool::new(false),
                side: Mutex::new(None),
                #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
                reactor: super::reactor::Slot::default(),
                bare_task: super::reactor::BareTask::default(),
                #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
                bare_reactor: super::reactor::Slot::default(),
            }
        }

        /// Whether a kernel fd was ever added (one load).
        pub(crate) fn present(&self) -> bool {
            self.present.load(SeqCst)
        }

        /// The kernel side, if a kernel fd was ever added.
        pub(super) fn side(&self) -> Option<Arc<Side>> {
            if !self.present() {
                return None;
            }
            crate::loom::lock(&self.side).clone()
        }

        /// The first kernel `add`: a new kernel epoll and kernel item for `ep`.
        pub(super) fn new_side(ep: &Arc<EpInner>) -> io::Result<Side> {
            let poll = Arc::new(KernelPoll::new()?);
            let src = SourceCore::Kernel(Arc::clone(&poll));
            let item = Arc::new_cyclic(|me| Item {
                me: me.clone(),
                ep: Arc::clone(ep),
                state: Item::state_for(&src, Events::IN),
                src,
                events: AtomicU32::new(Events::IN.bits()),
                data: AtomicU64::new(0),
                linked: AtomicBool::new(false),
                ovf: AtomicBool::new(false),
            });
            Ok(Side {
                poll,
                item,
                direct: super::sleep::Direct::default(),
            })
        }

        /// Publish the side made by the first kernel `add` (with `registry` held), before
        /// the add looks at the waiters (invariant W).
        pub(super) fn publish(&self, side: &Arc<Side>) {
            *crate::loom::lock(&self.side) = Some(Arc::clone(side));
            self.present.store(true, SeqCst);
        }

        /// This epoll or one nested below it has held a kernel fd: a harvest is never
        /// skipped, and the spin is not adaptive (`super`'s `EpollSleeper`).
        #[inline]
        pub(crate) fn below(&self) -> bool {
            self.below.load(SeqCst)
        }

        /// `ep` holds a kernel fd, or nests one that does: tell its outer epolls.
        pub(crate) fn mark_below(&self, ep: &EpInner) {
            if self.below.swap(true, SeqCst) {
                return;
            }
            let parents: Vec<Arc<EpInner>> = crate::loom::lock(&ep.links)
                .parents
                .iter()
                .filter_map(Weak::upgrade)
                .collect();
            for p in parents {
                p.kernel.mark_below(&p);
            }
        }

        /// `add`/`modify`/`delete` of a kernel fd: the kernel's `epoll_ctl` on the kernel
        /// epoll (created by the first `add` that succeeds; a failed call leaves nothing
        /// behind), with the kernel's errno.
        pub(crate) fn ctl(&self, ep: &Arc<EpInner>, op: Ctl, k: KernelRef<'_>) -> io::Result<()> {
            match op {
                Ctl::Add(events, data) => {
                    self.add(ep, k, events, data)?;
                    self.mark_below(ep);
                    Ok(())
                }
                Ctl::Mod(events, data) => self.modify(ep, k, events, data),
                Ctl::Del => self.delete(ep, k),
            }
        }

        /// Someone may wait on `ep` (a waiter that just registered, a new poller): make
        /// sure the kernel item is queued or `kfd` armed (invariant W). Costs nothing
        /// without kernel fds; one `epoll_ctl` when it arms.
        pub(crate) fn watch(&self, ep: &EpInner) {
            crate::loom::dekker_fence();
            let Some(side) = self.side() else {
                return;
            };
            if !side.poll.has_fds() {
                return;
            }
            self.arm(ep, &side);
        }

        /// Watch `side` for whoever listens: edge-triggered for good once a poller exists,
        /// else armed once unless the kernel item is linked (invariant W).
        pub(super) fn arm(&self, ep: &EpInner, side: &Side) {
            // The watcher will rely on `kfd` ("Parked" in `fds`); if the parked eventfd
            // cannot go back, queue the item, as a failed arm does (`watcher::arm`).
            if super::fds::rely(ep, side).is_err() {
                super::watcher::queue(&side.item);
                return;
            }
            self.arm_relied(ep, side);
        }

        /// [`arm`](Self::arm) once `kfd` is known to hold every registered fd (no parked
        /// eventfd).
        fn arm_relied(&self, ep: &EpInner, side: &Side) {
            if !ep.pollers.wants_nothing() {
                if !side.poll.et.swap(true, SeqCst) {
                    super::watcher::arm(&side.poll, &side.item, true);
                }
                return;
            }
            if side.poll.is_et() {
                return;
            }
            let linked = {
                let _rd = ep.ready.lock();
                side.item.is_linked()
            };
            if !linked && !side.poll.armed.swap(true, SeqCst) {
                super::watcher::arm(&side.poll, &side.item, false);
            }
        }

        /// After the kernel changed what `kfd` holds (an add or a modify, which poll the
        /// fd): queue the kernel item if `kfd` is readable, else arm if someone waits.
        pub(super) fn changed(
            &self,
            ep: &EpInner,
            fds: &mut Fds,
            side: &Side,
            batch: &mut WakeBatch,
        ) {
            if !side.poll.readiness().is_empty() {
                ep.queue_if_ready(&side.item, Events::IN, batch);
                return;
            }
            let listened = {
                let _rd = ep.ready.lock();
                listened(ep)
            };
            if listened {
                // The watcher will rely on `kfd` ("Parked" in `fds`; `registry` is held).
                // If it cannot go back, queue the item (as a failed arm does), its wakes
                // in `batch`.
                if side.poll.park.rely() && super::fds::unpark(fds, side).is_err() {
                    crate::wait_queue::Callback::wake(&*side.item, Events::IN, batch);
                    return;
                }
                self.arm_relied(ep, side);
            }
        }

        /// A scan dropped the kernel item (it delivered nothing): if someone waits, the
        /// watcher must take over (invariant W). Must be called with `ready` held, at the
        /// scan's end.
        pub(crate) fn dropped(&self, ep: &Arc<EpInner>, batch: &mut WakeBatch) {
            if listened(ep) {
                batch.push_post(
                    Arc::new(ArmWatch(Arc::clone(ep))) as Arc<dyn PostWake>,
                    Events::empty(),
                );
            }
        }

        /// The harvest's look at nested epolls with kernel fds below: queue the
        /// level-triggered (or armed one-shot) item of each one that is ready now. The
        /// watcher propagates their kernel readiness asynchronously; this makes a harvest of
        /// the outer epoll see it at once, as the kernel's synchronous wake would.
        /// (Edge-triggered outer items rely on the watcher alone: "a wake happened" is not
        /// something a poll can tell.) Must be called with `registry` held; costs one load
        /// without kernel fds below.
        #[inline]
        pub(crate) fn queue_nested(&self, ep: &EpInner, reg: &mut Fds, batch: &mut WakeBatch) {
            if !self.below() || reg.nested.is_empty() {
                return;
            }
            reg.nested.retain(|i| !i.is_dead());
            for item in &reg.nested {
                let ev = item.events();
                let below = item.src.as_epoll().is_some_and(|c| c.kernel.below());
                if below && !ev.contains(Events::ET) && !item.is_linked() {
                    ep.queue_if_ready(item, ev, batch);
                }
            }
        }

        /// Whether some kernel fd is ready now (a poll of the kernel epoll, which consumes
        /// nothing): the epoll's readiness as a source counts it whether or not the kernel
        /// item is queued.
        pub(crate) fn readable(&self) -> bool {
            self.side().is_some_and(|k| !k.poll.readiness().is_empty())
        }

        /// What a harvest needs to deliver kernel events ([`Collector`]).
        #[inline]
        pub(crate) fn collect(&self) -> Collector {
            Collector::new(self.side())
        }

        /// A kernel sleep for the calling thread (`sleep`), if this epoll holds kernel fds.
        pub(crate) fn sleeper(&self, ep: &EpInner) -> Option<KernelSleep> {
            let side = self.side()?;
            if !side.poll.has_fds() {
                return None;
            }
            // The sleep relies on `kfd` ("Parked" in `fds`): without it, the futex park
            // and the watcher (whose arm tries again).
            super::fds::rely(ep, &side).ok()?;
            KernelSleep::new(side)
        }

        /// A blocked `wait`'s bare sleep (`sleep::bare`), if this epoll holds kernel fds
        /// and never held an in-memory source: `Some(n)` events delivered (0 at the
        /// deadline), `None` to take the general path.
        #[inline]
        pub(crate) fn wait_bare(
            &self,
            ep: &Arc<EpInner>,
            out: &mut [crate::events::Event],
            deadline: Option<std::time::Instant>,
        ) -> Option<usize> {
            if self.memory.load(SeqCst) {
                return None;
            }
            let side = self.side()?;
            if !side.poll.has_fds() {
                return None;
            }
            super::fds::rely(ep, &side).ok()?;
            super::sleep::bare(&side, ep, out, deadline, &self.memory)
        }

        /// An in-memory `add` is about to register a source: the first one ends the bare
        /// sleeps (`sleep::bare`), so it rings a holder of the direct slot, which may be one
        /// (after setting `memory`: the Dekker pair there). One load after the first.
        pub(crate) fn memory_added(&self) {
            if self.memory.load(SeqCst) || self.memory.swap(true, SeqCst) {
                return;
            }
            crate::loom::dekker_fence();
            if let Some(side) = self.side() {
                side.direct.ring_holder();
            }
            self.bare_task.wake();
        }

        /// Whether the epoll never held an in-memory source: a task may wait bare
        /// (`reactor`, "Bare"; one load, the decision is `bare_task_enter`'s).
        #[cfg_attr(
            not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))),
            allow(dead_code)
        )]
        pub(crate) fn bare_possible(&self) -> bool {
            !self.memory.load(SeqCst)
        }

        /// A task's bare wait (`reactor`, "Bare"): take the slot unless `*held` already
        /// says so, keep `waker` in it, then read `memory`. `true`: wait bare; `false`:
        /// the general path (the slot left if the epoll gained an in-memory source).
        pub(crate) fn bare_task_enter(&self, held: &mut bool, waker: &std::task::Waker) -> bool {
            if self.memory.load(SeqCst) {
                self.bare_task.leave(held);
                return false;
            }
            if !self.bare_task.take(held) {
                return false;
            }
            self.bare_task.set_waker(waker);
            crate::loom::dekker_fence();
            if self.memory.load(SeqCst) {
                self.bare_task.leave(held);
                return false;
            }
            true
        }

        /// Leave the bare task slot, if `*held`.
        pub(crate) fn bare_task_leave(&self, held: &mut bool) {
            self.bare_task.leave(held);
        }

        /// The kernel shape changed (`fds::wake_shape`): wake the bare task, if any.
        pub(super) fn wake_bare_task(&self) {
            self.bare_task.wake();
        }

        /// The kernel shape changed (`fds::wake_shape`): drop the reactor registrations
        /// made for an older shape (`reactor::Slot::take_stale`), each after its slot's
        /// lock is released (tokio code). Must be called with no crate lock held.
        pub(super) fn drop_stale_reactors(&self) {
            #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
            {
                drop(self.reactor.take_stale());
                drop(self.bare_reactor.take_stale());
            }
        }

        /// `close`: forget the kernel side (its kernel epoll closes with the last
        /// reference) and every registration. Returns it, for the caller to drop once
        /// `registry` is released (see [`KernelLeft`]).
        pub(crate) fn close(&self, reg: &mut Fds) -> KernelLeft {
            *reg = Fds::default();
            self.present.store(false, SeqCst);
            let side = crate::loom::lock(&self.side).take();
            if let Some(side) = &side {
                side.item.kill();
            }
            // After `present` is clear: a registration made meanwhile is not kept
            // (`Slot::get`).
            KernelLeft {
                _side: side,
                #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
                _reactor: self.reactor.take(),
                #[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
                _bare_reactor: self.bare_reactor.take(),
            }
        }
    }

    /// Whether a waiter or a poller that relies on the watcher may be waiting for `ep`: a
    /// task or a parked thread (mask `IN`; a thread in a kernel sleep and a task woken by a
    /// tokio reactor, mask `KEY_KSLEEP`, watch `kfd` themselves), or a poller. Must be
    /// called with `ready` held (invariant W), except for a harvest's requeue that gives up
    /// when nobody listens (`fds::requeue`: a waiter that registers after the look arms).
    pub(super) fn listened(ep: &EpInner) -> bool {
        ep.waiters.interest().contains(Events::IN) || !ep.pollers.wants_nothing()
    }
}
