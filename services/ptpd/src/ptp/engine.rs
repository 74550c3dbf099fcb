//! The PTP engine: one statime [`PtpInstance`] with one port per PTP clock, driven by driver
//! events and a timer table (shared/reference/ptp-and-benchmarks.md §1.6).
//!
//! [`Core`] is the whole protocol loop without threads or clocks of its own: the caller passes
//! the current monotonic time into every call and asks [`Core::next_deadline`] when to come
//! back. Driver I/O goes through [`DriverIo`] (requests with bounded timeouts, fire-and-forget
//! frame sends), so the same core runs under the production thread ([`Engine`]) and under the
//! deterministic simulated-time tests. The only work the core hands out is configuring a
//! driver's timestamping after (re)connect ([`Core::take_configure_jobs`]), which the thread
//! runs on a helper thread so a slow driver never stalls the protocol.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, bounded};
use ptp_ipc::clockpage::ClockPageReader;
use ptp_ipc::{Caps, DriverError, DriverEvent, DriverReply, DriverRequest, PortState, RxFilter};
use rand::SeedableRng;
use rand::rngs::StdRng;
use statime::PtpInstance;
use statime::config::{
    AcceptAnyMaster, ClockIdentity, DelayMechanism as StDelay, InstanceConfig, LeapIndicator,
    PortConfig, PtpMinorVersion, SdoId, TimePropertiesDS, TimeSource,
};
use statime::filters::KalmanConfiguration;
use statime::port::{InBmca, NoForwardedTLVs, Port, PortAction, PortActionIterator, Running};
use statime::time::{Duration as PtpDuration, Interval, Time};

use super::clock::{
    self, DriverIo, PhcClock, ServoState, SharedClockState, TracedConfig, TracedFilter,
};
use super::config::{
    DelayMechanism, InstanceSettings, NetworkTransport, PortSettings, PtpSettings, TimeProperties,
    derive_source_ip, eui64_from_mac, format_clock_identity,
};
use super::log::{Cause, event_name, state_name, summary_line};
use super::net::{self, FrameBuilder, msg};
use super::status::{PortSnapshot, PtpStatusBoard};

#[path = "engine_mgmt.rs"]
mod mgmt_view;

type Instance = PtpInstance<TracedFilter>;
type RunningPort = Port<'static, Running, AcceptAnyMaster, StdRng, PhcClock, TracedFilter>;
type BmcaPort = Port<'static, InBmca, AcceptAnyMaster, StdRng, PhcClock, TracedFilter>;

const NS_PER_S: u64 = 1_000_000_000;
/// Parked TX contexts beyond this are refused (a driver that never answers cannot grow the
/// table; each port parks a few per second and each expires within `tx_timestamp_timeout`).
const MAX_PARKED: usize = 1024;
/// Foreign masters remembered per port for the "new foreign master" log line.
const MAX_FOREIGN: usize = 64;
/// A failed timestamping configuration is retried after this.
const CONFIGURE_RETRY_NS: u64 = NS_PER_S;
/// Timeout of each request while configuring a driver.
pub const CONFIGURE_TIMEOUT: Duration = Duration::from_millis(500);
/// Rounds of due timers handled per call (a handler may arm a timer for "now" again).
const TIMER_ROUNDS: usize = 16;

/// Counters of everything the engine drops or does, for tests and diagnostics.
macro_rules! stats {
    ($($f:ident),* $(,)?) => {
        /// Live counters (shared with the thread that owns the engine).
        #[derive(Debug, Default)]
        pub struct EngineStats { $(pub $f: AtomicU64,)* }
        /// A copy of [`EngineStats`].
        #[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
        pub struct StatsSnapshot { $(pub $f: u64,)* }
        impl EngineStats {
            pub fn snapshot(&self) -> StatsSnapshot {
                StatsSnapshot { $($f: self.$f.load(Ordering::Relaxed),)* }
            }
        }
    };
}

stats!(
    tx_sent,
    tx_send_failed,
    tx_not_ready,
    tx_ts_delivered,
    tx_ts_lost,
    tx_ts_timeout,
    tx_ts_unknown,
    tx_ts_reset,
    tx_ts_implausible,
    rx_frames,
    rx_malformed,
    rx_wrong_transport,
    rx_foreign_domain,
    rx_bad_version,
    rx_no_timestamp,
    rx_implausible,
    rx_ignored,
    rx_own,
    rx_before_start,
    configures,
    configure_failures,
    driver_restarts,
    announce_rewrites,
    bmca_runs,
);

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// The five per-port timers statime asks for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum TimerKind {
    Announce = 0,
    Sync = 1,
    DelayRequest = 2,
    AnnounceReceipt = 3,
    FilterUpdate = 4,
}

const TIMERS: [TimerKind; 5] = [
    TimerKind::Announce,
    TimerKind::Sync,
    TimerKind::DelayRequest,
    TimerKind::AnnounceReceipt,
    TimerKind::FilterUpdate,
];

/// A [`PortAction`] with its bytes copied out of the port's buffer, so the port can be called
/// again while earlier actions are still being carried out.
enum Act {
    Event {
        ctx: statime::port::TimestampContext,
        data: Vec<u8>,
        link_local: bool,
    },
    General {
        data: Vec<u8>,
        link_local: bool,
    },
    Timer(TimerKind, Duration),
}

