//! Adversarial races on every face through which a private AutoReset `KernelNotifier` (its
//! count kept in memory: src/sys/mem_count.rs) is consumed or waited on, while writers
//! race: `read_async` (block_on, tokio), `Epoll::wait` / `wait_async` / `stream()` (every
//! executor, level- and edge-triggered, four registration shapes), a nested `Epoll`, the
//! epoll's fd view, the blocking `read` (asleep while the count is empty), a flush (a lend,
//! a clone, the halves, an item for more than `IN`, a fork, a write that finds no room)
//! racing the consumers, tokio's `AsyncNotifierFd` / `AsyncFd<KernelNotifier>` /
//! `AsyncEpollFd`, mio, several waiters of one epoll, two epolls holding the same
//! notifier, and consumers of different faces competing for it.
//!
//! The technique of `kernel_mem_count.rs`'s `a_write_racing_the_collect_is_delivered`: a
//! waiter announces its round (`turn`) right before it looks (a harvest, a read) and waits;
//! the writer spins until it sees the round and then for a delay that sweeps 0..512 spin
//! iterations (~20 µs in a debug build here; `EVFD_FACES_SPAN` widens it), so the write lands at a different point
//! of the waiter's path (its look, its registration, its sleep) round after round. Every
//! unit written and read (or every wake owed and delivered) is counted; a lost one fails a
//! per-round timeout or a whole-test watchdog (no progress for `STALL`), which names the
//! round: never a hang.
//!
//! The tests of this file run one at a time (`serial`): each keeps one or two threads
//! spinning, and the machine they were written for has 2 CPUs.

use std::io::ErrorKind;
use std::os::fd::{AsFd, AsRawFd};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod mem_util;

/// A blocking wait that hears nothing for this long lost its write.
const WAIT: Duration = Duration::from_secs(5);
/// The whole test made no progress for this long: a wake (or a unit) was lost.
const STALL: Duration = Duration::from_secs(8);

static SERIAL: Mutex<()> = Mutex::new(());

/// One test of this file at a time.
fn serial() -> MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

fn kick() -> Arc<KernelNotifier> {
    Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap())
}

/// The state one race shares: the waiter's announced round, the rounds done (the
/// watchdog's progress), and the first failure of any thread.
#[derive(Default)]
struct Race {
    turn: AtomicU64,
    done: AtomicU64,
    abort: AtomicBool,
    failure: Mutex<Option<String>>,
}

impl Race {
    fn new() -> Arc<Race> {
        Arc::new(Race::default())
    }

    /// Spin until the waiter announced `round` (`false` once the race is aborted).
    fn await_turn(&self, round: u64) -> bool {
        spin_until(&self.abort, || self.turn.load(SeqCst) >= round)
    }

    /// Spin until `done` reached `n` (`false` once the race is aborted).
    fn await_done(&self, n: u64) -> bool {
        spin_until(&self.abort, || self.done.load(SeqCst) >= n)
    }

    fn fail(&self, msg: String) {
        let mut f = self.failure.lock().unwrap_or_else(|e| e.into_inner());
        if f.is_none() {
            *f = Some(msg);
        }
        self.abort.store(true, SeqCst);
    }

    fn aborted(&self) -> bool {
        self.abort.load(SeqCst)
    }
}

/// Spin until `cond` (`false` once `abort` is set); after ~40 µs, yield between looks, so
/// that a spinner does not starve the thread it waits for (2 CPUs, three threads).
fn spin_until(abort: &AtomicBool, cond: impl Fn() -> bool) -> bool {
    let mut spins = 0u32;
    while !cond() {
        if abort.load(SeqCst) {
            return false;
        }
        if spins < 1_000 {
            spins += 1;
            std::hint::spin_loop();
        } else {
            std::thread::yield_now();
        }
    }
    true
}

/// The delay that sweeps the waiter's path, round after round (`salt` varies it between
/// writers).
fn sweep(round: u64, salt: u64) {
    sweep_in(round, salt, span())
}

/// The sweep's span, in spin iterations: 512 (~40 ns each in a debug build on the machine
/// this was written on: ~20 µs, the reach of a blocking wait's path into its sleep), or
/// `EVFD_FACES_SPAN` (a wider one reaches deeper into the slower faces' paths, at the cost
/// of time).
fn span() -> u64 {
    static SPAN: std::sync::OnceLock<u64> = std::sync::OnceLock::new();
    *SPAN.get_or_init(|| {
        std::env::var("EVFD_FACES_SPAN")
            .ok()
            .and_then(|v| v.parse().ok())
            .filter(|&v| v > 0)
            .unwrap_or(512)
    })
}

/// [`sweep`] over `span` iterations. The delay is `round` times an odd stride, modulo
/// `span` (a power of two): every `span` rounds take every delay once, and fewer rounds
/// spread over the whole span.
fn sweep_in(round: u64, salt: u64, span: u64) {
    let stride = (2 * salt + 1).wrapping_mul(40_503);
    for _ in 0..round.wrapping_mul(stride) % span {
        std::hint::spin_loop();
    }
}

fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<String>()
        .cloned()
        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_else(|| "a panic".into())
}

/// A thread of `race`: its panic is the race's failure.
fn spawn(race: &Arc<Race>, f: impl FnOnce() + Send + 'static) -> JoinHandle<()> {
    let race = Arc::clone(race);
    std::thread::spawn(move || {
        if let Err(p) = std::panic::catch_unwind(AssertUnwindSafe(f)) {
            race.fail(panic_message(&*p));
        }
    })
}

