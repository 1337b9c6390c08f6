//! Sealed shared memory for [`SharedNotifier`](crate::SharedNotifier): a memfd that cannot
//! shrink or grow, mapped `MAP_SHARED`, seen only through atomics.
//!
//! Why the seals: a mapping of a file that another process can truncate turns every load
//! into a possible `SIGBUS`. `F_SEAL_SHRINK` makes that impossible; `F_SEAL_GROW` keeps the
//! size we validated the size forever; `F_SEAL_SEAL` stops the peer from removing them (or
//! adding `F_SEAL_WRITE`, which would make our writable mapping fail later). A memfd that
//! arrives without them is refused before anything is mapped.
//!
//! # References
//!
//! - [memfd_create(2)](https://man7.org/linux/man-pages/man2/memfd_create.2.html)
//! - [fcntl(2)](https://man7.org/linux/man-pages/man2/fcntl.2.html), "File Sealing"
//! - [mmap(2)](https://man7.org/linux/man-pages/man2/mmap.2.html)

#![allow(unsafe_code)]

use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, AtomicU64};

use rustix::fs::{MemfdFlags, SealFlags};
use rustix::mm::{MapFlags, ProtFlags};

/// The seals every region carries.
pub(crate) const REQUIRED_SEALS: SealFlags = SealFlags::SHRINK
    .union(SealFlags::GROW)
    .union(SealFlags::SEAL);

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

/// A new memfd of `size` bytes (zero-filled), sealed against shrinking, growing and
/// further sealing. Close-on-exec iff `cloexec`.
pub(crate) fn create(name: &str, size: usize, cloexec: bool) -> io::Result<OwnedFd> {
    let mut flags = MemfdFlags::ALLOW_SEALING;
    if cloexec {
        flags |= MemfdFlags::CLOEXEC;
    }
    let fd = rustix::fs::memfd_create(name, flags)?;
    rustix::fs::ftruncate(&fd, size as u64)?;
    rustix::fs::fcntl_add_seals(&fd, REQUIRED_SEALS)?;
    Ok(fd)
}

/// Check that `fd` is a memfd of exactly `size` bytes carrying [`REQUIRED_SEALS`] and no
/// write seal, opened read-write (the mapping is `PROT_WRITE`). `InvalidData` (saying what
/// is wrong) otherwise.
pub(crate) fn check_sealed(fd: BorrowedFd<'_>, size: usize) -> io::Result<()> {
    let st = rustix::fs::fstat(fd)?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(invalid(
            "shared region: the fd is not a memfd (not a regular file)".into(),
        ));
    }
    // Only shmem files (memfd, and tmpfs files opened with sealing support) answer
    // F_GET_SEALS; anything else fails with EINVAL.
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| {
        invalid(format!(
            "shared region: the fd is not a sealable memfd (F_GET_SEALS: {e})"
        ))
    })?;
    if !seals.contains(REQUIRED_SEALS) {
        return Err(invalid(format!(
            "shared region: the memfd lacks seals {:?} (it must be sealed against shrink, grow and further seals)",
            REQUIRED_SEALS - seals
        )));
    }
    if seals.intersects(SealFlags::WRITE | SealFlags::FUTURE_WRITE) {
        return Err(invalid(
            "shared region: the memfd is sealed against writes".into(),
        ));
    }
    // A read-only open of the memfd (e.g. through /proc/<pid>/fd/N with O_RDONLY) carries
    // the same seals but cannot be mapped writable (mmap: EACCES).
    let access = rustix::fs::fcntl_getfl(fd)? & rustix::fs::OFlags::RWMODE;
    if access != rustix::fs::OFlags::RDWR {
        let how = if access == rustix::fs::OFlags::WRONLY {
            "write-only"
        } else {
            "read-only"
        };
        return Err(invalid(format!(
            "shared region: the memfd was opened {how}; it must be open read-write to be mapped"
        )));
    }
    if u64::try_from(st.st_size).ok() != Some(size as u64) {
        return Err(invalid(format!(
            "shared region: size {} bytes, expected {size}",
            st.st_size
        )));
    }
    Ok(())
}

