//! A peer that clears `O_NONBLOCK` on a shared eventfd cannot make evfd block.
//!
//! `O_NONBLOCK` belongs to the open file description, which every dup of the fd shares (in
//! every process it was passed to); QEMU clears it on fds it receives. Each test clears it
//! through a dup (the peer's fd, the same description) and shows that the non-blocking and
//! timed calls still return on time. Each runs under a watchdog, so a regression fails the
//! test instead of hanging it (docs/semantics.md, "Shared open file descriptions and
//! O_NONBLOCK").
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, LIMIT};

mod util;

/// Run `f` on its own thread; fail if it does not finish within `secs`.
fn watchdog<T: Send + 'static>(what: &str, secs: u64, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(secs)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
        Err(_) => panic!("{what}: blocked past the {secs} s watchdog"),
    }
}

/// The peer's fd: a dup of `k`'s (same open file description), with `O_NONBLOCK` cleared.
fn peer_clears_nonblock(k: &KernelNotifier) -> OwnedFd {
    let peer = rustix::io::dup(k.as_fd()).unwrap();
    let fl = rustix::fs::fcntl_getfl(&peer).unwrap();
    rustix::fs::fcntl_setfl(&peer, fl - rustix::fs::OFlags::NONBLOCK).unwrap();
    // The shared flag is now clear on evfd's own fd too.
    let mine = rustix::fs::fcntl_getfl(k.as_fd()).unwrap();
    assert!(!mine.contains(rustix::fs::OFlags::NONBLOCK));
    peer
}

fn peer_read(peer: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    assert_eq!(rustix::io::read(peer, &mut b).unwrap(), 8);
    u64::from_ne_bytes(b)
}

#[test]
fn try_read_and_consume_at_zero_do_not_block() {
    watchdog("try_read/consume at 0", 10, || {
        for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
            let k = KernelNotifier::new(mode).unwrap();
            let _peer = peer_clears_nonblock(&k);
            let e = k.try_read().unwrap_err();
            assert_eq!(e.kind(), ErrorKind::WouldBlock, "{mode:?}");
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
            assert!(!k.consume().unwrap().contains(Events::IN), "{mode:?}");
            k.write(3).unwrap();
            let got = if mode == Mode::AutoReset {
                assert!(k.consume().unwrap().contains(Events::IN));
                assert!(!k.consume().unwrap().contains(Events::IN));
                continue;
            } else {
                k.try_read().unwrap()
            };
            assert_eq!(got, if mode == Mode::Semaphore { 1 } else { 3 });
        }
    });
}

#[test]
fn nonblocking_notifier_stays_nonblocking() {
    watchdog("NONBLOCK read/write", 10, || {
        let k = KernelNotifier::builder().nonblocking(true).build().unwrap();
        let _peer = peer_clears_nonblock(&k);
        assert!(k.is_nonblocking(), "evfd's own choice, not the fd's flag");
        assert_eq!(k.read().unwrap_err().kind(), ErrorKind::WouldBlock);
        k.write(LIMIT).unwrap();
        assert_eq!(k.write(1).unwrap_err().kind(), ErrorKind::WouldBlock);
    });
}

#[test]
fn try_write_at_the_limit_does_not_block() {
    watchdog("try_write at LIMIT", 10, || {
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        let _peer = peer_clears_nonblock(&k);
        k.try_write(LIMIT - 10).unwrap();
        for n in [11, 1 << 20] {
            let e = k.try_write(n).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::WouldBlock, "{n}");
            assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        }
        k.try_write(10).unwrap(); // exactly the room left
        let e = k.try_write(1).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
        assert_eq!(k.count().unwrap(), LIMIT, "nothing changed on error");
        assert_eq!(k.try_read().unwrap(), LIMIT);
    });
}

/// `write` with no deadline is one plain `write(2)` whatever the shared flag says: on a
/// description a peer made blocking, a write that fits returns at once and one that does
/// not waits in the kernel for room for exactly `n`; on a non-blocking one it waits in
/// `poll(2)`. Either way it returns once a read makes room, and writes `n` once.
#[test]
fn blocking_write_waits_for_room_whatever_the_flag() {
    watchdog("write waits for room", 10, || {
        for peer_blocking in [true, false] {
            let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
            let peer = rustix::io::dup(k.as_fd()).unwrap();
            let fl = rustix::fs::fcntl_getfl(&peer).unwrap();
            let fl = if peer_blocking {
                fl - rustix::fs::OFlags::NONBLOCK
            } else {
                fl | rustix::fs::OFlags::NONBLOCK
            };
            rustix::fs::fcntl_setfl(&peer, fl).unwrap();
            k.write(LIMIT - 5).unwrap();
            k.notify().unwrap();
            k.write(4).unwrap(); // exactly the room left
            let k2 = Arc::clone(&k);
            let t = std::thread::spawn(move || k2.write(7));
            std::thread::sleep(Duration::from_millis(50));
            assert!(
                !t.is_finished(),
                "a write past LIMIT waits (peer_blocking {peer_blocking})"
            );
            assert_eq!(peer_read(&peer), LIMIT);
            t.join().unwrap().unwrap();
            assert_eq!(
                k.try_read().unwrap(),
                7,
                "written once (peer_blocking {peer_blocking})"
            );
        }
    });
}

