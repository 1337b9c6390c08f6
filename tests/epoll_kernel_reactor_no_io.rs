//! A tokio runtime built without I/O: `wait_async` on an epoll with kernel fds completes
//! (through the watcher thread) and the process's panic hook never runs. Its own binary:
//! it installs a panic hook.
#![cfg(all(feature = "tokio", any(target_os = "linux", target_os = "android")))]

use std::sync::atomic::{AtomicUsize, Ordering::SeqCst};
use std::time::Duration;

use evfd::{Epoll, Event, Events, KernelNotifier, Mode};

static HOOK_RUNS: AtomicUsize = AtomicUsize::new(0);

#[test]
fn wait_async_without_io_runs_no_panic_hook() {
    std::panic::set_hook(Box::new(|_| {
        HOOK_RUNS.fetch_add(1, SeqCst);
    }));
    let ep = Epoll::new();
    let k = KernelNotifier::new(Mode::Counter).unwrap();
    ep.add(&k, Events::IN, 5).unwrap();
    // Neither I/O nor time: the reactor route cannot be used.
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for round in 0..3 {
        let mut evs = [Event::default(); 4];
        let n = std::thread::scope(|s| {
            s.spawn(|| {
                std::thread::sleep(Duration::from_millis(100));
                k.write(1).unwrap();
            });
            rt.block_on(ep.wait_async(&mut evs)).unwrap()
        });
        assert_eq!(n, 1, "round {round}");
        assert_eq!(evs[0].data, 5);
        assert_eq!(k.read().unwrap(), 1);
        assert_eq!(
            HOOK_RUNS.load(SeqCst),
            0,
            "round {round}: the panic hook ran"
        );
    }
    // Another epoll in the same runtime: still no hook (and no probe).
    let ep2 = Epoll::new();
    ep2.add(&k, Events::IN, 6).unwrap();
    k.write(1).unwrap();
    let mut evs = [Event::default(); 4];
    assert_eq!(rt.block_on(ep2.wait_async(&mut evs)).unwrap(), 1);
    assert_eq!(HOOK_RUNS.load(SeqCst), 0);
    // A panic of the program's own still reaches its hook.
    let _ = std::panic::catch_unwind(|| panic!("the program's own"));
    assert_eq!(HOOK_RUNS.load(SeqCst), 1);
}
