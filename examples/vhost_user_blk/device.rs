//! The virtio-blk device, written once and run by both loops (`evfd_loop`, `rustvmm_loop`):
//! feature bits, config space, and the request path from a descriptor chain to the image
//! file and back.
//!
//! Requests: `IN`, `OUT`, `FLUSH`, `GET_ID`; any other type completes with `UNSUPP`. Every
//! request is done synchronously on the calling thread with one `preadv`/`pwritev` on the
//! image (the page cache answers it), so a request is complete when `handle_chain` returns.
//!
//! # Bad guest input
//!
//! Nothing the guest writes into the rings or descriptors can make this module panic, loop
//! or touch memory outside the guest's regions:
//!
//! - every guest address is resolved through `vm-memory` (`get_slices`, `read_obj`,
//!   `write_obj`), which refuses a range that is not inside a mapped region;
//! - `virtio-queue`'s chain iterator bounds a chain by the queue size (a looping chain
//!   stops there), refuses nested indirect tables and `next` indices past the table; a
//!   chain that stopped early is recognised here by its last descriptor still having
//!   `NEXT` set, and fails with `IOERR`;
//! - a request whose layout is wrong (no 16-byte readable header first, no writable status
//!   byte last, data descriptors in the wrong direction, more than [`SEG_MAX`] data
//!   segments, a length that is not a multiple of 512, sectors past the capacity) completes
//!   with `IOERR`, or with a used length of 0 when there is no status byte to write;
//! - ring-level damage (an avail index more than a queue size ahead, a head index outside
//!   the table, a used ring outside guest memory) is returned as an error by
//!   [`BlockDevice::process_queue`]; the loops then mark the queue broken, signal its error
//!   fd, and stop serving it until the frontend configures it again.
//!
//! `tests/vhost_blk_bad_descriptors.rs` drives a hand-built ring through all of these.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

use virtio_bindings::bindings::virtio_blk::{
    VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK,
    VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN,
    VIRTIO_BLK_T_OUT,
};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueOwnedT, QueueT};
use vm_memory::{Bytes, GuestMemoryBackend, GuestMemoryMmap, VolatileSlice};

/// The guest memory both loops map: the frontend's memfd regions, no dirty bitmap.
pub type Mem = GuestMemoryMmap<()>;

/// Sector size of the virtio-blk protocol.
pub const SECTOR: u64 = 512;
/// Data segments per request (config `seg_max`); a chain holds at most this + 2 descriptors.
pub const SEG_MAX: u32 = 126;
/// Largest queue the device accepts.
pub const MAX_QUEUE_SIZE: u16 = 1024;
/// `VHOST_USER_F_PROTOCOL_FEATURES` (bit 30 of the virtio feature word, vhost-user only).
pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// Length of the `GET_ID` serial (virtio spec: 20 bytes, not NUL-terminated when full).
pub const ID_LEN: usize = 20;
/// The virtio-blk request header: type, reserved, sector.
const HEADER_LEN: u32 = 16;
/// Iovecs per `preadv`/`pwritev` this device builds (Linux's `IOV_MAX`).
const IOV_MAX: usize = 1024;

/// Outcome of one `preadv`/`pwritev` pass, kept apart from `io::Error` so a short transfer
/// (end of file) is not confused with an errno.
enum Transfer {
    Done,
    Failed,
}

/// A raw image served as a virtio-blk disk.
#[derive(Debug)]
pub struct BlockDevice {
    image: File,
    sectors: u64,
    num_queues: u16,
    id: [u8; ID_LEN],
    /// Requests completed per queue since the last [`take_served`](Self::take_served).
    served: Vec<AtomicU64>,
}

