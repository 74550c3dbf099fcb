//! The i210 model against what Linux igb (6.1) does to the part: its register test's table
//! (igb_ethtool.c reg_test_i210), the offsets `ethtool -d` reads (igb_get_regs), the flash
//! NVM path (e1000_i210.c) and the interrupt test's ICS sequence (igb_intr_test). The tables
//! below are facts transcribed from Linux (offsets, masks, patterns), not its code.

use super::tests::Regs;
use super::*;

/// igb_reg_test's test types (igb_ethtool.c PATTERN_TEST .. TABLE64_TEST_HI).
#[derive(Debug, Clone, Copy)]
enum Test {
    Pattern,
    SetRead,
    Table32,
    Table64Lo,
    Table64Hi,
}

/// reg_test_i210: (register, array stride, array length, test, mask, write).
const REG_TEST_I210: &[(u32, u32, u32, Test, u32, u32)] = &[
    (0x0028, 0x100, 1, Test::Pattern, 0xFFFF_FFFF, 0xFFFF_FFFF), // FCAL
    (0x002C, 0x100, 1, Test::Pattern, 0x0000_FFFF, 0xFFFF_FFFF), // FCAH
    (0x0030, 0x100, 1, Test::Pattern, 0x0000_FFFF, 0xFFFF_FFFF), // FCT
    (0x2800, 0x100, 4, Test::Pattern, 0xFFFF_FF80, 0xFFFF_FFFF), // RDBAL(0)
    (0x2804, 0x100, 4, Test::Pattern, 0xFFFF_FFFF, 0xFFFF_FFFF), // RDBAH(0)
    (0x2808, 0x100, 4, Test::Pattern, 0x000F_FF80, 0x000F_FFFF), // RDLEN(0)
    (0x2818, 0x100, 4, Test::Pattern, 0x0000_FFFF, 0x0000_FFFF), // RDT(0)
    (0x2168, 0x100, 1, Test::Pattern, 0x0000_FFF0, 0x0000_FFF0), // FCRTH
    (0x0170, 0x100, 1, Test::Pattern, 0x0000_FFFF, 0x0000_FFFF), // FCTTV
    (0x0410, 0x100, 1, Test::Pattern, 0x3FFF_FFFF, 0x3FFF_FFFF), // TIPG
    (0x3800, 0x100, 4, Test::Pattern, 0xFFFF_FF80, 0xFFFF_FFFF), // TDBAL(0)
    (0x3804, 0x100, 4, Test::Pattern, 0xFFFF_FFFF, 0xFFFF_FFFF), // TDBAH(0)
    (0x3808, 0x100, 4, Test::Pattern, 0x000F_FF80, 0x000F_FFFF), // TDLEN(0)
    (0x3818, 0x100, 4, Test::Pattern, 0x0000_FFFF, 0x0000_FFFF), // TDT(0)
    (0x0100, 0x100, 1, Test::SetRead, 0xFFFF_FFFF, 0x0000_0000), // RCTL
    (0x0100, 0x100, 1, Test::SetRead, 0x04CF_B0FE, 0x003F_FFFB), // RCTL
    (0x0100, 0x100, 1, Test::SetRead, 0x04CF_B0FE, 0xFFFF_FFFF), // RCTL
    (0x0400, 0x100, 1, Test::SetRead, 0xFFFF_FFFF, 0x0000_0000), // TCTL
    (0x5400, 0, 16, Test::Table64Lo, 0xFFFF_FFFF, 0xFFFF_FFFF),  // RA
    (0x5400, 0, 16, Test::Table64Hi, 0x900F_FFFF, 0xFFFF_FFFF),  // RA
    (0x5200, 0, 128, Test::Table32, 0xFFFF_FFFF, 0xFFFF_FFFF),   // MTA
];
/// reg_pattern_test's patterns.
const PATTERNS: [u32; 4] = [0x5A5A_5A5A, 0xA5A5_A5A5, 0x0000_0000, 0xFFFF_FFFF];
/// igb_reg_test's STATUS toggle for e1000_i210/i211.
const STATUS_TOGGLE_I210: u32 = 0x7FEF_F3FF;

