//! After `fork`, a thread of the child that blocks in `Epoll::wait` on an epoll with kernel
//! fds sleeps on an eventfd of its own, not on the copy of its parent thread's: while the
//! parent thread sleeps on its own epoll at the same time, an in-memory wake in the child
//! still reaches the child (the parent must not be able to drain the child's ring). One
//! test in its own binary: at the fork no other thread of ours runs.
#![cfg(target_os = "linux")]

use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

fn kernel_epoll() -> (Epoll, KernelNotifier, Notifier) {
    let ep = Epoll::new();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let n = Notifier::new();
    ep.add(&k, Events::IN, 1).unwrap();
    ep.add(&n, Events::IN, 2).unwrap();
    (ep, k, n)
}

#[test]
fn fork_child_sleeps_on_its_own_bell() {
    let (ep, _k, _n) = kernel_epoll();
    let mut buf = [Event::default(); 4];
    // This thread makes its bell (a kernel sleep that times out).
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(1))).unwrap(),
        0
    );

    // SAFETY: fork has no preconditions of its own. At this point the only other thread is
    // the test harness's, blocked waiting for this test; the child runs a short program and
    // leaves with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0, "fork failed");
    if pid == 0 {
        let code = std::panic::catch_unwind(|| {
            let (ep, _k, n) = kernel_epoll();
            let waker = std::thread::spawn(move || {
                for _ in 0..20 {
                    std::thread::sleep(Duration::from_millis(5));
                    n.notify().unwrap();
                }
            });
            let mut buf = [Event::default(); 4];
            let mut got = 0;
            for _ in 0..20 {
                let r = ep.wait(&mut buf, Some(Duration::from_secs(5))).unwrap();
                if r == 1 && buf[0].data == 2 {
                    got += 1;
                }
                if got > 0 {
                    break;
                }
            }
            waker.join().unwrap();
            i32::from(got == 0)
        })
        .unwrap_or(2);
        // SAFETY: `_exit` ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    // Meanwhile this (parent) thread sleeps in the kernel too, on its own epoll.
    let t0 = std::time::Instant::now();
    while t0.elapsed() < Duration::from_millis(200) {
        let _ = ep.wait(&mut buf, Some(Duration::from_millis(20))).unwrap();
    }
    let mut status = 0;
    // SAFETY: waits for our own child; `status` is a valid out-pointer.
    let r = unsafe { libc::waitpid(pid, &mut status, 0) };
    assert_eq!(r, pid);
    assert!(libc::WIFEXITED(status), "child status {status:#x}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "the child's in-memory wake was lost"
    );
}
