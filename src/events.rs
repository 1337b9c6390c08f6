//! The crate's shared vocabulary: poll/epoll event bits with the kernel's numeric values,
//! the `epoll_event` twin, the wake-key-only bits, and source identities.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use bitflags::bitflags;

bitflags! {
    /// Readiness and interest bits, numerically equal to the kernel's `EPOLL*` values.
    ///
    /// The same type is used for a source's readiness ([`Notifier::poll`](crate::Notifier::poll)),
    /// for an [`Epoll`](crate::Epoll) item's interest mask, and for delivered events.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::Events;
    /// assert_eq!(Events::IN.bits(), 0x1);
    /// assert_eq!(Events::ET.bits(), 0x8000_0000);
    /// assert!((Events::IN | Events::OUT).contains(Events::OUT));
    /// ```
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
    pub struct Events: u32 {
        /// `EPOLLIN`: readable (a notifier's count is non-zero).
        const IN = 0x0000_0001;
        /// `EPOLLPRI`: urgent data. A notifier never raises it.
        const PRI = 0x0000_0002;
        /// `EPOLLOUT`: writable (a write of 1 would not block).
        const OUT = 0x0000_0004;
        /// `EPOLLERR`: error condition; always reported, never needs asking for.
        const ERR = 0x0000_0008;
        /// `EPOLLHUP`: hang-up; always reported, never needs asking for.
        const HUP = 0x0000_0010;
        /// `EPOLLNVAL`.
        const NVAL = 0x0000_0020;
        /// `EPOLLRDNORM`: an epoll reports it together with `IN` when it is readable.
        const RDNORM = 0x0000_0040;
        /// `EPOLLRDBAND`.
        const RDBAND = 0x0000_0080;
        /// `EPOLLWRNORM`.
        const WRNORM = 0x0000_0100;
        /// `EPOLLWRBAND`.
        const WRBAND = 0x0000_0200;
        /// `EPOLLMSG`.
        const MSG = 0x0000_0400;
        /// `EPOLLRDHUP`: peer closed its writing half.
        const RDHUP = 0x0000_2000;
        /// `EPOLLEXCLUSIVE`: wake only one of several epolls waiting on a source (`add` only).
        const EXCLUSIVE = 0x1000_0000;
        /// `EPOLLWAKEUP`: a power-management hint, accepted and ignored.
        const WAKEUP = 0x2000_0000;
        /// `EPOLLONESHOT`: disarm the item after one delivery, until `modify`.
        const ONESHOT = 0x4000_0000;
        /// `EPOLLET`: edge-triggered: delivered once per wake, not re-queued.
        const ET = 0x8000_0000;

        // Undefined bits are stored as given, like the kernel does.
        const _ = !0;
    }
}

impl Events {
    /// The control bits (`WAKEUP | ONESHOT | ET | EXCLUSIVE`), never reported as events.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::Events;
    /// assert_eq!(Events::PRIVATE.bits(), 0xF000_0000);
    /// ```
    pub const PRIVATE: Events = Events::from_bits_retain(0xF000_0000);

    /// The bits allowed together with [`Events::EXCLUSIVE`]: `IN|OUT|ERR|HUP|WAKEUP|ET|EXCLUSIVE`.
    ///
    /// # Examples
    ///
    /// ```
    /// use evfd::Events;
    /// assert_eq!(Events::EXCLUSIVE_OK.bits(), 0xB000_001D);
    /// ```
    pub const EXCLUSIVE_OK: Events = Events::from_bits_retain(0xB000_001D);
}

/// One delivered event, the twin of the kernel's `struct epoll_event`.
///
/// # Examples
///
/// ```
/// use evfd::{Event, Events};
/// let e = Event::default();
/// assert_eq!((e.events, e.data), (Events::empty(), 0));
/// let e = Event { events: Events::IN, data: 7 };
/// assert_eq!(e.data, 7);
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct Event {
    /// The ready bits (never a control bit).
    pub events: Events,
    /// The `data` given at `add`/`modify`, returned verbatim.
    pub data: u64,
}

/// A wake-key-only bit (never a readiness or interest bit, never reported; `EPOLL*` leaves
/// bit 26 unused) that rides with `OUT` when a consumption (a read, an AutoReset delivery)
/// left the count at 0, and alone when an epoll's harvest, delete or source close left
/// nothing ready. Entries that do not ask for it are unaffected: an epoll item's mask filter
/// and blocked writers look at `OUT`. Only fd views listen for it (`crate::fd`).
pub(crate) const KEY_EMPTIED: Events = Events::from_bits_retain(1 << 26);

/// A wake-key-only bit (never a readiness or interest bit, never reported; `EPOLL*` leaves
/// bit 27 unused) that rides with `IN` when a write took a notifier's count from 0 (a
/// *fill*). Only an edge-only fd view of a notifier listens for it, and for nothing else: it
/// rings at each fill (`crate::fd`, "Edge-only views of a notifier").
pub(crate) const KEY_FILLED: Events = Events::from_bits_retain(1 << 27);

/// Identities of sources (notifiers and epolls) for epoll interest sets: never reused in a
/// process. Not part of any synchronisation protocol, so a plain `std` atomic (never the
/// loom shim) with `Relaxed` ordering.
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

/// A fresh source id.
pub(crate) fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Relaxed)
}
