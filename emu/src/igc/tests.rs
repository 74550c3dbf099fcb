//! Behaviour tests of the i225 model, written from intel-timesync.md (not from a driver).
//! Deterministic: true time is a [`VirtualClock`] the test advances.

use super::*;
use crate::clock::VirtualClock;
use crate::host::RecordingHost;
use crate::phc::NS_PER_S;

const S: u64 = NS_PER_S;
/// The "other" vector used by the MSI-X tests (igc uses vector 0 for it).
const OTHER: u32 = 0;
/// EECD after power-on or reset: PRES b8, AUTO_RD b9, SIZE_EX 5 (b14:11), FLASH_DETECTED
/// b19, FLUDONE b26 (Linux igc_defines.h; nvm.rs).
const EECD_POWER_ON: u32 = 0x0408_2B00;

struct Rig {
    clock: VirtualClock,
    dev: I225,
    host: RecordingHost,
}

impl Rig {
    fn new() -> Self {
        Self::with(|_| {})
    }

    fn with(f: impl FnOnce(&mut I225Config)) -> Self {
        let clock = VirtualClock::new(1_000);
        let mut cfg = I225Config::i225(clock.source());
        f(&mut cfg);
        Self {
            clock,
            dev: I225::new(cfg),
            host: RecordingHost::new(),
        }
    }

    fn rd(&mut self, off: u32) -> u32 {
        self.dev.read32(0, off, &mut self.host)
    }

    fn wr(&mut self, off: u32, v: u32) {
        self.dev.write32(0, off, v, &mut self.host);
    }

    /// MSI-X setup as igc does it (§6): GPIE, IVAR_MISC, EIAC/EIAM/EIMS for the other
    /// vector, IMS = LSC | DOUTSYNC | DRSTA | TS, TSIM = TXTS.
    fn msix_setup(&mut self) {
        self.wr(
            GPIE,
            gpie::MSIX_MODE | gpie::PBA | gpie::EIAME | gpie::NSICR,
        );
        self.wr(IVAR_MISC, (OTHER | IVAR_VALID) << 8);
        self.wr(EIAC, 1 << OTHER);
        self.wr(EIAM, 1 << OTHER);
        self.wr(EIMS, 1 << OTHER);
        self.wr(
            IMS,
            IntCause::LSC.bits()
                | IntCause::DOUTSYNC.bits()
                | IntCause::DRSTA.bits()
                | IntCause::TS.bits(),
        );
        self.wr(TSIM, TsCause::TXTS.bits());
    }

    /// Reads SYSTIML then SYSTIMH, as a driver does.
    fn systim(&mut self) -> (u32, u32) {
        let l = self.rd(SYSTIML);
        let h = self.rd(SYSTIMH);
        (h, l)
    }
}

/// Linux igc_ptp_adjfine_i225 (§4): TIMINCA for `ppb`.
fn linux_timinca(ppb: i64) -> u32 {
    let scaled_ppm = ppb.unsigned_abs() * 65536 / 1000;
    let rate = ((scaled_ppm << 14) / 78125) as u32;
    (rate & timinca::INCVALUE_MASK) | if ppb < 0 { timinca::ISGN } else { 0 }
}

/// Exact SYSTIM advance over `dt` ns from the §4 equation, INCVALUE `inc`, sign `neg`.
fn expected_advance(dt: u64, inc: u32, neg: bool, osc_ppb: i64) -> u64 {
    let nominal = (TICK_PS as u128) << 32;
    let corr = inc as u128 * 1000;
    let tick = if neg { nominal - corr } else { nominal + corr };
    let num = dt as u128 * (1_000_000_000 + osc_ppb) as u128 * tick;
    ((num / (1_000_000_000u128 * TICK_PS as u128)) >> 32) as u64
}

// --- Identity and power-on ---

#[test]
fn ids_bars_and_vectors() {
    let r = Rig::new();
    let ids = r.dev.ids();
    assert_eq!(
        (ids.vendor, ids.device, ids.class),
        (0x8086, ids::EMU_I225, 0x02)
    );
    assert_eq!(r.dev.bar_len(0), Some(128 * 1024));
    assert_eq!(r.dev.bar_len(3), Some(16 * 1024));
    assert_eq!(r.dev.bar_len(1), None);
    assert_eq!(r.dev.msix_vectors(), 5);
    assert_eq!(r.dev.part_name(), "Intel i225-LM");
    let i226 = I225::new_i226(VirtualClock::new(0).source());
    assert_eq!(i226.ids().device, ids::EMU_I226);
    assert_eq!(i226.part_name(), "Intel i226-LM");
}

#[test]
fn power_on_values() {
    let mut r = Rig::with(|c| c.mac = [0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc]);
    assert_eq!(r.rd(ral(0)), 0xaa21_1b00);
    assert_eq!(r.rd(rah(0)), 0xccbb | rah::AV);
    assert_ne!(r.rd(EECD) & Eecd::AUTO_RD.bits(), 0);
    let st = r.rd(STATUS);
    assert_ne!(st & Status::GIO_MASTER_ENABLE.bits(), 0);
    assert_eq!(st & Status::LU.bits(), 0, "link down until CTRL.SLU");
    assert_eq!(r.rd(TSAUXC), 0, "timer 0 counts at power-on by default");
    assert_eq!(r.rd(TIMINCA), 0, "nominal rate");
    assert_eq!(r.rd(ICR), 0);
}

#[test]
fn unmodelled_offsets_are_storage_and_read_only_writes_are_ignored() {
    let mut r = Rig::new();
    for off in [
        TCTL,
        RCTL,
        rdbah(0),
        srrctl(0),
        TSYNCRXCTL,
        RXPBS,
        IVAR0,
        0x1_FFFC,
    ] {
        r.wr(off, 0xdead_beef ^ off);
        assert_eq!(r.rd(off), 0xdead_beef ^ off, "offset {off:#x}");
    }
    // Part 2 owns these: TXTT bits and the stamp sets are read-only [assumption].
    r.wr(TSYNCTXCTL, 0xdead_beef);
    assert_eq!(r.rd(TSYNCTXCTL), 0xdead_beef & !TsyncTxCtl::TXTT_ANY.bits());
    r.wr(TXSTMPL[2], 0x1234);
    r.wr(TXSTMPH[2], 0x1234);
    assert_eq!((r.rd(TXSTMPL[2]), r.rd(TXSTMPH[2])), (0, 0));
    let st = r.rd(STATUS);
    r.wr(STATUS, !st);
    assert_eq!(r.rd(STATUS), st);
    r.wr(EECD, 0);
    assert_ne!(r.rd(EECD) & Eecd::AUTO_RD.bits(), 0, "AUTO_RD is read-only");
    for wo in [ICS, IMC, EICS, EIMC] {
        assert_eq!(r.rd(wo), 0, "write-only {wo:#x}");
    }
}

