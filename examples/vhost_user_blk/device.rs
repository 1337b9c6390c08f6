//! The virtio-blk device, written once and run by both loops (`evfd_loop`, `rustvmm_loop`):
//! feature bits, config space, and the request path from a descriptor chain to the image
//! file and back.
//!
//! Requests: `IN`, `OUT`, `FLUSH`, `GET_ID`, `DISCARD` (a hole punched in the image) and
//! `WRITE_ZEROES` (a zeroed range, or a hole with the unmap flag); any other type completes
//! with `UNSUPP`. A read-only device (`VIRTIO_BLK_F_RO`) offers neither of the last two and
//! fails every write with `IOERR`, writing nothing. Every request is done synchronously on
//! the calling thread with one `preadv`/`pwritev` (or `fallocate`) on the image (the page
//! cache answers it), so a request is complete when `handle_chain` returns.
//!
//! # Any layout
//!
//! A virtio 1.x device must not assume how the driver splits a request into descriptors
//! (the spec's "Message Framing"; `VIRTIO_F_ANY_LAYOUT` is implied by `VERSION_1`). So a
//! chain is read as two byte streams, its device-readable descriptors and then its
//! device-writable ones ([`Layout`]): the 16-byte header is the first 16 readable bytes,
//! wherever the descriptor boundaries fall, the status is the last writable byte, and the
//! data is what lies between. Linux and QEMU give the header and the status descriptors of
//! their own; a header split over two descriptors, or the status byte at the end of the
//! last data buffer, is served the same.
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
//! - a request whose layout is wrong (fewer than 16 readable bytes, no writable byte last, a
//!   readable descriptor after a writable one, data in the wrong direction, more than
//!   [`SEG_MAX`] + 2 descriptors, a length that is not a multiple of 512, sectors past the
//!   capacity, a discard or write-zeroes segment past the limits in the config space)
//!   completes with `IOERR` (`UNSUPP` for flags the device does not know), or with a used
//!   length of 0 when there is no status byte to write;
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
    VIRTIO_BLK_F_BLK_SIZE, VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_FLUSH, VIRTIO_BLK_F_MQ,
    VIRTIO_BLK_F_RO, VIRTIO_BLK_F_SEG_MAX, VIRTIO_BLK_F_TOPOLOGY, VIRTIO_BLK_F_WRITE_ZEROES,
    VIRTIO_BLK_S_IOERR, VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_DISCARD,
    VIRTIO_BLK_T_FLUSH, VIRTIO_BLK_T_GET_ID, VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT,
    VIRTIO_BLK_T_WRITE_ZEROES, VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP,
};
use virtio_bindings::bindings::virtio_config::VIRTIO_F_VERSION_1;
use virtio_bindings::bindings::virtio_ring::{
    VIRTIO_RING_F_EVENT_IDX, VIRTIO_RING_F_INDIRECT_DESC,
};
use virtio_queue::desc::split::Descriptor;
use virtio_queue::{DescriptorChain, Queue, QueueOwnedT, QueueT};
use vm_memory::{Address, Bytes, GuestAddress, GuestMemoryBackend, GuestMemoryMmap, VolatileSlice};

/// The guest memory both loops map: the frontend's memfd regions, no dirty bitmap.
pub type Mem = GuestMemoryMmap<()>;

