//! eventfd(2): the default doorbell backend, and the thin wrappers the kernel-backed
//! notifier is built on.
//!
//! # References
//!
//! - [eventfd(2)](https://man7.org/linux/man-pages/man2/eventfd.2.html)
//! - [proc_pid_fdinfo(5)](https://man7.org/linux/man-pages/man5/proc_pid_fdinfo.5.html)
//!   (`eventfd-count`, `eventfd-semaphore`)

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};

use rustix::event::EventfdFlags;
use rustix::io::Errno;

pub(crate) use super::is_cloexec;
use super::{retry, Counters, Doorbell, DoorbellStats, Now, NowProbe};

/// A kernel eventfd in counter mode as a doorbell: ring = write 1, drain = read (which
/// resets the counter to 0). Its open file description is private until the view lends
/// its fd (`sys::fd`): until then a ring or a drain is one plain syscall; after, one that
/// never waits whatever a holder of the fd did to `O_NONBLOCK` (a ring's `write(2)` then
/// takes a zero-timeout `poll(2)` first, a drain is `preadv2(RWF_NOWAIT)`).
#[derive(Debug)]
#[cfg_attr(any(evfd_force_pipe, evfd_loom), allow(dead_code))]
pub(crate) struct EventfdDoorbell {
    fd: super::fd::Fd,
    counters: Counters,
}

impl Doorbell for EventfdDoorbell {
    fn create(cloexec: bool) -> io::Result<Self> {
        let fd = create(0, false, cloexec)?;
        Ok(EventfdDoorbell {
            // One that survives `exec` may reach another program: shared from the start.
            fd: if cloexec {
                super::fd::Fd::private(fd)
            } else {
                super::fd::Fd::shared(fd)
            },
            counters: Counters::default(),
        })
    }

    // Both never wait, whatever the fd's shared `O_NONBLOCK` says: the fd is handed to
    // pollers, and whoever holds it can clear the flag (`write_fd`, `read_fd`: one plain
    // syscall while no borrow was lent).
    fn ring(&self) -> io::Result<()> {
        self.counters.note_ring();
        match write_fd(&self.fd, 1) {
            // EAGAIN: the counter is saturated, so it is readable: already rung.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r,
        }
    }

    fn ring_edge(&self) -> io::Result<()> {
        self.counters.note_ring();
        match write_fd(&self.fd, 1) {
            // EAGAIN: the counter is at its limit (after 2^64 - 2 such rings, or a peer's
            // write).
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                self.drain()?;
                self.counters.note_ring();
                write_fd(&self.fd, 1)
            }
            r => r,
        }
    }

    fn drain(&self) -> io::Result<()> {
        self.counters.note_drain();
        match read_fd(&self.fd) {
            // EAGAIN: the counter is 0: already drained.
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
            r => r.map(drop),
        }
    }

    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    fn lend(&self) -> BorrowedFd<'_> {
        self.fd.lend()
    }

    fn register_unlent<R>(&self, register: impl FnOnce() -> R) -> R {
        super::fd::register_unlent(&self.fd, register)
    }

    fn stats(&self) -> DoorbellStats {
        self.counters.get()
    }
}

/// `eventfd2(initval, NONBLOCK [| SEMAPHORE] [| CLOEXEC])`.
pub(crate) fn create(initval: u32, semaphore: bool, cloexec: bool) -> io::Result<OwnedFd> {
    let mut flags = EventfdFlags::NONBLOCK;
    if semaphore {
        flags |= EventfdFlags::SEMAPHORE;
    }
    if cloexec {
        flags |= EventfdFlags::CLOEXEC;
    }
    Ok(rustix::event::eventfd(initval, flags)?)
}

/// `eventfd2(0, [CLOEXEC])`: a *blocking* description, for a sleep bell that a blocked
/// reader waits on in `read(2)` itself ([`sleep_read`]).
#[cfg_attr(evfd_loom, allow(dead_code))]
pub(crate) fn create_blocking(cloexec: bool) -> io::Result<OwnedFd> {
    let flags = if cloexec {
        EventfdFlags::CLOEXEC
    } else {
        EventfdFlags::empty()
    };
    Ok(rustix::event::eventfd(0, flags)?)
}

