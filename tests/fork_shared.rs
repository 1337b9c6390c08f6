//! A `fork(2)` child uses its copy of the parent's `SharedNotifier`: the mapping is
//! `MAP_SHARED` and the futex shared, so each process wakes the other.
//!
//! One test per file: the child of a fork runs only code that neither allocates nor
//! takes locks on its success path (atomics, futex, `_exit`).

mod shared_util;

use std::time::Duration;

use evfd::{Mode, SharedNotifier};
use shared_util::{fork_child, wait_child};

#[test]
fn fork_child_uses_the_parents_object_each_mode() {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let ping = SharedNotifier::new(mode).unwrap();
        let pong = SharedNotifier::new(mode).unwrap();
        let pid = fork_child(|| {
            // Block until the parent writes, then answer with 10 units.
            match ping.read_timeout(Duration::from_secs(10)) {
                Ok(1) => {}
                _ => return 2,
            }
            if pong.write(10).is_err() {
                return 3;
            }
            0
        });
        // Let the child fall asleep (it announces itself in the region first).
        let start = std::time::Instant::now();
        while ping.sleepers().0 == 0 {
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{mode:?}: child never slept"
            );
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(5));
        ping.write(1).unwrap();
        let expect = if mode == Mode::Semaphore { 1 } else { 10 };
        assert_eq!(
            pong.read_timeout(Duration::from_secs(10)).unwrap(),
            expect,
            "{mode:?}"
        );
        assert_eq!(wait_child(pid), 0, "{mode:?}");
        assert_eq!(ping.count(), 0);
        if mode == Mode::Semaphore {
            assert_eq!(pong.count(), 9);
        }
        // The child's blocked read announced itself and left again.
        assert_eq!(ping.sleepers(), (0, 0, 0));
        let st = ping.stats();
        assert_eq!(
            (st.futex_wakes, st.bell_wakes),
            (0, 1),
            "{mode:?}: one wake woke the sleeping child, on the sleep bell"
        );
    }
}
