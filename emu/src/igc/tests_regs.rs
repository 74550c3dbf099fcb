//! Linux igc's own register checks run against the model (issue 24): the `ethtool -t offline`
//! register test table, the `ethtool -d` register list, EITR 0–9, and the flash NVM paths of
//! the EEPROM self-test, `ethtool -e`, `ethtool -E` and `ethtool -i`. The tables below are a
//! transcription of facts from Linux (offsets, counts, strides, masks, write patterns), not
//! its code.

use super::*;
use crate::clock::VirtualClock;
use crate::host::RecordingHost;
use crate::nic::nvm::NVM_SUM;

struct Rig {
    dev: I225,
    host: RecordingHost,
}

impl Rig {
    fn new() -> Self {
        Self {
            dev: I225::new(I225Config::i225(VirtualClock::new(1_000).source())),
            host: RecordingHost::new(),
        }
    }

    fn rd(&mut self, off: u32) -> u32 {
        self.dev.read32(0, off, &mut self.host)
    }

    fn wr(&mut self, off: u32, v: u32) {
        self.dev.write32(0, off, v, &mut self.host);
    }
}

// --- igc_diag.c reg_test[] ---

/// The test types of igc_diag.h.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// Four patterns, each read back as `pattern & write & mask`; stride 0x40.
    Pattern,
    /// `write & mask` written, read back equal under `mask`; stride 0x40.
    SetRead,
    /// Pattern test of RAL(n) at RA + 8n.
    Table64Lo,
    /// Pattern test of RAH(n) at RA + 4 + 8n.
    Table64Hi,
    /// Pattern test of a dword table at reg + 4n.
    Table32,
}

/// Linux igc_diag.c `reg_test[]`: (register, array length, test, mask, write).
const REG_TEST: &[(u32, u32, Kind, u32, u32)] = &[
    (0x0028, 1, Kind::Pattern, 0xFFFF_FFFF, 0xFFFF_FFFF), // FCAL
    (0x002C, 1, Kind::Pattern, 0x0000_FFFF, 0xFFFF_FFFF), // FCAH
    (0x0030, 1, Kind::Pattern, 0x0000_FFFF, 0xFFFF_FFFF), // FCT
    (0xC004, 4, Kind::Pattern, 0xFFFF_FFFF, 0xFFFF_FFFF), // RDBAH(0)
    (0xC000, 4, Kind::Pattern, 0xFFFF_FF80, 0xFFFF_FF80), // RDBAL(0)
    (0xC008, 4, Kind::Pattern, 0x000F_FF80, 0x000F_FFFF), // RDLEN(0)
    (0xC018, 4, Kind::Pattern, 0x0000_FFFF, 0x0000_FFFF), // RDT(0)
    (0x2168, 1, Kind::Pattern, 0x0003_FFF0, 0x0003_FFF0), // FCRTH
    (0x0170, 1, Kind::Pattern, 0x0000_FFFF, 0x0000_FFFF), // FCTTV
    (0x0410, 1, Kind::Pattern, 0x3FFF_FFFF, 0x3FFF_FFFF), // TIPG
    (0xE004, 4, Kind::Pattern, 0xFFFF_FFFF, 0xFFFF_FFFF), // TDBAH(0)
    (0xE000, 4, Kind::Pattern, 0xFFFF_FF80, 0xFFFF_FF80), // TDBAL(0)
    (0xE008, 4, Kind::Pattern, 0x000F_FF80, 0x000F_FFFF), // TDLEN(0)
    (0xE018, 4, Kind::Pattern, 0x0000_FFFF, 0x0000_FFFF), // TDT(0)
    (0x0100, 1, Kind::SetRead, 0xFFFF_FFFF, 0x0000_0000), // RCTL
    (0x0100, 1, Kind::SetRead, 0x04CF_B2FE, 0x003F_FFFB), // RCTL
    (0x0100, 1, Kind::SetRead, 0x04CF_B2FE, 0xFFFF_FFFF), // RCTL
    (0x0400, 1, Kind::SetRead, 0xFFFF_FFFF, 0x0000_0000), // TCTL
    (0x5400, 16, Kind::Table64Lo, 0xFFFF_FFFF, 0xFFFF_FFFF), // RA (RAL)
    (0x5400, 16, Kind::Table64Hi, 0x900F_FFFF, 0xFFFF_FFFF), // RA (RAH)
    (0x5200, 128, Kind::Table32, 0xFFFF_FFFF, 0xFFFF_FFFF), // MTA
];

