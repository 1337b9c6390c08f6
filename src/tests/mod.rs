//! In-crate concurrency models, run under `--cfg evfd_loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg evfd_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=3 \
//!     cargo test --release --lib tests::loom
//! ```
//!
//! (`.ci/run` runs every model at a preemption bound of 4, 5–8 min on 2 cores, except the
//! three heaviest, named there (`HEAVY`: minutes each at 4), which it runs at 3; and the
//! small lend and fork models again at 5; the two `loom_async_two_futures_*` models cap
//! their own bound at 3.)
//!
//! loom 0.7 does not explore a thread's RMW before another thread's earlier load of the
//! same atomic when the first thread loaded it just before (its race search keeps one last
//! access per atomic): the count's seeding loads are RMWs under loom for that reason
//! (`crate::loom::SeedLoad`).
//!
//! They live inside the crate so they can reach the wait queue and the notifier's internals.
//! One scenario per `#[test]`, two or three threads each.

mod loom_async;
mod loom_bell;
mod loom_epoll;
mod loom_fd;
mod loom_fork;
mod loom_kernel_direct;
mod loom_kernel_item;
mod loom_kernel_reactor;
mod loom_kernel_sleep;
mod loom_lend;
mod loom_mem_count;
mod loom_notifier;
#[cfg(evfd_kernel_side)]
mod loom_park;
mod loom_signal;
mod loom_slot;

/// Runs `f` under loom, with the preemption bound from `LOOM_MAX_PREEMPTIONS`, else
/// `bound` (so that a plain `cargo test` under the loom cfg stays bounded too), and reports
/// how many interleavings were explored (visible with `--nocapture`).
fn model(name: &str, bound: usize, f: impl Fn() + Sync + Send + 'static) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    use std::sync::Arc;

    let mut b = loom::model::Builder::new();
    if b.preemption_bound.is_none() {
        b.preemption_bound = Some(bound);
    }
    let runs = Arc::new(AtomicUsize::new(0));
    let counted = Arc::clone(&runs);
    b.check(move || {
        counted.fetch_add(1, Relaxed);
        f();
    });
    eprintln!("loom {name}: {} interleavings", runs.load(Relaxed));
}
