//! An epoll item (`struct epitem`) and its wake callback (`ep_poll_callback`).

use std::sync::{Arc, Weak};

use super::source::SourceCore;
use super::EpInner;
use crate::events::Events;
use crate::loom::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{Acquire, Relaxed, SeqCst},
};
use crate::wait_queue::{Callback, WakeBatch};

/// One registration of a source in an epoll.
///
/// Aligned to a cache line (its fields fit in one): a harvest reads `src`, `events`,
/// `data` and `dead` of every queued item, and an item straddling two lines (as a
/// 16-byte-aligned allocation of the `Arc` header and these 48 bytes mostly does) costs a
/// harvest two line fetches per event. The `Arc`'s counts, which a harvest never touches
/// (it moves the `Arc`s), then sit in the line before.
#[repr(align(64))]
pub(crate) struct Item {
    /// Itself, so the callback (which only gets `&self`) can queue an `Arc`.
    pub(crate) me: Weak<Item>,
    /// The epoll it belongs to. A strong reference: the cycle through `EpInner::registry` is
    /// broken when the last `Epoll` handle goes (`EpInner::close`).
    pub(crate) ep: Arc<EpInner>,
    /// The watched source.
    pub(crate) src: SourceCore,
    /// The interest mask, control bits included (`epi->event.events`). Written with
    /// `ep.registry` held (add, modify, ONESHOT disarm in the harvest); read lock-free by the
    /// callback. SeqCst: the callback's load pairs with `modify`'s store and poll (the
    /// callback checks the mask before taking `ep.ready`; see `Callback::wake` below).
    pub(crate) events: AtomicU32,
    /// The user's data. Written with `ep.registry` and `ep.ready` held; read with either.
    pub(crate) data: AtomicU64,
    /// On the ready list or the harvester's transfer list (`ep_is_linked`), or dropped by
    /// the one-item harvest with its reference kept (`ReadyState::kept`, `Ready::parked`:
    /// then off the list, the flag left set so that the drop and the next queue do not
    /// write this line). Guarded by `ep.ready`, except that while a scan is active the
    /// harvester (holding `ep.registry`) owns it for the items on its transfer list;
    /// callbacks then touch only `ovf`. Two separate words, so that those two writers never
    /// share a read-modify-write.
    pub(crate) linked: AtomicBool,
    /// Chained on the overflow list (`epi->next != EP_UNACTIVE_PTR`). Guarded by `ep.ready`.
    pub(crate) ovf: AtomicBool,
    /// [`DEAD`] (the source was closed or the item deleted: skip it wherever it is met) and
    /// [`INLINE`] (the harvest's inline path may take it), in one byte, so that the harvest
    /// asks both with one compare. [`Item::kill`] adds `DEAD`; [`Item::set_events`] keeps
    /// `INLINE` in step with the mask.
    pub(crate) state: AtomicU8,
}

/// [`Item::state`]: the item is dead.
const DEAD: u8 = 1;
/// [`Item::state`]: the source is an in-memory notifier whose harvest reports its count as
/// it is, Counter or Semaphore (not AutoReset, whose delivery consumes), watched
/// level-triggered (no `ET`, no `ONESHOT` in the mask): what the harvest's inline path
/// handles ([`Item::lt_notifier`]). The kind is fixed when the item is made; the mask part
/// changes with the mask, in the same critical section (`registry` and `ready` held), so
/// that a reader holding either lock reads the bit and the mask of one `modify`.
const INLINE: u8 = 2;

// One line: the fields a harvest reads never straddle two (see `Item`).
#[cfg(not(evfd_loom))]
const _: () = assert!(std::mem::size_of::<Item>() == 64);

impl Item {
    pub(crate) fn events(&self) -> Events {
        Events::from_bits_retain(self.events.load(SeqCst))
    }

    pub(crate) fn is_linked(&self) -> bool {
        self.linked.load(Relaxed)
    }

    /// Plain store: see `linked` for who may write it when.
    pub(crate) fn set_linked(&self, on: bool) {
        self.linked.store(on, Relaxed);
    }

    pub(crate) fn is_ovf(&self) -> bool {
        self.ovf.load(Relaxed)
    }

    pub(crate) fn set_ovf(&self, on: bool) {
        self.ovf.store(on, Relaxed);
    }

    /// The first [`Item::state`] of an item of `src` watched with the mask `ev`.
    pub(crate) fn state_for(src: &SourceCore, ev: Events) -> AtomicU8 {
        AtomicU8::new(if Self::inline(src, ev) { INLINE } else { 0 })
    }

    /// Whether an item of `src` with the mask `ev` is one for the inline path ([`INLINE`]).
    fn inline(src: &SourceCore, ev: Events) -> bool {
        !ev.intersects(Events::ONESHOT | Events::ET)
            && src
                .notifier()
                .is_some_and(|nf| nf.mode != crate::mode::Mode::AutoReset)
    }

