//! i225/i226 (Linux `igc`). Offsets are BAR0 byte offsets of 32-bit little-endian registers.
//! Section numbers refer to `shared/reference/intel-timesync.md`.

pub use crate::e1000::*;

// --- General (§10.1) ---
pub const SW_FW_SYNC: u32 = 0x5B5C;
/// Software semaphore (Linux igc_regs.h).
pub const SWSM: u32 = 0x5B50;
/// Firmware semaphore (Linux igc_regs.h).
pub const FWSM: u32 = 0x5B54;
/// i225 PHY power management (Linux igc_regs.h IGC_I225_PHPM).
pub const PHPM: u32 = 0x0E14;
/// NVM read through the shadow RAM (Linux igc_regs.h IGC_EERD).
pub const EERD: u32 = 0x12014;
/// Management control (Linux igc_regs.h).
pub const MANC: u32 = 0x5820;

/// EERD fields (Linux igc_defines.h IGC_NVM_RW_*).
pub mod eerd {
    pub const START: u32 = 1 << 0;
    pub const DONE: u32 = 1 << 1;
    pub const ADDR_SHIFT: u32 = 2;
    pub const DATA_SHIFT: u32 = 16;
}

/// PHPM bits (Linux igc_defines.h).
pub mod phpm {
    /// PHY reset complete (IGC_PHY_RST_COMP), polled after CTRL.PHY_RST.
    pub const RST_COMP: u32 = 1 << 8;
}

/// SWSM bits (Linux igc_defines.h).
pub mod swsm {
    /// Driver semaphore: a read returns it and then sets it.
    pub const SMBI: u32 = 1 << 0;
    /// Software/firmware semaphore: latches when written while firmware does not hold it.
    pub const SWESMBI: u32 = 1 << 1;
}

/// PHY identifier of the i225/i226 internal PHY (GPY211), PHY registers 2:3 (`I225_I_PHY_ID`).
pub const I225_I_PHY_ID: u32 = 0x67C9_DC00;

// --- Interrupts (§6) ---
pub const ICR: u32 = 0x1500;
pub const ICS: u32 = 0x1504;
pub const IMS: u32 = 0x1508;
pub const IMC: u32 = 0x150C;
pub const IAM: u32 = 0x1510;

/// Typed offsets: the shared ones and this family's ICR block (see [`crate::fields`]).
pub mod reg {
    pub use crate::e1000::reg::*;
    use crate::fields::{IntCause, Reg};

    pub const ICR: Reg<IntCause> = Reg::at(super::ICR);
    pub const ICS: Reg<IntCause> = Reg::at(super::ICS);
    pub const IMS: Reg<IntCause> = Reg::at(super::IMS);
    pub const IMC: Reg<IntCause> = Reg::at(super::IMC);
}

pub const fn eitr(n: u32) -> u32 {
    0x1680 + 4 * n
}

// --- Queues (§10.1) ---
pub const fn rdbal(n: u32) -> u32 {
    0xC000 + 0x40 * n
}
pub const fn rdbah(n: u32) -> u32 {
    0xC004 + 0x40 * n
}
pub const fn rdlen(n: u32) -> u32 {
    0xC008 + 0x40 * n
}
pub const fn srrctl(n: u32) -> u32 {
    0xC00C + 0x40 * n
}
pub const fn rdh(n: u32) -> u32 {
    0xC010 + 0x40 * n
}
pub const fn rdt(n: u32) -> u32 {
    0xC018 + 0x40 * n
}
pub const fn rxdctl(n: u32) -> u32 {
    0xC028 + 0x40 * n
}
pub const fn tdbal(n: u32) -> u32 {
    0xE000 + 0x40 * n
}
pub const fn tdbah(n: u32) -> u32 {
    0xE004 + 0x40 * n
}
pub const fn tdlen(n: u32) -> u32 {
    0xE008 + 0x40 * n
}
pub const fn tdh(n: u32) -> u32 {
    0xE010 + 0x40 * n
}
pub const fn tdt(n: u32) -> u32 {
    0xE018 + 0x40 * n
}
pub const fn txdctl(n: u32) -> u32 {
    0xE028 + 0x40 * n
}

pub mod xdctl {
    pub use crate::e1000::xdctl::*;
    pub const SWFLUSH: u32 = 1 << 26;
}

pub mod srrctl {
    pub use crate::e1000::srrctl::*;
    pub const BSIZEPKT_SHIFT: u32 = 0;
    pub const DROP_EN: u32 = 1 << 31;
    pub const TIMER1SEL_SHIFT: u32 = 14;
    pub const TIMER0SEL_SHIFT: u32 = 17;
}

// --- Time sync (§1, §2) ---
/// igb's TIMADJL at the same offset.
pub const TIMADJ: u32 = 0xB60C;
/// TRGTTIML's timer select (b31:30; 0 = SYSTIM0; Linux IGC_AUX_IO_TIMER_SEL_SYSTIM0..3). The
/// i210 has no such field.
pub const TRGTTIML_TIMER_SEL_SHIFT: u32 = 30;

/// TX timestamp low/high register of set `n` (0..=3).
pub const TXSTMPL: [u32; 4] = [0xB618, 0xB698, 0xB6B8, 0xB6D8];
pub const TXSTMPH: [u32; 4] = [0xB61C, 0xB69C, 0xB6BC, 0xB6DC];

pub mod timadj {
    pub const ADJUST_METH: u32 = 1 << 30;
}

// --- Descriptors (§9) ---
pub mod txd {
    pub use crate::e1000::txd::*;
    /// TSTAMP_REG: which TX timestamp set (b17:16).
    pub const TSTAMP_REG_SHIFT: u32 = 16;
}

/// Length of the RX timestamp header in the packet buffer (`IGC_TS_HDR_LEN`).
pub const TS_HDR_LEN: usize = 16;

// --- Clock facts (§4, §8.4) ---
/// Largest |adjfine| the igc driver accepts, in ppb.
pub const MAX_ADJ_PPB: u32 = 62_499_999;
/// Nanoseconds per SYSTIM increment the INCVALUE fraction applies to (312.5 MHz; derived from
/// the driver's adjfine formula, see §4 \[D\]).
pub const TICK_PS: u64 = 3_200;

/// TX/RX latency compensation by link speed in Mb/s (`igc.h`, current values).
pub const fn latency_ns(speed_mbps: u32) -> (u32, u32) {
    match speed_mbps {
        10 => (240, 6450),
        100 => (58, 185),
        1000 => (80, 300),
        2500 => (1325, 1485),
        _ => (0, 0),
    }
}
