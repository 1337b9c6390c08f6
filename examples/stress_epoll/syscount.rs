//! Syscall counting for `doorbell`: the kernel's per-thread read/write accounting, a probe
//! for "is that thread asleep", and what one measurement counted.

use std::time::{Duration, Instant};

/// The calling thread's read(2)- and write(2)-family syscall counts, as the kernel accounts
/// them per thread (`/proc/thread-self/io`: `syscr`, `syscw`). They see every read and write
/// the thread makes — doorbell or not, evfd's or anyone's — but no other syscall (futex,
/// epoll_wait). Each probe is one `pread(2)` on a file this thread opened; [`RwProbe::cost`]
/// is what one probe adds, measured, and [`RwProbe::since`] subtracts it.
pub struct RwProbe {
    file: std::fs::File,
    cost: (u64, u64),
}

impl RwProbe {
    /// `None` where the kernel has no per-thread I/O accounting.
    pub fn new() -> Option<RwProbe> {
        let file = std::fs::File::open("/proc/thread-self/io").ok()?;
        let mut p = RwProbe { file, cost: (0, 0) };
        let a = p.now()?;
        let b = p.now()?;
        p.cost = (b.0 - a.0, b.1 - a.1);
        Some(p)
    }

    /// (syscr, syscw) now.
    pub fn now(&self) -> Option<(u64, u64)> {
        use std::os::unix::fs::FileExt;
        let mut buf = [0u8; 512];
        let n = self.file.read_at(&mut buf, 0).ok()?;
        let text = std::str::from_utf8(&buf[..n]).ok()?;
        let field = |name: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.trim().parse::<u64>().ok())
        };
        Some((field("syscr:")?, field("syscw:")?))
    }

    /// (reads, writes) since `start`, a probe `probes` probes ago, without the probes.
    pub fn since(&self, start: (u64, u64), probes: u64) -> Option<(u64, u64)> {
        let now = self.now()?;
        let net = |now: u64, start: u64, cost: u64| (now - start).saturating_sub(probes * cost);
        Some((
            net(now.0, start.0, self.cost.0),
            net(now.1, start.1, self.cost.1),
        ))
    }
}

/// Whether thread `tid` of this process sleeps, from its /proc stat (state `S`). Each
/// check is one `pread(2)`, counted in `checks`, so that the caller's read count can leave
/// them out.
pub struct SleepProbe {
    file: Option<std::fs::File>,
    pub checks: u64,
}

impl SleepProbe {
    pub fn new(tid: i32) -> SleepProbe {
        let file = std::fs::File::open(format!("/proc/self/task/{tid}/stat")).ok();
        SleepProbe { file, checks: 0 }
    }

    fn asleep(&mut self) -> bool {
        use std::os::unix::fs::FileExt;
        let Some(f) = &self.file else { return false };
        let mut buf = [0u8; 512];
        self.checks += 1;
        let Ok(n) = f.read_at(&mut buf, 0) else {
            return false;
        };
        let s = String::from_utf8_lossy(&buf[..n]);
        s.rfind(')')
            .and_then(|i| s[i + 1..].trim_start().chars().next())
            == Some('S')
    }

    /// Wait (≤ 10 ms) until the thread sleeps, so that the next notify finds it in
    /// `epoll_wait`. No /proc, or a thread that does not sleep (a ptrace stop is `t`),
    /// times out and goes on: the syscall counts are the same either way; only the
    /// "sleeping" premise is weaker.
    pub fn until_asleep(&mut self) {
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(10) {
            if self.asleep() {
                return;
            }
            std::thread::yield_now();
        }
    }
}

pub fn gettid() -> i32 {
    rustix::thread::gettid().as_raw_nonzero().get()
}

/// What one doorbell measurement counted.
#[derive(Default, Clone, Copy)]
pub struct Counted {
    /// Syscalls per op as the kernel counted them (`RwProbe`), if it can.
    pub kernel: Option<f64>,
    /// Syscalls per op by the program's own counter: `evfd::stats::doorbell_stats()` deltas for
    /// evfd, the `write`/`read` calls it made for the eventfd twin.
    pub own: f64,
}

impl Counted {
    /// The figure reported: the kernel's count where there is one.
    pub fn value(&self) -> f64 {
        self.kernel.unwrap_or(self.own)
    }
}
