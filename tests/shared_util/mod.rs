//! A peer process for the `SharedNotifier` tests: the test binary re-executed with
//! `EVFD_PEER=<socket path>`, running only its `peer_entry` test, which serves commands
//! (one line each, one reply line each) over a Unix socket.
#![allow(dead_code)]

use std::io::{self, BufRead, BufReader, IoSlice, IoSliceMut, Write};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::os::unix::net::{UnixListener, UnixStream};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use evfd::{Events, KernelNotifier, Mode, SharedNotifier};

/// Every blocking socket read in these tests gives up after this.
pub const WATCHDOG: Duration = Duration::from_secs(30);

/// A small deterministic RNG (xorshift64*).
#[derive(Clone)]
pub struct Rng(pub u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1)
    }
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub fn mode_name(m: Mode) -> &'static str {
    match m {
        Mode::Counter => "counter",
        Mode::Semaphore => "semaphore",
        Mode::AutoReset => "autoreset",
        _ => "other",
    }
}

pub fn parse_mode(s: &str) -> Mode {
    match s {
        "counter" => Mode::Counter,
        "semaphore" => Mode::Semaphore,
        "autoreset" => Mode::AutoReset,
        _ => panic!("mode {s}"),
    }
}

/// "ok V" or "err Kind".
pub fn fmt(r: io::Result<u64>) -> String {
    match r {
        Ok(v) => format!("ok {v}"),
        Err(e) => format!("err {:?}", e.kind()),
    }
}

fn unit(r: io::Result<()>) -> io::Result<u64> {
    r.map(|()| 0)
}

fn bits(e: Events) -> u64 {
    u64::from(e.bits())
}

fn arg(a: &[&str], i: usize) -> u64 {
    a.get(i).expect("argument").parse().expect("number")
}

/// One operation on a shared notifier, as a reply string.
pub fn op_shared(s: &SharedNotifier, a: &[&str]) -> String {
    fmt(match a[0] {
        "tw" => unit(s.try_write(arg(a, 1))),
        "w" => unit(s.write(arg(a, 1))),
        "wt" => unit(s.write_timeout(arg(a, 1), Duration::from_millis(arg(a, 2)))),
        "notify" => unit(s.notify()),
        "tr" => s.try_read(),
        "r" => s.read(),
        "rt" => s.read_timeout(Duration::from_millis(arg(a, 1))),
        "poll" => Ok(bits(s.poll(Events::IN | Events::OUT))),
        "count" => Ok(s.count()),
        "consume" => s.consume().map(bits),
        other => panic!("op {other}"),
    })
}

/// The same operation on a kernel eventfd.
pub fn op_kernel(k: &KernelNotifier, a: &[&str]) -> String {
    fmt(match a[0] {
        "tw" => unit(k.try_write(arg(a, 1))),
        "w" => unit(k.write(arg(a, 1))),
        "notify" => unit(k.notify()),
        "tr" => k.try_read(),
        "r" => k.read(),
        "rt" => k.read_timeout(Duration::from_millis(arg(a, 1))),
        "poll" => Ok(bits(k.poll(Events::IN | Events::OUT))),
        "count" => k.count(),
        "consume" => k.consume().map(bits),
        other => panic!("op {other}"),
    })
}

/// Send `payload` with `fds` attached (raw `SCM_RIGHTS`, for crafted messages).
pub fn send_fds(sock: &UnixStream, payload: &[u8], fds: &[BorrowedFd<'_>]) {
    use rustix::net::{sendmsg, SendAncillaryBuffer, SendAncillaryMessage, SendFlags};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    assert!(control.push(SendAncillaryMessage::ScmRights(fds)));
    let n = sendmsg(
        sock,
        &[IoSlice::new(payload)],
        &mut control,
        SendFlags::empty(),
    )
    .unwrap();
    assert_eq!(n, payload.len());
}

/// Receive up to 8 fds and the payload (raw `SCM_RIGHTS`).
pub fn recv_fds(sock: &UnixStream, payload: &mut [u8]) -> Vec<OwnedFd> {
    use rustix::net::{recvmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(8))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    recvmsg(
        sock,
        &mut [IoSliceMut::new(payload)],
        &mut control,
        RecvFlags::CMSG_CLOEXEC,
    )
    .unwrap();
    let mut fds = Vec::new();
    for m in control.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = m {
            fds.extend(it);
        }
    }
    fds
}

