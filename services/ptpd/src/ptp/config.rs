//! The `[ptp]` configuration: ptp4l's option names (ptp4l(8), linuxptp 3.1), their defaults
//! where ptpd can honour them, and validation with typed errors.
//!
//! ```toml
//! [ptp]                          # present ⇒ ptpd runs PTP; absent ⇒ clock scheme only
//! domainNumber = 0
//! priority1 = 128
//! priority2 = 128
//! slaveOnly = false              # alias clientOnly
//! clockIdentity = "00005e.fffe.005301"   # default: EUI-64 of the first clock's MAC
//! logSyncInterval = 0
//! logAnnounceInterval = 1
//! logMinDelayReqInterval = 0
//! logMinPdelayReqInterval = 0
//! announceReceiptTimeout = 3
//! delay_mechanism = "E2E"        # or "P2P"
//! network_transport = "L2"       # or "UDPv4"
//! summary_interval = 0           # log2 s between "rms ... delay ..." lines
//! tx_timestamp_timeout = 50      # ms a Sync/Delay_Req waits for its TX stamp
//! max_frequency = 500000         # ppb, clamp of every frequency adjustment
//! rx_filter = "event"            # or "per_role": RX stamps of Sync only while not master,
//!                                # of Delay_Req only while master (E2E only)
//! clock_servo = "pi"             # or "kalman" (statime's Kalman filter)
//! pi_proportional_const = 0.0    # 0: ptp4l's hardware default scaled by the sync interval
//! pi_integral_const = 0.0        # likewise
//! first_step_threshold = 0.00002 # s, step the first update above it (0: never)
//! step_threshold = 0.00002       # s, step later updates above it, on a consistent estimate
//!                                # (0: never, pi only; kalman's default: 0.001)
//! delay_filter_length = 10       # path delay = median of this many samples (pi)
//! utc_offset = 37                # what the grandmaster announces (see ptp/mod.rs)
//!
//! [[clock]]
//! name = "igc0"
//! channel = "/run/redox-ptp/igc0.sock"
//! [clock.ptp]                    # per-port overrides (port options only)
//! enabled = true
//! source_ip = "192.0.2.10"
//! ```
//!
//! Differences from ptp4l, on purpose: `network_transport` defaults to `"L2"` (ptpd has no IP
//! configuration to take a source address from; ptp4l defaults to UDPv4), `tx_timestamp_timeout`
//! defaults to 50 ms (ptp4l 3.1: 1 ms, which is tighter than an IPC round trip through the driver
//! daemon allows), and `max_frequency` to 500 000 ppb (the i225's hardware limit is close to it;
//! ptp4l: 900 000 000).

use std::net::Ipv4Addr;
use std::time::Duration;

use serde::Deserialize;

/// A `[ptp]` or `[clock.ptp]` value out of range, or an unsupported choice.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum PtpConfigError {
    /// A numeric key outside the range ptpd accepts.
    #[error("{section}: {key} = {value} is outside {min}..={max}")]
    OutOfRange {
        section: String,
        key: &'static str,
        value: i64,
        min: i64,
        max: i64,
    },
    /// A key whose value names something ptpd does not implement.
    #[error("{section}: {key} = {value:?} is not supported (use one of {supported})")]
    Unsupported {
        section: String,
        key: &'static str,
        value: String,
        supported: &'static str,
    },
    /// `clockIdentity` is neither "xxxxxx.xxxx.xxxxxx" nor 16 hex digits.
    #[error(
        "clockIdentity {0:?}: expected \"xxxxxx.xxxx.xxxxxx\" (linuxptp form) or 16 hex digits"
    )]
    BadClockIdentity(String),
    /// `step_threshold` must be a number of seconds in 0..=1000, and > 0 for the Kalman
    /// filter (which cannot disable steps).
    #[error(
        "step_threshold = {0} must be >= 0 and <= 1000 s, and > 0 with clock_servo = \"kalman\" (statime's Kalman filter cannot disable steps)"
    )]
    BadStepThreshold(f64),
    /// A servo constant or threshold that is not a finite number in its range.
    #[error("[ptp]: {key} = {value} is outside {min}..={max}")]
    BadServoValue {
        key: &'static str,
        value: f64,
        min: f64,
        max: f64,
    },
    /// `rx_filter = "per_role"` with `delay_mechanism = "P2P"`: a P2P port needs stamps of
    /// Pdelay_Req and Pdelay_Resp in every state, which no single-message filter gives.
    #[error(
        "{section}: rx_filter = \"per_role\" needs delay_mechanism = \"E2E\" (P2P needs RX \
         stamps of Pdelay_Req and Pdelay_Resp in every port state)"
    )]
    PerRoleNeedsE2e { section: String },
    /// `[ptp] enabled = true` but every clock disabled PTP, or similar.
    #[error("[ptp] is enabled but no [[clock]] runs PTP")]
    NoPtpPorts,
}

