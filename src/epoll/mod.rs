//! The embedded mini-epoll: `epoll(7)` over in-memory sources, kernel-exact.
//!
//! The in-memory epoll is this module with `item`, `ready`, `harvest`, `future`, `source`
//! and `topology`; kernel-fd sources live behind one facade (`kernel`, the field
//! `EpInner::kernel`), which these call at a handful of points and which is one load on
//! each while the epoll never held a kernel fd. `lazy` is an epoll an object keeps for
//! its own waits (`LazyEpoll`), with a lock of its own (its LOCKING line), taken with
//! none of these held.
//!
//! # LOCKING
//!
//! ```text
//! Acquire in this order, never the reverse:
//!   0) topology::TOPOLOGY   global Mutex  epoll→epoll links; only `add`/`delete`/close of
//!                                         an epoll source, and the cycle/depth checks.
//!   1) EpInner::registry    Mutex  (ep->mtx) the interest set. Held by add/modify/delete,
//!                                  by the whole harvest (so harvests and ctl operations are
//!                                  serialised), and by a readiness poll of this epoll.
//!                                  An outer epoll's registry is taken before an inner one's
//!                                  (polling a nested epoll goes downward only).
//!   2) <source>.wq          Mutex  a source's WaitQueue; taken to hook/unhook/re-mask an
//!                                  item, and by the source's wakes (which run Item::wake).
//!   3) EpInner::ready       Mutex  (ep->lock) ready list + overflow list + items' qflags.
//!                                  Taken by Item::wake with (2) held, so nothing may wait
//!                                  for (1) or (2) while holding (3). Never held while a
//!                                  source is polled.
//!   4) EpInner::graveyard,  leaf Mutexes: ids of items whose source closed; topology links;
//!      EpInner::links,      the kernel side's own (see `kernel`'s LOCKING block).
//!      EpInner::kernel
//!   EpInner::waiters    a WaitQueue of threads and tasks only (no callbacks), so a leaf:
//!                       nothing is taken while it is held. Item::wake takes it after
//!                       releasing (3), still under the source's (2), to take one sleeper's
//!                       entry off (the kernel's wake_up(&ep->wq) from ep_poll_callback);
//!                       the unpark or waker runs later, from the WakeBatch. Otherwise it
//!                       is taken with nothing held.
//!   EpInner::pollers    a WaitQueue; Item::wake takes it after releasing (3), still under
//!                       the source's (2), and runs the outer epolls' item callbacks inline
//!                       (kernel order: an outer epoll sees the inner one become ready in
//!                       the middle of the source's wake walk). Chains upward only.
//! ```
//!
//! Foreign code (wakers, unpark) runs only after all of these are released; the harvest
//! hands its `WakeBatch` down to the deliveries and nested polls it makes, so their wakes
//! also wait until `registry` is released. Dropping a source's last handle runs
//! `WaitQueue::detach_all` → `Item::detach`, which takes (4), then (3) on its own to take
//! the item off the ready list (`ReadyState::forget`, as `delete` does under (1)), then,
//! only while an fd view watches the epoll, (3) and `pollers` on their own
//! (`wake_views_if_emptied`). It holds no other lock of this epoll meanwhile, and it runs
//! only from a user's drop of a handle, when no evfd lock is held.
//!
//! An `Item` is referenced by the registry, by its entry in the source's wait queue and by
//! the ready/overflow lists. It holds its epoll strongly; that cycle is broken by
//! `EpInner::close` when the last `Epoll` handle goes.

pub(crate) mod future;
mod harvest;
mod item;
// The kernel side (kernel fds, their kernel epoll, the watcher, the kernel sleep, the
// reactor route), behind one facade: `EpInner::kernel`.
mod kernel;
// An epoll an object keeps for its waits, made by the first (`kernel_async`'s read futures).
#[cfg(evfd_kernel_side)]
mod lazy;
mod ready;
pub(crate) mod source;
mod topology;
#[cfg(evfd_kernel_side)]
pub(crate) use kernel::watcher;
#[cfg(evfd_kernel_side)]
pub(crate) use lazy::LazyEpoll;

#[cfg(all(test, not(evfd_loom)))]
mod tests;

