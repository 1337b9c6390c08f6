//! `harvest` (epwbench): 200 ready level-triggered sources in one epoll; one thread calls
//! `wait(timeout 0)` and gets all 200. Nanoseconds per event; the `vs_floor` row puts evfd
//! next to one swap per ready slot and a push into the output.

use std::os::fd::OwnedFd;
use std::time::Duration;

use evfd::{Epoll, Event, Events, Notifier};
use rustix::event::epoll;

use crate::floor;
use crate::measure::{interleaved3, ns_per_item, Cfg};
use crate::report::{Out, NS_EVENT};
use crate::twin::{kadd, kepoll, kfd, kwait, kwrite};

const R: usize = 200;

pub fn run(cfg: &Cfg, out: &mut Out) {
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
        ns_per_item(dur, 64, || {
            let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
            assert_eq!(n, R);
            n as u64
        })
    };
    let twin_run = || {
        let ep = kepoll();
        let fds: Vec<OwnedFd> = (0..R).map(|_| kfd()).collect();
        for (i, f) in fds.iter().enumerate() {
            kwrite(f, 1);
            kadd(&ep, f, epoll::EventFlags::IN, i as u64);
        }
        let mut buf = vec![std::mem::MaybeUninit::uninit(); R];
        ns_per_item(dur, 64, || {
            let got = kwait(&ep, &mut buf, Some(0)).len();
            assert_eq!(got, R);
            got as u64
        })
    };
    let (e, t, f) = interleaved3(cfg.reps, evfd_run, twin_run, || floor::harvest(R, dur));
    out.row("harvest", "200LT", 1, NS_EVENT, (&e, &t));
    out.row("harvest", "vs_floor", 1, NS_EVENT, (&e, &f));
}
