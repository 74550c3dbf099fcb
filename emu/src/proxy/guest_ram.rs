//! Guest RAM as the device sees it for DMA: the memfd regions QEMU sends with SYNC_SYSMEM,
//! mapped shared into this process. Every access is bounds-checked against one region; an
//! access that leaves every region fails, as a DMA to an unmapped address would.
//!
//! The peer owns the file behind each mapping: had it shrunk the file below a mapped page, the
//! model's next DMA there would be a SIGBUS that kills the whole device host. So a descriptor
//! is mapped only if it is a regular file at least as long as the region's end and carries
//! F_SEAL_SHRINK and F_SEAL_GROW (which no one can remove once F_SEAL_SEAL is set, and which
//! QEMU's memory-backend-memfd sets by default); otherwise [`RamRefused`].

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use ptp_pci::emulated::DeviceHost;

use super::ProxyError;
use super::proto::RamRegion;

/// One mapped region.
struct Mapping {
    gpa: u64,
    len: u64,
    /// The mapping, page-aligned: `lead` bytes before `gpa`'s byte.
    map: ptp_ipc::shm::Mapping,
    lead: usize,
    _fd: OwnedFd,
}

fn page_size() -> u64 {
    // Safety: sysconf has no memory effects.
    let p = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(p).ok().filter(|&p| p > 0).unwrap_or(4096)
}

/// Why a descriptor sent as guest RAM is not mapped.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RamRefused {
    /// Not a regular file (memfds are): a socket, pipe or device has no fixed size to check.
    #[error("not a regular file (st_mode {0:#o})")]
    NotAFile(u32),
    /// The file ends before the region does: touching the rest would raise SIGBUS.
    #[error("file of {file} bytes, the region ends at byte {needed}")]
    Short {
        /// The file's size (fstat).
        file: u64,
        /// The region's end in the file (offset + size).
        needed: u64,
    },
    /// The file may still shrink (or grow): F_SEAL_SHRINK and F_SEAL_GROW must both be set.
    #[error("seals {0:#x} lack F_SEAL_SHRINK|F_SEAL_GROW: the peer could shrink it under us")]
    Unsealed(i32),
    /// fstat or F_GET_SEALS failed (EINVAL: a file that cannot carry seals, not a memfd).
    #[error("{op}: {err}")]
    Os {
        /// The call that failed.
        op: &'static str,
        /// The errno text.
        err: String,
    },
}

/// The seals a guest RAM descriptor must carry.
const REQUIRED_SEALS: rustix::fs::SealFlags =
    rustix::fs::SealFlags::SHRINK.union(rustix::fs::SealFlags::GROW);

/// Checks that `fd` can back `offset..offset+size` for as long as we map it.
pub fn check_ram_fd(fd: BorrowedFd<'_>, offset: u64, size: u64) -> Result<(), RamRefused> {
    let os = |op, e: rustix::io::Errno| RamRefused::Os {
        op,
        err: std::io::Error::from(e).to_string(),
    };
    let st = rustix::fs::fstat(fd).map_err(|e| os("fstat", e))?;
    if rustix::fs::FileType::from_raw_mode(st.st_mode) != rustix::fs::FileType::RegularFile {
        return Err(RamRefused::NotAFile(st.st_mode));
    }
    // Seals first: a size checked before them could still change.
    let seals = rustix::fs::fcntl_get_seals(fd).map_err(|e| os("F_GET_SEALS", e))?;
    if !seals.contains(REQUIRED_SEALS) {
        return Err(RamRefused::Unsealed(seals.bits() as i32));
    }
    let file = u64::try_from(st.st_size).unwrap_or(0);
    let needed = offset.saturating_add(size);
    if file < needed {
        return Err(RamRefused::Short { file, needed });
    }
    Ok(())
}

impl Mapping {
    fn new(r: RamRegion, fd: OwnedFd) -> Result<Self, ProxyError> {
        let page = page_size();
        let lead = r.offset % page;
        let map_off = r.offset - lead;
        let map_len = r
            .size
            .checked_add(lead)
            .and_then(|l| usize::try_from(l).ok())
            .ok_or(ProxyError::Map {
                gpa: r.gpa,
                size: r.size,
                err: "region too large".into(),
            })?;
        let map = ptp_ipc::shm::Mapping::shared(fd.as_fd(), map_off, map_len).map_err(|e| {
            ProxyError::Map {
                gpa: r.gpa,
                size: r.size,
                err: e.to_string(),
            }
        })?;
        Ok(Self {
            gpa: r.gpa,
            len: r.size,
            map,
            lead: lead as usize,
            _fd: fd,
        })
    }

