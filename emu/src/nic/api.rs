//! The model-side controls and inspection every NIC model offers through its [`Port`]: cable,
//! link speed, wire, interrupt counters, the unimplemented-offset record, data-path counters.

use ptp_pci::emulated::DeviceHost;

use super::{LinkMode, LinkSpeed, NicStats, Port, UnimplementedAccess};
use crate::wire::{WirePort, WireStats};

impl Port {
    /// Plugs (true) or unplugs the cable. A resulting link change raises ICR.LSC.
    pub fn set_cable(&mut self, connected: bool, host: &mut dyn DeviceHost) {
        self.link.cable = connected;
        self.update_link(host);
    }

    /// Whether the cable is plugged in.
    pub fn cable(&self) -> bool {
        self.link.cable
    }

    /// Limits the link to `speed` (as a cable or an unmodelled partner that cannot go faster
    /// would): the PHY offers no faster mode and renegotiates, so with the link up it goes
    /// down and up (ICR.LSC). The model does not check that the part supports the speed; its
    /// owner does.
    pub fn set_link_speed(&mut self, speed: LinkSpeed, host: &mut dyn DeviceHost) {
        self.set_speed_cap(speed, host);
    }

    /// The speed the link runs at (the last negotiated; before any, the limit).
    pub fn link_speed(&self) -> LinkSpeed {
        self.link.speed
    }

    /// The mode the PHY negotiated with its partner (`None`: no link), whatever CTRL.SLU says.
    pub fn link_mode(&self) -> Option<LinkMode> {
        self.link.negotiated
    }

    /// Whether STATUS.LU is set.
    pub fn link_up(&self) -> bool {
        self.link.up
    }

    /// STATUS.LU transitions since power-on, down and up each counted.
    pub fn link_changes(&self) -> u64 {
        self.link.changes
    }

    /// The INTx line as a level: true while `ICR & IMS != 0` outside MSI-X mode (GPIE.MSIX_MODE
    /// clear). A device host serving the model over INTx polls it after every access and every
    /// poll and signals the guest while it is true; an ICR read (clear-on-read, and IAM
    /// auto-mask) drops it.
    pub fn intx_level(&self) -> bool {
        self.irq.intx_level()
    }

    /// MSI-X messages sent on `vector` (0 for a vector outside 0..32).
    pub fn msix_raised(&self, vector: u16) -> u64 {
        self.irq.raised.get(vector as usize).copied().unwrap_or(0)
    }

    /// MSI-X messages sent on all vectors.
    pub fn total_msix_raised(&self) -> u64 {
        self.irq.raised.iter().sum()
    }

    /// Every BAR0 offset outside the model's implemented set that was read or written since
    /// power-on (or [`clear_unimplemented_accesses`](Self::clear_unimplemented_accesses)),
    /// with counts, in offset order. Each offset's first access is also logged (warn). Port
    /// resets keep the record.
    pub fn unimplemented_accesses(&self) -> Vec<UnimplementedAccess> {
        self.unimpl.list()
    }

    /// Forgets the unimplemented-access record.
    pub fn clear_unimplemented_accesses(&mut self) {
        self.unimpl.clear();
    }

    /// Data-path counters (the family's own stamp counters are added by the model's `stats`).
    pub fn datapath_stats(&self) -> NicStats {
        self.stats
    }

    /// Attaches the MAC/PHY to `wire`, returning the previous one. The link is re-evaluated
    /// (and ICR.LSC raised if it changed) at the next poll.
    pub fn attach_wire(&mut self, wire: Box<dyn WirePort>) -> Option<Box<dyn WirePort>> {
        // The new wire has not carried the PHY's offer yet.
        self.link.published = None;
        self.wire.replace(wire)
    }

    /// Detaches the wire: back to the cable-flag link behaviour, frames sent are dropped.
    pub fn detach_wire(&mut self) -> Option<Box<dyn WirePort>> {
        self.wire.take()
    }

    /// The attached wire, if any.
    pub fn wire(&self) -> Option<&dyn WirePort> {
        self.wire.as_deref()
    }

    /// The attached wire, mutably (for its cable's fault injection).
    pub fn wire_mut(&mut self) -> Option<&mut (dyn WirePort + 'static)> {
        self.wire.as_deref_mut()
    }

    /// The attached wire's counters (zero without a wire).
    pub fn wire_stats(&self) -> WireStats {
        self.wire.as_ref().map(|w| w.stats()).unwrap_or_default()
    }

    /// Loses the next `n` frames on the attached wire's cable. False if there is no wire or
    /// it has no cable.
    pub fn wire_drop_next(&mut self, n: u64) -> bool {
        match self.wire.as_mut().and_then(|w| w.cable_mut()) {
            Some(c) => {
                c.drop_next(n);
                true
            }
            None => false,
        }
    }
}
