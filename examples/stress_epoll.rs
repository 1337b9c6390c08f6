//! evfd next to its kernel (or peer) twin, benchmark by benchmark (definitions and targets:
//! BENCHMARKS.md).
//!
//! ```sh
//! cargo run --release --example stress_epoll              # everything, ~2.5 min on 2 CPUs
//! cargo run --release --example stress_epoll -- --quick   # everything, ~25 s on 2 CPUs
//! cargo run --release --example stress_epoll -- --only doorbell
//! ```
//!
//! Benchmarks (`--only` names): `seed_pri`, `seed_in`, `stress`, `pingpong`, `epwait`,
//! `harvest`, `scale`, `async_pingpong`, `autoreset_loop`, `doorbell`. Progress goes to
//! stderr (`[i/n] <bench>`, a dot per row, seconds per bench); bad arguments print the
//! usage and exit with status 2.
//!
//! Each row runs evfd and its twin in the same process, interleaved (evfd, twin, evfd, ...),
//! each side for a fixed time (`--quick`: 150 ms × 3 repetitions; default 700 ms × 5), and
//! reports the medians and the spread of the repetitions ((max - min) / median). After a
//! table, one machine-readable line per row:
//!
//! ```text
//! row <bench> <variant> <threads> evfd=<v> twin=<v> ratio=<r> <unit>
//! ```
//!
//! `variant` has no spaces. `ratio` is always "bigger is better": evfd/twin for throughput
//! (ops/ms, rt/s, ...), twin/evfd for costs (µs, ns per event, syscalls/op). A cost row
//! where evfd is 0 and the twin is not prints `ratio=inf` (Rust's and Python's `float`
//! parse it); 0 against 0 is `ratio=1.000`.
//!
//! # `doorbell` rows (unit `syscalls/op`, except `awake_notify` in ns/op)
//!
//! A notifier with a fd view registered (LT) in a kernel epoll; the twin is a kernel
//! eventfd in the same epoll.
//!
//! - `awake_per_notify`: the consumer woke from `epoll_wait` and is busy (not draining)
//!   while a producer notifies N times: syscalls per notify (target 0; the twin's is 1).
//!   `awake_notify`: the producer's ns per notify in that state.
//! - `asleep_writes_per_edge`, `asleep_reads_per_edge`: per edge, the consumer sleeps in
//!   `epoll_wait` (checked in /proc), the producer notifies once, the consumer wakes and
//!   reads (evfd: `try_read` until `WouldBlock`; twin: one `read(2)`, which empties an
//!   eventfd). Syscalls of both threads per edge (target ≤ 1 + 1; the twin's is 1 + 1).
//!
//! Syscalls are counted, not timed or guessed: by the kernel's per-thread read/write
//! accounting (`/proc/thread-self/io`, `syscr`/`syscw`, each probe's own `pread` taken
//! out), which sees every read(2)/write(2)-family call of the producer and consumer
//! threads, doorbell or not — not futex or epoll_wait, which the twin makes too. Where that
//! file is missing, `evfd::doorbell_stats()` deltas (evfd) and the calls made (twin) are
//! used; either way a note under the table says which, and flags any disagreement.

use std::io::Write as _;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Notifier};
use rustix::event::{epoll, eventfd, EventfdFlags};

// ---------------------------------------------------------------- kernel twin helpers

fn kfd() -> OwnedFd {
    eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).expect("eventfd")
}
fn kwrite(fd: &OwnedFd, n: u64) {
    rustix::io::write(fd, &n.to_ne_bytes()).expect("eventfd write");
}
fn kread(fd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    match rustix::io::read(fd, &mut b) {
        Ok(_) => u64::from_ne_bytes(b),
        Err(rustix::io::Errno::AGAIN) => 0,
        Err(e) => panic!("eventfd read: {e}"),
    }
}
fn kepoll() -> OwnedFd {
    epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create")
}
fn kadd(ep: &OwnedFd, fd: impl AsFd, flags: epoll::EventFlags, data: u64) {
    epoll::add(ep, fd, epoll::EventData::new_u64(data), flags).expect("epoll_ctl");
}
fn kwait(
    ep: &OwnedFd,
    buf: &mut [std::mem::MaybeUninit<epoll::Event>],
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

// ---------------------------------------------------------------- measurement helpers

struct Cfg {
    /// Measured time of one run of one side of a row.
    dur: Duration,
    /// Repetitions of each (evfd, twin) pair, interleaved; the median is reported.
    reps: usize,
    /// `--quick`: smaller fixed-count workloads too (`doorbell`).
    quick: bool,
}

fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Run `n` threads of `body(thread_index, stop)` for `dur`; returns total ops / ms.
fn run_threads<F>(n: usize, dur: Duration, body: F) -> f64
where
    F: Fn(usize, &AtomicBool) -> u64 + Send + Sync + 'static,
{
    let body = Arc::new(body);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(n + 1));
    let hs: Vec<_> = (0..n)
        .map(|i| {
            let (body, stop, start) = (body.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                body(i, &stop)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    let total: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    total as f64 / t0.elapsed().as_secs_f64() / 1000.0
}

/// Loop `op` until `stop`, checking the flag every 256 iterations; returns the op count.
fn spin_ops(stop: &AtomicBool, mut op: impl FnMut()) -> u64 {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            op();
        }
        n += 256;
    }
    n
}

struct Row {
    bench: &'static str,
    variant: String,
    threads: usize,
    evfd: f64,
    twin: f64,
    unit: &'static str,
    higher_better: bool,
    evfd_spread: f64,
    twin_spread: f64,
}

impl Row {
    /// Bigger is better: evfd/twin, or twin/evfd for costs (latency, ns, syscalls). A cost
    /// of 0 against a positive twin is `inf` (printed so); 0 against 0 is 1.
    fn ratio(&self) -> f64 {
        let (num, den) = if self.higher_better {
            (self.evfd, self.twin)
        } else {
            (self.twin, self.evfd)
        };
        if num == den {
            1.0
        } else {
            num / den
        }
    }

    /// A row from the per-repetition samples of both sides: medians and spreads.
    fn from_samples(
        bench: &'static str,
        variant: &str,
        threads: usize,
        evfd: &[f64],
        twin: &[f64],
        unit: &'static str,
        higher_better: bool,
    ) -> Row {
        let (e, es) = median_spread(evfd);
        let (t, ts) = median_spread(twin);
        Row {
            bench,
            variant: variant.into(),
            threads,
            evfd: e,
            twin: t,
            unit,
            higher_better,
            evfd_spread: es,
            twin_spread: ts,
        }
    }
}

/// Median and relative spread ((max - min) / median; 0 when all samples are equal).
fn median_spread(v: &[f64]) -> (f64, f64) {
    let m = median(&mut v.to_vec());
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    let spread = if max == min { 0.0 } else { (max - min) / m };
    (m, spread)
}

/// Interleave evfd and twin `reps` times; medians and relative spread ((max-min)/median).
fn interleaved(
    reps: usize,
    mut evfd: impl FnMut() -> f64,
    mut twin: impl FnMut() -> f64,
) -> (f64, f64, f64, f64) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        a.push(evfd());
        b.push(twin());
    }
    let (ma, sa) = median_spread(&a);
    let (mb, sb) = median_spread(&b);
    (ma, mb, sa, sb)
}

