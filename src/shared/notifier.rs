//! The public [`SharedNotifier`]: creation, passing over a Unix socket and validation of what
//! arrives (`send`/`recv`), and the operations over the protocol; with its builder and its
//! syscall counters ([`SharedStats`]). Its fd view is in `fd_view`, its futures in `asyncio`,
//! its epoll source in `source`.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, Ordering::Relaxed};
use std::sync::Arc;
use std::time::Duration;

use super::os::{Region, SysOs};
use super::protocol::{self, Protocol, REGION_SIZE};
use crate::epoll::LazyEpoll;
use crate::events::Events;
use crate::mode::Mode;
use crate::notifier::kernel::{KernelDeliver, Registrations};
use crate::sys::{self, eventfd, scm, shm};

/// The payload that travels with the three fds: a tag, so that a stray message on the socket
/// is told apart from ours before any fd is looked at.
const MSG: [u8; 8] = *b"EVFDMSG1";

// A region is one mapping (`shm::Mapping`, a page): the protocol's size is the mapping's.
const _: () = assert!(REGION_SIZE == shm::Mapping::LEN);

/// The syscalls a [`SharedNotifier`] made in this process (its clones included), counted.
///
/// # Examples
///
/// ```
/// let a = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
/// a.notify()?;
/// assert_eq!(a.read()?, 1);
/// assert_eq!(a.stats(), evfd::stats::SharedStats::default()); // nobody slept: no syscall
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SharedStats {
    /// `FUTEX_WAKE` calls (a write finding a blocked reader, a read finding a blocked writer).
    pub futex_wakes: u64,
    /// `FUTEX_WAIT` calls (blocking reads and writes that slept).
    pub futex_waits: u64,
    /// Doorbell writes (a 0 → non-zero edge while a doorbell consumer, level or edge-only,
    /// is registered, or a consumption while a [`write_async`](SharedNotifier::write_async)
    /// waits for room).
    pub rings: u64,
    /// Doorbell reads (a non-zero → 0 edge while a level doorbell consumer is registered:
    /// an epoll registration or an fd view that is not edge-only).
    pub drains: u64,
    /// Sleep-bell writes: a write finding the blocked reader that sleeps on the sleep bell
    /// (one blocked reader at a time sleeps there instead of in `FUTEX_WAIT`: its wake is
    /// an eventfd write and its sleep one `read(2)`, cheaper than a shared futex's).
    pub bell_wakes: u64,
    /// Sleep-bell sleeps: blocking reads that slept on the sleep bell.
    pub bell_waits: u64,
}

struct SharedCore {
    proto: Protocol<Region, SysOs>,
    memfd: OwnedFd,
    nonblock: bool,
    cloexec: bool,
    /// This process's registration as a doorbell consumer for epolls (made at the first
    /// `Epoll::add`, kept until the last handle goes).
    epoll_armed: AtomicBool,
    /// The process that made this `SharedCore`: a fork child's copy must not undo the parent's
    /// registrations in the shared words.
    pid: u32,
    /// The epoll that this process's `read_async` futures wait in (made at the first wait;
    /// a fork child makes its own).
    reader: LazyEpoll,
    /// Where the doorbell is registered as an epoll's kernel-fd source: dropping the last
    /// handle deletes those registrations, although the peer keeps the doorbell open. An
    /// AutoReset delivery through an epoll resets the shared count (`KernelDeliver`).
    regs: Registrations,
}

/// The epoll's delivery of `IN` to an AutoReset shared notifier: reset the shared count.
impl KernelDeliver for SharedCore {
    fn deliver_in(&self) -> bool {
        self.proto.deliver().is_ok_and(|e| e.contains(Events::IN))
    }
}

impl Drop for SharedCore {
    fn drop(&mut self) {
        if std::process::id() != self.pid {
            return;
        }
        if self.epoll_armed.load(Relaxed) {
            self.proto.disarm_bell();
        }
    }
}

