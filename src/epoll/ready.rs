//! The ready list and the overflow list (`rdllist`, `ovflist`), guarded by `EpInner::ready`,
//! and the lock-free mirrors of that state which [`Ready`] keeps in step inside its own
//! methods: the ready hint ("the list may hold an item"), `scanning` ("a scan runs"),
//! `parked` (the dropped item whose reference is kept) and `quiet` (which notifier the
//! list's only item watches, for the spin's look: `EpInner::nothing_new`).
//!
//! # LOCKING
//!
//! ```text
//! Ready::list    Mutex<ReadyState> (the epoll's lock (3), the kernel's ep->lock).
//! Ready::hint    AtomicBool, written only with `list` held (by `ReadyGuard`), read without.
//! Ready::scanning AtomicBool, written only with `list` held (by `ReadyGuard`), read without.
//! Ready::parked  AtomicUsize, written only with `list` held (by `ReadyGuard`), read without.
//! Ready::quiet   AtomicU64, written only with `list` held (by `ReadyGuard`), read without.
//! ```

use std::sync::Arc;

use super::item::Item;
use crate::loom::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Acquire, Relaxed, Release, SeqCst},
};
use crate::loom::sync::{Mutex, MutexGuard};

/// The ready list with its mirrors: the epoll's second cache-line group (`EpInner`), in
/// this order (`repr(C)`), so that the lock word, the mirrors, the first queued item
/// (`ReadyState::one`) and the kept reference (`ReadyState::kept`) share the one line a
/// producer and the harvester pass back and forth (everything either writes in a
/// hand-off; `tests::hand_off_writes_one_line` below).
///
/// Every change of the list goes through [`ReadyGuard`], which updates the mirrors itself;
/// the `Deref` to the mutex is for read-only looks (`is_empty`, `len`, `any_live`: the
/// mutating methods of `ReadyState` are private to this module).
#[repr(C)]
pub(crate) struct Ready {
    /// Mirrors `ReadyState::ovf_active`, readable without the lock: see `Item::wake`'s
    /// coalescing fast path.
    scanning: AtomicBool,
    /// Whether the ready list may hold an item (or a scan is running): written under the
    /// lock at every change of the list, read without it. A hint for `wait`'s fast paths
    /// (skip a harvest that would find nothing, spin on it before parking); never the last
    /// word before sleeping, which [`ReadyGuard::has_ready`] gives under the lock.
    hint: AtomicBool,
    /// The address of the item whose reference `ReadyState::kept` holds, 0 if none:
    /// readable without the lock. Such an item is off the ready list although its
    /// `Item::linked` flag still says linked: the one-item harvest drops it and the next
    /// `queue` takes it back without writing the item's line (which the producer and the
    /// harvester then only read). Every lock-free look at `linked` asks this too
    /// ([`Ready::parked`]).
    parked: AtomicUsize,
    /// The id of the notifier whose item is the ready list's only item, if it holds exactly
    /// one, no scan runs, and the item is a live, level-triggered Counter or Semaphore
    /// notifier watched for `IN` and not `OUT` (`Item::quiet_id`); 0 otherwise. Written
    /// under the lock at every change of the list and of its item's mask, read without: a
    /// hint for the spin's look (`EpInner::nothing_new`), never the last word before
    /// sleeping.
    quiet: AtomicU64,
    list: Mutex<ReadyState>,
}

impl Ready {
    pub(crate) fn new() -> Ready {
        Ready {
            scanning: AtomicBool::new(false),
            hint: AtomicBool::new(false),
            parked: AtomicUsize::new(0),
            quiet: AtomicU64::new(0),
            list: Mutex::new(ReadyState::default()),
        }
    }

