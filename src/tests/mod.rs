//! In-crate loom models (`--cfg evfd_loom`).
