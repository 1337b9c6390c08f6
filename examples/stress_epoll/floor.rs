//! The floors of the `vs_floor` rows (docs/benchmarks.md): the least work any correct
//! implementation of a benchmark's loop must do, written by hand with bare atomics and run
//! in the same process as evfd, so that the ratio evfd / floor says how close evfd is to the
//! machine whatever its atomics cost. A ratio of 1 is "at the floor"; it cannot be above 1
//! by more than noise.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use rustix::thread::futex;

use crate::measure::{ns_per_item, run_threads, spin_ops, Placement};
use crate::pingpong::bounce;

/// A counter on a cache line of its own (128 bytes: the adjacent-line prefetcher pairs
/// lines), as evfd's notifiers are.
#[repr(align(128))]
#[derive(Default)]
struct Padded<T>(T);

/// `seed_*`'s loop on a private `AtomicU64` per thread: `write(1)` = load + CAS (an
/// eventfd write must check the limit before it adds), `read()` = swap(0). Ops/ms, all
/// threads.
pub fn seed(n: usize, dur: Duration) -> f64 {
    let counters: Arc<Vec<Padded<AtomicU64>>> =
        Arc::new((0..n).map(|_| Padded::default()).collect());
    run_threads(n, dur, move |i, stop| {
        let c = &counters[i].0;
        spin_ops(stop, || {
            let cur = c.load(Ordering::Relaxed);
            let _ = c.compare_exchange(cur, cur + 1, Ordering::SeqCst, Ordering::Relaxed);
            std::hint::black_box(c.swap(0, Ordering::SeqCst));
        })
    })
}

/// `harvest`'s loop: `r` ready level-triggered slots; one harvest = one swap per slot (the
/// poll that must look at each source's state) and a push into the output. Ns per event.
pub fn harvest(r: usize, dur: Duration) -> f64 {
    let slots: Vec<AtomicU64> = (0..r).map(|_| AtomicU64::new(1)).collect();
    let mut out: Vec<(u32, u64)> = Vec::with_capacity(r);
    ns_per_item(dur, 64, || {
        out.clear();
        for (i, s) in slots.iter().enumerate() {
            // Level-triggered: the slot stays ready, so the swap puts the 1 back.
            if s.swap(1, Ordering::AcqRel) != 0 {
                out.push((1, i as u64));
            }
        }
        std::hint::black_box(&out);
        out.len() as u64
    })
}

/// One side of `pingpong_spin`: the notifier a peer writes and the ready word of the epoll
/// that watches it (level-triggered), each on a line of its own — two objects, as a
/// notifier and an epoll are: the epoll learns *which* of its sources is ready from its
/// own state, not by polling every source.
#[derive(Default)]
struct Side {
    count: Padded<AtomicU64>,
    ready: Padded<AtomicU32>,
}

impl Side {
    /// `write(1)`: load + CAS on the count (as `seed`), then queue the item: one RMW on the
    /// epoll's ready word.
    fn write(&self) {
        let c = self.count.0.load(Ordering::Relaxed);
        let _ = self
            .count
            .0
            .compare_exchange(c, c + 1, Ordering::SeqCst, Ordering::Relaxed);
        self.ready.0.swap(1, Ordering::SeqCst);
    }

    /// `wait` spinning, at most `tries` looks: the ready word says an item is queued, the
    /// harvest polls its count (a load) and delivers it, leaving it queued (level-
    /// triggered). Queued but at 0 (the last delivery, since read): unqueue it (swap), then
    /// look at the count again — a write racing the unqueue is seen by that look, or queues
    /// the item after it.
    fn wait(&self, tries: u32) -> bool {
        for _ in 0..tries {
            if self.ready.0.load(Ordering::Acquire) == 1 {
                if self.count.0.load(Ordering::SeqCst) != 0 {
                    return true;
                }
                self.ready.0.swap(0, Ordering::SeqCst);
                if self.count.0.load(Ordering::SeqCst) != 0 {
                    self.ready.0.store(1, Ordering::Release);
                    return true;
                }
            }
            std::hint::spin_loop();
        }
        false
    }

    /// `read()`: swap(0) on the count.
    fn read(&self) {
        std::hint::black_box(self.count.0.swap(0, Ordering::SeqCst));
    }
}

