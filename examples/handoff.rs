//! A fixed number of cross-thread hand-offs, for counting what one costs (docs/handoff.md):
//! instructions under `valgrind --tool=callgrind`, syscalls under `strace -c -f`. It prints
//! nothing but the round trips done; time is not its business (that is `stress_epoll`'s).
//!
//! ```sh
//! cargo build --release --example handoff
//! valgrind --tool=callgrind --separate-threads=yes target/release/examples/handoff epoll 20000
//! strace -c -f target/release/examples/handoff kepoll 20000
//! ```
//!
//! Modes (one round trip = two hand-offs, one each way):
//!
//! - `epoll`: each thread waits on its own notifier through its own `Epoll` (blocking
//!   `wait`, then `read`), as `stress_epoll`'s `pingpong block`; `epoll_auto` the same with
//!   AutoReset notifiers and no `read`.
//! - `read`: each thread blocks in `Notifier::read` on its own notifier; `shared` the same
//!   with `SharedNotifier`s (`xproc pingpong_block`'s protocol, in two threads).
//! - `async`: two tasks on a 2-worker tokio runtime, `write` + `read_async`.
//! - `kepoll`, `kread`: the kernel twins of `epoll` and `read` (eventfd + epoll_wait + read).
//! - `notify`: tokio `Notify` between two tasks (the async peer); `listener`: the same with
//!   event-listener's token (a flag and an `Event`, `stress_epoll`'s `listener async`), and
//!   `lread` its blocking form between two threads (as `read`; `stress_epoll`'s `listener
//!   block-*`).
//! - Not hand-offs, per-operation counts: `queued` (a `write` + `read` pair while the
//!   notifier's epoll item is queued; `squeued` the pair on a `SharedNotifier`), `harvest`
//!   (per event of a 200-event level-triggered harvest), `fdwake` (a blocking
//!   `Epoll::wait` returning one ready `KernelNotifier`) and its kernel twin `kfdwake`
//!   (`write`, `epoll_wait`, `read`); `asyncwake` (a task's `wait_async` woken through
//!   its runtime's reactor by a kernel fd, `stress_epoll`'s `mixed wake_async`, built with
//!   `--features tokio`) and its twin `kasyncwake` (tokio's `AsyncFd` on an eventfd, read
//!   until `EAGAIN`). Each wake of these two is preceded by a 300 µs pause (the task is
//!   asleep in its runtime when the write lands), and everything is counted (the runtime's
//!   reactor, the harness), the same in both; `spinrt`, the work of a spinning `epoll`
//!   round trip whose spins catch their wakes at once, in one thread.
//!
//! A third argument `parked` makes each thread sleep 300 µs before it writes, so that the
//! peer is certainly asleep when the write lands: the hand-off then takes the full path
//! (futex wake, futex wait). Without it the two threads run freely, and a wake may find
//! its waiter still running (or spinning). `cross` pins the two threads to CPUs 0 and 1.

use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Duration;

use evfd::{Epoll, Event, Events, Mode, Notifier};
use rustix::event::{epoll, eventfd, EventfdFlags};

#[path = "stress_epoll/twin.rs"]
mod twin;
use twin::Token;

/// `Notifier::write(1)`, as a function of its own: the notifier's fast path inlines into its
/// caller, so the instruction count's toggles (`scripts/handoff_count.py`) name this.
#[inline(never)]
fn notifier_write(x: &Notifier) {
    x.write(1).expect("write");
}

/// `Notifier::read()`, as a function of its own (as [`notifier_write`]).
#[inline(never)]
fn notifier_read(x: &Notifier) -> u64 {
    x.read().expect("read")
}

/// `SharedNotifier::write(1)`, as a function of its own (as [`notifier_write`]).
#[inline(never)]
fn shared_write(x: &evfd::SharedNotifier) {
    x.write(1).expect("write");
}

/// `SharedNotifier::read()`, as a function of its own (as [`notifier_write`]).
#[inline(never)]
fn shared_read(x: &evfd::SharedNotifier) -> u64 {
    x.read().expect("read")
}

fn kfd() -> OwnedFd {
    eventfd(0, EventfdFlags::CLOEXEC).expect("eventfd")
}

fn kwrite(fd: &OwnedFd, n: u64) {
    rustix::io::write(fd, &n.to_ne_bytes()).expect("eventfd write");
}

fn kread(fd: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    rustix::io::read(fd, &mut b).expect("eventfd read");
    u64::from_ne_bytes(b)
}