// ---------------------------------------------------------------- benchmarks

/// seed 000: N threads share one epoll; each owns a notifier registered for `want`; loop
/// write(1); read().
fn seed(cfg: &Cfg, name: &'static str, want: Events, rows: &mut Vec<Row>) {
    for n in [1usize, 2, 4] {
        let dur = cfg.dur;
        let evfd_run = || {
            let ep = Epoll::new();
            let ns: Vec<Notifier> = (0..n).map(|_| Notifier::new()).collect();
            for (i, x) in ns.iter().enumerate() {
                ep.add(x, want, i as u64).unwrap();
            }
            let ns = Arc::new(ns);
            let keep = ep.clone();
            let r = run_threads(n, dur, move |i, stop| {
                let x = &ns[i];
                spin_ops(stop, || {
                    x.write(1).unwrap();
                    std::hint::black_box(x.read().unwrap());
                })
            });
            drop(keep);
            r
        };
        let kflags = epoll::EventFlags::from_bits_retain(want.bits());
        let twin_run = || {
            let ep = kepoll();
            let fds: Vec<OwnedFd> = (0..n).map(|_| kfd()).collect();
            for (i, f) in fds.iter().enumerate() {
                kadd(&ep, f, kflags, i as u64);
            }
            let fds = Arc::new(fds);
            run_threads(n, dur, move |i, stop| {
                let f = &fds[i];
                spin_ops(stop, || {
                    kwrite(f, 1);
                    std::hint::black_box(kread(f));
                })
            })
        };
        let (e, t, es, ts) = interleaved(cfg.reps, evfd_run, twin_run);
        rows.push(Row {
            bench: name,
            variant: "write+read".into(),
            threads: n,
            evfd: e,
            twin: t,
            unit: "ops/ms",
            higher_better: true,
            evfd_spread: es,
            twin_spread: ts,
        });
        progress();
    }
}

/// epwbench: 200 ready LT sources, one thread harvests all with timeout 0. ns per event.
fn harvest(cfg: &Cfg, rows: &mut Vec<Row>) {
    const R: usize = 200;
    let dur = cfg.dur;
    let evfd_run = || {
        let ep = Epoll::new();
        let ns: Vec<Notifier> = (0..R)
            .map(|_| Notifier::builder().initial(1).build().unwrap())
            .collect();
        for (i, x) in ns.iter().enumerate() {
            ep.add(x, Events::IN, i as u64).unwrap();
        }
        let mut buf = vec![Event::default(); R];
        let t0 = Instant::now();
        let mut evs = 0u64;
        while t0.elapsed() < dur {
            for _ in 0..64 {
                let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
                assert_eq!(n, R);
                evs += n as u64;
            }
        }
        t0.elapsed().as_nanos() as f64 / evs as f64
    };
    let twin_run = || {
        let ep = kepoll();
        let fds: Vec<OwnedFd> = (0..R).map(|_| kfd()).collect();
        for (i, f) in fds.iter().enumerate() {
            kwrite(f, 1);
            kadd(&ep, f, epoll::EventFlags::IN, i as u64);
        }
        let mut buf = vec![std::mem::MaybeUninit::uninit(); R];
        let t0 = Instant::now();
        let mut evs = 0u64;
        while t0.elapsed() < dur {
            for _ in 0..64 {
                let got = kwait(&ep, &mut buf, Some(0)).len();
                assert_eq!(got, R);
                evs += got as u64;
            }
        }
        t0.elapsed().as_nanos() as f64 / evs as f64
    };
    let (e, t, es, ts) = interleaved(cfg.reps, evfd_run, twin_run);
    rows.push(Row {
        bench: "harvest",
        variant: "200LT".into(),
        threads: 1,
        evfd: e,
        twin: t,
        unit: "ns/event",
        higher_better: false,
        evfd_spread: es,
        twin_spread: ts,
    });
    progress();
}

/// One epoll with R registered notifiers, one ready (LT): ns per wait. The "twin" of R is
/// the same run at R = 10, so the ratio is cost(10)/cost(R) (1.0 = flat).
fn scale(cfg: &Cfg, rows: &mut Vec<Row>) {
    let run = |r: usize, dur: Duration| {
        let ep = Epoll::new();
        let ns: Vec<Notifier> = (0..r).map(|_| Notifier::new()).collect();
        for (i, x) in ns.iter().enumerate() {
            ep.add(x, Events::IN, i as u64).unwrap();
        }
        ns[r / 2].notify().unwrap();
        let mut buf = [Event::default(); 8];
        let t0 = Instant::now();
        let mut waits = 0u64;
        while t0.elapsed() < dur {
            for _ in 0..256 {
                assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
            }
            waits += 256;
        }
        t0.elapsed().as_nanos() as f64 / waits as f64
    };
    for r in [1_000usize, 100_000] {
        let dur = cfg.dur;
        let (e, t, es, ts) = interleaved(cfg.reps, || run(r, dur), || run(10, dur));
        rows.push(Row {
            bench: "scale",
            variant: format!("R={r}_vs_R=10"),
            threads: 1,
            evfd: e,
            twin: t,
            unit: "ns/wait",
            higher_better: false,
            evfd_spread: es,
            twin_spread: ts,
        });
        progress();
    }
}

/// CPUs for (the timing thread, the echo thread); `None` = unpinned.
type Placement = (Option<usize>, Option<usize>);

/// The CPUs this process may run on, as it started (before any `pin`).
fn all_cpus() -> Option<&'static rustix::thread::CpuSet> {
    static ALL: std::sync::OnceLock<Option<rustix::thread::CpuSet>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| rustix::thread::sched_getaffinity(None).ok())
        .as_ref()
}

/// The ids of the CPUs this process may run on (as it started), in order.
fn cpu_ids() -> Vec<usize> {
    match all_cpus() {
        Some(all) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| all.is_set(c))
            .collect(),
        None => vec![0],
    }
}

