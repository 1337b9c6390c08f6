//! Futures for [`Notifier`]: [`ReadFuture`], [`WriteFuture`] and their owned twins.
//!
//! No fd and no syscall: a pending future is a [`Target::Task`] entry in the notifier's
//! [`WaitQueue`], exactly like a blocked thread is a [`Target::Thread`] entry. The
//! machinery — register, re-check, swap the waker on a re-poll, unregister on drop and hand
//! on a wake that was won but not used — is the wait queue's async wait ([`TaskWait`]);
//! this module gives it the notifier's operations and hand-on.
//!
//! # LOCKING
//!
//! No lock of its own; see `crate::wait_queue::task`.
//!
//! # Why the futures are `Unpin`
//!
//! tokio's `Notified` is `!Unpin` because its waiter node is intrusive: it lives inside the
//! future and the queue points into it. Here the entry lives in the queue's slab and the
//! future only keeps its key (an index plus a generation, harmless when stale), so moving
//! a future is safe and no `unsafe` is needed. Being `Unpin` lets callers poll a future
//! through `&mut` without pinning it.
//!
//! [`Target::Task`]: crate::wait_queue::Target::Task
//! [`Target::Thread`]: crate::wait_queue::Target::Thread
//! [`WaitQueue`]: crate::wait_queue::WaitQueue
//! [`TaskWait`]: crate::wait_queue::task::TaskWait

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::{Inner, LookedRead, Notifier, Op, Read, Write};
use crate::wait_queue::task::{polled_after_completion, TaskWait};

/// The state of one `read_async`: the async wait for a [`Read`] (whole count, or 1 in
/// Semaphore mode); a wake left unused is handed to the next reader.
#[derive(Debug)]
struct ReadOp {
    wait: TaskWait,
    done: bool,
}

impl ReadOp {
    const fn new() -> Self {
        ReadOp {
            wait: TaskWait::new(Read::MASK, Read::EXCLUSIVE).with_slot(),
            done: false,
        }
    }

    #[inline]
    fn poll(&mut self, inner: &Inner, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        if self.done {
            return Poll::Ready(Err(polled_after_completion()));
        }
        if let Err(e) = inner.check() {
            self.done = true;
            return Poll::Ready(Err(e));
        }
        let r = ready!(self.wait.poll(&inner.wq, cx, &mut LookedRead(inner)));
        self.done = true;
        Poll::Ready(r)
    }

    fn cancel(&mut self, inner: &Inner) {
        self.wait.cancel(&inner.wq, &mut Read(inner));
    }
}

/// The state of one `write_async(n)`: the async wait for a [`Write`].
#[derive(Debug)]
struct WriteOp {
    wait: TaskWait,
    n: u64,
    done: bool,
}

impl WriteOp {
    const fn new(n: u64) -> Self {
        WriteOp {
            wait: TaskWait::new(Write::MASK, Write::EXCLUSIVE),
            n,
            done: false,
        }
    }

    #[inline]
    fn poll(&mut self, inner: &Inner, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        if self.done {
            return Poll::Ready(Err(polled_after_completion()));
        }
        if let Err(e) = inner.check() {
            self.done = true;
            return Poll::Ready(Err(e));
        }
        let r = ready!(self.wait.poll(&inner.wq, cx, &mut Write(inner, self.n)));
        self.done = true;
        Poll::Ready(r)
    }