/// The raw doorbell of `s`, as a peer holding its message has it.
pub fn doorbell_of(s: &SharedNotifier) -> OwnedFd {
    let (a, b) = UnixStream::pair().unwrap();
    s.send(&a).unwrap();
    let mut payload = [0u8; 256];
    doorbell(recv_fds(&b, &mut payload))
}

/// This thread's CPU time (user + system).
pub fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid clock id and a valid out-pointer.
    let r = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(r, 0);
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// The doorbell among the fds of a received `SharedNotifier` message: the one eventfd.
pub fn doorbell(fds: Vec<OwnedFd>) -> OwnedFd {
    use std::os::fd::AsRawFd;
    fds.into_iter()
        .find(|fd| {
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd()))
                .unwrap_or_default()
                .contains("eventfd-count")
        })
        .expect("the message carries an eventfd doorbell")
}

static NEXT: AtomicU64 = AtomicU64::new(0);

/// A peer process, the command channel to it, and a second socket for fds (so that a
/// buffered command reader never swallows a message's ancillary data).
pub struct Peer {
    pub child: Child,
    /// Commands and replies, one line each.
    cmd: UnixStream,
    /// Where fds travel: `SharedNotifier::send(&peer.sock)`.
    pub sock: UnixStream,
    reader: BufReader<UnixStream>,
}

impl Peer {
    /// Re-execute this test binary as a peer (it runs only the test named `entry`).
    pub fn spawn(entry: &str) -> Peer {
        let path = std::env::temp_dir().join(format!(
            "evfd-peer-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_file(&path);
        let listener = UnixListener::bind(&path).unwrap();
        let child = Command::new(std::env::current_exe().unwrap())
            .args([entry, "--exact", "--nocapture", "--test-threads=1", "-q"])
            .env("EVFD_PEER", &path)
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        listener.set_nonblocking(true).unwrap();
        let start = Instant::now();
        let accept = || loop {
            match listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(WATCHDOG)).unwrap();
                    break s;
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    assert!(start.elapsed() < WATCHDOG, "peer did not connect");
                    std::thread::sleep(Duration::from_millis(1));
                }
                Err(e) => panic!("accept: {e}"),
            }
        };
        let cmd = accept();
        let sock = accept();
        let _ = std::fs::remove_file(&path);
        let reader = BufReader::new(cmd.try_clone().unwrap());
        Peer {
            child,
            cmd,
            sock,
            reader,
        }
    }

    /// Send one command line, return its reply line.
    pub fn cmd(&mut self, line: &str) -> String {
        self.send(line);
        self.reply()
    }

    pub fn send(&mut self, line: &str) {
        writeln!(self.cmd, "{line}").unwrap();
    }

    pub fn reply(&mut self) -> String {
        let mut s = String::new();
        self.reader.read_line(&mut s).unwrap();
        assert!(!s.is_empty(), "peer closed the channel");
        s.trim_end().to_string()
    }

    /// SIGKILL the peer and reap it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Peer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A new shared notifier, and a peer process (running the calling file's `peer_entry`
/// test) that has received it.
pub fn connected(mode: Mode, initial: u64) -> (SharedNotifier, Peer) {
    let s = SharedNotifier::builder()
        .mode(mode)
        .initial(initial)
        .build()
        .unwrap();
    let mut p = Peer::spawn("peer_entry");
    p.send("recv_shared");
    s.send(&p.sock).unwrap();
    assert_eq!(p.reply(), "ok");
    (s, p)
}

