//! Loom models of the fd-view doorbell protocol (`crate::fd`), over the real notifier, wait
//! queue and view code, with the in-memory mock doorbell (`sys::mock`): no syscalls.
//!
//! Each model checks, after every interleaving, claim 1 of `crate::fd`:
//! `*rung == mirror == mock fd readable == (count > 0)` at quiescence (and, through the
//! mock, that a drain only ever hits a rung doorbell). `edge_after_would_block` checks
//! claim 2: a consumer that saw `WouldBlock` gets a ring after it if the notifier is
//! readable at the end. The `settled_*` models start from a rung view whose queue has
//! settled, so that writes may skip the queue lock; `edge_only_*` from an edge-only view.
//! The `epoll_view_*` models check both claims for a view of an `Epoll` (readable iff a
//! live item is queued), harvests racing notifies.
//!
//! Run: `RUSTFLAGS="--cfg evfd_loom" cargo test --release --lib tests::loom_fd`
//! (at least 3 preemptions here, whatever `LOOM_MAX_PREEMPTIONS` says).

use std::time::Duration;

use loom::thread;

use crate::epoll::Epoll;
use crate::events::{Event, Events};
use crate::fd::FdView;
use crate::loom::SeedLoad;
use crate::mode::Mode;
use crate::notifier::Notifier;

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

/// A thread that writes 1 to `n`.
fn writer(n: &Notifier) -> thread::JoinHandle<()> {
    let n = n.clone();
    thread::spawn(move || n.write(1).unwrap())
}

/// Claim 2's race: B (its own thread) runs `consume`, W writes 1, and A (this thread)
/// looks (`look`: whether it saw the notifier empty, as an edge-triggered poller's task
/// would before it waits); then the ring counter is read (a std atomic, with no loom
/// operation between it and the look: the count at A's look). If A saw the notifier empty
/// and it is readable at the end, a ring must have come after A's look, or an
/// edge-triggered A would sleep for ever.
fn claim_two(
    n: &Notifier,
    v: &FdView,
    consume: impl FnOnce() + Send + 'static,
    look: impl FnOnce() -> bool,
) {
    let b = thread::spawn(consume);
    let w = writer(n);
    let a_saw_empty = look();
    let rings_at_t = v.doorbell_stats().rings;
    b.join().unwrap();
    w.join().unwrap();
    if a_saw_empty && n.count() > 0 {
        assert!(
            v.doorbell_stats().rings > rings_at_t,
            "readable at the end, but no ring after the consumer's look"
        );
    }
}

/// A consumer's look at the count (as [`Notifier::count`]), through
/// [`SeedLoad`](crate::loom::SeedLoad): a plain load under loom could read 0 after the
/// write's ring was counted (the ring counter is a std atomic, which loom does not order),
/// and the ring would then look as if it came before the look.
fn looks_empty(n: &Notifier) -> bool {
    n.core.count.seed_load() == 0
}

/// [`claim_two`] with two readers: B's `try_read` against A's, which looks (finds it empty).
fn claim_two_reading(n: &Notifier, v: &FdView) {
    let b = n.clone();
    claim_two(
        n,
        v,
        move || {
            let _ = b.try_read();
        },
        || n.try_read().is_err(),
    );
}

/// The basic edge: empty; a write races a read.
#[test]
fn write_vs_read_from_empty() {
    model(|| {
        let n = notifier(Mode::Counter, 0);
        let v = n.fd_view().unwrap();
        let w = writer(&n);
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
        let ws: Vec<_> = (0..2).map(|_| writer(&n)).collect();
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
        let w = writer(&n);
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
        let w = writer(&n);
        drop(v);
        w.join().unwrap();
        assert_eq!(n.core.wq.len(), 0);
        assert_eq!(n.core.wq.interest(), Events::empty());
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
        // A: a failed try_read changes nothing and wakes nobody.
        claim_two_reading(&n, &v);
        assert_consistent(&n, &v);
    });
}

// ---------------------------------------------------------------------------------------
// Rung views settle the source's queue (`crate::fd`, "Rung views settle the queue"): a
// write to a readable source skips the queue lock; the sync that stores `mirror = false`
// clears the mark before it looks at the source again.

