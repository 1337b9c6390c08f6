//! Kick and call halves: [`ConsumerHalf`] over the read end of a pipe (or an eventfd), and
//! [`NotifierHalf`] over the write end of a pipe (or an eventfd), with eventfd semantics as
//! far as a pipe carries them. docs/pipes.md has the table against eventfd.
//!
//! On macOS and the BSDs, QEMU and rust-vmm (`vmm_sys_util::event`) use a pipe where Linux
//! uses an eventfd: a vhost-user backend gets the read end of a kick pipe and the write end
//! of a call pipe; a notify writes one 8-byte word, a consume reads 8 bytes. These types
//! speak that protocol, and on Linux the same types wrap an eventfd
//! ([`KernelNotifier::halves`](crate::KernelNotifier::halves)), so device code is written
//! once for both. [`pipe`] makes a new pair.
//!
//! - **Counter**: a read sums the 8-byte words in the pipe (each a native-endian `u64`, as
//!   written) and returns the sum.
//! - **Semaphore**: a read takes one unit: a word of value `n` gives `n` reads of 1 (the
//!   `n - 1` left are held by the consumer, see below).
//! - **AutoReset**: [`ConsumerHalf::consume`] (the delivery) drains the pipe; reads as
//!   Counter.
//!
//! What the consumer took from the pipe but has not returned yet (a Semaphore word's
//! remaining units, words past [`LIMIT`] in a Counter read, the bytes of a
//! word a foreign writer split) is held in the consumer object, not in the pipe: the pipe
//! is then not readable although the consumer is (its [`poll`](ConsumerHalf::poll) says
//! so, and so does an evfd [`Epoll`](crate::Epoll) watching the consumer, see below).
//!
//! # As `Epoll` sources (Linux, macOS, FreeBSD)
//!
//! Both halves are [`Source`](crate::Source)s. Over an eventfd they are watched as a
//! `KernelNotifier` is (an AutoReset consumer is reset by the delivery of `IN`). A pipe
//! consumer is watched through a small kernel epoll of its own, which holds the pipe's read
//! end and a **held bell** (an eventfd that is readable exactly while the consumer holds
//! units): so the consumer is readable to every `Epoll` face (blocking, async, fd view,
//! nested) while it holds units the pipe does not show, and an `Epoll` never sleeps on a
//! consumer that has something to read. Each delivery of `IN` goes through the consumer
//! (`KernelDeliver`): AutoReset drains the pipe and what it holds, and delivers `IN` only
//! if that took something; Counter and Semaphore deliver the readiness (`IN` for the pipe or
//! held units, `HUP` once every write end is closed) and take nothing. The two extra fds
//! exist only for pipe consumers.
//!
//! On macOS and FreeBSD the `Epoll`'s kernel side is a kqueue (`sys::kqueue`): the
//! consumer's own poller is a kqueue, its held bell a kqueue holding one `EVFILT_USER`
//! event, and each delivery also scans the consumer's kqueue, so that a level-triggered
//! pipe event that is no longer true stops showing through it. There the halves are the
//! kernel-backed notifier (`KernelNotifier` is Linux's eventfd). Compiled there (CI's
//! `cargo clippy`), run only on Linux. Elsewhere (no epoll, no kqueue) they are no `Epoll`
//! sources.
//!
//! LOCKING: `Core::held` is a leaf mutex, held across the consumer's own non-blocking
//! `read(2)`s (so that two threads sharing one consumer do not split a word) and the held
//! bell's `read(2)`/`write(2)` (so the bell follows the units exactly), never across a wait
//! or foreign code. An epoll's delivery takes it with that epoll's registry held.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rustix::fs::{FileType, OFlags};

#[cfg(evfd_kernel_side)]
use crate::epoll::LazyEpoll;
use crate::events::Events;
use crate::mode::{Mode, LIMIT};
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;
#[cfg(evfd_kernel_side)]
use crate::notifier::registrations::{KernelDeliver, Registrations};
use crate::sys;
use crate::sys::fd::Fd;

/// What the fd is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// A pipe (or FIFO) end: words, summed by the consumer.
    Pipe,
    /// An eventfd (Linux): the kernel keeps the count.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Eventfd,
}