use std::collections::HashMap;
use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::events::{next_id, Event, Events, KEY_EMPTIED};
use crate::loom::sync::atomic::{
    AtomicBool, AtomicU32, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use crate::loom::sync::Mutex;
use crate::wait_queue::list::Key;
use crate::wait_queue::spin::{SpinGauge, SpinPlan, NO_CPU};
use crate::wait_queue::thread::{self, Entry, Parked, Recheck, Sleeper};
use crate::wait_queue::{Callback, PostWake, Target, WaitFor, WaitQueue, WakeBatch};
use harvest::Harvest;
use item::Item;
#[cfg(all(test, evfd_loom))]
pub(crate) use kernel::BareTask;
#[cfg(all(test, evfd_loom, evfd_kernel_side))]
pub(crate) use kernel::Park;
use kernel::{Ctl, KernelSide, KernelSleep};
use ready::Ready;
use source::sealed::{KernelRef, MemRef, SourceRef};
pub use source::Source;
use source::{MemCore, SourceCore};

/// One registration: the item and its entry in the source's wait queue.
struct Reg {
    item: Arc<Item>,
    key: Key,
}

/// Guarded by `EpInner::registry`.
#[derive(Default)]
struct Registry {
    items: HashMap<u64, Reg>,
    /// Kernel-fd sources and nested epolls' items (`kernel`).
    kernel: kernel::Fds,
}

/// Ids of items whose source closed, purged from `registry` by the next operation, with
/// the lock-free mirror "may be non-empty" kept inside its own methods, so that an
/// operation finds nothing to purge without taking the lock.
pub(crate) struct Graveyard {
    /// Written with `ids` locked, read without.
    any: AtomicBool,
    /// (4)
    ids: Mutex<Vec<u64>>,
}

impl Graveyard {
    fn new() -> Graveyard {
        Graveyard {
            any: AtomicBool::new(false),
            ids: Mutex::new(Vec::new()),
        }
    }

    /// The source of item `id` closed (`Item::detach`).
    pub(crate) fn bury(&self, id: u64) {
        let mut g = crate::loom::lock(&self.ids);
        g.push(id);
        self.any.store(true, SeqCst);
    }

    /// Every id buried since the last call (no lock taken if none).
    /// Whether a purge has work (lock-free; a hint for the one-item harvest, which leaves
    /// purging to the next general operation).
    pub(crate) fn pending(&self) -> bool {
        self.any.load(Relaxed)
    }

    fn take(&self) -> Vec<u64> {
        if !self.any.load(SeqCst) {
            return Vec::new();
        }
        let mut g = crate::loom::lock(&self.ids);
        self.any.store(false, SeqCst);
        std::mem::take(&mut *g)
    }
}

/// What `add`/`modify`/`delete` act on, after the checks they share (`EpInner::resolve`).
enum Resolved<'a> {
    /// An in-memory source (a notifier, another epoll).
    Mem(MemCore),
    /// A kernel fd: the kernel side's.
    Kernel(KernelRef<'a>),
}

/// The epoll's state, shared by its handles, its items and outer epolls that watch it.
///
/// Laid out in three groups of whole cache-line pairs (`repr(C)` and zero-sized 128-byte
/// aligned markers), so that a producer's write (which reads the first group and takes
/// the second) and a consumer's harvest (which takes the second and the third) share only
/// the lines they must: the ready lock's.
#[repr(C)]
pub(crate) struct EpInner {
    // Group 1: read by every wake, rarely written.
    pub(crate) id: u64,
    /// The fork epoch it was made in (`sys::fork`): in a child process it is refused.
    pub(crate) born: u32,
    /// Threads and tasks in `wait`: exclusive entries at the head (LIFO).
    pub(crate) waiters: WaitQueue,
    /// Whoever watches this epoll as a source (outer epolls' items, fd views, futures).
    pub(crate) pollers: WaitQueue,
    /// Set by `close`; a closed epoll is skipped by topology walks.
    closed: AtomicBool,
    /// Spin-before-park for `wait`: a fixed budget in nanoseconds (0 = never spin), or
    /// [`SPIN_ADAPTIVE`]: learned by `spin_gauge`.
    spin_ns: AtomicU64,
    /// Group 2 starts here: the ready lock and the flags written with it held.
    _hot: [LinePair; 0],
    /// (3) ready list + overflow list, with their mirrors `scanning` and the ready hint
    /// (`ready::Ready`), in that order.
    pub(crate) ready: Ready,
    /// Group 3 starts here: the harvester's and `ctl`'s own state (no producer's wake
    /// reads it).
    _own: [LinePair; 0],
    /// (1) the interest set, keyed by source id.
    registry: Mutex<Registry>,
    /// (4) ids of items whose source closed, purged from `registry` by the next operation.
    pub(crate) graveyard: Graveyard,
    /// (4) epoll→epoll links, see `topology`.
    pub(crate) links: Mutex<topology::Links>,
    /// The adaptive spin budget (see `wait_queue::SpinGauge`).
    pub(crate) spin_gauge: SpinGauge,
    /// The kernel side (kernel fds, their kernel epoll and kernel item, the routes of their
    /// readiness): the facade of `kernel`, one load on every path while the epoll never
    /// held a kernel fd.
    pub(crate) kernel: KernelSide,
}

/// Zero-sized, 128-byte aligned: in a `repr(C)` struct, the next field starts a new pair
/// of cache lines (the adjacent-line prefetcher moves lines in pairs).
#[repr(align(128))]
pub(crate) struct LinePair;

impl PostWake for EpInner {
    /// After an item was queued: wake one `wait`er (LIFO) and, unless `key` is empty, every
    /// poller with `key`. (The wake callback wakes the pollers itself and posts an empty key.)
    fn post_wake(&self, key: Events) {
        self.wake_one_waiter();
        if !key.is_empty() {
            self.pollers.wake(key, usize::MAX);
        }
    }
}

impl EpInner {
    /// The `set_spin` setting, else the learned budget. Not adaptive while kernel fds are
    /// registered here or below: their readiness reaches the ready hint (the spin's probe)
    /// only through the watcher's hop, so a kernel event must not wait for a spin.
    #[inline]
    fn spin_plan(&self) -> SpinPlan {
        match self.spin_ns.load(Relaxed) {
            SPIN_ADAPTIVE if self.kernel.below() => SpinPlan::Fixed(0),
            SPIN_ADAPTIVE => SpinPlan::Adaptive(self.spin_gauge.budget_ns()),
            ns => SpinPlan::Fixed(ns),
        }
    }

    /// Whether a blocking `wait` would spin before it parks now (its [`spin_plan`]).
    ///
    /// [`spin_plan`]: Self::spin_plan
    #[inline]
    fn will_spin(&self) -> bool {
        !matches!(self.spin_plan(), SpinPlan::Adaptive(0) | SpinPlan::Fixed(0))
    }

    /// After an item was deleted or its source closed: if an fd view watches this epoll and
    /// no live item is queued any more, let it drain its doorbell. No lock may be held.
    pub(crate) fn wake_views_if_emptied(&self) {
        if self.pollers.interest().contains(KEY_EMPTIED) && !self.ready.lock().any_live() {
            self.pollers.wake(KEY_EMPTIED, usize::MAX);
        }
    }
}

/// What the user's handles share; the last one to go closes the epoll.
pub(crate) struct EpHandle {
    pub(crate) core: Arc<EpInner>,
}

impl std::ops::Deref for EpHandle {
    type Target = EpInner;
    fn deref(&self) -> &EpInner {
        &self.core
    }
}

impl Drop for EpHandle {
    fn drop(&mut self) {
        if self.core.forked() {
            // The child's copy of a parent's epoll: take no lock, free nothing (see
            // `notifier::Handle`'s drop).
            std::mem::forget(Arc::clone(&self.core));
            return;
        }
        self.core.close();
    }
}

/// A user-space epoll: an interest set over [`Source`]s ([`Notifier`](crate::Notifier)s and
/// other `Epoll`s), a ready list, and waiters — `epoll(7)` semantics without a syscall.
///
/// Cloning gives another handle to the same epoll. An `Epoll` does not keep its sources
/// alive: a source whose last handle is dropped leaves the interest set silently, like a
/// closed file.
///
/// # Fork
///
/// In-memory: a child process made by `fork` gets a private copy, not a share. In the
/// child, an epoll made before the fork refuses every fallible call with an error of kind
/// [`Unsupported`](std::io::ErrorKind::Unsupported) (the message says it was created
/// before `fork()`); `poll` reports `ERR | HUP` and `len` is 0. It takes no lock (one held
/// by another parent thread at the fork would be held forever) and touches nothing it
/// shares with the parent (its embedded kernel epoll, its fd views' doorbells); dropping it
/// takes no lock and frees nothing. A notifier or epoll made before the fork cannot be
/// added to an epoll made after it either. Kernel-fd sources inherited by the child
/// ([`KernelNotifier`](crate::KernelNotifier)s, borrowed fds) can be watched by an epoll
/// made in the child. Rules and reasons: docs/semantics.md §6.1.
///
/// # Panicking wakers
///
/// Waiters' wakers (`wait_async`, streams) run after every lock is released, in the thread
/// whose call made them due: a source's write, a `wait` whose harvest leaves
/// level-triggered events queued (it wakes the next waiter), an `add`/`modify` of a ready
/// source; an AutoReset delivery in a harvest wakes the notifier's blocked writers the
/// same way. If one panics, the panic unwinds out of that call: a `wait`'s harvest has
/// happened (AutoReset counts reset, `ONESHOT` items disarmed, edge-triggered events
/// consumed) but its events are not reported (level-triggered ones are, at the next
/// wait); every other owed wake still runs; the epoll stays consistent and usable. Rules:
/// docs/semantics.md §6.2.
///
/// # Examples
///
/// ```
/// use evfd::{Epoll, Event, Events, Notifier};
/// let ep = Epoll::new();
/// let a = Notifier::new();
/// let b = Notifier::new();
/// ep.add(&a, Events::IN, 1)?;
/// ep.add(&b, Events::IN | Events::ET, 2)?;
/// b.notify()?;
/// let mut evs = [Event::default(); 8];
/// let n = ep.wait(&mut evs, Some(std::time::Duration::ZERO))?;
/// assert_eq!(&evs[..n], &[Event { events: Events::IN, data: 2 }]);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct Epoll {
    pub(crate) inner: Arc<EpHandle>,
}

