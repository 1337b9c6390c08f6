//! One kernel-fd wake at a time, on one route, for counting syscalls per wake
//! (`strace -f`) and timing the write → woken-waiter latency.
//!
//! ```sh
//! cargo build --release --all-features --example kernel_wake
//! target/release/examples/kernel_wake blocking 2000   # evfd Epoll::wait
//! target/release/examples/kernel_wake epoll_wait 2000 # the kernel: epoll_wait + read
//! target/release/examples/kernel_wake tokio 2000      # evfd wait_async in a tokio runtime
//! target/release/examples/kernel_wake asyncfd 2000    # tokio AsyncFd + read
//! target/release/examples/kernel_wake async 2000      # evfd wait_async, futures executor
//! ```
//!
//! Each wake: the writer (the main thread) sleeps 300 µs, stamps and writes the eventfd
//! (an AutoReset `KernelNotifier` for evfd, a plain eventfd for the kernel twins); the
//! waiter stamps when woken and sends the latency back. Prints the p50 and p99 in µs.

use std::os::fd::{AsFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::mpsc::Sender;
use std::sync::Arc;
use std::time::{Duration, Instant};

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

fn kfd() -> OwnedFd {
    use rustix::event::{eventfd, EventfdFlags};
    eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK).expect("eventfd")
}

fn kwrite(fd: &OwnedFd) {
    rustix::io::write(fd, &1u64.to_ne_bytes()).expect("write");
}

fn kread(fd: &OwnedFd) {
    let mut b = [0u8; 8];
    let _ = rustix::io::read(fd, &mut b);
}

struct Clock {
    base: Instant,
    stamp: AtomicU64,
}

impl Clock {
    fn now(&self) -> u64 {
        self.base.elapsed().as_nanos() as u64
    }
    fn lat(&self) -> f64 {
        (self.now() - self.stamp.load(SeqCst)) as f64 / 1000.0
    }
}

type Waiter = Box<dyn FnOnce(Arc<Clock>, Sender<f64>) + Send>;

