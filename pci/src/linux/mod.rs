//! The Linux backend (issue 15): a PCI function driven from userspace, the way DPDK and ixy
//! drive NICs. [`LinuxPci::open`] binds the function to `vfio-pci` when it sits in an IOMMU
//! group, else to `uio_pci_generic`; config space goes through the VFIO config region or sysfs
//! `config`, BAR0 is mapped from the VFIO region or sysfs `resource0`, DMA memory is IOVA-mapped
//! (VFIO) or carved from hugepages with physical addresses from `/proc/self/pagemap` (no IOMMU:
//! needs root), and interrupts are VFIO eventfds (MSI-X, MSI, INTx) or UIO's INTx.
//!
//! At exit the function stays bound to the userspace driver the user asked for (a later run
//! needs no rebinding); [`LinuxPci::restore_hint`] says how to hand it back to the kernel.
//! A failed [`LinuxPci::open`] undoes every sysfs step it took. Bus mastering is switched off
//! before DMA memory is unmapped, and uio_pci_generic switches it off when the process exits.
//!
//! Every path (sysfs, /dev, pagemap) is a parameter, so the tests run against a fake tree.

mod addr;
pub mod config;
pub mod dma;
pub mod irq;
mod sysfs;
#[cfg(test)]
mod tests;
pub mod vfio;

use std::fs::{File, OpenOptions};
use std::os::fd::{AsFd, AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::path::PathBuf;
use std::sync::Arc;

pub use addr::PciAddr;
pub use irq::{LinuxIrq, LinuxIrqKind};
pub use sysfs::{Binding, Sysfs};

use self::config::{COMMAND_BUS_MASTER, COMMAND_INTX_DISABLE, COMMAND_MEMORY, ConfigSpace};
use self::dma::PhysArena;
use self::vfio::VfioDevice;
use crate::{DmaRegion, IrqMode, IrqSupport, PciError, PciFunction, PciIds, VolatileMmio};

pub const UIO_DRIVER: &str = "uio_pci_generic";
pub const VFIO_DRIVER: &str = "vfio-pci";

/// Errors of the Linux backend; each names what is missing and how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LinuxPciError {
    #[error("bad PCI address {addr:?}: {why} (expected DDDD:BB:DD.F, e.g. 0000:03:00.0)")]
    BadAddress { addr: String, why: String },
    #[error("no PCI device {addr}: {path} does not exist (lspci -D lists the addresses)")]
    NoSuchDevice { addr: String, path: String },
    #[error(
        "permission denied: {what}; binding a PCI device, mapping its registers and DMA need \
         root"
    )]
    PermissionDenied { what: String },
    #[error(
        "{addr} is bound to the kernel driver {driver}: pass --unbind to detach it, or run \
         `echo {addr} > /sys/bus/pci/drivers/{driver}/unbind` first"
    )]
    BoundToDriver { addr: String, driver: String },
    #[error("kernel module {module} is missing: {detail} (try `modprobe {module}`)")]
    ModuleMissing { module: String, detail: String },
    #[error("{addr} did not bind to {driver}: {detail}")]
    BindFailed {
        addr: String,
        driver: String,
        detail: String,
    },
    #[error("{addr} is in no IOMMU group, so vfio-pci cannot take it (use uio_pci_generic)")]
    NoIommu { addr: String },
    #[error(
        "no 2 MiB hugepage for DMA memory ({detail}): reserve some, e.g. `echo 16 > \
         /proc/sys/vm/nr_hugepages` or `hugepages=16` on the kernel command line"
    )]
    NoHugepages { detail: String },
    #[error(
        "{pagemap} shows page frame 0: physical addresses are hidden from this process; DMA \
         without an IOMMU needs root (CAP_SYS_ADMIN)"
    )]
    PfnHidden { pagemap: String },
    #[error("DMA memory: {0}")]
    Dma(String),
    #[error("VFIO: {0}")]
    Vfio(String),
    #[error("UIO: {0}")]
    Uio(String),
    #[error("{what}: {err}")]
    Io { what: String, err: String },
}

