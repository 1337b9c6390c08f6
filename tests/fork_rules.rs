//! The fork rules (issue 10, item 4): a child process may use a `KernelNotifier` (it shares
//! the eventfd with the parent, as any fd) and anything it creates itself; an in-memory
//! `Notifier`, `Epoll`, fd view or future created before the fork refuses every operation
//! in the child with `Unsupported` (`poll` reports `ERR | HUP`), takes no lock (so a lock
//! held at the fork cannot deadlock the child), and leaves the parent's state — its
//! counts, its fd views' doorbells, its kernel epoll's deliveries — untouched.
//!
//! Every child runs under a watchdog: the parent kills it after a timeout and fails.

use std::future::Future;
use std::io;
use std::pin::pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::task::{Context, Poll, Wake, Waker};
use std::thread;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod fork_util;
use fork_util::{in_child_of, CHILD_LIMIT};

/// Fork (libc's `fork`, which runs the atfork handlers); run `f` in the child under the
/// watchdog (`fork_util::in_child_of`).
fn in_child(what: &str, f: impl FnOnce() -> Result<(), String>) {
    // SAFETY: the child only runs `f` (which uses evfd and allocates: glibc's malloc is
    // fork-safe) and then `_exit`s; it never returns into the test harness.
    in_child_of(what, || unsafe { libc::fork() }, f);
}

fn refused<T: std::fmt::Debug>(what: &str, r: io::Result<T>) -> Result<(), String> {
    match r {
        Err(e) if e.kind() == io::ErrorKind::Unsupported && e.to_string().contains("fork") => {
            Ok(())
        }
        other => Err(format!("{what}: expected the fork refusal, got {other:?}")),
    }
}

fn check(cond: bool, what: &str) -> Result<(), String> {
    if cond {
        Ok(())
    } else {
        Err(what.to_owned())
    }
}

struct Noop;
impl Wake for Noop {
    fn wake(self: Arc<Self>) {}
}

