//! [`EventNotifier`]: what every notifier kind shares, so that code is written once for an
//! in-memory [`Notifier`], a kernel-backed [`KernelNotifier`] and a cross-process
//! [`SharedNotifier`](crate::SharedNotifier).
//!
//! # One API
//!
//! The three kinds agree on the name, arguments and return type of every everyday method,
//! except where one kind cannot fail: an in-memory (or shared-memory) count is a load, so
//! [`Notifier::count`] and [`SharedNotifier::count`](crate::SharedNotifier::count) are
//! `u64`, while a kernel eventfd's count is read from `/proc/self/fdinfo`, which can be
//! missing, so [`KernelNotifier::count`] is an `io::Result<u64>`; likewise
//! [`Notifier::consume`] returns `Events` (a swap in memory) where the others do a syscall.
//! The trait's signatures are the widest any kind needs, and inherent methods win over trait
//! methods in method-call syntax, so `notifier.count()` stays a `u64` with the trait in
//! scope; generic code (`T: EventNotifier`) sees the `io::Result`.
//!
//! The trait is sealed (the crate implements it; a method added later breaks nobody) and a
//! [`Source`], so generic code can also watch any kind in an [`Epoll`](crate::Epoll). It is
//! object-safe: `Box<dyn EventNotifier>` has every method but the two async ones, which
//! need `Self: Sized` (their futures are each kind's own types).

use std::future::Future;
use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::epoll::Source;
use crate::events::Events;
use crate::mode::Mode;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;
use crate::notifier::Notifier;

/// Seals [`EventNotifier`].
mod private {
    /// Implemented by the crate's notifier kinds only.
    pub trait Sealed {}
}
pub(crate) use private::Sealed;