/// `delay_mechanism`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum DelayMechanism {
    #[default]
    E2E,
    P2P,
}

/// `rx_filter`: which received messages a port asks its driver to stamp.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RxFilterMode {
    /// Every PTPv2 event message of the transport, in every state (Linux
    /// HWTSTAMP_FILTER_PTP_V2_L2_EVENT / _L4_EVENT, what ptp4l asks for).
    #[default]
    Event,
    /// Only what the port's role uses: Sync while not master, Delay_Req while master (Linux
    /// HWTSTAMP_FILTER_PTP_V2_*_SYNC / _DELAY_REQ, as ptp4l's `hwts_filter` modes for parts
    /// that latch one stamp at a time). Needed on QEMU's 82576 model, which stamps one
    /// message type only (see the README's findings).
    PerRole,
}

/// `network_transport`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum NetworkTransport {
    /// IEEE 802.3, ethertype 0x88F7 (ptp4l `-2`).
    #[default]
    L2,
    /// UDP over IPv4, ports 319/320 (ptp4l `-4`).
    UdpV4,
}

/// Options that may be set globally in `[ptp]` (as defaults) and per clock in `[clock.ptp]`.
/// serde's `flatten` cannot be combined with `deny_unknown_fields`, hence the two structs
/// repeat these fields; [`PortOptions::merge`] joins them.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PortOptions {
    /// Per clock: `false` leaves this clock to the clock scheme only (no PTP port).
    pub enabled: Option<bool>,
    #[serde(rename = "logSyncInterval")]
    pub log_sync_interval: Option<i8>,
    #[serde(rename = "logAnnounceInterval")]
    pub log_announce_interval: Option<i8>,
    #[serde(rename = "logMinDelayReqInterval")]
    pub log_min_delay_req_interval: Option<i8>,
    #[serde(rename = "logMinPdelayReqInterval")]
    pub log_min_pdelay_req_interval: Option<i8>,
    #[serde(rename = "announceReceiptTimeout")]
    pub announce_receipt_timeout: Option<u8>,
    pub delay_mechanism: Option<String>,
    pub network_transport: Option<String>,
    /// ptp4l 3.x `masterOnly` (4.x `serverOnly`).
    #[serde(rename = "masterOnly", alias = "serverOnly")]
    pub master_only: Option<bool>,
    /// ns, as ptp4l's `delayAsymmetry`.
    #[serde(rename = "delayAsymmetry")]
    pub delay_asymmetry: Option<i64>,
    /// Source address of UDPv4 frames (default: derived from the MAC, see [`derive_source_ip`]).
    pub source_ip: Option<Ipv4Addr>,
    /// ms.
    pub tx_timestamp_timeout: Option<u64>,
    /// ppb.
    pub max_frequency: Option<u32>,
    /// "event" (default) or "per_role" ([`RxFilterMode`]).
    pub rx_filter: Option<String>,
}

impl PortOptions {
    /// `self` with every unset key taken from `base`.
    pub fn merge(&self, base: &PortOptions) -> PortOptions {
        macro_rules! pick {
            ($($f:ident),*) => { PortOptions { $($f: self.$f.clone().or_else(|| base.$f.clone()),)* } };
        }
        pick!(
            enabled,
            log_sync_interval,
            log_announce_interval,
            log_min_delay_req_interval,
            log_min_pdelay_req_interval,
            announce_receipt_timeout,
            delay_mechanism,
            network_transport,
            master_only,
            delay_asymmetry,
            source_ip,
            tx_timestamp_timeout,
            max_frequency,
            rx_filter
        )
    }
}

