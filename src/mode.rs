//! The eventfd(2) arithmetic of each mode, as pure functions: no atomics, no locks; and the
//! creation options (mode, initial count, `EFD_*` flags) that both notifier builders share.
//!
//! [`Notifier`](crate::Notifier) applies the arithmetic inside compare-and-swap loops;
//! keeping it pure lets it be tested exhaustively at the boundaries (0, 1, `LIMIT - 1`,
//! `LIMIT`). [`Options`] is parsed and checked here once, so that
//! [`Notifier`](crate::Notifier) and [`KernelNotifier`](crate::KernelNotifier) accept and
//! refuse exactly the same flags with the same messages; the [`builder`] macro gives the
//! three builders (those two and [`SharedNotifier`](crate::SharedNotifier)'s) their shared
//! setters once.

use std::io;

use crate::events::Events;

/// The largest count a write can produce: `0xffff_ffff_ffff_fffe`, as on Linux.
///
/// # Examples
///
/// ```
/// assert_eq!(evfd::LIMIT, u64::MAX - 1);
/// ```
pub const LIMIT: u64 = u64::MAX - 1;

/// How a [`Notifier`](crate::Notifier) counts.
///
/// | | `read()` returns | delivery of `IN` (epoll, async, fd view) |
/// |---|---|---|
/// | `Counter` | the whole count, resets it to 0 | changes nothing |
/// | `Semaphore` | 1, count −1 | changes nothing |
/// | `AutoReset` | the whole count, resets it to 0 | resets the count to 0 |
///
/// # Examples
///
/// ```
/// use evfd::{Mode, Notifier};
/// let n = Notifier::builder().mode(Mode::Semaphore).initial(2).build().unwrap();
/// assert_eq!(n.try_read().unwrap(), 1);
/// assert_eq!(n.mode(), Mode::Semaphore);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[non_exhaustive]
pub enum Mode {
    /// eventfd's default: a read takes the whole count.
    #[default]
    Counter,
    /// `EFD_SEMAPHORE`: a read takes 1.
    Semaphore,
    /// The RFC's `EFD_AUTORESET`: reads as `Counter`, and the delivery of readiness to a
    /// consumer (an `Epoll::wait` handing out `IN`, a completed `read_async`, a fd view's
    /// consume) resets the count, so the consumer never needs to `read()`.
    AutoReset,
}

/// What a notifier is created with: the settings of every builder, and what
/// `eventfd2(initial, flags)` flags parse into.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Options {
    pub(crate) mode: Mode,
    pub(crate) initial: u64,
    /// `EFD_NONBLOCK`: `read`/`write` behave as `try_read`/`try_write`.
    pub(crate) nonblock: bool,
    /// `EFD_CLOEXEC`: fds handed out are close-on-exec.
    pub(crate) cloexec: bool,
}

impl Options {
    /// Counter mode, count 0, blocking; `cloexec` is the builder's default (an in-memory
    /// notifier's fds follow `EFD_CLOEXEC`, off by default as in `eventfd2`; a
    /// `KernelNotifier` is close-on-exec by default, as every fd `std` opens).
    pub(crate) const fn new(cloexec: bool) -> Options {
        Options {
            mode: Mode::Counter,
            initial: 0,
            nonblock: false,
            cloexec,
        }
    }

    /// Parse `eventfd2(initial, flags)` flags (Linux values plus the RFC's `AUTORESET`).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an unknown bit and for `SEMAPHORE | AUTORESET` (as in the RFC).
    /// The initial count is checked by [`check`](Self::check), at build.
    pub(crate) fn from_flags(initial: u64, bits: u32) -> io::Result<Options> {
        let unknown = bits & !flags::ALL;
        if unknown != 0 {
            // EINVAL, as eventfd2 answers (valid: SEMAPHORE 0x1, AUTORESET 0x40,
            // NONBLOCK 0o4000, CLOEXEC 0o2000000).
            return Err(crate::error::invalid());
        }
        let sem = bits & flags::SEMAPHORE != 0;
        let auto = bits & flags::AUTORESET != 0;
        let mode = match (sem, auto) {
            // EINVAL: SEMAPHORE and AUTORESET cannot be combined (the RFC's answer).
            (true, true) => return Err(crate::error::invalid()),
            (true, false) => Mode::Semaphore,
            (false, true) => Mode::AutoReset,
            (false, false) => Mode::Counter,
        };
        Ok(Options {
            mode,
            initial,
            nonblock: bits & flags::NONBLOCK != 0,
            cloexec: bits & flags::CLOEXEC != 0,
        })
    }