/// Sleep on a sleep bell (a `SharedNotifier`'s, `shared::protocol`, "The sleep bell") until
/// it holds a token, taking every token, or until `deadline`: `Ok(false)` if the deadline
/// passed. A signal, or a token another reader took first, is `Ok(true)` too: the caller
/// looks again. The description is every holder's, so no flag of it is relied on:
///
/// - without a deadline, one blocking `read(2)`, which waits and takes in one syscall; if a
///   peer made the description non-blocking (`EAGAIN`), `poll(2)` and then a read that
///   never waits ([`read_now`]);
/// - with one, `poll(2)` until the deadline, then that read.
#[cfg_attr(evfd_loom, allow(dead_code))]
#[inline(always)]
pub(crate) fn sleep_read(
    fd: BorrowedFd<'_>,
    deadline: Option<std::time::Instant>,
) -> io::Result<bool> {
    if deadline.is_none() {
        let mut buf = [0u8; 8];
        match rustix::io::read(fd, &mut buf) {
            Ok(_) | Err(Errno::INTR) => return Ok(true),
            Err(Errno::AGAIN) => {}
            Err(e) => return Err(e.into()),
        }
    }
    if super::poll_until(fd, crate::events::Events::IN, deadline)?.is_empty() {
        return Ok(false);
    }
    match read_now(fd) {
        Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
        _ => Ok(true),
    }
}

/// One 8-byte `read(2)`: the count (or 1 with `EFD_SEMAPHORE`). `EINTR` is retried;
/// `EAGAIN` (count 0 on a non-blocking fd) comes back as `WouldBlock` with its errno.
/// Waits if the description is blocking: only for fds no peer holds (evfd's private
/// eventfds); a shared one takes [`read_now`].
pub(crate) fn read(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    let n = retry(|| (), || rustix::io::read(fd, &mut buf))?;
    if n != 8 {
        return Err(short_read(fd, n));
    }
    Ok(u64::from_ne_bytes(buf))
}

/// One 8-byte `write(2)` of `n`. `EINTR` is retried; `EAGAIN` (no room on a non-blocking fd)
/// comes back as `WouldBlock`, `EINVAL` (`n == u64::MAX`) as `InvalidInput`, with their errno.
/// Waits if the description is blocking: only for fds no peer holds; a shared one takes
/// [`write_now`].
#[inline(always)]
pub(crate) fn write(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    let written = retry(|| (), || rustix::io::write(fd, &n.to_ne_bytes()))?;
    debug_assert_eq!(written, 8, "eventfd writes are all or nothing");
    Ok(())
}

/// One read of the count that never waits, on an eventfd the crate holds: a plain
/// `read(2)` while its description is private (`super::fd`: the crate made it `O_NONBLOCK`
/// and nobody else can reach it), else [`read_now`]. As [`read_now`] otherwise.
#[inline]
pub(crate) fn read_fd(fd: &super::fd::Fd) -> io::Result<u64> {
    // The count memory keeps (`super::mem_count`): no syscall.
    if let Some(r) = fd.mem_take() {
        return r;
    }
    if fd.kernel_ready().is_err() {
        // A handler on the thread flushing this fd: the count is on its way to the kernel.
        return Err(io::Error::from(Errno::AGAIN));
    }
    fd.guarded(|b, private| if private { read(b) } else { read_now(b) })
}

/// One write of `n` that never waits, on an eventfd the crate holds: a plain `write(2)`
/// while its description is private (one syscall), else [`write_now`] (on a shared one, a
/// `poll(2)` first: the kernel refuses `RWF_NOWAIT` for eventfd writes). As [`write_now`]
/// otherwise.
#[inline]
pub(crate) fn write_fd(fd: &super::fd::Fd, n: u64) -> io::Result<()> {
    if n == u64::MAX {
        // The kernel's answer, without asking it.
        return Err(io::Error::from(Errno::INVAL));
    }
    match fd.mem_add(n) {
        // No room in memory: the count goes to the kernel, whose reads make the `OUT`
        // edges a writer waiting for room needs (memory's reads make none).
        Some(Err(e)) if e.kind() == io::ErrorKind::WouldBlock => fd.flush()?,
        Some(r) => return r,
        None => {}
    }
    if let Err(v) = fd.kernel_ready() {
        // A handler on the thread flushing this fd: the flusher writes it after its own.
        return fd.add_pending(v, n);
    }
    fd.guarded(|b, private| {
        if private {
            write(b, n)
        } else {
            write_now(b, n)
        }
    })
}

/// The `RWF_NOWAIT` probes for eventfds, one per direction (the kernel's eventfd honours it
/// for reads since Linux 5.12 and refuses it for writes, which have no `write_iter`).
static READ_PROBE: NowProbe = NowProbe::new();
static WRITE_PROBE: NowProbe = NowProbe::new();

