//! The kernel's wait queue, in user space.
//!
//! A [`WaitQueue`] is a lock and a list of entries. An entry has an interest mask, an
//! exclusive flag and a wake [`Target`]: a parked thread, a task [`Waker`], or a
//! [`Callback`] (an epoll item's `ep_poll_callback`). [`WaitQueue::wake`] delivers a poll key
//! (`IN`, `OUT`, …): it visits the entries whose mask intersects the key, head to tail, and
//! stops after `nr_exclusive` exclusive entries accepted — `__wake_up_common` in
//! `kernel/sched/wait.c`.
//!
//! # LOCKING
//!
//! ```text
//! WaitQueue::list   Mutex   the entries, their masks and targets; nothing else.
//!
//! Order: a queue's lock may be taken while holding nothing, from inside
//!        Callback::wake (an epoll item), or under an fd view's `rung` (its mode switch,
//!        `set_mask_with`; no callback takes `rung`) — never the other way round: nothing
//!        waits for a WaitQueue lock while holding a lock that a Callback takes.
//!        Two WaitQueue locks are held at once only going up an epoll chain: an epoll item's
//!        callback wakes its epoll's `pollers` queue inline (the kernel's ep_poll_safewake
//!        from ep_poll_callback), so an outer epoll's item runs under the inner's queue
//!        lock, and so on upward. The epoll topology is acyclic at every instant (an item
//!        whose callback runs cannot be removed, so its link exists), hence so is this
//!        lock order. An epoll's `waiters` queue is also taken from inside its items'
//!        callbacks (to take a sleeper's entry off); it holds no callbacks, so nothing
//!        is ever taken under it.
//! Foreign code (Waker::wake, Waker::drop, Thread::unpark) never runs under the lock:
//!        it is collected into a WakeBatch and run after unlocking. The bell slot's
//!        hook (an fd view's post-wake) runs after unlocking too, from `wake_due_now`.
//! ```
//!
//! # The lock-free fast paths
//!
//! `interest` mirrors the union of every entry's mask; those bits are written only with the
//! lock held and read without it. An empty queue costs one atomic load; a key that no entry
//! wants costs one atomic load and no lock.
//!
//! Beside the list, one task waiting exclusively for `IN` (a notifier's first async reader)
//! may wait in the *task slot* (`slot`), lock-free; its `SLOT` bit in `interest` is set and
//! cleared by the slot's own protocol, without the lock, and kept by every locked update of
//! the list's bits. A wake with `IN` in its key serves the slot first (its task is ahead of
//! every queued reader: a reader does not take the slot while one is queued), then the list.
//! The Dekker pair below holds for the slot as for an entry: its owner sets `SLOT` with a
//! `SeqCst` RMW before it re-checks.
//!
//! Beside the list too, one edge-only fd view's fill hook may sit in the *bell slot*
//! (`bell`), lock-free: a write that fills (key `IN | KEY_FILLED`) rings it after the walk,
//! with no lock held. Its `BELL` bit stands for `KEY_FILLED` in `interest`; the owner sets
//! and clears it with its entry's mask, under the lock, and every locked update keeps it.
//!
//! The lost-wakeup argument (a Dekker pair, both sides `SeqCst`):
//!
//! ```text
//! waker:   change the state (SeqCst RMW)    ;  load `interest` (SeqCst) → skip if no bit
//! waiter:  add entry, store `interest` (SeqCst, under the lock) ; re-check the state (SeqCst)
//! ```
//!
//! In the single total order of `SeqCst` operations one of the two comes first: either the
//! waker sees the new interest bit and takes the lock (and finds the entry, since the entry
//! was linked before `interest` was published under the same lock), or the waiter's
//! re-check sees the new state and does not sleep.
//!
//! # Settled: the no-op `IN` wake skipped without the lock
//!
//! A notifier watched by an epoll item for `IN` would take this lock on every write, only
//! for the item's callback to find it already queued on the ready list (with nobody asleep
//! on the epoll and nobody polling it) and do nothing, as `ep_poll_callback` does for a
//! linked item. The `SETTLED` bit of `interest` lets such a write skip the lock: it means
//! "a wake with key `IN` is a no-op for every entry now". While it is set, the list's `IN`
//! bit is *moved* to it (cleared from `interest`: settling is one RMW from `IN` to
//! `SETTLED`, and every clear one RMW back), so that `IN` in `interest` means "an `IN`
//! entry a wake must visit" and a write's check is one test of `IN | SLOT`. Only
//! [`WaitQueue::interest`] puts `IN` back for its callers.
//!
//! ```text
//! set:    a wake with key IN, lock held, finds every IN entry a non-exclusive callback
//!         whose coalesces() is true (item linked, no scan, no sleeper, no poller); it
//!         moves IN to SETTLED (SeqCst RMW), then asks every coalesces() again; if one now
//!         says no, it moves SETTLED back to IN and walks as usual (the walk queues what
//!         must be queued, which covers the writes that skipped in between: their counts
//!         were written before they read SETTLED, so before the walk's callbacks ran).
//! clear:  (a) add() and any change of the entries (publish stores the bare union, IN
//!             included), under the lock, before the adder re-checks the source;
//!         (b) unsettle(), lock-free, by whoever is about to make a coalesces() false:
//!             a harvester before a poll after which it may unlink the item (after it
//!             published `scanning`: edge-triggered and one-shot items, and a second
//!             look at a level-triggered one found empty), an epoll that gains a poller
//!             (after it published the poller's interest), an fd view's sync that stores
//!             `mirror = false` (after that store, before it re-loads the source).
//!         Every clear moves SETTLED back to IN in one RMW (a compare-exchange loop:
//!         the slot's bit may move beside it).
//! skip:   wake(IN) loads interest (SeqCst) after the caller's state change (SeqCst RMW) and
//!         returns if neither IN nor SLOT is set: a settled queue has no IN bit.
//! ```
//!
//! Why no wake is lost: a skipping writer's RMW precedes its load of `SETTLED`, which
//! precedes the clear (a) or (b) in the single `SeqCst` order; the clear precedes the
//! clearer's re-check of the source (the adder's re-check, the harvester's poll), which
//! therefore sees the write. A set racing a clear is caught by the setter's second look:
//! the clearer published the state that makes `coalesces()` false (`scanning`, the poller's
//! interest) before clearing, so a set that comes after the clear sees that state and
//! undoes itself. loom: `tests::loom_epoll::settled_*`.

