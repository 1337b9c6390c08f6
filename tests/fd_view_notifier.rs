//! fd views of in-memory notifiers, seen by real OS pollers: `poll(2)`, kernel epoll
//! (level- and edge-triggered) and tokio's `AsyncFd`, through every mode and transition;
//! doorbell syscall counts; a million-notify stress test against a sleeping kernel epoll.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Events, FdView, Mode, Notifier, LIMIT};
use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::Timespec;

mod util;
use util::{
    epoll_wait_syscalls, poll_readable, this_tid, wait_until_blocked, wait_until_blocked_in, Kep,
};

/// Every poller looks at the view after one step of a script.
struct Watch {
    view: FdView,
    lt: Kep,
    et: Kep,
}

impl Watch {
    fn new(n: &Notifier) -> Watch {
        let view = n.fd_view().unwrap();
        let lt = Kep::new(&view, false);
        let et = Kep::new(&view, true);
        Watch { view, lt, et }
    }

    /// `readable`: what poll(2) and LT epoll must say. `edge`: whether ET epoll must report
    /// a new event since the last check.
    #[track_caller]
    fn check(&self, n: &Notifier, readable: bool, edge: bool, step: &str) {
        assert_eq!(n.count() > 0, readable, "{step}: count {}", n.count());
        assert_eq!(
            n.poll(Events::IN).contains(Events::IN),
            readable,
            "{step}: Notifier::poll"
        );
        assert_eq!(poll_readable(&self.view), readable, "{step}: poll(2)");
        assert_eq!(self.lt.ready_now(), readable, "{step}: epoll LT");
        assert_eq!(self.et.ready_now(), edge, "{step}: epoll ET");
        // ET reports an edge once.
        assert!(!self.et.ready_now(), "{step}: epoll ET reported twice");
    }
}

