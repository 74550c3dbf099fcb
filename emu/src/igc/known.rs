//! Which BAR0 offsets the i225/i226 model implements (the record of accesses to the others is
//! [`crate::nic::known`]). Offsets and names are Linux's igc_regs.h unless noted. Values the
//! model does not implement at an implemented offset (a TSYNCRXCTL type other than ALL, an
//! SRRCTL timer selection other than timer 0) are recorded as writes.

use crate::nic::known::OffsetMap;

/// Single registers (dword offsets) with behaviour or faithful storage.
const SINGLE: &[u32] = &[
    0x0000,  // CTRL
    0x0008,  // STATUS
    0x0010,  // EECD
    0x0018,  // CTRL_EXT
    0x0020,  // MDIC
    0x0028,  // FCAL
    0x002C,  // FCAH
    0x0030,  // FCT
    0x0034,  // CONNSW
    0x0038,  // VET (igc_main.c igc_reset writes ETH_P_8021Q; the RX path does not use it)
    0x003C,  // TSSDP
    0x0100,  // RCTL
    0x0170,  // FCTTV
    0x01A0,  // LTRC (igc_i225.c igc_set_ltr_i225)
    0x0400,  // TCTL
    0x0410,  // TIPG
    0x0E00,  // LEDCTL (igc_leds.c)
    0x0E04,  // MDICNFG
    0x0E14,  // I225_PHPM
    0x0E30,  // EEER (igc_i225.c igc_set_eee_i225)
    0x0E34,  // EEE_SU
    0x0E38,  // IPCNFG
    0x0E3C,  // EEE_SU_2P5
    0x1580,  // EICR
    0x1740,  // IVAR_MISC
    0x2160,  // FCRTL
    0x2168,  // FCRTH
    0x2170,  // FCRTC
    0x2404,  // RXPBS
    0x2460,  // FCRTV
    0x2508,  // DMACR
    0x3404,  // TXPBS
    0x3550,  // DMCTXTH
    0x355C,  // DTXMXPKTSZ
    0x3570,  // TQAVCTRL
    0x5000,  // RXCSUM
    0x5004,  // RLPML
    0x5008,  // RFCTL
    0x55B0,  // VLANPQF
    0x5800,  // WUC
    0x5808,  // WUFC
    0x580C,  // WUFC_EXT
    0x5810,  // WUS
    0x5818,  // MRQC
    0x5820,  // MANC
    0x5900,  // WUPL
    0x5B30,  // FACTPS
    0x5B50,  // SWSM
    0x5B54,  // FWSM
    0x5B5C,  // SW_FW_SYNC
    0x5B68,  // PBACL
    0x5BB0,  // LTRMINV
    0x5BB4,  // LTRMAXV
    0x5DD0,  // DMCRTRH
    0x5DD4,  // DMCCNT
    0x5F50,  // TSYNCRXCFG
    0x8FE0,  // B2OSPC (BMC counter: storage, reads 0 unless written)
    0x8FE4,  // O2BGPTC
    0xA018,  // HRMPC
    0xB614,  // TSYNCTXCTL
    0xB618,  // TXSTMPL_0
    0xB61C,  // TXSTMPH_0
    0xB620,  // TSYNCRXCTL
    0xB66C,  // TSICR
    0xB674,  // TSIM
    0xB698,  // TXSTMPL_1
    0xB69C,  // TXSTMPH_1
    0xB6B8,  // TXSTMPL_2
    0xB6BC,  // TXSTMPH_2
    0xB6D8,  // TXSTMPL_3
    0xB6DC,  // TXSTMPH_3
    0xB6F8,  // SYSTIMR
    0x12014, // EERD
    0x12018, // EEWR/SRWR
    0x12540, // PTM_CTRL (igc_ptp.c igc_ptm_stop clears EN at suspend/close; no PTM on the
             // proxy's conventional PCI, so storage)
];

