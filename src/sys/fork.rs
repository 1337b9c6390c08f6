//! Fork detection: a process-wide epoch that a `pthread_atfork` child handler bumps, on a
//! page the kernel hands a child zeroed (`MADV_WIPEONFORK`), which a child made without the
//! handlers sees moved too.
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
//! it (or after a thread spawn, which synchronises); a wiped epoch is 0 from the child's
//! first instruction. In the parent the epoch never moves once set (the first [`epoch`]).
//! So `Relaxed` is exact.
//!
//! The handlers also hold the crate's one global lock (the epoll topology lock) across the
//! fork, the classic `pthread_atfork` use: the child then never inherits it locked, so an
//! `Epoll` made in the child can nest epolls even if a parent thread was nesting at the
//! fork.
//!
//! Other locks that a child may still need on an object it legitimately shares with the
//! parent (a `KernelNotifier`'s registrations; the kernel-fd watcher's creation and its
//! child slot; a `SharedNotifier`'s reader epoll slot in a child) are taken
//! inside a [`guard`]: a read lock of a process-wide `RwLock` whose write half the
//! `prepare` handler takes, so no such section is running when the process forks, and the
//! child never inherits one of those locks held.
//!
//! LOCKING (the handlers' order): `prepare` takes `TOPOLOGY` and then `FORK_GUARD` (write),
//! then closes the private sections (taking `CLOSING`) and waits for them (each is one
//! syscall that does not wait and takes no lock, so the wait ends), then takes the registry
//! of counts kept in memory and flushes them (`super::mem_count::flush_all`, a leaf: its
//! other holder only pushes to it). `CLOSING` is a leaf:
//! its holder only waits for sections, which take no lock, so it is released whatever
//! else anyone holds. A first lend takes it too, except in a signal handler whose thread
//! is taking or holds it, or is in a section (`close_for_lend`): that lend takes no lock
//! and waits for the other threads' sections only.
//! A thread holding `TOPOLOGY` may enter a guarded section (an epoll add that drops the last
//! handle of a nested epoll reaches the watcher); a guarded section never takes `TOPOLOGY`
//! nor a second guard (a write-preferring `RwLock` would deadlock a nested read behind the
//! waiting `prepare`), and never runs foreign code. So `prepare` waiting for `TOPOLOGY`
//! blocks no reader, and once it holds `TOPOLOGY` it waits only for guarded sections,
//! which end without it.
//!
//! A fork count ([`forks`]), moved by `prepare` and so seen moved by the parent and the
//! child alike, tells an fd made before a fork that its open file description may be in
//! another process since (`super::fd`). Its users look at it and make one syscall inside a
//! [`private_section`]: a process-wide count of running sections, no lock. `prepare`
//! closes them (a section that starts then is told to take the shared path) and waits for
//! the running ones to end before it moves the count (loom: `tests::loom_fork`, which runs
//! `prepare`'s and `parent`'s halves against a section). The first lend of a private
//! description closes them too (`super::fd`), for the same reason: the borrow goes out
//! only once no call that saw the description private is still on its way — but for a
//! call on the lending thread itself, which a signal handler's lend interrupted and cannot
//! wait for (`close_for_lend`; each thread counts its own sections in a cell, `MINE`).
//!
//! `fork(2)` through libc (what `libc::fork`, `nix::unistd::fork` and `std::process::Command`
//! call) runs the handlers; a raw `clone(2)` syscall and glibc's `_Fork` do not. Their child
//! still finds the epoch and the fork count wiped (Linux 4.14 and later), so its copies
//! refuse and its calls on a copied description take the shared path; but nothing held
//! the locks across that fork: the child of a multi-threaded parent may inherit
//! [`TOPOLOGY`], [`CLOSING`] or a guarded section's lock held by a thread it does not
//! have (as it may `malloc`'s); and the parent's count did not move, so the parent's
//! calls on a description it made before still count it private.
//!
//! A `fork` from a signal handler is outside the contract (POSIX.1-2024 no longer lists
//! `fork` as async-signal-safe, for its handlers' locks; glibc's own take `malloc`'s):
//! `prepare` would wait for a section or a guard the handler interrupted.
//!
//! # References
//!
//! - [pthread_atfork(3)](https://man7.org/linux/man-pages/man3/pthread_atfork.3.html)
#![allow(unsafe_code)]