/// The global `[ptp]` table.
#[derive(Debug, Clone, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PtpSection {
    /// `false` keeps the section but runs no PTP (the clock scheme only).
    pub enabled: Option<bool>,
    #[serde(rename = "domainNumber")]
    pub domain_number: Option<u8>,
    pub priority1: Option<u8>,
    pub priority2: Option<u8>,
    /// ptp4l 3.x `slaveOnly` (4.x `clientOnly`).
    #[serde(rename = "slaveOnly", alias = "clientOnly")]
    pub slave_only: Option<bool>,
    #[serde(rename = "clockIdentity")]
    pub clock_identity: Option<String>,
    pub summary_interval: Option<i8>,
    /// "pi" (default) or "kalman".
    pub clock_servo: Option<String>,
    pub pi_proportional_const: Option<f64>,
    pub pi_integral_const: Option<f64>,
    /// s.
    pub first_step_threshold: Option<f64>,
    /// s.
    pub step_threshold: Option<f64>,
    pub delay_filter_length: Option<u16>,
    /// TAI − UTC the grandmaster announces (ptp4l's `utc_offset`).
    pub utc_offset: Option<i16>,
    /// Announce currentUtcOffsetValid (GRANDMASTER_SETTINGS_NP name).
    #[serde(rename = "currentUtcOffsetValid")]
    pub current_utc_offset_valid: Option<bool>,
    /// Announce the PTP timescale (true) or ARB (false).
    #[serde(rename = "ptpTimescale")]
    pub ptp_timescale: Option<bool>,
    #[serde(rename = "timeTraceable")]
    pub time_traceable: Option<bool>,
    #[serde(rename = "frequencyTraceable")]
    pub frequency_traceable: Option<bool>,
    /// ptp4l's `timeSource` (0xA0 internal oscillator).
    #[serde(rename = "timeSource")]
    pub time_source: Option<u8>,
    // Port defaults (see PortOptions).
    #[serde(rename = "logSyncInterval")]
    pub log_sync_interval: Option<i8>,
    #[serde(rename = "logAnnounceInterval")]
    pub log_announce_interval: Option<i8>,
    #[serde(rename = "logMinDelayReqInterval")]
    pub log_min_delay_req_interval: Option<i8>,
    #[serde(rename = "logMinPdelayReqInterval")]
    pub log_min_pdelay_req_interval: Option<i8>,
    #[serde(rename = "announceReceiptTimeout")]
    pub announce_receipt_timeout: Option<u8>,
    pub delay_mechanism: Option<String>,
    pub network_transport: Option<String>,
    #[serde(rename = "masterOnly", alias = "serverOnly")]
    pub master_only: Option<bool>,
    #[serde(rename = "delayAsymmetry")]
    pub delay_asymmetry: Option<i64>,
    pub tx_timestamp_timeout: Option<u64>,
    pub max_frequency: Option<u32>,
    pub rx_filter: Option<String>,
}

impl PtpSection {
    /// The port defaults this section sets (`source_ip` is per clock only: one address cannot
    /// belong to two ports).
    pub fn port_defaults(&self) -> PortOptions {
        PortOptions {
            enabled: None,
            log_sync_interval: self.log_sync_interval,
            log_announce_interval: self.log_announce_interval,
            log_min_delay_req_interval: self.log_min_delay_req_interval,
            log_min_pdelay_req_interval: self.log_min_pdelay_req_interval,
            announce_receipt_timeout: self.announce_receipt_timeout,
            delay_mechanism: self.delay_mechanism.clone(),
            network_transport: self.network_transport.clone(),
            master_only: self.master_only,
            delay_asymmetry: self.delay_asymmetry,
            source_ip: None,
            tx_timestamp_timeout: self.tx_timestamp_timeout,
            max_frequency: self.max_frequency,
            rx_filter: self.rx_filter.clone(),
        }
    }
}

