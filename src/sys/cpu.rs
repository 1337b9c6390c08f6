//! Which CPU the calling thread runs on, for the adaptive spin (`wait_queue::SpinGauge`).
#![allow(unsafe_code)]

/// The CPU the calling thread runs on now, or `None` where the OS cannot say cheaply.
///
/// glibc and musl answer from the thread's rseq area or the vDSO, without a syscall.
/// (rustix's own vDSO lookup is not used: it faults under valgrind, which has no vDSO.)
#[cfg(all(any(target_os = "linux", target_os = "android"), not(miri)))]
pub(crate) fn current() -> Option<u32> {
    // SAFETY: `sched_getcpu` takes no arguments, touches no memory of ours and reports
    // failure as -1, which `try_from` turns into `None`.
    let c = unsafe { libc::sched_getcpu() };
    u32::try_from(c).ok()
}

/// The CPU the calling thread runs on now, or `None` where the OS cannot say cheaply (and
/// under Miri, which cannot call C).
#[cfg(any(not(any(target_os = "linux", target_os = "android")), miri))]
pub(crate) fn current() -> Option<u32> {
    None
}
