//! Kernel readiness through the tokio reactor (feature `tokio`): a `wait_async` or
//! `EpollStream` on an epoll with kernel fds, polled inside a tokio runtime, is woken by the
//! runtime's reactor, and the process-wide watcher thread is never started. Every test in
//! this binary waits only under tokio or in a blocking `wait` (which sleeps in the kernel
//! itself), so `watcher_stats()` must stay `(0, false)` throughout: the watcher is
//! process-wide, and one test that used it would show here. Every wait has a timeout.
#![cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]

use std::future::Future;
use std::os::fd::AsFd;
use std::pin::pin;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::{mpsc, Arc};
use std::task::{Context, Poll};
use std::time::Duration;

use evfd::stats::watcher_stats;
use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod util;
use util::reporting_first_poll;

const LIMIT: Duration = Duration::from_secs(20);

fn rt(multi: bool) -> tokio::runtime::Runtime {
    let mut b = if multi {
        let mut b = tokio::runtime::Builder::new_multi_thread();
        b.worker_threads(2);
        b
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    b.enable_all().build().unwrap()
}

/// `f` on its own thread, failing the test if it takes longer than `LIMIT`.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LIMIT * 2)
        .unwrap_or_else(|_| panic!("{what}: hung"))
}

/// `wait_async` with a watchdog that, when it fires, fails without polling the wait again
/// (a timeout that re-polled the wait would find a wake that was lost, and hide it).
async fn wait(ep: &Epoll, buf: &mut [Event]) -> Vec<Event> {
    let n = tokio::select! {
        biased;
        _ = tokio::time::sleep(LIMIT) => panic!("wait_async was not woken"),
        r = ep.wait_async(buf) => r.unwrap(),
    };
    buf[..n].to_vec()
}

fn no_watcher(what: &str) {
    assert_eq!(watcher_stats(), (0, false), "{what}: the watcher started");
}

/// A wait pending on an epoll holding only a kernel eventfd is woken by a write from a
/// thread outside the runtime, on both runtime flavours, with no watcher thread.
fn kernel_only(multi: bool) {
    bounded("kernel only", move || {
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 7).unwrap();
        let rt = rt(multi);
        for round in 0..20 {
            let k2 = Arc::clone(&k);
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                k2.write(1).unwrap();
            });
            let got = rt.block_on(async {
                let mut buf = [Event::default(); 4];
                wait(&ep, &mut buf).await
            });
            assert_eq!(
                got,
                vec![Event {
                    events: Events::IN,
                    data: 7
                }],
                "round {round}"
            );
            assert_eq!(k.read().unwrap(), 1);
            writer.join().unwrap();
        }
        no_watcher("kernel only");
    });
}

#[test]
fn kernel_only_current_thread() {
    kernel_only(false);
}

#[test]
fn kernel_only_multi_thread() {
    kernel_only(true);
}

/// A pipe (`BorrowedFd`) and a socket, watched by a task spawned on a multi-thread runtime.
#[test]
fn pipe_and_socket_wake_a_spawned_task() {
    use std::io::{Read, Write};
    bounded("pipe and socket", || {
        let (mut r, mut w) = std::io::pipe().unwrap();
        let (mut s1, mut s2) = std::os::unix::net::UnixStream::pair().unwrap();
        let ep = Arc::new(Epoll::new());
        ep.add(&r.as_fd(), Events::IN, 1).unwrap();
        ep.add(&s1.as_fd(), Events::IN, 2).unwrap();
        let rt = rt(true);
        for round in 0..10 {
            let data = round % 2 + 1;
            let ep2 = Arc::clone(&ep);
            let task = rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                wait(&ep2, &mut buf).await
            });
            std::thread::sleep(Duration::from_millis(10));
            let mut byte = [0u8];
            if data == 1 {
                w.write_all(b"x").unwrap();
            } else {
                s2.write_all(b"y").unwrap();
            }
            let got = rt.block_on(task).unwrap();
            assert_eq!(got.len(), 1, "{got:?}");
            assert_eq!(got[0].data, data);
            // Level-triggered: drain before the next round.
            if data == 1 {
                r.read_exact(&mut byte).unwrap();
            } else {
                s1.read_exact(&mut byte).unwrap();
            }
        }
        no_watcher("pipe and socket");
    });
}

