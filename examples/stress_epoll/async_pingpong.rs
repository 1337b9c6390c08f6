//! `async_pingpong`: two tasks on a 2-worker tokio runtime bounce a token: evfd `write` /
//! `read_async`, vs tokio `Notify` and vs `AsyncFd` over kernel eventfds; the three
//! interleaved. Round trips per second.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::Notifier;

use crate::measure::Cfg;
use crate::report::{Out, RT_S};
use crate::twin::{async_kfd, async_kread, kwrite};

/// A 2-worker tokio runtime.
pub fn tokio_rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_io()
        .build()
        .expect("tokio runtime")
}

/// Spawn `pong` and `ping` on `rt`; `ping` returns round trips/s and stops `pong`.
pub fn ap_run<Pi, Po>(rt: &tokio::runtime::Runtime, ping: Pi, pong: Po) -> f64
where
    Pi: std::future::Future<Output = f64> + Send + 'static,
    Po: std::future::Future<Output = ()> + Send + 'static,
{
    rt.block_on(async move {
        let pong = tokio::spawn(pong);
        let rate = tokio::spawn(ping).await.expect("ping task");
        pong.await.expect("pong task");
        rate
    })
}

/// `ping`'s loop: `rt()` is one round trip; runs `dur`, returns round trips/s.
macro_rules! ap_ping {
    ($dur:expr, $rt:expr) => {{
        let t0 = Instant::now();
        let mut n = 0u64;
        while t0.elapsed() < $dur {
            for _ in 0..64 {
                $rt;
            }
            n += 64;
        }
        n as f64 / t0.elapsed().as_secs_f64()
    }};
}
pub(crate) use ap_ping;

pub fn ap_evfd(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    let (a, b) = (Notifier::new(), Notifier::new());
    let (a2, b2) = (a.clone(), b.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    ap_run(
        rt,
        async move {
            let rate = ap_ping!(dur, {
                a.write(1).unwrap();
                b.read_async().await.unwrap();
            });
            stop.store(true, Ordering::Relaxed);
            a.write(1).unwrap();
            rate
        },
        async move {
            loop {
                a2.read_async().await.unwrap();
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                b2.write(1).unwrap();
            }
        },
    )
}

fn ap_notify(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    use tokio::sync::Notify;
    let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (a2, b2) = (a.clone(), b.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    ap_run(
        rt,
        async move {
            let rate = ap_ping!(dur, {
                a.notify_one();
                b.notified().await;
            });
            stop.store(true, Ordering::Relaxed);
            a.notify_one();
            rate
        },
        async move {
            loop {
                a2.notified().await;
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                b2.notify_one();
            }
        },
    )
}

fn ap_asyncfd(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    let (a, b) = rt.block_on(async { (async_kfd(), async_kfd()) });
    let (a2, b2) = (a.clone(), b.clone());
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    ap_run(
        rt,
        async move {
            let rate = ap_ping!(dur, {
                kwrite(a.get_ref(), 1);
                async_kread(&b).await;
            });
            stop.store(true, Ordering::Relaxed);
            kwrite(a.get_ref(), 1);
            rate
        },
        async move {
            loop {
                async_kread(&a2).await;
                if stop2.load(Ordering::Relaxed) {
                    break;
                }
                kwrite(b2.get_ref(), 1);
            }
        },
    )
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    let rt = tokio_rt();
    let dur = cfg.dur;
    let (mut e, mut n, mut f) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..cfg.reps {
        e.push(ap_evfd(&rt, dur));
        n.push(ap_notify(&rt, dur));
        f.push(ap_asyncfd(&rt, dur));
    }
    for (variant, twin) in [("vs_Notify", &n), ("vs_AsyncFd", &f)] {
        out.row("async_pingpong", variant, 2, RT_S, (&e, twin));
    }
}
