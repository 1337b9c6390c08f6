//! Kick/call halves over pipes against the same halves over a real eventfd
//! (`KernelNotifier::halves`): scripted and pseudo-random sequences give the same answers in
//! every mode, within what a pipe can carry (docs/pipes.md); then what differs, asserted as
//! documented, and the halves as evfd `Epoll` sources (themselves, in the random sequences,
//! and through `BorrowedFd`).
#![cfg(target_os = "linux")]

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::time::Duration;

use evfd::halves::{self, ConsumerHalf, NotifierHalf};
use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

mod util;

/// An op's answer, comparable across backings.
fn outcome<T: std::fmt::Debug>(r: io::Result<T>) -> String {
    match r {
        Ok(v) => format!("Ok({v:?})"),
        Err(e) => format!("Err({:?})", e.kind()),
    }
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        // xorshift64*
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

fn run(mode: Mode, seed: u64, steps: usize) -> io::Result<()> {
    let k = KernelNotifier::new(mode)?;
    let (kc, kn) = k.halves()?;
    let (pc, pn) = halves::pipe(mode)?;
    // Each consumer also watched by an evfd Epoll (level-triggered IN): its waits agree too
    // (the AutoReset delivery drains, held units count as readable).
    let (kep, pep) = (Epoll::new(), Epoll::new());
    kep.add(&kc, Events::IN, 1)?;
    pep.add(&pc, Events::IN, 1)?;
    let wait0 = |ep: &Epoll| {
        let mut evs = [Event::default(); 2];
        outcome(
            ep.wait(&mut evs, Some(Duration::ZERO))
                .map(|n| evs[..n].to_vec()),
        )
    };
    let mut rng = Rng(seed);
    let mut written = 0u64;
    for step in 0..steps {
        let (a, b, what) = match rng.next() % 7 {
            6 => (wait0(&kep), wait0(&pep), "Epoll::wait(0)".into()),
            0 | 1 => {
                // Small writes (0 included); the pipe holds 8192 words, so stay well below.
                let n = rng.next() % 4;
                if written > 4000 {
                    continue;
                }
                written += 1;
                (
                    outcome(kn.try_write(n)),
                    outcome(pn.try_write(n)),
                    format!("write({n})"),
                )
            }
            2 => (
                outcome(kc.try_read()),
                outcome(pc.try_read()),
                "try_read".into(),
            ),
            3 => (
                outcome(kc.consume()),
                outcome(pc.consume()),
                "consume".into(),
            ),
            4 => (
                format!("{:?}", kc.poll(Events::IN)),
                format!("{:?}", pc.poll(Events::IN)),
                "poll(IN)".into(),
            ),
            _ => (
                outcome(kn.try_write(u64::MAX)),
                outcome(pn.try_write(u64::MAX)),
                "write(MAX)".into(),
            ),
        };
        assert_eq!(a, b, "{mode:?} seed {seed} step {step}: {what}");
    }
    // Drain both: the same total.
    let drain = |c: &ConsumerHalf| {
        let mut t = 0;
        while let Ok(v) = c.try_read() {
            t += v;
        }
        t
    };
    assert_eq!(drain(&kc), drain(&pc), "{mode:?} seed {seed}: final count");
    Ok(())
}

#[test]
fn random_sequences_agree_with_eventfd() -> io::Result<()> {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        for seed in 1..=40 {
            run(mode, seed * 0x9e37_79b9, 300)?;
        }
    }
    Ok(())
}

