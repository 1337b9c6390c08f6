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
//! # One eventfd
//!
//! While the kernel epoll holds exactly one registration and it is an AutoReset
//! `KernelNotifier` registered for `IN` (level- or edge-triggered, without `ONESHOT` or
//! `EXCLUSIVE`), a collect does not ask the kernel epoll: it makes the delivery's own
//! reset, the eventfd's `read(2)` ([`Fds::one`]). What the kernel epoll would report and
//! what that read decides are the same: the kernel reports `IN` for such an item only
//! while the count is non-zero (it polls the eventfd at `epoll_wait`), and the delivery
//! delivers `IN` only if its read took a count, which it does exactly when the count is
//! non-zero; a read that finds it empty (another consumer reset it first, or no write
//! came) is no event either way, and `ERR` (a count of 2^64 − 1, which only the kernel's
//! own signalling can reach) is added as the kernel adds it. Edge-triggered: each write
//! is a wake of the eventfd, and the one read that takes its count delivers it once, as
//! the kernel's edge does. The item stays on the kernel epoll's ready list (nobody takes
//! it off with an `epoll_wait`); the next poll of the kernel epoll (a sleep's
//! `epoll_wait`, the watcher's arm, the reactor's scan, a readiness check) finds the
//! count empty and drops it, as it drops any item the kernel queued that is no longer
//! ready. A wake path saves one `epoll_wait` per harvest. When nothing else can have an
//! event (no closed source to purge, nothing queued in memory, no nested epoll), the whole
//! harvest is that read under `registry` ([`harvest_one`]): a direct sleep's one event and
//! the reactor route's delivering harvest take no scan frame, token map, kernel side or
//! wake batch, each of which would find nothing; the same lock is held for the same
//! decisions, so no new interleaving arises. (An AutoReset `KernelNotifier`
//! adopted from an `EFD_SEMAPHORE` eventfd on a kernel that does not show the flag, before
//! 6.4, which adoption cannot refuse there, takes one unit per read: the kernel epoll
//! would keep reporting it while units are left, and this read reports them one per
//! harvest too, but "Drained" below takes it as emptied, so a task of the reactor route
//! may wait for the next write to hear of the units left.)
//!
//! # Parked
//!
//! In that shape, while the reactor route waits on a registration of the eventfd itself
//! (`reactor`, "Direct registration": a duplicate in tokio's epoll), nothing reads `kfd` for
//! it: the route's collect is the eventfd's read, and `readiness` polls the eventfd. Yet as
//! long as `kfd` holds it, every `write(2)` of the eventfd (by evfd or by any peer) runs
//! two epoll callbacks, `kfd`'s and the reactor's, and every `read(2)` two more (the read
//! wakes the eventfd's wait queue for `OUT`, and each epoll's callback takes its lock
//! before it looks at the mask): ~100 cycles each on this machine's warm caches, more
//! after a sleep (docs/handoff.md). So once the route has made such a registration, it
//! *parks* the eventfd: `EPOLL_CTL_DEL` from `kfd`, under `registry`, with `parked` set
//! ([`park`]). The registration stays ours: `len` counts it, `delete` removes it without a
//! kernel call, `add` and `modify` put it back first (the kernel then decides them as
//! before: `EEXIST`, the new mask), and so does a `KernelNotifier`'s drop.
//!
//! Whoever would rely on `kfd` to hear the eventfd — a kernel sleep of a blocked `wait`,
//! the watcher's arm for a task of another executor, an outer epoll or an fd view — puts
//! it back first ([`rely`]; the lock-free half is `KernelPoll::park`, a Dekker pair with
//! the parker), and from then on the route parks nothing on this epoll: a program that
//! waits both ways keeps `kfd` as it was. The eventfd's readiness is not lost meanwhile:
//! `EPOLL_CTL_ADD` polls the fd and queues it if it is ready (and wakes `kfd`'s sleepers
//! and pollers), as any add does.
//!
//! # Drained
//!
//! A collect also tells whether it left the kernel epoll with nothing to report
//! ([`Collector::drained`]): it asked with a free slot to spare (the kernel returned
//! everything ready), and each item it returned is edge-triggered, one-shot, or an
//! AutoReset eventfd registered for `IN` alone whose reset just emptied it (as above). A
//! wake of the kernel epoll after that (any later event) is a new edge. The reactor route
//! (`reactor`) clears its readiness on that proof, so the wait after a delivery does not
//! look at the kernel epoll again.
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
use crate::sys::fd::Fd;
use crate::wait_queue::{PostWake, WakeBatch};