impl From<LinuxPciError> for PciError {
    fn from(e: LinuxPciError) -> Self {
        match e {
            LinuxPciError::NoSuchDevice { .. } | LinuxPciError::BadAddress { .. } => {
                PciError::NotFound(e.to_string())
            }
            LinuxPciError::Io { .. } => PciError::Io(e.to_string()),
            _ => PciError::Unavailable(e.to_string()),
        }
    }
}

/// Which userspace driver to bind.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Backend {
    /// vfio-pci when the function has an IOMMU group, else uio_pci_generic.
    #[default]
    Auto,
    Vfio,
    Uio,
}

/// How [`LinuxPci::open`] may change the system, and where it looks.
#[derive(Debug, Clone)]
pub struct LinuxPciOptions {
    /// Detach the function from a kernel driver that holds it (`--unbind`).
    pub unbind: bool,
    pub backend: Backend,
    /// `modprobe` to load a missing module with; `None`: never load modules.
    pub modprobe: Option<PathBuf>,
    /// The sysfs root (`/sys`).
    pub sysfs: PathBuf,
    /// Where `uioN` and `vfio/` live (`/dev`).
    pub dev: PathBuf,
    /// `/proc/self/pagemap`.
    pub pagemap: PathBuf,
    /// Without an IOMMU: map the first DMA hugepage inside [`LinuxPci::open`], so that missing
    /// hugepages or hidden physical addresses undo the binding instead of failing later.
    pub reserve_dma: bool,
}

impl Default for LinuxPciOptions {
    fn default() -> Self {
        Self {
            unbind: false,
            backend: Backend::Auto,
            modprobe: Some("modprobe".into()),
            sysfs: "/sys".into(),
            dev: "/dev".into(),
            pagemap: "/proc/self/pagemap".into(),
            reserve_dma: true,
        }
    }
}

/// How the function is reached.
enum Access {
    Uio {
        /// `/dev/uioN`, held open for the life of the process: uio_pci_generic switches bus
        /// mastering off when it is closed, however the process ends.
        uio: Arc<File>,
        /// The INTx line the kernel routed (0 or absent: none).
        irq_line: Option<u32>,
        config: Arc<ConfigSpace>,
        dma: PhysArena,
    },
    Vfio(Arc<VfioDevice>),
}

/// A PCI function owned from Linux userspace.
pub struct LinuxPci {
    addr: PciAddr,
    ids: PciIds,
    sysfs: Sysfs,
    config: Arc<ConfigSpace>,
    access: Access,
    bars: [Option<VolatileMmio>; 6],
    vectors_taken: bool,
}

/// Fails with [`LinuxPciError::PermissionDenied`] unless the effective uid is root.
fn require_root() -> Result<(), LinuxPciError> {
    // Safety: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    if euid != 0 {
        return Err(LinuxPciError::PermissionDenied {
            what: format!("running as uid {euid}"),
        });
    }
    Ok(())
}

impl LinuxPci {
    /// Vendor and device ID of `addr` from sysfs, touching nothing (so a driver can refuse a
    /// device before anything is rebound).
    pub fn peek_ids(addr: &str, opts: &LinuxPciOptions) -> Result<(u16, u16), LinuxPciError> {
        let addr = PciAddr::parse(addr)?;
        let sysfs = Sysfs::new(&opts.sysfs);
        check_exists(&sysfs, &addr)?;
        sysfs.ids(&addr)
    }

