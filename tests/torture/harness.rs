//! Shared by the torture suite and the reliability regressions: watchdogs, wakers, RSS,
//! and the long/short switch.
#![allow(dead_code)]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::sync::mpsc;
use std::sync::Arc;
use std::task::{Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

/// `EVFD_TORTURE=long`: the multi-minute mode. Anything else (or unset): the CI length.
pub fn long_mode() -> bool {
    std::env::var("EVFD_TORTURE").is_ok_and(|v| v == "long")
}

/// Scale a count: `short` in CI, `long` with `EVFD_TORTURE=long`.
pub fn scale(short: u64, long: u64) -> u64 {
    if long_mode() {
        long
    } else {
        short
    }
}

/// Runs `f` on its own thread and fails with a message naming `what` if it has not finished
/// within `limit` (the thread is left behind; the test fails instead of hanging). A panic
/// inside `f` is passed on as is.
pub fn bounded<T: Send + 'static>(
    what: &str,
    limit: Duration,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = mpsc::channel();
    let h = thread::Builder::new()
        .name(what.to_owned())
        .spawn(move || {
            let r = f();
            let _ = tx.send(());
            r
        })
        .expect("spawn");
    match rx.recv_timeout(limit) {
        Ok(()) => h.join().expect("joined after sending"),
        Err(mpsc::RecvTimeoutError::Disconnected) => match h.join() {
            Err(p) => std::panic::resume_unwind(p),
            Ok(_) => unreachable!("the thread sends before returning"),
        },
        Err(mpsc::RecvTimeoutError::Timeout) => {
            panic!("watchdog: `{what}` still blocked after {limit:?}")
        }
    }
}

/// Join `h` within `limit`, or fail naming `what`.
pub fn join_within<T: Send + 'static>(what: &str, limit: Duration, h: thread::JoinHandle<T>) -> T {
    let deadline = Instant::now() + limit;
    while !h.is_finished() {
        assert!(
            Instant::now() < deadline,
            "watchdog: thread `{what}` still running after {limit:?}"
        );
        thread::sleep(Duration::from_millis(2));
    }
    match h.join() {
        Ok(v) => v,
        Err(p) => std::panic::resume_unwind(p),
    }
}

/// Spin (sleeping 1 ms) until `cond` holds, or fail naming `what` after `limit`.
pub fn wait_until(what: &str, limit: Duration, mut cond: impl FnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond() {
        assert!(
            Instant::now() < deadline,
            "watchdog: `{what}` not reached after {limit:?}"
        );
        thread::sleep(Duration::from_millis(1));
    }
}

/// A waker that counts its wakes.
#[derive(Default)]
pub struct CountingWaker(pub AtomicUsize);

impl Wake for CountingWaker {
    fn wake(self: Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
    }
}

pub fn counting_waker() -> (Arc<CountingWaker>, Waker) {
    let c = Arc::new(CountingWaker::default());
    (Arc::clone(&c), Waker::from(c))
}

/// A waker whose `wake` panics (after counting).
#[derive(Default)]
pub struct PanickingWaker(pub AtomicUsize);

impl Wake for PanickingWaker {
    fn wake(self: Arc<Self>) {
        self.wake_by_ref();
    }
    fn wake_by_ref(self: &Arc<Self>) {
        self.0.fetch_add(1, SeqCst);
        panic!("PanickingWaker::wake (deliberate)");
    }
}

pub fn panicking_waker() -> (Arc<PanickingWaker>, Waker) {
    let c = Arc::new(PanickingWaker::default());
    (Arc::clone(&c), Waker::from(c))
}

/// Resident set size of this process, in bytes (`/proc/self/statm`).
pub fn rss_bytes() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("/proc/self/statm");
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("statm: resident pages");
    // SAFETY: sysconf has no preconditions; _SC_PAGESIZE is a valid name.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    pages * page as u64
}

/// The `ready: N` field of an `Epoll`'s `Debug` output: the ready list's length.
pub fn ready_len(ep: &evfd::Epoll) -> usize {
    debug_field(&format!("{ep:?}"), "ready")
}

/// A `name: N` field of a `Debug` output.
pub fn debug_field(dbg: &str, name: &str) -> usize {
    let key = format!("{name}: ");
    let at = dbg
        .find(&key)
        .unwrap_or_else(|| panic!("no `{key}` in {dbg}"))
        + key.len();
    dbg[at..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect::<String>()
        .parse()
        .unwrap_or_else(|_| panic!("no number after `{key}` in {dbg}"))
}

/// A tiny xorshift generator (no dependency, reproducible from a printed seed).
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        self.0 = x;
        x
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// The torture scenarios run one at a time (the machine has 2 cores; RSS is per process).
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// Take the suite's serial lock (a failed scenario does not block the others).
pub fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// Totals across the suite, printed by each scenario (`-- --nocapture` shows them).
pub static UNITS_CHECKED: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
pub static OPS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// The env var that marks a re-executed child of this test binary.
pub const CHILD_ENV: &str = "EVFD_TORTURE_CHILD";

/// Whether this process is the re-executed child for `name`.
pub fn is_child(name: &str) -> bool {
    std::env::var(CHILD_ENV).is_ok_and(|v| v == name)
}

/// Re-run this test binary with only the test `name`, marked as the child, under a
/// watchdog: killed and failed after `limit`. Returns the child's stdout+stderr.
pub fn run_child(name: &str, limit: Duration) -> String {
    use std::process::{Command, Stdio};
    let exe = std::env::current_exe().expect("current_exe");
    let mut child = Command::new(exe)
        .args([name, "--exact", "--nocapture", "--test-threads=1"])
        .env(CHILD_ENV, name)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn the child test");
    let deadline = Instant::now() + limit;
    loop {
        if child.try_wait().expect("try_wait").is_some() {
            break;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let out = child.wait_with_output().expect("output");
            panic!(
                "watchdog: child `{name}` killed after {limit:?}\n{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
        }
        thread::sleep(Duration::from_millis(10));
    }
    let out = child.wait_with_output().expect("output");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "child `{name}` failed: {}\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "child `{name}` did not run its test:\n{text}"
    );
    text
}

/// A writer's pause between writes, so that readers drain and go to sleep often (a writer
/// that never pauses keeps its readers busy and the wake paths cold): usually nothing,
/// sometimes a yield, now and then a sleep (~50 µs on these VMs).
pub fn writer_pause(r: &mut Rng) {
    match r.below(32) {
        0 => thread::sleep(Duration::from_micros(1)),
        1..=4 => thread::yield_now(),
        _ => {}
    }
}
