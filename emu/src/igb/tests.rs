//! Behaviour tests of the igb models' registers and clocks, written from intel-timesync.md and
//! Linux igb's facts (not from a driver). Deterministic: true time is a [`VirtualClock`].

use super::*;
use crate::clock::VirtualClock;
use crate::host::RecordingHost;
use crate::phc::{NS_PER_S, WrapExtender};

const S: u64 = NS_PER_S;

pub(super) struct Regs {
    pub(super) clock: VirtualClock,
    pub(super) dev: Igb,
    pub(super) host: RecordingHost,
}

impl Regs {
    pub(super) fn new(part: IgbPart) -> Self {
        Self::with(part, |_| {})
    }

    pub(super) fn with(part: IgbPart, f: impl FnOnce(&mut IgbConfig)) -> Self {
        let clock = VirtualClock::new(5_000);
        let mut cfg = IgbConfig::new(part, clock.source());
        f(&mut cfg);
        let dev = Igb::new(cfg).expect("valid config");
        Self {
            clock,
            dev,
            host: RecordingHost::new(),
        }
    }

    pub(super) fn rd(&mut self, off: u32) -> u32 {
        self.dev.read32(0, off, &mut self.host)
    }

    pub(super) fn wr(&mut self, off: u32, v: u32) {
        self.dev.write32(0, off, v, &mut self.host);
    }

    /// A driver's clock read: SYSTIMR (where it latches), SYSTIML, SYSTIMH; the raw value.
    pub(super) fn systim(&mut self) -> u64 {
        if self.dev.part().latches_on_systimr() {
            self.rd(SYSTIMR);
        }
        let l = self.rd(SYSTIML);
        (self.rd(SYSTIMH) as u64) << 32 | l as u64
    }

    /// Starts SYSTIM the way Linux's PTP reset does: TSAUXC = 0; the 82576's nominal TIMINCA.
    pub(super) fn start_clock(&mut self) {
        match self.dev.part() {
            IgbPart::E82576 => self.wr(TIMINCA, timinca::INCPERIOD_82576 | timinca::INCVALUE_82576),
            _ => self.wr(TSAUXC, 0),
        }
    }
}

/// Linux igb_ptp_adjfine_82580 (§4): TIMINCA for `ppb` on i210/i350.
fn timinca_i210(ppb: i64) -> u32 {
    let scaled_ppm = ppb.unsigned_abs() * 65536 / 1000;
    let rate = ((scaled_ppm << 13) / 15625) as u32;
    (rate & timinca::INCVALUE_MASK) | if ppb < 0 { timinca::ISGN } else { 0 }
}

/// Linux igb_ptp_adjfreq_82576 (§4): IncValue = 16<<19 ± (|ppb|<<14)/1953125.
fn timinca_82576(ppb: i64) -> u32 {
    let corr = ((ppb.unsigned_abs() << 14) / 1_953_125) as u32;
    let inc = if ppb < 0 {
        timinca::INCVALUE_82576 - corr
    } else {
        timinca::INCVALUE_82576 + corr
    };
    timinca::INCPERIOD_82576 | inc
}

// --- Identity ---

#[test]
fn parts_ids_bars_and_vectors() {
    for part in IgbPart::ALL {
        let r = Regs::new(part);
        let ids = r.dev.ids();
        assert_eq!((ids.vendor, ids.device), (0x8086, part.default_device_id()));
        assert_eq!(IgbPart::from_name(part.name()), Some(part));
        assert_eq!(r.dev.bar_len(0), Some(128 * 1024));
        assert_eq!(r.dev.bar_len(3), Some(16 * 1024));
        assert_eq!(r.dev.msix_vectors(), part.msix_vectors());
        let family = ids::igb_part(0x8086, ids.device).map(|p| p.family);
        assert_eq!(family, Some(part.family()), "{part:?}");
    }
    let clock = VirtualClock::new(0);
    assert_eq!(
        Igb::emulate("i211", clock.source()).unwrap().part_name(),
        "Intel i211 copper"
    );
    assert_eq!(
        Igb::emulate("e1000", clock.source()).unwrap_err(),
        IgbError::UnknownPart("e1000".into())
    );
    let mut cfg = IgbConfig::new(IgbPart::I350, clock.source());
    cfg.device_id = 0x1533;
    assert!(matches!(
        Igb::new(cfg.clone()),
        Err(IgbError::WrongDeviceId { device: 0x1533, .. })
    ));
    cfg.device_id = 0x1F45;
    assert!(
        Igb::new(cfg.clone()).is_ok(),
        "an i354 ID is of the i350 family"
    );
    cfg.link_speed = LinkSpeed::Mbps2500;
    assert_eq!(Igb::new(cfg).unwrap_err(), IgbError::LinkSpeed(2500));
}

