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
use super::{retry, Counters, Doorbell, DoorbellStats};

/// A kernel eventfd in counter mode as a doorbell: ring = write 1, drain = read (which
/// resets the counter to 0).
#[derive(Debug)]
#[cfg_attr(any(evfd_force_pipe, evfd_loom), allow(dead_code))]
pub(crate) struct EventfdDoorbell {
    fd: OwnedFd,
    counters: Counters,
}

impl Doorbell for EventfdDoorbell {
    fn create(cloexec: bool) -> io::Result<Self> {
        Ok(EventfdDoorbell {
            fd: create(0, false, cloexec)?,
            counters: Counters::default(),
        })
    }

    fn ring(&self) -> io::Result<()> {
        match retry(
            || self.counters.note_ring(),
            || rustix::io::write(&self.fd, &1u64.to_ne_bytes()),
        ) {
            // EAGAIN: the counter is saturated, so it is readable: already rung.
            Ok(_) | Err(Errno::AGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn drain(&self) -> io::Result<()> {
        let mut buf = [0u8; 8];
        match retry(
            || self.counters.note_drain(),
            || rustix::io::read(&self.fd, &mut buf),
        ) {
            // EAGAIN: the counter is 0: already drained.
            Ok(_) | Err(Errno::AGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
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

/// One 8-byte `read(2)`: the count (or 1 with `EFD_SEMAPHORE`). `EINTR` is retried;
/// `EAGAIN` (count 0 on a non-blocking fd) comes back as `WouldBlock` with its errno.
pub(crate) fn read(fd: BorrowedFd<'_>) -> io::Result<u64> {
    let mut buf = [0u8; 8];
    let n = retry(|| (), || rustix::io::read(fd, &mut buf))?;
    if n != 8 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            format!("short read of {n} bytes from eventfd {}", fd.as_raw_fd()),
        ));
    }
    Ok(u64::from_ne_bytes(buf))
}

/// One 8-byte `write(2)` of `n`. `EINTR` is retried; `EAGAIN` (no room on a non-blocking fd)
/// comes back as `WouldBlock`, `EINVAL` (`n == u64::MAX`) as `InvalidInput`, with their errno.
pub(crate) fn write(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
    let written = retry(|| (), || rustix::io::write(fd, &n.to_ne_bytes()))?;
    debug_assert_eq!(written, 8, "eventfd writes are all or nothing");
    Ok(())
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
}
