//! PTP in ptpd: statime 0.4 as the protocol engine over the driver daemons' hardware
//! timestamps (DESIGN.md §6, shared/reference/ptp-and-benchmarks.md §1).
//!
//! - [`config`]: the `[ptp]` keys (ptp4l's names) and their validation;
//! - [`engine`]: the protocol loop ([`engine::Core`]) and its thread ([`engine::Engine`]);
//! - [`clock`]: statime's `Clock` over a driver's PHC, and the filter wrapper;
//! - [`servo`]: the PI servo (default), beside statime's Kalman filter;
//! - [`net`]: L2 / UDPv4 framing and the input checks;
//! - [`log`]: ptp4l-style log lines; [`status`]: what the clock scheme reports.
//!
//! The engine knows nothing of the clock scheme: `crate::service` hands it driver links as
//! [`DriverIo`] and the scheme reads what it publishes on the [`PtpStatusBoard`].
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
//! - **Frequency**: `set_frequency` is relative to the PHC's frequency when ptpd first
//!   configured the driver (`GetFreq`), so statime's initial "0 ppm" keeps a restarted ptpd's
//!   PHC where the drivers kept it (issue 17); the absolute sum is clamped to ±min(max_frequency,
//!   the driver's max_adj) before the AdjFine (statime issue #380), and is what status reports.
//!   A driver that comes back at another frequency (cold restart) gets the last one again.
//! - **TX stamps**: each SendEvent's context is parked under a cookie until the driver's
//!   `TxTimestamp`; `TxTimestampLost` or `tx_timestamp_timeout` drops it (a master then sends no
//!   Follow_Up for that Sync, as statime intends), never blocking the port.
//! - **Input**: statime 0.4 computes times with unsigned fixed point and would overflow on a
//!   correctionField larger than its timestamp; such messages are dropped before statime sees
//!   them ([`net::check_times`]). Signaling frames are counted and dropped (statime has no
//!   use for them). statime does not answer management either: ptpd does, from a snapshot of
//!   the engine's data sets ([`manage`], [`mgmt`]), on the port a request arrives on (`pmc -2`,
//!   `pmc -4`) and on the local `management_socket` (`pmc -u`, `crate::mgmt_socket`), as
//!   ptp4l does; on Redox at `/scheme/ptp/mgmt`. A privileged SET of priority1/priority2
//!   (what `management_settable` lists) rebuilds the instance and its ports, since statime
//!   keeps defaultDS private: the BMCA and the servo start over.
//! - **The servo** is ptpd's own PI ([`servo`], the default: statime 0.4's Kalman filter locked
//!   in 20 s from a 1 ms start, stepped back and forth on a 20 µs threshold because statime
//!   pairs a Delay_Req with a Sync from before a step, and lost a grandmaster whose time jumped),
//!   plugged in through statime's `Filter` trait; `clock_servo = "kalman"` keeps statime's.
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
pub mod servo;
pub mod status;

#[cfg(test)]
mod mgmt_sim_tests;
#[cfg(test)]
mod servo_sim;
#[cfg(test)]
mod sim;
#[cfg(test)]
mod tests;

pub use clock::DriverIo;
pub use config::PtpSettings;
pub use engine::{Engine, StatsSnapshot};
pub use status::{PortSnapshot, PtpStatusBoard};