/// Whether reads and writes of eventfds use `RWF_NOWAIT` in this process (`(read, write)`:
/// `false` once the kernel refused it and the fallback runs). For tests and docs.
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn nowait_probes() -> (bool, bool) {
    (READ_PROBE.nowait(), WRITE_PROBE.nowait())
}

/// One 8-byte read of the count that never waits, whatever the shared open file
/// description's `O_NONBLOCK` says: the count (or 1 with `EFD_SEMAPHORE`), or `WouldBlock`
/// carrying `EAGAIN` at count 0. `EINTR` is retried.
///
/// `preadv2(RWF_NOWAIT)`, one syscall, where the kernel honours it (Linux 5.12+); else the
/// fallback of [`NowProbe`]. Async-signal-safe.
#[inline(always)]
pub(crate) fn read_now(fd: BorrowedFd<'_>) -> io::Result<u64> {
    read_now_with(fd, Now::Probed)
}

#[inline(always)]
pub(crate) fn read_now_with(fd: BorrowedFd<'_>, how: Now) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    let n = super::read_now_raw(fd, &mut buf, &READ_PROBE, how)?;
    if n != 8 {
        return Err(short_read(fd, n));
    }
    Ok(u64::from_ne_bytes(buf))
}

#[cold]
fn short_read(fd: BorrowedFd<'_>, n: usize) -> io::Error {
    io::Error::new(
        io::ErrorKind::UnexpectedEof,
        format!("short read of {n} bytes from eventfd {}", fd.as_raw_fd()),
    )
}

/// One 8-byte write of `n` that never waits, whatever the shared open file description's
/// `O_NONBLOCK` says: `WouldBlock` carrying `EAGAIN` when the count would pass the limit,
/// `InvalidInput` (`EINVAL`) for `n == u64::MAX`. `EINTR` is retried.
///
/// `pwritev2(RWF_NOWAIT)` where the kernel honours it for eventfds (no kernel so far: it
/// answers `EOPNOTSUPP` once, cached). The fallback, whatever the description's flag says
/// (a peer may flip it between any look at it and the write): the write is made only if
/// it fits now — `poll(2)`: count 0 (not `IN`) fits anything, `OUT` fits 1, an
/// overflowed count (`ERR`) fits nothing, and a larger `n` into a non-empty count is
/// checked against `eventfd-count` in `/proc/self/fdinfo` (read without allocating).
/// Residual window: a concurrent writer that fills the counter between that check and the
/// write leaves the write waiting until a reader makes room.
///
/// Async-signal-safe.
pub(crate) fn write_now(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    write_now_with(fd, n, Now::Probed)
}

pub(crate) fn write_now_with(fd: BorrowedFd<'_>, n: u64, how: Now) -> io::Result<()> {
    use rustix::event::PollFlags;
    let fits = |ev: PollFlags| -> rustix::io::Result<bool> {
        Ok(if n == u64::MAX {
            true // EINVAL at once, before the kernel looks at the count
        } else if ev.contains(PollFlags::ERR) {
            false // overflowed (in-kernel signalling): no write fits, not even 0
        } else if !ev.contains(PollFlags::IN) || n == 0 {
            true // count 0 takes anything up to the limit; 0 always fits below overflow
        } else if !ev.contains(PollFlags::OUT) {
            false // at the limit
        } else if n == 1 {
            true
        } else {
            match fdinfo_count(fd) {
                Some(c) => n <= crate::mode::LIMIT.saturating_sub(c),
                // No /proc: nothing tells the room; a small write into a count far from
                // the limit is the normal case.
                None => true,
            }
        })
    };
    let written = super::write_now_raw(fd, &n.to_ne_bytes(), &WRITE_PROBE, how, fits)?;
    debug_assert_eq!(written, 8, "eventfd writes are all or nothing");
    Ok(())
}

/// Add `n` (`< u64::MAX`) to the count, waiting for room as long as it takes (a call with
/// no deadline): one plain `write(2)`, whatever the shared description's `O_NONBLOCK` says.
/// Blocking (a peer cleared the flag, or nobody set it), the kernel waits for room for `n`
/// itself, which is this call's meaning; non-blocking, a write that does not fit returns
/// `EAGAIN` and the wait goes on in [`write_until`](super::write_until) (`poll(2)` for room,
/// then [`write_now`]). A deadline or a non-blocking call needs [`write_now`] from the
/// start: a blocking description would hold a plain write past it.
pub(crate) fn write_waiting(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    match write(fd, n) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
            super::write_until(fd, None, || write_now(fd, n))
        }
        r => r,
    }
}

