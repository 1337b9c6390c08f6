//! loom models of invariant W (`crate::epoll::kernel_fds`): kernel readiness reaches a
//! waiter through the kernel item or the watcher, whatever the interleaving of the waiter
//! (harvest, register, arm check, park), a kernel event and the watcher (fire: clear
//! `armed`, queue the item, wake).
//!
//! The kernel epoll and the watcher's one-shot registration are modelled by atomics (the
//! real ones are syscalls): `kready` is "kfd holds an undelivered event", `oneshot` is the
//! registration armed in the watcher's epoll. `epoll_ctl(MOD)` polls the fd: arming a
//! readable kfd fires at once; a kernel event on an armed kfd fires (and disarms it). The
//! rest — `linked`, `armed`, the `ready` mutex, the waiter's registration — mirrors
//! `EpInner::ensure_watch`, `kernel_dropped`, `watcher::fire` step for step. A lost wake
//! is a waiter parked forever: loom reports it as a deadlock.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use loom::sync::Mutex;
use loom::thread;

struct Model {
    /// `EpInner::ready` (guards the list; `linked` is read under it by waiters).
    ready: Mutex<()>,
    /// The kernel item's `linked`.
    linked: AtomicBool,
    /// `KernelPoll::armed`.
    armed: AtomicBool,
    /// The watcher's one-shot registration of kfd (kernel state).
    oneshot: AtomicBool,
    /// A fire the watcher thread has to handle (its `epoll_wait` returned).
    fired: AtomicBool,
    /// kfd holds an undelivered event.
    kready: AtomicBool,
    /// The waiter's entry in `waiters` (its interest).
    registered: AtomicBool,
    /// The waiter got the event.
    got: AtomicBool,
    waiter: Mutex<Option<thread::Thread>>,
    done: AtomicBool,
}

impl Model {
    fn new(linked: bool) -> Model {
        Model {
            ready: Mutex::new(()),
            linked: AtomicBool::new(linked),
            armed: AtomicBool::new(false),
            oneshot: AtomicBool::new(false),
            fired: AtomicBool::new(false),
            kready: AtomicBool::new(false),
            registered: AtomicBool::new(false),
            got: AtomicBool::new(false),
            waiter: Mutex::new(None),
            done: AtomicBool::new(false),
        }
    }

    /// `watcher::try_arm`: `epoll_ctl(MOD, IN|ONESHOT)`, which polls kfd.
    fn epoll_ctl_arm(&self) {
        self.oneshot.store(true, SeqCst);
        if self.kready.load(SeqCst) && self.oneshot.swap(false, SeqCst) {
            self.fired.store(true, SeqCst);
        }
    }

    /// `KernelSide::watch` for a waiter (no poller): arm unless linked or armed.
    fn ensure_watch(&self) {
        let linked = {
            let _rd = self.ready.lock().unwrap();
            self.linked.load(SeqCst)
        };
        if !linked && !self.armed.swap(true, SeqCst) {
            self.epoll_ctl_arm();
        }
    }

    /// One harvest: if the kernel item is linked, collect (take the event or drop the
    /// item, and at the scan's end arm if a waiter is registered).
    fn harvest(&self) -> bool {
        if !self.linked.load(SeqCst) {
            // The real harvest also collects once at its end when the item was not met.
            return self.kready.swap(false, SeqCst);
        }
        if self.kready.swap(false, SeqCst) {
            return true; // requeued (LT); stays linked
        }
        // Dropped: `linked = false` during the scan, then `kernel_dropped` under `ready`.
        self.linked.store(false, SeqCst);
        let listened = {
            let _rd = self.ready.lock().unwrap();
            self.registered.load(SeqCst)
        };
        if listened {
            self.ensure_watch();
        }
        false
    }

    /// `watcher::fire`: clear `armed`, then queue the item (the wake callback) and wake the
    /// registered waiter after unlocking.
    fn fire(&self) {
        self.armed.swap(false, SeqCst);
        let wake = {
            let _rd = self.ready.lock().unwrap();
            self.linked.store(true, SeqCst);
            self.registered.load(SeqCst)
        };
        if wake {
            if let Some(t) = self.waiter.lock().unwrap().as_ref() {
                t.unpark();
            }
        }
    }

    /// A kernel event: kfd becomes readable; an armed one-shot registration fires.
    fn kernel_event(&self) {
        self.kready.store(true, SeqCst);
        if self.oneshot.swap(false, SeqCst) {
            self.fired.store(true, SeqCst);
        }
    }

    /// The blocking waiter: harvest, register, ensure the watch, harvest again, park.
    fn wait(&self) {
        *self.waiter.lock().unwrap() = Some(thread::current());
        loop {
            if self.harvest() {
                break;
            }
            self.registered.store(true, SeqCst);
            self.ensure_watch();
            if self.harvest() {
                break;
            }
            thread::park();
            self.registered.store(false, SeqCst);
        }
        self.registered.store(false, SeqCst);
        self.got.store(true, SeqCst);
    }

    /// The watcher thread: handle fires until the waiter is done.
    fn watcher(&self) {
        while !self.done.load(SeqCst) {
            if self.fired.swap(false, SeqCst) {
                self.fire();
            }
            thread::yield_now();
        }
    }
}

fn run(linked: bool) {
    loom::model(move || {
        let m = Arc::new(Model::new(linked));
        let w = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.wait())
        };
        let watcher = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.watcher())
        };
        m.kernel_event();
        w.join().unwrap();
        m.done.store(true, SeqCst);
        watcher.join().unwrap();
        assert!(m.got.load(SeqCst));
    });
}

/// The kernel item starts off the list (nothing armed): the waiter's own arm, or the
/// kernel event on the armed registration, must reach it.
#[test]
fn kernel_item_waiter_arms() {
    run(false);
}

/// The kernel item starts on the list (a previous fire or requeue): the harvest that drops
/// it must arm for the registered waiter, or the waiter must see it unlinked and arm.
#[test]
fn kernel_item_harvest_drops_and_arms() {
    run(true);
}
