//! The harvest: `ep_send_events` (deliver queued events into a buffer) and
//! `__ep_eventpoll_poll` (is any queued item ready? consume nothing), as two jobs over one
//! scan frame (`ep_start_scan` … `ep_done_scan`).
//!
//! # LOCKING
//!
//! Both jobs run with `EpInner::registry` held (which serialises harvests and ctl
//! operations) and take `EpInner::ready` only to start and to end the scan; sources are
//! polled between the two, with no `ready` held. Deferred wakes go into a `WakeBatch` that
//! runs after `registry` is released (see `super`'s LOCKING block).

use std::cell::RefCell;
use std::sync::Arc;

use super::item::Item;
use super::ready::Tx;
use super::source::SourceCore;
use super::{EpInner, Registry};
use crate::events::{Event, Events, KEY_EMPTIED};
use crate::loom::sync::atomic::Ordering::{Relaxed, SeqCst};
use crate::wait_queue::spin::SpinGauge;
use crate::wait_queue::{PostWake, WaitFor, WakeBatch};

/// The LT cascade's deferred wake: one more `wait`er.
struct WakeOneWaiter(Arc<EpInner>);

impl PostWake for WakeOneWaiter {
    fn post_wake(&self, _key: Events) {
        self.0.wake_one_waiter();
    }
}

/// fd views' wake (`crate::fd`): nothing is ready any more. Only views listen for
/// `KEY_EMPTIED` on `pollers`; outer epolls' items never see it.
struct WakeViews(Arc<EpInner>);

impl PostWake for WakeViews {
    fn post_wake(&self, key: Events) {
        self.0.pollers.wake(key, usize::MAX);
    }
}

/// What a job found: how many events it reported, and whether it met and dropped the
/// kernel item (nothing ready in the kernel epoll).
struct Found {
    n: usize,
    kernel_dropped: bool,
}

/// `ep_send_events`' loop: deliver up to `out.len()` events from the transfer list.
/// Level-triggered items stay queued (requeued in place, [`Tx::requeue_run`]); what is
/// not looked at is left in `tx`. `collect` delivers the kernel item's events
/// (`kernel::Collector`) into the slots left.
///
/// The loop is split for the common case: a level-triggered in-memory notifier found
/// ready ([`lt_ready`]) is delivered inline, and a run of them is looked at in place and
/// requeued where it lies; every other item goes through [`send_one`], out of line, which
/// gives each kind its rules. Events and requeued items keep the list's order.
fn send_events(
    tx: &mut Tx,
    out: &mut [Event],
    batch: &mut WakeBatch,
    collect: &mut dyn FnMut(&mut [Event]) -> usize,
) -> Found {
    let mut n = 0;
    let mut kernel_dropped = false;
    if !out.is_empty() {
        if let Some(item) = tx.one.take() {
            let r = lt_ready(&item);
            let requeue = if r.is_empty() {
                let s = send_one(&item, &mut out[n..], batch, collect);
                n += s.n;
                kernel_dropped |= s.kernel_dropped;
                s.requeue
            } else {
                out[n] = Event {
                    events: r,
                    data: item.data.load(Relaxed),
                };
                n += 1;
                true
            };
            if requeue {
                tx.one_back = Some(item);
            }
        }
    }
    while n < out.len() {
        // A run of items the inline path delivers, looked at and requeued in place; the
        // item that ends it takes the general path.
        let mut run = 0;
        for (slot, item) in out[n..].iter_mut().zip(tx.rest()) {
            let r = lt_ready(item);
            if r.is_empty() {
                break;
            }
            *slot = Event {
                events: r,
                data: item.data.load(Relaxed),
            };
            run += 1;
        }
        if run > 0 {
            n += run;
            tx.requeue_run(run);
        }
        if n >= out.len() {
            break;
        }
        let Some(item) = tx.rest().first() else { break };
        let s = send_one(item, &mut out[n..], batch, collect);
        n += s.n;
        kernel_dropped |= s.kernel_dropped;
        if s.requeue {
            tx.requeue_run(1);
        } else {
            tx.skip();
        }
    }
    Found { n, kernel_dropped }
}

