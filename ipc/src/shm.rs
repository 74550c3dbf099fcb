//! Shared memory: a mapping that unmaps itself, and (Linux) the sealed memfd behind it.
//!
//! One wrapper for every mapping of memory another party also maps: the ring region, the device
//! proxy's DMA arena and guest RAM, a device's register file, and the pinned pages a PCI
//! device reaches by DMA. It owns the mapping and hands
//! out only its raw base: what is done through that pointer (atomics, volatile accesses, the
//! ring protocol) is each user's to make sound, and is documented there.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// A read-write mapping, unmapped on drop.
#[derive(Debug)]
pub struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// Safety: the value owns the mapping and exposes only its address; the memory stays mapped
// until Drop, whichever thread holds it.
unsafe impl Send for Mapping {}
// Safety: as above; `&Mapping` gives no access to the memory but the raw base pointer.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` from `offset`, read-write and shared (MAP_SHARED).
    pub fn shared(fd: BorrowedFd<'_>, offset: u64, len: usize) -> io::Result<Self> {
        let off = libc::off_t::try_from(offset)
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "offset out of range"))?;
        Self::mmap(len, libc::MAP_SHARED, fd.as_raw_fd(), off)
    }

    /// `len` bytes of this process's own zeroed memory (MAP_PRIVATE | MAP_ANONYMOUS), every page
    /// made present: a scheme that lends it with `mmap_prep` must not hand out a page not yet
    /// backed (the kernel would resolve it as a read fault, possibly to the shared zero page).
    pub fn anonymous(len: usize) -> io::Result<Self> {
        let m = Self::mmap(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1, 0)?;
        for off in (0..len).step_by(4096) {
            // Safety: `off < len` lies inside the mapping just made, which nothing else uses.
            unsafe { m.ptr.as_ptr().add(off).write_volatile(0) };
        }
        Ok(m)
    }

    /// `len` bytes of anonymous memory populated up front and locked in RAM (mlock), on
    /// hugepages when `huge`: memory a device reaches by physical address (DMA from user space)
    /// must neither move nor be swapped out.
    #[cfg(target_os = "linux")]
    pub fn pinned(len: usize, huge: bool) -> io::Result<Self> {
        let mut flags = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE;
        if huge {
            flags |= libc::MAP_HUGETLB;
        }
        let m = Self::mmap(len, flags, -1, 0)?;
        // Safety: `m` is the mapping just made; mlock only pins it. On failure `m` unmaps.
        if unsafe { libc::mlock(m.ptr.as_ptr().cast(), len) } != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(m)
    }

    fn mmap(len: usize, flags: libc::c_int, fd: libc::c_int, off: libc::off_t) -> io::Result<Self> {
        if len == 0 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "empty mapping"));
        }
        // Safety: a fresh mapping at an address the kernel picks, so no existing memory is
        // affected; the kernel checks the descriptor, length and offset.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                off,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let ptr =
            NonNull::new(p.cast::<u8>()).ok_or_else(|| io::Error::other("mmap returned null"))?;
        Ok(Mapping { ptr, len })
    }

    /// The first byte (page-aligned).
    pub fn base(&self) -> NonNull<u8> {
        self.ptr
    }

    pub fn len(&self) -> usize {
        self.len
    }

    /// Never: an empty mapping is refused.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: `ptr`/`len` are exactly the mapping `mmap` made, unmapped nowhere else; its
        // users keep the value alive while they hold pointers into it.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

/// A zeroed memfd of `len` bytes whose size is sealed for good (shrink, grow, then the seals
/// themselves) before anyone else sees it, so whoever maps it need not fear SIGBUS from a
/// later shrink. `sealed: false` leaves it unsealed (tests of the peers' checks).
#[cfg(target_os = "linux")]
pub fn memfd(name: &str, len: usize, sealed: bool) -> io::Result<std::os::fd::OwnedFd> {
    use rustix::fs::{MemfdFlags, SealFlags};
    let fd = rustix::fs::memfd_create(name, MemfdFlags::CLOEXEC | MemfdFlags::ALLOW_SEALING)?;
    rustix::fs::ftruncate(&fd, len as u64)?;
    if sealed {
        rustix::fs::fcntl_add_seals(&fd, SealFlags::SHRINK | SealFlags::GROW | SealFlags::SEAL)?;
    }
    Ok(fd)
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn two_mappings_of_one_memfd_share_memory_and_a_sealed_one_cannot_shrink() {
        let fd = memfd("shm-test", 8192, true).unwrap();
        let a = Mapping::shared(fd.as_fd(), 0, 8192).unwrap();
        let b = Mapping::shared(fd.as_fd(), 4096, 4096).unwrap();
        // Safety: both pointers are inside live mappings of the same file; no references.
        unsafe {
            a.base().as_ptr().add(4096).write_volatile(0x5a);
            assert_eq!(b.base().as_ptr().read_volatile(), 0x5a);
        }
        let e = rustix::fs::ftruncate(&fd, 0).unwrap_err();
        assert_eq!(e, rustix::io::Errno::PERM);
        let open = memfd("shm-test", 4096, false).unwrap();
        rustix::fs::ftruncate(&open, 0).unwrap();
    }

    #[test]
    fn bad_mappings_are_errors_not_pointers() {
        let fd = memfd("shm-test", 4096, true).unwrap();
        assert!(Mapping::shared(fd.as_fd(), 0, 0).is_err());
        assert!(Mapping::shared(fd.as_fd(), u64::MAX, 4096).is_err());
        assert!(
            Mapping::shared(fd.as_fd(), 1, 4096).is_err(),
            "unaligned offset"
        );
        let anon = Mapping::anonymous(3 * 4096).unwrap();
        // Safety: inside the live mapping.
        assert_eq!(unsafe { anon.base().as_ptr().add(8191).read_volatile() }, 0);
    }
}
