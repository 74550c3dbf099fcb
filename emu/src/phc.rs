//! The PTP hardware clock (SYSTIM timer 0) of i225/i226: an oscillator with a frequency error,
//! corrected by TIMINCA, stoppable by TSAUXC.DISABLE0.
//!
//! Pure and deterministic: every method takes the true time `t` (ns, from the model's
//! [`TimeSource`](crate::clock::TimeSource)) explicitly, so the arithmetic can be tested without
//! any clock and two models fed the same `t` agree to the bit.
//!
//! # Equation (intel-timesync.md §4)
//!
//! ```text
//! SYSTIM(t) = SYSTIM(t0) + (t - t0) · (1 + osc_ppb·1e-9) · (1 ± INCVALUE · 2^-32 / 3.2 ns)
//! ```
//!
//! INCVALUE is a correction in 2^-32 ns per 3.2 ns tick (`TICK_PS`, \[D\] in §4), ISGN (TIMINCA
//! b31) selects the sign, and TIMINCA = 0 is the nominal rate. `osc_ppb` is the crystal's own
//! error, which the driver cannot see except through the servo.
//!
//! # Exactness
//!
//! The rate is the rational `N / D` in units of 2^-32 ns per true ns, with
//! `N = (1e9 + osc_ppb) · (2^32·TICK_PS ± INCVALUE·1000)` and the constant `D = 1e9 · TICK_PS`.
//! SYSTIM is kept as `base` (2^-32 ns) plus `rem / D` (2^-32 ns) at the last rebase; a rebase
//! (rate change, settime, stop/start) carries `rem` over, so no rounding error accumulates no
//! matter how often the driver writes TIMINCA. Reading SYSTIM truncates to whole ns, like the
//! register.

use std::collections::VecDeque;

use intel_regs::igc::{TICK_PS, timinca};

/// Nanoseconds per second.
pub const NS_PER_S: u64 = 1_000_000_000;

/// Fixed-point shift of the internal SYSTIM representation (2^-32 ns units).
const FRAC_BITS: u32 = 32;

/// SYSTIMH holds 32-bit seconds, so timer 0 wraps after 2^32 s (~136 years).
const WRAP_NS: u128 = (1u128 << 32) * NS_PER_S as u128;
/// [`WRAP_NS`] in 2^-32 ns units.
const WRAP_FRAC: u128 = WRAP_NS << FRAC_BITS;

/// Denominator of the rate (see the module docs): ppb scale × tick in ps.
const RATE_DEN: u128 = NS_PER_S as u128 * TICK_PS as u128;

/// Largest |oscillator error| accepted, in ppb: keeps the rate strictly positive.
pub const MAX_OSC_ERROR_PPB: i64 = 999_999_999;

/// A SYSTIM value as the i225 registers show it: SYSTIMH = seconds, SYSTIML = nanoseconds (§3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct SysTime {
    /// Seconds (SYSTIMH).
    pub sec: u32,
    /// Nanoseconds, 0..1e9 (SYSTIML).
    pub nsec: u32,
}

impl SysTime {
    /// Splits a nanosecond count; seconds wrap at 2^32 as the register does.
    pub fn from_ns(ns: u64) -> Self {
        Self {
            sec: (ns / NS_PER_S) as u32,
            nsec: (ns % NS_PER_S) as u32,
        }
    }

    /// Nanoseconds since SYSTIM 0.
    pub fn to_ns(self) -> u64 {
        self.sec as u64 * NS_PER_S + self.nsec as u64
    }
}

/// The PHC law in force between two rebases: everything needed to evaluate SYSTIM exactly at
/// any true time at or after `base_t`. The model keeps one per rebase; the ground-truth record
/// ([`crate::truth`]) publishes the current one so another process can evaluate it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PhcLaw {
    /// True time of the last rebase.
    base_t: u64,
    /// SYSTIM at `base_t`, in 2^-32 ns, below [`WRAP_FRAC`].
    base: u128,
    /// Sub-unit remainder at `base_t`, in 1/RATE_DEN of 2^-32 ns (< RATE_DEN).
    rem: u128,
    /// TIMINCA as written (b31 ISGN, b30:0 INCVALUE).
    timinca: u32,
    /// Crystal frequency error, ppb, within ±[`MAX_OSC_ERROR_PPB`].
    osc_ppb: i64,
    /// False while TSAUXC.DISABLE0 is set: SYSTIM holds `base`.
    running: bool,
}

