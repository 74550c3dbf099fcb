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
    0x0024, // SCTL (SerDes control; igb_get_regs)
    0x0034, // CONNSW
    0x0038, // VET
    0x00C0, // ICR
    0x00C8, // ICS
    0x00D0, // IMS
    0x00D8, // IMC
    0x00E0, // IAM
    0x0100, // RCTL
    0x0170, // FCTTV
    0x0400, // TCTL
    0x0404, // TCTL_EXT
    0x0410, // TIPG
    0x0E00, // LEDCTL
    0x0E04, // MDICNFG
    0x0E14, // PHPM (e1000_82575.c: LPLU through E1000_82580_PHY_POWER_MGMT)
    0x0E30, // EEER (igb_set_eee_i350)
    0x0E34, // EEE_SU
    0x0E38, // IPCNFG
    0x1000, // PBA
    0x1008, // PBS
    0x1048, // FRTIMER
    0x104C, // TCPTIMER
    0x1514, // GPIE
    0x1580, // EICR
    0x1740, // IVAR_MISC
    0x2160, // FCRTL
    0x2168, // FCRTH
    0x2404, // RXPBS
    0x2460, // FCRTV
    0x3404, // TXPBS
    0x3410, // TDFH
    0x3418, // TDFT
    0x3420, // TDFHS
    0x3430, // TDFPC
    0x355C, // DTXMXPKTSZ (igb_main.c igb_setup_tctl... for i210)
    0x3570, // TQAVCTRL (i210 Qav, igb_main.c igb_config_tx_modes)
    0x3590, // DTXCTL
    0x5000, // RXCSUM
    0x5004, // RLPML
    0x5008, // RFCTL
    0x5800, // WUC
    0x5808, // WUFC
    0x5810, // WUS
    0x5818, // MRQC
    0x581C, // VT_CTL
    0x5820, // MANC
    0x5838, // IPAV
    0x5900, // WUPL (read-only)
    0x5AC0, // IMIRVP
    0x5AD0, // VMOLR(0) (igb_set_vmolr)
    0x5BB8, // PCIEMISC (igb_init_dmac)
    0x5B50, // SWSM
    0x5B54, // FWSM
    0x5B5C, // SW_FW_SYNC
    0x5F50, // TSYNCRXCFG
    0xB614, // TSYNCTXCTL
    0xB618, // TXSTMPL
    0xB61C, // TXSTMPH
    0xB620, // TSYNCRXCTL
    0xB624, // RXSTMPL (read-only; the 82576's latch, §8.3; 0 on the others)
    0xB628, // RXSTMPH
    0xB62C, // RXSATRL
    0xB630, // RXSATRH
];

/// Register arrays every igb model implements: (first, last) dword offsets, inclusive.
const RANGES: &[(u32, u32)] = &[
    (0x1520, 0x1530), // EICS, EIMS, EIMC, EIAC, EIAM
    (0x1680, 0x16E0), // EITR(0..24)
    (0x1700, 0x171C), // IVAR0 array
    (0x4000, 0x415C), // statistics (nic::hwstats)
    (0x4200, 0x4228), // PCS_CFG0, PCS_LCTL, PCS_LSTAT, PCS_ANADV, PCS_LPAB, PCS_NPTX,
    //                   PCS_LPABNP, SCVPC (the PCS block, e1000_regs.h; copper: unused)
    (0x5200, 0x53FC), // MTA[128]
    (0x5400, 0x547C), // RAL/RAH[16]
    (0x5480, 0x548C), // PSRTYPE(0..3)
    (0x5600, 0x57FC), // VFTA[128]
    (0x59C0, 0x59DC), // SPQF[8]
    (0x59E0, 0x59FC), // FTQF[8]
    (0x5880, 0x588C), // IP6AT(0..3) (wake-up IPv6 address filter)
    (0x5A00, 0x5A7C), // WUPM[32] (wake-up packet memory, read-only)
    (0x5A80, 0x5ABC), // IMIR[8], IMIREXT[8]
    (0x5C00, 0x5C7C), // RETA[32]
    (0x5C80, 0x5CA4), // RSSRK[10]
    (0x5CB0, 0x5CCC), // ETQF[8]
    (0xA000, 0xA1FC), // UTA[128] (unicast hash table; igb_main.c igb_set_uta)
    (0xB600, 0xB610), // SYSTIML, SYSTIMH, TIMINCA, TIMADJL, TIMADJH
];

