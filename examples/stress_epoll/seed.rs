//! `seed_pri` / `seed_in` (seed 000): N threads share one epoll; each owns a notifier
//! registered for `want` and loops `write(1)`; `read()`. With `PRI` (never raised) the wake
//! is unwanted: no epoll lock, no wait-queue lock. With `IN` every write queues the item.
//! Each N also gets a `vs_floor` row: evfd against the same loop on a bare `AtomicU64`.

use std::os::fd::OwnedFd;
use std::sync::Arc;

use evfd::{Epoll, Events, Notifier};
use rustix::event::epoll;

use crate::floor;
use crate::measure::{interleaved3, run_threads, spin_ops, Cfg};
use crate::report::{Out, OPS_MS};
use crate::twin::{kadd, kepoll, kfd, kread, kwrite};

pub fn run(cfg: &Cfg, out: &mut Out, name: &'static str, want: Events) {
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
        let (e, t, f) = interleaved3(cfg.reps, evfd_run, twin_run, || floor::seed(n, dur));
        out.row(name, "write+read", n, OPS_MS, (&e, &t));
        out.row(name, "vs_floor", n, OPS_MS, (&e, &f));
    }
}
