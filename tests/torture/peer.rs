//! A hostile (or merely ordinary) peer against the honest side (issue 19).
//!
//! `nonblock_flipping_peer`: a peer thread holds duplicates of every fd the honest side
//! uses (so the same open file descriptions): an adopted `KernelNotifier`'s eventfd (made
//! blocking before adoption), an AutoReset `KernelNotifier` registered in an `Epoll`, an
//! `FdView`'s fd and a `SharedNotifier`'s doorbell (taken from the notifier's message). It
//! flips `O_NONBLOCK` on each of them as fast as it can. Meanwhile the honest side runs every
//! non-blocking and timed call on them: `try_read` at 0, `try_write(1)` at `LIMIT`,
//! `consume` at 0, `read_timeout`, the AutoReset delivery inside an `Epoll` harvest, the fd
//! view's drain, the shared notifier's rings and drains (through a `SharedFdView`) and its
//! `try_read`/`try_write`/`read_timeout`. Every non-blocking call must return within
//! [`AT_ONCE`] and every timed call within its timeout plus [`SLACK`] (bounds with slack for
//! a loaded 2-core machine; the bug they catch is a call that never returns). Conservation
//! is exact: every unit written is read back, by amount, on every notifier.
//!
//! `stray_ringing_dying_peer`: round after round, a forked child receives the
//! `SharedNotifier` (`recv` over a `UnixStream`) and, as fast as it can, writes the count,
//! reads it (`try_read`, `read_timeout`), rings the doorbell with raw `write(2)`s that do not
//! touch the count, and drains it with raw `read(2)`s; it is SIGKILLed at a random point of
//! each round. The honest side meanwhile waits with `read_async` under `tokio::time::timeout`
//! on a current-thread runtime beside a ticker task, with `read_timeout`, and with
//! `write_timeout` near `LIMIT`: no call may block past its deadline plus [`SLACK`], an
//! async wait of 20 ms or more in which the ticker never ran must not have spent half of
//! it on CPU (a thread merely descheduled on a loaded machine polls its finished
//! `block_on` future before the ticker: such waits are counted and printed), and after each kill an idle
//! window (count 0, the doorbell as the dead child left it, or rung by us in one round of
//! four: the "killed between emptying the count and draining the doorbell" state) must cost
//! the honest thread less than a third of the window in CPU (`CLOCK_THREAD_CPUTIME_ID`); a
//! window over that bound is run again with a stray ring, and [`IDLE_TRIES`] in a row fail
//! (a spinning wait spins every time; one window's clock can include a loaded VM's steal).
//!
//! What is exact and what is bounded in the second scenario: the honest side's writes and
//! reads are counted exactly; the child reports each count operation through a pipe, an
//! intent record before it and a result record (the amount) after it, each one `write(2)`.
//! At the end of every round the honest side drains the count, so each round's ledger
//! `written - read` must be 0 — except for the one operation the SIGKILL may have cut
//! between its two records. A cut `try_write(k)` makes the ledger `0` or `-k`: still exact
//! (one of two values). A cut read makes it `x >= 0`, where `x` is what that read took,
//! unknown to anyone: those rounds are bounded (sign only), and the test counts them and
//! prints their total.
//!
//! Short mode: about 2 s per scenario. Long mode: `EVFD_TORTURE_SECS` (default 300) each.

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier, SharedNotifier, LIMIT};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};

use crate::harness::{bounded, long_mode, serial, Rng, OPS, UNITS_CHECKED};
use crate::shared_util::{doorbell_of, fork_child, thread_cpu};

/// A non-blocking call returns within this (it returns at once; this is load slack).
const AT_ONCE: Duration = Duration::from_millis(500);
/// A timed call returns within its timeout plus this.
const SLACK: Duration = Duration::from_millis(500);

/// Idle windows in a row over the CPU bound that fail `stray_ringing_dying_peer`.
const IDLE_TRIES: usize = 3;

fn secs() -> Duration {
    if long_mode() {
        Duration::from_secs(
            std::env::var("EVFD_TORTURE_SECS")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(300),
        )
    } else {
        Duration::from_secs(2)
    }
}

