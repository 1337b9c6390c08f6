//! An io_uring ring inside an evfd event loop, and an evfd notifier inside an io_uring ring.
//!
//! 1. The ring's completion eventfd is a `KernelNotifier` in AutoReset mode
//!    (`IORING_REGISTER_EVENTFD`), waited on in an evfd `Epoll` next to an in-memory work
//!    kick: one wait covers both; each delivery of the ring's notifier resets it, and the
//!    loop reaps every completion then.
//! 2. The other way round: an fd view of an AutoReset notifier polled by a multishot
//!    `IORING_OP_POLL_ADD`. The poll does not reset the count, so each completion is followed
//!    by `FdView::consume()` — the AutoReset delivery — and the next notify is a new edge:
//!    one completion per edge, no spinning.
//!
//! Run: `cargo run --example io_uring` (Linux; prints why and exits where io_uring is
//! missing or disabled).

#[cfg(target_os = "linux")]
fn main() -> std::io::Result<()> {
    use std::os::fd::AsRawFd;
    use std::time::Duration;

    use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};
    use io_uring::{cqueue, opcode, types, IoUring};

    let mut ring = match IoUring::new(32) {
        Ok(ring) => ring,
        Err(e) => {
            println!("io_uring unavailable here ({e}); see /proc/sys/kernel/io_uring_disabled");
            return Ok(());
        }
    };

    // 1. Completions into the evfd loop.
    let completions = KernelNotifier::new(Mode::AutoReset)?;
    ring.submitter().register_eventfd(completions.as_raw_fd())?;
    let work = Notifier::builder().mode(Mode::AutoReset).build()?;
    let ep = Epoll::new();
    ep.add(&completions, Events::IN, 0)?;
    ep.add(&work, Events::IN, 1)?;

    let timeouts: Vec<types::Timespec> = (1..=3)
        .map(|ms| types::Timespec::from(Duration::from_millis(ms * 10)))
        .collect();
    for (i, ts) in timeouts.iter().enumerate() {
        let sqe = opcode::Timeout::new(ts).build().user_data(i as u64);
        // SAFETY: the timespec outlives the request (`timeouts` lives to the end of main);
        // a TIMEOUT points at no other memory.
        unsafe { ring.submission().push(&sqe).expect("queue has room") };
    }
    ring.submit()?;
    let worker = {
        let work = work.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(15));
            work.notify()
        })
    };

    let (mut reaped, mut woken) = (0, 0);
    let mut evs = [Event::default(); 4];
    while reaped < timeouts.len() || woken == 0 {
        let n = ep.wait(&mut evs, Some(Duration::from_secs(5)))?;
        assert!(n > 0, "a completion or the work kick is owed");
        for e in &evs[..n] {
            match e.data {
                0 => {
                    // Delivered: the count is reset; reap what the ring has.
                    for c in ring.completion() {
                        println!("ring: timeout {} done ({})", c.user_data(), c.result());
                        reaped += 1;
                    }
                }
                _ => {
                    println!("work kick");
                    woken += 1;
                }
            }
        }
    }
    worker.join().unwrap()?;
    ring.submitter().unregister_eventfd()?;

    // 2. An evfd notifier polled by the ring.
    let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    let view = kick.fd_view()?;
    let poll = opcode::PollAdd::new(types::Fd(view.as_raw_fd()), libc::POLLIN as u32)
        .multi(true)
        .build()
        .user_data(7);
    // SAFETY: a POLL_ADD points at no memory; the view's fd stays open while polled.
    unsafe { ring.submission().push(&poll).expect("queue has room") };
    ring.submit()?;
    for edge in 0..3 {
        kick.notify()?;
        kick.notify()?; // coalesces: the view is already readable
        ring.submit_and_wait(1)?;
        let c: cqueue::Entry = ring.completion().next().expect("one completion");
        if c.result() < 0 {
            println!("multishot poll unsupported here ({})", c.result());
            return Ok(());
        }
        // The consume rule: deliver (AutoReset resets, the doorbell drains) before waiting
        // again, or the source stays readable and the next notify is no new edge.
        let seen = view.consume();
        println!(
            "edge {edge}: poll completed (more: {}), consume saw {seen:?}",
            cqueue::more(c.flags())
        );
        assert_eq!(kick.count(), 0);
        assert_eq!(ring.completion().count(), 0, "one completion per edge");
    }
    Ok(())
}

#[cfg(not(target_os = "linux"))]
fn main() {
    println!("io_uring is Linux-only");
}
