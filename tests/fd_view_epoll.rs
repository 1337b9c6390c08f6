//! fd views of an `Epoll`, seen by real OS pollers: `poll(2)`, kernel epoll (level- and
//! edge-triggered) and tokio's `AsyncFd`, through every transition of the epoll (add of a
//! ready source, write, the harvest that drains, ET delivery, ONESHOT disarm, delete, source
//! dropped); an `Epoll` nested in a kernel epoll through its view; a stress test of 2
//! producers against a consumer asleep in a kernel epoll on the view.

use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, FdView, Mode, Notifier};
use rustix::event::epoll::{self, CreateFlags, EventData, EventFlags};
use rustix::event::{poll, PollFd, PollFlags, Timespec};

mod util;
use util::{epoll_wait_syscalls, poll_readable, this_tid, wait_until_blocked_in, Kep};

/// `Epoll::wait` that never blocks.
fn wait0(ep: &Epoll, max: usize) -> Vec<Event> {
    let mut buf = vec![Event::default(); max];
    let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
    buf.truncate(n);
    buf
}

fn ev(data: u64) -> Event {
    Event {
        events: Events::IN,
        data,
    }
}

/// Every OS poller looks at the epoll's view after one step of a script.
struct Watch {
    view: FdView,
    lt: Kep,
    et: Kep,
}

impl Watch {
    fn new(ep: &Epoll) -> Watch {
        let view = ep.fd_view().unwrap();
        let lt = Kep::new(&view, false);
        let et = Kep::new(&view, true);
        Watch { view, lt, et }
    }

    /// `readable`: what poll(2) and LT epoll must say. `edge`: whether ET epoll must report
    /// a new event since the last check. The OS pollers look first; then, if `exact`, the
    /// epoll's own readiness check (which re-polls the queued items) must agree and must not
    /// change what the pollers see.
    #[track_caller]
    fn check_with(&self, ep: &Epoll, readable: bool, edge: bool, exact: bool, step: &str) {
        assert_eq!(poll_readable(&self.view), readable, "{step}: poll(2)");
        assert_eq!(self.lt.ready_now(), readable, "{step}: epoll LT");
        assert_eq!(self.et.ready_now(), edge, "{step}: epoll ET");
        assert!(!self.et.ready_now(), "{step}: epoll ET reported twice");
        if exact {
            assert_eq!(
                ep.poll(Events::IN).contains(Events::IN),
                readable,
                "{step}: Epoll::poll"
            );
            assert_eq!(poll_readable(&self.view), readable, "{step}: poll(2) after");
            assert!(!self.et.ready_now(), "{step}: Epoll::poll made an edge");
        }
    }

    #[track_caller]
    fn check(&self, ep: &Epoll, readable: bool, edge: bool, step: &str) {
        self.check_with(ep, readable, edge, true, step);
    }
}

/// A level-triggered item through write, coalesced write, harvest, consumption of its
/// notifier and the harvest that drops it.
#[test]
fn lt_item_transitions() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let w = Watch::new(&ep);
    w.check(&ep, false, false, "new");
    n.write(0).unwrap();
    // eventfd's write(0) wakes pollers, and the kernel queues the item for it; so do we.
    // Queued but not ready: the view is readable until a harvest re-polls it.
    w.check_with(&ep, true, true, false, "write(0) queues the item");
    assert_eq!(wait0(&ep, 4), []);
    w.check(&ep, false, false, "the harvest that drops it");
    n.notify().unwrap();
    w.check(&ep, true, true, "notify");
    n.notify().unwrap();
    w.check(&ep, true, false, "notify while queued: coalesced");
    assert_eq!(wait0(&ep, 4), [ev(1)]);
    w.check(&ep, true, false, "LT harvest: requeued, still ready");
    assert_eq!(wait0(&ep, 4), [ev(1)]);
    assert_eq!(n.read().unwrap(), 2);
    // As in the kernel, the queued LT item is re-polled by the next harvest only: until then
    // the view stays readable (not `exact`: Epoll::poll would re-poll it here).
    w.check_with(
        &ep,
        true,
        false,
        false,
        "notifier read behind the epoll's back",
    );
    assert_eq!(wait0(&ep, 4), []);
    w.check(
        &ep,
        false,
        false,
        "the harvest that drops it drains the doorbell",
    );
    n.notify().unwrap();
    w.check(&ep, true, true, "notify again");
    assert_eq!(n.read().unwrap(), 1);
    // Epoll::poll is a harvest too: it drops the stale item and drains.
    assert!(ep.poll(Events::IN).is_empty());
    w.check(&ep, false, false, "Epoll::poll after the read");
    let s = w.view.doorbell_stats();
    assert_eq!(
        (s.rings, s.drains),
        (3, 3),
        "one ring and one drain per edge"
    );
}