use crate::loom::sync::atomic::{
    AtomicU32,
    Ordering::{Relaxed, SeqCst},
};
use std::cell::Cell;
/// The std atomic where loom must not step in (the epoch and the fork count: written only
/// outside the modelled protocols, and, under loom, alive across a model's executions).
use std::sync::atomic::AtomicU32 as PlainU32;
use std::sync::{Mutex, RwLock, RwLockReadGuard};

/// The crate's one process-wide lock: the epoll topology lock (`crate::epoll::topology`,
/// which re-exports it). It lives here, in the OS layer, so that the fork handlers can hold
/// it across a fork without this layer importing from above.
pub(crate) static TOPOLOGY: Mutex<()> = Mutex::new(());

/// Held (read) by the short sections of [`guard`]; held (write) by the forking thread
/// from `prepare` to `parent`/`child`.
static FORK_GUARD: RwLock<()> = RwLock::new(());

/// A section that must not be cut by a `fork`: the forking thread waits for it to end, so a
/// lock taken inside it is never inherited held by a child (module docs, LOCKING).
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn guard() -> RwLockReadGuard<'static, ()> {
    FORK_GUARD
        .read()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Moved by the `prepare` handler before every fork, once no [`private_section`] runs:
/// the parent and the child both see it moved (the child moves it once more, in its
/// handler). What [`forks`] reads: an fd made before a fork may have its open file
/// description in another process since (`sys::fd`). On [`EPOCH`]'s wiped page, never 0
/// once armed ([`forks`]): a child made by a fork that runs no handler finds it 0, moved
/// for every description it copied.
#[cfg(not(evfd_loom))]
static FORKS: &PlainU32 = &EPOCH.forks;

/// The last fork count given ([`FORKS`]), off the wiped page.
#[cfg(not(evfd_loom))]
static LAST_FORKS: PlainU32 = PlainU32::new(0);

/// The private sections ([`private_section`]): how many run now, in shards on lines of
/// their own, a section counting on its thread's (picked by its stack's address: a thread's
/// calls, whatever fd they are on, keep to one line, and two threads working on one fd do
/// not pass a line between them).
#[cfg(not(evfd_loom))]
static PRIVATE: [Shard; SHARDS] = [UNUSED; SHARDS];

/// How many closers ([`close_private_sections`]: a fork being prepared, a first lend) are at
/// work: while it is not 0, a section that starts is told it is not private. ([`CLOSING`]
/// lets one closer at a time in; a signal handler's lend ([`close_for_lend`]) may add one
/// more on the thread it interrupted.)
#[cfg(not(evfd_loom))]
static CLOSERS: AtomicU32 = AtomicU32::new(0);

/// One closer at a time, held from [`close_private_sections`] to [`open_private_sections`]
/// (by a fork's `prepare` until `parent` or `child`, so that a child never inherits it
/// held by a thread it does not have). Two closers at once would each wait for the same
/// sections; one at a time, the second finds the sections the first drained, and waits
/// only for the ones that started before it closed them again. No lock is taken under it
/// (module docs, LOCKING).
#[cfg(not(evfd_loom))]
static CLOSING: Mutex<()> = Mutex::new(());

// Under loom these are the model's atomics, made afresh for each execution
// (`tests::loom_fork`, `tests::loom_lend`).
#[cfg(evfd_loom)]
loom::lazy_static! {
    static ref FORKS: AtomicU32 = AtomicU32::new(0);
    static ref PRIVATE: [Shard; SHARDS] = [Shard(AtomicU32::new(0)), Shard(AtomicU32::new(0))];
    static ref CLOSERS: AtomicU32 = AtomicU32::new(0);
    static ref CLOSING: crate::loom::sync::Mutex<()> = crate::loom::sync::Mutex::new(());
}

/// A shard with no section (the initialiser of each of [`PRIVATE`]'s: an array repeat of a
/// non-`Copy` value needs a constant, and an inline `const` block needs a newer Rust than
/// the crate's minimum).
#[cfg(not(evfd_loom))]
#[allow(clippy::declare_interior_mutable_const)]
const UNUSED: Shard = Shard(AtomicU32::new(0));