/// The watchdog: returns once `done` reaches `rounds`; panics with the first failure of a
/// thread, or when no round completed for `STALL` (the threads are then left behind:
/// spinning ones see `abort` and stop, blocked ones stay asleep).
fn watch(name: &str, race: &Race, rounds: u64) {
    let mut last = race.done.load(SeqCst);
    let mut since = Instant::now();
    loop {
        if let Some(f) = race.failure.lock().unwrap().clone() {
            panic!("{name}: {f}");
        }
        let d = race.done.load(SeqCst);
        if d >= rounds {
            return;
        }
        if d != last {
            last = d;
            since = Instant::now();
        } else if since.elapsed() > STALL {
            race.abort.store(true, SeqCst);
            panic!(
                "{name}: no progress for {STALL:?} at round {} of {rounds} (turn {}): \
                 a write's wake or unit was lost",
                d + 1,
                race.turn.load(SeqCst)
            );
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// `watch`, then join `threads` (each must have finished cleanly).
fn finish(name: &str, race: &Race, rounds: u64, threads: Vec<JoinHandle<()>>) {
    watch(name, race, rounds);
    for t in threads {
        t.join().unwrap();
    }
    if let Some(f) = race.failure.lock().unwrap().clone() {
        panic!("{name}: {f}");
    }
}

/// The ping-pong writer: one `notify` per round, after the waiter announced it and a
/// sweeping delay.
fn writer(race: &Arc<Race>, rounds: u64, write: impl Fn() + Send + 'static) -> JoinHandle<()> {
    writer_in(race, rounds, span(), write)
}

/// [`writer`] with a sweep over `span` spin iterations.
fn writer_in(
    race: &Arc<Race>,
    rounds: u64,
    span: u64,
    write: impl Fn() + Send + 'static,
) -> JoinHandle<()> {
    let r = Arc::clone(race);
    spawn(race, move || {
        for round in 1..=rounds {
            if !r.await_turn(round) {
                return;
            }
            sweep_in(round, 1, span);
            write();
        }
    })
}

/// One ping-pong's frame: a sweeping writer notifies `k` once a round; `waiter` runs on a
/// thread of its own with the race (it stores `turn` before each look and `done` after
/// each round); both are joined under the watchdog; then memory must still keep `k`'s
/// count (nothing in a ping-pong flushes it). `t0`: when the test's set-up began.
fn ping_pong(
    name: &str,
    t0: Instant,
    k: &Arc<KernelNotifier>,
    rounds: u64,
    waiter: impl FnOnce(Arc<Race>) + Send + 'static,
) {
    let race = Race::new();
    let w = {
        let k = Arc::clone(k);
        writer(&race, rounds, move || k.notify().unwrap())
    };
    let waiter = {
        let r = Arc::clone(&race);
        spawn(&race, move || waiter(r))
    };
    finish(name, &race, rounds, vec![w, waiter]);
    assert!(
        k.kernel_count_is_base(),
        "{name}: the count is still in memory (nothing here flushes it)"
    );
    eprintln!("{name}: {rounds} rounds in {:?}", t0.elapsed());
}

fn tokio_current() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

fn tokio_multi() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// How a waiter runs its async rounds.
#[derive(Clone, Copy, Debug)]
enum Exec {
    BlockOn,
    TokioCurrent,
    /// A task on a 2-worker runtime (not the thread that calls `block_on`).
    TokioMulti,
}

impl Exec {
    /// The runtime to run on (built here, so that a caller can enter it to make what must
    /// be made inside one); `None` for `block_on`.
    fn runtime(self) -> Option<tokio::runtime::Runtime> {
        match self {
            Exec::BlockOn => None,
            Exec::TokioCurrent => Some(tokio_current()),
            Exec::TokioMulti => Some(tokio_multi()),
        }
    }
}

/// Run `fut` on `exec` in the calling thread; a panic in it is re-raised here.
fn run_on<F>(exec: Exec, fut: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    run_in(exec, exec.runtime(), fut)
}

/// [`run_on`] with the runtime `exec.runtime()` made.
fn run_in<F>(exec: Exec, rt: Option<tokio::runtime::Runtime>, fut: F)
where
    F: std::future::Future<Output = ()> + Send + 'static,
{
    match (exec, rt) {
        (Exec::TokioMulti, Some(rt)) => {
            if let Err(e) = rt.block_on(rt.spawn(fut)) {
                if e.is_panic() {
                    std::panic::resume_unwind(e.into_panic());
                }
                panic!("task: {e}");
            }
        }
        (_, Some(rt)) => rt.block_on(fut),
        (_, None) => futures::executor::block_on(fut),
    }
}

// ---------------------------------------------------------------------------------------
// 1. `KernelNotifier::read_async`.

/// Ping-pong: each round the waiter awaits `read_async` and must read exactly the round's
/// unit.
fn read_async_ping_pong(exec: Exec, rounds: u64) {
    let name = format!("read_async on {exec:?}");
    let t0 = Instant::now();
    let k = kick();
    let k2 = Arc::clone(&k);
    ping_pong(&name, t0, &k, rounds, move |race| {
        run_on(exec, async move {
            for round in 1..=rounds {
                race.turn.store(round, SeqCst);
                let got = k2.read_async().await.unwrap();
                assert_eq!(got, 1, "round {round}: read_async read {got}, wanted 1");
                race.done.store(round, SeqCst);
            }
        })
    });
    assert_eq!(k.count().unwrap(), 0);
}

/// What the test can see of the kernel's count without lending (`mem_util`).
trait KernelCount {
    fn kernel_count_is_base(&self) -> bool;
}

impl KernelCount for KernelNotifier {
    /// Whether the kernel's count is the base (1): memory still keeps the count.
    fn kernel_count_is_base(&self) -> bool {
        mem_util::kernel_count(self) == 1
    }
}

#[test]
fn read_async_block_on_hears_every_write() {
    let _s = serial();
    read_async_ping_pong(Exec::BlockOn, 4_096);
}

#[test]
fn read_async_tokio_hears_every_write() {
    let _s = serial();
    read_async_ping_pong(Exec::TokioCurrent, 4_096);
    read_async_ping_pong(Exec::TokioMulti, 2_048);
}

/// Free-running writers (two, each `PER` writes of 1 with sweeping gaps) and one
/// `read_async` reader: every unit is read once, and the last ones wake the reader.
#[test]
fn read_async_free_running_writers_lose_no_unit() {
    let _s = serial();
    const PER: u64 = 4_000;
    for exec in [Exec::BlockOn, Exec::TokioCurrent] {
        let name = format!("read_async free-running on {exec:?}");
        let k = kick();
        let race = Race::new();
        let writers: Vec<_> = (0..2u64)
            .map(|i| {
                let (k, r) = (Arc::clone(&k), Arc::clone(&race));
                spawn(&race, move || {
                    for j in 1..=PER {
                        if r.aborted() {
                            return;
                        }
                        sweep(j, 3 + 2 * i);
                        k.write(1).unwrap();
                    }
                })
            })
            .collect();
        let reader = {
            let (k, race) = (Arc::clone(&k), Arc::clone(&race));
            spawn(&Arc::clone(&race), move || {
                run_on(exec, async move {
                    let mut read = 0;
                    while read < 2 * PER {
                        read += k.read_async().await.unwrap();
                        assert!(read <= 2 * PER, "read {read} of {} written", 2 * PER);
                        race.done.store(read, SeqCst);
                    }
                })
            })
        };
        let mut all = writers;
        all.push(reader);
        finish(&name, &race, 2 * PER, all);
        assert_eq!(
            k.try_read().unwrap_err().kind(),
            ErrorKind::WouldBlock,
            "{name}"
        );
    }
}

// ---------------------------------------------------------------------------------------
// 2. `Epoll::wait`, `wait_async`, `stream()`.

/// What else the epoll holds beside the notifier: the registration's shape decides the
/// collect (`src/epoll/kernel/fds.rs`): "One eventfd" read by its delivery, the bare sleep
/// and bare task (an epoll that never held an in-memory source), or the kernel epoll's
/// `epoll_wait` and the owner's reset.
#[derive(Clone, Copy, Debug)]
enum Shape {
    /// The notifier alone.
    Alone,
    /// And an idle in-memory `Notifier` (no bare sleep, no bare task).
    WithMemory,
    /// And a second, idle AutoReset `KernelNotifier` (not the one-eventfd shape).
    WithKernel,
    /// `WithMemory`, and a blocked `wait` spins 30 µs before it sleeps (`set_spin`).
    WithMemorySpin,
}

/// An epoll holding `k` (data 1) registered for `ev`, in `shape`; the extra sources are
/// returned to be kept alive.
fn epoll_for(k: &KernelNotifier, ev: Events, shape: Shape) -> (Epoll, Box<dyn Send + Sync>) {
    let ep = Epoll::new();
    ep.add(k, ev, 1).unwrap();
    let keep: Box<dyn Send + Sync> = match shape {
        Shape::Alone => Box::new(()),
        Shape::WithMemory | Shape::WithMemorySpin => {
            if let Shape::WithMemorySpin = shape {
                ep.set_spin(Some(Duration::from_micros(30)));
            }
            let n = Notifier::new();
            ep.add(&n, Events::IN, 2).unwrap();
            Box::new(n)
        }
        Shape::WithKernel => {
            let k2 = KernelNotifier::new(Mode::AutoReset).unwrap();
            ep.add(&k2, Events::IN, 3).unwrap();
            Box::new(k2)
        }
    };
    (ep, keep)
}

/// How the waiter of an epoll ping-pong waits.
#[derive(Clone, Copy, Debug)]
enum EpWait {
    /// `Epoll::wait` with a timeout of `WAIT` (a round that times out lost its write).
    Blocking,
    /// `wait_async`, a new future each round.
    Async(Exec),
    /// `stream().next()`, one stream for every round.
    #[cfg(feature = "futures")]
    Stream(Exec),
}

/// One epoll ping-pong: `rounds` rounds, each one write, each delivered exactly once.
fn epoll_ping_pong(how: EpWait, ev: Events, shape: Shape, rounds: u64) {
    let name = format!("{how:?}, {ev:?}, {shape:?}");
    let t0 = Instant::now();
    let k = kick();
    let (ep, keep) = epoll_for(&k, ev, shape);
    {
        let ep = ep.clone();
        ping_pong(&name, t0, &k, rounds, move |race| match how {
            EpWait::Blocking => {
                let mut buf = [Event::default(); 4];
                for round in 1..=rounds {
                    race.turn.store(round, SeqCst);
                    let n = ep.wait(&mut buf, Some(WAIT)).unwrap();
                    assert_eq!(
                        (n, buf[0].data),
                        (1, 1),
                        "round {round}: the write is heard within {WAIT:?} (0: lost)"
                    );
                    race.done.store(round, SeqCst);
                }
            }
            EpWait::Async(exec) => run_on(exec, async move {
                let mut buf = [Event::default(); 4];
                for round in 1..=rounds {
                    race.turn.store(round, SeqCst);
                    let n = ep.wait_async(&mut buf).await.unwrap();
                    assert_eq!((n, buf[0].data), (1, 1), "round {round}");
                    race.done.store(round, SeqCst);
                }
            }),
            #[cfg(feature = "futures")]
            EpWait::Stream(exec) => run_on(exec, async move {
                use futures::StreamExt;
                let mut s = ep.stream();
                for round in 1..=rounds {
                    race.turn.store(round, SeqCst);
                    let e = s.next().await.unwrap().unwrap();
                    assert_eq!(e.data, 1, "round {round}");
                    race.done.store(round, SeqCst);
                }
            }),
        });
    }
    let mut buf = [Event::default(); 4];
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(),
        0,
        "{name}: delivered once"
    );
    drop(keep);
}

const LT: Events = Events::IN;
fn et() -> Events {
    Events::IN | Events::ET
}

#[test]
fn epoll_blocking_wait_hears_every_write() {
    let _s = serial();
    epoll_ping_pong(EpWait::Blocking, LT, Shape::Alone, 8_192);
    epoll_ping_pong(EpWait::Blocking, et(), Shape::Alone, 3_072);
    epoll_ping_pong(EpWait::Blocking, LT, Shape::WithMemory, 3_072);
    epoll_ping_pong(EpWait::Blocking, et(), Shape::WithKernel, 3_072);
    epoll_ping_pong(EpWait::Blocking, LT, Shape::WithMemorySpin, 2_048);
}

#[test]
fn epoll_wait_async_block_on_hears_every_write() {
    let _s = serial();
    let ex = Exec::BlockOn;
    epoll_ping_pong(EpWait::Async(ex), LT, Shape::Alone, 4_096);
    epoll_ping_pong(EpWait::Async(ex), et(), Shape::WithMemory, 3_072);
    epoll_ping_pong(EpWait::Async(ex), LT, Shape::WithKernel, 3_072);
}

#[test]
fn epoll_wait_async_tokio_current_thread_hears_every_write() {
    let _s = serial();
    let ex = Exec::TokioCurrent;
    epoll_ping_pong(EpWait::Async(ex), LT, Shape::Alone, 6_144);
    epoll_ping_pong(EpWait::Async(ex), et(), Shape::Alone, 3_072);
    epoll_ping_pong(EpWait::Async(ex), LT, Shape::WithMemory, 3_072);
    epoll_ping_pong(EpWait::Async(ex), et(), Shape::WithKernel, 3_072);
}

#[test]
fn epoll_wait_async_tokio_multi_thread_hears_every_write() {
    let _s = serial();
    let ex = Exec::TokioMulti;
    epoll_ping_pong(EpWait::Async(ex), LT, Shape::Alone, 4_096);
    epoll_ping_pong(EpWait::Async(ex), et(), Shape::WithMemory, 3_072);
    epoll_ping_pong(EpWait::Async(ex), LT, Shape::WithKernel, 3_072);
}

#[cfg(feature = "futures")]
#[test]
fn epoll_stream_hears_every_write() {
    let _s = serial();
    epoll_ping_pong(EpWait::Stream(Exec::BlockOn), LT, Shape::Alone, 3_072);
    epoll_ping_pong(EpWait::Stream(Exec::TokioCurrent), LT, Shape::Alone, 4_096);
    epoll_ping_pong(
        EpWait::Stream(Exec::TokioCurrent),
        et(),
        Shape::WithMemory,
        3_072,
    );
    epoll_ping_pong(EpWait::Stream(Exec::TokioMulti), LT, Shape::Alone, 3_072);
}

// ---------------------------------------------------------------------------------------
// 3. An `Epoll` nested in another: the outer waits, the inner holds the notifier.

/// How the waiter of the nested ping-pong takes the round's write once the outer epoll
/// reported the inner one.
#[derive(Clone, Copy, Debug)]
enum Take {
    /// The inner epoll's `wait` with a zero timeout: its AutoReset delivery.
    InnerWait,
    /// The notifier's own `try_read` (the units), the inner epoll never harvested.
    TryRead,
}

/// Nested ping-pong: each round the outer epoll (holding the inner for `outer_ev`) must
/// report the inner one, and `take` must then get the round's write (a report that finds
/// nothing is spurious and waited through: only a round that never completes fails).
fn nested_ping_pong(how: Option<Exec>, outer_ev: Events, take: Take, rounds: u64) {
    let name = format!("nested, outer {outer_ev:?}, {take:?}, waited by {how:?}");
    let t0 = Instant::now();
    let k = kick();
    let inner = Epoll::new();
    inner.add(&*k, Events::IN, 1).unwrap();
    let outer = Epoll::new();
    outer.add(&inner, outer_ev, 2).unwrap();
    let spurious = Arc::new(AtomicU64::new(0));
    {
        let (k2, spurious) = (Arc::clone(&k), Arc::clone(&spurious));
        let (inner, outer) = (inner.clone(), outer.clone());
        // Takes the round's write, if it is there: 0 or 1.
        let take_now = move || -> u64 {
            match take {
                Take::InnerWait => {
                    let mut ib = [Event::default(); 4];
                    let m = inner.wait(&mut ib, Some(Duration::ZERO)).unwrap();
                    if m == 1 {
                        assert_eq!(ib[0].data, 1);
                    }
                    m as u64
                }
                Take::TryRead => match k2.try_read() {
                    Ok(c) => c,
                    Err(e) if e.kind() == ErrorKind::WouldBlock => 0,
                    Err(e) => panic!("try_read: {e}"),
                },
            }
        };
        ping_pong(&name, t0, &k, rounds, move |race| {
            let mut buf = [Event::default(); 4];
            match how {
                None => {
                    for round in 1..=rounds {
                        race.turn.store(round, SeqCst);
                        // The take first (the write may land inside its harvest), then
                        // the outer's wait, until the take gets the write.
                        let mut reported = false;
                        loop {
                            match take_now() {
                                0 if reported => spurious.fetch_add(1, SeqCst),
                                0 => 0,
                                1 => break,
                                c => panic!("round {round}: took {c}"),
                            };
                            let n = outer.wait(&mut buf, Some(WAIT)).unwrap();
                            assert!(
                                n == 1 && buf[0].data == 2,
                                "round {round}: the outer epoll reports the inner one \
                                 within {WAIT:?} (got {n}: lost)"
                            );
                            reported = true;
                        }
                        race.done.store(round, SeqCst);
                    }
                }
                Some(exec) => run_on(exec, async move {
                    for round in 1..=rounds {
                        race.turn.store(round, SeqCst);
                        let mut reported = false;
                        loop {
                            match take_now() {
                                0 if reported => spurious.fetch_add(1, SeqCst),
                                0 => 0,
                                1 => break,
                                c => panic!("round {round}: took {c}"),
                            };
                            let n = outer.wait_async(&mut buf).await.unwrap();
                            assert!(n == 1 && buf[0].data == 2, "round {round}: got {n}");
                            reported = true;
                        }
                        race.done.store(round, SeqCst);
                    }
                }),
            }
        });
    }
    eprintln!("{name}: {} spurious reports", spurious.load(SeqCst));
}

#[test]
fn nested_epoll_blocking_outer_hears_every_write() {
    let _s = serial();
    nested_ping_pong(None, LT, Take::InnerWait, 2_048);
    nested_ping_pong(None, et(), Take::InnerWait, 2_048);
    nested_ping_pong(None, LT, Take::TryRead, 2_048);
    nested_ping_pong(None, et(), Take::TryRead, 2_048);
}

#[test]
fn nested_epoll_async_outer_hears_every_write() {
    let _s = serial();
    nested_ping_pong(Some(Exec::BlockOn), LT, Take::InnerWait, 2_048);
    nested_ping_pong(Some(Exec::TokioCurrent), et(), Take::InnerWait, 2_048);
    nested_ping_pong(Some(Exec::TokioCurrent), LT, Take::TryRead, 2_048);
    nested_ping_pong(Some(Exec::TokioMulti), LT, Take::InnerWait, 1_024);
}

/// The epoll's fd view, waited on by `poll(2)` (and, for tokio, `AsyncEpollFd::wait`):
/// each round the view turns readable and a zero-timeout `wait` delivers the write.
#[test]
fn epoll_fd_view_hears_every_write() {
    let _s = serial();
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    for ev in [LT, et()] {
        let t0 = Instant::now();
        let rounds = 4_096;
        let name = format!("fd view of an epoll, {ev:?}, poll(2)");
        let k = kick();
        let ep = Epoll::new();
        ep.add(&*k, ev, 1).unwrap();
        let view = ep.fd_view().unwrap();
        let race = Race::new();
        let w = {
            let k = Arc::clone(&k);
            writer(&race, rounds, move || k.notify().unwrap())
        };
        let waiter = {
            let (race2, ep) = (Arc::clone(&race), ep.clone());
            spawn(&race, move || {
                let race = race2;
                let mut buf = [Event::default(); 4];
                let t = Timespec::try_from(WAIT).unwrap();
                for round in 1..=rounds {
                    race.turn.store(round, SeqCst);
                    // The harvest first (the write may land inside it), then the view's
                    // poll, until a harvest delivers the write.
                    while ep.wait(&mut buf, Some(Duration::ZERO)).unwrap() == 0 {
                        let mut fds = [PollFd::new(&view, PollFlags::IN)];
                        let n = poll(&mut fds, Some(&t)).unwrap();
                        assert_eq!(n, 1, "round {round}: the view turns readable (0: lost)");
                    }
                    assert_eq!(buf[0].data, 1);
                    race.done.store(round, SeqCst);
                }
            })
        };
        finish(&name, &race, rounds, vec![w, waiter]);
        eprintln!("{name}: {rounds} rounds in {:?}", t0.elapsed());
    }
}

// ---------------------------------------------------------------------------------------
// 4. The blocking `read`, asleep while the count is empty.

/// The blocking `read` racing two writers. Each round both writers write 1, each after its
/// own sweeping delay, and the reader takes exactly 2 with `read` then `read_timeout` (a
/// timeout lost a unit's wake). Phase 1 keeps one notifier for every round; phase 2 makes a
/// new one each round, so the reader's first empty look is on a fresh count each time.
/// (The blocking read of a count in memory once flushed it into the kernel for good at its
/// first empty look, and now sleeps on the count's futex, rung by the writes; the test
/// holds for both, and reports which ran.)
#[test]
fn blocking_read_hears_every_write() {
    let _s = serial();
    for fresh in [false, true] {
        let t0 = Instant::now();
        let rounds: u64 = if fresh { 2_048 } else { 4_096 };
        let name = format!("blocking read, two writers, new notifier each round: {fresh}");
        let slot: Arc<Mutex<Arc<KernelNotifier>>> = Arc::new(Mutex::new(kick()));
        let race = Race::new();
        let flushed = Arc::new(AtomicU64::new(0));
        let writers: Vec<_> = [1u64, 7]
            .into_iter()
            .map(|salt| {
                let (r, slot) = (Arc::clone(&race), Arc::clone(&slot));
                spawn(&race, move || {
                    for round in 1..=rounds {
                        if !r.await_turn(round) {
                            return;
                        }
                        let k = Arc::clone(&slot.lock().unwrap());
                        sweep(round, salt);
                        k.write(1).unwrap();
                    }
                })
            })
            .collect();
        let reader = {
            let (race2, slot, flushed) =
                (Arc::clone(&race), Arc::clone(&slot), Arc::clone(&flushed));
            spawn(&race, move || {
                let race = race2;
                let mut k = Arc::clone(&slot.lock().unwrap());
                for round in 1..=rounds {
                    if fresh {
                        k = kick();
                        *slot.lock().unwrap() = Arc::clone(&k);
                    }
                    race.turn.store(round, SeqCst);
                    let mut got = k.read().unwrap();
                    while got < 2 {
                        match k.read_timeout(WAIT) {
                            Ok(c) => got += c,
                            Err(e) => panic!("round {round}: read {got} of 2, then {e} (lost)"),
                        }
                    }
                    assert_eq!(got, 2, "round {round}: read twice");
                    assert_eq!(
                        k.try_read().unwrap_err().kind(),
                        ErrorKind::WouldBlock,
                        "round {round}"
                    );
                    if fresh && !k.kernel_count_is_base() {
                        flushed.fetch_add(1, SeqCst);
                    }
                    race.done.store(round, SeqCst);
                }
                if !fresh && !k.kernel_count_is_base() {
                    flushed.fetch_add(1, SeqCst);
                }
            })
        };
        let mut all = writers;
        all.push(reader);
        finish(&name, &race, rounds, all);
        eprintln!(
            "{name}: {rounds} rounds in {:?}; counts flushed by the reads: {}",
            t0.elapsed(),
            flushed.load(SeqCst)
        );
    }
}

/// A write that finds no room in memory flushes the count and waits for room in the
/// kernel: each round a new notifier, a writer writing `BIG` twice (the second does not
/// fit beside the first) and a reader taking them with `read_async`: `2 * BIG` read.
#[test]
fn a_write_that_finds_no_room_loses_no_unit() {
    let _s = serial();
    let t0 = Instant::now();
    const ROUNDS: u64 = 2_048;
    const BIG: u64 = evfd::LIMIT / 2 + 1;
    let name = "a write that finds no room";
    let slot: Arc<Mutex<Arc<KernelNotifier>>> = Arc::new(Mutex::new(kick()));
    let race = Race::new();
    let w = {
        let (r, slot) = (Arc::clone(&race), Arc::clone(&slot));
        spawn(&race, move || {
            for round in 1..=ROUNDS {
                if !r.await_turn(round) {
                    return;
                }
                let k = Arc::clone(&slot.lock().unwrap());
                k.write(BIG).unwrap();
                sweep(round, 1);
                k.write(BIG).unwrap();
            }
        })
    };
    let reader = {
        let (race2, slot) = (Arc::clone(&race), Arc::clone(&slot));
        spawn(&race, move || {
            let race = race2;
            futures::executor::block_on(async move {
                for round in 1..=ROUNDS {
                    let k = kick();
                    *slot.lock().unwrap() = Arc::clone(&k);
                    race.turn.store(round, SeqCst);
                    let mut got = 0u128;
                    while got < 2 * u128::from(BIG) {
                        got += u128::from(k.read_async().await.unwrap());
                    }
                    assert_eq!(got, 2 * u128::from(BIG), "round {round}");
                    race.done.store(round, SeqCst);
                }
            })
        })
    };
    finish(name, &race, ROUNDS, vec![w, reader]);
    eprintln!("{name}: {ROUNDS} rounds in {:?}", t0.elapsed());
}

// ---------------------------------------------------------------------------------------
// 5. A flush (a lend, a clone, an item for more than `IN`) racing writers and consumers.

/// What flushes the count mid-race.
#[derive(Clone, Copy, Debug)]
enum Flush {
    AsFd,
    AsRawFd,
    TryClone,
    /// An `Epoll` item for `IN | OUT` (more than `IN`), in another epoll.
    AddInOut,
    /// A `fork` (its `prepare` flushes every count memory keeps); the child `_exit`s.
    Fork,
    /// `KernelNotifier::halves` (two clones of the fd).
    Halves,
}

impl Flush {
    /// Flush `k`; returns what must stay alive until the end of the race.
    fn run(self, k: &KernelNotifier) -> Box<dyn Send> {
        match self {
            Flush::AsFd => {
                let _ = k.as_fd();
                Box::new(())
            }
            Flush::AsRawFd => {
                let _ = k.as_raw_fd();
                Box::new(())
            }
            Flush::TryClone => Box::new(k.try_clone().unwrap()),
            Flush::AddInOut => {
                let ep2 = Epoll::new();
                ep2.add(k, Events::IN | Events::OUT, 9).unwrap();
                Box::new(ep2)
            }
            Flush::Fork => {
                // SAFETY: the child only `_exit`s.
                let pid = unsafe { libc::fork() };
                assert!(pid >= 0, "fork: {}", std::io::Error::last_os_error());
                if pid == 0 {
                    // SAFETY: ends the child at once, running nothing of the parent's.
                    unsafe { libc::_exit(0) };
                }
                let mut status = 0;
                // SAFETY: `pid` is our child; `status` a valid out-pointer.
                assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
                assert_eq!(status, 0, "the child's status");
                Box::new(())
            }
            Flush::Halves => Box::new(k.halves().unwrap()),
        }
    }
}

/// The consumer of the flush race.
#[derive(Clone, Copy, Debug)]
enum Consumer {
    /// An `Epoll` holding the notifier for `IN`.
    Epoll(EpWait),
    /// `read_async`.
    ReadAsync(Exec),
    /// The blocking `read` (`read_timeout`: a timeout lost the write).
    BlockingRead,
}

/// `iterations` races, each on a new notifier: a ping-pong of `per` rounds with a third
/// thread flushing the count (`flush`) after the waiter announced a round that moves from
/// one race to the next, at a sweeping delay.
fn flush_race(flush: Flush, consumer: Consumer, iterations: u64, per: u64) {
    let name = format!("{flush:?} racing {consumer:?}");
    let t0 = Instant::now();
    for it in 0..iterations {
        let k = kick();
        let at = 2 + (it * 13) % (per - 4);
        let race = Race::new();
        let w = {
            let k = Arc::clone(&k);
            writer(&race, per, move || k.notify().unwrap())
        };
        let kept: Arc<Mutex<Option<Box<dyn Send>>>> = Arc::default();
        let flusher = {
            let (k, r, kept) = (Arc::clone(&k), Arc::clone(&race), Arc::clone(&kept));
            spawn(&race, move || {
                if !r.await_turn(at) {
                    return;
                }
                sweep(it, 5);
                *kept.lock().unwrap() = Some(flush.run(&k));
            })
        };
        let waiter = {
            let (race2, k) = (Arc::clone(&race), Arc::clone(&k));
            spawn(&race, move || {
                let race = race2;
                match consumer {
                    Consumer::Epoll(how) => {
                        let ep = Epoll::new();
                        ep.add(&*k, Events::IN, 1).unwrap();
                        let mut buf = [Event::default(); 4];
                        match how {
                            EpWait::Blocking => {
                                for round in 1..=per {
                                    race.turn.store(round, SeqCst);
                                    let n = ep.wait(&mut buf, Some(WAIT)).unwrap();
                                    assert_eq!(n, 1, "iteration {it}, round {round} (0: lost)");
                                    race.done.store(round, SeqCst);
                                }
                            }
                            EpWait::Async(exec) => run_on(exec, async move {
                                for round in 1..=per {
                                    race.turn.store(round, SeqCst);
                                    let n = ep.wait_async(&mut buf).await.unwrap();
                                    assert_eq!(n, 1, "iteration {it}, round {round}");
                                    race.done.store(round, SeqCst);
                                }
                            }),
                            #[cfg(feature = "futures")]
                            EpWait::Stream(_) => unreachable!(),
                        }
                    }
                    Consumer::ReadAsync(exec) => run_on(exec, async move {
                        for round in 1..=per {
                            race.turn.store(round, SeqCst);
                            let c = k.read_async().await.unwrap();
                            assert_eq!(c, 1, "iteration {it}, round {round}");
                            race.done.store(round, SeqCst);
                        }
                    }),
                    Consumer::BlockingRead => {
                        for round in 1..=per {
                            race.turn.store(round, SeqCst);
                            let c = k
                                .read_timeout(WAIT)
                                .unwrap_or_else(|e| panic!("iteration {it}, round {round}: {e}"));
                            assert_eq!(c, 1, "iteration {it}, round {round}");
                            race.done.store(round, SeqCst);
                        }
                    }
                }
            })
        };
        finish(
            &format!("{name}, iteration {it}"),
            &race,
            per,
            vec![w, flusher, waiter],
        );
        assert!(!k.kernel_count_is_base(), "{name}: flushed");
        assert_eq!(k.try_read().unwrap_err().kind(), ErrorKind::WouldBlock);
        drop(kept);
    }
    eprintln!("{name}: {iterations} x {per} rounds in {:?}", t0.elapsed());
}

#[test]
fn a_flush_racing_an_epoll_waiter_loses_no_wake() {
    let _s = serial();
    flush_race(
        Flush::AsFd,
        Consumer::Epoll(EpWait::Async(Exec::BlockOn)),
        48,
        48,
    );
    flush_race(
        Flush::AsRawFd,
        Consumer::Epoll(EpWait::Async(Exec::TokioCurrent)),
        48,
        48,
    );
    flush_race(Flush::TryClone, Consumer::Epoll(EpWait::Blocking), 48, 48);
    flush_race(
        Flush::AddInOut,
        Consumer::Epoll(EpWait::Async(Exec::BlockOn)),
        48,
        48,
    );
    flush_race(
        Flush::AsFd,
        Consumer::Epoll(EpWait::Async(Exec::TokioMulti)),
        32,
        48,
    );
    flush_race(Flush::Halves, Consumer::Epoll(EpWait::Blocking), 32, 48);
}

/// A flush racing a reader asleep in the blocking `read`: the flush wakes it, and it waits
/// on in the kernel.
#[test]
fn a_lend_racing_a_blocking_read_loses_no_wake() {
    let _s = serial();
    flush_race(Flush::AsFd, Consumer::BlockingRead, 48, 48);
    flush_race(Flush::TryClone, Consumer::BlockingRead, 48, 48);
    flush_race(Flush::AddInOut, Consumer::BlockingRead, 48, 48);
}

#[test]
fn a_lend_racing_read_async_loses_no_wake() {
    let _s = serial();
    flush_race(Flush::AsFd, Consumer::ReadAsync(Exec::BlockOn), 48, 48);
    flush_race(
        Flush::TryClone,
        Consumer::ReadAsync(Exec::TokioCurrent),
        48,
        48,
    );
}

/// Free-running writers and a lend from a third thread at a moment that moves from one
/// race to the next, while a reader takes the units with `read_async` or `try_read` and
/// the blocking `read`: every unit written is read once.
#[test]
fn a_lend_racing_free_running_writers_loses_no_unit() {
    let _s = serial();
    const PER: u64 = 300;
    let t0 = Instant::now();
    for it in 0..48u64 {
        let k = kick();
        let race = Race::new();
        let at = 20 + (it * 37) % (PER - 40);
        let writers: Vec<_> = (0..2u64)
            .map(|i| {
                let (k, r) = (Arc::clone(&k), Arc::clone(&race));
                spawn(&race, move || {
                    for j in 1..=PER {
                        if r.aborted() {
                            return;
                        }
                        sweep(j + it, 3 + 2 * i);
                        k.write(1).unwrap();
                        if i == 0 {
                            r.turn.store(j, SeqCst);
                        }
                    }
                })
            })
            .collect();
        let lender = {
            let (k, r) = (Arc::clone(&k), Arc::clone(&race));
            spawn(&race, move || {
                if r.await_turn(at) {
                    sweep(it, 11);
                    let _ = k.as_fd();
                }
            })
        };
        let blocking = it % 2 == 1;
        let reader = {
            let (k, race) = (Arc::clone(&k), Arc::clone(&race));
            spawn(&Arc::clone(&race), move || {
                let mut read = 0;
                let mut step = |c: u64| {
                    read += c;
                    assert!(
                        read <= 2 * PER,
                        "iteration {it}: read {read} of {}",
                        2 * PER
                    );
                    race.done.store(read, SeqCst);
                    read
                };
                if blocking {
                    let mut n = 0u64;
                    while n < 2 * PER {
                        // try_read mostly (memory), a blocking read now and then (the
                        // first that finds the count empty flushes it).
                        let r = if n % 4 == 3 {
                            k.read_timeout(WAIT)
                        } else {
                            match k.try_read() {
                                Err(e) if e.kind() == ErrorKind::WouldBlock => k.read_timeout(WAIT),
                                r => r,
                            }
                        };
                        n = step(r.unwrap_or_else(|e| panic!("iteration {it}: {e} (lost)")));
                    }
                } else {
                    futures::executor::block_on(async {
                        let mut n = 0u64;
                        while n < 2 * PER {
                            n = step(k.read_async().await.unwrap());
                        }
                    })
                }
            })
        };
        let mut all = writers;
        all.push(lender);
        all.push(reader);
        finish(
            &format!("lend, free-running, iteration {it}"),
            &race,
            2 * PER,
            all,
        );
        assert_eq!(k.try_read().unwrap_err().kind(), ErrorKind::WouldBlock);
    }
    eprintln!("lend, free-running: 48 iterations in {:?}", t0.elapsed());
}

// ---------------------------------------------------------------------------------------
// 6. tokio's and mio's integration types.

/// `AsyncNotifierFd::from_kernel`: each round `read` must return the round's unit (or
/// `consume` report `IN`).
#[cfg(feature = "tokio")]
fn async_notifier_fd_ping_pong(exec: Exec, consume: bool, rounds: u64) {
    use evfd::tokio::AsyncNotifierFd;
    let name = format!(
        "AsyncNotifierFd::{} on {exec:?}",
        if consume { "consume" } else { "read" }
    );
    let t0 = Instant::now();
    let rt = exec.runtime().unwrap();
    let a = {
        let _g = rt.enter();
        Arc::new(
            AsyncNotifierFd::from_kernel(KernelNotifier::new(Mode::AutoReset).unwrap()).unwrap(),
        )
    };
    let race = Race::new();
    let w = {
        let a = Arc::clone(&a);
        writer(&race, rounds, move || a.kernel().unwrap().notify().unwrap())
    };
    let waiter = {
        let (race, a) = (Arc::clone(&race), Arc::clone(&a));
        spawn(&Arc::clone(&race), move || {
            run_in(exec, Some(rt), async move {
                for round in 1..=rounds {
                    race.turn.store(round, SeqCst);
                    if consume {
                        let e = a.consume().await.unwrap();
                        assert!(e.contains(Events::IN), "round {round}: {e:?}");
                    } else {
                        let c = a.read().await.unwrap();
                        assert_eq!(c, 1, "round {round}");
                    }
                    race.done.store(round, SeqCst);
                }
            })
        })
    };
    finish(&name, &race, rounds, vec![w, waiter]);
    let k = a.kernel().unwrap();
    assert_eq!(k.count().unwrap(), 0, "{name}");
    assert!(
        k.kernel_count_is_base(),
        "{name}: the count is still in memory (nothing here flushes it)"
    );
    eprintln!("{name}: {rounds} rounds in {:?}", t0.elapsed());
}

#[cfg(feature = "tokio")]
#[test]
fn tokio_async_notifier_fd_hears_every_write() {
    let _s = serial();
    async_notifier_fd_ping_pong(Exec::TokioCurrent, false, 4_096);
    async_notifier_fd_ping_pong(Exec::TokioCurrent, true, 4_096);
    async_notifier_fd_ping_pong(Exec::TokioMulti, false, 4_096);
}

/// `KernelNotifier::into_async_fd` (`AsyncFd<KernelNotifier>`): each round
/// `async_io(READABLE, try_read)` (or `readable` + `try_io`) must read the round's unit.
#[cfg(feature = "tokio")]
#[test]
fn tokio_async_fd_of_a_kernel_notifier_hears_every_write() {
    let _s = serial();
    use tokio::io::Interest;
    for (exec, guard, rounds) in [
        (Exec::TokioCurrent, false, 6_144u64),
        (Exec::TokioCurrent, true, 4_096),
        (Exec::TokioMulti, false, 4_096),
    ] {
        let name = format!("AsyncFd<KernelNotifier> on {exec:?}, guard {guard}");
        let t0 = Instant::now();
        let rt = exec.runtime().unwrap();
        let afd = {
            let _g = rt.enter();
            Arc::new(
                KernelNotifier::new(Mode::AutoReset)
                    .unwrap()
                    .into_async_fd()
                    .unwrap(),
            )
        };
        let race = Race::new();
        let w = {
            let afd = Arc::clone(&afd);
            writer(&race, rounds, move || afd.get_ref().notify().unwrap())
        };
        let waiter = {
            let (race, afd) = (Arc::clone(&race), Arc::clone(&afd));
            spawn(&Arc::clone(&race), move || {
                run_in(exec, Some(rt), async move {
                    for round in 1..=rounds {
                        race.turn.store(round, SeqCst);
                        let c = if guard {
                            loop {
                                let mut g = afd.readable().await.unwrap();
                                if let Ok(r) = g.try_io(|a| a.get_ref().try_read()) {
                                    break r.unwrap();
                                }
                            }
                        } else {
                            afd.async_io(Interest::READABLE, |k| k.try_read())
                                .await
                                .unwrap()
                        };
                        assert_eq!(c, 1, "round {round}");
                        race.done.store(round, SeqCst);
                    }
                })
            })
        };
        finish(&name, &race, rounds, vec![w, waiter]);
        assert!(
            afd.get_ref().kernel_count_is_base(),
            "{name}: the count is still in memory (nothing here flushes it)"
        );
        eprintln!("{name}: {rounds} rounds in {:?}", t0.elapsed());
    }
}

/// `AsyncEpollFd` (the epoll's fd view in tokio's reactor): each round `wait` delivers the
/// round's write.
#[cfg(feature = "tokio")]
#[test]
fn tokio_async_epoll_fd_hears_every_write() {
    let _s = serial();
    use evfd::tokio::AsyncEpollFd;
    for (exec, ev, rounds) in [
        (Exec::TokioCurrent, LT, 3_072u64),
        (Exec::TokioCurrent, et(), 2_048),
        (Exec::TokioMulti, LT, 2_048),
    ] {
        let name = format!("AsyncEpollFd on {exec:?}, {ev:?}");
        let t0 = Instant::now();
        let k = kick();
        let ep = Epoll::new();
        ep.add(&*k, ev, 1).unwrap();
        let rt = exec.runtime().unwrap();
        let aep = {
            let _g = rt.enter();
            Arc::new(AsyncEpollFd::new(&ep).unwrap())
        };
        ping_pong(&name, t0, &k, rounds, move |race| {
            run_in(exec, Some(rt), async move {
                let mut buf = [Event::default(); 4];
                for round in 1..=rounds {
                    race.turn.store(round, SeqCst);
                    let n = aep.wait(&mut buf).await.unwrap();
                    assert_eq!((n, buf[0].data), (1, 1), "round {round}");
                    race.done.store(round, SeqCst);
                }
            })
        });
    }
}

/// mio (`Source for KernelNotifier`, edge-triggered): each round the waiter drains with
/// `try_read` until `WouldBlock` and polls; a poll that times out lost the write.
#[cfg(feature = "mio")]
#[test]
fn mio_poll_hears_every_write() {
    let _s = serial();
    const ROUNDS: u64 = 8_192;
    let name = "mio";
    let t0 = Instant::now();
    let mut k = KernelNotifier::new(Mode::AutoReset).unwrap();
    let mut poll = mio::Poll::new().unwrap();
    poll.registry()
        .register(&mut k, mio::Token(1), mio::Interest::READABLE)
        .unwrap();
    let k = Arc::new(k);
    {
        let k2 = Arc::clone(&k);
        ping_pong(name, t0, &k, ROUNDS, move |race| {
            let k = k2;
            let mut events = mio::Events::with_capacity(4);
            for round in 1..=ROUNDS {
                race.turn.store(round, SeqCst);
                let mut got = 0;
                loop {
                    match k.try_read() {
                        Ok(c) => {
                            got += c;
                            continue;
                        }
                        Err(e) if e.kind() == ErrorKind::WouldBlock => {}
                        Err(e) => panic!("round {round}: {e}"),
                    }
                    // Drained: done if the round's unit came, else wait for the next edge.
                    if got > 0 {
                        break;
                    }
                    poll.poll(&mut events, Some(WAIT)).unwrap();
                    assert!(
                        !events.is_empty(),
                        "round {round}: mio hears the write within {WAIT:?} (lost)"
                    );
                }
                assert_eq!(got, 1, "round {round}");
                race.done.store(round, SeqCst);
            }
        });
    }
}

// ---------------------------------------------------------------------------------------
// 7. Several waiters: two of one epoll, or two epolls holding the same notifier.

/// A waiter of [`many_waiters`].
enum Waiter {
    /// An epoll holding the notifier, and how it is waited on (`None`: `Epoll::wait`).
    Epoll(Epoll, Option<Exec>),
    /// The notifier's `read_async`.
    ReadAsync(Exec),
    /// The notifier's blocking `read` (its first empty look flushes the count for good).
    BlockingRead,
}

impl std::fmt::Debug for Waiter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Waiter::Epoll(_, e) => write!(f, "Epoll({e:?})"),
            Waiter::ReadAsync(e) => write!(f, "ReadAsync({e:?})"),
            Waiter::BlockingRead => write!(f, "BlockingRead"),
        }
    }
}

