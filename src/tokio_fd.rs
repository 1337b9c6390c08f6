//! tokio integration through `AsyncFd` (feature `tokio`).
//!
//! The one `unsafe` registration lives below, in `crate::sys::tokio` ([`register_stable`],
//! [`StableFd`]); this module marks the public types it wraps as [`StableFd`] and
//! [`AsyncSource::register`] and the safe constructors of `crate::tokio_view` call it.

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, RawFd};

use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

use crate::events::Events;
use crate::fd::FdView;
#[cfg(any(target_os = "linux", target_os = "android"))]
use crate::notifier::kernel::KernelNotifier;
use crate::notifier::Notifier;
use crate::sys::tokio::{register_stable, StableFd};

/// What an `AsyncNotifierFd` watches.
#[derive(Debug)]
enum AsyncSource {
    /// An in-memory notifier through a fd view of it: readable only (the doorbell shows
    /// `IN`; room to write is waited for on the notifier's own queue).
    View { notifier: Notifier, view: FdView },
    /// A kernel eventfd: readable and writable, as the kernel reports.
    #[cfg(any(target_os = "linux", target_os = "android"))]
    Kernel(KernelNotifier),
}

/// What tokio's reactor registers (`epoll_ctl`, which cannot change the open file
/// description's flags): for a `KernelNotifier`, the crate's own borrow, not a lend, so a
/// private notifier stays private (docs/semantics.md §6.4). No user code reaches it: the
/// `AsyncFd` is private to [`AsyncNotifierFd`], whose own `AsFd`/`AsRawFd` lend.
impl AsRawFd for AsyncSource {
    fn as_raw_fd(&self) -> RawFd {
        match self {
            AsyncSource::View { view, .. } => view.as_raw_fd(),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            AsyncSource::Kernel(k) => k.registrations().fd().as_raw_fd(),
        }
    }
}

impl AsyncSource {
    /// Register with the current tokio reactor.
    ///
    /// # Panics
    ///
    /// Outside a tokio runtime with I/O enabled (tokio's own panic).
    fn register(self) -> io::Result<AsyncFd<AsyncSource>> {
        let interest = match self {
            AsyncSource::View { .. } => Interest::READABLE,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            AsyncSource::Kernel(_) => Interest::READABLE | Interest::WRITABLE,
        };
        register_stable(self, interest)
    }
}

// SAFETY: a FdView's fd is its doorbell's, owned by the view's core, which the view keeps
// alive (an `Arc`) and never swaps.
#[allow(unsafe_code)]
unsafe impl StableFd for FdView {}

// SAFETY: a KernelNotifier's fd is an `OwnedFd` field that no method replaces or closes.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
unsafe impl StableFd for KernelNotifier {}

// SAFETY: a SharedFdView's fd is an `OwnedFd` field (a duplicate of the doorbell) that no
// method replaces or closes.
#[cfg(any(target_os = "linux", target_os = "android"))]
#[allow(unsafe_code)]
unsafe impl StableFd for crate::shared::SharedFdView {}

// SAFETY: each variant's fd is one of the two above, and the variant is never changed.
#[allow(unsafe_code)]
unsafe impl StableFd for AsyncSource {}

