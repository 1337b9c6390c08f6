//! [`Notifier`]: a `u64` counter with eventfd(2) semantics, guarded by a [`WaitQueue`].
//!
//! # LOCKING
//!
//! ```text
//! Inner::count      AtomicU64, lock-free. Every change is one SeqCst RMW (CAS or swap).
//! Inner::wq         WaitQueue (its own Mutex, see wait_queue): blocked readers (IN,
//!                   exclusive, FIFO), blocked writers (OUT), epoll items (callbacks),
//!                   futures (task wakers).
//! ```
//!
//! No lock is held while the count changes. The count and the wait queue are tied together
//! by the Dekker pair documented in `wait_queue`: a state change (SeqCst RMW on `count`) is
//! followed by a SeqCst load of the queue's `interest`; a waiter publishes its interest
//! (SeqCst, under the queue lock) and then re-checks `count` (SeqCst). So the uncontended
//! `write(1)` + `read()` pair is two RMWs and two loads: no lock, no syscall.
//!
//! # Hand-on
//!
//! A wake that removed a waiter's entry is owed to somebody. A waiter that was woken and
//! leaves (it succeeded, or timed out) while the notifier is still ready for what it waited
//! for wakes the next one, so no wake is lost to a waiter that did not use it.

pub(crate) mod future;
// Public as `evfd::halves` (re-exported by the crate root with its docs).
pub mod halves;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) mod kernel;
#[cfg(evfd_kernel_side)]
pub(crate) mod registrations;
#[cfg(not(evfd_loom))]
pub(crate) mod signal;
pub(crate) mod signal_slot;
#[cfg(feature = "futures")]
pub(crate) mod stream;

use std::fmt;
use std::io;
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::events::{next_id, Events, KEY_EMPTIED};
use crate::loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use crate::loom::SeedLoad;
use crate::mode::{self, invalid_write, write_refused, Mode, Options, WriteRefused};
use crate::wait_queue::spin::SpinGauge;
use crate::wait_queue::thread::{self, QueueSleeper};
use crate::wait_queue::{Due, WaitFor, WaitQueue, WakeBatch};

/// The key of the wake after a consumption that left the count at 0
/// ([`Inner::wake_after_consume`]).
const EMPTIED: Events = Events::OUT.union(KEY_EMPTIED);

/// In [`Inner::gate`]: `NONBLOCK` (`read` and `write` are `try_read` and `try_write`).
const GATE_NONBLOCK: u32 = 1 << 31;
/// In [`Inner::gate`]: Semaphore mode (a read takes one unit, not the whole count).
const GATE_SEMAPHORE: u32 = 1 << 30;
const _: () = assert!(
    (GATE_NONBLOCK | GATE_SEMAPHORE) & !crate::sys::fork::GATE_FLAGS == 0,
    "the gate's flags are above every epoch"
);

/// The shared state behind every clone of a [`Notifier`]. Cache-line aligned (128: the
/// adjacent-line prefetcher pairs lines) so that two notifiers used by two threads never
/// share a line: the uncontended path must not contend with anyone.
///
/// Laid out in order (`repr(C)`): the first line holds what every `write` and `read` and
/// every harvest of the notifier's epoll item look at — the count, the gate, the mode —
/// and the wait queue starts the next line ([`WaitQueue`] is line-aligned), so a harvest
/// fetches one line of the notifier, and the load of the queue's interest that follows a
/// write's compare-and-swap is not on the line the swap holds.
#[repr(C, align(128))]
pub(crate) struct Inner {
    /// The counter. Lock-free; see the module LOCKING notes.
    pub(crate) count: AtomicU64,
    /// The fork epoch it was made in (`sys::fork`; in a child process it is refused), with
    /// the flags that send `read` and `write` off their fast path above it:
    /// [`GATE_NONBLOCK`] and [`GATE_SEMAPHORE`]. `sys::fork::open(gate)` is the fast path's
    /// one test: made in this process, blocking, a mode whose read takes the whole count.
    gate: u32,
    pub(crate) mode: Mode,
    /// `EFD_NONBLOCK`: `read`/`write` behave as `try_read`/`try_write`.
    nonblock: bool,
    /// `EFD_CLOEXEC`: applied to every fd this notifier hands out.
    pub(crate) cloexec: bool,
    /// Identity for epoll interest sets (never reused).
    pub(crate) id: u64,
    /// Everything that waits on this notifier.
    pub(crate) wq: WaitQueue,
    /// How long blocking calls spin before parking, learned from their recent waits.
    pub(crate) spin: SpinGauge,
}

// The first line: the count and what the fast paths and the harvest check beside it.
#[cfg(not(evfd_loom))]
const _: () = assert!(std::mem::align_of::<WaitQueue>() == 64);

/// What the user's handles share. Epoll items hold the [`Inner`] itself (to poll it
/// without upgrading a `Weak` on every event); the notifier counts as closed when the last
/// handle goes, exactly like a file whose last descriptor is closed.
pub(crate) struct Handle {
    pub(crate) core: Arc<Inner>,
}

impl std::ops::Deref for Handle {
    type Target = Inner;
    fn deref(&self) -> &Inner {
        &self.core
    }
}

impl Drop for Handle {
    fn drop(&mut self) {
        if self.core.forked() {
            // The child's copy of a parent's notifier: take no lock (one may have been held
            // at the fork) and free nothing; the copy lives until the child exits or execs.
            std::mem::forget(Arc::clone(&self.core));
            return;
        }
        // Like a closed file: leave every epoll silently.
        self.core.wq.detach_all();
    }
}

