//! evfd next to its kernel (or peer) twin, benchmark by benchmark (definitions, targets and
//! how to read the figures: docs/benchmarks.md).
//!
//! ```sh
//! cargo run --release --all-features --example stress_epoll              # everything, ~5 min on 2 CPUs
//! cargo run --release --all-features --example stress_epoll -- --quick   # everything, ~1 min on 2 CPUs
//! cargo run --release --all-features --example stress_epoll -- --only doorbell
//! cargo run --release --all-features --example stress_epoll -- --only pingpong_contended
//! ```
//!
//! Every run has two passes per family that has `_contended` rows ([`BENCHES`]' third
//! field): the idle pass, then the contended pass, which starts one CPU-bound co-tenant
//! process (`sh -c 'while :; do :; done'`, unpinned, at this process's nice level), runs
//! the family's contended subset with `Cfg::contended` set (rows named `<variant>_contended`)
//! and kills the co-tenant. The situation is any device backend's: its host runs vCPU
//! threads that never sleep; a hand-off that spins while its peer is off the CPU shows
//! there. A note under the table gives the co-tenant's share of one CPU in each pass
//! (its CPU time over the pass's wall time), which shows that it ran. `--idle` or
//! `--contended` runs one pass only; `--only <bench>_contended` runs one family's
//! contended pass.
//!
//! One module per benchmark family, listed in [`BENCHES`]; `twin` (the kernel twins, shared
//! with the criterion benches), `measure` (timing, pinning, the machine's name), `report`
//! (rows and the table) and `syscount` (syscall counting for `doorbell`) serve them.
//! Progress goes to stderr (`[i/n] <bench>[_contended]`, a dot per row, seconds per pass); bad
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
mod listener;
mod measure;
mod mixed;
mod pingpong;
mod report;
mod scale;
mod seed;
mod stress;
mod syscount;
mod twin;
mod waker;
mod xproc;

use std::io::Write as _;
use std::time::{Duration, Instant};

use evfd::Events;

use measure::{all_cpus, machine, pin, Cfg, CoTenant, CO_TENANT};
use report::{report, Out};

/// A benchmark family: runs its rows into `Out`.
type BenchFn = fn(&Cfg, &mut Out);

/// Every benchmark family, in run order, and whether it has `_contended` rows; `--only`
/// takes these names. A new family is a module with a `run(&Cfg, &mut Out)` and one line
/// here; with `true`, its `run` is called a second time with `cfg.contended` set and a
/// co-tenant running, and runs its contended subset then.
const BENCHES: &[(&str, BenchFn, bool)] = &[
    (
        "seed_pri",
        |c, o| seed::run(c, o, "seed_pri", Events::PRI),
        true,
    ),
    (
        "seed_in",
        |c, o| seed::run(c, o, "seed_in", Events::IN),
        true,
    ),
    ("stress", stress::run, false),
    ("pingpong", pingpong::run, true),
    ("epwait", epwait::run, true),
    ("harvest", harvest::run, true),
    ("scale", scale::run, false),
    ("async_pingpong", async_pingpong::run, true),
    ("listener", listener::run, true),
    ("waker", waker::run, false),
    ("autoreset_loop", autoreset::run, false),
    ("doorbell", doorbell::run, false),
    ("xproc", xproc::run, true),
    ("mixed", mixed::run, true),
];

/// The suffix of the rows measured with a co-tenant.
const CONTENDED: &str = "_contended";

/// Which passes a run makes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Passes {
    Both,
    IdleOnly,
    ContendedOnly,
}

