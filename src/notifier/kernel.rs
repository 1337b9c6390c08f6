//! [`KernelNotifier`]: a notifier whose counter lives in a real kernel eventfd.
//!
//! For the cases where something outside this process reads or writes the counter: KVM's
//! ioeventfd / irqfd, vhost-user kick / call fds passed over a socket, a child process. The
//! kernel object is authoritative once the fd can be in other hands; until then an
//! AutoReset notifier's count lives in memory (`sys::mem_count`).
//!
//! The fd is kept `O_NONBLOCK`. Blocking calls wait in `poll(2)` and retry, so a blocking
//! `read` racing another reader (in this process or another) goes back to waiting instead of
//! sleeping inside `read(2)` with the lock of nothing.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Weak};
use std::time::{Duration, Instant};

use crate::epoll::LazyEpoll;
use crate::events::Events;
use crate::mode::{self, invalid_write, Mode, Options};
// The registrations are shared with the pipe halves, which exist off Linux too.
pub(crate) use crate::notifier::registrations::{KernelDeliver, Registrations};
use crate::sys::fd::Fd;
use crate::sys::{self, eventfd};

/// A notifier backed by a kernel eventfd: same [`Mode`]s and API as
/// [`Notifier`](crate::Notifier), with a real fd that other processes and the kernel can
/// signal.
///
/// - **Counter**: a plain eventfd.
/// - **Semaphore**: the kernel's own `EFD_SEMAPHORE` (a read takes 1).
/// - **AutoReset**: a plain eventfd; the reset is done by the consumer that is handed the
///   readiness ([`consume`](Self::consume), which the embedded epoll calls at delivery), so
///   user code never calls `read`. While the description is private (below), the count
///   lives in memory: see "The count in memory".
///
/// Errors are `io::Error`s carrying the kernel's errno (`raw_os_error()`), also for the
/// checks this type makes before any syscall (`write(u64::MAX)` → `EINVAL`, a timed-out
/// `read_timeout` → `ETIMEDOUT`).
///
/// # Fork
///
/// Usable in a child process: the eventfd is inherited like any fd, so parent and child
/// share one kernel counter — what one writes the other can read, and an AutoReset
/// delivery in either resets it for both — exactly as with a raw eventfd. An
/// [`Epoll`](crate::Epoll) made in the child can watch it; dropping it in the child leaves
/// its registrations in the parent's epolls alone. (In-memory objects made before the
/// fork are refused in the child instead: docs/semantics.md §6.1.)
///
/// # Panicking wakers
///
/// Runs no waker: its blocking calls sleep in the kernel, and async use goes through your
/// reactor (`AsyncNotifierFd` with feature `tokio`).
///
/// # The fd is made `O_NONBLOCK`, and no call depends on it
///
/// Created or adopted ([`from_owned_fd`](Self::from_owned_fd), `TryFrom<OwnedFd>`), the
/// eventfd's open file description is set `O_NONBLOCK`; the blocking calls (`read`, `write`,
/// `read_timeout`) wait in `poll(2)` and retry, so a blocking `read` that loses a race to
/// another reader goes back to waiting instead of sleeping inside `read(2)`. The flag
/// belongs to the open file description, which every dup of the fd shares, in every process
/// it is passed to, and a peer may clear it again (QEMU does so on fds it receives): every
/// read and write evfd makes is non-blocking per call, whatever the flag says
/// (docs/semantics.md §6.4). For a C peer that wants a blocking
/// `read(2)`, hand the fd over with [`into_blocking_fd`](Self::into_blocking_fd).
///
/// That guard costs a syscall's worth: a read is `preadv2(RWF_NOWAIT)` (~90 ns more than
/// `read(2)` where measured) and a write that must not wait is `poll(2)` + `write(2)`. A
/// notifier whose fd nobody else can reach skips it: made by [`new`](Self::new) or the
/// builder (close-on-exec), never lent — no [`AsFd`]/[`AsRawFd`] borrow, no
/// [`try_clone`](Self::try_clone) — and no `fork` since, its description is *private*, and
/// its reads and writes (`try_read`, `try_write`, an [`Epoll`](crate::Epoll)'s AutoReset
/// delivery) are one plain `read(2)` or `write(2)` on the `O_NONBLOCK` description evfd
/// made. The first borrow (or clone, or fork) ends that for good; registering it in an
/// `Epoll`, with mio (`feature = "mio"`), with tokio's reactor (`into_async_fd`,
/// `AsyncNotifierFd`; `feature = "tokio"`), or awaiting it does not: those registrations
/// put the fd in a kernel epoll, not in anyone's hands (a borrow taken later through the
/// wrapper lends, as any other).
///
/// ```
/// use std::os::fd::AsFd;
/// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
/// k.try_write(2)?; // private: one write(2)
/// let peer = rustix::io::dup(k.as_fd())?; // lent: from now on, per-call non-blocking
/// let fl = rustix::fs::fcntl_getfl(&peer)?;
/// rustix::fs::fcntl_setfl(&peer, fl - rustix::fs::OFlags::NONBLOCK)?; // what QEMU does
/// assert_eq!(k.try_read()?, 2);
/// let e = k.try_read().unwrap_err(); // count 0 on a blocking description: still at once
/// assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # The count in memory
///
/// A private AutoReset notifier keeps its count in memory, the kernel's count staying at 1:
/// a read or a delivery (`try_read`, `consume`, an [`Epoll`](crate::Epoll)'s AutoReset
/// delivery) is an atomic operation with no syscall, and a write is an atomic operation and
/// a `write(2)` of 0, which wakes every poller and epoll item of the eventfd as a real write
/// would, without changing the kernel's count. So an `Epoll` woken by a write delivers it
/// without a syscall. The first borrow, clone or fork, and handing the fd out
/// (`OwnedFd::from`, [`into_blocking_fd`](Self::into_blocking_fd)), put the count into the
/// kernel first, for good (one syscall); so does a write that finds no room, which then
/// waits in the kernel. A blocking read that finds the count empty sleeps on a futex of the
/// count's own until a write (or that flush) wakes it. Nothing of this shows but the
/// syscalls: every face reads the same count.
///
/// ```
/// use std::os::fd::AsFd;
/// let k = evfd::KernelNotifier::new(evfd::Mode::AutoReset)?;
/// k.write(3)?; // the count in memory, and a write(2) of 0
/// assert_eq!(k.count()?, 3);
/// let fd = k.as_fd(); // lent: the count goes to the kernel first
/// let mut b = [0u8; 8];
/// rustix::io::read(fd, &mut b)?;
/// assert_eq!(u64::from_ne_bytes(b), 3);
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// The trait [`EventNotifier`](crate::EventNotifier) covers what this type shares with the
/// in-memory [`Notifier`](crate::Notifier).
///
/// # Examples
///
/// ```
/// use evfd::{KernelNotifier, Mode};
/// let k = KernelNotifier::new(Mode::Semaphore)?;
/// k.write(2)?;
/// assert_eq!(k.read()?, 1); // EFD_SEMAPHORE, done by the kernel
/// assert_eq!(k.read()?, 1);
/// let e = k.try_read().unwrap_err();
/// assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock);
/// assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
/// # Ok::<(), std::io::Error>(())
/// ```
///
/// # References
///
/// - [eventfd(2)](https://man7.org/linux/man-pages/man2/eventfd.2.html)
/// - [poll(2)](https://man7.org/linux/man-pages/man2/poll.2.html)
#[doc(alias = "eventfd")]
#[doc(alias = "EventFd")]
#[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
pub struct KernelNotifier {
    /// The epoll its `read_async` futures wait in, made by the first that waits
    /// (`crate::kernel_async`). First, so that it is dropped first: the eventfd leaves it
    /// before it is closed.
    reader: LazyEpoll,
    /// Shared with the registrations (`Registrations::fd`) and, weakly, with the epoll items
    /// that read it at delivery; closed when the last strong handle goes, which is after
    /// `regs` has left every epoll.
    fd: Arc<Fd>,
    /// Where this notifier is registered; dropping it leaves every epoll.
    regs: Registrations,
    mode: Mode,
    /// `EFD_NONBLOCK` at the API level: `read`/`write` behave as `try_read`/`try_write`.
    /// (The fd itself is always `O_NONBLOCK`.)
    nonblock: bool,
}