/// An eventfd-style notifier shared between processes, at memory speed.
///
/// The count lives in a small sealed shared-memory region (a memfd) that the other process
/// maps after receiving it over a Unix socket ([`send`](Self::send) /
/// [`recv`](Self::recv)). Modes, operations and errors are [`Notifier`](crate::Notifier)'s:
/// counts up to [`LIMIT`](crate::LIMIT); `write(u64::MAX)` is `InvalidInput`; a write that
/// would pass the limit waits (`try_write`: `WouldBlock`); a read of 0 waits (`try_read`:
/// `WouldBlock`).
///
/// # Speed
///
/// A write, a read and a readiness check are atomics on one cache line of the region: no
/// syscall while nobody sleeps. A blocking reader (or a writer blocked on a full counter)
/// that must sleep announces itself in the region and sleeps on a shared futex word; a
/// write then costs one `FUTEX_WAKE`. One blocked reader at a time sleeps in one `read(2)`
/// of a third fd instead, the sleep bell (an eventfd), whose wake is an eventfd write: two
/// processes handing a count back and forth pay an eventfd's costs, not a shared futex's
/// (which looks its page up at every call). While a doorbell consumer is registered (a
/// [`fd_view`](Self::fd_view), or an [`Epoll`](crate::Epoll) watching it), the doorbell
/// eventfd mirrors `count > 0`: the write that makes the count non-zero and the read that
/// empties it cost one syscall each; writes in between cost none. An edge-only fd view
/// ([`SharedFdView::set_edge_only`](crate::SharedFdView::set_edge_only)) and a pending
/// [`read_async`](Self::read_async) need the first of those only.
/// [`stats`](Self::stats) counts every such syscall.
///
/// # Trust
///
/// The other process is not trusted. It can store any bytes into the region at any time,
/// or die at any instant: this process then sees a count that is some `u64` (an
/// eventfd-legal value), missing or spurious wakes (bounded by its own timeouts), or, when
/// the region's header was overwritten, `InvalidData` from every operation. Never undefined
/// behaviour, a panic, `SIGBUS` (the memfd is sealed against shrinking and growing) or an
/// unbounded loop. What arrives over the socket is validated before anything is mapped.
///
/// # Processes
///
/// A clone is the same object in this process. A child made by `fork(2)` may use its copy
/// of the parent's object: the mapping is `MAP_SHARED` and the futex is a shared one, so
/// both processes act on the same count and wake each other.
///
/// # Examples
///
/// ```
/// use evfd::{Mode, SharedNotifier};
/// use std::os::unix::net::UnixStream;
///
/// let (here, there) = UnixStream::pair()?;
/// let a = SharedNotifier::new(Mode::Semaphore)?;
/// a.send(&here)?;
/// // In the other process (here: the same one):
/// let b = SharedNotifier::recv(&there)?;
/// b.write(2)?;
/// assert_eq!(a.read()?, 1);
/// assert_eq!(a.read()?, 1);
/// assert_eq!(b.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Clone)]
pub struct SharedNotifier {
    inner: Arc<SharedCore>,
}

crate::mode::builder! {
    /// Builds a [`SharedNotifier`] with a chosen [`Mode`], initial count and blocking behaviour.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::{Mode, SharedNotifier};
    /// let s = SharedNotifier::builder().mode(Mode::AutoReset).initial(5).build()?;
    /// assert_eq!(s.read()?, 5);
    /// assert!(SharedNotifier::builder().initial(u64::MAX).build().is_err());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    // Close-on-exec by default, as a `KernelNotifier` and every fd `std` opens.
    pub struct SharedNotifierBuilder => SharedNotifier { cloexec: true }
    fn initial;
    ///
    /// In this process only: a peer's handle has its own setting ([`recv`] gives a
    /// blocking one).
    ///
    /// [`recv`]: SharedNotifier::recv
    fn nonblocking;
    /// Whether the region and doorbell fds of this process are close-on-exec (default: yes).
    ///
    /// ```
    /// let s = evfd::SharedNotifier::builder().cloexec(false).build()?;
    /// assert!(!s.is_cloexec());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    fn cloexec;
}

