//! An `Epoll` over kernel fds next to in-memory sources: kernel eventfds (plain `BorrowedFd`
//! and `KernelNotifier`, AutoReset included) and a pipe, LT/ET/ONESHOT through the kernel,
//! the kernel's errors, blocking in `epoll_wait` woken by in-memory notifies, and no lost
//! wake between the two sides. Every blocking test is bounded in time.

use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod util;

fn wait0(ep: &Epoll) -> Vec<(Events, u64)> {
    let mut buf = [Event::default(); 16];
    let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
    buf[..n].iter().map(|e| (e.events, e.data)).collect()
}

fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("{what}: hung"))
}

#[test]
fn kernel_and_memory_sources_in_one_buffer() {
    let ep = Epoll::new();
    let mem = Notifier::new();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    ep.add(&mem, Events::IN, 1).unwrap();
    ep.add(&k, Events::IN, 2).unwrap();
    assert_eq!(ep.len(), 2);
    assert!(wait0(&ep).is_empty());
    k.write(3).unwrap();
    mem.write(1).unwrap();
    // In-memory events first, then the kernel's.
    assert_eq!(wait0(&ep), vec![(Events::IN, 1), (Events::IN, 2)]);
    // LT (kernel rule): still ready until read.
    assert_eq!(wait0(&ep), vec![(Events::IN, 1), (Events::IN, 2)]);
    assert_eq!(k.read().unwrap(), 3);
    assert_eq!(wait0(&ep), vec![(Events::IN, 1)]);
}

#[test]
fn kernel_errors_and_modify_delete() {
    let ep = Epoll::new();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let e = ep.modify(&k, Events::IN, 0).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
    ep.add(&k, Events::IN | Events::ET, 5).unwrap();
    let e = ep.add(&k, Events::IN, 5).unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::AlreadyExists);
    let e = ep
        .modify(&k, Events::IN | Events::EXCLUSIVE, 5)
        .unwrap_err();
    assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    k.notify().unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN, 5)]);
    assert!(wait0(&ep).is_empty(), "ET: reported once");
    ep.modify(&k, Events::IN | Events::ONESHOT, 6).unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN, 6)]);
    assert!(wait0(&ep).is_empty(), "ONESHOT: disarmed");
    ep.delete(&k).unwrap();
    assert_eq!(
        ep.delete(&k).unwrap_err().kind(),
        std::io::ErrorKind::NotFound
    );
    assert_eq!(ep.len(), 0);
}

#[test]
fn borrowed_fd_of_a_pipe() {
    let ep = Epoll::new();
    let (r, w) = rustix::pipe::pipe().unwrap();
    ep.add(&r.as_fd(), Events::IN, 9).unwrap();
    assert!(wait0(&ep).is_empty());
    rustix::io::write(&w, b"x").unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN, 9)]);
    drop(w);
    let got = wait0(&ep);
    assert_eq!(got.len(), 1);
    assert!(
        got[0].0.contains(Events::HUP),
        "HUP is always reported: {got:?}"
    );
}

#[test]
fn autoreset_kernel_notifier_is_reset_by_delivery() {
    let ep = Epoll::new();
    let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
    ep.add(&kick, Events::IN, 7).unwrap();
    kick.write(4).unwrap();
    assert_eq!(
        kick.count().unwrap(),
        4,
        "add and a readiness check do not reset"
    );
    assert!(ep.poll(Events::IN).contains(Events::IN));
    assert_eq!(kick.count().unwrap(), 4);
    assert_eq!(wait0(&ep), vec![(Events::IN, 7)]);
    assert_eq!(kick.count().unwrap(), 0, "the delivery read it");
    assert!(wait0(&ep).is_empty(), "LT: nothing left to report");
    kick.notify().unwrap();
    assert_eq!(wait0(&ep), vec![(Events::IN, 7)]);
    ep.delete(&kick).unwrap();
    kick.notify().unwrap();
    assert!(wait0(&ep).is_empty());
}

