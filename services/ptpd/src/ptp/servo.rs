//! ptpd's PI servo (`clock_servo = "pi"`, the default): ptp4l's PI loop (linuxptp `pi.c`: the
//! proportional and integral constants scaled by the sync interval, a frequency estimate before
//! the loop starts, anti-windup at the frequency bound; its option names) behind an acquisition
//! phase that steps the clock only on a consistent estimate.
//!
//! Acquisition collects [`FIT_SAMPLES`] Sync offsets and fits a line to them: the slope is the
//! frequency error, the line's value at the last Sync the offset. It ends only once the path
//! delay has [`DELAY_SETTLE`] samples and both the fit's residuals and the delay samples spread
//! less than `PiServo::tolerance`; then the clock is stepped if the offset is beyond the step
//! threshold (`first_step_threshold` the first time, then `step_threshold`), and the loop
//! starts from the fitted frequency. A step therefore leaves at most the tolerance behind, a
//! quarter of the threshold, so noise cannot step the clock back. The delay is paired from
//! this servo's own Sync and Delay_Resp samples and a pair spanning a step is discarded
//! (statime pairs across steps, and a delay off by half a step made a 20 µs threshold step to
//! and fro on an asymmetric cable).
//!
//! In the loop a sample beyond `step_threshold` is not fed to the PI: [`STEP_CONFIRM`] of them
//! in a row restart acquisition (which steps if they agree), fewer are outliers.

use statime::Clock;
use statime::filters::{Filter, FilterEstimate, FilterUpdate};
use statime::port::Measurement;
use statime::time::Duration as PtpDuration;

use super::clock::time_ns;

/// The PI servo's settings, in ptp4l's names (ptp4l(8)).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PiConfig {
    /// `pi_proportional_const`; 0 = ptp4l's hardware default, 0.7 scaled by the sync interval.
    pub kp: f64,
    /// `pi_integral_const`; 0 = ptp4l's hardware default, 0.3 scaled by the sync interval.
    pub ki: f64,
    /// `step_threshold`, ns; 0 = never step after the first update.
    pub step_threshold_ns: f64,
    /// `first_step_threshold`, ns; 0 = never step on the first update.
    pub first_step_threshold_ns: f64,
    /// The bound of the servo's frequency, ppb (`max_frequency`, the driver's limit).
    pub max_frequency_ppb: f64,
    /// `delay_filter_length`: the path delay is the median of this many samples.
    pub delay_filter_length: usize,
}

impl Default for PiConfig {
    /// ptp4l's defaults (`first_step_threshold` 20 µs, `delay_filter_length` 10), except
    /// `step_threshold`: 20 µs too (ptp4l: 0, never), so a grandmaster that changes time by
    /// more is stepped to rather than slewed for seconds; the step policy keeps noise,
    /// outliers and an asymmetric cable from stepping (module docs).
    fn default() -> Self {
        Self {
            kp: 0.0,
            ki: 0.0,
            step_threshold_ns: 20_000.0,
            first_step_threshold_ns: 20_000.0,
            max_frequency_ppb: 500_000.0,
            delay_filter_length: 10,
        }
    }
}

/// Sync samples the acquisition fits (ptp4l's pi.c uses 2; 4 tolerate a jittery sample).
pub const FIT_SAMPLES: usize = 4;
/// Path-delay samples needed before the delay counts as settled.
pub const DELAY_SETTLE: usize = 3;
/// Samples beyond `step_threshold` in a row that restart acquisition.
pub const STEP_CONFIRM: usize = 3;
/// Acquisition windows (of [`FIT_SAMPLES`]) tried for a consistent estimate before the loop
/// starts anyway, without a step.
pub const MAX_WINDOWS: usize = 4;
/// The smallest tolerance, ns: below it the estimate counts as consistent whatever the
/// threshold (8 ns stamp quantisation and a few ns of jitter).
pub const MIN_TOLERANCE_NS: f64 = 1_000.0;

#[derive(Debug, Clone, Copy, PartialEq)]
enum Phase {
    Acquire,
    /// The fitted offset is being slewed away at a fixed frequency until the local time
    /// `until` (ns); samples meanwhile are not fed to the loop.
    Slew {
        until: f64,
    },
    Loop,
}