/// The slowest call seen, and how far past its deadline a timed call came back.
#[derive(Default)]
struct Lat {
    at_once: Duration,
    overrun: Duration,
    calls: u64,
}

impl Lat {
    /// Run a non-blocking call and check that it returned at once.
    fn now<T>(&mut self, what: &str, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        let took = t.elapsed();
        assert!(took <= AT_ONCE, "{what}: a non-blocking call took {took:?}");
        self.at_once = self.at_once.max(took);
        self.calls += 1;
        r
    }
    /// Run a call with timeout `to` and check that it came back on time.
    fn timed<T>(&mut self, what: &str, to: Duration, f: impl FnOnce() -> T) -> T {
        let t = Instant::now();
        let r = f();
        let took = t.elapsed();
        assert!(
            took <= to + SLACK,
            "{what}: a call with timeout {to:?} took {took:?}"
        );
        self.overrun = self.overrun.max(took.saturating_sub(to));
        self.calls += 1;
        r
    }
}

fn would_block<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    let e = r.expect_err(what);
    assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{what}: {e}");
}

fn timed_out<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    let e = r.expect_err(what);
    assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{what}: {e}");
}

#[test]
fn nonblock_flipping_peer() {
    let _g = serial();
    let len = secs();
    bounded(
        "peer: O_NONBLOCK flipper",
        len + Duration::from_secs(120),
        move || {
            // An eventfd made blocking, adopted; the peer holds a duplicate.
            let raw = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
            let k = KernelNotifier::from_owned_fd(raw, Mode::Counter).unwrap();
            let auto = KernelNotifier::new(Mode::AutoReset).unwrap();
            let ep = Epoll::new();
            ep.add(&auto, Events::IN, 7).unwrap();
            let n = Notifier::new();
            let v = n.fd_view().unwrap();
            let s = SharedNotifier::new(Mode::Counter).unwrap();
            let sv = s.fd_view().unwrap(); // a doorbell consumer: edges ring and drain
            let peer_fds: Vec<OwnedFd> = vec![
                k.as_fd().try_clone_to_owned().unwrap(),
                auto.as_fd().try_clone_to_owned().unwrap(),
                v.as_fd().try_clone_to_owned().unwrap(),
                doorbell_of(&s),
            ];
            let stop = Arc::new(AtomicBool::new(false));
            let flips = Arc::new(AtomicU64::new(0));
            let mut flipper = Some(thread::spawn({
                let (stop, flips) = (Arc::clone(&stop), Arc::clone(&flips));
                move || {
                    while !stop.load(SeqCst) {
                        for fd in &peer_fds {
                            let fl = fcntl_getfl(fd).unwrap();
                            fcntl_setfl(fd, fl ^ OFlags::NONBLOCK).unwrap();
                        }
                        flips.fetch_add(peer_fds.len() as u64, SeqCst);
                    }
                    // Leave every description blocking: the worst case for what follows.
                    for fd in &peer_fds {
                        let fl = fcntl_getfl(fd).unwrap();
                        fcntl_setfl(fd, fl - OFlags::NONBLOCK).unwrap();
                    }
                }
            }));
            let mut r = Rng(0x9e37_79b9_7f4a_7c15 ^ u64::from(std::process::id()));
            let mut lat = Lat::default();
            let (mut written, mut read) = (0u128, 0u128);
            let mut evs = [Event::default(); 4];
            let end = Instant::now() + len;
            let mut rounds = 0u64;
            // The last round runs after the flipper left every description blocking.
            let mut last = false;
            loop {
                if !last && Instant::now() >= end {
                    stop.store(true, SeqCst);
                    flipper.take().unwrap().join().unwrap();
                    last = true;
                }
                rounds += 1;
                let x = 1 + r.below(1000);
                let to = Duration::from_millis(1 + r.below(5));
                // The adopted kernel notifier.
                would_block("k.try_read at 0", lat.now("k.try_read", || k.try_read()));
                lat.now("k.write", || k.write(x).unwrap());
                written += u128::from(x);
                read += u128::from(lat.now("k.try_read", || k.try_read().unwrap()));
                let c = lat.now("k.consume at 0", || k.consume().unwrap());
                assert!(!c.contains(Events::IN), "k.consume at 0: {c:?}");
                timed_out(
                    "k.read_timeout",
                    lat.timed("k.read_timeout", to, || k.read_timeout(to)),
                );
                lat.now("k.write LIMIT", || k.write(LIMIT).unwrap());
                written += u128::from(LIMIT);
                would_block(
                    "k.try_write at LIMIT",
                    lat.now("k.try_write", || k.try_write(1)),
                );
                read += u128::from(lat.now("k.try_read", || k.try_read().unwrap()));
                // The AutoReset kernel notifier in an Epoll: the harvest's delivery reads it.
                lat.now("auto.write", || auto.write(x).unwrap());
                let got = lat.now("harvest", || {
                    ep.wait(&mut evs, Some(Duration::ZERO)).unwrap()
                });
                assert_eq!(got, 1, "the AutoReset kernel notifier was not delivered");
                assert_eq!(auto.count().unwrap(), 0, "the delivery did not reset it");
                written += u128::from(x);
                read += u128::from(x); // the delivery took it (count 0 checked above)
                let got = lat.now("harvest at 0", || {
                    ep.wait(&mut evs, Some(Duration::ZERO)).unwrap()
                });
                assert_eq!(
                    got, 0,
                    "a reset AutoReset kernel notifier was delivered again"
                );
                let got = lat.timed("harvest timed", to, || ep.wait(&mut evs, Some(to)).unwrap());
                assert_eq!(got, 0);
                // The fd view: its consume drains its fd.
                lat.now("n.write", || n.write(x).unwrap());
                written += u128::from(x);
                assert!(lat.now("v.consume", || v.consume()).contains(Events::IN));
                read += u128::from(lat.now("n.try_read", || n.try_read().unwrap()));
                assert!(!lat
                    .now("v.consume at 0", || v.consume())
                    .contains(Events::IN));
                // The shared notifier: each write from 0 rings the doorbell, each read to 0 drains it.
                lat.now("s.write", || s.write(x).unwrap());
                written += u128::from(x);
                assert!(lat
                    .now("sv.consume", || sv.consume().unwrap())
                    .contains(Events::IN));
                read += u128::from(lat.now("s.try_read", || s.try_read().unwrap()));
                would_block("s.try_read at 0", lat.now("s.try_read", || s.try_read()));
                timed_out(
                    "s.read_timeout",
                    lat.timed("s.read_timeout", to, || s.read_timeout(to)),
                );
                lat.now("s.write LIMIT", || s.write(LIMIT).unwrap());
                written += u128::from(LIMIT);
                would_block(
                    "s.try_write at LIMIT",
                    lat.now("s.try_write", || s.try_write(1)),
                );
                timed_out(
                    "s.write_timeout at LIMIT",
                    lat.timed("s.write_timeout", to, || s.write_timeout(1, to)),
                );
                read += u128::from(lat.now("s.try_read", || s.try_read().unwrap()));
                assert!(!lat
                    .now("sv.consume at 0", || sv.consume().unwrap())
                    .contains(Events::IN));
                if last {
                    break;
                }
            }
            assert_eq!(written, read, "units written != units read");
            assert_eq!(k.count().unwrap(), 0);
            assert_eq!((n.count(), s.count()), (0, 0));
            OPS.fetch_add(lat.calls, SeqCst);
            UNITS_CHECKED.fetch_add(u64::try_from(written).unwrap_or(u64::MAX), SeqCst);
            eprintln!(
                "peer O_NONBLOCK flipper: {:.0?}, {rounds} rounds, {} calls, {} flips, \
             {written} units written and read, slowest non-blocking call {:?}, \
             worst timed-call overrun {:?}",
                len,
                lat.calls,
                flips.load(SeqCst),
                lat.at_once,
                lat.overrun
            );
        },
    );
}

