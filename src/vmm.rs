//! rust-vmm interop (feature `vmm-sys-util`): [`KernelNotifier`] to and from
//! `vmm_sys_util::eventfd::EventFd` and the split `vmm_sys_util::event::{EventNotifier,
//! EventConsumer}` that vhost 0.18 and vhost-user-backend 0.24 take and hand out, and the
//! kick/call halves ([`ConsumerHalf`], [`NotifierHalf`]) to and from the split pair.
//!
//! Every conversion moves the fd itself (or, where it says so, a `dup(2)` of it): the same
//! open file description, so the same kernel counter, never a copy of the count.
//!
//! vmm-sys-util's types have no `From<OwnedFd>` or `Into<OwnedFd>`, only `FromRawFd` /
//! `IntoRawFd`; the `unsafe` needed to go through raw fds is confined to [`IntoOwned`] and
//! [`FromOwned`] below, each impl with its `SAFETY` line.

use std::io;
use std::os::fd::{AsFd, FromRawFd, IntoRawFd, OwnedFd};

use vmm_sys_util::event::{EventConsumer, EventNotifier};
use vmm_sys_util::eventfd::EventFd;

use crate::mode::Mode;
use crate::notifier::halves::{ConsumerHalf, NotifierHalf};
use crate::notifier::kernel::KernelNotifier;

/// A vmm-sys-util fd owner given up as an [`OwnedFd`].
trait IntoOwned {
    fn into_owned(self) -> OwnedFd;
}

/// A vmm-sys-util fd owner made from an [`OwnedFd`].
trait FromOwned {
    fn from_owned(fd: OwnedFd) -> Self;
}

macro_rules! owned_fd_glue {
    ($($t:ty),*) => {$(
        impl IntoOwned for $t {
            #[allow(unsafe_code)]
            fn into_owned(self) -> OwnedFd {
                // SAFETY: the type holds its fd in a `File` it owns alone; `into_raw_fd` gives
                // that ownership up (the `File` is forgotten, not closed), so the fd is open
                // and nobody else will close it.
                unsafe { OwnedFd::from_raw_fd(self.into_raw_fd()) }
            }
        }

        impl FromOwned for $t {
            #[allow(unsafe_code)]
            fn from_owned(fd: OwnedFd) -> Self {
                // SAFETY: `into_raw_fd` gives up an open fd that was owned by the `OwnedFd`
                // alone; the new value's `File` becomes its only owner.
                unsafe { <$t>::from_raw_fd(fd.into_raw_fd()) }
            }
        }
    )*};
}

owned_fd_glue!(EventFd, EventConsumer, EventNotifier);

/// Adopt and check: `from_owned_fd` or, without a mode, the fd's own flags.
fn adopt(fd: OwnedFd, mode: Option<Mode>) -> io::Result<KernelNotifier> {
    match mode {
        Some(mode) => KernelNotifier::from_owned_fd(fd, mode),
        None => KernelNotifier::try_from(fd),
    }
}