/// ptp4l's PI servo with a consistent-estimate step policy (see the module docs).
#[derive(Debug)]
pub struct PiServo {
    cfg: PiConfig,
    phase: Phase,
    /// Whether the clock was updated since the servo started (`first_step_threshold` applies
    /// until then).
    updated: bool,
    /// (local time ns, raw Sync offset ns) of the acquisition window.
    window: Vec<(f64, f64)>,
    /// Samples seen in this acquisition.
    acquired: usize,
    /// The latest raw Sync offset taken since the last step, and its local time (ns).
    last_sync: Option<(f64, f64)>,
    /// Path-delay samples, newest last (at most `delay_filter_length`).
    delays: Vec<DelaySample>,
    /// The frequency in the loop's integral, ppb (relative to the frequency in force when the
    /// servo started: ptpd re-bases there).
    drift_ppb: f64,
    /// The frequency last set, ppb (same base): what a new fit's slope is relative to.
    applied_ppb: f64,
    kp: f64,
    ki: f64,
    /// Consecutive samples beyond `step_threshold` while in the loop.
    suspects: Vec<(f64, f64)>,
    /// Steps since the loop last ran (see [`MAX_STEPS_IN_ROW`]).
    steps_in_row: u32,
    last_offset_ns: f64,
    /// Consecutive loop samples within [`SETTLED_NS`].
    settled_run: usize,
    /// The loop's gains are kp / `narrow`, ki / `narrow`²: the same damping, `narrow` times
    /// the time constant. A narrower loop averages more timestamp noise (jitter, quantisation)
    /// into each correction, but removes a real offset as many times slower; so it narrows
    /// only while the offsets are noise around zero (see [`PiServo::adapt`]).
    narrow: f64,
    /// The last [`SETTLED_SAMPLES`] loop offsets, ns.
    recent: Vec<f64>,
}

/// |offset| within which loop samples count as settled (see `PiServo::narrow`), ns.
pub const SETTLED_NS: f64 = 1_000.0;
/// Loop samples in a row within [`SETTLED_NS`] before the loop first narrows (2 s at 8
/// Syncs/s).
pub const SETTLED_SAMPLES: usize = 16;
/// Steps in a row (each re-measured by a fresh fit) before what is left is slewed whatever its
/// size: a bus whose steps land microseconds off must not step forever.
pub const MAX_STEPS_IN_ROW: u32 = 2;
/// How long a fitted offset below the step threshold is slewed for, s (see `PiServo::slew`).
pub const SLEW_S: f64 = 1.0;
/// A mean offset below this never counts as one the loop must remove, ns. Small: with the
/// i225's 8 ns stamp quantum a 4–5 ns offset reads as a steady "4", whose spread is 0, and a
/// narrow loop kept it for tens of seconds (`ptplab --scenario loss-10pct`, seed 43).
pub const BIAS_FLOOR_NS: f64 = 1.0;
/// The narrowest loop: 8× ptp4l's time constant.
pub const MAX_NARROW: f64 = 8.0;

impl PiServo {
    /// The largest spread of the estimate that still allows a step: a quarter of the threshold
    /// in force, at least [`MIN_TOLERANCE_NS`], and an eighth of the offset (a large offset is
    /// stepped even through jitter, leaving at most that much to slew).
    fn tolerance(&self, offset_ns: f64) -> f64 {
        let thr = self.threshold();
        let quarter = if thr > 0.0 { thr / 4.0 } else { 0.0 };
        quarter.max(MIN_TOLERANCE_NS).max(offset_ns.abs() / 8.0)
    }

    /// The step threshold in force (ns; 0 = none).
    fn threshold(&self) -> f64 {
        if self.updated {
            self.cfg.step_threshold_ns
        } else {
            self.cfg.first_step_threshold_ns
        }
    }

