//! A device host for QEMU's `x-pci-proxy-dev` (multi-process QEMU): serves a register-level
//! model — the same i225 state machine igcd drives — to a Linux guest, so the guest's own
//! driver (igc) runs on it. Facts: `shared/reference/qemu-proxy.md`.
//!
//! - [`proto`]: the wire format, decoded totally into typed errors;
//! - [`config`]: the 256-byte PCI header (32-bit BAR0, no capabilities, INTA);
//! - [`guest_ram`]: the SYNC_SYSMEM memfds mapped for the model's DMA (bounds-checked);
//! - [`client`]: the driver's side, a `PciFunction` for igcd (`igcd --devhost PATH`), so the
//!   model outlives the driver that drives it;
//! - [`Server`]: one thread that answers QEMU's synchronous accesses, runs the model's due
//!   work between them and drives the INTx eventfd from the model's interrupt level.
//!
//! Interrupts: there is no MSI/MSI-X path (the header has no capabilities), so the model's
//! MSI-X messages are only counted. The INTx line follows [`ServedDevice::intx_level`]; its
//! eventfd is written on each rising edge (and again on a resample while still high). Under
//! TCG nothing reads that eventfd: the guest runs igc's handler from its timer tick with
//! `irqpoll` (reference, "Polling under TCG").

pub mod client;
pub mod config;
pub mod guest_ram;
pub mod proto;
mod server;

#[cfg(test)]
mod tests;

pub use server::{ServeStats, Server, ServerOptions};

use intel_regs::igc::{CTRL, TXSTMPH, ctrl};
use ptp_pci::emulated::{Device, DeviceHost};

use crate::igc::I225;

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
}

impl ServedDevice for I225 {
    /// The model's own legacy line level (`ICR & IMS` outside MSI-X mode).
    fn intx_level(&self) -> bool {
        I225::intx_level(self)
    }

    /// CTRL.DEV_RST: the whole port returns to its power-on state (the model's port reset).
    fn reset_function(&mut self, host: &mut dyn DeviceHost) {
        self.write32(0, CTRL, ctrl::DEV_RST, host);
    }

    fn tx_stamps_latched(&self) -> u64 {
        self.stats().tx_stamps_latched
    }

    /// TXSTMPH_0: Linux igc (6.1) uses TX timestamp set 0 only, and reading its high half
    /// releases the set (intel-timesync.md §7.1).
    fn tx_stamp_release(&self) -> Option<u32> {
        Some(TXSTMPH[0])
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
        use intel_regs::igb::{CTRL, ctrl};
        self.write32(0, CTRL, ctrl::RST, host);
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