#[test]
fn scripted_modes() -> io::Result<()> {
    for (c, n) in [
        halves::pipe(Mode::Counter)?,
        KernelNotifier::new(Mode::Counter)?.halves()?,
    ] {
        n.write(3)?;
        n.notify()?;
        assert_eq!(c.read()?, 4, "Counter sums");
        assert_eq!(c.try_read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
    for (c, n) in [
        halves::pipe(Mode::Semaphore)?,
        KernelNotifier::new(Mode::Semaphore)?.halves()?,
    ] {
        n.write(2)?;
        n.notify()?;
        let reads: Vec<u64> = (0..3).map(|_| c.read().unwrap()).collect();
        assert_eq!(reads, [1, 1, 1], "Semaphore: one per read");
        assert_eq!(c.try_read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
    }
    for (c, n) in [
        halves::pipe(Mode::AutoReset)?,
        KernelNotifier::new(Mode::AutoReset)?.halves()?,
    ] {
        for _ in 0..5 {
            n.notify()?;
        }
        assert!(c.consume()?.contains(Events::IN), "delivered");
        assert!(
            !c.consume()?.contains(Events::IN),
            "drained by the delivery"
        );
        assert_eq!(c.poll(Events::IN), Events::empty());
    }
    Ok(())
}

#[test]
fn blocking_read_and_timeout() -> io::Result<()> {
    let (c, n) = halves::pipe(Mode::Counter)?;
    let e = c.read_timeout(Duration::from_millis(10)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
    let reader = util::this_tid();
    let t = std::thread::spawn(move || {
        util::wait_until_blocked(reader, "the blocking read");
        n.write(6)
    });
    assert_eq!(c.read()?, 6);
    t.join().unwrap()?;
    // The writer is gone: a read does not wait for ever (an eventfd would).
    assert_eq!(c.read().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    assert!(c.poll(Events::IN).contains(Events::HUP));
    Ok(())
}

#[test]
fn what_a_pipe_does_differently() -> io::Result<()> {
    // 1. A pipe holds words, not a sum: two writes of LIMIT both succeed (an eventfd
    //    refuses the second), and come back as two reads.
    let (c, n) = halves::pipe(Mode::Counter)?;
    n.try_write(evfd::LIMIT)?;
    n.try_write(evfd::LIMIT)?;
    assert_eq!(c.try_read()?, evfd::LIMIT);
    // The second word is held by the consumer: the fd is no longer readable, the consumer is.
    assert_eq!(c.poll(Events::IN), Events::IN);
    assert_eq!(c.try_read()?, evfd::LIMIT);
    let k = KernelNotifier::new(Mode::Counter)?;
    k.try_write(evfd::LIMIT)?;
    assert_eq!(
        k.try_write(1).unwrap_err().kind(),
        io::ErrorKind::WouldBlock
    );

    // 2. The pipe fills by words, not by count: 64 KiB (8192 words) by default.
    let (c, n) = halves::pipe(Mode::Counter)?;
    let mut words = 0u64;
    while n.try_write(1).is_ok() {
        words += 1;
    }
    assert!(words >= 512, "at least PIPE_BUF / 8 words fit ({words})");
    assert_eq!(n.poll(Events::OUT), Events::empty());
    assert_eq!(c.try_read()?, words);
    assert_eq!(n.poll(Events::OUT), Events::OUT);

    // 3. A word split by a foreign writer is reassembled.
    let (rd, wr) = rustix::pipe::pipe()?;
    let c = ConsumerHalf::from_owned_fd(rd, Mode::Counter)?;
    let bytes = 0x0102_0304_0506_0708u64.to_ne_bytes();
    rustix::io::write(&wr, &bytes[..3])?;
    assert_eq!(c.try_read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
    rustix::io::write(&wr, &bytes[3..])?;
    assert_eq!(c.try_read()?, 0x0102_0304_0506_0708);

    // 4. A closed peer: EPIPE for the writer, end of file for the reader.
    let (c, n) = halves::pipe(Mode::Counter)?;
    drop(c);
    assert_eq!(n.notify().unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    let (c, n) = halves::pipe(Mode::AutoReset)?;
    drop(n);
    assert_eq!(c.consume()?, Events::HUP);
    Ok(())
}

#[test]
fn adoption_checks_the_end() -> io::Result<()> {
    let (rd, wr) = rustix::pipe::pipe()?;
    let e = ConsumerHalf::from_owned_fd(wr.try_clone()?, Mode::Counter).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = NotifierHalf::from_owned_fd(rd.try_clone()?).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let c = ConsumerHalf::from_owned_fd(rd, Mode::Semaphore)?;
    let n = NotifierHalf::from_owned_fd(wr)?;
    assert!(c.is_pipe() && n.is_pipe());
    n.write(2)?;
    assert_eq!(c.read()?, 1);
    // Neither a pipe nor an eventfd.
    let memfd = rustix::fs::memfd_create("x", rustix::fs::MemfdFlags::CLOEXEC)?;
    let e = ConsumerHalf::from_owned_fd(memfd, Mode::Counter).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    // An eventfd, checked as KernelNotifier checks it.
    let efd: OwnedFd = KernelNotifier::new(Mode::Counter)?.into();
    let c = ConsumerHalf::from_owned_fd(efd, Mode::Counter)?;
    assert!(!c.is_pipe());
    Ok(())
}

/// A kick pipe and a call eventfd in one evfd `Epoll`, through `BorrowedFd`: level-triggered
/// as the kernel reports the fd, with `consume` as the AutoReset delivery after each event.
#[test]
fn halves_in_an_epoll() -> io::Result<()> {
    let (kick, kick_n) = halves::pipe(Mode::AutoReset)?;
    let call_k = KernelNotifier::new(Mode::AutoReset)?;
    let (call, call_n) = call_k.halves()?;
    let ep = Epoll::new();
    ep.add(&kick.as_fd(), Events::IN, 1)?;
    ep.add(&call.as_fd(), Events::IN, 2)?;
    let mut evs = [Event::default(); 4];
    let mut deliveries = [0usize; 3];
    for round in 0..50 {
        for _ in 0..=round % 3 {
            kick_n.notify()?;
        }
        if round % 2 == 0 {
            call_n.notify()?;
        }
        let n = ep.wait(&mut evs, Some(Duration::from_secs(5)))?;
        assert!(n >= 1);
        for e in &evs[..n] {
            let h = if e.data == 1 { &kick } else { &call };
            assert!(h.consume()?.contains(Events::IN), "round {round}: {e:?}");
            deliveries[e.data as usize] += 1;
        }
        // Consumed: the fds are not readable, the level-triggered epoll is quiet.
        assert_eq!(
            ep.wait(&mut evs, Some(Duration::from_millis(5)))?,
            0,
            "round {round}"
        );
    }
    assert_eq!(deliveries, [0, 50, 25]);
    Ok(())
}
