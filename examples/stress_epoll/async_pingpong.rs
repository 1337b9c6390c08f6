//! `async_pingpong`: two tasks on a 2-worker tokio runtime bounce a token: evfd `write` /
//! `read_async`, vs tokio `Notify` and vs `AsyncFd` over kernel eventfds; the three
//! interleaved. Round trips per second.

use std::sync::Arc;
use std::time::Duration;

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

/// Two tasks on `$rt` bounce a token through `$a` and `$b` for `$dur`: `ping` gives `$a`
/// and takes `$b`, `pong` takes `$a` and gives `$b`; `|$x| $give` and `|$y| $take` say how,
/// with `$x` / `$y` the side (a reference). Round trips per second. A macro, so that every
/// twin's loop comes out as if written by hand: a generic function over a `give` / `take`
/// trait put one more future around evfd's `read_async` in its measured loop, and its rate
/// fell 5–15% in seven alternated runs.
macro_rules! ap_bounce {
    ($rt:expr, $dur:expr, $a:expr, $b:expr, |$x:ident| $give:expr, |$y:ident| $take:expr) => {{
        let (a, b) = ($a, $b);
        let (a2, b2) = (a.clone(), b.clone());
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stop2 = stop.clone();
        let dur: std::time::Duration = $dur;
        $crate::async_pingpong::ap_run(
            $rt,
            async move {
                let t0 = std::time::Instant::now();
                let mut n = 0u64;
                while t0.elapsed() < dur {
                    for _ in 0..64 {
                        {
                            let $x = &a;
                            $give;
                        }
                        {
                            let $y = &b;
                            $take;
                        }
                    }
                    n += 64;
                }
                let rate = n as f64 / t0.elapsed().as_secs_f64();
                stop.store(true, std::sync::atomic::Ordering::Relaxed);
                {
                    let $x = &a;
                    $give;
                }
                rate
            },
            async move {
                loop {
                    {
                        let $y = &a2;
                        $take;
                    }
                    if stop2.load(std::sync::atomic::Ordering::Relaxed) {
                        break;
                    }
                    {
                        let $x = &b2;
                        $give;
                    }
                }
            },
        )
    }};
}
pub(crate) use ap_bounce;

pub fn ap_evfd(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    ap_bounce!(
        rt,
        dur,
        Notifier::new(),
        Notifier::new(),
        |x| x.write(1).unwrap(),
        |x| x.read_async().await.unwrap()
    )
}

fn ap_notify(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    use tokio::sync::Notify;
    ap_bounce!(
        rt,
        dur,
        Arc::new(Notify::new()),
        Arc::new(Notify::new()),
        |x| x.notify_one(),
        |x| x.notified().await
    )
}

fn ap_asyncfd(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    let (a, b) = rt.block_on(async { (async_kfd(), async_kfd()) });
    ap_bounce!(rt, dur, a, b, |x| kwrite(x.get_ref(), 1), |x| async_kread(
        x
    )
    .await)
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
