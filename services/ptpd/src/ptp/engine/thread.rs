//! The production thread around [`Core`]: waits on the drivers' event channels, the results of
//! configuration helpers and the core's next deadline, with the monotonic clock as `now`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, Select, Sender, bounded};
use ptp_ipc::DriverEvent;

use super::super::clock::DriverIo;
use super::super::config::PtpSettings;
use super::super::manage::Outcome;
use super::super::mgmt::MgmtRequest;
use super::super::status::PtpStatusBoard;
use super::{ConfigureError, Configured, Core, EngineStats, StatsSnapshot, dur_ns};

/// Control messages to the engine thread.
enum Control {
    Configured {
        port: usize,
        seq: u64,
        result: Result<Configured, ConfigureError>,
    },
    /// A management request from a transport, answered on `reply`.
    Manage {
        req: MgmtRequest,
        privileged: bool,
        reply: Sender<Outcome>,
    },
    Stop,
}

/// Hands management requests to the engine thread, for the management transports (SETs
/// change the engine, so they cannot be answered from the published snapshot).
#[derive(Clone)]
pub struct MgmtHandle {
    ctl: Sender<Control>,
}

impl MgmtHandle {
    /// The engine's answer to `req`; `None` if it has not answered within `timeout` (busy or
    /// stopped). `privileged`: the transport vouches for the requester (see
    /// [`decide_set`](super::super::manage::decide_set)).
    pub fn request(
        &self,
        req: MgmtRequest,
        privileged: bool,
        timeout: Duration,
    ) -> Option<Outcome> {
        let (reply, answer) = bounded(1);
        let msg = Control::Manage {
            req,
            privileged,
            reply,
        };
        self.ctl.send_timeout(msg, timeout).ok()?;
        answer.recv_timeout(timeout).ok()
    }

    /// Hands `req` to the engine without waiting: its answer will come on the returned
    /// receiver. `None` if the engine's queue is full or the engine is gone (nothing waits for
    /// room: a transport serving many requesters must not stall on one request).
    pub fn submit(&self, req: MgmtRequest, privileged: bool) -> Option<Receiver<Outcome>> {
        let (reply, answer) = bounded(1);
        let msg = Control::Manage {
            req,
            privileged,
            reply,
        };
        self.ctl.try_send(msg).ok()?;
        Some(answer)
    }

    /// A handle to an engine that takes requests and never answers them while the returned
    /// guard lives (a busy engine, for the transports' tests).
    #[cfg(test)]
    pub(crate) fn stalled() -> (Self, StalledEngine) {
        let (ctl, rx) = bounded(256);
        (Self { ctl }, StalledEngine(rx))
    }
}

/// Keeps a [`MgmtHandle::stalled`] engine's queue open.
#[cfg(test)]
pub(crate) struct StalledEngine(Receiver<Control>);

#[cfg(test)]
impl StalledEngine {
    /// Answers the oldest waiting management request with `outcome`; false if none came
    /// within `within`.
    pub(crate) fn answer_one(&self, within: Duration, outcome: Outcome) -> bool {
        match self.0.recv_timeout(within) {
            Ok(Control::Manage { reply, .. }) => reply.try_send(outcome).is_ok(),
            _ => false,
        }
    }
}

/// The longest the engine thread sleeps, so a stop request is seen promptly even without
/// events or timers.
const MAX_SLEEP: Duration = Duration::from_millis(100);

/// ptpd's exit status when its engine thread dies.
pub const ENGINE_DIED_EXIT: i32 = 70;

/// Why the process must end, if the engine thread ended without being asked to: a PTP service
/// whose protocol thread is gone answers clients with stale data and lets driver events pile up
/// (a boot on Redox showed it, issue 27: the engine panicked and ptpd logged a dropped event
/// every few milliseconds for good). Exiting hands the restart to the supervisor.
fn died(run: &std::thread::Result<()>, asked_to_stop: bool) -> Option<String> {
    let why = match run {
        Ok(()) if asked_to_stop => return None,
        Ok(()) => "returned".to_string(),
        Err(p) => {
            let msg = p
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| p.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "a non-string payload".into());
            format!("panicked: {msg}")
        }
    };
    Some(format!(
        "the PTP engine thread {why}; ptpd exits (status {ENGINE_DIED_EXIT}) for its supervisor \
         to restart it"
    ))
}

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
                    let run = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        engine_thread(settings, ios, events, board, stats, &stop, &ctl_tx, &ctl_rx)
                    }));
                    if let Some(why) = died(&run, stop.load(Ordering::Acquire)) {
                        log::error!("{why}");
                        std::process::exit(ENGINE_DIED_EXIT);
                    }
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

    /// A handle for management transports.
    pub fn manager(&self) -> MgmtHandle {
        MgmtHandle {
            ctl: self.ctl.clone(),
        }
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
    ptp_ipc::rt::apply(&crate::service::time_path_rt(), "ptp-engine");
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
                    Ok(Control::Manage {
                        req,
                        privileged,
                        reply,
                    }) => {
                        let _ = reply.try_send(core.manage(&req, privileged, now()));
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

#[cfg(test)]
mod died_tests {
    use super::died;

    #[test]
    fn only_an_asked_for_end_is_quiet() {
        assert_eq!(died(&Ok(()), true), None);
        assert!(died(&Ok(()), false).unwrap().contains("returned"));
        let p = std::panic::catch_unwind(|| panic!("from_entropy failed: No such device"));
        let why = died(&p.map(|_: ()| ()), false).unwrap();
        assert!(why.contains("panicked: from_entropy failed"), "{why}");
        // Even while stopping, a panic is reported.
        let p = std::panic::catch_unwind(|| panic!("{}", String::from("x")));
        assert!(
            died(&p.map(|_: ()| ()), true)
                .unwrap()
                .contains("panicked: x")
        );
    }
}
