//! `scale`: one epoll with R registered notifiers, one ready (LT); nanoseconds per
//! `wait(timeout 0)`. The "twin" of R is the same run at R = 10, so the ratio is
//! cost(10)/cost(R) (1.0 = flat: `wait` is O(ready), not O(registered)).

use std::time::Duration;

use evfd::{Epoll, Event, Events, Notifier};

use crate::measure::{interleaved, ns_per_item, Cfg};
use crate::report::{Out, NS_WAIT};

fn one(r: usize, dur: Duration) -> f64 {
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..r).map(|_| Notifier::new()).collect();
    for (i, x) in ns.iter().enumerate() {
        ep.add(x, Events::IN, i as u64).unwrap();
    }
    ns[r / 2].notify().unwrap();
    let mut buf = [Event::default(); 8];
    ns_per_item(dur, 256, || {
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
        1
    })
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    for r in [1_000usize, 100_000] {
        let dur = cfg.dur;
        let (e, t) = interleaved(cfg.reps, || one(r, dur), || one(10, dur));
        out.row("scale", &format!("R={r}_vs_R=10"), 1, NS_WAIT, (&e, &t));
    }
}
