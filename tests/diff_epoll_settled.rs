//! Scripted kernel-differential scenarios for the writes that skip the notifier's lock
//! ("Settled", docs/design.md): an item already queued, written again and again, while other
//! epolls, nested epolls and readers come and go. Each step runs on real kernel objects
//! (`eventfd(2)` + `epoll(7)`, waits with timeout 0) and on evfd, and every result must
//! agree: the events (mask and data, in order) of every wait, and the count of every read.

use std::os::fd::OwnedFd;
use std::time::Duration;

use evfd::{Epoll, Event, Events, Notifier};
use rustix::event::{epoll, eventfd, EventfdFlags};

/// One step of a scenario. Epolls and notifiers are named by index.
#[derive(Debug, Clone, Copy)]
enum Step {
    /// `write(n)` to notifier `0`.
    Write(usize, u64),
    /// A non-blocking read of notifier `0`: the count, or 0 for `EAGAIN`.
    Read(usize),
    /// `add(notifier, events, data)` to epoll `ep`.
    AddN {
        ep: usize,
        n: usize,
        ev: Events,
        data: u64,
    },
    /// `add(epoll child, events, data)` to epoll `ep`.
    AddE {
        ep: usize,
        child: usize,
        ev: Events,
        data: u64,
    },
    /// `modify` of notifier `n` in epoll `ep`.
    ModN {
        ep: usize,
        n: usize,
        ev: Events,
        data: u64,
    },
    /// `delete` of notifier `n` from epoll `ep`.
    DelN { ep: usize, n: usize },
    /// A wait with timeout 0 and room for `max` events.
    Wait(usize, usize),
}

struct Kernel {
    fds: Vec<OwnedFd>,
    eps: Vec<OwnedFd>,
}

struct Mem {
    ns: Vec<Notifier>,
    eps: Vec<Epoll>,
}

fn kflags(ev: Events) -> epoll::EventFlags {
    epoll::EventFlags::from_bits_retain(ev.bits())
}

impl Kernel {
    fn new(n: usize, e: usize) -> Kernel {
        Kernel {
            fds: (0..n)
                .map(|_| eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).unwrap())
                .collect(),
            eps: (0..e)
                .map(|_| epoll::create(epoll::CreateFlags::CLOEXEC).unwrap())
                .collect(),
        }
    }

    fn run(&self, s: Step) -> Vec<(u32, u64)> {
        match s {
            Step::Write(n, v) => {
                rustix::io::write(&self.fds[n], &v.to_ne_bytes()).unwrap();
                vec![]
            }
            Step::Read(n) => {
                let mut b = [0u8; 8];
                match rustix::io::read(&self.fds[n], &mut b) {
                    Ok(_) => vec![(0, u64::from_ne_bytes(b))],
                    Err(rustix::io::Errno::AGAIN) => vec![(0, 0)],
                    Err(e) => panic!("read: {e}"),
                }
            }
            Step::AddN { ep, n, ev, data } => {
                epoll::add(
                    &self.eps[ep],
                    &self.fds[n],
                    epoll::EventData::new_u64(data),
                    kflags(ev),
                )
                .unwrap();
                vec![]
            }
            Step::AddE {
                ep,
                child,
                ev,
                data,
            } => {
                epoll::add(
                    &self.eps[ep],
                    &self.eps[child],
                    epoll::EventData::new_u64(data),
                    kflags(ev),
                )
                .unwrap();
                vec![]
            }
            Step::ModN { ep, n, ev, data } => {
                epoll::modify(
                    &self.eps[ep],
                    &self.fds[n],
                    epoll::EventData::new_u64(data),
                    kflags(ev),
                )
                .unwrap();
                vec![]
            }
            Step::DelN { ep, n } => {
                epoll::delete(&self.eps[ep], &self.fds[n]).unwrap();
                vec![]
            }
            Step::Wait(ep, max) => {
                let mut buf = vec![std::mem::MaybeUninit::uninit(); max];
                let zero = rustix::time::Timespec::default();
                let (got, _) = epoll::wait(&self.eps[ep], &mut buf[..], Some(&zero)).unwrap();
                got.iter()
                    .map(|e| {
                        let (f, d) = (e.flags, e.data);
                        (f.bits(), d.u64())
                    })
                    .collect()
            }
        }
    }
}