/// 1000 ping-pong rounds, each a write that only the reactor can announce (the task is
/// pending when it lands): every write is delivered exactly once (AutoReset), none lost.
#[test]
fn thousand_rounds_lose_no_wake() {
    bounded("thousand rounds", || {
        const ROUNDS: u64 = 1000;
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let mem = Notifier::new();
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 1).unwrap();
        ep.add(&mem, Events::IN, 2).unwrap();
        let delivered = Arc::new(AtomicU64::new(0));
        let rt = rt(true);
        let (ack_tx, ack_rx) = mpsc::channel::<u64>();
        let (ep2, d2) = (Arc::clone(&ep), Arc::clone(&delivered));
        let task = rt.spawn(async move {
            let mut buf = [Event::default(); 4];
            while d2.load(SeqCst) < ROUNDS {
                for e in wait(&ep2, &mut buf).await {
                    assert_eq!(e.data, 1, "only the kernel source fires");
                    let now = d2.fetch_add(1, SeqCst) + 1;
                    ack_tx.send(now).unwrap();
                }
            }
        });
        for i in 1..=ROUNDS {
            if i % 100 == 0 {
                // Now and then let the task go back to sleep first.
                std::thread::sleep(Duration::from_micros(300));
            }
            k.notify().unwrap();
            let got = ack_rx.recv_timeout(LIMIT).expect("a wake was lost");
            assert_eq!(got, i, "one delivery per write");
        }
        rt.block_on(task).unwrap();
        assert_eq!(delivered.load(SeqCst), ROUNDS);
        assert_eq!(k.count().unwrap(), 0, "every delivery reset it");
        no_watcher("thousand rounds");
    });
}

/// A writer that does not wait for the consumer: a Counter eventfd, the task reads what each
/// wake announced. The units read add up to the units written.
#[test]
fn free_running_writer_counts_every_unit() {
    bounded("free running", || {
        const UNITS: u64 = 20_000;
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN | Events::ET, 1).unwrap();
        let rt = rt(true);
        let (ep2, k2) = (Arc::clone(&ep), Arc::clone(&k));
        let task = rt.spawn(async move {
            let mut sum = 0;
            let mut wakes = 0u64;
            let mut buf = [Event::default(); 4];
            while sum < UNITS {
                wait(&ep2, &mut buf).await;
                wakes += 1;
                // Edge-triggered: drain, or the next edge may never come.
                if let Ok(n) = k2.try_read() {
                    sum += n;
                }
            }
            (sum, wakes)
        });
        let k3 = Arc::clone(&k);
        let writer = std::thread::spawn(move || {
            for i in 0..UNITS {
                k3.write(1).unwrap();
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        let (sum, wakes) = rt.block_on(task).unwrap();
        writer.join().unwrap();
        assert_eq!(sum, UNITS);
        assert!((1..=UNITS).contains(&wakes));
        no_watcher("free running");
    });
}

/// Several tasks pending on one epoll are all woken by a level-triggered kernel event (the
/// reactor's one-waker slot would keep only the last task; tokio's waiter list keeps all).
#[test]
fn every_pending_task_is_woken() {
    bounded("every task", || {
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 9).unwrap();
        let rt = rt(true);
        let tasks: Vec<_> = (0..4)
            .map(|_| {
                let ep = Arc::clone(&ep);
                rt.spawn(async move {
                    let mut buf = [Event::default(); 2];
                    wait(&ep, &mut buf).await
                })
            })
            .collect();
        std::thread::sleep(Duration::from_millis(50));
        k.write(1).unwrap();
        for t in tasks {
            let got = rt.block_on(t).unwrap();
            assert_eq!(got[0].data, 9);
        }
        assert_eq!(k.read().unwrap(), 1, "level-triggered: nothing consumed it");
        no_watcher("every task");
    });
}

/// In-memory sources still wake a task that waits through the reactor, and a mixed epoll
/// reports both kinds.
#[test]
fn in_memory_and_kernel_sources_together() {
    bounded("mixed", || {
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let n = Notifier::new();
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 1).unwrap();
        ep.add(&n, Events::IN | Events::ET, 2).unwrap();
        let rt = rt(false);
        for (i, data) in [2u64, 1, 2, 1].into_iter().enumerate() {
            let (k2, n2) = (Arc::clone(&k), n.clone());
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                if data == 1 {
                    k2.notify().unwrap();
                } else {
                    n2.notify().unwrap();
                }
            });
            let got = rt.block_on(async {
                let mut buf = [Event::default(); 4];
                wait(&ep, &mut buf).await
            });
            assert_eq!(got.len(), 1, "round {i}: {got:?}");
            assert_eq!(got[0].data, data, "round {i}");
            t.join().unwrap();
        }
        no_watcher("mixed");
    });
}

