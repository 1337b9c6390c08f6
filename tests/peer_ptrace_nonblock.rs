//! A peer that flips `O_NONBLOCK` at the worst moment, deterministically: "non-blocking
//! whenever evfd looks, blocking whenever evfd acts".
//!
//! `O_NONBLOCK` lives on the open file description, which a peer holding a dup of the fd
//! (another process, a VMM) shares and may change at any time (docs/semantics.md, "Shared
//! open file descriptions and O_NONBLOCK"). A peer flipping the flag in a loop
//! (`tests/torture`'s `nonblock_flipping_peer`) finds a bad interleaving only by luck. This
//! test makes the interleaving certain: the calls run in a forked child that the parent
//! traces with `ptrace(PTRACE_SYSCALL)`, and at the entry of every syscall the child makes
//! the parent (holding the same descriptions) sets the flag, except at the entry of a
//! read or write on one of the shared fds, where it clears it — and, before every other
//! read, reads the fd itself (a competing reader between evfd's look and its read: it
//! empties a Counter eventfd, takes one semaphore unit or one pipe word).
//!
//! A call that decides by `fcntl(F_GETFL)`, by a `poll(2)` followed by a plain `read(2)`,
//! or by the flag at all, blocks here for ever; the parent's watchdog turns that into a
//! failure. Each call must return within a bound, and every unit is
//! counted: written by the child = read by the child + taken by the parent + left at the
//! end.
//!
//! (The one window this cannot close is named in docs/semantics.md §6.4: a peer that fills
//! an eventfd to within `n` of the limit between evfd's `poll(2)` and its `write(2)`. The
//! kernel offers no per-call non-blocking eventfd write, so this peer does not do that.)
#![cfg(all(target_os = "linux", target_arch = "x86_64"))]

use std::io::{ErrorKind, Read, Write};
use std::os::fd::{AsFd, AsRawFd, RawFd};
use std::time::{Duration, Instant};

use evfd::halves::{self, ConsumerHalf, NotifierHalf};
use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier, SharedNotifier, LIMIT};

/// Bound on any one non-blocking call in the child (it runs traced: every syscall is two
/// stops and a few parent syscalls, so this is generous, and still far below "for ever").
const CALL_BOUND: Duration = Duration::from_secs(2);
/// Bound on a timed call: its timeout plus this.
const TIMED_SLACK: Duration = Duration::from_secs(2);
/// The whole child run.
const WATCHDOG: Duration = Duration::from_secs(30);

/// Syscalls that move data on an fd (the parent clears the flag at their entry).
const DATA_CALLS: [i64; 8] = [
    libc::SYS_read,
    libc::SYS_write,
    libc::SYS_readv,
    libc::SYS_writev,
    libc::SYS_pread64,
    libc::SYS_pwrite64,
    libc::SYS_preadv2,
    libc::SYS_pwritev2,
];

fn is_read(nr: i64) -> bool {
    matches!(
        nr,
        libc::SYS_read | libc::SYS_readv | libc::SYS_pread64 | libc::SYS_preadv2
    )
}

fn set_flag(fd: RawFd, nonblock: bool) {
    // SAFETY: not needed (libc fcntl on a raw fd number the parent owns a dup of).
    let fl = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    assert!(fl >= 0, "F_GETFL: {}", std::io::Error::last_os_error());
    let want = if nonblock {
        fl | libc::O_NONBLOCK
    } else {
        fl & !libc::O_NONBLOCK
    };
    if want != fl {
        // SAFETY: as above.
        assert_eq!(unsafe { libc::fcntl(fd, libc::F_SETFL, want) }, 0);
    }
}

/// One 8-byte read of a shared fd, as a competing reader makes it (a Counter eventfd's
/// count, one semaphore unit, one pipe word), with the flag set for it: the child is
/// stopped meanwhile, so nobody races it. 0 if there was nothing.
fn take_one(fd: RawFd) -> u64 {
    set_flag(fd, true);
    let mut buf = [0u8; 8];
    // SAFETY: reads into a stack buffer of its length.
    match unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) } {
        8 => u64::from_ne_bytes(buf),
        _ => 0,
    }
}

