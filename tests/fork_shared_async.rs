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
            // The parent's read future waits, so it makes its epoll (and leaves it for the
            // next): the unit comes once the future is registered, which it is only after
            // its watch exists.
            assert_eq!(read_async_woken(&s), 1);
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
        // The parent's own read futures still work, waiting in the parent's epoll.
        assert_eq!(read_async_woken(&s), 1);
    }
}

/// `read_async` on `s` while the count is 0: its first poll is `Pending` (it waits, so it
/// made or took the process's epoll and registered), then a `write(1)` wakes it.
fn read_async_woken(s: &SharedNotifier) -> u64 {
    futures::executor::block_on(async {
        let mut f = std::pin::pin!(s.read_async());
        assert!(
            futures::poll!(f.as_mut()).is_pending(),
            "nothing written yet"
        );
        s.write(1).unwrap();
        f.await
    })
    .unwrap()
}