/// One write per round (after the previous one was delivered, at a sweeping delay), and
/// `waiters` each taking what it can: every write is taken (a write that wakes nobody
/// stalls the race: the watchdog) and taken once (`done` never passes the writes).
fn many_waiters(name: &str, k: Arc<KernelNotifier>, waiters: Vec<Waiter>, rounds: u64) {
    let name = format!("{name} {waiters:?}");
    let name = name.as_str();
    let t0 = Instant::now();
    let race = Race::new();
    let stop = Arc::new(AtomicBool::new(false));
    let w = {
        let (k, r) = (Arc::clone(&k), Arc::clone(&race));
        spawn(&race, move || {
            for round in 1..=rounds {
                if !r.await_done(round - 1) {
                    return;
                }
                sweep(round, 1);
                r.turn.store(round, SeqCst);
                k.notify().unwrap();
            }
        })
    };
    let mut per = Vec::new();
    let mut threads = Vec::new();
    for (i, waiter) in waiters.into_iter().enumerate() {
        let mine = Arc::new(AtomicU64::new(0));
        per.push(Arc::clone(&mine));
        let r = Arc::clone(&race);
        let (race, stop, k) = (Arc::clone(&race), Arc::clone(&stop), Arc::clone(&k));
        // Counts `n` taken; `false` once the race is over (the write was a stop's).
        let count = move |n: u64| {
            if stop.load(SeqCst) {
                return false;
            }
            let d = race.done.fetch_add(n, SeqCst) + n;
            let written = race.turn.load(SeqCst);
            assert!(d <= written, "waiter {i}: {d} taken of {written} written");
            mine.fetch_add(n, SeqCst);
            true
        };
        threads.push(spawn(&r, move || {
            let mut buf = [Event::default(); 4];
            match waiter {
                Waiter::Epoll(ep, None) => loop {
                    let n = ep.wait(&mut buf, Some(Duration::from_secs(60))).unwrap();
                    if !count(n as u64) {
                        return;
                    }
                },
                Waiter::Epoll(ep, Some(exec)) => run_on(exec, async move {
                    loop {
                        let n = ep.wait_async(&mut buf).await.unwrap();
                        if !count(n as u64) {
                            return;
                        }
                    }
                }),
                Waiter::ReadAsync(exec) => run_on(exec, async move {
                    loop {
                        if !count(k.read_async().await.unwrap()) {
                            return;
                        }
                    }
                }),
                Waiter::BlockingRead => loop {
                    if !count(k.read_timeout(Duration::from_secs(60)).unwrap()) {
                        return;
                    }
                },
            }
        }));
    }
    watch(name, &race, rounds);
    // Every write delivered: stop the waiters, each woken by a write of its own.
    stop.store(true, SeqCst);
    let end = Instant::now() + WAIT;
    while threads.iter().any(|t| !t.is_finished()) {
        assert!(Instant::now() < end, "{name}: a waiter did not stop");
        k.notify().unwrap();
        std::thread::sleep(Duration::from_millis(1));
    }
    w.join().unwrap();
    for t in threads {
        t.join().unwrap();
    }
    if let Some(f) = race.failure.lock().unwrap().clone() {
        panic!("{name}: {f}");
    }
    assert_eq!(race.done.load(SeqCst), rounds, "{name}");
    let per: Vec<u64> = per.iter().map(|p| p.load(SeqCst)).collect();
    eprintln!(
        "{name}: {rounds} rounds in {:?}, delivered {per:?}",
        t0.elapsed()
    );
}