/// The parts of a [`PhcLaw`] (see its fields' meaning in the module docs): what the
/// ground-truth record stores.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct LawParts {
    /// True time of the last rebase, ns.
    pub base_t: u64,
    /// SYSTIM at `base_t`, in 2^-32 ns, below 2^32 s.
    pub base: u128,
    /// Sub-unit remainder at `base_t`, in 1/(1e9·TICK_PS) of 2^-32 ns.
    pub rem: u128,
    /// TIMINCA as written.
    pub timinca: u32,
    /// Crystal frequency error, ppb.
    pub osc_ppb: i64,
    /// False while TSAUXC.DISABLE0 is set.
    pub running: bool,
}

/// SYSTIM wraps after this many ns (2^32 s).
pub const SYSTIM_WRAP_NS: u64 = WRAP_NS as u64;

/// `a − b` on the SYSTIM circle (both below [`SYSTIM_WRAP_NS`]): the difference of two clocks
/// near each other, even when one has wrapped past 2^32 s and the other not.
pub fn wrap_diff_ns(a: u64, b: u64) -> i64 {
    let w = WRAP_NS as i128;
    let d = ((a as i128 - b as i128) % w + w) % w;
    (if d > w / 2 { d - w } else { d }) as i64
}

/// `ns + delta` on the SYSTIM circle (wrapping at 2^32 s like the registers): how the model
/// applies the fixed PHY latencies to a timestamp.
pub fn wrap_add_ns(ns: u64, delta: i64) -> u64 {
    let w = WRAP_NS as i128;
    (((ns as i128 + delta as i128) % w + w) % w) as u64
}

/// The PHC state. See the module docs for the equation.
#[derive(Debug, Clone)]
pub struct Phc {
    /// The law in force since the last rebase.
    seg: PhcLaw,
    /// The laws in force before, newest last, so a timestamp of an instant that lies before
    /// the last rebase (a frame whose arrival the model processes late) reads SYSTIM as it was
    /// then. Bounded by [`HISTORY`].
    history: VecDeque<PhcLaw>,
}

/// Rebases remembered for [`Phc::ns_at_instant`]. A driver adjusting the frequency every
/// sync interval rebases a few times a second; the model processes a frame at most
/// milliseconds late, so a handful suffices.
const HISTORY: usize = 16;

impl PhcLaw {
    /// A law from its parts, as [`Self::parts`] gives them; `None` if a part is out of the
    /// model's range (`base` ≥ 2^32 s in 2^-32 ns, `rem` ≥ the rate denominator, |`osc_ppb`| >
    /// [`MAX_OSC_ERROR_PPB`]), since such a law could not be evaluated without overflow.
    pub fn from_parts(p: LawParts) -> Option<Self> {
        let ok = p.base < WRAP_FRAC && p.rem < RATE_DEN && p.osc_ppb.abs() <= MAX_OSC_ERROR_PPB;
        ok.then_some(Self {
            base_t: p.base_t,
            base: p.base,
            rem: p.rem,
            timinca: p.timinca,
            osc_ppb: p.osc_ppb,
            running: p.running,
        })
    }

    /// The law's parts, for storing it.
    pub fn parts(&self) -> LawParts {
        LawParts {
            base_t: self.base_t,
            base: self.base,
            rem: self.rem,
            timinca: self.timinca,
            osc_ppb: self.osc_ppb,
            running: self.running,
        }
    }

    /// SYSTIM at true time `t` in whole ns, truncated as the registers show it. Exact for
    /// `t ≥ base_t`; an earlier `t` reads the base (no time elapsed).
    pub fn ns_at(&self, t: u64) -> u64 {
        (self.at(t).0 >> FRAC_BITS) as u64
    }

