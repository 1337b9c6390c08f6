//! [`MemCount`]: the count of a private AutoReset eventfd, kept in memory while no peer can
//! reach its open file description.
//!
//! # The count in memory
//!
//! A `KernelNotifier` in [`Mode::AutoReset`](crate::Mode::AutoReset) that the crate made
//! close-on-exec is private until its fd is lent, cloned, given away, or the process forks
//! (`super::fd`): every read and write of its count is the crate's own. While that holds, the
//! count lives in a word of memory, and the kernel's count is a constant 1, the *base*:
//!
//! - a read (a `try_read`, an AutoReset delivery, an `Epoll`'s collect) is a compare-and-swap
//!   of the word, no syscall;
//! - a write is a compare-and-swap of the word and then a `write(2)` of 0, which wakes the
//!   eventfd's queue (every poller and epoll item on it) without changing its count. An
//!   edge-triggered epoll item is polled again before it is reported and dropped at count 0;
//!   at count 1, the base, it is reported. So the kernel hears every write, as it would a
//!   real one, and one syscall is saved per read;
//! - the fd is readable for ever meanwhile, so every kernel registration of it is
//!   edge-triggered (`Registrations::kernel_events`, the `Epoll`'s kernel item, the async
//!   waits' own epoll; mio's and tokio's are edge-triggered anyway), and a use that needs the
//!   kernel's count (a write that finds no room, an `Epoll` item for more than `IN`)
//!   flushes first;
//! - a blocking read that finds the count empty sleeps on a futex of the count's own
//!   ([`MemCount::take_waiting`]), which a write that finds a sleeper rings, and so does the
//!   flush (its sleepers then wait in the kernel).
//!
//! # The flush
//!
//! [`MemCount::flush`] moves the count into the kernel, for good: it takes the word with a
//! swap (leaving [`FLUSHED`], above `LIMIT`), makes one syscall over the base (`write(2)` of
//! `v − 1`, or a `read(2)` of the base for `v = 0`), then marks `done`. The first lend, a
//! clone, the fd given away and a fork's `prepare` ([`flush_all`]) flush before the
//! description can reach anyone else; the description is still the crate's then, so the
//! syscall is a plain one on its `O_NONBLOCK` description.
//!
//! - **Memory operations need no lock and no private section.** Each is a compare-and-swap of
//!   the word, so it is before the flush's swap (its units are in the value flushed) or it
//!   sees `FLUSHED` and goes to the kernel. A write's `write(2)` of 0 may land after the
//!   flush, even after the lend: it changes no count, and a write of 0 does not block
//!   whatever a peer did to `O_NONBLOCK` (the kernel makes a writer wait only while
//!   `2^64 − 1 − count ≤ n`, so for `n = 0` only at a count of 2^64 − 1, which only the
//!   kernel's own signalling reaches, on an fd lent to it).
//! - **A kernel operation waits for `done`** ([`MemCount::ready`]): between the swap and the
//!   syscall the kernel's count is the base, which a read would take for a unit, and for
//!   `v = 0` a write's units would be read away with it. The wait is one syscall long.
//! - **A signal handler that interrupted the flusher, on its thread,** cannot wait for it.
//!   Its write goes to the pending word ([`MemCount::add_pending`]), which the flusher
//!   writes to the kernel after its own write (and once more after `done`, for a handler
//!   that ran between the two); its read finds the count empty (`WouldBlock`) while the
//!   count is on its way; its own flush of the fd (a lend in the handler) returns at once,
//!   with the count still on its way, so a borrow it lends there sees the base until the
//!   handler returns (the same corner as `super::fd`'s for `O_NONBLOCK`). The thread that
//!   flushes claims the flush (its id, compared and
//!   swapped into the count's `flusher`) before it takes the word, so that a handler
//!   knows, at any point of the flush, that it runs on the flusher's thread.
//! - **Fork.** The child would get a copy of every word, so a fork's `prepare` flushes every
//!   count memory keeps ([`flush_all`], a registry of the fds, held weakly); the child sees
//!   only `FLUSHED`. A fork that skips the handlers (a raw `clone`) would leave the parent and
//!   the child two counts (docs/semantics.md §6.4 names that gap for the description's
//!   flags already).
//!
//! LOCKING: one lock, the registry's (`FDS`), a leaf. [`register`] holds it to push an fd;
//! a fork's `prepare` holds it from [`flush_all`] until the fork is over (`super::fork`),
//! so that no fd enters between the flush and the fork and the child never inherits it
//! held. Under it a flush may wait for another thread's flush of the same fd, which is
//! one syscall and takes no lock. The counts themselves take no lock.
//!
//! loom: `tests::loom_mem_count` (a write and a read against a flush; a write against a
//! flush from zero; a blocking read against a write, and against a flush).

