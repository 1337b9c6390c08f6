//! loom models of the task slot (`wait_queue::slot`) at the wait-queue level: who gets the
//! armed waker when a wake and the owner's leaving race, and the `SLOT` bit of `interest`
//! against the list's `publish` and the settled mark's moves. (`loom_async` covers the slot
//! through real futures.)
//!
//! loom's `UnsafeCell` checks the cell: two accesses not ordered by the phase word fail
//! the model.

use std::sync::Arc;
use std::task::{Wake, Waker};

use loom::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use loom::thread;

use crate::events::Events;
use crate::wait_queue::{Callback, Target, WaitQueue, WakeBatch};

struct Flag(AtomicUsize);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

fn flag() -> (Arc<Flag>, Waker) {
    let f = Arc::new(Flag(AtomicUsize::new(0)));
    (f.clone(), Waker::from(f))
}

/// The owner leaves while a wake claims it: exactly one of them gets the waker. Either the
/// owner takes it back (and the wake finds nobody), or the wake wakes it once and the owner
/// learns it was claimed.
#[test]
fn slot_claim_vs_disarm() {
    super::model("slot_claim_vs_disarm", 3, || {
        let wq = Arc::new(WaitQueue::new());
        let (f, w) = flag();
        let t = wq.arm_task(w, false).expect("a free slot");
        let wq2 = wq.clone();
        let waker = thread::spawn(move || wq2.wake(Events::IN, 1));
        let left = wq.disarm_task(t);
        waker.join().unwrap();
        match left {
            Ok(w) => {
                assert_eq!(f.0.load(SeqCst), 0, "woken and taken back");
                drop(w);
            }
            Err(_) => assert_eq!(f.0.load(SeqCst), 1, "claimed but not woken"),
        }
        assert_eq!(wq.len(), 0);
        assert_eq!(wq.interest(), Events::empty(), "a stale SLOT bit");
    });
}

/// The list changes (an entry added and removed: two `publish`es) while a wake claims the
/// slot's task and a new owner arms the slot again: `publish` never drops or restores the
/// slot's bit, so `interest` says `IN` exactly while a task is armed.
#[test]
fn slot_bit_survives_publish() {
    super::model("slot_bit_survives_publish", 2, || {
        let wq = Arc::new(WaitQueue::new());
        let (fa, wa) = flag();
        wq.arm_task(wa, false).expect("a free slot");
        let wq2 = wq.clone();
        let lister = thread::spawn(move || {
            let (_, w) = flag();
            let k = wq2.add(Events::OUT, false, false, Target::Task(w));
            assert!(wq2.remove(k));
        });
        let wq3 = wq.clone();
        let waker = thread::spawn(move || wq3.wake(Events::IN, 1));
        waker.join().unwrap();
        // A second owner arms once the first was claimed.
        let (fb, wb) = flag();
        let tb = wq
            .arm_task(wb, false)
            .expect("claimed: the slot is free again");
        lister.join().unwrap();
        assert_eq!(fa.0.load(SeqCst), 1);
        assert!(
            wq.interest().contains(Events::IN),
            "the armed owner's bit was lost"
        );
        wq.wake(Events::IN, 1);
        assert_eq!(fb.0.load(SeqCst), 1, "the second owner was not woken");
        assert!(wq.disarm_task(tb).is_err());
        assert_eq!(wq.interest(), Events::empty(), "a stale SLOT bit");
    });
}

/// A wake races the owner's arming: the owner's re-check (here: a look at the wake's flag
/// of record, `done`) or the wake reaches it — the Dekker pair of the slot.
#[test]
fn slot_arm_vs_wake() {
    super::model("slot_arm_vs_wake", 3, || {
        let wq = Arc::new(WaitQueue::new());
        let done = Arc::new(AtomicUsize::new(0));
        let (wq2, done2) = (wq.clone(), done.clone());
        let waker = thread::spawn(move || {
            done2.store(1, SeqCst);
            wq2.wake(Events::IN, 1);
        });
        let (f, w) = flag();
        let t = wq.arm_task(w, false).expect("a free slot");
        let seen = done.load(SeqCst) == 1;
        waker.join().unwrap();
        assert!(
            seen || f.0.load(SeqCst) == 1,
            "a lost wakeup: the re-check missed the state and the wake missed the slot"
        );
        let _ = wq.disarm_task(t);
        assert_eq!(wq.interest(), Events::empty());
    });
}

/// An epoll item's stand-in that is always linked with nobody asleep: every `IN` wake is a
/// no-op for it, so a queue holding only it settles.
struct Coalescing(AtomicUsize);

impl Callback for Coalescing {
    fn wake(&self, _key: Events, _batch: &mut WakeBatch) -> bool {
        self.0.fetch_add(1, SeqCst);
        true
    }
    fn detach(&self) {}
    fn coalesces(&self) -> bool {
        true
    }
}

/// The settled mark moves between the list's `IN` bit and `SETTLED` (`wait_queue`,
/// "Settled") while the slot's bit moves beside it, lock-free (an owner arming), and the
/// list changes (an entry without `IN` added and removed: a clear, then a `publish`): no bit
/// is lost or made up. Afterwards `IN` and `SLOT` are set and `SETTLED` is not, and a wake
/// reaches the slot's task (and settles the list again).
#[test]
fn settled_mark_vs_slot_bit() {
    super::model("settled_mark_vs_slot_bit", 3, || {
        let wq = Arc::new(WaitQueue::new());
        let item = Arc::new(Coalescing(AtomicUsize::new(0)));
        wq.add(Events::IN, false, false, Target::Callback(item.clone()));
        wq.wake(Events::IN, 1); // the one IN entry coalesces: settled, no callback
        assert_eq!(wq.stored_bits(), (false, true, false));
        let wq2 = wq.clone();
        let armer = thread::spawn(move || {
            let (f, w) = flag();
            let t = wq2.arm_task(w, false).expect("a free slot");
            (f, t)
        });
        let wq3 = wq.clone();
        let lister = thread::spawn(move || {
            let (_, w) = flag();
            let k = wq3.add(Events::OUT, false, false, Target::Task(w));
            assert!(wq3.remove(k));
        });
        wq.unsettle();
        let (f, t) = armer.join().unwrap();
        lister.join().unwrap();
        assert_eq!(
            wq.stored_bits(),
            (true, false, true),
            "IN, not SETTLED, SLOT"
        );
        assert_eq!(wq.interest(), Events::IN);
        wq.wake(Events::IN, 1);
        assert_eq!(f.0.load(SeqCst), 1, "the slot's task was not woken");
        assert!(wq.disarm_task(t).is_err(), "claimed by the wake");
        assert_eq!(wq.stored_bits(), (false, true, false), "settled again");
        assert_eq!(item.0.load(SeqCst), 0, "a settled item is never called");
        wq.detach_all();
    });
}
