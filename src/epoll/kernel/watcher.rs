//! The process-wide watcher: notices that an `Epoll`'s kernel epoll became readable and
//! queues that epoll's kernel item, so that every face of the epoll (blocking waiters,
//! tasks, fd views, outer epolls) hears of kernel readiness through the in-memory wake
//! path (route 1 of `super`). See `super` for the protocol (invariant W) and
//! `docs/design.md`. Two kinds of waiter never use it: a thread blocked in `Epoll::wait` (it
//! sleeps on the kernel epoll itself: `super::sleep`) and, with feature `tokio`, a task
//! polled inside a tokio runtime (the runtime's reactor watches the kernel epoll:
//! `super::reactor`).
//!
//! One thread and one kernel epoll (`wfd`) for the whole process, both created by the first
//! [`arm`]. Each `Epoll`'s kernel epoll is registered in `wfd` with its kernel-side id as
//! data: with `IN | ONESHOT` while only waiters (threads, tasks) may wait on it, armed by
//! each wait that would block; with `IN | ET`, for good, once a poller (an outer epoll's
//! item, an fd view) watches it, so that every wake of the kernel epoll reaches the pollers
//! (as every wake of a nested kernel epoll reaches the outer one). An arm is one
//! `epoll_ctl(MOD)` (an `ADD` the first time), which also polls it, so readiness that
//! predates the arm fires at once. A one-shot fire clears the side's `armed` flag and then
//! queues its kernel item — in that order, so that a waiter never sees "not armed, not
//! queued" while a fire is being handled without arming again itself.
//!
//! The thread exits after [`LINGER`] with nothing armed and is started again by the next
//! arm, so a process with kernel sources but no waiter has no thread. (A one-shot arm whose
//! waiter went away before its kernel fd fired — it was satisfied by its own harvest, or
//! dropped — stays armed until that fd fires; meanwhile the thread sleeps in `epoll_wait`
//! and looks once per `LINGER`.)
//!
//! # LOCKING
//!
//! ```text
//! Watcher::sides    Mutex  id → kernel item (Weak). Leaf: taken to register, to forget and
//!                          by the thread to look up what fired; never held across a wake.
//! Watcher::running  Mutex  whether the thread runs. Leaf. Taken by an arm after its
//!                          epoll_ctl and by the thread before it exits, so that one of them
//!                          sees the other (an arm never lands on an exiting thread).
//! ```
//! The wake of a kernel item (`Item::wake`, which takes that epoll's `ready` and `pollers`)
//! runs with neither held, from the thread only.

use std::collections::HashMap;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::{Arc, Mutex, OnceLock, Weak};
use std::time::{Duration, Instant};

use super::KernelPoll;
use crate::epoll::item::Item;
use crate::events::Events;
// The watcher is not part of the loom models (it is a real thread over real syscalls).
use crate::wait_queue::{Callback, WakeBatch};
use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};

/// How long the thread stays with nothing armed before it exits.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

struct Watcher {
    /// The fork epoch it serves (`sys::fork`): a child process needs its own watcher (see
    /// [`watcher`]).
    born: u32,
    wfd: OwnedFd,
    sides: Mutex<HashMap<u64, Weak<Item>>>,
    running: Mutex<bool>,
    /// Kernel sides armed and not yet fired (or forgotten).
    armed: AtomicUsize,
    /// Threads started so far (for the idle-cost figures).
    started: AtomicUsize,
}

static WATCHER: OnceLock<Watcher> = OnceLock::new();

/// The watcher of a child process (after a `fork`), if it made one: see [`watcher`].
static CHILD: Mutex<Option<&'static Watcher>> = Mutex::new(None);

fn new_watcher() -> io::Result<Watcher> {
    Ok(Watcher {
        born: crate::sys::fork::epoch(),
        wfd: crate::sys::epoll::create()?,
        sides: Mutex::new(HashMap::new()),
        running: Mutex::new(false),
        armed: AtomicUsize::new(0),
        started: AtomicUsize::new(0),
    })
}