/// The number of [`PRIVATE`] shards (two under loom).
#[cfg(not(evfd_loom))]
const SHARDS: usize = 16;
#[cfg(evfd_loom)]
const SHARDS: usize = 2;

/// One shard of [`PRIVATE`].
#[repr(align(64))]
struct Shard(AtomicU32);

/// The calling thread's shard (its index in [`PRIVATE`]): picked by the address of its
/// stack (threads' stacks are apart; a signal handler on an alternate stack may pick
/// another, which is as good: a section ends on the shard it started on, and [`MINE`]
/// counts by shard).
#[cfg(not(evfd_loom))]
#[inline(always)]
fn this_threads_shard() -> usize {
    let probe = 0u8;
    let at = std::hint::black_box(std::ptr::addr_of!(probe)) as usize;
    // 2 MiB apart (a Rust thread's default stack), mixed so that neighbours spread.
    ((at >> 21).wrapping_mul(0x9E37_79B9) >> 16) % SHARDS
}

/// Under loom, the shard is picked by the model's thread number instead: where a model
/// thread's stack lies changes between the executions of one model, and a model must be
/// deterministic (with stack-picked shards loom explored inconsistent histories and failed
/// its own assertions in ~8% of the runs of `tests::loom_lend`).
#[cfg(evfd_loom)]
fn this_threads_shard() -> usize {
    // `ThreadId(n)`: the model's own numbering (its `Hash` also covers the execution's id,
    // which moves between executions).
    let id = format!("{:?}", loom::thread::current().id());
    let n: usize = id
        .trim_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap_or(0);
    n % SHARDS
}

/// What this thread has under way that a lend made by a signal handler on it must not wait
/// for ([`close_for_lend`]): its private sections by shard, and whether it is taking or
/// holds [`CLOSING`]. Plain cells: only this thread (and its handlers, which run on it)
/// touch them.
struct Mine {
    sections: [Cell<u32>; SHARDS],
    closing: Cell<bool>,
}

/// A shard's count in [`Mine`] before any section (the array's initialiser, as [`UNUSED`]).
#[allow(clippy::declare_interior_mutable_const)]
const NONE_MINE: Cell<u32> = Cell::new(0);

impl Mine {
    const fn new() -> Mine {
        Mine {
            sections: [NONE_MINE; SHARDS],
            closing: Cell::new(false),
        }
    }
}

#[cfg(not(evfd_loom))]
std::thread_local! {
    static MINE: Mine = const { Mine::new() };
}

#[cfg(evfd_loom)]
loom::thread_local! {
    static MINE: Mine = Mine::new();
}

/// Add `d` (±1) to this thread's count of sections on `shard` ([`Mine`]). No destructor
/// and a constant initialiser: usable until the thread's end, and from a signal handler.
#[inline(always)]
fn mine_add(shard: usize, d: i32) {
    MINE.with(|m| {
        let c = &m.sections[shard];
        c.set(c.get().wrapping_add_signed(d));
    });
}

/// Mark this thread as taking or holding [`CLOSING`] ([`Mine`]).
fn mine_closing(on: bool) {
    MINE.with(|m| m.closing.set(on));
}

/// Close the private sections and wait for the ones running: a section that starts from
/// now on, until [`open_private_sections`], is told it is not private; each one running
/// is one syscall that does not wait (`sys::fd`), so the wait ends. A fork's `prepare`
/// (which then moves the fork count, seen by every later section here and in the child)
/// and the first lend of a private description (`sys::fd::Fd::lend`) do this. The Dekker
/// pair with [`private_section`]: the closer's increment of [`CLOSERS`] and then its load
/// of a shard, a section's increment of its shard and then its load of [`CLOSERS`], all
/// `SeqCst`: either the section sees the closer, or the closer sees the section's count
/// and waits for it. (A fork moves its count after the wait, so for it the closers are what
/// keeps a later section from being told private; a lend sets its flag before, which a
/// later section sees anyway, so for it they only keep the wait short.) One closer at a
/// time ([`CLOSING`]); the returned [`Closed`] is its turn, which
/// [`open_private_sections`] ends.
pub(crate) fn close_private_sections() -> Closed {
    // Marked before the lock is taken, cleared after it is released: a handler that runs
    // on this thread in between never waits for the turn this thread takes or holds.
    mine_closing(true);
    let turn = crate::loom::lock(&CLOSING);
    CLOSERS.fetch_add(1, SeqCst);
    crate::loom::dekker_fence();
    drain_sections(|_| 0);
    Closed { turn: Some(turn) }
}