/// What `EpInner::harvest_single` did.
enum Single {
    /// One event delivered, the item left queued; `cascade`: wake the next sleeper too;
    /// `owed`: an AutoReset notifier whose reset owes a wake to its queue (blocked writers,
    /// fd views), to run with no lock held.
    Delivered {
        cascade: bool,
        owed: Option<Arc<crate::notifier::Inner>>,
    },
    /// The item was not ready and left the ready list (its reference kept for its next
    /// queue); the reference kept before, if any, is to be dropped with no lock held.
    Dropped(Option<Arc<Item>>),
    /// Not a hand-off's shape: the general harvest decides.
    General,
}

/// What [`send_one`] did with an item.
struct Sent {
    /// Events delivered (into the front of the slots it was given).
    n: usize,
    /// The kernel item was met and dropped.
    kernel_dropped: bool,
    /// The item stays queued (level-triggered): put it back on the ready list.
    requeue: bool,
}

/// The harvest's fast look at a transfer-list item: the events to report if it is a live,
/// level-triggered (no `ET`, no `ONESHOT`), in-memory notifier that is not AutoReset and
/// whose count is neither 0 nor at or past `LIMIT` — readiness `IN | OUT` masked by the
/// interest, exactly what [`poll_to_unlink`] would report, with nothing to consume, no
/// settled mark to clear and the item staying queued. Empty for anything else: the caller
/// then takes the general path ([`send_one`]).
#[inline(always)]
fn lt_ready(item: &Item) -> Events {
    let Some((nf, ev)) = item.lt_notifier() else {
        return Events::empty();
    };
    lt_readiness(nf.count.load(SeqCst), ev)
}

/// [`lt_ready`]'s answer for a count and an interest: `IN | OUT` masked by the interest if
/// the count is in `1 ..= LIMIT - 1` (where `mode::readiness` is `IN | OUT`), else empty.
#[inline(always)]
fn lt_readiness(count: u64, ev: Events) -> Events {
    if count.wrapping_sub(1) >= crate::LIMIT - 1 {
        return Events::empty();
    }
    ev & (Events::IN | Events::OUT)
}

// The notifier this thread's last one-item harvest delivered from a quiet item
// (`Ready::quiet`): what `EpInner::nothing_new` may look at without the lock.
#[cfg(not(evfd_loom))]
thread_local! {
    static LAST: RefCell<Option<Arc<crate::notifier::Inner>>> = const { RefCell::new(None) };
}
#[cfg(evfd_loom)]
loom::thread_local! {
    static LAST: RefCell<Option<Arc<crate::notifier::Inner>>> = RefCell::new(None);
}

/// Keep `nf` as this thread's [`LAST`] (a new reference only when it changes; the one
/// it replaces is dropped after the borrow). Called with `ready` held: dropping a
/// notifier's last reference runs no foreign code.
#[inline]
fn remember(nf: &Arc<crate::notifier::Inner>) {
    let _ = LAST.try_with(|l| {
        if !l.borrow().as_ref().is_some_and(|o| o.id == nf.id) {
            l.replace(Some(Arc::clone(nf)));
        }
    });
}

/// One transfer-list item, by its kind's rules (`send_events`' general path), into the
/// slots `out` (at least one).
#[inline(never)]
fn send_one(
    item: &Item,
    out: &mut [Event],
    batch: &mut WakeBatch,
    collect: &mut dyn FnMut(&mut [Event]) -> usize,
) -> Sent {
    let mut s = Sent {
        n: 0,
        kernel_dropped: false,
        requeue: false,
    };
    // The harvester owns `linked` of transfer-list items (see Item::linked):
    // it stays set only for a level-triggered item requeued below.
    if item.is_dead() {
        item.set_linked(false);
        return s;
    }
    if let SourceCore::Kernel(_) = item.src {
        // The kernel epoll, delivered here in its turn; level-triggered while it
        // delivers (the kernel re-checks its own items at the next harvest).
        let k = collect(out);
        if k == 0 {
            item.set_linked(false);
            s.kernel_dropped = true;
        } else {
            s.n = k;
            s.requeue = true;
        }
        return s;
    }
    let ev = item.events();
    let r = poll_to_unlink(item, ev, true, batch);
    if r.is_empty() {
        // Not ready (or a disarmed ONESHOT): dropped, no slot used.
        item.set_linked(false);
        return s;
    }
    out[0] = Event {
        events: r,
        data: item.data.load(Relaxed),
    };
    s.n = 1;
    if !ev.intersects(Events::ONESHOT | Events::ET) {
        s.requeue = true;
    } else {
        item.set_linked(false);
        if ev.contains(Events::ONESHOT) {
            item.set_events(ev & Events::PRIVATE);
        }
    }
    s
}

