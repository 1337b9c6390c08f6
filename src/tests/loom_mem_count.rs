//! loom models of the count memory keeps (`sys::mem_count`): memory operations against the
//! flush that moves the count into the kernel. The kernel's count is an atomic here, the
//! base count 1 at the start; a kernel operation waits for the flush (`MemCount::ready`).
//! Each model checks that every unit written is read or left in the kernel exactly once,
//! and that the flush found the base where it expected it; the blocking read (asleep on the
//! count's bell, a spin here) is rung by a write and by the flush.

use std::sync::Arc;

use loom::sync::atomic::{AtomicU64, Ordering::SeqCst};
use loom::thread;

use super::model;
use crate::sys::mem_count::MemCount;

/// A count in memory (`initial`) over a kernel count that holds the base.
struct Counted {
    mem: MemCount,
    kernel: AtomicU64,
}

impl Counted {
    fn new(initial: u64) -> Arc<Counted> {
        Arc::new(Counted {
            mem: MemCount::on(initial),
            kernel: AtomicU64::new(1),
        })
    }

    /// The flush, the kernel's side an atomic: from the base, `v` (a read of the base for
    /// 0, a write of `v − 1` else), then the pending units.
    fn flush(&self) {
        self.mem
            .flush_with(
                |v| {
                    if v == 0 {
                        let base = self.kernel.swap(0, SeqCst);
                        assert_eq!(base, 1, "a kernel operation came between swap and flush");
                    } else {
                        self.kernel.fetch_add(v - 1, SeqCst);
                    }
                    Ok(())
                },
                |p| {
                    self.kernel.fetch_add(p, SeqCst);
                },
                |_| {},
            )
            .unwrap();
    }

    /// A write of `n`: into memory, or once flushed, into the kernel.
    fn write(&self, n: u64) {
        match self.mem.add(n) {
            Some(r) => {
                r.unwrap();
                // The futex wake is the bell's move here (the sleeper spins on it).
                self.mem.ring(|_| {});
            }
            None => {
                self.mem.ready(|| self.flush()).unwrap();
                self.kernel.fetch_add(n, SeqCst);
            }
        }
    }

    /// A blocking read of an empty count: asleep on the bell (here a spin on it) until a
    /// write or the flush moves it; `None` once flushed. A ring lost spins for ever, which
    /// fails the model.
    fn blocking_read(&self) -> Option<u64> {
        self.mem
            .take_waiting(|bell, seen| {
                while bell.load(SeqCst) == seen {
                    thread::yield_now();
                }
                false
            })
            .map(|r| r.expect("no deadline"))
    }

    /// A read of the whole count: from memory, or once flushed, from the kernel.
    fn read(&self) -> u64 {
        match self.mem.take() {
            Some(r) => r.unwrap_or(0),
            None => {
                self.mem.ready(|| self.flush()).unwrap();
                self.kernel.swap(0, SeqCst)
            }
        }
    }
}

#[test]
fn write_vs_flush_from_zero() {
    model("write_vs_flush_from_zero", 4, || {
        let c = Counted::new(0);
        let w = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.write(1))
        };
        c.flush();
        w.join().unwrap();
        assert!(!c.mem.kept());
        assert_eq!(c.kernel.load(SeqCst), 1, "the unit is in the kernel, once");
    });
}

#[test]
fn read_vs_flush() {
    model("read_vs_flush", 4, || {
        let c = Counted::new(2);
        let r = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.read())
        };
        c.flush();
        let got = r.join().unwrap();
        assert_eq!(
            got + c.kernel.load(SeqCst),
            2,
            "the count is read or left, once"
        );
    });
}

#[test]
fn write_then_read_vs_flush() {
    model("write_then_read_vs_flush", 4, || {
        let c = Counted::new(1);
        let t = {
            let c = Arc::clone(&c);
            thread::spawn(move || {
                c.write(1);
                c.read()
            })
        };
        c.flush();
        let got = t.join().unwrap();
        assert!(
            got >= 1,
            "the read follows its own write: it sees at least that unit"
        );
        assert_eq!(
            got + c.kernel.load(SeqCst),
            2,
            "two units, each read or left once"
        );
    });
}

/// A blocking read of an empty count against a write: the write finds the sleeper counted,
/// or the sleeper's look finds the unit.
#[test]
fn blocking_read_vs_write() {
    model("blocking_read_vs_write", 4, || {
        let c = Counted::new(0);
        let w = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.write(1))
        };
        assert_eq!(c.blocking_read(), Some(1));
        w.join().unwrap();
        assert!(c.mem.kept(), "memory keeps the count still");
    });
}

/// A blocking read of an empty count against a flush: the flush rings the sleeper, which
/// finds the count gone to the kernel (and waits there).
#[test]
fn blocking_read_vs_flush() {
    model("blocking_read_vs_flush", 4, || {
        let c = Counted::new(0);
        let f = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.flush())
        };
        assert_eq!(c.blocking_read(), None);
        f.join().unwrap();
        assert_eq!(c.kernel.load(SeqCst), 0);
    });
}

#[test]
fn two_flushes() {
    model("two_flushes", 4, || {
        let c = Counted::new(3);
        let f = {
            let c = Arc::clone(&c);
            thread::spawn(move || c.flush())
        };
        c.flush();
        // The second flush returned only once the kernel held the count.
        assert_eq!(c.kernel.load(SeqCst), 3);
        f.join().unwrap();
        c.write(2);
        assert_eq!(c.read(), 5);
    });
}