#[test]
fn counter_transitions() {
    let n = Notifier::new();
    let w = Watch::new(&n);
    w.check(&n, false, false, "new");
    n.write(0).unwrap();
    w.check(&n, false, false, "write(0) on empty");
    n.write(2).unwrap();
    w.check(&n, true, true, "write(2)");
    n.write(3).unwrap();
    // Documented difference from a kernel eventfd: writes to a readable source coalesce.
    w.check(&n, true, false, "write(3) while readable");
    assert_eq!(n.read().unwrap(), 5);
    w.check(&n, false, false, "read");
    assert_eq!(
        n.try_read().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    w.check(&n, false, false, "try_read on empty");
    n.notify().unwrap();
    w.check(&n, true, true, "notify");
    assert_eq!(n.read_timeout(Duration::from_millis(1)).unwrap(), 1);
    w.check(&n, false, false, "read_timeout");
    assert_eq!(w.view.doorbell_stats().rings, 2);
    assert_eq!(w.view.doorbell_stats().drains, 2);
}

#[test]
fn semaphore_transitions() {
    let n = Notifier::builder().mode(Mode::Semaphore).build().unwrap();
    let w = Watch::new(&n);
    n.write(3).unwrap();
    w.check(&n, true, true, "write(3)");
    assert_eq!(n.read().unwrap(), 1);
    w.check(&n, true, false, "partial read: 2 left");
    assert_eq!(n.read().unwrap(), 1);
    w.check(&n, true, false, "partial read: 1 left");
    assert_eq!(n.read().unwrap(), 1);
    w.check(&n, false, false, "last unit read");
    n.write(1).unwrap();
    w.check(&n, true, true, "write(1)");
    assert_eq!(n.read().unwrap(), 1);
    w.check(&n, false, false, "read");
    // Partial reads while readable cost no syscall: one ring and one drain per edge.
    assert_eq!(w.view.doorbell_stats().rings, 2);
    assert_eq!(w.view.doorbell_stats().drains, 2);
}

#[test]
fn autoreset_transitions() {
    let n = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    let w = Watch::new(&n);
    assert!(!w.view.consume().contains(Events::IN));
    w.check(&n, false, false, "consume on empty");
    n.notify().unwrap();
    n.notify().unwrap();
    w.check(&n, true, true, "two kicks");
    // A readiness check (poll, epoll LT) above did not reset: still readable.
    w.check(&n, true, false, "checks never reset");
    let seen = w.view.consume();
    assert!(seen.contains(Events::IN), "{seen:?}");
    w.check(&n, false, false, "consume (delivery) resets");
    n.write(7).unwrap();
    w.check(&n, true, true, "write(7)");
    assert_eq!(n.read().unwrap(), 7, "read works too, as Counter");
    w.check(&n, false, false, "read");
}

#[test]
fn limit_transitions() {
    let n = Notifier::new();
    let w = Watch::new(&n);
    n.write(LIMIT).unwrap();
    w.check(&n, true, true, "write(LIMIT)");
    assert_eq!(
        n.try_write(1).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    assert_eq!(
        n.try_write(u64::MAX).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
    w.check(&n, true, false, "refused writes change nothing");
    // A writer blocked at the limit, released by a read: the view follows both changes.
    let n2 = n.clone();
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(this_tid()).unwrap();
        n2.write(5).unwrap()
    });
    wait_until_blocked(rx.recv().unwrap(), "write(5) at the limit");
    assert!(!t.is_finished(), "write(5) went through at the limit");
    assert_eq!(n.read().unwrap(), LIMIT);
    t.join().unwrap();
    // The doorbell was drained by the read and rung again by the released write: a new edge.
    w.check(&n, true, true, "blocked write landed");
    assert_eq!(n.read().unwrap(), 5);
    w.check(&n, false, false, "read");
}

#[test]
fn every_mode_through_a_shared_script() {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let n = Notifier::builder().mode(mode).initial(2).build().unwrap();
        let w = Watch::new(&n);
        // ADD of an already-readable fd reports it, even edge-triggered (epoll_ctl(2)).
        w.check(&n, true, true, "view of a readable notifier");
        while n.try_read().is_ok() {}
        w.check(&n, false, false, "drained by reads");
        n.notify().unwrap();
        w.check(&n, true, true, "notify");
        match mode {
            Mode::AutoReset => assert!(w.view.consume().contains(Events::IN)),
            _ => assert!(n.try_read().is_ok()),
        }
        w.check(&n, false, false, "consumed");
    }
}

#[test]
fn views_share_or_not() {
    let n = Notifier::new();
    let a = n.fd_view().unwrap();
    let a2 = a.clone();
    let b = n.fd_view().unwrap();
    use std::os::fd::AsRawFd;
    assert_eq!(a.as_raw_fd(), a2.as_raw_fd(), "clones share one doorbell");
    assert_ne!(a.as_raw_fd(), b.as_raw_fd(), "each fd_view() has its own");
    n.notify().unwrap();
    assert!(poll_readable(&a) && poll_readable(&b));
    drop(a);
    assert!(poll_readable(&a2), "a clone keeps the doorbell");
    n.read().unwrap();
    assert!(!poll_readable(&a2) && !poll_readable(&b));
}

#[test]
fn view_keeps_notifier_alive() {
    let n = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    let writer = n.clone();
    let view = n.fd_view().unwrap();
    drop(n);
    writer.notify().unwrap();
    drop(writer); // only the view is left
    assert!(poll_readable(&view));
    assert!(view.consume().contains(Events::IN));
    assert!(!poll_readable(&view));
}

/// The doorbell backend is the one this build selects: an eventfd by default, a pipe with
/// `--cfg evfd_force_pipe` (CI runs the whole suite both ways).
#[test]
fn backend_matches_the_build() {
    use std::os::fd::AsRawFd;
    let view = Notifier::new().fd_view().unwrap();
    let link = std::fs::read_link(format!("/proc/self/fd/{}", view.as_raw_fd())).unwrap();
    let link = link.to_string_lossy();
    if cfg!(evfd_force_pipe) {
        assert!(link.starts_with("pipe:"), "{link}");
    } else {
        assert_eq!(link, "anon_inode:[eventfd]");
    }
}

