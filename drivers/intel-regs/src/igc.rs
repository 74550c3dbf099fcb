//! i225/i226 (Linux `igc`). Offsets are BAR0 byte offsets of 32-bit little-endian registers.
//! Section numbers refer to `shared/reference/intel-timesync.md`.

// --- General (§10.1) ---
pub const CTRL: u32 = 0x0000;
pub const STATUS: u32 = 0x0008;
pub const EECD: u32 = 0x0010;
pub const CTRL_EXT: u32 = 0x0018;
pub const MDIC: u32 = 0x0020;
pub const RCTL: u32 = 0x0100;
pub const TCTL: u32 = 0x0400;
pub const TIPG: u32 = 0x0410;
pub const RXPBS: u32 = 0x2404;
pub const MTA: u32 = 0x5200;
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

/// Receive address low/high, entry `n`.
pub const fn ral(n: u32) -> u32 {
    0x5400 + 8 * n
}
pub const fn rah(n: u32) -> u32 {
    0x5404 + 8 * n
}

pub mod ctrl {
    pub const GIO_MASTER_DISABLE: u32 = 1 << 2;
    pub const SLU: u32 = 1 << 6;
    pub const FRCSPD: u32 = 1 << 11;
    pub const FRCDPX: u32 = 1 << 12;
    /// Port reset ("igc: Change Device Reset to Port Reset").
    pub const RST: u32 = 1 << 26;
    pub const DEV_RST: u32 = 1 << 29;
    pub const PHY_RST: u32 = 1 << 31;
}

pub mod status {
    pub const FD: u32 = 1 << 0;
    pub const LU: u32 = 1 << 1;
    pub const SPEED_100: u32 = 1 << 6;
    pub const SPEED_1000: u32 = 1 << 7;
    pub const GIO_MASTER_ENABLE: u32 = 1 << 19;
    pub const SPEED_2500: u32 = 1 << 22;
}

pub mod eecd {
    /// NVM present (Linux igc_defines.h IGC_EECD_PRES).
    pub const PRES: u32 = 1 << 8;
    /// NVM auto-read done; poll after reset.
    pub const AUTO_RD: u32 = 1 << 9;
    /// A flash part is attached (Linux igc_defines.h IGC_EECD_FLASH_DETECTED_I225); without it
    /// igc uses the iNVM and does not validate a checksum (igc_i225.c igc_init_nvm_params_i225).
    pub const FLASH_DETECTED: u32 = 1 << 19;
}

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

/// MDIC fields (Linux `igc_defines.h`): PHY register access through the MAC.
pub mod mdic {
    pub const DATA_MASK: u32 = 0x0000_FFFF;
    pub const REG_MASK: u32 = 0x001F_0000;
    pub const REG_SHIFT: u32 = 16;
    pub const PHY_MASK: u32 = 0x03E0_0000;
    pub const PHY_SHIFT: u32 = 21;
    pub const OP_WRITE: u32 = 0x0400_0000;
    pub const OP_READ: u32 = 0x0800_0000;
    pub const READY: u32 = 1 << 28;
    pub const ERROR: u32 = 1 << 30;
}

/// PHY identifier of the i225/i226 internal PHY (GPY211), PHY registers 2:3 (`I225_I_PHY_ID`).
pub const I225_I_PHY_ID: u32 = 0x67C9_DC00;

pub mod ctrl_ext {
    /// Tells firmware a driver owns the port.
    pub const DRV_LOAD: u32 = 1 << 28;
}

pub mod rah {
    pub const AV: u32 = 1 << 31;
}

// --- Interrupts (§6) ---
pub const ICR: u32 = 0x1500;
pub const ICS: u32 = 0x1504;
pub const IMS: u32 = 0x1508;
pub const IMC: u32 = 0x150C;
pub const IAM: u32 = 0x1510;
pub const GPIE: u32 = 0x1514;
pub const EICS: u32 = 0x1520;
pub const EIMS: u32 = 0x1524;
pub const EIMC: u32 = 0x1528;
pub const EIAC: u32 = 0x152C;
pub const EIAM: u32 = 0x1530;
pub const EICR: u32 = 0x1580;
pub const IVAR0: u32 = 0x1700;
pub const IVAR_MISC: u32 = 0x1740;

pub const fn eitr(n: u32) -> u32 {
    0x1680 + 4 * n
}

pub mod icr {
    pub const TXDW: u32 = 1 << 0;
    pub const TXQE: u32 = 1 << 1;
    pub const LSC: u32 = 1 << 2;
    pub const RXSEQ: u32 = 1 << 3;
    pub const RXDMT0: u32 = 1 << 4;
    pub const RXO: u32 = 1 << 6;
    pub const RXT0: u32 = 1 << 7;
    /// Time sync: a TSICR cause is pending.
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

/// IVAR entries: vector | VALID.
pub const IVAR_VALID: u32 = 0x80;

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
    pub const CT_MASK: u32 = 0xFF << 4;
    pub const RTLC: u32 = 1 << 24;
}

pub mod xdctl {
    pub const QUEUE_ENABLE: u32 = 1 << 25;
    pub const SWFLUSH: u32 = 1 << 26;
}

pub mod srrctl {
    pub const BSIZEPKT_SHIFT: u32 = 0;
    pub const BSIZEHDR_SHIFT: u32 = 2;
    pub const DESCTYPE_ADV_ONEBUF: u32 = 0x0200_0000;
    pub const TIMESTAMP: u32 = 1 << 30;
    pub const DROP_EN: u32 = 1 << 31;
    pub const TIMER1SEL_SHIFT: u32 = 14;
    pub const TIMER0SEL_SHIFT: u32 = 17;
}

