//! The kernel side of an [`Epoll`](crate::Epoll): kernel-fd sources (a `BorrowedFd`, a
//! [`KernelNotifier`](crate::KernelNotifier)) — their kernel epoll, their registrations,
//! `add`/`modify`/`delete` of a kernel fd, and their harvest.
//!
//! # One more source on the ready list
//!
//! Kernel fds are registered in one kernel epoll per `Epoll` (`KernelPoll::kfd`), created by
//! the first kernel `add` that succeeds. It holds nothing else (no doorbell). The `Epoll`
//! sees it through its **kernel item**: an [`Item`] like any other, on the in-memory ready
//! list while `kfd` may have events, whose source is `kfd` ([`SourceCore::Kernel`]). It is
//! never hooked into a wait queue; it is queued
//!
//! - by a kernel `add`/`modify` that leaves `kfd` readable (the kernel polls the fd at
//!   `EPOLL_CTL_ADD`/`MOD`, as the in-memory `add` does),
//! - by a harvest that collected kernel events (level-triggered requeue: more may be ready),
//! - by the process-wide watcher (`super::watcher`) when `kfd` becomes readable while
//!   someone may wait: that is how every face hears of kernel readiness.
//!
//! Its wake is the ordinary item callback, so blocking waiters, tasks, fd views (whose
//! `any_live` counts it) and outer epolls (on `pollers`) are woken as for a notifier. The
//! harvest delivers its events where it meets it in the ready list: a non-blocking
//! `epoll_wait` on `kfd` into the remaining slots. A harvest that does not meet it still
//! collects once at its end, so a zero-timeout `wait` never misses a kernel event.
//!
//! # Invariant W (no lost wake)
//!
//! (A thread blocked in `wait` while kernel fds are registered sleeps in `poll(2)` on `kfd`
//! itself, registered with the mask `KEY_KSLEEP`: `super::kernel_sleep`. A task polled in a
//! tokio runtime watches `kfd` through the reactor, also with `KEY_KSLEEP`: below. Neither
//! needs this, and `listened` counts neither.)
//!
//! While a waiter with mask `IN` (a task, a parked thread) is registered in `waiters` or a
//! poller is hooked on `pollers`, and `kfd`
//! holds an undelivered event, the kernel item is linked (on the ready list or a running
//! scan's transfer list), or `kfd` is armed in the watcher, or the watcher is between
//! clearing `armed` and queueing the item.
//!
//! - A waiter registers (SeqCst, under its queue's lock), then looks at `linked` under
//!   `ready` and arms if it is clear ([`EpInner::ensure_watch`]).
//! - A scan that drops the kernel item (it delivered nothing) clears `linked` before its
//!   end, and at its end, under `ready`, reads `has_sleeper()` and `pollers`; if either is
//!   set, it arms. `ready` orders the two: one of them arms.
//! - A kernel `add` publishes the side (`has_kernel`, SeqCst) and then, under `ready`,
//!   reads the waiters; a waiter registers and then reads `has_kernel`: one sees the other.
//! - Arming is `epoll_ctl(MOD, IN | ONESHOT)` on the watcher's epoll, which polls `kfd`:
//!   readiness that predates the arm fires at once, later readiness through the kernel's
//!   callback. The watcher clears `armed` and then queues, so a concurrent waiter either
//!   sees the item linked or arms again (a redundant fire is harmless).
//!
//! The loom models `kernel_item_*` in `src/tests/loom_kernel_item.rs` check W. (Their
//! harvest, when the item is not linked, collects without requeueing it: the case of
//! `requeue_kernel_item` when nobody listens.)
//!
//! # Kernel readiness through the tokio reactor
//!
//! With feature `tokio`, an async wait (`super::future`) polled inside a tokio runtime
//! registers `kfd` with that runtime's reactor ([`KernelSide::reactor`]: a duplicate of
//! `kfd` in a `tokio::io::unix::AsyncFd`, one per epoll and runtime) and is woken by it, not
//! by the watcher. Its entry on `waiters` has the mask `KEY_KSLEEP`, so it arms nothing.
//! The no-lost-wake argument for it (W's counterpart, not modelled in loom, which cannot run
//! tokio): each try takes the reactor's readiness tick *before* its harvest and clears it
//! only if that harvest delivered nothing (so it collected from `kfd` with every slot free
//! and found it empty); then it waits in tokio's list of readiness waiters. Every later
//! kernel event is a wake of `kfd`, hence an edge in the reactor's edge-triggered epoll,
//! recorded with a new tick: before the clear (the clear's tick is stale: nothing is
//! cleared), or after it (the readiness is set again: the waiter's registration sees it or
//! is woken by it). docs/design.md has the whole design.
//!
//! # Registrations follow the kernel
//!
//! The kernel keys an item by (open file, fd number). Ours are keyed by a token that is the
//! kernel event's data (unique per registration), indexed by fd number. `add` is the
//! kernel's `EPOLL_CTL_ADD` with a new token, so `EEXIST` and a new file on a reused number
//! next to a stale item (its old file kept open elsewhere) are the kernel's decisions.
//! `modify`/`delete` use the number's *newest* token: a registration of (file, number) can
//! only be made while the number refers to that file, so if the number's current file is
//! registered at all, its registration is the newest under that number; if it is not, the
//! newest token is stale and the kernel answers `ENOENT` — its own answer. Tokens whose
//! file the kernel dropped (closed) are pruned from `/proc/self/fdinfo` by `len()` and by
//! an `add` on a number that has tokens.
//!
//! # LOCKING
//!
//! ```text
//! Registry::kfds     guarded by EpInner::registry (1).
//! EpInner::kernel    leaf Mutex<Option<Arc<KernelSide>>>: written with registry held (the
//!                    first kernel add, close), read anywhere (clone the Arc and go).
//! KernelPoll::armed  AtomicBool, see invariant W.
//! KernelSide::reactor leaf Mutex (feature tokio): the reactor registration of `kfd`. No
//!                    tokio code runs under it: a registration is made before it is taken,
//!                    and one it replaces is dropped after it is released.
//! ```
//! `epoll_ctl` and non-blocking `epoll_wait` on `kfd` run with `registry` held (they never
//! block). A `KernelNotifier`'s registration list is a leaf taken under `registry`.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Weak};

