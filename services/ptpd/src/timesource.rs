//! The time-source role (linuxptp ts2phc's job): a clock whose PHC follows a pulse per second
//! on one of its pins, the second's number from a time-of-day source, with its own servo; the
//! state it reaches becomes the grandmaster's clockClass when ptpd serves PTP from that clock
//! (6 locked to the source, 7 in holdover, 248 free-running).
//!
//! Configured per clock in a `[clock.ts2phc]` table, with ts2phc's names:
//!
//! ```toml
//! [clock.ts2phc]
//! pin_index = 1              # the SDP the PPS is wired to
//! channel = 0                # its external-timestamp channel
//! extts_polarity = "rising"  # the edge on the second: rising, falling, or both (= rising)
//! pulsewidth = 100000000     # ns: tells the pulse's two edges apart (the parts stamp both)
//! extts_correction = 0       # ns added to every stamp (cable, receiver delay)
//! holdover = 60              # s of holdover (clockClass 7) before free-running (248)
//! utc_offset = 37            # TAI − UTC: the time of day is CLOCK_REALTIME + this
//! pi_proportional_const = 0.7
//! pi_integral_const = 0.3
//! step_threshold = 0.00002   # s: a larger offset is stepped (ts2phc: first_step_threshold)
//! servo_offset_threshold = 1000  # ns: locked when this many ...
//! servo_num_offset_values = 4    # ... offsets in a row are within it
//! tod_source = "generic"     # or "nmea": the receiver's RMC sentences from ...
//! nmea_serialport = "/dev/ttyS0" # ... this port (a serial device, or a FIFO)
//! ```
//!
//! The time of day is ts2phc's "generic" source by default: the second a pulse belongs to is the
//! nearest second of CLOCK_REALTIME + `utc_offset` when ptpd received its stamp, so the host's
//! clock must be within half a second (NTP). The two edges of a pulse are told apart the same
//! way: the on-time edge arrives within `pulsewidth / 2` of a second. With `tod_source = "nmea"`
//! the host's clock plays no part: the receiver's RMC sentences name the seconds ([`nmea`]) and
//! the edges are told apart by their spacing (`pulsewidth` then must not be near half a
//! second).

pub mod nmea;

use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use ptp_ipc::{ClockError, DriverReply, DriverRequest, PinFunction};
use serde::Deserialize;

use crate::driver_link::{Connector, DriverLink};
use crate::scheme::ClockScheme;

const NS: i64 = 1_000_000_000;
/// How often the runner looks for stamps.
const POLL: Duration = Duration::from_millis(20);
/// No on-time stamp for this long: holdover.
const PULSE_LOST_NS: u64 = 1_500_000_000;

/// `[clock.ts2phc]` as written.
#[derive(Debug, Clone, Deserialize, PartialEq, Default)]
#[serde(deny_unknown_fields)]
pub struct Ts2phcOptions {
    pub pin_index: Option<u8>,
    pub channel: Option<u8>,
    pub extts_polarity: Option<String>,
    pub pulsewidth: Option<u64>,
    pub extts_correction: Option<i64>,
    pub holdover: Option<u64>,
    pub utc_offset: Option<i16>,
    pub pi_proportional_const: Option<f64>,
    pub pi_integral_const: Option<f64>,
    pub step_threshold: Option<f64>,
    pub servo_offset_threshold: Option<u64>,
    pub servo_num_offset_values: Option<u32>,
    pub tod_source: Option<String>,
    pub nmea_serialport: Option<std::path::PathBuf>,
}

/// Where the second's number comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TodSource {
    /// The host's CLOCK_REALTIME (ts2phc's "generic").
    Generic,
    /// The receiver's RMC sentences on this port.
    Nmea(std::path::PathBuf),
}

/// Which edge marks the second.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Polarity {
    Rising,
    Falling,
}

/// The validated settings.
#[derive(Debug, Clone, PartialEq)]
pub struct Ts2phcSettings {
    pub pin: u8,
    pub channel: u8,
    pub polarity: Polarity,
    pub pulsewidth_ns: u64,
    pub correction_ns: i64,
    pub holdover_s: u64,
    pub utc_offset_s: i16,
    pub kp: f64,
    pub ki: f64,
    pub step_threshold_ns: f64,
    pub lock_threshold_ns: u64,
    pub lock_count: u32,
    pub tod: TodSource,
}

