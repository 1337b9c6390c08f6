//! The kick/call halves as `Epoll` sources, with every face an eventfd has: the blocking
//! wait, `wait_async` (tokio and `futures::executor::block_on`), a halves-holding epoll
//! nested in another and behind `Epoll::fd_view()`; AutoReset delivered exactly once per
//! wake, Semaphore (and Counter past `LIMIT`) held units readable, end of file as `HUP`,
//! `OUT` for the notifier half, and a dropped half leaving its epolls. Each case runs over a
//! pipe and over an eventfd (`KernelNotifier::halves`).
#![cfg(target_os = "linux")]

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use evfd::halves::{self, ConsumerHalf, NotifierHalf};
use evfd::{Epoll, Event, Events, KernelNotifier, Mode, LIMIT};

mod util;

const LONG: Option<Duration> = Some(Duration::from_secs(5));
const SHORT: Option<Duration> = Some(Duration::from_millis(20));

/// A pipe pair and an eventfd pair in `mode`.
fn pairs(mode: Mode) -> io::Result<Vec<(&'static str, ConsumerHalf, NotifierHalf)>> {
    let (pc, pn) = halves::pipe(mode)?;
    let (ec, en) = KernelNotifier::new(mode)?.halves()?;
    Ok(vec![("pipe", pc, pn), ("eventfd", ec, en)])
}

fn wait(ep: &Epoll, timeout: Option<Duration>) -> io::Result<Vec<Event>> {
    let mut evs = [Event::default(); 8];
    let n = ep.wait(&mut evs, timeout)?;
    Ok(evs[..n].to_vec())
}

#[test]
fn autoreset_is_delivered_once_per_wake() -> io::Result<()> {
    for (what, c, n) in pairs(Mode::AutoReset)? {
        let ep = Epoll::new();
        ep.add(&c, Events::IN, 7)?;
        assert!(wait(&ep, SHORT)?.is_empty(), "{what}: quiet at first");
        for round in 1..=20u64 {
            for _ in 0..round {
                n.notify()?;
            }
            let evs = wait(&ep, LONG)?;
            assert_eq!(evs.len(), 1, "{what} round {round}: {evs:?}");
            assert_eq!((evs[0].events, evs[0].data), (Events::IN, 7), "{what}");
            // The delivery took everything: nothing left to read, nothing more delivered.
            assert!(
                wait(&ep, SHORT)?.is_empty(),
                "{what} round {round}: redelivered"
            );
            assert_eq!(
                c.try_read().unwrap_err().kind(),
                io::ErrorKind::WouldBlock,
                "{what}"
            );
        }
    }
    Ok(())
}

/// A thread blocked in `Epoll::wait` is woken by a notify from another thread.
#[test]
fn blocking_wait_is_woken() -> io::Result<()> {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        for (what, c, n) in pairs(mode)? {
            let ep = Epoll::new();
            ep.add(&c, Events::IN, 1)?;
            let waiter = util::this_tid();
            let t = std::thread::spawn(move || {
                util::wait_until_blocked(waiter, "Epoll::wait");
                n.write(3).map(|()| n)
            });
            let evs = wait(&ep, LONG)?;
            assert_eq!(evs.len(), 1, "{what} {mode:?}");
            assert!(evs[0].events.contains(Events::IN));
            let _n = t.join().unwrap()?;
            let expect = if mode == Mode::AutoReset { 0 } else { 3 };
            let mut got = 0;
            while let Ok(v) = c.try_read() {
                got += v;
            }
            assert_eq!(got, expect, "{what} {mode:?}");
        }
    }
    Ok(())
}