    /// A builder's `Debug`: its name, then these fields.
    pub(crate) fn debug_as(&self, name: &str, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct(name)
            .field("mode", &self.mode)
            .field("initial", &self.initial)
            .field("nonblock", &self.nonblock)
            .field("cloexec", &self.cloexec)
            .finish()
    }

    /// `InvalidInput` for an initial count above [`LIMIT`] (both builders, at `build`).
    pub(crate) fn check(&self) -> io::Result<()> {
        if self.initial > LIMIT {
            // EINVAL: the kernel's eventfd2 takes no count above its range either.
            return Err(crate::error::invalid());
        }
        Ok(())
    }
}

/// Defines a notifier builder: the struct (over [`Options`]), its `Default` and `Debug`, and
/// the setters every builder shares (`mode`, `initial`, `nonblocking`, `cloexec`), each
/// with a doc example parameterised by the notifier type. The caller adds what differs:
/// the struct's docs and attributes, extra docs per setter (appended to the common text;
/// `cloexec`'s are all the caller's, as its meaning differs per type), and `build` in an
/// `impl` of its own.
///
/// ```text
/// builder! {
///     /// Builds a [`X`] ...
///     pub struct XBuilder => X { cloexec: <default> }
///     /// extra docs ...
///     fn initial;
///     fn nonblocking;
///     /// the docs ...
///     fn cloexec;
/// }
/// ```
macro_rules! builder {
    (
        $(#[$meta:meta])*
        pub struct $builder:ident => $target:ident { cloexec: $cloexec:expr }
        $(#[$initial_doc:meta])*
        fn initial;
        $(#[$nonblocking_doc:meta])*
        fn nonblocking;
        $(#[$cloexec_doc:meta])*
        fn cloexec;
    ) => {
        $(#[$meta])*
        #[derive(Clone)]
        #[must_use = "a builder does nothing until .build()"]
        pub struct $builder {
            opts: $crate::mode::Options,
        }

        impl ::std::default::Default for $builder {
            fn default() -> Self {
                $builder {
                    opts: $crate::mode::Options::new($cloexec),
                }
            }
        }

        impl ::std::fmt::Debug for $builder {
            fn fmt(&self, f: &mut ::std::fmt::Formatter<'_>) -> ::std::fmt::Result {
                self.opts.debug_as(stringify!($builder), f)
            }
        }

        impl $builder {
            /// The counting mode (default [`Mode::Counter`](crate::Mode::Counter)).
            ///
            /// ```
            #[doc = concat!(
                "let x = evfd::", stringify!($target),
                "::builder().mode(evfd::Mode::Semaphore).build()?;"
            )]
            /// assert_eq!(x.mode(), evfd::Mode::Semaphore);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            pub fn mode(mut self, mode: $crate::Mode) -> Self {
                self.opts.mode = mode;
                self
            }

            /// The initial count (default 0; at most [`LIMIT`](crate::LIMIT)).
            ///
            /// ```
            #[doc = concat!("let x = evfd::", stringify!($target), "::builder().initial(2).build()?;")]
            /// assert_eq!(x.read()?, 2);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            $(#[$initial_doc])*
            pub fn initial(mut self, initial: u64) -> Self {
                self.opts.initial = initial;
                self
            }

            /// Make `read`/`write` behave as `try_read`/`try_write` (`EFD_NONBLOCK`).
            ///
            /// ```
            #[doc = concat!("let x = evfd::", stringify!($target), "::builder().nonblocking(true).build()?;")]
            /// assert_eq!(x.read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
            /// # Ok::<(), std::io::Error>(())
            /// ```
            $(#[$nonblocking_doc])*
            pub fn nonblocking(mut self, yes: bool) -> Self {
                self.opts.nonblock = yes;
                self
            }

            $(#[$cloexec_doc])*
            pub fn cloexec(mut self, yes: bool) -> Self {
                self.opts.cloexec = yes;
                self
            }
        }
    };
}
pub(crate) use builder;

/// The error for a write of `u64::MAX` (0xffffffffffffffff; the largest count is
/// 0xfffffffffffffffe), for both notifiers and every write form: `EINVAL`, as the kernel's.
pub(crate) fn invalid_write() -> io::Error {
    crate::error::invalid()
}

/// The error of a non-blocking write refused for `why`: `EINVAL` for `u64::MAX`, `EAGAIN`
/// for a count too full. Out of line and cold: the callers' fast paths inline into the
/// user's code, and a refusal is their rare case.
#[cold]
#[inline(never)]
pub(crate) fn write_refused(why: WriteRefused) -> io::Error {
    match why {
        WriteRefused::Invalid => invalid_write(),
        WriteRefused::Full => crate::error::would_block(),
    }
}

/// Why a write cannot be applied now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum WriteRefused {
    /// `n == u64::MAX`: never valid.
    Invalid,
    /// `count + n` would pass [`LIMIT`]: wait for a read.
    Full,
}

/// The count after adding `n`, or why not. The kernel's admission test:
/// the write fits iff `u64::MAX - count > n`.
/// (`n == u64::MAX` never passes that test, so it is told from a full count only after.)
pub(crate) const fn write(count: u64, n: u64) -> Result<u64, WriteRefused> {
    if u64::MAX - count > n {
        Ok(count + n)
    } else if n == u64::MAX {
        Err(WriteRefused::Invalid)
    } else {
        Err(WriteRefused::Full)
    }
}

/// What a `read()` returns and the count it leaves, or `None` when the count is 0.
pub(crate) const fn read(mode: Mode, count: u64) -> Option<(u64, u64)> {
    if count == 0 {
        return None;
    }
    match mode {
        Mode::Semaphore => Some((1, count - 1)),
        Mode::Counter | Mode::AutoReset => Some((count, 0)),
    }
}

/// The count left after `IN` is delivered to a consumer (epoll harvest, async completion,
/// fd-view consume). Only AutoReset changes it.
pub(crate) const fn deliver(mode: Mode, count: u64) -> u64 {
    match mode {
        Mode::AutoReset => 0,
        Mode::Counter | Mode::Semaphore => count,
    }
}

/// Readiness of a count, as eventfd's `poll` reports it:
/// `IN` iff `count > 0`, `OUT` iff `count < LIMIT`, `ERR` iff `count == u64::MAX`.
pub(crate) const fn readiness(count: u64) -> Events {
    // Branch-free: this runs once per event in every harvest.
    let bits = ((count != 0) as u32 * Events::IN.bits())
        | ((count < LIMIT) as u32 * Events::OUT.bits())
        | ((count == u64::MAX) as u32 * Events::ERR.bits());
    Events::from_bits_retain(bits)
}

/// Raw flag values accepted by [`Notifier::from_flags`](crate::Notifier::from_flags).
pub mod flags {
    /// `EFD_SEMAPHORE`.
    ///
    /// ```
    /// assert_eq!(evfd::flags::SEMAPHORE, 1);
    /// ```
    pub const SEMAPHORE: u32 = 1;
    /// `EFD_NONBLOCK` (`O_NONBLOCK`, 0o4000): `read`/`write` behave as `try_read`/`try_write`.
    ///
    /// ```
    /// assert_eq!(evfd::flags::NONBLOCK, 0o4000);
    /// ```
    pub const NONBLOCK: u32 = 0o4000;
    /// `EFD_CLOEXEC` (`O_CLOEXEC`, 0o2000000): applies to any fd the notifier hands out.
    ///
    /// ```
    /// assert_eq!(evfd::flags::CLOEXEC, 0o2000000);
    /// ```
    pub const CLOEXEC: u32 = 0o2000000;
    /// `EFD_AUTORESET` from the 2020 RFC (`1 << 6`), never merged into Linux.
    ///
    /// ```
    /// assert_eq!(evfd::flags::AUTORESET, 0x40);
    /// ```
    pub const AUTORESET: u32 = 0x40;
    /// Every bit [`Notifier::from_flags`](crate::Notifier::from_flags) accepts.
    ///
    /// ```
    /// assert_eq!(evfd::flags::ALL, 0o2004101);
    /// ```
    pub const ALL: u32 = SEMAPHORE | NONBLOCK | CLOEXEC | AUTORESET;
}

#[cfg(test)]
mod tests {
    use super::*;

    const EDGES: [u64; 8] = [0, 1, 2, LIMIT / 2, LIMIT - 2, LIMIT - 1, LIMIT, u64::MAX];
    const MODES: [Mode; 3] = [Mode::Counter, Mode::Semaphore, Mode::AutoReset];

    #[test]
    fn write_boundaries() {
        assert_eq!(write(0, 0), Ok(0));
        assert_eq!(write(0, 1), Ok(1));
        assert_eq!(write(0, LIMIT - 1), Ok(LIMIT - 1));
        assert_eq!(write(0, LIMIT), Ok(LIMIT));
        assert_eq!(write(1, LIMIT - 1), Ok(LIMIT));
        assert_eq!(write(1, LIMIT), Err(WriteRefused::Full));
        assert_eq!(write(LIMIT - 1, 1), Ok(LIMIT));
        assert_eq!(write(LIMIT - 1, 2), Err(WriteRefused::Full));
        assert_eq!(write(LIMIT, 0), Ok(LIMIT));
        assert_eq!(write(LIMIT, 1), Err(WriteRefused::Full));
        // An overflowed counter (only reachable from the kernel's signal path) refuses even 0.
        assert_eq!(write(u64::MAX, 0), Err(WriteRefused::Full));
        // u64::MAX is invalid before capacity is looked at, even when full.
        for c in EDGES {
            assert_eq!(write(c, u64::MAX), Err(WriteRefused::Invalid));
        }
    }

    #[test]
    fn write_matches_admission_rule_everywhere_near_edges() {
        for c in EDGES {
            for n in EDGES {
                let expect = if n == u64::MAX {
                    Err(WriteRefused::Invalid)
                } else if (c as u128) + (n as u128) <= LIMIT as u128 {
                    Ok(c + n)
                } else {
                    Err(WriteRefused::Full)
                };
                assert_eq!(write(c, n), expect, "count {c:#x} + {n:#x}");
            }
        }
    }

    #[test]
    fn read_boundaries_every_mode() {
        for m in MODES {
            assert_eq!(read(m, 0), None, "{m:?}");
        }
        for c in [1, 2, LIMIT - 1, LIMIT, u64::MAX] {
            assert_eq!(read(Mode::Counter, c), Some((c, 0)));
            assert_eq!(read(Mode::AutoReset, c), Some((c, 0)));
            assert_eq!(read(Mode::Semaphore, c), Some((1, c - 1)));
        }
    }

    #[test]
    fn deliver_only_autoreset_resets() {
        for c in EDGES {
            assert_eq!(deliver(Mode::Counter, c), c);
            assert_eq!(deliver(Mode::Semaphore, c), c);
            assert_eq!(deliver(Mode::AutoReset, c), 0);
        }
    }

    #[test]
    fn readiness_table() {
        assert_eq!(readiness(0), Events::OUT);
        assert_eq!(readiness(1), Events::IN | Events::OUT);
        assert_eq!(readiness(LIMIT - 1), Events::IN | Events::OUT);
        assert_eq!(readiness(LIMIT), Events::IN);
        assert_eq!(readiness(u64::MAX), Events::IN | Events::ERR);
    }

    #[test]
    fn sum_of_writes_is_what_reads_return() {
        // Arithmetic conservation: writes then reads in each mode return exactly the sum.
        for m in MODES {
            let mut c = 0u64;
            let mut written = 0u64;
            for n in [0, 1, 5, 1000] {
                c = write(c, n).unwrap();
                written += n;
            }
            let mut got = 0;
            while let Some((r, next)) = read(m, c) {
                got += r;
                c = next;
            }
            assert_eq!(got, written, "{m:?}");
        }
    }
}