/// What a pipe consumer holds between reads.
#[derive(Default, Debug)]
struct Held {
    /// Units taken from the pipe and not yet returned.
    units: u64,
    /// The first bytes of a word whose rest has not arrived.
    partial: [u8; 8],
    partial_len: usize,
    /// The held bell is rung (readable): kept equal to `units > 0`.
    #[cfg(evfd_kernel_side)]
    bell_rung: bool,
}

/// A consumer's state, shared (weakly) with the epolls that deliver to it.
struct Core {
    /// The read end (or eventfd). Shared with the registrations for an eventfd, which is
    /// the registered fd then.
    fd: Arc<Fd>,
    kind: Kind,
    mode: Mode,
    held: Mutex<Held>,
    /// A pipe's held bell (module docs): a non-blocking eventfd, count 1 while
    /// `held.units > 0`, else 0 (on macOS and FreeBSD a kqueue with one `EVFILT_USER`
    /// event, triggered while `held.units > 0`).
    #[cfg(evfd_kernel_side)]
    bell: Option<OwnedFd>,
    /// A pipe's own kqueue (the registered fd), scanned at each delivery: a kqueue watched
    /// by another counts a level-triggered event that is no longer true until it is
    /// scanned (`sys::kqueue`), so the epoll watching this consumer would otherwise go on
    /// seeing it readable after a delivery that took everything.
    #[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
    own: Option<Arc<Fd>>,
}

/// The consumer half of a kick (or err, or exit) event: the read end of a pipe, or an eventfd.
///
/// # Examples
///
/// ```
/// use evfd::{Events, Mode};
/// let (kick, notifier) = evfd::halves::pipe(Mode::Semaphore)?;
/// notifier.write(2)?;
/// assert_eq!(kick.read()?, 1);
/// assert_eq!(kick.poll(Events::IN), Events::IN); // one unit left, held by the consumer
/// assert_eq!(kick.read()?, 1);
/// assert_eq!(kick.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ConsumerHalf {
    /// The epoll its `read_async` futures wait in, made by the first that waits
    /// (`crate::kernel_async`). First, so that it is dropped first: the fd leaves it before
    /// it is closed.
    #[cfg(evfd_kernel_side)]
    reader: LazyEpoll,
    core: Arc<Core>,
    /// Where it is registered as an `Epoll` source (the eventfd, or for a pipe its own
    /// kernel epoll); dropping it leaves every epoll.
    #[cfg(evfd_kernel_side)]
    regs: Registrations,
}

/// The notifier half of a call event: the write end of a pipe, or an eventfd.
///
/// # Examples
///
/// ```
/// let (consumer, call) = evfd::halves::pipe(evfd::Mode::Counter)?;
/// call.notify()?;
/// call.write(4)?;
/// assert_eq!(consumer.read()?, 5);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct NotifierHalf {
    fd: Arc<Fd>,
    kind: Kind,
    #[cfg(evfd_kernel_side)]
    regs: Registrations,
}

/// A new pipe as a pair of halves, consumer first (the order of
/// `vmm_sys_util::event::new_event_consumer_and_notifier`): both ends close-on-exec and
/// `O_NONBLOCK`. On every Unix, Linux included (use
/// [`KernelNotifier::halves`](crate::KernelNotifier::halves) for an eventfd).
///
/// # Errors
///
/// The kernel's errno (`EMFILE`, `ENFILE`).
///
/// ```
/// use evfd::{Events, Mode};
/// let (kick, notifier) = evfd::halves::pipe(Mode::AutoReset)?;
/// notifier.notify()?;
/// notifier.notify()?;
/// assert!(kick.consume()?.contains(Events::IN)); // one delivery took both
/// assert!(!kick.consume()?.contains(Events::IN));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn pipe(mode: Mode) -> io::Result<(ConsumerHalf, NotifierHalf)> {
    let (rd, wr) = sys::pipe::pipe(true)?;
    Ok((
        ConsumerHalf::new(rd, Kind::Pipe, mode)?,
        NotifierHalf::new(wr, Kind::Pipe),
    ))
}

fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    let fl = rustix::fs::fcntl_getfl(fd)?;
    if !fl.contains(OFlags::NONBLOCK) {
        rustix::fs::fcntl_setfl(fd, fl | OFlags::NONBLOCK)?;
    }
    Ok(())
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg)
}