/// The runtime whose reactor an epoll registered with is dropped; a new runtime's waits
/// still wake (the epoll registers with the new reactor), and so does a blocking wait.
#[test]
fn a_dropped_runtime_and_a_new_one() {
    bounded("new runtime", || {
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 3).unwrap();
        for multi in [false, true, false] {
            let rt = rt(multi);
            for _ in 0..3 {
                let k2 = Arc::clone(&k);
                let t = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(10));
                    k2.notify().unwrap();
                });
                let got = rt.block_on(async {
                    let mut buf = [Event::default(); 4];
                    wait(&ep, &mut buf).await
                });
                assert_eq!(got[0].data, 3);
                t.join().unwrap();
            }
            // A task left pending when its runtime goes: dropped with it.
            let ep2 = Arc::clone(&ep);
            rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                let _ = ep2.wait_async(&mut buf).await;
            });
            std::thread::sleep(Duration::from_millis(10));
            drop(rt);
        }
        k.notify().unwrap();
        let mut buf = [Event::default(); 4];
        assert_eq!(ep.wait(&mut buf, Some(LIMIT)).unwrap(), 1);
        assert_eq!(buf[0].data, 3);
        no_watcher("new runtime");
    });
}

/// A second runtime polls the same epoll while the first one (whose reactor registered it)
/// is alive but not driven: the wait registers with the reactor of the runtime it runs in.
#[test]
fn another_runtime_while_the_first_is_idle() {
    bounded("two runtimes", || {
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 4).unwrap();
        let (rt1, rt2) = (rt(false), rt(false));
        for (round, rt) in [&rt1, &rt2, &rt1, &rt2].into_iter().enumerate() {
            let k2 = Arc::clone(&k);
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                k2.write(1).unwrap();
            });
            let got = rt.block_on(async {
                let mut buf = [Event::default(); 4];
                wait(&ep, &mut buf).await
            });
            assert_eq!(got[0].data, 4, "round {round}");
            assert_eq!(k.read().unwrap(), 1);
            t.join().unwrap();
        }
        no_watcher("two runtimes");
    });
}

/// `EpollStream` under tokio: every kick of an AutoReset eventfd is one item (the delivery
/// resets it), woken through the reactor.
#[cfg(feature = "futures")]
#[test]
fn stream_items_through_the_reactor() {
    use futures::StreamExt;
    bounded("stream", || {
        const KICKS: u64 = 300;
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 5).unwrap();
        let rt = rt(true);
        let mut stream = ep.stream();
        let (tx, rx) = mpsc::channel::<()>();
        let k2 = Arc::clone(&k);
        let writer = std::thread::spawn(move || {
            for _ in 0..KICKS {
                // One kick per item: wait until the previous one was taken.
                rx.recv_timeout(LIMIT).expect("the stream stalled");
                k2.notify().unwrap();
            }
        });
        rt.block_on(async {
            for i in 0..KICKS {
                tx.send(()).unwrap();
                let e = tokio::time::timeout(LIMIT, stream.next())
                    .await
                    .unwrap_or_else(|_| panic!("item {i} never came"))
                    .unwrap()
                    .unwrap();
                assert_eq!(e.data, 5);
            }
        });
        writer.join().unwrap();
        assert_eq!(k.count().unwrap(), 0);
        no_watcher("stream");
    });
}

