//! `epwait` (perf bench epoll wait): W workers share one epoll over 64·W notifiers; one
//! writer writes 1 to every notifier in turn, then pauses 500 ns; each worker loops
//! `wait(maxevents 1)` + `try_read`. Reads that took something, per ms.
//!
//! The pause is a busy-wait on both sides: a `nanosleep(500 ns)` lasts ~55 µs on small VMs
//! (timer slack), which made the rows measure the sleep. Plain rows: evfd's default wait
//! (adaptive spin, then park). `_spin`: the workers' epoll spins
//! 50 µs before parking. Under a co-tenant (`_contended`): `W1` and `W1_spin`.

use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Notifier};
use rustix::event::epoll;

use crate::measure::{busy_wait, interleaved, per_ms, Cfg, SPIN};
use crate::report::{Out, OPS_MS};
use crate::twin::{kadd, kepoll, kfd, kread, kwait, kwrite};

const PAUSE: Duration = Duration::from_nanos(500);

/// Run `w` workers looping `work` (one wait of at most 5 ms and its read: how many reads
/// took something) while this thread calls `write_all` and pauses, for `dur`; ops per ms.
fn measure<S: Send + Sync + 'static>(
    w: usize,
    dur: Duration,
    state: S,
    write_all: fn(&S),
    work: fn(&S) -> u64,
) -> f64 {
    let state = Arc::new(state);
    let stop = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..w)
        .map(|_| {
            let (state, stop) = (state.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut ops = 0u64;
                while !stop.load(Ordering::Relaxed) {
                    ops += work(&state);
                }
                ops
            })
        })
        .collect();
    let t0 = Instant::now();
    while t0.elapsed() < dur {
        write_all(&state);
        busy_wait(PAUSE);
    }
    let el = t0.elapsed();
    stop.store(true, Ordering::Relaxed);
    per_ms(workers.into_iter().map(|h| h.join().unwrap()).sum(), el)
}

fn evfd_run(w: usize, spin: bool, dur: Duration) -> f64 {
    let ep = Epoll::new();
    if spin {
        ep.set_spin(SPIN);
    }
    let ns: Vec<Notifier> = (0..64 * w).map(|_| Notifier::new()).collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, Events::IN, i as u64).unwrap();
    }
    measure(
        w,
        dur,
        (ep, ns),
        |(_, ns): &(Epoll, Vec<Notifier>)| ns.iter().for_each(|n| n.write(1).unwrap()),
        |(ep, ns)| {
            let mut buf = [Event::default(); 1];
            let got = ep.wait(&mut buf, Some(Duration::from_millis(5))).unwrap() == 1;
            u64::from(got && ns[buf[0].data as usize].try_read().is_ok())
        },
    )
}

fn twin_run(w: usize, dur: Duration) -> f64 {
    let ep = kepoll();
    let fds: Vec<OwnedFd> = (0..64 * w).map(|_| kfd()).collect();
    for (i, f) in fds.iter().enumerate() {
        kadd(&ep, f, epoll::EventFlags::IN, i as u64);
    }
    measure(
        w,
        dur,
        (ep, fds),
        |(_, fds): &(OwnedFd, Vec<OwnedFd>)| fds.iter().for_each(|f| kwrite(f, 1)),
        |(ep, fds)| {
            let mut buf = [MaybeUninit::uninit(); 1];
            let got = kwait(ep, &mut buf, Some(5));
            got.iter()
                .filter(|&&(_, d)| kread(&fds[d as usize]) > 0)
                .count() as u64
        },
    )
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    for (w, spin) in [(1usize, false), (2, false), (1, true), (2, true)] {
        if cfg.contended && w != 1 {
            continue;
        }
        let dur = cfg.dur;
        let (e, t) = interleaved(cfg.reps, || evfd_run(w, spin, dur), || twin_run(w, dur));
        let variant = format!("W{w}{}", if spin { "_spin" } else { "" });
        out.row("epwait", &variant, w + 1, OPS_MS, (&e, &t));
    }
}