    /// Take the ready lock.
    #[inline]
    pub(crate) fn lock(&self) -> ReadyGuard<'_> {
        ReadyGuard {
            rd: crate::loom::lock(&self.list),
            mirrors: self,
        }
    }

    /// The ready hint (lock-free; see [`Ready::hint`](Self)).
    #[inline]
    pub(crate) fn hint(&self) -> bool {
        self.hint.load(Relaxed)
    }

    /// The `quiet` mirror (lock-free; see [`Ready::quiet`](Self)).
    #[inline]
    pub(crate) fn quiet(&self) -> u64 {
        self.quiet.load(Relaxed)
    }

    /// Whether a scan runs (SeqCst: the Dekker pair of `Item::wake`'s coalescing with the
    /// scan's start).
    #[inline]
    pub(crate) fn scanning(&self) -> bool {
        self.scanning.load(SeqCst)
    }

    /// Whether `item` is the dropped item whose reference the list keeps ([`parked`]):
    /// off the ready list, whatever its `linked` flag says. Lock-free, for `Item::
    /// is_queued`, after its load of `scanning` (whose `false` is stored after this
    /// mirror's every change, Release) and *before* its load of `linked`: an item stops
    /// being parked only after its flag is right (set while it goes back on the list,
    /// cleared when its kept reference is dropped), and the store that says so is Release,
    /// so a look that reads the new address (Acquire) reads the flag as it is now. Read
    /// the other way round, a stale flag (`true`, from while it was parked) and a new
    /// address (another item parked since) would say "queued" for an item on no list.
    /// (loom: `parked_item_released_by_another_drop_vs_write`.)
    ///
    /// [`parked`]: Self
    #[inline]
    pub(crate) fn is_parked(&self, item: &Item) -> bool {
        self.parked.load(Acquire) == item as *const Item as usize
    }
}

/// Everything a closed epoll had queued (`ReadyGuard::take_all`).
pub(crate) type Taken = (
    Option<Arc<Item>>,
    Vec<Arc<Item>>,
    Vec<Arc<Item>>,
    Vec<Arc<Item>>,
    Option<Arc<Item>>,
);

/// The ready lock held: the list's changes, each updating the mirrors with it.
pub(crate) struct ReadyGuard<'a> {
    rd: MutexGuard<'a, ReadyState>,
    mirrors: &'a Ready,
}

impl std::ops::Deref for ReadyGuard<'_> {
    type Target = ReadyState;
    fn deref(&self) -> &ReadyState {
        &self.rd
    }
}