#[test]
fn power_on_mac_nvm_and_phy() {
    for part in IgbPart::ALL {
        let mut r = Regs::with(part, |c| c.mac = [0x00, 0x1b, 0x21, 0xaa, 0xbb, 0xcc]);
        assert_eq!(r.rd(0x5400), 0xaa21_1b00, "RAL0");
        assert_eq!(r.rd(0x5404), 0xccbb | 1 << 31, "RAH0 with AV");
        // NVM word 1 through the family's EERD (START, then DONE with the data).
        let eerd = part.eerd();
        r.wr(eerd, 1 << 2 | 1);
        let v = r.rd(eerd);
        assert_eq!((v & 2, v >> 16), (2, 0xaa21), "{part:?} EERD");
        // PHY ID through MDIC (read opcode b27, register 2 at b20:16).
        r.wr(MDIC, 1 << 27 | 2 << 16);
        assert_eq!(r.rd(MDIC) & 0xFFFF, part.phy_id() >> 16, "{part:?} PHYSID1");
        r.wr(CTRL, Ctrl::SLU.bits());
        assert_ne!(r.rd(STATUS) & Status::LU.bits(), 0);
        assert_ne!(r.rd(STATUS) & Status::SPEED_1000.bits(), 0);
    }
}

#[test]
fn icr_at_the_e1000_offset_with_msi_x_routing() {
    let mut r = Regs::new(IgbPart::I210);
    r.wr(
        GPIE,
        gpie::MSIX_MODE | gpie::EIAME | gpie::NSICR | gpie::PBA,
    );
    r.wr(IVAR_MISC, (IVAR_VALID) << 8);
    r.wr(EIAC, 1);
    r.wr(EIMS, 1);
    r.wr(IMS, IntCause::LSC.bits());
    r.wr(CTRL, Ctrl::SLU.bits());
    assert_eq!(r.host.take(), vec![0], "LSC on the other vector");
    assert_eq!(r.rd(ICR) & IntCause::LSC.bits(), IntCause::LSC.bits());
    assert_eq!(r.rd(ICR), 0, "ICR reads clear");
    assert_eq!(r.rd(0x1500), 0, "igc's ICR offset is plain storage here");
}

// --- Clocks and latching (§3) ---

#[test]
fn i210_systim_stands_until_tsauxc_is_cleared_and_latches_on_systimr() {
    let mut r = Regs::with(IgbPart::I210, |c| c.initial_systim_ns = 7 * S + 5);
    r.clock.advance(S);
    assert_eq!(
        r.systim(),
        7 << 32 | 5,
        "DISABLE0 at power-on: SYSTIM stands"
    );
    r.start_clock();
    r.clock.advance(2 * S + 10);
    assert_eq!(
        r.rd(SYSTIMR),
        0,
        "whole ns: no sub-ns residue at nominal rate"
    );
    r.clock.advance(S + 100);
    // SYSTIML/H return the SYSTIMR sample, not the time of their own read.
    let l = r.rd(SYSTIML);
    assert_eq!((r.rd(SYSTIMH), l), (9, 15));
    assert_eq!(r.systim(), 10 << 32 | 115);
}

#[test]
fn i350_counts_40_bit_ns_and_wraps() {
    let mut r = Regs::new(IgbPart::I350);
    r.start_clock();
    let top = 1u64 << 40;
    // Settime: SYSTIML then SYSTIMH (b7:0; higher bits are not part of the counter).
    r.wr(SYSTIML, (top - 1000) as u32);
    r.wr(SYSTIMH, 0xABCD_0000 | ((top - 1000) >> 32) as u32);
    assert_eq!(r.systim(), top - 1000);
    let law = r.dev.phc_law();
    assert!(
        crate::phc::PhcLaw::from_parts(law.parts()).is_some(),
        "the law stays in the 40-bit range the truth record accepts"
    );
    r.clock.advance(999);
    assert_eq!(r.systim(), top - 1);
    r.clock.advance(1);
    assert_eq!(r.systim(), 0, "wraps at 2^40 ns");
    assert_eq!(r.dev.phc_now_ns(), 0);
}