use super::item::Item;
use super::source::sealed::KernelRef;
use super::source::SourceCore;
use super::{EpInner, Registry};
use crate::events::{Event, Events};
use crate::loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use crate::notifier::kernel::{KernelDeliver, KernelFdSet};
use crate::sys;
#[cfg(feature = "tokio")]
use crate::tokio_fd::KernelReactor;
use crate::wait_queue::{PostWake, WakeBatch};

/// The kernel epoll of an `Epoll`: the source of its kernel item.
pub(crate) struct KernelPoll {
    pub(crate) id: u64,
    pub(crate) kfd: OwnedFd,
    /// Armed in the watcher and not fired yet (invariant W).
    armed: AtomicBool,
    /// Watched edge-triggered for good: set once a poller (an outer epoll's item, an fd
    /// view) watches this epoll, so that every wake of `kfd` reaches the pollers, as every
    /// wake of a nested kernel epoll reaches its outer ones.
    et: AtomicBool,
    /// Kernel fds registered (tokens in `Registry::kfds`). Written under `registry`.
    nfds: AtomicUsize,
}

impl KernelPoll {
    /// `IN` if some registered kernel fd is ready (a poll of `kfd`: consumes nothing, as
    /// polling a nested kernel epoll does not).
    pub(crate) fn readiness(&self) -> Events {
        match sys::poll_now(self.kfd.as_fd(), Events::IN) {
            Ok(e) if e.contains(Events::IN) => Events::IN,
            _ => Events::empty(),
        }
    }

    /// The watcher fired (or could not arm): clear `armed`; whether it was set.
    pub(crate) fn disarm(&self) -> bool {
        self.armed.swap(false, SeqCst)
    }

    /// Watched edge-triggered (never disarmed).
    pub(crate) fn is_et(&self) -> bool {
        self.et.load(SeqCst)
    }

