//! `Epoll::wait_async` and `Epoll::stream` on block_on, tokio current-thread and
//! multi-thread: completion after a write from another thread, cancel safety (a dropped
//! pending wait delivers nothing, an AutoReset count survives), and counting streams.

use std::future::Future;
use std::pin::pin;
use std::sync::Arc;
use std::task::{Context, Wake, Waker};
use std::time::Duration;

use evfd::{Epoll, Event, Events, Mode, Notifier};

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
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            n2.write(3).unwrap();
        });
        let mut evs = [Event::default(); 2];
        let got = futures::executor::block_on(ep.wait_async(&mut evs)).unwrap();
        assert_eq!(
            &evs[..got],
            &[Event {
                events: Events::IN,
                data: 5
            }]
        );
        t.join().unwrap();
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
