//! Loom models of the fd-view doorbell protocol (`crate::fd`), over the real notifier, wait
//! queue and view code, with the in-memory mock doorbell (`sys::mock`): no syscalls.
//!
//! Each model checks, after every interleaving, claim 1 of `crate::fd`:
//! `*rung == mirror == mock fd readable == (count > 0)` at quiescence (and, through the
//! mock, that a drain only ever hits a rung doorbell). `edge_after_would_block` checks
//! claim 2: a consumer that saw `WouldBlock` gets a ring after it if the notifier is
//! readable at the end.
//!
//! Run: `RUSTFLAGS="--cfg evfd_loom" cargo test --release --lib tests::loom_fd`
//! (at least 3 preemptions here, whatever `LOOM_MAX_PREEMPTIONS` says).

use loom::thread;

use crate::{Events, FdView, Mode, Notifier};

fn model(f: impl Fn() + Sync + Send + 'static) {
    let mut b = loom::model::Builder::new();
    // These models are small (well under a second each at 3): never explore less than that,
    // whatever LOOM_MAX_PREEMPTIONS says for the other models.
    b.preemption_bound = Some(b.preemption_bound.map_or(3, |p| p.max(3)));
    b.check(f);
}

/// Claim 1 at quiescence.
fn assert_consistent(n: &Notifier, v: &FdView) {
    let readable = n.count() > 0;
    let (rung, mirror) = v.rung_state();
    assert_eq!(rung, readable, "rung vs count {}", n.count());
    assert_eq!(mirror, readable, "mirror vs count {}", n.count());
    assert_eq!(
        v.bell().is_rung(),
        readable,
        "doorbell fd vs count {}",
        n.count()
    );
}

fn notifier(mode: Mode, initial: u64) -> Notifier {
    Notifier::builder()
        .mode(mode)
        .initial(initial)
        .build()
        .unwrap()
}

/// The basic edge: empty; a write races a read.
#[test]
fn write_vs_read_from_empty() {
    model(|| {
        let n = notifier(Mode::Counter, 0);
        let v = n.fd_view().unwrap();
        let w = {
            let n = n.clone();
            thread::spawn(move || n.write(1).unwrap())
        };
        let _ = n.try_read();
        w.join().unwrap();
        assert_consistent(&n, &v);
    });
}

/// The fast path's store-buffer race: rung; a read empties it while a write refills it.
#[test]
fn read_vs_write_when_rung() {
    model(|| {
        let n = notifier(Mode::Counter, 1);
        let v = n.fd_view().unwrap();
        assert_eq!(v.doorbell_stats().rings, 1);
        let r = {
            let n = n.clone();
            thread::spawn(move || n.try_read().unwrap())
        };
        n.write(1).unwrap();
        let got = r.join().unwrap();
        assert!(got == 1 || got == 2);
        assert_consistent(&n, &v);
    });
}

/// Two writers against a reader (3 threads).
#[test]
fn two_writers_one_reader() {
    model(|| {
        let n = notifier(Mode::Counter, 0);
        let v = n.fd_view().unwrap();
        let ws: Vec<_> = (0..2)
            .map(|_| {
                let n = n.clone();
                thread::spawn(move || n.write(1).unwrap())
            })
            .collect();
        let mut got = n.try_read().unwrap_or(0);
        for w in ws {
            w.join().unwrap();
        }
        assert_consistent(&n, &v);
        got += n.try_read().unwrap_or(0);
        assert_eq!(got, 2);
        assert_consistent(&n, &v);
    });
}

/// Semaphore: partial reads keep it readable (no KEY_EMPTIED), the last one empties it,
/// while a write comes in.
#[test]
fn semaphore_reads_vs_write() {
    model(|| {
        let n = notifier(Mode::Semaphore, 2);
        let v = n.fd_view().unwrap();
        let r = {
            let n = n.clone();
            thread::spawn(move || {
                n.try_read().unwrap();
                n.try_read().unwrap_or(0)
            })
        };
        n.write(1).unwrap();
        r.join().unwrap();
        assert_consistent(&n, &v);
    });
}

/// AutoReset: the view's consume (delivery) resets while a write comes in.
#[test]
fn autoreset_consume_vs_write() {
    model(|| {
        let n = notifier(Mode::AutoReset, 1);
        let v = n.fd_view().unwrap();
        let c = {
            let v = v.clone();
            thread::spawn(move || v.consume())
        };
        n.write(2).unwrap();
        let seen = c.join().unwrap();
        assert!(seen.contains(Events::IN));
        assert_consistent(&n, &v);
    });
}

/// A view created while a write is in progress (hook vs. initial sync).
#[test]
fn view_created_during_write() {
    model(|| {
        let n = notifier(Mode::Counter, 0);
        let w = {
            let n = n.clone();
            thread::spawn(move || n.write(1).unwrap())
        };
        let v = n.fd_view().unwrap();
        w.join().unwrap();
        assert_consistent(&n, &v);
        assert_eq!(n.try_read().unwrap(), 1);
        assert_consistent(&n, &v);
    });
}

/// A view dropped while a write is in progress: afterwards the queue holds nothing of
/// ours, so no further change can reach a doorbell.
#[test]
fn view_dropped_during_write() {
    model(|| {
        let n = notifier(Mode::Counter, 0);
        let v = n.fd_view().unwrap();
        let w = {
            let n = n.clone();
            thread::spawn(move || n.write(1).unwrap())
        };
        drop(v);
        w.join().unwrap();
        assert_eq!(n.inner.wq.len(), 0);
        assert_eq!(n.inner.wq.interest(), Events::empty());
    });
}

/// Claim 2. Count 1 and rung. B empties it; A tries to read (a second consumer, as an ET
/// poller's task would) and, if it sees `WouldBlock`, snapshots the ring counter; W
/// refills. If the notifier is readable at the end and A saw `WouldBlock`, a ring must
/// have happened after A's observation, or an edge-triggered A would sleep forever.
#[test]
fn edge_after_would_block() {
    model(|| {
        let n = notifier(Mode::Counter, 1);
        let v = n.fd_view().unwrap();
        let b = {
            let n = n.clone();
            thread::spawn(move || n.try_read().is_ok())
        };
        let w = {
            let n = n.clone();
            thread::spawn(move || n.write(1).unwrap())
        };
        // A: a failed try_read changes nothing and wakes nobody; the ring counter is a std
        // atomic, read with no loom operation in between, so this is the count at `t`.
        let a_saw_empty = n.try_read().is_err();
        let rings_at_t = v.doorbell_stats().rings;
        b.join().unwrap();
        w.join().unwrap();
        assert_consistent(&n, &v);
        if a_saw_empty && n.count() > 0 {
            assert!(
                v.doorbell_stats().rings > rings_at_t,
                "readable at the end, but no ring after the consumer's WouldBlock"
            );
        }
    });
}
