//! kqueue(2) with epoll's meaning (macOS, FreeBSD): the functions of `sys::epoll` that an
//! `Epoll`'s kernel side calls (`crate::epoll::kernel`), under the same names and with the
//! same answers as far as kqueue can give them, so that the kernel side has one body of
//! logic for both. `sys` re-exports this module as `epoll` there, and [`bell`] as
//! `eventfd` (the only eventfd-shaped thing the kernel side needs: a one-fd bell).
//!
//! # The translation
//!
//! epoll keeps one item per fd with a mask; kqueue one knote per (fd, filter). An epoll
//! registration is here a `EVFILT_READ` knote (for `IN`) and a `EVFILT_WRITE` knote (for
//! `OUT`), both with the registration's data as `udata` ([`plan`]):
//!
//! | epoll | kqueue |
//! |---|---|
//! | `IN`, `OUT` | an `EVFILT_READ`, an `EVFILT_WRITE` knote (the other one deleted) |
//! | neither | a disabled `EVFILT_READ` knote, so that the registration exists (no events) |
//! | `ET` | `EV_CLEAR` |
//! | `ONESHOT` | `EV_DISPATCH`: disabled after its event and kept, so `MOD` re-arms it |
//! | `EPOLL_CTL_ADD` | `EV_ADD` of the wanted filters, `EV_DELETE` of the other (`ENOENT` ignored) |
//! | `EPOLL_CTL_MOD` | `EV_DELETE` of both (`ENOENT` if neither existed), then the `ADD` |
//! | `EPOLL_CTL_DEL` | `EV_DELETE` of both; `ENOENT` only if neither existed |
//! | `epoll_wait` | `kevent`; one registration's `READ` and `WRITE` events merged ([`merge`]) |
//! | `EPOLLHUP` | `EV_EOF` on `EVFILT_READ` (with `IN` only if bytes are left) |
//! | `EPOLLERR` | `EV_EOF` on `EVFILT_WRITE` (no reader: a write fails), or `EV_ERROR` |
//!
//! Every change is made with `EV_RECEIPT`, so each filter gets its own answer and no
//! pending event is taken by a `ctl`. (`EV_ONESHOT` would delete a fired knote, and the
//! watcher's `MOD` of it would answer `ENOENT`.)
//!
//! # What differs from epoll (documented in docs/design.md)
//!
//! - kqueue keys a knote by fd *number* and drops it when that number is closed (epoll by
//!   open file, dropped with the file's last reference); there is no `/proc` listing of
//!   what a kqueue holds, so [`fdinfo_data`] answers `Unsupported` and a registration whose
//!   fd was closed is counted until it is deleted.
//! - `ADD` of an fd already registered is not refused (`EEXIST`): kqueue updates the knotes.
//! - `ONESHOT` disables the filter that fired; a registration with `IN | OUT` keeps the other.
//! - `EXCLUSIVE`, `WAKEUP`, `RDHUP`, `PRI` have no counterpart and are ignored.
//! - A kqueue fd watched in another kqueue (or by `poll(2)`) may be reported readable
//!   while it holds level-triggered events that are no longer true, until someone scans
//!   it with `kevent` (FreeBSD counts queued knotes): the callers scan (a harvest collects
//!   from its kqueue; a pipe consumer scans its own at each delivery).
//!
//! The pure parts ([`plan`], [`translate`], [`merge`], [`add_answer`], [`del_answer`], the
//! `udata` encoding) are unit-tested on Linux;
//! the syscalls are compiled (CI's `cargo clippy` for macOS and FreeBSD) and not run here.

#[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
pub(crate) use os::*;

use rustix::io::Errno;

use crate::events::Events;

/// A kqueue filter a registration uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Filter {
    /// `EVFILT_READ`: `IN`.
    Read,
    /// `EVFILT_WRITE`: `OUT`.
    Write,
}

/// What one filter of a registration becomes ([`plan`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Want {
    /// `EV_ADD`, with `EV_CLEAR` (`ET`), `EV_DISPATCH` (`ONESHOT`), and `EV_DISABLE` unless
    /// `enabled`.
    Add {
        clear: bool,
        dispatch: bool,
        enabled: bool,
    },
    /// `EV_DELETE` (`ENOENT` is fine).
    Delete,
}

