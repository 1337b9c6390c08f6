//! Kick and call halves: [`ConsumerHalf`] over the read end of a pipe (or an eventfd), and
//! [`NotifierHalf`] over the write end of a pipe (or an eventfd), with eventfd semantics as
//! far as a pipe carries them. docs/pipes.md has the table against eventfd.
//!
//! On macOS and the BSDs, QEMU and rust-vmm (`vmm_sys_util::event`) use a pipe where Linux
//! uses an eventfd: a vhost-user backend gets the read end of a kick pipe and the write end
//! of a call pipe; a notify writes one 8-byte word, a consume reads 8 bytes. These types
//! speak that protocol, and on Linux the same types wrap an eventfd
//! ([`KernelNotifier::halves`](crate::KernelNotifier::halves)), so device code is written
//! once for both.
//!
//! - **Counter**: a read sums the 8-byte words in the pipe (each a native-endian `u64`, as
//!   written) and returns the sum.
//! - **Semaphore**: a read takes one unit: a word of value `n` gives `n` reads of 1 (the
//!   `n - 1` left are held by the consumer, see below).
//! - **AutoReset**: [`ConsumerHalf::consume`] (the delivery) drains the pipe; reads as
//!   Counter.
//!
//! What the consumer took from the pipe but has not returned yet (a Semaphore word's
//! remaining units, words past [`LIMIT`](crate::LIMIT) in a Counter read, the bytes of a
//! word a foreign writer split) is held in the consumer object, not in the pipe: the fd is
//! then not readable although the consumer is (its [`poll`](ConsumerHalf::poll) says so).
//! Drain with `try_read` until `WouldBlock` before waiting on the fd again.
//!
//! LOCKING: `ConsumerHalf::held` is a leaf mutex, held across the consumer's own non-blocking
//! `read(2)`s (so that two threads sharing one consumer do not split a word), never across a
//! wait or foreign code.

use std::fmt;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};
use rustix::fs::{FileType, OFlags};

use crate::events::Events;
use crate::mode::{Mode, LIMIT};

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
}

/// The consumer half of a kick (or err, or exit) event: the read end of a pipe, or an eventfd.
///
/// # Examples
///
/// ```
/// use evfd::{Events, Mode};
/// let (kick, notifier) = evfd::pipe_halves(Mode::Semaphore)?;
/// notifier.write(2)?;
/// assert_eq!(kick.read()?, 1);
/// assert_eq!(kick.poll(Events::IN), Events::IN); // one unit left, held by the consumer
/// assert_eq!(kick.read()?, 1);
/// assert_eq!(kick.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct ConsumerHalf {
    fd: OwnedFd,
    kind: Kind,
    mode: Mode,
    held: Mutex<Held>,
}