/// An eventfd-style notifier: a `u64` counter with blocking, non-blocking, timed and async
/// reads and writes, at memory speed.
///
/// Cloning gives another handle to the same notifier. The semantics are eventfd(2)'s
/// (see [`Mode`] for the three modes): counts up to [`LIMIT`](crate::LIMIT) (`0xffff_ffff_ffff_fffe`);
/// a write that would pass it waits (or fails with `WouldBlock`); a read of zero waits (or
/// fails with `WouldBlock`). A failed call changes nothing.
///
/// # Fork
///
/// In-memory: a child process made by `fork` gets a private copy, not a share. In the
/// child, a notifier made before the fork refuses every fallible call with an error of
/// kind [`Unsupported`](std::io::ErrorKind::Unsupported) (the message says it was created
/// before `fork()`), and `poll` reports `ERR | HUP`. It takes no lock (one held by another
/// parent thread at the fork would be held forever) and touches nothing it shares with the
/// parent (its fd views' doorbells); dropping it takes no lock and frees nothing. Make a
/// new one in the child, or share a [`KernelNotifier`](crate::KernelNotifier) or a
/// [`SharedNotifier`](crate::SharedNotifier). Rules and reasons: docs/semantics.md §6.1.
///
/// # Panicking wakers
///
/// The wakers of pending futures (and of epolls watching this notifier) run after every
/// lock is released, in the thread whose call made them due: a write wakes readers, a
/// read or an AutoReset delivery wakes writers. If one panics, the panic unwinds out of
/// that call after its effect (the units written, or taken and not returned); every other
/// owed wake still runs; the notifier stays consistent and usable. Rules:
/// docs/semantics.md §6.2.
///
/// # Examples
///
/// ```
/// use evfd::Notifier;
/// let n = Notifier::new();
/// let n2 = n.clone();
/// std::thread::spawn(move || n2.write(3).unwrap()).join().unwrap();
/// assert_eq!(n.read().unwrap(), 3);
/// assert_eq!(n.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// ```
#[derive(Clone)]
pub struct Notifier {
    /// The user's handle: its last clone's drop closes the notifier (`Handle`); what an fd
    /// view holds to keep it open.
    pub(crate) handle: Arc<Handle>,
    /// The same `Inner` as `handle.core`, held directly: the fast paths reach the count
    /// with one load from `self` instead of two.
    pub(crate) core: Arc<Inner>,
}

impl fmt::Debug for Notifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.core.forked() {
            return f.write_str("Notifier { <created before fork> }");
        }
        f.debug_struct("Notifier")
            .field("mode", &self.core.mode)
            .field("count", &self.core.count.load(SeqCst))
            .field("nonblocking", &self.core.nonblock)
            .field("waiters", &self.core.wq.len())
            .finish()
    }
}

impl Default for Notifier {
    fn default() -> Self {
        Notifier::new()
    }
}

crate::mode::builder! {
    /// Builds a [`Notifier`] with a chosen [`Mode`], initial count and blocking behaviour.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Mode, Notifier};
    /// let n = Notifier::builder().mode(Mode::AutoReset).initial(5).build().unwrap();
    /// assert_eq!(n.read().unwrap(), 5);
    /// assert!(Notifier::builder().initial(u64::MAX).build().is_err());
    /// ```
    pub struct NotifierBuilder => Notifier { cloexec: true }
    fn initial;
    fn nonblocking;
    /// Whether every fd this notifier later hands out (its fd views) is close-on-exec
    /// (`EFD_CLOEXEC`). Default `true`, as for every kind and every fd Rust's standard
    /// library opens; [`Notifier::from_flags`] follows `eventfd2` (off unless
    /// `flags::CLOEXEC`).
    ///
    /// ```
    /// assert!(evfd::Notifier::new().is_cloexec());
    /// let n = evfd::Notifier::builder().cloexec(false).build().unwrap();
    /// assert!(!n.is_cloexec());
    /// ```
    fn cloexec;
}

impl NotifierBuilder {
    /// Build the notifier.
    ///
    /// # Errors
    ///
    /// `EINVAL` (`InvalidInput`) if the initial count is above [`LIMIT`](crate::LIMIT).
    ///
    /// ```
    /// let e = evfd::Notifier::builder().initial(u64::MAX).build().unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn build(self) -> io::Result<Notifier> {
        let o = self.opts;
        o.check()?;
        let born = crate::sys::fork::epoch();
        let core = Arc::new(Inner {
            count: AtomicU64::new(o.initial),
            mode: o.mode,
            nonblock: o.nonblock,
            cloexec: o.cloexec,
            id: next_id(),
            gate: born
                | if o.nonblock { GATE_NONBLOCK } else { 0 }
                | if o.mode == Mode::Semaphore {
                    GATE_SEMAPHORE
                } else {
                    0
                },
            wq: WaitQueue::new(),
            spin: SpinGauge::new(),
        });
        Ok(Notifier {
            handle: Arc::new(Handle {
                core: Arc::clone(&core),
            }),
            core,
        })
    }
}

use crate::error::would_block;

// The other `impl Notifier` blocks: the async API in `future` and `stream` (beside their
// types, in this folder), and `fd_view` in `crate::fd` (it builds an `FdView`, a type of
// the layer above this one).
impl Notifier {
    /// A [`Mode::Counter`] notifier with count 0.
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// assert_eq!(n.count(), 0);
    /// assert_eq!(n.mode(), evfd::Mode::Counter);
    /// ```
    pub fn new() -> Notifier {
        NotifierBuilder::default()
            .build()
            .expect("count 0 is valid")
    }

    /// A builder for a notifier with another mode, initial count or flags.
    ///
    /// ```
    /// let n = evfd::Notifier::builder().mode(evfd::Mode::Semaphore).initial(3).build().unwrap();
    /// assert_eq!(n.read().unwrap(), 1);
    /// assert_eq!(n.count(), 2);
    /// ```
    pub fn builder() -> NotifierBuilder {
        NotifierBuilder::default()
    }