/// Poll a transfer-list item that the harvest will unlink if it is not ready (level-
/// triggered, `ev` without `ET`/`ONESHOT`) or whatever it finds (edge-triggered, one-shot),
/// clearing the source's settled mark (`wait_queue`, "Settled") before the poll that
/// decides an unlink: a write that skipped its wake because the item was queued wrote its
/// count before that clear, so the poll sees it. A level-triggered item found ready stays
/// queued, so its source stays settled: a producer that keeps it ready never takes the
/// source's lock, however often the consumer harvests. Returns the events to report.
#[inline(always)]
fn poll_to_unlink(item: &Item, ev: Events, deliver: bool, batch: &mut WakeBatch) -> Events {
    let edge = ev.intersects(Events::ONESHOT | Events::ET);
    if edge {
        item.src.unsettle();
    }
    let r = item.src.poll(ev, deliver, batch) & ev & !Events::PRIVATE;
    if !r.is_empty() || edge {
        return r;
    }
    poll_again(item, ev, deliver, batch)
}

/// `poll_to_unlink`'s level-triggered item found empty: clear, look again.
#[cold]
#[inline(never)]
fn poll_again(item: &Item, ev: Events, deliver: bool, batch: &mut WakeBatch) -> Events {
    item.src.unsettle();
    item.src.poll(ev, deliver, batch) & ev & !Events::PRIVATE
}

/// `__ep_eventpoll_poll`'s loop: stop at the first ready item and leave it where it is,
/// at the head of the leftovers (consume nothing); the not-ready ones before it are
/// dropped from the list.
fn first_ready(tx: &mut Tx, batch: &mut WakeBatch) -> Found {
    // A level-triggered look: a ready item stays queued, only a dropped one is unlinked.
    let ready = |item: &Item, batch: &mut WakeBatch| {
        let ev = item.events();
        !item.is_dead()
            && !poll_to_unlink(item, ev & !Events::ONESHOT & !Events::ET, false, batch).is_empty()
    };
    let mut kernel_dropped = false;
    if let Some(item) = tx.one.take() {
        if ready(&item, batch) {
            tx.one = Some(item);
            return Found {
                n: 1,
                kernel_dropped,
            };
        }
        kernel_dropped |= matches!(item.src, SourceCore::Kernel(_));
        item.set_linked(false);
    }
    while let Some(item) = tx.rest().first() {
        if ready(item, batch) {
            return Found {
                n: 1,
                kernel_dropped,
            };
        }
        kernel_dropped |= matches!(item.src, SourceCore::Kernel(_));
        item.set_linked(false);
        tx.skip();
    }
    Found {
        n: 0,
        kernel_dropped,
    }
}

/// A harvest as a wait ([`WaitFor`]): `Epoll::wait`'s operation (in `EpollSleeper`) and
/// the async wait's (`wait_async`, the stream). The entry waits on `waiters` for `IN`,
/// exclusive.
pub(crate) struct Harvest<'a> {
    pub(crate) ep: &'a Arc<EpInner>,
    pub(crate) out: &'a mut [Event],
}

