//! Two models on one cable (a socketpair wire): autonegotiation from both ends' offers, as
//! Linux's igc and igb drive the PHY (issue 24: the PHY ignored the advertisement and the two
//! ends of one cable could run at different speeds).

use intel_regs::e1000::mdic;
use intel_regs::igc::{CTRL, Ctrl, IntCause, MDIC, STATUS, Status};
use ptp_pci::emulated::Device;

use super::{LinkMode, LinkSpeed};
use crate::clock::VirtualClock;
use crate::host::RecordingHost;
use crate::igb::{Igb, IgbConfig, IgbPart};
use crate::igc::{I225, I225Config};
use crate::wire::{UnixDatagramWire, WirePort};

/// PHY registers (IEEE 802.3 clause 22) and the bits Linux's igc/igb write.
const BMCR: u32 = 0;
const BMSR: u32 = 1;
const ADVERTISE: u32 = 4;
const LPA: u32 = 5;
const CTRL1000: u32 = 9;
const STAT1000: u32 = 10;
const BMCR_RESET: u16 = 1 << 15;
const BMCR_SPEED100: u16 = 1 << 13;
const BMCR_ANENABLE: u16 = 1 << 12;
const BMCR_ANRESTART: u16 = 1 << 9;
const BMCR_FULLDPLX: u16 = 1 << 8;
/// NWAY_AR_* (igc_defines.h): 10 half/full, 100 half/full, PAUSE, ASM_DIR; selector 1.
const AR_10H: u16 = 0x0020;
const AR_100F: u16 = 0x0100;
const AR_PAUSE: u16 = 0x0C00;
const AR_SELECTOR: u16 = 0x0001;
/// CR_1000T_FD_CAPS; CR_2500T_FD_CAPS in MMD 7.32.
const CR_1000T_FD: u16 = 0x0200;
const CR_2500T_FD: u16 = 0x0080;

enum Model {
    Igc(I225),
    Igb(Igb),
}

/// One end: a model, its interrupt host and its family's ICR offset.
struct End {
    dev: Model,
    host: RecordingHost,
}

impl End {
    fn i225(clock: &VirtualClock) -> Self {
        Self {
            dev: Model::Igc(I225::new(I225Config::i225(clock.source()))),
            host: RecordingHost::new(),
        }
    }

    fn i210(clock: &VirtualClock) -> Self {
        let cfg = IgbConfig::new(IgbPart::I210, clock.source());
        Self {
            dev: Model::Igb(Igb::new(cfg).expect("valid config")),
            host: RecordingHost::new(),
        }
    }

    fn device(&mut self) -> &mut dyn Device {
        match &mut self.dev {
            Model::Igc(d) => d,
            Model::Igb(d) => d,
        }
    }

    fn attach(&mut self, w: UnixDatagramWire) {
        let w: Box<dyn WirePort> = Box::new(w);
        match &mut self.dev {
            Model::Igc(d) => d.attach_wire(w),
            Model::Igb(d) => d.nic_mut().attach_wire(w),
        };
    }

    fn icr_offset(&self) -> u32 {
        match self.dev {
            Model::Igc(_) => intel_regs::igc::ICR,
            Model::Igb(_) => intel_regs::igb::ICR,
        }
    }

    fn rd(&mut self, off: u32) -> u32 {
        let mut host = std::mem::take(&mut self.host);
        let v = self.device().read32(0, off, &mut host);
        self.host = host;
        v
    }

    fn wr(&mut self, off: u32, v: u32) {
        let mut host = std::mem::take(&mut self.host);
        self.device().write32(0, off, v, &mut host);
        self.host = host;
    }

    fn poll(&mut self) {
        let mut host = std::mem::take(&mut self.host);
        let _ = self.device().poll(&mut host);
        self.host = host;
    }

    /// ICR read-to-clear: whether LSC was pending.
    fn take_lsc(&mut self) -> bool {
        self.rd(self.icr_offset()) & IntCause::LSC.bits() != 0
    }

    fn phy_rd(&mut self, reg: u32) -> u16 {
        self.wr(
            MDIC,
            mdic::OP_READ | 1 << mdic::PHY_SHIFT | reg << mdic::REG_SHIFT,
        );
        let v = self.rd(MDIC);
        assert_ne!(v & mdic::READY, 0);
        v as u16
    }

