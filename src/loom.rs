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
    pub(crate) use loom::sync::atomic;
    pub(crate) use loom::sync::{Mutex, MutexGuard};
}

#[cfg(not(evfd_loom))]
pub(crate) mod thread {
    pub(crate) use std::thread::{current, park, park_timeout, yield_now, Thread};
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

/// Whether `deadline` has passed. loom has no clock (a timed park returns at once,
/// [`thread::park_timeout`]), so under loom every deadline has passed: a model's executions
/// then make the same choices however long each one takes. (A wall-clock look made
/// `tests::loom_notifier::semaphore_timed_reader_hands_wake_on` fail with loom's "Is the
/// model fully deterministic?" on a loaded machine: its 1 ms deadline passed in some
/// executions of a path and not in others.)
#[inline(always)]
pub(crate) fn past(deadline: std::time::Instant) -> bool {
    #[cfg(evfd_loom)]
    {
        let _ = deadline;
        true
    }
    #[cfg(not(evfd_loom))]
    {
        std::time::Instant::now() >= deadline
    }
}

/// loom's checked `UnsafeCell` under `--cfg evfd_loom` (it reports two accesses that are not
/// ordered), and otherwise `std`'s behind the same `with_mut` call.
#[cfg(not(evfd_loom))]
pub(crate) mod cell {
    /// `std::cell::UnsafeCell` with loom's access API.
    #[derive(Debug)]
    pub(crate) struct UnsafeCell<T>(std::cell::UnsafeCell<T>);

    impl<T> UnsafeCell<T> {
        pub(crate) const fn new(v: T) -> Self {
            UnsafeCell(std::cell::UnsafeCell::new(v))
        }

        /// Run `f` on a raw pointer to the value; the caller's protocol makes it exclusive.
        #[inline(always)]
        pub(crate) fn with_mut<R>(&self, f: impl FnOnce(*mut T) -> R) -> R {
            f(self.0.get())
        }
    }
}

#[cfg(evfd_loom)]
pub(crate) mod cell {
    pub(crate) use loom::cell::UnsafeCell;
}

/// Lock a mutex, ignoring poisoning: no code of ours panics while holding one of our locks
/// (foreign code never runs under them), so a poisoned lock still guards consistent data.
#[inline(always)]
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

/// A `SeqCst` load that loom must order against other threads' RMWs of the same atomic
/// (the seed of a compare-and-swap loop, a look that decides whether to swap, a model's
/// look at a word): a plain load, and under `--cfg evfd_loom` an RMW that adds 0, with
/// `Acquire` ordering.
///
/// loom 0.7 keeps one "last access" per atomic for its race search: a thread's load
/// replaces another thread's earlier load there, so when the first thread's RMW comes, the
/// race between it and the other thread's load is never seen and the order in which the
/// RMW goes first is never explored (tokio-rs/loom issues 166 and 392). A two-line model
/// (`spawn(|| { a.load(); a.fetch_add(1) }); a.load()`) ran one interleaving instead of
/// six; `tests::loom_notifier::models_see_a_write_on_either_side_of_a_look` keeps that
/// from coming back. An RMW in the load's place is checked against the other thread's load.
///
/// Only for `SeqCst` loads: all `SeqCst` operations form one total order and the load reads
/// the last write before it there, as an RMW at the same point would, so the substitute
/// reads nothing the real load could not and misses nothing it could. (loom would let a
/// `SeqCst` load read an older value, since it models `SeqCst` accesses as `AcqRel`.)
/// `Acquire` and no release: the look publishes nothing.
pub(crate) trait SeedLoad {
    /// The atomic's value type.
    type Value;
    /// The seeding load (see the trait).
    fn seed_load(&self) -> Self::Value;
}

macro_rules! seed_load {
    ($($atomic:ty => $value:ty),*) => {$(
        impl SeedLoad for $atomic {
            type Value = $value;
            #[inline(always)]
            fn seed_load(&self) -> $value {
                #[cfg(not(evfd_loom))]
                {
                    self.load(sync::atomic::Ordering::SeqCst)
                }
                #[cfg(evfd_loom)]
                {
                    self.fetch_add(0, sync::atomic::Ordering::Acquire)
                }
            }
        }
    )*};
}

seed_load!(sync::atomic::AtomicU64 => u64, sync::atomic::AtomicU32 => u32);

/// The store-load (Dekker) barrier between "change the state" and "look at the other side",
/// for loom only.
///
/// Every such pair in this crate uses `SeqCst` accesses on both sides (an RMW or store, then a
/// load), which the C11 model makes sufficient: all `SeqCst` operations form one total order.
/// On x86 that is a `lock`-prefixed RMW followed by a plain `mov`, with no extra fence. loom
/// models `SeqCst` *accesses* as `AcqRel` (its README, "Unsupported features"), which would
/// report the pattern as a lost wakeup; it does model `fence(SeqCst)`. So under
/// `--cfg evfd_loom` this is that fence, making the same argument explicit, and in normal
/// builds it is nothing.
#[inline(always)]
pub(crate) fn dekker_fence() {
    #[cfg(evfd_loom)]
    sync::atomic::fence(sync::atomic::Ordering::SeqCst);
}
