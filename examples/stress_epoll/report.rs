//! Rows and the report: the table with medians and spreads, the notes, and one
//! machine-readable line per row (`row <bench> <variant> <threads> evfd=.. twin=.. ratio=..
//! <unit>`).

use std::io::Write as _;

use crate::measure::{machine, median_spread, Cfg};

/// A row's unit, and which way is better.
#[derive(Clone, Copy)]
pub struct Unit {
    pub name: &'static str,
    /// Throughput (evfd/twin) if true; a cost (twin/evfd) if false.
    pub higher_better: bool,
}

pub const OPS_MS: Unit = Unit::more("ops/ms");
pub const INCR_MS: Unit = Unit::more("incr/ms");
pub const KICKS_MS: Unit = Unit::more("kicks/ms");
pub const RT_S: Unit = Unit::more("rt/s");
pub const US: Unit = Unit::less("us");
pub const NS_EVENT: Unit = Unit::less("ns/event");
pub const NS_WAIT: Unit = Unit::less("ns/wait");
pub const NS_OP: Unit = Unit::less("ns/op");
pub const SYSCALLS_OP: Unit = Unit::less("syscalls/op");

impl Unit {
    const fn more(name: &'static str) -> Unit {
        Unit {
            name,
            higher_better: true,
        }
    }

    const fn less(name: &'static str) -> Unit {
        Unit {
            name,
            higher_better: false,
        }
    }
}

/// One row: medians and spreads of both sides.
pub struct Row {
    bench: &'static str,
    variant: String,
    threads: usize,
    evfd: f64,
    twin: f64,
    unit: Unit,
    evfd_spread: f64,
    twin_spread: f64,
}

impl Row {
    /// Bigger is better: evfd/twin, or twin/evfd for costs (latency, ns, syscalls). A cost
    /// of 0 against a positive twin is `inf` (printed so); 0 against 0 is 1.
    fn ratio(&self) -> f64 {
        let (num, den) = if self.unit.higher_better {
            (self.evfd, self.twin)
        } else {
            (self.twin, self.evfd)
        };
        if num == den {
            1.0
        } else {
            num / den
        }
    }
}

/// Everything the benchmarks produce.
#[derive(Default)]
pub struct Out {
    rows: Vec<Row>,
    /// Printed under the table, as `# ` lines.
    pub notes: Vec<String>,
    /// Appended to every new row's variant (`_contended` while a co-tenant runs).
    pub suffix: &'static str,
}

impl Out {
    /// A row from the per-repetition samples of both sides (medians and spreads), and a
    /// dot on the progress line.
    pub fn row(
        &mut self,
        bench: &'static str,
        variant: &str,
        threads: usize,
        unit: Unit,
        (evfd, twin): (&[f64], &[f64]),
    ) {
        let (e, es) = median_spread(evfd);
        let (t, ts) = median_spread(twin);
        self.rows.push(Row {
            bench,
            variant: format!("{variant}{}", self.suffix),
            threads,
            evfd: e,
            twin: t,
            unit,
            evfd_spread: es,
            twin_spread: ts,
        });
        progress();
    }
}

/// One dot per finished row, on the progress line.
fn progress() {
    eprint!(".");
    let _ = std::io::stderr().flush();
}

/// A value for the table: as many digits as its size deserves.
fn fmt_value(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 1000.0 {
        format!("{v:.0}")
    } else if v.abs() >= 10.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.3}")
    }
}

fn fmt_ratio(r: f64) -> String {
    if r.is_infinite() {
        "inf".into()
    } else {
        format!("{r:.2}x")
    }
}

/// The table, its legend and notes, then the `row` lines.
pub fn report(cfg: &Cfg, out: &Out) -> String {
    use std::fmt::Write as _;
    let mut o = String::new();
    let head = [
        "bench", "variant", "thr", "evfd", "twin", "ratio", "unit", "±evfd", "±twin",
    ];
    let cells: Vec<[String; 9]> = out
        .rows
        .iter()
        .map(|r| {
            [
                r.bench.to_string(),
                r.variant.clone(),
                r.threads.to_string(),
                fmt_value(r.evfd),
                fmt_value(r.twin),
                fmt_ratio(r.ratio()),
                r.unit.name.to_string(),
                format!("{:.0}%", r.evfd_spread * 100.0),
                format!("{:.0}%", r.twin_spread * 100.0),
            ]
        })
        .collect();
    let mut w = head.map(|h| h.chars().count());
    for c in &cells {
        for (w, s) in w.iter_mut().zip(c) {
            *w = (*w).max(s.chars().count());
        }
    }
    // Text columns left-aligned, numbers right-aligned.
    let line = |c: &[String]| {
        let mut s = String::new();
        for (i, (x, w)) in c.iter().zip(w).enumerate() {
            let pad = " ".repeat(w - x.chars().count());
            if matches!(i, 0 | 1 | 6) {
                s += &format!("{x}{pad}  ");
            } else {
                s += &format!("{pad}{x}  ");
            }
        }
        s.trim_end().to_string()
    };
    let _ = writeln!(o, "# {}", machine());
    let _ = writeln!(
        o,
        "# evfd vs its twin in one process, interleaved; median of {} repetitions of {} ms{}",
        cfg.reps,
        cfg.dur.as_millis(),
        if cfg.quick { " (--quick)" } else { "" }
    );
    let _ = writeln!(o, "{}", line(&head.map(String::from)));
    for c in &cells {
        let _ = writeln!(o, "{}", line(c));
    }
    let _ = writeln!(
        o,
        "# ratio: bigger is better. evfd/twin for throughput; twin/evfd for costs (us,"
    );
    let _ = writeln!(
        o,
        "#   ns/..., syscalls/op). `inf`: evfd made no syscall where its twin made some."
    );
    let _ = writeln!(o, "# ±: spread of the repetitions, (max - min) / median.");
    for n in &out.notes {
        let _ = writeln!(o, "# {n}");
    }
    let _ = writeln!(o);
    for r in &out.rows {
        let _ = writeln!(
            o,
            "row {} {} {} evfd={:.3} twin={:.3} ratio={:.3} {}",
            r.bench,
            r.variant.replace(' ', "_"),
            r.threads,
            r.evfd,
            r.twin,
            r.ratio(),
            r.unit.name
        );
    }
    o
}