    /// The compatibility constructor: `eventfd2(initial, flags)` with Linux flag values
    /// ([`flags::SEMAPHORE`](crate::flags::SEMAPHORE), [`flags::NONBLOCK`](crate::flags::NONBLOCK),
    /// [`flags::CLOEXEC`](crate::flags::CLOEXEC), and the RFC's
    /// [`flags::AUTORESET`](crate::flags::AUTORESET)).
    ///
    /// # Errors
    ///
    /// `EINVAL` (`InvalidInput`) for an unknown bit (as `eventfd2`), for
    /// `SEMAPHORE | AUTORESET` (as in the RFC), and for an initial count above
    /// [`LIMIT`](crate::LIMIT).
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{flags, Mode, Notifier};
    /// let n = Notifier::from_flags(2, flags::SEMAPHORE | flags::NONBLOCK).unwrap();
    /// assert_eq!(n.mode(), Mode::Semaphore);
    /// assert_eq!(n.read().unwrap(), 1);
    /// assert_eq!(n.read().unwrap(), 1);
    /// assert_eq!(n.read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// let e = Notifier::from_flags(0, flags::SEMAPHORE | flags::AUTORESET).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// assert!(Notifier::from_flags(0, 0x8).is_err());
    /// ```
    #[doc(alias = "eventfd")]
    #[doc(alias = "eventfd2")]
    pub fn from_flags(initial: u64, flags: u32) -> io::Result<Notifier> {
        NotifierBuilder {
            opts: Options::from_flags(initial, flags)?,
        }
        .build()
    }

    /// The mode this notifier was created with.
    ///
    /// ```
    /// assert_eq!(evfd::Notifier::new().mode(), evfd::Mode::Counter);
    /// ```
    #[inline]
    pub fn mode(&self) -> Mode {
        self.core.mode
    }

    /// Whether `read`/`write` are non-blocking (`EFD_NONBLOCK`).
    ///
    /// ```
    /// assert!(!evfd::Notifier::new().is_nonblocking());
    /// ```
    #[inline]
    pub fn is_nonblocking(&self) -> bool {
        self.core.nonblock
    }

    /// Whether fds handed out by this notifier are close-on-exec (`EFD_CLOEXEC`).
    ///
    /// ```
    /// let n = evfd::Notifier::from_flags(0, evfd::flags::CLOEXEC).unwrap();
    /// assert!(n.is_cloexec());
    /// ```
    #[inline]
    pub fn is_cloexec(&self) -> bool {
        self.core.cloexec
    }

    /// A snapshot of the count (what `/proc/self/fdinfo` shows as `eventfd-count`).
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// n.write(4).unwrap();
    /// assert_eq!(n.count(), 4);
    /// ```
    #[inline]
    pub fn count(&self) -> u64 {
        self.core.count.load(SeqCst)
    }

    /// Whether two handles are the same notifier.
    ///
    /// ```
    /// let a = evfd::Notifier::new();
    /// assert!(a.ptr_eq(&a.clone()));
    /// assert!(!a.ptr_eq(&evfd::Notifier::new()));
    /// ```
    #[inline]
    pub fn ptr_eq(&self, other: &Notifier) -> bool {
        Arc::ptr_eq(&self.core, &other.core)
    }

    /// Add `n` to the count without waiting.
    ///
    /// Wakes readers (`IN`) even for `n == 0`, as eventfd does: an edge-triggered epoll item
    /// is re-armed by it.
    ///
    /// Not async-signal-safe (its wake takes locks and runs wakers): from a signal handler
    /// use [`SignalNotifier`](crate::SignalNotifier) (docs/semantics.md §6.3).
    ///
    /// # Errors
    ///
    /// As `write(2)` on a non-blocking eventfd: `EINVAL` (`InvalidInput`) for
    /// `n == u64::MAX`; `EAGAIN` (`WouldBlock`) if the count would pass
    /// [`LIMIT`](crate::LIMIT). Nothing changes on error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// let n = evfd::Notifier::new();
    /// n.try_write(evfd::LIMIT).unwrap();
    /// assert_eq!(n.try_write(1).unwrap_err().kind(), ErrorKind::WouldBlock);
    /// assert_eq!(n.try_write(u64::MAX).unwrap_err().kind(), ErrorKind::InvalidInput);
    /// assert_eq!(n.count(), evfd::LIMIT);
    /// ```
    #[inline]
    pub fn try_write(&self, n: u64) -> io::Result<()> {
        // `write`'s fast path and gate; a refusal is built out of line.
        if !crate::sys::fork::open(self.core.gate) {
            return self.try_write_gated(n);
        }
        match self.core.add(n) {
            Ok(None) => Ok(()),
            Ok(Some(due)) => self.core.write_rest(n, Some(due)),
            Err(refused) => Err(write_refused(refused)),
        }
    }

    /// [`try_write`](Self::try_write) when its gate is closed: refused after a fork, else
    /// (`NONBLOCK`, Semaphore) the same lock-free write; also every write form of a
    /// `NONBLOCK` notifier, whose gate is always closed. Out of line, as
    /// [`write_gated`](Self::write_gated).
    #[inline(never)]
    fn try_write_gated(&self, n: u64) -> io::Result<()> {
        self.core.check()?;
        self.core.try_write(n).map_err(write_refused)
    }