/// A pending wait that goes through the reactor and is dropped delivered nothing: an
/// AutoReset eventfd keeps its count for the next wait.
#[test]
fn a_dropped_reactor_wait_delivers_nothing() {
    bounded("cancel", || {
        let k = KernelNotifier::new(Mode::AutoReset).unwrap();
        let ep = Epoll::new();
        ep.add(&k, Events::IN, 6).unwrap();
        let rt = rt(false);
        rt.block_on(async {
            let mut buf = [Event::default(); 2];
            {
                let mut f = pin!(ep.wait_async(&mut buf));
                std::future::poll_fn(|cx: &mut Context<'_>| {
                    assert!(f.as_mut().poll(cx).is_pending());
                    assert!(f.as_mut().poll(cx).is_pending());
                    Poll::Ready(())
                })
                .await;
            }
            k.write(2).unwrap();
            assert_eq!(k.count().unwrap(), 2, "nobody delivered it");
            let got = wait(&ep, &mut buf).await;
            assert_eq!(got[0].data, 6);
            assert_eq!(k.count().unwrap(), 0, "delivered (reset) now");
        });
        no_watcher("cancel");
    });
}

/// A task that polled a wait and then dropped it (a `select!` that went the other way) leaves
/// nothing behind that could take a kernel event's wake from a task still pending: tokio's
/// one-waker slot would hold the dropped wait's task, its waiter list holds the live one.
#[test]
fn a_cancelled_wait_does_not_take_a_pending_tasks_wake() {
    bounded("cancelled wait", || {
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 8).unwrap();
        let rt = rt(true);
        let ep_a = Arc::clone(&ep);
        let a = rt.spawn(async move {
            let mut buf = [Event::default(); 2];
            wait(&ep_a, &mut buf).await
        });
        std::thread::sleep(Duration::from_millis(30));
        let ep_b = Arc::clone(&ep);
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let (park_tx, park_rx) = tokio::sync::oneshot::channel::<()>();
        let b = rt.spawn(async move {
            let mut buf = [Event::default(); 2];
            tokio::select! {
                biased;
                _ = stop_rx => {}
                _ = ep_b.wait_async(&mut buf) => panic!("B was not meant to get it"),
            }
            // Pending on something else from now on; its task's waker may still sit in the
            // reactor's slot.
            let _ = park_rx.await;
        });
        std::thread::sleep(Duration::from_millis(30));
        stop_tx.send(()).unwrap();
        std::thread::sleep(Duration::from_millis(30));
        k.notify().unwrap();
        let got = rt.block_on(a).unwrap();
        assert_eq!(got[0].data, 8);
        park_tx.send(()).unwrap();
        rt.block_on(b).unwrap();
        no_watcher("cancelled wait");
    });
}

/// The reactor state keeps the futures `Send + Sync + Unpin`, as they were.
#[test]
fn futures_stay_send_sync_unpin() {
    fn check<T: Send + Sync + Unpin>() {}
    check::<evfd::future::EpollWaitFuture<'static>>();
    #[cfg(feature = "futures")]
    check::<evfd::stream::EpollStream>();
}

/// A wait_async whose reactor readiness is not set yet (its registration is new: the
/// runtime's driver has not run since) and that will return in-memory events collects
/// the ready kernel fd in the same wait, as `epoll_wait` returns every ready item.
#[test]
fn wait_async_with_memory_events_returns_ready_kernel_fds_too() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let ep = Epoll::new();
    let k = KernelNotifier::new(Mode::AutoReset).unwrap();
    ep.add(&k, Events::IN, 1).unwrap();
    let n = Notifier::new();
    ep.add(&n, Events::IN | Events::ET, 2).unwrap();
    k.write(1).unwrap();
    n.notify().unwrap();
    let mut buf = [Event::default(); 4];
    let got = rt.block_on(async { ep.wait_async(&mut buf).await.unwrap() });
    let mut data: Vec<u64> = buf[..got].iter().map(|e| e.data).collect();
    data.sort_unstable();
    assert_eq!(data, vec![1, 2]);
}