#[test]
fn child_refuses_pre_fork_in_memory_objects_and_leaves_the_parent_intact() {
    let n = Notifier::builder().initial(5).build().unwrap();
    let ep = Epoll::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let view = n.fd_view().unwrap();
    let ep_view = ep.fd_view().unwrap();
    let kick = KernelNotifier::new(Mode::AutoReset).unwrap();
    ep.add(&kick, Events::IN, 2).unwrap();
    kick.notify().unwrap();
    let empty = Notifier::new();
    let mut pending = pin!(empty.read_async());
    let waker = Waker::from(Arc::new(Noop));
    let mut cx = Context::from_waker(&waker);
    for _ in 0..2 {
        assert!(pending.as_mut().poll(&mut cx).is_pending());
    }

    in_child("pre-fork objects", || {
        refused("Notifier::write", n.write(1))?;
        refused("Notifier::try_write", n.try_write(1))?;
        refused("Notifier::notify", n.notify())?;
        refused("Notifier::read", n.read())?;
        refused("Notifier::try_read", n.try_read())?;
        refused(
            "Notifier::read_timeout",
            n.read_timeout(Duration::from_secs(5)),
        )?;
        refused("Notifier::fd_view", n.fd_view())?;
        check(
            n.poll(Events::IN) == Events::ERR | Events::HUP,
            "Notifier::poll",
        )?;
        let mut evs = [Event::default(); 4];
        refused("Epoll::wait", ep.wait(&mut evs, Some(Duration::ZERO)))?;
        refused("Epoll::wait (blocking)", ep.wait(&mut evs, None))?;
        refused("Epoll::add", ep.add(&Notifier::new(), Events::IN, 3))?;
        refused("Epoll::modify", ep.modify(&n, Events::IN, 3))?;
        refused("Epoll::delete", ep.delete(&n))?;
        refused("Epoll::fd_view", ep.fd_view())?;
        check(
            ep.poll(Events::IN) == Events::ERR | Events::HUP,
            "Epoll::poll",
        )?;
        check(
            view.consume() == Events::ERR | Events::HUP,
            "FdView::consume",
        )?;
        let w = Waker::from(Arc::new(Noop));
        match pending.as_mut().poll(&mut Context::from_waker(&w)) {
            Poll::Ready(r) => refused("ReadFuture::poll", r)?,
            Poll::Pending => return Err("ReadFuture::poll: pending".into()),
        }
        refused(
            "Epoll::wait_async",
            futures::executor::block_on(ep.wait_async(&mut evs)),
        )?;
        // The kernel notifier works (it is the parent's eventfd).
        check(kick.count().map_err(|e| e.to_string())? == 1, "kick count")?;
        // What the child makes itself works.
        let m = Notifier::new();
        let e2 = Epoll::new();
        e2.add(&m, Events::IN, 9).map_err(|e| e.to_string())?;
        e2.add(&kick, Events::IN, 10).map_err(|e| e.to_string())?;
        m.write(2).map_err(|e| e.to_string())?;
        let k = e2
            .wait(&mut evs, Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        check(k >= 1, "child's own epoll")?;
        check(
            m.read().map_err(|e| e.to_string())? == 2,
            "child's own notifier",
        )?;
        Ok(())
    });

    // The parent is untouched: its count, its views' doorbells, its kernel delivery.
    assert_eq!(n.count(), 5);
    assert!(view.consume().contains(Events::IN));
    let mut fds = [rustix::event::PollFd::new(
        &ep_view,
        rustix::event::PollFlags::IN,
    )];
    let zero = rustix::event::Timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    assert_eq!(rustix::event::poll(&mut fds, Some(&zero)).unwrap(), 1);
    let mut evs = [Event::default(); 4];
    let k = ep.wait(&mut evs, Some(Duration::from_secs(5))).unwrap();
    let mut datas: Vec<u64> = evs[..k].iter().map(|e| e.data).collect();
    datas.sort_unstable();
    // The child's own epoll took the AutoReset kick's delivery from the shared eventfd (a
    // KernelNotifier is shared, as any fd); the pre-fork epoll's own events are intact.
    assert!(datas.contains(&1), "{datas:?}");
    assert_eq!(n.read().unwrap(), 5);
    empty.write(1).unwrap();
    assert!(matches!(pending.as_mut().poll(&mut cx), Poll::Ready(Ok(1))));
}

#[test]
fn child_can_use_a_kernel_notifier_shared_with_the_parent() {
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    in_child("kernel notifier", || {
        k.write(3).map_err(|e| e.to_string())?;
        let ep = Epoll::new();
        ep.add(&k, Events::IN, 1).map_err(|e| e.to_string())?;
        let mut evs = [Event::default(); 2];
        let got = ep
            .wait(&mut evs, Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        check(
            got == 1 && evs[0].data == 1,
            "kernel notifier ready in the child's epoll",
        )
    });
    assert_eq!(k.read().unwrap(), 3, "the child's write reached the parent");
}

#[test]
fn fork_while_other_threads_use_a_notifier_never_deadlocks_the_child() {
    let n = Notifier::new();
    let ep = Epoll::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    // Threads that keep the notifier's and the epoll's locks busy: blocked readers and
    // waiters being woken, writers, registrations coming and going.
    let busy: Vec<_> = (0..4)
        .map(|t| {
            let (n, ep, stop) = (n.clone(), ep.clone(), Arc::clone(&stop));
            thread::spawn(move || {
                let mut evs = [Event::default(); 4];
                while !stop.load(SeqCst) {
                    match t {
                        0 => n.write(1).unwrap(),
                        1 => {
                            let _ = n.read_timeout(Duration::from_micros(200));
                        }
                        2 => {
                            let _ = ep.wait(&mut evs, Some(Duration::from_micros(200))).unwrap();
                        }
                        _ => {
                            let m = Notifier::builder().initial(1).build().unwrap();
                            ep.add(&m, Events::IN, 2).unwrap();
                            ep.delete(&m).unwrap();
                        }
                    }
                }
            })
        })
        .collect();
    for i in 0..40 {
        // A last handle, registered in the busy epoll: the child drops it (a close, which
        // unhooks from the epoll in the parent's process and must be a no-op in the child).
        let last = Notifier::new();
        ep.add(&last, Events::IN, 3).unwrap();
        let (n, ep) = (&n, &ep);
        in_child(&format!("fork {i} under load"), move || {
            drop(last);
            refused("write", n.write(1))?;
            refused("read_timeout", n.read_timeout(Duration::from_millis(1)))?;
            let mut evs = [Event::default(); 4];
            refused("wait", ep.wait(&mut evs, Some(Duration::from_millis(1))))?;
            check(ep.is_empty(), "len in the child")?;
            drop(n.clone());
            let fresh = Notifier::new();
            fresh.write(1).map_err(|e| e.to_string())?;
            check(
                fresh.read().map_err(|e| e.to_string())? == 1,
                "fresh notifier",
            )
        });
        thread::sleep(Duration::from_millis(3));
    }
    stop.store(true, SeqCst);
    for (i, b) in busy.into_iter().enumerate() {
        let t0 = Instant::now();
        while !b.is_finished() {
            n.write(1).unwrap();
            assert!(t0.elapsed() < CHILD_LIMIT, "busy thread {i} did not stop");
            thread::sleep(Duration::from_millis(1));
        }
        b.join().unwrap();
    }
}

#[test]
fn child_epoll_wakes_on_kernel_readiness_after_the_parent_used_the_watcher() {
    // The parent blocks on a kernel source first (the process-wide watcher thread runs),
    // then forks: a child's own epoll must still be woken by its kernel source's readiness.
    let kp = KernelNotifier::new(Mode::Counter).unwrap();
    let ep = Epoll::new();
    ep.add(&kp, Events::IN, 1).unwrap();
    let k2 = kp.try_clone().unwrap();
    let w = thread::spawn(move || {
        thread::sleep(Duration::from_millis(50));
        k2.write(1).unwrap();
    });
    let mut evs = [Event::default(); 2];
    assert_eq!(ep.wait(&mut evs, Some(Duration::from_secs(10))).unwrap(), 1);
    w.join().unwrap();
    assert_eq!(kp.read().unwrap(), 1);
    in_child("kernel readiness in the child", || {
        let k = KernelNotifier::new(Mode::Counter).map_err(|e| e.to_string())?;
        let e = Epoll::new();
        e.add(&k, Events::IN, 7).map_err(|e| e.to_string())?;
        let k2 = k.try_clone().map_err(|e| e.to_string())?;
        let w = thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            k2.write(1)
        });
        let mut evs = [Event::default(); 2];
        let t0 = Instant::now();
        let got = e
            .wait(&mut evs, Some(Duration::from_secs(5)))
            .map_err(|e| e.to_string())?;
        let _ = w.join();
        let took = t0.elapsed();
        // Generous: the write comes after 50 ms; only a missed wake (found by the wait's
        // last look at its 5 s deadline) fails this.
        check(
            got == 1 && took < Duration::from_millis(2500),
            &format!("the child's wait returned {got} after {took:?}"),
        )
    });
}

