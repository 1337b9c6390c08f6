//! Helpers shared by the fd-view, mixed-source, kernel-sleep and async-read tests: `poll(2)`
//! readability, a kernel epoll watching one fd, a thread blocked in `Epoll::wait`, the
//! kernel epolls of this process that watch a given fd, and a wait until a thread sleeps in
//! a blocking syscall (`/proc`).
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

/// The calling thread's id (`gettid(2)`), for [`wait_until_blocked`]: a thread that is about
/// to block sends it over a channel first.
pub fn this_tid() -> libc::pid_t {
    // SAFETY: gettid takes no arguments and cannot fail.
    unsafe { libc::syscall(libc::SYS_gettid) as libc::pid_t }
}

/// The syscalls evfd blocks in: the futexes of in-memory counts and of the shared region,
/// `read(2)` and `write(2)` of a blocking eventfd or pipe (an empty count, a full one),
/// `poll(2)`/`ppoll(2)` on a doorbell or an fd, and `epoll_wait` in all its forms (the
/// crate's and tokio's). Not `clock_nanosleep(2)`, where a kernel notifier's write with room
/// for 1 but not for all naps between tries (a test of that path names it itself). Numbers as this arch has them;
/// the ones an arch lacks (`poll` and `epoll_wait` on aarch64, riscv64) are left out there.
pub fn blocking_syscalls() -> &'static [libc::c_long] {
    &[
        libc::SYS_futex,
        libc::SYS_read,
        libc::SYS_write,
        #[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "arm"))]
        libc::SYS_poll,
        libc::SYS_ppoll,
        #[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "arm"))]
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
    ]
}

/// The `epoll_wait` syscalls of this arch (a subset of [`blocking_syscalls`]).
pub fn epoll_wait_syscalls() -> &'static [libc::c_long] {
    &[
        #[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "arm"))]
        libc::SYS_epoll_wait,
        libc::SYS_epoll_pwait,
        libc::SYS_epoll_pwait2,
    ]
}

/// Until thread `tid` of this process sleeps in one of [`blocking_syscalls`]; returns the
/// syscall's number. Panics naming `what` if it does not within 10 s.
pub fn wait_until_blocked(tid: libc::pid_t, what: &str) -> libc::c_long {
    wait_until_blocked_in(tid, blocking_syscalls(), what)
}

/// As [`wait_until_blocked`], in one of `syscalls` only (e.g. not the futex a thread slept in
/// before it moved its wait into the kernel).
pub fn wait_until_blocked_in(
    tid: libc::pid_t,
    syscalls: &[libc::c_long],
    what: &str,
) -> libc::c_long {
    blocked(&format!("/proc/self/task/{tid}"), syscalls, what)
}

/// As [`wait_until_blocked`], for the main thread of process `pid` (a forked child).
pub fn wait_until_process_blocked(pid: libc::pid_t, what: &str) -> libc::c_long {
    blocked(
        &format!("/proc/{pid}/task/{pid}"),
        blocking_syscalls(),
        what,
    )
}

/// How many times thread `tid` of this process has gone to sleep (`voluntary_ctxt_switches`
/// of its `status`): a count that grew across a step proves the thread was woken and slept
/// again.
pub fn sleeps(tid: libc::pid_t) -> u64 {
    switches(&format!("/proc/self/task/{tid}"))
}

fn switches(dir: &str) -> u64 {
    let path = format!("{dir}/status");
    let status = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{path}: {e}"));
    status
        .lines()
        .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no voluntary_ctxt_switches in {status}"))
}

/// Polls the task at `dir` (a `/proc/.../task/<tid>` directory) every 200 µs until it is
/// asleep (state `S` in `stat`) inside one of `syscalls` (the first field of `syscall`: the
/// number of the syscall it is blocked in, `running` while it runs), and still in the same
/// sleep at the next look (same syscall, no sleep since: a lock it waited for on the way
/// in, also a futex, is rarely held that long).
fn blocked(dir: &str, syscalls: &[libc::c_long], what: &str) -> libc::c_long {
    let (stat, syscall) = (format!("{dir}/stat"), format!("{dir}/syscall"));
    let read = |path: &str| {
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{what}: {path}: {e}"))
    };
    let end = std::time::Instant::now() + Duration::from_secs(10);
    let mut seen = None;
    loop {
        // The state is the field after the command name, which is in parentheses and may
        // hold anything: the first one after the last ')'.
        let stat = read(&stat);
        let state = stat
            .rsplit_once(')')
            .and_then(|(_, r)| r.split_whitespace().next());
        let syscall = read(&syscall);
        let nr = syscall
            .split_whitespace()
            .next()
            .and_then(|n| n.parse().ok());
        let now = match (state, nr) {
            (Some("S"), Some(nr)) if syscalls.contains(&nr) => Some((nr, switches(dir))),
            _ => None,
        };
        if let (Some(now), Some(seen)) = (now, seen) {
            if now == seen {
                return now.0;
            }
        }
        seen = now;
        assert!(
            std::time::Instant::now() < end,
            "{what}: never blocked (10 s; state {state:?}, syscall {})",
            syscall.trim()
        );
        std::thread::sleep(Duration::from_micros(200));
    }
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