// Only a `KernelNotifier` keeps its count in memory (Linux): elsewhere memory never does.
#![cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]

use std::io;
use std::os::fd::BorrowedFd;
use std::sync::{Mutex, MutexGuard, Weak};

use crate::loom::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::SeqCst};
use crate::loom::SeedLoad;

/// [`MemCount::word`] once a flush took the count (above `LIMIT`: no count is this).
const FLUSHED: u64 = u64::MAX;

/// The count of a private AutoReset eventfd, kept in memory (module docs).
#[derive(Debug)]
pub(crate) struct MemCount {
    /// The count, or [`FLUSHED`] once a flush took it.
    word: AtomicU64,
    /// The kernel holds the count (the flush's syscall returned); true from birth for an
    /// fd whose count memory never kept.
    done: AtomicBool,
    /// Units written during a flush by a signal handler on the flusher's own thread,
    /// written to the kernel by the flusher.
    pending: AtomicU64,
    /// The thread that flushes ([`thread_id`]), claimed before the swap, so that a signal
    /// handler on it, at any point of the flush, knows it cannot wait for it; 0 before.
    flusher: AtomicUsize,
    /// The value it flushes, once swapped out (`LIMIT` before: a handler's write in that
    /// instant is refused as if the count were full, rather than risk passing it).
    flushing: AtomicU64,
    /// Threads in a blocking read of an empty count ([`MemCount::take_waiting`]).
    sleepers: AtomicU32,
    /// What they sleep on (a futex word): moved by a write, and by the flush, that finds
    /// sleepers ([`MemCount::ring`]).
    bell: AtomicU32,
}

/// A kernel call found its own thread flushing the fd (a signal handler that interrupted
/// the flush): the value being flushed.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Flushing(u64);

impl MemCount {
    /// Memory keeps no count: the kernel's is the count.
    pub(crate) fn off() -> MemCount {
        MemCount {
            word: AtomicU64::new(FLUSHED),
            done: AtomicBool::new(true),
            pending: AtomicU64::new(0),
            flusher: AtomicUsize::new(0),
            flushing: AtomicU64::new(crate::mode::LIMIT),
            sleepers: AtomicU32::new(0),
            bell: AtomicU32::new(0),
        }
    }

    /// Memory keeps the count, `initial` (the kernel's is the base, 1).
    pub(crate) fn on(initial: u64) -> MemCount {
        MemCount {
            word: AtomicU64::new(initial),
            done: AtomicBool::new(false),
            pending: AtomicU64::new(0),
            flusher: AtomicUsize::new(0),
            flushing: AtomicU64::new(crate::mode::LIMIT),
            sleepers: AtomicU32::new(0),
            bell: AtomicU32::new(0),
        }
    }

    /// Take the whole count: `Err` at 0, `None` when memory does not keep it.
    #[inline]
    pub(crate) fn take(&self) -> Option<Result<u64, ()>> {
        let mut cur = self.word.seed_load();
        loop {
            if cur == FLUSHED {
                return None;
            }
            if cur == 0 {
                return Some(Err(()));
            }
            match self.word.compare_exchange_weak(cur, 0, SeqCst, SeqCst) {
                Ok(_) => return Some(Ok(cur)),
                Err(seen) => cur = seen,
            }
        }
    }

    /// Add `n`: `Err` if the count would pass `LIMIT`, `None` when memory does not keep
    /// it. The caller then makes the kernel's wake (module docs).
    #[inline]
    pub(crate) fn add(&self, n: u64) -> Option<Result<(), ()>> {
        let mut cur = self.word.seed_load();
        loop {
            if cur == FLUSHED {
                return None;
            }
            if crate::mode::LIMIT - cur < n {
                return Some(Err(()));
            }
            match self
                .word
                .compare_exchange_weak(cur, cur + n, SeqCst, SeqCst)
            {
                Ok(_) => return Some(Ok(())),
                Err(seen) => cur = seen,
            }
        }
    }