    /// The loop's width from its offsets: back to ptp4l's gains on an offset beyond
    /// [`SETTLED_NS`]; half as narrow while the last [`SETTLED_SAMPLES`] offsets have a mean
    /// beyond their own standard deviation + [`BIAS_FLOOR_NS`] (an offset larger than the
    /// noise: the loop still has one to remove, and a narrow loop pays only where noise
    /// dominates; not the standard error, as a locked loop's offsets wander and are not
    /// independent); twice as narrow, up to [`MAX_NARROW`], once they have
    /// been noise around zero for (1 + `narrow`) × [`SETTLED_SAMPLES`] Syncs in a row (4, 6
    /// and 10 s at 8 Syncs/s).
    fn adapt(&mut self, offset: f64) {
        if offset.abs() > SETTLED_NS {
            self.settled_run = 0;
            self.narrow = 1.0;
            self.recent.clear();
            return;
        }
        self.settled_run += 1;
        self.recent.push(offset);
        if self.recent.len() > SETTLED_SAMPLES {
            self.recent.remove(0);
        }
        if self.recent.len() < SETTLED_SAMPLES {
            return;
        }
        let n = self.recent.len() as f64;
        let mean = self.recent.iter().sum::<f64>() / n;
        let var = self.recent.iter().map(|o| (o - mean).powi(2)).sum::<f64>() / (n - 1.0);
        if mean.abs() > var.sqrt() + BIAS_FLOOR_NS {
            if self.narrow > 1.0 {
                self.narrow /= 2.0;
                log::debug!("servo: loop widened to 1/{} of ptp4l's gains", self.narrow);
            }
            self.settled_run = 0;
        } else if self.narrow < MAX_NARROW
            && self.settled_run >= SETTLED_SAMPLES * (1 + self.narrow as usize)
        {
            self.narrow *= 2.0;
            log::debug!("servo: loop narrowed to 1/{} of ptp4l's gains", self.narrow);
        }
    }

    /// The median path delay, if any sample was taken.
    pub fn delay(&self) -> Option<f64> {
        self.delay_at(0.0)
    }

    /// The median path delay with each sample corrected for a frequency error of `slope`.
    fn delay_at(&self, slope: f64) -> Option<f64> {
        let v: Vec<f64> = self.delays.iter().map(|d| d.at(slope)).collect();
        median(&v)
    }

    fn add_delay(&mut self, d: DelaySample) {
        self.delays.push(d);
        let keep = self.cfg.delay_filter_length.max(1);
        if self.delays.len() > keep {
            self.delays.remove(0);
        }
    }

    /// Whether the delay is settled under a frequency error of `slope`: enough samples, the
    /// latest of them within `tol`.
    fn delay_settled(&self, slope: f64, tol: f64) -> bool {
        let n = self.delays.len();
        if n < DELAY_SETTLE {
            return false;
        }
        let v: Vec<f64> = self.delays[n - DELAY_SETTLE..]
            .iter()
            .map(|d| d.at(slope))
            .collect();
        spread(&v) <= tol
    }

    /// ptp4l's interval scaling of the hardware-timestamping constants (pi.c: kp = 0.7 ×
    /// interval^−0.3 at most 0.7 / interval, ki = 0.3 × interval^0.4 at most 0.3 / interval).
    fn set_constants(&mut self, interval_s: f64) {
        let i = interval_s.clamp(1.0 / 128.0, 64.0);
        self.kp = if self.cfg.kp > 0.0 {
            self.cfg.kp
        } else {
            (0.7 * i.powf(-0.3)).min(0.7 / i)
        };
        self.ki = if self.cfg.ki > 0.0 {
            self.cfg.ki
        } else {
            (0.3 * i.powf(0.4)).min(0.3 / i)
        };
    }

    fn clamp_ppb(&self, ppb: f64) -> f64 {
        ppb.clamp(-self.cfg.max_frequency_ppb, self.cfg.max_frequency_ppb)
    }

    fn set_freq<C: Clock>(&mut self, clock: &mut C, ppb: f64) {
        // The offset is slave − master: a positive one slows the clock.
        match clock.set_frequency(-ppb / 1000.0) {
            Ok(_) => self.applied_ppb = ppb,
            // The clock has logged why (and counted it).
            Err(e) => log::debug!("servo: set_frequency failed: {e:?}"),
        }
    }

    fn step<C: Clock>(&mut self, clock: &mut C, offset_ns: f64) {
        let d = PtpDuration::from_nanos(-offset_ns.round() as i64);
        match clock.step_clock(d) {
            Ok(_) => {
                // Offsets and a Sync taken before the step are on the old timescale.
                self.last_sync = None;
                self.window.clear();
            }
            Err(e) => log::error!("servo: step of {} ns failed: {e:?}", -offset_ns),
        }
    }

