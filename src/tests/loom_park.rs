//! loom model of the parked eventfd (`crate::epoll::kernel::fds`, "Parked"; the lock-free
//! half is `KernelPoll::park`, the real [`Park`]): the reactor route takes the one eventfd
//! out of the kernel epoll (`try_park`, then `EPOLL_CTL_DEL`, under `registry`) only while
//! nobody relies on the kernel epoll; a looker (a kernel sleep, the watcher's arm) calls
//! `rely` and, if it says the eventfd may be out, puts it back under `registry` before it
//! relies on the kernel epoll. Whatever the interleaving, a looker never relies on a
//! kernel epoll without the eventfd (its sleep would miss the eventfd's wakes), and the
//! kernel's answers stay the ones it expects (no `DEL` of an fd it does not hold, no `ADD`
//! of one it does).
//!
//! Mocked: the kernel epoll (whether it holds the eventfd) and the `registry` lock around
//! it, a loom `Mutex`.

use std::sync::Arc;

use loom::sync::Mutex;
use loom::thread;

use crate::epoll::Park;

/// The kernel epoll's view, guarded by the model's `registry`.
struct Kfd {
    /// The kernel epoll holds the eventfd.
    holds: bool,
    /// `Fds::parked`.
    parked: bool,
}

struct Shared {
    park: Park,
    registry: Mutex<Kfd>,
}

impl Shared {
    fn new() -> Arc<Shared> {
        Arc::new(Shared {
            park: Park::default(),
            registry: Mutex::new(Kfd {
                holds: true,
                parked: false,
            }),
        })
    }

    /// `fds::repark` (the route made a registration of the eventfd, or a ctl left the
    /// shape as it was).
    fn repark(&self) {
        let mut k = self.registry.lock().unwrap();
        if k.parked || !self.park.try_park() {
            return;
        }
        assert!(
            k.holds,
            "EPOLL_CTL_DEL of an fd the kernel epoll does not hold"
        );
        k.holds = false;
        k.parked = true;
    }

    /// `fds::rely`, then the reliance itself: the kernel epoll must hold the eventfd.
    fn rely(&self) {
        if self.park.rely() {
            let mut k = self.registry.lock().unwrap();
            if k.parked {
                assert!(!k.holds, "EPOLL_CTL_ADD of an fd the kernel epoll holds");
                k.holds = true;
                k.parked = false;
                self.park.unparked();
            }
        }
        assert!(
            self.registry.lock().unwrap().holds,
            "a looker relied on the kernel epoll without the eventfd"
        );
    }
}

/// The route parks (`times` times: a ctl between puts it back, as `add` and `modify` do
/// before their own call) while `lookers` threads rely on the kernel epoll; once all are
/// done, the eventfd is in it.
fn scenario(name: &str, times: usize, lookers: usize) {
    super::model(name, 2, move || {
        let s = Shared::new();
        let ts: Vec<_> = (0..lookers)
            .map(|_| {
                let s = Arc::clone(&s);
                thread::spawn(move || s.rely())
            })
            .collect();
        for _ in 0..times {
            s.repark();
            // A ctl: back in under `registry` (`fds::unpark`), then parked again.
            let mut k = s.registry.lock().unwrap();
            if k.parked {
                k.holds = true;
                k.parked = false;
                s.park.unparked();
            }
        }
        s.repark();
        for t in ts {
            t.join().unwrap();
        }
        assert!(
            s.registry.lock().unwrap().holds,
            "parked after a looker relied on the kernel epoll"
        );
    });
}

#[test]
fn loom_park_the_route_parks_while_a_sleeper_relies() {
    scenario("park vs one looker", 0, 1);
}

#[test]
fn loom_park_two_lookers() {
    scenario("park vs two lookers", 0, 2);
}

#[test]
fn loom_park_parked_again_after_a_ctl() {
    scenario("park, ctl, park vs one looker", 2, 1);
}
