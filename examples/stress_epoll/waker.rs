//! `waker`: evfd next to mio's `Waker` (what a mio event loop, and so every loop built on
//! mio, is woken from another thread with). Both sides register one fd in a `mio::Poll`:
//! mio's `Waker` (an eventfd on Linux, registered edge-triggered; `wake()` writes it, and
//! the loop never reads it), and the fd view of an AutoReset `Notifier`, edge-only
//! (`FdView::set_edge_only`: mio is edge-triggered, so the view rings its doorbell on each
//! edge and never drains it; `notify()` while the kick is pending is an atomic, no
//! syscall), registered through evfd's `mio::event::Source` (feature `mio`, which
//! `--all-features` builds), the loop taking the kick with `FdView::consume`
//! (`examples/mio_loop.rs`).
//!
//! - `loop`: a loop thread (CPU 1) polls with no work but the wake; the main thread (CPU 0)
//!   wakes it and spins until the loop has handled that wake, then wakes it again. Round
//!   trips per second: the wake's whole path, the loop's `epoll_wait` and handler
//!   included. Notes: the doorbell syscalls evfd made per round trip (mio's `Waker`: one
//!   `write(2)` per wake).
//! - `burst`: one thread wakes the loop `BURST` times (a burst of messages sent to a loop
//!   that is busy), then polls once with a zero timeout and handles the wake. Nanoseconds
//!   per wake, the poll and the handling included.
//!
//! No `_contended` rows: the `loop` row's waker spins for its answer.

use std::hint::spin_loop;
use std::sync::atomic::{AtomicU64, Ordering::Acquire, Ordering::Release};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Events as EvfdEvents, Mode, Notifier};
use mio::{Events, Interest, Poll, Token};

use crate::measure::{interleaved, ns_per_item, Cfg};
use crate::pingpong::bounce;
use crate::report::{Out, NS_OP, RT_S};

const WAKE: Token = Token(7);
/// Wakes per poll in `burst`.
const BURST: u64 = 64;

/// One side: how to wake the loop, and how the loop handles an event for `WAKE` (true: it
/// was a wake, which the loop answers).
struct Side {
    poll: Poll,
    wake: Box<dyn Fn() + Send + Sync>,
    take: Box<dyn Fn() -> bool + Send>,
    /// evfd's doorbell syscalls so far (rings + drains); 0 for mio's `Waker`.
    syscalls: Box<dyn Fn() -> u64 + Send + Sync>,
}

fn evfd_side() -> Side {
    let poll = Poll::new().expect("mio Poll");
    let kick = Notifier::builder()
        .mode(Mode::AutoReset)
        .build()
        .expect("notifier");
    let mut view = kick.fd_view().expect("fd_view");
    // mio is edge-triggered: the view needs no drain.
    view.set_edge_only(true).expect("set_edge_only");
    // Through evfd's own `mio::event::Source` (feature `mio`), which lends the fd to
    // nobody, so that each ring is one plain `write(2)`; without the feature, through the
    // fd (a lend: each ring is then a `poll(2)` and a `write(2)`).
    #[cfg(feature = "mio")]
    poll.registry()
        .register(&mut view, WAKE, Interest::READABLE)
        .expect("register");
    #[cfg(not(feature = "mio"))]
    poll.registry()
        .register(
            &mut mio::unix::SourceFd(&std::os::fd::AsRawFd::as_raw_fd(&view)),
            WAKE,
            Interest::READABLE,
        )
        .expect("register");
    let stats = view.clone();
    Side {
        poll,
        wake: Box::new(move || kick.notify().expect("notify")),
        take: Box::new(move || view.consume().contains(EvfdEvents::IN)),
        syscalls: Box::new(move || {
            let s = stats.doorbell_stats();
            s.rings + s.drains
        }),
    }
}

fn mio_side() -> Side {
    let poll = Poll::new().expect("mio Poll");
    let waker = mio::Waker::new(poll.registry(), WAKE).expect("mio Waker");
    Side {
        poll,
        wake: Box::new(move || waker.wake().expect("wake")),
        take: Box::new(|| true),
        syscalls: Box::new(|| 0),
    }
}

/// `loop`: round trips per second, and evfd's doorbell syscalls per round trip.
fn loop_rt(dur: Duration, side: Side) -> (f64, f64) {
    let Side {
        mut poll,
        wake,
        take,
        syscalls,
    } = side;
    let handled = Arc::new(AtomicU64::new(0));
    let h = handled.clone();
    let mut events = Events::with_capacity(8);
    let echo = move || {
        poll.poll(&mut events, Some(Duration::from_millis(20)))
            .expect("poll");
        for e in events.iter() {
            if e.token() == WAKE && take() {
                h.fetch_add(1, Release);
            }
        }
    };
    let s0 = syscalls();
    let (rt, n) = {
        let mut rounds = 0u64;
        let round = || {
            let before = handled.load(Acquire);
            wake();
            let t0 = Instant::now();
            let mut spins = 0u32;
            while handled.load(Acquire) == before {
                spin_loop();
                spins = spins.wrapping_add(1);
                if spins % 4096 == 0 {
                    assert!(
                        t0.elapsed() < Duration::from_secs(10),
                        "waker: a wake was lost"
                    );
                }
            }
            rounds += 1;
        };
        let rt = bounce(dur, (Some(0), Some(1)), echo, round).0;
        (rt, rounds)
    };
    let per_rt = (syscalls() - s0) as f64 / n.max(1) as f64;
    (rt, per_rt)
}

/// `burst`: ns per wake of `BURST` wakes and one zero-timeout poll that handles them.
fn burst_ns(dur: Duration, side: Side) -> f64 {
    let Side {
        mut poll,
        wake,
        take,
        ..
    } = side;
    let mut events = Events::with_capacity(8);
    ns_per_item(dur, 16, || {
        for _ in 0..BURST {
            wake();
        }
        poll.poll(&mut events, Some(Duration::ZERO)).expect("poll");
        let woken = events.iter().filter(|e| e.token() == WAKE).count();
        assert!(woken >= 1 && take(), "waker: a burst was not seen");
        BURST
    })
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    let dur = cfg.dur;
    let mut per_rt = Vec::new();
    let (e, t) = interleaved(
        cfg.reps,
        || {
            let (rt, s) = loop_rt(dur, evfd_side());
            per_rt.push(s);
            rt
        },
        || loop_rt(dur, mio_side()).0,
    );
    out.row("waker", "loop", 2, RT_S, (&e, &t));
    per_rt.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out.notes.push(format!(
        "waker loop: evfd's doorbell syscalls per round trip (rings + drains), median {:.2} \
         (mio's Waker: one write(2) per wake)",
        per_rt[per_rt.len() / 2]
    ));
    let (e, t) = interleaved(
        cfg.reps,
        || burst_ns(dur, evfd_side()),
        || burst_ns(dur, mio_side()),
    );
    out.row("waker", "burst", 1, NS_OP, (&e, &t));
}
