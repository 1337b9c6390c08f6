//! The direct sleep of `Epoll::wait` on an epoll with kernel fds: one blocked thread per
//! epoll sleeps in `epoll_wait` on the embedded kernel epoll itself, which hands it the
//! kernel events (no second look); in-memory wakes reach it through an edge-triggered bell
//! registered in that kernel epoll. What must hold: every kernel event it takes is
//! delivered (whatever the buffer), an in-memory wake reaches it even when another
//! thread's harvest takes the bell's edge first, a second blocked thread (no slot: the
//! `poll(2)` sleep) is still woken, and a deadline still ends it.
#![cfg(target_os = "linux")]

use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

mod util;
use util::{asleep_in_wait, blocked_wait};

const WATCHDOG: Duration = Duration::from_secs(10);

/// Edge-triggered kernel fds, all ready while one thread sleeps with a one-slot buffer:
/// the kernel events its sleep takes (one per wait) are all delivered, none twice.
#[test]
fn every_kernel_event_a_direct_sleep_takes_is_delivered() {
    let ep = Epoll::new();
    let ks: Vec<KernelNotifier> = (0..6)
        .map(|_| KernelNotifier::new(Mode::Counter).unwrap())
        .collect();
    for (i, k) in ks.iter().enumerate() {
        ep.add(k, Events::IN | Events::ET, i as u64).unwrap();
    }
    let mut seen = Vec::new();
    for round in 0..ks.len() {
        let rx = blocked_wait(&ep, 1);
        std::thread::sleep(Duration::from_millis(2));
        if round == 0 {
            for k in &ks {
                k.write(1).unwrap();
            }
        }
        let got = rx
            .recv_timeout(WATCHDOG)
            .expect("watchdog: kernel event lost");
        assert_eq!(got.len(), 1);
        seen.push(got[0].data);
    }
    seen.sort_unstable();
    assert_eq!(seen, (0..ks.len() as u64).collect::<Vec<_>>());
    let mut buf = [Event::default(); 8];
    assert_eq!(ep.wait(&mut buf, Some(Duration::ZERO)).unwrap(), 0);
}

/// A thread in the direct sleep, another harvesting the same epoll with zero timeouts in a
/// loop (its kernel collects may take the bell's edge before the sleeper does), a
/// level-triggered in-memory source notified: the sleeper's wake must still reach it (as
/// the kernel wakes a blocked thread for a level-triggered event, whoever else harvests).
#[test]
fn in_memory_wake_survives_a_collect_taking_the_bell_edge() {
    for round in 0..200 {
        let ep = Epoll::new();
        let k = KernelNotifier::new(Mode::Counter).unwrap();
        ep.add(&k, Events::IN, 0).unwrap();
        let n = Notifier::new();
        ep.add(&n, Events::IN, 7).unwrap();
        let rx = blocked_wait(&ep, 4);
        std::thread::sleep(Duration::from_micros(300));
        let stop = Arc::new(AtomicBool::new(false));
        let spinner = {
            let (ep, stop) = (ep.clone(), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut buf = [Event::default(); 4];
                while !stop.load(SeqCst) {
                    ep.wait(&mut buf, Some(Duration::ZERO)).unwrap();
                }
            })
        };
        std::thread::sleep(Duration::from_micros(100));
        n.notify().unwrap();
        let got = rx.recv_timeout(WATCHDOG);
        stop.store(true, SeqCst);
        spinner.join().unwrap();
        let got = got.unwrap_or_else(|_| panic!("watchdog: round {round}: the wake was lost"));
        assert_eq!(
            got,
            vec![Event {
                events: Events::IN,
                data: 7
            }]
        );
    }
}

/// Two blocked threads (one in the direct sleep, one in the `poll(2)` sleep): two
/// edge-triggered kernel events, one per thread, wake both.
#[test]
fn two_blocked_threads_both_wake() {
    let ep = Epoll::new();
    let a = KernelNotifier::new(Mode::AutoReset).unwrap();
    let b = KernelNotifier::new(Mode::AutoReset).unwrap();
    ep.add(&a, Events::IN | Events::ET, 1).unwrap();
    ep.add(&b, Events::IN | Events::ET, 2).unwrap();
    let r1 = asleep_in_wait(&ep, 1);
    let r2 = asleep_in_wait(&ep, 1);
    a.write(1).unwrap();
    b.write(1).unwrap();
    let mut got = vec![
        r1.recv_timeout(WATCHDOG).expect("watchdog: first thread")[0].data,
        r2.recv_timeout(WATCHDOG).expect("watchdog: second thread")[0].data,
    ];
    got.sort_unstable();
    assert_eq!(got, vec![1, 2]);
}

/// A direct sleep with a deadline and nothing ready returns 0 after it, and a borrowed
/// kernel fd made ready later is still delivered by the next wait.
#[test]
fn direct_sleep_times_out_and_leaves_nothing_behind() {
    let ep = Epoll::new();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    let fd = k.as_fd();
    ep.add(&fd, Events::IN, 9).unwrap();
    let mut buf = [Event::default(); 2];
    let t = Instant::now();
    assert_eq!(
        ep.wait(&mut buf, Some(Duration::from_millis(20))).unwrap(),
        0
    );
    assert!(t.elapsed() >= Duration::from_millis(20));
    k.write(1).unwrap();
    assert_eq!(ep.wait(&mut buf, Some(Duration::from_secs(5))).unwrap(), 1);
    assert_eq!(
        buf[0],
        Event {
            events: Events::IN,
            data: 9
        }
    );
}
