//! The async wait: a task's place in a [`WaitQueue`] ([`TaskWait`]), used by every future
//! and stream of the crate (notifier reads and writes, `Epoll::wait_async`, the streams)
//! with its own operation and hand-on. It is the blocking wait of `super::thread` (the same
//! steps, the same hand-on rule) cut at its one sleep: each `poll` resumes it from the
//! state it left ([`State`]), and dropping the owner is the early exit.
//!
//! # LOCKING
//!
//! ```text
//! This module owns no lock. It takes WaitQueue::list only through the WaitQueue API
//! (add, update_waker, remove), never while holding anything else, and never runs foreign
//! code under it:
//!   - the task's Waker is cloned BEFORE add / update_waker is called;
//!   - a replaced or removed Waker is dropped by WaitQueue after unlocking;
//!   - wakes (ours and the hand-on's) run from WakeBatch after unlocking.
//! ```
//!
//! # The lost-wakeup rule
//!
//! As for a blocked thread (`super::thread`): try the operation; if it would wait, `add` the
//! entry (which publishes its interest, `SeqCst`, under the queue lock) and then try the
//! operation once more. A change that lands between the two tries either sees the interest
//! bit and wakes the entry, or is seen by the second try (the Dekker pair of `super`).

use std::task::{Context, Poll};

use super::list::Key;
use super::slot::Ticket;
use super::{Target, WaitFor, WaitQueue};
use crate::events::Events;

/// A task's place in a [`WaitQueue`]: at most one entry, registered on demand.
///
/// The protocol, for any [`WaitFor`] (its `try_now` is the operation `op` below; its
/// `hand_on` passes on a wake that claimed this waiter):
///
/// * [`poll`](Self::poll) tries `op`. The first time it would wait while no entry in the
///   queue wants the same event, it yields once instead of registering: it wakes its own task
///   and returns `Pending` (see "Yield once" below).
/// * Otherwise, if it would wait, it registers with a clone of the task's waker and tries
///   `op` again (lost-wakeup rule). A notifier's reader ([`with_slot`](Self::with_slot))
///   takes the queue's task slot if it is free and no reader is queued ahead of it
///   (`super::slot`: one CAS, no lock); any other wait, or a reader that finds the slot
///   taken, queues a `Target::Task` entry in the list. A re-poll while still queued swaps
///   the stored waker for the current one (`update_waker`); a re-poll while still armed in
///   the slot leaves it and arms it again with the current waker.
/// * A wake removes the entry (autoremove), or claims the slot's task. A poll that then finds
///   itself woken and `op` still failing lost the wake to a barging caller or was woken for
///   nothing: it registers again, at the head of the queue (or in the slot, which is ahead
///   of the list), so it keeps its turn.
/// * On success the entry is removed if it is still queued. If a wake had removed it, the
///   success used that wake (one wake stands for one unit in Semaphore mode, for the whole
///   count otherwise) — except for a success of the re-check right after `add`, whose
///   entry a later wake may have claimed: that one runs `hand_on` (the hand-on rule of
///   [`WaitFor`]).
/// * [`cancel`](Self::cancel) (the owner is dropped) removes the entry; if it was already gone,
///   a wake was spent on this waiter and not used: `hand_on` runs so that it is not lost.
///
/// # Yield once
///
/// The async form of spin-then-park (a blocking wait spins before it registers, see
/// `super::thread`): a wait that is not satisfied at once goes round the executor's run
/// queue one time before it pays for registering (waker clone, `add` or the slot's arming,
/// and on wake the writer's `wake`).
/// When the other side of a hand-off is another task of the same runtime — the typical
/// producer/consumer or ping-pong — it has usually run by then, and the second poll takes the
/// count lock-free. The cost is one extra poll per wait that does block. Nothing can be lost
/// meanwhile: the task has woken itself, so it will be polled again and will either take the
/// count or register and re-check. It is skipped when another entry already waits for the
/// same event, so a newcomer never jumps a queued waiter by yielding.
///
/// A yield stops paying where it lets the task move: on a work-stealing executor (tokio's
/// multi-thread runtime) the self-wake queues the task on its worker's run queue and tells
/// an idle worker, which may steal it and run it on its own CPU, away from the task it
/// hands off with. So a wait that yielded notes the thread it yielded on, and if its next
/// poll runs on another thread, the queue's next [`YIELD_SKIP`] waits that would yield
/// register at once instead (`WaitQueue::may_yield`); on an executor that polls a task on
/// one thread, nothing changes. The async twin of the spin gauge's "woken from my own
/// CPU" rule (`super::spin`): spinning or yielding stops when it only moves work around.
#[derive(Debug)]
pub(crate) struct TaskWait {
    /// The interest mask of the entry (`IN` for readers, `OUT` for writers).
    mask: Events,
    /// Exclusive entries take one wake each (readers); others are all woken (writers).
    exclusive: bool,
    /// Where this wait is.
    state: State,
    /// Whether a poll that would wait yields once first ("Yield once").
    yields: bool,
    /// Whether this wait may take the queue's task slot (an exclusive `IN` wait).
    slot: bool,
}

