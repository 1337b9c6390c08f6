//! Kernel-differential runs for an epoll whose kernel side holds one AutoReset
//! `KernelNotifier` (its harvest reads the eventfd instead of asking the embedded kernel
//! epoll: "One eventfd" in `src/epoll/kernel/fds.rs`), and for the moves in and out of that
//! shape: a second kernel fd added and deleted, the registration modified to and from
//! `ET`, `ONESHOT` and `OUT`. Each step runs on evfd and on its kernel twin — a kernel
//! epoll on a plain eventfd, whose harvest reads the eventfd for each `IN` it reports (the
//! AutoReset delivery, `IN` only if that read took a count) — and every harvest must agree
//! (the events, mask and data, as a set), as must every read of a competing consumer.
#![cfg(any(target_os = "linux", target_os = "android"))]

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};
use rustix::event::{epoll, eventfd, EventfdFlags};

fn efd() -> OwnedFd {
    eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).expect("eventfd")
}

fn write(fd: BorrowedFd<'_>, n: u64) {
    rustix::io::write(fd, &n.to_ne_bytes()).expect("eventfd write");
}

/// A non-blocking read: the count, 0 for `EAGAIN`.
fn read(fd: BorrowedFd<'_>) -> u64 {
    let mut b = [0u8; 8];
    match rustix::io::read(fd, &mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        Err(rustix::io::Errno::AGAIN) => 0,
        r => panic!("eventfd read: {r:?}"),
    }
}

fn kflags(ev: Events) -> epoll::EventFlags {
    epoll::EventFlags::from_bits_retain(ev.bits())
}

/// The kernel twin: a kernel epoll holding eventfd `a` (data 1) and, while `second`, the
/// always-readable eventfd `b` (data 2).
struct Twin {
    ep: OwnedFd,
    a: OwnedFd,
    b: OwnedFd,
}

impl Twin {
    fn harvest(&self) -> Vec<(u32, u64)> {
        // `IN` of the eventfd stays only if its read (the AutoReset delivery) took a count.
        let mut got: Vec<(u32, u64)> = kwait_now(&self.ep)
            .into_iter()
            .filter_map(|(bits, data)| {
                let mut ev = Events::from_bits_retain(bits);
                if data == 1 && ev.contains(Events::IN) && read(self.a.as_fd()) == 0 {
                    ev.remove(Events::IN);
                }
                (!ev.is_empty()).then_some((ev.bits(), data))
            })
            .collect();
        got.sort_unstable();
        got
    }
}

/// A tiny deterministic generator (the run is reproducible from its seed).
struct Lcg(u64);

impl Lcg {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (self.0 >> 33) % n
    }
}

const MASKS: [Events; 5] = [
    Events::IN,
    Events::IN.union(Events::ET),
    Events::IN.union(Events::ONESHOT),
    Events::IN.union(Events::OUT),
    Events::IN.union(Events::ET).union(Events::ONESHOT),
];

fn run(seed: u64, first: Events) {
    let k = KernelNotifier::new(Mode::AutoReset).expect("KernelNotifier");
    let ep = Epoll::new();
    ep.add(&k, first, 1).expect("add");
    let b = efd();
    write(b.as_fd(), 1);
    let twin = Twin {
        ep: epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create"),
        a: efd(),
        b: b.try_clone().expect("dup"),
    };
    epoll::add(
        &twin.ep,
        &twin.a,
        epoll::EventData::new_u64(1),
        kflags(first),
    )
    .expect("add");
    let mut second = false;
    let mut rng = Lcg(seed);
    let mut buf = [Event::default(); 8];
    for step in 0..3000 {
        let what = rng.next(100);
        let ctx = || format!("seed {seed} first {first:?} step {step}");
        match what {
            0..=29 => {
                let n = 1 + rng.next(3);
                write(k.as_fd(), n);
                write(twin.a.as_fd(), n);
            }
            30..=39 => {
                // A competing consumer resets it first.
                assert_eq!(read(k.as_fd()), read(twin.a.as_fd()), "{}", ctx());
            }
            40..=84 => {
                let n = ep.wait(&mut buf, Some(Duration::ZERO)).expect("wait");
                assert_eq!(pairs(&buf[..n]), twin.harvest(), "{}", ctx());
            }
            85..=91 => {
                let m = MASKS[rng.next(MASKS.len() as u64) as usize];
                ep.modify(&k, m, 1).expect("modify");
                epoll::modify(&twin.ep, &twin.a, epoll::EventData::new_u64(1), kflags(m))
                    .expect("modify");
            }
            _ => {
                if second {
                    ep.delete(&b.as_fd()).expect("delete");
                    epoll::delete(&twin.ep, &twin.b).expect("delete");
                } else {
                    ep.add(&b.as_fd(), Events::IN, 2).expect("add");
                    epoll::add(
                        &twin.ep,
                        &twin.b,
                        epoll::EventData::new_u64(2),
                        epoll::EventFlags::IN,
                    )
                    .expect("add");
                }
                second = !second;
            }
        }
    }
}