    /// Rate numerator `N` (2^-32 ns per true ns is `N / RATE_DEN`).
    fn rate_num(&self) -> u128 {
        let osc = (NS_PER_S as i64 + self.osc_ppb) as u128;
        let nominal = (TICK_PS as u128) << FRAC_BITS;
        let corr = (self.timinca & timinca::INCVALUE_MASK) as u128 * 1000;
        // corr < 2^31·1000 < nominal = 2^32·3200, so the slowed rate stays positive.
        let tick = if self.timinca & timinca::ISGN != 0 {
            nominal - corr
        } else {
            nominal + corr
        };
        osc * tick
    }

    /// SYSTIM at `t` in 2^-32 ns with the carried remainder. A `t` before the last rebase
    /// counts as no elapsed time (a time source stepping back must not run the PHC backwards).
    fn at(&self, t: u64) -> (u128, u128) {
        if !self.running {
            return (self.base, self.rem);
        }
        let dt = t.saturating_sub(self.base_t) as u128;
        let n = self.rate_num();
        // dt·N can exceed u128 (2^64 · 2^77); split dt = q·D + r so every product fits:
        // q < 2^23 and N < 2^77; r < D < 2^42.
        let (q, r) = (dt / RATE_DEN, dt % RATE_DEN);
        let part = r * n + self.rem;
        let frac = (self.base + q * n + part / RATE_DEN) % WRAP_FRAC;
        (frac, part % RATE_DEN)
    }
}

impl Phc {
    /// A running PHC reading `systim_ns` at true time `t`, nominal TIMINCA.
    pub fn new(t: u64, systim_ns: u64, osc_ppb: i64) -> Self {
        Self {
            seg: PhcLaw {
                base_t: t,
                base: (systim_ns as u128 % WRAP_NS) << FRAC_BITS,
                rem: 0,
                timinca: 0,
                osc_ppb: osc_ppb.clamp(-MAX_OSC_ERROR_PPB, MAX_OSC_ERROR_PPB),
                running: true,
            },
            history: VecDeque::new(),
        }
    }

    fn at(&self, t: u64) -> (u128, u128) {
        self.seg.at(t)
    }

    /// Moves the base to `t` (never backwards) so a parameter change applies from `t` on.
    fn rebase(&mut self, t: u64) {
        if self.history.len() == HISTORY {
            self.history.pop_front();
        }
        self.history.push_back(self.seg.clone());
        let (base, rem) = self.at(t);
        self.seg.base = base;
        self.seg.rem = rem;
        self.seg.base_t = self.seg.base_t.max(t);
    }

    /// SYSTIM at `t` in 2^-32 ns (fraction included), for tests that check sub-ns behaviour.
    pub fn frac_at(&self, t: u64) -> u128 {
        self.at(t).0
    }

    /// SYSTIM at `t` in whole nanoseconds (truncated, as the registers show it).
    pub fn ns_at(&self, t: u64) -> u64 {
        self.seg.ns_at(t)
    }

    /// SYSTIM in whole ns as it read at `t`, also for an instant before the last rebase
    /// (settime, TIMINCA write, stop/start): the law in force at `t` is looked up among the
    /// last 16 rebases. Timestamps need this: hardware latches SYSTIM when the frame
    /// passes, while the model may process the frame later. An instant older than the
    /// remembered history reads as the oldest remembered law's base (no time elapsed).
    pub fn ns_at_instant(&self, t: u64) -> u64 {
        if t >= self.seg.base_t {
            return self.ns_at(t);
        }
        let seg = self
            .history
            .iter()
            .rev()
            .find(|s| s.base_t <= t)
            .or(self.history.front())
            .unwrap_or(&self.seg);
        seg.ns_at(t)
    }

    /// The law in force now (since the last rebase).
    pub fn law(&self) -> PhcLaw {
        self.seg.clone()
    }

    /// SYSTIM at `t` split as SYSTIMH:SYSTIML.
    pub fn time_at(&self, t: u64) -> SysTime {
        SysTime::from_ns(self.ns_at(t))
    }