/// The two filters of an epoll registration with mask `events` (module docs).
pub(crate) fn plan(events: Events) -> [(Filter, Want); 2] {
    let add = |enabled| Want::Add {
        clear: events.contains(Events::ET),
        dispatch: events.contains(Events::ONESHOT),
        enabled,
    };
    let rd = events.contains(Events::IN);
    let wr = events.contains(Events::OUT);
    [
        (
            Filter::Read,
            match (rd, wr) {
                (true, _) => add(true),
                // The registration must exist: a disabled read knote holds it.
                (false, false) => add(false),
                (false, true) => Want::Delete,
            },
        ),
        (Filter::Write, if wr { add(true) } else { Want::Delete }),
    ]
}

/// The answer of an `ADD` from its filters' receipts (in [`plan`]'s order, `None`: done):
/// the first error of a filter it adds, after which the caller deletes what was added (a
/// failed `EPOLL_CTL_ADD` leaves nothing); a delete's error (`ENOENT`: it was not there)
/// is no error of the `ADD`.
#[cfg_attr(
    not(any(target_vendor = "apple", target_os = "freebsd")),
    allow(dead_code)
)]
pub(crate) fn add_answer(plan: &[(Filter, Want); 2], res: [Option<Errno>; 2]) -> Option<Errno> {
    plan.iter()
        .zip(res)
        .find_map(|((_, w), r)| matches!(w, Want::Add { .. }).then_some(r).flatten())
}

/// The answer of a `DEL` from the receipts of its two deletes (`READ`, `WRITE`): done if
/// either knote existed; `ENOENT` only if neither did (epoll's answer for an fd it does not
/// hold); another error (`EBADF`) as it came.
#[cfg_attr(
    not(any(target_vendor = "apple", target_os = "freebsd")),
    allow(dead_code)
)]
pub(crate) fn del_answer(res: [Option<Errno>; 2]) -> Result<(), Errno> {
    match res {
        [None, _] | [_, None] => Ok(()),
        [Some(Errno::NOENT), Some(Errno::NOENT)] => Err(Errno::NOENT),
        [Some(Errno::NOENT), Some(e)] | [Some(e), _] => Err(e),
    }
}

/// One event `kevent` returned, decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Raw {
    pub(crate) filter: Filter,
    /// `EV_EOF`.
    pub(crate) eof: bool,
    /// `EV_ERROR`.
    pub(crate) error: bool,
    /// The filter's `data`: bytes readable (`READ`), room (`WRITE`), or the errno.
    pub(crate) data: i64,
    /// The registration's data ([`data_of`] of the `udata`).
    pub(crate) token: u64,
}

/// epoll's bits for one kqueue event (module docs' table).
pub(crate) fn translate(r: &Raw) -> Events {
    if r.error {
        return Events::ERR;
    }
    match r.filter {
        Filter::Read if r.eof && r.data <= 0 => Events::HUP,
        Filter::Read if r.eof => Events::IN | Events::HUP,
        Filter::Read => Events::IN,
        Filter::Write if r.eof => Events::OUT | Events::ERR,
        Filter::Write => Events::OUT,
    }
}

/// The events `raw` as epoll reports them, into `out` from its start: one entry per
/// registration (token), its filters' bits or-ed, in the order each registration first
/// appears. Returns how many entries it wrote; a registration that finds `out` full is left
/// out (a kqueue returns at most as many raw events as it was given room for, so a buffer as
/// long as the raw one always fits).
pub(crate) fn merge_into(raw: impl IntoIterator<Item = Raw>, out: &mut [(Events, u64)]) -> usize {
    let mut n = 0;
    for r in raw {
        let ev = translate(&r);
        if let Some((e, _)) = out[..n].iter_mut().find(|(_, t)| *t == r.token) {
            *e |= ev;
        } else if n < out.len() {
            out[n] = (ev, r.token);
            n += 1;
        }
    }
    n
}

