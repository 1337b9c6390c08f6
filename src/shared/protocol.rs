//! The lock-free protocol of a [`SharedNotifier`](crate::SharedNotifier), over an abstract
//! set of shared words ([`Words`]) and OS wake primitives ([`Os`]).
//!
//! In production the words are atomics in a sealed memfd mapped by two processes and the OS
//! is a shared futex plus a doorbell eventfd; in the unit tests (and under Miri) they are
//! heap atomics and a condition variable; under `--cfg evfd_loom` loom atomics and a loom
//! condition variable, with two threads standing for the two processes.
//!
//! # The region
//!
//! ```text
//! offset  word                 what
//!   0     magic     u64        "EVFDSHR1"
//!   8     meta      u64        version (u16) | mode (u16) << 16 | size (u32) << 32
//!  64     count     u64        the eventfd counter
//!  72     sleepers  u64        three 21-bit counts: blocked readers | blocked writers << 21
//!                              | level doorbell consumers << 42
//!  80     edges     u64        edge-only doorbell consumers
//! 128     rseq      u32        futex word for blocked readers: sequence << 3 | RING | WAIT
//! 132     wseq      u32        futex word for blocked writers: sequence << 3 | PULSE | WAIT
//! 136     rwaker    u32        advisory: CPU + 1 of the last wake of rseq's sleepers (0: unknown)
//! 140     wwaker    u32        advisory: the same for wseq
//! 144     rslot     u32        the readers' sleep bell: 1 while a reader holds it
//! ```
//!
//! `count`, `sleepers` and `edges` share a cache line, so a write that finds nobody asleep
//! touches one line: a CAS and a load (two loads on a 0 → positive edge), no syscall.
//!
//! # Futex path (blocking `read`, `read_timeout`, `write`)
//!
//! ```text
//! waiter (reader)                             waker (writer)
//!   s = rseq.load                               count: CAS old -> new (new > 0)
//!   sleepers += READER                          fence
//!   fence                                       if old == 0 && sleepers.readers > 0:
//!   if count > 0: sleepers -= READER; retry         one CAS: f = rseq's flags,
//!   v = set WAIT in rseq (CAS; if the                 rseq = (seq + 1) << 3, no flags
//!       sequence moved: retry)                      if f has WAIT: futex_wake(rseq, all)
//!   futex_wait(rseq, v, deadline)
//!   sleepers -= READER; retry
//! ```
//!
//! The waiter publishes itself (an RMW) and then loads `count`; the waker changes `count`
//! (an RMW) and then loads `sleepers`. All `SeqCst`: one total order, so either the waiter's
//! re-check sees the new count, or the waker sees the waiter. In the second case the waker
//! bumps `rseq` after the waiter loaded `s` (that load precedes the waiter's publication),
//! so the waiter's CAS that sets `WAIT` fails (the sequence moved: it looks again), or it
//! came before the waker's CAS, which then sees `WAIT` and wakes after its bump, so
//! `futex_wait` either finds `rseq != v` and returns at once or the kernel has queued the
//! waiter before the wake looks (FUTEX_WAIT checks the word and queues atomically). The
//! waker clears the flags and bumps the sequence in one CAS: with two RMWs a waiter could
//! set `WAIT` between them and enter `FUTEX_WAIT` before the bump, on a value nobody wakes
//! (the futex loom models below fail on that variant with `LOOM_MAX_PREEMPTIONS=3`). No wake
//! is lost. Only the write that takes the count from 0 looks: a reader sleeps only after its
//! re-check saw 0, so the first write after that re-check is such an edge; writes while the
//! count is positive coalesce (a woken reader takes the whole count, or, in Semaphore mode,
//! hands the wake on while units remain). A wake clears `WAIT`, so it wakes every thread in
//! `FUTEX_WAIT` on the word (as a kernel eventfd wakes all its blocked readers): one left
//! asleep would not be woken by the next edge. Blocked writers are the mirror image on
//! `wseq`, woken by every consumption. A reader that was woken and leaves the count
//! non-zero (Semaphore) hands the wake on.
//!
//! # The sleep bell (readers)
//!
//! One blocked reader at a time sleeps in a read of an eventfd of its own kind, the
//! *sleep bell*, instead of `FUTEX_WAIT`: the reader that takes the `rslot` word (a CAS
//! 0 → 1) announces itself with [`RING_FLAG`] where the futex path sets `WAIT`, and sleeps
//! in one `read(2)` of the bell, which both waits and takes the token; a waker whose CAS
//! on `rseq` finds `RING_FLAG` writes one token. Every other reader sleeps on the futex as
//! above, and a waker that finds both flags does both. The argument is the futex path's
//! with "the bell holds a token" for "the word moved": the flag is set before the waker's
//! CAS (seen: a token is written, which the holder's read finds whenever it starts) or not
//! at all (the holder's CAS finds the sequence moved and looks again). The holder leaves
//! the slot after each sleep. A token written for a holder that left first (a timeout, or
//! it found the count before it slept) stays in the bell and makes the next holder's read
//! return at once: a spurious wake, which looks again. The reason is cost: a shared futex
//! looks its page up at every call, and two processes handing a count back and forth on one
//! CPU (what a co-tenant makes of any pair) paid for that at every hop — the bell's
//! write and read are an eventfd's, as the kernel pair's own.
//!
//! The bell's open file description is shared with every process that holds the notifier,
//! so nothing relies on its flags: the holder's read without a deadline is a blocking
//! `read(2)` that falls back to `poll(2)` if a peer made the description non-blocking, a
//! timed one `poll(2)` and a read that never waits. A ring made by a non-blocking, timed or
//! async call is a write that never waits (`eventfd::write_now`: a `poll(2)`, then the
//! write). A ring made by a blocking call with no deadline ([`Wait::Allowed`]) is one plain
//! `write(2)` (`eventfd::ring_waiting`), which waits only while a peer keeps the bell
//! saturated: legitimately the bell holds a token or two (one per announce, and the
//! holder's read takes them all), so only a hostile peer can fill it, and the holder's
//! next read empties it. Such a call already waits as long as a peer holds it back (a peer
//! that keeps the count at the limit keeps a blocking write waiting), so the wait adds no
//! new way to hold it; and the `poll(2)` was a third syscall on each parked hop, where the
//! kernel's eventfd pair makes two. A holder killed while it held the slot leaves it held:
//! every reader then sleeps on the futex, as before the bell existed.
//!
//! # Dead sleepers
//!
//! A peer killed while registered leaves its count in `sleepers` for ever: a live sleeper
//! between its registration and its `FUTEX_WAIT` looks the same from here, so the count
//! cannot be corrected without risking a lost wake. The flags make the leftover cheap
//! instead: a waker pays a syscall only if a flag says someone is (about to be) in the
//! kernel, and clears it; a dead sleeper set its flag at most once, so after one wasted
//! `FUTEX_WAKE` (or pulse) its leftover count costs two atomics on the futex word per
//! wake, no syscall. Live sleepers set the flag again before each sleep.
//! A dead doorbell consumer (`sleepers.bells`) still costs a ring and a drain per
//! 0 ↔ positive cycle: a doorbell consumer polls the fd whenever it likes, so no flag can
//! say when it listens. A dead edge-only consumer (`edges`) costs a ring per fill.
//!
//! # The spin before the futex, and the waker's CPU
//!
//! A blocking call first tries once; only then does it spin, unregistered, on a load of
//! `count` for the budget its process's `SpinGauge` learned (`wait_queue::spin`, the same
//! rules as the in-process wait), and only then does it register and sleep. A call that
//! succeeds at once teaches the gauge nothing. One rule of the gauge needs to know where
//! the wake came from: a sleeper woken from the CPU it parked on shared that CPU with its
//! waker, which could not have answered while it spun. So a waker that is about to
//! `FUTEX_WAKE` stores its CPU + 1 in `rwaker` / `wwaker` (0: unknown), and the woken
//! waiter compares it with its own. The words are advisory: a stale value (another waker
//! came since, or a wake that was not ours) or a peer's lie only misleads the heuristic,
//! which stays bounded (a spin never outlasts its budget nor the deadline); a peer that
//! does not keep them leaves 0 (unknown: the rule does not fire).
//!
//! # Syscalls in the caller's frame
//!
//! Two syscalls are where a hand-off loses its CPU: the sleep (the bell's `read(2)`,
//! `FUTEX_WAIT`) until the peer's wake, and the ring (the bell's `write(2)`), where the
//! sleeper it wakes, when both share a CPU — what a busy machine makes of any pair —
//! takes the CPU before the writer is back from the kernel. Measured on two processes
//! sharing one CPU, a frame of evfd's that was live across that switch cost ~0.3 µs when
//! it returned (a tenth of the round trip; once per switch, however many frames;
//! docs/handoff.md, "The one-CPU cross-process hand-off"), where the kernel's eventfd
//! pair, its syscalls inline in the caller's loop, returns into nothing. So a blocking
//! [`read`](Protocol::read) keeps its sleep, and a blocking [`write`](Protocol::write) its
//! first try's ring, in the caller's frame: both are inlined, with the sleep's and the
//! ring's chain (`Os::bell_sleep`, `Os::bell_ring`, the eventfd calls under them), and
//! the bookkeeping around them is out of line, called before the syscall
//! ([`wait_prepare`](Protocol::wait_prepare), [`claim_wake`](Protocol::claim_wake)) or
//! after it ([`wait_after`](Protocol::wait_after)), never around it; the public blocking
//! calls inline them into their callers. A write that finds no room waits in a frame of
//! its own ([`write_blocked`](Protocol::write_blocked)), and the other writes (`try_write`,
//! the async ones) wake out of line: a full count is rare, and a write that finds room
//! keeps a small frame (the `SharedNotifier` pair, `write` + `read`: 94 → 98 user
//! instructions; docs/handoff.md).
//!
//! # Async writers (room, without a thread)
//!
//! A `write_async` that finds no room waits on the doorbell instead of a futex, so that the
//! executor's own machinery (an epoll) hears the wake and no thread sleeps for it:
//!
//! ```text
//! async writer                                consumer (any process)
//!   watch the doorbell IN|OUT|ET                count: CAS / swap old -> new (new < old)
//!   sleepers += WRITER      (arm_room)          fence
//!   fence                                       if sleepers.writers > 0:
//!   loop:                                           one CAS: f = wseq's flags,
//!     wseq |= PULSE         (want_pulse)              wseq = (seq + 1) << 3, no flags
//!     if try_write(n) succeeds: done                if f has WAIT: futex_wake(wseq, all)
//!     await a doorbell event                        if f has PULSE: pulse()
//! ```
//!
//! The same Dekker pair as the futex path: either the writer's re-check sees the room, or
//! the consumer sees the writer's registration; then the writer's `PULSE` (an RMW before
//! its re-check) and the consumer's CAS (an RMW after its count change) are
//! ordered: the consumer sees `PULSE` and pulses, or the re-check sees the room. A pulse is an eventfd
//! write of 0: the doorbell's value (so its readability, the doorbell path's invariant below)
//! does not change, but every edge-triggered watcher whose interest includes `OUT` gets an
//! event (the kernel wakes the eventfd's wait queue on every write, and an eventfd is always
//! writable, so the edge-triggered item is reported). The writer registered its watch before
//! `arm_room`, so a pulse after the registration is kept in that epoll's ready list until
//! the writer waits. Each waiting writer has its own watch, and every consumption pulses
//! all of them (writers need different amounts of room, so all must look): a dropped
//! future that had an event pending takes nobody else's. Rings and drains of the doorbell
//! also reach the watch; they are spurious wakes, answered by the re-check.
//!
//! # Doorbell path (epoll, fd views)
//!
//! While a level doorbell consumer is registered (`sleepers.bells > 0`: every epoll
//! registration and fd view that is not edge-only), the doorbell
//! eventfd mirrors `count > 0`: the write that takes the count from 0 rings it, the consumption that
//! takes it to 0 drains it, and each such syscall is followed by a re-check that corrects
//! it ([`Protocol::sync_bell`]):
//!
//! ```text
//! sync_bell(ring):
//!   repeat (at most BELL_ROUNDS):
//!     ring ? ring() : drain()
//!     fence
//!     readable = count > 0
//!     if readable == ring: return
//!     ring = readable
//!   ring()               // bound hit: a spurious readiness, never a lost one
//! ```
//!
//! **Claim (level).** When no operation is in progress, the doorbell is readable iff
//! `count > 0` (while a consumer is registered). *Proof.* Let `X` be the last doorbell
//! syscall (eventfd calls are linearizable) and `A` its caller. `A`'s re-check after `X`
//! agreed with `X` (else `A` made another call after `X`). Any change of `count > 0` after
//! that re-check is an edge (0 → positive or positive → 0) whose author then calls
//! `sync_bell`, whose first syscall follows the edge, which follows `A`'s re-check, which
//! follows `X`: a contradiction with `X` being last. So `count > 0` is still what `A` saw
//! after `X`. ∎ A consumer registering publishes itself (`sleepers += BELL`) and then syncs
//! the doorbell with the count it loads; a concurrent edge either sees it registered or
//! happened before that load. The loom models below check the claim and the absence of lost
//! wakeups for both paths.
//!
//! # Edge-only consumers
//!
//! An edge-only fd view (`SharedFdView::set_edge_only`) is polled by edge-triggered pollers
//! only, which need a doorbell *write* after the count could have become readable, not a
//! doorbell that mirrors the count. It counts itself in `edges` (not in `sleepers`), and
//! nothing drains the doorbell for it:
//!
//! ```text
//! fill (write with old == 0)                 edge consumer registers
//!   count: CAS 0 -> new                        edges += 1
//!   fence                                      fence
//!   s = sleepers                               if count > 0: ring_edge()
//!   if s.bells > 0: sync_bell(true)          unregisters: edges -= 1
//!   else if edges > 0: ring_edge()
//!
//! ring_edge():
//!   ring()
//!   fence
//!   if sleepers.bells > 0 && count == 0: sync_bell(false)
//! ```
//!
//! A consumption does nothing for edge-only consumers (it drains for level ones, as
//! above). A fill with level consumers needs no extra ring: `sync_bell(true)` starts with
//! one. A view switching to edge-only registers in `edges` first and then leaves
//! `sleepers`, so that no fill in between misses both; back to level, it registers in
//! `sleepers` first (`arm_bell`, whose sync drains a doorbell left rung at count 0) and
//! then leaves `edges`.
//!
//! **Claim (edges).** If a consumer saw the count 0 (a load, or the swap or CAS that
//! emptied it) at `t` while an edge-only consumer was registered, and the count is
//! positive later, the doorbell is written after `t`; and when no operation is in
//! progress, the last doorbell syscall is a ring (the fd is readable, so an edge-triggered
//! poller's harvest, which polls the fd again, reports it). *Proof.* The count's value
//! went from the 0 seen at `t` to a positive one, so some write after `t` in the count's
//! order replaced a 0: a fill `W`. `W`'s CAS follows `t`, and the registration (`edges +=
//! 1`, before `t` in its thread) precedes both in the total order, so `W`'s load of
//! `sleepers` and then of `edges` after its fence sees a level consumer (`sync_bell`, whose
//! first call is a ring) or the edge-only one (`ring_edge`): a ring after `t`. A drain
//! after it comes from a `sync_bell(false)`, whose re-check rings again if the count is
//! positive, and a count that turns positive after that re-check is a later fill, which
//! rings again. ∎ A consumer registering while the count is positive gets an edge from its
//! own ring, which follows its registration (its watch is registered before that).
//!
//! **Claim (level) with edge-only rings.** The proof above needs one more case: the last
//! doorbell syscall `X` is a ring of `ring_edge`, which a level consumer does not expect.
//! Without its look after the ring, it can break the claim: a fill `W` finds no level
//! consumer and starts `ring_edge`; a level consumer registers, syncs (rings: the count is
//! positive), a read empties the count and drains; `W`'s ring lands last, at count 0. With
//! the look: if `W`'s load of `sleepers` after `X` sees no level consumer, every level
//! consumer registered now registered after that load, and its sync follows `X`; if it
//! sees one and the count 0, it calls `sync_bell(false)` after `X`; if it sees one and
//! the count positive, that load is a re-check after `X` that agrees with `X`, and the
//! original argument goes on from it (an edge after the re-check is followed by a
//! syscall of its author, `sync_bell` or `ring_edge`, or, if its author saw no level
//! consumer, by the sync of the level consumer registered now, which registered after
//! that author's load). Each case contradicts `X` being last. ∎ The loom models
//! `shared_edge_*` below check both claims; one (`shared_edge_ring_vs_level_arrival`) is
//! the race above, and fails without the look.
//!
//! # Async readers
//!
//! A pending `read_async` is an edge-only consumer too: the read futures of one process
//! share one edge-triggered watch of the doorbell (an epoll, `super::asyncio`), and a wake
//! costs the fill's ring and no drain. Two differences from an fd view:
//!
//! - **No ring at registration** ([`Protocol::arm_edge_waiter`]). A future registers after
//!   its process's watch exists and then tries to read again: that try is the look of
//!   claim (edges), so a count positive at the registration is taken by the try, or was
//!   taken by someone else, or comes with a ring after the look.
//! - **A take that leaves units passes the edge on** ([`Protocol::disarm_edge_waiter`]).
//!   One ring makes one event on the process's watch, which wakes one future. Counter and
//!   AutoReset reads take the whole count, so a positive count after them is a later fill,
//!   which rings; a Semaphore read takes 1 and may leave units that the other futures of
//!   the process, registered on the same edge, never hear of. So a Semaphore future that
//!   read unregisters, and then, if another future of its process is registered
//!   (`edge_waiters`, process-local) and the count is positive, rings once more
//!   ([`ring_edge`](Protocol::ring_edge)):
//!
//! ```text
//! registers (F)                  a Semaphore read completes (G)
//!   edge_waiters += 1              take 1                  (the count's RMW)
//!   edges += 1                     edges -= 1; edge_waiters -= 1
//!   fence                          fence
//!   try_read                       if edge_waiters > 0 && count > 0: ring_edge()
//! ```
//!
//! *Claim.* F is not left waiting while the count is positive. If F's try (after its
//! registration) saw `G`'s take or later, it saw what `G` left and took it, unless another
//! consumer took it first. Otherwise `G`'s load of `edge_waiters` follows F's increment in
//! the total order and sees it, and `G`'s look at the count follows `G`'s take: a positive
//! count there rings after F's registration and after the event `G` was woken by. ∎ A ring
//! that finds nobody waiting stays queued on the watch: the next future that waits has
//! one spurious wake (its try finds 0 and it waits again). The loom models
//! `shared_edge_waiter_*` below check both points.
//!
//! # An untrusted peer
//!
//! The other process can store anything into any word at any time. Nothing here trusts the
//! words beyond their being `u64`/`u32`: every count is an eventfd-legal count (Linux's own
//! counter can reach `u64::MAX` through `eventfd_signal`), a corrupt `sleepers` costs at most
//! a wasted syscall or a missed wake (as a peer that never writes would), every CAS loop is
//! bounded ([`MAX_CAS`]), a futex that keeps returning at once is backed off, and a header
//! that changed since it was validated makes every operation fail with `InvalidData`.

