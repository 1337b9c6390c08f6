//! A device process serving queues that a driver process kicks, as a vhost-user backend
//! serves a VMM: once with `SharedNotifier`s (AutoReset kicks, one `Epoll`), once with
//! kernel eventfds, the same loop. Prints the syscalls per request of both.
//!
//! ```sh
//! cargo run --release --example xproc_device
//! ```
//!
//! Each queue has a ring (here: a shared counter of posted requests, the stand-in for a
//! virtqueue's avail ring: memory, no syscall) and a kick; one call notifier carries the
//! completions back. The driver keeps up to `WINDOW` requests in flight. The device handles
//! every kicked queue and completes what it found; it sleeps in its `Epoll` only when no
//! queue has work.
//!
//! Syscalls are counted, not guessed: read/write-family syscalls by the kernel's per-thread
//! accounting (`/proc/thread-self/io`), futex calls by the crate ([`SharedNotifier::stats`]),
//! and one per `Epoll::wait` that found nothing ready (which costs the same in both variants).
//! `strace -f -c target/release/examples/xproc_device shared` (or `kernel`) counts every
//! syscall of both processes and their threads, as a cross-check.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, SharedNotifier};

const QUEUES: usize = 4;
const REQUESTS: u64 = 40_000;
const WINDOW: u64 = 32;
const LONG: Duration = Duration::from_secs(20);

/// This thread's read- and write-family syscalls so far, as the kernel counts them, minus
/// the probes' own reads.
struct RwCount {
    file: std::fs::File,
    probes: u64,
}

impl RwCount {
    fn new() -> RwCount {
        RwCount {
            file: std::fs::File::open("/proc/thread-self/io").expect("/proc/thread-self/io"),
            probes: 0,
        }
    }

    fn now(&mut self) -> u64 {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 512];
        let n = self.file.read_at(&mut buf, 0).unwrap();
        self.probes += 1;
        let text = std::str::from_utf8(&buf[..n]).unwrap();
        let field = |name: &str| -> u64 {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse().ok())
                .unwrap()
        };
        // Each probe is one read (pread) itself.
        field("syscr:") + field("syscw:") - self.probes
    }
}

fn fork(f: impl FnOnce() -> io::Result<()>) -> libc::pid_t {
    // SAFETY: this process is single-threaded at every fork below, so the child inherits no
    // lock held by another thread; it runs `f` and leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork: {}", io::Error::last_os_error());
    if pid == 0 {
        let code = match f() {
            Ok(()) => 0,
            Err(e) => {
                eprintln!("driver: {e}");
                1
            }
        };
        // SAFETY: ends the child at once, without running the parent's destructors twice.
        unsafe { libc::_exit(code) };
    }
    pid
}

fn reap(pid: libc::pid_t) {
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "driver failed"
    );
}

/// What a variant measured.
struct Run {
    device: u64,
    driver: u64,
    elapsed: Duration,
}

/// The syscalls of `s` that `/proc/thread-self/io` does not count: its futex calls, and the
/// `poll(2)` before each ring of its sleep bell (whose reads and writes are read/write
/// syscalls, counted there).
fn uncounted_syscalls(s: &SharedNotifier) -> u64 {
    let st = s.stats();
    st.futex_wakes + st.futex_waits + st.bell_wakes
}

fn shared_variant() -> io::Result<Run> {
    let (dev_sock, drv_sock) = UnixStream::pair()?;
    // The driver: a separate process that gets its notifiers over the socket.
    let pid = fork(move || {
        let mut sock = drv_sock;
        let mut kicks = Vec::new();
        let mut rings = Vec::new();
        for _ in 0..QUEUES {
            kicks.push(SharedNotifier::recv(&sock)?);
            rings.push(SharedNotifier::recv(&sock)?);
        }
        let call = SharedNotifier::recv(&sock)?;
        let mut rw = RwCount::new();
        let start = rw.now();
        let (mut sent, mut done) = (0u64, 0u64);
        while done < REQUESTS {
            while sent < REQUESTS && sent - done < WINDOW {
                let q = (sent % QUEUES as u64) as usize;
                rings[q].notify()?; // post the request
                kicks[q].notify()?; // kick the queue
                sent += 1;
            }
            done += call.read_timeout(LONG)?;
        }
        let futex: u64 = kicks
            .iter()
            .chain(&rings)
            .chain([&call])
            .map(uncounted_syscalls)
            .sum();
        let total = rw.now() - start + futex;
        sock.write_all(&total.to_ne_bytes())?;
        Ok(())
    });
    let kicks: Vec<SharedNotifier> = (0..QUEUES)
        .map(|_| SharedNotifier::new(Mode::AutoReset))
        .collect::<io::Result<_>>()?;
    let rings: Vec<SharedNotifier> = (0..QUEUES)
        .map(|_| SharedNotifier::new(Mode::Counter))
        .collect::<io::Result<_>>()?;
    let call = SharedNotifier::new(Mode::Counter)?;
    for q in 0..QUEUES {
        kicks[q].send(&dev_sock)?;
        rings[q].send(&dev_sock)?;
    }
    call.send(&dev_sock)?;

    let ep = Epoll::new();
    for (q, k) in kicks.iter().enumerate() {
        ep.add(k, Events::IN, q as u64)?;
    }
    let mut rw = RwCount::new();
    let start = rw.now();
    let t0 = Instant::now();
    let mut evs = [Event::default(); QUEUES];
    let (mut served, mut waits) = (0u64, 0u64);
    let mut kicked = [false; QUEUES];
    while served < REQUESTS {
        // Awake: look at every queue (memory only). A kick's delivery resets it.
        let mut found = 0;
        for q in 0..QUEUES {
            if std::mem::take(&mut kicked[q]) || kicks[q].consume()?.contains(Events::IN) {
                let n = rings[q].try_read().unwrap_or(0);
                if n > 0 {
                    found += n;
                    call.write(n)?;
                }
            }
        }
        served += found;
        if found == 0 && served < REQUESTS {
            // Nothing to do: sleep until a kick.
            waits += 1;
            let n = ep.wait(&mut evs, Some(LONG))?;
            for e in &evs[..n] {
                kicked[e.data as usize] = true;
            }
        }
    }
    let elapsed = t0.elapsed();
    let futex: u64 = kicks
        .iter()
        .chain(&rings)
        .chain([&call])
        .map(uncounted_syscalls)
        .sum();
    let device = rw.now() - start + futex + waits;
    let mut buf = [0u8; 8];
    (&dev_sock).read_exact(&mut buf)?;
    reap(pid);
    Ok(Run {
        device,
        driver: u64::from_ne_bytes(buf),
        elapsed,
    })
}

