//! The shared mapping of a ring region (a Linux memfd; on Redox the driver's own memory and the
//! client's mapping of it through its driver handle): its bounds and its control part. The
//! mapping itself is a [`crate::shm::Mapping`].

use std::os::fd::BorrowedFd;

use super::RingError;
use super::layout::{CONTROL_LEN, Control};
use crate::shm;

/// A read-write MAP_SHARED mapping of a whole region, at least its control part long.
pub(super) struct Mapping(shm::Mapping);

fn check_len(len: usize) -> Result<(), RingError> {
    if len < CONTROL_LEN {
        return Err(RingError::RegionTooSmall {
            have: len,
            need: CONTROL_LEN,
        });
    }
    Ok(())
}

impl Mapping {
    /// Maps `len` bytes of `fd` read-write and shared. `len` must cover the control part.
    pub(super) fn map(fd: BorrowedFd<'_>, len: usize) -> Result<Self, RingError> {
        check_len(len)?;
        shm::Mapping::shared(fd, 0, len)
            .map(Mapping)
            .map_err(|e| RingError::Io(format!("mmap ring region of {len} bytes: {e}")))
    }

    /// `len` bytes of this process's own zeroed memory, every page present
    /// ([`shm::Mapping::anonymous`]). Used where the region is served from the owner's scheme
    /// rather than from a shared-memory object (Redox drivers).
    #[cfg_attr(not(target_os = "redox"), allow(dead_code))]
    pub(super) fn anonymous(len: usize) -> Result<Self, RingError> {
        check_len(len)?;
        shm::Mapping::anonymous(len)
            .map(Mapping)
            .map_err(|e| RingError::Io(format!("mmap {len} bytes of ring memory: {e}")))
    }

    pub(super) fn len(&self) -> usize {
        self.0.len()
    }

    pub(super) fn base(&self) -> *mut u8 {
        self.0.base().as_ptr()
    }

    pub(super) fn control(&self) -> &Control {
        // Safety: the mapping is page-aligned (so aligned for Control), at least CONTROL_LEN
        // bytes (checked when made) and lives as long as `self`; Control is all atomics, valid
        // for any bit pattern and for concurrent access from other processes.
        unsafe { &*self.base().cast::<Control>() }
    }
}