/// A `[clock.ts2phc]` value out of range.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum Ts2phcError {
    #[error("ts2phc.{key} = {value}: {why}")]
    Bad {
        key: &'static str,
        value: String,
        why: &'static str,
    },
}

fn bad(key: &'static str, value: impl std::fmt::Display, why: &'static str) -> Ts2phcError {
    Ts2phcError::Bad {
        key,
        value: value.to_string(),
        why,
    }
}

impl Ts2phcOptions {
    /// The settings, each default ts2phc's unless the docs above say otherwise.
    pub fn resolve(&self) -> Result<Ts2phcSettings, Ts2phcError> {
        let pin = self.pin_index.unwrap_or(0);
        if usize::from(pin) >= 4 {
            return Err(bad("pin_index", pin, "the parts have SDP0..SDP3"));
        }
        let channel = self.channel.unwrap_or(0);
        if channel >= 2 {
            return Err(bad("channel", channel, "the parts have channels 0 and 1"));
        }
        let polarity = match self.extts_polarity.as_deref().unwrap_or("rising") {
            "rising" | "both" => Polarity::Rising,
            "falling" => Polarity::Falling,
            p => return Err(bad("extts_polarity", p, "rising, falling or both")),
        };
        let pulsewidth_ns = self.pulsewidth.unwrap_or(500_000_000);
        if !(1_000_000..=999_000_000).contains(&pulsewidth_ns) {
            return Err(bad("pulsewidth", pulsewidth_ns, "1000000..=999000000 ns"));
        }
        let kp = self.pi_proportional_const.unwrap_or(0.7);
        let ki = self.pi_integral_const.unwrap_or(0.3);
        if !(kp.is_finite() && ki.is_finite() && kp > 0.0 && ki > 0.0 && kp < 2.0 && ki < 1.0) {
            return Err(bad(
                "pi_*_const",
                format!("{kp}, {ki}"),
                "0 < kp < 2, 0 < ki < 1",
            ));
        }
        let step = self.step_threshold.unwrap_or(0.00002);
        if !(step.is_finite() && step >= 0.0) {
            return Err(bad("step_threshold", step, "seconds ≥ 0"));
        }
        let lock_count = self.servo_num_offset_values.unwrap_or(4);
        if lock_count == 0 {
            return Err(bad("servo_num_offset_values", 0, "at least 1"));
        }
        let tod = match (
            self.tod_source.as_deref().unwrap_or("generic"),
            &self.nmea_serialport,
        ) {
            ("generic", _) => TodSource::Generic,
            ("nmea", Some(p)) => TodSource::Nmea(p.clone()),
            ("nmea", None) => return Err(bad("nmea_serialport", "(none)", "nmea needs a port")),
            (t, _) => return Err(bad("tod_source", t, "generic or nmea")),
        };
        if tod != TodSource::Generic && (400_000_000..=600_000_000).contains(&pulsewidth_ns) {
            return Err(bad(
                "pulsewidth",
                pulsewidth_ns,
                "with nmea the edges are told by their spacing: not 400-600 ms",
            ));
        }
        Ok(Ts2phcSettings {
            pin,
            channel,
            polarity,
            pulsewidth_ns,
            correction_ns: self.extts_correction.unwrap_or(0),
            holdover_s: self.holdover.unwrap_or(60),
            utc_offset_s: self.utc_offset.unwrap_or(37),
            kp,
            ki,
            step_threshold_ns: step * 1e9,
            lock_threshold_ns: self.servo_offset_threshold.unwrap_or(1000),
            lock_count,
            tod,
        })
    }
}

/// Where the clock stands against its source.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum SourceState {
    /// No source yet, or holdover ran out.
    #[default]
    FreeRun = 1,
    /// Following the pulses.
    Locked = 2,
    /// Pulses lost: the last frequency kept.
    Holdover = 3,
}

impl SourceState {
    /// The clockClass a grandmaster on this clock announces (IEEE 1588-2019 Table 4: 6 synced to
    /// a primary reference, 7 in holdover within specification, 248 default).
    pub fn clock_class(self) -> u8 {
        match self {
            Self::Locked => 6,
            Self::Holdover => 7,
            Self::FreeRun => 248,
        }
    }

    /// clockAccuracy (Table 5): 0x21 within 100 ns while locked, 0x23 within 1 µs in holdover,
    /// 0xFE unknown.
    pub fn clock_accuracy(self) -> u8 {
        match self {
            Self::Locked => 0x21,
            Self::Holdover => 0x23,
            Self::FreeRun => 0xFE,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Self::Locked => "LOCKED",
            Self::Holdover => "HOLDOVER",
            Self::FreeRun => "FREERUN",
        }
    }
}