    /// One Sync sample in acquisition. Leaves for the loop once the estimate is consistent
    /// (or after [`MAX_WINDOWS`] windows).
    fn acquire<C: Clock>(&mut self, clock: &mut C, t: f64, raw: f64) {
        self.window.push((t, raw));
        self.acquired += 1;
        if self.window.len() > FIT_SAMPLES {
            self.window.remove(0);
        }
        if self.delays.is_empty() || self.window.len() < FIT_SAMPLES {
            return;
        }
        let Some(fit) = Fit::of(&self.window) else {
            self.window.clear();
            return;
        };
        // Delay samples pair a Sync with a later Delay_Req, across which the offset moved by
        // the frequency error: corrected by the fit's.
        let delay = self.delay_at(fit.slope).unwrap_or(0.0);
        let offset = fit.at_last - delay;
        let tol = self.tolerance(offset);
        let consistent = fit.max_residual <= tol && self.delay_settled(fit.slope, tol);
        if !consistent && self.acquired < MAX_WINDOWS * FIT_SAMPLES {
            return;
        }
        // From here on the frequency is corrected: the samples keep the correction.
        for d in &mut self.delays {
            *d = DelaySample::new(d.at(fit.slope), 0.0);
        }
        self.set_constants(fit.interval_s);
        self.drift_ppb = self.clamp_ppb(self.applied_ppb + fit.slope * 1e9);
        let thr = self.threshold();
        self.updated = true;
        self.window.clear();
        self.acquired = 0;
        // The loop starts over at ptp4l's gains: what it corrects next is fresh.
        self.narrow = 1.0;
        self.settled_run = 0;
        self.recent.clear();
        // Never on an inconsistent estimate: a step there could be undone by the next.
        if consistent && thr > 0.0 && offset.abs() > thr && self.steps_in_row < MAX_STEPS_IN_ROW {
            log::info!(
                "servo: stepping by {:.0} ns (fit of {} Syncs, residual {:.0} ns, delay {delay:.0} ns); frequency {:+.1} ppb",
                -offset,
                FIT_SAMPLES,
                fit.max_residual,
                -self.drift_ppb
            );
            self.step(clock, offset);
            self.steps_in_row += 1;
            self.last_offset_ns = 0.0;
            self.set_freq(clock, self.drift_ppb);
            // What the step left (a slow bus cannot step exactly) is measured again.
            return;
        }
        self.steps_in_row = 0;
        self.last_offset_ns = offset;
        self.slew(clock, t, offset);
    }

    /// Removes `offset` at a fixed frequency over [`SLEW_S`] (longer if that would pass half
    /// the frequency bound), then hands over to the loop: a deterministic correction of a
    /// well-measured offset, where the loop would take several of its time constants.
    fn slew<C: Clock>(&mut self, clock: &mut C, t: f64, offset: f64) {
        let secs = SLEW_S.max(offset.abs() / (self.cfg.max_frequency_ppb / 2.0));
        self.set_freq(clock, self.clamp_ppb(self.drift_ppb + offset / secs));
        self.phase = Phase::Slew {
            until: t + secs * 1e9,
        };
    }

    /// One Sync sample in the loop: ptp4l's PI update with anti-windup.
    fn run_loop<C: Clock>(&mut self, clock: &mut C, t: f64, offset: f64) {
        let thr = self.cfg.step_threshold_ns;
        if thr > 0.0 && offset.abs() > thr {
            self.suspects.push((t, offset));
            if self.suspects.len() >= STEP_CONFIRM {
                log::warn!(
                    "servo: {} Syncs beyond step_threshold ({:.0} ns now); acquiring again",
                    self.suspects.len(),
                    offset
                );
                let delay = self.delay().unwrap_or(0.0);
                self.window = self
                    .suspects
                    .drain(..)
                    .map(|(t, o)| (t, o + delay))
                    .collect();
                self.acquired = self.window.len();
                self.phase = Phase::Acquire;
            }
            return;
        }
        self.suspects.clear();
        self.last_offset_ns = offset;
        self.adapt(offset);
        let (kp, ki) = (self.kp / self.narrow, self.ki / (self.narrow * self.narrow));
        let ki_term = ki * offset;
        let ppb = kp * offset + self.drift_ppb + ki_term;
        let bounded = self.clamp_ppb(ppb);
        if bounded == ppb {
            self.drift_ppb += ki_term;
        }
        self.set_freq(clock, bounded);
    }

