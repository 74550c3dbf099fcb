//! Link state (STATUS) and a minimal internal PHY behind MDIC (intel-timesync.md §10).
//!
//! No autonegotiation timing is modelled: with CTRL.SLU set and the cable connected the link
//! is up at once, at the configured speed, full duplex — deterministic tests need no waiting.

use intel_regs::igc::{I225_I_PHY_ID, mdic, status};

/// Link speed the model reports in STATUS once the link is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum LinkSpeed {
    /// 10 Mb/s: no speed bit in STATUS.
    Mbps10,
    /// 100 Mb/s: STATUS.SPEED_100.
    Mbps100,
    /// 1000 Mb/s: STATUS.SPEED_1000.
    Mbps1000,
    /// 2500 Mb/s: STATUS.SPEED_1000 and SPEED_2500 together (the i225/i226 default).
    #[default]
    Mbps2500,
}

impl LinkSpeed {
    /// Megabits per second.
    pub fn mbps(self) -> u32 {
        match self {
            Self::Mbps10 => 10,
            Self::Mbps100 => 100,
            Self::Mbps1000 => 1000,
            Self::Mbps2500 => 2500,
        }
    }

    /// The speed with this many Mb/s, if the part supports it.
    pub fn from_mbps(mbps: u32) -> Option<Self> {
        match mbps {
            10 => Some(Self::Mbps10),
            100 => Some(Self::Mbps100),
            1000 => Some(Self::Mbps1000),
            2500 => Some(Self::Mbps2500),
            _ => None,
        }
    }

    fn status_bits(self) -> u32 {
        match self {
            Self::Mbps10 => 0,
            Self::Mbps100 => status::SPEED_100,
            Self::Mbps1000 => status::SPEED_1000,
            // The part keeps SPEED_1000 set at 2.5 Gb/s and adds SPEED_2500 (Linux igc_mac.c:
            // igc_get_speed_and_duplex_copper tests SPEED_1000 first; intel-timesync.md §10.1).
            Self::Mbps2500 => status::SPEED_1000 | status::SPEED_2500,
        }
    }
}

/// The model-side wire: cable and negotiated speed.
#[derive(Debug, Clone)]
pub(super) struct Link {
    pub(super) cable: bool,
    pub(super) speed: LinkSpeed,
    pub(super) up: bool,
}

impl Link {
    /// Recomputes link-up from CTRL.SLU; true if it changed (the caller raises ICR.LSC).
    pub(super) fn update(&mut self, slu: bool) -> bool {
        let up = slu && self.cable;
        std::mem::replace(&mut self.up, up) != up
    }

    /// STATUS bits owned by the link: LU, FD and the speed (all clear while down).
    pub(super) fn status_bits(&self) -> u32 {
        if self.up {
            status::LU | status::FD | self.speed.status_bits()
        } else {
            0
        }
    }
}

/// Clause-22 PHY registers the model gives behaviour to.
mod mii {
    pub const BMCR: usize = 0;
    pub const BMSR: usize = 1;
    pub const PHYSID1: usize = 2;
    pub const PHYSID2: usize = 3;
    pub const BMCR_RESET: u16 = 1 << 15;
    pub const BMCR_ANRESTART: u16 = 1 << 9;
    /// Autoneg enabled, full duplex, speed-select 1000.
    pub const BMCR_DEFAULT: u16 = 0x1140;
    /// 10/100 half/full, extended status, MF preamble suppression, AN ability, extended caps.
    pub const BMSR_CAPS: u16 = 0x7949;
    pub const BMSR_LSTATUS: u16 = 1 << 2;
    pub const BMSR_ANEGCOMPLETE: u16 = 1 << 5;
}

/// The internal PHY as seen through MDIC: one PHY answers every PHY address; a read or write
/// completes at once (READY set immediately), so a driver's bounded READY poll never waits.
/// Only BMCR/BMSR/PHYSID are modelled; other PHY registers are storage.
#[derive(Debug, Clone)]
pub(super) struct Phy {
    regs: [u16; 32],
    mdic: u32,
}

impl Phy {
    pub(super) fn new() -> Self {
        let mut regs = [0; 32];
        regs[mii::BMCR] = mii::BMCR_DEFAULT;
        regs[mii::PHYSID1] = (I225_I_PHY_ID >> 16) as u16;
        regs[mii::PHYSID2] = I225_I_PHY_ID as u16;
        Self { regs, mdic: 0 }
    }

    /// PHY reset (CTRL.PHY_RST or BMCR.RESET): registers back to defaults.
    pub(super) fn reset(&mut self) {
        let mdic = self.mdic;
        *self = Self::new();
        self.mdic = mdic;
    }

    fn read(&self, reg: usize, link_up: bool) -> u16 {
        match reg {
            mii::BMSR if link_up => mii::BMSR_CAPS | mii::BMSR_LSTATUS | mii::BMSR_ANEGCOMPLETE,
            mii::BMSR => mii::BMSR_CAPS,
            _ => self.regs.get(reg).copied().unwrap_or(0),
        }
    }

    fn write(&mut self, reg: usize, v: u16) {
        match reg {
            mii::BMCR if v & mii::BMCR_RESET != 0 => self.reset(),
            // Restarting autonegotiation completes at once; the bit self-clears.
            mii::BMCR => self.regs[mii::BMCR] = v & !mii::BMCR_ANRESTART,
            mii::BMSR | mii::PHYSID1 | mii::PHYSID2 => {}
            _ => {
                if let Some(r) = self.regs.get_mut(reg) {
                    *r = v;
                }
            }
        }
    }

    /// MDIC write: executes the operation and reports READY (ERROR for an invalid opcode).
    pub(super) fn write_mdic(&mut self, v: u32, link_up: bool) {
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

    pub(super) fn mdic(&self) -> u32 {
        self.mdic
    }
}
