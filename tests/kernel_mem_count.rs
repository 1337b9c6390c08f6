//! The count of a private AutoReset `KernelNotifier` kept in memory (docs/handoff.md, "The
//! count in memory"): every face reads the same count as the kernel would hold, the first
//! lend, a clone, the fd given away and a fork put it into the kernel, and no unit written
//! is lost across a flush that races the writers.

use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

mod fork_util;
use fork_util::in_child_of;
mod mem_util;
use mem_util::kernel_count;
mod util;
use util::{reporting_first_poll, this_tid, wait_until_blocked, wait_until_blocked_in};

fn raw_read(fd: impl AsFd) -> Option<u64> {
    let mut b = [0u8; 8];
    match rustix::io::read(fd, &mut b) {
        Ok(8) => Some(u64::from_ne_bytes(b)),
        Err(rustix::io::Errno::AGAIN) => None,
        r => panic!("eventfd read: {r:?}"),
    }
}

fn kick() -> KernelNotifier {
    KernelNotifier::new(Mode::AutoReset).unwrap()
}

#[test]
fn memory_keeps_the_count_until_the_first_lend() {
    let k = kick();
    k.write(5).unwrap();
    assert_eq!(kernel_count(&k), 1, "the base count; the 5 in memory");
    assert_eq!(k.count().unwrap(), 5);
    let _ = k.as_fd();
    assert_eq!(kernel_count(&k), 5, "flushed at the lend");
    // Counter mode keeps its count in the kernel.
    let c = KernelNotifier::new(Mode::Counter).unwrap();
    c.write(5).unwrap();
    assert_eq!(kernel_count(&c), 5);
}

#[test]
fn reads_and_writes_agree_with_the_kernel_rules() {
    let k = kick();
    assert_eq!(
        k.try_read().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    assert_eq!(k.count().unwrap(), 0);
    assert_eq!(k.poll(Events::IN | Events::OUT), Events::OUT);
    k.write(2).unwrap();
    k.try_write(3).unwrap();
    assert_eq!(k.count().unwrap(), 5);
    assert_eq!(k.poll(Events::IN | Events::OUT), Events::IN | Events::OUT);
    assert!(k.consume().unwrap().contains(Events::IN));
    assert!(!k.consume().unwrap().contains(Events::IN));
    k.try_write(evfd::LIMIT).unwrap();
    assert_eq!(
        k.try_write(1).unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock
    );
    assert_eq!(k.try_read().unwrap(), evfd::LIMIT);
    assert_eq!(
        k.try_write(u64::MAX).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
}

#[test]
fn the_first_lend_puts_the_count_in_the_kernel() {
    for n in [0u64, 1, 7, evfd::LIMIT] {
        let k = kick();
        if n != 0 {
            k.write(n).unwrap();
        }
        let fd = k.as_fd();
        assert_eq!(raw_read(fd), (n != 0).then_some(n), "count {n}");
        assert_eq!(raw_read(fd), None);
        rustix::io::write(fd, &4u64.to_ne_bytes()).unwrap();
        assert_eq!(k.try_read().unwrap(), 4);
    }
}

#[test]
fn an_initial_count_and_the_fd_given_away() {
    let k = KernelNotifier::builder()
        .mode(Mode::AutoReset)
        .initial(1 << 40)
        .build()
        .unwrap();
    k.write(1).unwrap();
    let fd: OwnedFd = k.into();
    assert_eq!(raw_read(&fd), Some((1 << 40) + 1));
    let k = kick();
    let fd = k.into_blocking_fd().unwrap();
    rustix::io::write(&fd, &3u64.to_ne_bytes()).unwrap();
    assert_eq!(raw_read(&fd), Some(3));
}

#[test]
fn a_clone_shares_the_count() {
    let a = kick();
    a.write(5).unwrap();
    let b = a.try_clone().unwrap();
    b.write(1).unwrap();
    assert_eq!(a.try_read().unwrap(), 6);
}

/// Fork, and in the child read `want` through evfd.
fn child_reads(k: &KernelNotifier, want: u64) {
    // SAFETY: the child only reads through evfd and `_exit`s.
    in_child_of(
        "child reads",
        || unsafe { libc::fork() },
        || match k.try_read() {
            Ok(got) if got == want => Ok(()),
            other => Err(format!("child read {other:?}, wanted {want}")),
        },
    );
}

#[test]
fn a_fork_child_sees_the_count_lent_before() {
    let k = kick();
    k.write(9).unwrap();
    let _ = k.as_raw_fd(); // the lend flushes
    child_reads(&k, 9);
    assert_eq!(
        k.try_read().unwrap_err().kind(),
        std::io::ErrorKind::WouldBlock,
        "the child's read took it: one count for both"
    );
    k.write(2).unwrap();
    assert_eq!(k.try_read().unwrap(), 2);
}

#[test]
fn a_fork_child_sees_the_count_flushed_by_the_fork() {
    let k = kick();
    k.write(3).unwrap();
    child_reads(&k, 3);
    assert_eq!(k.count().unwrap(), 0);
}

/// The writer of a ping-pong: for each round, once the waiter has announced it (`turn`),
/// a delay that sweeps the waiter's path round after round (`round % 512` spins), then a
/// write of `n(round)`.
fn sweeping_writer(
    k: &Arc<KernelNotifier>,
    turn: &Arc<AtomicU64>,
    rounds: u64,
    n: impl Fn(u64) -> u64 + Send + 'static,
) -> std::thread::JoinHandle<()> {
    let (k, turn) = (Arc::clone(k), Arc::clone(turn));
    std::thread::spawn(move || {
        for round in 1..=rounds {
            while turn.load(SeqCst) < round {
                std::hint::spin_loop();
            }
            for _ in 0..round % 512 {
                std::hint::spin_loop();
            }
            k.write(n(round)).unwrap();
        }
    })
}

#[test]
fn blocking_read_waits_for_a_write() {
    let k = Arc::new(kick());
    let k2 = Arc::clone(&k);
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(this_tid()).unwrap();
        k2.read()
    });
    wait_until_blocked(rx.recv().unwrap(), "the blocking read");
    assert!(!t.is_finished(), "the read returned on an empty count");
    k.write(4).unwrap();
    assert_eq!(t.join().unwrap().unwrap(), 4);
    let t0 = std::time::Instant::now();
    assert_eq!(
        k.read_timeout(Duration::from_millis(5)).unwrap_err().kind(),
        std::io::ErrorKind::TimedOut
    );
    assert!(t0.elapsed() >= Duration::from_millis(5), "it waited");
    // The waits slept on the count's own futex: memory keeps the count still.
    k.write(2).unwrap();
    assert_eq!(kernel_count(&k), 1, "the base; the 2 in memory");
    assert_eq!(k.read().unwrap(), 2);
}