    fn update_out(&self) -> FilterUpdate {
        FilterUpdate {
            next_update: None,
            mean_delay: self
                .delay()
                .map(|d| PtpDuration::from_nanos(d.round() as i64)),
        }
    }
}

impl Filter for PiServo {
    type Config = PiConfig;

    fn new(cfg: PiConfig) -> Self {
        Self {
            cfg,
            phase: Phase::Acquire,
            updated: false,
            window: Vec::with_capacity(FIT_SAMPLES + 1),
            acquired: 0,
            last_sync: None,
            delays: Vec::new(),
            drift_ppb: 0.0,
            applied_ppb: 0.0,
            kp: 0.0,
            ki: 0.0,
            suspects: Vec::new(),
            steps_in_row: 0,
            last_offset_ns: 0.0,
            settled_run: 0,
            narrow: 1.0,
            recent: Vec::with_capacity(SETTLED_SAMPLES + 1),
        }
    }

    fn measurement<C: Clock>(&mut self, m: Measurement, clock: &mut C) -> FilterUpdate {
        let t = time_ns(m.event_time) as f64;
        if let Some(pd) = m.peer_delay {
            // Measured on the slave's clock alone: no offset in it.
            self.add_delay(DelaySample::new(pd.nanos_lossy(), 0.0));
        }
        if let Some(raw_delay) = m.raw_delay_offset {
            // Delay_Req (sent at `t`): pairs with the latest Sync not taken before a step.
            if let Some((t_sync, raw_sync)) = self.last_sync {
                let d = (raw_sync - raw_delay.nanos_lossy()) / 2.0;
                self.add_delay(DelaySample::new(d, t - t_sync));
            }
        }
        if let Some(raw) = m.raw_sync_offset {
            let raw = raw.nanos_lossy();
            self.last_sync = Some((t, raw));
            match self.phase {
                Phase::Acquire => self.acquire(clock, t, raw),
                Phase::Slew { until } if t < until => {}
                Phase::Slew { .. } => {
                    self.set_freq(clock, self.drift_ppb);
                    self.phase = Phase::Loop;
                    let delay = self.delay().unwrap_or(0.0);
                    self.run_loop(clock, t, raw - delay);
                }
                Phase::Loop => {
                    let delay = self.delay().unwrap_or(0.0);
                    self.run_loop(clock, t, raw - delay);
                }
            }
        }
        self.update_out()
    }

    fn update<C: Clock>(&mut self, _clock: &mut C) -> FilterUpdate {
        FilterUpdate::default()
    }

    /// The frequency in force stays (ptpd re-bases the next servo on it).
    fn demobilize<C: Clock>(self, _clock: &mut C) {}

    fn current_estimates(&self) -> FilterEstimate {
        FilterEstimate {
            offset_from_master: PtpDuration::from_nanos(self.last_offset_ns.round() as i64),
            mean_delay: PtpDuration::from_nanos(self.delay().unwrap_or(0.0).round() as i64),
        }
    }
}

/// One path-delay sample: (Sync offset − Delay_Req offset) / 2, and the time from that Sync to
/// that Delay_Req (ns, 0 once corrected). A frequency error `s` moves the offset by `s × dt`
/// between the two, so the delay is the value + `s × dt / 2`.
#[derive(Debug, Clone, Copy, PartialEq)]
struct DelaySample {
    value: f64,
    dt_ns: f64,
}

impl DelaySample {
    fn new(value: f64, dt_ns: f64) -> Self {
        Self { value, dt_ns }
    }

    fn at(&self, slope: f64) -> f64 {
        self.value + slope * self.dt_ns / 2.0
    }
}