/// Register arrays at a stride: (first, count, stride), e1000_regs.h's macros.
const STRIDED: &[(u32, u32, u32)] = &[
    (0x5840, 4, 8),   // IP4AT_REG(n) (wake-up IPv4 address filter)
    (0x5F00, 4, 8),   // FFLT_REG(n) (flexible filter lengths)
    (0x9000, 128, 8), // FFMT_REG(n) (flexible filter mask table)
    (0x9800, 128, 8), // FFVT_REG(n) (flexible filter value table)
];

/// i210/i211 only (Linux e1000_regs.h unless noted; module docs of `igb`, "NVM").
const I210_SINGLE: &[u32] = &[
    0x0014,  // EERD, the i210's alias of SRRD (module docs)
    0x5BF4,  // I210_RR2DCDELAY (igb_get_regs for e1000_i210/i211; read-only)
    0x12018, // SRWR
    0x12030, // EEMNGCTL_I210
];
/// INVM_DATA_REG(0..63), i210/i211 only (read-only, `Igb::invm`).
pub(super) const INVM: (u32, u32) = (0x12120, 0x1221C);

/// i210/i211 and i350 only: the interrupt-driven time-sync block and the SYSTIMR latch.
const TS_BLOCK: &[(u32, u32)] = &[
    (0x003C, 0x003C), // TSSDP
    (0xB640, 0xB668), // TSAUXC, TRGTTIML/H0/1, FREQOUT0/1, AUXSTMPL/H0/1 (storage but TSAUXC)
    (0xB66C, 0xB66C), // TSICR
    (0xB674, 0xB674), // TSIM
    (0xB6F8, 0xB6F8), // SYSTIMR
];

/// Queue registers within a queue's block: RX (RDBAL, RDBAH, RDLEN, SRRCTL, RDH, RDT, RXDCTL),
/// TX (TDBAL, TDBAH, TDLEN, TDH, DCA_TXCTRL, TDT, TXDCTL, TDWBAL, TDWBAH).
const RXQ: &[u32] = &[0x00, 0x04, 0x08, 0x0C, 0x10, 0x18, 0x28];
const TXQ: &[u32] = &[0x00, 0x04, 0x08, 0x10, 0x14, 0x18, 0x28, 0x38, 0x3C];
/// RQDPC(n) (0xC030 + 0x40·n; no e1000-layout twin): per-queue RX drops, written 0 by Linux
/// igb_update_stats on i210 and later. Storage: the model counts its drops in MPC instead.
const RQDPC: u32 = 0x30;

/// Whether dword `offset` is one of queue 0..3's registers, at the e1000 offsets
/// (base + 0x100·n) or the 0xC000/0xE000 aliases (base + 0x40·n).
fn queue_reg(offset: u32) -> bool {
    let within = |base: u32, stride: u32, regs: &[u32]| {
        (base..base + 4 * stride).contains(&offset) && regs.contains(&((offset - base) % stride))
    };
    within(0x2800, 0x100, RXQ)
        || within(0x3800, 0x100, TXQ)
        || within(0xC000, 0x40, RXQ)
        || within(0xC000, 0x40, &[RQDPC])
        || within(0xE000, 0x40, TXQ)
}