    pub(crate) fn has_fds(&self) -> bool {
        self.nfds.load(SeqCst) > 0
    }
}

impl Drop for KernelPoll {
    fn drop(&mut self) {
        super::watcher::forget(
            self.id,
            usize::from(self.armed.load(SeqCst)) + usize::from(self.et.load(SeqCst)),
        );
    }
}

/// The kernel epoll and the kernel item.
pub(crate) struct KernelSide {
    pub(crate) poll: Arc<KernelPoll>,
    pub(crate) item: Arc<Item>,
    /// The kernel epoll in one tokio runtime's reactor (see "Kernel readiness through the
    /// tokio reactor"): the runtime it was tried for, and the registration, `None` if it
    /// could not be made there (no I/O driver). Leaf lock; tokio is never called under it.
    #[cfg(feature = "tokio")]
    reactor: crate::loom::sync::Mutex<Option<(tokio::runtime::Id, Option<Arc<KernelReactor>>)>>,
}

#[cfg(feature = "tokio")]
impl KernelSide {
    /// This kernel epoll in the reactor of runtime `rt` (the current one), registered by
    /// the first call from that runtime (one `dup` and one `epoll_ctl`); `None` if it
    /// cannot be (the caller falls back to the watcher). One registration is kept, for
    /// the runtime that asked last: waits in other runtimes hold their own `Arc`.
    pub(crate) fn reactor(&self, rt: tokio::runtime::Id) -> Option<Arc<KernelReactor>> {
        if let Some((id, r)) = &*crate::loom::lock(&self.reactor) {
            if *id == rt {
                return r.clone();
            }
        }
        // Registered with no lock held (tokio code).
        let made = KernelReactor::new(self.poll.kfd.as_fd(), rt).map(Arc::new);
        let old = {
            let mut slot = crate::loom::lock(&self.reactor);
            match &*slot {
                // Another wait of this runtime was quicker: use its registration.
                Some((id, r)) if *id == rt => return r.clone(),
                _ => slot.replace((rt, made.clone())),
            }
        };
        // An older runtime's registration goes (tokio code) after the unlock.
        drop(old);
        made
    }

    /// `r` failed (its runtime shut down): forget it, so that the next wait of a live
    /// runtime registers again. Drops it after the unlock.
    pub(crate) fn forget_reactor(&self, r: &Arc<KernelReactor>) {
        let old = {
            let mut slot = crate::loom::lock(&self.reactor);
            match &*slot {
                Some((_, Some(cur))) if Arc::ptr_eq(cur, r) => slot.take(),
                _ => None,
            }
        };
        drop(old);
    }

    /// Take the reactor registration out, to be dropped by the caller once it holds no
    /// lock (`close`).
    pub(crate) fn take_reactor(&self) -> Option<Arc<KernelReactor>> {
        crate::loom::lock(&self.reactor).take().and_then(|(_, r)| r)
    }
}

/// A closed epoll's kernel side, dropped by `close` after it released `registry`: its
/// reactor registration (feature `tokio`) is taken out and dropped then, whoever else still
/// holds the side, because dropping it runs tokio code (the deregistration).
pub(crate) struct KernelLeft(
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))] Option<Arc<KernelSide>>,
);

impl Drop for KernelLeft {
    fn drop(&mut self) {
        #[cfg(feature = "tokio")]
        if let Some(side) = &self.0 {
            drop(side.take_reactor());
        }
    }
}

/// A registered kernel fd.
struct KItem {
    num: RawFd,
    data: u64,
    /// An AutoReset owner's reset (a `KernelNotifier`'s eventfd read): the delivery of
    /// `IN` runs it, and delivers `IN` only if it got something.
    reset: Option<Weak<dyn KernelDeliver>>,
}

/// The kernel fds of one epoll. Guarded by `EpInner::registry`.
#[derive(Default)]
pub(crate) struct KernelFds {
    items: HashMap<u64, KItem>,
    by_num: HashMap<RawFd, Vec<u64>>,
}

impl KernelFds {
    fn insert(&mut self, token: u64, item: KItem) {
        self.by_num.entry(item.num).or_default().push(token);
        self.items.insert(token, item);
    }

