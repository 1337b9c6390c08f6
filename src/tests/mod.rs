//! In-crate loom models (`--cfg evfd_loom`).
mod loom_epoll;
mod loom_fd;