    fn phy_wr(&mut self, reg: u32, v: u16) {
        let op = mdic::OP_WRITE | 1 << mdic::PHY_SHIFT | reg << mdic::REG_SHIFT;
        self.wr(MDIC, op | u32::from(v));
    }

    /// An MMD register write through 13/14 (Linux igc_phy.c __igc_access_xmdio_reg).
    fn mmd_wr(&mut self, dev: u16, addr: u16, v: u16) {
        self.phy_wr(13, dev);
        self.phy_wr(14, addr);
        self.phy_wr(13, 0x4000 | dev);
        self.phy_wr(14, v);
        self.phy_wr(13, 0);
    }

    fn mmd_rd(&mut self, dev: u16, addr: u16) -> u16 {
        self.phy_wr(13, dev);
        self.phy_wr(14, addr);
        self.phy_wr(13, 0x4000 | dev);
        let v = self.phy_rd(14);
        self.phy_wr(13, 0);
        v
    }

    /// Linux igc_phy_setup_autoneg + igc_copper_link_autoneg: the advertisement registers,
    /// then BMCR |= AUTO_NEG_EN | RESTART_AUTO_NEG.
    fn advertise(&mut self, adv: u16, ctrl1000: u16, mgbt: Option<u16>) {
        self.phy_wr(ADVERTISE, adv);
        self.phy_wr(CTRL1000, ctrl1000);
        if let Some(v) = mgbt {
            self.mmd_wr(7, 0x20, v);
        }
        let bmcr = self.phy_rd(BMCR);
        self.phy_wr(BMCR, bmcr | BMCR_ANENABLE | BMCR_ANRESTART);
    }

    fn link_up_slu(&mut self) {
        let c = self.rd(CTRL);
        self.wr(CTRL, c | Ctrl::SLU.bits());
    }

    fn mode(&self) -> Option<LinkMode> {
        match &self.dev {
            Model::Igc(d) => d.link_mode(),
            Model::Igb(d) => d.nic().link_mode(),
        }
    }

    fn changes(&self) -> u64 {
        match &self.dev {
            Model::Igc(d) => d.link_changes(),
            Model::Igb(d) => d.nic().link_changes(),
        }
    }

    /// STATUS as (LU, FD, Linux's speed decoding).
    fn status(&mut self) -> (bool, bool, u32) {
        let st = self.rd(STATUS);
        let speed = if st & Status::SPEED_1000.bits() != 0 {
            if st & Status::SPEED_2500.bits() != 0 {
                2500
            } else {
                1000
            }
        } else if st & Status::SPEED_100.bits() != 0 {
            100
        } else {
            10
        };
        (
            st & Status::LU.bits() != 0,
            st & Status::FD.bits() != 0,
            speed,
        )
    }
}

/// Two ends on one socketpair cable, links set up (SLU) and negotiated.
fn cable(mut a: End, mut b: End) -> (End, End) {
    let (wa, wb) = UnixDatagramWire::pair().unwrap();
    a.attach(wa);
    b.attach(wb);
    a.link_up_slu();
    b.link_up_slu();
    settle(&mut a, &mut b);
    (a, b)
}

/// Lets both ends exchange offers: a poll each reads the other's offer, a second applies it.
fn settle(a: &mut End, b: &mut End) {
    for _ in 0..3 {
        a.poll();
        b.poll();
    }
}

const fn mode(speed: LinkSpeed, full_duplex: bool) -> Option<LinkMode> {
    Some(LinkMode { speed, full_duplex })
}

#[test]
fn an_end_advertising_only_100_full_brings_both_ends_to_100_full() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i225(&clock), End::i225(&clock));
    assert_eq!(a.status(), (true, true, 2500), "both advertise everything");
    assert_eq!(b.status(), (true, true, 2500));
    // `ethtool -s ethB advertise 0x008` (100baseT/Full): igc writes 4, 9 and MMD 7.32.
    b.advertise(AR_SELECTOR | AR_100F | AR_PAUSE, 0, Some(0));
    settle(&mut a, &mut b);
    for end in [&mut a, &mut b] {
        assert_eq!(end.status(), (true, true, 100));
        assert_eq!(end.mode(), mode(LinkSpeed::Mbps100, true));
    }
    // The partner ability registers show the other end's advertisement.
    assert_eq!(a.phy_rd(LPA), 0x4000 | AR_SELECTOR | AR_100F | AR_PAUSE);
    assert_eq!(
        a.phy_rd(STAT1000),
        0,
        "B does not advertise 1000; 100 has no receiver bits"
    );
    assert_eq!(a.mmd_rd(7, 0x21), 0, "B does not advertise 2.5G");
    assert_eq!(b.phy_rd(LPA), 0x41E1, "A's reset advertisement, with Ack");
    assert_eq!(
        b.phy_rd(STAT1000) & 0x0800,
        0x0800,
        "A advertises 1000 full"
    );
    assert_eq!(b.mmd_rd(7, 0x21) & 0x0020, 0x0020, "A advertises 2.5G");
}

