//! The protocol's tests: heap words and a condition-variable OS (`heap`) for the unit tests
//! (`unit`, also under Miri) and the loom models (`loom`: two threads stand for the two
//! processes).

use super::*;

/// Heap words and a condition-variable OS, for unit tests, Miri and loom.
pub(crate) mod heap {
    use super::*;
    use crate::loom::sync::atomic::AtomicBool;
    use crate::loom::sync::Mutex;
    #[cfg(evfd_loom)]
    use ::loom::sync::Condvar;
    #[cfg(not(evfd_loom))]
    use std::sync::Condvar;

    pub(crate) struct HeapWords {
        pub(crate) magic: AtomicU64,
        pub(crate) meta: AtomicU64,
        pub(crate) count: AtomicU64,
        pub(crate) sleepers: AtomicU64,
        pub(crate) edges: AtomicU64,
        pub(crate) rseq: AtomicU32,
        pub(crate) wseq: AtomicU32,
        pub(crate) rslot: AtomicU32,
    }

    impl HeapWords {
        pub(crate) fn new() -> Self {
            HeapWords {
                magic: AtomicU64::new(0),
                meta: AtomicU64::new(0),
                count: AtomicU64::new(0),
                sleepers: AtomicU64::new(0),
                edges: AtomicU64::new(0),
                rseq: AtomicU32::new(0),
                wseq: AtomicU32::new(0),
                rslot: AtomicU32::new(0),
            }
        }
    }

    impl Words for std::sync::Arc<HeapWords> {
        fn magic(&self) -> &AtomicU64 {
            &self.magic
        }
        fn meta(&self) -> &AtomicU64 {
            &self.meta
        }
        fn count(&self) -> &AtomicU64 {
            &self.count
        }
        fn sleepers(&self) -> &AtomicU64 {
            &self.sleepers
        }
        fn edges(&self) -> &AtomicU64 {
            &self.edges
        }
        fn rseq(&self) -> &AtomicU32 {
            &self.rseq
        }
        fn wseq(&self) -> &AtomicU32 {
            &self.wseq
        }
        fn rslot(&self) -> &AtomicU32 {
            &self.rslot
        }
    }

    /// A futex is "check the word and sleep" atomically: here, under one mutex, with a
    /// condition variable per futex word, one for the sleep bell (a count of tokens) and one
    /// for the doorbell.
    pub(crate) struct CondOs {
        lock: Mutex<()>,
        readers: Condvar,
        writers: Condvar,
        sleep_cv: Condvar,
        /// The sleep bell's tokens.
        pub(crate) tokens: AtomicU64,
        /// Sleep-bell writes so far.
        pub(crate) bell_rings: AtomicU64,
        /// The rings of those made for a call that may wait ([`Wait::Allowed`]).
        pub(crate) waiting_rings: AtomicU64,
        bell_cv: Condvar,
        /// The doorbell's readability.
        pub(crate) bell: AtomicBool,
        pub(crate) rings: AtomicU64,
        pub(crate) drains: AtomicU64,
        pub(crate) wakes: AtomicU64,
        /// Doorbell pulses so far: an edge-triggered watch keeps each one it was registered
        /// for ([`CondOs::wait_pulse`]).
        pub(crate) pulses: AtomicU64,
    }

    impl CondOs {
        pub(crate) fn new() -> Self {
            CondOs {
                lock: Mutex::new(()),
                readers: Condvar::new(),
                writers: Condvar::new(),
                sleep_cv: Condvar::new(),
                tokens: AtomicU64::new(0),
                bell_rings: AtomicU64::new(0),
                waiting_rings: AtomicU64::new(0),
                bell_cv: Condvar::new(),
                bell: AtomicBool::new(false),
                rings: AtomicU64::new(0),
                drains: AtomicU64::new(0),
                wakes: AtomicU64::new(0),
                pulses: AtomicU64::new(0),
            }
        }

        fn cv(&self, which: Futex) -> &Condvar {
            match which {
                Futex::Readers => &self.readers,
                Futex::Writers => &self.writers,
            }
        }

        /// Sleep until the doorbell is readable (an epoll consumer's `epoll_wait`).
        #[cfg_attr(not(evfd_loom), allow(dead_code))]
        pub(crate) fn wait_bell(&self) {
            let mut g = crate::loom::lock(&self.lock);
            while !self.bell.load(SeqCst) {
                g = self.bell_cv.wait(g).unwrap();
            }
        }

        /// Sleep until a pulse after `seen` (the pulse count when the watch was registered,
        /// or at its last event): an async writer's edge-triggered epoll wait. The pulse
        /// count now.
        #[cfg_attr(not(evfd_loom), allow(dead_code))]
        pub(crate) fn wait_pulse(&self, seen: u64) -> u64 {
            let mut g = crate::loom::lock(&self.lock);
            loop {
                let now = self.pulses.load(SeqCst);
                if now != seen {
                    return now;
                }
                g = self.bell_cv.wait(g).unwrap();
            }
        }
    }

    impl Os for std::sync::Arc<CondOs> {
        fn futex_wait(
            &self,
            which: Futex,
            word: &AtomicU32,
            expected: u32,
            deadline: Option<Instant>,
        ) -> io::Result<Woke> {
            let g = crate::loom::lock(&self.lock);
            if word.load(SeqCst) != expected {
                return Ok(Woke::Maybe);
            }
            match deadline {
                None => drop(self.cv(which).wait(g).unwrap()),
                #[cfg(evfd_loom)]
                Some(_) => {
                    // loom has no clock: a timed wait may time out at once.
                    drop(g);
                    return Ok(Woke::TimedOut);
                }
                #[cfg(not(evfd_loom))]
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    let (_g, t) = self.cv(which).wait_timeout(g, left).unwrap();
                    if t.timed_out() {
                        return Ok(Woke::TimedOut);
                    }
                }
            }
            Ok(Woke::Maybe)
        }