// ---- the stray-ringing, dying shared peer ----

/// Child pipe records: `[tag, value]`, one `write(2)` of 16 bytes each.
const INTENT_WRITE: u64 = 1;
const DONE_WRITE: u64 = 2;
const INTENT_READ: u64 = 3;
const DONE_READ: u64 = 4;

/// What the child does until it is killed. Runs in a fork child of a multi-threaded
/// process: it allocates nothing after `recv` (glibc's malloc is fork-safe; evfd's
/// `recv` takes no process-wide lock) and leaves only by being killed.
fn child_main(sock: &UnixStream, bell: BorrowedFd<'_>, report: BorrowedFd<'_>, seed: u64) -> i32 {
    let Ok(s) = SharedNotifier::recv(sock) else {
        return 3;
    };
    let rec = |tag: u64, v: u64| {
        let mut b = [0u8; 16];
        b[..8].copy_from_slice(&tag.to_ne_bytes());
        b[8..].copy_from_slice(&v.to_ne_bytes());
        // SAFETY: a valid fd and a 16-byte buffer; a pipe write of <= PIPE_BUF is atomic.
        let n = unsafe { libc::write(report.as_raw_fd(), b.as_ptr().cast(), 16) };
        if n != 16 {
            // SAFETY: ends the child at once (the parent sees the missing records).
            unsafe { libc::_exit(4) };
        }
    };
    let mut r = Rng(seed | 1);
    loop {
        match r.below(8) {
            0 | 1 => {
                let k = 1 + r.below(3);
                rec(INTENT_WRITE, k);
                let done = if s.try_write(k).is_ok() { k } else { 0 };
                rec(DONE_WRITE, done);
            }
            2 | 3 => {
                rec(INTENT_READ, 0);
                rec(DONE_READ, s.try_read().unwrap_or(0));
            }
            4 => {
                rec(INTENT_READ, 0);
                let got = s.read_timeout(Duration::from_micros(200)).unwrap_or(0);
                rec(DONE_READ, got);
            }
            5 | 6 => {
                // A stray ring: the doorbell says "ready", the count does not change.
                let _ = rustix::io::write(bell, &1u64.to_ne_bytes());
            }
            _ => {
                let mut b = [0u8; 8];
                let _ = rustix::io::read(bell, &mut b);
            }
        }
    }
}

