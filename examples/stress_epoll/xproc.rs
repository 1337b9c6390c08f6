//! `xproc`: `SharedNotifier` between two processes (`fork`), next to a kernel eventfd
//! shared the same way.
//!
//! - `pingpong_block`: two processes bounce a token, each blocking in `read` (a shared
//!   futex) on its own notifier; the twin is a pair of blocking kernel eventfds. rt/s.
//! - `pingpong_spin_vs_eventfd`: the same with both processes spinning on `try_read`
//!   (memory only), against the blocking eventfd pair. rt/s.
//! - `stress`: 2 producer processes `notify()` as fast as they can, this process `read`s
//!   (blocking); every unit written is counted back. ops/ms (notifies).
//! - `awake_per_notify`: syscalls per `notify` while the consumer process is awake
//!   (spinning on `try_read`): the writer thread's read/write syscalls as the kernel counts
//!   them (`/proc/thread-self/io`), plus the futex wakes and doorbell writes the crate
//!   counted (futex calls are not in the kernel's read/write accounting). The twin writes
//!   an eventfd per notify.
//!
//! Under a co-tenant (`_contended`): `pingpong_block` only.

use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

use evfd::{Mode, SharedNotifier};

use crate::measure::{interleaved, Cfg};
use crate::report::{Out, OPS_MS, RT_S, SYSCALLS_OP};
use crate::syscount::RwProbe;
use crate::twin::{kfd, kread};

/// Ping and the "stop" token the parent sends at the end.
const STOP: u64 = 1 << 20;

