//! Conservation across every mode × wait style: 3 writers × 3 readers, every unit written
//! is read exactly once (`sum read + count left == sum written + sentinels`), and every
//! unit becomes readable without anybody polling again (the readers reach the written sum
//! under a watchdog). AutoReset consumed through an epoll or an fd view has no readable
//! units (the delivery resets the count): there, every write's wake must be delivered —
//! the count must come back to 0 with the readers asleep.

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Mode, Notifier};

use crate::harness::{
    bounded, join_within, scale, serial, wait_until, writer_pause, Rng, OPS, UNITS_CHECKED,
};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Style {
    Read,
    ReadTimeout,
    TrySpin,
    TokioAsync,
    BlockOn,
    EpollLt,
    EpollEt,
    EpollOneshot,
    FdView,
}

pub const STYLES: [Style; 9] = [
    Style::Read,
    Style::ReadTimeout,
    Style::TrySpin,
    Style::TokioAsync,
    Style::BlockOn,
    Style::EpollLt,
    Style::EpollEt,
    Style::EpollOneshot,
    Style::FdView,
];

const WRITERS: usize = 3;
const READERS: usize = 3;
const LIMIT: Duration = Duration::from_secs(120);

/// What the readers share.
struct Shared {
    n: Notifier,
    read: AtomicU64,
    deliveries: AtomicU64,
    stop: AtomicBool,
}

impl Shared {
    fn add(&self, v: u64) {
        self.read.fetch_add(v, SeqCst);
        OPS.fetch_add(1, SeqCst);
    }
    fn stopped(&self) -> bool {
        self.stop.load(SeqCst)
    }
}

/// Units are countable unless an AutoReset delivery (epoll, fd view) consumes them.
fn countable(mode: Mode, style: Style) -> bool {
    mode != Mode::AutoReset
        || !matches!(
            style,
            Style::EpollLt | Style::EpollEt | Style::EpollOneshot | Style::FdView
        )
}

/// Take everything readable now (`try_read` until `WouldBlock`).
fn drain(s: &Shared) {
    while let Ok(v) = s.n.try_read() {
        s.add(v);
    }
}

fn epoll_flags(style: Style) -> Events {
    match style {
        Style::EpollEt => Events::IN | Events::ET,
        Style::EpollOneshot => Events::IN | Events::ONESHOT,
        _ => Events::IN,
    }
}

/// One reader thread's loop for a thread-based style.
fn reader(s: Arc<Shared>, style: Style, ep: Option<Epoll>, view: Option<Arc<evfd::FdView>>) {
    let auto = s.n.mode() == Mode::AutoReset;
    let mut evs = [Event::default(); 4];
    while !s.stopped() {
        match style {
            Style::Read => s.add(s.n.read().expect("read")),
            Style::ReadTimeout => match s.n.read_timeout(Duration::from_millis(20)) {
                Ok(v) => s.add(v),
                Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                Err(e) => panic!("read_timeout: {e}"),
            },
            Style::TrySpin => match s.n.try_read() {
                Ok(v) => s.add(v),
                Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => thread::yield_now(),
                Err(e) => panic!("try_read: {e}"),
            },
            Style::BlockOn => {
                s.add(futures::executor::block_on(s.n.read_async()).expect("read_async"))
            }
            Style::EpollLt | Style::EpollEt | Style::EpollOneshot => {
                let ep = ep.as_ref().expect("epoll");
                let got = ep.wait(&mut evs, None).expect("wait");
                assert!(got <= 1, "one source, at most one event");
                if got == 1 {
                    assert!(evs[0].events.contains(Events::IN), "{:?}", evs[0]);
                    if auto {
                        s.deliveries.fetch_add(1, SeqCst);
                        OPS.fetch_add(1, SeqCst);
                    } else {
                        drain(&s);
                    }
                }
                if style == Style::EpollOneshot {
                    ep.modify(&s.n, epoll_flags(style), 0).expect("re-arm");
                }
            }
            Style::FdView => {
                let view = view.as_ref().expect("view");
                let fd = view.as_fd();
                let mut fds = [rustix::event::PollFd::new(
                    &fd,
                    rustix::event::PollFlags::IN,
                )];
                let ts = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 20_000_000,
                };
                match rustix::event::poll(&mut fds, Some(&ts)) {
                    Ok(_) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => panic!("poll: {e}"),
                }
                if auto {
                    if view.consume().contains(Events::IN) {
                        s.deliveries.fetch_add(1, SeqCst);
                        OPS.fetch_add(1, SeqCst);
                    }
                } else {
                    drain(&s);
                }
            }
            Style::TokioAsync => unreachable!("tasks, not threads"),
        }
    }
}

