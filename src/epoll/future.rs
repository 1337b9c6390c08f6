//! The async faces of an [`Epoll`]: [`EpollWaitFuture`] (`wait_async`) and, with feature
//! `futures`, [`EpollStream`]. Both are the wait queue's async wait
//! ([`TaskWait`](crate::wait_queue::task::TaskWait)) on the epoll's `waiters` queue, with the
//! harvest as the operation and "wake one more waiter if events are still queued" as the
//! hand-on.
//!
//! # Kernel readiness
//!
//! An epoll with kernel fds also needs kernel readiness to wake a pending wait: both faces
//! hold a [`KernelWake`] (`super::kernel::reactor`), the kernel side's async wait, which
//! chooses at each poll between the tokio reactor and the watcher thread.
//!
//! # LOCKING
//!
//! No lock of its own; see `crate::wait_queue::task` and the module docs of `super` and
//! `super::kernel`.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use super::kernel::KernelWake;
use super::Epoll;
use crate::events::Event;
use crate::wait_queue::task::polled_after_completion;

/// The future returned by [`Epoll::wait_async`].
///
/// Resolves to what [`Epoll::wait`] with no timeout would return: the number of events
/// written to the buffer (at least 1), or `InvalidInput` for an empty buffer. A pending
/// future is a task entry in the epoll's waiter queue; no thread blocks. With only in-memory
/// sources no syscall is made. With kernel fds, polled inside a tokio runtime (feature
/// `tokio`, Linux), the runtime's reactor wakes it when one of them is ready (the epoll's
/// kernel epoll is registered with that reactor by the first wait that needs it); anywhere
/// else a pending wait arms the watcher thread (one `epoll_ctl`), which wakes it.
///
/// # Cancel safety
///
/// Dropping it before it returned `Ready` delivers nothing: events are harvested (and
/// AutoReset notifiers reset) only in the poll that returns them. A wake it had already won
/// is handed on to another waiter of the epoll if events are still queued.
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
/// use evfd::{Epoll, Event, Events, Notifier};
/// let ep = Epoll::new();
/// let n = Notifier::builder().initial(1).build().unwrap();
/// ep.add(&n, Events::IN, 3).unwrap();
/// let mut evs = [Event::default(); 2];
/// let f: evfd::future::EpollWaitFuture<'_> = ep.wait_async(&mut evs);
/// assert_eq!(futures::executor::block_on(f).unwrap(), 1);
/// assert_eq!(evs[0].data, 3);
/// ```
#[must_use = "futures do nothing unless you .await or poll them"]
pub struct EpollWaitFuture<'a> {
    ep: &'a Epoll,
    buf: &'a mut [Event],
    wait: KernelWake,
    done: bool,
}

impl Future for EpollWaitFuture<'_> {
    type Output = io::Result<usize>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.done {
            return Poll::Ready(Err(polled_after_completion()));
        }
        if let Err(e) = this.ep.inner.check() {
            this.done = true;
            return Poll::Ready(Err(e));
        }
        if this.buf.is_empty() {
            this.done = true;
            // EINVAL, as epoll_wait with maxevents 0.
            return Poll::Ready(Err(crate::error::invalid()));
        }
        let n = ready!(this.wait.poll(&this.ep.inner.core, cx, this.buf));
        this.done = true;
        Poll::Ready(Ok(n))
    }
}

impl Drop for EpollWaitFuture<'_> {
    fn drop(&mut self) {
        let ep = &self.ep.inner.core;
        if ep.forked() {
            // A child's copy of a pre-fork future: take no lock (see `sys::fork`).
            self.wait.forget_in_child();
            return;
        }
        self.wait.cancel(ep);
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
#[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
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
    /// Every kind of source wakes it: in-memory notifiers and nested epolls directly (a
    /// task entry in the epoll's waiter queue, no syscall); kernel fds (`BorrowedFd`,
    /// [`KernelNotifier`](crate::KernelNotifier)) held by this epoll, when it is polled
    /// inside a tokio runtime with feature `tokio`, through that runtime's reactor (as
    /// tokio's `AsyncFd` is woken: the epoll's kernel epoll is registered with the reactor
    /// once per runtime); on any other executor (or a runtime without I/O), and for kernel
    /// fds of nested epolls, through a process-wide watcher thread that is started only
    /// while some such wait is pending (one `epoll_ctl` per wait; see the crate's
    /// `docs/design.md`).
    ///
    /// # Errors
    ///
    /// `EINVAL` (`InvalidInput`) if `events` is empty.
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
            wait: KernelWake::new(),
            done: false,
        }
    }
}

