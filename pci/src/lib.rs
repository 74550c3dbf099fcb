//! The userspace PCI interface (DESIGN.md §3).
//!
//! A driver sees a [`PciFunction`]: its IDs and config space, its BARs as [`Mmio`] regions (the
//! one funnel every register access goes through), interrupt vectors an IRQ thread can block on
//! with a timeout ([`IrqVector`]), and DMA memory with a bus address ([`DmaRegion`]).
//!
//! Backends:
//! - [`emulated`]: a device model (crate `ptp-emu`) plugged in through [`emulated::Device`];
//! - `redox` (Redox only): the pcid channel, the memory and irq schemes;
//! - `linux` (Linux only): a function bound to vfio-pci or uio_pci_generic, driven from
//!   userspace.
//!
//! The traits are used as generics by the drivers, so the real path is monomorphised and
//! carries no dynamic dispatch.

pub mod config;
pub mod dma;
pub mod emulated;
pub mod irqmode;
#[cfg(target_os = "linux")]
pub mod linux;
pub mod mmio;
pub mod pcid_proto;
#[cfg(target_os = "redox")]
pub mod redox;

pub use config::{Capability, MsixInfo, PciIds};
pub use dma::DmaRegion;
pub use irqmode::{IrqMode, IrqSupport, irq_modes};
pub use mmio::{Mmio, VolatileMmio};

use std::time::Duration;

/// Errors of the PCI layer.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum PciError {
    #[error("no such BAR {0}")]
    NoSuchBar(u8),
    #[error("BAR {0} is not a memory BAR")]
    NotMemoryBar(u8),
    #[error("interrupt vectors: {0}")]
    Interrupts(String),
    #[error("DMA allocation of {0} bytes failed")]
    Dma(usize),
    #[error("device not found: {0}")]
    NotFound(String),
    #[error("device unavailable: {0}")]
    Unavailable(String),
    #[error("I/O: {0}")]
    Io(String),
}

/// Result of waiting on an interrupt vector.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqWait {
    /// The vector fired (possibly more than once) since the last wait.
    Fired,
    /// The timeout elapsed with no interrupt.
    TimedOut,
    /// The vector was shut down (device removed, backend stopping).
    Closed,
}

/// One interrupt vector. A dedicated thread blocks on it; nothing else does.
pub trait IrqVector: Send + Sync {
    /// Blocks until the vector fires, the timeout elapses, or the vector is closed. An interrupt
    /// that fired before the call is not lost: it makes the call return `Fired` at once.
    fn wait(&self, timeout: Duration) -> IrqWait;
    /// Acknowledges the interrupt [`IrqVector::wait`] reported, once the driver has seen a
    /// cause of its own device. Only a shared legacy line needs it (the kernel keeps the line
    /// masked until then, so a cause that was someone else's is not acknowledged by us).
    fn ack(&self) {}
}

/// A PCI function as a driver owns it.
pub trait PciFunction {
    /// The register funnel of a memory BAR.
    type Bar: Mmio + Clone + 'static;
    /// An interrupt vector.
    type Irq: IrqVector + 'static;

    /// Vendor, device, class and revision.
    fn ids(&self) -> PciIds;
    /// A human-readable address ("0000:03:00.0", "emu:i225#0").
    fn address(&self) -> String;
    /// Config space, 32 bits at a dword-aligned offset.
    fn config_read32(&self, offset: u16) -> u32;
    fn config_write32(&mut self, offset: u16, value: u32);
    /// Capabilities parsed from config space.
    fn capabilities(&self) -> Vec<Capability> {
        config::parse_capabilities(|off| self.config_read32(off))
    }
    /// Maps a memory BAR.
    fn map_bar(&mut self, bar: u8) -> Result<Self::Bar, PciError>;
    /// Allocates `count` interrupt vectors, MSI-X preferred; vector i fires for MSI-X entry i.
    fn alloc_vectors(&mut self, count: u16) -> Result<Vec<Self::Irq>, PciError>;
    /// Allocates zeroed, physically contiguous DMA memory.
    fn alloc_dma(&mut self, len: usize) -> Result<DmaRegion, PciError>;
    /// What interrupt delivery the function offers; by default its MSI-X capability only.
    fn irq_support(&self) -> IrqSupport {
        IrqSupport {
            msix_entries: config::find_msix(&self.capabilities()).map_or(0, |m| m.table_size),
            ..IrqSupport::default()
        }
    }
    /// Allocates the vectors of `mode` ([`IrqMode::vectors`] of them; none when polled).
    fn alloc_irq_mode(&mut self, mode: IrqMode) -> Result<Vec<Self::Irq>, PciError> {
        match mode {
            IrqMode::MsiX { vectors } => self.alloc_vectors(vectors),
            IrqMode::Polled => Ok(Vec::new()),
            other => Err(PciError::Interrupts(format!("{other} is not offered"))),
        }
    }
}
