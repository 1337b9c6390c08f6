//! The adaptive spin before a blocking wait parks: [`SpinGauge`], one wait site's learned
//! budget (an epoll, a notifier, a shared notifier's blocking calls), and [`Spin`], one
//! wait's spin against that budget and what it tells the gauge at the end ([`WaitEnd`]).
//!
//! Used by the blocking wait of `super::thread` (step 1 of its protocol) and by the shared
//! notifier's futex wait (`shared::protocol`, one gauge per process and notifier), which
//! learn with the same rules. The spin
//! polls a caller's lock-free probe: it takes no lock and registers nothing, so a state
//! change that lands while it spins costs its waker nothing.
//!
//! # The policy: spin only while spinning pays
//!
//! A spin pays when the peer it waits for is running on another CPU and answers within the
//! budget: then neither side makes a syscall and the hand-off costs a few cache-line moves
//! instead of a futex wake (~25 µs on VMs whose idle vCPUs halt). It stops paying the
//! moment the peer is not on a CPU — descheduled by a co-tenant (a vCPU thread that never
//! sleeps, a busy service), or waiting for the very CPU the spinner holds. Then every µs
//! spun is taken from the thread the spinner waits for, or from its neighbour. So:
//!
//! * **No `sched_yield`, ever.** Under EEVDF a yield with a runnable co-tenant gives that
//!   co-tenant the rest of a slice (milliseconds) — a spin of a few µs became a wait of a
//!   slice. The spin polls memory and the clock only; no syscall per iteration or per batch.
//! * **Preemption ends the spin.** Every [`SPIN_BATCH`] probes the spin reads the clock (a
//!   vDSO read). A gap between two reads longer than [`SPIN_PREEMPTED`] — a batch takes
//!   ~1 µs — means this thread was off its CPU meanwhile: something else wanted the CPU.
//!   The spin takes one last look and stops ([`WaitEnd::Preempted`]), fixed or adaptive.
//! * **Failures turn the site's spin off, successes keep it.** A wait that spinning
//!   satisfied keeps the budget (at least 4× what it took); [`SPIN_MISSES`] spins in a row
//!   that ran out their budget, or one preempted spin, set the budget to 0 for a rest of
//!   parked waits, [`SPIN_REST`] at first and doubling with each failure that follows a
//!   rest (up to [`SPIN_REST`] · 2^[`SPIN_LEVELS`] = 1 024 waits); each success halves it
//!   back. On a machine where spinning keeps failing the site probes once per ~1 000
//!   waits: at most one budget (50 µs) lost per 1 000 parked waits.
//! * **A wake from the waiter's own CPU turns it off, as a failure.** The waker could not
//!   run while the waiter spun (both pinned to one CPU, a 1-CPU machine, or two threads or
//!   processes the scheduler put on one CPU because a co-tenant keeps the other busy). It
//!   starts a rest like any failure, and while the spin is off such wakes count down the
//!   rest and never start the spin: under a co-tenant the pair shares one CPU most of the
//!   time and meets across CPUs only now and then, and each such meeting used to restart
//!   the spin at once (a wake from its own CPU ended the rest). The waker leaves
//!   its CPU where the waiter finds it: in the waiter's entry in-process, in an advisory
//!   word of the shared region across processes (`shared::protocol`).
//! * **Only waits that could have spun teach.** Every caller tries the operation once
//!   before it spins; a call that succeeds at once is no success of spinning (counted as
//!   one, it would clear the misses of the spins that failed: in a ping-pong sharing one
//!   CPU every other read finds its answer already there).
//! * **Bounded.** A spin never outlasts its budget ([`SPIN_MAX_NS`] for the adaptive one)
//!   nor the wait's deadline.
//!
//! The knobs are the constants below: [`SPIN_MAX_NS`] (50 µs, the longest adaptive spin
//! and where a restart begins), [`SPIN_MIN_NS`] (2 µs, the shortest once spinning paid),
//! [`SPIN_OBSERVE_NS`] (250 µs: a parked wait shorter than this, woken from another CPU,
//! turns spinning on), [`SPIN_MISSES`] (3), [`SPIN_REST`] (16 parked waits) and
//! [`SPIN_LEVELS`] (6 doublings), [`SPIN_BATCH`] (32 probes per clock read) and
//! [`SPIN_PREEMPTED`] (a 20 µs gap). The user's only one is `Epoll::set_spin` (a fixed
//! budget for that epoll, or 0 for none; a fixed spin still stops when preempted, and
//! learns nothing). `docs/design.md` (the spin) tells the story with the figures.
//!
//! # LOCKING
//!
//! None: the gauge is two relaxed atomics (racing updates lose a sample, which a heuristic
//! can afford) and a spin is owned by one waiting thread.

