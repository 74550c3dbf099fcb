//! Register-level models of the Intel igb parts (Linux `igb`): i210/i211, i350 and 82576, with
//! the register file and reset, link and PHY, the igb interrupt registers, the queue-0 TX/RX data
//! path, and each family's time-sync block. Section numbers (§n) refer to
//! `shared/reference/intel-timesync.md`; register names and offsets are `intel_regs::igb`
//! (Linux e1000_regs.h / e1000_defines.h).
//!
//! One state machine, [`Igb`], serves the three families; [`IgbPart`] says which, and with it:
//!
//! | | i210/i211 | i350 | 82576 |
//! |---|---|---|---|
//! | SYSTIM (§3) | s:ns | 40-bit ns | 64-bit cycle count, ns = count >> 19 |
//! | latch | SYSTIMR read | SYSTIMR read | SYSTIML read |
//! | TIMINCA (§4) | ISGN, INCVALUE per 8 ns | same | IncPeriod b31:24, IncValue b23:0 |
//! | TX stamp (§7.5) | one pair, TSICR.TXTS | one pair, TSICR.TXTS | one pair, no interrupt |
//! | RX stamp (§8) | 16-byte header (TSIP) | 16-byte header | RXSTMPL/H, held until RXSTMPH is read |
//! | latency (§8.4) | i210 table | none | none |
//! | MSI-X vectors | 5 | 10 | 25 |
//!
//! What the families share with the i225 model (register storage, interrupts, link, PHY, NVM,
//! the queue-0 engines, stamp noise) is `crate::nic`; `tsync` and `stamping` hold what is igb's.
//!
//! # Model assumptions
//!
//! - Interrupts (§6): ICR/ICS/IMS/IMC/IAM at 0xC0/0xC8/0xD0/0xD8/0xE0, the extended set and
//!   IVAR as on igc. ICR.TS is raised on the rising edge of `TSICR & TSIM` (i210/i350). The
//!   82576 model has no time-sync interrupt at all: TSICR/TSIM are storage, recorded as
//!   unmodelled (its Linux driver never programs them, §7.5).
//! - Queue registers: queue n < 4 answers at the e1000 offsets (RDBAL 0x2800 + 0x100·n, TDBAL
//!   0x3800 + 0x100·n, what Linux igb uses) and at the 0xC000/0xE000 + 0x40·n block, which the
//!   model aliases onto them \[U: alias from the 82575-and-later layout; only queue 0 runs\].
//! - Port reset (CTRL.RST): as the i225 model — registers, link, interrupts and the stamp pairs
//!   return to power-on values, SYSTIM keeps running \[U\].
//! - TSAUXC powers on with DISABLE0 set on i210/i350, so SYSTIM stands still until the driver
//!   clears it ("Enable the timer functions by clearing bit 31", Linux igb_ptp.c for 82580)
//!   \[D\]; [`IgbConfig::tsauxc_power_on`] overrides it. TIMINCA powers on 0: nominal rate on
//!   i210/i350, a stopped counter on the 82576 until the driver programs it \[U\].
//! - NVM: EERD at 0x0014 (82576, i350) or 0x12014 (i210's SRRD), over the checksummed shadow
//!   RAM holding the MAC; the MAC is also preloaded in RAL0/RAH0. An i210 with flash (every
//!   i210 ID but 0x157B/0x157C, [`IgbPart::has_flash`]) presents it as an I225 does
//!   (`nic::nvm`, [`Nvm::i210_flash`](crate::nic::nvm::Nvm)): EECD.FLASH_DETECTED, a 4 KiB
//!   image with version, EtrackID, PBA and checksum, SRWR (0x12018) and FLUPD. Its EERD also
//!   answers at 0x0014: Linux igb reads the i210's flash through E1000_EERD 0x0014
//!   (e1000_i210.c igb_read_nvm_srrd_i210 → e1000_nvm.c igb_read_nvm_eerd) \[U: an alias;
//!   the register's own offset is 0x12014\]. EEMNGCTL_I210 (0x12030) reads CFG_DONE_PORT_0
//!   (b18) set: the model has no manageability configuration cycle to wait for (Linux
//!   e1000_i210.c igb_get_cfg_done_i210 polls it up to 100 ms per reset). The i211 and the
//!   flashless i210 have the iNVM instead (INVM_DATA_REG 0x12120–0x1221C, read-only): the
//!   model's holds word-autoload records of the MAC words 0–2 and nothing else, so Linux
//!   reads no iNVM version ("0. 0-0") and its defaults for the other words (e1000_i210.c
//!   igb_read_invm_word_i210, igb_read_invm_version) \[U: a real part's OTP holds more\].
//! - PHY loopback (BMCR b14, IEEE 802.3 22.2.4.1.2; Linux igb_ethtool.c
//!   igb_integrated_phy_loopback writes 0x4140): frames the MAC sends come back to its own RX
//!   and do not reach the wire (`nic::tx`).
//! - Register write masks (i210/i211): bits outside the masks Linux igb's register test uses
//!   (igb_ethtool.c reg_test_i210) read 0 (`known::write_mask`).
//! - PHY IDs (Linux e1000_defines.h): I210_I_PHY_ID 0x01410C00, I350_I_PHY_ID 0x015403B0; the
//!   82576 answers IGP03E1000_E_PHY_ID 0x02A80390 \[U: the ID Linux e1000_82575.c accepts for
//!   82575/82576 copper\].
//! - Offsets outside `known`'s table read back what was written and are counted and logged once
//!   ([`NicPort::unimplemented_accesses`](crate::NicPort::unimplemented_accesses)).
//!
//! # Where QEMU's 82576 model (`-device igb`, QEMU 10.0.2) differs
//!
//! Checked with Linux igb and igbd in guests (tests/vm_igb*.rs) and QEMU's hw/net/igb_core.c and
//! e1000x_common.c. This model keeps its behaviour in each case; the reason is given.
//!
//! - TIMINCA write: QEMU rebases with the wrong sign (timadj += new(t) − old(t), in unsigned
//!   arithmetic), so SYSTIM steps by 2 × ΔIncValue × its virtual time when IncValue grows and by
//!   2^60 counts (2^41 ns) when it shrinks; Linux igb reads the PHC jumping by +1.7 ms and
//!   +2199.02 s at phc_ctl freq +100000 and then −100000. Here a write changes the rate only:
//!   Linux's adjfine writes TIMINCA without re-reading SYSTIM, so it assumes no step. igbd keeps
//!   TIMINCA nominal on the 82576 and steers its timecounter's rate instead, so it never meets
//!   this (intel_common::igb::IgbClock::set_freq).
//! - RX filter by message type: TSYNCRXCTL.TYPE L2_V2 with TSYNCRXCFG b11:8 stamps that one
//!   PTPv2 message type (Linux e1000_defines.h E1000_TSYNCRXCFG_PTP_V2_*; Linux igb of 2.6.3x
//!   programmed HWTSTAMP_FILTER_PTP_V2_L2_SYNC / _DELAY_REQ so). This model and QEMU's agree
//!   there, which is how igbd's per-message filters (ptpd `rx_filter = "per_role"`) give an
//!   E2E master its Delay_Req stamps on QEMU's model.
//! - RX latch release: QEMU clears TSYNCRXCTL.VALID on an RXSATRH read, this model on an
//!   RXSTMPH read. Linux igb reads only RXSTMPL/H ("no other packet will be time stamped until
//!   we read these registers"), so under Linux QEMU's latch stays held after the first stamp
//!   (ptp4l: "received SYNC without timestamp"); igbd reads RXSATRH too and works on both.
//! - RX filter: QEMU ignores TSYNCRXCTL.TYPE and stamps only L2 PTPv2 messages whose first
//!   header byte equals TSYNCRXCFG\[15:8\]; with Linux's EVENT_V2 and TSYNCRXCFG 0 that is Sync
//!   alone, so a master never gets a Delay_Req stamp (ptp4l: "received DELAY_REQ without
//!   timestamp"). Here EVENT_V2 stamps every v2 event message over L2 and UDP, as Linux expects
//!   when it programs it.
//! - RXSATRL/H: QEMU latched PTP header bytes 24–27 (RXSATRL) and 28–29 (RXSATRH b15:0) as
//!   little-endian words, and RXSATRH b31:16 read 0 for every Sync seen, whatever its
//!   sequenceId; this model latches source-identity bytes 20–25 and the sequenceId (\[U\]: no
//!   driver reads them). igbd trusts the descriptor's TS bit, as Linux does.
//! - Reset: QEMU's EECD never shows AUTO_RD, and CTRL.RST drops STATUS.LU until a PHY
//!   autonegotiation restart (500 ms later); it also returns TIMINCA to 0, so SYSTIM stops until
//!   the driver programs it. Linux igb tolerates the first and restarts autonegotiation anyway;
//!   igbd now does both (intel_common::igb). This model keeps link and SYSTIM across a port
//!   reset \[U\].
//! - SYSTIML/H writes are stored but do not set QEMU's time; TIMADJH adds TIMADJL | TIMADJH << 32
//!   with no sign bit. Linux igb never writes either on the 82576 (its time is a software
//!   timecounter), so neither choice is checked.
//! - Agreements: SYSTIML latches SYSTIMH; SYSTIM = ns << 19 at nominal IncValue; a TXSTMPH read
//!   frees the TX pair; no time-sync interrupt; RX descriptor status b16 marks the stamped frame.