/// What every notifier kind shares: the eventfd(2) operations, their timed and async
/// forms, readiness, the fd where there is one, and being an [`Epoll`](crate::Epoll)
/// [`Source`].
///
/// Implemented by [`Notifier`] (in memory, no fd), [`KernelNotifier`] (a kernel eventfd)
/// and [`SharedNotifier`](crate::SharedNotifier) (shared memory across processes). The
/// semantics are the same on every kind (see [`Mode`]): counts up to
/// [`LIMIT`](crate::LIMIT), `write(u64::MAX)` is `InvalidInput`, a write past the limit
/// waits (or `WouldBlock`), a read of zero waits (or `WouldBlock`), a failed call changes
/// nothing, and every `WouldBlock` and `TimedOut` carries its errno (`EAGAIN`,
/// `ETIMEDOUT`). Sealed: the crate implements it.
///
/// # Examples
///
/// One function that watches, waits on, writes and reads any kind:
///
/// ```
/// use evfd::{Epoll, Event, EventNotifier, Events, KernelNotifier, Mode, Notifier, SharedNotifier};
/// use std::time::Duration;
///
/// fn exercise<T: EventNotifier>(t: &T, ep: &Epoll) -> std::io::Result<u64> {
///     ep.add(t, Events::IN, 7)?;
///     t.notify()?;
///     t.write_timeout(2, Duration::from_millis(10))?;
///     let mut evs = [Event::default(); 4];
///     assert_eq!(ep.wait(&mut evs, Some(Duration::from_secs(5)))?, 1);
///     assert_eq!(evs[0].data, 7);
///     assert_eq!(t.count()?, 3);
///     let got = t.read()?;
///     assert_eq!(t.try_read().unwrap_err().raw_os_error(), Some(libc::EAGAIN));
///     let e = t.read_timeout(Duration::from_millis(1)).unwrap_err();
///     assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
///     futures::executor::block_on(t.write_async(4))?;
///     assert_eq!(futures::executor::block_on(t.read_async())?, 4);
///     ep.delete(t)?;
///     Ok(got)
/// }
///
/// assert_eq!(exercise(&Notifier::new(), &Epoll::new())?, 3);
/// assert_eq!(exercise(&KernelNotifier::new(Mode::Counter)?, &Epoll::new())?, 3);
/// assert_eq!(exercise(&SharedNotifier::new(Mode::Counter)?, &Epoll::new())?, 3);
///
/// // Object-safe, but for the two async methods.
/// let bells: Vec<Box<dyn EventNotifier>> = vec![
///     Box::new(Notifier::new()),
///     Box::new(KernelNotifier::new(Mode::Semaphore)?),
/// ];
/// assert!(bells[0].fd().is_none()); // in memory: no fd (make one with `fd_view`)
/// assert!(bells[1].fd().is_some());
/// let ep = Epoll::new();
/// ep.add(&*bells[1], Events::IN, 1)?;
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait EventNotifier: Source + Sealed + Send + Sync {
    /// The counting mode.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let k: &dyn EventNotifier = &evfd::KernelNotifier::new(evfd::Mode::AutoReset)?;
    /// assert_eq!(k.mode(), evfd::Mode::AutoReset);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn mode(&self) -> Mode;

    /// Whether `read`/`write` behave as `try_read`/`try_write` (`EFD_NONBLOCK`).
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let n = evfd::Notifier::builder().nonblocking(true).build()?;
    /// assert!(EventNotifier::is_nonblocking(&n));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn is_nonblocking(&self) -> bool;

    /// Whether the notifier's fds are close-on-exec: the eventfd's `FD_CLOEXEC` for a
    /// [`KernelNotifier`]; for the other kinds, the flag their fd views (and a shared
    /// notifier's doorbell and region) are made with.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let k = evfd::KernelNotifier::builder().cloexec(false).build()?;
    /// assert!(!EventNotifier::is_cloexec(&k));
    /// assert!(EventNotifier::is_cloexec(&evfd::Notifier::new()));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn is_cloexec(&self) -> bool;

    /// Add `n` to the count without waiting.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `WouldBlock` if the count would pass
    /// [`LIMIT`](crate::LIMIT). Nothing changes on error.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let k: &dyn EventNotifier = &evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// k.try_write(evfd::LIMIT)?;
    /// assert_eq!(k.try_write(1).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn try_write(&self, n: u64) -> io::Result<()>;

    /// Add `n` to the count, waiting for room if it would pass [`LIMIT`](crate::LIMIT).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `WouldBlock` only when non-blocking.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let n: &dyn EventNotifier = &evfd::Notifier::new();
    /// n.write(4)?;
    /// assert_eq!(n.count()?, 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn write(&self, n: u64) -> io::Result<()>;

    /// As [`write`](Self::write), giving up after `timeout` if `n` does not fit below
    /// [`LIMIT`](crate::LIMIT) by then.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `TimedOut` (`ETIMEDOUT`) if `n` did not fit
    /// within `timeout`; `WouldBlock` when non-blocking. Nothing changes on error.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// use std::time::Duration;
    /// let k: &dyn EventNotifier = &evfd::KernelNotifier::builder().initial(evfd::LIMIT).build()?;
    /// let e = k.write_timeout(1, Duration::from_millis(2)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn write_timeout(&self, n: u64, timeout: Duration) -> io::Result<()>;

    /// `write(1)`: the doorbell.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let n: &dyn EventNotifier = &evfd::Notifier::new();
    /// n.notify()?;
    /// assert_eq!(n.try_read()?, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn notify(&self) -> io::Result<()> {
        self.write(1)
    }

    /// Take from the count without waiting: the whole count (Counter, AutoReset) or 1
    /// (Semaphore).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when the count is 0.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let k: &dyn EventNotifier = &evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// assert_eq!(k.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn try_read(&self) -> io::Result<u64>;

    /// Take from the count, waiting while it is 0.
    ///
    /// # Errors
    ///
    /// `WouldBlock` only when non-blocking; a kernel notifier's errno.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let n = evfd::Notifier::builder().mode(evfd::Mode::Semaphore).initial(2).build()?;
    /// assert_eq!(EventNotifier::read(&n)?, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn read(&self) -> io::Result<u64>;

    /// As [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// `TimedOut` if the count stayed 0 for `timeout`; `WouldBlock` when non-blocking.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// use std::time::Duration;
    /// let k: &dyn EventNotifier = &evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// let e = k.read_timeout(Duration::from_millis(1)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn read_timeout(&self, timeout: Duration) -> io::Result<u64>;

    /// Readiness: the bits of `interest` that hold now, plus `ERR`/`HUP` if they hold.
    /// Never consumes anything.
    ///
    /// ```
    /// use evfd::{EventNotifier, Events};
    /// let n: &dyn EventNotifier = &evfd::Notifier::new();
    /// assert_eq!(n.poll(Events::IN | Events::OUT), Events::OUT);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn poll(&self, interest: Events) -> Events;

    /// A snapshot of the count: a diagnostic, not a synchronisation tool.
    ///
    /// # Errors
    ///
    /// A kernel notifier's `Unsupported` where `/proc` cannot be read; an in-memory
    /// notifier never fails ([`Notifier::count`] is a plain `u64`).
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let k: &dyn EventNotifier = &evfd::KernelNotifier::builder().initial(6).build()?;
    /// assert_eq!(k.count()?, 6);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn count(&self) -> io::Result<u64>;

    /// Deliver `IN` to this consumer, as an epoll harvest does: returns the readiness at
    /// delivery (`IN` if it was readable) and, in [`Mode::AutoReset`], resets the count to
    /// 0. Counter and Semaphore: a readiness check that changes nothing.
    ///
    /// # Errors
    ///
    /// A kernel notifier's errno; an in-memory notifier never fails
    /// ([`Notifier::consume`] returns `Events`).
    ///
    /// ```
    /// use evfd::{EventNotifier, Events, Mode};
    /// let kick: &dyn EventNotifier = &evfd::KernelNotifier::new(Mode::AutoReset)?;
    /// kick.notify()?;
    /// assert!(kick.consume()?.contains(Events::IN));
    /// assert_eq!(kick.count()?, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn consume(&self) -> io::Result<Events>;

    /// Take from the count, waiting while it is 0, as a future on any executor: the whole
    /// count (Counter, AutoReset) or 1 (Semaphore). Cancel-safe: a future dropped before it
    /// completed took nothing. Each kind's inherent `read_async` says how it waits.
    ///
    /// # Errors
    ///
    /// As each kind's inherent `read_async`.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// async fn take<T: EventNotifier>(t: &T) -> std::io::Result<u64> {
    ///     EventNotifier::read_async(t).await
    /// }
    /// let k = evfd::KernelNotifier::builder().initial(5).build()?;
    /// assert_eq!(futures::executor::block_on(take(&k))?, 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn read_async(&self) -> impl Future<Output = io::Result<u64>> + Send + '_
    where
        Self: Sized;

    /// Add `n` to the count, waiting for room while it would pass [`LIMIT`](crate::LIMIT),
    /// as a future on any executor. Cancel-safe: a future dropped before it completed added
    /// nothing.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; as each kind's inherent `write_async`.
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// let n = evfd::Notifier::new();
    /// futures::executor::block_on(EventNotifier::write_async(&n, 3))?;
    /// assert_eq!(n.count(), 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn write_async(&self, n: u64) -> impl Future<Output = io::Result<()>> + Send + '_
    where
        Self: Sized;

    /// The fd that other processes and the kernel can signal, where the kind has one (a
    /// [`KernelNotifier`]'s eventfd); `None` for an in-memory notifier, which makes fds on
    /// demand ([`Notifier::fd_view`]).
    ///
    /// ```
    /// use evfd::EventNotifier;
    /// use std::os::fd::AsRawFd;
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// assert_eq!(EventNotifier::fd(&k).map(|fd| fd.as_raw_fd()), Some(k.as_raw_fd()));
    /// assert!(EventNotifier::fd(&evfd::Notifier::new()).is_none());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn fd(&self) -> Option<BorrowedFd<'_>>;
}

