//! evfd next to its kernel twin, benchmark by benchmark (definitions: BENCHMARKS.md).
//!
//! ```sh
//! cargo run --release --example stress_epoll              # everything, ~3-4 minutes
//! cargo run --release --example stress_epoll -- --quick   # everything, < 60 s
//! cargo run --release --example stress_epoll -- --only seed_pri
//! ```
//!
//! Each row runs evfd and its twin in the same process, interleaved, and reports the median
//! of the repetitions. After the table, one machine-readable line per row:
//! `row <bench> <variant> <threads> evfd=<v> twin=<v> ratio=<r> <unit>`; `ratio` is always
//! "bigger is better" (evfd/twin for throughput, twin/evfd for latency and ns per event).

use std::io::Write as _;
use std::os::fd::OwnedFd;
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
fn kadd(ep: &OwnedFd, fd: &OwnedFd, flags: epoll::EventFlags, data: u64) {
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
    dur: Duration,
    reps: usize,
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
    fn ratio(&self) -> f64 {
        if self.higher_better {
            self.evfd / self.twin
        } else {
            self.twin / self.evfd
        }
    }
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
    let spread = |v: &[f64], m: f64| {
        (v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min))
            / m
    };
    let ma = median(&mut a.clone());
    let mb = median(&mut b.clone());
    (ma, mb, spread(&a, ma), spread(&b, mb))
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
        variant: "200 LT".into(),
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
            variant: format!("R={r} vs R=10"),
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

fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        let mut set = rustix::thread::CpuSet::new();
        set.set(c);
        let _ = rustix::thread::sched_setaffinity(None, &set);
    }
}

