//! A Semaphore-mode notifier as a work counter shared by tokio tasks and an OS thread.
//!
//! A producer task publishes `JOBS` units of work with `write_async` (in batches, so the
//! counter also hits its wake path many times). Three consumer tasks (`read_async().await`)
//! and one OS thread (blocking `read()`) each take one unit per read. To stop, the producer
//! adds one extra unit per consumer; a shared ticket counter tells a consumer whether the
//! unit it took is a job (ticket < JOBS) or its stop signal. Every consumer stops exactly
//! once, so every job is done exactly once and the totals add up.
//!
//! Then a task awaits an `Epoll` over several notifiers (`wait_async`), written by other
//! tasks and a thread, until every unit has been seen.
//!
//! `cargo run --example async_tokio`

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use evfd::{Epoll, Event, Events, Mode, Notifier};

const JOBS: u64 = 10_000;
const TASKS: u64 = 3;
const CONSUMERS: u64 = TASKS + 1; // + the OS thread

/// Take a ticket for a unit just read: `Some(job)` or `None` (the stop signal).
fn ticket(next: &AtomicU64) -> Option<u64> {
    let t = next.fetch_add(1, Ordering::Relaxed);
    (t < JOBS).then_some(t)
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() -> std::io::Result<()> {
    let work = Notifier::builder().mode(Mode::Semaphore).build()?;
    let next = Arc::new(AtomicU64::new(0));

    // The OS thread: a blocking consumer on the same notifier.
    let thread = {
        let (work, next) = (work.clone(), next.clone());
        std::thread::spawn(move || -> std::io::Result<(u64, u64)> {
            let (mut jobs, mut sum) = (0, 0);
            loop {
                work.read()?; // 1 unit
                match ticket(&next) {
                    Some(job) => {
                        jobs += 1;
                        sum += job;
                    }
                    None => return Ok((jobs, sum)),
                }
            }
        })
    };

    // The consumer tasks.
    let tasks: Vec<_> = (0..TASKS)
        .map(|i| {
            let (work, next) = (work.clone(), next.clone());
            tokio::spawn(async move {
                let (mut jobs, mut sum) = (0u64, 0u64);
                loop {
                    work.read_async().await?; // 1 unit
                    match ticket(&next) {
                        Some(job) => {
                            jobs += 1;
                            sum += job;
                            if job % 1000 == 0 {
                                tokio::task::yield_now().await;
                            }
                        }
                        None => return Ok::<_, std::io::Error>((i, jobs, sum)),
                    }
                }
            })
        })
        .collect();

    // The producer: JOBS units in batches of 1..=7, then one stop unit per consumer.
    let producer = {
        let work = work.clone();
        tokio::spawn(async move {
            let mut left = JOBS;
            let mut batch = 1;
            while left > 0 {
                let n = batch.min(left);
                work.write_async(n).await?;
                left -= n;
                batch = batch % 7 + 1;
                tokio::task::yield_now().await;
            }
            work.write_async(CONSUMERS).await
        })
    };
    producer.await.expect("producer task")?;

    let (mut total_jobs, mut total_sum) = (0, 0);
    for t in tasks {
        let (i, jobs, sum) = t.await.expect("consumer task")?;
        println!("task {i}:   {jobs:5} jobs");
        total_jobs += jobs;
        total_sum += sum;
    }
    let (jobs, sum) = thread.join().expect("consumer thread")?;
    println!("thread:   {jobs:5} jobs");
    total_jobs += jobs;
    total_sum += sum;

    println!(
        "total:    {total_jobs:5} jobs (published {JOBS}), count left {}",
        work.count()
    );
    assert_eq!(total_jobs, JOBS, "every job done once");
    assert_eq!(total_sum, JOBS * (JOBS - 1) / 2, "and no job done twice");
    assert_eq!(work.count(), 0);

    epoll_part().await
}

/// One task awaits an `Epoll` over three notifiers; two tasks and one OS thread write them.
async fn epoll_part() -> std::io::Result<()> {
    const PER: u64 = 5_000;
    let ep = Epoll::new();
    let sources: Vec<Notifier> = (0..3).map(|_| Notifier::new()).collect();
    for (i, n) in sources.iter().enumerate() {
        ep.add(n, Events::IN | Events::ET, i as u64)?;
    }
    let writers: Vec<_> = sources[..2]
        .iter()
        .cloned()
        .map(|n| {
            tokio::spawn(async move {
                for i in 0..PER {
                    n.write(1)?;
                    if i % 500 == 0 {
                        tokio::time::sleep(std::time::Duration::from_micros(200)).await;
                    }
                }
                Ok::<_, std::io::Error>(())
            })
        })
        .collect();
    let thread = {
        let n = sources[2].clone();
        std::thread::spawn(move || {
            (0..PER).try_for_each(|i| {
                if i % 500 == 0 {
                    std::thread::sleep(std::time::Duration::from_micros(200));
                }
                n.write(1)
            })
        })
    };
    let (mut seen, mut wakes) = ([0u64; 3], 0u64);
    let mut evs = [Event::default(); 8];
    while seen.iter().sum::<u64>() < 3 * PER {
        let n = ep.wait_async(&mut evs).await?;
        wakes += 1;
        for e in &evs[..n] {
            // Edge-triggered: take everything that is there.
            seen[e.data as usize] += sources[e.data as usize].try_read().unwrap_or(0);
        }
    }
    for w in writers {
        w.await.expect("writer task")?;
    }
    thread.join().expect("writer thread")?;
    println!("epoll:    {seen:?} units from 3 notifiers in {wakes} wait_async() wakes");
    assert_eq!(seen, [PER; 3]);
    Ok(())
}
