//! `mio::event::Source` for evfd's real fds (feature `mio`): fd views (of a [`Notifier`] or
//! an [`Epoll`]) and [`KernelNotifier`]s register with a `mio::Registry` directly, with no
//! `SourceFd` and no raw fd in user code.
//!
//! mio is edge-triggered: after an event, drain the source until it reports `WouldBlock`
//! (a notifier's `try_read`, an epoll's `wait` with a zero timeout returning 0, an
//! AutoReset view's [`consume`](FdView::consume) without `IN`) before polling again. fd
//! views guarantee a fresh edge after such a drain (see [`FdView`]). A view that only mio
//! (or other edge-triggered pollers) watches can be made edge-only
//! ([`FdView::set_edge_only`]): it then never drains its doorbell, and a wake costs one
//! syscall, as mio's own `Waker` does, instead of two.
//!
//! [`Notifier`]: crate::Notifier
//! [`Epoll`]: crate::Epoll

use std::io;
use std::os::fd::AsRawFd;

use mio::event::Source;
use mio::unix::SourceFd;
use mio::{Interest, Registry, Token};

use crate::fd::FdView;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::shared::SharedFdView;

/// A view shows readability only: its doorbell is always writable, which says nothing about
/// room in the source.
fn view_interest(interests: Interest) -> io::Result<Interest> {
    if interests.is_writable() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an FdView reports readability only: register it with Interest::READABLE \
             (wait for room to write with Notifier::write or write_async)",
        ));
    }
    Ok(interests)
}

/// Kernel objects report what they report.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn any_interest(interests: Interest) -> io::Result<Interest> {
    Ok(interests)
}

/// The fd a view registers: its doorbell's, the crate's own borrow (a registration in
/// mio's epoll puts the fd in nobody's hands: the doorbell's rings stay one plain
/// `write(2)`, `sys::fd`).
fn view_fd(v: &FdView) -> std::os::fd::RawFd {
    v.registration_fd().as_raw_fd()
}

/// The fd a shared view registers: its doorbell's.
#[cfg(any(target_os = "linux", target_os = "android"))]
fn shared_view_fd(v: &SharedFdView) -> std::os::fd::RawFd {
    v.as_raw_fd()
}

/// The fd a `KernelNotifier` registers: the crate's own borrow, not a lend. A registration
/// in mio's epoll puts the fd in nobody's hands (`epoll_ctl` cannot change the open file
/// description's flags), so a private notifier stays private: its reads and writes stay
/// one plain syscall each (docs/semantics.md §6.4, "Private descriptions").
#[cfg(any(target_os = "linux", target_os = "android"))]
fn kernel_fd(k: &KernelNotifier) -> std::os::fd::RawFd {
    k.registrations().fd().as_raw_fd()
}

/// `impl Source` for a type with a stable fd (`$fd` returns the same open fd for the
/// value's whole life), through mio's `SourceFd`; `$check` vets the interest.
macro_rules! source_via_fd {
    ($(#[$doc:meta])* $ty:ty, $check:path, $fd:path) => {
        $(#[$doc])*
        #[cfg_attr(docsrs, doc(cfg(feature = "mio")))]
        impl Source for $ty {
            fn register(
                &mut self,
                registry: &Registry,
                token: Token,
                interests: Interest,
            ) -> io::Result<()> {
                SourceFd(&$fd(self)).register(registry, token, $check(interests)?)
            }

            fn reregister(
                &mut self,
                registry: &Registry,
                token: Token,
                interests: Interest,
            ) -> io::Result<()> {
                SourceFd(&$fd(self)).reregister(registry, token, $check(interests)?)
            }

            fn deregister(&mut self, registry: &Registry) -> io::Result<()> {
                SourceFd(&$fd(self)).deregister(registry)
            }
        }
    };
}

source_via_fd! {
/// Register the view's doorbell fd: the token fires (edge-triggered) each time the source
/// becomes readable.
///
/// # Errors
///
/// `InvalidInput` for an interest with [`Interest::WRITABLE`] (a view shows readability
/// only); the OS error from `epoll_ctl` (`EEXIST` if already registered with this
/// registry).
///
/// # Examples
///
/// ```
/// use mio::{Events, Interest, Poll, Token};
/// use std::time::Duration;
///
/// let n = evfd::Notifier::new();
/// let mut view = n.fd_view()?;
/// let mut poll = Poll::new()?;
/// poll.registry().register(&mut view, Token(1), Interest::READABLE)?;
/// n.notify()?;
/// let mut events = Events::with_capacity(4);
/// poll.poll(&mut events, Some(Duration::from_secs(5)))?;
/// assert_eq!(events.iter().next().map(|e| e.token()), Some(Token(1)));
/// // Edge-triggered: drain until WouldBlock before polling again.
/// assert_eq!(n.try_read()?, 1);
/// assert_eq!(n.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// # Ok::<(), std::io::Error>(())
/// ```
    FdView,
    view_interest,
    view_fd
}

#[cfg(any(target_os = "linux", target_os = "android"))]
source_via_fd! {
/// Register the eventfd itself, readable and/or writable as the kernel reports it (`IN`
/// while the count is non-zero, `OUT` while a write of 1 fits).
///
/// Unlike a view, a kernel eventfd re-arms an edge-triggered registration on every write,
/// even while already readable; draining until `WouldBlock` is still what mio requires.
///
/// Registering lends nothing: a notifier whose fd was never lent keeps its *private*
/// description (one plain `read(2)`/`write(2)` per `try_read`/`try_write`; see
/// [`KernelNotifier`]'s docs).
///
/// # Errors
///
/// The OS error from `epoll_ctl` (`EEXIST` if already registered with this registry).
///
/// # Examples
///
/// ```
/// use mio::{Events, Interest, Poll, Token};
/// use std::time::Duration;
///
/// let mut k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
/// let writer = k.try_clone()?; // e.g. handed to another process
/// let mut poll = Poll::new()?;
/// poll.registry().register(&mut k, Token(2), Interest::READABLE)?;
/// writer.write(3)?;
/// let mut events = Events::with_capacity(4);
/// poll.poll(&mut events, Some(Duration::from_secs(5)))?;
/// assert!(events.iter().any(|e| e.token() == Token(2) && e.is_readable()));
/// assert_eq!(k.try_read()?, 3);
/// # Ok::<(), std::io::Error>(())
/// ```
    KernelNotifier,
    any_interest,
    kernel_fd
}

#[cfg(any(target_os = "linux", target_os = "android"))]
source_via_fd! {
/// Register the view's fd (a duplicate of the shared notifier's doorbell): readable while
/// the count is non-zero, in whichever process it was written.
///
/// # Errors
///
/// `InvalidInput` for an interest with [`Interest::WRITABLE`]; the OS error from
/// `epoll_ctl`.
///
/// # Examples
///
/// ```
/// use mio::{Events, Interest, Poll, Token};
/// use std::time::Duration;
///
/// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
/// let mut view = s.fd_view()?;
/// let mut poll = Poll::new()?;
/// poll.registry().register(&mut view, Token(3), Interest::READABLE)?;
/// s.notify()?;
/// let mut events = Events::with_capacity(4);
/// poll.poll(&mut events, Some(Duration::from_secs(5)))?;
/// assert_eq!(events.iter().next().map(|e| e.token()), Some(Token(3)));
/// assert_eq!(s.try_read()?, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
    SharedFdView,
    view_interest,
    shared_view_fd
}
