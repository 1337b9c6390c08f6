//! The only code that calls the OS.
//!
//! Everything here speaks I/O-safety types (`OwnedFd`, `BorrowedFd`) and returns
//! `io::Result` whose errors carry the kernel's errno (`raw_os_error()`), converted from
//! rustix's `Errno`. Every fd created here is `NONBLOCK`; `CLOEXEC` is the caller's choice,
//! because a notifier's `EFD_CLOEXEC` flag decides it.
//!
//! # Doorbells
//!
//! A [`Doorbell`] is a kernel object that a poller can watch and that the fd-view protocol
//! (`crate::fd`) makes readable or not: [`ring`](Doorbell::ring) makes it readable,
//! [`drain`](Doorbell::drain) makes it not readable. The backend is chosen here, in one
//! place, at compile time ([`BuildDoorbell`]):
//!
//! | cfg | backend | fd handed out |
//! |---|---|---|
//! | Linux, Android (default) | `eventfd::EventfdDoorbell` | the eventfd |
//! | other Unix (FreeBSD, macOS, …), or `--cfg evfd_force_pipe` | [`pipe::PipeDoorbell`] | the pipe's read end |
//! | `--cfg evfd_loom` | `mock::MockDoorbell` | none: an in-memory flag, no syscalls |
//!
//! `--cfg evfd_force_pipe` exists so that CI runs the whole suite over the fallback; off
//! Linux the pipe is the only backend, so that path is the one the forced-pipe run tests.
//!
//! The kernel eventfd and epoll wrappers (`eventfd`, `epoll`: the doorbell's eventfd,
//! [`KernelNotifier`](crate::KernelNotifier), an `Epoll`'s kernel-fd sources) are Linux's
//! (and Android's). On macOS and FreeBSD, `kqueue` gives an `Epoll`'s kernel side the same
//! functions with epoll's meaning, re-exported under the same names: `epoll` (the kqueue
//! translation) and `eventfd` (only its one-fd bell: an `EVFILT_USER` event in a kqueue),
//! so the kernel side's logic is one body for all three.

pub(crate) mod cpu;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) mod epoll;
#[cfg(any(target_os = "linux", target_os = "android"))]
pub(crate) mod eventfd;
// The translation's pure parts are unit-tested on Linux too.
#[cfg(any(target_vendor = "apple", target_os = "freebsd", test))]
pub(crate) mod kqueue;
#[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
pub(crate) use self::kqueue as epoll;
#[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
pub(crate) use self::kqueue::bell as eventfd;

/// The backends' `wait` (`epoll_wait`, or its kqueue translation) into a `Vec`: at most
/// `max` (and 64) events until `deadline` (`None`: forever; a past deadline: don't block).
/// `EINTR` and an error leave it empty (the caller loops with its deadline). Their
/// `wait_into` on the `Vec`'s own slots: one copy for both.
#[cfg(any(
    target_os = "linux",
    target_os = "android",
    target_vendor = "apple",
    target_os = "freebsd"
))]
pub(crate) fn wait_vec(
    ep: BorrowedFd<'_>,
    out: &mut Vec<(crate::events::Events, u64)>,
    max: usize,
    deadline: Option<std::time::Instant>,
) -> io::Result<()> {
    out.clear();
    out.resize(max.clamp(1, 64), (crate::events::Events::empty(), 0));
    let got = epoll::wait_into(ep, out, deadline);
    out.truncate(*got.as_ref().unwrap_or(&0));
    got.map(drop)
}
pub(crate) mod fd;
pub(crate) mod fork;
#[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
pub(crate) mod futex;
pub(crate) mod mem_count;
#[cfg(evfd_loom)]
pub(crate) mod mock;
#[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
pub(crate) mod scm;
#[cfg(all(any(target_os = "linux", target_os = "android"), not(evfd_loom)))]
pub(crate) mod shm;
#[cfg(feature = "tokio")]
pub(crate) mod tokio;
// Compiled (and unit-tested) everywhere, selected by `Bell` only where needed.
#[cfg_attr(any(not(evfd_force_pipe), evfd_loom), allow(dead_code))]
pub(crate) mod pipe;

