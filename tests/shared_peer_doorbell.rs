//! A peer that rings a `SharedNotifier`'s doorbell without writing the count (a stray ring,
//! or a peer killed between emptying the count and draining the doorbell) leaves the
//! doorbell readable with a count of 0. A pending `read_async` must treat that as a spurious
//! wake: time out on time, burn no CPU, starve no other task, and still complete on the
//! next real write.
//!
//! The regression this guards (fixed by re-syncing the doorbell on a spurious wake and
//! yielding after a few in a row): before, the read future's loop went straight back into
//! the reader epoll's `wait_async`, which harvests the level-triggered doorbell again at
//! once, so one `poll` of the future never returned and the runtime thread spun at 100 %;
//! `tokio::time::timeout` could not fire and every other task on a current-thread runtime
//! starved. Each test here therefore runs its runtime on a thread under a watchdog: the old
//! code fails with "watchdog: ... still blocked" instead of hanging the run.
//!
//! Since the read future became an edge-only doorbell consumer (its process's watch of the
//! doorbell is edge-triggered, and nothing drains the doorbell for it), a stray ring is one
//! event on the watch: one spurious wake, whose try finds 0 and waits again, and no
//! drain. The tests below now also check that no drain is made. (The storm still needs the
//! yield: every ring is a wake.)
//!
//! The stray ring must land while the read is pending and registered: a ring before the
//! registration makes no fill and proves nothing about the pending future. So the ringer
//! waits until the region shows the future registered (an edge-only consumer) before it
//! rings, and each test checks that the doorbell was silent before the first ring.
//!
//! Both routes by which kernel readiness reaches `Epoll::wait_async` are covered: the tokio
//! reactor (a runtime with I/O, feature `tokio`) and the watcher thread (a runtime without
//! I/O; in a build without the feature both tests take this route). All four tests failed
//! under the watchdog with the fix reverted, on both routes, with one ring and with a storm.
//!
//! (The earlier version of this file rang from a thread 10 ms after the runtime started, with
//! no watchdog and no check that the read was armed. With the fix reverted it hung here, in
//! both builds, rather than failing; and whenever the read's first poll comes after the ring
//! (a loaded machine), the arm's re-sync drains the ring and it passes with the bug.)
#![cfg(target_os = "linux")]

mod shared_util;

use std::os::fd::OwnedFd;
use std::sync::mpsc;
use std::sync::Mutex;
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Mode, SharedNotifier};
use shared_util::{doorbell_of, readable, thread_cpu};

/// The tests measure their runtime thread's CPU time and count doorbell drains: one at a time.
static SERIAL: Mutex<()> = Mutex::new(());

/// The read's timeout; the whole scenario must finish well within the watchdog.
const TIMEOUT: Duration = Duration::from_millis(150);
const WATCHDOG: Duration = Duration::from_secs(10);

/// A notifier and the raw doorbell fd a peer would hold.
fn shared() -> (SharedNotifier, OwnedFd) {
    let n = SharedNotifier::new(Mode::Counter).unwrap();
    let bell = doorbell_of(&n);
    (n, bell)
}

/// Runs `f` on its own thread; fails naming `what` if it has not returned within the
/// watchdog (the spinning thread is left behind: the test fails instead of hanging).
fn watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = thread::spawn(move || {
        let r = f();
        let _ = tx.send(());
        r
    });
    match rx.recv_timeout(WATCHDOG) {
        Ok(()) => h.join().unwrap(),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(_) => unreachable!("the thread sends before returning"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => panic!(
            "watchdog: {what} still blocked after {WATCHDOG:?}: a pending read_async spins \
             on a readable doorbell with an empty count"
        ),
    }
}

/// What one scenario saw.
struct Seen {
    timed_out: bool,
    took: Duration,
    ticks: u32,
    cpu: Duration,
    rings: u32,
    drains: u64,
}

