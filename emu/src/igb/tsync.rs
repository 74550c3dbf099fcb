//! The time-sync block of the igb parts (intel-timesync.md §1–§4, §7.5, §8.3): SYSTIM with each
//! family's latching rule, TIMINCA, TIMADJL/H, TSAUXC, TSICR/TSIM, the single TX stamp pair and
//! the 82576's RX stamp registers.
//!
//! Latching (§3):
//!
//! - i210/i211 and i350: "The timestamp latches on lowest register read. For I210/I211, the
//!   lowest register is SYSTIMR" (Linux igb_ptp.c igb_ptp_read_i210; the 82580 reader says the
//!   same of SYSTIMR). A SYSTIMR read samples the clock into SYSTIMR/SYSTIML/SYSTIMH; SYSTIML
//!   and SYSTIMH then return the sample. \[U\] A SYSTIML read without a SYSTIMR read first
//!   returns the last sample (a stale time), as a strict reading of "latches on the lowest
//!   register read" says — the issue text said the i210 latches on SYSTIML; Linux's comment is
//!   the primary source and wins.
//! - 82576: SYSTIML is the lowest register: its read latches SYSTIMH (Linux
//!   igb_ptp_read_82576 reads L then H; QEMU's model latches on SYSTIML). SYSTIMR does not exist.
//!
//! Writes: SYSTIML is held and a SYSTIMH write commits the pair in the family's format (the i210
//! settime writes L then H, igb_ptp_write_i210) \[U for i350/82576, whose Linux driver never
//! writes SYSTIM after reset\]. TIMADJH commits an offset of (TIMADJH b30:0 : TIMADJL) raw units
//! (s:ns on i210, ns on i350, counts on 82576), subtracted when TIMADJH b31 is set \[U: Linux
//! igb never uses TIMADJ; the layout follows QEMU's "TIMADJL | TIMADJH<<32" with a sign bit\].

use intel_regs::igb::Tsauxc;

use crate::nic::sdp::{Ctx, PinBlock, Pins, PinsConfig};
use crate::nic::tscause::TsCause;
use crate::phc::{Phc, TimeFormat};

/// TIMADJH b31: subtract the offset \[U\].
const TIMADJH_SIGN: u32 = 1 << 31;

/// SYSTIM, its latch and the cause pair.
#[derive(Debug, Clone)]
pub(super) struct TimeSync {
    pub(super) phc: Phc,
    /// SYSTIMR/SYSTIML/SYSTIMH as last sampled.
    latch_r: u32,
    latch_l: u32,
    latch_h: u32,
    /// SYSTIML as last written: committed by the SYSTIMH write.
    hold_l: u32,
    pub(super) timadjl: u32,
    pub(super) timadjh: u32,
    pub(super) tsauxc: Tsauxc,
    /// TSICR/TSIM (`nic::tscause`; the 82576 model never raises a cause).
    pub(super) cause: TsCause,
    /// The SDPs' time functions (`nic::sdp`; i210/i350, not the 82576).
    pub(super) pins: Pins,
}

impl TimeSync {
    pub(super) fn new(
        format: TimeFormat,
        t: u64,
        systim_ns: u64,
        osc: i64,
        tsauxc: Tsauxc,
    ) -> Self {
        let mut phc = Phc::with_format(format, t, systim_ns, osc);
        if format != TimeFormat::E82576 {
            // TSAUXC.DISABLE0 is igb's TSAUXC_DISABLE (b31, §2.3).
            phc.set_running(t, !tsauxc.contains(Tsauxc::DISABLE0));
        }
        Self {
            phc,
            latch_r: 0,
            latch_l: 0,
            latch_h: 0,
            hold_l: 0,
            timadjl: 0,
            timadjh: 0,
            tsauxc,
            cause: TsCause::default(),
            pins: Pins::new(PinsConfig::default(), t),
        }
    }

    /// Port reset: the timer keeps running (as on the i225 model, \[U\]); the cause pair clears.
    pub(super) fn port_reset(&mut self) {
        self.cause.reset();
    }

    fn format(&self) -> TimeFormat {
        self.phc.format()
    }

    /// Samples the clock at `t` into the latch registers.
    fn sample(&mut self, t: u64) {
        let raw = self.phc.raw_at(t);
        self.latch_l = raw as u32;
        self.latch_h = (raw >> 32) as u32;
        // The sub-ns fraction below SYSTIML (2^-32 ns units) \[U: bit layout\].
        self.latch_r = (self.phc.frac_at(t) & 0xFFFF_FFFF) as u32;
    }

