//! [`Fd`]: a kernel fd the crate holds, and whether its open file description can be in
//! anyone else's hands.
//!
//! `O_NONBLOCK` belongs to the open file description, which every duplicate of the fd
//! shares, in every process it reaches; whoever holds one can clear the flag. So a call on
//! a description a peer may hold must not rely on it (`NowProbe`, docs/semantics.md §6.4):
//! an eventfd read takes `preadv2(RWF_NOWAIT)` and a write a zero-timeout `poll(2)` first.
//! A description nobody else can reach needs neither: the crate made it `O_NONBLOCK`, and
//! only the crate's own calls touch it, so a plain `read(2)` or `write(2)` never waits
//! (one syscall, and ~90 ns less than `preadv2` per read on the machines measured;
//! docs/handoff.md).
//!
//! A description is *private* while all of these hold:
//!
//! - the crate made it, close-on-exec (an adopted fd may have duplicates anywhere; one that
//!   survives `exec` reaches the new program);
//! - no borrow of it was handed to the caller ([`Fd::lend`]: the public `AsFd`/`AsRawFd`,
//!   a clone, an fd given away): Rust's I/O safety makes a lent borrow the only way other
//!   code can operate on it;
//! - the process has not forked since (`fork::forked_since`):
//!   the child holds the description too, and may lend its copy.
//!
//! The first two are a flag, set once and never cleared; the fork count moves only once no
//! private section runs (`super::fork::private_section`). The calls that use privacy (an
//! eventfd's `eventfd::read_fd` and `write_fd`) look at both and make their syscall inside
//! such a section ([`Fd::guarded`]), so a fork cannot come between the look and the
//! syscall: the child of a later fork exists only after the syscall returned. The section
//! is two atomic RMWs on one process-wide word, and no lock: the calls stay
//! async-signal-safe.
//!
//! The flag's ordering: a caller lends (the flag's `Release` store) before it passes the
//! borrow on, and a peer clears `O_NONBLOCK` only with that borrow, so after the store.
//! A private call that runs after the peer's `fcntl` loads the flag after it too (the
//! syscalls of both are full barriers on every platform the crate runs on), and sees it.
//! A private call whose load came before the lend raced with the lend itself: its syscall
//! may then run on the non-blocking description, which is what it saw.

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};

use super::fork;

/// A kernel fd the crate holds (an eventfd, a pipe end), with what says whether its open
/// file description is private (module docs).
#[derive(Debug)]
pub(crate) struct Fd {
    fd: OwnedFd,
    /// Set once by [`Fd::lend`] (or at birth, [`Fd::shared`]); never cleared.
    lent: AtomicBool,
    /// [`fork::forks`] when made.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    born: u32,
}

impl Fd {
    /// A description the crate just made, close-on-exec: private until lent or forked.
    pub(crate) fn private(fd: OwnedFd) -> Fd {
        Fd {
            fd,
            lent: AtomicBool::new(false),
            born: fork::forks(),
        }
    }

    /// A description that may be shared from the start (adopted, inheritable across
    /// `exec`, or handed to a peer by design).
    pub(crate) fn shared(fd: OwnedFd) -> Fd {
        Fd {
            fd,
            lent: AtomicBool::new(true),
            born: fork::forks(),
        }
    }

    /// The borrow handed to the caller (or to code the crate does not control): from now on
    /// the description may be shared.
    pub(crate) fn lend(&self) -> BorrowedFd<'_> {
        self.lent.store(true, Ordering::Release);
        self.fd.as_fd()
    }

    /// Whether the description is private now (module docs). Exact only inside a fork
    /// guard; a hint elsewhere. (Only eventfds use it: Linux.)
    #[inline]
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn is_private(&self) -> bool {
        !self.lent.load(Ordering::Acquire) && !fork::forked_since(self.born)
    }

    /// Give the fd away (the owner's `Into<OwnedFd>`): lent, for whatever still holds this.
    pub(crate) fn into_owned(self) -> OwnedFd {
        self.lent.store(true, Ordering::Release);
        self.fd
    }

    /// `call(fd, private)` inside a private section (`fork::private_section`): a fork
    /// cannot come between the look at privacy and the syscall `call` makes.
    #[inline]
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn guarded<R>(&self, call: impl FnOnce(BorrowedFd<'_>, bool) -> R) -> R {
        fork::private_section(|unforked| call(self.fd.as_fd(), unforked && self.is_private()))
    }
}

/// The crate's own borrow (registrations, polls, the shared calls): not a lend.
impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn efd() -> OwnedFd {
        rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .unwrap()
    }

    /// Private until lent; a lend is for good; an adopted fd is shared from birth.
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn private_until_lent() {
        let f = Fd::private(efd());
        assert!(f.is_private());
        let _ = f.as_fd(); // the crate's own borrow
        assert!(f.is_private());
        let _ = f.lend();
        assert!(!f.is_private());
        assert!(!Fd::shared(efd()).is_private());
        assert!(f.guarded(|_, private| !private));
    }
}