/// A blocking kernel eventfd (the driver's `read(2)` sleeps in the kernel: one syscall).
fn blocking_eventfd() -> io::Result<OwnedFd> {
    Ok(rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC,
    )?)
}

fn kernel_variant() -> io::Result<Run> {
    let (dev_sock, drv_sock) = UnixStream::pair()?;
    // Created before the fork: the driver inherits them (as a VMM hands fds to a backend).
    let kicks: Vec<KernelNotifier> = (0..QUEUES)
        .map(|_| KernelNotifier::new(Mode::AutoReset))
        .collect::<io::Result<_>>()?;
    let rings: Vec<SharedNotifier> = (0..QUEUES)
        .map(|_| SharedNotifier::new(Mode::Counter))
        .collect::<io::Result<_>>()?;
    let call = blocking_eventfd()?;
    let pid = {
        let (kicks, rings, call) = (&kicks, &rings, &call);
        fork(move || {
            let mut sock = drv_sock;
            let mut rw = RwCount::new();
            let start = rw.now();
            let (mut sent, mut done) = (0u64, 0u64);
            while done < REQUESTS {
                while sent < REQUESTS && sent - done < WINDOW {
                    let q = (sent % QUEUES as u64) as usize;
                    rings[q].notify()?;
                    kicks[q].notify()?; // write(2)
                    sent += 1;
                }
                let mut b = [0u8; 8];
                rustix::io::read(call, &mut b)?; // sleeps in the kernel when 0
                done += u64::from_ne_bytes(b);
            }
            let total = rw.now() - start;
            sock.write_all(&total.to_ne_bytes())?;
            Ok(())
        })
    };
    let ep = Epoll::new();
    for (q, k) in kicks.iter().enumerate() {
        ep.add(k, Events::IN, q as u64)?; // AutoReset: the harvest reads it
    }
    let mut rw = RwCount::new();
    let start = rw.now();
    let t0 = Instant::now();
    let mut evs = [Event::default(); QUEUES];
    let (mut served, mut waits) = (0u64, 0u64);
    while served < REQUESTS {
        waits += 1;
        let n = ep.wait(&mut evs, Some(LONG))?;
        for e in &evs[..n] {
            let m = rings[e.data as usize].try_read().unwrap_or(0);
            if m > 0 {
                served += m;
                rustix::io::write(&call, &m.to_ne_bytes())?;
            }
        }
    }
    let elapsed = t0.elapsed();
    let device = rw.now() - start + waits;
    let mut buf = [0u8; 8];
    (&dev_sock).read_exact(&mut buf)?;
    reap(pid);
    Ok(Run {
        device,
        driver: u64::from_ne_bytes(buf),
        elapsed,
    })
}

fn print(name: &str, r: &Run) {
    let per = |n: u64| n as f64 / REQUESTS as f64;
    println!(
        "{name:<16} {:>9.3} {:>9.3} {:>9.3} {:>10.0}",
        per(r.device),
        per(r.driver),
        per(r.device + r.driver),
        REQUESTS as f64 / r.elapsed.as_secs_f64()
    );
}

fn main() -> io::Result<()> {
    println!(
        "{QUEUES} queues, {REQUESTS} requests, up to {WINDOW} in flight; syscalls per request"
    );
    println!(
        "{:<16} {:>9} {:>9} {:>9} {:>10}",
        "variant", "device", "driver", "total", "req/s"
    );
    // `xproc_device shared` or `xproc_device kernel` runs one variant (e.g. under
    // `strace -f -c`, which counts every syscall of both processes).
    let only = std::env::args().nth(1);
    let want = |v: &str| only.as_deref().map_or(true, |o| o == v);
    let s = if want("shared") {
        let s = shared_variant()?;
        print("SharedNotifier", &s);
        Some(s)
    } else {
        None
    };
    let k = if want("kernel") {
        let k = kernel_variant()?;
        print("kernel eventfd", &k);
        Some(k)
    } else {
        None
    };
    if let (Some(s), Some(k)) = (s, k) {
        println!(
            "SharedNotifier makes {:.1}x fewer syscalls per request",
            (k.device + k.driver) as f64 / (s.device + s.driver).max(1) as f64
        );
    }
    Ok(())
}
