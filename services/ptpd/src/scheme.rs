//! The clock scheme's meaning, independent of transport: privilege, validation, and mapping
//! each request to driver operations. On Linux hosts it is served on a Unix socket; on Redox as
//! `/scheme/ptp`. `crate::service` starts it beside the PTP engine.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ptp_ipc::{
    ClockError, ClockReply, ClockRequest, ClockStatus, DriverReply, DriverRequest, PortState,
};

use crate::driver_link::{Connector, DriverLink, clock_error};
use crate::ptp::PtpStatusBoard;

/// Root, or a uid the configuration allows, may change clocks; everyone may read.
pub fn may_write(uid: u32, privileged: &[u32]) -> bool {
    uid == 0 || privileged.contains(&uid)
}

/// What the clock scheme's transport refused, rejected or held back; every clock's `status`
/// reports them.
#[derive(Debug, Default)]
pub struct SchemeCounters {
    /// Connections refused at the client limits (each answered EBUSY, then closed).
    pub clients_refused: AtomicU64,
    /// Requests that did not decode or exceeded the message size (answered EINVAL).
    pub requests_malformed: AtomicU64,
    /// Requests a client sent beyond its flood limit (answered after a pause).
    pub requests_throttled: AtomicU64,
}

/// By default (config `client_requests_per_s`) a client connection is served at most this many
/// requests per second once it has used its burst (a tenth of it). Above what a sequential
/// client reached through a driver here (`ptpctl bench`), so only a client that pipelines
/// requests, or sends ones that need no driver, meets it.
pub const CLIENT_RATE_PER_S: u32 = 20_000;

/// One client's request budget (a token bucket): within it requests are served at once; beyond
/// it each waits until the budget allows it, so a client that floods is slowed to the rate
/// instead of being answered faster with errors it would retry.
#[derive(Debug)]
pub struct FloodLimit {
    tokens: f64,
    last: Instant,
    rate: f64,
    burst: f64,
}

impl FloodLimit {
    pub fn new(rate_per_s: u32, burst: u32, now: Instant) -> Self {
        let burst = f64::from(burst.max(1));
        Self {
            tokens: burst,
            last: now,
            rate: f64::from(rate_per_s.max(1)),
            burst,
        }
    }

    /// Charges one request arriving at `now`; how long it must wait before it is served (zero
    /// within the budget). The caller waits it out before taking the client's next request, so
    /// the debt never exceeds one request.
    pub fn delay(&mut self, now: Instant) -> Duration {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst) - 1.0;
        if self.tokens >= 0.0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(-self.tokens / self.rate)
        }
    }

    /// Whether the budget has refilled by `now` (forgetting this client would give it nothing).
    pub fn refilled(&self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.tokens + dt * self.rate >= self.burst
    }

    /// Whether a request arriving at `now` is within the budget (charged if so): for
    /// datagram servers, which drop what is beyond it rather than make everyone wait.
    pub fn admit(&mut self, now: Instant) -> bool {
        let dt = now.saturating_duration_since(self.last).as_secs_f64();
        self.last = now;
        self.tokens = (self.tokens + dt * self.rate).min(self.burst);
        if self.tokens >= 1.0 {
            self.tokens -= 1.0;
            true
        } else {
            false
        }
    }
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
    /// The clock with a time source, and its board.
    source: Option<(u32, crate::timesource::SourceBoard)>,
    counters: SchemeCounters,
}

