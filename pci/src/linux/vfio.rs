//! VFIO (linux/vfio.h, type-1 IOMMU): a container, the function's group, its device fd;
//! config and BAR0 through device regions, DMA through IOVA mappings, interrupts through
//! eventfds set with VFIO_DEVICE_SET_IRQS.

use std::any::Any;
use std::fs::{File, OpenOptions};
use std::os::fd::{AsRawFd, FromRawFd};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::Mutex;

use super::LinuxPciError;
use crate::DmaRegion;

// ioctl numbers: _IO(VFIO_TYPE ';', VFIO_BASE 100 + n).
const fn vfio_io(n: u64) -> u64 {
    (b';' as u64) << 8 | (100 + n)
}
const GET_API_VERSION: u64 = vfio_io(0);
const CHECK_EXTENSION: u64 = vfio_io(1);
const SET_IOMMU: u64 = vfio_io(2);
const GROUP_GET_STATUS: u64 = vfio_io(3);
const GROUP_SET_CONTAINER: u64 = vfio_io(4);
const GROUP_GET_DEVICE_FD: u64 = vfio_io(6);
const DEVICE_GET_REGION_INFO: u64 = vfio_io(8);
const DEVICE_GET_IRQ_INFO: u64 = vfio_io(9);
const DEVICE_SET_IRQS: u64 = vfio_io(10);
const IOMMU_MAP_DMA: u64 = vfio_io(13);
const IOMMU_UNMAP_DMA: u64 = vfio_io(14);

const API_VERSION: i32 = 0;
const TYPE1_IOMMU: u64 = 1;
const TYPE1V2_IOMMU: u64 = 3;
const GROUP_FLAGS_VIABLE: u32 = 1;

/// Region indices of a PCI device.
pub const REGION_BAR0: u32 = 0;
pub const REGION_CONFIG: u32 = 7;
const REGION_FLAG_MMAP: u32 = 1 << 2;

/// IRQ indices of a PCI device.
pub const IRQ_INTX: u32 = 0;
pub const IRQ_MSI: u32 = 1;
pub const IRQ_MSIX: u32 = 2;

const IRQ_SET_DATA_NONE: u32 = 1;
const IRQ_SET_DATA_EVENTFD: u32 = 1 << 2;
const IRQ_SET_ACTION_UNMASK: u32 = 1 << 4;
const IRQ_SET_ACTION_TRIGGER: u32 = 1 << 5;

const DMA_MAP_READ: u32 = 1;
const DMA_MAP_WRITE: u32 = 2;

#[repr(C)]
#[derive(Default)]
struct GroupStatus {
    argsz: u32,
    flags: u32,
}

/// struct vfio_region_info.
#[repr(C)]
#[derive(Debug, Default, Clone, Copy)]
pub struct RegionInfo {
    argsz: u32,
    pub flags: u32,
    index: u32,
    cap_offset: u32,
    pub size: u64,
    pub offset: u64,
}

#[repr(C)]
#[derive(Default)]
struct IrqInfo {
    argsz: u32,
    flags: u32,
    index: u32,
    count: u32,
}

#[repr(C)]
struct DmaMap {
    argsz: u32,
    flags: u32,
    vaddr: u64,
    iova: u64,
    size: u64,
}

#[repr(C)]
struct DmaUnmap {
    argsz: u32,
    flags: u32,
    iova: u64,
    size: u64,
}

fn vfio_err(what: &str, e: std::io::Error) -> LinuxPciError {
    if e.kind() == std::io::ErrorKind::PermissionDenied {
        return LinuxPciError::PermissionDenied {
            what: format!("VFIO {what}: {e}"),
        };
    }
    LinuxPciError::Vfio(format!("{what}: {e}"))
}

/// ioctl with a pointer argument; the error is errno.
///
/// # Safety
/// `arg` must point to the structure `req` expects, valid for reads and writes.
unsafe fn ioctl_ptr<T>(fd: &File, req: u64, arg: *mut T) -> std::io::Result<i32> {
    // Safety: the caller guarantees `arg` matches `req`.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, arg) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// ioctl with an integer argument.
fn ioctl_val(fd: &File, req: u64, val: u64) -> std::io::Result<i32> {
    // Safety: these requests take an integer (or nothing), no memory.
    let r = unsafe { libc::ioctl(fd.as_raw_fd(), req as _, val as libc::c_ulong) };
    if r < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(r)
    }
}

/// The container with its IOMMU, and the IOVAs handed out so far.
pub struct Container {
    file: File,
    next_iova: Mutex<u64>,
    _group: File,
}

