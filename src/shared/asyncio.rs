//! `read_async` / `write_async` of a [`SharedNotifier`], for any executor.
//!
//! A wake from another process arrives through the kernel (the doorbell or the futex), so
//! some thread of this process has to be in the kernel to hear it:
//!
//! - **Readers** wait in an [`Epoll`] of their own that watches the notifier's doorbell as
//!   a kernel fd (`Epoll::wait_async`, whose kernel side the crate's watcher thread listens
//!   to). While a read future is pending the notifier is registered as a doorbell consumer,
//!   so the doorbell mirrors `count > 0` and the epoll reports it readable exactly then, in
//!   whichever process the count was written.
//! - **Writers** waiting for room (a count near [`LIMIT`](crate::LIMIT): rare) get a helper
//!   thread each, which sleeps on the shared futex for blocked writers and wakes the future
//!   when a write of `n` fits (or the future is dropped).
//!
//! Both futures are cancel-safe: they consume or add only in the poll that returns `Ready`.
//!
//! # LOCKING
//!
//! ```text
//! Room::waker      Mutex<Option<Waker>>  — a write future's current waker, shared with its
//!                  helper thread. A leaf; `wake` runs after it is released.
//! ```

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::handle::SharedNotifier;
use crate::epoll::Epoll;
use crate::events::{Event, Events};

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // No code of ours panics under this lock; a poisoned one still guards valid data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// This process's registration as a doorbell consumer while a read future is pending.
struct BellArm<'a>(&'a SharedNotifier);

impl Drop for BellArm<'_> {
    fn drop(&mut self) {
        self.0.disarm_bell_here();
    }
}

/// `SharedNotifier::read_async`.
pub(super) async fn read(s: &SharedNotifier, ep: &Epoll) -> io::Result<u64> {
    let mut arm = None;
    let mut evs = [Event::default(); 1];
    loop {
        match s.try_read() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        if arm.is_none() {
            s.arm_bell_here();
            arm = Some(BellArm(s));
            continue; // re-check: the doorbell follows the count from now on
        }
        ep.wait_async(&mut evs).await?;
    }
}

/// The epoll a notifier's read futures wait in: its doorbell, level-triggered.
pub(super) fn reader_epoll(bell: std::os::fd::BorrowedFd<'_>) -> io::Result<Epoll> {
    let ep = Epoll::new();
    ep.add(&bell, Events::IN, 0)?;
    Ok(ep)
}

/// A write future's helper thread and what it shares with the future.
struct Room {
    waker: Mutex<Option<Waker>>,
    cancelled: AtomicBool,
    /// The helper saw room and left: a later `Pending` needs a new helper.
    done: AtomicBool,
}

/// The future of [`SharedNotifier::write_async`].
#[must_use = "futures do nothing unless polled"]
pub(super) struct WriteShared<'a> {
    s: &'a SharedNotifier,
    n: u64,
    room: Option<Arc<Room>>,
}

impl<'a> WriteShared<'a> {
    pub(super) fn new(s: &'a SharedNotifier, n: u64) -> Self {
        WriteShared { s, n, room: None }
    }

    fn attempt(&self) -> Option<io::Result<()>> {
        match self.s.try_write(self.n) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            r => Some(r),
        }
    }
}

impl Future for WriteShared<'_> {
    type Output = io::Result<()>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = &mut *self;
        if let Some(r) = this.attempt() {
            return Poll::Ready(r);
        }
        match &this.room {
            Some(room) if !room.done.load(SeqCst) => *lock(&room.waker) = Some(cx.waker().clone()),
            _ => {
                let room = Arc::new(Room {
                    waker: Mutex::new(Some(cx.waker().clone())),
                    cancelled: AtomicBool::new(false),
                    done: AtomicBool::new(false),
                });
                let (s, n, r) = (this.s.clone(), this.n, Arc::clone(&room));
                std::thread::Builder::new()
                    .name("evfd-shared-room".into())
                    .spawn(move || {
                        while !r.cancelled.load(SeqCst) {
                            // Sleep on the writers' futex until a write of `n` fits (at most
                            // 50 ms at a time, to notice a dropped future).
                            let d = Instant::now() + Duration::from_millis(50);
                            if s.wait_room(n, d) {
                                break;
                            }
                        }
                        r.done.store(true, SeqCst);
                        let w = lock(&r.waker).take();
                        if let Some(w) = w {
                            w.wake();
                        }
                    })?;
                this.room = Some(room);
            }
        }
        if let Some(r) = this.attempt() {
            return Poll::Ready(r);
        }
        Poll::Pending
    }
}

impl Drop for WriteShared<'_> {
    fn drop(&mut self) {
        if let Some(r) = &self.room {
            r.cancelled.store(true, SeqCst);
        }
    }
}
