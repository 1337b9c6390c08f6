//! `read_async` / `write_async` of a [`SharedNotifier`], for any executor.
//!
//! A wake from another process arrives through the kernel (the doorbell), so the future
//! waits in an [`Epoll`] that watches the doorbell as a kernel fd (`Epoll::wait_async`,
//! whose kernel side the crate's watcher thread listens to, one per process). No future
//! has a thread of its own.
//!
//! - **Readers**: while a read future is pending the notifier is registered as a doorbell
//!   consumer, so the doorbell mirrors `count > 0` and the notifier's reader epoll
//!   (level-triggered `IN`, shared by its read futures) reports it readable exactly then,
//!   in whichever process the count was written.
//! - **Writers** waiting for room (a count near [`LIMIT`](crate::LIMIT): rare) each watch
//!   the doorbell edge-triggered in an epoll of their own and register in the region as
//!   waiting writers, and ask for a pulse before each re-check; the next consumption then
//!   pulses the doorbell (an eventfd write of 0), which reports an event to each such watch
//!   (protocol docs, "Async writers").
//!
//! Both futures are cancel-safe: they consume or add only in the poll that returns
//! `Ready`, and a dropped one unregisters (its `Drop` guard).

use std::io;

use super::handle::SharedNotifier;
use crate::epoll::Epoll;
use crate::events::{Event, Events};

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

/// This future's registration as a writer waiting for room, and the epoll in which it
/// watches the doorbell. Dropped (completed or cancelled): unregistered, epoll closed.
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
        self.s.disarm_room_here();
    }
}

/// `SharedNotifier::write_async`.
pub(super) async fn write(s: &SharedNotifier, n: u64) -> io::Result<()> {
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
