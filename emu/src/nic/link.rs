//! Link state (STATUS) and autonegotiation across the cable; the PHY's registers are in `phy`
//! (intel-timesync.md §10).
//!
//! Each end's PHY publishes a [`LinkOffer`] on the wire and both ends resolve the link from the
//! same two offers ([`resolve`]), so the two ends of one cable agree on speed (and, unless one
//! end is forced, duplex):
//!
//! - both autonegotiating: the best mode both advertise (IEEE 802.3 Annex 28B.3 priority:
//!   2500 full > 1000 full > 1000 half > 100 full > 100 half > 10 full > 10 half); none in
//!   common, no link;
//! - one end forced, the other autonegotiating: parallel detection (IEEE 802.3 28.2.3.1) finds
//!   a forced 10BASE-T or 100BASE-TX partner if it advertises that speed, and links at it
//!   half duplex; the forced end keeps its own duplex (so a forced full-duplex end runs
//!   against a half-duplex one: the classic duplex mismatch). 1000BASE-T and 2.5GBASE-T need
//!   autonegotiation (IEEE 802.3 40.5.1, 126.6), so a forced 1000 end links with no
//!   autonegotiating partner;
//! - both forced: link when the speeds match, each end at its own duplex \[U\].
//!
//! A wire that carries no offers (loopback, a TAP bridge, no wire) stands for an
//! autonegotiating partner advertising every mode (no pause): the link runs at this end's best
//! mode, as the model did before it negotiated.
//!
//! The model's owner can limit the link ([`Link::cap`], `set_link_speed`: a cable, or a
//! partner the lab does not model, that cannot go faster): modes above it are not offered.
//!
//! No autonegotiation timing is modelled: a link whose negotiation succeeds is up at once, and
//! a renegotiation (either end restarts it, or the owner changes the limit) takes the link
//! down and up in one step (two [`Link::changes`], ICR.LSC). A real PHY stays down for
//! seconds, so a driver that only polls would see it; here only LSC and the counter show it.

use intel_regs::igc::{Ctrl, IntCause, Status, reg};
use ptp_pci::emulated::DeviceHost;

use super::Port;
use crate::wire::{LinkModes, LinkOffer};

/// Link speed the model reports in STATUS once the link is up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, PartialOrd, Ord)]
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

    fn status_bits(self) -> Status {
        match self {
            Self::Mbps10 => Status::empty(),
            Self::Mbps100 => Status::SPEED_100,
            Self::Mbps1000 => Status::SPEED_1000,
            // The part keeps SPEED_1000 set at 2.5 Gb/s (Linux igc_mac.c:
            // igc_get_speed_and_duplex_copper tests SPEED_1000 first; intel-timesync.md §10.1).
            Self::Mbps2500 => Status::SPEED_1000 | Status::SPEED_2500,
        }
    }

    /// Both duplex modes at this speed (2.5GBASE-T has full only).
    pub(crate) fn modes(self) -> LinkModes {
        match self {
            Self::Mbps10 => LinkModes::HALF_10 | LinkModes::FULL_10,
            Self::Mbps100 => LinkModes::HALF_100 | LinkModes::FULL_100,
            Self::Mbps1000 => LinkModes::HALF_1000 | LinkModes::FULL_1000,
            Self::Mbps2500 => LinkModes::FULL_2500,
        }
    }

    /// Every mode at this speed or slower.
    pub(crate) fn modes_up_to(self) -> LinkModes {
        [Self::Mbps10, Self::Mbps100, Self::Mbps1000, Self::Mbps2500]
            .into_iter()
            .filter(|s| *s <= self)
            .fold(LinkModes::NONE, |m, s| m | s.modes())
    }
}

/// A resolved link: speed and duplex.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct LinkMode {
    /// The speed.
    pub speed: LinkSpeed,
    /// Full (true) or half duplex.
    pub full_duplex: bool,
}

