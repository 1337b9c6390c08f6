//! [`SharedFdView`]: a real fd readable exactly while a [`SharedNotifier`]'s count is
//! non-zero (a duplicate of the doorbell, which mirrors `count > 0` while a consumer is
//! registered), made by [`SharedNotifier::fd_view`].

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};

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
        })
    }
}

/// A real fd readable exactly while a [`SharedNotifier`]'s count is non-zero; made by
/// [`SharedNotifier::fd_view`]. Dropping it unregisters it (writes stop ringing once no
/// view or epoll is left).
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
}

impl Drop for SharedFdView {
    fn drop(&mut self) {
        if std::process::id() == self.pid {
            self.shared.disarm_bell_here();
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
            .finish()
    }
}
