//! fd views: a real file descriptor, readable exactly while an in-memory source is
//! readable, for OS pollers (raw epoll LT/ET, `poll(2)`, mio, tokio `AsyncFd`, C code).
//!
//! The in-memory state stays authoritative. A view owns a *doorbell* (an eventfd, or a pipe
//! with `--cfg evfd_force_pipe`; see `crate::sys`) and keeps it consistent with the
//! source: rung while the source is readable, drained while it is not. It is written only
//! on a not-readable → readable edge and read only on the way back, so a notify while the
//! source is already readable costs no syscall — QEMU's `notify_me` idea.
//!
//! # The protocol
//!
//! A view hooks a [`Target::Callback`] entry with mask `IN | OUT | EMPTIED` at the *head* of
//! the source's wait queue (head, as the kernel's non-exclusive entries: an exclusive wake
//! that stops after a blocked reader still visits it). Every state change of a source wakes
//! its queue with a key in that mask, in the changing thread, after the change: a write
//! wakes `IN`; a read or an AutoReset delivery wakes `OUT`, plus the key-only bit `EMPTIED`
//! when it left the count at 0. The callback runs under the queue lock, so it does only the
//! check below (lock-free for a notifier) and, if that fails, defers a [`sync`] to after the
//! unlock ([`WakeBatch::push_post`]).
//!
//! ```text
//! check(key):   skip iff !key.EMPTIED && mirror == source.is_readable()  // two SeqCst loads
//! sync(key):
//!     if check(key) passes { return }
//!     lock rung
//!     force = key.EMPTIED
//!     loop {
//!         want = source.is_readable()                                    // SeqCst load
//!         if want != *rung {
//!             if want { ring() } else { drain() }        // the edges: the only syscalls
//!             *rung = want; mirror.store(want); force = false            // SeqCst store
//!         } else if want && force {
//!             ring(); force = false                      // re-ring: a refill (below)
//!         } else {
//!             return
//!         }
//!     }
//! ```
//!
//! **Claim 1 (level).** When no change is in progress (every change's thread has returned
//! from the call that made it), `*rung == mirror == source.is_readable()` and the doorbell
//! fd is readable iff `*rung`.
//!
//! *Proof.* The fd changes only under `rung`, as `*rung` does, so the fd matches `*rung` at
//! every unlock; `mirror` is stored with it. Suppose the claim fails at quiescence:
//! `*rung = r` but the final readability is `!r`. Let `E` be the last exit of the locked
//! loop (the initial `*rung = false` counts as an exit before any change; a view's
//! creation runs a `sync` after hooking). `E`'s last load of the state saw `r`, after its
//! last store of `mirror = r`. The final readability differs, so some change happened after
//! that load in the `SeqCst` order; let `C` be the last change, by thread `T`, which then
//! ran a check (the callback, then `sync`), both loads after `C`. If `T` took the locked
//! path, its state load follows `C`, which follows `E`'s state load, and the lock orders the
//! two critical sections, so `T`'s exit is later than `E`: contradiction. So `T` skipped:
//! its state load saw the final value `!r`, and its `mirror` load, being after `C`, is after
//! `E`'s last `mirror` store, with no later store (a later store is followed by a later
//! exit), so it saw `r`: `r != !r`, the check fails: contradiction. ∎ The classic
//! store-buffer pair (store `mirror`, load the state / change the state, load `mirror`) is
//! why all four are `SeqCst`.
//!
//! **Claim 2 (edges).** If a consumer sees the source empty (`WouldBlock`) at time `t` and
//! the source is readable later, the doorbell is rung (a `write(2)`, which wakes every
//! edge-triggered poller, eventfd and pipe alike) after `t`. That is what an ET poller
//! (tokio's `AsyncFd`, mio) needs: it clears readiness on `WouldBlock` and waits for the
//! next wake.
//!
//! *Proof sketch.* The count was emptied before `t` by a consumption `C0` (keyed
//! `EMPTIED`), and refilled after `t` by a first write `W1`. `C0`'s thread always takes the
//! lock (an `EMPTIED` check never skips). If its locked loop reads the state after `W1`, it
//! rings — normally if `*rung` was false, as a forced re-ring if it was true (a sync that
//! read the state before `C0` may have left it rung: the "refill" race that a plain level
//! protocol would coalesce into the stale edge). If it reads the state before `W1`, it
//! exits with `*rung == mirror == false` (0 is what every load between `C0` and `W1` sees,
//! and any earlier sync finished before it got the lock), so `W1`'s check sees
//! `mirror == false` and readable, and `W1` rings. Either ring follows `W1`, so `t`. ∎
//! Without `EMPTIED` (a Semaphore read that leaves units) the check skips as usual: no
//! syscall while the source stays readable.
//!
//! **Rung views settle the queue.** A write to a source that is readable already, with its
//! view rung, is a no-op for the view (the check skips it). So the hook tells the source's
//! queue so (`Callback::coalesces`: `mirror` is true), and the queue settles as it does for
//! a linked epoll item (`wait_queue`, "Settled"): the next writes skip the queue's lock
//! and the hook altogether, one atomic load after their count's RMW. The one thing that
//! makes `coalesces()` false is `sync_locked` storing `mirror = false`; it clears the mark
//! (`WaitQueue::unsettle`) right after that store and before it loads the source's state
//! again. That is the clear-(b) rule of "Settled", and its argument applies as is: a write
//! that skipped made its count RMW before it loaded the mark, so before the clear, so
//! before the re-load, which sees the write and rings; a settle racing the store is
//! caught by the settler's second look at `mirror`. The loom models `settled_*` in
//! `src/tests/loom_fd.rs` check both claims with writes that skip.
//!
//! **Edge-only views** ([`FdView::set_edge_only`]). Claim 2 is all an edge-triggered
//! poller needs, and a ring makes its edge whether or not the fd is readable already (an
//! eventfd or pipe write wakes every waiter on the fd, and epoll queues an `EPOLLET` item
//! again on each such wake). What an edge-only view saves is the drain of every edge, a
//! `read(2)`: a wake through a level view costs a ring and a drain, through an edge-only
//! one a ring, as mio's `Waker` (an eventfd registered `EPOLLET`, written at each wake and
//! never read). The fd stays readable once rung: claim 1 no longer holds for it. Rings
//! that are never drained would fill a pipe doorbell (and, after 2^64 - 2 of them, an
//! eventfd): a ring that finds the fd full drains it and writes again
//! (`Doorbell::ring_edge`), since a refused write wakes nobody.
//!
//! - *Fill mode* (a notifier's view). A notifier's write knows whether it took the count
//!   from 0 (its CAS replaced 0: a *fill*), and wakes with [`KEY_FILLED`] added then
//!   (`WaitQueue::wake_due_write`; a handler's write through a `SignalNotifier` records
//!   it for its relay). The edge-only view's hook hears `KEY_FILLED` alone, and rings
//!   (under `rung`, with no queue lock held) at each fill; consumptions are none of its
//!   business (no `OUT`, no `KEY_EMPTIED` in its mask, and `consume` makes no sync). The
//!   hook sits in the queue's *bell slot* (`wait_queue::bell`) if it is free, where a fill
//!   reaches it with two compare-and-swaps and no lock (the entry's mask is then empty),
//!   else in the entry, which listens for `KEY_FILLED` and defers the ring to after the
//!   unlock. Claim 2: a consumer saw the count 0 at `t`; if it is positive later, some
//!   write replaced a 0 after `t` in the count's order — a fill, whose wake loads
//!   `interest` after its CAS and finds the slot's bit or the entry's (the view was
//!   edge-only before `t`), so its ring follows `t` (in the slot, a ring in flight rings
//!   again for it: `bell`'s docs). So a wake costs the writer the slot's word (or the queue
//!   lock) and `rung`, on lines no consumer touches, and the consumer nothing: the
//!   lock-step shape of mio's `Waker`. The hook's mode
//!   (`Core::fills`) and its mask (or its place in the slot) change under one hold of the
//!   queue lock (`WaitQueue::enter_fill_mode`, `leave_fill_mode`), so a wake sees both or
//!   neither; a ring that was in flight in the slot when the view left fill mode finds the
//!   mode under `rung` and takes the level path, as one deferred from the list does. Leaving fill mode
//!   takes the view as rung iff its fd was ever rung, `*rung` and `mirror` alike (`mirror`
//!   stored in that same hold: a change after it either skips against a readable fd or
//!   goes to `sync`, which waits for `rung`, held by the switch throughout), and
//!   re-derives the level state with a sync (a ring or a drain where the source
//!   disagrees). A fill that raced the switch rings again through its own post-wake, which
//!   finds the view level and forces a fresh edge.
//! - *An epoll's view*: an epoll's wakes do not say whether they filled its ready list, so
//!   its edge-only view runs the protocol above unchanged, with `*rung` and `mirror` as
//!   they are, but makes no syscall where it would drain. Setting it back to level drains
//!   the fd if `*rung` is false.
//!
//! The loom model in `src/tests/loom_fd.rs` checks both claims over every interleaving of
//! write / read / semaphore read / AutoReset consume / view creation, with a mock doorbell
//! that asserts `drain` only while rung, and for an epoll: notify / harvest / delete.
//!
//! # An `Epoll` as a source
//!
//! An epoll's state is its ready list, guarded by the `EpInner::ready` mutex rather than one
//! atomic. "Readable" for a view is `ReadyState::any_live`: a harvest is running, or the
//! ready list holds an item that was neither deleted nor closed. That is what every
//! transition can maintain without polling sources under a lock (a poll of an epoll takes
//! its registry, which may not be taken under a wait-queue lock); the harvest is where the
//! queued items are re-polled. So:
//!
//! - The changes and their wakes: queueing an item (the item callback and `add`/`modify`
//!   wake `pollers` with `IN`, as for an outer epoll); the end of a scan (`wait`,
//!   `wait_async`, the stream, `poll`, an outer epoll's harvest) that left nothing live on
//!   the list *or found nothing to report*, and a delete or a source close that left
//!   nothing live (these wake `pollers` with `EMPTIED` alone, a key that no outer epoll's
//!   item listens for, so nesting semantics are untouched); the start of a scan (no wake:
//!   it is always followed by its end, which decides again with the list in hand).
//! - Claim 1 carries over with the mutex in place of the `SeqCst` order: in its proof, "the
//!   skipping check's `mirror` load is after `E`'s store" holds because `E` read the state
//!   before the change in the mutex's order, so `E`'s store happens-before the unlock that
//!   the changing thread acquired. A scan start that turns "readable" on without a wake is
//!   harmless: every live item listed at quiescence was queued by an operation that woke
//!   `pollers` after it, and stayed live and listed (or on the overflow or transfer list,
//!   which count as readable) since, so that wake's check follows any sync that read "not
//!   readable".
//! - Claim 2 holds with "`wait` returned 0" as the consumer's `WouldBlock`, and "a ring
//!   after the consumer began that `wait`" as the edge (an edge-triggered poller saw the fd
//!   before calling `wait`). A scan that reports nothing decides `EMPTIED` under the ready
//!   lock at its end, even when wakes that arrived during it (the overflow list) left the
//!   list non-empty: its forced sync then re-rings. Without that, such an arrival finds the
//!   view rung and `mirror` current, skips, and the consumer sleeps on a readable epoll.
//!   The models `epoll_view_*` in `src/tests/loom_fd.rs` check both claims.
//! - What it is not: exact between harvests. A level-triggered item whose source was
//!   consumed behind the epoll's back (the user read the notifier after `wait`), an item
//!   queued by a wake that left its source not ready (`write(0)`), or one queued for bits
//!   that `modify` removed, stays on the list until the next scan re-polls it — as in the
//!   kernel, whose ready list is re-polled only when someone polls the epoll. Until then the
//!   view is readable: a poller that wakes and calls `wait` gets 0 events, and that harvest
//!   drains the doorbell.
//!
//! A view is registered on the source's queue only while it exists; with no view, the
//! queue holds no entry of ours and the source's fast path makes no syscall and takes no
//! lock (see `wait_queue`).
//!
//! # LOCKING
//!
//! ```text
//! Core::rung     Mutex<Bell>  — whether the doorbell is rung, and whether the view is
//!                               edge-only; holding it is the right to ring or drain. A
//!                               plain mutex: held across one non-blocking syscall (two for
//!                               an edge-only ring that finds the fd full, and a full pipe's
//!                               drain reads until it is empty), never while taking any
//!                               other lock.
//! Core::mirror   AtomicBool   — copy of *rung, stored only with `rung` held, read lock-free.
//! Core::fills    AtomicBool   — fill mode; written with `rung` and the source's queue lock
//!                               both held (`WaitQueue::set_mask_with`, the queue lock
//!                               taken under `rung`: the one place the two nest, and the
//!                               hook never takes `rung`), read by the hook under the queue
//!                               lock.
//! Order: the source's WaitQueue lock and `rung` are held together only by a view's mode
//!        switch (`rung`, then the queue lock, with no wake run under either); the callback
//!        (under the queue lock) only loads atomics and pushes a post-wake; `sync` runs
//!        after the queue lock is released.
//!        An epoll source's `is_readable` takes its `EpInner::ready` (a leaf: nothing is
//!        taken under it), from the callback (under `pollers`, which the epoll's own item
//!        callbacks take only after releasing `ready`) and from `sync` (under `rung`).
//! ```
//!
//! [`sync`]: Core::sync
//! [`Target::Callback`]: crate::wait_queue::Target::Callback
//! [`WakeBatch::push_post`]: crate::wait_queue::WakeBatch::push_post

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::Arc;