/// Register arrays: (first, last) dword offsets, inclusive.
const RANGES: &[(u32, u32)] = &[
    (0x1500, 0x1530), // ICR, ICS, IMS, IMC, IAM, GPIE, EICS, EIMS, EIMC, EIAC, EIAM
    (0x1680, 0x16A4), // EITR(0..9) (igc_ethtool.c igc_ethtool_get_regs reads all ten)
    (0x1700, 0x1704), // IVAR0 (queues 0–3)
    (0x3004, 0x30CC), // TQAVCC(n) 0x3004+0x40n, TQAVHC(n) 0x300C+0x40n (CBS) [U: whole span]
    (0x3310, 0x3350), // GTXOFFSET, BASET_L/H, QBVCYCLET(_S), STQT(0..3), ENDQT(0..3), TXQCTL(0..3)
    (0x4000, 0x415C), // statistics, EEE LPI and BMC counters (hwstats.rs)
    (0x5200, 0x53FC), // MTA[128]
    (0x5400, 0x547C), // RAL/RAH[16]
    (0x5480, 0x549C), // PSRTYPE[8]
    (0x5600, 0x57FC), // VFTA[128]
    (0x59E0, 0x59FC), // FTQF[8]
    (0x5A00, 0x5A7C), // WUPM[32]
    (0x5A80, 0x5ABC), // IMIR[8], IMIREXT[8]
    (0x5C00, 0x5C7C), // RETA[32]
    (0x5C80, 0x5CA4), // RSSRK[10]
    (0x5CB0, 0x5CCC), // ETQF[8]
    (0xB600, 0xB60C), // SYSTIML, SYSTIMH, TIMINCA, TIMADJ
    (0xB640, 0xB668), // TSAUXC, TRGTTIML/H0/1, FREQOUT0/1, AUXSTMPL/H0/1
];

/// Per-queue register offsets within a queue's 0x40 block: RX (RDBAL, RDBAH, RDLEN, SRRCTL,
/// RDH, RDT, RXDCTL, RQDPC) and TX (TDBAL, TDBAH, TDLEN, TDH, TDT, TXDCTL).
const RXQ: &[u32] = &[0x00, 0x04, 0x08, 0x0C, 0x10, 0x18, 0x28, 0x30];
const TXQ: &[u32] = &[0x00, 0x04, 0x08, 0x10, 0x18, 0x28];

/// Whether BAR0 `offset` (dword-aligned) is implemented, from the tables.
fn in_tables(offset: u32) -> bool {
    let queue = |base: u32, regs: &[u32]| {
        (base..base + 0x100).contains(&offset) && regs.contains(&((offset - base) % 0x40))
    };
    SINGLE.contains(&offset)
        || RANGES.iter().any(|&(a, b)| (a..=b).contains(&offset))
        || queue(0xC000, RXQ)
        || queue(0xE000, TXQ)
}

/// Whether BAR0 `offset` (dword-aligned) is implemented.
pub(super) fn implemented(offset: u32) -> bool {
    static MAP: std::sync::OnceLock<OffsetMap> = std::sync::OnceLock::new();
    MAP.get_or_init(|| OffsetMap::build(super::BAR0_LEN, in_tables))
        .contains(offset)
}

