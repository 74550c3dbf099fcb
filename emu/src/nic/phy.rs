//! The internal PHY as seen through MDIC (i225/i226: GPY211; igb parts: their own PHY ID) (intel-timesync.md §10, qemu-proxy.md "What
//! Linux's igc driver needs to probe").
//!
//! One PHY answers every PHY address; an MDIC read or write completes at once (READY set
//! immediately), so a driver's bounded READY poll never waits. Register facts and sources:
//!
//! | Reg | Name | Model | Source |
//! |---|---|---|---|
//! | 0 | BMCR | 0x1140 at reset. AN enable b12, speed b6/b13, duplex b8, power down b11 decide what the PHY offers; a change of them, AN restart (b9, self-clears, with AN enabled) or RESET (b15) restarts negotiation. RESET keeps the value written with it and the other registers (it commits a forced setting) | IEEE 802.3 22.2.4.1; Linux igb e1000_phy.c igb_phy_force_speed_duplex_m88 ("Resets the PHY to commit the changes") \[U for the GPY211, which igc resets through CTRL.PHY_RST only\] |
//! | 1 | BMSR | 0x7949, plus LSTATUS (b2) while the PHY has link and AN complete (b5) when that link was autonegotiated: 0x796D | qemu-proxy.md (read from Linux igc on the part); IEEE 802.3 22.2.4.2 |
//! | 2, 3 | PHYSID1/2 | the part's PHY ID (i225: 0x67C9 / 0xDC00) | Linux igc_hw.h I225_I_PHY_ID, e1000_defines.h for igb parts |
//! | 4 | AN advertisement | 0x01E1 at reset (10/100 half/full, selector 1); 10H b5, 10F b6, 100H b7, 100F b8, PAUSE b10, ASM_DIR b11 | IEEE 802.3 28.2.4.1.3; Linux igc_phy.c igc_phy_setup_autoneg (NWAY_AR_*) \[U: reset value\] |
//! | 5 | LPA | autonegotiated link: the partner's base page with Ack (b14); a partner that publishes nothing: 0x41E1; parallel detection: the detected technology bit; else 0 | IEEE 802.3 28.2.4.1.4, 28.2.3.1 \[U: parallel-detection value\] |
//! | 6 | AN expansion | b0 link partner AN able | IEEE 802.3 28.2.4.1.5 |
//! | 9 | 1000BASE-T control | 0x0200 at reset; 1000 half b8, full b9 | IEEE 802.3 40.5.1.1; Linux igc_phy.c (CR_1000T_FD_CAPS) \[U: reset value\] |
//! | 10 | 1000BASE-T status | autonegotiated link: partner 1000 full (b11) / half (b10); at 1000 and above local (b13) and remote (b12) receiver OK; else 0 | IEEE 802.3 40.5.1.1; Linux igc_main.c igc_watchdog_task (waits for b12, "exceed max 2 second") \[U: b13/b12 at 2500\] |
//! | 13 | MMD access control | function b15:14, DEVAD b4:0 | IEEE 802.3 22.2.4.3.11, Linux igc_phy.c igc_access_xmdio_reg |
//! | 14 | MMD address/data | the address (function 0) or the data of the selected MMD register | IEEE 802.3 22.2.4.3.12 |
//! | 15 | Extended status | 0x3000 (1000BASE-T full/half) | IEEE 802.3 22.2.2.4 \[U\] |
//! | MMD 7.32 | MultiGBASE-T AN control (2.5G PHYs) | 0x0080 at reset: 2.5G advertised (b7) | IEEE 802.3 45.2.7.10; Linux igc_phy.c (ANEG_MULTIGBT_AN_CTRL, CR_2500T_FD_CAPS) \[U: reset value\] |
//! | MMD 7.33 | MultiGBASE-T AN status (2.5G PHYs) | read-only: partner 2.5G (b5) on an autonegotiated link; at 2500 local (b13) and remote (b12) receiver OK | IEEE 802.3 45.2.7.11 |
//!
//! Advertisement writes (4, 9, MMD 7.32) take effect at the next negotiation (restart, reset),
//! as IEEE 802.3 28.2.4.1.3 says; Linux's igc_copper_link_autoneg restarts after writing them.
//! What the PHY offers its partner, and how the two ends resolve the link, is in `link`.
//!
//! Other clause-22 registers and MMD registers are storage (up to [`MMD_REGS`] MMD
//! registers; writes beyond that are dropped) \[U\]. MMD data functions with post-increment
//! (b15:14 = 2 or 3) advance the address after each data access, as clause 22D describes.

use std::collections::BTreeMap;