use std::io;
use std::os::fd::BorrowedFd;
// Statistics only: not part of any protocol, so never the loom shim's atomics.
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use crate::events::Events;

/// The contract every doorbell backend fulfils.
///
/// The fd-view protocol calls `ring` while the doorbell is not rung (and once more for a
/// refill that raced a consumption), `ring_edge` for an edge-only view, and `drain` only
/// while it is rung, always under its own mutex, so a backend never sees two calls at once
/// and never needs to count.
pub(crate) trait Doorbell: Send + Sync + Sized + 'static {
    /// A new, unrung doorbell. `cloexec`: every fd it owns is close-on-exec.
    fn create(cloexec: bool) -> io::Result<Self>;

    /// Make the fd readable. `EAGAIN` (a full pipe, a saturated counter) means "already
    /// rung" and is success; `EINTR` is retried.
    fn ring(&self) -> io::Result<()>;

    /// Make the fd not readable. `EAGAIN` means "already empty" and is success; `EINTR` is
    /// retried.
    fn drain(&self) -> io::Result<()>;

    /// Make an edge for edge-triggered pollers, whether or not the fd is readable already
    /// (an edge-only view, `crate::fd`): a write, which wakes them either way; if the fd
    /// is full (`EAGAIN`: a pipe after ~64 KiB of such rings, an eventfd counter at its
    /// limit), a drain and the write again, since a refused write wakes nobody.
    fn ring_edge(&self) -> io::Result<()>;

    /// The fd pollers watch, for the crate's own use (a registration with a kernel epoll,
    /// a poll): not a lend. It must only be polled, never read or written by anyone else.
    fn as_fd(&self) -> BorrowedFd<'_>;

    /// The fd pollers watch, handed to the caller (the view's public `AsFd`): from now on
    /// its open file description may be shared (`sys::fd`, `Fd::lend`).
    fn lend(&self) -> BorrowedFd<'_>;

    /// Run `register`, a registration that takes the fd through the view's public
    /// `AsRawFd` (tokio's `AsyncFd`), without that borrow counting as a lend
    /// (`sys::fd::register_unlent`).
    fn register_unlent<R>(&self, register: impl FnOnce() -> R) -> R {
        register()
    }

    /// The syscalls this doorbell has made.
    fn stats(&self) -> DoorbellStats;
}

/// The doorbell backend of this build (see the module docs).
#[cfg(all(
    not(evfd_loom),
    not(evfd_force_pipe),
    any(target_os = "linux", target_os = "android")
))]
pub(crate) type BuildDoorbell = eventfd::EventfdDoorbell;

/// The doorbell backend of this build (see the module docs).
#[cfg(all(
    not(evfd_loom),
    any(evfd_force_pipe, not(any(target_os = "linux", target_os = "android")))
))]
pub(crate) type BuildDoorbell = pipe::PipeDoorbell;

/// The doorbell backend of this build (see the module docs).
#[cfg(evfd_loom)]
pub(crate) type BuildDoorbell = mock::MockDoorbell;

/// Doorbell syscalls, counted (not guessed): every `write(2)` that rings a doorbell and
/// every `read(2)` that drains one, including retries after `EINTR` and calls that got
/// `EAGAIN`.
///
/// Returned by [`FdView::doorbell_stats`](crate::FdView::doorbell_stats), for one view and
/// its clones.
///
/// # Examples
///
/// ```
/// let n = evfd::Notifier::new();
/// let view = n.fd_view()?;
/// n.notify()?; // not readable → readable: one ring
/// n.notify()?; // already readable: no syscall
/// n.read()?;   // readable → not readable: one drain
/// let s = view.doorbell_stats();
/// assert_eq!((s.rings, s.drains), (1, 1));
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DoorbellStats {
    /// Syscalls that rang a doorbell (made its fd readable).
    pub rings: u64,
    /// Syscalls that drained a doorbell (made its fd not readable).
    pub drains: u64,
}

