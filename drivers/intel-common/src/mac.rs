//! The e1000-style MAC that igc and igb parts share: reset, link, queue 0 rings, MSI-X routing
//! and the in-buffer RX timestamp mode are the same sequences with the same bits on both
//! (reference §6, §8.1, §10; Linux e1000_defines.h and igc_defines.h agree on every bit used
//! here). Every fixed offset and bit comes from `intel_regs::e1000`, the registers both families
//! share; the offsets that differ come from the family as [`MacRegs`].

use std::time::Duration;

use intel_regs::e1000::{
    self as r, Ctrl, Eecd, IntCause, Reg, Status, TsyncRxCtl, ctrl_ext, gpie, rctl, reg, srrctl,
    tctl, xdctl,
};
use ptp_pci::Mmio;

use crate::ring::{RxRing, TxRing};
use crate::{HwError, Regs};

/// Bounds of the bring-up polls. Linux waits up to 10 ms for AUTO_RD and ~800 ms for the GIO
/// master disable; emulated devices answer at once. A real PHY takes seconds to link.
const GIO_TIMEOUT: Duration = Duration::from_millis(800);
const AUTO_RD_TIMEOUT: Duration = Duration::from_millis(100);
const POLL_STEP: Duration = Duration::from_micros(100);

/// What differs between the families' MAC layouts: the ICR block (igc 0x1500, igb 0xC0) and
/// where queue 0's RX and TX registers start (igc 0xC000/0xE000, igb 0x2800/0x3800). Everything
/// else this module touches sits at the same offset on both (§1, §6, §10.1; a test checks).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MacRegs {
    pub icr: Reg<IntCause>,
    pub ims: Reg<IntCause>,
    pub imc: Reg<IntCause>,
    /// RDBAL of queue 0; the queue's other RX registers follow at fixed offsets.
    pub rxq: u32,
    /// TDBAL of queue 0; likewise.
    pub txq: u32,
}

impl MacRegs {
    pub const fn rdbal(&self) -> u32 {
        self.rxq
    }
    pub const fn rdbah(&self) -> u32 {
        self.rxq + 0x04
    }
    pub const fn rdlen(&self) -> u32 {
        self.rxq + 0x08
    }
    pub const fn srrctl(&self) -> u32 {
        self.rxq + 0x0C
    }
    pub const fn rdh(&self) -> u32 {
        self.rxq + 0x10
    }
    pub const fn rdt(&self) -> u32 {
        self.rxq + 0x18
    }
    pub const fn rxdctl(&self) -> u32 {
        self.rxq + 0x28
    }
    pub const fn tdbal(&self) -> u32 {
        self.txq
    }
    pub const fn tdbah(&self) -> u32 {
        self.txq + 0x04
    }
    pub const fn tdlen(&self) -> u32 {
        self.txq + 0x08
    }
    pub const fn tdh(&self) -> u32 {
        self.txq + 0x10
    }
    pub const fn tdt(&self) -> u32 {
        self.txq + 0x18
    }
    pub const fn txdctl(&self) -> u32 {
        self.txq + 0x28
    }
}

/// IVAR entries are `vector | VALID` (§6).
const IVAR_VALID: u32 = r::IVAR_VALID;
/// SRRCTL for queue 0: 2 KB buffers, 256-byte header field, advanced one-buffer descriptors.
pub const SRRCTL_BASE: u32 =
    (2048 >> 10) | (256 << srrctl::BSIZEHDR_SHIFT) | srrctl::DESCTYPE_ADV_ONEBUF;
/// The "other" causes every family enables: link, DMA out of sync, reset asserted.
pub const OTHER_IMS: IntCause = IntCause::LSC
    .union(IntCause::DOUTSYNC)
    .union(IntCause::DRSTA);

/// Resets the port and waits for the NVM auto-read, as Linux's reset_hw (§10.2 step 1): DMA
/// stopped first so no descriptor write lands in freed memory.
pub fn reset<M: Mmio>(regs: &Regs<M>, m: &MacRegs) -> Result<(), HwError> {
    reset_with(regs, m, true)
}