/// # rust-vmm (feature `vmm-sys-util`)
///
/// Conversions both ways with `vmm_sys_util` 0.15: `From<KernelNotifier>` for
/// [`EventFd`], [`EventConsumer`] and [`EventNotifier`] (the fd moves, leaving every
/// [`Epoll`](crate::Epoll) first, as [`OwnedFd::from`] does), `TryFrom` of each back (the
/// mode from the fd's own `EFD_SEMAPHORE` flag, as `TryFrom<OwnedFd>`), the `from_*`
/// constructors here for a mode of your choosing (such as [`Mode::AutoReset`]), and
/// [`event_consumer_and_notifier`](Self::event_consumer_and_notifier) for the pair
/// vhost-user-backend wants.
///
/// Flags, as everywhere with `KernelNotifier`:
///
/// - Adoption makes the open file description `O_NONBLOCK`, which every dup shares: an
///   `EventFd` or `EventConsumer` kept on the rust-vmm side then reads `WouldBlock` at
///   count 0 (as one made with `EFD_NONBLOCK` / `EventFlag::NONBLOCK` does; vhost and
///   vhost-user-backend only read after epoll says readable).
/// - What evfd hands out is `O_NONBLOCK` too (see [`into_blocking_fd`](Self::into_blocking_fd)
///   for a peer that wants blocking reads).
/// - `EFD_SEMAPHORE` belongs to the eventfd and travels with it: `TryFrom` reads it from
///   `/proc/self/fdinfo` (Linux 6.4+, else `Counter` is assumed and the fd's flag still
///   decides what a read takes), and the `from_*` constructors refuse a mode that
///   disagrees with it (`InvalidInput`).
/// - Close-on-exec is per fd: moved as it is; the dups made by
///   `event_consumer_and_notifier` are close-on-exec iff this notifier's fd is.
///
/// On Linux `vmm_sys_util::event::new_event_consumer_and_notifier` makes both halves over
/// one eventfd, which is what these accept; a half over a pipe (vmm-sys-util's choice on
/// other systems) is refused with `InvalidInput`, as [`from_owned_fd`](Self::from_owned_fd)
/// refuses every non-eventfd.
///
/// ```
/// use evfd::KernelNotifier;
/// use vmm_sys_util::eventfd::{EventFd, EFD_NONBLOCK};
///
/// // rust-vmm to evfd: the same eventfd, count and all.
/// let efd = EventFd::new(EFD_NONBLOCK)?;
/// efd.write(2)?;
/// let k = KernelNotifier::try_from(efd.try_clone()?)?;
/// efd.write(3)?;
/// assert_eq!(k.read()?, 5);
///
/// // evfd to rust-vmm.
/// let back = EventFd::from(k.try_clone()?);
/// k.write(7)?;
/// assert_eq!(back.read()?, 7);
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
impl KernelNotifier {
    /// Adopt a rust-vmm `EventFd` in `mode` (checked as
    /// [`from_owned_fd`](Self::from_owned_fd) checks it).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an `EFD_SEMAPHORE` fd and a non-`Semaphore` mode or the reverse
    /// (where `/proc` shows the flag); the kernel's errno from `fcntl(2)`. The fd is closed
    /// on error (it was moved in).
    ///
    /// ```
    /// use evfd::{Events, KernelNotifier, Mode};
    /// use vmm_sys_util::eventfd::EventFd;
    ///
    /// let efd = EventFd::new(0)?;
    /// let kick = KernelNotifier::from_event_fd(efd.try_clone()?, Mode::AutoReset)?;
    /// efd.write(1)?;
    /// efd.write(1)?;
    /// assert!(kick.consume()?.contains(Events::IN)); // one delivery, count reset
    /// assert!(!kick.consume()?.contains(Events::IN));
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_event_fd(fd: EventFd, mode: Mode) -> io::Result<KernelNotifier> {
        adopt(fd.into_owned(), Some(mode))
    }

    /// Adopt the consumer half of a rust-vmm pair (a vring's kick or err, an exit event) in
    /// `mode`; checked as [`from_owned_fd`](Self::from_owned_fd) checks it.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a half that is not an eventfd (a pipe) or whose semaphore flag
    /// disagrees with `mode`; the kernel's errno from `fcntl(2)`.
    ///
    /// ```
    /// use evfd::{KernelNotifier, Mode};
    /// use vmm_sys_util::event::{new_event_consumer_and_notifier, EventFlag};
    ///
    /// let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::CLOEXEC)?;
    /// let kick = KernelNotifier::from_event_consumer(consumer, Mode::Counter)?;
    /// notifier.notify()?;
    /// notifier.notify()?;
    /// assert_eq!(kick.read()?, 2);
    /// assert!(kick.is_cloexec());
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_event_consumer(fd: EventConsumer, mode: Mode) -> io::Result<KernelNotifier> {
        adopt(fd.into_owned(), Some(mode))
    }

    /// Adopt the notifier half of a rust-vmm pair (a vring's call) in `mode`; checked as
    /// [`from_owned_fd`](Self::from_owned_fd) checks it. Every operation works on it: an
    /// eventfd has no read or write end.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a half that is not an eventfd (a pipe) or whose semaphore flag
    /// disagrees with `mode`; the kernel's errno from `fcntl(2)`.
    ///
    /// ```
    /// use evfd::{KernelNotifier, Mode};
    /// use vmm_sys_util::event::{new_event_consumer_and_notifier, EventFlag};
    ///
    /// let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::NONBLOCK)?;
    /// let call = KernelNotifier::from_event_notifier(notifier, Mode::Counter)?;
    /// call.notify()?;
    /// consumer.consume()?; // the rust-vmm side reads what evfd wrote
    /// assert_eq!(call.try_read().unwrap_err().kind(), std::io::ErrorKind::WouldBlock);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_event_notifier(fd: EventNotifier, mode: Mode) -> io::Result<KernelNotifier> {
        adopt(fd.into_owned(), Some(mode))
    }

    /// Two `dup(2)`s of this eventfd as the pair `vmm_sys_util::event::
    /// new_event_consumer_and_notifier` returns (consumer first), for an API that wants
    /// one, such as vhost-user-backend's `VhostUserBackend::exit_event`. This notifier
    /// stays usable: all three are the same counter. Close-on-exec iff this one is.
    ///
    /// # Errors
    ///
    /// The kernel's errno (`EMFILE`).
    ///
    /// ```
    /// use evfd::{KernelNotifier, Mode};
    /// let exit = KernelNotifier::new(Mode::AutoReset)?;
    /// let (consumer, notifier) = exit.event_consumer_and_notifier()?;
    /// notifier.notify()?; // the rust-vmm side signals...
    /// assert_eq!(exit.count()?, 1); // ...evfd sees it
    /// exit.write(1)?; // evfd signals...
    /// consumer.consume()?; // ...the rust-vmm side reads both
    /// assert_eq!(exit.count()?, 0);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn event_consumer_and_notifier(&self) -> io::Result<(EventConsumer, EventNotifier)> {
        let consumer = EventConsumer::from(self.try_clone()?);
        let notifier = EventNotifier::from(self.try_clone()?);
        Ok((consumer, notifier))
    }
}

