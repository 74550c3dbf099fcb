//! i210/i211, i350/i354 and 82576 (Linux `igb`). Offsets are BAR0 byte offsets of 32-bit
//! little-endian registers, named as in Linux's `e1000_regs.h`/`e1000_defines.h`. Section
//! numbers refer to `shared/reference/intel-timesync.md`. Where a field is the same as on the
//! i225 (advanced descriptors, TSYNCTXCTL, TSICR, GPIE, IVAR), the `igc` module's constants apply
//! (§1: "identical offsets on igc and igb unless a column says otherwise").

// --- General (e1000_regs.h) ---
pub const CTRL: u32 = 0x0000;
pub const STATUS: u32 = 0x0008;
pub const EECD: u32 = 0x0010;
pub const EERD: u32 = 0x0014;
pub const CTRL_EXT: u32 = 0x0018;
pub const MDIC: u32 = 0x0020;
/// Time-sync SDP routing (§2.3).
pub const TSSDP: u32 = 0x003C;
pub const RCTL: u32 = 0x0100;
pub const TCTL: u32 = 0x0400;
pub const TIPG: u32 = 0x0410;
pub const RXPBS: u32 = 0x2404;
pub const MTA: u32 = 0x5200;

/// Receive address low/high, entry `n` (entries 0..15).
pub const fn ral(n: u32) -> u32 {
    0x5400 + 8 * n
}
pub const fn rah(n: u32) -> u32 {
    0x5404 + 8 * n
}

// --- Interrupts (§6: ICR/ICS/IMS/IMC at the e1000 offsets; the extended ones as on igc) ---
pub const ICR: u32 = 0x00C0;
pub const ICS: u32 = 0x00C8;
pub const IMS: u32 = 0x00D0;
pub const IMC: u32 = 0x00D8;
pub const GPIE: u32 = 0x1514;
pub const EICS: u32 = 0x1520;
pub const EIMS: u32 = 0x1524;
pub const EIMC: u32 = 0x1528;
pub const EIAC: u32 = 0x152C;
pub const EIAM: u32 = 0x1530;
pub const EICR: u32 = 0x1580;
pub const IVAR0: u32 = 0x1700;
pub const IVAR_MISC: u32 = 0x1740;
pub const IVAR_VALID: u32 = 0x80;

pub mod ctrl {
    pub const GIO_MASTER_DISABLE: u32 = 1 << 2;
    pub const SLU: u32 = 1 << 6;
    pub const FRCSPD: u32 = 1 << 11;
    pub const FRCDPX: u32 = 1 << 12;
    /// Global reset (E1000_CTRL_RST).
    pub const RST: u32 = 1 << 26;
    pub const PHY_RST: u32 = 1 << 31;
}

pub mod status {
    pub const FD: u32 = 1 << 0;
    pub const LU: u32 = 1 << 1;
    pub const SPEED_100: u32 = 1 << 6;
    pub const SPEED_1000: u32 = 1 << 7;
    pub const GIO_MASTER_ENABLE: u32 = 1 << 19;
}

pub mod eecd {
    /// NVM auto-read done; polled after reset.
    pub const AUTO_RD: u32 = 1 << 9;
}

pub mod ctrl_ext {
    /// Tells firmware a driver owns the port.
    pub const DRV_LOAD: u32 = 1 << 28;
}

/// ICR/ICS/IMS/IMC bits (e1000_defines.h E1000_ICR_*; TS at b19 as on igc, §6).
pub mod icr {
    pub const TXDW: u32 = 1 << 0;
    pub const LSC: u32 = 1 << 2;
    /// RX descriptor minimum threshold; igb raises it through ICS to run its handler.
    pub const RXDMT0: u32 = 1 << 4;
    pub const RXT0: u32 = 1 << 7;
    /// Time sync: a TSICR cause is set.
    pub const TS: u32 = 1 << 19;
    pub const DOUTSYNC: u32 = 1 << 28;
    pub const DRSTA: u32 = 1 << 30;
    pub const INT_ASSERTED: u32 = 1 << 31;
}

