//! evfd's fds in other crates' event loops: mio (`mio::event::Source`, feature `mio`),
//! `polling` (edge mode) and async-io's `Async<T>`. Each shows the edge-triggered contract:
//! one event per not-readable → readable edge, drain until `WouldBlock`, and then the next
//! write gives a fresh event; each threaded test counts every unit written and read.

use std::io::{self, ErrorKind::WouldBlock};
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod util;

const WATCHDOG: Duration = Duration::from_secs(30);

/// Drain a notifier until `WouldBlock`; the units taken.
fn drain(n: &Notifier) -> u64 {
    let mut got = 0;
    loop {
        match n.try_read() {
            Ok(v) => got += v,
            Err(e) if e.kind() == WouldBlock => return got,
            Err(e) => panic!("try_read: {e}"),
        }
    }
}

/// Write `total` units in bursts of `burst` with short pauses, from a thread.
fn writer(
    total: u64,
    burst: u64,
    f: impl Fn() -> io::Result<()> + Send + 'static,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for i in 0..total {
            f().unwrap();
            if i % burst == burst - 1 {
                std::thread::sleep(Duration::from_micros(200));
            }
        }
    })
}

#[cfg(feature = "mio")]
mod mio_source {
    use super::*;
    use mio::{Interest, Poll, Token};

    fn tokens(poll: &mut Poll, timeout: Duration) -> Vec<(Token, bool, bool)> {
        let mut events = mio::Events::with_capacity(16);
        poll.poll(&mut events, Some(timeout)).unwrap();
        events
            .iter()
            .map(|e| (e.token(), e.is_readable(), e.is_writable()))
            .collect()
    }

