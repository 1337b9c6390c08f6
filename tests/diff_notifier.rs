//! Kernel-differential property test: the same random operation sequence is applied to a
//! real Linux eventfd (non-blocking, via rustix) and to an `evfd::Notifier` in the same
//! mode; every return value, error kind, readiness bit and the count itself
//! (`/proc/self/fdinfo`'s `eventfd-count`) must agree after every step.
//!
//! AutoReset is compared with the kernel's Counter mode: it differs only when readiness is
//! *delivered* (epoll, async, fd views), never for direct reads, writes and polls.
//!
//! Cases: `EVFD_PROPTEST_CASES` (default 1000), e.g.
//! `EVFD_PROPTEST_CASES=100000 cargo test --release --test diff_notifier`.
#![cfg(target_os = "linux")]

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, OwnedFd};

use evfd::{flags, Events, Mode, Notifier, LIMIT};
use proptest::prelude::*;
use rustix::event::{eventfd, poll, EventfdFlags, PollFd, PollFlags};
use rustix::io::Errno;

fn config() -> ProptestConfig {
    let cases = std::env::var("EVFD_PROPTEST_CASES")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(1000);
    ProptestConfig::with_cases(cases)
}

/// An operation applied to both sides.
#[derive(Debug, Clone, Copy)]
enum Op {
    /// `write(n)`.
    Write(u64),
    /// A write sized against the current count: `n = LIMIT - count + delta`, so that the
    /// admission boundary (exactly full, one over, one under) is hit from any state.
    Fill(i8),
    /// `read()` on the non-blocking object.
    Read,
    /// `poll` with this interest (a subset of `IN | OUT`; `ERR`/`HUP` always come back).
    Poll(Events),
}

/// Values that matter to eventfd's arithmetic, weighted towards the edges.
fn value() -> impl Strategy<Value = u64> {
    prop_oneof![
        3 => Just(0u64),
        6 => Just(1u64),
        3 => Just(2u64),
        4 => 3u64..=16,
        2 => Just(LIMIT - 1),
        2 => Just(LIMIT),
        2 => Just(u64::MAX),
        1 => Just(u64::MAX - 2),
        1 => Just(u64::from(u32::MAX)),
        2 => (1u64 << 62)..=LIMIT,
        2 => any::<u64>(),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        5 => value().prop_map(Op::Write),
        2 => (-2i8..=2).prop_map(Op::Fill),
        5 => Just(Op::Read),
        2 => prop_oneof![
            Just(Events::IN | Events::OUT),
            Just(Events::IN),
            Just(Events::OUT),
            Just(Events::empty()),
        ]
        .prop_map(Op::Poll),
    ]
}

fn initial() -> impl Strategy<Value = u32> {
    prop_oneof![
        Just(0u32),
        Just(1u32),
        Just(u32::MAX),
        0u32..16,
        any::<u32>()
    ]
}

fn mode() -> impl Strategy<Value = Mode> {
    prop_oneof![
        Just(Mode::Counter),
        Just(Mode::Semaphore),
        Just(Mode::AutoReset)
    ]
}

/// The kernel's twin of `mode`: AutoReset behaves as Counter for direct operations.
fn kernel_flags(mode: Mode) -> EventfdFlags {
    match mode {
        Mode::Semaphore => EventfdFlags::NONBLOCK | EventfdFlags::SEMAPHORE,
        _ => EventfdFlags::NONBLOCK,
    }
}

fn errno_kind(e: Errno) -> ErrorKind {
    match e {
        Errno::AGAIN => ErrorKind::WouldBlock,
        Errno::INVAL => ErrorKind::InvalidInput,
        other => panic!("unexpected errno from eventfd: {other:?}"),
    }
}

fn k_write(fd: &OwnedFd, n: u64) -> Result<(), ErrorKind> {
    match rustix::io::write(fd, &n.to_ne_bytes()) {
        Ok(8) => Ok(()),
        Ok(other) => panic!("eventfd write returned {other}"),
        Err(e) => Err(errno_kind(e)),
    }
}