impl ReadyGuard<'_> {
    /// Bring the `parked` mirror in step with `ReadyState::kept` (after a change of it).
    #[inline]
    fn sync_parked(&self) {
        let k = self.rd.kept.as_ref().map_or(0, |k| Arc::as_ptr(k) as usize);
        if self.mirrors.parked.load(Relaxed) != k {
            // Release: after the flag of an item that stops being parked is right
            // (`Ready::is_parked`).
            self.mirrors.parked.store(k, Release);
        }
    }

    /// Bring the `quiet` mirror in step with the list (after a change of it, or of the
    /// mask of an item on it).
    #[inline]
    pub(crate) fn sync_quiet(&self) {
        let q = self.single().map_or(0, |it| it.quiet_id());
        if self.mirrors.quiet.load(Relaxed) != q {
            self.mirrors.quiet.store(q, Relaxed);
        }
    }

    /// Queue `item` (the callback's step 4): on the overflow list while a scan is active,
    /// else at the tail of the ready list, unless it is already there. Returns whether the
    /// item was newly put on the ready list (not the overflow list). Sets the ready hint,
    /// which `wait` reads without the lock.
    #[inline]
    pub(crate) fn queue(&mut self, item: &Item) -> bool {
        self.mirrors.hint.store(true, Relaxed);
        let r = self.rd.queue(item);
        if r {
            self.sync_parked();
            self.sync_quiet();
        }
        r
    }

    /// Is the ready list non-empty or a harvest running? A `true` also sets the ready hint:
    /// the wait that saw it retries a harvest that the hint gates, so a stale hint can never
    /// make it spin between the two.
    #[inline]
    pub(crate) fn has_ready(&self) -> bool {
        let any = !self.rd.is_empty() || self.rd.ovf_active;
        if any {
            self.mirrors.hint.store(true, Relaxed);
        }
        any
    }

    /// See [`ReadyState::forget`].
    #[inline]
    pub(crate) fn forget(&mut self, item: &Item) -> Vec<Arc<Item>> {
        let gone = self.rd.forget(item);
        self.sync_parked();
        self.sync_quiet();
        gone
    }

    /// `ep_start_scan`, `None` if the list is empty. `scanning` is published (SeqCst)
    /// before any source is polled: it pairs with `Item::wake`'s lock-free coalescing check.
    #[inline]
    pub(crate) fn start_scan(&mut self) -> Option<Tx> {
        if self.rd.is_empty() {
            return None;
        }
        self.mirrors.scanning.store(true, SeqCst);
        self.mirrors.hint.store(true, Relaxed);
        self.mirrors.quiet.store(0, Relaxed);
        Some(self.rd.start_scan())
    }

    /// `ep_done_scan` (see [`ReadyState::done_scan`]), after [`Tx::drop_consumed`].
    #[inline]
    pub(crate) fn done_scan(&mut self, tx: &mut Tx) {
        self.rd.done_scan(tx);
        self.sync_parked();
        self.sync_quiet();
        self.mirrors.hint.store(!self.rd.is_empty(), Relaxed);
        // After every `linked = false` of this scan. Release is enough here: a callback that
        // reads this `false` sees those stores (its `linked` load is Acquire), and one that
        // reads the scan's `true` takes the lock. Only the `true` store needs SeqCst (the
        // Dekker pair with the callback's source-state RMW, see `Item::wake`).
        self.mirrors.scanning.store(false, Release);
    }

    /// The ready list's only item, if it holds exactly one and no scan runs: the shape of a
    /// hand-off's harvest (`EpInner::harvest_single`).
    #[inline]
    pub(crate) fn single(&self) -> Option<&Arc<Item>> {
        let rd = &*self.rd;
        if rd.ovf_active {
            return None;
        }
        match (&rd.one, rd.list.len()) {
            (Some(it), 0) => Some(it),
            (None, 1) => rd.list.first(),
            _ => None,
        }
    }

    /// `ep_start_scan` … `ep_done_scan` for the ready list's only item ([`single`]), in this
    /// one critical section: `scanning` is published (SeqCst) before `ready` polls the
    /// source, as [`start_scan`](Self::start_scan) does, so a wake that changed the source
    /// before the poll is seen by it, and one that changes it after finds `scanning` set
    /// and takes the lock (waiting for this section) instead of coalescing. If `ready` says
    /// no, the item leaves the ready list (which is then empty) and its reference is kept
    /// for its next `queue` (`ReadyState::kept`, mirrored by `parked`: its `linked` flag is
    /// left set, so neither this drop nor that `queue` writes the item's line); the
    /// reference kept before, if any, is returned for the caller to drop once the lock is
    /// released. `Err` if `ready` said yes (the item stays queued). (loom:
    /// `coalescing_fast_path_vs_harvest_drop`, `settled_level_triggered_drop_vs_write`,
    /// `parked_item_requeue_vs_coalescing`.)
    ///
    /// [`single`]: Self::single
    #[inline]
    pub(crate) fn unlink_single_unless(
        &mut self,
        ready: impl FnOnce(&Item) -> bool,
    ) -> Result<Option<Arc<Item>>, ()> {
        self.mirrors.scanning.store(true, SeqCst);
        crate::loom::dekker_fence();
        let rd = &mut *self.rd;
        let item = rd.one.as_ref().or(rd.list.first()).ok_or(())?;
        let r = if ready(item) {
            Err(())
        } else {
            let gone = match rd.one.take() {
                Some(it) => Some(it),
                None => rd.list.pop(),
            };
            // The item kept before (another one: this one was queued) is off every list
            // and will no longer be parked: its flag says so itself, before the `parked`
            // store that releases it (see `Ready::is_parked`).
            if let Some(o) = &rd.kept {
                o.set_linked(false);
            }
            self.mirrors.parked.store(
                gone.as_ref().map_or(0, |g| Arc::as_ptr(g) as usize),
                Release,
            );
            self.mirrors.hint.store(false, Relaxed);
            self.mirrors.quiet.store(0, Relaxed);
            Ok(std::mem::replace(&mut rd.kept, gone))
        };
        // After the `parked` store (Release, as `done_scan` after its `linked = false`).
        self.mirrors.scanning.store(false, Release);
        r
    }

    /// `close`: everything queued, to be dropped after the lock is released.
    pub(crate) fn take_all(&mut self) -> Taken {
        let rd = &mut *self.rd;
        if let Some(k) = &rd.kept {
            k.set_linked(false);
        }
        self.mirrors.parked.store(0, Release);
        self.mirrors.quiet.store(0, Relaxed);
        (
            rd.one.take(),
            std::mem::take(&mut rd.list),
            std::mem::take(&mut rd.ovf),
            std::mem::take(&mut rd.spare),
            rd.kept.take(),
        )
    }
}

