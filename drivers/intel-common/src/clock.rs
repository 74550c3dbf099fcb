//! PHC operations shared by every family (DESIGN.md §5): gettime, gettimex, settime, adjtime,
//! adjfine, and the clock-page sample that lets clients read the time without IPC or MMIO.
//!
//! A family supplies [`ClockHw`]: how to latch and read SYSTIM, how to write it, and how to turn
//! a frequency request into TIMINCA. Everything else — locking, range checks, the host-clock
//! bracket, the rate estimate — is written once here.

use std::sync::{Arc, Mutex, MutexGuard};

use ptp_ipc::TimeXSample;
use ptp_ipc::time::{mono_ns, realtime_ns};
use ptp_pci::Mmio;

use crate::{HwError, Regs};

/// One PHC reading and the host monotonic time it corresponds to.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PageSample {
    pub phc_ns: u64,
    pub mono_ns: u64,
    /// PHC rate relative to host monotonic, minus one, in ppb (an estimate).
    pub rate_ppb: f64,
}

impl PageSample {
    /// The PHC time this sample predicts at host monotonic time `mono`.
    pub fn extrapolate(&self, mono: u64) -> u64 {
        let dt = mono as i128 - self.mono_ns as i128;
        let adj = dt as f64 * (1.0 + self.rate_ppb * 1e-9);
        (self.phc_ns as i128 + adj as i128).max(0) as u64
    }
}

/// What a family's time-sync block must provide. Limits are methods, not constants: one
/// daemon (igbd) drives MACs with different ranges.
pub trait ClockHw: Send + Sync {
    /// Latched state between [`ClockHw::latch`] and [`ClockHw::finish`].
    type Latch: Copy;
    /// Largest |frequency adjustment| in ppb.
    fn max_adj_ppb(&self) -> u32;
    /// Largest PHC time the clock can hold, in ns.
    fn max_time_ns(&self) -> u64;
    /// Performs the one register read that samples the clock (i225: SYSTIML).
    fn latch<M: Mmio>(&self, regs: &Regs<M>) -> Self::Latch;
    /// Reads the rest of the latched value and returns the time in ns.
    fn finish<M: Mmio>(&self, regs: &Regs<M>, latch: Self::Latch) -> u64;
    /// Sets the time (already range-checked).
    fn write<M: Mmio>(&self, regs: &Regs<M>, ns: u64);
    /// Programs a frequency offset (already range-checked against max_adj_ppb).
    fn set_freq<M: Mmio>(&self, regs: &Regs<M>, scaled_ppm: i64);
    /// Steps a clock kept in software (a timecounter over the counter) by exactly `delta_ns`,
    /// as Linux's timecounter_adjtime, touching no register; false for a clock whose time is
    /// the hardware's (the caller then steps it by read-modify-write).
    fn step_exact(&self, delta_ns: i64) -> bool {
        let _ = delta_ns;
        false
    }
}

/// `scaled_ppm` (ppm with a 16-bit fraction) to ppb, as a float.
pub fn scaled_ppm_to_ppb(scaled_ppm: i64) -> f64 {
    scaled_ppm as f64 * 1000.0 / 65536.0
}

/// ppb to `scaled_ppm`, rounded to nearest.
pub fn ppb_to_scaled_ppm(ppb: f64) -> i64 {
    (ppb * 65536.0 / 1000.0).round() as i64
}

struct State {
    /// Current frequency request.
    scaled_ppm: i64,
    /// The last sample published.
    last: Option<PageSample>,
    /// The start of the current rate-estimation window: no step or frequency change since.
    anchor: Option<(u64, u64)>,
    /// Measured rate of the free oscillator relative to the host (ppb), without our adjfine.
    osc_rate_ppb: f64,
    /// Host time from computing a step's value to its SYSTIM write taking effect, as the last
    /// unpreempted read-back showed it; added ahead so the value is right when it lands.
    write_lead_ns: u64,
    steps: StepCounts,
    /// The narrowest latching-read bracket seen: the bus's own cost of one read.
    min_width_ns: u64,
}