/// A registered kernel fd.
struct KItem {
    num: RawFd,
    data: u64,
    /// The owner's own delivery rule (`KernelDeliver`: an AutoReset `KernelNotifier`'s
    /// eventfd read, a pipe consumer's drain): every event of this item goes through it.
    reset: Option<Weak<dyn KernelDeliver>>,
    /// An AutoReset `KernelNotifier`'s eventfd ("One eventfd"), held weakly as `reset` is.
    efd: Option<Weak<Fd>>,
    /// The registered events (`add`, `modify`).
    events: Events,
}

impl KItem {
    /// Its collect may be its eventfd's read ("One eventfd"): `IN`, with `ET` or not.
    fn eventfd_in(&self) -> bool {
        self.efd.is_some() && self.events.difference(Events::ET) == Events::IN
    }

    /// Once its event is delivered it has nothing more to report until its next wake
    /// ("Drained"): edge-triggered, one-shot, or reset by the delivery.
    fn drains(&self) -> bool {
        self.events.intersects(Events::ET | Events::ONESHOT) || self.eventfd_in()
    }
}

/// The one registration of a kernel epoll that a collect reads itself ("One eventfd").
///
/// It holds the eventfd strongly: a wake's collect then reads it with no `Weak` upgrade
/// (two RMWs, and a line of its own, cold after a sleep). That keeps nothing open past
/// its time: the owner's drop (and `From<KernelNotifier> for OwnedFd`, which drops the
/// registrations before it takes the fd back) removes the registration under `registry`
/// first, and this with it.
#[derive(Clone)]
pub(crate) struct One {
    efd: Arc<Fd>,
    /// Its token: a direct sleep's event for it is `(_, token)` ([`harvest_one`]).
    token: u64,
    /// (Read by the Linux collect: only a `KernelNotifier` makes a `One`.)
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    data: u64,
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
    /// The one registration a collect reads itself ("One eventfd"), kept in step with
    /// `items` by every change of it.
    one: Option<One>,
    /// Moved whenever `one` starts or stops naming an eventfd, or names another: the
    /// shape's generation (`KernelPoll::shape`).
    shape: u64,
    /// `one`'s eventfd is out of `kfd` ("Parked"); only ever set while `one` is.
    parked: bool,
    /// The shape for which the reactor route made a registration of the eventfd itself
    /// ("Parked"): while `shape` equals it, the eventfd may be parked.
    direct: Option<u64>,
}

impl Fds {
    fn insert(&mut self, token: u64, item: KItem) {
        self.by_num.entry(item.num).or_default().push(token);
        self.items.insert(token, item);
        self.find_one();
    }

    fn remove(&mut self, token: u64) -> Option<KItem> {
        let item = self.items.remove(&token)?;
        if let Some(v) = self.by_num.get_mut(&item.num) {
            v.retain(|&t| t != token);
            if v.is_empty() {
                self.by_num.remove(&item.num);
            }
        }
        self.find_one();
        Some(item)
    }

    /// `one` after a change of `items`, and `shape` if `one` names another eventfd (or
    /// none, or one where it named none).
    fn find_one(&mut self) {
        let mut it = self.items.iter();
        let one = match (it.next(), it.next()) {
            (Some((&token, i)), None) if i.eventfd_in() => {
                i.efd.as_ref().and_then(Weak::upgrade).map(|efd| One {
                    efd,
                    token,
                    data: i.data,
                })
            }
            _ => None,
        };
        let same = match (&self.one, &one) {
            (Some(a), Some(b)) => Arc::ptr_eq(&a.efd, &b.efd),
            (None, None) => true,
            _ => false,
        };
        if !same {
            self.shape += 1;
        }
        self.one = one;
    }