/// Adding a source that is ready already queues it: the view is rung by `add` itself.
#[test]
fn add_of_a_ready_notifier_and_delete() {
    let ep = Epoll::new();
    let w = Watch::new(&ep);
    let a = Notifier::builder().initial(1).build().unwrap();
    let b = Notifier::builder().initial(1).build().unwrap();
    ep.add(&a, Events::IN, 1).unwrap();
    w.check(&ep, true, true, "add of a ready notifier");
    ep.add(&b, Events::IN | Events::ET, 2).unwrap();
    w.check(&ep, true, false, "second ready add");
    ep.delete(&a).unwrap();
    w.check(&ep, true, false, "delete one of two");
    ep.delete(&b).unwrap();
    w.check(&ep, false, false, "delete of the last queued item");
    assert_eq!(wait0(&ep, 4), []);
    // Deleting an item that is not queued changes nothing.
    ep.add(&a, Events::OUT | Events::ET, 3).unwrap();
    w.check(&ep, true, true, "re-add for OUT");
    assert_eq!(
        wait0(&ep, 4),
        [Event {
            events: Events::OUT,
            data: 3
        }]
    );
    w.check(&ep, false, false, "ET harvest");
    ep.delete(&a).unwrap();
    w.check(&ep, false, false, "delete of an unqueued item");
}

/// Edge-triggered items are not requeued: the harvest that delivers the last one drains.
/// With more ready items than slots, the fd stays readable until all are delivered.
#[test]
fn et_items_delivered() {
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..3).map(|_| Notifier::new()).collect();
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, Events::IN | Events::ET, i as u64).unwrap();
    }
    let w = Watch::new(&ep);
    for n in &ns {
        n.notify().unwrap();
    }
    w.check(&ep, true, true, "three notifies");
    assert_eq!(wait0(&ep, 2), [ev(0), ev(1)]);
    w.check(&ep, true, false, "two of three delivered");
    assert_eq!(wait0(&ep, 2), [ev(2)]);
    w.check(&ep, false, false, "all delivered");
    // The notifiers still hold their counts, but ET reports only new writes.
    ns[1].notify().unwrap();
    w.check(&ep, true, true, "a new write re-arms ET");
    assert_eq!(wait0(&ep, 4), [ev(1)]);
    w.check(&ep, false, false, "delivered");
}

/// ONESHOT: delivery disarms (the doorbell drains); writes while disarmed do nothing;
/// `modify` re-arms and, the source being ready, queues it again.
#[test]
fn oneshot_disarm_and_rearm() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN | Events::ONESHOT, 1).unwrap();
    let w = Watch::new(&ep);
    n.notify().unwrap();
    w.check(&ep, true, true, "notify");
    assert_eq!(wait0(&ep, 4), [ev(1)]);
    w.check(&ep, false, false, "ONESHOT delivered: disarmed");
    n.notify().unwrap();
    w.check(&ep, false, false, "notify while disarmed");
    ep.modify(&n, Events::IN | Events::ONESHOT, 2).unwrap();
    w.check(&ep, true, true, "modify re-arms a ready source");
    assert_eq!(wait0(&ep, 4), [ev(2)]);
    w.check(&ep, false, false, "delivered again");
}

/// A source dropped while queued leaves the interest set and the ready list: the view
/// drains, as if the item had been deleted.
#[test]
fn source_dropped_while_queued() {
    let ep = Epoll::new();
    let a = Notifier::new();
    let b = Notifier::new();
    ep.add(&a, Events::IN, 1).unwrap();
    ep.add(&b, Events::IN, 2).unwrap();
    let w = Watch::new(&ep);
    a.notify().unwrap();
    b.notify().unwrap();
    w.check(&ep, true, true, "two queued");
    drop(a);
    w.check(&ep, true, false, "one of two dropped");
    let b2 = b.clone();
    drop(b);
    w.check(&ep, true, false, "a clone of the other dropped: still open");
    drop(b2);
    w.check(&ep, false, false, "the last queued source dropped");
    assert_eq!(ep.len(), 0);
    assert_eq!(wait0(&ep, 4), []);
}