mod known;
mod regs;
mod stamping;
mod tsync;

#[cfg(test)]
mod tests;
#[cfg(test)]
mod tests_linux;
#[cfg(test)]
mod tests_ts;
use std::sync::Arc;
use std::time::Duration;

use intel_regs::ids::{self, Family};
use intel_regs::igb::*;
use ptp_pci::PciIds;
use ptp_pci::emulated::{Device, DeviceHost};

use crate::clock::TimeSource;
use crate::nic::front;
use crate::nic::link::Link;
use crate::nic::sdp::PinBlock;
pub use crate::nic::sdp::{PinEdge, PinStats, SDP_PINS};
use crate::nic::{IrqMap, LinkSpeed, NicStats, Port, PortSetup, QueueMap, noise};
use crate::phc::TimeFormat;
use crate::truth::SharedObserver;
use tsync::{StampPair, TimeSync};

pub use crate::nic::front::{BAR0_LEN, BAR3_LEN};
/// IAM, the interrupt auto-mask register (e1000_regs.h E1000_IAM).
const IAM: u32 = 0x00E0;
/// EERD of the i210 (SRRD, e1000_regs.h E1000_SRRD; the 0x0014 EERD of older parts is gone).
const SRRD_I210: u32 = 0x12014;
/// PHY IDs (Linux e1000_defines.h).
const I210_I_PHY_ID: u32 = 0x0141_0C00;
const I350_I_PHY_ID: u32 = 0x0154_03B0;
const IGP03E1000_E_PHY_ID: u32 = 0x02A8_0390;
/// The i225 model's default TX pipeline, reused: no igb-specific figure is known.
pub use crate::igc::DEFAULT_TX_PIPELINE_NS;

