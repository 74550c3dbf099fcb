//! The internal PHY as seen through MDIC (i225/i226: GPY211; igb parts: their own PHY ID) (intel-timesync.md §10, qemu-proxy.md "What
//! Linux's igc driver needs to probe").
//!
//! One PHY answers every PHY address; an MDIC read or write completes at once (READY set
//! immediately), so a driver's bounded READY poll never waits. Register facts and sources:
//!
//! | Reg | Name | Model | Source |
//! |---|---|---|---|
//! | 0 | BMCR | 0x1140 at reset; RESET (b15) resets the PHY, AN restart (b9) self-clears | IEEE 802.3 22.2.4.1 |
//! | 1 | BMSR | 0x7949, plus LSTATUS (b2) and AN complete (b5) while the link is up: 0x796D | qemu-proxy.md (read from Linux igc on the part) |
//! | 2, 3 | PHYSID1/2 | the part's PHY ID (i225: 0x67C9 / 0xDC00) | Linux igc_hw.h I225_I_PHY_ID, e1000_defines.h for igb parts |
//! | 5 | LPA | 0x41E1 while up (ack, pause, 10/100 half/full), else 0 | IEEE 802.3 28.2.4.1.4 \[U: link partner's abilities\] |
//! | 10 | 1000BASE-T status | while up: local (b13) and remote (b12) receiver OK, partner 1000FD (b11); else 0 | Linux igc_main.c igc_watchdog_task (waits for b12, "exceed max 2 second") |
//! | 13 | MMD access control | function b15:14, DEVAD b4:0 | IEEE 802.3 22.2.4.3.11, Linux igc_phy.c igc_access_xmdio_reg |
//! | 14 | MMD address/data | the address (function 0) or the data of the selected MMD register | IEEE 802.3 22.2.4.3.12 |
//! | 15 | Extended status | 0x3000 (1000BASE-T full/half) | IEEE 802.3 22.2.2.4 \[U\] |
//!
//! Other clause-22 registers and MMD registers are storage (up to [`MMD_REGS`] MMD
//! registers; writes beyond that are dropped) \[U\]. MMD data functions with post-increment
//! (b15:14 = 2 or 3) advance the address after each data access, as clause 22D describes.

use std::collections::BTreeMap;

use intel_regs::e1000::mdic;

/// Clause-22 PHY registers the model gives behaviour to.
mod mii {
    pub const BMCR: usize = 0;
    pub const BMSR: usize = 1;
    pub const PHYSID1: usize = 2;
    pub const PHYSID2: usize = 3;
    pub const LPA: usize = 5;
    pub const STAT1000: usize = 10;
    pub const MMDAC: usize = 13;
    pub const MMDAAD: usize = 14;
    pub const ESTATUS: usize = 15;
    pub const BMCR_RESET: u16 = 1 << 15;
    pub const BMCR_ANRESTART: u16 = 1 << 9;
    /// Autoneg enabled, full duplex, speed-select 1000.
    pub const BMCR_DEFAULT: u16 = 0x1140;
    /// 10/100 half/full, extended status, MF preamble suppression, AN ability, extended caps.
    pub const BMSR_CAPS: u16 = 0x7949;
    pub const BMSR_LSTATUS: u16 = 1 << 2;
    pub const BMSR_ANEGCOMPLETE: u16 = 1 << 5;
    pub const LPA_UP: u16 = 0x41E1;
    /// Local receiver OK (b13), remote receiver OK (b12), partner 1000BASE-T full duplex (b11).
    pub const STAT1000_UP: u16 = 0x3800;
    pub const ESTATUS_1000T: u16 = 0x3000;
    /// MMDAC function field (b15:14): 0 address, 1 data, 2 data + post-increment on read and
    /// write, 3 data + post-increment on write only.
    pub const MMDAC_FUNC_SHIFT: u16 = 14;
    pub const MMDAC_DEVAD_MASK: u16 = 0x1F;
}

