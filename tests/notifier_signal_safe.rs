//! A SIGALRM storm whose handler writes a notifier through `SignalNotifier` while other
//! threads are blocked on it, register and cancel waits on it, harvest it in an `Epoll`,
//! and drain its fd view: no deadlock within the watchdog, and every unit a handler wrote
//! is read exactly once (docs/semantics.md §6.3).
//!
//! One test (the handler and the timer are process-wide), scenarios in turn. SIGALRM is
//! blocked in the test's main thread, so it lands on the worker threads, inside evfd.
#![cfg(unix)]

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, Notifier, SignalNotifier};

mod signal_util;

static TARGET: OnceLock<std::sync::Mutex<Option<Arc<SignalNotifier>>>> = OnceLock::new();
/// The handle the handler writes (swapped between scenarios while the timer is off).
static CURRENT: std::sync::atomic::AtomicPtr<SignalNotifier> =
    std::sync::atomic::AtomicPtr::new(std::ptr::null_mut());
static SENT: AtomicU64 = AtomicU64::new(0);
static REFUSED: AtomicU64 = AtomicU64::new(0);
static SIGNALS: AtomicU64 = AtomicU64::new(0);

extern "C" fn on_alarm(_: libc::c_int) {
    SIGNALS.fetch_add(1, SeqCst);
    let p = CURRENT.load(SeqCst);
    if p.is_null() {
        return;
    }
    // SAFETY: `p` points into an `Arc<SignalNotifier>` kept alive in `TARGET` until the
    // timer is off and `CURRENT` is null again.
    let s = unsafe { &*p };
    match s.notify() {
        Ok(()) => SENT.fetch_add(1, SeqCst),
        Err(_) => REFUSED.fetch_add(1, SeqCst),
    };
}

/// The handler only touches atomics and calls `SignalNotifier::notify`.
fn install() {
    signal_util::install_handler(libc::SIGALRM, on_alarm, libc::SA_RESTART);
}

fn timer(interval_us: i64) {
    let tv = libc::timeval {
        tv_sec: 0,
        tv_usec: interval_us as libc::suseconds_t,
    };
    let it = libc::itimerval {
        it_interval: tv,
        it_value: tv,
    };
    assert_eq!(
        // SAFETY: plain syscall with a valid struct.
        unsafe { libc::setitimer(libc::ITIMER_REAL, &it, std::ptr::null_mut()) },
        0
    );
}

fn alarm_mask(how: libc::c_int) {
    // SAFETY: sigset manipulation on a local set.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGALRM);
        assert_eq!(libc::pthread_sigmask(how, &set, std::ptr::null_mut()), 0);
    }
}

/// How a consumer thread takes units from the notifier.
#[derive(Debug, Clone, Copy)]
enum Style {
    /// Blocked in `read_timeout` (long timeouts: mostly asleep).
    Blocked,
    /// Registering and cancelling waits all the time (short timeouts).
    Registering,
    /// Harvesting an `Epoll` that watches the notifier, then `try_read`.
    Harvest,
    /// Polling the fd view, then `try_read` (the view's drain runs on every emptying).
    FdView,
}

fn consumer(n: Notifier, style: Style, stop: Arc<AtomicBool>) -> u64 {
    // The storm lands here (the spawning threads block it).
    alarm_mask(libc::SIG_UNBLOCK);
    let mut got = 0u64;
    let ep = Epoll::new();
    let view = n.fd_view().unwrap();
    if let Style::Harvest = style {
        ep.add(&n, Events::IN, 1).unwrap();
    }
    let mut buf = [Event::default(); 4];
    loop {
        let r = match style {
            Style::Blocked => n.read_timeout(Duration::from_millis(20)),
            Style::Registering => n.read_timeout(Duration::from_micros(50)),
            Style::Harvest => {
                let _ = ep.wait(&mut buf, Some(Duration::from_millis(5))).unwrap();
                n.try_read()
            }
            Style::FdView => {
                let mut fds = [rustix::event::PollFd::new(
                    &view,
                    rustix::event::PollFlags::IN,
                )];
                let five_ms = rustix::event::Timespec {
                    tv_sec: 0,
                    tv_nsec: 5_000_000,
                };
                let _ = rustix::event::poll(&mut fds, Some(&five_ms));
                n.try_read()
            }
        };
        match r {
            Ok(v) => got += v,
            Err(_) if stop.load(SeqCst) && n.count() == 0 => return got,
            Err(_) => {}
        }
    }
}

fn scenario(styles: &[Style], for_how_long: Duration) {
    let n = Notifier::new();
    let s = Arc::new(n.signal_notifier().unwrap());
    *TARGET.get_or_init(Default::default).lock().unwrap() = Some(Arc::clone(&s));
    let stop = Arc::new(AtomicBool::new(false));
    let threads: Vec<_> = styles
        .iter()
        .map(|&st| {
            let (n, stop) = (n.clone(), Arc::clone(&stop));
            std::thread::spawn(move || consumer(n, st, stop))
        })
        .collect();
    let sent0 = SENT.load(SeqCst);
    let sig0 = SIGNALS.load(SeqCst);
    CURRENT.store(Arc::as_ptr(&s) as *mut SignalNotifier, SeqCst);
    timer(100);
    std::thread::sleep(for_how_long);
    timer(0);
    CURRENT.store(std::ptr::null_mut(), SeqCst);
    // A handler that loaded the pointer before the store may still be running on another
    // thread: let it finish before the count is final.
    std::thread::sleep(Duration::from_millis(50));
    stop.store(true, SeqCst);
    let got: u64 = threads.into_iter().map(|t| t.join().unwrap()).sum();
    let sent = SENT.load(SeqCst) - sent0;
    let signals = SIGNALS.load(SeqCst) - sig0;
    eprintln!("{styles:?}: {signals} signals, {sent} units written, {got} read");
    assert!(sent > 100, "the storm reached the handler: {sent}");
    assert_eq!(got, sent, "every unit written by a handler is read once");
    assert_eq!(n.count(), 0);
    *TARGET.get().unwrap().lock().unwrap() = None;
}

#[test]
fn sigalrm_storm_on_every_wait_style() {
    alarm_mask(libc::SIG_BLOCK); // this thread and the ones it spawns, but the consumers
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        install();
        let t0 = Instant::now();
        for styles in [
            &[Style::Blocked, Style::Blocked][..],
            &[Style::Registering, Style::Registering],
            &[Style::Harvest, Style::Harvest],
            &[Style::FdView, Style::FdView],
            &[
                Style::Blocked,
                Style::Registering,
                Style::Harvest,
                Style::FdView,
            ],
        ] {
            scenario(styles, Duration::from_millis(1500));
        }
        assert_eq!(REFUSED.load(SeqCst), 0);
        let _ = tx.send(t0.elapsed());
    });
    match rx.recv_timeout(Duration::from_secs(120)) {
        Ok(took) => eprintln!("storm done in {took:?}"),
        Err(std::sync::mpsc::RecvTimeoutError::Disconnected) => panic!("a scenario failed"),
        Err(_) => panic!("deadlock: the storm did not finish within the watchdog"),
    }
}