/// What [`Phc::adjtime`] has done since start-up.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StepCounts {
    /// Steps applied.
    pub steps: u64,
    /// Correcting writes after a step's first write.
    pub corrections: u64,
    /// Steps whose read-back still missed the law after every correction.
    pub unverified: u64,
}

/// How one step landed, measured by reading the clock back (see [`Phc::adjtime_report`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StepReport {
    /// The last read-back minus the intended law at the read-back's host midpoint, ns.
    pub residual_ns: i64,
    /// What the step can be off by at most: |true step − requested step| ≤ this, ns.
    pub bound_ns: u64,
    /// Host-time widths of the base read's and the last read-back's brackets, ns.
    pub brackets_ns: (u64, u64),
    /// Correcting writes after the first.
    pub corrections: u32,
    /// Whether the residual ended within what the read-back can resolve.
    pub verified: bool,
}

/// A host-time bracket around the latching read wider than this (the thread was preempted)
/// is not used for the clock page or the rate estimate — unless the bus is that slow itself
/// (see [`precise_enough`]).
const MAX_BRACKET_NS: u64 = 20_000;

/// Whether a reading whose latching read took `width_ns` may anchor the clock page and the rate
/// estimate: within [`MAX_BRACKET_NS`], or within twice the narrowest bracket this bus has
/// shown. igcd under Redox on our model behind QEMU's proxy (issue 27) took 20-30 µs per read
/// even unpreempted: with the fixed bound the page held no sample for seconds after start-up
/// and `ptpctl bench` failed on it. A preempted read is still many times the floor.
fn precise_enough(st: &mut State, width_ns: u64) -> bool {
    st.min_width_ns = st.min_width_ns.min(width_ns);
    width_ns <= MAX_BRACKET_NS.max(st.min_width_ns.saturating_mul(2))
}
/// Minimum window before a rate measurement is trusted (host scheduling noise is ~µs).
const RATE_WINDOW_MIN_NS: u64 = 200_000_000;
/// Window after which the anchor moves forward, so the estimate follows oscillator wander.
const RATE_WINDOW_MAX_NS: u64 = 10_000_000_000;
/// Latching reads behind a step's base (all made, the narrowest kept) and at most behind each
/// read-back (until one is within [`MAX_BRACKET_NS`]): the brackets are the step's
/// uncertainty, and a read writes nothing, so trying again is free.
const STEP_READ_TRIES: u32 = 3;
/// Writes a step may add after its first when the read-back misses the law. Each can be
/// preempted as the first was; a bound keeps a step from looping on a loaded host.
const MAX_STEP_CORRECTIONS: u32 = 3;
/// Slack beyond half the read-back bracket before a step is corrected: the law and SYSTIM are
/// whole ns (one truncation each), plus float rounding of the rate.
const STEP_FLOOR_NS: u64 = 4;
/// How far the rate a step extrapolates with may be off the true one: before its first
/// estimate the driver assumes nominal, and a crystal may be ±100 ppm off.
const RATE_DOUBT: f64 = 100e-6;

type Publisher = Box<dyn Fn(&PageSample) + Send + Sync>;
type HostClock = Box<dyn Fn() -> u64 + Send + Sync>;

/// A PHC reading and the host-time bracket around its latching read.
#[derive(Debug, Clone, Copy)]
struct Reading {
    phc: u64,
    before: u64,
    after: u64,
}

impl Reading {
    fn width(&self) -> u64 {
        self.after.saturating_sub(self.before)
    }

    /// The host instant taken for the latch: at most half the width off.
    fn mid(&self) -> u64 {
        self.before + self.width() / 2
    }
}

/// What a step promises: the PHC reads `base + rate·(t − at)` at host instant `t`, i.e. the
/// clock as read at `at`, moved by the delta, running on at the estimated rate.
#[derive(Debug, Clone, Copy)]
struct StepLaw {
    base: i128,
    at: u64,
    rate: f64,
}