impl BlockDevice {
    /// Serve `image` (opened read-write) with `num_queues` request queues.
    pub fn new(image: File, num_queues: u16) -> io::Result<BlockDevice> {
        if num_queues == 0 || num_queues > 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("--queues must be 1..=64, not {num_queues}"),
            ));
        }
        let len = image.metadata()?.len();
        let mut id = [0u8; ID_LEN];
        let serial = b"evfd-vhost-user-blk";
        id[..serial.len()].copy_from_slice(serial);
        Ok(BlockDevice {
            image,
            sectors: len / SECTOR,
            num_queues,
            id,
            served: (0..num_queues).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    /// Number of request queues.
    pub fn num_queues(&self) -> u16 {
        self.num_queues
    }

    /// Capacity in 512-byte sectors.
    pub fn sectors(&self) -> u64 {
        self.sectors
    }

    /// Requests completed on each queue since the last call (the loops log it when a
    /// frontend goes, so a harness can see which queues the guest used).
    pub fn take_served(&self) -> Vec<u64> {
        self.served.iter().map(|c| c.swap(0, Relaxed)).collect()
    }

    /// Virtio feature bits offered (plus `VHOST_USER_F_PROTOCOL_FEATURES`).
    pub fn features(&self) -> u64 {
        (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | (1 << VIRTIO_BLK_F_SEG_MAX)
            | (1 << VIRTIO_BLK_F_FLUSH)
            | (1 << VIRTIO_BLK_F_MQ)
            | VHOST_USER_F_PROTOCOL_FEATURES
    }

    /// `struct virtio_blk_config`, as far as this device fills it: capacity (offset 0),
    /// `seg_max` (12), `num_queues` (34); everything else 0. 60 bytes, the size of the
    /// structure in Linux 6.1 and QEMU 7.2.
    pub fn config_space(&self) -> [u8; 60] {
        let mut c = [0u8; 60];
        c[0..8].copy_from_slice(&self.sectors.to_le_bytes());
        c[12..16].copy_from_slice(&SEG_MAX.to_le_bytes());
        c[34..36].copy_from_slice(&self.num_queues.to_le_bytes());
        c
    }

    /// `size` bytes of config space from `offset` (zeros past the end), or `None` for a
    /// range that does not start inside it.
    pub fn read_config(&self, offset: u32, size: u32) -> Option<Vec<u8>> {
        let c = self.config_space();
        let start = offset as usize;
        let size = size as usize;
        if start >= c.len() || size > 256 {
            return None;
        }
        let mut out = vec![0u8; size];
        let n = size.min(c.len() - start);
        out[..n].copy_from_slice(&c[start..start + n]);
        Some(out)
    }

    /// Serve every available chain of `queue`, with EVENT_IDX (or flag) suppression of kicks
    /// while it works, and report whether the driver wants an interrupt for what was used.
    ///
    /// # Errors
    ///
    /// A ring the guest broke (bad avail index, a head index outside the table, rings outside
    /// guest memory): the caller marks the queue broken.
    pub fn process_queue(
        &self,
        index: usize,
        queue: &mut Queue,
        mem: &Mem,
    ) -> Result<bool, virtio_queue::Error> {
        let mut used_any = false;
        loop {
            queue.disable_notification(mem)?;
            loop {
                let chain = queue.iter(mem)?.next();
                let Some(chain) = chain else { break };
                let head = chain.head_index();
                let len = self.handle_chain(mem, chain);
                queue.add_used(mem, head, len)?;
                if let Some(c) = self.served.get(index) {
                    c.fetch_add(1, Relaxed);
                }
                used_any = true;
            }
            // Re-enable kicks; if the driver added more meanwhile, go round again.
            if !queue.enable_notification(mem)? {
                break;
            }
        }
        Ok(used_any && queue.needs_notification(mem)?)
    }

    /// Do one request; returns the used length (bytes written into the chain).
    pub fn handle_chain(&self, mem: &Mem, chain: DescriptorChain<&Mem>) -> u32 {
        // The chain iterator is bounded (queue size, or the indirect table's size), so
        // this collects at most 65535 + 1024 descriptors for the most hostile chain.
        let descs: Vec<Descriptor> = chain.collect();
        let Some(last) = descs.last().copied() else {
            return 0; // nothing readable, nothing to write a status into
        };
        // The status byte: the last descriptor, device-writable. Without one there is no
        // way to report anything; the request completes with nothing written.
        if !last.is_write_only() || last.len() == 0 {
            return 0;
        }
        let status_at = last.addr();
        let write_status = |s: u32| match mem.write_obj(s as u8, status_at) {
            Ok(()) => true,
            Err(_) => false,
        };
        // A chain that stopped early (loop, `next` out of the table, a bad or nested
        // indirect table) still has NEXT on its last descriptor.
        let status = if last.has_next() || descs.len() < 2 {
            Err(())
        } else {
            Ok(())
        };
        let (status, data_len) = match status.and_then(|()| self.request(mem, &descs)) {
            Ok((s, n)) => (s, n),
            Err(()) => (VIRTIO_BLK_S_IOERR, 0),
        };
        if write_status(status) {
            data_len.saturating_add(1)
        } else {
            0
        }
    }

    /// Parse and run a request of at least two descriptors whose last is a writable status;
    /// `Ok((status, bytes written into data descriptors))`, `Err` for `IOERR`.
    fn request(&self, mem: &Mem, descs: &[Descriptor]) -> Result<(u32, u32), ()> {
        let head = descs[0];
        if head.is_write_only() || head.len() != HEADER_LEN {
            return Err(());
        }
        let mut hdr = [0u8; HEADER_LEN as usize];
        mem.read_slice(&mut hdr, head.addr()).map_err(|_| ())?;
        let rtype = u32::from_le_bytes(hdr[0..4].try_into().unwrap_or_default());
        let sector = u64::from_le_bytes(hdr[8..16].try_into().unwrap_or_default());
        let data = &descs[1..descs.len() - 1];
        if data.len() > SEG_MAX as usize {
            return Err(());
        }
        match rtype {
            VIRTIO_BLK_T_IN | VIRTIO_BLK_T_OUT => {
                let write_to_guest = rtype == VIRTIO_BLK_T_IN;
                if data.iter().any(|d| d.is_write_only() != write_to_guest) {
                    return Err(());
                }
                let total: u64 = data.iter().map(|d| u64::from(d.len())).sum();
                if total % SECTOR != 0 || total > u64::from(u32::MAX) {
                    return Err(());
                }
                let end = sector
                    .checked_mul(SECTOR)
                    .and_then(|off| off.checked_add(total))
                    .ok_or(())?;
                if end > self.sectors * SECTOR {
                    return Err(());
                }
                let off = sector * SECTOR;
                match self.transfer(mem, data, off, write_to_guest) {
                    Transfer::Done if write_to_guest => Ok((VIRTIO_BLK_S_OK, total as u32)),
                    Transfer::Done => Ok((VIRTIO_BLK_S_OK, 0)),
                    Transfer::Failed => Err(()),
                }
            }
            VIRTIO_BLK_T_FLUSH => match self.image.sync_data() {
                Ok(()) => Ok((VIRTIO_BLK_S_OK, 0)),
                Err(_) => Err(()),
            },
            VIRTIO_BLK_T_GET_ID => {
                let mut written = 0usize;
                for d in data {
                    if !d.is_write_only() {
                        return Err(());
                    }
                    let n = (d.len() as usize).min(ID_LEN - written);
                    mem.write_slice(&self.id[written..written + n], d.addr())
                        .map_err(|_| ())?;
                    written += n;
                    if written == ID_LEN {
                        break;
                    }
                }
                Ok((VIRTIO_BLK_S_OK, written as u32))
            }
            _ => Ok((VIRTIO_BLK_S_UNSUPP, 0)),
        }
    }

    /// Move the data descriptors' bytes between guest memory and the image at `off`, with
    /// one `preadv`/`pwritev` per pass (more passes only after a short transfer).
    fn transfer(&self, mem: &Mem, data: &[Descriptor], off: u64, read: bool) -> Transfer {
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(data.len());
        for d in data {
            for s in GuestMemoryBackend::get_slices(mem, d.addr(), d.len() as usize) {
                let s: VolatileSlice<'_, ()> = match s {
                    Ok(s) => s,
                    Err(_) => return Transfer::Failed,
                };
                if iov.len() == IOV_MAX {
                    return Transfer::Failed;
                }
                iov.push(libc::iovec {
                    iov_base: s.ptr_guard_mut().as_ptr().cast(),
                    iov_len: s.len(),
                });
            }
        }
        let mut first = 0usize;
        let mut off = off;
        while first < iov.len() {
            let rest = &iov[first..];
            let Ok(pos) = libc::off_t::try_from(off) else {
                return Transfer::Failed;
            };
            // SAFETY: every iovec points into a guest memory region mapped by `mem`, which
            // stays mapped while `mem` is borrowed; the lengths are those vm-memory checked.
            // The kernel reads or writes those bytes only for the duration of the call.
            let n = unsafe {
                if read {
                    libc::preadv(
                        self.image.as_raw_fd(),
                        rest.as_ptr(),
                        rest.len() as i32,
                        pos,
                    )
                } else {
                    libc::pwritev(
                        self.image.as_raw_fd(),
                        rest.as_ptr(),
                        rest.len() as i32,
                        pos,
                    )
                }
            };
            if n < 0 {
                if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Transfer::Failed;
            }
            if n == 0 {
                return Transfer::Failed; // end of file: the image shrank under us
            }
            let mut n = n as usize;
            off += n as u64;
            while n > 0 && first < iov.len() {
                let v = &mut iov[first];
                if n >= v.iov_len {
                    n -= v.iov_len;
                    first += 1;
                } else {
                    // SAFETY: `n < iov_len`, so the advanced pointer stays inside the slice.
                    v.iov_base = unsafe { v.iov_base.cast::<u8>().add(n).cast() };
                    v.iov_len -= n;
                    n = 0;
                }
            }
        }
        Transfer::Done
    }
}
