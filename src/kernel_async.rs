//! Async waits for the kinds that are a kernel fd, on any executor:
//! [`KernelNotifier::read_async`] and [`write_async`](KernelNotifier::write_async), the
//! kick/call halves' [`ConsumerHalf::read_async`] and [`NotifierHalf::write_async`], and the
//! one helper they share ([`FdWait`]).
//!
//! A kernel eventfd is written by whoever holds the fd (another process, KVM, a vhost
//! peer), so the wake comes through the kernel. A future first tries the operation (one
//! non-blocking syscall, `sys::eventfd::read_now`/`write_now`, independent of the shared
//! `O_NONBLOCK` flag); only when it would block does it wait in an [`Epoll`] that watches
//! the fd, awaiting [`Epoll::wait_async`], whose kernel side is the tokio reactor inside a
//! tokio runtime and the crate's watcher thread elsewhere (no thread of its own, no busy
//! wait). Then it tries again.
//!
//! - Readers share one epoll per notifier object and process (`epoll::LazyEpoll`), made by
//!   the first read future that has to wait and kept until the object is dropped: a wait
//!   costs no `epoll_create1`, `epoll_ctl(ADD)` or `close`, and the epoll's kernel epoll is
//!   registered with the kernel side once (per runtime), not once per future. They watch
//!   `IN` level-triggered: a peer that takes the count between the readiness and the read
//!   sends the future back to waiting, and the next write reports again; several futures
//!   can wait in it, since `wait_async` hands a wake on to another waiter while an event is
//!   still queued (a Semaphore's units, a count a woken future left for a competitor). A
//!   consumer half first takes the units it holds (its try does), so it never waits while
//!   it holds some. A fork child's read futures make and keep an epoll of the child's (the
//!   parent's refuses to work there). The fd is registered as a plain `BorrowedFd` (no
//!   delivery of the owner's, never `epoll::kernel::fds`'s "One eventfd"), so what a
//!   collect reports is the kernel's, and a level-triggered item never counts as "Drained"
//!   there: after a delivery the reactor's route looks at the kernel epoll again, so a
//!   second waiter hears what the first left.
//! - A private AutoReset `KernelNotifier`, whose count memory keeps (`sys::mem_count`),
//!   reads as readable for ever meanwhile, so its epoll watches `IN` edge-triggered
//!   (`KernelNotifier::read_interest`), as every kernel registration of it does; the epoll
//!   keeps the rule it was made with. It stays right after the count goes to the kernel
//!   (which is for good): every write that makes the count non-zero is a wake of the
//!   eventfd, hence an edge, and an AutoReset read takes the whole count, so the future
//!   that harvests an edge reads what it announced (or finds that a competitor did), and a
//!   future still waiting has nothing to miss. An edge wakes one waiter, whose read takes
//!   all there is (so such an item rightly counts as "Drained" once delivered).
//! - Writers watch `OUT` edge-triggered, each in an epoll of its own. The kernel reports
//!   `OUT` while a write of 1 fits, which says nothing about a larger `n`: level-triggered,
//!   a write of `n` that does not fit yet would be woken again at once, for ever.
//!   Edge-triggered, every `read(2)` of the eventfd (the only thing that makes room) is a
//!   new edge, so each retry follows a read. The item is added before the first retry, so
//!   a read between the failed try and the wait is not missed (the kernel queues its edge).
//!   An edge of a shared epoll would wake one of its waiters, and each writer waits for a
//!   room of its own size: so each has its own, made on its first wait and closed when it
//!   completes or is dropped.
//!
//! Every future here is cancel-safe: it reads or writes only in the poll that returns
//! `Ready`; a read future dropped after its wake hands the wake on (`wait_async`'s cancel
//! safety), so it strands no other. Where `Epoll` has kernel-fd sources:
//! `KernelNotifier`'s on Linux, the halves' on Linux, macOS and FreeBSD (there the epoll's
//! kernel side is a kqueue).

use std::future::Future;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};

use crate::epoll::{Epoll, LazyEpoll};
use crate::events::{Event, Events};
use crate::notifier::halves::{ConsumerHalf, NotifierHalf};
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;