/// Every starting mask, one seed each: the lone eventfd's harvest (its own read) and the
/// kernel epoll's (after a second fd or a modify) agree with the kernel throughout.
#[test]
fn one_autoreset_eventfd_agrees_with_the_kernel() {
    for (i, &m) in MASKS.iter().enumerate() {
        run(0x5eed + i as u64, m);
    }
}

/// Level-triggered `IN` alone, the shape that reads without the kernel epoll, with many
/// writes and competing reads between harvests.
#[test]
fn lone_level_triggered_eventfd_many_seeds() {
    for seed in 0..8 {
        run(seed, Events::IN);
    }
}

/// `epoll_wait(0)` on a kernel epoll: (events, data) pairs, sorted.
fn kwait_now(ep: &OwnedFd) -> Vec<(u32, u64)> {
    let mut evs = Vec::with_capacity(8);
    epoll::wait(
        ep,
        rustix::buffer::spare_capacity(&mut evs),
        Some(&rustix::event::Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        }),
    )
    .expect("epoll_wait");
    let mut got: Vec<(u32, u64)> = evs
        .iter()
        .map(|e| {
            let (flags, data) = (e.flags, e.data);
            (flags.bits(), data.u64())
        })
        .collect();
    got.sort_unstable();
    got
}

fn pairs(buf: &[Event]) -> Vec<(u32, u64)> {
    let mut got: Vec<(u32, u64)> = buf.iter().map(|e| (e.events.bits(), e.data)).collect();
    got.sort_unstable();
    got
}

/// The one-eventfd delivery while someone else listens on the epoll (an outer epoll nests
/// it), against the kernel twin (a kernel epoll on an eventfd, nested in an outer kernel
/// epoll; the AutoReset delivery is its `read`). A thread blocked in the inner `wait`
/// takes each write; after that delivery the outer epoll finds the inner one not ready, as
/// the kernel's does, and the next write makes it ready again for the outer epoll alone.
#[test]
fn one_eventfd_delivery_under_an_outer_listener_agrees_with_the_kernel() {
    let k = KernelNotifier::new(Mode::AutoReset).expect("KernelNotifier");
    let inner = Epoll::new();
    inner.add(&k, Events::IN, 7).expect("add");
    let outer = Epoll::new();
    outer.add(&inner, Events::IN, 9).expect("add");
    let ka = efd();
    let kin = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
    epoll::add(
        &kin,
        &ka,
        epoll::EventData::new_u64(7),
        epoll::EventFlags::IN,
    )
    .expect("add");
    let kout = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll_create");
    epoll::add(
        &kout,
        &kin,
        epoll::EventData::new_u64(9),
        epoll::EventFlags::IN,
    )
    .expect("add");
    let in_bits = Events::IN.bits();
    let mut buf = [Event::default(); 4];
    for round in 0..40 {
        // A thread asleep in the inner wait (the direct sleep), the outer epoll listening.
        let waiter = {
            let inner = inner.clone();
            std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                let n = inner
                    .wait(&mut buf, Some(Duration::from_secs(10)))
                    .expect("wait");
                pairs(&buf[..n])
            })
        };
        std::thread::sleep(Duration::from_millis(3));
        k.write(1).expect("write");
        write(ka.as_fd(), 1);
        let got = waiter.join().expect("waiter");
        let twin = kwait_now(&kin);
        assert_eq!(read(ka.as_fd()), 1, "round {round}");
        assert_eq!(got, twin, "round {round}: the blocked wait's delivery");
        assert_eq!(got, vec![(in_bits, 7)], "round {round}");
        // Delivered and reset: not ready for the outer epoll, on both.
        let n = outer.wait(&mut buf, Some(Duration::ZERO)).expect("wait");
        assert_eq!(pairs(&buf[..n]), kwait_now(&kout), "round {round}: after");
        assert_eq!(n, 0, "round {round}: the outer epoll saw a delivered event");
        // The next write is the outer epoll's to see.
        k.write(1).expect("write");
        write(ka.as_fd(), 1);
        let n = outer
            .wait(&mut buf, Some(Duration::from_secs(5)))
            .expect("wait");
        assert_eq!(pairs(&buf[..n]), kwait_now(&kout), "round {round}: outer");
        assert_eq!(pairs(&buf[..n]), vec![(in_bits, 9)], "round {round}");
        // The inner harvest takes it (its read), as the twin's.
        let n = inner.wait(&mut buf, Some(Duration::ZERO)).expect("wait");
        let twin = kwait_now(&kin);
        assert_eq!(read(ka.as_fd()), 1, "round {round}");
        assert_eq!(pairs(&buf[..n]), twin, "round {round}: inner");
    }
}