#[test]
fn cloexec_follows_the_notifier() {
    use rustix::io::{fcntl_getfd, FdFlags};
    // Close-on-exec by default, as every kind; `from_flags` follows eventfd2.
    let default = Notifier::new().fd_view().unwrap();
    assert!(fcntl_getfd(&default).unwrap().contains(FdFlags::CLOEXEC));
    let plain = Notifier::builder()
        .cloexec(false)
        .build()
        .unwrap()
        .fd_view()
        .unwrap();
    assert!(!fcntl_getfd(&plain).unwrap().contains(FdFlags::CLOEXEC));
    let plain = Notifier::from_flags(0, 0).unwrap().fd_view().unwrap();
    assert!(!fcntl_getfd(&plain).unwrap().contains(FdFlags::CLOEXEC));
    let cx = Notifier::from_flags(0, evfd::flags::CLOEXEC)
        .unwrap()
        .fd_view()
        .unwrap();
    assert!(fcntl_getfd(&cx).unwrap().contains(FdFlags::CLOEXEC));
}

#[test]
fn doorbell_syscalls_per_notify_and_per_edge() {
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    // While readable: 0 syscalls per notify.
    n.notify().unwrap();
    let after_first = view.doorbell_stats();
    for _ in 0..10_000 {
        n.notify().unwrap();
    }
    assert_eq!(
        view.doorbell_stats(),
        after_first,
        "notify while readable made a syscall"
    );
    assert_eq!(after_first.rings, 1);
    assert_eq!(n.read().unwrap(), 10_001);
    // Per edge: exactly 1 ring + 1 drain.
    let edges = 1000;
    for _ in 0..edges {
        n.notify().unwrap();
        n.notify().unwrap();
        n.read().unwrap();
    }
    let s = view.doorbell_stats();
    assert_eq!(s.rings, edges + 1);
    assert_eq!(s.drains, edges + 1);
    eprintln!(
        "doorbell: 10000 notifies while readable: 0 syscalls; {} edges: {} rings + {} drains",
        edges + 1,
        s.rings,
        s.drains
    );
}

#[test]
fn sleeping_kernel_epoll_is_woken_by_another_thread() {
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    let ep = Kep::new(&view, false);
    let n2 = n.clone();
    let waiter = this_tid();
    let t = std::thread::spawn(move || {
        wait_until_blocked_in(waiter, epoll_wait_syscalls(), "the kernel epoll's wait");
        n2.write(3).unwrap();
    });
    let start = Instant::now();
    assert_eq!(ep.wait(Some(Duration::from_secs(10))), 1);
    assert!(start.elapsed() < Duration::from_secs(5));
    assert_eq!(n.read().unwrap(), 3);
    t.join().unwrap();
    assert_eq!(ep.wait(Some(Duration::ZERO)), 0);
}

/// The stress test: 2 producers × 500 000 notifies; the consumer sleeps in a kernel epoll
/// (level-triggered) on the fd view and reads the notifier after each wake. No wake may be
/// lost: the reads must sum to 10⁶, within 60 s.
#[test]
fn stress_million_notifies_lt_consumer() {
    stress(false, 1);
}

/// The same with edge-triggered epoll, and two consumers (each with its own ET epoll on
/// the same view), reading until `WouldBlock` after each wake: the case where a refill
/// racing another consumer's drain must still produce an edge (claim 2 of `crate::fd`).
/// A consumer that times out with units pending counts as a lost edge.
#[test]
fn stress_million_notifies_et_two_consumers() {
    stress(true, 2);
}

