//! [`SignalNotifier`]: write a [`Notifier`] from a signal handler.
//!
//! [`Notifier::notify`] is not async-signal-safe: its wake takes the notifier's wait-queue
//! lock, then (epoll items) an epoll's locks, and runs wakers, any of which the interrupted
//! thread may hold or be inside. A `SignalNotifier` splits the write in two:
//!
//! - in the handler: the count changes with the same lock-free CAS as `try_write` (so the
//!   unit is there at once, for every reader and poll), then, only if an entry of the wait
//!   queue wants `IN` (the same SeqCst `interest` load that is `WaitQueue::wake`'s fast path:
//!   the waker half of its Dekker pair), the wake is recorded in this handle's slot (atomic
//!   adds) and the relay's doorbell is rung (`write(2)` on a private fd that never waits);
//! - in the relay thread (one per process, started by the first
//!   [`Notifier::signal_notifier`], outside any handler): the doorbell wakes it; it takes
//!   each slot's recorded wakes (atomic swaps) and makes them (`WaitQueue::wake`), as the
//!   write would have — callbacks, fd views, unparks and wakers all run there.
//!
//! No lost wake: the handler records before it rings; the relay drains the doorbell before
//! it swaps the slots, so a record it misses rang after the drain, and the doorbell is
//! readable again.
//!
//! # LOCKING
//!
//! ```text
//! Relay::slots   Mutex   the live slots. Taken by signal_notifier (add), SignalNotifier's
//!                        Drop (remove) and the relay thread (scan), each with no other lock
//!                        held; released before any wake runs. Never taken in a handler.
//! ```

use std::fmt;
use std::io;
use std::sync::{Arc, Mutex, OnceLock};

use crate::events::Events;
use crate::sys::{self, BuildDoorbell, Doorbell};

use super::signal_slot::Slot;
use super::Notifier;

/// The process's relay: its doorbell and the slots it serves.
pub(crate) struct Relay {
    bell: BuildDoorbell,
    /// The fork epoch the thread was started in: a child has no relay thread.
    born: u32,
    slots: Mutex<Vec<Arc<Slot>>>,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

static RELAY: OnceLock<io::Result<&'static Relay>> = OnceLock::new();

fn relay() -> io::Result<&'static Relay> {
    let r = RELAY.get_or_init(|| {
        let relay: &'static Relay = Box::leak(Box::new(Relay {
            bell: BuildDoorbell::create(true)?,
            born: sys::fork::epoch(),
            slots: Mutex::new(Vec::new()),
        }));
        std::thread::Builder::new()
            .name("evfd-signal-relay".into())
            .spawn(move || relay.run())?;
        Ok(relay)
    });
    match r {
        Ok(relay) if sys::fork::forked(relay.born) => Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "the signal relay was started before fork(): a child process has no relay thread",
        )),
        Ok(relay) => Ok(relay),
        Err(e) => Err(io::Error::new(e.kind(), format!("signal relay: {e}"))),
    }
}

impl Relay {
    fn run(&self) {
        loop {
            if sys::poll_until(self.bell.as_fd(), Events::IN, None).is_err() {
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            // Drain first, then take the records (module docs: no lost wake).
            let _ = self.bell.drain();
            let due: Vec<Arc<Slot>> = lock(&self.slots)
                .iter()
                .filter(|s| s.owes())
                .cloned()
                .collect();
            for s in due {
                s.flush();
            }
        }
    }
}

/// A handle that writes a [`Notifier`] from a signal handler: [`notify`](Self::notify) and
/// [`write`](Self::write) are **async-signal-safe** (atomics and one `write(2)`, no lock, no
/// allocation, no foreign code), with the same effect as [`Notifier::try_write`]: the count
/// changes in the handler, and the wake it owes (blocked readers, futures, epolls, fd
/// views) is made at once by evfd's relay thread.
///
/// Made by [`Notifier::signal_notifier`], outside the handler (it may start the relay
/// thread). Store it where the handler finds it (a `static` `OnceLock`), and do not drop it
/// in a handler (dropping makes any wake still owed, in the dropping thread). It holds the
/// notifier open, as a clone does. Table of what is async-signal-safe:
/// docs/semantics.md §6.3.
///
/// # Examples
///
/// ```
/// use std::sync::OnceLock;
/// static KICK: OnceLock<evfd::SignalNotifier> = OnceLock::new();
///
/// extern "C" fn on_sigusr1(_: libc::c_int) {
///     if let Some(k) = KICK.get() {
///         let _ = k.notify(); // async-signal-safe
///     }
/// }
///
/// let n = evfd::Notifier::new();
/// KICK.set(n.signal_notifier()?).ok().unwrap();
/// // SAFETY (of the example): a plain C handler that only calls notify.
/// unsafe { libc::signal(libc::SIGUSR1, on_sigusr1 as *const () as libc::sighandler_t) };
/// unsafe { libc::raise(libc::SIGUSR1) };
/// assert_eq!(n.read()?, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
pub struct SignalNotifier {
    slot: Arc<Slot>,
    relay: &'static Relay,
}

impl fmt::Debug for SignalNotifier {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SignalNotifier")
            .field("notifier", self.slot.notifier())
            .finish()
    }
}

