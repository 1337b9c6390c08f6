//! [`SharedNotifier`]: eventfd semantics across processes, at memory speed.
//!
//! The state (the count and the wake bookkeeping) lives in a one-page memfd that both
//! processes map; the protocol over it is in `protocol` (with its proofs and loom models).
//! This module is the public face: creation, passing over a Unix socket, validation of what
//! arrives, and the operations.

pub(crate) mod protocol;

#[cfg(not(evfd_loom))]
mod asyncio;
#[cfg(not(evfd_loom))]
mod handle;
#[cfg(not(evfd_loom))]
pub use handle::{SharedFdView, SharedNotifier, SharedNotifierBuilder, SharedStats};