    #[test]
    fn notifier_view_one_event_per_edge() {
        let n = Notifier::new();
        let mut view = n.fd_view().unwrap();
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut view, Token(1), Interest::READABLE)
            .unwrap();
        assert!(
            tokens(&mut poll, Duration::ZERO).is_empty(),
            "not readable yet"
        );
        n.write(2).unwrap();
        assert_eq!(
            tokens(&mut poll, Duration::from_secs(5)),
            [(Token(1), true, false)]
        );
        n.write(3).unwrap(); // still readable: coalesced into the edge already reported
        assert!(tokens(&mut poll, Duration::from_millis(20)).is_empty());
        assert_eq!(drain(&n), 5);
        n.notify().unwrap(); // after WouldBlock: a fresh edge
        assert_eq!(
            tokens(&mut poll, Duration::from_secs(5)),
            [(Token(1), true, false)]
        );
        poll.registry().deregister(&mut view).unwrap();
        assert_eq!(drain(&n), 1);
        n.notify().unwrap();
        assert!(
            tokens(&mut poll, Duration::from_millis(20)).is_empty(),
            "deregistered"
        );
    }

    #[test]
    fn view_refuses_writable_interest_and_registers_nothing() {
        let n = Notifier::new();
        let mut view = n.fd_view().unwrap();
        let poll = Poll::new().unwrap();
        for i in [Interest::WRITABLE, Interest::READABLE | Interest::WRITABLE] {
            let e = poll
                .registry()
                .register(&mut view, Token(1), i)
                .unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        }
        // Nothing was registered: a READABLE registration is the first one (no EEXIST).
        poll.registry()
            .register(&mut view, Token(1), Interest::READABLE)
            .unwrap();
        let e = poll
            .registry()
            .reregister(&mut view, Token(1), Interest::WRITABLE)
            .unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn autoreset_view_consume_is_the_drain() {
        let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
        let mut view = kick.fd_view().unwrap();
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut view, Token(3), Interest::READABLE)
            .unwrap();
        kick.notify().unwrap();
        kick.notify().unwrap();
        assert_eq!(tokens(&mut poll, Duration::from_secs(5)).len(), 1);
        assert!(view.consume().contains(Events::IN));
        assert_eq!(kick.count(), 0);
        assert!(!view.consume().contains(Events::IN), "drained");
        kick.notify().unwrap();
        assert_eq!(tokens(&mut poll, Duration::from_secs(5)).len(), 1);
    }

    #[test]
    fn epoll_view_harvest_until_zero() {
        let ep = Epoll::new();
        let a = Notifier::new();
        let b = Notifier::new();
        ep.add(&a, Events::IN | Events::ET, 10).unwrap();
        ep.add(&b, Events::IN | Events::ET, 11).unwrap();
        let mut view = ep.fd_view().unwrap();
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut view, Token(4), Interest::READABLE)
            .unwrap();
        a.notify().unwrap();
        b.notify().unwrap();
        assert_eq!(
            tokens(&mut poll, Duration::from_secs(5)),
            [(Token(4), true, false)]
        );
        let mut evs = [Event::default(); 4];
        let mut seen = Vec::new();
        loop {
            let got = ep.wait(&mut evs, Some(Duration::ZERO)).unwrap();
            if got == 0 {
                break;
            }
            seen.extend(evs[..got].iter().map(|e| e.data));
        }
        seen.sort_unstable();
        assert_eq!(seen, [10, 11]);
        assert!(tokens(&mut poll, Duration::from_millis(20)).is_empty());
        a.notify().unwrap(); // ET item re-armed by the write: a fresh edge on the view
        assert_eq!(tokens(&mut poll, Duration::from_secs(5)).len(), 1);
    }

    #[test]
    fn kernel_notifier_readable_and_writable() {
        let mut k = KernelNotifier::new(Mode::Counter).unwrap();
        let w = k.try_clone().unwrap();
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut k, Token(5), Interest::READABLE | Interest::WRITABLE)
            .unwrap();
        // Writable at once (count 0 < LIMIT), not readable.
        assert_eq!(
            tokens(&mut poll, Duration::from_secs(5)),
            [(Token(5), false, true)]
        );
        w.write(4).unwrap();
        assert_eq!(
            tokens(&mut poll, Duration::from_secs(5)),
            [(Token(5), true, true)]
        );
        // A kernel eventfd re-arms ET on every write, even while readable.
        w.write(1).unwrap();
        assert_eq!(tokens(&mut poll, Duration::from_secs(5)).len(), 1);
        assert_eq!(k.try_read().unwrap(), 5);
        assert_eq!(k.try_read().unwrap_err().kind(), WouldBlock);
        poll.registry().deregister(&mut k).unwrap();
        w.write(1).unwrap();
        assert!(tokens(&mut poll, Duration::from_millis(20)).is_empty());
    }

    #[test]
    fn threads_every_unit_through_mio() {
        const N: u64 = 20_000;
        let n = Notifier::new();
        let mut view = n.fd_view().unwrap();
        let mut k = KernelNotifier::new(Mode::Counter).unwrap();
        let kw = k.try_clone().unwrap();
        let mut poll = Poll::new().unwrap();
        poll.registry()
            .register(&mut view, Token(0), Interest::READABLE)
            .unwrap();
        poll.registry()
            .register(&mut k, Token(1), Interest::READABLE)
            .unwrap();
        let n2 = n.clone();
        let ws = [
            writer(N, 100, move || n2.notify()),
            writer(N, 100, move || kw.notify()),
        ];
        let (mut from_view, mut from_kernel) = (0, 0);
        let deadline = Instant::now() + WATCHDOG;
        while from_view < N || from_kernel < N {
            assert!(
                Instant::now() < deadline,
                "watchdog: {from_view} {from_kernel}"
            );
            for (t, _, _) in tokens(&mut poll, Duration::from_millis(100)) {
                match t {
                    Token(0) => from_view += drain(&n),
                    _ => loop {
                        match k.try_read() {
                            Ok(v) => from_kernel += v,
                            Err(e) if e.kind() == WouldBlock => break,
                            Err(e) => panic!("{e}"),
                        }
                    },
                }
            }
        }
        for w in ws {
            w.join().unwrap();
        }
        assert_eq!((from_view, from_kernel), (N, N));
        assert_eq!(n.count(), 0);
    }
}

mod polling_crate {
    use super::*;
    use polling::{Event as PEvent, Events as PEvents, PollMode, Poller};

    #[test]
    fn edge_mode_counts_every_unit() {
        const N: u64 = 20_000;
        let n = Notifier::builder().mode(Mode::Semaphore).build().unwrap();
        let view = n.fd_view().unwrap();
        let poller = Poller::new().unwrap();
        assert!(poller.supports_edge());
        // SAFETY: `view` outlives its registration: it is deleted from the poller below,
        // before either is dropped.
        unsafe { poller.add_with_mode(&view, PEvent::readable(7), PollMode::Edge) }.unwrap();
        let n2 = n.clone();
        let w = writer(N, 100, move || n2.notify());
        let mut events = PEvents::new();
        let (mut got, mut wakes) = (0, 0);
        let deadline = Instant::now() + WATCHDOG;
        while got < N {
            assert!(Instant::now() < deadline, "watchdog: {got}");
            events.clear();
            poller
                .wait(&mut events, Some(Duration::from_millis(100)))
                .unwrap();
            for ev in events.iter() {
                assert_eq!(ev.key, 7);
                wakes += 1;
                got += drain(&n); // Semaphore: one unit per read, until WouldBlock
            }
        }
        w.join().unwrap();
        assert_eq!(got, N);
        assert!(wakes >= 1);
        // Drained: no event is pending, and the next write gives one.
        events.clear();
        poller.wait(&mut events, Some(Duration::ZERO)).unwrap();
        assert!(events.is_empty());
        n.notify().unwrap();
        poller
            .wait(&mut events, Some(Duration::from_secs(5)))
            .unwrap();
        assert_eq!(events.len(), 1);
        poller.delete(&view).unwrap();
    }
}

