//! Ground truth from the models: what each emulated PHC reads at any host instant, exactly.
//!
//! An emulated PHC's time is a function of the host's CLOCK_MONOTONIC known only to its model
//! (the [`PhcLaw`] in force since its last rebase). The model publishes that law through a
//! [`ModelObserver`] on every change; [`TruthWriter`] stores it in a small shared file, so the
//! lab (another process on the same host, hence the same CLOCK_MONOTONIC) can evaluate
//! `PHC_a(t) − PHC_b(t)` at one instant `t` with no measurement error at all
//! ([`true_offset`]). The file also carries counters the model keeps for benchmarks: BAR reads
//! and writes the driver made, and frames the cable towards this port lost.
//!
//! # Record layout (little-endian `u64` words, [`TRUTH_FILE_LEN`] bytes, mode 0644)
//!
//! | word | field | |
//! |---|---|---|
//! | 0 | magic `"PTPTRUTH"` | stored last at initialisation |
//! | 1 | layout version ([`TRUTH_VERSION`]) | |
//! | 2 | seq | seqlock: odd while an update is in progress |
//! | 3 | valid | 1 once a law is published, 0 before / after the writer stopped |
//! | 4 | generation | law changes published by this writer |
//! | 5 | base_t | host CLOCK_MONOTONIC (ns) of the last rebase |
//! | 6, 7 | base lo, hi | SYSTIM at base_t, 2^-32 ns (u128) |
//! | 8, 9 | rem lo, hi | sub-unit remainder (u128) |
//! | 10 | timinca | TIMINCA as written |
//! | 11 | osc_ppb | crystal error, i64 two's complement |
//! | 12 | running | 1 unless TSAUXC.DISABLE0 |
//! | 13 | bar_reads | outside the seqlock, relaxed increments |
//! | 14 | bar_writes | outside the seqlock |
//! | 15 | wire_lost | frames the cable towards this port lost (total) |
//! | 16 | format | the family's SYSTIM format ([`TimeFormat::code`](crate::phc::TimeFormat::code)) |
//! | 17 | drv_valid | 1 while a driver timecounter is published ([`DriverClock`]) |
//! | 18 | drv_count | the counter value the timecounter was last based at |
//! | 19, 20 | drv_fp lo, hi | its time then, ns · 2^drv_shift (u128) |
//! | 21 | drv_mask | the counter's width mask |
//! | 22 | drv_shift | counter units per ns, as a power of two |
//! | 23 | drv_mult | the timecounter's rate, fixed point of 2^drv_mult_shift (layout 4) |
//! | 24 | drv_mult_shift | fraction bits of drv_mult (< 64) |
//!
//! Words 3–12 and 16–24 are the seqlock-protected record; 13–15 are free-running counters.
//!
//! # The clock a PTP service sees
//!
//! For igc and i210/i211 the driver serves SYSTIM itself, so the clock is the law. The i350 and
//! 82576 drivers (igbd, as Linux's igb) serve a software 64-bit ns timecounter over the raw
//! SYSTIM count: settime and adjtime only re-base that timecounter; frequency goes to TIMINCA on
//! the i350 and to the timecounter's rate (`mult`) on the 82576, whose TIMINCA stays nominal.
//! Their driver publishes the timecounter's mapping from count to ns into the same record
//! ([`ModelObserver::driver_clock_update`], from the driver thread, through the same seqlock),
//! and every reader evaluates **the served clock**: `ns(t) = DriverClock::ns_of(law.raw_at(t))`
//! when a driver clock is published, `law.ns_at(t)` otherwise ([`TruthSnapshot::ns_at`]).
//! [`true_offset`], [`TruthReader::now`], the lab and tsperf all go through that one function,
//! whatever the family. A timecounter's state is re-published on every reading the driver
//! takes, so its base stays within one wrap of the count (i350: 2^40 ns ≈ 18 min).
//!
//! # Why the truth is exact
//!
//! The model runs each law change inside the writer's update ([`ModelObserver::phc_law_update`]):
//! the sequence counter turns odd *before* the model reads the host clock for the change's
//! instant `t_w`. A reader that loads both laws, then reads the host clock (`t_r`), then finds
//! both counters unchanged, knows no change began before its counter re-check; since `t_w` is
//! read after the odd store and `t_r` before the re-check, `t_r < t_w` for any change it missed,
//! so the laws it holds are the ones in force at `t_r`. (This leans on CLOCK_MONOTONIC
//! readings ordering like the fenced memory operations around them, as they do on one host.)

use std::sync::Arc;

use crate::phc::PhcLaw;

