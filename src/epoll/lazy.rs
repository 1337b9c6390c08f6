//! [`LazyEpoll`]: an [`Epoll`] that an object keeps for the waits it makes, made by the
//! first wait that needs one and kept until the object is dropped, one per process.
//!
//! The read futures of a notifier object whose wake comes through a kernel fd (a
//! `KernelNotifier`'s, a `ConsumerHalf`'s: `crate::kernel_async`) all wait in one epoll
//! that watches the fd for `IN`: many tasks can wait in one epoll, since its
//! `wait_async` hands a wake on to another waiter while events are still queued. Made
//! once, the epoll costs no `epoll_create1`, `epoll_ctl` or `close` per wait, nor the
//! registration of its kernel epoll with the kernel side (the watcher thread's epoll, the
//! tokio reactor), which is made once per epoll and runtime.
//!
//! # Fork
//!
//! In the process that made the object (its fork epoch, `sys::fork`), the epoll lives in a
//! `OnceLock`: looking at it is one load. A `fork` child has a copy of that `OnceLock`,
//! whose epoll (if the parent made one) is the parent's and refuses to work there
//! (`Epoll::forked`), and which a parent thread may have been setting at the fork (a `set`
//! in the child would then wait for ever for a thread the child does not have). So a child
//! never touches it beyond a look: it keeps its epoll in a slot of its own, a mutex taken
//! only inside a fork guard (`sys::fork::guard`), so never inherited held. A grandchild
//! finds its parent's epoll there refusing too, and replaces it.
//!
//! The epoll is made by the caller's closure (its registrations are the caller's: which
//! fd, which events), outside every lock. Two waits that race to make it both make one;
//! the one stored first is everyone's, and the other is dropped, also outside every lock.
//!
//! LOCKING: one lock, the child's slot (`LazyEpoll::child`), a leaf taken only inside a
//! fork guard and held only to look at the slot or to fill it: no epoll is made, and none
//! dropped, while it or the guard is held (an epoll's close takes the epoll's locks, which
//! no guarded section may take).

use std::io;
use std::sync::{Mutex, MutexGuard, OnceLock, PoisonError};

use super::Epoll;

/// An epoll made at first use and kept, one per process (module docs).
pub(crate) struct LazyEpoll {
    /// The fork epoch the owner was made in (`sys::fork::epoch`).
    born: u32,
    /// The epoll, in the process the owner was made in.
    here: OnceLock<Epoll>,
    /// The epoll of a fork child (or grandchild): taken only inside a fork guard.
    child: Mutex<Option<Epoll>>,
}

impl LazyEpoll {
    /// Nothing made yet: the first [`get_or_make`](Self::get_or_make) makes it.
    pub(crate) fn new() -> LazyEpoll {
        LazyEpoll {
            born: crate::sys::fork::epoch(),
            here: OnceLock::new(),
            child: Mutex::new(None),
        }
    }

    /// This process's epoll: the one kept, or, the first time in this process, the one
    /// `make` returns (with its registrations), which is then kept. A handle of it (an
    /// `Arc`'s clone): the waits hold it while they wait.
    ///
    /// # Errors
    ///
    /// `make`'s error (`EMFILE` when no epoll fd can be made, the registration's errno);
    /// nothing is kept then, and the next call tries again.
    pub(crate) fn get_or_make(
        &self,
        make: impl FnOnce() -> io::Result<Epoll>,
    ) -> io::Result<Epoll> {
        if let Some(ep) = self.here.get().filter(|ep| !ep.inner.forked()) {
            return Ok(ep.clone());
        }
        if !crate::sys::fork::forked(self.born) {
            // A racing first wait may set it first: either epoll will do, and the spare
            // one (`set`'s `Err`) is dropped here, with no lock held.
            let _ = self.here.set(make()?);
            return Ok(self.here.get().expect("set just above").clone());
        }
        // A fork child: its own slot, looked at and filled inside a fork guard.
        let live = |c: &Option<Epoll>| c.as_ref().filter(|ep| !ep.inner.forked()).cloned();
        {
            let _fork = crate::sys::fork::guard();
            if let Some(ep) = live(&self.child()) {
                return Ok(ep);
            }
        }
        let ep = make()?;
        // What leaves the slot (a spare of ours, or a grandparent's copy) is dropped after
        // the guard, as its close takes the epoll's locks.
        let (mine, gone) = {
            let _fork = crate::sys::fork::guard();
            let mut c = self.child();
            match live(&c) {
                Some(theirs) => (theirs, Some(ep)),
                None => (ep.clone(), c.replace(ep)),
            }
        };
        drop(gone);
        Ok(mine)
    }

    /// The child's slot (callers hold a fork guard).
    fn child(&self) -> MutexGuard<'_, Option<Epoll>> {
        self.child.lock().unwrap_or_else(PoisonError::into_inner)
    }
}