static GLOBAL_RINGS: AtomicU64 = AtomicU64::new(0);
static GLOBAL_DRAINS: AtomicU64 = AtomicU64::new(0);

/// Process-wide doorbell syscall counts, over every fd view that ever existed.
///
/// For benchmarks and examples. Tests running in parallel share it; a test that asserts
/// exact figures should use [`FdView::doorbell_stats`](crate::FdView::doorbell_stats).
///
/// # Examples
///
/// ```
/// let before = evfd::stats::doorbell_stats();
/// let n = evfd::Notifier::new();
/// let _view = n.fd_view()?;
/// n.notify()?;
/// assert!(evfd::stats::doorbell_stats().rings > before.rings);
/// # Ok::<(), std::io::Error>(())
/// ```
#[doc(hidden)]
pub fn doorbell_stats() -> DoorbellStats {
    DoorbellStats {
        rings: GLOBAL_RINGS.load(Relaxed),
        drains: GLOBAL_DRAINS.load(Relaxed),
    }
}

/// Per-doorbell syscall counters, mirrored into the process-wide ones.
#[derive(Debug, Default)]
pub(crate) struct Counters {
    rings: AtomicU64,
    drains: AtomicU64,
}

impl Counters {
    pub(crate) fn note_ring(&self) {
        self.rings.fetch_add(1, Relaxed);
        GLOBAL_RINGS.fetch_add(1, Relaxed);
    }

    pub(crate) fn note_drain(&self) {
        self.drains.fetch_add(1, Relaxed);
        GLOBAL_DRAINS.fetch_add(1, Relaxed);
    }

    pub(crate) fn get(&self) -> DoorbellStats {
        DoorbellStats {
            rings: self.rings.load(Relaxed),
            drains: self.drains.load(Relaxed),
        }
    }
}

/// Run a syscall, retrying on `EINTR`; `count` is called once per attempt.
#[inline(always)]
pub(crate) fn retry<T>(
    mut count: impl FnMut(),
    mut f: impl FnMut() -> rustix::io::Result<T>,
) -> rustix::io::Result<T> {
    loop {
        count();
        match f() {
            Err(rustix::io::Errno::INTR) => continue,
            r => return r,
        }
    }
}

/// How this process reads (or writes) a shared fd without waiting, whatever its open file
/// description's `O_NONBLOCK` says (docs/semantics.md, "Shared open file descriptions and
/// O_NONBLOCK"): one per kind of file, since the kernel's support differs by file type.
///
/// `O_NONBLOCK` belongs to the open file description, shared with every process that holds
/// a dup of the fd; a peer may clear it at any time (QEMU does, on every fd it receives).
/// So a call that must not wait never relies on it:
///
/// 1. `preadv2`/`pwritev2` with `RWF_NOWAIT` (Linux 4.14+), which the file's own read or
///    write path honours per call (eventfd reads since Linux 5.12, pipes both ways);
/// 2. where the kernel refuses `RWF_NOWAIT` for that file (`EOPNOTSUPP`, `ENOSYS`), the
///    answer is cached in this probe and the fallback runs: a zero-timeout `poll(2)` first,
///    and the call only if it says the call cannot wait, whatever the description's flag
///    says now (a peer may flip it between any check of it and the call).
///
/// Async-signal-safe: atomics and syscalls only, no allocation.
#[derive(Debug)]
pub(crate) struct NowProbe {
    /// `RWF_NOWAIT` was refused for this kind of file: use the fallback from now on.
    /// (Only Linux has `RWF_NOWAIT`: elsewhere the fallback is all there is.)
    #[cfg_attr(not(target_os = "linux"), allow(dead_code))]
    refused: std::sync::atomic::AtomicBool,
}

