//! `ConsumerHalf::read_async` and `NotifierHalf::write_async` on tokio (current-thread and
//! multi-thread) and on `futures::executor::block_on`, over a pipe and over an eventfd: a
//! wake from another thread, Semaphore held units, end of file, a write waiting for room in
//! a full pipe, and cancel safety.
#![cfg(target_os = "linux")]

use std::io;
use std::sync::Arc;
use std::time::Duration;

use evfd::halves::{self, ConsumerHalf, NotifierHalf};
use evfd::{KernelNotifier, Mode};

fn pairs(mode: Mode) -> io::Result<Vec<(&'static str, ConsumerHalf, NotifierHalf)>> {
    let (pc, pn) = halves::pipe(mode)?;
    let (ec, en) = KernelNotifier::new(mode)?.halves()?;
    Ok(vec![("pipe", pc, pn), ("eventfd", ec, en)])
}

fn later(n: Arc<NotifierHalf>, v: u64) -> std::thread::JoinHandle<io::Result<()>> {
    std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        n.write(v)
    })
}

async fn cases() -> io::Result<()> {
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        for (what, c, n) in pairs(mode)? {
            let n = Arc::new(n);
            let t = later(Arc::clone(&n), 3);
            let first = c.read_async().await?;
            t.join().unwrap()?;
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
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        drop(n);
    });
    let e = c.read_async().await.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
    t.join().unwrap();
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
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        c2.try_read()
    });
    n.write_async(5).await?;
    // The read loop may already take the new word (it reads until the pipe is empty).
    let first = t.join().unwrap()?;
    let rest = if first == words { c.try_read()? } else { 0 };
    assert_eq!(first + rest, words + 5);
    // An eventfd at LIMIT: the same through its halves.
    let k = KernelNotifier::builder().initial(evfd::LIMIT).build()?;
    let (kc, kn) = k.halves()?;
    let kc = Arc::new(kc);
    let kc2 = Arc::clone(&kc);
    let t = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(30));
        kc2.try_read()
    });
    kn.write_async(2).await?;
    assert_eq!(t.join().unwrap()?, evfd::LIMIT);
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