    /// Add `n` to the count, waiting for room if it would pass [`LIMIT`](crate::LIMIT) (a later read makes
    /// room). With `NONBLOCK`, behaves as [`try_write`](Self::try_write).
    ///
    /// Not async-signal-safe (its wake takes locks and runs wakers): from a signal handler
    /// use [`SignalNotifier`](crate::SignalNotifier) (docs/semantics.md §6.3).
    ///
    /// # Errors
    ///
    /// `EINVAL` (`InvalidInput`) for `n == u64::MAX` (even when full); `EAGAIN`
    /// (`WouldBlock`) only with `NONBLOCK`.
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// n.write(evfd::LIMIT).unwrap();
    /// let n2 = n.clone();
    /// let t = std::thread::spawn(move || n2.write(5)); // blocks until the read below
    /// assert_eq!(n.read().unwrap(), evfd::LIMIT);
    /// t.join().unwrap().unwrap();
    /// assert_eq!(n.read().unwrap(), 5);
    /// ```
    #[inline]
    pub fn write(&self, n: u64) -> io::Result<()> {
        // The fast path's one test: not forked, blocking (`Inner::gate`).
        if !crate::sys::fork::open(self.core.gate) {
            return self.write_gated(n);
        }
        // `block`'s first step, with its rest in tail calls (no stack frame here).
        match self.core.add(n) {
            Ok(None) => Ok(()),
            Ok(Some(due)) => self.core.write_rest(n, Some(due)),
            Err(_) => self.core.write_rest(n, None),
        }
    }

    /// [`write`](Self::write) when its gate is closed: refused after a fork, non-blocking
    /// with `NONBLOCK`, else (Semaphore) the blocking call. Out of line, so that `write`
    /// reaches it by a tail call (as `Inner::write_rest`).
    #[inline(never)]
    fn write_gated(&self, n: u64) -> io::Result<()> {
        if self.core.nonblock {
            return self.try_write_gated(n);
        }
        self.core.check()?;
        self.core.block(Write(&self.core, n), None)
    }

    /// As [`write`](Self::write), giving up after `timeout` if the count stays too close to
    /// [`LIMIT`](crate::LIMIT) for `n` to fit. With `NONBLOCK`, behaves as
    /// [`try_write`](Self::try_write).
    ///
    /// Not async-signal-safe (its wake takes locks and runs wakers): from a signal handler
    /// use [`SignalNotifier`](crate::SignalNotifier) (docs/semantics.md §6.3).
    ///
    /// # Errors
    ///
    /// `EINVAL` (`InvalidInput`) for `n == u64::MAX`; `ETIMEDOUT` (`TimedOut`) if `n` did
    /// not fit within `timeout`; `EAGAIN` (`WouldBlock`) with `NONBLOCK`. Nothing changes on
    /// error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let n = evfd::Notifier::builder().initial(evfd::LIMIT).build()?;
    /// let e = n.write_timeout(1, Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
    /// assert_eq!(n.read()?, evfd::LIMIT); // room again
    /// n.write_timeout(1, Duration::from_millis(5))?;
    /// assert_eq!(n.count(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_timeout(&self, n: u64, timeout: Duration) -> io::Result<()> {
        if self.core.nonblock {
            return self.try_write_gated(n);
        }
        self.core.check()?;
        let deadline = crate::sys::deadline(timeout);
        self.core.block(Write(&self.core, n), deadline)
    }

    /// `write(1)`: the doorbell.
    ///
    /// Not async-signal-safe (its wake takes locks and runs wakers): from a signal handler
    /// use [`SignalNotifier`](crate::SignalNotifier) (docs/semantics.md §6.3).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// n.notify().unwrap();
    /// n.notify().unwrap();
    /// assert_eq!(n.read().unwrap(), 2);
    /// ```
    #[inline]
    pub fn notify(&self) -> io::Result<()> {
        self.write(1)
    }

    /// Take from the count without waiting: the whole count (Counter, AutoReset) or 1
    /// (Semaphore).
    ///
    /// Not async-signal-safe (its wake takes locks and runs wakers): from a signal handler
    /// use [`SignalNotifier`](crate::SignalNotifier) (docs/semantics.md §6.3).
    ///
    /// # Errors
    ///
    /// `EAGAIN` (`WouldBlock`) when the count is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// n.write(7).unwrap();
    /// assert_eq!(n.try_read().unwrap(), 7);
    /// assert_eq!(n.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// assert_eq!(n.try_read().unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    /// ```
    #[inline]
    pub fn try_read(&self) -> io::Result<u64> {
        // `read`'s fast path and gate, with `EAGAIN` where `read` would wait.
        if crate::sys::fork::open(self.core.gate) {
            return match self.core.take_all_due() {
                Some((got, None)) => Ok(got),
                Some((got, Some(due))) => self.core.read_rest(got, Some(due)),
                None => Err(would_block()),
            };
        }
        self.try_read_gated()
    }

    /// [`try_read`](Self::try_read) when its gate is closed: refused after a fork, else
    /// (`NONBLOCK`, Semaphore) the general lock-free read; also every read form of a
    /// `NONBLOCK` notifier, whose gate is always closed. Out of line, as
    /// [`read_gated`](Self::read_gated).
    #[inline(never)]
    fn try_read_gated(&self) -> io::Result<u64> {
        self.core.check()?;
        self.core.try_read().ok_or_else(would_block)
    }

    /// Take from the count, waiting while it is 0. With `NONBLOCK`, behaves as
    /// [`try_read`](Self::try_read).
    ///
    /// Blocked readers are woken in FIFO order, one per write (Counter, AutoReset) or one per
    /// unit written (Semaphore); a thread that calls `read` while units are available may
    /// take them before a sleeper wakes (no hand-off).
    ///
    /// # Errors
    ///
    /// `EAGAIN` (`WouldBlock`) only with `NONBLOCK`.
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// let n2 = n.clone();
    /// let t = std::thread::spawn(move || n2.read().unwrap());
    /// n.write(2).unwrap();
    /// assert_eq!(t.join().unwrap(), 2);
    /// ```
    #[inline]
    pub fn read(&self) -> io::Result<u64> {
        // The fast path's one test: not forked, blocking, and Counter or AutoReset, whose
        // read takes the whole count (`Inner::gate`).
        if crate::sys::fork::open(self.core.gate) {
            // `block`'s first step, with its rest in tail calls (no stack frame here).
            return match self.core.take_all_due() {
                Some((got, None)) => Ok(got),
                Some((got, Some(due))) => self.core.read_rest(got, Some(due)),
                None => self.core.read_rest(0, None),
            };
        }
        self.read_gated()
    }

    /// [`read`](Self::read) when its gate is closed: refused after a fork, non-blocking
    /// with `NONBLOCK`, else (Semaphore) the blocking call. Out of line, so that `read`
    /// reaches it by a tail call (as `Inner::read_rest`).
    #[inline(never)]
    fn read_gated(&self) -> io::Result<u64> {
        if self.core.nonblock {
            return self.try_read_gated();
        }
        self.core.check()?;
        self.core.block(Read(&self.core), None)
    }

    /// As [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// `ETIMEDOUT` (`TimedOut`) if the count stayed 0 for `timeout`; `EAGAIN`
    /// (`WouldBlock`) with `NONBLOCK`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let n = evfd::Notifier::new();
    /// let e = n.read_timeout(Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// n.write(1).unwrap();
    /// assert_eq!(n.read_timeout(Duration::from_millis(5)).unwrap(), 1);
    /// ```
    pub fn read_timeout(&self, timeout: Duration) -> io::Result<u64> {
        if self.core.nonblock {
            return self.try_read_gated();
        }
        self.core.check()?;
        let deadline = crate::sys::deadline(timeout);
        self.core.block(Read(&self.core), deadline)
    }

    /// Readiness: the bits of `interest` that hold now, plus `ERR`/`HUP` if they hold
    /// (they are always reported). `IN` iff the count is non-zero, `OUT` iff a write of 1
    /// would not wait. A readiness check never consumes anything, in any mode.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Events, Notifier};
    /// let n = Notifier::new();
    /// assert_eq!(n.poll(Events::IN | Events::OUT), Events::OUT);
    /// n.write(evfd::LIMIT).unwrap();
    /// assert_eq!(n.poll(Events::IN | Events::OUT), Events::IN);
    /// assert_eq!(n.poll(Events::OUT), Events::empty());
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        if self.core.forked() {
            return Events::ERR | Events::HUP;
        }
        self.core.readiness() & (interest | Events::ERR | Events::HUP)
    }

    /// Deliver `IN` to this consumer, as an epoll harvest or a completed async read does:
    /// returns the readiness at delivery (`IN` if the count was non-zero) and, in
    /// [`Mode::AutoReset`], resets the count to 0 in the same atomic step (waking writers
    /// blocked at the limit). Counter and Semaphore: a readiness check that changes nothing
    /// (read to consume).
    ///
    /// Infallible in memory; [`KernelNotifier::consume`](kernel::KernelNotifier::consume) and
    /// [`EventNotifier::consume`](crate::EventNotifier::consume) return
    /// `io::Result<Events>`.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Events, Mode, Notifier};
    /// let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    /// kick.notify()?;
    /// kick.notify()?;
    /// assert!(kick.consume().contains(Events::IN)); // delivered: reset
    /// assert_eq!(kick.count(), 0);
    /// assert!(!kick.consume().contains(Events::IN));
    ///
    /// let counter = Notifier::builder().initial(3).build()?;
    /// assert!(counter.consume().contains(Events::IN));
    /// assert_eq!(counter.count(), 3); // Counter: unchanged
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn consume(&self) -> Events {
        if self.core.forked() {
            // A child's copy of a pre-fork notifier (see `# Fork`).
            return Events::ERR | Events::HUP;
        }
        self.core.deliver(Events::IN)
    }
}