use intel_regs::e1000::mdic;

use super::link::{LinkMode, LinkSpeed};
use crate::wire::{LinkModes, LinkOffer};

/// Clause-22 PHY registers the model gives behaviour to.
mod mii {
    pub const BMCR: usize = 0;
    pub const BMSR: usize = 1;
    pub const PHYSID1: usize = 2;
    pub const PHYSID2: usize = 3;
    pub const ADVERTISE: usize = 4;
    pub const LPA: usize = 5;
    pub const EXPANSION: usize = 6;
    pub const CTRL1000: usize = 9;
    pub const STAT1000: usize = 10;
    pub const MMDAC: usize = 13;
    pub const MMDAAD: usize = 14;
    pub const ESTATUS: usize = 15;
    pub const BMCR_RESET: u16 = 1 << 15;
    pub const BMCR_SPEED100: u16 = 1 << 13;
    pub const BMCR_ANENABLE: u16 = 1 << 12;
    pub const BMCR_PDOWN: u16 = 1 << 11;
    pub const BMCR_ANRESTART: u16 = 1 << 9;
    pub const BMCR_FULLDPLX: u16 = 1 << 8;
    pub const BMCR_SPEED1000: u16 = 1 << 6;
    /// The bits whose change restarts the link.
    pub const BMCR_LINK_CFG: u16 =
        BMCR_SPEED100 | BMCR_ANENABLE | BMCR_PDOWN | BMCR_FULLDPLX | BMCR_SPEED1000;
    /// Autoneg enabled, full duplex, speed-select 1000.
    pub const BMCR_DEFAULT: u16 = 0x1140;
    /// 10/100 half/full, extended status, MF preamble suppression, AN ability, extended caps.
    pub const BMSR_CAPS: u16 = 0x7949;
    pub const BMSR_LSTATUS: u16 = 1 << 2;
    pub const BMSR_ANEGCOMPLETE: u16 = 1 << 5;
    /// 10/100 half/full, selector 1 (IEEE 802.3).
    pub const ADVERTISE_DEFAULT: u16 = 0x01E1;
    pub const ADVERTISE_SELECTOR: u16 = 0x0001;
    /// 10 half (b5), 10 full (b6), 100 half (b7), 100 full (b8): the modes' bits 3:0 shifted.
    pub const ADVERTISE_TECH_SHIFT: u16 = 5;
    pub const ADVERTISE_PAUSE_SHIFT: u16 = 10;
    pub const LPA_ACK: u16 = 1 << 14;
    pub const EXPANSION_LP_AN_ABLE: u16 = 1;
    pub const CTRL1000_HALF: u16 = 1 << 8;
    pub const CTRL1000_FULL: u16 = 1 << 9;
    pub const CTRL1000_DEFAULT: u16 = CTRL1000_FULL;
    pub const STAT1000_LOCAL_OK: u16 = 1 << 13;
    pub const STAT1000_REMOTE_OK: u16 = 1 << 12;
    pub const STAT1000_LP_FULL: u16 = 1 << 11;
    pub const STAT1000_LP_HALF: u16 = 1 << 10;
    pub const ESTATUS_1000T: u16 = 0x3000;
    /// MMDAC function field (b15:14): 0 address, 1 data, 2 data + post-increment on read and
    /// write, 3 data + post-increment on write only.
    pub const MMDAC_FUNC_SHIFT: u16 = 14;
    pub const MMDAC_DEVAD_MASK: u16 = 0x1F;
}

/// MMD 7 (auto-negotiation) registers of a 2.5G PHY (IEEE 802.3 45.2.7.10/11).
mod an7 {
    pub const DEVAD: u8 = 7;
    /// MultiGBASE-T AN control (7.32), Linux igc ANEG_MULTIGBT_AN_CTRL.
    pub const MGBT_CTRL: u16 = 0x20;
    /// MultiGBASE-T AN status (7.33).
    pub const MGBT_STAT: u16 = 0x21;
    /// 2.5GBASE-T ability (Linux igc CR_2500T_FD_CAPS, MDIO_AN_10GBT_CTRL_ADV2_5G).
    pub const CTRL_2500: u16 = 1 << 7;
    pub const STAT_LOCAL_OK: u16 = 1 << 13;
    pub const STAT_REMOTE_OK: u16 = 1 << 12;
    /// Link partner 2.5GBASE-T able (MDIO_AN_10GBT_STAT_LP2_5G).
    pub const STAT_LP_2500: u16 = 1 << 5;
}

/// Largest number of distinct MMD registers stored (bounds memory against a driver that walks
/// the whole MMD space).
pub const MMD_REGS: usize = 256;