fn in_tables(part: IgbPart, offset: u32) -> bool {
    let in_ranges = |r: &[(u32, u32)]| r.iter().any(|&(a, b)| (a..=b).contains(&offset));
    let family = match part {
        IgbPart::I210 | IgbPart::I211 => {
            offset == super::SRRD_I210
                || I210_SINGLE.contains(&offset)
                || in_ranges(&[INVM])
                || in_ranges(TS_BLOCK)
        }
        IgbPart::I350 => offset == super::EERD || in_ranges(TS_BLOCK),
        IgbPart::E82576 => offset == super::EERD,
    };
    let strided = STRIDED.iter().any(|&(first, n, stride)| {
        offset >= first && (offset - first) % stride == 0 && (offset - first) / stride < n
    });
    family || strided || SINGLE.contains(&offset) || in_ranges(RANGES) || queue_reg(offset)
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

/// Read-only registers the model gives no value: they read 0 and writes are dropped.
/// RXSTMPL/H and RXSATRL/H are the 82576's latch elsewhere (`regs`).
const READ_ONLY: &[(u32, u32)] = &[
    (0x420C, 0x420C), // PCS_LSTAT ("RO", e1000_regs.h; copper parts have no PCS link)
    (0x5900, 0x5900), // WUPL \[U: the length of a packet the part woke on; none\]
    (0x5A00, 0x5A7C), // WUPM \[U: the memory of that packet\]
    (0xB624, 0xB630), // RXSTMPL/H, RXSATRL/H ("RO", e1000_regs.h)
];
/// i210/i211 only: RR2DCDELAY \[U: a PCIe delay the part measures; the model has none\]
/// and the iNVM (`Igb::invm`, one-time programmable).
const READ_ONLY_I210: &[(u32, u32)] = &[(0x5BF4, 0x5BF4), INVM];

/// Whether a write of `offset` is dropped: a register software cannot write.
pub(super) fn read_only(part: IgbPart, offset: u32) -> bool {
    let i210 = matches!(part, IgbPart::I210 | IgbPart::I211);
    let within = |r: &[(u32, u32)]| r.iter().any(|&(a, b)| (a..=b).contains(&offset));
    within(READ_ONLY) || i210 && within(READ_ONLY_I210)
}

/// Write masks of the i210/i211 (canonical offsets): (first, count, stride, writable bits).
/// The bits are the mask of Linux igb_ethtool.c reg_test_i210 for the register; the bits
/// outside it read 0 \[U: igb's pattern test compares under the mask only; the I225, the
/// i210's successor with the same layout, reads them 0 (igc_diag.c reg_test compares whole
/// values) — `igc::known::MASKS`\]. Registers the table tests with an all-ones mask (FCAL,
/// RDBAH, TDBAH, RAL, MTA) and the set/check ones (RCTL, TCTL: compared under the mask only)
/// keep every bit.
const MASKS_I210: &[(u32, u32, u32, u32)] = &[
    (0x002C, 1, 4, 0x0000_FFFF),     // FCAH
    (0x0030, 1, 4, 0x0000_FFFF),     // FCT
    (0x0170, 1, 4, 0x0000_FFFF),     // FCTTV
    (0x0410, 1, 4, 0x3FFF_FFFF),     // TIPG
    (0x2800, 4, 0x100, 0xFFFF_FF80), // RDBAL(0..3)
    (0x2808, 4, 0x100, 0x000F_FF80), // RDLEN(0..3)
    (0x2818, 4, 0x100, 0x0000_FFFF), // RDT(0..3)
    (0x3800, 4, 0x100, 0xFFFF_FF80), // TDBAL(0..3)
    (0x3808, 4, 0x100, 0x000F_FF80), // TDLEN(0..3)
    (0x3818, 4, 0x100, 0x0000_FFFF), // TDT(0..3)
    (0x5404, 16, 8, 0x900F_FFFF),    // RAH(0..15): TABLE64_TEST_HI
    // FCRTH: reg_test writes only b15:4; the I225's field b17:4 is kept [U].
    (0x2168, 1, 4, 0x0003_FFF0),
];

/// The bits of a write to storage offset `offset` (canonical) that stick on `part`.
pub(super) fn write_mask(part: IgbPart, offset: u32) -> u32 {
    if !matches!(part, IgbPart::I210 | IgbPart::I211) {
        return u32::MAX;
    }
    MASKS_I210
        .iter()
        .find(|&&(first, n, stride, _)| {
            offset >= first && (offset - first) % stride == 0 && (offset - first) / stride < n
        })
        .map_or(u32::MAX, |&(_, _, _, bits)| bits)
}