    fn remove(&mut self, token: u64) -> Option<KItem> {
        let item = self.items.remove(&token)?;
        if let Some(v) = self.by_num.get_mut(&item.num) {
            v.retain(|&t| t != token);
            if v.is_empty() {
                self.by_num.remove(&item.num);
            }
        }
        Some(item)
    }

    /// The registration `modify`/`delete` of `num` refer to (module docs): the newest.
    fn newest(&self, num: RawFd) -> Option<u64> {
        self.by_num.get(&num).and_then(|v| v.last().copied())
    }

    pub(super) fn len(&self) -> usize {
        self.items.len()
    }
}

/// The deferred arm after a scan dropped the kernel item while someone waits.
struct ArmWatch(Arc<EpInner>);

impl PostWake for ArmWatch {
    fn post_wake(&self, _key: Events) {
        self.0.ensure_watch();
    }
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

impl EpInner {
    /// The kernel side, if a kernel fd was ever added.
    pub(crate) fn kernel_side(&self) -> Option<Arc<KernelSide>> {
        if !self.has_kernel.load(SeqCst) {
            return None;
        }
        crate::loom::lock(&self.kernel).clone()
    }

    fn new_side(self: &Arc<Self>) -> io::Result<KernelSide> {
        let poll = Arc::new(KernelPoll {
            id: crate::events::next_id(),
            kfd: sys::epoll::create()?,
            armed: AtomicBool::new(false),
            et: AtomicBool::new(false),
            nfds: AtomicUsize::new(0),
        });
        let item = Arc::new_cyclic(|me| Item {
            me: me.clone(),
            ep: Arc::clone(self),
            src: SourceCore::Kernel(Arc::clone(&poll)),
            events: AtomicU32::new(Events::IN.bits()),
            data: AtomicU64::new(0),
            linked: AtomicBool::new(false),
            ovf: AtomicBool::new(false),
            dead: AtomicBool::new(false),
        });
        Ok(KernelSide {
            poll,
            item,
            #[cfg(feature = "tokio")]
            reactor: crate::loom::sync::Mutex::new(None),
        })
    }

    /// Someone may wait (a waiter that just registered, a new poller): make sure the kernel
    /// item is queued or `kfd` armed (invariant W). Costs nothing without kernel fds; one
    /// `epoll_ctl` when it arms.
    pub(crate) fn ensure_watch(&self) {
        crate::loom::dekker_fence();
        let Some(side) = self.kernel_side() else {
            return;
        };
        if !side.poll.has_fds() {
            return;
        }
        self.watch(&side);
    }

    /// Watch `side` for whoever listens: edge-triggered for good once a poller exists,
    /// else armed once unless the kernel item is linked (invariant W).
    fn watch(&self, side: &KernelSide) {
        if !self.pollers.interest().is_empty() {
            if !side.poll.et.swap(true, SeqCst) {
                super::watcher::arm(side.poll.id, &side.poll.kfd, &side.item, true);
            }
            return;
        }
        if side.poll.is_et() {
            return;
        }
        let linked = {
            let _rd = crate::loom::lock(&self.ready);
            side.item.is_linked()
        };
        if !linked && !side.poll.armed.swap(true, SeqCst) {
            super::watcher::arm(side.poll.id, &side.poll.kfd, &side.item, false);
        }
    }

    /// Whether a waiter or a poller that relies on the watcher may be waiting for this
    /// epoll: a task or a parked thread (mask `IN`; a thread in a kernel sleep and a task
    /// woken by a tokio reactor, mask `KEY_KSLEEP`, watch `kfd` themselves), or a poller.
    /// Must be called with `ready` held (invariant W).
    fn listened(&self) -> bool {
        self.waiters.interest().contains(Events::IN) || !self.pollers.interest().is_empty()
    }