pub(crate) mod bell;
pub(crate) mod list;
pub(crate) mod slot;
pub(crate) mod spin;
pub(crate) mod task;
pub(crate) mod thread;

use std::mem::ManuallyDrop;
use std::sync::Arc;
use std::task::Waker;

use crate::events::{Events, KEY_EMPTIED, KEY_FILLED};
use crate::loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use crate::loom::sync::Mutex;
use bell::BellSlot;
use list::{Key, List, Visit};
use slot::{Claimed, TaskSlot, Ticket};
use thread::ThreadWaiter;

/// What an entry wakes.
pub(crate) enum Target {
    /// A thread parked in a blocking call. Woken entries are removed (`autoremove`).
    Thread(Arc<ThreadWaiter>),
    /// A task. Woken entries are removed.
    Task(Waker),
    /// An epoll item or another in-crate listener. Stays queued when woken.
    Callback(Arc<dyn Callback>),
}

impl std::fmt::Debug for Target {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Target::Thread(_) => "Thread",
            Target::Task(_) => "Task",
            Target::Callback(_) => "Callback",
        })
    }
}

/// An in-crate wake callback (the epoll item's `ep_poll_callback`).
pub(crate) trait Callback: Send + Sync {
    /// Called with the queue's lock held, for a key that intersects the entry's mask.
    /// It must not run foreign code; wakes go into `batch`. Returns whether the wake was
    /// accepted: for an exclusive entry, an accepted wake ends the walk.
    fn wake(&self, key: Events, batch: &mut WakeBatch) -> bool;

    /// The queue is going away (the kernel's `POLLFREE`): the entry has already been
    /// removed. Called without the queue's lock.
    fn detach(&self);

    /// A lock-free look (called with the queue's lock held): would a wake with key `IN`
    /// be a no-op for this entry now, and stay one until the entry's owner says otherwise
    /// by clearing the queue's settled mark ([`WaitQueue::unsettle`])? See "Settled" in
    /// the module docs. `false` (the default) never settles the queue.
    fn coalesces(&self) -> bool {
        false
    }
}

/// Work that must run after every lock is released.
pub(crate) trait PostWake: Send + Sync {
    /// Runs after the waking queue's lock is released.
    fn post_wake(&self, key: Events);
}

/// What a waiter waits for: one definition per operation (a notifier read, a notifier
/// write, an epoll harvest), shared by the blocking wait ([`thread::wait`]) and the async
/// wait ([`task::TaskWait`]).
///
/// # The hand-on rule
///
/// A wake that removes a thread's or a task's entry *claims* that waiter. A claimed waiter
/// owes the wake to someone else, and calls [`hand_on`](Self::hand_on) (which wakes the
/// next waiter if the state is still ready for what it waited for), when it leaves:
///
/// - without a success (a timeout, a dropped future): the wake was not used;
/// - with a success of the re-check right after registering: that success may have used a
///   unit that came with no wake (nobody was queued when it arrived), while a later wake
///   claimed the entry between the re-check and the unlinking. Without the hand-on, that
///   later unit sits next to a sleeping waiter (the loom models
///   `semaphore_two_readers_two_writes` and `loom_async_two_futures_two_units`).
///
/// A success after the claim was seen (woken, then it tried) used that wake: the unit the
/// wake stood for was there before the try, and every unit that comes while entries are
/// queued has a wake of its own. Nothing is handed on then, so the common path (woken,
/// success) wakes nobody else for nothing.
pub(crate) trait WaitFor {
    /// What the operation returns.
    type Output;
    /// Try the operation without waiting; `None` while it would wait.
    fn try_now(&mut self) -> Option<Self::Output>;
    /// A claimed waiter leaves (the type docs): wake the next waiter if still owed.
    fn hand_on(&mut self);
    /// A lock-free look, polled while a blocking wait spins before it registers: could
    /// `try_now` succeed now? A hint: a wrong `true` costs one failed try, a wrong `false`
    /// only delays the answer until the registered re-check.
    fn probe(&self) -> bool {
        true
    }
    /// The waited-on object's spin gauge (`spin::SpinGauge`), if its blocking waits spin.
    fn spin_gauge(&self) -> Option<&spin::SpinGauge> {
        None
    }
}

enum Deferred {
    Thread(Arc<ThreadWaiter>),
    Task(Waker),
    Post(Arc<dyn PostWake>, Events),
    /// Already run.
    Done,
}

/// Wakes collected under a lock, run after it is released. If one wake panics (a foreign
/// waker), the rest still run when the batch is dropped during unwinding.
///
/// A hand-off collects one or two wakes, so the first [`INLINE`](Self::INLINE) live in the
/// batch itself and only a larger batch allocates: the common wake costs no `malloc`/`free`.
/// An empty batch is a length check.
pub(crate) struct WakeBatch {
    /// `ManuallyDrop`, as `spill`: whenever the batch is dropped, `Drop` has run every
    /// item it holds (each slot is then `Done`, which owns nothing), so an empty batch's
    /// drop is two compares instead of the drop glue of three fields. (A foreign wake that
    /// panics out of `Drop` itself leaks what was left in the batch instead of dropping it
    /// unrun: memory on a path that has already lost those wakes either way.)
    inline: ManuallyDrop<[Deferred; WakeBatch::INLINE]>,
    /// Items past the inline ones, in order (freed by `Drop` if it was used).
    spill: ManuallyDrop<Vec<Deferred>>,
    /// Number of items pushed (inline first, then spill).
    len: usize,
    /// The next item to run; the ones before it have run (or are running).
    next: usize,
}

