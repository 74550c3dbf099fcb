//! The statime [`Clock`] over a driver's PHC, and the filter wrapper that lets ptpd see the
//! servo's measurements (for ptp4l-style logs and the status snapshot).
//!
//! Every clock operation is an IPC request to the driver daemon with a short, bounded timeout;
//! failures are typed ([`ClockOpError`]), logged, and returned to statime (whose Kalman filter
//! then leaves its state unchanged) — never a panic.

use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use ptp_ipc::clockpage::ClockPageReader;
use ptp_ipc::{ClockError, DriverReply, DriverRequest};
use statime::Clock;
use statime::config::TimePropertiesDS;
use statime::filters::{Filter, FilterEstimate, FilterUpdate, KalmanConfiguration, KalmanFilter};
use statime::port::Measurement;
use statime::time::{Duration as PtpDuration, Time};

use super::servo::{PiConfig, PiServo};

/// What the engine needs from a driver: requests with a reply (bounded by `timeout`) and
/// fire-and-forget sends. [`crate::driver_link::DriverLink`] is the production implementation
/// (through [`crate::service::SchemeLink`]); the tests plug in simulated drivers.
pub trait DriverIo: Send + Sync {
    fn request(&self, req: DriverRequest, timeout: Duration) -> Result<DriverReply, ClockError>;
    fn post(&self, req: DriverRequest) -> Result<(), ClockError>;
}

/// How long one clock operation may take. The engine thread waits for it, so it must stay
/// short; a driver that cannot adjust its PHC within this is treated as failing.
pub const CLOCK_OP_TIMEOUT: Duration = Duration::from_millis(200);

/// Why a clock operation failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockOpError {
    #[error("driver request failed: {0:?}")]
    Request(ClockError),
    #[error("driver refused: {0:?}")]
    Driver(ptp_ipc::DriverError),
    #[error("unexpected reply {0}")]
    Unexpected(&'static str),
    #[error("step of {0} ns does not fit an AdjTime")]
    StepTooLarge(i128),
    #[error("frequency {0} ppm is not a number")]
    BadFrequency(String),
    #[error("a step of {0} ns would take the PHC before {MIN_PHC_AFTER_STEP_NS} ns")]
    StepBeforeEpoch(i128),
}

/// Steps that would leave the PHC earlier than this (ns) are refused. statime's Kalman filter
/// moves its own time by the step and would underflow its unsigned time (a panic in debug
/// builds) on a step past the epoch; only a bogus measurement asks for one anyway. The margin
/// covers [`super::net::MAX_CORRECTION_NS`], by which a measurement's time may precede the
/// latest stamp.
pub const MIN_PHC_AFTER_STEP_NS: i128 = 3_000_000_000;

/// Servo state in ptp4l's terms (the `s0/s1/s2` of its "master offset" lines).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ServoState {
    /// No measurement yet, or the filter was reset.
    #[default]
    Unlocked,
    /// The last measurement stepped the clock.
    Jump,
    /// Measurements have stayed within [`LOCK_THRESHOLD_NS`] for [`LOCK_COUNT`] syncs.
    Locked,
}

/// Consecutive sync measurements within [`LOCK_THRESHOLD_NS`] before ptpd calls the servo
/// locked (statime has no UNCALIBRATED state; ptpd derives it from this).
pub const LOCK_COUNT: u32 = 4;
/// |offset| below which a measurement counts towards lock.
pub const LOCK_THRESHOLD_NS: f64 = 20_000.0;

/// One measurement as the summary line needs it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Sample {
    pub offset_ns: f64,
    pub delay_ns: f64,
    pub freq_ppb: f64,
}

