//! `KernelNotifier`: a notifier on a real kernel eventfd, created or adopted, written by
//! other threads, by a forked child, and watched by a kernel epoll and tokio.

use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{flags, Events, KernelNotifier, Mode, LIMIT};
use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags, Timespec};

mod util;

fn fdinfo(fd: impl AsFd) -> String {
    std::fs::read_to_string(format!("/proc/self/fdinfo/{}", fd.as_fd().as_raw_fd())).unwrap()
}

#[test]
fn counter_semantics_match_eventfd() {
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    assert_eq!(k.mode(), Mode::Counter);
    assert_eq!(k.poll(Events::IN | Events::OUT), Events::OUT);
    let e = k.try_read().unwrap_err();
    assert_eq!(e.kind(), ErrorKind::WouldBlock);
    assert_eq!(
        e.raw_os_error(),
        Some(libc::EAGAIN),
        "errno is the kernel's"
    );
    k.write(2).unwrap();
    k.notify().unwrap();
    assert_eq!(k.count().unwrap(), 3);
    assert_eq!(k.poll(Events::IN), Events::IN);
    assert_eq!(k.read().unwrap(), 3);
    assert_eq!(
        k.read_timeout(Duration::from_millis(5)).unwrap_err().kind(),
        ErrorKind::TimedOut
    );
    // The limit, as the kernel enforces it.
    k.try_write(LIMIT).unwrap();
    assert_eq!(k.poll(Events::IN | Events::OUT), Events::IN);
    let e = k.try_write(1).unwrap_err();
    assert_eq!(
        (e.kind(), e.raw_os_error()),
        (ErrorKind::WouldBlock, Some(libc::EAGAIN))
    );
    assert_eq!(
        k.try_write(u64::MAX).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(
        k.write(u64::MAX).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
    assert_eq!(k.count().unwrap(), LIMIT, "failed writes change nothing");
    assert_eq!(k.read().unwrap(), LIMIT);
}

#[test]
fn semaphore_is_the_kernels() {
    let k = KernelNotifier::new(Mode::Semaphore).unwrap();
    let info = fdinfo(&k);
    if info.contains("eventfd-semaphore") {
        assert!(info.contains("eventfd-semaphore: 1"), "{info}");
    }
    k.write(3).unwrap();
    assert_eq!(k.read().unwrap(), 1);
    assert_eq!(k.try_read().unwrap(), 1);
    assert_eq!(k.read_timeout(Duration::from_millis(5)).unwrap(), 1);
    assert_eq!(k.try_read().unwrap_err().kind(), ErrorKind::WouldBlock);
    // consume is a readiness check for Semaphore: nothing taken.
    k.write(1).unwrap();
    assert!(k.consume().unwrap().contains(Events::IN));
    assert_eq!(k.count().unwrap(), 1);
}

#[test]
fn autoreset_is_reset_by_delivery() {
    let k = KernelNotifier::new(Mode::AutoReset).unwrap();
    assert!(!fdinfo(&k).contains("eventfd-semaphore: 1"));
    assert_eq!(k.consume().unwrap(), Events::OUT);
    k.notify().unwrap();
    k.notify().unwrap();
    // A readiness check does not reset.
    assert!(k.poll(Events::IN).contains(Events::IN));
    assert_eq!(k.count().unwrap(), 2);
    assert_eq!(k.consume().unwrap(), Events::IN | Events::OUT);
    assert_eq!(k.count().unwrap(), 0);
    assert_eq!(k.consume().unwrap(), Events::OUT);
    // Counter and Semaphore: delivery changes nothing.
    let c = KernelNotifier::builder().initial(4).build().unwrap();
    assert!(c.consume().unwrap().contains(Events::IN));
    assert_eq!(c.count().unwrap(), 4);
}

#[test]
fn builder_and_flags() {
    let k = KernelNotifier::builder()
        .initial(u64::from(u32::MAX) + 10)
        .build()
        .unwrap();
    assert_eq!(
        k.read().unwrap(),
        u64::from(u32::MAX) + 10,
        "initial past 32 bits"
    );
    let k = KernelNotifier::builder().nonblocking(true).build().unwrap();
    assert!(k.is_nonblocking());
    assert_eq!(k.read().unwrap_err().kind(), ErrorKind::WouldBlock);
    assert!(KernelNotifier::new(Mode::Counter).unwrap().is_cloexec());
    assert!(!KernelNotifier::builder()
        .cloexec(false)
        .build()
        .unwrap()
        .is_cloexec());

    let k = KernelNotifier::from_flags(2, flags::SEMAPHORE | flags::NONBLOCK).unwrap();
    assert_eq!(k.mode(), Mode::Semaphore);
    assert!(k.is_nonblocking());
    assert!(!k.is_cloexec(), "eventfd2 without EFD_CLOEXEC");
    assert_eq!(k.read().unwrap(), 1);
    let k = KernelNotifier::from_flags(0, flags::AUTORESET | flags::CLOEXEC).unwrap();
    assert_eq!(k.mode(), Mode::AutoReset);
    assert!(k.is_cloexec());
    for bad in [flags::SEMAPHORE | flags::AUTORESET, 0x8, 1 << 20] {
        let e = KernelNotifier::from_flags(0, bad).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput, "{bad:#x}");
    }
    assert_eq!(
        KernelNotifier::from_flags(u64::MAX, 0).unwrap_err().kind(),
        ErrorKind::InvalidInput
    );
}

#[test]
fn adopt_an_owned_eventfd() {
    // Blocking on purpose: adoption sets O_NONBLOCK on the open file description.
    let raw = eventfd(3, EventfdFlags::CLOEXEC).unwrap();
    let raw_no = raw.as_raw_fd();
    let k = KernelNotifier::from_owned_fd(raw, Mode::Counter).unwrap();
    assert_eq!(k.as_raw_fd(), raw_no);
    assert!(rustix::fs::fcntl_getfl(&k)
        .unwrap()
        .contains(rustix::fs::OFlags::NONBLOCK));
    assert_eq!(k.read().unwrap(), 3);
    assert_eq!(
        k.try_read().unwrap_err().kind(),
        ErrorKind::WouldBlock,
        "must not block"
    );

    // Round trip through OwnedFd.
    k.write(8).unwrap();
    let fd: OwnedFd = k.into();
    let k = KernelNotifier::from_owned_fd(fd, Mode::AutoReset).unwrap();
    assert!(k.consume().unwrap().contains(Events::IN));
    assert_eq!(k.count().unwrap(), 0);
}

#[test]
fn adopt_refuses_what_is_not_a_matching_eventfd() {
    let (rd, _wr) = rustix::pipe::pipe().unwrap();
    let e = KernelNotifier::from_owned_fd(rd, Mode::Counter).unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidInput);
    assert_eq!(e.raw_os_error(), Some(libc::EINVAL), "{e}");

    let sem = eventfd(0, EventfdFlags::SEMAPHORE).unwrap();
    if fdinfo(&sem).contains("eventfd-semaphore") {
        let e = KernelNotifier::from_owned_fd(sem, Mode::Counter).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
        let plain = eventfd(0, EventfdFlags::empty()).unwrap();
        let e = KernelNotifier::from_owned_fd(plain, Mode::Semaphore).unwrap_err();
        assert_eq!(e.kind(), ErrorKind::InvalidInput);
    }
    let sem = eventfd(2, EventfdFlags::SEMAPHORE).unwrap();
    let k = KernelNotifier::from_owned_fd(sem, Mode::Semaphore).unwrap();
    assert_eq!(k.read().unwrap(), 1);
}

