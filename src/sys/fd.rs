//! [`Fd`]: a kernel fd the crate holds, and whether its open file description can be in
//! anyone else's hands.
//!
//! `O_NONBLOCK` belongs to the open file description, which every duplicate of the fd
//! shares, in every process it reaches; whoever holds one can clear the flag. So a call on
//! a description a peer may hold must not rely on it (`NowProbe`, docs/semantics.md §6.4):
//! an eventfd read takes `preadv2(RWF_NOWAIT)` and a write a zero-timeout `poll(2)` first.
//! A description nobody else can reach needs neither: the crate made it `O_NONBLOCK`, and
//! only the crate's own calls touch it, so a plain `read(2)` or `write(2)` never waits
//! (one syscall, and ~90 ns less than `preadv2` per read on the machines measured;
//! docs/handoff.md).
//!
//! A description is *private* while all of these hold:
//!
//! - the crate made it, close-on-exec (an adopted fd may have duplicates anywhere; one that
//!   survives `exec` reaches the new program);
//! - no borrow of it was handed to the caller ([`Fd::lend`]: the public `AsFd`/`AsRawFd`,
//!   a clone, an fd given away): Rust's I/O safety makes a lent borrow the only way other
//!   code can operate on it. The crate's own registrations with a kernel epoll (an
//!   `Epoll`'s, mio's, tokio's reactor) lend nothing: `epoll_ctl` cannot change the
//!   description's flags; where the registering code can only take the public borrow
//!   (tokio's `AsyncFd`), [`register_unlent`] keeps that one borrow from counting;
//! - the process has not forked since (`fork::forked_since`):
//!   the child holds the description too, and may lend its copy. The fork count is read
//!   at birth inside a private section (`fork::birth`): a description made while a fork
//!   is under way, which the child may hold, starts shared.
//!
//! The first two are a flag, set once and never cleared; the fork count moves only once no
//! private section runs. A call that uses privacy (an eventfd's `eventfd::read_fd` and
//! `write_fd`, through [`Fd::guarded`]) makes its look (the flag, the fork count) and its
//! syscall inside a *private section* (`super::fork::private_section`): a count of the
//! sections running, on its thread's shard, which a *closer* closes
//! (`fork::close_private_sections`: a section that starts then is told to take the shared
//! path) and then waits to drain. There are two closers:
//!
//! - a fork's `prepare`, which then moves the fork count: the child exists only after
//!   every private syscall that could reach it returned;
//! - the first [`Fd::lend`], after it set the flag: the borrow goes out only once no call
//!   that saw the description private is still on its way to the kernel (each is one
//!   syscall that does not wait: the description is still `O_NONBLOCK`, since the borrow
//!   that could change that has not been handed out). A call that starts after the flag
//!   sees it.
//!
//! Two atomic RMWs per private call (its shard's increment and decrement, on a line its
//! thread keeps), three loads and the thread's own count of its sections (a plain cell),
//! no lock: the calls stay async-signal-safe. A closer waits for the private calls of every
//! thread, on any fd, which is what a lend pays once per description. The first lend is
//! async-signal-safe too (`fork::close_for_lend`): made by a signal handler that
//! interrupted a private call or a closer on its thread, which cannot go on before the
//! handler returns, it waits for the other threads' calls only and takes no turn
//! (`fork::CLOSING`). The one thing it cannot wait for is that interrupted call: if it is
//! a private call on the very fd the handler lends, its plain syscall comes after the
//! borrow is out, and waits if the handler (or whoever it gave the borrow to) cleared
//! `O_NONBLOCK` before returning.

use crate::loom::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use super::fork;
use super::mem_count::{Flushing, MemCount};

