//! The time-sync block of i225/i226 (intel-timesync.md §1–§5): SYSTIM with its latching and
//! settime rules, TIMINCA, TIMADJ, TSAUXC and the TSICR/TSIM cause pair.
//!
//! The TX timestamp sets live in `txstamp`; they raise TSICR.TXTS through
//! [`TimeSync::raise_txts`], which models the i225 interrupt gate of §7.2.

use intel_regs::igc::{TsCause as Cause, Tsauxc};

use crate::nic::sdp::{Ctx, PinBlock, Pins, PinsConfig};
use crate::nic::tscause::TsCause;
use crate::phc::{NS_PER_S, Phc, SysTime};

/// Timer 0 and its cause registers.
#[derive(Debug, Clone)]
pub(super) struct TimeSync {
    pub(super) phc: Phc,
    /// SYSTIMH as latched by the last SYSTIML read (§3: "reading it latches SYSTIMH").
    systimh_latch: u32,
    /// SYSTIML as last written: held until the SYSTIMH write commits the pair (§3, §5).
    systiml_hold: u32,
    /// Stored only: b30 ADJUST_METH is written by newer drivers, TIMADJ is unused for adjtime.
    pub(super) timadj: u32,
    pub(super) tsauxc: Tsauxc,
    /// TSICR/TSIM (`nic::tscause`).
    pub(super) cause: TsCause,
    /// The SDPs' time functions (`nic::sdp`).
    pub(super) pins: Pins,
    /// Model the §7.2 hardware bug (the real i225/i226); false = an ideal part.
    pub(super) txts_quirk: bool,
    /// The §7.2 gate: open until a TXTS event asserts, closed again until TXSTMPH_0 is read.
    txts_gate_open: bool,
    /// A TXTS cause set while the gate was closed: it shows in TSICR but may not assert the
    /// interrupt until the gate reopens.
    txts_held: bool,
}

impl TimeSync {
    /// The block at power-on: SYSTIM = `systim_ns` counting from true time `t` (unless
    /// `tsauxc_power_on` has DISABLE0), nominal TIMINCA.
    pub(super) fn new(t: u64, systim_ns: u64, osc_ppb: i64, tsauxc_power_on: Tsauxc) -> Self {
        let mut phc = Phc::new(t, systim_ns, osc_ppb);
        phc.set_running(t, !tsauxc_power_on.contains(Tsauxc::DISABLE0));
        Self {
            phc,
            systimh_latch: 0,
            systiml_hold: 0,
            timadj: 0,
            tsauxc: tsauxc_power_on,
            cause: TsCause::default(),
            pins: Pins::new(PinsConfig::default(), t),
            txts_quirk: true,
            txts_gate_open: true,
            txts_held: false,
        }
    }

    /// Port reset (CTRL.RST/DEV_RST). Model assumption \[U\]: the timer (SYSTIM, TIMINCA,
    /// TIMADJ, TSAUXC and the SYSTIM latch/hold registers) is not touched — the PHC keeps
    /// running across a port reset — while the interrupt cause/mask pair is cleared. Linux
    /// restores the time after a reset anyway (§5), so a driver cannot tell the difference.
    pub(super) fn port_reset(&mut self) {
        self.cause.reset();
        self.txts_gate_open = true;
        self.txts_held = false;
    }

    /// SYSTIML read at true time `t`: samples the timer, latches the seconds for SYSTIMH.
    pub(super) fn read_systiml(&mut self, t: u64) -> u32 {
        let now = self.phc.time_at(t);
        self.systimh_latch = now.sec;
        now.nsec
    }

    /// SYSTIMH read: the seconds latched by the last SYSTIML read (stale if SYSTIML was not
    /// read first — the reason drivers always read L then H).
    pub(super) fn systimh(&self) -> u32 {
        self.systimh_latch
    }

    /// SYSTIML without side effects (test inspection): the current nanoseconds.
    pub(super) fn peek_systiml(&self, t: u64) -> u32 {
        self.phc.time_at(t).nsec
    }