/// Add one token to a sleep bell (a `SharedNotifier`'s, `shared::protocol`, "The sleep
/// bell") for a call with no deadline: one plain `write(2)`, whatever the shared
/// description's `O_NONBLOCK` says, where [`write_now`] makes two (the `poll(2)` first).
/// `EAGAIN` (a peer made the description non-blocking and saturated the bell) is `Ok`: a
/// saturated bell is readable, so its holder wakes anyway. Blocking, the write waits only
/// while a peer keeps the bell saturated, and the holder's read empties it; a call that
/// waits for a peer by its meaning may wait for that too (the caller decides).
#[cfg_attr(evfd_loom, allow(dead_code))]
#[inline(always)]
pub(crate) fn ring_waiting(fd: BorrowedFd<'_>) -> io::Result<()> {
    match write(fd, 1) {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
        r => r,
    }
}

/// `eventfd-count` from `/proc/self/fdinfo/<fd>`, read into a stack buffer (no allocation,
/// so async-signal-safe). `None` if it cannot be read or parsed.
fn fdinfo_count(fd: BorrowedFd<'_>) -> Option<u64> {
    use rustix::fs::{Mode as FsMode, OFlags};
    // "/proc/self/fdinfo/" + up to 10 digits + NUL.
    let mut path = [0u8; 32];
    let prefix = b"/proc/self/fdinfo/";
    path[..prefix.len()].copy_from_slice(prefix);
    let mut digits = [0u8; 10];
    let mut v = u32::try_from(fd.as_raw_fd()).ok()?;
    let mut nd = 0;
    loop {
        digits[nd] = b'0' + (v % 10) as u8;
        nd += 1;
        v /= 10;
        if v == 0 {
            break;
        }
    }
    for i in 0..nd {
        path[prefix.len() + i] = digits[nd - 1 - i];
    }
    let end = prefix.len() + nd;
    let cpath = std::ffi::CStr::from_bytes_with_nul(&path[..=end]).ok()?;
    let file = rustix::fs::open(cpath, OFlags::RDONLY | OFlags::CLOEXEC, FsMode::empty()).ok()?;
    let mut buf = [0u8; 512];
    let mut len = 0;
    while len < buf.len() {
        match rustix::io::read(&file, &mut buf[len..]) {
            Ok(0) => break,
            Ok(k) => len += k,
            Err(Errno::INTR) => continue,
            Err(_) => return None,
        }
    }
    let text = std::str::from_utf8(&buf[..len]).ok()?;
    Some(parse_fdinfo(text)?.count)
}

/// Set `O_NONBLOCK` on the open file description (shared with every dup of it, in any
/// process). Returns whether it was already set.
pub(crate) fn set_nonblocking(fd: BorrowedFd<'_>) -> io::Result<bool> {
    use rustix::fs::OFlags;
    let fl = rustix::fs::fcntl_getfl(fd)?;
    if fl.contains(OFlags::NONBLOCK) {
        return Ok(true);
    }
    rustix::fs::fcntl_setfl(fd, fl | OFlags::NONBLOCK)?;
    Ok(false)
}

/// Clear `O_NONBLOCK` on the open file description (shared with every dup of it).
pub(crate) fn set_blocking(fd: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::fs::OFlags;
    let fl = rustix::fs::fcntl_getfl(fd)?;
    if fl.contains(OFlags::NONBLOCK) {
        rustix::fs::fcntl_setfl(fd, fl - OFlags::NONBLOCK)?;
    }
    Ok(())
}

/// A new fd for the same open file description; close-on-exec iff `cloexec`.
pub(crate) fn dup(fd: BorrowedFd<'_>, cloexec: bool) -> io::Result<OwnedFd> {
    Ok(if cloexec {
        rustix::io::fcntl_dupfd_cloexec(fd, 0)?
    } else {
        rustix::io::dup(fd)?
    })
}

/// What `/proc/self/fdinfo/<fd>` says about an eventfd.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct FdInfo {
    /// `eventfd-count`.
    pub(crate) count: u64,
    /// `eventfd-semaphore` (Linux 6.4+; `None` on older kernels).
    pub(crate) semaphore: Option<bool>,
}