#[test]
fn no_offset_or_value_panics() {
    let mut r = Rig::new();
    r.msix_setup();
    for bar in 0..6u8 {
        for off in (0..0x2_0000u32)
            .step_by(4)
            .chain([0x2_0000, 0x10_0000, u32::MAX - 3, 2])
        {
            for v in [0, u32::MAX] {
                r.dev.write32(bar, off, v, &mut r.host);
                let _ = r.dev.read32(bar, off, &mut r.host);
            }
        }
    }
    assert_eq!(r.dev.read32(0, 0x2_0000, &mut r.host), u32::MAX);
    assert_eq!(r.dev.read32(1, 0, &mut r.host), u32::MAX);
    let _ = r.dev.poll(&mut r.host);
}

#[test]
fn gio_master_disable_clears_gio_master_enable() {
    let mut r = Rig::new();
    r.wr(CTRL, Ctrl::GIO_MASTER_DISABLE.bits());
    assert_eq!(r.rd(STATUS) & Status::GIO_MASTER_ENABLE.bits(), 0);
    r.wr(CTRL, 0);
    assert_ne!(r.rd(STATUS) & Status::GIO_MASTER_ENABLE.bits(), 0);
}

// --- SYSTIM (§3, §5) ---

#[test]
fn systiml_read_latches_systimh_across_a_second_boundary() {
    let mut r = Rig::with(|c| c.initial_systim_ns = 41 * S + 999_999_000);
    let l = r.rd(SYSTIML);
    assert_eq!(l, 999_999_000);
    // The timer crosses into second 42 between the two reads.
    r.clock.advance(5_000);
    assert_eq!(r.dev.phc_time().sec, 42);
    let h = r.rd(SYSTIMH);
    assert_eq!((h, l), (41, 999_999_000), "H is the second latched with L");
    // The next pair is consistent again.
    assert_eq!(r.systim(), (42, 4_000));
}

#[test]
fn systimh_alone_returns_the_stale_latch() {
    let mut r = Rig::with(|c| c.initial_systim_ns = 7 * S);
    assert_eq!(r.systim(), (7, 0));
    r.clock.advance(3 * S);
    assert_eq!(r.rd(SYSTIMH), 7, "no SYSTIML read: last latch");
    assert_eq!(r.rd(SYSTIMH), 7);
    assert_eq!(r.systim(), (10, 0));
}

#[test]
fn settime_applies_on_the_systimh_write_only() {
    let mut r = Rig::with(|c| c.initial_systim_ns = 100 * S);
    r.wr(SYSTIML, 250_000_000);
    r.clock.advance(1_000);
    assert_eq!(
        r.dev.phc_now_ns(),
        100 * S + 1_000,
        "SYSTIML write alone is held"
    );
    r.wr(SYSTIMH, 1_700_000_000);
    assert_eq!(r.dev.phc_now_ns(), 1_700_000_000 * S + 250_000_000);
    r.clock.advance(10);
    assert_eq!(r.systim(), (1_700_000_000, 250_000_010));
}

// --- Frequency (§4) ---

#[test]
fn timinca_plus_1000_ppb_over_one_second() {
    let mut r = Rig::new();
    let v = linux_timinca(1000);
    assert_eq!(v, 13_743);
    r.wr(TIMINCA, v);
    assert_eq!(r.rd(TIMINCA), v);
    assert_eq!(r.dev.timinca(), v);
    let t0 = r.dev.phc_now_ns();
    r.clock.advance(S);
    let adv = r.dev.phc_now_ns() - t0;
    assert_eq!(adv, expected_advance(S, 13_743, false, 0));
    assert!(adv.abs_diff(S + 1000) <= 2, "{adv}");
}

#[test]
fn timinca_negative_sign_slows_the_clock() {
    let mut r = Rig::new();
    r.wr(TIMINCA, linux_timinca(-1000));
    let t0 = r.dev.phc_now_ns();
    r.clock.advance(S);
    let adv = r.dev.phc_now_ns() - t0;
    assert_eq!(adv, expected_advance(S, 13_743, true, 0));
    assert!(adv.abs_diff(S - 1000) <= 2, "{adv}");
}

#[test]
fn oscillator_error_combines_with_timinca() {
    let mut r = Rig::with(|c| c.osc_error_ppb = 20_000);
    let t0 = r.dev.phc_now_ns();
    r.clock.advance(S);
    assert_eq!(
        r.dev.phc_now_ns() - t0,
        S + 20_000,
        "crystal alone: +20 ppm"
    );
    // The servo's correction: -20 ppm through TIMINCA.
    let v = linux_timinca(-20_000);
    r.wr(TIMINCA, v);
    let t1 = r.dev.phc_now_ns();
    r.clock.advance(S);
    let adv = r.dev.phc_now_ns() - t1;
    let exp = expected_advance(S, v & timinca::INCVALUE_MASK, true, 20_000);
    // Readings truncate to whole ns while the PHC keeps the fraction, so the difference of two
    // readings is the exact advance or one more.
    assert!((exp..=exp + 1).contains(&adv), "{adv} vs {exp}");
    assert!(adv.abs_diff(S) <= 2, "{adv}");
    // Runtime drift of the crystal.
    r.dev.set_osc_error_ppb(-30_000);
    assert_eq!(r.dev.osc_error_ppb(), -30_000);
    let t2 = r.dev.phc_now_ns();
    r.clock.advance(S);
    let adv = r.dev.phc_now_ns() - t2;
    let exp = expected_advance(S, v & timinca::INCVALUE_MASK, true, -30_000);
    assert!((exp..=exp + 1).contains(&adv), "{adv} vs {exp}");
    assert!(adv.abs_diff(S - 50_000) <= 3, "{adv}");
}

