//! A parked thread as a wake target.

use std::time::{Duration, Instant};

use crate::loom::sync::atomic::{
    AtomicBool,
    Ordering::{Acquire, Release},
};
use crate::loom::thread::{self, Thread};

/// A thread waiting in a blocking call. The waker sets `notified` (with the queue's lock
/// held) and unparks after unlocking; the sleeper loops on `park` until it sees the flag or
/// its deadline passes, so spurious unparks are harmless.
#[derive(Debug)]
pub(crate) struct ThreadWaiter {
    /// Set once, by the wake that removed this waiter's entry. Release pairs with the
    /// Acquire load in `wait`.
    notified: AtomicBool,
    thread: Thread,
}

impl ThreadWaiter {
    /// A waiter for the calling thread.
    pub(crate) fn current() -> Self {
        ThreadWaiter {
            notified: AtomicBool::new(false),
            thread: thread::current(),
        }
    }

    pub(crate) fn set_notified(&self) {
        self.notified.store(true, Release);
    }

    pub(crate) fn is_notified(&self) -> bool {
        self.notified.load(Acquire)
    }

    /// Unpark the thread. Foreign to any lock: called from `WakeBatch::run`.
    pub(crate) fn unpark(&self) {
        self.thread.unpark();
    }

    /// Sleep until notified or `deadline`; first spin for up to `spin` (a cross-CPU wake that
    /// parks costs ~25 µs on small VMs; `Duration::ZERO` = no spin). Returns whether it was
    /// notified.
    pub(crate) fn wait(&self, deadline: Option<Instant>, spin: Duration) -> bool {
        #[cfg(not(evfd_loom))]
        if !spin.is_zero() {
            let start = Instant::now();
            let mut i = 0u32;
            loop {
                if self.is_notified() {
                    return true;
                }
                std::hint::spin_loop();
                i = i.wrapping_add(1);
                if i % 64 == 0 && start.elapsed() >= spin {
                    break;
                }
            }
        }
        #[cfg(evfd_loom)]
        let _ = spin;
        loop {
            if self.is_notified() {
                return true;
            }
            match deadline {
                None => thread::park(),
                Some(d) => {
                    #[cfg(evfd_loom)]
                    {
                        let _ = d;
                        thread::park_timeout(std::time::Duration::ZERO);
                        return self.is_notified();
                    }
                    #[cfg(not(evfd_loom))]
                    {
                        let now = Instant::now();
                        if now >= d {
                            return self.is_notified();
                        }
                        thread::park_timeout(d - now);
                    }
                }
            }
        }
    }
}
