//! The PTP hardware clock (SYSTIM timer 0) of the igc and igb parts: an oscillator with a
//! frequency error, corrected by TIMINCA, stoppable by TSAUXC.DISABLE0. [`TimeFormat`] says
//! which family's SYSTIM format and TIMINCA meaning a clock has (§3, §4).
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
//! error, which the driver cannot see except through the servo. i210 and i350 have the same
//! law with an 8 ns tick (§4 \[D\]).
//!
//! The 82576 counts cycles instead (§3, §4; Linux igb_ptp.c's format comment): every
//! IncPeriod (TIMINCA b31:24) clock cycles of 16 ns the 64-bit SYSTIM adds IncValue
//! (b23:0). Linux's 82576 value (IncPeriod 1, IncValue 16<<19) makes one count 2^-19 ns, so
//! the model keeps the counter as `count << 13` in the same 2^-32 ns units and reads
//! ns = count >> 19, wrapping at 2^45 ns:
//!
//! ```text
//! count(t) = count(t0) + (t - t0) · (1 + osc_ppb·1e-9) · IncValue / (16 ns · IncPeriod)
//! ```
//!
//! \[assumption\] The count advances continuously (it is not held for 16·IncPeriod ns between
//! increments); stamp resolution is `stamp_quantum_ns`'s business. IncPeriod = 0 stops the
//! counter \[U\]; TIMINCA = 0 (power-on) does too, until the driver programs it.
//!
//! # Exactness
//!
//! The rate is the rational `N / D` in units of 2^-32 ns per true ns, with
//! `N = (1e9 + osc_ppb) · (2^32·TICK_PS ± INCVALUE·1000)` and the constant `D = 1e9 · TICK_PS`
//! (82576: `N = (1e9 + osc_ppb) · IncValue · 2^9`, `D = 1e9 · IncPeriod`; a new IncPeriod
//! rescales the remainder, losing under 2^-32 ns).
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

/// The i210/i350 clock period in ps: their INCVALUE is 2^-32 ns per 8 ns tick (§4 \[D\]:
/// the driver's (scaled_ppm << 13) / 15625 is |ppb|·1e-9 · 8 ns · 2^32).
pub const IGB_TICK_PS: u64 = 8_000;
/// 82576: IncPeriod is counted in clock cycles of this many ns (Linux igb_ptp.c: "the
/// nominal 16 nanosecond period").
pub const E82576_CYCLE_NS: u64 = 16;
/// 82576: counts per ns at Linux's TIMINCA (`IGB_82576_TSYNC_SHIFT`, §1).
pub const E82576_SHIFT: u32 = 19;

/// A family's SYSTIM format and TIMINCA meaning (intel-timesync.md §3, §4).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum TimeFormat {
    /// i225/i226: SYSTIMH = s, SYSTIML = ns; INCVALUE per 3.2 ns tick; wraps at 2^32 s.
    #[default]
    Igc,
    /// i210/i211: s:ns like igc; INCVALUE per 8 ns tick; wraps at 2^32 s.
    I210,
    /// 82580/i350: a 40-bit ns counter (SYSTIMH b7:0 : SYSTIML); INCVALUE per 8 ns tick.
    I350,
    /// 82576: a 64-bit cycle counter (IncPeriod/IncValue); ns = count >> 19, 2^45 ns wrap.
    E82576,
}

impl TimeFormat {
    /// SYSTIM wraps after this many ns.
    pub const fn wrap_ns(self) -> u64 {
        match self {
            Self::Igc | Self::I210 => WRAP_NS as u64,
            Self::I350 => 1 << 40,
            Self::E82576 => 1 << (64 - E82576_SHIFT),
        }
    }

    /// The number the truth record stores for it.
    pub const fn code(self) -> u64 {
        match self {
            Self::Igc => 0,
            Self::I210 => 1,
            Self::I350 => 2,
            Self::E82576 => 3,
        }
    }

