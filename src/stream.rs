//! [`NotifierStream`]: a notifier's reads as a `futures_core::Stream` (feature `futures`).
//!
//! Each item is one successful read, made with the same [`TaskWait`] machinery as
//! [`Notifier::read_async`]; between items the stream holds no registration.
//!
//! # LOCKING
//!
//! No lock of its own; see `future` (the wait queue's lock is taken only through its API and
//! no foreign code runs under it).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::stream::{FusedStream, Stream};

use crate::future::TaskWait;
use crate::{Epoll, Event, Events, Notifier};

/// A `Stream` of reads from a [`Notifier`]: each item is what one [`Notifier::read`] would
/// return — the whole count in Counter and AutoReset mode, `1` per unit in Semaphore mode.
///
/// The stream never ends (a notifier has no end-of-file) and never yields `Err`; the item
/// type is `io::Result<u64>` so that it composes with fd-backed streams. It is
/// [`FusedStream`], with `is_terminated()` always `false`. Readers served by the stream take
/// their turn in the same FIFO queue as [`Notifier::read_async`] and blocked threads (see
/// its `# Fairness`).
///
/// # Cancel safety
///
/// `next()` is cancel-safe: a pending `next()` that is dropped, or the stream itself dropped
/// while waiting, has consumed nothing beyond the items already returned, and a wake it had
/// won is handed on to the next waiting reader.
///
/// # Examples
///
/// ```
/// use futures::StreamExt;
/// let n = evfd::Notifier::builder().mode(evfd::Mode::Semaphore).build().unwrap();
/// n.write(3).unwrap();
/// let items: Vec<u64> = futures::executor::block_on(
///     n.stream().take(3).map(Result::unwrap).collect(),
/// );
/// assert_eq!(items, vec![1, 1, 1]);
/// assert_eq!(n.count(), 0);
/// ```
#[must_use = "streams do nothing unless polled"]
pub struct NotifierStream {
    notifier: Notifier,
    wait: TaskWait,
}

impl Notifier {
    /// A [`Stream`] of this notifier's reads (feature `futures`). The stream holds its own
    /// handle, so it is `'static`.
    ///
    /// # Cancel safety
    ///
    /// See [`NotifierStream`]: dropping a pending `next()` consumes nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// use futures::StreamExt;
    /// let n = evfd::Notifier::new();
    /// let mut s = n.stream();
    /// n.write(4).unwrap();
    /// assert_eq!(futures::executor::block_on(s.next()).unwrap().unwrap(), 4);
    /// ```
    pub fn stream(&self) -> NotifierStream {
        NotifierStream {
            notifier: self.clone(),
            wait: TaskWait::new(Events::IN, true),
        }
    }
}

impl NotifierStream {
    /// The notifier this stream reads.
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// assert!(n.stream().notifier().ptr_eq(&n));
    /// ```
    pub fn notifier(&self) -> &Notifier {
        &self.notifier
    }
}

impl Stream for NotifierStream {
    type Item = io::Result<u64>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let inner = &this.notifier.inner;
        this.wait
            .poll(&inner.wq, cx, || inner.try_read())
            .map(|got| Some(Ok(got)))
    }
}

impl FusedStream for NotifierStream {
    /// Always `false`: a notifier never ends.
    fn is_terminated(&self) -> bool {
        false
    }
}

impl Drop for NotifierStream {
    fn drop(&mut self) {
        let inner = &self.notifier.inner;
        self.wait
            .cancel(&inner.wq, || inner.hand_on(Events::IN, true));
    }
}

impl fmt::Debug for NotifierStream {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotifierStream")
            .field("notifier", &self.notifier)
            .field("registered", &self.wait.is_registered())
            .finish()
    }
}

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
pub struct EpollStream {
    ep: Epoll,
    wait: TaskWait,
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
    pub fn stream(&self) -> EpollStream {
        EpollStream {
            ep: self.clone(),
            wait: TaskWait::new(Events::IN, true),
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

impl Stream for EpollStream {
    type Item = io::Result<Event>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let core = &this.ep.inner.core;
        this.wait
            .poll(&core.waiters, cx, || {
                let mut one = [Event::default()];
                (core.harvest_now(&mut one) == 1).then_some(one[0])
            })
            .map(|e| Some(Ok(e)))
    }
}

impl FusedStream for EpollStream {
    /// Always `false`: an epoll never ends.
    fn is_terminated(&self) -> bool {
        false
    }
}

impl Drop for EpollStream {
    fn drop(&mut self) {
        let core = &self.ep.inner.core;
        self.wait.cancel(&core.waiters, || {
            if core.has_ready() {
                core.waiters.wake(Events::IN, 1);
            }
        });
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