macro_rules! conversions {
    ($($t:ident: $what:literal),*) => {$(
        #[doc = concat!("Hand the eventfd to rust-vmm as ", $what, ": the same fd (it leaves")]
        /// every [`Epoll`](crate::Epoll) first, as [`OwnedFd::from`] does), still
        /// `O_NONBLOCK`.
        ///
        /// ```
        #[doc = concat!("use vmm_sys_util::", $what, ";")]
        /// let k = evfd::KernelNotifier::new(evfd::Mode::Counter)?;
        /// let keep = k.try_clone()?;
        #[doc = concat!("let theirs = ", stringify!($t), "::from(k);")]
        /// keep.write(1)?;
        #[doc = concat!("let back = evfd::KernelNotifier::try_from(theirs)?;")]
        /// assert_eq!(back.read()?, 1);
        /// # Ok::<(), std::io::Error>(())
        /// ```
        #[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
        impl From<KernelNotifier> for $t {
            fn from(k: KernelNotifier) -> $t {
                <$t>::from_owned(OwnedFd::from(k))
            }
        }

        #[doc = concat!("Adopt a rust-vmm ", $what, " in the mode its flags say, as")]
        /// `TryFrom<OwnedFd>` does: `Semaphore` for an `EFD_SEMAPHORE` fd (where
        /// `/proc/self/fdinfo` shows the flag), else `Counter`. For another mode, use the
        /// `KernelNotifier::from_*` constructors.
        ///
        /// # Errors
        ///
        /// `InvalidInput` (`EINVAL`) for a fd that is not an eventfd; the kernel's errno
        /// from `fcntl(2)`.
        #[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
        impl TryFrom<$t> for KernelNotifier {
            type Error = io::Error;

            fn try_from(fd: $t) -> io::Result<KernelNotifier> {
                adopt(fd.into_owned(), None)
            }
        }
    )*};
}

conversions!(
    EventFd: "eventfd::EventFd",
    EventConsumer: "event::EventConsumer",
    EventNotifier: "event::EventNotifier"
);

/// # rust-vmm (feature `vmm-sys-util`)
///
/// The halves to and from vmm-sys-util 0.15's split pair, on the same fd: what
/// `new_event_consumer_and_notifier` makes (an eventfd on Linux) and what vhost and
/// vhost-user-backend hand out (`get_kick`, `get_call`, `exit_event`). Unlike
/// [`KernelNotifier`], a half also takes a **pipe** end (vmm-sys-util's choice off Linux, or
/// a peer's), as its `from_owned_fd` does; the flags are handled as there (`O_NONBLOCK` set
/// on the open file description, close-on-exec kept as it is).
///
/// ```
/// use evfd::halves::ConsumerHalf;
/// use evfd::Mode;
/// use vmm_sys_util::event::{new_event_consumer_and_notifier, EventConsumer, EventFlag};
///
/// let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::empty())?;
/// let kick = ConsumerHalf::from_event_consumer(consumer, Mode::AutoReset)?;
/// notifier.notify()?; // rust-vmm kicks...
/// assert!(kick.consume()?.contains(evfd::Events::IN)); // ...evfd delivers it once
/// let back = EventConsumer::from(kick); // and hands the same fd back
/// notifier.notify()?;
/// back.consume()?;
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
impl ConsumerHalf {
    /// Adopt the consumer of a rust-vmm pair in `mode`: its eventfd (checked against
    /// `mode` as [`KernelNotifier::from_owned_fd`] checks it) or pipe read end.
    ///
    /// # Errors
    ///
    /// As [`ConsumerHalf::from_owned_fd`]: `InvalidInput` for a pipe's write end, a fd that
    /// is neither, or an eventfd whose semaphore flag disagrees with `mode`.
    ///
    /// ```
    /// use evfd::halves::ConsumerHalf;
    /// use vmm_sys_util::event::{new_event_consumer_and_notifier, EventFlag};
    /// let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::CLOEXEC)?;
    /// let kick = ConsumerHalf::from_event_consumer(consumer, evfd::Mode::Counter)?;
    /// notifier.notify()?;
    /// notifier.notify()?;
    /// assert_eq!(kick.read()?, 2);
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_event_consumer(fd: EventConsumer, mode: Mode) -> io::Result<ConsumerHalf> {
        ConsumerHalf::from_owned_fd(fd.into_owned(), mode)
    }
}