    /// Store a new mask, and [`INLINE`] to match it. With `registry` held, and `ready` too
    /// unless the item is on the caller's transfer list (a scan's ONESHOT disarm): the
    /// one-item harvest reads the pair under `ready` alone, a scan under `registry`.
    pub(crate) fn set_events(&self, ev: Events) {
        self.events.store(ev.bits(), SeqCst);
        let want = Self::inline(&self.src, ev);
        if want != (self.state.load(Relaxed) & INLINE != 0) {
            if want {
                self.state.fetch_or(INLINE, SeqCst);
            } else {
                self.state.fetch_and(!INLINE, SeqCst);
            }
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.state.load(SeqCst) & DEAD != 0
    }

    /// Alive, and one the harvest's inline path may take (see [`INLINE`]).
    #[inline(always)]
    pub(crate) fn is_inline(&self) -> bool {
        self.state.load(SeqCst) == INLINE
    }

    /// The items the harvest's inline paths (`harvest::lt_ready`,
    /// `EpInner::harvest_single`) may take: a live, level-triggered (no `ET`, no `ONESHOT`)
    /// in-memory notifier that is not AutoReset. Its notifier and the item's interest;
    /// `None` for anything else. With `registry` or `ready` held (see [`INLINE`]).
    #[inline(always)]
    pub(crate) fn lt_notifier(&self) -> Option<(&Arc<crate::notifier::Inner>, Events)> {
        // Alive, a Counter or Semaphore notifier, level-triggered: one compare (`INLINE`).
        if !self.is_inline() {
            return None;
        }
        Some((self.src.notifier()?, self.events()))
    }

    /// The items the one-item harvest delivers by resetting them (`EpInner::
    /// harvest_single`): a live, level-triggered AutoReset notifier watched for `IN` and
    /// not `OUT` (whose delivery is the reset, and whose readiness after it is `OUT`
    /// alone, which the item does not want). Its notifier; `None` for anything else. With
    /// `registry` or `ready` held (the mask and the state of one `modify`).
    pub(crate) fn lt_autoreset(&self) -> Option<&Arc<crate::notifier::Inner>> {
        if self.is_dead() {
            return None;
        }
        let nf = self.src.notifier()?;
        let ev = self.events();
        (nf.mode == crate::mode::Mode::AutoReset
            && !ev.intersects(Events::ONESHOT | Events::ET)
            && ev & (Events::IN | Events::OUT) == Events::IN)
            .then_some(nf)
    }

    /// For the ready list's `quiet` mirror: the notifier's id if this item is one the
    /// one-item harvest drops when its count is 0 (an [`lt_notifier`](Self::lt_notifier)
    /// item watched for `IN` and not `OUT`, or an [`lt_autoreset`](Self::lt_autoreset)
    /// item), else 0.
    pub(crate) fn quiet_id(&self) -> u64 {
        match self.lt_notifier() {
            Some((nf, ev)) if ev & (Events::IN | Events::OUT) == Events::IN => nf.id,
            Some(_) => 0,
            None => self.lt_autoreset().map_or(0, |nf| nf.id),
        }
    }

    /// Mark it dead: skipped wherever it is met from now on.
    pub(crate) fn kill(&self) {
        self.state.fetch_or(DEAD, SeqCst);
    }

    /// Queued where a wake would queue it: on the overflow list while a scan runs, on the
    /// ready list otherwise. Lock-free; see the coalescing in `Callback::wake` below for
    /// why the two loads, in this order, give a consistent answer.
    fn is_queued(&self) -> bool {
        if self.ep.ready.scanning() {
            self.ovf.load(Acquire)
        } else {
            // A kept item (`Ready::parked`) is off the list though its flag is set. The
            // mirror first, then the flag (`Ready::is_parked`).
            !self.ep.ready.is_parked(self) && self.linked.load(Acquire)
        }
    }

    /// Nobody waits on this item's epoll and nobody polls it: a wake of an item already
    /// queued would change nothing.
    fn unobserved(&self) -> bool {
        !self.ep.has_sleeper() && self.ep.pollers.wants_nothing()
    }
}

/// Whether an exclusive item "consumed" the wake, as `ep_poll_callback`'s return value
/// (docs/semantics.md §4.4, step 7): only if the key's `IN`/`OUT` part is exactly `IN`
/// with the item wanting `IN`, exactly `OUT` with the item wanting `OUT`, or neither bit. So
/// a key carrying both `IN | OUT` never ends an exclusive walk.
fn exclusive_accepts(key: Events, ev: Events) -> bool {
    let io = key & (Events::IN | Events::OUT);
    if io == Events::IN {
        ev.contains(Events::IN)
    } else if io == Events::OUT {
        ev.contains(Events::OUT)
    } else {
        io.is_empty()
    }
}

impl Callback for Item {
    /// `ep_poll_callback`. Runs under the source's wait-queue lock. The mask is read before
    /// `ep.ready` is taken, so an event nobody registered for costs no epoll lock (as the
    /// kernel patch "eventpoll: check the event mask before taking ep->lock" does):
    /// the SeqCst load pairs with `modify`, which stores the new mask (SeqCst) and only then
    /// polls the source (SeqCst loads), while the waker changed the source (SeqCst RMW)
    /// before this load: a Dekker pair, marked by `loom::dekker_fence` on both sides. A wake
    /// racing `modify` either sees the new mask or is covered by `modify`'s own poll.
    fn wake(&self, key: Events, batch: &mut WakeBatch) -> bool {
        let ev = self.events();
        let exclusive = ev.contains(Events::EXCLUSIVE);
        // Disabled (a fired ONESHOT) or not wanted: the same answer the locked path gives.
        if (ev & !Events::PRIVATE).is_empty() || !key.intersects(ev) || self.is_dead() {
            return !exclusive;
        }
        let ep = &self.ep;
        // Lock-free coalescing: the item is already queued where this wake would queue it —
        // on the ready list while no scan runs, or on the overflow list while one does — and
        // nobody waits on or polls this epoll, so queueing again would change nothing.
        // `scanning` is read first (SeqCst, after the source's state change: the Dekker pair
        // with the harvester, which sets `scanning` and then polls the source), and the flag
        // after it: reading a scan's `true` makes everything before that scan's start
        // visible (so an `ovf` flag seen set belongs to this scan or a later state), and
        // reading its `false` makes its `linked = false` stores visible. An item seen on the
        // overflow list is moved to the ready list by `done_scan`; a later scan polls the
        // source after our state change, so nothing is lost. (loom:
        // `coalescing_fast_path_vs_harvest_drop`, `ovf_coalescing_vs_harvest`.)
        if !exclusive && self.is_queued() && self.unobserved() {
            return true;
        }
        let (sleeper, pollers) = {
            let mut rd = ep.ready.lock();
            // Sleepers and pollers are woken even if the item was queued already.
            let _ = rd.queue(self);
            // Read under `ep.ready`: a waiter publishes its interest before it takes
            // `ep.ready` to look at the list, so either it sees the item or we see it.
            (
                ep.has_sleeper(),
                ep.pollers.interest().intersects(Events::IN),
            )
        };
        if sleeper {
            // One `wait`er: its entry comes off now, its unpark runs after every lock is
            // released (the kernel's wake_up(&ep->wq) under ep->lock, minus the lock held
            // across the wake).
            ep.wake_one_waiter_locked(batch);
        }
        if pollers {
            // The pollers of this epoll (outer epolls' items) are woken now, still under the
            // source's lock, as the kernel's `ep_poll_safewake` does from inside
            // `ep_poll_callback`: an outer epoll must see "inner became ready" in the middle
            // of the source's wake walk, before the source's later entries run. Otherwise an
            // outer epoll that watches both the source and the inner epoll queues them in
            // the other order. Only callbacks run here; threads and tasks go into `batch`.
            // Lock order: source queue → epoll ready → epoll pollers → outer ready → ...,
            // always upward along the (acyclic) epoll topology.
            ep.pollers.wake_into(Events::IN, usize::MAX, batch);
        }
        if !exclusive {
            return true;
        }
        sleeper && exclusive_accepts(key, ev)
    }