use std::io;
use std::time::Instant;

use crate::error::{timed_out, would_block};
use crate::events::Events;
use crate::loom::sync::atomic::{AtomicU32, AtomicU64, Ordering::SeqCst};
use crate::mode::{self, Mode, WriteRefused};
use crate::wait_queue::spin::{current_cpu, Spin, SpinGauge, SpinPlan, WaitEnd, NO_CPU};
use std::sync::atomic::Ordering::Relaxed;

/// The size of a region: one page.
pub(crate) const REGION_SIZE: usize = 4096;
/// `"EVFDSHR1"`, little-endian.
pub(crate) const MAGIC: u64 = u64::from_le_bytes(*b"EVFDSHR1");
/// The layout and protocol version (2: the futex words carry the wait and pulse flags; 3:
/// the readers' sleep bell, `rslot` and [`RING_FLAG`]; 4: edge-only doorbell consumers,
/// `edges`, which a peer of version 3 would not ring for).
pub(crate) const VERSION: u16 = 4;
pub(crate) const OFF_MAGIC: usize = 0;
pub(crate) const OFF_META: usize = 8;
pub(crate) const OFF_COUNT: usize = 64;
pub(crate) const OFF_SLEEPERS: usize = 72;
pub(crate) const OFF_EDGES: usize = 80;
pub(crate) const OFF_RSEQ: usize = 128;
pub(crate) const OFF_WSEQ: usize = 132;
pub(crate) const OFF_RWAKER: usize = 136;
pub(crate) const OFF_WWAKER: usize = 140;
pub(crate) const OFF_RSLOT: usize = 144;