/// Pin the calling thread to `cpu`, or (`None`) let it run on every CPU it started with
/// again. Threads spawned later inherit this, so every pinning bench ends with `pin(None)`.
fn pin(cpu: Option<usize>) {
    let set = match cpu {
        Some(c) => {
            let mut set = rustix::thread::CpuSet::new();
            set.set(c);
            set
        }
        None => match all_cpus() {
            Some(all) => *all,
            None => return,
        },
    };
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// stress-epoll.c: P producers write(1) to their own notifier; all in one epoll as IN|ET; Q
/// pollers loop wait() + read() of each returned notifier. Checks sum read == sum written.
/// Spin-before-park of the `_spin` rows.
const SPIN: Option<Duration> = Some(Duration::from_micros(50));

fn stress(cfg: &Cfg, rows: &mut Vec<Row>) {
    // The `_spin` rows: the same, with the pollers' epoll spinning 50 us before parking
    // (`Epoll::set_spin`; BENCHMARKS.md asks for blocking and spinning variants apart).
    for (p, q, spin) in [
        (1usize, 1usize, false),
        (2, 1, false),
        (4, 1, false),
        (2, 2, false),
        (1, 1, true),
        (2, 2, true),
    ] {
        let dur = cfg.dur;
        let evfd_run = || {
            let ep = Epoll::new();
            if spin {
                ep.set_spin(SPIN);
            }
            let ns: Arc<Vec<Notifier>> = Arc::new((0..p).map(|_| Notifier::new()).collect());
            for (i, n) in ns.iter().enumerate() {
                ep.add(n, Events::IN | Events::ET, i as u64).unwrap();
            }
            let stop = Arc::new(AtomicBool::new(false));
            let producers: Vec<_> = (0..p)
                .map(|i| {
                    let (ns, stop) = (ns.clone(), stop.clone());
                    std::thread::spawn(move || spin_ops(&stop, || ns[i].write(1).unwrap()))
                })
                .collect();
            let done = Arc::new(AtomicBool::new(false));
            let pollers: Vec<_> = (0..q)
                .map(|_| {
                    let (ns, ep, done) = (ns.clone(), ep.clone(), done.clone());
                    std::thread::spawn(move || {
                        let mut buf = [Event::default(); 16];
                        let mut got = 0u64;
                        while !done.load(Ordering::Relaxed) {
                            let n = ep.wait(&mut buf, Some(Duration::from_millis(5))).unwrap();
                            for e in &buf[..n] {
                                got += ns[e.data as usize].try_read().unwrap_or(0);
                            }
                        }
                        got
                    })
                })
                .collect();
            let t0 = Instant::now();
            std::thread::sleep(dur);
            stop.store(true, Ordering::Relaxed);
            let written: u64 = producers.into_iter().map(|h| h.join().unwrap()).sum();
            let el = t0.elapsed();
            std::thread::sleep(Duration::from_millis(20));
            done.store(true, Ordering::Relaxed);
            let mut read: u64 = pollers.into_iter().map(|h| h.join().unwrap()).sum();
            read += ns.iter().map(|n| n.try_read().unwrap_or(0)).sum::<u64>();
            assert_eq!(
                read, written,
                "stress P{p}Q{q}: every increment written is read"
            );
            written as f64 / el.as_secs_f64() / 1000.0
        };
        let twin_run = || {
            let ep = Arc::new(kepoll());
            let fds: Arc<Vec<OwnedFd>> = Arc::new((0..p).map(|_| kfd()).collect());
            for (i, f) in fds.iter().enumerate() {
                kadd(
                    &ep,
                    f,
                    epoll::EventFlags::IN | epoll::EventFlags::ET,
                    i as u64,
                );
            }
            let stop = Arc::new(AtomicBool::new(false));
            let producers: Vec<_> = (0..p)
                .map(|i| {
                    let (fds, stop) = (fds.clone(), stop.clone());
                    std::thread::spawn(move || spin_ops(&stop, || kwrite(&fds[i], 1)))
                })
                .collect();
            let done = Arc::new(AtomicBool::new(false));
            let pollers: Vec<_> = (0..q)
                .map(|_| {
                    let (fds, ep, done) = (fds.clone(), ep.clone(), done.clone());
                    std::thread::spawn(move || {
                        let mut buf = vec![std::mem::MaybeUninit::uninit(); 16];
                        let mut got = 0u64;
                        while !done.load(Ordering::Relaxed) {
                            for (_, d) in kwait(&ep, &mut buf, Some(5)) {
                                got += kread(&fds[d as usize]);
                            }
                        }
                        got
                    })
                })
                .collect();
            let t0 = Instant::now();
            std::thread::sleep(dur);
            stop.store(true, Ordering::Relaxed);
            let written: u64 = producers.into_iter().map(|h| h.join().unwrap()).sum();
            let el = t0.elapsed();
            std::thread::sleep(Duration::from_millis(20));
            done.store(true, Ordering::Relaxed);
            let mut read: u64 = pollers.into_iter().map(|h| h.join().unwrap()).sum();
            read += fds.iter().map(kread).sum::<u64>();
            assert_eq!(read, written, "kernel stress P{p}Q{q}");
            written as f64 / el.as_secs_f64() / 1000.0
        };
        let (e, t, es, ts) = interleaved(cfg.reps, evfd_run, twin_run);
        rows.push(Row {
            bench: "stress",
            variant: format!("P{p}Q{q}{}", if spin { "_spin" } else { "" }),
            threads: p + q,
            evfd: e,
            twin: t,
            unit: "incr/ms",
            higher_better: true,
            evfd_spread: es,
            twin_spread: ts,
        });
        progress();
    }
}

/// Round trips/s between two threads, each waiting on its own notifier through its own
/// epoll. `spin`: evfd's spin-before-park; the twin is kernel epoll, blocking or busy
/// (`epoll_wait(0)` in a loop). Also returns p50/p99 of one round trip in µs.
fn pingpong_evfd(dur: Duration, spin: bool, cpus: Placement) -> (f64, f64, f64) {
    let (a, b) = (Notifier::new(), Notifier::new());
    let (ea, eb) = (Epoll::new(), Epoll::new());
    ea.add(&a, Events::IN, 0).unwrap();
    eb.add(&b, Events::IN, 0).unwrap();
    if spin {
        ea.set_spin(Some(Duration::from_micros(100)));
        eb.set_spin(Some(Duration::from_micros(100)));
    }
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let (a, b, eb, stop) = (a.clone(), b.clone(), eb.clone(), stop.clone());
        std::thread::spawn(move || {
            pin(cpus.1);
            let mut buf = [Event::default(); 1];
            while !stop.load(Ordering::Relaxed) {
                if eb.wait(&mut buf, Some(Duration::from_millis(20))).unwrap() == 1 {
                    b.read().unwrap();
                    a.write(1).unwrap();
                }
            }
        })
    };
    pin(cpus.0);
    let mut lat = Vec::with_capacity(1 << 16);
    let mut buf = [Event::default(); 1];
    let t0 = Instant::now();
    while t0.elapsed() < dur {
        let t = Instant::now();
        b.write(1).unwrap();
        while ea.wait(&mut buf, None).unwrap() == 0 {}
        a.read().unwrap();
        lat.push(t.elapsed().as_nanos() as f64 / 1000.0);
    }
    let el = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    pin(None);
    let rt = lat.len() as f64 / el.as_secs_f64();
    lat.sort_by(|x, y| x.partial_cmp(y).unwrap());
    (rt, lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

fn pingpong_kernel(dur: Duration, busy: bool, cpus: Placement) -> (f64, f64, f64) {
    let (a, b) = (Arc::new(kfd()), Arc::new(kfd()));
    let (ea, eb) = (kepoll(), Arc::new(kepoll()));
    kadd(&ea, &a, epoll::EventFlags::IN, 0);
    kadd(&eb, &b, epoll::EventFlags::IN, 0);
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let (a, b, eb, stop) = (a.clone(), b.clone(), eb.clone(), stop.clone());
        std::thread::spawn(move || {
            pin(cpus.1);
            let mut buf = vec![std::mem::MaybeUninit::uninit(); 1];
            while !stop.load(Ordering::Relaxed) {
                let t = if busy { Some(0) } else { Some(20) };
                if !kwait(&eb, &mut buf, t).is_empty() {
                    kread(&b);
                    kwrite(&a, 1);
                }
            }
        })
    };
    pin(cpus.0);
    let mut lat = Vec::with_capacity(1 << 16);
    let mut buf = vec![std::mem::MaybeUninit::uninit(); 1];
    let t0 = Instant::now();
    while t0.elapsed() < dur {
        let t = Instant::now();
        kwrite(&b, 1);
        while kwait(&ea, &mut buf, if busy { Some(0) } else { None }).is_empty() {}
        kread(&a);
        lat.push(t.elapsed().as_nanos() as f64 / 1000.0);
    }
    let el = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    echo.join().unwrap();
    pin(None);
    let rt = lat.len() as f64 / el.as_secs_f64();
    lat.sort_by(|x, y| x.partial_cmp(y).unwrap());
    (rt, lat[lat.len() / 2], lat[lat.len() * 99 / 100])
}

fn pingpong(cfg: &Cfg, rows: &mut Vec<Row>) {
    let cross = (Some(0), Some(1));
    let same = (Some(0), Some(0));
    // (variant, evfd spin, kernel busy, placement)
    let cases: [(&str, bool, bool, Placement); 4] = [
        ("block-cross", false, false, cross),
        ("block-same", false, false, same),
        ("spin-cross_vs_kblock", true, false, cross),
        ("spin-cross_vs_kbusy", true, true, cross),
    ];
    for (variant, spin, busy, cpus) in cases {
        let dur = cfg.dur;
        let mut p50 = (Vec::new(), Vec::new());
        let (e, t, es, ts) = interleaved(
            cfg.reps,
            || {
                let r = pingpong_evfd(dur, spin, cpus);
                p50.0.push(r.1);
                r.0
            },
            || {
                let r = pingpong_kernel(dur, busy, cpus);
                p50.1.push(r.1);
                r.0
            },
        );
        rows.push(Row {
            bench: "pingpong",
            variant: variant.into(),
            threads: 2,
            evfd: e,
            twin: t,
            unit: "rt/s",
            higher_better: true,
            evfd_spread: es,
            twin_spread: ts,
        });
        let (pe, pt) = (median(&mut p50.0), median(&mut p50.1));
        rows.push(Row {
            bench: "pingpong",
            variant: format!("{variant}_p50"),
            threads: 2,
            evfd: pe,
            twin: pt,
            unit: "us",
            higher_better: false,
            evfd_spread: 0.0,
            twin_spread: 0.0,
        });
        progress();
    }
}

/// perf bench epoll wait: W workers share one epoll over 64 notifiers each; one writer
/// writes 1 to every notifier in turn, then sleeps 500 ns; each worker loops wait(1) + read.
fn epwait(cfg: &Cfg, rows: &mut Vec<Row>) {
    // `_spin`: the workers' epoll spins 50 us before parking.
    for (w, spin) in [(1usize, false), (2, false), (1, true), (2, true)] {
        let dur = cfg.dur;
        let nfd = 64 * w;
        let evfd_run = || {
            let ep = Epoll::new();
            if spin {
                ep.set_spin(SPIN);
            }
            let ns: Arc<Vec<Notifier>> = Arc::new((0..nfd).map(|_| Notifier::new()).collect());
            for (i, n) in ns.iter().enumerate() {
                ep.add(n, Events::IN, i as u64).unwrap();
            }
            let stop = Arc::new(AtomicBool::new(false));
            let workers: Vec<_> = (0..w)
                .map(|_| {
                    let (ns, ep, stop) = (ns.clone(), ep.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let mut buf = [Event::default(); 1];
                        let mut ops = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            if ep.wait(&mut buf, Some(Duration::from_millis(5))).unwrap() == 1
                                && ns[buf[0].data as usize].try_read().is_ok()
                            {
                                ops += 1;
                            }
                        }
                        ops
                    })
                })
                .collect();
            let t0 = Instant::now();
            while t0.elapsed() < dur {
                for n in ns.iter() {
                    n.write(1).unwrap();
                }
                std::thread::sleep(Duration::from_nanos(500));
            }
            let el = t0.elapsed();
            stop.store(true, Ordering::Relaxed);
            workers.into_iter().map(|h| h.join().unwrap()).sum::<u64>() as f64
                / el.as_secs_f64()
                / 1000.0
        };
        let twin_run = || {
            let ep = Arc::new(kepoll());
            let fds: Arc<Vec<OwnedFd>> = Arc::new((0..nfd).map(|_| kfd()).collect());
            for (i, f) in fds.iter().enumerate() {
                kadd(&ep, f, epoll::EventFlags::IN, i as u64);
            }
            let stop = Arc::new(AtomicBool::new(false));
            let workers: Vec<_> = (0..w)
                .map(|_| {
                    let (fds, ep, stop) = (fds.clone(), ep.clone(), stop.clone());
                    std::thread::spawn(move || {
                        let mut buf = vec![std::mem::MaybeUninit::uninit(); 1];
                        let mut ops = 0u64;
                        while !stop.load(Ordering::Relaxed) {
                            for (_, d) in kwait(&ep, &mut buf, Some(5)) {
                                if kread(&fds[d as usize]) > 0 {
                                    ops += 1;
                                }
                            }
                        }
                        ops
                    })
                })
                .collect();
            let t0 = Instant::now();
            while t0.elapsed() < dur {
                for f in fds.iter() {
                    kwrite(f, 1);
                }
                std::thread::sleep(Duration::from_nanos(500));
            }
            let el = t0.elapsed();
            stop.store(true, Ordering::Relaxed);
            workers.into_iter().map(|h| h.join().unwrap()).sum::<u64>() as f64
                / el.as_secs_f64()
                / 1000.0
        };
        let (e, t, es, ts) = interleaved(cfg.reps, evfd_run, twin_run);
        rows.push(Row {
            bench: "epwait",
            variant: format!("W{w}{}", if spin { "_spin" } else { "" }),
            threads: w + 1,
            evfd: e,
            twin: t,
            unit: "ops/ms",
            higher_better: true,
            evfd_spread: es,
            twin_spread: ts,
        });
        progress();
    }
}