/// `pingpong` spinning: the least a level-triggered notifier + epoll hand-off must do,
/// `pingpong`'s loop with bare atomics: each side writes the peer's notifier (load + CAS on
/// its count, one RMW to queue it on the peer's epoll), spins on its own epoll's ready
/// word, polls the count it finds queued, reads it (swap), and its next wait unqueues the
/// item that read emptied (swap). Four RMWs on two lines per hand-off. Round trips/s (and
/// p50/p99 µs).
pub fn pingpong_spin(dur: Duration, cpus: Placement) -> (f64, f64, f64) {
    let (a, b) = (Arc::new(Side::default()), Arc::new(Side::default()));
    let (a2, b2) = (a.clone(), b.clone());
    bounce(
        dur,
        cpus,
        move || {
            // Echo (gives up after a while so that `stop` is seen).
            if b2.wait(1 << 16) {
                b2.read();
                a2.write();
            }
        },
        || {
            b.write();
            while !a.wait(u32::MAX) {}
            a.read();
        },
    )
}

/// `pingpong` spinning, the bare token: two threads bounce a token through one atomic
/// each — no notifier count apart from the epoll's state, no level-triggered re-poll, so
/// less than `pingpong`'s loop must do (`pingpong_spin`); the `vs_token_spin` row, for
/// scale. Round trips/s (and p50/p99 µs).
pub fn pingpong_token(dur: Duration, cpus: Placement) -> (f64, f64, f64) {
    let (a, b) = (
        Arc::new(Padded(AtomicU32::new(0))),
        Arc::new(Padded(AtomicU32::new(0))),
    );
    let (a2, b2) = (a.clone(), b.clone());
    bounce(
        dur,
        cpus,
        move || {
            // Echo: take the token from b (give up after a while so `stop` is seen), put it in a.
            for _ in 0..1 << 16 {
                if b2.0.swap(0, Ordering::AcqRel) == 1 {
                    a2.0.store(1, Ordering::Release);
                    return;
                }
                std::hint::spin_loop();
            }
        },
        || {
            b.0.store(1, Ordering::Release);
            while a.0.swap(0, Ordering::AcqRel) != 1 {
                std::hint::spin_loop();
            }
        },
    )
}

/// A futex-backed token: 0 empty, 1 token, 2 empty with the taker asleep. The giver makes
/// the futex syscall only when the taker sleeps; the taker sleeps only when it finds no
/// token. The least a blocking hand-off can do.
struct Token(Padded<AtomicU32>);

impl Token {
    fn new() -> Self {
        Token(Padded(AtomicU32::new(0)))
    }

    fn give(&self) {
        if self.0 .0.swap(1, Ordering::AcqRel) == 2 {
            let _ = futex::wake(&self.0 .0, futex::Flags::PRIVATE, 1);
        }
    }

    /// Take the token, sleeping for it; `false` if `timeout` passed without one.
    fn take(&self, timeout: Option<Duration>) -> bool {
        loop {
            if self.0 .0.swap(0, Ordering::AcqRel) == 1 {
                return true;
            }
            if self
                .0
                 .0
                .compare_exchange(0, 2, Ordering::AcqRel, Ordering::Acquire)
                .is_ok()
            {
                let ts = timeout.map(|t| rustix::time::Timespec {
                    tv_sec: t.as_secs() as i64,
                    tv_nsec: t.subsec_nanos() as i64,
                });
                let r = futex::wait(&self.0 .0, futex::Flags::PRIVATE, 2, ts.as_ref());
                if r == Err(rustix::io::Errno::TIMEDOUT) {
                    return self.0 .0.swap(0, Ordering::AcqRel) == 1;
                }
            }
        }
    }
}

/// `pingpong` blocking: the same bounce, each side sleeping in a futex wait for its token.
pub fn pingpong_block(dur: Duration, cpus: Placement) -> (f64, f64, f64) {
    let (a, b) = (Arc::new(Token::new()), Arc::new(Token::new()));
    let (a2, b2) = (a.clone(), b.clone());
    bounce(
        dur,
        cpus,
        move || {
            if b2.take(Some(Duration::from_millis(20))) {
                a2.give();
            }
        },
        || {
            b.give();
            a.take(None);
        },
    )
}
