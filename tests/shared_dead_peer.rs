//! A process SIGKILLed while it sleeps on a `SharedNotifier` (a blocked reader, a writer
//! blocked on a full counter) leaves its count in the region's `sleepers` word, which no
//! one can tell from a live sleeper's. It must cost the survivor at most one wasted
//! `FUTEX_WAKE`, not one per write or read for ever.
//!
//! One test in this file: the child of a fork runs only code that neither allocates nor
//! takes locks on its success path (atomics, futex, `_exit`).

mod shared_util;
mod util;

use std::time::{Duration, Instant};

use evfd::{Mode, SharedNotifier, LIMIT};
use shared_util::fork_child;

/// SIGKILL the child and reap it; it must have died of the signal (it was asleep).
fn kill_child(pid: libc::pid_t) {
    // SAFETY: `pid` is our child, not yet reaped.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(
        libc::WIFSIGNALED(status) && libc::WTERMSIG(status) == libc::SIGKILL,
        "the child was not killed asleep: {status:#x}"
    );
}

/// Until `f` holds (panics after 10 s), and then until child `pid` sleeps (in FUTEX_WAIT).
fn until(pid: libc::pid_t, what: &str, f: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(10);
    while !f() {
        assert!(Instant::now() < end, "{what}");
        std::thread::sleep(Duration::from_millis(1));
    }
    util::wait_until_process_blocked(pid, what);
}

#[test]
fn sleepers_killed_asleep_cost_at_most_one_wake() {
    const ROUNDS: u64 = 200;
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        // A reader killed in its blocking read.
        let s = SharedNotifier::new(mode).unwrap();
        let pid = fork_child(|| match s.read() {
            Ok(_) => 2, // nobody writes: never reached
            Err(_) => 3,
        });
        until(pid, "the child never slept as a reader", || {
            s.sleepers().0 == 1
        });
        kill_child(pid);
        assert_eq!(s.sleepers().0, 1, "{mode:?}: the dead reader's count stays");
        let before = s.stats();
        for _ in 0..ROUNDS {
            s.write(1).unwrap(); // 0 -> 1: an edge, with a "reader" registered
            assert_eq!(s.read().unwrap(), 1);
        }
        let after = s.stats();
        let wakes =
            (after.futex_wakes + after.bell_wakes) - (before.futex_wakes + before.bell_wakes);
        assert!(
            wakes <= 1,
            "{mode:?}: {wakes} wakes for {ROUNDS} edges after the reader died"
        );

        // A writer killed while blocked on a full counter.
        let s = SharedNotifier::builder()
            .mode(mode)
            .initial(LIMIT)
            .build()
            .unwrap();
        let pid = fork_child(|| match s.write(1) {
            Ok(()) => 2, // nobody reads: never reached
            Err(_) => 3,
        });
        until(pid, "the child never slept as a writer", || {
            s.sleepers().1 == 1
        });
        kill_child(pid);
        assert_eq!(s.sleepers().1, 1, "{mode:?}: the dead writer's count stays");
        let before = s.stats();
        for _ in 0..ROUNDS {
            let v = s.try_read().unwrap(); // a consumption, with a "writer" registered
            s.try_write(v).unwrap(); // full again
        }
        let after = s.stats();
        assert!(
            after.futex_wakes - before.futex_wakes <= 1,
            "{mode:?}: {} FUTEX_WAKEs for {ROUNDS} reads after the writer died",
            after.futex_wakes - before.futex_wakes
        );
        assert_eq!(
            after.rings, before.rings,
            "{mode:?}: no async writer, no pulse"
        );
        assert_eq!(s.count(), LIMIT, "{mode:?}: the dead writer added nothing");
    }
}