/// Print the usage (stdout for `--help`, else stderr after `why`) and exit with `code`.
fn usage(why: Option<String>, code: i32) -> ! {
    let names: Vec<&str> = BENCHES.iter().map(|b| b.0).collect();
    let contended: Vec<&str> = BENCHES.iter().filter(|b| b.2).map(|b| b.0).collect();
    let text = format!(
        "usage: stress_epoll [--quick] [--idle | --contended] [--only <bench>[_contended]]\n\
         \n\
         Runs every benchmark family, evfd next to its kernel or peer twin (docs/benchmarks.md),\n\
         then again with one CPU-bound co-tenant process (sh -c '{CO_TENANT}') for the families\n\
         that have `_contended` rows: {}.\n\
         \n  --quick         shorter runs: everything in < 2 min on 2 cores (default < 8 min)\
         \n  --idle          only the rows without a co-tenant\
         \n  --contended     only the `_contended` rows\
         \n  --only <bench>  run one benchmark (idle and contended; `<bench>_contended`: contended\
         \n                  only): {}\
         \n  -h, --help      print this",
        contended.join(", "),
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
    let mut passes = Passes::Both;
    let set_passes = |p: Passes, passes: &mut Passes| {
        if *passes != Passes::Both && *passes != p {
            usage(Some("--idle and --contended exclude each other".into()), 2)
        }
        *passes = p;
    };
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
            "--idle" => {
                set_passes(Passes::IdleOnly, &mut passes);
                continue;
            }
            "--contended" => {
                set_passes(Passes::ContendedOnly, &mut passes);
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
        let (name, contended) = match bench.strip_suffix(CONTENDED) {
            Some(n) => (n, true),
            None => (bench.as_str(), false),
        };
        match BENCHES.iter().find(|b| b.0 == name) {
            Some(b) if contended && !b.2 => {
                usage(Some(format!("`{}` has no {CONTENDED} rows", b.0)), 2)
            }
            Some(b) if only.is_none() => {
                only = Some(b.0);
                if contended {
                    set_passes(Passes::ContendedOnly, &mut passes);
                }
            }
            Some(_) => usage(Some("--only given twice".into()), 2),
            None => usage(Some(format!("unknown benchmark `{bench}`")), 2),
        }
    }
    let cfg = if quick {
        Cfg {
            dur: Duration::from_millis(150),
            reps: 3,
            quick,
            contended: false,
        }
    } else {
        Cfg {
            dur: Duration::from_millis(700),
            reps: 5,
            quick,
            contended: false,
        }
    };
    // (name, run, under a co-tenant): each family's idle pass, then its contended pass.
    let mut todo: Vec<(&str, BenchFn, bool)> = Vec::new();
    for &(name, run, has_contended) in BENCHES {
        if only.is_some_and(|o| o != name) {
            continue;
        }
        if passes != Passes::ContendedOnly {
            todo.push((name, run, false));
        }
        if has_contended && passes != Passes::IdleOnly {
            todo.push((name, run, true));
        }
    }
    if todo.is_empty() {
        usage(
            Some(format!(
                "nothing to run: `{}` has no {CONTENDED} rows",
                only.unwrap_or("?")
            )),
            2,
        );
    }
    let mut out = Out::default();
    all_cpus(); // before anything pins this thread
    eprintln!("{}", machine());
    let t0 = Instant::now();
    let mut contended_notes = Vec::new();
    for (i, &(name, run, contended)) in todo.iter().enumerate() {
        pin(None); // each bench starts unpinned, whatever ran before
        let label = format!("{name}{}", if contended { CONTENDED } else { "" });
        eprint!("[{}/{}] {label:<26}", i + 1, todo.len());
        let _ = std::io::stderr().flush();
        let t = Instant::now();
        if !contended {
            run(&cfg, &mut out);
        } else {
            let cotenant = match CoTenant::start() {
                Ok(c) => c,
                Err(e) => {
                    eprintln!(" skipped: cannot start the co-tenant (sh): {e}");
                    out.notes.push(format!(
                        "{label}: skipped, cannot start the co-tenant (sh): {e}"
                    ));
                    continue;
                }
            };
            let notes = out.notes.len();
            out.suffix = CONTENDED;
            run(
                &Cfg {
                    contended: true,
                    ..cfg
                },
                &mut out,
            );
            out.suffix = "";
            // The bench's own notes from this pass, marked as such.
            for n in &mut out.notes[notes..] {
                *n = format!("({label}) {n}");
            }
            let wall = cotenant.wall_secs();
            if let Some(cpu) = cotenant.cpu_secs() {
                contended_notes.push(format!("{name} {:.0}%", 100.0 * cpu / wall));
            }
            drop(cotenant);
        }
        eprintln!(" {:.1} s", t.elapsed().as_secs_f64());
    }
    if todo.iter().any(|t| t.2) {
        out.notes.push(format!(
            "{CONTENDED}: rows measured with one CPU-bound co-tenant process running \
             (sh -c '{CO_TENANT}', unpinned, same nice level), started before and killed after \
             each family's contended pass; the co-tenant's share of one CPU during each pass: {}",
            if contended_notes.is_empty() {
                "not readable".to_string()
            } else {
                contended_notes.join(", ")
            }
        ));
    }
    eprintln!("done in {:.1} s", t0.elapsed().as_secs_f64());
    // One write, errors ignored: `stress_epoll | head` must not panic on a closed pipe.
    let _ = std::io::stdout().write_all(report(&cfg, &out).as_bytes());
}
