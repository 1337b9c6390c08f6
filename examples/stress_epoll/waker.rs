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
//! - `wake_p50`: a loop thread asleep in `Poll::poll`, woken from another thread; the
//!   latency from just before the wake to the loop's return from its handler, p50 over
//!   200 (`--quick`) or 600 wakes per repetition, the two sides' wakes taken in turn (the
//!   `mixed` harness: 300 µs between wakes, so that the loop is asleep at each; each
//!   round starts with the other side). A wake's cost there is the hop to a sleeping
//!   thread (its vCPU halted, ~20 µs here) and what each side does around it. Notes: the
//!   doorbell syscalls evfd made per wake (mio's `Waker`: one `write(2)` per wake).
//! - `burst`: one thread wakes the loop `BURST` times (a burst of messages sent to a loop
//!   that is busy), then polls once with a zero timeout and handles the wake. Nanoseconds
//!   per wake, the poll and the handling included.
//!
//! No `_contended` rows.

use std::sync::atomic::Ordering::SeqCst;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Events as EvfdEvents, Mode, Notifier};
use mio::{Events, Interest, Poll, Token};

use crate::measure::{interleaved, ns_per_item, pin, Cfg};
use crate::mixed;
use crate::report::{Out, NS_OP, US};

const WAKE: Token = Token(7);
/// Wakes per poll in `burst`.
const BURST: u64 = 64;

/// One side: how to wake the loop, and how the loop handles an event for `WAKE` (true: it
/// was a wake, which the loop answers).
struct Loop {
    poll: Poll,
    wake: Box<dyn Fn() + Send + Sync>,
    take: Box<dyn Fn() -> bool + Send>,
    /// evfd's doorbell syscalls so far (rings + drains); 0 for mio's `Waker`.
    syscalls: Arc<dyn Fn() -> u64 + Send + Sync>,
}

fn evfd_loop() -> Loop {
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
    Loop {
        poll,
        wake: Box::new(move || kick.notify().expect("notify")),
        take: Box::new(move || view.consume().contains(EvfdEvents::IN)),
        syscalls: Arc::new(move || {
            let s = stats.doorbell_stats();
            s.rings + s.drains
        }),
    }
}

fn mio_loop() -> Loop {
    let poll = Poll::new().expect("mio Poll");
    let waker = mio::Waker::new(poll.registry(), WAKE).expect("mio Waker");
    Loop {
        poll,
        wake: Box::new(move || waker.wake().expect("wake")),
        take: Box::new(|| true),
        syscalls: Arc::new(|| 0),
    }
}

/// `wake_p50`'s side: the loop thread (CPU 1), reporting each wake's latency to the
/// `mixed` harness; it leaves once the side is dropped (its next poll times out).
fn wake_side(base: Instant, l: Loop) -> mixed::Side {
    let Loop {
        mut poll,
        wake,
        take,
        syscalls,
    } = l;
    let alive = Arc::new(syscalls);
    let weak = Arc::downgrade(&alive);
    mixed::side(
        base,
        move || {
            let _side = &alive;
            wake()
        },
        move |stamp, base, tx| {
            std::thread::spawn(move || {
                pin(Some(1));
                let mut events = Events::with_capacity(8);
                loop {
                    poll.poll(&mut events, Some(Duration::from_millis(50)))
                        .expect("poll");
                    let woke = events
                        .iter()
                        .filter(|e| e.token() == WAKE)
                        .fold(false, |w, _| take() || w);
                    if woke {
                        let t = mixed::now_ns(base);
                        let lat = (t - stamp.load(SeqCst)) as f64 / 1000.0;
                        if tx.send(lat).is_err() {
                            return;
                        }
                    } else if weak.strong_count() == 0 {
                        return;
                    }
                }
            });
        },
    )
}

/// `burst`: ns per wake of `BURST` wakes and one zero-timeout poll that handles them.
fn burst_ns(dur: Duration, side: Loop) -> f64 {
    let Loop {
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
    let n = if cfg.quick { 200 } else { 600 };
    let (mut p50, mut per_wake) = ((Vec::new(), Vec::new()), Vec::new());
    for _ in 0..cfg.reps {
        let base = Instant::now();
        let evfd = evfd_loop();
        let s0 = (evfd.syscalls)();
        let stats = Arc::clone(&evfd.syscalls);
        let sides = [wake_side(base, evfd), wake_side(base, mio_loop())];
        let lat = mixed::wakes(n, base, &sides);
        per_wake.push((stats() - s0) as f64 / n as f64);
        p50.0.push(mixed::pct(&lat[0], 0.50));
        p50.1.push(mixed::pct(&lat[1], 0.50));
    }
    out.row("waker", "wake_p50", 2, US, (&p50.0, &p50.1));
    per_wake.sort_by(|a, b| a.partial_cmp(b).unwrap());
    out.notes.push(format!(
        "waker wake_p50: evfd's doorbell syscalls per wake (rings + drains), median {:.2} \
         (mio's Waker: one write(2) per wake)",
        per_wake[per_wake.len() / 2]
    ));
    let (e, t) = interleaved(
        cfg.reps,
        || burst_ns(dur, evfd_loop()),
        || burst_ns(dur, mio_loop()),
    );
    out.row("waker", "burst", 1, NS_OP, (&e, &t));
}
