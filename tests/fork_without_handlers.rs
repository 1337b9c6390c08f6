//! A child made by a fork that runs no `pthread_atfork` handler — glibc's `_Fork`, a raw
//! `clone(2)` without `CLONE_VM` — still refuses the in-memory objects it copied: the fork
//! epoch sits on a page marked `MADV_WIPEONFORK`, which the kernel hands every such child
//! zeroed. The child can make objects of its own and write a `KernelNotifier` it shares
//! with the parent, and the parent's in-memory objects are untouched. The fork count sits
//! on that page too: the child's calls on a description it copied do not trust
//! `O_NONBLOCK`, which the parent may clear.
//!
//! One test in its own binary: no other test thread can hold `malloc`'s locks at the fork
//! (neither fork takes them first, as `fork(3)` does), so the child may allocate.

use std::io;
use std::os::fd::AsFd;
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod fork_util;
use fork_util::{in_child_of, in_child_then};

/// What the child checks: the copies refuse, a new notifier works, the shared eventfd is
/// written.
fn in_child(n: &Notifier, ep: &Epoll, k: &KernelNotifier) -> Result<(), String> {
    k.write(2)
        .map_err(|e| format!("KernelNotifier::write: {e}"))?;
    let refused = |what: &str, r: io::Result<()>| match r {
        Err(e) if e.kind() == io::ErrorKind::Unsupported && e.to_string().contains("fork") => {
            Ok(())
        }
        other => Err(format!("{what}: expected the fork refusal, got {other:?}")),
    };
    refused("Notifier::write", n.write(1))?;
    refused("Notifier::try_read", n.try_read().map(drop))?;
    let mut buf = [Event::default(); 2];
    refused(
        "Epoll::wait",
        ep.wait(&mut buf, Some(Duration::ZERO)).map(drop),
    )?;
    let mine = Notifier::new();
    mine.write(3)
        .map_err(|e| format!("a new notifier's write: {e}"))?;
    match mine.read() {
        Ok(3) => {}
        other => return Err(format!("a new notifier's read: {other:?}")),
    }
    let ep2 = Epoll::new();
    ep2.add(&mine, Events::IN, 7)
        .map_err(|e| format!("a new epoll's add: {e}"))?;
    mine.notify().map_err(|e| format!("notify: {e}"))?;
    match ep2.wait(&mut buf, Some(Duration::ZERO)) {
        Ok(1) if buf[0].data == 7 => Ok(()),
        other => Err(format!("a new epoll's wait: {other:?}")),
    }
}

/// A raw `clone(2)`: SIGCHLD as its exit signal, no `CLONE_VM` (a copy of the memory), as
/// `fork(2)` makes it, and nothing of libc's fork around it.
fn raw_clone() -> libc::pid_t {
    // SAFETY: the flags ask for a fork-like child (no shared memory, no new stack: it runs
    // on its copy of this stack), which only runs the check it is given and `_exit`s.
    let pid = unsafe {
        libc::syscall(
            libc::SYS_clone,
            libc::SIGCHLD as libc::c_ulong,
            0usize,
            0usize,
            0usize,
            0usize,
        )
    };
    pid as libc::pid_t
}

/// glibc's `_Fork` (2.34): `fork(2)` without the atfork handlers, if this libc has it
/// (looked up at run time, so that the test builds against any libc).
fn underscore_fork() -> Option<extern "C" fn() -> libc::pid_t> {
    // SAFETY: a NUL-terminated name; RTLD_DEFAULT searches the process's global scope.
    let sym = unsafe { libc::dlsym(libc::RTLD_DEFAULT, b"_Fork\0".as_ptr().cast()) };
    // SAFETY: glibc's `_Fork` is `pid_t _Fork(void)`.
    (!sym.is_null()).then(|| unsafe { std::mem::transmute(sym) })
}

/// A `KernelNotifier` made (and never lent) before the fork: the child shares its
/// description with the parent, so the child's calls must not trust `O_NONBLOCK`. The
/// parent lends it and clears the flag once the child exists; then the child's `try_read`
/// at count 0 returns `WouldBlock` (a plain `read(2)`, as on a private description, would
/// wait for ever: the watchdog).
fn child_does_not_trust_a_copied_description(what: &str, fork: impl FnOnce() -> libc::pid_t) {
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let (go_rx, go_tx) = rustix::pipe::pipe().unwrap();
    in_child_then(
        what,
        fork,
        || {
            let mut byte = [0u8];
            rustix::io::read(&go_rx, &mut byte).map_err(|e| format!("the go: {e}"))?;
            match k.try_read() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(()),
                other => Err(format!("try_read at 0: {other:?}")),
            }
        },
        || {
            let fd = k.as_fd();
            let fl = rustix::fs::fcntl_getfl(fd).unwrap();
            rustix::fs::fcntl_setfl(fd, fl - rustix::fs::OFlags::NONBLOCK).unwrap();
            rustix::io::write(&go_tx, &[1]).unwrap();
        },
    );
}

#[test]
fn a_child_made_without_the_atfork_handlers_refuses_its_copies() {
    let n = Notifier::builder().initial(5).build().unwrap();
    let ep = Epoll::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let k = KernelNotifier::new(Mode::Counter).unwrap();

    in_child_of("clone(2)", raw_clone, || in_child(&n, &ep, &k));
    child_does_not_trust_a_copied_description("clone(2), a copied description", raw_clone);
    let fork = underscore_fork();
    match fork {
        None => eprintln!("no _Fork in this libc: that half skipped"),
        Some(fork) => {
            in_child_of("_Fork", || fork(), || in_child(&n, &ep, &k));
            child_does_not_trust_a_copied_description("_Fork, a copied description", || fork());
        }
    }

    // Each child wrote the eventfd they share: 2 each.
    let children = if fork.is_none() { 1 } else { 2 };
    assert_eq!(k.try_read().unwrap(), 2 * children);
    // The parent's objects are untouched: the child's refusals changed nothing.
    assert_eq!(n.count(), 5);
    let mut buf = [Event::default(); 2];
    assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
    assert_eq!(buf[0].data, 1);
    assert_eq!(n.read().unwrap(), 5);
}