/// The methods whose signatures agree on every kind: forwarded to the inherent ones.
macro_rules! forward_common {
    () => {
        fn mode(&self) -> $crate::mode::Mode {
            Self::mode(self)
        }
        fn is_nonblocking(&self) -> bool {
            Self::is_nonblocking(self)
        }
        fn is_cloexec(&self) -> bool {
            Self::is_cloexec(self)
        }
        fn try_write(&self, n: u64) -> ::std::io::Result<()> {
            Self::try_write(self, n)
        }
        fn write(&self, n: u64) -> ::std::io::Result<()> {
            Self::write(self, n)
        }
        fn write_timeout(&self, n: u64, timeout: ::std::time::Duration) -> ::std::io::Result<()> {
            Self::write_timeout(self, n, timeout)
        }
        fn notify(&self) -> ::std::io::Result<()> {
            Self::notify(self)
        }
        fn try_read(&self) -> ::std::io::Result<u64> {
            Self::try_read(self)
        }
        fn read(&self) -> ::std::io::Result<u64> {
            Self::read(self)
        }
        fn read_timeout(&self, timeout: ::std::time::Duration) -> ::std::io::Result<u64> {
            Self::read_timeout(self, timeout)
        }
        fn poll(&self, interest: $crate::events::Events) -> $crate::events::Events {
            Self::poll(self, interest)
        }
        fn read_async(
            &self,
        ) -> impl ::std::future::Future<Output = ::std::io::Result<u64>> + Send + '_ {
            Self::read_async(self)
        }
        fn write_async(
            &self,
            n: u64,
        ) -> impl ::std::future::Future<Output = ::std::io::Result<()>> + Send + '_ {
            Self::write_async(self, n)
        }
    };
}
/// Also for the `SharedNotifier` impl (`crate::shared`), which is a layer above.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use forward_common;

impl Sealed for Notifier {}
impl EventNotifier for Notifier {
    forward_common!();

    fn count(&self) -> io::Result<u64> {
        Ok(Notifier::count(self))
    }

    fn consume(&self) -> io::Result<Events> {
        Ok(Notifier::consume(self))
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl Sealed for KernelNotifier {}

#[cfg(any(target_os = "linux", target_os = "android"))]
#[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
impl EventNotifier for KernelNotifier {
    forward_common!();

    fn count(&self) -> io::Result<u64> {
        KernelNotifier::count(self)
    }

    fn consume(&self) -> io::Result<Events> {
        KernelNotifier::consume(self)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        Some(std::os::fd::AsFd::as_fd(self))
    }
}