/// [`reset`]; with `auto_rd_required` false a missing EECD.AUTO_RD is logged, not an error, as
/// Linux's igb_reset_hw_82575 does ("this can happen ... where there is no eeprom"): QEMU's
/// 82576 model (-device igb) never sets it (its EECD reset value is FWE_DIS | PRES | size) and
/// Linux igb drives it anyway.
pub fn reset_with<M: Mmio>(
    regs: &Regs<M>,
    m: &MacRegs,
    auto_rd_required: bool,
) -> Result<(), HwError> {
    regs.update(reg::CTRL, Ctrl::GIO_MASTER_DISABLE, Ctrl::empty());
    regs.wait_for(
        "GIO master disable",
        reg::STATUS,
        Status::GIO_MASTER_ENABLE,
        Status::empty(),
        GIO_TIMEOUT,
        POLL_STEP,
    )?;
    regs.set(m.imc, IntCause::all());
    regs.write(r::RCTL, 0);
    regs.write(r::TCTL, tctl::PSP);
    let _ = regs.get(reg::STATUS); // flush posted writes
    regs.update(reg::CTRL, Ctrl::RST, Ctrl::empty());
    let auto_rd = regs.wait_for(
        "EECD.AUTO_RD after reset",
        reg::EECD,
        Eecd::AUTO_RD,
        Eecd::AUTO_RD,
        AUTO_RD_TIMEOUT,
        POLL_STEP,
    );
    match auto_rd {
        Err(e) if !auto_rd_required => {
            log::warn!("{e}; going on without it (NVM auto-read not reported)")
        }
        r => r.map(drop)?,
    }
    regs.set(m.imc, IntCause::all());
    let _ = regs.get(m.icr);
    Ok(())
}

/// Stops DMA and interrupts without a port reset (a warm attach, or a driver on its way out:
/// the timer and the link stay as they are). The queues are disabled again when the rings are
/// programmed. A queue's ENABLE bit reads 1 until the queue has really stopped (i225 and i210
/// datasheets, RXDCTL/TXDCTL: software polls it after clearing), so each is waited for, at
/// most [`QUEUE_STOP_TIMEOUT`]; a queue that does not stop is logged, not fatal: the
/// receiver and transmitter are off either way.
pub fn quiesce<M: Mmio>(regs: &Regs<M>, m: &MacRegs) {
    regs.set(m.imc, IntCause::all());
    regs.write(r::RCTL, 0);
    regs.write(r::TCTL, tctl::PSP);
    regs.write(m.txdctl(), 0);
    regs.write(m.rxdctl(), 0);
    let _ = regs.get(reg::STATUS); // flush posted writes
    for (what, q) in [("RXDCTL", m.rxdctl()), ("TXDCTL", m.txdctl())] {
        let enable = xdctl::QUEUE_ENABLE;
        if let Err(e) = regs.poll(what, q, enable, 0, QUEUE_STOP_TIMEOUT, POLL_STEP) {
            log::warn!("quiesce: {e}: the queue may still be moving data");
        }
    }
    let _ = regs.get(m.icr);
}

/// Whether the NIC is moving data: the receiver or a queue 0 enabled. At a driver's start that
/// means a predecessor left it so (it was killed or crashed: a clean stop clears them).
pub fn dma_running<M: Mmio>(regs: &Regs<M>, m: &MacRegs) -> bool {
    let q = xdctl::QUEUE_ENABLE;
    regs.read(r::RCTL) & rctl::EN != 0
        || regs.read(m.rxdctl()) & q != 0
        || regs.read(m.txdctl()) & q != 0
}

/// The longest wait for a queue to stop after its ENABLE bit was cleared.
const QUEUE_STOP_TIMEOUT: Duration = Duration::from_millis(10);

/// Takes ownership from firmware and asks for link (§10.2 step 2); STATUS after waiting at
/// most `wait` for link up (a missing cable is not an error: the link event comes later).
pub fn link_up<M: Mmio>(regs: &Regs<M>, wait: Duration) -> Status {
    regs.modify(r::CTRL_EXT, ctrl_ext::DRV_LOAD, 0);
    regs.update(reg::CTRL, Ctrl::SLU, Ctrl::FRCSPD | Ctrl::FRCDPX);
    regs.wait_for(
        "link up",
        reg::STATUS,
        Status::LU,
        Status::LU,
        wait,
        POLL_STEP * 10,
    )
    .unwrap_or_else(|_| regs.get(reg::STATUS))
}

/// The MAC address the NVM preloaded into RAL0/RAH0.
pub fn read_mac<M: Mmio>(regs: &Regs<M>) -> [u8; 6] {
    let lo = regs.read(r::ral(0)).to_le_bytes();
    let hi = regs.read(r::rah(0)).to_le_bytes();
    [lo[0], lo[1], lo[2], lo[3], hi[0], hi[1]]
}