#[test]
fn e82576_counter_needs_timinca_latches_on_systiml_and_counts_ns_shl_19() {
    let mut r = Regs::new(IgbPart::E82576);
    r.clock.advance(S);
    assert_eq!(r.systim(), 0, "TIMINCA 0 at power-on: the counter stands");
    assert!(!r.dev.phc_running());
    r.start_clock();
    assert!(r.dev.phc_running());
    r.clock.advance(S);
    let l = r.rd(SYSTIML);
    r.clock.advance(S);
    let h = r.rd(SYSTIMH);
    assert_eq!(
        (h as u64) << 32 | l as u64,
        S << 19,
        "SYSTIMH from the SYSTIML read"
    );
    assert_eq!(r.dev.phc_now_ns(), 2 * S);
    assert_eq!(r.rd(SYSTIMR), 0, "no SYSTIMR latch on the 82576");
}

#[test]
fn e82576_cycle_counter_wraps_at_2_64_counts_and_extends_to_64_bit_ns() {
    let mut r = Regs::new(IgbPart::E82576);
    r.start_clock();
    // Count 2^64 − 1 s·2^19: one second before the wrap, in the count's own units.
    let start = u64::MAX - (S << 19) + 1;
    r.wr(SYSTIML, start as u32);
    r.wr(SYSTIMH, (start >> 32) as u32);
    assert_eq!(r.systim(), start);
    let wrap_ns = TimeFormat::E82576.wrap_ns();
    assert_eq!(wrap_ns, 1 << 45);
    let mut ext = WrapExtender::new(TimeFormat::E82576);
    let first = ext.extend(r.dev.phc_now_ns());
    assert_eq!(first, wrap_ns - S);
    let mut prev = first;
    for _ in 0..4 {
        r.clock.advance(S / 2);
        let e = ext.extend(r.dev.phc_now_ns());
        assert_eq!(
            e,
            prev + S / 2,
            "the extended view keeps counting through the wrap"
        );
        prev = e;
    }
    assert_eq!(r.systim(), S << 19, "the raw count wrapped to 1 s");
    assert_eq!(prev, wrap_ns + S);
}

#[test]
fn timinca_rates_per_family() {
    for (part, inca) in [
        (IgbPart::I210, timinca_i210(1000)),
        (IgbPart::I350, timinca_i210(-1000)),
        (IgbPart::E82576, timinca_82576(1000)),
        (IgbPart::E82576, timinca_82576(-1000)),
    ] {
        let mut r = Regs::new(part);
        r.start_clock();
        let t0 = r.dev.phc_now_ns();
        r.wr(TIMINCA, inca);
        r.clock.advance(10 * S);
        let got = r.dev.phc_now_ns() - t0;
        // Expected from §4 written out independently: i210/i350 add INCVALUE·2^-32 ns per
        // 8 ns; the 82576 adds IncValue counts (2^-19 ns) per 16 ns.
        let want = match part {
            IgbPart::E82576 => ((10 * S as u128 * (inca & 0xFF_FFFF) as u128 / 16) >> 19) as u64,
            _ => {
                let corr = (10 * S as u128 / 8 * (inca & 0x7FFF_FFFF) as u128) >> 32;
                if inca & timinca::ISGN != 0 {
                    10 * S - corr as u64
                } else {
                    10 * S + corr as u64
                }
            }
        };
        assert!(
            got.abs_diff(want) <= 1,
            "{part:?} {inca:#x}: {got} vs {want}"
        );
        // The frequency step each format can express: 2^-32 ns per 8 ns (~0.03 ppb) on
        // i210/i350, one count in 2^23 per 16 ns (~119 ppb) on the 82576 — Linux's +1000 ppb
        // becomes IncValue + 8, i.e. +953 ppb.
        let ppb = (got as i64 - 10 * S as i64) / 10;
        let want_ppb = if part == IgbPart::E82576 { 953 } else { 1000 };
        assert!((ppb.abs() - want_ppb).abs() <= 1, "{part:?}: {ppb} ppb");
    }
}

#[test]
fn settime_and_timadj_per_family() {
    let mut r = Regs::new(IgbPart::I210);
    r.start_clock();
    r.wr(SYSTIML, 999_999_000);
    r.wr(SYSTIMH, 1_700_000_000);
    assert_eq!(r.systim(), 1_700_000_000 << 32 | 999_999_000);
    // TIMADJ: +1 s + 1500 ns, then −2000 ns (sign b31).
    r.wr(TIMADJL, 1500);
    r.wr(TIMADJH, 1);
    assert_eq!(r.systim(), 1_700_000_002 << 32 | 500);
    r.wr(TIMADJL, 2000);
    r.wr(TIMADJH, 1 << 31);
    assert_eq!(r.systim(), 1_700_000_001 << 32 | 999_998_500);

    let mut c = Regs::new(IgbPart::E82576);
    c.start_clock();
    c.wr(TIMADJL, 1 << 19);
    c.wr(TIMADJH, 0);
    assert_eq!(c.systim(), 1 << 19, "82576 TIMADJ is in counts");
    assert_eq!(c.dev.phc_now_ns(), 1);
}