/// Drains an action iterator completely (statime's iterators borrow the port's send buffer).
fn own(actions: PortActionIterator<'_>) -> Vec<Act> {
    let mut out = Vec::new();
    for a in actions {
        out.push(match a {
            PortAction::SendEvent {
                context,
                data,
                link_local,
            } => Act::Event {
                ctx: context,
                data: data.to_vec(),
                link_local,
            },
            PortAction::SendGeneral { data, link_local } => Act::General {
                data: data.to_vec(),
                link_local,
            },
            PortAction::ResetAnnounceTimer { duration } => {
                Act::Timer(TimerKind::Announce, duration)
            }
            PortAction::ResetSyncTimer { duration } => Act::Timer(TimerKind::Sync, duration),
            PortAction::ResetDelayRequestTimer { duration } => {
                Act::Timer(TimerKind::DelayRequest, duration)
            }
            PortAction::ResetAnnounceReceiptTimer { duration } => {
                Act::Timer(TimerKind::AnnounceReceipt, duration)
            }
            PortAction::ResetFilterUpdateTimer { duration } => {
                Act::Timer(TimerKind::FilterUpdate, duration)
            }
            // Only needed to relay TLVs between ports of a boundary clock; ptpd's ports each
            // sit on their own segment and forward nothing.
            PortAction::ForwardTLV { .. } => continue,
        });
    }
    out
}

/// Calls a handler of port `$i` and carries out what it asks for. (A macro rather than a
/// method taking a closure: the returned iterator may borrow both the port and a received
/// frame, which a closure signature cannot express without requiring the frame to be
/// `'static`.)
macro_rules! dispatch {
    ($core:ident, $i:expr, $now:expr, $cause:expr, |$p:ident| $call:expr) => {{
        let i: usize = $i;
        if let Some($p) = $core.ports[i].port.as_mut() {
            let acts = own($call);
            $core.execute(i, acts, $now);
            $core.note_state(i, $cause);
        }
    }};
}

fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// A TX timestamp context waiting for the driver's `TxTimestamp`.
struct Parked {
    port: usize,
    ctx: statime::port::TimestampContext,
    deadline: u64,
}

/// Work for a helper: configure timestamping on a driver that just (re)connected.
pub struct ConfigureJob {
    pub port: usize,
    /// Answers carry it back; an answer for an older job is ignored.
    pub seq: u64,
    pub name: String,
    pub io: Arc<dyn DriverIo>,
    pub transport: NetworkTransport,
}