use crate::epoll::{EpHandle, Epoll};
use crate::events::{Events, KEY_EMPTIED, KEY_FILLED};
use crate::loom::sync::atomic::{
    AtomicBool,
    Ordering::{Relaxed, SeqCst},
};
use crate::loom::sync::Mutex;
use crate::notifier::{Handle, Notifier};
use crate::sys::{BuildDoorbell, Doorbell, DoorbellStats};
use crate::wait_queue::list::Key;
use crate::wait_queue::{Callback, PostWake, Target, WaitQueue, WakeBatch};

/// The mask a view's entry listens with: every state change wakes one of these.
/// `KEY_EMPTIED` alone is how an epoll tells its views (and nobody else) that it emptied.
const VIEW_MASK: Events = Events::IN.union(Events::OUT).union(KEY_EMPTIED);

/// An in-memory source an fd view can follow: anything with a [`WaitQueue`] and a
/// readability function (a `Notifier`, an `Epoll`).
///
/// # Contract
///
/// - `is_readable` is a `SeqCst` load of the state that changes with `SeqCst` RMWs, or a
///   read of state that every change modifies under one mutex, which `is_readable` takes
///   (an `Epoll`'s ready list; module docs). It may be called under the source's queue lock.
/// - Every change of that state is followed, in the changing thread, before the call that
///   made it returns, by a wake of `wait_queue()` with a key intersecting `VIEW_MASK`:
///   `IN` after a change that may make it readable, `OUT` after a consumption, with
///   [`KEY_EMPTIED`] added when the consumption left it not readable (a `Notifier` does
///   this in `try_write`, `try_read` and `deliver`). A source whose consumption wakes
///   nobody (an `Epoll` harvest) must add such a wake (`KEY_EMPTIED` alone will do).
///   Missing `KEY_EMPTIED` only weakens claim 2 (edge-triggered pollers with several
///   consumers); missing wakes break claim 1.
/// - `deliver` hands `IN` to a consumer (AutoReset resets) and returns the readiness seen.
pub(crate) trait ViewSource: Send + Sync + 'static {
    /// The queue the view hooks into.
    fn wait_queue(&self) -> &WaitQueue;
    /// Whether the source is readable (`IN`) now. Never consumes anything.
    fn is_readable(&self) -> bool;
    /// Deliver `IN` to a consumer: the readiness seen; AutoReset resets it.
    fn deliver(&self) -> Events;
    /// Whether fds handed out for this source are close-on-exec.
    fn cloexec(&self) -> bool;
    /// Whether the source is a child process's copy of one made before a fork (then the
    /// view takes no lock and reports `ERR | HUP`: see `sys::fork`).
    fn forked(&self) -> bool;
    /// The view's entry was just added to `wait_queue` (an epoll gained a poller).
    fn hooked(&self) {}
    /// Whether the source's writes wake with [`KEY_FILLED`] added when they take it from
    /// not readable to readable (a notifier's do): its edge-only views then run in fill
    /// mode (module docs).
    fn fills(&self) -> bool {
        false
    }
}