        fn futex_wake(&self, which: Futex, _word: &AtomicU32, n: u32) {
            self.wakes.fetch_add(1, SeqCst);
            let _g = crate::loom::lock(&self.lock);
            if n == 1 {
                self.cv(which).notify_one();
            } else {
                self.cv(which).notify_all();
            }
        }

        fn bell_sleep(&self, deadline: Option<Instant>) -> io::Result<Woke> {
            let mut g = crate::loom::lock(&self.lock);
            while self.tokens.load(SeqCst) == 0 {
                match deadline {
                    None => g = self.sleep_cv.wait(g).unwrap(),
                    // loom has no clock: a timed wait may time out at once.
                    #[cfg(evfd_loom)]
                    Some(_) => return Ok(Woke::TimedOut),
                    #[cfg(not(evfd_loom))]
                    Some(d) => {
                        let left = d.saturating_duration_since(Instant::now());
                        let (g2, t) = self.sleep_cv.wait_timeout(g, left).unwrap();
                        g = g2;
                        if t.timed_out() && self.tokens.load(SeqCst) == 0 {
                            return Ok(Woke::TimedOut);
                        }
                    }
                }
            }
            // A read takes every token.
            self.tokens.store(0, SeqCst);
            drop(g);
            Ok(Woke::Maybe)
        }

        fn bell_ring(&self, wait: Wait) {
            self.bell_rings.fetch_add(1, SeqCst);
            if wait == Wait::Allowed {
                self.waiting_rings.fetch_add(1, SeqCst);
            }
            let _g = crate::loom::lock(&self.lock);
            self.tokens.fetch_add(1, SeqCst);
            self.sleep_cv.notify_all();
        }

        fn ring(&self) {
            self.rings.fetch_add(1, SeqCst);
            let _g = crate::loom::lock(&self.lock);
            self.bell.store(true, SeqCst);
            self.bell_cv.notify_all();
        }

        fn drain(&self) {
            self.drains.fetch_add(1, SeqCst);
            let _g = crate::loom::lock(&self.lock);
            self.bell.store(false, SeqCst);
        }

        fn pulse(&self) {
            let _g = crate::loom::lock(&self.lock);
            self.pulses.fetch_add(1, SeqCst);
            self.bell_cv.notify_all();
        }

        fn backoff(&self, _deadline: Option<Instant>) {
            #[cfg(evfd_loom)]
            ::loom::thread::yield_now();
            #[cfg(not(evfd_loom))]
            std::thread::yield_now();
        }
    }

    pub(crate) type HeapProtocol = Protocol<std::sync::Arc<HeapWords>, std::sync::Arc<CondOs>>;

    /// Two "processes" over one region: each has its own `Protocol` (as each process has
    /// its own mapping) over the same words and OS.
    pub(crate) fn pair(mode: Mode, initial: u64) -> (HeapProtocol, HeapProtocol) {
        let words = std::sync::Arc::new(HeapWords::new());
        let os = std::sync::Arc::new(CondOs::new());
        let a = Protocol::init(
            std::sync::Arc::clone(&words),
            std::sync::Arc::clone(&os),
            mode,
            initial,
        );
        let b = Protocol::attach(words, os, mode);
        (a, b)
    }
}

#[cfg(not(evfd_loom))]
mod unit {
    use super::heap::{pair, HeapProtocol};
    use super::*;
    use crate::mode::LIMIT;
    use std::sync::Arc;
    use std::time::Duration;