/// Check `fd` for a half: a pipe/FIFO end open for `need` (`O_RDONLY` or `O_WRONLY`; `O_RDWR`
/// does for both), or (Linux) an eventfd in `mode`. Sets `O_NONBLOCK`.
fn adopt(fd: OwnedFd, mode: Mode, reading: bool) -> io::Result<(OwnedFd, Kind)> {
    let st = rustix::fs::fstat(&fd)?;
    if FileType::from_raw_mode(st.st_mode) == FileType::Fifo {
        let acc = rustix::fs::fcntl_getfl(&fd)? & OFlags::RWMODE;
        let ok = acc == OFlags::RDWR
            || acc
                == if reading {
                    OFlags::RDONLY
                } else {
                    OFlags::WRONLY
                };
        if !ok {
            return Err(invalid(format!(
                "fd {} is the {} end of a pipe; a {} half needs the {} end",
                fd.as_raw_fd(),
                if reading { "write" } else { "read" },
                if reading { "consumer" } else { "notifier" },
                if reading { "read" } else { "write" },
            )));
        }
        set_nonblocking(fd.as_fd())?;
        return Ok((fd, Kind::Pipe));
    }
    #[cfg(any(target_os = "linux", target_os = "android"))]
    {
        // An eventfd: checked (and made O_NONBLOCK) as KernelNotifier adopts one.
        crate::notifier::kernel::adopt_eventfd(fd.as_fd(), mode)?;
        Ok((fd, Kind::Eventfd))
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = mode;
        Err(invalid(format!("fd {} is not a pipe", fd.as_raw_fd())))
    }
}

/// `EPIPE` (kind `BrokenPipe`): every write end of the pipe is closed and nothing is left.
fn broken_pipe() -> io::Error {
    io::Error::from_raw_os_error(rustix::io::Errno::PIPE.raw_os_error())
}

impl Core {
    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Make the held bell follow `held.units` (under the `held` lock). A bell that cannot
    /// be rung (the eventfd at its limit: impossible at count 0) or drained (already empty)
    /// is left as it is.
    fn sync_bell(&self, held: &mut Held) {
        #[cfg(evfd_kernel_side)]
        if let Some(bell) = &self.bell {
            let want = held.units > 0;
            if want != held.bell_rung {
                let r = if want {
                    sys::eventfd::write_now(bell.as_fd(), 1)
                } else {
                    sys::eventfd::read_now(bell.as_fd()).map(|_| ())
                };
                if r.is_ok() {
                    held.bell_rung = want;
                }
            }
        }
        let _ = held;
    }

    /// One `read(2)` into `buf` that never waits, whatever the shared `O_NONBLOCK` says:
    /// `Ok(0)` at end of file, `WouldBlock` if empty.
    fn read_raw(&self, buf: &mut [u8]) -> io::Result<usize> {
        Ok(sys::pipe::read_now(self.fd.as_fd(), buf)?)
    }

    /// Read whole words from the pipe, handing each to `f`: one word if `one`, else until
    /// the pipe is empty. The bytes of a word split by a foreign writer are kept in `held`
    /// until the rest arrives. Returns whether end of file was seen.
    fn read_words(
        &self,
        held: &mut Held,
        one: bool,
        mut f: impl FnMut(&mut Held, u64),
    ) -> io::Result<bool> {
        let mut buf = [0u8; 512];
        loop {
            // A split word is completed first, byte-exactly; `one` reads a word at most.
            let want = if held.partial_len > 0 || one {
                8 - held.partial_len
            } else {
                buf.len()
            };
            let n = match self.read_raw(&mut buf[..want]) {
                Ok(0) => return Ok(true),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            };
            let mut bytes = &buf[..n];
            let mut words_done = 0;
            if held.partial_len > 0 {
                let take = bytes.len().min(8 - held.partial_len);
                let at = held.partial_len;
                held.partial[at..at + take].copy_from_slice(&bytes[..take]);
                held.partial_len += take;
                bytes = &bytes[take..];
                if held.partial_len == 8 {
                    held.partial_len = 0;
                    let w = u64::from_ne_bytes(held.partial);
                    f(held, w);
                    words_done += 1;
                }
            }
            let mut words = bytes.chunks_exact(8);
            for w in &mut words {
                f(held, u64::from_ne_bytes(w.try_into().expect("8 bytes")));
                words_done += 1;
            }
            let rest = words.remainder();
            if !rest.is_empty() {
                held.partial[..rest.len()].copy_from_slice(rest);
                held.partial_len = rest.len();
            }
            if one && words_done > 0 {
                return Ok(false);
            }
        }
    }

