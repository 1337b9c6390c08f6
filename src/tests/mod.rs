//! In-crate concurrency models, run under `--cfg evfd_loom`:
//!
//! ```text
//! RUSTFLAGS="--cfg evfd_loom -C debug-assertions" LOOM_MAX_PREEMPTIONS=2 \
//!     cargo test --release --lib tests::loom
//! ```
//!
//! They live inside the crate so they can reach the wait queue and the notifier's internals.
//! One scenario per `#[test]`, two or three threads each.

mod loom_async;
mod loom_epoll;
mod loom_fd;
mod loom_fork;
mod loom_kernel_direct;
mod loom_kernel_item;
mod loom_kernel_reactor;
mod loom_kernel_sleep;
mod loom_lend;
mod loom_notifier;
mod loom_signal;