const FIELD_BITS: u32 = 21;
const FIELD: u64 = (1 << FIELD_BITS) - 1;
const READER: u64 = 1;
const WRITER: u64 = 1 << FIELD_BITS;
const BELL: u64 = 1 << (2 * FIELD_BITS);

/// Failed CASes on the shared count before an operation gives up with `InvalidData`: only a
/// peer storing into the count continuously gets there.
pub(crate) const MAX_CAS: u32 = 1 << 16;
/// Doorbell corrections per `sync_bell` (module docs).
const BELL_ROUNDS: u32 = 16;
/// Flag in a futex word (`rseq`, `wseq`): a thread may be in `FUTEX_WAIT` on the word's
/// current value. Set by the sleeper just before it sleeps, cleared by the waker, which
/// calls `FUTEX_WAKE` only when it was set (module docs, "Dead sleepers").
const WAIT_FLAG: u32 = 1;
/// Flag in `wseq`: an async writer waits for a doorbell pulse. Set by the writer before each
/// re-check, cleared by the consumer, which pulses only when it was set.
const PULSE_FLAG: u32 = 2;
/// Flag in `rseq`: the holder of the readers' sleep bell (`rslot`) may be in a read of it
/// on the word's current value. Set by the holder just before it sleeps, cleared by the
/// waker, which then puts a token in the sleep bell (module docs, "The sleep bell").
const RING_FLAG: u32 = 4;
/// The flags of a futex word; the rest is its sequence, bumped by [`SEQ_STEP`].
const FLAGS: u32 = WAIT_FLAG | PULSE_FLAG | RING_FLAG;
const SEQ_STEP: u32 = 8;
/// Futex returns without progress before a waiter backs off (sleeps 1 ms per round).
const SPURIOUS_BEFORE_BACKOFF: u32 = 1024;

