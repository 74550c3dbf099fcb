//! The clock scheme's meaning, independent of transport: privilege, validation, and mapping
//! each request to driver operations. On Linux hosts it is served on a Unix socket; on Redox as
//! `/scheme/ptp`. `crate::service` starts it beside the PTP engine.

use std::sync::atomic::{AtomicI64, Ordering};
use std::time::Duration;

use ptp_ipc::{
    ClockError, ClockReply, ClockRequest, ClockStatus, DriverReply, DriverRequest, PortState,
};

use crate::driver_link::{Connector, DriverLink, clock_error};
use crate::ptp::PtpStatusBoard;

/// Root, or a uid the configuration allows, may change clocks; everyone may read.
pub fn may_write(uid: u32, privileged: &[u32]) -> bool {
    uid == 0 || privileged.contains(&uid)
}

/// All clocks ptpd serves.
pub struct ClockScheme<C: Connector> {
    links: Vec<DriverLink<C>>,
    privileged: Vec<u32>,
    timeout: Duration,
    /// The frequency last applied to each clock through the scheme.
    freq: Vec<AtomicI64>,
    /// What the PTP engine publishes, when ptpd runs PTP.
    ptp: Option<PtpStatusBoard>,
}

impl<C: Connector> ClockScheme<C> {
    pub fn new(links: Vec<DriverLink<C>>, privileged: Vec<u32>, timeout: Duration) -> Self {
        Self {
            freq: links.iter().map(|_| AtomicI64::new(0)).collect(),
            links,
            privileged,
            timeout,
            ptp: None,
        }
    }

    /// Reports the PTP engine's port snapshots in `status` (clocks without a snapshot stay
    /// `Disabled`).
    /// The PTP status board, when PTP runs.
    pub fn ptp_status(&self) -> Option<&PtpStatusBoard> {
        self.ptp.as_ref()
    }

    pub fn with_ptp_status(mut self, board: Option<PtpStatusBoard>) -> Self {
        self.ptp = board;
        self
    }

    pub fn links(&self) -> &[DriverLink<C>] {
        &self.links
    }

    /// Answers one request from a caller with uid `uid`.
    pub fn handle(&self, req: ClockRequest, uid: u32) -> ClockReply {
        match self.try_handle(req, uid) {
            Ok(r) => r,
            Err(e) => ClockReply::Error(e),
        }
    }

    fn link(&self, clock: u32) -> Result<&DriverLink<C>, ClockError> {
        self.links.get(clock as usize).ok_or(ClockError::NoDevice)
    }

    fn try_handle(&self, req: ClockRequest, uid: u32) -> Result<ClockReply, ClockError> {
        let writes = matches!(
            req,
            ClockRequest::Set { .. } | ClockRequest::Adj { .. } | ClockRequest::Freq { .. }
        );
        if writes && !may_write(uid, &self.privileged) {
            return Err(ClockError::PermissionDenied);
        }
        let (clock, dreq) = match req {
            ClockRequest::List => {
                return Ok(ClockReply::Count {
                    clocks: self.links.len() as u32,
                });
            }
            ClockRequest::Status { clock } => return self.status(clock),
            ClockRequest::Get { clock } => (clock, DriverRequest::GetTime),
            ClockRequest::GetTimeX { clock, samples } => {
                if samples == 0 || samples > ptp_ipc::MAX_SAMPLES {
                    return Err(ClockError::InvalidArgument);
                }
                (clock, DriverRequest::GetTimeX { samples })
            }
            ClockRequest::Set { clock, ns } => (clock, DriverRequest::SetTime { ns }),
            ClockRequest::Adj { clock, delta_ns } => (clock, DriverRequest::AdjTime { delta_ns }),
            ClockRequest::Freq { clock, scaled_ppm } => {
                (clock, DriverRequest::AdjFine { scaled_ppm })
            }
            ClockRequest::Caps { clock } => (clock, DriverRequest::Caps),
            ClockRequest::Stats { clock } => (clock, DriverRequest::Stats),
        };
        let freq = match dreq {
            DriverRequest::AdjFine { scaled_ppm } => Some(scaled_ppm),
            _ => None,
        };
        let reply = self.link(clock)?.request(dreq, self.timeout)?;
        Ok(match reply {
            DriverReply::Done => {
                if let Some(f) = freq {
                    self.freq[clock as usize].store(f, Ordering::Relaxed);
                }
                ClockReply::Done
            }
            DriverReply::Time { ns } => ClockReply::Time { ns },
            DriverReply::TimeX { samples } => ClockReply::TimeX { samples },
            DriverReply::Caps(c) => ClockReply::Caps(c),
            DriverReply::Stats(s) => ClockReply::Stats(s),
            DriverReply::Error(e) => return Err(clock_error(&e)),
            DriverReply::TstampConfig { .. } => return Err(ClockError::Io),
        })
    }

    fn status(&self, clock: u32) -> Result<ClockReply, ClockError> {
        let link = self.link(clock)?;
        let st = link.status();
        let freq = self.freq[clock as usize].load(Ordering::Relaxed);
        let base = ClockStatus {
            driver_up: st.connected,
            generation: st.generation,
            connects: st.connects,
            link_up: st.link_up,
            link_speed_mbps: st.speed_mbps,
            // No PTP port runs on this clock.
            port_state: PortState::Disabled,
            freq_scaled_ppm: freq,
            ..ClockStatus::default()
        };
        let snap = self.ptp.as_ref().and_then(|b| b.get(clock as usize));
        Ok(ClockReply::Status(match snap {
            Some(p) => ClockStatus {
                port_state: p.port_state,
                offset_ns: p.offset_ns,
                mean_path_delay_ns: p.mean_path_delay_ns,
                freq_scaled_ppm: p.freq_scaled_ppm,
                grandmaster: p.grandmaster,
                steps_removed: p.steps_removed,
                ..base
            },
            None => base,
        }))
    }
}