    /// Pointer to guest-physical `gpa` if `gpa..gpa+len` lies inside this region.
    fn at(&self, gpa: u64, len: usize) -> Option<*mut u8> {
        let off = gpa.checked_sub(self.gpa)?;
        let end = off.checked_add(len as u64)?;
        if end > self.len {
            return None;
        }
        // Safety: lead + off + len ≤ lead + self.len = map_len, inside the mapping.
        Some(unsafe { self.map.base().as_ptr().add(self.lead + off as usize) })
    }
}

/// The guest's RAM regions, replaced wholesale at every SYNC_SYSMEM; also the model's
/// [`DeviceHost`], whose bus addresses are guest-physical.
#[derive(Default)]
pub struct GuestRam {
    maps: Vec<Mapping>,
    /// Vectors the model signalled since the server last routed them (oldest first; at
    /// most [`MAX_RAISED`], the rest only counted in `raised_overflow`).
    pub(crate) raised: Vec<u16>,
    /// Signals past [`MAX_RAISED`] between two routings.
    pub(crate) raised_overflow: u64,
    /// DMA accesses that fell outside guest RAM.
    pub dma_faults: u64,
    /// SYNC_SYSMEM messages applied.
    pub syncs: u64,
}

impl std::fmt::Debug for GuestRam {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let regions: Vec<(u64, u64)> = self.maps.iter().map(|m| (m.gpa, m.len)).collect();
        f.debug_struct("GuestRam")
            .field("regions", &regions)
            .finish_non_exhaustive()
    }
}

impl GuestRam {
    /// Replaces the mapped set by `regions`. Every descriptor is checked first
    /// ([`check_ram_fd`]): if any is refused nothing changes (the old set stays mapped, as
    /// rings programmed by an earlier driver may point there) and the refusal is returned.
    /// Otherwise the old mappings are unmapped and their descriptors closed first, even if a
    /// new one then fails to map (which leaves none).
    pub fn replace(&mut self, regions: Vec<(RamRegion, OwnedFd)>) -> Result<(), ProxyError> {
        for (index, (r, fd)) in regions.iter().enumerate() {
            check_ram_fd(fd.as_fd(), r.offset, r.size).map_err(|why| ProxyError::RamRefused {
                index,
                gpa: r.gpa,
                size: r.size,
                why,
            })?;
        }
        self.maps.clear();
        self.syncs += 1;
        for (r, fd) in regions {
            let m = Mapping::new(r, fd)?;
            self.maps.push(m);
        }
        Ok(())
    }

    /// Mapped regions as (gpa, len).
    pub fn regions(&self) -> Vec<(u64, u64)> {
        self.maps.iter().map(|m| (m.gpa, m.len)).collect()
    }

    fn find(&self, gpa: u64, len: usize) -> Option<*mut u8> {
        self.maps.iter().find_map(|m| m.at(gpa, len))
    }

    /// Copies guest RAM at `gpa` into `out`; false (nothing copied) outside every region.
    pub fn read(&self, gpa: u64, out: &mut [u8]) -> bool {
        match self.find(gpa, out.len()) {
            // Safety: `find` checked that the range lies in a live mapping. The guest may
            // write the same bytes concurrently, as software may while a real device DMAs:
            // the copy can see a torn value but never leaves the mapping, and no Rust
            // reference to guest memory is ever formed.
            Some(p) => unsafe {
                std::ptr::copy_nonoverlapping(p, out.as_mut_ptr(), out.len());
                true
            },
            None => false,
        }
    }

    /// Copies `data` into guest RAM at `gpa`; false (nothing written) outside every region.
    pub fn write(&self, gpa: u64, data: &[u8]) -> bool {
        match self.find(gpa, data.len()) {
            // Safety: as in `read`: the range is inside a live shared mapping.
            Some(p) => unsafe {
                std::ptr::copy_nonoverlapping(data.as_ptr(), p, data.len());
                true
            },
            None => false,
        }
    }
}

/// Most signals kept between two routings (the server routes after every access and poll,
/// so a handful at most in practice).
pub(crate) const MAX_RAISED: usize = 1024;

impl DeviceHost for GuestRam {
    /// Kept for the server, which knows the function's interrupt mode (config space) and
    /// routes each signal: through the MSI-X table, as an MSI, or not at all under INTx.
    fn raise_msix(&mut self, vector: u16) {
        if self.raised.len() < MAX_RAISED {
            self.raised.push(vector);
        } else {
            self.raised_overflow += 1;
        }
    }

    fn dma_read(&mut self, bus: u64, out: &mut [u8]) -> bool {
        let ok = self.read(bus, out);
        self.dma_faults += u64::from(!ok);
        ok
    }

    fn dma_write(&mut self, bus: u64, data: &[u8]) -> bool {
        let ok = self.write(bus, data);
        self.dma_faults += u64::from(!ok);
        ok
    }
}