impl fmt::Debug for Epoll {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.inner.forked() {
            return f.write_str("Epoll { <created before fork> }");
        }
        f.debug_struct("Epoll")
            .field(
                "registered",
                &crate::loom::lock(&self.inner.registry).items.len(),
            )
            .field("ready", &self.inner.ready.lock().len())
            .finish()
    }
}

impl Default for Epoll {
    fn default() -> Self {
        Epoll::new()
    }
}

/// `EpInner::spin_ns`: learn the spin budget from recent waits.
const SPIN_ADAPTIVE: u64 = u64::MAX;

/// `EINVAL`, for the reason `_why` (kept for the reader: `io::Error` cannot carry both an
/// errno and a message, see `crate::error`).
fn invalid(_why: &'static str) -> io::Error {
    crate::error::invalid()
}

// The other `impl Epoll` blocks: `wait_async` and `stream` in `future` (beside their
// types), and `fd_view` in `crate::fd` (it builds an `FdView`, a type of the layer above).
impl Epoll {
    /// An empty epoll.
    ///
    /// ```
    /// let ep = evfd::Epoll::new();
    /// assert_eq!(ep.len(), 0);
    /// ```
    pub fn new() -> Epoll {
        Epoll {
            inner: Arc::new(EpHandle {
                core: Arc::new(EpInner {
                    id: next_id(),
                    born: crate::sys::fork::epoch(),
                    registry: Mutex::new(Registry::default()),
                    ready: Ready::new(),
                    graveyard: Graveyard::new(),
                    links: Mutex::new(topology::Links::default()),
                    waiters: WaitQueue::new(),
                    pollers: WaitQueue::new(),
                    spin_ns: AtomicU64::new(SPIN_ADAPTIVE),
                    spin_gauge: SpinGauge::new(),
                    closed: AtomicBool::new(false),
                    kernel: KernelSide::new(),
                    _hot: [],
                    _own: [],
                }),
            }),
        }
    }

    /// Number of registered sources: in-memory ones still open, and kernel fds the kernel
    /// still holds (a closed file leaves, as in the kernel; one kept open by another fd
    /// stays).
    ///
    /// ```
    /// let ep = evfd::Epoll::new();
    /// let n = evfd::Notifier::new();
    /// ep.add(&n, evfd::Events::IN, 0).unwrap();
    /// assert_eq!(ep.len(), 1);
    /// drop(n); // a closed source leaves silently
    /// assert_eq!(ep.len(), 0);
    /// ```
    pub fn len(&self) -> usize {
        if self.inner.forked() {
            return 0;
        }
        let mut reg = crate::loom::lock(&self.inner.registry);
        self.inner.purge(&mut reg);
        let reg = &mut *reg;
        reg.items.len() + self.inner.kernel.len(&mut reg.kernel)
    }