/// Empty a shared fd (what is left at the end): [`take_one`] until nothing comes.
fn take_all(fd: RawFd) -> u64 {
    let mut taken = 0;
    loop {
        match take_one(fd) {
            0 => return taken,
            v => taken += v,
        }
    }
}

/// A shared description the parent watches: the parent's own fd for it (to act, and to
/// recognise the child's syscalls on any fd of the same description: `kcmp`).
#[derive(Clone, Copy)]
struct Target {
    act: RawFd,
}

/// The evfd objects the child drives (the parent holds the same fds, by number).
struct Child {
    ctr: KernelNotifier,
    sem: KernelNotifier,
    auto: KernelNotifier,
    cons: ConsumerHalf,
    noti: NotifierHalf,
    mem: Notifier,
    view: evfd::FdView,
    shared: SharedNotifier,
    shared_view: evfd::SharedFdView,
}

/// Run `f`; an error naming `what` if it took longer than `bound`.
fn timed<T>(what: &str, bound: Duration, f: impl FnOnce() -> T) -> Result<T, String> {
    let t = Instant::now();
    let v = f();
    let took = t.elapsed();
    if took > bound {
        return Err(format!("{what}: took {took:?}, bound {bound:?}"));
    }
    Ok(v)
}

/// `Ok(Some(v))`, or `Ok(None)` for `WouldBlock`/`TimedOut`; any other error fails.
fn got<T>(what: &str, r: std::io::Result<T>) -> Result<Option<T>, String> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => Ok(None),
        Err(e) => Err(format!("{what}: unexpected error {e}")),
    }
}

const T20: Duration = Duration::from_millis(20);