mod async_io_crate {
    use super::*;
    use async_io::{Async, Timer};
    use futures::future::{select, Either};

    fn with_watchdog<T>(f: impl std::future::Future<Output = T>) -> T {
        async_io::block_on(async {
            match select(Box::pin(f), Timer::after(WATCHDOG)).await {
                Either::Left((v, _)) => v,
                Either::Right(_) => panic!("watchdog"),
            }
        })
    }

    #[test]
    fn async_view_counts_every_unit() {
        const N: u64 = 20_000;
        let n = Notifier::new();
        let a = Async::new(n.fd_view().unwrap()).unwrap();
        let n2 = n.clone();
        let w = writer(N, 100, move || n2.notify());
        let got = with_watchdog(async {
            let mut got = 0;
            while got < N {
                a.readable().await.unwrap();
                got += drain(&n);
            }
            got
        });
        w.join().unwrap();
        assert_eq!(got, N);
    }

    #[test]
    fn async_epoll_view_and_kernel_notifier() {
        const N: u64 = 5_000;
        let ep = Epoll::new();
        let srcs: Vec<Notifier> = (0..3).map(|_| Notifier::new()).collect();
        for (i, s) in srcs.iter().enumerate() {
            ep.add(s, Events::IN | Events::ET, i as u64).unwrap();
        }
        let view = Async::new(ep.fd_view().unwrap()).unwrap();
        let k = Async::new(KernelNotifier::new(Mode::Counter).unwrap()).unwrap();
        let kw = k.get_ref().try_clone().unwrap();
        let s2 = srcs.clone();
        let i = std::sync::atomic::AtomicUsize::new(0);
        let w1 = writer(N, 50, move || {
            s2[i.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3].notify()
        });
        let w2 = writer(N, 50, move || kw.notify());
        let (from_ep, from_k) = with_watchdog(async {
            let mut evs = [Event::default(); 4];
            let (mut from_ep, mut from_k) = (0, 0);
            while from_ep < N {
                view.readable().await.unwrap();
                loop {
                    let got = ep.wait(&mut evs, Some(Duration::ZERO)).unwrap();
                    if got == 0 {
                        break;
                    }
                    for e in &evs[..got] {
                        from_ep += drain(&srcs[e.data as usize]);
                    }
                }
            }
            while from_k < N {
                from_k += k.read_with(|k| k.try_read()).await.unwrap();
            }
            (from_ep, from_k)
        });
        w1.join().unwrap();
        w2.join().unwrap();
        assert_eq!((from_ep, from_k), (N, N));
    }
}

#[cfg(feature = "tokio")]
mod tokio_reactor {
    use super::*;
    use evfd::tokio::AsyncEpollFd;
    use evfd::LIMIT;
    use tokio::io::Interest;