fn main() {
    let mut args = std::env::args().skip(1);
    let route = args.next().unwrap_or_else(|| "blocking".into());
    let n: usize = args.next().map_or(1000, |s| s.parse().expect("count"));
    if route == "inline" || route == "inline_kernel" {
        // No sleep: write, then wait on the same thread (the event is there already), to
        // time the wait's own path.
        let k = KernelNotifier::new(Mode::AutoReset).expect("eventfd");
        let ep = Epoll::new();
        ep.add(&k, Events::IN, 1).expect("add");
        let kep = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .expect("epoll");
        let kfd = kfd();
        rustix::event::epoll::add(
            &kep,
            &kfd,
            rustix::event::epoll::EventData::new_u64(1),
            rustix::event::epoll::EventFlags::IN,
        )
        .expect("add");
        let mut buf = [Event::default(); 4];
        let mut evs = Vec::with_capacity(4);
        let t = Instant::now();
        for _ in 0..n {
            if route == "inline" {
                rustix::io::write(k.as_fd(), &1u64.to_ne_bytes()).expect("write");
                assert_eq!(ep.wait(&mut buf, None).expect("wait"), 1);
            } else {
                kwrite(&kfd);
                evs.clear();
                rustix::event::epoll::wait(&kep, rustix::buffer::spare_capacity(&mut evs), None)
                    .expect("epoll_wait");
                kread(&kfd);
            }
        }
        println!(
            "{route}: {:.0} ns per write + wait",
            t.elapsed().as_nanos() as f64 / n as f64
        );
        return;
    }
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let handle = rt.handle().clone();
    let (write, waiter): (Box<dyn Fn()>, Waiter) = match route.as_str() {
        "blocking" | "tokio" | "async" => {
            let k = Arc::new(KernelNotifier::new(Mode::AutoReset).expect("eventfd"));
            let ep = Epoll::new();
            ep.add(&*k, Events::IN, 1).expect("add");
            let k2 = Arc::clone(&k);
            let route = route.clone();
            let raw = std::env::var_os("KW_RAW_WRITE").is_some();
            (
                Box::new(move || {
                    if raw {
                        // The kernel twins' write: no F_GETFL first.
                        rustix::io::write(k2.as_fd(), &1u64.to_ne_bytes()).expect("write");
                    } else {
                        k2.write(1).expect("write")
                    }
                }),
                Box::new(move |c, tx| match route.as_str() {
                    "blocking" => {
                        std::thread::spawn(move || {
                            let mut buf = [Event::default(); 4];
                            loop {
                                let got = ep.wait(&mut buf, None).expect("wait");
                                if got > 0 && tx.send(c.lat()).is_err() {
                                    return;
                                }
                            }
                        });
                    }
                    "tokio" => {
                        handle.spawn(async move {
                            let mut buf = [Event::default(); 4];
                            loop {
                                let got = ep.wait_async(&mut buf).await.expect("wait");
                                if got > 0 && tx.send(c.lat()).is_err() {
                                    return;
                                }
                            }
                        });
                    }
                    _ => {
                        std::thread::spawn(move || {
                            futures::executor::block_on(async move {
                                let mut buf = [Event::default(); 4];
                                loop {
                                    let got = ep.wait_async(&mut buf).await.expect("wait");
                                    if got > 0 && tx.send(c.lat()).is_err() {
                                        return;
                                    }
                                }
                            })
                        });
                    }
                }),
            )
        }
        "epoll_wait" => {
            use rustix::event::epoll;
            let fd = Arc::new(kfd());
            let ep = epoll::create(epoll::CreateFlags::CLOEXEC).expect("epoll");
            epoll::add(
                &ep,
                &*fd,
                epoll::EventData::new_u64(1),
                epoll::EventFlags::IN,
            )
            .expect("add");
            let fd2 = Arc::clone(&fd);
            (
                Box::new(move || kwrite(&fd2)),
                Box::new(move |c, tx| {
                    std::thread::spawn(move || {
                        let mut evs = Vec::with_capacity(4);
                        loop {
                            evs.clear();
                            let got =
                                epoll::wait(&ep, rustix::buffer::spare_capacity(&mut evs), None)
                                    .expect("epoll_wait");
                            if got > 0 {
                                kread(&fd);
                                if tx.send(c.lat()).is_err() {
                                    return;
                                }
                            }
                        }
                    });
                }),
            )
        }
        "asyncfd" => {
            use tokio::io::{unix::AsyncFd, Interest};
            let afd = rt.block_on(async {
                // SAFETY: an `OwnedFd` owns its fd: it stays open, and `as_raw_fd` returns
                // that same fd, until the `AsyncFd` (which owns the `OwnedFd`) drops it.
                let a = unsafe { AsyncFd::register_with_interest(kfd(), Interest::READABLE) };
                Arc::new(a.map_err(|e| e.into_parts().1).expect("AsyncFd"))
            });
            let a2 = Arc::clone(&afd);
            (
                Box::new(move || kwrite(a2.get_ref())),
                Box::new(move |c, tx| {
                    handle.spawn(async move {
                        loop {
                            let mut g = afd.readable().await.expect("readable");
                            let mut b = [0u8; 8];
                            let r = g.try_io(|fd| {
                                rustix::io::read(fd.get_ref(), &mut b[..])
                                    .map_err(std::io::Error::from)
                            });
                            if matches!(r, Ok(Ok(8))) && tx.send(c.lat()).is_err() {
                                return;
                            }
                        }
                    });
                }),
            )
        }
        r => panic!("unknown route {r}"),
    };
    let c = Arc::new(Clock {
        base: Instant::now(),
        stamp: AtomicU64::new(0),
    });
    let (tx, rx) = std::sync::mpsc::channel();
    waiter(Arc::clone(&c), tx);
    // The pause before each write (KW_GAP_US, default 300 µs, as `stress_epoll mixed`).
    let gap_us = std::env::var("KW_GAP_US")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let mut lat = Vec::with_capacity(n);
    for _ in 0..n {
        std::thread::sleep(Duration::from_micros(gap_us));
        c.stamp.store(c.now(), SeqCst);
        write();
        lat.push(rx.recv_timeout(Duration::from_secs(10)).expect("lost wake"));
    }
    lat.sort_by(|a, b| a.partial_cmp(b).unwrap());
    let p = |q: f64| lat[((lat.len() - 1) as f64 * q).round() as usize];
    println!("{route}: n={n} p50={:.2}us p99={:.2}us", p(0.5), p(0.99));
    drop(rt);
}