impl WaitFor for Harvest<'_> {
    type Output = usize;

    /// A harvest; one that finds nothing makes sure kernel readiness will wake the waiter
    /// (`kernel`, invariant W: the async wait calls this again after registering).
    fn try_now(&mut self) -> Option<usize> {
        let n = self.ep.harvest_or_watch(self.out);
        (n > 0).then_some(n)
    }

    fn hand_on(&mut self) {
        self.ep.hand_on();
    }

    fn probe(&self) -> bool {
        self.ep.ready.hint() && !self.ep.nothing_new()
    }

    fn spin_gauge(&self) -> Option<&SpinGauge> {
        Some(&self.ep.spin_gauge)
    }
}

impl EpInner {
    /// A waiter (a thread or a task) that a wake claimed leaves owing it (the hand-on rule
    /// of `WaitFor`): wake the next waiter if events are still queued.
    pub(crate) fn hand_on(&self) {
        if self.has_ready() {
            self.waiters.wake(super::WAITER_KEY, 1);
        }
    }

    /// Run `f` with `registry` taken, dead items purged and nested kernel readiness looked
    /// at (`kernel`); its deferred wakes run before returning, with no lock held.
    fn with_registry<R>(&self, f: impl FnOnce(&mut Registry, &mut WakeBatch) -> R) -> R {
        let mut batch = WakeBatch::new();
        let r = self.with_registry_into(&mut batch, f);
        batch.run();
        r
    }

    /// As `with_registry`, with the deferred wakes put into `batch` (the caller holds an
    /// outer epoll's registry and runs them once it has released it).
    fn with_registry_into<R>(
        &self,
        batch: &mut WakeBatch,
        f: impl FnOnce(&mut Registry, &mut WakeBatch) -> R,
    ) -> R {
        let mut reg = crate::loom::lock(&self.registry);
        self.purge(&mut reg);
        self.kernel.queue_nested(self, &mut reg.kernel, batch);
        f(&mut reg, batch)
    }

    /// One harvest; its deferred wakes run before returning, with no lock held. Kernel
    /// events are delivered where the kernel item sits in the ready list, or, if it is not
    /// queued, after the in-memory ones (so no kernel event is missed by a harvest).
    pub(crate) fn harvest_now(self: &Arc<Self>, out: &mut [Event]) -> usize {
        if !self.kernel.present()
            && !self.kernel.below()
            && !self.graveyard.pending()
            && !out.is_empty()
        {
            match self.harvest_single(out) {
                Single::Delivered { cascade, owed } => {
                    if let Some(nf) = owed {
                        nf.wake_after_consume(0);
                    }
                    if cascade {
                        self.wake_one_waiter();
                    }
                    return 1;
                }
                Single::Dropped(item) => {
                    drop(item);
                    return 0;
                }
                Single::General => {}
            }
        }
        self.harvest_drained(out).0
    }

