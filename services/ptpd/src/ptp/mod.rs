//! PTP in ptpd: statime 0.4 as the protocol engine over the driver daemons' hardware
//! timestamps (DESIGN.md §6, shared/reference/ptp-and-benchmarks.md §1).
//!
//! - [`config`]: the `[ptp]` keys (ptp4l's names) and their validation;
//! - [`engine`]: the protocol loop ([`engine::Core`]) and its thread ([`engine::Engine`]);
//! - [`clock`]: statime's `Clock` over a driver's PHC, and the filter wrapper;
//! - [`net`]: L2 / UDPv4 framing and the input checks;
//! - [`log`]: ptp4l-style log lines; [`status`]: what the clock scheme reports.
//!
//! # How statime 0.4's traps are handled
//!
//! - **Timescale** (reference §1.4, §2.4 "37 s trap"). statime overwrites the instance's time
//!   properties with "PTP timescale, currentUtcOffset invalid (0), internal oscillator" whenever
//!   a port becomes master, and has no API to set them afterwards. ptpd instead rewrites every
//!   Announce it sends as grandmaster (grandmasterIdentity = ours) on its way to the driver
//!   ([`net::rewrite_announce`]): flags, currentUtcOffset and timeSource come from the
//!   configuration, by default what a ptp4l grandmaster announces — PTP timescale,
//!   currentUtcOffset 37 (`utc_offset`), not flagged valid, timeSource 0xA0. So a ptp4l slave
//!   sees no "temporal vortex"; with `-H` it applies no UTC correction and tracks our PHC
//!   exactly, as ptpd's own slaves do (they copy the grandmaster's timescale without UTC
//!   arithmetic). A software-stamping ptp4l slave (`-S`, CLOCK_REALTIME) subtracts 37 s: right
//!   when our PHC runs TAI; when the PHC runs UTC-like time (an emulated PHC started from the
//!   host clock), that slave needs `--utc_offset=0`, or set `ptpTimescale = false` (ARB) here.
//!   Announces relayed from another grandmaster (boundary clock) are left untouched.
//! - **Clock identity**: the EUI-64 of the first PTP clock's MAC with FF:FE inserted, as
//!   linuxptp derives it, so ptp4l, pmc and ptpd show the same identity for one NIC (statime's
//!   `from_mac_address` pads with zeros instead). `clockIdentity` overrides it.
//! - **OverlayClock** (buggy step) is not used: ptpd steers the PHC itself.
//! - **Frequency**: `set_frequency` is absolute; it is clamped to ±min(max_frequency, the
//!   driver's max_adj) before the AdjFine (statime issue #380).
//! - **TX stamps**: each SendEvent's context is parked under a cookie until the driver's
//!   `TxTimestamp`; `TxTimestampLost` or `tx_timestamp_timeout` drops it (a master then sends no
//!   Follow_Up for that Sync, as statime intends), never blocking the port.
//! - **Input**: statime 0.4 computes times with unsigned fixed point and would overflow on a
//!   correctionField larger than its timestamp; such messages are dropped before statime sees
//!   them ([`net::check_times`]). Management and Signaling frames from the network are
//!   counted and dropped (statime answers neither); management is answered on the local
//!   `management_socket` instead ([`manage`], [`mgmt`], `crate::mgmt_socket`), as ptp4l
//!   answers `pmc -u`.
//! - **Servo restarts**: statime's Kalman filter ignores measurements older than its own time;
//!   after a driver restart that resets the PHC that would be forever, so the filter wrapper
//!   restarts the servo when the PHC runs backwards without a step ([`clock::TracedFilter`]).
//! - statime has no UNCALIBRATED state and cannot be told about the link: ptpd reports a slave
//!   whose servo has not locked as UNCALIBRATED and a port whose link is down as FAULTY (it
//!   stops sending meanwhile; statime's announce timeout moves the port on).

pub mod clock;
pub mod config;
pub mod engine;
pub mod log;
pub mod manage;
pub mod mgmt;
pub mod net;
pub mod status;

#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use ptp_ipc::{ClockError, DriverEvent, DriverReply, DriverRequest};

use crate::driver_link::Connector;
use crate::scheme::ClockScheme;

pub use clock::DriverIo;
pub use config::PtpSettings;
pub use engine::{Engine, StatsSnapshot};
pub use status::{PortSnapshot, PtpStatusBoard};

/// Driver events queued per link before the link thread starts dropping (and logging) them.
pub const EVENT_QUEUE: usize = 4096;

/// One clock of a [`ClockScheme`] as the engine's [`DriverIo`]: the scheme owns the driver
/// links, the engine borrows them through this.
pub struct SchemeLink<C: Connector> {
    pub scheme: Arc<ClockScheme<C>>,
    pub index: usize,
}

impl<C: Connector> DriverIo for SchemeLink<C> {
    fn request(&self, req: DriverRequest, timeout: Duration) -> Result<DriverReply, ClockError> {
        self.scheme
            .links()
            .get(self.index)
            .ok_or(ClockError::NoDevice)?
            .request(req, timeout)
    }

    fn post(&self, req: DriverRequest) -> Result<(), ClockError> {
        self.scheme
            .links()
            .get(self.index)
            .ok_or(ClockError::NoDevice)?
            .post(req)
    }
}

/// Event channels for `clocks` driver links: a sender for each clock that runs a PTP port
/// (pass it to `DriverLink::start`), `None` for the others.
#[allow(clippy::type_complexity)]
pub fn event_channels(
    settings: Option<&PtpSettings>,
    clocks: usize,
) -> (
    Vec<Option<Sender<DriverEvent>>>,
    Vec<Option<Receiver<DriverEvent>>>,
) {
    (0..clocks)
        .map(|i| {
            if settings.is_some_and(|s| s.ports.iter().any(|p| p.clock == i)) {
                let (tx, rx) = bounded(EVENT_QUEUE);
                (Some(tx), Some(rx))
            } else {
                (None, None)
            }
        })
        .unzip()
}

/// Starts the engine over a clock scheme's links. `events` comes from [`event_channels`].
pub fn start<C: Connector>(
    settings: PtpSettings,
    scheme: &Arc<ClockScheme<C>>,
    mut events: Vec<Option<Receiver<DriverEvent>>>,
    board: Option<PtpStatusBoard>,
) -> Result<Engine, String> {
    let mut ios: Vec<Arc<dyn DriverIo>> = Vec::new();
    let mut rxs = Vec::new();
    for p in &settings.ports {
        let rx = events
            .get_mut(p.clock)
            .and_then(Option::take)
            .ok_or_else(|| format!("no event channel for clock {:?}", p.name))?;
        ios.push(Arc::new(SchemeLink {
            scheme: scheme.clone(),
            index: p.clock,
        }));
        rxs.push(rx);
    }
    Engine::spawn(settings, ios, rxs, board).map_err(|e| format!("starting the PTP engine: {e}"))
}