#[test]
fn tsauxc_disable0_freezes_and_resume_continues() {
    let mut r = Rig::with(|c| c.initial_systim_ns = 5 * S);
    r.clock.advance(S);
    r.wr(TSAUXC, Tsauxc::DISABLE0.bits());
    assert!(!r.dev.phc_running());
    r.clock.advance(10 * S);
    assert_eq!(r.systim(), (6, 0), "frozen");
    r.wr(TSAUXC, 0);
    r.clock.advance(S / 2);
    assert_eq!(
        r.systim(),
        (6, 500_000_000),
        "resumes from the frozen value"
    );
}

#[test]
fn configured_power_on_tsauxc() {
    let mut r = Rig::with(|c| c.tsauxc_power_on = I226_REPORTED_TSAUXC);
    assert_eq!(r.rd(TSAUXC), I226_REPORTED_TSAUXC.bits());
    r.clock.advance(S);
    assert_eq!(
        r.dev.phc_now_ns(),
        S,
        "DISABLE0 is clear in the reported value"
    );
    let frozen = Rig::with(|c| c.tsauxc_power_on = Tsauxc::DISABLE0);
    frozen.clock.advance(S);
    assert_eq!(frozen.dev.phc_now_ns(), 0);
}

// --- Reset (§10) ---

#[test]
fn ctrl_rst_resets_registers_sets_auto_rd_and_keeps_systim() {
    let mut r = Rig::with(|c| c.initial_systim_ns = 3 * S);
    r.msix_setup();
    r.wr(CTRL, Ctrl::SLU.bits());
    r.wr(TCTL, tctl::EN);
    r.wr(ral(0), 0x1234_5678);
    r.wr(TIMINCA, linux_timinca(500));
    r.wr(EECD, 0x40);
    r.clock.advance(S);
    let before = r.dev.phc_now_ns();
    assert!(r.dev.link_up());

    r.wr(CTRL, r.dev.peek(CTRL) | Ctrl::RST.bits());
    assert_eq!(r.dev.port_resets(), 1);
    assert_eq!(r.rd(CTRL) & Ctrl::RST.bits(), 0, "RST self-clears");
    assert_eq!(r.rd(CTRL), 0);
    assert_eq!(r.rd(EECD), EECD_POWER_ON, "EECD.REQ (0x40) cleared");
    assert_eq!(r.rd(TCTL), 0);
    assert_eq!(
        r.rd(ral(0)),
        u32::from_le_bytes([0x02, 0, 0, 0]),
        "NVM MAC reloaded"
    );
    assert_eq!(r.rd(IMS), 0);
    assert_eq!(r.rd(GPIE), 0);
    assert_eq!(r.rd(TSIM), 0);
    assert_eq!(
        r.rd(STATUS) & Status::LU.bits(),
        0,
        "SLU is clear after reset"
    );
    assert_eq!(r.rd(ICR), 0);
    // The PHC kept running at its corrected rate.
    assert_eq!(r.dev.phc_now_ns(), before);
    assert_eq!(r.rd(TIMINCA), linux_timinca(500));
    r.clock.advance(S);
    assert!(r.dev.phc_now_ns() > before + S);
}

#[test]
fn dev_rst_behaves_like_port_reset() {
    let mut r = Rig::new();
    r.wr(TCTL, tctl::EN);
    r.clock.advance(S);
    r.wr(CTRL, Ctrl::DEV_RST.bits());
    assert_eq!(r.rd(CTRL), 0);
    assert_eq!(r.rd(TCTL), 0);
    assert_ne!(r.rd(EECD) & Eecd::AUTO_RD.bits(), 0);
    assert_eq!(r.dev.phc_now_ns(), S);
}

// --- Link ---

#[test]
fn link_needs_slu_and_cable_and_raises_lsc() {
    let mut r = Rig::new();
    assert_eq!(r.rd(STATUS) & Status::LU.bits(), 0);
    r.wr(CTRL, Ctrl::SLU.bits());
    let st = r.rd(STATUS);
    assert_eq!(
        st & (Status::LU.bits() | Status::FD.bits() | Status::SPEED_2500.bits()),
        Status::LU.bits() | Status::FD.bits() | Status::SPEED_2500.bits()
    );
    assert_eq!(
        r.rd(ICR),
        IntCause::LSC.bits(),
        "LSC pending, masked so no INT_ASSERTED"
    );
    let changes = r.dev.link_changes();
    r.dev.set_cable(false, &mut r.host);
    assert_eq!(
        r.rd(STATUS) & (Status::LU.bits() | Status::SPEED_2500.bits()),
        0
    );
    assert_eq!(r.rd(ICR), IntCause::LSC.bits());
    r.dev.set_cable(false, &mut r.host);
    assert_eq!(r.rd(ICR), 0, "no change, no LSC");
    r.dev.set_cable(true, &mut r.host);
    assert_ne!(r.rd(STATUS) & Status::LU.bits(), 0);
    assert_eq!(r.rd(ICR), IntCause::LSC.bits());
    assert_eq!(r.dev.link_changes(), changes + 2, "down and up, each once");
    assert!(r.host.raised.is_empty(), "IMS was clear");
}

/// STATUS speed as Linux's igc_get_speed_and_duplex_copper reads it (igc_mac.c): SPEED_1000
/// first, then SPEED_2500 within it; 100; else 10.
fn linux_speed(st: u32) -> u32 {
    if st & Status::SPEED_1000.bits() != 0 {
        if st & Status::SPEED_2500.bits() != 0 {
            2500
        } else {
            1000
        }
    } else if st & Status::SPEED_100.bits() != 0 {
        100
    } else {
        10
    }
}

