//! Helpers shared by the fd-view, mixed-source and kernel-sleep tests: `poll(2)`
//! readability, a kernel epoll watching one fd, and a thread blocked in `Epoll::wait`.
#![allow(dead_code)]

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

/// `poll(2)` with a zero timeout: is the fd readable now?
pub fn poll_readable(fd: impl AsFd) -> bool {
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    poll(
        &mut fds,
        Some(&Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        }),
    )
    .unwrap();
    fds[0].revents().contains(PollFlags::IN)
}

/// A kernel epoll watching one fd for `IN` (plus `ET` if asked).
pub struct Kep {
    ep: OwnedFd,
}

impl Kep {
    pub fn new(fd: impl AsFd, et: bool) -> Kep {
        let ep = epoll::create(CreateFlags::CLOEXEC).unwrap();
        let mut flags = EventFlags::IN;
        if et {
            flags |= EventFlags::ET;
        }
        epoll::add(&ep, fd, EventData::new_u64(7), flags).unwrap();
        Kep { ep }
    }

    /// `epoll_wait`; returns the number of events (0 or 1).
    pub fn wait(&self, timeout: Option<Duration>) -> usize {
        let mut evs = [epoll::Event {
            flags: EventFlags::empty(),
            data: EventData::new_u64(0),
        }];
        let ts = timeout.map(|d| Timespec::try_from(d).unwrap());
        loop {
            match epoll::wait(&self.ep, &mut evs, ts.as_ref()) {
                Ok(n) => {
                    if n == 1 {
                        assert_eq!(evs[0].data.u64(), 7);
                        let flags = evs[0].flags;
                        assert!(flags.contains(EventFlags::IN));
                    }
                    return n;
                }
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => panic!("epoll_wait: {e}"),
            }
        }
    }

    pub fn ready_now(&self) -> bool {
        self.wait(Some(Duration::ZERO)) == 1
    }

    /// Another handle on the same kernel epoll (a dup of its fd), e.g. to wait on it from a
    /// second thread.
    pub fn try_clone(&self) -> Kep {
        Kep {
            ep: self.ep.try_clone().unwrap(),
        }
    }
}

impl AsFd for Kep {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.ep.as_fd()
    }
}

/// Run `ep.wait` (no timeout, a buffer of `cap` events) on a thread of its own; what it
/// returned arrives on the channel.
pub fn blocked_wait(ep: &evfd::Epoll, cap: usize) -> std::sync::mpsc::Receiver<Vec<evfd::Event>> {
    let (tx, rx) = std::sync::mpsc::channel();
    let ep = ep.clone();
    std::thread::spawn(move || {
        let mut buf = vec![evfd::Event::default(); cap];
        let n = ep.wait(&mut buf, None).unwrap();
        let _ = tx.send(buf[..n].to_vec());
    });
    rx
}
