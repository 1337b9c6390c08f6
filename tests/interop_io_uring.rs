//! io_uring (the `io-uring` crate) with evfd:
//!
//! - a `KernelNotifier` registered as a ring's completion eventfd (`IORING_REGISTER_EVENTFD`),
//!   waited on in an evfd `Epoll` beside in-memory notifiers: in AutoReset, one delivery
//!   consumes every signal the ring wrote, so deliveries ≤ signals ≤ completions, and no
//!   completion goes unseen;
//! - `IORING_OP_POLL_ADD` (single-shot and multishot) on an evfd fd view and on a raw
//!   `KernelNotifier`: without a consume, a single-shot re-arm completes at once for ever
//!   (the spin of a poll that does not reset the count) and a multishot poll on an eventfd
//!   fires for every write; with the consume rule (`FdView::consume` /
//!   `KernelNotifier::consume` after each completion, AutoReset), one completion per edge.
//!
//! Where the kernel has no io_uring, or it is disabled (`/proc/sys/kernel/io_uring_disabled`,
//! `EPERM`), each test prints why and returns.
#![cfg(target_os = "linux")]

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};
use io_uring::{cqueue, opcode, squeue, types, IoUring};

const LONG: Duration = Duration::from_secs(5);
const SHORT: Duration = Duration::from_millis(20);

/// A ring, or `None` (with the reason printed) where io_uring cannot be used here.
fn ring_or_skip(test: &str) -> Option<IoUring> {
    match IoUring::new(64) {
        Ok(ring) => Some(ring),
        Err(e) => {
            let disabled = std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
                .map(|s| s.trim().to_owned())
                .unwrap_or_else(|_| "absent".into());
            println!(
                "{test}: skipped: io_uring_setup failed: {e} (errno {:?}); \
                 /proc/sys/kernel/io_uring_disabled = {disabled}",
                e.raw_os_error()
            );
            None
        }
    }
}

fn push(ring: &mut IoUring, e: &squeue::Entry) {
    // SAFETY: the entries pushed here (NOP, POLL_ADD, TIMEOUT) point at no user memory
    // but a TIMEOUT's timespec, which the kernel copies when it prepares the request, within
    // the `submit` that follows every push in these tests (and the caller keeps it alive
    // until the completion anyway).
    unsafe { ring.submission().push(e).expect("submission queue full") }
}

/// Submit what is queued and collect completions until `want` arrived or `timeout` passed
/// without one.
fn reap(ring: &mut IoUring, want: usize, timeout: Duration) -> io::Result<Vec<cqueue::Entry>> {
    let ts = types::Timespec::from(timeout);
    let args = types::SubmitArgs::new().timespec(&ts);
    let mut got = Vec::new();
    loop {
        got.extend(ring.completion());
        if got.len() >= want {
            return Ok(got);
        }
        match ring.submitter().submit_with_args(1, &args) {
            Ok(_) => {}
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => {
                got.extend(ring.completion());
                return Ok(got);
            }
            Err(e) if e.raw_os_error() == Some(libc::EINTR) => {}
            Err(e) => return Err(e),
        }
    }
}

fn poll_in(fd: RawFd, multi: bool, data: u64) -> squeue::Entry {
    opcode::PollAdd::new(types::Fd(fd), libc::POLLIN as u32)
        .multi(multi)
        .build()
        .user_data(data)
}

