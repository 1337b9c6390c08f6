//! A fork while other threads make private AutoReset `KernelNotifier`s (their counts in
//! memory): a binary of its own, so that its 150 forks (each flushing every count the
//! process keeps in memory) do not run beside the step-by-step tests of
//! `kernel_mem_count.rs`.

use std::sync::atomic::{AtomicBool, Ordering::SeqCst};
use std::sync::Arc;

use evfd::{KernelNotifier, Mode};

mod fork_util;
use fork_util::in_child_of;
mod mem_util;
use mem_util::kernel_count;

fn kick() -> KernelNotifier {
    KernelNotifier::new(Mode::AutoReset).unwrap()
}

/// Forks while other threads make (and drop) private notifiers, each entering the
/// registry a fork's `prepare` flushes: the child never inherits the registry locked, so
/// it makes and uses notifiers of its own, and a notifier shared with the child through
/// memory before the fork (made by another thread) has its count in the kernel.
#[test]
fn a_fork_while_other_threads_make_notifiers() {
    let stop = Arc::new(AtomicBool::new(false));
    let shared: Arc<std::sync::Mutex<Option<Arc<KernelNotifier>>>> = Arc::default();
    let makers: Vec<_> = (0..2)
        .map(|_| {
            let (stop, shared) = (Arc::clone(&stop), Arc::clone(&shared));
            std::thread::spawn(move || {
                let mut made = 0u64;
                while !stop.load(SeqCst) {
                    let k = Arc::new(kick());
                    k.write(3).unwrap();
                    if made % 64 == 0 {
                        *shared.lock().unwrap() = Some(Arc::clone(&k));
                    }
                    made += 1;
                }
                made
            })
        })
        .collect();
    for round in 0..150 {
        let seen = shared.lock().unwrap().clone();
        // SAFETY: the child only uses evfd (which takes no lock the fork could have left
        // held) and `_exit`s.
        in_child_of(
            "child makes notifiers",
            || unsafe { libc::fork() },
            || {
                for _ in 0..4 {
                    let k = kick();
                    k.write(2).map_err(|e| e.to_string())?;
                    if k.try_read().map_err(|e| e.to_string())? != 2 {
                        return Err(format!("round {round}: a fresh notifier lost its count"));
                    }
                }
                if let Some(s) = &seen {
                    // Made before the fork: its count was flushed by the fork's `prepare`
                    // (the kernel's is its maker's 3, not the base), and the child reads it
                    // there.
                    let (kernel, count) = (kernel_count(s), s.count());
                    if (kernel, count.as_ref().ok()) != (3, Some(&3)) {
                        return Err(format!("round {round}: kernel {kernel}, count {count:?}"));
                    }
                }
                Ok(())
            },
        );
    }
    stop.store(true, SeqCst);
    for m in makers {
        assert!(m.join().unwrap() > 0);
    }
}