/// Wait until each shard of [`PRIVATE`] holds no more sections than `own(shard)` (the
/// closer's own thread's, which it cannot wait for: [`close_for_lend`]; none for any
/// other closer). Called with [`CLOSERS`] raised: no section starts private meanwhile.
fn drain_sections(own: impl Fn(usize) -> u32) {
    for (i, s) in PRIVATE.iter().enumerate() {
        let own = own(i);
        while s.0.load(SeqCst) > own {
            crate::loom::thread::yield_now();
        }
    }
}

/// The private sections closed by one closer: its turn at [`CLOSING`].
#[must_use = "the sections stay closed until `open_private_sections`"]
pub(crate) struct Closed {
    turn: Option<crate::loom::sync::MutexGuard<'static, ()>>,
}

impl Drop for Closed {
    fn drop(&mut self) {
        drop(self.turn.take());
        mine_closing(false);
    }
}

/// The first lend's closer (`sys::fd::Fd::lend`): [`close_private_sections`] and
/// [`open_private_sections`], unless this thread has a section or a closer under way —
/// then this is a signal handler that interrupted it (a section neither lends nor forks,
/// and a closer does neither while it holds its turn), which cannot end before the handler
/// returns. Then it waits for every other section and for no turn: it raises [`CLOSERS`],
/// waits until each shard holds none but this thread's own sections ([`MINE`]), and lowers
/// [`CLOSERS`] again. So a first lend is async-signal-safe: atomics, this thread's cells and
/// `sched_yield`, and a wait that only other threads' sections (each one syscall that does
/// not wait) can hold up. What it cannot wait for: the interrupted section itself, if it
/// is a private call on the very fd being lent, makes its plain syscall after the borrow is
/// out (the handler returns first); it waits only if the handler, or whoever it handed the
/// borrow to, cleared `O_NONBLOCK` before it returned (docs/semantics.md §6.4).
pub(crate) fn close_for_lend() {
    let (mine, closing) = MINE.with(|m| (m.sections.iter().any(|c| c.get() != 0), m.closing.get()));
    if !mine && !closing {
        open_private_sections(close_private_sections());
        return;
    }
    CLOSERS.fetch_add(1, SeqCst);
    crate::loom::dekker_fence();
    drain_sections(|i| MINE.with(|m| m.sections[i].get()));
    CLOSERS.fetch_sub(1, SeqCst);
}

/// A closer is done ([`close_private_sections`]): sections are private again, and the next
/// closer may start.
pub(crate) fn open_private_sections(closed: Closed) {
    CLOSERS.fetch_sub(1, SeqCst);
    drop(closed);
}

/// `prepare`'s half of the private sections: close them, then move the fork count, which
/// every later section sees, here and in the child. [`open_private_sections`] (the parent)
/// or a reset (the child) follows.
#[cfg_attr(miri, allow(dead_code))] // no handlers under Miri
fn prepare_private_sections() -> Closed {
    let closed = close_private_sections();
    #[cfg(not(evfd_loom))]
    renew(FORKS, &LAST_FORKS);
    #[cfg(evfd_loom)]
    FORKS.fetch_add(1, Relaxed);
    closed
}

/// Stand-ins for a fork through libc, for the loom model (`tests::loom_fork`), which cannot
/// fork: `prepare`'s and `parent`'s halves of the private sections.
#[cfg(evfd_loom)]
pub(crate) mod model {
    /// `prepare`'s half.
    pub(crate) fn prepare() -> super::Closed {
        super::prepare_private_sections()
    }

    /// `parent`'s half.
    pub(crate) fn parent(closed: super::Closed) {
        super::open_private_sections(closed);
    }
}