pub mod rxpbs {
    /// Put RX timestamps into the packet buffer.
    pub const CFG_TS_EN: u32 = 1 << 31;
}

// --- Time sync (§1, §2) ---
pub const SYSTIML: u32 = 0xB600;
pub const SYSTIMH: u32 = 0xB604;
pub const TIMINCA: u32 = 0xB608;
pub const TIMADJ: u32 = 0xB60C;
pub const TSYNCTXCTL: u32 = 0xB614;
pub const TSYNCRXCTL: u32 = 0xB620;
pub const TSAUXC: u32 = 0xB640;
pub const TRGTTIML0: u32 = 0xB644;
pub const TRGTTIMH0: u32 = 0xB648;
pub const TRGTTIML1: u32 = 0xB64C;
pub const TRGTTIMH1: u32 = 0xB650;
pub const FREQOUT0: u32 = 0xB654;
pub const FREQOUT1: u32 = 0xB658;
pub const AUXSTMPL0: u32 = 0xB65C;
pub const AUXSTMPH0: u32 = 0xB660;
pub const AUXSTMPL1: u32 = 0xB664;
pub const AUXSTMPH1: u32 = 0xB668;
pub const TSICR: u32 = 0xB66C;
pub const TSIM: u32 = 0xB674;
pub const TSYNCRXCFG: u32 = 0x5F50;
pub const TSSDP: u32 = 0x003C;

/// TX timestamp low/high register of set `n` (0..=3).
pub const TXSTMPL: [u32; 4] = [0xB618, 0xB698, 0xB6B8, 0xB6D8];
pub const TXSTMPH: [u32; 4] = [0xB61C, 0xB69C, 0xB6BC, 0xB6DC];

pub mod tsynctxctl {
    /// TXTT_n: set n holds a timestamp (TXTT_0 is igb's VALID).
    pub const fn txtt(n: u32) -> u32 {
        1 << n
    }
    pub const TXTT_ANY: u32 = 0xF;
    pub const ENABLED: u32 = 1 << 4;
    /// Sample at the PHY's start of packet; igc always sets it with ENABLED.
    pub const TXSYNSIG: u32 = 1 << 5;
}

pub mod tsyncrxctl {
    pub const TYPE_MASK: u32 = 0x0E;
    pub const TYPE_L2_V2: u32 = 0x00;
    pub const TYPE_L4_V1: u32 = 0x02;
    pub const TYPE_L2_L4_V2: u32 = 0x04;
    pub const TYPE_ALL: u32 = 0x08;
    pub const TYPE_EVENT_V2: u32 = 0x0A;
    pub const ENABLED: u32 = 1 << 4;
    pub const RXSYNSIG: u32 = 1 << 10;
}

pub mod timinca {
    /// 1 = slow down.
    pub const ISGN: u32 = 1 << 31;
    pub const INCVALUE_MASK: u32 = 0x7FFF_FFFF;
}

pub mod timadj {
    pub const ADJUST_METH: u32 = 1 << 30;
}

pub mod tsauxc {
    pub const EN_TT0: u32 = 1 << 0;
    pub const EN_TT1: u32 = 1 << 1;
    pub const EN_CLK0: u32 = 1 << 2;
    pub const EN_TS0: u32 = 1 << 8;
    pub const EN_TS1: u32 = 1 << 10;
    pub const DISABLE1: u32 = 1 << 27;
    pub const DISABLE2: u32 = 1 << 28;
    pub const DISABLE3: u32 = 1 << 29;
    pub const DIS_TS_CLEAR: u32 = 1 << 30;
    /// Stops SYSTIM0.
    pub const DISABLE0: u32 = 1 << 31;
}

pub mod tsicr {
    pub const SYS_WRAP: u32 = 1 << 0;
    pub const TXTS: u32 = 1 << 1;
    pub const TT0: u32 = 1 << 3;
    pub const TT1: u32 = 1 << 4;
    pub const AUTT0: u32 = 1 << 5;
    pub const AUTT1: u32 = 1 << 6;
}

// --- Descriptors (§9) ---
pub mod txd {
    pub const DTALEN_MASK: u32 = 0xFFFF;
    /// TSTAMP_REG: which TX timestamp set (b17:16).
    pub const TSTAMP_REG_SHIFT: u32 = 16;
    pub const MAC_TSTAMP: u32 = 1 << 19;
    pub const DTYP_DATA: u32 = 0x0030_0000;
    pub const EOP: u32 = 1 << 24;
    pub const IFCS: u32 = 1 << 25;
    pub const RS: u32 = 1 << 27;
    pub const DEXT: u32 = 1 << 29;
    pub const PAYLEN_SHIFT: u32 = 14;
    /// Write-back status: descriptor done.
    pub const STA_DD: u32 = 1 << 0;
}

pub mod rxd {
    pub const STAT_DD: u32 = 1 << 0;
    pub const STAT_EOP: u32 = 1 << 1;
    /// Timestamp in packet: a 16-byte header precedes the frame.
    pub const STAT_TSIP: u32 = 1 << 15;
}

/// Length of the RX timestamp header in the packet buffer (`IGC_TS_HDR_LEN`).
pub const TS_HDR_LEN: usize = 16;

// --- Clock facts (§4, §8.4) ---
/// Largest |adjfine| the igc driver accepts, in ppb.
pub const MAX_ADJ_PPB: u32 = 62_499_999;
/// Nanoseconds per SYSTIM increment the INCVALUE fraction applies to (312.5 MHz; derived from
/// the driver's adjfine formula, see §4 [D]).
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