impl StepLaw {
    fn phc_at(&self, t: u64) -> i128 {
        self.base + ((t as i128 - self.at as i128) as f64 * self.rate).round() as i128
    }
}

/// One write of a step's law and the read-back that checks it.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    /// Host time just before the value was computed.
    computed: u64,
    check: Reading,
    residual: i64,
}

impl Attempt {
    /// The write latency this attempt shows. Its value was computed for `computed + lead` and
    /// read back `residual` off, so the write took effect `lead − residual` after `computed`
    /// — never before, and not after the read-back latched. `None` if the attempt spans a
    /// preemption, which says nothing about the bus.
    fn learned_lead(&self, lead: u64) -> Option<u64> {
        let span = self.check.after.saturating_sub(self.computed);
        (span <= MAX_BRACKET_NS)
            .then(|| (lead as i128 - self.residual as i128).clamp(0, span as i128) as u64)
    }
}

/// The PHC of one NIC. The lock plays the role of Linux's `tmreg_lock`: the SYSTIM latch is a
/// two-read sequence, so two threads (requests, the clock-page refresher) must not interleave.
/// It is a sleeping mutex, not a spin lock: in userspace the holder can be preempted, and a
/// spinning waiter would then burn a whole time slice.
pub struct Phc<M, H> {
    regs: Arc<Regs<M>>,
    hw: H,
    state: Mutex<State>,
    publisher: Option<Publisher>,
    /// Host CLOCK_MONOTONIC; a test may put a device model's virtual clock here.
    mono: HostClock,
    /// Host CLOCK_REALTIME (gettimex's brackets); a test may step it.
    wall: HostClock,
}

impl<M: Mmio, H: ClockHw> Phc<M, H> {
    pub fn new(regs: Arc<Regs<M>>, hw: H) -> Self {
        Self {
            regs,
            hw,
            state: Mutex::new(State {
                scaled_ppm: 0,
                last: None,
                anchor: None,
                osc_rate_ppb: 0.0,
                write_lead_ns: 0,
                steps: StepCounts::default(),
                min_width_ns: u64::MAX,
            }),
            publisher: None,
            mono: Box::new(mono_ns),
            wall: Box::new(realtime_ns),
        }
    }

    /// Reads host monotonic time from `f` instead of CLOCK_MONOTONIC (a deterministic test
    /// shares the device model's virtual clock this way).
    pub fn with_host_clock(mut self, f: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.mono = Box::new(f);
        self
    }

    /// Reads the host's wall clock from `f` instead of CLOCK_REALTIME (a test steps it back
    /// inside a gettimex bracket this way).
    pub fn with_wall_clock(mut self, f: impl Fn() -> u64 + Send + Sync + 'static) -> Self {
        self.wall = Box::new(f);
        self
    }

    fn now(&self) -> u64 {
        (self.mono)()
    }

    /// Calls `f` with every new [`PageSample`] (the daemon writes it to the clock page).
    /// Starts from the frequency offset the hardware already holds (a warm attach keeps
    /// TIMINCA), so requests and rate estimates build on it.
    pub fn with_freq(self, scaled_ppm: i64) -> Self {
        self.lock().scaled_ppm = scaled_ppm;
        self
    }

    pub fn with_publisher(mut self, f: impl Fn(&PageSample) + Send + Sync + 'static) -> Self {
        self.publisher = Some(Box::new(f));
        self
    }