/// The epoch, alone on a page of its own that [`install`] marks `MADV_WIPEONFORK`: a child
/// made by any fork-like `clone` (the handlers run or not: glibc's `_Fork`, a raw `clone(2)`
/// or `clone3(2)` without `CLONE_VM`) finds it 0, which no object's epoch is, so every
/// in-memory object made before the fork refuses there. The atfork `child` handler, when it
/// runs, then sets a new one; else the first object made in the child does ([`epoch`]).
/// Not the loom shim's atomic: written only outside the modelled protocols.
static EPOCH: EpochPage = EpochPage {
    epoch: PlainU32::new(0),
    forks: PlainU32::new(0),
    _rest: [0; EPOCH_SPAN - 8],
};

/// [`EPOCH`]'s page: aligned to and as long as the largest page Linux uses (64 KiB, on
/// arm64), so that whatever the page size, the page holding the epoch holds nothing else
/// and the wipe touches nothing else (and, zero-initialised, it lies in the anonymous
/// memory of `.bss`, the only kind the kernel wipes; only the page of the epoch is ever
/// touched, so it costs one page of memory).
#[repr(C, align(65536))]
struct EpochPage {
    epoch: PlainU32,
    /// The fork count ([`FORKS`]; under loom, the model's own atomic instead).
    #[cfg_attr(evfd_loom, allow(dead_code))]
    forks: PlainU32,
    _rest: [u8; EPOCH_SPAN - 8],
}

/// [`EpochPage`]'s size and alignment: 64 KiB.
const EPOCH_SPAN: usize = 1 << 16;

/// The last epoch this process (or, in a child, its parent line) set: kept off the wiped
/// page, so that a child's new epoch is never one its parent's objects were made in.
static LAST: PlainU32 = PlainU32::new(0);

/// The epoch after `e`, within [`EPOCH_MASK`] and never 0 (a wiped epoch).
fn next_epoch(e: u32) -> u32 {
    match e.wrapping_add(1) & EPOCH_MASK {
        0 => 1,
        n => n,
    }
}

/// The value of `word`, a number on [`EPOCH`]'s page whose last value given is `last`
/// (the epoch, the fork count), giving it one if it is 0 (never set in this process, or
/// wiped by a fork that ran no handler): the one after `last`. Threads racing here agree on
/// one value.
#[inline]
fn armed(word: &PlainU32, last: &PlainU32) -> u32 {
    match word.load(Relaxed) {
        0 => arm(word, last),
        v => v,
    }
}

/// [`armed`]'s slow half.
#[cold]
fn arm(word: &PlainU32, last: &PlainU32) -> u32 {
    use std::sync::atomic::Ordering::Acquire;
    let next = next_epoch(last.load(Relaxed));
    // `last` first: a fork that copies this process between the two finds `last` at
    // `next` at least, and gives its child a value after it.
    last.fetch_max(next, SeqCst);
    match word.compare_exchange(0, next, SeqCst, Acquire) {
        Ok(_) => next,
        Err(now) => now,
    }
}

/// Give `word` (see [`armed`]) a value after both its own and `last`: a fork's `prepare`
/// (the fork count) and the `child` handler (both). Never 0.
#[cfg_attr(any(miri, evfd_loom), allow(dead_code))] // no handlers there
fn renew(word: &PlainU32, last: &PlainU32) {
    let next = next_epoch(last.load(Relaxed).max(word.load(Relaxed)));
    last.fetch_max(next, SeqCst);
    word.store(next, SeqCst);
}

/// An epoch's bits: it wraps within them (after 2^30 forks down one line of processes).
const EPOCH_MASK: u32 = (1 << 30) - 1;
/// The bits above an epoch, free for an object's own flags in its *gate* (the epoch it
/// was made in, with flags that send its calls off the fast path): [`open`] holds only for
/// a gate without flags, in the epoch it was made in.
pub(crate) const GATE_FLAGS: u32 = !EPOCH_MASK;

/// The `pthread_atfork` handlers (not under Miri or loom, which do not run them).
#[cfg(not(any(miri, evfd_loom)))]
mod handlers {
    use std::cell::RefCell;
    use std::sync::{MutexGuard, RwLockWriteGuard};

