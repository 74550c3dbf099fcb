//! BAR mappings and DMA memory from the kernel `memory` scheme (reference §4).

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;

use libredox::Fd;
use libredox::call::MmapArgs;
use libredox::flag::{MAP_PRIVATE, MAP_SHARED, O_CLOEXEC, O_RDWR, PROT_READ, PROT_WRITE};

use super::RedoxPciError;
use crate::mmio::Mapping;

const PAGE: u64 = 4096;

/// One `mmap` of ours, unmapped when the last owner drops it.
pub struct Mapped {
    ptr: NonNull<u8>,
    len: usize,
}

// Safety: the mapping is plain memory (device registers or DMA pages) whose owner only unmaps it
// in Drop; the type hands out no references, users access it through volatile/atomic pointers.
unsafe impl Send for Mapped {}
// Safety: as above.
unsafe impl Sync for Mapped {}

impl Mapping for Mapped {}

impl Drop for Mapped {
    fn drop(&mut self) {
        // Safety: `ptr..ptr+len` is exactly one mapping made by `mmap` below and unmapped nowhere
        // else; the last owner is going away, so nothing accesses it any more.
        if let Err(e) = unsafe { libredox::call::munmap(self.ptr.as_ptr().cast(), self.len) } {
            log::warn!("munmap of {} bytes failed: {e}", self.len);
        }
    }
}

fn os(path: &str, e: libredox::error::Error) -> RedoxPciError {
    RedoxPciError::Os {
        what: path.to_string(),
        err: e.to_string(),
    }
}

fn mmap(fd: &Fd, offset: u64, len: usize, flags: u32, what: &str) -> Result<Mapped, RedoxPciError> {
    // Safety: a fresh mapping at an address the kernel chooses (addr = null), so no existing
    // memory of this process is affected; the fd stays open for the duration of the call.
    let p = unsafe {
        libredox::call::mmap(MmapArgs {
            addr: std::ptr::null_mut(),
            length: len,
            prot: PROT_READ | PROT_WRITE,
            flags,
            fd: fd.raw(),
            offset,
        })
    }
    .map_err(|e| os(what, e))?;
    let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| RedoxPciError::Os {
        what: what.to_string(),
        err: "mmap returned null".into(),
    })?;
    Ok(Mapped { ptr, len })
}

/// Maps `size` bytes of device memory at physical `phys`, uncacheable (`physical@uc`, §4).
/// Returns the owner and a pointer to `phys` itself (a BAR need not start on a page).
pub fn map_physical(phys: u64, size: u64) -> Result<(Arc<Mapped>, NonNull<u8>), RedoxPciError> {
    const PATH: &str = "/scheme/memory/physical@uc";
    if phys == 0 || size == 0 {
        return Err(RedoxPciError::BadBar(format!(
            "memory BAR at {phys:#x} of {size:#x} bytes"
        )));
    }
    let base = phys & !(PAGE - 1);
    let in_page = phys - base;
    let len = in_page
        .checked_add(size)
        .and_then(|l| l.checked_next_multiple_of(PAGE))
        .and_then(|l| usize::try_from(l).ok())
        .ok_or_else(|| RedoxPciError::BadBar(format!("BAR of {size:#x} bytes")))?;
    let fd = Fd::open(PATH, O_RDWR | O_CLOEXEC, 0).map_err(|e| os(PATH, e))?;
    // MAP_SHARED: device memory is never copied (§4); the mapping outlives the fd.
    let m = mmap(&fd, base, len, MAP_SHARED, PATH)?;
    // Safety: `in_page < PAGE <= len`, so the pointer stays inside the mapping.
    let at = unsafe { m.ptr.add(in_page as usize) };
    Ok((Arc::new(m), at))
}

/// The virtual-to-physical translation handle (`/scheme/memory/translation`, root only, §4).
/// Opened before `setrens`, kept for every later DMA allocation.
pub struct Translation {
    fd: Fd,
}

impl Translation {
    pub fn open() -> Result<Self, RedoxPciError> {
        const PATH: &str = "/scheme/memory/translation";
        Ok(Self {
            fd: Fd::open(PATH, O_CLOEXEC, 0).map_err(|e| os(PATH, e))?,
        })
    }

    /// The physical address of virtual address `virt`: a `call` whose payload is the address
    /// as a `usize`, overwritten by the kernel (§4).
    pub fn translate(&self, virt: usize) -> Result<u64, RedoxPciError> {
        let mut buf = virt.to_ne_bytes();
        self.fd
            .call_rw(&mut buf, syscall::CallFlags::empty(), &[])
            .map_err(|e| os("translate", e))?;
        Ok(usize::from_ne_bytes(buf) as u64)
    }
}

/// Allocates `len` bytes of zeroed, physically contiguous, write-back memory (x86 DMA is cache
/// coherent) and its bus address (§4: `zeroed@wb?phys_contiguous`, MAP_PRIVATE, since
/// MAP_SHARED of phys_contiguous memory is EOPNOTSUPP).
pub fn alloc_dma(len: usize, tr: &Translation) -> Result<crate::DmaRegion, RedoxPciError> {
    #[cfg(target_arch = "x86_64")]
    const PATH: &str = "/scheme/memory/zeroed@wb?phys_contiguous";
    #[cfg(not(target_arch = "x86_64"))]
    const PATH: &str = "/scheme/memory/zeroed@uc?phys_contiguous";
    let map_len = len.next_multiple_of(PAGE as usize);
    let fd = Fd::open(PATH, O_CLOEXEC, 0).map_err(|e| os(PATH, e))?;
    let m = mmap(&fd, 0, map_len, MAP_PRIVATE, PATH)?;
    let virt = m.ptr.as_ptr() as usize;
    let bus = tr.translate(virt)?;
    // The device sees one contiguous range: check every page, as a wrong bus address would let
    // the NIC write over someone else's memory.
    for page in 1..map_len / PAGE as usize {
        let want = bus + (page as u64) * PAGE;
        let got = tr.translate(virt + page * PAGE as usize)?;
        if got != want {
            return Err(RedoxPciError::Os {
                what: PATH.into(),
                err: format!("page {page} at {got:#x}, not contiguous with {bus:#x}"),
            });
        }
    }
    let ptr = m.ptr;
    let owner: Arc<dyn Any + Send + Sync> = Arc::new(m);
    // Safety: `ptr..ptr+map_len` is a fresh, page-aligned (so 8-byte aligned) private mapping
    // owned by `owner`, which `DmaRegion` keeps alive; `len <= map_len`; nothing else in this
    // process accesses it except through the region's atomics (and the device).
    Ok(unsafe { crate::DmaRegion::new(ptr, len, bus, owner) })
}