/// What the grandmaster announces about its timescale (see the module docs of `ptp`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeProperties {
    pub ptp_timescale: bool,
    pub utc_offset: i16,
    pub utc_offset_valid: bool,
    pub time_traceable: bool,
    pub frequency_traceable: bool,
    pub time_source: u8,
}

impl Default for TimeProperties {
    /// ptp4l's grandmaster defaults: PTP timescale, currentUtcOffset 37 (not flagged valid),
    /// internal oscillator.
    fn default() -> Self {
        Self {
            ptp_timescale: true,
            utc_offset: 37,
            utc_offset_valid: false,
            time_traceable: false,
            frequency_traceable: false,
            time_source: 0xA0,
        }
    }
}

/// What management SETs may change, and from where.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct MgmtPolicy {
    pub priority1: bool,
    pub priority2: bool,
    /// SETs from the network count as privileged.
    pub network_set: bool,
}

/// `clock_servo`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServoKind {
    /// ptp4l's PI servo with ptpd's step policy (`ptp::servo`).
    Pi,
    /// statime's Kalman filter.
    Kalman,
}

/// The servo settings, validated (ptp4l's names).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServoSettings {
    pub kind: ServoKind,
    /// 0: ptp4l's default scaled by the sync interval.
    pub pi_proportional_const: f64,
    pub pi_integral_const: f64,
    /// s; 0 = never.
    pub first_step_threshold_s: f64,
    /// s; 0 = never (pi only). `None`: the servo's default (pi 20 µs, kalman 1 ms).
    pub step_threshold_s: Option<f64>,
    pub delay_filter_length: usize,
}

impl Default for ServoSettings {
    /// The PI servo, ptp4l's constants and `first_step_threshold`, the servo's own
    /// `step_threshold` (see [`crate::ptp::servo::PiConfig`]).
    fn default() -> Self {
        Self {
            kind: ServoKind::Pi,
            pi_proportional_const: 0.0,
            pi_integral_const: 0.0,
            first_step_threshold_s: 0.00002,
            step_threshold_s: None,
            delay_filter_length: 10,
        }
    }
}

/// Instance-wide settings, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceSettings {
    pub domain_number: u8,
    pub priority1: u8,
    pub priority2: u8,
    pub slave_only: bool,
    /// `None`: EUI-64 of the first PTP clock's MAC, known once its driver answers `Caps`.
    pub clock_identity: Option<[u8; 8]>,
    pub summary_interval: i8,
    pub servo: ServoSettings,
    pub time_properties: TimeProperties,
    pub management: MgmtPolicy,
    /// Seeds the ports' random generators (announce and delay-request jitter) for reproducible
    /// tests; `None` in production (entropy). Not a configuration key.
    pub rng_seed: Option<u64>,
}

impl Default for InstanceSettings {
    fn default() -> Self {
        Self {
            domain_number: 0,
            priority1: 128,
            priority2: 128,
            slave_only: false,
            clock_identity: None,
            summary_interval: 0,
            servo: ServoSettings::default(),
            time_properties: TimeProperties::default(),
            management: MgmtPolicy::default(),
            rng_seed: None,
        }
    }
}

/// One PTP port's settings, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PortSettings {
    /// Index of the clock (and driver link) in `[[clock]]` order.
    pub clock: usize,
    pub name: String,
    pub log_sync_interval: i8,
    pub log_announce_interval: i8,
    pub log_min_delay_req_interval: i8,
    pub log_min_pdelay_req_interval: i8,
    pub announce_receipt_timeout: u8,
    pub delay_mechanism: DelayMechanism,
    pub transport: NetworkTransport,
    pub master_only: bool,
    pub delay_asymmetry_ns: i64,
    pub source_ip: Option<Ipv4Addr>,
    pub tx_timestamp_timeout: Duration,
    pub max_frequency_ppb: u32,
    pub rx_filter: RxFilterMode,
}

