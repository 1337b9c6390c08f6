//! The parked eventfd (feature `tokio`): while an epoll's only kernel fd is an AutoReset
//! `KernelNotifier` and a task waits on it through the tokio reactor (which then watches the
//! eventfd itself), the epoll's own kernel epoll lets go of the eventfd, so that a write or
//! a read of it runs one epoll callback (the reactor's) instead of two. Whoever relies on
//! the kernel epoll afterwards (a blocking `wait`, a task of another executor, an outer
//! epoll) puts it back first; the registration stays the epoll's throughout (`len`,
//! `delete`, `modify`, `add`'s `EEXIST`, the notifier's drop). The kernel's own view is
//! read from `/proc/self/fdinfo`: which epoll instances of the process hold the eventfd.
#![cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]

use std::io::ErrorKind;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

mod util;

const LIMIT: Duration = Duration::from_secs(20);

fn rt() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap()
}

/// `f` on its own thread, failing the test if it takes longer than `LIMIT`.
fn bounded<T: Send + 'static>(what: &str, f: impl FnOnce() -> T + Send + 'static) -> T {
    let _turn = SERIAL
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(LIMIT * 2)
        .unwrap_or_else(|_| panic!("{what}: hung"))
}

/// The eventfd's id (`eventfd-id:` of its fdinfo, shared by its duplicates).
fn id_of(fd: RawFd) -> String {
    eventfd_id(fd).expect("an eventfd")
}

fn eventfd_id(fd: RawFd) -> Option<String> {
    let info = std::fs::read_to_string(format!("/proc/self/fdinfo/{fd}")).ok()?;
    info.lines()
        .find_map(|l| l.strip_prefix("eventfd-id:"))
        .map(|v| v.trim().to_string())
}

/// How many fds of this process name the eventfd whose id is `id` (it or a duplicate).
fn open_fds(id: &str) -> usize {
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_string_lossy().parse::<RawFd>().ok())
        .filter(|&fd| eventfd_id(fd).as_deref() == Some(id))
        .count()
}

/// How many epoll items of this process watch the eventfd whose id is `id` (the `tfd:`
/// lines of every `anon_inode:[eventpoll]` fd, naming it or a duplicate): its wait queue's
/// epoll entries. (The tests of this binary take turns: `SERIAL`.)
fn watchers(id: &str) -> usize {
    let mut fds = Vec::new();
    let mut epolls = Vec::new();
    for e in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
        let Ok(num) = e.file_name().to_string_lossy().parse::<RawFd>() else {
            continue;
        };
        match std::fs::read_link(e.path()) {
            Ok(l) if l.to_str() == Some("anon_inode:[eventpoll]") => epolls.push(num),
            Ok(l)
                if l.to_str() == Some("anon_inode:[eventfd]")
                    && eventfd_id(num).as_deref() == Some(id) =>
            {
                fds.push(num)
            }
            _ => {}
        }
    }
    // A duplicate of an epoll fd (mio keeps one of its registry's) shows the same items:
    // each instance counts once, by its `tfd:` lines (which carry each item's data).
    let mut seen = std::collections::HashSet::new();
    let mut n = 0;
    for ep in epolls {
        let Ok(info) = std::fs::read_to_string(format!("/proc/self/fdinfo/{ep}")) else {
            continue;
        };
        let items: Vec<&str> = info
            .lines()
            .filter_map(|l| l.strip_prefix("tfd:"))
            .collect();
        if !seen.insert(items.join("\n")) {
            continue;
        }
        n += items
            .iter()
            .filter_map(|l| l.split_whitespace().next()?.parse::<RawFd>().ok())
            .filter(|t| fds.contains(t))
            .count();
    }
    n
}

/// The tests of this binary count epoll items process-wide: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// One `wait_async` of `ep` on `rt`, woken by a write of `k` from another thread after a
/// little while; the event it returned.
fn async_round(
    rt: &tokio::runtime::Runtime,
    ep: &Arc<Epoll>,
    k: &Arc<KernelNotifier>,
) -> Vec<Event> {
    let k2 = Arc::clone(k);
    let writer = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(3));
        k2.write(1).unwrap();
    });
    let ep2 = Arc::clone(ep);
    let got = rt.block_on(async move {
        let mut buf = [Event::default(); 4];
        // The watchdog first, and it fails without polling the wait again (a timeout that
        // re-polled it would find a lost wake's count, and hide it).
        let n = tokio::select! {
            biased;
            _ = tokio::time::sleep(LIMIT) => panic!("wait_async was not woken"),
            r = ep2.wait_async(&mut buf) => r.unwrap(),
        };
        buf[..n].to_vec()
    });
    writer.join().unwrap();
    got
}