fn k_read(fd: &OwnedFd) -> Result<u64, ErrorKind> {
    let mut buf = [0u8; 8];
    match rustix::io::read(fd, &mut buf) {
        Ok(8) => Ok(u64::from_ne_bytes(buf)),
        Ok(other) => panic!("eventfd read returned {other}"),
        Err(e) => Err(errno_kind(e)),
    }
}

fn k_poll(fd: &OwnedFd, interest: Events) -> Events {
    let mut pfd = [PollFd::new(
        fd,
        PollFlags::from_bits_retain(interest.bits() as _),
    )];
    let zero = rustix::time::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    poll(&mut pfd, Some(&zero)).expect("poll");
    // POLL* and EPOLL* share values for these bits on Linux.
    Events::from_bits_retain(u32::from(pfd[0].revents().bits()))
}

/// `/proc/self/fdinfo/<fd>` fields of an eventfd: (`eventfd-count`, `eventfd-semaphore`).
fn k_fdinfo(fd: &OwnedFd) -> (u64, Option<bool>) {
    let text =
        std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_raw_fd())).expect("fdinfo");
    let field = |name: &str| {
        text.lines()
            .find_map(|l| l.strip_prefix(name))
            .map(|v| v.trim().to_owned())
    };
    let count = field("eventfd-count:").expect("eventfd-count in fdinfo");
    let count = u64::from_str_radix(&count, 16).expect("hex count");
    let sem = field("eventfd-semaphore:").map(|v| v == "1");
    (count, sem)
}

/// An evfd result's error kind; the error must also carry the errno the kernel's twin
/// returns for that kind (`errno_kind` maps the kernel's two errnos one-to-one).
fn kind<T>(r: std::io::Result<T>) -> Result<T, ErrorKind> {
    r.map_err(|e| {
        let want = match e.kind() {
            ErrorKind::WouldBlock => Errno::AGAIN,
            ErrorKind::InvalidInput => Errno::INVAL,
            other => panic!("unexpected evfd error kind {other:?}: {e}"),
        };
        assert_eq!(e.raw_os_error(), Some(want.raw_os_error()), "{e:?}");
        e.kind()
    })
}

/// The notifier under test, built either through the typed builder (and driven with
/// `try_*`) or through `from_flags(.., NONBLOCK)` (and driven with the plain calls, which
/// then must not block).
struct Subject {
    n: Notifier,
    nonblock_flag: bool,
}

impl Subject {
    fn new(mode: Mode, init: u32, via_flags: bool) -> Subject {
        let n = if via_flags {
            let f = flags::NONBLOCK
                | match mode {
                    Mode::Semaphore => flags::SEMAPHORE,
                    Mode::AutoReset => flags::AUTORESET,
                    _ => 0,
                };
            Notifier::from_flags(u64::from(init), f).expect("valid flags")
        } else {
            Notifier::builder()
                .mode(mode)
                .initial(u64::from(init))
                .build()
                .expect("valid initial")
        };
        assert_eq!(n.mode(), mode);
        Subject {
            n,
            nonblock_flag: via_flags,
        }
    }

    fn write(&self, v: u64) -> Result<(), ErrorKind> {
        kind(if self.nonblock_flag {
            self.n.write(v)
        } else {
            self.n.try_write(v)
        })
    }

    fn read(&self) -> Result<u64, ErrorKind> {
        kind(if self.nonblock_flag {
            self.n.read()
        } else {
            self.n.try_read()
        })
    }
}

