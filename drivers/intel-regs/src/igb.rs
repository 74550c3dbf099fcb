//! i210/i211, i350/i354 and 82576 (Linux `igb`). Offsets are BAR0 byte offsets of 32-bit
//! little-endian registers, named as in Linux's `e1000_regs.h`/`e1000_defines.h`. Section
//! numbers refer to `shared/reference/intel-timesync.md`. What igb shares with the i225 (§1:
//! "identical offsets on igc and igb unless a column says otherwise") is re-exported from
//! [`crate::e1000`]; this module holds what is igb's own.

pub use crate::e1000::*;

// --- General (e1000_regs.h) ---
/// igc moved it to 0x12014.
pub const EERD: u32 = 0x0014;

// --- Interrupts (§6: ICR/ICS/IMS/IMC at the e1000 offsets; the extended ones as on igc) ---
pub const ICR: u32 = 0x00C0;
pub const ICS: u32 = 0x00C8;
pub const IMS: u32 = 0x00D0;
pub const IMC: u32 = 0x00D8;

/// Typed offsets: the shared ones and this family's ICR block (see [`crate::fields`]).
pub mod reg {
    pub use crate::e1000::reg::*;
    use crate::fields::{IntCause, Reg};

    pub const ICR: Reg<IntCause> = Reg::at(super::ICR);
    pub const ICS: Reg<IntCause> = Reg::at(super::ICS);
    pub const IMS: Reg<IntCause> = Reg::at(super::IMS);
    pub const IMC: Reg<IntCause> = Reg::at(super::IMC);
}

// --- Queues: queue n < 4 sits at the e1000 offsets (e1000_regs.h E1000_RDBAL(_n) etc.) ---
const fn rxq(n: u32, reg: u32) -> u32 {
    0x2800 + 0x100 * n + reg
}
const fn txq(n: u32, reg: u32) -> u32 {
    0x3800 + 0x100 * n + reg
}
pub const fn rdbal(n: u32) -> u32 {
    rxq(n, 0x00)
}
pub const fn rdbah(n: u32) -> u32 {
    rxq(n, 0x04)
}
pub const fn rdlen(n: u32) -> u32 {
    rxq(n, 0x08)
}
pub const fn srrctl(n: u32) -> u32 {
    rxq(n, 0x0C)
}
pub const fn rdh(n: u32) -> u32 {
    rxq(n, 0x10)
}
pub const fn rdt(n: u32) -> u32 {
    rxq(n, 0x18)
}
pub const fn rxdctl(n: u32) -> u32 {
    rxq(n, 0x28)
}
pub const fn tdbal(n: u32) -> u32 {
    txq(n, 0x00)
}
pub const fn tdbah(n: u32) -> u32 {
    txq(n, 0x04)
}
pub const fn tdlen(n: u32) -> u32 {
    txq(n, 0x08)
}
pub const fn tdh(n: u32) -> u32 {
    txq(n, 0x10)
}
pub const fn tdt(n: u32) -> u32 {
    txq(n, 0x18)
}
pub const fn txdctl(n: u32) -> u32 {
    txq(n, 0x28)
}

// --- Time sync (§1) ---
pub const TIMADJL: u32 = 0xB60C;
pub const TIMADJH: u32 = 0xB610;
pub const TXSTMPL: u32 = 0xB618;
pub const TXSTMPH: u32 = 0xB61C;
/// 82576 register-mode RX stamp (§8.3): RXSTMPL then RXSTMPH; the H read releases the latch.
pub const RXSTMPL: u32 = 0xB624;
pub const RXSTMPH: u32 = 0xB628;
/// The latched frame's attributes: source identity (L) and sequenceId (H b31:16).
pub const RXSATRL: u32 = 0xB62C;
pub const RXSATRH: u32 = 0xB630;
/// Read first to latch SYSTIML/H on 82580/i350/i210 (§3).
pub const SYSTIMR: u32 = 0xB6F8;

/// EType queue filter `n` (§1).
pub const fn etqf(n: u32) -> u32 {
    0x5CB0 + 4 * n
}

/// The TX sets of an igb part: one (§7.5).
pub const TXSTMPL_SETS: [u32; 1] = [TXSTMPL];
pub const TXSTMPH_SETS: [u32; 1] = [TXSTMPH];

/// ETQF fields (§1).
pub mod etqf {
    pub const ETYPE_MASK: u32 = 0xFFFF;
    pub const FILTER_ENABLE: u32 = 1 << 26;
    pub const IMM_INT: u32 = 1 << 29;
    /// Time-stamp frames of this ethertype.
    pub const F1588: u32 = 1 << 30;
    pub const QUEUE_ENABLE: u32 = 1 << 31;
    /// The filter index igb uses for PTP (E1000_ETQF_FILTER_1588).
    pub const FILTER_1588: u32 = 3;
}

/// TIMINCA (§4).
pub mod timinca {
    /// ISGN and INCVALUE_MASK hold on i210/i350/82580.
    pub use crate::e1000::timinca::*;
    /// 82576: IncPeriod b31:24, IncValue b23:0.
    pub const INCPERIOD_SHIFT_82576: u32 = 24;
    pub const INCVALUE_MASK_82576: u32 = (1 << 24) - 1;
    /// 82576: the counter counts ns << 19 (IGB_82576_TSYNC_SHIFT).
    pub const TSYNC_SHIFT_82576: u32 = 19;
    /// 82576 nominal: IncPeriod 1, IncValue 16 << 19 (one 16 ns period adds 16 ns << 19).
    pub const INCPERIOD_82576: u32 = 1 << INCPERIOD_SHIFT_82576;
    pub const INCVALUE_82576: u32 = 16 << TSYNC_SHIFT_82576;
}

/// Width of the 82580/i350 SYSTIM ns counter (§3: SYSTIMH b7:0 : SYSTIML).
pub const NBITS_82580: u32 = 40;

/// Largest |adjfine| in ppb (Linux igb_ptp.c max_adj per MAC).
pub const MAX_ADJ_PPB_I210: u32 = 62_499_999;
pub const MAX_ADJ_PPB_82576: u32 = 999_999_881;

/// Length of the RX timestamp header in the packet buffer (IGB_TS_HDR_LEN).
pub const TS_HDR_LEN: usize = 16;

/// TX/RX latency compensation of the i210 in ns, (TX, RX) at a link speed (§8.4). Linux
/// compensates on the i210 only; the other igb parts get (0, 0).
pub const fn latency_ns_i210(speed_mbps: u32) -> (u32, u32) {
    match speed_mbps {
        10 => (9542, 20662),
        100 => (1024, 2213),
        1000 => (178, 448),
        _ => (0, 0),
    }
}