#[test]
fn an_end_advertising_only_10_half_brings_both_ends_to_10_half() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i225(&clock), End::i225(&clock));
    a.advertise(AR_SELECTOR | AR_10H, 0, Some(0));
    settle(&mut a, &mut b);
    assert_eq!(
        a.status(),
        (true, false, 10),
        "half duplex: STATUS.FD clear"
    );
    assert_eq!(b.status(), (true, false, 10));
    // Nothing in common: no link at either end.
    b.advertise(AR_SELECTOR | AR_100F, 0, Some(0));
    settle(&mut a, &mut b);
    assert!(!a.status().0, "no link");
    assert!(!b.status().0, "no link");
    assert_eq!(a.phy_rd(BMSR) & 0x4, 0, "no PHY link either");
}

#[test]
fn both_ends_agree_when_one_is_limited_by_its_owner() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i225(&clock), End::i225(&clock));
    // The lab limits A's side to 1000 (`devhost --link-speed 1000`): B follows.
    let Model::Igc(d) = &mut a.dev else {
        unreachable!()
    };
    d.set_link_speed(LinkSpeed::Mbps1000, &mut a.host);
    settle(&mut a, &mut b);
    assert_eq!(a.status(), (true, true, 1000));
    assert_eq!(
        b.status(),
        (true, true, 1000),
        "the partner runs at A's speed"
    );
}

/// Linux igb's `ethtool -s eth0 speed 1000 duplex full autoneg off` is no forced mode:
/// igb_set_spd_dplx keeps autonegotiation on and advertises 1000 full only. Against an
/// autonegotiating i225 both ends come up at 1000 full.
#[test]
fn forced_1000_as_linux_does_it_meets_autoneg_at_1000_full() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i210(&clock), End::i225(&clock));
    assert_eq!(a.status(), (true, true, 1000), "the i210 tops out at 1000");
    assert_eq!(b.status(), (true, true, 1000));
    a.advertise(AR_SELECTOR | AR_PAUSE, CR_1000T_FD, None);
    settle(&mut a, &mut b);
    assert_eq!(a.mode(), mode(LinkSpeed::Mbps1000, true));
    assert_eq!(b.mode(), mode(LinkSpeed::Mbps1000, true));
    // The i225 sees a partner with 1000 full and no 10/100 ability.
    assert_eq!(b.phy_rd(LPA), 0x4000 | AR_SELECTOR | AR_PAUSE);
    assert_eq!(b.phy_rd(STAT1000), 0x3800);
}

/// A PHY forced to 1000 at the register level (BMCR AN off, speed 1000) finds no partner:
/// 1000BASE-T needs autonegotiation and parallel detection sees only 10/100.
#[test]
fn a_register_forced_1000_end_does_not_link_with_autoneg() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i225(&clock), End::i225(&clock));
    a.phy_wr(BMCR, 0x0140); // speed 1000, full duplex, AN off
    settle(&mut a, &mut b);
    assert!(!a.status().0, "no link");
    assert!(!b.status().0, "no link");
}