#[test]
fn completion_eventfd_in_an_epoll() -> io::Result<()> {
    let Some(mut ring) = ring_or_skip("completion_eventfd_in_an_epoll") else {
        return Ok(());
    };
    let cq = KernelNotifier::new(Mode::AutoReset)?;
    ring.submitter().register_eventfd(cq.as_raw_fd())?;

    let ep = Epoll::new();
    let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    let jobs = Notifier::new(); // Counter: read by the loop
    ep.add(&cq, Events::IN, 0)?;
    ep.add(&kick, Events::IN, 1)?;
    ep.add(&jobs, Events::IN, 2)?;
    let mut evs = [Event::default(); 8];

    // Part 1: NOPs complete inside `submit`, so each round's signals are all written before
    // the wait: exactly one delivery per round, however many completions and signals.
    let (mut completions, mut signals, mut deliveries, mut kicks) = (0, 0, 0, 0);
    const ROUNDS: usize = 40;
    for r in 0..ROUNDS {
        let k = r % 5 + 1;
        for i in 0..k {
            push(&mut ring, &opcode::Nop::new().build().user_data(i as u64));
        }
        ring.submit()?;
        if r % 2 == 0 {
            kick.notify()?;
            kick.notify()?;
        }
        if r % 4 == 0 {
            jobs.write(3)?;
        }
        let s = cq.count()?;
        assert!(
            (1..=k as u64).contains(&s),
            "round {r}: {s} signals for {k} NOPs"
        );
        signals += s;
        let n = ep.wait(&mut evs, Some(LONG))?;
        for e in &evs[..n] {
            match e.data {
                0 => deliveries += 1,
                1 => kicks += 1,
                2 => assert_eq!(jobs.read()?, 3),
                d => panic!("unknown token {d}"),
            }
        }
        let got = ring.completion().count();
        assert_eq!(got, k, "round {r}");
        completions += got;
        assert_eq!(cq.count()?, 0, "round {r}: the delivery took every signal");
        assert_eq!(
            ep.wait(&mut evs, Some(SHORT))?,
            0,
            "round {r}: nothing left"
        );
    }
    println!(
        "NOP rounds: {ROUNDS} rounds, {completions} completions, {signals} eventfd signals, \
         {deliveries} deliveries of the ring's notifier, {kicks} of the in-memory kick"
    );
    assert_eq!(deliveries, ROUNDS);
    assert_eq!(kicks, ROUNDS / 2);

    // Part 2: timeouts complete later, in the kernel's timer context, while the loop sleeps
    // in the evfd Epoll: every completion is seen, and each delivery took at least one
    // signal (deliveries ≤ completions).
    let (mut completions, mut deliveries, mut empty) = (0, 0, 0);
    const TROUNDS: usize = 10;
    let specs: Vec<types::Timespec> = (1..=3)
        .map(|ms| types::Timespec::from(Duration::from_millis(ms)))
        .collect();
    for r in 0..TROUNDS {
        for ts in &specs {
            push(&mut ring, &opcode::Timeout::new(ts).build().user_data(100));
        }
        ring.submit()?;
        let mut done = 0;
        while done < specs.len() {
            let n = ep.wait(&mut evs, Some(LONG))?;
            assert!(n > 0, "round {r}: a completion was never signalled");
            assert_eq!(
                evs[..n],
                [Event {
                    events: Events::IN,
                    data: 0
                }]
            );
            deliveries += 1;
            let got: Vec<_> = ring.completion().collect();
            for c in &got {
                assert_eq!(c.result(), -libc::ETIME);
            }
            if got.is_empty() {
                empty += 1; // a signal that followed a completion already reaped
            }
            done += got.len();
        }
        completions += done;
    }
    println!(
        "timeout rounds: {TROUNDS} rounds, {completions} completions, {deliveries} deliveries \
         ({empty} found nothing new)"
    );
    assert_eq!(completions, TROUNDS * specs.len());
    assert!(deliveries >= TROUNDS && deliveries <= completions);
    ring.submitter().unregister_eventfd()?;
    Ok(())
}

/// Single-shot POLL_ADD on an AutoReset notifier's fd view, re-armed after every completion.
#[test]
fn poll_add_single_shot_rearm() -> io::Result<()> {
    let Some(mut ring) = ring_or_skip("poll_add_single_shot_rearm") else {
        return Ok(());
    };
    let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    let view = kick.fd_view()?;
    let fd = view.as_raw_fd();

    // Without the consume: one notify, and every re-arm completes at once (a busy loop for
    // a consumer that re-arms and waits).
    kick.notify()?;
    const REARMS: usize = 100;
    let mut spins = 0;
    for _ in 0..REARMS {
        push(&mut ring, &poll_in(fd, false, 1));
        let got = reap(&mut ring, 1, LONG)?;
        assert_eq!(got.len(), 1);
        assert!(got[0].result() & libc::POLLIN as i32 != 0);
        spins += 1;
    }
    println!("single-shot, no consume: 1 notify, {spins} completions from {REARMS} re-arms");
    assert_eq!(spins, REARMS);

    // With it: the completion is the delivery, `consume` resets, and a re-arm waits for the
    // next edge: one completion per edge, however many notifies made it.
    assert!(view.consume().contains(Events::IN));
    const EDGES: usize = 50;
    let mut completions = 0;
    for e in 0..EDGES {
        push(&mut ring, &poll_in(fd, false, 2));
        assert!(
            reap(&mut ring, 1, SHORT)?.is_empty(),
            "edge {e}: nothing to report yet"
        );
        for _ in 0..=e % 3 {
            kick.notify()?;
        }
        let got = reap(&mut ring, 1, LONG)?;
        assert_eq!(got.len(), 1, "edge {e}");
        completions += 1;
        assert!(view.consume().contains(Events::IN));
        assert_eq!(kick.count(), 0);
    }
    // The last re-arm stays pending: nothing is readable.
    push(&mut ring, &poll_in(fd, false, 3));
    assert!(reap(&mut ring, 1, SHORT)?.is_empty());
    println!("single-shot, consume after each: {EDGES} edges, {completions} completions");
    assert_eq!(completions, EDGES);
    Ok(())
}

