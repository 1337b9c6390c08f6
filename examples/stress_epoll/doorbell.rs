//! `doorbell`: a notifier with a fd view registered (LT) in a kernel epoll, vs a plain
//! kernel eventfd in the same epoll. Rows (unit `syscalls/op`, except `awake_notify` in
//! ns/op):
//!
//! - `awake_per_notify`: the consumer woke from `epoll_wait` and is busy (not draining)
//!   while a producer notifies N times: syscalls per notify (target 0; the twin's is 1).
//!   `awake_notify`: the producer's ns per notify in that state.
//! - `asleep_writes_per_edge`, `asleep_reads_per_edge`: per edge, the consumer sleeps in
//!   `epoll_wait` (checked in /proc), the producer notifies once, the consumer wakes and
//!   reads (evfd: `try_read` until `WouldBlock`; twin: one `read(2)`, which empties an
//!   eventfd). Syscalls of both threads per edge (target ≤ 1 + 1; the twin's is 1 + 1).
//!
//! Syscalls are counted, not timed or guessed: by the kernel's per-thread read/write
//! accounting (`syscount::RwProbe`), which sees every read(2)/write(2)-family call of the
//! producer and consumer threads, doorbell or not — not futex or epoll_wait, which the twin
//! makes too. Where that is missing, `evfd::stats::doorbell_stats()` deltas (evfd) and the calls
//! made (twin) are used; either way a note under the table says which, and flags any
//! disagreement.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::Notifier;
use rustix::event::epoll;

use crate::measure::Cfg;
use crate::report::{Out, NS_OP, SYSCALLS_OP};
use crate::syscount::{gettid, Counted, RwProbe, SleepProbe};
use crate::twin::{kadd, kepoll, kfd, kread, kwait, kwrite};

/// Consumer awake: the fd (a view, or the twin eventfd) is readable and registered in a
/// kernel epoll (LT); the consumer woke from `epoll_wait` and is busy (sleeping 1 ms at a
/// time, not draining) while this thread, the producer, notifies `n` times. Returns the
/// producer's syscalls per notify and ns per notify.
fn doorbell_awake(n: u64, evfd: bool) -> (Counted, f64) {
    let notifier = Notifier::new();
    let view = notifier.fd_view().expect("fd_view");
    let twin = Arc::new(kfd());
    let ep = kepoll();
    if evfd {
        kadd(&ep, &view, epoll::EventFlags::IN, 0);
    } else {
        kadd(&ep, &*twin, epoll::EventFlags::IN, 0);
    }
    let notify = || {
        if evfd {
            notifier.notify().unwrap();
        } else {
            kwrite(&twin, 1);
        }
    };
    let awake = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicBool::new(false));
    let consumer = {
        let (notifier, twin, awake, done) =
            (notifier.clone(), twin.clone(), awake.clone(), done.clone());
        std::thread::spawn(move || {
            let mut buf = vec![std::mem::MaybeUninit::uninit(); 1];
            while kwait(&ep, &mut buf, Some(10_000)).is_empty() {}
            awake.store(true, Ordering::Release);
            while !done.load(Ordering::Acquire) {
                std::thread::sleep(Duration::from_millis(1)); // busy elsewhere
            }
            if evfd {
                notifier.try_read().unwrap()
            } else {
                kread(&twin)
            }
        })
    };
    notify(); // the edge that wakes the consumer
    while !awake.load(Ordering::Acquire) {
        std::thread::yield_now();
    }
    let probe = RwProbe::new();
    let s0 = evfd::stats::doorbell_stats();
    let k0 = probe.as_ref().and_then(|p| p.now());
    let t0 = Instant::now();
    for _ in 0..n {
        notify();
    }
    let ns = t0.elapsed().as_nanos() as f64 / n as f64;
    let k = probe.as_ref().zip(k0).and_then(|(p, k0)| p.since(k0, 1));
    let s1 = evfd::stats::doorbell_stats();
    done.store(true, Ordering::Release);
    assert_eq!(
        consumer.join().unwrap(),
        n + 1,
        "doorbell: every notify read"
    );
    let own = if evfd {
        (s1.rings - s0.rings + s1.drains - s0.drains) as f64
    } else {
        n as f64 // one write(2) per kwrite
    };
    let c = Counted {
        kernel: k.map(|(r, w)| (r + w) as f64 / n as f64),
        own: own / n as f64,
    };
    (c, ns)
}