/// The on-region code of a mode.
pub(crate) const fn mode_code(mode: Mode) -> u16 {
    match mode {
        Mode::Counter => 0,
        Mode::Semaphore => 1,
        Mode::AutoReset => 2,
    }
}

/// The `meta` word of a region of this version, `mode` and size.
pub(crate) const fn meta(mode: Mode) -> u64 {
    VERSION as u64 | (mode_code(mode) as u64) << 16 | (REGION_SIZE as u64) << 32
}

/// [`Protocol::check_header`]'s error: out of line, so that the check inlines as two loads
/// and a compare.
#[cold]
#[inline(never)]
fn header_overwritten(magic: u64, meta_now: u64) -> io::Error {
    bad_data(format!(
        "shared region header was overwritten (magic {magic:#018x}, meta {meta_now:#018x})"
    ))
}

fn bad_data(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// Validate a header (as read from a region that is not mapped yet); the mode it names.
pub(crate) fn parse_header(magic: u64, meta: u64) -> io::Result<Mode> {
    if magic != MAGIC {
        return Err(bad_data(format!(
            "shared region: bad magic {magic:#018x} (expected {MAGIC:#018x})"
        )));
    }
    let version = meta as u16;
    if version != VERSION {
        return Err(bad_data(format!(
            "shared region: layout version {version}, this build speaks {VERSION}"
        )));
    }
    let mode = match (meta >> 16) as u16 {
        0 => Mode::Counter,
        1 => Mode::Semaphore,
        2 => Mode::AutoReset,
        m => return Err(bad_data(format!("shared region: unknown mode code {m}"))),
    };
    let size = meta >> 32;
    if size != REGION_SIZE as u64 {
        return Err(bad_data(format!(
            "shared region: header says {size} bytes, expected {REGION_SIZE}"
        )));
    }
    Ok(mode)
}

/// The shared words. All accesses are atomic; nothing else is ever read.
pub(crate) trait Words: Send + Sync + 'static {
    fn magic(&self) -> &AtomicU64;
    fn meta(&self) -> &AtomicU64;
    fn count(&self) -> &AtomicU64;
    fn sleepers(&self) -> &AtomicU64;
    /// The count of edge-only doorbell consumers (module docs, "Edge-only consumers"); the
    /// level ones are `sleepers`' third field.
    fn edges(&self) -> &AtomicU64;
    fn rseq(&self) -> &AtomicU32;
    fn wseq(&self) -> &AtomicU32;
    /// The readers' sleep-bell slot (module docs, "The sleep bell"): 0 free, 1 held.
    fn rslot(&self) -> &AtomicU32;
    /// The advisory word where the last `FUTEX_WAKE` of `which` left its CPU + 1 (0:
    /// unknown), for the spin gauge (module docs, "The waker's CPU"); `None` where it is
    /// not kept (the heap and loom words of the tests). Plain atomics: only a heuristic
    /// reads it.
    fn waker_cpu(&self, which: Futex) -> Option<&std::sync::atomic::AtomicU32> {
        let _ = which;
        None
    }
}

/// Which futex word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Futex {
    Readers,
    Writers,
}

/// Whether an operation may wait for a peer: a blocking call with no deadline may
/// ([`Os::bell_ring`]); a non-blocking, timed or async one never does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// As long as a peer holds it back.
    Allowed,
    /// Never: the call returns on time whatever a peer did.
    Never,
}

/// How a futex wait ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woke {
    /// Woken, the word changed, or spurious: look again.
    Maybe,
    /// The deadline passed.
    TimedOut,
}

/// The OS side: a shared futex and the doorbell.
pub(crate) trait Os: Send + Sync + 'static {
    /// Sleep while `word == expected`, until woken or `deadline`.
    fn futex_wait(
        &self,
        which: Futex,
        word: &AtomicU32,
        expected: u32,
        deadline: Option<Instant>,
    ) -> io::Result<Woke>;
    /// Wake up to `n` sleepers on `word`.
    fn futex_wake(&self, which: Futex, word: &AtomicU32, n: u32);
    /// Sleep until the readers' sleep bell holds a token, taking every token, or until
    /// `deadline`. `Maybe` also on a signal or a stale token: the caller looks again.
    fn bell_sleep(&self, deadline: Option<Instant>) -> io::Result<Woke>;
    /// Put a token in the readers' sleep bell (wakes its holder, or the next one).
    /// [`Wait::Allowed`]: the ringing call has no deadline, so the ring may wait for room
    /// in the bell as that call may wait for anything a peer holds back (module docs, "The
    /// sleep bell"); [`Wait::Never`]: it must not wait, whatever a peer did to the bell.
    fn bell_ring(&self, wait: Wait);
    /// Make the doorbell readable.
    fn ring(&self);
    /// Make the doorbell not readable.
    fn drain(&self);
    /// Wake every edge-triggered watcher of the doorbell (a `write_async` waiting for room)
    /// without changing whether it is readable: an eventfd write of 0.
    fn pulse(&self);
    /// Sleep a little (a futex that keeps failing at once). Never longer than `deadline`.
    fn backoff(&self, deadline: Option<Instant>);
}

/// The protocol over one region.
pub(crate) struct Protocol<W, O> {
    pub(crate) words: W,
    pub(crate) os: O,
    pub(crate) mode: Mode,
    /// How long this process's blocking calls spin before they register as sleepers,
    /// learned from their recent waits (`wait_queue::spin::SpinGauge`; process-local).
    pub(crate) spin: SpinGauge,
    /// This process's read futures registered as edge-only consumers, which share one
    /// edge-triggered watch of the doorbell (module docs, "Async readers"; process-local).
    edge_waiters: AtomicU32,
}

/// A blocking call's state from one sleep to the next ([`Protocol::block`]).
struct Waiting {
    which: Futex,
    deadline: Option<Instant>,
    /// It slept at least once.
    woken: bool,
    /// Rounds that woke and found nothing (`SPURIOUS_BEFORE_BACKOFF`).
    idle_rounds: u32,
    spin: Spin,
    /// It announced a sleep at least once (the gauge heard `before_park`).
    parked: bool,
    /// No round yet: the next one spins first.
    fresh: bool,
}

