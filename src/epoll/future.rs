//! The async faces of an [`Epoll`]: [`EpollWaitFuture`] (`wait_async`) and, with feature
//! `futures`, [`EpollStream`]. Both are the wait queue's async wait
//! ([`TaskWait`]) on the epoll's `waiters` queue, with the
//! harvest as the operation and "wake one more waiter if events are still queued" as the
//! hand-on.
//!
//! # Kernel readiness
//!
//! An epoll with kernel fds also needs kernel readiness to wake a pending wait. Polled
//! inside a tokio runtime (feature `tokio`, Linux), a wait watches the epoll's kernel
//! epoll through that runtime's reactor ([`KernelWake`]: `kernel_fds`, "Kernel readiness
//! through the tokio reactor"), so the reactor wakes the task itself. Anywhere else (another
//! executor, a runtime without I/O, a runtime that shut down) it relies on the process-wide
//! watcher thread (`super::watcher`, invariant W). The choice is made at each poll while
//! the wait is not queued, and a queued wait whose choice no longer holds re-queues.
//!
//! # LOCKING
//!
//! No lock of its own; see `crate::wait_queue::task` and the module docs of `super`. The
//! reactor (tokio code) is called with no lock held.

use std::fmt;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use std::sync::Arc;

use super::harvest::Harvest;
use super::{EpInner, Epoll};
use crate::events::{Event, Events};
use crate::wait_queue::task::{polled_after_completion, TaskWait};
use crate::wait_queue::WaitFor;

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
/// let f: evfd::EpollWaitFuture<'_> = ep.wait_async(&mut evs);
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

    use super::super::Epoll;
    use super::KernelWake;
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

/// Whether the kernel-readiness path through a tokio reactor exists in this build.
#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
use reactor::Reactor;

/// A stand-in when the reactor path is not built: never chosen.
#[cfg(not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))))]
#[derive(Debug, Default)]
struct Reactor(());

#[cfg(not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))))]
impl Reactor {
    fn choose(&mut self, _ep: &EpInner) -> bool {
        false
    }

    fn try_harvest(
        &mut self,
        _ep: &Arc<EpInner>,
        _out: &mut [Event],
        _cx: &mut Context<'_>,
    ) -> Option<usize> {
        None
    }
}

/// The async wait of an epoll (`wait_async`, the stream): the wait queue's [`TaskWait`] on
/// `waiters`, plus how kernel readiness reaches it (module docs, "Kernel readiness").
///
/// Through the watcher, the entry asks for `IN` (so `EpInner::listened` counts it and a
/// harvest that finds nothing arms the watcher: invariant W). Through a reactor, it asks
/// for [`KEY_KSLEEP`](super::KEY_KSLEEP), as a thread that watches the kernel epoll itself
/// does: every wake of `waiters` reaches it, and it arms nothing.
#[derive(Debug)]
pub(crate) struct KernelWake {
    wait: TaskWait,
    /// The entry's mask is `KEY_KSLEEP` (reactor path), not `IN`.
    direct: bool,
    reactor: Reactor,
}

impl KernelWake {
    pub(crate) fn new() -> Self {
        KernelWake {
            wait: TaskWait::new(Events::IN, true),
            direct: false,
            reactor: Reactor::default(),
        }
    }

    pub(crate) fn is_registered(&self) -> bool {
        self.wait.is_registered()
    }

    /// One poll: a harvest into `out`, or `Pending` with this task registered for every
    /// kind of source.
    pub(crate) fn poll(
        &mut self,
        ep: &Arc<EpInner>,
        cx: &mut Context<'_>,
        out: &mut [Event],
    ) -> Poll<usize> {
        let direct = self.reactor.choose(ep);
        if direct != self.direct {
            // The way kernel readiness reaches us changed (the first kernel fd, another
            // runtime, a runtime gone): leave the queue (handing on a wake we had won but
            // not used) and come back with the other mask.
            self.wait
                .cancel(&ep.waiters, &mut Harvest { ep, out: &mut [] });
            let mask = if direct {
                super::KEY_KSLEEP
            } else {
                Events::IN
            };
            self.wait = TaskWait::new(mask, true);
            self.direct = direct;
        }
        if !direct {
            return self.wait.poll(&ep.waiters, cx, &mut Harvest { ep, out });
        }
        // Two contexts over the one waker: the wait queue's and the reactor's.
        let waker = cx.waker();
        let mut qcx = Context::from_waker(waker);
        let mut rcx = Context::from_waker(waker);
        self.wait.poll(
            &ep.waiters,
            &mut qcx,
            &mut ReactorHarvest {
                ep,
                out,
                reactor: &mut self.reactor,
                cx: &mut rcx,
            },
        )
    }

    /// A child process's copy of a pre-fork wait goes away: leak its reactor side. Dropping
    /// it would take tokio's locks (which another parent thread may have held at the fork)
    /// and could deregister the parent's registration from the reactor's epoll, which the
    /// child shares with the parent.
    pub(crate) fn forget_in_child(&mut self) {
        std::mem::forget(std::mem::take(&mut self.reactor));
    }

    /// The owner goes away: leave the queue (handing on a wake won and not used); a
    /// pending reactor registration goes with it.
    pub(crate) fn cancel(&mut self, ep: &Arc<EpInner>) {
        self.wait
            .cancel(&ep.waiters, &mut Harvest { ep, out: &mut [] });
    }
}

