//! The vhost-user-blk example's device (`examples/vhost_user_blk/device.rs`) against
//! hand-built split rings: well-formed requests work, in any descriptor layout (a header
//! split over two descriptors, the status byte at the end of a data buffer, header and data
//! in one buffer), `DISCARD` and `WRITE_ZEROES` change exactly the ranges asked, a
//! read-only device writes nothing, and every kind of bad guest input —
//! buffers outside guest memory, chains that loop or run past the table, too many segments,
//! wrong directions, wrong sizes, nested indirect tables, sectors past the end, a bogus
//! avail index or head index, rings outside guest memory — fails that request with `IOERR`
//! (or a used length of 0 when there is no status byte) or reports the queue broken. Never a
//! panic, a hang, or a write outside guest memory or past the image.

#[allow(dead_code)]
#[path = "../examples/vhost_user_blk/device.rs"]
mod device;

use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::path::PathBuf;

use device::{BlockDevice, Mem, ID_LEN, MAX_RANGE_SECTORS, MAX_RANGE_SEGS, SEG_MAX};
use virtio_bindings::bindings::virtio_blk::{
    VIRTIO_BLK_F_DISCARD, VIRTIO_BLK_F_RO, VIRTIO_BLK_F_WRITE_ZEROES, VIRTIO_BLK_S_IOERR,
    VIRTIO_BLK_S_OK, VIRTIO_BLK_S_UNSUPP, VIRTIO_BLK_T_DISCARD, VIRTIO_BLK_T_GET_ID,
    VIRTIO_BLK_T_IN, VIRTIO_BLK_T_OUT, VIRTIO_BLK_T_WRITE_ZEROES,
    VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP,
};
use virtio_bindings::bindings::virtio_ring::{
    VRING_DESC_F_INDIRECT, VRING_DESC_F_NEXT, VRING_DESC_F_WRITE,
};
use virtio_queue::desc::{split::Descriptor as D, RawDescriptor};
use virtio_queue::mock::MockSplitQueue;
use virtio_queue::{Queue, QueueT};
use vm_memory::{Bytes, GuestAddress};

const MEM_SIZE: u64 = 0x10_0000; // 1 MiB of guest memory
const QSIZE: u16 = 16;
const IMAGE_SECTORS: u64 = 2048; // 1 MiB image
const HDR: u64 = 0x1_0000;
const DATA: u64 = 0x2_0000;
const STATUS: u64 = 0x8_0000;
const NEXT: u16 = VRING_DESC_F_NEXT as u16;
const WRITE: u16 = VRING_DESC_F_WRITE as u16;

struct Image {
    path: PathBuf,
}

impl Image {
    /// A 1 MiB image whose sector `s` is filled with the byte `s as u8`.
    fn new(name: &str) -> Image {
        let path =
            std::env::temp_dir().join(format!("evfd-vublk-{}-{name}.img", std::process::id()));
        let mut f = File::create(&path).unwrap();
        for s in 0..IMAGE_SECTORS {
            f.write_all(&[s as u8; 512]).unwrap();
        }
        Image { path }
    }
    fn device(&self) -> BlockDevice {
        let f = OpenOptions::new()
            .read(true)
            .write(true)
            .open(&self.path)
            .unwrap();
        BlockDevice::new(f, 1, false).unwrap()
    }
    /// The image opened read-only, served read-only.
    fn read_only_device(&self) -> BlockDevice {
        BlockDevice::new(File::open(&self.path).unwrap(), 1, true).unwrap()
    }
    fn read(&self, off: u64, len: usize) -> Vec<u8> {
        let mut f = File::open(&self.path).unwrap();
        f.seek(SeekFrom::Start(off)).unwrap();
        let mut v = vec![0u8; len];
        f.read_exact(&mut v).unwrap();
        v
    }
    fn len(&self) -> u64 {
        std::fs::metadata(&self.path).unwrap().len()
    }
}

impl Drop for Image {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.path);
    }
}