    /// The shape's generation and the one eventfd ("One eventfd"), if any: what the
    /// reactor route registers (`reactor`, "Direct registration").
    #[cfg_attr(
        not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))),
        allow(dead_code)
    )]
    pub(super) fn shape(&self) -> (u64, Option<Weak<Fd>>) {
        (
            self.shape,
            self.one.as_ref().map(|o| Arc::downgrade(&o.efd)),
        )
    }

    /// Whether `token` is the parked eventfd's registration, which is then no longer
    /// parked (it is leaving: `delete`, a `KernelNotifier`'s drop). Its `kfd` item is
    /// already gone, so no `EPOLL_CTL_DEL` is due.
    fn leave_parked(&mut self, token: u64, side: &Side) -> bool {
        if !self.parked || self.one.as_ref().map(|o| o.token) != Some(token) {
            return false;
        }
        self.parked = false;
        side.poll.park.unparked();
        true
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
        let mut moved = false;
        let r = with_registry(ep, |reg, batch| {
            let (side, created) = match self.side() {
                Some(s) => (s, false),
                None => {
                    sys::epoll::check_open(k.fd)?;
                    (Arc::new(KernelSide::new_side(ep)?), true)
                }
            };
            // The kernel decides the add against what `kfd` holds ("Parked").
            unpark(&mut reg.kernel, &side)?;
            let token = crate::events::next_id();
            let kevents = match k.owner {
                Some(o) => o.kernel_events(events)?,
                None => events,
            };
            if let Err(e) = sys::epoll::add(side.poll.kfd.as_fd(), k.fd, kevents, token) {
                // Nothing changed: the eventfd goes out again.
                repark(&mut reg.kernel, &side);
                return Err(e);
            }
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
                    efd: if k.eventfd {
                        k.owner.map(|o| o.fd_weak())
                    } else {
                        None
                    },
                    events,
                },
            );
            if let Some(o) = k.owner {
                o.record(Arc::downgrade(ep) as Weak<dyn KernelFdSet>, token);
            }
            if reused {
                prune(fds, &side);
            }
            settle(fds, &side);
            moved = publish_shape(fds, &side);
            self.changed(ep, &mut reg.kernel, &side, batch);
            Ok(())
        });
        if moved {
            wake_shape(ep);
        }
        r
    }

    /// `modify` of a kernel fd (`EPOLL_CTL_MOD`), on the number's current registration.
    pub(super) fn modify(
        &self,
        ep: &EpInner,
        k: KernelRef<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        let mut moved = false;
        let r = with_registry(ep, |reg, batch| {
            let Some(side) = self.side() else {
                return Err(probe(k.fd, |ep| sys::epoll::modify(ep, k.fd, events, 0)));
            };
            let kfd = side.poll.kfd.as_fd();
            let Some(token) = reg.kernel.newest(k.fd.as_raw_fd()) else {
                // Not ours: the kernel says why (EBADF, EPERM, EINVAL, ENOENT); it cannot
                // succeed, since every item of `kfd` has a token.
                return Err(probe(k.fd, |ep| sys::epoll::modify(ep, k.fd, events, 0)));
            };
            unpark(&mut reg.kernel, &side)?;
            let kevents = match k.owner {
                Some(o) => o.kernel_events(events)?,
                None => events,
            };
            let r = sys::epoll::modify(kfd, k.fd, kevents, token);
            if r.is_ok() {
                if let Some(i) = reg.kernel.items.get_mut(&token) {
                    i.data = data;
                    i.events = events;
                }
                reg.kernel.find_one();
                settle(&reg.kernel, &side);
            }
            // The same shape (a failed modify, or one that keeps the eventfd's shape):
            // out again. (`changed` below arms the watcher only if someone waits for it,
            // which relied on `kfd` already.)
            repark(&mut reg.kernel, &side);
            r?;
            moved = publish_shape(&reg.kernel, &side);
            self.changed(ep, &mut reg.kernel, &side, batch);
            Ok(())
        });
        if moved {
            wake_shape(ep);
        }
        r
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
        if !reg.kernel.leave_parked(token, &side) {
            sys::epoll::delete(side.poll.kfd.as_fd(), k.fd)?;
        }
        reg.kernel.remove(token);
        let moved = publish_shape(&reg.kernel, &side);
        if let Some(o) = k.owner {
            o.forget(token);
        }
        drop(reg);
        if moved {
            wake_shape(ep);
        }
        Ok(())
    }

    /// Kernel fds the kernel still holds (for `len()`), pruning the others. Must be called
    /// with `registry` held.
    pub(crate) fn len(&self, reg: &mut Fds) -> usize {
        match self.side() {
            Some(side) if reg.len() > 0 => {
                prune(reg, &side);
                // No wake even if the shape moved: a prune drops only tokens of closed
                // files, never a live `KernelNotifier`'s (it holds its file open), so it
                // can make `one` name an eventfd, never stop naming one; a task on a
                // registration of `kfd` hears every shape.
                publish_shape(reg, &side);
                reg.len()
            }
            _ => 0,
        }
    }
}

