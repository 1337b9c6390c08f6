//! `pingpong`: two threads bounce a token, each waiting on its own notifier through its own
//! epoll; one round trip is two cross-thread wakes. Round trips per second, and the p50 of
//! one round trip in µs. evfd's `block` rows use the default wait (an adaptive spin, then
//! park), `park` rows turn the spin off (`set_spin(Some(ZERO))`: every hand-off is a futex
//! hop), `spin` rows spin a fixed 100 µs; the twin is kernel epoll, blocking or busy
//! (`epoll_wait(0)` in a loop). Placement: `cross` pins the two threads to CPUs 0 and 1,
//! `same` both to CPU 0. The `vs_floor_spin` / `vs_floor_park` rows put evfd's spinning /
//! parking bounce next to the same loop with bare atomics (`floor::pingpong_spin`: a count
//! and a ready word per side) or a futex token (parking); `vs_token_spin`, untargeted, next
//! to a bare token bounced through one atomic per side, which does less than the loop must
//! (docs/benchmarks.md). Under a co-tenant (`_contended`): `block-cross`, `park-cross`,
//! `spin-cross_vs_kblock` and `vs_floor_spin`, with their p50 rows.

use std::mem::MaybeUninit;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Notifier};
use rustix::event::epoll;

use crate::floor;
use crate::measure::{interleaved, pin, Cfg, Placement};
use crate::report::{Out, RT_S, US};
use crate::twin::{kadd, kepoll, kfd, kread, kwait, kwrite};

/// Run `echo` (one wait of at most 20 ms, answering what it got) on a second thread and
/// `round` (one round trip) on this one, for `dur`: (round trips/s, p50 µs, p99 µs).
pub fn bounce(
    dur: Duration,
    cpus: Placement,
    mut echo: impl FnMut() + Send + 'static,
    mut round: impl FnMut(),
) -> (f64, f64, f64) {
    let stop = Arc::new(AtomicBool::new(false));
    let echo = {
        let stop = stop.clone();
        std::thread::spawn(move || {
            pin(cpus.1);
            while !stop.load(Ordering::Relaxed) {
                echo();
            }
        })
    };
    pin(cpus.0);
    let mut lat = Vec::with_capacity(1 << 16);
    let t0 = Instant::now();
    while t0.elapsed() < dur {
        let t = Instant::now();
        round();
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

/// evfd's bounce; `spin` is passed to `Epoll::set_spin` (`None`: the adaptive default).
fn evfd_run(dur: Duration, spin: Option<Duration>, cpus: Placement) -> (f64, f64, f64) {
    let (a, b) = (Notifier::new(), Notifier::new());
    let (ea, eb) = (Epoll::new(), Epoll::new());
    ea.add(&a, Events::IN, 0).unwrap();
    eb.add(&b, Events::IN, 0).unwrap();
    ea.set_spin(spin);
    eb.set_spin(spin);
    let (a2, b2) = (a.clone(), b.clone());
    let mut buf2 = [Event::default(); 1];
    let mut buf = [Event::default(); 1];
    bounce(
        dur,
        cpus,
        move || {
            if eb.wait(&mut buf2, Some(Duration::from_millis(20))).unwrap() == 1 {
                b2.read().unwrap();
                a2.write(1).unwrap();
            }
        },
        || {
            b.write(1).unwrap();
            while ea.wait(&mut buf, None).unwrap() == 0 {}
            a.read().unwrap();
        },
    )
}

fn kernel_run(dur: Duration, busy: bool, cpus: Placement) -> (f64, f64, f64) {
    let (a, b) = (Arc::new(kfd()), Arc::new(kfd()));
    let (ea, eb) = (kepoll(), kepoll());
    kadd(&ea, &*a, epoll::EventFlags::IN, 0);
    kadd(&eb, &*b, epoll::EventFlags::IN, 0);
    let (a2, b2) = (a.clone(), b.clone());
    let mut buf = [MaybeUninit::uninit(); 1];
    bounce(
        dur,
        cpus,
        move || {
            let mut buf2 = [MaybeUninit::uninit(); 1];
            if !kwait(&eb, &mut buf2, Some(if busy { 0 } else { 20 })).is_empty() {
                kread(&b2);
                kwrite(&a2, 1);
            }
        },
        || {
            kwrite(&b, 1);
            while kwait(&ea, &mut buf, if busy { Some(0) } else { None }).is_empty() {}
            kread(&a);
        },
    )
}

/// The other side of a row: the kernel (blocking or busy), or a `floor` bounce.
#[derive(Clone, Copy)]
enum Twin {
    Kernel { busy: bool },
    FloorSpin,
    FloorToken,
    FloorPark,
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    let cross = (Some(0), Some(1));
    let same = (Some(0), Some(0));
    let fixed = Some(Duration::from_micros(100));
    let park = Some(Duration::ZERO);
    let kblock = Twin::Kernel { busy: false };
    // (variant, evfd spin setting, twin, placement, also under a co-tenant)
    let cases: [(&str, Option<Duration>, Twin, Placement, bool); 8] = [
        ("block-cross", None, kblock, cross, true),
        ("block-same", None, kblock, same, false),
        ("park-cross", park, kblock, cross, true),
        ("spin-cross_vs_kblock", fixed, kblock, cross, true),
        (
            "spin-cross_vs_kbusy",
            fixed,
            Twin::Kernel { busy: true },
            cross,
            false,
        ),
        ("vs_floor_spin", fixed, Twin::FloorSpin, cross, true),
        ("vs_token_spin", fixed, Twin::FloorToken, cross, false),
        ("vs_floor_park", park, Twin::FloorPark, cross, false),
    ];
    for (variant, spin, twin, cpus, contended) in cases {
        if cfg.contended && !contended {
            continue;
        }
        let dur = cfg.dur;
        let mut p50 = (Vec::new(), Vec::new());
        let (e, t) = interleaved(
            cfg.reps,
            || {
                let r = evfd_run(dur, spin, cpus);
                p50.0.push(r.1);
                r.0
            },
            || {
                let r = match twin {
                    Twin::Kernel { busy } => kernel_run(dur, busy, cpus),
                    Twin::FloorSpin => floor::pingpong_spin(dur, cpus),
                    Twin::FloorToken => floor::pingpong_token(dur, cpus),
                    Twin::FloorPark => floor::pingpong_block(dur, cpus),
                };
                p50.1.push(r.1);
                r.0
            },
        );
        out.row("pingpong", variant, 2, RT_S, (&e, &t));
        if matches!(twin, Twin::Kernel { .. }) {
            let p50_variant = format!("{variant}_p50");
            out.row("pingpong", &p50_variant, 2, US, (&p50.0, &p50.1));
        }
    }
}