/// The states of one async wait. A success goes back to `Idle`, so that a stream yields at
/// most once per item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// Not registered; the next poll that would wait yields once.
    Idle,
    /// Not registered; this wait has yielded once already, on this thread (a
    /// [`thread_token`]), the next poll registers.
    Yielded(usize),
    /// An entry in the queue, or one that a wake removed since the last poll. A stale key
    /// (entry woken and removed) is harmless.
    Queued(Key),
    /// Armed in the queue's task slot, or claimed there since the last poll.
    Slot(Ticket),
}

impl TaskWait {
    /// Not registered yet.
    pub(crate) const fn new(mask: Events, exclusive: bool) -> Self {
        TaskWait {
            mask,
            exclusive,
            state: State::Idle,
            yields: true,
            slot: false,
        }
    }

    /// May take the queue's task slot (`super::slot`): for an exclusive `IN` wait whose
    /// queue wakes its exclusive waiters in FIFO order (a notifier's readers; an epoll's
    /// waiters are woken newest first, and do not use it).
    pub(crate) const fn with_slot(mut self) -> Self {
        debug_assert!(self.exclusive && self.mask.bits() == Events::IN.bits());
        self.slot = true;
        self
    }

    /// Never yield once: for a wait whose wake comes from outside the process's tasks (an
    /// epoll task woken by a tokio reactor: `epoll::kernel::reactor`), where the extra
    /// round of the run queue buys nothing and moves the task to another worker.
    pub(crate) const fn without_yield(mut self) -> Self {
        self.yields = false;
        self
    }

    /// Whether this waiter has an entry in the queue, or had one that a wake removed and has
    /// not yet been polled or dropped since.
    #[inline]
    pub(crate) fn is_registered(&self) -> bool {
        matches!(self.state, State::Queued(_) | State::Slot(_))
    }

    /// One poll of the protocol in the type docs. On `Ready` this waiter is unregistered and
    /// may be polled again to wait for the next success (streams do that).
    pub(crate) fn poll<W: WaitFor>(
        &mut self,
        wq: &WaitQueue,
        cx: &mut Context<'_>,
        what: &mut W,
    ) -> Poll<W::Output> {
        if let Some(r) = what.try_now() {
            // No hand-on even if a wake claimed our entry: it was queued (or never made)
            // before this try, so every unit the try could take came with a wake of its own
            // (the hand-on rule of `WaitFor`).
            self.finish(wq);
            return Poll::Ready(r);
        }
        if self.yields
            && self.state == State::Idle
            && !wq.interest().intersects(self.mask)
            && wq.may_yield()
        {
            // Yield once (type docs). No lock is held.
            self.state = State::Yielded(thread_token());
            return yield_pending(cx);
        }
        self.register(wq, cx, what)
    }

    /// The rest of [`poll`](Self::poll), once `op` failed and we do not yield: register
    /// (or register again) and re-check. Kept out of line, so that the common polls (a
    /// success, a yield) stay small.
    #[inline(never)]
    fn register<W: WaitFor>(
        &mut self,
        wq: &WaitQueue,
        cx: &mut Context<'_>,
        what: &mut W,
    ) -> Poll<W::Output> {
        // Foreign code (`clone`) runs here, before any lock; it may re-enter the notifier,
        // and may even wake our own entry — `update_waker` then reports it gone.
        let mut waker = cx.waker().clone();
        // A waker we take back from the slot: dropped last (foreign code), after the re-check.
        let mut old = None;
        // Whether we were registered and keep our turn: at the head of the list, or in the
        // slot even though readers are queued (they queued behind us).
        let front = match self.state {
            State::Idle => false,
            State::Yielded(t) => {
                moved(t, wq);
                false
            }
            // Still armed (a poll nobody woke us for): leave, to arm again with the current
            // waker. Claimed: woken, but `op` failed — keep our turn as well.
            State::Slot(t) => {
                old = wq.disarm_task(t).ok();
                true
            }
            // No interest in our bits: our entry was woken (see `unlink`); skip the lock.
            State::Queued(_) if !wq.interest().intersects(self.mask) => true,
            State::Queued(key) => match wq.update_waker(key, waker) {
                // Still queued, now with the current waker. `op` failed after our interest was
                // published, so any later state change will wake this entry.
                Ok(()) => return Poll::Pending,
                // Woken, but `op` failed: a barging caller took what the wake announced, or
                // the wake was spurious. Keep our turn: go back in at the head.
                Err(w) => {
                    waker = w;
                    true
                }
            },
        };
        let armed = if self.slot {
            wq.arm_task(waker, front)
        } else {
            Err(waker)
        };
        self.state = match armed {
            Ok(t) => State::Slot(t),
            Err(waker) => {
                State::Queued(wq.add(self.mask, self.exclusive, front, Target::Task(waker)))
            }
        };
        let r = self.recheck(wq, what);
        drop(old);
        r
    }