/// The reactor route made a registration of the one eventfd for shape `shape` (`reactor`,
/// "Direct registration"): from now on, while the shape stays, the eventfd is out of `kfd`
/// ("Parked") unless someone relies on `kfd`. Takes `registry`.
#[cfg_attr(
    not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))),
    allow(dead_code)
)]
pub(super) fn park(ep: &EpInner, side: &Side, shape: u64) {
    let mut reg = crate::loom::lock(&ep.registry);
    let fds = &mut reg.kernel;
    if fds.shape == shape {
        fds.direct = Some(shape);
        repark(fds, side);
    }
}

/// Take the one eventfd out of `kfd` if the reactor route hears it itself (a registration
/// of the current shape was made: `direct`), it is not out already, and nobody relies on
/// `kfd` (`KernelPoll::park`). A failed `DEL` leaves it in. Must be called with
/// `registry` held.
fn repark(fds: &mut Fds, side: &Side) {
    if fds.parked || fds.direct != Some(fds.shape) {
        return;
    }
    let Some(efd) = fds.one.as_ref().map(|o| Arc::clone(&o.efd)) else {
        return;
    };
    if !side.poll.park.try_park() {
        return;
    }
    if sys::epoll::delete(side.poll.kfd.as_fd(), efd.as_fd()).is_ok() {
        fds.parked = true;
    } else {
        side.poll.park.unparked();
    }
}

/// Someone is about to rely on `kfd` to hear every registered fd (a kernel sleep, the
/// watcher's arm): put a parked eventfd back first ("Parked"), and keep the reactor route
/// from parking it again. Two loads once the eventfd is in for good. An error (the
/// kernel's `EPOLL_CTL_ADD` failed: no memory, `max_user_watches`) leaves it out: the
/// caller must not rely on `kfd` this time.
#[inline]
pub(super) fn rely(ep: &EpInner, side: &Side) -> io::Result<()> {
    if !side.poll.park.rely() {
        return Ok(());
    }
    let mut reg = crate::loom::lock(&ep.registry);
    unpark(&mut reg.kernel, side)
}

/// Put a parked eventfd back into `kfd` ("Parked"), with its token and events, as its
/// registration made it. Must be called with `registry` held.
pub(super) fn unpark(fds: &mut Fds, side: &Side) -> io::Result<()> {
    if !fds.parked {
        return Ok(());
    }
    let back = fds.one.as_ref().and_then(|o| {
        let events = fds.items.get(&o.token)?.events;
        Some((Arc::clone(&o.efd), events, o.token))
    });
    if let Some((efd, events, token)) = back {
        let events = efd.kernel_events(events);
        match sys::epoll::add(side.poll.kfd.as_fd(), efd.as_fd(), events, token) {
            Ok(()) => {}
            // In already: nothing but this epoll's own calls under `registry` moves it,
            // but the kernel's word is the one that counts.
            Err(e) if e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) => {}
            Err(e) => return Err(e),
        }
    }
    fds.parked = false;
    side.poll.park.unparked();
    Ok(())
}