    /// The format [`Self::code`] gave `c`.
    pub const fn from_code(c: u64) -> Option<Self> {
        match c {
            0 => Some(Self::Igc),
            1 => Some(Self::I210),
            2 => Some(Self::I350),
            3 => Some(Self::E82576),
            _ => None,
        }
    }

    /// `ns + delta` on this format's SYSTIM circle.
    pub fn add_ns(self, ns: u64, delta: i64) -> u64 {
        let w = self.wrap_ns() as i128;
        (((ns as i128 + delta as i128) % w + w) % w) as u64
    }

    /// `a − b` on this format's SYSTIM circle (the shorter way round).
    pub fn diff_ns(self, a: u64, b: u64) -> i64 {
        let w = self.wrap_ns() as i128;
        let d = ((a as i128 - b as i128) % w + w) % w;
        (if d > w / 2 { d - w } else { d }) as i64
    }

    fn wrap_frac(self) -> u128 {
        (self.wrap_ns() as u128) << FRAC_BITS
    }

    /// Rate numerator and denominator (module docs) for `timinca` and a crystal `osc_ppb`.
    fn rate(self, timinca: u32, osc_ppb: i64) -> (u128, u128) {
        let osc = (NS_PER_S as i64 + osc_ppb) as u128;
        let tick_ps = match self {
            Self::Igc => TICK_PS as u128,
            Self::I210 | Self::I350 => IGB_TICK_PS as u128,
            Self::E82576 => {
                let period = (timinca >> 24) as u128;
                let value = (timinca & 0x00FF_FFFF) as u128;
                // count<<13 per crystal ns = value·2^13 / (16·period) = value·2^9 / period.
                let num = if period == 0 { 0 } else { osc * (value << 9) };
                return (num, NS_PER_S as u128 * period.max(1));
            }
        };
        let nominal = tick_ps << FRAC_BITS;
        let corr = (timinca & timinca::INCVALUE_MASK) as u128 * 1000;
        // corr < 2^31·1000 < nominal = 2^32·3200, so the slowed rate stays positive.
        let tick = if timinca & timinca::ISGN != 0 {
            nominal - corr
        } else {
            nominal + corr
        };
        (osc * tick, NS_PER_S as u128 * tick_ps)
    }
}

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
    /// SYSTIM at `base_t`, in 2^-32 ns, below the format's wrap.
    base: u128,
    /// Sub-unit remainder at `base_t`, in 1/D of 2^-32 ns (< D, the rate denominator).
    rem: u128,
    /// TIMINCA as written (b31 ISGN, b30:0 INCVALUE).
    timinca: u32,
    /// Crystal frequency error, ppb, within ±[`MAX_OSC_ERROR_PPB`].
    osc_ppb: i64,
    /// False while TSAUXC.DISABLE0 is set: SYSTIM holds `base`.
    running: bool,
    /// The family's format.
    format: TimeFormat,
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
    /// The family's SYSTIM format (how `timinca` and `base` are read).
    pub format: TimeFormat,
}

/// SYSTIM wraps after this many ns (2^32 s).
pub const SYSTIM_WRAP_NS: u64 = WRAP_NS as u64;

/// `a − b` on the SYSTIM circle (both below [`SYSTIM_WRAP_NS`]): the difference of two clocks
/// near each other, even when one has wrapped past 2^32 s and the other not.
pub fn wrap_diff_ns(a: u64, b: u64) -> i64 {
    TimeFormat::Igc.diff_ns(a, b)
}

/// `ns + delta` on the SYSTIM circle (wrapping at 2^32 s like the registers): how the model
/// applies the fixed PHY latencies to a timestamp.
pub fn wrap_add_ns(ns: u64, delta: i64) -> u64 {
    TimeFormat::Igc.add_ns(ns, delta)
}

/// A wrapping SYSTIM ns view extended to 64 bits, as a driver's timecounter extends the
/// 82576's 45-bit or the i350's 40-bit count: each sample moves the total by the short way
/// round from the previous one, so samples must come less than half a wrap apart (Linux checks
/// every 9 minutes, §3). The ground truth's view of such a clock.
#[derive(Debug, Clone)]
pub struct WrapExtender {
    format: TimeFormat,
    last: Option<u64>,
    total: u64,
}