    /// After the kernel changed what `kfd` holds (an add or a modify, which poll the fd):
    /// queue the kernel item if `kfd` is readable, else arm if someone waits.
    fn kernel_changed(&self, side: &KernelSide, batch: &mut WakeBatch) {
        if !side.poll.readiness().is_empty() {
            self.queue_if_ready(&side.item, Events::IN, batch);
            return;
        }
        let listened = {
            let _rd = crate::loom::lock(&self.ready);
            self.listened()
        };
        if listened {
            self.watch(side);
        }
    }

    /// A scan dropped the kernel item (it delivered nothing): if someone waits, the watcher
    /// must take over (invariant W). Must be called with `ready` held, at the scan's end.
    pub(super) fn kernel_dropped(self: &Arc<Self>, batch: &mut WakeBatch) {
        if self.listened() {
            batch.push_post(
                Arc::new(ArmWatch(Arc::clone(self))) as Arc<dyn PostWake>,
                Events::empty(),
            );
        }
    }

    /// `add` of a kernel fd: the kernel's `EPOLL_CTL_ADD` on the kernel epoll, which is
    /// created by the first one that succeeds (a failed `add` leaves nothing behind).
    pub(super) fn kernel_add(
        self: &Arc<Self>,
        k: KernelRef<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        self.kernel_ctl(|reg, batch| {
            let (side, created) = match self.kernel_side() {
                Some(s) => (s, false),
                None => {
                    sys::epoll::check_open(k.fd)?;
                    (Arc::new(self.new_side()?), true)
                }
            };
            let token = crate::events::next_id();
            sys::epoll::add(side.poll.kfd.as_fd(), k.fd, events, token)?;
            if created {
                *crate::loom::lock(&self.kernel) = Some(Arc::clone(&side));
                // Published before `kernel_changed` looks at the waiters (invariant W).
                self.has_kernel.store(true, SeqCst);
            }
            let num = k.fd.as_raw_fd();
            let reused = reg.kfds.by_num.contains_key(&num);
            reg.kfds.insert(
                token,
                KItem {
                    num,
                    data,
                    reset: if k.autoreset {
                        k.owner.map(|o| o.reset())
                    } else {
                        None
                    },
                },
            );
            if let Some(o) = k.owner {
                o.record(Arc::downgrade(self) as Weak<dyn KernelFdSet>, token);
            }
            if reused {
                self.prune_kernel(reg, &side);
            }
            side.poll.nfds.store(reg.kfds.len(), SeqCst);
            self.kernel_changed(&side, batch);
            Ok(())
        })?;
        self.mark_kernel_below();
        Ok(())
    }

    /// A kernel `add`/`modify`: `f` with `registry` taken and dead items purged; the wakes
    /// it defers run after `registry` is released.
    fn kernel_ctl(
        &self,
        f: impl FnOnce(&mut Registry, &mut WakeBatch) -> io::Result<()>,
    ) -> io::Result<()> {
        let mut batch = WakeBatch::new();
        let r = {
            let mut reg = crate::loom::lock(&self.registry);
            self.purge(&mut reg);
            f(&mut reg, &mut batch)
        };
        batch.run();
        r
    }

    /// This epoll holds a kernel fd, or nests one that does: tell the outer epolls.
    pub(crate) fn mark_kernel_below(&self) {
        if self.kernel_below.swap(true, SeqCst) {
            return;
        }
        let parents: Vec<Arc<EpInner>> = crate::loom::lock(&self.links)
            .parents
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        for p in parents {
            p.mark_kernel_below();
        }
    }

    /// The harvest's look at nested epolls with kernel fds below: queue the level-triggered
    /// (or armed one-shot) item of each one that is ready now. The watcher propagates their
    /// kernel readiness asynchronously; this makes a harvest of the outer epoll see it at
    /// once, as the kernel's synchronous wake would. (Edge-triggered outer items rely on
    /// the watcher alone: "a wake happened" is not something a poll can tell.) Must be
    /// called with `registry` held; costs one load without kernel fds below.
    pub(super) fn queue_nested_kernel(&self, reg: &mut Registry, batch: &mut WakeBatch) {
        if !self.kernel_below.load(SeqCst) || reg.nested.is_empty() {
            return;
        }
        reg.nested.retain(|i| !i.is_dead());
        for item in &reg.nested {
            let ev = item.events();
            let below = item
                .src
                .as_epoll()
                .is_some_and(|c| c.kernel_below.load(SeqCst));
            if below && !ev.contains(Events::ET) && !item.is_linked() {
                self.queue_if_ready(item, ev, batch);
            }
        }
    }