/// A registration's data as a `udata` (pointer-sized: on a 32-bit target `u64::MAX`, the
/// direct bell's token, becomes `usize::MAX`, and the tokens, counted up from 1, fit).
#[cfg_attr(
    not(any(target_vendor = "apple", target_os = "freebsd")),
    allow(dead_code)
)]
pub(crate) fn udata_of(data: u64) -> usize {
    if data == u64::MAX {
        usize::MAX
    } else {
        data as usize
    }
}

/// The inverse of [`udata_of`].
pub(crate) fn data_of(udata: usize) -> u64 {
    if udata == usize::MAX {
        u64::MAX
    } else {
        udata as u64
    }
}

#[cfg(any(target_vendor = "apple", target_os = "freebsd"))]
mod os {
    use std::io;
    use std::mem::MaybeUninit;
    use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd};
    use std::time::Instant;

    use rustix::event::kqueue::{self as kq, Event, EventFilter, EventFlags};
    use rustix::event::Timespec;
    use rustix::io::Errno;

    use super::{add_answer, data_of, del_answer, merge_into, plan, udata_of, Filter, Raw, Want};
    use crate::events::Events;

    /// `EV_DISPATCH` (rustix names no constant for it).
    fn dispatch() -> EventFlags {
        EventFlags::from_bits_retain(libc::EV_DISPATCH)
    }

    /// The one `kevent(2)` call: `changes`, then up to `out.len()` events until `timeout`
    /// (`None`: forever). Returns the events. (This module's only `unsafe`.)
    #[allow(unsafe_code)]
    fn kevent<'a>(
        kq: BorrowedFd<'_>,
        changes: &[Event],
        out: &'a mut [MaybeUninit<Event>],
        timeout: Option<&Timespec>,
    ) -> rustix::io::Result<&'a mut [Event]> {
        // SAFETY: `kevent` asks that the fds the events name stay valid while registered;
        // kqueue drops a knote when its fd is closed, so none outlives its fd, and the
        // event list is our own buffer.
        let (got, _) = unsafe { kq::kevent_timespec(kq, changes, out, timeout)? };
        Ok(got)
    }

    /// A new kqueue, close-on-exec (a kqueue is not inherited by `fork` either).
    pub(crate) fn create() -> io::Result<OwnedFd> {
        let fd = kq::kqueue()?;
        rustix::io::fcntl_setfd(&fd, rustix::io::FdFlags::CLOEXEC)?;
        Ok(fd)
    }

    /// `EBADF` unless `fd` is open (as `sys::epoll::check_open`).
    pub(crate) fn check_open(fd: BorrowedFd<'_>) -> io::Result<()> {
        rustix::io::fcntl_getfd(fd)?;
        Ok(())
    }

    fn event(fd: BorrowedFd<'_>, f: Filter, flags: EventFlags, data: u64) -> Event {
        let filter = match f {
            Filter::Read => EventFilter::Read(fd.as_raw_fd()),
            Filter::Write => EventFilter::Write(fd.as_raw_fd()),
        };
        Event::new(
            filter,
            flags | EventFlags::RECEIPT,
            udata_of(data) as *mut libc::c_void,
        )
    }

    fn filter_of(e: &Event) -> Option<Filter> {
        match e.filter() {
            EventFilter::Read(_) => Some(Filter::Read),
            EventFilter::Write(_) => Some(Filter::Write),
            _ => None,
        }
    }

    /// Apply `changes` (each with `EV_RECEIPT`): each filter's answer, `None` for success.
    fn apply(kq: BorrowedFd<'_>, changes: &[Event]) -> io::Result<[Option<Errno>; 2]> {
        let mut buf = [MaybeUninit::<Event>::uninit(); 2];
        let zero = Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        let got = loop {
            match kevent(kq, changes, &mut buf[..changes.len()], Some(&zero)) {
                Err(Errno::INTR) => continue,
                r => break r?,
            }
        };
        let mut res = [None, None];
        for e in got.iter() {
            let i = match filter_of(e) {
                Some(Filter::Read) => 0,
                Some(Filter::Write) => 1,
                None => continue,
            };
            if e.flags().contains(EventFlags::ERROR) && e.data() != 0 {
                res[i] = Some(Errno::from_raw_os_error(e.data() as i32));
            }
        }
        Ok(res)
    }

    /// `EPOLL_CTL_ADD` (module docs: an fd already registered is updated, not refused).
    pub(crate) fn add(
        ep: BorrowedFd<'_>,
        fd: BorrowedFd<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        let p = plan(events);
        let changes = p.map(|(f, w)| {
            let flags = match w {
                Want::Add {
                    clear,
                    dispatch: one,
                    enabled,
                } => {
                    let mut fl = EventFlags::ADD;
                    fl |= if enabled {
                        EventFlags::ENABLE
                    } else {
                        EventFlags::DISABLE
                    };
                    if clear {
                        fl |= EventFlags::CLEAR;
                    }
                    if one {
                        fl |= dispatch();
                    }
                    fl
                }
                Want::Delete => EventFlags::DELETE,
            };
            event(fd, f, flags, data)
        });
        let res = apply(ep, &changes)?;
        if let Some(e) = add_answer(&p, res) {
            // Leave nothing behind, as a failed EPOLL_CTL_ADD does.
            let _ = delete(ep, fd);
            return Err(e.into());
        }
        Ok(())
    }

    /// `EPOLL_CTL_MOD`: the registration is deleted and added again with the new mask
    /// (which polls the fd, as `MOD` does); `ENOENT` if it did not exist.
    pub(crate) fn modify(
        ep: BorrowedFd<'_>,
        fd: BorrowedFd<'_>,
        events: Events,
        data: u64,
    ) -> io::Result<()> {
        delete(ep, fd)?;
        add(ep, fd, events, data)
    }

    /// `EPOLL_CTL_DEL`: both filters; `ENOENT` only if neither was registered.
    pub(crate) fn delete(ep: BorrowedFd<'_>, fd: BorrowedFd<'_>) -> io::Result<()> {
        let changes = [
            event(fd, Filter::Read, EventFlags::DELETE, 0),
            event(fd, Filter::Write, EventFlags::DELETE, 0),
        ];
        Ok(del_answer(apply(ep, &changes)?)?)
    }

    /// `epoll_wait` on a kqueue into a `Vec` (`sys`: one copy for both backends).
    pub(crate) use crate::sys::wait_vec as wait;

    /// [`wait`] into a caller's array, at most `out.len()` (and 64) merged events: how many
    /// it took. `EINTR`, a timeout and an empty `out` return 0.
    pub(crate) fn wait_into(
        ep: BorrowedFd<'_>,
        out: &mut [(Events, u64)],
        deadline: Option<Instant>,
    ) -> io::Result<usize> {
        let mut buf = [MaybeUninit::<Event>::uninit(); 64];
        // No room: nothing taken (a kernel event taken without a slot would be lost).
        if out.is_empty() {
            return Ok(0);
        }
        let max = out.len().min(buf.len());
        let timeout = match deadline {
            None => None,
            Some(d) => Timespec::try_from(d.saturating_duration_since(Instant::now())).ok(),
        };
        match kevent(ep, &[], &mut buf[..max], timeout.as_ref()) {
            Ok(got) => Ok(merge_into(
                got.iter().filter_map(|e| {
                    Some(Raw {
                        filter: filter_of(e)?,
                        eof: e.flags().contains(EventFlags::EOF),
                        error: e.flags().contains(EventFlags::ERROR),
                        data: e.data(),
                        token: data_of(e.udata() as usize),
                    })
                }),
                out,
            )),
            Err(Errno::INTR) => Ok(0),
            Err(e) => Err(e.into()),
        }
    }

    /// No listing of a kqueue's knotes exists (module docs): `Unsupported`, so callers
    /// prune nothing.
    pub(crate) fn fdinfo_data(_ep: BorrowedFd<'_>) -> io::Result<Vec<u64>> {
        Err(io::ErrorKind::Unsupported.into())
    }

    /// A bell on one fd, with the names of `sys::eventfd` that the kernel side and the pipe
    /// consumer's held bell use: a kqueue holding one `EVFILT_USER` event (`EV_CLEAR`).
    /// [`write`] triggers it (the kqueue fd becomes readable), [`read`] takes it (not
    /// readable). A `write` first takes a pending trigger, so that each `write` is a new
    /// edge for a kqueue watching the bell with `EV_CLEAR` (the direct bell): a second
    /// trigger of a pending event would not wake the watcher again.
    pub(crate) mod bell {
        use std::io;
        use std::mem::MaybeUninit;
        use std::os::fd::{BorrowedFd, OwnedFd};

        use rustix::event::kqueue::{Event, EventFilter, EventFlags, UserDefinedFlags, UserFlags};
        use rustix::event::Timespec;
        use rustix::io::Errno;

        fn user(flags: EventFlags, trigger: bool) -> Event {
            Event::new(
                EventFilter::User {
                    ident: 0,
                    flags: if trigger {
                        UserFlags::TRIGGER
                    } else {
                        UserFlags::empty()
                    },
                    user_flags: UserDefinedFlags::new(0),
                },
                flags,
                std::ptr::null_mut(),
            )
        }

        /// `changes` (receipts), or with none, take the pending trigger: one `kevent(2)`
        /// that never waits. Returns how many events came back.
        fn call(fd: BorrowedFd<'_>, changes: &[Event]) -> io::Result<usize> {
            let mut buf = [MaybeUninit::<Event>::uninit(); 1];
            let zero = Timespec {
                tv_sec: 0,
                tv_nsec: 0,
            };
            loop {
                match super::kevent(fd, changes, &mut buf, Some(&zero)) {
                    Err(Errno::INTR) => continue,
                    Ok(got) => {
                        if let Some(e) = got.first() {
                            if e.flags().contains(EventFlags::ERROR) && e.data() != 0 {
                                return Err(Errno::from_raw_os_error(e.data() as i32).into());
                            }
                        }
                        return Ok(got.len());
                    }
                    Err(e) => return Err(e.into()),
                }
            }
        }

        /// A new bell, not rung (eventfd's `create(0, false, cloexec)`; the other
        /// arguments are not supported). Always close-on-exec.
        pub(crate) fn create(initval: u32, semaphore: bool, _cloexec: bool) -> io::Result<OwnedFd> {
            debug_assert!(initval == 0 && !semaphore);
            let fd = super::create()?;
            call(
                std::os::fd::AsFd::as_fd(&fd),
                &[user(
                    EventFlags::ADD | EventFlags::CLEAR | EventFlags::RECEIPT,
                    false,
                )],
            )?;
            Ok(fd)
        }

        /// Ring: a new edge (see the module docs); `n` is not counted.
        pub(crate) fn write(fd: BorrowedFd<'_>, _n: u64) -> io::Result<()> {
            call(fd, &[])?;
            call(fd, &[user(EventFlags::RECEIPT, true)])?;
            Ok(())
        }

        /// Take the ring: `1`, or `WouldBlock` if it was not rung.
        pub(crate) fn read(fd: BorrowedFd<'_>) -> io::Result<u64> {
            match call(fd, &[])? {
                0 => Err(Errno::AGAIN.into()),
                _ => Ok(1),
            }
        }

        /// [`write`]: never waits.
        pub(crate) fn write_now(fd: BorrowedFd<'_>, n: u64) -> io::Result<()> {
            write(fd, n)
        }

        /// [`read`]: never waits.
        pub(crate) fn read_now(fd: BorrowedFd<'_>) -> io::Result<u64> {
            read(fd)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn raw(filter: Filter, eof: bool, data: i64, token: u64) -> Raw {
        Raw {
            filter,
            eof,
            error: false,
            data,
            token,
        }
    }

    #[test]
    fn plan_maps_epoll_masks_to_filters() {
        let add = |clear, dispatch, enabled| Want::Add {
            clear,
            dispatch,
            enabled,
        };
        assert_eq!(
            plan(Events::IN),
            [
                (Filter::Read, add(false, false, true)),
                (Filter::Write, Want::Delete)
            ]
        );
        assert_eq!(
            plan(Events::OUT | Events::ET),
            [
                (Filter::Read, Want::Delete),
                (Filter::Write, add(true, false, true))
            ]
        );
        assert_eq!(
            plan(Events::IN | Events::OUT | Events::ONESHOT),
            [
                (Filter::Read, add(false, true, true)),
                (Filter::Write, add(false, true, true))
            ]
        );
        // Neither IN nor OUT: the registration exists, disabled.
        assert_eq!(
            plan(Events::ERR),
            [
                (Filter::Read, add(false, false, false)),
                (Filter::Write, Want::Delete)
            ]
        );
    }

    #[test]
    fn translate_eof_and_errors_as_epoll_reports_pipes() {
        assert_eq!(translate(&raw(Filter::Read, false, 8, 1)), Events::IN);
        // Every writer gone, nothing left: HUP alone (a Linux pipe's read end).
        assert_eq!(translate(&raw(Filter::Read, true, 0, 1)), Events::HUP);
        assert_eq!(
            translate(&raw(Filter::Read, true, 8, 1)),
            Events::IN | Events::HUP
        );
        assert_eq!(translate(&raw(Filter::Write, false, 512, 1)), Events::OUT);
        // Every reader gone: a write fails (a Linux pipe's write end reports ERR).
        assert_eq!(
            translate(&raw(Filter::Write, true, 512, 1)),
            Events::OUT | Events::ERR
        );
        let mut e = raw(Filter::Read, false, 9, 1);
        e.error = true;
        assert_eq!(translate(&e), Events::ERR);
    }

    #[test]
    fn merge_one_entry_per_registration() {
        let events = [
            raw(Filter::Read, false, 8, 7),
            raw(Filter::Write, false, 1, 3),
            raw(Filter::Write, false, 1, 7),
            raw(Filter::Read, true, 0, 3),
        ];
        let mut out = [(Events::empty(), 99); 4];
        let n = merge_into(events, &mut out);
        assert_eq!(
            out[..n],
            [
                (Events::IN | Events::OUT, 7),
                (Events::OUT | Events::HUP, 3)
            ]
        );
        assert_eq!(
            out[2],
            (Events::empty(), 99),
            "nothing written past what it returned"
        );
        // Room for one: the first registration, whole; the second is left out.
        let mut one = [(Events::empty(), 0); 1];
        assert_eq!(merge_into(events, &mut one), 1);
        assert_eq!(one, [(Events::IN | Events::OUT, 7)]);
    }

    #[test]
    fn ctl_answers_as_epoll_ctl() {
        let ok = None;
        let noent = Some(Errno::NOENT);
        // ADD of IN: the write knote's delete finds nothing, which is fine.
        assert_eq!(add_answer(&plan(Events::IN), [ok, noent]), None);
        // A filter the fd refuses fails the ADD (the caller then deletes the rest).
        assert_eq!(
            add_answer(&plan(Events::IN | Events::OUT), [ok, Some(Errno::INVAL)]),
            Some(Errno::INVAL)
        );
        assert_eq!(
            add_answer(&plan(Events::OUT), [Some(Errno::BADF), Some(Errno::BADF)]),
            Some(Errno::BADF)
        );
        // DEL (and so MOD): ENOENT only if neither knote was there.
        assert_eq!(del_answer([ok, noent]), Ok(()));
        assert_eq!(del_answer([noent, ok]), Ok(()));
        assert_eq!(del_answer([ok, ok]), Ok(()));
        assert_eq!(del_answer([noent, noent]), Err(Errno::NOENT));
        assert_eq!(
            del_answer([Some(Errno::BADF), Some(Errno::BADF)]),
            Err(Errno::BADF)
        );
        assert_eq!(del_answer([noent, Some(Errno::BADF)]), Err(Errno::BADF));
    }

    #[test]
    fn udata_round_trips_tokens_and_the_bell() {
        for d in [0, 1, 12345, u64::MAX] {
            assert_eq!(data_of(udata_of(d)), d);
        }
    }
}