/// Largest number of distinct MMD registers stored (bounds memory against a driver that walks
/// the whole MMD space).
pub const MMD_REGS: usize = 256;

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
}

impl Phy {
    /// A PHY whose PHYSID1:PHYSID2 read `id`.
    pub(crate) fn new(id: u32) -> Self {
        let mut regs = [0; 32];
        regs[mii::BMCR] = mii::BMCR_DEFAULT;
        regs[mii::PHYSID1] = (id >> 16) as u16;
        regs[mii::PHYSID2] = id as u16;
        regs[mii::ESTATUS] = mii::ESTATUS_1000T;
        Self {
            regs,
            mmd_addr: [0; 32],
            mmd: BTreeMap::new(),
            mdic: 0,
            id,
        }
    }

    /// PHY reset (CTRL.PHY_RST or BMCR.RESET): registers back to defaults.
    pub(crate) fn reset(&mut self) {
        let mdic = self.mdic;
        *self = Self::new(self.id);
        self.mdic = mdic;
    }

    fn devad(&self) -> usize {
        (self.regs[mii::MMDAC] & mii::MMDAC_DEVAD_MASK) as usize
    }

    fn mmd_function(&self) -> u16 {
        self.regs[mii::MMDAC] >> mii::MMDAC_FUNC_SHIFT
    }

    /// A data access through register 14: the selected MMD register's value, then the
    /// post-increment its function asks for.
    fn mmd_data(&mut self, write: Option<u16>) -> u16 {
        let dev = self.devad();
        let addr = self.mmd_addr[dev];
        let key = (dev as u8, addr);
        let v = match write {
            Some(v) => {
                if self.mmd.len() < MMD_REGS || self.mmd.contains_key(&key) {
                    self.mmd.insert(key, v);
                }
                v
            }
            None => self.mmd.get(&key).copied().unwrap_or(0),
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

    fn read(&mut self, reg: usize, link_up: bool) -> u16 {
        match reg {
            mii::BMSR if link_up => mii::BMSR_CAPS | mii::BMSR_LSTATUS | mii::BMSR_ANEGCOMPLETE,
            mii::BMSR => mii::BMSR_CAPS,
            mii::LPA if link_up => mii::LPA_UP,
            mii::LPA => 0,
            mii::STAT1000 if link_up => mii::STAT1000_UP,
            mii::STAT1000 => 0,
            mii::MMDAAD if self.mmd_function() == 0 => self.mmd_addr[self.devad()],
            mii::MMDAAD => self.mmd_data(None),
            _ => self.regs.get(reg).copied().unwrap_or(0),
        }
    }

    fn write(&mut self, reg: usize, v: u16) {
        match reg {
            mii::BMCR if v & mii::BMCR_RESET != 0 => self.reset(),
            // Restarting autonegotiation completes at once; the bit self-clears.
            mii::BMCR => self.regs[mii::BMCR] = v & !mii::BMCR_ANRESTART,
            // Read-only status and identity.
            mii::BMSR | mii::PHYSID1 | mii::PHYSID2 | mii::LPA | mii::STAT1000 | mii::ESTATUS => {}
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
    pub(crate) fn write_mdic(&mut self, v: u32, link_up: bool) {
        let reg = ((v & mdic::REG_MASK) >> mdic::REG_SHIFT) as usize;
        let cmd = v & !(mdic::READY | mdic::ERROR);
        self.mdic = match v & (mdic::OP_READ | mdic::OP_WRITE) {
            mdic::OP_READ => {
                (cmd & !mdic::DATA_MASK) | self.read(reg, link_up) as u32 | mdic::READY
            }
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

    /// An MMD register's value (for tests).
    #[cfg(test)]
    pub(crate) fn mmd(&self, dev: u8, addr: u16) -> u16 {
        self.mmd.get(&(dev, addr)).copied().unwrap_or(0)
    }
}