/// The harvest of a wait that hears kernel readiness through a reactor.
struct ReactorHarvest<'a, 'c, 'w> {
    ep: &'a Arc<EpInner>,
    out: &'a mut [Event],
    reactor: &'a mut Reactor,
    cx: &'c mut Context<'w>,
}

impl WaitFor for ReactorHarvest<'_, '_, '_> {
    type Output = usize;

    fn try_now(&mut self) -> Option<usize> {
        self.reactor.try_harvest(self.ep, self.out, self.cx)
    }

    fn hand_on(&mut self) {
        self.ep.hand_on();
    }
}

#[cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]
mod reactor {
    use std::future::Future;
    use std::io;
    use std::pin::Pin;
    use std::sync::Arc;
    use std::task::{Context, Poll};

    use super::super::EpInner;
    use crate::events::Event;
    use crate::loom::sync::atomic::Ordering::SeqCst;
    use crate::tokio_fd::KernelReactor;

    /// A registration in tokio's list of waiters for the kernel epoll's readiness.
    type Armed = Pin<Box<dyn Future<Output = io::Result<()>> + Send + Sync>>;

    /// How many reactor edges one `try_harvest` follows before it yields instead.
    const ROUNDS: usize = 3;

    /// The reactor side of one async wait (module docs of `kernel_fds`, "Kernel readiness
    /// through the tokio reactor").
    #[derive(Default)]
    pub(super) struct Reactor {
        /// The registration this wait uses (its runtime's).
        fd: Option<Arc<KernelReactor>>,
        /// This wait's place in tokio's waiters of `fd`'s readiness.
        armed: Option<Armed>,
        /// `fd` failed (its runtime shut down): choose again at the next poll.
        failed: bool,
    }

    impl std::fmt::Debug for Reactor {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.debug_struct("Reactor")
                .field("fd", &self.fd)
                .field("armed", &self.armed.is_some())
                .finish()
        }
    }

    impl Reactor {
        /// Whether this poll hears kernel readiness through the current tokio runtime's
        /// reactor: the epoll holds kernel fds, a runtime is current and the kernel epoll
        /// is (or can now be) registered with it. Without kernel fds this is one load.
        pub(super) fn choose(&mut self, ep: &EpInner) -> bool {
            // One load without kernel fds (no kernel side).
            if !ep.has_kernel.load(SeqCst) {
                return self.drop_fd();
            }
            let Some(rt) = KernelReactor::current_runtime() else {
                return self.drop_fd();
            };
            // The registration this wait used last time, still in its runtime and working:
            // the epoll's kernel epoll is the same for the epoll's whole life.
            if !self.failed && self.fd.as_ref().is_some_and(|fd| fd.runtime() == rt) {
                return true;
            }
            let Some(side) = ep.kernel_side() else {
                return self.drop_fd();
            };
            if !side.poll.has_fds() {
                return self.drop_fd();
            }
            if self.failed {
                if let Some(fd) = self.fd.take() {
                    side.forget_reactor(&fd);
                }
                self.armed = None;
                self.failed = false;
            }
            self.armed = None;
            self.fd = side.reactor(rt);
            self.fd.is_some()
        }

        fn drop_fd(&mut self) -> bool {
            self.armed = None;
            self.fd = None;
            self.failed = false;
            false
        }

        /// A harvest that clears the reactor's readiness only when it found the kernel
        /// epoll empty, then (if it found nothing) a place in the reactor's waiters. `None`:
        /// wait; a reactor readiness that came meanwhile, or a failed reactor, has woken
        /// the task already.
        pub(super) fn try_harvest(
            &mut self,
            ep: &Arc<EpInner>,
            out: &mut [Event],
            cx: &mut Context<'_>,
        ) -> Option<usize> {
            let fd = self.fd.as_ref()?;
            for _ in 0..ROUNDS {
                // A harvest that delivers nothing has collected from the kernel epoll with
                // every slot free and got nothing: it was empty then (`harvest_now`).
                let got = fd.around(cx, || {
                    let n = ep.harvest_if_any(out);
                    (n, n == 0)
                });
                match got {
                    Ok(0) => {}
                    Ok(n) => {
                        self.armed = None;
                        return Some(n);
                    }
                    Err(_) => return self.fail(cx),
                }
                let armed = self
                    .armed
                    .get_or_insert_with(|| Box::pin(Arc::clone(fd).readable()));
                match armed.as_mut().poll(cx) {
                    Poll::Pending => return None,
                    // An edge since the clear (or the clear lost to a newer one): look again.
                    Poll::Ready(Ok(())) => self.armed = None,
                    Poll::Ready(Err(_)) => return self.fail(cx),
                }
            }
            // Edges keep coming and others take the events: let the executor run others.
            cx.waker().wake_by_ref();
            None
        }

        /// The reactor is gone (its runtime shut down): wake the task so that its next poll
        /// chooses again (another runtime's reactor, or the watcher).
        fn fail(&mut self, cx: &mut Context<'_>) -> Option<usize> {
            self.armed = None;
            self.failed = true;
            cx.waker().wake_by_ref();
            None
        }
    }
}