/// A notifier's user-level handle: a view keeps the notifier open (epoll items stay), as an
/// fd referring to a file does.
impl ViewSource for Handle {
    fn wait_queue(&self) -> &WaitQueue {
        &self.wq
    }

    fn is_readable(&self) -> bool {
        self.count.load(SeqCst) > 0
    }

    fn deliver(&self) -> Events {
        self.core.deliver(Events::IN)
    }

    fn cloexec(&self) -> bool {
        self.cloexec
    }

    fn forked(&self) -> bool {
        self.core.forked()
    }

    fn fills(&self) -> bool {
        true
    }
}

/// An epoll's user-level handle: a view keeps the epoll open (its items stay registered), as
/// an fd referring to it would.
impl ViewSource for EpHandle {
    fn wait_queue(&self) -> &WaitQueue {
        &self.pollers
    }

    fn is_readable(&self) -> bool {
        self.ready.lock().any_live()
    }

    /// An epoll is never consumed by being polled: this re-polls the queued items (dropping
    /// the ones no longer ready, whose harvest end drains the doorbell) and reports.
    fn deliver(&self) -> Events {
        self.core.readiness()
    }

    fn cloexec(&self) -> bool {
        true
    }

    fn forked(&self) -> bool {
        self.core.forked()
    }

    fn hooked(&self) {
        self.core.unsettle_sources();
    }
}