/// AutoReset, level-triggered: the harvest resets the count (delivery) and requeues the
/// item, as the kernel would; the next harvest drops it and drains. Edge-triggered: drained
/// by the delivering harvest.
#[test]
fn autoreset_items() {
    let ep = Epoll::new();
    let lt = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    let et = Notifier::builder().mode(Mode::AutoReset).build().unwrap();
    ep.add(&lt, Events::IN, 1).unwrap();
    ep.add(&et, Events::IN | Events::ET, 2).unwrap();
    let w = Watch::new(&ep);
    et.notify().unwrap();
    w.check(&ep, true, true, "ET kick");
    assert_eq!(wait0(&ep, 4), [ev(2)]);
    assert_eq!(et.count(), 0);
    w.check(&ep, false, false, "ET kick delivered and reset");
    lt.notify().unwrap();
    w.check(&ep, true, true, "LT kick");
    assert_eq!(wait0(&ep, 4), [ev(1)]);
    assert_eq!(lt.count(), 0);
    w.check_with(&ep, true, false, false, "LT kick delivered, requeued");
    assert_eq!(wait0(&ep, 4), []);
    w.check(&ep, false, false, "the next harvest drops it");
}

/// A view made while stale entries are queued starts not readable (it re-polls them), and
/// one made while an event is ready starts readable.
#[test]
fn view_created_over_queued_items() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 1).unwrap();
    n.notify().unwrap();
    assert_eq!(wait0(&ep, 4), [ev(1)]);
    n.read().unwrap(); // the LT item is stale now
    let v = ep.fd_view().unwrap();
    assert!(!poll_readable(&v));
    assert_eq!(v.doorbell_stats().rings, 0);
    n.notify().unwrap();
    let v2 = ep.fd_view().unwrap();
    assert!(poll_readable(&v2));
    assert!(poll_readable(&v));
    assert_eq!(v2.doorbell_stats().rings, 1);
}

/// `consume` on an epoll's view is `Epoll::poll(IN)`: it consumes nothing and drops stale
/// entries.
#[test]
fn consume_is_a_poll() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN, 1).unwrap();
    let v = ep.fd_view().unwrap();
    n.notify().unwrap();
    assert!(v.consume().contains(Events::IN));
    assert!(v.consume().contains(Events::IN));
    assert!(poll_readable(&v));
    assert_eq!(n.count(), 1);
    n.read().unwrap();
    assert!(poll_readable(&v), "stale until re-polled");
    assert!(v.consume().is_empty());
    assert!(!poll_readable(&v));
}

/// The view holds the epoll open: its items stay registered after the last `Epoll` handle
/// goes, and the view keeps following them.
#[test]
fn view_keeps_the_epoll_open() {
    let n = Notifier::new();
    let v = {
        let ep = Epoll::new();
        ep.add(&n, Events::IN, 1).unwrap();
        ep.fd_view().unwrap()
    };
    assert!(!poll_readable(&v));
    n.notify().unwrap();
    assert!(poll_readable(&v));
    assert!(v.consume().contains(Events::IN));
    n.read().unwrap();
    assert!(v.consume().is_empty());
    assert!(!poll_readable(&v));
    let clone = v.clone();
    drop(v);
    n.notify().unwrap();
    assert!(poll_readable(&clone));
}

/// Several views of one epoll, and views of nested evfd epolls: each follows its own epoll.
#[test]
fn views_of_nested_epolls() {
    let inner = Epoll::new();
    let outer = Epoll::new();
    let n = Notifier::new();
    inner.add(&n, Events::IN | Events::ET, 1).unwrap();
    // OUT in the outer item's mask: the inner epoll's "emptied" wake must not queue it.
    outer
        .add(&inner, Events::IN | Events::OUT | Events::ET, 2)
        .unwrap();
    let vi = inner.fd_view().unwrap();
    let vi2 = inner.fd_view().unwrap();
    let vo = outer.fd_view().unwrap();
    n.notify().unwrap();
    assert!(poll_readable(&vi) && poll_readable(&vi2) && poll_readable(&vo));
    // The outer harvest polls the inner epoll (consuming nothing in it).
    assert_eq!(wait0(&outer, 4), [ev(2)]);
    assert!(!poll_readable(&vo), "outer ET item delivered");
    assert!(poll_readable(&vi) && poll_readable(&vi2));
    // The inner harvest empties it: both inner views drain, and the outer epoll is not
    // woken (an epoll never reports OUT, and its emptying is no event for an outer epoll).
    assert_eq!(wait0(&inner, 4), [ev(1)]);
    assert!(!poll_readable(&vi) && !poll_readable(&vi2));
    assert!(
        !poll_readable(&vo),
        "the emptied wake queued the outer item"
    );
    assert_eq!(wait0(&outer, 4), []);
    assert_eq!(vo.doorbell_stats().rings, 1);
}