/// Seed 004's virtio loop: K producers kick their queue's notifier; one consumer waits and
/// handles each kick. evfd AutoReset (no read) vs evfd Counter + read, and vs the kernel
/// (epoll_wait + read(2)). Unit: kicks handled (events processed by the consumer) per ms.
///
/// K = CPUs - 1, at most 2, and every thread pinned to a CPU of its own (the consumer on
/// the first, as an iothread beside vCPU threads): the producers kick without pause, so
/// K + 1 threads on fewer CPUs, or a consumer that the scheduler puts beside its producer,
/// measure the scheduler (spreads of 100-1000% unpinned on 2 CPUs), not the loop.
fn autoreset_loop(cfg: &Cfg, rows: &mut Vec<Row>) {
    let cpus = cpu_ids();
    let k = cpus.len().saturating_sub(1).clamp(1, 2);
    // The CPU of the consumer (`None`) or of producer `i`; none on a 1-CPU machine.
    let cpu = |i: Option<usize>| {
        (cpus.len() > 1).then(|| cpus[i.map_or(0, |i| 1 + i % (cpus.len() - 1))])
    };
    let dur = cfg.dur;
    let evfd_run = |mode: evfd::Mode, spin: bool| {
        let ep = Epoll::new();
        if spin {
            ep.set_spin(SPIN);
        }
        let ns: Arc<Vec<Notifier>> = Arc::new(
            (0..k)
                .map(|_| Notifier::builder().mode(mode).build().unwrap())
                .collect(),
        );
        for (i, n) in ns.iter().enumerate() {
            ep.add(n, Events::IN, i as u64).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..k)
            .map(|i| {
                let (ns, stop) = (ns.clone(), stop.clone());
                let cpu = cpu(Some(i));
                std::thread::spawn(move || {
                    pin(cpu);
                    spin_ops(&stop, || ns[i].write(1).unwrap())
                })
            })
            .collect();
        pin(cpu(None));
        let mut buf = vec![Event::default(); k];
        let mut handled = 0u64;
        let t0 = Instant::now();
        while t0.elapsed() < dur {
            for _ in 0..64 {
                let n = ep.wait(&mut buf, Some(Duration::from_millis(5))).unwrap();
                for e in &buf[..n] {
                    if mode == evfd::Mode::Counter {
                        let _ = ns[e.data as usize].try_read();
                    }
                    handled += 1;
                }
            }
        }
        let el = t0.elapsed();
        stop.store(true, Ordering::Relaxed);
        for p in producers {
            p.join().unwrap();
        }
        handled as f64 / el.as_secs_f64() / 1000.0
    };
    let kernel_run = || {
        let ep = kepoll();
        let fds: Arc<Vec<OwnedFd>> = Arc::new((0..k).map(|_| kfd()).collect());
        for (i, f) in fds.iter().enumerate() {
            kadd(&ep, f, epoll::EventFlags::IN, i as u64);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..k)
            .map(|i| {
                let (fds, stop) = (fds.clone(), stop.clone());
                let cpu = cpu(Some(i));
                std::thread::spawn(move || {
                    pin(cpu);
                    spin_ops(&stop, || kwrite(&fds[i], 1))
                })
            })
            .collect();
        pin(cpu(None));
        let mut buf = vec![std::mem::MaybeUninit::uninit(); k];
        let mut handled = 0u64;
        let t0 = Instant::now();
        while t0.elapsed() < dur {
            for _ in 0..64 {
                for (_, d) in kwait(&ep, &mut buf, Some(5)) {
                    kread(&fds[d as usize]);
                    handled += 1;
                }
            }
        }
        let el = t0.elapsed();
        stop.store(true, Ordering::Relaxed);
        for p in producers {
            p.join().unwrap();
        }
        handled as f64 / el.as_secs_f64() / 1000.0
    };
    let (mut a, mut c, mut kern) = (Vec::new(), Vec::new(), Vec::new());
    let (mut a_spin, mut c_spin) = (Vec::new(), Vec::new());
    for _ in 0..cfg.reps {
        a.push(evfd_run(evfd::Mode::AutoReset, false));
        c.push(evfd_run(evfd::Mode::Counter, false));
        kern.push(kernel_run());
        // `_spin`: the consumer's epoll spins 50 us before parking.
        a_spin.push(evfd_run(evfd::Mode::AutoReset, true));
        c_spin.push(evfd_run(evfd::Mode::Counter, true));
    }
    pin(None);
    for (variant, evfd, twin) in [
        ("AutoReset_vs_Counter+read", &a, &c),
        ("AutoReset_vs_kernel", &a, &kern),
        ("AutoReset_spin_vs_Counter+read_spin", &a_spin, &c_spin),
        ("AutoReset_spin_vs_kernel", &a_spin, &kern),
    ] {
        rows.push(Row::from_samples(
            "autoreset_loop",
            variant,
            k + 1,
            evfd,
            twin,
            "kicks/ms",
            true,
        ));
    }
    progress();
}

