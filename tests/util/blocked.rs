//! Waits until a thread is observably blocked in the kernel, before a test makes the change
//! that must wake it (a short sleep instead only hopes it is, and on a loaded machine the test
//! then passes through the non-blocking path). Linux reads `/proc`; elsewhere, with no
//! `/proc` to read, each wait is a 20 ms sleep (the old hope).

use std::time::Duration;

#[cfg(any(target_os = "linux", target_os = "android"))]
mod linux {
    use super::Duration;

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
    /// for 1 but not for all naps between tries (a test of that path names it itself). Numbers
    /// as this arch has them; the ones an arch lacks (`poll` and `epoll_wait` on aarch64,
    /// riscv64) are left out there.
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

    /// Until thread `tid`, asleep with `before` [`sleeps`] (taken before a step that must wake
    /// it), has been woken and sleeps again: it woke, found nothing for it, and went back.
    pub fn wait_until_woken_and_blocked(tid: libc::pid_t, before: u64, what: &str) {
        let end = std::time::Instant::now() + Duration::from_secs(10);
        while sleeps(tid) == before {
            assert!(std::time::Instant::now() < end, "{what}: never woken");
            std::thread::sleep(Duration::from_micros(200));
        }
        wait_until_blocked(tid, what);
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
}

#[cfg(any(target_os = "linux", target_os = "android"))]
pub use linux::*;

#[cfg(not(any(target_os = "linux", target_os = "android")))]
mod elsewhere {
    use super::Duration;

    const HOPE: Duration = Duration::from_millis(20);

    pub fn this_tid() -> libc::pid_t {
        0
    }

    pub fn blocking_syscalls() -> &'static [libc::c_long] {
        &[]
    }

    pub fn epoll_wait_syscalls() -> &'static [libc::c_long] {
        &[]
    }

    pub fn wait_until_blocked(_tid: libc::pid_t, _what: &str) -> libc::c_long {
        std::thread::sleep(HOPE);
        0
    }

    pub fn wait_until_blocked_in(
        _tid: libc::pid_t,
        _syscalls: &[libc::c_long],
        _what: &str,
    ) -> libc::c_long {
        std::thread::sleep(HOPE);
        0
    }

    pub fn wait_until_process_blocked(_pid: libc::pid_t, _what: &str) -> libc::c_long {
        std::thread::sleep(HOPE);
        0
    }

    pub fn sleeps(_tid: libc::pid_t) -> u64 {
        0
    }

    pub fn wait_until_woken_and_blocked(_tid: libc::pid_t, _before: u64, _what: &str) {
        std::thread::sleep(HOPE);
    }
}

#[cfg(not(any(target_os = "linux", target_os = "android")))]
pub use elsewhere::*;