/// Guarded by `EpInner::ready` (the kernel's `ep->lock`).
///
/// `repr(C)`, `one` and `kept` first: the first queued item and the kept reference are
/// stored in the same cache line as the lock word itself (`EpInner`'s second group), so a
/// producer that queues an item into an empty list and the harvester that takes it (or
/// drops it) write no other line — not the heap buffer of `list`, which the two would
/// otherwise pass back and forth at every hand-off.
#[derive(Default)]
#[repr(C)]
pub(crate) struct ReadyState {
    /// The first item of the ready list, if it was queued into an empty list: the list in
    /// arrival order is `one` followed by `list`.
    one: Option<Arc<Item>>,
    /// The reference to the item the one-item harvest last dropped
    /// ([`ReadyGuard::unlink_single_unless`]), off the ready list though its `linked` flag
    /// stays set (`Ready::parked`): the next `queue` of that item takes it back instead of
    /// making a new one, so that a hand-off's drop and requeue touch neither the item's
    /// reference count nor its line. Next to `one`, on the lock's line. Dropped (its flag
    /// cleared) by `forget` (the item's delete or close), `take_all`, and the next drop of
    /// another item; taken back by `done_scan` if a wake put the item on the overflow list.
    kept: Option<Arc<Item>>,
    /// Items that may be ready, in arrival order after `one`; each at most once (`LINKED`).
    list: Vec<Arc<Item>>,
    /// While a scan runs (`ovf_active`), wakes are chained here in arrival order instead.
    ovf: Vec<Arc<Item>>,
    ovf_active: bool,
    /// The buffer the ready list takes while a scan runs (empty: wakes go to `ovf` then),
    /// and gives back at its end: the ready list's buffer and this one swap at each scan.
    spare: Vec<Arc<Item>>,
    /// How many items on `list` died (deleted, or their source closed) since the list was
    /// last compacted or handed to a harvester: see [`ReadyState::forget`].
    dead: usize,
}

/// Below this many dead entries, `forget` leaves them for the next harvest or compaction.
const COMPACT_MIN: usize = 32;