/// Consumer sleeping: per edge, the consumer sleeps in `epoll_wait` (kernel epoll, LT) on
/// the fd; the producer (this thread) notifies once; the consumer wakes and reads — evfd:
/// `try_read` until `WouldBlock`; twin: one `read(2)`, which empties an eventfd. Returns
/// (writes per edge, reads per edge), both threads' syscalls.
fn doorbell_sleeping(edges: u64, evfd: bool) -> (Counted, Counted) {
    let notifier = Notifier::new();
    let view = notifier.fd_view().expect("fd_view");
    let twin = Arc::new(kfd());
    let ep = kepoll();
    if evfd {
        kadd(&ep, &view, epoll::EventFlags::IN, 0);
    } else {
        kadd(&ep, &*twin, epoll::EventFlags::IN, 0);
    }
    let drained = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tid = Arc::new(std::sync::atomic::AtomicI32::new(0));
    let s0 = evfd::stats::doorbell_stats();
    let consumer = {
        let (notifier, twin, drained, stop, tid) = (
            notifier.clone(),
            twin.clone(),
            drained.clone(),
            stop.clone(),
            tid.clone(),
        );
        std::thread::spawn(move || {
            let probe = RwProbe::new();
            let k0 = probe.as_ref().and_then(|p| p.now());
            tid.store(gettid(), Ordering::Release);
            let (mut got, mut reads) = (0u64, 0u64);
            let mut k = None;
            let mut buf = vec![std::mem::MaybeUninit::uninit(); 1];
            loop {
                if kwait(&ep, &mut buf, Some(10_000)).is_empty() {
                    panic!("doorbell: no wake in 10 s");
                }
                if stop.load(Ordering::Acquire) {
                    break;
                }
                if evfd {
                    while let Ok(v) = notifier.try_read() {
                        got += v;
                    }
                } else {
                    got += kread(&twin);
                    reads += 1;
                }
                // Before publishing the edge as handled: after the last one, the main
                // thread stops us with one more (uncounted) notify.
                let d = drained.load(Ordering::Relaxed) + 1;
                k = probe.as_ref().zip(k0).and_then(|(p, k0)| p.since(k0, d));
                drained.store(d, Ordering::Release);
            }
            (got, reads, k)
        })
    };
    let mut tid_v = 0;
    while tid_v == 0 {
        std::thread::yield_now();
        tid_v = tid.load(Ordering::Acquire);
    }
    let mut sleep = SleepProbe::new(tid_v);
    let probe = RwProbe::new();
    let k0 = probe.as_ref().and_then(|p| p.now());
    for i in 0..edges {
        while drained.load(Ordering::Acquire) < i {
            std::thread::yield_now();
        }
        sleep.until_asleep();
        if evfd {
            notifier.notify().unwrap();
        } else {
            kwrite(&twin, 1);
        }
    }
    while drained.load(Ordering::Acquire) < edges {
        std::thread::yield_now();
    }
    let kp = probe.as_ref().zip(k0).and_then(|(p, k0)| p.since(k0, 1));
    let s1 = evfd::stats::doorbell_stats();
    stop.store(true, Ordering::Release);
    if evfd {
        notifier.notify().unwrap();
    } else {
        kwrite(&twin, 1);
    }
    let (got, reads, kc) = consumer.join().unwrap();
    assert_eq!(got, edges, "doorbell: every notify read");
    let per = |x: u64| x as f64 / edges as f64;
    let (own_w, own_r) = if evfd {
        (per(s1.rings - s0.rings), per(s1.drains - s0.drains))
    } else {
        (1.0, per(reads)) // one write(2) per edge
    };
    // Both threads: a doorbell syscall runs in whichever thread finds the doorbell out of
    // date (the producer may drain if the consumer emptied the notifier while the producer
    // was still ringing), minus the producer's /proc checks (`SleepProbe`).
    let k = kp.zip(kc);
    (
        Counted {
            kernel: k.map(|(p, c)| per(p.1 + c.1)),
            own: own_w,
        },
        Counted {
            kernel: k.map(|(p, c)| per(p.0.saturating_sub(sleep.checks) + c.0)),
            own: own_r,
        },
    )
}

/// Syscalls are counted, not timed: see `RwProbe` and `Counted`.
pub fn run(cfg: &Cfg, out: &mut Out) {
    let (n, edges) = if cfg.quick {
        (200_000, 300)
    } else {
        (500_000, 1_000)
    };
    let mut s = [(); 8].map(|_| Vec::new());
    let mut counters = [Counted::default(); 6];
    const NAMES: [&str; 6] = [
        "awake evfd",
        "awake twin",
        "asleep-writes evfd",
        "asleep-writes twin",
        "asleep-reads evfd",
        "asleep-reads twin",
    ];
    for _ in 0..cfg.reps {
        let (ce, ne) = doorbell_awake(n, true);
        let (ct, nt) = doorbell_awake(n, false);
        let (we, re) = doorbell_sleeping(edges, true);
        let (wt, rt) = doorbell_sleeping(edges, false);
        counters = [ce, ct, we, wt, re, rt];
        for (name, c) in NAMES.iter().zip(counters) {
            if let Some(k) = c.kernel {
                if (k - c.own).abs() > 1e-9 {
                    out.notes.push(format!(
                        "doorbell {name}: the kernel counted {k:.4}/op, the own counter {:.4}/op",
                        c.own
                    ));
                }
            }
        }
        for (v, x) in s.iter_mut().zip([
            ce.value(),
            ct.value(),
            ne,
            nt,
            we.value(),
            wt.value(),
            re.value(),
            rt.value(),
        ]) {
            v.push(x);
        }
    }
    let rows = [
        ("awake_per_notify", SYSCALLS_OP),
        ("awake_notify", NS_OP),
        ("asleep_writes_per_edge", SYSCALLS_OP),
        ("asleep_reads_per_edge", SYSCALLS_OP),
    ];
    for (i, (variant, unit)) in rows.into_iter().enumerate() {
        out.row("doorbell", variant, 2, unit, (&s[2 * i], &s[2 * i + 1]));
    }
    let src = if counters.iter().all(|c| c.kernel.is_some()) {
        "the kernel's per-thread read/write syscall counts (/proc/thread-self/io syscr+syscw)"
    } else {
        "evfd::stats::doorbell_stats() deltas (evfd) and write/read calls made (twin); \
         /proc/thread-self/io unavailable"
    };
    out.notes.push(format!(
        "doorbell: {n} notifies while awake, {edges} edges while asleep; syscalls counted from {src}"
    ));
}