/// The peer's side. Does nothing unless this process was spawned by [`Peer::spawn`].
pub fn peer_main() {
    let Ok(path) = std::env::var("EVFD_PEER") else {
        return;
    };
    let cmd = UnixStream::connect(&path).unwrap();
    let sock = UnixStream::connect(&path).unwrap();
    cmd.set_read_timeout(Some(WATCHDOG)).unwrap();
    sock.set_read_timeout(Some(WATCHDOG)).unwrap();
    let mut reader = BufReader::new(cmd.try_clone().unwrap());
    let mut out = cmd;
    let mut shared: Option<SharedNotifier> = None;
    let mut kernel: Option<KernelNotifier> = None;
    let mut raw: Vec<OwnedFd> = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            std::process::exit(0);
        }
        let a: Vec<&str> = line.split_whitespace().collect();
        let reply = match a[0] {
            "recv_shared" => match SharedNotifier::recv(&sock) {
                Ok(s) => {
                    shared = Some(s);
                    "ok".to_string()
                }
                Err(e) => format!("err {:?}", e.kind()),
            },
            "recv_kernel" => {
                let mut p = [0u8; 1];
                let mut fds = recv_fds(&sock, &mut p);
                let k = KernelNotifier::from_owned_fd(fds.remove(0), parse_mode(a[1])).unwrap();
                kernel = Some(k);
                "ok".to_string()
            }
            "recv_raw" => {
                let mut p = [0u8; 8];
                raw = recv_fds(&sock, &mut p);
                format!("ok {}", raw.len())
            }
            "s" => op_shared(shared.as_ref().unwrap(), &a[1..]),
            "k" => op_kernel(kernel.as_ref().unwrap(), &a[1..]),
            "stats" => {
                let st = shared.as_ref().unwrap().stats();
                format!(
                    "ok {} {} {} {}",
                    st.futex_wakes + st.bell_wakes,
                    st.futex_waits + st.bell_waits,
                    st.rings,
                    st.drains
                )
            }
            "wait_sleepers" => {
                // Until the region shows (readers, writers, bells) >= the arguments.
                let s = shared.as_ref().unwrap();
                let want = (arg(&a, 1), arg(&a, 2), arg(&a, 3));
                let end = Instant::now() + WATCHDOG;
                loop {
                    let (r, w, b) = s.sleepers();
                    if (r >= want.0 && w >= want.1 && b >= want.2) || Instant::now() > end {
                        break;
                    }
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(2));
                let (r, w, b) = s.sleepers();
                format!("ok {r} {w} {b}")
            }
            "write_async_bg" => {
                // A thread of the peer awaits `write_async(a[1])` (until it completes or the
                // peer is killed); the reply comes at once.
                let s = shared.as_ref().unwrap().clone();
                let n = arg(&a, 1);
                std::thread::spawn(move || futures::executor::block_on(s.write_async(n)));
                "ok".to_string()
            }
            "reads" => {
                // Read until `a[1]` units were taken (each read under a `a[2]` ms timeout,
                // yielding every `a[3]` reads); reply with the units taken.
                let s = shared.as_ref().unwrap();
                let (want, ms, every) = (arg(&a, 1), arg(&a, 2), arg(&a, 3));
                let (mut got, mut i) = (0u64, 0u64);
                let mut err = None;
                while got < want {
                    match s.read_timeout(Duration::from_millis(ms)) {
                        Ok(v) => got += v,
                        Err(e) => {
                            err = Some(e);
                            break;
                        }
                    }
                    i += 1;
                    if i % every == 0 {
                        std::thread::sleep(Duration::from_micros(100));
                    }
                }
                match err {
                    None => format!("ok {got}"),
                    Some(e) => format!("err {:?} after {got}", e.kind()),
                }
            }
            "burst" => {
                // `a[1]` writes of 1, yielding every `a[2]`.
                let s = shared.as_ref().unwrap();
                let (n, every) = (arg(&a, 1), arg(&a, 2));
                for i in 0..n {
                    s.write(1).unwrap();
                    if i % every == 0 {
                        std::thread::sleep(Duration::from_micros(200));
                    }
                }
                "ok".to_string()
            }
            "wait_reader" => {
                // Until a reader (of either process) sleeps on the shared notifier.
                let s = shared.as_ref().unwrap();
                let end = Instant::now() + WATCHDOG;
                while s.sleepers().0 == 0 && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(2));
                format!("ok {}", s.sleepers().0)
            }
            "wait_edges" => {
                // Until the region counts at least `a[1]` edge-only doorbell consumers (a
                // pending `read_async` is one).
                let s = shared.as_ref().unwrap();
                let want = arg(&a, 1);
                let end = Instant::now() + WATCHDOG;
                while s.edge_consumers() < want && Instant::now() < end {
                    std::thread::sleep(Duration::from_millis(1));
                }
                std::thread::sleep(Duration::from_millis(2));
                format!("ok {}", s.edge_consumers())
            }
            "sleep" => {
                std::thread::sleep(Duration::from_millis(arg(&a, 1)));
                "ok".to_string()
            }
            "spin" => {
                // Acknowledge, then hammer the notifier until killed (or `a[1]` ms pass).
                writeln!(out, "ok").unwrap();
                let s = shared.as_ref().unwrap();
                let end = Instant::now() + Duration::from_millis(arg(&a, 1));
                let mut i = 0u64;
                while Instant::now() < end {
                    i += 1;
                    let _ = s.try_write(1);
                    if i % 3 == 0 {
                        let _ = s.try_read();
                    }
                    if i % 7 == 0 {
                        let _ = s.read_timeout(Duration::from_micros(50));
                    }
                    if i % 11 == 0 {
                        let _ = s.write_timeout(1, Duration::from_micros(50));
                    }
                }
                continue;
            }
            "scribble" => {
                // pwrite random words over the region (the header too with "hdr").
                let mut rng = Rng::new(arg(&a, 1));
                let end = Instant::now() + Duration::from_millis(arg(&a, 2));
                let low = if a[3] == "hdr" { 0 } else { 64 };
                let mut n = 0u64;
                while Instant::now() < end {
                    let off = low + rng.below((4096 - low) / 8) * 8;
                    let v = match rng.below(4) {
                        0 => 0,
                        1 => u64::MAX,
                        2 => rng.below(4),
                        _ => rng.next(),
                    };
                    rustix::io::pwrite(&raw[0], &v.to_ne_bytes(), off).unwrap();
                    n += 1;
                }
                format!("ok {n}")
            }
            "exit" => std::process::exit(0),
            other => panic!("peer: unknown command {other}"),
        };
        writeln!(out, "{reply}").unwrap();
    }
}

/// The fd's readability now (`poll(2)`, zero timeout).
pub fn readable(fd: impl AsFd) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(&fd, PollFlags::IN)];
    poll(
        &mut fds,
        Some(&Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        }),
    )
    .unwrap()
        == 1
}

/// A current-thread tokio runtime with timers (for `tokio::time::timeout` around futures).
pub fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
}

/// Reap the child `pid` (made by [`fork_child`]): its exit code, after asserting that it
/// exited normally.
pub fn wait_child(pid: libc::pid_t) -> i32 {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(
        libc::WIFEXITED(status),
        "child did not exit normally: {status:#x}"
    );
    libc::WEXITSTATUS(status)
}

/// Fork; the child runs `f` and `_exit`s with its result. The parent gets the child's pid.
pub fn fork_child(f: impl FnOnce() -> i32) -> libc::pid_t {
    // SAFETY: fork has no preconditions of its own; the child below runs only `f`, which
    // the callers keep to atomics and raw syscalls (no allocation, no lock another thread
    // could have held at the fork), and leaves with `_exit` (no destructors, no atexit
    // handlers).
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = f();
        // SAFETY: `_exit` is async-signal-safe and ends the child at once.
        unsafe { libc::_exit(code) };
    }
    pid
}