/// Run `f` in a child process (`fork`), which leaves with `_exit(0)`.
fn fork(f: impl FnOnce()) -> libc::pid_t {
    // SAFETY: fork has no preconditions; the child runs `f` (atomics, futex and eventfd
    // syscalls: no lock another thread of this process could hold at the fork) and leaves
    // with `_exit` (no destructors, no atexit handlers, no stdio flush).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        f();
        // SAFETY: `_exit` ends the child at once; always sound.
        unsafe { libc::_exit(0) };
    }
    pid
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: `pid` is a child of this process; `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid, "waitpid");
}

/// A blocking kernel eventfd (no `EFD_NONBLOCK`: `read(2)` sleeps in the kernel).
fn keventfd() -> OwnedFd {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).expect("eventfd")
}

fn kw(fd: &OwnedFd, n: u64) {
    rustix::io::write(fd, &n.to_ne_bytes()).expect("eventfd write");
}

fn kr(fd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    rustix::io::read(fd, &mut b).expect("eventfd read");
    u64::from_ne_bytes(b)
}

/// Round trips per second for `dur`: the child echoes each ping until it gets `STOP`.
fn bounce(
    dur: Duration,
    echo: impl FnOnce(),
    mut ping: impl FnMut(u64),
    mut pong: impl FnMut(),
) -> f64 {
    let pid = fork(echo);
    let t0 = Instant::now();
    let mut n = 0u64;
    while t0.elapsed() < dur {
        ping(1);
        pong();
        n += 1;
    }
    let el = t0.elapsed();
    ping(STOP);
    reap(pid);
    n as f64 / el.as_secs_f64()
}

fn shared_pingpong(dur: Duration, spin: bool) -> f64 {
    let a = SharedNotifier::new(Mode::Counter).unwrap();
    let b = SharedNotifier::new(Mode::Counter).unwrap();
    let (ac, bc) = (a.clone(), b.clone());
    if !spin {
        // The kernel twin's shape: each side's blocking read called in its loop.
        return bounce(
            dur,
            move || loop {
                if ac.read().unwrap() >= STOP {
                    return;
                }
                bc.write(1).unwrap();
            },
            |n| a.write(n).unwrap(),
            || {
                b.read().unwrap();
            },
        );
    }
    // Spinning: each side polls `try_read` until the token is there.
    let recv = |s: &SharedNotifier| -> u64 {
        let mut i = 0u32;
        loop {
            if let Ok(v) = s.try_read() {
                return v;
            }
            i = i.wrapping_add(1);
            if i % 1024 == 0 {
                // On a shared machine the other process may need this CPU.
                std::thread::yield_now();
            }
            std::hint::spin_loop();
        }
    };
    bounce(
        dur,
        move || loop {
            if recv(&ac) >= STOP {
                return;
            }
            bc.write(1).unwrap();
        },
        |n| a.write(n).unwrap(),
        || {
            recv(&b);
        },
    )
}

fn kernel_pingpong(dur: Duration) -> f64 {
    let (a, b) = (keventfd(), keventfd());
    let (ac, bc) = (a.try_clone().unwrap(), b.try_clone().unwrap());
    bounce(
        dur,
        move || loop {
            if kr(&ac) >= STOP {
                return;
            }
            kw(&bc, 1);
        },
        |n| kw(&a, n),
        || {
            kr(&b);
        },
    )
}

/// 2 producer processes, this one consuming: notifies per ms, every unit counted back.
fn stress(dur: Duration, shared: bool) -> f64 {
    const P: u64 = 2;
    // Where producers report what they wrote, and that they are done.
    let totals = SharedNotifier::new(Mode::Counter).unwrap();
    let done = SharedNotifier::new(Mode::Counter).unwrap();
    let s = SharedNotifier::new(Mode::Counter).unwrap();
    // Non-blocking: the consumer polls with a timeout, then reads.
    let k = kfd();
    let mut pids = Vec::new();
    for _ in 0..P {
        let (s, k, totals, done) = (
            s.clone(),
            k.try_clone().unwrap(),
            totals.clone(),
            done.clone(),
        );
        pids.push(fork(move || {
            let t0 = Instant::now();
            let mut n = 0u64;
            while t0.elapsed() < dur {
                for _ in 0..64 {
                    if shared {
                        s.notify().unwrap();
                    } else {
                        kw(&k, 1);
                    }
                }
                n += 64;
            }
            totals.write(n).unwrap();
            done.write(1).unwrap();
        }));
    }
    let t0 = Instant::now();
    let mut got = 0u64;
    loop {
        if done.count() == P {
            // Everyone finished: what is left is all there is.
            got += if shared {
                s.try_read().unwrap_or(0)
            } else {
                kread(&k)
            };
            break;
        }
        if shared {
            if let Ok(v) = s.read_timeout(Duration::from_millis(5)) {
                got += v;
            }
        } else {
            // A blocking read could sleep after the last producer: poll with a timeout.
            let mut fds = [rustix::event::PollFd::new(&k, rustix::event::PollFlags::IN)];
            let ts = rustix::event::Timespec {
                tv_sec: 0,
                tv_nsec: 5_000_000,
            };
            if rustix::event::poll(&mut fds, Some(&ts)).unwrap() == 1 {
                got += kread(&k);
            }
        }
    }
    let el = t0.elapsed();
    for p in pids {
        reap(p);
    }
    assert_eq!(got, totals.count(), "every unit written is read");
    got as f64 / el.as_secs_f64() / 1000.0
}

/// Syscalls per notify made by this (writer) thread while the consumer process spins.
fn awake_per_notify(n: u64, shared: bool) -> f64 {
    let s = SharedNotifier::new(Mode::Counter).unwrap();
    let k = keventfd();
    let (sc, kc) = (s.clone(), k.try_clone().unwrap());
    let pid = fork(move || {
        // Awake consumer: spin until it has taken `n` units (the kernel twin's spin is a
        // non-blocking read each time, which is its own cost, not the writer's).
        let mut got = 0;
        while got < n {
            if shared {
                if let Ok(v) = sc.try_read() {
                    got += v;
                }
            } else {
                let mut fds = [rustix::event::PollFd::new(
                    &kc,
                    rustix::event::PollFlags::IN,
                )];
                let zero = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 0,
                };
                if rustix::event::poll(&mut fds, Some(&zero)).unwrap() == 1 {
                    got += kr(&kc);
                }
            }
            std::hint::spin_loop();
        }
    });
    let probe = RwProbe::new();
    let before = probe.as_ref().and_then(|p| p.now());
    let st0 = s.stats();
    for _ in 0..n {
        if shared {
            s.notify().unwrap();
        } else {
            kw(&k, 1);
        }
    }
    let rw = match (&probe, before) {
        (Some(p), Some(b)) => p.since(b, 1).map_or(0, |(r, w)| r + w),
        _ => 0,
    };
    let st = s.stats();
    let crate_counted = (st.futex_wakes - st0.futex_wakes) + (st.futex_waits - st0.futex_waits);
    reap(pid);
    (rw + crate_counted) as f64 / n as f64
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    let dur = cfg.dur;
    let (e, t) = interleaved(
        cfg.reps,
        || shared_pingpong(dur, false),
        || kernel_pingpong(dur),
    );
    out.row("xproc", "pingpong_block", 2, RT_S, (&e, &t));
    if cfg.contended {
        return;
    }
    let (e, t) = interleaved(
        cfg.reps,
        || shared_pingpong(dur, true),
        || kernel_pingpong(dur),
    );
    out.row("xproc", "pingpong_spin_vs_eventfd", 2, RT_S, (&e, &t));
    let (e, t) = interleaved(cfg.reps, || stress(dur, true), || stress(dur, false));
    out.row("xproc", "stress", 3, OPS_MS, (&e, &t));
    let n = if cfg.quick { 20_000 } else { 100_000 };
    let (e, t) = interleaved(
        cfg.reps,
        || awake_per_notify(n, true),
        || awake_per_notify(n, false),
    );
    out.row("xproc", "awake_per_notify", 2, SYSCALLS_OP, (&e, &t));
    out.notes.push(
        "xproc: processes made by fork; awake_per_notify counts the writer thread's read/write \
         syscalls (/proc/thread-self/io) plus the futex calls the crate counted"
            .into(),
    );
}