/// igc_diag.c's four patterns.
const PATTERNS: [u32; 4] = [0x5A5A_5A5A, 0xA5A5_A5A5, 0x0000_0000, 0xFFFF_FFFF];

/// igc_diag.c reg_pattern_test: the first failing pattern, as igc would print it.
fn pattern_test(r: &mut Rig, reg: u32, mask: u32, write: u32) -> Option<String> {
    for pat in PATTERNS {
        let before = r.rd(reg);
        r.wr(reg, pat & write);
        let val = r.rd(reg);
        r.wr(reg, before);
        if val != pat & write & mask {
            let want = pat & write & mask;
            return Some(format!(
                "pattern test reg {reg:04X}: got {val:#010X} expected {want:#010X}"
            ));
        }
    }
    None
}

/// igc_diag.c reg_set_and_check.
fn set_read_test(r: &mut Rig, reg: u32, mask: u32, write: u32) -> Option<String> {
    let before = r.rd(reg);
    r.wr(reg, write & mask);
    let val = r.rd(reg);
    r.wr(reg, before);
    (val & mask != write & mask).then(|| {
        format!(
            "set/check reg {reg:04X}: got {:#010X} expected {:#010X}",
            val & mask,
            write & mask
        )
    })
}

/// Every failing entry of igc_reg_test (Linux stops at the first; this runs them all): the
/// STATUS toggle check, then the table.
fn igc_reg_test(r: &mut Rig) -> Vec<String> {
    let mut fails = Vec::new();
    let toggle = 0x0068_00D3;
    let before = r.rd(STATUS);
    r.wr(STATUS, toggle);
    let after = r.rd(STATUS) & toggle;
    if before & toggle != after {
        fails.push(format!(
            "STATUS: got {after:#010X} expected {:#010X}",
            before & toggle
        ));
    }
    r.wr(STATUS, before);
    for &(reg, n, kind, mask, write) in REG_TEST {
        for i in 0..n {
            let f = match kind {
                Kind::Pattern => pattern_test(r, reg + i * 0x40, mask, write),
                Kind::SetRead => set_read_test(r, reg + i * 0x40, mask, write),
                Kind::Table64Lo => pattern_test(r, reg + i * 8, mask, write),
                Kind::Table64Hi => pattern_test(r, reg + 4 + i * 8, mask, write),
                Kind::Table32 => pattern_test(r, reg + i * 4, mask, write),
            };
            fails.extend(f);
        }
    }
    fails
}

/// `ethtool -t eth0 offline`'s register test: every entry of Linux's table passes (26 failed
/// before the masks: FCAH, FCT, RDLEN/TDLEN 0–3, RAH 0–15), and touches nothing unimplemented.
#[test]
fn linux_igc_register_test_table_passes() {
    let mut r = Rig::new();
    let fails = igc_reg_test(&mut r);
    assert!(
        fails.is_empty(),
        "{} failures:\n{}",
        fails.len(),
        fails.join("\n")
    );
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
}