/// What configuring a driver found out.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Configured {
    pub caps: Caps,
    pub tx_on: bool,
    pub rx_filter: RxFilter,
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
    /// Asks the driver for its Caps, then turns on TX timestamps and the RX filter matching
    /// the transport (falling back to wider filters the part may prefer). Bounded: at most
    /// four requests of [`CONFIGURE_TIMEOUT`] each.
    pub fn run(&self) -> Result<Configured, ConfigureError> {
        let caps = match self.io.request(DriverRequest::Caps, CONFIGURE_TIMEOUT) {
            Ok(DriverReply::Caps(c)) => c,
            Ok(DriverReply::Error(err)) => {
                return Err(ConfigureError::Driver { what: "Caps", err });
            }
            Ok(_) => return Err(ConfigureError::Unexpected("Caps")),
            Err(err) => return Err(ConfigureError::Request { what: "Caps", err }),
        };
        let first = match self.transport {
            NetworkTransport::L2 => RxFilter::PtpV2L2Event,
            NetworkTransport::UdpV4 => RxFilter::PtpV2L4Event,
        };
        let mut last = ConfigureError::Unexpected("SetTstampConfig");
        for rx_filter in [first, RxFilter::PtpV2Event, RxFilter::All] {
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
                    return Ok(Configured {
                        caps,
                        tx_on,
                        rx_filter,
                    });
                }
                // A driver that answers Done applied what was asked.
                Ok(DriverReply::Done) => {
                    return Ok(Configured {
                        caps,
                        tx_on: true,
                        rx_filter,
                    });
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
}

/// One port's context besides statime's port.
struct PortCtx {
    s: PortSettings,
    /// 1-based PTP port number (statime numbers ports in the order they are added).
    number: u16,
    io: Arc<dyn DriverIo>,
    clock: SharedClockState,
    port: Option<RunningPort>,
    timers: [Option<u64>; 5],
    /// Timestamping configured for the current connection.
    configured: bool,
    cfg_seq: u64,
    cfg_pending: bool,
    cfg_retry_at: Option<u64>,
    generation: Option<u64>,
    mac: Option<[u8; 6]>,
    builder: Option<FrameBuilder>,
    link_up: bool,
    /// The state last logged / published.
    shown: PortState,
    foreign: HashSet<([u8; 8], u16)>,
    /// Whether "cannot send" has been logged since the port last became ready.
    warned_not_ready: bool,
}

/// The protocol loop (see the module docs).
pub struct Core {
    inst: InstanceSettings,
    ports: Vec<PortCtx>,
    instance: Option<&'static Instance>,
    own_id: Option<[u8; 8]>,
    bmca_at: Option<u64>,
    summary_at: Option<u64>,
    next_cookie: u64,
    parked: HashMap<u64, Parked>,
    board: Option<PtpStatusBoard>,
    stats: Arc<EngineStats>,
    grandmaster: Option<[u8; 8]>,
    jobs: Vec<ConfigureJob>,
    rng_base: Option<u64>,
}

fn time_source(v: u8) -> TimeSource {
    match v {
        0x10 => TimeSource::AtomicClock,
        0x20 => TimeSource::Gnss,
        0x30 => TimeSource::TerrestrialRadio,
        0x39 => TimeSource::SerialTimeCode,
        0x40 => TimeSource::Ptp,
        0x50 => TimeSource::Ntp,
        0x60 => TimeSource::HandSet,
        0x90 => TimeSource::Other,
        0xA0 => TimeSource::InternalOscillator,
        v => TimeSource::Unknown(v),
    }
}

fn time_properties_ds(tp: &TimeProperties) -> TimePropertiesDS {
    if tp.ptp_timescale {
        TimePropertiesDS::new_ptp_time(
            tp.utc_offset_valid.then_some(tp.utc_offset),
            LeapIndicator::NoLeap,
            tp.time_traceable,
            tp.frequency_traceable,
            time_source(tp.time_source),
        )
    } else {
        TimePropertiesDS::new_arbitrary_time(
            tp.time_traceable,
            tp.frequency_traceable,
            time_source(tp.time_source),
        )
    }
}

fn map_state(s: statime::observability::port::PortState, servo: ServoState) -> PortState {
    use statime::observability::port::PortState as St;
    match s {
        St::Initializing => PortState::Initializing,
        St::Faulty => PortState::Faulty,
        St::Disabled => PortState::Disabled,
        St::Listening => PortState::Listening,
        St::PreMaster => PortState::PreMaster,
        St::Master => PortState::Master,
        St::Passive => PortState::Passive,
        St::Uncalibrated => PortState::Uncalibrated,
        // statime has no UNCALIBRATED: a slave whose servo has not locked is reported as one,
        // as ptp4l does.
        St::Slave if servo == ServoState::Locked => PortState::Slave,
        St::Slave => PortState::Uncalibrated,
    }
}

fn clamp_i64(v: i128) -> i64 {
    v.clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64
}

impl Core {
    /// `ios[k]` is the driver of `settings.ports[k]`. With a configured `clockIdentity` the
    /// PTP instance starts at once; otherwise when the first port's driver reports its MAC.
    pub fn new(
        settings: PtpSettings,
        ios: Vec<Arc<dyn DriverIo>>,
        board: Option<PtpStatusBoard>,
        stats: Arc<EngineStats>,
        now: u64,
    ) -> Self {
        let ports = settings
            .ports
            .into_iter()
            .zip(ios)
            .enumerate()
            .map(|(i, (s, io))| {
                let clock = SharedClockState::default();
                clock::lock(&clock).max_frequency_ppb = s.max_frequency_ppb;
                PortCtx {
                    number: u16::try_from(i + 1).unwrap_or(u16::MAX),
                    s,
                    io,
                    clock,
                    port: None,
                    timers: [None; 5],
                    configured: false,
                    cfg_seq: 0,
                    cfg_pending: false,
                    cfg_retry_at: None,
                    generation: None,
                    mac: None,
                    builder: None,
                    link_up: true,
                    shown: PortState::Initializing,
                    foreign: HashSet::new(),
                    warned_not_ready: false,
                }
            })
            .collect();
        let mut core = Self {
            rng_base: settings.instance.rng_seed,
            own_id: settings.instance.clock_identity,
            inst: settings.instance,
            ports,
            instance: None,
            bmca_at: None,
            summary_at: None,
            next_cookie: 1,
            parked: HashMap::new(),
            board,
            stats,
            grandmaster: None,
            jobs: Vec::new(),
        };
        for i in 0..core.ports.len() {
            core.publish(i);
        }
        if core.own_id.is_some() {
            core.start_instance(now);
        }
        core
    }

    pub fn stats(&self) -> &Arc<EngineStats> {
        &self.stats
    }

    /// The clock identity in use, once known.
    pub fn clock_identity(&self) -> Option<[u8; 8]> {
        self.own_id
    }

    /// Driver configurations to run (see [`ConfigureJob::run`]); feed each result back
    /// through [`Core::on_configured`].
    pub fn take_configure_jobs(&mut self) -> Vec<ConfigureJob> {
        std::mem::take(&mut self.jobs)
    }

    fn queue_configure(&mut self, i: usize) {
        let p = &mut self.ports[i];
        p.cfg_seq += 1;
        p.cfg_pending = true;
        p.cfg_retry_at = None;
        self.jobs.push(ConfigureJob {
            port: i,
            seq: p.cfg_seq,
            name: p.s.name.clone(),
            io: p.io.clone(),
            transport: p.s.transport,
        });
    }

    /// The earliest time the core wants to be called again.
    pub fn next_deadline(&self) -> Option<u64> {
        let timers = self
            .ports
            .iter()
            .flat_map(|p| p.timers.iter().copied().chain([p.cfg_retry_at]))
            .flatten();
        let parked = self.parked.values().map(|p| p.deadline);
        timers
            .chain(parked)
            .chain(self.bmca_at)
            .chain(self.summary_at)
            .min()
    }

    fn start_instance(&mut self, now: u64) {
        let Some(id) = self.own_id else { return };
        if self.instance.is_some() {
            return;
        }
        let ic = InstanceConfig {
            clock_identity: ClockIdentity(id),
            priority_1: self.inst.priority1,
            priority_2: self.inst.priority2,
            domain_number: self.inst.domain_number,
            sdo_id: SdoId::default(),
            slave_only: self.inst.slave_only,
            path_trace: false,
        };
        // Leaked on purpose: statime's ports borrow their instance, and ptpd keeps one
        // instance for the life of the process (tests leak one per engine, a few KiB).
        let instance: &'static Instance = Box::leak(Box::new(PtpInstance::new(
            ic,
            time_properties_ds(&self.inst.time_properties),
        )));
        self.instance = Some(instance);
        log::info!(
            "clock identity {} (domain {}, priority1 {}, priority2 {}{})",
            format_clock_identity(&id),
            self.inst.domain_number,
            self.inst.priority1,
            self.inst.priority2,
            if self.inst.slave_only {
                ", slaveOnly"
            } else {
                ""
            }
        );
        let mut kalman = KalmanConfiguration::default();
        if let Some(t) = self.inst.step_threshold {
            kalman.step_threshold = PtpDuration::from_seconds(t);
        }
        for i in 0..self.ports.len() {
            let s = &self.ports[i].s;
            let delay_mechanism = match s.delay_mechanism {
                DelayMechanism::E2E => StDelay::E2E {
                    interval: Interval::from_log_2(s.log_min_delay_req_interval),
                },
                DelayMechanism::P2P => StDelay::P2P {
                    interval: Interval::from_log_2(s.log_min_pdelay_req_interval),
                },
            };
            let pc = PortConfig {
                acceptable_master_list: AcceptAnyMaster,
                delay_mechanism,
                announce_interval: Interval::from_log_2(s.log_announce_interval),
                announce_receipt_timeout: s.announce_receipt_timeout,
                sync_interval: Interval::from_log_2(s.log_sync_interval),
                master_only: s.master_only,
                delay_asymmetry: PtpDuration::from_nanos(s.delay_asymmetry_ns),
                minor_ptp_version: PtpMinorVersion::One,
            };
            let mut k = kalman;
            k.max_freq_offset = k
                .max_freq_offset
                .min(f64::from(s.max_frequency_ppb) / 1000.0);
            let fc = TracedConfig {
                kalman: k,
                state: self.ports[i].clock.clone(),
            };
            let rng = match self.rng_base {
                Some(seed) => StdRng::seed_from_u64(seed.wrapping_add(i as u64)),
                None => StdRng::from_entropy(),
            };
            let clock = PhcClock::new(
                &s.name,
                self.ports[i].io.clone(),
                self.ports[i].clock.clone(),
            );
            let (running, actions) = instance.add_port(pc, fc, clock, rng).end_bmca();
            self.ports[i].port = Some(running);
            let acts = own(actions);
            self.execute(i, acts, now);
            self.note_state(i, Cause::Init);
        }
        self.bmca_at = Some(now + dur_ns(instance.bmca_interval()));
        self.summary_at = Some(now + self.summary_interval_ns());
    }

    fn summary_interval_ns(&self) -> u64 {
        let e = i32::from(self.inst.summary_interval);
        (NS_PER_S as f64 * 2f64.powi(e)) as u64
    }

    /// Handles one event from port `i`'s driver.
    pub fn on_event(&mut self, i: usize, ev: DriverEvent, now: u64) {
        if i >= self.ports.len() {
            return;
        }
        match ev {
            DriverEvent::TxTimestamp { cookie, ns } => self.on_tx_timestamp(i, cookie, ns, now),
            DriverEvent::TxTimestampLost { cookie, reason } => {
                if self.parked.remove(&cookie).is_some() {
                    bump(&self.stats.tx_ts_lost);
                    log::warn!(
                        "port {} ({}): TX timestamp lost ({reason:?}); message context dropped",
                        self.ports[i].number,
                        self.ports[i].s.name
                    );
                } else {
                    bump(&self.stats.tx_ts_unknown);
                }
            }
            DriverEvent::PtpFrame { rx_ns, frame } => self.on_frame(i, rx_ns, &frame, now),
            // The end of a connection: the driver link reconnects (or not) and says so.
            DriverEvent::Closed { .. } => {}
            DriverEvent::Link { up, speed_mbps } => {
                let p = &mut self.ports[i];
                if p.link_up != up {
                    p.link_up = up;
                    if up {
                        p.warned_not_ready = false;
                        log::info!(
                            "port {} ({}): link up, {speed_mbps} Mb/s",
                            p.number,
                            p.s.name
                        );
                    } else {
                        log::warn!("port {} ({}): link down", p.number, p.s.name);
                        self.drop_parked(i);
                    }
                    self.note_state(i, Cause::Link);
                }
            }
            DriverEvent::Restarted { generation } => {
                let p = &mut self.ports[i];
                match p.generation {
                    Some(g) if g != generation => {
                        bump(&self.stats.driver_restarts);
                        log::warn!(
                            "port {} ({}): driver restarted (generation {generation:#x}); reconfiguring timestamping",
                            p.number,
                            p.s.name
                        );
                        clock::lock(&p.clock).new_epoch();
                    }
                    Some(_) => log::info!(
                        "port {} ({}): driver reconnected; reconfiguring timestamping",
                        p.number,
                        p.s.name
                    ),
                    None => {}
                }
                p.generation = Some(generation);
                p.configured = false;
                // A new driver generation or connection will not deliver stamps for frames
                // queued on the old one.
                self.drop_parked(i);
                self.queue_configure(i);
                self.publish(i);
            }
        }
    }

    fn drop_parked(&mut self, i: usize) {
        let before = self.parked.len();
        self.parked.retain(|_, p| p.port != i);
        let n = (before - self.parked.len()) as u64;
        self.stats.tx_ts_reset.fetch_add(n, Ordering::Relaxed);
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
                p.configured = true;
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
        self.publish(i);
    }

    fn ready(&self, i: usize) -> bool {
        let p = &self.ports[i];
        p.configured && p.link_up && p.builder.is_some()
    }

    /// Carries out a port's actions (already copied out of its buffer).
    fn execute(&mut self, i: usize, acts: Vec<Act>, now: u64) {
        for a in acts {
            match a {
                Act::Timer(k, d) => {
                    self.ports[i].timers[k as usize] = Some(now.saturating_add(dur_ns(d)));
                }
                Act::Event {
                    ctx,
                    data,
                    link_local,
                } => self.send(i, &data, true, link_local, Some(ctx), now),
                Act::General { data, link_local } => {
                    self.send(i, &data, false, link_local, None, now)
                }
            }
        }
    }

    fn send(
        &mut self,
        i: usize,
        data: &[u8],
        event: bool,
        link_local: bool,
        ctx: Option<statime::port::TimestampContext>,
        now: u64,
    ) {
        if !self.ready(i) {
            bump(&self.stats.tx_not_ready);
            let p = &mut self.ports[i];
            if !p.warned_not_ready {
                p.warned_not_ready = true;
                log::info!(
                    "port {} ({}): not sending {} (driver {}, link {})",
                    p.number,
                    p.s.name,
                    msg::name(data.first().map_or(0xF, |b| b & 0xF)),
                    if p.configured {
                        "ready"
                    } else {
                        "not configured"
                    },
                    if p.link_up { "up" } else { "down" }
                );
            }
            return;
        }
        let mut payload = data.to_vec();
        if !event
            && payload.first().map(|b| b & 0xF) == Some(msg::ANNOUNCE)
            && net::announce_grandmaster(&payload) == self.own_id
            && net::rewrite_announce(&mut payload, &self.inst.time_properties)
        {
            bump(&self.stats.announce_rewrites);
        }
        let p = &mut self.ports[i];
        let Some(builder) = p.builder.as_mut() else {
            return;
        };
        let frame = match builder.build(&payload, event, link_local) {
            Ok(f) => f,
            Err(e) => {
                log::error!(
                    "port {} ({}): cannot frame a message: {e}",
                    p.number,
                    p.s.name
                );
                return;
            }
        };
        let cookie = if ctx.is_some() {
            let c = self.next_cookie;
            self.next_cookie = self.next_cookie.wrapping_add(1).max(1);
            c
        } else {
            0
        };
        let req = DriverRequest::SendPtp {
            cookie,
            want_ts: ctx.is_some(),
            frame,
        };
        if let Err(e) = p.io.post(req) {
            bump(&self.stats.tx_send_failed);
            log::debug!("port {} ({}): send failed: {e:?}", p.number, p.s.name);
            return;
        }
        bump(&self.stats.tx_sent);
        if let Some(ctx) = ctx {
            if self.parked.len() >= MAX_PARKED {
                bump(&self.stats.tx_ts_timeout);
                log::warn!(
                    "port {} ({}): too many TX timestamps outstanding",
                    p.number,
                    p.s.name
                );
                return;
            }
            let deadline = now.saturating_add(dur_ns(p.s.tx_timestamp_timeout));
            self.parked.insert(
                cookie,
                Parked {
                    port: i,
                    ctx,
                    deadline,
                },
            );
        }
    }

    fn on_tx_timestamp(&mut self, i: usize, cookie: u64, ns: u64, now: u64) {
        let Some(parked) = self.parked.remove(&cookie) else {
            // Late (already timed out) or duplicate: the context is gone, as statime requires
            // exactly one handle_send_timestamp per SendEvent.
            bump(&self.stats.tx_ts_unknown);
            log::debug!("port {}: TX timestamp for unknown cookie {cookie}", i + 1);
            return;
        };
        if parked.port != i {
            bump(&self.stats.tx_ts_unknown);
            return;
        }
        if !self.plausible(i, ns, now) {
            bump(&self.stats.tx_ts_implausible);
            log::warn!(
                "port {} ({}): implausible TX timestamp {ns} dropped",
                self.ports[i].number,
                self.ports[i].s.name
            );
            return;
        }
        bump(&self.stats.tx_ts_delivered);
        let ctx = parked.ctx;
        dispatch!(self, i, now, Cause::Receive, |p| {
            p.handle_send_timestamp(ctx, Time::from_nanos(ns))
        });
    }

    fn plausible(&self, i: usize, stamp: u64, now: u64) -> bool {
        let p = &self.ports[i];
        clock::plausible(&p.s.name, &*p.io, &p.clock, stamp, now)
    }

    fn on_frame(&mut self, i: usize, rx_ns: Option<u64>, frame: &[u8], now: u64) {
        bump(&self.stats.rx_frames);
        if self.instance.is_none() {
            bump(&self.stats.rx_before_start);
            return;
        }
        let m = match net::parse(frame) {
            Ok(m) => m,
            Err(e) => {
                bump(&self.stats.rx_malformed);
                log::debug!("port {}: malformed frame dropped: {e}", i + 1);
                return;
            }
        };
        let p = &self.ports[i];
        let transport_ok = matches!(
            (p.s.transport, m.transport),
            (NetworkTransport::L2, ptp_ipc::frame::Transport::L2)
                | (
                    NetworkTransport::UdpV4,
                    ptp_ipc::frame::Transport::Udp4 { .. }
                )
        );
        if !transport_ok {
            bump(&self.stats.rx_wrong_transport);
            return;
        }
        if m.version != 2 {
            bump(&self.stats.rx_bad_version);
            return;
        }
        if m.domain != self.inst.domain_number {
            bump(&self.stats.rx_foreign_domain);
            return;
        }
        if matches!(m.message_type, msg::SIGNALING | msg::MANAGEMENT) || m.message_type > 0xD {
            // statime 0.4 answers neither (pmc gets no reply): counted, not logged per frame.
            bump(&self.stats.rx_ignored);
            return;
        }
        let Some((src_id, src_port)) = net::source_port_identity(m.payload) else {
            bump(&self.stats.rx_malformed);
            return;
        };
        if Some(src_id) == self.own_id && src_port == p.number {
            bump(&self.stats.rx_own);
            return;
        }
        let rx = if m.is_event() {
            match rx_ns {
                Some(ns) => Some(ns),
                None => {
                    // Hardware stamping is the point of ptpd: an event message without an RX
                    // stamp cannot be used for a measurement.
                    bump(&self.stats.rx_no_timestamp);
                    return;
                }
            }
        } else {
            None
        };
        if let Err(e) = net::check_times(&m, rx) {
            bump(&self.stats.rx_malformed);
            log::debug!("port {}: {} dropped: {e}", i + 1, msg::name(m.message_type));
            return;
        }
        if m.message_type == msg::ANNOUNCE {
            let pm = &mut self.ports[i];
            if pm.foreign.len() < MAX_FOREIGN && pm.foreign.insert((src_id, src_port)) {
                log::info!(
                    "port {} ({}): new foreign master {}-{src_port}",
                    pm.number,
                    pm.s.name,
                    format_clock_identity(&src_id)
                );
            }
        }
        let payload = m.payload;
        match rx {
            Some(ns) => {
                if !self.plausible(i, ns, now) {
                    bump(&self.stats.rx_implausible);
                    log::debug!("port {}: implausible RX timestamp {ns} dropped", i + 1);
                    return;
                }
                dispatch!(self, i, now, Cause::Receive, |p| {
                    p.handle_event_receive(payload, Time::from_nanos(ns))
                });
            }
            None => dispatch!(self, i, now, Cause::Receive, |p| p
                .handle_general_receive(payload)),
        }
    }

    /// Runs every timer that is due at `now`.
    pub fn on_timers(&mut self, now: u64) {
        for _ in 0..TIMER_ROUNDS {
            let mut fired = false;
            for i in 0..self.ports.len() {
                for k in TIMERS {
                    let due = self.ports[i].timers[k as usize].is_some_and(|t| t <= now);
                    if !due {
                        continue;
                    }
                    fired = true;
                    self.ports[i].timers[k as usize] = None;
                    match k {
                        TimerKind::Announce => dispatch!(self, i, now, Cause::Receive, |p| {
                            p.handle_announce_timer(&mut NoForwardedTLVs)
                        }),
                        TimerKind::Sync => {
                            dispatch!(self, i, now, Cause::Receive, |p| p.handle_sync_timer())
                        }
                        TimerKind::DelayRequest => dispatch!(self, i, now, Cause::Receive, |p| {
                            p.handle_delay_request_timer()
                        }),
                        TimerKind::AnnounceReceipt => {
                            dispatch!(self, i, now, Cause::AnnounceTimeout, |p| {
                                p.handle_announce_receipt_timer()
                            })
                        }
                        TimerKind::FilterUpdate => dispatch!(self, i, now, Cause::Servo, |p| {
                            p.handle_filter_update_timer()
                        }),
                    }
                }
            }
            if !fired {
                break;
            }
        }
        if self.bmca_at.is_some_and(|t| t <= now) {
            self.run_bmca(now);
        }
        self.expire_parked(now);
        for i in 0..self.ports.len() {
            if self.ports[i].cfg_retry_at.is_some_and(|t| t <= now) && !self.ports[i].cfg_pending {
                self.queue_configure(i);
            }
        }
        if self.summary_at.is_some_and(|t| t <= now) {
            self.summary();
            self.summary_at = Some(now + self.summary_interval_ns());
        }
    }

    fn expire_parked(&mut self, now: u64) {
        let expired: Vec<u64> = self
            .parked
            .iter()
            .filter(|(_, p)| p.deadline <= now)
            .map(|(c, _)| *c)
            .collect();
        for cookie in expired {
            if let Some(p) = self.parked.remove(&cookie) {
                bump(&self.stats.tx_ts_timeout);
                let pc = &self.ports[p.port];
                log::warn!(
                    "port {} ({}): timed out waiting for a TX timestamp ({} ms); message context dropped",
                    pc.number,
                    pc.s.name,
                    pc.s.tx_timestamp_timeout.as_millis()
                );
            }
        }
    }

    fn run_bmca(&mut self, now: u64) {
        let Some(instance) = self.instance else {
            return;
        };
        if self.ports.iter().any(|p| p.port.is_none()) {
            return;
        }
        bump(&self.stats.bmca_runs);
        let mut in_bmca: Vec<BmcaPort> = self
            .ports
            .iter_mut()
            .filter_map(|p| p.port.take())
            .map(|p| p.start_bmca())
            .collect();
        {
            let mut refs: Vec<&mut BmcaPort> = in_bmca.iter_mut().collect();
            instance.bmca(&mut refs);
        }
        let mut pending = Vec::with_capacity(in_bmca.len());
        for (i, p) in in_bmca.into_iter().enumerate() {
            let (running, actions) = p.end_bmca();
            self.ports[i].port = Some(running);
            pending.push(own(actions));
        }
        self.bmca_at = Some(now + dur_ns(instance.bmca_interval()));
        self.note_grandmaster();
        for (i, acts) in pending.into_iter().enumerate() {
            self.execute(i, acts, now);
            self.note_state(i, Cause::Bmca);
        }
    }

    /// Logs a change of grandmaster the way ptp4l does.
    fn note_grandmaster(&mut self) {
        let Some(instance) = self.instance else {
            return;
        };
        let gm = instance.parent_ds().grandmaster_identity.0;
        if self.grandmaster == Some(gm) {
            return;
        }
        self.grandmaster = Some(gm);
        if Some(gm) == self.own_id {
            log::info!(
                "selected local clock {} as best master",
                format_clock_identity(&gm)
            );
        } else {
            log::info!("selected best master clock {}", format_clock_identity(&gm));
        }
    }

    fn derived_state(&self, i: usize) -> PortState {
        let p = &self.ports[i];
        let Some(port) = &p.port else {
            return PortState::Initializing;
        };
        if !p.link_up {
            // statime cannot be told about the link; ptpd reports the port as ptp4l would.
            return PortState::Faulty;
        }
        map_state(port.port_ds().port_state, clock::lock(&p.clock).servo)
    }

    /// Logs a state transition (ptp4l style) and publishes the port's snapshot.
    fn note_state(&mut self, i: usize, cause: Cause) {
        let new = self.derived_state(i);
        let old = self.ports[i].shown;
        if new != old {
            if new == PortState::Master {
                self.note_grandmaster();
            }
            let gm = self
                .instance
                .map(|inst| inst.parent_ds().grandmaster_identity.0);
            let is_gm = gm.is_some() && gm == self.own_id;
            let p = &mut self.ports[i];
            p.shown = new;
            log::info!(
                "port {} ({}): {} to {} on {}",
                p.number,
                p.s.name,
                state_name(old),
                state_name(new),
                event_name(old, new, cause, is_gm)
            );
            if new == PortState::Master && is_gm {
                log::info!("assuming the grand master role");
            }
        }
        self.publish(i);
    }

    /// Writes port `i`'s snapshot for the clock scheme.
    fn publish(&self, i: usize) {
        if let Some(board) = &self.board {
            board.set(self.ports[i].s.clock, self.snapshot(i));
            if let Some(m) = self.mgmt_snapshot() {
                board.set_mgmt(m);
            }
        }
    }

    /// The once-per-summary_interval line of each slave port.
    fn summary(&mut self) {
        for i in 0..self.ports.len() {
            let slave = self.ports[i].port.as_ref().is_some_and(|p| p.is_steering());
            let p = &self.ports[i];
            let (samples, servo) = {
                let mut st = clock::lock(&p.clock);
                (std::mem::take(&mut st.samples), st.servo)
            };
            if !slave {
                continue;
            }
            if let Some(line) = summary_line(&samples, servo) {
                log::info!("port {} ({}): {line}", p.number, p.s.name);
            }
        }
        // A servo that locked or unlocked since the last call shows up as UNCALIBRATED ⇄ SLAVE.
        for i in 0..self.ports.len() {
            self.note_state(i, Cause::Servo);
        }
    }

    /// The current snapshot of port `k` (tests and diagnostics).
    pub fn snapshot(&self, k: usize) -> PortSnapshot {
        let p = &self.ports[k];
        let mut snap = PortSnapshot {
            port_state: self.derived_state(k),
            freq_scaled_ppm: clock::lock(&p.clock).freq_scaled_ppm,
            ..PortSnapshot::default()
        };
        if let (Some(instance), Some(port)) = (self.instance, &p.port) {
            let est = port.port_current_ds_contribution();
            let slave = est.is_some();
            let cur = instance.current_ds(est);
            if slave {
                snap.offset_ns = clamp_i64(cur.offset_from_master.nanos_rounded());
                snap.mean_path_delay_ns = clamp_i64(cur.mean_delay.nanos_rounded());
            }
            snap.steps_removed = cur.steps_removed;
            snap.grandmaster = instance.parent_ds().grandmaster_identity.0;
        }
        snap
    }

    /// The last measured offset of port `k` (ns), if it is a slave with measurements.
    pub fn last_offset_ns(&self, k: usize) -> Option<f64> {
        clock::lock(&self.ports[k].clock).last_offset_ns
    }
}