    pub fn regs(&self) -> &Arc<Regs<M>> {
        &self.regs
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Reads the PHC; the host monotonic time is the midpoint of the latching read.
    /// Costs exactly the family's read sequence (i225: 2 MMIO reads).
    pub fn gettime(&self) -> PageSample {
        let mut st = self.lock();
        let r = self.read();
        let (phc, mono) = (r.phc, r.mid());
        if !precise_enough(&mut st, r.width()) {
            // Preempted around the latch: the reading is fine, its host time is not precise
            // enough to anchor the clock page or the rate estimate.
            return PageSample {
                phc_ns: phc,
                mono_ns: mono,
                rate_ppb: self.rate_locked(&st),
            };
        }
        self.observe(&mut st, phc, mono)
    }

    /// `samples` readings, each bracketed by CLOCK_REALTIME immediately around the latching
    /// read (not the whole sequence: on i225 the SYSTIMH read only returns the latched value).
    pub fn gettimex(&self, samples: u8) -> Result<Vec<TimeXSample>, HwError> {
        if samples == 0 || samples > ptp_ipc::MAX_SAMPLES {
            return Err(HwError::InvalidArgument("gettimex sample count"));
        }
        let mut out = Vec::with_capacity(samples as usize);
        let mut st = self.lock();
        for _ in 0..samples {
            let sys_before_ns = (self.wall)();
            let l = self.hw.latch(&self.regs);
            let sys_after_ns = (self.wall)();
            let phc_ns = self.hw.finish(&self.regs, l);
            out.push(TimeXSample {
                sys_before_ns,
                phc_ns,
                sys_after_ns,
            });
        }
        // Map the tightest sample to the monotonic timescale for the clock page.
        let Some(s) = TimeXSample::tightest(&out).copied() else {
            return Ok(out);
        };
        if s.bracket_ns().is_none_or(|w| !precise_enough(&mut st, w)) {
            return Ok(out);
        }
        let rt_minus_mono = (self.wall)() as i128 - self.now() as i128;
        let mono = (s.mid_ns() - rt_minus_mono).max(0) as u64;
        self.observe(&mut st, s.phc_ns, mono);
        Ok(out)
    }

    /// Sets the time. No read is needed to publish: the value written and the host time of
    /// the write are the new anchor. Unlike a step, nothing here is relative to a host
    /// instant: the request is "SYSTIM := ns when the write lands", which the hardware does
    /// exactly, so there is no law to verify (the anchor is off by the write's bus time).
    pub fn settime(&self, ns: u64) -> Result<(), HwError> {
        if ns > self.hw.max_time_ns() {
            return Err(HwError::InvalidArgument("time beyond the PHC's range"));
        }
        let mut st = self.lock();
        self.hw.write(&self.regs, ns);
        let mono = self.now();
        self.stepped(&mut st, ns, mono);
        Ok(())
    }

    /// Steps the time by `delta_ns` (see [`Self::adjtime_report`]).
    pub fn adjtime(&self, delta_ns: i64) -> Result<(), HwError> {
        self.adjtime_report(delta_ns).map(|_| ())
    }

    /// Steps the time by `delta_ns` and says how well it landed. A read-modify-write like
    /// Linux's igc, but a userspace driver cannot keep the CPU between its read and its write
    /// as igc does under its spin lock: any preemption there is lost from the step. So the
    /// step is a law — the clock as read, plus delta, running on — written for the host time
    /// of the write, read back, and rewritten (at most [`MAX_STEP_CORRECTIONS`] times) while
    /// the read-back misses the law by more than its bracket can resolve.
    pub fn adjtime_report(&self, delta_ns: i64) -> Result<StepReport, HwError> {
        let mut st = self.lock();
        let base = self.read_narrowest();
        let law = StepLaw {
            base: base.phc as i128 + delta_ns as i128,
            at: base.mid(),
            rate: 1.0 + self.rate_locked(&st) * 1e-9,
        };
        if !(0..=self.hw.max_time_ns() as i128).contains(&law.base) {
            return Err(HwError::InvalidArgument(
                "adjustment leaves the PHC's range",
            ));
        }
        if self.hw.step_exact(delta_ns) {
            // Nothing lost to preemption: the read-back only anchors the rate estimate.
            let check = self.read_narrow();
            let report = StepReport {
                residual_ns: 0,
                bound_ns: 0,
                brackets_ns: (base.width(), check.width()),
                corrections: 0,
                verified: true,
            };
            self.finish_step(&mut st, &law, &check, &report);
            drop(st);
            log_step(delta_ns, &report);
            return Ok(report);
        }
        let mut lead = st.write_lead_ns;
        let mut corrections = 0;
        let (last, verified) = loop {
            let a = self.write_law(&law, lead)?;
            // The first write runs cold (the thread just woke for the request) and lands
            // microseconds late, which says nothing about the writes after it.
            if corrections > 0
                && let Some(l) = a.learned_lead(lead)
            {
                lead = l;
                st.write_lead_ns = l;
            }
            let verified = a.residual.unsigned_abs() <= a.check.width() / 2 + STEP_FLOOR_NS;
            if verified || corrections == MAX_STEP_CORRECTIONS {
                break (a, verified);
            }
            corrections += 1;
        };
        let report = step_report(&base, &last, corrections, verified);
        self.finish_step(&mut st, &law, &last.check, &report);
        drop(st);
        log_step(delta_ns, &report);
        Ok(report)
    }

    /// Steps applied, corrections and unverified steps so far.
    pub fn step_counts(&self) -> StepCounts {
        self.lock().steps
    }

    /// Writes the law's value for the host time the write is expected to land (`lead` after
    /// now), then reads the clock back.
    fn write_law(&self, law: &StepLaw, lead: u64) -> Result<Attempt, HwError> {
        let computed = self.now();
        let target = law.phc_at(computed + lead);
        if !(0..=self.hw.max_time_ns() as i128).contains(&target) {
            return Err(HwError::InvalidArgument(
                "adjustment leaves the PHC's range",
            ));
        }
        self.hw.write(&self.regs, target as u64);
        let check = self.read_narrow();
        let off = check.phc as i128 - law.phc_at(check.mid());
        Ok(Attempt {
            computed,
            check,
            residual: off.clamp(i64::MIN as i128, i64::MAX as i128) as i64,
        })
    }

    /// Counts the step and makes its read-back the new anchor (a measured point, unlike the
    /// value written); a read-back taken while preempted anchors on the law instead.
    fn finish_step(&self, st: &mut State, law: &StepLaw, check: &Reading, r: &StepReport) {
        st.steps.steps += 1;
        st.steps.corrections += r.corrections as u64;
        st.steps.unverified += !r.verified as u64;
        let (phc, mono) = if check.width() <= MAX_BRACKET_NS {
            (check.phc, check.mid())
        } else {
            let now = self.now();
            (law.phc_at(now).max(0) as u64, now)
        };
        self.stepped(st, phc, mono);
    }

    /// One latching read with its host-time bracket.
    fn read(&self) -> Reading {
        let before = self.now();
        let l = self.hw.latch(&self.regs);
        let after = self.now();
        Reading {
            phc: self.hw.finish(&self.regs, l),
            before,
            after,
        }
    }

    /// The narrowest of [`STEP_READ_TRIES`] reads: the first after a wake-up runs cold and
    /// its bracket is microseconds wide.
    fn read_narrowest(&self) -> Reading {
        let mut best = self.read();
        for _ in 1..STEP_READ_TRIES {
            let r = self.read();
            if r.width() < best.width() {
                best = r;
            }
        }
        best
    }

    /// The narrowest of up to [`STEP_READ_TRIES`] reads, stopping at the first unpreempted.
    fn read_narrow(&self) -> Reading {
        let mut best = self.read();
        for _ in 1..STEP_READ_TRIES {
            if best.width() <= MAX_BRACKET_NS {
                break;
            }
            let r = self.read();
            if r.width() < best.width() {
                best = r;
            }
        }
        best
    }

    /// Sets the frequency offset (absolute, from nominal), Linux `scaled_ppm` units.
    pub fn adjfine(&self, scaled_ppm: i64) -> Result<(), HwError> {
        // |scaled_ppm| · 1000 / 2^16 > max_adj, in integers (no rounding at the boundary).
        if scaled_ppm.unsigned_abs() as u128 * 1000 > self.hw.max_adj_ppb() as u128 * 65536 {
            return Err(HwError::InvalidArgument("frequency beyond max_adj"));
        }
        let mut st = self.lock();
        // Re-anchor at the moment of the change using the old rate, then switch.
        let mono = self.now();
        let phc_now = st.last.map(|s| s.extrapolate(mono));
        self.hw.set_freq(&self.regs, scaled_ppm);
        st.scaled_ppm = scaled_ppm;
        if let Some(phc) = phc_now {
            self.stepped(&mut st, phc, mono);
        }
        Ok(())
    }

    /// The current frequency request.
    pub fn freq_scaled_ppm(&self) -> i64 {
        self.lock().scaled_ppm
    }

    /// The most recent sample (for a clock page refresh that does not need a new read).
    pub fn last_sample(&self) -> Option<PageSample> {
        self.lock().last
    }

    fn rate_locked(&self, st: &State) -> f64 {
        // (1 + osc)(1 + adj) - 1, in ppb.
        let adj = scaled_ppm_to_ppb(st.scaled_ppm) * 1e-9;
        ((1.0 + st.osc_rate_ppb * 1e-9) * (1.0 + adj) - 1.0) * 1e9
    }

    /// A fresh reading: refine the oscillator estimate and publish.
    fn observe(&self, st: &mut State, phc: u64, mono: u64) -> PageSample {
        match st.anchor {
            Some((a_phc, a_mono)) if mono > a_mono + RATE_WINDOW_MIN_NS => {
                let measured = (phc as f64 - a_phc as f64) / (mono - a_mono) as f64;
                let adj = 1.0 + scaled_ppm_to_ppb(st.scaled_ppm) * 1e-9;
                st.osc_rate_ppb = (measured / adj - 1.0) * 1e9;
                if mono > a_mono + RATE_WINDOW_MAX_NS {
                    st.anchor = Some((phc, mono));
                }
            }
            Some(_) => {}
            None => st.anchor = Some((phc, mono)),
        }
        self.publish(st, phc, mono)
    }

    /// The clock was stepped or its rate changed: start a new estimation window.
    fn stepped(&self, st: &mut State, phc: u64, mono: u64) {
        st.anchor = Some((phc, mono));
        self.publish(st, phc, mono);
    }

    fn publish(&self, st: &mut State, phc: u64, mono: u64) -> PageSample {
        let s = PageSample {
            phc_ns: phc,
            mono_ns: mono,
            rate_ppb: self.rate_locked(st),
        };
        st.last = Some(s);
        if let Some(p) = &self.publisher {
            p(&s);
        }
        s
    }
}

/// What a step can be off by: the base read's and the read-back's latch instants are known
/// to half their brackets, the read-back missed the law by `residual`, the law and SYSTIM
/// each truncate to whole ns, and the rate may be off by [`RATE_DOUBT`] over the time from
/// the base read to the read-back.
fn step_report(base: &Reading, last: &Attempt, corrections: u32, verified: bool) -> StepReport {
    let span = last.check.after.saturating_sub(base.before);
    let bound = base.width().div_ceil(2)
        + last.check.width().div_ceil(2)
        + last.residual.unsigned_abs()
        + 2
        + (span as f64 * RATE_DOUBT).ceil() as u64;
    StepReport {
        residual_ns: last.residual,
        bound_ns: bound,
        brackets_ns: (base.width(), last.check.width()),
        corrections,
        verified,
    }
}

/// One line per step: steps are rare (a servo steps only on large offsets) and the bound is
/// what an operator, or a test, checks the step against.
fn log_step(delta_ns: i64, r: &StepReport) {
    let (w1, w2) = r.brackets_ns;
    if r.verified {
        log::info!(
            "adjtime {delta_ns} ns: step error bound {} ns (read-back residual {} ns, brackets \
             {w1}/{w2} ns, {} corrections)",
            r.bound_ns,
            r.residual_ns,
            r.corrections
        );
    } else {
        log::warn!(
            "adjtime {delta_ns} ns: step error bound {} ns, not verified after {} corrections \
             (read-back residual {} ns, brackets {w1}/{w2} ns)",
            r.bound_ns,
            r.corrections,
            r.residual_ns
        );
    }
}
