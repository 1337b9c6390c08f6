//! `autoreset_loop` (seed 004's virtio loop): K producers kick their queue's notifier
//! without pause; one consumer waits and handles each kick. evfd AutoReset (no read) vs evfd
//! Counter + read, and vs the kernel (`epoll_wait` + `read(2)`). Kicks handled (events
//! processed by the consumer) per ms. Plain rows: evfd's default wait (adaptive spin, then
//! park); `_spin`: the consumer's epoll spins a fixed 50 µs.
//!
//! K = CPUs - 1, at most 2, and every thread pinned to a CPU of its own (the consumer on
//! the first, as an iothread beside vCPU threads): the producers kick without pause, so
//! K + 1 threads on fewer CPUs, or a consumer that the scheduler puts beside its producer,
//! measure the scheduler (spreads of 100-1000% unpinned on 2 CPUs), not the loop.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Mode, Notifier};
use rustix::event::epoll;

use crate::measure::{cpu_ids, per_ms, pin, spin_ops, Cfg, SPIN};
use crate::report::{Out, KICKS_MS};
use crate::twin::{kadd, kepoll, kfd, kread, kwait, kwrite};

/// The CPU of the consumer (`None`) or of producer `i`; none on a 1-CPU machine.
fn cpu(i: Option<usize>) -> Option<usize> {
    let cpus = cpu_ids();
    (cpus.len() > 1).then(|| cpus[i.map_or(0, |i| 1 + i % (cpus.len() - 1))])
}

/// Run `k` pinned producers looping `kick(i)` and, on this thread (pinned), `handle` (one
/// wait of at most 5 ms and the handling of what it reported: how many events) for `dur`;
/// kicks handled per ms.
fn measure<S: Send + Sync + 'static>(
    k: usize,
    dur: Duration,
    state: S,
    kick: fn(&S, usize),
    mut handle: impl FnMut(&S) -> u64,
) -> f64 {
    let state = Arc::new(state);
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..k)
        .map(|i| {
            let (state, stop) = (state.clone(), stop.clone());
            let cpu = cpu(Some(i));
            std::thread::spawn(move || {
                pin(cpu);
                spin_ops(&stop, || kick(&state, i))
            })
        })
        .collect();
    pin(cpu(None));
    let mut handled = 0u64;
    let t0 = Instant::now();
    while t0.elapsed() < dur {
        for _ in 0..64 {
            handled += handle(&state);
        }
    }
    let el = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    for p in producers {
        p.join().unwrap();
    }
    per_ms(handled, el)
}

fn evfd_run(k: usize, mode: Mode, spin: bool, dur: Duration) -> f64 {
    let ep = Epoll::new();
    if spin {
        ep.set_spin(SPIN);
    }
    let ns: Vec<Notifier> = (0..k)
        .map(|_| Notifier::builder().mode(mode).build().unwrap())
        .collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, Events::IN, i as u64).unwrap();
    }
    let mut buf = vec![Event::default(); k];
    measure(
        k,
        dur,
        (ep, ns),
        |(_, ns): &(Epoll, Vec<Notifier>), i| ns[i].write(1).unwrap(),
        |(ep, ns)| {
            let n = ep.wait(&mut buf, Some(Duration::from_millis(5))).unwrap();
            if mode == Mode::Counter {
                for e in &buf[..n] {
                    let _ = ns[e.data as usize].try_read();
                }
            }
            n as u64
        },
    )
}

fn kernel_run(k: usize, dur: Duration) -> f64 {
    let ep = kepoll();
    let fds: Vec<OwnedFd> = (0..k).map(|_| kfd()).collect();
    for (i, f) in fds.iter().enumerate() {
        kadd(&ep, f, epoll::EventFlags::IN, i as u64);
    }
    let mut buf = vec![MaybeUninit::uninit(); k];
    measure(
        k,
        dur,
        (ep, fds),
        |(_, fds): &(OwnedFd, Vec<OwnedFd>), i| kwrite(&fds[i], 1),
        |(ep, fds)| {
            let got = kwait(ep, &mut buf, Some(5));
            for &(_, d) in &got {
                kread(&fds[d as usize]);
            }
            got.len() as u64
        },
    )
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    let k = cpu_ids().len().saturating_sub(1).clamp(1, 2);
    let dur = cfg.dur;
    let (mut a, mut c, mut kern) = (Vec::new(), Vec::new(), Vec::new());
    let (mut a_spin, mut c_spin) = (Vec::new(), Vec::new());
    for _ in 0..cfg.reps {
        a.push(evfd_run(k, Mode::AutoReset, false, dur));
        c.push(evfd_run(k, Mode::Counter, false, dur));
        kern.push(kernel_run(k, dur));
        a_spin.push(evfd_run(k, Mode::AutoReset, true, dur));
        c_spin.push(evfd_run(k, Mode::Counter, true, dur));
    }
    pin(None);
    for (variant, evfd, twin) in [
        ("AutoReset_vs_Counter+read", &a, &c),
        ("AutoReset_vs_kernel", &a, &kern),
        ("AutoReset_spin_vs_Counter+read_spin", &a_spin, &c_spin),
        ("AutoReset_spin_vs_kernel", &a_spin, &kern),
    ] {
        out.row("autoreset_loop", variant, k + 1, KICKS_MS, (evfd, twin));
    }
}