#[cfg(feature = "futures")]
pub use stream::EpollStream;

#[cfg(feature = "futures")]
mod stream {
    use std::fmt;
    use std::io;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use futures_core::stream::{FusedStream, Stream};

    use super::super::kernel::KernelWake;
    use super::super::Epoll;
    use crate::events::Event;

    /// A `Stream` of an [`Epoll`]'s events, one [`Event`] per item (feature `futures`).
    ///
    /// Each item is harvested on its own (`maxevents` 1), in the order [`Epoll::wait`] would
    /// deliver them, so nothing is buffered inside the stream. The stream never ends.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: an event (and an AutoReset notifier's reset) is delivered only in the poll
    /// that returns it, so dropping a pending `next()` or the stream loses nothing; a wake it had
    /// won is handed on to another waiter of the epoll if events are still queued.
    ///
    /// # Fork and panicking wakers
    ///
    /// Polled in a child process, a stream made before a `fork` yields the
    /// [`Unsupported`](std::io::ErrorKind::Unsupported) fork refusal; dropping it there takes
    /// no lock. A panic from another task's waker that an item's delivery wakes unwinds out
    /// of `poll_next` after the delivery took effect. Rules: docs/semantics.md §6.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    /// use evfd::{Epoll, Events, Notifier};
    /// let ep = Epoll::new();
    /// let (a, b) = (Notifier::new(), Notifier::new());
    /// ep.add(&a, Events::IN | Events::ET, 1).unwrap();
    /// ep.add(&b, Events::IN | Events::ET, 2).unwrap();
    /// b.notify().unwrap();
    /// a.notify().unwrap();
    /// let got: Vec<u64> = futures::executor::block_on(
    ///     ep.stream().take(2).map(|e| e.unwrap().data).collect(),
    /// );
    /// assert_eq!(got, vec![2, 1]);
    /// ```
    #[must_use = "streams do nothing unless polled"]
    #[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
    pub struct EpollStream {
        ep: Epoll,
        wait: KernelWake,
    }

    impl Epoll {
        /// A [`Stream`] of this epoll's events (feature `futures`); holds its own handle.
        ///
        /// # Cancel safety
        ///
        /// See [`EpollStream`]: dropping a pending `next()` delivers nothing.
        ///
        /// ```
        /// let ep = evfd::Epoll::new();
        /// assert!(ep.stream().epoll().ptr_eq(&ep));
        /// ```
        #[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
        pub fn stream(&self) -> EpollStream {
            EpollStream {
                ep: self.clone(),
                wait: KernelWake::new(),
            }
        }
    }

    impl EpollStream {
        /// The epoll this stream harvests.
        ///
        /// ```
        /// let ep = evfd::Epoll::new();
        /// assert!(ep.stream().epoll().ptr_eq(&ep));
        /// ```
        pub fn epoll(&self) -> &Epoll {
            &self.ep
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
    impl Stream for EpollStream {
        type Item = io::Result<Event>;

        fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
            let this = self.get_mut();
            let ep = &this.ep.inner.core;
            if let Err(e) = ep.check() {
                return Poll::Ready(Some(Err(e)));
            }
            let mut one = [Event::default()];
            let got = this.wait.poll(ep, cx, &mut one);
            got.map(|_| Some(Ok(one[0])))
        }
    }

    #[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
    impl FusedStream for EpollStream {
        /// Always `false`: an epoll never ends.
        fn is_terminated(&self) -> bool {
            false
        }
    }

    impl Drop for EpollStream {
        fn drop(&mut self) {
            let ep = &self.ep.inner.core;
            if ep.forked() {
                // A child's copy of a pre-fork stream: take no lock (see `sys::fork`).
                self.wait.forget_in_child();
                return;
            }
            self.wait.cancel(ep);
        }
    }

    impl fmt::Debug for EpollStream {
        fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
            f.debug_struct("EpollStream")
                .field("epoll", &self.ep)
                .field("registered", &self.wait.is_registered())
                .finish()
        }
    }
}
