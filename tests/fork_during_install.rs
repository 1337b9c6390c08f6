//! A fork while another thread makes the process's first evfd object (which installs the
//! fork handlers): the child makes and uses objects of its own. A binary of its own, with
//! one test, whose process never uses evfd itself: each round forks a fresh process that
//! has not installed the handlers, races its first object against a fork there, and checks
//! the grandchild.

use std::sync::atomic::{AtomicU32, Ordering::SeqCst};
use std::sync::Arc;

use evfd::{KernelNotifier, Mode, Notifier};

mod fork_util;
use fork_util::in_child_of;

/// Spins `n` times (a delay that sweeps the fork across the other thread's install).
fn spin(n: u32) {
    for _ in 0..n {
        std::hint::spin_loop();
    }
}

/// What the grandchild does: objects of its own, each face that takes the fork state.
fn use_evfd() -> Result<(), String> {
    let k = KernelNotifier::new(Mode::AutoReset).map_err(|e| e.to_string())?;
    k.write(2).map_err(|e| e.to_string())?;
    if k.try_read().map_err(|e| e.to_string())? != 2 {
        return Err("a fresh KernelNotifier lost its count".into());
    }
    let n = Notifier::new();
    n.write(3).map_err(|e| e.to_string())?;
    if n.try_read().map_err(|e| e.to_string())? != 3 {
        return Err("a fresh Notifier lost its count".into());
    }
    Ok(())
}

#[test]
fn a_fork_during_the_first_install_leaves_a_working_child() {
    for round in 0..200u32 {
        // A fresh process: the handlers are not installed there.
        // SAFETY: the child spawns its own threads and forks again: it takes no lock
        // another thread of this process could hold (this process uses no evfd, and the
        // test harness's threads hold nothing the child touches), and `_exit`s.
        in_child_of(
            "fresh process",
            || unsafe { libc::fork() },
            || {
                let started = Arc::new(AtomicU32::new(0));
                let s = Arc::clone(&started);
                let t = std::thread::spawn(move || {
                    s.store(1, SeqCst);
                    // The process's first evfd object: it installs the handlers.
                    let k = KernelNotifier::new(Mode::AutoReset).unwrap();
                    k.write(1).unwrap();
                });
                while started.load(SeqCst) == 0 {
                    std::hint::spin_loop();
                }
                spin((round % 40) * 25);
                // SAFETY: the grandchild only uses evfd and `_exit`s.
                in_child_of("grandchild", || unsafe { libc::fork() }, use_evfd);
                t.join()
                    .map_err(|_| "the installing thread panicked".to_string())?;
                use_evfd()
            },
        );
    }
}