impl Inner {
    /// Whether this is a child process's copy of a notifier made before a fork.
    #[inline]
    pub(crate) fn forked(&self) -> bool {
        crate::sys::fork::forked(crate::sys::fork::born(self.gate))
    }

    /// The fork refusal (docs: "fork" on [`Notifier`]), or `Ok`.
    #[inline]
    pub(crate) fn check(&self) -> io::Result<()> {
        crate::sys::fork::check(crate::sys::fork::born(self.gate), "Notifier")
    }

    pub(crate) fn readiness(&self) -> Events {
        mode::readiness(self.count.load(SeqCst))
    }

    /// The lock-free write: one CAS loop, then wake readers if any entry wants `IN`.
    #[inline]
    pub(crate) fn try_write(&self, n: u64) -> Result<(), WriteRefused> {
        if let Some(due) = self.add(n)? {
            self.wake_readers(n, due);
        }
        Ok(())
    }

    /// The count's half of [`try_write`](Self::try_write): one CAS loop, and whether
    /// readers are due a wake (`WaitQueue::wake_due`), which the caller owes.
    #[inline(always)]
    fn add(&self, n: u64) -> Result<Option<Due>, WriteRefused> {
        let mut cur = self.count.seed_load();
        loop {
            let next = mode::write(cur, n)?;
            match self.count.compare_exchange_weak(cur, next, SeqCst, SeqCst) {
                Ok(_) => break,
                Err(seen) => cur = seen,
            }
        }
        // `cur` is what the CAS replaced: a write from 0 is a fill (`KEY_FILLED`; a
        // `write(0)` there makes a spurious edge, which edge-triggered pollers take as any).
        Ok(self.wq.wake_due_write(cur == 0))
    }

    /// The wake a write of `n` owes its readers. The mode is looked at only here, when
    /// someone waits: it shares the count's line, and a load of that line right behind a
    /// locked operation on it waits for the operation.
    #[inline]
    fn wake_readers(&self, n: u64, due: Due) {
        self.wq
            .wake_due_now(Events::IN, self.readers_to_wake(n), due);
    }

    /// The rest of `Notifier::write` after its fast path: the readers' wake if its count
    /// went in and they are `due` one, or else (its count did not go in: too full to fit,
    /// or `n` invalid) the blocking call. Out of line, so that the write reaches it by a
    /// tail call and its fast path needs no stack frame; one function for both, so that
    /// its result stays a real `io::Result` the call can pass through.
    #[inline(never)]
    fn write_rest(&self, n: u64, due: Option<Due>) -> io::Result<()> {
        match due {
            Some(due) => {
                self.wake_readers(n, due);
                Ok(())
            }
            None => self.block(Write(self, n), None),
        }
    }