fn mem() -> Mem {
    Mem::from_ranges(&[(GuestAddress(0), MEM_SIZE as usize)]).unwrap()
}

fn header(m: &Mem, at: u64, rtype: u32, sector: u64) {
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&rtype.to_le_bytes());
    h[8..16].copy_from_slice(&sector.to_le_bytes());
    m.write_slice(&h, GuestAddress(at)).unwrap();
}

/// A ring with `chains` (each a list of descriptors, linked in table order from its first
/// index) made available; returns the ring and the queue over it.
fn ring<'a>(
    m: &'a Mem,
    table: &[(u64, u32, u16, u16)],
    heads: &[u16],
) -> (MockSplitQueue<'a, Mem>, Queue) {
    let vq = MockSplitQueue::new(m, QSIZE);
    for (i, &(addr, len, flags, next)) in table.iter().enumerate() {
        vq.desc_table()
            .store(
                i as u16,
                RawDescriptor::from(D::new(addr, len, flags, next)),
            )
            .unwrap();
    }
    for (i, &h) in heads.iter().enumerate() {
        vq.avail().ring().ref_at(i).unwrap().store(h);
    }
    vq.avail().idx().store(heads.len() as u16);
    let q: Queue = vq.create_queue().unwrap();
    (vq, q)
}

/// Used ring entry `i`: (id, len); and the used index.
fn used(m: &Mem, vq: &MockSplitQueue<'_, Mem>, i: u64) -> (u32, u32) {
    let base = vq.used_addr().0;
    let id: u32 = m.read_obj(GuestAddress(base + 4 + 8 * i)).unwrap();
    let len: u32 = m.read_obj(GuestAddress(base + 8 + 8 * i)).unwrap();
    (id, len)
}

fn used_idx(m: &Mem, vq: &MockSplitQueue<'_, Mem>) -> u16 {
    m.read_obj(GuestAddress(vq.used_addr().0 + 2)).unwrap()
}

fn status(m: &Mem) -> u32 {
    u32::from(m.read_obj::<u8>(GuestAddress(STATUS)).unwrap())
}

/// Run one chain (descriptor 0 the head) and return (status byte, used len).
fn run_one(dev: &BlockDevice, m: &Mem, table: &[(u64, u32, u16, u16)]) -> (u32, u32) {
    run_at(dev, m, table, STATUS)
}

/// As [`run_one`], with the status byte expected at `status_at`.
fn run_at(
    dev: &BlockDevice,
    m: &Mem,
    table: &[(u64, u32, u16, u16)],
    status_at: u64,
) -> (u32, u32) {
    m.write_obj(0xffu8, GuestAddress(status_at)).unwrap();
    let (vq, mut q) = ring(m, table, &[0]);
    dev.process_queue(0, &mut q, m)
        .expect("a bad request must not break the queue");
    assert_eq!(used_idx(m, &vq), 1, "the request was completed");
    let (id, len) = used(m, &vq, 0);
    assert_eq!(id, 0);
    let s: u8 = m.read_obj(GuestAddress(status_at)).unwrap();
    (u32::from(s), len)
}

