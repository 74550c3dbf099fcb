//! Register-level model of the Intel i225/i226 (Linux `igc`): register file and reset, link,
//! interrupts, the time-sync clock, the TX/RX data path of queue 0 with TX timestamp sets and
//! RX timestamps in the packet buffer, and the TXSTMPH_0 interrupt bug. Section numbers (§n)
//! refer to `shared/reference/intel-timesync.md`.
//!
//! The model is a plain state machine in the rust-vmm vm-superio style: the emulated PCI
//! backend calls [`Device::read32`]/[`Device::write32`] with a BAR offset, the model changes
//! state and signals MSI-X through the [`DeviceHost`]; true time comes from the injected
//! [`TimeSource`]. State is split by function:
//!
//! - `regs`: storage for every offset without behaviour, loaded with power-on values;
//! - `link` / `phy`: STATUS link bits and the MDIC PHY;
//! - `irq`: ICR/IMS/EICR/... and MSI-X delivery;
//! - `tsync`: SYSTIM (the [`Phc`](crate::phc::Phc)), TIMINCA, TSAUXC, TSICR/TSIM and the
//!   §7.2 TXTS interrupt gate;
//! - `txstamp`: TSYNCTXCTL and the four TXSTMPL/H sets (§7);
//! - `tx` / `rx`: the queue-0 engines (§9, §10; RX stamps with TSYNCRXCTL.TYPE = ALL, §8);
//! - `addrfilter`: the RX destination-address filter; `hwstats`: the statistics block;
//! - `phy`, `nvm`: the PHY behind MDIC, NVM/semaphores/PHPM; `known`: implemented offsets;
//! - `noise`: jitter and quantisation of the stamps they latch ([`I225Config::stamp_jitter_ns`],
//!   [`I225Config::stamp_quantum_ns`]);
//! - `hooks`: actions armed for after a given register read (deterministic races).
//!
//! The MAC/PHY is attached to a [`WirePort`] ([`I225::attach_wire`]). Without one the model
//! keeps the part-1 link behaviour (the link follows the cable flag and CTRL.SLU) and frames
//! it sends are counted and dropped; with one, the link also needs
//! [`WirePort::link_up`] (a [`Disconnected`](crate::wire::Disconnected) wire keeps it down).
//!
//! # The §7.2 quirk
//!
//! On i225/i226 "the interrupt is only cleared if the IGC_TXSTMPH_0 register is read" (seed
//! 000, patch 4/4). The model puts a gate in front of the TXTS interrupt: it closes when a TX
//! stamp asserts TXTS and reopens on a TXSTMPH_0 read. Stamps latched while it is closed
//! still set TXTT_n and TSICR.TXTS but raise no interrupt; when the gate reopens with TXTS
//! still pending in `TSICR & TSIM`, the interrupt is raised then \[assumption\].
//! [`I225Config::tx_stamp_quirk`] = false gives an ideal part.
//!
//! # Model assumptions
//!
//! - Port reset (CTRL.RST, and the older CTRL.DEV_RST) completes at once: the register file,
//!   link and interrupt state return to power-on values, CTRL.RST self-clears and EECD.AUTO_RD
//!   is already set when the driver polls it. The time-sync timer (SYSTIM, TIMINCA, TIMADJ,
//!   TSAUXC) keeps running through it \[U\]; TSICR/TSIM are cleared. The PHY and the MSI-X
//!   table (BAR3) are not reset.
//! - The link comes up as soon as CTRL.SLU is set with the cable connected (no
//!   autonegotiation delay). A wire attached or detached changes the link at the next
//!   [`poll`](Device::poll), which raises ICR.LSC then.
//! - TXSTMPL_n/TXSTMPH_n are read-only: writes are ignored \[assumption\]. TSYNCTXCTL's TXTT
//!   bits are read-only to software \[assumption\].
//! - Reads of write-only registers (ICS, IMC, EICS, EIMC) return 0; writes to read-only bits
//!   (STATUS, EECD.PRES/AUTO_RD/FLASH_DETECTED, PHPM.RST_COMP, the statistics block) are
//!   ignored. Offsets beyond a BAR read all ones (an unsupported request) and drop writes; an
//!   unaligned offset is rounded down to its dword.
//! - An offset outside the implemented set (`known`) reads back what was written, and every
//!   access to it is counted and its first logged ([`I225::unimplemented_accesses`]).
//! - INTx: the legacy line is a level, `ICR & IMS` outside MSI-X mode
//!   ([`I225::intx_level`]); an asserted ICR read clears it and auto-masks IMS by IAM.

mod addrfilter;
mod csum;
mod hooks;
mod hwstats;
mod irq;
mod known;
mod link;
mod noise;
mod nvm;
mod phy;
mod regfile;
mod rx;
mod tsync;
mod tx;
mod txstamp;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_datapath;

use std::sync::Arc;
use std::time::Duration;

use intel_regs::ids;
use intel_regs::igc::*;
use ptp_pci::PciIds;
use ptp_pci::emulated::{Device, DeviceHost};

pub use hooks::{MAX_ARMED_READS, ReadAction};
pub use irq::OTHER_CAUSES;
pub use known::UnimplementedAccess;
pub use link::LinkSpeed;
pub use tx::MAX_TX_FRAME;
pub use txstamp::TX_STAMP_SETS;