    fn try_read(&self) -> io::Result<u64> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.kind == Kind::Eventfd {
            return sys::eventfd::read_now(self.fd.as_fd());
        }
        let mut held = self.held();
        let r = self.try_read_pipe(&mut held);
        self.sync_bell(&mut held);
        r
    }

    fn try_read_pipe(&self, held: &mut Held) -> io::Result<u64> {
        let eof = if self.mode == Mode::Semaphore {
            loop {
                if held.units > 0 {
                    held.units -= 1;
                    return Ok(1);
                }
                // One word at a time: a zero word carries nothing, so read on.
                let mut got = false;
                let eof = self.read_words(held, true, |h, w| {
                    h.units = w;
                    got = true;
                })?;
                if !got {
                    break eof;
                }
            }
        } else {
            // Held units first (at most LIMIT per read, as an eventfd's count).
            let mut total = held.units.min(LIMIT);
            held.units -= total;
            let eof = self.read_words(held, false, |h, w| {
                match total.checked_add(w).filter(|&t| t <= LIMIT) {
                    Some(t) => total = t,
                    // Past what one read can return: kept for the next read.
                    None => h.units = h.units.saturating_add(w),
                }
            })?;
            if total > 0 {
                return Ok(total);
            }
            eof
        };
        Err(if eof {
            broken_pipe()
        } else {
            crate::error::would_block()
        })
    }

    fn poll(&self, interest: Events) -> Events {
        let always = Events::ERR | Events::HUP;
        let mut ev = sys::poll_now(self.fd.as_fd(), Events::IN).unwrap_or(Events::ERR);
        if self.kind == Kind::Pipe && self.held().units > 0 {
            ev |= Events::IN;
        }
        ev & (interest | always)
    }

    /// The AutoReset delivery: drain, and say what was delivered.
    fn consume(&self) -> io::Result<Events> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.kind == Kind::Eventfd {
            return match sys::eventfd::read_now(self.fd.as_fd()) {
                Ok(_) => Ok(Events::IN),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Events::empty()),
                Err(e) => Err(e),
            };
        }
        let mut held = self.held();
        let mut any = std::mem::take(&mut held.units) > 0;
        let r = self.read_words(&mut held, false, |_, w| any |= w > 0);
        self.sync_bell(&mut held);
        let mut ev = if any { Events::IN } else { Events::empty() };
        if r? {
            ev |= Events::HUP;
        }
        Ok(ev)
    }
}

/// An `Epoll`'s delivery to a consumer watched as a kernel fd (module docs): AutoReset
/// drains, Counter and Semaphore report the readiness; `IN` only if the consumer had
/// something.
#[cfg(evfd_kernel_side)]
impl KernelDeliver for Core {
    fn deliver_in(&self) -> bool {
        self.deliver(Events::IN).contains(Events::IN)
    }

    fn deliver(&self, ev: Events) -> Events {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.kind == Kind::Eventfd {
            // Registered only with AutoReset: the eventfd's own reset.
            let mut ev = ev;
            if ev.contains(Events::IN) && sys::eventfd::read_now(self.fd.as_fd()).is_err() {
                ev.remove(Events::IN);
            }
            return ev;
        }
        // The kernel saw this consumer's own epoll readable (a pipe event or the held bell):
        // what that means is the consumer's to say.
        let had_in = ev.contains(Events::IN);
        let rest = ev - Events::IN;
        let now = if self.mode == Mode::AutoReset && had_in {
            // An error reading the pipe is reported as ERR (the read end has no other).
            self.consume().unwrap_or(Events::ERR)
        } else {
            self.poll(Events::IN)
        };
        let mut out = rest | (now & (Events::HUP | Events::ERR));
        if had_in && now.contains(Events::IN) {
            out |= Events::IN;
        }
        #[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
        if let Some(own) = &self.own {
            // Takes nothing: the scan drops the events that are no longer true.
            let _ = sys::epoll::wait(own.as_fd(), &mut Vec::new(), 2, Some(Instant::now()));
        }
        out
    }
}