/// The i225/i226 PHY (GPY211) family: PHYSID with the revision nibble masked.
const GPY211_ID: u32 = 0x67C9_DC00;
const PHY_REVISION_MASK: u32 = 0xFFFF_FFF0;

/// The PHY's registers plus the MDIC register's last completed value.
#[derive(Debug, Clone)]
pub(crate) struct Phy {
    regs: [u16; 32],
    /// MMD register address per DEVAD (clause 22D address register).
    mmd_addr: [u16; 32],
    mmd: BTreeMap<(u8, u16), u16>,
    mdic: u32,
    /// PHYSID1:PHYSID2.
    id: u32,
    /// A 2.5GBASE-T PHY (the i225/i226's); igb parts' PHYs stop at 1000.
    multigig: bool,
    /// What the PHY offers since its last (re)negotiation, before the owner's speed limit.
    offer: LinkOffer,
    /// The link the last negotiation resolved, and the partner's offer it saw.
    link: Option<LinkMode>,
    partner: LinkOffer,
}

impl Phy {
    /// A PHY whose PHYSID1:PHYSID2 read `id`.
    pub(crate) fn new(id: u32) -> Self {
        let mut regs = [0; 32];
        regs[mii::BMCR] = mii::BMCR_DEFAULT;
        regs[mii::PHYSID1] = (id >> 16) as u16;
        regs[mii::PHYSID2] = id as u16;
        regs[mii::ADVERTISE] = mii::ADVERTISE_DEFAULT;
        regs[mii::CTRL1000] = mii::CTRL1000_DEFAULT;
        regs[mii::ESTATUS] = mii::ESTATUS_1000T;
        let multigig = id & PHY_REVISION_MASK == GPY211_ID;
        let mut mmd = BTreeMap::new();
        if multigig {
            mmd.insert((an7::DEVAD, an7::MGBT_CTRL), an7::CTRL_2500);
        }
        let mut phy = Self {
            regs,
            mmd_addr: [0; 32],
            mmd,
            mdic: 0,
            id,
            multigig,
            offer: LinkOffer::default(),
            link: None,
            partner: LinkOffer::default(),
        };
        phy.offer = phy.latch(0);
        phy
    }

    /// PHY reset (CTRL.PHY_RST): registers back to defaults, negotiation restarts.
    pub(crate) fn reset(&mut self) {
        let (mdic, generation) = (self.mdic, self.offer.generation);
        *self = Self::new(self.id);
        self.mdic = mdic;
        self.offer = self.latch(generation.wrapping_add(1));
    }

    /// Restarts negotiation with what the registers now say (the partner sees the link drop).
    pub(crate) fn restart(&mut self) {
        self.offer = self.latch(self.offer.generation.wrapping_add(1));
    }

    /// The modes this PHY can run.
    fn abilities(&self) -> LinkModes {
        if self.multigig {
            LinkModes::ALL
        } else {
            LinkModes::from_bits(LinkModes::ALL.bits() & !LinkModes::FULL_2500.bits())
                .unwrap_or_default()
        }
    }

    /// The offer the registers describe, as generation `generation`.
    fn latch(&self, generation: u16) -> LinkOffer {
        let bmcr = self.regs[mii::BMCR];
        let autoneg = bmcr & mii::BMCR_ANENABLE != 0;
        let adv = self.regs[mii::ADVERTISE];
        let modes = if bmcr & mii::BMCR_PDOWN != 0 {
            LinkModes::NONE
        } else if autoneg {
            self.advertised()
        } else {
            self.forced()
        };
        LinkOffer {
            autoneg,
            modes: modes & self.abilities(),
            pause: if autoneg {
                (adv >> mii::ADVERTISE_PAUSE_SHIFT) as u8 & 0b11
            } else {
                0
            },
            generation,
        }
    }

    /// The modes registers 4, 9 and MMD 7.32 advertise.
    fn advertised(&self) -> LinkModes {
        let tech = (self.regs[mii::ADVERTISE] >> mii::ADVERTISE_TECH_SHIFT) & 0xF;
        let mut m = LinkModes::from_bits(tech as u8).unwrap_or_default();
        let c1000 = self.regs[mii::CTRL1000];
        if c1000 & mii::CTRL1000_HALF != 0 {
            m = m | LinkModes::HALF_1000;
        }
        if c1000 & mii::CTRL1000_FULL != 0 {
            m = m | LinkModes::FULL_1000;
        }
        if self.mmd_value(an7::DEVAD, an7::MGBT_CTRL) & an7::CTRL_2500 != 0 {
            m = m | LinkModes::FULL_2500;
        }
        m
    }

