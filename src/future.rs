//! Futures for [`Notifier`]: [`ReadFuture`], [`WriteFuture`] and their owned twins.
//!
//! No fd and no syscall: a pending future is a [`Target::Task`] entry in the notifier's
//! [`WaitQueue`], exactly like a blocked thread is a [`Target::Thread`] entry. The
//! machinery — register, re-check, swap the waker on a re-poll, unregister on drop and hand
//! on a wake that was won but not used — lives in [`TaskWait`], which knows nothing about
//! notifiers, so that `Epoll::wait_async` and the streams can reuse it with their own
//! operation and hand-on.
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
//! As in `Inner::block`: try the operation; if it would wait, `add` the entry (which
//! publishes its interest, `SeqCst`, under the queue lock) and then try the operation once
//! more. A write that lands between the two tries either sees the interest bit and wakes the
//! entry, or is seen by the second try (module docs of `wait_queue`).
//!
//! # Why the futures are `Unpin`
//!
//! tokio's `Notified` is `!Unpin` because its waiter node is intrusive: it lives inside the
//! future and the queue points into it. Here the entry lives in the queue's slab and the
//! future only keeps its [`Key`] (an index plus a generation, harmless when stale), so moving
//! a future is safe and no `unsafe` is needed. Being `Unpin` lets callers poll a future
//! through `&mut` without pinning it.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use crate::mode::WriteRefused;
use crate::notifier::{invalid_write, Inner};
use crate::wait_queue::{Key, Target, WaitQueue};
use crate::{Epoll, Event, Events, Notifier};

/// A task's place in a [`WaitQueue`]: at most one entry, registered on demand.
///
/// The protocol, for any operation `op` (returns `None` while it would wait) and any
/// `hand_on` (passes on a wake that this waiter won but does not use):
///
/// * [`poll`](Self::poll) tries `op`. The first time it would wait while no entry in the
///   queue wants the same event, it yields once instead of registering: it wakes its own task
///   and returns `Pending` (see "Yield once" below).
/// * Otherwise, if it would wait, it registers a `Target::Task` entry with a clone of the
///   task's waker and tries `op` again (lost-wakeup rule). A re-poll while still queued swaps
///   the stored waker for the current one (`update_waker`).
/// * A wake removes the entry (autoremove). A poll that then finds its entry gone and `op`
///   still failing lost the wake to a barging caller or was woken for nothing: it registers
///   again, at the head of the queue, so it keeps its turn.
/// * On success the entry is removed if it is still queued. If a wake had removed it, the
///   success used that wake (one wake stands for one unit in Semaphore mode, for the whole
///   count otherwise), so nothing is handed on: handing on here would only wake the next
///   waiter for nothing.
/// * [`cancel`](Self::cancel) (the owner is dropped) removes the entry; if it was already gone,
///   a wake was spent on this waiter and not used: `hand_on` runs so that it is not lost.
///
/// # Yield once
///
/// The async form of spin-then-park (`ThreadWaiter::wait` spins before parking): a wait that
/// is not satisfied at once goes round the executor's run queue one time before it pays for
/// the queue lock (waker clone, `add`, and on wake `remove` + `wake` on the writer's side).
/// When the other side of a hand-off is another task of the same runtime — the typical
/// producer/consumer or ping-pong — it has usually run by then, and the second poll takes the
/// count lock-free. The cost is one extra poll per wait that does block. Nothing can be lost
/// meanwhile: the task has woken itself, so it will be polled again and will either take the
/// count or register and re-check. It is skipped when another entry already waits for the
/// same event, so a newcomer never jumps a queued waiter by yielding.
#[derive(Debug)]
pub(crate) struct TaskWait {
    /// The interest mask of the entry (`IN` for readers, `OUT` for writers).
    mask: Events,
    /// Exclusive entries take one wake each (readers); others are all woken (writers).
    exclusive: bool,
    /// The entry, while registered. A stale key (entry woken and removed) is harmless.
    key: Option<Key>,
    /// This wait already yielded once instead of registering (reset on success, so a
    /// stream yields at most once per item).
    yielded: bool,
}