use crate::clock::TimeSource;
use crate::phc::SysTime;
use crate::truth::SharedObserver;
use crate::wire::{WirePort, WireStats};
use hooks::ReadHooks;
use irq::Interrupts;
use link::Link;
use phy::Phy;
use regfile::{Counters, RegFile};
use tsync::TimeSync;
use txstamp::TxStamps;

/// Size of BAR0, the register space.
pub const BAR0_LEN: u32 = 128 * 1024;
/// Size of BAR3, which holds only the MSI-X table (at 0) and PBA (at 0x2000).
pub const BAR3_LEN: u32 = 16 * 1024;
/// MSI-X table entries of i225/i226: one "other" vector and four queue vectors.
pub const MSIX_VECTORS: u16 = 5;

/// TSAUXC value read from an i226 after power-on in a third-party report (§2.3 \[U\]):
/// DISABLE1..3, DIS_TS_CLEAR and EN_CLK0. Timer 0 still counts (DISABLE0 clear). Pass it as
/// [`I225Config::tsauxc_power_on`] to check that a driver does not assume TSAUXC = 0.
pub const I226_REPORTED_TSAUXC: u32 = 0x7800_0004;

/// PCI class "network controller", subclass "Ethernet".
const CLASS_NETWORK: u8 = 0x02;

/// How to build an [`I225`].
#[derive(Clone)]
pub struct I225Config {
    /// PCI device ID: [`ids::EMU_I225`] or [`ids::EMU_I226`] (any igc ID works).
    pub device_id: u16,
    /// PCI revision (i225 B3 parts show 3, i226 parts 4).
    pub revision: u8,
    /// The MAC address "in NVM": preloaded into RAL0/RAH0 at power-on and reset.
    pub mac: [u8; 6],
    /// The crystal's frequency error in ppb (changeable later with
    /// [`I225::set_osc_error_ppb`]).
    pub osc_error_ppb: i64,
    /// SYSTIM at power-on, in ns.
    pub initial_systim_ns: u64,
    /// True time: a [`VirtualClock`](crate::clock::VirtualClock) for deterministic tests, a
    /// [`HostClock`](crate::clock::HostClock) for real time.
    pub clock: Arc<dyn TimeSource>,
    /// Speed the link comes up at.
    pub link_speed: LinkSpeed,
    /// Whether the cable is plugged in at power-on.
    pub cable_connected: bool,
    /// TSAUXC at power-on. Default 0 (timer 0 counts); see [`I226_REPORTED_TSAUXC`].
    pub tsauxc_power_on: u32,
    /// Model the §7.2 bug: after a TXTS interrupt no other comes until TXSTMPH_0 is read.
    /// Default true (the real part); false for an ideal part to compare against.
    pub tx_stamp_quirk: bool,
    /// A TXSTMPH_0 read clears all TXTT bits, not only TXTT_0 (§7.1, from driver comments
    /// \[U\]). Default true.
    pub txstmph0_clears_all: bool,
    /// True time from the TX engine picking a frame up to its first bit on the wire, ns
    /// (descriptor and data fetch, MAC and PHY). Default [`DEFAULT_TX_PIPELINE_NS`].
    pub tx_pipeline_ns: u64,
    /// Timestamp resolution, ns: every latched TX stamp (TXSTMPL/H) and RX stamp (buffer
    /// header) is truncated down to a multiple of it, after the jitter, as a counter with
    /// that period would show it. 0 (the default) or 1: exact to the ns; 8 models a
    /// 125 MHz timestamp counter.
    pub stamp_quantum_ns: u32,
    /// Timestamp jitter, ns: every latched TX and RX stamp is the exact value plus a uniform
    /// integer draw from −jitter..=+jitter, before the quantisation. Default 0.
    pub stamp_jitter_ns: u32,
    /// Seed of the stamp jitter draws (TX and RX have separate streams of it): the same seed
    /// and the same traffic give the same stamps. Default 0.
    pub seed: u64,
}

/// Default [`I225Config::tx_pipeline_ns`]: 1 µs \[assumption: a plausible order of magnitude
/// for a PCIe NIC's descriptor and data fetch; no figure is in the reference\].
pub const DEFAULT_TX_PIPELINE_NS: u64 = 1_000;

impl std::fmt::Debug for I225Config {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("I225Config")
            .field("device_id", &format_args!("{:#06x}", self.device_id))
            .field("revision", &self.revision)
            .field("mac", &self.mac)
            .field("osc_error_ppb", &self.osc_error_ppb)
            .field("initial_systim_ns", &self.initial_systim_ns)
            .field("link_speed", &self.link_speed)
            .field("cable_connected", &self.cable_connected)
            .field(
                "tsauxc_power_on",
                &format_args!("{:#010x}", self.tsauxc_power_on),
            )
            .field("tx_stamp_quirk", &self.tx_stamp_quirk)
            .field("txstmph0_clears_all", &self.txstmph0_clears_all)
            .field("tx_pipeline_ns", &self.tx_pipeline_ns)
            .field("stamp_quantum_ns", &self.stamp_quantum_ns)
            .field("stamp_jitter_ns", &self.stamp_jitter_ns)
            .field("seed", &self.seed)
            .finish_non_exhaustive()
    }
}