#[test]
fn good_requests_work() {
    let img = Image::new("good");
    let dev = img.device();
    let m = mem();
    // IN: sectors 8..16 into guest memory.
    header(&m, HDR, VIRTIO_BLK_T_IN, 8);
    let (s, len) = run_one(
        &dev,
        &m,
        &[
            (HDR, 16, NEXT, 1),
            (DATA, 4096, WRITE | NEXT, 2),
            (STATUS, 1, WRITE, 0),
        ],
    );
    assert_eq!((s, len), (VIRTIO_BLK_S_OK, 4097));
    let mut got = vec![0u8; 4096];
    m.read_slice(&mut got, GuestAddress(DATA)).unwrap();
    assert_eq!(got, img.read(8 * 512, 4096));
    assert_eq!(got[0], 8);
    // OUT: two segments to sector 100.
    m.write_slice(&[0xab; 512], GuestAddress(DATA)).unwrap();
    m.write_slice(&[0xcd; 512], GuestAddress(DATA + 0x1000))
        .unwrap();
    header(&m, HDR, VIRTIO_BLK_T_OUT, 100);
    let (s, len) = run_one(
        &dev,
        &m,
        &[
            (HDR, 16, NEXT, 1),
            (DATA, 512, NEXT, 2),
            (DATA + 0x1000, 512, NEXT, 3),
            (STATUS, 1, WRITE, 0),
        ],
    );
    assert_eq!((s, len), (VIRTIO_BLK_S_OK, 1));
    assert_eq!(
        img.read(100 * 512, 1024),
        [[0xab; 512], [0xcd; 512]].concat()
    );
    // GET_ID.
    header(&m, HDR, VIRTIO_BLK_T_GET_ID, 0);
    let (s, len) = run_one(
        &dev,
        &m,
        &[
            (HDR, 16, NEXT, 1),
            (DATA, 64, WRITE | NEXT, 2),
            (STATUS, 1, WRITE, 0),
        ],
    );
    assert_eq!((s, len), (VIRTIO_BLK_S_OK, ID_LEN as u32 + 1));
    // Unknown type: UNSUPP.
    header(&m, HDR, 0x7777, 0);
    let (s, _) = run_one(&dev, &m, &[(HDR, 16, NEXT, 1), (STATUS, 1, WRITE, 0)]);
    assert_eq!(s, VIRTIO_BLK_S_UNSUPP);
}