    /// Binds and opens the function at `addr` (see the module docs).
    pub fn open(addr: &str, opts: &LinuxPciOptions) -> Result<Self, LinuxPciError> {
        let addr = PciAddr::parse(addr)?;
        let sysfs = Sysfs::new(&opts.sysfs);
        check_exists(&sysfs, &addr)?;
        require_root()?;
        let group = sysfs.iommu_group(&addr);
        let target = match (opts.backend, group) {
            (Backend::Uio, _) | (Backend::Auto, None) => UIO_DRIVER,
            (Backend::Vfio, None) => {
                return Err(LinuxPciError::NoIommu {
                    addr: addr.to_string(),
                });
            }
            (_, Some(_)) => VFIO_DRIVER,
        };
        let mut binding = Binding::new(&sysfs, addr);
        match sysfs.driver(&addr) {
            Some(d) if d == target => log::info!("{addr}: already bound to {target}"),
            Some(d) if !opts.unbind => {
                return Err(LinuxPciError::BoundToDriver {
                    addr: addr.to_string(),
                    driver: d,
                });
            }
            current => {
                sysfs.ensure_driver(target, opts.modprobe.as_deref())?;
                if let Some(d) = current {
                    binding.unbind_from(&d)?;
                }
                binding.bind_to(target)?;
            }
        }
        let access = match group {
            Some(g) if target == VFIO_DRIVER => open_vfio(opts, g, &addr)?,
            _ => open_uio(&sysfs, opts, &addr)?,
        };
        let func = Self::with_access(sysfs.clone(), addr, access)?;
        binding.keep();
        log::info!(
            "{addr}: driven through {target}; it stays bound to {target} after exit ({})",
            func.restore_hint()
        );
        Ok(func)
    }

    fn with_access(sysfs: Sysfs, addr: PciAddr, access: Access) -> Result<Self, LinuxPciError> {
        let config = match &access {
            Access::Uio { config, .. } => config.clone(),
            Access::Vfio(dev) => {
                let r = dev.region(vfio::REGION_CONFIG)?;
                Arc::new(ConfigSpace::new(dev.file.clone(), r.offset))
            }
        };
        let cfg_err = |e: std::io::Error| LinuxPciError::Io {
            what: format!("{addr} config space"),
            err: e.to_string(),
        };
        let mut header = [0u32; 16];
        for (i, w) in header.iter_mut().enumerate() {
            *w = config.read32(i as u16 * 4).map_err(cfg_err)?;
        }
        let ids = PciIds::from_config(|off| header[usize::from(off / 4) % 16]);
        // Memory decoding and bus mastering on; INTx off until a vector asks for it.
        let on = COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE;
        config.update_command(on, true).map_err(cfg_err)?;
        Ok(Self {
            addr,
            ids,
            sysfs,
            config,
            access,
            bars: Default::default(),
            vectors_taken: false,
        })
    }

