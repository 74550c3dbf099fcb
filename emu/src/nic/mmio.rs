//! The registers whose behaviour the families share (intel-timesync.md §6, §10.1): CTRL's link
//! and PHY-reset bits, STATUS, EECD/EERD/SWSM, MDIC, the statistics block and the interrupt set
//! (ICR/ICS/IMS/IMC/IAM where the family puts them; GPIE, EICS..EIAM, EICR, IVAR_MISC at the
//! same offsets on both), plus the link, wire and ground-truth upkeep every poll does.

use std::time::Duration;

use intel_regs::igc::{
    Ctrl, EECD, EIAC, EIAM, EICR, EICS, EIMC, EIMS, Eecd, GPIE, IVAR_MISC, IntCause, MDIC, STATUS,
    SWSM, Status, rah, ral, reg,
};
use ptp_pci::emulated::DeviceHost;

use super::{Port, hwstats, nvm};

/// The family's offsets of the registers that moved between igc and igb.
#[derive(Debug, Clone, Copy)]
pub(crate) struct IrqMap {
    pub(crate) icr: u32,
    pub(crate) ics: u32,
    pub(crate) ims: u32,
    pub(crate) imc: u32,
    pub(crate) iam: u32,
    /// EERD (igc and i210's SRRD at 0x12014; 82576/i350 at 0x0014).
    pub(crate) eerd: u32,
}

/// What a CTRL write asks of the model beyond the shared bits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CtrlWrite {
    /// Applied (link re-evaluated, PHY reset done).
    Done,
    /// A port reset: the model resets itself (the rest of the write does not stick).
    Reset,
}