impl LinkMode {
    /// The mode of a one-mode set (its best mode if it has more); `None` if empty.
    pub fn of(modes: LinkModes) -> Option<Self> {
        let m = modes.best()?;
        let speed = [
            LinkSpeed::Mbps10,
            LinkSpeed::Mbps100,
            LinkSpeed::Mbps1000,
            LinkSpeed::Mbps2500,
        ]
        .into_iter()
        .find(|s| s.modes().contains(m))?;
        let full_duplex = (LinkModes::FULL_10
            | LinkModes::FULL_100
            | LinkModes::FULL_1000
            | LinkModes::FULL_2500)
            .contains(m);
        Some(Self { speed, full_duplex })
    }

    /// This mode as a one-mode set.
    pub fn bit(self) -> LinkModes {
        let m = self.speed.modes();
        let half = LinkModes::HALF_10 | LinkModes::HALF_100 | LinkModes::HALF_1000;
        if self.full_duplex {
            LinkModes::from_bits(m.bits() & !half.bits()).unwrap_or_default()
        } else {
            m & half
        }
    }
}

/// What a wire without offers stands for: an autonegotiating partner advertising every mode
/// the i225 can (10/100 half and full, 1000 and 2500 full), no pause — the base page 0x41E1
/// (with Ack) the model reported before it negotiated.
pub(crate) const ANY_PARTNER: LinkOffer = LinkOffer {
    autoneg: true,
    modes: LinkModes::from_bits(0x6F).unwrap(),
    pause: 0,
    generation: 0,
};

/// Parallel detection (IEEE 802.3 28.2.3.1) sees only 10BASE-T and 100BASE-TX link signalling.
fn parallel_detectable(speed: LinkSpeed) -> bool {
    matches!(speed, LinkSpeed::Mbps10 | LinkSpeed::Mbps100)
}

/// The mode this end links at, given its own offer and its partner's (`None`: a partner that
/// publishes nothing, [`ANY_PARTNER`]); `None`: no link. See the module docs for the rules.
pub(crate) fn resolve(local: &LinkOffer, partner: Option<&LinkOffer>) -> Option<LinkMode> {
    let partner = partner.unwrap_or(&ANY_PARTNER);
    if local.modes.is_empty() || partner.modes.is_empty() {
        return None;
    }
    match (local.autoneg, partner.autoneg) {
        (true, true) => LinkMode::of(local.modes & partner.modes),
        (true, false) => {
            let theirs = LinkMode::of(partner.modes)?;
            let ok = parallel_detectable(theirs.speed)
                && !(local.modes & theirs.speed.modes()).is_empty();
            ok.then_some(LinkMode {
                speed: theirs.speed,
                full_duplex: false,
            })
        }
        (false, true) => {
            let ours = LinkMode::of(local.modes)?;
            let ok =
                parallel_detectable(ours.speed) && !(partner.modes & ours.speed.modes()).is_empty();
            ok.then_some(ours)
        }
        (false, false) => {
            let (ours, theirs) = (LinkMode::of(local.modes)?, LinkMode::of(partner.modes)?);
            (ours.speed == theirs.speed).then_some(ours)
        }
    }
}

/// The model-side wire: cable, the owner's speed limit and the negotiated link.
#[derive(Debug, Clone)]
pub(crate) struct Link {
    pub(crate) cable: bool,
    /// The owner's limit: modes faster than this are not offered.
    pub(crate) cap: LinkSpeed,
    /// The speed the link runs at (the last negotiated; the limit before any).
    pub(crate) speed: LinkSpeed,
    pub(crate) full_duplex: bool,
    /// STATUS.LU.
    pub(crate) up: bool,
    /// STATUS.LU transitions since power-on (down and up each count): a reconfiguration that
    /// bounces the link shows here even when it is back up before anyone looks.
    pub(crate) changes: u64,
    /// The PHY's link: the mode negotiated with the partner (whatever CTRL.SLU says).
    pub(crate) negotiated: Option<LinkMode>,
    /// Both ends' negotiation generations behind [`Self::negotiated`].
    epoch: (u16, Option<u16>),
    /// A renegotiation happened since the last [`Self::update`]: a link that stays up bounces.
    renegotiated: bool,
    /// The offer last handed to the wire.
    pub(crate) published: Option<LinkOffer>,
}

