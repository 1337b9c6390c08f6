//! The registrations of an epoll's kernel fds (`Registry::kernel`): tokens, the kernel's
//! `epoll_ctl` for `add`/`modify`/`delete`, `len`, and the harvest's collect
//! ([`Collector`]). Guarded by `EpInner::registry` (`super`'s LOCKING block).
//!
//! # Registrations follow the kernel
//!
//! The kernel keys an item by (open file, fd number). Ours are keyed by a token that is the
//! kernel event's data (unique per registration), indexed by fd number. `add` is the
//! kernel's `EPOLL_CTL_ADD` with a new token, so `EEXIST` and a new file on a reused number
//! next to a stale item (its old file kept open elsewhere) are the kernel's decisions.
//! `modify`/`delete` use the number's *newest* token: a registration of (file, number) can
//! only be made while the number refers to that file, so if the number's current file is
//! registered at all, its registration is the newest under that number; if it is not, the
//! newest token is stale and the kernel answers `ENOENT` — its own answer. Tokens whose
//! file the kernel dropped (closed) are pruned from `/proc/self/fdinfo` by `len()` and by
//! an `add` on a number that has tokens.
//!

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};
use std::sync::{Arc, Weak};

use super::{KernelSide, Side};
use crate::epoll::item::Item;
use crate::epoll::source::sealed::KernelRef;
use crate::epoll::{EpInner, Registry};
use crate::events::{Event, Events};
use crate::loom::sync::atomic::Ordering::SeqCst;
use crate::notifier::registrations::{KernelDeliver, KernelFdSet};
use crate::sys;
use crate::wait_queue::{PostWake, WakeBatch};

/// A registered kernel fd.
struct KItem {
    num: RawFd,
    data: u64,
    /// The owner's own delivery rule (`KernelDeliver`: an AutoReset `KernelNotifier`'s
    /// eventfd read, a pipe consumer's drain): every event of this item goes through it.
    reset: Option<Weak<dyn KernelDeliver>>,
}

/// The hasher of the token map: a token is a registration id (`next_id()`, counted up,
/// never chosen by a user), so a multiplicative hash spreads it as well as SipHash does, at
/// a few instructions instead of ~140 on every kernel event a wait delivers.
#[derive(Default, Clone, Copy)]
struct TokenHash;

impl std::hash::BuildHasher for TokenHash {
    type Hasher = TokenHasher;
    fn build_hasher(&self) -> TokenHasher {
        TokenHasher(0)
    }
}

/// See [`TokenHash`].
struct TokenHasher(u64);

impl std::hash::Hasher for TokenHasher {
    fn finish(&self) -> u64 {
        // Fibonacci hashing: the high bits (which the table's tags use) depend on all bits.
        self.0.wrapping_mul(0x9e37_79b9_7f4a_7c15)
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
    }
    fn write_u64(&mut self, v: u64) {
        self.0 ^= v;
    }
}

/// The kernel fds of one epoll, and its nested epolls' items. Guarded by
/// `EpInner::registry`.
#[derive(Default)]
pub(crate) struct Fds {
    items: HashMap<u64, KItem, TokenHash>,
    by_num: HashMap<RawFd, Vec<u64>>,
    /// Items whose source is an epoll (dead ones are dropped lazily): the harvest's look
    /// at nested kernel fds (`super`, "Nesting").
    pub(super) nested: Vec<Arc<Item>>,
}

impl Fds {
    fn insert(&mut self, token: u64, item: KItem) {
        self.by_num.entry(item.num).or_default().push(token);
        self.items.insert(token, item);
    }

    fn remove(&mut self, token: u64) -> Option<KItem> {
        let item = self.items.remove(&token)?;
        if let Some(v) = self.by_num.get_mut(&item.num) {
            v.retain(|&t| t != token);
            if v.is_empty() {
                self.by_num.remove(&item.num);
            }
        }
        Some(item)
    }

    /// The registration `modify`/`delete` of `num` refer to (module docs): the newest.
    fn newest(&self, num: RawFd) -> Option<u64> {
        self.by_num.get(&num).and_then(|v| v.last().copied())
    }

    fn len(&self) -> usize {
        self.items.len()
    }

