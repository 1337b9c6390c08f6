//! fd exhaustion: with `RLIMIT_NOFILE` lowered (in a re-executed child of this test binary,
//! so the rest of the suite keeps its fds) and every fd taken, `fd_view()`,
//! `KernelNotifier::new` and an epoll's first kernel-fd `add` fail with `EMFILE` and change
//! nothing; in-memory notifiers and epolls keep working; freeing one fd makes `fd_view()`
//! work again.

use std::os::fd::OwnedFd;
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

use crate::harness::{is_child, run_child, serial};

const NAME: &str = "fdlimit::fd_exhaustion_fails_cleanly_with_emfile";

fn emfile<T: std::fmt::Debug>(what: &str, r: std::io::Result<T>) {
    let e = r.expect_err(what);
    assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{what}: {e}");
}

fn child() {
    let n = Notifier::new();
    let ep = Epoll::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let spare = std::fs::File::open("/dev/null").unwrap();
    // Lower the soft limit a little above what is open now, then take every fd.
    let lim = libc::rlimit {
        rlim_cur: 64,
        rlim_max: 4096,
    };
    // SAFETY: a valid rlimit for this process.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &lim) }, 0);
    let mut hog: Vec<OwnedFd> = Vec::new();
    loop {
        match std::fs::File::open("/dev/null") {
            Ok(f) => hog.push(f.into()),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EMFILE), "{e}");
                break;
            }
        }
    }
    // Everything that needs a new fd fails cleanly, with the kernel's errno.
    emfile("Notifier::fd_view", n.fd_view());
    emfile("Epoll::fd_view", ep.fd_view());
    emfile("KernelNotifier::new", KernelNotifier::new(Mode::Counter));
    emfile("KernelNotifier::try_clone", k.try_clone());
    emfile("first kernel-fd add", ep.add(&k, Events::IN, 2));
    assert_eq!(ep.len(), 1, "the failed add changed nothing");
    // In-memory objects keep working, and the kernel notifier too.
    n.write(3).unwrap();
    let mut evs = [Event::default(); 4];
    assert_eq!(ep.wait(&mut evs, Some(Duration::from_secs(5))).unwrap(), 1);
    assert_eq!(n.read().unwrap(), 3);
    k.write(2).unwrap();
    assert_eq!(k.read().unwrap(), 2);
    let m = Notifier::new();
    ep.add(&m, Events::IN, 3).unwrap();
    m.notify().unwrap();
    assert_eq!(ep.wait(&mut evs, Some(Duration::from_secs(5))).unwrap(), 1);
    assert_eq!(evs[0].data, 3);
    // One fd freed: a view works again, and is exact.
    drop(spare);
    drop(hog.pop());
    let v = n.fd_view().expect("fd_view after freeing an fd");
    n.notify().unwrap();
    assert!(v.consume().contains(Events::IN));
    eprintln!(
        "fd exhaustion: {} fds taken, every creation failed with EMFILE",
        hog.len()
    );
}

#[test]
fn fd_exhaustion_fails_cleanly_with_emfile() {
    if is_child(NAME) {
        child();
        return;
    }
    let _g = serial();
    let out = run_child(NAME, Duration::from_secs(60));
    assert!(out.contains("every creation failed with EMFILE"), "{out}");
}