#[test]
fn link_speed_bits() {
    for (speed, bits) in [
        (LinkSpeed::Mbps10, 0),
        (LinkSpeed::Mbps100, Status::SPEED_100.bits()),
        (LinkSpeed::Mbps1000, Status::SPEED_1000.bits()),
        // The i225 keeps SPEED_1000 at 2.5 Gb/s (§10.1; Linux igc_mac.c).
        (
            LinkSpeed::Mbps2500,
            Status::SPEED_1000.bits() | Status::SPEED_2500.bits(),
        ),
    ] {
        let mut r = Rig::with(|c| c.link_speed = speed);
        r.wr(CTRL, Ctrl::SLU.bits());
        let all = Status::SPEED_100.bits() | Status::SPEED_1000.bits() | Status::SPEED_2500.bits();
        let st = r.rd(STATUS);
        assert_eq!(st & all, bits, "{speed:?}");
        assert_eq!(
            linux_speed(st),
            speed.mbps(),
            "Linux's decoding of {speed:?}"
        );
        assert_eq!(LinkSpeed::from_mbps(speed.mbps()), Some(speed));
    }
    let mut r = Rig::new();
    r.wr(CTRL, Ctrl::SLU.bits());
    let _ = r.rd(ICR);
    r.dev.set_link_speed(LinkSpeed::Mbps1000, &mut r.host);
    assert_eq!(
        r.rd(STATUS) & (Status::SPEED_1000.bits() | Status::SPEED_2500.bits()),
        Status::SPEED_1000.bits()
    );
    assert_eq!(r.rd(ICR), IntCause::LSC.bits(), "renegotiation");
}

#[test]
fn mdic_phy_access_completes_at_once() {
    let mut r = Rig::new();
    let read = |reg: u32| mdic::OP_READ | (1 << mdic::PHY_SHIFT) | (reg << mdic::REG_SHIFT);
    r.wr(MDIC, read(2));
    let v = r.rd(MDIC);
    assert_ne!(v & mdic::READY, 0);
    assert_eq!(v & mdic::DATA_MASK, I225_I_PHY_ID >> 16);
    r.wr(MDIC, read(3));
    assert_eq!(r.rd(MDIC) & mdic::DATA_MASK, I225_I_PHY_ID & 0xFFFF);
    r.wr(MDIC, mdic::OP_WRITE | (9 << mdic::REG_SHIFT) | 0x0200);
    assert_ne!(r.rd(MDIC) & mdic::READY, 0);
    r.wr(MDIC, read(9));
    assert_eq!(r.rd(MDIC) & mdic::DATA_MASK, 0x0200);
    // The PHY links with its partner whatever the MAC's CTRL.SLU says.
    r.wr(MDIC, read(1));
    assert_eq!(r.rd(MDIC) & 0x24, 0x24, "BMSR link up, AN complete");
    assert_eq!(
        r.rd(STATUS) & Status::LU.bits(),
        0,
        "the MAC's link waits for SLU"
    );
    r.dev.set_cable(false, &mut r.host);
    r.wr(MDIC, read(1));
    assert_eq!(r.rd(MDIC) & 0x24, 0, "BMSR link down without a cable");
}

/// MDIC read of PHY register `reg` (PHY address 1), as Linux igc_read_phy_reg_mdic.
fn phy_rd(r: &mut Rig, reg: u32) -> u16 {
    r.wr(
        MDIC,
        mdic::OP_READ | (1 << mdic::PHY_SHIFT) | (reg << mdic::REG_SHIFT),
    );
    let v = r.rd(MDIC);
    assert_ne!(v & mdic::READY, 0);
    assert_eq!((v & mdic::REG_MASK) >> mdic::REG_SHIFT, reg);
    v as u16
}

fn phy_wr(r: &mut Rig, reg: u32, v: u16) {
    r.wr(
        MDIC,
        mdic::OP_WRITE | (1 << mdic::PHY_SHIFT) | (reg << mdic::REG_SHIFT) | v as u32,
    );
    assert_ne!(r.rd(MDIC) & mdic::READY, 0);
}

/// Linux igc_phy.c __igc_access_xmdio_reg: DEVAD into 13, address into 14, DATA function
/// (0x4000) with DEVAD into 13, the data through 14, then 13 back to 0.
fn xmdio(r: &mut Rig, dev: u16, addr: u16, write: Option<u16>) -> u16 {
    phy_wr(r, 13, dev);
    phy_wr(r, 14, addr);
    phy_wr(r, 13, 0x4000 | dev);
    let v = match write {
        Some(v) => {
            phy_wr(r, 14, v);
            v
        }
        None => phy_rd(r, 14),
    };
    phy_wr(r, 13, 0);
    v
}

#[test]
fn phy_status_registers_follow_the_link() {
    let mut r = Rig::with(|c| c.cable_connected = false);
    assert_eq!(phy_rd(&mut r, 1), 0x7949, "BMSR, link down");
    assert_eq!(phy_rd(&mut r, 10) & (1 << 12), 0, "no remote receiver yet");
    r.dev.set_cable(true, &mut r.host);
    assert_eq!(phy_rd(&mut r, 1), 0x796D, "BMSR as the part reports it up");
    // igc_watchdog_task waits for 1000BASE-T status b12 (remote receiver OK).
    assert_ne!(phy_rd(&mut r, 10) & (1 << 12), 0);
    phy_wr(&mut r, 10, 0);
    assert_ne!(phy_rd(&mut r, 10) & (1 << 12), 0, "read-only");
    assert_eq!(
        (phy_rd(&mut r, 2), phy_rd(&mut r, 3)),
        (0x67C9, 0xDC00),
        "I225 PHY ID"
    );
}

#[test]
fn mmd_registers_are_reached_through_13_and_14() {
    let mut r = Rig::new();
    // ANEG_MULTIGBT_AN_CTRL (MMD 7, 0x20) as igc_phy_setup_autoneg writes it, and a neighbour.
    xmdio(&mut r, 7, 0x20, Some(0x0000));
    xmdio(&mut r, 7, 0x22, Some(0x1234));
    xmdio(&mut r, 1, 0x20, Some(0x5555));
    assert_eq!(xmdio(&mut r, 7, 0x20, None), 0x0000);
    assert_eq!(xmdio(&mut r, 7, 0x22, None), 0x1234);
    assert_eq!(xmdio(&mut r, 1, 0x20, None), 0x5555);
    assert_eq!(r.dev.port.phy.mmd(7, 0x20), 0x0000);
    // Function 2 post-increments the address on every data access.
    phy_wr(&mut r, 13, 7);
    phy_wr(&mut r, 14, 0x20);
    phy_wr(&mut r, 13, 0x8000 | 7);
    let (ctl, _, next) = (phy_rd(&mut r, 14), phy_rd(&mut r, 14), phy_rd(&mut r, 14));
    assert_eq!((ctl, next), (0x0000, 0x1234));
    // 7.33 (MultiGBASE-T AN status) is read-only.
    xmdio(&mut r, 7, 0x21, Some(0xFFFF));
    assert_eq!(xmdio(&mut r, 7, 0x21, None) & 0x0F00, 0);
    // A PHY reset brings the MMD registers back to their defaults (2.5G advertised).
    r.wr(CTRL, Ctrl::PHY_RST.bits());
    assert_eq!(r.rd(CTRL) & Ctrl::PHY_RST.bits(), 0, "PHY_RST self-clears");
    assert_eq!(xmdio(&mut r, 7, 0x20, None), 0x0080);
    assert_eq!(xmdio(&mut r, 7, 0x22, None), 0);
}