#[cfg_attr(not(target_os = "linux"), allow(dead_code))]
impl NowProbe {
    pub(crate) const fn new() -> NowProbe {
        NowProbe {
            refused: std::sync::atomic::AtomicBool::new(false),
        }
    }

    /// Whether `RWF_NOWAIT` is used (not refused so far).
    pub(crate) fn nowait(&self) -> bool {
        !self.refused.load(Relaxed)
    }

    fn refuse(&self) {
        self.refused.store(true, Relaxed);
    }
}

/// Which mechanism a `*_now` call uses: the probed one, or (tests) the fallback forced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Now {
    /// `RWF_NOWAIT` unless the probe found it refused.
    Probed,
    /// The `fcntl` + `poll` fallback, whatever the kernel supports.
    #[cfg_attr(not(test), allow(dead_code))]
    Fallback,
}

/// Whether the errno says "this kernel/file does not do `RWF_NOWAIT`".
#[cfg(all(target_os = "linux", not(evfd_loom)))]
fn nowait_refused(e: rustix::io::Errno) -> bool {
    use rustix::io::Errno;
    e == Errno::OPNOTSUPP || e == Errno::NOSYS
}

/// Whether the open file description is `O_NONBLOCK` right now (a peer may change it at
/// any time: no call relies on it; the tests look at it).
#[cfg(test)]
pub(crate) fn description_nonblocking(fd: BorrowedFd<'_>) -> rustix::io::Result<bool> {
    Ok(rustix::fs::fcntl_getfl(fd)?.contains(rustix::fs::OFlags::NONBLOCK))
}

/// One zero-timeout `poll(2)` over `fds`, filling their `revents` (`EINTR` retried).
pub(crate) fn poll_zero(fds: &mut [PollFd<'_>]) -> rustix::io::Result<()> {
    let zero = Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    loop {
        match rustix::event::poll(fds, Some(&zero)) {
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e),
        }
    }
}

/// Readiness now from a zero-timeout `poll(2)`, in rustix's terms (`EINTR` retried).
fn poll_flags_now(fd: BorrowedFd<'_>, flags: PollFlags) -> rustix::io::Result<PollFlags> {
    let mut fds = [PollFd::from_borrowed_fd(fd, flags)];
    poll_zero(&mut fds)?;
    Ok(fds[0].revents())
}

/// One `read(2)` into `buf` that never waits, whatever `O_NONBLOCK` says (see
/// [`NowProbe`]). `EINTR` is retried; `EAGAIN` means nothing to read now.
///
/// The fallback's one residual window: on a description a peer made blocking, a reader
/// that takes the data between our `poll(2)` and our `read(2)` leaves that read waiting
/// until the next write. It is reached only where the kernel refuses `RWF_NOWAIT` for
/// the file (eventfds before Linux 5.12, non-Linux pipes).
#[inline(always)]
pub(crate) fn read_now_raw(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    probe: &NowProbe,
    how: Now,
) -> rustix::io::Result<usize> {
    call_now(
        fd,
        probe,
        how,
        |nowait| {
            #[cfg(all(target_os = "linux", not(evfd_loom)))]
            if nowait {
                return rustix::io::preadv2(
                    fd,
                    &mut [std::io::IoSliceMut::new(buf)],
                    u64::MAX,
                    rustix::io::ReadWriteFlags::NOWAIT,
                );
            }
            let _ = nowait;
            rustix::io::read(fd, &mut *buf)
        },
        // A peer made the description blocking: read only what poll says is there (a
        // readable, hung-up or failed fd answers at once).
        PollFlags::IN,
        |ev| Ok(!ev.is_empty()),
    )
}

