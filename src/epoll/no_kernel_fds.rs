//! Off Linux (and Android) an [`Epoll`](crate::Epoll) has no kernel-fd sources: there is no
//! kernel epoll to embed, and no `Source` impl makes a `KernelRef` (uninhabited here). These
//! stand-ins give `kernel_fds`'s names to the rest of the module so it needs no cfgs:
//! `EpInner::kernel` is never set, so nothing here runs.

use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::Instant;

use super::source::sealed::KernelRef;
use super::EpInner;
use crate::events::{Event, Events};

/// Never made off Linux (`EpInner::kernel` stays empty).
#[allow(dead_code)]
pub(crate) struct KernelSide {
    pub(crate) epfd: OwnedFd,
    never: std::convert::Infallible,
}

impl KernelSide {
    pub(crate) fn ring(&self) {
        match self.never {}
    }
}

/// No kernel-fd registrations off Linux.
pub(crate) enum KItem {}

impl EpInner {
    pub(super) fn kernel_add(&self, k: KernelRef<'_>, _: Events, _: u64) -> io::Result<()> {
        match k.never {}
    }

    pub(super) fn kernel_modify(&self, k: KernelRef<'_>, _: Events, _: u64) -> io::Result<()> {
        match k.never {}
    }

    pub(super) fn kernel_delete(&self, k: KernelRef<'_>) -> io::Result<()> {
        match k.never {}
    }

    pub(super) fn kernel_collect(&self, _: &mut [Event], _: Option<Instant>) -> io::Result<usize> {
        match self.kernel.get() {
            Some(side) => match side.never {},
            None => Ok(0),
        }
    }

    pub(super) fn wait_kernel(
        self: &Arc<Self>,
        out: &mut [Event],
        deadline: Option<Instant>,
    ) -> io::Result<usize> {
        self.kernel_collect(out, deadline)
    }
}