impl I225Config {
    /// An i225-LM ([`ids::EMU_I225`]) with a perfect crystal, SYSTIM 0, cable connected at
    /// 2.5 Gb/s and a locally administered MAC.
    pub fn i225(clock: Arc<dyn TimeSource>) -> Self {
        Self {
            device_id: ids::EMU_I225,
            revision: 3,
            mac: [0x02, 0x00, 0x00, 0x00, 0x02, 0x25],
            osc_error_ppb: 0,
            initial_systim_ns: 0,
            clock,
            link_speed: LinkSpeed::Mbps2500,
            cable_connected: true,
            tsauxc_power_on: 0,
            tx_stamp_quirk: true,
            txstmph0_clears_all: true,
            tx_pipeline_ns: DEFAULT_TX_PIPELINE_NS,
            stamp_quantum_ns: 0,
            stamp_jitter_ns: 0,
            seed: 0,
        }
    }

    /// An i226-LM ([`ids::EMU_I226`]); same model, the part differs only in its IDs here.
    pub fn i226(clock: Arc<dyn TimeSource>) -> Self {
        Self {
            device_id: ids::EMU_I226,
            revision: 4,
            mac: [0x02, 0x00, 0x00, 0x00, 0x02, 0x26],
            ..Self::i225(clock)
        }
    }
}

/// Data-path and fault counters of an [`I225`] (model-side; survive port resets).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct I225Stats {
    /// Frames that left the MAC (to the wire or, without one, nowhere).
    pub tx_frames: u64,
    /// Their bytes (after padding).
    pub tx_bytes: u64,
    /// Frames sent with no wire attached (dropped).
    pub tx_no_wire: u64,
    /// Malformed TX frames dropped (bad buffer address, zero length, no EOP in a full ring,
    /// ...).
    pub tx_malformed: u64,
    /// Frames whose checksums were inserted (POPTS.IXSM/TXSM with a context).
    pub tx_csum_inserted: u64,
    /// Frames whose checksum request the model could not honour (offsets outside the frame,
    /// SCTP): sent unchanged.
    pub tx_csum_skipped: u64,
    /// TSO frames (DCMD.TSE) dropped: segmentation is not modelled.
    pub tx_tso_unmodelled: u64,
    /// Polls at which the TX queue stalled on a descriptor DMA could not read.
    pub tx_dma_errors: u64,
    /// Frames written to an RX buffer.
    pub rx_frames: u64,
    /// Their bytes (the frame only, without header or FCS).
    pub rx_bytes: u64,
    /// Of those, frames with a timestamp header (TSIP).
    pub rx_stamped: u64,
    /// Frames dropped for want of a free RX descriptor (RX missed).
    pub rx_missed: u64,
    /// Frames dropped as larger than the RX buffer.
    pub rx_too_big: u64,
    /// Frames dropped as shorter than an Ethernet header.
    pub rx_runt: u64,
    /// Frames dropped because RX was disabled or the link down.
    pub rx_not_ready: u64,
    /// Frames dropped by the destination-address filter (RAL/RAH, MTA, RCTL.UPE/MPE/BAM).
    pub rx_filtered: u64,
    /// RX descriptors or buffers DMA could not reach.
    pub rx_dma_errors: u64,
    /// TX stamps latched into a set.
    pub tx_stamps_latched: u64,
    /// TX stamps lost because their set still held an unread stamp.
    pub tx_stamps_lost: u64,
    /// TX stamps swallowed by [`I225::drop_tx_stamps`] (injected).
    pub tx_stamps_dropped: u64,
    /// Releasing TXSTMPH reads a stuck TXTT bit survived ([`I225::stick_txtt`], injected).
    pub txtt_stuck_reads: u64,
    /// Time-sync interrupts swallowed by [`I225::drop_ts_interrupts`] (injected).
    pub ts_irqs_dropped: u64,
    /// TX stamps whose TXTS interrupt the closed §7.2 gate held back.
    pub txts_held_by_quirk: u64,
}

/// The i225/i226 model. See the module docs for what is modelled and assumed.
pub struct I225 {
    ids: PciIds,
    mac: [u8; 6],
    tsauxc_power_on: u32,
    clock: Arc<dyn TimeSource>,
    /// BAR0 storage for every offset without behaviour of its own.
    regs: RegFile,
    /// BAR3: MSI-X table and PBA, storage only (the backend delivers vectors itself).
    msix: RegFile,
    link: Link,
    phy: Phy,
    nvm: nvm::Nvm,
    irq: Interrupts,
    tsync: TimeSync,
    txs: TxStamps,
    hooks: ReadHooks,
    wire: Option<Box<dyn WirePort>>,
    /// See [`I225Config::tx_pipeline_ns`].
    tx_pipeline_ns: u64,
    /// TX context slots of queue 0 (`csum`).
    tx_ctx: [csum::TxContext; csum::SLOTS],
    /// The wire is busy with earlier frames until this instant.
    tx_busy_until: u64,
    /// Jitter and quantisation of latched stamps (model-side; survives port resets).
    noise: noise::StampNoise,
    /// Time-sync interrupts still to be swallowed (fault injection).
    drop_ts_irqs: u64,
    stats: I225Stats,
    /// The part's clear-on-read statistics block (0x4000–0x4138).
    hwstats: hwstats::HwStats,
    /// Accesses to offsets the model does not implement (`known`).
    unimpl: known::Unimplemented,
    counters: Counters,
    port_resets: u64,
    /// Where PHC law changes and register/wire counters are reported (the ground-truth
    /// record); `None` in deterministic tests.
    observer: Option<SharedObserver>,
    /// Cable losses last reported to the observer.
    reported_lost: u64,
}

