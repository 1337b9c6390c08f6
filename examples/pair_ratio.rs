//! How much faster is an uncontended `write(1)` + `read()` pair on an `evfd::Notifier` than
//! the same pair on a kernel eventfd? Both are measured in the same run, ~1 s each,
//! interleaved, 5 repetitions; medians and the ratio are printed.
//!
//! ```text
//! cargo run --release --example pair_ratio
//! ```
//!
//! Issue 2 set a ratio of at least 50 on the project's first machine; a ratio to the kernel
//! depends on the CPU's atomic cost (docs/benchmarks.md, "Reading a ratio").

use std::hint::black_box;
use std::time::{Duration, Instant};

use evfd::Notifier;
use rustix::event::{eventfd, EventfdFlags};

const REPS: usize = 5;
const SLICE: Duration = Duration::from_secs(1);

/// Runs `pair` in batches for about `SLICE` and returns nanoseconds per pair.
fn measure(mut pair: impl FnMut()) -> f64 {
    const BATCH: u64 = 1024;
    // Warm up briefly so page faults and the first-call costs stay out of the figure.
    for _ in 0..BATCH {
        pair();
    }
    let start = Instant::now();
    let mut pairs = 0u64;
    loop {
        for _ in 0..BATCH {
            pair();
        }
        pairs += BATCH;
        let elapsed = start.elapsed();
        if elapsed >= SLICE {
            return elapsed.as_nanos() as f64 / pairs as f64;
        }
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() -> std::io::Result<()> {
    let n = Notifier::new();
    let fd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC)?;

    let evfd_pair = || {
        n.write(black_box(1)).unwrap();
        black_box(n.read().unwrap());
    };
    let kernel_pair = || {
        rustix::io::write(&fd, &black_box(1u64).to_ne_bytes()).unwrap();
        let mut buf = [0u8; 8];
        rustix::io::read(&fd, &mut buf).unwrap();
        black_box(u64::from_ne_bytes(buf));
    };

    let (mut ev, mut k, mut ratios) = (Vec::new(), Vec::new(), Vec::new());
    for rep in 0..REPS {
        // Alternate which goes first, so drift in the machine's state hits both alike.
        let (e, kk) = if rep % 2 == 0 {
            let e = measure(evfd_pair);
            (e, measure(kernel_pair))
        } else {
            let kk = measure(kernel_pair);
            (measure(evfd_pair), kk)
        };
        println!(
            "rep {}: evfd {e:7.2} ns/pair   kernel eventfd {kk:7.1} ns/pair   ratio {:6.1}x",
            rep + 1,
            kk / e
        );
        ev.push(e);
        k.push(kk);
        ratios.push(kk / e);
    }
    let (e, kk) = (median(ev), median(k));
    println!("median: evfd {e:.2} ns/pair, kernel eventfd {kk:.1} ns/pair");
    println!(
        "ratio (kernel ns / evfd ns): {:.1}x of the medians, {:.1}x median of the per-rep ratios (target >= 50x)",
        kk / e,
        median(ratios)
    );
    Ok(())
}