    /// SYSTIMR read (i210/i350): latches and returns the residue.
    pub(super) fn read_systimr(&mut self, t: u64) -> u32 {
        self.sample(t);
        self.latch_r
    }

    /// SYSTIML read: latches first on the 82576 (its lowest register).
    pub(super) fn read_systiml(&mut self, t: u64) -> u32 {
        if self.format() == TimeFormat::E82576 {
            self.sample(t);
        }
        self.latch_l
    }

    pub(super) fn systiml(&self) -> u32 {
        self.latch_l
    }

    pub(super) fn systimh(&self) -> u32 {
        self.latch_h
    }

    pub(super) fn systimr(&self) -> u32 {
        self.latch_r
    }

    pub(super) fn write_systiml(&mut self, v: u32) {
        self.hold_l = v;
    }

    /// SYSTIMH write: commits (SYSTIMH, held SYSTIML) in the family's format at `t`.
    pub(super) fn write_systimh(&mut self, t: u64, v: u32) {
        // The i350's 40-bit counter keeps SYSTIMH b7:0 (§3): `set_raw` wraps the value.
        self.phc.set_raw(t, (v as u64) << 32 | self.hold_l as u64);
    }

    /// TIMADJH write: applies the signed offset at `t` (module docs).
    pub(super) fn write_timadjh(&mut self, t: u64, v: u32) {
        self.timadjh = v;
        let (hi, lo) = ((v & !TIMADJH_SIGN) as i128, self.timadjl as i128);
        let magnitude = match self.format() {
            TimeFormat::Igc | TimeFormat::I210 => hi * 1_000_000_000 + lo,
            TimeFormat::I350 | TimeFormat::E82576 => hi << 32 | lo,
        };
        let delta = if v & TIMADJH_SIGN != 0 {
            -magnitude
        } else {
            magnitude
        };
        self.phc.adjust_raw(t, delta);
    }

    /// TSAUXC write: DISABLE0 stops/restarts SYSTIM (i210/i350; the 82576 stores it).
    /// The i210/i350 pins take target times, clock outputs and stamps (`nic::sdp`).
    pub(super) fn write_tsauxc(&mut self, t: u64, v: Tsauxc) {
        if self.format() == TimeFormat::E82576 {
            self.tsauxc = v;
            return;
        }
        self.advance_pins(t);
        self.phc.set_running(t, !v.contains(Tsauxc::DISABLE0));
        self.pins_tsauxc(v, t);
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

/// A stamp pair released by reading its high register: the one TX set (TSYNCTXCTL.VALID,
/// §7.5) and the 82576's RX set (TSYNCRXCTL.VALID, §8.3).
#[derive(Debug, Clone, Default)]
pub(super) struct StampPair {
    /// VALID: the pair holds a stamp nobody released yet.
    pub(super) valid: bool,
    /// The raw value (H << 32 | L).
    pub(super) raw: u64,
    /// 82576 RX only: RXSATRL and RXSATRH (source identity, sequenceId).
    pub(super) attr: (u32, u32),
    pub(super) latched: u64,
    /// Stamps that found the pair still valid and were lost.
    pub(super) lost: u64,
    /// Valid stamps released by a read of the high register (handed to the driver).
    pub(super) released: u64,
}

impl StampPair {
    /// Latches `raw` unless the pair still holds an unread stamp; true if latched.
    pub(super) fn latch(&mut self, raw: u64, attr: (u32, u32)) -> bool {
        if self.valid {
            self.lost += 1;
            return false;
        }
        self.valid = true;
        self.raw = raw;
        self.attr = attr;
        self.latched += 1;
        true
    }

    pub(super) fn low(&self) -> u32 {
        self.raw as u32
    }

    pub(super) fn high(&self) -> u32 {
        (self.raw >> 32) as u32
    }

    /// The high register's read: its value, and the pair is free again.
    pub(super) fn read_high(&mut self) -> u32 {
        self.released += u64::from(self.valid);
        self.valid = false;
        self.high()
    }

    /// Port reset: the pair empties \[assumption\]; the counters stay.
    pub(super) fn port_reset(&mut self) {
        self.valid = false;
        self.raw = 0;
        self.attr = (0, 0);
    }
}