/// Which igb part a model is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum IgbPart {
    /// i210 (copper 0x1533).
    I210,
    /// i211 (0x1539): an i210 without flash, same time-sync block.
    I211,
    /// i350 (copper 0x1521).
    I350,
    /// 82576 (0x10C9).
    E82576,
}

impl IgbPart {
    /// Every part, in `--emulate` name order.
    pub const ALL: [Self; 4] = [Self::I210, Self::I211, Self::I350, Self::E82576];

    /// The part named as `igbd --emulate` takes it: "i210", "i211", "i350" or "82576".
    pub fn from_name(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.name() == name)
    }

    /// The `--emulate` name.
    pub const fn name(self) -> &'static str {
        match self {
            Self::I210 => "i210",
            Self::I211 => "i211",
            Self::I350 => "i350",
            Self::E82576 => "82576",
        }
    }

    /// The device ID a model of the part has by default (§11).
    pub const fn default_device_id(self) -> u16 {
        match self {
            Self::I210 => 0x1533,
            Self::I211 => 0x1539,
            Self::I350 => 0x1521,
            Self::E82576 => 0x10C9,
        }
    }

    /// The driver family (`intel_regs::ids`).
    pub const fn family(self) -> Family {
        match self {
            Self::I210 | Self::I211 => Family::I210,
            Self::I350 => Family::I350,
            Self::E82576 => Family::I82576,
        }
    }

    /// SYSTIM's format (§3).
    pub const fn time_format(self) -> TimeFormat {
        match self {
            Self::I210 | Self::I211 => TimeFormat::I210,
            Self::I350 => TimeFormat::I350,
            Self::E82576 => TimeFormat::E82576,
        }
    }

    /// Whether a TX stamp raises TSICR.TXTS (and so ICR.TS): not on the 82576 (§7.5).
    pub const fn has_ts_interrupt(self) -> bool {
        !matches!(self, Self::E82576)
    }

    /// Whether the SDPs' time functions are modelled: i210/i211 and i350/82580 (Linux:
    /// n_pins 4); the 82576 has none in Linux (n_pins 0) and its TSAUXC is storage here.
    pub const fn has_pins(self) -> bool {
        !matches!(self, Self::E82576)
    }

    /// Whether SYSTIM is latched by a SYSTIMR read (i210/i350) rather than SYSTIML (82576).
    pub const fn latches_on_systimr(self) -> bool {
        !matches!(self, Self::E82576)
    }

    /// MSI-X table entries \[U: the parts' product documentation as commonly quoted; Linux
    /// needs only 1 + queues\].
    pub const fn msix_vectors(self) -> u16 {
        match self {
            Self::I210 | Self::I211 => 5,
            Self::I350 => 10,
            Self::E82576 => 25,
        }
    }

    /// Whether the part with `device` presents a flash (EECD.FLASH_DETECTED, module docs "NVM"):
    /// every i210 ID but the flashless 0x157B/0x157C (Linux e1000_hw.h
    /// E1000_DEV_ID_I210_COPPER_FLASHLESS / _SERDES_FLASHLESS); the i211 has only its iNVM.
    pub const fn has_flash(self, device: u16) -> bool {
        matches!(self, Self::I210) && !matches!(device, 0x157B | 0x157C)
    }

    const fn phy_id(self) -> u32 {
        match self {
            Self::I210 | Self::I211 => I210_I_PHY_ID,
            Self::I350 => I350_I_PHY_ID,
            Self::E82576 => IGP03E1000_E_PHY_ID,
        }
    }

    const fn eerd(self) -> u32 {
        match self {
            Self::I210 | Self::I211 => SRRD_I210,
            Self::I350 | Self::E82576 => EERD,
        }
    }
}