impl std::fmt::Debug for I225 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("I225")
            .field("device", &format_args!("{:#06x}", self.ids.device))
            .field("link_up", &self.link.up)
            .field("wire", &self.wire.is_some())
            .field("phc_ns", &self.phc_now_ns())
            .finish_non_exhaustive()
    }
}

impl I225 {
    /// A device just after power-on (NVM loaded, link down until the driver sets CTRL.SLU).
    pub fn new(cfg: I225Config) -> Self {
        let t = cfg.clock.now_ns();
        let mut dev = Self {
            ids: PciIds {
                vendor: ids::VENDOR_INTEL,
                device: cfg.device_id,
                class: CLASS_NETWORK,
                subclass: 0,
                interface: 0,
                revision: cfg.revision,
                subsystem_vendor: ids::VENDOR_INTEL,
                subsystem: 0,
            },
            mac: cfg.mac,
            tsauxc_power_on: cfg.tsauxc_power_on,
            regs: RegFile::new(BAR0_LEN),
            msix: RegFile::new(BAR3_LEN),
            link: Link {
                cable: cfg.cable_connected,
                speed: cfg.link_speed,
                up: false,
            },
            phy: Phy::new(),
            nvm: nvm::Nvm::new(cfg.mac),
            irq: Interrupts::default(),
            tsync: TimeSync::new(
                t,
                cfg.initial_systim_ns,
                cfg.osc_error_ppb,
                cfg.tsauxc_power_on,
            ),
            txs: TxStamps::new(cfg.txstmph0_clears_all),
            hooks: ReadHooks::default(),
            wire: None,
            tx_pipeline_ns: cfg.tx_pipeline_ns,
            tx_ctx: Default::default(),
            tx_busy_until: 0,
            noise: noise::StampNoise::new(cfg.stamp_quantum_ns, cfg.stamp_jitter_ns, cfg.seed),
            drop_ts_irqs: 0,
            stats: I225Stats::default(),
            hwstats: hwstats::HwStats::default(),
            unimpl: known::Unimplemented::default(),
            counters: Counters::new(BAR0_LEN),
            port_resets: 0,
            observer: None,
            reported_lost: 0,
            clock: cfg.clock,
        };
        dev.tsync.set_txts_quirk(cfg.tx_stamp_quirk);
        dev.load_power_on();
        // PCIe: MSI-X vector control = masked at reset (storage only, see `msix`).
        for n in 0..MSIX_VECTORS as u32 {
            dev.msix.set(n * 16 + 12, 1);
        }
        dev
    }

    /// [`I225::new`] with [`I225Config::i225`].
    pub fn new_i225(clock: Arc<dyn TimeSource>) -> Self {
        Self::new(I225Config::i225(clock))
    }

    /// [`I225::new`] with [`I225Config::i226`] (for `igcd --emulate i226`).
    pub fn new_i226(clock: Arc<dyn TimeSource>) -> Self {
        Self::new(I225Config::i226(clock))
    }