    fn cancel(&mut self, inner: &Inner) {
        self.wait.cancel(&inner.wq, &mut Write(inner, self.n));
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
/// # Fork and panicking wakers
///
/// Polled in a child process, a future made before a `fork` completes at once with the
/// [`Unsupported`](std::io::ErrorKind::Unsupported) fork refusal; dropping it there takes
/// no lock. A panic from another task's waker that this future's completion wakes unwinds
/// out of the `poll` after the completion took effect. Rules: docs/semantics.md §6.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// n.write(2).unwrap();
/// let f: evfd::future::ReadFuture<'_> = n.read_async();
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
/// # Fork and panicking wakers
///
/// Polled in a child process, a future made before a `fork` completes at once with the
/// [`Unsupported`](std::io::ErrorKind::Unsupported) fork refusal; dropping it there takes
/// no lock. A panic from another task's waker that this future's completion wakes unwinds
/// out of the `poll` after the completion took effect. Rules: docs/semantics.md §6.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// let f: evfd::future::OwnedReadFuture = n.read_owned();
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
/// # Fork and panicking wakers
///
/// Polled in a child process, a future made before a `fork` completes at once with the
/// [`Unsupported`](std::io::ErrorKind::Unsupported) fork refusal; dropping it there takes
/// no lock. A panic from another task's waker that this future's completion wakes unwinds
/// out of the `poll` after the completion took effect. Rules: docs/semantics.md §6.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// let f: evfd::future::WriteFuture<'_> = n.write_async(3);
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
/// # Fork and panicking wakers
///
/// Polled in a child process, a future made before a `fork` completes at once with the
/// [`Unsupported`](std::io::ErrorKind::Unsupported) fork refusal; dropping it there takes
/// no lock. A panic from another task's waker that this future's completion wakes unwinds
/// out of the `poll` after the completion took effect. Rules: docs/semantics.md §6.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// let f: evfd::future::OwnedWriteFuture = n.write_owned(4);
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

            #[inline]
            fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
                let this = self.get_mut();
                this.op.poll(&this.notifier.core, cx)
            }
        }

        impl Drop for $ty {
            #[inline]
            fn drop(&mut self) {
                // Nothing to undo unless registered (the common drop, after `Ready`). A
                // child's copy of a pre-fork future: take no lock (see `sys::fork`).
                if self.op.wait.is_registered() && !self.notifier.core.forked() {
                    self.op.cancel(&self.notifier.core);
                }
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
        #[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
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
    /// No fd, no syscall, no allocation of its own: a pending future holds a clone of the
    /// task's `Waker` in the notifier's wait queue. A future that would wait while nobody
    /// else waits first yields once — it wakes its own task and returns `Pending` — and
    /// registers only if the count is still 0 at the next poll: the async twin of
    /// spin-then-park. The first reader to register while no other reader is queued takes
    /// the queue's one task slot: arming it, being woken and leaving are each one
    /// compare-and-swap, no lock. Further readers queue behind it, in FIFO order, under the
    /// queue's lock.
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
    #[inline]
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
    #[inline]
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

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    //! Executor-free tests with a hand-rolled counting waker: they run under Miri.

    use super::*;
    use crate::events::Events;
    use crate::mode::Mode;
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
        let before = n.core.wq.len();
        for _ in 0..2 {
            assert!(poll(f, w).is_pending());
            if n.core.wq.len() > before {
                c.take();
                return;
            }
        }
        panic!("not registered after two polls");
    }

    /// One poll of `f` (a wait on `n`, otherwise empty) that yields: it woke its own task
    /// once and left no entry.
    fn yields<F: Future + Unpin>(n: &Notifier, f: &mut F, (c, w): &(Arc<Count>, Waker)) {
        assert!(poll(f, w).is_pending());
        assert_eq!(
            (c.take(), n.core.wq.len()),
            (1, 0),
            "yielded: woke itself, no entry"
        );
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
        assert_eq!(n.core.wq.len(), 0);
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
        let cw = waker();
        let (c, w) = &cw;
        let mut f = n.read_async();
        yields(&n, &mut f, &cw);
        assert!(poll(&mut f, w).is_pending());
        assert_eq!((c.take(), n.core.wq.len()), (0, 1), "then registered");
        // A write while it yields is simply taken by the next poll.
        let mut g = n.read_async();
        let mut h = n.read_async();
        drop(f);
        assert!(poll(&mut g, w).is_pending());
        n.write(2).unwrap();
        assert_eq!(poll(&mut g, w).map(|r| r.unwrap()), Poll::Ready(2));
        // A newcomer does not yield while another waits: it queues behind it at once.
        let (_, w2) = waker();
        let mut k = n.read_async();
        park(&n, &mut k, &waker());
        assert!(poll(&mut h, &w2).is_pending());
        assert_eq!(n.core.wq.len(), 2);
    }

    /// "Yield once" in `wait_queue::task`: a yield after which the task is polled on
    /// another thread (a work-stealing executor moved it) makes the queue's next
    /// `YIELD_SKIP` waits that would yield register at once; then they yield again. A yield
    /// polled again on its own thread changes nothing.
    #[test]
    fn a_yield_that_moves_the_task_makes_the_next_waits_register_at_once() {
        use crate::wait_queue::task::YIELD_SKIP;
        let n = Notifier::new();
        let cw = waker();
        let (c, w) = &cw;
        // Yields, then is polled again here and completes: the next wait yields as before.
        let mut f = n.read_async();
        yields(&n, &mut f, &cw);
        n.write(1).unwrap();
        assert_eq!(poll(&mut f, w).map(|r| r.unwrap()), Poll::Ready(1));
        let mut g = n.read_async();
        yields(&n, &mut g, &cw);
        // Polled again on another thread after its yield: it completes there (the count
        // is there), and the move is noted.
        n.write(2).unwrap();
        let (got, g) = std::thread::scope(|s| {
            s.spawn(|| {
                let mut g = g;
                (poll(&mut g, w).map(|r| r.unwrap()), g)
            })
            .join()
            .unwrap()
        });
        assert_eq!(got, Poll::Ready(2));
        drop(g);
        // The next YIELD_SKIP waits register at their first poll (no self-wake), each
        // dropped unwoken (nothing consumed).
        for i in 0..YIELD_SKIP {
            let mut h = n.read_async();
            assert!(poll(&mut h, w).is_pending());
            assert_eq!(
                (c.take(), n.core.wq.len()),
                (0, 1),
                "wait {i} registered at once"
            );
        }
        assert_eq!(n.core.wq.len(), 0);
        // Then the yield is back.
        let mut k = n.read_async();
        yields(&n, &mut k, &cw);
        // A move noted while the task waited registered (its yield's second poll on
        // another thread, where the count is still 0): it registers there, and the skip
        // starts again.
        let k = std::thread::scope(|s| {
            s.spawn(|| {
                let mut k = k;
                assert!(poll(&mut k, w).is_pending());
                k
            })
            .join()
            .unwrap()
        });
        assert_eq!(
            (c.take(), n.core.wq.len()),
            (0, 1),
            "registered after its yield"
        );
        drop(k);
        let mut m = n.read_async();
        assert!(poll(&mut m, w).is_pending());
        assert_eq!((c.take(), n.core.wq.len()), (0, 1), "skipping again");
        assert_eq!(n.count(), 0);
    }

    #[test]
    fn first_reader_takes_the_slot_and_later_ones_queue_in_order() {
        let n = Notifier::new();
        let ((cf, wf), (cg, wg), (ch, wh)) = (waker(), waker(), waker());
        let (mut f, mut g, mut h) = (n.read_async(), n.read_async(), n.read_async());
        // The first reader registers in the slot: `IN` is wanted, and the list is empty.
        park(&n, &mut f, &(cf.clone(), wf.clone()));
        assert_eq!(n.core.wq.len(), 1);
        assert!(n.core.wq.interest().contains(Events::IN));
        assert_eq!(n.core.wq.list_len(), 0, "in the slot, not the list");
        // A spurious re-poll stays registered, with nothing woken.
        assert!(poll(&mut f, &wf).is_pending());
        assert_eq!((cf.take(), n.core.wq.len()), (0, 1));
        // The second queues in the list behind it (no yield: someone waits already).
        assert!(poll(&mut g, &wg).is_pending());
        assert_eq!(
            (cg.take(), n.core.wq.len(), n.core.wq.list_len()),
            (0, 2, 1)
        );
        // One write wakes the first only.
        n.write(1).unwrap();
        assert_eq!((cf.take(), cg.take()), (1, 0));
        assert_eq!(poll(&mut f, &wf).map(|r| r.unwrap()), Poll::Ready(1));
        assert_eq!(n.core.wq.len(), 1);
        // The slot is free again, but `g` is queued: `h` queues behind `g`, not in front.
        assert!(poll(&mut h, &wh).is_pending());
        assert_eq!((n.core.wq.len(), n.core.wq.list_len()), (2, 2));
        n.write(5).unwrap();
        assert_eq!((cg.take(), ch.take()), (1, 0), "FIFO: g before h");
        assert_eq!(poll(&mut g, &wg).map(|r| r.unwrap()), Poll::Ready(5));
        drop(h);
        assert_eq!(n.core.wq.len(), 0);
        assert_eq!(n.core.wq.interest(), Events::empty());
    }

    /// An epoll item's interest keeps undefined bits as given, but none of them reaches
    /// the queue's own bits of `interest` (`SETTLED`, `SLOT`, `QUEUED_READER`, which sit
    /// among the bits no `EPOLL*` flag uses): the item does not pass for a settled queue,
    /// an armed slot or a queued reader, and the writes it is due still reach it.
    #[test]
    fn undefined_interest_bits_stay_out_of_the_queues_own_bits() {
        use crate::epoll::Epoll;
        use crate::events::Event;
        let n = Notifier::new();
        let ep = Epoll::new();
        let odd = Events::from_bits_retain(1 << 22 | 1 << 23 | 1 << 24);
        ep.add(&n, Events::IN | odd, 7).unwrap();
        assert_eq!(n.core.wq.stored_bits(), (true, false, false));
        // A reader still takes the slot: no reader passes for queued ahead of it.
        let (c, w) = waker();
        let mut f = n.read_async();
        park(&n, &mut f, &(c.clone(), w.clone()));
        assert_eq!(
            n.core.wq.list_len(),
            1,
            "the item only: the reader is in the slot"
        );
        assert_eq!(n.core.wq.stored_bits(), (true, false, true));
        n.write(2).unwrap();
        assert_eq!(c.take(), 1);
        let mut buf = [Event::default(); 2];
        assert_eq!(
            ep.wait(&mut buf, Some(std::time::Duration::ZERO)).unwrap(),
            1
        );
        assert_eq!((buf[0].events, buf[0].data), (Events::IN, 7));
        assert_eq!(poll(&mut f, &w).map(|r| r.unwrap()), Poll::Ready(2));
        // Settled, then cleared by a newcomer: the mark moves, the odd bits never show.
        n.write(1).unwrap();
        n.write(1).unwrap();
        assert_eq!(n.core.wq.stored_bits(), (false, true, false));
        assert!(n.core.wq.interest().contains(Events::IN));
        assert_eq!(n.read().unwrap(), 2);
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
        assert_eq!(n.core.wq.len(), 1);
        n.write(7).unwrap();
        assert_eq!(c.take(), 1);
        assert_eq!(poll(&mut f, w).map(|r| r.unwrap()), Poll::Ready(7));
        assert_eq!(n.core.wq.len(), 0);
        assert_eq!(n.core.wq.interest(), Events::empty());
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
        assert_eq!(n.core.wq.len(), 0);
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
        assert_eq!(n.core.wq.len(), 0);
    }

    #[test]
    fn repoll_with_new_waker_uses_it() {
        let n = Notifier::new();
        let cw1 = waker();
        let (c2, w2) = waker();
        let mut f = pin!(n.read_async());
        park(&n, &mut f, &cw1);
        assert!(poll(&mut f, &w2).is_pending());
        assert_eq!(n.core.wq.len(), 1, "the entry is reused, not duplicated");
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
        assert_eq!(n.core.wq.len(), 0);
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
        let n = Notifier::builder()
            .initial(crate::mode::LIMIT)
            .build()
            .unwrap();
        let (c, w) = waker();
        let mut f = pin!(n.write_async(2));
        park(&n, &mut f, &(c.clone(), w.clone()));
        assert_eq!(n.count(), crate::mode::LIMIT);
        assert_eq!(n.try_read().unwrap(), crate::mode::LIMIT);
        assert_eq!(c.take(), 1);
        assert!(matches!(poll(&mut f, &w), Poll::Ready(Ok(()))));
        assert_eq!(n.count(), 2);
        assert!(poll(&mut f, &w).is_ready(), "fused");
        assert_eq!(n.count(), 2, "a poll after completion writes nothing");
    }

    #[test]
    fn write_async_max_is_invalid_at_once() {
        let n = Notifier::builder()
            .initial(crate::mode::LIMIT)
            .build()
            .unwrap();
        let (_, w) = waker();
        let mut f = pin!(n.write_async(u64::MAX));
        match poll(&mut f, &w) {
            Poll::Ready(Err(e)) => assert_eq!(e.kind(), io::ErrorKind::InvalidInput),
            other => panic!("{other:?}"),
        }
        assert_eq!(n.core.wq.len(), 0);
    }

    #[test]
    fn dropped_write_writes_nothing() {
        let n = Notifier::builder()
            .initial(crate::mode::LIMIT)
            .build()
            .unwrap();
        {
            let mut f = pin!(n.write_owned(1));
            park(&n, &mut f, &waker());
        }
        assert_eq!(n.count(), crate::mode::LIMIT);
        assert_eq!(n.core.wq.len(), 0);
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