/// A kernel fd the crate holds (an eventfd, a pipe end), with what says whether its open
/// file description is private (module docs). On a line of its own: the private calls of
/// other threads read `lent`, and an epoll's delivery upgrades and drops a weak reference
/// to the `Arc` that holds it (its counts, which the `Arc` puts first).
#[derive(Debug)]
#[repr(align(64))]
pub(crate) struct Fd {
    /// The count kept in memory while the description is private ([`MemCount`]); off for
    /// every fd but a private AutoReset `KernelNotifier`'s.
    mem: MemCount,
    fd: OwnedFd,
    /// Set once by [`Fd::lend`] (or at birth, [`Fd::shared`]) and never cleared: the
    /// description may be shared.
    lent: AtomicBool,
    /// [`fork::forks`] when made.
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    born: u32,
}

impl Fd {
    /// A description the crate just made, close-on-exec: private until lent or forked (or
    /// shared from the start, made while a fork was being prepared: `fork::birth`).
    pub(crate) fn private(fd: OwnedFd) -> Fd {
        let (shared, born) = fork::birth();
        Fd {
            mem: MemCount::off(),
            fd,
            lent: AtomicBool::new(shared),
            born,
        }
    }

    /// [`Fd::private`] for an eventfd whose count memory keeps while the description is
    /// private ([`MemCount`]): `fd` holds the base count of 1, and `initial` is the count.
    /// Made while a fork is being prepared (shared from birth), the count goes to the
    /// kernel at once. The caller puts it where it stays and then calls
    /// [`Fd::register_mem`].
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn private_counted(fd: OwnedFd, initial: u64) -> io::Result<Fd> {
        let mut f = Fd::private(fd);
        f.mem = MemCount::on(initial);
        if f.lent.load(SeqCst) {
            f.flush()?;
        }
        Ok(f)
    }

