//! `mixed`: an `Epoll` holding a kernel source, awaited with `wait_async` on a 2-worker
//! tokio runtime, next to tokio's `AsyncFd` on an eventfd — the wake latency from the
//! kernel `write(2)` (in a thread outside the runtime) to the woken task, p50 and p99; and
//! the idle cost of `wait_async` with no kernel source: threads added to the process and
//! read/write-family syscalls per second while tasks are pending.
//!
//! evfd's path, built with feature `tokio` (`--features tokio`): the runtime's reactor
//! watches the epoll's one kernel fd, the eventfd, itself (the wait registered a duplicate
//! of it; with other kernel fds, the epoll's kernel epoll), so the write wakes the task
//! through the reactor; the task's harvest delivers the event (the notifier is evfd's own,
//! never lent: its count is in memory, and the delivery resets it there, no read). Built without it, the
//! process-wide watcher thread (armed by the pending wait) queues the epoll's kernel item,
//! which wakes the task: one more thread hop. `AsyncFd`'s: tokio's reactor wakes the task.
//!
//! Under a co-tenant (`_contended`): the wake rows only.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

use crate::measure::Cfg;
use crate::report::{Out, Unit, US};
use crate::twin::{async_kfd, async_kread, kwrite};

const THREADS: Unit = Unit {
    name: "threads",
    higher_better: false,
};
const RW_S: Unit = Unit {
    name: "rw_syscalls/s",
    higher_better: false,
};

fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// Nanoseconds since `base`.
pub fn now_ns(base: Instant) -> u64 {
    base.elapsed().as_nanos() as u64
}

/// One side of a wake measurement: its waiter (a task or a thread) is started, and
/// reports each wake's latency; `write` wakes it.
pub struct Side {
    write: Box<dyn Fn()>,
    stamp: Arc<AtomicU64>,
    rx: std::sync::mpsc::Receiver<f64>,
}

/// Start a side's waiter (`wait`, given the stamp, the time base and where to report).
pub fn side(
    base: Instant,
    write: impl Fn() + 'static,
    wait: impl FnOnce(Arc<AtomicU64>, Instant, std::sync::mpsc::Sender<f64>),
) -> Side {
    let stamp = Arc::new(AtomicU64::new(0));
    let (tx, rx) = std::sync::mpsc::channel();
    wait(Arc::clone(&stamp), base, tx);
    Side {
        write: Box::new(write),
        stamp,
        rx,
    }
}

/// `n` wakes of each side, taken in turn (one wake of each, then the next round), so that
/// every side sees the same machine: a wake's latency depends on whether the waiter's CPU
/// was idle (a halted vCPU takes ~20 µs to wake here, a busy one ~5), which other work
/// changes from one moment to the next. Each round starts one side later than the last
/// (round r: side r mod k first): the place in a round matters (one side against a copy
/// of itself, in a fixed order, read 0.96–0.99 with the first place the slower), and the
/// rotation gives every side each place equally. The writer (this thread) stamps and
/// writes; the waiter stamps when woken and reports. Returns each side's latencies in µs,
/// sorted.
pub fn wakes(n: usize, base: Instant, sides: &[Side]) -> Vec<Vec<f64>> {
    let mut lat = vec![Vec::with_capacity(n); sides.len()];
    let k = sides.len();
    for round in 0..n {
        for i in (0..k).map(|i| (i + round) % k) {
            let (s, l) = (&sides[i], &mut lat[i]);
            // Let the waiter go back to waiting (pending, armed / registered with the reactor).
            std::thread::sleep(Duration::from_micros(300));
            s.stamp.store(now_ns(base), SeqCst);
            (s.write)();
            l.push(
                s.rx.recv_timeout(Duration::from_secs(10))
                    .expect("a wake was lost"),
            );
        }
    }
    for l in &mut lat {
        l.sort_by(|a, b| a.partial_cmp(b).unwrap());
    }
    lat
}

pub fn pct(v: &[f64], p: f64) -> f64 {
    v[((v.len() as f64 - 1.0) * p).round() as usize]
}

/// evfd: `wait_async` on an epoll holding an AutoReset `KernelNotifier` (the delivery
/// resets it: no read in the task; the notifier is private, so its count is in memory and
/// the reset makes no syscall either).
fn evfd_side(rt: &tokio::runtime::Runtime, base: Instant) -> Side {
    let k = Arc::new(KernelNotifier::new(Mode::AutoReset).expect("eventfd"));
    let ep = Epoll::new();
    ep.add(&*k, Events::IN, 1).expect("add");
    let k2 = Arc::clone(&k);
    side(
        base,
        move || k2.write(1).expect("write"),
        |stamp, base, tx| {
            rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                loop {
                    let got = ep.wait_async(&mut buf).await.expect("wait_async");
                    let t = now_ns(base);
                    if got > 0 && tx.send((t - stamp.load(SeqCst)) as f64 / 1000.0).is_err() {
                        return;
                    }
                }
            });
        },
    )
}