/// Read `/proc/self/fdinfo/<fd>`.
///
/// - `Ok(Some(info))`: it is an eventfd;
/// - `Ok(None)`: fdinfo could not be read (no `/proc`): unknown;
/// - `Err(EINVAL)` (kind `InvalidInput`): fdinfo was read and the fd is not an eventfd.
pub(crate) fn fdinfo(fd: BorrowedFd<'_>) -> io::Result<Option<FdInfo>> {
    let raw = fd.as_raw_fd();
    let Ok(text) = std::fs::read_to_string(format!("/proc/self/fdinfo/{raw}")) else {
        return Ok(None);
    };
    // Not an eventfd: EINVAL, the kernel's answer (eventfd_ctx_fdget) when KVM or vhost are
    // handed one.
    parse_fdinfo(&text)
        .map(Some)
        .ok_or_else(|| io::Error::from_raw_os_error(Errno::INVAL.raw_os_error()))
}

fn parse_fdinfo(text: &str) -> Option<FdInfo> {
    let mut count = None;
    let mut semaphore = None;
    for line in text.lines() {
        let Some((k, v)) = line.split_once(':') else {
            continue;
        };
        match k.trim() {
            "eventfd-count" => count = u64::from_str_radix(v.trim(), 16).ok(),
            "eventfd-semaphore" => semaphore = Some(v.trim() != "0"),
            _ => {}
        }
    }
    Some(FdInfo {
        count: count?,
        semaphore,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_fdinfo_lines() {
        let t = "pos:\t0\nflags:\t02\nmnt_id:\t17\nino:\t1038\neventfd-count:                5\neventfd-id: 1\neventfd-semaphore: 1\n";
        assert_eq!(
            parse_fdinfo(t),
            Some(FdInfo {
                count: 5,
                semaphore: Some(true)
            })
        );
        let old = "pos:\t0\nflags:\t02\neventfd-count:  fffffffffffffffe\n";
        assert_eq!(
            parse_fdinfo(old),
            Some(FdInfo {
                count: u64::MAX - 1,
                semaphore: None
            })
        );
        assert_eq!(parse_fdinfo("pos:\t0\nflags:\t02000000\n"), None);
    }

    #[cfg(not(evfd_loom))]
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn doorbell_ring_drain_are_idempotent() {
        let d = EventfdDoorbell::create(true).unwrap();
        assert!(is_cloexec(d.as_fd()).unwrap());
        d.drain().unwrap(); // EAGAIN: fine
        d.ring().unwrap();
        d.ring().unwrap();
        assert_eq!(read(d.as_fd()).unwrap(), 2);
        assert_eq!(
            d.stats(),
            DoorbellStats {
                rings: 2,
                drains: 1
            }
        );
        assert_eq!(
            read(d.as_fd()).unwrap_err().raw_os_error(),
            Some(Errno::AGAIN.raw_os_error())
        );
    }
    /// The mechanisms, each on a description made blocking through a dup (the peer's
    /// view): nothing waits. Run under a watchdog so that a regression fails, not hangs.
    #[cfg(not(evfd_loom))]
    fn with_watchdog(name: &'static str, f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        match rx.recv_timeout(std::time::Duration::from_secs(10)) {
            Ok(()) => {}
            Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{name} panicked"),
            Err(_) => panic!("{name}: a now-call blocked (watchdog)"),
        }
    }

    #[cfg(not(evfd_loom))]
    fn blocking_eventfd(initial: u32, semaphore: bool) -> (OwnedFd, OwnedFd) {
        let fd = create(initial, semaphore, true).unwrap();
        let peer = dup(fd.as_fd(), true).unwrap();
        set_blocking(peer.as_fd()).unwrap(); // the peer clears the shared flag
        assert!(!super::super::description_nonblocking(fd.as_fd()).unwrap());
        (fd, peer)
    }

    #[cfg(not(evfd_loom))]
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn now_calls_never_wait_on_a_blocking_description() {
        for how in [Now::Probed, Now::Fallback] {
            with_watchdog("eventfd now-calls", move || {
                let (fd, _peer) = blocking_eventfd(0, false);
                let fd = fd.as_fd();
                let e = read_now_with(fd, how).unwrap_err();
                assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{how:?}");
                assert_eq!(e.raw_os_error(), Some(Errno::AGAIN.raw_os_error()));
                write_now_with(fd, 0, how).unwrap();
                write_now_with(fd, 5, how).unwrap();
                write_now_with(fd, 7, how).unwrap(); // n > 1 into a non-empty count
                assert_eq!(read_now_with(fd, how).unwrap(), 12);
                write_now_with(fd, crate::mode::LIMIT - 3, how).unwrap();
                let e = write_now_with(fd, 4, how).unwrap_err();
                assert_eq!(
                    e.raw_os_error(),
                    Some(Errno::AGAIN.raw_os_error()),
                    "{how:?}"
                );
                write_now_with(fd, 3, how).unwrap(); // exactly the room left
                for n in [1, 2, 1 << 40] {
                    let e = write_now_with(fd, n, how).unwrap_err();
                    assert_eq!(e.kind(), io::ErrorKind::WouldBlock, "{how:?} {n}");
                }
                write_now_with(fd, 0, how).unwrap(); // 0 fits at the limit
                let e = write_now_with(fd, u64::MAX, how).unwrap_err();
                assert_eq!(e.raw_os_error(), Some(Errno::INVAL.raw_os_error()));
                assert_eq!(read_now_with(fd, how).unwrap(), crate::mode::LIMIT);
                assert!(read_now_with(fd, how).is_err());
            });
        }
    }

    #[cfg(not(evfd_loom))]
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn now_calls_semaphore_and_nonblocking_description() {
        for how in [Now::Probed, Now::Fallback] {
            with_watchdog("semaphore now-calls", move || {
                let (fd, _peer) = blocking_eventfd(2, true);
                assert_eq!(read_now_with(fd.as_fd(), how).unwrap(), 1);
                assert_eq!(read_now_with(fd.as_fd(), how).unwrap(), 1);
                assert!(read_now_with(fd.as_fd(), how).is_err());
                // The ordinary case: a non-blocking description.
                let nb = create(0, false, true).unwrap();
                write_now_with(nb.as_fd(), 9, how).unwrap();
                assert_eq!(read_now_with(nb.as_fd(), how).unwrap(), 9);
                assert!(read_now_with(nb.as_fd(), how).is_err());
            });
        }
    }

    /// The probe's findings on this kernel (recorded in docs/semantics.md): reads honour
    /// RWF_NOWAIT, writes answer EOPNOTSUPP (eventfd has no write_iter).
    #[cfg(not(evfd_loom))]
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn probe_findings() {
        let (fd, _peer) = blocking_eventfd(0, false);
        let mut buf = [0u8; 8];
        let r = rustix::io::preadv2(
            fd.as_fd(),
            &mut [io::IoSliceMut::new(&mut buf)],
            u64::MAX,
            rustix::io::ReadWriteFlags::NOWAIT,
        );
        // Linux 5.12+: EAGAIN at count 0 on a blocking description, not a wait.
        assert!(
            matches!(r, Err(Errno::AGAIN) | Err(Errno::OPNOTSUPP)),
            "{r:?}"
        );
        let w = rustix::io::pwritev2(
            fd.as_fd(),
            &[io::IoSlice::new(&1u64.to_ne_bytes())],
            u64::MAX,
            rustix::io::ReadWriteFlags::NOWAIT,
        );
        assert!(matches!(w, Ok(8) | Err(Errno::OPNOTSUPP)), "{w:?}");
        // Whatever the kernel said, the helpers agree with it after one call each.
        let _ = read_now(fd.as_fd());
        let _ = write_now(fd.as_fd(), 0);
        let (rd, wr) = nowait_probes();
        assert_eq!(rd, r.is_ok() || r == Err(Errno::AGAIN));
        assert_eq!(wr, w.is_ok());
    }

    #[cfg(not(evfd_loom))]
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn fdinfo_count_without_allocating() {
        let fd = create(0, false, true).unwrap();
        write(fd.as_fd(), 1 << 50).unwrap();
        assert_eq!(fdinfo_count(fd.as_fd()), Some(1 << 50));
        let (p, _w) = rustix::pipe::pipe().unwrap();
        assert_eq!(fdinfo_count(p.as_fd()), None);
    }

    #[cfg(not(evfd_loom))]
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn doorbell_drain_on_a_blocking_description() {
        with_watchdog("doorbell drain", || {
            let d = EventfdDoorbell::create(true).unwrap();
            // The view's public borrow: from here on its description is shared.
            let peer = dup(d.lend(), true).unwrap();
            set_blocking(peer.as_fd()).unwrap();
            d.drain().unwrap(); // count 0: EAGAIN is "already drained"
            d.ring().unwrap();
            read(peer.as_fd()).unwrap(); // the peer steals the ring
            d.drain().unwrap(); // must not wait
            write(peer.as_fd(), crate::mode::LIMIT).unwrap();
            d.ring().unwrap(); // saturated: "already rung", must not wait
        });
    }
}
