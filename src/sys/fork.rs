//! Fork detection: a process-wide epoch that a `pthread_atfork` child handler bumps.
//!
//! A child process gets a *copy* of the parent's memory. An in-memory object made before
//! the fork is then a private copy whose locks may be held forever (by parent threads that
//! do not exist in the child), and whose fd view or embedded kernel epoll is shared with
//! the parent. So every in-memory object records the epoch it was made in
//! ([`epoch`]) and refuses to work when the epoch has moved ([`forked`]): one relaxed
//! atomic load and a compare per operation, no syscall.
//!
//! Ordering: the child handler runs in the forking thread, the only thread of the child,
//! before `fork()` returns there; every later load in the child is in program order after
//! it (or after a thread spawn, which synchronises). In the parent the epoch never moves.
//! So `Relaxed` is exact.
//!
//! The handlers also hold the crate's one global lock (the epoll topology lock) across the
//! fork, the classic `pthread_atfork` use: the child then never inherits it locked, so an
//! `Epoll` made in the child can nest epolls even if a parent thread was nesting at the
//! fork.
//!
//! `fork(2)` through libc (what `libc::fork`, `nix::unistd::fork` and `std::process::Command`
//! call) runs the handlers; a raw `clone(2)` syscall does not, and is not detected.
//!
//! # References
//!
//! - [pthread_atfork(3)](https://man7.org/linux/man-pages/man3/pthread_atfork.3.html)
#![allow(unsafe_code)]

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};
use std::sync::Mutex;
#[cfg(not(any(miri, evfd_loom)))]
use std::sync::Once;

/// The crate's one process-wide lock: the epoll topology lock (`crate::epoll::topology`,
/// which re-exports it). It lives here, in the OS layer, so that the fork handlers can hold
/// it across a fork without this layer importing from above.
pub(crate) static TOPOLOGY: Mutex<()> = Mutex::new(());

/// Bumped in every child by the atfork handler. Not the loom shim's atomic: written only by
/// the handler, never part of a modelled protocol.
static EPOCH: AtomicU32 = AtomicU32::new(0);

/// The `pthread_atfork` handlers (not under Miri or loom, which do not run them).
#[cfg(not(any(miri, evfd_loom)))]
mod handlers {
    use std::cell::RefCell;
    use std::sync::atomic::Ordering::Relaxed;
    use std::sync::MutexGuard;

    use super::{EPOCH, TOPOLOGY};

    thread_local! {
        /// The topology lock, held by the forking thread from `prepare` to `parent`/`child`.
        static HELD: RefCell<Option<MutexGuard<'static, ()>>> = const { RefCell::new(None) };
    }

    extern "C" fn prepare() {
        let g = TOPOLOGY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        HELD.with(|h| *h.borrow_mut() = Some(g));
    }

    extern "C" fn parent() {
        HELD.with(|h| drop(h.borrow_mut().take()));
    }

    extern "C" fn child() {
        EPOCH.fetch_add(1, Relaxed);
        HELD.with(|h| drop(h.borrow_mut().take()));
    }

    pub(super) fn register() {
        // SAFETY: the three handlers are plain `extern "C" fn()`s that never unwind (they
        // only lock/unlock a mutex and touch an atomic and a thread-local); registering them
        // has no other precondition. A failure (ENOMEM) leaves fork undetected, which is
        // what the crate did before; nothing else depends on it.
        let _ = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    }
}

fn install() {
    #[cfg(not(any(miri, evfd_loom)))]
    {
        static INSTALL: Once = Once::new();
        INSTALL.call_once(handlers::register);
    }
}

/// The current epoch, for an object being made. Installs the handlers on first use.
pub(crate) fn epoch() -> u32 {
    install();
    EPOCH.load(Relaxed)
}

/// Whether this process forked since `born` (an [`epoch`] value): the object is the
/// child's copy of a parent's object.
#[inline]
pub(crate) fn forked(born: u32) -> bool {
    EPOCH.load(Relaxed) != born
}

/// `Ok`, or the fork refusal for a `what` made in epoch `born` (see [`forked`]).
#[inline]
pub(crate) fn check(born: u32, what: &str) -> std::io::Result<()> {
    if forked(born) {
        return Err(refused(what));
    }
    Ok(())
}

/// The error every refused operation returns.
#[cold]
fn refused(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!(
            "this {what} was created before fork(): its in-memory state is the parent's, \
             so a child process cannot use it (create a new one in the child, or share a \
             KernelNotifier)"
        ),
    )
}