/// What [`Protocol::wait_prepare`] found.
enum Prep<R> {
    /// The call is done.
    Done(R),
    /// Registered: sleep (on the bell if `slot`, else on the futex word at `value`), or,
    /// with no `value`, look again at once; then [`Protocol::wait_after`].
    Sleep { slot: bool, value: Option<u32> },
}

/// Why an atomic step over the count did not happen.
enum Step {
    Refused(WriteRefused),
    Contended,
}

fn contended() -> io::Error {
    bad_data(format!(
        "shared counter changed {MAX_CAS} times during one operation: the peer is misbehaving"
    ))
}

impl<W: Words, O: Os> Protocol<W, O> {
    /// Initialise a fresh region (zeroed memory) for `mode` with `initial` units.
    pub(crate) fn init(words: W, os: O, mode: Mode, initial: u64) -> Self {
        words.count().store(initial, SeqCst);
        words.meta().store(meta(mode), SeqCst);
        words.magic().store(MAGIC, SeqCst);
        Protocol {
            words,
            os,
            mode,
            spin: SpinGauge::new(),
            edge_waiters: AtomicU32::new(0),
        }
    }

    /// Use a region whose header was validated as naming `mode`.
    pub(crate) fn attach(words: W, os: O, mode: Mode) -> Self {
        Protocol {
            words,
            os,
            mode,
            spin: SpinGauge::new(),
            edge_waiters: AtomicU32::new(0),
        }
    }

    /// `InvalidData` if the peer overwrote the header since it was validated.
    #[inline]
    pub(crate) fn check_header(&self) -> io::Result<()> {
        let magic = self.words.magic().load(SeqCst);
        let meta_now = self.words.meta().load(SeqCst);
        if magic != MAGIC || meta_now != meta(self.mode) {
            return Err(header_overwritten(magic, meta_now));
        }
        Ok(())
    }

    /// The count now.
    #[inline]
    pub(crate) fn count(&self) -> u64 {
        self.words.count().load(SeqCst)
    }

    /// eventfd's readiness of the count (`IN`, `OUT`, `ERR` for `u64::MAX`).
    pub(crate) fn readiness(&self) -> Events {
        mode::readiness(self.count())
    }

    /// One bounded CAS loop applying `f` to the count. Returns (old, new).
    fn update(&self, f: impl Fn(u64) -> Result<u64, WriteRefused>) -> Result<(u64, u64), Step> {
        let count = self.words.count();
        let mut cur = count.load(SeqCst);
        for _ in 0..MAX_CAS {
            let next = f(cur).map_err(Step::Refused)?;
            match count.compare_exchange(cur, next, SeqCst, SeqCst) {
                Ok(_) => return Ok((cur, next)),
                Err(seen) => cur = seen,
            }
        }
        Err(Step::Contended)
    }

    /// Add `n` without waiting. `Ok(false)`: no room now.
    #[inline(always)]
    fn write_step(&self, n: u64) -> io::Result<bool> {
        self.check_header()?;
        self.put(n, Wait::Never)
    }

    /// [`write_step`](Self::write_step) without the header check: for [`block`](Self::block),
    /// which checks once per round.
    #[inline(always)]
    fn put(&self, n: u64, wait: Wait) -> io::Result<bool> {
        self.put_then(n, |old, new| self.after_write(old, new, wait))
    }

    /// [`put`](Self::put) with `after` in place of [`after_write`](Self::after_write).
    #[inline(always)]
    fn put_then(&self, n: u64, after: impl FnOnce(u64, u64)) -> io::Result<bool> {
        match self.update(|c| mode::write(c, n)) {
            Ok((old, new)) => {
                after(old, new);
                Ok(true)
            }
            Err(Step::Refused(WriteRefused::Invalid)) => Err(mode::invalid_write()),
            Err(Step::Refused(WriteRefused::Full)) => Ok(false),
            Err(Step::Contended) => Err(contended()),
        }
    }

    /// `try_write`: `WouldBlock` when there is no room.
    #[inline]
    pub(crate) fn try_write(&self, n: u64) -> io::Result<()> {
        if self.write_step(n)? {
            Ok(())
        } else {
            Err(would_block())
        }
    }

    /// Take from the count without waiting. `Ok(None)`: it is 0.
    #[inline(always)]
    fn read_step(&self) -> io::Result<Option<u64>> {
        self.check_header()?;
        self.take()
    }

    /// [`read_step`](Self::read_step) without the header check: for [`block`](Self::block),
    /// which checks once per round.
    #[inline(always)]
    fn take(&self) -> io::Result<Option<u64>> {
        let (old, new, got) = match self.mode {
            // One swap: no loop at all. A load first: a read that finds nothing writes
            // nothing, so it does not take the line from a writer (or a spinning peer)
            // on another CPU; the re-check of a sleeper is the load the Dekker pair needs.
            Mode::Counter | Mode::AutoReset => {
                if self.words.count().load(SeqCst) == 0 {
                    return Ok(None);
                }
                let old = self.words.count().swap(0, SeqCst);
                if old == 0 {
                    return Ok(None);
                }
                (old, 0, old)
            }
            Mode::Semaphore => match self.update(|c| match mode::read(Mode::Semaphore, c) {
                Some((_, next)) => Ok(next),
                // Not a write refusal: "nothing to take", mapped below.
                None => Err(WriteRefused::Full),
            }) {
                Ok((old, new)) => (old, new, 1),
                Err(Step::Refused(_)) => return Ok(None),
                Err(Step::Contended) => return Err(contended()),
            },
        };
        self.after_consume(old, new);
        Ok(Some(got))
    }

    /// `try_read`: `WouldBlock` when the count is 0.
    #[inline]
    pub(crate) fn try_read(&self) -> io::Result<u64> {
        self.read_step()?.ok_or_else(would_block)
    }

    /// Deliver `IN` to a doorbell consumer (epoll harvest, fd-view consume): AutoReset swaps
    /// the count to 0. The readiness seen at delivery.
    pub(crate) fn deliver(&self) -> io::Result<Events> {
        self.check_header()?;
        if self.mode != Mode::AutoReset {
            return Ok(self.readiness());
        }
        let old = self.words.count().swap(0, SeqCst);
        if old != 0 {
            self.after_consume(old, 0);
        }
        Ok(mode::readiness(old) | mode::readiness(0))
    }

    /// After a write took the count from `old` to `new`: wake sleeping readers, ring the
    /// doorbell on the 0 → positive edge. `wait`: whether the writing call may wait
    /// ([`Os::bell_ring`]). The wake, if any, out of line, so that a write that wakes
    /// nobody keeps a small frame.
    #[inline]
    fn after_write(&self, old: u64, new: u64, wait: Wait) {
        self.after_write_then(old, new, |s| self.after_write_slow(s, old, wait));
    }

    /// [`after_write`](Self::after_write) when someone may sleep (`s`: `sleepers`).
    #[inline(never)]
    fn after_write_slow(&self, s: u64, old: u64, wait: Wait) {
        self.wake_on_write(s, old, wait);
    }

    /// [`after_write`](Self::after_write) for a blocking write's first try, the write of a
    /// hand-off: the wake inlined, so that its syscall sits in the caller's frame (module
    /// docs, "Syscalls in the caller's frame").
    #[inline(always)]
    fn after_write_here(&self, old: u64, new: u64, wait: Wait) {
        self.after_write_then(old, new, |s| self.wake_on_write(s, old, wait));
    }