    /// The driver the function is bound to now.
    pub fn driver_name(&self) -> &'static str {
        match self.access {
            Access::Uio { .. } => UIO_DRIVER,
            Access::Vfio(_) => VFIO_DRIVER,
        }
    }

    /// The commands that give the function back to its kernel driver.
    pub fn restore_hint(&self) -> String {
        let a = self.addr;
        format!(
            "to return it to the kernel: echo {a} > /sys/bus/pci/drivers/{}/unbind; echo > \
             /sys/bus/pci/devices/{a}/driver_override; echo {a} > /sys/bus/pci/drivers_probe",
            self.driver_name()
        )
    }

    fn map_bar_inner(&mut self, bar: u8) -> Result<VolatileMmio, PciError> {
        if let Some(m) = &self.bars[usize::from(bar)] {
            return Ok(m.clone());
        }
        let (file, offset, len) = match &self.access {
            Access::Vfio(dev) => {
                let r = dev.region(vfio::REGION_BAR0 + u32::from(bar))?;
                if r.size == 0 {
                    return Err(PciError::NoSuchBar(bar));
                }
                if !VfioDevice::region_mappable(&r) {
                    return Err(PciError::Unavailable(format!("BAR{bar} cannot be mmapped")));
                }
                (dev.file.clone(), r.offset, r.size)
            }
            Access::Uio { .. } => {
                self.check_memory_bar(bar)?;
                let p = self
                    .sysfs
                    .device_dir(&self.addr)
                    .join(format!("resource{bar}"));
                let f = OpenOptions::new()
                    .read(true)
                    .write(true)
                    .open(&p)
                    .map_err(|e| PciError::from(sysfs::io_err("opening", &p, e)))?;
                let len = f
                    .metadata()
                    .map_err(|e| PciError::from(sysfs::io_err("stat", &p, e)))?
                    .len();
                (Arc::new(f), 0, len)
            }
        };
        let mmio = map_file(&file, offset, len).map_err(|e| {
            PciError::from(LinuxPciError::Io {
                what: format!("{} BAR{bar} mmap", self.addr),
                err: e.to_string(),
            })
        })?;
        self.bars[usize::from(bar)] = Some(mmio.clone());
        log::info!("{}: BAR{bar} mapped ({len:#x} bytes)", self.addr);
        Ok(mmio)
    }

    /// sysfs `resource`: one line per resource, "start end flags"; 0x200 = memory.
    fn check_memory_bar(&self, bar: u8) -> Result<(), PciError> {
        let table = self.sysfs.attr(&self.addr, "resource")?;
        let line = table
            .lines()
            .nth(usize::from(bar))
            .ok_or(PciError::NoSuchBar(bar))?;
        let f: Vec<u64> = line
            .split_whitespace()
            .filter_map(|w| u64::from_str_radix(w.trim_start_matches("0x"), 16).ok())
            .collect();
        match f.as_slice() {
            [0, 0, _] | [] => Err(PciError::NoSuchBar(bar)),
            [_, _, flags] if flags & 0x200 == 0 => Err(PciError::NotMemoryBar(bar)),
            [_, _, _] => Ok(()),
            _ => Err(PciError::Io(format!(
                "{}/resource: bad line {line:?}",
                self.addr
            ))),
        }
    }
}

fn check_exists(sysfs: &Sysfs, addr: &PciAddr) -> Result<(), LinuxPciError> {
    let dir = sysfs.device_dir(addr);
    if dir.is_dir() {
        return Ok(());
    }
    Err(LinuxPciError::NoSuchDevice {
        addr: addr.to_string(),
        path: dir.display().to_string(),
    })
}

fn open_uio(
    sysfs: &Sysfs,
    opts: &LinuxPciOptions,
    addr: &PciAddr,
) -> Result<Access, LinuxPciError> {
    let dir = sysfs.device_dir(addr);
    let uio_dir = dir.join("uio");
    let name = std::fs::read_dir(&uio_dir)
        .map_err(|e| LinuxPciError::Uio(format!("{}: {e}", uio_dir.display())))?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .find(|n| n.starts_with("uio"))
        .ok_or_else(|| LinuxPciError::Uio(format!("no uioN under {}", uio_dir.display())))?;
    let dev = opts.dev.join(&name);
    let uio = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
        .open(&dev)
        .map_err(|e| sysfs::io_err("opening", &dev, e))?;
    let cfg_path = dir.join("config");
    let cfg = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&cfg_path)
        .map_err(|e| sysfs::io_err("opening", &cfg_path, e))?;
    let config = Arc::new(ConfigSpace::new(Arc::new(cfg), 0));
    let irq_line = sysfs
        .attr(addr, "irq")
        .ok()
        .and_then(|s| s.parse::<u32>().ok())
        .filter(|&n| n != 0);
    let mut dma = PhysArena::new(&opts.pagemap, Some(config.clone()));
    if opts.reserve_dma {
        dma.reserve()?;
    }
    Ok(Access::Uio {
        uio: Arc::new(uio),
        irq_line,
        dma,
        config,
    })
}

fn open_vfio(opts: &LinuxPciOptions, group: u32, addr: &PciAddr) -> Result<Access, LinuxPciError> {
    let dev = VfioDevice::open(&opts.dev, group, &addr.to_string())?;
    Ok(Access::Vfio(Arc::new(dev)))
}