/// The honest side's reading of one child's pipe.
#[derive(Default)]
struct Ledger {
    written: u128,
    read: u128,
    /// The last intent without its result: (tag, value).
    pending: Option<(u64, u64)>,
    buf: Vec<u8>,
    ops: u64,
}

impl Ledger {
    /// Take what is in the pipe now (its read end is non-blocking).
    fn drain(&mut self, fd: &OwnedFd) {
        let mut b = [0u8; 4096];
        loop {
            match rustix::io::read(fd, &mut b) {
                Ok(0) | Err(_) => break,
                Ok(n) => self.buf.extend_from_slice(&b[..n]),
            }
        }
        let whole = self.buf.len() / 16 * 16;
        for c in self.buf[..whole].chunks(16) {
            let tag = u64::from_ne_bytes(c[..8].try_into().unwrap());
            let v = u64::from_ne_bytes(c[8..].try_into().unwrap());
            match tag {
                INTENT_WRITE | INTENT_READ => {
                    assert!(self.pending.is_none(), "two intents in a row");
                    self.pending = Some((tag, v));
                }
                DONE_WRITE => {
                    assert_eq!(self.pending.take().map(|p| p.0), Some(INTENT_WRITE));
                    self.written += u128::from(v);
                    self.ops += 1;
                }
                DONE_READ => {
                    assert_eq!(self.pending.take().map(|p| p.0), Some(INTENT_READ));
                    self.read += u128::from(v);
                    self.ops += 1;
                }
                other => panic!("bad record tag {other}"),
            }
        }
        self.buf.drain(..whole);
    }
}

/// A forked child, SIGKILLed and reaped when dropped (a failing round leaves none behind).
struct Reap(libc::pid_t);

impl Reap {
    /// SIGKILL and reap it; its wait status.
    fn kill(&mut self) -> i32 {
        let mut status = 0;
        // SAFETY: our own child's pid, not yet reaped; SIGKILL wherever it is.
        assert_eq!(unsafe { libc::kill(self.0, libc::SIGKILL) }, 0);
        // SAFETY: reaps our own child.
        assert_eq!(unsafe { libc::waitpid(self.0, &mut status, 0) }, self.0);
        self.0 = 0;
        status
    }
}