/// Multishot POLL_ADD (`IORING_POLL_ADD_MULTI`, Linux 5.13+): on a raw eventfd every write
/// wakes it; on an evfd fd view only an edge does, and the consume makes the next edge.
#[test]
fn poll_add_multishot() -> io::Result<()> {
    let Some(mut ring) = ring_or_skip("poll_add_multishot") else {
        return Ok(());
    };

    // A raw eventfd, never consumed: it keeps firing, a completion per write (writes made
    // before the ring's task work runs may share one), while the count only grows.
    let raw = KernelNotifier::new(Mode::Counter)?;
    push(&mut ring, &poll_in(raw.as_raw_fd(), true, 1));
    let armed = reap(&mut ring, 1, SHORT)?;
    if let Some(c) = armed.first() {
        if c.result() == -libc::EINVAL {
            println!("poll_add_multishot: skipped: this kernel has no multishot poll (EINVAL)");
            return Ok(());
        }
        panic!("an idle eventfd completed a poll: {}", c.result());
    }
    const WRITES: usize = 30;
    let mut fired = 0;
    for w in 0..WRITES {
        raw.notify()?;
        let got = reap(&mut ring, 1, LONG)?;
        assert_eq!(got.len(), 1, "write {w}");
        assert!(cqueue::more(got[0].flags()), "still armed");
        fired += 1;
    }
    assert_eq!(raw.count()?, WRITES as u64);
    println!(
        "multishot, raw eventfd, no consume: {WRITES} writes, {fired} completions, count {WRITES}"
    );
    assert_eq!(fired, WRITES);

    // An fd view of an AutoReset notifier, without the consume: the first notify rings the
    // doorbell, later ones find the source readable and write nothing: one completion, and
    // the consumer is never told again until someone consumes.
    let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    let view = kick.fd_view()?;
    push(&mut ring, &poll_in(view.as_raw_fd(), true, 2));
    assert!(reap(&mut ring, 1, SHORT)?.is_empty());
    for _ in 0..WRITES {
        kick.notify()?;
    }
    let got = reap(&mut ring, WRITES, SHORT)?;
    let view_done: Vec<_> = got.iter().filter(|c| c.user_data() == 2).collect();
    println!(
        "multishot, fd view, no consume: {WRITES} notifies, {} completion(s)",
        view_done.len()
    );
    assert_eq!(view_done.len(), 1);

    // With the consume rule: each completion is a delivery; `consume` resets the count and
    // drains the doorbell (a wake the IN poll ignores), so the next notify is a new edge.
    const EDGES: usize = 50;
    let mut completions = 0;
    assert!(view.consume().contains(Events::IN));
    for e in 0..EDGES {
        for _ in 0..=e % 4 {
            kick.notify()?;
        }
        let got = reap(&mut ring, 1, LONG)?;
        assert_eq!(got.len(), 1, "edge {e}");
        assert_eq!(got[0].user_data(), 2);
        assert!(cqueue::more(got[0].flags()), "still armed");
        completions += 1;
        assert!(view.consume().contains(Events::IN));
        assert!(
            reap(&mut ring, 1, SHORT)?.is_empty(),
            "edge {e}: one completion only"
        );
    }
    println!("multishot, fd view, consume after each: {EDGES} edges, {completions} completions");
    assert_eq!(completions, EDGES);

    // The same rule on the raw eventfd as an AutoReset notifier: `consume` is one read(2).
    let raw = KernelNotifier::new(Mode::AutoReset)?;
    push(&mut ring, &poll_in(raw.as_raw_fd(), true, 3));
    assert!(reap(&mut ring, 1, SHORT)?.is_empty());
    for e in 0..EDGES {
        raw.notify()?;
        let got = reap(&mut ring, 1, LONG)?;
        assert_eq!(got.len(), 1, "edge {e}");
        assert!(raw.consume()?.contains(Events::IN));
        assert!(
            reap(&mut ring, 1, SHORT)?.is_empty(),
            "edge {e}: the read wakes OUT only"
        );
    }
    assert_eq!(raw.count()?, 0);
    Ok(())
}