/// The epoll nested in a kernel epoll: a consumer asleep in `epoll_wait` on the view is
/// woken by a notifier write in another thread, then harvests the event with `Epoll::wait`.
#[test]
fn epoll_nested_in_a_kernel_epoll() {
    for et in [false, true] {
        let ep = Epoll::new();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 9).unwrap();
        let view = ep.fd_view().unwrap();
        let k = Kep::new(&view, et);
        let n2 = n.clone();
        let waiter = this_tid();
        let t = std::thread::spawn(move || {
            wait_until_blocked_in(waiter, epoll_wait_syscalls(), "the kernel epoll's wait");
            n2.write(3).unwrap();
        });
        let start = Instant::now();
        assert_eq!(k.wait(Some(Duration::from_secs(10))), 1, "et={et}");
        assert!(start.elapsed() < Duration::from_secs(5));
        let mut evs = [Event::default(); 4];
        assert_eq!(ep.wait(&mut evs, Some(Duration::ZERO)).unwrap(), 1);
        assert_eq!(evs[0], ev(9));
        assert_eq!(n.read().unwrap(), 3);
        t.join().unwrap();
        // The LT item is stale now: one more (empty) harvest, then the kernel epoll sleeps.
        assert_eq!(wait0(&ep, 4), []);
        assert_eq!(k.wait(Some(Duration::ZERO)), 0, "et={et}");
        assert!(!poll_readable(&view));
    }
}

/// `wait_async` is a harvest too: it drains the view when it leaves nothing ready.
#[test]
fn wait_async_drains() {
    let ep = Epoll::new();
    let n = Notifier::new();
    ep.add(&n, Events::IN | Events::ET, 4).unwrap();
    let view = ep.fd_view().unwrap();
    let n2 = n.clone();
    let mut evs = [Event::default(); 4];
    let wait = util::once_pending(ep.wait_async(&mut evs), move || n2.notify().unwrap());
    let got = futures::executor::block_on(wait).0.unwrap();
    assert_eq!(&evs[..got], &[ev(4)]);
    assert!(!poll_readable(&view));
}

#[cfg(feature = "futures")]
#[test]
fn stream_drains() {
    use futures::StreamExt;
    let ep = Epoll::new();
    let a = Notifier::new();
    let b = Notifier::new();
    ep.add(&a, Events::IN | Events::ET, 1).unwrap();
    ep.add(&b, Events::IN | Events::ET, 2).unwrap();
    let view = ep.fd_view().unwrap();
    a.notify().unwrap();
    b.notify().unwrap();
    let mut s = ep.stream();
    futures::executor::block_on(async {
        assert_eq!(s.next().await.unwrap().unwrap(), ev(1));
        assert!(poll_readable(&view), "one item left");
        assert_eq!(s.next().await.unwrap().unwrap(), ev(2));
    });
    assert!(!poll_readable(&view));
}

#[test]
fn cloexec_and_backend() {
    let ep = Epoll::new();
    let v = ep.fd_view().unwrap();
    let fl = rustix::io::fcntl_getfd(&v).unwrap();
    assert!(fl.contains(rustix::io::FdFlags::CLOEXEC));
    assert!(format!("{v:?}").contains("FdView"));
}