impl ReadyState {
    /// Queue `item` (the callback's step 4): on the overflow list while a scan is active,
    /// else at the tail of the ready list, unless it is already there. Returns whether the
    /// item was newly put on the ready list (not the overflow list). Only through
    /// [`ReadyGuard::queue`], which sets the ready hint.
    fn queue(&mut self, item: &Item) -> bool {
        if self.ovf_active {
            if !item.is_ovf() {
                if let Some(me) = item.me.upgrade() {
                    item.set_ovf(true);
                    self.ovf.push(me);
                }
            }
        } else if self.is_kept(item) {
            // Dropped by the one-item harvest, its flag left set: its kept reference goes
            // back on the list, and the item's line is not written.
            let me = self.kept.take();
            if self.one.is_none() && self.list.is_empty() {
                self.one = me;
            } else {
                self.list.extend(me);
            }
            return true;
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

    /// Whether `item` is the one [`kept`](Self::kept) (off the ready list).
    #[inline]
    fn is_kept(&self, item: &Item) -> bool {
        self.kept
            .as_ref()
            .is_some_and(|k| std::ptr::eq(Arc::as_ptr(k), item))
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
    fn forget(&mut self, item: &Item) -> Vec<Arc<Item>> {
        if self.is_kept(item) {
            // Off the ready list already; its flag was left set while kept.
            item.set_linked(false);
            return self.kept.take().into_iter().collect();
        }
        self.forget_queued(item)
    }

    /// `forget` on the ready list.
    fn forget_queued(&mut self, item: &Item) -> Vec<Arc<Item>> {
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

    /// `ep_start_scan`: hand the ready list to the harvester (`one`, then the rest, in
    /// its buffer), turn the overflow list on.
    fn start_scan(&mut self) -> Tx {
        debug_assert!(
            !self.ovf_active,
            "scans are serialised by EpInner::registry"
        );
        self.ovf_active = true;
        // The harvester meets (and drops) every dead entry of the list it takes.
        self.dead = 0;
        let spare = std::mem::take(&mut self.spare);
        Tx {
            one: self.one.take(),
            one_back: None,
            list: std::mem::replace(&mut self.list, spare),
            requeued: 0,
            next: 0,
        }
    }

    /// `ep_done_scan`: the ready list becomes `[leftovers] ++ [overflow arrivals] ++
    /// [requeued]`, where `requeued` is what the harvester put back (level-triggered
    /// items), each item once; the buffer the list used during the scan becomes the spare.
    /// `tx`'s consumed items are already dropped ([`Tx::drop_consumed`]).
    fn done_scan(&mut self, tx: &mut Tx) {
        self.ovf_active = false;
        debug_assert!(self.is_empty(), "wakes go to ovf during a scan");
        debug_assert_eq!(tx.requeued, tx.next, "consumed items are dropped first");
        if tx.one.is_none() && tx.next == tx.list.len() && self.ovf.is_empty() {
            // The common case: the list is exactly what was requeued, in the transfer
            // list's own buffer, `one` (if requeued) still first. Nothing moves.
            self.one = tx.one_back.take();
            std::mem::swap(&mut self.list, &mut tx.list);
            self.spare = std::mem::take(&mut tx.list);
            return;
        }
        // `[requeued] ++ [leftovers]` in the buffer: rotate the leftovers to the front,
        // and put the overflow arrivals and a requeued `one` between the two.
        let mut list = std::mem::take(&mut tx.list);
        let requeued = tx.requeued;
        list.rotate_left(requeued);
        let at = list.len() - requeued;
        let mut mid = Vec::new();
        for it in self.ovf.drain(..) {
            it.set_ovf(false);
            if self.kept.as_ref().is_some_and(|k| Arc::ptr_eq(k, &it)) {
                // Kept (flag still set): back on the list, unless it died meanwhile (then
                // `forget` drops the kept reference). The kept reference is not the last.
                if !it.is_dead() {
                    self.kept = None;
                    mid.push(it);
                }
            } else if !it.is_linked() && !it.is_dead() {
                it.set_linked(true);
                mid.push(it);
            }
        }
        mid.extend(tx.one_back.take());
        list.splice(at..at, mid);
        if let Some(one) = tx.one.take() {
            // Not consumed: the head of the leftovers.
            list.insert(0, one);
        }
        self.spare = std::mem::replace(&mut self.list, list);
    }
}

/// The harvester's transfer list (the kernel's `txlist`): the ready list's `one`, then
/// the rest, left in the ready list's own buffer and consumed from the front. An item the
/// harvester requeues (level-triggered, still ready) stays in the buffer, moved down to
/// the requeued prefix if an item before it was not requeued, so that the common harvest
/// (every item delivered and requeued) moves no item, and the buffer becomes the ready
/// list again as it is ([`ReadyState::done_scan`]).
///
/// ```text
/// list: [ requeued | consumed, not requeued | not looked at yet ]
///         0 ..       requeued ..              next .. len
/// ```
pub(crate) struct Tx {
    /// The ready list's first item, until the harvester takes it; left here, it is the
    /// head of the leftovers.
    pub(crate) one: Option<Arc<Item>>,
    /// `one`, taken and requeued: the head of the requeued items.
    pub(crate) one_back: Option<Arc<Item>>,
    list: Vec<Arc<Item>>,
    requeued: usize,
    next: usize,
}

impl Tx {
    /// The items not looked at yet, after `one`.
    #[inline]
    pub(crate) fn rest(&self) -> &[Arc<Item>] {
        &self.list[self.next..]
    }

    /// The next `run` items of [`rest`](Self::rest) were delivered and stay queued.
    #[inline]
    pub(crate) fn requeue_run(&mut self, run: usize) {
        debug_assert!(self.next + run <= self.list.len());
        if self.requeued != self.next {
            // Some item before them was not requeued: close the gap (order kept).
            for j in 0..run {
                self.list.swap(self.requeued + j, self.next + j);
            }
        }
        self.requeued += run;
        self.next += run;
    }

    /// The next item of [`rest`](Self::rest) was consumed and leaves the list (dropped by
    /// [`drop_consumed`](Self::drop_consumed)).
    #[inline]
    pub(crate) fn skip(&mut self) {
        debug_assert!(self.next < self.list.len());
        self.next += 1;
    }

    /// Drop the items consumed and not requeued (with `EpInner::ready` not held: an item's
    /// last reference may go here).
    #[inline]
    pub(crate) fn drop_consumed(&mut self) {
        if self.requeued != self.next {
            self.list.drain(self.requeued..self.next);
            self.next = self.requeued;
        }
    }
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::Ready;

    /// Everything a hand-off writes in `Ready` (the mirrors, the lock word, `one`, `kept`)
    /// lies in its first cache line (`Ready` starts a line pair in `EpInner`): the producer
    /// and the harvester pass that one line, not two.
    #[test]
    fn hand_off_writes_one_line() {
        let r = Ready::new();
        let base = &r as *const Ready as usize;
        let end = |p: usize, size: usize| p - base + size;
        assert!(end(&r.hint as *const _ as usize, 1) <= 64);
        assert!(end(&r.parked as *const _ as usize, 8) <= 64);
        // The lock word (std's futex mutex: the word, the poison flag, then the data).
        assert!(end(&r.list as *const _ as usize, 4) <= 64);
        let g = r.lock();
        assert!(end(&g.rd.one as *const _ as usize, 8) <= 64);
        assert!(end(&g.rd.kept as *const _ as usize, 8) <= 64);
    }
}