/// What a grandmaster on the source's clock announces: its clockQuality (class, accuracy, the
/// offsetScaledLogVariance statime uses) and its time properties, overriding the configured
/// ones (`timeSource` GNSS 0x20 while the source holds, internal oscillator 0xA0 when free;
/// time and frequency traceable and the UTC offset valid while locked or in holdover).
pub fn announced_properties(
    state: SourceState,
    base: &crate::ptp::config::TimeProperties,
    utc_offset_s: i16,
) -> (u8, u8, crate::ptp::config::TimeProperties) {
    let traceable = state != SourceState::FreeRun;
    let tp = crate::ptp::config::TimeProperties {
        ptp_timescale: true,
        utc_offset: if traceable {
            utc_offset_s
        } else {
            base.utc_offset
        },
        utc_offset_valid: traceable || base.utc_offset_valid,
        time_traceable: traceable,
        frequency_traceable: traceable,
        time_source: if traceable { 0x20 } else { 0xA0 },
    };
    (state.clock_class(), state.clock_accuracy(), tp)
}

/// What the runner last saw: for status, management and the Announces.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct SourceSnapshot {
    pub clock: usize,
    /// TAI − UTC the source's time of day carries.
    pub utc_offset_s: i16,
    pub state: SourceState,
    /// The last on-time stamp minus its second, ns.
    pub offset_ns: i64,
    /// The frequency the servo set, ppb.
    pub freq_ppb: f64,
    pub pulses: u64,
    pub steps: u64,
}

/// Shared between the runner (writes) and the engine and the clock scheme (read).
#[derive(Debug, Clone, Default)]
pub struct SourceBoard(Arc<Mutex<Option<SourceSnapshot>>>);

impl SourceBoard {
    pub fn get(&self) -> Option<SourceSnapshot> {
        *self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn set(&self, s: SourceSnapshot) {
        *self.0.lock().unwrap_or_else(|e| e.into_inner()) = Some(s);
    }
}

/// What the servo asks of the clock after a sample.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ServoAction {
    /// Step the clock by this many ns.
    Step(i64),
    /// Run at this frequency offset, ppb.
    Freq(f64),
}

/// ts2phc's PI servo at one sample a second (linuxptp `pi.c` at a 1 s interval: frequency =
/// kp·offset + the integral of ki·offset, ppb per ns). As `pi.c` starts: the first sample is
/// kept, the second gives the frequency error (their difference over the second) and, if
/// beyond the threshold, a step (typically the TAI − UTC and wall-clock error of a PHC set to
/// the host's time); then the loop. Later an offset beyond the threshold is stepped again.
#[derive(Debug, Clone, PartialEq)]
pub struct PpsServo {
    kp: f64,
    ki: f64,
    step_ns: f64,
    max_ppb: f64,
    /// The integral, ppb.
    drift: f64,
    /// The sample after a step is dropped: the stamp may predate the step.
    skip: bool,
    /// The first sample, until the second comes; `None` once running.
    first: Option<Option<i64>>,
}

impl PpsServo {
    /// A servo starting from the frequency `freq_ppb` already in force.
    pub fn new(s: &Ts2phcSettings, freq_ppb: f64, max_ppb: f64) -> Self {
        Self {
            kp: s.kp,
            ki: s.ki,
            step_ns: s.step_threshold_ns,
            max_ppb,
            drift: freq_ppb,
            skip: false,
            first: Some(None),
        }
    }

    /// One on-time offset (PHC − source, ns); `None`: the sample was dropped.
    pub fn sample(&mut self, offset_ns: i64) -> Option<ServoAction> {
        if std::mem::take(&mut self.skip) {
            return None;
        }
        match self.first {
            Some(None) => {
                self.first = Some(Some(offset_ns));
                return None;
            }
            Some(Some(o1)) => {
                self.first = None;
                // The PHC gained (offset_ns − o1) ns in a second: run that much slower.
                let err = offset_ns.saturating_sub(o1) as f64;
                self.drift = (self.drift - err).clamp(-self.max_ppb, self.max_ppb);
                if self.step_ns > 0.0 && (offset_ns as f64).abs() > self.step_ns {
                    self.skip = true;
                    return Some(ServoAction::Step(-offset_ns));
                }
                return Some(ServoAction::Freq(self.drift));
            }
            None => {}
        }
        let off = offset_ns as f64;
        if self.step_ns > 0.0 && off.abs() > self.step_ns {
            self.skip = true;
            return Some(ServoAction::Step(-offset_ns));
        }
        self.drift = (self.drift - self.ki * off).clamp(-self.max_ppb, self.max_ppb);
        Some(ServoAction::Freq(
            (self.drift - self.kp * off).clamp(-self.max_ppb, self.max_ppb),
        ))
    }

