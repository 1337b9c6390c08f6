//! The adaptive spin before a blocking wait parks: [`SpinGauge`], one wait site's learned
//! budget (an epoll, a notifier, a shared notifier's blocking calls), and [`Spin`], one
//! wait's spin against that budget and what it tells the gauge at the end ([`WaitEnd`]).
//!
//! Used by the blocking wait of `super::thread` (step 1 of its protocol) and by the shared
//! notifier's futex wait (`shared::protocol`), which learn with the same rules. The spin
//! polls a caller's lock-free probe: it takes no lock and registers nothing, so a state
//! change that lands while it spins costs its waker nothing.
//!
//! # LOCKING
//!
//! None: the gauge is two relaxed atomics (racing updates lose a sample, which a heuristic
//! can afford) and a spin is owned by one waiting thread.

use std::time::{Duration, Instant};

use crate::loom::sync::atomic::{AtomicU32, Ordering::Relaxed};
use crate::loom::thread;

/// No CPU recorded.
pub(crate) const NO_CPU: u32 = u32::MAX;

/// The CPU the calling thread runs on (no syscall), or `NO_CPU`.
pub(crate) fn current_cpu() -> u32 {
    #[cfg(not(evfd_loom))]
    {
        crate::sys::cpu::current().unwrap_or(NO_CPU)
    }
    #[cfg(evfd_loom)]
    {
        NO_CPU
    }
}

/// The longest adaptive spin. A blocking cross-CPU wake costs ~25 µs on small VMs whose idle
/// vCPUs halt at once; a spin that outlasts one such hop catches a partner that answers
/// after its own wake-up.
const SPIN_MAX_NS: u32 = 50_000;
/// Parked waits (woken from another CPU) shorter than this suggest that spinning would pay:
/// in a blocking ping-pong each wait is the partner's wake-up hop, its work, and our own
/// hop, so ~2 hops; spinning saves our hop and, once the partner spins too, both.
const SPIN_OBSERVE_NS: u32 = 250_000;
/// Failed spins in a row (the wait parked anyway) before the site stops spinning.
const SPIN_MISSES: u32 = 3;
/// Parked waits after giving up before the site tries spinning again.
const SPIN_REST: u32 = 16;
/// A spin longer than this gives the CPU away once per this much (`sched_yield`), so that a
/// spinning waiter does not keep a runnable producer off its CPU; a wake that comes sooner
/// costs no syscall on either side.
const SPIN_YIELD_EVERY: Duration = Duration::from_micros(4);
/// A `sched_yield` that took this long ran someone else: the CPU is wanted, stop spinning.
const SPIN_YIELD_STOLEN: Duration = Duration::from_micros(20);
/// The shortest adaptive spin once spinning has paid off.
const SPIN_MIN_NS: u32 = 2_000;

/// How long one wait site (an epoll, a notifier) spins before parking, learned from its
/// recent waits:
///
/// * a wait that spinning satisfied after `t` keeps the budget at least `4t` (never below
///   [`SPIN_MIN_NS`]), lets it shrink by 1/8 towards that, and clears the misses;
/// * a wait that spun its whole budget and parked anyway is a miss; [`SPIN_MISSES`] in a
///   row stop the spinning for the next [`SPIN_REST`] parked waits;
/// * a wait that did not spin, parked, and was woken from another CPU within
///   [`SPIN_OBSERVE_NS`] (after the rest, if any) starts spinning at [`SPIN_MAX_NS`];
/// * a wait woken from the CPU it parked on stops the spinning: the waker could not run
///   while it spun (both pinned to one CPU, or a 1-CPU machine);
/// * a timeout halves the budget.
///
/// It starts at 0: a site spins only after a parked wait showed that wakes come from
/// another CPU soon enough. Updates are plain loads and stores: racing updates lose a
/// sample, which a heuristic can afford.
#[derive(Debug, Default)]
pub(crate) struct SpinGauge {
    /// The budget in ns (0 = park at once).
    budget: AtomicU32,
    /// Failed spins in a row while `budget > 0`; parked waits left to rest while it is 0.
    count: AtomicU32,
}

/// How a wait ended, for [`SpinGauge::learn`].
#[derive(Debug, Clone, Copy)]
pub(crate) enum WaitEnd {
    /// Satisfied while spinning, `ns` after the spin began.
    Spun { ns: u32 },
    /// Satisfied after parking, `ns` after the wait began; `here`: woken from the CPU it
    /// parked on.
    Parked { ns: u32, here: bool },
    /// Timed out.
    TimedOut,
}

impl SpinGauge {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The current budget in ns (0 = park at once).
    pub(crate) fn budget_ns(&self) -> u32 {
        self.budget.load(Relaxed)
    }

