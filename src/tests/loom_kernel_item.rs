//! loom models of invariant W (`crate::epoll::kernel`): kernel readiness reaches a
//! waiter through the kernel item or the watcher, whatever the interleaving of the waiter
//! (harvest, register, arm check, park), a kernel event and the watcher (fire: clear
//! `armed`, queue the item, wake).
//!
//! The kernel epoll and the watcher's one-shot registration are modelled by one mutex (the
//! real ones are syscalls serialised by the kernel's `ep->lock`): `kready` is "kfd holds
//! an undelivered event", `oneshot` is the registration armed in the watcher's epoll.
//! `epoll_ctl(MOD)` polls the fd: arming a readable kfd fires at once; a kernel event on
//! an armed kfd fires (and disarms it). The rest — `linked`, `armed`, the `ready` mutex,
//! the waiter's registration — mirrors `KernelSide::watch`, `KernelSide::dropped`,
//! `watcher::fire` step for step. A lost wake is a waiter parked forever: loom reports it
//! as a deadlock.

use std::sync::Arc;

use loom::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use loom::sync::{Mutex, Notify};
use loom::thread;

struct Model {
    /// `EpInner::ready` (guards the list; `linked` is read under it by waiters).
    ready: Mutex<()>,
    /// The kernel item's `linked`.
    linked: AtomicBool,
    /// `KernelPoll::armed`.
    armed: AtomicBool,
    /// The mock kernel: (kfd holds an undelivered event, the watcher's one-shot
    /// registration of kfd is armed).
    kernel: Mutex<(bool, bool)>,
    /// Fires signalled to the watcher thread so far (its `epoll_wait` returned).
    fired: AtomicUsize,
    /// The waiter's entry in `waiters` (its interest).
    registered: AtomicBool,
    /// The waiter got the event.
    got: AtomicBool,
    /// Wakes of the waiter (`ThreadWaiter::notified`, per registration: it parks until
    /// this moves past what it saw when it registered).
    woken: AtomicUsize,
    /// The waiter's park/unpark.
    waiter: Notify,
    /// The watcher thread's `epoll_wait`: woken by a fire or the end.
    watcher: Notify,
    done: AtomicBool,
}

impl Model {
    fn new(linked: bool) -> Model {
        Model {
            ready: Mutex::new(()),
            linked: AtomicBool::new(linked),
            armed: AtomicBool::new(false),
            kernel: Mutex::new((false, false)),
            fired: AtomicUsize::new(0),
            registered: AtomicBool::new(false),
            got: AtomicBool::new(false),
            woken: AtomicUsize::new(0),
            waiter: Notify::new(),
            watcher: Notify::new(),
            done: AtomicBool::new(false),
        }
    }

    /// The watcher's `epoll_wait` returns: a fire to handle.
    fn signal_watcher(&self) {
        self.fired.fetch_add(1, SeqCst);
        self.watcher.notify();
    }

    /// `watcher::try_arm`: `epoll_ctl(MOD, IN|ONESHOT)`, which polls kfd.
    fn epoll_ctl_arm(&self) {
        let fire = {
            let mut k = self.kernel.lock().unwrap();
            k.1 = !k.0;
            k.0
        };
        if fire {
            self.signal_watcher();
        }
    }

    /// A non-blocking `epoll_wait` on kfd: take the event if there is one.
    fn collect(&self) -> bool {
        std::mem::replace(&mut self.kernel.lock().unwrap().0, false)
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
            return self.collect();
        }
        if self.collect() {
            return true; // requeued (LT); stays linked
        }
        // Dropped: `linked = false` during the scan, then `KernelSide::dropped` under `ready`.
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
            self.woken.fetch_add(1, SeqCst);
            self.waiter.notify();
        }
    }

    /// A kernel event: kfd becomes readable; an armed one-shot registration fires.
    fn kernel_event(&self) {
        let fire = {
            let mut k = self.kernel.lock().unwrap();
            k.0 = true;
            std::mem::replace(&mut k.1, false)
        };
        if fire {
            self.signal_watcher();
        }
    }

    /// The blocking waiter: harvest, register, ensure the watch, harvest again, park.
    /// `registering`: it starts at its registration (a waiter going back to sleep).
    fn wait(&self, mut registering: bool) {
        loop {
            if !std::mem::take(&mut registering) && self.harvest() {
                break;
            }
            let seen = self.woken.load(SeqCst);
            self.registered.store(true, SeqCst);
            self.ensure_watch();
            if self.harvest() {
                break;
            }
            while self.woken.load(SeqCst) == seen {
                self.waiter.wait();
            }
            self.registered.store(false, SeqCst);
        }
        self.registered.store(false, SeqCst);
        self.got.store(true, SeqCst);
    }

    /// The watcher thread: handle fires until the waiter is done (parked in between, as
    /// in `epoll_wait`; a fire or the end unparks it).
    fn watcher(&self) {
        let mut handled = 0;
        loop {
            let signalled = self.fired.load(SeqCst);
            if signalled > handled {
                handled = signalled;
                self.fire();
                continue;
            }
            if self.done.load(SeqCst) {
                return;
            }
            self.watcher.wait();
        }
    }
}

/// `linked`: the kernel item starts on the ready list; `other`: another thread harvests
/// once (a zero-timeout `wait`) before the kernel event, and the waiter starts at its
/// registration.
fn run(linked: bool, other: bool) {
    loom::model(move || {
        let m = Arc::new(Model::new(linked));
        let watcher = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.watcher())
        };
        let w = {
            let m = Arc::clone(&m);
            thread::spawn(move || m.wait(other))
        };
        if other {
            m.harvest();
        }
        m.kernel_event();
        w.join().unwrap();
        m.done.store(true, SeqCst);
        m.watcher.notify();
        watcher.join().unwrap();
        assert!(m.got.load(SeqCst));
    });
}

/// The kernel item starts off the list (nothing armed): the waiter's own arm, or the
/// kernel event on the armed registration, must reach it.
#[test]
fn kernel_item_waiter_arms() {
    run(false, false);
}

/// The kernel item starts on the list (a previous fire or requeue): the harvest that drops
/// it must arm for the registered waiter, or the waiter must see it unlinked and arm.
#[test]
fn kernel_item_harvest_drops_and_arms() {
    run(true, false);
}

/// The waiter registers while the kernel item is linked (so it does not arm) and another
/// thread's harvest drops the item: that harvest must arm for the registered waiter.
#[test]
fn kernel_item_other_harvester_arms() {
    run(true, true);
}
