//! loom model of a private description's first lend (`sys::fd`): a call that saw the
//! description private must make its syscall before the borrow goes out, so that a peer
//! holding the borrow cannot clear `O_NONBLOCK` under it. One scenario: a private call
//! racing the first lend, the borrower "clearing the flag" as soon as it has the borrow.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::thread;

use crate::sys::fd::Fd;

#[test]
fn a_call_told_private_ends_before_the_first_lend_returns() {
    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(3);
    }
    b.check(|| {
        let efd = crate::sys::eventfd::create(0, false, true).expect("eventfd");
        let f = Arc::new(Fd::private(efd));
        // Stands for the peer's `fcntl` clearing `O_NONBLOCK`: it can only follow the lend.
        let cleared = Arc::new(AtomicBool::new(false));
        let caller = {
            let (f, cleared) = (Arc::clone(&f), Arc::clone(&cleared));
            thread::spawn(move || {
                f.guarded(|_, private| {
                    // The call's syscall: a plain one only if told private, and then the
                    // description must still be non-blocking.
                    if private {
                        assert!(!cleared.load(SeqCst), "a private call ran after the lend");
                    }
                    private
                })
            })
        };
        let _ = f.lend();
        cleared.store(true, SeqCst);
        caller.join().unwrap();
        // Afterwards every call is told the truth.
        assert!(!f.guarded(|_, p| p));
    });
}