fn run_case(mode: Mode, init: u32, via_flags: bool, ops: &[Op]) -> Result<(), TestCaseError> {
    let fd = eventfd(init, kernel_flags(mode)).expect("eventfd");
    let s = Subject::new(mode, init, via_flags);
    let (count, sem) = k_fdinfo(&fd);
    prop_assert_eq!(count, u64::from(init));
    if let Some(sem) = sem {
        prop_assert_eq!(sem, mode == Mode::Semaphore);
    }
    for (i, &op) in ops.iter().enumerate() {
        match op {
            Op::Write(v) => {
                prop_assert_eq!(s.write(v), k_write(&fd, v), "step {}: write({:#x})", i, v)
            }
            Op::Fill(delta) => {
                let v = (i128::from(LIMIT) - i128::from(s.n.count()) + i128::from(delta))
                    .clamp(0, i128::from(u64::MAX)) as u64;
                prop_assert_eq!(
                    s.write(v),
                    k_write(&fd, v),
                    "step {}: fill write({:#x})",
                    i,
                    v
                );
            }
            Op::Read => prop_assert_eq!(s.read(), k_read(&fd), "step {}: read", i),
            Op::Poll(interest) => {
                prop_assert_eq!(
                    s.n.poll(interest),
                    k_poll(&fd, interest),
                    "step {}: poll({:?})",
                    i,
                    interest
                )
            }
        }
        // After every step the whole observable state agrees.
        let (count, _) = k_fdinfo(&fd);
        prop_assert_eq!(s.n.count(), count, "step {}: count after {:?}", i, op);
        let all = Events::IN | Events::OUT;
        prop_assert_eq!(
            s.n.poll(all),
            k_poll(&fd, all),
            "step {}: readiness after {:?}",
            i,
            op
        );
    }
    Ok(())
}

proptest! {
    #![proptest_config(config())]

    #[test]
    fn notifier_matches_kernel_eventfd(
        mode in mode(),
        init in initial(),
        via_flags in any::<bool>(),
        ops in prop::collection::vec(op(), 1..64),
    ) {
        run_case(mode, init, via_flags, &ops)?;
    }

    /// Random flag words (never the AUTORESET bit 0x40, which we accept on purpose):
    /// `from_flags` accepts exactly what `eventfd2` accepts.
    #[test]
    fn from_flags_random_bits_match_eventfd2(bits in any::<u32>(), init in initial()) {
        compare_flags(bits & !flags::AUTORESET, init)?;
    }
}

/// `from_flags(init, bits)` vs `eventfd2(init, bits)`: same verdict (`InvalidInput` ⇔
/// `EINVAL`), and when both accept, the same mode, non-blocking and close-on-exec state.
fn compare_flags(bits: u32, init: u32) -> Result<(), TestCaseError> {
    let ours = Notifier::from_flags(u64::from(init), bits);
    let kernel = eventfd(init, EventfdFlags::from_bits_retain(bits as _));
    match (&ours, &kernel) {
        (Ok(n), Ok(fd)) => {
            prop_assert_eq!(n.count(), u64::from(init));
            let (_, sem) = k_fdinfo(fd);
            if let Some(sem) = sem {
                prop_assert_eq!(sem, n.mode() == Mode::Semaphore, "flags {:#x}", bits);
            }
            let fl = rustix::fs::fcntl_getfl(fd).expect("F_GETFL");
            prop_assert_eq!(
                n.is_nonblocking(),
                fl.contains(rustix::fs::OFlags::NONBLOCK),
                "flags {:#x}",
                bits
            );
            let fdfl = rustix::io::fcntl_getfd(fd).expect("F_GETFD");
            prop_assert_eq!(
                n.is_cloexec(),
                fdfl.contains(rustix::io::FdFlags::CLOEXEC),
                "flags {:#x}",
                bits
            );
        }
        (Err(e), Err(errno)) => {
            prop_assert_eq!(*errno, Errno::INVAL, "flags {:#x}", bits);
            prop_assert_eq!(e.kind(), ErrorKind::InvalidInput, "flags {:#x}", bits);
        }
        _ => prop_assert!(
            false,
            "flags {:#x}: evfd {:?} but eventfd2 {:?}",
            bits,
            ours.as_ref().map(|_| ()).map_err(|e| e.kind()),
            kernel.as_ref().map(|_| ()).map_err(|e| *e)
        ),
    }
    Ok(())
}