/// One `write(2)` of `buf` that never waits, whatever `O_NONBLOCK` says (see
/// [`NowProbe`]). `fits` is the fallback's check on a blocking description: called with
/// the fd's `poll(2)` readiness (`IN`/`OUT`/`ERR`), it says whether the write would not
/// wait; `false` answers `EAGAIN` without writing. `EINTR` is retried.
pub(crate) fn write_now_raw(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    probe: &NowProbe,
    how: Now,
    fits: impl FnOnce(PollFlags) -> rustix::io::Result<bool>,
) -> rustix::io::Result<usize> {
    call_now(
        fd,
        probe,
        how,
        |nowait| {
            #[cfg(all(target_os = "linux", not(evfd_loom)))]
            if nowait {
                return rustix::io::pwritev2(
                    fd,
                    &[std::io::IoSlice::new(buf)],
                    u64::MAX,
                    rustix::io::ReadWriteFlags::NOWAIT,
                );
            }
            let _ = nowait;
            rustix::io::write(fd, buf)
        },
        PollFlags::IN | PollFlags::OUT,
        fits,
    )
}

/// What `read_now_raw` and `write_now_raw` share ([`NowProbe`]'s two steps): `call(true)`,
/// the `RWF_NOWAIT` call, unless the probe found it refused; else the fallback, which asks
/// `may` (given the zero-timeout `poll(2)` of
/// `flags`) whether the plain call `call(false)` cannot wait, and answers `EAGAIN` if not.
/// `EINTR` is retried.
#[inline(always)]
fn call_now(
    fd: BorrowedFd<'_>,
    probe: &NowProbe,
    how: Now,
    mut call: impl FnMut(bool) -> rustix::io::Result<usize>,
    flags: PollFlags,
    may: impl FnOnce(PollFlags) -> rustix::io::Result<bool>,
) -> rustix::io::Result<usize> {
    #[cfg(all(target_os = "linux", not(evfd_loom)))]
    if how == Now::Probed && probe.nowait() {
        match retry(|| (), || call(true)) {
            Err(e) if nowait_refused(e) => probe.refuse(),
            r => return r,
        }
    }
    let _ = (how, probe);
    // Asked whatever `F_GETFL` would say: a peer can clear `O_NONBLOCK` between that check
    // and the call, which then waits (the torture suite's flipping peer did, at the limit).
    if !may(poll_flags_now(fd, flags)?)? {
        return Err(rustix::io::Errno::AGAIN);
    }
    retry(|| (), || call(false))
}