#[test]
fn probe_registers_read_as_linux_igc_expects() {
    let mut r = Rig::new();
    // EECD: NVM present, auto-read done, flash detected with its last update done, a
    // 2048-word shadow RAM (SIZE_EX 5); read-only bits (nvm.rs).
    assert_eq!(r.rd(EECD), EECD_POWER_ON);
    r.wr(EECD, 0);
    assert_eq!(r.rd(EECD), EECD_POWER_ON);
    // PHPM: PHY reset complete.
    assert_ne!(r.rd(PHPM) & phpm::RST_COMP, 0);
    r.wr(PHPM, 0x4);
    assert_eq!(r.rd(PHPM), 0x4 | phpm::RST_COMP);
    // SWSM, as igc_get_hw_semaphore_i225: the first read finds SMBI clear and takes it.
    assert_eq!(r.rd(SWSM) & swsm::SMBI, 0);
    assert_ne!(r.rd(SWSM) & swsm::SMBI, 0, "held now");
    let v = r.rd(SWSM);
    r.wr(SWSM, v | swsm::SWESMBI);
    assert_ne!(r.rd(SWSM) & swsm::SWESMBI, 0, "SWESMBI latched");
    r.wr(SWSM, 0);
    assert_eq!(r.rd(SWSM), 0, "released");
    // CTRL.RST self-clears; MAC in RAL0/RAH0 with AV.
    r.wr(CTRL, Ctrl::RST.bits() | Ctrl::SLU.bits());
    assert_eq!(r.rd(CTRL), 0);
    assert_eq!(r.rd(rah(0)) & rah::AV, rah::AV);
}

#[test]
fn eerd_reads_a_checksummed_shadow_ram_holding_the_mac() {
    let mut r = Rig::with(|c| c.mac = [0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc]);
    let mut sum = 0u16;
    let mut words = Vec::new();
    for a in 0..0x40u32 {
        r.wr(EERD, a << eerd::ADDR_SHIFT | eerd::START);
        let v = r.rd(EERD);
        assert_ne!(v & eerd::DONE, 0);
        let w = (v >> eerd::DATA_SHIFT) as u16;
        sum = sum.wrapping_add(w);
        words.push(w);
    }
    assert_eq!(&words[..3], &[0x1b00, 0xaa21, 0xccbb]);
    assert_eq!(sum, 0xBABA, "IGC_NVM_SUM");
}

// --- Interrupts (§6) ---

#[test]
fn legacy_icr_read_auto_masks_iam_and_drops_the_intx_level() {
    let mut r = Rig::new();
    // igc_irq_enable outside MSI-X: IMS and IAM = the same causes.
    let causes = IntCause::LSC.bits() | IntCause::RXT0.bits() | IntCause::TS.bits();
    r.wr(IMS, causes);
    r.wr(IAM, causes);
    assert!(!r.dev.intx_level());
    r.wr(ICS, IntCause::LSC.bits());
    assert!(r.dev.intx_level(), "level while ICR & IMS");
    assert_eq!(
        r.rd(ICR),
        IntCause::LSC.bits() | IntCause::INT_ASSERTED.bits()
    );
    assert!(!r.dev.intx_level(), "ICR read cleared the cause");
    assert_eq!(r.rd(IMS), 0, "IAM auto-masked IMS on the asserted read");
    r.wr(ICS, IntCause::RXT0.bits());
    assert!(!r.dev.intx_level(), "masked until the driver re-enables");
    r.wr(IMS, causes);
    assert!(r.dev.intx_level());
    // A read without INT_ASSERTED (only a masked cause pending) does not auto-mask.
    let _ = r.rd(ICR);
    r.wr(IMS, IntCause::LSC.bits());
    r.wr(ICS, IntCause::TS.bits());
    assert_eq!(
        r.rd(ICR),
        IntCause::TS.bits(),
        "pending but not enabled: no INT_ASSERTED"
    );
    assert_eq!(r.rd(IMS), IntCause::LSC.bits());
    // MSI-X mode has no INTx level.
    r.msix_setup();
    r.wr(ICS, IntCause::LSC.bits());
    assert!(!r.dev.intx_level());
}

#[test]
fn icr_is_read_to_clear_and_write_1_to_clear() {
    let mut r = Rig::new();
    r.wr(ICS, IntCause::LSC.bits() | IntCause::DOUTSYNC.bits());
    assert_eq!(r.rd(ICR), IntCause::LSC.bits() | IntCause::DOUTSYNC.bits());
    assert_eq!(r.rd(ICR), 0, "read cleared it");
    r.wr(ICS, IntCause::LSC.bits() | IntCause::DOUTSYNC.bits());
    r.wr(ICR, IntCause::LSC.bits());
    assert_eq!(
        r.dev.peek(ICR),
        IntCause::DOUTSYNC.bits(),
        "W1C cleared only LSC"
    );
    r.wr(IMS, IntCause::DOUTSYNC.bits());
    assert_eq!(r.rd(IMS), IntCause::DOUTSYNC.bits(), "IMS reads the mask");
    assert_eq!(
        r.rd(ICR),
        IntCause::DOUTSYNC.bits() | IntCause::INT_ASSERTED.bits()
    );
    r.wr(IMC, IntCause::DOUTSYNC.bits());
    assert_eq!(r.rd(IMS), 0);
}

