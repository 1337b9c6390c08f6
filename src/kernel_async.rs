//! Async waits for the kinds that are a kernel fd, on any executor:
//! [`KernelNotifier::read_async`] and [`write_async`](KernelNotifier::write_async), the
//! kick/call halves' [`ConsumerHalf::read_async`] and [`NotifierHalf::write_async`], and the
//! one helper they share with the other kinds whose wake arrives through a kernel fd
//! ([`FdWait`]).
//!
//! A kernel eventfd is written by whoever holds the fd (another process, KVM, a vhost
//! peer), so the wake comes through the kernel. A future first tries the operation (one
//! non-blocking syscall, `sys::eventfd::read_now`/`write_now`, independent of the shared
//! `O_NONBLOCK` flag); only when it would block does it make an [`Epoll`] that watches the
//! fd and await [`Epoll::wait_async`], whose kernel side is the tokio reactor inside a tokio
//! runtime and the crate's watcher thread elsewhere (no thread of its own, no busy wait).
//! Then it tries again. The epoll is the future's own, made on its first wait and closed
//! when it completes or is dropped.
//!
//! - Readers watch `IN` level-triggered: a peer that takes the count between the readiness
//!   and the read sends the future back to waiting, and the next write reports again. A
//!   consumer half first takes the units it holds (its try does), so it never waits while
//!   it holds some.
//! - Writers watch `OUT` edge-triggered. The kernel reports `OUT` while a write of 1 fits,
//!   which says nothing about a larger `n`: level-triggered, a write of `n` that does not
//!   fit yet would be woken again at once, for ever. Edge-triggered, every `read(2)` of the
//!   eventfd (the only thing that makes room) is a new edge, so each retry follows a read.
//!   The item is added before the first retry, so a read between the failed try and the
//!   wait is not missed (the kernel queues its edge).
//!
//! Every future here is cancel-safe: it reads or writes only in the poll that returns
//! `Ready`. Where `Epoll` has kernel-fd sources: `KernelNotifier`'s on Linux, the halves'
//! on Linux, macOS and FreeBSD (there the epoll's kernel side is a kqueue).

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::epoll::Epoll;
use crate::events::{Event, Events};
use crate::notifier::halves::{ConsumerHalf, NotifierHalf};
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;

/// A kernel fd's readiness, awaited on any executor: an [`Epoll`] holding only that fd,
/// made on the first [`ready`](Self::ready) and reused by the next ones.
pub(crate) struct FdWait<'fd> {
    fd: BorrowedFd<'fd>,
    interest: Events,
    ep: Option<Epoll>,
}

impl<'fd> FdWait<'fd> {
    /// Nothing is registered until the first wait.
    pub(crate) fn new(fd: BorrowedFd<'fd>, interest: Events) -> FdWait<'fd> {
        FdWait {
            fd,
            interest,
            ep: None,
        }
    }

    /// Wait until the fd reports an event of the interest (with the interest's trigger
    /// rule): returns its events.
    ///
    /// # Errors
    ///
    /// The kernel's errno from creating or waiting in the epoll (`EMFILE`, `ENOMEM`).
    pub(crate) async fn ready(&mut self) -> io::Result<Events> {
        let ep = match &self.ep {
            Some(ep) => ep,
            None => {
                let ep = Epoll::new();
                ep.add(&self.fd, self.interest, 0)?;
                self.ep.insert(ep)
            }
        };
        let mut ev = [Event::default(); 1];
        loop {
            if ep.wait_async(&mut ev).await? > 0 {
                return Ok(ev[0].events);
            }
        }
    }
}

/// The loop every future here runs: `op` (a non-blocking read or write), and while it would
/// block, a wait for `fd`'s next `interest` event, then `op` again. The epoll is made at the
/// first wait only.
async fn until_ready<T>(
    fd: BorrowedFd<'_>,
    interest: Events,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
    let mut wait = FdWait::new(fd, interest);
    loop {
        match op() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        wait.ready().await?;
    }
}

#[cfg(any(target_os = "linux", target_os = "android"))]
impl KernelNotifier {
    /// Take from the count, waiting while it is 0, as a future (any executor): the whole
    /// count (Counter, AutoReset) or 1 (Semaphore). With `NONBLOCK` the future still waits
    /// (as every kind's `read_async` does: waiting is what the future is for).
    ///
    /// A count already there is taken in the first poll (one `read(2)`, no epoll). A future
    /// that has to wait watches the eventfd in an [`Epoll`] of its own,
    /// level-triggered `IN` (one kernel epoll fd while it waits), whose wake reaches the task
    /// through the tokio reactor inside a tokio runtime and through the crate's watcher
    /// thread elsewhere. Inside tokio, `evfd::tokio::AsyncNotifierFd` (feature `tokio`)
    /// registers the fd once instead.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a future dropped before it completed read nothing.
    ///
    /// # Errors
    ///
    /// The kernel's errno (`EMFILE` when no epoll fd can be made).
    ///
    /// # Examples
    ///
    /// ```
    /// let k = std::sync::Arc::new(evfd::KernelNotifier::new(evfd::Mode::Counter)?);
    /// let k2 = k.clone();
    /// let t = std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_millis(5));
    ///     k2.write(6)
    /// });
    /// assert_eq!(futures::executor::block_on(k.read_async())?, 6);
    /// t.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn read_async(&self) -> impl Future<Output = io::Result<u64>> + Send + '_ {
        until_ready(self.registrations().fd(), self.read_interest(), move || {
            self.try_read()
        })
    }

