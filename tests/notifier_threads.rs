//! Blocking behaviour across threads, in every mode: blocked readers and writers are woken,
//! semaphore wakes are counted, timeouts never lose a unit, and under 4 writers × 2 readers
//! every unit written is read exactly once.
//!
//! Every test runs inside [`bounded`]: a hang fails the test after 60 s instead of stalling
//! CI.

use std::io::ErrorKind;
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Acquire, Relaxed, Release},
};
use std::sync::mpsc::{self, RecvTimeoutError};
use std::sync::{Arc, Barrier};
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Mode, Notifier, LIMIT};

mod util;

const MODES: [Mode; 3] = [Mode::Counter, Mode::Semaphore, Mode::AutoReset];
const LIMIT_TIME: Duration = Duration::from_secs(60);

/// Runs `f` on its own thread and fails if it has not finished within [`LIMIT_TIME`]; a
/// panic inside `f` is passed on as is.
fn bounded<T: Send + 'static>(name: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = mpsc::channel();
    let h = thread::Builder::new()
        .name(name.to_owned())
        .spawn(move || {
            let r = f();
            let _ = tx.send(());
            r
        })
        .expect("spawn test body");
    match rx.recv_timeout(LIMIT_TIME) {
        Ok(()) => h.join().expect("test body"),
        Err(RecvTimeoutError::Disconnected) => match h.join() {
            Err(panic) => std::panic::resume_unwind(panic),
            Ok(_) => unreachable!("the body finished without reporting"),
        },
        Err(RecvTimeoutError::Timeout) => {
            panic!("{name}: did not finish within {LIMIT_TIME:?} (hang?)")
        }
    }
}

fn notifier(mode: Mode, initial: u64) -> Notifier {
    Notifier::builder()
        .mode(mode)
        .initial(initial)
        .build()
        .unwrap()
}

/// Number of queued waiters, from the `Debug` output (`waiters: N`).
fn waiters(n: &Notifier) -> usize {
    let s = format!("{n:?}");
    let at = s
        .find("waiters: ")
        .unwrap_or_else(|| panic!("no waiter count in {s}"))
        + "waiters: ".len();
    s[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap()
}

/// Waits until exactly `k` threads are queued on `n`.
fn wait_for_waiters(n: &Notifier, k: usize) {
    while waiters(n) != k {
        thread::sleep(Duration::from_micros(200));
    }
}

/// A small xorshift, so each thread draws its own sizes without a dependency.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn blocked_reader_is_woken_by_a_writer() {
    bounded("blocked_reader_is_woken_by_a_writer", || {
        for mode in MODES {
            let n = notifier(mode, 0);
            let reader = {
                let n = n.clone();
                thread::spawn(move || n.read().unwrap())
            };
            wait_for_waiters(&n, 1);
            n.write(5).unwrap();
            let (want, left) = if mode == Mode::Semaphore {
                (1, 4)
            } else {
                (5, 0)
            };
            assert_eq!(reader.join().unwrap(), want, "{mode:?}");
            assert_eq!(n.count(), left, "{mode:?}");
            assert_eq!(waiters(&n), 0, "{mode:?}");
        }
    });
}

#[test]
fn blocked_writer_at_the_limit_is_woken_by_a_reader() {
    bounded("blocked_writer_at_the_limit_is_woken_by_a_reader", || {
        for mode in MODES {
            let n = notifier(mode, LIMIT);
            let (tx, rx) = mpsc::channel();
            let writer = {
                let n = n.clone();
                thread::spawn(move || {
                    tx.send(util::this_tid()).unwrap();
                    n.write(2).unwrap()
                })
            };
            let tid = rx.recv().unwrap();
            wait_for_waiters(&n, 1);
            util::wait_until_blocked(tid, "write(2) at the limit");
            assert_eq!(n.try_write(1).unwrap_err().kind(), ErrorKind::WouldBlock);
            if mode == Mode::Semaphore {
                // One read makes room for 1, not 2: the writer is woken, re-checks, and must
                // go back to sleep (it slept once more); the second read lets it through.
                let slept = util::sleeps(tid);
                assert_eq!(n.read().unwrap(), 1);
                util::wait_until_woken_and_blocked(tid, slept, "write(2) after a read of 1");
                wait_for_waiters(&n, 1);
                assert!(
                    !writer.is_finished(),
                    "write(2) went through with room for 1"
                );
                assert_eq!(n.count(), LIMIT - 1);
                assert_eq!(n.read().unwrap(), 1);
                writer.join().unwrap();
                assert_eq!(n.count(), LIMIT);
            } else {
                assert_eq!(n.read().unwrap(), LIMIT, "{mode:?}");
                writer.join().unwrap();
                assert_eq!(n.count(), 2, "{mode:?}");
            }
            assert_eq!(waiters(&n), 0, "{mode:?}");
        }
    });
}