/// Why an [`Igb`] cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum IgbError {
    /// `--emulate` named no igb part.
    #[error("unknown igb part {0:?} (expected one of i210, i211, i350, 82576)")]
    UnknownPart(String),
    /// The device ID is not one of the part's family (§11).
    #[error("device ID {device:#06x} is not an {part:?}-family part")]
    WrongDeviceId {
        /// The configured part.
        part: IgbPart,
        /// The configured device ID.
        device: u16,
    },
    /// igb parts run at 10/100/1000 Mb/s only.
    #[error("{0} Mb/s is not an igb link speed")]
    LinkSpeed(u32),
}

/// How to build an [`Igb`].
#[derive(Clone)]
pub struct IgbConfig {
    /// Which part.
    pub part: IgbPart,
    /// PCI device ID: any of the part family's IDs (`intel_regs::ids::IGB_PARTS`).
    pub device_id: u16,
    /// PCI revision.
    pub revision: u8,
    /// The MAC address "in NVM": preloaded into RAL0/RAH0 at power-on and reset.
    pub mac: [u8; 6],
    /// The crystal's frequency error in ppb.
    pub osc_error_ppb: i64,
    /// SYSTIM at power-on, in ns (its ns view; on the 82576, count = ns << 19).
    pub initial_systim_ns: u64,
    /// True time: a [`VirtualClock`](crate::clock::VirtualClock) for deterministic tests, a
    /// [`HostClock`](crate::clock::HostClock) for real time.
    pub clock: Arc<dyn TimeSource>,
    /// Speed the link comes up at (10/100/1000).
    pub link_speed: LinkSpeed,
    /// Whether the cable is plugged in at power-on.
    pub cable_connected: bool,
    /// TSAUXC at power-on: DISABLE0 on i210/i350 by default (module docs).
    pub tsauxc_power_on: Tsauxc,
    /// True time from the TX engine picking a frame up to its first bit on the wire, ns.
    pub tx_pipeline_ns: u64,
    /// Stamp resolution, ns: latched stamps are truncated to multiples of it (0/1: exact).
    pub stamp_quantum_ns: u32,
    /// Stamp jitter, ns: a uniform draw from −jitter..=+jitter before the quantisation.
    pub stamp_jitter_ns: u32,
    /// Seed of the jitter draws.
    pub seed: u64,
}