/// Linux igb's forced 100 full (igb_phy_force_speed_duplex_setup / _m88): CTRL.FRCSPD|FRCDPX
/// with SPEED_100|FD, BMCR = AN off | 100 | full, then a PHY soft reset to commit it. The
/// autonegotiating i225 finds it by parallel detection at 100 half duplex (IEEE 802.3
/// 28.2.3.1): speeds agree, duplex does not, as on real links.
#[test]
fn forced_100_full_meets_autoneg_by_parallel_detection() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i210(&clock), End::i225(&clock));
    let c = a.rd(CTRL);
    a.wr(
        CTRL,
        c | Ctrl::FRCSPD.bits() | Ctrl::FRCDPX.bits() | 1 << 8 | 1,
    );
    let bmcr = a.phy_rd(BMCR) & !(BMCR_ANENABLE | 1 << 6);
    a.phy_wr(BMCR, bmcr | BMCR_SPEED100 | BMCR_FULLDPLX);
    let bmcr = a.phy_rd(BMCR);
    a.phy_wr(BMCR, bmcr | BMCR_RESET);
    assert_eq!(
        a.phy_rd(BMCR) & BMCR_ANENABLE,
        0,
        "the soft reset kept AN off"
    );
    settle(&mut a, &mut b);
    assert_eq!(a.status(), (true, true, 100));
    assert_eq!(b.status(), (true, false, 100));
    assert_eq!(a.phy_rd(BMSR) & 0x24, 0x04, "link, but no autonegotiation");
    assert_eq!(b.phy_rd(BMSR) & 0x24, 0x24);
    assert_eq!(b.phy_rd(LPA), 0x0080, "100BASE-TX detected");
    assert_eq!(a.phy_rd(LPA), 0, "a forced PHY reads no partner page");
}

#[test]
fn an_advertisement_change_renegotiates_with_the_link_down_and_up_at_both_ends() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i225(&clock), End::i225(&clock));
    let _ = (a.take_lsc(), b.take_lsc());
    let (ca, cb) = (a.changes(), b.changes());
    // Written but not restarted: the advertisement waits for the next negotiation.
    a.phy_wr(CTRL1000, 0);
    a.mmd_wr(7, 0x20, 0);
    settle(&mut a, &mut b);
    assert_eq!((a.status().2, b.status().2), (2500, 2500));
    assert_eq!((a.changes(), b.changes()), (ca, cb));
    assert!(!a.take_lsc() && !b.take_lsc());
    // Restarted (igc_copper_link_autoneg): both links go down and come back at 100 full.
    let bmcr = a.phy_rd(BMCR);
    a.phy_wr(BMCR, bmcr | BMCR_ANRESTART);
    assert_eq!(a.changes(), ca + 2, "A: down and up");
    assert!(a.take_lsc());
    settle(&mut a, &mut b);
    assert_eq!(b.changes(), cb + 2, "B: down and up");
    assert!(b.take_lsc());
    assert_eq!(a.status(), (true, true, 100));
    assert_eq!(b.status(), (true, true, 100));
    // A restart with nothing changed still bounces the partner (a real link drops).
    let bmcr = b.phy_rd(BMCR);
    b.phy_wr(BMCR, bmcr | BMCR_ANRESTART);
    settle(&mut a, &mut b);
    assert_eq!((a.changes(), b.changes()), (ca + 4, cb + 4));
    assert_eq!(a.status(), (true, true, 100));
}

/// A model moved to another cable offers its advertisement on the new one too.
#[test]
fn a_new_wire_carries_the_offer_made_before_it() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i225(&clock), End::i225(&clock));
    a.advertise(AR_SELECTOR | AR_100F, 0, Some(0));
    settle(&mut a, &mut b);
    let mut c = End::i225(&clock);
    let (wa, wc) = UnixDatagramWire::pair().unwrap();
    a.attach(wa);
    c.attach(wc);
    c.link_up_slu();
    settle(&mut a, &mut c);
    assert_eq!(c.status(), (true, true, 100));
    assert_eq!(a.status(), (true, true, 100));
}

/// A PHY reset (CTRL.PHY_RST, as igc_phy_hw_reset) restores the reset advertisement and
/// renegotiates.
#[test]
fn a_phy_reset_restores_the_advertisement() {
    let clock = VirtualClock::new(1_000);
    let (mut a, mut b) = cable(End::i225(&clock), End::i225(&clock));
    a.advertise(AR_SELECTOR | AR_100F, 0, Some(0));
    settle(&mut a, &mut b);
    assert_eq!(b.status().2, 100);
    let c = a.rd(CTRL);
    a.wr(CTRL, c | Ctrl::PHY_RST.bits());
    settle(&mut a, &mut b);
    assert_eq!(a.phy_rd(ADVERTISE), 0x01E1);
    assert_eq!(a.mmd_rd(7, 0x20), CR_2500T_FD);
    assert_eq!(a.status(), (true, true, 2500));
    assert_eq!(b.status(), (true, true, 2500));
}
