//! A [`SharedNotifier`] as an [`Epoll`](crate::Epoll) source: its doorbell eventfd, watched
//! through the epoll's embedded kernel epoll.

use super::notifier::SharedNotifier;
use crate::epoll::source::sealed;
use crate::epoll::Source;
use crate::mode::Mode;

/// A [`SharedNotifier`]: its doorbell eventfd, which mirrors `count > 0` while an epoll
/// watches it, through the embedded kernel epoll. In AutoReset mode the delivery of `IN`
/// resets the shared count; dropping the last handle removes it from every epoll, although
/// the peer process keeps the doorbell open.
impl sealed::Sealed for SharedNotifier {
    fn source_ref(&self) -> sealed::SourceRef<'_> {
        sealed::SourceRef::Kernel(sealed::KernelRef {
            fd: self.epoll_bell(),
            autoreset: self.mode() == Mode::AutoReset,
            eventfd: false,
            owner: Some(self.kernel_regs()),
        })
    }
}

impl Source for SharedNotifier {}
