//! A peer that rings a `SharedNotifier`'s doorbell without writing the count (a stray ring,
//! or a peer killed between emptying the count and draining the doorbell) leaves the
//! doorbell readable with a count of 0. A pending `read_async` must treat that as a spurious
//! wake: time out on time, burn no CPU, starve no other task, and still complete on the
//! next real write.
#![cfg(target_os = "linux")]

mod shared_util;

use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

use evfd::{Mode, SharedNotifier};
use shared_util::{doorbell, recv_fds};

#[test]
fn stray_rings_neither_spin_nor_starve_a_current_thread_runtime() {
    let n = SharedNotifier::new(Mode::Counter).unwrap();
    let (a, b) = UnixStream::pair().unwrap();
    n.send(&a).unwrap();
    let mut payload = [0u8; 64];
    let bell = doorbell(recv_fds(&b, &mut payload));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let (ticks, timed_out, took) = rt.block_on(async {
        // The other task on this thread: it must keep running.
        let ticker = tokio::spawn(async {
            let mut ticks = 0u32;
            for _ in 0..20 {
                tokio::time::sleep(Duration::from_millis(2)).await;
                ticks += 1;
            }
            ticks
        });
        // The stray ring, from another thread while the read waits.
        let ringer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(10));
            rustix::io::write(&bell, &1u64.to_ne_bytes()).unwrap();
            bell
        });
        let start = Instant::now();
        let r = tokio::time::timeout(Duration::from_millis(100), n.read_async()).await;
        let took = start.elapsed();
        drop(ringer.join().unwrap());
        (ticker.await.unwrap(), r.is_err(), took)
    });
    assert!(timed_out, "a stray ring completed a read of an empty count");
    assert!(
        took < Duration::from_secs(2),
        "timeout(100 ms) took {took:?}"
    );
    assert_eq!(ticks, 20, "the other task starved");
    // A real write still completes the next read.
    let peer_write = std::thread::spawn({
        let n = n.clone();
        move || {
            std::thread::sleep(Duration::from_millis(20));
            n.write(5).unwrap();
        }
    });
    let got =
        rt.block_on(async { tokio::time::timeout(Duration::from_secs(10), n.read_async()).await });
    assert_eq!(got.expect("the real write was missed").unwrap(), 5);
    peer_write.join().unwrap();
}
