//! Off Linux (and Android) an [`Epoll`](crate::Epoll) has no kernel-fd sources: there is no
//! kernel epoll to embed, and no `Source` impl makes a `KernelRef` (uninhabited here). These
//! stand-ins give `kernel_fds`'s names to the rest of the module so it needs no cfgs:
//! `EpInner::kernel` is never set and no `KernelPoll` is ever made, so nothing here runs.

use std::io;
use std::sync::Arc;

use super::item::Item;
use super::source::sealed::KernelRef;
use super::{EpInner, Registry};
use crate::events::{Event, Events};
use crate::wait_queue::WakeBatch;

/// Never made off Linux.
pub(crate) struct KernelPoll {
    pub(crate) id: u64,
    never: std::convert::Infallible,
}

impl KernelPoll {
    pub(crate) fn readiness(&self) -> Events {
        match self.never {}
    }
}

/// Never made off Linux (`EpInner::kernel` stays empty).
pub(crate) struct KernelSide {
    pub(crate) poll: Arc<KernelPoll>,
    #[allow(dead_code)]
    pub(crate) item: Arc<Item>,
}

/// No kernel-fd registrations off Linux.
#[derive(Default)]
pub(crate) struct KernelFds;

/// What `close` drops after unlocking (nothing here).
pub(crate) struct KernelLeft;

impl EpInner {
    pub(crate) fn kernel_side(&self) -> Option<Arc<KernelSide>> {
        None
    }

    pub(crate) fn ensure_watch(&self) {}

    pub(super) fn kernel_dropped(self: &Arc<Self>, _: &mut WakeBatch) {}

    pub(super) fn kernel_add(
        self: &Arc<Self>,
        k: KernelRef<'_>,
        _: Events,
        _: u64,
    ) -> io::Result<()> {
        match k.never {}
    }

    pub(super) fn kernel_modify(
        self: &Arc<Self>,
        k: KernelRef<'_>,
        _: Events,
        _: u64,
    ) -> io::Result<()> {
        match k.never {}
    }

    pub(super) fn kernel_delete(&self, k: KernelRef<'_>) -> io::Result<()> {
        match k.never {}
    }

    pub(crate) fn mark_kernel_below(&self) {}

    pub(super) fn queue_nested_kernel(&self, _: &mut Registry, _: &mut WakeBatch) {}

    pub(super) fn kernel_len(&self, _: &mut Registry) -> usize {
        0
    }

    pub(super) fn kernel_collect(&self, _: &Registry, side: &KernelSide, _: &mut [Event]) -> usize {
        match side.poll.never {}
    }

    pub(super) fn requeue_kernel_item(&self, side: &KernelSide, _: &mut WakeBatch) {
        match side.poll.never {}
    }

    pub(super) fn kernel_close(&self, _: &mut Registry) -> KernelLeft {
        KernelLeft
    }
}

/// Never made off Linux (`EpInner::kernel_sleep` is always `None`).
pub(crate) struct KernelSleep {
    never: std::convert::Infallible,
}

impl KernelSleep {
    pub(crate) fn waiter(&self) -> crate::wait_queue::thread::ThreadWaiter {
        match self.never {}
    }

    pub(crate) fn park(
        &self,
        _: &crate::wait_queue::thread::ThreadWaiter,
        _: Option<std::time::Instant>,
        _: std::time::Duration,
    ) -> crate::wait_queue::thread::Parked {
        match self.never {}
    }
}

impl EpInner {
    pub(crate) fn kernel_sleep(&self) -> Option<KernelSleep> {
        None
    }
}
