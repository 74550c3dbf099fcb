//! What igcd and igbd share (DESIGN.md §5): the register funnel with its counters, bounded
//! register polls, PHC operations over a per-family [`clock::ClockHw`], and the request
//! dispatcher that turns typed IPC requests into clock operations.
//!
//! Family specifics live in one module each ([`igc`] for i225/i226, [`igb`] for i210/i211,
//! i350 and 82576) behind [`family::Family`]; the daemon itself ([`daemon`]) is written once
//! and generic over it, so igcd and igbd are thin.

pub mod clock;
pub mod daemon;
pub mod family;
pub mod funnel;
pub mod igb;
pub mod igc;
pub mod irq;
pub mod mac;
pub mod pins;
pub mod ring;
pub mod service;
pub mod txts;

pub use funnel::Regs;

/// Errors of the hardware layer.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum HwError {
    /// A bounded register poll gave up.
    #[error("timed out after {waited_ms} ms waiting for {what}")]
    Timeout { what: &'static str, waited_ms: u64 },
    /// The PCI function is not a part this driver supports.
    #[error("unsupported device {vendor:04x}:{device:04x}")]
    UnsupportedDevice { vendor: u16, device: u16 },
    /// A value out of the hardware's range.
    #[error("invalid argument: {0}")]
    InvalidArgument(&'static str),
    /// The hardware cannot do it.
    #[error("unsupported: {0}")]
    Unsupported(&'static str),
    /// The PCI layer failed.
    #[error("pci: {0}")]
    Pci(#[from] ptp_pci::PciError),
}

impl From<HwError> for ptp_ipc::DriverError {
    fn from(e: HwError) -> Self {
        match e {
            HwError::Timeout { .. } => Self::Timeout,
            HwError::InvalidArgument(_) => Self::InvalidArgument,
            HwError::Unsupported(_) => Self::Unsupported,
            other => Self::Other(other.to_string()),
        }
    }
}