impl std::fmt::Debug for IgbConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("IgbConfig")
            .field("part", &self.part)
            .field("device_id", &format_args!("{:#06x}", self.device_id))
            .field("mac", &self.mac)
            .field("osc_error_ppb", &self.osc_error_ppb)
            .field("link_speed", &self.link_speed)
            .finish_non_exhaustive()
    }
}

impl IgbConfig {
    /// `part` with its default device ID, a perfect crystal, SYSTIM 0, cable connected at
    /// 1 Gb/s and a locally administered MAC whose last byte tells the parts apart.
    pub fn new(part: IgbPart, clock: Arc<dyn TimeSource>) -> Self {
        let tag = match part {
            IgbPart::I210 => 0x10,
            IgbPart::I211 => 0x11,
            IgbPart::I350 => 0x35,
            IgbPart::E82576 => 0x76,
        };
        Self {
            part,
            device_id: part.default_device_id(),
            revision: 3,
            mac: [0x02, 0x00, 0x00, 0x00, 0x0B, tag],
            osc_error_ppb: 0,
            initial_systim_ns: 0,
            clock,
            link_speed: LinkSpeed::Mbps1000,
            cable_connected: true,
            tsauxc_power_on: if part == IgbPart::E82576 {
                Tsauxc::empty()
            } else {
                Tsauxc::DISABLE0
            },
            tx_pipeline_ns: DEFAULT_TX_PIPELINE_NS,
            stamp_quantum_ns: 0,
            stamp_jitter_ns: 0,
            seed: 0,
        }
    }

    /// [`Self::new`] for the part `--emulate` names ("i210", "i211", "i350", "82576").
    pub fn for_name(name: &str, clock: Arc<dyn TimeSource>) -> Result<Self, IgbError> {
        let part = IgbPart::from_name(name).ok_or_else(|| IgbError::UnknownPart(name.into()))?;
        Ok(Self::new(part, clock))
    }
}

/// The igb model. See the module docs for what is modelled and assumed.
pub struct Igb {
    part: IgbPart,
    ids: PciIds,
    /// Registers, link, interrupts, queue-0 engines, wire and the PCI front (shared with igc).
    port: Port,
    tsync: TimeSync,
    /// TSYNCTXCTL as written, without VALID (which is `tx_pair.valid`).
    tx_ctl: TsyncTxCtl,
    /// TXSTMPL/H (§7.5).
    tx_pair: StampPair,
    /// 82576 RXSTMPL/H, RXSATRL/H (§8.3).
    rx_pair: StampPair,
    /// What the SDPs are wired to ([`Self::attach_pins`]).
    pin_link: Option<Box<dyn crate::pinwire::PinLink>>,
}

impl std::fmt::Debug for Igb {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Igb")
            .field("part", &self.part)
            .field("device", &format_args!("{:#06x}", self.ids.device))
            .field("link_up", &self.port.link.up)
            .field("phc_ns", &self.phc_now_ns())
            .finish_non_exhaustive()
    }
}