fn kepoll_of(fd: &OwnedFd) -> OwnedFd {
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
    epoll::add(&ep, fd, epoll::EventData::new_u64(0), epoll::EventFlags::IN).expect("add");
    ep
}

fn kwait(ep: &OwnedFd) {
    let mut buf = [std::mem::MaybeUninit::uninit(); 1];
    loop {
        let (got, _) = epoll::wait(ep, &mut buf, None).expect("epoll_wait");
        if !got.is_empty() {
            return;
        }
    }
}

/// Before a write: with `parked`, give the peer time to fall asleep.
fn pause() {
    if PARKED.load(std::sync::atomic::Ordering::Relaxed) {
        std::thread::sleep(Duration::from_micros(300));
    }
}

static PARKED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

static CROSS: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// With `cross`, pin the calling thread to `cpu`.
fn pin(cpu: usize) {
    if CROSS.load(std::sync::atomic::Ordering::Relaxed) {
        let mut set = rustix::thread::CpuSet::new();
        set.set(cpu);
        rustix::thread::sched_setaffinity(None, &set).expect("sched_setaffinity");
    }
}

/// Run `ping` here and `pong` on a second thread, `n` round trips.
fn two_threads(n: u64, ping: impl FnOnce(u64), pong: impl FnOnce(u64) + Send + 'static) {
    let t = std::thread::spawn(move || {
        pin(1);
        pong(n)
    });
    pin(0);
    ping(n);
    t.join().expect("pong thread");
}

fn epoll_mode(n: u64, mode: Mode) {
    let new = || Notifier::builder().mode(mode).build().expect("notifier");
    let (a, b) = (new(), new());
    let (ea, eb) = (Epoll::new(), Epoll::new());
    ea.add(&a, Events::IN, 0).expect("add");
    eb.add(&b, Events::IN, 0).expect("add");
    let read = mode != Mode::AutoReset;
    let (a2, b2) = (a.clone(), b.clone());
    two_threads(
        n,
        move |n| {
            let mut buf = [Event::default(); 1];
            for _ in 0..n {
                pause();
                notifier_write(&b);
                while ea.wait(&mut buf, None).expect("wait") == 0 {}
                if read {
                    notifier_read(&a);
                }
            }
        },
        move |n| {
            let mut buf = [Event::default(); 1];
            for _ in 0..n {
                while eb.wait(&mut buf, None).expect("wait") == 0 {}
                if read {
                    notifier_read(&b2);
                }
                pause();
                notifier_write(&a2);
            }
        },
    );
}

fn read_mode(n: u64) {
    read_pingpong(n, Notifier::new(), Notifier::new(), notifier_write, |x| {
        notifier_read(x);
    });
}

/// `read_mode` with `SharedNotifier`s (the cross-process notifier's futex protocol; two
/// threads here, the same words and syscalls as two processes): `xproc pingpong_block`.
fn shared_mode(n: u64) {
    read_pingpong(
        n,
        evfd::SharedNotifier::new(Mode::Counter).expect("shared"),
        evfd::SharedNotifier::new(Mode::Counter).expect("shared"),
        shared_write,
        |x| {
            shared_read(x);
        },
    );
}

/// The blocking ping-pong of `read_mode` and `shared_mode` over two notifiers `a` and `b`
/// of one kind: this thread writes `b` and reads `a`, the other reads `b` and writes `a`.
/// `write` and `read` call the kind's own methods through this example's wrappers (the
/// symbols `handoff_count.py` counts).
fn read_pingpong<N: Clone + Send + 'static>(n: u64, a: N, b: N, write: fn(&N), read: fn(&N)) {
    let (a2, b2) = (a.clone(), b.clone());
    two_threads(
        n,
        move |n| {
            for _ in 0..n {
                pause();
                write(&b);
                read(&a);
            }
        },
        move |n| {
            for _ in 0..n {
                read(&b2);
                pause();
                write(&a2);
            }
        },
    );
}

/// event-listener's give, as a function of its own (as [`notifier_write`]).
#[inline(never)]
fn listener_give(t: &Arc<Token>) {
    t.give();
}

/// event-listener's blocking take, as a function of its own (as [`notifier_write`]).
#[inline(never)]
fn listener_take(t: &Arc<Token>) {
    t.wait_forever();
}

fn lread_mode(n: u64) {
    let (a, b) = (Arc::new(Token::default()), Arc::new(Token::default()));
    read_pingpong(n, a, b, listener_give, listener_take);
}

