//! RSS stability and the mixed soak.
//!
//! `rss_stays_flat_over_add_delete_wait_loops`: ready sources added and deleted or dropped
//! with no `wait` in between, fd views and nested epolls made and dropped, in a long loop:
//! RSS after the loop stays within a fixed bound of RSS after a warm-up.
//!
//! `mixed_soak`: 3 threads apply random operations (writes, reads, add/modify/delete,
//! waits with every mode, temporary notifiers and fd views, async reads) to a shared pool
//! for a fixed time (short mode 3 s; long mode `EVFD_TORTURE_SECS`, default 300); then every
//! pool notifier's units are checked: `read + left == written`. It prints ops, units checked
//! and RSS at start and end (after a warm-up).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Mode, Notifier};

use crate::harness::{
    bounded, join_within, long_mode, rss_bytes, scale, serial, Rng, OPS, UNITS_CHECKED,
};

const MB: u64 = 1 << 20;

/// One round of the churn that used to leak: every kind of registration made and undone.
fn churn(ep: &Epoll, outer: &Epoll, keep: &Notifier, i: u64) {
    // A ready notifier added and deleted, no wait in between.
    ep.add(keep, Events::IN, i).unwrap();
    ep.delete(keep).unwrap();
    // A ready notifier added and dropped.
    let t = Notifier::builder().initial(1).build().unwrap();
    ep.add(&t, Events::IN | Events::ET, i).unwrap();
    drop(t);
    // A nested epoll, ready, added to the outer one and dropped.
    let inner = Epoll::new();
    let u = Notifier::builder().initial(1).build().unwrap();
    inner.add(&u, Events::IN, 0).unwrap();
    outer.add(&inner, Events::IN, i).unwrap();
    drop(inner);
    drop(u);
    if i % 64 == 0 {
        // An fd view now and then (a syscall pair). No `wait` anywhere in the loop: the
        // dead entries must go at delete/close time, not at the next harvest.
        let v = keep.fd_view().unwrap();
        drop(v);
    }
    OPS.fetch_add(8, SeqCst);
}

#[test]
fn rss_stays_flat_over_add_delete_wait_loops() {
    let _g = serial();
    bounded("rss loop", Duration::from_secs(600), || {
        let ep = Epoll::new();
        let outer = Epoll::new();
        let keep = Notifier::builder().initial(1).build().unwrap();
        let rounds = scale(200_000, 2_000_000);
        let warm = rounds / 10;
        for i in 0..warm {
            churn(&ep, &outer, &keep, i);
        }
        let start = rss_bytes();
        for i in warm..rounds {
            churn(&ep, &outer, &keep, i);
        }
        let end = rss_bytes();
        eprintln!(
            "rss loop: {rounds} rounds, RSS {:.1} MB -> {:.1} MB",
            start as f64 / MB as f64,
            end as f64 / MB as f64
        );
        // Before the ready-list fix, 10^5 cycles held ~9 MB per kind of churn.
        assert!(
            end <= start + 8 * MB,
            "RSS grew from {start} to {end} over {rounds} rounds"
        );
        assert_eq!(ep.len(), 0);
        assert_eq!(outer.len(), 0);
        let mut evs = [Event::default(); 8];
        assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 0);
        assert_eq!(outer.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 0);
    });
}

const POOL: usize = 12;

struct Pool {
    ns: Vec<Notifier>,
    written: Vec<AtomicU64>,
    read: Vec<AtomicU64>,
    eps: Vec<Epoll>,
    stop: AtomicBool,
}

impl Pool {
    fn take(&self, i: usize, v: u64) {
        self.read[i].fetch_add(v, SeqCst);
    }
    /// `try_read` until `WouldBlock`, counted.
    fn drain(&self, i: usize) {
        while let Ok(v) = self.ns[i].try_read() {
            self.take(i, v);
        }
    }
}

fn flags(r: &mut Rng) -> Events {
    match r.below(4) {
        0 => Events::IN,
        1 => Events::IN | Events::ET,
        2 => Events::IN | Events::ONESHOT,
        _ => Events::IN | Events::OUT,
    }
}

