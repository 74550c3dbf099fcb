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
//! - `tx` / `rx`: the queue-0 engines (§9, §10); `stamping`: how i225 stamps frames there
//!   (TX sets by TSTAMP_REG, RX header with TSYNCRXCTL.TYPE = ALL, §7, §8);
//! - `addrfilter`: the RX destination-address filter; `hwstats`: the statistics block;
//! - `phy`, `nvm`: the PHY behind MDIC, NVM/semaphores/PHPM (the part presents its flash:
//!   a 2048-word shadow RAM behind EERD/SRWR, checksummed, committed by EECD.FLUPD);
//!   `known`: implemented offsets, and the writable bits of storage registers whose reserved
//!   bits read 0 (Linux igc's register test table, with each mask's source);
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
//!   (STATUS, EECD.PRES/AUTO_RD/FLASH_DETECTED/FLUDONE/SIZE_EX, PHPM.RST_COMP, the
//!   statistics block) are ignored; WUS and PBACL are write-1-to-clear and read 0. Offsets
//!   beyond a BAR read all ones (an unsupported request) and drop writes; an unaligned
//!   offset is rounded down to its dword.
//! - An offset outside the implemented set (`known`) reads back what was written, and every
//!   access to it is counted and its first logged ([`I225::unimplemented_accesses`]).
//! - INTx: the legacy line is a level, `ICR & IMS` outside MSI-X mode
//!   ([`I225::intx_level`]); an asserted ICR read clears it and auto-masks IMS by IAM.

mod known;
mod stamping;
mod tsync;
mod txstamp;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_datapath;
#[cfg(test)]
mod tests_regs;

use std::sync::Arc;
use std::time::Duration;

use intel_regs::ids;
use intel_regs::igc::*;
use ptp_pci::PciIds;
use ptp_pci::emulated::{Device, DeviceHost};

pub use crate::nic::irq::OTHER_CAUSES;
pub use crate::nic::{
    LinkMode, LinkSpeed, MAX_ARMED_READS, MAX_TX_FRAME, ReadAction, TxEngine, UnimplementedAccess,
};
pub use txstamp::TX_STAMP_SETS;

use crate::clock::TimeSource;
use crate::nic::link::Link;
use crate::nic::sdp::PinBlock;
pub use crate::nic::sdp::{PinEdge, PinStats, SDP_PINS};

use crate::nic::front::{self, BarModel};
use crate::nic::{CtrlWrite, IrqMap, NicStats, Port, PortSetup, QueueMap, noise, nvm};
use crate::phc::SysTime;
use crate::truth::SharedObserver;
use crate::wire::{WirePort, WireStats};
use tsync::TimeSync;
use txstamp::TxStamps;

pub use crate::nic::front::{BAR0_LEN, BAR3_LEN};
/// MSI-X table entries of i225/i226: one "other" vector and four queue vectors.
pub const MSIX_VECTORS: u16 = 5;

/// Shadow RAM write (Linux igc_regs.h IGC_SRWR; `nvm`).
const SRWR: u32 = 0x12018;
/// Wake-up status, "R/W1C" (Linux igc_regs.h IGC_WUS).
const WUS: u32 = 0x5810;
/// MSI-X PBA clear, "R/W 1 to clear" (Linux igc_regs.h IGC_PBACL).
const PBACL: u32 = 0x5B68;

/// TSAUXC value read from an i226 after power-on in a third-party report (§2.3 \[U\]):
/// DISABLE1..3, DIS_TS_CLEAR and EN_CLK0. Timer 0 still counts (DISABLE0 clear). Pass it as
/// [`I225Config::tsauxc_power_on`] to check that a driver does not assume TSAUXC = 0.
pub const I226_REPORTED_TSAUXC: Tsauxc = Tsauxc::from_bits_retain(0x7800_0004);

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
    pub tsauxc_power_on: Tsauxc,
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
                &format_args!("{:#010x}", self.tsauxc_power_on.bits()),
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
            tsauxc_power_on: Tsauxc::empty(),
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
pub type I225Stats = NicStats;

/// The i225/i226 model. See the module docs for what is modelled and assumed.
pub struct I225 {
    ids: PciIds,
    tsauxc_power_on: Tsauxc,
    /// Registers, link, interrupts, queue-0 engines and wire (shared with igb, `nic`).
    port: Port,
    tsync: TimeSync,
    txs: TxStamps,
    /// Time-sync interrupts still to be swallowed (fault injection).
    drop_ts_irqs: u64,
    /// What the SDPs are wired to ([`Self::attach_pins`]).
    pin_link: Option<Box<dyn crate::pinwire::PinLink>>,
}

