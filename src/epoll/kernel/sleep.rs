//! The kernel sleep of a thread blocked in [`Epoll::wait`](crate::Epoll::wait) on an epoll
//! with kernel fds, so that a kernel event wakes it with no watcher hop (`super::watcher`
//! stays for tasks, fd views and outer epolls). Route 2 of `super`; the facade's `sleeper`
//! makes one at each registration.
//!
//! - **Direct** ([`Direct`]): the thread that takes the epoll's direct slot sleeps in
//!   `epoll_wait` on the kernel epoll (`kfd`) itself and hands the kernel events it took
//!   to its harvest (`EpInner::harvest_seeded`); its in-memory wakes ring the epoll's
//!   [`DirectBell`], registered in `kfd` edge-triggered with [`BELL_TOKEN`]. A collect
//!   that takes the bell's edge rings it again while the slot is held
//!   ([`Direct::ring_holder`], called from `fds`).
//! - **`poll(2)`**: every other blocked thread sleeps in `poll` on `[kfd, bell]`, its bell
//!   being an eventfd of its own ([`ThreadBell`]) that only it reads.
//! - **Bare** ([`bare`]): on an epoll that has never held an in-memory source, nothing in
//!   memory can wake a blocked thread, so the slot's holder skips the wait routine: no
//!   entry on `waiters`, no registration, re-check or removal; `epoll_wait` on `kfd` and
//!   the delivery of what it returns. The one thing that could need it, the epoll's first
//!   in-memory `add`, sets the kernel side's sticky `memory` flag and then rings the
//!   slot's holder; the holder takes the slot and then reads the flag (a Dekker pair,
//!   SeqCst both sides), and after every return of its `epoll_wait`, so either it never
//!   sleeps bare or the ring wakes it and it leaves for the general path (loom
//!   `bare_sleep_*` in `src/tests/loom_kernel_direct.rs`).
//!
//! Both register on `waiters` with the mask [`KEY_KSLEEP`](crate::epoll::KEY_KSLEEP): they
//! need neither the kernel item nor the watcher (invariant W of `super` is about the
//! waiters that do). The protocol and its no-lost-wake argument (why a ring is never lost,
//! why a stale one is harmless, what the direct slot costs other waiters) are in
//! docs/design.md, "A blocked thread sleeps in the kernel"; the loom models are
//! `src/tests/loom_kernel_sleep.rs` (`poll`) and `src/tests/loom_kernel_direct.rs` (direct).
//!
//! A thread bell belongs to a thread of one process: after `fork` the child's thread makes
//! a new one (checked by the fork epoch at each registration, no syscall), so no two
//! processes share a bell (`tests/fork_kernel_sleep.rs`). The direct bell belongs to an
//! epoll, which a child refuses to use.

use std::cell::RefCell;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use super::Side;
use crate::epoll::EpInner;
use crate::events::{Event, Events};
use crate::wait_queue::thread::{Bell, Parked, ThreadWaiter};

/// A thread's bell: a non-blocking eventfd that only its thread reads.
#[derive(Debug)]
pub(crate) struct ThreadBell {
    fd: OwnedFd,
    /// The fork epoch it was made in (`sys::fork`): a `fork` child's copy of the
    /// thread-local would share the parent thread's eventfd (and the parent could drain the
    /// child's rings), so the child makes its own.
    born: u32,
}

impl Bell for ThreadBell {
    fn ring(&self) {
        // Fails only at the counter's maximum, when it is readable anyway.
        let _ = crate::sys::eventfd::write(self.fd.as_fd(), 1);
    }
}

thread_local! {
    static BELL: RefCell<Option<Arc<ThreadBell>>> = const { RefCell::new(None) };
}

/// The calling thread's bell, made on first use; `None` if no eventfd can be made (the
/// caller then parks, woken through the watcher).
fn thread_bell() -> Option<Arc<ThreadBell>> {
    BELL.try_with(|b| {
        let mut b = b.borrow_mut();
        if b.as_ref()
            .map_or(true, |b| crate::sys::fork::forked(b.born))
        {
            let born = crate::sys::fork::epoch();
            *b = crate::sys::eventfd::create(0, false, true)
                .ok()
                .map(|fd| Arc::new(ThreadBell { fd, born }));
        }
        b.clone()
    })
    .ok()
    .flatten()
}

/// The token of the direct bell in the kernel epoll: no registration's (those are
/// `next_id()`s, counted up from 1).
pub(crate) const BELL_TOKEN: u64 = u64::MAX;