#[test]
fn child_dropping_a_kernel_notifier_leaves_the_parents_epoll_intact() {
    // A KernelNotifier registered in the parent's epoll, dropped in the child: the drop must
    // not unregister it from the kernel epoll the child shares with the parent.
    let slot = std::sync::Mutex::new(Some(KernelNotifier::new(Mode::Counter).unwrap()));
    let ep = Epoll::new();
    ep.add(slot.lock().unwrap().as_ref().unwrap(), Events::IN, 5)
        .unwrap();
    in_child("drop a registered kernel notifier", || {
        let k = slot
            .try_lock()
            .map_err(|_| "slot locked".to_string())?
            .take();
        drop(k);
        Ok(())
    });
    let guard = slot.lock().unwrap();
    let k = guard.as_ref().expect("the parent's notifier");
    k.write(1).unwrap();
    let mut evs = [Event::default(); 2];
    assert_eq!(ep.wait(&mut evs, Some(Duration::from_secs(5))).unwrap(), 1);
    assert_eq!(
        evs[0],
        Event {
            events: Events::IN,
            data: 5
        }
    );
    assert_eq!(ep.len(), 1);
}

/// Threads keep adding a shared `KernelNotifier` to epolls and deleting it (its
/// registrations lock busy) while the main thread forks: every child can register the
/// notifier in an epoll of its own, be woken through it, delete it and drop its handle —
/// the registrations lock is never inherited held (`sys::fork::guard`).
#[test]
fn fork_while_threads_register_a_kernel_notifier_never_deadlocks_the_child() {
    let k = Arc::new(KernelNotifier::new(Mode::Counter).unwrap());
    let stop = Arc::new(AtomicBool::new(false));
    let busy: Vec<_> = (0..3)
        .map(|t| {
            let (k, stop) = (Arc::clone(&k), Arc::clone(&stop));
            thread::spawn(move || {
                let ep = Epoll::new();
                let mut rounds = 0u64;
                while !stop.load(SeqCst) {
                    ep.add(&*k, Events::IN, t).unwrap();
                    ep.delete(&*k).unwrap();
                    // An epoll that goes away with the registration in it (`Drop` path).
                    let other = Epoll::new();
                    other.add(&*k, Events::IN, t).unwrap();
                    drop(other);
                    rounds += 1;
                }
                rounds
            })
        })
        .collect();
    for i in 0..40 {
        let k = Arc::clone(&k);
        in_child(&format!("fork {i} while registering"), move || {
            let ep = Epoll::new();
            ep.add(&*k, Events::IN, 9).map_err(|e| e.to_string())?;
            k.write(1).map_err(|e| e.to_string())?;
            let mut evs = [Event::default(); 4];
            let n = ep
                .wait(&mut evs, Some(Duration::from_secs(5)))
                .map_err(|e| e.to_string())?;
            check(
                n == 1 && evs[0].data == 9,
                "the child's epoll saw the write",
            )?;
            ep.delete(&*k).map_err(|e| e.to_string())?;
            check(ep.is_empty(), "deleted in the child")?;
            let again = Epoll::new();
            again.add(&*k, Events::IN, 10).map_err(|e| e.to_string())?;
            drop(again);
            drop(k);
            Ok(())
        });
        thread::sleep(Duration::from_millis(2));
    }
    stop.store(true, SeqCst);
    for b in busy {
        assert!(b.join().unwrap() > 0, "a registering thread never ran");
    }
    // The parent's notifier is intact: the children's writes are there to read.
    assert!(k.try_read().is_ok());
}
