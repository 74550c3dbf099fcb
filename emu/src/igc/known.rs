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
    (0x1680, 0x1690), // EITR(0..4)
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