/// State of one port's clock shared by the [`PhcClock`], the [`TracedFilter`] and the engine.
/// All three run on the engine thread; the mutex only makes the handle `Send`.
#[derive(Default)]
pub struct ClockState {
    /// From the driver's Caps (0 = unknown: only the configured bound applies).
    pub max_adj_ppb: u32,
    /// The configured `max_frequency`.
    pub max_frequency_ppb: u32,
    /// Fast path for `now()`; `None` → GetTime over IPC.
    pub page: Option<ClockPageReader>,
    /// Highest PHC time handed to statime (RX/TX stamps, returned times). `now()` never returns
    /// less: statime's Kalman filter `debug_assert`s that time never runs backwards between a
    /// measurement and the following frequency change.
    pub high_water_ns: Option<u64>,
    /// (PHC ns, engine monotonic ns) of the latest plausible stamp: where the PHC is expected
    /// to be (see [`plausible`]).
    pub anchor: Option<(u64, u64)>,
    /// The time of the measurement statime's filter is processing (ns), so a step can be
    /// checked against the filter's own time (see [`MIN_PHC_AFTER_STEP_NS`]).
    pub measuring_ns: Option<i128>,
    /// The PHC's frequency when ptpd first configured its driver (`GetFreq`, scaled ppm), then
    /// the frequency in force whenever a new statime filter starts steering
    /// ([`TracedFilter::measurement`]): statime's frequencies are relative to it (see
    /// [`PhcClock::set_frequency`]). `None` until then, or if the driver cannot say: statime's
    /// values are then absolute.
    pub freq_base_scaled_ppm: Option<i64>,
    /// The absolute frequency last applied (base + statime's), scaled ppm and ppb: what status
    /// and the logs report.
    pub freq_scaled_ppm: i64,
    pub freq_ppb: f64,
    /// Sum of the steps applied (ns), and how many.
    pub steps_ns: i128,
    pub steps: u64,
    /// Failed clock operations.
    pub errors: u64,
    pub servo: ServoState,
    pub lock_run: u32,
    /// Samples since the last summary line.
    pub samples: Vec<Sample>,
    /// Latest measured offset / filtered mean delay (ns).
    pub last_offset_ns: Option<f64>,
    /// The grandmaster's time properties last passed to `set_properties`.
    pub master_time_properties: Option<TimePropertiesDS>,
}

pub type SharedClockState = Arc<Mutex<ClockState>>;

pub fn lock(s: &Mutex<ClockState>) -> MutexGuard<'_, ClockState> {
    s.lock().unwrap_or_else(|e| e.into_inner())
}

impl ClockState {
    /// Notes a PHC time seen on this clock (an RX or TX stamp).
    pub fn saw(&mut self, ns: u64) {
        self.high_water_ns = Some(self.high_water_ns.map_or(ns, |h| h.max(ns)));
    }

    /// Forgets everything tied to the PHC's current epoch (after a driver restart the PHC may
    /// have been reset).
    pub fn new_epoch(&mut self) {
        self.high_water_ns = None;
        self.anchor = None;
        self.page = None;
    }
}

/// How far (ns) a stamp may lie from where the PHC is expected to be, plus
/// [`PLAUSIBLE_DRIFT`] of the time since the last plausible stamp. Generous: it only has to
/// keep absurd stamps (a corrupt descriptor, a buggy driver) from reaching statime, whose
/// filter would otherwise take its time from them and ignore every real measurement after.
pub const PLAUSIBLE_WINDOW_NS: i128 = 1_000_000_000;
/// Rate error allowed between the PHC and the engine's clock when extrapolating (1000 ppm,
/// beyond any `max_frequency`).
pub const PLAUSIBLE_DRIFT: i128 = 1000;

/// Reads a PHC: the clock page if the driver publishes one, else GetTime (bounded).
pub fn read_phc(name: &str, io: &dyn DriverIo, state: &SharedClockState) -> Option<u64> {
    {
        let st = lock(state);
        if let Some(page) = &st.page {
            match page.phc_now() {
                Ok(ns) => return Some(ns),
                Err(e) => log::debug!("{name}: clock page: {e}; using GetTime"),
            }
        }
    }
    match io.request(DriverRequest::GetTime, CLOCK_OP_TIMEOUT) {
        Ok(DriverReply::Time { ns }) => Some(ns),
        Ok(other) => {
            log::warn!("{name}: GetTime answered {other:?}");
            None
        }
        Err(e) => {
            log::warn!("{name}: GetTime failed: {e:?}");
            None
        }
    }
}