// ---------------------------------------------------------------- async_pingpong

/// A 2-worker tokio runtime, as BENCHMARKS.md's `async_pingpong` says.
fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .expect("tokio runtime")
}

/// Spawn `pong` and `ping` on `rt`; `ping` returns round trips/s and stops `pong`.
fn ap_run<Pi, Po>(rt: &tokio::runtime::Runtime, ping: Pi, pong: Po) -> f64
where
    Pi: std::future::Future<Output = f64> + Send + 'static,
    Po: std::future::Future<Output = ()> + Send + 'static,
{
    rt.block_on(async move {
        let pong = tokio::spawn(pong);
        let rate = tokio::spawn(ping).await.expect("ping task");
        pong.await.expect("pong task");
        rate
    })
}

/// `ping`'s loop: `rt()` is one round trip; runs `dur`, returns round trips/s.
macro_rules! ap_ping {
    ($dur:expr, $rt:expr) => {{
        let t0 = Instant::now();
        let mut n = 0u64;
        while t0.elapsed() < $dur {
            for _ in 0..64 {
                $rt;
            }
            n += 64;
        }
        n as f64 / t0.elapsed().as_secs_f64()
    }};
}

fn ap_evfd(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    let (a, b) = (Notifier::new(), Notifier::new());
    let (a2, b2) = (a.clone(), b.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    ap_run(
        rt,
        async move {
            let rate = ap_ping!(dur, {
                a.write(1).unwrap();
                b.read_async().await.unwrap();
            });
            stop.store(true, Ordering::Relaxed);
            a.write(1).unwrap();
            rate
        },
        async move {
            loop {
                a2.read_async().await.unwrap();
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                b2.write(1).unwrap();
            }
        },
    )
}

fn ap_notify(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    use tokio::sync::Notify;
    let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (a2, b2) = (a.clone(), b.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    ap_run(
        rt,
        async move {
            let rate = ap_ping!(dur, {
                a.notify_one();
                b.notified().await;
            });
            stop.store(true, Ordering::Relaxed);
            a.notify_one();
            rate
        },
        async move {
            loop {
                a2.notified().await;
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                b2.notify_one();
            }
        },
    )
}

/// A kernel eventfd in tokio's reactor. Call inside the runtime.
fn async_kfd() -> Arc<tokio::io::unix::AsyncFd<OwnedFd>> {
    use tokio::io::{unix::AsyncFd, Interest};
    // SAFETY: an `OwnedFd` owns its fd: it stays open, and `as_raw_fd` returns that same fd,
    // until the `AsyncFd` (which owns the `OwnedFd`) drops it.
    let afd = unsafe { AsyncFd::register_with_interest(kfd(), Interest::READABLE) };
    Arc::new(afd.map_err(|e| e.into_parts().1).expect("AsyncFd"))
}

async fn async_kread(fd: &tokio::io::unix::AsyncFd<OwnedFd>) -> u64 {
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

fn ap_asyncfd(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    let (a, b) = rt.block_on(async { (async_kfd(), async_kfd()) });
    let (a2, b2) = (a.clone(), b.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    ap_run(
        rt,
        async move {
            let rate = ap_ping!(dur, {
                kwrite(a.get_ref(), 1);
                async_kread(&b).await;
            });
            stop.store(true, Ordering::Relaxed);
            kwrite(a.get_ref(), 1);
            rate
        },
        async move {
            loop {
                async_kread(&a2).await;
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                kwrite(b2.get_ref(), 1);
            }
        },
    )
}

/// Two tasks on a 2-worker tokio runtime bounce a token: evfd `write` / `read_async`, vs
/// tokio `Notify` and vs `AsyncFd` over kernel eventfds; the three interleaved. rt/s.
fn async_pingpong(cfg: &Cfg, rows: &mut Vec<Row>) {
    let rt = tokio_rt();
    let dur = cfg.dur;
    let (mut e, mut n, mut f) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..cfg.reps {
        e.push(ap_evfd(&rt, dur));
        n.push(ap_notify(&rt, dur));
        f.push(ap_asyncfd(&rt, dur));
    }
    for (variant, twin) in [("vs_Notify", &n), ("vs_AsyncFd", &f)] {
        rows.push(Row::from_samples(
            "async_pingpong",
            variant,
            2,
            &e,
            twin,
            "rt/s",
            true,
        ));
    }
    progress();
}

// ---------------------------------------------------------------- doorbell

/// The calling thread's read(2)- and write(2)-family syscall counts, as the kernel accounts
/// them per thread (`/proc/thread-self/io`: `syscr`, `syscw`). They see every read and write
/// the thread makes — doorbell or not, evfd's or anyone's — but no other syscall (futex,
/// epoll_wait). Each probe is one `pread(2)` on a file this thread opened; [`RwProbe::cost`]
/// is what one probe adds, measured, and [`RwProbe::since`] subtracts it.
struct RwProbe {
    file: std::fs::File,
    cost: (u64, u64),
}

impl RwProbe {
    /// `None` where the kernel has no per-thread I/O accounting.
    fn new() -> Option<RwProbe> {
        let file = std::fs::File::open("/proc/thread-self/io").ok()?;
        let mut p = RwProbe { file, cost: (0, 0) };
        let a = p.now()?;
        let b = p.now()?;
        p.cost = (b.0 - a.0, b.1 - a.1);
        Some(p)
    }

    /// (syscr, syscw) now.
    fn now(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 512];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Some((field("syscr:")?, field("syscw:")?))
    }

    /// (reads, writes) since `start`, a probe `probes` probes ago, without the probes.
    fn since(&self, start: (u64, u64), probes: u64) -> Option<(u64, u64)> {
        let now = self.now()?;
        let net = |now: u64, start: u64, cost: u64| (now - start).saturating_sub(probes * cost);
        Some((
            net(now.0, start.0, self.cost.0),
            net(now.1, start.1, self.cost.1),
        ))
    }
}

/// Whether thread `tid` of this process sleeps, from its /proc stat (state `S`). Each
/// check is one `pread(2)`, counted in `checks`, so that the caller's read count can leave
/// them out.
struct SleepProbe {
    file: Option<std::fs::File>,
    checks: u64,
}

impl SleepProbe {
    fn new(tid: i32) -> SleepProbe {
        let file = std::fs::File::open(format!("/proc/self/task/{tid}/stat")).ok();
        SleepProbe { file, checks: 0 }
    }

    fn asleep(&mut self) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.file else { return false };
        let mut buf = [0u8; 512];
        self.checks += 1;
        let Ok(n) = f.read_at(&mut buf, 0) else {
            return false;
        };
        let s = String::from_utf8_lossy(&buf[..n]);
        s.rfind(')')
            .and_then(|i| s[i + 1..].trim_start().chars().next())
            == Some('S')
    }

    /// Wait (≤ 10 ms) until the thread sleeps, so that the next notify finds it in
    /// `epoll_wait`. No /proc, or a thread that does not sleep (a ptrace stop is `t`),
    /// times out and goes on: the syscall counts are the same either way; only the
    /// "sleeping" premise is weaker.
    fn until_asleep(&mut self) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(10) {
            if self.asleep() {
                return;
            }
            std::thread::yield_now();
        }
    }
}

fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// What one doorbell measurement counted.
#[derive(Default, Clone, Copy)]
struct Counted {
    /// Syscalls per op as the kernel counted them (`RwProbe`), if it can.
    kernel: Option<f64>,
    /// Syscalls per op by the program's own counter: `evfd::doorbell_stats()` deltas for
    /// evfd, the `write`/`read` calls it made for the eventfd twin.
    own: f64,
}

impl Counted {
    /// The figure reported: the kernel's count where there is one.
    fn value(&self) -> f64 {
        self.kernel.unwrap_or(self.own)
    }
}

/// Consumer awake: the fd (a view, or the twin eventfd) is readable and registered in a
/// kernel epoll (LT); the consumer woke from `epoll_wait` and is busy (sleeping 1 ms at a
/// time, not draining) while this thread, the producer, notifies `n` times. Returns the
/// producer's syscalls per notify and ns per notify.
fn doorbell_awake(n: u64, evfd: bool) -> (Counted, f64) {
    let notifier = Notifier::new();
    let view = notifier.fd_view().expect("fd_view");
    let twin = Arc::new(kfd());
    let ep = kepoll();
    if evfd {
        kadd(&ep, &view, epoll::EventFlags::IN, 0);
    } else {
        kadd(&ep, &*twin, epoll::EventFlags::IN, 0);
    }
    let notify = || {
        if evfd {
            notifier.notify().unwrap();
        } else {
            kwrite(&twin, 1);
        }
    };
    let awake = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (notifier, twin, awake, done) =
            (notifier.clone(), twin.clone(), awake.clone(), done.clone());
        std::thread::spawn(move || {
            let mut buf = vec![std::mem::MaybeUninit::uninit(); 1];
            while kwait(&ep, &mut buf, Some(10_000)).is_empty() {}
            awake.store(true, Ordering::Release);
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1)); // busy elsewhere
            }
            if evfd {
                notifier.try_read().unwrap()
            } else {
                kread(&twin)
            }
        })
    };
    notify(); // the edge that wakes the consumer
    while !awake.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let probe = RwProbe::new();
    let s0 = evfd::doorbell_stats();
    let k0 = probe.as_ref().and_then(|p| p.now());
    let t0 = Instant::now();
    for _ in 0..n {
        notify();
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    let k = probe.as_ref().zip(k0).and_then(|(p, k0)| p.since(k0, 1));
    let s1 = evfd::doorbell_stats();
    done.store(true, Ordering::Release);
    assert_eq!(
        consumer.join().unwrap(),
        n + 1,
        "doorbell: every notify read"
    );
    let own = if evfd {
        (s1.rings - s0.rings + s1.drains - s0.drains) as f64
    } else {
        n as f64 // one write(2) per kwrite
    };
    let c = Counted {
        kernel: k.map(|(r, w)| (r + w) as f64 / n as f64),
        own: own / n as f64,
    };
    (c, ns)
}