    /// The part name igcd would log for this device ID.
    pub fn part_name(&self) -> &'static str {
        ids::igc_part(self.ids.vendor, self.ids.device).map_or("Intel igc (unknown ID)", |p| p.name)
    }

    fn now(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Reports PHC law changes and BAR/cable counters to `observer` from now on (the
    /// ground-truth record, [`crate::truth`]); the law in force is published at once.
    pub fn set_observer(&mut self, observer: Option<SharedObserver>) {
        self.observer = observer;
        self.reported_lost = 0;
        self.change_phc(|_, _| {});
    }

    /// Applies a PHC law change at the current true time. With an observer the change runs
    /// inside its update, so the time of the change is read after readers were warned and the
    /// new law is published before the driver's access returns.
    fn change_phc(&mut self, f: impl FnOnce(&mut TimeSync, u64)) {
        let Some(obs) = self.observer.clone() else {
            let t = self.now();
            f(&mut self.tsync, t);
            return;
        };
        let mut f = Some(f);
        obs.phc_law_update(&mut || {
            let t = self.clock.now_ns();
            if let Some(f) = f.take() {
                f(&mut self.tsync, t);
            }
            self.tsync.phc.law()
        });
    }

    /// Reports the cable's loss count if it moved.
    fn report_wire_lost(&mut self) {
        if let Some(obs) = &self.observer {
            let lost = self.wire.as_ref().map_or(0, |w| w.stats().lost);
            if lost != self.reported_lost {
                self.reported_lost = lost;
                obs.wire_lost(lost);
            }
        }
    }

    /// Non-zero register values after power-on or port reset (§10.1): the NVM MAC in
    /// RAL0/RAH0 with RAH.AV, EECD.AUTO_RD (NVM read done).
    fn load_power_on(&mut self) {
        let m = self.mac;
        self.regs
            .set(ral(0), u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        self.regs
            .set(rah(0), u32::from_le_bytes([m[4], m[5], 0, 0]) | rah::AV);
        self.regs.set(EECD, eecd::PRES | eecd::AUTO_RD);
    }

    /// CTRL.RST / CTRL.DEV_RST: see the module docs for what survives.
    fn port_reset(&mut self) {
        self.regs.clear();
        self.load_power_on();
        self.hwstats = hwstats::HwStats::default();
        self.tx_ctx = Default::default();
        self.irq.reset();
        self.tsync.port_reset();
        self.txs.port_reset();
        // CTRL.SLU is now clear, so the link drops; ICR was just reset, so no LSC is left
        // pending for it (the driver sees LSC when it brings the link back up).
        self.link.update(false);
        self.port_resets += 1;
    }

    fn write_ctrl(&mut self, v: u32, host: &mut dyn DeviceHost) {
        if v & (ctrl::RST | ctrl::DEV_RST) != 0 {
            // The reset wipes CTRL too, so the other bits of this write do not stick.
            self.port_reset();
            return;
        }
        if v & ctrl::PHY_RST != 0 {
            self.phy.reset();
        }
        // PHY_RST self-clears: the PHY reset completes at once.
        self.regs.set(CTRL, v & !ctrl::PHY_RST);
        self.update_link(host);
    }

    /// Re-evaluates STATUS.LU: CTRL.SLU, the cable flag and, with a wire, its link partner.
    fn update_link(&mut self, host: &mut dyn DeviceHost) {
        let partner = self.wire.as_ref().is_none_or(|w| w.link_up());
        let slu = self.regs.get(CTRL) & ctrl::SLU != 0;
        if self.link.update(slu && partner) {
            self.irq.cause(icr::LSC, host);
        }
    }

    /// Raises ICR.TS if the time-sync causes just became pending (§2.4, §6). A
    /// [`drop_ts_interrupts`](Self::drop_ts_interrupts) fault lets ICR.TS show but sends
    /// no message.
    fn update_ts(&mut self, host: &mut dyn DeviceHost) {
        if self.tsync.take_ts_edge() {
            if self.drop_ts_irqs > 0 {
                self.drop_ts_irqs -= 1;
                self.stats.ts_irqs_dropped += 1;
                self.irq.cause_silent(icr::TS);
            } else {
                self.irq.cause(icr::TS, host);
            }
        }
    }

    /// Which TX stamp set a TXSTMPL/TXSTMPH offset belongs to.
    fn stamp_set(offset: u32, regs: &[u32; TX_STAMP_SETS]) -> Option<usize> {
        regs.iter().position(|&r| r == offset)
    }

    /// STATUS: link bits plus GIO_MASTER_ENABLE, which stays set until the driver writes
    /// CTRL.GIO_MASTER_DISABLE (no DMA is ever in flight, so it clears at once).
    fn status(&self) -> u32 {
        let gio = if self.regs.get(CTRL) & ctrl::GIO_MASTER_DISABLE == 0 {
            status::GIO_MASTER_ENABLE
        } else {
            0
        };
        self.link.status_bits() | gio
    }

    /// What a read of BAR0 `offset` would return now, without its side effects (no
    /// read-to-clear, no SYSTIM latch). For tests and inspection.
    pub fn peek(&self, offset: u32) -> u32 {
        let offset = offset & !3;
        match offset {
            STATUS => self.status(),
            MDIC => self.phy.mdic(),
            EECD => nvm::eecd_value(self.regs.get(EECD)),
            EERD => self.nvm.eerd(),
            o if (hwstats::FIRST..=hwstats::LAST).contains(&o) => self.hwstats.peek(o),
            PHPM => nvm::phpm_value(self.regs.get(PHPM)),
            ICR => self.irq.icr_value(),
            ICS | IMC | EICS | EIMC => 0,
            IMS => self.irq.ims,
            IAM => self.irq.iam,
            GPIE => self.irq.gpie,
            EICR => self.irq.eicr,
            EIMS => self.irq.eims,
            EIAC => self.irq.eiac,
            EIAM => self.irq.eiam,
            IVAR_MISC => self.irq.ivar_misc,
            SYSTIML => self.tsync.peek_systiml(self.now()),
            SYSTIMH => self.tsync.systimh(),
            TIMINCA => self.tsync.phc.timinca(),
            TIMADJ => self.tsync.timadj,
            TSAUXC => self.tsync.tsauxc,
            TSICR => self.tsync.tsicr,
            TSIM => self.tsync.tsim,
            TSYNCTXCTL => self.txs.ctl(),
            o if Self::stamp_set(o, &TXSTMPL).is_some() => {
                Self::stamp_set(o, &TXSTMPL).map_or(0, |n| self.txs.set(n).nsec)
            }
            o if Self::stamp_set(o, &TXSTMPH).is_some() => {
                Self::stamp_set(o, &TXSTMPH).map_or(0, |n| self.txs.set(n).sec)
            }
            o if o < BAR0_LEN => self.regs.get(o),
            _ => u32::MAX,
        }
    }

    /// A BAR0 read with its side effects (§6 ICR/EICR read-to-clear, §3 SYSTIML latch,
    /// §2.4 TSICR read-to-clear, §7.1 TXSTMPH release, §7.2 gate).
    fn read_bar0(&mut self, offset: u32, host: &mut dyn DeviceHost) -> u32 {
        if let Some(n) = Self::stamp_set(offset, &TXSTMPH) {
            let v = self.txs.read_h(n);
            if n == 0 {
                self.tsync.reopen_txts_gate();
                self.update_ts(host);
            }
            return v;
        }
        match offset {
            ICR => self.irq.read_icr(host),
            EICR => self.irq.read_eicr(),
            o if (hwstats::FIRST..=hwstats::LAST).contains(&o) => self.hwstats.read(o),
            SWSM => {
                let (v, after) = nvm::swsm_read(self.regs.get(SWSM));
                self.regs.set(SWSM, after);
                v
            }
            SYSTIML => {
                let t = self.now();
                self.tsync.read_systiml(t)
            }
            TSICR => {
                let v = self.tsync.read_tsicr();
                self.update_ts(host);
                v
            }
            _ => self.peek(offset),
        }
    }

    fn write_bar0(&mut self, offset: u32, v: u32, host: &mut dyn DeviceHost) {
        match offset {
            CTRL => self.write_ctrl(v, host),
            // Read-only.
            STATUS => {}
            o if (hwstats::FIRST..=hwstats::LAST).contains(&o) => {}
            // AUTO_RD is read-only status: the NVM read is always complete.
            // PRES/AUTO_RD read-only set, FLASH_DETECTED read-only clear (`nvm`).
            EECD => self.regs.set(EECD, nvm::eecd_value(v)),
            EERD => self.nvm.write_eerd(v),
            SWSM => self.regs.set(SWSM, nvm::swsm_write(v)),
            PHPM => self.regs.set(PHPM, v & !phpm::RST_COMP),
            MDIC => self.phy.write_mdic(v, self.link.up),
            ICR => self.irq.write_icr(v, host),
            ICS => self.irq.cause(v, host),
            IMS => self.irq.set_ims(v, host),
            IMC => self.irq.clear_ims(v, host),
            IAM => self.irq.iam = v,
            GPIE => self.irq.gpie = v,
            EICS => self.irq.set_eics(v, host),
            EIMS => self.irq.set_eims(v, host),
            EIMC => self.irq.clear_eims(v),
            EIAC => self.irq.eiac = v,
            EIAM => self.irq.eiam = v,
            EICR => self.irq.write_eicr(v),
            IVAR_MISC => self.irq.ivar_misc = v,
            SYSTIML => self.tsync.write_systiml(v),
            SYSTIMH => self.change_phc(|ts, t| ts.write_systimh(t, v)),
            TIMINCA => self.change_phc(|ts, t| ts.phc.set_timinca(t, v)),
            TIMADJ => self.tsync.timadj = v,
            TSYNCTXCTL => self.txs.write_ctl(v),
            o if o == TSYNCRXCTL || (0..4).any(|n| o == srrctl(n)) => {
                self.record_rx_ts_config(o, v);
                self.regs.set(o, v);
            }
            o if Self::stamp_set(o, &TXSTMPL).is_some()
                || Self::stamp_set(o, &TXSTMPH).is_some() => {}
            TSAUXC => self.change_phc(|ts, t| ts.write_tsauxc(t, v)),
            TSICR => {
                self.tsync.write_tsicr(v);
                self.update_ts(host);
            }
            TSIM => {
                self.tsync.tsim = v;
                self.update_ts(host);
            }
            // Everything else is storage, including the ring registers (TDH/RDH are also
            // written by the engines; TDT/RDT writes take effect at the next poll),
            // TSYNCRXCTL, RXPBS, SRRCTL and IVAR0, which the engines read when they run.
            o => self.regs.set(o, v),
        }
    }

    // --- Model-side hooks (the "hardware" a test controls) ---

    /// Plugs (true) or unplugs the cable. A resulting link change raises ICR.LSC.
    pub fn set_cable(&mut self, connected: bool, host: &mut dyn DeviceHost) {
        self.link.cable = connected;
        self.update_link(host);
    }

    /// Whether the cable is plugged in.
    pub fn cable(&self) -> bool {
        self.link.cable
    }

    /// Changes the negotiated speed; with the link up this is a renegotiation and raises
    /// ICR.LSC.
    pub fn set_link_speed(&mut self, speed: LinkSpeed, host: &mut dyn DeviceHost) {
        if speed != self.link.speed {
            self.link.speed = speed;
            if self.link.up {
                self.irq.cause(icr::LSC, host);
            }
        }
    }

    /// The speed the link runs (or would run) at.
    pub fn link_speed(&self) -> LinkSpeed {
        self.link.speed
    }

    /// Whether STATUS.LU is set.
    pub fn link_up(&self) -> bool {
        self.link.up
    }

    /// Sets TSICR cause `bits` as a time-sync event would; an enabled cause raises ICR.TS and
    /// routes it (§2.4, §6). This is a raw cause: it bypasses the §7.2 gate (neither closes
    /// nor waits for it); TX stamps latched by the TX engine go through the gate.
    pub fn raise_tsicr(&mut self, bits: u32, host: &mut dyn DeviceHost) {
        self.tsync.raise(bits);
        self.update_ts(host);
    }

    /// Changes the crystal's frequency error now (ppb, clamped to ±999 999 999).
    pub fn set_osc_error_ppb(&mut self, ppb: i64) {
        self.change_phc(|ts, t| ts.phc.set_osc_error_ppb(t, ppb));
    }

    /// The crystal's frequency error in ppb.
    pub fn osc_error_ppb(&self) -> i64 {
        self.tsync.phc.osc_error_ppb()
    }

    // --- Inspection ---

    /// SYSTIM now, in ns (no latching side effect).
    pub fn phc_now_ns(&self) -> u64 {
        self.tsync.phc.ns_at(self.now())
    }

    /// SYSTIM now as SYSTIMH:SYSTIML.
    pub fn phc_time(&self) -> SysTime {
        self.tsync.time_at(self.now())
    }

    /// Whether timer 0 counts (TSAUXC.DISABLE0 clear).
    pub fn phc_running(&self) -> bool {
        self.tsync.phc.is_running()
    }

    /// TIMINCA as last written.
    pub fn timinca(&self) -> u32 {
        self.tsync.phc.timinca()
    }

    /// TSAUXC as last written (or its power-on value).
    pub fn tsauxc(&self) -> u32 {
        self.tsync.tsauxc
    }

    /// TSAUXC after power-on, as configured.
    pub fn tsauxc_power_on(&self) -> u32 {
        self.tsauxc_power_on
    }

    /// The MAC address in NVM.
    pub fn mac(&self) -> [u8; 6] {
        self.mac
    }

    /// Port resets (CTRL.RST/DEV_RST) since power-on.
    pub fn port_resets(&self) -> u64 {
        self.port_resets
    }

    /// BAR0 reads of the register at `offset` since the last [`reset_counters`](Self::reset_counters).
    pub fn reads(&self, offset: u32) -> u64 {
        self.counters.reads(offset)
    }

    /// BAR0 writes of the register at `offset`.
    pub fn writes(&self, offset: u32) -> u64 {
        self.counters.writes(offset)
    }

    /// Reads served on all BARs.
    pub fn total_reads(&self) -> u64 {
        self.counters.total_reads
    }

    /// Writes served on all BARs.
    pub fn total_writes(&self) -> u64 {
        self.counters.total_writes
    }

    /// The INTx line as a level: true while `ICR & IMS != 0` outside MSI-X mode (GPIE.MSIX_MODE
    /// clear). A device host serving the model over INTx (QEMU's x-pci-proxy-dev) polls it
    /// after every access and every [`poll`](Device::poll) and signals the guest while it is
    /// true; an ICR read (clear-on-read, and IAM auto-mask) drops it.
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
    /// resets and [`reset_counters`](Self::reset_counters) keep the record.
    pub fn unimplemented_accesses(&self) -> Vec<UnimplementedAccess> {
        self.unimpl.list()
    }

    /// Forgets the unimplemented-access record.
    pub fn clear_unimplemented_accesses(&mut self) {
        self.unimpl.clear();
    }

    /// Whether the model implements BAR0 `offset` (behaviour, or the part's plain
    /// configuration storage); accesses elsewhere are recorded.
    pub fn implements(offset: u32) -> bool {
        known::implemented(offset & !3)
    }

    /// Zeroes the MMIO and interrupt counters.
    pub fn reset_counters(&mut self) {
        self.counters.reset();
        self.irq.raised = [0; 32];
    }

    // --- Wire ---

    /// Attaches the MAC/PHY to `wire`, returning the previous one. The link is re-evaluated
    /// (and ICR.LSC raised if it changed) at the next [`poll`](Device::poll).
    pub fn attach_wire(&mut self, wire: Box<dyn WirePort>) -> Option<Box<dyn WirePort>> {
        self.wire.replace(wire)
    }

    /// Detaches the wire: back to the part-1 link behaviour, frames sent are dropped.
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

    // --- TX timestamps (§7) ---

    /// TXTT_0..3 (TSYNCTXCTL b3:0) as the hardware holds them.
    pub fn txtt(&self) -> u32 {
        self.txs.txtt()
    }

    /// The stamp in TX set `n` (TXSTMPH_n:TXSTMPL_n; whatever was last latched), without the
    /// read side effects. Sets beyond 3 read 0.
    pub fn tx_stamp(&self, n: usize) -> SysTime {
        self.txs.set(n)
    }

    /// Turns the §7.2 quirk on (real part) or off (ideal part); off also releases an
    /// interrupt the gate holds, without raising it.
    pub fn set_tx_stamp_quirk(&mut self, on: bool) {
        self.tsync.set_txts_quirk(on);
    }

    /// Whether the §7.2 gate lets the next TXTS raise an interrupt.
    pub fn txts_gate_open(&self) -> bool {
        self.tsync.txts_gate_open()
    }

    /// Whether a TXSTMPH_0 read clears every TXTT bit (§7.1).
    pub fn set_txstmph0_clears_all(&mut self, on: bool) {
        self.txs.h0_clears_all = on;
    }

    // --- Deterministic interleaving (hooks) ---

    /// Holds the TX engine until the `nth` (≥ 1) next read of BAR0 `offset` has returned its
    /// value, then runs it inside that read: frames posted meanwhile go out, latch their
    /// stamps and raise their interrupts between that read and the driver's next access.
    /// False if too many actions are armed ([`MAX_ARMED_READS`]).
    pub fn hold_tx_until_read(&mut self, offset: u32, nth: u32) -> bool {
        self.after_read(offset, nth, ReadAction::ReleaseTx)
    }

    /// Arms `action` for right after the `nth` (≥ 1) next read of BAR0 `offset` (see
    /// [`ReadAction`]).
    pub fn after_read(&mut self, offset: u32, nth: u32, action: ReadAction) -> bool {
        self.hooks.arm(offset, nth, action)
    }

    /// Actions armed and not yet run.
    pub fn armed_reads(&self) -> usize {
        self.hooks.len()
    }

    /// Disarms every armed action (a held TX engine resumes at the next poll).
    pub fn disarm_reads(&mut self) {
        self.hooks.clear();
    }

    /// Runs the actions due after a read of `offset`.
    fn run_read_hooks(&mut self, offset: u32, host: &mut dyn DeviceHost) {
        for action in self.hooks.on_read(offset) {
            match action {
                ReadAction::ReleaseTx => self.run_tx(host, true),
            }
        }
    }

    // --- Fault injection (DESIGN.md §4) ---

    /// The next `n` TX stamp requests latch nothing (the frames still go out).
    pub fn drop_tx_stamps(&mut self, n: u64) {
        self.txs.drop_next(n);
    }

    /// TXTT_`set` reads as set from now on and survives `reads` releasing TXSTMPH reads
    /// (`None`: until [`clear_stuck_txtt`](Self::clear_stuck_txtt)). New stamps into the set
    /// are lost meanwhile, since it looks busy.
    pub fn stick_txtt(&mut self, set: usize, reads: Option<u32>) {
        self.txs.stick(set, reads);
    }

    /// Ends a stuck TXTT fault and clears the bit.
    pub fn clear_stuck_txtt(&mut self, set: usize) {
        self.txs.clear_stuck(set);
    }

    /// The next `n` time-sync interrupts (ICR.TS edges) send no MSI-X message; ICR.TS and
    /// TSICR still show the cause.
    pub fn drop_ts_interrupts(&mut self, n: u64) {
        self.drop_ts_irqs = self.drop_ts_irqs.saturating_add(n);
    }

    /// Data-path and fault counters.
    pub fn stats(&self) -> I225Stats {
        I225Stats {
            tx_stamps_latched: self.txs.latched,
            tx_stamps_lost: self.txs.lost,
            tx_stamps_dropped: self.txs.dropped,
            txtt_stuck_reads: self.txs.stuck_reads,
            ..self.stats
        }
    }
}

impl Device for I225 {
    fn ids(&self) -> PciIds {
        self.ids
    }

    fn bar_len(&self, bar: u8) -> Option<u32> {
        match bar {
            0 => Some(BAR0_LEN),
            3 => Some(BAR3_LEN),
            _ => None,
        }
    }

    fn msix_vectors(&self) -> u16 {
        MSIX_VECTORS
    }

    fn read32(&mut self, bar: u8, offset: u32, host: &mut dyn DeviceHost) -> u32 {
        let offset = offset & !3;
        if let Some(o) = &self.observer {
            o.bar_read();
        }
        match bar {
            0 if offset < BAR0_LEN => {
                self.counters.total_reads += 1;
                self.counters.count_read(offset);
                if !known::implemented(offset) {
                    self.unimpl.record(offset, false);
                }
                let v = self.read_bar0(offset, host);
                self.run_read_hooks(offset, host);
                v
            }
            3 if offset < BAR3_LEN => {
                self.counters.total_reads += 1;
                self.msix.get(offset)
            }
            // Unsupported request: all ones, as on PCIe.
            _ => u32::MAX,
        }
    }

    fn write32(&mut self, bar: u8, offset: u32, value: u32, host: &mut dyn DeviceHost) {
        let offset = offset & !3;
        if let Some(o) = &self.observer {
            o.bar_write();
        }
        match bar {
            0 if offset < BAR0_LEN => {
                self.counters.total_writes += 1;
                self.counters.count_write(offset);
                if !known::implemented(offset) {
                    self.unimpl.record(offset, true);
                }
                self.write_bar0(offset, value, host);
            }
            3 if offset < BAR3_LEN => {
                self.counters.total_writes += 1;
                self.msix.set(offset, value);
            }
            _ => {}
        }
    }

    /// The timer registers are applied in full by the write (a new PHC law, published before
    /// the access returns) and schedule nothing: the engines read SYSTIM only when they stamp,
    /// and frame arrivals are due in true time, not PHC time. Every other write may start
    /// engine work (ring tails, enables, resets), so it wakes the model thread as before.
    fn write_wakes_model(&self, bar: u8, offset: u32) -> bool {
        !(bar == 0 && matches!(offset & !3, SYSTIML | SYSTIMH | TIMINCA | TIMADJ | TSAUXC))
    }

    /// Link (a wire may have come or gone), then the TX engine, then frames that have
    /// arrived. Returns the time until the next frame arrives, or the wire's poll interval.
    fn poll(&mut self, host: &mut dyn DeviceHost) -> Option<Duration> {
        self.update_link(host);
        self.run_tx(host, false);
        let busy = self.run_rx(host);
        self.report_wire_lost();
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
