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

/// A description made by one thread while another forks, and published (so that the
/// forking thread, and with it the child, can reach it) before the fork: if the child may
/// hold it, the parent does not count it private afterwards. (Made with the count read
/// after `prepare` moved it, it would pass for one made after the fork.)
#[test]
fn a_description_made_during_a_fork_is_shared_after_it() {
    model(
        "a_description_made_during_a_fork_is_shared_after_it",
        3,
        || {
            let _ = fork::forks();
            // The object that holds the description, once made: (shared from birth, born).
            let published = Arc::new(loom::sync::Mutex::new(None::<(bool, u32)>));
            let maker = {
                let published = Arc::clone(&published);
                thread::spawn(move || {
                    let birth = fork::birth();
                    *published.lock().unwrap() = Some(birth);
                })
            };
            let closed = fork::model::prepare();
            // The fork: what the child copies.
            let copied = *published.lock().unwrap();
            fork::model::parent(closed);
            maker.join().unwrap();
            if let Some((shared, born)) = copied {
                assert!(
                    shared || fork::forked_since(born),
                    "a description the child holds counts as private in the parent"
                );
            }
        },
    );
}
