//! Register-level model of the Intel i225/i226 (Linux `igc`), part 1: register file and
//! reset, link, interrupts, and the time-sync clock. Section numbers (§n) refer to
//! `shared/reference/intel-timesync.md`.
//!
//! The model is a plain state machine in the rust-vmm vm-superio style: the emulated PCI
//! backend calls [`Device::read32`]/[`Device::write32`] with a BAR offset, the model changes
//! state and signals MSI-X through the [`DeviceHost`]; true time comes from the injected
//! [`TimeSource`]. State is split by function so the TX/RX timestamping and ring models of
//! part 2 slot in as further sub-structs (`tx`, `rx`) without touching the rest:
//!
//! - `regs`: storage for every offset without behaviour, loaded with power-on values;
//! - `link` / `phy`: STATUS link bits and the MDIC PHY;
//! - `irq`: ICR/IMS/EICR/... and MSI-X delivery;
//! - `tsync`: SYSTIM (the [`Phc`](crate::phc::Phc)), TIMINCA, TSAUXC, TSICR/TSIM.
//!
//! # Model assumptions
//!
//! - Port reset (CTRL.RST, and the older CTRL.DEV_RST) completes at once: the register file,
//!   link and interrupt state return to power-on values, CTRL.RST self-clears and EECD.AUTO_RD
//!   is already set when the driver polls it. The time-sync timer (SYSTIM, TIMINCA, TIMADJ,
//!   TSAUXC) keeps running through it \[U\]; TSICR/TSIM are cleared. The PHY and the MSI-X
//!   table (BAR3) are not reset.
//! - The link comes up as soon as CTRL.SLU is set with the cable connected (no
//!   autonegotiation delay); [`I225::poll`](Device::poll) has no scheduled work.
//! - Reads of write-only registers (ICS, IMC, EICS, EIMC) return 0; writes to read-only bits
//!   (STATUS, EECD.AUTO_RD) are ignored. Offsets beyond a BAR read all ones (an unsupported
//!   request) and drop writes; an unaligned offset is rounded down to its dword.

mod irq;
mod link;
mod regfile;
mod tsync;

#[cfg(test)]
mod tests;

use std::sync::Arc;
use std::time::Duration;

use intel_regs::ids;
use intel_regs::igc::*;
use ptp_pci::PciIds;
use ptp_pci::emulated::{Device, DeviceHost};

pub use irq::OTHER_CAUSES;
pub use link::LinkSpeed;

use crate::clock::TimeSource;
use crate::phc::SysTime;
use irq::Interrupts;
use link::{Link, Phy};
use regfile::{Counters, RegFile};
use tsync::TimeSync;

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
}

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
    irq: Interrupts,
    tsync: TimeSync,
    counters: Counters,
    port_resets: u64,
}