/// Control messages to the engine thread.
enum Control {
    Configured {
        port: usize,
        seq: u64,
        result: Result<Configured, ConfigureError>,
    },
    Stop,
}

/// The longest the engine thread sleeps, so a stop request is seen promptly even without
/// events or timers.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// The engine thread: owns the [`Core`] (statime's instance and ports are not `Send`, so they
/// are created on this thread), waits on the drivers' event channels, helper results and the
/// next deadline.
pub struct Engine {
    stop: Arc<AtomicBool>,
    ctl: Sender<Control>,
    stats: Arc<EngineStats>,
    thread: Option<JoinHandle<()>>,
}

impl Engine {
    /// Starts the engine. `ios[k]` and `events[k]` belong to `settings.ports[k]`.
    pub fn spawn(
        settings: PtpSettings,
        ios: Vec<Arc<dyn DriverIo>>,
        events: Vec<Receiver<DriverEvent>>,
        board: Option<PtpStatusBoard>,
    ) -> std::io::Result<Engine> {
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(EngineStats::default());
        let (ctl_tx, ctl_rx) = bounded::<Control>(256);
        let thread = {
            let stop = stop.clone();
            let stats = stats.clone();
            let ctl_tx = ctl_tx.clone();
            std::thread::Builder::new()
                .name("ptp-engine".into())
                .spawn(move || {
                    engine_thread(settings, ios, events, board, stats, &stop, &ctl_tx, &ctl_rx)
                })?
        };
        Ok(Engine {
            stop,
            ctl: ctl_tx,
            stats,
            thread: Some(thread),
        })
    }

