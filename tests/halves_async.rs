//! `ConsumerHalf::read_async` and `NotifierHalf::write_async` on tokio (current-thread and
//! multi-thread) and on `futures::executor::block_on`, over a pipe and over an eventfd: a
//! wake from another thread, Semaphore held units, end of file, a write waiting for room in
//! a full pipe, and cancel safety. A consumer's read futures wait in one kernel epoll,
//! made by the first that waits and kept, and many of them at once count every unit.
#![cfg(target_os = "linux")]

use std::io;
use std::os::fd::AsRawFd;
use std::pin::pin;
use std::sync::Arc;

use evfd::halves::{self, ConsumerHalf, NotifierHalf};
use evfd::{KernelNotifier, Mode};

mod util;
use util::{concurrent_reads, epolls_watching, ReadFuture};

fn pairs(mode: Mode) -> io::Result<Vec<(&'static str, ConsumerHalf, NotifierHalf)>> {
    let (pc, pn) = halves::pipe(mode)?;
    let (ec, en) = KernelNotifier::new(mode)?.halves()?;
    Ok(vec![("pipe", pc, pn), ("eventfd", ec, en)])
}

async fn cases() -> io::Result<()> {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        for (what, c, n) in pairs(mode)? {
            let n = Arc::new(n);
            let n2 = Arc::clone(&n);
            let (first, wrote) = util::once_pending(c.read_async(), move || n2.write(3)).await;
            let first = first?;
            wrote?;
            if mode == Mode::Semaphore {
                assert_eq!(first, 1, "{what}");
                // Two left (held by a pipe consumer): taken without waiting.
                assert_eq!(c.read_async().await?, 1, "{what}");
                assert_eq!(c.read_async().await?, 1, "{what}");
            } else {
                assert_eq!(first, 3, "{what} {mode:?}");
            }
            assert_eq!(
                c.try_read().unwrap_err().kind(),
                io::ErrorKind::WouldBlock,
                "{what} {mode:?}"
            );
        }
    }
    // End of file: a waiting read ends with BrokenPipe.
    let (c, n) = halves::pipe(Mode::Counter)?;
    let (r, ()) = util::once_pending(c.read_async(), move || drop(n)).await;
    assert_eq!(r.unwrap_err().kind(), io::ErrorKind::BrokenPipe);
    Ok(())
}

#[test]
fn read_async_on_block_on() -> io::Result<()> {
    futures::executor::block_on(cases())
}

#[test]
fn read_async_on_tokio() -> io::Result<()> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(cases())?;
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?
        .block_on(cases())
}

/// A full pipe: `write_async` waits until the consumer reads, then writes its word.
async fn full_pipe() -> io::Result<()> {
    let (c, n) = halves::pipe(Mode::Counter)?;
    let mut words = 0u64;
    while n.try_write(1).is_ok() {
        words += 1;
    }
    assert!(
        words >= 1024,
        "a pipe holds at least a page of words: {words}"
    );
    let c = Arc::new(c);
    let c2 = Arc::clone(&c);
    // The read makes room once the write is pending.
    let (w, first) = util::once_pending(n.write_async(5), move || c2.try_read()).await;
    w?;
    // The read loop may already take the new word (it reads until the pipe is empty).
    let first = first?;
    let rest = if first == words { c.try_read()? } else { 0 };
    assert_eq!(first + rest, words + 5);
    // An eventfd at LIMIT: the same through its halves.
    let k = KernelNotifier::builder().initial(evfd::LIMIT).build()?;
    let (kc, kn) = k.halves()?;
    let kc = Arc::new(kc);
    let kc2 = Arc::clone(&kc);
    let (w, read) = util::once_pending(kn.write_async(2), move || kc2.try_read()).await;
    w?;
    assert_eq!(read?, evfd::LIMIT);
    assert_eq!(kc.try_read()?, 2);
    Ok(())
}

#[test]
fn write_async_waits_for_room() -> io::Result<()> {
    futures::executor::block_on(full_pipe())?;
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(full_pipe())
}

/// A read future dropped while waiting takes nothing; a write future dropped while waiting
/// writes nothing.
#[test]
fn futures_are_cancel_safe() -> io::Result<()> {
    use futures::FutureExt;
    for (what, c, n) in pairs(Mode::Semaphore)? {
        assert!(c.read_async().now_or_never().is_none(), "{what}");
        n.write(2)?;
        assert_eq!(c.try_read()?, 1, "{what}");
        assert_eq!(c.try_read()?, 1, "{what}");
    }
    let (c, n) = halves::pipe(Mode::Counter)?;
    let mut words = 0u64;
    while n.try_write(1).is_ok() {
        words += 1;
    }
    assert!(n.write_async(7).now_or_never().is_none());
    assert_eq!(c.try_read()?, words, "the dropped write added nothing");
    assert!(c.try_read().is_err());
    Ok(())
}

#[test]
fn read_futures_of_a_consumer_wait_in_one_kept_epoll() -> io::Result<()> {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    for mode in [Mode::Counter, Mode::Semaphore] {
        for on_tokio in [false, true] {
            for (what, c, n) in pairs(mode)? {
                let num = c.as_raw_fd();
                // A pipe consumer's own kernel epoll (its `Epoll` source side) watches it too.
                let before = epolls_watching(num);
                let mut kept = None;
                for round in 1..=4u64 {
                    let one_wait = async {
                        let mut f = pin!(c.read_async());
                        assert!(futures::poll!(f.as_mut()).is_pending(), "nothing written");
                        let new: Vec<_> = epolls_watching(num)
                            .into_iter()
                            .filter(|e| !before.contains(e))
                            .collect();
                        assert_eq!(new.len(), 1, "{what} {mode:?} {round}: {new:?}");
                        assert_eq!(*kept.get_or_insert(new[0]), new[0], "{what} {round}");
                        n.write(1).unwrap();
                        f.await.unwrap()
                    };
                    let got = if on_tokio {
                        rt.block_on(one_wait)
                    } else {
                        futures::executor::block_on(one_wait)
                    };
                    assert_eq!(got, 1, "{what} {mode:?}");
                    let mut after = before.clone();
                    after.push(kept.unwrap());
                    after.sort_unstable();
                    assert_eq!(epolls_watching(num), after, "{what} {mode:?}: kept");
                }
            }
        }
    }
    Ok(())
}

/// Six read futures wait at once on one consumer (tokio tasks, or threads in `block_on`)
/// while another thread writes 600 units in writes of 1 to 3: every unit is read once
/// (`util::concurrent_reads`).
#[test]
fn concurrent_read_futures_of_a_consumer_count_every_unit() -> io::Result<()> {
    fn read(c: &ConsumerHalf) -> ReadFuture<'_> {
        Box::pin(c.read_async())
    }
    for mode in [Mode::Counter, Mode::Semaphore] {
        for on_tokio in [false, true] {
            for (what, c, n) in pairs(mode)? {
                let c = Arc::new(c);
                let what = format!("{what} {mode:?}");
                concurrent_reads(&what, Arc::clone(&c), read, (6, 600, on_tokio), |v| {
                    n.write(v).unwrap()
                });
                assert_eq!(
                    c.try_read().unwrap_err().kind(),
                    io::ErrorKind::WouldBlock,
                    "{what} tokio {on_tokio}"
                );
            }
        }
    }
    Ok(())
}