    /// Whether nothing is registered.
    ///
    /// ```
    /// assert!(evfd::Epoll::new().is_empty());
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether two handles are the same epoll.
    ///
    /// ```
    /// let ep = evfd::Epoll::new();
    /// assert!(ep.ptr_eq(&ep.clone()));
    /// ```
    pub fn ptr_eq(&self, other: &Epoll) -> bool {
        Arc::ptr_eq(&self.inner.core, &other.inner.core)
    }

    /// How long [`wait`](Self::wait) spins before parking. `None` (the default): learned
    /// from this epoll's recent waits — it spins (up to 50 µs) only while wakes have been
    /// arriving from another CPU within about that time, and not at all while they come
    /// from the waiter's own CPU. `Some(d)`: spin for up to `d` every time (`Duration::ZERO`:
    /// never; at most ~4.3 s). A blocking cross-CPU wake costs ~25 µs on small VMs; a waiter
    /// that spins catches a wake that comes soon without that cost, and its waker makes no
    /// syscall. The spin never outlasts a `wait`'s timeout: with a timeout shorter than the
    /// spin, the wait spins until the timeout and returns.
    ///
    /// ```
    /// use std::time::{Duration, Instant};
    /// let ep = evfd::Epoll::new();
    /// ep.set_spin(Some(Duration::from_micros(50)));
    /// assert_eq!(ep.spin(), Some(Duration::from_micros(50)));
    /// ep.set_spin(Some(Duration::ZERO)); // never spin
    /// assert_eq!(ep.spin(), Some(Duration::ZERO));
    /// ep.set_spin(Some(Duration::from_secs(60)));
    /// let t0 = Instant::now();
    /// let mut evs = [evfd::Event::default(); 1];
    /// assert_eq!(ep.wait(&mut evs, Some(Duration::from_millis(1)))?, 0);
    /// assert!(t0.elapsed() < Duration::from_secs(30)); // not the 60 s spin
    /// ep.set_spin(None);
    /// assert_eq!(ep.spin(), None);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn set_spin(&self, spin: Option<Duration>) {
        let ns = spin.map_or(SPIN_ADAPTIVE, |d| {
            u64::try_from(d.as_nanos())
                .unwrap_or(u64::MAX - 1)
                .min(u64::MAX - 1)
        });
        self.inner.spin_ns.store(ns, SeqCst);
    }

    /// The spin-before-park setting: `None` = adaptive (the default).
    ///
    /// ```
    /// assert_eq!(evfd::Epoll::new().spin(), None);
    /// ```
    pub fn spin(&self) -> Option<Duration> {
        match self.inner.spin_ns.load(SeqCst) {
            SPIN_ADAPTIVE => None,
            ns => Some(Duration::from_nanos(ns)),
        }
    }

    /// Register `src` with interest `events` and `data` (`EPOLL_CTL_ADD`).
    ///
    /// `ERR` and `HUP` are always added; undefined bits are stored as given. The source is
    /// polled at once and queued if ready — edge-triggered items too.
    ///
    /// # Errors
    ///
    /// The kernel's errnos, in the kernel's order: `EINVAL` (`InvalidInput`) if `src` is this
    /// epoll, or for `EXCLUSIVE` on an epoll source or with any bit outside
    /// [`Events::EXCLUSIVE_OK`] (`ONESHOT`, `PRI`, `RDHUP`, …); `ELOOP` (`FilesystemLoop`)
    /// if it would create a cycle of epolls or a chain of more than 5; `EEXIST`
    /// (`AlreadyExists`) if `src` is registered. `Unsupported` for an epoll or source made
    /// before a `fork`, in the child. Nothing changes on error.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Epoll, Events, Notifier};
    /// let ep = Epoll::new();
    /// let n = Notifier::new();
    /// ep.add(&n, Events::IN, 7)?;
    /// assert_eq!(ep.add(&n, Events::IN, 7).unwrap_err().kind(), std::io::ErrorKind::AlreadyExists);
    /// assert_eq!(ep.add(&n, Events::IN, 7).unwrap_err().raw_os_error(), Some(libc::EEXIST));
    /// assert_eq!(ep.add(&ep, Events::IN, 0).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(alias = "epoll_ctl")]
    pub fn add(&self, src: &(impl Source + ?Sized), events: Events, data: u64) -> io::Result<()> {
        let ep = &self.inner.core;
        let sc = match ep.resolve(src)? {
            Resolved::Mem(sc) => sc,
            Resolved::Kernel(k) => return ep.kernel.ctl(ep, Ctl::Add(events, data), k),
        };
        if events.contains(Events::EXCLUSIVE) {
            if sc.as_epoll().is_some() {
                return Err(invalid("EXCLUSIVE cannot be used on an epoll source"));
            }
            if !(events & !Events::EXCLUSIVE_OK).is_empty() {
                return Err(invalid(
                    "EXCLUSIVE allows only IN, OUT, ERR, HUP, WAKEUP and ET (not ONESHOT, PRI, RDHUP, ...)",
                ));
            }
        }
        // Before the source can queue (a bare kernel sleep or task would not hear it), and
        // before any lock (it may wake a task).
        ep.kernel.memory_added();
        let topo = sc.as_epoll().map(|_| topology::lock());
        if let Some(child) = sc.as_epoll() {
            topology::check_add(ep, child)?;
        }
        let mut batch = WakeBatch::new();
        {
            let mut reg = crate::loom::lock(&ep.registry);
            ep.purge(&mut reg);
            if reg.items.contains_key(&sc.id()) {
                return Err(crate::error::exists());
            }
            let ev = events | Events::ERR | Events::HUP;
            let exclusive = ev.contains(Events::EXCLUSIVE);
            let src = SourceCore::from(sc.clone());
            let item = Arc::new_cyclic(|me| Item {
                me: me.clone(),
                ep: Arc::clone(ep),
                state: Item::state_for(&src, ev),
                src,
                events: AtomicU32::new(ev.bits()),
                data: AtomicU64::new(data),
                linked: AtomicBool::new(false),
                ovf: AtomicBool::new(false),
            });
            // Non-exclusive entries at the head, exclusive ones at the tail (as the kernel).
            let key = sc.wait_queue().add(
                ev & !Events::PRIVATE,
                exclusive,
                !exclusive,
                Target::Callback(Arc::clone(&item) as Arc<dyn Callback>),
            );
            reg.items.insert(
                sc.id(),
                Reg {
                    item: Arc::clone(&item),
                    key,
                },
            );
            if let Some(child) = sc.as_epoll() {
                // The child gained a poller: its items may no longer coalesce.
                child.unsettle_sources();
                topology::link(ep, child);
                reg.kernel.nest(&item);
                if child.kernel.below() {
                    ep.kernel.mark_below(ep);
                }
            }
            // The entry is published (SeqCst, in `add`); now poll (SeqCst): a wake racing the
            // add is seen by one side or the other (the Dekker pair of `wait_queue`).
            crate::loom::dekker_fence();
            ep.queue_if_ready(&item, ev, &mut batch);
        }
        drop(topo);
        batch.run();
        if let Some(child) = sc.as_epoll() {
            // A new poller of `child`: its kernel fds must now wake it (`kernel`).
            child.kernel.watch(child);
        }
        Ok(())
    }

    /// Change the interest and data of a registered source (`EPOLL_CTL_MOD`). Re-arms a
    /// fired `ONESHOT`; polls the source at once and queues it if ready (so a still-ready
    /// edge-triggered item reports again).
    ///
    /// # Errors
    ///
    /// `EINVAL` (`InvalidInput`) if `events` has `EXCLUSIVE`; `ENOENT` (`NotFound`) if
    /// `src` is not registered; `EINVAL` if it was added with `EXCLUSIVE`. Nothing changes
    /// on error.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Epoll, Event, Events, Notifier};
    /// use std::time::Duration;
    /// let ep = Epoll::new();
    /// let n = Notifier::new();
    /// ep.add(&n, Events::IN | Events::ONESHOT, 1)?;
    /// n.notify()?;
    /// let mut evs = [Event::default(); 4];
    /// assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO))?, 1);
    /// assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO))?, 0); // disarmed
    /// ep.modify(&n, Events::IN | Events::ONESHOT, 2)?;          // re-armed
    /// assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO))?, 1);
    /// assert_eq!(evs[0].data, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn modify(
        &self,
        src: &(impl Source + ?Sized),
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        let ep = &self.inner.core;
        let sc = match ep.resolve(src)? {
            Resolved::Mem(sc) => sc,
            Resolved::Kernel(k) => return ep.kernel.ctl(ep, Ctl::Mod(events, data), k),
        };
        if events.contains(Events::EXCLUSIVE) {
            return Err(invalid("EXCLUSIVE can only be given to add, not modify"));
        }
        let mut batch = WakeBatch::new();
        {
            let mut reg = crate::loom::lock(&ep.registry);
            ep.purge(&mut reg);
            let Some(r) = reg.items.get(&sc.id()) else {
                return Err(crate::error::not_registered());
            };
            if r.item.events().contains(Events::EXCLUSIVE) {
                return Err(invalid("an item added with EXCLUSIVE cannot be modified"));
            }
            let ev = events | Events::ERR | Events::HUP;
            {
                // Under `ready` too: the one-item harvest reads the pair with only `ready`
                // held (`EpInner::harvest_single`).
                let rd = ep.ready.lock();
                r.item.data.store(data, Relaxed);
                r.item.set_events(ev);
                rd.sync_quiet();
            }
            sc.wait_queue().set_mask(r.key, ev & !Events::PRIVATE);
            // The new mask (SeqCst stores of `events` and, in `set_mask`, of the queue's
            // `interest`) before we poll (SeqCst): the Dekker pair with the callback, whose
            // source change (SeqCst RMW) comes before its SeqCst loads of `interest` and of
            // the mask. A wake racing `modify` either sees the new mask or is seen by our
            // poll. (The kernel needs an `smp_mb()` here once its callback reads the mask
            // before taking `ep->lock`; with SeqCst on both sides, C11 needs no extra fence.)
            crate::loom::dekker_fence();
            ep.queue_if_ready(&r.item, ev, &mut batch);
        }
        batch.run();
        Ok(())
    }

    /// Unregister `src` (`EPOLL_CTL_DEL`); a queued event for it is dropped.
    ///
    /// # Errors
    ///
    /// `ENOENT` (`NotFound`) if `src` is not registered; `EINVAL` if `src` is this epoll.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Epoll, Events, Notifier};
    /// let ep = Epoll::new();
    /// let n = Notifier::new();
    /// ep.add(&n, Events::IN, 0)?;
    /// ep.delete(&n)?;
    /// assert_eq!(ep.delete(&n).unwrap_err().kind(), std::io::ErrorKind::NotFound);
    /// assert_eq!(ep.delete(&n).unwrap_err().raw_os_error(), Some(libc::ENOENT));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn delete(&self, src: &(impl Source + ?Sized)) -> io::Result<()> {
        let ep = &self.inner.core;
        let sc = match ep.resolve(src)? {
            Resolved::Mem(sc) => sc,
            Resolved::Kernel(k) => return ep.kernel.ctl(ep, Ctl::Del, k),
        };
        let topo = sc.as_epoll().map(|_| topology::lock());
        let removed = {
            let mut reg = crate::loom::lock(&ep.registry);
            ep.purge(&mut reg);
            let Some(r) = reg.items.remove(&sc.id()) else {
                return Err(crate::error::not_registered());
            };
            r.item.kill();
            sc.wait_queue().remove(r.key);
            if let Some(child) = sc.as_epoll() {
                topology::unlink(ep, child);
                reg.kernel.unnest(&r.item);
            }
            // Off the ready list now, as the kernel's EPOLL_CTL_DEL unlinks it.
            let gone = ep.ready.lock().forget(&r.item);
            (r, gone)
        };
        drop(topo);
        drop(removed);
        ep.wake_views_if_emptied();
        Ok(())
    }

    /// Wait for events and fill `events` with up to `events.len()` of them
    /// (`epoll_wait(2)`). `timeout`: `None` waits forever, `Some(Duration::ZERO)` never
    /// blocks.
    ///
    /// Each ready source is polled again at delivery: one no longer ready is dropped without
    /// using a slot; level-triggered items go back to the tail of the ready list (so more
    /// ready items than slots are served round-robin), edge-triggered ones do not; `ONESHOT`
    /// items are disarmed; an AutoReset notifier is reset by the delivery of `IN`. Threads
    /// blocked in `wait` are woken most-recent-first; an edge-triggered event wakes one of
    /// them, a level-triggered one cascades to the next.
    ///
    /// # Errors
    ///
    /// `EINVAL` (`InvalidInput`) if `events` is empty, as `epoll_wait` with `maxevents` 0.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Epoll, Event, Events, Mode, Notifier};
    /// use std::time::Duration;
    /// let ep = Epoll::new();
    /// let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    /// ep.add(&kick, Events::IN, 42)?;
    /// let k = kick.clone();
    /// std::thread::spawn(move || k.notify().unwrap());
    /// let mut evs = [Event::default(); 4];
    /// assert_eq!(ep.wait(&mut evs, None)?, 1);
    /// assert_eq!(evs[0], Event { events: Events::IN, data: 42 });
    /// assert_eq!(kick.count(), 0); // AutoReset: the delivery consumed it
    /// assert_eq!(ep.wait(&mut evs, Some(Duration::from_millis(1)))?, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(alias = "epoll_wait")]
    pub fn wait(&self, events: &mut [Event], timeout: Option<Duration>) -> io::Result<usize> {
        self.inner.check()?;
        if events.is_empty() {
            return Err(invalid(
                "the event buffer is empty (maxevents must be at least 1)",
            ));
        }
        let ep = &self.inner.core;
        // Step 1 of the blocking wait (skipped when the ready hint says nothing is queued).
        // With kernel fds, a wait that may sleep and finds nothing queued in memory leaves
        // the kernel epoll to its sleep (a direct sleep, or `poll(2)`, returns at once if it
        // holds events; `kernel::sleep`): one syscall fewer per wait that sleeps. A wait
        // that will return in-memory events harvests the kernel epoll too, as `epoll_wait`
        // returns every ready item.
        // A wait that will spin leaves a quiet item queued (`nothing_new`): it returns only
        // after a real harvest (the spin's probe finding news, or the re-check before it
        // sleeps, or its last try), which drops the item if it is still at 0, so no
        // later operation sees it where the kernel would have dropped it. A poll returns
        // at once, so it harvests: left queued by a poll, the item would keep its place
        // ahead of items queued after it, where the kernel's list has it only from the
        // next write on. A wait that will park at once harvests too, so that it does not
        // register only to find the item queued, unregister, drop it and register again.
        let now = timeout == Some(Duration::ZERO);
        let n = if !now && ep.will_spin() && ep.nothing_new() {
            0
        } else {
            ep.harvest_before_wait(events, now)
        };
        if n > 0 || now {
            return Ok(n);
        }
        // An overflowing deadline means "forever".
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // An epoll of kernel fds alone sleeps bare, in the kernel epoll (`kernel::sleep`),
        // unless a fixed spin was asked for.
        if matches!(ep.spin_ns.load(Relaxed), SPIN_ADAPTIVE | 0) {
            if let Some(n) = ep.kernel.wait_bare(ep, events, deadline) {
                return Ok(n);
            }
        }
        let mut s = EpollSleeper {
            harvest: Harvest { ep, out: events },
            entry: None,
            kernel: None,
        };
        Ok(thread::wait(&mut s, deadline).unwrap_or(0))
    }

    /// Readiness of the epoll as a source: `IN | RDNORM` if some queued item is ready now
    /// (never `OUT`), masked by `interest` plus `ERR`/`HUP`. Never consumes an event.
    ///
    /// ```
    /// use evfd::{Epoll, Events, Notifier};
    /// let ep = Epoll::new();
    /// let n = Notifier::new();
    /// ep.add(&n, Events::IN | Events::ET, 0)?;
    /// assert!(ep.poll(Events::IN).is_empty());
    /// n.notify()?;
    /// assert_eq!(ep.poll(Events::IN | Events::OUT), Events::IN);
    /// assert_eq!(ep.poll(Events::IN), Events::IN); // polling did not consume it
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        if self.inner.forked() {
            return Events::ERR | Events::HUP;
        }
        self.inner.core.readiness() & (interest | Events::ERR | Events::HUP)
    }
}

