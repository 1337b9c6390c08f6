//! `SharedNotifier::read_async` in a `fork(2)` child, on the parent's notifier: the
//! epoll a read future waits in is the process's own, so a child whose parent's read
//! futures made one (which the child cannot use: its in-memory state is the parent's)
//! makes its own, and reads what the parent writes.

use std::time::Duration;

use evfd::{Mode, SharedNotifier};

#[allow(dead_code)] // in_child_of: this file needs the parent half too
mod fork_util;
use fork_util::in_child_then;

#[test]
fn a_fork_child_reads_async_on_the_parents_notifier() {
    for parent_read_first in [true, false] {
        let s = SharedNotifier::new(Mode::Counter).unwrap();
        let back = SharedNotifier::new(Mode::Counter).unwrap();
        if parent_read_first {
            // The parent's read future makes its epoll (and leaves it for the next).
            s.write(1).unwrap();
            assert_eq!(futures::executor::block_on(s.read_async()).unwrap(), 1);
        }
        in_child_then(
            "child reads async",
            // SAFETY: the child uses evfd and `futures`' executor, and `_exit`s.
            || unsafe { libc::fork() },
            || {
                for round in 1..=3u64 {
                    // Waits (the parent writes after the child announced the round).
                    back.write(round).map_err(|e| e.to_string())?;
                    let got = futures::executor::block_on(s.read_async())
                        .map_err(|e| format!("round {round}: {e}"))?;
                    if got != round {
                        return Err(format!("round {round}: read {got}"));
                    }
                }
                Ok(())
            },
            || {
                for round in 1..=3u64 {
                    assert_eq!(back.read_timeout(Duration::from_secs(10)).unwrap(), round);
                    std::thread::sleep(Duration::from_millis(5));
                    s.write(round).unwrap();
                }
            },
        );
        // The parent's own read futures still work.
        s.write(4).unwrap();
        assert_eq!(futures::executor::block_on(s.read_async()).unwrap(), 4);
    }
}