impl SharedNotifierBuilder {
    /// Create the region and the doorbell.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if the initial count is above [`LIMIT`](crate::LIMIT); the OS error
    /// from `memfd_create`, `ftruncate`, `mmap` or `eventfd`.
    ///
    /// ```
    /// let e = evfd::SharedNotifier::builder().initial(u64::MAX).build().unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn build(self) -> io::Result<SharedNotifier> {
        let o = self.opts;
        o.check()?;
        let memfd = shm::create("evfd-shared", REGION_SIZE, o.cloexec)?;
        let map = shm::Mapping::map(memfd.as_fd())?;
        let bell = eventfd::create(0, false, o.cloexec)?;
        let sleep = eventfd::create_blocking(o.cloexec)?;
        let proto = Protocol::init(Region(map), SysOs::new(bell, sleep), o.mode, o.initial);
        Ok(SharedNotifier::from_parts(
            proto, memfd, o.nonblock, o.cloexec,
        ))
    }
}

fn refused(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

impl SharedNotifier {
    fn from_parts(
        proto: Protocol<Region, SysOs>,
        memfd: OwnedFd,
        nonblock: bool,
        cloexec: bool,
    ) -> SharedNotifier {
        let bell = Arc::clone(&proto.os.bell);
        SharedNotifier {
            inner: Arc::new_cyclic(|me: &std::sync::Weak<SharedCore>| SharedCore {
                proto,
                memfd,
                nonblock,
                cloexec,
                epoll_armed: AtomicBool::new(false),
                pid: std::process::id(),
                reader: LazyEpoll::new(),
                regs: Registrations::new(bell, me.clone() as std::sync::Weak<dyn KernelDeliver>),
            }),
        }
    }

    /// A new shared notifier in `mode` with count 0.
    ///
    /// # Errors
    ///
    /// The OS error from creating the region or the doorbell.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// assert_eq!(s.count(), 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn new(mode: Mode) -> io::Result<SharedNotifier> {
        SharedNotifier::builder().mode(mode).build()
    }

    /// A builder for another mode, initial count or flags.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::builder().mode(evfd::Mode::Semaphore).initial(3).build()?;
    /// assert_eq!(s.read()?, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn builder() -> SharedNotifierBuilder {
        SharedNotifierBuilder::default()
    }

    /// Pass this notifier to the process at the other end of `sock`: one message carrying
    /// the region's memfd, the doorbell eventfd and the readers' sleep-bell eventfd
    /// (`SCM_RIGHTS`). The receiver calls
    /// [`recv`](Self::recv).
    ///
    /// # Errors
    ///
    /// The OS error from `sendmsg`.
    ///
    /// ```
    /// # use std::os::unix::net::UnixStream;
    /// let (a, b) = UnixStream::pair()?;
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// s.send(&a)?;
    /// let r = evfd::SharedNotifier::recv(&b)?;
    /// s.notify()?;
    /// assert_eq!(r.count(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn send(&self, sock: &UnixStream) -> io::Result<()> {
        scm::send(
            sock.as_fd(),
            &MSG,
            &[
                self.inner.memfd.as_fd(),
                self.inner.proto.os.bell.as_fd(),
                self.inner.proto.os.sleep.as_fd(),
            ],
        )
    }

    /// Receive a notifier that the other end of `sock` [`send`](Self::send)s.
    ///
    /// The whole message is validated before anything is mapped: exactly three fds; the
    /// first a memfd open read-write, sealed against shrinking, growing and further sealing
    /// (and not against writes), of exactly the region's size, whose header has the right
    /// magic, layout version and a known mode; the second (the doorbell) and the third (the
    /// readers' sleep bell) eventfds, not `EFD_SEMAPHORE` (where the kernel shows the flag
    /// in `/proc/self/fdinfo`, Linux 6.4+). Anything else is refused and every fd that came
    /// with the message is closed.
    ///
    /// The notifier is blocking and its fds close-on-exec; the mode is the sender's.
    ///
    /// # Errors
    ///
    /// `InvalidData` for a malformed message (saying what is wrong, including a memfd sent
    /// read-only, which could not be mapped writable); `UnexpectedEof` if the socket was
    /// closed; the OS error from `recvmsg` (with the socket's own timeout, if set, as
    /// `WouldBlock`); if the mapping itself still fails (out of memory or address space),
    /// the kernel's error kind with a message saying the mapping failed.
    ///
    /// ```
    /// # use std::os::unix::net::UnixStream;
    /// use std::io::Write;
    /// let (mut a, b) = UnixStream::pair()?;
    /// a.write_all(b"EVFDMSG1")?; // no fds attached
    /// let e = evfd::SharedNotifier::recv(&b).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidData);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn recv(sock: &UnixStream) -> io::Result<SharedNotifier> {
        let mut payload = [0u8; 8];
        let got = scm::recv(sock.as_fd(), &mut payload)?;
        // From here every early return drops `got.fds`: nothing received stays open.
        if got.len == 0 && got.fds.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "socket closed before a shared notifier arrived",
            ));
        }
        if got.truncated {
            return Err(refused(format!(
                "shared notifier message: control data truncated (more than {} fds, or foreign ancillary data)",
                scm::MAX_FDS
            )));
        }
        if got.len != payload.len() || payload != MSG {
            return Err(refused("shared notifier message: wrong payload"));
        }
        let [memfd, bell, sleep]: [OwnedFd; 3] =
            got.fds.try_into().map_err(|fds: Vec<OwnedFd>| {
                refused(format!(
                    "shared notifier message: {} fds, expected 3 (region, doorbell, sleep bell)",
                    fds.len()
                ))
            })?;
        shm::check_sealed(memfd.as_fd(), REGION_SIZE)?;
        let mut header = [0u8; 16];
        shm::pread_exact(memfd.as_fd(), &mut header, protocol::OFF_MAGIC as u64)?;
        let magic = u64::from_ne_bytes(header[..8].try_into().expect("8 bytes"));
        let meta = u64::from_ne_bytes(header[8..].try_into().expect("8 bytes"));
        let mode = protocol::parse_header(magic, meta)?;
        for (fd, what) in [(&bell, "doorbell"), (&sleep, "sleep bell")] {
            match eventfd::fdinfo(fd.as_fd()) {
                // A semaphore eventfd's read takes 1: the doorbell's drain could leave it
                // readable (it would no longer mirror `count > 0`), and the sleep bell's
                // tokens would outlive the wakes they were for.
                Ok(Some(info)) if info.semaphore == Some(true) => {
                    return Err(refused(format!(
                        "shared notifier message: the {what} is an EFD_SEMAPHORE eventfd"
                    )))
                }
                Ok(Some(_)) => {}
                Ok(None) => {
                    return Err(refused(format!(
                        "shared notifier message: cannot tell whether the {what} is an eventfd (no /proc)"
                    )))
                }
                Err(e) => return Err(refused(format!("shared notifier message: {what}: {e}"))),
            }
        }
        // Everything checked: now map. (The memfd cannot change size any more.)
        eventfd::set_nonblocking(bell.as_fd())?;
        let map = shm::Mapping::map(memfd.as_fd())?;
        let proto = Protocol::attach(Region(map), SysOs::new(bell, sleep), mode);
        // The peer may have scribbled between our read and the mapping: look again.
        proto.check_header()?;
        Ok(SharedNotifier::from_parts(proto, memfd, false, true))
    }

    /// The mode (the creator's).
    ///
    /// ```
    /// assert_eq!(evfd::SharedNotifier::new(evfd::Mode::AutoReset)?.mode(), evfd::Mode::AutoReset);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn mode(&self) -> Mode {
        self.inner.proto.mode
    }

    /// Whether `read`/`write` are non-blocking in this process.
    ///
    /// ```
    /// assert!(!evfd::SharedNotifier::new(evfd::Mode::Counter)?.is_nonblocking());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_nonblocking(&self) -> bool {
        self.inner.nonblock
    }

    /// Whether this process's fds for the region and doorbell are close-on-exec.
    ///
    /// ```
    /// assert!(evfd::SharedNotifier::new(evfd::Mode::Counter)?.is_cloexec());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_cloexec(&self) -> bool {
        self.inner.cloexec
    }

    /// A snapshot of the count (whatever the peer stored, as a `u64`).
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// s.write(4)?;
    /// assert_eq!(s.count(), 4);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn count(&self) -> u64 {
        self.inner.proto.count()
    }

    /// Whether two handles are the same object in this process.
    ///
    /// ```
    /// let a = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// assert!(a.ptr_eq(&a.clone()));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn ptr_eq(&self, other: &SharedNotifier) -> bool {
        Arc::ptr_eq(&self.inner, &other.inner)
    }

    /// Add `n` to the count without waiting.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `WouldBlock` if the count would pass
    /// [`LIMIT`](crate::LIMIT); `InvalidData` if the peer corrupted the region. Nothing
    /// changes on error.
    ///
    /// ```
    /// use std::io::ErrorKind;
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// s.try_write(evfd::LIMIT)?;
    /// assert_eq!(s.try_write(1).unwrap_err().kind(), ErrorKind::WouldBlock);
    /// assert_eq!(s.try_write(u64::MAX).unwrap_err().kind(), ErrorKind::InvalidInput);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn try_write(&self, n: u64) -> io::Result<()> {
        self.inner.proto.try_write(n)
    }

    /// Add `n` to the count, waiting for room if it would pass [`LIMIT`](crate::LIMIT).
    /// With `NONBLOCK`, behaves as [`try_write`](Self::try_write).
    ///
    /// A call with no deadline waits as long as a peer holds it back, and that includes
    /// the wake of a blocked reader (in any process): that wake is one plain `write(2)` of
    /// the readers' sleep bell, which waits only while a peer keeps the bell saturated (no
    /// honest peer does; the sleeping reader's next read empties it). The unit is counted
    /// before. [`try_write`](Self::try_write),
    /// [`write_timeout`](Self::write_timeout) and [`write_async`](Self::write_async) never
    /// wait for that: they check for room in the bell first.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX` (even when full); `WouldBlock` only with
    /// `NONBLOCK`; `InvalidData` if the peer corrupted the region.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// s.write(evfd::LIMIT)?;
    /// let s2 = s.clone();
    /// let t = std::thread::spawn(move || s2.write(5)); // waits for the read below
    /// assert_eq!(s.read()?, evfd::LIMIT);
    /// t.join().unwrap()?;
    /// assert_eq!(s.read()?, 5);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn write(&self, n: u64) -> io::Result<()> {
        if self.inner.nonblock {
            return self.try_write(n);
        }
        self.inner.proto.write(n, None)
    }

    /// As [`write`](Self::write), giving up after `timeout` with `TimedOut`.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write), and `TimedOut`.
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = evfd::SharedNotifier::builder().initial(evfd::LIMIT).build()?;
    /// let e = s.write_timeout(1, Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_timeout(&self, n: u64, timeout: Duration) -> io::Result<()> {
        if self.inner.nonblock {
            return self.try_write(n);
        }
        self.inner.proto.write(n, sys::deadline(timeout))
    }

    /// `write(1)`.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// s.notify()?;
    /// s.notify()?;
    /// assert_eq!(s.read()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn notify(&self) -> io::Result<()> {
        self.write(1)
    }

    /// Take from the count without waiting: the whole count (Counter, AutoReset) or 1
    /// (Semaphore).
    ///
    /// # Errors
    ///
    /// `WouldBlock` when the count is 0; `InvalidData` if the peer corrupted the region.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// s.write(7)?;
    /// assert_eq!(s.try_read()?, 7);
    /// assert_eq!(s.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn try_read(&self) -> io::Result<u64> {
        self.inner.proto.try_read()
    }

    /// Take from the count, waiting while it is 0 (in a shared futex: the writer in the
    /// other process wakes this thread). With `NONBLOCK`, behaves as
    /// [`try_read`](Self::try_read).
    ///
    /// # Errors
    ///
    /// `WouldBlock` only with `NONBLOCK`; `InvalidData` if the peer corrupted the region.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// let s2 = s.clone();
    /// let t = std::thread::spawn(move || s2.read());
    /// s.write(2)?;
    /// assert_eq!(t.join().unwrap()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[inline]
    pub fn read(&self) -> io::Result<u64> {
        if self.inner.nonblock {
            return self.try_read();
        }
        self.inner.proto.read(None)
    }

    /// As [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// `TimedOut` if the count stayed 0 for `timeout`; `WouldBlock` with `NONBLOCK`;
    /// `InvalidData` if the peer corrupted the region.
    ///
    /// ```
    /// use std::time::Duration;
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// let e = s.read_timeout(Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_timeout(&self, timeout: Duration) -> io::Result<u64> {
        if self.inner.nonblock {
            return self.try_read();
        }
        self.inner.proto.read(sys::deadline(timeout))
    }

    /// Readiness: the bits of `interest` that hold now, plus `ERR`/`HUP` if they hold. `IN`
    /// iff the count is non-zero, `OUT` iff a write of 1 would not wait. Never consumes.
    ///
    /// ```
    /// use evfd::Events;
    /// let s = evfd::SharedNotifier::new(evfd::Mode::AutoReset)?;
    /// assert_eq!(s.poll(Events::IN | Events::OUT), Events::OUT);
    /// s.notify()?;
    /// assert_eq!(s.poll(Events::IN), Events::IN);
    /// assert_eq!(s.count(), 1); // a poll is not a delivery
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        self.inner.proto.readiness() & (interest | Events::ERR | Events::HUP)
    }

    /// The syscalls this object made in this process.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// let view = s.fd_view()?;
    /// for _ in 0..100 {
    ///     s.notify()?; // only the first is an edge
    /// }
    /// assert_eq!(s.stats().rings, 1);
    /// # drop(view);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn stats(&self) -> SharedStats {
        let os = &self.inner.proto.os;
        SharedStats {
            futex_wakes: os.futex_wakes.load(Relaxed),
            futex_waits: os.futex_waits.load(Relaxed),
            rings: os.rings.load(Relaxed),
            drains: os.drains.load(Relaxed),
            bell_wakes: os.bell_wakes.load(Relaxed),
            bell_waits: os.bell_waits.load(Relaxed),
        }
    }

    /// Deliver `IN` to this consumer, as an epoll harvest would: the readiness at delivery;
    /// a [`Mode::AutoReset`] notifier's count is reset to 0 (writers blocked at the limit are
    /// woken). Counter and Semaphore: nothing changes. Not a syscall unless a doorbell
    /// consumer is registered and this empties the count.
    ///
    /// # Errors
    ///
    /// `InvalidData` if the peer corrupted the region.
    ///
    /// ```
    /// use evfd::{Events, Mode, SharedNotifier};
    /// let kick = SharedNotifier::new(Mode::AutoReset)?;
    /// kick.notify()?;
    /// kick.notify()?;
    /// assert!(kick.consume()?.contains(Events::IN));
    /// assert!(!kick.consume()?.contains(Events::IN)); // reset by the first delivery
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn consume(&self) -> io::Result<Events> {
        self.inner.proto.deliver()
    }

    pub(super) fn arm_bell_here(&self) {
        self.inner.proto.arm_bell();
    }

    pub(super) fn disarm_bell_here(&self) {
        self.inner.proto.disarm_bell();
    }

    pub(super) fn arm_edge_bell_here(&self) {
        self.inner.proto.arm_edge_bell();
    }

    pub(super) fn disarm_edge_bell_here(&self) {
        self.inner.proto.disarm_edge_bell();
    }

    /// Register a read future of this process as an edge-only doorbell consumer
    /// (`asyncio`).
    pub(super) fn arm_edge_waiter_here(&self) {
        self.inner.proto.arm_edge_waiter();
    }

    /// Unregister it; `took`: it completed with a read (protocol docs, "Async readers").
    pub(super) fn disarm_edge_waiter_here(&self, took: bool) {
        self.inner.proto.disarm_edge_waiter(took);
    }

    /// Where the epoll that `read_async` waits in is kept (`asyncio`).
    pub(super) fn reader(&self) -> &LazyEpoll {
        &self.inner.reader
    }

    /// Whether this process's fds are close-on-exec (for duplicates of the doorbell).
    pub(super) fn cloexec(&self) -> bool {
        self.inner.cloexec
    }

    pub(super) fn arm_room_here(&self) {
        self.inner.proto.arm_room();
    }

    pub(super) fn want_pulse_here(&self) {
        self.inner.proto.want_pulse();
    }

    pub(super) fn disarm_room_here(&self) {
        self.inner.proto.disarm_room();
    }

    pub(super) fn bell_fd(&self) -> BorrowedFd<'_> {
        self.inner.proto.os.bell.as_fd()
    }

    /// The epoll registrations of the doorbell.
    pub(super) fn kernel_regs(&self) -> &Registrations {
        &self.inner.regs
    }

    /// The doorbell fd, for the embedded kernel epoll. The first call registers this
    /// process as a doorbell consumer until the object is dropped.
    pub(super) fn epoll_bell(&self) -> BorrowedFd<'_> {
        if !self.inner.epoll_armed.swap(true, Relaxed) {
            self.inner.proto.arm_bell();
        }
        self.inner.proto.os.bell.as_fd()
    }

    /// (blocked readers, blocked writers, level doorbell consumers) as the region says now.
    #[doc(hidden)]
    pub fn sleepers(&self) -> (u64, u64, u64) {
        self.inner.proto.sleepers()
    }

    /// The edge-only doorbell consumers ([`SharedFdView::set_edge_only`]) as the region
    /// says now.
    ///
    /// [`SharedFdView::set_edge_only`]: crate::SharedFdView::set_edge_only
    #[doc(hidden)]
    pub fn edge_consumers(&self) -> u64 {
        self.inner.proto.edge_bells()
    }
}

