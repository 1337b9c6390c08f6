//! The vhost-user-blk example's `--loop evfd` backend (`examples/vhost_user_blk/evfd_loop.rs`)
//! taking guest memory one region at a time (`CONFIGURE_MEM_SLOTS`: `ADD_MEM_REG`,
//! `REM_MEM_REG`), driven through its request handler: a ring placed in an added region
//! can be set up, one in a removed region cannot, and a region that overlaps another or
//! comes with postcopy is refused and changes nothing. (The QEMU guest of
//! `scripts/qemu-vhost-user.sh` checks that QEMU sends its memory this way.)
#![cfg(target_os = "linux")]

#[allow(dead_code)]
#[path = "../examples/vhost_user_blk/device.rs"]
mod device;
#[allow(dead_code)]
#[path = "../examples/vhost_user_blk/evfd_loop.rs"]
mod evfd_loop;

use std::fs::File;
use std::sync::Arc;

use device::BlockDevice;
use evfd::Epoll;
use evfd_loop::EvfdBackend;
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

/// A ring (descriptor table, avail, used) at `user` + 0x1000 in the frontend's addresses.
fn ring_at(be: &mut EvfdBackend, user: u64) -> bool {
    be.set_vring_addr(
        0,
        VhostUserVringAddrFlags::empty(),
        user + 0x1000,
        user + 0x3000,
        user + 0x2000,
        0,
    )
    .is_ok()
}

#[test]
fn memory_comes_and_goes_one_region_at_a_time() {
    let image = std::env::temp_dir().join(format!("evfd-vublk-{}-slots.img", std::process::id()));
    let f = File::create(&image).unwrap();
    f.set_len(MIB).unwrap();
    let dev = BlockDevice::new(f, 1, false).unwrap();
    let mut be = EvfdBackend::new(Arc::new(dev), Epoll::new());
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