impl Default for WakeBatch {
    fn default() -> Self {
        Self::new()
    }
}

impl WakeBatch {
    const INLINE: usize = 2;

    #[inline]
    pub(crate) fn new() -> Self {
        WakeBatch {
            inline: ManuallyDrop::new([Deferred::Done, Deferred::Done]),
            spill: ManuallyDrop::new(Vec::new()),
            len: 0,
            next: 0,
        }
    }

    fn push(&mut self, d: Deferred) {
        if self.len < Self::INLINE {
            self.inline[self.len] = d;
        } else {
            self.spill.push(d);
        }
        self.len += 1;
    }

    pub(crate) fn push_post(&mut self, p: Arc<dyn PostWake>, key: Events) {
        self.push(Deferred::Post(p, key));
    }

    /// Runs every collected wake, in the order collected. Must be called with no lock held.
    #[inline]
    pub(crate) fn run(mut self) {
        if self.len != 0 {
            self.run_all();
        }
    }

    fn slot(&mut self, i: usize) -> &mut Deferred {
        if i < Self::INLINE {
            &mut self.inline[i]
        } else {
            &mut self.spill[i - Self::INLINE]
        }
    }

    fn run_all(&mut self) {
        // One at a time, the cursor moved first, so that a panic leaves exactly the
        // untouched remainder for `Drop` to run.
        while self.next < self.len {
            let i = self.next;
            self.next += 1;
            match std::mem::replace(self.slot(i), Deferred::Done) {
                Deferred::Thread(t) => t.unpark(),
                Deferred::Task(w) => w.wake(),
                Deferred::Post(p, key) => p.post_wake(key),
                Deferred::Done => {}
            }
        }
    }
}

impl Drop for WakeBatch {
    fn drop(&mut self) {
        // Only something left if `run` was never called or a wake panicked: deliver the rest
        // so that nothing owed is lost.
        if self.next < self.len {
            self.run_all();
        }
        // Every slot is `Done` now (owns nothing); only the spill's buffer is left to free.
        if self.len > Self::INLINE {
            drop(std::mem::take(&mut *self.spill));
        }
    }
}

/// The bit of `WaitQueue::interest` that says a wake with key `IN` is a no-op for every
/// entry now (module docs, "Settled"). The list's `IN` bit is moved here while it is set:
/// never both.
///
/// It and [`SLOT`] sit in the low 32 bits, in two that no `EPOLL*` flag uses (so that a
/// write's check, `IN | SLOT`, is one `test` against a 32-bit immediate, no 64-bit mask
/// to build); [`OWN_BITS`] keeps them out of every entry's mask.
const SETTLED: u64 = 1 << 22;

/// `IN` in `WaitQueue::interest`.
const IN: u64 = Events::IN.bits() as u64;

/// The bit of `WaitQueue::interest` that says a task is armed in the task slot (waiting
/// exclusively for `IN`; `slot`'s module docs). Set by the slot's owner, cleared by
/// whoever takes its waker; `publish` keeps it.
const SLOT: u64 = 1 << 23;

/// The bit of `WaitQueue::interest` that says an edge-only fd view's hook is armed in the
/// bell slot (it stands for `KEY_FILLED`; `bell`'s module docs). Set by the owner with its
/// entry's mask under the lock, cleared by the owner before it leaves; `publish` keeps it.
/// In the low 32 bits, in one that no `EPOLL*` flag and no key-only bit (`KEY_*`) uses.
const BELL: u64 = 1 << 21;

/// Carried in the stored mask of every thread or task entry that waits exclusively for
/// `IN` (a blocked or queued reader). Never part of a key, so it matches no wake; in the
/// union it tells a newcomer that a reader is queued ahead of it, so it does not take the
/// task slot (which is woken first) and jump the queue.
const QUEUED_READER: Events = Events::from_bits_retain(1 << 24);

/// The queue's own bits of `interest` ([`SETTLED`], [`SLOT`], [`BELL`], [`QUEUED_READER`]), which a
/// caller's mask never brings in: an epoll item's interest keeps undefined bits as given
/// (as the kernel does), and none of these is ever part of a wake key, so dropping them
/// from a stored mask changes no wake. Only `stored_mask` adds `QUEUED_READER`.
pub(crate) const OWN_BITS: Events =
    Events::from_bits_retain((SETTLED | SLOT | BELL) as u32 | QUEUED_READER.bits());

// The queue's own bits are no key's: a key bit among them would be read as one of them
// (the epoll's `KEY_KSLEEP` is checked beside its definition).
const _: () = assert!(OWN_BITS.bits() & (KEY_FILLED.bits() | KEY_EMPTIED.bits()) == 0);

/// What a wake's fast path saw ([`WaitQueue::wake_due`]): someone to visit.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Due(std::num::NonZeroU64);

/// `KEY_FILLED` in `WaitQueue::interest` (an edge-only fd view's hook listens for it).
const FILLED: u64 = KEY_FILLED.bits() as u64;

/// Marks a [`Due`] from [`WaitQueue::wake_due_write`] for a write that filled: above the
/// 32 bits `interest` uses.
const DUE_FILLED: u64 = 1 << 40;

/// An entry: exclusive flag + target. The mask lives in the list (it feeds `interest`).
#[derive(Debug)]
struct Entry {
    exclusive: bool,
    target: Target,
}