/// Blocking reads and writers ping-pong with the count in memory, every unit counted; the
/// kernel's count stays the base throughout (no flush).
#[test]
fn blocking_reads_keep_the_count_in_memory() {
    const ROUNDS: u64 = 20_000;
    let k = Arc::new(kick());
    let turn = Arc::new(AtomicU64::new(0));
    let writer = sweeping_writer(&k, &turn, ROUNDS, |round| 1 + round % 3);
    let mut read = 0;
    let mut written = 0;
    for round in 1..=ROUNDS {
        written += 1 + round % 3;
        turn.store(round, SeqCst);
        read += k
            .read_timeout(Duration::from_secs(5))
            .unwrap_or_else(|e| panic!("round {round}: {e}"));
        // A read may find an earlier round's units only if it did not take them then.
        assert_eq!(read, written, "round {round}: every unit read once");
    }
    writer.join().unwrap();
    assert_eq!(kernel_count(&k), 1, "never flushed");
}

/// A blocking read asleep on an empty count when another thread lends the fd (a flush): it
/// is woken, and waits on in the kernel, where the next write reaches it.
#[test]
fn a_blocking_read_follows_the_count_into_the_kernel() {
    let k = Arc::new(kick());
    let k2 = Arc::clone(&k);
    let (tx, rx) = std::sync::mpsc::channel();
    let t = std::thread::spawn(move || {
        tx.send(this_tid()).unwrap();
        k2.read_timeout(Duration::from_secs(10))
    });
    let tid = rx.recv().unwrap();
    // On the count's futex (or already in the kernel, if another test's fork flushed it).
    wait_until_blocked(tid, "the read, on the count in memory");
    let fd = k.as_fd().try_clone_to_owned().unwrap(); // the first lend flushes
    let in_kernel: Vec<_> = util::blocking_syscalls()
        .iter()
        .copied()
        .filter(|&nr| nr != libc::SYS_futex)
        .collect();
    wait_until_blocked_in(tid, &in_kernel, "the read, moved into the kernel");
    assert!(!t.is_finished(), "still waiting, now in the kernel");
    // A peer's write, straight to the kernel's count.
    rustix::io::write(&fd, &5u64.to_ne_bytes()).unwrap();
    assert_eq!(t.join().unwrap().unwrap(), 5);
    assert_eq!(kernel_count(&k), 0);
}