/// The doorbell and its state, shared by the view handle and the queue entry.
pub(crate) struct Core {
    /// The source. The queue entry holds this `Core`, and so the source holds itself alive
    /// through its own queue while a view exists; [`Registration`]'s `Drop` removes the
    /// entry, which breaks the cycle. (The `SeqCst` pairs are marked with
    /// `loom::dekker_fence`, a no-op outside loom, which models `SeqCst` accesses as
    /// `AcqRel`.)
    source: Arc<dyn ViewSource>,
    /// `*rung`, stored only with `rung` held; the fast path's lock-free read.
    mirror: AtomicBool,
    /// Fill mode (module docs): an edge-only view of a source that keys its fills. Written
    /// with `rung` and the source's queue lock both held (with the entry's mask), so exact
    /// under either: read by the hook under the queue lock, by `sync_held` and `ring_fill`
    /// under `rung`, and as a hint by `post_wake` and `consume` (which recheck under
    /// `rung`, or need not).
    fills: AtomicBool,
    /// Whether the doorbell is rung, and how it is kept. Guards `bell`'s syscalls.
    rung: Mutex<Bell>,
    /// The doorbell; its fd is what pollers watch.
    bell: BuildDoorbell,
}

impl Core {
    /// The lock-free check: skip unless the key says a consumption emptied the source, or
    /// `mirror` disagrees with the source. Both loads `SeqCst`.
    #[inline]
    fn can_skip(&self, key: Events) -> bool {
        // The change this check follows (a SeqCst RMW) is one side of the store-buffer pair.
        crate::loom::dekker_fence();
        !key.contains(KEY_EMPTIED) && self.mirror.load(SeqCst) == self.source.is_readable()
    }

    /// Make the doorbell agree with the source after a change woken with `key` (module
    /// docs: the protocol). Must be called with no wait-queue lock held.
    pub(crate) fn sync(&self, key: Events) {
        if self.can_skip(key) {
            return;
        }
        self.sync_locked(key.contains(KEY_EMPTIED));
    }

    #[cold]
    fn sync_locked(&self, force: bool) {
        let mut bell = crate::loom::lock(&self.rung);
        self.sync_held(&mut bell, force);
    }

    /// [`sync_locked`](Self::sync_locked) with `rung` held (`bell`). A view in fill mode
    /// (an edge-only view of a notifier) keeps no level state: nothing to do.
    fn sync_held(&self, bell: &mut Bell, mut force: bool) {
        if self.fills.load(Relaxed) {
            return;
        }
        loop {
            let want = self.source.is_readable();
            let r = if want != bell.rung {
                let r = if want {
                    self.ring(bell)
                } else if bell.edge_only {
                    // Edge-only: no drain; the next ring is a fresh edge all the same.
                    Ok(())
                } else {
                    self.bell.drain()
                };
                if r.is_ok() {
                    bell.rung = want;
                    // Publish, then re-load the state at the top of the loop (the
                    // store-buffer pair with the check, module docs).
                    self.mirror.store(want, SeqCst);
                    crate::loom::dekker_fence();
                    if !want {
                        // `coalesces()` just became false: writes must reach the hook
                        // again, before the loop's re-load (module docs).
                        self.source.wait_queue().unsettle();
                    }
                }
                r
            } else if want && force {
                // A refill raced the consumption that emptied the source: a fresh edge.
                self.ring(bell)
            } else {
                return;
            };
            force = false;
            if let Err(e) = r {
                // Cannot happen short of our fd being closed behind our back: leave the
                // state as it is; the next change retries.
                debug_assert!(false, "doorbell update failed: {e}");
                return;
            }
        }
    }
}

impl Core {
    /// Ring the doorbell, with `rung` held (`bell`): a plain ring, or, edge-only, a write
    /// that makes an edge even if the fd is still readable from the last one.
    fn ring(&self, bell: &mut Bell) -> io::Result<()> {
        if bell.edge_only {
            bell.undrained = true;
            self.bell.ring_edge()
        } else {
            self.bell.ring()
        }
    }

    /// [`FdView::set_edge_only`], with the source known not to be a fork child's copy;
    /// `key` is the view's entry in the source's queue.
    fn set_edge_only(self: &Arc<Self>, on: bool, key: Key) -> io::Result<()> {
        let mut bell = crate::loom::lock(&self.rung);
        if bell.edge_only == on {
            return Ok(());
        }
        let wq = self.source.wait_queue();
        if on {
            if self.source.fills() {
                // Fill mode (module docs): the hook hears fills only, and rings at each,
                // from the queue's bell slot if it is free (no lock on a fill's path).
                // Mode and mask change under one hold of the queue lock.
                let hook = Arc::clone(self) as Arc<dyn PostWake>;
                bell.in_slot = wq.enter_fill_mode(key, hook, || self.fills.store(true, Relaxed));
            }
            bell.edge_only = true;
            return Ok(());
        }
        bell.edge_only = false;
        if self.fills.load(Relaxed) {
            // Back to the level protocol, from no level state. The fd is readable iff it
            // was ever rung: the level state starts from there, `*rung` and `mirror` alike
            // (`mirror` stored with the mode, so that a change after the switch either
            // skips against a readable fd or goes to `sync`, which waits for this lock),
            // and the sync rings or drains to agree with the source. (A fill that raced
            // the switch has a post of its own, which rings again once this lock is free:
            // its fresh edge.)
            let ever_rung = std::mem::take(&mut bell.undrained);
            let level = || {
                self.fills.store(false, Relaxed);
                self.mirror.store(ever_rung, SeqCst);
            };
            wq.leave_fill_mode(key, VIEW_MASK, std::mem::take(&mut bell.in_slot), level);
            crate::loom::dekker_fence();
            bell.rung = ever_rung;
            self.sync_held(&mut bell, false);
            return Ok(());
        }
        if bell.undrained && !bell.rung {
            // Rung while edge-only, not rung now: make the fd agree.
            self.bell.drain()?;
        }
        bell.undrained = false;
        Ok(())
    }