/// A small kernel-differential run with fd views attached to every evfd epoll: random
/// programs over 3 eventfd-style notifiers (Counter, Semaphore) and 2 epolls (the second
/// nestable in the first, with random masks, `OUT` included) run on kernel `eventfd` +
/// `epoll` and on evfd in lockstep, and must agree op by op (return values, error kinds,
/// events and their order, `poll` of the epoll). The views' hooks (harvest end, delete,
/// close) must not change what the epolls report, and the views must be exact where the
/// epoll was just re-polled: after `Epoll::poll` (readable iff it said `IN`) and after a
/// `wait` that returned 0 (not readable).
#[test]
fn kernel_differential_with_views() {
    use rustix::event::{eventfd, EventfdFlags};
    use std::io::ErrorKind;

    #[derive(Debug, PartialEq)]
    enum Out {
        Unit(Result<(), ErrorKind>),
        Read(Result<u64, ErrorKind>),
        Events(Vec<(u32, u64)>),
        Poll(u32),
        Skipped,
    }
    const MASKS: [u32; 10] = [
        0x1,
        0x4,
        0x5,
        0x1 | 0x8000_0000,
        0x4 | 0x8000_0000,
        0x5 | 0x8000_0000,
        0x1 | 0x4000_0000,
        0x5 | 0x4000_0000,
        0x1 | 0x8000_0000 | 0x4000_0000,
        0x1 | 0x10,
    ];
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut rnd = move |n: u64| {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed % n
    };
    let zero = Timespec::default();
    let (mut compared, mut events, mut exact_checks) = (0u64, 0u64, 0u64);
    for prog in 0..2000 {
        let sem: Vec<bool> = (0..3).map(|_| rnd(2) == 1).collect();
        let mut kn: Vec<Option<OwnedFd>> = sem
            .iter()
            .map(|&s| {
                let mut f = EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC;
                if s {
                    f |= EventfdFlags::SEMAPHORE;
                }
                Some(eventfd(0, f).unwrap())
            })
            .collect();
        let ke: Vec<OwnedFd> = (0..2)
            .map(|_| epoll::create(CreateFlags::CLOEXEC).unwrap())
            .collect();
        let mut en: Vec<Option<Notifier>> = sem
            .iter()
            .map(|&s| {
                let mode = if s { Mode::Semaphore } else { Mode::Counter };
                Some(Notifier::builder().mode(mode).build().unwrap())
            })
            .collect();
        let ee: Vec<Epoll> = (0..2).map(|_| Epoll::new()).collect();
        let views: Vec<FdView> = ee.iter().map(|e| e.fd_view().unwrap()).collect();
        for step in 0..60 {
            let ep = rnd(2) as usize;
            // Targets: notifiers 0..3, and epoll 1 (only inside epoll 0).
            let t = if ep == 0 && rnd(4) == 0 {
                3
            } else {
                rnd(3) as usize
            };
            let mask = MASKS[rnd(MASKS.len() as u64) as usize];
            let data = t as u64 | (rnd(1000) << 8);
            let kerr = |e: rustix::io::Errno| std::io::Error::from(e).kind();
            let op = rnd(100);
            let (ko, eo) = match op {
                0..=39 => {
                    // add / modify / delete
                    let kt: Option<&OwnedFd> = if t == 3 { Some(&ke[1]) } else { kn[t].as_ref() };
                    let Some(kt) = kt else {
                        continue;
                    };
                    let ev = Events::from_bits_retain(mask);
                    let fl = EventFlags::from_bits_retain(mask);
                    let d = EventData::new_u64(data);
                    let which = rnd(3);
                    let ko = match which {
                        0 => epoll::add(&ke[ep], kt, d, fl),
                        1 => epoll::modify(&ke[ep], kt, d, fl),
                        _ => epoll::delete(&ke[ep], kt),
                    };
                    let eo = match (t, which) {
                        (3, 0) => ee[ep].add(&ee[1], ev, data),
                        (3, 1) => ee[ep].modify(&ee[1], ev, data),
                        (3, _) => ee[ep].delete(&ee[1]),
                        (_, 0) => ee[ep].add(en[t].as_ref().unwrap(), ev, data),
                        (_, 1) => ee[ep].modify(en[t].as_ref().unwrap(), ev, data),
                        (_, _) => ee[ep].delete(en[t].as_ref().unwrap()),
                    };
                    (
                        Out::Unit(ko.map_err(kerr)),
                        Out::Unit(eo.map_err(|e| e.kind())),
                    )
                }
                40..=59 => {
                    let i = rnd(3) as usize;
                    let (Some(kfd), Some(n)) = (kn[i].as_ref(), en[i].as_ref()) else {
                        continue;
                    };
                    let v = rnd(3);
                    let ko = rustix::io::write(kfd, &v.to_ne_bytes()).map(drop);
                    (
                        Out::Unit(ko.map_err(kerr)),
                        Out::Unit(n.try_write(v).map_err(|e| e.kind())),
                    )
                }
                60..=71 => {
                    let i = rnd(3) as usize;
                    let (Some(kfd), Some(n)) = (kn[i].as_ref(), en[i].as_ref()) else {
                        continue;
                    };
                    let mut b = [0u8; 8];
                    let ko = rustix::io::read(kfd, &mut b).map(|_| u64::from_ne_bytes(b));
                    (
                        Out::Read(ko.map_err(kerr)),
                        Out::Read(n.try_read().map_err(|e| e.kind())),
                    )
                }
                72..=89 => {
                    let max = 1 + rnd(3) as usize;
                    let mut kb = [epoll::Event {
                        flags: EventFlags::empty(),
                        data: EventData::new_u64(0),
                    }; 3];
                    let k = epoll::wait(&ke[ep], &mut kb[..max], Some(&zero)).unwrap();
                    let kv: Vec<(u32, u64)> = kb[..k]
                        .iter()
                        .map(|e| {
                            let (f, d) = (e.flags, e.data);
                            (f.bits(), d.u64())
                        })
                        .collect();
                    let ev = wait0(&ee[ep], max);
                    events += ev.len() as u64;
                    if ev.is_empty() {
                        exact_checks += 1;
                        assert!(
                            !poll_readable(&views[ep]),
                            "program {prog} step {step}: epoll {ep} returned 0 but its view is readable"
                        );
                    }
                    (
                        Out::Events(kv),
                        Out::Events(ev.iter().map(|e| (e.events.bits(), e.data)).collect()),
                    )
                }
                90..=96 => {
                    let mut p = [PollFd::new(&ke[ep], PollFlags::IN | PollFlags::OUT)];
                    poll(&mut p, Some(&zero)).unwrap();
                    let er = ee[ep].poll(Events::IN | Events::OUT);
                    exact_checks += 1;
                    assert_eq!(
                        poll_readable(&views[ep]),
                        er.contains(Events::IN),
                        "program {prog} step {step}: view of epoll {ep} after Epoll::poll"
                    );
                    (
                        Out::Poll(u32::from(p[0].revents().bits())),
                        Out::Poll(er.bits()),
                    )
                }
                _ => {
                    // Close a notifier (both twins): it leaves every interest set.
                    let i = rnd(3) as usize;
                    if kn[i].is_none() || rnd(3) != 0 {
                        continue;
                    }
                    kn[i] = None;
                    en[i] = None;
                    (Out::Skipped, Out::Skipped)
                }
            };
            assert_eq!(
                ko, eo,
                "program {prog} step {step} (op {op}, ep {ep}, target {t}, mask {mask:#x}): \
                 kernel (left) vs evfd (right)"
            );
            compared += 1;
            if kn.iter().all(Option::is_none) {
                break;
            }
        }
    }
    eprintln!(
        "kernel differential with views: {compared} ops agreed, {events} events, \
         {exact_checks} exact view checks"
    );
}