impl ConsumerHalf {
    fn new(fd: OwnedFd, kind: Kind, mode: Mode) -> io::Result<ConsumerHalf> {
        // A half is made to be handed to a peer (vhost-user, a VMM): shared from the start.
        let fd = Arc::new(Fd::shared(fd));
        #[cfg(evfd_kernel_side)]
        {
            // A pipe is watched through its own kernel epoll: the read end and the held bell.
            let (watched, bell) = match kind {
                Kind::Pipe => {
                    let bell = sys::eventfd::create(0, false, true)?;
                    let pfd = sys::epoll::create()?;
                    sys::epoll::add(pfd.as_fd(), fd.as_fd(), Events::IN, 0)?;
                    sys::epoll::add(pfd.as_fd(), bell.as_fd(), Events::IN, 1)?;
                    (Arc::new(Fd::private(pfd)), Some(bell))
                }
                #[cfg(any(target_os = "linux", target_os = "android"))]
                Kind::Eventfd => (Arc::clone(&fd), None),
            };
            let core = Arc::new(Core {
                #[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
                own: (kind == Kind::Pipe).then(|| Arc::clone(&watched)),
                fd,
                kind,
                mode,
                held: Mutex::new(Held::default()),
                bell,
            });
            let deliver = Arc::downgrade(&core) as std::sync::Weak<dyn KernelDeliver>;
            Ok(ConsumerHalf {
                reader: LazyEpoll::new(),
                regs: Registrations::new(watched, deliver),
                core,
            })
        }
        #[cfg(not(evfd_kernel_side))]
        Ok(ConsumerHalf {
            core: Arc::new(Core {
                fd,
                kind,
                mode,
                held: Mutex::new(Held::default()),
            }),
        })
    }