/// A least-squares line through (time, offset) samples.
#[derive(Debug, Clone, Copy, PartialEq)]
struct Fit {
    /// ns per ns.
    slope: f64,
    /// The line's value at the last sample's time.
    at_last: f64,
    max_residual: f64,
    /// Mean time between samples, s.
    interval_s: f64,
}

impl Fit {
    /// `None` for fewer than 2 samples or samples not strictly later than the first.
    fn of(s: &[(f64, f64)]) -> Option<Fit> {
        let (t0, tn) = (s.first()?.0, s.last()?.0);
        if s.len() < 2 || tn <= t0 {
            return None;
        }
        let n = s.len() as f64;
        // Times relative to the first sample keep the sums well conditioned.
        let mt = s.iter().map(|p| p.0 - t0).sum::<f64>() / n;
        let mo = s.iter().map(|p| p.1).sum::<f64>() / n;
        let sxx: f64 = s.iter().map(|p| (p.0 - t0 - mt).powi(2)).sum();
        let sxy: f64 = s.iter().map(|p| (p.0 - t0 - mt) * (p.1 - mo)).sum();
        let slope = sxy / sxx;
        let line = |t: f64| mo + slope * (t - t0 - mt);
        let max_residual = s
            .iter()
            .map(|p| (p.1 - line(p.0)).abs())
            .fold(0.0, f64::max);
        Some(Fit {
            slope,
            at_last: line(tn),
            max_residual,
            interval_s: (tn - t0) / (n - 1.0) / 1e9,
        })
    }
}

fn median(v: &[f64]) -> Option<f64> {
    if v.is_empty() {
        return None;
    }
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    let m = s.len() / 2;
    Some(if s.len() % 2 == 1 {
        s[m]
    } else {
        (s[m - 1] + s[m]) / 2.0
    })
}

fn spread(v: &[f64]) -> f64 {
    let max = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let min = v.iter().copied().fold(f64::INFINITY, f64::min);
    max - min
}

#[cfg(test)]
mod tests {
    use statime::config::TimePropertiesDS;
    use statime::time::Time;

    use super::*;

    /// Records what the servo asks of the clock.
    #[derive(Default)]
    struct Rec {
        steps: Vec<i64>,
        freqs_ppm: Vec<f64>,
    }

    impl Clock for Rec {
        type Error = ();
        fn now(&self) -> Time {
            Time::from_nanos(0)
        }
        fn step_clock(&mut self, offset: PtpDuration) -> Result<Time, ()> {
            self.steps.push(offset.nanos_rounded() as i64);
            Ok(Time::from_nanos(0))
        }
        fn set_frequency(&mut self, ppm: f64) -> Result<Time, ()> {
            self.freqs_ppm.push(ppm);
            Ok(Time::from_nanos(0))
        }
        fn set_properties(&mut self, _: &TimePropertiesDS) -> Result<(), ()> {
            Ok(())
        }
    }

    const T0: u64 = 1_000_000_000_000;
    const SYNC: u64 = 125_000_000;

    fn sync(s: &mut PiServo, c: &mut Rec, i: u64, raw_ns: i64) {
        let m = Measurement {
            event_time: Time::from_nanos(T0 + i * SYNC),
            raw_sync_offset: Some(PtpDuration::from_nanos(raw_ns)),
            ..Measurement::default()
        };
        s.measurement(m, c);
    }

    /// A Delay_Req sent 10 ms after Sync `i` whose offset was `raw_delay_ns`.
    fn delay_req(s: &mut PiServo, c: &mut Rec, i: u64, raw_delay_ns: i64) {
        let m = Measurement {
            event_time: Time::from_nanos(T0 + i * SYNC + 10_000_000),
            raw_delay_offset: Some(PtpDuration::from_nanos(raw_delay_ns)),
            ..Measurement::default()
        };
        s.measurement(m, c);
    }

    /// Sync `i` and its Delay_Req on a 50 ns cable with the slave `off` ns ahead.
    fn exchange(s: &mut PiServo, c: &mut Rec, i: u64, off: i64) {
        sync(s, c, i, off + 50);
        delay_req(s, c, i, off - 50);
    }

