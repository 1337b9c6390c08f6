//! A `fork` child that drops its copies of the parent's pending `SharedNotifier` futures (a
//! read waiting for units, a write waiting for room) must leave the parent's registrations
//! in the shared region alone: the parent's futures still wait on them, and the parent's
//! next write (read) must still wake them. Before the futures' guards looked at the fork
//! epoch, the child's drops unregistered both, and the parent's futures were never woken
//! (no ring for a region with no consumer, no pulse for one with no waiting writer).

use std::future::Future;
use std::task::Context;

use evfd::{Mode, SharedNotifier, LIMIT};

#[allow(dead_code)] // in_child_then: this file needs the child half only
mod fork_util;
use fork_util::in_child_of;

#[test]
fn a_fork_childs_copies_of_pending_futures_unregister_nothing() {
    let s = SharedNotifier::new(Mode::Counter).unwrap();
    let full = SharedNotifier::builder().initial(LIMIT).build().unwrap();
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    let mut read = Some(Box::pin(s.read_async()));
    let mut write = Some(Box::pin(full.write_async(1)));
    assert!(read.as_mut().unwrap().as_mut().poll(&mut cx).is_pending());
    assert!(write.as_mut().unwrap().as_mut().poll(&mut cx).is_pending());
    assert_eq!(s.edge_consumers(), 1, "the pending read is registered");
    assert_eq!(full.sleepers().1, 1, "the pending write is registered");
    in_child_of(
        "the child drops its copies of the parent's futures",
        // SAFETY: the child drops two futures, reads two words and `_exit`s.
        || unsafe { libc::fork() },
        || {
            drop(read.take());
            drop(write.take());
            match (s.edge_consumers(), full.sleepers().1) {
                (1, 1) => Ok(()),
                seen => Err(format!("after the child's drops: {seen:?}, wanted (1, 1)")),
            }
        },
    );
    assert_eq!(
        s.edge_consumers(),
        1,
        "the parent's read is still registered"
    );
    assert_eq!(
        full.sleepers().1,
        1,
        "the parent's write is still registered"
    );
    // The parent's futures still hear the parent's changes.
    s.write(2).unwrap();
    assert_eq!(full.read().unwrap(), LIMIT);
    let (read, write) = (read.unwrap(), write.unwrap());
    assert_eq!(futures::executor::block_on(read).unwrap(), 2);
    futures::executor::block_on(write).unwrap();
    assert_eq!((s.edge_consumers(), full.sleepers()), (0, (0, 0, 0)));
    assert_eq!(full.count(), 1);
}
