//! Timing helpers: the run configuration, threads run for a fixed time, medians and
//! spreads of interleaved repetitions, CPU pinning, busy-waiting, and the machine's name.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

/// How long and how often each row runs.
#[derive(Clone, Copy)]
pub struct Cfg {
    /// Measured time of one run of one side of a row.
    pub dur: Duration,
    /// Repetitions of each (evfd, twin) pair, interleaved; the median is reported.
    pub reps: usize,
    /// `--quick`: smaller fixed-count workloads too (`doorbell`).
    pub quick: bool,
    /// This pass runs under a [`CoTenant`]: a family runs only its `_contended` subset
    /// (the rows whose figures a busy CPU next door changes: the hand-offs and the hot
    /// paths), and its rows get the `_contended` suffix.
    pub contended: bool,
}

/// The co-tenant's command: one CPU-bound process that never sleeps, as a vCPU thread or
/// a busy service next to a device backend.
pub const CO_TENANT: &str = "while :; do :; done";

/// One CPU-bound co-tenant process (`sh -c` [`CO_TENANT`]), unpinned (every CPU this
/// process started with, whatever the spawning thread is pinned to) at this process's
/// nice level, running from [`start`](Self::start) until dropped (`SIGKILL`, reaped), or
/// until the thread that started it ends — with this process, if a signal or a `timeout`
/// kills it mid-pass (`PR_SET_PDEATHSIG`): a busy loop left behind would load every later
/// measurement on the machine.
pub struct CoTenant {
    child: std::process::Child,
    t0: Instant,
}

impl CoTenant {
    /// Start the co-tenant and give it a moment to be running.
    pub fn start() -> std::io::Result<CoTenant> {
        use std::os::unix::process::CommandExt;
        let mut cmd = std::process::Command::new("sh");
        cmd.args(["-c", CO_TENANT])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null());
        // SAFETY: the closure runs in the forked child before `exec` and makes one
        // async-signal-safe syscall (`prctl`), touching no memory of the parent's.
        unsafe {
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn()?;
        if let Some(all) = all_cpus() {
            let pid = rustix::thread::Pid::from_child(&child);
            let _ = rustix::thread::sched_setaffinity(Some(pid), all);
        }
        std::thread::sleep(Duration::from_millis(20));
        Ok(CoTenant {
            child,
            t0: Instant::now(),
        })
    }

    /// CPU seconds the co-tenant has used (`/proc/<pid>/stat` utime + stime), if readable.
    pub fn cpu_secs(&self) -> Option<f64> {
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", self.child.id())).ok()?;
        // The fields after the command name (which is in parentheses, may hold spaces).
        let rest = &stat[stat.rfind(')')? + 2..];
        let f: Vec<&str> = rest.split_whitespace().collect();
        let ticks: u64 = f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?;
        // USER_HZ is 100 on every Linux ABI.
        Some(ticks as f64 / 100.0)
    }

    /// Wall time since the co-tenant started.
    pub fn wall_secs(&self) -> f64 {
        self.t0.elapsed().as_secs_f64()
    }
}

