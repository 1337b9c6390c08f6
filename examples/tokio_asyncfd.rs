//! Awaiting evfd objects from tokio through `AsyncFd`: a kernel eventfd that **another
//! process** signals, an in-memory notifier through its fd view next to a timer, an
//! AutoReset kick consumed by delivery, and an `Epoll` in tokio's reactor (`AsyncEpollFd`) —
//! all with no `unsafe` in user code.
//!
//! ```sh
//! cargo run --example tokio_asyncfd --features tokio
//! ```
//!
//! The other process is this example re-run with `--child <fd>`: it inherits the eventfd
//! (created without close-on-exec), adopts it and writes 5, as a vhost-user back end or a
//! helper process would.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::time::Duration;

use evfd::tokio::{AsyncEpollFd, AsyncNotifierFd};
use evfd::{Epoll, Event, Events, KernelNotifier, Mode, Notifier};

fn child(fd: i32) -> std::io::Result<()> {
    // SAFETY: the parent passed us this fd number; it was inherited across exec (not
    // close-on-exec), is open, and nothing else in this process owns it.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let k = KernelNotifier::from_owned_fd(owned, Mode::Counter)?;
    std::thread::sleep(Duration::from_millis(50));
    k.write(5)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> std::io::Result<()> {
    let args: Vec<String> = std::env::args().collect();
    if let [_, flag, fd] = args.as_slice() {
        if flag == "--child" {
            return child(fd.parse().expect("fd number"));
        }
    }

    // 1. Another process signals a kernel eventfd.
    let k = KernelNotifier::builder().cloexec(false).build()?;
    let mut proc = std::process::Command::new(std::env::current_exe()?)
        .arg("--child")
        .arg(k.as_raw_fd().to_string())
        .spawn()?;
    let a = AsyncNotifierFd::from_kernel(k)?;
    let got = tokio::time::timeout(Duration::from_secs(30), a.read()).await??;
    let status = proc.wait()?;
    println!(
        "kernel eventfd: read {got} written by child process {} ({status})",
        proc.id()
    );
    assert_eq!(got, 5);

    // 2. An in-memory notifier, awaited through its fd view next to a timer.
    let n = Notifier::new();
    let view = AsyncNotifierFd::new(&n)?;
    let n2 = n.clone();
    std::thread::spawn(move || {
        for _ in 0..3 {
            std::thread::sleep(Duration::from_millis(10));
            n2.notify().expect("notify");
        }
    });
    let mut total = 0;
    let mut ticks = 0;
    let mut timer = tokio::time::interval(Duration::from_millis(4));
    while total < 3 {
        tokio::select! {
            v = view.read() => total += v?,
            _ = timer.tick() => ticks += 1,
        }
    }
    println!(
        "in-memory notifier via fd view: {total} notifies while the timer ticked {ticks} times"
    );

    // 3. AutoReset: the delivery resets the count; nobody reads.
    let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    let a = AsyncNotifierFd::new(&kick)?;
    for _ in 0..10 {
        kick.notify()?;
    }
    let seen = a.consume().await?;
    assert!(seen.contains(Events::IN));
    println!(
        "autoreset kick: 10 notifies delivered once as {seen:?}; count now {}",
        kick.count()
    );
    assert_eq!(kick.count(), 0);

    // 4. An Epoll over several notifiers, in tokio's reactor next to a timer: `wait`
    //    harvests without blocking the runtime, and every unit written is read.
    let ep = Epoll::new();
    let queues: Vec<Notifier> = (0..3).map(|_| Notifier::new()).collect();
    for (i, q) in queues.iter().enumerate() {
        ep.add(q, Events::IN | Events::ET, i as u64)?;
    }
    let aep = AsyncEpollFd::new(&ep)?;
    let writers = queues.clone();
    std::thread::spawn(move || {
        for i in 0..300 {
            writers[i % 3].notify().expect("notify");
            if i % 50 == 49 {
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    });
    let (mut units, mut harvests, mut ticks) = (0, 0, 0);
    let mut evs = [Event::default(); 3];
    let mut timer = tokio::time::interval(Duration::from_millis(4));
    while units < 300 {
        tokio::select! {
            n = aep.wait(&mut evs) => {
                harvests += 1;
                for e in &evs[..n?] {
                    // ET: drain the notifier (a Counter read takes everything).
                    units += queues[e.data as usize].try_read().unwrap_or(0);
                }
            }
            _ = timer.tick() => ticks += 1,
        }
    }
    println!("epoll via AsyncEpollFd: {units} units from 3 notifiers in {harvests} harvests while the timer ticked {ticks} times");
    assert_eq!(units, 300);
    Ok(())
}