#[test]
fn try_clone_shares_the_counter() {
    let a = KernelNotifier::new(Mode::Counter).unwrap();
    let b = a.try_clone().unwrap();
    assert_ne!(a.as_raw_fd(), b.as_raw_fd());
    assert!(b.is_cloexec());
    assert_eq!(b.mode(), Mode::Counter);
    b.write(5).unwrap();
    assert_eq!(a.read().unwrap(), 5);
    let c = KernelNotifier::builder().cloexec(false).build().unwrap();
    assert!(!c.try_clone().unwrap().is_cloexec());
}

#[test]
fn blocking_read_woken_by_a_thread_writing_the_raw_fd() {
    let adopted = eventfd(0, EventfdFlags::CLOEXEC).unwrap();
    let k = Arc::new(KernelNotifier::from_owned_fd(adopted, Mode::Counter).unwrap());
    // The other side knows nothing of evfd: a dup'ed fd and write(2).
    let peer = rustix::io::dup(&*k).unwrap();
    let reader = util::this_tid();
    // The write comes once the read sleeps.
    let t = std::thread::spawn(move || {
        util::wait_until_blocked(reader, "the blocking read");
        rustix::io::write(&peer, &6u64.to_ne_bytes()).unwrap();
    });
    assert_eq!(k.read().unwrap(), 6);
    t.join().unwrap();
}

