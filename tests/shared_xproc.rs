//! `SharedNotifier` across processes: a peer process (this binary re-executed) receives the
//! notifier over a Unix socket and acts on it while this process blocks, polls, waits in an
//! `Epoll`, or survives the peer being SIGKILLed or scribbling over the region.

mod shared_util;

use std::io::ErrorKind;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Mode, LIMIT};
use shared_util::{connected, mode_name, readable, Rng};

const MODES: [Mode; 3] = [Mode::Counter, Mode::Semaphore, Mode::AutoReset];
const LONG: Duration = Duration::from_secs(10);

/// The peer's entry point (does nothing in a normal test run).
#[test]
fn peer_entry() {
    shared_util::peer_main();
}

fn expect_read(mode: Mode, written: u64) -> u64 {
    if mode == Mode::Semaphore {
        1
    } else {
        written
    }
}

#[test]
fn blocking_reader_here_woken_by_peer_each_mode() {
    for mode in MODES {
        let (s, mut p) = connected(mode, 0);
        p.send("wait_reader");
        p.send("s w 3");
        assert_eq!(
            s.read_timeout(LONG).unwrap(),
            expect_read(mode, 3),
            "{mode:?}"
        );
        assert_eq!(p.reply(), "ok 1");
        assert_eq!(p.reply(), "ok 0");
        let st = s.stats();
        assert!(
            st.futex_waits + st.bell_waits >= 1,
            "{mode:?}: the reader slept"
        );
        let peer_stats = p.cmd("stats");
        assert!(
            !peer_stats.starts_with("ok 0 "),
            "{mode:?}: the peer woke the futex: {peer_stats}"
        );
        assert_eq!(s.sleepers(), (0, 0, 0));
    }
}

#[test]
fn blocking_reader_in_peer_woken_from_here_each_mode() {
    for mode in MODES {
        let (s, mut p) = connected(mode, 0);
        p.send("s rt 10000");
        let start = Instant::now();
        while s.sleepers().0 == 0 {
            assert!(start.elapsed() < LONG, "the peer never slept");
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(Duration::from_millis(2));
        s.write(2).unwrap();
        assert_eq!(
            p.reply(),
            format!("ok {}", expect_read(mode, 2)),
            "{mode:?}"
        );
        let st = s.stats();
        assert_eq!(
            (st.futex_wakes, st.bell_wakes),
            (0, 1),
            "{mode:?}: exactly one wake for the sleeper, on the sleep bell it held"
        );
        let left = if mode == Mode::Semaphore { 1 } else { 0 };
        assert_eq!(s.count(), left);
    }
}

#[test]
fn writer_blocked_on_full_counter_woken_by_peer_read() {
    for mode in MODES {
        let (s, mut p) = connected(mode, LIMIT);
        p.send("sleep 50");
        p.send("s tr");
        let n = if mode == Mode::Semaphore { 1 } else { 5 };
        s.write_timeout(n, LONG).unwrap();
        assert_eq!(p.reply(), "ok");
        let got = p.reply();
        assert_eq!(got, format!("ok {}", expect_read(mode, LIMIT)), "{mode:?}");
        let expect = if mode == Mode::Semaphore { LIMIT } else { 5 };
        assert_eq!(s.count(), expect, "{mode:?}");
    }
}

#[test]
fn epoll_consumer_woken_by_peer() {
    for mode in [Mode::Counter, Mode::Semaphore] {
        let (s, mut p) = connected(mode, 0);
        let ep = Epoll::new();
        ep.add(&s, Events::IN, 9).unwrap();
        let mut evs = [Event::default(); 4];
        assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 0);
        p.send("sleep 50");
        p.send("s w 1");
        assert_eq!(ep.wait(&mut evs, Some(LONG)).unwrap(), 1, "{mode:?}");
        assert_eq!(evs[0].data, 9);
        assert!(evs[0].events.contains(Events::IN));
        assert_eq!(p.reply(), "ok");
        assert_eq!(p.reply(), "ok 0");
        assert_eq!(s.read().unwrap(), 1);
        // Consumed: the doorbell was drained, nothing more to report.
        assert_eq!(
            ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(),
            0,
            "{mode:?}"
        );
        // A second round, the peer writing twice (one edge: one ring).
        let rings = p.cmd("stats");
        p.send("s w 1");
        p.send("s w 1");
        assert_eq!(ep.wait(&mut evs, Some(LONG)).unwrap(), 1);
        assert_eq!(p.reply(), "ok 0");
        assert_eq!(p.reply(), "ok 0");
        let after = p.cmd("stats");
        let r = |s: &str| s.split(' ').nth(3).unwrap().parse::<u64>().unwrap();
        assert_eq!(r(&after) - r(&rings), 1, "one ring for two writes");
    }
}