/// The twin: tokio `AsyncFd` on a kernel eventfd, read after each wake.
fn asyncfd_side(rt: &tokio::runtime::Runtime, base: Instant) -> Side {
    let fd = rt.block_on(async { async_kfd() });
    let fd2 = Arc::clone(&fd);
    side(
        base,
        move || kwrite(fd2.get_ref(), 1),
        |stamp, base, tx| {
            rt.spawn(async move {
                loop {
                    async_kread(&fd).await;
                    let t = now_ns(base);
                    if tx.send((t - stamp.load(SeqCst)) as f64 / 1000.0).is_err() {
                        return;
                    }
                }
            });
        },
    )
}

/// A kernel epoll watching `fd` for `IN` (level-triggered).
fn kernel_epoll_of(fd: &std::os::fd::OwnedFd) -> std::os::fd::OwnedFd {
    use rustix::event::epoll;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
    epoll::add(&ep, fd, epoll::EventData::new_u64(1), epoll::EventFlags::IN).expect("add");
    ep
}

/// The nesting floor of evfd's reactor path: tokio `AsyncFd` on a kernel epoll that holds
/// the eventfd, the task making one `epoll_wait(0)` on it and one `read(2)` after each
/// wake — what any design that puts a kernel epoll of the sources into the reactor pays,
/// before any evfd code runs. Reported as a note next to the `wake_async` rows.
fn nested_floor_side(rt: &tokio::runtime::Runtime, base: Instant) -> Side {
    use rustix::event::epoll;
    use tokio::io::{unix::AsyncFd, Interest};
    let fd = Arc::new(crate::twin::kfd());
    let ep = kernel_epoll_of(&fd);
    let afd = rt.block_on(async {
        // SAFETY: an `OwnedFd` owns its fd: it stays open, and `as_raw_fd` returns that same
        // fd, until the `AsyncFd` (which owns the `OwnedFd`) drops it.
        let afd = unsafe { AsyncFd::register_with_interest(ep, Interest::READABLE) };
        afd.map_err(|e| e.into_parts().1).expect("AsyncFd")
    });
    let (fd2, fd3) = (Arc::clone(&fd), Arc::clone(&fd));
    side(
        base,
        move || kwrite(&fd2, 1),
        |stamp, base, tx| {
            rt.spawn(async move {
                loop {
                    let mut guard = afd.readable().await.expect("readable");
                    let mut buf = [std::mem::MaybeUninit::<epoll::Event>::uninit(); 4];
                    let (got, _) = epoll::wait(
                        guard.get_inner(),
                        &mut buf[..],
                        Some(&rustix::event::Timespec {
                            tv_sec: 0,
                            tv_nsec: 0,
                        }),
                    )
                    .expect("epoll_wait");
                    let got = got.len();
                    if got == 0 {
                        guard.clear_ready();
                        continue;
                    }
                    crate::twin::kread(&fd3);
                    let t = now_ns(base);
                    if tx.send((t - stamp.load(SeqCst)) as f64 / 1000.0).is_err() {
                        return;
                    }
                }
            });
        },
    )
}

/// evfd, blocking: a thread in `Epoll::wait` on the same kind of epoll (it sleeps in the
/// kernel, in `epoll_wait` on the embedded kernel epoll, which returns the event: no
/// watcher hop, no second look).
fn evfd_blocking_side(base: Instant) -> Side {
    let k = Arc::new(KernelNotifier::new(Mode::AutoReset).expect("eventfd"));
    let ep = Epoll::new();
    ep.add(&*k, Events::IN, 1).expect("add");
    let k2 = Arc::clone(&k);
    side(
        base,
        move || k2.write(1).expect("write"),
        |stamp, base, tx| {
            std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                loop {
                    // Untimed, as the twin's `epoll_wait` (a lost wake is caught by the
                    // writer's 10 s `recv_timeout`).
                    let got = ep.wait(&mut buf, None).expect("wait");
                    let t = now_ns(base);
                    if got > 0 && tx.send((t - stamp.load(SeqCst)) as f64 / 1000.0).is_err() {
                        return;
                    }
                }
            });
        },
    )
}

