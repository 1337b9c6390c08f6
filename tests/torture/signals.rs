//! Signals without `SA_RESTART`, delivered by `pthread_kill` to threads blocked in every
//! blocking call (in-memory `read`, `read_timeout`, `Epoll::wait` in memory and on its
//! kernel side, `KernelNotifier::read`): no unit is lost or doubled, and no call returns
//! an error (`EINTR` is never surfaced: in-memory waits park, the kernel-fd paths retry).

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::SeqCst};
use std::sync::{Arc, Mutex, Once};
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

use crate::harness::{bounded, join_within, scale, serial, wait_until, OPS, UNITS_CHECKED};

const LIMIT: Duration = Duration::from_secs(120);

static HANDLED: AtomicUsize = AtomicUsize::new(0);

extern "C" fn on_signal(_: libc::c_int) {
    HANDLED.fetch_add(1, SeqCst);
}

fn install() {
    static ONCE: Once = Once::new();
    // The handler is async-signal-safe (one atomic add). No SA_RESTART: interrupted
    // syscalls fail with EINTR.
    ONCE.call_once(|| crate::signal_util::install_handler(libc::SIGUSR1, on_signal, 0));
}

/// The reader kinds, each on its own thread.
#[derive(Clone, Copy, Debug)]
enum Kind {
    Read,
    ReadTimeout,
    EpollWait,
    EpollKernelSide,
    KernelRead,
}

struct Shared {
    mem: Notifier,
    kern: KernelNotifier,
    read: AtomicU64,
    stop: AtomicBool,
}

fn reader(s: Arc<Shared>, kind: Kind, ids: Arc<Mutex<Vec<libc::pthread_t>>>) {
    // SAFETY: pthread_self has no preconditions.
    ids.lock().unwrap().push(unsafe { libc::pthread_self() });
    let ep = Epoll::new();
    match kind {
        Kind::EpollWait => ep.add(&s.mem, Events::IN, 1).unwrap(),
        Kind::EpollKernelSide => {
            ep.add(&s.mem, Events::IN, 1).unwrap();
            ep.add(&s.kern, Events::IN, 2).unwrap();
        }
        _ => {}
    }
    let mut evs = [Event::default(); 4];
    while !s.stop.load(SeqCst) {
        let got = match kind {
            Kind::Read => s.mem.read().expect("read under signals"),
            Kind::ReadTimeout => match s.mem.read_timeout(Duration::from_millis(30)) {
                Ok(v) => v,
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => 0,
                Err(e) => panic!("read_timeout under signals: {e}"),
            },
            Kind::KernelRead => s.kern.read().expect("kernel read under signals"),
            Kind::EpollWait | Kind::EpollKernelSide => {
                let k = ep.wait(&mut evs, None).expect("wait under signals");
                let mut v = 0;
                for e in &evs[..k] {
                    let r = if e.data == 1 {
                        s.mem.try_read()
                    } else {
                        s.kern.try_read()
                    };
                    v += r.unwrap_or(0);
                }
                v
            }
        };
        s.read.fetch_add(got, SeqCst);
        OPS.fetch_add(1, SeqCst);
    }
}

#[test]
fn signals_without_sa_restart_lose_nothing() {
    let _g = serial();
    install();
    bounded("signals", LIMIT * 2, || {
        let s = Arc::new(Shared {
            mem: Notifier::new(),
            kern: KernelNotifier::new(Mode::Counter).unwrap(),
            read: AtomicU64::new(0),
            stop: AtomicBool::new(false),
        });
        let ids = Arc::new(Mutex::new(Vec::new()));
        let kinds = [
            Kind::Read,
            Kind::ReadTimeout,
            Kind::EpollWait,
            Kind::EpollKernelSide,
            Kind::KernelRead,
        ];
        let readers: Vec<_> = kinds
            .iter()
            .map(|&k| {
                let (s, ids) = (Arc::clone(&s), Arc::clone(&ids));
                thread::spawn(move || reader(s, k, ids))
            })
            .collect();
        wait_until("readers registered", LIMIT, || {
            ids.lock().unwrap().len() == kinds.len()
        });
        let killing = Arc::new(AtomicBool::new(true));
        let sent = Arc::new(AtomicU64::new(0));
        let killer = {
            let (ids, killing, sent) = (Arc::clone(&ids), Arc::clone(&killing), Arc::clone(&sent));
            thread::spawn(move || {
                let ids = ids.lock().unwrap().clone();
                while killing.load(SeqCst) {
                    for &t in &ids {
                        // SAFETY: every reader thread is alive until `killing` is cleared
                        // and this thread joined (the readers only leave after that).
                        assert_eq!(unsafe { libc::pthread_kill(t, libc::SIGUSR1) }, 0);
                        sent.fetch_add(1, SeqCst);
                    }
                    thread::sleep(Duration::from_micros(200));
                }
            })
        };
        let per_writer = scale(200_000, 1_500_000);
        let writers: Vec<_> = (0..2)
            .map(|w| {
                let s = Arc::clone(&s);
                thread::spawn(move || {
                    let mut sum = 0;
                    for i in 0..per_writer {
                        let v = 1 + (i + w) % 3;
                        if i % 2 == 0 {
                            s.mem.write(v).expect("write under signals");
                        } else {
                            s.kern.write(v).expect("kernel write under signals");
                        }
                        sum += v;
                        OPS.fetch_add(1, SeqCst);
                    }
                    sum
                })
            })
            .collect();
        let total: u64 = writers
            .into_iter()
            .map(|w| join_within("signal writer", LIMIT, w))
            .sum();
        wait_until("every unit read under signals", LIMIT, || {
            s.read.load(SeqCst) >= total
        });
        killing.store(false, SeqCst);
        join_within("killer", LIMIT, killer);
        s.stop.store(true, SeqCst);
        let t0 = Instant::now();
        let mut sentinels = 0;
        while !readers.iter().all(|r| r.is_finished()) {
            assert!(t0.elapsed() < LIMIT, "watchdog: readers did not leave");
            s.mem.write(1).unwrap();
            s.kern.write(1).unwrap();
            sentinels += 2;
            thread::sleep(Duration::from_millis(1));
        }
        for r in readers {
            r.join().expect("reader");
        }
        let left = s.mem.count() + s.kern.count().unwrap();
        assert_eq!(s.read.load(SeqCst) + left, total + sentinels);
        assert!(sent.load(SeqCst) > 0 && HANDLED.load(SeqCst) > 0);
        UNITS_CHECKED.fetch_add(total, SeqCst);
        eprintln!(
            "signals: {total} units, {} signals sent, {} handled",
            sent.load(SeqCst),
            HANDLED.load(SeqCst)
        );
    });
}