/// Whether a hardware stamp is believable, and if so records it. `now` is the engine's
/// monotonic time. A stamp far from where the PHC is expected is checked against the PHC
/// itself (one read): if the PHC really is there (someone set it through the clock scheme),
/// the expectation moves; otherwise the stamp is refused.
pub fn plausible(
    name: &str,
    io: &dyn DriverIo,
    state: &SharedClockState,
    stamp: u64,
    now: u64,
) -> bool {
    let s = i128::from(stamp);
    {
        let mut st = lock(state);
        if let Some((phc, at)) = st.anchor {
            let dt = i128::from(now) - i128::from(at);
            let expected = i128::from(phc) + dt;
            if (s - expected).abs() <= PLAUSIBLE_WINDOW_NS + dt.abs() / PLAUSIBLE_DRIFT {
                st.anchor = Some((stamp, now));
                st.saw(stamp);
                return true;
            }
        }
    }
    let Some(read) = read_phc(name, io, state) else {
        return false;
    };
    if (s - i128::from(read)).abs() > PLAUSIBLE_WINDOW_NS {
        return false;
    }
    let mut st = lock(state);
    st.anchor = Some((read, now));
    // Anything remembered from before is stale (the PHC was set, or this is the first stamp).
    st.high_water_ns = Some(read.max(stamp));
    true
}

/// statime's view of one PHC.
pub struct PhcClock {
    name: String,
    io: Arc<dyn DriverIo>,
    state: SharedClockState,
}

impl PhcClock {
    pub fn new(name: &str, io: Arc<dyn DriverIo>, state: SharedClockState) -> Self {
        Self {
            name: name.to_string(),
            io,
            state,
        }
    }

    fn read_ns(&self) -> Option<u64> {
        read_phc(&self.name, &*self.io, &self.state)
    }

    fn done(&self, req: DriverRequest) -> Result<(), ClockOpError> {
        match self.io.request(req, CLOCK_OP_TIMEOUT) {
            Ok(DriverReply::Done) => Ok(()),
            Ok(DriverReply::Error(e)) => Err(ClockOpError::Driver(e)),
            Ok(_) => Err(ClockOpError::Unexpected("to a clock adjustment")),
            Err(e) => Err(ClockOpError::Request(e)),
        }
    }

    fn failed(&self, what: &str, e: &ClockOpError) {
        lock(&self.state).errors += 1;
        match e {
            // The driver is away (restarting; its loss is logged once by the link): expected,
            // and the servo's next adjustment follows when it is back.
            ClockOpError::Request(ClockError::NoDevice) => {
                log::warn!("{}: {what} not applied: no driver connected", self.name)
            }
            _ => log::error!("{}: {what} failed: {e}", self.name),
        }
    }

    /// The largest |frequency| allowed, ppb: the configured bound and the driver's.
    fn freq_limit_ppb(&self) -> f64 {
        let st = lock(&self.state);
        let mut limit = st.max_frequency_ppb;
        if st.max_adj_ppb > 0 {
            limit = limit.min(st.max_adj_ppb);
        }
        f64::from(limit)
    }
}

/// ppm → Linux scaled ppm (ppm × 2^16), rounded.
pub fn ppm_to_scaled(ppm: f64) -> i64 {
    (ppm * 65536.0).round() as i64
}

/// Linux scaled ppm → ppb.
pub fn scaled_to_ppb(scaled_ppm: i64) -> f64 {
    scaled_ppm as f64 * 1000.0 / 65536.0
}