    /// The integral (the frequency kept in holdover), ppb.
    pub fn drift(&self) -> f64 {
        self.drift
    }
}

/// Which second an edge stamped when the host's TAI read `tai_ns` belongs to, and whether it is
/// the on-time edge (arrived within `pulsewidth/2` of a second for the rising polarity, of a
/// second + pulsewidth for the falling one).
pub fn classify(tai_ns: i128, polarity: Polarity, pulsewidth_ns: u64) -> Option<i128> {
    let shift = match polarity {
        Polarity::Rising => 0,
        Polarity::Falling => i128::from(pulsewidth_ns),
    };
    let t = tai_ns - shift;
    let second = (t + i128::from(NS) / 2).div_euclid(i128::from(NS));
    let off = (t - second * i128::from(NS)).abs();
    (off < i128::from(pulsewidth_ns) / 2).then_some(second)
}

/// The lock rule: `count` offsets in a row within `threshold`.
#[derive(Debug, Clone, Default)]
struct LockRule {
    in_a_row: u32,
}

/// Starts the runner for clock `clock` of `scheme`; it stops when the scheme is dropped.
pub fn spawn<C: Connector>(
    scheme: &Arc<ClockScheme<C>>,
    clock: usize,
    s: Ts2phcSettings,
    board: SourceBoard,
) -> std::io::Result<()> {
    let weak = Arc::downgrade(scheme);
    std::thread::Builder::new()
        .name(format!("ts2phc:{clock}"))
        .spawn(move || run(&weak, clock, &s, &board))
        .map(|_| ())
}

/// The runner's memory across samples.
struct Runner {
    servo: Option<PpsServo>,
    lock: LockRule,
    snap: SourceSnapshot,
    cursor: u64,
    last_pulse_mono: Option<u64>,
    configured: bool,
    /// With the NMEA source: its RMCs, and the edge classifier.
    tod: Option<Arc<Mutex<nmea::TodTrack>>>,
    gaps: nmea::EdgeGaps,
}

fn run<C: Connector>(
    scheme: &Weak<ClockScheme<C>>,
    clock: usize,
    s: &Ts2phcSettings,
    board: &SourceBoard,
) {
    let mut r = Runner {
        servo: None,
        lock: LockRule::default(),
        snap: SourceSnapshot {
            clock,
            utc_offset_s: s.utc_offset_s,
            ..SourceSnapshot::default()
        },
        cursor: 0,
        last_pulse_mono: None,
        configured: false,
        tod: None,
        gaps: nmea::EdgeGaps::default(),
    };
    if let TodSource::Nmea(port) = &s.tod {
        let track = Arc::new(Mutex::new(nmea::TodTrack::default()));
        if let Err(e) = nmea::spawn_reader(port, track.clone()) {
            log::error!("time source: cannot read {}: {e}", port.display());
        }
        r.tod = Some(track);
    }
    board.set(r.snap);
    log::info!(
        "clock {clock}: time source on SDP{} (EXTTS {}), {:?} edge, pulse width {} ms",
        s.pin,
        s.channel,
        s.polarity,
        s.pulsewidth_ns / 1_000_000
    );
    while let Some(scheme) = scheme.upgrade() {
        let Some(link) = scheme.links().get(clock) else {
            return;
        };
        step(&mut r, link, scheme.timeout(), s);
        board.set(r.snap);
        drop(scheme);
        std::thread::sleep(POLL);
    }
}

