//! Link state (STATUS); the PHY behind MDIC is in `phy` (intel-timesync.md §10).
//!
//! No autonegotiation timing is modelled: with CTRL.SLU set and the cable connected the link
//! is up at once, at the configured speed, full duplex — deterministic tests need no waiting.

use intel_regs::igc::status;

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
pub(crate) struct Link {
    pub(crate) cable: bool,
    pub(crate) speed: LinkSpeed,
    pub(crate) up: bool,
    /// STATUS.LU transitions since power-on (down and up each count): a reconfiguration that
    /// bounces the link shows here even when it is back up before anyone looks.
    pub(crate) changes: u64,
}

impl Link {
    pub(crate) fn new(cable: bool, speed: LinkSpeed) -> Self {
        Self {
            cable,
            speed,
            up: false,
            changes: 0,
        }
    }

    /// Recomputes link-up from CTRL.SLU; true if it changed (the caller raises ICR.LSC).
    pub(crate) fn update(&mut self, slu: bool) -> bool {
        let up = slu && self.cable;
        let changed = std::mem::replace(&mut self.up, up) != up;
        self.changes += u64::from(changed);
        changed
    }

    /// STATUS bits owned by the link: LU, FD and the speed (all clear while down).
    pub(crate) fn status_bits(&self) -> u32 {
        if self.up {
            status::LU | status::FD | self.speed.status_bits()
        } else {
            0
        }
    }
}