/// The masks hold whatever is written, not just the test's patterns, and survive no reset.
#[test]
fn reserved_bits_read_zero() {
    let mut r = Rig::new();
    for (off, want) in [
        (0x002C, 0x0000_FFFF), // FCAH
        (0x0030, 0x0000_FFFF), // FCT
        (rdbal(2), 0xFFFF_FF80),
        (tdbal(3), 0xFFFF_FF80),
        (rdlen(1), 0x000F_FF80),
        (tdlen(0), 0x000F_FF80),
        (rdh(0), 0xFFFF),
        (tdt(3), 0xFFFF),
        (rah(15), 0x900F_FFFF),
        (eitr(9), 0x7FFC),
        (0x2168, 0x0003_FFF0), // FCRTH
        (0x2160, 0x8003_FFF0), // FCRTL
    ] {
        r.wr(off, u32::MAX);
        assert_eq!(r.rd(off), want, "{off:#x}");
    }
    // Registers without a source for reserved bits keep every bit (RDBAH, MTA, RAL).
    for off in [rdbah(0), 0x5200, ral(3)] {
        r.wr(off, u32::MAX);
        assert_eq!(r.rd(off), u32::MAX, "{off:#x}");
    }
    // Write-1-to-clear: WUS and PBACL never hold a written one.
    for off in [0x5810, 0x5B68] {
        r.wr(off, u32::MAX);
        assert_eq!(r.rd(off), 0, "{off:#x}");
    }
}

// --- igc_ethtool.c igc_ethtool_get_regs (`ethtool -d`) ---

/// Every offset igc_ethtool_get_regs reads, in its order.
fn ethtool_d_offsets() -> Vec<u32> {
    let mut v = vec![
        0x0000, 0x0008, 0x0018, 0x0020, 0x0034, // CTRL STATUS CTRL_EXT MDIC CONNSW
        0x0010, // EECD
        0x1520, 0x1520, 0x1524, 0x1528, 0x152C, 0x1530, // EICS ×2 EIMS EIMC EIAC EIAM
        0x1504, 0x1504, 0x1508, 0x150C, 0x4100, 0x1510, // ICS ×2 IMS IMC IAC IAM
        0x0028, 0x002C, 0x0170, 0x2160, 0x2168, 0x2460, // FCAL FCAH FCTTV FCRTL FCRTH FCRTV
        0x0100, 0x5000, 0x5004, 0x5008, // RCTL RXCSUM RLPML RFCTL
        0x0400, 0x0410, // TCTL TIPG
    ];
    let q = |base: u32| (0..4).map(move |n| base + 0x40 * n);
    v.extend(q(0xC00C)); // SRRCTL
    v.extend((0..4).map(|n| 0x5480 + 4 * n)); // PSRTYPE
    for base in [0xC000, 0xC004, 0xC008, 0xC010, 0xC018, 0xC028] {
        v.extend(q(base)); // RDBAL RDBAH RDLEN RDH RDT RXDCTL
    }
    v.extend((0..10).map(eitr));
    let ra = |v: &mut Vec<u32>| {
        v.extend((0..16).map(ral));
        v.extend((0..16).map(rah));
    };
    ra(&mut v);
    for base in [0xE000, 0xE004, 0xE008, 0xE010, 0xE018, 0xE028] {
        v.extend(q(base)); // TDBAL TDBAH TDLEN TDH TDT TXDCTL
    }
    ra(&mut v); // read again, as igc does (its "XXX" comment)
    v.push(0x55B0); // VLANPQF
    v.extend((0..8).map(|n| 0x5CB0 + 4 * n)); // ETQF
    v
}

/// `ethtool -d` reads only implemented offsets (EITR 5–9 were counted as unimplemented).
#[test]
fn ethtool_d_reads_only_implemented_offsets() {
    let mut r = Rig::new();
    let offs = ethtool_d_offsets();
    assert!(offs.contains(&eitr(9)) && offs.contains(&0x5CCC));
    for off in offs {
        assert!(I225::implements(off), "{off:#x}");
        let _ = r.rd(off);
    }
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
}

#[test]
fn eitr_0_to_9_store_the_interval() {
    let mut r = Rig::new();
    for n in 0..10 {
        // igc_write_itr: interval | CNT_IGNR; the counter-ignore bit is write-only.
        r.wr(eitr(n), 0x8000_0000 | (196 << 2) | 3);
        assert_eq!(r.rd(eitr(n)), 196 << 2, "EITR{n}");
    }
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
}

// --- The flash NVM (igc_i225.c, igc_nvm.c, igc_ethtool.c) ---