crate::mode::builder! {
    /// Builds a [`KernelNotifier`] on a new eventfd.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{KernelNotifier, Mode};
    /// let k = KernelNotifier::builder().mode(Mode::AutoReset).initial(3).build()?;
    /// assert_eq!(k.mode(), Mode::AutoReset);
    /// assert_eq!(k.read()?, 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
    pub struct KernelNotifierBuilder => KernelNotifier { cloexec: true }
    ///
    /// The syscall takes 32 bits; a larger initial count is written right after creation.
    ///
    /// ```
    /// let k = evfd::KernelNotifier::builder().initial(1 << 40).build()?;
    /// assert_eq!(k.read()?, 1 << 40);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn initial;
    fn nonblocking;
    /// Whether the fd is close-on-exec (`EFD_CLOEXEC`). Default `true`, as for every fd
    /// Rust's standard library opens; pass `false` to hand the fd to a child across `exec`.
    ///
    /// ```
    /// let k = evfd::KernelNotifier::builder().cloexec(false).build()?;
    /// assert!(!k.is_cloexec());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn cloexec;
}

impl KernelNotifierBuilder {
    /// Create the eventfd.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if the initial count is above [`LIMIT`](crate::LIMIT); the kernel's errno
    /// (`EMFILE`, `ENFILE`, `ENOMEM`) if the eventfd cannot be created.
    ///
    /// ```
    /// let e = evfd::KernelNotifier::builder().initial(u64::MAX).build().unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn build(self) -> io::Result<KernelNotifier> {
        let o = self.opts;
        o.check()?;
        let (init32, rest) = match u32::try_from(o.initial) {
            Ok(v) => (v, 0),
            Err(_) => (0, o.initial),
        };
        if o.mode == Mode::AutoReset && o.cloexec {
            // Private and AutoReset: the count is kept in memory until the description can
            // be in other hands (`sys::mem_count`); the kernel's is the base
            // count of 1.
            let fd = eventfd::create(1, false, true)?;
            let fd = Fd::private_counted(fd, o.initial)?;
            return Ok(KernelNotifier::wrap(fd, o.mode, o.nonblock));
        }
        let fd = eventfd::create(init32, o.mode == Mode::Semaphore, o.cloexec)?;
        if rest != 0 {
            eventfd::write(fd.as_fd(), rest)?;
        }
        // Close-on-exec and never lent yet: a private description (`sys::fd`), whose reads
        // and writes need no guard against a peer's `O_NONBLOCK`. One that survives `exec`
        // is meant for another program.
        let fd = if o.cloexec {
            Fd::private(fd)
        } else {
            Fd::shared(fd)
        };
        Ok(KernelNotifier::wrap(fd, o.mode, o.nonblock))
    }
}

