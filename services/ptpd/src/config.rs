//! ptpd's TOML configuration. Keys follow ptp4l's names where one exists.
//!
//! ```toml
//! socket = "/run/redox-ptp/ptp.sock"   # the clock scheme (Linux hosts)
//! privileged_uids = [1000]             # may set/adjust besides root
//! request_timeout_ms = 1000
//! client_requests_per_s = 20000        # a clock-scheme client's flood limit (burst: a tenth)
//! management_socket = "/var/run/ptp4l" # IEEE 1588 management for pmc -u (needs [ptp])
//! management_settable = ["priority1", "priority2"]  # what a privileged SET may change
//! management_network_set = false       # SETs arriving on the PTP ports count as privileged
//! rt = true                            # the time path (driver links, PTP engine) SCHED_FIFO 50
//! rt_priority = 50                     # ... at this priority (1..=98; implies rt)
//! cpu = 1                              # ... pinned to this CPU
//! busy_poll_us = 0                     # poll a driver ring this long after each message
//!                                      # before sleeping (0..=1000; 0: sleep at once)
//!
//! [[clock]]
//! name = "igc0"
//! channel = "/run/redox-ptp/igc0.sock" # the driver channel igcd serves
//! channel_mode = "ring"                # "ring" (default): the driver's messages over a
//!                                      # shared-memory ring it offers; "socket": all over the
//!                                      # socket (a driver from before rings)
//! ```
//!
//! An optional `[ptp]` table (and `[clock.ptp]` per-clock overrides) makes ptpd run PTP on the
//! clocks; its keys are described in [`crate::ptp::config`]. Without it ptpd serves the clock
//! scheme only.

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

use crate::ptp::config::{PortOptions, PtpConfigError, PtpSection, PtpSettings};

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("reading {path}: {err}")]
    Read { path: PathBuf, err: std::io::Error },
    #[error("{path}: {err}")]
    Parse { path: PathBuf, err: toml::de::Error },
    #[error("{0}")]
    Invalid(String),
    #[error("{0}")]
    Ptp(#[from] PtpConfigError),
    #[error("{0}")]
    Ts2phc(#[from] crate::timesource::Ts2phcError),
}

/// One driver whose PHC ptpd serves as a clock.
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct ClockConfig {
    pub name: String,
    /// The driver channel (a SOCK_SEQPACKET path on Linux hosts).
    pub channel: PathBuf,
    /// How the channel's messages travel once connected.
    #[serde(default)]
    pub channel_mode: ChannelMode,
    /// Per-clock PTP port options (`[clock.ptp]`).
    #[serde(default)]
    pub ptp: Option<PortOptions>,
    /// The clock follows a pulse per second on a pin (`[clock.ts2phc]`, [`crate::timesource`]).
    #[serde(default)]
    pub ts2phc: Option<crate::timesource::Ts2phcOptions>,
}

/// `channel_mode`: the driver channel's transport after the hello (issue 16).
#[derive(Debug, Clone, Copy, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum ChannelMode {
    /// A shared-memory ring pair the driver offers over the socket; the socket then only
    /// signals liveness.
    #[default]
    Ring,
    /// Every message over the socket.
    Socket,
}

#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Where the clock scheme is served (Linux hosts).
    pub socket: PathBuf,
    /// Uids besides root that may set, step and steer clocks.
    #[serde(default)]
    pub privileged_uids: Vec<u32>,
    /// How long a request to a driver may take before the caller gets Timeout.
    #[serde(default = "default_timeout_ms")]
    pub request_timeout_ms: u64,
    /// The flood limit of one clock-scheme connection: requests per second it is served once
    /// it has used its burst (a tenth of this); beyond it, requests wait their turn.
    #[serde(default = "default_client_rate")]
    pub client_requests_per_s: u32,
    #[serde(default, rename = "clock")]
    pub clocks: Vec<ClockConfig>,
    /// PTP (`[ptp]`); absent: the clock scheme only.
    #[serde(default)]
    pub ptp: Option<PtpSection>,
    /// IEEE 1588 management over a Unix datagram socket (what ptp4l offers at
    /// /var/run/ptp4l for `pmc -u`); absent: none. Needs `[ptp]`.
    #[serde(default)]
    pub management_socket: Option<PathBuf>,
    /// What a management SET may change (`"priority1"`, `"priority2"`); default nothing. Only
    /// privileged requesters may SET: on the management socket (and Redox's
    /// `/scheme/ptp/mgmt`) root and `privileged_uids`.
    #[serde(default)]
    pub management_settable: Vec<String>,
    /// Honour SETs arriving on the PTP ports (`pmc -2` / `-4`, which carry no credentials);
    /// default no.
    #[serde(default)]
    pub management_network_set: bool,
    /// Real-time service for the time path: the driver-link threads (TX/RX stamps arrive
    /// there) and the PTP engine run SCHED_FIFO ([`ptp_ipc::rt`]); refused: logged.
    #[serde(default)]
    pub rt: bool,
    #[serde(default)]
    pub rt_priority: Option<i32>,
    /// Pin the time-path threads to this CPU.
    #[serde(default)]
    pub cpu: Option<usize>,
    /// The busy-poll window of ptpd's end of each driver ring, µs (0..=1000).
    #[serde(default)]
    pub busy_poll_us: u64,
}