/// The direct sleep's slot and bell of one kernel epoll (module docs, "Direct sleep").
#[derive(Default)]
pub(crate) struct Direct {
    /// Made (and registered in `kfd`) by the first direct sleep; `None` if that failed
    /// (every sleep then takes the `poll` path).
    bell: OnceLock<Option<Arc<DirectBell>>>,
    /// A thread holds the slot: it sleeps, or is about to sleep, in `epoll_wait` on `kfd`.
    held: AtomicBool,
    /// The slot's waiter (woken by the bell), reused by every holder: one holder at a
    /// time, and a holder leaves the slot only after its entry is off `waiters`
    /// ([`KernelSleep::leave`]), so a new holder's reset can meet no wake of an old entry.
    waiter: OnceLock<Arc<ThreadWaiter>>,
}

thread_local! {
    /// The calling thread's buffer for the kernel events a direct sleep takes (kept from
    /// one sleep to the next: no allocation per wait).
    static SEED: std::cell::Cell<Vec<(Events, u64)>> = const { std::cell::Cell::new(Vec::new()) };
}

/// The calling thread's seed buffer (`SEED`), taken for a direct sleep.
fn take_seed() -> Vec<(Events, u64)> {
    SEED.try_with(|s| s.take()).unwrap_or_default()
}

/// Back to the thread's buffer (`SEED`), emptied, for its next sleep.
fn put_seed(mut seed: Vec<(Events, u64)>) {
    seed.clear();
    let _ = SEED.try_with(|s| s.set(seed));
}

/// Deliver `seed`, the kernel events a direct sleep took (and the in-memory events into
/// the slots left): the one-eventfd shape's lean harvest where it applies, else
/// `harvest_seeded`.
#[inline(always)]
fn deliver(
    side: &Arc<Side>,
    ep: &Arc<EpInner>,
    out: &mut [Event],
    seed: &[(Events, u64)],
) -> usize {
    match super::fds::harvest_one(ep, out, Some(seed)) {
        Some((n, _)) => n,
        None => deliver_general(side, ep, out, seed),
    }
}

/// [`deliver`]'s general harvest (any other shape): out of line, so that the lean one's
/// code stays small.
#[inline(never)]
fn deliver_general(
    side: &Arc<Side>,
    ep: &Arc<EpInner>,
    out: &mut [Event],
    seed: &[(Events, u64)],
) -> usize {
    let kernel = super::fds::Collector::new(Some(Arc::clone(side)));
    ep.harvest_seeded(out, seed, kernel)
}

impl Direct {
    /// Take the slot, making the bell first if need be; `false` if it is held or there is
    /// no bell. The slot's waiter (`waiter`) is reset for this holder.
    fn acquire(&self, kfd: &OwnedFd) -> bool {
        let Some(bell) = self.take(kfd) else {
            return false;
        };
        self.waiter
            .get_or_init(|| Arc::new(ThreadWaiter::with_bell(Arc::clone(bell) as Arc<dyn Bell>)))
            .reset();
        true
    }

    /// Take the slot (SeqCst), making the bell first if need be: the bell, or `None` if the
    /// slot is held or there is no bell.
    #[inline(always)]
    fn take(&self, kfd: &OwnedFd) -> Option<&Arc<DirectBell>> {
        let bell = self
            .bell
            .get_or_init(|| DirectBell::new(kfd).ok().map(Arc::new))
            .as_ref()?;
        self.held
            .compare_exchange(false, true, SeqCst, SeqCst)
            .is_ok()
            .then_some(bell)
    }

    #[inline(always)]
    fn release(&self) {
        self.held.store(false, SeqCst);
    }

    /// Ring the bell if a thread holds the slot: a collect (`fds::collect`) took the
    /// bell's event out of `kfd`, and the ring may have been for the holder (module docs);
    /// or the epoll gained its first in-memory source, which a bare sleeper does not hear
    /// ([`bare`]).
    pub(crate) fn ring_holder(&self) {
        if self.held.load(SeqCst) {
            if let Some(Some(b)) = self.bell.get() {
                b.ring();
            }
        }
    }
}

/// The direct bell: a non-blocking eventfd registered in `kfd` edge-triggered with
/// [`BELL_TOKEN`]. Never read: each write is one edge, whatever the count.
#[derive(Debug)]
pub(crate) struct DirectBell {
    fd: OwnedFd,
}

impl DirectBell {
    fn new(kfd: &OwnedFd) -> std::io::Result<DirectBell> {
        let fd = crate::sys::eventfd::create(0, false, true)?;
        crate::sys::epoll::add(kfd.as_fd(), fd.as_fd(), Events::IN | Events::ET, BELL_TOKEN)?;
        Ok(DirectBell { fd })
    }
}

impl Bell for DirectBell {
    fn ring(&self) {
        // Fails only at the counter's maximum (2^64 - 2 rings): not reachable.
        let _ = crate::sys::eventfd::write(self.fd.as_fd(), 1);
    }
}

