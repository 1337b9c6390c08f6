//! [`SharedFdView`]: a real fd readable exactly while a [`SharedNotifier`]'s count is
//! non-zero (a duplicate of the doorbell, which mirrors `count > 0` while a consumer is
//! registered), made by [`SharedNotifier::fd_view`]; or, edge-only, rung at each
//! 0 → non-zero edge and never drained for it ([`SharedFdView::set_edge_only`]).
//!
//! LOCKING: one lock per view, `SharedFdView::edge_only`, a leaf: held across a mode
//! switch (the region's registration changes and their doorbell syscalls; no foreign
//! code), so that two switches of one view do not interleave, and to read the mode.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Mutex, PoisonError};

use super::notifier::SharedNotifier;
use crate::events::Events;
use crate::sys::eventfd;

impl SharedNotifier {
    /// A real fd readable exactly while the count is non-zero (in either process), for OS
    /// pollers (`poll(2)`, raw epoll, mio, tokio's `AsyncFd`).
    ///
    /// The fd is (a duplicate of) the doorbell eventfd. While a view exists (in any process)
    /// the doorbell mirrors `count > 0`: the write that makes the count non-zero rings it and
    /// the read that empties it drains it, each one syscall; writes and reads in between
    /// cost none. Poll the fd, never read or write it; consume through the notifier
    /// ([`read`](Self::read), [`SharedFdView::consume`] for AutoReset).
    ///
    /// A view polled only by edge-triggered pollers can be made edge-only
    /// ([`SharedFdView::set_edge_only`]): the write that makes the count non-zero still
    /// rings the doorbell, but nothing drains it for that view, so a wake costs the ring
    /// alone.
    ///
    /// # Errors
    ///
    /// The OS error from duplicating the doorbell fd.
    ///
    /// ```
    /// use rustix::event::{poll, PollFd, PollFlags, Timespec};
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// let view = s.fd_view()?;
    /// let readable = || {
    ///     let mut fds = [PollFd::new(&view, PollFlags::IN)];
    ///     poll(&mut fds, Some(&Timespec { tv_sec: 0, tv_nsec: 0 })).unwrap() == 1
    /// };
    /// assert!(!readable());
    /// s.notify()?;
    /// assert!(readable());
    /// s.read()?;
    /// assert!(!readable());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn fd_view(&self) -> io::Result<SharedFdView> {
        let fd = eventfd::dup(self.bell_fd(), self.cloexec())?;
        self.arm_bell_here();
        Ok(SharedFdView {
            shared: self.clone(),
            fd,
            pid: std::process::id(),
            edge_only: Mutex::new(false),
        })
    }
}

/// A real fd readable exactly while a [`SharedNotifier`]'s count is non-zero; made by
/// [`SharedNotifier::fd_view`]. Dropping it unregisters it (writes stop ringing once no
/// view or epoll is left).
///
/// A view is level by default; an edge-only one ([`set_edge_only`](Self::set_edge_only))
/// is for edge-triggered pollers only, and saves the drain of each edge.
///
/// # Examples
///
/// ```
/// use evfd::{Events, Mode, SharedNotifier};
/// let kick = SharedNotifier::new(Mode::AutoReset)?;
/// let view = kick.fd_view()?;
/// kick.notify()?;
/// assert!(view.consume()?.contains(Events::IN)); // delivered: reset
/// assert_eq!(kick.count(), 0);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct SharedFdView {
    shared: SharedNotifier,
    fd: OwnedFd,
    /// The process that registered this view (a fork child's copy must not unregister it).
    pid: u32,
    /// Whether the view is registered as an edge-only consumer (`edges` in the region)
    /// rather than a level one (`sleepers`); held across a switch, so that two switches
    /// of one view do not interleave.
    edge_only: Mutex<bool>,
}

impl SharedFdView {
    /// Deliver `IN` to this consumer: the readiness at delivery; a [`Mode::AutoReset`](crate::mode::Mode::AutoReset)
    /// notifier's count is reset to 0 (and the doorbell drained).
    ///
    /// The same delivery as [`FdView::consume`](crate::FdView::consume), which cannot fail
    /// (its count is this process's own memory).
    ///
    /// # Errors
    ///
    /// `InvalidData` if the peer corrupted the region.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::builder().initial(2).build()?;
    /// let v = s.fd_view()?;
    /// assert!(v.consume()?.contains(evfd::Events::IN));
    /// assert_eq!(s.count(), 2); // Counter: delivery changes nothing
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn consume(&self) -> io::Result<Events> {
        self.shared.consume()
    }