#[test]
fn an_epoll_hears_every_write_and_delivers_once() {
    for et in [false, true] {
        let k = kick();
        let ep = Epoll::new();
        let ev = if et {
            Events::IN | Events::ET
        } else {
            Events::IN
        };
        ep.add(&k, ev, 7).unwrap();
        let mut buf = [Event::default(); 4];
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 0);
        for round in 0..100 {
            k.write(1 + round % 3).unwrap();
            assert_eq!(
                ep.wait(&mut buf, Some(Duration::from_secs(5))).unwrap(),
                1,
                "round {round}"
            );
            assert_eq!(buf[0].data, 7);
            assert_eq!(
                ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(),
                0,
                "round {round}: reset"
            );
        }
    }
}

#[test]
fn an_epoll_wakes_a_blocked_waiter() {
    let k = Arc::new(kick());
    let ep = Arc::new(Epoll::new());
    ep.add(&*k, Events::IN, 1).unwrap();
    for _ in 0..200 {
        let ep2 = Arc::clone(&ep);
        let t = std::thread::spawn(move || {
            let mut buf = [Event::default(); 4];
            ep2.wait(&mut buf, Some(Duration::from_secs(5))).unwrap()
        });
        std::thread::sleep(Duration::from_micros(200));
        k.notify().unwrap();
        assert_eq!(t.join().unwrap(), 1);
    }
}

/// The waits are woken asleep: the write comes once the future is pending (its first poll
/// said so) and `block_on`'s thread sleeps.
#[test]
fn async_waits_on_any_executor() {
    let k = Arc::new(kick());
    let executor = this_tid();
    let later = |write: Box<dyn FnOnce() + Send>| {
        let (tx, rx) = std::sync::mpsc::channel();
        let t = std::thread::spawn(move || {
            rx.recv().unwrap();
            wait_until_blocked(executor, "block_on's thread");
            write();
        });
        let first = move |pending: bool| {
            assert!(pending, "the wait was ready before the write");
            tx.send(()).unwrap();
        };
        (t, first)
    };
    let k2 = Arc::clone(&k);
    let (t, first) = later(Box::new(move || k2.write(3).unwrap()));
    assert_eq!(
        futures::executor::block_on(reporting_first_poll(k.read_async(), first)).unwrap(),
        3
    );
    t.join().unwrap();
    let ep = Epoll::new();
    ep.add(&*k, Events::IN, 1).unwrap();
    let k2 = Arc::clone(&k);
    let (t, first) = later(Box::new(move || k2.write(1).unwrap()));
    let mut buf = [Event::default(); 4];
    assert_eq!(
        futures::executor::block_on(reporting_first_poll(ep.wait_async(&mut buf), first)).unwrap(),
        1
    );
    t.join().unwrap();
}

/// A write that lands while a wait's harvest collects (between the collect taking the
/// eventfd's edge-triggered item off the kernel epoll and its read of the count in memory)
/// is delivered: the writer spins until the waiter has announced its wait and then for a
/// delay that sweeps the harvest, so its write lands inside the collect in many rounds.
/// Blocking waits (a round that hears nothing for 5 s lost its write) and async waits on
/// `block_on` (the watcher thread; a round that hears nothing for 10 s lost its write). No
/// limit on the total: on a loaded machine the 30 000 rounds take longer, and lose nothing.
#[test]
fn a_write_racing_the_collect_is_delivered() {
    const ROUNDS: u64 = 30_000;
    for blocking in [true, false] {
        let k = Arc::new(kick());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 1).unwrap();
        let turn = Arc::new(AtomicU64::new(0));
        let writer = sweeping_writer(&k, &turn, ROUNDS, |_| 1);
        let heard = Arc::new(AtomicU64::new(0));
        let waiter = {
            let (ep, heard) = (Arc::clone(&ep), Arc::clone(&heard));
            std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                for round in 1..=ROUNDS {
                    turn.store(round, SeqCst);
                    let n = if blocking {
                        ep.wait(&mut buf, Some(Duration::from_secs(5))).unwrap()
                    } else {
                        futures::executor::block_on(ep.wait_async(&mut buf)).unwrap()
                    };
                    assert_eq!(
                        (n, buf[0].data),
                        (1, 1),
                        "round {round}: the write is heard"
                    );
                    heard.store(round, SeqCst);
                }
            })
        };
        // A lost write stalls the waiter (the async one for good); a slow machine only
        // slows it: fail on a round that hears nothing for 10 s, not on the total time.
        let mut last = (0, std::time::Instant::now());
        while !waiter.is_finished() {
            std::thread::sleep(Duration::from_millis(50));
            let now = heard.load(SeqCst);
            if now != last.0 {
                last = (now, std::time::Instant::now());
            }
            assert!(
                last.1.elapsed() < Duration::from_secs(10),
                "blocking {blocking}: round {} heard nothing for 10 s (a write was lost)",
                now + 1
            );
        }
        waiter.join().unwrap();
        writer.join().unwrap();
        assert_eq!(k.count().unwrap(), 0, "each delivery reset it");
    }
}