#[test]
fn bad_chains_fail_the_request() {
    let img = Image::new("bad");
    let before = img.read(0, (IMAGE_SECTORS * 512) as usize);
    let dev = img.device();
    let m = mem();
    let ioerr = |name: &str, rtype: u32, sector: u64, table: &[(u64, u32, u16, u16)]| {
        header(&m, HDR, rtype, sector);
        let (s, len) = run_one(&dev, &m, table);
        assert_eq!((s, len), (VIRTIO_BLK_S_IOERR, 1), "{name}");
    };
    let st = (STATUS, 1, WRITE, 0);
    // Buffers outside guest memory, or straddling its end.
    ioerr(
        "data outside memory",
        VIRTIO_BLK_T_IN,
        0,
        &[(HDR, 16, NEXT, 1), (1 << 40, 4096, WRITE | NEXT, 2), st],
    );
    ioerr(
        "data past the end",
        VIRTIO_BLK_T_OUT,
        0,
        &[(HDR, 16, NEXT, 1), (MEM_SIZE - 512, 4096, NEXT, 2), st],
    );
    ioerr(
        "address overflow",
        VIRTIO_BLK_T_IN,
        0,
        &[
            (HDR, 16, NEXT, 1),
            (u64::MAX - 511, 512, WRITE | NEXT, 2),
            st,
        ],
    );
    ioerr(
        "header outside memory",
        VIRTIO_BLK_T_IN,
        0,
        &[(1 << 40, 16, NEXT, 1), (DATA, 512, WRITE | NEXT, 2), st],
    );
    // Sectors past the capacity, and a sector number whose byte offset overflows.
    ioerr(
        "past capacity",
        VIRTIO_BLK_T_OUT,
        IMAGE_SECTORS - 1,
        &[(HDR, 16, NEXT, 1), (DATA, 1024, NEXT, 2), st],
    );
    ioerr(
        "sector overflow",
        VIRTIO_BLK_T_IN,
        u64::MAX / 256,
        &[(HDR, 16, NEXT, 1), (DATA, 512, WRITE | NEXT, 2), st],
    );
    // Wrong directions and sizes.
    ioerr(
        "IN into readable data",
        VIRTIO_BLK_T_IN,
        0,
        &[(HDR, 16, NEXT, 1), (DATA, 512, NEXT, 2), st],
    );
    ioerr(
        "OUT from writable data",
        VIRTIO_BLK_T_OUT,
        0,
        &[(HDR, 16, NEXT, 1), (DATA, 512, WRITE | NEXT, 2), st],
    );
    ioerr(
        "writable header",
        VIRTIO_BLK_T_IN,
        0,
        &[(HDR, 16, WRITE | NEXT, 1), (DATA, 512, WRITE | NEXT, 2), st],
    );
    ioerr(
        "short header",
        VIRTIO_BLK_T_IN,
        0,
        &[(HDR, 8, NEXT, 1), (DATA, 512, WRITE | NEXT, 2), st],
    );
    ioerr(
        "not a sector multiple",
        VIRTIO_BLK_T_OUT,
        0,
        &[(HDR, 16, NEXT, 1), (DATA, 100, NEXT, 2), st],
    );
    ioerr(
        "header only, no status",
        VIRTIO_BLK_T_IN,
        0,
        &[(STATUS, 1, WRITE, 0)],
    );
    // A looping chain (1 -> 1 -> ...): bounded by the queue size, then IOERR into the last
    // writable descriptor seen.
    header(&m, HDR, VIRTIO_BLK_T_IN, 0);
    m.write_obj(0xffu8, GuestAddress(STATUS)).unwrap();
    let (vq, mut q) = ring(
        &m,
        &[(HDR, 16, NEXT, 1), (STATUS, 1, WRITE | NEXT, 1)],
        &[0],
    );
    dev.process_queue(0, &mut q, &m).unwrap();
    assert_eq!(used_idx(&m, &vq), 1);
    assert_eq!(
        (status(&m), used(&m, &vq, 0).1),
        (VIRTIO_BLK_S_IOERR, 1),
        "loop"
    );
    // `next` past the table.
    m.write_obj(0xffu8, GuestAddress(STATUS)).unwrap();
    let (vq, mut q) = ring(
        &m,
        &[(HDR, 16, NEXT, 1), (STATUS, 1, WRITE | NEXT, 200)],
        &[0],
    );
    dev.process_queue(0, &mut q, &m).unwrap();
    assert_eq!(
        (status(&m), used(&m, &vq, 0).1),
        (VIRTIO_BLK_S_IOERR, 1),
        "next out of the table"
    );
    // Too long: SEG_MAX + 1 data segments, in an indirect table.
    let n = SEG_MAX as u64 + 3; // header + data + status
    let table = 0x4_0000u64;
    for i in 0..n {
        let d = match i {
            0 => D::new(HDR, 16, NEXT, 1),
            i if i == n - 1 => D::new(STATUS, 1, WRITE, 0),
            i => D::new(DATA + 512 * i, 512, NEXT, (i + 1) as u16),
        };
        m.write_obj(RawDescriptor::from(d), GuestAddress(table + 16 * i))
            .unwrap();
    }
    header(&m, HDR, VIRTIO_BLK_T_OUT, 0);
    let ind = VRING_DESC_F_INDIRECT as u16;
    let (s, len) = run_one(&dev, &m, &[(table, (16 * n) as u32, ind, 0)]);
    assert_eq!((s, len), (VIRTIO_BLK_S_IOERR, 1), "too many segments");
    // The same table one segment shorter is fine (so the limit is the one advertised).
    m.write_obj(
        RawDescriptor::from(D::new(STATUS, 1, WRITE, 0)),
        GuestAddress(table + 16 * (n - 2)),
    )
    .unwrap();
    let (s, _) = run_one(&dev, &m, &[(table, (16 * (n - 1)) as u32, ind, 0)]);
    assert_eq!(s, VIRTIO_BLK_S_OK, "SEG_MAX segments");
    // A nested indirect table, and an indirect table of a length that is not a multiple
    // of 16: the chain stops; nothing to write a status into (used len 0).
    m.write_obj(
        RawDescriptor::from(D::new(table, 32, ind, 0)),
        GuestAddress(0x5_0000),
    )
    .unwrap();
    let (_, len) = run_one(&dev, &m, &[(0x5_0000, 16, ind, 0)]);
    assert_eq!(len, 0, "nested indirect");
    let (_, len) = run_one(&dev, &m, &[(table, 17, ind, 0)]);
    assert_eq!(len, 0, "indirect table length");
    // No writable status byte: nothing written, used len 0.
    let (s, len) = run_one(&dev, &m, &[(HDR, 16, NEXT, 1), (STATUS, 1, 0, 0)]);
    assert_eq!((s, len), (0xff, 0), "readable status");
    // Nothing above wrote to the image (the one good OUT wrote zeros-from-guest at 0..
    // SEG_MAX sectors: compare the rest) nor grew it.
    assert_eq!(img.len(), IMAGE_SECTORS * 512);
    let off = (SEG_MAX as usize) * 512;
    assert_eq!(img.read(off as u64, before.len() - off), before[off..]);
}