pub mod gpie {
    pub const NSICR: u32 = 1 << 0;
    pub const MSIX_MODE: u32 = 1 << 4;
    pub const EIAME: u32 = 1 << 30;
    pub const PBA: u32 = 1 << 31;
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

pub mod rctl {
    pub const EN: u32 = 1 << 1;
    pub const UPE: u32 = 1 << 3;
    pub const MPE: u32 = 1 << 4;
    pub const LPE: u32 = 1 << 5;
    pub const BAM: u32 = 1 << 15;
    pub const SECRC: u32 = 1 << 26;
}

pub mod tctl {
    pub const EN: u32 = 1 << 1;
    pub const PSP: u32 = 1 << 3;
    pub const CT_SHIFT: u32 = 4;
    pub const CT_MASK: u32 = 0xFF << CT_SHIFT;
    pub const RTLC: u32 = 1 << 24;
}

/// RXDCTL/TXDCTL.
pub mod xdctl {
    pub const QUEUE_ENABLE: u32 = 1 << 25;
}

pub mod srrctl {
    pub const BSIZEHDR_SHIFT: u32 = 2;
    pub const DESCTYPE_ADV_ONEBUF: u32 = 1 << 25;
    /// Stamp received frames into the buffer (82580 and later, §8.2).
    pub const TIMESTAMP: u32 = 1 << 30;
}

pub mod rxpbs {
    /// i210: put the timestamp into the RX buffer (§8.2).
    pub const CFG_TS_EN: u32 = 1 << 31;
}

// --- Time sync (§1) ---
pub const SYSTIML: u32 = 0xB600;
pub const SYSTIMH: u32 = 0xB604;
pub const TIMINCA: u32 = 0xB608;
pub const TIMADJL: u32 = 0xB60C;
pub const TIMADJH: u32 = 0xB610;
pub const TSYNCTXCTL: u32 = 0xB614;
pub const TXSTMPL: u32 = 0xB618;
pub const TXSTMPH: u32 = 0xB61C;
pub const TSYNCRXCTL: u32 = 0xB620;
/// 82576 register-mode RX stamp (§8.3): RXSTMPL then RXSTMPH; the H read releases the latch.
pub const RXSTMPL: u32 = 0xB624;
pub const RXSTMPH: u32 = 0xB628;
/// The latched frame's attributes: source identity (L) and sequenceId (H b31:16).
pub const RXSATRL: u32 = 0xB62C;
pub const RXSATRH: u32 = 0xB630;
pub const TSAUXC: u32 = 0xB640;
pub const TSICR: u32 = 0xB66C;
pub const TSIM: u32 = 0xB674;
/// Read first to latch SYSTIML/H on 82580/i350/i210 (§3).
pub const SYSTIMR: u32 = 0xB6F8;
/// Time-sync RX message filter (§1).
pub const TSYNCRXCFG: u32 = 0x5F50;

/// EType queue filter `n` (§1).
pub const fn etqf(n: u32) -> u32 {
    0x5CB0 + 4 * n
}

/// The TX sets of an igb part: one (§7.5).
pub const TXSTMPL_SETS: [u32; 1] = [TXSTMPL];
pub const TXSTMPH_SETS: [u32; 1] = [TXSTMPH];

pub mod tsynctxctl {
    /// The TX stamp pair holds a stamp (§2.1 igb name VALID).
    pub const VALID: u32 = 1 << 0;
    pub const ENABLED: u32 = 1 << 4;
}

pub mod tsyncrxctl {
    /// 82576 register mode: RXSTMPL/H hold a stamp (§2.2).
    pub const VALID: u32 = 1 << 0;
    pub const TYPE_MASK: u32 = 0x0E;
    pub const TYPE_L2_V2: u32 = 0x00;
    pub const TYPE_L4_V1: u32 = 0x02;
    pub const TYPE_L2_L4_V2: u32 = 0x04;
    pub const TYPE_ALL: u32 = 0x08;
    pub const TYPE_EVENT_V2: u32 = 0x0A;
    pub const ENABLED: u32 = 1 << 4;
}

pub mod tsicr {
    pub const SYS_WRAP: u32 = 1 << 0;
    pub const TXTS: u32 = 1 << 1;
    pub const RXTS: u32 = 1 << 2;
}

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
    /// i210/i350/82580: slow down.
    pub const ISGN: u32 = 1 << 31;
    pub const INCVALUE_MASK: u32 = 0x7FFF_FFFF;
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

/// Advanced RX write-back status bits igb adds (§9).
pub mod rxd {
    /// 82576: this frame's stamp is in RXSTMPL/H (register mode, §8.3).
    pub const STAT_TS: u32 = 1 << 16;
    /// The buffer starts with the 16-byte timestamp header (§8.1).
    pub const STAT_TSIP: u32 = 1 << 15;
    /// Length of that header (IGB_TS_HDR_LEN).
    pub const TS_HDR_LEN: usize = 16;
}

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
