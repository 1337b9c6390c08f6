//! The watcher thread's cost (one test in its own binary: the watcher is process-wide).
//! No kernel source: a pending `wait_async` starts no thread. Kernel sources but no pending
//! wait: still none. A pending wait on an epoll with a kernel fd starts it; it delivers; and
//! with nothing armed any more the thread exits after its linger (about 1 s).

use std::future::Future;
use std::pin::Pin;
use std::task::Context;
use std::time::{Duration, Instant};

use evfd::stats::watcher_stats;
use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

fn poll_once<F: Future + Unpin>(f: &mut F) -> bool {
    let waker = futures::task::noop_waker();
    Pin::new(f)
        .poll(&mut Context::from_waker(&waker))
        .is_ready()
}

#[test]
fn watcher_runs_only_while_a_kernel_wait_is_pending() {
    assert_eq!(watcher_stats(), (0, false));

    // In-memory sources only: pending waits (futures and a blocking wait with a timeout).
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let mut buf = [Event::default(); 4];
    {
        let mut f = ep.wait_async(&mut buf);
        assert!(!poll_once(&mut f));
        assert!(!poll_once(&mut f));
    }
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(20))).unwrap(),
        0
    );
    assert_eq!(watcher_stats(), (0, false), "no kernel source: no thread");

    // A kernel fd registered, nobody waiting: still no thread.
    let k = KernelNotifier::new(Mode::AutoReset).unwrap();
    ep.add(&k, Events::IN, 2).unwrap();
    k.notify().unwrap();
    assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(
        watcher_stats(),
        (0, false),
        "kernel fd, no pending wait: no thread"
    );

    // A pending wait (woken only by its waker: futures' block_on): the watcher starts and
    // delivers.
    let k2 = std::sync::Arc::new(k);
    let k3 = k2.clone();
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        assert_eq!(watcher_stats(), (1, true), "started by the pending wait");
        k3.notify().unwrap();
    });
    let (tx, rx) = std::sync::mpsc::channel();
    let ep2 = ep.clone();
    std::thread::spawn(move || {
        let mut buf = [Event::default(); 4];
        let n = futures::executor::block_on(ep2.wait_async(&mut buf)).unwrap();
        let _ = tx.send((n, buf[0].data));
    });
    let got = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("watchdog: the kernel event never woke the pending wait");
    assert_eq!(got, (1, 2));
    writer.join().unwrap();
    let k = k2;
    assert_eq!(k.count().unwrap(), 0);

    // Nothing armed: the thread exits after its linger.
    let t0 = Instant::now();
    while watcher_stats().1 {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the watcher never exited"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(watcher_stats(), (1, false));
}
