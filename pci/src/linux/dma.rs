//! DMA memory without an IOMMU: 2 MiB hugepages (physically contiguous by construction), or
//! locked 4 KiB pages whose contiguity is checked; bus address = physical address, read from
//! `/proc/self/pagemap` (the PFN reads as 0 unless the process has CAP_SYS_ADMIN).

use std::any::Any;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::ptr::NonNull;
use std::sync::Arc;

use super::LinuxPciError;
use super::config::ConfigSpace;
use crate::DmaRegion;

/// Size of an x86-64 huge page.
pub const HUGEPAGE: usize = 2 << 20;
/// Sub-allocations start on this boundary (ring bases need 128 bytes; a page keeps buffers
/// from sharing one with a descriptor ring).
const ALIGN: usize = 4096;

/// What `/proc/self/pagemap` says about one virtual page.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PageFrame {
    /// Resident, at this page frame number.
    Frame(u64),
    /// Not resident (never touched, or swapped out).
    NotPresent,
    /// Resident, but the PFN is hidden (reads 0 without CAP_SYS_ADMIN).
    Hidden,
}

/// Decodes one 64-bit pagemap entry: bit 63 present, bits 0..=54 the PFN.
pub fn decode_pagemap(entry: u64) -> PageFrame {
    if entry & (1 << 63) == 0 {
        return PageFrame::NotPresent;
    }
    match entry & ((1 << 55) - 1) {
        0 => PageFrame::Hidden,
        pfn => PageFrame::Frame(pfn),
    }
}

/// The base page size (pagemap has one entry per base page, even inside a hugepage).
fn page_size() -> usize {
    // Safety: sysconf reads a constant; no memory is passed.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    usize::try_from(n).ok().filter(|&n| n > 0).unwrap_or(4096)
}

/// Physical address of virtual address `va`, from a pagemap file.
pub fn phys_addr(pagemap: &File, path: &Path, va: usize) -> Result<u64, LinuxPciError> {
    let ps = page_size();
    let mut entry = [0u8; 8];
    let off = (va / ps) as u64 * 8;
    pagemap
        .read_exact_at(&mut entry, off)
        .map_err(|e| super::sysfs::io_err("reading", path, e))?;
    match decode_pagemap(u64::from_le_bytes(entry)) {
        PageFrame::Frame(pfn) => Ok(pfn * ps as u64 + (va % ps) as u64),
        PageFrame::Hidden => Err(LinuxPciError::PfnHidden {
            pagemap: path.display().to_string(),
        }),
        PageFrame::NotPresent => Err(LinuxPciError::Dma(format!(
            "page at {va:#x} is not resident (pagemap {})",
            path.display()
        ))),
    }
}

/// An anonymous mapping pinned in RAM, with its physical base. Dropping it first stops the
/// device's DMA (bus mastering off), then unmaps: the NIC must never write into freed pages.
struct Pinned {
    quiesce: Option<Arc<ConfigSpace>>,
    map: ptp_ipc::shm::Mapping,
    phys: u64,
}

impl Drop for Pinned {
    fn drop(&mut self) {
        if let Some(cfg) = &self.quiesce {
            cfg.set_bus_master(false);
        }
        // `map` unmaps after this, once bus mastering is off.
    }
}

/// Allocates zeroed, physically contiguous DMA memory by carving hugepages.
pub struct PhysArena {
    pagemap_path: PathBuf,
    quiesce: Option<Arc<ConfigSpace>>,
    /// The hugepage being carved and how much of it is used.
    current: Option<(Arc<Pinned>, usize)>,
}

impl PhysArena {
    /// `quiesce`: the device's config space, whose bus mastering is switched off before any
    /// of this memory is unmapped.
    pub fn new(pagemap: impl Into<PathBuf>, quiesce: Option<Arc<ConfigSpace>>) -> Self {
        Self {
            pagemap_path: pagemap.into(),
            quiesce,
            current: None,
        }
    }

    fn pin(&self, len: usize, huge: bool) -> Result<Arc<Pinned>, LinuxPciError> {
        let pagemap = File::open(&self.pagemap_path)
            .map_err(|e| super::sysfs::io_err("opening", &self.pagemap_path, e))?;
        let map = ptp_ipc::shm::Mapping::pinned(len, huge).map_err(|e| {
            if huge {
                LinuxPciError::NoHugepages {
                    detail: e.to_string(),
                }
            } else {
                LinuxPciError::Dma(format!("locking {len} bytes: {e}"))
            }
        })?;
        let base = map.base().as_ptr() as usize;
        let mut pinned = Pinned {
            quiesce: None,
            map,
            phys: 0,
        };
        pinned.phys = phys_addr(&pagemap, &self.pagemap_path, base)?;
        if !huge {
            // 4 KiB pages: contiguous only by luck; check every one.
            let ps = page_size();
            for off in (ps..len).step_by(ps) {
                if phys_addr(&pagemap, &self.pagemap_path, base + off)? != pinned.phys + off as u64
                {
                    return Err(LinuxPciError::NoHugepages {
                        detail: format!("{len} bytes of locked 4 KiB pages are not contiguous"),
                    });
                }
            }
        }
        pinned.quiesce = self.quiesce.clone();
        Ok(Arc::new(pinned))
    }

    /// Maps the first hugepage now and reads its physical address, so that missing hugepages
    /// or hidden PFNs fail while the caller can still undo its setup. A driver's rings (about
    /// 1 MiB for igcd and igbd) then come from this page.
    pub fn reserve(&mut self) -> Result<(), LinuxPciError> {
        if self.current.is_none() {
            self.current = Some((self.pin(HUGEPAGE, true)?, 0));
        }
        Ok(())
    }

    /// `len` bytes, zeroed (fresh pages, never handed out twice), physically contiguous.
    pub fn alloc(&mut self, len: usize) -> Result<DmaRegion, LinuxPciError> {
        if len == 0 || len > HUGEPAGE {
            return Err(LinuxPciError::Dma(format!(
                "{len} bytes: a region must be 1..={HUGEPAGE} bytes (one hugepage)"
            )));
        }
        let fits = |used: usize| used.next_multiple_of(ALIGN) + len <= HUGEPAGE;
        if !matches!(&self.current, Some((_, used)) if fits(*used)) {
            let page = match self.pin(HUGEPAGE, true) {
                Ok(p) => p,
                // Without hugepages a region of at most one base page is still contiguous.
                Err(LinuxPciError::NoHugepages { .. }) if len <= page_size() => {
                    let p = self.pin(page_size(), false)?;
                    return Ok(region(&p, 0, len));
                }
                Err(e) => return Err(e),
            };
            self.current = Some((page, 0));
        }
        let (page, used) = self
            .current
            .as_mut()
            .expect("a current hugepage was set above");
        let off = used.next_multiple_of(ALIGN);
        *used = off + len;
        Ok(region(page, off, len))
    }
}

fn region(page: &Arc<Pinned>, off: usize, len: usize) -> DmaRegion {
    let owner: Arc<dyn Any + Send + Sync> = page.clone();
    // Safety: `off + len <= page.map.len()` (checked by the caller), so the range lies in the pinned
    // mapping that `owner` keeps alive; page-aligned offsets are 8-byte aligned; the region is
    // handed out once and accessed only through DmaRegion's atomics and the device.
    unsafe {
        DmaRegion::new(
            NonNull::new_unchecked(page.map.base().as_ptr().add(off)),
            len,
            page.phys + off as u64,
            owner,
        )
    }
}