#[test]
fn semaphore_write_2_wakes_exactly_2_of_3_readers() {
    bounded("semaphore_write_2_wakes_exactly_2_of_3_readers", || {
        let n = notifier(Mode::Semaphore, 0);
        let (tx, rx) = mpsc::channel();
        let readers: Vec<_> = (0..3)
            .map(|_| {
                let (n, tx) = (n.clone(), tx.clone());
                thread::spawn(move || tx.send(n.read().unwrap()).unwrap())
            })
            .collect();
        wait_for_waiters(&n, 3);

        n.write(2).unwrap();
        for _ in 0..2 {
            assert_eq!(
                rx.recv_timeout(Duration::from_secs(10))
                    .expect("a woken reader"),
                1
            );
        }
        // The third stays asleep: nothing is left for it.
        assert_eq!(
            rx.recv_timeout(Duration::from_millis(100)),
            Err(RecvTimeoutError::Timeout)
        );
        wait_for_waiters(&n, 1);
        assert_eq!(n.count(), 0);

        n.write(1).unwrap();
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(10))
                .expect("the third reader"),
            1
        );
        for r in readers {
            r.join().unwrap();
        }
        assert_eq!(n.count(), 0);
        assert_eq!(waiters(&n), 0);
    });
}

#[test]
fn read_timeout_times_out_and_changes_nothing() {
    bounded("read_timeout_times_out_and_changes_nothing", || {
        for mode in MODES {
            let n = notifier(mode, 0);
            let t0 = Instant::now();
            let e = n.read_timeout(Duration::from_millis(20)).unwrap_err();
            assert_eq!(e.kind(), ErrorKind::TimedOut, "{mode:?}");
            assert!(
                t0.elapsed() >= Duration::from_millis(20),
                "{mode:?}: returned early"
            );
            assert_eq!(n.count(), 0);
            assert_eq!(
                waiters(&n),
                0,
                "{mode:?}: a timed-out waiter left its entry"
            );
            // A zero timeout never blocks.
            assert_eq!(
                n.read_timeout(Duration::ZERO).unwrap_err().kind(),
                ErrorKind::TimedOut
            );
            n.write(3).unwrap();
            let want = if mode == Mode::Semaphore { 1 } else { 3 };
            assert_eq!(n.read_timeout(Duration::from_millis(20)).unwrap(), want);
        }
    });
}

/// Two readers with tiny timeouts race one writer's `write(1)`s: a unit written while a
/// reader is timing out must never be lost (the readers would then spin until the time bound)
/// and never be read twice (the sum would be off).
#[test]
fn write_racing_a_timeout_is_never_lost() {
    bounded("write_racing_a_timeout_is_never_lost", || {
        const UNITS: u64 = 50_000;
        for mode in MODES {
            let n = notifier(mode, 0);
            let taken = Arc::new(AtomicU64::new(0));
            let timeouts = Arc::new(AtomicU64::new(0));
            let readers: Vec<_> = (0..2)
                .map(|r| {
                    let (n, taken, timeouts) =
                        (n.clone(), Arc::clone(&taken), Arc::clone(&timeouts));
                    thread::spawn(move || {
                        let mut rng = Rng(0x9e37_79b9 + r);
                        while taken.load(Acquire) < UNITS {
                            let t = Duration::from_micros(rng.next() % 40);
                            match n.read_timeout(t) {
                                Ok(v) => {
                                    taken.fetch_add(v, Release);
                                }
                                Err(e) if e.kind() == ErrorKind::TimedOut => {
                                    timeouts.fetch_add(1, Relaxed);
                                }
                                Err(e) => panic!("{e}"),
                            }
                        }
                    })
                })
                .collect();
            let mut rng = Rng(0x2545_f491);
            for i in 0..UNITS {
                n.write(1).unwrap();
                for _ in 0..rng.next() % 64 {
                    std::hint::spin_loop();
                }
                if i % 1000 == 999 {
                    // A gap longer than every reader timeout (< 40 µs): readers that spin
                    // before they park would otherwise catch nearly every write, and the
                    // timeout path this test races would go unexercised.
                    let t0 = std::time::Instant::now();
                    while t0.elapsed() < Duration::from_micros(100) {
                        std::hint::spin_loop();
                    }
                }
            }
            for r in readers {
                r.join().unwrap();
            }
            assert_eq!(taken.load(Acquire), UNITS, "{mode:?}");
            assert_eq!(n.count(), 0, "{mode:?}");
            assert_eq!(waiters(&n), 0, "{mode:?}");
            eprintln!(
                "{mode:?}: {UNITS} units, {} reader timeouts",
                timeouts.load(Relaxed)
            );
            assert!(
                timeouts.load(Relaxed) > 0,
                "{mode:?}: no timeout ever raced a write"
            );
        }
    });
}

