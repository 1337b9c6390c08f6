//! Uncontended `write(1)` + `read()` on an in-memory `Notifier` vs the same pair on a kernel
//! eventfd, in one group so both appear side by side in the same run.
//!
//! The performance contract (docs/design.md): no syscall and no shared lock on this path; the
//! target is ≥ 50× the kernel pair. `cargo run --release --example pair_ratio` prints the
//! ratio directly.
//!
//! ```text
//! cargo bench --bench notifier
//! ```

use std::hint::black_box;
use std::os::fd::OwnedFd;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use evfd::{Mode, Notifier};

#[path = "../examples/stress_epoll/twin.rs"]
mod twin;
use twin::{kfd, kread, kwrite};

fn kernel_pair(fd: &OwnedFd) -> u64 {
    kwrite(fd, 1);
    kread(fd)
}

fn write_read_pair(c: &mut Criterion) {
    let mut g = c.benchmark_group("write_read_pair");
    g.throughput(Throughput::Elements(1));

    for (name, mode) in [
        ("evfd_counter", Mode::Counter),
        ("evfd_semaphore", Mode::Semaphore),
    ] {
        let n = Notifier::builder().mode(mode).build().unwrap();
        g.bench_function(name, |b| {
            b.iter(|| {
                n.write(black_box(1)).unwrap();
                black_box(n.read().unwrap())
            })
        });
    }

    let fd = kfd();
    g.bench_function("kernel_eventfd", |b| b.iter(|| black_box(kernel_pair(&fd))));
    g.finish();
}

criterion_group!(benches, write_read_pair);
criterion_main!(benches);
