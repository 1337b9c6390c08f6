//! loom model of the fork half of the private sections (`sys::fork`): a call told that its
//! description is private (`fork::private_section`, then `forked_since`) makes its syscall
//! before the fork — the child exists only after it returned — and a call after the fork
//! is told the description is not private. One scenario: a private call racing a fork's
//! `prepare` and `parent` handlers (`fork::model`), the fork itself a flag set between the
//! two.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::thread;

use super::model;
use crate::sys::fork;

#[test]
fn a_call_told_private_ends_before_the_fork() {
    model("a_call_told_private_ends_before_the_fork", 3, || {
        // The description's birth, before any fork.
        let born = fork::forks();
        // Set while the child exists (from the fork on): a private syscall must not see it.
        let forked = Arc::new(AtomicBool::new(false));
        let caller = {
            let forked = Arc::clone(&forked);
            thread::spawn(move || {
                fork::private_section(|unforked| {
                    let private = unforked && !fork::forked_since(born);
                    if private {
                        // The call's plain syscall, which relies on nobody else holding
                        // the description.
                        assert!(
                            !forked.load(SeqCst),
                            "a call told private ran while the child existed"
                        );
                    }
                    private
                })
            })
        };
        let closed = fork::model::prepare();
        forked.store(true, SeqCst);
        fork::model::parent(closed);
        caller.join().unwrap();
        // Afterwards, in the parent, the description is shared with the child.
        assert!(!fork::private_section(
            |unforked| unforked && !fork::forked_since(born)
        ));
    });
}