/// A rung view whose queue has settled (the second write found it rung).
fn settled_view(mode: Mode) -> (Notifier, FdView) {
    let n = notifier(mode, 0);
    let v = n.fd_view().unwrap();
    n.write(1).unwrap(); // rings
    n.write(1).unwrap(); // finds it rung: settles
    assert!(n.core.wq.is_settled());
    assert_eq!(v.doorbell_stats().rings, 1);
    (n, v)
}

/// A write that may skip (settled) against a read that empties the notifier: claim 1 at
/// the end, every unit read exactly once.
#[test]
fn settled_write_vs_emptying_read() {
    model(|| {
        let (n, v) = settled_view(Mode::Counter);
        let w = writer(&n);
        let got = n.try_read().unwrap();
        w.join().unwrap();
        assert_consistent(&n, &v);
        assert_eq!(got + n.count(), 3);
    });
}

/// Claim 2 with a skipping write: B empties the settled notifier, A (a second consumer)
/// may see `WouldBlock`, W refills (skipping the lock if it still sees the mark).
#[test]
fn settled_edge_after_would_block() {
    model(|| {
        let (n, v) = settled_view(Mode::AutoReset);
        let b = v.clone();
        claim_two(
            &n,
            &v,
            move || {
                let _ = b.consume();
            },
            || looks_empty(&n),
        );
        assert_consistent(&n, &v);
    });
}

/// An edge-only view of a notifier (`FdView::set_edge_only`) runs in fill mode: its hook
/// hears only fills (`KEY_FILLED`) and rings at each; consumptions do nothing for it.
/// Claim 2 with a reader that empties, a second consumer's `WouldBlock` and a write.
#[test]
fn edge_only_edge_after_would_block() {
    model(|| {
        let n = notifier(Mode::Counter, 1);
        let v = n.fd_view().unwrap();
        v.set_edge_only(true).unwrap();
        claim_two_reading(&n, &v);
        assert_eq!(v.doorbell_stats().drains, 0);
    });
}

/// Claim 2 in fill mode with an AutoReset consumer (`consume`, which leaves the view
/// alone): B consumes, W writes, A looks; a fill after A's look rings after it.
#[test]
fn edge_only_consume_vs_write() {
    model(|| {
        let n = notifier(Mode::AutoReset, 1);
        let v = n.fd_view().unwrap();
        v.set_edge_only(true).unwrap();
        let b = v.clone();
        claim_two(
            &n,
            &v,
            move || {
                let _ = b.consume();
            },
            || looks_empty(&n),
        );
        assert_eq!(v.doorbell_stats().drains, 0);
    });
}

/// Claim 2 in fill mode with two writers: A (this thread) consumes, which empties the
/// notifier at its look; a fill after it may come while the other write's ring is still in
/// flight in the queue's bell slot, and is then rung by that ringer (`AGAIN`).
#[test]
fn edge_only_fill_while_a_ring_is_in_flight() {
    model(|| {
        let n = notifier(Mode::AutoReset, 0);
        let v = n.fd_view().unwrap();
        v.set_edge_only(true).unwrap();
        let a = v.clone();
        let other = n.clone();
        claim_two(
            &n,
            &v,
            move || other.write(1).unwrap(),
            || {
                let _ = a.consume();
                true
            },
        );
        assert_eq!(v.doorbell_stats().drains, 0);
    });
}

/// Leaving fill mode while a write and a read run: claim 1 holds at the end (the switch
/// re-derives the level state from the source, draining what fill mode left).
#[test]
fn edge_only_back_to_level_vs_write_and_read() {
    model(|| {
        let n = notifier(Mode::Counter, 0);
        let v = n.fd_view().unwrap();
        v.set_edge_only(true).unwrap();
        n.write(1).unwrap(); // a fill: rung, never drained
        let w = writer(&n);
        let r = {
            let n = n.clone();
            thread::spawn(move || n.try_read().unwrap_or(0))
        };
        v.set_edge_only(false).unwrap();
        w.join().unwrap();
        let got = r.join().unwrap();
        assert_consistent(&n, &v);
        assert_eq!(got + n.count(), 2);
    });
}

// ---------------------------------------------------------------------------------------
// A view of an `Epoll`: its readability is the ready list (`ReadyState::any_live`), changed
// under the epoll's `ready` mutex; harvests (and deletes) tell the view when it emptied.

