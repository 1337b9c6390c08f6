//! evfd next to its kernel (or peer) twin, benchmark by benchmark (definitions, targets and
//! how to read the figures: docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release --all-features --example stress_epoll              # everything, ~3 min on 2 CPUs
//! cargo run --release --all-features --example stress_epoll -- --quick   # everything, < 1 min on 2 CPUs
//! cargo run --release --all-features --example stress_epoll -- --only doorbell
//! ```
//!
//! One module per benchmark family, listed in [`BENCHES`]; `twin` (the kernel twins, shared
//! with the criterion benches), `measure` (timing, pinning, the machine's name), `report`
//! (rows and the table) and `syscount` (syscall counting for `doorbell`) serve them.
//! Progress goes to stderr (`[i/n] <bench>`, a dot per row, seconds per family); bad
//! arguments print the usage and exit with status 2.
//!
//! Each row runs evfd and its twin in the same process, interleaved (evfd, twin, evfd, ...),
//! each side for a fixed time (`--quick`: 150 ms × 3 repetitions; default 700 ms × 5), and
//! reports the medians and the spread of the repetitions ((max - min) / median). The report
//! opens with the machine (`# cpu: <model name>, <n> vCPUs`); after the table, one
//! machine-readable line per row:
//!
//! ```text
//! row <bench> <variant> <threads> evfd=<v> twin=<v> ratio=<r> <unit>
//! ```
//!
//! `variant` has no spaces. `ratio` is always "bigger is better": evfd/twin for throughput
//! (ops/ms, rt/s, ...), twin/evfd for costs (µs, ns per event, syscalls/op). A cost row
//! where evfd is 0 and the twin is not prints `ratio=inf` (Rust's and Python's `float`
//! parse it); 0 against 0 is `ratio=1.000`.

mod async_pingpong;
mod autoreset;
mod doorbell;
mod epwait;
mod floor;
mod harvest;
mod measure;
mod mixed;
mod pingpong;
mod report;
mod scale;
mod seed;
mod stress;
mod syscount;
mod twin;
mod xproc;

use std::io::Write as _;
use std::time::{Duration, Instant};

use evfd::Events;

use measure::{all_cpus, machine, pin, Cfg};
use report::{report, Out};

/// A benchmark family: runs its rows into `Out`.
type BenchFn = fn(&Cfg, &mut Out);

/// Every benchmark family, in run order; `--only` takes these names. A new family is a
/// module with a `run(&Cfg, &mut Out)` and one line here.
const BENCHES: &[(&str, BenchFn)] = &[
    ("seed_pri", |c, o| seed::run(c, o, "seed_pri", Events::PRI)),
    ("seed_in", |c, o| seed::run(c, o, "seed_in", Events::IN)),
    ("stress", stress::run),
    ("pingpong", pingpong::run),
    ("epwait", epwait::run),
    ("harvest", harvest::run),
    ("scale", scale::run),
    ("async_pingpong", async_pingpong::run),
    ("autoreset_loop", autoreset::run),
    ("doorbell", doorbell::run),
    ("xproc", xproc::run),
    ("mixed", mixed::run),
];

/// Print the usage (stdout for `--help`, else stderr after `why`) and exit with `code`.
fn usage(why: Option<String>, code: i32) -> ! {
    let names: Vec<&str> = BENCHES.iter().map(|b| b.0).collect();
    let text = format!(
        "usage: stress_epoll [--quick] [--only <bench>]\n\
         \n\
         Runs every benchmark family, evfd next to its kernel or peer twin (docs/benchmarks.md).\n\
         \n  --quick         shorter runs: everything in < 60 s on 2 cores (default < 5 min)\
         \n  --only <bench>  run one benchmark: {}\
         \n  -h, --help      print this",
        names.join(", ")
    );
    match why {
        None => println!("{text}"),
        Some(why) => eprintln!("stress_epoll: {why}\n{text}"),
    }
    std::process::exit(code)
}

fn main() {
    let mut quick = false;
    let mut only: Option<&'static str> = None;
    let mut args = std::env::args_os().skip(1).map(|a| match a.into_string() {
        Ok(a) => a,
        Err(a) => usage(Some(format!("unknown argument {a:?}")), 2),
    });
    while let Some(a) = args.next() {
        let bench = match a.as_str() {
            "--quick" => {
                quick = true;
                continue;
            }
            "-h" | "--help" => usage(None, 0),
            "--only" => match args.next() {
                Some(b) => b,
                None => usage(Some("--only needs a benchmark name".into()), 2),
            },
            _ => match a.strip_prefix("--only=") {
                Some(b) => b.to_string(),
                None => usage(Some(format!("unknown argument `{a}`")), 2),
            },
        };
        match BENCHES.iter().find(|b| b.0 == bench) {
            Some(b) if only.is_none() => only = Some(b.0),
            Some(_) => usage(Some("--only given twice".into()), 2),
            None => usage(Some(format!("unknown benchmark `{bench}`")), 2),
        }
    }
    let cfg = if quick {
        Cfg {
            dur: Duration::from_millis(150),
            reps: 3,
            quick,
        }
    } else {
        Cfg {
            dur: Duration::from_millis(700),
            reps: 5,
            quick,
        }
    };
    let todo: Vec<&(&str, BenchFn)> = BENCHES
        .iter()
        .filter(|b| only.map_or(true, |o| o == b.0))
        .collect();
    let mut out = Out::default();
    all_cpus(); // before anything pins this thread
    eprintln!("{}", machine());
    let t0 = Instant::now();
    for (i, (name, run)) in todo.iter().enumerate() {
        pin(None); // each bench starts unpinned, whatever ran before
        eprint!("[{}/{}] {name:<15}", i + 1, todo.len());
        let _ = std::io::stderr().flush();
        let t = Instant::now();
        run(&cfg, &mut out);
        eprintln!(" {:.1} s", t.elapsed().as_secs_f64());
    }
    eprintln!("done in {:.1} s", t0.elapsed().as_secs_f64());
    // One write, errors ignored: `stress_epoll | head` must not panic on a closed pipe.
    let _ = std::io::stdout().write_all(report(&cfg, &out).as_bytes());
}
