//! The e1000-style registers igc (i225/i226) and igb (i210/i350/82576) parts have in common:
//! the same offset, and the same bits in the same places, on both families. `igc` and `igb`
//! re-export everything here, so `intel_regs::igc::CTRL` and `intel_regs::igb::CTRL` are one
//! constant; a family module adds its own bits to a shared group by re-exporting it inside its
//! own module of the same name. Code written once for both families (intel-common's MAC and
//! rings, ptp-emu's shared NIC engines) imports from here, so a family-only raw bit does not
//! compile there.
//!
//! Only what both Linux drivers define with the same value belongs here (`igc_regs.h` /
//! `igc_defines.h` as `IGC_*` and `e1000_regs.h` / `e1000_defines.h` as `E1000_*`). Each group
//! names its section of `shared/reference/intel-timesync.md`. What differs (the ICR block, queue
//! offsets, EERD, the TX stamp sets, TIMADJ's name) stays in the family modules.
//!
//! Registers whose bits carry meaning have a type in [`crate::fields`] (re-exported here) and a
//! typed offset in [`reg`]; one type holds both families' bits of its register (the family-only
//! ones say so), so code written for both families can name a family-only bit of a typed
//! register: its doc, not the compiler, says where it exists.

pub use crate::fields::*;

// --- General (§10.1 for igc; e1000_regs.h E1000_CTRL..E1000_MTA for igb) ---
pub const CTRL: u32 = 0x0000;
pub const STATUS: u32 = 0x0008;
pub const EECD: u32 = 0x0010;
pub const CTRL_EXT: u32 = 0x0018;
pub const MDIC: u32 = 0x0020;
pub const RCTL: u32 = 0x0100;
pub const TCTL: u32 = 0x0400;
pub const TIPG: u32 = 0x0410;
/// §1: "same on i210/i211".
pub const RXPBS: u32 = 0x2404;
pub const MTA: u32 = 0x5200;

/// Receive address low/high, entry `n` (§10.1; E1000_RAL/RAH(n) for n < 16).
pub const fn ral(n: u32) -> u32 {
    0x5400 + 8 * n
}
pub const fn rah(n: u32) -> u32 {
    0x5404 + 8 * n
}

/// RAH (§10.1; E1000_RAH_AV = IGC_RAH_AV).
pub mod rah {
    /// The entry's address is valid.
    pub const AV: u32 = 1 << 31;
}

/// MDIC fields (§10.1; E1000_MDIC_* = IGC_MDIC_*): PHY register access through the MAC.
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

/// CTRL_EXT (§10.1; E1000_CTRL_EXT_DRV_LOAD = IGC_CTRL_EXT_DRV_LOAD).
pub mod ctrl_ext {
    /// Tells firmware a driver owns the port.
    pub const DRV_LOAD: u32 = 1 << 28;
}

// --- Interrupts (§6: GPIE, EICS..EICR, IVAR "same" on igb; only ICR/ICS/IMS/IMC move) ---
pub const GPIE: u32 = 0x1514;
pub const EICS: u32 = 0x1520;
pub const EIMS: u32 = 0x1524;
pub const EIMC: u32 = 0x1528;
pub const EIAC: u32 = 0x152C;
pub const EIAM: u32 = 0x1530;
pub const EICR: u32 = 0x1580;
pub const IVAR0: u32 = 0x1700;
pub const IVAR_MISC: u32 = 0x1740;
/// IVAR entries: vector | VALID (§6; E1000_IVAR_VALID = IGC_IVAR_VALID).
pub const IVAR_VALID: u32 = 0x80;

/// GPIE (§6; E1000_GPIE_* = IGC_GPIE_*).
pub mod gpie {
    pub const NSICR: u32 = 1 << 0;
    pub const MSIX_MODE: u32 = 1 << 4;
    pub const EIAME: u32 = 1 << 30;
    pub const PBA: u32 = 1 << 31;
}

// --- Queue control bits (§10.1; the queue registers' offsets differ per family) ---

/// RCTL (§10.1; E1000_RCTL_* = IGC_RCTL_*).
pub mod rctl {
    pub const EN: u32 = 1 << 1;
    pub const UPE: u32 = 1 << 3;
    pub const MPE: u32 = 1 << 4;
    pub const LPE: u32 = 1 << 5;
    pub const BAM: u32 = 1 << 15;
    pub const SECRC: u32 = 1 << 26;
}

/// TCTL (§10.1; E1000_TCTL_* = IGC_TCTL_*).
pub mod tctl {
    pub const EN: u32 = 1 << 1;
    pub const PSP: u32 = 1 << 3;
    pub const CT_SHIFT: u32 = 4;
    pub const CT_MASK: u32 = 0xFF << CT_SHIFT;
    pub const RTLC: u32 = 1 << 24;
}

/// RXDCTL/TXDCTL (§10.1; E1000_RXDCTL_QUEUE_ENABLE = IGC_RXDCTL_QUEUE_ENABLE).
pub mod xdctl {
    pub const QUEUE_ENABLE: u32 = 1 << 25;
}

