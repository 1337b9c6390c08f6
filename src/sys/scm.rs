//! File descriptors over a Unix stream socket (`SCM_RIGHTS`).
//!
//! The receiver takes whatever the sender attached, close-on-exec (`MSG_CMSG_CLOEXEC`), as
//! `OwnedFd`s: a message with too many fds, or with fds beside a wrong payload, closes them
//! all when the caller drops the result.
//!
//! # References
//!
//! - [unix(7)](https://man7.org/linux/man-pages/man7/unix.7.html), `SCM_RIGHTS`
//! - [cmsg(3)](https://man7.org/linux/man-pages/man3/cmsg.3.html)

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};

use rustix::net::{
    recvmsg, sendmsg, RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags,
    SendAncillaryBuffer, SendAncillaryMessage, SendFlags,
};

/// The most fds [`recv`] takes from one message; more is a truncated (refused) message.
pub(crate) const MAX_FDS: usize = 8;

/// Send `payload` with `fds` attached (one `sendmsg`; the payload goes out whole or the
/// rest with plain writes, the fds with its first byte).
pub(crate) fn send(sock: BorrowedFd<'_>, payload: &[u8], fds: &[BorrowedFd<'_>]) -> io::Result<()> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many fds for one message",
        ));
    }
    let mut sent = loop {
        match sendmsg(
            sock,
            &[IoSlice::new(payload)],
            &mut control,
            SendFlags::NOSIGNAL,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    while sent < payload.len() {
        match rustix::net::send(sock, &payload[sent..], SendFlags::NOSIGNAL) {
            Ok(n) => sent += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// What [`recv`] got.
#[derive(Debug)]
pub(crate) struct Received {
    /// Payload bytes read (at most the buffer's length).
    pub(crate) len: usize,
    /// Every fd attached to the message, in order.
    pub(crate) fds: Vec<OwnedFd>,
    /// The kernel dropped control data (more fds than [`MAX_FDS`], or other ancillary data).
    pub(crate) truncated: bool,
}

/// Receive one message: fill `payload` (reading until full or end of stream, the fds come
/// with the first byte) and take the fds attached to it.
pub(crate) fn recv(sock: BorrowedFd<'_>, payload: &mut [u8]) -> io::Result<Received> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let msg = loop {
        match recvmsg(
            sock,
            &mut [IoSliceMut::new(payload)],
            &mut control,
            RecvFlags::CMSG_CLOEXEC,
        ) {
            Err(rustix::io::Errno::INTR) => continue,
            r => break r?,
        }
    };
    let mut fds = Vec::new();
    let mut other = false;
    for m in control.drain() {
        match m {
            RecvAncillaryMessage::ScmRights(it) => fds.extend(it),
            _ => other = true,
        }
    }
    let truncated = other || msg.flags.contains(ReturnFlags::CTRUNC);
    // No second read to complete a short payload: a sender's `sendmsg` puts the payload and
    // its fds in one segment, which one `recvmsg` takes whole. A short payload that came with
    // fds is malformed, and waiting for the rest would let a peer that keeps its end open
    // hold the receiver for ever; the caller refuses it (and closes the fds).
    let len = msg.bytes.min(payload.len());
    Ok(Received {
        len,
        fds,
        truncated,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;
    use std::os::unix::net::UnixStream;

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn fds_travel_and_extra_are_counted() {
        let (a, b) = UnixStream::pair().unwrap();
        let (r, w) = rustix::pipe::pipe().unwrap();
        send(a.as_fd(), b"hello", &[r.as_fd(), w.as_fd(), r.as_fd()]).unwrap();
        let mut buf = [0u8; 5];
        let got = recv(b.as_fd(), &mut buf).unwrap();
        assert_eq!(&buf, b"hello");
        assert_eq!(got.len, 5);
        assert_eq!(got.fds.len(), 3);
        assert!(!got.truncated);
        // The received write end works.
        rustix::io::write(&got.fds[1], b"x").unwrap();
        let mut one = [0u8; 1];
        rustix::io::read(&r, &mut one).unwrap();
        assert_eq!(&one, b"x");
    }
}