/// After a change of `fds` (with `registry` held): publish how many it holds, its
/// shape's generation and its one eventfd, if any (`KernelPoll::readiness`), to `side`.
/// Whether the generation moved: the caller then wakes the reactor route's tasks
/// ([`wake_shape`]) once it has released `registry`.
fn publish_shape(fds: &Fds, side: &Side) -> bool {
    side.poll.nfds.store(fds.len(), SeqCst);
    *side
        .poll
        .one
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner) =
        fds.one.as_ref().map(|o| Arc::downgrade(&o.efd));
    side.poll.shape.swap(fds.shape, SeqCst) != fds.shape
}

/// The shape's generation moved: wake every task of the reactor route (and every kernel
/// sleeper: the wake's key is theirs too, a spurious wake for them), so that a task that
/// waits on a registration of the old shape chooses again (`reactor`, "Direct
/// registration"), and drop the kept registrations of the old shape, so that a duplicate
/// of an eventfd deleted (or closed) does not outlive its registration here. Runs wakers
/// and tokio code: never with a crate lock held.
fn wake_shape(ep: &EpInner) {
    ep.waiters.wake(crate::epoll::KEY_KSLEEP, usize::MAX);
    ep.kernel.wake_bare_task();
    ep.kernel.drop_stale_reactors();
}

/// Drop tokens whose file the kernel no longer holds (closed). Must be called with
/// `registry` held.
fn prune(reg: &mut Fds, side: &Side) {
    let Ok(live) = sys::epoll::fdinfo_data(side.poll.kfd.as_fd()) else {
        return;
    };
    // The parked eventfd is not in `kfd`, and alive: its owner's drop removes it.
    let parked = reg.one.as_ref().filter(|_| reg.parked).map(|o| o.token);
    let dead: Vec<u64> = reg
        .items
        .keys()
        .copied()
        .filter(|t| !live.contains(t) && Some(*t) != parked)
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
    /// What its collects proved ("Drained"): `None` before the first.
    drained: Option<bool>,
}

impl Collector {
    pub(super) fn new(side: Option<Arc<Side>>) -> Collector {
        Collector {
            side,
            met: false,
            drained: None,
        }
    }

    /// Whether this harvest collected from the kernel epoll and left it with nothing to
    /// report until its next wake (module docs, "Drained"): `false` if it did not collect.
    pub(crate) fn drained(&self) -> bool {
        self.drained == Some(true)
    }