/// An opened VFIO device.
pub struct VfioDevice {
    pub file: Arc<File>,
    pub container: Arc<Container>,
}

impl std::fmt::Debug for VfioDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VfioDevice")
            .field("fd", &self.file.as_raw_fd())
            .finish()
    }
}

fn open_rw(path: &Path) -> Result<File, LinuxPciError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .open(path)
        .map_err(|e| super::sysfs::io_err("opening", path, e))
}

impl VfioDevice {
    /// Opens `addr` in IOMMU group `group` (devices under `dev_root`, e.g. `/dev`).
    pub fn open(dev_root: &Path, group: u32, addr: &str) -> Result<Self, LinuxPciError> {
        let container = open_rw(&dev_root.join("vfio/vfio"))?;
        let v =
            ioctl_val(&container, GET_API_VERSION, 0).map_err(|e| vfio_err("API version", e))?;
        if v != API_VERSION {
            return Err(LinuxPciError::Vfio(format!(
                "API version {v}, expected {API_VERSION}"
            )));
        }
        let iommu = [TYPE1V2_IOMMU, TYPE1_IOMMU]
            .into_iter()
            .find(|&t| ioctl_val(&container, CHECK_EXTENSION, t).is_ok_and(|r| r > 0))
            .ok_or_else(|| LinuxPciError::Vfio("no type-1 IOMMU support".into()))?;
        let group_file = open_rw(&dev_root.join(format!("vfio/{group}")))?;
        let mut status = GroupStatus {
            argsz: std::mem::size_of::<GroupStatus>() as u32,
            flags: 0,
        };
        // Safety: GROUP_GET_STATUS takes a struct vfio_group_status.
        unsafe { ioctl_ptr(&group_file, GROUP_GET_STATUS, &mut status) }
            .map_err(|e| vfio_err("group status", e))?;
        if status.flags & GROUP_FLAGS_VIABLE == 0 {
            return Err(LinuxPciError::Vfio(format!(
                "IOMMU group {group} is not viable: bind every device in it to vfio-pci \
                 (ls /sys/kernel/iommu_groups/{group}/devices)"
            )));
        }
        let mut cfd = container.as_raw_fd();
        // Safety: GROUP_SET_CONTAINER takes a pointer to the container's fd.
        unsafe { ioctl_ptr(&group_file, GROUP_SET_CONTAINER, &mut cfd) }
            .map_err(|e| vfio_err("set container", e))?;
        ioctl_val(&container, SET_IOMMU, iommu).map_err(|e| vfio_err("set IOMMU", e))?;
        let name = std::ffi::CString::new(addr)
            .map_err(|_| LinuxPciError::Vfio(format!("bad device name {addr:?}")))?;
        // Safety: GROUP_GET_DEVICE_FD takes a NUL-terminated device name.
        let fd = unsafe { ioctl_ptr(&group_file, GROUP_GET_DEVICE_FD, name.as_ptr().cast_mut()) }
            .map_err(|e| vfio_err("device fd", e))?;
        // Safety: the ioctl returned a new descriptor that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        Ok(Self {
            file: Arc::new(file),
            container: Arc::new(Container {
                file: container,
                next_iova: Mutex::new(1 << 32),
                _group: group_file,
            }),
        })
    }

    pub fn region(&self, index: u32) -> Result<RegionInfo, LinuxPciError> {
        let mut info = RegionInfo {
            argsz: std::mem::size_of::<RegionInfo>() as u32,
            index,
            ..RegionInfo::default()
        };
        // Safety: DEVICE_GET_REGION_INFO takes a struct vfio_region_info.
        unsafe { ioctl_ptr(&self.file, DEVICE_GET_REGION_INFO, &mut info) }
            .map_err(|e| vfio_err(&format!("region {index}"), e))?;
        Ok(info)
    }

    pub fn region_mappable(info: &RegionInfo) -> bool {
        info.flags & REGION_FLAG_MMAP != 0
    }

    /// How many vectors IRQ index `index` has (0 when absent).
    pub fn irq_count(&self, index: u32) -> u32 {
        let mut info = IrqInfo {
            argsz: std::mem::size_of::<IrqInfo>() as u32,
            index,
            ..IrqInfo::default()
        };
        // Safety: DEVICE_GET_IRQ_INFO takes a struct vfio_irq_info.
        match unsafe { ioctl_ptr(&self.file, DEVICE_GET_IRQ_INFO, &mut info) } {
            Ok(_) => info.count,
            Err(_) => 0,
        }
    }

    /// Triggers vectors `0..fds.len()` of IRQ index `index` into the eventfds.
    pub fn set_eventfds(&self, index: u32, fds: &[i32]) -> Result<(), LinuxPciError> {
        let mut words = vec![0u32; 5 + fds.len()];
        words[0] = (20 + 4 * fds.len()) as u32;
        words[1] = IRQ_SET_DATA_EVENTFD | IRQ_SET_ACTION_TRIGGER;
        words[2] = index;
        words[3] = 0;
        words[4] = fds.len() as u32;
        for (w, fd) in words[5..].iter_mut().zip(fds) {
            *w = *fd as u32;
        }
        // Safety: a struct vfio_irq_set header (argsz, flags, index, start, count) followed by
        // `count` 32-bit eventfds, as DATA_EVENTFD wants.
        unsafe { ioctl_ptr(&self.file, DEVICE_SET_IRQS, words.as_mut_ptr()) }
            .map_err(|e| vfio_err(&format!("SET_IRQS index {index}"), e))?;
        Ok(())
    }

    /// Unmasks INTx (VFIO masks it when it fires).
    pub fn unmask_intx(&self) -> std::io::Result<()> {
        let mut words = [
            20u32,
            IRQ_SET_DATA_NONE | IRQ_SET_ACTION_UNMASK,
            IRQ_INTX,
            0,
            1,
        ];
        // Safety: a struct vfio_irq_set with DATA_NONE (no payload).
        unsafe { ioctl_ptr(&self.file, DEVICE_SET_IRQS, words.as_mut_ptr()) }.map(|_| ())
    }

    /// `len` bytes of zeroed memory mapped for the device at a fresh IOVA.
    pub fn alloc_dma(&self, len: usize) -> Result<DmaRegion, LinuxPciError> {
        let size = len.next_multiple_of(4096);
        // Safety: an anonymous private mapping the kernel places; nothing is overwritten.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                size,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(LinuxPciError::Dma(format!(
                "mmap {size}: {}",
                std::io::Error::last_os_error()
            )));
        }
        let ptr = NonNull::new(p.cast::<u8>()).ok_or_else(|| LinuxPciError::Dma("null".into()))?;
        let iova = {
            let mut next = self
                .container
                .next_iova
                .lock()
                .unwrap_or_else(|e| e.into_inner());
            let iova = *next;
            *next += size.next_multiple_of(2 << 20) as u64;
            iova
        };
        let mut mapping = IovaMapping {
            container: self.container.clone(),
            ptr,
            size,
            iova,
            mapped: false,
        };
        let mut map = DmaMap {
            argsz: std::mem::size_of::<DmaMap>() as u32,
            flags: DMA_MAP_READ | DMA_MAP_WRITE,
            vaddr: p as u64,
            iova,
            size: size as u64,
        };
        // Safety: IOMMU_MAP_DMA takes a struct vfio_iommu_type1_dma_map over memory we own.
        unsafe { ioctl_ptr(&self.container.file, IOMMU_MAP_DMA, &mut map) }
            .map_err(|e| vfio_err("MAP_DMA", e))?;
        mapping.mapped = true;
        let owner: Arc<dyn Any + Send + Sync> = Arc::new(mapping);
        // Safety: `ptr..ptr+len` lies in the mapping `owner` keeps (and keeps mapped for the
        // device); page-aligned; handed out once, accessed through atomics and the device.
        Ok(unsafe { DmaRegion::new(ptr, len, iova, owner) })
    }
}

/// Memory mapped for the device: unmapped from the IOMMU, then from the process, on drop.
struct IovaMapping {
    container: Arc<Container>,
    ptr: NonNull<u8>,
    size: usize,
    iova: u64,
    mapped: bool,
}

// Safety: owned plain memory; the pointer is used only to unmap.
unsafe impl Send for IovaMapping {}
// Safety: as above.
unsafe impl Sync for IovaMapping {}

impl Drop for IovaMapping {
    fn drop(&mut self) {
        if self.mapped {
            let mut unmap = DmaUnmap {
                argsz: std::mem::size_of::<DmaUnmap>() as u32,
                flags: 0,
                iova: self.iova,
                size: self.size as u64,
            };
            // Safety: IOMMU_UNMAP_DMA takes a struct vfio_iommu_type1_dma_unmap.
            if let Err(e) = unsafe { ioctl_ptr(&self.container.file, IOMMU_UNMAP_DMA, &mut unmap) }
            {
                log::error!("VFIO UNMAP_DMA {:#x}: {e}", self.iova);
            }
        }
        // Safety: the mapping this value made and owns.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.size) };
    }
}