    /// The mode BMCR forces (speed b6:b13 = 00 10, 01 100, 10 1000; 11 is reserved: none).
    fn forced(&self) -> LinkModes {
        self.forced_mode().map_or(LinkModes::NONE, LinkMode::bit)
    }

    fn forced_mode(&self) -> Option<LinkMode> {
        let bmcr = self.regs[mii::BMCR];
        let speed = match (
            bmcr & mii::BMCR_SPEED1000 != 0,
            bmcr & mii::BMCR_SPEED100 != 0,
        ) {
            (false, false) => LinkSpeed::Mbps10,
            (false, true) => LinkSpeed::Mbps100,
            (true, false) => LinkSpeed::Mbps1000,
            (true, true) => return None,
        };
        let full_duplex = bmcr & mii::BMCR_FULLDPLX != 0;
        Some(LinkMode { speed, full_duplex })
    }

    /// In loopback (BMCR b14) the PHY links with itself at the mode BMCR selects, whatever the
    /// cable (IEEE 802.3 22.2.4.1.2: the PHY returns what the MAC sends and isolates the
    /// medium); Linux igb's loopback self-test needs the link so (igb_integrated_phy_loopback
    /// writes 0x4140: loopback, 1000 full). `None` out of loopback.
    pub(crate) fn loopback_mode(&self) -> Option<LinkMode> {
        self.loopback().then(|| self.forced_mode()).flatten()
    }

    /// What the PHY offers the partner within the owner's speed limit `cap`.
    pub(crate) fn offer(&self, cap: LinkSpeed) -> LinkOffer {
        LinkOffer {
            modes: self.offer.modes & cap.modes_up_to(),
            ..self.offer
        }
    }

    /// The negotiation's result, for the status registers.
    pub(crate) fn set_link(&mut self, link: Option<LinkMode>, partner: LinkOffer) {
        self.link = link;
        self.partner = partner;
    }

    /// An autonegotiated link: both ends autonegotiate and the link is up.
    fn autonegotiated(&self) -> bool {
        self.link.is_some() && self.offer.autoneg && self.partner.autoneg
    }

    fn lpa(&self) -> u16 {
        let Some(link) = self.link.filter(|_| self.offer.autoneg) else {
            return 0;
        };
        if !self.partner.autoneg {
            // Parallel detection: the technology found, half duplex.
            let found = LinkMode {
                full_duplex: false,
                ..link
            }
            .bit();
            return u16::from(found.bits() & 0xF) << mii::ADVERTISE_TECH_SHIFT;
        }
        let p = &self.partner;
        mii::LPA_ACK
            | mii::ADVERTISE_SELECTOR
            | ((p.modes.bits() & 0xF) as u16) << mii::ADVERTISE_TECH_SHIFT
            | u16::from(p.pause) << mii::ADVERTISE_PAUSE_SHIFT
    }

    fn stat1000(&self) -> u16 {
        let Some(link) = self.link.filter(|_| self.autonegotiated()) else {
            return 0;
        };
        let p = self.partner.modes;
        let mut v = 0;
        if p.contains(LinkModes::FULL_1000) {
            v |= mii::STAT1000_LP_FULL;
        }
        if p.contains(LinkModes::HALF_1000) {
            v |= mii::STAT1000_LP_HALF;
        }
        if link.speed >= LinkSpeed::Mbps1000 {
            v |= mii::STAT1000_LOCAL_OK | mii::STAT1000_REMOTE_OK;
        }
        v
    }

    fn mgbt_stat(&self) -> u16 {
        let Some(link) = self.link.filter(|_| self.autonegotiated()) else {
            return 0;
        };
        let mut v = 0;
        if self.partner.modes.contains(LinkModes::FULL_2500) {
            v |= an7::STAT_LP_2500;
        }
        if link.speed == LinkSpeed::Mbps2500 {
            v |= an7::STAT_LOCAL_OK | an7::STAT_REMOTE_OK;
        }
        v
    }

    fn devad(&self) -> usize {
        (self.regs[mii::MMDAC] & mii::MMDAC_DEVAD_MASK) as usize
    }

    fn mmd_function(&self) -> u16 {
        self.regs[mii::MMDAC] >> mii::MMDAC_FUNC_SHIFT
    }

    /// Whether MMD register (`dev`, `addr`) is the read-only MultiGBASE-T status.
    fn is_mgbt_stat(&self, dev: u8, addr: u16) -> bool {
        self.multigig && (dev, addr) == (an7::DEVAD, an7::MGBT_STAT)
    }