/// Programs TX queue 0 over `ring` and enables the transmitter (§10.2 step 3).
pub fn setup_tx<M: Mmio>(regs: &Regs<M>, m: &MacRegs, ring: &TxRing) {
    regs.write(m.txdctl(), 0);
    let _ = regs.get(reg::STATUS);
    regs.write(m.tdlen(), ring.byte_len());
    regs.write(m.tdbal(), ring.bus_addr() as u32);
    regs.write(m.tdbah(), (ring.bus_addr() >> 32) as u32);
    regs.write(m.tdh(), 0);
    regs.write(m.tdt(), 0);
    regs.write(m.txdctl(), 8 | 1 << 8 | 16 << 16 | xdctl::QUEUE_ENABLE);
    let t = regs.read(r::TCTL);
    regs.write(
        r::TCTL,
        (t & !tctl::CT_MASK) | tctl::PSP | tctl::RTLC | 15 << tctl::CT_SHIFT | tctl::EN,
    );
}

/// Programs RX queue 0 over `ring` and enables the receiver, promiscuous (PTP multicast
/// addresses, and the lab's frames, must all reach ptpd) with CRC stripping (§10.2 step 4).
pub fn setup_rx<M: Mmio>(regs: &Regs<M>, m: &MacRegs, ring: &RxRing) {
    regs.write(m.rxdctl(), 0);
    regs.write(m.rdbal(), ring.bus_addr() as u32);
    regs.write(m.rdbah(), (ring.bus_addr() >> 32) as u32);
    regs.write(m.rdlen(), ring.byte_len());
    regs.write(m.rdh(), 0);
    regs.write(m.rdt(), 0);
    regs.write(m.srrctl(), SRRCTL_BASE);
    regs.write(m.rxdctl(), 8 | 8 << 8 | 4 << 16 | xdctl::QUEUE_ENABLE);
    regs.write(m.rdt(), ring.initial_tail());
    regs.write(
        r::RCTL,
        rctl::EN | rctl::BAM | rctl::SECRC | rctl::LPE | rctl::UPE | rctl::MPE,
    );
}

/// MSI-X mode with the "other" causes (IVAR_MISC) on vector `other`, auto-cleared and
/// auto-masked, and `OTHER_IMS` enabled (§6).
pub fn route_other_msix<M: Mmio>(regs: &Regs<M>, m: &MacRegs, other: u16) {
    regs.write(
        r::GPIE,
        gpie::NSICR | gpie::MSIX_MODE | gpie::EIAME | gpie::PBA,
    );
    regs.write(r::IVAR_MISC, (other as u32 | IVAR_VALID) << 8);
    let mask = 1u32 << other;
    regs.modify(r::EIAC, mask, 0);
    regs.modify(r::EIAM, mask, 0);
    regs.write(r::EIMS, mask);
    regs.set(m.ims, OTHER_IMS);
}

/// Queue 0's RX cause (IVAR0 entry 0) on vector `v`, auto-cleared and auto-masked. Its TX
/// write-back cause is left unrouted: the transmit path reclaims descriptors itself before it
/// posts, so a TX-done message per frame would only wake the queue thread for nothing (one
/// wake-up per sent frame, measured on the emulated i225 at 10 000 stamps/s).
pub fn route_queue_msix<M: Mmio>(regs: &Regs<M>, v: u16) {
    let e = v as u32 | IVAR_VALID;
    regs.write(r::IVAR0, e);
    let mask = 1u32 << v;
    regs.modify(r::EIAC, mask, 0);
    regs.modify(r::EIAM, mask, 0);
    regs.write(r::EIMS, mask);
}

/// No MSI-X: every cause in ICR (read-to-clear), `causes` enabled in IMS.
pub fn route_shared<M: Mmio>(regs: &Regs<M>, m: &MacRegs, causes: IntCause) {
    regs.write(r::GPIE, gpie::NSICR);
    regs.set(m.ims, causes);
}

