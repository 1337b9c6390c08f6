//! A raw kernel-epoll event loop woken from other threads through a fd view, counting loop
//! wakes against doorbell syscalls — and the same loop on a plain kernel eventfd, for scale.
//!
//! ```sh
//! cargo run --release --example loop_wakeup
//! ```
//!
//! Three producer threads send bursts of `notify()` with pauses in between, so the loop is
//! sometimes busy (the notifier is already readable: a notify costs no syscall) and sometimes
//! asleep in `epoll_wait` (the first notify of a burst rings the doorbell: one `write(2)`;
//! the loop's read drains it: one `read(2)`).

use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::Notifier;
use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::{eventfd, EventfdFlags, Timespec};

const PRODUCERS: u64 = 3;
const BURSTS: u64 = 300;
const PER_BURST: u64 = 1000;
const TOTAL: u64 = PRODUCERS * BURSTS * PER_BURST;

/// Sleep in a kernel epoll on `fd` until readable; then `consume` once. Returns the wakes.
fn event_loop(fd: impl AsFd, mut consume: impl FnMut() -> u64) -> u64 {
    let ep = epoll::create(CreateFlags::CLOEXEC).expect("epoll_create");
    epoll::add(&ep, fd, EventData::new_u64(1), EventFlags::IN).expect("epoll_ctl");
    let mut evs = [epoll::Event {
        flags: EventFlags::empty(),
        data: EventData::new_u64(0),
    }];
    let timeout = Timespec {
        tv_sec: 10,
        tv_nsec: 0,
    };
    let (mut sum, mut wakes) = (0, 0);
    while sum < TOTAL {
        match epoll::wait(&ep, &mut evs, Some(&timeout)) {
            Ok(0) => panic!("no wake for 10 s with {} of {TOTAL} notifies seen", sum),
            Ok(_) => {
                wakes += 1;
                sum += consume();
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => panic!("epoll_wait: {e}"),
        }
    }
    assert_eq!(sum, TOTAL);
    wakes
}

fn producers(notify: Arc<dyn Fn() + Send + Sync>) -> Vec<std::thread::JoinHandle<()>> {
    (0..PRODUCERS)
        .map(|_| {
            let notify = notify.clone();
            std::thread::spawn(move || {
                for _ in 0..BURSTS {
                    for _ in 0..PER_BURST {
                        notify();
                    }
                    std::thread::sleep(Duration::from_micros(200));
                }
            })
        })
        .collect()
}

fn main() -> std::io::Result<()> {
    // evfd: an in-memory notifier; the loop watches its fd view.
    let n = Notifier::new();
    let view = n.fd_view()?;
    let t0 = Instant::now();
    let threads = {
        let n = n.clone();
        producers(Arc::new(move || n.notify().expect("notify")))
    };
    let wakes = event_loop(&view, || n.try_read().unwrap_or(0));
    threads
        .into_iter()
        .for_each(|t| t.join().expect("producer"));
    let evfd_time = t0.elapsed();
    let s = view.doorbell_stats();
    let evfd_syscalls = s.rings + s.drains;

    // Twin: a kernel eventfd written on every notify and read on every wake.
    let k: Arc<OwnedFd> = Arc::new(eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)?);
    let t0 = Instant::now();
    let threads = {
        let k = k.clone();
        producers(Arc::new(move || {
            rustix::io::write(&*k, &1u64.to_ne_bytes()).expect("eventfd write");
        }))
    };
    let mut reads = 0u64;
    let kwakes = event_loop(&*k, || {
        let mut b = [0u8; 8];
        reads += 1;
        match rustix::io::read(&*k, &mut b) {
            Ok(_) => u64::from_ne_bytes(b),
            Err(_) => 0,
        }
    });
    threads
        .into_iter()
        .for_each(|t| t.join().expect("producer"));
    let kernel_time = t0.elapsed();
    let kernel_syscalls = TOTAL + reads;

    println!("{TOTAL} notifies from {PRODUCERS} threads in bursts of {PER_BURST}, one epoll loop");
    println!();
    println!("                       loop wakes   wake syscalls   per notify   time");
    println!(
        "evfd fd view        {wakes:>14} {evfd_syscalls:>15} {:>12.5} {:>6.0?}",
        evfd_syscalls as f64 / TOTAL as f64,
        evfd_time
    );
    println!(
        "kernel eventfd      {kwakes:>14} {kernel_syscalls:>15} {:>12.5} {:>6.0?}",
        kernel_syscalls as f64 / TOTAL as f64,
        kernel_time
    );
    println!();
    println!(
        "evfd doorbell: {} rings + {} drains for {wakes} wakes ({:.2} syscalls per wake); \
         {:.0}x fewer wake syscalls than an eventfd write per notify",
        s.rings,
        s.drains,
        evfd_syscalls as f64 / wakes as f64,
        kernel_syscalls as f64 / evfd_syscalls.max(1) as f64
    );
    println!(
        "({} rings beyond the drains are re-rings: a producer refilled the notifier while the \
         loop's read was emptying it, an edge that edge-triggered pollers must see)",
        s.rings.saturating_sub(s.drains)
    );
    Ok(())
}