/// Writers add units while a lend flushes the count under them: every unit is read once.
#[test]
fn no_unit_is_lost_across_a_racing_lend() {
    for round in 0..50 {
        let k = Arc::new(kick());
        let stop = Arc::new(AtomicBool::new(false));
        let written = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = (0..2)
            .map(|_| {
                let (k, stop, written) = (Arc::clone(&k), Arc::clone(&stop), Arc::clone(&written));
                std::thread::spawn(move || {
                    while !stop.load(SeqCst) {
                        k.write(1).unwrap();
                        written.fetch_add(1, SeqCst);
                    }
                })
            })
            .collect();
        let mut read = 0;
        for i in 0..2000 {
            if i == 1000 + round * 7 {
                let _ = k.as_fd();
            }
            if let Ok(c) = k.try_read() {
                read += c;
            }
        }
        stop.store(true, SeqCst);
        for w in writers {
            w.join().unwrap();
        }
        while let Ok(c) = k.try_read() {
            read += c;
        }
        assert_eq!(read, written.load(SeqCst), "round {round}");
    }
}

/// Counts the polls of the future it wraps.
struct Polls<'a, F>(std::pin::Pin<Box<F>>, &'a AtomicU64);

impl<F: std::future::Future> std::future::Future for Polls<'_, F> {
    type Output = F::Output;
    fn poll(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<F::Output> {
        self.1.fetch_add(1, SeqCst);
        self.0.as_mut().poll(cx)
    }
}

/// After a delivery that took the count without the kernel epoll (the item it queued stays
/// there until an `epoll_wait` takes it), an async wait that nothing wakes stays asleep:
/// on an executor other than tokio's it is woken through the watcher, which arms on the
/// kernel epoll's readiness.
#[test]
fn an_idle_async_wait_stays_asleep() {
    let k = kick();
    let ep = Epoll::new();
    ep.add(&k, Events::IN, 1).unwrap();
    let mut buf = [Event::default(); 4];
    for _ in 0..3 {
        k.notify().unwrap();
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
    }
    let stop = Arc::new(evfd::Notifier::new());
    let polls = AtomicU64::new(0);
    let stopper = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            stop.notify().unwrap();
        })
    };
    let got = futures::executor::block_on(async {
        let wait = Polls(Box::pin(ep.wait_async(&mut buf)), &polls);
        let stopped = Box::pin(stop.read_async());
        match futures::future::select(wait, stopped).await {
            futures::future::Either::Left((r, _)) => Some(r.unwrap()),
            futures::future::Either::Right(_) => None,
        }
    });
    stopper.join().unwrap();
    assert_eq!(got, None, "no event while nothing was written");
    let n = polls.load(SeqCst);
    assert!(n <= 4, "the idle wait was polled {n} times in 100 ms");
    // And it still hears the next write.
    k.notify().unwrap();
    let r = futures::executor::block_on(ep.wait_async(&mut buf)).unwrap();
    assert_eq!(r, 1);
}

/// An `Epoll` holding the notifier, seen through its fd view by `poll(2)` (level): the same
/// readiness, step by step, with the count in memory as with the count in the kernel.
#[test]
fn an_epoll_fd_view_shows_what_the_kernel_count_shows() {
    assert_eq!(view_steps(true), view_steps(false));
}

fn view_steps(mem: bool) -> Vec<(bool, usize, usize)> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let k = KernelNotifier::builder()
        .mode(Mode::AutoReset)
        .cloexec(mem)
        .build()
        .unwrap();
    let ep = Epoll::new();
    ep.add(&k, Events::IN, 1).unwrap();
    let view = ep.fd_view().unwrap();
    let readable = |ms: i64| {
        let mut fds = [PollFd::new(&view, PollFlags::IN)];
        let t = Timespec {
            tv_sec: ms / 1000,
            tv_nsec: (ms % 1000) * 1_000_000,
        };
        poll(&mut fds, Some(&t)).unwrap() == 1
    };
    let mut buf = [Event::default(); 4];
    let mut steps = vec![(readable(0), 0, 0)];
    for _ in 0..20 {
        k.notify().unwrap();
        let shown = readable(1000);
        let first = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
        let again = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
        steps.push((shown, first, again));
    }
    assert!(steps[1..].iter().all(|&s| s == (true, 1, 0)), "{steps:?}");
    steps
}

