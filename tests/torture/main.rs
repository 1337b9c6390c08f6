//! The permanent attack suite (issue 10): conservation across every mode × wait style,
//! cancellation storms, signals without `SA_RESTART`, fd exhaustion, RSS stability, a
//! mixed soak and hostile peers (`peer`). Every blocking call is under a watchdog; every
//! unit is counted.
//!
//! Short mode (the default, what CI runs as part of `cargo test --all-features`): bounded
//! to well under a minute on 2 cores. Long mode: `EVFD_TORTURE=long` (the soak's length in
//! seconds from `EVFD_TORTURE_SECS`, default 300), for example
//!
//! ```text
//! EVFD_TORTURE=long nice cargo test --release --all-features --test torture -- --nocapture
//! ```
//!
//! The scenarios take one lock, so they run one at a time whatever `--test-threads` says.

mod harness;
#[path = "../shared_util/mod.rs"]
mod shared_util;
#[path = "../signal_util/mod.rs"]
mod signal_util;

mod cancel;
mod conservation;
mod fdlimit;
mod peer;
mod signals;
mod soak;