impl Child {
    /// Every non-blocking and timed call, a few rounds; the report lines
    /// `written <name> <n>` / `read <name> <n>`, or the call that broke its bound.
    fn run(&self) -> Result<Vec<String>, String> {
        let mut wrote = [0u128; 5];
        let mut read = [0u128; 5];
        let ep = Epoll::new();
        ep.add(&self.auto, Events::IN, 1)
            .map_err(|e| e.to_string())?;
        let mut evs = [Event::default(); 4];
        let timed_bound = T20 + TIMED_SLACK;
        for round in 0..4 {
            // KernelNotifier, Counter (0) and Semaphore (1).
            for (i, k) in [&self.ctr, &self.sem].into_iter().enumerate() {
                if got(
                    "try_write",
                    timed("try_write(3)", CALL_BOUND, || k.try_write(3))?,
                )?
                .is_some()
                {
                    wrote[i] += 3;
                }
                read[i] += got("try_read", timed("try_read", CALL_BOUND, || k.try_read())?)?
                    .map_or(0, u128::from);
                read[i] += got(
                    "read_timeout",
                    timed("read_timeout", timed_bound, || k.read_timeout(T20))?,
                )?
                .map_or(0, u128::from);
                for _ in 0..4 {
                    match got(
                        "drain",
                        timed("try_read (drain)", CALL_BOUND, || k.try_read())?,
                    )? {
                        Some(v) => read[i] += u128::from(v),
                        None => break,
                    }
                }
                // Drained (nobody else writes): consume finds nothing, in time.
                let ev = timed("consume", CALL_BOUND, || k.consume())?
                    .map_err(|e| format!("consume: {e}"))?;
                if ev.contains(Events::IN) {
                    return Err(format!("consume found IN after a drain (round {round})"));
                }
            }
            // At the limit: try_write and write_timeout refuse in time. (The fill fits, so
            // it does not wait even with the flag cleared at its entry.)
            let room = LIMIT - self.ctr.count().map_err(|e| e.to_string())?;
            timed("fill", CALL_BOUND, || self.ctr.try_write(room))?
                .map_err(|e| format!("fill: {e}"))?;
            wrote[0] += u128::from(room);
            for n in [1, 2] {
                let r = timed(&format!("try_write({n}) at the limit"), CALL_BOUND, || {
                    self.ctr.try_write(n)
                })?;
                if got("try_write at the limit", r)?.is_some() {
                    return Err(format!("try_write({n}) at the limit wrote"));
                }
                let r = timed(
                    &format!("write_timeout({n}) at the limit"),
                    timed_bound,
                    || self.ctr.write_timeout(n, T20),
                )?;
                if got("write_timeout at the limit", r)?.is_some() {
                    return Err(format!("write_timeout({n}) at the limit wrote"));
                }
            }
            for _ in 0..4 {
                match got(
                    "drain",
                    timed("try_read (drain)", CALL_BOUND, || self.ctr.try_read())?,
                )? {
                    Some(v) => read[0] += u128::from(v),
                    None => break,
                }
            }

            // AutoReset in an Epoll: the harvest's delivery reads the eventfd.
            if got(
                "auto",
                timed("auto try_write", CALL_BOUND, || self.auto.try_write(2))?,
            )?
            .is_some()
            {
                wrote[2] += 2;
            }
            timed("Epoll::wait(0)", CALL_BOUND, || {
                ep.wait(&mut evs, Some(Duration::ZERO))
            })?
            .map_err(|e| format!("wait(0): {e}"))?;
            let n = timed("Epoll::wait(20 ms)", timed_bound, || {
                ep.wait(&mut evs, Some(T20))
            })?
            .map_err(|e| format!("wait(20 ms): {e}"))?;
            if n != 0 {
                return Err(format!("wait(20 ms) after the delivery returned {n}"));
            }

            // The pipe halves (Counter): the consumer reads a pipe's read end.
            if got(
                "noti",
                timed("NotifierHalf::try_write", CALL_BOUND, || {
                    self.noti.try_write(4)
                })?,
            )?
            .is_some()
            {
                wrote[3] += 4;
            }
            read[3] += got(
                "cons",
                timed("ConsumerHalf::try_read", CALL_BOUND, || {
                    self.cons.try_read()
                })?,
            )?
            .map_or(0, u128::from);
            read[3] += got(
                "cons",
                timed("ConsumerHalf::read_timeout", timed_bound, || {
                    self.cons.read_timeout(T20)
                })?,
            )?
            .map_or(0, u128::from);
            let ev = timed("ConsumerHalf::consume", CALL_BOUND, || self.cons.consume())?
                .map_err(|e| format!("ConsumerHalf::consume: {e}"))?;
            if ev.contains(Events::IN) {
                return Err("ConsumerHalf::consume found IN after a drain".into());
            }

            // An fd view's doorbell: rung by the write, drained by consume.
            self.mem.write(1).map_err(|e| e.to_string())?;
            timed("FdView::consume", CALL_BOUND, || self.view.consume())?;
            let v = self
                .mem
                .try_read()
                .map_err(|e| format!("in-memory read: {e}"))?;
            if v != 1 {
                return Err(format!(
                    "in-memory count {v} after one write (round {round})"
                ));
            }
            timed("FdView::consume (empty)", CALL_BOUND, || {
                self.view.consume()
            })?;

            // SharedNotifier with a doorbell consumer: writes ring the doorbell, reads
            // drain it (the peer takes the ring first every other time).
            let sh = &self.shared;
            if got(
                "shared",
                timed("SharedNotifier::try_write", CALL_BOUND, || sh.try_write(2))?,
            )?
            .is_some()
            {
                wrote[4] += 2;
            }
            read[4] += got(
                "shared",
                timed("SharedNotifier::try_read", CALL_BOUND, || sh.try_read())?,
            )?
            .map_or(0, u128::from);
            read[4] += got(
                "shared",
                timed("SharedNotifier::read_timeout", timed_bound, || {
                    sh.read_timeout(T20)
                })?,
            )?
            .map_or(0, u128::from);
            let ev = timed("SharedNotifier::consume", CALL_BOUND, || sh.consume())?
                .map_err(|e| format!("SharedNotifier::consume: {e}"))?;
            if ev.contains(Events::IN) {
                return Err("SharedNotifier::consume found IN after a drain".into());
            }
            let room = LIMIT - sh.count();
            timed("shared fill", CALL_BOUND, || sh.try_write(room))?
                .map_err(|e| format!("shared fill: {e}"))?;
            wrote[4] += u128::from(room);
            if got(
                "shared at the limit",
                timed("SharedNotifier::try_write at the limit", CALL_BOUND, || {
                    sh.try_write(1)
                })?,
            )?
            .is_some()
            {
                return Err("SharedNotifier::try_write(1) at the limit wrote".into());
            }
            if got(
                "shared at the limit",
                timed(
                    "SharedNotifier::write_timeout at the limit",
                    timed_bound,
                    || sh.write_timeout(1, T20),
                )?,
            )?
            .is_some()
            {
                return Err("SharedNotifier::write_timeout(1) at the limit wrote".into());
            }
            timed("SharedFdView::consume", CALL_BOUND, || {
                self.shared_view.consume()
            })?
            .map_err(|e| format!("SharedFdView::consume: {e}"))?;
            read[4] += got(
                "shared",
                timed("SharedNotifier::try_read (drain)", CALL_BOUND, || {
                    sh.try_read()
                })?,
            )?
            .map_or(0, u128::from);
            timed("SharedFdView::consume (empty)", CALL_BOUND, || {
                self.shared_view.consume()
            })?
            .map_err(|e| format!("SharedFdView::consume: {e}"))?;
        }
        let mut out = Vec::new();
        out.push(format!("left shared {}", self.shared.count()));
        for (i, name) in ["ctr", "sem", "auto", "pipe", "shared"]
            .into_iter()
            .enumerate()
        {
            out.push(format!("written {name} {}", wrote[i]));
            out.push(format!("read {name} {}", read[i]));
        }
        Ok(out)
    }
}