impl PortSettings {
    /// ptp4l's defaults (except the transport, see the module docs).
    pub fn new(clock: usize, name: &str) -> Self {
        Self {
            clock,
            name: name.to_string(),
            log_sync_interval: 0,
            log_announce_interval: 1,
            log_min_delay_req_interval: 0,
            log_min_pdelay_req_interval: 0,
            announce_receipt_timeout: 3,
            delay_mechanism: DelayMechanism::E2E,
            transport: NetworkTransport::L2,
            master_only: false,
            delay_asymmetry_ns: 0,
            source_ip: None,
            tx_timestamp_timeout: Duration::from_millis(50),
            max_frequency_ppb: 500_000,
            rx_filter: RxFilterMode::Event,
        }
    }
}

/// Everything the engine needs, validated.
#[derive(Debug, Clone, PartialEq)]
pub struct PtpSettings {
    pub instance: InstanceSettings,
    pub ports: Vec<PortSettings>,
}

fn range(
    section: &str,
    key: &'static str,
    value: i64,
    min: i64,
    max: i64,
) -> Result<(), PtpConfigError> {
    if (min..=max).contains(&value) {
        Ok(())
    } else {
        Err(PtpConfigError::OutOfRange {
            section: section.to_string(),
            key,
            value,
            min,
            max,
        })
    }
}

/// Parses a clock identity: linuxptp's "001122.fffe.334455" or 16 hex digits (with or without
/// ':' / '-' separators between bytes).
pub fn parse_clock_identity(s: &str) -> Result<[u8; 8], PtpConfigError> {
    let bad = || PtpConfigError::BadClockIdentity(s.to_string());
    let digits: String = if s.contains('.') {
        let parts: Vec<&str> = s.split('.').collect();
        if parts.len() != 3 || parts[0].len() != 6 || parts[1].len() != 4 || parts[2].len() != 6 {
            return Err(bad());
        }
        parts.concat()
    } else {
        s.chars().filter(|c| *c != ':' && *c != '-').collect()
    };
    if digits.len() != 16 || !digits.chars().all(|c| c.is_ascii_hexdigit()) {
        return Err(bad());
    }
    let mut id = [0u8; 8];
    for (i, b) in id.iter_mut().enumerate() {
        *b = u8::from_str_radix(&digits[2 * i..2 * i + 2], 16).map_err(|_| bad())?;
    }
    Ok(id)
}

/// linuxptp's display form of a clock identity, "001122.fffe.334455".
pub fn format_clock_identity(id: &[u8; 8]) -> String {
    format!(
        "{:02x}{:02x}{:02x}.{:02x}{:02x}.{:02x}{:02x}{:02x}",
        id[0], id[1], id[2], id[3], id[4], id[5], id[6], id[7]
    )
}

/// The clock identity linuxptp derives from a MAC: EUI-48 → EUI-64 by inserting FF:FE in the
/// middle (IEEE 1588-2008 7.5.2.2.2). statime's `ClockIdentity::from_mac_address` appends two
/// zero bytes instead, which would make `pmc` and ptp4l logs show a different identity for the
/// same NIC than linuxptp does.
pub fn eui64_from_mac(mac: [u8; 6]) -> [u8; 8] {
    [mac[0], mac[1], mac[2], 0xFF, 0xFE, mac[3], mac[4], mac[5]]
}

/// The UDPv4 source address when none is configured: an IPv4 link-local address (RFC 3927,
/// 169.254.1.0–169.254.254.255) made from the MAC's last two bytes. ptpd has no IP stack, so
/// the address only has to be plausible and stable; receivers (ptp4l included) do not use it.
pub fn derive_source_ip(mac: [u8; 6]) -> Ipv4Addr {
    let third = 1 + (mac[4] % 254);
    Ipv4Addr::new(169, 254, third, mac[5])
}

fn parse_delay(section: &str, v: &str) -> Result<DelayMechanism, PtpConfigError> {
    match v {
        "E2E" => Ok(DelayMechanism::E2E),
        "P2P" => Ok(DelayMechanism::P2P),
        _ => Err(PtpConfigError::Unsupported {
            section: section.to_string(),
            key: "delay_mechanism",
            value: v.to_string(),
            supported: "\"E2E\", \"P2P\"",
        }),
    }
}

