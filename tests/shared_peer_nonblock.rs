//! A peer that shares a `SharedNotifier`'s doorbell can clear `O_NONBLOCK` on its open file
//! description (QEMU does this to every fd it receives) and then empty or saturate the
//! doorbell. The honest side's doorbell rings and drains must still never wait: each call
//! here runs under a watchdog and must return on time.
#![cfg(target_os = "linux")]

mod shared_util;
mod util;

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

/// The readers' sleep bell of `n` as a peer holding its message has it (the third fd).
fn sleep_bell_of(n: &SharedNotifier) -> OwnedFd {
    let (a, b) = UnixStream::pair().unwrap();
    n.send(&a).unwrap();
    let mut payload = [0u8; 256];
    let fds = recv_fds(&b, &mut payload);
    assert_eq!(fds.len(), 3, "region, doorbell, sleep bell");
    fds.into_iter().nth(2).unwrap()
}

/// Until `f` holds (10 s at most).
fn until(what: &str, f: impl Fn() -> bool) {
    let end = std::time::Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(std::time::Instant::now() < end, "{what}");
        thread::sleep(Duration::from_millis(1));
    }
}

/// A reader in another process sleeps on the sleep bell of `n` and is stopped there
/// (`SIGSTOP`: from here it takes nothing out of the bell), and a peer saturates the bell (a
/// blocking eventfd): the write that must wake the reader rings into a bell with no room.
/// The child exits 0 once it has read `expect` after `SIGCONT`.
fn reader_stopped_on_a_saturated_bell(n: &SharedNotifier, expect: u64) -> StoppedReader {
    let sleep = sleep_bell_of(n);
    let n2 = n.clone();
    let pid = shared_util::fork_child(move || match n2.read() {
        Ok(v) if v == expect => 0,
        _ => 1,
    });
    // Guarded from here: a check below that fails kills and reaps the child too.
    let child = StoppedReader(pid);
    until("the child never slept", || n.sleepers().0 == 1);
    // Announced, and now asleep in its syscall.
    util::wait_until_process_blocked(pid, "the child's read");
    // SAFETY: `pid` is our child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGSTOP) }, 0);
    // Stopped for sure (a signal is delivered when the child next runs).
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    let waited = unsafe { libc::waitpid(pid, &mut status, libc::WUNTRACED) };
    assert_eq!(waited, pid);
    assert!(libc::WIFSTOPPED(status), "{status:#x}");
    rustix::io::write(&sleep, &0xffff_ffff_ffff_fffeu64.to_ne_bytes()).unwrap();
    child
}

/// The reader's pid. A test that fails before [`resume_and_reap`] kills and reaps it on
/// the way out: left stopped (or asleep), it would hold the test's output pipe open for
/// ever.
struct StoppedReader(libc::pid_t);

impl Drop for StoppedReader {
    fn drop(&mut self) {
        // SAFETY: our child, not reaped yet (`resume_and_reap` forgets the guard once it
        // has reaped it); `status` is a valid out-pointer.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            let mut status = 0;
            libc::waitpid(self.0, &mut status, 0);
        }
    }
}

/// Let the stopped child go and check that it read what it expected.
fn resume_and_reap(child: StoppedReader) {
    let pid = child.0;
    // SAFETY: `pid` is our child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGCONT) }, 0);
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    std::mem::forget(child); // reaped: no kill on drop
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "the child did not read what was written: {status:#x}"
    );
}

/// A non-blocking write and a timed one ring into the saturated sleep bell and return on
/// time (the timed one well within its timeout), and the reader, let go, reads the count.
#[test]
fn try_write_and_write_timeout_into_a_saturated_sleep_bell_return() {
    type Write = fn(&SharedNotifier) -> std::io::Result<()>;
    let writes: [(&str, Write); 2] = [
        ("try_write", |n| n.try_write(7)),
        ("write_timeout", |n| {
            n.write_timeout(7, Duration::from_secs(60))
        }),
    ];
    for (what, write) in writes {
        let n = SharedNotifier::new(Mode::Counter).unwrap();
        let child = reader_stopped_on_a_saturated_bell(&n, 7);
        let n3 = n.clone();
        on_time(what, move || write(&n3).unwrap());
        assert_eq!(
            n.stats().bell_wakes,
            1,
            "{what}: the child held the sleep bell: one ring tried"
        );
        resume_and_reap(child);
        assert_eq!(n.count(), 0, "{what}");
    }
}

/// A blocking write with no deadline rings with one plain `write(2)`, so it waits while the
/// peer keeps the bell saturated, as it waits while a peer keeps the count full: the unit
/// is counted at once, and the call returns once the reader runs again and empties the
/// bell.
#[test]
fn blocking_write_into_a_saturated_sleep_bell_waits_for_the_reader() {
    let n = SharedNotifier::new(Mode::Counter).unwrap();
    let child = reader_stopped_on_a_saturated_bell(&n, 7);
    let n3 = n.clone();
    let (tx, rx) = mpsc::channel();
    let (ttx, trx) = mpsc::channel();
    let writer = thread::spawn(move || {
        ttx.send(util::this_tid()).unwrap();
        let r = n3.write(7);
        let _ = tx.send(());
        r
    });
    let tid = trx.recv().unwrap();
    until("the write never counted its unit", || n.count() == 7);
    // Asleep in its ring (a `write(2)` into the full bell), and still there 100 ms on.
    util::wait_until_blocked_in(tid, &[libc::SYS_write], "the write's ring");
    thread::sleep(Duration::from_millis(100));
    assert!(
        rx.try_recv().is_err(),
        "the write returned while the bell was saturated and its holder stopped"
    );
    resume_and_reap(child);
    on_time("write", move || writer.join().unwrap().unwrap());
    assert_eq!(n.stats().bell_wakes, 1);
    assert_eq!(n.count(), 0);
}

/// A peer makes the sleep bell non-blocking: the reader that sleeps on it no longer waits
/// in its `read(2)`, and must not spin on `EAGAIN` either: it sleeps in `poll(2)` (its CPU
/// time over 200 ms asleep stays small) and is woken by the next write.
#[test]
fn a_sleep_bell_made_non_blocking_still_sleeps() {
    let n = SharedNotifier::new(Mode::Counter).unwrap();
    let sleep = sleep_bell_of(&n);
    let fl = fcntl_getfl(&sleep).unwrap();
    fcntl_setfl(&sleep, fl | OFlags::NONBLOCK).unwrap();
    let n2 = n.clone();
    let (ttx, trx) = mpsc::channel();
    let reader = thread::spawn(move || {
        ttx.send(util::this_tid()).unwrap();
        let t0 = shared_util::thread_cpu();
        let got = n2.read().unwrap();
        (got, shared_util::thread_cpu() - t0)
    });
    let tid = trx.recv().unwrap();
    until("the reader never slept", || n.sleepers().0 == 1);
    let polls = [
        #[cfg(any(target_arch = "x86_64", target_arch = "x86", target_arch = "arm"))]
        libc::SYS_poll,
        libc::SYS_ppoll,
    ];
    util::wait_until_blocked_in(tid, &polls, "the reader's poll(2)");
    thread::sleep(Duration::from_millis(200));
    n.write(3).unwrap();
    let (got, cpu) = on_time("read", move || reader.join().unwrap());
    assert_eq!(got, 3);
    assert!(
        cpu < Duration::from_millis(50),
        "the reader spent {cpu:?} of CPU in 200 ms asleep"
    );
    assert_eq!(n.stats().bell_wakes, 1);
    assert_eq!(n.sleepers(), (0, 0, 0));
}