impl Notifier {
    /// A handle whose [`notify`](SignalNotifier::notify) and
    /// [`write`](SignalNotifier::write) may be called from a signal handler (this
    /// notifier's own `notify` may not: docs/semantics.md §6.3).
    ///
    /// Call it outside the handler: the first call in a process starts evfd's relay thread
    /// (`evfd-signal-relay`), which makes the wakes that handlers' writes owe.
    ///
    /// # Errors
    ///
    /// `Unsupported` in a child process for a notifier (or a relay) made before `fork`;
    /// the OS error if the relay's doorbell or thread cannot be created.
    ///
    /// # Examples
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// let s = n.signal_notifier()?;
    /// s.write(2)?; // what a handler would do
    /// assert_eq!(n.read()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn signal_notifier(&self) -> io::Result<SignalNotifier> {
        self.core.check()?;
        let relay = relay()?;
        let slot = Arc::new(Slot::new(self.clone()));
        lock(&relay.slots).push(Arc::clone(&slot));
        Ok(SignalNotifier { slot, relay })
    }
}

impl SignalNotifier {
    /// `write(1)`, async-signal-safe.
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// n.signal_notifier()?.notify()?;
    /// assert_eq!(n.count(), 1);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn notify(&self) -> io::Result<()> {
        self.write(1)
    }

    /// Add `n` to the count without waiting (a handler must not wait), as
    /// [`Notifier::try_write`]; async-signal-safe. The wake it owes is made by the relay
    /// thread.
    ///
    /// # Errors
    ///
    /// `InvalidInput` (`EINVAL`) for `n == u64::MAX`; `WouldBlock` (`EAGAIN`) if the count
    /// would pass [`LIMIT`](crate::LIMIT); `Unsupported` in a child process for a notifier
    /// made before `fork`. Nothing changes on error. The errors carry no message (no
    /// allocation).
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// let s = n.signal_notifier()?;
    /// s.write(evfd::LIMIT)?;
    /// assert_eq!(s.write(1).unwrap_err().raw_os_error(), Some(libc::EAGAIN));
    /// assert_eq!(s.write(u64::MAX).unwrap_err().raw_os_error(), Some(libc::EINVAL));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn write(&self, n: u64) -> io::Result<()> {
        if self.slot.write(n)? {
            // Never waits (a private fd, and `ring` never waits whatever its flag says);
            // "already rung" is success. Cannot fail short of the fd being closed behind
            // our back; the record stays and the next ring or the drop delivers it.
            let _ = self.relay.bell.ring();
        }
        Ok(())
    }

    /// The notifier this handle writes.
    ///
    /// ```
    /// let n = evfd::Notifier::new();
    /// assert!(n.signal_notifier()?.notifier().ptr_eq(&n));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn notifier(&self) -> &Notifier {
        self.slot.notifier()
    }
}

impl Drop for SignalNotifier {
    fn drop(&mut self) {
        if !sys::fork::forked(self.relay.born) {
            lock(&self.relay.slots).retain(|s| !Arc::ptr_eq(s, &self.slot));
        }
        // Owed wakes are made here (the relay may be making them too: a wake is harmless).
        self.slot.flush();
    }
}
