//! The pipe doorbell: the fallback where eventfd(2) is missing, forced with
//! `--cfg evfd_force_pipe` so that CI exercises it.
//!
//! Ring writes one byte into the write end; drain empties the read end. A level view rings
//! only while not rung (and re-rings at most once more), so a byte or two is in the pipe;
//! an edge-only view's rings are never drained, and fill it until `ring_edge` finds it full
//! and drains it. Drain reads until a read comes back short.
//!
//! # References
//!
//! - [pipe(2)](https://man7.org/linux/man-pages/man2/pipe.2.html)
//! - [pipe(7)](https://man7.org/linux/man-pages/man7/pipe.7.html)

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;

use super::{retry, Counters, Doorbell, DoorbellStats, Now, NowProbe};

/// A non-blocking pipe; pollers watch the read end.
#[derive(Debug)]
pub(crate) struct PipeDoorbell {
    rd: OwnedFd,
    wr: OwnedFd,
    counters: Counters,
}

impl Doorbell for PipeDoorbell {
    fn create(cloexec: bool) -> io::Result<Self> {
        let (rd, wr) = pipe(cloexec)?;
        Ok(PipeDoorbell {
            rd,
            wr,
            counters: Counters::default(),
        })
    }

    fn ring(&self) -> io::Result<()> {
        match retry(
            || self.counters.note_ring(),
            || rustix::io::write(&self.wr, &[1u8]),
        ) {
            // EAGAIN: the pipe is full, so it is readable: already rung.
            Ok(_) | Err(Errno::AGAIN) => Ok(()),
            Err(e) => Err(e.into()),
        }
    }

    fn ring_edge(&self) -> io::Result<()> {
        let write = || {
            retry(
                || self.counters.note_ring(),
                || rustix::io::write(&self.wr, &[1u8]),
            )
        };
        match write() {
            Ok(_) => Ok(()),
            // EAGAIN: the pipe is full (an edge-only view's rings are never drained).
            Err(Errno::AGAIN) => {
                self.drain()?;
                write().map(drop).map_err(Into::into)
            }
            Err(e) => Err(e.into()),
        }
    }

    fn drain(&self) -> io::Result<()> {
        let mut buf = [0u8; 64];
        loop {
            self.counters.note_drain();
            // Never waits, whatever the read end's shared `O_NONBLOCK` says: that end is
            // handed to pollers, and whoever holds it can clear the flag.
            match read_now(self.rd.as_fd(), &mut buf) {
                // A short read emptied the pipe (nobody else writes it: we hold the only
                // write end, and the caller holds the doorbell mutex).
                Ok(n) if n < buf.len() => return Ok(()),
                Ok(_) => continue,
                Err(Errno::AGAIN) => return Ok(()),
                Err(e) => return Err(e.into()),
            }
        }
    }

    fn as_fd(&self) -> BorrowedFd<'_> {
        self.rd.as_fd()
    }

    /// The read end, whose description the drain never trusts anyway (`read_now`); the
    /// write end, which rings, is never handed out.
    fn lend(&self) -> BorrowedFd<'_> {
        self.rd.as_fd()
    }

    fn stats(&self) -> DoorbellStats {
        self.counters.get()
    }
}

/// The `RWF_NOWAIT` probe for pipe reads (Linux pipes honour it; elsewhere the fallback).
static READ_PROBE: NowProbe = NowProbe::new();

/// One `read(2)` from a pipe's read end that never waits, whatever the shared open file
/// description's `O_NONBLOCK` says: the bytes read, or `EAGAIN` when the pipe is empty.
/// `preadv2(RWF_NOWAIT)` on Linux, else the fallback of [`NowProbe`].
/// Async-signal-safe.
pub(crate) fn read_now(fd: BorrowedFd<'_>, buf: &mut [u8]) -> rustix::io::Result<usize> {
    read_now_with(fd, buf, Now::Probed)
}

pub(crate) fn read_now_with(
    fd: BorrowedFd<'_>,
    buf: &mut [u8],
    how: Now,
) -> rustix::io::Result<usize> {
    super::read_now_raw(fd, buf, &READ_PROBE, how)
}

