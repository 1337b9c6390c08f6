//! [`NotifierStream`]: a notifier's reads as a `futures_core::Stream` (feature `futures`).
//!
//! Each item is one successful read, made with the same async wait as
//! [`Notifier::read_async`] ([`TaskWait`]); between items
//! the stream holds no registration.
//!
//! # LOCKING
//!
//! No lock of its own; see `crate::wait_queue::task` (the wait queue's lock is taken only
//! through its API and no foreign code runs under it).

use std::fmt;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll};

use futures_core::stream::{FusedStream, Stream};

use super::{LookedRead, Notifier, Op, Read};
use crate::wait_queue::task::TaskWait;

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
/// # Fork and panicking wakers
///
/// Polled in a child process, a stream made before a `fork` yields the
/// [`Unsupported`](std::io::ErrorKind::Unsupported) fork refusal; dropping it there takes
/// no lock. A panic from a writer task's waker that an item's delivery wakes unwinds out
/// of `poll_next` after the delivery took effect. Rules: docs/semantics.md §6.
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
#[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
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
    #[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
    pub fn stream(&self) -> NotifierStream {
        NotifierStream {
            notifier: self.clone(),
            wait: TaskWait::new(Read::MASK, Read::EXCLUSIVE).with_slot(),
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

#[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
impl Stream for NotifierStream {
    type Item = io::Result<u64>;

    fn poll_next(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let this = self.get_mut();
        let inner = &this.notifier.core;
        if let Err(e) = inner.check() {
            return Poll::Ready(Some(Err(e)));
        }
        this.wait
            .poll(&inner.wq, cx, &mut LookedRead(inner))
            .map(Some)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "futures")))]
impl FusedStream for NotifierStream {
    /// Always `false`: a notifier never ends.
    fn is_terminated(&self) -> bool {
        false
    }
}

impl Drop for NotifierStream {
    fn drop(&mut self) {
        let inner = &self.notifier.core;
        if inner.forked() {
            // A child's copy of a pre-fork stream: take no lock (see `sys::fork`).
            return;
        }
        self.wait.cancel(&inner.wq, &mut Read(inner));
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