/// SRRCTL (§10.1; E1000_SRRCTL_* = IGC_SRRCTL_*; TIMESTAMP on 82580 and later, §8.2).
pub mod srrctl {
    pub const BSIZEHDR_SHIFT: u32 = 2;
    pub const DESCTYPE_ADV_ONEBUF: u32 = 1 << 25;
    /// Stamp received frames into the buffer.
    pub const TIMESTAMP: u32 = 1 << 30;
}

/// RXPBS (§1; E1000_RXPBS_CFG_TS_EN = IGC_RXPBS_CFG_TS_EN).
pub mod rxpbs {
    /// Put RX timestamps into the packet buffer (i210/i211 on igb).
    pub const CFG_TS_EN: u32 = 1 << 31;
}

// --- Time sync (§1: "identical offsets on igc and igb unless a column says otherwise") ---
pub const SYSTIML: u32 = 0xB600;
pub const SYSTIMH: u32 = 0xB604;
pub const TIMINCA: u32 = 0xB608;
pub const TSYNCTXCTL: u32 = 0xB614;
pub const TSYNCRXCTL: u32 = 0xB620;
pub const TSAUXC: u32 = 0xB640;
pub const TSICR: u32 = 0xB66C;
pub const TSIM: u32 = 0xB674;
/// Time-sync RX message filter.
pub const TSYNCRXCFG: u32 = 0x5F50;
/// Time-sync SDP routing (§2.3).
pub const TSSDP: u32 = 0x003C;
/// Target times, clock-output half periods and auxiliary stamps (§1: the same on igc and igb).
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
/// TRGTTIML/H, FREQOUT and AUXSTMPL/H of channel `n` (0 or 1).
pub const TRGTTIML: [u32; 2] = [TRGTTIML0, TRGTTIML1];
pub const TRGTTIMH: [u32; 2] = [TRGTTIMH0, TRGTTIMH1];
pub const FREQOUT: [u32; 2] = [FREQOUT0, FREQOUT1];
pub const AUXSTMPL: [u32; 2] = [AUXSTMPL0, AUXSTMPL1];
pub const AUXSTMPH: [u32; 2] = [AUXSTMPH0, AUXSTMPH1];

/// Typed offsets of the shared registers whose bits carry meaning (see [`crate::fields`]). The
/// family modules add the ICR block, which sits at a different offset on each.
pub mod reg {
    use crate::fields::{
        Ctrl, CtrlExt, Eecd, Reg, Status, TsCause, Tsauxc, Tssdp, TsyncRxCtl, TsyncTxCtl,
    };

    pub const CTRL: Reg<Ctrl> = Reg::at(super::CTRL);
    pub const CTRL_EXT: Reg<CtrlExt> = Reg::at(super::CTRL_EXT);
    pub const TSSDP: Reg<Tssdp> = Reg::at(super::TSSDP);
    pub const STATUS: Reg<Status> = Reg::at(super::STATUS);
    pub const EECD: Reg<Eecd> = Reg::at(super::EECD);
    pub const TSYNCTXCTL: Reg<TsyncTxCtl> = Reg::at(super::TSYNCTXCTL);
    pub const TSYNCRXCTL: Reg<TsyncRxCtl> = Reg::at(super::TSYNCRXCTL);
    pub const TSAUXC: Reg<Tsauxc> = Reg::at(super::TSAUXC);
    pub const TSICR: Reg<TsCause> = Reg::at(super::TSICR);
    pub const TSIM: Reg<TsCause> = Reg::at(super::TSIM);
}

/// TIMINCA (§1, §4): igc and i210/i350/82580; the 82576 layout is in `igb::timinca`.
pub mod timinca {
    /// 1 = slow down.
    pub const ISGN: u32 = 1 << 31;
    pub const INCVALUE_MASK: u32 = 0x7FFF_FFFF;
}

// --- Advanced descriptors (§9: "igb has MAC_TSTAMP, DD, TSIP at the same bits"; the other
// bits here are igb's e1000_82575.h E1000_ADVTXD_* / E1000_TXD_STAT_DD / E1000_RXD_STAT_*,
// equal to igc's IGC_ADVTXD_* / IGC_TXD_STAT_DD / IGC_RXD_STAT_*) ---

/// Advanced TX data descriptor, `cmd_type_len` and `olinfo_status`.
pub mod txd {
    /// Buffer length, b15:0 (both drivers put the length there).
    pub const DTALEN_MASK: u32 = 0xFFFF;
    pub const MAC_TSTAMP: u32 = 1 << 19;
    pub const DTYP_DATA: u32 = 0x0030_0000;
    pub const EOP: u32 = 1 << 24;
    pub const IFCS: u32 = 1 << 25;
    pub const RS: u32 = 1 << 27;
    pub const DEXT: u32 = 1 << 29;
    pub const PAYLEN_SHIFT: u32 = 14;
}