impl fmt::Debug for SharedNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SharedNotifier")
            .field("mode", &self.mode())
            .field("count", &self.count())
            .field("nonblocking", &self.inner.nonblock)
            .field("memfd", &self.inner.memfd.as_raw_fd())
            .finish()
    }
}

/// The ecosystem trait: the same operations as the inherent methods. `fd` is `None`: the
/// doorbell mirrors the count only while a consumer is registered, so an OS poller should
/// use [`SharedNotifier::fd_view`], whose fd is readable exactly while the count is
/// non-zero.
///
/// # Examples
///
/// ```
/// use evfd::{EventNotifier, Mode, SharedNotifier};
/// fn kick(n: &dyn EventNotifier) -> std::io::Result<()> {
///     n.notify()
/// }
/// let s = SharedNotifier::new(Mode::AutoReset)?;
/// kick(&s)?;
/// assert_eq!(EventNotifier::count(&s)?, 1);
/// assert!(EventNotifier::consume(&s)?.contains(evfd::Events::IN));
/// assert_eq!(s.count(), 0);
/// assert!(EventNotifier::fd(&s).is_none());
/// # Ok::<(), std::io::Error>(())
/// ```
impl crate::event_notifier::EventNotifier for SharedNotifier {
    crate::event_notifier::forward_common!();