    pub(crate) fn learn(&self, end: WaitEnd) {
        let b = self.budget.load(Relaxed);
        let c = self.count.load(Relaxed);
        let (nb, nc) = match end {
            WaitEnd::Spun { ns } => (
                (b - b / 8)
                    .max(ns.saturating_mul(4))
                    .clamp(SPIN_MIN_NS, SPIN_MAX_NS),
                0,
            ),
            WaitEnd::Parked { here: true, .. } => (0, 0),
            WaitEnd::Parked { .. } if b > 0 && c + 1 >= SPIN_MISSES => (0, SPIN_REST),
            WaitEnd::Parked { .. } if b > 0 => (b, c + 1),
            WaitEnd::Parked { .. } if c > 0 => (0, c - 1),
            WaitEnd::Parked { ns, .. } if ns < SPIN_OBSERVE_NS => (SPIN_MAX_NS, 0),
            WaitEnd::Parked { .. } => (0, 0),
            WaitEnd::TimedOut => (b / 2, c),
        };
        if nb != b {
            self.budget.store(nb, Relaxed);
        }
        if nc != c {
            self.count.store(nc, Relaxed);
        }
    }
}

/// Where a wait's spin budget comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SpinPlan {
    /// Learned: the [`SpinGauge`]'s budget now (ns); the wait teaches it how it ended.
    Adaptive(u32),
    /// A fixed budget in ns (0: never spin), nothing learned.
    Fixed(u64),
}

/// One wait's spin: its budget and clock, and what it tells the gauge at the end.
#[derive(Debug)]
pub(crate) struct Spin {
    adaptive: bool,
    budget_ns: u32,
    /// When the spin (or, if it never spun, the park) began.
    start: Option<Instant>,
    /// The CPU this thread parked on.
    cpu: u32,
}

impl Spin {
    pub(crate) fn new(plan: SpinPlan) -> Self {
        let (adaptive, budget_ns) = match plan {
            SpinPlan::Adaptive(ns) => (true, ns),
            SpinPlan::Fixed(ns) => (false, u32::try_from(ns).unwrap_or(u32::MAX)),
        };
        Spin {
            adaptive,
            budget_ns,
            start: None,
            cpu: NO_CPU,
        }
    }

    fn elapsed_ns(&self) -> u32 {
        self.start.map_or(0, |s| {
            u32::try_from(s.elapsed().as_nanos()).unwrap_or(u32::MAX)
        })
    }

    /// Spin until `ready()` holds, the budget is spent or `deadline` passes, polling a cheap
    /// readiness probe (no lock, no registration). Returns whether `ready()` held. The budget
    /// counts from the first call, so a wait that spins again after a stale `ready` does not
    /// spin longer in total.
    pub(crate) fn spin(
        &mut self,
        deadline: Option<Instant>,
        mut ready: impl FnMut() -> bool,
    ) -> bool {
        #[cfg(evfd_loom)]
        {
            let _ = (deadline, &mut ready);
            false
        }
        #[cfg(not(evfd_loom))]
        {
            if self.budget_ns == 0 {
                return false;
            }
            let now = Instant::now();
            let start = *self.start.get_or_insert(now);
            let mut limit = start + Duration::from_nanos(u64::from(self.budget_ns));
            if let Some(d) = deadline {
                limit = limit.min(d);
            }
            // Checked on entry too: a probe that keeps saying "ready" while the operation
            // keeps failing (others take what it sees) must not keep the wait here past its
            // budget or deadline.
            if now >= limit {
                self.budget_ns = 0;
                return false;
            }
            let mut i = 0u32;
            let mut next_yield = start + SPIN_YIELD_EVERY;
            loop {
                if ready() {
                    return true;
                }
                std::hint::spin_loop();
                i = i.wrapping_add(1);
                if i % 32 == 0 {
                    let now = Instant::now();
                    if now >= limit {
                        self.budget_ns = 0;
                        return false;
                    }
                    if now >= next_yield {
                        // Let a thread that waits for this CPU run (the producer we wait for,
                        // on a machine with fewer CPUs than busy threads). With nothing else
                        // runnable here it returns at once; if it did not, the CPU is
                        // oversubscribed and spinning only competes for it: stop, and park
                        // (the gauge counts it as a miss).
                        thread::yield_now();
                        let after = Instant::now();
                        if after - now >= SPIN_YIELD_STOLEN {
                            self.budget_ns = 0;
                            return false;
                        }
                        next_yield = after + SPIN_YIELD_EVERY;
                    }
                }
            }
        }
    }

