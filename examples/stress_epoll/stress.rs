//! `stress` (stress-epoll.c): P producers `write(1)` their own notifier as fast as they can;
//! all in one epoll as `IN | ET`; Q pollers loop `wait` + `try_read` of each returned
//! notifier. At the end the sum read must equal the sum written. Increments per ms.
//!
//! The plain rows use evfd's default wait (an adaptive spin, then park); the `_spin` rows the
//! same with the pollers' epoll spinning a fixed 50 µs (`Epoll::set_spin`).

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Notifier};
use rustix::event::epoll;

use crate::measure::{interleaved, per_ms, spin_ops, Cfg, SPIN};
use crate::report::{Out, INCR_MS};
use crate::twin::{kadd, kepoll, kfd, kread, kwait, kwrite};

/// One side of the benchmark: how to write, poll once, and drain what is left.
struct Side<S, B> {
    write: fn(&S, usize),
    buf: fn() -> B,
    /// One `wait` (5 ms timeout) and the reads of what it reported: units read.
    poll: fn(&S, &mut B) -> u64,
    /// Read every source once more after the end: units read.
    drain: fn(&S) -> u64,
}

impl<S, B> Clone for Side<S, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<S, B> Copy for Side<S, B> {}

/// Run P producers and Q pollers over `state` for `dur`; check that everything written was
/// read; increments per ms.
fn measure<S: Send + Sync + 'static, B: 'static>(
    (p, q): (usize, usize),
    dur: Duration,
    state: S,
    side: Side<S, B>,
) -> f64 {
    let state = Arc::new(state);
    let stop = Arc::new(AtomicBool::new(false));
    let producers: Vec<_> = (0..p)
        .map(|i| {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || spin_ops(&stop, || (side.write)(&state, i)))
        })
        .collect();
    let done = Arc::new(AtomicBool::new(false));
    let pollers: Vec<_> = (0..q)
        .map(|_| {
            let (state, done) = (state.clone(), done.clone());
            std::thread::spawn(move || {
                let mut buf = (side.buf)();
                let mut got = 0u64;
                while !done.load(Ordering::Relaxed) {
                    got += (side.poll)(&state, &mut buf);
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
    let read: u64 =
        pollers.into_iter().map(|h| h.join().unwrap()).sum::<u64>() + (side.drain)(&state);
    assert_eq!(
        read, written,
        "stress P{p}Q{q}: every increment written is read"
    );
    per_ms(written, el)
}

fn evfd_run(p: usize, q: usize, spin: bool, dur: Duration) -> f64 {
    let ep = Epoll::new();
    if spin {
        ep.set_spin(SPIN);
    }
    let ns: Vec<Notifier> = (0..p).map(|_| Notifier::new()).collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, Events::IN | Events::ET, i as u64).unwrap();
    }
    let side = Side {
        write: |(_, ns): &(Epoll, Vec<Notifier>), i| ns[i].write(1).unwrap(),
        buf: || [Event::default(); 16],
        poll: |(ep, ns), buf| {
            let n = ep.wait(buf, Some(Duration::from_millis(5))).unwrap();
            let reads = buf[..n].iter().map(|e| ns[e.data as usize].try_read());
            reads.map(|r| r.unwrap_or(0)).sum()
        },
        drain: |(_, ns)| ns.iter().map(|n| n.try_read().unwrap_or(0)).sum(),
    };
    measure((p, q), dur, (ep, ns), side)
}

fn twin_run(p: usize, q: usize, dur: Duration) -> f64 {
    let ep = kepoll();
    let fds: Vec<OwnedFd> = (0..p).map(|_| kfd()).collect();
    for (i, f) in fds.iter().enumerate() {
        kadd(
            &ep,
            f,
            epoll::EventFlags::IN | epoll::EventFlags::ET,
            i as u64,
        );
    }
    let side = Side {
        write: |(_, fds): &(OwnedFd, Vec<OwnedFd>), i| kwrite(&fds[i], 1),
        buf: || vec![MaybeUninit::uninit(); 16],
        poll: |(ep, fds), buf| {
            let got = kwait(ep, buf, Some(5));
            got.iter().map(|&(_, d)| kread(&fds[d as usize])).sum()
        },
        drain: |(_, fds)| fds.iter().map(kread).sum(),
    };
    measure((p, q), dur, (ep, fds), side)
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    for (p, q, spin) in [
        (1usize, 1usize, false),
        (2, 1, false),
        (4, 1, false),
        (2, 2, false),
        (1, 1, true),
        (2, 2, true),
    ] {
        let dur = cfg.dur;
        let (e, t) = interleaved(
            cfg.reps,
            || evfd_run(p, q, spin, dur),
            || twin_run(p, q, dur),
        );
        let variant = format!("P{p}Q{q}{}", if spin { "_spin" } else { "" });
        out.row("stress", &variant, p + q, INCR_MS, (&e, &t));
    }
}
