//! A peer that shares a `SharedNotifier`'s doorbell can clear `O_NONBLOCK` on its open file
//! description (QEMU does this to every fd it receives) and then empty or saturate the
//! doorbell. The honest side's doorbell rings and drains must still never wait: each call
//! here runs under a watchdog and must return on time.
#![cfg(target_os = "linux")]

mod shared_util;

use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use evfd::{Events, Mode, SharedNotifier};
use rustix::fs::{fcntl_getfl, fcntl_setfl, OFlags};
use shared_util::{doorbell, recv_fds};

/// The honest side's notifier, and the peer's copy of its doorbell made blocking.
fn shared_with_a_blocking_doorbell(mode: Mode) -> (SharedNotifier, OwnedFd) {
    let n = SharedNotifier::new(mode).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    n.send(&a).unwrap();
    let mut payload = [0u8; 256];
    let bell = doorbell(recv_fds(&b, &mut payload));
    let fl = fcntl_getfl(&bell).unwrap();
    fcntl_setfl(&bell, fl - OFlags::NONBLOCK).unwrap();
    (n, bell)
}

/// Run `f` on a thread and fail if it has not returned within 10 s.
fn on_time<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(10))
        .unwrap_or_else(|_| panic!("{what} blocked on a doorbell a peer made blocking"))
}

#[test]
fn ring_into_a_saturated_blocking_doorbell_returns() {
    let (n, bell) = shared_with_a_blocking_doorbell(Mode::Counter);
    let view = n.fd_view().unwrap(); // the doorbell is now rung on edges
                                     // The peer saturates the doorbell: a ring (write 1) would wait for room for ever.
    rustix::io::write(&bell, &0xffff_ffff_ffff_fffeu64.to_ne_bytes()).unwrap();
    let n2 = n.clone();
    on_time("write", move || n2.write(1).unwrap());
    assert_eq!(n.count(), 1, "the unit written is counted");
    drop(view);
}

#[test]
fn drain_of_an_emptied_blocking_doorbell_returns() {
    let (n, bell) = shared_with_a_blocking_doorbell(Mode::Counter);
    let view = n.fd_view().unwrap();
    n.write(3).unwrap();
    // The peer takes the doorbell's ring: our drain on consume would wait for ever.
    let mut buf = [0u8; 8];
    rustix::io::read(&bell, &mut buf).unwrap();
    let (got, left) = on_time("consume", move || {
        let got = view.consume().unwrap();
        (got, view.notifier().count())
    });
    assert!(got.contains(Events::IN));
    assert_eq!(left, 3, "a Counter consume reports IN and keeps the count");
    assert_eq!(on_time("read", move || n.try_read().unwrap()), 3);
    drop(bell);
}