    /// Adopt a kick fd received from a peer: the read end of a pipe (or FIFO, or one opened
    /// `O_RDWR`), or, on Linux, an eventfd (checked against `mode` as
    /// [`KernelNotifier::from_owned_fd`](crate::KernelNotifier::from_owned_fd) checks it).
    /// The open file description is made `O_NONBLOCK` (shared with every dup of it); no
    /// call depends on it (a peer may clear it).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for the write end of a pipe, or a fd that is neither a pipe nor an
    /// eventfd; the kernel's errno from `fstat(2)`/`fcntl(2)` (and, for a pipe on Linux,
    /// macOS and FreeBSD, from making its own poller and held bell: `EMFILE`).
    ///
    /// ```
    /// use evfd::{halves::ConsumerHalf, Mode};
    /// let (rd, wr) = rustix::pipe::pipe()?;
    /// let e = ConsumerHalf::from_owned_fd(wr, Mode::Counter).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// let kick = ConsumerHalf::from_owned_fd(rd, Mode::Counter)?;
    /// assert!(kick.is_pipe());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_owned_fd(fd: OwnedFd, mode: Mode) -> io::Result<ConsumerHalf> {
        let (fd, kind) = adopt(fd, mode, true)?;
        ConsumerHalf::new(fd, kind, mode)
    }

    /// The mode.
    ///
    /// ```
    /// let (c, _n) = evfd::halves::pipe(evfd::Mode::Semaphore)?;
    /// assert_eq!(c.mode(), evfd::Mode::Semaphore);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn mode(&self) -> Mode {
        self.core.mode
    }

    /// Whether the fd is a pipe (`false`: an eventfd).
    ///
    /// ```
    /// let (c, _n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// assert!(c.is_pipe());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_pipe(&self) -> bool {
        self.core.kind == Kind::Pipe
    }

    /// Where it is registered as an `Epoll` source.
    #[cfg(evfd_kernel_side)]
    pub(crate) fn registrations(&self) -> &Registrations {
        &self.regs
    }

    /// The epoll its `read_async` futures share (`crate::kernel_async`).
    #[cfg(evfd_kernel_side)]
    pub(crate) fn reader_epoll(&self) -> &LazyEpoll {
        &self.reader
    }

    /// Whether an epoll's delivery goes through the consumer (`KernelDeliver`): always
    /// for a pipe, AutoReset for an eventfd (as a `KernelNotifier`).
    #[cfg(evfd_kernel_side)]
    pub(crate) fn delivers(&self) -> bool {
        self.core.kind == Kind::Pipe || self.core.mode == Mode::AutoReset
    }

    /// Take the count without waiting: Counter and AutoReset take it all (up to
    /// [`LIMIT`] per read), Semaphore takes 1. Never waits, whatever the
    /// shared `O_NONBLOCK` flag says.
    ///
    /// # Errors
    ///
    /// `WouldBlock` if the count is 0; `BrokenPipe` if it is 0 and every write end of the
    /// pipe is closed (an eventfd has no such state: it would wait for ever); the kernel's
    /// errno.
    ///
    /// ```
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// assert_eq!(c.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// n.write(3)?;
    /// n.write(4)?;
    /// assert_eq!(c.try_read()?, 7);
    /// drop(n);
    /// assert_eq!(c.try_read().unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_read(&self) -> io::Result<u64> {
        self.core.try_read()
    }

    /// As [`try_read`](Self::try_read), waiting in `poll(2)` while the count is 0.
    ///
    /// # Errors
    ///
    /// `BrokenPipe` once every write end is closed and nothing is left; the kernel's errno.
    ///
    /// ```
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// let t = std::thread::spawn(move || n.write(9));
    /// assert_eq!(c.read()?, 9);
    /// t.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read(&self) -> io::Result<u64> {
        self.read_until(None)
    }

    /// As [`read`](Self::read), giving up after `timeout`.
    ///
    /// # Errors
    ///
    /// `TimedOut` if the count stayed 0 for `timeout`; as [`read`](Self::read).
    ///
    /// ```
    /// use std::time::Duration;
    /// let (c, _n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// let e = c.read_timeout(Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_timeout(&self, timeout: Duration) -> io::Result<u64> {
        self.read_until(crate::sys::deadline(timeout))
    }

    fn read_until(&self, deadline: Option<Instant>) -> io::Result<u64> {
        sys::read_until(self.core.fd.as_fd(), deadline, || self.try_read())
    }

    /// Readiness now, never consuming: `IN` if the consumer holds units or the fd is
    /// readable, `HUP` once every write end of a pipe is closed (an eventfd never shows it),
    /// `ERR` as the kernel reports it. Only the bits of `interest`, plus `ERR`/`HUP`.
    ///
    /// ```
    /// use evfd::Events;
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// assert_eq!(c.poll(Events::IN), Events::empty());
    /// n.notify()?;
    /// assert_eq!(c.poll(Events::IN), Events::IN);
    /// drop(n);
    /// assert_eq!(c.poll(Events::IN), Events::IN | Events::HUP);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        self.core.poll(interest)
    }

    /// Deliver `IN`, as an epoll harvest does for an AutoReset source: in
    /// [`Mode::AutoReset`] the pipe is drained to empty (every word, whatever its value; one
    /// `read(2)` for an eventfd) and `IN` is returned iff something was taken. Counter and
    /// Semaphore: a readiness check that takes nothing.
    ///
    /// An evfd [`Epoll`](crate::Epoll) watching the consumer calls it at each delivery
    /// (Linux, macOS, FreeBSD). Call it yourself after another poller (kqueue, io_uring's
    /// `POLL_ADD`, an
    /// epoll holding `as_fd()`) reports the fd readable: the fd is then not readable until
    /// the next notify, so a level-triggered poller does not spin.
    ///
    /// # Errors
    ///
    /// The kernel's errno. End of file is `HUP` in the result, not an error.
    ///
    /// ```
    /// use evfd::{Events, Mode};
    /// let (kick, n) = evfd::halves::pipe(Mode::AutoReset)?;
    /// for _ in 0..100 {
    ///     n.notify()?;
    /// }
    /// assert!(kick.consume()?.contains(Events::IN));
    /// assert_eq!(kick.poll(Events::IN), Events::empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn consume(&self) -> io::Result<Events> {
        if self.core.mode != Mode::AutoReset {
            return Ok(self.poll(Events::IN));
        }
        self.core.consume()
    }
}

impl NotifierHalf {
    fn new(fd: OwnedFd, kind: Kind) -> NotifierHalf {
        let fd = Arc::new(Fd::shared(fd));
        NotifierHalf {
            #[cfg(evfd_kernel_side)]
            regs: Registrations::new(
                Arc::clone(&fd),
                std::sync::Weak::<Core>::new() as std::sync::Weak<dyn KernelDeliver>,
            ),
            fd,
            kind,
        }
    }

    /// Adopt a call fd received from a peer: the write end of a pipe (or FIFO, or one opened
    /// `O_RDWR`), or, on Linux, an eventfd. The open file description is made `O_NONBLOCK`;
    /// no call depends on it.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for the read end of a pipe, or a fd that is neither a pipe nor an
    /// eventfd; the kernel's errno.
    ///
    /// ```
    /// use evfd::halves::NotifierHalf;
    /// let (rd, wr) = rustix::pipe::pipe()?;
    /// assert!(NotifierHalf::from_owned_fd(rd.try_clone()?).is_err()); // the wrong end
    /// let call = NotifierHalf::from_owned_fd(wr)?;
    /// call.notify()?; // `rd` is still open: a reader exists
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_owned_fd(fd: OwnedFd) -> io::Result<NotifierHalf> {
        let (fd, kind) = adopt(fd, Mode::Counter, false)?;
        Ok(NotifierHalf::new(fd, kind))
    }

