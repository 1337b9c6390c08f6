//! What an [`Epoll`] can watch: the [`Source`] trait and its in-crate view.

use std::sync::Arc;

use super::{EpInner, Epoll};
use crate::events::Events;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::mode::Mode;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;
use crate::notifier::{self, Notifier};
use crate::wait_queue::{WaitQueue, WakeBatch};

/// An in-memory source's core, held strongly so the harvest can poll it without upgrading a
/// `Weak` per event. Whether the source is still open is tracked separately (the item's
/// `dead` flag, set when the last user handle goes). Every in-memory source has a wait
/// queue that its epoll items hook into.
#[derive(Clone)]
pub(crate) enum MemCore {
    Notifier(Arc<notifier::Inner>),
    Epoll(Arc<EpInner>),
}

/// What an epoll item polls: an in-memory source, or the epoll's own kernel epoll (the
/// source of its kernel item, `super::kernel`), which is never registered in the interest
/// set and hooks into no wait queue. One level ([`MemCore`]'s two kinds and the kernel
/// item side by side), so that the harvest's "is it a notifier" is one compare of the tag.
#[derive(Clone)]
pub(crate) enum SourceCore {
    Notifier(Arc<notifier::Inner>),
    Epoll(Arc<EpInner>),
    #[cfg_attr(not(evfd_kernel_side), allow(dead_code))]
    Kernel(Arc<super::kernel::KernelPoll>),
}

impl From<MemCore> for SourceCore {
    fn from(m: MemCore) -> SourceCore {
        match m {
            MemCore::Notifier(n) => SourceCore::Notifier(n),
            MemCore::Epoll(e) => SourceCore::Epoll(e),
        }
    }
}

impl MemCore {
    pub(crate) fn id(&self) -> u64 {
        match self {
            MemCore::Notifier(n) => n.id,
            MemCore::Epoll(e) => e.id,
        }
    }

    /// The queue an epoll item hooks into.
    pub(crate) fn wait_queue(&self) -> &WaitQueue {
        match self {
            MemCore::Notifier(n) => &n.wq,
            MemCore::Epoll(e) => &e.pollers,
        }
    }

    /// The fork refusal for a source made before a fork (see `sys::fork`).
    pub(crate) fn check(&self) -> std::io::Result<()> {
        match self {
            MemCore::Notifier(n) => n.check(),
            MemCore::Epoll(e) => e.check(),
        }
    }

    pub(crate) fn as_epoll(&self) -> Option<&Arc<EpInner>> {
        match self {
            MemCore::Epoll(e) => Some(e),
            MemCore::Notifier(_) => None,
        }
    }
}

impl SourceCore {
    /// The notifier, if the source is one.
    #[inline(always)]
    pub(crate) fn notifier(&self) -> Option<&Arc<notifier::Inner>> {
        match self {
            SourceCore::Notifier(nf) => Some(nf),
            _ => None,
        }
    }

    pub(crate) fn id(&self) -> u64 {
        match self {
            SourceCore::Notifier(n) => n.id,
            SourceCore::Epoll(e) => e.id,
            SourceCore::Kernel(k) => k.id,
        }
    }

    /// Readiness for `interest`. With `deliver`, this is the delivery of `IN` to a consumer
    /// (an AutoReset notifier resets); without, a pure check. An epoll is never consumed by
    /// being polled.
    ///
    /// Called with the watching epoll's registry held: wakes that polling or delivering owes
    /// (an AutoReset reset waking blocked writers, a nested epoll's cascade) go into `batch`,
    /// to run after that lock is released.
    ///
    /// A harvest that may unlink the item after this poll clears the source's settled mark
    /// ([`unsettle`](Self::unsettle)) before it (`harvest`).
    #[inline]
    pub(crate) fn poll(&self, interest: Events, deliver: bool, batch: &mut WakeBatch) -> Events {
        match self {
            SourceCore::Notifier(n) => {
                if deliver {
                    n.deliver_into(interest, batch)
                } else {
                    n.readiness()
                }
            }
            SourceCore::Epoll(e) => e.readiness_into(batch),
            // A readiness check (the harvest delivers the kernel item's events itself).
            SourceCore::Kernel(k) => k.readiness(),
        }
    }