    /// Sets SYSTIM to `ns` at `t` (settime; wraps at 2^32 s). The sub-ns fraction is zeroed.
    pub fn set_ns(&mut self, t: u64, ns: u64) {
        self.rebase(t);
        self.seg.base = (ns as u128 % WRAP_NS) << FRAC_BITS;
        self.seg.rem = 0;
    }

    /// TIMINCA as last written.
    pub fn timinca(&self) -> u32 {
        self.seg.timinca
    }

    /// Writes TIMINCA at `t`: time up to `t` accrues at the old rate.
    pub fn set_timinca(&mut self, t: u64, value: u32) {
        self.rebase(t);
        self.seg.timinca = value;
    }

    /// The crystal's frequency error in ppb.
    pub fn osc_error_ppb(&self) -> i64 {
        self.seg.osc_ppb
    }

    /// Changes the crystal's frequency error at `t` (temperature drift, a test's step), clamped
    /// to ±[`MAX_OSC_ERROR_PPB`].
    pub fn set_osc_error_ppb(&mut self, t: u64, ppb: i64) {
        self.rebase(t);
        self.seg.osc_ppb = ppb.clamp(-MAX_OSC_ERROR_PPB, MAX_OSC_ERROR_PPB);
    }

    /// Whether SYSTIM is counting (TSAUXC.DISABLE0 clear).
    pub fn is_running(&self) -> bool {
        self.seg.running
    }