#[test]
fn broken_rings_are_reported_not_served() {
    let img = Image::new("rings");
    let dev = img.device();
    let m = mem();
    header(&m, HDR, VIRTIO_BLK_T_IN, 0);
    let good = [
        (HDR, 16, NEXT, 1),
        (DATA, 512, WRITE | NEXT, 2),
        (STATUS, 1, WRITE, 0),
    ];
    // An avail index more than a queue size ahead.
    let (vq, mut q) = ring(&m, &good, &[0]);
    vq.avail().idx().store(QSIZE + 5);
    assert!(dev.process_queue(0, &mut q, &m).is_err(), "bogus avail idx");
    assert_eq!(used_idx(&m, &vq), 0);
    // A head index outside the descriptor table.
    let (vq, mut q) = ring(&m, &good, &[QSIZE + 3]);
    assert!(
        dev.process_queue(0, &mut q, &m).is_err(),
        "head out of the table"
    );
    assert_eq!(used_idx(&m, &vq), 0);
    // A used ring outside guest memory: the queue is not valid, and serving it fails
    // without writing anywhere.
    let (_vq, mut q) = ring(&m, &good, &[0]);
    q.set_used_ring_address(Some((MEM_SIZE - 4) as u32), Some(0));
    assert!(!q.is_valid(&m));
    assert!(
        dev.process_queue(0, &mut q, &m).is_err(),
        "used ring outside memory"
    );
    // Many requests in one pass: every one completed, in order.
    let (vq, mut q) = ring(&m, &good, &[0, 0, 0, 0]);
    assert!(dev.process_queue(0, &mut q, &m).is_ok());
    assert_eq!(used_idx(&m, &vq), 4);
    assert_eq!(dev.take_served(), vec![4]);
}