/// One look: configure the pin if needed, take the new stamps, steer, update the state.
fn step<C: Connector>(r: &mut Runner, link: &DriverLink<C>, timeout: Duration, s: &Ts2phcSettings) {
    if !r.configured {
        r.configured = configure(link, timeout, s).is_ok();
        if !r.configured {
            return;
        }
        let (next, _, _) = link.ext_ts_after(u64::MAX);
        r.cursor = next.saturating_sub(1);
    }
    if r.servo.is_none() {
        // From the frequency in force (a restarted ptpd keeps the PHC as it runs), bounded by
        // the part's range.
        let freq = match link.request(DriverRequest::GetFreq, timeout) {
            Ok(DriverReply::Freq { scaled_ppm }) => scaled_ppm as f64 / 65.536,
            _ => return,
        };
        let max = match link.request(DriverRequest::Caps, timeout) {
            Ok(DriverReply::Caps(c)) => f64::from(c.max_adj_ppb),
            _ => return,
        };
        r.servo = Some(PpsServo::new(s, freq, max));
    }
    let (first, _, events) = link.ext_ts_after_timed(r.cursor);
    if let Some(n) = (events.len() as u64).checked_sub(1) {
        r.cursor = first + n;
    }
    for (e, sys_ns) in events {
        if e.chan != s.channel {
            continue;
        }
        let Some(second) = name_second(r, s, e.ns, sys_ns) else {
            continue;
        };
        let offset = (i128::from(e.ns) + i128::from(s.correction_ns) - second * i128::from(NS))
            .clamp(i128::from(i64::MIN), i128::from(i64::MAX)) as i64;
        r.snap.pulses += 1;
        r.last_pulse_mono = Some(ptp_ipc::time::mono_ns());
        steer(r, link, timeout, s, offset);
    }
    let lost = r
        .last_pulse_mono
        .is_none_or(|t| ptp_ipc::time::mono_ns().saturating_sub(t) > PULSE_LOST_NS);
    if lost && r.snap.state == SourceState::Locked {
        log::warn!("time source: pulses lost; holdover");
        r.snap.state = SourceState::Holdover;
        r.lock.in_a_row = 0;
    }
    let holdover_over = r.last_pulse_mono.is_none_or(|t| {
        ptp_ipc::time::mono_ns().saturating_sub(t) > s.holdover_s * NS as u64 + PULSE_LOST_NS
    });
    if r.snap.state == SourceState::Holdover && holdover_over {
        log::warn!("time source: holdover over; free-running");
        r.snap.state = SourceState::FreeRun;
    }
}

/// The TAI second an edge stamped `ns` (arrived at CLOCK_REALTIME `sys_ns`) marks, or `None`
/// if it is not an on-time edge or no time of day names it.
fn name_second(r: &mut Runner, s: &Ts2phcSettings, ns: u64, sys_ns: u64) -> Option<i128> {
    let offset = i128::from(s.utc_offset_s);
    match &r.tod {
        None => {
            let tai = i128::from(sys_ns) + offset * i128::from(NS);
            classify(tai, s.polarity, s.pulsewidth_ns)
        }
        Some(track) => {
            let falling = s.polarity == Polarity::Falling;
            if !r.gaps.on_time(ns, s.pulsewidth_ns, falling) {
                return None;
            }
            let utc = track
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .second_of(sys_ns)?;
            Some(i128::from(utc) + offset)
        }
    }
}

/// Sets the pin to EXTTS on the channel and turns the channel on (the link re-applies both
/// after a driver restart).
fn configure<C: Connector>(
    link: &DriverLink<C>,
    timeout: Duration,
    s: &Ts2phcSettings,
) -> Result<(), ClockError> {
    let reqs = [
        DriverRequest::SetPin {
            pin: s.pin,
            func: PinFunction::ExtTs,
            chan: s.channel,
        },
        DriverRequest::ExtTs {
            chan: s.channel,
            on: true,
        },
    ];
    for q in reqs {
        match link.pin_request(q, timeout)? {
            DriverReply::Done => {}
            DriverReply::Error(e) => {
                log::warn!("time source: the driver refused the pin: {e:?}");
                return Err(crate::driver_link::clock_error(&e));
            }
            _ => return Err(ClockError::Io),
        }
    }
    Ok(())
}