#[test]
fn fd_view_consumer_woken_by_peer() {
    for mode in MODES {
        let (s, mut p) = connected(mode, 0);
        let view = s.fd_view().unwrap();
        assert!(!readable(view.as_fd()));
        p.send("sleep 50");
        p.send("s w 2");
        let start = Instant::now();
        while !readable(view.as_fd()) {
            assert!(
                start.elapsed() < LONG,
                "{mode:?}: view never became readable"
            );
            let mut fds = [rustix::event::PollFd::new(
                &view,
                rustix::event::PollFlags::IN,
            )];
            let _ = rustix::event::poll(&mut fds, None);
        }
        assert_eq!(p.reply(), "ok");
        assert_eq!(p.reply(), "ok 0");
        match mode {
            Mode::AutoReset => {
                assert!(view.consume().unwrap().contains(Events::IN));
                assert_eq!(s.count(), 0);
            }
            Mode::Semaphore => {
                assert_eq!(s.read().unwrap(), 1);
                assert!(readable(view.as_fd()), "one unit left");
                assert_eq!(p.cmd("s tr"), "ok 1");
            }
            _ => assert_eq!(s.read().unwrap(), 2),
        }
        assert!(!readable(view.as_fd()), "{mode:?}: drained when emptied");
    }
}

/// Kill the peer at a random instant while it hammers the notifier, then run every
/// operation here with a timeout: nothing hangs, counts stay eventfd-legal and what this
/// side writes, this side reads.
fn kill_rounds(rounds: u64, seed: u64) {
    let mut rng = Rng::new(seed);
    for round in 0..rounds {
        let mode = MODES[(round % 3) as usize];
        let (s, mut p) = connected(mode, 0);
        assert_eq!(p.cmd("spin 20000"), "ok");
        std::thread::sleep(Duration::from_micros(rng.below(3000)));
        p.kill();
        let start = Instant::now();
        // Whatever the peer left: drain it.
        while s.try_read().is_ok() {}
        assert_eq!(s.count(), 0);
        assert_eq!(
            s.read_timeout(Duration::from_millis(2)).unwrap_err().kind(),
            ErrorKind::TimedOut
        );
        s.write(5).unwrap();
        s.write_timeout(1, Duration::from_millis(2)).unwrap();
        let mut got = 0;
        while let Ok(v) = s.try_read() {
            got += v;
        }
        assert_eq!(got, 6, "{mode:?} round {round}");
        assert!(
            start.elapsed() < LONG,
            "round {round} took {:?}",
            start.elapsed()
        );
    }
}

#[test]
fn peer_sigkilled_at_random_instants() {
    let rounds = std::env::var("EVFD_XPROC_KILLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    kill_rounds(rounds, 1);
}

#[test]
#[ignore = "long: 1000 SIGKILLs (run with --ignored)"]
fn peer_sigkilled_1000_times() {
    kill_rounds(1000, 2);
}

/// The peer scribbles random words over the region (`hdr`: header included) while this
/// side runs every operation, each with a timeout. Every result must be a value or an
/// error of an expected kind; nothing may hang or crash.
fn hostile(mode: Mode, header_too: bool, seed: u64) -> (u64, u64) {
    let (s, mut p) = connected(mode, 0);
    p.send("recv_raw");
    s.send(&p.sock).unwrap();
    assert_eq!(p.reply(), "ok 3");
    let _view = s.fd_view().unwrap();
    p.send(&format!(
        "scribble {seed} 400 {}",
        if header_too { "hdr" } else { "nohdr" }
    ));
    let mut rng = Rng::new(seed);
    let start = Instant::now();
    let (mut ok, mut errs) = (0u64, 0u64);
    let short = Duration::from_millis(1);
    while start.elapsed() < Duration::from_millis(500) {
        let t = Instant::now();
        let r: std::io::Result<u64> = match rng.below(9) {
            0 => s.try_write(rng.below(3)).map(|_| 0),
            1 => s.write_timeout(1, short).map(|_| 0),
            2 => s.try_read(),
            3 => s.read_timeout(short),
            4 => Ok(u64::from(s.poll(Events::IN | Events::OUT).bits())),
            5 => Ok(s.count()),
            6 => s.consume().map(|e| u64::from(e.bits())),
            7 => s.try_write(u64::MAX).map(|_| 0),
            _ => s.write_timeout(2, short).map(|_| 0),
        };
        assert!(
            t.elapsed() < Duration::from_secs(2),
            "an operation hung: {:?}",
            t.elapsed()
        );
        match r {
            Ok(_) => ok += 1,
            Err(e) => {
                errs += 1;
                let allowed = matches!(
                    e.kind(),
                    ErrorKind::WouldBlock | ErrorKind::TimedOut | ErrorKind::InvalidInput
                ) || (header_too && e.kind() == ErrorKind::InvalidData);
                assert!(allowed, "{mode:?}: unexpected error {e:?}");
            }
        }
    }
    let n = p.reply();
    assert!(n.starts_with("ok "), "{n}");
    (ok, errs)
}

#[test]
fn hostile_peer_scribbling_words() {
    for (i, mode) in MODES.into_iter().enumerate() {
        let (ok, errs) = hostile(mode, false, 10 + i as u64);
        eprintln!("{} nohdr: {ok} ok, {errs} expected errors", mode_name(mode));
        assert!(ok > 0);
    }
}

#[test]
fn hostile_peer_scribbling_header_too() {
    for (i, mode) in MODES.into_iter().enumerate() {
        let (ok, errs) = hostile(mode, true, 20 + i as u64);
        eprintln!("{} hdr: {ok} ok, {errs} expected errors", mode_name(mode));
        assert!(ok + errs > 0);
    }
}
