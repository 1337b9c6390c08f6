//! A failed edge-triggered watcher arm is retried: with no fd left (`EMFILE`), the first
//! arm of the process cannot make the watcher's kernel epoll; once fds are back, an outer
//! epoll still hears the inner epoll's kernel fds. Its own binary: it lowers the process's
//! `RLIMIT_NOFILE` and needs the watcher not to exist yet.
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

/// Runs `f` with every fd number below a lowered `RLIMIT_NOFILE` taken, then restores both.
fn without_fds<R>(f: impl FnOnce() -> R) -> R {
    let mut old = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: `old` is a valid, writable rlimit.
    assert_eq!(unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut old) }, 0);
    // SAFETY: dup of stdin (open in a test process); the new fd is ours and closed below.
    let probe = unsafe { libc::dup(0) };
    assert!(probe >= 0);
    // SAFETY: `probe` is the fd we just made and nothing else uses.
    unsafe { libc::close(probe) };
    let low = libc::rlimit {
        rlim_cur: (probe + 16) as libc::rlim_t,
        rlim_max: old.rlim_max,
    };
    // SAFETY: `low` is a valid rlimit.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &low) }, 0);
    let mut held = Vec::new();
    loop {
        // SAFETY: as above; each new fd is kept in `held` and closed below.
        let d = unsafe { libc::dup(0) };
        if d < 0 {
            assert_eq!(
                std::io::Error::last_os_error().raw_os_error(),
                Some(libc::EMFILE)
            );
            break;
        }
        held.push(d);
    }
    let r = f();
    for d in held {
        // SAFETY: `d` is one of our dups, closed once.
        unsafe { libc::close(d) };
    }
    // SAFETY: `old` is the valid rlimit read above.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &old) }, 0);
    r
}

#[test]
fn failed_edge_triggered_arm_is_retried() {
    let inner = Epoll::new();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    inner.add(&k, Events::IN, 7).unwrap();
    let outer = Epoll::new();
    assert_eq!(
        evfd::stats::watcher_stats().0,
        0,
        "no watcher before the first arm"
    );
    // The outer epoll is the inner one's first poller: its add arms the inner kernel epoll
    // edge-triggered, and that first arm must create the watcher's kernel epoll: EMFILE.
    without_fds(|| outer.add(&inner, Events::IN, 1).unwrap());
    assert_eq!(
        evfd::stats::watcher_stats().0,
        0,
        "the arm failed: no watcher thread"
    );

    // A kernel event while the outer epoll's waiter is blocked must reach it.
    let mut evs = [Event::default(); 4];
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            k.write(1).unwrap();
        });
        let t0 = Instant::now();
        let n = outer.wait(&mut evs, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(
            n,
            1,
            "the outer epoll never heard the kernel fd ({:?})",
            t0.elapsed()
        );
        assert_eq!(evs[0].data, 1);
    });
    assert!(
        evfd::stats::watcher_stats().0 >= 1,
        "the retried arm started the watcher"
    );

    // And again: the registration is edge-triggered for good, not one shot.
    assert_eq!(k.read().unwrap(), 1);
    // Let the outer item's level-triggered requeue drain.
    while outer
        .wait(&mut evs, Some(Duration::from_millis(50)))
        .unwrap()
        > 0
    {}
    std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(300));
            k.write(1).unwrap();
        });
        let n = outer.wait(&mut evs, Some(Duration::from_secs(5))).unwrap();
        assert_eq!(n, 1, "deaf after one shot");
    });
}