    use super::{CLOSERS, EPOCH, FORKS, FORK_GUARD, LAST, LAST_FORKS, PRIVATE, TOPOLOGY};
    use std::sync::atomic::Ordering::SeqCst;

    /// What the forking thread holds from `prepare` to `parent`/`child`: the topology
    /// lock, the fork guard (write), its closer's turn and the registry of counts kept in
    /// memory, released in the reverse order.
    type Held = (
        MutexGuard<'static, ()>,
        RwLockWriteGuard<'static, ()>,
        super::Closed,
        crate::sys::mem_count::Flushed,
    );

    thread_local! {
        static HELD: RefCell<Option<Held>> = const { RefCell::new(None) };
    }

    extern "C" fn prepare() {
        // Registered twice (`super::install`): the second run finds the first's hold.
        if HELD.with(|h| h.borrow().is_some()) {
            return;
        }
        let t = TOPOLOGY
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let f = FORK_GUARD
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let closed = super::prepare_private_sections();
        // Every count memory keeps goes to the kernel: the child shares the descriptions
        // (`sys::mem_count`). Its registry stays locked until the fork is over.
        let flushed = crate::sys::mem_count::flush_all();
        HELD.with(|h| *h.borrow_mut() = Some((t, f, closed, flushed)));
    }

    extern "C" fn parent() {
        if let Some((t, f, closed, flushed)) = HELD.with(|h| h.borrow_mut().take()) {
            drop(flushed);
            super::open_private_sections(closed);
            drop(f);
            drop(t);
        }
    }

    extern "C" fn child() {
        // The only thread of the child. A new epoch, within `EPOCH_MASK` (so that objects
        // can put flags above an epoch, `GATE_FLAGS`) and never 0, after the parent's last
        // (`LAST`: the epoch itself was wiped, where the kernel wipes); and a new fork
        // count after the one `prepare` gave (wiped too), which the parent does not
        // have either.
        super::renew(&EPOCH.epoch, &LAST);
        super::renew(FORKS, &LAST_FORKS);
        // Sections counted by threads that do not exist here (they saw the closer and were
        // about to leave) would never end. The one closer is this fork's own (`CLOSING`).
        for s in &PRIVATE {
            s.0.store(0, SeqCst);
        }
        CLOSERS.store(0, SeqCst);
        // The handlers were registered before the fork, whoever was still finishing the
        // install in the parent (`super::install`).
        super::INSTALL.store(super::INSTALLED, SeqCst);
        if let Some((t, f, closed, flushed)) = HELD.with(|h| h.borrow_mut().take()) {
            drop(flushed);
            drop(closed);
            drop(f);
            drop(t);
        }
    }

    pub(super) fn register() {
        // The wipe first: a child whose handler runs (the registration came before its
        // fork) inherits the page's advice too.
        wipe_on_fork();
        // SAFETY: the three handlers are plain `extern "C" fn()`s that never unwind (they
        // only lock/unlock locks and touch atomics and a thread-local); registering them
        // has no other precondition. A failure (ENOMEM) leaves fork undetected, which is
        // what the crate did before; nothing else depends on it.
        let _ = unsafe { libc::pthread_atfork(Some(prepare), Some(parent), Some(child)) };
    }

    /// Mark [`EPOCH`]'s page `MADV_WIPEONFORK` (Linux 4.14): a child made without the
    /// handlers finds the epoch and the fork count 0. A refusal (an older kernel, a page the kernel does not
    /// wipe) leaves such a child undetected, as without the mark.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    fn wipe_on_fork() {
        // SAFETY: sysconf has no precondition.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
        let Ok(page) = usize::try_from(page) else {
            return;
        };
        if page == 0 || page > super::EPOCH_SPAN || super::EPOCH_SPAN % page != 0 {
            return;
        }
        let at = std::ptr::addr_of!(EPOCH).cast_mut().cast::<libc::c_void>();
        // SAFETY: `at` is the start of `EPOCH`, a static aligned to `EPOCH_SPAN`, which is a
        // multiple of the page size (checked above), and at least a page long: the advice
        // covers the one page that starts there, which is `EPOCH`'s alone, and no memory
        // of anyone else's. The advice changes nothing in this process; in a child it
        // zeroes the page, and zero is a valid `EpochPage`.
        let _ = unsafe { libc::madvise(at, page, libc::MADV_WIPEONFORK) };
    }

    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    fn wipe_on_fork() {}
}