impl TaskWait {
    /// Not registered yet.
    pub(crate) const fn new(mask: Events, exclusive: bool) -> Self {
        TaskWait {
            mask,
            exclusive,
            key: None,
            yielded: false,
        }
    }

    /// Whether this waiter has an entry in the queue, or had one that a wake removed and has
    /// not yet been polled or dropped since.
    pub(crate) fn is_registered(&self) -> bool {
        self.key.is_some()
    }

    /// One poll of the protocol in the type docs. On `Ready` this waiter is unregistered and
    /// may be polled again to wait for the next success (streams do that).
    pub(crate) fn poll<R>(
        &mut self,
        wq: &WaitQueue,
        cx: &mut Context<'_>,
        mut op: impl FnMut() -> Option<R>,
    ) -> Poll<R> {
        if let Some(r) = op() {
            self.finish(wq);
            self.yielded = false;
            return Poll::Ready(r);
        }
        if self.key.is_none() && !self.yielded && !wq.interest().intersects(self.mask) {
            // Yield once (type docs). `wake_by_ref` is foreign code: no lock is held.
            self.yielded = true;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        // Foreign code (`clone`) runs here, before any lock; it may re-enter the notifier,
        // and may even wake our own entry — `update_waker` then reports it gone.
        let waker = cx.waker().clone();
        let (waker, front) = match self.key {
            None => (waker, false),
            // No interest in our bits: our entry was woken (see `unlink`); skip the lock.
            Some(_) if !wq.interest().intersects(self.mask) => (waker, true),
            Some(key) => match wq.update_waker(key, waker) {
                // Still queued, now with the current waker. `op` failed after our interest was
                // published, so any later state change will wake this entry.
                Ok(()) => return Poll::Pending,
                // Woken, but `op` failed: a barging caller took what the wake announced, or
                // the wake was spurious. Keep our turn: go back in at the head.
                Err(waker) => (waker, true),
            },
        };
        self.key = Some(wq.add(self.mask, self.exclusive, front, Target::Task(waker)));
        // Re-check after publishing interest (the Dekker pair; see the module docs).
        if let Some(r) = op() {
            self.finish(wq);
            self.yielded = false;
            return Poll::Ready(r);
        }
        Poll::Pending
    }

    /// Remove our entry if it is still queued; `true` if it was (not woken).
    ///
    /// Lock-free shortcut: if `interest` has none of our mask's bits, our entry is not linked
    /// — it was woken — and the lock is not taken. Sound because `interest` is only written
    /// under the queue lock, by our own `add` (a `fetch_or` of our mask) and by `publish`
    /// (the exact union of the linked entries' masks); so every value that follows our `add`
    /// in its modification order includes our mask for as long as our entry is linked, and
    /// by coherence our load (after our `add`, in program order or through the executor's
    /// hand-over of the future) sees one of those values. The shortcut saves the lock on the
    /// common path: woken, sole waiter for that event, and then done.
    fn unlink(&self, key: Key, wq: &WaitQueue) -> bool {
        wq.interest().intersects(self.mask) && wq.remove(key)
    }

    /// `op` succeeded: unregister. A wake that had removed the entry was used by the success.
    fn finish(&mut self, wq: &WaitQueue) {
        if let Some(key) = self.key.take() {
            self.unlink(key, wq);
        }
    }

    /// The owner goes away without success: unregister. If the entry had already been removed
    /// by a wake, that wake was spent on us and not used: run `hand_on`.
    pub(crate) fn cancel(&mut self, wq: &WaitQueue, hand_on: impl FnOnce()) {
        if let Some(key) = self.key.take() {
            if !self.unlink(key, wq) {
                hand_on();
            }
        }
    }
}

fn polled_after_completion() -> io::Error {
    io::Error::other("evfd future polled after it completed")
}

/// The state of one `read_async`: the read is [`Inner::try_read`] (whole count, or 1 in
/// Semaphore mode); an unused wake is handed to the next reader.
#[derive(Debug)]
struct ReadOp {
    wait: TaskWait,
    done: bool,
}

impl ReadOp {
    const fn new() -> Self {
        ReadOp {
            wait: TaskWait::new(Events::IN, true),
            done: false,
        }
    }

