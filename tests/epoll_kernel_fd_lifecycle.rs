//! Kernel-fd registrations over their lifetime, against the real kernel epoll: a dropped
//! `KernelNotifier` leaves at once in every mode and frees its number for the next `add`; a
//! `BorrowedFd` registration is keyed by (fd number, open file) so a new file on a reused
//! number can be added next to a stale registration; failed calls create nothing and return
//! the kernel's errno; `len()` counts what the kernel still holds.
//!
//! These tests reuse fd numbers on purpose, so they run one at a time (`SERIAL`): with no
//! other thread of this binary opening fds, the kernel hands out the lowest free number and
//! the reuse is deterministic.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::{Mutex, MutexGuard};
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};
use rustix::event::epoll::{self as kep, CreateFlags, EventData, EventFlags};

static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn wait0(ep: &Epoll) -> Vec<(Events, u64)> {
    let mut buf = [Event::default(); 16];
    let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
    let mut v: Vec<_> = buf[..n].iter().map(|e| (e.events, e.data)).collect();
    v.sort_by_key(|e| e.1);
    v
}

/// A real kernel epoll, the oracle.
struct Kernel(OwnedFd);

impl Kernel {
    fn new() -> Kernel {
        Kernel(kep::create(CreateFlags::CLOEXEC).unwrap())
    }
    fn add(&self, fd: BorrowedFd<'_>, data: u64) -> io::Result<()> {
        kep::add(&self.0, fd, EventData::new_u64(data), EventFlags::IN).map_err(io::Error::from)
    }
    fn modify(&self, fd: BorrowedFd<'_>, data: u64) -> io::Result<()> {
        kep::modify(&self.0, fd, EventData::new_u64(data), EventFlags::IN).map_err(io::Error::from)
    }
    fn delete(&self, fd: BorrowedFd<'_>) -> io::Result<()> {
        kep::delete(&self.0, fd).map_err(io::Error::from)
    }
    fn wait0(&self) -> Vec<(Events, u64)> {
        let mut evs = Vec::with_capacity(16);
        kep::wait(
            &self.0,
            rustix::buffer::spare_capacity(&mut evs),
            Some(&Default::default()),
        )
        .unwrap();
        let mut v: Vec<_> = evs
            .iter()
            .map(|e| {
                let (flags, data) = (e.flags, e.data);
                (Events::from_bits_retain(flags.bits()), data.u64())
            })
            .collect();
        v.sort_by_key(|e| e.1);
        v
    }
    /// Items the kernel holds (`tfd:` lines of its fdinfo).
    fn len(&self) -> usize {
        let path = format!("/proc/self/fdinfo/{}", self.0.as_raw_fd());
        std::fs::read_to_string(path)
            .unwrap()
            .lines()
            .filter(|l| l.starts_with("tfd:"))
            .count()
    }
}

fn errno(r: io::Result<()>) -> Option<i32> {
    r.err().map(|e| e.raw_os_error().expect("a kernel errno"))
}

fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

/// A regular file: not pollable (the kernel answers `EPERM`).
fn regular_file() -> std::fs::File {
    std::fs::File::open(std::env::current_exe().unwrap()).unwrap()
}

/// A number that is not an open fd right now.
fn closed_number() -> i32 {
    let (r, _w) = rustix::pipe::pipe().unwrap();
    let n = r.as_raw_fd();
    drop(r);
    n
}

fn dropped_notifier_frees_its_number(mode: Mode) {
    let _s = serial();
    let ep = Epoll::new();
    let k1 = KernelNotifier::new(mode).unwrap();
    let num = k1.as_raw_fd();
    ep.add(&k1, Events::IN, 1).unwrap();
    assert_eq!(ep.len(), 1);
    drop(k1);
    assert_eq!(
        ep.len(),
        0,
        "{mode:?}: a dropped KernelNotifier leaves the interest set"
    );
    let k2 = KernelNotifier::new(mode).unwrap();
    assert_eq!(
        k2.as_raw_fd(),
        num,
        "the kernel reuses the lowest free number"
    );
    ep.add(&k2, Events::IN, 2)
        .unwrap_or_else(|e| panic!("{mode:?}: add on the reused number failed: {e}"));
    k2.notify().unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN, 2)], "{mode:?}");
    assert_eq!(ep.len(), 1);
}

#[test]
fn dropped_counter_notifier_frees_its_number() {
    dropped_notifier_frees_its_number(Mode::Counter);
}

