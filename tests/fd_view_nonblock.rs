//! A poller holding an fd view's fd that clears `O_NONBLOCK` (the flag of the shared open
//! file description) cannot wedge the view: its doorbell drain and ring never wait. Under a
//! watchdog, so a regression fails instead of hanging (docs/semantics.md, "Shared open
//! file descriptions and O_NONBLOCK").

use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use evfd::Notifier;

fn watchdog<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    match rx.recv_timeout(Duration::from_secs(10)) {
        Ok(v) => v,
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("{what}: panicked"),
        Err(_) => panic!("{what}: blocked past the watchdog"),
    }
}

fn peer_clears_nonblock(fd: impl AsFd) -> OwnedFd {
    let peer = rustix::io::dup(fd).unwrap();
    let fl = rustix::fs::fcntl_getfl(&peer).unwrap();
    rustix::fs::fcntl_setfl(&peer, fl - rustix::fs::OFlags::NONBLOCK).unwrap();
    peer
}

fn readable(fd: impl AsFd) -> bool {
    let mut fds = [rustix::event::PollFd::new(
        &fd,
        rustix::event::PollFlags::IN,
    )];
    rustix::event::poll(&mut fds, Some(&rustix::event::Timespec::default())).unwrap() == 1
}

/// The peer drains the doorbell behind the view's back; the view's own drain (after the
/// notifier is read) must not sleep in `read(2)`.
#[test]
fn drain_after_a_peer_emptied_the_doorbell() {
    watchdog("fd view drain", || {
        let n = Notifier::new();
        let view = n.fd_view().unwrap();
        let peer = peer_clears_nonblock(&view);
        n.notify().unwrap(); // ring
        assert!(readable(&view));
        // The peer reads the doorbell (on Linux an eventfd: 8 bytes; a pipe: 1).
        let mut b = [0u8; 8];
        assert!(rustix::io::read(&peer, &mut b).unwrap() > 0);
        assert_eq!(n.read().unwrap(), 1); // drain: the doorbell is already empty
        assert!(!readable(&view));
        // The view still works both ways.
        n.notify().unwrap();
        assert!(readable(&view));
        assert_eq!(n.read().unwrap(), 1);
        assert!(!readable(&view));
    });
}

/// Many edges with the flag cleared: every ring and drain returns.
#[test]
fn edges_with_the_flag_cleared() {
    watchdog("fd view edges", || {
        let n = Notifier::new();
        let view = n.fd_view().unwrap();
        let _peer = peer_clears_nonblock(&view);
        for i in 0..1_000u64 {
            n.write(i + 1).unwrap();
            assert!(readable(&view));
            assert_eq!(n.try_read().unwrap(), i + 1);
            assert!(!readable(&view));
        }
    });
}