    async fn watchdog<T>(f: impl std::future::Future<Output = T>) -> T {
        tokio::time::timeout(WATCHDOG, f).await.expect("watchdog")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn async_epoll_counts_every_unit() {
        const N: u64 = 20_000;
        let ep = Epoll::new();
        let srcs: Vec<Notifier> = (0..4).map(|_| Notifier::new()).collect();
        for (i, s) in srcs.iter().enumerate() {
            // Two level-triggered, two edge-triggered items.
            let et = if i % 2 == 0 {
                Events::ET
            } else {
                Events::empty()
            };
            ep.add(s, Events::IN | et, i as u64).unwrap();
        }
        let aep = AsyncEpollFd::new(&ep).unwrap();
        let s2 = srcs.clone();
        let i = std::sync::atomic::AtomicUsize::new(0);
        let w = writer(N, 100, move || {
            s2[i.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 4].notify()
        });
        let (got, deliveries) = watchdog(async {
            let mut evs = [Event::default(); 4];
            let (mut got, mut deliveries) = (0, 0);
            while got < N {
                let n = aep.wait(&mut evs).await.unwrap();
                assert!(n > 0, "wait returns events, never 0");
                for e in &evs[..n] {
                    deliveries += 1;
                    got += drain(&srcs[e.data as usize]);
                }
            }
            (got, deliveries)
        })
        .await;
        w.join().unwrap();
        assert_eq!(got, N);
        assert!(deliveries >= 1);
        assert!(srcs.iter().all(|s| s.count() == 0));
    }

    #[tokio::test(flavor = "current_thread")]
    async fn async_epoll_wait_is_cancel_safe() {
        let ep = Epoll::new();
        let kick = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
        ep.add(&kick, Events::IN, 3).unwrap();
        let aep = AsyncEpollFd::new(&ep).unwrap();
        let mut evs = [Event::default(); 2];
        {
            let mut fut = std::pin::pin!(aep.wait(&mut evs));
            assert!(futures::poll!(fut.as_mut()).is_pending());
        } // dropped while pending
        kick.notify().unwrap();
        // Nothing was delivered by the dropped future: the kick is still counted.
        assert_eq!(kick.count(), 1);
        let n = watchdog(aep.wait(&mut evs)).await.unwrap();
        assert_eq!(
            &evs[..n],
            &[Event {
                events: Events::IN,
                data: 3
            }]
        );
        assert_eq!(kick.count(), 0, "delivered: AutoReset reset it");
        assert_eq!(
            aep.wait(&mut []).await.unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
    }

    #[tokio::test(flavor = "current_thread")]
    async fn view_and_kernel_into_async_fd() {
        const N: u64 = 5_000;
        let n = Notifier::builder().mode(Mode::Semaphore).build().unwrap();
        let afd = n.fd_view().unwrap().into_async_fd().unwrap();
        let n2 = n.clone();
        let w = writer(N, 100, move || n2.notify());
        let mut got = 0;
        while got < N {
            got += watchdog(afd.async_io(Interest::READABLE, |_| n.try_read()))
                .await
                .unwrap();
        }
        w.join().unwrap();
        assert_eq!(got, N);

        let k = KernelNotifier::new(Mode::Counter).unwrap();
        k.write(LIMIT).unwrap();
        let reader = k.try_clone().unwrap();
        let afd = k.into_async_fd().unwrap();
        // Full: writable only after the thread's read makes room (once the write is pending).
        let write = afd.async_io(Interest::WRITABLE, |k| k.try_write(1));
        let (w, read) = watchdog(util::once_pending(write, move || reader.read().unwrap())).await;
        w.unwrap();
        assert_eq!(read, LIMIT);
        assert_eq!(afd.get_ref().try_read().unwrap(), 1);
    }
}

#[cfg(feature = "tokio")]
mod tokio_reactor_kernel_sources {
    use super::*;
    use evfd::tokio::AsyncEpollFd;
    use std::os::fd::AsFd;

    #[tokio::test(flavor = "current_thread")]
    async fn async_epoll_is_woken_by_kernel_fd_sources() {
        let ep = Epoll::new();
        let mem = Notifier::new();
        ep.add(&mem, Events::IN, 1).unwrap();
        // Made before any kernel fd is added: it watches the kernel side anyway.
        let aep = AsyncEpollFd::new(&ep).unwrap();
        let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
        ep.add(&kick, Events::IN, 2).unwrap();
        let (rd, wr) = rustix::pipe::pipe().unwrap();
        ep.add(&rd.as_fd(), Events::IN, 3).unwrap();

        let writer = kick.try_clone().unwrap();
        let mut evs = [Event::default(); 4];
        // Written from outside evfd's in-memory paths, once the wait is pending.
        let wait = util::once_pending(aep.wait(&mut evs), move || writer.notify().unwrap());
        let n = tokio::time::timeout(WATCHDOG, wait)
            .await
            .expect("watchdog: a kernel-fd source must wake a pending wait")
            .0
            .unwrap();
        assert_eq!(
            &evs[..n],
            &[Event {
                events: Events::IN,
                data: 2
            }]
        );
        assert_eq!(
            kick.count().unwrap(),
            0,
            "AutoReset kernel kick: read by the delivery"
        );

        let wait = util::once_pending(aep.wait(&mut evs), move || {
            rustix::io::write(&wr, b"x").unwrap();
            wr
        });
        let (n, _wr) = tokio::time::timeout(WATCHDOG, wait)
            .await
            .expect("watchdog: a pipe source must wake a pending wait");
        let n = n.unwrap();
        assert_eq!(
            &evs[..n],
            &[Event {
                events: Events::IN,
                data: 3
            }]
        );
        // Level-triggered: still readable until read; read it, then the next wait sleeps.
        let mut b = [0u8; 1];
        rustix::io::read(&rd, &mut b).unwrap();
        mem.notify().unwrap();
        let n = tokio::time::timeout(WATCHDOG, aep.wait(&mut evs))
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            &evs[..n],
            &[Event {
                events: Events::IN,
                data: 1
            }]
        );
        ep.delete(&rd.as_fd()).unwrap();
    }
}