    /// `modify` of a kernel fd (`EPOLL_CTL_MOD`), on the number's current registration.
    pub(super) fn kernel_modify(
        self: &Arc<Self>,
        k: KernelRef<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        self.kernel_ctl(|reg, batch| {
            let Some(side) = self.kernel_side() else {
                return Err(probe(k.fd, |ep| sys::epoll::modify(ep, k.fd, events, 0)));
            };
            let kfd = side.poll.kfd.as_fd();
            let Some(token) = reg.kfds.newest(k.fd.as_raw_fd()) else {
                // Not ours: the kernel says why (EBADF, EPERM, EINVAL, ENOENT); it cannot
                // succeed, since every item of `kfd` has a token.
                return Err(probe(k.fd, |ep| sys::epoll::modify(ep, k.fd, events, 0)));
            };
            sys::epoll::modify(kfd, k.fd, events, token)?;
            if let Some(i) = reg.kfds.items.get_mut(&token) {
                i.data = data;
            }
            self.kernel_changed(&side, batch);
            Ok(())
        })
    }

    /// `delete` of a kernel fd (`EPOLL_CTL_DEL`), of the number's current registration.
    pub(super) fn kernel_delete(&self, k: KernelRef<'_>) -> io::Result<()> {
        let mut reg = crate::loom::lock(&self.registry);
        self.purge(&mut reg);
        let side = self.kernel_side();
        let token = reg.kfds.newest(k.fd.as_raw_fd());
        let (Some(side), Some(token)) = (side, token) else {
            return Err(probe(k.fd, |ep| sys::epoll::delete(ep, k.fd)));
        };
        sys::epoll::delete(side.poll.kfd.as_fd(), k.fd)?;
        reg.kfds.remove(token);
        side.poll.nfds.store(reg.kfds.len(), SeqCst);
        if let Some(o) = k.owner {
            o.forget(token);
        }
        Ok(())
    }

    /// Drop tokens whose file the kernel no longer holds (closed). Must be called with
    /// `registry` held.
    fn prune_kernel(&self, reg: &mut Registry, side: &KernelSide) {
        let Ok(live) = sys::epoll::fdinfo_data(side.poll.kfd.as_fd()) else {
            return;
        };
        let dead: Vec<u64> = reg
            .kfds
            .items
            .keys()
            .copied()
            .filter(|t| !live.contains(t))
            .collect();
        for t in dead {
            reg.kfds.remove(t);
        }
        side.poll.nfds.store(reg.kfds.len(), SeqCst);
    }

    /// Kernel fds the kernel still holds (for `len()`), pruning the others. Must be called
    /// with `registry` held.
    pub(super) fn kernel_len(&self, reg: &mut Registry) -> usize {
        match self.kernel_side() {
            Some(side) if reg.kfds.len() > 0 => {
                self.prune_kernel(reg, &side);
                reg.kfds.len()
            }
            _ => 0,
        }
    }

    /// Collect kernel events into `out` (never blocks): a non-blocking `epoll_wait` on
    /// `kfd`, mapped through the tokens. An AutoReset `KernelNotifier` is delivered `IN`
    /// only if the read that resets it got the count (so each write is delivered at most
    /// once, whoever else consumes it). Must be called with `registry` held.
    pub(super) fn kernel_collect(
        &self,
        reg: &Registry,
        side: &KernelSide,
        out: &mut [Event],
    ) -> usize {
        if out.is_empty() || !side.poll.has_fds() {
            return 0;
        }
        let mut got = Vec::new();
        // An error (EBADF/EFAULT class, not possible on our own epoll) reports nothing
        // rather than losing the in-memory events already harvested.
        if sys::epoll::wait(
            side.poll.kfd.as_fd(),
            &mut got,
            out.len(),
            Some(std::time::Instant::now()),
        )
        .is_err()
        {
            return 0;
        }
        let mut n = 0;
        for (mut ev, token) in got {
            let Some(item) = reg.kfds.items.get(&token) else {
                continue;
            };
            if let (Some(r), true) = (&item.reset, ev.contains(Events::IN)) {
                // The owner is alive while it is registered (its `Drop` takes `registry`,
                // held here, before it goes).
                let reset = r.upgrade().is_some_and(|r| r.deliver_in());
                if !reset {
                    ev.remove(Events::IN);
                    if ev.is_empty() {
                        continue;
                    }
                }
            }
            out[n] = Event {
                events: ev,
                data: item.data,
            };
            n += 1;
        }
        n
    }

