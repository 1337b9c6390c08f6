//! Helpers shared by the fd-view, mixed-source, kernel-sleep and async-read tests: `poll(2)`
//! readability, a kernel epoll watching one fd, a thread blocked in `Epoll::wait`, the
//! kernel epolls of this process that watch a given fd, and a wait until a thread sleeps in
//! a blocking syscall (`/proc`).
#![allow(dead_code)]

mod blocked;
pub use blocked::*;

use std::os::fd::AsFd;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::os::fd::OwnedFd;
#[cfg(any(target_os = "linux", target_os = "android"))]
use std::time::Duration;

#[cfg(any(target_os = "linux", target_os = "android"))]
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
#[cfg(any(target_os = "linux", target_os = "android"))]
pub struct Kep {
    ep: OwnedFd,
}

#[cfg(any(target_os = "linux", target_os = "android"))]
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

#[cfg(any(target_os = "linux", target_os = "android"))]
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

/// As [`blocked_wait`], returning once the thread sleeps in its wait
/// ([`wait_until_blocked`]).
pub fn asleep_in_wait(ep: &evfd::Epoll, cap: usize) -> std::sync::mpsc::Receiver<Vec<evfd::Event>> {
    let (tid_tx, tid_rx) = std::sync::mpsc::channel();
    let (tx, rx) = std::sync::mpsc::channel();
    let ep = ep.clone();
    std::thread::spawn(move || {
        tid_tx.send(this_tid()).unwrap();
        let mut buf = vec![evfd::Event::default(); cap];
        let n = ep.wait(&mut buf, None).unwrap();
        let _ = tx.send(buf[..n].to_vec());
    });
    wait_until_blocked(tid_rx.recv().unwrap(), "a thread in Epoll::wait");
    rx
}

/// The kernel epolls of this process that hold a registration of fd number `fd`, one
/// number each (the lowest of its fds). A registration lives as long as its epoll and the
/// file, so while `fd` stays open only epolls that watch it are named. Epolls are told apart
/// by their registrations (`/proc/self/fdinfo`'s `tfd:` lines): evfd's carry a token unique
/// to each, so two fds that show the same are one epoll (a duplicate, as the one tokio's
/// reactor holds of an `Epoll`'s kernel epoll).
pub fn epolls_watching(fd: std::os::fd::RawFd) -> Vec<std::os::fd::RawFd> {
    let mut found: std::collections::BTreeMap<String, std::os::fd::RawFd> = Default::default();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(num) = e.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        // Either may be gone already (a fd another thread closed).
        let Ok(target) = std::fs::read_link(e.path()) else {
            continue;
        };
        if target.to_string_lossy() != "anon_inode:[eventpoll]" {
            continue;
        }
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{num}")) else {
            continue;
        };
        let regs: Vec<&str> = info.lines().filter(|l| l.starts_with("tfd:")).collect();
        let watches = regs.iter().any(|l| {
            l.strip_prefix("tfd:")
                .and_then(|r| r.split_whitespace().next())
                .and_then(|n| n.parse::<i32>().ok())
                == Some(fd)
        });
        if watches {
            let lowest = found.entry(regs.join("\n")).or_insert(num);
            *lowest = (*lowest).min(num);
        }
    }
    let mut nums: Vec<_> = found.into_values().collect();
    nums.sort_unstable();
    nums
}

/// The fd number a `Debug` output shows as `fd: N` (a `KernelNotifier`'s, read without
/// lending it).
pub fn fd_in_debug(x: &impl std::fmt::Debug) -> std::os::fd::RawFd {
    let dbg = format!("{x:?}");
    dbg.split("fd: ")
        .nth(1)
        .unwrap()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .unwrap()
        .parse()
        .unwrap()
}