/// Consumer sleeping: per edge, the consumer sleeps in `epoll_wait` (kernel epoll, LT) on
/// the fd; the producer (this thread) notifies once; the consumer wakes and reads — evfd:
/// `try_read` until `WouldBlock`; twin: one `read(2)`, which empties an eventfd. Returns
/// (writes per edge, reads per edge), both threads' syscalls.
fn doorbell_sleeping(edges: u64, evfd: bool) -> (Counted, Counted) {
    let notifier = Notifier::new();
    let view = notifier.fd_view().expect("fd_view");
    let twin = Arc::new(kfd());
    let ep = kepoll();
    if evfd {
        kadd(&ep, &view, epoll::EventFlags::IN, 0);
    } else {
        kadd(&ep, &*twin, epoll::EventFlags::IN, 0);
    }
    let drained = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let s0 = evfd::doorbell_stats();
    let consumer = {
        let (notifier, twin, drained, stop, tid) = (
            notifier.clone(),
            twin.clone(),
            drained.clone(),
            stop.clone(),
            tid.clone(),
        );
        std::thread::spawn(move || {
            let probe = RwProbe::new();
            let k0 = probe.as_ref().and_then(|p| p.now());
            tid.store(gettid(), Ordering::Release);
            let (mut got, mut reads) = (0u64, 0u64);
            let mut k = None;
            let mut buf = vec![std::mem::MaybeUninit::uninit(); 1];
            loop {
                if kwait(&ep, &mut buf, Some(10_000)).is_empty() {
                    panic!("doorbell: no wake in 10 s");
                }
                if stop.load(Ordering::Acquire) {
                    break;
                }
                if evfd {
                    while let Ok(v) = notifier.try_read() {
                        got += v;
                    }
                } else {
                    got += kread(&twin);
                    reads += 1;
                }
                // Before publishing the edge as handled: after the last one, the main
                // thread stops us with one more (uncounted) notify.
                let d = drained.load(Ordering::Relaxed) + 1;
                k = probe.as_ref().zip(k0).and_then(|(p, k0)| p.since(k0, d));
                drained.store(d, Ordering::Release);
            }
            (got, reads, k)
        })
    };
    let mut tid_v = 0;
    while tid_v == 0 {
        std::thread::yield_now();
        tid_v = tid.load(Ordering::Acquire);
    }
    let mut sleep = SleepProbe::new(tid_v);
    let probe = RwProbe::new();
    let k0 = probe.as_ref().and_then(|p| p.now());
    for i in 0..edges {
        while drained.load(Ordering::Acquire) < i {
            std::thread::yield_now();
        }
        sleep.until_asleep();
        if evfd {
            notifier.notify().unwrap();
        } else {
            kwrite(&twin, 1);
        }
    }
    while drained.load(Ordering::Acquire) < edges {
        std::thread::yield_now();
    }
    let kp = probe.as_ref().zip(k0).and_then(|(p, k0)| p.since(k0, 1));
    let s1 = evfd::doorbell_stats();
    stop.store(true, Ordering::Release);
    if evfd {
        notifier.notify().unwrap();
    } else {
        kwrite(&twin, 1);
    }
    let (got, reads, kc) = consumer.join().unwrap();
    assert_eq!(got, edges, "doorbell: every notify read");
    let per = |x: u64| x as f64 / edges as f64;
    let (own_w, own_r) = if evfd {
        (per(s1.rings - s0.rings), per(s1.drains - s0.drains))
    } else {
        (1.0, per(reads)) // one write(2) per edge
    };
    // Both threads: a doorbell syscall runs in whichever thread finds the doorbell out of
    // date (the producer may drain if the consumer emptied the notifier while the producer
    // was still ringing), minus the producer's /proc checks (`SleepProbe`).
    let k = kp.zip(kc);
    (
        Counted {
            kernel: k.map(|(p, c)| per(p.1 + c.1)),
            own: own_w,
        },
        Counted {
            kernel: k.map(|(p, c)| per(p.0.saturating_sub(sleep.checks) + c.0)),
            own: own_r,
        },
    )
}

