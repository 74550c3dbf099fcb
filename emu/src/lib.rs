//! Register-level device models of Intel NICs for redox-ptp (DESIGN.md §4).
//!
//! Models are deterministic state machines driven through register reads and writes (the
//! emulated backend of `ptp-pci`), with true time injected through [`clock::TimeSource`]:
//! a [`clock::VirtualClock`] that tests advance by hand, or a [`clock::HostClock`] in real time.
//!
//! - [`phc`]: the PHC/oscillator arithmetic (SYSTIM, TIMINCA, crystal error), exact.
//! - [`igc`]: the i225/i226 model; [`igb`]: the i210/i211, i350 and 82576 models.
//! - `nic`: what the two families share (register file, interrupts, link, PHY, NVM, the
//!   queue-0 TX/RX engines, stamp noise), with [`NicStats`].
//! - [`wire`]: what a NIC model is attached to (loopback, nothing, a Unix datagram socket).
//! - [`truth`]: the ground-truth record: each PHC's exact law published for other processes,
//!   with the model's BAR and cable-loss counters.
//! - [`proxy`] (Linux): serves a model to a QEMU guest over `x-pci-proxy-dev`.
//! - [`rng`]: the seeded PRNG behind the models' noise (timestamp jitter, cable jitter/loss).
//! - [`host`]: a recording [`DeviceHost`](ptp_pci::emulated::DeviceHost) for tests that drive a
//!   model directly.

#![warn(missing_docs)]

pub mod clock;
pub mod host;
pub mod igb;
pub mod igc;
mod nic;
pub mod phc;
pub mod pinwire;
#[cfg(target_os = "linux")]
pub mod proxy;
pub mod rng;
pub mod truth;
pub mod wire;

pub use clock::{HostClock, TimeSource, VirtualClock};
pub use igb::{Igb, IgbConfig, IgbPart};
pub use igc::{I225, I225Config, I225Stats, LinkSpeed, ReadAction};
pub use nic::{
    LinkMode, MsixMessage, MsixSignal, MsixTable, NicStats, Port as NicPort, TxEngine,
    UnimplementedAccess,
};
pub use phc::{Phc, SysTime, TimeFormat, WrapExtender};
pub use wire::{Cable, Disconnected, LinkModes, LinkOffer, Loopback, WireFrame, WirePort};