impl KernelNotifier {
    fn wrap(fd: Fd, mode: Mode, nonblock: bool) -> KernelNotifier {
        let fd = Arc::new(fd);
        fd.register_mem();
        let reset = Arc::downgrade(&fd) as Weak<dyn KernelDeliver>;
        KernelNotifier {
            reader: LazyEpoll::new(),
            regs: Registrations::new(Arc::clone(&fd), reset),
            fd,
            mode,
            nonblock,
        }
    }

    /// Run `register`, a registration of this notifier with a kernel epoll by code that can
    /// take the fd only through the public `AsRawFd` (tokio's `AsyncFd`), without that
    /// borrow lending it (`sys::fd::register_unlent`).
    #[cfg(feature = "tokio")]
    pub(crate) fn register_unlent<R>(self, register: impl FnOnce(KernelNotifier) -> R) -> R {
        let fd = Arc::clone(&self.fd);
        crate::sys::fd::register_unlent(&fd, || register(self))
    }

    /// What a wait for `IN` on the fd registers with: edge-triggered while memory keeps the
    /// count (`sys::mem_count`).
    pub(crate) fn read_interest(&self) -> Events {
        self.fd.kernel_events(Events::IN)
    }

    /// Where this notifier is registered (for `Epoll`'s kernel side).
    pub(crate) fn registrations(&self) -> &Registrations {
        &self.regs
    }

    /// The epoll its `read_async` futures share (`crate::kernel_async`).
    pub(crate) fn reader_epoll(&self) -> &LazyEpoll {
        &self.reader
    }

    /// A new close-on-exec eventfd with count 0 in `mode`.
    ///
    /// # Errors
    ///
    /// The kernel's errno (`EMFILE`, `ENFILE`, `ENOMEM`).
    ///
    /// # Examples
    ///
    /// ```
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// k.notify()?;
    /// k.notify()?;
    /// assert_eq!(k.read()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(alias = "eventfd")]
    pub fn new(mode: Mode) -> io::Result<KernelNotifier> {
        KernelNotifier::builder().mode(mode).build()
    }