/// A current-thread runtime (`io`: with the I/O driver, so the reactor route when the
/// feature is on) runs `timeout(TIMEOUT, read_async())` beside a ticker task, while another
/// thread rings the doorbell `rings` times (1 ms apart), each time only once the read is
/// pending with the doorbell armed. Then a real write must still complete a read.
fn stray_rings(io: bool, rings: u32) -> Seen {
    let (n, bell) = shared();
    let mut b = tokio::runtime::Builder::new_current_thread();
    b.enable_time();
    if io {
        b.enable_io();
    }
    let rt = b.build().unwrap();
    let drains0 = n.stats().drains;
    let ringer = thread::spawn({
        let n = n.clone();
        move || {
            let mut rung = 0;
            for _ in 0..rings {
                // Until the read future is registered as a doorbell consumer.
                let end = Instant::now() + WATCHDOG;
                while n.edge_consumers() == 0 {
                    assert!(Instant::now() < end, "the read never armed the doorbell");
                    thread::sleep(Duration::from_micros(200));
                }
                thread::sleep(Duration::from_millis(1));
                if n.edge_consumers() == 0 {
                    break; // the read timed out meanwhile
                }
                if rung == 0 {
                    assert!(!readable(&bell), "the doorbell is readable before any ring");
                }
                rustix::io::write(&bell, &1u64.to_ne_bytes()).unwrap();
                rung += 1;
            }
            (bell, rung)
        }
    });
    let (timed_out, took, ticks, cpu) = rt.block_on(async {
        let ticker = tokio::spawn(async {
            let mut ticks = 0u32;
            let end = Instant::now() + TIMEOUT;
            while Instant::now() < end {
                tokio::time::sleep(Duration::from_millis(2)).await;
                ticks += 1;
            }
            ticks
        });
        let (start, cpu0) = (Instant::now(), thread_cpu());
        let r = tokio::time::timeout(TIMEOUT, n.read_async()).await;
        let (took, cpu) = (start.elapsed(), thread_cpu() - cpu0);
        (r.is_err(), took, ticker.await.unwrap(), cpu)
    });
    let (bell, rung) = ringer.join().unwrap();
    assert!(rung >= 1, "no stray ring landed while the read was pending");
    let drains = n.stats().drains - drains0;
    // A real write still completes the next read.
    let w = thread::spawn({
        let n = n.clone();
        move || {
            thread::sleep(Duration::from_millis(10));
            n.write(5).unwrap();
        }
    });
    let got =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), n.read_async()).await });
    assert_eq!(got.expect("the real write was missed").unwrap(), 5);
    w.join().unwrap();
    assert_eq!(n.count(), 0);
    drop(bell);
    Seen {
        timed_out,
        took,
        ticks,
        cpu,
        rings: rung,
        drains,
    }
}

fn check(what: &str, s: &Seen) {
    eprintln!(
        "{what}: {} stray rings, timed out after {:?}, {} ticks, runtime thread CPU {:?}, \
         {} doorbell drains",
        s.rings, s.took, s.ticks, s.cpu, s.drains
    );
    assert!(
        s.timed_out,
        "{what}: a stray ring completed a read of an empty count"
    );
    assert!(
        s.took < TIMEOUT + Duration::from_millis(500),
        "{what}: timeout({TIMEOUT:?}) took {:?}",
        s.took
    );
    // 2 ms ticks over the 150 ms window: ~75 on an idle machine; a starved ticker gets 0-1.
    assert!(
        s.ticks >= 10,
        "{what}: the other task starved ({} ticks)",
        s.ticks
    );
    // Idle but for the rings: a few syscalls each. A spin would be ~the whole window.
    assert!(
        s.cpu < TIMEOUT / 3,
        "{what}: the runtime thread burned {:?} of a {TIMEOUT:?} window",
        s.cpu
    );
    // An edge-only consumer: a spurious wake owes no drain, and nothing else drains here.
    assert_eq!(
        s.drains, 0,
        "{what}: {} drains for {} rings",
        s.drains, s.rings
    );
}

fn guard() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[test]
fn one_stray_ring_through_the_reactor_route() {
    let _g = guard();
    let s = watchdog("a runtime with I/O, one stray ring", || {
        stray_rings(true, 1)
    });
    check("reactor, 1 ring", &s);
}

#[test]
fn one_stray_ring_through_the_watcher_route() {
    let _g = guard();
    let s = watchdog("a runtime without I/O, one stray ring", || {
        stray_rings(false, 1)
    });
    check("watcher, 1 ring", &s);
}

#[test]
fn a_storm_of_stray_rings_through_the_reactor_route() {
    let _g = guard();
    let s = watchdog("a runtime with I/O, a ring storm", || stray_rings(true, 60));
    check("reactor, ring storm", &s);
}

#[test]
fn a_storm_of_stray_rings_through_the_watcher_route() {
    let _g = guard();
    let s = watchdog("a runtime without I/O, a ring storm", || {
        stray_rings(false, 60)
    });
    check("watcher, ring storm", &s);
}