/// Whether `view` polls readable within `ms`.
fn view_readable(view: &impl AsFd, ms: i64) -> bool {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let mut fds = [PollFd::new(view, PollFlags::IN)];
    let t = Timespec {
        tv_sec: ms / 1000,
        tv_nsec: (ms % 1000) * 1_000_000,
    };
    poll(&mut fds, Some(&t)).unwrap() == 1
}

/// The add of a notifier whose count memory keeps queues the eventfd's edge-triggered item
/// on the kernel epoll (the kernel polls the fd, readable at its base count), which no write
/// made: neither the watcher (already running for another epoll's view, so that it would
/// fire at once) nor the epoll's fd view reports it, whether the view came before the add
/// or after, and the first write is then shown.
#[test]
fn the_add_shows_no_write_that_never_came() {
    // Keeps the watcher thread running and quick to fire.
    let other = Epoll::new();
    let other_k = kick();
    other.add(&other_k, Events::IN, 0).unwrap();
    let _other_view = other.fd_view().unwrap();
    for view_first in [false, true, false, true] {
        for (i, k) in [
            kick(),
            KernelNotifier::builder().cloexec(false).build().unwrap(),
        ]
        .into_iter()
        .enumerate()
        {
            let ep = Epoll::new();
            let (view, ()) = if view_first {
                let v = ep.fd_view().unwrap();
                (v, ep.add(&k, Events::IN, 1).unwrap())
            } else {
                ep.add(&k, Events::IN, 1).unwrap();
                (ep.fd_view().unwrap(), ())
            };
            let what = format!("view first {view_first}, memory {}", i == 0);
            assert!(
                !view_readable(&view, 50),
                "{what}: readable before any write"
            );
            let mut buf = [Event::default(); 4];
            assert_eq!(
                ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(),
                0,
                "{what}"
            );
            k.notify().unwrap();
            assert!(view_readable(&view, 5000), "{what}: the write not shown");
            assert_eq!(
                ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(),
                1,
                "{what}"
            );
        }
    }
}

/// A thread asleep in the epoll's direct sleep (in `epoll_wait` on its kernel epoll, which
/// holds one notifier whose count memory keeps) is rung for an in-memory source's write;
/// another thread's harvest takes that event, and with it, out of the kernel epoll, the
/// ring's edge. The sleeper is rung again for it, re-registers, and hears the next write:
/// the ring, dropped, would leave it asleep with its entry off the waiters.
#[test]
fn a_harvest_that_takes_the_direct_sleepers_ring_rings_again() {
    use std::sync::mpsc;
    let ep = Arc::new(Epoll::new());
    let k = kick();
    ep.add(&k, Events::IN, 1).unwrap();
    let n = evfd::Notifier::builder()
        .mode(Mode::AutoReset)
        .build()
        .unwrap();
    ep.add(&n, Events::IN, 2).unwrap();
    let (tx, rx) = mpsc::channel();
    let stop = Arc::new(AtomicBool::new(false));
    let waiter = {
        let (ep, stop) = (Arc::clone(&ep), Arc::clone(&stop));
        std::thread::spawn(move || {
            let mut buf = [Event::default(); 4];
            while !stop.load(SeqCst) {
                let got = ep.wait(&mut buf, None).unwrap();
                assert_eq!((got, buf[0].data), (1, 2));
                tx.send(()).unwrap();
            }
        })
    };
    let mut buf = [Event::default(); 4];
    let mut stolen = 0;
    for round in 0..4000u32 {
        // Let the waiter fall asleep (most rounds), then a write and a racing harvest.
        if round % 4 == 0 {
            std::thread::sleep(Duration::from_micros(200));
        }
        n.notify().unwrap();
        for _ in 0..(round % 64) * 8 {
            std::hint::spin_loop();
        }
        if ep.wait(&mut buf, Some(Duration::ZERO)).unwrap() == 1 {
            assert_eq!(buf[0].data, 2);
            stolen += 1;
        } else {
            rx.recv_timeout(Duration::from_secs(5))
                .unwrap_or_else(|_| panic!("round {round}: the first write not heard"));
        }
        // The waiter sleeps with no timeout: a lost ring leaves it asleep for good.
        n.notify().unwrap();
        rx.recv_timeout(Duration::from_secs(5)).unwrap_or_else(|_| {
            panic!("round {round}: the second write not heard (the waiter slept through its ring)")
        });
    }
    stop.store(true, SeqCst);
    n.notify().unwrap();
    waiter.join().unwrap();
    assert!(stolen > 0);
}
