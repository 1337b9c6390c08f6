//! The vhost-user-blk example's `--loop evfd` backend (`examples/vhost_user_blk/evfd_loop.rs`)
//! taking over a ring from a backend that died: a ring whose used index is not 0 when it
//! starts gets one call, in case the dead backend completed a request and died before its
//! call (the driver would wait for it for ever); a ring the driver set up fresh gets none.
//! Driven through the request handler, with the ring's memory written by hand. (The QEMU
//! guest of `scripts/qemu-vhost-user.sh`, `restarted-backend`, kills a backend in the
//! middle of I/O and checks that the guest's passes finish.)
#![cfg(target_os = "linux")]

#[allow(dead_code)]
#[path = "../examples/vhost_user_blk/device.rs"]
mod device;
#[allow(dead_code)]
#[path = "../examples/vhost_user_blk/evfd_loop.rs"]
mod evfd_loop;

use std::fs::File;
use std::os::fd::OwnedFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use device::{BlockDevice, VHOST_USER_F_PROTOCOL_FEATURES};
use evfd::Epoll;
use evfd_loop::EvfdBackend;
use rustix::event::{eventfd, EventfdFlags};
use vhost::vhost_user::message::{VhostUserSingleMemoryRegion, VhostUserVringAddrFlags};
use vhost::vhost_user::VhostUserBackendReqHandlerMut;

const MIB: u64 = 1 << 20;
/// Where the frontend "maps" guest memory (guest address 0).
const USER: u64 = 0x7000_0000;
/// The ring's parts, in guest addresses.
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;

/// A backend on a 1 MiB image with one 16-entry queue, its memory (a memfd) added, and a
/// handle on that memory to write the ring with.
fn backend(features: u64) -> (EvfdBackend, File, std::path::PathBuf) {
    use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};
    static N: AtomicUsize = AtomicUsize::new(0);
    let image = std::env::temp_dir().join(format!(
        "evfd-vublk-{}-restart-{}.img",
        std::process::id(),
        N.fetch_add(1, Relaxed)
    ));
    let f = File::create(&image).unwrap();
    f.set_len(MIB).unwrap();
    let dev = BlockDevice::new(f, 1, false).unwrap();
    let mut be = EvfdBackend::new(Arc::new(dev), Epoll::new());
    be.set_features(features).unwrap();
    be.set_vring_num(0, 16).unwrap();
    let mem = File::from(
        rustix::fs::memfd_create("evfd-vublk-test", rustix::fs::MemfdFlags::CLOEXEC)
            .expect("memfd_create"),
    );
    mem.set_len(MIB).unwrap();
    let region = VhostUserSingleMemoryRegion::new(0, MIB, USER, 0);
    be.add_mem_region(&region, mem.try_clone().unwrap(), None)
        .unwrap();
    (be, mem, image)
}

/// The ring as a driver left it: `avail` requests made available, `used` completed.
fn ring(mem: &File, avail: u16, used: u16) {
    mem.write_all_at(&avail.to_le_bytes(), AVAIL + 2).unwrap();
    mem.write_all_at(&used.to_le_bytes(), USED + 2).unwrap();
}

/// An eventfd as a frontend passes it, and a second handle on it to look at its count.
fn eventfd_pair() -> (File, OwnedFd) {
    let fd = eventfd(0, EventfdFlags::NONBLOCK | EventfdFlags::CLOEXEC).expect("eventfd");
    let probe = fd.try_clone().unwrap();
    (File::from(fd), probe)
}

/// The calls made so far (the eventfd's count, reset).
fn calls(probe: &OwnedFd) -> u64 {
    let mut b = [0u8; 8];
    match rustix::io::read(probe, &mut b) {
        Ok(8) => u64::from_ne_bytes(b),
        Err(rustix::io::Errno::AGAIN) => 0,
        other => panic!("eventfd read: {other:?}"),
    }
}

/// Set the ring up as a frontend does after (re)connecting: addresses, base (the next
/// request to take: the used index, as QEMU restores it when the backend before it is
/// gone), call fd, then the kick fd, which starts it.
fn start(be: &mut EvfdBackend, base: u16) -> OwnedFd {
    be.set_vring_addr(
        0,
        VhostUserVringAddrFlags::empty(),
        USER + DESC,
        USER + USED,
        USER + AVAIL,
        0,
    )
    .unwrap();
    be.set_vring_base(0, u32::from(base)).unwrap();
    let (call, probe) = eventfd_pair();
    be.set_vring_call(0, Some(call)).unwrap();
    let (kick, _) = eventfd_pair();
    be.set_vring_kick(0, Some(kick)).unwrap();
    probe
}

#[test]
fn a_ring_taken_over_with_completions_gets_one_call() {
    // The backend before completed 3 requests and died: nothing is pending, but it may
    // have died before its last call.
    let (mut be, mem, image) = backend(0);
    ring(&mem, 3, 3);
    let probe = start(&mut be, 3);
    assert_eq!(calls(&probe), 1, "one call when the ring starts");
    assert_eq!(calls(&probe), 0);
    let _ = std::fs::remove_file(image);
}

#[test]
fn a_fresh_ring_gets_no_call() {
    let (mut be, mem, image) = backend(0);
    ring(&mem, 0, 0);
    let probe = start(&mut be, 0);
    assert_eq!(
        calls(&probe),
        0,
        "no call for a ring that never completed anything"
    );
    let _ = std::fs::remove_file(image);
}

#[test]
fn a_disabled_ring_is_called_when_it_is_enabled() {
    // With protocol features acked, rings start disabled until SET_VRING_ENABLE.
    let (mut be, mem, image) = backend(VHOST_USER_F_PROTOCOL_FEATURES);
    ring(&mem, 7, 7);
    let probe = start(&mut be, 7);
    assert_eq!(calls(&probe), 0, "not enabled: not started");
    be.set_vring_enable(0, true).unwrap();
    assert_eq!(calls(&probe), 1, "started by the enable: one call");
    let _ = std::fs::remove_file(image);
}