use std::time::{Duration, Instant};

use crate::loom::sync::atomic::{AtomicU32, Ordering::Relaxed};

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
pub(crate) const SPIN_MISSES: u32 = 3;
/// Parked waits after the first failure before the site tries spinning again; doubled by
/// each failure after a rest, up to [`SPIN_LEVELS`] times.
const SPIN_REST: u32 = 16;
/// How many times the rest can double: 16 · 2^6 = 1 024 parked waits.
const SPIN_LEVELS: u32 = 6;
/// Probes between two clock reads of a spin (~1 µs of spinning).
const SPIN_BATCH: u32 = 32;
/// A gap this long between two clock reads of a spin means the thread was off its CPU
/// (preempted, or its vCPU descheduled by the host): 20× a batch's time, and longer than a
/// timer tick's handling.
const SPIN_PREEMPTED: Duration = Duration::from_micros(20);
/// The shortest adaptive spin once spinning has paid off.
const SPIN_MIN_NS: u32 = 2_000;

/// The low half of [`SpinGauge::count`]: misses or rest; the high half: the rest's level,
/// and [`HERE`].
const COUNT_MASK: u32 = 0xffff;
/// In [`SpinGauge::count`]: the last parked wait was woken from the CPU it parked on.
const HERE: u32 = 1 << 31;

/// How long one wait site (an epoll, a notifier) spins before parking, learned from its
/// recent waits (the module docs give the why):
///
/// * a wait that spinning satisfied after `t` keeps the budget at least `4t` (never below
///   [`SPIN_MIN_NS`]), lets it shrink by 1/8 towards that, clears the misses and lowers the
///   rest's level by one;
/// * a wait that spun its whole budget and parked anyway is a miss; [`SPIN_MISSES`] in a
///   row are a failure;
/// * a wait whose spin was preempted ([`WaitEnd::Preempted`]) is a failure at once;
/// * a failure stops the spinning for the next `SPIN_REST << level` parked waits and
///   raises the level (at most [`SPIN_LEVELS`]);
/// * a wait that did not spin, parked, and was woken from another CPU within
///   [`SPIN_OBSERVE_NS`] (after the rest, if any) starts spinning at [`SPIN_MAX_NS`];
/// * a wait woken from the CPU it parked on is a failure if it spun (the waker could not
///   run while it spun: both pinned to one CPU, a 1-CPU machine, or two threads the
///   scheduler put together beside a co-tenant); if it did not, it counts as a parked wait
///   of the rest and never starts the spin;
/// * a timeout halves the budget.
///
/// It starts at 0: a site spins only after a parked wait showed that wakes come from
/// another CPU soon enough. Updates are plain loads and stores: racing updates lose a
/// sample, which a heuristic can afford.
#[derive(Debug, Default)]
pub(crate) struct SpinGauge {
    /// The budget in ns (0 = park at once).
    budget: AtomicU32,
    /// Low 16 bits: failed spins in a row while `budget > 0`, parked waits left to rest
    /// while it is 0. High 16 bits: the rest's level (failures since the last success).
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
    /// The spin saw this thread lose its CPU for a while ([`SPIN_PREEMPTED`]), whether or
    /// not the wait then succeeded: the CPU is contended, spinning competes for it.
    Preempted,
}

impl SpinGauge {
    pub(crate) fn new() -> Self {
        Self::default()
    }

