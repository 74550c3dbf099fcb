//! How ptpd's parts are joined: one driver link per configured clock, the clock scheme over
//! them and, with a `[ptp]` table, the PTP engine borrowing the scheme's links. The engine
//! ([`crate::ptp`]) and the scheme ([`crate::scheme`]) do not know about each other beyond the
//! status board the engine writes and the scheme reads; only this module sees both.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_channel::{Receiver, Sender, bounded};
use ptp_ipc::rt::RtConfig;
use ptp_ipc::transport::DriverTransport;
use ptp_ipc::{ClockError, DriverEvent, DriverReply, DriverRequest};

use crate::config::{ClockConfig, Config};
use crate::driver_link::{Connector, DriverLink};
use crate::ptp::{DriverIo, Engine, PtpSettings, PtpStatusBoard};
use crate::scheme::ClockScheme;

/// Driver events queued per link before the link thread starts dropping (and logging) them.
pub const EVENT_QUEUE: usize = 4096;

/// The time path's settings (config `rt`, `rt_priority`, `cpu`, `busy_poll_us`): set once by
/// [`start`], read by each thread and connection as it starts.
#[derive(Debug, Clone, Copy, Default)]
struct TimePath {
    rt: RtConfig,
    busy_poll: Duration,
}

static TIME_PATH: OnceLock<TimePath> = OnceLock::new();

/// What a time-path thread applies to itself ([`ptp_ipc::rt::apply`]); off until [`start`].
pub fn time_path_rt() -> RtConfig {
    TIME_PATH.get().copied().unwrap_or_default().rt
}

/// The busy-poll window of ptpd's end of each driver ring ([`ptp_ipc::ring::busy_poll_deadline`]).
pub fn ring_busy_poll() -> Duration {
    TIME_PATH.get().copied().unwrap_or_default().busy_poll
}

/// Gives a fresh driver connection ptpd's end of the ring its busy-poll window.
pub fn tune(t: DriverTransport) -> DriverTransport {
    if let Some(r) = t.ring() {
        r.set_busy_poll(ring_busy_poll());
    }
    t
}

/// Starts what every platform serves: one driver link per configured clock, each reaching its
/// driver through `connector(clock)`, the clock scheme over them and, when the configuration
/// has a `[ptp]` table, the PTP engine beside it. The engine runs while the returned handle
/// lives: keep it for the life of the process.
pub fn start<C: Connector>(
    config: &Config,
    connector: impl Fn(&ClockConfig) -> C,
) -> Result<(Arc<ClockScheme<C>>, Option<Engine>), String> {
    let ptp = config.ptp_settings().map_err(|e| e.to_string())?;
    // Before the threads start; a second start (tests) keeps the first process-wide setting.
    let _ = TIME_PATH.set(TimePath {
        rt: config.rt(),
        busy_poll: config.busy_poll(),
    });
    let (event_txs, event_rxs) = event_channels(ptp.as_ref(), config.clocks.len());
    let links = config
        .clocks
        .iter()
        .zip(event_txs)
        .map(|(c, events)| DriverLink::start(&c.name, connector(c), events))
        .collect();
    let board = ptp
        .as_ref()
        .map(|_| PtpStatusBoard::new(config.clocks.len()));
    let time_source = config.time_source().map_err(|e| e.to_string())?;
    let source = crate::timesource::SourceBoard::default();
    if let (Some(b), Some(_)) = (&board, &time_source) {
        b.set_source(source.clone());
    }
    let scheme = Arc::new(
        ClockScheme::new(
            links,
            config.privileged_uids.clone(),
            config.request_timeout(),
        )
        .with_ptp_status(board.clone())
        .with_source(
            time_source
                .as_ref()
                .map(|(c, _)| (*c as u32, source.clone())),
        ),
    );
    if let Some((clock, s)) = time_source {
        crate::timesource::spawn(&scheme, clock, s, source)
            .map_err(|e| format!("starting the time source: {e}"))?;
    }
    let engine = match ptp {
        Some(settings) => Some(start_engine(settings, &scheme, event_rxs, board)?),
        None => None,
    };
    Ok((scheme, engine))
}

/// One clock of a [`ClockScheme`] as the engine's [`DriverIo`]: the scheme owns the driver
/// links, the engine borrows them through this.
pub struct SchemeLink<C: Connector> {
    pub scheme: Arc<ClockScheme<C>>,
    pub index: usize,
}

impl<C: Connector> SchemeLink<C> {
    fn link(&self) -> Result<&DriverLink<C>, ClockError> {
        self.scheme
            .links()
            .get(self.index)
            .ok_or(ClockError::NoDevice)
    }
}

impl<C: Connector> DriverIo for SchemeLink<C> {
    fn request(&self, req: DriverRequest, timeout: Duration) -> Result<DriverReply, ClockError> {
        self.link()?.request(req, timeout)
    }

    fn post(&self, req: DriverRequest) -> Result<(), ClockError> {
        self.link()?.post(req)
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
pub fn start_engine<C: Connector>(
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