    /// SYSTIML write: held, the timer is not touched yet.
    pub(super) fn write_systiml(&mut self, v: u32) {
        self.systiml_hold = v;
    }

    /// SYSTIMH write: commits (SYSTIMH, held SYSTIML) at once, so settime is atomic (§3 \[U\]:
    /// "a model should apply the pair then"). A SYSTIMH write with no SYSTIML write before it
    /// uses the last value written to SYSTIML (a holding register; 0 after power-on) \[U\].
    /// A nanosecond value ≥ 1e9 is not rejected: it carries into the seconds \[U\].
    pub(super) fn write_systimh(&mut self, t: u64, v: u32) {
        let ns = v as u64 * NS_PER_S + self.systiml_hold as u64;
        self.phc.set_ns(t, ns);
    }

    /// The value the next SYSTIML/SYSTIMH read pair would return at `t` (inspection).
    pub(super) fn time_at(&self, t: u64) -> SysTime {
        self.phc.time_at(t)
    }

    /// TSAUXC write: DISABLE0 (b31) stops/restarts timer 0 (§2.3); target times, clock
    /// outputs and auxiliary stamps go to the pins (`nic::sdp`); timers 1–3 are stored only.
    pub(super) fn write_tsauxc(&mut self, t: u64, v: Tsauxc) {
        self.advance_pins(t);
        self.phc.set_running(t, !v.contains(Tsauxc::DISABLE0));
        self.pins_tsauxc(v, t);
    }

    /// A TX timestamp latched: sets TSICR.TXTS through the §7.2 gate. Returns true when the
    /// closed gate holds the interrupt back.
    ///
    /// The bug (seed 000 patch 4/4: "the interrupt is only cleared if the IGC_TXSTMPH_0
    /// register is read") is modelled as a gate in front of the TXTS interrupt: a TXTS event
    /// with the gate open asserts normally and closes the gate; later events still set
    /// TSICR.TXTS (and their TXTT bits) but assert nothing until a TXSTMPH_0 read reopens it.
    /// \[assumption\] The gate closes on every TXTS event, whether or not TSIM enables TXTS:
    /// the latch is inside the timestamp unit, ahead of the mask.
    pub(super) fn raise_txts(&mut self) -> bool {
        self.cause.raise(Cause::TXTS);
        if !self.txts_quirk {
            return false;
        }
        if self.txts_gate_open {
            self.txts_gate_open = false;
            false
        } else {
            self.txts_held = true;
            true
        }
    }

    /// A TXSTMPH_0 read reopens the §7.2 gate. \[assumption\] If TSICR.TXTS is still pending
    /// (a held cause the driver never cleared) it asserts now — the caller re-evaluates the
    /// edge, so `TSICR & TSIM` raises ICR.TS then — and the gate closes again behind it.
    pub(super) fn reopen_txts_gate(&mut self) {
        if !self.txts_quirk {
            return;
        }
        self.txts_held = false;
        self.txts_gate_open = !self.cause.tsicr.contains(Cause::TXTS);
    }

    /// Turns the §7.2 quirk on or off; off also releases a held cause.
    pub(super) fn set_txts_quirk(&mut self, on: bool) {
        self.txts_quirk = on;
        if !on {
            self.txts_held = false;
            self.txts_gate_open = true;
        }
    }

    /// Whether the §7.2 gate is open (always true on an ideal part).
    pub(super) fn txts_gate_open(&self) -> bool {
        !self.txts_quirk || self.txts_gate_open
    }

    /// True once when `TSICR & TSIM` goes from zero to non-zero (`TsCause::take_edge`). A
    /// TXTS held by the closed §7.2 gate does not count.
    pub(super) fn take_ts_edge(&mut self) -> bool {
        let held = if self.txts_held {
            Cause::TXTS
        } else {
            Cause::empty()
        };
        self.cause.take_edge(held)
    }
}

impl PinBlock for TimeSync {
    fn split(&mut self) -> (&mut Pins, Ctx<'_>) {
        let cx = Ctx {
            phc: &self.phc,
            tsauxc: &mut self.tsauxc,
            cause: &mut self.cause,
        };
        (&mut self.pins, cx)
    }
}