    /// How many readers a successful write of `n` wakes: Semaphore one exclusive reader
    /// per unit, the other modes one.
    #[inline]
    fn readers_to_wake(&self, n: u64) -> usize {
        match self.mode {
            Mode::Semaphore => usize::try_from(n).unwrap_or(usize::MAX).max(1),
            Mode::Counter | Mode::AutoReset => 1,
        }
    }

    /// After a read or a delivery that changed the count: every waiting writer re-checks.
    #[inline]
    pub(crate) fn wake_writers(&self) {
        self.wq.wake(Events::OUT, usize::MAX);
    }

    /// As [`wake_writers`](Self::wake_writers), after a consumption that left the count at
    /// `left`: a consumption that emptied the notifier adds [`KEY_EMPTIED`] to the key, so
    /// that fd views can give edge-triggered pollers a fresh edge when a write refills it
    /// concurrently (see `crate::fd`).
    #[inline]
    pub(crate) fn wake_after_consume(&self, left: u64) {
        if left == 0 {
            self.wq.wake(EMPTIED, usize::MAX);
        } else {
            self.wake_writers();
        }
    }

    /// As [`wake_after_consume`](Self::wake_after_consume), into `batch`.
    fn wake_after_consume_into(&self, left: u64, batch: &mut WakeBatch) {
        let key = if left == 0 { EMPTIED } else { Events::OUT };
        self.wq.wake_into(key, usize::MAX, batch);
    }

    /// The lock-free read. `None` when the count is 0. Always inlined: a blocking read's
    /// tries (`Read::try_now`) are its calls, on the path of every parked hand-off.
    #[inline(always)]
    pub(crate) fn try_read(&self) -> Option<u64> {
        if self.mode != Mode::Semaphore {
            return self.take_all();
        }
        let mut cur = self.count.seed_load();
        let (got, left) = loop {
            let (got, next) = mode::read(self.mode, cur)?;
            match self.count.compare_exchange_weak(cur, next, SeqCst, SeqCst) {
                Ok(_) => break (got, next),
                Err(seen) => cur = seen,
            }
        };
        self.wake_after_consume(left);
        Some(got)
    }

    /// The lock-free read of Counter and AutoReset: the whole count. `None` when it is 0.
    #[inline(always)]
    fn take_all(&self) -> Option<u64> {
        let (got, due) = self.take_all_due()?;
        if let Some(due) = due {
            self.wake_emptied(due);
        }
        Some(got)
    }

    /// [`take_all`](Self::take_all) without its wake: the count taken, and whether
    /// writers or fd views are due the wake of a consumption that emptied it
    /// ([`wake_after_consume(0)`](Self::wake_after_consume)), which the caller owes.
    #[inline(always)]
    fn take_all_due(&self) -> Option<(u64, Option<Due>)> {
        debug_assert_ne!(self.mode, Mode::Semaphore);
        // One swap, no CAS loop and no load first (a swap never fails; swapping 0 for 0
        // changes nothing). A load before the swap would cost a wait on the line a write's
        // CAS has just locked: ~7 ns per pair on a CPU whose locked operations are slow
        // (docs/handoff.md, "The read's swap").
        let got = self.count.swap(0, SeqCst);
        if got == 0 {
            return None;
        }
        Some((got, self.wq.wake_due(EMPTIED)))
    }

    /// The rest of `Notifier::read` after its fast path: the wake a consumption that
    /// emptied the count owes if it took `got` (non-zero) and writers or fd views are
    /// `due` one, or else (`got` 0: nothing to take) the blocking call. Out of line, as
    /// [`write_rest`](Self::write_rest).
    #[inline(never)]
    fn read_rest(&self, got: u64, due: Option<Due>) -> io::Result<u64> {
        if got == 0 {
            return self.wait(Read(self), None);
        }
        if let Some(due) = due {
            self.wake_emptied(due);
        }
        Ok(got)
    }

    /// [`wake_after_consume(0)`](Self::wake_after_consume) once
    /// [`take_all_due`](Self::take_all_due) found it due.
    #[inline]
    fn wake_emptied(&self, due: Due) {
        self.wq.wake_due_now(EMPTIED, usize::MAX, due);
    }

    /// Deliver `IN` to a consumer (epoll harvest, async completion, fd-view consume):
    /// AutoReset swaps the count to 0. Returns the readiness seen at delivery, so that a
    /// reset and the report come from the same atomic step.
    pub(crate) fn deliver(&self, interest: Events) -> Events {
        let mut batch = WakeBatch::new();
        let r = self.deliver_into(interest, &mut batch);
        batch.run();
        r
    }

    /// As [`deliver`](Self::deliver), with the reset's wakes (blocked writers, which may be
    /// foreign wakers) put into `batch`: the harvest delivers with the epoll's registry held
    /// and runs them after releasing it.
    pub(crate) fn deliver_into(&self, interest: Events, batch: &mut WakeBatch) -> Events {
        if mode::deliver(self.mode, 1) != 0 || !interest.contains(Events::IN) {
            // The mode keeps the count at delivery (only AutoReset resets it to 0).
            return self.readiness();
        }
        // AutoReset delivery resets the count (mode::deliver).
        match self.reset() {
            Some(r) => {
                self.wake_after_consume_into(0, batch);
                r
            }
            None => mode::readiness(0),
        }
    }