    /// The two `after_write`s' shape: `wake(sleepers)` when someone may sleep, else, on a
    /// fill, the doorbell's part for edge-only consumers (who are not in `sleepers`).
    #[inline(always)]
    fn after_write_then(&self, old: u64, new: u64, wake: impl FnOnce(u64)) {
        let s = self.sleepers_after_write(old, new);
        if s != 0 {
            wake(s);
        } else if old == 0 && new != 0 {
            self.bells_on_fill(0);
        }
    }

    /// After a write took the count from `old` to `new`: `sleepers`, or 0 when there is
    /// nothing to do (the fast path: nobody may sleep, or `write(0)` changed nothing
    /// anyone could be waiting for), no syscall. A fill (`old == 0`, `new != 0`) has
    /// passed the fence either way, so its caller may load `edges` next.
    #[inline(always)]
    fn sleepers_after_write(&self, old: u64, new: u64) -> u64 {
        if new == old || new == 0 {
            return 0;
        }
        crate::loom::dekker_fence();
        self.words.sleepers().load(SeqCst)
    }

    /// The wakes of a write that took the count from `old` with sleepers `s`: the readers'
    /// ([`wake`](Self::wake)'s halves: its bookkeeping a call, its syscalls inline) and the
    /// doorbell's.
    #[inline(always)]
    fn wake_on_write(&self, s: u64, old: u64, wait: Wait) {
        // Only the 0 -> positive edge wakes: a reader sleeps only after seeing 0 (module
        // docs), so the edge's write is the one that finds it; later writes coalesce, and a
        // woken Semaphore reader that leaves units hands the wake on.
        if old != 0 {
            return;
        }
        if s & FIELD != 0 {
            // Every reader in FUTEX_WAIT (as a kernel eventfd wakes all its blocked readers):
            // the wait flag is cleared here, so one left asleep would hear no later edge.
            // `wake`'s two halves spelled out, not `wake` forced inline: that would put the
            // syscalls in every caller's frame, `hand_on`'s in `wait_prepare` too (+21
            // instructions on the parked shared hand-off).
            let flags = self.claim_wake(Futex::Readers);
            self.wake_with(Futex::Readers, flags, wait);
        }
        self.bells_on_fill(s);
    }

    /// The level doorbell consumers in a `sleepers` value.
    #[inline(always)]
    fn level_bells(s: u64) -> u64 {
        (s >> (2 * FIELD_BITS)) & FIELD
    }

    /// The doorbell's part of a fill (a write that took the count from 0), `s` the
    /// `sleepers` its writer loaded after its CAS and the fence: with level consumers,
    /// [`sync_bell`](Self::sync_bell) (its ring is an edge for the edge-only ones too);
    /// else, with edge-only consumers (`edges`, loaded after the same fence), one
    /// [`ring_edge`](Self::ring_edge) (module docs, "Edge-only consumers").
    #[inline(always)]
    fn bells_on_fill(&self, s: u64) {
        if Self::level_bells(s) != 0 {
            self.sync_bell(true);
        } else if self.words.edges().load(SeqCst) != 0 {
            self.ring_edge();
        }
    }

    /// One ring for edge-only consumers, then a look for level consumers: if one is
    /// registered and the count is 0, [`sync_bell`](Self::sync_bell) from a drain. A level
    /// consumer that registered after this ringer looked, synced, and saw the count emptied
    /// (and drained) before this ring landed would otherwise be left with the doorbell rung
    /// at count 0 (module docs, "Edge-only consumers").
    #[inline(never)]
    fn ring_edge(&self) {
        self.os.ring();
        crate::loom::dekker_fence();
        if Self::level_bells(self.words.sleepers().load(SeqCst)) != 0 && self.count() == 0 {
            self.sync_bell(false);
        }
    }

    /// After a consumption took the count from `old` to `new`: wake sleeping writers, drain
    /// the doorbell on the positive → 0 edge.
    #[inline(always)]
    fn after_consume(&self, old: u64, new: u64) {
        crate::loom::dekker_fence();
        let s = self.words.sleepers().load(SeqCst);
        if s != 0 {
            self.after_consume_slow(s, old, new);
        }
    }

    /// [`after_consume`](Self::after_consume) when someone may sleep (`s`: `sleepers`).
    #[inline(never)]
    fn after_consume_slow(&self, s: u64, old: u64, new: u64) {
        if (s >> FIELD_BITS) & FIELD != 0 {
            // Every waiting writer, blocked (futex) or async (doorbell pulse): each needs
            // its own amount of room, so each must look.
            self.wake(Futex::Writers, Wait::Never);
        }
        if new == 0 && old != 0 && Self::level_bells(s) != 0 {
            self.sync_bell(false);
        }
    }

    /// Wake the sleepers of `which`: clear the word's flags and bump its sequence (one
    /// CAS), then ring the sleep bell if its holder announced itself, `FUTEX_WAKE` every
    /// thread in `FUTEX_WAIT` on the word if the wait flag was set, and pulse the doorbell
    /// if an async writer asked for it (module docs, "Dead sleepers"). A registered sleeper
    /// that never set a flag (a dead peer's leftover count) costs two atomics here, no
    /// syscall.
    fn wake(&self, which: Futex, wait: Wait) {
        let flags = self.claim_wake(which);
        self.wake_with(which, flags, wait);
    }

    /// The word's half of [`wake`](Self::wake): clear `which`'s flags and bump its sequence
    /// in one CAS, and leave this CPU in the waker word if a flag says someone is (about to
    /// be) in the kernel. The flags it cleared.
    #[inline(never)]
    fn claim_wake(&self, which: Futex) -> u32 {
        let word = self.word(which);
        // Clear and bump in one RMW: a sleeper's flag is set either before it (we see it)
        // or not at all (its CAS finds the sequence moved and it looks again). Two RMWs
        // would let a sleeper set WAIT in between and enter FUTEX_WAIT before the bump,
        // on a value no one wakes (the futex loom models find that with 3 preemptions).
        let mut cur = word.load(SeqCst);
        let mut flags = FLAGS; // a peer hammering the word: wake and pulse anyway
        for _ in 0..MAX_CAS {
            let next = (cur & !FLAGS).wrapping_add(SEQ_STEP);
            match word.compare_exchange(cur, next, SeqCst, SeqCst) {
                Ok(_) => {
                    flags = cur & FLAGS;
                    break;
                }
                Err(seen) => cur = seen,
            }
        }
        // The ring flag is the readers' alone (a peer's in `wseq` is ignored).
        let ring = which == Futex::Readers && flags & RING_FLAG != 0;
        if flags & WAIT_FLAG != 0 || ring {
            if let Some(w) = self.words.waker_cpu(which) {
                // `NO_CPU` + 1 wraps to 0: "unknown".
                w.store(current_cpu().wrapping_add(1), Relaxed);
            }
        }
        flags
    }