fn worker(p: Arc<Pool>, seed: u64) -> u64 {
    let mut r = Rng(seed | 1);
    let mut ops = 0u64;
    let mut evs = [Event::default(); 8];
    while !p.stop.load(SeqCst) {
        let i = r.below(POOL as u64) as usize;
        let ep = &p.eps[r.below(p.eps.len() as u64) as usize];
        match r.below(12) {
            0..=2 => {
                let v = 1 + r.below(4);
                p.ns[i].write(v).unwrap();
                p.written[i].fetch_add(v, SeqCst);
            }
            3 => match p.ns[i].try_read() {
                Ok(v) => p.take(i, v),
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock),
            },
            4 => match ep.add(&p.ns[i], flags(&mut r), i as u64) {
                Ok(()) => {}
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists),
            },
            5 => match ep.modify(&p.ns[i], flags(&mut r), i as u64) {
                Ok(()) => {}
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            },
            6 => match ep.delete(&p.ns[i]) {
                Ok(()) => {}
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::NotFound),
            },
            7 | 8 => {
                let t = if r.below(2) == 0 {
                    Some(Duration::ZERO)
                } else {
                    Some(Duration::from_micros(r.below(500)))
                };
                let k = ep.wait(&mut evs[..1 + r.below(8) as usize], t).unwrap();
                for e in &evs[..k] {
                    if e.data < POOL as u64 && e.events.contains(Events::IN) {
                        p.drain(e.data as usize);
                    }
                }
            }
            9 => {
                // A temporary AutoReset kick: registered, kicked, harvested or dropped.
                let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
                ep.add(&kick, Events::IN, u64::MAX).unwrap();
                kick.notify().unwrap();
                if r.below(2) == 0 {
                    let _ = ep.wait(&mut evs, Some(Duration::ZERO)).unwrap();
                }
            }
            10 => {
                let v = p.ns[i].fd_view().unwrap();
                if v.consume().contains(Events::IN) {
                    p.drain(i);
                }
            }
            _ => {
                if p.ns[i].count() > 0 {
                    // Only when something is there: the future completes at once unless
                    // another worker barges in; then a writer is needed, so time-box it.
                    let n = p.ns[i].clone();
                    let got = futures::executor::block_on(async {
                        let read = n.read_async();
                        let timer = async {
                            // A cheap timer: yield until 1 ms passed.
                            let t0 = Instant::now();
                            while t0.elapsed() < Duration::from_millis(1) {
                                YieldNow(false).await;
                            }
                        };
                        futures::pin_mut!(read);
                        futures::pin_mut!(timer);
                        match futures::future::select(read, timer).await {
                            futures::future::Either::Left((v, _)) => Some(v.unwrap()),
                            futures::future::Either::Right(_) => None,
                        }
                    });
                    if let Some(v) = got {
                        p.take(i, v);
                    }
                }
            }
        }
        ops += 1;
    }
    OPS.fetch_add(ops, SeqCst);
    ops
}

/// Yield to the executor once.
struct YieldNow(bool);

impl std::future::Future for YieldNow {
    type Output = ();
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        if self.0 {
            return std::task::Poll::Ready(());
        }
        self.0 = true;
        cx.waker().wake_by_ref();
        std::task::Poll::Pending
    }
}

#[test]
fn mixed_soak() {
    let _g = serial();
    let secs = if long_mode() {
        std::env::var("EVFD_TORTURE_SECS")
            .ok()
            .and_then(|s| s.parse().ok())
            .unwrap_or(300)
    } else {
        3
    };
    bounded("mixed soak", Duration::from_secs(secs + 120), move || {
        let modes = [Mode::Counter, Mode::Semaphore];
        let outer = Epoll::new();
        let inner = Epoll::new();
        outer.add(&inner, Events::IN, u64::MAX - 1).unwrap();
        let p = Arc::new(Pool {
            ns: (0..POOL)
                .map(|i| Notifier::builder().mode(modes[i % 2]).build().unwrap())
                .collect(),
            written: (0..POOL).map(|_| AtomicU64::new(0)).collect(),
            read: (0..POOL).map(|_| AtomicU64::new(0)).collect(),
            eps: vec![outer.clone(), inner.clone(), Epoll::new()],
            stop: AtomicBool::new(false),
        });
        let workers: Vec<_> = (0..3u64)
            .map(|w| {
                let p = Arc::clone(&p);
                thread::spawn(move || worker(p, 0x5eed_0000 + w))
            })
            .collect();
        let warm = Duration::from_secs((secs / 3).clamp(1, 30));
        let total = Duration::from_secs(secs);
        let t0 = Instant::now();
        thread::sleep(warm.min(total));
        let rss_start = rss_bytes();
        if let Some(left) = total.checked_sub(t0.elapsed()) {
            thread::sleep(left);
        }
        p.stop.store(true, SeqCst);
        let ops: u64 = workers
            .into_iter()
            .map(|w| join_within("soak worker", Duration::from_secs(60), w))
            .sum();
        let rss_end = rss_bytes();
        let mut units = 0;
        for i in 0..POOL {
            p.drain(i);
            let (w, r) = (p.written[i].load(SeqCst), p.read[i].load(SeqCst));
            assert_eq!(r + p.ns[i].count(), w, "pool notifier {i}");
            units += w;
        }
        UNITS_CHECKED.fetch_add(units, SeqCst);
        eprintln!(
            "soak: {secs} s, {ops} ops, {units} units checked, RSS {:.1} MB (after {warm:?}) -> {:.1} MB; suite totals so far: {} ops, {} units",
            rss_start as f64 / MB as f64,
            rss_end as f64 / MB as f64,
            OPS.load(SeqCst),
            UNITS_CHECKED.load(SeqCst),
        );
        assert!(
            rss_end <= rss_start + 16 * MB,
            "RSS grew from {rss_start} to {rss_end} during the soak"
        );
    });
}
