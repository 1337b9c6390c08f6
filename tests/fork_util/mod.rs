//! A child process under a watchdog, for the fork tests: `in_child_of` forks with the
//! function it is given (libc's `fork`, or one that runs no atfork handler), runs the check
//! in the child and waits for it in the parent.

use std::io;
use std::time::{Duration, Instant};

/// How long a child may run before the watchdog kills it and the test fails.
pub const CHILD_LIMIT: Duration = Duration::from_secs(20);

/// Write `msg` to stderr without any lock (the child of a multi-threaded process must not
/// take `std`'s stderr lock, which another thread may have held at the fork).
pub fn raw_eprint(msg: &str) {
    // SAFETY: writes `msg.len()` readable bytes to fd 2.
    unsafe { libc::write(2, msg.as_ptr().cast(), msg.len()) };
}

/// Fork with `fork` (which returns 0 in the child, the child's pid in the parent, -1 on
/// failure); run `f` in the child and `_exit` with 0 if it returned `Ok`, else 1 (printing
/// the reason), 2 if it panicked. In the parent: wait for the child under the watchdog
/// ([`CHILD_LIMIT`]) and fail unless it exited with 0.
pub fn in_child_of(
    what: &str,
    fork: impl FnOnce() -> libc::pid_t,
    f: impl FnOnce() -> Result<(), String>,
) {
    in_child_then(what, fork, f, || {});
}

/// [`in_child_of`], with `parent` run in the parent between the fork and the wait.
pub fn in_child_then(
    what: &str,
    fork: impl FnOnce() -> libc::pid_t,
    f: impl FnOnce() -> Result<(), String>,
    parent: impl FnOnce(),
) {
    let pid = fork();
    assert!(
        pid >= 0,
        "fork for `{what}`: {}",
        io::Error::last_os_error()
    );
    if pid == 0 {
        // Dies with the thread that forked it: a child whose parent a watchdog killed (a
        // nested `in_child_of`) does not outlive the test, holding its output open.
        // SAFETY: prctl with an integer argument; no memory is passed.
        unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) };
        let code = match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
            Ok(Ok(())) => 0,
            Ok(Err(msg)) => {
                raw_eprint(&format!("child `{what}`: {msg}\n"));
                1
            }
            Err(_) => 2,
        };
        // SAFETY: ends the child without running the parent's atexit handlers or
        // destructors.
        unsafe { libc::_exit(code) };
    }
    parent();
    let deadline = Instant::now() + CHILD_LIMIT;
    let mut status = 0;
    loop {
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        let r = unsafe { libc::waitpid(pid, &mut status, libc::WNOHANG) };
        if r == pid {
            break;
        }
        assert_eq!(r, 0, "waitpid: {}", io::Error::last_os_error());
        if Instant::now() >= deadline {
            // SAFETY: `pid` is our child, not yet reaped.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
                libc::waitpid(pid, &mut status, 0);
            }
            panic!("watchdog: child `{what}` still running after {CHILD_LIMIT:?} (deadlocked?)");
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child `{what}` failed: status {status:#x}"
    );
}