    fn count(&self) -> io::Result<u64> {
        Ok(SharedNotifier::count(self))
    }

    fn consume(&self) -> io::Result<Events> {
        SharedNotifier::consume(self)
    }

    fn fd(&self) -> Option<BorrowedFd<'_>> {
        None
    }
}

impl crate::event_notifier::Sealed for SharedNotifier {}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wait_queue::spin::{WaitEnd, SPIN_MISSES};

    /// A parked wait that turns the spin on (woken soon, from another CPU), and one that
    /// counts as a miss while it is on.
    const START: WaitEnd = WaitEnd::Parked {
        ns: 10_000,
        here: false,
    };
    const MISS: WaitEnd = WaitEnd::Parked {
        ns: 60_000,
        here: false,
    };

    /// A blocking read that finds its units at once never spun: it must not count as a
    /// spin that paid. (It did: in a ping-pong whose two processes share a CPU, every
    /// other read finds the answer already there, and those "successes" cleared the misses
    /// of the reads that spun in vain, so the spin never turned off.)
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn an_immediate_read_teaches_the_spin_gauge_nothing() {
        let s = SharedNotifier::new(Mode::Counter).unwrap();
        let gauge = &s.inner.proto.spin;
        gauge.learn(START);
        assert!(gauge.budget_ns() > 0, "spinning is on");
        for _ in 0..SPIN_MISSES - 1 {
            gauge.learn(MISS);
        }
        s.write(1).unwrap();
        assert_eq!(s.read().unwrap(), 1); // at once: no spin, no park
        gauge.learn(MISS);
        assert_eq!(
            gauge.budget_ns(),
            0,
            "{SPIN_MISSES} misses in a row, with an immediate read between, stop the spin"
        );
    }

    /// Pin the calling thread to `cpu`.
    fn pin(cpu: usize) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).unwrap();
    }

    /// A blocked read woken by a writer on the CPU it parked on turns its process's spin
    /// off: the writer could not have answered while the reader spun. The writer's CPU
    /// crosses processes through the region (`Words::waker_cpu`); before it did, the rule
    /// never fired for a `SharedNotifier` and a pair sharing a CPU kept spinning.
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn a_wake_from_the_readers_own_cpu_turns_the_spin_off() {
        let all = rustix::thread::sched_getaffinity(None).unwrap();
        let cpu = (0..rustix::thread::CpuSet::MAX_CPU)
            .find(|&c| all.is_set(c))
            .unwrap();
        let s = SharedNotifier::new(Mode::Counter).unwrap();
        let gauge = &s.inner.proto.spin;
        gauge.learn(START);
        assert!(gauge.budget_ns() > 0, "spinning is on");
        let s2 = s.clone();
        let t = std::thread::spawn(move || {
            pin(cpu);
            std::thread::sleep(Duration::from_millis(20));
            s2.write(1).unwrap();
        });
        pin(cpu);
        // Spins its budget (the writer sleeps far longer), parks, is woken from `cpu`.
        let got = s.read();
        rustix::thread::sched_setaffinity(None, &all).unwrap();
        t.join().unwrap();
        assert_eq!(got.unwrap(), 1);
        assert_eq!(
            gauge.budget_ns(),
            0,
            "woken from the CPU it parked on: spinning is off"
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn send_sync_debug() {
        fn assert<T: Send + Sync + fmt::Debug + Clone + 'static>() {}
        assert::<SharedNotifier>();
        let s = SharedNotifier::new(Mode::Counter).unwrap();
        assert!(format!("{s:?}").contains("Counter"));
    }
}
