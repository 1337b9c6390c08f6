//! loom models of a `SignalNotifier` write (`notifier::signal_slot`): the handler half (the
//! lock-free CAS, the interest load, the record) racing a reader that registers and sleeps,
//! and the relay half (`flush`) that follows the handler's ring. A lost wake shows up as a
//! loom deadlock, a wrong count as a failed assertion. One scenario per model.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::thread;

use super::model;
use crate::mode::Mode;
use crate::notifier::signal_slot::Slot;
use crate::notifier::Notifier;

/// A "handler" writes 1 while a reader blocks in `read()`; the "relay" flushes after the
/// handler rang (the ring is what wakes it). The reader must get the unit.
#[test]
fn signal_write_vs_blocking_read() {
    model("signal_write_vs_blocking_read", 2, || {
        let n = Notifier::new();
        let slot = Arc::new(Slot::new(n.clone()));
        let bell = Arc::new(AtomicBool::new(false));
        let r = {
            let n = n.clone();
            thread::spawn(move || n.read().unwrap())
        };
        let h = {
            let (slot, bell) = (Arc::clone(&slot), Arc::clone(&bell));
            thread::spawn(move || {
                if slot.write(1).unwrap() {
                    bell.store(true, SeqCst);
                }
            })
        };
        h.join().unwrap();
        // The relay, woken by the ring.
        if bell.swap(false, SeqCst) {
            slot.flush();
        }
        assert_eq!(r.join().unwrap(), 1);
        assert_eq!(n.count(), 0);
        assert!(!slot.owes());
        assert_eq!(n.core.wq.len(), 0);
    });
}

/// Semaphore: a handler's write of 2 with two readers blocked: the relay's flush must
/// wake one reader per unit.
#[test]
fn signal_semaphore_write_two_readers() {
    model("signal_semaphore_write_two_readers", 2, || {
        let n = Notifier::builder().mode(Mode::Semaphore).build().unwrap();
        let slot = Arc::new(Slot::new(n.clone()));
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let n = n.clone();
                thread::spawn(move || n.read().unwrap())
            })
            .collect();
        if slot.write(2).unwrap() {
            slot.flush();
        }
        for r in readers {
            assert_eq!(r.join().unwrap(), 1);
        }
        assert_eq!(n.count(), 0);
        assert_eq!(n.core.wq.len(), 0);
    });
}
