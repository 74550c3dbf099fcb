//! A device host for QEMU's `x-pci-proxy-dev` (multi-process QEMU): serves a register-level
//! model — the same i225 state machine igcd drives — to a Linux guest, so the guest's own
//! driver (igc) runs on it. Facts: `shared/reference/qemu-proxy.md`.
//!
//! - [`proto`]: the wire format, decoded totally into typed errors;
//! - [`config`]: the 256-byte config space (BAR0 and the MSI-X BAR3; the PM, MSI, MSI-X and
//!   PCI Express capabilities of the part, INTA);
//! - [`guest_ram`]: the SYNC_SYSMEM memfds mapped for the model's DMA (bounds-checked);
//! - [`client`]: the driver's side, a `PciFunction` for igcd (`igcd --devhost PATH`), so the
//!   model outlives the driver that drives it;
//! - [`Server`]: one thread that answers QEMU's synchronous accesses, runs the model's due
//!   work between them and drives the INTx eventfd from the model's interrupt level.
//!
//! Interrupts: the function advertises MSI and MSI-X as the part does, but QEMU 7.2's proxy
//! gives a device process no way to deliver either. hw/remote/proxy.c sets up no MSI/MSI-X
//! state for the proxy device (`pci_proxy_dev_realize` calls no `msi_init`/`msix_init`;
//! `pci_proxy_write_config` only mirrors the write into QEMU's copy and forwards it), its only
//! interrupt path is the INTx irqfd of `setup_irqfd`/`proxy_intx_update`, and the channel
//! carries nothing from the device process but the RET reply that
//! `mpqemu_msg_send_and_await_reply` (hw/remote/mpqemu-link.c) waits for: the commands
//! (`MPQemuCmd`, include/hw/remote/mpqemu-link.h) are all QEMU's requests. So a message the
//! function sends with MSI or MSI-X enabled is counted (`msi_dropped`, `msix_dropped`) and goes
//! nowhere; the guest must stay on INTx (Linux: `pci=nomsi`, then igc falls back by itself).
//! MSI-X masking and the PBA behave as specified (`MsixTable`). The INTx line follows
//! [`ServedDevice::intx_level`] while neither MSI nor MSI-X is enabled (PCI 3.0 §6.8: a
//! function with either enabled does not use INTx); its eventfd is written on each rising
//! edge (and again on a resample while still high). Under TCG nothing reads that eventfd: the
//! guest runs igc's handler from its timer tick with `irqpoll` (reference, "Polling under
//! TCG").

pub mod client;
pub mod config;
pub mod guest_ram;
pub mod proto;
mod server;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_config;

pub use server::{ServeStats, Server, ServerOptions};

use intel_regs::igc::{CTRL, Ctrl, TXSTMPH};
use ptp_pci::emulated::{Device, DeviceHost};

use crate::igc::{BAR3_LEN, I225, MSIX_VECTORS};
use crate::nic::{Mac, MsixTable};
use config::{PciProfile, PcieProfile};

