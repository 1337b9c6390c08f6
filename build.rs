//! One name for a platform set the crate tests in many places:
//! `evfd_kernel_side` — where an `Epoll` has a kernel side (kernel-fd sources, the pipe
//! halves as sources, their async waits): Linux and Android on epoll, macOS (and the other
//! Apple targets) and FreeBSD on kqueue. Elsewhere the epoll is in-memory only.

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let os = std::env::var("CARGO_CFG_TARGET_OS").unwrap_or_default();
    let vendor = std::env::var("CARGO_CFG_TARGET_VENDOR").unwrap_or_default();
    if matches!(os.as_str(), "linux" | "android" | "freebsd") || vendor == "apple" {
        println!("cargo:rustc-cfg=evfd_kernel_side");
    }
}