/// 4 writers × 2 readers, 2·10⁶ units per mode (writes of 1..=8): every unit written is read exactly once.
fn conservation(mode: Mode) {
    const WRITERS: u64 = 4;
    const READERS: u64 = 2;
    const UNITS_PER_WRITER: u64 = 500_000;
    let n = notifier(mode, 0);
    let done = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new((WRITERS + READERS) as usize));

    let readers: Vec<_> = (0..READERS)
        .map(|_| {
            let (n, done, start) = (n.clone(), Arc::clone(&done), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let (mut got, mut reads, mut timeouts) = (0u64, 0u64, 0u64);
                loop {
                    match n.read_timeout(Duration::from_millis(1)) {
                        Ok(v) => {
                            got += v;
                            reads += 1;
                        }
                        Err(e) if e.kind() == ErrorKind::TimedOut => {
                            timeouts += 1;
                            if done.load(Acquire) {
                                // Every write happened before `done`: drain to zero and stop.
                                loop {
                                    match n.try_read() {
                                        Ok(v) => got += v,
                                        Err(e) if e.kind() == ErrorKind::WouldBlock => {
                                            return (got, reads, timeouts)
                                        }
                                        Err(e) => panic!("{e}"),
                                    }
                                }
                            }
                        }
                        Err(e) => panic!("{e}"),
                    }
                }
            })
        })
        .collect();

    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let (n, start) = (n.clone(), Arc::clone(&start));
            thread::spawn(move || {
                start.wait();
                let mut rng = Rng(0x853c_49e6_748f_ea9b ^ (w + 1));
                let (mut left, mut writes) = (UNITS_PER_WRITER, 0u64);
                while left > 0 {
                    let k = (1 + rng.next() % 8).min(left);
                    n.write(k).unwrap();
                    left -= k;
                    writes += 1;
                    // A short random pause now and then lets the readers drain the count and
                    // go to sleep, so the wake paths run, not just the lock-free ones.
                    if rng.next() % 4 == 0 {
                        for _ in 0..rng.next() % 256 {
                            std::hint::spin_loop();
                        }
                    }
                }
                (UNITS_PER_WRITER, writes)
            })
        })
        .collect();

    let t0 = Instant::now();
    let (written, writes) = writers
        .into_iter()
        .map(|w| w.join().unwrap())
        .fold((0, 0), |(u, c), (du, dc)| (u + du, c + dc));
    done.store(true, Release);
    let (read, reads, timeouts) = readers
        .into_iter()
        .map(|r| r.join().unwrap())
        .fold((0, 0, 0), |(g, r, t), (dg, dr, dt)| {
            (g + dg, r + dr, t + dt)
        });
    eprintln!(
        "{mode:?}: {written} units in {writes} writes, {reads} reads, {timeouts} timeouts, {:?}",
        t0.elapsed()
    );
    assert!(written >= 1_000_000);
    assert_eq!(read, written, "{mode:?}: sum read != sum written");
    assert_eq!(n.count(), 0, "{mode:?}");
    assert_eq!(waiters(&n), 0, "{mode:?}");
}

#[test]
fn four_writers_two_readers_counter() {
    bounded("four_writers_two_readers_counter", || {
        conservation(Mode::Counter)
    });
}

#[test]
fn four_writers_two_readers_semaphore() {
    bounded("four_writers_two_readers_semaphore", || {
        conservation(Mode::Semaphore)
    });
}

#[test]
fn four_writers_two_readers_autoreset() {
    bounded("four_writers_two_readers_autoreset", || {
        conservation(Mode::AutoReset)
    });
}