    /// Registered (queued or armed): re-check after publishing interest (the Dekker pair;
    /// see the module docs).
    fn recheck<W: WaitFor>(&mut self, wq: &WaitQueue, what: &mut W) -> Poll<W::Output> {
        if let Some(r) = what.try_now() {
            if self.finish(wq) {
                // Claimed between `add` and here (the hand-on rule).
                what.hand_on();
            }
            return Poll::Ready(r);
        }
        Poll::Pending
    }

    /// Remove our entry if it is still queued; `true` if it was (not woken).
    ///
    /// Lock-free shortcut: if `interest` has none of our mask's bits, our entry is not linked
    /// — it was woken — and the lock is not taken. Sound because the list's bits of
    /// `interest` are only written under the queue lock, by our own `add` (a `fetch_or` of
    /// our mask) and by `publish` (the exact union of the linked entries' masks; the slot's
    /// lock-free `SLOT` bit only adds `IN`, which at worst takes the lock for nothing); so
    /// every value that follows our `add` in its modification order includes our mask for
    /// as long as our entry is linked, and
    /// by coherence our load (after our `add`, in program order or through the executor's
    /// hand-over of the future) sees one of those values. The shortcut saves the lock on the
    /// common path: woken, sole waiter for that event, and then done.
    fn unlink(&self, key: Key, wq: &WaitQueue) -> bool {
        wq.interest().intersects(self.mask) && wq.remove(key)
    }

    /// `op` succeeded: unregister. Returns whether a wake had claimed the entry.
    #[inline(always)]
    fn finish(&mut self, wq: &WaitQueue) -> bool {
        match std::mem::replace(&mut self.state, State::Idle) {
            State::Queued(key) => !self.unlink(key, wq),
            // Our own waker comes back if nobody claimed us; dropped here, no lock held.
            State::Slot(t) => wq.disarm_task(t).is_err(),
            State::Yielded(t) => {
                moved(t, wq);
                false
            }
            State::Idle => false,
        }
    }

    /// The owner goes away without success: unregister. If the entry had already been removed
    /// by a wake, that wake was spent on us and not used: hand it on.
    #[inline]
    pub(crate) fn cancel(&mut self, wq: &WaitQueue, what: &mut impl WaitFor) {
        let claimed = match std::mem::replace(&mut self.state, State::Idle) {
            State::Queued(key) => !self.unlink(key, wq),
            State::Slot(t) => wq.disarm_task(t).is_err(),
            State::Idle | State::Yielded(_) => false,
        };
        if claimed {
            what.hand_on();
        }
    }
}

/// How many of a queue's next waits that would yield once register at once after a yield
/// let its task move to another thread (`TaskWait`'s docs, "Yield once"). In a tokio
/// ping-pong on two workers, any value from 8 to 64 gained over none, idle and beside a
/// busy co-tenant, 16 as much as any (docs/handoff.md, "A yield that moves the task").
pub(crate) const YIELD_SKIP: u32 = 16;

/// A wait that yielded on thread `yielded` is polled again: if on another thread, the
/// yield let the task move (`TaskWait`'s docs, "Yield once").
#[inline(always)]
fn moved(yielded: usize, wq: &WaitQueue) {
    if yielded != thread_token() {
        wq.yield_moved();
    }
}

/// The calling thread, as a number no other live thread has: the address of a
/// thread-local (two instructions, no syscall).
#[inline]
fn thread_token() -> usize {
    std::thread_local! {
        static ME: u8 = const { 0 };
    }
    ME.with(|me| me as *const u8 as usize)
}

/// What every future of the crate returns when polled again after it returned `Ready`.
/// A yield: wake the task (foreign code: call with no lock held) and return `Pending`, so
/// the executor runs its other tasks before polling this one again.
pub(crate) fn yield_pending<T>(cx: &mut Context<'_>) -> Poll<T> {
    cx.waker().wake_by_ref();
    Poll::Pending
}

/// `Pending` once (a [`yield_pending`]), then `Ready`.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn yield_now() -> impl std::future::Future<Output = ()> {
    let mut yielded = false;
    std::future::poll_fn(move |cx| {
        if std::mem::replace(&mut yielded, true) {
            Poll::Ready(())
        } else {
            yield_pending(cx)
        }
    })
}

pub(crate) fn polled_after_completion() -> std::io::Error {
    std::io::Error::other("evfd future polled after it completed")
}
