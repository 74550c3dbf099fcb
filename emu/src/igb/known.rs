//! Which BAR0 offsets the igb models implement (the record of accesses to the others is
//! [`crate::nic::known`]). Offsets and names are Linux's e1000_regs.h unless noted; "storage"
//! registers are plain configuration whose read-back is what a driver sees.

use super::IgbPart;
use crate::nic::known::OffsetMap;

/// Single registers every igb model implements.
const SINGLE: &[u32] = &[
    0x0000, // CTRL
    0x0008, // STATUS
    0x0010, // EECD
    0x0018, // CTRL_EXT
    0x0020, // MDIC
    0x0028, // FCAL
    0x002C, // FCAH
    0x0030, // FCT
    0x0038, // VET
    0x00C0, // ICR
    0x00C8, // ICS
    0x00D0, // IMS
    0x00D8, // IMC
    0x00E0, // IAM
    0x0100, // RCTL
    0x0170, // FCTTV
    0x0400, // TCTL
    0x0410, // TIPG
    0x0E00, // LEDCTL
    0x1514, // GPIE
    0x1580, // EICR
    0x1740, // IVAR_MISC
    0x2160, // FCRTL
    0x2168, // FCRTH
    0x2404, // RXPBS
    0x3404, // TXPBS
    0x5000, // RXCSUM
    0x5004, // RLPML
    0x5008, // RFCTL
    0x5800, // WUC
    0x5808, // WUFC
    0x5810, // WUS
    0x5818, // MRQC
    0x5820, // MANC
    0x5B50, // SWSM
    0x5B54, // FWSM
    0x5B5C, // SW_FW_SYNC
    0x5F50, // TSYNCRXCFG
    0xB614, // TSYNCTXCTL
    0xB618, // TXSTMPL
    0xB61C, // TXSTMPH
    0xB620, // TSYNCRXCTL
];

/// Register arrays every igb model implements: (first, last) dword offsets, inclusive.
const RANGES: &[(u32, u32)] = &[
    (0x1520, 0x1530), // EICS, EIMS, EIMC, EIAC, EIAM
    (0x1680, 0x16E0), // EITR(0..24)
    (0x1700, 0x171C), // IVAR0 array
    (0x4000, 0x415C), // statistics (nic::hwstats)
    (0x5200, 0x53FC), // MTA[128]
    (0x5400, 0x547C), // RAL/RAH[16]
    (0x5600, 0x57FC), // VFTA[128]
    (0x59C0, 0x59DC), // SPQF[8]
    (0x59E0, 0x59FC), // FTQF[8]
    (0x5A80, 0x5ABC), // IMIR[8], IMIREXT[8]
    (0x5CB0, 0x5CCC), // ETQF[8]
    (0xB600, 0xB610), // SYSTIML, SYSTIMH, TIMINCA, TIMADJL, TIMADJH
];

/// i210/i211 and i350 only: the interrupt-driven time-sync block and the SYSTIMR latch.
const TS_BLOCK: &[(u32, u32)] = &[
    (0x003C, 0x003C), // TSSDP
    (0xB640, 0xB668), // TSAUXC, TRGTTIML/H0/1, FREQOUT0/1, AUXSTMPL/H0/1 (storage but TSAUXC)
    (0xB66C, 0xB66C), // TSICR
    (0xB674, 0xB674), // TSIM
    (0xB6F8, 0xB6F8), // SYSTIMR
];

/// 82576 only: the RX stamp registers (§8.3).
const RX_REGS: (u32, u32) = (0xB624, 0xB630); // RXSTMPL, RXSTMPH, RXSATRL, RXSATRH

/// Queue registers within a queue's block: RX (RDBAL, RDBAH, RDLEN, SRRCTL, RDH, RDT, RXDCTL),
/// TX (TDBAL, TDBAH, TDLEN, TDH, TDT, TXDCTL).
const RXQ: &[u32] = &[0x00, 0x04, 0x08, 0x0C, 0x10, 0x18, 0x28];
const TXQ: &[u32] = &[0x00, 0x04, 0x08, 0x10, 0x18, 0x28];

/// Whether dword `offset` is one of queue 0..3's registers, at the e1000 offsets
/// (base + 0x100·n) or the 0xC000/0xE000 aliases (base + 0x40·n).
fn queue_reg(offset: u32) -> bool {
    let within = |base: u32, stride: u32, regs: &[u32]| {
        (base..base + 4 * stride).contains(&offset) && regs.contains(&((offset - base) % stride))
    };
    within(0x2800, 0x100, RXQ)
        || within(0x3800, 0x100, TXQ)
        || within(0xC000, 0x40, RXQ)
        || within(0xE000, 0x40, TXQ)
}

fn in_tables(part: IgbPart, offset: u32) -> bool {
    let in_ranges = |r: &[(u32, u32)]| r.iter().any(|&(a, b)| (a..=b).contains(&offset));
    let family = match part {
        IgbPart::I210 | IgbPart::I211 => offset == super::SRRD_I210 || in_ranges(TS_BLOCK),
        IgbPart::I350 => offset == super::EERD || in_ranges(TS_BLOCK),
        IgbPart::E82576 => offset == super::EERD || in_ranges(&[RX_REGS]),
    };
    family || SINGLE.contains(&offset) || in_ranges(RANGES) || queue_reg(offset)
}

/// Whether the model of `part` implements BAR0 `offset` (dword-aligned).
pub(super) fn implemented(part: IgbPart, offset: u32) -> bool {
    static MAPS: std::sync::OnceLock<[OffsetMap; 4]> = std::sync::OnceLock::new();
    let maps = MAPS.get_or_init(|| {
        IgbPart::ALL.map(|p| OffsetMap::build(super::BAR0_LEN, |o| in_tables(p, o)))
    });
    let i = IgbPart::ALL.iter().position(|&p| p == part).unwrap_or(0);
    maps[i].contains(offset)
}