/// stress-epoll.c: P producers write(1) to their own notifier; all in one epoll as IN|ET; Q
/// pollers loop wait() + read() of each returned notifier. Checks sum read == sum written.
fn stress(cfg: &Cfg, rows: &mut Vec<Row>) {
    for (p, q) in [(1usize, 1usize), (2, 1), (4, 1), (2, 2)] {
        let dur = cfg.dur;
        let evfd_run = || {
            let ep = Epoll::new();
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
            variant: format!("P{p}Q{q}"),
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
    for w in [1usize, 2] {
        let dur = cfg.dur;
        let nfd = 64 * w;
        let evfd_run = || {
            let ep = Epoll::new();
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
            variant: format!("W{w}"),
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
fn autoreset_loop(cfg: &Cfg, rows: &mut Vec<Row>) {
    const K: usize = 2;
    let dur = cfg.dur;
    let evfd_run = |mode: evfd::Mode| {
        let ep = Epoll::new();
        let ns: Arc<Vec<Notifier>> = Arc::new(
            (0..K)
                .map(|_| Notifier::builder().mode(mode).build().unwrap())
                .collect(),
        );
        for (i, n) in ns.iter().enumerate() {
            ep.add(n, Events::IN, i as u64).unwrap();
        }
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..K)
            .map(|i| {
                let (ns, stop) = (ns.clone(), stop.clone());
                std::thread::spawn(move || spin_ops(&stop, || ns[i].write(1).unwrap()))
            })
            .collect();
        let mut buf = [Event::default(); K];
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
        let fds: Arc<Vec<OwnedFd>> = Arc::new((0..K).map(|_| kfd()).collect());
        for (i, f) in fds.iter().enumerate() {
            kadd(&ep, f, epoll::EventFlags::IN, i as u64);
        }
        let stop = Arc::new(AtomicBool::new(false));
        let producers: Vec<_> = (0..K)
            .map(|i| {
                let (fds, stop) = (fds.clone(), stop.clone());
                std::thread::spawn(move || spin_ops(&stop, || kwrite(&fds[i], 1)))
            })
            .collect();
        let mut buf = vec![std::mem::MaybeUninit::uninit(); K];
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
    let (mut a, mut c, mut k) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..cfg.reps {
        a.push(evfd_run(evfd::Mode::AutoReset));
        c.push(evfd_run(evfd::Mode::Counter));
        k.push(kernel_run());
    }
    let spread = |v: &[f64]| {
        let m = median(&mut v.to_vec());
        (v.iter().cloned().fold(f64::MIN, f64::max) - v.iter().cloned().fold(f64::MAX, f64::min))
            / m
    };
    let (ma, mc, mk) = (
        median(&mut a.clone()),
        median(&mut c.clone()),
        median(&mut k.clone()),
    );
    rows.push(Row {
        bench: "autoreset_loop",
        variant: "AutoReset_vs_Counter+read".into(),
        threads: K + 1,
        evfd: ma,
        twin: mc,
        unit: "kicks/ms",
        higher_better: true,
        evfd_spread: spread(&a),
        twin_spread: spread(&c),
    });
    rows.push(Row {
        bench: "autoreset_loop",
        variant: "AutoReset_vs_kernel".into(),
        threads: K + 1,
        evfd: ma,
        twin: mk,
        unit: "kicks/ms",
        higher_better: true,
        evfd_spread: spread(&a),
        twin_spread: spread(&k),
    });
    progress();
}

// ---------------------------------------------------------------- driver

fn progress() {
    eprint!(".");
    let _ = std::io::stderr().flush();
}

const BENCHES: &[&str] = &[
    "seed_pri",
    "seed_in",
    "stress",
    "pingpong",
    "epwait",
    "harvest",
    "scale",
    "autoreset_loop",
];

fn usage() -> ! {
    eprintln!(
        "usage: stress_epoll [--quick] [--only <bench>]\n  benches: {}",
        BENCHES.join(", ")
    );
    std::process::exit(2);
}

fn main() {
    let mut quick = false;
    let mut only: Option<String> = None;
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        match a.as_str() {
            "--quick" => quick = true,
            "--only" => match args.next() {
                Some(b) if BENCHES.contains(&b.as_str()) => only = Some(b),
                _ => usage(),
            },
            "-h" | "--help" => usage(),
            _ => usage(),
        }
    }
    let cfg = if quick {
        Cfg {
            dur: Duration::from_millis(150),
            reps: 3,
        }
    } else {
        Cfg {
            dur: Duration::from_millis(700),
            reps: 5,
        }
    };
    let want = |b: &str| only.as_deref().map_or(true, |o| o == b);
    let mut rows = Vec::new();
    eprint!("running");
    if want("seed_pri") {
        seed(&cfg, "seed_pri", Events::PRI, &mut rows);
    }
    if want("seed_in") {
        seed(&cfg, "seed_in", Events::IN, &mut rows);
    }
    if want("stress") {
        stress(&cfg, &mut rows);
    }
    if want("pingpong") {
        pingpong(&cfg, &mut rows);
    }
    if want("epwait") {
        epwait(&cfg, &mut rows);
    }
    if want("harvest") {
        harvest(&cfg, &mut rows);
    }
    if want("scale") {
        scale(&cfg, &mut rows);
    }
    if want("autoreset_loop") {
        autoreset_loop(&cfg, &mut rows);
    }
    eprintln!(" done");
    println!(
        "{:<10} {:<18} {:>3} {:>14} {:>14} {:>9}  {:<9} {:>7} {:>7}",
        "bench", "variant", "thr", "evfd", "twin", "ratio", "unit", "±evfd", "±twin"
    );
    for r in &rows {
        println!(
            "{:<10} {:<18} {:>3} {:>14.1} {:>14.1} {:>8.2}x  {:<9} {:>6.0}% {:>6.0}%",
            r.bench,
            r.variant,
            r.threads,
            r.evfd,
            r.twin,
            r.ratio(),
            r.unit,
            r.evfd_spread * 100.0,
            r.twin_spread * 100.0
        );
    }
    println!();
    for r in &rows {
        println!(
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
}