/// Two waiters of one epoll (a blocked `wait` takes the direct slot, the other sleeps in
/// `poll(2)`; or tasks): each write delivered once, to one of them.
#[test]
fn two_waiters_of_one_epoll_hear_every_write() {
    let _s = serial();
    for (label, execs) in [
        ("two blocking", [None, None]),
        ("two block_on", [Some(Exec::BlockOn), Some(Exec::BlockOn)]),
        ("blocking and tokio", [None, Some(Exec::TokioCurrent)]),
        (
            "two tokio",
            [Some(Exec::TokioCurrent), Some(Exec::TokioMulti)],
        ),
    ] {
        let k = kick();
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 1).unwrap();
        let waiters = execs
            .into_iter()
            .map(|e| Waiter::Epoll(ep.clone(), e))
            .collect();
        many_waiters(&format!("one epoll, {label}"), k, waiters, 3_072);
    }
}

/// Two epolls holding the same notifier, each with a waiter: each write wakes at least one
/// of them and is delivered once in all.
#[test]
fn two_epolls_holding_one_notifier_hear_every_write() {
    let _s = serial();
    for (label, execs, ets) in [
        ("two blocking", [None, None], [false, false]),
        ("two blocking, ET", [None, None], [true, true]),
        (
            "block_on and tokio",
            [Some(Exec::BlockOn), Some(Exec::TokioCurrent)],
            [false, true],
        ),
        (
            "tokio multi and blocking",
            [Some(Exec::TokioMulti), None],
            [false, false],
        ),
    ] {
        let k = kick();
        let waiters = execs
            .into_iter()
            .zip(ets)
            .map(|(e, et_)| {
                let ep = Epoll::new();
                ep.add(&*k, if et_ { et() } else { LT }, 1).unwrap();
                Waiter::Epoll(ep, e)
            })
            .collect();
        many_waiters(
            &format!("two epolls, {label}"),
            Arc::clone(&k),
            waiters,
            3_072,
        );
        assert!(
            k.kernel_count_is_base(),
            "{label}: the count is still in memory (nothing here flushes it)"
        );
    }
}