    /// A blocking read of the whole count: it waits while the count is 0, asleep on
    /// `bell` (`sleep(bell, seen)` sleeps while the bell holds `seen`, and says whether the
    /// deadline passed), until a write or the flush rings it ([`MemCount::ring`]). `None`
    /// once memory does not keep the count (the kernel's wait follows); `Err` when the
    /// deadline passed with the count still 0.
    ///
    /// A sleeper counts itself in `sleepers` before it looks at the bell and then the
    /// count; a write adds to the count before it looks at `sleepers`. So either the
    /// sleeper's look finds the write's units, or the write finds the sleeper and moves
    /// the bell, after the sleeper read it (the sleep returns at once) or before (the
    /// look found the units). The flush's swap is the same as a write for this.
    pub(crate) fn take_waiting(
        &self,
        mut sleep: impl FnMut(&AtomicU32, u32) -> bool,
    ) -> Option<Result<u64, ()>> {
        loop {
            match self.take()? {
                Err(()) => {}
                r => return Some(r),
            }
            self.sleepers.fetch_add(1, SeqCst);
            crate::loom::dekker_fence();
            let seen = self.bell.load(SeqCst);
            let r = self.take();
            let timed_out = matches!(r, Some(Err(()))) && sleep(&self.bell, seen);
            self.sleepers.fetch_sub(1, SeqCst);
            match r? {
                Err(()) => {}
                r => return Some(r),
            }
            if timed_out {
                // A last look: units that came with the deadline are taken.
                return self.take();
            }
        }
    }

    /// After a write's units are in the count (or the flush took it): wake the sleepers of
    /// [`MemCount::take_waiting`], if there are any (`wake(bell)`, after the bell moved).
    /// One load when there are none.
    #[inline]
    pub(crate) fn ring(&self, wake: impl FnOnce(&AtomicU32)) {
        crate::loom::dekker_fence();
        if self.sleepers.load(SeqCst) != 0 {
            self.bell.fetch_add(1, SeqCst);
            wake(&self.bell);
        }
    }

    /// The count, or `None` when memory does not keep it.
    pub(crate) fn peek(&self) -> Option<u64> {
        Some(self.word.load(SeqCst)).filter(|&c| c != FLUSHED)
    }

    /// Whether memory keeps the count or is flushing it (its fd's kernel registrations must
    /// be edge-triggered).
    pub(crate) fn kept(&self) -> bool {
        !self.done.load(SeqCst)
    }

    /// Before a kernel call on the count: `Ok` once the kernel holds it, after `flush` (the
    /// owner's [`MemCount::flush`], which waits for one under way); `Err` on the flusher's
    /// own thread, which cannot wait (module docs).
    #[inline]
    pub(crate) fn ready(&self, flush: impl FnOnce()) -> Result<(), Flushing> {
        if self.done.load(SeqCst) {
            return Ok(());
        }
        if self.flusher.load(SeqCst) == thread_id() {
            return Err(Flushing(self.flushing.load(SeqCst)));
        }
        flush();
        Ok(())
    }

    /// A handler's write of `n` during its own thread's flush (`v` is being flushed): into
    /// the pending word; `Err` if the count would pass `LIMIT`.
    pub(crate) fn add_pending(&self, v: Flushing, n: u64) -> Result<(), ()> {
        let cur = self.pending.load(SeqCst);
        if crate::mode::LIMIT - v.0 - cur < n {
            return Err(());
        }
        // Only this thread's handlers add, and the flusher they interrupted is suspended.
        self.pending.store(cur + n, SeqCst);
        Ok(())
    }

    /// The flush (module docs) on `fd`, the eventfd: one syscall over the base. A flush
    /// under way on another thread is waited for; on the flusher's own thread (a handler)
    /// this returns at once.
    pub(crate) fn flush(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        self.flush_with(
            |v| {
                if v == 0 {
                    let mut b = [0u8; 8];
                    retry(|| rustix::io::read(fd, &mut b)).map(drop)
                } else {
                    write(fd, v - 1)
                }
            },
            |p| {
                // Fits: `add_pending` checked it against the value flushed.
                let _ = write(fd, p);
            },
            wake,
        )
    }