/// `fut`, awaited, calling `first(pending)` once with whether its first poll (with the
/// task's own waker) returned `Pending`. A test that must wake a waiting future sends itself
/// a message from `first` and makes the change only when it arrives: the future is then
/// registered for the wake, whatever the executor's thread is doing.
pub async fn reporting_first_poll<F: std::future::Future>(
    fut: F,
    first: impl FnOnce(bool),
) -> F::Output {
    let mut fut = std::pin::pin!(fut);
    let mut first = Some(first);
    std::future::poll_fn(move |cx| {
        let r = fut.as_mut().poll(cx);
        if let Some(first) = first.take() {
            first(r.is_pending());
        }
        r
    })
    .await
}

/// `fut`, awaited, with `change` run on a thread of its own once `fut`'s first poll returned
/// `Pending` (asserted): the change must wake the future. Returns both results.
pub async fn once_pending<F, R>(
    fut: F,
    change: impl FnOnce() -> R + Send + 'static,
) -> (F::Output, R)
where
    F: std::future::Future,
    R: Send + 'static,
{
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || rx.recv().ok().map(|()| change()));
    let out = reporting_first_poll(fut, move |pending| {
        assert!(pending, "ready before the change that should wake it");
        tx.send(()).unwrap();
    })
    .await;
    let r = t.join().unwrap().expect("the first poll ran");
    (out, r)
}

/// A boxed read future of a handle, for [`concurrent_reads`].
pub type ReadFuture<'a> =
    std::pin::Pin<Box<dyn std::future::Future<Output = std::io::Result<u64>> + Send + 'a>>;

/// `readers` read futures (`read` on `handle`) wait at once while this thread writes
/// `total` units in writes of 1 to 3 (`write`): every unit must be read once. The futures
/// run as tokio tasks on a 2-worker runtime (the reactor's route, `on_tokio`) or on threads
/// of their own in `block_on` (the watcher's); each stops when `stop` (an in-memory
/// Semaphore) gives it a unit, dropping its pending read. Panics naming `what` if the units
/// are not all read within 20 s, or a reader is not done 10 s after its stop.
pub fn concurrent_reads<H: Send + Sync + 'static>(
    what: &str,
    handle: std::sync::Arc<H>,
    read: for<'a> fn(&'a H) -> ReadFuture<'a>,
    (readers, total, on_tokio): (u64, u64, bool),
    mut write: impl FnMut(u64),
) {
    use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
    use std::sync::Arc;
    use std::time::Instant;
    let stop = Arc::new(
        evfd::Notifier::builder()
            .mode(evfd::Mode::Semaphore)
            .build()
            .unwrap(),
    );
    let got = Arc::new(AtomicU64::new(0));
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (mut tasks, mut threads) = (Vec::new(), Vec::new());
    for _ in 0..readers {
        let (h, stop, got) = (Arc::clone(&handle), Arc::clone(&stop), Arc::clone(&got));
        let f = async move {
            loop {
                let r = std::pin::pin!(read(&h));
                let s = std::pin::pin!(stop.read_async());
                match futures::future::select(r, s).await {
                    futures::future::Either::Left((n, _)) => {
                        got.fetch_add(n.unwrap(), SeqCst);
                    }
                    futures::future::Either::Right(_) => return,
                }
            }
        };
        if on_tokio {
            tasks.push(rt.spawn(f));
        } else {
            threads.push(std::thread::spawn(move || futures::executor::block_on(f)));
        }
    }
    let mut written = 0;
    while written < total {
        let n = (written % 3 + 1).min(total - written);
        write(n);
        written += n;
        if written % 16 == 0 {
            std::thread::yield_now();
        }
    }
    let deadline = Instant::now() + std::time::Duration::from_secs(20);
    while got.load(SeqCst) < total {
        assert!(
            Instant::now() < deadline,
            "{what} tokio {on_tokio}: read {} of {total}",
            got.load(SeqCst)
        );
        std::thread::sleep(std::time::Duration::from_millis(1));
    }
    stop.write(readers).unwrap();
    for t in tasks {
        rt.block_on(async { tokio::time::timeout(std::time::Duration::from_secs(10), t).await })
            .expect("watchdog")
            .unwrap();
    }
    for t in threads {
        t.join().unwrap();
    }
    assert_eq!(got.load(SeqCst), total, "{what} tokio {on_tokio}");
}