#[test]
fn blocking_read_timeout_woken_in_time() {
    let k = Arc::new(KernelNotifier::new(Mode::Semaphore).unwrap());
    let k2 = k.clone();
    let reader = util::this_tid();
    let t = std::thread::spawn(move || {
        util::wait_until_blocked(reader, "read_timeout");
        k2.write(2).unwrap();
    });
    assert_eq!(k.read_timeout(Duration::from_secs(10)).unwrap(), 1);
    assert_eq!(k.read_timeout(Duration::from_secs(10)).unwrap(), 1);
    t.join().unwrap();
}

#[test]
fn two_blocked_readers_share_the_units() {
    let k = Arc::new(KernelNotifier::new(Mode::Semaphore).unwrap());
    let (tx, rx) = std::sync::mpsc::channel();
    let readers: Vec<_> = (0..2)
        .map(|_| {
            let (k, tx) = (k.clone(), tx.clone());
            std::thread::spawn(move || {
                tx.send(util::this_tid()).unwrap();
                k.read().unwrap()
            })
        })
        .collect();
    for tid in rx.iter().take(2) {
        util::wait_until_blocked(tid, "a blocking read");
    }
    k.write(2).unwrap();
    let got: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
    assert_eq!(got, 2);
}

#[test]
fn blocking_write_waits_for_room() {
    let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
    k.write(LIMIT - 1).unwrap();
    let k2 = k.clone();
    // 5 does not fit although POLLOUT is set (room for 1): the backoff path.
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(util::this_tid()).unwrap();
        k2.write(5)
    });
    // Asleep between tries (or in one): POLLOUT is set, so it naps.
    let mut naps = util::blocking_syscalls().to_vec();
    naps.push(libc::SYS_clock_nanosleep);
    util::wait_until_blocked_in(rx.recv().unwrap(), &naps, "write(5) with room for 1");
    assert!(!t.is_finished(), "the writer waits");
    assert_eq!(k.count().unwrap(), LIMIT - 1, "the writer waits");
    assert_eq!(k.read().unwrap(), LIMIT - 1);
    t.join().unwrap().unwrap();
    assert_eq!(k.read().unwrap(), 5);
}

/// A forked child (another process) writes an adopted eventfd; the parent's blocking read
/// sees it. The child only calls write(2) and _exit(2).
#[test]
fn written_by_a_forked_child() {
    let adopted = eventfd(0, EventfdFlags::CLOEXEC).unwrap();
    let k = KernelNotifier::from_owned_fd(adopted, Mode::Counter).unwrap();
    let fd = k.as_raw_fd();
    let val: u64 = 42;
    // SAFETY: after fork the child calls only async-signal-safe functions (write, _exit)
    // on memory it already has (the fd number and a stack u64), so the other threads of
    // this test process, which the child does not have, cannot matter.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        // SAFETY: as above; `val` outlives the call and is 8 bytes.
        unsafe {
            let r = libc::write(fd, (&val as *const u64).cast(), 8);
            libc::_exit(if r == 8 { 0 } else { 1 });
        }
    }
    assert_eq!(k.read_timeout(Duration::from_secs(30)).unwrap(), 42);
    let mut status = 0;
    // SAFETY: `pid` is our child; `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(
        libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
        "child status {status}"
    );
}