/// Read `buf.len()` bytes at `offset` without mapping anything. A short file is
/// `InvalidData`.
pub(crate) fn pread_exact(fd: BorrowedFd<'_>, buf: &mut [u8], offset: u64) -> io::Result<()> {
    let mut done = 0;
    while done < buf.len() {
        match rustix::io::pread(fd, &mut buf[done..], offset + done as u64) {
            Ok(0) => return Err(invalid("shared region: short file".into())),
            Ok(n) => done += n,
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A `MAP_SHARED`, read-write mapping of a whole sealed memfd, unmapped on drop.
///
/// It hands out atomics at fixed, aligned offsets, and nothing else: no `&[u8]`, no `&u64`.
/// Another process may store any bytes into the region at any time; through an atomic that
/// is an ordinary concurrent store of some `u64` (every bit pattern is a valid `u64`), never
/// a torn or invalid value that Rust code could misread.
#[derive(Debug)]
pub(crate) struct Mapping {
    /// [`Mapping::LEN`] bytes.
    ptr: NonNull<u8>,
    /// Whether `Drop` unmaps (false only for the heap-backed test mapping).
    unmap: bool,
}

// SAFETY: the mapping is plain memory accessed only through atomics (`u64_at`, `u32_at`);
// sharing or sending the handle between threads shares atomics, which are `Sync`.
unsafe impl Send for Mapping {}
// SAFETY: as for `Send`: every access through `&Mapping` is atomic.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// The size of every mapping: one page. A constant, so that the bounds check of a view
    /// at a constant offset ([`u64_at`](Self::u64_at)) is decided when compiling, and the
    /// blocking hand-off, which looks at a dozen words, pays for none of them.
    pub(crate) const LEN: usize = 4096;

    /// Map all [`LEN`](Self::LEN) bytes of `fd`, which [`check_sealed`] must accept with
    /// that size (the seals are what make later accesses `SIGBUS`-free).
    pub(crate) fn map(fd: BorrowedFd<'_>) -> io::Result<Mapping> {
        let len = Self::LEN;
        check_sealed(fd.as_fd(), len)?;
        // SAFETY: a fresh mapping at an address of the kernel's choice (null hint): it
        // replaces nothing. The fd is a memfd of exactly `len` bytes that cannot shrink
        // (F_SEAL_SHRINK, checked just above and irrevocable: F_SEAL_SEAL), so every byte
        // of the mapping stays backed for its whole lifetime.
        let p = unsafe {
            rustix::mm::mmap(
                std::ptr::null_mut(),
                len,
                ProtFlags::READ | ProtFlags::WRITE,
                MapFlags::SHARED,
                fd,
                0,
            )
        }
        .map_err(|e| {
            // Keep the kernel's kind (EACCES: PermissionDenied, ENOMEM: OutOfMemory, ...)
            // and say what failed.
            let e = io::Error::from(e);
            io::Error::new(
                e.kind(),
                format!("shared region: mapping the {len}-byte memfd read-write failed: {e}"),
            )
        })?;
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, unmap: true })
    }

    #[inline(always)]
    fn checked(&self, off: usize, size: usize) -> *mut u8 {
        assert!(
            off % size == 0 && off.checked_add(size).is_some_and(|end| end <= Self::LEN),
            "region offset {off} (size {size}) outside a {}-byte mapping or misaligned",
            Self::LEN
        );
        // SAFETY: in bounds, checked just above.
        unsafe { self.ptr.as_ptr().add(off) }
    }

    /// The `u64` at byte offset `off` (a multiple of 8, inside the mapping), as an atomic.
    ///
    /// # Panics
    ///
    /// On an offset outside the mapping or misaligned: offsets are constants of the region
    /// layout, so that is a bug in this crate, never bad input.
    #[inline(always)]
    pub(crate) fn u64_at(&self, off: usize) -> &AtomicU64 {
        let p = self.checked(off, 8);
        // SAFETY: `p` is in bounds and 8-aligned (page-aligned base, `off % 8 == 0`), so
        // valid for `AtomicU64` (same size and alignment as `u64` on 64-bit targets); the
        // memory stays mapped while `&self` lives (unmapped only in `Drop`) and cannot lose
        // its backing (module docs: the seals). Every bit pattern is a valid `u64`. The
        // memory is shared with other processes; all our accesses go through atomics, which
        // is what concurrent modification from outside requires.
        unsafe { AtomicU64::from_ptr(p.cast::<u64>()) }
    }

    /// The `u32` at byte offset `off` (a multiple of 4, inside the mapping), as an atomic.
    ///
    /// # Panics
    ///
    /// As [`u64_at`](Self::u64_at).
    #[inline(always)]
    pub(crate) fn u32_at(&self, off: usize) -> &AtomicU32 {
        let p = self.checked(off, 4);
        // SAFETY: as in `u64_at`, for a 4-aligned `u32`.
        unsafe { AtomicU32::from_ptr(p.cast::<u32>()) }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        if !self.unmap {
            return;
        }
        // SAFETY: `ptr`/`LEN` are exactly what mmap returned, unmapped once (here); no
        // reference into the mapping outlives `self` (views borrow `&self`).
        let _ = unsafe { rustix::mm::munmap(self.ptr.as_ptr().cast(), Self::LEN) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A `Mapping` over heap memory (which outlives it), so that Miri checks the views.
    fn heap_mapping(words: &mut [u64]) -> Mapping {
        assert_eq!(words.len() * 8, Mapping::LEN);
        Mapping {
            ptr: NonNull::new(words.as_mut_ptr().cast::<u8>()).unwrap(),
            unmap: false,
        }
    }

    #[test]
    fn views_are_the_words_they_name() {
        use std::sync::atomic::Ordering::SeqCst;
        let mut words = vec![0u64; 512];
        let m = heap_mapping(&mut words);
        m.u64_at(64).store(u64::MAX, SeqCst);
        m.u32_at(128).store(7, SeqCst);
        m.u32_at(132).store(9, SeqCst);
        m.u64_at(4088).store(5, SeqCst);
        assert_eq!(m.u64_at(64).load(SeqCst), u64::MAX);
        assert_eq!(m.u32_at(128).load(SeqCst), 7);
        drop(m);
        assert_eq!(words[8], u64::MAX);
        assert_eq!(words[16], 7 | 9 << 32);
        assert_eq!(words[511], 5);
    }

    #[test]
    #[should_panic(expected = "outside")]
    fn out_of_bounds_view_panics() {
        let mut words = vec![0u64; 512];
        let m = heap_mapping(&mut words);
        let _ = m.u64_at(4096);
    }

    #[test]
    #[should_panic(expected = "misaligned")]
    fn misaligned_view_panics() {
        let mut words = vec![0u64; 512];
        let m = heap_mapping(&mut words);
        let _ = m.u64_at(4);
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn create_map_and_share() {
        let fd = create("evfd-test", 4096, true).unwrap();
        check_sealed(fd.as_fd(), 4096).unwrap();
        let a = Mapping::map(fd.as_fd()).unwrap();
        let b = Mapping::map(fd.as_fd()).unwrap();
        a.u64_at(64).store(7, std::sync::atomic::Ordering::SeqCst);
        assert_eq!(b.u64_at(64).load(std::sync::atomic::Ordering::SeqCst), 7);
        let mut buf = [0u8; 8];
        pread_exact(fd.as_fd(), &mut buf, 64).unwrap();
        assert_eq!(u64::from_ne_bytes(buf), 7);
        // The seals hold: no shrink, no grow, no unseal.
        assert!(rustix::fs::ftruncate(&fd, 0).is_err());
        assert!(rustix::fs::ftruncate(&fd, 8192).is_err());
        assert!(rustix::fs::fcntl_add_seals(&fd, SealFlags::WRITE).is_err());
        assert_eq!(
            check_sealed(fd.as_fd(), 8192).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn unsealed_or_non_memfd_refused() {
        let fd = rustix::fs::memfd_create("x", MemfdFlags::ALLOW_SEALING).unwrap();
        rustix::fs::ftruncate(&fd, 4096).unwrap();
        assert_eq!(
            check_sealed(fd.as_fd(), 4096).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let nosealing = rustix::fs::memfd_create("y", MemfdFlags::empty()).unwrap();
        rustix::fs::ftruncate(&nosealing, 4096).unwrap();
        assert_eq!(
            check_sealed(nosealing.as_fd(), 4096).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        let (r, _w) = rustix::pipe::pipe().unwrap();
        assert_eq!(
            check_sealed(r.as_fd(), 4096).unwrap_err().kind(),
            io::ErrorKind::InvalidData
        );
        assert!(Mapping::map(r.as_fd()).is_err());
    }

    #[test]
    #[cfg_attr(miri, ignore = "syscalls")]
    fn read_only_open_of_a_sealed_memfd_is_refused_before_mapping() {
        let fd = create("evfd-ro", 4096, true).unwrap();
        let ro = rustix::fs::open(
            format!("/proc/self/fd/{}", std::os::fd::AsRawFd::as_raw_fd(&fd)),
            rustix::fs::OFlags::RDONLY | rustix::fs::OFlags::CLOEXEC,
            rustix::fs::Mode::empty(),
        )
        .unwrap();
        for e in [
            check_sealed(ro.as_fd(), 4096).unwrap_err(),
            Mapping::map(ro.as_fd()).unwrap_err(),
        ] {
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains("read-only"), "{e}");
        }
        check_sealed(fd.as_fd(), 4096).unwrap();
    }
}