    /// Whether the fd is a pipe (`false`: an eventfd).
    ///
    /// ```
    /// let (_c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// assert!(n.is_pipe());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_pipe(&self) -> bool {
        self.kind == Kind::Pipe
    }

    /// Where it is registered as an `Epoll` source.
    #[cfg(evfd_kernel_side)]
    pub(crate) fn registrations(&self) -> &Registrations {
        &self.regs
    }

    /// Add `n` without waiting: one 8-byte `write(2)` (atomic on a pipe: `PIPE_BUF` ≥ 512),
    /// never waiting whatever the shared `O_NONBLOCK` flag says. `write(0)` writes nothing
    /// to a pipe (a zero word would make the fd readable with nothing to read).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `WouldBlock` if the pipe is full (or an eventfd's
    /// count would pass [`LIMIT`]); `BrokenPipe` (`EPIPE`) if every read end
    /// of the pipe is closed — the process also gets `SIGPIPE`, which Rust programs ignore
    /// by default. Nothing changes on error.
    ///
    /// ```
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// assert_eq!(n.try_write(u64::MAX).unwrap_err().kind(), std::io::ErrorKind::InvalidInput);
    /// n.try_write(2)?;
    /// drop(c);
    /// assert_eq!(n.try_write(1).unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_write(&self, n: u64) -> io::Result<()> {
        if n == u64::MAX {
            return Err(crate::mode::invalid_write());
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.kind == Kind::Eventfd {
            return sys::eventfd::write_now(self.fd.as_fd(), n);
        }
        if n == 0 {
            return Ok(());
        }
        match sys::pipe::write_now(self.fd.as_fd(), &n.to_ne_bytes())? {
            8 => Ok(()),
            k => Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!("short write of {k} bytes of an 8-byte word"),
            )),
        }
    }

    /// As [`try_write`](Self::try_write), waiting while the pipe is full (an eventfd: while
    /// the count would pass [`LIMIT`]): in the kernel if the description is blocking (an
    /// eventfd's `write(2)` waits for room for `n`), else in `poll(2)`, with a backoff when
    /// room for one byte is not room for `n`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `BrokenPipe` if every read end is closed.
    ///
    /// ```
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// n.write(1 << 40)?;
    /// assert_eq!(c.read()?, 1 << 40);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write(&self, n: u64) -> io::Result<()> {
        // An eventfd: one plain `write(2)` (`write_waiting`). A pipe's `try_write` is one
        // `write(2)` already where the kernel takes `RWF_NOWAIT` for pipes.
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.kind == Kind::Eventfd && n != u64::MAX {
            return sys::eventfd::write_waiting(self.fd.as_fd(), n);
        }
        sys::write_until(self.fd.as_fd(), None, || self.try_write(n))
    }

    /// As [`write`](Self::write), giving up after `timeout` if the word still does not fit.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `TimedOut` (`ETIMEDOUT`) if it did not fit
    /// within `timeout` (nothing written); `BrokenPipe` if every read end is closed.
    ///
    /// ```
    /// use std::time::Duration;
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// while n.try_write(1).is_ok() {} // fill the pipe
    /// let e = n.write_timeout(1, Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// assert!(c.read()? > 0);
    /// n.write_timeout(1, Duration::from_millis(5))?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write_timeout(&self, n: u64, timeout: Duration) -> io::Result<()> {
        sys::write_until(self.fd.as_fd(), crate::sys::deadline(timeout), || {
            self.try_write(n)
        })
    }

    /// `write(1)`: what a kick or call sends.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// n.notify()?;
    /// assert_eq!(c.read()?, 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn notify(&self) -> io::Result<()> {
        self.write(1)
    }

    /// Readiness now: `OUT` while a word fits, `ERR` (pipes) once every read end is closed.
    ///
    /// ```
    /// use evfd::Events;
    /// let (_c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// assert_eq!(n.poll(Events::OUT), Events::OUT);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        let always = Events::ERR | Events::HUP;
        match sys::poll_now(self.fd.as_fd(), Events::OUT) {
            Ok(p) => p & (interest | always),
            Err(_) => Events::ERR,
        }
    }
}