/// A level-triggered pipe left readable is reported by every wait, next to an AutoReset
/// `KernelNotifier`: a harvest that delivered it has not drained the kernel epoll (the
/// pipe stays ready), so it must not clear the reactor's readiness; one that delivered only
/// the notifier (its read emptied it) may.
#[test]
fn a_level_triggered_fd_left_ready_is_reported_again() {
    use std::io::Write;
    bounded("level-triggered left ready", || {
        let (r, mut w) = std::io::pipe().unwrap();
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&r.as_fd(), Events::IN, 1).unwrap();
        ep.add(&*k, Events::IN, 2).unwrap();
        let rt = rt(true);
        // The task is pending when the byte lands, then waits four times more without a
        // new kernel event: the pipe is still readable each time.
        let ep2 = Arc::clone(&ep);
        let task = rt.spawn(async move {
            let mut buf = [Event::default(); 4];
            let mut seen = Vec::new();
            for _ in 0..5 {
                seen.push(wait(&ep2, &mut buf).await);
            }
            seen
        });
        std::thread::sleep(Duration::from_millis(10));
        w.write_all(b"x").unwrap();
        for got in rt.block_on(task).unwrap() {
            assert_eq!(got.iter().map(|e| e.data).collect::<Vec<_>>(), vec![1]);
        }
        // The notifier alone: delivered once per write, then the task sleeps again and is
        // woken by the next write (the pipe is drained first).
        let mut byte = [0u8];
        std::io::Read::read_exact(&mut &r, &mut byte).unwrap();
        for _ in 0..20 {
            let ep2 = Arc::clone(&ep);
            let task = rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                wait(&ep2, &mut buf).await
            });
            std::thread::sleep(Duration::from_millis(2));
            k.notify().unwrap();
            let got = rt.block_on(task).unwrap();
            assert_eq!(got.iter().map(|e| e.data).collect::<Vec<_>>(), vec![2]);
        }
        no_watcher("level-triggered left ready");
    });
}

/// A writer that does not wait, on a lone AutoReset `KernelNotifier` (the shape whose
/// harvest is the eventfd's read, and whose delivery clears the reactor's readiness):
/// once the writer is done, a unit still in the eventfd is always delivered (a task that
/// cleared the readiness after a delivery is woken by the next write's edge).
#[test]
fn lone_autoreset_free_running_writer_leaves_nothing_behind() {
    bounded("lone autoreset free running", || {
        const WRITES: u64 = 20_000;
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let stop = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 1).unwrap();
        ep.add(&stop, Events::IN, 2).unwrap();
        let rt = rt(true);
        let (ep2, k2) = (Arc::clone(&ep), Arc::clone(&k));
        let task = rt.spawn(async move {
            let mut buf = [Event::default(); 4];
            let (mut delivered, mut stopped) = (0u64, false);
            loop {
                for e in wait(&ep2, &mut buf).await {
                    match e.data {
                        1 => delivered += 1,
                        _ => stopped = true,
                    }
                }
                // After the stop, only units still in the eventfd are owed a wake.
                if stopped && k2.count().unwrap() == 0 {
                    return delivered;
                }
            }
        });
        let k3 = Arc::clone(&k);
        let writer = std::thread::spawn(move || {
            for i in 0..WRITES {
                k3.notify().unwrap();
                if i % 64 == 0 {
                    std::thread::yield_now();
                }
            }
        });
        writer.join().unwrap();
        stop.notify().unwrap();
        let delivered = rt.block_on(task).unwrap();
        assert!((1..=WRITES).contains(&delivered), "{delivered}");
        assert_eq!(k.count().unwrap(), 0);
        no_watcher("lone autoreset free running");
    });
}