    #[test]
    fn header_round_trip_and_refusals() {
        for m in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
            assert_eq!(parse_header(MAGIC, meta(m)).unwrap(), m);
        }
        let bad = |magic, meta| parse_header(magic, meta).unwrap_err().kind();
        assert_eq!(bad(0, meta(Mode::Counter)), io::ErrorKind::InvalidData);
        assert_eq!(
            bad(MAGIC, meta(Mode::Counter) + 1),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            bad(MAGIC, meta(Mode::Counter) | 3 << 16),
            io::ErrorKind::InvalidData
        );
        assert_eq!(
            bad(MAGIC, meta(Mode::Counter) + (1 << 32)),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    fn eventfd_semantics_each_mode() {
        let (a, b) = pair(Mode::Counter, 0);
        assert_eq!(a.try_read().unwrap_err().kind(), io::ErrorKind::WouldBlock);
        a.try_write(3).unwrap();
        b.try_write(4).unwrap();
        assert_eq!(b.try_read().unwrap(), 7);
        assert_eq!(
            a.try_write(u64::MAX).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        a.try_write(LIMIT).unwrap();
        assert_eq!(
            a.try_write(1).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(
            a.try_write(u64::MAX).unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(b.readiness(), Events::IN);
        assert_eq!(a.count(), LIMIT);

        let (s, t) = pair(Mode::Semaphore, 2);
        assert_eq!(s.try_read().unwrap(), 1);
        assert_eq!(t.try_read().unwrap(), 1);
        assert_eq!(t.try_read().unwrap_err().kind(), io::ErrorKind::WouldBlock);

        let (r, q) = pair(Mode::AutoReset, 5);
        assert_eq!(q.deliver().unwrap(), Events::IN | Events::OUT);
        assert_eq!(r.count(), 0);
        assert_eq!(q.deliver().unwrap(), Events::OUT);
        let (c, _) = pair(Mode::Counter, 5);
        assert_eq!(c.deliver().unwrap(), Events::IN | Events::OUT);
        assert_eq!(c.count(), 5);
    }

    #[test]
    fn no_wake_work_while_nobody_sleeps() {
        let (a, b) = pair(Mode::Counter, 0);
        for _ in 0..100 {
            a.try_write(1).unwrap();
            b.try_read().unwrap();
        }
        assert_eq!(a.os.wakes.load(SeqCst), 0);
        assert_eq!(a.os.rings.load(SeqCst) + a.os.drains.load(SeqCst), 0);
    }

    #[test]
    fn blocking_read_and_write_across_the_pair() {
        let (a, b) = pair(Mode::Semaphore, 0);
        let a = Arc::new(a);
        let a2 = Arc::clone(&a);
        let t = std::thread::spawn(move || (0..3).map(|_| a2.read(None).unwrap()).sum::<u64>());
        std::thread::sleep(Duration::from_millis(5));
        b.try_write(3).unwrap();
        assert_eq!(t.join().unwrap(), 3);

        let (c, d) = pair(Mode::Counter, LIMIT);
        let c = Arc::new(c);
        let c2 = Arc::clone(&c);
        let t = std::thread::spawn(move || c2.write(5, None));
        std::thread::sleep(Duration::from_millis(5));
        assert_eq!(d.try_read().unwrap(), LIMIT);
        t.join().unwrap().unwrap();
        assert_eq!(c.count(), 5);
        assert_eq!(c.sleepers(), (0, 0, 0));
    }

    #[test]
    fn timeout_is_timed_out_and_leaves_no_sleeper() {
        let (a, _b) = pair(Mode::Counter, 0);
        let d = Instant::now() + Duration::from_millis(3);
        assert_eq!(a.read(Some(d)).unwrap_err().kind(), io::ErrorKind::TimedOut);
        assert_eq!(a.sleepers(), (0, 0, 0));
    }

    #[test]
    fn bell_mirrors_count_while_armed() {
        let (a, b) = pair(Mode::Semaphore, 0);
        a.arm_bell();
        assert!(!a.os.bell.load(SeqCst));
        b.try_write(2).unwrap();
        assert!(a.os.bell.load(SeqCst));
        b.try_write(1).unwrap(); // not an edge: no syscall
        assert_eq!(a.os.rings.load(SeqCst), 1);
        a.try_read().unwrap();
        a.try_read().unwrap();
        assert!(a.os.bell.load(SeqCst));
        a.try_read().unwrap();
        assert!(!a.os.bell.load(SeqCst));
        a.disarm_bell();
        b.try_write(1).unwrap();
        assert!(!a.os.bell.load(SeqCst), "no consumer: no ring");
    }

    /// An edge-only consumer alone: one ring per fill (0 → positive), none for a write to
    /// a positive count, no drain ever; unregistered, writes ring nothing.
    #[test]
    fn edge_consumer_rings_each_fill_and_never_drains() {
        let (a, b) = pair(Mode::AutoReset, 0);
        a.arm_edge_bell();
        assert_eq!((a.edge_bells(), a.sleepers()), (1, (0, 0, 0)));
        assert_eq!(
            a.os.rings.load(SeqCst),
            0,
            "count 0 at registration: no ring"
        );
        for round in 1..=5 {
            b.try_write(1).unwrap();
            b.try_write(2).unwrap(); // not a fill
            assert_eq!(a.os.rings.load(SeqCst), round);
            assert!(a.deliver().unwrap().contains(Events::IN));
            assert_eq!(a.os.drains.load(SeqCst), 0);
            assert!(a.os.bell.load(SeqCst), "never drained");
        }
        // A blocking write's first try (the inlined wake) rings too.
        b.write(1, None).unwrap();
        assert_eq!(a.os.rings.load(SeqCst), 6);
        assert_eq!(b.try_read().unwrap(), 1);
        a.disarm_edge_bell();
        assert_eq!(a.edge_bells(), 0);
        b.try_write(1).unwrap();
        assert_eq!(a.os.rings.load(SeqCst), 6, "nobody registered: no ring");
    }

    /// An edge-only consumer registering while the count is positive gets a ring at once.
    #[test]
    fn edge_consumer_registering_on_a_positive_count_is_rung() {
        let (a, b) = pair(Mode::Counter, 3);
        a.arm_edge_bell();
        assert_eq!(a.os.rings.load(SeqCst), 1);
        assert_eq!(b.try_read().unwrap(), 3);
        assert_eq!(a.os.drains.load(SeqCst), 0);
    }

    /// Level and edge-only consumers together: the level invariant holds after every step
    /// (the doorbell readable iff the count is positive), each fill rings once (the level
    /// sync's ring serves the edge-only consumer too), and the level consumer leaving
    /// turns the drains off.
    #[test]
    fn level_and_edge_consumers_together() {
        let (a, b) = pair(Mode::Semaphore, 0);
        a.arm_edge_bell();
        b.arm_bell();
        let level = |p: &HeapProtocol| assert_eq!(p.os.bell.load(SeqCst), p.count() > 0);
        level(&a);
        let drains0 = a.os.drains.load(SeqCst);
        for round in 1..=3 {
            b.try_write(2).unwrap();
            level(&a);
            assert_eq!(a.os.rings.load(SeqCst), round, "one ring per fill");
            a.try_read().unwrap();
            level(&a);
            a.try_read().unwrap();
            level(&a);
            assert_eq!(a.os.drains.load(SeqCst), drains0 + round);
        }
        // A second edge-only consumer registering on a positive count rings; the level
        // consumer's doorbell stays right.
        b.try_write(1).unwrap();
        b.arm_edge_bell();
        level(&a);
        a.try_read().unwrap();
        level(&a);
        b.disarm_bell();
        let drains = a.os.drains.load(SeqCst);
        b.try_write(1).unwrap();
        a.try_read().unwrap();
        assert_eq!(a.os.drains.load(SeqCst), drains, "edge-only left: no drain");
        assert!(a.os.bell.load(SeqCst), "rung, and left so");
        a.disarm_edge_bell();
        b.disarm_edge_bell();
        assert_eq!((a.edge_bells(), a.sleepers()), (0, (0, 0, 0)));
    }

    /// An edge-only ring that finds a level consumer (registered after the ringer looked)
    /// and the count 0 drains again: the level invariant holds. Here the ring's look is
    /// called by hand, after a level consumer registered and the count was emptied.
    #[test]
    fn edge_ring_finding_a_level_consumer_at_zero_drains() {
        let (a, b) = pair(Mode::Counter, 0);
        a.arm_edge_bell();
        b.arm_bell();
        a.ring_edge(); // a ring that landed after the level sync, at count 0
        assert!(!a.os.bell.load(SeqCst), "drained by the ring's own look");
        b.try_write(1).unwrap();
        a.ring_edge(); // count positive: the ring agrees, nothing more
        assert!(a.os.bell.load(SeqCst));
    }

    /// Switching a consumer both ways: level → edge-only (register edge, then leave
    /// level) and edge-only → level (`arm_bell`, which drains a doorbell left rung at count
    /// 0, then leave edge), as `SharedFdView::set_edge_only` does.
    #[test]
    fn switching_edge_and_level() {
        let (a, b) = pair(Mode::AutoReset, 0);
        a.arm_bell();
        a.arm_edge_bell();
        a.disarm_bell();
        assert_eq!((a.edge_bells(), a.sleepers().2), (1, 0));
        b.try_write(1).unwrap();
        assert!(a.deliver().unwrap().contains(Events::IN));
        assert!(a.os.bell.load(SeqCst), "edge-only: left rung at count 0");
        let drains = a.os.drains.load(SeqCst);
        a.arm_bell();
        a.disarm_edge_bell();
        assert_eq!((a.edge_bells(), a.sleepers().2), (0, 1));
        assert!(!a.os.bell.load(SeqCst), "level again: drained");
        assert_eq!(a.os.drains.load(SeqCst), drains + 1);
        // Back to edge-only while the count is positive: rung at registration.
        b.try_write(1).unwrap();
        let rings = a.os.rings.load(SeqCst);
        a.arm_edge_bell();
        a.disarm_bell();
        assert_eq!(a.os.rings.load(SeqCst), rings + 1);
        // And to level while positive: stays rung, no drain.
        let drains = a.os.drains.load(SeqCst);
        a.arm_bell();
        a.disarm_edge_bell();
        assert!(a.os.bell.load(SeqCst));
        assert_eq!(a.os.drains.load(SeqCst), drains);
        a.disarm_bell();
    }

    /// A sleeper that died registered (its count and its flag left in the region) costs
    /// one wake, then none: the flag is cleared by that wake and never set again.
    #[test]
    fn dead_sleepers_cost_one_wake_then_none() {
        let (a, b) = pair(Mode::Counter, 0);
        // A reader and a blocked writer that announced themselves and died in FUTEX_WAIT,
        // and an async writer that asked for a pulse and died.
        b.words.sleepers.fetch_add(READER | WRITER, SeqCst);
        // And a reader that held the sleep bell and died in its read.
        b.words.rseq.fetch_or(WAIT_FLAG | RING_FLAG, SeqCst);
        b.words.rslot.store(1, SeqCst);
        b.words.wseq.fetch_or(WAIT_FLAG | PULSE_FLAG, SeqCst);
        for _ in 0..100 {
            a.try_write(1).unwrap(); // an edge with a "reader" registered
            assert_eq!(a.try_read().unwrap(), 1); // a consumption with a "writer"
        }
        assert_eq!(a.os.wakes.load(SeqCst), 2, "one FUTEX_WAKE per word, once");
        assert_eq!(a.os.bell_rings.load(SeqCst), 1, "one sleep-bell ring, once");
        assert_eq!(a.os.pulses.load(SeqCst), 1, "one pulse, once");
        assert_eq!(
            a.sleepers(),
            (1, 1, 0),
            "the counts stay (they cannot be told apart)"
        );
        // A live reader still sleeps (on the futex: the dead holder keeps the bell) and is
        // still woken.
        let a = Arc::new(a);
        let a2 = Arc::clone(&a);
        let t = std::thread::spawn(move || a2.read(Some(Instant::now() + Duration::from_secs(10))));
        while a.sleepers().0 < 2 {
            std::thread::yield_now();
        }
        std::thread::sleep(Duration::from_millis(5));
        b.try_write(3).unwrap();
        assert_eq!(t.join().unwrap().unwrap(), 3);
    }

    /// Only a write with no deadline may wait in its ring of the sleep bell
    /// ([`Wait::Allowed`]: one plain `write(2)`); `try_write` and a timed write ring with
    /// [`Wait::Never`].
    #[test]
    fn only_a_write_without_a_deadline_rings_the_bell_waiting() {
        let (a, b) = pair(Mode::Counter, 0);
        // A reader that holds the sleep bell, announced (its flag is cleared by each wake,
        // so it is set again before each write).
        b.words.sleepers.fetch_add(READER, SeqCst);
        let ring = |w: &dyn Fn()| {
            b.words.rseq.fetch_or(RING_FLAG, SeqCst);
            w();
            assert_eq!(b.try_read().unwrap(), 1);
        };
        ring(&|| a.try_write(1).unwrap());
        ring(&|| {
            a.write(1, Some(Instant::now() + Duration::from_secs(10)))
                .unwrap()
        });
        assert_eq!(a.os.bell_rings.load(SeqCst), 2);
        assert_eq!(a.os.waiting_rings.load(SeqCst), 0);
        ring(&|| a.write(1, None).unwrap());
        assert_eq!(a.os.bell_rings.load(SeqCst), 3);
        assert_eq!(a.os.waiting_rings.load(SeqCst), 1);
    }

    /// The first blocked reader sleeps on the sleep bell (one ring wakes it, no
    /// `FUTEX_WAKE`); a second, at the same time, on the futex; both are woken by the edges
    /// they are owed, and each leaves the slot and its registration behind it.
    #[test]
    fn the_first_blocked_reader_sleeps_on_the_bell() {
        let (a, b) = pair(Mode::Counter, 0);
        let a = Arc::new(a);
        let a2 = Arc::clone(&a);
        let t = std::thread::spawn(move || a2.read(None).unwrap());
        while a.words.rseq.load(SeqCst) & RING_FLAG == 0 {
            std::thread::yield_now();
        }
        assert_eq!(a.words.rslot.load(SeqCst), 1, "the reader holds the bell");
        b.try_write(4).unwrap();
        assert_eq!(t.join().unwrap(), 4);
        assert_eq!(a.os.bell_rings.load(SeqCst), 1);
        assert_eq!(a.os.wakes.load(SeqCst), 0, "no FUTEX_WAKE");
        assert_eq!(a.words.rslot.load(SeqCst), 0, "the slot is left");
        assert_eq!(a.sleepers(), (0, 0, 0));

        // Two readers at once: one on the bell, one on the futex.
        let readers: Vec<_> = (0..2)
            .map(|_| {
                let a = Arc::clone(&a);
                std::thread::spawn(move || a.read(None).unwrap())
            })
            .collect();
        while a.words.rseq.load(SeqCst) & (RING_FLAG | WAIT_FLAG) != RING_FLAG | WAIT_FLAG {
            std::thread::yield_now();
        }
        b.try_write(1).unwrap();
        while b.count() != 0 {
            std::thread::yield_now();
        }
        b.try_write(1).unwrap();
        let got: u64 = readers.into_iter().map(|t| t.join().unwrap()).sum();
        assert_eq!(got, 2);
        assert!(
            a.os.wakes.load(SeqCst) >= 1,
            "the futex sleeper was woken by FUTEX_WAKE"
        );
        assert_eq!(a.sleepers(), (0, 0, 0));
        assert_eq!(a.words.rslot.load(SeqCst), 0);
    }

    /// Stale tokens in the sleep bell (rings for holders that had left) make a read return
    /// early at most once: a timed read on an empty count still times out, on time.
    #[test]
    fn stale_tokens_do_not_end_a_timed_read() {
        let (a, _b) = pair(Mode::Counter, 0);
        a.os.tokens.store(3, SeqCst);
        let t0 = Instant::now();
        let e = a.read(Some(t0 + Duration::from_millis(20))).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert!(t0.elapsed() >= Duration::from_millis(20));
        assert_eq!(a.os.tokens.load(SeqCst), 0, "taken by the first look");
        assert_eq!(a.sleepers(), (0, 0, 0));
        assert_eq!(a.words.rslot.load(SeqCst), 0);
    }

    #[test]
    fn garbage_gives_invalid_data_or_legal_values() {
        let (a, b) = pair(Mode::Counter, 0);
        b.words.count.store(u64::MAX, SeqCst);
        assert_eq!(a.readiness(), Events::IN | Events::ERR);
        assert_eq!(
            a.try_write(0).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        assert_eq!(a.try_read().unwrap(), u64::MAX);
        b.words.sleepers.store(u64::MAX, SeqCst);
        a.try_write(1).unwrap(); // wakes nobody, rings a bell nobody hears: harmless
        assert_eq!(a.try_read().unwrap(), 1);
        b.words.magic.store(0, SeqCst);
        assert_eq!(a.try_read().unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            a.try_write(1).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert_eq!(a.read(None).unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(
            a.write(1, None).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    /// The blocking loop checks the header before its first try and after every sleep, not
    /// in each try: a header overwritten while a reader (or a writer) sleeps fails its call
    /// with `InvalidData` when it wakes, and takes nothing, even with units there.
    #[test]
    fn header_overwritten_while_asleep_fails_the_sleeper() {
        for blocked_writer in [false, true] {
            let initial = if blocked_writer { LIMIT } else { 0 };
            let (a, b) = pair(Mode::Counter, initial);
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let t = std::thread::spawn(move || {
                if blocked_writer {
                    a2.write(1, None).map(|()| 0)
                } else {
                    a2.read(None)
                }
            });
            // Registered is not yet asleep: its re-check after registering comes first, and
            // that re-check would take the edge below without looking at the header. Its
            // announcement (`WAIT_FLAG` on its futex word, or `RING_FLAG` for the reader
            // that holds the sleep bell, set after the re-check failed) is the last step
            // before it sleeps: an edge after it either finds the sleeper asleep or changes
            // the word under it (or leaves a token in the bell), and either way the
            // sleeper's next round checks the header first. (No timing: a sleep here failed
            // on a slow machine whenever the thread had not reached the futex in time.)
            let word = if blocked_writer {
                &a.words.wseq
            } else {
                &a.words.rseq
            };
            while word.load(SeqCst) & (WAIT_FLAG | RING_FLAG) == 0 {
                std::thread::yield_now();
            }
            b.words.magic.store(0, SeqCst);
            // The edge that wakes the sleeper (the checks of `b`'s own steps would refuse).
            if blocked_writer {
                b.words.count.store(0, SeqCst);
                b.wake(Futex::Writers, Wait::Never);
            } else {
                b.words.count.store(5, SeqCst);
                b.wake(Futex::Readers, Wait::Never);
            }
            let e = t.join().unwrap().unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{blocked_writer}");
            let left = if blocked_writer { 0 } else { 5 };
            assert_eq!(a.count(), left, "nothing taken or added");
            assert_eq!(a.sleepers(), (0, 0, 0));
        }
    }
}

/// Loom models: two threads stand for the two processes, over the same words.
#[cfg(evfd_loom)]
mod loom {
    use super::heap::{pair, HeapProtocol, HeapWords};
    use super::*;
    use crate::loom::SeedLoad;
    use crate::mode::LIMIT;
    use ::loom::thread;
    use std::sync::Arc;

    /// A blocked reader in one process (its sleep bell holding `tokens` already), one
    /// `write(1)` in the other: the reader takes the 1 and leaves nothing registered. This
    /// side, for the caller's checks.
    fn one_reader_one_write(tokens: u64) -> Arc<HeapProtocol> {
        let (a, b) = pair(Mode::Counter, 0);
        a.os.tokens.store(tokens, SeqCst);
        let a = Arc::new(a);
        let a2 = Arc::clone(&a);
        let r = thread::spawn(move || a2.read(None).unwrap());
        b.try_write(1).unwrap();
        assert_eq!(r.join().unwrap(), 1);
        assert_eq!(a.sleepers(), (0, 0, 0));
        a
    }

    /// A blocked reader in one process, a writer in the other: the reader is woken.
    #[test]
    fn shared_futex_reader_woken() {
        ::loom::model(|| {
            one_reader_one_write(0);
        });
    }

    /// A pair in `mode` starting at 0, with two threads reading (blocking) on its first
    /// side: that side, the other, and the two readers.
    fn two_readers(
        mode: Mode,
    ) -> (
        Arc<HeapProtocol>,
        HeapProtocol,
        [thread::JoinHandle<u64>; 2],
    ) {
        let (a, b) = pair(mode, 0);
        let a = Arc::new(a);
        let read = |a: &Arc<HeapProtocol>| {
            let a = Arc::clone(a);
            thread::spawn(move || a.read(None).unwrap())
        };
        let readers = [read(&a), read(&a)];
        (a, b, readers)
    }

    /// Two blocked Semaphore readers, one `write(2)`: both are woken (one wake each, or a
    /// hand-on).
    #[test]
    fn shared_futex_semaphore_two_readers() {
        ::loom::model(|| {
            let (_a, b, [r1, r2]) = two_readers(Mode::Semaphore);
            b.try_write(2).unwrap();
            assert_eq!(r1.join().unwrap() + r2.join().unwrap(), 2);
        });
    }

    /// Two blocked Semaphore readers, two `write(1)`s: the second write may find the count
    /// positive and wake nobody (only edges wake); the first woken reader hands on.
    #[test]
    fn shared_futex_semaphore_hand_on() {
        ::loom::model(|| {
            let (_a, b, [r1, r2]) = two_readers(Mode::Semaphore);
            b.try_write(1).unwrap();
            b.try_write(1).unwrap();
            assert_eq!(r1.join().unwrap() + r2.join().unwrap(), 2);
        });
    }

    /// Two blocked Counter readers, two `write(1)`s each after the count was taken: a
    /// Counter read takes everything, so a woken reader hands nothing on; the reader left
    /// asleep is woken by the second write, itself a 0 → positive edge.
    #[test]
    fn shared_futex_counter_two_readers_two_edges() {
        ::loom::model(|| {
            let (a, b, [r1, r2]) = two_readers(Mode::Counter);
            b.try_write(1).unwrap();
            while b.count() != 0 {
                thread::yield_now();
            }
            b.try_write(1).unwrap();
            assert_eq!((r1.join().unwrap(), r2.join().unwrap()), (1, 1));
            assert_eq!(a.sleepers(), (0, 0, 0));
        });
    }

    /// A reader that died registered (its count, and what `dead` leaves in the words),
    /// then a live reader taking two writes: it is woken by each. This side, for the
    /// caller's checks.
    fn live_reader_beside(dead: impl Fn(&HeapWords)) -> Arc<HeapProtocol> {
        let (a, b) = pair(Mode::Counter, 0);
        b.words.sleepers.fetch_add(READER, SeqCst);
        dead(&b.words);
        let a = Arc::new(a);
        let a2 = Arc::clone(&a);
        let r = thread::spawn(move || {
            let mut got = 0;
            while got < 2 {
                got += a2.read(None).unwrap();
            }
            got
        });
        b.try_write(1).unwrap();
        b.try_write(1).unwrap();
        assert_eq!(r.join().unwrap(), 2);
        assert_eq!(a.sleepers(), (1, 0, 0), "the dead count stays");
        a
    }

    /// A reader that died in FUTEX_WAIT (its `WAIT` left in the region) beside a live one:
    /// the dead one's flag is cleared by the first wake, the live one sets its own before
    /// each sleep, so it is woken every time.
    #[test]
    fn shared_futex_dead_and_live_reader() {
        ::loom::model(|| {
            live_reader_beside(|w| {
                w.rseq.fetch_or(WAIT_FLAG, SeqCst);
            });
        });
    }

    /// A token left in the sleep bell (a ring for a holder that left before it read): the
    /// next holder's read returns at once, looks again, and still takes the write's count.
    #[test]
    fn shared_sleep_bell_stale_token() {
        ::loom::model(|| {
            let a = one_reader_one_write(1);
            assert_eq!(a.words.rslot.load(SeqCst), 0, "the slot is left");
        });
    }

    /// A holder of the sleep bell that died in its read (the slot held, `RING_FLAG` set)
    /// beside a live reader: that one sleeps on the futex, and is woken by each of two
    /// writes; the dead flag costs one ring.
    #[test]
    fn shared_sleep_bell_dead_holder() {
        ::loom::model(|| {
            let a = live_reader_beside(|w| {
                w.rslot.store(1, SeqCst);
                w.rseq.fetch_or(RING_FLAG, SeqCst);
            });
            assert!(
                a.os.bell_rings.load(SeqCst) <= 1,
                "the dead flag rings once"
            );
        });
    }

    /// A timed read that holds the sleep bell and times out (at once, in loom), then an
    /// untimed one, against one write: the write's count is read once, by one of them, and
    /// a ring meant for the first (a stale token) costs the second a spurious wake only.
    #[test]
    fn shared_sleep_bell_timed_holder_then_untimed() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, 0);
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let r = thread::spawn(move || match a2.read(Some(Instant::now())) {
                Ok(n) => n,
                Err(e) => {
                    assert_eq!(e.kind(), io::ErrorKind::TimedOut);
                    a2.read(None).unwrap()
                }
            });
            b.try_write(1).unwrap();
            assert_eq!(r.join().unwrap(), 1);
            assert_eq!(a.sleepers(), (0, 0, 0));
            assert_eq!(a.words.rslot.load(SeqCst), 0);
        });
    }

    /// A writer blocked on a full counter in one process, a reader in the other.
    #[test]
    fn shared_futex_writer_woken() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, LIMIT);
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let w = thread::spawn(move || a2.write(1, None).unwrap());
            assert_eq!(b.try_read().unwrap(), LIMIT);
            w.join().unwrap();
            assert_eq!(a.count(), 1);
        });
    }

    /// A `write_async(1)` in a thread of its own: the watch first (the pulse count it
    /// has seen), then the registration, then the re-check; waits on pulses only.
    fn async_writer(p: Arc<HeapProtocol>) -> thread::JoinHandle<()> {
        thread::spawn(move || {
            let mut seen = p.os.pulses.load(SeqCst);
            p.arm_room();
            loop {
                p.want_pulse();
                if p.try_write(1).is_ok() {
                    break;
                }
                seen = p.os.wait_pulse(seen);
            }
            p.disarm_room();
        })
    }

    /// An async writer waiting for room (an edge-triggered watch of the doorbell, no
    /// futex, no thread) in one process, a reader in the other: the writer is pulsed and
    /// its write lands.
    #[test]
    fn shared_async_writer_pulsed() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, LIMIT);
            let a = Arc::new(a);
            let w = async_writer(Arc::clone(&a));
            assert_eq!(b.try_read().unwrap(), LIMIT);
            w.join().unwrap();
            assert_eq!(a.count(), 1);
            assert_eq!(a.sleepers(), (0, 0, 0));
        });
    }

    /// Two async writers, one consumption: it pulses every registered writer, so both
    /// writes land (one wake per waiter would leave one of them asleep).
    #[test]
    fn shared_async_two_writers_pulsed() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, LIMIT);
            let a = Arc::new(a);
            let w1 = async_writer(Arc::clone(&a));
            let w2 = async_writer(Arc::clone(&a));
            assert_eq!(b.try_read().unwrap(), LIMIT);
            w1.join().unwrap();
            w2.join().unwrap();
            assert_eq!(a.count(), 2);
            assert_eq!(a.sleepers(), (0, 0, 0));
        });
    }

    /// The doorbell level claim: a registered consumer, a writer and a reader racing;
    /// afterwards the doorbell is readable iff the count is non-zero.
    #[test]
    fn shared_bell_level() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, 0);
            let b = Arc::new(b);
            let (b1, b2) = (Arc::clone(&b), Arc::clone(&b));
            let w = thread::spawn(move || b1.try_write(1).unwrap());
            let r = thread::spawn(move || {
                let _ = b2.try_read();
            });
            a.arm_bell();
            w.join().unwrap();
            r.join().unwrap();
            assert_eq!(a.os.bell.load(SeqCst), a.count() > 0);
        });
    }

    /// A look at a word inside a model, through [`SeedLoad`](crate::loom::SeedLoad): a
    /// plain load under loom could read an older value (a ring counted before the look
    /// would then look as if it came after it, or a count already refilled as 0).
    fn latest(w: &AtomicU64) -> u64 {
        w.seed_load()
    }

    /// An edge-only consumer registering (its edge-triggered watch first: the rings it
    /// has seen) against a fill in the other process: the count ends positive, and the
    /// doorbell was rung after the watch, by the fill or by the registration's own ring.
    /// Nothing drains.
    #[test]
    fn shared_edge_registration_vs_fill() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, 0);
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let e = thread::spawn(move || {
                let seen = latest(&a2.os.rings);
                a2.arm_edge_bell();
                seen
            });
            b.try_write(1).unwrap();
            let seen = e.join().unwrap();
            assert_eq!(a.count(), 1);
            assert!(a.os.rings.load(SeqCst) > seen, "no ring after the watch");
            assert_eq!(a.os.drains.load(SeqCst), 0);
        });
    }

    /// Claim (edges): with an edge-only consumer registered, a consumer takes the count
    /// to 0 and looks (the rings it has seen, then the count), while the other process
    /// writes 1. If it looked and saw 0 and the count ends positive, a ring came after
    /// the look.
    #[test]
    fn shared_edge_ring_after_an_empty_look() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::AutoReset, 1);
            a.arm_edge_bell();
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let c = thread::spawn(move || {
                let _ = a2.deliver().unwrap();
                let seen = latest(&a2.os.rings);
                (seen, latest(&a2.words.count) == 0)
            });
            b.try_write(1).unwrap();
            let (seen, empty) = c.join().unwrap();
            if empty && a.count() > 0 {
                assert!(a.os.rings.load(SeqCst) > seen, "no ring after the look");
            }
            assert_eq!(a.os.drains.load(SeqCst), 0);
        });
    }

    /// Claim (level) with edge-only rings: an edge-only consumer registered, a fill in
    /// one process, and in the other a level consumer registering and then reading. The
    /// fill may find no level consumer and ring for the edge-only one after the level
    /// consumer synced and the read drained: the ring's own look drains again.
    #[test]
    fn shared_edge_ring_vs_level_arrival() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, 0);
            a.arm_edge_bell();
            let b = Arc::new(b);
            let b2 = Arc::clone(&b);
            let l = thread::spawn(move || {
                b2.arm_bell();
                let _ = b2.try_read();
            });
            a.try_write(1).unwrap();
            l.join().unwrap();
            assert_eq!(a.os.bell.load(SeqCst), a.count() > 0);
        });
    }

    /// Claim (level) with edge-only rings: a level consumer registered and the count
    /// positive (rung); an edge-only consumer registering (it rings: the count is
    /// positive) against a read that empties the count (and drains): the doorbell ends
    /// readable iff the count is positive.
    #[test]
    fn shared_edge_registration_vs_level_drain() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, 1);
            b.arm_bell();
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let e = thread::spawn(move || a2.arm_edge_bell());
            assert_eq!(b.try_read().unwrap(), 1);
            e.join().unwrap();
            assert_eq!(a.os.bell.load(SeqCst), a.count() > 0);
        });
    }

    /// A read future registering with no ring of its own (its process's watch first: the
    /// rings it has seen), then trying to read, against a fill in the other process: if
    /// its try found nothing, the doorbell was rung after the watch. Nothing drains.
    #[test]
    fn shared_edge_waiter_registration_vs_fill() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Counter, 0);
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let f = thread::spawn(move || {
                let seen = latest(&a2.os.rings);
                a2.arm_edge_waiter();
                (seen, a2.try_read().ok())
            });
            b.try_write(1).unwrap();
            match f.join().unwrap() {
                (_, Some(n)) => assert_eq!(n, 1),
                (seen, None) => {
                    assert_eq!(a.count(), 1);
                    assert!(a.os.rings.load(SeqCst) > seen, "no ring after the try");
                }
            }
            assert_eq!(a.os.drains.load(SeqCst), 0);
        });
    }

    /// Two Semaphore read futures of one process on its one watch: `G` is registered and
    /// woken by a write of 2 (the fill's ring, the only event on the watch), takes 1 and
    /// unregisters, while `F` registers and tries. If `F`'s try found nothing, `F` waits on
    /// the watch whose event `G` took: a ring must follow `G`'s wake.
    #[test]
    fn shared_edge_waiter_semaphore_take_passes_the_edge_on() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::Semaphore, 0);
            a.arm_edge_waiter();
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let f = thread::spawn(move || {
                a2.arm_edge_waiter();
                a2.try_read().ok()
            });
            b.try_write(2).unwrap();
            // G's wake: the watch's event, which every ring so far made.
            let heard = latest(&a.os.rings);
            assert!(heard > 0, "the fill did not ring for a registered future");
            assert_eq!(a.try_read().unwrap(), 1);
            a.disarm_edge_waiter(true);
            if f.join().unwrap().is_none() {
                assert_eq!(a.count(), 1);
                assert!(latest(&a.os.rings) > heard, "a unit left and no edge for F");
            }
            assert_eq!(a.os.drains.load(SeqCst), 0);
        });
    }

    /// A doorbell consumer (an epoll waiting on the doorbell fd) in one process, a writer
    /// in the other: the consumer is woken and finds the unit.
    #[test]
    fn shared_bell_consumer_woken() {
        ::loom::model(|| {
            let (a, b) = pair(Mode::AutoReset, 0);
            let a = Arc::new(a);
            let a2 = Arc::clone(&a);
            let c = thread::spawn(move || {
                a2.arm_bell();
                loop {
                    // The consumer's harvest: deliver IN (AutoReset resets).
                    if a2.deliver().unwrap().contains(Events::IN) {
                        break;
                    }
                    a2.os.wait_bell();
                    ::loom::thread::yield_now();
                }
                a2.disarm_bell();
            });
            b.try_write(1).unwrap();
            c.join().unwrap();
            assert_eq!(a.count(), 0);
        });
    }
}