/// Units a Semaphore consumer holds (a word of 3 gives 3 reads; after the first, the pipe is
/// empty) stay readable to the epoll, at add time and after each read, until the last one.
#[test]
fn semaphore_held_units_are_readable() -> io::Result<()> {
    for (what, c, n) in pairs(Mode::Semaphore)? {
        n.write(3)?;
        assert_eq!(c.try_read()?, 1);
        // Added while holding 2 (the pipe is empty): reported at once.
        let ep = Epoll::new();
        ep.add(&c, Events::IN, 1)?;
        for left in (1..=2).rev() {
            let evs = wait(&ep, LONG)?;
            assert_eq!(evs.len(), 1, "{what}: {left} held, not reported");
            assert_eq!(evs[0].events, Events::IN, "{what}");
            assert_eq!(c.try_read()?, 1, "{what}");
        }
        assert!(wait(&ep, SHORT)?.is_empty(), "{what}: nothing left");
        // Edge-triggered: a word of 2 read once leaves 1 held; no wait sleeps on it.
        ep.modify(&c, Events::IN | Events::ET, 2)?;
        n.write(2)?;
        assert_eq!(wait(&ep, LONG)?.len(), 1, "{what}");
        assert_eq!(c.try_read()?, 1);
        if what == "pipe" {
            // The held bell rang when the read left a unit held: a new edge.
            let evs = wait(&ep, LONG)?;
            assert_eq!(evs.len(), 1, "{what}: held unit, edge-triggered");
        } else {
            // The kernel's rule for an eventfd: a read (2 -> 1) is no new IN edge.
            assert!(wait(&ep, SHORT)?.is_empty(), "{what}");
        }
        assert_eq!(c.try_read()?, 1);
        assert!(wait(&ep, SHORT)?.is_empty(), "{what}");
    }
    Ok(())
}

/// A Counter read stops at `LIMIT`; the rest is held (pipe) and readable to the epoll.
#[test]
fn counter_past_limit_is_readable() -> io::Result<()> {
    let (c, n) = halves::pipe(Mode::Counter)?;
    n.write(LIMIT)?;
    n.write(5)?;
    let ep = Epoll::new();
    ep.add(&c, Events::IN, 1)?;
    assert_eq!(c.try_read()?, LIMIT);
    assert_eq!(wait(&ep, LONG)?.len(), 1, "5 held, not reported");
    assert_eq!(c.try_read()?, 5);
    assert!(wait(&ep, SHORT)?.is_empty());
    Ok(())
}

/// A blocked waiter is woken for held units it could not know about when it went to sleep
/// (another thread's read left units held while the pipe became empty).
#[test]
fn held_units_wake_a_sleeping_waiter() -> io::Result<()> {
    let (c, n) = halves::pipe(Mode::Semaphore)?;
    let c = std::sync::Arc::new(c);
    let ep = Epoll::new();
    ep.add(&*c, Events::IN | Events::ET, 1)?;
    n.write(2)?;
    assert_eq!(wait(&ep, LONG)?.len(), 1);
    let c2 = std::sync::Arc::clone(&c);
    let waiter = util::this_tid();
    let t = std::thread::spawn(move || {
        util::wait_until_blocked(waiter, "Epoll::wait");
        c2.try_read()
    });
    // Sleeps (edge-triggered: the word's edge was delivered); the other thread's read leaves
    // one unit held, which rings the held bell: an edge.
    let evs = wait(&ep, LONG)?;
    assert_eq!(t.join().unwrap()?, 1);
    assert_eq!(evs.len(), 1, "not woken for the held unit");
    assert_eq!(c.try_read()?, 1);
    Ok(())
}

