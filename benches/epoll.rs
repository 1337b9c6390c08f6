//! Criterion benches for the mini-epoll, each next to its kernel twin (docs/benchmarks.md):
//! `seed_pri` / `seed_in` (one thread), `harvest` (200 ready LT sources), `scale`.
//! The multi-threaded shapes are in `examples/stress_epoll/`, whose kernel-twin helpers
//! (`twin.rs`) these benches share.

use std::hint::black_box;
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::time::Duration;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use evfd::{Epoll, Event, Events, Notifier};
use rustix::event::epoll;

#[path = "../examples/stress_epoll/twin.rs"]
mod twin;
use twin::{kadd, kepoll, kfd_init, kread, kwrite};

fn seed(c: &mut Criterion) {
    for (name, want) in [("seed_pri", Events::PRI), ("seed_in", Events::IN)] {
        let mut g = c.benchmark_group(name);
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, want, 0).unwrap();
        g.bench_function("evfd", |b| {
            b.iter(|| {
                n.write(1).unwrap();
                black_box(n.read().unwrap())
            })
        });
        let kep = kepoll();
        let fd = kfd_init(0);
        kadd(
            &kep,
            &fd,
            epoll::EventFlags::from_bits_retain(want.bits()),
            0,
        );
        g.bench_function("kernel", |b| {
            b.iter(|| {
                kwrite(&fd, 1);
                black_box(kread(&fd))
            })
        });
        g.finish();
    }
}

fn harvest(c: &mut Criterion) {
    const R: usize = 200;
    let mut g = c.benchmark_group("harvest_200_lt");
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..R)
        .map(|_| Notifier::builder().initial(1).build().unwrap())
        .collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, Events::IN, i as u64).unwrap();
    }
    let mut buf = vec![Event::default(); R];
    g.bench_function("evfd", |b| {
        b.iter(|| assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), R))
    });
    let kep = kepoll();
    let fds: Vec<OwnedFd> = (0..R).map(|_| kfd_init(1)).collect();
    for (i, fd) in fds.iter().enumerate() {
        kadd(&kep, fd, epoll::EventFlags::IN, i as u64);
    }
    let mut kbuf = vec![MaybeUninit::<epoll::Event>::uninit(); R];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    g.bench_function("kernel", |b| {
        b.iter(|| {
            let (got, _) = epoll::wait(&kep, &mut kbuf[..], Some(&zero)).unwrap();
            assert_eq!(got.len(), R);
        })
    });
    g.finish();
}

fn scale(c: &mut Criterion) {
    let mut g = c.benchmark_group("scale_one_ready");
    for r in [10usize, 1_000, 100_000] {
        let ep = Epoll::new();
        let ns: Vec<Notifier> = (0..r).map(|_| Notifier::new()).collect();
        for (i, n) in ns.iter().enumerate() {
            ep.add(n, Events::IN, i as u64).unwrap();
        }
        ns[r / 2].notify().unwrap();
        let mut buf = [Event::default(); 8];
        g.bench_with_input(BenchmarkId::new("evfd", r), &r, |b, _| {
            b.iter(|| assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1))
        });
    }
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(2)).warm_up_time(Duration::from_millis(500));
    targets = seed, harvest, scale
}
criterion_main!(benches);