/// A wake-key-only bit (never readiness or interest; `EPOLL*` leaves bit 25 unused): the
/// mask of a waiter that watches the kernel epoll itself — a thread in `Epoll::wait` that
/// sleeps in the kernel (`kernel::sleep`), a task woken by a tokio reactor (`kernel::reactor`). It is
/// woken like any waiter (every wake of `waiters` carries [`WAITER_KEY`]) but, not asking
/// for `IN`, it does not count as a waiter that needs the watcher (`kernel`).
pub(crate) const KEY_KSLEEP: Events = Events::from_bits_retain(1 << 25);

// A key bit, so none of the wait queue's own bits of its `interest` word.
const _: () = assert!(KEY_KSLEEP.bits() & crate::wait_queue::OWN_BITS.bits() == 0);

/// The key of every wake of `waiters`: parked threads and tasks (`IN`), threads in a
/// kernel sleep and tasks woken by a reactor (`KEY_KSLEEP`).
pub(crate) const WAITER_KEY: Events = Events::IN.union(KEY_KSLEEP);

/// The [`Sleeper`] of `Epoll::wait`: LIFO, exclusive, on `waiters`, whatever sources the
/// epoll holds. Without kernel fds it parks (after the spin set by `set_spin` or learned,
/// which comes before registering); kernel fds
/// reach a parked thread through the kernel item, which its registration makes sure the
/// watcher will queue (`kernel`, invariant W). With kernel fds it sleeps in the kernel
/// instead (the facade's `sleeper`): in `epoll_wait` on the kernel epoll if it takes the
/// direct slot (the kernel events that returns are its `seed`), else in `poll(2)` on it and
/// its own bell. No watcher hop.
struct EpollSleeper<'a> {
    /// The operation (and where the events go).
    harvest: Harvest<'a>,
    /// The registration.
    entry: Option<Entry>,
    /// The kernel sleep of this registration, if the epoll held kernel fds at `register`
    /// (with the kernel events a direct sleep took, for the next `try_now` to deliver).
    kernel: Option<KernelSleep>,
}