    /// A hand-off's harvest, in one `ready` critical section and without `registry` (no
    /// scan, no transfer list): the ready list holds one live, level-triggered, in-memory
    /// notifier — a Counter or Semaphore one (`Item::lt_notifier`), or an AutoReset one
    /// watched for `IN` alone (`Item::lt_autoreset`) — and nobody polls this epoll (no
    /// outer epoll, no fd view: their wakes are the general path's). Found ready
    /// (`lt_ready`; for AutoReset, the reset that is its delivery), its event is
    /// delivered and it stays where it is — what the general path's requeue of a one-item
    /// list leaves; found at 0 with an interest of `IN` alone, it is dropped as
    /// `poll_to_unlink` drops it (the settled mark cleared and the source polled with
    /// `scanning` published: `ReadyGuard::unlink_single_unless`). Anything else is left to
    /// the general path.
    ///
    /// `ready` is enough: a general harvest holds the item on its transfer list (`single`
    /// sees `ovf_active` and declines), `delete` and a source's close take the item off the
    /// ready list under `ready`, and `modify` writes the item's mask and data under `ready`
    /// too, so the pair read here is one `modify`'s. Nothing is purged here: the caller
    /// comes only while the graveyard is empty. `out` is non-empty; no kernel side.
    #[inline]
    fn harvest_single(self: &Arc<Self>, out: &mut [Event]) -> Single {
        let mut rd = self.ready.lock();
        let Some(item) = rd.single() else {
            return Single::General;
        };
        let (nf, ev, reset) = if let Some((nf, ev)) = item.lt_notifier() {
            (nf, ev, false)
        } else if let Some(nf) = item.lt_autoreset() {
            (nf, item.events(), true)
        } else {
            return Single::General;
        };
        if !self.pollers.wants_nothing() {
            return Single::General;
        }
        // `lt_ready`, with the checks of `lt_notifier` made once, and the count loaded once.
        let count = nf.count.load(SeqCst);
        let r = if !reset {
            lt_readiness(count, ev)
        } else if count == 0 {
            Events::empty()
        } else {
            // AutoReset: the delivery is the reset (`Inner::reset`, `deliver_into`'s),
            // made under `ready` as the general path makes it under `registry`; the item
            // stays queued as there. Its wake is owed, below.
            nf.reset()
                .map_or(Events::empty(), |r| r & ev & !Events::PRIVATE)
        };
        if !r.is_empty() {
            out[0] = Event {
                events: r,
                data: item.data.load(Relaxed),
            };
            // The reset's wake (`wake_after_consume`): the queue's interest is looked at
            // after the swap (both SeqCst: the Dekker pair with a writer that registers,
            // then looks at the count), and the wake itself runs after `ready` is
            // released (it takes the notifier's queue lock, which nests outside `ready`).
            let owed = reset && {
                crate::loom::dekker_fence();
                nf.wq.interest().intersects(Events::OUT | KEY_EMPTIED)
            };
            let owed = owed.then(|| Arc::clone(nf));
            if self.ready.quiet() == nf.id {
                remember(nf);
            }
            // The LT cascade (`scan`): the item stays queued, so the next sleeper looks too.
            return Single::Delivered {
                cascade: self.has_sleeper(),
                owed,
            };
        }
        if ev & (Events::IN | Events::OUT) != Events::IN || (!reset && count != 0) {
            return Single::General;
        }
        match rd.unlink_single_unless(|it| {
            it.src.unsettle();
            !it.src
                .notifier()
                .is_some_and(|nf| nf.count.load(SeqCst) == 0)
        }) {
            Ok(spare) => Single::Dropped(spare),
            Err(()) => Single::General,
        }
    }

    /// The look of a thread about to wait, and of its spin: nothing but the drop of a
    /// quiet item would come of a harvest now. True when the ready list's only item (the
    /// `quiet` mirror) is the notifier this thread's last one-item harvest delivered
    /// ([`remember`]) and its count is 0 now — the one-item harvest would find it so and
    /// drop it (`harvest_single`), delivering nothing. Leaving it queued instead keeps the
    /// notifier's wait queue settled (see `wait_queue`, "Settled"), so the next write to
    /// it skips the wake walk, and this wait skips the drop's locks: in a spinning
    /// hand-off, the write's walk (two locks) and the drop (one) are gone.
    ///
    /// Only a hint for the first harvest of `Epoll::wait` (a wait's that will spin: one
    /// that parks at once harvests, rather than register only to find the item queued and
    /// go round again; a poll harvests too, since it returns at once, and the item left
    /// queued would keep its place ahead of items queued later, where `epoll_wait` drops
    /// it) and for the spin's probe: a wait that returns has made a real harvest, and one
    /// that goes on to sleep registers, and its re-check (`has_ready`, under the lock) sees
    /// the item queued and harvests for real, which drops it before the thread sleeps. A
    /// stale `true` (the list changed since) is one no later than the look itself (the
    /// mirror is stored under the lock at every change), so the wait took place before
    /// the change. Only on an epoll with no kernel side and nobody polling it, as
    /// `harvest_single`.
    #[inline]
    pub(crate) fn nothing_new(&self) -> bool {
        let id = self.ready.quiet();
        id != 0
            && !self.kernel.present()
            && !self.kernel.below()
            && !self.graveyard.pending()
            && self.pollers.wants_nothing()
            && LAST.with(|l| {
                l.borrow()
                    .as_ref()
                    .is_some_and(|nf| nf.id == id && nf.count.load(SeqCst) == 0)
            })
    }