    fn poll(&mut self, inner: &Inner, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        if self.done {
            return Poll::Ready(Err(polled_after_completion()));
        }
        let got = ready!(self.wait.poll(&inner.wq, cx, || inner.try_read()));
        self.done = true;
        Poll::Ready(Ok(got))
    }

    fn cancel(&mut self, inner: &Inner) {
        self.wait
            .cancel(&inner.wq, || inner.hand_on(Events::IN, true));
    }
}

/// The state of one `write_async(n)`.
#[derive(Debug)]
struct WriteOp {
    wait: TaskWait,
    n: u64,
    done: bool,
}

impl WriteOp {
    const fn new(n: u64) -> Self {
        // Writers are not exclusive: every read that makes room wakes them all, as for
        // blocked writer threads.
        WriteOp {
            wait: TaskWait::new(Events::OUT, false),
            n,
            done: false,
        }
    }

    fn poll(&mut self, inner: &Inner, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Err(polled_after_completion()));
        }
        let n = self.n;
        let r = ready!(self.wait.poll(&inner.wq, cx, || match inner.try_write(n) {
            Ok(()) => Some(Ok(())),
            Err(WriteRefused::Invalid) => Some(Err(invalid_write())),
            Err(WriteRefused::Full) => None,
        },));
        self.done = true;
        Poll::Ready(r)
    }

    fn cancel(&mut self, inner: &Inner) {
        self.wait
            .cancel(&inner.wq, || inner.hand_on(Events::OUT, false));
    }
}

/// The future returned by [`Notifier::read_async`].
///
/// Resolves to what [`Notifier::read`] would return. Polling it again after it returned
/// `Ready` returns `Ready(Err(_))` (kind `Other`) and touches nothing; with the `futures`
/// feature it implements `FusedFuture`.
///
/// # Cancel safety
///
/// Dropping it before it returned `Ready` consumes nothing. If a write had already woken it
/// (in Semaphore mode, a wake stands for one unit), the drop hands that wake on to the next
/// waiting reader, so no unit is left behind a reader that went away.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// n.write(2).unwrap();
/// let f: evfd::ReadFuture<'_> = n.read_async();
/// assert_eq!(futures::executor::block_on(f).unwrap(), 2);
/// ```
#[must_use = "futures do nothing unless you .await or poll them"]
pub struct ReadFuture<'a> {
    notifier: &'a Notifier,
    op: ReadOp,
}

/// The future returned by [`Notifier::read_owned`]: a [`ReadFuture`] that holds its own
/// handle, so it is `'static`.
///
/// # Cancel safety
///
/// As [`ReadFuture`]: dropped early, it consumes nothing and hands on a wake it had won.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// let f: evfd::OwnedReadFuture = n.read_owned();
/// let t = std::thread::spawn(move || futures::executor::block_on(f).unwrap());
/// n.write(5).unwrap();
/// assert_eq!(t.join().unwrap(), 5);
/// ```
#[must_use = "futures do nothing unless you .await or poll them"]
pub struct OwnedReadFuture {
    notifier: Notifier,
    op: ReadOp,
}

/// The future returned by [`Notifier::write_async`].
///
/// Resolves to what [`Notifier::write`] would return. Polling it again after it returned
/// `Ready` returns `Ready(Err(_))` (kind `Other`) and writes nothing.
///
/// # Cancel safety
///
/// Dropping it before it returned `Ready` writes nothing: the count changes only in the poll
/// that returns `Ready(Ok(()))`.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// let f: evfd::WriteFuture<'_> = n.write_async(3);
/// futures::executor::block_on(f).unwrap();
/// assert_eq!(n.count(), 3);
/// ```
#[must_use = "futures do nothing unless you .await or poll them"]
pub struct WriteFuture<'a> {
    notifier: &'a Notifier,
    op: WriteOp,
}

/// The future returned by [`Notifier::write_owned`]: a [`WriteFuture`] that holds its own
/// handle, so it is `'static`.
///
/// # Cancel safety
///
/// As [`WriteFuture`]: dropped early, it writes nothing.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// let f: evfd::OwnedWriteFuture = n.write_owned(4);
/// std::thread::spawn(move || futures::executor::block_on(f).unwrap()).join().unwrap();
/// assert_eq!(n.count(), 4);
/// ```
#[must_use = "futures do nothing unless you .await or poll them"]
pub struct OwnedWriteFuture {
    notifier: Notifier,
    op: WriteOp,
}

