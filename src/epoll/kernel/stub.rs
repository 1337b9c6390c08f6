//! Where there is neither epoll (Linux, Android) nor kqueue (macOS, FreeBSD: `sys::kqueue`)
//! an [`Epoll`](crate::Epoll) has no kernel-fd sources: there is no kernel poller to embed,
//! and no `Source` impl makes a `KernelRef` (uninhabited here). These
//! stand-ins give the facade's names to the rest of the epoll so it needs no cfgs: no kernel
//! side is ever made, so nothing here runs (every method is a no-op, or unreachable through
//! an uninhabited argument).

use std::io;
use std::sync::Arc;

use super::Ctl;
use crate::epoll::item::Item;
use crate::epoll::source::sealed::KernelRef;
use crate::epoll::EpInner;
use crate::events::{Event, Events};
use crate::wait_queue::WakeBatch;

/// Never made here.
pub(crate) struct KernelPoll {
    pub(crate) id: u64,
    never: std::convert::Infallible,
}

impl KernelPoll {
    pub(crate) fn readiness(&self) -> Events {
        match self.never {}
    }
}

/// The facade, empty: no kernel fd is ever added.
pub(crate) struct KernelSide;

/// No kernel-fd registrations here (and no nesting bookkeeping: nothing reads it).
#[derive(Default)]
pub(crate) struct Fds;

impl Fds {
    pub(crate) fn nest(&mut self, _: &Arc<Item>) {}

    pub(crate) fn unnest(&mut self, _: &Arc<Item>) {}
}

/// What `close` drops after unlocking (nothing here).
pub(crate) struct KernelLeft;

// The epoll drops these where the real ones must be dropped (after unlocking); the stand-ins
// have nothing to drop, and say so, so that those `drop` calls are not dropping nothing.
impl Drop for KernelLeft {
    fn drop(&mut self) {}
}

impl Drop for KernelSleep {
    fn drop(&mut self) {}
}

/// A harvest's kernel delivery: nothing.
pub(crate) struct Collector;

impl Collector {
    pub(crate) fn skip_end(&mut self) {}

    pub(crate) fn seeded(
        &mut self,
        _: &EpInner,
        _: &Fds,
        _: &[(Events, u64)],
        _: &mut [Event],
        _: &mut WakeBatch,
    ) -> usize {
        0
    }

    pub(crate) fn collect(&mut self, _: &Fds, _: &mut [Event]) -> usize {
        0
    }

    pub(crate) fn drained(&self) -> bool {
        false
    }

    pub(crate) fn finish(
        &mut self,
        _: &EpInner,
        _: &Fds,
        _: &mut [Event],
        _: usize,
        _: &mut WakeBatch,
    ) -> usize {
        0
    }
}

impl KernelSide {
    pub(crate) fn new() -> KernelSide {
        KernelSide
    }

    pub(crate) fn present(&self) -> bool {
        false
    }

    pub(crate) fn below(&self) -> bool {
        false
    }

    pub(crate) fn mark_below(&self, _: &EpInner) {}

    pub(crate) fn ctl(&self, _: &Arc<EpInner>, _: Ctl, k: KernelRef<'_>) -> io::Result<()> {
        match k.never {}
    }

    pub(crate) fn watch(&self, _: &EpInner) {}

    pub(crate) fn dropped(&self, _: &Arc<EpInner>, _: &mut WakeBatch) {}

    pub(crate) fn queue_nested(&self, _: &EpInner, _: &mut Fds, _: &mut WakeBatch) {}

    pub(crate) fn readable(&self) -> bool {
        false
    }

    pub(crate) fn collect(&self) -> Collector {
        Collector
    }

    pub(crate) fn sleeper(&self, _ep: &crate::epoll::EpInner) -> Option<KernelSleep> {
        None
    }

    pub(crate) fn wait_bare(
        &self,
        _: &Arc<EpInner>,
        _: &mut [Event],
        _: Option<std::time::Instant>,
    ) -> Option<usize> {
        None
    }

    pub(crate) fn memory_added(&self) {}

    pub(crate) fn bare_task_enter(&self, _: &mut bool, _: &std::task::Waker) -> bool {
        false
    }

    pub(crate) fn bare_task_leave(&self, _: &mut bool) {}

    pub(crate) fn len(&self, _: &mut Fds) -> usize {
        0
    }

    pub(crate) fn close(&self, _: &mut Fds) -> KernelLeft {
        KernelLeft
    }
}

/// Never made here (`KernelSide::sleeper` is always `None`).
pub(crate) struct KernelSleep {
    never: std::convert::Infallible,
}

impl KernelSleep {
    pub(crate) fn waiter(&self) -> Arc<crate::wait_queue::thread::ThreadWaiter> {
        match self.never {}
    }

    pub(crate) fn park(
        &mut self,
        _: &crate::wait_queue::thread::ThreadWaiter,
        _: Option<std::time::Instant>,
        _: std::time::Duration,
        _: usize,
    ) -> crate::wait_queue::thread::Parked {
        match self.never {}
    }

    pub(crate) fn leave(&mut self) {
        match self.never {}
    }

    pub(crate) fn has_seed(&self) -> bool {
        match self.never {}
    }

    pub(crate) fn deliver_seed(&mut self, _: &Arc<EpInner>, _: &mut [Event]) -> usize {
        match self.never {}
    }
}
