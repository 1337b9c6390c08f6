//! `read_async` / `write_async` of a [`SharedNotifier`], for any executor.
//!
//! A wake from another process arrives through the kernel (the doorbell), so the future
//! waits in an [`Epoll`] that watches the doorbell as a kernel fd (`Epoll::wait_async`,
//! whose kernel side the crate's watcher thread listens to, one per process). No future
//! has a thread of its own.
//!
//! - **Readers**: while a read future is pending it is registered in the region as an
//!   edge-only doorbell consumer, so every write that takes the count from 0, in whichever
//!   process, rings the doorbell, and nothing drains it: a wake costs that one `write(2)`.
//!   The read futures of one process share one watch of the doorbell, the notifier's
//!   reader epoll (edge-triggered `IN`); a Semaphore read that leaves units while another
//!   of them waits rings once more, since one edge wakes one future (protocol docs,
//!   "Async readers").
//! - **Writers** waiting for room (a count near [`LIMIT`](crate::mode::LIMIT): rare) each watch
//!   the doorbell edge-triggered in an epoll of their own and register in the region as
//!   waiting writers, and ask for a pulse before each re-check; the next consumption then
//!   pulses the doorbell (an eventfd write of 0), which reports an event to each such watch
//!   (protocol docs, "Async writers").
//!
//! Both futures are cancel-safe: they consume or add only in the poll that returns
//! `Ready`, and a dropped one unregisters (its `Drop` guard).
//!
//! LOCKING: no lock of its own. The reader epoll is kept in a `LazyEpoll`
//! (`crate::epoll::lazy`, whose LOCKING line covers its fork child's slot).

use std::future::Future;
use std::io;

use super::notifier::SharedNotifier;
use crate::epoll::Epoll;
use crate::events::{Event, Events};

/// This read future's registration as an edge-only doorbell consumer, from its first
/// wait until it completes (`took`) or is dropped.
///
/// A `fork` child's copy of a pending future (dropped there, never polled) undoes nothing:
/// the registration in the shared region is the parent's, whose future still waits on it.
/// (The child's process-local count of waiting futures keeps the copy; that costs the
/// child at most a ring its Semaphore reads need not make.)
struct EdgeArm<'a> {
    s: &'a SharedNotifier,
    took: bool,
    /// The fork epoch it registered in (`sys::fork`).
    born: u32,
}

impl<'a> EdgeArm<'a> {
    fn arm(s: &'a SharedNotifier) -> Self {
        let born = crate::sys::fork::epoch();
        s.arm_edge_waiter_here();
        EdgeArm {
            s,
            took: false,
            born,
        }
    }
}

impl Drop for EdgeArm<'_> {
    fn drop(&mut self) {
        if !crate::sys::fork::forked(self.born) {
            self.s.disarm_edge_waiter_here(self.took);
        }
    }
}

impl SharedNotifier {
    /// Take from the count, waiting while it is 0, as a future (any executor). The whole
    /// count (Counter, AutoReset: the completion is the delivery, it resets) or 1
    /// (Semaphore).
    ///
    /// Cancel-safe: a future dropped before it completes consumed nothing. A read that
    /// finds units is memory only. A future that has to wait registers in the region as an
    /// edge-only doorbell consumer and waits in an [`Epoll`] watching the doorbell (one
    /// per process and notifier, shared by its read futures): a write that takes the count
    /// from 0 then rings it, one `write(2)`, and nothing drains it, so a wake costs that one
    /// syscall on the writer's side ([`stats`](Self::stats): `rings`, and no `drains`).
    ///
    /// # Errors
    ///
    /// `InvalidData` if the peer corrupted the region; the OS error from the epoll.
    ///
    /// # Examples
    ///
    /// ```
    /// # use std::os::unix::net::UnixStream;
    /// let (a, b) = UnixStream::pair()?;
    /// let s = evfd::SharedNotifier::new(evfd::Mode::Counter)?;
    /// s.send(&a)?;
    /// let peer = evfd::SharedNotifier::recv(&b)?;
    /// let t = std::thread::spawn(move || peer.write(3));
    /// assert_eq!(futures::executor::block_on(s.read_async())?, 3);
    /// t.join().unwrap()?;
    /// # Ok::<(), std::io::Error>(())
    /// ```
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn read_async(&self) -> impl Future<Output = io::Result<u64>> + Send + '_ {
        read(self)
    }

    /// Add `n` to the count, waiting for room while it would pass [`LIMIT`](crate::LIMIT),
    /// as a future (any executor).
    ///
    /// A write that fits is memory only. A future that has to wait costs no thread of its
    /// own: it watches the doorbell in an [`Epoll`] of its own
    /// (edge-triggered) and registers in the region as a writer waiting for room; while it
    /// is registered, every read or AutoReset delivery (in either process) pulses the
    /// doorbell with one `write(2)` of 0, which wakes the future without changing the
    /// doorbell's readability. The wake reaches the task through the epoll's kernel-fd
    /// machinery (its watcher thread, one per process, shared with every other wait). A
    /// waiting future holds one kernel epoll fd, closed when it completes or is dropped.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future before it completes adds nothing, unregisters it from the
    /// region and closes its epoll. It never takes a wake that another waiter needs: every
    /// consumption wakes every waiting writer (blocked or async, in either process), so a
    /// dropped future's pending wake was also delivered to the others.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; `InvalidData` if the peer corrupted the region.
    ///
    /// ```
    /// let s = evfd::SharedNotifier::builder().initial(evfd::LIMIT).build()?;
    /// let s2 = s.clone();
    /// let t = std::thread::spawn(move || {
    ///     std::thread::sleep(std::time::Duration::from_millis(10));
    ///     s2.read()
    /// });
    /// futures::executor::block_on(s.write_async(2))?;
    /// assert_eq!(t.join().unwrap()?, evfd::LIMIT);
    /// assert_eq!(s.count(), 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    // Not `async fn`: the signature promises `Send`, so a change that loses it fails here.
    #[allow(clippy::manual_async_fn)]
    pub fn write_async(&self, n: u64) -> impl Future<Output = io::Result<()>> + Send + '_ {
        write(self, n)
    }

    /// The epoll this process's read futures on this notifier wait in (made by the first
    /// one that waits, one per process: `LazyEpoll`): its doorbell, edge-triggered.
    fn reader_epoll(&self) -> io::Result<Epoll> {
        self.reader().get_or_make(|| {
            let ep = Epoll::new();
            ep.add(&self.bell_fd(), Events::IN | Events::ET, 0)?;
            Ok(ep)
        })
    }
}