/// The vhost-style consumer: a kernel epoll on an AutoReset kernel notifier, signalled by
/// another thread; delivery resets it, user code never reads.
#[test]
fn autoreset_kicks_through_a_kernel_epoll() {
    let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
    let guest = kick.try_clone().unwrap();
    let ep = epoll::create(CreateFlags::CLOEXEC).unwrap();
    epoll::add(&ep, &kick, EventData::new_u64(0), EventFlags::IN).unwrap();
    const KICKS: u64 = 2000;
    let t = std::thread::spawn(move || {
        for _ in 0..KICKS {
            guest.notify().unwrap();
        }
    });
    let mut evs = [epoll::Event {
        flags: EventFlags::empty(),
        data: EventData::new_u64(0),
    }];
    let mut handled = 0u64;
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let n = epoll::wait(
            &ep,
            &mut evs,
            Some(&Timespec {
                tv_sec: 0,
                tv_nsec: 50_000_000,
            }),
        )
        .unwrap();
        if n == 1 && kick.consume().unwrap().contains(Events::IN) {
            handled += 1;
        }
        if t.is_finished() && kick.poll(Events::IN).is_empty() {
            break;
        }
        assert!(Instant::now() < deadline);
    }
    t.join().unwrap();
    assert!((1..=KICKS).contains(&handled), "{handled}");
    assert_eq!(kick.count().unwrap(), 0);
    eprintln!("{KICKS} kicks handled in {handled} deliveries, no read() by the consumer");
}

#[cfg(feature = "tokio")]
mod tokio_async {
    use super::*;

    fn rt() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn read_write_consume() {
        rt().block_on(async {
            let k = KernelNotifier::new(Mode::Counter).unwrap();
            let peer = k.try_clone().unwrap();
            let a = evfd::tokio::AsyncNotifierFd::from_kernel(k).unwrap();
            assert_eq!(a.kernel().unwrap().mode(), Mode::Counter);
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(10));
                peer.write(7).unwrap();
            });
            assert_eq!(a.read().await.unwrap(), 7);
            a.write(2).await.unwrap();
            a.notify().await.unwrap();
            assert!(a.consume().await.unwrap().contains(Events::IN));
            assert_eq!(a.read().await.unwrap(), 3);

            let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
            let guest = kick.try_clone().unwrap();
            let a = evfd::tokio::AsyncNotifierFd::from_kernel(kick).unwrap();
            guest.notify().unwrap();
            assert!(a.consume().await.unwrap().contains(Events::IN));
            assert_eq!(a.kernel().unwrap().count().unwrap(), 0);
        });
    }

    #[test]
    fn write_waits_for_the_kernel_to_make_room() {
        rt().block_on(async {
            let k = KernelNotifier::builder().initial(LIMIT).build().unwrap();
            let reader = k.try_clone().unwrap();
            let a = evfd::tokio::AsyncNotifierFd::from_kernel(k).unwrap();
            let (tx, rx) = std::sync::mpsc::channel();
            let reader = std::thread::spawn(move || {
                rx.recv().unwrap();
                assert_eq!(reader.read().unwrap(), LIMIT);
            });
            // The read makes room only once the write is pending.
            util::reporting_first_poll(a.write(1), |pending| {
                assert!(pending, "write(1) did not wait at the limit");
                tx.send(()).unwrap();
            })
            .await
            .unwrap();
            reader.join().unwrap();
            assert_eq!(a.read().await.unwrap(), 1);
        });
    }

    /// A forked child signals; a tokio task awaits it.
    #[test]
    fn awaited_across_fork() {
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        let fd = k.as_raw_fd();
        let val: u64 = 9;
        // SAFETY: see `written_by_a_forked_child`: the child calls only write and _exit.
        let pid = unsafe { libc::fork() };
        assert!(pid >= 0);
        if pid == 0 {
            // SAFETY: as above.
            unsafe {
                libc::usleep(10_000);
                let r = libc::write(fd, (&val as *const u64).cast(), 8);
                libc::_exit(if r == 8 { 0 } else { 1 });
            }
        }
        rt().block_on(async {
            let a = evfd::tokio::AsyncNotifierFd::from_kernel(k).unwrap();
            let v = tokio::time::timeout(Duration::from_secs(30), a.read())
                .await
                .unwrap()
                .unwrap();
            assert_eq!(v, 9);
        });
        let mut status = 0;
        // SAFETY: `pid` is our child; `status` is a valid out-pointer.
        assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    }
}
