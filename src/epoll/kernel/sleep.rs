//! The direct kernel sleep of a thread blocked in [`Epoll::wait`](crate::Epoll::wait) on an
//! epoll with kernel fds: it sleeps in `poll(2)` on the epoll's kernel epoll (`kfd`) and
//! its own **bell**, an eventfd of the thread's, so that a kernel event wakes it with no
//! watcher hop (`super::watcher` stays for tasks, fd views and outer epolls). Route 2 of
//! `super`; the facade's `sleeper` makes one.
//!
//! # Protocol
//!
//! - The sleeper registers on `waiters` (exclusive, at the head: LIFO) with the mask
//!   [`KEY_KSLEEP`](super::KEY_KSLEEP), not `IN`: the wakes of `waiters` (the item
//!   callback's one waiter, the LT cascade, the hand-on) carry `IN | KEY_KSLEEP` and reach
//!   it like any waiter, but it does not count as a waiter that needs the watcher
//!   (`super`'s `listened` looks for `IN`), so its waits arm nothing. (A task woken by a
//!   tokio reactor registers with the same mask, for the same reason: `super::reactor`.)
//! - An in-memory wake sets the waiter's `notified` under the queue lock, then, after the
//!   unlock, rings its bell (`ThreadWaiter::unpark` → [`Bell::ring`]). The sleeper loads
//!   `notified` and then sleeps in `poll(2)` on `[kfd, bell]`: the ring lands before the
//!   `poll` (the bell is readable: it returns at once) or during it (it wakes it). Only this
//!   thread reads its bell, after its `poll` returned; a ring that lands later is at worst
//!   one spurious return of a later sleep, which the wait loop absorbs (it harvests,
//!   finds nothing, sleeps again). Nobody else drains it, so the old hang (one harvester's
//!   collect reading a doorbell that another's wake had rung) cannot happen.
//! - Kernel readiness: `kfd` is readable while it holds an event; a `poll` on it returns
//!   then, whenever the fd became ready (before the sleep or during it). The sleeper needs
//!   neither the kernel item nor the watcher: invariant W (`super`) is about the
//!   waiters that do.
//! - The choice is made at each registration: kernel fds registered and a bell available →
//!   kernel sleep; otherwise the park path with its watcher arm (so a kernel fd added
//!   while a thread is parked still reaches it through W).
//!
//! A bell belongs to a thread of one process: after `fork` the child's thread makes a new
//! one (checked by the fork epoch at each registration, no syscall), so no two processes share a bell
//! (`tests/fork_kernel_sleep.rs`).
//!
//! Every thread in a kernel sleep on one `kfd` is woken by its readiness (`poll` wakes all
//! its waiters), unlike the kernel's exclusive `epoll_wait`; those that find nothing sleep
//! again. The loom model `src/tests/loom_kernel_sleep.rs` checks the protocol.

use std::cell::RefCell;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use rustix::event::{PollFd, PollFlags, Timespec};

use super::Side;
use crate::wait_queue::thread::{Bell, Parked, ThreadWaiter};

/// A thread's bell: a non-blocking eventfd that only its thread reads.
#[derive(Debug)]
pub(crate) struct ThreadBell {
    fd: OwnedFd,
    /// The fork epoch it was made in (`sys::fork`): a `fork` child's copy of the
    /// thread-local would share the parent thread's eventfd (and the parent could drain the
    /// child's rings), so the child makes its own.
    born: u32,
}

impl Bell for ThreadBell {
    fn ring(&self) {
        // Fails only at the counter's maximum, when it is readable anyway.
        let _ = crate::sys::eventfd::write(self.fd.as_fd(), 1);
    }
}

thread_local! {
    static BELL: RefCell<Option<Arc<ThreadBell>>> = const { RefCell::new(None) };
}

/// The calling thread's bell, made on first use; `None` if no eventfd can be made (the
/// caller then parks, woken through the watcher).
fn thread_bell() -> Option<Arc<ThreadBell>> {
    BELL.try_with(|b| {
        let mut b = b.borrow_mut();
        if b.as_ref()
            .map_or(true, |b| crate::sys::fork::forked(b.born))
        {
            let born = crate::sys::fork::epoch();
            *b = crate::sys::eventfd::create(0, false, true)
                .ok()
                .map(|fd| Arc::new(ThreadBell { fd, born }));
        }
        b.clone()
    })
    .ok()
    .flatten()
}

/// What a thread needs for a kernel sleep on one epoll: its kernel side and the bell.
pub(crate) struct KernelSleep {
    side: Arc<Side>,
    bell: Arc<ThreadBell>,
}

impl KernelSleep {
    /// A kernel sleep on `side` for the calling thread; `None` without a bell.
    pub(super) fn new(side: Arc<Side>) -> Option<KernelSleep> {
        Some(KernelSleep {
            side,
            bell: thread_bell()?,
        })
    }

    /// The waiter to queue: the calling thread, woken by its bell.
    pub(crate) fn waiter(&self) -> ThreadWaiter {
        ThreadWaiter::with_bell(Arc::clone(&self.bell) as Arc<dyn Bell>)
    }

    /// Sleep until `waiter` (queued with [`Self::waiter`]) is notified, `kfd` is readable,
    /// or `deadline`; first spin for up to `spin` (clamped to the deadline) on the
    /// in-memory wake. `Woken` also when `kfd` is readable or on a stale ring: the caller
    /// harvests and decides.
    pub(crate) fn park(
        &self,
        waiter: &ThreadWaiter,
        deadline: Option<Instant>,
        spin: Duration,
    ) -> Parked {
        if !spin.is_zero() {
            let now = Instant::now();
            let spin = deadline.map_or(spin, |d| spin.min(d.saturating_duration_since(now)));
            // Spin on the in-memory wake until the spin's end, then sleep in the kernel.
            let end = now.checked_add(spin);
            while match end {
                Some(e) => Instant::now() < e,
                None => true,
            } {
                if waiter.is_notified() {
                    return Parked::Woken;
                }
                for _ in 0..32 {
                    std::hint::spin_loop();
                }
            }
        }
        let kfd = self.side.poll.kfd.as_fd();
        let bell = self.bell.fd.as_fd();
        loop {
            if waiter.is_notified() {
                return Parked::Woken;
            }
            let timeout = match deadline {
                None => None,
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Parked::TimedOut;
                    }
                    // Too large for a timespec: forever.
                    Timespec::try_from(left).ok()
                }
            };
            let mut fds = [
                PollFd::from_borrowed_fd(kfd, PollFlags::IN),
                PollFd::from_borrowed_fd(bell, PollFlags::IN),
            ];
            match rustix::event::poll(&mut fds, timeout.as_ref()) {
                Ok(0) | Err(rustix::io::Errno::INTR) => continue,
                Ok(_) => {
                    if !fds[1].revents().is_empty() {
                        // Ours alone to drain (module docs).
                        let _ = crate::sys::eventfd::read(bell);
                    }
                    return Parked::Woken;
                }
                // Not expected on our own fds; the caller harvests and sleeps again.
                Err(_) => return Parked::Woken,
            }
        }
    }
}