macro_rules! impl_future {
    ($ty:ty, $out:ty, $name:literal) => {
        impl Future for $ty {
            type Output = io::Result<$out>;

            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                let this = self.get_mut();
                this.op.poll(&this.notifier.inner, cx)
            }
        }

        impl Drop for $ty {
            fn drop(&mut self) {
                self.op.cancel(&self.notifier.inner);
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.debug_struct($name)
                    .field("notifier", &self.notifier)
                    .field("registered", &self.op.wait.is_registered())
                    .field("done", &self.op.done)
                    .finish()
            }
        }

        #[cfg(feature = "futures")]
        impl futures_core::FusedFuture for $ty {
            fn is_terminated(&self) -> bool {
                self.op.done
            }
        }
    };
}

impl_future!(ReadFuture<'_>, u64, "ReadFuture");
impl_future!(OwnedReadFuture, u64, "OwnedReadFuture");
impl_future!(WriteFuture<'_>, (), "WriteFuture");
impl_future!(OwnedWriteFuture, (), "OwnedWriteFuture");

impl Notifier {
    /// Take from the count, waiting asynchronously while it is 0: the whole count (Counter,
    /// AutoReset) or 1 (Semaphore), as [`read`](Self::read).
    ///
    /// Works on any executor: the task's `Waker` waits in the notifier's wait queue, no fd
    /// and no syscall are involved. In [`Mode::AutoReset`](crate::Mode::AutoReset) the
    /// completed read *is* the delivery: it already leaves the count at 0. The future never
    /// blocks the thread, so it waits even on a `NONBLOCK` notifier (use
    /// [`try_read`](Self::try_read) for a `WouldBlock`).
    ///
    /// # Fairness
    ///
    /// Readers — blocked threads and pending futures alike — wait in one FIFO queue. In
    /// Semaphore mode a `write(n)` wakes the first `n` waiting readers, one per unit; in
    /// Counter and AutoReset mode a write wakes the first waiting reader, which takes the
    /// whole count. Waking is not handing over: a reader that arrives while units are
    /// available (a `try_read`, or a new future's first poll) may take them before a woken
    /// waiter runs (barging). A woken future that finds nothing left goes back to the head of
    /// the queue, keeping its turn.
    ///
    /// # Implementation notes
    ///
    /// No fd, no syscall, no allocation of its own: a pending future is an entry (with a
    /// clone of the task's `Waker`) in the notifier's wait queue. A future that would wait
    /// while nobody else waits first yields once — it wakes its own task and returns
    /// `Pending` — and registers only if the count is still 0 at the next poll: the async
    /// twin of spin-then-park, which keeps task-to-task hand-offs off the queue's lock. It
    /// costs one extra poll per wait that does block; its place in the FIFO queue is taken
    /// when it registers.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a future dropped before it returned `Ready` has consumed nothing. A wake
    /// that it had already won (its entry was removed by a write) is handed on to the next
    /// waiting reader when it is dropped, so nothing is lost.
    ///
    /// # Errors
    ///
    /// None from the read itself; `Err` (kind `Other`) only if polled again after completion.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::Notifier;
    /// let n = Notifier::new();
    /// let n2 = n.clone();
    /// let t = std::thread::spawn(move || n2.write(5).unwrap());
    /// assert_eq!(futures::executor::block_on(n.read_async()).unwrap(), 5);
    /// t.join().unwrap();
    /// ```
    pub fn read_async(&self) -> ReadFuture<'_> {
        ReadFuture {
            notifier: self,
            op: ReadOp::new(),
        }
    }

    /// As [`read_async`](Self::read_async), but the future holds a clone of the handle and so
    /// is `'static` (for `tokio::spawn`, or to keep in a struct).
    ///
    /// # Cancel safety
    ///
    /// As [`read_async`](Self::read_async).
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// let fut = n.read_owned();
    /// n.write(2).unwrap();
    /// drop(n); // the future keeps the notifier alive
    /// assert_eq!(futures::executor::block_on(fut).unwrap(), 2);
    /// ```
    pub fn read_owned(&self) -> OwnedReadFuture {
        OwnedReadFuture {
            notifier: self.clone(),
            op: ReadOp::new(),
        }
    }

    /// Add `n` to the count, waiting asynchronously for room while it would pass
    /// [`LIMIT`](crate::LIMIT), as [`write`](Self::write). Wakes waiting readers as `write` does.
    ///
    /// Writers waiting for room are all woken by each read that makes room; each retries, and
    /// those that still do not fit wait again (no FIFO order among writers). The future never
    /// blocks the thread, so it waits even on a `NONBLOCK` notifier.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the count changes only in the poll that returns `Ready(Ok(()))`; a future
    /// dropped before that has written nothing.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`, at the first poll, whatever the count.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::executor::block_on;
    /// let n = evfd::Notifier::new();
    /// n.write(evfd::LIMIT).unwrap();
    /// let n2 = n.clone();
    /// let t = std::thread::spawn(move || block_on(n2.write_async(3)));
    /// assert_eq!(n.read().unwrap(), evfd::LIMIT); // makes room
    /// t.join().unwrap().unwrap();
    /// assert_eq!(n.read().unwrap(), 3);
    /// let e = block_on(n.write_async(u64::MAX)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn write_async(&self, n: u64) -> WriteFuture<'_> {
        WriteFuture {
            notifier: self,
            op: WriteOp::new(n),
        }
    }

    /// As [`write_async`](Self::write_async), but the future holds a clone of the handle and
    /// so is `'static`.
    ///
    /// # Cancel safety
    ///
    /// As [`write_async`](Self::write_async).
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// futures::executor::block_on(n.write_owned(4)).unwrap();
    /// assert_eq!(n.count(), 4);
    /// ```
    pub fn write_owned(&self, n: u64) -> OwnedWriteFuture {
        OwnedWriteFuture {
            notifier: self.clone(),
            op: WriteOp::new(n),
        }
    }
}