    /// Add `n` to the count, waiting for room while it would pass [`LIMIT`](crate::LIMIT),
    /// as a future (any executor). With `NONBLOCK` the future still waits.
    ///
    /// A write that fits is one `write(2)` in the first poll. A future that has to wait
    /// watches the eventfd in an [`Epoll`] of its own, edge-triggered `OUT`:
    /// every `read(2)` of the eventfd is an edge, and the future retries after each one (no
    /// busy wait while a large `n` still does not fit).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a future dropped before it completed added nothing.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; the kernel's errno.
    ///
    /// # Examples
    ///
    /// ```
    /// let k = std::sync::Arc::new(evfd::KernelNotifier::builder().initial(evfd::LIMIT).build()?);
    /// let k2 = k.clone();
    /// let t = std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_millis(5));
    ///     k2.read()
    /// });
    /// futures::executor::block_on(k.write_async(2))?;
    /// assert_eq!(t.join().unwrap()?, evfd::LIMIT);
    /// assert_eq!(k.count()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn write_async(&self, n: u64) -> impl Future<Output = io::Result<()>> + Send + '_ {
        until_ready(
            self.registrations().fd(),
            Events::OUT | Events::ET,
            move || self.try_write(n),
        )
    }
}

impl ConsumerHalf {
    /// As [`read`](Self::read), as a future (any executor): Counter and AutoReset take the
    /// whole count, Semaphore 1. What is already there (held units included) is taken in
    /// the first poll; a future that has to wait watches the fd in an
    /// [`Epoll`] of its own (one kernel epoll fd while it waits).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a future dropped before it completed read nothing.
    ///
    /// # Errors
    ///
    /// `BrokenPipe` once every write end of a pipe is closed and nothing is left; the
    /// kernel's errno (`EMFILE` when no epoll fd can be made).
    ///
    /// # Examples
    ///
    /// ```
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Semaphore)?;
    /// let t = std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_millis(5));
    ///     n.write(2).map(|()| n)
    /// });
    /// assert_eq!(futures::executor::block_on(c.read_async())?, 1);
    /// let _n = t.join().unwrap()?;
    /// assert_eq!(futures::executor::block_on(c.read_async())?, 1); // the held unit
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg_attr(
        docsrs,
        doc(cfg(any(
            target_os = "linux",
            target_os = "android",
            target_vendor = "apple",
            target_os = "freebsd"
        )))
    )]
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn read_async(&self) -> impl Future<Output = io::Result<u64>> + Send + '_ {
        until_ready(self.as_fd(), Events::IN, move || self.try_read())
    }
}

impl NotifierHalf {
    /// As [`write`](Self::write), as a future (any executor): a word that fits is one
    /// `write(2)` in the first poll; a future that has to wait (a full pipe, an eventfd
    /// near [`LIMIT`](crate::LIMIT)) watches the fd in an [`Epoll`] of its
    /// own, edge-triggered `OUT`, and retries after each read that makes room.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a future dropped before it completed wrote nothing.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `BrokenPipe` if every read end of a pipe is
    /// closed; the kernel's errno.
    ///
    /// # Examples
    ///
    /// ```
    /// let (c, n) = evfd::halves::pipe(evfd::Mode::Counter)?;
    /// futures::executor::block_on(n.write_async(3))?;
    /// assert_eq!(c.read()?, 3);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    #[cfg_attr(
        docsrs,
        doc(cfg(any(
            target_os = "linux",
            target_os = "android",
            target_vendor = "apple",
            target_os = "freebsd"
        )))
    )]
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn write_async(&self, n: u64) -> impl Future<Output = io::Result<()>> + Send + '_ {
        until_ready(self.as_fd(), Events::OUT | Events::ET, move || {
            self.try_write(n)
        })
    }
}