/// Takes `driver_scaled_ppm`, the frequency a freshly (re)connected driver reports, into
/// account. The first report becomes the base ([`ClockState::freq_base_scaled_ppm`]) and the
/// frequency in force. Later, a driver running at another frequency than the one last applied
/// lost it (a cold restart resets the hardware to 0) while statime's filter still counts on
/// it: the last absolute frequency is applied again, at once rather than at the servo's next
/// steer. Runs on the engine thread, so it cannot race statime's own adjustments.
pub fn adopt_driver_freq(
    name: &str,
    io: &dyn DriverIo,
    state: &SharedClockState,
    driver_scaled_ppm: i64,
) {
    let applied = {
        let mut st = lock(state);
        if st.freq_base_scaled_ppm.is_none() {
            st.freq_base_scaled_ppm = Some(driver_scaled_ppm);
            st.freq_scaled_ppm = driver_scaled_ppm;
            st.freq_ppb = scaled_to_ppb(driver_scaled_ppm);
            log::info!(
                "{name}: PHC runs at {:+.3} ppb; the servo's frequency applies on top",
                st.freq_ppb
            );
            return;
        }
        st.freq_scaled_ppm
    };
    if applied == driver_scaled_ppm {
        return;
    }
    log::warn!(
        "{name}: driver runs the PHC at {:+.3} ppb, not the {:+.3} ppb last applied (driver restart?); applying it again",
        scaled_to_ppb(driver_scaled_ppm),
        scaled_to_ppb(applied)
    );
    let req = DriverRequest::AdjFine {
        scaled_ppm: applied,
    };
    match io.request(req, CLOCK_OP_TIMEOUT) {
        Ok(DriverReply::Done) => {}
        Ok(other) => {
            lock(state).errors += 1;
            log::error!("{name}: re-applying the frequency: driver answered {other:?}");
        }
        Err(e) => {
            lock(state).errors += 1;
            log::error!("{name}: re-applying the frequency failed: {e:?}");
        }
    }
}

impl Clock for PhcClock {
    type Error = ClockOpError;

    fn now(&self) -> Time {
        let read = self.read_ns();
        let mut st = lock(&self.state);
        let ns = match (read, st.high_water_ns) {
            (Some(r), Some(h)) => r.max(h),
            (Some(r), None) => r,
            (None, Some(h)) => h,
            (None, None) => 0,
        };
        st.saw(ns);
        Time::from_nanos(ns)
    }

    fn step_clock(&mut self, offset: PtpDuration) -> Result<Time, Self::Error> {
        let ns = offset.nanos_rounded();
        // statime's filter moves its time (that of the measurement being processed) by the
        // step: check against that first.
        let reference = {
            let st = lock(&self.state);
            st.measuring_ns.or(st.high_water_ns.map(i128::from))
        };
        let reference = reference.or_else(|| self.read_ns().map(i128::from));
        if ns < 0 && reference.is_none_or(|r| r + ns < MIN_PHC_AFTER_STEP_NS) {
            let e = ClockOpError::StepBeforeEpoch(ns);
            self.failed("step", &e);
            return Err(e);
        }
        let r = i64::try_from(ns)
            .map_err(|_| ClockOpError::StepTooLarge(ns))
            .and_then(|delta_ns| self.done(DriverRequest::AdjTime { delta_ns }));
        if let Err(e) = &r {
            self.failed("step", e);
            return Err(e.clone());
        }
        {
            let mut st = lock(&self.state);
            st.steps_ns += ns;
            st.steps += 1;
            st.servo = ServoState::Jump;
            st.lock_run = 0;
            let shift = |v: u64| (i128::from(v) + ns).clamp(0, i128::from(u64::MAX)) as u64;
            st.high_water_ns = st.high_water_ns.map(shift);
            st.anchor = st.anchor.map(|(phc, at)| (shift(phc), at));
        }
        log::info!("{}: clock stepped by {ns} ns", self.name);
        Ok(self.now())
    }

