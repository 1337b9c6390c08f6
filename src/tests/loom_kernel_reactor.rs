//! loom model of the reactor route's shape generation (`crate::epoll::kernel::reactor`,
//! "Direct registration"): a task of `wait_async` that waits on a reactor registration made
//! for one shape of the kernel fds (the lone eventfd's duplicate) must hear that the shape
//! moved (a kernel `add`/`modify`/`delete`), or it would sleep on a registration that no
//! longer hears every kernel fd. The change moves the generation (under `registry`) and then
//! wakes the waiters' `KEY_KSLEEP` entries; the task registers on `waiters` and then
//! compares the generation with its registration's. One of them sees the other.
//!
//! Real parts: `WaitQueue`, `TaskWait` (no yield, mask `KEY_KSLEEP`, as the route's). Mocked:
//! the generation (a loom atomic, `KernelPoll::shape`) and the tokio reactor, which never
//! fires here (the new fd's readiness reaches only a registration of the new shape). The
//! executor is emulated: a pending task is polled again only if its waker was woken since
//! its last poll, so a lost wake is a task left pending on the old shape.
//!
//! The same executor checks the bare task slot ("Bare" in `reactor`): a task that waits
//! with no entry on `waiters` keeps its waker in the slot and then reads the epoll's sticky
//! in-memory flag; the first in-memory `add` sets the flag and then takes and wakes the
//! slot's waker (`bare_task_*`, real `BareTask`).

use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};

use loom::sync::atomic::{AtomicU64, AtomicUsize, Ordering::SeqCst};
use loom::thread;

use crate::epoll::KEY_KSLEEP;
use crate::wait_queue::task::TaskWait;
use crate::wait_queue::{WaitFor, WaitQueue};

/// A waker that counts its wakes.
struct Flag(AtomicUsize);

impl Wake for Flag {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

/// The route's try (`Reactor::try_harvest`), reduced to its shape check: done (it will
/// choose again) once the generation is not the one its registration was made for.
struct OnShape {
    now: Arc<AtomicU64>,
    made_for: u64,
}

impl WaitFor for OnShape {
    type Output = ();

    fn try_now(&mut self) -> Option<()> {
        (self.now.load(SeqCst) != self.made_for).then_some(())
    }

    fn hand_on(&mut self) {}
}

/// One change of the shape (`fds::publish_shape`, then `fds::wake_shape` once `registry`
/// is released) against a task that registered for the old one; with `second`, two
/// changes in a row, and a task that has already made its first poll when they start.
fn model(second: bool) {
    loom::model(move || {
        let wq = Arc::new(WaitQueue::new());
        let shape = Arc::new(AtomicU64::new(0));
        let flag = Arc::new(Flag(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&flag));
        let mut cx = Context::from_waker(&waker);
        let mut task = TaskWait::new(KEY_KSLEEP, true).without_yield();
        let mut what = OnShape {
            now: Arc::clone(&shape),
            made_for: 0,
        };
        let mut seen = 0;
        let mut done = false;
        if second {
            done = task.poll(&wq, &mut cx, &mut what).is_ready();
        }
        let changer = {
            let (wq, shape) = (Arc::clone(&wq), Arc::clone(&shape));
            thread::spawn(move || {
                for _ in 0..if second { 2 } else { 1 } {
                    shape.fetch_add(1, SeqCst);
                    wq.wake(KEY_KSLEEP, usize::MAX);
                }
            })
        };
        if !done {
            seen = flag.0.load(SeqCst);
            done = matches!(task.poll(&wq, &mut cx, &mut what), Poll::Ready(()));
        }
        changer.join().unwrap();
        // The executor: poll again while the task was woken since its last poll.
        while !done && flag.0.load(SeqCst) > seen {
            seen = flag.0.load(SeqCst);
            done = task.poll(&wq, &mut cx, &mut what).is_ready();
        }
        assert!(done, "a task on the old shape was left asleep");
    });
}

#[test]
fn loom_kernel_reactor_shape_wakes_a_registering_task() {
    model(false);
}

#[test]
fn loom_kernel_reactor_shape_wakes_a_queued_task() {
    model(true);
}

/// The bare task slot (`reactor`, "Bare": the real [`BareTask`]) against the epoll's first
/// in-memory `add` (`KernelSide::memory_added`: set the sticky flag, then take and wake the
/// slot's waker). A change of the shape follows the same steps with the generation for the
/// flag. The task keeps its waker in the slot and then reads the flag at each poll; one that
/// reads it clear waits, and must be woken. With `again`, the task's first poll comes
/// before the add starts (its waker is in the slot already).
fn bare_task_model(again: bool) {
    use crate::epoll::BareTask;
    use loom::sync::atomic::AtomicBool;
    loom::model(move || {
        let slot = Arc::new(BareTask::default());
        let memory = Arc::new(AtomicBool::new(false));
        let flag = Arc::new(Flag(AtomicUsize::new(0)));
        let waker = Waker::from(Arc::clone(&flag));
        let mut held = false;
        assert!(slot.take(&mut held));
        // `KernelWake::poll_bare`: keep the waker, then look (the general path, which the
        // other models cover, takes over once the flag is seen).
        let poll = |slot: &BareTask| {
            slot.set_waker(&waker);
            crate::loom::dekker_fence();
            memory.load(SeqCst)
        };
        let mut done = false;
        let mut seen = 0;
        if again {
            seen = flag.0.load(SeqCst);
            done = poll(&slot);
        }
        let adder = {
            let (slot, memory) = (Arc::clone(&slot), Arc::clone(&memory));
            thread::spawn(move || {
                memory.store(true, SeqCst);
                crate::loom::dekker_fence();
                slot.wake();
            })
        };
        if !done {
            seen = flag.0.load(SeqCst);
            done = poll(&slot);
        }
        adder.join().unwrap();
        while !done && flag.0.load(SeqCst) > seen {
            seen = flag.0.load(SeqCst);
            done = poll(&slot);
        }
        assert!(done, "a bare task missed the first in-memory add");
        slot.leave(&mut held);
    });
}

#[test]
fn loom_kernel_reactor_bare_task_first_poll_vs_memory_add() {
    bare_task_model(false);
}

#[test]
fn loom_kernel_reactor_bare_task_waiting_vs_memory_add() {
    bare_task_model(true);
}
