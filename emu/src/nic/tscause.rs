//! TSICR/TSIM, the time-sync cause pair (intel-timesync.md §2.4), the same on igc and igb.
//!
//! Clearing: a read clears TSICR, and so does writing 1 to a cause bit (the Feb 2024 fixes
//! cite i225 SDM §8.16.1; the i210 datasheet as cited by linuxptp says the same). ICR.TS is
//! raised on the rising edge of `TSICR & TSIM`: "TSICR must be cleared ... before another
//! ICR.Time_Sync can be raised".

use intel_regs::e1000::TsCause as Bits;

/// The cause pair and its edge detector.
#[derive(Debug, Clone, Default)]
pub(crate) struct TsCause {
    pub(crate) tsicr: Bits,
    pub(crate) tsim: Bits,
    /// `TSICR & TSIM != 0` at the last evaluation.
    level: bool,
}

impl TsCause {
    /// Port reset: both registers clear.
    pub(crate) fn reset(&mut self) {
        *self = Self::default();
    }

    /// TSICR read: read-to-clear.
    pub(crate) fn read(&mut self) -> Bits {
        std::mem::take(&mut self.tsicr)
    }

    /// TSICR write: write-1-to-clear.
    pub(crate) fn write(&mut self, v: Bits) {
        self.tsicr -= v;
    }

    /// A time-sync event sets cause bits.
    pub(crate) fn raise(&mut self, bits: Bits) {
        self.tsicr |= bits;
    }

    /// True once when `TSICR & TSIM` (without the `held` causes, which may not assert yet)
    /// goes from zero to non-zero: the caller raises ICR.TS then.
    pub(crate) fn take_edge(&mut self, held: Bits) -> bool {
        let level = !((self.tsicr & self.tsim) - held).is_empty();
        let edge = level && !self.level;
        self.level = level;
        edge
    }
}