impl Drop for CoTenant {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Spin-before-park of the `_spin` rows.
pub const SPIN: Option<Duration> = Some(Duration::from_micros(50));

pub fn median(v: &mut [f64]) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

/// Median and relative spread ((max - min) / median; 0 when all samples are equal).
pub fn median_spread(v: &[f64]) -> (f64, f64) {
    let m = median(&mut v.to_vec());
    let max = v.iter().cloned().fold(f64::MIN, f64::max);
    let min = v.iter().cloned().fold(f64::MAX, f64::min);
    let spread = if max == min { 0.0 } else { (max - min) / m };
    (m, spread)
}

/// Run evfd and its twin alternately, `reps` times each; the samples of both sides.
pub fn interleaved(
    reps: usize,
    mut evfd: impl FnMut() -> f64,
    mut twin: impl FnMut() -> f64,
) -> (Vec<f64>, Vec<f64>) {
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..reps {
        a.push(evfd());
        b.push(twin());
    }
    (a, b)
}

/// As [`interleaved`], with a third side (the `vs_floor` rows' floor): evfd, twin, floor,
/// evfd, ...; the samples of the three.
pub fn interleaved3(
    reps: usize,
    mut evfd: impl FnMut() -> f64,
    mut twin: impl FnMut() -> f64,
    mut floor: impl FnMut() -> f64,
) -> (Vec<f64>, Vec<f64>, Vec<f64>) {
    let (mut a, mut b, mut c) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..reps {
        a.push(evfd());
        b.push(twin());
        c.push(floor());
    }
    (a, b, c)
}

/// Run `n` threads of `body(thread_index, stop)` for `dur`; returns total ops / ms.
pub fn run_threads<F>(n: usize, dur: Duration, body: F) -> f64
where
    F: Fn(usize, &AtomicBool) -> u64 + Send + Sync + 'static,
{
    let body = Arc::new(body);
    let stop = Arc::new(AtomicBool::new(false));
    let start = Arc::new(Barrier::new(n + 1));
    let hs: Vec<_> = (0..n)
        .map(|i| {
            let (body, stop, start) = (body.clone(), stop.clone(), start.clone());
            std::thread::spawn(move || {
                start.wait();
                body(i, &stop)
            })
        })
        .collect();
    start.wait();
    let t0 = Instant::now();
    std::thread::sleep(dur);
    stop.store(true, Ordering::Relaxed);
    let total: u64 = hs.into_iter().map(|h| h.join().unwrap()).sum();
    per_ms(total, t0.elapsed())
}

/// `count` per millisecond of `el`.
pub fn per_ms(count: u64, el: Duration) -> f64 {
    count as f64 / el.as_secs_f64() / 1000.0
}

/// Loop `op` until `stop`, checking the flag every 256 iterations; returns the op count.
pub fn spin_ops(stop: &AtomicBool, mut op: impl FnMut()) -> u64 {
    let mut n = 0;
    while !stop.load(Ordering::Relaxed) {
        for _ in 0..256 {
            op();
        }
        n += 256;
    }
    n
}

/// Nanoseconds per item: `run` is called in batches until `dur` has passed; it returns how
/// many items one call handled.
pub fn ns_per_item(dur: Duration, batch: u64, mut run: impl FnMut() -> u64) -> f64 {
    let t0 = Instant::now();
    let mut items = 0u64;
    while t0.elapsed() < dur {
        for _ in 0..batch {
            items += run();
        }
    }
    t0.elapsed().as_nanos() as f64 / items as f64
}

/// Wait `d` without sleeping: a `nanosleep` of 500 ns lasts ~55 µs on small VMs (timer
/// slack), which would measure the sleep instead of the code around it.
pub fn busy_wait(d: Duration) {
    let t0 = Instant::now();
    while t0.elapsed() < d {
        std::hint::spin_loop();
    }
}

/// CPUs for (the timing thread, the echo thread); `None` = unpinned.
pub type Placement = (Option<usize>, Option<usize>);

/// The CPUs this process may run on, as it started (before any `pin`).
pub fn all_cpus() -> Option<&'static rustix::thread::CpuSet> {
    static ALL: std::sync::OnceLock<Option<rustix::thread::CpuSet>> = std::sync::OnceLock::new();
    ALL.get_or_init(|| rustix::thread::sched_getaffinity(None).ok())
        .as_ref()
}

/// The ids of the CPUs this process may run on (as it started), in order.
pub fn cpu_ids() -> Vec<usize> {
    match all_cpus() {
        Some(all) => (0..rustix::thread::CpuSet::MAX_CPU)
            .filter(|&c| all.is_set(c))
            .collect(),
        None => vec![0],
    }
}

/// Pin the calling thread to `cpu`, or (`None`) let it run on every CPU it started with
/// again. Threads spawned later inherit this, so every pinning bench ends with `pin(None)`.
pub fn pin(cpu: Option<usize>) {
    let set = match cpu {
        Some(c) => {
            let mut set = rustix::thread::CpuSet::new();
            set.set(c);
            set
        }
        None => match all_cpus() {
            Some(all) => *all,
            None => return,
        },
    };
    let _ = rustix::thread::sched_setaffinity(None, &set);
}

/// The machine, for the report's first line: the CPU's model name (`/proc/cpuinfo`) and
/// the number of vCPUs this process may use.
pub fn machine() -> String {
    let model = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|s| {
            s.lines()
                .filter_map(|l| l.split_once(':'))
                .find(|(k, _)| matches!(k.trim(), "model name" | "Model" | "cpu model"))
                .map(|(_, v)| v.trim().to_string())
        })
        .unwrap_or_else(|| "unknown CPU".into());
    let vcpus = std::thread::available_parallelism().map_or(0, |n| n.get());
    format!("cpu: {model}, {vcpus} vCPUs")
}