/// The twin: a thread in the kernel's `epoll_wait` on an eventfd, then `read(2)`; with
/// `nowait`, `preadv2(RWF_NOWAIT)` instead (the read evfd's delivery makes: one that never
/// waits whatever a peer sharing the open file description did to its `O_NONBLOCK`).
fn kernel_blocking_side(base: Instant, nowait: bool) -> Side {
    use rustix::event::epoll;
    let fd = Arc::new(crate::twin::kfd());
    let ep = kernel_epoll_of(&fd);
    let fd2 = Arc::clone(&fd);
    side(
        base,
        move || kwrite(&fd2, 1),
        |stamp, base, tx| {
            std::thread::spawn(move || {
                let mut evs = Vec::with_capacity(4);
                loop {
                    evs.clear();
                    let got = epoll::wait(&ep, rustix::buffer::spare_capacity(&mut evs), None)
                        .expect("epoll_wait");
                    if got > 0 {
                        // Stamped after the read, as evfd's wait returns after its
                        // AutoReset delivery's read (and the AsyncFd twin after its read).
                        if nowait {
                            crate::twin::kread_nowait(&fd);
                        } else {
                            crate::twin::kread(&fd);
                        }
                        let t = now_ns(base);
                        if tx.send((t - stamp.load(SeqCst)) as f64 / 1000.0).is_err() {
                            return;
                        }
                    }
                }
            });
        },
    )
}

/// Threads of this process now.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").map_or(0, |d| d.count())
}

/// Read/write-family syscalls of every thread of this process so far.
fn rw_syscalls() -> u64 {
    let Ok(dir) = std::fs::read_dir("/proc/self/task") else {
        return 0;
    };
    dir.filter_map(|e| e.ok())
        .filter_map(|e| std::fs::read_to_string(e.path().join("io")).ok())
        .map(|t| {
            t.lines()
                .filter_map(|l| {
                    l.strip_prefix("syscr:")
                        .or_else(|| l.strip_prefix("syscw:"))
                })
                .filter_map(|v| v.trim().parse::<u64>().ok())
                .sum::<u64>()
        })
        .sum()
}