    /// A fill's post-wake (fill mode, module docs): ring, unless the view left fill mode
    /// meanwhile (then the level protocol decides).
    fn ring_fill(&self) {
        let mut bell = crate::loom::lock(&self.rung);
        if self.fills.load(Relaxed) {
            if let Err(e) = self.ring(&mut bell) {
                debug_assert!(false, "doorbell ring failed: {e}");
            }
        } else {
            self.sync_held(&mut bell, true);
        }
    }
}

/// What [`Core::rung`] guards.
#[derive(Debug, Default)]
struct Bell {
    /// Whether the doorbell is rung (level views: whether the fd is readable). Not kept in
    /// fill mode ([`Core::fills`]).
    rung: bool,
    /// Edge-only ([`FdView::set_edge_only`]): rings make edges, nothing drains.
    edge_only: bool,
    /// A ring made while edge-only may have left the fd readable with `rung` false.
    undrained: bool,
    /// Fill mode with the hook in the queue's bell slot (`WaitQueue::enter_fill_mode`),
    /// not in the view's list entry: leaving it takes the hook out.
    in_slot: bool,
}

impl PostWake for Core {
    fn post_wake(&self, key: Events) {
        // A fill heard in fill mode rings; whatever else reaches here (a level wake queued
        // before the switch) syncs, which does nothing in fill mode.
        if key.contains(KEY_FILLED) && self.fills.load(Relaxed) {
            self.ring_fill();
        } else {
            self.sync(key);
        }
    }
}

/// The queue entry's target: checks lock-free under the queue lock, defers the rest.
struct Hook(Arc<Core>);

impl Callback for Hook {
    fn wake(&self, key: Events, batch: &mut WakeBatch) -> bool {
        // Fill mode (written under this lock with the mask, which is `KEY_FILLED` alone
        // then): every wake that reaches here is a fill, and rings.
        if self.0.fills.load(Relaxed) {
            if key.contains(KEY_FILLED) {
                batch.push_post(Arc::clone(&self.0) as Arc<dyn PostWake>, key);
            }
            return true;
        }
        // Two atomic loads (an epoll: an atomic load and its leaf `ready` lock), no foreign
        // code: fine under the queue lock.
        if !self.0.can_skip(key) {
            batch.push_post(Arc::clone(&self.0) as Arc<dyn PostWake>, key);
        }
        true
    }

    fn detach(&self) {
        // The source is going away. It cannot while a view exists (the view holds it), so
        // there is nothing to do: the view's own drop removed the entry already.
    }

    /// A rung view lets the source's queue settle (`wait_queue`, "Settled"): while
    /// `mirror` is true, a wake with key `IN` (a write, an epoll queueing an item) leaves
    /// the source readable, which the check above skips. Only `sync_locked` makes it false,
    /// by storing `mirror = false`, and it clears the queue's mark right after that store,
    /// before it looks at the source again (module docs, "Rung views settle the queue").
    fn coalesces(&self) -> bool {
        self.0.mirror.load(SeqCst)
    }
}

/// The view's registration on the source's queue; dropping it unhooks the view.
struct Registration {
    core: Arc<Core>,
    key: Key,
}

impl Drop for Registration {
    fn drop(&mut self) {
        if self.core.source.forked() {
            // A child's copy: take no lock; the entry (and the source it keeps alive) stays.
            // The doorbell fd is the child's own copy and closes with `bell`.
            return;
        }
        let in_slot = std::mem::take(&mut crate::loom::lock(&self.core.rung).in_slot);
        let wq = self.core.source.wait_queue();
        if in_slot {
            wq.remove_from_bell(self.key);
        } else {
            wq.remove(self.key);
        }
    }
}