    /// A builder for another initial count or flags.
    ///
    /// ```
    /// let k = evfd::KernelNotifier::builder().initial(2).build()?;
    /// assert_eq!(k.count()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn builder() -> KernelNotifierBuilder {
        KernelNotifierBuilder::default()
    }

    /// The compatibility constructor: `eventfd2(initial, flags)` with Linux flag values
    /// ([`flags::SEMAPHORE`](crate::flags::SEMAPHORE), [`flags::NONBLOCK`](crate::flags::NONBLOCK),
    /// [`flags::CLOEXEC`](crate::flags::CLOEXEC)) plus the RFC's
    /// [`flags::AUTORESET`](crate::flags::AUTORESET), done in user space. As with `eventfd2`, the fd is close-on-exec
    /// only with `CLOEXEC`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an unknown bit, for `SEMAPHORE | AUTORESET`, and for an initial
    /// count above [`LIMIT`](crate::LIMIT); the kernel's errno if the eventfd cannot be created.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{flags, KernelNotifier, Mode};
    /// let k = KernelNotifier::from_flags(1, flags::AUTORESET | flags::CLOEXEC)?;
    /// assert_eq!(k.mode(), Mode::AutoReset);
    /// assert!(k.is_cloexec());
    /// assert!(KernelNotifier::from_flags(0, flags::SEMAPHORE | flags::AUTORESET).is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(alias = "eventfd2")]
    pub fn from_flags(initial: u64, flags: u32) -> io::Result<KernelNotifier> {
        // The same parser as `Notifier::from_flags`: the same flags, the same messages.
        KernelNotifierBuilder {
            opts: Options::from_flags(initial, flags)?,
        }
        .build()
    }

    /// Adopt an eventfd made elsewhere: a vhost-user kick/call fd received over a socket, a
    /// KVM ioeventfd/irqfd, an fd inherited from a parent.
    ///
    /// Safe: an [`OwnedFd`] already guarantees the fd is open and ours to close.
    ///
    /// - The fd is checked through `/proc/self/fdinfo/<fd>`: one without `eventfd-count`
    ///   is refused. Where that file cannot be read (no `/proc`), the fd is taken on trust.
    /// - `mode` must agree with the fd's semaphore flag where the kernel shows it
    ///   (`eventfd-semaphore`, Linux 6.4+): `Semaphore` needs an `EFD_SEMAPHORE` fd,
    ///   `Counter` and `AutoReset` need a plain one. On older kernels this is not checked
    ///   and the fd's own flag decides what a read takes.
    /// - `O_NONBLOCK` is set on the fd's **open file description**, which every dup of it
    ///   shares, in every process: a peer that relied on blocking reads of the same
    ///   description would see `EAGAIN`. Peers that received the fd over `SCM_RIGHTS` share
    ///   the description; a peer may also clear the flag again, which changes nothing for
    ///   evfd's own calls (they are non-blocking per call).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a fd that is not an eventfd or whose semaphore flag disagrees with
    /// `mode`; the kernel's errno from `fcntl(2)`.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{KernelNotifier, Mode};
    /// use rustix::event::{eventfd, EventfdFlags};
    ///
    /// let raw = eventfd(5, EventfdFlags::CLOEXEC)?; // e.g. received from a peer
    /// let k = KernelNotifier::from_owned_fd(raw, Mode::Counter)?;
    /// assert_eq!(k.read()?, 5);
    ///
    /// let (pipe_rd, _pipe_wr) = rustix::pipe::pipe()?;
    /// let e = KernelNotifier::from_owned_fd(pipe_rd, Mode::Counter).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_owned_fd(fd: OwnedFd, mode: Mode) -> io::Result<KernelNotifier> {
        adopt_eventfd(fd.as_fd(), mode)?;
        // Whoever gave it may hold duplicates.
        Ok(KernelNotifier::wrap(Fd::shared(fd), mode, false))
    }

    /// The mode.
    ///
    /// ```
    /// assert_eq!(evfd::KernelNotifier::new(evfd::Mode::AutoReset)?.mode(), evfd::Mode::AutoReset);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether `read`/`write` are non-blocking at the API level (the fd always is).
    ///
    /// ```
    /// assert!(!evfd::KernelNotifier::new(evfd::Mode::Counter)?.is_nonblocking());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_nonblocking(&self) -> bool {
        self.nonblock
    }

    /// Whether the fd is close-on-exec (`FD_CLOEXEC`, read from the kernel with
    /// `fcntl(F_GETFD)`, which cannot fail on an open fd).
    ///
    /// ```
    /// assert!(evfd::KernelNotifier::new(evfd::Mode::Counter)?.is_cloexec());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_cloexec(&self) -> bool {
        // F_GETFD fails only on a closed fd, which an `OwnedFd` is not.
        eventfd::is_cloexec(self.fd.as_fd()).unwrap_or(false)
    }

    /// A snapshot of the kernel's count, from `/proc/self/fdinfo` (`eventfd-count`): a
    /// diagnostic, not a synchronisation tool.
    ///
    /// # Errors
    ///
    /// `Unsupported` where `/proc` cannot be read.
    ///
    /// ```
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// k.write(9)?;
    /// assert_eq!(k.count()?, 9);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn count(&self) -> io::Result<u64> {
        if let Some(c) = self.fd.mem_peek() {
            return Ok(c);
        }
        let _ = self.fd.kernel_ready();
        match eventfd::fdinfo(self.fd.as_fd())? {
            Some(info) => Ok(info.count),
            None => Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "/proc/self/fdinfo is not readable",
            )),
        }
    }

    /// Add `n` to the count without waiting: one `write(2)` while the description is
    /// private (AutoReset: of 0, the count is in memory), `poll(2)` + `write(2)` once the fd
    /// was lent (the type docs).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `WouldBlock` (`EAGAIN`) if the count would pass
    /// [`LIMIT`](crate::LIMIT). Nothing changes on error.
    ///
    /// # Examples
    ///
    /// ```
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// k.try_write(evfd::LIMIT)?;
    /// assert_eq!(k.try_write(1).unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_write(&self, n: u64) -> io::Result<()> {
        if n == u64::MAX {
            return Err(invalid_write());
        }
        eventfd::write_fd(&self.fd, n)
    }

    /// Add `n` to the count, waiting for room if it would pass [`LIMIT`](crate::LIMIT). With `NONBLOCK`,
    /// behaves as [`try_write`](Self::try_write).
    ///
    /// # Implementation notes
    ///
    /// One `write(2)`. If `n` does not fit, a blocking description (a peer may have cleared
    /// `O_NONBLOCK`) waits for room in the kernel, exactly for `n`; a non-blocking one waits
    /// in `poll(POLLOUT)`, which the kernel reports while a write of 1 fits, so a larger
    /// write that still does not fit retries with a short backoff (50 µs doubling to 10 ms).
    /// [`write_timeout`](Self::write_timeout) and [`try_write`](Self::try_write) never wait
    /// in the kernel: they make a zero-timeout `poll(2)` before the `write(2)` (the kernel's
    /// eventfd refuses `RWF_NOWAIT` on writes).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `WouldBlock` only with `NONBLOCK`.
    ///
    /// # Examples
    ///
    /// ```
    /// let k = std::sync::Arc::new(evfd::KernelNotifier::new(evfd::Mode::Counter)?);
    /// k.write(evfd::LIMIT)?;
    /// let k2 = k.clone();
    /// let t = std::thread::spawn(move || k2.write(5)); // waits for the read below
    /// assert_eq!(k.read()?, evfd::LIMIT);
    /// t.join().unwrap()?;
    /// assert_eq!(k.read()?, 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write(&self, n: u64) -> io::Result<()> {
        self.write_until(n, None)
    }

    /// As [`write`](Self::write), giving up after `timeout` if `n` does not fit below
    /// [`LIMIT`](crate::LIMIT) by then. With `NONBLOCK`, behaves as
    /// [`try_write`](Self::try_write).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `TimedOut` (`ETIMEDOUT`) if `n` did not fit
    /// within `timeout`; `WouldBlock` with `NONBLOCK`. Nothing changes on error.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let k = evfd::KernelNotifier::builder().initial(evfd::LIMIT).build()?;
    /// let e = k.write_timeout(1, Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
    /// assert_eq!(k.read()?, evfd::LIMIT);
    /// k.write_timeout(2, Duration::from_millis(5))?;
    /// assert_eq!(k.count()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_timeout(&self, n: u64, timeout: Duration) -> io::Result<()> {
        self.write_until(n, sys::deadline(timeout))
    }

    fn write_until(&self, n: u64, deadline: Option<Instant>) -> io::Result<()> {
        if self.nonblock || n == u64::MAX {
            return self.try_write(n);
        }
        if self.fd.mem_kept() {
            // Into memory, or (no room there) the count to the kernel, which waits for
            // room.
            match eventfd::write_fd(&self.fd, n) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
        }
        match deadline {
            None => eventfd::write_waiting(self.fd.as_fd(), n),
            Some(_) => sys::write_until(self.fd.as_fd(), deadline, || self.try_write(n)),
        }
    }

    /// `write(1)`.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// k.notify()?;
    /// assert_eq!(k.read()?, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn notify(&self) -> io::Result<()> {
        self.write(1)
    }

    /// Take from the count without waiting: the whole count (Counter, AutoReset) or 1
    /// (Semaphore). One `read(2)` while the description is private (AutoReset: none, the
    /// count is in memory), one `preadv2(RWF_NOWAIT)` once the fd was lent (the type docs).
    ///
    /// # Errors
    ///
    /// `WouldBlock` (`EAGAIN`) when the count is 0.
    ///
    /// # Examples
    ///
    /// ```
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// k.write(7)?;
    /// assert_eq!(k.try_read()?, 7);
    /// assert_eq!(k.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_read(&self) -> io::Result<u64> {
        eventfd::read_fd(&self.fd)
    }

    /// Take from the count, waiting in `poll(2)` while it is 0 (a private AutoReset
    /// notifier, whose count is in memory, waits on a futex instead: "The count in
    /// memory" above). With `NONBLOCK`, behaves as [`try_read`](Self::try_read).
    ///
    /// # Errors
    ///
    /// `WouldBlock` only with `NONBLOCK`; the kernel's errno otherwise.
    ///
    /// # Examples
    ///
    /// ```
    /// let k = std::sync::Arc::new(evfd::KernelNotifier::new(evfd::Mode::Counter)?);
    /// let k2 = k.clone();
    /// let t = std::thread::spawn(move || k2.read());
    /// k.write(4)?;
    /// assert_eq!(t.join().unwrap()?, 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read(&self) -> io::Result<u64> {
        self.read_until(None)
    }

    /// As [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// `TimedOut` if the count stayed 0 for `timeout`; `WouldBlock` with `NONBLOCK`.
    ///
    /// # Examples
    ///
    /// ```
    /// use std::time::Duration;
    /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// let e = k.read_timeout(Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// k.write(1)?;
    /// assert_eq!(k.read_timeout(Duration::from_millis(5))?, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_timeout(&self, timeout: Duration) -> io::Result<u64> {
        self.read_until(sys::deadline(timeout))
    }

    fn read_until(&self, deadline: Option<Instant>) -> io::Result<u64> {
        if self.nonblock {
            return self.try_read();
        }
        // The count memory keeps: the wait sleeps on its futex, woken by the next write
        // (or by a flush, after which the kernel's wait below takes over).
        if let Some(r) = self.fd.mem_take_waiting(deadline) {
            return r;
        }
        if self.fd.kernel_ready().is_err() {
            return Err(io::Error::from(rustix::io::Errno::AGAIN));
        }
        sys::read_until(self.fd.as_fd(), deadline, || self.try_read())
    }

    /// Readiness (`poll(2)` with a zero timeout): the bits of `interest` that hold now, plus
    /// `ERR`/`HUP` if they hold. `IN` iff the count is non-zero, `OUT` iff a write of 1 would
    /// not wait, `ERR` iff the count overflowed (only the kernel's own signal path can do
    /// that). Never consumes anything. `poll(2)` cannot fail on a valid fd short of
    /// `ENOMEM`; if it does, this reports `ERR`.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Events, KernelNotifier, Mode};
    /// let k = KernelNotifier::new(Mode::Counter)?;
    /// assert_eq!(k.poll(Events::IN | Events::OUT), Events::OUT);
    /// k.write(evfd::LIMIT)?;
    /// assert_eq!(k.poll(Events::IN | Events::OUT), Events::IN);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        if let Some(c) = self.fd.mem_peek() {
            return mode::readiness(c) & interest;
        }
        let _ = self.fd.kernel_ready();
        let always = Events::ERR | Events::HUP;
        match sys::poll_now(self.fd.as_fd(), interest | always) {
            Ok(ev) => ev & (interest | always),
            Err(_) => Events::ERR,
        }
    }

    /// Deliver `IN` to this consumer, as the embedded epoll does at harvest: returns the
    /// readiness at delivery (`IN` if it was readable) and, in [`Mode::AutoReset`], resets
    /// the count to 0: in memory while the description is private ("The count in memory"),
    /// else with one `read(2)` (which also wakes blocked writers). Only the consumer whose
    /// reset got the count is handed `IN`: with several consumers, each write is delivered
    /// at most once. Counter and Semaphore: a readiness check that changes nothing.
    ///
    /// # Errors
    ///
    /// The kernel's errno.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Events, KernelNotifier, Mode};
    /// let kick = KernelNotifier::new(Mode::AutoReset)?;
    /// kick.notify()?;
    /// kick.notify()?;
    /// assert!(kick.consume()?.contains(Events::IN));
    /// assert!(!kick.consume()?.contains(Events::IN)); // reset by the first delivery
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn consume(&self) -> io::Result<Events> {
        self.deliver(Events::IN)
    }

    /// Delivery for an interest mask: only an `IN` delivery resets an AutoReset count.
    pub(crate) fn deliver(&self, interest: Events) -> io::Result<Events> {
        if self.mode != Mode::AutoReset || !interest.contains(Events::IN) {
            return Ok(self.poll(Events::IN | Events::OUT));
        }
        match self.try_read() {
            // IN (and ERR) as seen before the reset, OUT as it is now.
            Ok(c) => Ok(mode::readiness(c) | mode::readiness(0)),
            // Someone else reset it first: this consumer delivers nothing (a write that
            // lands after our read is not ours to report: we did not reset it).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                Ok(self.poll(Events::OUT) & Events::OUT)
            }
            Err(e) => Err(e),
        }
    }

    /// A second handle on the same kernel eventfd (`dup(2)`; close-on-exec iff this one is).
    ///
    /// # Errors
    ///
    /// The kernel's errno (`EMFILE`).
    ///
    /// # Examples
    ///
    /// ```
    /// let a = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
    /// let b = a.try_clone()?;
    /// b.write(3)?;
    /// assert_eq!(a.read()?, 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[doc(alias = "dup")]
    pub fn try_clone(&self) -> io::Result<KernelNotifier> {
        // Two fds of one description: neither is private any more.
        let fd = eventfd::dup(self.fd.lend(), self.is_cloexec())?;
        Ok(KernelNotifier::wrap(
            Fd::shared(fd),
            self.mode,
            self.nonblock,
        ))
    }

    /// Give the eventfd away **blocking**: clears `O_NONBLOCK` and returns the fd, for a
    /// peer (C code, a library) that calls a blocking `read(2)` on it.
    ///
    /// A `KernelNotifier` keeps its fd `O_NONBLOCK` (its blocking calls wait in `poll(2)`),
    /// and `O_NONBLOCK` belongs to the **open file description**, which every `dup` of the
    /// fd shares, in every process. An eventfd has no path, so there is no second open
    /// file description to be had: `open("/proc/self/fd/N")` fails with `ENXIO` for it.
    /// So the flag can only be cleared for everyone. That is why this consumes the
    /// notifier: do not keep a [`try_clone`](Self::try_clone) of it (or a dup registered in
    /// an [`Epoll`](crate::Epoll) as an AutoReset source), whose `try_read` would then
    /// block. Writers are unaffected while the count is below [`LIMIT`](crate::LIMIT).
    ///
    /// A peer that only writes the fd (a vhost-user front end, KVM's irqfd) needs none of
    /// this: pass `OwnedFd::from(notifier)`.
    ///
    /// # Errors
    ///
    /// The kernel's errno from `fcntl(2)`; the fd is closed then.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{KernelNotifier, Mode};
    /// use std::os::fd::OwnedFd;
    ///
    /// let k = KernelNotifier::new(Mode::Counter)?;
    /// let writer = k.try_clone()?; // the side that stays in evfd only writes
    /// let fd: OwnedFd = k.into_blocking_fd()?;
    /// let peer = std::thread::spawn(move || {
    ///     let mut buf = [0u8; 8];
    ///     rustix::io::read(&fd, &mut buf).unwrap(); // blocks until the write below
    ///     u64::from_ne_bytes(buf)
    /// });
    /// writer.write(5)?;
    /// assert_eq!(peer.join().unwrap(), 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn into_blocking_fd(self) -> io::Result<OwnedFd> {
        let fd = OwnedFd::from(self);
        eventfd::set_blocking(fd.as_fd())?;
        Ok(fd)
    }
}

