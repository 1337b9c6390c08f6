//! The one place sync primitives are imported from.
//!
//! Under `--cfg evfd_loom` the atomics, the mutex and thread parking come from `loom`, so
//! the models in `src/tests/` explore every interleaving of the real code. Everything else
//! uses `std`. `Arc`/`Weak` always come from `std`: their reference counting is not part of
//! any protocol we model.

#[cfg(not(evfd_loom))]
pub(crate) mod sync {
    pub(crate) use std::sync::atomic;
    pub(crate) use std::sync::{Mutex, MutexGuard};
}

#[cfg(evfd_loom)]
pub(crate) mod sync {
    pub(crate) use loom::sync::{Mutex, MutexGuard};

    pub(crate) mod atomic {
        pub(crate) use loom::sync::atomic::{AtomicBool, Ordering};

        macro_rules! seq_cst_initialised {
            ($($name:ident: $int:ty),*) => {$(
                /// loom's atomic, whose initial value is re-published with a `SeqCst` store.
                ///
                /// loom records an atomic's initial value as a `Release` store and models
                /// `SeqCst` accesses as `AcqRel` (loom README, "Unsupported features";
                /// tokio-rs/loom#180): a `SeqCst` load may still return the initial value
                /// after another thread's later `SeqCst` RMW. That breaks the Dekker pair
                /// (count ⇄ wait-queue interest) in the model only — real `SeqCst` forbids
                /// it — and shows up as a false lost wakeup. One `SeqCst` store of the same
                /// value at construction makes the model's stores all `SeqCst`, so its
                /// "no older `SeqCst` store after a newer one" rule applies from the start.
                #[derive(Debug)]
                pub(crate) struct $name(loom::sync::atomic::$name);

                impl $name {
                    pub(crate) fn new(v: $int) -> Self {
                        let a = loom::sync::atomic::$name::new(v);
                        a.store(v, Ordering::SeqCst);
                        $name(a)
                    }
                }

                impl std::ops::Deref for $name {
                    type Target = loom::sync::atomic::$name;
                    fn deref(&self) -> &Self::Target {
                        &self.0
                    }
                }
            )*};
        }

        seq_cst_initialised!(AtomicU32: u32, AtomicU64: u64);
    }
}

#[cfg(not(evfd_loom))]
pub(crate) mod thread {
    pub(crate) use std::thread::{current, park, park_timeout, Thread};
}

#[cfg(evfd_loom)]
pub(crate) mod thread {
    pub(crate) use loom::thread::{current, park, yield_now, Thread};

    /// loom has no clock: a timed park is modelled as a park that may return at once
    /// (a timeout or a spurious wake), which is exactly the race a timed waiter must survive.
    pub(crate) fn park_timeout(_: std::time::Duration) {
        yield_now();
    }
}

/// Lock a mutex, ignoring poisoning: no code of ours panics while holding one of our locks
/// (foreign code never runs under them), so a poisoned lock still guards consistent data.
pub(crate) fn lock<T>(m: &sync::Mutex<T>) -> sync::MutexGuard<'_, T> {
    #[cfg(not(evfd_loom))]
    {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }
    #[cfg(evfd_loom)]
    {
        m.lock().unwrap()
    }
}