/// `SharedNotifier::read_async`.
///
/// The watch comes first (the process's reader epoll), then the registration, then a try
/// (the look of the protocol's claim): a write after that try rings, and its edge is
/// queued on the watch. A wake that finds the count empty is spurious: a stray ring by the
/// peer, a ring queued while no future waited, or units another consumer took first. The
/// future waits again (nothing to resync: no drain is owed for it); after
/// [`SPURIOUS_BEFORE_YIELD`] spurious wakes in a row it returns `Pending` once (waking
/// itself), so a peer that rings without writing can cost the task some wakes but never
/// its executor's other tasks or a timeout.
async fn read(s: &SharedNotifier) -> io::Result<u64> {
    // Made (or taken from its slot) by the first wait: a read that finds units needs none.
    let mut ep = None;
    let mut arm: Option<EdgeArm<'_>> = None;
    let mut evs = [Event::default(); 1];
    let mut spurious = 0;
    loop {
        match s.try_read() {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => {
                if let Some(arm) = &mut arm {
                    arm.took = r.is_ok();
                }
                return r;
            }
        }
        let ep = match &ep {
            Some(ep) => ep,
            None => ep.insert(s.reader_epoll()?),
        };
        if arm.is_none() {
            arm = Some(EdgeArm::arm(s));
            continue; // the try after the registration
        }
        if spurious >= SPURIOUS_BEFORE_YIELD {
            spurious = 0;
            crate::wait_queue::task::yield_now().await;
        }
        ep.wait_async(&mut evs).await?;
        spurious += 1; // reset by returning: a wake that finds units completes the future
    }
}

/// Spurious doorbell wakes a read future absorbs in one poll before it yields.
const SPURIOUS_BEFORE_YIELD: u32 = 4;

/// This future's registration as a writer waiting for room, and the epoll in which it
/// watches the doorbell. Dropped (completed or cancelled): unregistered, epoll closed. A
/// `fork` child's copy undoes nothing (as [`EdgeArm`]'s): its epoll, made just before the
/// registration, knows the fork epoch they share.
struct RoomWait<'a> {
    s: &'a SharedNotifier,
    ep: Epoll,
}

impl<'a> RoomWait<'a> {
    /// Watch first (edge-triggered, `OUT` included: a pulse is a write of 0, which leaves
    /// the doorbell's readability alone), then register: a pulse after the registration
    /// is kept in the epoll's ready list until the future waits.
    fn arm(s: &'a SharedNotifier) -> io::Result<Self> {
        let ep = Epoll::new();
        ep.add(&s.bell_fd(), Events::IN | Events::OUT | Events::ET, 0)?;
        s.arm_room_here();
        Ok(RoomWait { s, ep })
    }
}

impl Drop for RoomWait<'_> {
    fn drop(&mut self) {
        if !self.ep.inner.forked() {
            self.s.disarm_room_here();
        }
    }
}

/// `SharedNotifier::write_async`.
async fn write(s: &SharedNotifier, n: u64) -> io::Result<()> {
    let mut wait: Option<RoomWait<'_>> = None;
    let mut evs = [Event::default(); 1];
    loop {
        if wait.is_some() {
            // Before each re-check: the next consumption pulses (and clears the request).
            s.want_pulse_here();
        }
        match s.try_write(n) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            r => return r,
        }
        match &wait {
            // Register, then ask for a pulse and re-check (the next round).
            None => wait = Some(RoomWait::arm(s)?),
            Some(w) => {
                w.ep.wait_async(&mut evs).await?;
            }
        }
    }
}