/// The `RWF_NOWAIT` probe for pipe writes.
static WRITE_PROBE: NowProbe = NowProbe::new();

/// One `write(2)` of `buf` (at most `PIPE_BUF` bytes: atomic) to a pipe's write end that
/// never waits, whatever the shared open file description's `O_NONBLOCK` says: `EAGAIN`
/// when it does not fit now. On a description a peer made blocking, the fallback writes
/// only while `poll(2)` says `OUT` (a free pipe buffer slot, which holds `PIPE_BUF`) or
/// `ERR` (no reader: the write fails with `EPIPE` at once).
pub(crate) fn write_now(fd: BorrowedFd<'_>, buf: &[u8]) -> rustix::io::Result<usize> {
    super::write_now_raw(fd, buf, &WRITE_PROBE, Now::Probed, |ev| {
        Ok(ev.intersects(rustix::event::PollFlags::OUT | rustix::event::PollFlags::ERR))
    })
}

/// A non-blocking pipe, close-on-exec iff `cloexec`: `pipe2(2)` where there is one.
#[cfg(not(target_vendor = "apple"))]
pub(crate) fn pipe(cloexec: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    use rustix::pipe::PipeFlags;
    let mut flags = PipeFlags::NONBLOCK;
    if cloexec {
        flags |= PipeFlags::CLOEXEC;
    }
    Ok(rustix::pipe::pipe_with(flags)?)
}

/// A non-blocking pipe, close-on-exec iff `cloexec`. macOS has no `pipe2(2)`: the flags are
/// set with `fcntl(2)` after `pipe(2)`, so a `fork`+`exec` in another thread in between can
/// leak the two fds into the child (as for every fd opened on macOS without `O_CLOEXEC`).
#[cfg(target_vendor = "apple")]
pub(crate) fn pipe(cloexec: bool) -> io::Result<(OwnedFd, OwnedFd)> {
    let (rd, wr) = rustix::pipe::pipe()?;
    for fd in [&rd, &wr] {
        let fl = rustix::fs::fcntl_getfl(fd)?;
        rustix::fs::fcntl_setfl(fd, fl | rustix::fs::OFlags::NONBLOCK)?;
        if cloexec {
            rustix::io::fcntl_setfd(fd, rustix::io::FdFlags::CLOEXEC)?;
        }
    }
    Ok((rd, wr))
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::*;
    use crate::events::Events;

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn ring_drain_toggle_readability() {
        let d = PipeDoorbell::create(true).unwrap();
        assert!(super::super::is_cloexec(d.as_fd()).unwrap());
        let readable = |d: &PipeDoorbell| {
            super::super::poll_now(d.as_fd(), Events::IN)
                .unwrap()
                .contains(Events::IN)
        };
        assert!(!readable(&d));
        d.ring().unwrap();
        assert!(readable(&d));
        d.ring().unwrap();
        d.drain().unwrap();
        assert!(!readable(&d));
        d.drain().unwrap();
        assert_eq!(
            d.stats(),
            DoorbellStats {
                rings: 2,
                drains: 2
            }
        );
    }
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn read_now_on_a_blocking_read_end() {
        for how in [Now::Probed, Now::Fallback] {
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::spawn(move || {
                let (rd, wr) = pipe(true).unwrap();
                // A peer holding the read end clears the shared flag.
                let fl = rustix::fs::fcntl_getfl(&rd).unwrap();
                rustix::fs::fcntl_setfl(&rd, fl - rustix::fs::OFlags::NONBLOCK).unwrap();
                let mut buf = [0u8; 8];
                assert_eq!(read_now_with(rd.as_fd(), &mut buf, how), Err(Errno::AGAIN));
                rustix::io::write(&wr, b"ab").unwrap();
                assert_eq!(read_now_with(rd.as_fd(), &mut buf, how), Ok(2));
                assert_eq!(read_now_with(rd.as_fd(), &mut buf, how), Err(Errno::AGAIN));
                let _ = tx.send(());
            });
            rx.recv_timeout(std::time::Duration::from_secs(10))
                .expect("pipe read_now blocked (watchdog)");
        }
    }
}