    /// Enter the registry a fork's `prepare` flushes (`super::mem_count::flush_all`).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn register_mem(self: &std::sync::Arc<Fd>) {
        if self.mem.kept() {
            super::mem_count::register(std::sync::Arc::downgrade(self) as _);
        }
    }

    /// A description that may be shared from the start (adopted, inheritable across
    /// `exec`, or handed to a peer by design).
    pub(crate) fn shared(fd: OwnedFd) -> Fd {
        Fd {
            mem: MemCount::off(),
            fd,
            lent: AtomicBool::new(true),
            born: fork::forks(),
        }
    }

    /// The borrow handed to the caller (or to code the crate does not control): from now on
    /// the description may be shared. The first one waits for the private calls running
    /// (module docs): any fd's, each one syscall that does not wait — but, in a signal
    /// handler, not the one its thread was making (`fork::close_for_lend`).
    pub(crate) fn lend(&self) -> BorrowedFd<'_> {
        // Lent already (every borrow after the first): a load, no RMW.
        if !self.lent.load(SeqCst) && !registering(self) && !self.lent.swap(true, SeqCst) {
            fork::close_for_lend();
            // The borrow goes out with the count in the kernel.
            if let Err(e) = self.flush() {
                debug_assert!(false, "flush at lend: {e}");
            }
        }
        self.fd.as_fd()
    }

    /// Whether the description is private now (module docs): a hint (exact only inside
    /// [`Fd::guarded`]). (Only eventfds use privacy: Linux.)
    #[cfg(test)]
    pub(crate) fn is_private(&self) -> bool {
        !self.lent.load(SeqCst) && !fork::forked_since(self.born)
    }

    /// Give the fd away (the owner's `Into<OwnedFd>`): nothing else holds it. The count
    /// goes to the kernel first ([`Fd::flush`]; nothing to do if it is there already).
    pub(crate) fn into_owned(self) -> OwnedFd {
        if let Err(e) = self.flush() {
            debug_assert!(false, "flush at into_owned: {e}");
        }
        self.fd
    }

    /// The count memory keeps, taken whole (an AutoReset read; `WouldBlock` at 0): `None`
    /// when memory does not keep it (`super::mem_count`).
    #[inline]
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn mem_take(&self) -> Option<io::Result<u64>> {
        self.mem
            .take()
            .map(|r| r.map_err(|()| io::Error::from(rustix::io::Errno::AGAIN)))
    }

    /// Add `n` to the count memory keeps and make the kernel's wake, a `write(2)` of 0
    /// (`WouldBlock` if it would pass `LIMIT`): `None` when memory does not keep it.
    #[inline]
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn mem_add(&self, n: u64) -> Option<io::Result<()>> {
        Some(match self.mem.add(n)? {
            Ok(()) => {
                self.mem.ring(super::mem_count::wake);
                super::mem_count::write(self.fd.as_fd(), 0)
            }
            Err(()) => Err(io::Error::from(rustix::io::Errno::AGAIN)),
        })
    }

    /// A blocking read of the count memory keeps: the whole count once it is non-zero,
    /// asleep on the count's futex meanwhile, `TimedOut` at `deadline`; `None` once memory
    /// does not keep it (`super::mem_count`, [`MemCount::take_waiting`]).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn mem_take_waiting(
        &self,
        deadline: Option<std::time::Instant>,
    ) -> Option<io::Result<u64>> {
        self.mem
            .take_waiting(super::mem_count::sleep_until(deadline))
            .map(|r| r.map_err(|()| crate::error::timed_out()))
    }

    /// The count memory keeps, or `None`.
    pub(crate) fn mem_peek(&self) -> Option<u64> {
        self.mem.peek()
    }

    /// Whether memory keeps (or is flushing) the count: kernel registrations of the fd must
    /// be edge-triggered (`super::mem_count`).
    pub(crate) fn mem_kept(&self) -> bool {
        self.mem.kept()
    }

    /// `events` as a kernel registration of the fd is made with them: edge-triggered while
    /// memory keeps the count, whose base count would keep a level-triggered item ready for
    /// ever (`super::mem_count`).
    pub(crate) fn kernel_events(&self, events: crate::events::Events) -> crate::events::Events {
        if self.mem_kept() {
            events | crate::events::Events::ET
        } else {
            events
        }
    }

    /// Before a kernel call on the count: memory must not keep it, and a flush under way
    /// finishes first. `Err` on the flusher's own thread (a signal handler that interrupted
    /// it), which cannot wait for it: the caller takes the handler's way
    /// (`super::mem_count`).
    #[inline]
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn kernel_ready(&self) -> Result<(), Flushing> {
        self.mem.ready(|| {
            if let Err(e) = self.flush() {
                debug_assert!(false, "flush: {e}");
            }
        })
    }

    /// A handler's write of `n` during its thread's flush of this fd: added to the pending
    /// word, which the flusher writes after its own (`WouldBlock` if it would not fit).
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn add_pending(&self, v: Flushing, n: u64) -> io::Result<()> {
        self.mem
            .add_pending(v, n)
            .map_err(|()| io::Error::from(rustix::io::Errno::AGAIN))
    }

    /// Move the count into the kernel for good (`super::mem_count`, "The flush"). A
    /// flush under way on another thread is waited for.
    pub(crate) fn flush(&self) -> io::Result<()> {
        self.mem.flush(self.fd.as_fd())
    }

    /// `call(fd, private)`, told whether the description is private, with the look and
    /// `call`'s one syscall inside a private section (module docs): neither a fork nor a
    /// first lend comes between them. A lent fd costs one load.
    #[inline]
    #[cfg_attr(not(any(target_os = "linux", target_os = "android")), allow(dead_code))]
    pub(crate) fn guarded<R>(&self, call: impl FnOnce(BorrowedFd<'_>, bool) -> R) -> R {
        let fd = self.fd.as_fd();
        if self.lent.load(SeqCst) {
            return call(fd, false);
        }
        fork::private_section(|open| {
            call(
                fd,
                open && !fork::forked_since(self.born) && !self.lent.load(SeqCst),
            )
        })
    }
}

