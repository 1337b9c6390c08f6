//! Shared (not `FUTEX_PRIVATE_FLAG`) futex wait and wake on a 32-bit word of a
//! `MAP_SHARED` region, so that a waiter in one process is woken by a waker in another.
//!
//! The kernel keys a shared futex by (inode, offset) of the page, so the same word mapped
//! at different addresses in two processes (or inherited by `fork`) is one futex.
//!
//! [`wait_private`] and [`wake_private`] are the same on a word only this process uses
//! (`FUTEX_PRIVATE_FLAG`: keyed by the address, no page lookup): the count a private
//! `KernelNotifier` keeps in memory (`super::mem_count`).
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
    wait_flags(word, expected, deadline, futex::Flags::empty())
}

/// [`wait`] on a word of this process only (`FUTEX_PRIVATE_FLAG`).
pub(crate) fn wait_private(
    word: &AtomicU32,
    expected: u32,
    deadline: Option<Instant>,
) -> io::Result<Woke> {
    wait_flags(word, expected, deadline, futex::Flags::PRIVATE)
}

fn wait_flags(
    word: &AtomicU32,
    expected: u32,
    deadline: Option<Instant>,
    flags: futex::Flags,
) -> io::Result<Woke> {
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
    match futex::wait(word, flags, expected, timeout.as_ref()) {
        Ok(()) | Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => Ok(Woke::Maybe),
        Err(rustix::io::Errno::TIMEDOUT) => Ok(Woke::TimedOut),
        Err(e) => Err(e.into()),
    }
}

/// `FUTEX_WAKE` (shared): wake up to `n` waiters on `word`. Returns how many were woken.
pub(crate) fn wake(word: &AtomicU32, n: u32) -> io::Result<usize> {
    wake_flags(word, n, futex::Flags::empty())
}

/// [`wake`] on a word of this process only (`FUTEX_PRIVATE_FLAG`, as its waiters used).
pub(crate) fn wake_private(word: &AtomicU32, n: u32) -> io::Result<usize> {
    wake_flags(word, n, futex::Flags::PRIVATE)
}

fn wake_flags(word: &AtomicU32, n: u32, flags: futex::Flags) -> io::Result<usize> {
    let n = n.min(i32::MAX as u32);
    Ok(futex::wake(word, flags, n)?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::Ordering::SeqCst;
    use std::sync::Arc;
    use std::time::Duration;

    type Wait = fn(&AtomicU32, u32, Option<Instant>) -> io::Result<Woke>;
    type Wake = fn(&AtomicU32, u32) -> io::Result<usize>;

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn wait_times_out_and_is_woken() {
        let pairs: [(Wait, Wake); 2] = [(wait, wake), (wait_private, wake_private)];
        for (wait, wake) in pairs {
            let w = Arc::new(AtomicU32::new(0));
            let d = Instant::now() + Duration::from_millis(5);
            assert_eq!(wait(&w, 0, Some(d)).unwrap(), Woke::TimedOut);
            assert_eq!(wait(&w, 1, None).unwrap(), Woke::Maybe); // value differs: at once
            let w2 = Arc::clone(&w);
            let t = std::thread::spawn(move || {
                let mut woken = 0;
                while w2.load(SeqCst) == 0 {
                    let _ = wait(&w2, 0, Some(Instant::now() + Duration::from_secs(10)));
                    woken += 1;
                }
                woken
            });
            std::thread::sleep(Duration::from_millis(10));
            w.store(1, SeqCst);
            let t0 = Instant::now();
            wake(&w, u32::MAX).unwrap();
            assert!(t.join().unwrap() >= 1);
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "woken, not timed out"
            );
        }
    }
}