    /// The general harvest (`harvest_now` when `harvest_single` does not apply), and
    /// whether it left the kernel epoll drained (`kernel::Collector::
    /// drained`: it collected from it and nothing there has more to report until its next
    /// wake; `false` without kernel fds).
    pub(crate) fn harvest_drained(self: &Arc<Self>, out: &mut [Event]) -> (usize, bool) {
        let mut kernel = self.kernel.collect();
        let n = self.with_registry(|reg, batch| {
            // The scan frame (two locks of `ready`) is skipped when nothing is queued: the
            // ready hint, read under `registry` after `queue_nested` queued what the nested
            // epolls hold (as `harvest_seeded`). The kernel item is then not queued either,
            // and `finish` collects from the kernel epoll (a wake of a task through the
            // reactor, whose harvest finds only kernel events: `kernel::reactor`).
            let n = if self.ready.hint() {
                self.scan(reg, batch, |tx, reg, batch| {
                    send_events(tx, out, batch, &mut |o| kernel.collect(&reg.kernel, o))
                })
            } else {
                0
            };
            n + kernel.finish(self, &reg.kernel, out, n, batch)
        });
        (n, kernel.drained())
    }

    /// A harvest only if the in-memory side has something queued (the ready hint); it then
    /// collects from the kernel epoll too, as `epoll_wait` returns every ready item. For a
    /// waiter that otherwise hears of kernel readiness by other means: a task whose reactor
    /// readiness is clear (`kernel::reactor`), a blocking `wait` about to sleep on the
    /// kernel epoll (`kernel::sleep`). No syscall and no lock when nothing is queued in
    /// memory (nested epolls' kernel readiness then reaches the caller through the
    /// watcher's queueing of their items, a wake, rather than through this harvest's look).
    #[inline(never)]
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn harvest_now_mem(self: &Arc<Self>, out: &mut [Event]) -> usize {
        if !self.ready.hint() {
            return 0;
        }
        self.harvest_now(out)
    }

