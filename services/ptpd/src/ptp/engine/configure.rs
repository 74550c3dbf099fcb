//! Driver timestamping setup after every (re)connect: the job a helper thread runs
//! ([`ConfigureJob::run`]) and what the core does with its result.

use std::sync::Arc;
use std::time::Duration;

use ptp_ipc::clockpage::ClockPageReader;
use ptp_ipc::{Caps, DriverError, DriverReply, DriverRequest, RxFilter};

use super::super::clock::{self, DriverIo};
use super::super::config::{NetworkTransport, RxFilterMode, derive_source_ip, eui64_from_mac};
use super::super::net::FrameBuilder;
use super::{Core, NS_PER_S, bump};

/// A failed timestamping configuration is retried after this.
const CONFIGURE_RETRY_NS: u64 = NS_PER_S;
/// Timeout of each request while configuring a driver.
pub const CONFIGURE_TIMEOUT: Duration = Duration::from_millis(500);

/// Work for a helper: configure timestamping on a driver that just (re)connected.
pub struct ConfigureJob {
    pub port: usize,
    /// Answers carry it back; an answer for an older job is ignored.
    pub seq: u64,
    pub name: String,
    pub io: Arc<dyn DriverIo>,
    pub transport: NetworkTransport,
    /// The per-message filter the port's role wants (`rx_filter = "per_role"`), asked first.
    pub role_filter: Option<RxFilter>,
}

/// The RX filter a port in `state` asks for under `mode`: `None` under "event" (the
/// transport's event filter), else Delay_Req while (pre-)master and Sync in every other state
/// (a listening or uncalibrated port is about to be a slave; a passive port uses neither).
pub fn role_filter(
    mode: RxFilterMode,
    transport: NetworkTransport,
    state: ptp_ipc::PortState,
) -> Option<RxFilter> {
    use ptp_ipc::PortState as S;
    if mode == RxFilterMode::Event {
        return None;
    }
    let master = matches!(state, S::Master | S::PreMaster);
    Some(match (transport, master) {
        (NetworkTransport::L2, true) => RxFilter::PtpV2L2DelayReq,
        (NetworkTransport::L2, false) => RxFilter::PtpV2L2Sync,
        (NetworkTransport::UdpV4, true) => RxFilter::PtpV2L4DelayReq,
        (NetworkTransport::UdpV4, false) => RxFilter::PtpV2L4Sync,
    })
}

/// What configuring a driver found out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configured {
    pub caps: Caps,
    pub tx_on: bool,
    pub rx_filter: RxFilter,
    /// The PHC's frequency (`GetFreq`, scaled ppm); `None` if the driver cannot say.
    pub freq_scaled_ppm: Option<i64>,
}

/// Why configuring a driver failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigureError {
    #[error("{what}: request failed: {err:?}")]
    Request {
        what: &'static str,
        err: ptp_ipc::ClockError,
    },
    #[error("{what}: driver refused: {err:?}")]
    Driver {
        what: &'static str,
        err: DriverError,
    },
    #[error("{0}: unexpected reply")]
    Unexpected(&'static str),
    #[error(
        "driver applied TX {tx_on}, RX {rx_filter:?}: PTP needs TX stamps and PTP event RX stamps"
    )]
    Insufficient { tx_on: bool, rx_filter: RxFilter },
}

impl ConfigureJob {
    /// Asks the driver for its Caps and its PHC's frequency, then turns on TX timestamps and
    /// the RX filter of the port's role, if any, else the one matching the transport (falling
    /// back to wider filters the part may prefer). Bounded: at most six requests of
    /// [`CONFIGURE_TIMEOUT`] each.
    pub fn run(&self) -> Result<Configured, ConfigureError> {
        let caps = match self.io.request(DriverRequest::Caps, CONFIGURE_TIMEOUT) {
            Ok(DriverReply::Caps(c)) => c,
            Ok(DriverReply::Error(err)) => {
                return Err(ConfigureError::Driver { what: "Caps", err });
            }
            Ok(_) => return Err(ConfigureError::Unexpected("Caps")),
            Err(err) => return Err(ConfigureError::Request { what: "Caps", err }),
        };
        let freq_scaled_ppm = self.freq();
        let configured = |tx_on, rx_filter| Configured {
            caps: caps.clone(),
            tx_on,
            rx_filter,
            freq_scaled_ppm,
        };
        let first = match self.transport {
            NetworkTransport::L2 => RxFilter::PtpV2L2Event,
            NetworkTransport::UdpV4 => RxFilter::PtpV2L4Event,
        };
        let mut last = ConfigureError::Unexpected("SetTstampConfig");
        let filters = self.role_filter.into_iter();
        for rx_filter in filters.chain([first, RxFilter::PtpV2Event, RxFilter::All]) {
            let req = DriverRequest::SetTstampConfig {
                tx_on: true,
                rx_filter,
            };
            match self.io.request(req, CONFIGURE_TIMEOUT) {
                Ok(DriverReply::TstampConfig { tx_on, rx_filter }) => {
                    if !tx_on || rx_filter == RxFilter::None || rx_filter == RxFilter::PtpV1L4Event
                    {
                        return Err(ConfigureError::Insufficient { tx_on, rx_filter });
                    }
                    return Ok(configured(tx_on, rx_filter));
                }
                // A driver that answers Done applied what was asked.
                Ok(DriverReply::Done) => {
                    return Ok(configured(true, rx_filter));
                }
                Ok(DriverReply::Error(DriverError::Unsupported)) => {
                    last = ConfigureError::Driver {
                        what: "SetTstampConfig",
                        err: DriverError::Unsupported,
                    };
                }
                Ok(DriverReply::Error(err)) => {
                    return Err(ConfigureError::Driver {
                        what: "SetTstampConfig",
                        err,
                    });
                }
                Ok(_) => return Err(ConfigureError::Unexpected("SetTstampConfig")),
                Err(err) => {
                    return Err(ConfigureError::Request {
                        what: "SetTstampConfig",
                        err,
                    });
                }
            }
        }
        Err(last)
    }