#[test]
fn tsicr_is_read_to_clear_and_write_1_to_clear() {
    let mut r = Rig::new();
    r.dev
        .raise_tsicr(TsCause::TXTS | TsCause::SYS_WRAP, &mut r.host);
    assert_eq!(r.rd(TSICR), TsCause::TXTS.bits() | TsCause::SYS_WRAP.bits());
    assert_eq!(r.rd(TSICR), 0);
    r.dev
        .raise_tsicr(TsCause::TXTS | TsCause::SYS_WRAP, &mut r.host);
    r.wr(TSICR, TsCause::TXTS.bits());
    assert_eq!(r.rd(TSICR), TsCause::SYS_WRAP.bits());
}

#[test]
fn tsicr_cause_fires_the_ivar_misc_vector() {
    let mut r = Rig::new();
    let other = 2;
    r.msix_setup();
    r.wr(IVAR_MISC, (other | IVAR_VALID) << 8);
    r.wr(EIAC, 1 << other);
    r.wr(EIAM, 1 << other);
    r.wr(EIMS, 1 << other);
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert_eq!(r.host.take(), vec![other as u16]);
    assert_eq!(r.dev.msix_raised(other as u16), 1);
    // EIAC auto-cleared EICR, EIAM auto-masked the vector until the handler re-arms it.
    assert_eq!(r.dev.peek(EICR) & (1 << other), 0);
    assert_eq!(r.dev.peek(EIMS) & (1 << other), 0);
    // The handler (§6): ICR, then TSICR, then EIMS = other.
    assert_eq!(
        r.rd(ICR),
        IntCause::TS.bits() | IntCause::INT_ASSERTED.bits()
    );
    assert_eq!(r.rd(TSICR), TsCause::TXTS.bits());
    r.wr(EIMS, 1 << other);
    assert!(
        r.host.raised.is_empty(),
        "nothing pending: re-arming is silent"
    );
    // The next stamp interrupts again.
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert_eq!(r.host.take(), vec![other as u16]);
}

#[test]
fn uncleared_tsicr_blocks_a_new_ts_interrupt() {
    let mut r = Rig::new();
    r.msix_setup();
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert_eq!(r.host.take(), vec![OTHER as u16]);
    assert_eq!(
        r.rd(ICR),
        IntCause::TS.bits() | IntCause::INT_ASSERTED.bits()
    );
    r.wr(EIMS, 1 << OTHER);
    // TSICR not read yet: another cause does not raise ICR.TS again (§2.4).
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert_eq!(r.rd(ICR), 0);
    assert!(r.host.raised.is_empty());
    assert_eq!(
        r.rd(TSICR),
        TsCause::TXTS.bits(),
        "both events read out at once"
    );
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert_eq!(r.host.take(), vec![OTHER as u16]);
}

#[test]
fn masked_tsim_ims_or_eims_means_no_interrupt() {
    // TSIM clear: TSICR latches the cause, ICR.TS stays clear.
    let mut r = Rig::new();
    r.msix_setup();
    r.wr(TSIM, 0);
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert!(r.host.raised.is_empty());
    assert_eq!(r.dev.peek(ICR), 0);
    assert_eq!(r.dev.peek(TSICR), TsCause::TXTS.bits());
    // Enabling TSIM with the cause pending raises it then.
    r.wr(TSIM, TsCause::TXTS.bits());
    assert_eq!(r.host.take(), vec![OTHER as u16]);

    // IMS.TS clear: ICR.TS pending but no message; unmasking delivers it.
    let mut r = Rig::new();
    r.msix_setup();
    r.wr(IMC, IntCause::TS.bits());
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert!(r.host.raised.is_empty());
    assert_eq!(r.dev.peek(ICR), IntCause::TS.bits());
    r.wr(IMS, IntCause::TS.bits());
    assert_eq!(r.host.take(), vec![OTHER as u16]);

    // EIMS clear: EICR holds the vector's bit; re-arming EIMS raises it.
    let mut r = Rig::new();
    r.msix_setup();
    r.wr(EIMC, 1 << OTHER);
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert!(r.host.raised.is_empty());
    assert_eq!(r.dev.peek(EICR), 1 << OTHER);
    r.wr(EIMS, 1 << OTHER);
    assert_eq!(r.host.take(), vec![OTHER as u16]);
    assert_eq!(r.dev.peek(EICR), 0, "EIAC auto-cleared on the message");

    // No valid IVAR_MISC entry: nowhere to route.
    let mut r = Rig::new();
    r.msix_setup();
    r.wr(IVAR_MISC, 0);
    r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
    assert!(r.host.raised.is_empty());
}

#[test]
fn icr_read_clears_the_eicr_other_bit() {
    let mut r = Rig::new();
    r.msix_setup();
    r.wr(EIAC, 0);
    r.wr(EIMC, 1 << OTHER);
    r.wr(ICS, IntCause::LSC.bits());
    assert_eq!(r.dev.peek(EICR), 1 << OTHER);
    assert_eq!(
        r.rd(ICR),
        IntCause::LSC.bits() | IntCause::INT_ASSERTED.bits()
    );
    assert_eq!(r.dev.peek(EICR), 0);
    r.wr(EIMS, 1 << OTHER);
    assert!(
        r.host.raised.is_empty(),
        "the cause was consumed by the ICR read"
    );
}

#[test]
fn eics_and_eicr_without_auto_clear() {
    let mut r = Rig::new();
    r.msix_setup();
    r.wr(EIAC, 0);
    r.wr(EIAM, 0);
    r.wr(EIMS, 0b110);
    r.wr(EICS, 0b110);
    assert_eq!(r.host.take(), vec![1, 2]);
    assert_eq!(r.rd(EICR), 0b110, "no EIAC: bits stay until read");
    assert_eq!(r.rd(EICR), 0, "read-to-clear");
    r.wr(EICS, 0b100);
    r.wr(EICR, 0b100);
    assert_eq!(r.dev.peek(EICR), 0, "write-1-to-clear");
    assert_eq!(r.dev.peek(EIMS), 0b111, "no EIAM: vectors stay armed");
}