    /// The OS's half of [`wake`](Self::wake): the syscalls `flags` (from
    /// [`claim_wake`](Self::claim_wake)) ask for, in the caller's frame.
    #[inline(always)]
    fn wake_with(&self, which: Futex, flags: u32, wait: Wait) {
        if which == Futex::Readers && flags & RING_FLAG != 0 {
            self.os.bell_ring(wait);
        }
        if flags & WAIT_FLAG != 0 {
            self.os.futex_wake(which, self.word(which), u32::MAX);
        }
        if which == Futex::Writers && flags & PULSE_FLAG != 0 {
            self.os.pulse();
        }
    }

    /// The futex word of `which`.
    #[inline(always)]
    fn word(&self, which: Futex) -> &AtomicU32 {
        match which {
            Futex::Readers => self.words.rseq(),
            Futex::Writers => self.words.wseq(),
        }
    }

    /// One sleeper of `which` in `sleepers`.
    #[inline(always)]
    fn sleeper(which: Futex) -> u64 {
        match which {
            Futex::Readers => READER,
            Futex::Writers => WRITER,
        }
    }

    /// Set `flag` in `word`, whose sequence was `seq`: `Some(value)` (the word's value with
    /// the flag, to sleep on), or `None` if the sequence moved (a wake came: look again).
    fn announce(word: &AtomicU32, seq: u32, flag: u32) -> Option<u32> {
        let mut cur = word.load(SeqCst);
        for _ in 0..MAX_CAS {
            if cur & !FLAGS != seq & !FLAGS {
                return None;
            }
            if cur & flag != 0 {
                return Some(cur);
            }
            match word.compare_exchange(cur, cur | flag, SeqCst, SeqCst) {
                Ok(_) => return Some(cur | flag),
                Err(seen) => cur = seen,
            }
        }
        None
    }

    /// Make the doorbell agree with `count > 0`, starting with `ring` (module docs).
    pub(crate) fn sync_bell(&self, mut ring: bool) {
        for _ in 0..BELL_ROUNDS {
            if ring {
                self.os.ring();
            } else {
                self.os.drain();
            }
            crate::loom::dekker_fence();
            let readable = self.count() > 0;
            if readable == ring {
                return;
            }
            ring = readable;
        }
        if ring {
            self.os.ring();
        }
    }

    /// Register a level doorbell consumer: from now on the doorbell mirrors `count > 0`.
    pub(crate) fn arm_bell(&self) {
        self.words.sleepers().fetch_add(BELL, SeqCst);
        crate::loom::dekker_fence();
        self.sync_bell(self.count() > 0);
    }

    /// Unregister a level doorbell consumer.
    pub(crate) fn disarm_bell(&self) {
        self.words.sleepers().fetch_sub(BELL, SeqCst);
    }

    /// Register an edge-only doorbell consumer: from now on every fill rings the doorbell
    /// and nothing drains it for this consumer. If the count is positive already, one ring
    /// now, so that a consumer registering then gets an edge too (module docs, "Edge-only
    /// consumers"). The caller's edge-triggered watch of the doorbell is registered before.
    pub(crate) fn arm_edge_bell(&self) {
        self.words.edges().fetch_add(1, SeqCst);
        crate::loom::dekker_fence();
        if self.count() > 0 {
            self.ring_edge();
        }
    }

    /// Unregister an edge-only doorbell consumer.
    pub(crate) fn disarm_edge_bell(&self) {
        self.words.edges().fetch_sub(1, SeqCst);
    }

    /// Register one of this process's read futures as an edge-only consumer, without the
    /// ring for a positive count: the future looks at the count itself after this (module
    /// docs, "Async readers"). Its process's edge-triggered watch of the doorbell is
    /// registered before.
    pub(crate) fn arm_edge_waiter(&self) {
        self.edge_waiters.fetch_add(1, SeqCst);
        self.words.edges().fetch_add(1, SeqCst);
        crate::loom::dekker_fence();
    }

    /// Unregister a read future of this process (completed or dropped). `took`: it
    /// completed with a read. A Semaphore read that leaves units while another read
    /// future of this process is registered rings a new edge: the one it was woken by was
    /// the process's only one (module docs, "Async readers").
    pub(crate) fn disarm_edge_waiter(&self, took: bool) {
        self.words.edges().fetch_sub(1, SeqCst);
        self.edge_waiters.fetch_sub(1, SeqCst);
        if took && self.mode == Mode::Semaphore {
            crate::loom::dekker_fence();
            if self.edge_waiters.load(SeqCst) != 0 && self.count() > 0 {
                self.ring_edge();
            }
        }
    }

    /// The edge-only doorbell consumers the region counts now (for tests and `Debug`).
    pub(crate) fn edge_bells(&self) -> u64 {
        self.words.edges().load(SeqCst)
    }

    /// The blocking call of `read`/`read_timeout` (`Futex::Readers`) and `write`
    /// (`Futex::Writers`), once its first try failed. `step` is the non-blocking attempt:
    /// `Ok(None)` while it would block. `step` does not check the header: the caller does,
    /// before the first try, and [`wait_prepare`](Self::wait_prepare) again after every
    /// sleep, so an operation fails with `InvalidData` if the header was overwritten before
    /// it began or while it slept.
    ///
    /// The first try is step 1 of the in-process wait (`wait_queue::thread`): try once
    /// before anything else. A call that finds what it wants at once teaches the gauge
    /// nothing: counting it as a spin that paid would clear the misses of the spins that
    /// did not (in a ping-pong sharing one CPU, every other read finds the answer already
    /// there), and the site would never stop spinning.
    ///
    /// Inlined into the caller ([`read`](Self::read), [`write`](Self::write), and through
    /// them the public calls), and so is the sleep itself; what comes before a sleep
    /// ([`wait_prepare`](Self::wait_prepare): the spin, the registration) and after it
    /// ([`wait_after`](Self::wait_after)) is out of line (module docs, "Syscalls in the
    /// caller's frame").
    #[inline(always)]
    fn block<R>(
        &self,
        which: Futex,
        deadline: Option<Instant>,
        step: impl Fn() -> io::Result<Option<R>>,
    ) -> io::Result<R> {
        let mut w = Waiting {
            which,
            deadline,
            woken: false,
            idle_rounds: 0,
            spin: Spin::new(SpinPlan::Adaptive(self.spin.budget_ns())),
            parked: false,
            fresh: true,
        };
        loop {
            let (slot, value) = match self.wait_prepare(&mut w, &step)? {
                Prep::Done(r) => return Ok(r),
                Prep::Sleep { slot, value } => (slot, value),
            };
            let woke = match value {
                // The sequence moved between the registration and the announcement: a
                // wake came, look again.
                None => Ok(Woke::Maybe),
                Some(_) if slot => self.os.bell_sleep(deadline),
                Some(v) => self.os.futex_wait(which, self.word(which), v, deadline),
            };
            if let Some(r) = self.wait_after(&mut w, slot, woke, &step)? {
                return Ok(r);
            }
        }
    }