#[test]
fn any_layout_is_served() {
    let img = Image::new("layout");
    let dev = img.device();
    let m = mem();
    // IN, the header split over two descriptors (8 + 8 bytes, apart in memory).
    let mut h = [0u8; 16];
    h[0..4].copy_from_slice(&VIRTIO_BLK_T_IN.to_le_bytes());
    h[8..16].copy_from_slice(&3u64.to_le_bytes());
    m.write_slice(&h[..8], GuestAddress(HDR)).unwrap();
    m.write_slice(&h[8..], GuestAddress(HDR + 0x100)).unwrap();
    let (s, len) = run_one(
        &dev,
        &m,
        &[
            (HDR, 8, NEXT, 1),
            (HDR + 0x100, 8, NEXT, 2),
            (DATA, 1024, WRITE | NEXT, 3),
            (STATUS, 1, WRITE, 0),
        ],
    );
    assert_eq!((s, len), (VIRTIO_BLK_S_OK, 1025), "split header");
    let mut got = vec![0u8; 1024];
    m.read_slice(&mut got, GuestAddress(DATA)).unwrap();
    assert_eq!(got, img.read(3 * 512, 1024));
    // IN, the status byte at the end of the one data buffer (and a zero-length
    // descriptor in between, which holds nothing).
    header(&m, HDR, VIRTIO_BLK_T_IN, 5);
    let (s, len) = run_at(
        &dev,
        &m,
        &[
            (HDR, 16, NEXT, 1),
            (0x7_0000, 0, NEXT, 2),
            (DATA, 512 + 1, WRITE, 0),
        ],
        DATA + 512,
    );
    assert_eq!((s, len), (VIRTIO_BLK_S_OK, 513), "status after the data");
    m.read_slice(&mut got[..512], GuestAddress(DATA)).unwrap();
    assert_eq!(got[..512], img.read(5 * 512, 512)[..]);
    // OUT, header and data in one readable buffer.
    header(&m, HDR, VIRTIO_BLK_T_OUT, 40);
    m.write_slice(&[0x5a; 1024], GuestAddress(HDR + 16))
        .unwrap();
    let (s, len) = run_one(
        &dev,
        &m,
        &[(HDR, 16 + 1024, NEXT, 1), (STATUS, 1, WRITE, 0)],
    );
    assert_eq!(
        (s, len),
        (VIRTIO_BLK_S_OK, 1),
        "header and data in one buffer"
    );
    assert_eq!(img.read(40 * 512, 1024), vec![0x5a; 1024]);
    assert_eq!(
        img.read(42 * 512, 512),
        vec![42u8; 512],
        "nothing past the data"
    );
    // GET_ID, the status right after the 20 bytes of the serial.
    header(&m, HDR, VIRTIO_BLK_T_GET_ID, 0);
    let (s, len) = run_at(
        &dev,
        &m,
        &[(HDR, 16, NEXT, 1), (DATA, ID_LEN as u32 + 1, WRITE, 0)],
        DATA + ID_LEN as u64,
    );
    assert_eq!((s, len), (VIRTIO_BLK_S_OK, ID_LEN as u32 + 1), "GET_ID");
    let mut id = [0u8; 19];
    m.read_slice(&mut id, GuestAddress(DATA)).unwrap();
    assert_eq!(&id, b"evfd-vhost-user-blk");
    // A readable descriptor after a writable one is refused, and writes nothing.
    header(&m, HDR, VIRTIO_BLK_T_OUT, 60);
    let (s, len) = run_one(
        &dev,
        &m,
        &[
            (HDR, 16, NEXT, 1),
            (DATA, 512, WRITE | NEXT, 2),
            (DATA + 0x1000, 512, NEXT, 3),
            (STATUS, 1, WRITE, 0),
        ],
    );
    assert_eq!((s, len), (VIRTIO_BLK_S_IOERR, 1), "readable after writable");
    assert_eq!(img.read(60 * 512, 512), vec![60u8; 512]);
}

/// One `DISCARD`/`WRITE_ZEROES` segment.
fn seg(sector: u64, sectors: u32, flags: u32) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[0..8].copy_from_slice(&sector.to_le_bytes());
    b[8..12].copy_from_slice(&sectors.to_le_bytes());
    b[12..16].copy_from_slice(&flags.to_le_bytes());
    b
}

