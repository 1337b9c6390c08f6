//! The pipe doorbell: the fallback where eventfd(2) is missing, forced with
//! `--cfg evfd_force_pipe` so that CI exercises it.
//!
//! Ring writes one byte into the write end; drain empties the read end. The protocol rings
//! only while not rung, so at most one byte is ever in the pipe and one `read(2)` with a
//! larger buffer always empties it.
//!
//! # References
//!
//! - [pipe(2)](https://man7.org/linux/man-pages/man2/pipe.2.html)
//! - [pipe(7)](https://man7.org/linux/man-pages/man7/pipe.7.html)

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::io::Errno;
use rustix::pipe::PipeFlags;

use super::{retry, Counters, Doorbell, DoorbellStats};

/// A non-blocking pipe; pollers watch the read end.
#[derive(Debug)]
pub(crate) struct PipeDoorbell {
    rd: OwnedFd,
    wr: OwnedFd,
    counters: Counters,
}

impl Doorbell for PipeDoorbell {
    fn create(cloexec: bool) -> io::Result<Self> {
        let mut flags = PipeFlags::NONBLOCK;
        if cloexec {
            flags |= PipeFlags::CLOEXEC;
        }
        let (rd, wr) = rustix::pipe::pipe_with(flags)?;
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

    fn drain(&self) -> io::Result<()> {
        let mut buf = [0u8; 64];
        loop {
            match retry(
                || self.counters.note_drain(),
                || rustix::io::read(&self.rd, &mut buf),
            ) {
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

    fn stats(&self) -> DoorbellStats {
        self.counters.get()
    }
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::*;
    use crate::events::Events;

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn ring_drain_toggle_readability() {
        let d = PipeDoorbell::create(true).unwrap();
        assert!(super::super::eventfd::is_cloexec(d.as_fd()).unwrap());
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
}