#[test]
fn read_timeout_times_out_on_time() {
    watchdog("read_timeout(100 ms)", 10, || {
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        let _peer = peer_clears_nonblock(&k);
        let t0 = Instant::now();
        let e = k.read_timeout(Duration::from_millis(100)).unwrap_err();
        let took = t0.elapsed();
        assert_eq!(e.kind(), ErrorKind::TimedOut);
        assert!(took >= Duration::from_millis(100), "{took:?}");
        assert!(took < Duration::from_secs(3), "{took:?}");
    });
}

/// Two readers in `read_timeout`, one write: one gets it, the other must still time out
/// (before, it lost the race after `poll(2)` and slept in `read(2)` for good).
#[test]
fn two_threads_in_read_timeout_both_finish() {
    watchdog("two read_timeouts", 20, || {
        for _ in 0..20 {
            let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
            let _peer = peer_clears_nonblock(&k);
            let (tx, rx) = std::sync::mpsc::channel();
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let (k, tx) = (Arc::clone(&k), tx.clone());
                    std::thread::spawn(move || {
                        tx.send(util::this_tid()).unwrap();
                        k.read_timeout(Duration::from_millis(150))
                    })
                })
                .collect();
            // Both in their waits before the write.
            for tid in rx.iter().take(2) {
                util::wait_until_blocked(tid, "a read_timeout");
            }
            k.write(1).unwrap();
            let results: Vec<_> = readers.into_iter().map(|t| t.join().unwrap()).collect();
            let got: u64 = results.iter().filter_map(|r| r.as_ref().ok()).sum();
            assert_eq!(got, 1, "{results:?}");
            assert!(results
                .iter()
                .any(|r| matches!(r, Err(e) if e.kind() == ErrorKind::TimedOut)));
        }
    });
}

/// The AutoReset delivery inside an `Epoll` harvest reads the kernel count: a peer that
/// takes the count between the kernel's readiness and that read must not leave the harvest
/// (holding the epoll's registry) asleep in `read(2)`.
#[test]
fn autoreset_delivery_in_a_harvest_with_a_racing_peer() {
    watchdog("AutoReset delivery", 60, || {
        let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
        let peer = peer_clears_nonblock(&kick);
        let ep = Epoll::new();
        ep.add(&kick, Events::IN, 1).unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thief = {
            let stop = Arc::clone(&stop);
            std::thread::spawn(move || {
                let mut stolen = 0u64;
                while !stop.load(SeqCst) {
                    // The peer's own read is blocking; poll first so that it can stop.
                    let mut fds = [rustix::event::PollFd::new(
                        &peer,
                        rustix::event::PollFlags::IN,
                    )];
                    let ten_ms = rustix::event::Timespec {
                        tv_sec: 0,
                        tv_nsec: 10_000_000,
                    };
                    if rustix::event::poll(&mut fds, Some(&ten_ms)).unwrap_or(0) == 1 {
                        // May lose to the harvest and sleep until the next write.
                        stolen += peer_read(&peer);
                    }
                }
                stolen
            })
        };
        let mut delivered = 0u64;
        let mut buf = [Event::default(); 4];
        let rounds = 20_000;
        for _ in 0..rounds {
            kick.write(1).unwrap();
            delivered += ep.wait(&mut buf, Some(Duration::ZERO)).unwrap() as u64;
        }
        stop.store(true, SeqCst);
        kick.write(1).unwrap(); // release a peer read that lost the last race
        let stolen = thief.join().unwrap();
        assert!(delivered <= rounds, "at most one delivery per write");
        assert!(delivered + stolen > 0);
    });
}

/// `AsyncNotifierFd::read` on a kernel eventfd: tokio says readable, the peer takes the
/// count, and the read inside `try_io` must answer `WouldBlock` (back to the reactor), not
/// sleep in `read(2)` on the runtime thread.
#[cfg(feature = "tokio")]
#[test]
fn async_read_with_a_peer_taking_the_count() {
    watchdog("AsyncNotifierFd::read", 60, || {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let k = KernelNotifier::new(Mode::Counter).unwrap();
            let peer = peer_clears_nonblock(&k);
            let writer = k.try_clone().unwrap();
            let a = evfd::tokio::AsyncNotifierFd::from_kernel(k).unwrap();
            let stop = Arc::new(AtomicBool::new(false));
            let thief = {
                let stop = Arc::clone(&stop);
                std::thread::spawn(move || {
                    let mut stolen = 0u64;
                    while !stop.load(SeqCst) {
                        let mut fds = [rustix::event::PollFd::new(
                            &peer,
                            rustix::event::PollFlags::IN,
                        )];
                        let ten_ms = rustix::event::Timespec {
                            tv_sec: 0,
                            tv_nsec: 10_000_000,
                        };
                        if rustix::event::poll(&mut fds, Some(&ten_ms)).unwrap_or(0) == 1 {
                            stolen += peer_read(&peer);
                        }
                    }
                    stolen
                })
            };
            let mut got = 0u64;
            let mut timeouts = 0u64;
            let rounds = 3_000u64;
            for _ in 0..rounds {
                writer.write(1).unwrap();
                match tokio::time::timeout(Duration::from_millis(20), a.read()).await {
                    Ok(r) => got += r.unwrap(),
                    Err(_) => timeouts += 1,
                }
            }
            stop.store(true, SeqCst);
            writer.write(1).unwrap();
            let stolen = thief.join().unwrap();
            // Every unit went to one side or the other (the last release write aside).
            assert!(got + stolen >= rounds, "{got} + {stolen} < {rounds}");
            assert!(got + stolen <= rounds + 1);
            let _ = timeouts;
        });
    });
}
