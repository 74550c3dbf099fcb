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

/// What a family's time-sync block must provide.
pub trait ClockHw<M: Mmio>: Send + Sync {
    /// Latched state between [`ClockHw::latch`] and [`ClockHw::finish`].
    type Latch: Copy;
    /// Largest |frequency adjustment| in ppb.
    const MAX_ADJ_PPB: u32;
    /// Largest PHC time the hardware can hold, in ns.
    const MAX_TIME_NS: u64;
    /// Performs the one register read that samples the clock (i225: SYSTIML).
    fn latch(&self, regs: &Regs<M>) -> Self::Latch;
    /// Reads the rest of the latched value and returns the time in ns.
    fn finish(&self, regs: &Regs<M>, latch: Self::Latch) -> u64;
    /// Writes the time (already range-checked).
    fn write(&self, regs: &Regs<M>, ns: u64);
    /// Programs a frequency offset (already range-checked against MAX_ADJ_PPB).
    fn set_freq(&self, regs: &Regs<M>, scaled_ppm: i64);
}

/// The gettimex sample with the narrowest CLOCK_REALTIME bracket. A sample whose bracket ends
/// before it starts (the wall clock stepped back between the two readings) says nothing about
/// when the PHC was read and is never chosen; `None` if every sample is like that.
pub fn tightest_bracket(samples: &[TimeXSample]) -> Option<&TimeXSample> {
    samples
        .iter()
        .filter_map(|s| Some((s.sys_after_ns.checked_sub(s.sys_before_ns)?, s)))
        .min_by_key(|&(width, _)| width)
        .map(|(_, s)| s)
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
}

/// A host-time bracket around the latching read wider than this (the thread was preempted)
/// is not used for the clock page or the rate estimate.
const MAX_BRACKET_NS: u64 = 20_000;
/// Minimum window before a rate measurement is trusted (host scheduling noise is ~µs).
const RATE_WINDOW_MIN_NS: u64 = 200_000_000;
/// Window after which the anchor moves forward, so the estimate follows oscillator wander.
const RATE_WINDOW_MAX_NS: u64 = 10_000_000_000;

type Publisher = Box<dyn Fn(&PageSample) + Send + Sync>;

/// The PHC of one NIC. The lock plays the role of Linux's `tmreg_lock`: the SYSTIM latch is a
/// two-read sequence, so two threads (requests, the clock-page refresher) must not interleave.
/// It is a sleeping mutex, not a spin lock: in userspace the holder can be preempted, and a
/// spinning waiter would then burn a whole time slice.
pub struct Phc<M, H> {
    regs: Arc<Regs<M>>,
    hw: H,
    state: Mutex<State>,
    publisher: Option<Publisher>,
}

impl<M: Mmio, H: ClockHw<M>> Phc<M, H> {
    pub fn new(regs: Arc<Regs<M>>, hw: H) -> Self {
        Self {
            regs,
            hw,
            state: Mutex::new(State {
                scaled_ppm: 0,
                last: None,
                anchor: None,
                osc_rate_ppb: 0.0,
            }),
            publisher: None,
        }
    }

    /// Calls `f` with every new [`PageSample`] (the daemon writes it to the clock page).
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
        let before = mono_ns();
        let l = self.hw.latch(&self.regs);
        let after = mono_ns();
        let phc = self.hw.finish(&self.regs, l);
        let mono = before / 2 + after / 2;
        if after - before > MAX_BRACKET_NS {
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
            let sys_before_ns = realtime_ns();
            let l = self.hw.latch(&self.regs);
            let sys_after_ns = realtime_ns();
            let phc_ns = self.hw.finish(&self.regs, l);
            out.push(TimeXSample {
                sys_before_ns,
                phc_ns,
                sys_after_ns,
            });
        }
        // Map the tightest sample to the monotonic timescale for the clock page.
        let Some(s) = tightest_bracket(&out).copied() else {
            return Ok(out);
        };
        if s.sys_after_ns - s.sys_before_ns > MAX_BRACKET_NS {
            return Ok(out);
        }
        let rt_minus_mono = realtime_ns() as i128 - mono_ns() as i128;
        let mid = (s.sys_before_ns / 2 + s.sys_after_ns / 2) as i128;
        let mono = (mid - rt_minus_mono).max(0) as u64;
        self.observe(&mut st, s.phc_ns, mono);
        Ok(out)
    }

    /// Sets the time. No read is needed to publish: the value written and the host time of
    /// the write are the new anchor.
    pub fn settime(&self, ns: u64) -> Result<(), HwError> {
        if ns > H::MAX_TIME_NS {
            return Err(HwError::InvalidArgument("time beyond the PHC's range"));
        }
        let mut st = self.lock();
        self.hw.write(&self.regs, ns);
        let mono = mono_ns();
        self.stepped(&mut st, ns, mono);
        Ok(())
    }

    /// Steps the time by `delta_ns`. A read-modify-write like Linux's, but the host time that
    /// passes between the read and the write is added back, so the step is exact to the
    /// host-clock resolution instead of losing the bus latency.
    pub fn adjtime(&self, delta_ns: i64) -> Result<(), HwError> {
        let mut st = self.lock();
        let before = mono_ns();
        let l = self.hw.latch(&self.regs);
        let after = mono_ns();
        let now = self.hw.finish(&self.regs, l);
        let at = before / 2 + after / 2;
        let rate = 1.0 + self.rate_locked(&st) * 1e-9;
        let elapsed = (mono_ns().saturating_sub(at) as f64 * rate) as i128;
        let target = now as i128 + delta_ns as i128 + elapsed;
        if target < 0 || target > H::MAX_TIME_NS as i128 {
            return Err(HwError::InvalidArgument(
                "adjustment leaves the PHC's range",
            ));
        }
        let target = target as u64;
        self.hw.write(&self.regs, target);
        let mono = mono_ns();
        self.stepped(&mut st, target, mono);
        Ok(())
    }

    /// Sets the frequency offset (absolute, from nominal), Linux `scaled_ppm` units.
    pub fn adjfine(&self, scaled_ppm: i64) -> Result<(), HwError> {
        // |scaled_ppm| · 1000 / 2^16 > max_adj, in integers (no rounding at the boundary).
        if scaled_ppm.unsigned_abs() as u128 * 1000 > H::MAX_ADJ_PPB as u128 * 65536 {
            return Err(HwError::InvalidArgument("frequency beyond max_adj"));
        }
        let mut st = self.lock();
        // Re-anchor at the moment of the change using the old rate, then switch.
        let mono = mono_ns();
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

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(before: u64, after: u64) -> TimeXSample {
        TimeXSample {
            sys_before_ns: before,
            phc_ns: 7,
            sys_after_ns: after,
        }
    }

    #[test]
    fn a_bracket_the_wall_clock_stepped_back_in_is_never_the_tightest() {
        // The second sample's CLOCK_REALTIME went back 1 s between its readings: a u64
        // subtraction would overflow (panic in debug, a huge width in release).
        let s = [
            sample(5_000, 5_400),
            sample(2_000_000_000, 1_000_000_100),
            sample(6_000, 6_250),
        ];
        assert_eq!(tightest_bracket(&s), Some(&s[2]));
        assert_eq!(tightest_bracket(&s[1..2]), None);
        assert_eq!(tightest_bracket(&[]), None);
        // A zero-width bracket (coarse clock) is a valid, tightest one.
        let z = [sample(10, 20), sample(30, 30)];
        assert_eq!(tightest_bracket(&z), Some(&z[1]));
    }
}