    /// AutoReset's delivery of `IN`, without its wake: a load, and one swap only if there
    /// is something to reset — what the `read` it replaces would cost, no more. The
    /// readiness it reports (`IN`, and `ERR`, as seen before the reset, `OUT` as it is
    /// now), or `None` if the count was 0 (nothing taken). A `Some` owes
    /// [`wake_after_consume(0)`](Self::wake_after_consume) (or its `_into` form) to the
    /// queue: [`deliver_into`](Self::deliver_into) makes it at once, the one-item harvest
    /// once it has released the epoll's `ready` lock.
    #[inline]
    pub(crate) fn reset(&self) -> Option<Events> {
        if self.count.seed_load() == 0 {
            return None;
        }
        match self.count.swap(0, SeqCst) {
            0 => None,
            cur => Some(mode::readiness(cur) | mode::readiness(0)),
        }
    }

    /// The blocking call shared by `read`, `read_timeout`, `write` and `write_timeout`: the wait queue's
    /// blocking wait (`crate::wait_queue::thread::wait`) for `what`. It registers,
    /// re-checks, sleeps, and always retries once after a wake or a timeout, so a wake racing
    /// a timeout is not lost.
    #[inline(always)]
    pub(crate) fn block<R, W: Op<Output = io::Result<R>>>(
        &self,
        mut what: W,
        deadline: Option<Instant>,
    ) -> io::Result<R> {
        // Step 1 of the blocking wait: no wait needed. Inlined into every caller (the hot
        // path of `read` and `write`); the wait itself is not.
        if let Some(r) = what.try_now() {
            return r;
        }
        self.wait(what, deadline)
    }

    /// `block`'s steps 2 onwards: the wait.
    #[inline(never)]
    fn wait<R, W: Op<Output = io::Result<R>>>(
        &self,
        what: W,
        deadline: Option<Instant>,
    ) -> io::Result<R> {
        let mut s = QueueSleeper::new(&self.wq, W::MASK, W::EXCLUSIVE, what);
        thread::wait(&mut s, deadline).unwrap_or_else(|| Err(crate::error::timed_out()))
    }

    /// Pass an unused wake on to the next exclusive waiter, if the state still allows it.
    pub(crate) fn hand_on(&self, want: Events, exclusive: bool) {
        if exclusive && self.readiness().intersects(want) {
            self.wq.wake(want, 1);
        }
    }
}

/// A notifier operation as a wait ([`WaitFor`]), with the entry it waits as: the same
/// definition for the blocking call and the futures (and the stream).
pub(crate) trait Op: WaitFor {
    /// The entry's mask.
    const MASK: Events;
    /// Whether the entry is exclusive (one wake each).
    const EXCLUSIVE: bool;
}

/// A read: the whole count, or 1 in Semaphore mode. Readers are exclusive (a write wakes
/// one, or one per unit in Semaphore mode); a claimed reader that leaves while the count is
/// still non-zero wakes the next one.
pub(crate) struct Read<'a>(pub(crate) &'a Inner);

impl WaitFor for Read<'_> {
    type Output = io::Result<u64>;

    // Inlined into the sleeper's loop (`wait_queue::thread::wait`), which calls it on the
    // path of every parked hand-off: left to itself, LLVM calls it out of line.
    #[inline(always)]
    fn try_now(&mut self) -> Option<io::Result<u64>> {
        self.0.try_read().map(Ok)
    }

    fn probe(&self) -> bool {
        self.0.count.load(SeqCst) != 0
    }

    fn spin_gauge(&self) -> Option<&SpinGauge> {
        Some(&self.0.spin)
    }

    fn hand_on(&mut self) {
        self.0.hand_on(Events::IN, true);
    }
}

impl Op for Read<'_> {
    const MASK: Events = Events::IN;
    const EXCLUSIVE: bool = true;
}

/// The async read's tries (future and stream): a [`Read`] that looks at the count before it
/// takes it. An async read's first try usually finds the count empty (the writer is another
/// task, often on the same worker, that has not run yet), and a load costs less there than
/// the swap's read-modify-write; the blocking read's first try swaps at once, since it
/// usually finds a count (docs/handoff.md, "The read's swap"). The re-check after the
/// registration looks with the same `SeqCst` load, which is the Dekker pair's read.
pub(crate) struct LookedRead<'a>(pub(crate) &'a Inner);

impl WaitFor for LookedRead<'_> {
    type Output = io::Result<u64>;

    fn try_now(&mut self) -> Option<io::Result<u64>> {
        if self.0.count.load(SeqCst) == 0 {
            return None;
        }
        Read(self.0).try_now()
    }

    fn probe(&self) -> bool {
        Read(self.0).probe()
    }

    fn hand_on(&mut self) {
        Read(self.0).hand_on();
    }
}

/// A write of `n`. Writers are not exclusive: every read that makes room wakes them all, so
/// a writer owes no wake to anyone when it leaves.
pub(crate) struct Write<'a>(pub(crate) &'a Inner, pub(crate) u64);

impl WaitFor for Write<'_> {
    type Output = io::Result<()>;

    fn try_now(&mut self) -> Option<io::Result<()>> {
        match self.0.try_write(self.1) {
            Ok(()) => Some(Ok(())),
            Err(WriteRefused::Invalid) => Some(Err(invalid_write())),
            Err(WriteRefused::Full) => None,
        }
    }

    fn hand_on(&mut self) {}

    fn probe(&self) -> bool {
        !matches!(
            mode::write(self.0.count.load(SeqCst), self.1),
            Err(WriteRefused::Full)
        )
    }

    fn spin_gauge(&self) -> Option<&SpinGauge> {
        Some(&self.0.spin)
    }
}

impl Op for Write<'_> {
    const MASK: Events = Events::OUT;
    const EXCLUSIVE: bool = false;
}