const SW_FW_SYNC: u32 = intel_regs::igc::SW_FW_SYNC;
/// IGC_SWFW_EEP_SM.
const EEP_SM: u32 = 0x1;
/// Bounded polls: the model completes every operation at once.
const TRIES: usize = 10;

/// igc_get_hw_semaphore_i225 then igc_acquire_swfw_sync_i225's take of `mask`.
fn acquire(r: &mut Rig, mask: u32) {
    assert!((0..TRIES).any(|_| r.rd(SWSM) & swsm::SMBI == 0), "SMBI");
    let got = (0..TRIES).any(|_| {
        let v = r.rd(SWSM);
        r.wr(SWSM, v | swsm::SWESMBI);
        r.rd(SWSM) & swsm::SWESMBI != 0
    });
    assert!(got, "SWESMBI");
    let sync = r.rd(SW_FW_SYNC);
    assert_eq!(sync & (mask | mask << 16), 0, "resource free");
    r.wr(SW_FW_SYNC, sync | mask);
    let v = r.rd(SWSM);
    r.wr(SWSM, v & !(swsm::SMBI | swsm::SWESMBI));
}

/// igc_release_swfw_sync_i225.
fn release(r: &mut Rig, mask: u32) {
    assert!((0..TRIES).any(|_| r.rd(SWSM) & swsm::SMBI == 0));
    let v = r.rd(SWSM);
    r.wr(SWSM, v | swsm::SWESMBI);
    let sync = r.rd(SW_FW_SYNC);
    r.wr(SW_FW_SYNC, sync & !mask);
    let v = r.rd(SWSM);
    r.wr(SWSM, v & !(swsm::SMBI | swsm::SWESMBI));
}

/// igc_read_nvm_eerd of one word.
fn eerd(r: &mut Rig, addr: u32) -> u16 {
    r.wr(EERD, addr << eerd::ADDR_SHIFT | eerd::START);
    let v = (0..TRIES)
        .map(|_| r.rd(EERD))
        .find(|v| v & eerd::DONE != 0)
        .expect("EERD DONE");
    (v >> eerd::DATA_SHIFT) as u16
}

/// igc_write_nvm_srwr of one word.
fn srwr(r: &mut Rig, addr: u32, w: u16) {
    r.wr(
        SRWR,
        addr << eerd::ADDR_SHIFT | u32::from(w) << eerd::DATA_SHIFT | eerd::START,
    );
    assert!(
        (0..TRIES).any(|_| r.rd(SRWR) & eerd::DONE != 0),
        "SRWR DONE"
    );
}

/// igc_init_nvm_params_base: word_size from EECD.SIZE_EX.
fn word_size(r: &mut Rig) -> u32 {
    let size = (r.rd(EECD) & Eecd::SIZE_EX_MASK.bits()) >> Eecd::SIZE_EX_SHIFT;
    1 << (size + 6).min(15)
}

/// igc_validate_nvm_checksum_i225 (the EEPROM self-test's `nvm.ops.validate`).
fn validate(r: &mut Rig) -> bool {
    acquire(r, EEP_SM);
    let sum = (0..=0x3F).fold(0u16, |a, i| a.wrapping_add(eerd(r, i)));
    release(r, EEP_SM);
    sum == NVM_SUM
}

/// igc_update_nvm_checksum_i225: checksum word, then the flash update through EECD.
fn update_checksum(r: &mut Rig) {
    acquire(r, EEP_SM);
    let sum = (0..0x3F).fold(0u16, |a, i| a.wrapping_add(eerd(r, i)));
    srwr(r, 0x3F, NVM_SUM.wrapping_sub(sum));
    release(r, EEP_SM);
    let done = |r: &mut Rig| (0..TRIES).any(|_| r.rd(EECD) & Eecd::FLUDONE.bits() != 0);
    assert!(done(r), "FLUDONE before");
    let v = r.rd(EECD);
    r.wr(EECD, v | Eecd::FLUPD.bits());
    assert!(done(r), "FLUDONE after");
}