impl Link {
    pub(crate) fn new(cable: bool, speed: LinkSpeed) -> Self {
        Self {
            cable,
            cap: speed,
            speed,
            full_duplex: true,
            up: false,
            changes: 0,
            negotiated: None,
            epoch: (0, None),
            renegotiated: false,
            published: None,
        }
    }

    /// Records the PHY's negotiation: `mode` from offers of generations `epoch` (ours, the
    /// partner's if it published one). A new generation on either side, or a new mode, is a
    /// renegotiation; a partner's first offer is not (the link assumed one already).
    fn negotiate(&mut self, mode: Option<LinkMode>, epoch: (u16, Option<u16>)) {
        let partner_restarted = matches!(
            (self.epoch.1, epoch.1),
            (Some(a), Some(b)) if a != b
        );
        if mode != self.negotiated || epoch.0 != self.epoch.0 || partner_restarted {
            self.renegotiated = true;
        }
        self.negotiated = mode;
        self.epoch = epoch;
        if let Some(m) = mode {
            self.speed = m.speed;
            self.full_duplex = m.full_duplex;
        }
    }

    /// Recomputes STATUS.LU from CTRL.SLU and the PHY's link; true if it changed (the caller
    /// raises ICR.LSC), a renegotiation under a link that stays up included.
    pub(crate) fn update(&mut self, slu: bool) -> bool {
        let up = slu && self.cable && self.negotiated.is_some();
        let bounced = self.up && up && std::mem::take(&mut self.renegotiated);
        self.renegotiated = false;
        let changed = std::mem::replace(&mut self.up, up) != up;
        self.changes += u64::from(changed) + 2 * u64::from(bounced);
        changed || bounced
    }

    /// STATUS bits owned by the link: LU, FD and the speed (all clear while down).
    pub(crate) fn status_bits(&self) -> Status {
        if !self.up {
            return Status::empty();
        }
        let fd = if self.full_duplex {
            Status::FD
        } else {
            Status::empty()
        };
        Status::LU | fd | self.speed.status_bits()
    }
}

impl Port {
    /// Negotiates with the partner: publishes the PHY's offer (when it changed) and resolves
    /// the PHY's link from both ends' offers, the cable and the wire's presence.
    pub(crate) fn negotiate(&mut self) {
        let offer = self.phy.offer(self.link.cap);
        if self.link.published != Some(offer) {
            if let Some(w) = self.wire.as_mut() {
                w.publish(offer);
            }
            self.link.published = Some(offer);
        }
        let present = self.wire.as_ref().is_none_or(|w| w.link_up());
        let partner = self.wire.as_ref().and_then(|w| w.partner());
        let mode = match self.phy.loopback_mode() {
            Some(m) => Some(m),
            None => (self.link.cable && present)
                .then(|| resolve(&offer, partner.as_ref()))
                .flatten(),
        };
        self.link
            .negotiate(mode, (offer.generation, partner.map(|p| p.generation)));
        self.phy.set_link(mode, partner.unwrap_or(ANY_PARTNER));
    }

    /// MDIC write: the PHY access on a current negotiation (its status registers show the
    /// partner as of now), then the link again (a PHY write may restart negotiation).
    pub(crate) fn write_mdic(&mut self, v: u32, host: &mut dyn DeviceHost) {
        self.negotiate();
        self.phy.write_mdic(v);
        self.update_link(host);
    }

    /// The owner's speed limit changed: the PHY renegotiates within it.
    pub(crate) fn set_speed_cap(&mut self, cap: LinkSpeed, host: &mut dyn DeviceHost) {
        if cap != self.link.cap {
            self.link.cap = cap;
            self.phy.restart();
            self.update_link(host);
        }
    }

