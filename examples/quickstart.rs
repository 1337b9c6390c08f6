//! The three modes of `evfd::Notifier`, across threads.
//!
//! ```text
//! cargo run --release --example quickstart
//! ```

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use evfd::{Events, Mode, Notifier};

fn main() -> std::io::Result<()> {
    counter()?;
    semaphore()?;
    autoreset()?;
    Ok(())
}

/// Counter (eventfd's default): writes add up, a read takes the whole count.
fn counter() -> std::io::Result<()> {
    println!("== Counter: writes add up, a read takes everything");
    let n = Notifier::new();
    let notifiers: Vec<_> = (1..=3u64)
        .map(|i| {
            let n = n.clone();
            thread::spawn(move || {
                println!("  thread {i} writes {i}");
                n.write(i).unwrap();
            })
        })
        .collect();
    // The reader blocks until something arrives, then takes whatever has accumulated.
    let mut total = 0;
    while total < 6 {
        let got = n.read()?;
        total += got;
        println!("  reader got {got} (total {total})");
    }
    for t in notifiers {
        t.join().unwrap();
    }
    println!(
        "  sum of the three writes: {total}; the count is now {}",
        n.count()
    );
    Ok(())
}

/// Semaphore (EFD_SEMAPHORE): a read takes 1, so N units wake N readers, one each.
fn semaphore() -> std::io::Result<()> {
    println!("== Semaphore: a work queue, each read takes one job");
    let jobs = Notifier::builder().mode(Mode::Semaphore).build()?;
    let queue: Arc<Mutex<VecDeque<Option<String>>>> = Arc::default();

    let workers: Vec<_> = (1..=2)
        .map(|w| {
            let (jobs, queue) = (jobs.clone(), Arc::clone(&queue));
            thread::spawn(move || {
                let mut done = 0;
                loop {
                    assert_eq!(jobs.read().unwrap(), 1); // sleeps until a job is posted
                    match queue.lock().unwrap().pop_front().flatten() {
                        Some(job) => {
                            println!("  worker {w} took '{job}'");
                            done += 1;
                            thread::sleep(Duration::from_millis(5)); // "work"
                        }
                        None => return done, // the stop marker
                    }
                }
            })
        })
        .collect();

    for i in 1..=6 {
        queue.lock().unwrap().push_back(Some(format!("job {i}")));
    }
    jobs.write(6)?; // six units: up to six readers may go, each takes one
    for _ in &workers {
        queue.lock().unwrap().push_back(None);
    }
    jobs.write(2)?; // one stop marker per worker
    let done: Vec<usize> = workers.into_iter().map(|w| w.join().unwrap()).collect();
    println!(
        "  jobs done per worker: {done:?} (total {}), units left: {}",
        done.iter().sum::<usize>(),
        jobs.count()
    );
    Ok(())
}

/// AutoReset (the 2020 RFC's EFD_AUTORESET): reads exactly like Counter; what differs is that
/// *delivering* readiness to a consumer resets the count.
fn autoreset() -> std::io::Result<()> {
    println!("== AutoReset: a doorbell that needs no read()");
    let bell = Notifier::builder().mode(Mode::AutoReset).build()?;
    let kicker = {
        let bell = bell.clone();
        thread::spawn(move || {
            for _ in 0..3 {
                bell.notify().unwrap();
            }
        })
    };
    kicker.join().unwrap();
    println!("  3 kicks from another thread: count {}", bell.count());
    println!(
        "  poll(IN) says {:?}; a readiness check never resets: count {}",
        bell.poll(Events::IN),
        bell.count()
    );
    println!(
        "  read() works as in Counter mode: got {}, count now {}",
        bell.read()?,
        bell.count()
    );
    bell.notify()?;
    println!(
        "  The difference is at delivery: when an Epoll::wait hands out IN for this notifier, a\n  \
         read_async() completes, or an fd view is consumed, the count (now {}) is reset to 0\n  \
         by that delivery itself, so an event loop handles one burst of kicks per wake-up\n  \
         and never calls read().",
        bell.count()
    );
    Ok(())
}