/// A task waits through the reactor on an epoll whose one kernel fd is an AutoReset
/// `KernelNotifier` (the reactor then watches that eventfd itself, not the kernel epoll);
/// meanwhile the kernel fds change — a pipe is added, or the notifier is replaced by
/// another (added, then the first deleted) — and the new fd fires: the task is woken (the change moved the shape, woke the
/// task, and it chose the registration of the new shape).
#[test]
fn kernel_fds_changed_under_a_task_on_the_lone_eventfd() {
    use std::io::Write;
    bounded("shape changes", || {
        let rt = rt(true);
        for round in 0..10 {
            // A pipe added beside the notifier.
            let (r, mut w) = std::io::pipe().unwrap();
            let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
            let ep = Arc::new(Epoll::new());
            ep.add(&*k, Events::IN, 1).unwrap();
            let ep2 = Arc::clone(&ep);
            let task = rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                wait(&ep2, &mut buf).await
            });
            std::thread::sleep(Duration::from_millis(5));
            ep.add(&r.as_fd(), Events::IN, 2).unwrap();
            w.write_all(b"x").unwrap();
            let got = rt.block_on(task).unwrap();
            assert_eq!(
                got.iter().map(|e| e.data).collect::<Vec<_>>(),
                vec![2],
                "round {round}: pipe added"
            );

            // The notifier replaced by another.
            let k2 = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
            ep.delete(&r.as_fd()).unwrap();
            let ep2 = Arc::clone(&ep);
            let task = rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                wait(&ep2, &mut buf).await
            });
            std::thread::sleep(Duration::from_millis(5));
            // (Added before the delete: an epoll without kernel fds would send the task to
            // the watcher, which no test of this binary may start.)
            ep.add(&*k2, Events::IN, 3).unwrap();
            ep.delete(&*k).unwrap();
            k2.notify().unwrap();
            let got = rt.block_on(task).unwrap();
            assert_eq!(
                got.iter().map(|e| e.data).collect::<Vec<_>>(),
                vec![3],
                "round {round}: notifier replaced"
            );
            drop(k);
        }
        no_watcher("shape changes");
    });
}

/// The shape's wake (a kernel fd added while the epoll held one eventfd) reaches threads
/// asleep in a blocking `wait` too, whose entries share the tasks' key: for them it is
/// spurious, and a `wait` with time left does not return early with nothing.
#[test]
fn a_shape_change_does_not_cut_a_blocking_wait_short() {
    bounded("blocking wait through a shape change", || {
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 1).unwrap();
        let mut sleepers = Vec::new();
        for _ in 0..2 {
            let ep2 = Arc::clone(&ep);
            sleepers.push(std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                let t = std::time::Instant::now();
                let n = ep2
                    .wait(&mut buf, Some(Duration::from_millis(300)))
                    .unwrap();
                (n, t.elapsed())
            }));
        }
        std::thread::sleep(Duration::from_millis(30));
        let (r, _w) = std::io::pipe().unwrap();
        ep.add(&r.as_fd(), Events::IN, 2).unwrap();
        ep.delete(&r.as_fd()).unwrap();
        for s in sleepers {
            let (n, took) = s.join().unwrap();
            assert_eq!(n, 0);
            assert!(
                took >= Duration::from_millis(290),
                "returned after {took:?}"
            );
        }
        no_watcher("blocking wait through a shape change");
    });
}

/// The epoll's first in-memory source, added (ready) from a thread outside the runtime
/// while a task waits bare (kernel fds only: no entry on the epoll's wait queue), reaches
/// that task: the add wakes it through the bare slot, on both runtime flavours, at any
/// moment of its wait. Then the epoll's waits take the general path, and a kernel write
/// still wakes a second wait.
fn first_memory_add_under_a_bare_task(multi: bool) {
    bounded("first in-memory add", move || {
        let rt = rt(multi);
        for round in 0..60u64 {
            let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
            let ep = Arc::new(Epoll::new());
            ep.add(&*k, Events::IN, 1).unwrap();
            let n = Arc::new(Notifier::new());
            n.notify().unwrap();
            let adder = {
                let (ep, n) = (Arc::clone(&ep), Arc::clone(&n));
                std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_micros(round % 3 * 200));
                    ep.add(&*n, Events::IN | Events::ET, 7).unwrap();
                })
            };
            let got = rt.block_on(async {
                let mut buf = [Event::default(); 4];
                wait(&ep, &mut buf).await
            });
            adder.join().unwrap();
            assert_eq!(
                got,
                vec![Event {
                    events: Events::IN,
                    data: 7
                }],
                "round {round}"
            );
            let k2 = Arc::clone(&k);
            let writer = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(2));
                k2.write(1).unwrap();
            });
            let got = rt.block_on(async {
                let mut buf = [Event::default(); 4];
                wait(&ep, &mut buf).await
            });
            writer.join().unwrap();
            assert_eq!(
                got,
                vec![Event {
                    events: Events::IN,
                    data: 1
                }],
                "round {round}"
            );
        }
        no_watcher("first in-memory add");
    });
}

#[test]
fn first_memory_add_under_a_bare_task_current_thread() {
    first_memory_add_under_a_bare_task(false);
}