#[test]
fn discard_and_write_zeroes_change_exactly_the_ranges() {
    let img = Image::new("zeroes");
    let dev = img.device();
    let f = dev.features();
    assert!(f & (1 << VIRTIO_BLK_F_DISCARD) != 0 && f & (1 << VIRTIO_BLK_F_WRITE_ZEROES) != 0);
    assert_eq!(f & (1 << VIRTIO_BLK_F_RO), 0);
    let c = dev.config_space();
    assert_eq!(c[20..24], 512u32.to_le_bytes(), "blk_size");
    // The topology follows the image's file system: its block (at most 4 KiB), in sectors,
    // as log2 and as the minimum I/O size.
    use std::os::unix::fs::MetadataExt;
    let per_block = (std::fs::metadata(&img.path).unwrap().blksize() / 512).min(8);
    if per_block.is_power_of_two() {
        assert_eq!(u64::from(c[24]), u64::from(per_block.trailing_zeros()));
        assert_eq!(u64::from(u16::from_le_bytes([c[26], c[27]])), per_block);
    }
    assert_eq!(
        c[36..40],
        MAX_RANGE_SECTORS.to_le_bytes(),
        "max_discard_sectors"
    );
    assert_eq!(c[40..44], MAX_RANGE_SEGS.to_le_bytes(), "max_discard_seg");
    assert_eq!(
        c[52..56],
        MAX_RANGE_SEGS.to_le_bytes(),
        "max_write_zeroes_seg"
    );
    let m = mem();
    let before = img.read(0, (IMAGE_SECTORS * 512) as usize);
    let unmap = VIRTIO_BLK_WRITE_ZEROES_FLAG_UNMAP;
    // `segs` after the header (one readable buffer), the status on its own.
    let run = |rtype: u32, segs: &[[u8; 16]]| {
        header(&m, HDR, rtype, 0);
        m.write_slice(&segs.concat(), GuestAddress(DATA)).unwrap();
        let table = [
            (HDR, 16, NEXT, 1),
            (DATA, (16 * segs.len()) as u32, NEXT, 2),
            (STATUS, 1, WRITE, 0),
        ];
        run_one(&dev, &m, &table)
    };
    // Write zeroes: sectors 10..14, and with the unmap flag 100..108 and 200..201 in one
    // request.
    assert_eq!(
        run(VIRTIO_BLK_T_WRITE_ZEROES, &[seg(10, 4, 0)]),
        (VIRTIO_BLK_S_OK, 1)
    );
    assert_eq!(
        run(
            VIRTIO_BLK_T_WRITE_ZEROES,
            &[seg(100, 8, unmap), seg(200, 1, unmap)]
        ),
        (VIRTIO_BLK_S_OK, 1)
    );
    // Discard 300..308 (its content afterwards is the device's choice: here a hole).
    assert_eq!(
        run(VIRTIO_BLK_T_DISCARD, &[seg(300, 8, 0)]),
        (VIRTIO_BLK_S_OK, 1)
    );
    let after = img.read(0, before.len());
    for sector in 0..IMAGE_SECTORS {
        let at = (sector * 512) as usize;
        let zeroed = (10..14).contains(&sector)
            || (100..108).contains(&sector)
            || sector == 200
            || (300..308).contains(&sector);
        if zeroed {
            assert_eq!(after[at..at + 512], [0u8; 512], "sector {sector} zeroed");
        } else {
            assert_eq!(
                after[at..at + 512],
                before[at..at + 512],
                "sector {sector} kept"
            );
        }
    }
    // Bad requests change nothing, not even their good segments.
    let ioerr = (VIRTIO_BLK_S_IOERR, 1);
    let unsupp = (VIRTIO_BLK_S_UNSUPP, 1);
    // (what, request type, segments, (status, used length))
    type Case = (&'static str, u32, Vec<[u8; 16]>, (u32, u32));
    let cases: &[Case] = &[
        (
            "a segment past the capacity",
            VIRTIO_BLK_T_WRITE_ZEROES,
            vec![seg(30, 2, 0), seg(IMAGE_SECTORS - 1, 2, 0)],
            ioerr,
        ),
        (
            "a sector whose offset overflows",
            VIRTIO_BLK_T_DISCARD,
            vec![seg(u64::MAX / 256, 1, 0)],
            ioerr,
        ),
        (
            "more sectors than max_discard_sectors",
            VIRTIO_BLK_T_DISCARD,
            vec![seg(0, MAX_RANGE_SECTORS + 1, 0)],
            ioerr,
        ),
        (
            "more segments than max_write_zeroes_seg",
            VIRTIO_BLK_T_WRITE_ZEROES,
            vec![seg(30, 1, 0); MAX_RANGE_SEGS as usize + 1],
            ioerr,
        ),
        ("no segment", VIRTIO_BLK_T_DISCARD, vec![], ioerr),
        (
            "the unmap flag on a discard",
            VIRTIO_BLK_T_DISCARD,
            vec![seg(30, 2, unmap)],
            unsupp,
        ),
        (
            "an unknown flag",
            VIRTIO_BLK_T_WRITE_ZEROES,
            vec![seg(30, 2, 0), seg(32, 2, 2)],
            unsupp,
        ),
    ];
    for (name, rtype, segs, want) in cases {
        assert_eq!(run(*rtype, segs), *want, "{name}");
    }
    // A segment list that is not a multiple of 16 bytes, and a writable buffer before the
    // status.
    header(&m, HDR, VIRTIO_BLK_T_WRITE_ZEROES, 0);
    m.write_slice(&seg(30, 2, 0), GuestAddress(DATA)).unwrap();
    let (s, len) = run_one(
        &dev,
        &m,
        &[
            (HDR, 16, NEXT, 1),
            (DATA, 17, NEXT, 2),
            (STATUS, 1, WRITE, 0),
        ],
    );
    assert_eq!((s, len), ioerr, "17 bytes of segments");
    let (s, len) = run_one(
        &dev,
        &m,
        &[
            (HDR, 16, NEXT, 1),
            (DATA, 16, NEXT, 2),
            (DATA + 0x1000, 512, WRITE | NEXT, 3),
            (STATUS, 1, WRITE, 0),
        ],
    );
    assert_eq!((s, len), ioerr, "writable data");
    assert_eq!(
        img.read(0, before.len()),
        after,
        "the bad requests changed nothing"
    );
}

#[test]
fn a_read_only_device_writes_nothing() {
    let img = Image::new("ro");
    let before = img.read(0, (IMAGE_SECTORS * 512) as usize);
    let dev = img.read_only_device();
    let f = dev.features();
    assert!(f & (1 << VIRTIO_BLK_F_RO) != 0);
    assert_eq!(
        f & ((1 << VIRTIO_BLK_F_DISCARD) | (1 << VIRTIO_BLK_F_WRITE_ZEROES)),
        0
    );
    assert_eq!(dev.config_space()[36..60], [0u8; 24], "no discard limits");
    let m = mem();
    header(&m, HDR, VIRTIO_BLK_T_OUT, 7);
    m.write_slice(&[0xee; 512], GuestAddress(DATA)).unwrap();
    let out = [
        (HDR, 16, NEXT, 1),
        (DATA, 512, NEXT, 2),
        (STATUS, 1, WRITE, 0),
    ];
    assert_eq!(run_one(&dev, &m, &out), (VIRTIO_BLK_S_IOERR, 1), "OUT");
    for rtype in [VIRTIO_BLK_T_DISCARD, VIRTIO_BLK_T_WRITE_ZEROES] {
        header(&m, HDR, rtype, 0);
        m.write_slice(&seg(7, 1, 0), GuestAddress(DATA)).unwrap();
        let t = [
            (HDR, 16, NEXT, 1),
            (DATA, 16, NEXT, 2),
            (STATUS, 1, WRITE, 0),
        ];
        assert_eq!(
            run_one(&dev, &m, &t),
            (VIRTIO_BLK_S_IOERR, 1),
            "type {rtype}"
        );
    }
    // Reads still work.
    header(&m, HDR, VIRTIO_BLK_T_IN, 7);
    let inn = [
        (HDR, 16, NEXT, 1),
        (DATA, 512, WRITE | NEXT, 2),
        (STATUS, 1, WRITE, 0),
    ];
    assert_eq!(run_one(&dev, &m, &inn), (VIRTIO_BLK_S_OK, 513));
    let mut got = vec![0u8; 512];
    m.read_slice(&mut got, GuestAddress(DATA)).unwrap();
    assert_eq!(got, vec![7u8; 512]);
    assert_eq!(img.read(0, before.len()), before);
}