    #[test]
    fn ptp4l_constants_scale_with_the_sync_interval() {
        let mut s = PiServo::new(PiConfig::default());
        s.set_constants(1.0);
        assert!((s.kp - 0.7).abs() < 1e-12 && (s.ki - 0.3).abs() < 1e-12);
        s.set_constants(0.125);
        assert!((s.kp - 0.7 * 0.125f64.powf(-0.3)).abs() < 1e-12, "{}", s.kp);
        assert!((s.ki - 0.3 * 0.125f64.powf(0.4)).abs() < 1e-12, "{}", s.ki);
        // Set constants win.
        let mut s = PiServo::new(PiConfig {
            kp: 0.5,
            ki: 0.05,
            ..PiConfig::default()
        });
        s.set_constants(0.125);
        assert_eq!((s.kp, s.ki), (0.5, 0.05));
    }

    #[test]
    fn a_consistent_offset_beyond_the_first_threshold_is_stepped_once_with_its_frequency() {
        let (mut s, mut c) = (PiServo::new(PiConfig::default()), Rec::default());
        // 1 ms ahead, gaining 10 ppm: 1250 ns per Sync, 100 ns by its Delay_Req.
        for i in 0..FIT_SAMPLES as u64 {
            let off = 1_000_000 + 1250 * i as i64;
            sync(&mut s, &mut c, i, off + 50);
            delay_req(&mut s, &mut c, i, off + 100 - 50);
        }
        assert_eq!(c.steps.len(), 1, "{:?}", c.steps);
        let expect = -(1_000_000 + 1250 * (FIT_SAMPLES as i64 - 1));
        assert!((c.steps[0] - expect).abs() <= 2, "{:?}", c.steps);
        // Slowed by 10 ppm (the Delay_Reqs' 10 ms lag corrected: the delay is the cable's).
        let f = *c.freqs_ppm.last().unwrap();
        assert!((f + 10.0).abs() < 0.01, "{f} ppm");
        assert!((s.delay().unwrap() - 50.0).abs() < 1.0, "{:?}", s.delay());
        // What the step left is measured again: 30 ns, slewed over a second at +30 ppb on
        // top of the frequency found, then the loop.
        assert_eq!(s.phase, Phase::Acquire);
        let k = FIT_SAMPLES as u64;
        for i in k..2 * k {
            sync(&mut s, &mut c, i, 30 + 50);
            delay_req(&mut s, &mut c, i, 30 - 50);
        }
        assert_eq!(c.steps.len(), 1, "{:?}", c.steps);
        assert!(matches!(s.phase, Phase::Slew { .. }), "{:?}", s.phase);
        let slew = *c.freqs_ppm.last().unwrap();
        assert!((slew - (f - 0.030)).abs() < 1e-6, "{slew} ppm");
        for i in 2 * k..2 * k + 8 {
            exchange(&mut s, &mut c, i, 0);
        }
        assert_eq!(s.phase, Phase::Loop);
    }

    #[test]
    fn below_the_first_threshold_nothing_is_stepped() {
        let (mut s, mut c) = (PiServo::new(PiConfig::default()), Rec::default());
        for i in 0..8 {
            exchange(&mut s, &mut c, i, 15_000);
        }
        assert!(c.steps.is_empty());
        assert!(!c.freqs_ppm.is_empty(), "the loop runs");
    }

    #[test]
    fn an_inconsistent_window_is_not_stepped_on() {
        let (mut s, mut c) = (PiServo::new(PiConfig::default()), Rec::default());
        // 100 µs ahead, one Sync 40 µs late in every window of 4: residuals beyond 5 µs.
        let raw = |i: u64| 100_000 + if i % 4 == 1 { 40_000 } else { 0 };
        for i in 0..(FIT_SAMPLES * MAX_WINDOWS - 1) as u64 {
            exchange(&mut s, &mut c, i, raw(i));
        }
        assert!(c.steps.is_empty(), "stepped on an inconsistent estimate");
        assert_eq!(s.phase, Phase::Acquire);
        // Once the windows run out the offset is slewed anyway, without a step.
        exchange(&mut s, &mut c, 99, raw(99));
        assert!(c.steps.is_empty());
        assert!(matches!(s.phase, Phase::Slew { .. }), "{:?}", s.phase);
    }

