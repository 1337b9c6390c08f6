//! In-crate tests that need internals: loom models (`--cfg evfd_loom`).

mod loom_async;