impl Igb {
    /// A device just after power-on (NVM loaded, link down until the driver sets CTRL.SLU).
    pub fn new(cfg: IgbConfig) -> Result<Self, IgbError> {
        let part = cfg.part;
        if ids::igb_part(ids::VENDOR_INTEL, cfg.device_id).map(|p| p.family) != Some(part.family())
        {
            return Err(IgbError::WrongDeviceId {
                part,
                device: cfg.device_id,
            });
        }
        if cfg.link_speed == LinkSpeed::Mbps2500 {
            return Err(IgbError::LinkSpeed(2500));
        }
        let t = cfg.clock.now_ns();
        let format = part.time_format();
        let mut dev = Self {
            part,
            ids: crate::nic::intel_ethernet_ids(cfg.device_id, cfg.revision),
            port: Port::new(port_setup(&cfg)),
            tsync: TimeSync::new(
                format,
                t,
                cfg.initial_systim_ns,
                cfg.osc_error_ppb,
                cfg.tsauxc_power_on,
            ),
            tx_ctl: TsyncTxCtl::empty(),
            tx_pair: StampPair::default(),
            rx_pair: StampPair::default(),
            pin_link: None,
        };
        if part.has_flash(cfg.device_id) {
            dev.port.nvm = crate::nic::nvm::Nvm::i210_flash(cfg.mac, cfg.device_id);
        }
        Ok(dev)
    }

    /// The model `igbd --emulate NAME` runs: `name` is "i210", "i211", "i350" or "82576".
    pub fn emulate(name: &str, clock: Arc<dyn TimeSource>) -> Result<Self, IgbError> {
        Self::new(IgbConfig::for_name(name, clock)?)
    }

    /// Which part this is.
    pub fn part(&self) -> IgbPart {
        self.part
    }

    /// The part name a driver would log for this device ID (`intel_regs::ids::IGB_PARTS`).
    pub fn part_name(&self) -> &'static str {
        ids::igb_part(self.ids.vendor, self.ids.device).map_or("Intel igb (unknown ID)", |p| p.name)
    }

    /// SYSTIM's format.
    pub fn format(&self) -> TimeFormat {
        self.part.time_format()
    }

    fn now(&self) -> u64 {
        self.port.now()
    }

    /// Reports PHC law changes and BAR/cable counters to `observer` from now on (the
    /// ground-truth record, [`crate::truth`]: the law carries the family's [`TimeFormat`]); the
    /// law in force is published at once.
    pub fn set_observer(&mut self, observer: Option<SharedObserver>) {
        self.port
            .set_observer(observer, &mut self.tsync, |ts| &ts.phc);
    }

    /// Applies a PHC law change at the current true time ([`Port::change_law`]).
    /// The pins run up to that instant first, under the law they ran under.
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

    /// CTRL.RST: see the module docs for what survives.
    fn port_reset(&mut self) {
        self.port.port_reset();
        self.tsync.port_reset();
        self.tx_ctl = TsyncTxCtl::empty();
        self.tx_pair.port_reset();
        self.rx_pair.port_reset();
        self.sdp_ctrl_changed();
    }

    /// CTRL/CTRL_EXT changed: the pins' directions and software levels follow.
    fn sdp_ctrl_changed(&mut self) {
        let c = self.port.regs.get_reg(reg::CTRL);
        let e = self.port.regs.get_reg(reg::CTRL_EXT);
        let t = self.now();
        self.tsync.pins.write_ctrl(c, e, t);
    }

    /// Runs the pins up to now and raises the interrupt their causes call for.
    fn sync_pins(&mut self, host: &mut dyn DeviceHost) {
        if self.part.has_pins() {
            let t = self.now();
            self.tsync.advance_pins(t);
            self.update_ts(host);
        }
    }

    /// Raises ICR.TS if the time-sync causes just became pending (§2.4, §6).
    fn update_ts(&mut self, host: &mut dyn DeviceHost) {
        if self.tsync.cause.take_edge(TsCause::empty()) {
            self.port.irq.cause(IntCause::TS, host);
        }
    }

    /// TSYNCTXCTL.ENABLED.
    fn tx_enabled(&self) -> bool {
        self.tx_ctl.contains(TsyncTxCtl::ENABLED)
    }

    /// Queue registers 0xC000/0xE000 + 0x40·n (n < 4) alias the e1000 offsets (module docs);
    /// on the i210/i211 EERD at 0x0014 is SRRD at 0x12014 (module docs, "NVM").
    fn canonical(&self, offset: u32) -> u32 {
        if offset == EERD && self.part.eerd() == SRRD_I210 {
            return SRRD_I210;
        }
        let alias = |base: u32, e1000: u32| {
            (base..base + 0x100)
                .contains(&offset)
                .then(|| e1000 + (offset - base) / 0x40 * 0x100 + (offset - base) % 0x40)
        };
        alias(0xC000, 0x2800)
            .or_else(|| alias(0xE000, 0x3800))
            .unwrap_or(offset)
    }
}