impl Drop for Reap {
    fn drop(&mut self) {
        if self.0 > 0 {
            // SAFETY: as in `kill` (no assertion while unwinding).
            unsafe {
                libc::kill(self.0, libc::SIGKILL);
                libc::waitpid(self.0, std::ptr::null_mut(), 0);
            }
        }
    }
}

#[test]
fn stray_ringing_dying_peer() {
    let _g = serial();
    let len = secs();
    bounded(
        "peer: stray-ringing dying peer",
        len + Duration::from_secs(120),
        move || {
            let s = SharedNotifier::new(Mode::Counter).unwrap();
            let bell = doorbell_of(&s);
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let ticks = Arc::new(AtomicU64::new(0));
            rt.spawn({
                let ticks = Arc::clone(&ticks);
                async move {
                    loop {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                        ticks.fetch_add(1, SeqCst);
                    }
                }
            });
            let mut r = Rng(0xd1b5_4a32_d192_ed03 ^ u64::from(std::process::id()));
            let mut lat = Lat::default();
            let (mut rounds, mut exact, mut cut_writes, mut bounded_rounds) =
                (0u64, 0u64, 0u64, 0u64);
            let mut cut_read_total = 0u128;
            // Async waits of 20 ms or more in which the ticker never ran: with the thread
            // descheduled (a loaded machine) the runtime polls the finished `block_on` future
            // before the ticker, so that alone is no starvation; one that also burned at least
            // half its time in CPU is (a spin), and fails.
            let mut no_tick = 0u64;
            let starved = |n: &mut u64, none: bool, took: Duration, cpu: Duration| {
                if none && took >= Duration::from_millis(20) {
                    assert!(
                        cpu < took / 2,
                        "the ticker starved: {took:?} with {cpu:?} of CPU"
                    );
                    *n += 1;
                }
            };
            let (mut hw, mut hr, mut child_ops) = (0u128, 0u128, 0u64);
            let (mut async_waits, mut async_got, mut idle_cpu_max) = (0u64, 0u64, Duration::ZERO);
            let mut idle_retried = 0u64;
            let end = Instant::now() + len;
            while Instant::now() < end {
                rounds += 1;
                assert_eq!(s.count(), 0, "the count is 0 at the start of a round");
                let (a, b) = UnixStream::pair().unwrap();
                let (pr, pw) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC).unwrap();
                rustix::fs::fcntl_setfl(&pr, OFlags::NONBLOCK).unwrap();
                s.send(&a).unwrap(); // queued: the child's recv takes it
                let seed = r.next();
                let pid = fork_child(|| child_main(&b, bell.as_fd(), pw.as_fd(), seed));
                let mut child = Reap(pid);
                drop(pw);
                drop(b);
                let mut led = Ledger::default();
                let (mut w, mut rd) = (0u128, 0u128);
                let kill_at = Instant::now() + Duration::from_millis(r.below(40));
                loop {
                    let to = Duration::from_millis(1 + r.below(8));
                    match r.below(4) {
                        0 | 1 => {
                            // read_async under a timeout, beside the ticker.
                            let (t0, c0) = (ticks.load(SeqCst), thread_cpu());
                            let t = Instant::now();
                            let got = lat.timed("read_async", to, || {
                                rt.block_on(async {
                                    tokio::time::timeout(to, s.read_async()).await
                                })
                            });
                            async_waits += 1;
                            if let Ok(v) = got {
                                rd += u128::from(v.unwrap());
                                async_got += 1;
                            } else {
                                let (took, cpu) = (t.elapsed(), thread_cpu() - c0);
                                starved(&mut no_tick, ticks.load(SeqCst) == t0, took, cpu);
                            }
                        }
                        2 => match lat.timed("read_timeout", to, || s.read_timeout(to)) {
                            Ok(v) => rd += u128::from(v),
                            Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}"),
                        },
                        _ => {
                            // Near LIMIT: fill to LIMIT - 1 (if nobody raced us), then wait for room.
                            let fill = LIMIT - 1 - s.count().min(LIMIT - 1);
                            if lat.now("try_write fill", || s.try_write(fill)).is_ok() {
                                w += u128::from(fill);
                            }
                            match lat.timed("write_timeout", to, || s.write_timeout(2, to)) {
                                Ok(()) => w += 2,
                                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::TimedOut, "{e}"),
                            }
                            if let Ok(v) = lat.now("try_read", || s.try_read()) {
                                rd += u128::from(v);
                            }
                        }
                    }
                    led.drain(&pr);
                    if Instant::now() >= kill_at {
                        break;
                    }
                }
                let status = child.kill();
                assert!(
                    libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
                    "the child ended on its own: status {status:#x}"
                );
                led.drain(&pr);
                assert!(led.buf.is_empty(), "a torn record");
                // The idle window: count 0, the doorbell as the child left it (or rung).
                while let Ok(v) = s.try_read() {
                    rd += u128::from(v);
                }
                // A window over the bound is run again, with a stray ring (the hardest
                // state), up to IDLE_TRIES times: a read_async that spins does so every time,
                // while one window's CPU clock can also count a loaded VM's stolen time or a
                // burst of copy-on-write faults after another test's fork.
                let idle = Duration::from_millis(15);
                let mut over = Vec::new();
                loop {
                    if !over.is_empty() || r.below(4) == 0 {
                        rustix::io::write(&bell, &1u64.to_ne_bytes()).unwrap();
                    }
                    let (c0, t0, ti) = (thread_cpu(), ticks.load(SeqCst), Instant::now());
                    let got = lat.timed("idle read_async", idle, || {
                        rt.block_on(async { tokio::time::timeout(idle, s.read_async()).await })
                    });
                    let cpu = thread_cpu() - c0;
                    assert!(got.is_err(), "a read of an empty count completed: {got:?}");
                    starved(&mut no_tick, ticks.load(SeqCst) == t0, ti.elapsed(), cpu);
                    if cpu < idle / 3 {
                        idle_cpu_max = idle_cpu_max.max(cpu);
                        idle_retried += over.len() as u64;
                        break;
                    }
                    over.push(cpu);
                    assert!(
                        over.len() < IDLE_TRIES,
                        "an idle read_async burned {over:?} of CPU in {IDLE_TRIES} {idle:?} windows"
                    );
                }
                // The round's ledger (module docs).
                let ledger = (w + led.written) as i128 - (rd + led.read) as i128;
                match led.pending {
                    None => {
                        assert_eq!(ledger, 0, "round {rounds}: units lost or doubled");
                        exact += 1;
                    }
                    Some((INTENT_WRITE, k)) => {
                        assert!(
                            ledger == 0 || ledger == -i128::from(k),
                            "round {rounds}: ledger {ledger} with a cut write of {k}"
                        );
                        cut_writes += 1;
                        exact += 1;
                    }
                    Some(_) => {
                        assert!(
                            ledger >= 0,
                            "round {rounds}: ledger {ledger} with a cut read"
                        );
                        bounded_rounds += 1;
                        cut_read_total += ledger as u128;
                    }
                }
                hw += w;
                hr += rd;
                child_ops += led.ops;
            }
            OPS.fetch_add(lat.calls + child_ops, SeqCst);
            UNITS_CHECKED.fetch_add(exact, SeqCst);
            eprintln!(
                "peer stray-ringing dying child: {len:.0?}, {rounds} children SIGKILLed, \
             {child_ops} child count ops, {} honest calls ({async_waits} read_async, \
             {async_got} completed), honest units written {hw} read {hr}; {exact} rounds \
             exact ({cut_writes} with a cut write), {bounded_rounds} bounded (a cut read, \
             {cut_read_total} units in total), worst timed-call overrun {:?}, \
             idle-window CPU at most {idle_cpu_max:?} ({idle_retried} windows over the \
             bound run again), {no_tick} long waits without a \
             tick (descheduled, not spinning)",
                lat.calls, lat.overrun
            );
        },
    );
}