    #[test]
    fn a_delay_paired_with_a_sync_from_before_a_step_is_dropped() {
        let (mut s, mut c) = (PiServo::new(PiConfig::default()), Rec::default());
        for i in 0..FIT_SAMPLES as u64 {
            exchange(&mut s, &mut c, i, 1_000_000);
        }
        assert_eq!(c.steps.len(), 1);
        let n = s.delays.len();
        // The next Delay_Req, after the step, with no Sync since: no sample.
        delay_req(&mut s, &mut c, 10, -50);
        assert_eq!(s.delays.len(), n, "paired across the step");
        exchange(&mut s, &mut c, 11, 0);
        assert_eq!(s.delays.len(), n + 1);
    }

    #[test]
    fn an_outlier_is_not_fed_to_the_loop_and_three_in_a_row_are_stepped() {
        let (mut s, mut c) = (PiServo::new(PiConfig::default()), Rec::default());
        for i in 0..FIT_SAMPLES as u64 + 8 {
            exchange(&mut s, &mut c, i, 100);
        }
        let freqs = c.freqs_ppm.len();
        // One Sync 1 ms late: ignored.
        sync(&mut s, &mut c, 20, 1_000_100);
        assert_eq!(c.freqs_ppm.len(), freqs, "fed to the loop");
        exchange(&mut s, &mut c, 21, 100);
        assert_eq!(c.freqs_ppm.len(), freqs + 1);
        // The grandmaster's time moves by 300 µs for good: 3 suspects, then a consistent
        // window, then one step.
        for i in 30..30 + (STEP_CONFIRM + FIT_SAMPLES) as u64 {
            exchange(&mut s, &mut c, i, 300_100);
        }
        assert_eq!(c.steps.len(), 1, "{:?}", c.steps);
        assert!((c.steps[0] + 300_100).abs() < 100, "{:?}", c.steps);
    }

    #[test]
    fn the_loop_narrows_while_settled_and_widens_on_a_disturbance() {
        let (mut s, mut c) = (PiServo::new(PiConfig::default()), Rec::default());
        let mut i = 0;
        while s.narrow < MAX_NARROW && i < 1000 {
            exchange(&mut s, &mut c, i, 0);
            i += 1;
        }
        assert_eq!(s.narrow, MAX_NARROW, "after {i} Syncs");
        // 2 + 3 + 5 + 9 windows of 16 Syncs after the 4 of acquisition.
        // Acquisition, the slew's second (8 Syncs, the last one the loop's), then 5 × 16.
        assert_eq!(i as usize, FIT_SAMPLES + 7 + SETTLED_SAMPLES * 5);
        exchange(&mut s, &mut c, i, 5_000);
        assert_eq!(s.narrow, 1.0);
    }

    #[test]
    fn a_persistent_offset_widens_the_loop_and_noise_around_zero_does_not() {
        let (mut s, mut c) = (PiServo::new(PiConfig::default()), Rec::default());
        let mut i = 0;
        while s.narrow < MAX_NARROW && i < 1000 {
            exchange(&mut s, &mut c, i, 0);
            i += 1;
        }
        assert_eq!(s.narrow, MAX_NARROW);
        // ±8 ns of quantisation noise around zero: stays narrow.
        for k in 0..64 {
            exchange(&mut s, &mut c, i + k, if k % 2 == 0 { 8 } else { -8 });
        }
        assert_eq!(s.narrow, MAX_NARROW);
        // 12 and 20 ns, alternately: a 16 ns offset the narrow loop would take a minute over.
        for k in 64..64 + 3 * SETTLED_SAMPLES as u64 {
            exchange(&mut s, &mut c, i + k, if k % 2 == 0 { 12 } else { 20 });
        }
        assert_eq!(s.narrow, 1.0);
        // Narrow again, then a steady 4 ns (the 8 ns quantum's reading of a 4–5 ns offset):
        // no spread at all, and still an offset to remove.
        let mut k = 1000;
        while s.narrow < MAX_NARROW && k < 2000 {
            exchange(&mut s, &mut c, k, 0);
            k += 1;
        }
        assert_eq!(s.narrow, MAX_NARROW);
        for j in 0..3 * SETTLED_SAMPLES as u64 {
            exchange(&mut s, &mut c, k + j, 4);
        }
        assert_eq!(s.narrow, 1.0);
    }
}