#[test]
fn end_of_file_is_hup_not_a_spin() -> io::Result<()> {
    for mode in [Mode::Counter, Mode::AutoReset] {
        let (c, n) = halves::pipe(mode)?;
        let ep = Epoll::new();
        ep.add(&c, Events::IN, 1)?;
        n.notify()?;
        drop(n);
        let evs = wait(&ep, LONG)?;
        assert_eq!(evs.len(), 1, "{mode:?}");
        assert!(evs[0].events.contains(Events::HUP), "{mode:?}: {evs:?}");
        if mode == Mode::AutoReset {
            // The delivery took the word; HUP stays (level-triggered, as a pipe in epoll).
            assert!(evs[0].events.contains(Events::IN));
            let evs = wait(&ep, SHORT)?;
            assert_eq!(evs.len(), 1);
            assert_eq!(evs[0].events, Events::HUP);
        } else {
            assert_eq!(c.try_read()?, 1);
        }
        assert_eq!(c.try_read().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    }
    Ok(())
}

#[test]
fn notifier_half_reports_out() -> io::Result<()> {
    for (what, c, n) in pairs(Mode::Counter)? {
        let ep = Epoll::new();
        ep.add(&n, Events::OUT, 9)?;
        let evs = wait(&ep, LONG)?;
        assert_eq!(evs.len(), 1, "{what}");
        assert_eq!((evs[0].events, evs[0].data), (Events::OUT, 9), "{what}");
        drop(c);
        if what == "pipe" {
            // No reader left: the kernel's ERR on the write end.
            let evs = wait(&ep, LONG)?;
            assert!(evs[0].events.contains(Events::ERR), "{what}: {evs:?}");
        }
    }
    Ok(())
}

#[test]
fn dropped_halves_leave_their_epolls() -> io::Result<()> {
    for (what, c, n) in pairs(Mode::AutoReset)? {
        let ep = Epoll::new();
        ep.add(&c, Events::IN, 1)?;
        ep.add(&n, Events::OUT, 2)?;
        assert_eq!(ep.len(), 2, "{what}");
        drop(c);
        assert_eq!(ep.len(), 1, "{what}");
        drop(n);
        assert_eq!(ep.len(), 0, "{what}");
    }
    // Handed off as an fd: it leaves too, and the fd is the consumer's own.
    let (c, n) = halves::pipe(Mode::Counter)?;
    let ep = Epoll::new();
    ep.add(&c, Events::IN, 1)?;
    let fd: std::os::fd::OwnedFd = c.into();
    assert_eq!(ep.len(), 0);
    n.write(4)?;
    assert_eq!(
        ConsumerHalf::from_owned_fd(fd, Mode::Counter)?.try_read()?,
        4
    );
    Ok(())
}

/// An epoll holding the consumer, inside another epoll and behind an fd view.
#[test]
fn nested_and_fd_view() -> io::Result<()> {
    for mode in [Mode::Semaphore, Mode::AutoReset] {
        for (what, c, n) in pairs(mode)? {
            let inner = Epoll::new();
            inner.add(&c, Events::IN, 1)?;
            let outer = Epoll::new();
            outer.add(&inner, Events::IN, 2)?;
            let view = inner.fd_view()?;
            let readable = || {
                let mut fds = [rustix::event::PollFd::new(
                    &view,
                    rustix::event::PollFlags::IN,
                )];
                let t = rustix::event::Timespec {
                    tv_sec: 5,
                    tv_nsec: 0,
                };
                rustix::event::poll(&mut fds, Some(&t)).unwrap() == 1
            };
            assert!(wait(&outer, SHORT)?.is_empty(), "{what} {mode:?}");
            let waiter = util::this_tid();
            let t = std::thread::spawn(move || {
                util::wait_until_blocked(waiter, "the outer Epoll::wait");
                n.write(2).map(|()| n)
            });
            let evs = wait(&outer, LONG)?;
            assert_eq!(evs.len(), 1, "{what} {mode:?}: outer not woken");
            assert_eq!(evs[0].data, 2);
            assert!(readable(), "{what} {mode:?}: fd view not readable");
            let _n = t.join().unwrap()?;
            let inner_evs = wait(&inner, LONG)?;
            assert_eq!(inner_evs.len(), 1, "{what} {mode:?}");
            if mode == Mode::Semaphore {
                // Two units; one read leaves one (held, for a pipe): still readable
                // through both layers.
                assert_eq!(c.try_read()?, 1);
                assert_eq!(wait(&outer, LONG)?.len(), 1, "{what}: held unit, outer");
                assert!(readable(), "{what}: held unit, fd view");
                assert_eq!(c.try_read()?, 1);
            }
            // Delivered (AutoReset) or read out: the inner epoll is quiet, and so is the outer.
            assert!(wait(&inner, SHORT)?.is_empty(), "{what} {mode:?}");
            assert!(wait(&outer, SHORT)?.is_empty(), "{what} {mode:?}");
        }
    }
    Ok(())
}

async fn wait_async_cases() -> io::Result<()> {
    for mode in [Mode::Semaphore, Mode::AutoReset] {
        for (what, c, n) in pairs(mode)? {
            let ep = Epoll::new();
            ep.add(&c, Events::IN, 3)?;
            let (tx, rx) = std::sync::mpsc::channel();
            let t = std::thread::spawn(move || {
                rx.recv().unwrap();
                n.write(2).map(|()| n)
            });
            let mut evs = [Event::default(); 4];
            // The write comes once the wait is pending.
            let first = move |pending: bool| {
                assert!(pending, "the wait was ready before the write");
                tx.send(()).unwrap();
            };
            let k = util::reporting_first_poll(ep.wait_async(&mut evs), first).await?;
            assert_eq!(k, 1, "{what} {mode:?}");
            assert_eq!((evs[0].events, evs[0].data), (Events::IN, 3));
            let _n = t.join().unwrap()?;
            if mode == Mode::Semaphore {
                assert_eq!(c.try_read()?, 1);
                // The held unit (pipe) or the count left (eventfd) is ready at once.
                assert_eq!(ep.wait_async(&mut evs).await?, 1, "{what}: held unit");
                assert_eq!(c.try_read()?, 1);
            }
            assert!(wait(&ep, SHORT)?.is_empty(), "{what} {mode:?}");
        }
    }
    Ok(())
}

#[test]
fn wait_async_on_block_on() -> io::Result<()> {
    futures::executor::block_on(wait_async_cases())
}

#[test]
fn wait_async_on_tokio() -> io::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(wait_async_cases())?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(wait_async_cases())
}

