//! What the count-in-memory tests share: the kernel's count of a `KernelNotifier`'s
//! eventfd, read without lending its fd.

use evfd::KernelNotifier;

/// The kernel's count of `k`'s eventfd, from `/proc/self/fdinfo` (its number from
/// `Debug`, which lends nothing). 1, the base, while memory keeps the count.
pub fn kernel_count(k: &KernelNotifier) -> u64 {
    let dbg = format!("{k:?}");
    let num: i32 = dbg
        .split("fd: ")
        .nth(1)
        .unwrap()
        .split(',')
        .next()
        .unwrap()
        .trim_end_matches(|c: char| !c.is_ascii_digit())
        .parse()
        .unwrap();
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{num}")).unwrap();
    let line = info
        .lines()
        .find(|l| l.starts_with("eventfd-count:"))
        .unwrap();
    u64::from_str_radix(line.split_whitespace().nth(1).unwrap(), 16).unwrap()
}