/// `ethtool -t offline`'s EEPROM test: the part presents its flash, so igc installs
/// `nvm.ops.validate` (igc_init_nvm_params_i225; without it igc_eeprom_test called NULL), and
/// the checksum over words 0..=0x3F read through the semaphores and EERD is 0xBABA.
#[test]
fn linux_eeprom_self_test_passes() {
    let mut r = Rig::new();
    assert_ne!(r.rd(EECD) & Eecd::FLASH_DETECTED.bits(), 0, "flash path");
    assert!(validate(&mut r));
    assert_eq!(r.rd(SW_FW_SYNC) & EEP_SM, 0, "released");
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
}

/// `ethtool -e`: igc reports word_size × 2 bytes (4 KiB, not 128) and reads every word through
/// igc_read_nvm_srrd_i225 (semaphore per burst of at most 512 words, then EERD).
#[test]
fn ethtool_e_dumps_the_whole_shadow_ram() {
    let mut r = Rig::new();
    let n = word_size(&mut r);
    assert_eq!(n * 2, 4096, "eeprom length");
    let mut words = Vec::new();
    for burst in (0..n).step_by(512) {
        acquire(&mut r, EEP_SM);
        words.extend((burst..(burst + 512).min(n)).map(|a| eerd(&mut r, a)));
        release(&mut r, EEP_SM);
    }
    assert_eq!(words.len(), 2048);
    assert_eq!(
        &words[..3],
        &[0x0002, 0x0000, 0x2502],
        "MAC 02:00:00:00:02:25"
    );
    assert_eq!(words[0x0D], ids::EMU_I225, "device ID word");
    assert_eq!(words[8], 0xFAFA, "PBA pointer guard");
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
}

/// `ethtool -i`: igc_ethtool_get_drvinfo prints NVM word 5 (IGC_NVM_DEV_STARTER) in hex as
/// the firmware version's first half; the model's image says 1057 (it read 0 before).
#[test]
fn ethtool_i_nvm_version_is_not_zero() {
    let mut r = Rig::new();
    acquire(&mut r, EEP_SM);
    let v = eerd(&mut r, 5);
    release(&mut r, EEP_SM);
    assert_eq!(format!("{v:x}"), "1057");
}

/// `ethtool -E`: a word written through SRWR with the checksum updated and the flash
/// committed (FLUPD) still validates and survives a port reset; a word written without the
/// commit is gone after the reset (the shadow RAM reloads from the flash).
#[test]
fn ethtool_capital_e_writes_commit_to_flash() {
    let mut r = Rig::new();
    acquire(&mut r, EEP_SM);
    srwr(&mut r, 0x20, 0xBEEF);
    release(&mut r, EEP_SM);
    assert!(!validate(&mut r), "checksum stale after a write");
    update_checksum(&mut r);
    assert!(validate(&mut r));
    r.wr(CTRL, Ctrl::RST.bits());
    acquire(&mut r, EEP_SM);
    assert_eq!(eerd(&mut r, 0x20), 0xBEEF, "committed");
    srwr(&mut r, 0x21, 0x1234);
    release(&mut r, EEP_SM);
    r.wr(CTRL, Ctrl::RST.bits());
    assert_eq!(eerd(&mut r, 0x21), 0, "not committed");
    assert!(validate(&mut r));
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
}

/// EECD's hardware bits: PRES, AUTO_RD, FLASH_DETECTED, FLUDONE and SIZE_EX read set whatever
/// is written; FLUPD self-clears; other bits are storage.
#[test]
fn eecd_hardware_bits() {
    let mut r = Rig::new();
    let hw = Eecd::PRES.bits()
        | Eecd::AUTO_RD.bits()
        | Eecd::FLASH_DETECTED.bits()
        | Eecd::FLUDONE.bits()
        | 5 << 11;
    assert_eq!(r.rd(EECD), hw);
    r.wr(EECD, 0);
    assert_eq!(r.rd(EECD), hw);
    r.wr(EECD, Eecd::FLUPD.bits() | 0x40);
    assert_eq!(r.rd(EECD), hw | 0x40);
}
