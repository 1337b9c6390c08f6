//! `async_pingpong` (docs/benchmarks.md): two tasks on a 2-worker tokio runtime bounce a token
//! through a pair of wake primitives, one round trip per iteration:
//!
//! * `evfd`: two [`evfd::Notifier`]s, `write(1)` / `read_async().await`;
//! * `tokio_notify`: two `tokio::sync::Notify`, `notify_one()` / `notified().await`;
//! * `asyncfd_eventfd`: two kernel eventfds (`EFD_NONBLOCK`) in `AsyncFd`, `write(2)` /
//!   `readable().await` + `read(2)`.
//!
//! Criterion's throughput line (`elem/s`) is round trips per second. Targets: evfd ≥ 1×
//! `Notify`, ≥ 10× `AsyncFd`.
//!
//! `cargo bench --bench async_pingpong`

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use tokio::runtime::Runtime;
use tokio::sync::Notify;

#[path = "../examples/stress_epoll/twin.rs"]
mod twin;
use twin::{async_kfd, async_kread, kwrite};

fn runtime() -> Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .unwrap()
}

/// Spawn `pong` and `ping` (which times `iters` round trips) and return ping's time.
fn pingpong<Pi, Po>(rt: &Runtime, ping: Pi, pong: Po) -> Duration
where
    Pi: std::future::Future<Output = Duration> + Send + 'static,
    Po: std::future::Future<Output = ()> + Send + 'static,
{
    rt.block_on(async move {
        let pong = tokio::spawn(pong);
        let d = tokio::spawn(ping).await.unwrap();
        pong.await.unwrap();
        d
    })
}

fn evfd(rt: &Runtime, iters: u64) -> Duration {
    let (a, b) = (evfd::Notifier::new(), evfd::Notifier::new());
    let (a2, b2) = (a.clone(), b.clone());
    pingpong(
        rt,
        async move {
            let t = Instant::now();
            for _ in 0..iters {
                a.write(1).unwrap();
                b.read_async().await.unwrap();
            }
            t.elapsed()
        },
        async move {
            for _ in 0..iters {
                a2.read_async().await.unwrap();
                b2.write(1).unwrap();
            }
        },
    )
}

fn tokio_notify(rt: &Runtime, iters: u64) -> Duration {
    let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (a2, b2) = (a.clone(), b.clone());
    pingpong(
        rt,
        async move {
            let t = Instant::now();
            for _ in 0..iters {
                a.notify_one();
                b.notified().await;
            }
            t.elapsed()
        },
        async move {
            for _ in 0..iters {
                a2.notified().await;
                b2.notify_one();
            }
        },
    )
}

fn asyncfd_eventfd(rt: &Runtime, iters: u64) -> Duration {
    // AsyncFd registers with the runtime's reactor: create inside it.
    let (a, b) = rt.block_on(async { (async_kfd(), async_kfd()) });
    let (a2, b2) = (a.clone(), b.clone());
    pingpong(
        rt,
        async move {
            let t = Instant::now();
            for _ in 0..iters {
                kwrite(a.get_ref(), 1);
                async_kread(&b).await;
            }
            t.elapsed()
        },
        async move {
            for _ in 0..iters {
                async_kread(&a2).await;
                kwrite(b2.get_ref(), 1);
            }
        },
    )
}

fn bench(c: &mut Criterion) {
    let rt = runtime();
    let mut g = c.benchmark_group("async_pingpong");
    g.throughput(Throughput::Elements(1));
    g.measurement_time(Duration::from_secs(4));
    g.bench_function("evfd", |b| b.iter_custom(|iters| evfd(&rt, iters)));
    g.bench_function("tokio_notify", |b| {
        b.iter_custom(|iters| tokio_notify(&rt, iters))
    });
    g.bench_function("asyncfd_eventfd", |b| {
        b.iter_custom(|iters| asyncfd_eventfd(&rt, iters))
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