/// The locked wait queue. See the module docs for the LOCKING rules.
///
/// Aligned to a cache line: a queue is written by whoever waits (its lock, `interest`), and
/// the state it guards (a notifier's count) is written by whoever notifies; on one line the
/// two would bounce it between them for nothing, and a load of `interest` right after a
/// locked operation on that state would wait for the operation to finish.
#[derive(Debug)]
#[cfg_attr(not(evfd_loom), repr(align(64)))]
pub(crate) struct WaitQueue {
    /// Union of every entry's mask, written only with `list` locked (SeqCst), and the
    /// queue's own bits ([`OWN_BITS`], which no stored mask carries but `QUEUED_READER`):
    /// [`SETTLED`], which takes the place of `IN` (moved there with `list` locked, moved
    /// back by anyone; module docs), and [`SLOT`] (the slot's protocol).
    /// Read lock-free by [`WaitQueue::wake`] (SeqCst load; pairs with the state change's
    /// SeqCst RMW).
    interest: AtomicU64,
    /// The entries. Guarded by itself.
    list: Mutex<List<Entry>>,
    /// One task waiting exclusively for `IN`, outside the list (`SLOT`; `slot`'s docs).
    slot: TaskSlot,
    /// One edge-only fd view's fill hook, outside the list (`BELL`; `bell`'s docs).
    bell: BellSlot,
    /// How many of this queue's next async waits that would yield once register at once
    /// instead (`task`, "Yield once": set when a yield let its task move to another
    /// thread). std's atomic, relaxed, also under loom: only a heuristic reads it, and a
    /// lost update only changes which wait yields.
    yield_skip: std::sync::atomic::AtomicU32,
    /// Test-only: how many wakes took the lock (the fast path did not answer).
    #[cfg(test)]
    pub(crate) slow_wakes: std::sync::atomic::AtomicUsize,
}

impl Default for WaitQueue {
    fn default() -> Self {
        Self::new()
    }
}