    /// [`block`](Self::block) before a sleep: on the first round, spin (trying `step` when
    /// the count moves); on the others, check the header and try `step` again. Then
    /// register, look once more, and announce the sleep: on the sleep bell if this is a
    /// reader that got it, else on the futex word.
    #[inline(never)]
    fn wait_prepare<R>(
        &self,
        w: &mut Waiting,
        step: &impl Fn() -> io::Result<Option<R>>,
    ) -> io::Result<Prep<R>> {
        let which = w.which;
        let word = self.word(which);
        let me = Self::sleeper(which);
        if std::mem::take(&mut w.fresh) {
            // Spin, unregistered, on a load of the count: a peer that answers within the
            // learned budget costs neither process a syscall. The waker publishes its CPU
            // in the region (`Words::waker_cpu`), so the gauge's "woken from my own CPU"
            // rule works across processes too: two processes that share a CPU stop
            // spinning.
            let probe = || {
                let c = self.count();
                match which {
                    Futex::Readers => c != 0,
                    Futex::Writers => c < mode::LIMIT,
                }
            };
            while w.spin.spin(w.deadline, probe) {
                if let Some(r) = step()? {
                    self.spin.learn(w.spin.spun());
                    return Ok(Prep::Done(r));
                }
            }
            // The first round registers at once: the try before the spin (or the spin's
            // last) just failed, and the look after registering looks again anyway.
        } else {
            self.check_header()?;
            if let Some(r) = step()? {
                if w.woken {
                    self.hand_on(which, Self::may_wait(w.deadline));
                }
                if w.parked {
                    let from = self
                        .words
                        .waker_cpu(which)
                        .map_or(NO_CPU, |c| c.load(Relaxed).wrapping_sub(1));
                    self.spin.learn(w.spin.parked(true, from));
                }
                return Ok(Prep::Done(r));
            }
        }
        let seq = word.load(SeqCst);
        self.words.sleepers().fetch_add(me, SeqCst);
        crate::loom::dekker_fence();
        match step() {
            Ok(None) => {
                // A reader sleeps on the sleep bell if it is free (module docs), else in
                // FUTEX_WAIT.
                let slot = which == Futex::Readers && self.take_slot();
                let flag = if slot { RING_FLAG } else { WAIT_FLAG };
                let value = Self::announce(word, seq, flag);
                if value.is_some() && !w.parked {
                    w.spin.before_park(Some(&self.spin));
                    w.parked = true;
                }
                Ok(Prep::Sleep { slot, value })
            }
            other => {
                self.words.sleepers().fetch_sub(me, SeqCst);
                if let Ok(Some(_)) = other {
                    if w.woken {
                        self.hand_on(which, Self::may_wait(w.deadline));
                    }
                }
                other.map(|r| Prep::Done(r.expect("matched Some")))
            }
        }
    }

    /// [`block`](Self::block) after a sleep (or a skipped one): leave the sleep bell and
    /// unregister; then, timed out, one last try; woken, `None` (the caller goes round
    /// again), backing off after many rounds that found nothing.
    #[inline(never)]
    fn wait_after<R>(
        &self,
        w: &mut Waiting,
        slot: bool,
        woke: io::Result<Woke>,
        step: &impl Fn() -> io::Result<Option<R>>,
    ) -> io::Result<Option<R>> {
        if slot {
            self.words.rslot().store(0, SeqCst);
        }
        self.words
            .sleepers()
            .fetch_sub(Self::sleeper(w.which), SeqCst);
        match woke? {
            Woke::TimedOut => {
                self.spin.learn(WaitEnd::TimedOut);
                self.check_header()?;
                match step()? {
                    Some(r) => Ok(Some(r)),
                    None => Err(timed_out()),
                }
            }
            Woke::Maybe => {
                w.woken = true;
                w.idle_rounds += 1;
                if w.idle_rounds >= SPURIOUS_BEFORE_BACKOFF {
                    self.os.backoff(w.deadline);
                }
                Ok(None)
            }
        }
    }

    /// Take the readers' sleep bell (module docs, "The sleep bell"): whether this reader
    /// holds it now. One load when it is held.
    #[inline(always)]
    fn take_slot(&self) -> bool {
        let slot = self.words.rslot();
        slot.load(Relaxed) == 0 && slot.compare_exchange(0, 1, SeqCst, SeqCst).is_ok()
    }

    /// A woken reader that succeeded and left units (Semaphore) passes the wake on.
    /// Only Semaphore can leave units: a Counter or AutoReset read takes them all, and a
    /// write after it is a 0 → positive edge, which wakes the sleepers itself.
    #[inline(always)]
    fn hand_on(&self, which: Futex, wait: Wait) {
        if which == Futex::Readers && self.mode == Mode::Semaphore && self.count() > 0 {
            crate::loom::dekker_fence();
            if self.words.sleepers().load(SeqCst) & FIELD != 0 {
                self.wake(Futex::Readers, wait);
            }
        }
    }

    /// Whether a blocking call with this deadline may wait for a peer ([`Wait`]).
    #[inline(always)]
    fn may_wait(deadline: Option<Instant>) -> Wait {
        if deadline.is_none() {
            Wait::Allowed
        } else {
            Wait::Never
        }
    }

    /// Blocking read until `deadline` (`None`: forever).
    #[inline(always)]
    pub(crate) fn read(&self, deadline: Option<Instant>) -> io::Result<u64> {
        self.check_header()?;
        if let Some(v) = self.take()? {
            return Ok(v);
        }
        self.block(Futex::Readers, deadline, || self.take())
    }

    /// Blocking write until `deadline` (`None`: forever).
    #[inline(always)]
    pub(crate) fn write(&self, n: u64, deadline: Option<Instant>) -> io::Result<()> {
        let wait = Self::may_wait(deadline);
        // The first try by hand, not through the closure, and with the readers' wake
        // inlined: its ring stays in the caller's frame.
        self.check_header()?;
        if self.put_then(n, |old, new| self.after_write_here(old, new, wait))? {
            return Ok(());
        }
        self.write_blocked(n, deadline)
    }

    /// [`write`](Self::write) when the count had no room: out of line, so that the write
    /// that finds room (nearly every one) keeps a small frame. A writer that sleeps here
    /// returns through this frame, which a full count makes rare.
    #[inline(never)]
    fn write_blocked(&self, n: u64, deadline: Option<Instant>) -> io::Result<()> {
        let wait = Self::may_wait(deadline);
        self.block(Futex::Writers, deadline, || {
            Ok(if self.put(n, wait)? { Some(()) } else { None })
        })
    }

    /// Register an async writer waiting for room: from now on every consumption pulses the
    /// doorbell ([`Os::pulse`]). The caller watches the doorbell edge-triggered *before*
    /// this (so that a pulse after it is kept), then re-checks with `try_write`.
    pub(crate) fn arm_room(&self) {
        self.words.sleepers().fetch_add(WRITER, SeqCst);
        crate::loom::dekker_fence();
    }

    /// Before each re-check of a registered async writer: ask the next consumption for a
    /// doorbell pulse (the flag is cleared by the consumption that pulses).
    pub(crate) fn want_pulse(&self) {
        self.words.wseq().fetch_or(PULSE_FLAG, SeqCst);
    }

    /// Unregister an async writer ([`arm_room`](Self::arm_room)).
    pub(crate) fn disarm_room(&self) {
        self.words.sleepers().fetch_sub(WRITER, SeqCst);
    }

    /// The raw sleepers word (for tests and `Debug`): (readers, writers, level bells).
    pub(crate) fn sleepers(&self) -> (u64, u64, u64) {
        let s = self.words.sleepers().load(SeqCst);
        (s & FIELD, (s >> FIELD_BITS) & FIELD, Self::level_bells(s))
    }
}

#[cfg(test)]
mod tests;