/// A real fd that is readable exactly while an in-memory source is readable.
///
/// Made by [`Notifier::fd_view`] and [`Epoll::fd_view`]. Hand its fd ([`AsFd`],
/// [`AsRawFd`]) to any OS poller: raw `epoll` (level- or edge-triggered), `poll(2)`, mio,
/// tokio's `AsyncFd`, C code. The fd is an eventfd (a pipe's read end where eventfd is
/// missing, or with `--cfg evfd_force_pipe`); it is close-on-exec iff the source is
/// ([`Notifier::is_cloexec`]; always for an epoll, as `epoll_create1(EPOLL_CLOEXEC)`).
///
/// Poll the fd, never read or write it: the view owns its state. Consume through the
/// source (`read`, `try_read`, [`Epoll::wait`]) or, for AutoReset, through
/// [`consume`](Self::consume).
///
/// The view keeps the source alive; clones share one fd. Dropping the last clone unhooks
/// the view, after which the source makes no syscall again.
///
/// # Semantics
///
/// - **Level-triggered pollers** see the fd readable while the source is readable (and
///   `count > 0` for a notifier), as a kernel eventfd would be.
/// - **Edge-triggered pollers** get a fresh edge each time the source goes from not readable
///   to readable. Unlike a kernel eventfd (whose every write re-arms an ET item), writes to
///   an already readable source coalesce into the edge already delivered: drain the source
///   until `WouldBlock` before waiting again, as ET requires for sockets — after a
///   `WouldBlock`, the next write rings a new edge.
/// - Every change made through the source finishes the doorbell's update before the call
///   that made it returns, so `notifier.write(1)?` followed by `poll(fd)` in the same thread
///   sees the fd readable, and `notifier.read()?` followed by `poll(fd)` sees it not.
///
/// # Cost
///
/// While a view exists, each state change also takes the source's wait-queue lock (to run
/// the view's hook), and a consumption that empties the source takes the view's doorbell
/// mutex. Syscalls happen only on edges: one `write(2)` when the source becomes readable,
/// one `read(2)` when it stops being readable, and one `write(2)` when a write refills the
/// source while a read is emptying it (an edge that edge-triggered pollers must see).
/// Notifies while the source is readable cost none.
/// [`doorbell_stats`](Self::doorbell_stats) counts them.
///
/// # A view of an `Epoll`
///
/// The fd is readable while the epoll has an event queued (what makes a kernel epoll fd
/// readable), and is drained by the `wait` (or `wait_async`, the stream, [`Epoll::poll`])
/// that leaves nothing ready, by a `delete` and by the close of a source that leave nothing
/// queued. As in the kernel, a queued item is re-polled only by a harvest: after `wait`
/// delivered a level-triggered event and the consumer read its notifier, the fd stays
/// readable until the next `wait` (which returns 0 and drains it). Edge-triggered and
/// `ONESHOT` items are not re-queued, so their harvest drains it at once.
///
/// Edge-triggered pollers (tokio's `AsyncFd`, `EPOLLET`) get an edge when the epoll goes
/// from empty to non-empty: call `wait` until it returns 0 before waiting on the fd again
/// (a `wait` that returns 0 while events arrive during it rings a fresh edge). See
/// [`Epoll::fd_view`].
///
/// # Fork
///
/// A view made before a `fork` is refused in the child like its source (see
/// [`Notifier`]'s `# Fork`): [`consume`](Self::consume) reports `ERR | HUP` and changes
/// nothing, and dropping it takes no lock. Its fd is the child's copy of a doorbell the
/// parent keeps using: it still shows the *parent's* source state; never read it.
/// Rules: docs/semantics.md §6.1.
///
/// # Panicking wakers
///
/// A view runs no waker itself; [`consume`](Self::consume) of an AutoReset notifier wakes
/// its blocked writers, and a panic from one of their wakers unwinds out of `consume`
/// after the reset (docs/semantics.md §6.2).
///
/// # Examples
///
/// ```
/// use std::os::fd::AsFd;
/// use rustix::event::{poll, PollFd, PollFlags, Timespec};
///
/// let n = evfd::Notifier::new();
/// let view = n.fd_view()?;
/// let readable = || {
///     let mut fds = [PollFd::new(&view, PollFlags::IN)];
///     poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
/// };
/// assert!(!readable());
/// n.notify()?;
/// assert!(readable());
/// assert_eq!(n.read()?, 1);
/// assert!(!readable());
/// # let _ = view.as_fd();
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # References
///
/// - [eventfd(2)](https://man7.org/linux/man-pages/man2/eventfd.2.html),
///   [epoll(7)](https://man7.org/linux/man-pages/man7/epoll.7.html),
///   [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html)
#[doc(alias = "eventfd")]
#[derive(Clone)]
pub struct FdView {
    reg: Arc<Registration>,
}

impl FdView {
    /// Hook a new view onto `source`.
    pub(crate) fn new(source: Arc<dyn ViewSource>) -> io::Result<FdView> {
        let bell = BuildDoorbell::create(source.cloexec())?;
        let core = Arc::new(Core {
            source,
            mirror: AtomicBool::new(false),
            fills: AtomicBool::new(false),
            rung: Mutex::new(Bell::default()),
            bell,
        });
        let hook: Arc<dyn Callback> = Arc::new(Hook(Arc::clone(&core)));
        // At the head, as non-exclusive entries go (module docs). `add` publishes the mask
        // with a SeqCst RMW under the queue lock before the sync below loads the state: a
        // concurrent change either finds the entry or is seen by this sync.
        let key = core
            .source
            .wait_queue()
            .add(VIEW_MASK, false, true, Target::Callback(hook));
        core.source.hooked();
        core.sync(Events::IN);
        Ok(FdView {
            reg: Arc::new(Registration { core, key }),
        })
    }

    /// Deliver `IN` to this consumer, as an epoll harvest would: returns the source's
    /// readiness at delivery (`IN` if it was readable) and, for a [`Mode::AutoReset`]
    /// notifier, resets the count to 0 — the fd stops being readable and writers blocked
    /// at the limit are woken. For Counter and Semaphore sources delivery changes nothing:
    /// read the notifier to consume.
    ///
    /// This is the AutoReset consumer's whole job after its poller reports the fd readable:
    /// no `read` of the notifier and no syscall other than the doorbell's drain.
    ///
    /// For a view of an [`Epoll`], nothing is consumed (an epoll is consumed by `wait`):
    /// this is [`Epoll::poll`]`(IN)`, which re-polls the queued items and drains the
    /// doorbell if none is ready any more.
    ///
    /// Infallible: the delivery is in memory. `SharedFdView::consume` returns an
    /// `io::Result<Events>` because a shared count can be corrupted by the other process
    /// (`InvalidData`); the two agree otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Events, Mode, Notifier};
    /// let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    /// let view = kick.fd_view()?;
    /// kick.notify()?;
    /// kick.notify()?;
    /// assert!(view.consume().contains(Events::IN)); // delivered: reset
    /// assert_eq!(kick.count(), 0);
    /// assert!(!view.consume().contains(Events::IN)); // nothing new
    /// # Ok::<(), std::io::Error>(())
    /// ```
    ///
    /// [`Mode::AutoReset`]: crate::Mode::AutoReset
    pub fn consume(&self) -> Events {
        let core = &self.reg.core;
        if core.source.forked() {
            return Events::ERR | Events::HUP;
        }
        let seen = core.source.deliver();
        // A reset woke the queue (and so synced already); this is the fast path then, and
        // keeps sources whose consumption wakes nobody consistent too. In fill mode a
        // consumption is none of the view's business.
        if !core.fills.load(Relaxed) {
            core.sync(Events::OUT);
        }
        seen
    }