/// Claim 1 for an epoll's view at quiescence: rung iff a live item is queued.
fn assert_epoll_consistent(ep: &Epoll, v: &FdView) {
    let readable = ep.inner.ready.lock().any_live();
    assert_eq!(
        v.rung_state(),
        (readable, readable),
        "rung/mirror vs ready list"
    );
    assert_eq!(v.bell().is_rung(), readable, "doorbell vs ready list");
}

fn wait0(ep: &Epoll) -> usize {
    let mut buf = [Event::default(); 2];
    ep.wait(&mut buf, Some(Duration::ZERO)).unwrap()
}

/// A notify queues an edge-triggered item while a harvest delivers it (or finds nothing):
/// the view ends up rung iff the item is still queued, and a consumer whose harvest
/// returned 0 gets a ring after it began if the epoll is readable at the end (claim 2; the
/// refill may land on the overflow list of that very harvest).
#[test]
fn epoll_view_notify_vs_harvest() {
    model(|| {
        let ep = Epoll::new();
        let n = notifier(Mode::Counter, 0);
        ep.add(&n, Events::IN | Events::ET, 1).unwrap();
        let v = ep.fd_view().unwrap();
        let w = writer(&n);
        // The consumer's observation point is before its harvest (an ET poller saw the fd
        // before calling `wait`); the harvest's own syncs (a re-ring) count as after it.
        let rings_at_t = v.doorbell_stats().rings;
        let got = wait0(&ep);
        w.join().unwrap();
        assert_epoll_consistent(&ep, &v);
        let readable = ep.inner.ready.lock().any_live();
        if got == 0 && readable {
            assert!(
                v.doorbell_stats().rings > rings_at_t,
                "queued at the end, but no ring since the harvest that returned 0 began"
            );
        }
        // Whatever the interleaving, the write is delivered exactly once.
        assert_eq!(got + wait0(&ep), 1);
        assert_epoll_consistent(&ep, &v);
    });
}

/// A level-triggered item is queued and rung; its notifier is read (stale) while another
/// write refills it and the consumer harvests: the harvest that drops the stale entry races
/// the refill's queueing. Claims 1 and 2 as above; then a delete empties it.
#[test]
fn epoll_view_stale_drop_vs_refill() {
    model(|| {
        let ep = Epoll::new();
        let n = notifier(Mode::Counter, 1);
        ep.add(&n, Events::IN, 1).unwrap();
        let v = ep.fd_view().unwrap();
        assert_eq!(v.doorbell_stats().rings, 1);
        n.try_read().unwrap(); // stale: still queued, still rung
        let w = writer(&n);
        // The consumer's observation point is before its harvest (an ET poller saw the fd
        // before calling `wait`); the harvest's own syncs (a re-ring) count as after it.
        let rings_at_t = v.doorbell_stats().rings;
        let got = wait0(&ep);
        w.join().unwrap();
        assert_epoll_consistent(&ep, &v);
        let readable = ep.inner.ready.lock().any_live();
        if got == 0 && readable {
            assert!(
                v.doorbell_stats().rings > rings_at_t,
                "queued at the end, but no ring since the harvest that returned 0 began"
            );
        }
        ep.delete(&n).unwrap();
        assert_epoll_consistent(&ep, &v);
        assert!(!v.bell().is_rung());
    });
}

/// Claim 2 with two consumers, as `edge_after_would_block` for a notifier: an
/// edge-triggered item is queued and rung; B harvests it (emptying the epoll), W refills it,
/// A harvests too. If A's harvest returned 0 and the epoll is readable at the end, a ring
/// happened after A began, or an edge-triggered A would sleep forever.
#[test]
fn epoll_view_edge_after_empty_harvest() {
    model(|| {
        let ep = Epoll::new();
        let n = notifier(Mode::Counter, 1);
        ep.add(&n, Events::IN | Events::ET, 1).unwrap();
        let v = ep.fd_view().unwrap();
        let b = {
            let ep = ep.clone();
            thread::spawn(move || wait0(&ep))
        };
        let w = writer(&n);
        let rings_at_t = v.doorbell_stats().rings;
        let a_got = wait0(&ep);
        let b_got = b.join().unwrap();
        w.join().unwrap();
        assert_epoll_consistent(&ep, &v);
        let readable = ep.inner.ready.lock().any_live();
        if a_got == 0 && readable {
            assert!(
                v.doorbell_stats().rings > rings_at_t,
                "queued at the end, but no ring since A's empty harvest began"
            );
        }
        assert!(a_got + b_got >= 1);
    });
}
