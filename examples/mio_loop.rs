//! A mio event loop over evfd objects, registered as `mio::event::Source`s (feature `mio`):
//!
//! - an in-memory `Notifier` through its fd view (Counter: `try_read` drains it);
//! - an AutoReset `Notifier` through its fd view, edge-only (`FdView::consume` resets it: no
//!   read of the notifier, and no drain of the view's doorbell);
//! - a `KernelNotifier` (an eventfd another process or the kernel could write);
//! - an `Epoll` over several notifiers through its fd view (`wait` with a zero timeout
//!   harvests it).
//!
//! mio is edge-triggered: each handler drains its source until `WouldBlock` (or its
//! equivalent) before the loop polls again, and every unit written is counted on the way
//! out.
//!
//! ```sh
//! cargo run --example mio_loop --features mio
//! ```

use std::io::ErrorKind::WouldBlock;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events as EvfdEvents, KernelNotifier, Mode, Notifier};
use mio::{Events, Interest, Poll, Token};

const COUNTER: Token = Token(0);
const KICK: Token = Token(1);
const KERNEL: Token = Token(2);
const EPOLL: Token = Token(3);
const WRITES: u64 = 20_000;
const EP_SOURCES: usize = 4;
const BURST: u64 = 500;

fn main() -> std::io::Result<()> {
    let mut poll = Poll::new()?;

    let counter = Notifier::new();
    let mut counter_view = counter.fd_view()?;
    poll.registry()
        .register(&mut counter_view, COUNTER, Interest::READABLE)?;

    let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    let mut kick_view = kick.fd_view()?;
    // Only mio (edge-triggered) watches this fd: edge-only, so no drain at each delivery.
    kick_view.set_edge_only(true)?;
    poll.registry()
        .register(&mut kick_view, KICK, Interest::READABLE)?;

    let mut kernel = KernelNotifier::new(Mode::Counter)?;
    let kernel_writer = kernel.try_clone()?;
    poll.registry()
        .register(&mut kernel, KERNEL, Interest::READABLE)?;

    let ep = Epoll::new();
    let ep_sources: Vec<Notifier> = (0..EP_SOURCES).map(|_| Notifier::new()).collect();
    for (i, n) in ep_sources.iter().enumerate() {
        ep.add(n, EvfdEvents::IN | EvfdEvents::ET, i as u64)?;
    }
    let mut ep_view = ep.fd_view()?;
    poll.registry()
        .register(&mut ep_view, EPOLL, Interest::READABLE)?;

    // Writers, in bursts with pauses so the loop sees many edges: every unit they write
    // must come out of the loop.
    fn writer(f: impl Fn(u64) + Send + 'static) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for i in 0..WRITES {
                f(i);
                if i % BURST == BURST - 1 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    }
    let t0 = Instant::now();
    let writers = vec![
        {
            let n = counter.clone();
            writer(move |_| n.notify().unwrap())
        },
        {
            let n = kick.clone();
            writer(move |_| n.notify().unwrap())
        },
        writer(move |_| kernel_writer.notify().unwrap()),
        {
            let srcs = ep_sources.clone();
            writer(move |i| srcs[(i as usize) % EP_SOURCES].notify().unwrap())
        },
    ];

    let (mut counter_units, mut kernel_units, mut ep_units) = (0u64, 0u64, 0u64);
    let (mut kick_deliveries, mut wakes, mut empty_wakes) = (0u64, 0u64, 0u64);
    let mut events = Events::with_capacity(8);
    let mut evs = [Event::default(); EP_SOURCES];
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let writers_done = writers.iter().all(|w| w.is_finished());
        // Once the writers are done, a last pass must find everything drained.
        let timeout = if writers_done {
            Duration::ZERO
        } else {
            Duration::from_millis(100)
        };
        poll.poll(&mut events, Some(timeout))?;
        assert!(Instant::now() < deadline, "watchdog: the loop is stuck");
        if events.is_empty() && writers_done && kick.count() == 0 && kernel.count()? == 0 {
            // Nothing left and no edge pending: everything written was read (checked below).
            if counter.count() == 0 && ep_sources.iter().all(|n| n.count() == 0) {
                break;
            }
        }
        for e in events.iter() {
            wakes += 1;
            let before = (counter_units, kernel_units, ep_units, kick_deliveries);
            match e.token() {
                COUNTER => loop {
                    match counter.try_read() {
                        Ok(n) => counter_units += n,
                        Err(e) if e.kind() == WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                },
                KICK => {
                    // AutoReset: the delivery resets the count; nothing to read.
                    while kick_view.consume().contains(EvfdEvents::IN) {
                        kick_deliveries += 1;
                    }
                }
                KERNEL => loop {
                    match kernel.try_read() {
                        Ok(n) => kernel_units += n,
                        Err(e) if e.kind() == WouldBlock => break,
                        Err(e) => return Err(e),
                    }
                },
                EPOLL => loop {
                    let got = ep.wait(&mut evs, Some(Duration::ZERO))?;
                    if got == 0 {
                        break; // the epoll's WouldBlock
                    }
                    for ev in &evs[..got] {
                        // ET item: drain its notifier too.
                        while let Ok(n) = ep_sources[ev.data as usize].try_read() {
                            ep_units += n;
                        }
                    }
                },
                other => unreachable!("unknown token {other:?}"),
            }
            if before == (counter_units, kernel_units, ep_units, kick_deliveries) {
                empty_wakes += 1;
            }
        }
    }
    let elapsed = t0.elapsed();
    for w in writers {
        w.join().unwrap();
    }
    // Whatever a last race left behind was drained by the final zero-timeout passes.
    assert_eq!(counter_units, WRITES, "Counter view: every unit read");
    assert_eq!(kernel_units, WRITES, "kernel eventfd: every unit read");
    assert_eq!(ep_units, WRITES, "epoll view: every unit read");
    assert_eq!(
        kick.count(),
        0,
        "AutoReset kick: reset by its last delivery"
    );
    assert!(kick_deliveries >= 1);
    println!(
        "mio loop over 4 evfd sources, {WRITES} writes each (bursts of {BURST}), in {elapsed:?}"
    );
    println!("  Counter notifier view:  {counter_units} units read");
    println!("  KernelNotifier:         {kernel_units} units read");
    println!("  Epoll view ({EP_SOURCES} sources): {ep_units} units read");
    println!("  AutoReset kick view:    {WRITES} kicks coalesced into {kick_deliveries} deliveries (no read)");
    println!("  mio events: {wakes} ({empty_wakes} found nothing left to drain)");
    println!(
        "  counter view doorbell syscalls: {:?} (writes to a readable notifier cost none)",
        counter_view.doorbell_stats()
    );
    let kick_stats = kick_view.doorbell_stats();
    assert_eq!(kick_stats.drains, 0, "an edge-only view never drains");
    println!("  kick view doorbell syscalls: {kick_stats:?} (edge-only: rings, no drains)");
    Ok(())
}
