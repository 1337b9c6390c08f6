//! `doorbell` (docs/benchmarks.md): a notifier with a fd view vs a plain kernel eventfd, one
//! thread, for regression tracking of the two paths that matter:
//!
//! * `awake/*`: one notify while the notifier is already readable (a consumer that is
//!   awake and has not drained yet). evfd: no syscall; eventfd: one `write(2)`.
//! * `edge/*`: one not-readable → readable → not-readable cycle (notify, then read).
//!   evfd: one doorbell `write(2)` + one `read(2)`; eventfd: the same two.
//!
//! Each measurement also counts the doorbell's syscalls (`FdView::doorbell_stats`) and
//! panics if they are not 0 per awake notify and 1 + 1 per edge. The two-thread shape (the
//! consumer asleep in a kernel epoll), counted by the kernel, is `stress_epoll --only
//! doorbell`.
//!
//! `cargo bench --bench doorbell`

use std::hint::black_box;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use evfd::Notifier;

#[path = "../examples/stress_epoll/twin.rs"]
mod twin;
use twin::{kfd, kread, kwrite};

fn doorbell(c: &mut Criterion) {
    let mut g = c.benchmark_group("doorbell");
    g.throughput(Throughput::Elements(1));

    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    n.notify().unwrap(); // readable from here on: the awake case
    g.bench_function("awake/evfd_view", |b| {
        b.iter_custom(|iters| {
            let s0 = view.doorbell_stats();
            let t = Instant::now();
            for _ in 0..iters {
                n.notify().unwrap();
            }
            let d = t.elapsed();
            assert_eq!(
                view.doorbell_stats(),
                s0,
                "a notify while readable made a syscall"
            );
            d
        })
    });
    n.read().unwrap();

    let fd = kfd();
    g.bench_function("awake/eventfd", |b| b.iter(|| kwrite(&fd, 1)));
    kread(&fd);

    g.bench_function("edge/evfd_view", |b| {
        b.iter_custom(|iters| {
            let s0 = view.doorbell_stats();
            let t = Instant::now();
            for _ in 0..iters {
                n.notify().unwrap();
                black_box(n.try_read().unwrap());
            }
            let d = t.elapsed();
            let s = view.doorbell_stats();
            assert_eq!(
                (s.rings - s0.rings, s.drains - s0.drains),
                (iters, iters),
                "an edge is one ring and one drain"
            );
            d
        })
    });
    g.bench_function("edge/eventfd", |b| {
        b.iter(|| {
            kwrite(&fd, 1);
            black_box(kread(&fd))
        })
    });
    g.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default()
        .measurement_time(Duration::from_secs(2))
        .warm_up_time(Duration::from_millis(500));
    targets = doorbell
}
criterion_main!(benches);