    /// The settle test (`wait_queue`, "Settled"): the lock-free coalescing above, for a
    /// live, armed, non-exclusive `IN` item. An item queued on the overflow list is moved
    /// to the ready list when the scan ends, so it stays queued either way.
    /// What makes it false again is always followed by a clear of the source's settled
    /// mark: a harvest clears it before any poll after which it may unlink the item (after
    /// publishing `scanning`; `harvest::poll_to_unlink`), a new poller of the epoll after
    /// publishing its interest (`EpInner::unsettle_sources`), a `modify` or a delete through
    /// the queue's own `set_mask`/`remove`. A sleeper sleeps only with the ready list
    /// empty: one that registers while this item is queued (a quiet item left for its
    /// reader, `EpInner::nothing_new`) finds it in its re-check and harvests, and the
    /// harvest that unlinks it clears the mark first.
    fn coalesces(&self) -> bool {
        let ev = self.events();
        ev.contains(Events::IN)
            && !ev.contains(Events::EXCLUSIVE)
            && !self.is_dead()
            && self.is_queued()
            && self.unobserved()
    }

    /// `POLLFREE`: the source was closed. Leave silently.
    fn detach(&self) {
        self.kill();
        self.ep.graveyard.bury(self.src.id());
        // Off the ready list now (the kernel unlinks a closed file's items at close). No
        // lock is held here (see `WaitQueue::detach_all`), so `ready` may be taken.
        let gone = self.ep.ready.lock().forget(self);
        drop(gone);
        self.ep.wake_views_if_emptied();
    }
}