impl Port {
    /// Non-zero register values after power-on or port reset (§10.1): the NVM MAC in RAL0/RAH0
    /// with RAH.AV, EECD.AUTO_RD (NVM read done), RLPML (`rx`).
    pub(crate) fn load_power_on(&mut self, m: [u8; 6]) {
        self.regs
            .set(ral(0), u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        self.regs
            .set(rah(0), u32::from_le_bytes([m[4], m[5], 0, 0]) | rah::AV);
        self.regs.set_reg(reg::EECD, Eecd::PRES | Eecd::AUTO_RD);
        self.regs.set(super::rx::RLPML, super::rx::RLPML_POWER_ON);
    }

    /// Port reset of the shared state: registers back to power-on, data path and interrupts
    /// cleared. CTRL.SLU is now clear, so the link drops; ICR was just reset, so no LSC is left
    /// pending for it (the driver sees LSC when it brings the link back up).
    pub(crate) fn port_reset(&mut self) {
        self.regs.clear();
        self.nvm.reload();
        self.load_power_on(self.mac);
        self.reset_datapath();
        self.link.update(false);
        self.port_resets += 1;
    }

    /// CTRL write: `reset` names the bits that reset the port on this family.
    pub(crate) fn write_ctrl(
        &mut self,
        v: Ctrl,
        reset: Ctrl,
        host: &mut dyn DeviceHost,
    ) -> CtrlWrite {
        if v.intersects(reset) {
            return CtrlWrite::Reset;
        }
        if v.contains(Ctrl::PHY_RST) {
            self.phy.reset();
        }
        // PHY_RST self-clears: the PHY reset completes at once.
        self.regs.set_reg(reg::CTRL, v - Ctrl::PHY_RST);
        self.update_link(host);
        CtrlWrite::Done
    }

    /// Re-evaluates STATUS.LU: the PHY's negotiation with its partner (cable, wire, both
    /// ends' offers: `link`), then CTRL.SLU.
    pub(crate) fn update_link(&mut self, host: &mut dyn DeviceHost) {
        self.negotiate();
        self.refresh_status(host);
    }

    /// STATUS: link bits plus GIO_MASTER_ENABLE, which stays set until the driver writes
    /// CTRL.GIO_MASTER_DISABLE (no DMA is ever in flight, so it clears at once).
    pub(crate) fn status(&self) -> Status {
        let gio = if self
            .regs
            .get_reg(reg::CTRL)
            .contains(Ctrl::GIO_MASTER_DISABLE)
        {
            Status::empty()
        } else {
            Status::GIO_MASTER_ENABLE
        };
        self.link.status_bits() | gio
    }

    /// A shared register's value without read side effects, or `None` for the family's own.
    pub(crate) fn peek_common(&self, offset: u32) -> Option<u32> {
        let m = self.irqmap;
        let i = &self.irq;
        Some(match offset {
            STATUS => self.status().bits(),
            MDIC => self.phy.mdic(),
            EECD => self.nvm.eecd_value(self.regs.get_reg(reg::EECD)).bits(),
            o if o == m.eerd => self.nvm.eerd(),
            o if (hwstats::FIRST..=hwstats::LAST).contains(&o) => self.hwstats.peek(o),
            o if o == m.icr => i.icr_value().bits(),
            o if o == m.ics || o == m.imc || o == EICS || o == EIMC => 0,
            o if o == m.ims => i.ims.bits(),
            o if o == m.iam => i.iam.bits(),
            GPIE => i.gpie,
            EICR => i.eicr,
            EIMS => i.eims,
            EIAC => i.eiac,
            EIAM => i.eiam,
            IVAR_MISC => i.ivar_misc,
            _ => return None,
        })
    }

    /// A shared register's read with its side effects (ICR/EICR read-to-clear, statistics
    /// clear-on-read, SWSM semaphore), or `None` for the family's own.
    pub(crate) fn read_common(&mut self, offset: u32, host: &mut dyn DeviceHost) -> Option<u32> {
        Some(match offset {
            o if o == self.irqmap.icr => self.irq.read_icr(host).bits(),
            EICR => self.irq.read_eicr(),
            o if (hwstats::FIRST..=hwstats::LAST).contains(&o) => self.hwstats.read(o),
            SWSM => {
                let (v, after) = nvm::swsm_read(self.regs.get(SWSM));
                self.regs.set(SWSM, after);
                v
            }
            o => return self.peek_common(o),
        })
    }

    /// A shared register's write (CTRL excepted, see [`Self::write_ctrl`]); false for the
    /// family's own.
    pub(crate) fn write_common(&mut self, offset: u32, v: u32, host: &mut dyn DeviceHost) -> bool {
        let m = self.irqmap;
        match offset {
            // Read-only.
            STATUS => {}
            o if (hwstats::FIRST..=hwstats::LAST).contains(&o) => {}
            // PRES/AUTO_RD/FLASH_DETECTED and the flash bits are the hardware's (`nvm`).
            EECD => {
                let stored = self.nvm.write_eecd(Eecd::from_bits_retain(v));
                self.regs.set_reg(reg::EECD, stored);
            }
            o if o == m.eerd => self.nvm.write_eerd(v),
            SWSM => self.regs.set(SWSM, nvm::swsm_write(v)),
            MDIC => self.write_mdic(v, host),
            o if o == m.icr => self.irq.write_icr(IntCause::from_bits_retain(v), host),
            o if o == m.ics => self.irq.cause(IntCause::from_bits_retain(v), host),
            o if o == m.ims => self.irq.set_ims(IntCause::from_bits_retain(v), host),
            o if o == m.imc => self.irq.clear_ims(IntCause::from_bits_retain(v), host),
            o if o == m.iam => self.irq.iam = IntCause::from_bits_retain(v),
            GPIE => self.irq.gpie = v,
            EICS => self.irq.set_eics(v, host),
            EIMS => self.irq.set_eims(v, host),
            EIMC => self.irq.clear_eims(v),
            EIAC => self.irq.eiac = v,
            EIAM => self.irq.eiam = v,
            EICR => self.irq.write_eicr(v),
            IVAR_MISC => self.irq.ivar_misc = v,
            _ => return false,
        }
        true
    }

    /// Reports the cable's loss count to the observer if it moved.
    pub(crate) fn report_wire_lost(&mut self) {
        if let Some(obs) = &self.observer {
            let lost = self.wire.as_ref().map_or(0, |w| w.stats().lost);
            if lost != self.reported_lost {
                self.reported_lost = lost;
                obs.wire_lost(lost);
            }
        }
    }

    /// When the model wants its next poll: at once if the RX engine left frames due (`busy`),
    /// else at the next arrival or the wire's poll interval, whichever comes first.
    pub(crate) fn next_poll(&self, busy: bool) -> Option<Duration> {
        if busy {
            return Some(Duration::ZERO);
        }
        let w = self.wire.as_ref()?;
        let now = self.now();
        let arrival = w
            .next_arrival()
            .map(|a| Duration::from_nanos(a.saturating_sub(now)));
        match (arrival, w.poll_interval()) {
            (Some(a), Some(i)) => Some(a.min(i)),
            (a, i) => a.or(i),
        }
    }
}