/// A fork's `prepare` flushes every count memory keeps (`super::mem_count::flush_all`).
impl super::mem_count::Flush for Fd {
    fn flush(&self) -> io::Result<()> {
        Fd::flush(self)
    }

    fn kept(&self) -> bool {
        self.mem.kept()
    }
}

std::thread_local! {
    /// The [`Fd`] (its address) whose public borrows on this thread are a registration's
    /// ([`register_unlent`]), or 0.
    static REGISTERING: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

/// Whether `fd`'s public borrow is taken, on this thread, by a registration that
/// [`register_unlent`] runs.
fn registering(fd: &Fd) -> bool {
    REGISTERING.with(|r| r.get() == fd as *const Fd as usize)
}

/// Run `register`, a registration of `fd` with a kernel epoll by code that takes the fd
/// through its owner's public `AsRawFd` (tokio's `AsyncFd` does, and has no other way in),
/// with that borrow not counted as a lend: the registration hands the fd to `epoll_ctl`,
/// which cannot change the description's flags, and to nobody else. Borrows after it, on
/// any thread, lend as usual.
#[cfg_attr(
    not(all(feature = "tokio", any(target_os = "linux", target_os = "android"))),
    allow(dead_code)
)]
pub(crate) fn register_unlent<R>(fd: &Fd, register: impl FnOnce() -> R) -> R {
    /// Puts back the mark it replaced, however `register` leaves.
    struct Restore(usize);
    impl Drop for Restore {
        fn drop(&mut self) {
            REGISTERING.with(|r| r.set(self.0));
        }
    }
    let _restore = Restore(REGISTERING.with(|r| r.replace(fd as *const Fd as usize)));
    register()
}

/// The crate's own borrow (registrations, polls, the shared calls): not a lend.
impl AsFd for Fd {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn efd() -> OwnedFd {
        rustix::event::eventfd(
            0,
            rustix::event::EventfdFlags::NONBLOCK | rustix::event::EventfdFlags::CLOEXEC,
        )
        .unwrap()
    }

    /// Private until lent; a lend is for good; an adopted fd is shared from birth.
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn private_until_lent() {
        let f = Fd::private(efd());
        assert!(f.is_private());
        let _ = f.as_fd(); // the crate's own borrow
        assert!(f.is_private());
        let _ = f.lend();
        assert!(!f.is_private());
        assert!(!Fd::shared(efd()).is_private());
        assert!(f.guarded(|_, private| !private));
    }

    /// The first lend waits for a private call running on another thread: the borrow goes
    /// out only once no call that saw the description private is still on its way.
    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn the_first_lend_waits_for_the_private_calls_running() {
        use std::sync::atomic::AtomicBool;
        use std::sync::{mpsc, Arc};
        let f = Arc::new(Fd::private(efd()));
        let (inside, in_call) = mpsc::channel();
        let (go, leave) = mpsc::channel::<()>();
        let caller = {
            let f = Arc::clone(&f);
            std::thread::spawn(move || {
                f.guarded(|_, private| {
                    inside.send(private).unwrap();
                    leave.recv().unwrap();
                })
            })
        };
        assert!(
            in_call.recv().unwrap(),
            "the call sees the description private"
        );
        let lent = Arc::new(AtomicBool::new(false));
        let lender = {
            let (f, lent) = (Arc::clone(&f), Arc::clone(&lent));
            std::thread::spawn(move || {
                let _ = f.lend();
                lent.store(true, SeqCst);
            })
        };
        // A lend that did not wait would be done long before this.
        std::thread::sleep(std::time::Duration::from_millis(50));
        assert!(!lent.load(SeqCst), "the lend waited for the running call");
        go.send(()).unwrap();
        caller.join().unwrap();
        lender.join().unwrap();
        assert!(lent.load(SeqCst));
        assert!(
            f.guarded(|_, private| !private),
            "a later call sees it lent"
        );
        // Later lends do not wait: a call may run during them.
        f.guarded(|_, _| {
            let _ = f.lend();
        });
    }
}
