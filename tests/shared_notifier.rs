//! `SharedNotifier` in one process: the message it travels in is validated (every malformed
//! variant refused, its fds closed, nothing mapped), and its operations equal `Notifier`'s.

mod shared_util;

use std::io::ErrorKind;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::net::UnixStream;

use evfd::{Events, Mode, Notifier, SharedNotifier, LIMIT};
use rustix::fs::{MemfdFlags, SealFlags};
use shared_util::{fmt, Rng};

const MAGIC: u64 = u64::from_le_bytes(*b"EVFDSHR1");
const SIZE: u64 = 4096;
/// The region layout version this build speaks (4: edge-only doorbell consumers).
const VERSION: u64 = 4;

fn meta(version: u64, mode: u64, size: u64) -> u64 {
    version | mode << 16 | size << 32
}

/// A memfd laid out as a region, with the given header, size and seals.
fn region(name: &str, magic: u64, meta: u64, size: u64, seals: SealFlags) -> OwnedFd {
    let fd =
        rustix::fs::memfd_create(name, MemfdFlags::ALLOW_SEALING | MemfdFlags::CLOEXEC).unwrap();
    rustix::fs::ftruncate(&fd, size).unwrap();
    rustix::io::pwrite(&fd, &magic.to_ne_bytes(), 0).unwrap();
    rustix::io::pwrite(&fd, &meta.to_ne_bytes(), 8).unwrap();
    if !seals.is_empty() {
        rustix::fs::fcntl_add_seals(&fd, seals).unwrap();
    }
    fd
}

fn good_seals() -> SealFlags {
    SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL
}

fn eventfd() -> OwnedFd {
    rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap()
}

/// How many fds of this process name the memfd `name`, and whether it is mapped.
fn memfd_presence(name: &str) -> (usize, bool) {
    let needle = format!("/memfd:{name} ");
    let fds = std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .filter(|l| format!("{} ", l.display()).starts_with(&needle))
        .count();
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    (fds, maps.contains(&needle))
}

/// Send a crafted message and expect it refused with `kind`, with every received fd closed
/// and nothing mapped.
fn refused(name: &str, payload: &[u8], fds: &[&OwnedFd], kind: ErrorKind) {
    let (a, b) = UnixStream::pair().unwrap();
    let borrowed: Vec<_> = fds.iter().map(|f| f.as_fd()).collect();
    shared_util::send_fds(&a, payload, &borrowed);
    let before = memfd_presence(name);
    let e = SharedNotifier::recv(&b).unwrap_err();
    assert_eq!(e.kind(), kind, "{name}: {e}");
    if fds.len() == 3 {
        // Refused for what the test is about, not for the number of fds.
        assert!(!e.to_string().contains("fds, expected"), "{name}: {e}");
    }
    let after = memfd_presence(name);
    // Ours (the sender's copies) stay; the received duplicates are gone, nothing mapped.
    let ours = fds
        .iter()
        .filter(|f| {
            let l = std::fs::read_link(format!(
                "/proc/self/fd/{}",
                std::os::fd::AsRawFd::as_raw_fd(**f)
            ))
            .unwrap();
            l.display()
                .to_string()
                .starts_with(&format!("/memfd:{name} "))
        })
        .count();
    assert_eq!(
        after.0, ours,
        "{name}: a received fd was left open (before recv: {before:?})"
    );
    assert!(!after.1, "{name}: something was mapped");
}

const PAYLOAD: &[u8] = b"EVFDMSG1";