/// The notifier half of a call event: the write end of a pipe, or an eventfd.
///
/// # Examples
///
/// ```
/// let (consumer, call) = evfd::pipe_halves(evfd::Mode::Counter)?;
/// call.notify()?;
/// call.write(4)?;
/// assert_eq!(consumer.read()?, 5);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct NotifierHalf {
    fd: OwnedFd,
    kind: Kind,
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
/// let (kick, notifier) = evfd::pipe_halves(Mode::AutoReset)?;
/// notifier.notify()?;
/// notifier.notify()?;
/// assert!(kick.consume()?.contains(Events::IN)); // one delivery took both
/// assert!(!kick.consume()?.contains(Events::IN));
/// # Ok::<(), std::io::Error>(())
/// ```
pub fn pipe_halves(mode: Mode) -> io::Result<(ConsumerHalf, NotifierHalf)> {
    #[cfg(not(target_vendor = "apple"))]
    let (rd, wr) = rustix::pipe::pipe_with(
        rustix::pipe::PipeFlags::CLOEXEC | rustix::pipe::PipeFlags::NONBLOCK,
    )?;
    #[cfg(target_vendor = "apple")]
    let (rd, wr) = {
        // No pipe2: the flags follow the call (a fork + exec in between inherits the fds).
        let (rd, wr) = rustix::pipe::pipe()?;
        for fd in [&rd, &wr] {
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
            set_nonblocking(fd.as_fd())?;
        }
        (rd, wr)
    };
    Ok((
        ConsumerHalf::new(rd, Kind::Pipe, mode),
        NotifierHalf {
            fd: wr,
            kind: Kind::Pipe,
        },
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
        let k = crate::notifier::kernel::KernelNotifier::from_owned_fd(fd, mode)?;
        Ok((OwnedFd::from(k), Kind::Eventfd))
    }
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    {
        let _ = mode;
        Err(invalid(format!("fd {} is not a pipe", fd.as_raw_fd())))
    }
}

/// `poll(2)` on one fd until `flags` (or an error bit) or the deadline.
fn poll_fd(
    fd: BorrowedFd<'_>,
    flags: PollFlags,
    deadline: Option<Instant>,
) -> io::Result<PollFlags> {
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let ts = left.and_then(|l| Timespec::try_from(l).ok());
        let mut fds = [PollFd::from_borrowed_fd(fd, flags)];
        match rustix::event::poll(&mut fds, ts.as_ref()) {
            Ok(0) => return Ok(PollFlags::empty()),
            Ok(_) => return Ok(fds[0].revents()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

fn to_events(p: PollFlags) -> Events {
    let mut e = Events::empty();
    for (pf, ev) in [
        (PollFlags::IN, Events::IN),
        (PollFlags::OUT, Events::OUT),
        (PollFlags::ERR, Events::ERR),
        (PollFlags::HUP, Events::HUP),
    ] {
        if p.contains(pf) {
            e |= ev;
        }
    }
    e
}

/// `EPIPE` (kind `BrokenPipe`): every write end of the pipe is closed and nothing is left.
fn broken_pipe() -> io::Error {
    io::Error::from_raw_os_error(rustix::io::Errno::PIPE.raw_os_error())
}

impl ConsumerHalf {
    fn new(fd: OwnedFd, kind: Kind, mode: Mode) -> ConsumerHalf {
        ConsumerHalf {
            fd,
            kind,
            mode,
            held: Mutex::new(Held::default()),
        }
    }

    /// Adopt a kick fd received from a peer: the read end of a pipe (or FIFO, or one opened
    /// `O_RDWR`), or, on Linux, an eventfd (checked against `mode` as
    /// [`KernelNotifier::from_owned_fd`](crate::KernelNotifier::from_owned_fd) checks it).
    /// The open file description is made `O_NONBLOCK` (shared with every dup of it).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for the write end of a pipe, or a fd that is neither a pipe nor an
    /// eventfd; the kernel's errno from `fstat(2)`/`fcntl(2)`.
    ///
    /// ```
    /// use evfd::{ConsumerHalf, Mode};
    /// let (rd, wr) = rustix::pipe::pipe()?;
    /// let e = ConsumerHalf::from_owned_fd(wr, Mode::Counter).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// let kick = ConsumerHalf::from_owned_fd(rd, Mode::Counter)?;
    /// assert!(kick.is_pipe());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_owned_fd(fd: OwnedFd, mode: Mode) -> io::Result<ConsumerHalf> {
        let (fd, kind) = adopt(fd, mode, true)?;
        Ok(ConsumerHalf::new(fd, kind, mode))
    }

    /// The mode.
    ///
    /// ```
    /// let (c, _n) = evfd::pipe_halves(evfd::Mode::Semaphore)?;
    /// assert_eq!(c.mode(), evfd::Mode::Semaphore);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// Whether the fd is a pipe (`false`: an eventfd).
    ///
    /// ```
    /// let (c, _n) = evfd::pipe_halves(evfd::Mode::Counter)?;
    /// assert!(c.is_pipe());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_pipe(&self) -> bool {
        self.kind == Kind::Pipe
    }

    fn held(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// One non-blocking `read(2)` into `buf`: `Ok(0)` at end of file, `WouldBlock` if empty.
    fn read_raw(&self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            match rustix::io::read(&self.fd, &mut *buf) {
                Ok(n) => return Ok(n),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
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

    /// Take the count without waiting: Counter and AutoReset take it all (up to
    /// [`LIMIT`](crate::LIMIT) per read), Semaphore takes 1.
    ///
    /// # Errors
    ///
    /// `WouldBlock` if the count is 0; `BrokenPipe` if it is 0 and every write end of the
    /// pipe is closed (an eventfd has no such state: it would wait for ever); the kernel's
    /// errno.
    ///
    /// ```
    /// let (c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
    /// assert_eq!(c.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// n.write(3)?;
    /// n.write(4)?;
    /// assert_eq!(c.try_read()?, 7);
    /// drop(n);
    /// assert_eq!(c.try_read().unwrap_err().kind(), std::io::ErrorKind::BrokenPipe);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn try_read(&self) -> io::Result<u64> {
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.kind == Kind::Eventfd {
            let mut b = [0u8; 8];
            self.read_raw(&mut b)?;
            return Ok(u64::from_ne_bytes(b));
        }
        let mut held = self.held();
        let eof = if self.mode == Mode::Semaphore {
            loop {
                if held.units > 0 {
                    held.units -= 1;
                    return Ok(1);
                }
                // One word at a time: a zero word carries nothing, so read on.
                let mut got = false;
                let eof = self.read_words(&mut held, true, |h, w| {
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
            let eof = self.read_words(&mut held, false, |h, w| {
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

    /// As [`try_read`](Self::try_read), waiting in `poll(2)` while the count is 0.
    ///
    /// # Errors
    ///
    /// `BrokenPipe` once every write end is closed and nothing is left; the kernel's errno.
    ///
    /// ```
    /// let (c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
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
    /// let (c, _n) = evfd::pipe_halves(evfd::Mode::Counter)?;
    /// let e = c.read_timeout(Duration::from_millis(5)).unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::TimedOut);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn read_timeout(&self, timeout: Duration) -> io::Result<u64> {
        self.read_until(Instant::now().checked_add(timeout))
    }

    fn read_until(&self, deadline: Option<Instant>) -> io::Result<u64> {
        loop {
            match self.try_read() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
            if poll_fd(self.fd.as_fd(), PollFlags::IN, deadline)?.is_empty() {
                return match self.try_read() {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        Err(crate::error::timed_out())
                    }
                    r => r,
                };
            }
        }
    }

    /// Readiness now, never consuming: `IN` if the consumer holds units or the fd is
    /// readable, `HUP` once every write end of a pipe is closed (an eventfd never shows it),
    /// `ERR` as the kernel reports it. Only the bits of `interest`, plus `ERR`/`HUP`.
    ///
    /// ```
    /// use evfd::Events;
    /// let (c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
    /// assert_eq!(c.poll(Events::IN), Events::empty());
    /// n.notify()?;
    /// assert_eq!(c.poll(Events::IN), Events::IN);
    /// drop(n);
    /// assert_eq!(c.poll(Events::IN), Events::IN | Events::HUP);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        let always = Events::ERR | Events::HUP;
        let mut ev = match poll_fd(self.fd.as_fd(), PollFlags::IN, Some(Instant::now())) {
            Ok(p) => to_events(p),
            Err(_) => Events::ERR,
        };
        if self.kind == Kind::Pipe && self.held().units > 0 {
            ev |= Events::IN;
        }
        ev & (interest | always)
    }

    /// Deliver `IN`, as an epoll harvest does for an AutoReset source: in
    /// [`Mode::AutoReset`] the pipe is drained to empty (every word, whatever its value; one
    /// `read(2)` for an eventfd) and `IN` is returned iff something was taken. Counter and
    /// Semaphore: a readiness check that takes nothing.
    ///
    /// Call it after your poller (an evfd [`Epoll`](crate::Epoll) holding the fd as a
    /// `BorrowedFd`, kqueue, io_uring's `POLL_ADD`) reports the fd readable: the fd is then
    /// not readable until the next notify, so a level-triggered poller does not spin.
    ///
    /// # Errors
    ///
    /// The kernel's errno. End of file is `HUP` in the result, not an error.
    ///
    /// ```
    /// use evfd::{Events, Mode};
    /// let (kick, n) = evfd::pipe_halves(Mode::AutoReset)?;
    /// for _ in 0..100 {
    ///     n.notify()?;
    /// }
    /// assert!(kick.consume()?.contains(Events::IN));
    /// assert_eq!(kick.poll(Events::IN), Events::empty());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn consume(&self) -> io::Result<Events> {
        if self.mode != Mode::AutoReset {
            return Ok(self.poll(Events::IN));
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if self.kind == Kind::Eventfd {
            return match self.try_read() {
                Ok(_) => Ok(Events::IN),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(Events::empty()),
                Err(e) => Err(e),
            };
        }
        let mut held = self.held();
        let mut any = std::mem::take(&mut held.units) > 0;
        let eof = self.read_words(&mut held, false, |_, w| any |= w > 0)?;
        let mut ev = if any { Events::IN } else { Events::empty() };
        if eof {
            ev |= Events::HUP;
        }
        Ok(ev)
    }
}

impl NotifierHalf {
    /// Adopt a call fd received from a peer: the write end of a pipe (or FIFO, or one opened
    /// `O_RDWR`), or, on Linux, an eventfd. The open file description is made `O_NONBLOCK`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for the read end of a pipe, or a fd that is neither a pipe nor an
    /// eventfd; the kernel's errno.
    ///
    /// ```
    /// use evfd::NotifierHalf;
    /// let (rd, wr) = rustix::pipe::pipe()?;
    /// assert!(NotifierHalf::from_owned_fd(rd.try_clone()?).is_err()); // the wrong end
    /// let call = NotifierHalf::from_owned_fd(wr)?;
    /// call.notify()?; // `rd` is still open: a reader exists
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_owned_fd(fd: OwnedFd) -> io::Result<NotifierHalf> {
        let (fd, kind) = adopt(fd, Mode::Counter, false)?;
        Ok(NotifierHalf { fd, kind })
    }

    /// Whether the fd is a pipe (`false`: an eventfd).
    ///
    /// ```
    /// let (_c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
    /// assert!(n.is_pipe());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn is_pipe(&self) -> bool {
        self.kind == Kind::Pipe
    }

    /// Add `n` without waiting: one 8-byte `write(2)` (atomic on a pipe: `PIPE_BUF` ≥ 512).
    /// `write(0)` writes nothing to a pipe (a zero word would make the fd readable with
    /// nothing to read).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `WouldBlock` if the pipe is full (or an eventfd's
    /// count would pass [`LIMIT`](crate::LIMIT)); `BrokenPipe` (`EPIPE`) if every read end
    /// of the pipe is closed — the process also gets `SIGPIPE`, which Rust programs ignore
    /// by default. Nothing changes on error.
    ///
    /// ```
    /// let (c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
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
        if n == 0 && self.kind == Kind::Pipe {
            return Ok(());
        }
        loop {
            match rustix::io::write(&self.fd, &n.to_ne_bytes()) {
                Ok(8) => return Ok(()),
                Ok(k) => {
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("short write of {k} bytes of an 8-byte word"),
                    ))
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
    }

    /// As [`try_write`](Self::try_write), waiting (in `poll(2)`, with a backoff when room
    /// for one byte is not room for `n`) while the pipe is full.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `BrokenPipe` if every read end is closed.
    ///
    /// ```
    /// let (c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
    /// n.write(1 << 40)?;
    /// assert_eq!(c.read()?, 1 << 40);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write(&self, n: u64) -> io::Result<()> {
        let mut backoff = Duration::from_micros(50);
        loop {
            match self.try_write(n) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
            poll_fd(self.fd.as_fd(), PollFlags::OUT, None)?;
            match self.try_write(n) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                r => return r,
            }
            std::thread::sleep(backoff);
            backoff = (backoff * 2).min(Duration::from_millis(10));
        }
    }

    /// `write(1)`: what a kick or call sends.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// let (c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
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
    /// let (_c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
    /// assert_eq!(n.poll(Events::OUT), Events::OUT);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn poll(&self, interest: Events) -> Events {
        let always = Events::ERR | Events::HUP;
        match poll_fd(self.fd.as_fd(), PollFlags::OUT, Some(Instant::now())) {
            Ok(p) => to_events(p) & (interest | always),
            Err(_) => Events::ERR,
        }
    }
}

/// # Kick and call halves
///
/// Two `dup(2)`s of this eventfd as the halves a pipe would give
/// ([`pipe_halves`](crate::pipe_halves)): device code written against
/// [`ConsumerHalf`] / [`NotifierHalf`] runs unchanged over an eventfd here and over a pipe on
/// macOS and the BSDs. The consumer has this notifier's mode (the kernel's
/// `EFD_SEMAPHORE` for Semaphore).
#[cfg(any(target_os = "linux", target_os = "android"))]
impl crate::notifier::kernel::KernelNotifier {
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
            ConsumerHalf::new(c, Kind::Eventfd, self.mode()),
            NotifierHalf {
                fd: n,
                kind: Kind::Eventfd,
            },
        ))
    }
}

impl AsFd for ConsumerHalf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for ConsumerHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for NotifierHalf {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl AsRawFd for NotifierHalf {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// Give the fd back. Units the consumer held (see the module docs) are lost with it.
///
/// ```
/// let (c, _n) = evfd::pipe_halves(evfd::Mode::Counter)?;
/// let fd: std::os::fd::OwnedFd = c.into();
/// assert!(evfd::ConsumerHalf::from_owned_fd(fd, evfd::Mode::Counter).is_ok());
/// # Ok::<(), std::io::Error>(())
/// ```
impl From<ConsumerHalf> for OwnedFd {
    fn from(c: ConsumerHalf) -> OwnedFd {
        c.fd
    }
}

/// Give the fd back.
///
/// ```
/// let (_c, n) = evfd::pipe_halves(evfd::Mode::Counter)?;
/// let fd: std::os::fd::OwnedFd = n.into();
/// assert!(evfd::NotifierHalf::from_owned_fd(fd).is_ok());
/// # Ok::<(), std::io::Error>(())
/// ```
impl From<NotifierHalf> for OwnedFd {
    fn from(n: NotifierHalf) -> OwnedFd {
        n.fd
    }
}

impl fmt::Debug for ConsumerHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ConsumerHalf")
            .field("fd", &self.fd.as_raw_fd())
            .field("kind", &self.kind)
            .field("mode", &self.mode)
            .field("held", &self.held().units)
            .finish()
    }
}

impl fmt::Debug for NotifierHalf {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("NotifierHalf")
            .field("fd", &self.fd.as_raw_fd())
            .field("kind", &self.kind)
            .finish()
    }
}
