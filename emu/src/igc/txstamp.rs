//! The four TX timestamp sets of i225/i226 and TSYNCTXCTL (intel-timesync.md §2.1, §7.1,
//! §7.4), with the fault injections that act on them.
//!
//! - A frame whose first data descriptor has MAC_TSTAMP latches a stamp into the set named by
//!   TSTAMP_REG (b17:16) and sets TXTT_n; the TSICR.TXTS cause is the caller's business.
//! - Reading TXSTMPH_n releases set n (clears TXTT_n); reading TXSTMPL_n alone changes
//!   nothing (§7.1).
//! - Reading TXSTMPH_0 clears *all* TXTT bits (§7.1, known only from driver comments \[U\]);
//!   [`TxStamps::h0_clears_all`] turns that off.

use intel_regs::igc::TsyncTxCtl;

use crate::phc::SysTime;

/// Number of TX timestamp sets (`IGC_MAX_TX_TSTAMP_REGS`, §7.4).
pub const TX_STAMP_SETS: usize = 4;

/// How a TXTT bit is stuck (fault injection).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stuck {
    /// Survives this many more releasing reads.
    Reads(u32),
    /// Survives every read until the test clears it.
    UntilCleared,
}

/// What became of a stamp request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Latch {
    /// Latched into the set; TXTT_n is now set.
    Latched,
    /// The set still held an unread stamp: the new one is lost.
    Busy,
    /// A fault injection swallowed it.
    Dropped,
}

/// TSYNCTXCTL and the stamp sets.
#[derive(Debug, Clone)]
pub(super) struct TxStamps {
    /// TSYNCTXCTL as written, without the TXTT bits (ENABLED, TXSYNSIG, ... stored as is).
    ctl: TsyncTxCtl,
    /// TXTT_0..3: hardware-owned.
    txtt: TsyncTxCtl,
    sets: [SysTime; TX_STAMP_SETS],
    stuck: [Option<Stuck>; TX_STAMP_SETS],
    /// A TXSTMPH_0 read clears every TXTT bit (§7.1).
    pub(super) h0_clears_all: bool,
    /// Stamp requests still to be swallowed (fault injection).
    drop_next: u64,
    pub(super) latched: u64,
    /// Of those, per set (fault tests check that every set still latches after a fault).
    pub(super) latched_per_set: [u64; TX_STAMP_SETS],
    /// Valid stamps a TXSTMPH read released (TXTT_n cleared while set): handed to the driver.
    pub(super) released: u64,
    pub(super) lost: u64,
    pub(super) dropped: u64,
    /// Releasing reads a stuck TXTT bit survived.
    pub(super) stuck_reads: u64,
}

impl TxStamps {
    pub(super) fn new(h0_clears_all: bool) -> Self {
        Self {
            ctl: TsyncTxCtl::empty(),
            txtt: TsyncTxCtl::empty(),
            sets: [SysTime::default(); TX_STAMP_SETS],
            stuck: [None; TX_STAMP_SETS],
            h0_clears_all,
            drop_next: 0,
            latched: 0,
            latched_per_set: [0; TX_STAMP_SETS],
            released: 0,
            lost: 0,
            dropped: 0,
            stuck_reads: 0,
        }
    }

    /// Port reset: TSYNCTXCTL and the sets return to 0 like the other MAC registers
    /// \[assumption\]; a stuck-bit fault goes with the bit. Injections still armed (dropped
    /// stamps) and the counters are model-side and survive.
    pub(super) fn port_reset(&mut self) {
        self.ctl = TsyncTxCtl::empty();
        self.txtt = TsyncTxCtl::empty();
        self.sets = [SysTime::default(); TX_STAMP_SETS];
        self.stuck = [None; TX_STAMP_SETS];
    }

    /// TSYNCTXCTL as read.
    pub(super) fn ctl(&self) -> TsyncTxCtl {
        self.ctl | self.txtt
    }