/// One pattern test as igb runs it (under the mask) and as the part answers it (whole value:
/// the bits outside the mask read 0, `known::write_mask`).
fn pattern(r: &mut Regs, reg: u32, mask: u32, write: u32) -> Result<(), String> {
    for p in PATTERNS {
        r.wr(reg, p & write);
        let v = r.rd(reg);
        if v & mask != p & write & mask {
            return Err(format!(
                "igb: pattern test reg {reg:04X} failed: got {v:#010x}"
            ));
        }
        if v != p & write & mask {
            return Err(format!(
                "reg {reg:04X}: {v:#010x} keeps bits outside the mask {mask:#010x}"
            ));
        }
    }
    Ok(())
}

/// igb_reg_test on `part` (STATUS first, then the table).
fn igb_reg_test(part: IgbPart) -> Result<(), String> {
    let mut r = Regs::new(part);
    let value = r.rd(STATUS) & STATUS_TOGGLE_I210;
    r.wr(STATUS, STATUS_TOGGLE_I210);
    if r.rd(STATUS) & STATUS_TOGGLE_I210 != value {
        return Err("failed STATUS register test".into());
    }
    for &(reg, stride, n, test, mask, write) in REG_TEST_I210 {
        for i in 0..n {
            match test {
                Test::Pattern => pattern(&mut r, reg + i * stride, mask, write)?,
                Test::Table32 => pattern(&mut r, reg + i * 4, mask, write)?,
                Test::Table64Lo => pattern(&mut r, reg + i * 8, mask, write)?,
                Test::Table64Hi => pattern(&mut r, reg + 4 + i * 8, mask, write)?,
                Test::SetRead => {
                    r.wr(reg, write & mask);
                    let v = r.rd(reg);
                    if v & mask != write & mask {
                        return Err(format!("set/check reg {reg:04X} failed: got {v:#010x}"));
                    }
                }
            }
        }
    }
    Ok(())
}

#[test]
fn linux_igb_register_test_passes_on_the_i210_and_i211_with_reserved_bits_zero() {
    for part in [IgbPart::I210, IgbPart::I211] {
        assert_eq!(igb_reg_test(part), Ok(()), "{part:?}");
    }
}

/// igb_get_regs (6.1) for an i210: (first offset, count, stride). Statistics come from the
/// driver's copies (igb_update_stats), not from this dump.
const GET_REGS_I210: &[(u32, u32, u32)] = &[
    // CTRL, STATUS, CTRL_EXT, MDIC, SCTL, CONNSW, VET, LEDCTL, PBA, PBS, FRTIMER, TCPTIMER
    (0x0000, 1, 4),
    (0x0008, 1, 4),
    (0x0018, 1, 4),
    (0x0020, 1, 4),
    (0x0024, 1, 4),
    (0x0034, 1, 4),
    (0x0038, 1, 4),
    (0x0E00, 1, 4),
    (0x1000, 1, 4),
    (0x1008, 1, 4),
    (0x1048, 1, 4),
    (0x104C, 1, 4),
    // EECD; EICS, EIMS, EIMC, EIAC, EIAM; ICS, IMS, IMC, IAC, IAM, IMIRVP
    (0x0010, 1, 4),
    (0x1520, 5, 4),
    (0x00C8, 1, 4),
    (0x00D0, 1, 4),
    (0x00D8, 1, 4),
    (0x4100, 1, 4),
    (0x00E0, 1, 4),
    (0x5AC0, 1, 4),
    // FCAL, FCAH, FCTTV, FCRTL, FCRTH, FCRTV
    (0x0028, 2, 4),
    (0x0170, 1, 4),
    (0x2160, 1, 4),
    (0x2168, 1, 4),
    (0x2460, 1, 4),
    // RCTL, RXCSUM, RLPML, RFCTL, MRQC, VT_CTL; TCTL, TCTL_EXT, TIPG, DTXCTL
    (0x0100, 1, 4),
    (0x5000, 3, 4),
    (0x5818, 2, 4),
    (0x0400, 2, 4),
    (0x0410, 1, 4),
    (0x3590, 1, 4),
    // WUC, WUFC, WUS, IPAV, WUPL; PCS_CFG0, PCS_LCTL, PCS_LSTAT, PCS_ANADV .. PCS_LPABNP
    (0x5800, 1, 4),
    (0x5808, 1, 4),
    (0x5810, 1, 4),
    (0x5838, 1, 4),
    (0x5900, 1, 4),
    (0x4200, 1, 4),
    (0x4208, 2, 4),
    (0x4218, 4, 4),
    // SRRCTL, PSRTYPE, RDBAL, RDBAH, RDLEN, RDH, RDT, RXDCTL (0..3)
    (0x280C, 4, 0x100),
    (0x5480, 4, 4),
    (0x2800, 4, 0x100),
    (0x2804, 4, 0x100),
    (0x2808, 4, 0x100),
    (0x2810, 4, 0x100),
    (0x2818, 4, 0x100),
    (0x2828, 4, 0x100),
    // EITR(0..9), IMIR, IMIREXT, RAL/RAH(0..15)
    (0x1680, 10, 4),
    (0x5A80, 8, 4),
    (0x5AA0, 8, 4),
    (0x5400, 32, 4),
    // TDBAL, TDBAH, TDLEN, TDH, TDT, TXDCTL, TDWBAL, TDWBAH, DCA_TXCTRL (0..3)
    (0x3800, 4, 0x100),
    (0x3804, 4, 0x100),
    (0x3808, 4, 0x100),
    (0x3810, 4, 0x100),
    (0x3818, 4, 0x100),
    (0x3828, 4, 0x100),
    (0x3838, 4, 0x100),
    (0x383C, 4, 0x100),
    (0x3814, 4, 0x100),
    // IP4AT, IP6AT, WUPM, FFMT, FFVT, FFLT
    (0x5840, 4, 8),
    (0x5880, 4, 4),
    (0x5A00, 32, 4),
    (0x9000, 128, 8),
    (0x9800, 128, 8),
    (0x5F00, 4, 8),
    // TDFH, TDFT, TDFHS, TDFPC; I210_RR2DCDELAY (i210/i211 only)
    (0x3410, 1, 4),
    (0x3418, 1, 4),
    (0x3420, 1, 4),
    (0x3430, 1, 4),
    (0x5BF4, 1, 4),
];