impl<C: Connector> ClockScheme<C> {
    pub fn new(links: Vec<DriverLink<C>>, privileged: Vec<u32>, timeout: Duration) -> Self {
        Self {
            freq: links.iter().map(|_| AtomicI64::new(0)).collect(),
            links,
            privileged,
            timeout,
            ptp: None,
            source: None,
            counters: SchemeCounters::default(),
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

    /// Clock `clock`'s time source reports on `board` (`Source`).
    pub fn with_source(mut self, source: Option<(u32, crate::timesource::SourceBoard)>) -> Self {
        self.source = source;
        self
    }

    /// The transport's counters (it counts; `status` reports them).
    pub fn counters(&self) -> &SchemeCounters {
        &self.counters
    }

    pub fn links(&self) -> &[DriverLink<C>] {
        &self.links
    }

    /// How long a request to a driver may take.
    pub fn timeout(&self) -> Duration {
        self.timeout
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
            ClockRequest::Set { .. }
                | ClockRequest::Adj { .. }
                | ClockRequest::Freq { .. }
                | ClockRequest::SetTstamp { .. }
                | ClockRequest::SetPin { .. }
                | ClockRequest::ExtTs { .. }
                | ClockRequest::PerOut { .. }
                | ClockRequest::Pps { .. }
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
            ClockRequest::Events { clock, after } => {
                let (first_seq, lost, events) = self.link(clock)?.ext_ts_after(after);
                return Ok(ClockReply::Events {
                    first_seq,
                    lost,
                    events,
                });
            }
            ClockRequest::Pins { clock } => return self.pins(clock, DriverRequest::GetPins),
            ClockRequest::Source { clock } => {
                self.link(clock)?;
                let s = match &self.source {
                    Some((c, b)) if *c == clock => b.get().ok_or(ClockError::Unsupported)?,
                    _ => return Err(ClockError::Unsupported),
                };
                return Ok(ClockReply::Source(ptp_ipc::SourceStatus {
                    state: s.state as u8,
                    clock_class: s.state.clock_class(),
                    offset_ns: s.offset_ns,
                    pulses: s.pulses,
                    steps: s.steps,
                }));
            }
            ClockRequest::SetPin {
                clock,
                pin,
                func,
                chan,
            } => {
                log::warn!(
                    "clock {clock}: uid {uid} sets pin {pin} to {} {chan}",
                    func.name()
                );
                return self.pins(clock, DriverRequest::SetPin { pin, func, chan });
            }
            ClockRequest::ExtTs { clock, chan, on } => {
                log::warn!("clock {clock}: uid {uid} turns external timestamps {chan} {on}");
                return self.pins(clock, DriverRequest::ExtTs { chan, on });
            }
            ClockRequest::PerOut {
                clock,
                chan,
                start_ns,
                period_ns,
            } => {
                log::warn!(
                    "clock {clock}: uid {uid} sets periodic output {chan}: start {start_ns}, \
                     period {period_ns} ns"
                );
                let req = DriverRequest::PerOut {
                    chan,
                    start_ns,
                    period_ns,
                };
                return self.pins(clock, req);
            }
            ClockRequest::Pps { clock, on } => {
                log::warn!("clock {clock}: uid {uid} turns PPS events {on}");
                return self.pins(clock, DriverRequest::Pps { on });
            }
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
            ClockRequest::SetTstamp {
                clock,
                tx_on,
                rx_filter,
            } => {
                log::warn!(
                    "clock {clock}: uid {uid} sets timestamping: TX {}, RX {}",
                    if tx_on { "on" } else { "off" },
                    rx_filter.name()
                );
                (clock, DriverRequest::SetTstampConfig { tx_on, rx_filter })
            }
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
            DriverReply::TstampConfig { tx_on, rx_filter } => {
                ClockReply::Tstamp { tx_on, rx_filter }
            }
            DriverReply::Freq { .. } | DriverReply::Pins(_) | DriverReply::PerOut { .. } => {
                return Err(ClockError::Io);
            }
        })
    }

    /// A pin request, through the link that remembers what the driver accepted.
    fn pins(&self, clock: u32, req: DriverRequest) -> Result<ClockReply, ClockError> {
        match self.link(clock)?.pin_request(req, self.timeout)? {
            DriverReply::Done => Ok(ClockReply::Done),
            DriverReply::Pins(p) => Ok(ClockReply::Pins(p)),
            DriverReply::PerOut { first_ns } => Ok(ClockReply::PerOut { first_ns }),
            DriverReply::Error(e) => Err(clock_error(&e)),
            _ => Err(ClockError::Io),
        }
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
            clients_refused: self.counters.clients_refused.load(Ordering::Relaxed),
            requests_malformed: self.counters.requests_malformed.load(Ordering::Relaxed),
            requests_throttled: self.counters.requests_throttled.load(Ordering::Relaxed),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_is_slowed_to_the_rate_after_its_burst() {
        let t0 = Instant::now();
        let mut l = FloodLimit::new(1000, 10, t0);
        // The burst is served at once.
        assert!((0..10).all(|_| l.delay(t0).is_zero()));
        // Beyond it, each request waits for its share of the rate (1 ms each here).
        let mut now = t0;
        for _ in 0..100 {
            let d = l.delay(now);
            assert!(
                d > Duration::from_micros(990) && d <= Duration::from_micros(1010),
                "{d:?}"
            );
            now += d;
        }
        // 110 requests took 100 ms: the rate, not the flood's.
        let took = (now - t0).as_micros();
        assert!((99_900..=100_100).contains(&took), "{took} us");
        // A pause refills the budget, up to the burst only.
        now += Duration::from_secs(60);
        assert!((0..10).all(|_| l.delay(now).is_zero()));
        assert!(!l.delay(now).is_zero());
    }

    #[test]
    fn admit_drops_beyond_the_budget() {
        let t0 = Instant::now();
        let mut l = FloodLimit::new(100, 5, t0);
        let admitted = (0..50).filter(|_| l.admit(t0)).count();
        assert_eq!(admitted, 5);
        // 100 ms later: 10 more.
        let t1 = t0 + Duration::from_millis(100);
        let admitted = (0..50).filter(|_| l.admit(t1)).count();
        assert_eq!(admitted, 5, "the refill is capped at the burst");
        let t2 = t1 + Duration::from_millis(30);
        assert_eq!((0..50).filter(|_| l.admit(t2)).count(), 3);
    }
}
