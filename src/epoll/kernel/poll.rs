//! [`KernelPoll`]: an `Epoll`'s kernel epoll, the source of its kernel item
//! ([`SourceCore::Kernel`](crate::epoll::source::SourceCore)). It names nothing of
//! `source.rs` (which names it), and nothing of the in-memory epoll: its state is the fd
//! and the flags of invariant W (`super`).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Mutex, PoisonError, Weak};

use crate::events::Events;
use crate::loom::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use crate::sys;

/// The kernel epoll of an `Epoll`: the source of its kernel item.
pub(crate) struct KernelPoll {
    pub(crate) id: u64,
    pub(crate) kfd: OwnedFd,
    /// Armed in the watcher and not fired yet (invariant W).
    pub(super) armed: AtomicBool,
    /// Watched edge-triggered for good: set once a poller (an outer epoll's item, an fd
    /// view) watches this epoll, so that every wake of `kfd` reaches the pollers, as every
    /// wake of a nested kernel epoll reaches its outer ones.
    pub(super) et: AtomicBool,
    /// Kernel fds registered (tokens in `Fds`). Written under `registry`.
    pub(super) nfds: AtomicUsize,
    /// The generation of the registrations' shape for the reactor route (`reactor`,
    /// "Direct registration"): moved under `registry` whenever `Fds::one` starts or stops
    /// naming an eventfd, or names another.
    pub(super) shape: AtomicU64,
    /// Serialises this kernel epoll's arms in the watcher (`watcher::arm`): a one-shot arm
    /// and an edge-triggered one never interleave their `MOD`/`ADD`, so the last one to
    /// run decides the registration, and a one-shot arm after an edge-triggered one is
    /// skipped. Taken with no crate lock held; under it only the watcher's own locks
    /// (`super`'s LOCKING block). std's: the watcher is not part of the loom models.
    pub(super) arming: std::sync::Mutex<()>,
    /// The eventfd of the one registration while the registrations have the "One eventfd"
    /// shape (`fds`), whose readiness is then `kfd`'s ([`readiness`](Self::readiness)).
    /// Written under `registry` with the shape (`fds::publish_shape`). Leaf (std), held
    /// only to clone the `Weak`.
    pub(super) one: Mutex<Option<Weak<crate::sys::fd::Fd>>>,
    /// Whether that eventfd may be out of `kfd`, and whether anyone but the reactor route
    /// relies on `kfd` (`fds`, "Parked").
    pub(super) park: Park,
}

/// The lock-free half of "Parked" (`fds`): the reactor route takes the one eventfd out of
/// `kfd` ([`try_park`](Self::try_park), then `EPOLL_CTL_DEL`, both under `registry`) only
/// while nobody else relies on `kfd` to hear it; whoever is about to rely on it (a kernel
/// sleep, the watcher's arm) first calls [`rely`](Self::rely), and if that says the
/// eventfd may be out, puts it back under `registry` (`fds::unpark`).
///
/// A Dekker pair, SeqCst on both sides: `try_park` stores `parked` and then loads `used`;
/// `rely` stores `used` (once, for good) and then loads `parked`. Either the parker sees
/// `used` (and parks nothing), or the looker sees `parked` (and takes `registry`, which
/// the parker holds from its store to the end of its `DEL`, so it finds the eventfd
/// parked and puts it back before it relies on `kfd`). loom: `tests::loom_park`.
#[derive(Debug, Default)]
pub(crate) struct Park {
    /// Set (under `registry`) from just before the eventfd leaves `kfd` until it is back.
    parked: AtomicBool,
    /// Sticky: something other than the reactor route has relied on `kfd`.
    used: AtomicBool,
}

impl Park {
    /// A looker is about to rely on `kfd`: `true` if the one eventfd may be out of it, and
    /// the caller must put it back under `registry` before relying on `kfd`. Two loads
    /// after the first call.
    #[inline]
    pub(crate) fn rely(&self) -> bool {
        if !self.used.load(SeqCst) {
            self.used.store(true, SeqCst);
        }
        // (A load that finds `used` set, by another looker, pairs with the parker all the
        // same: the SeqCst order puts that looker's store before this load.)
        crate::loom::dekker_fence();
        self.parked.load(SeqCst)
    }

    /// Under `registry`: may the eventfd leave `kfd` now? `true`: `parked` is set and
    /// nobody relies on `kfd`; the caller then deletes it from `kfd` (and calls
    /// [`unparked`](Self::unparked) if that fails).
    pub(crate) fn try_park(&self) -> bool {
        self.parked.store(true, SeqCst);
        crate::loom::dekker_fence();
        if self.used.load(SeqCst) {
            self.parked.store(false, SeqCst);
            return false;
        }
        true
    }

    /// Under `registry`: the eventfd is back in `kfd` (or left the registrations).
    pub(crate) fn unparked(&self) {
        self.parked.store(false, SeqCst);
    }
}

impl KernelPoll {
    /// A new kernel epoll, nothing registered, nothing armed.
    pub(super) fn new() -> std::io::Result<KernelPoll> {
        Ok(KernelPoll {
            id: crate::events::next_id(),
            kfd: sys::epoll::create()?,
            armed: AtomicBool::new(false),
            et: AtomicBool::new(false),
            nfds: AtomicUsize::new(0),
            shape: AtomicU64::new(0),
            arming: std::sync::Mutex::new(()),
            one: Mutex::new(None),
            park: Park::default(),
        })
    }

    /// `IN` if some registered kernel fd is ready (a poll of `kfd`: consumes nothing, as
    /// polling a nested kernel epoll does not).
    ///
    /// In the "One eventfd" shape (`fds`) it is a poll of that eventfd instead, which is what
    /// the kernel's poll of `kfd` would report for it: `kfd` also holds the direct bell
    /// (`sleep`), registered edge-triggered and never read, and a ring that lands after its
    /// sleeper woke leaves the bell's edge queued in `kfd` until an `epoll_wait` on `kfd`
    /// takes it — which that shape's harvest, reading the eventfd instead, never makes. A
    /// poll of `kfd` would count that edge as a ready kernel fd for as long as it stays
    /// (an outer epoll would then see this one ready with nothing to harvest, wait after
    /// wait).
    pub(crate) fn readiness(&self) -> Events {
        let one = self
            .one
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .and_then(Weak::upgrade);
        let r = match &one {
            // The count memory keeps (`sys::mem_count`), or the eventfd's.
            Some(efd) => match efd.mem_peek() {
                Some(c) => Ok(crate::mode::readiness(c)),
                None => sys::poll_now(efd.as_fd(), Events::IN),
            },
            None => sys::poll_now(self.kfd.as_fd(), Events::IN),
        };
        match r {
            Ok(e) if e.contains(Events::IN) => Events::IN,
            _ => Events::empty(),
        }
    }

    /// The watcher fired (or could not arm): clear `armed`; whether it was set.
    pub(crate) fn disarm(&self) -> bool {
        self.armed.swap(false, SeqCst)
    }

    /// Watched edge-triggered (never disarmed).
    pub(crate) fn is_et(&self) -> bool {
        self.et.load(SeqCst)
    }

    pub(crate) fn has_fds(&self) -> bool {
        self.nfds.load(SeqCst) > 0
    }
}

impl Drop for KernelPoll {
    fn drop(&mut self) {
        super::watcher::forget(
            self.id,
            usize::from(self.armed.load(SeqCst)) + usize::from(self.et.load(SeqCst)),
        );
    }
}
