//! The errors evfd builds itself, each carrying the errno the kernel returns for the same
//! call (`raw_os_error()`), so that code ported from C that checks errno keeps working and
//! an in-memory object answers exactly as its kernel twin.
//!
//! `std::io::Error` holds either an errno or a custom message, not both, so these errors
//! read as the OS's own text ("File exists (os error 17)"); what each one means for each
//! call is spelled out in that call's `# Errors` section. Errors with no kernel twin (a
//! fork refusal, an adopted fd of the wrong kind) keep a custom message instead.

use std::io;

use rustix::io::Errno;

#[inline]
fn os(e: Errno) -> io::Error {
    io::Error::from_raw_os_error(e.raw_os_error())
}

/// `EINVAL` (kind `InvalidInput`): a reserved or contradictory argument.
pub(crate) fn invalid() -> io::Error {
    os(Errno::INVAL)
}

/// `EAGAIN` (kind `WouldBlock`): a non-blocking read of 0 or write past the limit. Inline:
/// `Notifier::try_read`'s fast path returns it, in the user's code.
#[inline]
pub(crate) fn would_block() -> io::Error {
    os(Errno::AGAIN)
}

/// `EEXIST` (kind `AlreadyExists`): `EPOLL_CTL_ADD` of a registered source.
pub(crate) fn exists() -> io::Error {
    os(Errno::EXIST)
}

/// `ENOENT` (kind `NotFound`): `EPOLL_CTL_MOD`/`DEL` of an unregistered source.
pub(crate) fn not_registered() -> io::Error {
    os(Errno::NOENT)
}

/// `ELOOP` (kind `FilesystemLoop`): an epoll cycle, or a chain deeper than the kernel's.
pub(crate) fn too_deep() -> io::Error {
    os(Errno::LOOP)
}

/// `ETIMEDOUT` (kind `TimedOut`): a timed read that saw nothing (no kernel twin: a kernel
/// `poll` would return 0; this errno is the one that names the kind).
pub(crate) fn timed_out() -> io::Error {
    os(Errno::TIMEDOUT)
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::*;

    #[test]
    fn kinds_and_errnos() {
        for (e, kind, errno) in [
            (
                invalid(),
                io::ErrorKind::InvalidInput,
                Errno::INVAL.raw_os_error(),
            ),
            (
                would_block(),
                io::ErrorKind::WouldBlock,
                Errno::AGAIN.raw_os_error(),
            ),
            (
                exists(),
                io::ErrorKind::AlreadyExists,
                Errno::EXIST.raw_os_error(),
            ),
            (
                not_registered(),
                io::ErrorKind::NotFound,
                Errno::NOENT.raw_os_error(),
            ),
            (
                timed_out(),
                io::ErrorKind::TimedOut,
                Errno::TIMEDOUT.raw_os_error(),
            ),
        ] {
            assert_eq!(e.kind(), kind);
            assert_eq!(e.raw_os_error(), Some(errno));
        }
        assert_eq!(too_deep().raw_os_error(), Some(Errno::LOOP.raw_os_error()));
    }
}