/// Run one configuration. Returns the units checked.
pub fn run(mode: Mode, style: Style, per_writer: u64, seed: u64) -> u64 {
    let name = format!("conservation {mode:?} × {style:?}");
    let n = Notifier::builder().mode(mode).build().unwrap();
    // Every writer's values, fixed up front so the expected sum is known.
    let plans: Vec<Vec<u64>> = (0..WRITERS)
        .map(|w| {
            let mut r = Rng(seed.wrapping_mul(31).wrapping_add(w as u64 + 1) | 1);
            (0..per_writer).map(|_| 1 + r.below(3)).collect()
        })
        .collect();
    let total: u64 = plans.iter().flatten().sum();
    let writes: u64 = plans.iter().map(|p| p.len() as u64).sum();
    let s = Arc::new(Shared {
        n: n.clone(),
        read: AtomicU64::new(0),
        deliveries: AtomicU64::new(0),
        stop: AtomicBool::new(false),
    });
    let ep = matches!(style, Style::EpollLt | Style::EpollEt | Style::EpollOneshot).then(|| {
        let ep = Epoll::new();
        ep.add(&n, epoll_flags(style), 0).unwrap();
        ep
    });
    let view = (style == Style::FdView).then(|| Arc::new(n.fd_view().unwrap()));

    // Readers: threads, or tasks on a 2-worker tokio runtime.
    let rt = (style == Style::TokioAsync).then(|| {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .build()
            .unwrap()
    });
    let mut threads = Vec::new();
    let mut tasks = Vec::new();
    for _ in 0..READERS {
        let s = Arc::clone(&s);
        if let Some(rt) = &rt {
            tasks.push(rt.spawn(async move {
                while !s.stopped() {
                    let v = s.n.read_async().await.expect("read_async");
                    s.add(v);
                }
            }));
        } else {
            let (ep, view) = (ep.clone(), view.clone());
            threads.push(thread::spawn(move || reader(s, style, ep, view)));
        }
    }
    let writers: Vec<_> = plans
        .into_iter()
        .enumerate()
        .map(|(w, plan)| {
            let n = n.clone();
            thread::spawn(move || {
                let mut pause = Rng(seed ^ (w as u64 + 11) | 1);
                for v in plan {
                    n.write(v).expect("write");
                    OPS.fetch_add(1, SeqCst);
                    writer_pause(&mut pause);
                }
            })
        })
        .collect();
    for w in writers {
        join_within(&format!("{name}: writer"), LIMIT, w);
    }
    let checked = if countable(mode, style) {
        // Every unit becomes readable and is read, with nobody polling again.
        wait_until(&format!("{name}: all {total} units read"), LIMIT, || {
            s.read.load(SeqCst) >= total
        });
        total
    } else {
        // AutoReset: every write's wake is delivered (the count comes back to 0).
        wait_until(&format!("{name}: last write delivered"), LIMIT, || {
            n.count() == 0
        });
        let d = s.deliveries.load(SeqCst);
        assert!(
            (1..=writes).contains(&d),
            "{name}: {d} deliveries for {writes} writes"
        );
        writes
    };

    // Release the readers: sentinel units until every one of them has left.
    s.stop.store(true, SeqCst);
    let mut sentinels = 0u64;
    let t0 = Instant::now();
    let all_done = |threads: &Vec<thread::JoinHandle<()>>,
                    tasks: &Vec<tokio::task::JoinHandle<()>>| {
        threads.iter().all(|t| t.is_finished()) && tasks.iter().all(|t| t.is_finished())
    };
    while !all_done(&threads, &tasks) {
        assert!(
            t0.elapsed() < LIMIT,
            "watchdog: {name}: readers did not leave"
        );
        n.write(1).unwrap();
        sentinels += 1;
        thread::sleep(Duration::from_millis(1));
    }
    for t in threads {
        t.join().expect("reader");
    }
    if let Some(rt) = rt {
        for t in tasks {
            rt.block_on(t).expect("reader task");
        }
    }
    if countable(mode, style) {
        let read = s.read.load(SeqCst);
        assert_eq!(
            read + n.count(),
            total + sentinels,
            "{name}: read {read} + left {} != written {total} + sentinels {sentinels}",
            n.count()
        );
    }
    UNITS_CHECKED.fetch_add(checked, SeqCst);
    checked
}

fn run_mode(mode: Mode) {
    let _g = serial();
    let per_writer = scale(30_000, 1_000_000);
    for (i, style) in STYLES.into_iter().enumerate() {
        let t0 = Instant::now();
        let checked = bounded("conservation", LIMIT * 2, move || {
            run(mode, style, per_writer, 0x9e37_79b9 + i as u64)
        });
        eprintln!(
            "conservation {mode:?} × {style:?}: {checked} units checked in {:?}",
            t0.elapsed()
        );
    }
}

#[test]
fn conservation_counter() {
    run_mode(Mode::Counter);
}

#[test]
fn conservation_semaphore() {
    run_mode(Mode::Semaphore);
}

#[test]
fn conservation_autoreset() {
    run_mode(Mode::AutoReset);
}