    /// `ppm` is relative to the PHC's frequency when ptpd took it over, re-based whenever
    /// statime starts a new servo ([`ClockState::freq_base_scaled_ppm`]): statime's Kalman
    /// filter starts every servo with a "0", which as an absolute value would throw away the
    /// correction a restarted ptpd finds the PHC running at (issue 17; the drivers keep it
    /// across a ptpd restart), or the one learnt before the port left SLAVE, and move the
    /// clock by µs before the servo has re-learnt it. The limits bound the absolute value, which
    /// is what the hardware and the bounds are about.
    fn set_frequency(&mut self, ppm: f64) -> Result<Time, Self::Error> {
        if !ppm.is_finite() {
            let e = ClockOpError::BadFrequency(ppm.to_string());
            self.failed("set_frequency", &e);
            return Err(e);
        }
        let limit = self.freq_limit_ppb();
        let base_ppb = scaled_to_ppb(lock(&self.state).freq_base_scaled_ppm.unwrap_or(0));
        let ppb = (base_ppb + ppm * 1000.0).clamp(-limit, limit);
        let scaled_ppm = ppm_to_scaled(ppb / 1000.0);
        if let Err(e) = self.done(DriverRequest::AdjFine { scaled_ppm }) {
            self.failed("set_frequency", &e);
            return Err(e);
        }
        {
            let mut st = lock(&self.state);
            st.freq_scaled_ppm = scaled_ppm;
            st.freq_ppb = ppb;
        }
        Ok(self.now())
    }

    fn set_properties(&mut self, tp: &TimePropertiesDS) -> Result<(), Self::Error> {
        // The PHC keeps the grandmaster's timescale as is (no UTC correction: the stamps and
        // the PHC are on the PTP timescale); remember what the master announces for status.
        let mut st = lock(&self.state);
        if st.master_time_properties.as_ref() != Some(tp) {
            log::info!(
                "{}: grandmaster time properties: ptpTimescale {}, currentUtcOffset {:?}, timeSource {:#04x}",
                self.name,
                tp.is_ptp(),
                tp.utc_offset(),
                tp.time_source.to_primitive()
            );
        }
        st.master_time_properties = Some(*tp);
        Ok(())
    }
}

/// Which servo steers the clock (`clock_servo`), with its settings.
#[derive(Debug, Clone, Copy)]
pub enum ServoConfig {
    /// ptp4l's PI loop with ptpd's step policy ([`PiServo`]).
    Pi(PiConfig),
    /// statime's Kalman filter.
    Kalman(KalmanConfiguration),
}

/// Filter configuration: the servo's, plus the port's shared clock state.
#[derive(Clone)]
pub struct TracedConfig {
    pub servo: ServoConfig,
    pub state: SharedClockState,
}

/// The servo a [`TracedFilter`] wraps.
// One per port: the size difference costs nothing worth an indirection.
#[allow(clippy::large_enum_variant)]
enum Servo {
    Pi(PiServo),
    Kalman(KalmanFilter),
}

impl Servo {
    fn new(cfg: ServoConfig) -> Self {
        match cfg {
            ServoConfig::Pi(c) => Servo::Pi(PiServo::new(c)),
            ServoConfig::Kalman(c) => Servo::Kalman(KalmanFilter::new(c)),
        }
    }

    fn measurement<C: Clock>(&mut self, m: Measurement, clock: &mut C) -> FilterUpdate {
        match self {
            Servo::Pi(f) => f.measurement(m, clock),
            Servo::Kalman(f) => f.measurement(m, clock),
        }
    }

    fn update<C: Clock>(&mut self, clock: &mut C) -> FilterUpdate {
        match self {
            Servo::Pi(f) => f.update(clock),
            Servo::Kalman(f) => f.update(clock),
        }
    }

    fn demobilize<C: Clock>(self, clock: &mut C) {
        match self {
            Servo::Pi(f) => f.demobilize(clock),
            Servo::Kalman(f) => f.demobilize(clock),
        }
    }

    fn current_estimates(&self) -> FilterEstimate {
        match self {
            Servo::Pi(f) => f.current_estimates(),
            Servo::Kalman(f) => f.current_estimates(),
        }
    }
}

/// The servo (PI or statime's [`KalmanFilter`]) with two additions: it records each measurement
/// for the ptp4l-style logs and the status snapshot, and it restarts the servo when the PHC's
/// time runs backwards by more than [`BACKWARDS_RESET_NS`] without a step through the clock (a
/// driver restart that reset the PHC). Without that, the Kalman filter ignores every
/// measurement older than its internal time, forever.
pub struct TracedFilter {
    inner: Servo,
    config: TracedConfig,
    /// `inner` has not set its first frequency yet (see [`TracedFilter::rebase_if_fresh`]).
    fresh: bool,
    /// Latest event time seen (ns), and the step total at that moment.
    last_event: Option<(i128, i128)>,
}