#[test]
fn truth_law_carries_the_family_format() {
    let mut r = Regs::with(IgbPart::I350, |c| c.osc_error_ppb = 250);
    r.start_clock();
    r.clock.advance(3 * S);
    let law = r.dev.phc_law();
    assert_eq!(law.format(), TimeFormat::I350);
    let back = crate::phc::PhcLaw::from_parts(law.parts()).unwrap();
    let t = r.clock.now();
    assert_eq!(back.ns_at(t), r.dev.phc_now_ns());
    assert_eq!(back.raw_at(t), r.dev.phc_raw());
    assert_eq!(r.dev.phc_now_ns(), 3 * S + 750);
}

// --- Interrupts of the time-sync block ---

#[test]
fn tsicr_raises_icr_ts_on_i210_but_the_82576_has_none() {
    for part in [IgbPart::I210, IgbPart::I350, IgbPart::E82576] {
        let mut r = Regs::new(part);
        r.wr(IMS, IntCause::TS.bits());
        r.wr(TSIM, TsCause::TXTS.bits());
        r.dev.raise_tsicr(TsCause::TXTS, &mut r.host);
        let fired = r.host.take();
        if part.has_ts_interrupt() {
            assert_eq!(fired, vec![0], "{part:?}: legacy/MSI message");
            assert_eq!(r.rd(ICR) & IntCause::TS.bits(), IntCause::TS.bits());
            assert_eq!(r.rd(TSICR), TsCause::TXTS.bits());
            assert_eq!(r.rd(TSICR), 0, "TSICR reads clear");
        } else {
            assert!(fired.is_empty(), "82576: no time-sync interrupt");
            assert_eq!(r.rd(ICR), 0);
            assert_eq!(r.rd(TSICR), 0, "storage only: nothing set it");
        }
    }
}

// --- Unimplemented offsets ---

#[test]
fn unimplemented_offsets_are_counted_per_part() {
    let mut r = Regs::new(IgbPart::E82576);
    r.wr(TSIM, 2);
    r.rd(TSIM);
    r.rd(TSIM);
    r.wr(0x5B00, 7);
    assert_eq!(r.rd(0x5B00), 7, "unmodelled offsets are storage");
    r.rd(STATUS);
    r.rd(RXSTMPH);
    let got: Vec<_> = r
        .dev
        .nic()
        .unimplemented_accesses()
        .iter()
        .map(|u| (u.offset, u.reads, u.writes))
        .collect();
    assert_eq!(got, vec![(0x5B00, 1, 1), (TSIM, 2, 1)]);
    assert!(Igb::implements(IgbPart::I210, TSIM));
    assert!(!Igb::implements(IgbPart::I210, 0x5B00), "GCR");
    assert!(Igb::implements(IgbPart::I350, 0xC000), "queue alias block");
    assert!(!Igb::implements(IgbPart::I350, SRRD_I210));

    let mut i = Regs::new(IgbPart::I210);
    i.wr(
        TSYNCRXCTL,
        TsyncRxCtl::ENABLED.bits() | (RxTsType::EventV2 as u32),
    );
    let got: Vec<_> = i.dev.nic().unimplemented_accesses();
    assert_eq!(
        got.len(),
        1,
        "a TYPE other than ALL is an unmodelled value on the i210"
    );
    assert_eq!((got[0].offset, got[0].writes), (TSYNCRXCTL, 1));
}

#[test]
fn queue_registers_alias_the_0xc000_block() {
    let mut r = Regs::new(IgbPart::I350);
    r.wr(0xC000 + 0x40 + 0x08, 0x400);
    assert_eq!(
        r.rd(rdlen(1)),
        0x400,
        "RDLEN(1) written through its 0xC000 alias"
    );
    r.wr(tdt(0), 5);
    assert_eq!(r.rd(0xE018), 5, "TDT(0) read through its 0xE000 alias");
}

#[test]
fn port_reset_keeps_the_clock_and_empties_the_stamp_pairs() {
    let mut r = Regs::new(IgbPart::I210);
    r.start_clock();
    r.clock.advance(S);
    r.wr(IMS, IntCause::LSC.bits());
    r.wr(CTRL, Ctrl::RST.bits() | Ctrl::SLU.bits());
    assert_eq!(r.dev.nic().port_resets(), 1);
    assert_eq!(r.rd(IMS), 0);
    assert_eq!(
        r.rd(CTRL) & Ctrl::SLU.bits(),
        0,
        "the reset write's other bits do not stick"
    );
    r.clock.advance(S);
    assert_eq!(r.systim(), 2 << 32, "SYSTIM ran through the reset");
}