/// Sector size of the virtio-blk protocol.
pub const SECTOR: u64 = 512;
/// Data segments per request (config `seg_max`); a chain holds at most this + 2 descriptors.
pub const SEG_MAX: u32 = 126;
/// Segments per `DISCARD` or `WRITE_ZEROES` request (config `max_discard_seg`,
/// `max_write_zeroes_seg`).
pub const MAX_RANGE_SEGS: u32 = 16;
/// Sectors per `DISCARD` or `WRITE_ZEROES` segment (config `max_discard_sectors`,
/// `max_write_zeroes_sectors`): 2 GiB.
pub const MAX_RANGE_SECTORS: u32 = 1 << 22;
/// Length of one `DISCARD`/`WRITE_ZEROES` segment: sector (le64), sectors (le32), flags
/// (le32).
const RANGE_LEN: u64 = 16;
/// Largest queue the device accepts.
pub const MAX_QUEUE_SIZE: u16 = 1024;
/// `VHOST_USER_F_PROTOCOL_FEATURES` (bit 30 of the virtio feature word, vhost-user only).
pub const VHOST_USER_F_PROTOCOL_FEATURES: u64 = 1 << 30;
/// Length of the `GET_ID` serial (virtio spec: 20 bytes, not NUL-terminated when full).
pub const ID_LEN: usize = 20;
/// The virtio-blk request header: type, reserved, sector.
const HEADER_LEN: u64 = 16;
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
    read_only: bool,
    sectors: u64,
    /// `log2` of the image file system's block size in sectors, at most 3 (config
    /// `physical_block_exp`): 3 for 4 KiB blocks, 0 where that size is not a power of
    /// two of at least a sector.
    physical_block_exp: u8,
    num_queues: u16,
    id: [u8; ID_LEN],
    /// Requests completed per queue since the last [`take_served`](Self::take_served).
    served: Vec<AtomicU64>,
}