fn default_timeout_ms() -> u64 {
    1000
}

fn default_client_rate() -> u32 {
    crate::scheme::CLIENT_RATE_PER_S
}

impl Config {
    pub fn from_str(text: &str, path: &Path) -> Result<Self, ConfigError> {
        let c: Config = toml::from_str(text).map_err(|err| ConfigError::Parse {
            path: path.to_owned(),
            err,
        })?;
        c.validate()?;
        Ok(c)
    }

    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|err| ConfigError::Read {
            path: path.to_owned(),
            err,
        })?;
        Self::from_str(&text, path)
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.clocks.is_empty() {
            return Err(ConfigError::Invalid("no [[clock]] configured".into()));
        }
        if !(1..=60_000).contains(&self.request_timeout_ms) {
            return Err(ConfigError::Invalid(
                "request_timeout_ms must be within 1..=60000".into(),
            ));
        }
        if self.client_requests_per_s == 0 {
            return Err(ConfigError::Invalid(
                "client_requests_per_s must be at least 1".into(),
            ));
        }
        for (i, c) in self.clocks.iter().enumerate() {
            if self.clocks[..i].iter().any(|o| o.name == c.name) {
                return Err(ConfigError::Invalid(format!(
                    "duplicate clock name {:?}",
                    c.name
                )));
            }
        }
        if self.management_socket.is_some() && self.ptp.is_none() {
            return Err(ConfigError::Invalid(
                "management_socket needs a [ptp] section".into(),
            ));
        }
        if self.busy_poll_us > 1000 {
            return Err(ConfigError::Invalid(
                "busy_poll_us must be within 0..=1000".into(),
            ));
        }
        if let Some(p) = self.rt_priority {
            ptp_ipc::rt::parse_priority(&p.to_string()).map_err(ConfigError::Invalid)?;
        }
        self.ptp_settings()?;
        self.time_source()?;
        Ok(())
    }

    /// The clock with a `[clock.ts2phc]` table and its settings; at most one clock may have
    /// one (the PTP instance announces one clock quality).
    pub fn time_source(
        &self,
    ) -> Result<Option<(usize, crate::timesource::Ts2phcSettings)>, ConfigError> {
        let mut found = None;
        for (i, c) in self.clocks.iter().enumerate() {
            let Some(o) = &c.ts2phc else { continue };
            if found.is_some() {
                return Err(ConfigError::Invalid(
                    "only one clock may have a [clock.ts2phc] table".into(),
                ));
            }
            found = Some((i, o.resolve()?));
        }
        Ok(found)
    }

    pub fn busy_poll(&self) -> Duration {
        Duration::from_micros(self.busy_poll_us)
    }

    /// The real-time service `rt`, `rt_priority` and `cpu` ask for.
    pub fn rt(&self) -> ptp_ipc::rt::RtConfig {
        let priority = match (self.rt, self.rt_priority) {
            (_, Some(p)) => Some(p),
            (true, None) => Some(ptp_ipc::rt::DEFAULT_PRIORITY),
            (false, None) => None,
        };
        ptp_ipc::rt::RtConfig {
            priority,
            cpu: self.cpu,
        }
    }

    /// The validated PTP settings; `None` when the configuration runs no PTP.
    pub fn ptp_settings(&self) -> Result<Option<PtpSettings>, ConfigError> {
        let clocks: Vec<(String, Option<PortOptions>)> = self
            .clocks
            .iter()
            .map(|c| (c.name.clone(), c.ptp.clone()))
            .collect();
        let mut settings = crate::ptp::config::resolve(self.ptp.as_ref(), &clocks)?;
        if let Some(s) = &mut settings {
            s.instance.management = crate::ptp::config::management_policy(
                &self.management_settable,
                self.management_network_set,
            )?;
            // A clock that follows a time source is a grandmaster: its port never takes a
            // master of its own (statime's servo would fight the source's).
            for p in &mut s.ports {
                if self.clocks.get(p.clock).is_some_and(|c| c.ts2phc.is_some()) {
                    p.master_only = true;
                }
            }
        }
        Ok(settings)
    }

    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.request_timeout_ms)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_a_full_config() {
        let c = Config::from_str(
            "socket = \"/tmp/p.sock\"\nprivileged_uids = [7]\n[[clock]]\nname = \"a\"\nchannel = \"/tmp/a.sock\"\n",
            Path::new("t.toml"),
        )
        .unwrap();
        assert_eq!(c.privileged_uids, vec![7]);
        assert_eq!(c.clocks[0].channel, PathBuf::from("/tmp/a.sock"));
        assert_eq!(c.clocks[0].channel_mode, ChannelMode::Ring, "the default");
        assert_eq!(c.request_timeout(), Duration::from_secs(1));
        assert_eq!(c.management_socket, None);
    }

    #[test]
    fn real_time_service_keys() {
        let base = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n";
        let rt = |head: &str| Config::from_str(&format!("{head}{base}"), Path::new("t.toml"));
        use ptp_ipc::rt::RtConfig;
        assert_eq!(rt("").unwrap().rt(), RtConfig::default(), "off by default");
        assert_eq!(rt("rt = true\n").unwrap().rt(), RtConfig::fifo(50));
        let c = rt("rt_priority = 60\ncpu = 1\n").unwrap();
        assert_eq!(
            c.rt(),
            RtConfig {
                cpu: Some(1),
                ..RtConfig::fifo(60)
            }
        );
        let e = rt("rt_priority = 99\n").unwrap_err().to_string();
        assert!(e.contains("1..=98"), "{e}");
        assert_eq!(
            rt("busy_poll_us = 50\n").unwrap().busy_poll(),
            Duration::from_micros(50)
        );
        assert!(rt("busy_poll_us = 1001\n").is_err());
    }

    #[test]
    fn channel_mode_per_clock() {
        let text = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n\
                    channel_mode = \"socket\"\n[[clock]]\nname = \"b\"\nchannel = \"/b\"\n\
                    channel_mode = \"ring\"\n";
        let c = Config::from_str(text, Path::new("t.toml")).unwrap();
        let modes: Vec<ChannelMode> = c.clocks.iter().map(|c| c.channel_mode).collect();
        assert_eq!(modes, [ChannelMode::Socket, ChannelMode::Ring]);
        let bad = text.replace("\"ring\"", "\"shm\"");
        assert!(Config::from_str(&bad, Path::new("t.toml")).is_err());
    }

    #[test]
    fn management_socket_needs_ptp() {
        let base = "socket = \"/tmp/p.sock\"\nmanagement_socket = \"/tmp/m\"\n\
                    [[clock]]\nname = \"a\"\nchannel = \"/tmp/a.sock\"\n";
        let e = Config::from_str(base, Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("management_socket"), "{e}");
        let c = Config::from_str(&format!("{base}[ptp]\n"), Path::new("t.toml")).unwrap();
        assert_eq!(c.management_socket, Some(PathBuf::from("/tmp/m")));
        let m = c.ptp_settings().unwrap().unwrap().instance.management;
        assert_eq!(
            m,
            crate::ptp::config::MgmtPolicy::default(),
            "nothing settable"
        );
        let set = "management_settable = [\"priority1\"]\nmanagement_network_set = true\n";
        let c = Config::from_str(&format!("{set}{base}[ptp]\n"), Path::new("t.toml")).unwrap();
        let m = c.ptp_settings().unwrap().unwrap().instance.management;
        assert!(m.priority1 && !m.priority2 && m.network_set, "{m:?}");
        let bad = "management_settable = [\"clockClass\"]\n";
        let e = Config::from_str(&format!("{bad}{base}[ptp]\n"), Path::new("t.toml")).unwrap_err();
        assert!(e.to_string().contains("clockClass"), "{e}");
    }

    #[test]
    fn rejects_bad_configs() {
        let p = Path::new("t.toml");
        assert!(matches!(
            Config::from_str("socket = \"/x\"\n", p),
            Err(ConfigError::Invalid(_))
        ));
        assert!(matches!(
            Config::from_str("socket = \"/x\"\nbogus = 1\n", p),
            Err(ConfigError::Parse { .. })
        ));
        let dup = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n[[clock]]\nname = \"a\"\nchannel = \"/b\"\n";
        assert!(matches!(
            Config::from_str(dup, p),
            Err(ConfigError::Invalid(_))
        ));
    }

    #[test]
    fn client_flood_limit_defaults_and_bounds() {
        let p = Path::new("t.toml");
        let base = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n";
        let c = Config::from_str(base, p).unwrap();
        assert_eq!(c.client_requests_per_s, crate::scheme::CLIENT_RATE_PER_S);
        let c = Config::from_str(&format!("client_requests_per_s = 50\n{base}"), p).unwrap();
        assert_eq!(c.client_requests_per_s, 50);
        let zero = format!("client_requests_per_s = 0\n{base}");
        assert!(matches!(
            Config::from_str(&zero, p),
            Err(ConfigError::Invalid(_))
        ));
    }

    const BASE: &str = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n[[clock]]\nname = \"b\"\nchannel = \"/b\"\n";

    fn with(extra: &str) -> Result<Config, ConfigError> {
        Config::from_str(&format!("{BASE}{extra}"), Path::new("t.toml"))
    }

    #[test]
    fn no_ptp_section_runs_no_ptp() {
        assert_eq!(with("").unwrap().ptp_settings().unwrap(), None);
        assert_eq!(
            with("[ptp]\nenabled = false\n")
                .unwrap()
                .ptp_settings()
                .unwrap(),
            None
        );
    }

    #[test]
    fn parses_ptp4l_names_and_per_clock_overrides() {
        use crate::ptp::config::{DelayMechanism, NetworkTransport};
        // [ptp] must come before the [[clock]] tables in TOML, so build the text by hand.
        let text = "socket = \"/x\"\n\
            [ptp]\ndomainNumber = 3\npriority1 = 10\npriority2 = 20\nclientOnly = false\n\
            clockIdentity = \"00005e.fffe.005301\"\nlogSyncInterval = -3\n\
            logAnnounceInterval = 0\nlogMinDelayReqInterval = -2\nlogMinPdelayReqInterval = -1\n\
            announceReceiptTimeout = 4\ndelay_mechanism = \"P2P\"\nnetwork_transport = \"UDPv4\"\n\
            summary_interval = 2\ntx_timestamp_timeout = 20\nmax_frequency = 100000\n\
            step_threshold = 0.00002\nfirst_step_threshold = 0.5\nclock_servo = \"pi\"\n\
            pi_proportional_const = 0.5\npi_integral_const = 0.05\ndelay_filter_length = 5\n\
            utc_offset = 37\ncurrentUtcOffsetValid = true\n\
            [[clock]]\nname = \"a\"\nchannel = \"/a\"\n\
            [clock.ptp]\nnetwork_transport = \"L2\"\nsource_ip = \"192.0.2.1\"\nmasterOnly = true\n\
            [[clock]]\nname = \"b\"\nchannel = \"/b\"\n\
            [[clock]]\nname = \"c\"\nchannel = \"/c\"\n[clock.ptp]\nenabled = false\n";
        let c = Config::from_str(text, Path::new("t.toml")).unwrap();
        let s = c.ptp_settings().unwrap().unwrap();
        assert_eq!(s.instance.domain_number, 3);
        assert_eq!((s.instance.priority1, s.instance.priority2), (10, 20));
        assert_eq!(
            s.instance.clock_identity,
            Some([0, 0, 0x5e, 0xff, 0xfe, 0, 0x53, 1])
        );
        assert_eq!(s.instance.summary_interval, 2);
        let servo = s.instance.servo;
        assert_eq!(servo.kind, crate::ptp::config::ServoKind::Pi);
        assert_eq!(servo.step_threshold_s, Some(0.00002));
        assert_eq!(servo.first_step_threshold_s, 0.5);
        assert_eq!(
            (servo.pi_proportional_const, servo.pi_integral_const),
            (0.5, 0.05)
        );
        assert_eq!(servo.delay_filter_length, 5);
        assert!(s.instance.time_properties.utc_offset_valid);
        assert_eq!(s.ports.len(), 2, "clock c runs no PTP");
        let (a, b) = (&s.ports[0], &s.ports[1]);
        assert_eq!((a.clock, b.clock), (0, 1));
        assert_eq!(a.transport, NetworkTransport::L2);
        assert_eq!(b.transport, NetworkTransport::UdpV4);
        assert!(a.master_only && !b.master_only);
        assert_eq!(a.source_ip, Some("192.0.2.1".parse().unwrap()));
        for p in [a, b] {
            assert_eq!(p.delay_mechanism, DelayMechanism::P2P);
            assert_eq!(p.log_sync_interval, -3);
            assert_eq!(p.log_announce_interval, 0);
            assert_eq!(p.log_min_delay_req_interval, -2);
            assert_eq!(p.log_min_pdelay_req_interval, -1);
            assert_eq!(p.announce_receipt_timeout, 4);
            assert_eq!(p.tx_timestamp_timeout, Duration::from_millis(20));
            assert_eq!(p.max_frequency_ppb, 100_000);
        }
    }

    #[test]
    fn ptp4l_defaults() {
        let s = with("[ptp]\n").unwrap().ptp_settings().unwrap().unwrap();
        let p = &s.ports[0];
        assert_eq!(
            (
                p.log_sync_interval,
                p.log_announce_interval,
                p.announce_receipt_timeout
            ),
            (0, 1, 3)
        );
        assert_eq!((s.instance.priority1, s.instance.domain_number), (128, 0));
        assert_eq!(s.instance.clock_identity, None);
        assert_eq!(s.instance.time_properties.utc_offset, 37);
    }

    #[test]
    fn rejects_bad_ptp_values_with_typed_errors() {
        use crate::ptp::config::PtpConfigError as E;
        let bad = |t: &str| match with(t) {
            Err(ConfigError::Ptp(e)) => e,
            other => panic!("{t}: {other:?}"),
        };
        assert!(matches!(
            bad("[ptp]\ndomainNumber = 200\n"),
            E::OutOfRange {
                key: "domainNumber",
                ..
            }
        ));
        assert!(matches!(
            bad("[ptp]\nlogSyncInterval = 9\n"),
            E::OutOfRange {
                key: "logSyncInterval",
                ..
            }
        ));
        assert!(matches!(
            bad("[ptp]\nannounceReceiptTimeout = 1\n"),
            E::OutOfRange { .. }
        ));
        assert!(matches!(
            bad("[ptp]\ndelay_mechanism = \"Auto\"\n"),
            E::Unsupported {
                key: "delay_mechanism",
                ..
            }
        ));
        assert!(matches!(
            bad("[ptp]\nnetwork_transport = \"UDPv6\"\n"),
            E::Unsupported {
                key: "network_transport",
                ..
            }
        ));
        assert!(matches!(
            bad("[ptp]\nclockIdentity = \"nope\"\n"),
            E::BadClockIdentity(_)
        ));
        assert!(matches!(
            bad("[ptp]\nclock_servo = \"kalman\"\nstep_threshold = 0.0\n"),
            E::BadStepThreshold(_)
        ));
        assert!(matches!(
            bad("[ptp]\nstep_threshold = -1.0\n"),
            E::BadStepThreshold(_)
        ));
        assert!(matches!(
            bad("[ptp]\nclock_servo = \"linreg\"\n"),
            E::Unsupported {
                key: "clock_servo",
                ..
            }
        ));
        assert!(matches!(
            bad("[ptp]\npi_integral_const = nan\n"),
            E::BadServoValue {
                key: "pi_integral_const",
                ..
            }
        ));
        assert!(matches!(
            bad("[ptp]\ndelay_filter_length = 0\n"),
            E::OutOfRange { .. }
        ));
        assert!(matches!(
            bad("[ptp]\ntx_timestamp_timeout = 0\n"),
            E::OutOfRange { .. }
        ));
        // Unknown keys, and instance-wide keys in a per-clock table, are parse errors.
        assert!(matches!(
            with("[ptp]\nbogus = 1\n"),
            Err(ConfigError::Parse { .. })
        ));
        let per_clock = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n[clock.ptp]\npriority1 = 3\n";
        assert!(matches!(
            Config::from_str(per_clock, Path::new("t.toml")),
            Err(ConfigError::Parse { .. })
        ));
        // Every clock disabled.
        let none = "socket = \"/x\"\n[ptp]\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n[clock.ptp]\nenabled = false\n";
        assert!(matches!(
            Config::from_str(none, Path::new("t.toml")),
            Err(ConfigError::Ptp(E::NoPtpPorts))
        ));
    }
}
