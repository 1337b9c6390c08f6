//! Differential test against the kernel: a `SharedNotifier` and a kernel eventfd
//! (`KernelNotifier`), each shared with a child process, driven through the same random
//! operation sequences with both processes acting; every result is compared.

mod shared_util;

use std::os::fd::AsFd;

use evfd::{KernelNotifier, Mode, SharedNotifier, LIMIT};
use shared_util::{mode_name, op_kernel, op_shared, Peer, Rng};

/// The peer's entry point (does nothing in a normal test run).
#[test]
fn peer_entry() {
    shared_util::peer_main();
}

/// One random operation that cannot block forever, given the current count `c`.
fn random_op(rng: &mut Rng, c: u64) -> String {
    let edges = [0, 1, 2, 7, LIMIT / 2, LIMIT - 1, LIMIT, u64::MAX];
    let v = if rng.below(3) == 0 {
        rng.below(10)
    } else if rng.below(2) == 0 {
        edges[rng.below(8) as usize]
    } else {
        rng.next()
    };
    let fits = |n: u64| n != u64::MAX && u64::MAX - c > n;
    loop {
        match rng.below(10) {
            0 | 1 => return format!("tw {v}"),
            2 | 3 => return "tr".into(),
            4 => return "rt 1".into(),
            5 => return "poll".into(),
            6 => return "count".into(),
            7 => return "consume".into(),
            8 if fits(v) || v == u64::MAX => return format!("w {v}"),
            9 if c > 0 => return "r".into(),
            9 if fits(1) => return "notify".into(),
            _ => continue,
        }
    }
}

#[test]
fn differential_against_kernel_eventfd_with_child() {
    let seeds = std::env::var("EVFD_DIFF_SEEDS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(30u64);
    let ops = 80;
    let mut compared = 0u64;
    let mut child_side = 0u64;
    for mode in [Mode::Counter, Mode::Semaphore, Mode::AutoReset] {
        let mut p = Peer::spawn("peer_entry");
        for seed in 0..seeds {
            let mut rng = Rng::new(seed * 3 + mode as u64);
            let s = SharedNotifier::new(mode).unwrap();
            let k = KernelNotifier::new(mode).unwrap();
            p.send("recv_shared");
            s.send(&p.sock).unwrap();
            assert_eq!(p.reply(), "ok");
            p.send(&format!("recv_kernel {}", mode_name(mode)));
            shared_util::send_fds(&p.sock, b"k", &[k.as_fd()]);
            assert_eq!(p.reply(), "ok");
            let mut c = 0u64;
            let mut trace = Vec::new();
            for i in 0..ops {
                let op = random_op(&mut rng, c);
                let args: Vec<&str> = op.split(' ').collect();
                let here = rng.below(2) == 0;
                let (x, y) = if here {
                    (op_shared(&s, &args), op_kernel(&k, &args))
                } else {
                    child_side += 1;
                    (p.cmd(&format!("s {op}")), p.cmd(&format!("k {op}")))
                };
                trace.push(format!(
                    "{} {op} -> {y}",
                    if here { "parent" } else { "child" }
                ));
                assert_eq!(
                    x,
                    y,
                    "{mode:?} seed {seed} op #{i}: shared vs kernel; trace:\n{}",
                    trace.join("\n")
                );
                c = k.count().unwrap();
                assert_eq!(s.count(), c, "{mode:?} seed {seed} op #{i}: counts");
                compared += 1;
            }
        }
    }
    eprintln!(
        "{compared} operations compared ({child_side} in the child), 3 modes x {seeds} seeds"
    );
    assert_eq!(compared, 3 * seeds * ops);
}