/// `doorbell` (BENCHMARKS.md): a notifier with a fd view registered in a kernel epoll vs a
/// plain kernel eventfd. Syscalls are counted, not timed: see `RwProbe` and `Counted`.
fn doorbell(cfg: &Cfg, rows: &mut Vec<Row>, notes: &mut Vec<String>) {
    let (n, edges) = if cfg.quick {
        (200_000, 300)
    } else {
        (500_000, 1_000)
    };
    let mut s = [(); 8].map(|_| Vec::new());
    let mut counters = [Counted::default(); 6];
    const NAMES: [&str; 6] = [
        "awake evfd",
        "awake twin",
        "asleep-writes evfd",
        "asleep-writes twin",
        "asleep-reads evfd",
        "asleep-reads twin",
    ];
    for _ in 0..cfg.reps {
        let (ce, ne) = doorbell_awake(n, true);
        let (ct, nt) = doorbell_awake(n, false);
        let (we, re) = doorbell_sleeping(edges, true);
        let (wt, rt) = doorbell_sleeping(edges, false);
        counters = [ce, ct, we, wt, re, rt];
        for (name, c) in NAMES.iter().zip(counters) {
            if let Some(k) = c.kernel {
                if (k - c.own).abs() > 1e-9 {
                    notes.push(format!(
                        "doorbell {name}: the kernel counted {k:.4}/op, the own counter {:.4}/op",
                        c.own
                    ));
                }
            }
        }
        for (v, x) in s.iter_mut().zip([
            ce.value(),
            ct.value(),
            ne,
            nt,
            we.value(),
            wt.value(),
            re.value(),
            rt.value(),
        ]) {
            v.push(x);
        }
    }
    for (i, variant) in ["awake_per_notify", "awake_notify"].iter().enumerate() {
        let unit = if i == 0 { "syscalls/op" } else { "ns/op" };
        rows.push(Row::from_samples(
            "doorbell",
            variant,
            2,
            &s[2 * i],
            &s[2 * i + 1],
            unit,
            false,
        ));
    }
    for (i, variant) in ["asleep_writes_per_edge", "asleep_reads_per_edge"]
        .iter()
        .enumerate()
    {
        rows.push(Row::from_samples(
            "doorbell",
            variant,
            2,
            &s[4 + 2 * i],
            &s[5 + 2 * i],
            "syscalls/op",
            false,
        ));
    }
    let src = if counters.iter().all(|c| c.kernel.is_some()) {
        "the kernel's per-thread read/write syscall counts (/proc/thread-self/io syscr+syscw)"
    } else {
        "evfd::doorbell_stats() deltas (evfd) and write/read calls made (twin); \
         /proc/thread-self/io unavailable"
    };
    notes.push(format!(
        "doorbell: {n} notifies while awake, {edges} edges while asleep; syscalls counted from {src}"
    ));
    progress();
}

