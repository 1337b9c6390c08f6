//! Thin wrappers over the kernel's epoll, for the mini-epoll's embedded kernel epoll
//! (kernel-fd sources). Errors carry the kernel's errno.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{BorrowedFd, OwnedFd};
use std::time::Instant;

use rustix::event::epoll;
use rustix::event::Timespec;

use crate::events::Events;

/// `epoll_create1(EPOLL_CLOEXEC)`.
pub(crate) fn create() -> io::Result<OwnedFd> {
    Ok(epoll::create(epoll::CreateFlags::CLOEXEC)?)
}

fn flags(events: Events) -> epoll::EventFlags {
    epoll::EventFlags::from_bits_retain(events.bits())
}

/// `EBADF` unless `fd` is open. Checked before we open an fd of our own (a kernel epoll)
/// in a call on `fd`: the new fd would otherwise take a closed number the caller passed,
/// and the kernel would answer for the wrong file.
pub(crate) fn check_open(fd: BorrowedFd<'_>) -> io::Result<()> {
    rustix::io::fcntl_getfd(fd)?;
    Ok(())
}

/// `EPOLL_CTL_ADD`.
pub(crate) fn add(
    ep: BorrowedFd<'_>,
    fd: BorrowedFd<'_>,
    events: Events,
    data: u64,
) -> io::Result<()> {
    Ok(epoll::add(
        ep,
        fd,
        epoll::EventData::new_u64(data),
        flags(events),
    )?)
}

/// `EPOLL_CTL_MOD`.
pub(crate) fn modify(
    ep: BorrowedFd<'_>,
    fd: BorrowedFd<'_>,
    events: Events,
    data: u64,
) -> io::Result<()> {
    Ok(epoll::modify(
        ep,
        fd,
        epoll::EventData::new_u64(data),
        flags(events),
    )?)
}

/// `EPOLL_CTL_DEL`.
pub(crate) fn delete(ep: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
    Ok(epoll::delete(ep, fd)?)
}

pub(crate) use super::wait_vec as wait;

/// [`wait`] into a caller's array (the bare sleep's, on its stack: no heap or thread-local
/// page to fault in after the sleep), at most `out.len()` (and 64) events: how many it
/// took. `EINTR`, a timeout and an empty `out` return 0.
#[inline(always)]
pub(crate) fn wait_into(
    ep: BorrowedFd<'_>,
    out: &mut [(Events, u64)],
    deadline: Option<Instant>,
) -> io::Result<usize> {
    let mut buf = [MaybeUninit::<epoll::Event>::uninit(); 64];
    // No room: nothing taken (a kernel event taken without a slot would be lost).
    if out.is_empty() {
        return Ok(0);
    }
    let max = out.len().min(buf.len());
    let timeout = match deadline {
        None => None,
        Some(d) => Timespec::try_from(d.saturating_duration_since(Instant::now())).ok(),
    };
    match epoll::wait(ep, &mut buf[..max], timeout.as_ref()) {
        Ok((got, _)) => {
            for (o, e) in out.iter_mut().zip(got.iter()) {
                let (f, d) = (e.flags, e.data);
                *o = (Events::from_bits_retain(f.bits()), d.u64());
            }
            Ok(got.len())
        }
        Err(rustix::io::Errno::INTR) => Ok(0),
        Err(e) => Err(e.into()),
    }
}

/// The `data` of every item a kernel epoll holds, from `/proc/self/fdinfo/<ep>` (its `tfd:`
/// lines): what the kernel still holds after files were closed.
pub(crate) fn fdinfo_data(ep: BorrowedFd<'_>) -> io::Result<Vec<u64>> {
    use std::os::fd::AsRawFd;
    let text = std::fs::read_to_string(format!("/proc/self/fdinfo/{}", ep.as_raw_fd()))?;
    Ok(parse_fdinfo_data(&text))
}

fn parse_fdinfo_data(text: &str) -> Vec<u64> {
    text.lines()
        .filter(|l| l.starts_with("tfd:"))
        .filter_map(|l| {
            let rest = &l[l.find("data:")? + "data:".len()..];
            let hex = rest.split_whitespace().next()?;
            u64::from_str_radix(hex, 16).ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use std::os::fd::AsFd;
    use std::time::Instant;

    use crate::events::Events;

    /// `wait_into` takes no more events than it has slots for, and with none takes nothing:
    /// an edge-triggered event stays in the epoll for the next wait.
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn wait_into_takes_what_fits_and_loses_nothing() {
        let ep = super::create().unwrap();
        let fds: Vec<_> = (0..3)
            .map(|_| crate::sys::eventfd::create(1, false, true).unwrap())
            .collect();
        for (i, fd) in fds.iter().enumerate() {
            super::add(ep.as_fd(), fd.as_fd(), Events::IN | Events::ET, i as u64).unwrap();
        }
        let now = Some(Instant::now());
        let mut none: [(Events, u64); 0] = [];
        assert_eq!(super::wait_into(ep.as_fd(), &mut none, now).unwrap(), 0);
        let mut two = [(Events::empty(), 99); 2];
        assert_eq!(super::wait_into(ep.as_fd(), &mut two, now).unwrap(), 2);
        let mut all = [(Events::empty(), 99); 8];
        assert_eq!(super::wait_into(ep.as_fd(), &mut all, now).unwrap(), 1);
        let mut seen: Vec<u64> = two.iter().chain(&all[..1]).map(|&(_, t)| t).collect();
        seen.sort_unstable();
        assert_eq!(seen, [0, 1, 2], "each edge taken once");
        assert!(two.iter().chain(&all[..1]).all(|&(e, _)| e == Events::IN));
        assert_eq!(super::wait_into(ep.as_fd(), &mut all, now).unwrap(), 0);
    }

    /// The `Vec` form holds exactly what was taken, and nothing after an error (the
    /// watcher's loop reads an empty `Vec` as "nothing came").
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn wait_vec_holds_what_was_taken_and_nothing_after_an_error() {
        let ep = super::create().unwrap();
        let fd = crate::sys::eventfd::create(1, false, true).unwrap();
        super::add(ep.as_fd(), fd.as_fd(), Events::IN, 7).unwrap();
        let mut got = vec![(Events::ERR, 99); 3];
        super::wait(ep.as_fd(), &mut got, 4, Some(Instant::now())).unwrap();
        assert_eq!(got, [(Events::IN, 7)]);
        // An eventfd is not an epoll: EINVAL.
        assert!(super::wait(fd.as_fd(), &mut got, 4, Some(Instant::now())).is_err());
        assert!(got.is_empty());
    }

    #[test]
    fn parse_fdinfo_lines() {
        let text = "pos:\t0\nflags:\t02000002\nmnt_id:\t16\nino:\t2071\n\
                    tfd:        5 events:       19 data:                7  pos:0 ino:2071 sdev:f\n\
                    tfd:        9 events: 80000019 data: ffffffffffffffff  pos:0 ino:1 sdev:e\n";
        assert_eq!(super::parse_fdinfo_data(text), vec![7, u64::MAX]);
    }
}