/// Idle cost: `tasks` pending waits for `dur` (evfd: `wait_async` on an in-memory-only
/// epoll; twin: `AsyncFd::readable` on an eventfd). Returns (threads added, rw syscalls/s
/// of the whole process, the probes' own reads excluded by measuring them).
fn idle(rt: &tokio::runtime::Runtime, dur: Duration, evfd: bool) -> (f64, f64) {
    const TASKS: usize = 4;
    let before_threads = threads();
    let mut stops = Vec::new();
    let mut keep = Vec::new();
    for _ in 0..TASKS {
        let stop = Notifier::new();
        if evfd {
            let ep = Epoll::new();
            ep.add(&Notifier::new(), Events::IN, 0).expect("add");
            ep.add(&stop, Events::IN, 1).expect("add");
            rt.spawn(async move {
                let mut buf = [Event::default(); 2];
                let _ = ep.wait_async(&mut buf).await;
            });
        } else {
            let fd = rt.block_on(async { async_kfd() });
            keep.push(Arc::clone(&fd));
            let stop2 = stop.clone();
            rt.spawn(async move {
                tokio::select! {
                    _ = async_kread(&fd) => {}
                    _ = stop2.read_async() => {}
                }
            });
        }
        stops.push(stop);
    }
    std::thread::sleep(Duration::from_millis(20));
    let probe_cost = {
        let a = rw_syscalls();
        let b = rw_syscalls();
        b - a
    };
    let t0 = Instant::now();
    let s0 = rw_syscalls();
    std::thread::sleep(dur);
    let s1 = rw_syscalls();
    let el = t0.elapsed().as_secs_f64();
    let added = threads().saturating_sub(before_threads) as f64;
    for s in &stops {
        s.notify().expect("notify");
    }
    std::thread::sleep(Duration::from_millis(20));
    drop(keep);
    let rate = (s1 - s0).saturating_sub(probe_cost) as f64 / el;
    (added, rate)
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    let rt = tokio_rt();
    let n = if cfg.quick { 200 } else { 600 };
    let mut p50 = (Vec::new(), Vec::new());
    let mut p99 = (Vec::new(), Vec::new());
    let mut floor = Vec::new();
    for _ in 0..cfg.reps {
        let base = Instant::now();
        let sides = [
            evfd_side(&rt, base),
            asyncfd_side(&rt, base),
            nested_floor_side(&rt, base),
        ];
        let lat = wakes(n, base, &sides);
        let (e, t, f) = (&lat[0], &lat[1], &lat[2]);
        p50.0.push(pct(e, 0.50));
        p50.1.push(pct(t, 0.50));
        p99.0.push(pct(e, 0.99));
        p99.1.push(pct(t, 0.99));
        floor.push(pct(f, 0.50));
    }
    out.row("mixed", "wake_async_p50", 1, US, (&p50.0, &p50.1));
    out.row("mixed", "wake_async_p99", 1, US, (&p99.0, &p99.1));
    let med = |v: &[f64]| {
        let mut v = v.to_vec();
        v.sort_by(|a, b| a.partial_cmp(b).unwrap());
        v[v.len() / 2]
    };
    out.notes.push(format!(
        "mixed: nesting floor (AsyncFd on a kernel epoll holding the eventfd, epoll_wait + read): \
         wake p50 {:.3} us vs AsyncFd on the eventfd {:.3} us (ratio {:.3}); evfd {:.3} us",
        med(&floor),
        med(&p50.1),
        med(&p50.1) / med(&floor),
        med(&p50.0),
    ));
    // The row's pass holds its two sides only; the preadv2 twin gets a pass of its own
    // (against evfd again), so that a third waiter does not lengthen every sleep of the
    // row's pass and cool its caches.
    let mut b50 = (Vec::new(), Vec::new());
    let mut nowait = (Vec::new(), Vec::new());
    for _ in 0..cfg.reps {
        let base = Instant::now();
        let lat = wakes(
            n,
            base,
            &[evfd_blocking_side(base), kernel_blocking_side(base, false)],
        );
        b50.0.push(pct(&lat[0], 0.50));
        b50.1.push(pct(&lat[1], 0.50));
        let base = Instant::now();
        let lat = wakes(
            n,
            base,
            &[evfd_blocking_side(base), kernel_blocking_side(base, true)],
        );
        nowait.0.push(pct(&lat[0], 0.50));
        nowait.1.push(pct(&lat[1], 0.50));
    }
    out.row(
        "mixed",
        "wake_blocking_p50_vs_epoll_wait",
        1,
        US,
        (&b50.0, &b50.1),
    );
    out.notes.push(format!(
        "mixed: the blocking twin reading with preadv2(RWF_NOWAIT) (the read evfd's delivery \
         makes, which never waits whatever a peer did to O_NONBLOCK) instead of read(2), in a \
         pass of its own against evfd: wake p50 {:.3} us vs evfd {:.3} us (ratio {:.3}); the \
         row's pass: read(2) twin {:.3} us, evfd {:.3} us",
        med(&nowait.1),
        med(&nowait.0),
        med(&nowait.1) / med(&nowait.0),
        med(&b50.1),
        med(&b50.0),
    ));
    if cfg.contended {
        // The idle rows count threads and syscalls, which a co-tenant does not change.
        return;
    }
    let dur = cfg.dur.min(Duration::from_millis(500));
    let (th, rw) = interleaved_pairs(cfg.reps, || idle(&rt, dur, true), || idle(&rt, dur, false));
    out.row(
        "mixed",
        "idle_no_kernel_threads",
        4,
        THREADS,
        (&th.0, &th.1),
    );
    out.row(
        "mixed",
        "idle_no_kernel_rw_syscalls",
        4,
        RW_S,
        (&rw.0, &rw.1),
    );
    let (started, running) = evfd::stats::watcher_stats();
    let path = if cfg!(feature = "tokio") {
        "through the runtime's reactor (feature tokio)"
    } else {
        "through the watcher thread (built without feature tokio; --features tokio for the reactor)"
    };
    out.notes.push(format!(
        "mixed: wait_async hears the kernel fd {path}; watcher threads started in this run: \
         {started} (running now: {running}); idle rows: 4 tasks pending on wait_async of \
         in-memory-only epolls vs 4 on AsyncFd::readable"
    ));
}

/// Per-repetition samples of (evfd, twin).
type Samples = (Vec<f64>, Vec<f64>);

/// `measure::interleaved` for a pair of figures per run.
fn interleaved_pairs(
    reps: usize,
    mut evfd: impl FnMut() -> (f64, f64),
    mut twin: impl FnMut() -> (f64, f64),
) -> (Samples, Samples) {
    let mut a = (Vec::new(), Vec::new());
    let mut b = (Vec::new(), Vec::new());
    for _ in 0..reps {
        let (x, y) = evfd();
        a.0.push(x);
        b.0.push(y);
        let (x, y) = twin();
        a.1.push(x);
        b.1.push(y);
    }
    (a, b)
}