/// The stress test: 2 producer threads × 500 000 notifies to notifiers registered in the
/// evfd `Epoll`, while a consumer sleeps in a kernel epoll on the epoll's view, then
/// harvests with `wait(Some(0))` and reads what it got. No wake may be lost: every notify is
/// read, within 60 s; a kernel timeout while some count stays non-zero is a lost wake.
#[test]
fn stress_two_producers_lt() {
    stress(false);
}

/// The same with edge-triggered items in the evfd epoll and an edge-triggered kernel epoll
/// on the view: the consumer harvests until `wait` returns 0 before sleeping again (the
/// case where a refill racing the emptying harvest, or arriving during a harvest that
/// finds nothing, must still produce an edge).
#[test]
fn stress_two_producers_et() {
    stress(true);
}

fn stress(et: bool) {
    const PER_PRODUCER: u64 = 500_000;
    const TOTAL: u64 = 2 * PER_PRODUCER;
    const SOURCES: usize = 4;
    let deadline = Instant::now() + Duration::from_secs(60);
    let ep = Epoll::new();
    let ns: Vec<Notifier> = (0..SOURCES).map(|_| Notifier::new()).collect();
    let item_flags = if et {
        Events::IN | Events::ET
    } else {
        Events::IN
    };
    for (i, n) in ns.iter().enumerate() {
        ep.add(n, item_flags, i as u64).unwrap();
    }
    let view = ep.fd_view().unwrap();
    let failed = Arc::new(AtomicBool::new(false));

    // Producer p notifies sources p and p + 2, alternating.
    let producers: Vec<_> = (0..2)
        .map(|p| {
            let mine = [ns[p].clone(), ns[p + 2].clone()];
            let failed = failed.clone();
            std::thread::spawn(move || {
                for i in 0..PER_PRODUCER {
                    mine[(i % 2) as usize].notify().unwrap();
                    if i % 4096 == 0 && failed.load(SeqCst) {
                        return;
                    }
                }
            })
        })
        .collect();

    let sum = AtomicU64::new(0);
    let (mut wakes, mut harvests, mut empty_harvests, mut lost) = (0u64, 0u64, 0u64, 0u64);
    let kep = epoll::create(CreateFlags::CLOEXEC).unwrap();
    let kflags = if et {
        EventFlags::IN | EventFlags::ET
    } else {
        EventFlags::IN
    };
    epoll::add(&kep, &view, EventData::new_u64(1), kflags).unwrap();
    let mut kevs = [epoll::Event {
        flags: EventFlags::empty(),
        data: EventData::new_u64(0),
    }; 1];
    let ts = Timespec {
        tv_sec: 1,
        tv_nsec: 0,
    };
    let mut evs = [Event::default(); SOURCES];
    let pending = |ns: &[Notifier]| ns.iter().any(|n| n.count() > 0);
    while sum.load(SeqCst) < TOTAL {
        if Instant::now() > deadline {
            failed.store(true, SeqCst);
            break;
        }
        let got = match epoll::wait(&kep, &mut kevs, Some(&ts)) {
            Ok(k) => k,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => panic!("epoll_wait: {e}"),
        };
        if got == 0 {
            // A timeout with a count pending: a notify queues its item and rings the view
            // (or, the view being rung, the consumer's last harvest was not empty) before it
            // returns. After a grace period (a producer may be between its count update and
            // its wake), the kernel epoll must report the view: else a wake or an edge was
            // lost. Count it, and harvest anyway so that the test fails fast.
            if !pending(&ns) {
                continue;
            }
            std::thread::sleep(Duration::from_millis(50));
            if pending(&ns) && epoll::wait(&kep, &mut kevs, Some(&Timespec::default())) != Ok(1) {
                eprintln!("lost: view {view:?}, sum {}", sum.load(SeqCst));
                lost += 1;
            }
        } else {
            wakes += 1;
        }
        // Harvest: LT once per wake (the kernel epoll reports again while it stays
        // readable); ET until the epoll is empty.
        loop {
            let k = ep.wait(&mut evs, Some(Duration::ZERO)).unwrap();
            harvests += 1;
            if k == 0 {
                empty_harvests += 1;
                break;
            }
            for e in &evs[..k] {
                if let Ok(v) = ns[e.data as usize].try_read() {
                    sum.fetch_add(v, SeqCst);
                }
            }
            if !et {
                break;
            }
        }
    }
    for p in producers {
        p.join().unwrap();
    }
    let s = view.doorbell_stats();
    eprintln!(
        "stress (et={et}): sum {} of {TOTAL}, {wakes} kernel wakes, {harvests} harvests \
         ({empty_harvests} empty), {} rings, {} drains, {lost} lost wakes",
        sum.load(SeqCst),
        s.rings,
        s.drains
    );
    assert!(
        !failed.load(SeqCst),
        "took longer than 60 s (sum {})",
        sum.load(SeqCst)
    );
    assert_eq!(sum.load(SeqCst), TOTAL);
    assert_eq!(lost, 0, "the consumer slept through pending events");
    // At quiescence: nothing pending; one harvest re-polls what is queued and the doorbell
    // matches the epoll.
    assert!(!pending(&ns));
    assert_eq!(wait0(&ep, SOURCES), []);
    assert!(!poll_readable(&view));
    assert!(ep.poll(Events::IN).is_empty());
    assert!(s.rings <= TOTAL && s.drains <= TOTAL);
}

