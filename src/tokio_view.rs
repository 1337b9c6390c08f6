//! Safe tokio `AsyncFd`s for fd views and kernel notifiers, and [`AsyncEpollFd`] (feature
//! `tokio`).
//!
//! `AsyncFd::new` is deprecated as unsound and its replacement is `unsafe`: the caller
//! promises that the fd stays open and is the same fd for the `AsyncFd`'s whole life. evfd's
//! own fd types keep that promise (their fds are owned and never replaced), so the
//! constructors here are safe, and user code awaits evfd fds through tokio's reactor with no
//! `unsafe`.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::epoll::Epoll;
use crate::events::Event;
use crate::fd::FdView;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;
use crate::sys::tokio::register_stable;

impl FdView {
    /// Register this view with the current tokio reactor: tokio's own
    /// [`AsyncFd`], readable each time the source becomes readable, with no `unsafe` in
    /// user code. Use `readable().await` and `try_io`, or `async_io`, and drain the source
    /// until `WouldBlock` (the reactor is edge-triggered; see [`FdView`]).
    ///
    /// # Errors
    ///
    /// The reactor's error (`epoll_ctl`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled (tokio's own panic).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use tokio::io::Interest;
    ///
    /// let n = evfd::Notifier::new();
    /// let afd = n.fd_view()?.into_async_fd()?;
    /// let n2 = n.clone();
    /// std::thread::spawn(move || n2.write(3).unwrap());
    /// // Runs the closure on each readiness; WouldBlock waits for the next edge.
    /// let got = afd.async_io(Interest::READABLE, |_view| n.try_read()).await?;
    /// assert_eq!(got, 3);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn into_async_fd(self) -> io::Result<AsyncFd<FdView>> {
        // A view shows readability only (its doorbell is always writable). tokio takes the
        // fd through `AsRawFd` to register it: not a lend (the doorbell's rings stay one
        // plain syscall until a borrow through the `AsyncFd`).
        self.register_unlent(|v| register_stable(v, Interest::READABLE))
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl crate::shared::SharedFdView {
    /// Register this view with the current tokio reactor: tokio's own [`AsyncFd`], readable
    /// while the shared notifier's count is non-zero (in whichever process it was written),
    /// with no `unsafe` in user code. Drain the notifier until `WouldBlock` before waiting
    /// again: each 0 → non-zero change of the count is one edge.
    ///
    /// # Errors
    ///
    /// The reactor's error (`epoll_ctl`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled (tokio's own panic).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use tokio::io::Interest;
    ///
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// let afd = s.fd_view()?.into_async_fd()?;
    /// let s2 = s.clone();
    /// std::thread::spawn(move || s2.write(3).unwrap());
    /// let got = afd.async_io(Interest::READABLE, |v| v.notifier().try_read()).await?;
    /// assert_eq!(got, 3);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
    pub fn into_async_fd(self) -> io::Result<AsyncFd<crate::shared::SharedFdView>> {
        register_stable(self, Interest::READABLE)
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl KernelNotifier {
    /// Register this eventfd with the current tokio reactor, readable and writable as the
    /// kernel reports: tokio's own [`AsyncFd`], with no `unsafe` in user code.
    /// [`AsyncNotifierFd::from_kernel`](crate::tokio::AsyncNotifierFd::from_kernel) wraps the same
    /// with `read`/`write`/`consume` futures.
    ///
    /// The registration lends nothing: a notifier whose fd was never lent stays *private*
    /// (its reads and writes one plain syscall each; see [`KernelNotifier`]) until a borrow
    /// is taken through the `AsyncFd` (its `AsRawFd`, or `get_ref().as_fd()`).
    ///
    /// # Errors
    ///
    /// The reactor's error (`epoll_ctl`).
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled (tokio's own panic).
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use tokio::io::Interest;
    ///
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// let writer = k.try_clone()?;
    /// let afd = k.into_async_fd()?;
    /// std::thread::spawn(move || writer.write(4).unwrap());
    /// let got = afd.async_io(Interest::READABLE, |k| k.try_read()).await?;
    /// assert_eq!(got, 4);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg_attr(
        docsrs,
        doc(cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android"))))
    )]
    pub fn into_async_fd(self) -> io::Result<AsyncFd<KernelNotifier>> {
        // tokio takes the fd through `AsRawFd` to register it: not a lend (a private
        // notifier stays private until a borrow through the `AsyncFd`).
        self.register_unlent(|k| register_stable(k, Interest::READABLE | Interest::WRITABLE))
    }
}

/// Await an [`Epoll`] through tokio's reactor: its [`fd_view`](Epoll::fd_view) registered
/// with tokio, and a [`wait`](Self::wait) that harvests without blocking the runtime.
///
/// [`Epoll::wait_async`] already awaits an epoll on any executor with no fd at all, and
/// is cheaper; use this when the epoll must sit in tokio's reactor next to sockets as a fd
/// (`AsFd`, [`as_async_fd`](Self::as_async_fd)), or to pass it where tokio readiness is
/// expected.
///
/// Kernel-fd sources of the epoll (`BorrowedFd`, [`KernelNotifier`]; Linux) wake a pending
/// [`wait`](Self::wait) too: the fd view of an epoll is readable when one of its kernel fds
/// is, as it is for [`Epoll::wait_async`] (see [`Epoll::fd_view`]).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use evfd::{Epoll, Event, Events, Notifier};
/// use evfd::tokio::AsyncEpollFd;
///
/// let ep = Epoll::new();
/// let n = Notifier::new();
/// ep.add(&n, Events::IN, 5)?;
/// let aep = AsyncEpollFd::new(&ep)?;
/// let n2 = n.clone();
/// std::thread::spawn(move || n2.notify().unwrap());
/// let mut evs = [Event::default(); 4];
/// let got = aep.wait(&mut evs).await?;
/// assert_eq!(&evs[..got], &[Event { events: Events::IN, data: 5 }]);
/// # Ok(())
/// # }
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
#[derive(Debug)]
pub struct AsyncEpollFd {
    epoll: Epoll,
    fd: AsyncFd<FdView>,
}

impl AsyncEpollFd {
    /// Register a new fd view of `epoll` with the current tokio reactor. The `AsyncEpollFd`
    /// holds a handle to the epoll; sources are added and removed through
    /// [`epoll`](Self::epoll) (or any other handle) as usual.
    ///
    /// # Errors
    ///
    /// The OS error from creating the view's doorbell or registering it.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled (tokio's own panic).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let ep = evfd::Epoll::new();
    /// let aep = evfd::tokio::AsyncEpollFd::new(&ep)?;
    /// assert!(aep.epoll().ptr_eq(&ep));
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(epoll: &Epoll) -> io::Result<AsyncEpollFd> {
        Ok(AsyncEpollFd {
            epoll: epoll.clone(),
            fd: epoll.fd_view()?.into_async_fd()?,
        })
    }

    /// The epoll.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let aep = evfd::tokio::AsyncEpollFd::new(&evfd::Epoll::new())?;
    /// assert!(aep.epoll().is_empty());
    /// # Ok(())
    /// # }
    /// ```
    pub fn epoll(&self) -> &Epoll {
        &self.epoll
    }

    /// The registered view, for tokio's own API (`readable`, `try_io`, `async_io`).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use std::os::fd::AsRawFd;
    /// let aep = evfd::tokio::AsyncEpollFd::new(&evfd::Epoll::new())?;
    /// assert_eq!(aep.as_async_fd().as_raw_fd(), aep.as_raw_fd());
    /// # Ok(())
    /// # }
    /// ```
    pub fn as_async_fd(&self) -> &AsyncFd<FdView> {
        &self.fd
    }

    /// Wait for events and fill `events` with up to `events.len()` of them: the epoll's
    /// [`wait`](Epoll::wait) semantics (re-poll at delivery, LT requeue, ET, ONESHOT,
    /// AutoReset reset by the delivery), awaited through the reactor. A harvest that finds
    /// nothing clears the readiness and waits for the next edge, which the view guarantees.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if `events` is empty; the reactor's error.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: events are harvested in the poll that returns them, so a future
    /// dropped early has delivered nothing.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use evfd::{Epoll, Event, Events, Mode, Notifier};
    /// use evfd::tokio::AsyncEpollFd;
    /// let ep = Epoll::new();
    /// let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    /// ep.add(&kick, Events::IN, 1)?;
    /// let aep = AsyncEpollFd::new(&ep)?;
    /// kick.notify()?;
    /// let mut evs = [Event::default(); 2];
    /// assert_eq!(aep.wait(&mut evs).await?, 1);
    /// assert_eq!(kick.count(), 0); // AutoReset: consumed by the delivery
    /// assert!(aep.wait(&mut []).await.is_err());
    /// # Ok(())
    /// # }
    /// ```
    pub async fn wait(&self, events: &mut [Event]) -> io::Result<usize> {
        let harvest = |events: &mut [Event]| self.epoll.wait(events, Some(Duration::ZERO));
        if events.is_empty() {
            // Epoll::wait's own error, before waiting for anything.
            return harvest(events);
        }
        std::future::poll_fn(|cx| {
            // A readiness report gets a harvest; one that finds nothing clears the view's
            // readiness (unless a newer event arrived meanwhile: tokio's tick) and is polled
            // again, which registers the waker before returning Pending.
            loop {
                let mut cleared = false;
                if let Some(r) = harvest_if_ready(&self.fd, cx, &mut cleared, || harvest(events)) {
                    return Poll::Ready(r);
                }
                if !cleared {
                    return Poll::Pending;
                }
            }
        })
        .await
    }
}

/// The view's turn in [`AsyncEpollFd::wait`]: if it is ready, harvest; `Some` with
/// the result to return, or `None` after clearing its readiness (the harvest found nothing:
/// `cleared` is set) or when it is not ready.
fn harvest_if_ready<T: AsRawFd>(
    fd: &AsyncFd<T>,
    cx: &mut Context<'_>,
    cleared: &mut bool,
    harvest: impl FnOnce() -> io::Result<usize>,
) -> Option<io::Result<usize>> {
    let Poll::Ready(guard) = fd.poll_read_ready(cx) else {
        return None;
    };
    let mut guard = match guard {
        Ok(g) => g,
        Err(e) => return Some(Err(e)),
    };
    match harvest() {
        Ok(0) => {
            guard.clear_ready();
            *cleared = true;
            None
        }
        r => Some(r),
    }
}

impl AsFd for AsyncEpollFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.get_ref().as_fd()
    }
}

impl AsRawFd for AsyncEpollFd {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}