/// The future returned by [`Epoll::wait_async`].
///
/// Resolves to what [`Epoll::wait`] with no timeout would return: the number of events
/// written to the buffer (at least 1), or `InvalidInput` for an empty buffer. A pending
/// future is a task entry in the epoll's waiter queue; no thread blocks and no syscall is
/// made.
///
/// # Cancel safety
///
/// Dropping it before it returned `Ready` delivers nothing: events are harvested (and
/// AutoReset notifiers reset) only in the poll that returns them. A wake it had already won
/// is handed on to another waiter of the epoll if events are still queued.
///
/// # Examples
///
/// ```
/// use evfd::{Epoll, Event, Events, Notifier};
/// let ep = Epoll::new();
/// let n = Notifier::builder().initial(1).build().unwrap();
/// ep.add(&n, Events::IN, 3).unwrap();
/// let mut evs = [Event::default(); 2];
/// let f: evfd::EpollWaitFuture<'_> = ep.wait_async(&mut evs);
/// assert_eq!(futures::executor::block_on(f).unwrap(), 1);
/// assert_eq!(evs[0].data, 3);
/// ```
#[must_use = "futures do nothing unless you .await or poll them"]
pub struct EpollWaitFuture<'a> {
    ep: &'a Epoll,
    buf: &'a mut [Event],
    wait: TaskWait,
    done: bool,
}

impl Future for EpollWaitFuture<'_> {
    type Output = io::Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(polled_after_completion()));
        }
        if this.buf.is_empty() {
            this.done = true;
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "the event buffer is empty (maxevents must be at least 1)",
            )));
        }
        let core = &this.ep.inner.core;
        let buf = &mut *this.buf;
        let n = ready!(this.wait.poll(&core.waiters, cx, || {
            let n = core.harvest_now(buf);
            (n > 0).then_some(n)
        }));
        this.done = true;
        Poll::Ready(Ok(n))
    }
}

impl Drop for EpollWaitFuture<'_> {
    fn drop(&mut self) {
        let core = &self.ep.inner.core;
        self.wait.cancel(&core.waiters, || {
            if core.has_ready() {
                core.waiters.wake(Events::IN, 1);
            }
        });
    }
}