/// The shared state's set-up for `cfg`.
fn port_setup(cfg: &IgbConfig) -> PortSetup {
    let part = cfg.part;
    PortSetup {
        name: part.name(),
        clock: cfg.clock.clone(),
        msix_vectors: part.msix_vectors(),
        link: Link::new(cfg.cable_connected, cfg.link_speed),
        noise: noise::StampNoise::with_format(
            part.time_format(),
            cfg.stamp_quantum_ns,
            cfg.stamp_jitter_ns,
            cfg.seed,
        ),
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
            eerd: part.eerd(),
        },
        phy_id: part.phy_id(),
        mac: cfg.mac,
    }
}

impl Igb {
    // --- Model-side controls and inspection (the shared ones are on `nic()`) ---

    /// The controls and counters every model shares: cable, link speed, wire, interrupt
    /// counters, the unimplemented-offset record.
    pub fn nic(&self) -> &Port {
        &self.port
    }

    /// [`Self::nic`], mutably.
    pub fn nic_mut(&mut self) -> &mut Port {
        &mut self.port
    }

    /// Changes the negotiated speed (raising ICR.LSC with the link up); 2.5 Gb/s is refused.
    pub fn set_link_speed(
        &mut self,
        speed: LinkSpeed,
        host: &mut dyn DeviceHost,
    ) -> Result<(), IgbError> {
        if speed == LinkSpeed::Mbps2500 {
            return Err(IgbError::LinkSpeed(2500));
        }
        self.port.set_link_speed(speed, host);
        Ok(())
    }

    /// Sets TSICR cause `bits` as a time-sync event would (i210/i350); an enabled cause raises
    /// ICR.TS. The 82576 has no time-sync interrupt: nothing happens.
    pub fn raise_tsicr(&mut self, bits: TsCause, host: &mut dyn DeviceHost) {
        if self.part.has_ts_interrupt() {
            self.tsync.cause.raise(bits);
            self.update_ts(host);
        }
    }

    /// Changes the crystal's frequency error now (ppb, clamped to ±999 999 999).
    pub fn set_osc_error_ppb(&mut self, ppb: i64) {
        self.change_phc(|ts, t| ts.phc.set_osc_error_ppb(t, ppb));
    }

    /// The crystal's frequency error in ppb.
    pub fn osc_error_ppb(&self) -> i64 {
        self.tsync.phc.osc_error_ppb()
    }

    /// SYSTIM now in its ns view (82576: count >> 19), wrapping like the part's counter.
    pub fn phc_now_ns(&self) -> u64 {
        self.tsync.phc.ns_at(self.now())
    }

    /// SYSTIM now as the registers hold it (SYSTIMH << 32 | SYSTIML), no latching.
    pub fn phc_raw(&self) -> u64 {
        self.tsync.phc.raw_at(self.now())
    }

    /// The PHC law in force (what the ground-truth record publishes).
    pub fn phc_law(&self) -> crate::phc::PhcLaw {
        self.tsync.phc.law()
    }