fn stress(et: bool, consumers: usize) {
    const PER_PRODUCER: u64 = 500_000;
    const TOTAL: u64 = 2 * PER_PRODUCER;
    let deadline = Instant::now() + Duration::from_secs(60);
    let n = Notifier::new();
    let view = n.fd_view().unwrap();
    let stop = Notifier::new();
    let stop_view = stop.fd_view().unwrap();
    let sum = Arc::new(AtomicU64::new(0));
    let wakes = Arc::new(AtomicU64::new(0));
    let lost = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicBool::new(false));

    let producers: Vec<_> = (0..2)
        .map(|_| {
            let n = n.clone();
            std::thread::spawn(move || {
                for _ in 0..PER_PRODUCER {
                    n.notify().unwrap();
                }
            })
        })
        .collect();

    let cons: Vec<_> = (0..consumers)
        .map(|_| {
            let (n, view, stop, stop_view) =
                (n.clone(), view.clone(), stop.clone(), stop_view.clone());
            let (sum, wakes, lost, failed) =
                (sum.clone(), wakes.clone(), lost.clone(), failed.clone());
            std::thread::spawn(move || {
                let ep = epoll::create(CreateFlags::CLOEXEC).unwrap();
                let flags = if et {
                    EventFlags::IN | EventFlags::ET
                } else {
                    EventFlags::IN
                };
                epoll::add(&ep, &view, EventData::new_u64(1), flags).unwrap();
                epoll::add(&ep, &stop_view, EventData::new_u64(2), EventFlags::IN).unwrap();
                let mut evs = [epoll::Event {
                    flags: EventFlags::empty(),
                    data: EventData::new_u64(0),
                }; 2];
                let ts = Timespec {
                    tv_sec: 2,
                    tv_nsec: 0,
                };
                loop {
                    if Instant::now() > deadline {
                        failed.store(true, SeqCst);
                        stop.notify().unwrap();
                        return;
                    }
                    let got = match epoll::wait(&ep, &mut evs, Some(&ts)) {
                        Ok(k) => k,
                        Err(rustix::io::Errno::INTR) => continue,
                        Err(e) => panic!("epoll_wait: {e}"),
                    };
                    if evs[..got].iter().any(|e| e.data.u64() == 2) {
                        return;
                    }
                    if got == 0 {
                        // A timeout while units are pending and nobody else is mid-read: with
                        // a correct doorbell the fd would have been readable (LT) or edged (ET).
                        if n.count() > 0 && sum.load(SeqCst) < TOTAL {
                            lost.fetch_add(1, SeqCst);
                        }
                        continue;
                    }
                    wakes.fetch_add(1, SeqCst);
                    // ET: read until WouldBlock; LT: one read per wake.
                    while let Ok(v) = n.try_read() {
                        if sum.fetch_add(v, SeqCst) + v == TOTAL {
                            stop.notify().unwrap();
                            return;
                        }
                        if !et {
                            break;
                        }
                    }
                }
            })
        })
        .collect();

    for p in producers {
        p.join().unwrap();
    }
    for c in cons {
        c.join().unwrap();
    }
    let s = view.doorbell_stats();
    eprintln!(
        "stress (et={et}, consumers={consumers}): sum {} of {TOTAL}, {} wakes, {} rings, {} drains, \
         {} lost-edge timeouts",
        sum.load(SeqCst),
        wakes.load(SeqCst),
        s.rings,
        s.drains,
        lost.load(SeqCst)
    );
    assert!(
        !failed.load(SeqCst),
        "took longer than 60 s (sum {})",
        sum.load(SeqCst)
    );
    assert_eq!(sum.load(SeqCst), TOTAL);
    assert_eq!(
        lost.load(SeqCst),
        0,
        "a consumer slept through pending units"
    );
    // At quiescence the doorbell matches the (empty) notifier.
    assert_eq!(n.count(), 0);
    assert!(!poll_readable(&view));
    // Edges are bounded by wakes: at most one ring per edge and one drain per consumption
    // that emptied it, plus the rare re-ring of claim 2.
    assert!(s.rings <= TOTAL && s.drains <= TOTAL);
}