    fn mmd_value(&self, dev: u8, addr: u16) -> u16 {
        if self.is_mgbt_stat(dev, addr) {
            return self.mgbt_stat();
        }
        self.mmd.get(&(dev, addr)).copied().unwrap_or(0)
    }

    /// A data access through register 14: the selected MMD register's value, then the
    /// post-increment its function asks for.
    fn mmd_data(&mut self, write: Option<u16>) -> u16 {
        let dev = self.devad();
        let addr = self.mmd_addr[dev];
        let key = (dev as u8, addr);
        let v = match write {
            Some(v) => {
                let room = self.mmd.len() < MMD_REGS || self.mmd.contains_key(&key);
                if room && !self.is_mgbt_stat(key.0, key.1) {
                    self.mmd.insert(key, v);
                }
                v
            }
            None => self.mmd_value(key.0, key.1),
        };
        let inc = match self.mmd_function() {
            2 => true,
            3 => write.is_some(),
            _ => false,
        };
        if inc {
            self.mmd_addr[dev] = addr.wrapping_add(1);
        }
        v
    }

    fn read(&mut self, reg: usize) -> u16 {
        match reg {
            mii::BMSR => {
                let mut v = mii::BMSR_CAPS;
                if self.link.is_some() {
                    v |= mii::BMSR_LSTATUS;
                    if self.offer.autoneg {
                        v |= mii::BMSR_ANEGCOMPLETE;
                    }
                }
                v
            }
            mii::LPA => self.lpa(),
            mii::EXPANSION if self.autonegotiated() => mii::EXPANSION_LP_AN_ABLE,
            mii::EXPANSION => 0,
            mii::STAT1000 => self.stat1000(),
            mii::MMDAAD if self.mmd_function() == 0 => self.mmd_addr[self.devad()],
            mii::MMDAAD => self.mmd_data(None),
            _ => self.regs.get(reg).copied().unwrap_or(0),
        }
    }

    fn write(&mut self, reg: usize, v: u16) {
        match reg {
            mii::BMCR => {
                let old = self.regs[mii::BMCR];
                let new = v & !(mii::BMCR_RESET | mii::BMCR_ANRESTART);
                self.regs[mii::BMCR] = new;
                let restart = v & mii::BMCR_RESET != 0
                    || (v & mii::BMCR_ANRESTART != 0 && new & mii::BMCR_ANENABLE != 0)
                    || (old ^ new) & mii::BMCR_LINK_CFG != 0;
                if restart {
                    self.restart();
                }
            }
            // Read-only status and identity.
            mii::BMSR
            | mii::PHYSID1
            | mii::PHYSID2
            | mii::LPA
            | mii::EXPANSION
            | mii::STAT1000
            | mii::ESTATUS => {}
            mii::MMDAAD if self.mmd_function() == 0 => {
                let dev = self.devad();
                self.mmd_addr[dev] = v;
            }
            mii::MMDAAD => {
                self.mmd_data(Some(v));
            }
            _ => {
                if let Some(r) = self.regs.get_mut(reg) {
                    *r = v;
                }
            }
        }
    }

    /// MDIC write: executes the operation and reports READY (ERROR for an invalid opcode).
    /// The register and PHY address fields read back as written (Linux igc_phy.c
    /// igc_read_phy_reg_mdic checks the register field of the completed value).
    pub(crate) fn write_mdic(&mut self, v: u32) {
        let reg = ((v & mdic::REG_MASK) >> mdic::REG_SHIFT) as usize;
        let cmd = v & !(mdic::READY | mdic::ERROR);
        self.mdic = match v & (mdic::OP_READ | mdic::OP_WRITE) {
            mdic::OP_READ => (cmd & !mdic::DATA_MASK) | self.read(reg) as u32 | mdic::READY,
            mdic::OP_WRITE => {
                self.write(reg, (v & mdic::DATA_MASK) as u16);
                cmd | mdic::READY
            }
            _ => cmd | mdic::READY | mdic::ERROR,
        };
    }

    pub(crate) fn mdic(&self) -> u32 {
        self.mdic
    }

    /// BMCR.LOOPBACK (b14, IEEE 802.3 22.2.4.1.2): the PHY returns what the MAC sends and
    /// isolates the medium (`tx` loops frames back while it is set).
    pub(crate) fn loopback(&self) -> bool {
        const BMCR_LOOPBACK: u16 = 1 << 14;
        self.regs[mii::BMCR] & BMCR_LOOPBACK != 0
    }

    /// An MMD register's value (for tests).
    #[cfg(test)]
    pub(crate) fn mmd(&self, dev: u8, addr: u16) -> u16 {
        self.mmd_value(dev, addr)
    }
}