/// The in-buffer RX timestamp mode (§8.1, §8.2): `tsyncrxctl` (ENABLED | TYPE_ALL | the
/// family's extras) with SRRCTL.TIMESTAMP, and RXPBS.CFG_TS_EN where the part has it; `None`
/// turns it off in the reverse order. The link and the rings are not touched (seed 003).
pub fn in_buffer_rx_stamps<M: Mmio>(
    regs: &Regs<M>,
    m: &MacRegs,
    tsyncrxctl: Option<TsyncRxCtl>,
    rxpbs: bool,
) {
    use intel_regs::e1000::rxpbs::CFG_TS_EN;
    match tsyncrxctl {
        None => {
            regs.set(reg::TSYNCRXCTL, TsyncRxCtl::empty());
            regs.write(m.srrctl(), SRRCTL_BASE);
            if rxpbs {
                regs.modify(r::RXPBS, 0, CFG_TS_EN);
            }
        }
        Some(v) => {
            if rxpbs {
                regs.modify(r::RXPBS, CFG_TS_EN, 0);
            }
            regs.write(m.srrctl(), SRRCTL_BASE | srrctl::TIMESTAMP);
            regs.set(reg::TSYNCRXCTL, v);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::MacRegs;
    use intel_regs::{e1000 as e, igb as b, igc as c};

    #[test]
    fn queue_registers_follow_each_familys_base() {
        let igc = MacRegs {
            icr: c::reg::ICR,
            ims: c::reg::IMS,
            imc: c::reg::IMC,
            rxq: c::rdbal(0),
            txq: c::tdbal(0),
        };
        let igb = MacRegs {
            icr: b::reg::ICR,
            ims: b::reg::IMS,
            imc: b::reg::IMC,
            rxq: b::rdbal(0),
            txq: b::tdbal(0),
        };
        let igc_q = [
            c::rdbah(0),
            c::rdlen(0),
            c::srrctl(0),
            c::rdh(0),
            c::rdt(0),
            c::rxdctl(0),
        ];
        let igb_q = [
            b::rdbah(0),
            b::rdlen(0),
            b::srrctl(0),
            b::rdh(0),
            b::rdt(0),
            b::rxdctl(0),
        ];
        for (m, q) in [(igc, igc_q), (igb, igb_q)] {
            assert_eq!(
                [
                    m.rdbah(),
                    m.rdlen(),
                    m.srrctl(),
                    m.rdh(),
                    m.rdt(),
                    m.rxdctl()
                ],
                q
            );
        }
        let igc_t = [c::tdbah(0), c::tdlen(0), c::tdh(0), c::tdt(0), c::txdctl(0)];
        let igb_t = [b::tdbah(0), b::tdlen(0), b::tdh(0), b::tdt(0), b::txdctl(0)];
        for (m, t) in [(igc, igc_t), (igb, igb_t)] {
            assert_eq!([m.tdbah(), m.tdlen(), m.tdh(), m.tdt(), m.txdctl()], t);
        }
    }

    /// Names every `e1000` item this module programs, as `e1000`, `igc` and `igb` paths.
    macro_rules! shared {
        ($($($seg:ident)::+),* $(,)?) => {
            [$((stringify!($($seg)::+), e::$($seg)::+, c::$($seg)::+, b::$($seg)::+)),*]
        };
    }

    /// This module takes its bits and offsets from `e1000` and writes them on both families; a
    /// family module that shadows one with its own value (igc and igb re-export `e1000` and may
    /// add to it) would make the family's name and this module's write disagree. (The typed
    /// registers' bits are one type per register, `intel_regs::fields`, so they cannot be
    /// shadowed and are not listed.)
    #[test]
    fn igc_and_igb_keep_every_shared_value_this_module_programs() {
        let items = shared![
            ctrl_ext::DRV_LOAD,
            gpie::NSICR,
            gpie::MSIX_MODE,
            gpie::EIAME,
            gpie::PBA,
            tctl::PSP,
            tctl::EN,
            tctl::RTLC,
            tctl::CT_MASK,
            tctl::CT_SHIFT,
            rctl::EN,
            rctl::BAM,
            rctl::SECRC,
            rctl::LPE,
            rctl::UPE,
            rctl::MPE,
            xdctl::QUEUE_ENABLE,
            srrctl::TIMESTAMP,
            srrctl::DESCTYPE_ADV_ONEBUF,
            srrctl::BSIZEHDR_SHIFT,
            rxpbs::CFG_TS_EN,
            IVAR_VALID,
            CTRL,
            STATUS,
            EECD,
            CTRL_EXT,
            RCTL,
            TCTL,
            RXPBS,
            GPIE,
            EIMS,
            EIAC,
            EIAM,
            IVAR0,
            IVAR_MISC,
            TSYNCRXCTL,
        ];
        for (name, shared, igc, igb) in items {
            assert_eq!((igc, igb), (shared, shared), "{name}: igc, igb vs e1000");
        }
        for n in 0..16 {
            assert_eq!([c::ral(n), b::ral(n)], [e::ral(n); 2], "RAL({n})");
            assert_eq!([c::rah(n), b::rah(n)], [e::rah(n); 2], "RAH({n})");
        }
    }
}