/// Where a storage register's reserved bits read 0: (first offset, count, stride, writable
/// bits), with the source. A write keeps only the writable bits ([`write_mask`]). "reg_test" is
/// Linux igc_diag.c `reg_test[]`: its pattern test expects `pattern & write & mask` back, so
/// where its write pattern covers a bit its mask excludes, the part reads that bit as 0.
///
/// Storage registers Linux igc reads or writes that keep every bit, and why:
/// - all 32 bits writable by reg_test (mask and write 0xFFFFFFFF): FCAL, RAL, MTA, RDBAH, TDBAH;
/// - no source for their reserved bits (the reference has no datasheet register map, Linux's
///   tables test only their own write patterns, QEMU stores them whole or models another part):
///   TIPG (reg_test writes b29:0 only), RCTL and TCTL (set/check compares under its mask
///   only), CTRL_EXT, CONNSW, VET (i350 has VET_EXT in b31:16, QEMU's 82576 keeps b15:0: the
///   i225's is unknown), TSSDP, LEDCTL, MDICNFG, EEER, EEE_SU, IPCNFG, LTRC, LTRMINV, LTRMAXV,
///   DMACR, RXPBS, TXPBS, DTXMXPKTSZ, TQAVCTRL, TXQCTL, STQT, ENDQT, BASET, QBVCYCLET, RXCSUM,
///   RLPML, RFCTL, MRQC, RETA, RSSRK, PSRTYPE, SRRCTL, RXDCTL, TXDCTL, IVAR0, VLANPQF, ETQF,
///   FTQF, IMIR, IMIREXT, WUC, WUFC, MANC, FACTPS, TSYNCRXCFG, TSYNCRXCTL, PTM_CTRL;
/// - firmware's: SW_FW_SYNC (b31:16 are firmware's; none runs, and igc writes back what it
///   read) and FWSM (reads 0: no firmware).
///
/// WUS and PBACL are write-1-to-clear instead (igc.rs).
const MASKS: &[(u32, u32, u32, u32)] = &[
    // FCAH, FCT: reg_test mask 0xFFFF, write 0xFFFFFFFF.
    (0x002C, 1, 4, 0x0000_FFFF),
    (0x0030, 1, 4, 0x0000_FFFF),
    // FCTTV, FCRTV: QEMU igb_core.c igb_set_16bit [U: the 82576's, for the i225].
    (0x0170, 1, 4, 0x0000_FFFF),
    (0x2460, 1, 4, 0x0000_FFFF),
    // FCRTH: the field reg_test writes, b17:4 [U: bits outside it read 0, as QEMU's 82576
    // FCRTH keeps only its field]; FCRTL: the same field and XONE b31 (igc_defines.h
    // IGC_FCRTL_XONE) [U].
    (0x2168, 1, 4, 0x0003_FFF0),
    (0x2160, 1, 4, 0x8003_FFF0),
    // EITR(0..9): the interval b14:2 (igc_defines.h IGC_QVECTOR_MASK 0x7FFC); CNT_IGNR b31
    // is write-only, the ITR counters read 0 (the model counts no interval) [U].
    (0x1680, 10, 4, 0x0000_7FFC),
    // RAH(0..15): reg_test TABLE64_TEST_HI mask 0x900FFFFF, write 0xFFFFFFFF.
    (0x5404, 16, 8, 0x900F_FFFF),
    // RDBAL/TDBAL(0..3): reg_test mask 0xFFFFFF80; Linux igb's reg_test_i210 (the i225's
    // predecessor) writes 0xFFFFFFFF and expects b6:0 read 0.
    (0xC000, 4, 0x40, 0xFFFF_FF80),
    (0xE000, 4, 0x40, 0xFFFF_FF80),
    // RDLEN/TDLEN(0..3): reg_test mask 0x000FFF80, write 0x000FFFFF.
    (0xC008, 4, 0x40, 0x000F_FF80),
    (0xE008, 4, 0x40, 0x000F_FF80),
    // RDT/TDT(0..3): reg_test mask 0xFFFF; QEMU igb_set_rdt/igb_set_tdt keep b15:0.
    (0xC018, 4, 0x40, 0x0000_FFFF),
    (0xE018, 4, 0x40, 0x0000_FFFF),
    // RDH/TDH(0..3): QEMU igb_core.c igb_set_16bit [U: the 82576's, for the i225].
    (0xC010, 4, 0x40, 0x0000_FFFF),
    (0xE010, 4, 0x40, 0x0000_FFFF),
];

/// The bits of a write to storage offset `offset` that stick: all of them where no source
/// names reserved bits ([`MASKS`]).
pub(super) fn write_mask(offset: u32) -> u32 {
    MASKS
        .iter()
        .find(|&&(first, n, stride, _)| {
            offset >= first && (offset - first) % stride == 0 && (offset - first) / stride < n
        })
        .map_or(u32::MAX, |&(_, _, _, bits)| bits)
}