/// Why the device host stopped serving (or could not start).
#[derive(Debug, thiserror::Error)]
pub enum ProxyError {
    /// A socket operation failed.
    #[error("proxy socket: {0}")]
    Io(#[from] std::io::Error),
    /// The peer closed the socket in the middle of a message.
    #[error("proxy socket closed mid-message ({got} of {want} bytes)")]
    Truncated {
        /// Bytes received.
        got: usize,
        /// Bytes the message has.
        want: usize,
    },
    /// The rest of a message did not arrive in time (a peer trickling bytes).
    #[error("proxy socket: {got} of {want} bytes of a message arrived in time")]
    MessageTimeout {
        /// Bytes received.
        got: usize,
        /// Bytes the message (or its header) has.
        want: usize,
    },
    /// The stream cannot be followed any further (a header announcing an impossible size).
    #[error("proxy protocol: {0}")]
    Protocol(#[from] proto::ProtoError),
    /// A SYNC_SYSMEM descriptor that could not safely back its region (short, unsealed, not a
    /// file): the message is refused and the client dropped, the model keeps its old RAM.
    #[error("SYNC_SYSMEM region {index} (gpa {gpa:#x} size {size:#x}) refused: {why}")]
    RamRefused {
        /// Region index in the message.
        index: usize,
        /// Guest-physical start.
        gpa: u64,
        /// Length.
        size: u64,
        /// What is wrong with its descriptor.
        #[source]
        why: guest_ram::RamRefused,
    },
    /// SET_IRQFD carried a descriptor that is not an eventfd (a pipe could block the
    /// serving thread's write for good): the client is dropped.
    #[error("SET_IRQFD: the {which} descriptor is not an eventfd ({what})")]
    NotEventfd {
        /// "irq" or "resample".
        which: &'static str,
        /// What it is instead.
        what: String,
    },
    /// A guest RAM region could not be mapped.
    #[error("mapping guest RAM {gpa:#x}+{size:#x}: {err}")]
    Map {
        /// Guest-physical start.
        gpa: u64,
        /// Length.
        size: u64,
        /// What failed.
        err: String,
    },
}

/// What the device host needs of a model beyond [`Device`].
pub trait ServedDevice: Device {
    /// The level of the function's INTx line (legacy interrupt mode).
    fn intx_level(&self) -> bool;
    /// A function reset (QEMU's DEVICE_RESET).
    fn reset_function(&mut self, host: &mut dyn DeviceHost);
    /// TX timestamps latched so far (for the delivery latency; 0 if the model has none).
    fn tx_stamps_latched(&self) -> u64 {
        0
    }
    /// The BAR0 offset whose read hands a latched TX timestamp to the driver, if any.
    fn tx_stamp_release(&self) -> Option<u32> {
        None
    }
    /// The config space the function presents; by default a conventional header with BAR0.
    fn pci_profile(&self) -> PciProfile {
        PciProfile::conventional(self.ids(), self.bar_len(0).unwrap_or(0))
    }
    /// The MSI-X table (in BAR3) that a signalled vector goes through, if the function has one.
    fn msix_table(&mut self) -> Option<&mut MsixTable> {
        None
    }
}

/// BAR0 of the I225: 1 MiB (the I225-V's pciconf and the I226-LM's lspci above). The model's
/// register space is [`crate::igc::BAR0_LEN`]; the server answers the rest as unmodelled.
pub const I225_BAR0_LEN: u32 = 1 << 20;

impl ServedDevice for I225 {
    /// The model's own legacy line level (`ICR & IMS` outside MSI-X mode).
    fn intx_level(&self) -> bool {
        I225::intx_level(self)
    }

    /// CTRL.DEV_RST: the whole port returns to its power-on state (the model's port reset).
    fn reset_function(&mut self, host: &mut dyn DeviceHost) {
        self.write32(0, CTRL, Ctrl::DEV_RST.bits(), host);
    }

    fn tx_stamps_latched(&self) -> u64 {
        self.stats().tx_stamps_latched
    }

    /// TXSTMPH_0: Linux igc (6.1) uses TX timestamp set 0 only, and reading its high half
    /// releases the set (intel-timesync.md §7.1).
    fn tx_stamp_release(&self) -> Option<u32> {
        Some(TXSTMPH[0])
    }

    /// The I225's config space: BAR0, the MSI-X BAR3 (16 KiB, 5 entries: Linux igc asks for 4
    /// queue vectors + 1, igc_set_interrupt_capability), and a 5 GT/s x1 link — what igc's
    /// probe reports through pcie_print_link_status on a real part ("4.000 Gb/s available
    /// PCIe bandwidth (5.0 GT/s PCIe x1 link)", e.g. raspberrypi/linux#6832).
    fn pci_profile(&self) -> PciProfile {
        let link = PcieProfile {
            msix_vectors: MSIX_VECTORS,
            link_speed: 2,
            link_width: 1,
        };
        PciProfile::intel_gbe(self.ids(), I225_BAR0_LEN, BAR3_LEN, link)
    }

    fn msix_table(&mut self) -> Option<&mut MsixTable> {
        Some(self.port().msix_table_mut())
    }
}

impl ServedDevice for crate::igb::Igb {
    /// The port's legacy line level (`ICR & IMS` outside MSI-X mode), as on the i225.
    fn intx_level(&self) -> bool {
        self.nic().intx_level()
    }

    /// CTRL.RST (e1000 CTRL b26): the model's port reset (see `crate::igb`'s docs for what
    /// survives it).
    fn reset_function(&mut self, host: &mut dyn DeviceHost) {
        use intel_regs::igb::{CTRL, Ctrl};
        self.write32(0, CTRL, Ctrl::RST.bits(), host);
    }

    fn tx_stamps_latched(&self) -> u64 {
        self.stats().tx_stamps_latched
    }

    /// TXSTMPH: the igb parts have one TX stamp pair, released by reading its high half
    /// (intel-timesync.md §7.5; Linux igb_ptp_tx_hwtstamp reads TXSTMPL then TXSTMPH).
    fn tx_stamp_release(&self) -> Option<u32> {
        Some(intel_regs::igb::TXSTMPH)
    }
}