impl Mem {
    fn new(n: usize, e: usize) -> Mem {
        Mem {
            ns: (0..n).map(|_| Notifier::new()).collect(),
            eps: (0..e).map(|_| Epoll::new()).collect(),
        }
    }

    fn run(&self, s: Step) -> Vec<(u32, u64)> {
        match s {
            Step::Write(n, v) => {
                self.ns[n].try_write(v).unwrap();
                vec![]
            }
            Step::Read(n) => vec![(0, self.ns[n].try_read().unwrap_or(0))],
            Step::AddN { ep, n, ev, data } => {
                self.eps[ep].add(&self.ns[n], ev, data).unwrap();
                vec![]
            }
            Step::AddE {
                ep,
                child,
                ev,
                data,
            } => {
                self.eps[ep].add(&self.eps[child], ev, data).unwrap();
                vec![]
            }
            Step::ModN { ep, n, ev, data } => {
                self.eps[ep].modify(&self.ns[n], ev, data).unwrap();
                vec![]
            }
            Step::DelN { ep, n } => {
                self.eps[ep].delete(&self.ns[n]).unwrap();
                vec![]
            }
            Step::Wait(ep, max) => {
                let mut buf = vec![Event::default(); max];
                let k = self.eps[ep].wait(&mut buf, Some(Duration::ZERO)).unwrap();
                buf[..k].iter().map(|e| (e.events.bits(), e.data)).collect()
            }
        }
    }
}

/// Run `steps` on both sides (`n` notifiers, `e` epolls), comparing every result.
fn compare(name: &str, n: usize, e: usize, steps: &[Step]) {
    let (k, m) = (Kernel::new(n, e), Mem::new(n, e));
    for (i, &s) in steps.iter().enumerate() {
        let (kr, mr) = (k.run(s), m.run(s));
        assert_eq!(mr, kr, "{name}: step {i} {s:?}: evfd {mr:?}, kernel {kr:?}");
    }
}

const IN: Events = Events::IN;
const ET: Events = Events::ET;

/// Writes to a notifier whose inner item stays queued still re-arm an edge-triggered outer
/// epoll each time (`ep_poll_callback` → `ep_poll_safewake`), inner LT and ET.
#[test]
fn outer_edge_rearmed_by_every_write_while_inner_item_queued() {
    for inner in [IN, IN | ET] {
        use Step::*;
        compare(
            &format!("inner {inner:?}"),
            1,
            2,
            &[
                AddN {
                    ep: 0,
                    n: 0,
                    ev: inner,
                    data: 1,
                },
                Write(0, 1),
                Write(0, 1), // the inner item is queued: a write with nothing to do
                AddE {
                    ep: 1,
                    child: 0,
                    ev: IN | ET,
                    data: 2,
                },
                Wait(1, 4),
                Wait(1, 4),
                Write(0, 1),
                Wait(1, 4),
                Write(0, 1),
                Write(0, 1),
                Wait(1, 4),
                Wait(1, 4),
                Wait(0, 4),
                Write(0, 1),
                Wait(1, 4),
                Read(0),
                Wait(0, 4),
                Wait(1, 4),
                Write(0, 1),
                Wait(1, 4),
                Wait(0, 4),
            ],
        );
    }
}