#[test]
fn every_offset_linux_ethtool_d_reads_on_an_i210_is_implemented() {
    for part in [IgbPart::I210, IgbPart::I211] {
        let missing: Vec<String> = GET_REGS_I210
            .iter()
            .flat_map(|&(first, n, stride)| (0..n).map(move |i| first + i * stride))
            .filter(|&o| !Igb::implements(part, o))
            .map(|o| format!("{o:#06x}"))
            .collect();
        assert!(missing.is_empty(), "{part:?}: {missing:?}");
        // And reading them all leaves nothing in the unimplemented record.
        let mut r = Regs::new(part);
        for &(first, n, stride) in GET_REGS_I210 {
            for i in 0..n {
                r.rd(first + i * stride);
            }
        }
        assert_eq!(r.dev.nic().unimplemented_accesses(), vec![]);
    }
}

/// EERD through the offset Linux igb uses on the i210 (E1000_EERD 0x0014): START, then DONE
/// with the word (e1000_nvm.c igb_read_nvm_eerd).
fn nvm_word(r: &mut Regs, addr: u32) -> u16 {
    r.wr(EERD, addr << 2 | 1);
    let v = r.rd(EERD);
    assert_ne!(v & 2, 0, "EERD DONE");
    (v >> 16) as u16
}

/// igb_get_fw_version + igb_set_fw_version for an i210 with flash and no option ROM.
fn fw_version(r: &mut Regs) -> String {
    let v = nvm_word(r, 0x05);
    let etrack_hi = nvm_word(r, 0x43);
    let minor = if v & 0x0F00 == 0 {
        v & 0xFF
    } else {
        (v & 0x0FF0) >> 4
    };
    let minor = minor / 16 * 10 + minor % 16;
    assert_eq!(etrack_hi & 0xF000, 0x8000, "NVM_ETRACK_VALID");
    let etrack = u32::from(etrack_hi) << 16 | u32::from(nvm_word(r, 0x42));
    format!("{}.{}, {etrack:#010x}", v >> 12, minor)
}