impl WaitQueue {
    pub(crate) fn new() -> Self {
        WaitQueue {
            interest: AtomicU64::new(0),
            list: Mutex::new(List::new()),
            slot: TaskSlot::new(),
            bell: BellSlot::new(),
            yield_skip: std::sync::atomic::AtomicU32::new(0),
            #[cfg(test)]
            slow_wakes: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    /// Whether an async wait that would yield once may (`task`, "Yield once"): no skip
    /// left, else one skip used up and `false`.
    #[inline]
    pub(crate) fn may_yield(&self) -> bool {
        use std::sync::atomic::Ordering::Relaxed;
        let skip = self.yield_skip.load(Relaxed);
        if skip == 0 {
            return true;
        }
        self.yield_skip.store(skip - 1, Relaxed);
        false
    }

    /// A yield let its task move to another thread: the next `YIELD_SKIP` waits that
    /// would yield register at once (`task`, "Yield once").
    #[cold]
    pub(crate) fn yield_moved(&self) {
        self.yield_skip
            .store(task::YIELD_SKIP, std::sync::atomic::Ordering::Relaxed);
    }

    /// The union of the entries' masks, `IN` included if a task is armed in the slot and
    /// `KEY_FILLED` if a hook is armed in the bell slot (a snapshot).
    #[inline]
    pub(crate) fn interest(&self) -> Events {
        let i = self.interest.load(SeqCst);
        // `SETTLED` and `SLOT`, the queue's own bits, stand for `IN` (the list's, the
        // slot's); `BELL` for `KEY_FILLED`.
        let i = i | u64::from(i & (SETTLED | SLOT) != 0) | (u64::from(i & BELL != 0) * FILLED);
        Events::from_bits_retain(i as u32).difference(OWN_BITS)
    }

    /// Whether nobody waits for anything: [`interest`](Self::interest) is empty (one
    /// load and one test; `SETTLED` and `SLOT` stand for `IN`, so only `QUEUED_READER`,
    /// never alone, is left out).
    #[inline]
    pub(crate) fn wants_nothing(&self) -> bool {
        self.interest.load(SeqCst) & !u64::from(QUEUED_READER.bits()) == 0
    }

    /// Must be called with `list` locked. Clears [`SETTLED`] (the entries changed) and keeps
    /// [`SLOT`] and [`BELL`] (not the list's).
    fn publish(&self, l: &List<Entry>) {
        let u = u64::from(l.union().bits());
        let mut cur = self.interest.load(SeqCst);
        while cur != u | (cur & (SLOT | BELL)) {
            match self.interest.compare_exchange_weak(
                cur,
                u | (cur & (SLOT | BELL)),
                SeqCst,
                SeqCst,
            ) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Put a task waiting exclusively for `IN` in the task slot, if it is free and no
    /// reader is queued in the list ahead of it (`ahead`: the task was registered before
    /// them, and keeps its turn). The caller re-checks its operation after (the waiter half
    /// of the Dekker pair: `SLOT` is set with a `SeqCst` RMW here). `Err(waker)` to queue
    /// in the list instead.
    pub(crate) fn arm_task(&self, waker: Waker, ahead: bool) -> Result<Ticket, Waker> {
        if !ahead && self.interest.load(SeqCst) & u64::from(QUEUED_READER.bits()) != 0 {
            return Err(waker);
        }
        let t = self.slot.arm(waker)?;
        self.interest.fetch_or(SLOT, SeqCst);
        crate::loom::dekker_fence();
        Ok(t)
    }

    /// The slot's owner leaves: its waker back (the caller drops it after everything else),
    /// or `Claimed` if a wake took it first (`slot`'s docs).
    pub(crate) fn disarm_task(&self, t: Ticket) -> Result<Waker, Claimed> {
        self.slot.disarm(t, || self.clear_slot_bit())
    }

    fn clear_slot_bit(&self) {
        self.interest.fetch_and(!SLOT, SeqCst);
    }

    /// Claim the slot's task, if one is armed: its waker, to wake after everything else.
    #[inline]
    fn claim_slot(&self) -> Option<Waker> {
        self.slot.claim(|| self.clear_slot_bit())
    }

    /// A wake whose key has `IN`, with reader budget `nr`: the slot's task first (it is
    /// ahead of every queued reader, see `QUEUED_READER`). Returns the budget left.
    #[inline]
    fn wake_slot(&self, nr: usize, batch: &mut WakeBatch) -> usize {
        if nr == 0 {
            return 0;
        }
        match self.claim_slot() {
            Some(w) => {
                batch.push(Deferred::Task(w));
                nr - 1
            }
            None => nr,
        }
    }

    /// The mask an entry is stored with: an exclusive callback's carries `EXCLUSIVE`
    /// (never part of a wake key, so it matches nothing: the union then tells
    /// `wake_locked` whether any is queued); an exclusive reader's carries
    /// `QUEUED_READER`. No other of the queue's own bits ([`OWN_BITS`]).
    fn stored_mask(mask: Events, exclusive: bool, target: &Target) -> Events {
        let mask = mask.difference(OWN_BITS);
        match target {
            Target::Callback(_) if exclusive => mask | Events::EXCLUSIVE,
            Target::Thread(_) | Target::Task(_) if exclusive && mask.intersects(Events::IN) => {
                mask | QUEUED_READER
            }
            _ => mask,
        }
    }

    /// Clear the settled mark (module docs, "Settled"): called lock-free by whoever is
    /// about to make an entry's `coalesces()` false, after publishing what makes it false.
    #[inline]
    pub(crate) fn unsettle(&self) {
        if self.interest.load(SeqCst) & SETTLED != 0 {
            self.move_settled_to_in();
        }
        // The clearer's half of the Dekker pair with a skipping writer (module docs,
        // "Settled"): the clear, then the clearer's re-check of the source.
        crate::loom::dekker_fence();
    }

    /// Move [`SETTLED`] back to `IN`, if it is set: one RMW (module docs, "Settled").
    #[cold]
    fn move_settled_to_in(&self) {
        self.move_bit(SETTLED, IN);
    }

    /// Move `IN` to [`SETTLED`], unless it is there already (module docs, "Settled"). Must
    /// be called with `list` locked and an `IN` entry in it, so that one of the two is set.
    fn move_in_to_settled(&self) {
        debug_assert_ne!(self.interest.load(SeqCst) & (IN | SETTLED), 0);
        self.move_bit(IN, SETTLED);
    }

    /// While bit `from` is set, replace it with bit `to` in one compare-exchange (the
    /// slot's bit may move beside it, lock-free).
    fn move_bit(&self, from: u64, to: u64) {
        let mut cur = self.interest.load(SeqCst);
        while cur & from != 0 {
            match self
                .interest
                .compare_exchange_weak(cur, (cur & !from) | to, SeqCst, SeqCst)
            {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
    }

    /// Whether a wake with key `IN` is known to be a no-op (tests).
    #[cfg(test)]
    pub(crate) fn is_settled(&self) -> bool {
        self.interest.load(SeqCst) & SETTLED != 0
    }

    /// The queue's own bits of `interest` and its `IN` bit, as stored: (`IN`,
    /// [`SETTLED`], [`SLOT`]) (tests).
    #[cfg(test)]
    pub(crate) fn stored_bits(&self) -> (bool, bool, bool) {
        let i = self.interest.load(SeqCst);
        (i & IN != 0, i & SETTLED != 0, i & SLOT != 0)
    }

    /// The settle attempt of a wake with key `IN` (module docs, "Settled"). Must be called
    /// with `list` locked. Returns `true` if the queue is settled: the wake is a no-op.
    fn try_settle(&self, l: &List<Entry>) -> bool {
        // Every `IN` entry coalesces, and there is at least one (an empty queue needs no
        // mark: its fast path already skips the lock).
        let all = || {
            let mut any = false;
            for (mask, e) in l.iter() {
                if !mask.intersects(Events::IN) {
                    continue;
                }
                match &e.target {
                    Target::Callback(cb) if !e.exclusive && cb.coalesces() => any = true,
                    _ => return false,
                }
            }
            any
        };
        if !all() {
            return false;
        }
        self.move_in_to_settled();
        crate::loom::dekker_fence();
        if all() {
            return true;
        }
        self.move_settled_to_in();
        false
    }

    /// Add an entry. `front` inserts at the head (the kernel's `add_wait_queue` for
    /// non-exclusive entries, and epoll's LIFO sleepers); otherwise at the tail.
    pub(crate) fn add(&self, mask: Events, exclusive: bool, front: bool, target: Target) -> Key {
        let mask = Self::stored_mask(mask, exclusive, &target);
        let mut l = crate::loom::lock(&self.list);
        let e = Entry { exclusive, target };
        let k = if front {
            l.push_front(mask, e)
        } else {
            l.push_back(mask, e)
        };
        // SeqCst store under the lock: the waiter half of the Dekker pair (module docs). A
        // new entry may not coalesce: the queue is not settled any more.
        let old = self.interest.fetch_or(u64::from(mask.bits()), SeqCst);
        if old & SETTLED != 0 {
            self.move_settled_to_in();
        }
        drop(l);
        crate::loom::dekker_fence();
        k
    }

    /// Remove an entry. Returns `true` if it was still queued, `false` if it had already been
    /// removed — for a thread or task entry, that means a wake removed it: it was notified.
    pub(crate) fn remove(&self, key: Key) -> bool {
        self.remove_with(key, || ())
    }

    /// As [`remove`](Self::remove), running `also` under the same hold of the lock; what
    /// it returns is dropped after unlocking, with the entry's target.
    fn remove_with<R>(&self, key: Key, also: impl FnOnce() -> R) -> bool {
        let (removed, _also) = {
            let mut l = crate::loom::lock(&self.list);
            let also = also();
            let r = l.remove(key);
            if r.is_some() {
                self.publish(&l);
            }
            (r, also)
        };
        // The target (a Waker, an Arc) is dropped here, after unlocking.
        removed.is_some()
    }

    /// Change a live entry's mask. Returns `false` if the entry is gone.
    pub(crate) fn set_mask(&self, key: Key, mask: Events) -> bool {
        self.set_mask_with(key, mask, || {})
    }

    /// As [`set_mask`](Self::set_mask), running `also` under the same hold of the lock (an
    /// fd view switches its hook's mode with its mask: every wake sees both or neither).
    pub(crate) fn set_mask_with(&self, key: Key, mask: Events, also: impl FnOnce()) -> bool {
        let mut l = crate::loom::lock(&self.list);
        also();
        let ok = self.set_mask_locked(&mut l, key, mask);
        drop(l);
        crate::loom::dekker_fence();
        ok
    }

    /// With `list` locked (`l`): entry `key`'s mask to `mask`, its marker kept (see
    /// `stored_mask`), and the union published. `false` if the entry is gone.
    fn set_mask_locked(&self, l: &mut List<Entry>, key: Key, mask: Events) -> bool {
        let mask = match l.get_mut(key) {
            Some(e) => Self::stored_mask(mask, e.exclusive, &e.target),
            None => mask,
        };
        let ok = l.set_mask(key, mask);
        if ok {
            self.publish(l);
        }
        ok
    }

    /// Replace a queued task entry's waker with `waker` (cloned by the caller before this
    /// call, so no foreign `clone` runs under the lock). Returns `Err(waker)` if the entry is
    /// gone (it was woken), so that the caller can re-register with it instead of cloning
    /// again. The old waker is dropped after unlocking.
    pub(crate) fn update_waker(&self, key: Key, waker: Waker) -> Result<(), Waker> {
        let old;
        {
            let mut l = crate::loom::lock(&self.list);
            match l.get_mut(key) {
                Some(Entry {
                    target: Target::Task(w),
                    ..
                }) => old = std::mem::replace(w, waker),
                Some(_) => unreachable!("update_waker on a non-task entry"),
                None => return Err(waker),
            }
        }
        drop(old);
        Ok(())
    }

    /// Wake the entries whose mask intersects `key`, head to tail. Two budgets, as in the
    /// kernel where an eventfd's blocked readers wait non-exclusively:
    ///
    /// * threads and tasks waiting exclusively (evfd's blocked readers, which take turns
    ///   instead of all waking): at most `nr_exclusive` are woken;
    /// * `EXCLUSIVE` epoll items (exclusive callbacks): at most one accepts per wake,
    ///   whatever `nr_exclusive` is (the kernel wakes an eventfd's queue with
    ///   `nr_exclusive = 1`; docs/semantics.md §4.8).
    ///
    /// Neither budget is spent by the other: an `EXCLUSIVE` item never takes a blocked
    /// reader's wake, and a reader never hides the wake from an `EXCLUSIVE` item behind it.
    /// Non-exclusive entries are all woken. The walk stops once both budgets are spent (or
    /// the reader budget is, and no exclusive callback is queued). Foreign wakes run after
    /// unlocking.
    #[inline]
    pub(crate) fn wake(&self, key: Events, nr_exclusive: usize) {
        self.wake_counted(key, || nr_exclusive);
    }

    /// As [`wake`](Self::wake), with the exclusive budget worked out only if someone is to
    /// be woken (a notifier's write looks at its mode for it: not on the fast path).
    #[inline]
    pub(crate) fn wake_counted(&self, key: Events, nr_exclusive: impl FnOnce() -> usize) {
        if let Some(due) = self.wake_due(key) {
            self.wake_due_now(key, nr_exclusive(), due);
        }
    }

    /// A fill's ring of the bell slot's hook, if one is armed (`bell`'s module docs): a
    /// fresh load of `interest`, after the list's walk, so that a view whose hook moved to
    /// the slot under the lock before this wake took it still hears the fill. Called with
    /// no lock held.
    #[inline]
    fn ring_bell(&self, key: Events) {
        if self.interest.load(SeqCst) & BELL != 0 {
            self.bell.ring(key);
        }
    }

    /// Put an fd view's entry (`key`) in fill mode (`crate::fd`): its `hook` in the bell
    /// slot if it is free, the entry's mask emptied then; else the entry listens for
    /// `KEY_FILLED` in the list. `also` runs under the same hold of the lock (the view's
    /// mode flag). Returns whether the hook is in the slot (then the view leaves with
    /// [`leave_fill_mode`](Self::leave_fill_mode)).
    pub(crate) fn enter_fill_mode(
        &self,
        key: Key,
        hook: Arc<dyn PostWake>,
        also: impl FnOnce(),
    ) -> bool {
        let mut l = crate::loom::lock(&self.list);
        also();
        let (in_slot, spare) = match self.bell.arm(hook) {
            Ok(()) => {
                // Before the mask leaves the list: a wake sees the hook in one place or
                // the other (the bell's ring loads `interest` after its walk).
                self.interest.fetch_or(BELL, SeqCst);
                (true, None)
            }
            Err(hook) => (false, Some(hook)),
        };
        let mask = if in_slot { Events::empty() } else { KEY_FILLED };
        self.set_mask_locked(&mut l, key, mask);
        drop(l);
        crate::loom::dekker_fence();
        drop(spare);
        in_slot
    }

    /// An fd view's entry leaves fill mode, listening with `mask` again, `also` under the
    /// same hold of the lock (as [`set_mask_with`](Self::set_mask_with)). If its hook is in
    /// the bell slot (`in_slot`, as [`enter_fill_mode`](Self::enter_fill_mode) said), the
    /// hook is taken out (dropped after the unlock) or left to the ring in flight.
    pub(crate) fn leave_fill_mode(
        &self,
        key: Key,
        mask: Events,
        in_slot: bool,
        also: impl FnOnce(),
    ) -> bool {
        let mut hook = None;
        let ok = self.set_mask_with(key, mask, || {
            also();
            if in_slot {
                hook = self.disarm_bell_locked();
            }
        });
        drop(hook);
        ok
    }

    /// The bell slot's owner is going away (its view's drop): the hook out of the slot, as
    /// [`leave_fill_mode`](Self::leave_fill_mode), and the entry removed.
    pub(crate) fn remove_from_bell(&self, key: Key) -> bool {
        self.remove_with(key, || self.disarm_bell_locked())
    }

    /// With `list` locked, the bell slot's owner leaves: `BELL` cleared first (before the
    /// slot can be armed again, so that no later owner's bit is cleared), then the hook out
    /// of the slot, for the caller to drop after unlocking (`None`: a ring in flight drops
    /// it).
    fn disarm_bell_locked(&self) -> Option<Arc<dyn PostWake>> {
        self.interest.fetch_and(!BELL, SeqCst);
        self.bell.disarm()
    }

    /// The fast path of [`wake`](Self::wake): whether a wake with `key` has anyone to
    /// visit, and if so what it saw ([`Due`]), for [`wake_due_now`](Self::wake_due_now).
    /// Split from it so that a hot caller can make the rest a tail call of its own
    /// (`Notifier::read`, `Notifier::write`: no stack frame on their fast paths).
    #[inline(always)]
    pub(crate) fn wake_due(&self, key: Events) -> Option<Due> {
        // The SeqCst load pairs with the waiter's SeqCst store (module docs), and with the
        // clears of `SETTLED` ("Settled").
        crate::loom::dekker_fence();
        let i = self.interest.load(SeqCst);
        // `key` is a constant at nearly every call site, so this folds to one test: nobody
        // for `key` (a settled list has no `IN` bit), (key `IN`) no task in the slot, and
        // (key `KEY_FILLED`) no hook in the bell slot.
        let slot = if key.intersects(Events::IN) { SLOT } else { 0 };
        let bell = if key.contains(KEY_FILLED) { BELL } else { 0 };
        if i & (u64::from(key.bits()) | slot | bell) == 0 {
            return None;
        }
        // Not 0: a bit of the test above is set.
        std::num::NonZeroU64::new(i).map(Due)
    }

    /// [`wake_due`](Self::wake_due) for a write's `IN`, told whether the write took the
    /// count from 0 (`filled`): then the key is `IN | KEY_FILLED`, which edge-only fd views
    /// listen for (`crate::fd`, "Edge-only views of a notifier"), and the [`Due`] says so
    /// to [`wake_due_now`](Self::wake_due_now). One test as `wake_due`'s, against a mask
    /// picked by `filled`.
    #[inline(always)]
    pub(crate) fn wake_due_write(&self, filled: bool) -> Option<Due> {
        crate::loom::dekker_fence();
        let i = self.interest.load(SeqCst);
        // `wake_due(IN)`'s test first, so that a queue nobody waits on costs it one more
        // test of the same word.
        if i & (IN | SLOT | FILLED | BELL) == 0 {
            return None;
        }
        if i & (IN | SLOT) == 0 {
            // Only edge-only views listen.
            return Self::fill_only(i, filled);
        }
        Self::marked(i, filled)
    }

    /// [`wake_due_write`](Self::wake_due_write) when only edge-only views listen: due only
    /// if the write filled. Out of line: rare next to readers' waits.
    #[inline(never)]
    fn fill_only(i: u64, filled: bool) -> Option<Due> {
        if filled {
            Self::marked(i, true)
        } else {
            None
        }
    }

    /// A write's [`Due`]: the interest it saw, marked if it filled. Marked even when no
    /// fill listener was seen: an edge-only view that starts to listen under the lock
    /// before this wake takes it still hears the fill. `i` is not 0 (a bit of the caller's
    /// test is set).
    #[inline(always)]
    fn marked(i: u64, filled: bool) -> Option<Due> {
        std::num::NonZeroU64::new(i | (u64::from(filled) * DUE_FILLED)).map(Due)
    }

    /// The rest of a wake with `key` that [`wake_due`](Self::wake_due) (or
    /// [`wake_due_write`](Self::wake_due_write), with `key` `IN`) found due (the same
    /// `key`; `KEY_FILLED` added if the `Due` says the write filled).
    #[inline]
    pub(crate) fn wake_due_now(&self, key: Events, nr_exclusive: usize, due: Due) {
        let i = due.0.get();
        let key = if i & DUE_FILLED != 0 {
            key | KEY_FILLED
        } else {
            key
        };
        let slot = key.intersects(Events::IN) && i & SLOT != 0;
        let list = i & u64::from(key.bits()) != 0;
        self.wake_slow(key, nr_exclusive, slot, list);
        if key.contains(KEY_FILLED) {
            self.ring_bell(key);
        }
    }

    /// As [`wake`](Self::wake), but the foreign wakes go into `batch` (the caller runs it
    /// after releasing its own locks).
    #[inline]
    pub(crate) fn wake_into(&self, key: Events, nr_exclusive: usize, batch: &mut WakeBatch) {
        // The bell slot's ring runs its hook at once: not under a caller's lock.
        debug_assert!(!key.contains(KEY_FILLED), "a fill's wake under a lock");
        crate::loom::dekker_fence();
        let i = self.interest.load(SeqCst);
        let mut nr = nr_exclusive;
        if key.intersects(Events::IN) && i & SLOT != 0 {
            nr = self.wake_slot(nr, batch);
        }
        if i & u64::from(key.bits()) != 0 {
            self.wake_locked(key, nr, batch);
        }
    }

    /// A wake that has someone to wake: the slot's task (`slot`), then the list (`list`:
    /// it has an entry for `key` and is not settled).
    fn wake_slow(&self, key: Events, nr_exclusive: usize, slot: bool, list: bool) {
        if !list {
            // Only the slot's task (the one-reader hand-off), or only the bell slot's hook
            // (the caller rings it): no batch to fill and run.
            if slot && nr_exclusive != 0 {
                if let Some(w) = self.claim_slot() {
                    w.wake();
                }
            }
            return;
        }
        let mut batch = WakeBatch::new();
        let mut nr = nr_exclusive;
        if slot {
            nr = self.wake_slot(nr, &mut batch);
        }
        #[cfg(test)]
        self.slow_wakes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        self.wake_locked(key, nr, &mut batch);
        batch.run();
    }

    /// The list's walk, collecting into `batch`. Takes and releases the lock. (The task
    /// slot is served by the callers, first.)
    fn wake_locked(&self, key: Events, nr_exclusive: usize, batch: &mut WakeBatch) {
        // The reader budget (exclusive threads and tasks).
        let mut nr = nr_exclusive;
        // An exclusive callback accepted this wake: later exclusive callbacks are skipped,
        // as if the kernel's walk had stopped there (see `wake`).
        let mut callback_taken = false;
        let mut l = crate::loom::lock(&self.list);
        let mut key = key;
        if key.difference(KEY_FILLED) == Events::IN && self.try_settle(&l) {
            // Settled: a no-op for every `IN` entry. A fill still rings the edge-only
            // views (their entries want `KEY_FILLED` alone): walk for them only.
            if !key.contains(KEY_FILLED) || u64::from(l.union().bits()) & FILLED == 0 {
                return;
            }
            key = KEY_FILLED;
        }
        let before = l.len();
        // Is any exclusive callback queued? (Its mask carries `EXCLUSIVE`, see `add`;
        // `interest` is exact while the lock is held.)
        let callbacks_left = self.interest().contains(Events::EXCLUSIVE);
        l.walk(
            batch,
            |mask, e, batch| {
                if !mask.intersects(key) {
                    return Visit::Keep;
                }
                // Threads and tasks are removed when woken (autoremove_wake_function); a
                // callback decides whether it accepted, and stays.
                let remove = match &e.target {
                    Target::Callback(cb) => {
                        if !(e.exclusive && callback_taken) {
                            let accepted = cb.wake(key, batch);
                            callback_taken |= e.exclusive && accepted;
                        }
                        false
                    }
                    Target::Thread(_) | Target::Task(_) if e.exclusive => {
                        let take = nr > 0;
                        nr = nr.saturating_sub(1);
                        take
                    }
                    Target::Thread(_) | Target::Task(_) => true,
                };
                let stop = nr == 0 && (callback_taken || !callbacks_left);
                match (remove, stop) {
                    (false, false) => Visit::Keep,
                    (false, true) => Visit::Stop,
                    (true, false) => Visit::Remove,
                    (true, true) => Visit::RemoveStop,
                }
            },
            |e, batch| match e.target {
                Target::Thread(t) => {
                    // Under the lock, so a waiter that finds its entry gone also finds
                    // the flag set.
                    t.set_notified();
                    batch.push(Deferred::Thread(t));
                }
                Target::Task(w) => batch.push(Deferred::Task(w)),
                Target::Callback(_) => unreachable!("callbacks are never auto-removed"),
            },
        );
        if l.len() != before {
            // Threads or tasks were removed: their bits may leave `interest`.
            self.publish(&l);
        }
    }

    /// Remove every entry (the source is going away) and tell callbacks so, after unlocking.
    ///
    /// Only callbacks can be queued here: a blocked thread or a pending task holds a handle
    /// to the source, so the source cannot go away under it. One found here is a bug, a
    /// debug assertion; release builds still wake it (after unlocking) rather than leave
    /// it asleep for ever.
    pub(crate) fn detach_all(&self) {
        let drained = {
            let mut l = crate::loom::lock(&self.list);
            let d = l.drain();
            self.publish(&l);
            d
        };
        let mut batch = WakeBatch::new();
        if self.slot.is_armed() {
            debug_assert!(false, "a pending task outlived its source's handles");
            self.wake_slot(1, &mut batch);
        }
        for (_, e) in drained {
            match e.target {
                Target::Callback(cb) => cb.detach(),
                Target::Thread(t) => {
                    debug_assert!(false, "a blocked thread outlived its source's handles");
                    t.set_notified();
                    batch.push(Deferred::Thread(t));
                }
                Target::Task(w) => {
                    debug_assert!(false, "a pending task outlived its source's handles");
                    batch.push(Deferred::Task(w));
                }
            }
        }
        batch.run();
    }

    /// Number of entries in the list, the slot's task not counted (tests).
    #[cfg(test)]
    pub(crate) fn list_len(&self) -> usize {
        crate::loom::lock(&self.list).len()
    }

    /// Number of entries, the slot's task included (a snapshot, for tests and `Debug`).
    pub(crate) fn len(&self) -> usize {
        crate::loom::lock(&self.list).len() + usize::from(self.slot.is_armed())
    }
}

impl Drop for WaitQueue {
    /// Every owner empties its queue before dropping it: a notifier's and an epoll's
    /// `pollers` by `detach_all` when the last handle goes, an epoll's `waiters` by the
    /// waits themselves (which hold a handle). An entry left here would be a waiter that
    /// nobody will ever wake: a bug, so a debug assertion rather than a silent wake.
    fn drop(&mut self) {
        if cfg!(debug_assertions) && !std::thread::panicking() {
            let left = self.len();
            debug_assert_eq!(
                left, 0,
                "a WaitQueue dropped with {left} entries still queued"
            );
        }
    }
}

#[cfg(test)]
mod tests;