#[cfg(feature = "tokio")]
mod tokio_pollers {
    use super::*;
    use tokio::io::unix::AsyncFd;

    /// The epoll's view in a plain tokio `AsyncFd`: await readability, harvest with
    /// `wait(Some(0))` inside `try_io` (0 events → `WouldBlock`, which clears tokio's
    /// readiness until the next edge), read what was delivered.
    #[test]
    fn asyncfd_over_an_epoll_view() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            let ep = Epoll::new();
            let a = Notifier::new();
            let b = Notifier::new();
            ep.add(&a, Events::IN, 1).unwrap();
            ep.add(&b, Events::IN | Events::ET, 2).unwrap();
            // SAFETY: the view owns its fd and never replaces it; the AsyncFd owns the view.
            let afd = unsafe { AsyncFd::register(ep.fd_view().unwrap()) }.unwrap();
            let harvest = |ep: &Epoll| -> std::io::Result<Vec<Event>> {
                let got = wait0(ep, 4);
                if got.is_empty() {
                    Err(std::io::ErrorKind::WouldBlock.into())
                } else {
                    Ok(got)
                }
            };
            for round in 1..=4u64 {
                let (a2, b2) = (a.clone(), b.clone());
                let t = std::thread::spawn(move || {
                    std::thread::sleep(Duration::from_millis(5));
                    if round % 2 == 1 { a2 } else { b2 }.write(round).unwrap();
                });
                let got = loop {
                    let mut g = afd.readable().await.unwrap();
                    match g.try_io(|_| harvest(&ep)) {
                        Ok(r) => break r.unwrap(),
                        Err(_would_block) => continue,
                    }
                };
                let (n, data) = if round % 2 == 1 { (&a, 1) } else { (&b, 2) };
                assert_eq!(got, [ev(data)], "round {round}");
                assert_eq!(n.read().unwrap(), round);
                t.join().unwrap();
            }
            // Nothing pending: a readiness wait ends in a timeout or an empty harvest.
            let r = tokio::time::timeout(Duration::from_millis(50), async {
                loop {
                    let mut g = afd.readable().await.unwrap();
                    if let Ok(r) = g.try_io(|_| harvest(&ep)) {
                        return r.unwrap();
                    }
                }
            });
            assert!(r.await.is_err());
            assert!(!poll_readable(afd.get_ref()));
        });
    }

    /// A multi-thread runtime: tasks await the view while a thread notifies; every unit is
    /// read once and nobody hangs.
    #[test]
    fn asyncfd_epoll_view_multi_thread() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        rt.block_on(async {
            const N: u64 = 20_000;
            let ep = Epoll::new();
            let ns: Vec<Notifier> = (0..2).map(|_| Notifier::new()).collect();
            for (i, n) in ns.iter().enumerate() {
                ep.add(n, Events::IN | Events::ET, i as u64).unwrap();
            }
            // SAFETY: as above.
            let afd = Arc::new(unsafe { AsyncFd::register(ep.fd_view().unwrap()) }.unwrap());
            let got = Arc::new(AtomicU64::new(0));
            let tasks: Vec<_> = (0..2)
                .map(|_| {
                    let (afd, got, ep, ns) = (afd.clone(), got.clone(), ep.clone(), ns.clone());
                    tokio::spawn(async move {
                        while got.load(SeqCst) < N {
                            let r =
                                tokio::time::timeout(Duration::from_millis(200), afd.readable())
                                    .await;
                            let Ok(g) = r else { continue };
                            let mut g = g.unwrap();
                            let r = g.try_io(|_| {
                                let evs = wait0(&ep, 2);
                                if evs.is_empty() {
                                    return Err(std::io::ErrorKind::WouldBlock.into());
                                }
                                for e in evs {
                                    if let Ok(v) = ns[e.data as usize].try_read() {
                                        got.fetch_add(v, SeqCst);
                                    }
                                }
                                Ok(())
                            });
                            let _ = r;
                        }
                    })
                })
                .collect();
            let ns2 = ns.clone();
            std::thread::spawn(move || {
                for i in 0..N {
                    ns2[(i % 2) as usize].notify().unwrap();
                }
            });
            tokio::time::timeout(Duration::from_secs(60), async {
                for t in tasks {
                    t.await.unwrap();
                }
            })
            .await
            .expect("tasks finished within 60 s");
            assert_eq!(got.load(SeqCst), N);
        });
    }
}