// These build real notifiers outside a loom model, so they only run without the loom cfg.
#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::*;
    use crate::mode::LIMIT;

    #[test]
    fn send_sync_debug() {
        fn assert<T: Send + Sync + fmt::Debug + Clone + 'static>() {}
        assert::<Notifier>();
        let n = Notifier::new();
        assert!(format!("{n:?}").contains("Counter"));
    }

    #[test]
    fn autoreset_deliver_resets_only_on_in() {
        let n = Notifier::builder()
            .mode(Mode::AutoReset)
            .initial(3)
            .build()
            .unwrap();
        assert_eq!(n.core.deliver(Events::OUT), Events::IN | Events::OUT);
        assert_eq!(n.count(), 3);
        assert_eq!(n.core.deliver(Events::IN), Events::IN | Events::OUT);
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.deliver(Events::IN), Events::OUT);
    }

    #[test]
    fn counter_deliver_changes_nothing() {
        let n = Notifier::builder().initial(3).build().unwrap();
        assert_eq!(n.core.deliver(Events::IN), Events::IN | Events::OUT);
        assert_eq!(n.count(), 3);
    }

    #[test]
    fn failed_calls_change_nothing() {
        let n = Notifier::builder().initial(LIMIT - 1).build().unwrap();
        assert!(n.try_write(2).is_err());
        assert!(n.try_write(u64::MAX).is_err());
        assert!(n.write(u64::MAX).is_err());
        assert_eq!(n.count(), LIMIT - 1);
    }

    #[test]
    fn blocked_reader_is_woken_and_queue_is_empty_after() {
        let n = Notifier::new();
        let n2 = n.clone();
        let t = std::thread::spawn(move || n2.read().unwrap());
        while n.core.wq.len() == 0 {
            std::thread::yield_now();
        }
        n.write(9).unwrap();
        assert_eq!(t.join().unwrap(), 9);
        assert_eq!(n.core.wq.len(), 0);
        assert_eq!(n.core.wq.interest(), Events::empty());
    }

    /// `read` and `write` take their fast path only when the gate is open (made in this
    /// process, blocking, Counter or AutoReset); every other option still gets its own
    /// meaning from them: a Semaphore read takes one unit, a non-blocking one answers
    /// `WouldBlock` instead of waiting, at the limit as at 0.
    #[test]
    fn read_and_write_keep_each_options_meaning() {
        for_each_option(|n, mode, nonblock| {
            let open = crate::sys::fork::open(n.core.gate);
            assert_eq!(
                open,
                !nonblock && mode != Mode::Semaphore,
                "{mode:?} {nonblock}"
            );
            n.write(3).unwrap();
            let want = if mode == Mode::Semaphore { 1 } else { 3 };
            assert_eq!(n.read().unwrap(), want, "{mode:?} {nonblock}");
            assert_eq!(n.count(), 3 - want);
            assert_eq!(
                n.write(u64::MAX).unwrap_err().kind(),
                io::ErrorKind::InvalidInput
            );
            if nonblock {
                while n.count() > 0 {
                    n.read().unwrap();
                }
                assert_eq!(n.read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
                n.write(LIMIT).unwrap();
                assert_eq!(n.write(1).unwrap_err().kind(), io::ErrorKind::WouldBlock);
                assert_eq!(n.count(), LIMIT);
            }
        });
    }

    /// A fresh notifier of every mode, blocking and not, each given to `f`.
    fn for_each_option(mut f: impl FnMut(Notifier, Mode, bool)) {
        for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
            for nonblock in [false, true] {
                let n = Notifier::builder()
                    .mode(mode)
                    .nonblocking(nonblock)
                    .build()
                    .unwrap();
                f(n, mode, nonblock);
            }
        }
    }

    /// `try_read` and `try_write` share that gate: through the fast path (open) and the
    /// general one (Semaphore, `NONBLOCK`) each answers as the kernel's non-blocking
    /// eventfd, errno included, and a refusal changes nothing.
    #[test]
    fn try_read_and_try_write_keep_each_options_meaning() {
        for_each_option(|n, mode, nonblock| {
            let what = format!("{mode:?} nonblock={nonblock}");
            let e = n.try_read().unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{what}");
            n.try_write(3).unwrap();
            let want = if mode == Mode::Semaphore { 1 } else { 3 };
            assert_eq!(n.try_read().unwrap(), want, "{what}");
            assert_eq!(n.count(), 3 - want, "{what}");
            let e = n.try_write(u64::MAX).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{what}");
            assert_eq!(n.count(), 3 - want, "{what}");
            while n.count() > 0 {
                n.try_read().unwrap();
            }
            n.try_write(LIMIT).unwrap();
            let e = n.try_write(1).unwrap_err();
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{what}");
            assert_eq!(n.count(), LIMIT, "{what}");
        });
    }

    /// The wakes the fast paths owe: `try_write` wakes a blocked reader, and `try_read`
    /// of a full count wakes a blocked writer.
    #[test]
    fn try_read_and_try_write_wake_the_blocked_side() {
        let wait = Duration::from_secs(10);
        let n = Notifier::new();
        let (tx, rx) = std::sync::mpsc::channel();
        let (n2, tx2) = (n.clone(), tx.clone());
        std::thread::spawn(move || tx2.send(n2.read().unwrap()).unwrap());
        while n.core.wq.len() == 0 {
            std::thread::yield_now();
        }
        n.try_write(5).unwrap();
        assert_eq!(rx.recv_timeout(wait).expect("the reader was not woken"), 5);
        n.try_write(LIMIT).unwrap();
        let n2 = n.clone();
        std::thread::spawn(move || tx.send(n2.write(2).map(|()| 0).unwrap()).unwrap());
        while n.core.wq.len() == 0 {
            std::thread::yield_now();
        }
        assert_eq!(n.try_read().unwrap(), LIMIT);
        assert_eq!(rx.recv_timeout(wait).expect("the writer was not woken"), 0);
        assert_eq!(n.try_read().unwrap(), 2);
    }

    #[test]
    fn timeout_leaves_no_entry() {
        let n = Notifier::new();
        assert_eq!(
            n.read_timeout(Duration::from_millis(1)).unwrap_err().kind(),
            io::ErrorKind::TimedOut
        );
        assert_eq!(n.core.wq.len(), 0);
    }
}