/// A fresh AutoReset notifier registered alone (`IN`, `data`) in a fresh epoll, awaited
/// once through `rt`'s reactor, which parks it: the notifier, its eventfd id, the epoll.
fn parked(rt: &tokio::runtime::Runtime, data: u64) -> (Arc<KernelNotifier>, String, Arc<Epoll>) {
    let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
    let id = id_of(k.as_raw_fd());
    let ep = Arc::new(Epoll::new());
    ep.add(&*k, Events::IN, data).unwrap();
    assert_eq!(watchers(&id), 1, "added: the epoll's kernel epoll holds it");
    assert_eq!(async_round(rt, &ep, &k), ev(data));
    assert_eq!(watchers(&id), 1, "parked: the reactor's alone");
    (k, id, ep)
}

fn ev(data: u64) -> Vec<Event> {
    vec![Event {
        events: Events::IN,
        data,
    }]
}

/// An async wait parks the eventfd (one watcher left: the reactor's); every write still
/// wakes a wait, the AutoReset delivery takes it, and no count is left behind.
#[test]
fn an_async_wait_parks_the_eventfd_and_loses_nothing() {
    bounded("parks", || {
        let rt = rt();
        let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
        let id = id_of(k.as_raw_fd());
        let ep = Arc::new(Epoll::new());
        ep.add(&*k, Events::IN, 5).unwrap();
        assert_eq!(watchers(&id), 1, "added: the epoll's kernel epoll holds it");
        for round in 0..50 {
            assert_eq!(async_round(&rt, &ep, &k), ev(5), "round {round}");
            assert_eq!(watchers(&id), 1, "round {round}: the reactor's alone");
        }
        assert_eq!(ep.len(), 1, "still registered");
        assert_eq!(k.try_read().unwrap_err().kind(), ErrorKind::WouldBlock);
        // A write while parked is seen by a non-blocking wait (the read of the eventfd).
        k.write(3).unwrap();
        let mut buf = [Event::default(); 4];
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(buf[0], ev(5)[0]);
    });
}

/// A blocking `wait` after the park puts the eventfd back before it sleeps: a write made
/// while it was parked is delivered at once, one made during the sleep wakes it, and the
/// route never parks it again (both kinds of wait keep working, with two watchers).
#[test]
fn a_blocking_wait_puts_it_back_for_good() {
    bounded("blocking after async", || {
        let rt = rt();
        let (k, id, ep) = parked(&rt, 9);
        // Written while parked, then a blocking wait (it sleeps in the kernel epoll).
        k.write(1).unwrap();
        let mut buf = [Event::default(); 4];
        assert_eq!(ep.wait(&mut buf, Some(LIMIT)).unwrap(), 1);
        assert_eq!(buf[0], ev(9)[0]);
        assert_eq!(watchers(&id), 2, "back in the kernel epoll");
        // A write during the sleep wakes it.
        for round in 0..20 {
            let k2 = Arc::clone(&k);
            let w = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(3));
                k2.write(1).unwrap();
            });
            assert_eq!(ep.wait(&mut buf, Some(LIMIT)).unwrap(), 1, "round {round}");
            w.join().unwrap();
            assert_eq!(async_round(&rt, &ep, &k), ev(9), "round {round}");
            assert_eq!(watchers(&id), 2, "round {round}: not parked again");
        }
    });
}

/// Parked, the registration is still the epoll's, and the kernel's answers are the same as
/// unparked: `len` counts it, `add` of it again says `EEXIST`, `modify` works (and puts it
/// back), `delete` removes it (a second says `ENOENT`), a new `add` registers it again; and
/// a notifier dropped while parked leaves the epoll empty.
#[test]
fn parked_registrations_answer_as_the_kernel() {
    bounded("ctl while parked", || {
        let rt = rt();
        let (k, id, ep) = parked(&rt, 1);
        assert_eq!(ep.len(), 1);
        assert_eq!(
            ep.add(&*k, Events::IN, 2).unwrap_err().raw_os_error(),
            Some(libc::EEXIST)
        );
        assert_eq!(ep.len(), 1);
        assert_eq!(async_round(&rt, &ep, &k), ev(1), "the add changed nothing");

        // modify while parked: in again, with the new data, events still delivered.
        assert_eq!(watchers(&id), 1, "parked again by the route");
        ep.modify(&*k, Events::IN | Events::ET, 3).unwrap();
        assert_eq!(async_round(&rt, &ep, &k), ev(3));

        // delete while parked.
        assert_eq!(watchers(&id), 1, "parked again");
        assert_eq!(
            open_fds(&id),
            2,
            "the notifier's and the reactor's duplicate"
        );
        ep.delete(&*k).unwrap();
        assert_eq!(ep.len(), 0);
        // The reactor's registration of the old shape, a duplicate, went with it.
        assert_eq!(watchers(&id), 0, "nobody watches it");
        assert_eq!(open_fds(&id), 1, "the notifier's own fd alone");
        assert_eq!(
            ep.delete(&*k).unwrap_err().raw_os_error(),
            Some(libc::ENOENT)
        );
        ep.add(&*k, Events::IN, 4).unwrap();
        assert_eq!(async_round(&rt, &ep, &k), ev(4));

        // The notifier dropped while parked.
        assert_eq!(watchers(&id), 1, "parked");
        drop(k);
        assert_eq!(ep.len(), 0);
        assert_eq!(watchers(&id), 0, "the reactor's duplicate went with it");
        assert_eq!(open_fds(&id), 0, "the eventfd is closed");
    });
}