/// The eventfd, lent: from the first borrow on, its description may be in a peer's hands,
/// and every read and write of it guards against the peer's `O_NONBLOCK` (the type docs).
/// The first borrow waits for the private reads and writes running on other threads (of
/// any notifier; each one syscall that does not wait), so that none that saw this one
/// private reaches the kernel after the borrow is out. It is async-signal-safe: taken in a
/// signal handler, it does not wait for the call the handler interrupted (docs/semantics.md
/// §6.4 says what that call then relies on).
///
/// ```
/// use std::os::fd::{AsFd, AsRawFd};
/// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
/// assert_eq!(k.as_fd().as_raw_fd(), k.as_raw_fd());
/// # Ok::<(), std::io::Error>(())
/// ```
impl AsFd for KernelNotifier {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.lend()
    }
}

/// As [`AsFd`]: the number lent.
impl AsRawFd for KernelNotifier {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.lend().as_raw_fd()
    }
}

/// Adopt an eventfd in the mode its flags say: [`Mode::Semaphore`] if it was made with
/// `EFD_SEMAPHORE`, else [`Mode::Counter`].
///
/// The flag is read from `/proc/self/fdinfo/<fd>` (`eventfd-semaphore`, Linux 6.4+). Where
/// the kernel does not show it, the fd is adopted as `Counter`, and a semaphore fd's reads
/// would still take 1 each: when you know the mode (or want [`Mode::AutoReset`]), use
/// [`KernelNotifier::from_owned_fd`], which also checks it. As with `from_owned_fd`, the
/// fd's open file description is made `O_NONBLOCK`.
///
/// # Errors
///
/// `InvalidInput` with the kernel's `EINVAL` (what KVM and vhost answer for a fd that is
/// not an eventfd) if `/proc/self/fdinfo` shows it is not one; the kernel's errno from
/// `fcntl(2)`. The fd is closed on error (it was moved in).
///
/// # Examples
///
/// ```
/// use evfd::{KernelNotifier, Mode};
/// use rustix::event::{eventfd, EventfdFlags};
///
/// let k = KernelNotifier::try_from(eventfd(3, EventfdFlags::CLOEXEC)?)?;
/// assert_eq!(k.mode(), Mode::Counter);
/// assert_eq!(k.read()?, 3);
///
/// let k = KernelNotifier::try_from(eventfd(2, EventfdFlags::SEMAPHORE)?)?;
/// assert_eq!(k.read()?, 1); // Mode::Semaphore on Linux 6.4+; the fd's flag decides anyway
///
/// let (pipe_rd, _pipe_wr) = rustix::pipe::pipe()?;
/// let e = KernelNotifier::try_from(pipe_rd).unwrap_err();
/// assert_eq!(e.raw_os_error(), Some(libc::EINVAL));
/// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
/// # Ok::<(), std::io::Error>(())
/// ```
impl TryFrom<OwnedFd> for KernelNotifier {
    type Error = io::Error;