    /// [`MemCount::flush`] with the kernel's two operations given: `set(v)` makes the
    /// kernel's count `v` from the base, `add(p)` adds the pending units; and the wake of
    /// the sleepers of [`MemCount::take_waiting`] (who go to the kernel's wait).
    pub(crate) fn flush_with(
        &self,
        set: impl FnOnce(u64) -> io::Result<()>,
        mut add: impl FnMut(u64),
        wake_sleepers: impl FnOnce(&AtomicU32),
    ) -> io::Result<()> {
        if self.done.load(SeqCst) {
            return Ok(());
        }
        let me = thread_id();
        if let Err(other) = self.flusher.compare_exchange(0, me, SeqCst, SeqCst) {
            // Another thread flushes: wait for it (one syscall). Or this thread does, and
            // this is a signal handler that interrupted it: nothing to wait for here.
            while other != me && !self.done.load(SeqCst) {
                crate::loom::thread::yield_now();
            }
            return Ok(());
        }
        let v = self.word.swap(FLUSHED, SeqCst);
        self.flushing.store(v, SeqCst);
        let r = set(v);
        // A handler's writes before `done`, then `done`, then those of a handler that ran
        // between the two.
        let mut pending = || {
            let p = self.pending.swap(0, SeqCst);
            if p != 0 {
                add(p);
            }
        };
        pending();
        self.done.store(true, SeqCst);
        pending();
        self.ring(wake_sleepers);
        r
    }
}

/// The futex wake of [`MemCount::ring`]: every sleeper (a sleeper woken for units another
/// took sleeps again; there is rarely more than one).
pub(crate) fn wake(bell: &AtomicU32) {
    #[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
    let _ = super::futex::wake_private(bell, u32::MAX);
    #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(evfd_loom))))]
    let _ = bell;
}

/// The sleep of [`MemCount::take_waiting`]: a futex wait on the bell while it holds
/// `seen`, until `deadline`; whether the deadline passed. (Under loom, and where there is
/// no futex, a yield: the caller looks again.)
pub(crate) fn sleep_until(
    deadline: Option<std::time::Instant>,
) -> impl FnMut(&AtomicU32, u32) -> bool {
    move |bell, seen| {
        #[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
        {
            matches!(
                super::futex::wait_private(bell, seen, deadline),
                Ok(super::futex::Woke::TimedOut)
            )
        }
        #[cfg(not(all(any(target_os = "linux", target_os = "android"), not(evfd_loom))))]
        {
            let _ = (bell, seen);
            crate::loom::thread::yield_now();
            deadline.is_some_and(|d| std::time::Instant::now() >= d)
        }
    }
}

/// One 8-byte `write(2)` of `n` to the eventfd (`n = 0`: the kernel's wake of a write to a
/// count memory keeps, module docs); `EINTR` retried.
pub(crate) fn write(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    retry(|| rustix::io::write(fd, &n.to_ne_bytes())).map(drop)
}

fn retry<T>(mut f: impl FnMut() -> rustix::io::Result<T>) -> io::Result<T> {
    loop {
        match f() {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r.map_err(Into::into),
        }
    }
}

#[cfg(not(evfd_loom))]
std::thread_local! {
    /// Its address is the thread's id for [`MemCount::flusher`].
    static ID: u8 = const { 0 };
}
#[cfg(evfd_loom)]
loom::thread_local! {
    static ID: u8 = 0;
}

/// This thread's id: the address of a thread-local, never 0 (1 once the thread-local is
/// gone, at thread exit: no flush runs then).
fn thread_id() -> usize {
    ID.try_with(|x| x as *const u8 as usize).unwrap_or(1)
}

/// What a fork's `prepare` flushes: an fd whose count memory keeps.
pub(crate) trait Flush: Send + Sync {
    /// [`MemCount::flush`] on the fd.
    fn flush(&self) -> io::Result<()>;
    /// [`MemCount::kept`].
    fn kept(&self) -> bool;
}