#[test]
fn dropped_semaphore_notifier_frees_its_number() {
    dropped_notifier_frees_its_number(Mode::Semaphore);
}

#[test]
fn dropped_autoreset_notifier_frees_its_number() {
    dropped_notifier_frees_its_number(Mode::AutoReset);
}

/// The docs: sources leave silently when dropped — whatever other fds refer to the eventfd.
fn dropped_notifier_with_a_live_clone_is_silent(mode: Mode) {
    let _s = serial();
    let ep = Epoll::new();
    let k = KernelNotifier::new(mode).unwrap();
    let other = k.try_clone().unwrap();
    ep.add(&k, Events::IN, 1).unwrap();
    drop(k);
    other.notify().unwrap();
    assert_eq!(
        wait0(&ep),
        vec![],
        "{mode:?}: a dropped KernelNotifier kept firing"
    );
    assert_eq!(ep.len(), 0);
    assert_eq!(
        other.count().unwrap(),
        1,
        "nothing consumed the clone's count"
    );
}

#[test]
fn dropped_counter_notifier_with_a_live_clone_is_silent() {
    dropped_notifier_with_a_live_clone_is_silent(Mode::Counter);
}

#[test]
fn dropped_autoreset_notifier_with_a_live_clone_is_silent() {
    dropped_notifier_with_a_live_clone_is_silent(Mode::AutoReset);
}

/// The vhost-user reconnect path: kick fds are replaced while the epoll lives on, many times.
#[test]
fn kick_replaced_many_times() {
    let _s = serial();
    let ep = Epoll::new();
    for round in 0..50u64 {
        let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
        ep.add(&kick, Events::IN, round)
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        kick.notify().unwrap();
        assert_eq!(wait0(&ep), vec![(Events::IN, round)]);
        assert_eq!(kick.count().unwrap(), 0);
        assert_eq!(ep.len(), 1);
    }
    assert_eq!(ep.len(), 0, "the last kick was dropped with its round");
}

/// A stale registration (the old file lives on through a dup, so the kernel keeps its item)
/// and a new file on the same number: the kernel adds the new one; so must we.
#[test]
fn new_file_on_a_reused_number_next_to_a_stale_registration() {
    let _s = serial();
    let ep = Epoll::new();
    let kernel = Kernel::new();
    let (r1, w1) = rustix::pipe::pipe().unwrap();
    let keep = r1.try_clone().unwrap();
    let num = r1.as_raw_fd();
    ep.add(&r1.as_fd(), Events::IN, 1).unwrap();
    kernel.add(r1.as_fd(), 1).unwrap();
    drop(r1);
    let (r2, w2) = rustix::pipe::pipe().unwrap();
    assert_eq!(
        r2.as_raw_fd(),
        num,
        "the kernel reuses the lowest free number"
    );
    kernel.add(r2.as_fd(), 2).unwrap();
    ep.add(&r2.as_fd(), Events::IN, 2)
        .expect("a new file on a reused number can be added, as in the kernel");
    assert_eq!(ep.len(), kernel.len());
    assert_eq!(ep.len(), 2);
    rustix::io::write(&w1, b"x").unwrap();
    assert_eq!(
        wait0(&ep),
        kernel.wait0(),
        "the stale item reports with its data"
    );
    rustix::io::write(&w2, b"x").unwrap();
    assert_eq!(wait0(&ep), kernel.wait0());
    assert_eq!(wait0(&ep), vec![(Events::IN, 1), (Events::IN, 2)]);
    assert_eq!(
        errno(ep.modify(&r2.as_fd(), Events::IN, 3)),
        errno(kernel.modify(r2.as_fd(), 3))
    );
    assert_eq!(
        errno(ep.delete(&r2.as_fd())),
        errno(kernel.delete(r2.as_fd()))
    );
    assert_eq!(errno(ep.delete(&r2.as_fd())), Some(libc::ENOENT));
    assert_eq!(errno(kernel.delete(r2.as_fd())), Some(libc::ENOENT));
    assert_eq!(ep.len(), kernel.len());
    drop(keep);
    assert_eq!(
        ep.len(),
        kernel.len(),
        "the last reference went: the kernel dropped it"
    );
    assert_eq!(ep.len(), 0);
}

