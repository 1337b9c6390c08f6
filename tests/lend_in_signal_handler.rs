//! The first borrow of a `KernelNotifier`'s fd taken in a signal handler, on a thread the
//! handler interrupted in a private read (docs/semantics.md §6.4): the borrow returns (it
//! used to wait for the very read it interrupted, which could not end before the handler
//! did: a hang), and the unit the handler writes through it is read exactly once.
//!
//! The main thread reads a fresh, private notifier in a loop (`try_read`: one plain
//! `read(2)` inside a private section) while a second thread sends it SIGUSR1; a signal is
//! delivered when the read's syscall returns, inside the section. A watchdog aborts the
//! process if a round does not end: the failure this test exists for is a hang.
#![cfg(target_os = "linux")]

use std::os::fd::{AsFd, AsRawFd};
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{KernelNotifier, Mode};

mod signal_util;

/// The notifier the handler lends and writes (null between rounds).
static TARGET: AtomicPtr<KernelNotifier> = AtomicPtr::new(std::ptr::null_mut());
/// Handler runs that found a notifier and wrote its unit.
static WROTE: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_usr1(_: libc::c_int) {
    let p = TARGET.load(SeqCst);
    if p.is_null() {
        return;
    }
    // SAFETY: `p` points at a `KernelNotifier` the main thread keeps alive until it has
    // seen `WROTE` move and set `TARGET` back to null; only the main thread receives
    // SIGUSR1 (the signaller sends it there with `pthread_kill`).
    let k = unsafe { &*p };
    // The first borrow of a private description, on a thread that was in a private read.
    let fd = k.as_fd();
    let one = 1u64.to_ne_bytes();
    // SAFETY: writing 8 bytes from a live buffer to an fd the borrow keeps open.
    let n = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), 8) };
    if n == 8 {
        TARGET.store(std::ptr::null_mut(), SeqCst);
        WROTE.fetch_add(1, SeqCst);
    }
}

/// The handler only touches atomics, borrows an fd (atomics, a thread-local cell,
/// `sched_yield`) and calls `write(2)`.
fn install() {
    signal_util::install_handler(libc::SIGUSR1, on_usr1, libc::SA_RESTART);
}

#[test]
fn first_lend_in_a_handler_that_interrupted_a_private_read() {
    const ROUNDS: u64 = 300;
    install();
    let done = Arc::new(AtomicBool::new(false));
    // SAFETY: `pthread_self` has no preconditions.
    let me = unsafe { libc::pthread_self() } as usize;
    // Progress, for the watchdog: the round the main thread is in.
    let round = Arc::new(AtomicU64::new(0));
    let watchdog = {
        let (done, round) = (Arc::clone(&done), Arc::clone(&round));
        std::thread::spawn(move || {
            let (mut seen, mut since) = (round.load(SeqCst), Instant::now());
            while !done.load(SeqCst) {
                std::thread::sleep(Duration::from_millis(50));
                let now = round.load(SeqCst);
                if now != seen {
                    (seen, since) = (now, Instant::now());
                } else if since.elapsed() > Duration::from_secs(20) {
                    eprintln!(
                        "round {now} did not end in 20 s: the borrow in the signal handler \
                         waits for the read it interrupted"
                    );
                    std::process::abort();
                }
            }
        })
    };
    // Signals the main thread while a round is on (its notifier published).
    let signaller = {
        let done = Arc::clone(&done);
        std::thread::spawn(move || {
            while !done.load(SeqCst) {
                if !TARGET.load(SeqCst).is_null() {
                    // SAFETY: `me` is the main thread, alive until `done` (it joins us).
                    unsafe { libc::pthread_kill(me as libc::pthread_t, libc::SIGUSR1) };
                }
                std::thread::sleep(Duration::from_micros(50));
            }
        })
    };
    for r in 0..ROUNDS {
        round.store(r, SeqCst);
        let k = KernelNotifier::new(Mode::Counter).expect("eventfd");
        let before = WROTE.load(SeqCst);
        TARGET.store(&k as *const KernelNotifier as *mut KernelNotifier, SeqCst);
        let mut got = 0;
        // Private reads until the handler has run (each a `read(2)` in a private section).
        while WROTE.load(SeqCst) == before {
            match k.try_read() {
                Ok(n) => got += n,
                Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::WouldBlock, "{e}"),
            }
        }
        assert!(TARGET.load(SeqCst).is_null());
        got += k.try_read().unwrap_or(0);
        assert_eq!(got, 1, "round {r}: the handler's unit, read exactly once");
        assert_eq!(
            k.try_read().unwrap_err().kind(),
            std::io::ErrorKind::WouldBlock
        );
    }
    done.store(true, SeqCst);
    signaller.join().unwrap();
    watchdog.join().unwrap();
    assert_eq!(WROTE.load(SeqCst), ROUNDS);
}
