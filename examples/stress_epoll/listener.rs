//! `listener`: evfd next to `event-listener` (smol-rs's notification primitive, which
//! async-channel, async-lock and async-std wait on): a token bounced between two threads
//! with blocking waits (`block-cross`: the threads on CPUs 0 and 1; `block-same`: both on
//! CPU 0, where no spin can catch the other thread and every hand-off sleeps) and between
//! two tasks on a 2-worker tokio runtime (`async`, the `async_pingpong` shape). Round trips
//! per second.
//!
//! evfd: a `Notifier` per direction, `write(1)`, then `read()` or `read_async()`.
//! event-listener has no count, so its side is the pattern its documentation gives: a flag
//! (`AtomicBool`) and an `Event` per direction; a wait takes the flag, else makes a listener
//! (`listener!`: on the stack, no allocation), takes the flag again, and waits (`wait()`,
//! `.await`); the other side sets the flag and calls `notify(1)`. Each side at its best:
//! evfd's default blocking wait spins (adaptively) before it sleeps, event-listener's parks
//! the thread at once (its only way to wait).
//!
//! Under a co-tenant (`_contended`): `block-cross` and `async`.

use std::sync::Arc;
use std::time::Duration;

use evfd::Notifier;

use crate::async_pingpong::{ap_bounce, ap_evfd, tokio_rt};
use crate::measure::{interleaved, Cfg, Placement};
use crate::pingpong::bounce;
use crate::report::{Out, RT_S};
use crate::twin::Token;

/// How long the echo side waits before it looks at the stop flag again.
const ECHO_WAIT: Duration = Duration::from_millis(20);

fn block_evfd(dur: Duration, cpus: Placement) -> f64 {
    let (a, b) = (Notifier::new(), Notifier::new());
    let (a2, b2) = (a.clone(), b.clone());
    let echo = move || {
        if b2.read_timeout(ECHO_WAIT).is_ok() {
            a2.write(1).unwrap();
        }
    };
    let round = || {
        b.write(1).unwrap();
        a.read().unwrap();
    };
    bounce(dur, cpus, echo, round).0
}

fn block_listener(dur: Duration, cpus: Placement) -> f64 {
    let (a, b) = (Arc::new(Token::default()), Arc::new(Token::default()));
    let (a2, b2) = (a.clone(), b.clone());
    let echo = move || {
        if b2.wait(ECHO_WAIT) {
            a2.give();
        }
    };
    let round = || {
        b.give();
        assert!(
            a.wait(Duration::from_secs(10)),
            "event-listener lost a wake"
        );
    };
    bounce(dur, cpus, echo, round).0
}

fn async_listener(rt: &tokio::runtime::Runtime, dur: Duration) -> f64 {
    ap_bounce!(
        rt,
        dur,
        Arc::new(Token::default()),
        Arc::new(Token::default()),
        |t| t.give(),
        |t| t.wait_async().await
    )
}

pub fn run(cfg: &Cfg, out: &mut Out) {
    let dur = cfg.dur;
    let cases: [(&str, Placement, bool); 2] = [
        ("block-cross", (Some(0), Some(1)), true),
        ("block-same", (Some(0), Some(0)), false),
    ];
    for (variant, cpus, contended) in cases {
        if cfg.contended && !contended {
            continue;
        }
        let (e, t) = interleaved(
            cfg.reps,
            || block_evfd(dur, cpus),
            || block_listener(dur, cpus),
        );
        out.row("listener", variant, 2, RT_S, (&e, &t));
    }
    let rt = tokio_rt();
    let (e, t) = interleaved(cfg.reps, || ap_evfd(&rt, dur), || async_listener(&rt, dur));
    out.row("listener", "async", 2, RT_S, (&e, &t));
}