    /// The current budget in ns (0 = park at once).
    pub(crate) fn budget_ns(&self) -> u32 {
        self.budget.load(Relaxed)
    }

    /// Whether a park should be timed: not while the last parked wait was woken from its own
    /// CPU (a pair sharing one CPU, where a wake from another CPU is the exception): the
    /// length of such a wait teaches nothing, and the two clock reads are a tenth of a
    /// one-CPU hand-off's own work. The first wake from another CPU is then untimed (it
    /// does not start the spin) and makes the next park timed.
    fn times_parks(&self) -> bool {
        self.count.load(Relaxed) & HERE == 0
    }

    /// Teach the gauge how a wait ended (the rules in the type docs).
    #[inline]
    pub(crate) fn learn(&self, end: WaitEnd) {
        // The steady state of a pair that shares one CPU: the spin is off, the rest is
        // over and the last parked wake came from the waiter's own CPU. Another such wake
        // changes nothing (the rule below gives back the same two words), so it costs two
        // loads here instead of the whole rule, on the path of every such hand-off.
        if let WaitEnd::Parked { here: true, .. } = end {
            if self.budget.load(Relaxed) == 0
                && self.count.load(Relaxed) & (HERE | COUNT_MASK) == HERE
            {
                return;
            }
        }
        self.learn_rule(end);
    }

    /// [`learn`](Self::learn)'s rule, out of line.
    #[inline(never)]
    fn learn_rule(&self, end: WaitEnd) {
        let b = self.budget.load(Relaxed);
        let c = self.count.load(Relaxed);
        let (n, level) = (c & COUNT_MASK, (c & !HERE) >> 16);
        // The last parked wake's `here`, kept unless this one is a parked wake.
        let here = match end {
            WaitEnd::Parked { here: true, .. } => HERE,
            WaitEnd::Parked { here: false, .. } => 0,
            _ => c & HERE,
        };
        let pack = |n: u32, level: u32| here | (level << 16) | n.min(COUNT_MASK);
        // A failure: off for a rest that doubles with each failure since the last success.
        let fail = (0, pack(SPIN_REST << level, (level + 1).min(SPIN_LEVELS)));
        let (nb, nc) = match end {
            WaitEnd::Spun { ns } => (
                (b - b / 8)
                    .max(ns.saturating_mul(4))
                    .clamp(SPIN_MIN_NS, SPIN_MAX_NS),
                pack(0, level.saturating_sub(1)),
            ),
            WaitEnd::Preempted => fail,
            // The waker ran on our CPU: it could not have answered while we spun. A failure
            // if we were spinning; a parked wait of the rest (or of the spin's being off)
            // otherwise, which never starts the spin and never ends a rest early.
            WaitEnd::Parked { here: true, .. } if b > 0 => fail,
            WaitEnd::Parked { here: true, .. } => (0, pack(n.saturating_sub(1), level)),
            WaitEnd::Parked { .. } if b > 0 && n + 1 >= SPIN_MISSES => fail,
            WaitEnd::Parked { .. } if b > 0 => (b, pack(n + 1, level)),
            WaitEnd::Parked { .. } if n > 0 => (0, pack(n - 1, level)),
            WaitEnd::Parked { ns, .. } if ns < SPIN_OBSERVE_NS => (SPIN_MAX_NS, pack(0, level)),
            WaitEnd::Parked { .. } => (0, pack(0, level)),
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
    /// The spin saw this thread off its CPU ([`SPIN_PREEMPTED`]).
    preempted: bool,
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
            preempted: false,
        }
    }

    fn elapsed_ns(&self) -> u32 {
        self.start.map_or(0, |s| {
            u32::try_from(s.elapsed().as_nanos()).unwrap_or(u32::MAX)
        })
    }

