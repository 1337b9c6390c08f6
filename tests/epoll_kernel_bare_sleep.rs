//! The bare sleep of `Epoll::wait` on an epoll of kernel fds alone: while the epoll never
//! held an in-memory source, a blocked thread takes the direct slot and sleeps in
//! `epoll_wait` on the embedded kernel epoll with no entry on the epoll's wait queue.
//! What must hold: the epoll's first in-memory source reaches it (added ready, or added and
//! then notified, at any moment of its sleep), every kernel write is delivered once to one
//! of several blocked threads, a deadline ends it on time, and a thread that finds the
//! slot held still sleeps and wakes.
#![cfg(target_os = "linux")]

use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod util;
use util::{asleep_in_wait, blocked_wait};

const WATCHDOG: Duration = Duration::from_secs(10);

/// The pause before the add, cycling through "at once", "while it goes to sleep" and
/// "asleep".
fn pause(round: u32) {
    match round % 3 {
        0 => {}
        1 => std::thread::sleep(Duration::from_micros(20)),
        _ => std::thread::sleep(Duration::from_micros(400)),
    }
}

/// A ready in-memory notifier added to an epoll of one kernel fd while a thread sleeps
/// bare on it: the wait returns that notifier's event (the kernel fd stays silent).
#[test]
fn first_in_memory_add_of_a_ready_source_wakes_a_bare_sleeper() {
    for round in 0..150 {
        let ep = Epoll::new();
        let k = KernelNotifier::new(Mode::AutoReset).unwrap();
        ep.add(&k, Events::IN, 1).unwrap();
        let rx = blocked_wait(&ep, 4);
        pause(round);
        let n = Notifier::new();
        n.notify().unwrap();
        ep.add(&n, Events::IN, 7).unwrap();
        let got = rx
            .recv_timeout(WATCHDOG)
            .unwrap_or_else(|_| panic!("round {round}: the in-memory source's wake was lost"));
        assert_eq!(
            got,
            vec![Event {
                events: Events::IN,
                data: 7
            }]
        );
        assert_eq!(k.count().unwrap(), 0);
    }
}

/// The first in-memory source added while the sleeper sleeps, and notified later: the
/// sleeper has moved to the general path, where the notify wakes it.
#[test]
fn in_memory_source_added_then_notified_wakes_a_bare_sleeper() {
    for round in 0..60 {
        let ep = Epoll::new();
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        ep.add(&k, Events::IN, 1).unwrap();
        let rx = blocked_wait(&ep, 4);
        pause(round);
        let n = Notifier::new();
        ep.add(&n, Events::IN | Events::ET, 7).unwrap();
        pause(round + 1);
        n.notify().unwrap();
        let got = rx
            .recv_timeout(WATCHDOG)
            .unwrap_or_else(|_| panic!("round {round}: the notify's wake was lost"));
        assert_eq!(
            got,
            vec![Event {
                events: Events::IN,
                data: 7
            }]
        );
    }
}

/// Two threads blocked on one epoll of one AutoReset kernel notifier (one sleeps bare in
/// the slot, the other in `poll(2)`): each write is delivered exactly once, and both
/// threads end up woken.
#[test]
fn each_kernel_write_is_delivered_once_to_one_of_two_sleepers() {
    for _ in 0..20 {
        let ep = Epoll::new();
        let k = KernelNotifier::new(Mode::AutoReset).unwrap();
        ep.add(&k, Events::IN, 3).unwrap();
        let (a, b) = (asleep_in_wait(&ep, 4), asleep_in_wait(&ep, 4));
        let mut got = Vec::new();
        for _ in 0..2 {
            k.write(1).unwrap();
            let t0 = Instant::now();
            let n = loop {
                let mut n = 0;
                for rx in [&a, &b] {
                    if let Ok(evs) = rx.try_recv() {
                        got.extend(evs);
                        n += 1;
                    }
                }
                if n > 0 {
                    break n;
                }
                assert!(t0.elapsed() < WATCHDOG, "a kernel write was not delivered");
                std::thread::sleep(Duration::from_micros(100));
            };
            assert_eq!(n, 1, "one write woke both threads with an event");
        }
        assert_eq!(
            got,
            vec![
                Event {
                    events: Events::IN,
                    data: 3
                };
                2
            ]
        );
        let mut buf = [Event::default(); 4];
        assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 0);
    }
}

/// A bare sleep with a deadline and nothing to deliver returns 0 at the deadline, not
/// before, and not long after.
#[test]
fn bare_sleep_returns_at_its_deadline() {
    let ep = Epoll::new();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    ep.add(&k, Events::IN, 1).unwrap();
    let mut buf = [Event::default(); 4];
    for ms in [1u64, 20] {
        let t0 = Instant::now();
        assert_eq!(
            ep.wait(&mut buf, Some(Duration::from_millis(ms))).unwrap(),
            0
        );
        let el = t0.elapsed();
        assert!(el >= Duration::from_millis(ms), "returned early: {el:?}");
        assert!(
            el < Duration::from_millis(ms) + WATCHDOG,
            "returned late: {el:?}"
        );
    }
    // The slot is free again: a write is delivered to the next wait.
    k.write(5).unwrap();
    assert_eq!(ep.wait(&mut buf, Some(Duration::from_secs(5))).unwrap(), 1);
    assert_eq!(
        buf[0],
        Event {
            events: Events::IN,
            data: 1
        }
    );
}

/// More kernel events ready than one bare sleep takes at once (it takes up to 16 on its
/// stack), with a 64-slot buffer: 40 AutoReset eventfds written before a blocking wait
/// (its `epoll_wait` returns at once) and while one sleeps (the first write wakes it).
/// The wait and the ones after it deliver each of the 40 exactly once, each eventfd reset
/// by its delivery: none lost to the smaller take, none repeated.
#[test]
fn more_ready_kernel_fds_than_one_bare_take_are_each_delivered_once() {
    const FDS: usize = 40;
    let ep = Epoll::new();
    let ks: Vec<KernelNotifier> = (0..FDS)
        .map(|_| KernelNotifier::new(Mode::AutoReset).unwrap())
        .collect();
    for (i, k) in ks.iter().enumerate() {
        ep.add(k, Events::IN, i as u64).unwrap();
    }
    for asleep in [false, true] {
        let rx = if asleep {
            let rx = asleep_in_wait(&ep, 64);
            for k in &ks {
                k.write(3).unwrap();
            }
            rx
        } else {
            for k in &ks {
                k.write(3).unwrap();
            }
            blocked_wait(&ep, 64)
        };
        let mut seen = vec![0u32; FDS];
        let mut got = rx
            .recv_timeout(WATCHDOG)
            .expect("the blocked wait was not woken");
        assert!(!got.is_empty());
        loop {
            for e in &got {
                assert_eq!(e.events, Events::IN);
                seen[e.data as usize] += 1;
            }
            let mut buf = [Event::default(); 64];
            let n = ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
            if n == 0 {
                break;
            }
            got = buf[..n].to_vec();
        }
        assert_eq!(
            seen,
            vec![1; FDS],
            "asleep {asleep}: each write delivered once"
        );
        for k in &ks {
            assert_eq!(k.count().unwrap(), 0, "reset by its delivery");
        }
    }
    // Nothing left: a timed wait times out.
    let t = Instant::now();
    let mut buf = [Event::default(); 64];
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(20))).unwrap(),
        0
    );
    assert!(t.elapsed() >= Duration::from_millis(20));
}
