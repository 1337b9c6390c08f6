//! `read_async` / `write_async` of a [`SharedNotifier`], for any executor.
//!
//! A wake from another process arrives through the kernel (the doorbell or the futex), so
//! some thread of this process has to be in the kernel to hear it:
//!
//! - **Readers** use one process-wide watcher thread: a kernel epoll over the doorbells of
//!   the notifiers that have pending read futures, each armed `IN | ONESHOT` by the future's
//!   poll. While a read future is pending the notifier is registered as a doorbell consumer
//!   (the doorbell mirrors `count > 0`), so the watcher fires when the count becomes
//!   non-zero, in whichever process it was written, and wakes the futures' wakers.
//! - **Writers** waiting for room (a count near [`LIMIT`](crate::LIMIT): rare) get a helper
//!   thread each, which sleeps on the shared futex for blocked writers and wakes the future
//!   when a write of `n` fits (or the future is dropped).
//!
//! Both futures are cancel-safe: they consume or add only in the poll that returns `Ready`.
//!
//! # LOCKING
//!
//! ```text
//! Watcher::wakers  Mutex<HashMap<token, Vec<Waker>>>  — the wakers of pending read
//!                  futures, per registered doorbell. A leaf: nothing is taken under it, and
//!                  wakers are called after it is released (taken out first).
//! Room::waker      Mutex<Option<Waker>>  — a write future's current waker, shared with its
//!                  helper thread. A leaf; `wake` runs after it is released.
//! ```

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::{Arc, Mutex, OnceLock};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use super::handle::SharedNotifier;
use crate::sys;
use crate::Events;

/// The process-wide watcher of doorbells.
struct Watcher {
    epfd: OwnedFd,
    wakers: Mutex<HashMap<u64, Vec<Waker>>>,
    next: AtomicU64,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    // No code of ours panics under these locks; a poisoned one still guards valid data.
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

static WATCHER: OnceLock<io::Result<Watcher>> = OnceLock::new();

fn watcher() -> io::Result<&'static Watcher> {
    let w = WATCHER.get_or_init(|| {
        let w = Watcher {
            epfd: sys::epoll::create()?,
            wakers: Mutex::new(HashMap::new()),
            next: AtomicU64::new(1),
        };
        Ok(w)
    });
    match w {
        Ok(w) => {
            start_thread(w);
            Ok(w)
        }
        Err(e) => Err(io::Error::new(e.kind(), e.to_string())),
    }
}

fn start_thread(w: &'static Watcher) {
    static STARTED: OnceLock<()> = OnceLock::new();
    STARTED.get_or_init(|| {
        std::thread::Builder::new()
            .name("evfd-shared-watch".into())
            .spawn(move || w.run())
            .expect("spawn the SharedNotifier watcher thread");
    });
}

impl Watcher {
    fn run(&self) {
        let mut evs = Vec::with_capacity(64);
        loop {
            if sys::epoll::wait(self.epfd.as_fd(), &mut evs, 64, None).is_err() {
                std::thread::sleep(Duration::from_millis(1));
                continue;
            }
            let mut fire = Vec::new();
            {
                let mut map = lock(&self.wakers);
                for (_, token) in evs.iter() {
                    if let Some(ws) = map.get_mut(token) {
                        fire.append(ws);
                    }
                }
            }
            for w in fire {
                w.wake();
            }
        }
    }

    /// Register a doorbell (disarmed). Its token.
    fn register(&self, fd: BorrowedFd<'_>) -> io::Result<u64> {
        let token = self.next.fetch_add(1, SeqCst);
        lock(&self.wakers).insert(token, Vec::new());
        if let Err(e) = sys::epoll::add(self.epfd.as_fd(), fd, Events::ONESHOT, token) {
            lock(&self.wakers).remove(&token);
            return Err(e);
        }
        Ok(token)
    }

    /// Wake `waker` once the doorbell is readable (now, if it is).
    fn arm(&self, token: u64, fd: BorrowedFd<'_>, waker: &Waker) -> io::Result<()> {
        {
            let mut map = lock(&self.wakers);
            let ws = map.entry(token).or_default();
            if !ws.iter().any(|w| w.will_wake(waker)) {
                ws.push(waker.clone());
            }
        }
        sys::epoll::modify(self.epfd.as_fd(), fd, Events::IN | Events::ONESHOT, token)
    }

    fn forget(&self, token: u64, fd: BorrowedFd<'_>) {
        let _ = sys::epoll::delete(self.epfd.as_fd(), fd);
        lock(&self.wakers).remove(&token);
    }
}

/// This process's watcher registration of one notifier's doorbell.
pub(super) struct WatchReg {
    token: OnceLock<u64>,
}

impl WatchReg {
    pub(super) fn new() -> WatchReg {
        WatchReg {
            token: OnceLock::new(),
        }
    }

    fn token(&self, fd: BorrowedFd<'_>) -> io::Result<u64> {
        if let Some(t) = self.token.get() {
            return Ok(*t);
        }
        let w = watcher()?;
        let t = w.register(fd)?;
        if self.token.set(t).is_err() {
            // Another thread registered first: keep theirs.
            w.forget(t, fd);
        }
        Ok(*self.token.get().expect("set"))
    }

    /// Before the doorbell fd is closed.
    pub(super) fn forget(&self, fd: BorrowedFd<'_>) {
        if let (Some(t), Some(Ok(w))) = (self.token.get(), WATCHER.get()) {
            w.forget(*t, fd);
        }
    }
}

/// The future of [`SharedNotifier::read_async`].
#[must_use = "futures do nothing unless polled"]
pub(super) struct ReadShared<'a> {
    s: &'a SharedNotifier,
    armed: bool,
}

impl<'a> ReadShared<'a> {
    pub(super) fn new(s: &'a SharedNotifier) -> Self {
        ReadShared { s, armed: false }
    }

    fn attempt(&mut self) -> Option<io::Result<u64>> {
        match self.s.try_read() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => None,
            r => Some(r),
        }
    }

    fn disarm(&mut self) {
        if std::mem::take(&mut self.armed) {
            self.s.disarm_bell_here();
        }
    }
}

impl Future for ReadShared<'_> {
    type Output = io::Result<u64>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<u64>> {
        let this = &mut *self;
        if let Some(r) = this.attempt() {
            this.disarm();
            return Poll::Ready(r);
        }
        if !this.armed {
            this.s.arm_bell_here();
            this.armed = true;
        }
        let (reg, bell) = this.s.watch_parts();
        let armed = reg
            .token(bell)
            .and_then(|t| watcher()?.arm(t, bell, cx.waker()));
        if let Err(e) = armed {
            this.disarm();
            return Poll::Ready(Err(e));
        }
        // Re-check after arming: a write before the arm is seen here, one after it rings
        // the doorbell that is now watched.
        if let Some(r) = this.attempt() {
            this.disarm();
            return Poll::Ready(r);
        }
        Poll::Pending
    }
}

impl Drop for ReadShared<'_> {
    fn drop(&mut self) {
        self.disarm();
    }
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