fn parse_transport(section: &str, v: &str) -> Result<NetworkTransport, PtpConfigError> {
    match v {
        "L2" => Ok(NetworkTransport::L2),
        "UDPv4" => Ok(NetworkTransport::UdpV4),
        _ => Err(PtpConfigError::Unsupported {
            section: section.to_string(),
            key: "network_transport",
            value: v.to_string(),
            supported: "\"L2\", \"UDPv4\"",
        }),
    }
}

fn parse_rx_filter(section: &str, v: &str) -> Result<RxFilterMode, PtpConfigError> {
    match v {
        "event" => Ok(RxFilterMode::Event),
        "per_role" => Ok(RxFilterMode::PerRole),
        _ => Err(PtpConfigError::Unsupported {
            section: section.to_string(),
            key: "rx_filter",
            value: v.to_string(),
            supported: "\"event\", \"per_role\"",
        }),
    }
}

/// Validates one port's options (already merged with the global defaults).
fn resolve_port(clock: usize, name: &str, o: &PortOptions) -> Result<PortSettings, PtpConfigError> {
    let section = format!("[clock.ptp] of {name:?}");
    let s = section.as_str();
    let mut p = PortSettings::new(clock, name);
    if let Some(v) = o.log_sync_interval {
        range(s, "logSyncInterval", v.into(), -7, 4)?;
        p.log_sync_interval = v;
    }
    if let Some(v) = o.log_announce_interval {
        range(s, "logAnnounceInterval", v.into(), -3, 4)?;
        p.log_announce_interval = v;
    }
    if let Some(v) = o.log_min_delay_req_interval {
        range(s, "logMinDelayReqInterval", v.into(), -7, 5)?;
        p.log_min_delay_req_interval = v;
    }
    if let Some(v) = o.log_min_pdelay_req_interval {
        range(s, "logMinPdelayReqInterval", v.into(), -7, 5)?;
        p.log_min_pdelay_req_interval = v;
    }
    if let Some(v) = o.announce_receipt_timeout {
        range(s, "announceReceiptTimeout", v.into(), 2, 255)?;
        p.announce_receipt_timeout = v;
    }
    if let Some(v) = &o.delay_mechanism {
        p.delay_mechanism = parse_delay(s, v)?;
    }
    if let Some(v) = &o.network_transport {
        p.transport = parse_transport(s, v)?;
    }
    p.master_only = o.master_only.unwrap_or(false);
    if let Some(v) = o.delay_asymmetry {
        // One second of asymmetry is already absurd; the bound keeps statime's fixed-point
        // arithmetic far from overflow.
        range(s, "delayAsymmetry", v, -1_000_000_000, 1_000_000_000)?;
        p.delay_asymmetry_ns = v;
    }
    p.source_ip = o.source_ip;
    if let Some(v) = o.tx_timestamp_timeout {
        range(s, "tx_timestamp_timeout", v as i64, 1, 1000)?;
        p.tx_timestamp_timeout = Duration::from_millis(v);
    }
    if let Some(v) = o.max_frequency {
        range(s, "max_frequency", v.into(), 1, 100_000_000)?;
        p.max_frequency_ppb = v;
    }
    if let Some(v) = &o.rx_filter {
        p.rx_filter = parse_rx_filter(s, v)?;
    }
    if p.rx_filter == RxFilterMode::PerRole && p.delay_mechanism == DelayMechanism::P2P {
        return Err(PtpConfigError::PerRoleNeedsE2e {
            section: s.to_string(),
        });
    }
    Ok(p)
}

/// The management SET policy from ptpd.toml's `management_settable` (names of what a SET may
/// change) and `management_network_set`.
pub fn management_policy(
    settable: &[String],
    network_set: bool,
) -> Result<MgmtPolicy, PtpConfigError> {
    let mut m = MgmtPolicy {
        network_set,
        ..MgmtPolicy::default()
    };
    for name in settable {
        match name.as_str() {
            "priority1" => m.priority1 = true,
            "priority2" => m.priority2 = true,
            other => {
                return Err(PtpConfigError::Unsupported {
                    section: "ptpd.toml".into(),
                    key: "management_settable",
                    value: other.into(),
                    supported: "\"priority1\", \"priority2\"",
                });
            }
        }
    }
    Ok(m)
}