#[test]
fn i210_flash_nvm_as_linux_igb_reads_and_updates_it() {
    let mac = [0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc];
    let mut r = Regs::with(IgbPart::I210, |c| c.mac = mac);
    // igb_get_flash_presence_i210; word_size = 1 << (SIZE_EX + 6).
    let eecd = r.rd(EECD);
    assert_ne!(eecd & 1 << 19, 0, "E1000_EECD_FLASH_DETECTED_I210");
    assert_eq!(1 << (((eecd >> 11) & 0xF) + 6), 2048, "word_size");
    let sum = (0..=0x3F).fold(0u16, |a, w| a.wrapping_add(nvm_word(&mut r, w)));
    assert_eq!(sum, 0xBABA, "igb_validate_nvm_checksum");
    assert_eq!(nvm_word(&mut r, 1), 0xaa21, "MAC word 1");
    assert_eq!(fw_version(&mut r), "3.16, 0x800004d6");
    // igb_get_cfg_done_i210.
    assert_ne!(r.rd(0x12030) & 1 << 18, 0, "E1000_NVM_CFG_DONE_PORT_0");
    // igb_write_nvm_srwr + igb_update_flash_i210: SRWR, then EECD.FLUPD; FLUDONE stays up.
    r.wr(0x12018, 0x1234 << 16 | 0x30 << 2 | 1);
    assert_ne!(r.rd(0x12018) & 2, 0, "SRWR DONE");
    let eecd = r.rd(EECD);
    r.wr(EECD, eecd | 1 << 23);
    assert_ne!(r.rd(EECD) & 1 << 26, 0, "E1000_EECD_FLUDONE_I210");
    r.wr(CTRL, Ctrl::RST.bits());
    assert_eq!(nvm_word(&mut r, 0x30), 0x1234, "committed to the flash");
    assert!(r.dev.nic().unimplemented_accesses().is_empty());
}

#[test]
fn flashless_i210_and_i211_present_the_mac_in_the_invm() {
    let mac = [0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc];
    for (part, id) in [(IgbPart::I210, 0x157B), (IgbPart::I211, 0x1539)] {
        let mut r = Regs::with(part, |c| {
            c.device_id = id;
            c.mac = mac;
        });
        assert_eq!(r.rd(EECD) & 1 << 19, 0, "{id:#06x}: no flash");
        // igb_read_invm_word_i210: word-autoload records until an uninitialised one.
        let mut words = Vec::new();
        for i in 0..64 {
            let d = r.rd(0x12120 + 4 * i);
            if d & 7 == 0 {
                break;
            }
            assert_eq!(d & 7, 1, "word autoload");
            words.push(((d >> 9) & 0x7F, (d >> 16) as u16));
        }
        assert_eq!(words, vec![(0, 0x1b00), (1, 0xaa21), (2, 0xccbb)]);
        r.wr(0x12120, 0);
        assert_eq!(r.rd(0x12120) >> 16, 0x1b00, "the iNVM is read-only");
    }
}

/// igb_intr_test on an unshared legacy line, i210 (ics_mask 0x77DCFED5): a cause set through
/// ICS while masked sends nothing; enabled, it sends the interrupt and ICR shows it; the other
/// causes, masked, send nothing. The model delivers what the test waits for; in the VM the
/// line itself is not delivered under TCG (tests/vm_linux_tools.rs).
#[test]
fn igb_interrupt_test_sequence_raises_exactly_the_enabled_cause() {
    let mut r = Regs::new(IgbPart::I210);
    r.wr(IMC, !0);
    r.host.take();
    for bit in (0..31).filter(|b| 0x77DC_FED5u32 & 1 << b != 0) {
        let mask = 1u32 << bit;
        r.wr(ICR, !0);
        r.wr(IMC, mask);
        r.wr(ICS, mask);
        assert!(r.host.take().is_empty(), "bit {bit}: masked, nothing sent");
        r.wr(ICR, !0);
        r.wr(IMS, mask);
        r.wr(ICS, mask);
        assert_eq!(r.host.take().len(), 1, "bit {bit}: enabled, one interrupt");
        assert!(r.dev.nic().intx_level(), "bit {bit}: INTx asserted");
        assert_ne!(r.rd(ICR) & mask, 0, "bit {bit}: the handler's ICR read");
        r.wr(ICR, !0);
        r.wr(IMC, !mask);
        r.wr(ICS, !mask);
        assert!(r.host.take().is_empty(), "bit {bit}: the others masked");
    }
}