/// Whether the handlers are installed ([`install`]): [`NOT_INSTALLED`], [`INSTALLED`], or
/// the pid of the process whose thread is installing them.
#[cfg(not(any(miri, evfd_loom)))]
static INSTALL: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(NOT_INSTALLED);
#[cfg(not(any(miri, evfd_loom)))]
const NOT_INSTALLED: u32 = 0;
#[cfg(not(any(miri, evfd_loom)))]
const INSTALLED: u32 = u32::MAX;

/// Install the handlers, once per process: the first caller registers them, and callers
/// that find a thread of this process at it wait for it (a yield loop: one
/// `pthread_atfork` and one `madvise` long).
///
/// Not a `std::sync::Once`: a fork while another thread ran it would leave the child a
/// `Once` running for ever, by a thread the child does not have, and the child's first
/// object would wait on it. Here the installer is named by its process's pid. A fork
/// during the install either comes after the registration (glibc's `fork` holds the
/// registration lock from the `prepare` handlers to the `child` ones), so the child's
/// handler runs and marks the child [`INSTALLED`], or before it, and the child finds
/// another process's pid there and installs its own. Registering twice is harmless
/// (`prepare` holds once, `handlers`), for a raw `clone` child made just after the
/// registration, which finds the parent's pid and no handler ran.
#[inline]
fn install() {
    #[cfg(not(any(miri, evfd_loom)))]
    if INSTALL.load(SeqCst) != INSTALLED {
        install_slow();
    }
}

/// [`install`]'s first time.
#[cold]
#[cfg(not(any(miri, evfd_loom)))]
fn install_slow() {
    // SAFETY: getpid has no precondition and cannot fail.
    let me = unsafe { libc::getpid() } as u32;
    let mut seen = INSTALL.load(SeqCst);
    loop {
        match seen {
            INSTALLED => return,
            s if s == me => {
                std::thread::yield_now();
                seen = INSTALL.load(SeqCst);
            }
            // Nobody, or a thread of a parent process (gone here): this thread installs.
            s => match INSTALL.compare_exchange(s, me, SeqCst, SeqCst) {
                Ok(_) => {
                    handlers::register();
                    INSTALL.store(INSTALLED, SeqCst);
                    return;
                }
                Err(now) => seen = now,
            },
        }
    }
}

/// The current epoch, for an object being made (never 0). Installs the handlers on first
/// use, and sets the first epoch of this process, or of a child made by a fork that ran no
/// handler ([`EPOCH`]).
pub(crate) fn epoch() -> u32 {
    install();
    armed(&EPOCH.epoch, &LAST)
}

/// How many forks this process (and, in a child, its ancestors) made: moved by every
/// `fork` through libc, in the parent and in the child, while no [`guard`]ed section runs.
/// Installs the handlers on first use. Read inside a guard, it cannot move until the guard
/// is dropped.
pub(crate) fn forks() -> u32 {
    install();
    #[cfg(not(evfd_loom))]
    return armed(FORKS, &LAST_FORKS);
    #[cfg(evfd_loom)]
    return FORKS.load(Relaxed);
}

/// The birth of a description the crate just made (`sys::fd::Fd::private`): whether it
/// must count as shared from the start, and the fork count it was made in ([`forks`]).
/// Read inside a [`private_section`]: the object that will hold the description may be
/// reachable before a fork that another thread is making, so the child may hold it too,
/// and `prepare` moves the count before the fork itself. A section told private started
/// before any closer rose, so a fork waits for it to end before it moves the count: the
/// count read is the one from before, and the description counts as shared after the
/// fork. A section told otherwise may be inside a fork (or a first lend: then the
/// description is shared for nothing, a slower path only): it starts shared.
pub(crate) fn birth() -> (bool, u32) {
    // Installed outside the section (an install under way on another thread is waited for).
    let _ = forks();
    private_section(|private| (!private, FORKS.load(Relaxed)))
}