/// A kernel fd's readiness, awaited on any executor: an [`Epoll`] holding only that fd,
/// taken at the first [`ready`](Self::ready) and reused by the next ones. A reader's is its
/// object's shared epoll ([`shared`](Self::shared)), a writer's its own ([`own`](Self::own)).
pub(crate) struct FdWait<'fd> {
    fd: BorrowedFd<'fd>,
    interest: Events,
    /// Where the epoll is kept for every wait of the object (readers); `None`: this wait's
    /// own, closed with it (writers).
    kept: Option<&'fd LazyEpoll>,
    ep: Option<Epoll>,
}

impl<'fd> FdWait<'fd> {
    /// A wait in an epoll of its own (made at the first wait, closed with this).
    pub(crate) fn own(fd: BorrowedFd<'fd>, interest: Events) -> FdWait<'fd> {
        FdWait {
            fd,
            interest,
            kept: None,
            ep: None,
        }
    }

    /// A wait in the epoll kept in `kept`, made (watching `fd` for `interest`) by the first
    /// wait of any `FdWait` on it in this process. Every user of one `kept` watches the
    /// same fd for `IN`; the epoll keeps the trigger rule it was made with (module docs).
    pub(crate) fn shared(
        fd: BorrowedFd<'fd>,
        interest: Events,
        kept: &'fd LazyEpoll,
    ) -> FdWait<'fd> {
        FdWait {
            fd,
            interest,
            kept: Some(kept),
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
                let (fd, interest) = (self.fd, self.interest);
                let make = move || {
                    let ep = Epoll::new();
                    ep.add(&fd, interest, 0)?;
                    Ok(ep)
                };
                let ep = match self.kept {
                    Some(kept) => kept.get_or_make(make)?,
                    None => make()?,
                };
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
/// block, a wait for `fd`'s next `interest` event (`wait`), then `op` again. The epoll is
/// taken at the first wait only.
async fn until_ready<T>(
    mut wait: FdWait<'_>,
    mut op: impl FnMut() -> io::Result<T>,
) -> io::Result<T> {
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
    /// that has to wait watches the eventfd for `IN` (level-triggered; edge-triggered
    /// while the [count is in memory](KernelNotifier#the-count-in-memory)) in an
    /// [`Epoll`] that every read future of this notifier shares: made by the first one
    /// that waits (in this process: a `fork` child makes its own) and kept until the
    /// notifier is dropped. That is one
    /// kernel epoll fd, holding the eventfd from then on (and, once awaited in a tokio
    /// runtime, a duplicate of it in that runtime's reactor). Its wake reaches the task
    /// through the tokio reactor inside a tokio runtime and through the crate's watcher
    /// thread elsewhere. Inside tokio, `evfd::tokio::AsyncNotifierFd` (feature `tokio`)
    /// registers the fd itself instead.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a future dropped before it completed read nothing, and a wake it had
    /// won goes on to another read future waiting in the shared epoll.
    ///
    /// # Errors
    ///
    /// The kernel's errno (`EMFILE` when the first wait cannot make the epoll; the next
    /// wait tries again).
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
        let fd = self.registrations().fd();
        let wait = FdWait::shared(fd, self.read_interest(), self.reader_epoll());
        until_ready(wait, move || self.try_read())
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
        let wait = FdWait::own(self.registrations().fd(), Events::OUT | Events::ET);
        until_ready(wait, move || self.try_write(n))
    }
}

impl ConsumerHalf {
    /// As [`read`](Self::read), as a future (any executor): Counter and AutoReset take the
    /// whole count, Semaphore 1. What is already there (held units included) is taken in
    /// the first poll; a future that has to wait watches the fd (level-triggered `IN`) in
    /// an [`Epoll`] that every read future of this consumer shares: made by the first one
    /// that waits (in this process: a `fork` child makes its own) and kept until the
    /// consumer is dropped (one kernel epoll fd, or kqueue, holding the fd from then on).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: a future dropped before it completed read nothing, and a wake it had
    /// won goes on to another read future waiting in the shared epoll.
    ///
    /// # Errors
    ///
    /// `BrokenPipe` once every write end of a pipe is closed and nothing is left; the
    /// kernel's errno (`EMFILE` when the first wait cannot make the epoll; the next wait
    /// tries again).
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
        let wait = FdWait::shared(self.as_fd(), Events::IN, self.reader_epoll());
        until_ready(wait, move || self.try_read())
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
        let wait = FdWait::own(self.as_fd(), Events::OUT | Events::ET);
        until_ready(wait, move || self.try_write(n))
    }
}