    pub fn stats(&self) -> StatsSnapshot {
        self.stats.snapshot()
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.ctl.try_send(Control::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn engine_thread(
    settings: PtpSettings,
    ios: Vec<Arc<dyn DriverIo>>,
    events: Vec<Receiver<DriverEvent>>,
    board: Option<PtpStatusBoard>,
    stats: Arc<EngineStats>,
    stop: &AtomicBool,
    ctl_tx: &Sender<Control>,
    ctl_rx: &Receiver<Control>,
) {
    let start = Instant::now();
    let now = || dur_ns(start.elapsed());
    let mut core = Core::new(settings, ios, board, stats, now());
    let mut live: Vec<bool> = vec![true; events.len()];
    while !stop.load(Ordering::Acquire) {
        for job in core.take_configure_jobs() {
            let tx = ctl_tx.clone();
            let spawned = std::thread::Builder::new()
                .name(format!("ptp-cfg:{}", job.name))
                .spawn(move || {
                    let result = job.run();
                    let _ = tx.send_timeout(
                        Control::Configured {
                            port: job.port,
                            seq: job.seq,
                            result,
                        },
                        Duration::from_secs(1),
                    );
                });
            if let Err(e) = spawned {
                log::error!("cannot start a configuration thread: {e}");
            }
        }
        let t = now();
        let wait = core
            .next_deadline()
            .map_or(MAX_SLEEP, |d| Duration::from_nanos(d.saturating_sub(t)))
            .min(MAX_SLEEP);
        let mut sel = Select::new();
        let mut ids = Vec::with_capacity(events.len());
        for (k, rx) in events.iter().enumerate() {
            if live[k] {
                ids.push((sel.recv(rx), k));
            }
        }
        let ctl_op = sel.recv(ctl_rx);
        if let Ok(op) = sel.select_timeout(wait) {
            let index = op.index();
            if index == ctl_op {
                match op.recv(ctl_rx) {
                    Ok(Control::Configured { port, seq, result }) => {
                        core.on_configured(port, seq, result, now())
                    }
                    Ok(Control::Stop) | Err(_) => break,
                }
            } else if let Some(&(_, k)) = ids.iter().find(|(id, _)| *id == index) {
                match op.recv(&events[k]) {
                    Ok(ev) => core.on_event(k, ev, now()),
                    // The link is gone (ptpd is shutting down); stop selecting on it.
                    Err(_) => live[k] = false,
                }
            }
        }
        core.on_timers(now());
    }
}