impl WaitFor for EpollSleeper<'_> {
    type Output = usize;

    /// A plain harvest: this thread arms the watcher (if it needs it) when it registers.
    // The inlining the wait routine had before the kernel sleep's seed (instruction counts
    // of the in-memory hand-off: docs/handoff.md).
    #[inline(always)]
    fn try_now(&mut self) -> Option<usize> {
        let n = match &mut self.kernel {
            // Taken from the kernel epoll: delivered now, whatever else happens.
            Some(k) if k.has_seed() => deliver_seed(k, self.harvest.ep, self.harvest.out),
            _ => self.harvest.ep.harvest_now(self.harvest.out),
        };
        (n > 0).then_some(n)
    }

    fn hand_on(&mut self) {
        self.harvest.hand_on();
    }

    fn probe(&self) -> bool {
        self.harvest.probe()
    }

    fn spin_gauge(&self) -> Option<&SpinGauge> {
        self.harvest.spin_gauge()
    }
}

/// Out of line: the in-memory wait's code stays as small as it was without kernel fds.
#[cold]
#[inline(never)]
fn deliver_seed(k: &mut KernelSleep, ep: &Arc<EpInner>, out: &mut [Event]) -> usize {
    k.deliver_seed(ep, out)
}

/// A previous registration's kernel sleep goes (out of line, as `deliver_seed`).
#[cold]
#[inline(never)]
fn drop_sleep(k: KernelSleep) {
    drop(k);
}