/// `BorrowedFd` of a half is still the kernel's plain fd: no delivery hook, so the consumer's
/// `consume` is the delivery (the pre-Source way, kept working).
#[test]
fn borrowed_fd_of_a_half_is_plain() -> io::Result<()> {
    let (c, n) = halves::pipe(Mode::AutoReset)?;
    let ep = Epoll::new();
    ep.add(&c.as_fd(), Events::IN, 1)?;
    n.notify()?;
    assert_eq!(wait(&ep, LONG)?.len(), 1);
    assert_eq!(wait(&ep, SHORT)?.len(), 1, "level-triggered: not consumed");
    assert!(c.consume()?.contains(Events::IN));
    assert!(wait(&ep, SHORT)?.is_empty());
    Ok(())
}

/// One AutoReset consumer in two epolls: each wake is delivered by exactly one of them (the
/// delivery that drained it), as for a `KernelNotifier` in two epolls.
#[test]
fn autoreset_in_two_epolls_is_delivered_once() -> io::Result<()> {
    for (what, c, n) in pairs(Mode::AutoReset)? {
        let (a, b) = (Epoll::new(), Epoll::new());
        a.add(&c, Events::IN, 1)?;
        b.add(&c, Events::IN, 2)?;
        for round in 0..20 {
            n.notify()?;
            n.notify()?;
            let (first, second) = if round % 2 == 0 { (&a, &b) } else { (&b, &a) };
            assert_eq!(wait(first, LONG)?.len(), 1, "{what} round {round}");
            assert!(
                wait(second, SHORT)?.is_empty(),
                "{what} round {round}: twice"
            );
            assert!(wait(first, SHORT)?.is_empty(), "{what} round {round}");
        }
    }
    Ok(())
}
