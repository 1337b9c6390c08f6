//! evfd fds in two more event loops, with no evfd feature needed: the `polling` crate in
//! edge mode, and async-io's `Async<T>` (smol's reactor). Each drains its source until
//! `WouldBlock` after every wake, the edge-triggered contract, and counts every unit.
//!
//! ```sh
//! cargo run --example polling_asyncio
//! ```

use std::io::ErrorKind::WouldBlock;
use std::time::{Duration, Instant};

use async_io::Async;
use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};
use polling::{Event as PEvent, Events as PEvents, PollMode, Poller};

const WRITES: u64 = 10_000;
const BURST: u64 = 250;

/// Write `WRITES` units in bursts, pausing between bursts so the loop sees many edges.
fn writer(f: impl Fn() -> std::io::Result<()> + Send + 'static) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for i in 0..WRITES {
            f().expect("write");
            if i % BURST == BURST - 1 {
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    })
}

/// Drain until `WouldBlock`; the units taken.
fn drain(read: impl Fn() -> std::io::Result<u64>) -> std::io::Result<u64> {
    let mut got = 0;
    loop {
        match read() {
            Ok(n) => got += n,
            Err(e) if e.kind() == WouldBlock => return Ok(got),
            Err(e) => return Err(e),
        }
    }
}

fn with_polling() -> std::io::Result<()> {
    // A Semaphore notifier (one unit per read) through its fd view, and a kernel eventfd.
    let sem = Notifier::builder().mode(Mode::Semaphore).build()?;
    let view = sem.fd_view()?;
    let k = KernelNotifier::new(Mode::Counter)?;
    let kw = k.try_clone()?;
    let poller = Poller::new()?;
    // SAFETY: `view` and `k` outlive their registrations: both are deleted from the poller
    // below, before either is dropped.
    unsafe {
        poller.add_with_mode(&view, PEvent::readable(0), PollMode::Edge)?;
        poller.add_with_mode(&k, PEvent::readable(1), PollMode::Edge)?;
    }
    let s2 = sem.clone();
    let ws = [writer(move || s2.notify()), writer(move || kw.notify())];
    let (mut from_view, mut from_kernel, mut wakes) = (0, 0, 0);
    let mut events = PEvents::new();
    let deadline = Instant::now() + Duration::from_secs(60);
    while from_view < WRITES || from_kernel < WRITES {
        assert!(Instant::now() < deadline, "watchdog");
        events.clear();
        poller.wait(&mut events, Some(Duration::from_millis(100)))?;
        for ev in events.iter() {
            wakes += 1;
            match ev.key {
                0 => from_view += drain(|| sem.try_read())?,
                _ => from_kernel += drain(|| k.try_read())?,
            }
        }
    }
    for w in ws {
        w.join().unwrap();
    }
    poller.delete(&view)?;
    poller.delete(&k)?;
    println!(
        "polling (edge mode): {from_view} units from a Semaphore view (one read each), \
         {from_kernel} from a kernel eventfd, in {wakes} wakes; view doorbell: {:?}",
        view.doorbell_stats()
    );
    assert_eq!((from_view, from_kernel), (WRITES, WRITES));
    Ok(())
}

fn with_async_io() -> std::io::Result<()> {
    // An Epoll over three notifiers, awaited through its fd view on async-io's reactor.
    let ep = Epoll::new();
    let srcs: Vec<Notifier> = (0..3).map(|_| Notifier::new()).collect();
    for (i, s) in srcs.iter().enumerate() {
        ep.add(s, Events::IN | Events::ET, i as u64)?;
    }
    let view = Async::new(ep.fd_view()?)?;
    let s2 = srcs.clone();
    let next = std::sync::atomic::AtomicUsize::new(0);
    let w =
        writer(move || s2[next.fetch_add(1, std::sync::atomic::Ordering::Relaxed) % 3].notify());
    let (units, wakes, harvests) = async_io::block_on(async {
        let mut evs = [Event::default(); 3];
        let (mut units, mut wakes, mut harvests) = (0, 0, 0);
        while units < WRITES {
            view.readable().await?;
            wakes += 1;
            // The epoll's WouldBlock is a wait that returns 0.
            loop {
                let n = ep.wait(&mut evs, Some(Duration::ZERO))?;
                if n == 0 {
                    break;
                }
                harvests += 1;
                for e in &evs[..n] {
                    units += drain(|| srcs[e.data as usize].try_read())?;
                }
            }
        }
        Ok::<_, std::io::Error>((units, wakes, harvests))
    })?;
    w.join().unwrap();
    println!(
        "async-io Async<FdView> of an Epoll: {units} units from 3 notifiers in {wakes} wakes, \
         {harvests} harvests"
    );
    assert_eq!(units, WRITES);
    Ok(())
}

fn main() -> std::io::Result<()> {
    with_polling()?;
    with_async_io()
}