fn kepoll_mode(n: u64) {
    let (a, b) = (Arc::new(kfd()), Arc::new(kfd()));
    let (ea, eb) = (kepoll_of(&a), kepoll_of(&b));
    let (a2, b2) = (a.clone(), b.clone());
    two_threads(
        n,
        move |n| {
            for _ in 0..n {
                pause();
                kwrite(&b, 1);
                kwait(&ea);
                kread(&a);
            }
        },
        move |n| {
            for _ in 0..n {
                kwait(&eb);
                kread(&b2);
                pause();
                kwrite(&a2, 1);
            }
        },
    );
}

fn kread_mode(n: u64) {
    let (a, b) = (Arc::new(kfd()), Arc::new(kfd()));
    let (a2, b2) = (a.clone(), b.clone());
    two_threads(
        n,
        move |n| {
            for _ in 0..n {
                pause();
                kwrite(&b, 1);
                kread(&a);
            }
        },
        move |n| {
            for _ in 0..n {
                kread(&b2);
                pause();
                kwrite(&a2, 1);
            }
        },
    );
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .build()
        .expect("tokio runtime")
}

fn async_mode(n: u64) {
    let rt = runtime();
    let (a, b) = (Notifier::new(), Notifier::new());
    let (a2, b2) = (a.clone(), b.clone());
    rt.block_on(async move {
        let pong = tokio::spawn(async move {
            for _ in 0..n {
                a2.read_async().await.expect("read_async");
                b2.write(1).expect("write");
            }
        });
        let ping = tokio::spawn(async move {
            for _ in 0..n {
                a.write(1).expect("write");
                b.read_async().await.expect("read_async");
            }
        });
        ping.await.expect("ping");
        pong.await.expect("pong");
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

fn notify_mode(n: u64) {
    use tokio::sync::Notify;
    let rt = runtime();
    let (a, b) = (Arc::new(Notify::new()), Arc::new(Notify::new()));
    let (a2, b2) = (a.clone(), b.clone());
    rt.block_on(async move {
        let pong = tokio::spawn(async move {
            for _ in 0..n {
                a2.notified().await;
                b2.notify_one();
            }
        });
        let ping = tokio::spawn(async move {
            for _ in 0..n {
                a.notify_one();
                b.notified().await;
            }
        });
        ping.await.expect("ping");
        pong.await.expect("pong");
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

fn listener_mode(n: u64) {
    let rt = runtime();
    let (a, b) = (Arc::new(Token::default()), Arc::new(Token::default()));
    let (a2, b2) = (a.clone(), b.clone());
    rt.block_on(async move {
        let pong = tokio::spawn(async move {
            for _ in 0..n {
                a2.wait_async().await;
                b2.give();
            }
        });
        let ping = tokio::spawn(async move {
            for _ in 0..n {
                a.give();
                b.wait_async().await;
            }
        });
        ping.await.expect("ping");
        pong.await.expect("pong");
    });
    rt.shutdown_timeout(Duration::from_secs(1));
}

/// Not a hand-off: the producer's path while its consumer's epoll item is queued (seed_in's
/// shape). An epoll holds the notifier for `IN`, level-triggered, and nobody harvests; each
/// "round trip" is two `write` + `read` pairs, so the per-hand-off figures of
/// `scripts/handoff_count.py` are per pair.
fn queued_mode(n: u64) {
    let ep = Epoll::new();
    let a = Notifier::new();
    ep.add(&a, Events::IN, 0).expect("add");
    for _ in 0..2 * n {
        notifier_write(&a);
        notifier_read(&a);
    }
    drop(ep);
}

/// Not a hand-off: `queued`'s pair on a `SharedNotifier` (nobody waits; each "round trip"
/// is two `write` + `read` pairs, so the per-hand-off figures are per pair).
fn squeued_mode(n: u64) {
    let a = evfd::SharedNotifier::new(Mode::Counter).expect("shared");
    for _ in 0..2 * n {
        shared_write(&a);
        shared_read(&a);
    }
}

/// Not a hand-off: `stress_epoll`'s `harvest` shape. 200 ready level-triggered notifiers in
/// one epoll; each `wait(timeout 0)` returns all 200. Runs `2n` events' worth of harvests, so
/// the per-hand-off figures of `scripts/handoff_count.py` are per event.
fn harvest_mode(n: u64) {
    const R: usize = 200;
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..R)
        .map(|_| Notifier::builder().initial(1).build().expect("notifier"))
        .collect();
    for (i, x) in ns.iter().enumerate() {
        ep.add(x, Events::IN, i as u64).expect("add");
    }
    let mut buf = vec![Event::default(); R];
    for _ in 0..(2 * n as usize).div_ceil(R) {
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).expect("wait"), R);
    }
    drop(ns);
}

/// Not a hand-off: one kernel-fd wake without the sleep (`mixed`'s blocking shape, the
/// event already there): an AutoReset `KernelNotifier` in an `Epoll`, a raw eventfd write,
/// a blocking `wait` that returns it. Each "round trip" is two wakes, so the per-hand-off
/// figures are per wake (only `Epoll::wait` is counted).
fn fdwake_mode(n: u64) {
    use std::os::fd::AsFd;
    let k = evfd::KernelNotifier::new(Mode::AutoReset).expect("eventfd");
    let ep = Epoll::new();
    ep.add(&k, Events::IN, 1).expect("add");
    let mut buf = [Event::default(); 4];
    for _ in 0..2 * n {
        rustix::io::write(k.as_fd(), &1u64.to_ne_bytes()).expect("write");
        assert_eq!(ep.wait(&mut buf, None).expect("wait"), 1);
    }
}

/// `fdwake`'s kernel twin: eventfd write, `epoll_wait`, `read` (everything counted).
fn kfdwake_mode(n: u64) {
    let a = kfd();
    let ep = kepoll_of(&a);
    for _ in 0..2 * n {
        kwrite(&a, 1);
        kwait(&ep);
        kread(&a);
    }
}

/// Not a hand-off: `mixed`'s async wake (`stress_epoll`). An AutoReset `KernelNotifier` in an
/// `Epoll`, a task on a current-thread runtime (with I/O) in `wait_async`, and this thread
/// writing the eventfd (a raw `write(2)`, as the twin) once the task sleeps, then waiting
/// for its answer. Each "round trip" is two wakes, so the per-hand-off figures are per wake.
fn asyncwake_mode(n: u64) {
    use std::os::fd::AsFd;
    let k = Arc::new(evfd::KernelNotifier::new(Mode::AutoReset).expect("eventfd"));
    let ep = Epoll::new();
    ep.add(&*k, Events::IN, 1).expect("add");
    async_wakes(
        n,
        move || rustix::io::write(k.as_fd(), &1u64.to_ne_bytes()).map(drop),
        move || {
            let ep = ep.clone();
            async move {
                let mut buf = [Event::default(); 4];
                while ep.wait_async(&mut buf).await.expect("wait_async") == 0 {}
            }
        },
    );
}

/// `asyncwake`'s twin: tokio's `AsyncFd` on a kernel eventfd, read until `EAGAIN` (the
/// read that finds it empty clears tokio's readiness), as `stress_epoll`'s twin does.
fn kasyncwake_mode(n: u64) {
    use tokio::io::unix::AsyncFd;
    let rt = io_runtime();
    let a = Arc::new(kfd());
    let afd = {
        let _g = rt.enter();
        // `new`'s soundness hole is an fd the value does not own; an `OwnedFd` owns its fd
        // until the `AsyncFd` drops it (and `register`, the replacement, is `unsafe`).
        #[allow(deprecated)]
        let afd = AsyncFd::new(nonblocking_dup(&a)).expect("AsyncFd");
        Arc::new(afd)
    };
    async_wakes_on(
        rt,
        n,
        move || rustix::io::write(&*a, &1u64.to_ne_bytes()).map(drop),
        move || {
            let afd = Arc::clone(&afd);
            async move {
                loop {
                    let mut guard = afd.readable().await.expect("readable");
                    let mut b = [0u8; 8];
                    match guard.try_io(|fd| {
                        rustix::io::read(fd.get_ref(), &mut b[..]).map_err(std::io::Error::from)
                    }) {
                        Ok(Ok(8)) => return,
                        Ok(r) => panic!("eventfd read: {r:?}"),
                        Err(_would_block) => continue,
                    }
                }
            }
        },
    );
}

/// A second fd on `fd`'s eventfd, non-blocking (a read that finds it empty returns `EAGAIN`).
fn nonblocking_dup(fd: &OwnedFd) -> OwnedFd {
    let d = fd.try_clone().expect("dup");
    rustix::io::ioctl_fionbio(&d, true).expect("FIONBIO");
    d
}

fn io_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_io()
        .build()
        .expect("tokio runtime")
}

/// `2n` wakes of the task `wait` makes, spawned on a current-thread runtime (with I/O) on its
/// own thread: this thread pauses 300 µs (the task is asleep), `write`s, and waits for the
/// task's answer.
fn async_wakes<F: std::future::Future<Output = ()> + Send + 'static>(
    n: u64,
    write: impl Fn() -> rustix::io::Result<()>,
    wait: impl Fn() -> F + Send + 'static,
) {
    async_wakes_on(io_runtime(), n, write, wait);
}

fn async_wakes_on<F: std::future::Future<Output = ()> + Send + 'static>(
    rt: tokio::runtime::Runtime,
    n: u64,
    write: impl Fn() -> rustix::io::Result<()>,
    wait: impl Fn() -> F + Send + 'static,
) {
    let (tx, rx) = std::sync::mpsc::channel();
    // A spawned task, as `stress_epoll`'s `mixed` runs its waiters (a spawned task's waker
    // is the same from one poll to the next; `block_on`'s is made anew for each poll).
    let t = std::thread::spawn(move || {
        let task = rt.spawn(async move {
            for _ in 0..2 * n {
                wait().await;
                tx.send(()).expect("answer");
            }
        });
        rt.block_on(task).expect("the waiting task");
    });
    for _ in 0..2 * n {
        std::thread::sleep(Duration::from_micros(300));
        write().expect("eventfd write");
        rx.recv().expect("the task's answer");
    }
    t.join().expect("runtime thread");
}