    /// Stops (false) or restarts (true) the timer at `t`. Stopped, SYSTIM holds its value;
    /// restarted, it continues from that value (§2.3: DISABLE0 "stops SYSTIM0").
    pub fn set_running(&mut self, t: u64, running: bool) {
        if running == self.seg.running {
            return;
        }
        self.rebase(t);
        self.seg.running = running;
        // While stopped `base_t` went stale; counting resumes from `t`.
        self.seg.base_t = self.seg.base_t.max(t);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: u64 = NS_PER_S;

    /// Linux igc_ptp_adjfine_i225 for a positive/negative ppb (§4).
    fn linux_timinca(ppb: i64) -> u32 {
        let scaled_ppm = ppb.unsigned_abs() * 65536 / 1000;
        let rate = ((scaled_ppm << 14) / 78125) as u32;
        (rate & timinca::INCVALUE_MASK) | if ppb < 0 { timinca::ISGN } else { 0 }
    }

    /// Exact expected SYSTIM advance (whole ns) over `dt` with INCVALUE `inc`, from the
    /// equation written out independently of `Phc::at`.
    fn expected_ns(dt: u64, inc: u32, neg: bool, osc_ppb: i64) -> u64 {
        let nominal = 3200u128 << 32;
        let corr = inc as u128 * 1000;
        let tick = if neg { nominal - corr } else { nominal + corr };
        let num = dt as u128 * (1_000_000_000i64 + osc_ppb) as u128 * tick;
        ((num / (1_000_000_000u128 * 3200)) >> 32) as u64
    }

    #[test]
    fn nominal_rate_tracks_true_time() {
        let mut p = Phc::new(1000, 5 * S, 0);
        assert_eq!(p.ns_at(1000), 5 * S);
        assert_eq!(p.ns_at(1000 + 123_456_789), 5 * S + 123_456_789);
        p.set_timinca(2000, 0);
        assert_eq!(p.ns_at(1000 + 10 * S), 15 * S);
    }

    #[test]
    fn timinca_plus_1000_ppb() {
        let v = linux_timinca(1000);
        assert_eq!(v, 13743);
        let mut p = Phc::new(0, 0, 0);
        p.set_timinca(0, v);
        let got = p.ns_at(S);
        assert_eq!(got, expected_ns(S, 13743, false, 0));
        assert!(got.abs_diff(S + 1000) <= 2, "{got}");
    }

    #[test]
    fn timinca_negative_sign_slows() {
        let v = linux_timinca(-1000);
        assert_eq!(v, timinca::ISGN | 13743);
        let mut p = Phc::new(0, 0, 0);
        p.set_timinca(0, v);
        let got = p.ns_at(S);
        assert_eq!(got, expected_ns(S, 13743, true, 0));
        assert!(got.abs_diff(S - 1000) <= 2, "{got}");
    }

    #[test]
    fn oscillator_error_combines_with_timinca() {
        let mut p = Phc::new(0, 0, 500);
        assert_eq!(p.ns_at(S), S + 500);
        p.set_timinca(0, linux_timinca(-500));
        let got = p.ns_at(S);
        assert_eq!(got, expected_ns(S, 6871, true, 500));
        // (1 + 500e-9)(1 - 499.96e-9): the correction cancels the crystal to well under 1 ns.
        assert!(got.abs_diff(S) <= 1, "{got}");
        p.set_osc_error_ppb(0, 20_000_000_000);
        assert_eq!(p.osc_error_ppb(), MAX_OSC_ERROR_PPB);
    }

    #[test]
    fn disable_freezes_and_resumes() {
        let mut p = Phc::new(0, 0, 0);
        p.set_running(S, false);
        assert_eq!(p.ns_at(S), S);
        assert_eq!(p.ns_at(5 * S), S, "frozen while stopped");
        p.set_ns(6 * S, 100);
        assert_eq!(
            p.ns_at(7 * S),
            100,
            "settime while stopped holds the new value"
        );
        p.set_running(8 * S, true);
        assert_eq!(p.ns_at(8 * S), 100);
        assert_eq!(p.ns_at(9 * S), S + 100, "resumes from the frozen value");
    }

    #[test]
    fn rebase_is_lossless() {
        // 3 ns steps at +1 ppb: each step's fraction is well below 1 ns; a rebase every step
        // must give the same answer as one big step.
        let v = linux_timinca(1);
        let mut a = Phc::new(0, 0, 7);
        let mut b = Phc::new(0, 0, 7);
        a.set_timinca(0, v);
        b.set_timinca(0, v);
        let mut t = 0;
        for _ in 0..100_000 {
            t += 3;
            a.set_timinca(t, v);
        }
        assert_eq!(a.frac_at(t), b.frac_at(t));
        assert_eq!(a.ns_at(t + S), b.ns_at(t + S));
    }

    #[test]
    fn wraps_at_2_32_seconds_and_survives_huge_intervals() {
        let p = Phc::new(0, u32::MAX as u64 * S + S - 1, 0);
        assert_eq!(
            p.time_at(0),
            SysTime {
                sec: u32::MAX,
                nsec: 999_999_999
            }
        );
        assert_eq!(p.time_at(1), SysTime { sec: 0, nsec: 0 });
        let mut q = Phc::new(0, 0, MAX_OSC_ERROR_PPB);
        q.set_timinca(0, timinca::INCVALUE_MASK);
        // No overflow for any interval.
        let _ = q.ns_at(u64::MAX);
    }

    #[test]
    fn time_source_going_backwards_is_ignored() {
        let mut p = Phc::new(10 * S, 0, 0);
        assert_eq!(p.ns_at(5 * S), 0);
        p.set_timinca(5 * S, 0);
        assert_eq!(p.ns_at(11 * S), S);
    }

    #[test]
    fn instants_before_a_rebase_read_the_old_law() {
        let mut p = Phc::new(0, 0, 0);
        p.set_timinca(S, linux_timinca(1000));
        p.set_ns(2 * S, 100 * S);
        // Before the settime: the +1000 ppb law; before the TIMINCA write: nominal.
        assert_eq!(p.ns_at_instant(S / 2), S / 2);
        assert_eq!(
            p.ns_at_instant(S + S / 2),
            S + expected_ns(S / 2, 13743, false, 0)
        );
        assert_eq!(p.ns_at_instant(2 * S), 100 * S);
        assert_eq!(p.ns_at_instant(3 * S), p.ns_at(3 * S));
        // Bounded history: very old instants read the oldest remembered base.
        for i in 0..100 {
            p.set_timinca(3 * S + i, 0);
        }
        let _ = p.ns_at_instant(0);
    }

    #[test]
    fn wrap_add_wraps_both_ways() {
        let top = (1u64 << 32) * S;
        assert_eq!(wrap_add_ns(5, -10), top - 5);
        assert_eq!(wrap_add_ns(top - 1, 3), 2);
        assert_eq!(wrap_add_ns(7, 0), 7);
    }
}
