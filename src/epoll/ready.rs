//! The ready list and the overflow list (`rdllist`, `ovflist`), guarded by `EpInner::ready`.

use std::sync::Arc;

use super::item::Item;
use crate::loom::sync::atomic::{AtomicBool, Ordering::Relaxed};

/// Guarded by `EpInner::ready` (the kernel's `ep->lock`).
///
/// `repr(C)`, `one` first: the first queued item is stored in the same cache line as the
/// lock word itself (`EpInner`'s second group), so a producer that queues an item into an
/// empty list and the harvester that takes it touch no other line — not the heap buffer of
/// `list`, which the two would otherwise pass back and forth at every hand-off.
#[derive(Default)]
#[repr(C)]
pub(crate) struct ReadyState {
    /// The first item of the ready list, if it was queued into an empty list: the list in
    /// arrival order is `one` followed by `list`.
    pub(crate) one: Option<Arc<Item>>,
    /// Items that may be ready, in arrival order after `one`; each at most once (`LINKED`).
    pub(crate) list: Vec<Arc<Item>>,
    /// While a scan runs (`ovf_active`), wakes are chained here in arrival order instead.
    pub(crate) ovf: Vec<Arc<Item>>,
    pub(crate) ovf_active: bool,
    /// A recycled buffer for the harvester's transfer list.
    pub(crate) spare: Vec<Arc<Item>>,
    /// How many items on `list` died (deleted, or their source closed) since the list was
    /// last compacted or handed to a harvester: see [`ReadyState::forget`].
    dead: usize,
}

/// Below this many dead entries, `forget` leaves them for the next harvest or compaction.
const COMPACT_MIN: usize = 32;

impl ReadyState {
    /// Queue `item` (the callback's step 4): on the overflow list while a scan is active,
    /// else at the tail of the ready list, unless it is already there. Returns whether the
    /// item was newly put on the ready list (not the overflow list). Must be called with
    /// `EpInner::ready` held. Sets the epoll's ready hint (`EpInner::ready_hint`), which
    /// `wait` reads without the lock: every path that queues must pass it, or a `wait` could
    /// skip a harvest that would have found the item.
    pub(crate) fn queue(&mut self, item: &Item, hint: &AtomicBool) -> bool {
        hint.store(true, Relaxed);
        if self.ovf_active {
            if !item.is_ovf() {
                if let Some(me) = item.me.upgrade() {
                    item.set_ovf(true);
                    self.ovf.push(me);
                }
            }
        } else if !item.is_linked() {
            if let Some(me) = item.me.upgrade() {
                item.set_linked(true);
                if self.one.is_none() && self.list.is_empty() {
                    self.one = Some(me);
                } else {
                    self.list.push(me);
                }
                return true;
            }
        }
        false
    }

    /// Whether the ready list is empty (`one` and `list`).
    pub(crate) fn is_empty(&self) -> bool {
        self.one.is_none() && self.list.is_empty()
    }

    /// The ready list's length (`one` and `list`).
    pub(crate) fn len(&self) -> usize {
        usize::from(self.one.is_some()) + self.list.len()
    }

    /// Whether an fd view of this epoll must be rung (`crate::fd`): a scan is running (its
    /// transfer list may hold ready items) or the ready list holds an item that is neither
    /// deleted nor closed. Must be called with `EpInner::ready` held.
    pub(crate) fn any_live(&self) -> bool {
        self.ovf_active
            || self.one.as_ref().is_some_and(|it| !it.is_dead())
            || self.list.iter().any(|it| !it.is_dead())
    }

    /// `item` was just marked dead (deleted, or its source closed): take it off the ready
    /// list now, as the kernel unlinks an item at `EPOLL_CTL_DEL` and at close, instead of
    /// leaving it (and the source it holds) until the next harvest. The last entry is popped
    /// at once (the add/delete cycle); others are counted, and the list is compacted when
    /// dead entries reach half of it, so at most about as many dead entries as live ones
    /// stay queued, at amortised O(1) per death. During a scan the harvester owns the
    /// transfer list and skips dead items itself; a dead overflow arrival is dropped by
    /// `done_scan`. Returns what was removed, to be dropped after `EpInner::ready` is
    /// released. Must be called with `EpInner::ready` held.
    pub(crate) fn forget(&mut self, item: &Item) -> Vec<Arc<Item>> {
        debug_assert!(item.is_dead());
        if self.ovf_active || !item.is_linked() {
            return Vec::new();
        }
        if self
            .one
            .as_ref()
            .is_some_and(|o| std::ptr::eq(Arc::as_ptr(o), item))
        {
            item.set_linked(false);
            return self.one.take().into_iter().collect();
        }
        if self
            .list
            .last()
            .is_some_and(|l| std::ptr::eq(Arc::as_ptr(l), item))
        {
            item.set_linked(false);
            return self.list.pop().into_iter().collect();
        }
        self.dead += 1;
        if self.dead < COMPACT_MIN || self.dead * 2 < self.len() {
            return Vec::new();
        }
        self.dead = 0;
        let mut gone = Vec::new();
        if self.one.as_ref().is_some_and(|o| o.is_dead()) {
            if let Some(o) = self.one.take() {
                o.set_linked(false);
                gone.push(o);
            }
        }
        self.list.retain(|it| {
            if it.is_dead() {
                it.set_linked(false);
                gone.push(Arc::clone(it));
                false
            } else {
                true
            }
        });
        gone
    }

    /// `ep_start_scan`: hand the ready list to the harvester (`one`, then the rest), turn
    /// the overflow list on.
    pub(crate) fn start_scan(&mut self) -> (Option<Arc<Item>>, Vec<Arc<Item>>) {
        debug_assert!(
            !self.ovf_active,
            "scans are serialised by EpInner::registry"
        );
        self.ovf_active = true;
        // The harvester meets (and drops) every dead entry of the list it takes.
        self.dead = 0;
        let spare = std::mem::take(&mut self.spare);
        (self.one.take(), std::mem::replace(&mut self.list, spare))
    }

    /// `ep_done_scan`: the ready list becomes `[leftovers] ++ [overflow arrivals] ++
    /// [requeued]`, where `requeued` is what the harvester put back (level-triggered items),
    /// each item once.
    pub(crate) fn done_scan(
        &mut self,
        leftovers: impl Iterator<Item = Arc<Item>>,
        any_leftovers: bool,
        requeued: &mut Vec<Arc<Item>>,
    ) {
        self.ovf_active = false;
        debug_assert!(self.is_empty(), "wakes go to ovf during a scan");
        if !any_leftovers && self.ovf.is_empty() {
            // The common case: the list is exactly what was requeued. Swap, don't copy.
            std::mem::swap(&mut self.list, requeued);
            return;
        }
        self.list.extend(leftovers);
        for it in self.ovf.drain(..) {
            it.set_ovf(false);
            if !it.is_linked() && !it.is_dead() {
                it.set_linked(true);
                self.list.push(it);
            }
        }
        self.list.append(requeued);
    }
}

/// The harvester's transfer list: the ready list's `one`, then the drained rest.
pub(crate) struct Tx<'a> {
    pub(crate) one: Option<Arc<Item>>,
    pub(crate) rest: std::vec::Drain<'a, Arc<Item>>,
}

impl Iterator for Tx<'_> {
    type Item = Arc<Item>;

    #[inline]
    fn next(&mut self) -> Option<Arc<Item>> {
        self.one.take().or_else(|| self.rest.next())
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        let n = usize::from(self.one.is_some()) + self.rest.len();
        (n, Some(n))
    }
}

impl ExactSizeIterator for Tx<'_> {}