impl BlockDevice {
    /// Serve `image` with `num_queues` request queues, read-only (`VIRTIO_BLK_F_RO`: every
    /// write fails with `IOERR`; `image` may be opened read-only) or read-write.
    pub fn new(image: File, num_queues: u16, read_only: bool) -> io::Result<BlockDevice> {
        if num_queues == 0 || num_queues > 64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("--queues must be 1..=64, not {num_queues}"),
            ));
        }
        let meta = image.metadata()?;
        let len = meta.len();
        // At most a 4 KiB page: a file system that reports larger blocks (NFS: 1 MiB) is
        // not made faster by a guest whose minimum I/O is that large, and it would steer the
        // guest's own choices (a file system's stripe hints) for nothing.
        let physical_block_exp = {
            use std::os::unix::fs::MetadataExt;
            let per_block = meta.blksize() / SECTOR;
            if per_block.is_power_of_two() {
                per_block.trailing_zeros().min(3) as u8
            } else {
                0
            }
        };
        let mut id = [0u8; ID_LEN];
        let serial = b"evfd-vhost-user-blk";
        id[..serial.len()].copy_from_slice(serial);
        Ok(BlockDevice {
            image,
            read_only,
            sectors: len / SECTOR,
            physical_block_exp,
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
        let common = (1 << VIRTIO_F_VERSION_1)
            | (1 << VIRTIO_RING_F_EVENT_IDX)
            | (1 << VIRTIO_RING_F_INDIRECT_DESC)
            | (1 << VIRTIO_BLK_F_SEG_MAX)
            | (1 << VIRTIO_BLK_F_FLUSH)
            | (1 << VIRTIO_BLK_F_MQ)
            | (1 << VIRTIO_BLK_F_BLK_SIZE)
            | (1 << VIRTIO_BLK_F_TOPOLOGY)
            | VHOST_USER_F_PROTOCOL_FEATURES;
        if self.read_only {
            common | (1 << VIRTIO_BLK_F_RO)
        } else {
            common | (1 << VIRTIO_BLK_F_DISCARD) | (1 << VIRTIO_BLK_F_WRITE_ZEROES)
        }
    }

    /// `struct virtio_blk_config`, as far as this device fills it: capacity (offset 0),
    /// `seg_max` (12), `blk_size` (20: 512, the logical block), the topology (24:
    /// `physical_block_exp`, 26: `min_io_size` in logical blocks, both from the image file
    /// system's block size, so that the guest keeps its writes to whole host blocks),
    /// `num_queues` (34), and unless read-only the discard and write-zeroes
    /// limits (36: `max_discard_sectors`, 40: `max_discard_seg`, 44:
    /// `discard_sector_alignment`, 48: `max_write_zeroes_sectors`, 52:
    /// `max_write_zeroes_seg`, 56: `write_zeroes_may_unmap`); everything else 0. 60 bytes,
    /// the size of the structure in Linux 6.1 and QEMU 7.2.
    pub fn config_space(&self) -> [u8; 60] {
        let mut c = [0u8; 60];
        c[0..8].copy_from_slice(&self.sectors.to_le_bytes());
        c[12..16].copy_from_slice(&SEG_MAX.to_le_bytes());
        c[20..24].copy_from_slice(&(SECTOR as u32).to_le_bytes());
        c[24] = self.physical_block_exp;
        c[26..28].copy_from_slice(&(1u16 << self.physical_block_exp).to_le_bytes());
        c[34..36].copy_from_slice(&self.num_queues.to_le_bytes());
        if !self.read_only {
            c[36..40].copy_from_slice(&MAX_RANGE_SECTORS.to_le_bytes());
            c[40..44].copy_from_slice(&MAX_RANGE_SEGS.to_le_bytes());
            c[44..48].copy_from_slice(&1u32.to_le_bytes());
            c[48..52].copy_from_slice(&MAX_RANGE_SECTORS.to_le_bytes());
            c[52..56].copy_from_slice(&MAX_RANGE_SEGS.to_le_bytes());
            c[56] = 1;
        }
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
        // The status byte: the last byte of the last descriptor, device-writable. Without
        // one there is no way to report anything; the request completes with nothing
        // written.
        if !last.is_write_only() || last.len() == 0 {
            return 0;
        }
        let Some(status_at) = last.addr().checked_add(u64::from(last.len()) - 1) else {
            return 0;
        };
        let write_status = |s: u32| mem.write_obj(s as u8, status_at).is_ok();
        // A chain that stopped early (loop, `next` out of the table, a bad or nested
        // indirect table) still has NEXT on its last descriptor.
        let layout = if last.has_next() || descs.len() > SEG_MAX as usize + 2 {
            None
        } else {
            Layout::of(&descs)
        };
        let (status, data_len) = match layout.ok_or(()).and_then(|l| self.request(mem, &l)) {
            Ok((s, n)) => (s, n),
            Err(()) => (VIRTIO_BLK_S_IOERR, 0),
        };
        if write_status(status) {
            data_len.saturating_add(1)
        } else {
            0
        }
    }

    /// Parse and run a request whose layout ends in a writable byte (the status);
    /// `Ok((status, bytes written into the data))`, `Err` for `IOERR`.
    fn request(&self, mem: &Mem, layout: &Layout<'_>) -> Result<(u32, u32), ()> {
        let readable = total(layout.readable);
        let writable = total(layout.writable); // at least the status byte
        let mut hdr = [0u8; HEADER_LEN as usize];
        gather(
            mem,
            slice(layout.readable, 0, HEADER_LEN).ok_or(())?,
            &mut hdr,
        )?;
        let rtype = u32::from_le_bytes(hdr[0..4].try_into().unwrap_or_default());
        let sector = u64::from_le_bytes(hdr[8..16].try_into().unwrap_or_default());
        // What follows the header (readable) and what precedes the status (writable).
        let from_guest = || slice(layout.readable, HEADER_LEN, readable - HEADER_LEN);
        let to_guest = || slice(layout.writable, 0, writable - 1);
        let only_header = readable == HEADER_LEN;
        let only_status = writable == 1;
        match rtype {
            VIRTIO_BLK_T_IN | VIRTIO_BLK_T_OUT => {
                let write_to_guest = rtype == VIRTIO_BLK_T_IN;
                if !write_to_guest && self.read_only {
                    return Err(());
                }
                let (data, total) = if write_to_guest && only_header {
                    (to_guest(), writable - 1)
                } else if !write_to_guest && only_status {
                    (from_guest(), readable - HEADER_LEN)
                } else {
                    return Err(()); // data in the wrong direction
                };
                let off = self.range(sector, total)?;
                if total > u64::from(u32::MAX) {
                    return Err(());
                }
                match self.transfer(mem, data.ok_or(())?, off, write_to_guest) {
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
                if !only_header {
                    return Err(());
                }
                let mut written = 0usize;
                for sp in to_guest().ok_or(())? {
                    let n = (sp.len as usize).min(ID_LEN - written);
                    mem.write_slice(&self.id[written..written + n], sp.addr)
                        .map_err(|_| ())?;
                    written += n;
                    if written == ID_LEN {
                        break;
                    }
                }
                Ok((VIRTIO_BLK_S_OK, written as u32))
            }
            VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES if !self.read_only => {
                if !only_status {
                    return Err(());
                }
                self.ranges(mem, from_guest().ok_or(())?, rtype == VIRTIO_BLK_T_DISCARD)
                    .map(|s| (s, 0))
            }
            VIRTIO_BLK_T_DISCARD | VIRTIO_BLK_T_WRITE_ZEROES => Err(()),
            _ => Ok((VIRTIO_BLK_S_UNSUPP, 0)),
        }
    }

    /// The byte offset of `len` bytes at `sector`, if they are whole sectors inside the
    /// image.
    fn range(&self, sector: u64, len: u64) -> Result<u64, ()> {
        let off = sector.checked_mul(SECTOR).ok_or(())?;
        let end = off.checked_add(len).ok_or(())?;
        if len % SECTOR != 0 || end > self.sectors * SECTOR {
            return Err(());
        }
        Ok(off)
    }

    /// A `DISCARD` (`discard`) or `WRITE_ZEROES` request's segments, read from `data`
    /// (each [`RANGE_LEN`] bytes) and checked all before any is done: a bad one fails the
    /// whole request and changes nothing. The status: `OK`, or `UNSUPP` for a flag the
    /// request type does not know (the unmap flag on a discard, any other bit).
    fn ranges(
        &self,
        mem: &Mem,
        data: impl Iterator<Item = Span>,
        discard: bool,
    ) -> Result<u32, ()> {
        let mut bytes = [0u8; (RANGE_LEN * MAX_RANGE_SEGS as u64) as usize];
        let len = gather(mem, data, &mut bytes)?;
        if len == 0 || len as u64 % RANGE_LEN != 0 {
            return Err(());
        }
        let bytes = &bytes[..len];
        let mut todo = Vec::new();
        for seg in bytes.chunks_exact(RANGE_LEN as usize) {
            let sector = u64::from_le_bytes(seg[0..8].try_into().unwrap_or_default());
            let sectors = u32::from_le_bytes(seg[8..12].try_into().unwrap_or_default());
            let flags = u32::from_le_bytes(seg[12..16].try_into().unwrap_or_default());
            let known = if discard {
                0
            } else {
                VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP
            };
            if flags & !known != 0 {
                return Ok(VIRTIO_BLK_S_UNSUPP);
            }
            if sectors > MAX_RANGE_SECTORS {
                return Err(());
            }
            let n = u64::from(sectors) * SECTOR;
            let off = self.range(sector, n)?;
            todo.push((off, n, flags & VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP != 0));
        }
        for (off, n, unmap) in todo {
            if n == 0 {
                continue;
            }
            let done = if discard {
                // A hint: where the file system cannot punch holes, the data stays.
                let _ = self.punch(off, n, false);
                true
            } else {
                (unmap && self.punch(off, n, false))
                    || self.punch(off, n, true)
                    || self.write_zeroes(off, n)
            };
            if !done {
                return Err(());
            }
        }
        Ok(VIRTIO_BLK_S_OK)
    }

    /// `fallocate` over `off..off + n`, the file's size kept: a hole punched, or with
    /// `zero` the range zeroed in place. `false` where the file system refuses.
    fn punch(&self, off: u64, n: u64, zero: bool) -> bool {
        let (Ok(off), Ok(n)) = (libc::off_t::try_from(off), libc::off_t::try_from(n)) else {
            return false;
        };
        let mode = libc::FALLOC_FL_KEEP_SIZE
            | if zero {
                libc::FALLOC_FL_ZERO_RANGE
            } else {
                libc::FALLOC_FL_PUNCH_HOLE
            };
        loop {
            // SAFETY: an fd this device owns; no memory is passed.
            let r = unsafe { libc::fallocate(self.image.as_raw_fd(), mode, off, n) };
            if r == 0 {
                return true;
            }
            if io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
                return false;
            }
        }
    }

    /// Zeros written over `off..off + n` (where `fallocate` cannot zero a range).
    fn write_zeroes(&self, off: u64, n: u64) -> bool {
        use std::os::unix::fs::FileExt;
        let zeros = vec![0u8; 1 << 20];
        let (mut off, end) = (off, off + n);
        while off < end {
            let len = ((end - off) as usize).min(zeros.len());
            if self.image.write_all_at(&zeros[..len], off).is_err() {
                return false;
            }
            off += len as u64;
        }
        true
    }

    /// Move the data's bytes between guest memory and the image at `off`, with one
    /// `preadv`/`pwritev` per pass (more passes only after a short transfer).
    fn transfer(
        &self,
        mem: &Mem,
        data: impl Iterator<Item = Span>,
        off: u64,
        read: bool,
    ) -> Transfer {
        let mut iov: Vec<libc::iovec> = Vec::with_capacity(data.size_hint().0);
        for d in data {
            for s in GuestMemoryBackend::get_slices(mem, d.addr, d.len as usize) {
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

/// A run of guest memory a chain gives the device: a descriptor, or a part of one.
#[derive(Debug, Clone, Copy)]
struct Span {
    addr: GuestAddress,
    len: u64,
}

/// A chain as the device reads it (module docs, "Any layout"): its device-readable
/// descriptors, then its device-writable ones, in chain order. Borrowed, not copied: a
/// request's parse allocates nothing of its own.
#[derive(Debug)]
struct Layout<'d> {
    readable: &'d [Descriptor],
    writable: &'d [Descriptor],
}

impl<'d> Layout<'d> {
    /// `None` if a readable descriptor follows a writable one (the driver must put every
    /// device-writable descriptor after the device-readable ones), or a descriptor's end
    /// wraps the address space (so no span below can).
    fn of(descs: &'d [Descriptor]) -> Option<Layout<'d>> {
        let split = descs
            .iter()
            .position(Descriptor::is_write_only)
            .unwrap_or(descs.len());
        if descs[split..].iter().any(|d| !d.is_write_only()) {
            return None;
        }
        if descs
            .iter()
            .any(|d| d.addr().checked_add(u64::from(d.len())).is_none())
        {
            return None;
        }
        Some(Layout {
            readable: &descs[..split],
            writable: &descs[split..],
        })
    }
}

/// Read the bytes of `spans` into the front of `buf`; how many, or `Err` if they do not
/// fit in `buf` or are not all in guest memory.
fn gather(mem: &Mem, spans: impl Iterator<Item = Span>, buf: &mut [u8]) -> Result<usize, ()> {
    let mut len = 0usize;
    for sp in spans {
        let end = len
            .checked_add(sp.len as usize)
            .filter(|&e| e <= buf.len())
            .ok_or(())?;
        mem.read_slice(&mut buf[len..end], sp.addr)
            .map_err(|_| ())?;
        len = end;
    }
    Ok(len)
}

/// The bytes `descs` hold.
fn total(descs: &[Descriptor]) -> u64 {
    descs.iter().map(|d| u64::from(d.len())).sum()
}

/// The `len` bytes of `descs` from byte `start`, as spans, made as they are walked; `None`
/// if `descs` hold fewer. (Addresses cannot wrap: [`Layout::of`] refused such a chain.)
fn slice(descs: &[Descriptor], start: u64, len: u64) -> Option<impl Iterator<Item = Span> + '_> {
    if start.checked_add(len)? > total(descs) {
        return None;
    }
    let (mut skip, mut want) = (start, len);
    Some(descs.iter().filter_map(move |d| {
        let dlen = u64::from(d.len());
        if want == 0 || dlen == 0 {
            return None;
        }
        if skip >= dlen {
            skip -= dlen;
            return None;
        }
        let n = (dlen - skip).min(want);
        let addr = d.addr().unchecked_add(skip);
        skip = 0;
        want -= n;
        Some(Span { addr, len: n })
    }))
}