/// How this sleep waits: in `poll(2)` with the thread's bell, or directly in `epoll_wait`
/// holding the slot.
enum How {
    Poll(Arc<ThreadBell>),
    /// The slot's waiter (`Direct::waiter`, made by `acquire`; read from there, so that a
    /// sleep clones its `Arc` only once, for the entry on `waiters`).
    Direct,
}

/// What a thread needs for a kernel sleep on one epoll: its kernel side and the bell (the
/// direct slot and the epoll's bell, else the thread's own). Dropping it leaves the slot.
pub(crate) struct KernelSleep {
    side: Arc<Side>,
    how: How,
    /// Holds the direct slot (until [`leave`](Self::leave) or the drop).
    holds: bool,
    /// The kernel events the direct sleep took from `kfd`, not delivered yet.
    seed: Vec<(Events, u64)>,
}

impl Drop for KernelSleep {
    fn drop(&mut self) {
        self.leave();
        if self.seed.capacity() > 0 {
            put_seed(std::mem::take(&mut self.seed));
        }
    }
}

impl KernelSleep {
    /// A kernel sleep on `side` for the calling thread: the direct slot if it is free,
    /// else `poll(2)` with the thread's bell; `None` without any bell.
    pub(super) fn new(side: Arc<Side>) -> Option<KernelSleep> {
        if side.direct.acquire(&side.poll.kfd) {
            return Some(KernelSleep {
                side,
                how: How::Direct,
                holds: true,
                seed: take_seed(),
            });
        }
        Some(KernelSleep {
            side,
            how: How::Poll(thread_bell()?),
            holds: false,
            seed: Vec::new(),
        })
    }

    /// Leave the direct slot, if this sleep holds it (the sleeper unregisters).
    pub(crate) fn leave(&mut self) {
        if std::mem::take(&mut self.holds) {
            self.side.direct.release();
        }
    }

    /// Whether the direct sleep took kernel events that are not delivered yet.
    pub(crate) fn has_seed(&self) -> bool {
        !self.seed.is_empty()
    }

    /// Deliver them (and the in-memory events into the slots left): [`deliver`].
    pub(crate) fn deliver_seed(&mut self, ep: &Arc<EpInner>, out: &mut [Event]) -> usize {
        let n = deliver(&self.side, ep, out, &self.seed);
        self.seed.clear();
        n
    }

    /// The waiter to queue: the calling thread, woken by its bell (the direct slot's
    /// waiter, reused: `Direct::waiter`).
    pub(crate) fn waiter(&self) -> Arc<ThreadWaiter> {
        match &self.how {
            How::Poll(b) => Arc::new(ThreadWaiter::with_bell(Arc::clone(b) as Arc<dyn Bell>)),
            How::Direct => Arc::clone(
                self.side
                    .direct
                    .waiter
                    .get()
                    .expect("made by the slot's acquire"),
            ),
        }
    }

    /// Sleep until `waiter` (queued with [`Self::waiter`]) is notified, `kfd` has events,
    /// or `deadline`; first spin for up to `spin` (clamped to the deadline) on the
    /// in-memory wake. `Woken` also when `kfd` is readable or on a stale ring: the caller
    /// harvests and decides. A direct sleep puts the kernel events it took into `got`
    /// (at most `max`), which the caller must deliver ([`deliver_seed`](Self::deliver_seed)).
    pub(crate) fn park(
        &mut self,
        waiter: &ThreadWaiter,
        deadline: Option<Instant>,
        spin: Duration,
        max: usize,
    ) -> Parked {
        if !spin.is_zero() && spin_on(waiter, deadline, spin) {
            return Parked::Woken;
        }
        let kfd = self.side.poll.kfd.as_fd();
        match &self.how {
            How::Direct => direct(kfd, waiter, deadline, &mut self.seed, max),
            How::Poll(b) => poll_sleep(kfd, b.fd.as_fd(), waiter, deadline),
        }
    }
}

/// The most kernel events one bare sleep takes (the rest stay queued in `kfd` for the next
/// wait, as `epoll_wait` leaves what does not fit).
const BARE_MAX: usize = 16;