/// How far (ns) the PHC may run backwards between two measurements, beyond what the clock's
/// own steps explain, before [`TracedFilter`] restarts the servo. Normal reordering (a
/// Delay_Req sent before the latest Sync arrived) stays far below it.
pub const BACKWARDS_RESET_NS: i128 = 1_000_000_000;

/// `t` in ns as a wide integer (statime's `Time` is an unsigned fixed-point number).
pub fn time_ns(t: Time) -> i128 {
    i128::from(t.secs()) * 1_000_000_000 + i128::from(t.subsec_nanos())
}

impl TracedFilter {
    fn restart_if_time_ran_back(&mut self, m: &Measurement) {
        let steps = lock(&self.config.state).steps_ns;
        if let Some((last, steps_then)) = self.last_event {
            let expected = last + (steps - steps_then);
            let now = time_ns(m.event_time);
            if now + BACKWARDS_RESET_NS < expected {
                log::warn!(
                    "PHC time went back by {} ns without a step (driver restart?); restarting the servo",
                    expected - now
                );
                self.inner = Servo::new(self.config.servo);
                self.fresh = true;
                let mut st = lock(&self.config.state);
                st.servo = ServoState::Unlocked;
                st.lock_run = 0;
            }
        }
    }

    /// A new Kalman filter's first measurement with an offset sets the frequency to 0.0
    /// (statime 0.4 `filters/kalman.rs`, `KalmanFilter::ensure_freq_init`), and statime starts
    /// a new filter whenever the port leaves SLAVE (`port/mod.rs`, `set_forced_port_state`),
    /// e.g. SLAVE → MASTER when the parent's Announces age out over a link flap. Relative to
    /// ptpd's start that "0" throws away the correction learnt since (several ppm; the old
    /// filter's `demobilize` had just applied its best estimate), and the slave drifted µs
    /// before the new filter re-learnt it (issue 17 follow-up). So the frequency in force
    /// becomes the base just before: the new filter's "0" keeps it. Until the filter has seen
    /// an offset it sets no frequency (its `cur_frequency` is unset), so re-basing on each
    /// such measurement is harmless.
    fn rebase_if_fresh(&mut self, m: &Measurement) {
        if !self.fresh {
            return;
        }
        let mut st = lock(&self.config.state);
        if st.freq_base_scaled_ppm.is_some() || st.freq_scaled_ppm != 0 {
            st.freq_base_scaled_ppm = Some(st.freq_scaled_ppm);
        }
        if m.raw_sync_offset.is_some() || m.raw_delay_offset.is_some() {
            self.fresh = false;
        }
    }
}

impl Filter for TracedFilter {
    type Config = TracedConfig;

    fn new(config: Self::Config) -> Self {
        {
            let mut st = lock(&config.state);
            st.servo = ServoState::Unlocked;
            st.lock_run = 0;
        }
        Self {
            inner: Servo::new(config.servo),
            config,
            fresh: true,
            last_event: None,
        }
    }

    fn measurement<C: Clock>(&mut self, m: Measurement, clock: &mut C) -> FilterUpdate {
        self.restart_if_time_ran_back(&m);
        self.rebase_if_fresh(&m);
        let steps_before = {
            let mut st = lock(&self.config.state);
            st.measuring_ns = Some(time_ns(m.event_time));
            st.steps
        };
        let update = self.inner.measurement(m, clock);
        lock(&self.config.state).measuring_ns = None;
        let est = self.inner.current_estimates();
        let mut st = lock(&self.config.state);
        self.last_event = Some((time_ns(m.event_time), st.steps_ns));
        if st.steps != steps_before {
            // PhcClock::step_clock already marked the jump.
            return update;
        }
        if let Some(offset) = m.offset {
            let offset_ns = offset.nanos_lossy();
            let delay_ns = est.mean_delay.nanos_lossy();
            let freq_ppb = st.freq_ppb;
            st.samples.push(Sample {
                offset_ns,
                delay_ns,
                freq_ppb,
            });
            // Bounded even if nobody ever prints a summary.
            if st.samples.len() > 4096 {
                st.samples.remove(0);
            }
            st.last_offset_ns = Some(offset_ns);
            if offset_ns.abs() < LOCK_THRESHOLD_NS {
                st.lock_run = st.lock_run.saturating_add(1);
                if st.lock_run >= LOCK_COUNT {
                    st.servo = ServoState::Locked;
                }
            } else {
                st.lock_run = 0;
                if st.servo == ServoState::Locked {
                    st.servo = ServoState::Unlocked;
                }
            }
        }
        update
    }