    /// The notifier this view follows.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// assert!(s.fd_view()?.notifier().ptr_eq(&s));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn notifier(&self) -> &SharedNotifier {
        &self.shared
    }

    /// Make this view edge-only (`true`: for edge-triggered pollers only, such as mio,
    /// tokio's `AsyncFd`, epoll with `EPOLLET`, kqueue with `EV_CLEAR`), or (`false`, the
    /// default) for every poller.
    ///
    /// An edge-only view still has the doorbell rung on each not-readable → readable edge
    /// of the count (the write that takes it from 0, in any process), and each ring is a
    /// write that wakes edge-triggered pollers even if the fd is still readable from the
    /// one before; nothing drains it for this view. The drain, a `read(2)` each time a
    /// consumer empties the count, is what keeps the fd readable exactly while the count
    /// is non-zero, which only level-triggered pollers (`poll(2)`, `select(2)`, epoll
    /// without `EPOLLET`) need. So a wake through an edge-only view costs one doorbell
    /// write ([`SharedStats::rings`](crate::stats::SharedStats::rings)) and no drain, as
    /// mio's `Waker` does, where a level view costs a write and a drain
    /// ([`SharedStats::drains`](crate::stats::SharedStats::drains)). A view that becomes
    /// edge-only while the count is non-zero gets a ring at once, so that it too sees an
    /// edge.
    ///
    /// The doorbell is one fd shared by every view and epoll of the notifier, in every
    /// process. While any of them is level (another view, an [`Epoll`](crate::Epoll)
    /// watching the notifier, a pending [`read_async`](SharedNotifier::read_async)), the
    /// doorbell stays level-exact, and the edge-only view's fd is too. While none is, the
    /// fd stays readable once rung, whatever the count: a level-triggered poller would see
    /// it ready for ever. Set it only when every poller of this fd is edge-triggered.
    /// Setting it back to `false` drains the doorbell if the count is 0, so that the fd is
    /// level-exact again.
    ///
    /// # Errors
    ///
    /// [`Unsupported`](io::ErrorKind::Unsupported) in a child process, for a view made
    /// before the fork (its registration is the parent's): nothing changes. Make a view of
    /// its own in the child with [`SharedNotifier::fd_view`].
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Events, Mode, SharedNotifier};
    /// let kick = SharedNotifier::new(Mode::AutoReset)?;
    /// let view = kick.fd_view()?;
    /// view.set_edge_only(true)?;
    /// assert!(view.is_edge_only());
    /// let before = kick.stats();
    /// for _ in 0..3 {
    ///     kick.notify()?; // an edge: one ring
    ///     kick.notify()?; // the count is non-zero already: nothing
    ///     assert!(view.consume()?.contains(Events::IN)); // emptied: no drain
    /// }
    /// assert_eq!(kick.stats().rings, before.rings + 3);
    /// assert_eq!(kick.stats().drains, before.drains);
    /// view.set_edge_only(false)?; // level again: drained, as the count is 0
    /// assert!(!view.is_edge_only());
    /// assert_eq!(kick.stats().drains, before.drains + 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_edge_only(&self, on: bool) -> io::Result<()> {
        if std::process::id() != self.pid {
            return Err(crate::sys::fork::refused_because(
                "SharedFdView",
                "its registration is the parent's, so a child process cannot change it",
                "make a view in the child with SharedNotifier::fd_view",
            ));
        }
        let mut edge_only = self
            .edge_only
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if *edge_only == on {
            return Ok(());
        }
        if on {
            // Edge first, then leave level: a fill in between finds one or the other.
            self.shared.arm_edge_bell_here();
            self.shared.disarm_bell_here();
        } else {
            // Level first (its sync drains a doorbell left rung at count 0), then leave edge.
            self.shared.arm_bell_here();
            self.shared.disarm_edge_bell_here();
        }
        *edge_only = on;
        Ok(())
    }

    /// Whether this view is edge-only ([`set_edge_only`](Self::set_edge_only)).
    ///
    /// # Examples
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// let view = s.fd_view()?;
    /// assert!(!view.is_edge_only(), "level by default");
    /// view.set_edge_only(true)?;
    /// assert!(view.is_edge_only());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_edge_only(&self) -> bool {
        *self
            .edge_only
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

impl Drop for SharedFdView {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            let edge_only = self
                .edge_only
                .get_mut()
                .unwrap_or_else(PoisonError::into_inner);
            if *edge_only {
                self.shared.disarm_edge_bell_here();
            } else {
                self.shared.disarm_bell_here();
            }
        }
    }
}

impl AsFd for SharedFdView {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for SharedFdView {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl fmt::Debug for SharedFdView {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedFdView")
            .field("fd", &self.fd.as_raw_fd())
            .field("count", &self.shared.count())
            .field("edge_only", &self.is_edge_only())
            .finish()
    }
}