/// The bare sleep of a blocked [`Epoll::wait`](crate::Epoll::wait) on an epoll that never
/// held an in-memory source (module docs, "Bare"): the direct slot taken, `epoll_wait` on
/// `kfd`, the delivery of what it returned, and nothing else — no entry on `waiters`, no
/// wait routine. Nothing in memory can wake such a wait but the epoll's first in-memory
/// `add`, which rings the slot's holder after setting `memory` ([`Direct::ring_holder`]).
/// `Some(n)`: the events delivered (0 at the deadline); `None`: the caller takes the
/// general path (the slot is held, the epoll gained an in-memory source, or `kfd` failed),
/// with nothing consumed that it would not deliver.
///
/// Out of line, with its delivery inlined into it: after a sleep every page the wake
/// touches is cold again, so the code that runs between the return of `epoll_wait` and the
/// caller is kept to this function's pages (docs/handoff.md, "What the wake touches after
/// the sleep").
#[inline(never)]
pub(crate) fn bare(
    side: &Arc<Side>,
    ep: &Arc<EpInner>,
    out: &mut [Event],
    deadline: Option<Instant>,
    memory: &crate::loom::sync::atomic::AtomicBool,
) -> Option<usize> {
    side.direct.take(&side.poll.kfd)?;
    crate::loom::dekker_fence();
    // On the stack: what the wake touches after the sleep is what it pays for (every
    // page cold again, docs/handoff.md), and the stack's page is touched anyway.
    let mut seed = [(Events::empty(), 0u64); BARE_MAX];
    let max = out.len().min(BARE_MAX);
    let kfd = side.poll.kfd.as_fd();
    let n = loop {
        // The Dekker pair with the first in-memory `add` (`KernelSide::memory_added`): the
        // slot is taken (SeqCst) before `memory` is read, as the add sets `memory` before
        // it reads the slot, so one of the two sees the other; and after a ring, the
        // source that rang it is seen here.
        if memory.load(SeqCst) {
            break None;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            break Some(0);
        }
        // EINTR and a timeout come back as nothing: looked at again above.
        let Ok(mut got) = crate::sys::epoll::wait_into(kfd, &mut seed[..max], deadline) else {
            break None;
        };
        if let Some(i) = seed[..got].iter().position(|&(_, t)| t == BELL_TOKEN) {
            // A ring: the first in-memory source (then the general path), or a stale one
            // (a collect's re-ring for an earlier holder, module docs).
            got -= 1;
            seed.swap(i, got);
        }
        if got == 0 {
            continue;
        }
        let n = deliver(side, ep, out, &seed[..got]);
        // None (another consumer reset the eventfd first): sleep again.
        if n > 0 {
            break Some(n);
        }
    };
    side.direct.release();
    n
}

/// `park`'s spin on the in-memory wake, for up to `spin` (clamped to the deadline): whether
/// the waiter was notified. Out of line (the direct sleep's callers do not spin).
#[inline(never)]
fn spin_on(waiter: &ThreadWaiter, deadline: Option<Instant>, spin: Duration) -> bool {
    let now = Instant::now();
    let spin = deadline.map_or(spin, |d| spin.min(d.saturating_duration_since(now)));
    let end = now.checked_add(spin);
    while match end {
        Some(e) => Instant::now() < e,
        None => true,
    } {
        if waiter.is_notified() {
            return true;
        }
        for _ in 0..32 {
            std::hint::spin_loop();
        }
    }
    false
}

/// The `poll(2)` sleep on `[kfd, bell]` (module docs). Out of line: the direct sleep's code
/// stays small.
#[inline(never)]
fn poll_sleep(
    kfd: BorrowedFd<'_>,
    bell: BorrowedFd<'_>,
    waiter: &ThreadWaiter,
    deadline: Option<Instant>,
) -> Parked {
    loop {
        if waiter.is_notified() {
            return Parked::Woken;
        }
        let timeout = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Parked::TimedOut;
                }
                // Too large for a timespec: forever.
                Timespec::try_from(left).ok()
            }
        };
        let mut fds = [
            PollFd::from_borrowed_fd(kfd, PollFlags::IN),
            PollFd::from_borrowed_fd(bell, PollFlags::IN),
        ];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) | Err(rustix::io::Errno::INTR) => continue,
            Ok(_) => {
                if !fds[1].revents().is_empty() {
                    // Ours alone to drain (module docs).
                    let _ = crate::sys::eventfd::read(bell);
                }
                return Parked::Woken;
            }
            // Not expected on our own fds; the caller harvests and sleeps again.
            Err(_) => return Parked::Woken,
        }
    }
}

/// The direct sleep: `epoll_wait` on `kfd` itself, which returns the kernel events (into
/// `got`) or the direct bell's edge.
fn direct(
    kfd: BorrowedFd<'_>,
    waiter: &ThreadWaiter,
    deadline: Option<Instant>,
    got: &mut Vec<(Events, u64)>,
    max: usize,
) -> Parked {
    loop {
        if waiter.is_notified() {
            return Parked::Woken;
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Parked::TimedOut;
        }
        // EINTR and a timeout come back as nothing: looked at again above.
        if crate::sys::epoll::wait(kfd, got, max, deadline).is_err() {
            // Not expected on our own epoll; the caller harvests and sleeps again.
            got.clear();
            return Parked::Woken;
        }
        // The bell's edge is only a wake: ours (then `notified` is set) or a stale one.
        got.retain(|&(_, token)| token != BELL_TOKEN);
        if !got.is_empty() {
            return Parked::Woken;
        }
    }
}
