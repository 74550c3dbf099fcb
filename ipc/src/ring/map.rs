//! The shared mapping of a ring region (a Linux memfd; on Redox the driver's own memory and the
//! client's mapping of it through its driver handle): mmap, its bounds and its lifetime.

use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

use super::RingError;
use super::layout::{CONTROL_LEN, Control};

/// A read-write MAP_SHARED mapping of a whole region, unmapped on drop.
pub(super) struct Mapping {
    ptr: NonNull<u8>,
    len: usize,
}

// Safety: the mapping is accessed through atomics (the control part) and through the ring
// protocol (slots); the pointer stays valid until Drop unmaps it, whichever thread holds it.
unsafe impl Send for Mapping {}
// Safety: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    /// Maps `len` bytes of `fd` read-write and shared. `len` must cover the control part.
    pub(super) fn map(fd: BorrowedFd<'_>, len: usize) -> Result<Self, RingError> {
        Self::mmap_rw(len, libc::MAP_SHARED, fd.as_raw_fd())
    }

    /// `len` bytes of this process's own zeroed memory, every page made present (a scheme that
    /// lends it with `mmap_prep` must not hand out a page not yet backed: the kernel would
    /// resolve it as a read fault, possibly to the shared zero page). Used where the region is
    /// served from the owner's scheme rather than from a shared-memory object (Redox drivers).
    #[cfg_attr(not(target_os = "redox"), allow(dead_code))]
    pub(super) fn anonymous(len: usize) -> Result<Self, RingError> {
        let m = Self::mmap_rw(len, libc::MAP_PRIVATE | libc::MAP_ANONYMOUS, -1)?;
        for off in (0..len).step_by(4096) {
            // Safety: `off < len` lies inside the mapping just made, which nothing else uses.
            unsafe { m.ptr.as_ptr().add(off).write_volatile(0) };
        }
        Ok(m)
    }

    /// A fresh read-write mapping of `len` bytes (at least the control part) with `flags`.
    fn mmap_rw(len: usize, flags: libc::c_int, fd: libc::c_int) -> Result<Self, RingError> {
        if len < CONTROL_LEN {
            return Err(RingError::RegionTooSmall {
                have: len,
                need: CONTROL_LEN,
            });
        }
        // Safety: a fresh mapping at an address the kernel picks, so no existing memory is
        // affected; `fd` is open (or -1 with MAP_ANONYMOUS).
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(RingError::Io(format!(
                "mmap ring region of {len} bytes: {e}"
            )));
        }
        let ptr = NonNull::new(p.cast::<u8>())
            .ok_or_else(|| RingError::Io("mmap returned null".into()))?;
        Ok(Mapping { ptr, len })
    }

    pub(super) fn len(&self) -> usize {
        self.len
    }

    pub(super) fn base(&self) -> *mut u8 {
        self.ptr.as_ptr()
    }

    pub(super) fn control(&self) -> &Control {
        // Safety: the mapping is page-aligned (so aligned for Control), at least CONTROL_LEN
        // bytes (checked in `map`) and lives as long as `self`; Control is all atomics, valid
        // for any bit pattern and for concurrent access from other processes.
        unsafe { &*self.ptr.as_ptr().cast::<Control>() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: `ptr`/`len` are exactly the mapping made in `map`, not unmapped elsewhere;
        // nothing derived from it outlives `self` (RingEndpoint drops its views first).
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}