/// # Kick and call halves
///
/// Two `dup(2)`s of this eventfd as the halves a pipe would give
/// ([`halves::pipe`](crate::halves::pipe)): device code written against
/// [`ConsumerHalf`] / [`NotifierHalf`] runs unchanged over an eventfd here and over a pipe on
/// macOS and the BSDs. The consumer has this notifier's mode (the kernel's
/// `EFD_SEMAPHORE` for Semaphore).
#[cfg(any(target_os = "linux", target_os = "android"))]
impl KernelNotifier {
    /// The consumer and notifier halves over this eventfd (consumer first); all three are
    /// one counter.
    ///
    /// # Errors
    ///
    /// The kernel's errno (`EMFILE`).
    ///
    /// ```
    /// use evfd::{Events, KernelNotifier, Mode};
    /// let k = KernelNotifier::new(Mode::AutoReset)?;
    /// let (kick, notifier) = k.halves()?;
    /// assert!(!kick.is_pipe());
    /// notifier.notify()?;
    /// notifier.notify()?;
    /// assert!(kick.consume()?.contains(Events::IN));
    /// assert_eq!(k.count()?, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn halves(&self) -> io::Result<(ConsumerHalf, NotifierHalf)> {
        let c = OwnedFd::from(self.try_clone()?);
        let n = OwnedFd::from(self.try_clone()?);
        Ok((
            ConsumerHalf::new(c, Kind::Eventfd, self.mode())?,
            NotifierHalf::new(n, Kind::Eventfd),
        ))
    }
}

impl AsFd for ConsumerHalf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.core.fd.as_fd()
    }
}

impl AsRawFd for ConsumerHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.core.fd.as_fd().as_raw_fd()
    }
}

impl AsFd for NotifierHalf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for NotifierHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_fd().as_raw_fd()
    }
}

/// Give the fd back, leaving every [`Epoll`](crate::Epoll) first. Units the consumer held
/// (see the module docs) are lost with it.
///
/// ```
/// let (c, _n) = evfd::halves::pipe(evfd::Mode::Counter)?;
/// let fd: std::os::fd::OwnedFd = c.into();
/// assert!(evfd::halves::ConsumerHalf::from_owned_fd(fd, evfd::Mode::Counter).is_ok());
/// # Ok::<(), std::io::Error>(())
/// ```
impl From<ConsumerHalf> for OwnedFd {
    fn from(c: ConsumerHalf) -> OwnedFd {
        #[cfg(evfd_kernel_side)]
        let ConsumerHalf { reader, core, regs } = c;
        // Its read futures' epoll lets go of the fd before it is given away.
        #[cfg(evfd_kernel_side)]
        drop(reader);
        #[cfg(not(evfd_kernel_side))]
        let ConsumerHalf { core } = c;
        // The epolls hold the core weakly: it is ours alone.
        let fd = Arc::try_unwrap(core).map_or_else(|c| Arc::clone(&c.fd), |c| c.fd);
        #[cfg(evfd_kernel_side)]
        return regs.release(fd);
        #[cfg(not(evfd_kernel_side))]
        sys::unshare_fd(fd)
    }
}

/// Give the fd back, leaving every [`Epoll`](crate::Epoll) first.
///
/// ```
/// let (_c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
/// let fd: std::os::fd::OwnedFd = n.into();
/// assert!(evfd::halves::NotifierHalf::from_owned_fd(fd).is_ok());
/// # Ok::<(), std::io::Error>(())
/// ```
impl From<NotifierHalf> for OwnedFd {
    fn from(n: NotifierHalf) -> OwnedFd {
        #[cfg(evfd_kernel_side)]
        return n.regs.release(n.fd);
        #[cfg(not(evfd_kernel_side))]
        sys::unshare_fd(n.fd)
    }
}

impl fmt::Debug for ConsumerHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerHalf")
            .field("fd", &self.core.fd.as_fd().as_raw_fd())
            .field("kind", &self.core.kind)
            .field("mode", &self.core.mode)
            .field("held", &self.core.held().units)
            .finish()
    }
}

impl fmt::Debug for NotifierHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotifierHalf")
            .field("fd", &self.fd.as_fd().as_raw_fd())
            .field("kind", &self.kind)
            .finish()
    }
}