/// A shared mapping of a register file (sysfs resourceN or a VFIO region) keeps its registers.
impl crate::mmio::Mapping for ptp_ipc::shm::Mapping {}

fn map_file(file: &File, offset: u64, len: u64) -> std::io::Result<VolatileMmio> {
    let len = usize::try_from(len).map_err(|_| std::io::Error::other("BAR too large"))?;
    if len < 4 {
        return Err(std::io::Error::other(format!("BAR of {len} bytes")));
    }
    let m = ptp_ipc::shm::Mapping::shared(file.as_fd(), offset, len)?;
    let ptr = m.base();
    let owner = Arc::new(m);
    // Safety: `ptr..ptr+len` is the page-aligned mapping just made, of device registers (sysfs
    // resource files and VFIO BAR regions map uncached), kept alive by `owner`.
    Ok(unsafe { VolatileMmio::new(ptr, len, owner) })
}

/// An eventfd for a VFIO vector.
fn eventfd() -> Result<File, LinuxPciError> {
    // Safety: eventfd takes no memory; the result is checked.
    let fd = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) };
    if fd < 0 {
        return Err(LinuxPciError::Vfio(format!(
            "eventfd: {}",
            std::io::Error::last_os_error()
        )));
    }
    // Safety: a new descriptor owned by nothing else.
    Ok(unsafe { File::from_raw_fd(fd) })
}

impl LinuxPci {
    fn vfio_vectors(
        dev: &Arc<VfioDevice>,
        index: u32,
        count: u16,
    ) -> Result<Vec<LinuxIrq>, LinuxPciError> {
        let files = (0..count)
            .map(|_| eventfd())
            .collect::<Result<Vec<_>, _>>()?;
        let fds: Vec<i32> = files.iter().map(|f| f.as_raw_fd()).collect();
        dev.set_eventfds(index, &fds)?;
        Ok(files
            .into_iter()
            .enumerate()
            .map(|(i, f)| {
                let kind = match index {
                    vfio::IRQ_MSIX => LinuxIrqKind::VfioMsix { entry: i as u32 },
                    vfio::IRQ_MSI => LinuxIrqKind::VfioMsi,
                    _ => LinuxIrqKind::VfioIntx,
                };
                LinuxIrq::vfio(f, kind, dev)
            })
            .collect())
    }

    fn alloc_mode(&mut self, mode: IrqMode) -> Result<Vec<LinuxIrq>, LinuxPciError> {
        let unsupported =
            || LinuxPciError::Uio(format!("{mode} needs VFIO (uio_pci_generic has INTx only)"));
        match (&self.access, mode) {
            (_, IrqMode::Polled) => Ok(Vec::new()),
            (Access::Uio { uio, irq_line, .. }, IrqMode::Legacy { .. }) => {
                if irq_line.is_none() {
                    return Err(LinuxPciError::Uio("the kernel routed no INTx line".into()));
                }
                let f = uio
                    .try_clone()
                    .map_err(|e| LinuxPciError::Uio(format!("dup: {e}")))?;
                self.config
                    .update_command(COMMAND_INTX_DISABLE, false)
                    .map_err(|e| LinuxPciError::Uio(format!("enabling INTx: {e}")))?;
                Ok(vec![LinuxIrq::uio(f, self.config.clone())])
            }
            (Access::Uio { .. }, _) => Err(unsupported()),
            (Access::Vfio(dev), IrqMode::MsiX { vectors }) => {
                Self::vfio_vectors(dev, vfio::IRQ_MSIX, vectors)
            }
            (Access::Vfio(dev), IrqMode::Msi) => Self::vfio_vectors(dev, vfio::IRQ_MSI, 1),
            (Access::Vfio(dev), IrqMode::Legacy { .. }) => {
                let v = Self::vfio_vectors(dev, vfio::IRQ_INTX, 1)?;
                self.config
                    .update_command(COMMAND_INTX_DISABLE, false)
                    .map_err(|e| LinuxPciError::Vfio(format!("enabling INTx: {e}")))?;
                Ok(v)
            }
        }
    }
}