impl std::fmt::Debug for I225 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("I225")
            .field("device", &format_args!("{:#06x}", self.ids.device))
            .field("link_up", &self.port.link.up)
            .field("wire", &self.port.wire.is_some())
            .field("phc_ns", &self.phc_now_ns())
            .finish_non_exhaustive()
    }
}

impl I225 {
    /// A device just after power-on (NVM loaded, link down until the driver sets CTRL.SLU).
    pub fn new(cfg: I225Config) -> Self {
        let t = cfg.clock.now_ns();
        let mut dev = Self {
            ids: crate::nic::intel_ethernet_ids(cfg.device_id, cfg.revision),
            tsauxc_power_on: cfg.tsauxc_power_on,
            port: Port::new(PortSetup {
                name: "i225",
                clock: cfg.clock,
                msix_vectors: MSIX_VECTORS,
                link: Link::new(cfg.cable_connected, cfg.link_speed),
                noise: noise::StampNoise::new(cfg.stamp_quantum_ns, cfg.stamp_jitter_ns, cfg.seed),
                tx_pipeline_ns: cfg.tx_pipeline_ns,
                map: QueueMap {
                    rx0: rdbal(0),
                    tx0: tdbal(0),
                    ivar0: IVAR0,
                },
                irqmap: IrqMap {
                    icr: ICR,
                    ics: ICS,
                    ims: IMS,
                    imc: IMC,
                    iam: IAM,
                    eerd: EERD,
                },
                phy_id: I225_I_PHY_ID,
                mac: cfg.mac,
            }),
            tsync: TimeSync::new(
                t,
                cfg.initial_systim_ns,
                cfg.osc_error_ppb,
                cfg.tsauxc_power_on,
            ),
            txs: TxStamps::new(cfg.txstmph0_clears_all),
            drop_ts_irqs: 0,
            pin_link: None,
        };
        dev.tsync.set_txts_quirk(cfg.tx_stamp_quirk);
        // An I225/I226-LM presents its flash (nvm.rs); the igb models keep the flashless NVM.
        dev.port.nvm = nvm::Nvm::i225_flash(cfg.mac, cfg.device_id);
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
        self.port.clock.now_ns()
    }

    /// Reports PHC law changes and BAR/cable counters to `observer` from now on (the
    /// ground-truth record, [`crate::truth`]); the law in force is published at once.
    pub fn set_observer(&mut self, observer: Option<SharedObserver>) {
        self.port
            .set_observer(observer, &mut self.tsync, |ts| &ts.phc);
    }

    /// Applies a PHC law change at the current true time ([`Port::change_law`]).
    /// A PHC law change at the current true time; the pins run up to that instant first, under
    /// the law they ran under.
    fn change_phc(&mut self, f: impl FnOnce(&mut TimeSync, u64)) {
        self.port.change_law(
            &mut self.tsync,
            |ts| &ts.phc,
            |ts, t| {
                ts.advance_pins(t);
                f(ts, t)
            },
        );
    }

    /// CTRL/CTRL_EXT changed: the pins' directions and software levels follow.
    fn sdp_ctrl_changed(&mut self) {
        let (c, e) = (
            self.port.regs.get_reg(reg::CTRL),
            self.port.regs.get_reg(reg::CTRL_EXT),
        );
        let t = self.now();
        self.tsync.pins.write_ctrl(c, e, t);
    }

    /// CTRL.RST / CTRL.DEV_RST: see the module docs for what survives.
    fn port_reset(&mut self) {
        self.port.port_reset();
        self.tsync.port_reset();
        self.txs.port_reset();
        self.sdp_ctrl_changed();
    }

    fn write_ctrl(&mut self, v: Ctrl, host: &mut dyn DeviceHost) {
        // The reset wipes CTRL too, so the other bits of this write do not stick.
        if self.port.write_ctrl(v, Ctrl::RST | Ctrl::DEV_RST, host) == CtrlWrite::Reset {
            self.port_reset();
        }
        self.sdp_ctrl_changed();
    }