/// The parent's side: trace `pid` (stopped at its first stop) until it exits; at each syscall entry set or clear the
/// flag on every target, and take what a read would find. Returns what it took per fd.
fn trace(pid: libc::pid_t, targets: &[Target]) -> Result<Vec<(RawFd, u128)>, String> {
    let mut taken: Vec<(RawFd, u128)> = targets.iter().map(|t| (t.act, 0)).collect();
    let mut status = 0;
    // SAFETY: PTRACE_SETOPTIONS on our stopped tracee.
    let r = unsafe {
        libc::ptrace(
            libc::PTRACE_SETOPTIONS,
            pid,
            0,
            libc::PTRACE_O_TRACESYSGOOD | libc::PTRACE_O_EXITKILL,
        )
    };
    assert_eq!(
        r,
        0,
        "PTRACE_SETOPTIONS: {}",
        std::io::Error::last_os_error()
    );
    let mut sig = 0;
    let mut stops = 0u64;
    let mut flips = 0u64;
    // Reads of each target seen: the parent reads the fd before the 1st, 3rd, ..., so the
    // child's reads race a competing reader half the time.
    let mut reads = vec![0u64; targets.len()];
    loop {
        // SAFETY: resume the stopped tracee to its next syscall stop.
        unsafe { libc::ptrace(libc::PTRACE_SYSCALL, pid, 0, sig) };
        sig = 0;
        // SAFETY: as above.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::__WALL) };
        if r != pid {
            return Err(format!("waitpid: {}", std::io::Error::last_os_error()));
        }
        if libc::WIFEXITED(status) {
            if libc::WEXITSTATUS(status) != 0 {
                return Err(format!("child exited with {}", libc::WEXITSTATUS(status)));
            }
            eprintln!("tracer: {stops} syscall stops, {flips} flag changes");
            return Ok(taken);
        }
        if libc::WIFSIGNALED(status) {
            return Err(format!(
                "child killed by signal {} (the watchdog: a call blocked)",
                libc::WTERMSIG(status)
            ));
        }
        if !libc::WIFSTOPPED(status) {
            continue;
        }
        let stopsig = libc::WSTOPSIG(status);
        if stopsig != (libc::SIGTRAP | 0x80) {
            sig = stopsig; // a real signal: deliver it
            continue;
        }
        stops += 1;
        // SAFETY: a zeroed register block, filled by PTRACE_GETREGS of our stopped tracee.
        let mut regs: libc::user_regs_struct = unsafe { std::mem::zeroed() };
        // SAFETY: as above.
        let r = unsafe { libc::ptrace(libc::PTRACE_GETREGS, pid, 0, &mut regs) };
        assert_eq!(r, 0);
        // A syscall-entry stop has -ENOSYS in rax; an exit stop has the result.
        if regs.rax as i64 != -(libc::ENOSYS as i64) {
            continue;
        }
        let nr = regs.orig_rax as i64;
        let fd = regs.rdi as i64 as RawFd;
        let data = DATA_CALLS.contains(&nr);
        for (i, t) in targets.iter().enumerate() {
            if data && same_file(pid, t.act, fd) {
                reads[i] += u64::from(is_read(nr));
                if is_read(nr) && reads[i] % 2 == 1 {
                    // A competing reader between evfd's look and its read (for a doorbell:
                    // the peer drains a ring evfd made).
                    let v = take_one(t.act);
                    taken[i].1 += u128::from(v);
                }
                set_flag(t.act, false);
            } else {
                set_flag(t.act, true);
            }
            flips += 1;
        }
    }
}