    /// Whether SYSTIM counts (TSAUXC.DISABLE0 clear; the 82576 also needs a non-zero TIMINCA).
    pub fn phc_running(&self) -> bool {
        let running = self.tsync.phc.is_running();
        match self.part {
            // IncPeriod 0 or IncValue 0: the counter does not advance (module docs of `phc`).
            IgbPart::E82576 => {
                let inca = self.tsync.phc.timinca();
                running && inca >> 24 != 0 && inca & 0x00FF_FFFF != 0
            }
            _ => running,
        }
    }

    /// TIMINCA as last written.
    pub fn timinca(&self) -> u32 {
        self.tsync.phc.timinca()
    }

    /// TSAUXC as last written (or its power-on value).
    pub fn tsauxc(&self) -> Tsauxc {
        self.tsync.tsauxc
    }

    /// Whether the model of `part` implements BAR0 `offset`; accesses elsewhere are recorded.
    pub fn implements(part: IgbPart, offset: u32) -> bool {
        known::implemented(part, offset & !3)
    }

    /// An external edge on an SDP at its true instant (i210/i350; see
    /// [`I225::schedule_pin_edge`](crate::igc::I225::schedule_pin_edge)).
    pub fn schedule_pin_edge(&mut self, edge: PinEdge) {
        self.tsync.pins.schedule(edge);
    }

    /// Wires the SDPs to `link` (i210/i350; see [`crate::igc::I225::attach_pins`]).
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

    /// Whether TSYNCTXCTL.VALID is set (the TX pair holds an unread stamp).
    pub fn tx_stamp_valid(&self) -> bool {
        self.tx_pair.valid
    }

    /// The 82576's TSYNCRXCTL.VALID (RXSTMPL/H hold an unread stamp).
    pub fn rx_stamp_valid(&self) -> bool {
        self.rx_pair.valid
    }

    /// Data-path and stamp counters.
    pub fn stats(&self) -> NicStats {
        NicStats {
            tx_stamps_latched: self.tx_pair.latched,
            tx_stamps_lost: self.tx_pair.lost,
            tx_stamps_released: self.tx_pair.released,
            ..self.port.stats
        }
    }
}

impl Device for Igb {
    fn ids(&self) -> PciIds {
        self.ids
    }

    fn bar_len(&self, bar: u8) -> Option<u32> {
        front::bar_len(bar)
    }

    fn msix_vectors(&self) -> u16 {
        self.part.msix_vectors()
    }

    fn read32(&mut self, bar: u8, offset: u32, host: &mut dyn DeviceHost) -> u32 {
        front::read32(self, bar, offset, host)
    }

    fn write32(&mut self, bar: u8, offset: u32, value: u32, host: &mut dyn DeviceHost) {
        front::write32(self, bar, offset, value, host);
        crate::nic::tx::after_write(self, bar, offset, host);
    }

    /// The timer and interrupt registers are applied in full by the write and schedule
    /// nothing (`Port::irq_write_applied`); a TDT write
    /// under [`crate::TxEngine::Sync`] ran the TX engine itself and wakes only for what it
    /// left; every other write may start engine work, so it wakes the model thread.
    fn write_wakes_model(&self, bar: u8, offset: u32) -> bool {
        if let Some(wake) = self.port.tdt_write_wakes(bar, offset) {
            return wake;
        }
        // TSAUXC and the pin registers may start a target or clock the thread must wait for.
        !(self.port.irq_write_applied(bar, offset)
            || bar == 0 && matches!(offset & !3, SYSTIML | SYSTIMH | TIMINCA | TIMADJL | TIMADJH))
    }

    fn poll(&mut self, host: &mut dyn DeviceHost) -> Option<Duration> {
        let mut due = None;
        if self.part.has_pins() {
            let t = self.now();
            due = crate::nic::sdp::poll_pins(&mut self.pin_link, &mut self.tsync, t);
            self.update_ts(host);
        }
        let next = front::poll(self, host);
        crate::nic::sdp::sooner(next, due)
    }
}