    /// About to park: note where and (if no spin started the clock) when.
    pub(crate) fn before_park(&mut self) {
        if self.adaptive {
            #[cfg(not(evfd_loom))]
            self.start.get_or_insert_with(Instant::now);
            self.cpu = current_cpu();
        }
    }

    /// How a wait that spinning satisfied ended.
    pub(crate) fn spun(&self) -> WaitEnd {
        WaitEnd::Spun {
            ns: self.elapsed_ns(),
        }
    }

    /// How a parked wait ended: `claimed` by a wake from CPU `from`, or not (timed out).
    pub(crate) fn parked(&self, claimed: bool, from: u32) -> WaitEnd {
        if claimed {
            WaitEnd::Parked {
                ns: self.elapsed_ns(),
                here: from != NO_CPU && from == self.cpu,
            }
        } else {
            WaitEnd::TimedOut
        }
    }

    /// Teach the wait site's gauge (if it has one) how the wait ended (adaptive waits
    /// only).
    pub(crate) fn learn(&self, gauge: Option<&SpinGauge>, end: WaitEnd) {
        if self.adaptive {
            if let Some(g) = gauge {
                g.learn(end);
            }
        }
    }
}

#[cfg(all(test, not(evfd_loom)))]
mod tests {
    use super::*;

    fn parked(g: &SpinGauge, ns: u32, here: bool) {
        g.learn(WaitEnd::Parked { ns, here });
    }

    /// The gauge's rules, one by one: start off; a short cross-CPU park starts the spin; a
    /// success keeps it; misses stop it and a rest delays the retry; a wake from the
    /// waiter's own CPU stops it; long parks never start it.
    #[test]
    fn spin_gauge_learns() {
        let g = SpinGauge::new();
        assert_eq!(g.budget_ns(), 0, "starts off");
        parked(&g, SPIN_OBSERVE_NS + 1, false);
        assert_eq!(g.budget_ns(), 0, "a long wait does not start it");
        parked(&g, 50_000, false);
        assert_eq!(
            g.budget_ns(),
            SPIN_MAX_NS,
            "a short cross-CPU wait starts it"
        );
        g.learn(WaitEnd::Spun { ns: 300 });
        let b = g.budget_ns();
        assert!(
            (SPIN_MIN_NS..=SPIN_MAX_NS).contains(&b),
            "a success keeps it: {b}"
        );
        for _ in 0..SPIN_MISSES - 1 {
            parked(&g, 60_000, false);
            assert!(g.budget_ns() > 0, "fewer misses than the limit keep it");
        }
        parked(&g, 60_000, false);
        assert_eq!(g.budget_ns(), 0, "{SPIN_MISSES} misses in a row stop it");
        for _ in 0..SPIN_REST {
            parked(&g, 10_000, false);
            assert_eq!(g.budget_ns(), 0, "resting");
        }
        parked(&g, 10_000, false);
        assert_eq!(
            g.budget_ns(),
            SPIN_MAX_NS,
            "after the rest a short wait restarts it"
        );
        parked(&g, 10_000, true);
        assert_eq!(
            g.budget_ns(),
            0,
            "a wake from the waiter's own CPU stops it"
        );
        parked(&g, 10_000, false);
        g.learn(WaitEnd::TimedOut);
        assert_eq!(g.budget_ns(), SPIN_MAX_NS / 2, "a timeout halves it");
    }

    /// A probe that keeps saying "ready" (while the operation keeps failing) does not keep a
    /// wait spinning: each call re-checks the budget, so the caller's loop ends.
    #[test]
    #[cfg_attr(miri, ignore = "spins on the clock")]
    fn always_ready_probe_still_ends() {
        let mut s = Spin::new(SpinPlan::Fixed(1_000_000));
        let deadline = Instant::now() + Duration::from_millis(2);
        let mut calls = 0u64;
        while s.spin(Some(deadline), || true) {
            calls += 1;
            assert!(calls < 100_000_000, "the spin never ended");
        }
        assert!(calls > 0);
    }

    /// A spin never outlasts the deadline, whatever its budget: a 4.3 s budget against a
    /// 2 ms deadline comes back (the bound below is a hang check, far above the deadline;
    /// the spin may also end sooner, when a `sched_yield` shows the CPU is wanted).
    #[test]
    #[cfg_attr(miri, ignore = "a 2 ms spin is minutes under Miri")]
    fn spin_stops_at_the_deadline() {
        let mut s = Spin::new(SpinPlan::Fixed(u64::from(u32::MAX)));
        let t0 = Instant::now();
        let deadline = t0 + Duration::from_millis(2);
        assert!(!s.spin(Some(deadline), || false));
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "spun past the deadline"
        );
        assert!(
            !s.spin(None, || true),
            "the budget is spent: no second spin"
        );
    }
}