#[test]
fn first_memory_add_under_a_bare_task_multi_thread() {
    first_memory_add_under_a_bare_task(true);
}

/// Three tasks wait on one epoll of one Counter eventfd: one holds the bare slot, the
/// others wait through the wait queue. A write wakes all three (each finds the event, as
/// `epoll_wait` in three threads would for a level-triggered fd); a bare wait dropped
/// before its wake leaves the slot to the next wait.
#[test]
fn bare_and_queued_tasks_side_by_side() {
    bounded("bare and queued tasks", || {
        let rt = rt(true);
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 5).unwrap();
        // A bare wait cancelled before anything happens (it took the slot).
        rt.block_on(async {
            let mut buf = [Event::default(); 4];
            let r = tokio::time::timeout(Duration::from_millis(5), ep.wait_async(&mut buf)).await;
            assert!(r.is_err(), "nothing was written");
        });
        let (ptx, prx) = mpsc::channel();
        let tasks: Vec<_> = (0..3)
            .map(|_| {
                let (ep, ptx) = (Arc::clone(&ep), ptx.clone());
                rt.spawn(async move {
                    let mut buf = [Event::default(); 4];
                    reporting_first_poll(wait(&ep, &mut buf), move |p| ptx.send(p).unwrap()).await
                })
            })
            .collect();
        // The write comes once all three waits are pending (registered for its wake).
        for _ in 0..3 {
            assert!(
                prx.recv_timeout(LIMIT).unwrap(),
                "a wait was ready before the write"
            );
        }
        k.write(1).unwrap();
        for t in tasks {
            let got = rt.block_on(t).unwrap();
            assert_eq!(
                got,
                vec![Event {
                    events: Events::IN,
                    data: 5
                }]
            );
        }
        assert_eq!(k.read().unwrap(), 1);
        no_watcher("bare and queued tasks");
    });
}

/// The bare task and queued tasks hear the lone AutoReset eventfd through two
/// registrations (the bare one, polled only by the slot's holder, and the shared one): each
/// write is delivered to exactly one waiting task (the delivery's read resets it), and the
/// others stay pending until the next write — whichever registration's edge comes first,
/// and whichever task's try clears its registration's readiness. 200 writes, 3 tasks
/// re-waiting: every write is one delivery, none lost, none twice.
#[test]
fn autoreset_writes_shared_by_a_bare_and_queued_tasks() {
    bounded("bare and queued tasks, AutoReset", || {
        let rt = rt(true);
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 9).unwrap();
        let got = Arc::new(AtomicU64::new(0));
        let (tx, rx) = mpsc::channel::<()>();
        let (ptx, prx) = mpsc::channel();
        for _ in 0..3 {
            let (ep, got, tx) = (Arc::clone(&ep), Arc::clone(&got), tx.clone());
            let mut ptx = Some(ptx.clone());
            rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                loop {
                    let evs = match ptx.take() {
                        Some(ptx) => {
                            let first = move |p| ptx.send(p).unwrap();
                            reporting_first_poll(wait(&ep, &mut buf), first).await
                        }
                        None => wait(&ep, &mut buf).await,
                    };
                    assert_eq!(
                        evs,
                        vec![Event {
                            events: Events::IN,
                            data: 9
                        }]
                    );
                    got.fetch_add(1, SeqCst);
                    if tx.send(()).is_err() {
                        return;
                    }
                }
            });
        }
        drop(tx);
        // The first write comes once all three waits are pending.
        for _ in 0..3 {
            assert!(
                prx.recv_timeout(LIMIT).unwrap(),
                "a wait was ready before the write"
            );
        }
        for i in 0..200u64 {
            k.write(1).unwrap();
            rx.recv_timeout(LIMIT)
                .unwrap_or_else(|_| panic!("write {i} was not delivered"));
            // No second delivery of the same write.
            assert_eq!(got.load(SeqCst), i + 1, "write {i}");
            if i % 50 == 0 {
                std::thread::sleep(Duration::from_millis(2));
                assert_eq!(got.load(SeqCst), i + 1, "write {i} delivered twice");
            }
        }
        assert_eq!(k.count().unwrap(), 0, "every write was taken");
        drop(rt);
        no_watcher("bare and queued tasks, AutoReset");
    });
}
