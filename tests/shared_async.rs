//! `SharedNotifier::read_async` / `write_async` woken by a peer process, on tokio and on
//! `futures`' executor; a read future's wake costs the writer's one ring and no drain;
//! Semaphore futures sharing one edge all hear a write of several units; cancellation
//! consumes nothing and unregisters.

mod shared_util;

use std::future::Future;
use std::pin::pin;
use std::task::{Context, Poll};
use std::time::Duration;

use evfd::{Mode, SharedNotifier, LIMIT};
use shared_util::{connected, rt};

const LONG: Duration = Duration::from_secs(10);

/// The peer's entry point (does nothing in a normal test run).
#[test]
fn peer_entry() {
    shared_util::peer_main();
}

#[test]
fn read_async_woken_by_peer_each_mode() {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let (s, mut p) = connected(mode, 0);
        // The peer writes once this process's future is pending (registered on the bell,
        // edge-only: no level consumer).
        p.send("wait_edges 1");
        p.send("s w 3");
        let got = rt()
            .block_on(async { tokio::time::timeout(LONG, s.read_async()).await })
            .expect("read_async woken in time")
            .unwrap();
        assert_eq!(got, if mode == Mode::Semaphore { 1 } else { 3 }, "{mode:?}");
        assert_eq!(p.reply(), "ok 1");
        assert_eq!(p.reply(), "ok 0");
        // Completed: no longer a doorbell consumer of either kind.
        assert_eq!((s.sleepers().2, s.edge_consumers()), (0, 0), "{mode:?}");
        // The peer's fill rang once; nobody drained.
        assert_eq!(p.cmd("stats"), "ok 0 0 1 0", "{mode:?}");
        assert_eq!(s.stats().drains, 0, "{mode:?}");
    }
}

#[test]
fn read_async_stream_of_bursts_counts_every_unit() {
    let (s, mut p) = connected(Mode::Counter, 0);
    p.send("burst 5000 50");
    let total = futures::executor::block_on(async {
        let mut got = 0;
        while got < 5000 {
            got += s.read_async().await.unwrap();
        }
        got
    });
    assert_eq!(total, 5000);
    assert_eq!(p.reply(), "ok");
    assert_eq!(s.count(), 0);
    assert_eq!((s.sleepers(), s.edge_consumers()), ((0, 0, 0), 0));
    // Each wake cost the peer one ring (a fill with this side's future pending), and
    // neither side ever drained the doorbell.
    let peer = p.cmd("stats");
    let f: Vec<u64> = peer
        .split(' ')
        .skip(1)
        .map(|x| x.parse().unwrap())
        .collect();
    let (rings, drains) = (f[2], f[3]);
    assert!((1..=5000).contains(&rings), "{peer}");
    assert_eq!(drains, 0, "{peer}");
    assert_eq!(s.stats().drains, 0);
}

/// Semaphore futures of one process share one edge of the doorbell: a single write of
/// several units (one fill, one ring) must still complete every pending future, each
/// with 1. The future the edge woke rings again while units are left and others wait.
#[test]
fn semaphore_futures_sharing_one_edge_all_complete() {
    let (s, mut p) = connected(Mode::Semaphore, 0);
    for k in [2u64, 3, 5] {
        // Two workers: the futures are pending (registered) before the peer writes.
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_time()
            .build()
            .unwrap();
        let futs: Vec<_> = (0..k)
            .map(|_| {
                let s = s.clone();
                rt.spawn(async move { s.read_async().await })
            })
            .collect();
        p.send(&format!("wait_edges {k}"));
        assert_eq!(p.reply(), format!("ok {k}"));
        p.send(&format!("s w {k}"));
        rt.block_on(async {
            for f in futs {
                let got = tokio::time::timeout(LONG, f)
                    .await
                    .unwrap_or_else(|_| panic!("k = {k}: a future was never woken"));
                assert_eq!(got.unwrap().unwrap(), 1, "k = {k}");
            }
        });
        assert_eq!(p.reply(), "ok 0");
        assert_eq!(s.count(), 0, "k = {k}");
        assert_eq!(s.edge_consumers(), 0, "k = {k}");
    }
}

#[test]
fn write_async_waits_for_room_made_by_peer() {
    let (s, mut p) = connected(Mode::Counter, LIMIT);
    p.send("wait_sleepers 0 1 0");
    p.send("s tr");
    rt().block_on(async { tokio::time::timeout(LONG, s.write_async(4)).await })
        .expect("write_async woken in time")
        .unwrap();
    assert_eq!(p.reply(), "ok 0 1 0");
    assert_eq!(p.reply(), format!("ok {LIMIT}"));
    assert_eq!(s.count(), 4);
}

#[test]
fn cancelled_futures_consume_nothing_and_unregister() {
    let s = SharedNotifier::new(Mode::AutoReset).unwrap();
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    {
        let mut f = pin!(s.read_async());
        assert!(f.as_mut().poll(&mut cx).is_pending());
        assert_eq!(
            (s.sleepers().2, s.edge_consumers()),
            (0, 1),
            "pending: an edge-only doorbell consumer"
        );
    }
    assert_eq!(s.edge_consumers(), 0, "dropped: unregistered");
    s.write(2).unwrap();
    assert_eq!(s.count(), 2, "nothing consumed");
    let rings = s.stats().rings;
    s.try_read().unwrap();
    s.write(1).unwrap();
    assert_eq!(s.stats().rings, rings, "no consumer left: no ring");

    let full = SharedNotifier::builder().initial(LIMIT).build().unwrap();
    {
        let mut f = pin!(full.write_async(1));
        assert!(f.as_mut().poll(&mut cx).is_pending());
    }
    assert_eq!(full.count(), LIMIT, "a dropped write added nothing");
    assert_eq!(full.try_read().unwrap(), LIMIT);
    // The invalid write fails at once.
    let mut f = pin!(full.write_async(u64::MAX));
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(Err(e)) => assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput),
        other => panic!("{other:?}"),
    }
}

/// A `SharedFdView` in tokio's reactor (`AsyncFd`), woken by writes of the peer process:
/// each 0 → non-zero edge is one readiness event; every unit is counted.
#[cfg(feature = "tokio")]
#[test]
fn fd_view_in_tokio_async_fd_woken_by_peer() {
    let (s, mut p) = connected(Mode::Counter, 0);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    p.send("burst 2000 20");
    let got = rt.block_on(async {
        let afd = s.fd_view().unwrap().into_async_fd().unwrap();
        let mut got = 0u64;
        while got < 2000 {
            let r = tokio::time::timeout(
                LONG,
                afd.async_io(tokio::io::Interest::READABLE, |v| v.notifier().try_read()),
            )
            .await
            .expect("readiness in time");
            got += r.unwrap();
        }
        got
    });
    assert_eq!(got, 2000);
    assert_eq!(p.reply(), "ok");
    assert_eq!(s.count(), 0);
}