/// One on-time offset through the servo to the clock, and the lock rule.
fn steer<C: Connector>(
    r: &mut Runner,
    link: &DriverLink<C>,
    timeout: Duration,
    s: &Ts2phcSettings,
    offset: i64,
) {
    r.snap.offset_ns = offset;
    let Some(servo) = r.servo.as_mut() else {
        return;
    };
    let fine = |ppb: f64| DriverRequest::AdjFine {
        scaled_ppm: (ppb * 65.536).round() as i64,
    };
    let reqs = match servo.sample(offset) {
        None => return,
        Some(ServoAction::Step(d)) => {
            r.snap.steps += 1;
            r.snap.freq_ppb = servo.drift();
            log::info!("time source: offset {offset} ns; stepping the clock by {d} ns");
            vec![DriverRequest::AdjTime { delta_ns: d }, fine(servo.drift())]
        }
        Some(ServoAction::Freq(ppb)) => {
            r.snap.freq_ppb = ppb;
            vec![fine(ppb)]
        }
    };
    for req in reqs {
        if let Err(e) = link.request(req, timeout) {
            log::warn!("time source: steering the clock failed: {e:?}");
            return;
        }
    }
    if offset.unsigned_abs() <= s.lock_threshold_ns {
        r.lock.in_a_row += 1;
    } else {
        r.lock.in_a_row = 0;
    }
    let locked = r.lock.in_a_row >= s.lock_count;
    if locked && r.snap.state != SourceState::Locked {
        log::info!("time source: locked (offset {offset} ns)");
        r.snap.state = SourceState::Locked;
    } else if !locked && r.snap.state == SourceState::Locked && r.lock.in_a_row == 0 {
        log::warn!("time source: offset {offset} ns; lock lost");
        r.snap.state = SourceState::FreeRun;
    } else if r.snap.state == SourceState::Holdover && !locked {
        // Pulses are back but not yet locked: no longer holding over.
        r.snap.state = SourceState::FreeRun;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings() -> Ts2phcSettings {
        Ts2phcOptions::default().resolve().unwrap()
    }

    #[test]
    fn options_resolve_with_typed_errors() {
        let s = settings();
        assert_eq!((s.pin, s.channel, s.polarity), (0, 0, Polarity::Rising));
        let o = |f: fn(&mut Ts2phcOptions)| {
            let mut o = Ts2phcOptions::default();
            f(&mut o);
            o.resolve()
        };
        assert!(o(|o| o.pin_index = Some(4)).is_err());
        assert!(o(|o| o.channel = Some(2)).is_err());
        assert!(o(|o| o.extts_polarity = Some("up".into())).is_err());
        assert!(o(|o| o.pulsewidth = Some(999_000_001)).is_err());
        assert!(o(|o| o.pi_proportional_const = Some(f64::NAN)).is_err());
        assert!(o(|o| o.step_threshold = Some(-1.0)).is_err());
        assert!(o(|o| o.servo_num_offset_values = Some(0)).is_err());
        assert_eq!(
            o(|o| o.extts_polarity = Some("both".into()))
                .unwrap()
                .polarity,
            Polarity::Rising
        );
    }

    #[test]
    fn the_on_time_edge_is_told_from_the_other_by_its_arrival() {
        let pw = 100_000_000;
        let s = 1_700_000_000i128 * NS as i128;
        assert_eq!(
            classify(s + 3_000_000, Polarity::Rising, pw),
            Some(1_700_000_000)
        );
        assert_eq!(
            classify(s - 3_000_000, Polarity::Rising, pw),
            Some(1_700_000_000)
        );
        // The falling edge 100 ms on is not the on-time one.
        assert_eq!(
            classify(s + 100_000_000 + 3_000_000, Polarity::Rising, pw),
            None
        );
        assert_eq!(
            classify(s + 100_000_000 + 3_000_000, Polarity::Falling, pw),
            Some(1_700_000_000)
        );
        assert_eq!(classify(s + 3_000_000, Polarity::Falling, pw), None);
    }

    /// A PHC 37 s and 40 ppm off, stamped once a second: one step, then the PI loop brings the
    /// offset under 1 ns and holds it there.
    #[test]
    fn the_servo_steps_once_and_then_converges() {
        let s = settings();
        let mut servo = PpsServo::new(&s, 0.0, 62_499_999.0);
        let (mut phc_off, osc_ppb): (f64, f64) = (37.0e9 + 1234.0, 40_000.0);
        let mut freq = 0.0;
        let (mut steps, mut last) = (0, f64::MAX);
        for _ in 0..60 {
            match servo.sample(phc_off.round() as i64) {
                Some(ServoAction::Step(d)) => {
                    steps += 1;
                    phc_off += d as f64;
                    freq = servo.drift();
                }
                Some(ServoAction::Freq(f)) => freq = f,
                None => {}
            }
            phc_off += osc_ppb + freq;
            last = phc_off;
        }
        assert_eq!(steps, 1);
        assert!(last.abs() < 1.0, "offset after a minute: {last} ns");
        assert!(
            (servo.drift() + osc_ppb).abs() < 1.0,
            "drift {}",
            servo.drift()
        );
    }
}