/// The fds whose count memory keeps (held weakly: a dropped one is skipped, and the list is
/// pruned as it grows), and its length at the last prune.
static FDS: Mutex<(Vec<Weak<dyn Flush>>, usize)> = Mutex::new((Vec::new(), 0));

/// Enter the registry [`flush_all`] walks.
pub(crate) fn register(fd: Weak<dyn Flush>) {
    let mut g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    let (v, pruned) = &mut *g;
    if v.len() >= 2 * (*pruned).max(16) {
        v.retain(|w| w.upgrade().is_some_and(|f| f.kept()));
        *pruned = v.len();
    }
    v.push(fd);
}

/// The registry ([`FDS`]) held by a fork's `prepare` from [`flush_all`] to `parent` or
/// `child`: an fd that enters it after the flush (another thread making a notifier) waits
/// until the fork is over, so the child inherits no count in memory it could reach, and
/// never inherits the registry's lock held by a thread it does not have.
#[cfg_attr(any(miri, evfd_loom), allow(dead_code))]
pub(crate) struct Flushed(#[allow(dead_code)] MutexGuard<'static, (Vec<Weak<dyn Flush>>, usize)>);

/// Flush every count memory keeps (a fork's `prepare`): the child gets none. The registry
/// stays locked until the returned [`Flushed`] is dropped, after the fork.
#[cfg_attr(any(miri, evfd_loom), allow(dead_code))]
pub(crate) fn flush_all() -> Flushed {
    let mut g = FDS.lock().unwrap_or_else(|e| e.into_inner());
    for w in g.0.drain(..) {
        if let Some(fd) = w.upgrade() {
            let _ = fd.flush();
        }
    }
    g.1 = 0;
    Flushed(g)
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::*;
    use std::cell::Cell;

    /// The flush over a kernel count in a cell (the base, 1, at the start).
    fn flush(m: &MemCount, kernel: &Cell<u64>, during: impl FnOnce()) {
        m.flush_with(
            |v| {
                // What a signal handler on this thread would find, in the middle of it.
                during();
                if v == 0 {
                    assert_eq!(kernel.replace(0), 1, "the base");
                } else {
                    kernel.set(kernel.get() + v - 1);
                }
                Ok(())
            },
            |p| kernel.set(kernel.get() + p),
            |_| {},
        )
        .unwrap();
    }

    #[test]
    fn memory_operations_until_the_flush() {
        let m = MemCount::on(2);
        assert_eq!(m.add(3), Some(Ok(())));
        assert_eq!(m.add(crate::mode::LIMIT), Some(Err(())));
        assert_eq!(m.take(), Some(Ok(5)));
        assert_eq!(m.take(), Some(Err(())));
        assert_eq!(m.peek(), Some(0));
        assert!(m.kept());
        let kernel = Cell::new(1);
        m.add(4).unwrap().unwrap();
        flush(&m, &kernel, || {});
        assert_eq!(kernel.get(), 4);
        assert!(!m.kept());
        assert_eq!(m.take(), None);
        assert_eq!(m.add(1), None);
        assert_eq!(m.peek(), None);
        assert!(m.ready(|| unreachable!("done")).is_ok());
        // A second flush finds it done.
        flush(&m, &kernel, || unreachable!("done"));
    }

    /// A signal handler that interrupted the flush on its own thread: its write goes to the
    /// pending word (the flusher adds it after its own), its read finds the count empty,
    /// its own flush returns at once, and it never waits.
    #[test]
    fn a_handler_during_its_threads_flush() {
        for v in [0, 3] {
            let m = MemCount::on(v);
            let kernel = Cell::new(1);
            flush(&m, &kernel, || {
                assert_eq!(m.add(2), None, "the word is taken");
                let f = m
                    .ready(|| unreachable!("a handler cannot wait"))
                    .unwrap_err();
                assert_eq!(f.0, v);
                m.add_pending(f, 2).unwrap();
                assert!(
                    m.add_pending(f, crate::mode::LIMIT).is_err(),
                    "would pass LIMIT"
                );
                // Its own flush (a lend in the handler) returns at once.
                m.flush_with(|_| unreachable!(), |_| unreachable!(), |_| unreachable!())
                    .unwrap();
            });
            assert_eq!(
                kernel.get(),
                v + 2,
                "v {v}: the flushed count and the handler's"
            );
        }
    }
}