    /// STATUS.LU from CTRL.SLU and the negotiated link; ICR.LSC on a change.
    pub(crate) fn refresh_status(&mut self, host: &mut dyn DeviceHost) {
        let slu = self.regs.get_reg(reg::CTRL).contains(Ctrl::SLU);
        if self.link.update(slu) {
            self.irq.cause(IntCause::LSC, host);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn an(modes: LinkModes) -> LinkOffer {
        LinkOffer {
            autoneg: true,
            modes,
            ..LinkOffer::default()
        }
    }

    fn forced(speed: LinkSpeed, full_duplex: bool) -> LinkOffer {
        LinkOffer {
            autoneg: false,
            modes: LinkMode { speed, full_duplex }.bit(),
            ..LinkOffer::default()
        }
    }

    const fn mode(speed: LinkSpeed, full_duplex: bool) -> Option<LinkMode> {
        Some(LinkMode { speed, full_duplex })
    }

    #[test]
    fn modes_and_bits_round_trip() {
        for bit in 0..7 {
            let m = LinkModes::from_bits(1 << bit).unwrap();
            assert_eq!(LinkMode::of(m).unwrap().bit(), m);
        }
        assert_eq!(LinkMode::of(LinkModes::NONE), None);
        assert_eq!(LinkSpeed::Mbps100.modes_up_to().bits(), 0x0F);
        assert_eq!(LinkSpeed::Mbps2500.modes_up_to(), LinkModes::ALL);
    }

    #[test]
    fn both_autonegotiating_take_the_best_common_mode_and_agree() {
        let all = an(LinkModes::ALL);
        let fd100 = an(LinkModes::FULL_100);
        assert_eq!(resolve(&all, Some(&fd100)), mode(LinkSpeed::Mbps100, true));
        assert_eq!(resolve(&fd100, Some(&all)), mode(LinkSpeed::Mbps100, true));
        let gig = an(LinkModes::FULL_1000 | LinkModes::FULL_100);
        assert_eq!(resolve(&all, Some(&gig)), mode(LinkSpeed::Mbps1000, true));
        // 100 half beats 10 full (Annex 28B.3).
        let a = an(LinkModes::HALF_100 | LinkModes::FULL_10);
        assert_eq!(resolve(&a, Some(&all)), mode(LinkSpeed::Mbps100, false));
        // Nothing in common: no link at either end.
        let h10 = an(LinkModes::HALF_10);
        assert_eq!(resolve(&fd100, Some(&h10)), None);
        assert_eq!(resolve(&h10, Some(&fd100)), None);
        // A partner that publishes nothing advertises everything but 1000 half.
        assert_eq!(resolve(&all, None), mode(LinkSpeed::Mbps2500, true));
        let h1000 = an(LinkModes::HALF_1000 | LinkModes::HALF_10);
        assert_eq!(resolve(&h1000, None), mode(LinkSpeed::Mbps10, false));
    }

    #[test]
    fn a_forced_end_meets_an_autonegotiating_one_by_parallel_detection() {
        let all = an(LinkModes::ALL);
        let f100 = forced(LinkSpeed::Mbps100, true);
        assert_eq!(resolve(&f100, Some(&all)), mode(LinkSpeed::Mbps100, true));
        assert_eq!(resolve(&all, Some(&f100)), mode(LinkSpeed::Mbps100, false));
        // The autonegotiating end must support the speed.
        let gig = an(LinkModes::FULL_1000);
        assert_eq!(resolve(&f100, Some(&gig)), None);
        assert_eq!(resolve(&gig, Some(&f100)), None);
        // 1000BASE-T needs autonegotiation.
        let f1000 = forced(LinkSpeed::Mbps1000, true);
        assert_eq!(resolve(&f1000, Some(&all)), None);
        assert_eq!(resolve(&all, Some(&f1000)), None);
        assert_eq!(resolve(&f1000, None), None);
        // Both forced: the speeds must match.
        let f10 = forced(LinkSpeed::Mbps10, false);
        assert_eq!(resolve(&f100, Some(&f10)), None);
        let h100 = forced(LinkSpeed::Mbps100, false);
        assert_eq!(resolve(&f100, Some(&h100)), mode(LinkSpeed::Mbps100, true));
        assert_eq!(resolve(&h100, Some(&f100)), mode(LinkSpeed::Mbps100, false));
        // A powered-down end offers nothing.
        assert_eq!(resolve(&an(LinkModes::NONE), Some(&all)), None);
        assert_eq!(resolve(&all, Some(&an(LinkModes::NONE))), None);
    }
}

#[cfg(all(test, target_os = "linux"))]
mod cable_tests;