/// Run `f`, told whether it may rely on a description being private as far as this section
/// goes: `false` while a closer is at work ([`close_private_sections`]: a fork being
/// prepared, a first lend). A closer waits for the sections that were told `true` to end,
/// so such a section's look (at [`forked_since`], at an fd's lent flag) and its syscall
/// both come before the fork or the lend (the Dekker pair of
/// [`close_private_sections`]). Atomics only, two RMWs of the thread's own shard, a load,
/// and this thread's count of its sections ([`MINE`], a plain cell): async-signal-safe, and
/// a handler that interrupts a section is told `true` or `false` as any section, never
/// waits. `f` must not fork nor lend (a signal handler that interrupts it may:
/// [`close_for_lend`]).
#[inline]
pub(crate) fn private_section<R>(f: impl FnOnce(bool) -> R) -> R {
    /// Ends the section however `f` leaves: the shard's count, then this thread's.
    struct End(usize);
    impl Drop for End {
        fn drop(&mut self) {
            PRIVATE[self.0].0.fetch_sub(1, SeqCst);
            mine_add(self.0, -1);
        }
    }
    let i = this_threads_shard();
    // This thread's count first, the shard's second (and the reverse at the end): a
    // handler's lend in between waits for no section it cannot see end (`close_for_lend`).
    mine_add(i, 1);
    let shard = &PRIVATE[i].0;
    shard.fetch_add(1, SeqCst);
    crate::loom::dekker_fence();
    if CLOSERS.load(SeqCst) != 0 {
        // Closed: leave at once, so that a closer's wait is never held up by sections
        // that started after it, then make the call on the shared path.
        shard.fetch_sub(1, SeqCst);
        mine_add(i, -1);
        return f(false);
    }
    let _end = End(i);
    f(true)
}

/// Whether a fork came since `born` (a [`forks`] value). Exact inside a
/// [`private_section`] told `true`: the count moves only once no such section runs, and
/// the section's increment reads the value `parent` left (after the move).
#[inline]
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn forked_since(born: u32) -> bool {
    FORKS.load(Relaxed) != born
}

/// Whether `gate` (an [`epoch`] value, maybe with [`GATE_FLAGS`] bits) is the current epoch
/// with no flag: the object was made in this process and takes its fast path. One relaxed
/// load and a compare, what [`forked`] costs, for the fork check and the object's own flags
/// at once.
#[inline(always)]
pub(crate) fn open(gate: u32) -> bool {
    EPOCH.epoch.load(Relaxed) == gate
}

/// The epoch a `gate` (see [`open`]) was made in: its flags masked off.
#[inline]
pub(crate) fn born(gate: u32) -> u32 {
    gate & EPOCH_MASK
}

/// Whether this process forked since `born` (an [`epoch`] value): the object is the
/// child's copy of a parent's object.
#[inline]
pub(crate) fn forked(born: u32) -> bool {
    EPOCH.epoch.load(Relaxed) != born
}

/// Tests: fork a child that exits at once (running nothing of the parent's), and reap it.
/// The handlers run in both processes, as for any fork through libc.
#[cfg(all(test, not(any(miri, evfd_loom))))]
pub(crate) fn fork_a_child_that_exits() {
    install();
    // SAFETY: the child only calls `_exit`, which is async-signal-safe: nothing it could
    // find locked by a thread that does not exist in it.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        // SAFETY: ends the child at once, without destructors or atexit handlers.
        unsafe { libc::_exit(0) };
    }
    let mut status = 0;
    // SAFETY: `pid` is this process's child; `status` is a valid out-pointer.
    let reaped = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(reaped, pid, "waitpid: {}", std::io::Error::last_os_error());
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
pub(crate) fn refused(what: &str) -> std::io::Error {
    refused_because(
        what,
        "its in-memory state is the parent's, so a child process cannot use it",
        "create a new one in the child, or share a KernelNotifier",
    )
}

/// The fork refusal for an object whose refusal has a reason and a remedy of its own (a
/// `SharedFdView`: its state is shared, its registration is not).
#[cold]
pub(crate) fn refused_because(what: &str, why: &str, advice: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        format!("this {what} was created before fork(): {why} ({advice})"),
    )
}