/// The servo keys of `[ptp]`.
fn resolve_servo(g: &PtpSection) -> Result<ServoSettings, PtpConfigError> {
    let mut v = ServoSettings::default();
    if let Some(k) = &g.clock_servo {
        v.kind = match k.as_str() {
            "pi" => ServoKind::Pi,
            "kalman" => ServoKind::Kalman,
            other => {
                return Err(PtpConfigError::Unsupported {
                    section: "[ptp]".into(),
                    key: "clock_servo",
                    value: other.into(),
                    supported: "\"pi\", \"kalman\"",
                });
            }
        };
    }
    let num = |key: &'static str, value: Option<f64>, max: f64, dflt: f64| match value {
        None => Ok(dflt),
        Some(x) if x.is_finite() && (0.0..=max).contains(&x) => Ok(x),
        Some(x) => Err(PtpConfigError::BadServoValue {
            key,
            value: x,
            min: 0.0,
            max,
        }),
    };
    v.pi_proportional_const = num("pi_proportional_const", g.pi_proportional_const, 100.0, 0.0)?;
    v.pi_integral_const = num("pi_integral_const", g.pi_integral_const, 100.0, 0.0)?;
    v.first_step_threshold_s = num(
        "first_step_threshold",
        g.first_step_threshold,
        1000.0,
        v.first_step_threshold_s,
    )?;
    if let Some(t) = g.step_threshold {
        let kalman = v.kind == ServoKind::Kalman;
        if !(t.is_finite() && (0.0..=1000.0).contains(&t)) || (kalman && t == 0.0) {
            return Err(PtpConfigError::BadStepThreshold(t));
        }
        v.step_threshold_s = Some(t);
    }
    if let Some(n) = g.delay_filter_length {
        range("[ptp]", "delay_filter_length", n.into(), 1, 1000)?;
        v.delay_filter_length = n.into();
    }
    Ok(v)
}

