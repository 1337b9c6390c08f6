//! `Epoll::wait_async` and `Epoll::stream` on block_on, tokio current-thread and
//! multi-thread: completion after a write from another thread, cancel safety (a dropped
//! pending wait delivers nothing, an AutoReset count survives), and counting streams.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use evfd::{Epoll, Event, Events, Mode, Notifier};

mod util;

/// `fut`, awaited, with `write` run on another thread once `fut` is pending.
async fn once_pending<F: Future>(fut: F, write: impl FnOnce() + Send + 'static) -> F::Output {
    util::once_pending(fut, write).await.0
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(30))
        .unwrap_or_else(|_| panic!("{what}: hung"))
}

#[test]
fn block_on_completes_after_write_from_thread() {
    bounded("block_on", || {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 5).unwrap();
        let n2 = n.clone();
        let mut evs = [Event::default(); 2];
        let got = futures::executor::block_on(once_pending(ep.wait_async(&mut evs), move || {
            n2.write(3).unwrap()
        }))
        .unwrap();
        assert_eq!(
            &evs[..got],
            &[Event {
                events: Events::IN,
                data: 5
            }]
        );
    });
}

#[test]
fn dropped_pending_wait_delivers_nothing() {
    let ep = Epoll::new();
    let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    ep.add(&kick, Events::IN, 1).unwrap();
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    let mut evs = [Event::default(); 2];
    {
        let mut f = pin!(ep.wait_async(&mut evs));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert!(f.as_mut().poll(&mut cx).is_pending());
    }
    kick.write(4).unwrap();
    assert_eq!(kick.count(), 4, "nobody delivered it");
    let mut evs = [Event::default(); 2];
    assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(kick.count(), 0, "delivered now, by the wait");
}

#[test]
fn empty_buffer_is_invalid_input() {
    let ep = Epoll::new();
    let e = futures::executor::block_on(ep.wait_async(&mut [])).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
}

#[test]
fn tokio_current_thread_task_wakes_task() {
    bounded("tokio ct", || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        rt.block_on(async {
            let ep = Epoll::new();
            let n = Notifier::new();
            ep.add(&n, Events::IN | Events::ET, 7).unwrap();
            let n2 = n.clone();
            let w = tokio::spawn(async move {
                tokio::task::yield_now().await;
                n2.write(1).unwrap();
            });
            let mut evs = [Event::default(); 1];
            assert_eq!(ep.wait_async(&mut evs).await.unwrap(), 1);
            assert_eq!(evs[0].data, 7);
            w.await.unwrap();
        });
    });
}

#[cfg(feature = "futures")]
#[test]
fn tokio_multi_thread_stream_counts_every_unit() {
    use futures::StreamExt;
    bounded("tokio mt stream", || {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap();
        rt.block_on(async {
            const PER: u64 = 20_000;
            let ep = Epoll::new();
            let ns: Vec<Notifier> = (0..2).map(|_| Notifier::new()).collect();
            for (i, n) in ns.iter().enumerate() {
                ep.add(n, Events::IN | Events::ET, i as u64).unwrap();
            }
            let writers: Vec<_> = ns
                .iter()
                .cloned()
                .map(|n| {
                    std::thread::spawn(move || {
                        for _ in 0..PER {
                            n.write(1).unwrap();
                        }
                    })
                })
                .collect();
            let mut s = ep.stream();
            let mut total = 0;
            while total < 2 * PER {
                let e = s.next().await.unwrap().unwrap();
                total += ns[e.data as usize].try_read().unwrap_or(0);
            }
            assert_eq!(total, 2 * PER);
            for w in writers {
                w.join().unwrap();
            }
        });
    });
}

// Kernel-fd sources outside a tokio runtime's reactor: the watcher thread carries their
// readiness (`tests/epoll_kernel_reactor.rs` has the waits that go through the reactor).

/// A future executor that is not tokio: 1000 ping-pong rounds on an AutoReset
/// `KernelNotifier`, each write landing while the wait is pending; every write is delivered
/// once, none is lost, and the watcher thread carried them.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn block_on_kernel_rounds_lose_no_wake() {
    use evfd::KernelNotifier;
    use std::sync::mpsc;
    const ROUNDS: u64 = 1000;
    bounded("block_on kernel rounds", || {
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 1).unwrap();
        let (go_tx, go_rx) = mpsc::channel::<()>();
        let k2 = Arc::clone(&k);
        let writer = std::thread::spawn(move || {
            for _ in 0..ROUNDS {
                go_rx.recv().unwrap();
                k2.notify().unwrap();
            }
        });
        let mut delivered = 0;
        let mut evs = [Event::default(); 2];
        for _ in 0..ROUNDS {
            go_tx.send(()).unwrap();
            let n = futures::executor::block_on(ep.wait_async(&mut evs)).unwrap();
            assert_eq!(n, 1);
            assert_eq!(evs[0].data, 1);
            delivered += 1;
        }
        writer.join().unwrap();
        assert_eq!(delivered, ROUNDS);
        assert_eq!(k.count().unwrap(), 0, "each delivery reset it");
        assert!(
            evfd::stats::watcher_stats().0 >= 1,
            "the watcher carried them"
        );
    });
}

/// `fut`, awaited, with `k.write(1)` from another thread once it is pending.
#[cfg(any(target_os = "linux", target_os = "android"))]
async fn kicked<F: Future>(k: &Arc<evfd::KernelNotifier>, fut: F) -> F::Output {
    let k2 = Arc::clone(k);
    once_pending(fut, move || k2.write(1).unwrap()).await
}

/// A tokio runtime built without I/O has no reactor to register with: the wait falls back
/// to the watcher (tokio's "IO is disabled" panic is caught inside, with `panic = "unwind"`).
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn tokio_runtime_without_io_still_wakes() {
    use evfd::KernelNotifier;
    bounded("runtime without io", || {
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 2).unwrap();
        let rt = tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap();
        for _ in 0..3 {
            let mut evs = [Event::default(); 2];
            let n = rt.block_on(kicked(&k, ep.wait_async(&mut evs))).unwrap();
            assert_eq!((n, evs[0].data), (1, 2));
            assert_eq!(k.read().unwrap(), 1);
        }
    });
}

/// The runtime whose reactor the epoll registered with is gone; `block_on` (no runtime)
/// still wakes, through the watcher, and so does a new runtime.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[test]
fn block_on_after_the_runtime_is_gone() {
    use evfd::KernelNotifier;
    bounded("after the runtime", || {
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 3).unwrap();
        let mut evs = [Event::default(); 2];
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(kicked(&k, ep.wait_async(&mut evs))).unwrap(), 1);
        drop(rt);
        assert_eq!(
            futures::executor::block_on(kicked(&k, ep.wait_async(&mut evs))).unwrap(),
            1
        );
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        assert_eq!(rt.block_on(kicked(&k, ep.wait_async(&mut evs))).unwrap(), 1);
        assert_eq!(evs[0].data, 3);
    });
}
