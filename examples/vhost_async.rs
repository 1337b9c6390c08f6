//! A vhost-user-style device as one async task: the queues' kick eventfds (AutoReset
//! `KernelNotifier`s, as a backend receives them over its socket) and the control socket
//! itself, awaited together in one `Epoll::wait_async` on a tokio runtime — no thread
//! parked in `epoll_wait`, no read(2) of a kick in device code, no second reactor
//! registration per fd.
//!
//! The "guest" thread publishes requests in each queue's ring and kicks; the "frontend"
//! thread sends control messages over the socket (`ping`, then `stop` after the guest is
//! done). The device answers pings and serves the rings, and at the end every request is
//! used.
//!
//! `cargo run --release --example vhost_async`

use std::io::{Read, Write};
use std::os::fd::AsFd;
use std::os::unix::net::UnixStream;
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

const QUEUES: usize = 3;
const REQUESTS: u64 = 20_000; // per queue
const CTL: u64 = 100;

#[derive(Default)]
struct Ring {
    avail: AtomicU64,
    used: AtomicU64,
}

fn main() -> std::io::Result<()> {
    let ep = Epoll::new();
    let rings: Vec<Arc<Ring>> = (0..QUEUES).map(|_| Arc::new(Ring::default())).collect();
    let kicks: Vec<Arc<KernelNotifier>> = (0..QUEUES)
        .map(|_| KernelNotifier::new(Mode::AutoReset).map(Arc::new))
        .collect::<Result<_, _>>()?;
    for (q, k) in kicks.iter().enumerate() {
        ep.add(&**k, Events::IN, q as u64)?;
    }
    let (device_sock, mut frontend_sock) = UnixStream::pair()?;
    device_sock.set_nonblocking(true)?;
    ep.add(&device_sock.as_fd(), Events::IN | Events::RDHUP, CTL)?;

    // The guest: publish a request, kick; now and then take a breath so the device sleeps.
    let guest = {
        let (rings, kicks) = (rings.clone(), kicks.clone());
        std::thread::spawn(move || {
            for i in 0..REQUESTS {
                for q in 0..QUEUES {
                    rings[q].avail.fetch_add(1, SeqCst);
                    kicks[q].notify().unwrap();
                }
                if i % 1000 == 0 {
                    std::thread::sleep(Duration::from_millis(1));
                }
            }
        })
    };
    // The frontend: a few pings while the guest runs, then stop once it is done.
    let frontend = std::thread::spawn(move || -> std::io::Result<u32> {
        let mut pongs = 0;
        for _ in 0..5 {
            frontend_sock.write_all(b"ping\n")?;
            let mut b = [0u8; 5];
            frontend_sock.read_exact(&mut b)?;
            assert_eq!(&b, b"pong\n");
            pongs += 1;
            std::thread::sleep(Duration::from_millis(10));
        }
        guest.join().unwrap();
        frontend_sock.write_all(b"stop\n")?;
        Ok(pongs)
    });

    let t0 = Instant::now();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let (deliveries, pings) = rt.block_on(async {
        let mut buf = [Event::default(); 8];
        let (mut deliveries, mut pings) = (0u64, 0u32);
        let mut sock = &device_sock;
        let mut line = Vec::new();
        loop {
            let n = ep.wait_async(&mut buf).await?;
            for e in &buf[..n] {
                if e.data == CTL {
                    let mut b = [0u8; 64];
                    while let Ok(got) = sock.read(&mut b) {
                        if got == 0 {
                            break;
                        }
                        line.extend_from_slice(&b[..got]);
                    }
                    while let Some(end) = line.iter().position(|&c| c == b'\n') {
                        let msg: Vec<u8> = line.drain(..=end).collect();
                        match &msg[..] {
                            b"ping\n" => {
                                pings += 1;
                                sock.write_all(b"pong\n")?;
                            }
                            b"stop\n" => return Ok::<_, std::io::Error>((deliveries, pings)),
                            other => panic!("unknown message {other:?}"),
                        }
                    }
                } else {
                    // A kick: AutoReset already reset it (no read here); serve the ring.
                    let r = &rings[e.data as usize];
                    r.used.store(r.avail.load(SeqCst), SeqCst);
                    deliveries += 1;
                }
            }
        }
    })?;
    let pongs = frontend.join().unwrap()?;
    // The guest was joined before `stop`: serve what its last kicks announced.
    for r in &rings {
        r.used.store(r.avail.load(SeqCst), SeqCst);
    }
    let elapsed = t0.elapsed();
    for (q, r) in rings.iter().enumerate() {
        assert_eq!(r.used.load(SeqCst), REQUESTS, "queue {q}");
        assert_eq!(
            kicks[q].count()?,
            0,
            "AutoReset: every delivered kick was reset"
        );
    }
    assert_eq!((pings, pongs), (5, 5));
    println!(
        "{} kicks on {QUEUES} queues and {pings} control messages in one wait_async loop: \
         {deliveries} deliveries ({:.1} kicks coalesced per delivery), {:.1?}",
        REQUESTS * QUEUES as u64,
        (REQUESTS * QUEUES as u64) as f64 / deliveries as f64,
        elapsed
    );
    let (started, _) = evfd::stats::watcher_stats();
    println!("watcher threads started: {started}");
    Ok(())
}