    /// Clear the settled mark (`wait_queue`, "Settled") of the queue an item of this source
    /// hooks into: a harvest calls it before a poll after which it may unlink the item, so
    /// that a write which skipped its wake is seen by that poll. The kernel item hooks into
    /// no queue.
    pub(crate) fn unsettle(&self) {
        if let Some(q) = self.wait_queue() {
            q.unsettle();
        }
    }

    /// The nested epoll, if the source is one.
    pub(crate) fn as_epoll(&self) -> Option<&Arc<EpInner>> {
        match self {
            SourceCore::Epoll(e) => Some(e),
            _ => None,
        }
    }

    /// The queue an item of this source hooks into, `None` for the kernel item.
    pub(crate) fn wait_queue(&self) -> Option<&WaitQueue> {
        match self {
            SourceCore::Notifier(n) => Some(&n.wq),
            SourceCore::Epoll(e) => Some(&e.pollers),
            SourceCore::Kernel(_) => None,
        }
    }
}

pub(crate) mod sealed {
    use std::os::fd::BorrowedFd;

    /// A source's in-crate view. Public only in name: the module is private.
    pub enum SourceRef<'a> {
        /// An in-memory source (a notifier, an epoll).
        Mem(MemRef),
        /// A kernel fd, watched through the epoll's embedded kernel epoll (or kqueue; never
        /// made where there is neither, and `KernelRef` is uninhabited).
        #[cfg_attr(not(evfd_kernel_side), allow(dead_code))]
        Kernel(KernelRef<'a>),
    }

    /// An in-memory source's core.
    pub struct MemRef(pub(crate) super::MemCore);

    /// A kernel fd as a source.
    #[cfg(evfd_kernel_side)]
    pub struct KernelRef<'a> {
        pub(crate) fd: BorrowedFd<'a>,
        /// The owner's delivery rule applies (`KernelDeliver`): an AutoReset
        /// `KernelNotifier`'s read at the delivery of `IN`, a pipe consumer's drain or
        /// held units.
        pub(crate) autoreset: bool,
        /// The fd is an eventfd whose delivery is its own reset `read(2)` (an AutoReset
        /// `KernelNotifier`): a read that takes a count is exactly the kernel's `IN`, so a
        /// harvest may read it without asking the kernel epoll (`kernel::fds`, "One
        /// eventfd").
        pub(crate) eventfd: bool,
        /// A `KernelNotifier`'s registrations: it leaves every epoll when it is dropped.
        pub(crate) owner: Option<&'a crate::notifier::registrations::Registrations>,
    }

    /// Without epoll or kqueue there are no kernel-fd sources: uninhabited.
    #[cfg(not(evfd_kernel_side))]
    pub struct KernelRef<'a> {
        pub(crate) never: std::convert::Infallible,
        pub(crate) _fd: std::marker::PhantomData<BorrowedFd<'a>>,
    }

    /// Seals [`Source`](super::Source).
    pub trait Sealed {
        /// The in-crate view.
        fn source_ref(&self) -> SourceRef<'_>;
    }
}

/// Something an [`Epoll`] can watch: a [`Notifier`], another
/// [`Epoll`] (nesting), a [`KernelNotifier`], or any
/// kernel fd as a [`BorrowedFd`](std::os::fd::BorrowedFd). Sealed: the crate implements it.
///
/// # Examples
///
/// ```
/// use evfd::{Epoll, Events, Notifier, Source};
/// fn watch(ep: &Epoll, s: &impl Source, data: u64) -> std::io::Result<()> {
///     ep.add(s, Events::IN, data)
/// }
/// let ep = Epoll::new();
/// watch(&ep, &Notifier::new(), 1).unwrap();
/// watch(&ep, &Epoll::new(), 2).unwrap();
/// ```
pub trait Source: sealed::Sealed {}

impl sealed::Sealed for Notifier {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        sealed::SourceRef::Mem(sealed::MemRef(MemCore::Notifier(Arc::clone(&self.core))))
    }
}
impl Source for Notifier {}