#[test]
fn closed_file_and_a_new_one_on_its_number() {
    let _s = serial();
    let ep = Epoll::new();
    let (r1, _w1) = rustix::pipe::pipe().unwrap();
    let num = r1.as_raw_fd();
    ep.add(&r1.as_fd(), Events::IN, 1).unwrap();
    drop(r1);
    assert_eq!(ep.len(), 0, "len() counts what the kernel still holds");
    let (r2, w2) = rustix::pipe::pipe().unwrap();
    assert_eq!(r2.as_raw_fd(), num);
    ep.add(&r2.as_fd(), Events::IN, 2).unwrap();
    assert_eq!(ep.len(), 1);
    rustix::io::write(&w2, b"x").unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN, 2)]);
}

#[test]
fn len_after_kernel_fds_close() {
    let _s = serial();
    let ep = Epoll::new();
    let (r, w) = rustix::pipe::pipe().unwrap();
    let (a, b) = std::os::unix::net::UnixStream::pair().unwrap();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    ep.add(&r.as_fd(), Events::IN, 1).unwrap();
    ep.add(&a.as_fd(), Events::IN, 2).unwrap();
    ep.add(&k, Events::IN, 3).unwrap();
    assert_eq!(ep.len(), 3);
    drop((r, w));
    assert_eq!(ep.len(), 2);
    drop((a, b));
    assert_eq!(ep.len(), 1);
    drop(k);
    assert_eq!(ep.len(), 0);
    assert!(ep.is_empty());
}

#[test]
fn failed_add_creates_nothing_and_says_the_kernels_errno() {
    let _s = serial();
    let kernel = Kernel::new();
    let file = regular_file();
    let before = open_fds();
    let ep = Epoll::new();
    assert_eq!(
        errno(ep.add(&file.as_fd(), Events::IN, 0)),
        Some(libc::EPERM)
    );
    assert_eq!(errno(kernel.add(file.as_fd(), 0)), Some(libc::EPERM));
    let closed = closed_number();
    // SAFETY: deliberately a number that is not open (the EBADF case): it is only passed to
    // epoll_ctl, which answers EBADF without touching any file; nothing reads or closes it.
    let bad = unsafe { BorrowedFd::borrow_raw(closed) };
    assert_eq!(errno(ep.add(&bad, Events::IN, 0)), Some(libc::EBADF));
    assert_eq!(errno(kernel.add(bad, 0)), Some(libc::EBADF));
    assert_eq!(
        open_fds(),
        before,
        "a failed add left a kernel side (fds) behind"
    );
    assert_eq!(ep.len(), 0);
    // And the epoll still behaves as a purely in-memory one: an LT cascade reaches every
    // waiter (tests/epoll_kernel_threads.rs covers the hang itself).
    let n = evfd::Notifier::builder().initial(1).build().unwrap();
    ep.add(&n, Events::IN, 7).unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN, 7)]);
}

/// Before the first kernel add (no kernel side yet) and after it, modify/delete answer as
/// the kernel does: EBADF for a closed number, EPERM for a file that cannot be polled,
/// ENOENT for a pollable fd that is not registered.
#[test]
fn modify_delete_errnos_match_the_kernel() {
    let _s = serial();
    let kernel = Kernel::new();
    let file = regular_file();
    let (r, _w) = rustix::pipe::pipe().unwrap();
    for stage in ["before the first kernel add", "after a kernel add"] {
        let ep = Epoll::new();
        let other = KernelNotifier::new(Mode::Counter).unwrap();
        if stage.starts_with("after") {
            ep.add(&other, Events::IN, 9).unwrap();
        }
        // The lowest free number: what any fd opened inside the calls below would get.
        let closed = closed_number();
        // SAFETY: deliberately a number that is not open (the EBADF case): it is only passed to
        // epoll_ctl, which answers EBADF without touching any file; nothing reads or closes it.
        let bad = unsafe { BorrowedFd::borrow_raw(closed) };
        for (what, fd) in [
            ("regular file", file.as_fd()),
            ("closed fd", bad),
            ("pipe", r.as_fd()),
        ] {
            assert_eq!(
                errno(ep.modify(&fd, Events::IN, 1)),
                errno(kernel.modify(fd, 1)),
                "modify of a {what} {stage}"
            );
            assert_eq!(
                errno(ep.delete(&fd)),
                errno(kernel.delete(fd)),
                "delete of a {what} {stage}"
            );
        }
        let k = KernelNotifier::new(Mode::AutoReset).unwrap();
        assert_eq!(
            errno(ep.modify(&k, Events::IN, 1)),
            Some(libc::ENOENT),
            "{stage}"
        );
        assert_eq!(errno(ep.delete(&k)), Some(libc::ENOENT), "{stage}");
    }
}