    /// Raises ICR.TS if the time-sync causes just became pending (§2.4, §6). A
    /// [`drop_ts_interrupts`](Self::drop_ts_interrupts) fault lets ICR.TS show but sends
    /// no message.
    fn update_ts(&mut self, host: &mut dyn DeviceHost) {
        if self.tsync.take_ts_edge() {
            if self.drop_ts_irqs > 0 {
                self.drop_ts_irqs -= 1;
                self.port.stats.ts_irqs_dropped += 1;
                self.port.irq.cause_silent(IntCause::TS);
            } else {
                self.port.irq.cause(IntCause::TS, host);
            }
        }
    }

    /// Runs the pins up to now and raises the interrupt their causes call for.
    fn sync_pins(&mut self, host: &mut dyn DeviceHost) {
        let t = self.now();
        self.tsync.advance_pins(t);
        self.update_ts(host);
    }

    /// Which TX stamp set a TXSTMPL/TXSTMPH offset belongs to.
    fn stamp_set(offset: u32, regs: &[u32; TX_STAMP_SETS]) -> Option<usize> {
        regs.iter().position(|&r| r == offset)
    }

    /// What a read of BAR0 `offset` would return now, without its side effects (no
    /// read-to-clear, no SYSTIM latch). For tests and inspection.
    pub fn peek(&self, offset: u32) -> u32 {
        let offset = offset & !3;
        if let Some(v) = self.port.peek_common(offset) {
            return v;
        }
        if let Some(v) = self.tsync.pins.peek(offset) {
            return v;
        }
        match offset {
            PHPM => nvm::phpm_value(self.port.regs.get(PHPM)),
            SRWR => self.port.nvm.srwr(),
            CTRL => (self.tsync.pins)
                .ctrl_read(self.port.regs.get_reg(reg::CTRL))
                .bits(),
            CTRL_EXT => (self.tsync.pins)
                .ctrl_ext_read(self.port.regs.get_reg(reg::CTRL_EXT))
                .bits(),
            SYSTIML => self.tsync.peek_systiml(self.now()),
            SYSTIMH => self.tsync.systimh(),
            TIMINCA => self.tsync.phc.timinca(),
            TIMADJ => self.tsync.timadj,
            TSAUXC => self.tsync.tsauxc.bits(),
            TSICR => self.tsync.cause.tsicr.bits(),
            TSIM => self.tsync.cause.tsim.bits(),
            TSYNCTXCTL => self.txs.ctl().bits(),
            o if Self::stamp_set(o, &TXSTMPL).is_some() => {
                Self::stamp_set(o, &TXSTMPL).map_or(0, |n| self.txs.set(n).nsec)
            }
            o if Self::stamp_set(o, &TXSTMPH).is_some() => {
                Self::stamp_set(o, &TXSTMPH).map_or(0, |n| self.txs.set(n).sec)
            }
            o if o < BAR0_LEN => self.port.regs.get(o),
            _ => u32::MAX,
        }
    }

    // --- Model-side hooks (the "hardware" a test controls) ---

    /// See [`NicPort::set_cable`](crate::NicPort::set_cable).
    pub fn set_cable(&mut self, connected: bool, host: &mut dyn DeviceHost) {
        self.port.set_cable(connected, host)
    }

    /// See [`NicPort::cable`](crate::NicPort::cable).
    pub fn cable(&self) -> bool {
        self.port.cable()
    }

    /// See [`NicPort::set_link_speed`](crate::NicPort::set_link_speed).
    pub fn set_link_speed(&mut self, speed: LinkSpeed, host: &mut dyn DeviceHost) {
        self.port.set_link_speed(speed, host)
    }

    /// See [`NicPort::link_speed`](crate::NicPort::link_speed).
    pub fn link_speed(&self) -> LinkSpeed {
        self.port.link_speed()
    }

    /// See [`NicPort::link_mode`](crate::NicPort::link_mode).
    pub fn link_mode(&self) -> Option<crate::nic::LinkMode> {
        self.port.link_mode()
    }

    /// See [`NicPort::link_up`](crate::NicPort::link_up).
    pub fn link_up(&self) -> bool {
        self.port.link_up()
    }

    /// See [`NicPort::link_changes`](crate::NicPort::link_changes).
    pub fn link_changes(&self) -> u64 {
        self.port.link_changes()
    }

    /// Sets TSICR cause `bits` as a time-sync event would; an enabled cause raises ICR.TS and
    /// routes it (§2.4, §6). This is a raw cause: it bypasses the §7.2 gate (neither closes
    /// nor waits for it); TX stamps latched by the TX engine go through the gate.
    pub fn raise_tsicr(&mut self, bits: TsCause, host: &mut dyn DeviceHost) {
        self.tsync.cause.raise(bits);
        self.update_ts(host);
    }