/// Await an evfd object through tokio's reactor: a [`KernelNotifier`] (an eventfd that
/// another process, KVM or vhost signals) or an in-memory [`Notifier`] through a
/// [`FdView`].
///
/// This is the way to await evfd objects that **another process or the kernel** signals:
/// the reactor's epoll watches the real fd, so a write from anywhere wakes the task. For an
/// in-memory notifier signalled only from this process, its own async methods (no fd, no
/// syscall) are cheaper; use this wrapper there when the notifier must sit in the same
/// reactor as sockets, or when a library only takes fds.
///
/// Built on [`tokio::io::unix::AsyncFd`]: readiness comes from the reactor; every
/// operation is tried without blocking and, on `WouldBlock`, clears the readiness and waits
/// for the next edge — which fd views guarantee (see [`FdView`]).
///
/// # Panics
///
/// The constructors panic outside a tokio runtime with I/O enabled (tokio's own panic).
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> std::io::Result<()> {
/// use evfd::{KernelNotifier, Mode};
/// use evfd::tokio::AsyncNotifierFd;
///
/// let k = KernelNotifier::new(Mode::Counter)?;
/// let writer = k.try_clone()?; // e.g. handed to another process
/// let a = AsyncNotifierFd::from_kernel(k)?;
/// std::thread::spawn(move || writer.write(3).unwrap());
/// assert_eq!(a.read().await?, 3);
/// # Ok(())
/// # }
/// ```
#[derive(Debug)]
#[cfg_attr(docsrs, doc(cfg(feature = "tokio")))]
pub struct AsyncNotifierFd {
    fd: AsyncFd<AsyncSource>,
}

impl AsyncNotifierFd {
    /// Watch an in-memory notifier through a new [`FdView`] of it.
    ///
    /// # Errors
    ///
    /// The OS error from creating the view's doorbell or registering it with the reactor.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let n = evfd::Notifier::new();
    /// let a = evfd::tokio::AsyncNotifierFd::new(&n)?;
    /// let n2 = n.clone();
    /// std::thread::spawn(move || n2.write(2).unwrap());
    /// assert_eq!(a.read().await?, 2);
    /// # Ok(())
    /// # }
    /// ```
    pub fn new(notifier: &Notifier) -> io::Result<AsyncNotifierFd> {
        let view = notifier.fd_view()?;
        let fd = AsyncSource::View {
            notifier: notifier.clone(),
            view,
        }
        .register()?;
        Ok(AsyncNotifierFd { fd })
    }

    /// Watch a kernel eventfd.
    ///
    /// # Errors
    ///
    /// The OS error from registering the fd with the reactor.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let a = evfd::tokio::AsyncNotifierFd::from_kernel(evfd::KernelNotifier::new(evfd::Mode::Counter)?)?;
    /// a.write(5).await?;
    /// assert_eq!(a.read().await?, 5);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
    pub fn from_kernel(notifier: KernelNotifier) -> io::Result<AsyncNotifierFd> {
        Ok(AsyncNotifierFd {
            fd: AsyncSource::Kernel(notifier).register()?,
        })
    }

    /// The in-memory notifier, if this wraps one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let n = evfd::Notifier::new();
    /// let a = evfd::tokio::AsyncNotifierFd::new(&n)?;
    /// assert!(a.notifier().unwrap().ptr_eq(&n));
    /// assert!(a.kernel().is_none());
    /// # Ok(())
    /// # }
    /// ```
    pub fn notifier(&self) -> Option<&Notifier> {
        match self.fd.get_ref() {
            AsyncSource::View { notifier, .. } => Some(notifier),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            AsyncSource::Kernel(_) => None,
        }
    }

    /// The kernel notifier, if this wraps one.
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let a = evfd::tokio::AsyncNotifierFd::from_kernel(evfd::KernelNotifier::new(evfd::Mode::Counter)?)?;
    /// assert_eq!(a.kernel().unwrap().mode(), evfd::Mode::Counter);
    /// # Ok(())
    /// # }
    /// ```
    #[cfg(any(target_os = "linux", target_os = "android"))]
    #[cfg_attr(docsrs, doc(cfg(any(target_os = "linux", target_os = "android"))))]
    pub fn kernel(&self) -> Option<&KernelNotifier> {
        match self.fd.get_ref() {
            AsyncSource::Kernel(k) => Some(k),
            AsyncSource::View { .. } => None,
        }
    }

    /// Take from the count once it is non-zero: the whole count (Counter, AutoReset) or 1
    /// (Semaphore).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the count is taken in the same poll that returns it, so a future
    /// dropped early has consumed nothing.
    ///
    /// # Errors
    ///
    /// The kernel's errno, or the reactor's error.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let n = evfd::Notifier::builder().mode(evfd::Mode::Semaphore).initial(2).build()?;
    /// let a = evfd::tokio::AsyncNotifierFd::new(&n)?;
    /// assert_eq!(a.read().await?, 1);
    /// assert_eq!(a.read().await?, 1);
    /// assert_eq!(n.count(), 0);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn read(&self) -> io::Result<u64> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| match fd.get_ref() {
                AsyncSource::View { notifier, .. } => notifier.try_read(),
                #[cfg(any(target_os = "linux", target_os = "android"))]
                AsyncSource::Kernel(k) => k.try_read(),
            }) {
                Ok(r) => return r,
                // WouldBlock: readiness cleared; wait for the next edge.
                Err(_would_block) => continue,
            }
        }
    }

    /// Wait until the source is readable and deliver that readiness to this consumer:
    /// returns the readiness seen (it contains `IN`), and an AutoReset source is reset by
    /// it ([`FdView::consume`](crate::FdView::consume),
    /// [`KernelNotifier::consume`]). For Counter and Semaphore sources this only awaits
    /// readability.
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the delivery happens in the poll that returns it.
    ///
    /// # Errors
    ///
    /// The kernel's errno, or the reactor's error.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// use evfd::{Events, Mode, Notifier};
    /// let kick = Notifier::builder().mode(Mode::AutoReset).build()?;
    /// let a = evfd::tokio::AsyncNotifierFd::new(&kick)?;
    /// kick.notify()?;
    /// kick.notify()?;
    /// assert!(a.consume().await?.contains(Events::IN));
    /// assert_eq!(kick.count(), 0); // delivered: reset, no read needed
    /// # Ok(())
    /// # }
    /// ```
    pub async fn consume(&self) -> io::Result<Events> {
        loop {
            let mut guard = self.fd.readable().await?;
            match guard.try_io(|fd| {
                let seen = match fd.get_ref() {
                    AsyncSource::View { view, .. } => view.consume(),
                    #[cfg(any(target_os = "linux", target_os = "android"))]
                    AsyncSource::Kernel(k) => k.consume()?,
                };
                if seen.contains(Events::IN) {
                    Ok(seen)
                } else {
                    Err(io::ErrorKind::WouldBlock.into())
                }
            }) {
                Ok(r) => return r,
                Err(_would_block) => continue,
            }
        }
    }

    /// Add `n` to the count, waiting for room if it would pass [`LIMIT`](crate::LIMIT).
    ///
    /// A kernel eventfd's room is awaited through the reactor (`EPOLLOUT`); an in-memory
    /// notifier's on its own wait queue (the fd view only shows readability).
    ///
    /// # Cancel safety
    ///
    /// Cancel-safe: the count changes only in the poll that returns `Ok`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `n == u64::MAX`; the kernel's errno, or the reactor's error.
    ///
    /// # Examples
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let n = evfd::Notifier::new();
    /// let a = evfd::tokio::AsyncNotifierFd::new(&n)?;
    /// a.write(4).await?;
    /// assert_eq!(n.count(), 4);
    /// let e = a.write(u64::MAX).await.unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn write(&self, n: u64) -> io::Result<()> {
        match self.fd.get_ref() {
            // In memory: the notifier's own cancel-safe future waits for room.
            AsyncSource::View { notifier, .. } => notifier.write_async(n).await,
            #[cfg(any(target_os = "linux", target_os = "android"))]
            AsyncSource::Kernel(_) => loop {
                let mut guard = self.fd.writable().await?;
                match guard.try_io(|fd| match fd.get_ref() {
                    AsyncSource::Kernel(k) => k.try_write(n),
                    AsyncSource::View { .. } => unreachable!("matched Kernel above"),
                }) {
                    Ok(r) => return r,
                    Err(_would_block) => continue,
                }
            },
        }
    }

    /// `write(1)`.
    ///
    /// # Cancel safety
    ///
    /// As [`write`](Self::write).
    ///
    /// # Errors
    ///
    /// As [`write`](Self::write).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> std::io::Result<()> {
    /// let a = evfd::tokio::AsyncNotifierFd::from_kernel(evfd::KernelNotifier::new(evfd::Mode::Counter)?)?;
    /// a.notify().await?;
    /// assert_eq!(a.read().await?, 1);
    /// # Ok(())
    /// # }
    /// ```
    pub async fn notify(&self) -> io::Result<()> {
        self.write(1).await
    }
}

impl AsFd for AsyncNotifierFd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        match self.fd.get_ref() {
            AsyncSource::View { view, .. } => view.as_fd(),
            #[cfg(any(target_os = "linux", target_os = "android"))]
            AsyncSource::Kernel(k) => k.as_fd(),
        }
    }
}

impl AsRawFd for AsyncNotifierFd {
    fn as_raw_fd(&self) -> RawFd {
        // The public borrow: a `KernelNotifier`'s is a lend (not the reactor's borrow).
        self.as_fd().as_raw_fd()
    }
}