impl PciFunction for LinuxPci {
    type Bar = VolatileMmio;
    type Irq = LinuxIrq;

    fn ids(&self) -> PciIds {
        self.ids
    }

    fn address(&self) -> String {
        self.addr.to_string()
    }

    /// On an I/O error, logs it and returns all ones, as a read of an absent function does.
    fn config_read32(&self, offset: u16) -> u32 {
        self.config.read32(offset).unwrap_or_else(|e| {
            log::error!("{} config read at {offset:#x}: {e}", self.addr);
            u32::MAX
        })
    }

    fn config_write32(&mut self, offset: u16, value: u32) {
        if let Err(e) = self.config.write32(offset, value) {
            log::error!("{} config write at {offset:#x}: {e}", self.addr);
        }
    }

    fn map_bar(&mut self, bar: u8) -> Result<VolatileMmio, PciError> {
        if bar > 5 {
            return Err(PciError::NoSuchBar(bar));
        }
        self.map_bar_inner(bar)
    }

    /// Several vectors need MSI-X (VFIO); one falls back to MSI, then INTx.
    fn alloc_vectors(&mut self, count: u16) -> Result<Vec<LinuxIrq>, PciError> {
        let modes = crate::irq_modes(self.irq_support(), count, false);
        let mode = modes
            .into_iter()
            .find(|m| *m != IrqMode::Polled && (count <= 1 || m.vectors() == count))
            .ok_or_else(|| PciError::Interrupts(format!("{count} vectors are not offered")))?;
        self.alloc_irq_mode(mode)
    }

    fn alloc_dma(&mut self, len: usize) -> Result<DmaRegion, PciError> {
        let r = match &mut self.access {
            Access::Uio { dma, .. } => dma.alloc(len),
            Access::Vfio(dev) => dev.alloc_dma(len),
        };
        r.map_err(|e| {
            log::error!("{}: DMA allocation of {len} bytes: {e}", self.addr);
            PciError::from(e)
        })
    }

    /// What the binding can deliver: UIO has the INTx line only; VFIO what the device offers.
    fn irq_support(&self) -> IrqSupport {
        let line = |n: u32| u8::try_from(n).unwrap_or(u8::MAX);
        match &self.access {
            Access::Uio { irq_line, .. } => IrqSupport {
                legacy_line: irq_line.map(line),
                ..IrqSupport::default()
            },
            Access::Vfio(dev) => {
                let irq = self.sysfs.attr(&self.addr, "irq").ok();
                IrqSupport {
                    msix_entries: u16::try_from(dev.irq_count(vfio::IRQ_MSIX)).unwrap_or(u16::MAX),
                    msi: dev.irq_count(vfio::IRQ_MSI) > 0,
                    legacy_line: (dev.irq_count(vfio::IRQ_INTX) > 0)
                        .then(|| line(irq.and_then(|s| s.parse().ok()).unwrap_or(0))),
                }
            }
        }
    }

    fn alloc_irq_mode(&mut self, mode: IrqMode) -> Result<Vec<LinuxIrq>, PciError> {
        if self.vectors_taken && mode != IrqMode::Polled {
            return Err(PciError::Interrupts(
                "vectors were already allocated".into(),
            ));
        }
        let v = self.alloc_mode(mode)?;
        self.vectors_taken |= !v.is_empty();
        Ok(v)
    }
}

impl Drop for LinuxPci {
    /// Bus mastering stays on while DMA memory lives: each DMA region switches it off before
    /// its memory is unmapped.
    fn drop(&mut self) {
        log::debug!("{}: closed; {}", self.addr, self.restore_hint());
    }
}