#[test]
fn blocking_wait_is_woken_by_kernel_and_by_memory() {
    bounded("kernel+memory wakes", || {
        let ep = Epoll::new();
        let mem = Notifier::new();
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        ep.add(&mem, Events::IN | Events::ET, 1).unwrap();
        ep.add(&*k, Events::IN | Events::ET, 2).unwrap();
        let mut buf = [Event::default(); 4];
        // A kernel write from another thread wakes a waiter asleep in epoll_wait.
        let k2 = k.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            k2.notify().unwrap();
        });
        assert_eq!(ep.wait(&mut buf, None).unwrap(), 1);
        assert_eq!(buf[0].data, 2);
        t.join().unwrap();
        // An in-memory write rings the doorbell of a waiter asleep in the kernel.
        let m2 = mem.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            m2.notify().unwrap();
        });
        let t0 = Instant::now();
        assert_eq!(ep.wait(&mut buf, Some(Duration::from_secs(20))).unwrap(), 1);
        assert_eq!(buf[0].data, 1);
        assert!(t0.elapsed() < Duration::from_secs(10));
        t.join().unwrap();
        // Timeout with nothing ready.
        assert_eq!(
            ep.wait(&mut buf, Some(Duration::from_millis(10))).unwrap(),
            0
        );
    });
}

#[test]
fn no_lost_wake_between_the_two_sides() {
    bounded("stress", || {
        const N: u64 = 20_000;
        let ep = Epoll::new();
        let mem = Notifier::new();
        let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
        ep.add(&mem, Events::IN | Events::ET, 0).unwrap();
        ep.add(&*k, Events::IN | Events::ET, 1).unwrap();
        let m2 = mem.clone();
        let k2 = k.clone();
        let a = std::thread::spawn(move || {
            for _ in 0..N {
                m2.write(1).unwrap();
            }
        });
        let b = std::thread::spawn(move || {
            for _ in 0..N {
                k2.write(1).unwrap();
            }
        });
        let mut total = 0;
        let mut buf = [Event::default(); 4];
        while total < 2 * N {
            let n = ep.wait(&mut buf, Some(Duration::from_secs(5))).unwrap();
            assert!(n > 0, "a wake was lost with {total} of {} read", 2 * N);
            for e in &buf[..n] {
                total += if e.data == 0 {
                    mem.try_read().unwrap_or(0)
                } else {
                    k.try_read().unwrap_or(0)
                };
            }
        }
        a.join().unwrap();
        b.join().unwrap();
        assert_eq!(total, 2 * N);
    });
}

#[test]
fn a_waiter_asleep_before_the_first_kernel_source_sees_it() {
    bounded("late kernel source", || {
        let ep = Epoll::new();
        let mem = Notifier::new();
        ep.add(&mem, Events::IN, 0).unwrap();
        let ep2 = ep.clone();
        let (tx, rx) = std::sync::mpsc::channel();
        let waiter = std::thread::spawn(move || {
            tx.send(util::this_tid()).unwrap();
            let mut buf = [Event::default(); 2];
            let n = ep2.wait(&mut buf, Some(Duration::from_secs(20))).unwrap();
            buf[..n].iter().map(|e| e.data).collect::<Vec<_>>()
        });
        // The waiter parks (in-memory path).
        util::wait_until_blocked(rx.recv().unwrap(), "the waiter");
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        ep.add(&k, Events::IN, 1).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        k.notify().unwrap(); // only the kernel side changes
        let t0 = Instant::now();
        assert_eq!(waiter.join().unwrap(), vec![1]);
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "woken by the kernel source"
        );
    });
}

/// A blocking wait that finds in-memory events ready also returns the ready kernel fds, as
/// `epoll_wait` returns every ready item (a wait that may sleep once skipped the kernel
/// epoll whenever memory had events, and an io_uring completion eventfd was left for the
/// next wait).
#[test]
fn a_wait_with_memory_events_returns_ready_kernel_fds_too() {
    for mode in [Mode::Counter, Mode::AutoReset] {
        let ep = Epoll::new();
        let mem = Notifier::new();
        let k = KernelNotifier::new(mode).unwrap();
        ep.add(&k, Events::IN, 0).unwrap();
        ep.add(&mem, Events::IN, 1).unwrap();
        k.notify().unwrap();
        mem.notify().unwrap();
        let mut evs = [Event::default(); 4];
        for timeout in [None, Some(Duration::from_secs(5)), Some(Duration::ZERO)] {
            let n = ep.wait(&mut evs, timeout).unwrap();
            let mut got: Vec<u64> = evs[..n].iter().map(|e| e.data).collect();
            got.sort_unstable();
            if mode == Mode::AutoReset {
                // Delivered once: the kernel fd was reset by the first wait.
                assert_eq!(
                    got,
                    if timeout.is_none() {
                        vec![0, 1]
                    } else {
                        vec![1]
                    },
                    "{mode:?} {timeout:?}"
                );
            } else {
                assert_eq!(got, vec![0, 1], "{mode:?} {timeout:?}");
            }
        }
    }
}