/// Whether the child's fd `child_fd` is the parent's `mine`: the same open file
/// description (`kcmp(KCMP_FILE)`, which tracing permits).
fn same_file(pid: libc::pid_t, mine: RawFd, child_fd: RawFd) -> bool {
    const KCMP_FILE: libc::c_long = 0;
    // SAFETY: a plain syscall comparing two fds of two processes; no memory is passed.
    let r = unsafe {
        libc::syscall(
            libc::SYS_kcmp,
            libc::getpid(),
            pid,
            KCMP_FILE,
            mine as libc::c_long,
            child_fd as libc::c_long,
        )
    };
    r == 0
}

/// `pidfd_getfd`: the parent's own fd for the child's fd `fd` (same open file description).
fn steal_fd(pid: libc::pid_t, fd: RawFd) -> RawFd {
    // SAFETY: plain syscalls on our own child (we trace it: ptrace-attach permission).
    let pidfd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) } as RawFd;
    assert!(
        pidfd >= 0,
        "pidfd_open: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: as above.
    let mine = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd, fd, 0) } as RawFd;
    assert!(
        mine >= 0,
        "pidfd_getfd: {}",
        std::io::Error::last_os_error()
    );
    // SAFETY: our pidfd, closed once.
    unsafe { libc::close(pidfd) };
    mine
}

