//! A pending `SharedNotifier::write_async` costs no thread: its own test binary, so that no
//! other test's threads come and go while the threads are counted.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use evfd::{SharedNotifier, LIMIT};

/// The threads of this process now.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn pending_write_async_futures_create_no_thread() {
    let s = SharedNotifier::builder().initial(LIMIT).build().unwrap();
    let waker = futures::task::noop_waker();
    let mut cx = Context::from_waker(&waker);
    // One pending future first: it may start the process's one epoll watcher thread
    // (shared by every kernel-fd wait), which is not per future.
    let mut futs: Vec<Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + '_>>> =
        vec![Box::pin(s.write_async(1))];
    assert!(futs[0].as_mut().poll(&mut cx).is_pending());
    std::thread::sleep(Duration::from_millis(20));
    let before = threads();
    for _ in 0..16 {
        let mut f: Pin<Box<dyn Future<Output = std::io::Result<()>> + Send + '_>> =
            Box::pin(s.write_async(1));
        assert!(f.as_mut().poll(&mut cx).is_pending());
        futs.push(f);
    }
    std::thread::sleep(Duration::from_millis(20));
    let during = threads();
    assert_eq!(during, before, "17 pending write futures: no thread each");
    assert_eq!(s.sleepers().1, 17);
    // The futures still complete: one read makes room for all of them.
    assert_eq!(s.read().unwrap(), LIMIT);
    let end = Instant::now() + Duration::from_secs(10);
    while !futs.is_empty() {
        futs.retain_mut(|f| match f.as_mut().poll(&mut cx) {
            Poll::Ready(r) => {
                r.unwrap();
                false
            }
            Poll::Pending => true,
        });
        assert!(
            Instant::now() < end,
            "{} futures never completed",
            futs.len()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    assert_eq!(s.count(), 17);
    assert_eq!(s.sleepers(), (0, 0, 0));
    assert!(threads() <= before);
}
