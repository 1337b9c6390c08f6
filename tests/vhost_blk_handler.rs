//! The vhost-user-blk example's `--loop evfd` backend (`examples/vhost_user_blk/evfd_loop.rs`)
//! driven through its request handler, with guest memory a memfd and rings written by hand:
//!
//! - guest memory one region at a time (`CONFIGURE_MEM_SLOTS`: `ADD_MEM_REG`,
//!   `REM_MEM_REG`): a ring placed in an added region can be set up, one in a removed region
//!   cannot, and a region that overlaps another or comes with postcopy is refused and
//!   changes nothing (the QEMU guest of `scripts/qemu-vhost-user.sh`, `mem-slots`, checks
//!   that QEMU sends its memory this way);
//! - a ring taken over from a backend that died: a ring whose used index is not 0 when it
//!   starts gets one call, in case the dead backend completed a request and died before its
//!   call (the driver would wait for it for ever); a ring the driver set up fresh gets none
//!   (the QEMU guest, `died-before-call` and `restarted-backend`, kills backends in the
//!   middle of I/O and checks that the guest's passes finish).
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

/// A 1 MiB memfd, as a frontend shares guest memory.
fn memfd() -> File {
    let fd = rustix::fs::memfd_create("evfd-vublk-test", rustix::fs::MemfdFlags::CLOEXEC)
        .expect("memfd_create");
    let f = File::from(fd);
    f.set_len(MIB).unwrap();
    f
}

/// A backend on a fresh 1 MiB image with `queues` queues, and the image's path (removed
/// by the caller).
fn backend_on_image(queues: u16, tag: &str) -> (EvfdBackend, std::path::PathBuf) {
    let image = std::env::temp_dir().join(format!("evfd-vublk-{}-{tag}.img", std::process::id()));
    let f = File::create(&image).unwrap();
    f.set_len(MIB).unwrap();
    let dev = BlockDevice::new(f, queues, false).unwrap();
    (EvfdBackend::new(Arc::new(dev), Epoll::new()), image)
}

/// Where a ring's parts lie from the start of its region: descriptor table, avail, used.
const DESC: u64 = 0x1000;
const AVAIL: u64 = 0x2000;
const USED: u64 = 0x3000;

/// Set queue 0's ring up in the region the frontend maps at `user` (`SET_VRING_ADDR`).
fn ring_at(be: &mut EvfdBackend, user: u64) -> bool {
    be.set_vring_addr(
        0,
        VhostUserVringAddrFlags::empty(),
        user + DESC,
        user + USED,
        user + AVAIL,
        0,
    )
    .is_ok()
}

#[test]
fn memory_comes_and_goes_one_region_at_a_time() {
    let (mut be, image) = backend_on_image(1, "slots");
    assert_eq!(be.get_max_mem_slots().unwrap(), 509);
    be.set_vring_num(0, 16).unwrap();
    // Two regions: guest 0..1 MiB at user 0x7000_0000, guest 1..2 MiB at 0x7100_0000.
    let (u1, u2) = (0x7000_0000u64, 0x7100_0000u64);
    let first = VhostUserSingleMemoryRegion::new(0, MIB, u1, 0);
    let second = VhostUserSingleMemoryRegion::new(MIB, MIB, u2, 0);
    assert!(!ring_at(&mut be, u1), "no memory yet");
    be.add_mem_region(&first, memfd(), None).unwrap();
    assert!(ring_at(&mut be, u1), "a ring in the first region");
    assert!(!ring_at(&mut be, u2), "the second is not there yet");
    be.add_mem_region(&second, memfd(), None).unwrap();
    assert!(ring_at(&mut be, u2), "a ring in the second region");
    // Refused, and nothing changes: an overlapping region, postcopy.
    let overlap = VhostUserSingleMemoryRegion::new(MIB / 2, MIB, 0x7200_0000, 0);
    assert!(be.add_mem_region(&overlap, memfd(), None).is_err());
    assert!(
        !ring_at(&mut be, 0x7200_0000),
        "the refused region was not mapped"
    );
    let third = VhostUserSingleMemoryRegion::new(4 * MIB, MIB, 0x7300_0000, 0);
    assert!(be.add_mem_region(&third, memfd(), Some(true)).is_err());
    assert!(
        ring_at(&mut be, u1) && ring_at(&mut be, u2),
        "both regions still there"
    );
    // Remove the first: its addresses are gone, the second's stay.
    be.remove_mem_region(&first).unwrap();
    assert!(!ring_at(&mut be, u1), "a ring in a removed region");
    assert!(ring_at(&mut be, u2), "the other region stays");
    assert!(be.remove_mem_region(&first).is_err(), "removed twice");
    // And it can come back.
    be.add_mem_region(&first, memfd(), None).unwrap();
    assert!(ring_at(&mut be, u1));
    let _ = std::fs::remove_file(&image);
}

/// Where the frontend "maps" guest memory (guest address 0) in the takeover tests.
const USER: u64 = 0x7000_0000;

/// A backend with one 16-entry queue (`features` acked), its memory (a memfd) added at
/// [`USER`], a handle on that memory to write the ring with, and its image's path.
fn backend(features: u64, tag: &str) -> (EvfdBackend, File, std::path::PathBuf) {
    let (mut be, image) = backend_on_image(1, tag);
    be.set_features(features).unwrap();
    be.set_vring_num(0, 16).unwrap();
    let mem = memfd();
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
    assert!(ring_at(be, USER));
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
    let (mut be, mem, image) = backend(0, "takeover");
    ring(&mem, 3, 3);
    let probe = start(&mut be, 3);
    assert_eq!(calls(&probe), 1, "one call when the ring starts");
    assert_eq!(calls(&probe), 0);
    let _ = std::fs::remove_file(image);
}

#[test]
fn a_fresh_ring_gets_no_call() {
    let (mut be, mem, image) = backend(0, "fresh");
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
    let (mut be, mem, image) = backend(VHOST_USER_F_PROTOCOL_FEATURES, "enable");
    ring(&mem, 7, 7);
    let probe = start(&mut be, 7);
    assert_eq!(calls(&probe), 0, "not enabled: not started");
    be.set_vring_enable(0, true).unwrap();
    assert_eq!(calls(&probe), 1, "started by the enable: one call");
    let _ = std::fs::remove_file(image);
}