    /// An item whose source is an epoll was added: the harvest looks at it ("Nesting").
    pub(crate) fn nest(&mut self, item: &Arc<Item>) {
        self.nested.push(Arc::clone(item));
    }

    /// A nested epoll's item left (deleted, or its epoll closed): drop it from `nested`
    /// too, which would otherwise hold it, and the closed epoll, until a harvest with
    /// kernel fds below prunes it — never, for an epoll with none.
    pub(crate) fn unnest(&mut self, item: &Arc<Item>) {
        self.nested.retain(|i| !Arc::ptr_eq(i, item));
    }
}

fn errno(e: rustix::io::Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// A kernel `add`/`modify`: `f` with `registry` taken and dead items purged; the wakes it
/// defers run after `registry` is released.
fn with_registry(
    ep: &EpInner,
    f: impl FnOnce(&mut Registry, &mut WakeBatch) -> io::Result<()>,
) -> io::Result<()> {
    let mut batch = WakeBatch::new();
    let r = {
        let mut reg = crate::loom::lock(&ep.registry);
        ep.purge(&mut reg);
        f(&mut reg, &mut batch)
    };
    batch.run();
    r
}

impl KernelSide {
    /// `add` of a kernel fd: the kernel's `EPOLL_CTL_ADD` on the kernel epoll, which is
    /// created by the first one that succeeds (a failed `add` leaves nothing behind).
    pub(super) fn add(
        &self,
        ep: &Arc<EpInner>,
        k: KernelRef<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        with_registry(ep, |reg, batch| {
            let (side, created) = match self.side() {
                Some(s) => (s, false),
                None => {
                    sys::epoll::check_open(k.fd)?;
                    (Arc::new(KernelSide::new_side(ep)?), true)
                }
            };
            let token = crate::events::next_id();
            sys::epoll::add(side.poll.kfd.as_fd(), k.fd, events, token)?;
            if created {
                // Published before `changed` looks at the waiters (invariant W).
                self.publish(&side);
            }
            let fds = &mut reg.kernel;
            let num = k.fd.as_raw_fd();
            let reused = fds.by_num.contains_key(&num);
            fds.insert(
                token,
                KItem {
                    num,
                    data,
                    reset: if k.autoreset {
                        k.owner.map(|o| o.reset())
                    } else {
                        None
                    },
                },
            );
            if let Some(o) = k.owner {
                o.record(Arc::downgrade(ep) as Weak<dyn KernelFdSet>, token);
            }
            if reused {
                prune(fds, &side);
            }
            side.poll.nfds.store(fds.len(), SeqCst);
            self.changed(ep, &side, batch);
            Ok(())
        })
    }

    /// `modify` of a kernel fd (`EPOLL_CTL_MOD`), on the number's current registration.
    pub(super) fn modify(
        &self,
        ep: &EpInner,
        k: KernelRef<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        with_registry(ep, |reg, batch| {
            let Some(side) = self.side() else {
                return Err(probe(k.fd, |ep| sys::epoll::modify(ep, k.fd, events, 0)));
            };
            let kfd = side.poll.kfd.as_fd();
            let Some(token) = reg.kernel.newest(k.fd.as_raw_fd()) else {
                // Not ours: the kernel says why (EBADF, EPERM, EINVAL, ENOENT); it cannot
                // succeed, since every item of `kfd` has a token.
                return Err(probe(k.fd, |ep| sys::epoll::modify(ep, k.fd, events, 0)));
            };
            sys::epoll::modify(kfd, k.fd, events, token)?;
            if let Some(i) = reg.kernel.items.get_mut(&token) {
                i.data = data;
            }
            self.changed(ep, &side, batch);
            Ok(())
        })
    }

    /// `delete` of a kernel fd (`EPOLL_CTL_DEL`), of the number's current registration.
    pub(super) fn delete(&self, ep: &EpInner, k: KernelRef<'_>) -> io::Result<()> {
        let mut reg = crate::loom::lock(&ep.registry);
        ep.purge(&mut reg);
        let side = self.side();
        let token = reg.kernel.newest(k.fd.as_raw_fd());
        let (Some(side), Some(token)) = (side, token) else {
            return Err(probe(k.fd, |ep| sys::epoll::delete(ep, k.fd)));
        };
        sys::epoll::delete(side.poll.kfd.as_fd(), k.fd)?;
        reg.kernel.remove(token);
        side.poll.nfds.store(reg.kernel.len(), SeqCst);
        if let Some(o) = k.owner {
            o.forget(token);
        }
        Ok(())
    }

    /// Kernel fds the kernel still holds (for `len()`), pruning the others. Must be called
    /// with `registry` held.
    pub(crate) fn len(&self, reg: &mut Fds) -> usize {
        match self.side() {
            Some(side) if reg.len() > 0 => {
                prune(reg, &side);
                reg.len()
            }
            _ => 0,
        }
    }
}

/// Drop tokens whose file the kernel no longer holds (closed). Must be called with
/// `registry` held.
fn prune(reg: &mut Fds, side: &Side) {
    let Ok(live) = sys::epoll::fdinfo_data(side.poll.kfd.as_fd()) else {
        return;
    };
    let dead: Vec<u64> = reg
        .items
        .keys()
        .copied()
        .filter(|t| !live.contains(t))
        .collect();
    for t in dead {
        reg.remove(t);
    }
    side.poll.nfds.store(reg.len(), SeqCst);
}

/// One harvest's delivery of kernel events (the facade's `collect`): where the harvest
/// meets the kernel item in the ready list ([`collect`](Self::collect)), or, if it does
/// not meet it, after the in-memory events ([`finish`](Self::finish)), so that no kernel
/// event is missed by a harvest. Holds nothing without kernel fds.
pub(crate) struct Collector {
    side: Option<Arc<Side>>,
    /// The harvest met the kernel item.
    met: bool,
}

impl Collector {
    pub(super) fn new(side: Option<Arc<Side>>) -> Collector {
        Collector { side, met: false }
    }

    /// Collect only where the harvest meets the kernel item ([`finish`](Self::finish)
    /// does nothing).
    pub(crate) fn skip_end(&mut self) {
        self.met = true;
    }

    /// Collect kernel events into `out` (never blocks): a non-blocking `epoll_wait` on
    /// `kfd`, mapped through the tokens. An AutoReset `KernelNotifier` is delivered `IN`
    /// only if the read that resets it got the count (so each write is delivered at most
    /// once, whoever else consumes it). Must be called with `registry` held.
    #[inline]
    pub(crate) fn collect(&mut self, reg: &Fds, out: &mut [Event]) -> usize {
        self.met = true;
        match &self.side {
            Some(side) => collect(reg, side, out),
            None => 0,
        }
    }

    /// Deliver the kernel events a direct sleep took from `kfd` (`sleep`) into `out`, and
    /// requeue the kernel item if that delivered any, as [`finish`](Self::finish) does
    /// for its collect. Returns how many it delivered. Must be called with `registry`
    /// held.
    pub(crate) fn seeded(
        &mut self,
        ep: &EpInner,
        reg: &Fds,
        seed: &[(Events, u64)],
        out: &mut [Event],
        batch: &mut WakeBatch,
    ) -> usize {
        let Some(side) = &self.side else {
            return 0;
        };
        let k = deliver(reg, side, seed, out);
        if k > 0 {
            requeue(ep, side, batch);
        }
        k
    }

    /// The end of a harvest that did not meet the kernel item: collect into `out[n..]`
    /// (the slots left), and if that found events, queue the item (level-triggered: more may be
    /// ready), waking as a callback would — if someone relies on it (`listened`). Waiters
    /// that watch `kfd` themselves (threads in a kernel sleep, tasks through a reactor) do
    /// not: `kfd` stays readable while it holds events (a kernel sleep returns at once), a
    /// reactor's readiness is cleared only by a harvest that found `kfd` empty, and every
    /// harvest collects from `kfd` at its end whether or not the item is queued. Skipping
    /// it then spares the harvester a wake of its own entry (and the next harvest a lap of
    /// the list). Returns how many events it collected.
    #[inline]
    pub(crate) fn finish(
        self,
        ep: &EpInner,
        reg: &Fds,
        out: &mut [Event],
        n: usize,
        batch: &mut WakeBatch,
    ) -> usize {
        let Some(side) = &self.side else {
            return 0;
        };
        if self.met || n >= out.len() {
            return 0;
        }
        let k = collect(reg, side, &mut out[n..]);
        if k > 0 {
            requeue(ep, side, batch);
        }
        k
    }
}

fn collect(reg: &Fds, side: &Side, out: &mut [Event]) -> usize {
    if out.is_empty() || !side.poll.has_fds() {
        return 0;
    }
    let mut got = Vec::new();
    // An error (EBADF/EFAULT class, not possible on our own epoll) reports nothing rather
    // than losing the in-memory events already harvested.
    if sys::epoll::wait(
        side.poll.kfd.as_fd(),
        &mut got,
        out.len(),
        Some(std::time::Instant::now()),
    )
    .is_err()
    {
        return 0;
    }
    deliver(reg, side, &got, out)
}

/// Map kernel events taken from `kfd` (by a collect, or by a direct sleep) into `out`
/// through the tokens, running AutoReset resets (`collect`). The direct bell's event
/// taken here by a collect is rung again for the slot's holder (`sleep`, "Direct sleep").
/// Must be called with `registry` held.
fn deliver(reg: &Fds, side: &Side, got: &[(Events, u64)], out: &mut [Event]) -> usize {
    let mut n = 0;
    debug_assert!(got.len() <= out.len());
    for &(mut ev, token) in got {
        let Some(item) = reg.items.get(&token) else {
            if token == super::sleep::BELL_TOKEN {
                side.direct.taken_by_collect();
            }
            continue;
        };
        if let Some(r) = &item.reset {
            // The owner is alive while it is registered (its `Drop` takes `registry`, held
            // here, before it goes).
            ev = r.upgrade().map_or(Events::empty(), |r| r.deliver(ev));
            if ev.is_empty() {
                continue;
            }
        }
        out[n] = Event {
            events: ev,
            data: item.data,
        };
        n += 1;
    }
    n
}

/// `Collector::finish`'s requeue of the kernel item.
fn requeue(ep: &EpInner, side: &Side, batch: &mut WakeBatch) {
    let post = {
        let mut rd = ep.ready.lock();
        // Under `ready`: a waiter or poller that registers later arms (invariant W).
        if !super::linux::listened(ep) {
            return;
        }
        rd.queue(&side.item) && (ep.has_sleeper() || !ep.pollers.interest().is_empty())
    };
    if post {
        batch.push_post(Arc::clone(&side.item.ep) as Arc<dyn PostWake>, Events::IN);
    }
}

/// The kernel's answer for an fd an epoll does not hold: the same `epoll_ctl` on a
/// temporary empty kernel epoll (closed at once), so that a failed call returns exactly the
/// kernel's errno — `EBADF`, `EPERM`, `EINVAL`, else `ENOENT` — and leaves nothing behind.
fn probe(fd: BorrowedFd<'_>, op: impl FnOnce(BorrowedFd<'_>) -> io::Result<()>) -> io::Error {
    if let Err(e) = sys::epoll::check_open(fd) {
        return e;
    }
    match sys::epoll::create() {
        Ok(tmp) => match op(tmp.as_fd()) {
            Err(e) => e,
            Ok(()) => errno(rustix::io::Errno::NOENT),
        },
        Err(e) => e,
    }
}

/// A `KernelNotifier` was dropped: remove its registration `token` while its fd is open.
impl KernelFdSet for EpInner {
    fn forget_kernel_fd(&self, token: u64, fd: BorrowedFd<'_>) {
        if self.forked() {
            // A child's copy of a parent's epoll (`sys::fork`): its kernel epoll is shared
            // with the parent, whose registration a DEL here would remove; and its lock may
            // have been held at the fork. Leave both alone.
            return;
        }
        let mut reg = crate::loom::lock(&self.registry);
        if reg.kernel.remove(token).is_none() {
            return;
        }
        if let Some(side) = self.kernel.side() {
            // The fd is still open and registered under this number: DEL finds it.
            let _ = sys::epoll::delete(side.poll.kfd.as_fd(), fd);
            side.poll.nfds.store(reg.kernel.len(), SeqCst);
        }
    }
}