/// Every combination of the kernel's three flags, plus each single bit.
#[test]
fn from_flags_known_combinations_and_single_bits_match_eventfd2() {
    let known = [flags::SEMAPHORE, flags::NONBLOCK, flags::CLOEXEC];
    for combo in 0..(1u32 << known.len()) {
        let bits = known
            .iter()
            .enumerate()
            .filter(|(i, _)| combo & (1 << i) != 0)
            .fold(0, |b, (_, f)| b | f);
        for init in [0, 1, u32::MAX] {
            compare_flags(bits, init).unwrap();
        }
    }
    for bit in (0..32)
        .map(|b| 1u32 << b)
        .filter(|&b| b != flags::AUTORESET)
    {
        compare_flags(bit, 0).unwrap();
        compare_flags(bit | flags::NONBLOCK, 0).unwrap();
    }
}

/// AUTORESET (0x40) is our deliberate difference: Linux rejects it (the RFC was never
/// merged), we accept it alone or with NONBLOCK/CLOEXEC, and reject it with SEMAPHORE, as
/// the RFC did.
#[test]
fn autoreset_flag_is_ours() {
    assert_eq!(
        eventfd(0, EventfdFlags::from_bits_retain(flags::AUTORESET as _)).unwrap_err(),
        Errno::INVAL
    );

    for extra in [
        0,
        flags::NONBLOCK,
        flags::CLOEXEC,
        flags::NONBLOCK | flags::CLOEXEC,
    ] {
        let n = Notifier::from_flags(7, flags::AUTORESET | extra).unwrap();
        assert_eq!(n.mode(), Mode::AutoReset);
        assert_eq!(n.count(), 7);
        assert_eq!(n.is_nonblocking(), extra & flags::NONBLOCK != 0);
        assert_eq!(n.is_cloexec(), extra & flags::CLOEXEC != 0);
    }
    for extra in [0, flags::NONBLOCK, flags::CLOEXEC] {
        let e = Notifier::from_flags(0, flags::AUTORESET | flags::SEMAPHORE | extra).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    // An unknown bit next to AUTORESET is still rejected.
    assert_eq!(
        Notifier::from_flags(0, flags::AUTORESET | 0x2)
            .unwrap_err()
            .kind(),
        ErrorKind::InvalidInput
    );
}

/// `from_flags` takes a 64-bit initial count (the syscall only 32): up to LIMIT is fine,
/// u64::MAX is not.
#[test]
fn from_flags_initial_beyond_u32() {
    assert_eq!(Notifier::from_flags(LIMIT, 0).unwrap().count(), LIMIT);
    assert_eq!(
        Notifier::from_flags(u64::MAX, 0).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

/// The fixed edge sequences of docs/semantics.md §2.4, run through the differential harness
/// in every mode so they are always covered regardless of what proptest draws.
#[test]
fn kernel_edge_sequences() {
    let seqs: &[&[Op]] = &[
        &[
            Op::Write(0),
            Op::Read,
            Op::Write(LIMIT),
            Op::Write(1),
            Op::Write(0),
            Op::Write(u64::MAX),
            Op::Read,
        ],
        &[
            Op::Write(LIMIT - 1),
            Op::Write(1),
            Op::Write(1),
            Op::Poll(Events::OUT),
            Op::Read,
            Op::Read,
        ],
        &[
            Op::Fill(0),
            Op::Fill(1),
            Op::Fill(-1),
            Op::Read,
            Op::Fill(-2),
            Op::Fill(2),
        ],
        &[
            Op::Read,
            Op::Poll(Events::empty()),
            Op::Write(u64::MAX),
            Op::Poll(Events::IN),
        ],
    ];
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        for init in [0, 1, u32::MAX] {
            for via_flags in [false, true] {
                for ops in seqs {
                    run_case(mode, init, via_flags, ops).unwrap();
                }
            }
        }
    }
}