    /// The kernel item after a harvest that did not meet it collected `k` events at its end:
    /// queue it (level-triggered: more may be ready), waking as a callback would — if
    /// someone relies on it ([`listened`](Self::listened)). Waiters that watch `kfd`
    /// themselves (threads in a kernel sleep, tasks through a reactor) do not: `kfd` stays
    /// readable while it holds events (a kernel sleep returns at once), a reactor's
    /// readiness is cleared only by a harvest that found `kfd` empty, and every harvest
    /// collects from `kfd` at its end whether or not the item is queued. Skipping it then
    /// spares the harvester a wake of its own entry (and the next harvest a lap of the list).
    pub(super) fn requeue_kernel_item(&self, side: &KernelSide, batch: &mut WakeBatch) {
        let post = {
            let mut rd = crate::loom::lock(&self.ready);
            // Under `ready`: a waiter or poller that registers later arms (invariant W).
            if !self.listened() {
                return;
            }
            rd.queue(&side.item, &self.ready_hint)
                && (self.has_sleeper() || !self.pollers.interest().is_empty())
        };
        if post {
            batch.push_post(Arc::clone(&side.item.ep) as Arc<dyn PostWake>, Events::IN);
        }
    }

    /// `close`: forget the kernel side (its kernel epoll closes with the last reference).
    /// Returns it, for the caller to drop once `registry` is released (see [`KernelLeft`]).
    pub(super) fn kernel_close(&self, reg: &mut Registry) -> KernelLeft {
        reg.kfds = KernelFds::default();
        self.has_kernel.store(false, SeqCst);
        let side = crate::loom::lock(&self.kernel).take();
        if let Some(side) = &side {
            side.item.dead.store(true, SeqCst);
        }
        KernelLeft(side)
    }
}

/// The kernel's answer for an fd an epoll does not hold: the same `epoll_ctl` on a
/// temporary empty kernel epoll (closed at once), so that a failed call returns exactly the
/// kernel's errno — `EBADF`, `EPERM`, `EINVAL`, else `ENOENT` — and leaves nothing behind.
fn probe(fd: BorrowedFd<'_>, op: impl FnOnce(BorrowedFd<'_>) -> io::Result<()>) -> io::Error {
    if let Err(e) = sys::epoll::check_open(fd) {
        return e;
    }
    match sys::epoll::create() {
        Ok(tmp) => match op(tmp.as_fd()) {
            Err(e) => e,
            Ok(()) => errno(rustix::io::Errno::NOENT),
        },
        Err(e) => e,
    }
}

/// A `KernelNotifier` was dropped: remove its registration `token` while its fd is open.
impl KernelFdSet for EpInner {
    fn forget_kernel_fd(&self, token: u64, fd: BorrowedFd<'_>) {
        if self.forked() {
            // A child's copy of a parent's epoll (`sys::fork`): its kernel epoll is shared
            // with the parent, whose registration a DEL here would remove; and its lock may
            // have been held at the fork. Leave both alone.
            return;
        }
        let mut reg = crate::loom::lock(&self.registry);
        if reg.kfds.remove(token).is_none() {
            return;
        }
        if let Some(side) = self.kernel_side() {
            // The fd is still open and registered under this number: DEL finds it.
            let _ = sys::epoll::delete(side.poll.kfd.as_fd(), fd);
            side.poll.nfds.store(reg.kfds.len(), SeqCst);
        }
    }
}