impl WrapExtender {
    /// An extender for `format`'s wrap; the first sample is taken as is.
    pub fn new(format: TimeFormat) -> Self {
        Self {
            format,
            last: None,
            total: 0,
        }
    }

    /// The 64-bit ns of the wrapping sample `ns`.
    pub fn extend(&mut self, ns: u64) -> u64 {
        self.total = match self.last {
            None => ns,
            Some(last) => self
                .total
                .wrapping_add_signed(self.format.diff_ns(ns, last)),
        };
        self.last = Some(ns);
        self.total
    }
}

/// The raw register value of a SYSTIM held as `frac` (2^-32 ns units) in `format`.
fn raw_of(format: TimeFormat, frac: u128) -> u64 {
    match format {
        TimeFormat::Igc | TimeFormat::I210 => {
            let t = SysTime::from_ns((frac >> FRAC_BITS) as u64);
            (t.sec as u64) << 32 | t.nsec as u64
        }
        TimeFormat::I350 => (frac >> FRAC_BITS) as u64,
        TimeFormat::E82576 => (frac >> (FRAC_BITS - E82576_SHIFT)) as u64,
    }
}

/// The 2^-32 ns value of a raw register value in `format` (s:ns with ns ≥ 1e9 carries; the
/// caller wraps it).
fn frac_of_raw(format: TimeFormat, raw: u64) -> u128 {
    match format {
        TimeFormat::Igc | TimeFormat::I210 => {
            let ns = (raw >> 32) as u128 * NS_PER_S as u128 + (raw & 0xFFFF_FFFF) as u128;
            ns << FRAC_BITS
        }
        TimeFormat::I350 => (raw as u128) << FRAC_BITS,
        TimeFormat::E82576 => (raw as u128) << (FRAC_BITS - E82576_SHIFT),
    }
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

/// How far ahead [`PhcLaw::t_reaching_ns`] answers (2^40 ns, about 18 minutes).
pub const REACH_HORIZON_NS: u64 = 1 << 40;

/// Rebases remembered for [`Phc::ns_at_instant`]. A driver adjusting the frequency every
/// sync interval rebases a few times a second; the model processes a frame at most
/// milliseconds late, so a handful suffices.
const HISTORY: usize = 16;

impl PhcLaw {
    /// A law from its parts, as [`Self::parts`] gives them; `None` if a part is out of the
    /// model's range (`base` ≥ the format's wrap in 2^-32 ns, `rem` ≥ the rate denominator,
    /// |`osc_ppb`| > [`MAX_OSC_ERROR_PPB`]), since such a law could not be evaluated without
    /// overflow.
    pub fn from_parts(p: LawParts) -> Option<Self> {
        let den = p.format.rate(p.timinca, 0).1;
        let ok =
            p.base < p.format.wrap_frac() && p.rem < den && p.osc_ppb.abs() <= MAX_OSC_ERROR_PPB;
        ok.then_some(Self {
            base_t: p.base_t,
            base: p.base,
            rem: p.rem,
            timinca: p.timinca,
            osc_ppb: p.osc_ppb,
            running: p.running,
            format: p.format,
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
            format: self.format,
        }
    }

    /// SYSTIM at true time `t` in whole ns, truncated as the registers show it. Exact for
    /// `t ≥ base_t`; an earlier `t` reads the base (no time elapsed).
    pub fn ns_at(&self, t: u64) -> u64 {
        (self.at(t).0 >> FRAC_BITS) as u64
    }

    /// The SYSTIM registers' raw value at `t` (SYSTIMH << 32 | SYSTIML): s:ns (igc, i210),
    /// 40-bit ns (i350), the cycle count (82576).
    pub fn raw_at(&self, t: u64) -> u64 {
        raw_of(self.format, self.at(t).0)
    }

    /// The family's format.
    pub fn format(&self) -> TimeFormat {
        self.format
    }

    /// The first true instant ≥ `base_t` at which SYSTIM (its ns view) reads at least `ns`:
    /// when an output edge programmed for SYSTIM = `ns` happens. `None` if the clock is
    /// stopped, `ns` lies beyond the wrap, or more than [`REACH_HORIZON_NS`] ahead (the caller
    /// asks again later: the law may change before then anyway).
    pub fn t_reaching_ns(&self, ns: u64) -> Option<u64> {
        if !self.running || ns as u128 >= self.format.wrap_ns() as u128 {
            return None;
        }
        let target = (ns as u128) << FRAC_BITS;
        let Some(gap) = target.checked_sub(self.base) else {
            return Some(self.base_t);
        };
        if gap > (REACH_HORIZON_NS as u128) << FRAC_BITS {
            return None;
        }
        // base + floor((dt·N + rem)/D) ≥ target ⇔ dt ≥ (gap·D − rem)/N; gap < 2^72 and
        // D < 2^42, so the product fits.
        let (n, d) = self.format.rate(self.timinca, self.osc_ppb);
        let need = (gap * d).saturating_sub(self.rem);
        Some(self.base_t + need.div_ceil(n) as u64)
    }

    /// SYSTIM at `t` in 2^-32 ns with the carried remainder. A `t` before the last rebase
    /// counts as no elapsed time (a time source stepping back must not run the PHC backwards).
    fn at(&self, t: u64) -> (u128, u128) {
        if !self.running {
            return (self.base, self.rem);
        }
        let dt = t.saturating_sub(self.base_t) as u128;
        let (n, d) = self.format.rate(self.timinca, self.osc_ppb);
        // dt·N can exceed u128 (2^64 · 2^77); split dt = q·D + r so every product fits:
        // q < 2^34 and N < 2^77 (82576: N < 2^65); r < D < 2^42.
        let (q, r) = (dt / d, dt % d);
        let part = r * n + self.rem;
        let frac = (self.base + q * n + part / d) % self.format.wrap_frac();
        (frac, part % d)
    }
}

impl Phc {
    /// A running i225 PHC reading `systim_ns` at true time `t`, nominal TIMINCA.
    pub fn new(t: u64, systim_ns: u64, osc_ppb: i64) -> Self {
        Self::with_format(TimeFormat::Igc, t, systim_ns, osc_ppb)
    }

    /// A running PHC of `format` reading `systim_ns` (in its ns view) at true time `t`,
    /// TIMINCA 0 (nominal rate; stopped on 82576 until TIMINCA is written).
    pub fn with_format(format: TimeFormat, t: u64, systim_ns: u64, osc_ppb: i64) -> Self {
        Self {
            seg: PhcLaw {
                base_t: t,
                base: (systim_ns as u128 % format.wrap_ns() as u128) << FRAC_BITS,
                rem: 0,
                timinca: 0,
                osc_ppb: osc_ppb.clamp(-MAX_OSC_ERROR_PPB, MAX_OSC_ERROR_PPB),
                running: true,
                format,
            },
            history: VecDeque::new(),
        }
    }

    /// The clock's format.
    pub fn format(&self) -> TimeFormat {
        self.seg.format
    }

    /// The SYSTIM registers' raw value at `t` ([`PhcLaw::raw_at`]).
    pub fn raw_at(&self, t: u64) -> u64 {
        self.seg.raw_at(t)
    }

    /// The raw value as it was at instant `t`, also before the last rebase
    /// ([`Self::ns_at_instant`]).
    pub fn raw_at_instant(&self, t: u64) -> u64 {
        raw_of(self.seg.format, self.law_at_instant(t).at(t).0)
    }

    /// Sets the SYSTIM registers' raw value at `t` (a SYSTIML/SYSTIMH write pair in the
    /// family's format); the fraction below it is zeroed.
    pub fn set_raw(&mut self, t: u64, raw: u64) {
        self.rebase(t);
        self.seg.base = frac_of_raw(self.seg.format, raw) % self.seg.format.wrap_frac();
        self.seg.rem = 0;
    }

    /// Adds `delta` raw units (ns; 82576: counts) to SYSTIM at `t`, keeping the fraction.
    pub fn adjust_raw(&mut self, t: u64, delta: i128) {
        self.rebase(t);
        let unit: i128 = match self.seg.format {
            TimeFormat::E82576 => 1 << (FRAC_BITS - E82576_SHIFT),
            _ => 1 << FRAC_BITS,
        };
        let w = self.seg.format.wrap_frac() as i128;
        let b = self.seg.base as i128 + delta.saturating_mul(unit) % w;
        self.seg.base = ((b % w + w) % w) as u128;
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
        self.law_at_instant(t).ns_at(t)
    }

    /// The law in force at instant `t` (the oldest remembered one for older instants).
    fn law_at_instant(&self, t: u64) -> &PhcLaw {
        if t >= self.seg.base_t {
            return &self.seg;
        }
        self.history
            .iter()
            .rev()
            .find(|s| s.base_t <= t)
            .or(self.history.front())
            .unwrap_or(&self.seg)
    }

    /// When SYSTIM reaches `ns` under the law in force ([`PhcLaw::t_reaching_ns`]).
    pub fn t_reaching_ns(&self, ns: u64) -> Option<u64> {
        self.seg.t_reaching_ns(ns)
    }

    /// The law in force now (since the last rebase).
    pub fn law(&self) -> PhcLaw {
        self.seg.clone()
    }

    /// SYSTIM at `t` split as SYSTIMH:SYSTIML.
    pub fn time_at(&self, t: u64) -> SysTime {
        SysTime::from_ns(self.ns_at(t))
    }

    /// Sets SYSTIM to `ns` at `t` (settime; wraps like the format). The sub-ns fraction is
    /// zeroed.
    pub fn set_ns(&mut self, t: u64, ns: u64) {
        self.rebase(t);
        self.seg.base = (ns as u128 % self.seg.format.wrap_ns() as u128) << FRAC_BITS;
        self.seg.rem = 0;
    }

    /// TIMINCA as last written.
    pub fn timinca(&self) -> u32 {
        self.seg.timinca
    }

    /// Writes TIMINCA at `t`: time up to `t` accrues at the old rate.
    pub fn set_timinca(&mut self, t: u64, value: u32) {
        self.rebase(t);
        let f = self.seg.format;
        let (old, new) = (f.rate(self.seg.timinca, 0).1, f.rate(value, 0).1);
        // Only the 82576's IncPeriod changes the denominator: carry the remainder over.
        self.seg.rem = self.seg.rem * new / old;
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
    fn t_reaching_is_the_first_instant_systim_reads_the_target() {
        let formats = [TimeFormat::Igc, TimeFormat::I210, TimeFormat::I350];
        for (i, (ppb, osc)) in [(0, 0), (1_000, -37), (-250_000, 91_234), (62_499_999, 5)]
            .into_iter()
            .enumerate()
        {
            let f = formats[i % formats.len()];
            let mut p = Phc::with_format(f, 1_000, 7 * S + 123_456_789, osc);
            p.set_timinca(5_000, linux_timinca(ppb));
            for ahead in [1u64, 999, 1_000_000, 3 * S + 17] {
                let target = p.ns_at(5_000) + ahead;
                let t = p.t_reaching_ns(target).expect("within the horizon");
                assert!(p.ns_at(t) >= target, "{f:?} {ppb} {ahead}");
                assert!(
                    p.ns_at(t - 1) < target,
                    "{f:?} {ppb} {ahead}: not the first"
                );
            }
            // A target already passed is reached at the law's base; a stopped clock never.
            assert_eq!(p.t_reaching_ns(p.ns_at(5_000) - 10), Some(5_000));
            p.set_running(6_000, false);
            assert_eq!(p.t_reaching_ns(p.ns_at(6_000) + 10), None);
        }
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