/// `poll(2)` on one fd until one of `interest`'s bits (or `ERR`/`HUP`/`NVAL`) holds, or
/// `deadline` passes (`None`: forever). Returns the bits that hold (empty on timeout).
/// `EINTR` is retried with the remaining time.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn poll_until(
    fd: BorrowedFd<'_>,
    interest: Events,
    deadline: Option<Instant>,
) -> io::Result<Events> {
    let flags = to_poll_flags(interest);
    loop {
        let timeout = match deadline {
            None => None,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                // A timeout too large for a timespec is "forever".
                Timespec::try_from(left).ok()
            }
        };
        let mut fds = [PollFd::from_borrowed_fd(fd, flags)];
        match rustix::event::poll(&mut fds, timeout.as_ref()) {
            Ok(0) => return Ok(Events::empty()),
            Ok(_) => return Ok(from_poll_flags(fds[0].revents())),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

/// Pairs of our bits and `poll(2)`'s (whose values and integer type vary by platform and
/// rustix backend, so they are mapped by name).
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
const POLL_BITS: [(Events, PollFlags); 6] = [
    (Events::IN, PollFlags::IN),
    (Events::PRI, PollFlags::PRI),
    (Events::OUT, PollFlags::OUT),
    (Events::ERR, PollFlags::ERR),
    (Events::HUP, PollFlags::HUP),
    (Events::NVAL, PollFlags::NVAL),
];

#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
fn to_poll_flags(interest: Events) -> PollFlags {
    POLL_BITS
        .iter()
        .filter(|(e, _)| interest.contains(*e))
        .fold(PollFlags::empty(), |acc, (_, p)| acc | *p)
}

#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
fn from_poll_flags(revents: PollFlags) -> Events {
    POLL_BITS
        .iter()
        .filter(|(_, p)| revents.contains(*p))
        .fold(Events::empty(), |acc, (e, _)| acc | *e)
}

/// The readiness of one fd now (`poll(2)` with a zero timeout).
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn poll_now(fd: BorrowedFd<'_>, interest: Events) -> io::Result<Events> {
    poll_until(fd, interest, Some(Instant::now()))
}

/// Whether `FD_CLOEXEC` is set on this fd.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn is_cloexec(fd: BorrowedFd<'_>) -> io::Result<bool> {
    Ok(rustix::io::fcntl_getfd(fd)?.contains(rustix::io::FdFlags::CLOEXEC))
}

/// A deadline `timeout` from now; `None` (forever) if it overflows.
#[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
pub(crate) fn deadline(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// The blocking read of every kernel-fd kind (a `KernelNotifier`, a pipe or eventfd
/// consumer half): `try_read` until it answers something other than `WouldBlock`, waiting
/// in `poll(2)` for `IN` on `fd` in between, until `deadline` (`None`: forever). At the
/// deadline one last try, so a write racing the timeout is not lost; then `TimedOut`
/// (`ETIMEDOUT`).
pub(crate) fn read_until<T>(
    fd: BorrowedFd<'_>,
    deadline: Option<Instant>,
    mut try_read: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    loop {
        match try_read() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        if poll_until(fd, Events::IN, deadline)?.is_empty() {
            return match try_read() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(crate::error::timed_out()),
                r => r,
            };
        }
    }
}

/// An fd shared through an `Arc` taken back by its last holder (an owner giving its fd
/// away): unwrapped, or in the case nobody expects (another strong holder), a `dup(2)` of
/// it, which is still the same open file.
/// Either way the count memory keeps goes to the kernel first (`mem_count`): `into_owned`
/// and the first lend flush.
pub(crate) fn unshare_fd(fd: std::sync::Arc<fd::Fd>) -> std::os::fd::OwnedFd {
    std::sync::Arc::try_unwrap(fd).map_or_else(
        |shared| {
            shared
                .lend()
                .try_clone_to_owned()
                .expect("dup of a fd being handed off")
        },
        fd::Fd::into_owned,
    )
}

/// The blocking write of every kernel-fd kind (a `KernelNotifier`, a notifier half):
/// `try_write` until it answers something other than `WouldBlock`, waiting in `poll(2)` for
/// `OUT` on `fd` in between, until `deadline` (`None`: forever), then `TimedOut`
/// (`ETIMEDOUT`). The kernel reports `OUT` while a write of 1 fits (an eventfd) or a pipe
/// buffer slot is free; a write that still does not fit after `poll(2)` said writable
/// (room for 1 only, or an overflowed eventfd reporting `ERR`) has nothing to poll for and
/// backs off (50 µs doubling to 10 ms, never past the deadline).
pub(crate) fn write_until(
    fd: BorrowedFd<'_>,
    deadline: Option<Instant>,
    mut try_write: impl FnMut() -> io::Result<()>,
) -> io::Result<()> {
    let mut backoff = Duration::from_micros(50);
    let mut after_poll = false;
    loop {
        match try_write() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        if deadline.is_some_and(|d| Instant::now() >= d) {
            return Err(crate::error::timed_out());
        }
        if after_poll {
            let mut nap = backoff;
            if let Some(d) = deadline {
                nap = nap.min(d.saturating_duration_since(Instant::now()));
            }
            std::thread::sleep(nap);
            backoff = (backoff * 2).min(Duration::from_millis(10));
        }
        // An empty result is the deadline: the loop's next try decides.
        poll_until(fd, Events::OUT, deadline)?;
        after_poll = true;
    }
}