    fn try_from(fd: OwnedFd) -> io::Result<KernelNotifier> {
        let mode = match eventfd::fdinfo(fd.as_fd())? {
            Some(eventfd::FdInfo {
                semaphore: Some(true),
                ..
            }) => Mode::Semaphore,
            _ => Mode::Counter,
        };
        KernelNotifier::from_owned_fd(fd, mode)
    }
}

/// Give the eventfd back (to pass it to a peer, KVM, or another library).
///
/// ```
/// use std::os::fd::OwnedFd;
/// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
/// k.write(2)?;
/// let fd: OwnedFd = k.into();
/// let k = evfd::KernelNotifier::from_owned_fd(fd, evfd::Mode::Counter)?;
/// assert_eq!(k.read()?, 2);
/// # Ok::<(), std::io::Error>(())
/// ```
impl From<KernelNotifier> for OwnedFd {
    fn from(k: KernelNotifier) -> OwnedFd {
        let KernelNotifier {
            reader, fd, regs, ..
        } = k;
        // Its read futures' epoll lets go of the fd before it is given away.
        drop(reader);
        regs.release(fd)
    }
}

/// The adoption check of an eventfd received from elsewhere, for every kind that adopts one
/// ([`KernelNotifier::from_owned_fd`], the kick/call halves): refused (`InvalidInput`) if
/// `/proc/self/fdinfo` shows it is not an eventfd, or shows a semaphore flag that does not
/// fit `mode`; then its open file description is made `O_NONBLOCK`.
pub(crate) fn adopt_eventfd(fd: BorrowedFd<'_>, mode: Mode) -> io::Result<()> {
    if let Some(info) = eventfd::fdinfo(fd)? {
        if let Some(sem) = info.semaphore {
            if sem != (mode == Mode::Semaphore) {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidInput,
                    format!(
                        "eventfd {} {} EFD_SEMAPHORE, which does not fit Mode::{mode:?}",
                        fd.as_raw_fd(),
                        if sem { "has" } else { "lacks" }
                    ),
                ));
            }
        }
    }
    eventfd::set_nonblocking(fd)?;
    Ok(())
}