#[cfg(feature = "tokio")]
mod tokio_pollers {
    use super::*;
    use tokio::io::unix::AsyncFd;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    /// The fd view in a plain tokio `AsyncFd`, as a user would put it.
    #[test]
    fn asyncfd_over_a_view() {
        rt().block_on(async {
            let n = Notifier::new();
            // SAFETY: the view owns its fd and never replaces it; the AsyncFd owns the view.
            let afd = unsafe { AsyncFd::register(n.fd_view().unwrap()) }.unwrap();
            for round in 1..=3u64 {
                let n2 = n.clone();
                let t = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5));
                    n2.write(round).unwrap();
                });
                let got = loop {
                    let mut g = afd.readable().await.unwrap();
                    match g.try_io(|_| n.try_read()) {
                        Ok(r) => break r.unwrap(),
                        Err(_would_block) => continue,
                    }
                };
                assert_eq!(got, round);
                t.join().unwrap();
            }
            // Not readable now: a readiness wait times out.
            let r = tokio::time::timeout(Duration::from_millis(20), async {
                let mut g = afd.readable().await.unwrap();
                g.try_io(|_| n.try_read()).ok()
            });
            assert!(matches!(r.await, Err(_) | Ok(None)));
        });
    }

    #[test]
    fn asyncfdnotifier_every_mode() {
        rt().block_on(async {
            let sem = Notifier::builder().mode(Mode::Semaphore).build().unwrap();
            let a = evfd::tokio::AsyncNotifierFd::new(&sem).unwrap();
            a.write(2).await.unwrap();
            assert_eq!(a.read().await.unwrap(), 1);
            assert_eq!(a.read().await.unwrap(), 1);
            assert!(!poll_readable(&a));

            let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
            let a = evfd::tokio::AsyncNotifierFd::new(&kick).unwrap();
            let k2 = kick.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(5));
                k2.notify().unwrap();
                k2.notify().unwrap();
            });
            assert!(a.consume().await.unwrap().contains(Events::IN));
            // The two kicks may have been delivered together or apart; either way the
            // source ends up reset with nothing left to read.
            let _ = tokio::time::timeout(Duration::from_millis(20), a.consume()).await;
            assert_eq!(kick.count(), 0);
        });
    }

    #[test]
    fn asyncfdnotifier_write_waits_for_room() {
        rt().block_on(async {
            let n = Notifier::builder().initial(LIMIT).build().unwrap();
            let a = evfd::tokio::AsyncNotifierFd::new(&n).unwrap();
            let n2 = n.clone();
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = std::thread::spawn(move || {
                rx.recv().unwrap();
                assert_eq!(n2.read().unwrap(), LIMIT);
            });
            // The read makes room only once the write is pending.
            util::reporting_first_poll(a.write(9), |pending| {
                assert!(pending, "write(9) did not wait at the limit");
                tx.send(()).unwrap();
            })
            .await
            .unwrap();
            reader.join().unwrap();
            assert_eq!(a.read().await.unwrap(), 9);
        });
    }

    /// Many tokio tasks awaiting one view's fd from a multi-thread runtime while a thread
    /// notifies: every unit is read exactly once and nobody hangs.
    #[test]
    fn asyncfd_stress_multi_thread() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            const N: u64 = 20_000;
            let n = Notifier::new();
            let a = Arc::new(evfd::tokio::AsyncNotifierFd::new(&n).unwrap());
            let got = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = (0..4)
                .map(|_| {
                    let (a, got) = (a.clone(), got.clone());
                    tokio::spawn(async move {
                        while got.load(SeqCst) < N {
                            match tokio::time::timeout(Duration::from_millis(200), a.read()).await {
                                Ok(v) => {
                                    got.fetch_add(v.unwrap(), SeqCst);
                                }
                                Err(_) => continue,
                            }
                        }
                    })
                })
                .collect();
            let n2 = n.clone();
            std::thread::spawn(move || {
                for _ in 0..N {
                    n2.notify().unwrap();
                }
            });
            tokio::time::timeout(Duration::from_secs(60), async {
                for t in tasks {
                    t.await.unwrap();
                }
            })
            .await
            .expect("tasks finished within 60 s");
            assert_eq!(got.load(SeqCst), N);
        });
    }
}