#[test]
fn lsc_routes_like_ts_and_non_msix_mode_uses_vector_0() {
    let mut r = Rig::new();
    r.msix_setup();
    r.wr(IVAR_MISC, (4 | IVAR_VALID) << 8);
    r.wr(EIMS, 1 << 4);
    r.wr(CTRL, Ctrl::SLU.bits());
    assert_eq!(r.host.take(), vec![4]);

    let mut r = Rig::new();
    r.wr(IMS, IntCause::LSC.bits());
    r.wr(CTRL, Ctrl::SLU.bits());
    assert_eq!(r.host.take(), vec![0], "MSI: one message on vector 0");
}

// --- Counters ---

#[test]
fn read_and_write_counters_count_exactly() {
    let mut r = Rig::new();
    for _ in 0..3 {
        r.systim();
    }
    r.wr(TIMINCA, 1);
    r.wr(TIMINCA, 2);
    let _ = r.dev.read32(3, 0, &mut r.host);
    assert_eq!(r.dev.reads(SYSTIML), 3);
    assert_eq!(r.dev.reads(SYSTIMH), 3);
    assert_eq!(r.dev.writes(TIMINCA), 2);
    assert_eq!(r.dev.reads(TIMINCA), 0);
    assert_eq!(r.dev.reads(SYSTIML + 1), 0, "unaligned query");
    assert_eq!(r.dev.reads(u32::MAX - 3), 0, "out of range query");
    assert_eq!(r.dev.total_reads(), 7, "BAR0 and BAR3");
    assert_eq!(r.dev.total_writes(), 2);
    let _ = r.dev.peek(SYSTIML);
    assert_eq!(r.dev.reads(SYSTIML), 3, "peek is not an access");
    r.dev.reset_counters();
    assert_eq!((r.dev.reads(SYSTIML), r.dev.total_reads()), (0, 0));
}

// --- Through the emulated PCI backend ---

#[test]
fn plugs_into_the_emulated_pci_backend() {
    use ptp_pci::{IrqVector, IrqWait, Mmio, PciFunction};

    let clock = VirtualClock::new(0);
    let mut cfg = I225Config::i226(clock.source());
    cfg.initial_systim_ns = 12 * S;
    let mut f = ptp_pci::emulated::EmuFunction::new(I225::new(cfg), "i226#0");
    assert_eq!(f.ids().device, ids::EMU_I226);
    let bar = f.map_bar(0).expect("BAR0");
    let _msix_bar = f.map_bar(3).expect("BAR3");
    let vectors = f.alloc_vectors(5).expect("vectors");

    clock.advance(S / 4);
    let l = bar.read32(SYSTIML);
    let h = bar.read32(SYSTIMH);
    assert_eq!((h, l), (12, 250_000_000));

    bar.write32(
        GPIE,
        gpie::MSIX_MODE | gpie::PBA | gpie::EIAME | gpie::NSICR,
    );
    bar.write32(IVAR_MISC, (1 | IVAR_VALID) << 8);
    bar.write32(EIAC, 1 << 1);
    bar.write32(EIAM, 1 << 1);
    bar.write32(EIMS, 1 << 1);
    bar.write32(IMS, IntCause::TS.bits() | IntCause::LSC.bits());
    bar.write32(ICS, IntCause::TS.bits());
    assert_eq!(vectors[1].wait(Duration::from_secs(5)), IrqWait::Fired);
    assert_eq!(vectors[0].wait(Duration::ZERO), IrqWait::TimedOut);
    assert_eq!(
        bar.read32(ICR),
        IntCause::TS.bits() | IntCause::INT_ASSERTED.bits()
    );
    bar.write32(EIMS, 1 << 1);
    bar.write32(CTRL, Ctrl::SLU.bits());
    assert_eq!(vectors[1].wait(Duration::from_secs(5)), IrqWait::Fired);
    assert_ne!(bar.read32(STATUS) & Status::LU.bits(), 0);
    assert_eq!(f.poll(), None);
    assert_eq!(
        f.with_device(|d| (d.reads(SYSTIML), d.msix_raised(1))),
        (1, 2)
    );
}

#[test]
fn timer_writes_do_not_wake_the_model_thread_and_ring_tails_do() {
    let rig = Rig::new();
    for off in [SYSTIML, SYSTIMH, TIMINCA, TIMADJ] {
        assert!(!rig.dev.write_wakes_model(0, off), "{off:#x}");
    }
    // Nor do the interrupt registers, which a driver writes on every interrupt: they take
    // effect, messages included, inside the write.
    for off in [
        ICR, ICS, IMS, IMC, IAM, GPIE, EICS, EIMS, EIMC, EIAC, EIAM, EICR, IVAR_MISC, TSICR,
    ] {
        assert!(!rig.dev.write_wakes_model(0, off), "{off:#x}");
    }
    // Writes that give the engines work must still wake the model thread; so must those that
    // start a pin's target, clock or SYS_WRAP, whose instant the thread waits for.
    for off in [
        tdt(0),
        rdt(0),
        CTRL,
        TCTL,
        RCTL,
        TSYNCTXCTL,
        TSAUXC,
        TSIM,
        TRGTTIMH0,
        FREQOUT1,
    ] {
        assert!(rig.dev.write_wakes_model(0, off), "{off:#x}");
    }
    // The MSI-X table BAR shares no offsets with the timer.
    assert!(rig.dev.write_wakes_model(3, SYSTIMH));
}

// --- Unimplemented offsets ---

#[test]
fn unimplemented_offsets_are_counted_per_offset() {
    let mut r = Rig::new();
    // Registers Linux igc touches at probe: implemented, not recorded.
    for off in [
        EECD,
        STATUS,
        MANC,
        SWSM,
        SW_FW_SYNC,
        PHPM,
        CTRL,
        MDIC,
        IAM,
        IMC,
        RCTL,
        TCTL,
        ICR,
        ral(0),
        rah(15),
        RXPBS,
        0x3404,
        MTA + 0x1FC,
        0x4000,
        0x4138,
        TSAUXC,
        TSYNCRXCFG,
        srrctl(3),
        txdctl(3),
        IVAR0,
        CTRL_EXT,
    ] {
        assert!(I225::implements(off), "{off:#x}");
        let _ = r.rd(off);
    }
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
    // Two reads and a write of one unknown offset, one write of another.
    let _ = r.rd(0x0E08);
    let _ = r.rd(0x0E08);
    r.wr(0x0E08, 1);
    r.wr(0x1_FFF0, 7);
    assert_eq!(
        r.dev.unimplemented_accesses(),
        vec![
            UnimplementedAccess {
                offset: 0x0E08,
                reads: 2,
                writes: 1
            },
            UnimplementedAccess {
                offset: 0x1_FFF0,
                reads: 0,
                writes: 1
            },
        ]
    );
    assert_eq!(r.rd(0x0E08), 1, "still storage");
    // Port resets and counter resets keep the record; clearing it empties it.
    r.wr(CTRL, Ctrl::RST.bits());
    r.dev.reset_counters();
    assert_eq!(r.dev.unimplemented_accesses().len(), 2);
    r.dev.clear_unimplemented_accesses();
    assert!(r.dev.unimplemented_accesses().is_empty());
}