/// Not a hand-off as such: the work of `stress_epoll`'s spinning `pingpong` round trip,
/// done by one thread in the order the two threads do it when each spin catches its wake
/// at the first look (under callgrind two threads cannot overlap, so a spin never catches
/// anything there). Per round trip: `b.write`, the echo's harvest of it and `b.read`, the
/// echo's next wait re-polling the level-triggered item and dropping it, then the same the
/// other way. What it leaves out is the spin itself (clock reads and probes).
fn spinrt_mode(n: u64) {
    let (a, b) = (Notifier::new(), Notifier::new());
    let (ea, eb) = (Epoll::new(), Epoll::new());
    ea.add(&a, Events::IN, 0).expect("add");
    eb.add(&b, Events::IN, 0).expect("add");
    let mut buf = [Event::default(); 1];
    let z = Some(Duration::ZERO);
    for _ in 0..n {
        notifier_write(&b);
        assert_eq!(eb.wait(&mut buf, z).expect("wait"), 1);
        notifier_read(&b);
        assert_eq!(eb.wait(&mut buf, z).expect("wait"), 0);
        notifier_write(&a);
        assert_eq!(ea.wait(&mut buf, z).expect("wait"), 1);
        notifier_read(&a);
        assert_eq!(ea.wait(&mut buf, z).expect("wait"), 0);
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mode = args.next().unwrap_or_else(|| "epoll".into());
    let n: u64 = args
        .next()
        .map(|s| s.parse().expect("round trips: a number"))
        .unwrap_or(10_000);
    match args.next().as_deref() {
        None => {}
        Some("parked") => PARKED.store(true, std::sync::atomic::Ordering::Relaxed),
        Some("cross") => CROSS.store(true, std::sync::atomic::Ordering::Relaxed),
        Some(other) => {
            eprintln!("unknown option {other:?}: the third argument is `parked` or `cross`");
            std::process::exit(2);
        }
    }
    match mode.as_str() {
        "epoll" => epoll_mode(n, Mode::Counter),
        "epoll_auto" => epoll_mode(n, Mode::AutoReset),
        "read" => read_mode(n),
        "async" => async_mode(n),
        "kepoll" => kepoll_mode(n),
        "kread" => kread_mode(n),
        "notify" => notify_mode(n),
        "listener" => listener_mode(n),
        "lread" => lread_mode(n),
        "queued" => queued_mode(n),
        "squeued" => squeued_mode(n),
        "harvest" => harvest_mode(n),
        "fdwake" => fdwake_mode(n),
        "kfdwake" => kfdwake_mode(n),
        "asyncwake" => asyncwake_mode(n),
        "kasyncwake" => kasyncwake_mode(n),
        "spinrt" => spinrt_mode(n),
        "shared" => shared_mode(n),
        other => {
            eprintln!(
                "unknown mode {other:?}: epoll, epoll_auto, read, shared, async, kepoll, kread, notify, \
                 queued, squeued, harvest, fdwake, kfdwake, asyncwake, kasyncwake, spinrt"
            );
            std::process::exit(2);
        }
    }
    println!("{mode}: {n} round trips");
}