impl Sleeper for EpollSleeper<'_> {
    fn register(&mut self, _again: bool) {
        let ep = self.harvest.ep;
        if let Some(old) = std::mem::replace(&mut self.kernel, ep.kernel.sleeper(ep)) {
            drop_sleep(old);
        }
        // LIFO: the most recent waiter is woken first, as the kernel's epoll does.
        self.entry = Some(match &self.kernel {
            Some(k) => Entry::add_waiter(&ep.waiters, KEY_KSLEEP, true, true, k.waiter()),
            None => {
                let e = Entry::add(&ep.waiters, Events::IN, true, true);
                // Registered: kernel readiness now queues the kernel item (invariant W).
                ep.kernel.watch(ep);
                e
            }
        });
    }

    /// After publishing ourselves (SeqCst), look at the ready list under `ready`: an item
    /// queued meanwhile (the kernel item too) is seen here or its callback sees us (it reads
    /// `waiters` under `ready`).
    fn recheck(&mut self) -> Recheck<usize> {
        if self.harvest.ep.has_ready() {
            Recheck::Retry
        } else {
            Recheck::Sleep
        }
    }

    #[inline(never)]
    fn park(&mut self, deadline: Option<Instant>) -> Parked {
        match (&self.entry, &mut self.kernel) {
            // The spin (fixed or learned) already ran before registering.
            (Some(e), Some(k)) => {
                k.park(e.waiter(), deadline, Duration::ZERO, self.harvest.out.len())
            }
            (Some(e), None) => e.park(deadline),
            (None, _) => Parked::Woken,
        }
    }

    /// [`EpInner::spin_plan`].
    fn spin_plan(&self) -> SpinPlan {
        self.harvest.ep.spin_plan()
    }

    fn waker_cpu(&self) -> u32 {
        self.entry.as_ref().map_or(NO_CPU, Entry::waker_cpu)
    }

    fn unregister(&mut self) -> bool {
        let claimed = self
            .entry
            .take()
            .is_some_and(|e| e.remove(&self.harvest.ep.waiters));
        // Out of the kernel sleep: leave its direct slot, if it held it (the sleep itself,
        // with its seed, stays until the next `register`). After the entry is off
        // `waiters`: the next holder reuses the slot's waiter (`kernel::sleep`).
        if let Some(k) = &mut self.kernel {
            k.leave();
        }
        claimed
    }
}

impl EpInner {
    /// Someone may be asleep waiting for this epoll: a thread or task on `waiters`. Read
    /// under `ready` by callbacks.
    pub(crate) fn has_sleeper(&self) -> bool {
        !self.waiters.wants_nothing()
    }