// ---------------------------------------------------------------- driver

/// Everything the benchmarks produce.
#[derive(Default)]
struct Out {
    rows: Vec<Row>,
    /// Printed under the table, as `# ` lines.
    notes: Vec<String>,
}

type BenchFn = fn(&Cfg, &mut Out);

/// Every benchmark of BENCHMARKS.md, in run order.
const BENCHES: &[(&str, BenchFn)] = &[
    ("seed_pri", |c, o| {
        seed(c, "seed_pri", Events::PRI, &mut o.rows)
    }),
    ("seed_in", |c, o| {
        seed(c, "seed_in", Events::IN, &mut o.rows)
    }),
    ("stress", |c, o| stress(c, &mut o.rows)),
    ("pingpong", |c, o| pingpong(c, &mut o.rows)),
    ("epwait", |c, o| epwait(c, &mut o.rows)),
    ("harvest", |c, o| harvest(c, &mut o.rows)),
    ("scale", |c, o| scale(c, &mut o.rows)),
    ("async_pingpong", |c, o| async_pingpong(c, &mut o.rows)),
    ("autoreset_loop", |c, o| autoreset_loop(c, &mut o.rows)),
    ("doorbell", |c, o| doorbell(c, &mut o.rows, &mut o.notes)),
];

/// One dot per finished row, on the progress line.
fn progress() {
    eprint!(".");
    let _ = std::io::stderr().flush();
}

/// Print the usage (stdout for `--help`, else stderr after `why`) and exit with `code`.
fn usage(why: Option<String>, code: i32) -> ! {
    let names: Vec<&str> = BENCHES.iter().map(|b| b.0).collect();
    let text = format!(
        "usage: stress_epoll [--quick] [--only <bench>]\n\
         \n\
         Runs every benchmark of BENCHMARKS.md, evfd next to its kernel or peer twin.\n\
         \n  --quick         shorter runs: everything in < 60 s on 2 cores (default < 5 min)\
         \n  --only <bench>  run one benchmark: {}\
         \n  -h, --help      print this",
        names.join(", ")
    );
    match why {
        None => println!("{text}"),
        Some(why) => eprintln!("stress_epoll: {why}\n{text}"),
    }
    std::process::exit(code)
}

/// A value for the table: as many digits as its size deserves.
fn fmt_value(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn fmt_ratio(r: f64) -> String {
    if r.is_infinite() {
        "inf".into()
    } else {
        format!("{r:.2}x")
    }
}

/// The table, its legend and notes, then the `row` lines.
fn report(cfg: &Cfg, out: &Out) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let head = [
        "bench", "variant", "thr", "evfd", "twin", "ratio", "unit", "±evfd", "±twin",
    ];
    let cells: Vec<[String; 9]> = out
        .rows
        .iter()
        .map(|r| {
            [
                r.bench.to_string(),
                r.variant.clone(),
                r.threads.to_string(),
                fmt_value(r.evfd),
                fmt_value(r.twin),
                fmt_ratio(r.ratio()),
                r.unit.to_string(),
                format!("{:.0}%", r.evfd_spread * 100.0),
                format!("{:.0}%", r.twin_spread * 100.0),
            ]
        })
        .collect();
    let mut w = head.map(|h| h.chars().count());
    for c in &cells {
        for (w, s) in w.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    // Text columns left-aligned, numbers right-aligned.
    let line = |c: &[String]| {
        let mut s = String::new();
        for (i, (x, w)) in c.iter().zip(w).enumerate() {
            let pad = " ".repeat(w - x.chars().count());
            if matches!(i, 0 | 1 | 6) {
                s += &format!("{x}{pad}  ");
            } else {
                s += &format!("{pad}{x}  ");
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(
        o,
        "# evfd vs its twin in one process, interleaved; median of {} repetitions of {} ms{}",
        cfg.reps,
        cfg.dur.as_millis(),
        if cfg.quick { " (--quick)" } else { "" }
    );
    let _ = writeln!(o, "{}", line(&head.map(String::from)));
    for c in &cells {
        let _ = writeln!(o, "{}", line(c));
    }
    let _ = writeln!(
        o,
        "# ratio: bigger is better. evfd/twin for throughput; twin/evfd for costs (us,"
    );
    let _ = writeln!(
        o,
        "#   ns/..., syscalls/op). `inf`: evfd made no syscall where its twin made some."
    );
    let _ = writeln!(o, "# ±: spread of the repetitions, (max - min) / median.");
    for n in &out.notes {
        let _ = writeln!(o, "# {n}");
    }
    let _ = writeln!(o);
    for r in &out.rows {
        let _ = writeln!(
            o,
            "row {} {} {} evfd={:.3} twin={:.3} ratio={:.3} {}",
            r.bench,
            r.variant.replace(' ', "_"),
            r.threads,
            r.evfd,
            r.twin,
            r.ratio(),
            r.unit
        );
    }
    o
}

fn main() {
    let mut quick = false;
    let mut only: Option<&'static str> = None;
    let mut args = std::env::args_os().skip(1).map(|a| match a.into_string() {
        Ok(a) => a,
        Err(a) => usage(Some(format!("unknown argument {a:?}")), 2),
    });
    while let Some(a) = args.next() {
        let bench = match a.as_str() {
            "--quick" => {
                quick = true;
                continue;
            }
            "-h" | "--help" => usage(None, 0),
            "--only" => match args.next() {
                Some(b) => b,
                None => usage(Some("--only needs a benchmark name".into()), 2),
            },
            _ => match a.strip_prefix("--only=") {
                Some(b) => b.to_string(),
                None => usage(Some(format!("unknown argument `{a}`")), 2),
            },
        };
        match BENCHES.iter().find(|b| b.0 == bench) {
            Some(b) if only.is_none() => only = Some(b.0),
            Some(_) => usage(Some("--only given twice".into()), 2),
            None => usage(Some(format!("unknown benchmark `{bench}`")), 2),
        }
    }
    let cfg = if quick {
        Cfg {
            dur: Duration::from_millis(150),
            reps: 3,
            quick,
        }
    } else {
        Cfg {
            dur: Duration::from_millis(700),
            reps: 5,
            quick,
        }
    };
    let todo: Vec<&(&str, BenchFn)> = BENCHES
        .iter()
        .filter(|b| only.map_or(true, |o| o == b.0))
        .collect();
    let mut out = Out::default();
    all_cpus(); // before anything pins this thread
    let t0 = Instant::now();
    for (i, (name, run)) in todo.iter().enumerate() {
        pin(None); // each bench starts unpinned, whatever ran before
        eprint!("[{}/{}] {name:<15}", i + 1, todo.len());
        let _ = std::io::stderr().flush();
        let t = Instant::now();
        run(&cfg, &mut out);
        eprintln!(" {:.1} s", t.elapsed().as_secs_f64());
    }
    eprintln!("done in {:.1} s", t0.elapsed().as_secs_f64());
    // One write, errors ignored: `stress_epoll | head` must not panic on a closed pipe.
    let _ = std::io::stdout().write_all(report(&cfg, &out).as_bytes());
}