/// Validates `[ptp]` and the clocks' overrides. `clocks` = (name, per-clock options) in
/// `[[clock]]` order. `Ok(None)`: PTP disabled.
pub fn resolve(
    ptp: Option<&PtpSection>,
    clocks: &[(String, Option<PortOptions>)],
) -> Result<Option<PtpSettings>, PtpConfigError> {
    let Some(g) = ptp else {
        return Ok(None);
    };
    if g.enabled == Some(false) {
        return Ok(None);
    }
    let s = "[ptp]";
    let mut inst = InstanceSettings::default();
    if let Some(v) = g.domain_number {
        range(s, "domainNumber", v.into(), 0, 127)?;
        inst.domain_number = v;
    }
    inst.priority1 = g.priority1.unwrap_or(128);
    inst.priority2 = g.priority2.unwrap_or(128);
    inst.slave_only = g.slave_only.unwrap_or(false);
    if let Some(id) = &g.clock_identity {
        inst.clock_identity = Some(parse_clock_identity(id)?);
    }
    if let Some(v) = g.summary_interval {
        range(s, "summary_interval", v.into(), -4, 12)?;
        inst.summary_interval = v;
    }
    inst.servo = resolve_servo(g)?;
    let tp = &mut inst.time_properties;
    if let Some(v) = g.utc_offset {
        range(s, "utc_offset", v.into(), 0, 1000)?;
        tp.utc_offset = v;
    }
    tp.utc_offset_valid = g.current_utc_offset_valid.unwrap_or(tp.utc_offset_valid);
    tp.ptp_timescale = g.ptp_timescale.unwrap_or(tp.ptp_timescale);
    tp.time_traceable = g.time_traceable.unwrap_or(tp.time_traceable);
    tp.frequency_traceable = g.frequency_traceable.unwrap_or(tp.frequency_traceable);
    tp.time_source = g.time_source.unwrap_or(tp.time_source);

    let defaults = g.port_defaults();
    // Validate the defaults even when every clock overrides them, so a typo never hides.
    resolve_port(usize::MAX, "[ptp]", &defaults)?;
    let mut ports = Vec::new();
    for (i, (name, own)) in clocks.iter().enumerate() {
        let merged = own.clone().unwrap_or_default().merge(&defaults);
        let port = resolve_port(i, name, &merged)?;
        if merged.enabled != Some(false) {
            if port.master_only && inst.slave_only {
                return Err(PtpConfigError::Unsupported {
                    section: format!("[clock.ptp] of {name:?}"),
                    key: "masterOnly",
                    value: "true".into(),
                    supported: "false when slaveOnly = true",
                });
            }
            ports.push(port);
        }
    }
    if ports.is_empty() {
        return Err(PtpConfigError::NoPtpPorts);
    }
    Ok(Some(PtpSettings {
        instance: inst,
        ports,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn identity_forms() {
        let id = [0x00, 0x00, 0x5e, 0xff, 0xfe, 0x00, 0x53, 0x01];
        assert_eq!(parse_clock_identity("00005e.fffe.005301").unwrap(), id);
        assert_eq!(parse_clock_identity("00005efffe005301").unwrap(), id);
        assert_eq!(parse_clock_identity("00:00:5E:FF:FE:00:53:01").unwrap(), id);
        assert_eq!(format_clock_identity(&id), "00005e.fffe.005301");
        assert_eq!(eui64_from_mac([0, 0, 0x5e, 0, 0x53, 1]), id);
        for bad in [
            "",
            "00005e.fffe.00530",
            "00005e.fffe.0053zz",
            "0011",
            "x".repeat(16).as_str(),
        ] {
            assert!(matches!(
                parse_clock_identity(bad),
                Err(PtpConfigError::BadClockIdentity(_))
            ));
        }
    }

    #[test]
    fn derived_source_ip_is_link_local() {
        let ip = derive_source_ip([2, 0, 0, 0, 0xFF, 7]);
        assert!(ip.is_link_local());
        assert_eq!(ip, Ipv4Addr::new(169, 254, 2, 7));
        assert_eq!(derive_source_ip([0; 6]), Ipv4Addr::new(169, 254, 1, 0));
    }

    #[test]
    fn management_policy_names_what_is_settable() {
        let names = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(management_policy(&[], false), Ok(MgmtPolicy::default()));
        assert_eq!(
            management_policy(&names(&["priority2"]), true),
            Ok(MgmtPolicy {
                priority1: false,
                priority2: true,
                network_set: true,
            })
        );
        assert!(matches!(
            management_policy(&names(&["priority1", "domainNumber"]), false),
            Err(PtpConfigError::Unsupported {
                key: "management_settable",
                ..
            })
        ));
    }

    #[test]
    fn rx_filter_is_event_by_default_per_role_on_request_and_never_with_p2p() {
        let port = |o: PortOptions| resolve_port(0, "a", &o);
        let opts = |rx: Option<&str>, delay: Option<&str>| PortOptions {
            rx_filter: rx.map(str::to_string),
            delay_mechanism: delay.map(str::to_string),
            ..PortOptions::default()
        };
        assert_eq!(
            port(opts(None, None)).unwrap().rx_filter,
            RxFilterMode::Event
        );
        assert_eq!(
            port(opts(Some("per_role"), Some("E2E"))).unwrap().rx_filter,
            RxFilterMode::PerRole
        );
        // A global default reaches every clock that does not override it.
        let merged = PortOptions::default().merge(&opts(Some("per_role"), None));
        assert_eq!(port(merged).unwrap().rx_filter, RxFilterMode::PerRole);
        assert!(matches!(
            port(opts(Some("per_role"), Some("P2P"))),
            Err(PtpConfigError::PerRoleNeedsE2e { .. })
        ));
        assert!(matches!(
            port(opts(Some("sync"), None)),
            Err(PtpConfigError::Unsupported {
                key: "rx_filter",
                ..
            })
        ));
    }
}