/// Another registration added beside the parked eventfd: it is back in the kernel epoll
/// (the shape is no longer "one eventfd"), and both fds wake waits.
#[test]
fn a_second_fd_puts_it_back() {
    use std::io::Write;
    bounded("second fd", || {
        let rt = rt();
        let (k, id, ep) = parked(&rt, 1);
        let (r, mut w) = std::io::pipe().unwrap();
        ep.add(&std::os::fd::AsFd::as_fd(&r), Events::IN, 2)
            .unwrap();
        assert_eq!(
            watchers(&id),
            1,
            "back in the kernel epoll, and the reactor's duplicate gone"
        );
        assert_eq!(open_fds(&id), 1);
        assert_eq!(async_round(&rt, &ep, &k), ev(1));
        w.write_all(b"x").unwrap();
        let mut buf = [Event::default(); 4];
        assert_eq!(ep.wait(&mut buf, Some(LIMIT)).unwrap(), 1);
        assert_eq!(buf[0], ev(2)[0]);
    });
}

/// After the park, a task of another executor (the watcher's route) and an outer epoll
/// (which watches this one's kernel epoll through the watcher) each hear the eventfd.
#[test]
fn the_watcher_and_an_outer_epoll_hear_it_after_a_park() {
    bounded("watcher after park", || {
        let rt = rt();
        let (k, id, ep) = parked(&rt, 1);

        // A wait on the futures executor: the watcher arms the kernel epoll (the write comes
        // once the wait is pending).
        let k2 = Arc::clone(&k);
        let (tx, rx) = mpsc::channel();
        let w = std::thread::spawn(move || {
            rx.recv().unwrap();
            k2.write(1).unwrap();
        });
        let mut buf = [Event::default(); 4];
        let first = move |pending: bool| {
            assert!(pending, "the wait was ready before the write");
            tx.send(()).unwrap();
        };
        let wait = util::reporting_first_poll(ep.wait_async(&mut buf), first);
        let n = futures::executor::block_on(wait).unwrap();
        w.join().unwrap();
        assert_eq!(buf[..n].to_vec(), ev(1));
        assert_eq!(watchers(&id), 2, "back for the watcher");

        // A second epoll, parked, nested in an outer one.
        let (k, _, inner) = parked(&rt, 7);
        let outer = Epoll::new();
        outer.add(&*inner, Events::IN, 8).unwrap();
        let k2 = Arc::clone(&k);
        let waiter = util::this_tid();
        let w = std::thread::spawn(move || {
            util::wait_until_blocked(waiter, "the outer epoll's wait");
            k2.write(1).unwrap();
        });
        assert_eq!(outer.wait(&mut buf, Some(LIMIT)).unwrap(), 1);
        w.join().unwrap();
        assert_eq!(buf[0], ev(8)[0]);
        assert_eq!(inner.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(buf[0], ev(7)[0]);
    });
}

/// The park and a kernel sleep racing: on fresh epolls, a blocked `wait` (which puts the
/// eventfd back before it sleeps) and a task's first `wait_async` (whose registration parks
/// it) start together; two writes must end both waits, whichever takes which. A sleep left
/// in the kernel epoll without the eventfd would never see the second write.
#[test]
fn a_park_racing_a_blocked_wait_loses_neither() {
    bounded("park vs sleep", || {
        let rt = rt();
        for round in 0..200u64 {
            let k = Arc::new(KernelNotifier::new(Mode::AutoReset).unwrap());
            let ep = Arc::new(Epoll::new());
            ep.add(&*k, Events::IN, round).unwrap();
            let (tx, rx) = mpsc::channel();
            let (ep2, tx2) = (Arc::clone(&ep), tx.clone());
            let sleeper = std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                let n = ep2.wait(&mut buf, Some(LIMIT)).unwrap();
                let _ = tx2.send(buf[..n].to_vec());
            });
            let ep3 = Arc::clone(&ep);
            rt.spawn(async move {
                let mut buf = [Event::default(); 4];
                let n = tokio::select! {
                    biased;
                    _ = tokio::time::sleep(LIMIT) => 0,
                    r = ep3.wait_async(&mut buf) => r.unwrap(),
                };
                let _ = tx.send(buf[..n].to_vec());
            });
            // Let the two reach their waits (the race itself is theirs).
            std::thread::sleep(Duration::from_micros(200 + (round % 7) * 150));
            for which in ["first", "second"] {
                k.write(1).unwrap();
                let got = rx
                    .recv_timeout(LIMIT * 2)
                    .unwrap_or_else(|_| panic!("round {round}: the {which} write woke nobody"));
                assert_eq!(got, ev(round), "round {round}: the {which} wait");
            }
            sleeper.join().unwrap();
        }
    });
}
