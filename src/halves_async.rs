//! Async waits for the kick/call halves, on any executor: [`ConsumerHalf::read_async`] and
//! [`NotifierHalf::write_async`], through the helper the kernel-backed kinds share
//! (`kernel_async::FdWait`: an `Epoll` of the future's own holding the fd, whose kernel side
//! is the tokio reactor inside a tokio runtime and the crate's watcher thread elsewhere).
//!
//! - A read first takes what is there (units the consumer holds, then the pipe or eventfd:
//!   one non-blocking call, whatever the shared `O_NONBLOCK` says); only when that would
//!   block does it wait for `IN` on the fd, level-triggered, and try again. Held units are
//!   taken by the try, so a future never waits while the consumer holds some.
//! - A write waits for `OUT` edge-triggered, as `KernelNotifier::write_async` does: every
//!   read of the pipe (or eventfd) is an edge, and the future retries after each one.
//!
//! Both futures are cancel-safe: they read or write only in the poll that returns `Ready`.
//! Linux only, as `Epoll`'s kernel-fd sources.

use std::future::Future;
use std::io;
use std::os::fd::AsFd;

use crate::events::Events;
use crate::halves::{ConsumerHalf, NotifierHalf};
use crate::kernel_async::FdWait;

impl ConsumerHalf {
    /// As [`read`](Self::read), as a future (any executor): Counter and AutoReset take the
    /// whole count, Semaphore 1. What is already there (held units included) is taken in
    /// the first poll; a future that has to wait watches the fd in an
    /// [`Epoll`](crate::Epoll) of its own (one kernel epoll fd while it waits).
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
    #[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn read_async(&self) -> impl Future<Output = io::Result<u64>> + Send + '_ {
        async move {
            let mut wait = FdWait::new(self.as_fd(), Events::IN);
            loop {
                match self.try_read() {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    r => return r,
                }
                wait.ready().await?;
            }
        }
    }
}

impl NotifierHalf {
    /// As [`write`](Self::write), as a future (any executor): a word that fits is one
    /// `write(2)` in the first poll; a future that has to wait (a full pipe, an eventfd
    /// near [`LIMIT`](crate::LIMIT)) watches the fd in an [`Epoll`](crate::Epoll) of its
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
    #[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn write_async(&self, n: u64) -> impl Future<Output = io::Result<()>> + Send + '_ {
        async move {
            let mut wait = FdWait::new(self.as_fd(), Events::OUT | Events::ET);
            loop {
                match self.try_write(n) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    r => return r,
                }
                wait.ready().await?;
            }
        }
    }
}