/// A `KernelNotifier`'s eventfd: the reset is one `read(2)`; `EAGAIN` means another
/// consumer reset it first.
impl KernelDeliver for Fd {
    fn deliver_in(&self) -> bool {
        eventfd::read_fd(self).is_ok()
    }
}

impl fmt::Debug for KernelNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("KernelNotifier")
            .field("fd", &self.fd.as_fd().as_raw_fd())
            .field("mode", &self.mode)
            .field("nonblocking", &self.nonblock)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mode::LIMIT;

    /// Which descriptions a `KernelNotifier` treats as private (`sys::fd`): made here,
    /// close-on-exec, never lent, no fork since. Everything that can put the description in
    /// other hands ends it, for good.
    #[test]
    #[cfg(not(any(miri, evfd_loom)))] // syscalls and fork
    fn a_description_is_private_until_it_can_be_in_other_hands() {
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        assert!(k.fd.is_private(), "made here, close-on-exec");
        k.write(2).unwrap();
        assert_eq!(k.try_read().unwrap(), 2, "the private read takes the count");
        k.try_write(LIMIT).unwrap();
        let e = k.try_write(1).unwrap_err();
        assert_eq!(
            e.kind(),
            io::ErrorKind::WouldBlock,
            "the private write: no room"
        );
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        let e = k.try_write(u64::MAX).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert_eq!(k.try_read().unwrap(), LIMIT);
        assert_eq!(k.try_read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        assert!(k.fd.is_private(), "its own calls lend nothing");

        let lent = KernelNotifier::new(Mode::Counter).unwrap();
        let _ = lent.as_fd();
        assert!(!lent.fd.is_private(), "AsFd lends");
        let raw = KernelNotifier::new(Mode::Counter).unwrap();
        let _ = raw.as_raw_fd();
        assert!(!raw.fd.is_private(), "AsRawFd lends");
        let a = KernelNotifier::new(Mode::Counter).unwrap();
        let b = a.try_clone().unwrap();
        assert!(
            !a.fd.is_private() && !b.fd.is_private(),
            "a clone shares it"
        );
        let inherit = KernelNotifier::builder().cloexec(false).build().unwrap();
        assert!(!inherit.fd.is_private(), "an fd that survives exec");
        let adopted =
            KernelNotifier::from_owned_fd(eventfd::create(0, false, true).unwrap(), Mode::Counter)
                .unwrap();
        assert!(
            !adopted.fd.is_private(),
            "adopted: whoever gave it may hold dups"
        );

        // Registered with a kernel epoll of someone else's (mio's, tokio's reactor): the
        // registration puts the fd in nobody's hands; the public borrows still lend.
        #[cfg(feature = "mio")]
        {
            let mut m = KernelNotifier::new(Mode::Counter).unwrap();
            let poll = mio::Poll::new().unwrap();
            poll.registry()
                .register(&mut m, mio::Token(0), mio::Interest::READABLE)
                .unwrap();
            assert!(m.fd.is_private(), "a mio registration lends nothing");
            m.write(1).unwrap();
            assert_eq!(m.try_read().unwrap(), 1);
            poll.registry().deregister(&mut m).unwrap();
            assert!(m.fd.is_private());
        }
        #[cfg(feature = "tokio")]
        {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_io()
                .build()
                .unwrap();
            rt.block_on(async {
                let a = crate::tokio_fd::AsyncNotifierFd::from_kernel(
                    KernelNotifier::new(Mode::Counter).unwrap(),
                )
                .unwrap();
                let k = a.kernel().unwrap();
                assert!(k.fd.is_private(), "tokio's registration lends nothing");
                a.write(2).await.unwrap();
                assert_eq!(a.read().await.unwrap(), 2);
                assert!(k.fd.is_private(), "nor do its reads and writes");
                let _ = a.as_raw_fd();
                assert!(!k.fd.is_private(), "AsyncNotifierFd's AsRawFd lends");
                let b = crate::tokio_fd::AsyncNotifierFd::from_kernel(
                    KernelNotifier::new(Mode::Counter).unwrap(),
                )
                .unwrap();
                let _ = b.as_fd();
                assert!(!b.kernel().unwrap().fd.is_private(), "and its AsFd");
                let c = KernelNotifier::new(Mode::Counter)
                    .unwrap()
                    .into_async_fd()
                    .unwrap();
                assert!(c.get_ref().fd.is_private(), "into_async_fd lends nothing");
                c.get_ref().write(1).unwrap();
                let mut g = c.readable().await.unwrap();
                assert_eq!(g.try_io(|k| k.get_ref().try_read()).unwrap().unwrap(), 1);
                drop(g);
                assert!(c.get_ref().fd.is_private());
                let _ = c.as_raw_fd();
                assert!(
                    !c.get_ref().fd.is_private(),
                    "a borrow through the AsyncFd lends"
                );
            });
        }

        let forked = KernelNotifier::new(Mode::AutoReset).unwrap();
        assert!(forked.fd.is_private());
        crate::sys::fork::fork_a_child_that_exits();
        assert!(!forked.fd.is_private(), "the child holds it too");
        let after = KernelNotifier::new(Mode::Counter).unwrap();
        assert!(after.fd.is_private(), "made after the fork");
    }
}