impl sealed::Sealed for Epoll {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        sealed::SourceRef::Mem(sealed::MemRef(MemCore::Epoll(Arc::clone(&self.inner.core))))
    }
}
impl Source for Epoll {}

impl<T: sealed::Sealed + ?Sized> sealed::Sealed for &T {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        (**self).source_ref()
    }
}

/// Any kernel fd (a socket, a pipe, a timerfd, an eventfd another process writes): watched
/// through the epoll's embedded kernel epoll, with the kernel's own LT/ET/ONESHOT/EXCLUSIVE
/// rules and errors. Keyed as the kernel keys it, by (fd number, open file): a new file on
/// a reused number can be added while an item of the old file (kept open elsewhere) stays.
/// Linux, and on macOS and FreeBSD through a kqueue, with kqueue's rules where they differ
/// (keyed by fd number, dropped when the number is closed; docs/design.md, "The kernel side
/// off Linux").
#[cfg(evfd_kernel_side)]
impl sealed::Sealed for std::os::fd::BorrowedFd<'_> {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        sealed::SourceRef::Kernel(sealed::KernelRef {
            fd: *self,
            autoreset: false,
            eventfd: false,
            owner: None,
        })
    }
}
#[cfg(evfd_kernel_side)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        target_os = "freebsd"
    )))
)]
impl Source for std::os::fd::BorrowedFd<'_> {}

/// A kernel-backed notifier: in AutoReset mode the delivery of its `IN` reads the eventfd,
/// so the consumer never calls `read`. Dropping the `KernelNotifier` removes it from every
/// epoll, whatever other fds refer to the eventfd. Linux only.
#[cfg(any(target_os = "linux", target_os = "android"))]
impl sealed::Sealed for KernelNotifier {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        sealed::SourceRef::Kernel(sealed::KernelRef {
            // The crate's own borrow, through the registrations: not a lend (`sys::fd`).
            fd: self.registrations().fd(),
            autoreset: self.mode() == Mode::AutoReset,
            eventfd: self.mode() == Mode::AutoReset,
            owner: Some(self.registrations()),
        })
    }
}
#[cfg(any(target_os = "linux", target_os = "android"))]
#[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
impl Source for KernelNotifier {}
/// A consumer half ([`halves::ConsumerHalf`](crate::halves::ConsumerHalf)): over an
/// eventfd, watched as a `KernelNotifier` is; over a pipe, through its own kernel epoll of
/// the pipe and its held bell, so that units it holds are readable (module docs of
/// `evfd::halves`). Each delivery goes through the consumer: AutoReset drains, Counter and
/// Semaphore report readiness. Dropping it removes it from every epoll. Linux, macOS and
/// FreeBSD (where the consumer's own watcher is a kqueue and its held bell an `EVFILT_USER`
/// event).
#[cfg(evfd_kernel_side)]
impl sealed::Sealed for crate::notifier::halves::ConsumerHalf {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        let regs = self.registrations();
        sealed::SourceRef::Kernel(sealed::KernelRef {
            fd: regs.fd(),
            autoreset: self.delivers(),
            eventfd: false,
            owner: Some(regs),
        })
    }
}
#[cfg(evfd_kernel_side)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        target_os = "freebsd"
    )))
)]
impl Source for crate::notifier::halves::ConsumerHalf {}

/// A notifier half ([`halves::NotifierHalf`](crate::halves::NotifierHalf)), for `OUT`: its
/// write end (or eventfd), with the kernel's readiness. Dropping it removes it from every
/// epoll. Linux, macOS and FreeBSD.
#[cfg(evfd_kernel_side)]
impl sealed::Sealed for crate::notifier::halves::NotifierHalf {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        let regs = self.registrations();
        sealed::SourceRef::Kernel(sealed::KernelRef {
            fd: regs.fd(),
            autoreset: false,
            eventfd: false,
            owner: Some(regs),
        })
    }
}
#[cfg(evfd_kernel_side)]
#[cfg_attr(
    docsrs,
    doc(cfg(any(
        target_os = "linux",
        target_os = "android",
        target_vendor = "apple",
        target_os = "freebsd"
    )))
)]
impl Source for crate::notifier::halves::NotifierHalf {}

impl<T: Source + ?Sized> Source for &T {}