/// Linux 6.1 igc's probe and open, in the order qemu-proxy.md lists its first register
/// touches, with the waits igc bounds (semaphores, PHY reset, auto-read): every wait ends at
/// once, the PHY and link read as igc expects, and nothing touched is unimplemented.
#[test]
fn linux_probe_and_open_touch_only_implemented_registers() {
    let mut r = Rig::new();
    let bounded =
        |r: &mut Rig, off: u32, done: &dyn Fn(u32) -> bool| (0..10).any(|_| done(r.rd(off)));
    // igc_get_invariants_base / igc_init_nvm_params_i225: flash → the flash NVM ops.
    assert_ne!(r.rd(EECD) & Eecd::FLASH_DETECTED.bits(), 0);
    let _ = (r.rd(STATUS), r.rd(MANC));
    // igc_acquire_swfw_sync_i225 → igc_get_hw_semaphore_i225.
    assert!(bounded(&mut r, SWSM, &|v| v & swsm::SMBI == 0));
    let v = r.rd(SWSM);
    r.wr(SWSM, v | swsm::SWESMBI);
    assert_ne!(r.rd(SWSM) & swsm::SWESMBI, 0);
    let sync = r.rd(SW_FW_SYNC);
    r.wr(SW_FW_SYNC, sync | 0x2);
    r.wr(SWSM, 0);
    // igc_phy_hw_reset: PHY_RST pulse, then PHPM.RST_COMP.
    let _ = r.rd(PHPM);
    let c = r.rd(CTRL);
    r.wr(CTRL, c | Ctrl::PHY_RST.bits());
    r.wr(CTRL, c);
    assert!(bounded(&mut r, PHPM, &|v| v & phpm::RST_COMP != 0));
    let id = (phy_rd(&mut r, 2) as u32) << 16 | phy_rd(&mut r, 3) as u32;
    assert_eq!(id, I225_I_PHY_ID);
    // igc_reset_hw_base.
    r.wr(IAM, 0);
    r.wr(IMC, !0);
    r.wr(RCTL, 0);
    r.wr(TCTL, tctl::PSP);
    let _ = r.rd(STATUS);
    let c = r.rd(CTRL);
    r.wr(CTRL, c | Ctrl::RST.bits());
    assert!(bounded(&mut r, EECD, &|v| v & Eecd::AUTO_RD.bits() != 0));
    r.wr(IMC, !0);
    let _ = r.rd(ICR);
    // MAC, packet buffers, MTA, flow control, statistics (igc_clear_hw_cntrs_base).
    assert_ne!(r.rd(rah(0)) & rah::AV, 0);
    let _ = r.rd(ral(0));
    r.wr(RXPBS, 0xA2);
    r.wr(0x3404, 0x0410_0020);
    for n in 0..128 {
        r.wr(MTA + 4 * n, 0);
    }
    for off in [0x28, 0x2C, 0x30, 0x170, 0x2160, 0x2168] {
        r.wr(off, 0);
    }
    for off in (0x4000..=0x4138).step_by(4) {
        let _ = r.rd(off);
    }
    // igc_ptp_reset (i225), TSN defaults, EEE, LTR.
    for (off, v) in [
        (TSAUXC, 0),
        (TSSDP, 0),
        (TSIM, TsCause::TXTS.bits()),
        (IMS, IntCause::TS.bits()),
    ] {
        r.wr(off, v);
    }
    let _ = (r.rd(0xB6F8), r.rd(SYSTIML), r.rd(SYSTIMH));
    r.wr(TIMINCA, 0);
    for off in [
        0x3570, 0x3344, 0x3324, 0x3334, 0x355C, 0x0E38, 0x0E30, 0x01A0, 0x5BB0,
    ] {
        let v = r.rd(off);
        r.wr(off, v);
    }
    // Open: driver loaded, link (autonegotiation through MDIC and MMD 7.32).
    r.wr(CTRL_EXT, ctrl_ext::DRV_LOAD);
    r.wr(CTRL, Ctrl::SLU.bits());
    phy_wr(&mut r, 4, 0x0DE1);
    phy_wr(&mut r, 9, 0x0200);
    xmdio(&mut r, 7, 0x20, Some(0x0080));
    phy_wr(&mut r, 0, 0x1200);
    assert_ne!(phy_rd(&mut r, 1) & 0x24, 0, "link and AN complete");
    assert_ne!(phy_rd(&mut r, 10) & 1 << 12, 0, "remote receiver OK");
    assert_eq!(linux_speed(r.rd(STATUS)), 2500);
    // Rings, RSS, checksum, vectors, interrupts.
    for q in 0..4 {
        for off in [
            rdbal(q),
            rdbah(q),
            rdlen(q),
            srrctl(q),
            rdh(q),
            rdt(q),
            rxdctl(q),
        ] {
            r.wr(off, 0);
        }
        for off in [tdbal(q), tdbah(q), tdlen(q), tdh(q), tdt(q), txdctl(q)] {
            r.wr(off, 0);
        }
    }
    for off in [0x5818, 0x5C00, 0x5C80, 0x5000, 0x5004, IVAR0, eitr(0)] {
        r.wr(off, 0);
    }
    r.wr(
        IMS,
        IntCause::LSC.bits() | IntCause::RXT0.bits() | IntCause::TXDW.bits(),
    );
    r.wr(
        IAM,
        IntCause::LSC.bits() | IntCause::RXT0.bits() | IntCause::TXDW.bits(),
    );
    assert_eq!(r.dev.unimplemented_accesses(), vec![]);
}
