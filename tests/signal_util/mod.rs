//! Installing a signal handler, for the tests that deliver signals into evfd's calls
//! (`notifier_signal_safe`, `lend_in_signal_handler`, the torture suite's `signals`).

/// Install `handler` for signal `sig` with `sigaction(2)`: an empty mask and `flags`
/// (`libc::SA_RESTART`, or 0 for interrupted syscalls to fail with `EINTR`). The handler
/// must be async-signal-safe (each caller says why its own is).
pub fn install_handler(sig: libc::c_int, handler: extern "C" fn(libc::c_int), flags: libc::c_int) {
    // SAFETY: a zeroed sigaction is a valid "no flags, empty mask" value, filled in before
    // it is passed; `handler` is a plain `extern "C" fn(c_int)`, the `sa_handler` form.
    unsafe {
        let mut sa: libc::sigaction = std::mem::zeroed();
        sa.sa_sigaction = handler as usize;
        sa.sa_flags = flags;
        libc::sigemptyset(&mut sa.sa_mask);
        assert_eq!(libc::sigaction(sig, &sa, std::ptr::null_mut()), 0);
    }
}