/// This process's watcher, made by the first call.
///
/// After a `fork`, the watcher inherited from the parent is not this process's: its thread
/// does not exist in the child (while `running` may still say it does) and its `wfd` is
/// shared with the parent, whose thread would take the child's fires. So a child makes its
/// own, once per fork generation that uses kernel sources (leaked, as the first one is
/// static); the parent's copy is left untouched.
///
/// Inside a fork guard (`sys::fork::guard`): a fork never cuts the first creation (a child
/// would find `WATCHER` initialising for ever) or a section holding `CHILD`.
fn watcher() -> io::Result<&'static Watcher> {
    let _fork = crate::sys::fork::guard();
    let w = match WATCHER.get() {
        Some(w) => w,
        None => {
            let n = new_watcher()?;
            WATCHER.get_or_init(|| n)
        }
    };
    if !crate::sys::fork::forked(w.born) {
        return Ok(w);
    }
    let mut slot = lock(&CHILD);
    if let Some(c) = *slot {
        if !crate::sys::fork::forked(c.born) {
            return Ok(c);
        }
    }
    let c: &'static Watcher = Box::leak(Box::new(new_watcher()?));
    *slot = Some(c);
    Ok(c)
}

/// This process's watcher if it exists (see [`watcher`]).
fn current() -> Option<&'static Watcher> {
    let _fork = crate::sys::fork::guard();
    let w = WATCHER.get()?;
    if !crate::sys::fork::forked(w.born) {
        return Some(w);
    }
    let c = (*lock(&CHILD))?;
    (!crate::sys::fork::forked(c.born)).then_some(c)
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Arm the kernel epoll `poll` (whose kernel item is `item`): the caller won its `armed`
/// flag (one-shot) or its `et` flag (edge-triggered, for good).
///
/// The arms of one kernel epoll are serialised (`KernelPoll::arming`), so a one-shot arm
/// and an edge-triggered one racing for the first registration (both `MOD`, both
/// `ENOENT`, both `ADD`) cannot leave it one-shot: under the lock a one-shot arm of a side
/// already watched edge-triggered does nothing (the edge-triggered registration reports
/// every wake), and an edge-triggered arm always writes `IN | ET`.
///
/// On failure (the watcher's epoll or thread cannot be made: `EMFILE`, a failed spawn; no
/// memory for the registration) the flag the caller set is cleared again, so that the next
/// arm retries, and the item is queued at once, so that a waiter or poller is woken to
/// harvest rather than left asleep; that harvest, finding nothing, arms again
/// (`KernelSide::dropped`). While the failure lasts, waiters are thus woken by their own
/// harvests instead of by the watcher, and nothing is lost.
pub(crate) fn arm(poll: &KernelPoll, item: &Arc<Item>, et: bool) {
    let failed = {
        let _arming = lock(&poll.arming);
        if !et && poll.is_et() {
            // Covered by the edge-triggered registration (module docs); the one-shot arm
            // is not counted, so its flag goes.
            poll.disarm();
            return;
        }
        let r = try_arm(poll.id, &poll.kfd, item, et);
        if r.is_err() {
            if et {
                poll.et.store(false, SeqCst);
            } else {
                poll.disarm();
            }
        }
        r.is_err()
    };
    if failed {
        queue(item);
    }
}