/// Consumers of different faces competing for the same notifier: an epoll's delivery,
/// `read_async`, the blocking `read` (whose first empty look flushes the count while the
/// others wait on it): every write taken once, by one of them.
#[test]
fn competing_faces_take_every_write_once() {
    let _s = serial();
    for (label, with_async, other) in [
        (
            "epoll blocking + read_async",
            None,
            Waiter::ReadAsync(Exec::BlockOn),
        ),
        (
            "epoll tokio + read_async",
            Some(Exec::TokioCurrent),
            Waiter::ReadAsync(Exec::BlockOn),
        ),
        (
            "epoll block_on + read_async tokio",
            Some(Exec::BlockOn),
            Waiter::ReadAsync(Exec::TokioCurrent),
        ),
        ("epoll blocking + blocking read", None, Waiter::BlockingRead),
        (
            "epoll block_on + blocking read",
            Some(Exec::BlockOn),
            Waiter::BlockingRead,
        ),
    ] {
        let k = kick();
        let ep = Epoll::new();
        ep.add(&*k, Events::IN, 1).unwrap();
        many_waiters(label, k, vec![Waiter::Epoll(ep, with_async), other], 2_048);
    }
    // Two sleepers of the blocking read at once, and one beside `read_async`.
    for (label, a, b) in [
        (
            "two blocking reads",
            Waiter::BlockingRead,
            Waiter::BlockingRead,
        ),
        (
            "blocking read + read_async",
            Waiter::BlockingRead,
            Waiter::ReadAsync(Exec::BlockOn),
        ),
    ] {
        many_waiters(label, kick(), vec![a, b], 2_048);
    }
}

/// A fork (whose `prepare` flushes the count) racing an epoll's waiter and `read_async`.
#[test]
fn a_fork_racing_the_consumers_loses_no_wake() {
    let _s = serial();
    flush_race(Flush::Fork, Consumer::Epoll(EpWait::Blocking), 32, 48);
    flush_race(
        Flush::Fork,
        Consumer::Epoll(EpWait::Async(Exec::BlockOn)),
        32,
        48,
    );
    flush_race(Flush::Fork, Consumer::ReadAsync(Exec::TokioCurrent), 32, 48);
    flush_race(Flush::Fork, Consumer::BlockingRead, 32, 48);
}