    /// Record what one collect proved (every collect of the harvest must prove it).
    fn proved(&mut self, drained: bool) {
        self.drained = Some(self.drained.unwrap_or(true) && drained);
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
            Some(side) => {
                let (n, drained) = collect(reg, side, out);
                self.proved(drained);
                n
            }
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
    /// reactor's readiness is cleared only by a harvest that left `kfd` drained, and every
    /// harvest collects from `kfd` at its end whether or not the item is queued. Skipping
    /// it then spares the harvester a wake of its own entry (and the next harvest a lap of
    /// the list). Returns how many events it collected.
    #[inline]
    pub(crate) fn finish(
        &mut self,
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
        let (k, drained) = collect(reg, side, &mut out[n..]);
        if k > 0 {
            requeue(ep, side, batch);
        }
        self.proved(drained);
        k
    }
}

/// One collect (`Collector::collect`): how many events it delivered into `out`, and
/// whether it left the kernel epoll drained (module docs).
fn collect(reg: &Fds, side: &Side, out: &mut [Event]) -> (usize, bool) {
    if out.is_empty() {
        return (0, false);
    }
    if !side.poll.has_fds() {
        return (0, true);
    }
    if let Some(one) = &reg.one {
        return collect_one(one, out, (!reg.parked).then_some(side));
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
        return (0, false);
    }
    // Drained: the kernel returned everything ready (a slot to spare), and nothing it
    // returned stays ready (the direct bell's token, which is not ours, aside).
    let drained = got.len() < out.len()
        && got.iter().all(|&(_, token)| {
            reg.items
                .get(&token)
                .map_or(token == super::sleep::BELL_TOKEN, KItem::drains)
        });
    (deliver(reg, side, &got, out), drained)
}

/// The harvest of the one-eventfd shape ("One eventfd") when nothing else can have an
/// event: `registry` taken, no closed source to purge, nothing queued in memory (the
/// ready hint, read under `registry` as the general harvest reads it), no nested epoll to
/// look at, and the kernel epoll's one registration read by its delivery's own `read`
/// ([`collect_one`]). What the general harvest (`EpInner::harvest_drained`, or
/// `harvest_seeded` after a direct sleep) would do there, without its steps that find
/// nothing: the scan frame, the token map, the owner's `KernelDeliver` behind its `Weak`,
/// the kernel side's lock and `Arc` (taken only for the requeue, when someone listens,
/// `requeue_cold`) and a wake batch. `seed`: the events a direct sleep took from the kernel
/// epoll, which must be the one registration's single event (its token; the read decides
/// what it delivers, as `deliver`'s reset does). Returns `None` where it does not apply
/// (nothing consumed: the caller runs the general harvest), else how many events it
/// delivered (0 or 1) and whether the kernel epoll is drained (module docs, "Drained").
#[inline(always)]
pub(crate) fn harvest_one(
    ep: &EpInner,
    out: &mut [Event],
    seed: Option<&[(Events, u64)]>,
) -> Option<(usize, bool)> {
    let mut batch = None;
    let got = {
        let reg = crate::loom::lock(&ep.registry);
        let one = reg.kernel.one.as_ref()?;
        if out.is_empty()
            || ep.graveyard.pending()
            || ep.ready.hint()
            || !reg.kernel.nested.is_empty()
            || seed.is_some_and(|s| !matches!(s, [(_, t)] if *t == one.token))
        {
            return None;
        }
        // After a sleep's `epoll_wait` (`seed`) the item is off `kfd`'s ready list already;
        // parked, `kfd` does not hold it.
        let side = if seed.is_none() && !reg.kernel.parked && one.efd.mem_kept() {
            ep.kernel.side()
        } else {
            None
        };
        let got = collect_one(one, out, side.as_deref());
        if got.0 > 0 && super::linux::listened(ep) {
            batch = Some(requeue_cold(ep));
        }
        got
    };
    if let Some(b) = batch {
        b.run();
    }
    Some(got)
}

/// [`harvest_one`]'s requeue (someone relies on the kernel item: `requeue`), with the
/// kernel side taken here. Must be called with `registry` held; the returned wakes run
/// once it is released.
#[cold]
#[inline(never)]
fn requeue_cold(ep: &EpInner) -> WakeBatch {
    let mut batch = WakeBatch::new();
    if let Some(side) = ep.kernel.side() {
        requeue(ep, &side, &mut batch);
    }
    batch
}

/// The collect of the one eventfd ("One eventfd"): its delivery's read, without the
/// kernel epoll. Must be called with `registry` held (`one` is the registration's, which
/// only a change under `registry` removes).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[inline(always)]
fn collect_one(one: &One, out: &mut [Event], side: Option<&Side>) -> (usize, bool) {
    if let Some(side) = side.filter(|_| one.efd.mem_kept()) {
        // The count memory keeps (`sys::mem_count`): the eventfd stays readable (its base
        // count), so its edge-triggered item, queued by the last write, would stay on
        // `kfd`'s ready list, and `kfd` read ready, until an `epoll_wait` takes it. Take it
        // here, where the read of a kernel count would have been, and *before* the read of
        // the memory count: a write's `write(2)` of 0 follows its units into memory, so a
        // write whose item this takes has its units in the read below, and a write after
        // this queues the item again. (Taken after the read, the item of a write that
        // landed between the two would go with its units left in memory, and a waiter
        // arming on `kfd` next would sleep through them.)
        take_edges(side);
    }
    let r = sys::eventfd::read_fd(&one.efd);
    match r {
        Ok(count) => {
            out[0] = Event {
                // The kernel's poll of an eventfd: `ERR` at the count it cannot go past.
                events: if count == u64::MAX {
                    Events::IN | Events::ERR
                } else {
                    Events::IN
                },
                data: one.data,
            };
            (1, true)
        }
        // Empty (no write, or another consumer reset it first): no event.
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => (0, true),
        Err(_) => (0, false),
    }
}

/// Only a `KernelNotifier` is an eventfd source (Linux): `one` is never set elsewhere.
#[cfg(not(any(target_os = "linux", target_os = "android")))]
fn collect_one(_one: &One, _out: &mut [Event], _side: Option<&Side>) -> (usize, bool) {
    (0, false)
}

/// Take what is queued on `kfd` in the "One eventfd" shape while memory keeps the count
/// (`sys::mem_count`), which nothing reports: the eventfd's edge-triggered item (a
/// write's, or the base count's that an `EPOLL_CTL_ADD` or `MOD` found), and the direct
/// bell's edge, which is rung again for the slot's holder, as `deliver` does (the ring may
/// have been for it: taken and dropped, it would leave the holder asleep with its entry off
/// `waiters`). Must be called with `registry` held.
fn take_edges(side: &Side) {
    let mut got = Vec::new();
    let _ = sys::epoll::wait(
        side.poll.kfd.as_fd(),
        &mut got,
        4,
        Some(std::time::Instant::now()),
    );
    if got
        .iter()
        .any(|&(_, token)| token == super::sleep::BELL_TOKEN)
    {
        side.direct.ring_holder();
    }
}

/// After an `EPOLL_CTL_ADD` or `MOD` that left `fds` in the "One eventfd" shape with the
/// count in memory: the kernel polled the eventfd and queued its edge-triggered item for
/// the base count, which no write made. Taken at once ([`take_edges`]), so that `kfd`, and
/// through it the watcher and every poller of this epoll (an fd view, an outer epoll), does
/// not report a write that never came; a count memory already holds is the epoll's
/// readiness all the same (`KernelPoll::readiness`, which the caller's `changed` looks
/// at next, after the take: a write whose edge this takes has its units seen there). Not
/// after `unpark`'s `ADD`, whose caller relies on `kfd` with no look at memory after it.
/// Must be called with `registry` held.
fn settle(fds: &Fds, side: &Side) {
    if fds.one.as_ref().is_some_and(|o| o.efd.mem_kept()) && !fds.parked {
        take_edges(side);
    }
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
                side.direct.ring_holder();
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
    // Nobody listens (a SeqCst look, without `ready`): nothing to do, as under it. A waiter
    // or poller that registered before this look is seen by it; one that registers after
    // it finds the item unlinked under `ready` and arms (invariant W).
    if !super::linux::listened(ep) {
        return;
    }
    let post = {
        let mut rd = ep.ready.lock();
        // Under `ready`: a waiter or poller that registers later arms (invariant W).
        if !super::linux::listened(ep) {
            return;
        }
        rd.queue(&side.item) && (ep.has_sleeper() || !ep.pollers.wants_nothing())
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
        let side = self.kernel.side();
        let parked = side
            .as_ref()
            .is_some_and(|side| reg.kernel.leave_parked(token, side));
        if reg.kernel.remove(token).is_none() {
            return;
        }
        let mut moved = false;
        if let Some(side) = side {
            // The fd is still open and registered under this number (unless parked): DEL
            // finds it.
            if !parked {
                let _ = sys::epoll::delete(side.poll.kfd.as_fd(), fd);
            }
            moved = publish_shape(&reg.kernel, &side);
        }
        drop(reg);
        if moved {
            wake_shape(self);
        }
    }
}