    /// The PHC's frequency. A driver that cannot report it is still usable: the servo's
    /// frequencies are then absolute, as before `GetFreq` existed.
    fn freq(&self) -> Option<i64> {
        match self.io.request(DriverRequest::GetFreq, CONFIGURE_TIMEOUT) {
            Ok(DriverReply::Freq { scaled_ppm }) => Some(scaled_ppm),
            other => {
                log::info!("{}: GetFreq answered {other:?}", self.name);
                None
            }
        }
    }
}

impl Core {
    /// Driver configurations to run (see [`ConfigureJob::run`]); feed each result back
    /// through [`Core::on_configured`].
    pub fn take_configure_jobs(&mut self) -> Vec<ConfigureJob> {
        std::mem::take(&mut self.jobs)
    }

    pub(super) fn queue_configure(&mut self, i: usize) {
        let state = self.derived_state(i);
        let p = &mut self.ports[i];
        let role = role_filter(p.s.rx_filter, p.s.transport, state);
        p.role_filter_asked = role;
        p.cfg_seq += 1;
        p.cfg_pending = true;
        p.cfg_retry_at = None;
        self.jobs.push(ConfigureJob {
            port: i,
            seq: p.cfg_seq,
            name: p.s.name.clone(),
            io: p.io.clone(),
            transport: p.s.transport,
            role_filter: role,
        });
    }

    /// Under `rx_filter = "per_role"`, re-configures a configured port whose role now wants
    /// another filter than the last one asked for (a refused per-message filter is not asked
    /// again until the role changes).
    pub(super) fn follow_role(&mut self, i: usize) {
        let state = self.derived_state(i);
        let p = &self.ports[i];
        if !p.configured || p.cfg_pending {
            return;
        }
        let want = role_filter(p.s.rx_filter, p.s.transport, state);
        if want.is_some() && want != p.role_filter_asked {
            log::info!(
                "port {} ({}): {:?} wants RX filter {:?}; re-configuring",
                p.number,
                p.s.name,
                state,
                want.unwrap_or(RxFilter::None)
            );
            self.queue_configure(i);
        }
    }

    /// The RX filter the driver applied for port `k`, once configured.
    pub fn rx_filter(&self, k: usize) -> Option<RxFilter> {
        let p = &self.ports[k];
        p.configured.then_some(p.rx_filter).flatten()
    }

    /// The result of a [`ConfigureJob`].
    pub fn on_configured(
        &mut self,
        i: usize,
        seq: u64,
        result: Result<Configured, ConfigureError>,
        now: u64,
    ) {
        let Some(p) = self.ports.get_mut(i) else {
            return;
        };
        if seq != p.cfg_seq {
            return;
        }
        p.cfg_pending = false;
        match result {
            Ok(c) => {
                bump(&self.stats.configures);
                let mac = c.caps.mac;
                p.mac = Some(mac);
                let src = p.s.source_ip.unwrap_or_else(|| derive_source_ip(mac));
                p.builder = Some(FrameBuilder::new(p.s.transport, mac, src));
                {
                    let mut st = clock::lock(&p.clock);
                    st.max_adj_ppb = c.caps.max_adj_ppb;
                    st.page = None;
                    if !c.caps.clock_page.is_empty() {
                        match ClockPageReader::open(&c.caps.clock_page) {
                            Ok(r) => st.page = Some(r),
                            Err(e) => log::info!(
                                "{}: clock page {} unusable ({e}); reading the PHC over IPC",
                                p.s.name,
                                c.caps.clock_page
                            ),
                        }
                    }
                }
                if let Some(f) = c.freq_scaled_ppm {
                    clock::adopt_driver_freq(&p.s.name, &*p.io, &p.clock, f);
                }
                p.configured = true;
                p.rx_filter = Some(c.rx_filter);
                p.warned_not_ready = false;
                log::info!(
                    "port {} ({}): timestamping on (TX on, RX {:?}), {} {}, MAC {}",
                    p.number,
                    p.s.name,
                    c.rx_filter,
                    c.caps.part,
                    match p.s.transport {
                        NetworkTransport::L2 => "L2".to_string(),
                        NetworkTransport::UdpV4 => format!("UDPv4 from {src}"),
                    },
                    mac.iter()
                        .map(|b| format!("{b:02x}"))
                        .collect::<Vec<_>>()
                        .join(":")
                );
                if self.own_id.is_none() && i == 0 {
                    self.own_id = Some(eui64_from_mac(mac));
                    self.start_instance(now);
                }
            }
            Err(e) => {
                bump(&self.stats.configure_failures);
                p.cfg_retry_at = Some(now + CONFIGURE_RETRY_NS);
                log::warn!(
                    "port {} ({}): configuring timestamping failed: {e}; retrying in 1 s",
                    p.number,
                    p.s.name
                );
            }
        }
        // The role may have changed while the driver was being configured.
        self.follow_role(i);
        self.publish(i);
    }
}
