//! `KernelNotifier::read_async` in a `fork(2)` child, on the parent's notifier: the epoll
//! its read futures share is the process's own, so a child whose parent's read futures
//! made one (inherited as an fd, but the parent's, which refuses to work in the child)
//! makes and keeps its own, and reads what the parent writes; the parent's is kept and
//! still works. Counter, and AutoReset (whose count the parent kept in memory, its epoll
//! edge-triggered, until the fork put it in the kernel). One test in its own binary, as
//! every fork test.
#![cfg(target_os = "linux")]

use std::time::Duration;

use evfd::{KernelNotifier, Mode};

#[allow(dead_code)] // in_child_of: this file needs the parent half too
mod fork_util;
use fork_util::in_child_then;
mod util;
use util::{epolls_watching, fd_in_debug};

/// A read future of `k` that waits (polled once before the write of `n`), awaited.
fn wait_then_write(k: &KernelNotifier, n: u64) -> u64 {
    futures::executor::block_on(async {
        let mut f = std::pin::pin!(k.read_async());
        assert!(
            futures::poll!(f.as_mut()).is_pending(),
            "nothing written yet"
        );
        k.write(n).unwrap();
        f.await
    })
    .unwrap()
}

#[test]
fn a_fork_child_reads_async_on_the_parents_kernel_notifier() {
    for mode in [Mode::Counter, Mode::AutoReset] {
        for parent_read_first in [true, false] {
            let k = KernelNotifier::new(mode).unwrap();
            let back = KernelNotifier::new(Mode::Counter).unwrap();
            let num = fd_in_debug(&k);
            if parent_read_first {
                // The parent's read future waits, so it makes the epoll, and leaves it for
                // the next.
                assert_eq!(wait_then_write(&k, 1), 1, "{mode:?}");
            }
            let parents = epolls_watching(num);
            assert_eq!(parents.len(), usize::from(parent_read_first), "{mode:?}");
            in_child_then(
                "child reads async",
                // SAFETY: the child uses evfd, std's files and `futures`' executor, and
                // `_exit`s.
                || unsafe { libc::fork() },
                || {
                    let mut mine = None;
                    for round in 1..=3u64 {
                        let wait = async {
                            let mut f = std::pin::pin!(k.read_async());
                            if futures::poll!(f.as_mut()).is_ready() {
                                return Err(format!("round {round}: read before the write"));
                            }
                            // The parent's epoll (an inherited fd) and one of the child's.
                            let new: Vec<_> = epolls_watching(num)
                                .into_iter()
                                .filter(|e| !parents.contains(e))
                                .collect();
                            if new.len() != 1 || *mine.get_or_insert(new[0]) != new[0] {
                                return Err(format!("round {round}: epolls {new:?}, {mine:?}"));
                            }
                            // The parent writes once the child announced the round.
                            back.write(round).map_err(|e| e.to_string())?;
                            f.await.map_err(|e| format!("round {round}: {e}"))
                        };
                        let got = futures::executor::block_on(wait)?;
                        if got != round {
                            return Err(format!("round {round}: read {got}"));
                        }
                    }
                    Ok(())
                },
                || {
                    for round in 1..=3u64 {
                        assert_eq!(back.read_timeout(Duration::from_secs(10)).unwrap(), round);
                        std::thread::sleep(Duration::from_millis(5));
                        k.write(round).unwrap();
                    }
                },
            );
            // The parent's own read futures still work, in the epoll kept before the fork.
            k.write(4).unwrap();
            assert_eq!(futures::executor::block_on(k.read_async()).unwrap(), 4);
            assert_eq!(wait_then_write(&k, 5), 5, "{mode:?}");
            if parent_read_first {
                assert_eq!(epolls_watching(num), parents, "{mode:?}: the parent's kept");
                // Dropped with the notifier (no other thread of this binary makes fds).
                drop(k);
                let gone = std::fs::read_link(format!("/proc/self/fd/{}", parents[0]));
                assert!(
                    gone.is_err(),
                    "{mode:?}: the kept epoll outlived it: {gone:?}"
                );
            }
        }
    }
}