/// One notifier in two epolls, one level-triggered, one edge-triggered: harvesting one never
/// hides a write from the other.
#[test]
fn two_epolls_one_notifier() {
    use Step::*;
    compare(
        "two epolls",
        1,
        2,
        &[
            AddN {
                ep: 0,
                n: 0,
                ev: IN,
                data: 1,
            },
            AddN {
                ep: 1,
                n: 0,
                ev: IN | ET,
                data: 2,
            },
            Write(0, 1),
            Write(0, 1),
            Write(0, 1),
            Wait(1, 4),
            Wait(1, 4),
            Write(0, 1),
            Wait(0, 4),
            Wait(1, 4),
            Write(0, 1),
            Write(0, 1),
            Wait(1, 4),
            Read(0),
            Wait(0, 4),
            Wait(1, 4),
            Write(0, 1),
            Wait(1, 4),
            Wait(0, 4),
        ],
    );
}

/// A level-triggered item drained by reads between harvests, an edge-triggered one turned
/// level-triggered and back by `modify`, a delete and re-add: every state the settled mark
/// must follow.
#[test]
fn drains_modifies_and_readds() {
    use Step::*;
    compare(
        "drains",
        2,
        1,
        &[
            AddN {
                ep: 0,
                n: 0,
                ev: IN,
                data: 1,
            },
            AddN {
                ep: 0,
                n: 1,
                ev: IN | ET,
                data: 2,
            },
            Write(0, 1),
            Write(0, 1),
            Write(1, 1),
            Write(1, 1),
            Read(0),
            Wait(0, 4),
            Write(0, 1),
            Wait(0, 4),
            Wait(0, 1),
            Write(1, 1),
            ModN {
                ep: 0,
                n: 1,
                ev: IN,
                data: 3,
            },
            Write(1, 1),
            Wait(0, 4),
            Wait(0, 4),
            ModN {
                ep: 0,
                n: 1,
                ev: IN | ET,
                data: 4,
            },
            Write(1, 1),
            Wait(0, 4),
            Wait(0, 4),
            DelN { ep: 0, n: 0 },
            Write(0, 1),
            Wait(0, 4),
            AddN {
                ep: 0,
                n: 0,
                ev: IN | ET,
                data: 5,
            },
            Write(0, 1),
            Wait(0, 4),
            Read(0),
            Read(1),
            Wait(0, 4),
            Write(0, 1),
            Write(1, 1),
            Wait(0, 4),
        ],
    );
}

/// Long ready lists (the harvest's runs of level-triggered items, delivered in place and
/// requeued in one move): runs cut by an edge-triggered item, by a drained one, by a
/// deleted one and by the room of the wait, and the list's order kept across waits.
#[test]
fn long_ready_lists_cut_by_every_kind_of_item() {
    let n = 12;
    let mut steps = Vec::new();
    for i in 0..n {
        let ev = if i % 5 == 3 {
            Events::IN | Events::ET
        } else {
            Events::IN
        };
        steps.push(Step::AddN {
            ep: 0,
            n: i,
            ev,
            data: 100 + i as u64,
        });
        if i % 4 != 2 {
            steps.push(Step::Write(i, 1 + i as u64));
        }
    }
    for max in [5, 3, 12, 1, 7] {
        steps.push(Step::Wait(0, max));
    }
    // Drain one in the middle of the list, delete another, write to an edge-triggered one.
    steps.push(Step::Read(5));
    steps.push(Step::DelN { ep: 0, n: 7 });
    steps.push(Step::Write(3, 1));
    steps.push(Step::Write(2, 4));
    for max in [4, 12, 2, 12, 12] {
        steps.push(Step::Wait(0, max));
    }
    // Drain everything but one, then refill in reverse order.
    for i in 0..n - 1 {
        if i != 7 {
            steps.push(Step::Read(i));
        }
    }
    for max in [3, 12] {
        steps.push(Step::Wait(0, max));
    }
    for i in (0..n).rev() {
        if i != 7 {
            steps.push(Step::Write(i, 2));
        }
    }
    for max in [6, 6, 12, 12] {
        steps.push(Step::Wait(0, max));
    }
    compare("long_ready_lists", n, 1, &steps);
}
