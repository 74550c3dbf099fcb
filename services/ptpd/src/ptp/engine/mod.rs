//! The PTP engine: one statime instance ([`statime::PtpInstance`]) with one port per PTP
//! clock, driven by driver events and a timer table (shared/reference/ptp-and-benchmarks.md
//! §1.6).
//!
//! [`Core`] is the whole protocol loop without threads or clocks of its own: the caller passes
//! the current monotonic time into every call and asks [`Core::next_deadline`] when to come
//! back. Driver I/O goes through [`DriverIo`] (requests with bounded timeouts, fire-and-forget
//! frame sends), so the same core runs under the production thread ([`Engine`]) and under the
//! deterministic simulated-time tests. The only work the core hands out is configuring a
//! driver's timestamping after (re)connect ([`Core::take_configure_jobs`]), which the thread
//! runs on a helper thread so a slow driver never stalls the protocol.
//!
//! `Core`'s methods live beside the concern they serve:
//! - `port_io`: driver events in, frames out, parked TX timestamp contexts;
//! - `timers`: the timer table and the next deadline;
//! - `actions`: statime's instance, its ports' actions and the BMCA;
//! - `configure`: driver timestamping setup after (re)connect;
//! - `status`: derived port states, log lines and the published snapshots;
//! - `mgmt`: the management data sets (a read-only view of the above);
//! - `manage`: management requests arriving on a port, and SETs from any transport;
//! - `thread`: the production thread ([`Engine`]).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ptp_ipc::PortState;
use rand::rngs::StdRng;
use statime::PtpInstance;
use statime::config::AcceptAnyMaster;
use statime::port::{InBmca, Port, Running};

use super::clock::{self, DriverIo, PhcClock, SharedClockState, TracedFilter};
use super::config::{InstanceSettings, PortSettings, PtpSettings};
use super::net::FrameBuilder;
use super::status::PtpStatusBoard;
use port_io::Parked;

/// Calls a handler of port `$i` and carries out what it asks for. (A macro rather than a
/// method taking a closure: the returned iterator may borrow both the port and a received
/// frame, which a closure signature cannot express without requiring the frame to be
/// `'static`.)
macro_rules! dispatch {
    ($core:ident, $i:expr, $now:expr, $cause:expr, |$p:ident| $call:expr) => {{
        let i: usize = $i;
        if let Some($p) = $core.ports[i].port.as_mut() {
            let acts = $crate::ptp::engine::actions::own($call);
            $core.execute(i, acts, $now);
            $core.note_state(i, $cause);
        }
    }};
}

mod actions;
mod configure;
mod manage;
mod mgmt;
mod port_io;
mod seed;
mod status;
mod thread;
mod timers;

pub use configure::{CONFIGURE_TIMEOUT, ConfigureError, ConfigureJob, Configured, role_filter};
pub use thread::{Engine, MgmtHandle};

type Instance = PtpInstance<TracedFilter>;
type RunningPort = Port<'static, Running, AcceptAnyMaster, StdRng, PhcClock, TracedFilter>;
type BmcaPort = Port<'static, InBmca, AcceptAnyMaster, StdRng, PhcClock, TracedFilter>;

const NS_PER_S: u64 = 1_000_000_000;

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
    mgmt_answered,
    mgmt_malformed,
    mgmt_ignored,
);

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

fn dur_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
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
    /// The RX filter the driver applied at the last configuration.
    rx_filter: Option<ptp_ipc::RxFilter>,
    /// The per-message filter the last configuration asked for first (`per_role`).
    role_filter_asked: Option<ptp_ipc::RxFilter>,
    generation: Option<u64>,
    mac: Option<[u8; 6]>,
    builder: Option<FrameBuilder>,
    link_up: bool,
    /// The state last logged / published.
    shown: PortState,
    foreign: HashSet<([u8; 8], u16)>,
    /// Whether "cannot send" has been logged since the port last became ready.
    warned_not_ready: bool,
    /// Hardware RX time of the last Sync from our parent (TIME_STATUS_NP ingress_time).
    last_sync_rx_ns: Option<u64>,
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
                    rx_filter: None,
                    role_filter_asked: None,
                    generation: None,
                    mac: None,
                    builder: None,
                    link_up: true,
                    shown: PortState::Initializing,
                    foreign: HashSet::new(),
                    warned_not_ready: false,
                    last_sync_rx_ns: None,
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
}