#[test]
fn malformed_messages_are_refused() {
    let good_meta = meta(VERSION, 0, SIZE);
    let bell = eventfd();
    let sleep = eventfd();

    refused("evfd-none", PAYLOAD, &[], ErrorKind::InvalidData);

    let r = region("evfd-one", MAGIC, good_meta, SIZE, good_seals());
    refused("evfd-one", PAYLOAD, &[&r], ErrorKind::InvalidData);

    let r = region("evfd-two", MAGIC, good_meta, SIZE, good_seals());
    refused("evfd-two", PAYLOAD, &[&r, &bell], ErrorKind::InvalidData);

    let r = region("evfd-four", MAGIC, good_meta, SIZE, good_seals());
    let extra = eventfd();
    refused(
        "evfd-four",
        PAYLOAD,
        &[&r, &bell, &sleep, &extra],
        ErrorKind::InvalidData,
    );

    let (pr, _pw) = rustix::pipe::pipe().unwrap();
    refused(
        "evfd-pipe-region",
        PAYLOAD,
        &[&pr, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region("evfd-unsealed", MAGIC, good_meta, SIZE, SealFlags::empty());
    refused(
        "evfd-unsealed",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region(
        "evfd-nogrow",
        MAGIC,
        good_meta,
        SIZE,
        SealFlags::SHRINK | SealFlags::SEAL,
    );
    refused(
        "evfd-nogrow",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region(
        "evfd-noseal",
        MAGIC,
        good_meta,
        SIZE,
        SealFlags::SHRINK | SealFlags::GROW,
    );
    refused(
        "evfd-noseal",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region(
        "evfd-wseal",
        MAGIC,
        good_meta,
        SIZE,
        good_seals() | SealFlags::WRITE,
    );
    refused(
        "evfd-wseal",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region(
        "evfd-big",
        MAGIC,
        meta(VERSION, 0, 8192),
        8192,
        good_seals(),
    );
    refused(
        "evfd-big",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region(
        "evfd-size-lie",
        MAGIC,
        meta(VERSION, 0, 8192),
        SIZE,
        good_seals(),
    );
    refused(
        "evfd-size-lie",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region("evfd-magic", MAGIC ^ 1, good_meta, SIZE, good_seals());
    refused(
        "evfd-magic",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region(
        "evfd-version",
        MAGIC,
        meta(VERSION - 1, 0, SIZE),
        SIZE,
        good_seals(),
    );
    refused(
        "evfd-version",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region(
        "evfd-mode",
        MAGIC,
        meta(VERSION, 7, SIZE),
        SIZE,
        good_seals(),
    );
    refused(
        "evfd-mode",
        PAYLOAD,
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region("evfd-bell-pipe", MAGIC, good_meta, SIZE, good_seals());
    refused(
        "evfd-bell-pipe",
        PAYLOAD,
        &[&r, &pr, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region("evfd-bell-memfd", MAGIC, good_meta, SIZE, good_seals());
    let r2 = region("evfd-bell-memfd", MAGIC, good_meta, SIZE, good_seals());
    refused(
        "evfd-bell-memfd",
        PAYLOAD,
        &[&r, &r2, &sleep],
        ErrorKind::InvalidData,
    );

    let r = region("evfd-sleep-pipe", MAGIC, good_meta, SIZE, good_seals());
    refused(
        "evfd-sleep-pipe",
        PAYLOAD,
        &[&r, &bell, &pr],
        ErrorKind::InvalidData,
    );

    let r = region("evfd-payload", MAGIC, good_meta, SIZE, good_seals());
    refused(
        "evfd-payload",
        b"EVFDMSG2",
        &[&r, &bell, &sleep],
        ErrorKind::InvalidData,
    );

    // The well-formed message, for contrast, is accepted (and maps the region).
    let r = region(
        "evfd-good",
        MAGIC,
        meta(VERSION, 1, SIZE),
        SIZE,
        good_seals(),
    );
    let (a, b) = UnixStream::pair().unwrap();
    shared_util::send_fds(&a, PAYLOAD, &[r.as_fd(), bell.as_fd(), sleep.as_fd()]);
    let s = SharedNotifier::recv(&b).unwrap();
    assert_eq!(s.mode(), Mode::Semaphore);
    assert_eq!(memfd_presence("evfd-good"), (2, true));
    s.write(2).unwrap();
    assert_eq!(s.read().unwrap(), 1);
    drop(s);
    assert_eq!(memfd_presence("evfd-good"), (1, false));
}

/// A region that arrives read-only (the sender reopened its memfd `O_RDONLY` through
/// /proc: same seals, same header, but `mmap(PROT_WRITE)` would fail with `EACCES`) is
/// refused before mapping, as `InvalidData` saying so, not as a raw mmap errno.
#[test]
fn read_only_region_is_refused_with_a_clear_message() {
    let bell = eventfd();
    let sleep = eventfd();
    let r = region("evfd-ro", MAGIC, meta(VERSION, 0, SIZE), SIZE, good_seals());
    let ro = rustix::fs::open(
        format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&r)),
        rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    drop(r); // only the read-only open is left (the refusal check counts our fds)
    refused(
        "evfd-ro",
        PAYLOAD,
        &[&ro, &bell, &sleep],
        ErrorKind::InvalidData,
    );
    let (a, b) = UnixStream::pair().unwrap();
    shared_util::send_fds(&a, PAYLOAD, &[ro.as_fd(), bell.as_fd(), sleep.as_fd()]);
    let e = SharedNotifier::recv(&b).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert_eq!(e.raw_os_error(), None, "not a raw mmap errno: {e}");
    let msg = e.to_string();
    assert!(msg.contains("read-only") && msg.contains("memfd"), "{msg}");
    // The same memfd opened read-write again is accepted.
    let rw = rustix::fs::open(
        format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&ro)),
        rustix::fs::OFlags::RDWR | rustix::fs::OFlags::CLOEXEC,
        rustix::fs::Mode::empty(),
    )
    .unwrap();
    shared_util::send_fds(&a, PAYLOAD, &[rw.as_fd(), bell.as_fd(), sleep.as_fd()]);
    let s = SharedNotifier::recv(&b).unwrap();
    s.write(3).unwrap();
    assert_eq!(s.read().unwrap(), 3);
}

#[test]
fn closed_socket_is_unexpected_eof() {
    let (a, b) = UnixStream::pair().unwrap();
    drop(a);
    assert_eq!(
        SharedNotifier::recv(&b).unwrap_err().kind(),
        ErrorKind::UnexpectedEof
    );
}

#[test]
fn sent_region_carries_the_seals() {
    let s = SharedNotifier::new(Mode::Counter).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    s.send(&a).unwrap();
    let mut p = [0u8; 8];
    let fds = shared_util::recv_fds(&b, &mut p);
    assert_eq!(fds.len(), 3, "region, doorbell, sleep bell");
    let seals = rustix::fs::fcntl_get_seals(&fds[0]).unwrap();
    assert!(seals.contains(good_seals()));
    // The peer cannot shrink, grow or unseal it.
    assert!(rustix::fs::ftruncate(&fds[0], 0).is_err());
    assert!(rustix::fs::ftruncate(&fds[0], 1 << 20).is_err());
    assert!(rustix::fs::fcntl_add_seals(&fds[0], SealFlags::WRITE).is_err());
}

fn pair(mode: Mode, initial: u64) -> (SharedNotifier, SharedNotifier) {
    let a = SharedNotifier::builder()
        .mode(mode)
        .initial(initial)
        .build()
        .unwrap();
    let (x, y) = UnixStream::pair().unwrap();
    a.send(&x).unwrap();
    (a, SharedNotifier::recv(&y).unwrap())
}

/// Random non-blocking op sequences on a `Notifier` and on a (received) `SharedNotifier`
/// pair, acting through either handle: every result equal.
#[test]
fn same_results_as_notifier_for_random_sequences() {
    let edges = [0, 1, 2, 3, LIMIT / 2, LIMIT - 1, LIMIT, u64::MAX];
    let mut compared = 0u64;
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        for seed in 0..50 {
            let mut rng = Rng::new(seed);
            let n = Notifier::builder().mode(mode).build().unwrap();
            let (a, b) = pair(mode, 0);
            for _ in 0..100 {
                let s = if rng.below(2) == 0 { &a } else { &b };
                let k = rng.below(6);
                let v = if rng.below(4) == 0 {
                    rng.next()
                } else {
                    edges[rng.below(8) as usize]
                };
                let (x, y) = match k {
                    0 => (
                        fmt(n.try_write(v).map(|_| 0)),
                        fmt(s.try_write(v).map(|_| 0)),
                    ),
                    1 => (fmt(n.try_read()), fmt(s.try_read())),
                    2 => (
                        fmt(Ok(u64::from(n.poll(Events::IN | Events::OUT).bits()))),
                        fmt(Ok(u64::from(s.poll(Events::IN | Events::OUT).bits()))),
                    ),
                    3 => (fmt(Ok(n.count())), fmt(Ok(s.count()))),
                    4 => (
                        fmt(Ok(u64::from(n.fd_view().unwrap().consume().bits()))),
                        fmt(s.consume().map(|e| u64::from(e.bits()))),
                    ),
                    _ => (
                        fmt(n.read_timeout(std::time::Duration::ZERO)),
                        fmt(s.read_timeout(std::time::Duration::ZERO)),
                    ),
                };
                // A zero timeout is TimedOut on both.
                assert_eq!(x, y, "{mode:?} seed {seed} op {k} v {v:#x}");
                compared += 1;
            }
        }
    }
    eprintln!("{compared} operations compared");
}

#[test]
fn clone_is_the_same_object_and_nonblocking_mode() {
    let a = SharedNotifier::builder().nonblocking(true).build().unwrap();
    let c = a.clone();
    assert!(a.ptr_eq(&c));
    c.write(4).unwrap();
    assert_eq!(a.read().unwrap(), 4);
    assert_eq!(a.read().unwrap_err().kind(), ErrorKind::WouldBlock);
    a.write(LIMIT).unwrap();
    assert_eq!(a.write(1).unwrap_err().kind(), ErrorKind::WouldBlock);
    assert_eq!(
        a.write(u64::MAX).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(a.count(), LIMIT);
}

#[test]
fn semaphore_threads_conserve_units() {
    // 4 writer threads on one handle, 2 blocking readers on the received one.
    let (a, b) = pair(Mode::Semaphore, 0);
    let per = 2000u64;
    let writers: Vec<_> = (0..4)
        .map(|_| {
            let a = a.clone();
            std::thread::spawn(move || {
                for _ in 0..per {
                    a.write(1).unwrap();
                }
            })
        })
        .collect();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let b = b.clone();
            std::thread::spawn(move || {
                let mut got = 0;
                while let Ok(v) = b.read_timeout(std::time::Duration::from_millis(500)) {
                    got += v;
                }
                got
            })
        })
        .collect();
    for w in writers {
        w.join().unwrap();
    }
    let got: u64 = readers.into_iter().map(|r| r.join().unwrap()).sum();
    assert_eq!(got + b.count(), 4 * per);
    assert_eq!(b.sleepers(), (0, 0, 0));
}

/// Every would-block and timeout error carries its errno, as the other kinds' do
/// (`EAGAIN` for `try_read`/`try_write` and the non-blocking `read`/`write`, `ETIMEDOUT`
/// for `read_timeout`/`write_timeout`).
#[test]
fn would_block_and_timeout_carry_their_errno() {
    let s = SharedNotifier::new(Mode::Counter).unwrap();
    let e = s.try_read().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    let e = s
        .read_timeout(std::time::Duration::from_millis(2))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
    s.write(LIMIT).unwrap();
    let e = s.try_write(1).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(libc::EAGAIN));
    let e = s
        .write_timeout(1, std::time::Duration::from_millis(2))
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::TimedOut);
    assert_eq!(e.raw_os_error(), Some(libc::ETIMEDOUT));
    let nb = SharedNotifier::builder().nonblocking(true).build().unwrap();
    assert_eq!(nb.read().unwrap_err().raw_os_error(), Some(libc::EAGAIN));
}

/// A doorbell or a sleep bell that is an `EFD_SEMAPHORE` eventfd is refused (its drain takes
/// 1 and can leave it readable), where the kernel shows the flag (`eventfd-semaphore`,
/// Linux 6.4+).
#[test]
fn semaphore_doorbell_is_refused() {
    let bell = rustix::event::eventfd(
        0,
        rustix::event::EventfdFlags::CLOEXEC | rustix::event::EventfdFlags::SEMAPHORE,
    )
    .unwrap();
    let shown = std::fs::read_to_string(format!(
        "/proc/self/fdinfo/{}",
        std::os::fd::AsRawFd::as_raw_fd(&bell)
    ))
    .unwrap()
    .contains("eventfd-semaphore");
    let good_meta = meta(VERSION, 1, SIZE);
    let plain = eventfd();
    for (what, fds) in [
        ("doorbell", [&bell, &plain]),
        ("sleep bell", [&plain, &bell]),
    ] {
        let r = region("evfd-sembell", MAGIC, good_meta, SIZE, good_seals());
        let (a, b) = UnixStream::pair().unwrap();
        shared_util::send_fds(&a, PAYLOAD, &[r.as_fd(), fds[0].as_fd(), fds[1].as_fd()]);
        let got = SharedNotifier::recv(&b);
        if shown {
            let e = got.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::InvalidData);
            assert!(e.to_string().contains(what), "{what}: {e}");
        } else {
            assert!(
                got.is_ok(),
                "kernel without eventfd-semaphore: cannot tell, accepted"
            );
        }
    }
}

/// A peer that sends the fds with a payload shorter than the protocol's and keeps its end
/// open: `recv` refuses the message at once instead of waiting for the rest.
#[test]
fn short_payload_with_fds_is_refused_at_once() {
    let (a, b) = UnixStream::pair().unwrap();
    let memfd = rustix::fs::memfd_create("short", MemfdFlags::CLOEXEC).unwrap();
    let bell = rustix::event::eventfd(0, rustix::event::EventfdFlags::CLOEXEC).unwrap();
    shared_util::send_fds(&a, b"EVF", &[memfd.as_fd(), bell.as_fd(), bell.as_fd()]);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(SharedNotifier::recv(&b).map(|_| ()).map_err(|e| e.kind()));
    });
    let got = rx
        .recv_timeout(std::time::Duration::from_secs(10))
        .expect("recv waited for the rest of a short payload");
    assert_eq!(got, Err(ErrorKind::InvalidData));
    drop(a); // kept open until here
}
