//! The twins: thin wrappers over a real eventfd and a real epoll, so that a benchmark runs
//! the same loop on the kernel as on evfd, and event-listener's one-unit token ([`Token`]).
//! Shared by `stress_epoll`, `examples/handoff.rs` and the criterion benches (`#[path =
//! "../examples/stress_epoll/twin.rs"] mod twin;`); each user takes what it needs.
#![allow(dead_code)]

use std::mem::MaybeUninit;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{epoll, eventfd, EventfdFlags};

/// A non-blocking kernel eventfd with count 0.
pub fn kfd() -> OwnedFd {
    kfd_init(0)
}

/// A non-blocking kernel eventfd with count `init`.
pub fn kfd_init(init: u32) -> OwnedFd {
    eventfd(init, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).expect("eventfd")
}

/// `write(2)` of `n`.
pub fn kwrite(fd: &OwnedFd, n: u64) {
    rustix::io::write(fd, &n.to_ne_bytes()).expect("eventfd write");
}

/// `read(2)`: the count taken, 0 if there was none (`EAGAIN`).
pub fn kread(fd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    match rustix::io::read(fd, &mut b) {
        Ok(_) => u64::from_ne_bytes(b),
        Err(rustix::io::Errno::AGAIN) => 0,
        Err(e) => panic!("eventfd read: {e}"),
    }
}

/// `preadv2(RWF_NOWAIT)`: the read evfd's AutoReset delivery makes (it never waits, whatever
/// a peer sharing the open file description did to `O_NONBLOCK`). Where the kernel refuses
/// `RWF_NOWAIT` on an eventfd (before Linux 5.12: `EOPNOTSUPP`), [`kread`], so that the count
/// is always taken. The count taken, 0 if there was none.
pub fn kread_nowait(fd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    match rustix::io::preadv2(
        fd,
        &mut [std::io::IoSliceMut::new(&mut b)],
        u64::MAX,
        rustix::io::ReadWriteFlags::NOWAIT,
    ) {
        Ok(_) => u64::from_ne_bytes(b),
        Err(rustix::io::Errno::AGAIN) => 0,
        Err(_) => kread(fd),
    }
}

/// A kernel epoll.
pub fn kepoll() -> OwnedFd {
    epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create")
}

/// `EPOLL_CTL_ADD` of `fd` with `flags` and `data`.
pub fn kadd(ep: &OwnedFd, fd: impl AsFd, flags: epoll::EventFlags, data: u64) {
    epoll::add(ep, fd, epoll::EventData::new_u64(data), flags).expect("epoll_ctl");
}

/// `epoll_wait` into `buf`, `timeout_ms` (`None`: forever); the (flags, data) pairs.
pub fn kwait(
    ep: &OwnedFd,
    buf: &mut [MaybeUninit<epoll::Event>],
    timeout_ms: Option<u64>,
) -> Vec<(u32, u64)> {
    let ts = timeout_ms.map(|ms| rustix::time::Timespec {
        tv_sec: (ms / 1000) as i64,
        tv_nsec: ((ms % 1000) * 1_000_000) as i64,
    });
    let (got, _) = epoll::wait(ep, &mut *buf, ts.as_ref()).expect("epoll_wait");
    got.iter()
        .map(|e| {
            let (f, d) = (e.flags, e.data);
            (f.bits(), d.u64())
        })
        .collect()
}

/// A kernel eventfd in tokio's reactor (`AsyncFd`, readable interest). Call inside a
/// runtime.
pub fn async_kfd() -> Arc<tokio::io::unix::AsyncFd<OwnedFd>> {
    use tokio::io::{unix::AsyncFd, Interest};
    // SAFETY: an `OwnedFd` owns its fd: it stays open, and `as_raw_fd` returns that same fd,
    // until the `AsyncFd` (which owns the `OwnedFd`) drops it.
    let afd = unsafe { AsyncFd::register_with_interest(kfd(), Interest::READABLE) };
    Arc::new(afd.map_err(|e| e.into_parts().1).expect("AsyncFd"))
}

/// `read(2)` of an `AsyncFd` eventfd: waits for readability, retries on `WouldBlock`.
pub async fn async_kread(fd: &tokio::io::unix::AsyncFd<OwnedFd>) -> u64 {
    loop {
        let mut guard = fd.readable().await.expect("readable");
        let mut b = [0u8; 8];
        match guard
            .try_io(|fd| rustix::io::read(fd.get_ref(), &mut b[..]).map_err(std::io::Error::from))
        {
            Ok(Ok(8)) => return u64::from_ne_bytes(b),
            Ok(r) => panic!("eventfd read: {r:?}"),
            Err(_would_block) => continue,
        }
    }
}

/// event-listener's twin of a one-unit notifier. event-listener has no count, so a token is
/// a flag and the `Event` that announces it, used as its documentation shows: a wait takes
/// the flag; else it makes a listener (`listener!`: on the stack, no allocation), takes the
/// flag again, and waits on the listener; the other side sets the flag and `notify(1)`s.
#[derive(Default)]
pub struct Token {
    flag: AtomicBool,
    event: event_listener::Event,
}

impl Token {
    /// Set the flag and wake a listener.
    pub fn give(&self) {
        self.flag.store(true, SeqCst);
        self.event.notify(1);
    }

    /// Take the flag if it is set.
    pub fn take(&self) -> bool {
        self.flag.swap(false, SeqCst)
    }

    /// Wait until the flag is set and take it; `false` if `timeout` passed first.
    pub fn wait(&self, timeout: Duration) -> bool {
        self.wait_until(Some(Instant::now() + timeout))
    }

    /// Wait until the flag is set and take it, with no timeout.
    pub fn wait_forever(&self) {
        self.wait_until(None);
    }

    /// Wait until the flag is set and take it; `false` if `deadline` passed first.
    fn wait_until(&self, deadline: Option<Instant>) -> bool {
        use event_listener::Listener as _;
        loop {
            if self.take() {
                return true;
            }
            event_listener::listener!(self.event => l);
            if self.take() {
                return true;
            }
            match deadline {
                None => l.wait(),
                Some(d) => {
                    if l.wait_deadline(d).is_none() {
                        return self.take();
                    }
                }
            }
        }
    }

    /// [`wait_forever`](Self::wait_forever) as a future.
    pub async fn wait_async(&self) {
        loop {
            if self.take() {
                return;
            }
            event_listener::listener!(self.event => l);
            if self.take() {
                return;
            }
            l.await;
        }
    }
}