/// What a model reports to an observer: PHC law changes and its register/wire counters.
///
/// Optional: a model without one (every deterministic test) behaves identically.
pub trait ModelObserver: Send + Sync {
    /// Runs `change` — which applies a PHC law change and returns the law then in force — as
    /// one update of the published record: readers see either the old law (for instants
    /// before the change) or the new one, never a mix.
    fn phc_law_update(&self, change: &mut dyn FnMut() -> PhcLaw);
    /// The driver read a BAR register.
    fn bar_read(&self);
    /// The driver wrote a BAR register.
    fn bar_write(&self);
    /// Frames the cable towards this port has lost so far (a running total).
    fn wire_lost(&self, total: u64);
    /// Runs `change` — which updates the driver's software clock over this PHC and returns its
    /// mapping then in force (`None`: the driver serves SYSTIM as it reads) — as one update of
    /// the published record, like [`Self::phc_law_update`]. Called by the driver, not the model.
    /// Default: runs `change` and publishes nothing.
    fn driver_clock_update(&self, change: &mut dyn FnMut() -> Option<DriverClock>) {
        change();
    }
}

/// A driver's timecounter over a wrapping PHC counter (Linux's `timecounter`, i350 and 82576):
/// the time of counter value `c` is `(fp + (((c − count) mod (mask + 1)) · mult >>
/// mult_shift)) >> shift` ns — the mapping a driver's reading at `count` left in force, at the
/// rate the driver runs it (igbd steers the 82576's frequency here, not in TIMINCA). Counts up
/// to half a wrap behind `count` are earlier times (as the driver converts stamps older than
/// its last reading).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverClock {
    /// The counter value at the last re-base.
    pub count: u64,
    /// The time then, in ns · 2^`shift`.
    pub fp: u128,
    /// The counter's width mask (2^bits − 1).
    pub mask: u64,
    /// Counter units per ns, as a power of two.
    pub shift: u32,
    /// The rate: an advance of `d` counts adds `d · mult >> mult_shift` (nominal: `mult` =
    /// 2^`mult_shift`).
    pub mult: u64,
    /// Fraction bits of `mult` (below 64).
    pub mult_shift: u32,
}

impl Default for DriverClock {
    /// Count 0 at time 0, nominal rate.
    fn default() -> Self {
        Self {
            count: 0,
            fp: 0,
            mask: 0,
            shift: 0,
            mult: 1,
            mult_shift: 0,
        }
    }
}

impl DriverClock {
    /// An advance of `d` counts in ns · 2^shift, at this rate.
    fn scaled(&self, d: u64) -> u128 {
        // mult < 2^64 and d < 2^64: the product fits in a u128.
        (u128::from(d) * u128::from(self.mult)) >> self.mult_shift.min(127)
    }

    /// The served time of counter value `c`, ns.
    pub fn ns_of(&self, c: u64) -> u64 {
        let ahead = c.wrapping_sub(self.count) & self.mask;
        let fp = if ahead > self.mask / 2 {
            let behind = self.count.wrapping_sub(c) & self.mask;
            self.fp.saturating_sub(self.scaled(behind))
        } else {
            self.fp.wrapping_add(self.scaled(ahead))
        };
        (fp >> self.shift.min(127)) as u64
    }
}

/// A shared observer, as a model holds it.
pub type SharedObserver = Arc<dyn ModelObserver>;

/// Why a truth record cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TruthError {
    /// The file does not exist (the daemon has not started, or runs without `--truth`).
    #[error("no truth record at {0}")]
    Missing(String),
    /// Another OS error, with the operation and path.
    #[error("{0}")]
    Io(String),
    /// The path exists as something the writer did not make: a symlink, another user's file,
    /// a hard link, not a regular file. Refused before anything is changed (issue 23: a
    /// planted symlink made root chmod and truncate the file it pointed at).
    #[error("truth record {path}: {why}; remove it or choose another path")]
    Foreign {
        /// The path given.
        path: String,
        /// What it is instead.
        why: String,
    },
    /// The file has the wrong size for a truth record.
    #[error("truth record has {got} bytes, expected {want}")]
    BadSize {
        /// The file's size.
        got: u64,
        /// [`TRUTH_FILE_LEN`](self::TRUTH_FILE_LEN).
        want: u64,
    },
    /// The file is not (yet) an initialised truth record.
    #[error("not a truth record (bad magic)")]
    BadMagic,
    /// A truth record of another layout version.
    #[error("truth record layout version {got}, expected {want}")]
    BadVersion {
        /// The record's version.
        got: u64,
        /// The version this build reads.
        want: u64,
    },
    /// No law published yet (or the writer has stopped).
    #[error("truth record holds no law")]
    Empty,
    /// The record stayed inside an update for every retry (writer preempted or died).
    #[error("truth record busy: writer inside an update")]
    Busy,
    /// The stored law is outside the model's range (a corrupted file).
    #[error("truth record holds an invalid law")]
    Corrupt,
}

#[cfg(unix)]
mod file;
#[cfg(unix)]
pub use file::{
    TRUTH_FILE_LEN, TRUTH_MAGIC, TRUTH_VERSION, TrueOffset, TruthReader, TruthSnapshot,
    TruthWriter, true_offset,
};