    /// The harvest after a direct sleep (`kernel::sleep`): deliver `seed`, the kernel
    /// events that sleep took from the kernel epoll (at most `out.len()`), and the queued
    /// in-memory events into the slots they leave; no second look at the kernel epoll at
    /// the end (the kernel item, if it is queued, is collected where the scan meets it).
    /// `kernel` is the sleep's own kernel side (no second look-up under its lock).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn harvest_seeded(
        self: &Arc<Self>,
        out: &mut [Event],
        seed: &[(Events, u64)],
        mut kernel: crate::epoll::kernel::Collector,
    ) -> usize {
        kernel.skip_end();
        let room = out.len().saturating_sub(seed.len());
        self.with_registry(|reg, batch| {
            // Skipped when nothing is queued (the ready hint, as `harvest_if_any`); else it
            // runs even with no room, for its LT cascade to the next waiter.
            let n = if self.ready.hint() {
                let (mem, _) = out.split_at_mut(room);
                self.scan(reg, batch, |tx, reg, batch| {
                    send_events(tx, mem, batch, &mut |o| kernel.collect(&reg.kernel, o))
                })
            } else {
                0
            };
            n + kernel.seeded(self, &reg.kernel, seed, &mut out[n..], batch)
        })
    }

    /// A harvest, skipped when the ready hint says nothing is queued and no kernel fd is
    /// registered here or in a nested epoll below (`kernel.below()`): a harvest collects
    /// those at its end, or queues the nested items they make ready
    /// (`kernel.queue_nested`), even with an empty ready list, so it is never skipped then.
    /// The hint is written under `ready` whenever an item is queued (`ReadyGuard::queue`),
    /// so a caller that happens after the queueing sees it.
    pub(crate) fn harvest_if_any(self: &Arc<Self>, out: &mut [Event]) -> usize {
        if !self.ready.hint() && !self.kernel.below() {
            return 0;
        }
        self.harvest_now(out)
    }

    /// `Epoll::wait`'s first harvest: `harvest_if_any`, except that with kernel fds here
    /// a wait that may sleep (`!now`) and finds nothing queued in memory leaves the kernel
    /// epoll to its sleep (`kernel::sleep`: the sleep returns at once if it holds events).
    #[inline]
    pub(crate) fn harvest_before_wait(self: &Arc<Self>, out: &mut [Event], now: bool) -> usize {
        if !self.ready.hint() && !self.kernel.below() {
            return 0;
        }
        if !now && self.kernel.present() {
            return self.harvest_now_mem(out);
        }
        self.harvest_now(out)
    }

    /// A harvest by a waiter about to wait: if it found nothing, make sure kernel readiness
    /// will wake it (`kernel`, invariant W). The waiter has registered (or will, and
    /// then harvest again through here).
    pub(crate) fn harvest_or_watch(self: &Arc<Self>, out: &mut [Event]) -> usize {
        let n = self.harvest_if_any(out);
        if n == 0 {
            self.kernel.watch(self);
        }
        n
    }

    /// The scan frame shared by both jobs: `ep_start_scan`, `job` over the transfer list,
    /// `ep_done_scan` and the wakes it owes. Must be called with `registry` held. Returns
    /// the job's count.
    fn scan(
        self: &Arc<Self>,
        reg: &mut Registry,
        batch: &mut WakeBatch,
        job: impl FnOnce(&mut Tx, &Registry, &mut WakeBatch) -> Found,
    ) -> usize {
        // `scanning` is published before any source is polled (SeqCst store, then SeqCst
        // loads of the sources): pairs with Item::wake's lock-free coalescing.
        let Some(mut tx) = self.ready.lock().start_scan() else {
            return 0;
        };
        crate::loom::dekker_fence();
        // Wakes a delivery owes (an AutoReset reset waking blocked writers, whose wakers are
        // foreign code) go into `batch`, to run once `registry` is released.
        let Found { n, kernel_dropped } = job(&mut tx, reg, batch);
        // Before `ready` is taken: an item's last reference may go here.
        tx.drop_consumed();
        let mut rd = self.ready.lock();
        // The scan ends after every `linked = false` of this scan (`ReadyGuard::done_scan`).
        rd.done_scan(&mut tx);
        if !rd.is_empty() && self.has_sleeper() {
            // The LT cascade: let the next sleeper look too.
            batch.push_post(
                Arc::new(WakeOneWaiter(Arc::clone(self))) as Arc<dyn PostWake>,
                Events::IN,
            );
        }
        if kernel_dropped {
            // Under `ready`, after the item's `linked = false` (invariant W).
            self.kernel.dropped(self, batch);
        }
        if (n == 0 || !rd.any_live()) && self.pollers.interest().contains(KEY_EMPTIED) {
            // fd views (`crate::fd`): this scan left nothing ready, or found nothing (its
            // caller's `WouldBlock`) while wakes arrived. Decided under `ready`, so that a
            // refill racing the end of the scan still gets its edge (KEY_EMPTIED).
            batch.push_post(
                Arc::new(WakeViews(Arc::clone(self))) as Arc<dyn PostWake>,
                KEY_EMPTIED,
            );
        }
        n
    }

    /// Readiness as a source (`IN | RDNORM` iff a queued item re-polls ready). Never consumes.
    pub(crate) fn readiness(self: &Arc<Self>) -> Events {
        let mut batch = WakeBatch::new();
        let r = self.readiness_into(&mut batch);
        batch.run();
        r
    }

    /// As `readiness`, with the deferred wakes put into `batch`: an outer epoll polls a
    /// nested one with its own registry held.
    pub(crate) fn readiness_into(self: &Arc<Self>, batch: &mut WakeBatch) -> Events {
        let n = self.with_registry_into(batch, |reg, batch| {
            self.scan(reg, batch, |tx, _, batch| first_ready(tx, batch))
        });
        // Kernel sources, whether or not the kernel item is queued: a poll of the kernel
        // epoll, which consumes nothing.
        if n > 0 || self.kernel.readable() {
            Events::IN | Events::RDNORM
        } else {
            Events::empty()
        }
    }
}