    /// Spin until `ready()` holds, the budget is spent, `deadline` passes or the thread is
    /// seen to have been off its CPU (then one last look), polling a cheap readiness probe
    /// (no lock, no registration, no syscall). Returns whether `ready()` held. The budget
    /// counts from the first call, so a wait that spins again after a stale `ready` does not
    /// spin longer in total; a preempted spin does not spin again.
    // Inlined into every wait routine (their instruction counts: docs/handoff.md).
    #[inline(always)]
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
            let mut last = now;
            loop {
                if ready() {
                    return true;
                }
                std::hint::spin_loop();
                i = i.wrapping_add(1);
                if i % SPIN_BATCH == 0 {
                    let now = Instant::now();
                    if now - last >= SPIN_PREEMPTED {
                        // Off the CPU for a while: someone else wanted it (the peer we wait
                        // for, on a CPU short of room, or a co-tenant). Spinning on competes
                        // for it: one last look at what came meanwhile, then park.
                        self.preempted = true;
                        self.budget_ns = 0;
                        return ready();
                    }
                    if now >= limit {
                        self.budget_ns = 0;
                        return false;
                    }
                    last = now;
                }
            }
        }
    }

    /// About to park: note where and (if no spin started the clock, and the wait site's
    /// gauge times parks: [`SpinGauge::times_parks`]) when.
    pub(crate) fn before_park(&mut self, gauge: Option<&SpinGauge>) {
        if self.adaptive {
            #[cfg(not(evfd_loom))]
            if self.start.is_none() && gauge.map_or(true, SpinGauge::times_parks) {
                self.start = Some(Instant::now());
            }
            #[cfg(evfd_loom)]
            let _ = gauge;
            self.cpu = current_cpu();
        }
    }

    /// How a wait that spinning satisfied ended.
    pub(crate) fn spun(&self) -> WaitEnd {
        if self.preempted {
            return WaitEnd::Preempted;
        }
        WaitEnd::Spun {
            ns: self.elapsed_ns(),
        }
    }

    /// How a parked wait ended: `claimed` by a wake from CPU `from`, or not (timed out).
    /// A wait whose spin was preempted ends [`WaitEnd::Preempted`] either way.
    #[inline]
    pub(crate) fn parked(&self, claimed: bool, from: u32) -> WaitEnd {
        if self.preempted {
            WaitEnd::Preempted
        } else if claimed {
            WaitEnd::Parked {
                // Untimed (`before_park`): as long as a wait can be, which starts nothing.
                ns: self.start.map_or(u32::MAX, |_| self.elapsed_ns()),
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
        rest(&g, SPIN_REST);
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
        // ... as a failure: a rest (the second failure since the last success: twice as
        // long), which wakes from the waiter's own CPU count down and never cut short.
        for i in 0..SPIN_REST << 1 {
            parked(&g, 10_000, true);
            assert_eq!(g.budget_ns(), 0, "resting: wait {i}");
        }
        parked(&g, 10_000, true);
        assert_eq!(g.budget_ns(), 0, "a wake from its own CPU never starts it");
        parked(&g, 10_000, false);
        assert_eq!(
            g.budget_ns(),
            SPIN_MAX_NS,
            "after the rest a short wait restarts it"
        );
        g.learn(WaitEnd::TimedOut);
        assert_eq!(g.budget_ns(), SPIN_MAX_NS / 2, "a timeout halves it");
    }

    /// A park is not timed while the last parked wait was woken from its own CPU; such an
    /// untimed wait woken from another CPU starts nothing and makes the next park timed.
    #[test]
    fn parks_after_a_wake_from_the_own_cpu_are_not_timed() {
        let g = SpinGauge::new();
        let park = |g: &SpinGauge| {
            let mut s = Spin::new(SpinPlan::Adaptive(g.budget_ns()));
            s.before_park(Some(g));
            s
        };
        assert!(park(&g).start.is_some(), "timed at first");
        parked(&g, 10_000, true);
        let s = park(&g);
        assert!(s.start.is_none(), "untimed after a wake from its own CPU");
        let end = s.parked(true, NO_CPU);
        assert!(
            matches!(
                end,
                WaitEnd::Parked {
                    ns: u32::MAX,
                    here: false
                }
            ),
            "{end:?}"
        );
        g.learn(end);
        assert_eq!(g.budget_ns(), 0, "an untimed wait starts nothing");
        assert!(park(&g).start.is_some(), "timed again");
        parked(&g, 10_000, false);
        assert_eq!(
            g.budget_ns(),
            SPIN_MAX_NS,
            "and a short timed one starts it"
        );
    }

    /// `SPIN_REST`.. parked waits at budget 0, then the next short wait restarts the spin.
    fn rest(g: &SpinGauge, waits: u32) {
        for i in 0..waits {
            parked(g, 10_000, false);
            assert_eq!(g.budget_ns(), 0, "resting: wait {i} of {waits}");
        }
    }

    /// A preempted spin stops the site's spinning at once; failures after a rest double the
    /// rest up to `SPIN_REST << SPIN_LEVELS` parked waits; successes bring it back down.
    #[test]
    fn failures_back_off_and_successes_recover() {
        let g = SpinGauge::new();
        parked(&g, 10_000, false);
        assert_eq!(g.budget_ns(), SPIN_MAX_NS);
        g.learn(WaitEnd::Preempted);
        assert_eq!(g.budget_ns(), 0, "one preempted spin stops it");
        for level in 1..=SPIN_LEVELS + 1 {
            rest(&g, SPIN_REST << (level - 1).min(SPIN_LEVELS));
            parked(&g, 10_000, false);
            assert_eq!(g.budget_ns(), SPIN_MAX_NS, "probes again after the rest");
            g.learn(WaitEnd::Preempted);
        }
        // At the top level now: the longest rest, and no longer.
        rest(&g, SPIN_REST << SPIN_LEVELS);
        parked(&g, 10_000, false);
        assert_eq!(g.budget_ns(), SPIN_MAX_NS, "the rest is capped");
        // Successes bring the level down one each: after one, a failure rests half as long.
        g.learn(WaitEnd::Spun { ns: 1_000 });
        g.learn(WaitEnd::Preempted);
        rest(&g, SPIN_REST << (SPIN_LEVELS - 1));
        parked(&g, 10_000, false);
        assert_eq!(g.budget_ns(), SPIN_MAX_NS);
        // Misses count as a failure at the current level too.
        for _ in 0..SPIN_MISSES {
            parked(&g, 60_000, false);
        }
        assert_eq!(g.budget_ns(), 0);
        rest(&g, SPIN_REST << SPIN_LEVELS);
    }

    /// A spin that loses its CPU for longer than `SPIN_PREEMPTED` (here: a probe that
    /// sleeps once, which looks the same to the spin's clock) stops at once, long before its
    /// budget, and the wait reports `Preempted` however it ends.
    #[test]
    #[cfg_attr(miri, ignore = "spins on the clock")]
    fn a_preempted_spin_stops() {
        let mut s = Spin::new(SpinPlan::Adaptive(u32::MAX));
        let mut slept = false;
        let t0 = Instant::now();
        let got = s.spin(None, || {
            if !slept {
                slept = true;
                std::thread::sleep(SPIN_PREEMPTED * 5);
            }
            false
        });
        assert!(!got);
        assert!(
            t0.elapsed() < Duration::from_secs(1),
            "spun on after losing the CPU: {:?}",
            t0.elapsed()
        );
        assert!(
            !s.spin(None, || true),
            "a preempted spin does not spin again"
        );
        assert!(matches!(s.parked(true, NO_CPU), WaitEnd::Preempted));
        assert!(matches!(s.spun(), WaitEnd::Preempted));
        // The last look after the gap: what came meanwhile is taken.
        let mut s = Spin::new(SpinPlan::Fixed(u64::from(u32::MAX)));
        let mut calls = 0;
        assert!(s.spin(None, || {
            calls += 1;
            if calls == 1 {
                std::thread::sleep(SPIN_PREEMPTED * 5);
            }
            calls > SPIN_BATCH as usize
        }));
        assert!(matches!(s.spun(), WaitEnd::Preempted));
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
    /// the spin may also end sooner, when it sees it lost its CPU).
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