    /// An external edge on an SDP at its true instant (a GPS pulse, another NIC's output):
    /// latched if the pin samples into an auxiliary stamp when the instant is reached.
    pub fn schedule_pin_edge(&mut self, edge: PinEdge) {
        self.tsync.pins.schedule(edge);
    }

    /// Wires the SDPs to `link` (a [`crate::pinwire::PinSocket`]): edges from it are latched
    /// at their instants, output edges go out on it (and no longer to
    /// [`Self::take_pin_edges`]). The model thread's poll exchanges them.
    pub fn attach_pins(&mut self, link: Box<dyn crate::pinwire::PinLink>) {
        self.pin_link = Some(link);
    }

    /// Output edges the pins produced since the last call, each at its true instant.
    pub fn take_pin_edges(&mut self) -> Vec<PinEdge> {
        self.tsync.pins.take_edges()
    }

    /// Every SDP's level now.
    pub fn pin_levels(&self) -> [bool; SDP_PINS] {
        self.tsync.pins.levels()
    }

    /// The pin engine's counters.
    pub fn pin_stats(&self) -> PinStats {
        self.tsync.pins.stats
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

    /// The PHC law in force (what the ground-truth record publishes).
    pub fn phc_law(&self) -> crate::phc::PhcLaw {
        self.tsync.phc.law()
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
    pub fn tsauxc(&self) -> Tsauxc {
        self.tsync.tsauxc
    }

    /// TSAUXC after power-on, as configured.
    pub fn tsauxc_power_on(&self) -> Tsauxc {
        self.tsauxc_power_on
    }

    /// See [`NicPort::set_tx_engine`](crate::NicPort::set_tx_engine).
    pub fn set_tx_engine(&mut self, engine: TxEngine) {
        self.port.set_tx_engine(engine)
    }

    /// See [`NicPort::tx_engine`](crate::NicPort::tx_engine).
    pub fn tx_engine(&self) -> TxEngine {
        self.port.tx_engine()
    }

    /// See [`NicPort::mac`](crate::NicPort::mac).
    pub fn mac(&self) -> [u8; 6] {
        self.port.mac()
    }

    /// See [`NicPort::port_resets`](crate::NicPort::port_resets).
    pub fn port_resets(&self) -> u64 {
        self.port.port_resets()
    }

    /// See [`NicPort::reads`](crate::NicPort::reads).
    pub fn reads(&self, offset: u32) -> u64 {
        self.port.reads(offset)
    }

    /// See [`NicPort::writes`](crate::NicPort::writes).
    pub fn writes(&self, offset: u32) -> u64 {
        self.port.writes(offset)
    }

    /// See [`NicPort::total_reads`](crate::NicPort::total_reads).
    pub fn total_reads(&self) -> u64 {
        self.port.total_reads()
    }

    /// See [`NicPort::total_writes`](crate::NicPort::total_writes).
    pub fn total_writes(&self) -> u64 {
        self.port.total_writes()
    }

    /// See [`NicPort::intx_level`](crate::NicPort::intx_level).
    pub fn intx_level(&self) -> bool {
        self.port.intx_level()
    }

    /// See [`NicPort::msix_raised`](crate::NicPort::msix_raised).
    pub fn msix_raised(&self, vector: u16) -> u64 {
        self.port.msix_raised(vector)
    }

    /// See [`NicPort::total_msix_raised`](crate::NicPort::total_msix_raised).
    pub fn total_msix_raised(&self) -> u64 {
        self.port.total_msix_raised()
    }

    /// See [`NicPort::unimplemented_accesses`](crate::NicPort::unimplemented_accesses).
    pub fn unimplemented_accesses(&self) -> Vec<UnimplementedAccess> {
        self.port.unimplemented_accesses()
    }

    /// See [`NicPort::clear_unimplemented_accesses`](crate::NicPort::clear_unimplemented_accesses).
    pub fn clear_unimplemented_accesses(&mut self) {
        self.port.clear_unimplemented_accesses()
    }

    /// Whether the model implements BAR0 `offset` (behaviour, or the part's plain
    /// configuration storage); accesses elsewhere are recorded.
    pub fn implements(offset: u32) -> bool {
        known::implemented(offset & !3)
    }

    /// See [`NicPort::reset_counters`](crate::NicPort::reset_counters).
    pub fn reset_counters(&mut self) {
        self.port.reset_counters()
    }

    // --- Wire ---

    /// See [`NicPort::attach_wire`](crate::NicPort::attach_wire).
    pub fn attach_wire(&mut self, wire: Box<dyn WirePort>) -> Option<Box<dyn WirePort>> {
        self.port.attach_wire(wire)
    }

    /// See [`NicPort::detach_wire`](crate::NicPort::detach_wire).
    pub fn detach_wire(&mut self) -> Option<Box<dyn WirePort>> {
        self.port.detach_wire()
    }

    /// See [`NicPort::wire`](crate::NicPort::wire).
    pub fn wire(&self) -> Option<&dyn WirePort> {
        self.port.wire()
    }

    /// See [`NicPort::wire_mut`](crate::NicPort::wire_mut).
    pub fn wire_mut(&mut self) -> Option<&mut (dyn WirePort + 'static)> {
        self.port.wire_mut()
    }

    /// See [`NicPort::wire_stats`](crate::NicPort::wire_stats).
    pub fn wire_stats(&self) -> WireStats {
        self.port.wire_stats()
    }

    /// See [`NicPort::wire_drop_next`](crate::NicPort::wire_drop_next).
    pub fn wire_drop_next(&mut self, n: u64) -> bool {
        self.port.wire_drop_next(n)
    }

    // --- TX timestamps (§7) ---

    /// TXTT_0..3 (TSYNCTXCTL b3:0) as the hardware holds them: bit n = set n holds a stamp.
    pub fn txtt(&self) -> u32 {
        self.txs.txtt().bits()
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

    /// See [`NicPort::hold_tx_until_read`](crate::NicPort::hold_tx_until_read).
    pub fn hold_tx_until_read(&mut self, offset: u32, nth: u32) -> bool {
        self.port.hold_tx_until_read(offset, nth)
    }

    /// See [`NicPort::after_read`](crate::NicPort::after_read).
    pub fn after_read(&mut self, offset: u32, nth: u32, action: ReadAction) -> bool {
        self.port.after_read(offset, nth, action)
    }

    /// See [`NicPort::armed_reads`](crate::NicPort::armed_reads).
    pub fn armed_reads(&self) -> usize {
        self.port.armed_reads()
    }

    /// See [`NicPort::disarm_reads`](crate::NicPort::disarm_reads).
    pub fn disarm_reads(&mut self) {
        self.port.disarm_reads()
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

    /// TX stamps latched into each set since power-on.
    pub fn tx_stamps_latched_per_set(&self) -> [u64; TX_STAMP_SETS] {
        self.txs.latched_per_set
    }

    /// The port's shared state (counters, link, cable), as `Igb::nic` gives igb's.
    pub fn nic(&self) -> &Port {
        &self.port
    }

    /// The port's shared state, mutably.
    pub fn nic_mut(&mut self) -> &mut Port {
        &mut self.port
    }

    /// Data-path and fault counters.
    pub fn stats(&self) -> I225Stats {
        I225Stats {
            tx_stamps_latched: self.txs.latched,
            tx_stamps_released: self.txs.released,
            tx_stamps_lost: self.txs.lost,
            tx_stamps_dropped: self.txs.dropped,
            txtt_stuck_reads: self.txs.stuck_reads,
            ..self.port.stats
        }
    }
}

impl BarModel for I225 {
    fn implemented(&self, offset: u32) -> bool {
        known::implemented(offset)
    }

    fn sync(&mut self, host: &mut dyn DeviceHost) {
        self.sync_pins(host);
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
        if let Some(v) = self.port.read_common(offset, host) {
            return v;
        }
        match offset {
            SYSTIML => {
                let t = self.now();
                self.tsync.read_systiml(t)
            }
            TSICR => {
                let v = self.tsync.cause.read();
                self.update_ts(host);
                v.bits()
            }
            o => match self.tsync.read_pin_reg(o) {
                Some(v) => v,
                None => self.peek(o),
            },
        }
    }

    fn write_bar0(&mut self, offset: u32, v: u32, host: &mut dyn DeviceHost) {
        if offset == CTRL {
            return self.write_ctrl(Ctrl::from_bits_retain(v), host);
        }
        if self.port.write_common(offset, v, host) {
            return;
        }
        if self.tsync.write_pin_reg(offset, v, self.port.now()) {
            return;
        }
        match offset {
            PHPM => self.port.regs.set(PHPM, v & !phpm::RST_COMP),
            SRWR => self.port.nvm.write_srwr(v),
            // Write 1 to clear; the model sets none of their bits (no wake-up, no pending
            // MSI-X bit: the backend delivers vectors), so they read 0.
            WUS | PBACL => {
                let left = self.port.regs.get(offset) & !v;
                self.port.regs.set(offset, left);
            }
            SYSTIML => self.tsync.write_systiml(v),
            SYSTIMH => self.change_phc(|ts, t| ts.write_systimh(t, v)),
            TIMINCA => self.change_phc(|ts, t| ts.phc.set_timinca(t, v)),
            TIMADJ => self.tsync.timadj = v,
            TSYNCTXCTL => self.txs.write_ctl(TsyncTxCtl::from_bits_retain(v)),
            o if o == TSYNCRXCTL || (0..4).any(|n| o == srrctl(n)) => {
                self.record_rx_ts_config(o, v);
                self.port.regs.set(o, v);
            }
            o if Self::stamp_set(o, &TXSTMPL).is_some()
                || Self::stamp_set(o, &TXSTMPH).is_some() => {}
            TSAUXC => {
                self.change_phc(|ts, t| ts.write_tsauxc(t, Tsauxc::from_bits_retain(v)));
                self.update_ts(host);
            }
            TSICR => {
                self.tsync.cause.write(TsCause::from_bits_retain(v));
                self.update_ts(host);
            }
            TSIM => {
                self.tsync.cause.tsim = TsCause::from_bits_retain(v);
                self.tsync.pins.set_tsim(self.tsync.cause.tsim);
                self.update_ts(host);
            }
            CTRL_EXT => {
                self.port
                    .regs
                    .set(CTRL_EXT, v & known::write_mask(CTRL_EXT));
                self.sdp_ctrl_changed();
            }
            // Everything else is storage, including the ring registers (TDH/RDH are also
            // written by the engines; TDT/RDT writes take effect at the next poll),
            // TSYNCRXCTL, RXPBS, SRRCTL and IVAR0, which the engines read when they run.
            // Reserved bits read 0 where a source says so (`known::write_mask`).
            o => self.port.regs.set(o, v & known::write_mask(o)),
        }
    }
}

impl Device for I225 {
    fn ids(&self) -> PciIds {
        self.ids
    }

    fn bar_len(&self, bar: u8) -> Option<u32> {
        front::bar_len(bar)
    }

    fn msix_vectors(&self) -> u16 {
        MSIX_VECTORS
    }

    fn read32(&mut self, bar: u8, offset: u32, host: &mut dyn DeviceHost) -> u32 {
        front::read32(self, bar, offset, host)
    }

    fn write32(&mut self, bar: u8, offset: u32, value: u32, host: &mut dyn DeviceHost) {
        front::write32(self, bar, offset, value, host);
        crate::nic::tx::after_write(self, bar, offset, host);
    }

    /// The timer registers are applied in full by the write (a new PHC law, published before
    /// the access returns) and schedule nothing: the engines read SYSTIM only when they stamp,
    /// and frame arrivals are due in true time, not PHC time. The interrupt registers
    /// (TSICR/TSIM and the MAC's set, `Port::irq_write_applied`) take effect in the write,
    /// messages included. A TDT write under
    /// [`TxEngine::Sync`] ran the TX engine itself and wakes only for what it left. Every other
    /// write may start engine work (ring tails, enables, resets), so it wakes the model thread.
    fn write_wakes_model(&self, bar: u8, offset: u32) -> bool {
        if let Some(wake) = self.port.tdt_write_wakes(bar, offset) {
            return wake;
        }
        // TSAUXC, TSIM and the pin registers may start a target, clock or SYS_WRAP whose
        // instant the model thread must wait for: they wake it.
        let applied = matches!(offset & !3, SYSTIML | SYSTIMH | TIMINCA | TIMADJ | TSICR);
        !((bar == 0 && applied) || self.port.irq_write_applied(bar, offset))
    }

    fn poll(&mut self, host: &mut dyn DeviceHost) -> Option<Duration> {
        let t = self.now();
        let due = crate::nic::sdp::poll_pins(&mut self.pin_link, &mut self.tsync, t);
        self.update_ts(host);
        let next = front::poll(self, host);
        crate::nic::sdp::sooner(next, due)
    }
}