    /// The doorbell syscalls this view has made (its clones included).
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// let view = n.fd_view()?;
    /// for _ in 0..1000 {
    ///     n.notify()?; // only the first one rings
    /// }
    /// assert_eq!(view.doorbell_stats().rings, 1);
    /// assert_eq!(view.doorbell_stats().drains, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn doorbell_stats(&self) -> DoorbellStats {
        self.reg.core.bell.stats()
    }

    /// Keep this view's fd for edge-triggered pollers only (mio, tokio's `AsyncFd`, epoll
    /// with `EPOLLET`, kqueue with `EV_CLEAR`), or (`false`, the default) for every poller.
    ///
    /// An edge-only view still rings its doorbell on each not-readable → readable edge of
    /// the source, and each ring is a write that wakes edge-triggered pollers even if the fd
    /// is still readable from the one before; it never drains it. The drain, a `read(2)`
    /// each time a consumer empties the source, is what keeps the fd readable exactly while
    /// the source is, which only level-triggered pollers (`poll(2)`, `select(2)`, epoll
    /// without `EPOLLET`) need. So a wake through an edge-only view costs one syscall, as
    /// mio's `Waker` does, where a level view costs two (the ring and the drain). (One
    /// `write(2)` while the fd has not been lent: registered through evfd's
    /// `mio::event::Source` or `into_async_fd` (features `mio`, `tokio`), not through
    /// [`AsFd`]. A ring on a lent fd is a zero-timeout `poll(2)` and a `write(2)`, since
    /// whoever holds the fd may clear `O_NONBLOCK`.)
    ///
    /// An edge-only view of a [`Notifier`] rings at each write that takes the count from
    /// 0, and its consumers (reads, [`consume`](Self::consume)) do nothing for it.
    ///
    /// The fd of an edge-only view stays readable once rung, whatever the source holds: a
    /// level-triggered poller would see it ready for ever. Set it only when every poller of
    /// this fd is edge-triggered. Setting it back to `false` drains the fd if the source is
    /// not readable, so that the fd is level-exact again. The setting is shared with the
    /// view's clones.
    ///
    /// # Errors
    ///
    /// [`Unsupported`](io::ErrorKind::Unsupported) in a child process, for a view of an
    /// object made before the fork (see [`Notifier`]); any error of the drain that setting
    /// it back makes (none short of the doorbell's fd being closed behind the view's back).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[cfg(target_os = "linux")] {
    /// use evfd::{Mode, Notifier};
    /// let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    /// let view = kick.fd_view()?;
    /// view.set_edge_only(true)?;
    /// assert!(view.is_edge_only());
    /// for _ in 0..3 {
    ///     kick.notify()?; // an edge: one ring
    ///     assert!(view.consume().contains(evfd::Events::IN)); // emptied: no drain
    /// }
    /// assert_eq!(view.doorbell_stats().rings, 3);
    /// assert_eq!(view.doorbell_stats().drains, 0);
    /// view.set_edge_only(false)?; // level again: the fd is drained, as the source is empty
    /// assert_eq!(view.doorbell_stats().drains, 1);
    /// # }
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_edge_only(&self, on: bool) -> io::Result<()> {
        let core = &self.reg.core;
        if core.source.forked() {
            return Err(crate::sys::fork::refused("fd view"));
        }
        core.set_edge_only(on, self.reg.key)
    }

    /// Whether this view is edge-only ([`set_edge_only`](Self::set_edge_only)).
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// let view = n.fd_view()?;
    /// assert!(!view.is_edge_only(), "level by default");
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_edge_only(&self) -> bool {
        crate::loom::lock(&self.reg.core.rung).edge_only
    }

    /// The fd for the crate's own registrations (mio's `Source`): not a lend, so a ring
    /// stays one plain `write(2)` (`sys::fd`).
    #[cfg_attr(not(feature = "mio"), allow(dead_code))]
    pub(crate) fn registration_fd(&self) -> BorrowedFd<'_> {
        self.reg.core.bell.as_fd()
    }

    /// Run `register` (tokio's `AsyncFd`, which takes the fd through `AsRawFd`) without
    /// that borrow counting as a lend.
    #[cfg_attr(not(feature = "tokio"), allow(dead_code))]
    pub(crate) fn register_unlent<R>(self, register: impl FnOnce(FdView) -> R) -> R {
        let core = Arc::clone(&self.reg.core);
        core.bell.register_unlent(|| register(self))
    }

    /// The doorbell's state: (`*rung`, mirror). For tests.
    #[cfg(test)]
    pub(crate) fn rung_state(&self) -> (bool, bool) {
        let core = &self.reg.core;
        let rung = crate::loom::lock(&core.rung).rung;
        (rung, core.mirror.load(SeqCst))
    }

    /// The doorbell itself. For the loom model.
    #[cfg(all(test, evfd_loom))]
    pub(crate) fn bell(&self) -> &BuildDoorbell {
        &self.reg.core.bell
    }
}

impl AsFd for FdView {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.reg.core.bell.lend()
    }
}

impl AsRawFd for FdView {
    fn as_raw_fd(&self) -> RawFd {
        self.as_fd().as_raw_fd()
    }
}

impl fmt::Debug for FdView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let core = &self.reg.core;
        let mut d = f.debug_struct("FdView");
        #[cfg(not(evfd_loom))]
        d.field("fd", &core.bell.as_fd().as_raw_fd());
        d.field("rung", &core.mirror.load(SeqCst))
            .field("source_readable", &core.source.is_readable())
            .finish()
    }
}

