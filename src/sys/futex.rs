//! Shared (not `FUTEX_PRIVATE_FLAG`) futex wait and wake on a 32-bit word of a
//! `MAP_SHARED` region, so that a waiter in one process is woken by a waker in another.
//!
//! The kernel keys a shared futex by (inode, offset) of the page, so the same word mapped
//! at different addresses in two processes (or inherited by `fork`) is one futex.
//!
//! # References
//!
//! - [futex(2)](https://man7.org/linux/man-pages/man2/futex.2.html)

use std::io;
use std::sync::atomic::AtomicU32;
use std::time::Instant;

use rustix::thread::futex;

/// How a [`wait`] ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// Woken, or the word no longer held `expected`, or a signal: look again.
    Maybe,
    /// `deadline` passed.
    TimedOut,
}

/// `FUTEX_WAIT` (shared): sleep while `*word == expected`, until woken or `deadline`.
pub(crate) fn wait(word: &AtomicU32, expected: u32, deadline: Option<Instant>) -> io::Result<Woke> {
    let timeout = match deadline {
        None => None,
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(Woke::TimedOut);
            }
            // A timeout too large for a timespec is "forever".
            futex::Timespec::try_from(left).ok()
        }
    };
    match futex::wait(word, futex::Flags::empty(), expected, timeout.as_ref()) {
        Ok(()) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(Woke::Maybe),
        Err(rustix::io::Errno::TIMEDOUT) => Ok(Woke::TimedOut),
        Err(e) => Err(e.into()),
    }
}

/// `FUTEX_WAKE` (shared): wake up to `n` waiters on `word`. Returns how many were woken.
pub(crate) fn wake(word: &AtomicU32, n: u32) -> io::Result<usize> {
    let n = n.min(i32::MAX as u32);
    Ok(futex::wake(word, futex::Flags::empty(), n)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn wait_times_out_and_is_woken() {
        let w = Arc::new(AtomicU32::new(0));
        let d = Instant::now() + Duration::from_millis(5);
        assert_eq!(wait(&w, 0, Some(d)).unwrap(), Woke::TimedOut);
        assert_eq!(wait(&w, 1, None).unwrap(), Woke::Maybe); // value differs: at once
        let w2 = Arc::clone(&w);
        let t = std::thread::spawn(move || {
            while w2.load(SeqCst) == 0 {
                let _ = wait(&w2, 0, Some(Instant::now() + Duration::from_secs(10)));
            }
        });
        std::thread::sleep(Duration::from_millis(10));
        w.store(1, SeqCst);
        wake(&w, u32::MAX).unwrap();
        t.join().unwrap();
    }
}