    fn update<C: Clock>(&mut self, clock: &mut C) -> FilterUpdate {
        self.inner.update(clock)
    }

    fn demobilize<C: Clock>(self, clock: &mut C) {
        self.inner.demobilize(clock)
    }

    fn current_estimates(&self) -> FilterEstimate {
        self.inner.current_estimates()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Records requests; answers GetTime with a fixed time.
    struct Rec(Mutex<Vec<DriverRequest>>, u64);

    impl DriverIo for Rec {
        fn request(&self, req: DriverRequest, _: Duration) -> Result<DriverReply, ClockError> {
            let reply = match req {
                DriverRequest::GetTime => DriverReply::Time { ns: self.1 },
                DriverRequest::AdjTime { delta_ns: 13 } => {
                    DriverReply::Error(ptp_ipc::DriverError::InvalidArgument)
                }
                _ => DriverReply::Done,
            };
            self.0.lock().unwrap().push(req);
            Ok(reply)
        }
        fn post(&self, _: DriverRequest) -> Result<(), ClockError> {
            Ok(())
        }
    }

    fn clock(max_frequency_ppb: u32, max_adj_ppb: u32) -> (PhcClock, Arc<Rec>, SharedClockState) {
        let io = Arc::new(Rec(Mutex::new(Vec::new()), 50_000_000_000));
        let state = SharedClockState::default();
        {
            let mut st = lock(&state);
            st.max_frequency_ppb = max_frequency_ppb;
            st.max_adj_ppb = max_adj_ppb;
        }
        (PhcClock::new("t", io.clone(), state.clone()), io, state)
    }

    #[test]
    fn frequency_is_absolute_scaled_and_clamped() {
        let (mut c, io, st) = clock(500_000, 62_499);
        assert_eq!(ppm_to_scaled(1.0), 65536);
        assert_eq!(ppm_to_scaled(-0.5), -32768);
        let t = c.set_frequency(12.5).unwrap();
        assert_eq!(
            t,
            Time::from_nanos(50_000_000_000),
            "returns the time after"
        );
        // Beyond the driver's max_adj: clamped to it, not to the configured bound.
        c.set_frequency(-400.0).unwrap();
        c.set_frequency(f64::NAN).unwrap_err();
        assert_eq!(adjfines(&io), vec![819_200, ppm_to_scaled(-62.499)]);
        assert_eq!(lock(&st).freq_scaled_ppm, ppm_to_scaled(-62.499));
        assert_eq!(lock(&st).errors, 1);
    }

    fn adjfines(io: &Rec) -> Vec<i64> {
        io.0.lock()
            .unwrap()
            .iter()
            .filter_map(|r| match r {
                DriverRequest::AdjFine { scaled_ppm } => Some(*scaled_ppm),
                _ => None,
            })
            .collect()
    }

    #[test]
    fn frequency_is_relative_to_the_phc_frequency_found_at_start() {
        let (mut c, io, st) = clock(500_000, 62_499);
        let base = ppm_to_scaled(4.25);
        adopt_driver_freq("t", &*io, &st, base);
        assert_eq!(lock(&st).freq_base_scaled_ppm, Some(base));
        assert_eq!(lock(&st).freq_scaled_ppm, base, "status shows it at once");
        assert!(adjfines(&io).is_empty(), "taking the base changes nothing");
        // statime's first "0" keeps the PHC where it was; its values add to the base, and
        // the status shows the absolute value.
        c.set_frequency(0.0).unwrap();
        c.set_frequency(-1.5).unwrap();
        assert_eq!(lock(&st).freq_scaled_ppm, ppm_to_scaled(2.75));
        assert!((lock(&st).freq_ppb - 2750.0).abs() < 1e-9);
        // The limits bound the absolute value.
        c.set_frequency(62.0).unwrap();
        assert_eq!(
            adjfines(&io),
            vec![base, ppm_to_scaled(2.75), ppm_to_scaled(62.499)]
        );
    }

    #[test]
    fn a_driver_that_lost_the_frequency_gets_it_again() {
        let (mut c, io, st) = clock(500_000, 0);
        adopt_driver_freq("t", &*io, &st, ppm_to_scaled(-3.0));
        c.set_frequency(0.5).unwrap();
        let applied = ppm_to_scaled(-2.5);
        // A reconnect to a driver that kept it: nothing to do.
        adopt_driver_freq("t", &*io, &st, applied);
        assert_eq!(adjfines(&io), vec![applied]);
        // A cold restart (hardware back to 0): the last absolute value again; the base stays.
        adopt_driver_freq("t", &*io, &st, 0);
        assert_eq!(adjfines(&io), vec![applied, applied]);
        assert_eq!(lock(&st).freq_base_scaled_ppm, Some(ppm_to_scaled(-3.0)));
        assert_eq!(lock(&st).freq_scaled_ppm, applied);
    }

    /// A measurement 100 ns off at PHC time 50 s.
    fn offset_sample() -> Measurement {
        let off = PtpDuration::from_nanos(100);
        Measurement {
            event_time: Time::from_nanos(50_000_000_000),
            offset: Some(off),
            delay: None,
            peer_delay: None,
            raw_sync_offset: Some(off),
            raw_delay_offset: None,
        }
    }

    #[test]
    fn a_new_filter_keeps_the_frequency_in_force() {
        let (mut c, io, st) = clock(500_000, 0);
        adopt_driver_freq("t", &*io, &st, 0);
        let config = TracedConfig {
            servo: ServoConfig::Kalman(KalmanConfiguration::default()),
            state: st.clone(),
        };
        // The first servo: its "0" is the PHC's frequency at ptpd's start.
        let mut first = TracedFilter::new(config.clone());
        first.measurement(offset_sample(), &mut c);
        assert_eq!(adjfines(&io)[0], 0);
        // It learnt +3.5 ppm (its last steer); statime then starts a new filter (the port
        // left SLAVE).
        c.set_frequency(3.5).unwrap();
        let learnt = ppm_to_scaled(3.5);
        let mut second = TracedFilter::new(config);
        drop(first);
        let before = adjfines(&io).len();
        second.measurement(offset_sample(), &mut c);
        let after = &adjfines(&io)[before..];
        assert_eq!(after.first(), Some(&learnt), "the new filter's 0 keeps it");
        assert_eq!(lock(&st).freq_base_scaled_ppm, Some(learnt));
    }

    #[test]
    fn steps_are_adjtime_and_refuse_the_epoch() {
        let (mut c, io, st) = clock(500_000, 0);
        c.step_clock(PtpDuration::from_nanos(-1_500)).unwrap();
        // (The PHC is read first: no stamp has been seen yet to check the step against.)
        assert!(
            io.0.lock()
                .unwrap()
                .contains(&DriverRequest::AdjTime { delta_ns: -1_500 })
        );
        assert_eq!(lock(&st).steps_ns, -1_500);
        // 50 s PHC: a step of -49 s would leave it before MIN_PHC_AFTER_STEP_NS.
        assert!(matches!(
            c.step_clock(PtpDuration::from_secs(-49)),
            Err(ClockOpError::StepBeforeEpoch(_))
        ));
        // A driver refusal is a typed error and changes nothing.
        assert!(matches!(
            c.step_clock(PtpDuration::from_nanos(13)),
            Err(ClockOpError::Driver(_))
        ));
        assert_eq!(lock(&st).steps, 1);
    }
}
