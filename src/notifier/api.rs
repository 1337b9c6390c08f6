//! [`EventNotifier`]: what every notifier kind shares, so that code can be written once for
//! an in-memory [`Notifier`] and a kernel-backed [`KernelNotifier`] (and any later kind).
//!
//! # Return types
//!
//! The trait's signatures are the widest any kind needs. Where a kind cannot fail, its
//! inherent method says so and the trait method wraps it: [`Notifier::count`] is a `u64`
//! (an atomic load), while a kernel eventfd's count is read from `/proc/self/fdinfo`,
//! which can be missing, so [`EventNotifier::count`] is an `io::Result<u64>`; the same for
//! `consume` (a swap in memory, a `read(2)` in the kernel). Inherent methods win over trait
//! methods in method-call syntax, so `notifier.count()` stays a `u64` even with the trait
//! in scope; generic code (`T: EventNotifier`) sees the `io::Result`. Everything else
//! (`write`, `try_write`, `notify`, `read`, `try_read`, `read_timeout`, `poll`, `mode`,
//! `is_nonblocking`) has the same signature on every kind.

use std::io;
use std::os::fd::BorrowedFd;
use std::time::Duration;

use crate::events::Events;
use crate::mode::Mode;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;
use crate::notifier::Notifier;

/// What every notifier kind shares: the eventfd(2) operations, readiness, and the fd where
/// there is one.
///
/// Implemented by [`Notifier`] (in memory, no fd) and [`KernelNotifier`] (a kernel eventfd).
/// The semantics are the same on every kind (see [`Mode`]): counts up to
/// [`LIMIT`](crate::LIMIT), `write(u64::MAX)` is `InvalidInput`, a write past the limit
/// waits (or `WouldBlock`), a read of zero waits (or `WouldBlock`), a failed call changes
/// nothing. The trait is object-safe: `Box<dyn EventNotifier>` and `&dyn EventNotifier`
/// work.
///
/// # Examples
///
/// One function for both kinds:
///
/// ```
/// use evfd::{EventNotifier, KernelNotifier, Mode, Notifier};
///
/// fn ping_pong(bell: &impl EventNotifier) -> std::io::Result<u64> {
///     bell.notify()?;
///     bell.write(2)?;
///     assert_eq!(bell.count()?, 3);
///     bell.read()
/// }
///
/// assert_eq!(ping_pong(&Notifier::new())?, 3);
/// assert_eq!(ping_pong(&KernelNotifier::new(Mode::Counter)?)?, 3);
///
/// let bells: Vec<Box<dyn EventNotifier>> = vec![
///     Box::new(Notifier::new()),
///     Box::new(KernelNotifier::new(Mode::Semaphore)?),
/// ];
/// assert!(bells[0].fd().is_none()); // in memory: no fd (make one with `fd_view`)
/// assert!(bells[1].fd().is_some());
/// # Ok::<(), std::io::Error>(())
/// ```
pub trait EventNotifier: Send + Sync {
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
        fn mode(&self) -> Mode {
            Self::mode(self)
        }
        fn is_nonblocking(&self) -> bool {
            Self::is_nonblocking(self)
        }
        fn try_write(&self, n: u64) -> io::Result<()> {
            Self::try_write(self, n)
        }
        fn write(&self, n: u64) -> io::Result<()> {
            Self::write(self, n)
        }
        fn notify(&self) -> io::Result<()> {
            Self::notify(self)
        }
        fn try_read(&self) -> io::Result<u64> {
            Self::try_read(self)
        }
        fn read(&self) -> io::Result<u64> {
            Self::read(self)
        }
        fn read_timeout(&self, timeout: Duration) -> io::Result<u64> {
            Self::read_timeout(self, timeout)
        }
        fn poll(&self, interest: Events) -> Events {
            Self::poll(self, interest)
        }
    };
}
/// Also for the `SharedNotifier` impl (`crate::shared`), which is a layer above.
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) use forward_common;

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