// `fd_view` lives here rather than beside `Notifier` and `Epoll`: a view is built from the
// fd-view layer's types (`ViewSource`, `FdView`), and the notifier and epoll modules sit
// below this one, so they may not name them.
impl Notifier {
    /// A real fd that is readable exactly while this notifier is readable (count > 0).
    ///
    /// See [`FdView`] for the semantics. Each call makes a new doorbell (one eventfd);
    /// clone the view to share one. While no view exists the notifier makes no syscall.
    ///
    /// # Errors
    ///
    /// The OS error from creating the doorbell (`EMFILE`, `ENFILE`, `ENOMEM`).
    ///
    /// # Examples
    ///
    /// ```
    /// use std::os::fd::AsRawFd;
    /// let n = evfd::Notifier::builder().initial(1).build()?;
    /// let view = n.fd_view()?; // already readable: rung at creation
    /// assert!(view.as_raw_fd() >= 0);
    /// assert_eq!(view.doorbell_stats().rings, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(alias = "eventfd")]
    pub fn fd_view(&self) -> io::Result<FdView> {
        self.core.check()?;
        FdView::new(Arc::clone(&self.handle) as Arc<dyn ViewSource>)
    }
}

impl Epoll {
    /// A real fd that is readable while this epoll has events to deliver: a kernel epoll,
    /// `poll(2)`, mio or tokio's `AsyncFd` can wait on it, and then [`wait`](Self::wait)
    /// (with a zero timeout) harvests the events without blocking.
    ///
    /// The fd is rung when an item is queued and drained when a harvest (`wait`,
    /// `wait_async`, the stream, [`poll`](Self::poll)), a `delete` or a source's close
    /// leaves nothing queued, so level-triggered pollers see it readable while `wait` would
    /// return events, and edge-triggered ones get an edge each time it goes from empty to
    /// non-empty (harvest until `wait` returns 0 before waiting again). Queued items are
    /// re-polled only by a harvest, as in the kernel: after consuming the source of a
    /// level-triggered event, expect one more wake whose `wait` returns 0 (see [`FdView`],
    /// "A view of an `Epoll`"). The view keeps the epoll open, as an fd would.
    ///
    /// Kernel fds in the epoll (`BorrowedFd`, [`KernelNotifier`](crate::KernelNotifier))
    /// make the view readable too: their readiness queues the epoll's kernel item, through
    /// the process-wide watcher thread while a view exists.
    ///
    /// Each call makes a new doorbell (one eventfd, close-on-exec); clone the view to share
    /// one. While no view exists the epoll makes no syscall.
    ///
    /// # Errors
    ///
    /// The OS error from creating the doorbell (`EMFILE`, `ENFILE`, `ENOMEM`).
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Epoll, Event, Events, Notifier};
    /// use rustix::event::{poll, PollFd, PollFlags, Timespec};
    /// use std::time::Duration;
    ///
    /// let ep = Epoll::new();
    /// let n = Notifier::new();
    /// ep.add(&n, Events::IN | Events::ET, 1)?;
    /// let view = ep.fd_view()?;
    /// let readable = || {
    ///     let mut fds = [PollFd::new(&view, PollFlags::IN)];
    ///     poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
    /// };
    /// assert!(!readable());
    /// n.notify()?;
    /// assert!(readable()); // an event is queued
    /// let mut evs = [Event::default(); 4];
    /// assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO))?, 1);
    /// assert_eq!(evs[0], Event { events: Events::IN, data: 1 });
    /// assert!(!readable()); // the harvest left nothing ready
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(alias = "epoll_create")]
    pub fn fd_view(&self) -> io::Result<FdView> {
        self.inner.check()?;
        // Re-poll the queued items first (a poll, as an OS poller's look at a kernel epoll
        // fd would be): a view made over stale entries starts not readable.
        let _ = self.inner.core.readiness();
        let view = FdView::new(Arc::clone(&self.inner) as Arc<dyn ViewSource>)?;
        // A poller now: kernel fds must ring it too (the kernel item, `epoll::kernel_fds`).
        self.inner.core.ensure_watch();
        Ok(view)
    }
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::*;
    use crate::mode::Mode;

    fn readable(v: &FdView) -> bool {
        crate::sys::poll_now(v.as_fd(), Events::IN)
            .unwrap()
            .contains(Events::IN)
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn no_entry_after_the_last_view_drops() {
        let n = Notifier::new();
        let v = n.fd_view().unwrap();
        let v2 = v.clone();
        assert_eq!(n.core.wq.len(), 1);
        assert_eq!(n.core.wq.interest(), VIEW_MASK);
        drop(v);
        assert_eq!(n.core.wq.len(), 1);
        drop(v2);
        assert_eq!(n.core.wq.len(), 0);
        assert_eq!(n.core.wq.interest(), Events::empty());
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn view_keeps_the_source_alive() {
        let n = Notifier::new();
        let weak = Arc::downgrade(&n.handle);
        let v = n.fd_view().unwrap();
        drop(n);
        assert!(weak.upgrade().is_some());
        drop(v);
        assert!(
            weak.upgrade().is_none(),
            "the entry ↔ source cycle is broken on drop"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn readable_exactly_while_count_positive() {
        let n = Notifier::builder().mode(Mode::Semaphore).build().unwrap();
        let v = n.fd_view().unwrap();
        assert!(!readable(&v));
        n.write(2).unwrap();
        assert!(readable(&v));
        n.read().unwrap();
        assert!(readable(&v));
        n.read().unwrap();
        assert!(!readable(&v));
        assert_eq!(v.rung_state(), (false, false));
        assert_eq!(
            v.doorbell_stats(),
            DoorbellStats {
                rings: 1,
                drains: 1
            }
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn hook_is_visited_before_an_exclusive_reader() {
        // A blocked reader is an exclusive entry; a Counter write wakes one exclusive entry
        // and stops. The view's entry sits at the head, so it is still visited.
        let n = Notifier::new();
        let v = n.fd_view().unwrap();
        let n2 = n.clone();
        let t = std::thread::spawn(move || n2.read().unwrap());
        while n.core.wq.len() < 2 {
            std::thread::yield_now();
        }
        n.write(3).unwrap();
        assert_eq!(t.join().unwrap(), 3);
        assert!(!readable(&v));
        assert_eq!(v.rung_state(), (false, false));
    }
}