#[test]
fn every_nonblocking_and_timed_call_returns_when_the_peer_flips_the_flag_at_the_worst_moment() {
    let ctr = KernelNotifier::new(Mode::Counter).unwrap();
    let sem = KernelNotifier::new(Mode::Semaphore).unwrap();
    let auto = KernelNotifier::new(Mode::AutoReset).unwrap();
    let (cons, noti) = halves::pipe(Mode::Counter).unwrap();
    let shared = SharedNotifier::new(Mode::Counter).unwrap();
    // After fork the parent holds the same fds (same numbers, same open file
    // descriptions): it recognises the child's syscalls and flips the flag by them.
    let target = |fd: RawFd| Target { act: fd };
    let mut targets = vec![
        target(ctr.as_fd().as_raw_fd()),
        target(sem.as_fd().as_raw_fd()),
        target(auto.as_fd().as_raw_fd()),
        target(cons.as_fd().as_raw_fd()),
    ];

    let (mut rd, mut wr) = std::os::unix::net::UnixStream::pair().unwrap();
    // SAFETY: the child runs only the scenario and leaves with `_exit`, never returning
    // into the test harness.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
    if pid == 0 {
        drop(rd);
        // An in-memory notifier is the child's own (one made before fork is not usable
        // in the child); its fd view's doorbell number goes to the parent first.
        let mem = Notifier::new();
        let view = mem.fd_view().unwrap();
        let _ = wr.write_all(&view.as_fd().as_raw_fd().to_ne_bytes());
        // The SharedNotifier's doorbell is used once a doorbell consumer is registered.
        let shared_view = shared.fd_view().unwrap();
        let _ = wr.write_all(&shared_view.as_fd().as_raw_fd().to_ne_bytes());
        // SAFETY: become traced, then stop until the parent has set its options. A
        // system that forbids tracing makes the test skip (exit 77).
        unsafe {
            if libc::ptrace(libc::PTRACE_TRACEME, 0, 0, 0) != 0 {
                libc::_exit(77);
            }
            libc::raise(libc::SIGSTOP);
        }
        let child = Child {
            ctr,
            sem,
            auto,
            cons,
            noti,
            mem,
            view,
            shared,
            shared_view,
        };
        // A panic must not unwind into the harness's copy in this process.
        let (code, text) =
            match std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| child.run())) {
                Ok(Ok(lines)) => (0, lines.join("\n")),
                Ok(Err(e)) => (1, format!("FAIL {e}")),
                Err(_) => (2, "FAIL the scenario panicked".to_string()),
            };
        let _ = wr.write_all(text.as_bytes());
        drop(wr);
        // SAFETY: leave the forked child without running the harness.
        unsafe { libc::_exit(code) };
    }
    drop(wr);
    let mut status = 0;
    // SAFETY: waitpid on our own child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    if libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 77 {
        eprintln!("SKIPPED: ptrace(PTRACE_TRACEME) is refused here (a seccomp or Yama policy)");
        return;
    }
    assert!(
        libc::WIFSTOPPED(status),
        "the child did not stop for the tracer: {status:#x}"
    );
    // The child's own descriptions: its fd view's doorbell, and the SharedNotifier's
    // doorbell (through the child's SharedFdView, a dup of it).
    for _ in 0..2 {
        let mut num = [0u8; 4];
        rd.read_exact(&mut num).unwrap();
        targets.push(Target {
            act: steal_fd(pid, RawFd::from_ne_bytes(num)),
        });
    }

    // The watchdog: a blocked call never ends the scenario; kill the child then.
    let done = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let d2 = done.clone();
    std::thread::spawn(move || {
        let t = Instant::now();
        while t.elapsed() < WATCHDOG {
            if d2.load(std::sync::atomic::Ordering::SeqCst) {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        // SAFETY: kill our own (traced) child.
        unsafe { libc::kill(pid, libc::SIGKILL) };
    });
    let result = trace(pid, &targets);
    done.store(true, std::sync::atomic::Ordering::SeqCst);
    let mut text = String::new();
    let _ = rd.read_to_string(&mut text);
    let taken = match result {
        Ok(t) => t,
        Err(e) => panic!("{e}; the child said: {text:?}"),
    };
    assert!(!text.starts_with("FAIL"), "{text}");
    eprintln!("child: {}", text.replace('\n', ", "));
    eprintln!(
        "taken by the peer (ctr, sem, auto, pipe, fd view rings, shared doorbell rings): {:?}",
        taken.iter().map(|t| t.1).collect::<Vec<_>>()
    );
    let num = |key: &str| -> u128 {
        text.lines()
            .find_map(|l| {
                l.strip_prefix(key)
                    .map(|v| v.trim().parse::<u128>().unwrap())
            })
            .unwrap_or_else(|| panic!("no '{key}' in the child's report: {text}"))
    };
    for (i, name) in [(0usize, "ctr"), (1, "sem"), (3, "pipe")] {
        let written = num(&format!("written {name} "));
        let read = num(&format!("read {name} "));
        let rest = take_all(targets[i].act);
        assert!(written > 0, "{name}: the child wrote nothing");
        assert_eq!(
            written,
            read + taken[i].1 + u128::from(rest),
            "{name}: written {written} != read {read} + taken by the peer {} + left {rest}",
            taken[i].1
        );
    }
    // SharedNotifier: the peer only took doorbell rings; the units are in the region.
    let written = num("written shared ");
    let read = num("read shared ");
    let rest = num("left shared ");
    assert!(written > 0, "shared: the child wrote nothing");
    assert_eq!(
        written,
        read + rest,
        "shared: written {written} != read {read} + left {rest}"
    );
    assert_eq!(
        u128::from(shared.count()),
        rest,
        "shared: the parent sees another count"
    );
    // AutoReset: what the parent did not take, the deliveries consumed; none left a count.
    assert_eq!(
        take_all(targets[2].act),
        0,
        "an AutoReset delivery left a count"
    );
    drop((ctr, sem, auto, cons, noti, shared));
}
