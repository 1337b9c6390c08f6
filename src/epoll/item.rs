//! An epoll item (`struct epitem`) and its wake callback (`ep_poll_callback`).

use std::sync::{Arc, Weak};

use super::source::SourceCore;
use super::EpInner;
use crate::loom::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64, AtomicU8,
    Ordering::{Relaxed, SeqCst},
};
use crate::wait_queue::{Callback, WakeBatch};
use crate::Events;

/// `Item::qflags` bit: on the ready list or the harvester's private transfer list
/// (`ep_is_linked`).
pub(crate) const LINKED: u8 = 1;
/// `Item::qflags` bit: chained on the overflow list (`epi->next != EP_UNACTIVE_PTR`).
pub(crate) const OVF: u8 = 2;

/// One registration of a source in an epoll.
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
    /// callback. SeqCst: the callback's load pairs with `modify`'s store + fence (seed 000).
    pub(crate) events: AtomicU32,
    /// The user's data. Written and read with `ep.registry` held.
    pub(crate) data: AtomicU64,
    /// `LINKED | OVF`. Guarded by `ep.ready`, except that while a scan is active (ovf on) the
    /// harvester, holding `ep.registry`, owns the `LINKED` bit of items on its transfer list.
    pub(crate) qflags: AtomicU8,
    /// The source was closed or the item deleted: skip it wherever it is met.
    pub(crate) dead: AtomicBool,
}

impl Item {
    pub(crate) fn events(&self) -> Events {
        Events::from_bits_retain(self.events.load(SeqCst))
    }

    pub(crate) fn flag(&self, f: u8) -> bool {
        self.qflags.load(Relaxed) & f != 0
    }

    pub(crate) fn set_flag(&self, f: u8, on: bool) {
        if on {
            self.qflags.fetch_or(f, Relaxed);
        } else {
            self.qflags.fetch_and(!f, Relaxed);
        }
    }

    pub(crate) fn is_dead(&self) -> bool {
        self.dead.load(SeqCst)
    }
}

/// Whether an exclusive item "consumed" the wake (§4.4 step 7 of KERNEL-SEMANTICS.md).
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
    /// `ep.ready` is taken, so an event nobody registered for costs no epoll lock (seed 000):
    /// the SeqCst load pairs with `modify`, which stores the new mask, issues a SeqCst fence
    /// and only then polls the source. A wake racing `modify` either sees the new mask or is
    /// covered by `modify`'s own poll.
    fn wake(&self, key: Events, batch: &mut WakeBatch) -> bool {
        let ev = self.events();
        let exclusive = ev.contains(Events::EXCLUSIVE);
        // Disabled (a fired ONESHOT) or not wanted: the same answer the locked path gives.
        if (ev & !Events::PRIVATE).is_empty() || !key.intersects(ev) || self.is_dead() {
            return !exclusive;
        }
        let ep = &self.ep;
        let (sleeper, post) = {
            let mut rd = crate::loom::lock(&ep.ready);
            rd.queue(self);
            // Read under `ep.ready`: a waiter publishes its interest before it takes
            // `ep.ready` to look at the list, so either it sees the item or we see it.
            let sleeper = !ep.waiters.interest().is_empty();
            (sleeper, sleeper || !ep.pollers.interest().is_empty())
        };
        if post {
            batch.push_post(
                Arc::clone(ep) as Arc<dyn crate::wait_queue::PostWake>,
                Events::IN,
            );
        }
        if !exclusive {
            return true;
        }
        sleeper && exclusive_accepts(key, ev)
    }

    /// `POLLFREE`: the source was closed. Leave silently.
    fn detach(&self) {
        self.dead.store(true, SeqCst);
        crate::loom::lock(&self.ep.graveyard).push(self.src.id());
    }
}