impl std::fmt::Debug for I225 {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("I225")
            .field("device", &format_args!("{:#06x}", self.ids.device))
            .field("link_up", &self.link.up)
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
            irq: Interrupts::default(),
            tsync: TimeSync::new(
                t,
                cfg.initial_systim_ns,
                cfg.osc_error_ppb,
                cfg.tsauxc_power_on,
            ),
            counters: Counters::new(BAR0_LEN),
            port_resets: 0,
            clock: cfg.clock,
        };
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

    /// Non-zero register values after power-on or port reset (§10.1): the NVM MAC in
    /// RAL0/RAH0 with RAH.AV, EECD.AUTO_RD (NVM read done).
    fn load_power_on(&mut self) {
        let m = self.mac;
        self.regs
            .set(ral(0), u32::from_le_bytes([m[0], m[1], m[2], m[3]]));
        self.regs
            .set(rah(0), u32::from_le_bytes([m[4], m[5], 0, 0]) | rah::AV);
        self.regs.set(EECD, eecd::AUTO_RD);
    }

    /// CTRL.RST / CTRL.DEV_RST: see the module docs for what survives.
    fn port_reset(&mut self) {
        self.regs.clear();
        self.load_power_on();
        self.irq.reset();
        self.tsync.port_reset();
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

    fn update_link(&mut self, host: &mut dyn DeviceHost) {
        let slu = self.regs.get(CTRL) & ctrl::SLU != 0;
        if self.link.update(slu) {
            self.irq.cause(icr::LSC, host);
        }
    }

    /// Raises ICR.TS if the time-sync causes just became pending (§2.4, §6).
    fn update_ts(&mut self, host: &mut dyn DeviceHost) {
        if self.tsync.take_ts_edge() {
            self.irq.cause(icr::TS, host);
        }
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
            o if o < BAR0_LEN => self.regs.get(o),
            _ => u32::MAX,
        }
    }

    /// A BAR0 read with its side effects (§6 ICR/EICR read-to-clear, §3 SYSTIML latch,
    /// §2.4 TSICR read-to-clear).
    fn read_bar0(&mut self, offset: u32, host: &mut dyn DeviceHost) -> u32 {
        match offset {
            ICR => self.irq.read_icr(host),
            EICR => self.irq.read_eicr(),
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
            // AUTO_RD is read-only status: the NVM read is always complete.
            EECD => self.regs.set(EECD, v | eecd::AUTO_RD),
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
            SYSTIMH => {
                let t = self.now();
                self.tsync.write_systimh(t, v);
            }
            TIMINCA => {
                let t = self.now();
                self.tsync.phc.set_timinca(t, v);
            }
            TIMADJ => self.tsync.timadj = v,
            TSAUXC => {
                let t = self.now();
                self.tsync.write_tsauxc(t, v);
            }
            TSICR => {
                self.tsync.write_tsicr(v);
                self.update_ts(host);
            }
            TSIM => {
                self.tsync.tsim = v;
                self.update_ts(host);
            }
            // Everything else, including TSYNCTXCTL/TSYNCRXCTL/TXSTMP*/RXPBS/SRRCTL until
            // the part-2 TX/RX models own them: plain storage.
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

    /// Sets TSICR cause `bits` as a time-sync event would (until the part-2 timestamping model
    /// raises TXTS itself); an enabled cause raises ICR.TS and routes it (§2.4, §6).
    pub fn raise_tsicr(&mut self, bits: u32, host: &mut dyn DeviceHost) {
        self.tsync.raise(bits);
        self.update_ts(host);
    }

    /// Changes the crystal's frequency error now (ppb, clamped to ±999 999 999).
    pub fn set_osc_error_ppb(&mut self, ppb: i64) {
        let t = self.now();
        self.tsync.phc.set_osc_error_ppb(t, ppb);
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

    /// MSI-X messages sent on `vector` (0 for a vector outside 0..32).
    pub fn msix_raised(&self, vector: u16) -> u64 {
        self.irq.raised.get(vector as usize).copied().unwrap_or(0)
    }

    /// MSI-X messages sent on all vectors.
    pub fn total_msix_raised(&self) -> u64 {
        self.irq.raised.iter().sum()
    }

    /// Zeroes the MMIO and interrupt counters.
    pub fn reset_counters(&mut self) {
        self.counters.reset();
        self.irq.raised = [0; 32];
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
        match bar {
            0 if offset < BAR0_LEN => {
                self.counters.total_reads += 1;
                self.counters.count_read(offset);
                self.read_bar0(offset, host)
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
        match bar {
            0 if offset < BAR0_LEN => {
                self.counters.total_writes += 1;
                self.counters.count_write(offset);
                self.write_bar0(offset, value, host);
            }
            3 if offset < BAR3_LEN => {
                self.counters.total_writes += 1;
                self.msix.set(offset, value);
            }
            _ => {}
        }
    }

    fn poll(&mut self, _host: &mut dyn DeviceHost) -> Option<Duration> {
        // Part 1 has no scheduled work: link-up and reset complete at once.
        None
    }
}
