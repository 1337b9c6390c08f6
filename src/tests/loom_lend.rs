//! loom model of a private description's first lend (`sys::fd`): a call that saw the
//! description private must make its syscall before the borrow goes out, so that a peer
//! holding the borrow cannot clear `O_NONBLOCK` under it. The scenarios: a private call
//! racing the first lend, the borrower "clearing the flag" as soon as it has the borrow;
//! and the same with a fork at once (two closers of the private sections, one at a time);
//! and a lend nested in a section or in a closer of its own thread, as a signal handler
//! makes it.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::thread;

use super::model;
use crate::sys::fd::Fd;

/// A private description, as a `KernelNotifier` holds one.
fn private_fd() -> Arc<Fd> {
    let efd = crate::sys::eventfd::create(0, false, true).expect("eventfd");
    Arc::new(Fd::private(efd))
}

/// A thread making one call on `f`: told private, its syscall must come before the peer
/// could clear `O_NONBLOCK` (`cleared`, set by the model once the lend returned).
fn private_call(f: &Arc<Fd>, cleared: &Arc<AtomicBool>) -> thread::JoinHandle<()> {
    let (f, cleared) = (Arc::clone(f), Arc::clone(cleared));
    thread::spawn(move || {
        f.guarded(|_, private| {
            if private {
                assert!(!cleared.load(SeqCst), "a private call ran after the lend");
            }
        })
    })
}

#[test]
fn a_call_told_private_ends_before_the_first_lend_returns() {
    model(
        "a_call_told_private_ends_before_the_first_lend_returns",
        3,
        || {
            let f = private_fd();
            // Stands for the peer's `fcntl` clearing `O_NONBLOCK`: it can only follow the lend.
            let cleared = Arc::new(AtomicBool::new(false));
            let caller = private_call(&f, &cleared);
            let _ = f.lend();
            cleared.store(true, SeqCst);
            caller.join().unwrap();
            // Afterwards every call is told the truth.
            assert!(!f.guarded(|_, p| p));
        },
    );
}

/// The two closers at once (`sys::fork::close_private_sections`): a first lend and a fork
/// racing a private call. They take turns (`CLOSING`), and each closes for itself: the call
/// is told private only if it runs before both the borrow and the child exist. (With the
/// two closers waiting side by side, as before the turns, each spinning on `yield_now`,
/// loom could alternate them without end and gave up at a preemption bound of 3; with the
/// turns the model completes at any bound: 740 interleavings at 3, 6 301 at 5.)
#[test]
fn a_lend_and_a_fork_at_once() {
    model("a_lend_and_a_fork_at_once", 2, || {
        let f = private_fd();
        let cleared = Arc::new(AtomicBool::new(false));
        let forked = Arc::new(AtomicBool::new(false));
        let caller = {
            let (f, cleared, forked) = (Arc::clone(&f), Arc::clone(&cleared), Arc::clone(&forked));
            thread::spawn(move || {
                f.guarded(|_, private| {
                    if private {
                        assert!(!cleared.load(SeqCst), "a private call ran after the lend");
                        assert!(
                            !forked.load(SeqCst),
                            "a private call ran in the child's time"
                        );
                    }
                })
            })
        };
        let lender = {
            let (f, cleared) = (Arc::clone(&f), Arc::clone(&cleared));
            thread::spawn(move || {
                let _ = f.lend();
                cleared.store(true, SeqCst);
            })
        };
        let closed = crate::sys::fork::model::prepare();
        forked.store(true, SeqCst);
        crate::sys::fork::model::parent(closed);
        caller.join().unwrap();
        lender.join().unwrap();
        assert!(!f.guarded(|_, p| p));
    });
}

/// A first lend made inside a private section of its own thread, as a signal handler that
/// interrupted the section makes it (`sys::fork::close_for_lend`): it must not wait for
/// that section (which cannot end before it returns), and must still wait for a private
/// call of the lent fd on another thread. (With the lend waiting for every section, as
/// before, the model spins for ever on the interrupted one.)
#[test]
fn a_lend_nested_in_a_section_waits_for_the_others_only() {
    model(
        "a_lend_nested_in_a_section_waits_for_the_others_only",
        3,
        || {
            let (other, f) = (private_fd(), private_fd());
            let cleared = Arc::new(AtomicBool::new(false));
            let caller = private_call(&f, &cleared);
            // The interrupted call: a private section on another fd; the "handler" lends `f`.
            other.guarded(|_, _| {
                let _ = f.lend();
                cleared.store(true, SeqCst);
            });
            caller.join().unwrap();
            assert!(!f.guarded(|_, p| p));
            assert!(other.guarded(|_, p| p), "the other fd is still private");
        },
    );
}

/// A first lend made while its own thread holds the closers' turn, as a signal handler
/// that interrupted a closer (a fork's `prepare`, another first lend) makes it: it must not
/// wait for the turn (held until the handler returns), and must still wait for a private
/// call of the lent fd on another thread. (Taking the turn, as before, deadlocks.)
#[test]
fn a_lend_nested_in_a_closer_takes_no_turn() {
    model("a_lend_nested_in_a_closer_takes_no_turn", 3, || {
        let f = private_fd();
        let cleared = Arc::new(AtomicBool::new(false));
        let caller = private_call(&f, &cleared);
        let closed = crate::sys::fork::close_private_sections();
        let _ = f.lend();
        cleared.store(true, SeqCst);
        crate::sys::fork::open_private_sections(closed);
        caller.join().unwrap();
        assert!(!f.guarded(|_, p| p));
    });
}