    /// TSYNCTXCTL write. \[assumption\] TXTT bits are read-only to software: writing them
    /// (0 or 1) changes nothing; only a TXSTMPH read releases a set.
    pub(super) fn write_ctl(&mut self, v: TsyncTxCtl) {
        self.ctl = v - TsyncTxCtl::TXTT_ANY;
    }

    /// TSYNCTXCTL.ENABLED.
    pub(super) fn enabled(&self) -> bool {
        self.ctl.contains(TsyncTxCtl::ENABLED)
    }

    /// TXTT_0..3.
    pub(super) fn txtt(&self) -> TsyncTxCtl {
        self.txtt
    }

    /// The stamp held in set `n` (whatever was last latched; 0 after reset).
    pub(super) fn set(&self, n: usize) -> SysTime {
        self.sets.get(n).copied().unwrap_or_default()
    }

    /// A frame requests a stamp into set `n` (0..4) with value `t`.
    ///
    /// \[assumption\] A set whose TXTT bit is still set keeps its unread stamp: the new one is
    /// lost, not overwritten (the §7.4 "all four busy" behaviour loses stamps).
    pub(super) fn latch(&mut self, n: usize, t: SysTime) -> Latch {
        if self.drop_next > 0 {
            self.drop_next -= 1;
            self.dropped += 1;
            return Latch::Dropped;
        }
        let n = n % TX_STAMP_SETS;
        let bit = TsyncTxCtl::txtt(n as u32);
        if self.txtt.contains(bit) {
            self.lost += 1;
            return Latch::Busy;
        }
        self.sets[n] = t;
        self.txtt |= bit;
        self.latched += 1;
        self.latched_per_set[n] += 1;
        Latch::Latched
    }

    /// TXSTMPH_n read: the seconds, releasing set n (and all sets for n = 0 when
    /// [`Self::h0_clears_all`]).
    pub(super) fn read_h(&mut self, n: usize) -> u32 {
        let v = self.set(n).sec;
        if n == 0 && self.h0_clears_all {
            for i in 0..TX_STAMP_SETS {
                self.release(i);
            }
        } else {
            self.release(n);
        }
        v
    }

    /// Clears TXTT_n unless a fault keeps it stuck.
    fn release(&mut self, n: usize) {
        let Some(stuck) = self.stuck.get_mut(n) else {
            return;
        };
        let bit = TsyncTxCtl::txtt(n as u32);
        match *stuck {
            Some(Stuck::UntilCleared) if self.txtt.contains(bit) => self.stuck_reads += 1,
            Some(Stuck::Reads(k)) if self.txtt.contains(bit) => {
                self.stuck_reads += 1;
                *stuck = k.checked_sub(1).filter(|&k| k > 0).map(Stuck::Reads);
            }
            _ => {
                *stuck = None;
                self.released += u64::from(self.txtt.contains(bit));
                self.txtt -= bit;
            }
        }
    }

    /// Fault: the next `n` stamp requests latch nothing (the frame still goes out).
    pub(super) fn drop_next(&mut self, n: u64) {
        self.drop_next = self.drop_next.saturating_add(n);
    }

    /// Fault: TXTT_n reads as set now and survives `reads` releasing reads (`None`: until
    /// [`Self::clear_stuck`]). The set's registers keep whatever they last latched.
    pub(super) fn stick(&mut self, n: usize, reads: Option<u32>) {
        if n >= TX_STAMP_SETS {
            return;
        }
        self.txtt |= TsyncTxCtl::txtt(n as u32);
        self.stuck[n] = match reads {
            None => Some(Stuck::UntilCleared),
            Some(0) => None,
            Some(k) => Some(Stuck::Reads(k)),
        };
    }

    /// Ends a stuck-bit fault on set `n` and clears TXTT_n, as a working release would.
    pub(super) fn clear_stuck(&mut self, n: usize) {
        if n >= TX_STAMP_SETS {
            return;
        }
        self.stuck[n] = None;
        self.txtt -= TsyncTxCtl::txtt(n as u32);
    }
}