    /// Wake one waiter (LIFO), parked or in a kernel sleep, from inside a source's wake walk
    /// (`Item::wake`): the waiter's entry is taken off `waiters` now (its lock nests under
    /// the source's: `waiters` holds only threads and tasks, so nothing takes another lock
    /// under it) and its unpark, bell or waker joins `batch`, to run after every lock is
    /// released.
    pub(crate) fn wake_one_waiter_locked(&self, batch: &mut WakeBatch) {
        self.waiters.wake_into(WAITER_KEY, 1, batch);
    }

    /// Wake one waiter (LIFO), parked or in a kernel sleep. Runs with no lock held.
    pub(crate) fn wake_one_waiter(&self) {
        self.waiters.wake(WAITER_KEY, 1);
    }

    /// Whether this is a child process's copy of an epoll made before a fork.
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        crate::sys::fork::forked(self.born)
    }

    /// The fork refusal (docs: "fork" on [`Epoll`]), or `Ok`.
    #[inline]
    pub(crate) fn check(&self) -> io::Result<()> {
        crate::sys::fork::check(self.born, "Epoll")
    }

    pub(crate) fn is_closed(&self) -> bool {
        self.closed.load(SeqCst)
    }

    /// This epoll gained a poller (an outer epoll's item, an fd view), whose interest is
    /// published: clear the settled mark of every source watched here, since their items'
    /// `coalesces()` now says no (`wait_queue`, "Settled"). Takes `registry` (an outer
    /// epoll's may be held: outer before inner, as everywhere).
    pub(crate) fn unsettle_sources(&self) {
        let reg = crate::loom::lock(&self.registry);
        // In registration order, not the map's: a rare path, and loom replays need the
        // same order every run.
        let mut items: Vec<&Item> = reg.items.values().map(|r| &*r.item).collect();
        items.sort_unstable_by_key(|it| it.src.id());
        for it in items {
            it.src.unsettle();
        }
    }

    /// Drop registrations whose source closed. Must be called with `registry` held.
    fn purge(&self, reg: &mut Registry) {
        for id in self.graveyard.take() {
            // Topology links to a closed epoll are ignored by the walks (`is_closed`) and
            // pruned at the next link, so nothing here needs the topology lock.
            if reg.items.get(&id).is_some_and(|r| r.item.is_dead()) {
                if let Some(r) = reg.items.remove(&id) {
                    if r.item.src.as_epoll().is_some() {
                        reg.kernel.unnest(&r.item);
                    }
                }
            }
        }
    }

    /// Is the ready list non-empty or a harvest running? A `true` also sets the ready hint
    /// (under the lock, as every writer of it): the wait that saw it retries a harvest that
    /// the hint gates, so a stale hint can never make it spin between the two.
    pub(crate) fn has_ready(&self) -> bool {
        self.ready.lock().has_ready()
    }

    /// Someone may wait (a new poller: an fd view): make sure kernel readiness will reach
    /// it (`kernel`, invariant W).
    pub(crate) fn ensure_watch(&self) {
        self.kernel.watch(self);
    }

    /// The checks `add`, `modify` and `delete` share, in the kernel's order: the fork
    /// refusal; then, for an in-memory source, its own fork refusal and "not this epoll"
    /// (a kernel fd goes to the kernel side, whose `epoll_ctl` makes its own checks).
    fn resolve<'s>(&self, src: &'s (impl Source + ?Sized)) -> io::Result<Resolved<'s>> {
        self.check()?;
        let sc = match src.source_ref() {
            SourceRef::Mem(MemRef(sc)) => sc,
            SourceRef::Kernel(k) => return Ok(Resolved::Kernel(k)),
        };
        sc.check()?;
        if sc.id() == self.id {
            return Err(invalid("an epoll cannot watch itself"));
        }
        Ok(Resolved::Mem(sc))
    }

    /// `add`/`modify`'s poll: queue the item if the source is ready for `ev` (a pure check:
    /// nothing is consumed). Must be called with `registry` held.
    ///
    /// As `ep_insert`/`ep_modify`: waiters and pollers are woken only if the item was newly
    /// queued. A `modify` of an item that is still on the ready list wakes nobody (unlike the
    /// wake callback, which wakes them even then), so an outer epoll watching this one is
    /// not re-queued by it.
    pub(crate) fn queue_if_ready(&self, item: &Item, ev: Events, batch: &mut WakeBatch) {
        let r = item.src.poll(ev, false, batch) & ev & !Events::PRIVATE;
        if r.is_empty() {
            return;
        }
        let post = {
            let mut rd = self.ready.lock();
            let queued = rd.queue(item);
            queued && (self.has_sleeper() || !self.pollers.wants_nothing())
        };
        if post {
            batch.push_post(Arc::clone(&item.ep) as Arc<dyn PostWake>, Events::IN);
        }
    }

    /// The last handle went: unhook every item, drop the ready list, and leave every outer
    /// epoll silently.
    fn close(&self) {
        self.closed.store(true, SeqCst);
        let (regs, kernel_left) = {
            let mut reg = crate::loom::lock(&self.registry);
            let regs: Vec<Reg> = reg.items.drain().map(|(_, r)| r).collect();
            for r in &regs {
                r.item.kill();
                // Every registration is an in-memory source's (the kernel item is never one).
                if let Some(q) = r.item.src.wait_queue() {
                    q.remove(r.key);
                }
            }
            let left = self.kernel.close(&mut reg.kernel);
            (regs, left)
        };
        // Dropped with no lock held (it may deregister from a tokio reactor).
        drop(kernel_left);
        if regs.iter().any(|r| r.item.src.as_epoll().is_some()) {
            let _t = topology::lock();
            for r in &regs {
                if let Some(child) = r.item.src.as_epoll() {
                    topology::unlink(self, child);
                }
            }
        }
        let lists = self.ready.lock().take_all();
        self.pollers.detach_all();
        drop(lists);
        drop(regs);
    }
}