impl fmt::Debug for EpollWaitFuture<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EpollWaitFuture")
            .field("epoll", &self.ep)
            .field("registered", &self.wait.is_registered())
            .field("done", &self.done)
            .finish()
    }
}

#[cfg(feature = "futures")]
impl futures_core::FusedFuture for EpollWaitFuture<'_> {
    fn is_terminated(&self) -> bool {
        self.done
    }
}

impl Epoll {
    /// Wait asynchronously for events and fill `events` with up to `events.len()` of them:
    /// [`wait`](Self::wait) with no timeout, on any executor (wrap it in your runtime's
    /// timeout for one). The semantics are `wait`'s: re-poll at delivery, LT requeue, ET,
    /// ONESHOT, AutoReset reset by the delivery.
    ///
    /// Kernel-fd sources (`BorrowedFd`, [`KernelNotifier`](crate::KernelNotifier)) are
    /// harvested by every poll of this future, but their readiness does not wake a pending
    /// one (nor ring an [`Epoll::fd_view`]): for an `Epoll` with kernel sources, use the
    /// blocking `wait` on a thread, or register those fds with your reactor directly.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if `events` is empty.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: dropped before completion, it has delivered nothing (see
    /// [`EpollWaitFuture`]).
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Epoll, Event, Events, Notifier};
    /// let ep = Epoll::new();
    /// let n = Notifier::new();
    /// ep.add(&n, Events::IN, 9)?;
    /// let n2 = n.clone();
    /// std::thread::spawn(move || n2.write(1).unwrap());
    /// let mut evs = [Event::default(); 4];
    /// let got = futures::executor::block_on(ep.wait_async(&mut evs))?;
    /// assert_eq!(&evs[..got], &[Event { events: Events::IN, data: 9 }]);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn wait_async<'a>(&'a self, events: &'a mut [Event]) -> EpollWaitFuture<'a> {
        EpollWaitFuture {
            ep: self,
            buf: events,
            wait: TaskWait::new(Events::IN, true),
            done: false,
        }
    }
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    //! Executor-free tests with a hand-rolled counting waker: they run under Miri.

    use super::*;
    use crate::Mode;
    use std::pin::pin;
    use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
    use std::sync::Arc;
    use std::task::{Wake, Waker};

    #[derive(Default)]
    struct Count(AtomicUsize);

    impl Count {
        /// Wakes since the last `take`.
        fn take(&self) -> usize {
            self.0.swap(0, SeqCst)
        }
    }

    impl Wake for Count {
        fn wake(self: Arc<Self>) {
            self.0.fetch_add(1, SeqCst);
        }
    }

    fn waker() -> (Arc<Count>, Waker) {
        let c = Arc::new(Count::default());
        (c.clone(), Waker::from(c))
    }

    fn poll<F: Future + Unpin>(f: &mut F, w: &Waker) -> Poll<F::Output> {
        Pin::new(f).poll(&mut Context::from_waker(w))
    }

    /// Poll `f` until it has an entry in `n`'s queue (its first poll may yield instead:
    /// "Yield once"); then forget the wakes seen so far.
    fn park<F: Future + Unpin>(n: &Notifier, f: &mut F, (c, w): &(Arc<Count>, Waker)) {
        let before = n.inner.wq.len();
        for _ in 0..2 {
            assert!(poll(f, w).is_pending());
            if n.inner.wq.len() > before {
                c.take();
                return;
            }
        }
        panic!("not registered after two polls");
    }

    fn sem() -> Notifier {
        Notifier::builder().mode(Mode::Semaphore).build().unwrap()
    }

    #[test]
    fn traits() {
        fn send_unpin<T: Send + Sync + Unpin + fmt::Debug>() {}
        fn is_static<T: 'static>() {}
        send_unpin::<ReadFuture<'_>>();
        send_unpin::<WriteFuture<'_>>();
        send_unpin::<OwnedReadFuture>();
        send_unpin::<OwnedWriteFuture>();
        is_static::<OwnedReadFuture>();
        is_static::<OwnedWriteFuture>();
    }

    #[test]
    fn ready_at_once_registers_nothing() {
        let n = Notifier::builder().initial(3).build().unwrap();
        let (c, w) = waker();
        let mut f = pin!(n.read_async());
        assert_eq!(poll(&mut f, &w).map(|r| r.unwrap()), Poll::Ready(3));
        assert_eq!(n.inner.wq.len(), 0);
        assert_eq!(c.take(), 0);
        // Fused: a second poll is an error, and reads nothing.
        n.write(1).unwrap();
        assert!(
            matches!(poll(&mut f, &w), Poll::Ready(Err(e)) if e.kind() == io::ErrorKind::Other)
        );
        assert_eq!(n.count(), 1);
    }

    #[test]
    fn first_wait_yields_once_then_registers() {
        let n = Notifier::new();
        let (c, w) = waker();
        let mut f = n.read_async();
        assert!(poll(&mut f, &w).is_pending());
        assert_eq!(
            (c.take(), n.inner.wq.len()),
            (1, 0),
            "yielded: woke itself, no entry"
        );
        assert!(poll(&mut f, &w).is_pending());
        assert_eq!((c.take(), n.inner.wq.len()), (0, 1), "then registered");
        // A write while it yields is simply taken by the next poll.
        let mut g = n.read_async();
        let mut h = n.read_async();
        drop(f);
        assert!(poll(&mut g, &w).is_pending());
        n.write(2).unwrap();
        assert_eq!(poll(&mut g, &w).map(|r| r.unwrap()), Poll::Ready(2));
        // A newcomer does not yield while another waits: it queues behind it at once.
        let (_, w2) = waker();
        let mut k = n.read_async();
        park(&n, &mut k, &waker());
        assert!(poll(&mut h, &w2).is_pending());
        assert_eq!(n.inner.wq.len(), 2);
    }

    #[test]
    fn pending_then_write_wakes_and_completes() {
        let n = Notifier::new();
        let cw = waker();
        let mut f = pin!(n.read_async());
        park(&n, &mut f, &cw);
        let (c, w) = &cw;
        assert!(
            poll(&mut f, w).is_pending(),
            "spurious re-poll stays pending"
        );
        assert_eq!(n.inner.wq.len(), 1);
        n.write(7).unwrap();
        assert_eq!(c.take(), 1);
        assert_eq!(poll(&mut f, w).map(|r| r.unwrap()), Poll::Ready(7));
        assert_eq!(n.inner.wq.len(), 0);
        assert_eq!(n.inner.wq.interest(), Events::empty());
    }

    #[test]
    fn drop_pending_consumes_nothing() {
        let n = Notifier::new();
        let cw = waker();
        {
            let mut f = pin!(n.read_async());
            park(&n, &mut f, &cw);
            n.write(2).unwrap(); // wakes it; it is dropped without being polled
        }
        assert_eq!(n.inner.wq.len(), 0);
        assert_eq!(n.try_read().unwrap(), 2);
    }

    #[test]
    fn semaphore_three_futures_two_units() {
        let n = sem();
        let ws: Vec<_> = (0..3).map(|_| waker()).collect();
        let mut fs: Vec<_> = (0..3).map(|_| n.read_async()).collect();
        for (f, cw) in fs.iter_mut().zip(&ws) {
            park(&n, f, cw);
        }
        n.write(2).unwrap();
        let woken: Vec<usize> = ws.iter().map(|(c, _)| c.take()).collect();
        assert_eq!(woken, vec![1, 1, 0], "FIFO: the first two are woken");
        let done: Vec<bool> = fs
            .iter_mut()
            .zip(&ws)
            .map(|(f, (_, w))| poll(f, w).is_ready())
            .collect();
        assert_eq!(done, vec![true, true, false]);
        n.write(1).unwrap();
        assert_eq!(ws[2].0.take(), 1, "no spurious wake before that write");
        assert_eq!(
            poll(&mut fs[2], &ws[2].1).map(|r| r.unwrap()),
            Poll::Ready(1)
        );
        assert_eq!(n.count(), 0);
        assert_eq!(n.inner.wq.len(), 0);
    }

    #[test]
    fn repoll_with_new_waker_uses_it() {
        let n = Notifier::new();
        let cw1 = waker();
        let (c2, w2) = waker();
        let mut f = pin!(n.read_async());
        park(&n, &mut f, &cw1);
        assert!(poll(&mut f, &w2).is_pending());
        assert_eq!(n.inner.wq.len(), 1, "the entry is reused, not duplicated");
        n.write(1).unwrap();
        assert_eq!((cw1.0.take(), c2.take()), (0, 1));
        assert!(poll(&mut f, &w2).is_ready());
    }

    #[test]
    fn dropped_winner_hands_its_wake_on() {
        let n = sem();
        let (cwa, cwb) = (waker(), waker());
        let mut a = n.read_async();
        let mut b = n.read_async();
        park(&n, &mut a, &cwa);
        park(&n, &mut b, &cwb);
        n.write(1).unwrap();
        assert_eq!((cwa.0.take(), cwb.0.take()), (1, 0));
        drop(a); // won the wake, never used it
        assert_eq!(cwb.0.take(), 1, "the wake went to b");
        assert_eq!(poll(&mut b, &cwb.1).map(|r| r.unwrap()), Poll::Ready(1));
        assert_eq!(n.inner.wq.len(), 0);
    }

    #[test]
    fn barged_waiter_keeps_its_turn() {
        let n = sem();
        let (cwa, cwb) = (waker(), waker());
        let mut a = n.read_async();
        let mut b = n.read_async();
        park(&n, &mut a, &cwa);
        park(&n, &mut b, &cwb);
        n.write(1).unwrap();
        assert_eq!(n.try_read().unwrap(), 1, "barging");
        assert!(
            poll(&mut a, &cwa.1).is_pending(),
            "woken for nothing: waits again"
        );
        n.write(1).unwrap();
        assert_eq!(cwa.0.take(), 2, "a went back in at the head");
        assert!(poll(&mut a, &cwa.1).is_ready());
        assert!(poll(&mut b, &cwb.1).is_pending());
    }

    #[test]
    fn autoreset_read_is_the_delivery() {
        let n = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
        let cw = waker();
        let mut f = pin!(n.read_async());
        park(&n, &mut f, &cw);
        n.write(2).unwrap();
        n.write(3).unwrap();
        assert_eq!(poll(&mut f, &cw.1).map(|r| r.unwrap()), Poll::Ready(5));
        assert_eq!(n.count(), 0);
    }

    #[test]
    fn write_async_waits_for_room() {
        let n = Notifier::builder().initial(crate::LIMIT).build().unwrap();
        let (c, w) = waker();
        let mut f = pin!(n.write_async(2));
        park(&n, &mut f, &(c.clone(), w.clone()));
        assert_eq!(n.count(), crate::LIMIT);
        assert_eq!(n.try_read().unwrap(), crate::LIMIT);
        assert_eq!(c.take(), 1);
        assert!(matches!(poll(&mut f, &w), Poll::Ready(Ok(()))));
        assert_eq!(n.count(), 2);
        assert!(poll(&mut f, &w).is_ready(), "fused");
        assert_eq!(n.count(), 2, "a poll after completion writes nothing");
    }

    #[test]
    fn write_async_max_is_invalid_at_once() {
        let n = Notifier::builder().initial(crate::LIMIT).build().unwrap();
        let (_, w) = waker();
        let mut f = pin!(n.write_async(u64::MAX));
        match poll(&mut f, &w) {
            Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::InvalidInput),
            other => panic!("{other:?}"),
        }
        assert_eq!(n.inner.wq.len(), 0);
    }

    #[test]
    fn dropped_write_writes_nothing() {
        let n = Notifier::builder().initial(crate::LIMIT).build().unwrap();
        {
            let mut f = pin!(n.write_owned(1));
            park(&n, &mut f, &waker());
        }
        assert_eq!(n.count(), crate::LIMIT);
        assert_eq!(n.inner.wq.len(), 0);
    }

    #[test]
    fn write_from_another_thread() {
        let n = sem();
        let (c, w) = waker();
        let mut f = pin!(n.read_async());
        park(&n, &mut f, &(c.clone(), w.clone()));
        let n2 = n.clone();
        std::thread::spawn(move || n2.write(1).unwrap())
            .join()
            .unwrap();
        assert_eq!(c.take(), 1);
        assert_eq!(poll(&mut f, &w).map(|r| r.unwrap()), Poll::Ready(1));
    }
}