fn try_arm(id: u64, kfd: &OwnedFd, item: &Arc<Item>, et: bool) -> io::Result<()> {
    let w = watcher()?;
    let ev = Events::IN | if et { Events::ET } else { Events::ONESHOT };
    let r = match crate::sys::epoll::modify(w.wfd.as_fd(), kfd.as_fd(), ev, id) {
        Err(e) if e.raw_os_error() == Some(libc_enoent()) => {
            lock(&w.sides).insert(id, Arc::downgrade(item));
            match crate::sys::epoll::add(w.wfd.as_fd(), kfd.as_fd(), ev, id) {
                // Registered meanwhile (arms are serialised per side, so not by one of
                // ours; kept for robustness): set our mask on it.
                Err(e) if e.raw_os_error() == Some(rustix::io::Errno::EXIST.raw_os_error()) => {
                    crate::sys::epoll::modify(w.wfd.as_fd(), kfd.as_fd(), ev, id)
                }
                r => r,
            }
        }
        r => r,
    };
    r?;
    // Counted before `running` is looked at: a thread about to exit sees it, or we see that
    // it exited and start another.
    w.armed.fetch_add(1, SeqCst);
    let mut running = lock(&w.running);
    if !*running {
        let spawned = std::thread::Builder::new()
            .name("evfd-watcher".into())
            .spawn(move || run(w));
        if let Err(e) = spawned {
            // Not counted after all: the caller clears its flag (`arm`).
            w.armed.fetch_sub(1, SeqCst);
            return Err(e);
        }
        w.started.fetch_add(1, SeqCst);
        *running = true;
    }
    Ok(())
}

fn libc_enoent() -> i32 {
    rustix::io::Errno::NOENT.raw_os_error()
}

/// The side `id` goes away (its epoll closed). Its kernel epoll is closed with it, which
/// removes it from `wfd`; `counted`: how many arms of it are still counted (an unfired
/// one-shot arm, an edge-triggered registration).
pub(crate) fn forget(id: u64, counted: usize) {
    if let Some(w) = current() {
        lock(&w.sides).remove(&id);
        w.armed.fetch_sub(counted, SeqCst);
    }
}

/// A fire: clear the side's `armed` flag, then queue its kernel item.
///
/// An edge-triggered registration stays (and stays counted), and fires at every wake of
/// `kfd`, including one that leaves nothing ready: the edge an `EPOLL_CTL_ADD` queues for
/// an eventfd whose count memory keeps (readable at its base count, `sys::mem_count`), or
/// an event another harvest took first. Such a fire queues nothing, as the kernel's poll
/// of a nested epoll's item reports nothing then, so that no poller (an fd view, an outer
/// epoll) is shown this epoll ready with nothing to harvest. A fire that finds nothing is
/// not a lost one: every later event wakes `kfd` after it is ready (a write's `write(2)`
/// follows its units into memory), which fires again, and the look then sees it.
fn fire(w: &Watcher, item: &Arc<Item>) {
    if let crate::epoll::source::SourceCore::Kernel(kp) = &item.src {
        if kp.is_et() {
            if kp.readiness().is_empty() {
                return;
            }
        } else if kp.disarm() {
            w.armed.fetch_sub(1, SeqCst);
        }
    }
    queue(item);
}

/// Queue a kernel item (the wake callback: ready list, one waiter, every poller), with no
/// lock held.
pub(super) fn queue(item: &Arc<Item>) {
    let mut batch = WakeBatch::new();
    item.wake(Events::IN, &mut batch);
    batch.run();
}

fn run(w: &'static Watcher) {
    let mut got = Vec::new();
    let mut last = Instant::now();
    loop {
        let deadline = Some(Instant::now() + LINGER);
        if crate::sys::epoll::wait(w.wfd.as_fd(), &mut got, 64, deadline).is_err() {
            std::thread::sleep(Duration::from_millis(1));
        }
        if got.is_empty() {
            if last.elapsed() >= LINGER {
                let mut running = lock(&w.running);
                if w.armed.load(SeqCst) == 0 {
                    *running = false;
                    return;
                }
            }
            continue;
        }
        last = Instant::now();
        let items: Vec<Arc<Item>> = {
            let sides = lock(&w.sides);
            got.iter()
                .filter_map(|&(_, id)| sides.get(&id).and_then(Weak::upgrade))
                .collect()
        };
        // A side that is gone was uncounted by `forget`.
        for item in &items {
            fire(w, item);
        }
    }
}

/// Watcher threads started so far and whether one runs now (for the idle-cost figures).
#[doc(hidden)]
pub fn watcher_stats() -> (usize, bool) {
    match current() {
        None => (0, false),
        Some(w) => (w.started.load(SeqCst), *lock(&w.running)),
    }
}