#[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
impl NotifierHalf {
    /// Adopt the notifier of a rust-vmm pair (a vring's call): its eventfd or pipe write
    /// end.
    ///
    /// # Errors
    ///
    /// As [`NotifierHalf::from_owned_fd`]: `InvalidInput` for a pipe's read end or a fd
    /// that is neither.
    ///
    /// ```
    /// use evfd::halves::NotifierHalf;
    /// use vmm_sys_util::event::{new_event_consumer_and_notifier, EventFlag};
    /// let (consumer, notifier) = new_event_consumer_and_notifier(EventFlag::NONBLOCK)?;
    /// let call = NotifierHalf::from_event_notifier(notifier)?;
    /// call.notify()?;
    /// consumer.consume()?; // the rust-vmm side reads what evfd wrote
    /// # Ok::<(), std::io::Error>(())
    /// ```
    pub fn from_event_notifier(fd: EventNotifier) -> io::Result<NotifierHalf> {
        NotifierHalf::from_owned_fd(fd.into_owned())
    }
}

/// Hand the consumer to rust-vmm: the same fd (it leaves every [`Epoll`](crate::Epoll)
/// first; units it held are lost with it, see [`halves`](crate::halves)).
#[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
impl From<ConsumerHalf> for EventConsumer {
    fn from(c: ConsumerHalf) -> EventConsumer {
        EventConsumer::from_owned(OwnedFd::from(c))
    }
}

/// Hand the notifier to rust-vmm: the same fd (it leaves every [`Epoll`](crate::Epoll)
/// first).
///
/// ```
/// use vmm_sys_util::event::EventNotifier;
/// let (kick, notifier) = evfd::halves::pipe(evfd::Mode::Counter)?;
/// let theirs = EventNotifier::from(notifier);
/// theirs.notify()?; // a pipe's 8-byte word, as vmm-sys-util writes it off Linux
/// assert_eq!(kick.read()?, 1);
/// # Ok::<(), std::io::Error>(())
/// ```
#[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
impl From<NotifierHalf> for EventNotifier {
    fn from(n: NotifierHalf) -> EventNotifier {
        EventNotifier::from_owned(OwnedFd::from(n))
    }
}

/// Adopt a rust-vmm consumer in the mode its flags say: for an eventfd, `Semaphore` if
/// `/proc/self/fdinfo` shows `EFD_SEMAPHORE`, else `Counter` (as
/// `KernelNotifier::try_from`); for a pipe, `Counter`.
///
/// # Errors
///
/// As [`ConsumerHalf::from_event_consumer`].
#[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
impl TryFrom<EventConsumer> for ConsumerHalf {
    type Error = io::Error;

    fn try_from(fd: EventConsumer) -> io::Result<ConsumerHalf> {
        let fd = fd.into_owned();
        let mode = match crate::sys::eventfd::fdinfo(fd.as_fd()) {
            Ok(Some(crate::sys::eventfd::FdInfo {
                semaphore: Some(true),
                ..
            })) => Mode::Semaphore,
            _ => Mode::Counter,
        };
        ConsumerHalf::from_owned_fd(fd, mode)
    }
}

/// Adopt a rust-vmm notifier ([`NotifierHalf::from_event_notifier`]).
///
/// # Errors
///
/// As [`NotifierHalf::from_event_notifier`].
#[cfg_attr(docsrs, doc(cfg(feature = "vmm-sys-util")))]
impl TryFrom<EventNotifier> for NotifierHalf {
    type Error = io::Error;

    fn try_from(fd: EventNotifier) -> io::Result<NotifierHalf> {
        NotifierHalf::from_event_notifier(fd)
    }
}
