//! What the igc (i225/i226) and igb (i210/i211, i350, 82576) models share, because the parts
//! share it: the e1000 lineage keeps CTRL/STATUS, the queue registers and advanced descriptors
//! (intel-timesync.md §9, §10), the extended interrupt set (§6: same EICR/EIMS/IVAR layout,
//! only ICR/IMS sit elsewhere on igb), the MDIC PHY interface, the shadow-RAM NVM word
//! interface and the statistics block. Each model owns a [`Port`] with that state and
//! implements [`Mac`] for what differs per family (how a frame is timestamped); the queue-0
//! engines in `tx` and `rx` run on any [`Mac`].
//!
//! - `regfile`: BAR storage and MMIO counters; `known`: the unimplemented-offset record;
//! - `irq`: ICR/IMS/EICR/... and MSI-X delivery (the offsets are the caller's);
//! - `link` / `phy` / `nvm`: STATUS link bits, the MDIC PHY, EERD/EECD/SWSM;
//! - `tx` / `tso` / `rx` / `csum` / `addrfilter` / `hwstats`: the queue-0 data path;
//! - `noise`: stamp jitter and quantisation; `hooks`: actions armed after a register read.

pub(crate) mod addrfilter;
mod api;
pub(crate) mod csum;
pub(crate) mod front;
pub(crate) mod hooks;
pub(crate) mod hwstats;
pub(crate) mod irq;
pub(crate) mod known;
pub(crate) mod link;
pub(crate) mod mmio;
pub(crate) mod msix;
pub(crate) mod noise;
pub(crate) mod nvm;
pub(crate) mod phy;
pub(crate) mod regfile;
pub(crate) mod rx;
pub mod sdp;
pub(crate) mod tscause;
pub(crate) mod tso;
pub(crate) mod tx;

use std::sync::Arc;

use intel_regs::ids::VENDOR_INTEL;
use ptp_pci::PciIds;
use ptp_pci::emulated::DeviceHost;

pub use hooks::{MAX_ARMED_READS, ReadAction};
pub use known::UnimplementedAccess;
pub use link::{LinkMode, LinkSpeed};
pub use msix::{MsixMessage, MsixSignal, MsixTable};
pub use tx::{MAX_TX_FRAME, TxEngine};

pub(crate) use mmio::{CtrlWrite, IrqMap};

use crate::clock::TimeSource;
use crate::phc::{Phc, PhcLaw};
use crate::truth::SharedObserver;
use crate::wire::WirePort;

/// Data-path and fault counters of a NIC model (model-side; survive port resets). Fields a
/// family has no use for stay 0 (the TXSTMPH_0 gate exists only on i225/i226).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NicStats {
    /// Frames that left the MAC (to the wire or, without one, nowhere).
    pub tx_frames: u64,
    /// Their bytes (after padding).
    pub tx_bytes: u64,
    /// Frames sent with no wire attached (dropped).
    pub tx_no_wire: u64,
    /// Frames the PHY looped back to this port's RX (BMCR.LOOPBACK) instead of the wire.
    pub tx_loopback: u64,
    /// Malformed TX frames dropped (bad buffer address, zero length, no EOP in a full ring,
    /// a TSO request the model cannot segment, ...).
    pub tx_malformed: u64,
    /// Frames whose checksums were inserted (POPTS.IXSM/TXSM with a context).
    pub tx_csum_inserted: u64,
    /// Frames whose checksum request the model could not honour (offsets outside the frame,
    /// SCTP): sent unchanged.
    pub tx_csum_skipped: u64,
    /// TSO frames (DCMD.TSE) segmented (each also counted in TSCTC).
    pub tx_tso_packets: u64,
    /// The segments they made (each also counted in `tx_frames`).
    pub tx_tso_segments: u64,
    /// Polls at which the TX queue stalled on a descriptor DMA could not read.
    pub tx_dma_errors: u64,
    /// Frames written to an RX buffer.
    pub rx_frames: u64,
    /// Their bytes (the frame only, without header or FCS).
    pub rx_bytes: u64,
    /// Of those, frames with a timestamp (a TSIP header, or igb 82576's descriptor TS bit).
    pub rx_stamped: u64,
    /// Frames dropped for want of a free RX descriptor (RX missed).
    pub rx_missed: u64,
    /// Frames dropped as longer than the long-packet limit (RCTL.LPE, RLPML; counted in ROC).
    pub rx_oversize: u64,
    /// Frames dropped as shorter than 64 bytes with FCS (counted in RUC).
    pub rx_runt: u64,
    /// Frames dropped because RX was disabled or the link down.
    pub rx_not_ready: u64,
    /// Frames dropped by the destination-address filter (RAL/RAH, MTA, RCTL.UPE/MPE/BAM).
    pub rx_filtered: u64,
    /// RX descriptors or buffers DMA could not reach.
    pub rx_dma_errors: u64,
    /// TX stamps latched into a set.
    pub tx_stamps_latched: u64,
    /// Latched TX stamps a driver's read of TXSTMPH released (any set): stamps handed over.
    pub tx_stamps_released: u64,
    /// TX stamps lost because their set still held an unread stamp.
    pub tx_stamps_lost: u64,
    /// TX stamps swallowed by fault injection (`drop_tx_stamps`).
    pub tx_stamps_dropped: u64,
    /// Releasing TXSTMPH reads a stuck TXTT bit survived (`stick_txtt`, injected).
    pub txtt_stuck_reads: u64,
    /// Time-sync interrupts swallowed by `drop_ts_interrupts` (injected).
    pub ts_irqs_dropped: u64,
    /// TX stamps whose TXTS interrupt the closed i225 §7.2 gate held back.
    pub txts_held_by_quirk: u64,
    /// PTP frames that found the 82576 RX stamp registers still holding an unread stamp
    /// (TSYNCRXCTL.VALID set): received without a stamp.
    pub rx_stamps_missed_held: u64,
}

/// The state every family's MAC has: register storage, link, interrupts, the queue-0 engines'
/// state and the wire. Public as [`crate::NicPort`] for the controls every model shares
/// (cable, link speed, wire, interrupt counters, the unimplemented-offset record).
pub struct Port {
    pub(crate) clock: Arc<dyn TimeSource>,
    /// BAR0 storage for every offset without behaviour of its own.
    pub(crate) regs: regfile::RegFile,
    pub(crate) link: link::Link,
    pub(crate) irq: irq::Interrupts,
    pub(crate) wire: Option<Box<dyn WirePort>>,
    pub(crate) stats: NicStats,
    /// The part's clear-on-read statistics block (0x4000–0x415C).
    pub(crate) hwstats: hwstats::HwStats,
    /// Jitter and quantisation of latched stamps (model-side; survives port resets).
    pub(crate) noise: noise::StampNoise,
    /// TX context slots of queue 0 (`csum`).
    pub(crate) tx_ctx: [csum::TxContext; csum::SLOTS],
    /// The wire is busy with earlier frames until this instant.
    pub(crate) tx_busy_until: u64,
    /// True time from the TX engine picking a frame up to its first bit on the wire, ns.
    pub(crate) tx_pipeline_ns: u64,
    /// Where a TDT write runs the TX engine ([`TxEngine`]).
    pub(crate) tx_engine: TxEngine,
    /// [`TxEngine::Sync`]: whether the last TDT write left work for the model thread (frames
    /// still posted, or a frame of ours now due back on a loopback wire).
    pub(crate) tx_sync_wake: bool,
    pub(crate) hooks: hooks::ReadHooks,
    pub(crate) unimpl: known::Unimplemented,
    /// Where the queue registers sit (they moved between the families).
    pub(crate) map: QueueMap,
    /// Where the interrupt registers and EERD sit.
    pub(crate) irqmap: IrqMap,
    /// The PHY behind MDIC.
    pub(crate) phy: phy::Phy,
    /// The NVM shadow RAM behind EERD.
    pub(crate) nvm: nvm::Nvm,
    /// Cable losses last reported to the ground-truth observer.
    pub(crate) reported_lost: u64,
    /// Where PHC law changes and register/wire counters are reported (the ground-truth
    /// record); `None` in deterministic tests.
    pub(crate) observer: Option<SharedObserver>,
    /// BAR3: the MSI-X table and PBA (`msix`); the PCI backend decides what a signalled
    /// vector becomes.
    pub(crate) msix: msix::MsixTable,
    /// Per-register BAR0 counters and totals over both BARs.
    pub(crate) counters: regfile::Counters,
    /// The MAC address in NVM (RAL0/RAH0 at power-on and reset).
    pub(crate) mac: [u8; 6],
    pub(crate) port_resets: u64,
}

/// What a [`Port`] is built from.
pub(crate) struct PortSetup {
    /// The part, for logs ("i225", "i210", ...).
    pub(crate) name: &'static str,
    pub(crate) clock: Arc<dyn TimeSource>,
    /// MSI-X table entries.
    pub(crate) msix_vectors: u16,
    pub(crate) link: link::Link,
    pub(crate) noise: noise::StampNoise,
    pub(crate) tx_pipeline_ns: u64,
    pub(crate) map: QueueMap,
    pub(crate) irqmap: IrqMap,
    /// PHYSID1:PHYSID2.
    pub(crate) phy_id: u32,
    /// The MAC address in NVM.
    pub(crate) mac: [u8; 6],
}

/// BAR0 offsets of queue 0's registers and of the IVAR entry that routes its causes.
#[derive(Debug, Clone, Copy)]
pub(crate) struct QueueMap {
    /// RDBAL(0); RDBAH, RDLEN, SRRCTL, RDH, RDT, RXDCTL follow at +4, +8, +0xC, +0x10,
    /// +0x18, +0x28.
    pub(crate) rx0: u32,
    /// TDBAL(0); TDBAH, TDLEN, TDH, TDT, TXDCTL follow at +4, +8, +0x10, +0x18, +0x28.
    pub(crate) tx0: u32,
    /// IVAR0: queue 0's RX cause in b7:0, TX in b15:8 (§6; the same on 82576, whose
    /// column-major table puts queue 0 in the same bytes).
    pub(crate) ivar0: u32,
}

/// Queue register offsets within a queue's block (§10.1).
pub(crate) mod q {
    pub(crate) const BAL: u32 = 0x00;
    pub(crate) const BAH: u32 = 0x04;
    pub(crate) const LEN: u32 = 0x08;
    pub(crate) const SRRCTL: u32 = 0x0C;
    pub(crate) const HEAD: u32 = 0x10;
    pub(crate) const TAIL: u32 = 0x18;
    pub(crate) const DCTL: u32 = 0x28;
}

/// How a received frame is timestamped (the family's choice, [`Mac::rx_stamp`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum RxStamp {
    /// No stamp.
    None,
    /// A 16-byte header in front of the frame, descriptor status TSIP (§8.1, §8.2).
    Header([u8; 16]),
    /// Extra write-back status bits (82576: TS b16 for a frame whose stamp the RXSTMP
    /// registers latched, §8.3).
    Status(intel_regs::e1000::RxStatus),
}

impl Port {
    /// A port at power-on: registers zero (the caller loads its power-on values), link down.
    pub(crate) fn new(p: PortSetup) -> Self {
        let mut port = Self {
            clock: p.clock,
            regs: regfile::RegFile::new(front::BAR0_LEN),
            link: p.link,
            irq: irq::Interrupts::default(),
            wire: None,
            stats: NicStats::default(),
            hwstats: hwstats::HwStats::default(),
            noise: p.noise,
            tx_ctx: Default::default(),
            tx_busy_until: 0,
            tx_pipeline_ns: p.tx_pipeline_ns,
            tx_engine: TxEngine::Thread,
            tx_sync_wake: false,
            hooks: hooks::ReadHooks::default(),
            unimpl: known::Unimplemented::new(p.name),
            map: p.map,
            irqmap: p.irqmap,
            phy: phy::Phy::new(p.phy_id),
            nvm: nvm::Nvm::new(p.mac),
            reported_lost: 0,
            observer: None,
            msix: msix::MsixTable::new(p.msix_vectors),
            counters: regfile::Counters::new(front::BAR0_LEN),
            mac: p.mac,
            port_resets: 0,
        };
        port.load_power_on(p.mac);
        port
    }

    /// Whether a write of `offset` in `bar` is one of the interrupt registers (ICR, ICS, IMS,
    /// IMC, IAM, GPIE, EICS, EIMS, EIMC, EIAC, EIAM, EICR, IVAR_MISC): applied entirely by the
    /// write, the messages it causes included (`irq`), so it gives the model thread no work. A
    /// driver writes them on every interrupt (the re-arm): waking the model thread for each
    /// cost a wake-up per interrupt for nothing.
    pub(crate) fn irq_write_applied(&self, bar: u8, offset: u32) -> bool {
        use intel_regs::e1000::{EIAC, EIAM, EICR, EICS, EIMC, EIMS, GPIE, IVAR_MISC};
        let m = &self.irqmap;
        let o = offset & !3;
        bar == 0
            && ([m.icr, m.ics, m.ims, m.imc, m.iam].contains(&o)
                || [GPIE, EICS, EIMS, EIMC, EIAC, EIAM, EICR, IVAR_MISC].contains(&o))
    }

    /// Queue 0's RX register `reg` (a [`q`] offset).
    pub(crate) fn rxq(&self, reg: u32) -> u32 {
        self.regs.get(self.map.rx0 + reg)
    }

    /// Queue 0's TX register `reg`.
    pub(crate) fn txq(&self, reg: u32) -> u32 {
        self.regs.get(self.map.tx0 + reg)
    }

    /// True time now, ns.
    pub(crate) fn now(&self) -> u64 {
        self.clock.now_ns()
    }

    /// Port reset of the data-path state (the caller clears and reloads the registers).
    pub(crate) fn reset_datapath(&mut self) {
        self.hwstats = hwstats::HwStats::default();
        self.tx_ctx = Default::default();
        self.irq.reset();
    }
}

/// What differs per family in the data path: the engines call these.
pub(crate) trait Mac {
    /// The shared state.
    fn port(&mut self) -> &mut Port;
    /// A frame whose first data descriptor has MAC_TSTAMP (`first_cmd`, §7.1) leaves at true
    /// time `departure`: latch its stamp (when the family's enables allow) and raise what
    /// the family raises.
    fn tx_stamp(&mut self, departure: u64, first_cmd: u32, host: &mut dyn DeviceHost);
    /// A frame (`data`, from its destination MAC on) that passed the address filter and found
    /// a descriptor arrived at true time `arrival`: how it is stamped.
    fn rx_stamp(&mut self, arrival: u64, data: &[u8]) -> RxStamp;
}

/// PCI identity of an Intel Ethernet function: Intel vendor and subsystem vendor, class
/// network controller (0x02), subclass Ethernet (0).
pub(crate) fn intel_ethernet_ids(device: u16, revision: u8) -> PciIds {
    PciIds {
        vendor: VENDOR_INTEL,
        device,
        class: 0x02,
        subclass: 0,
        interface: 0,
        revision,
        subsystem_vendor: VENDOR_INTEL,
        subsystem: 0,
    }
}

/// The PHC and its ground-truth record, for a family's time-sync state `T` that holds the
/// [`Phc`] (`phc(state)`).
impl Port {
    /// Reports PHC law changes and BAR/cable counters to `observer` from now on (the
    /// ground-truth record, [`crate::truth`]); the law in force is published at once.
    pub(crate) fn set_observer<T>(
        &mut self,
        observer: Option<SharedObserver>,
        state: &mut T,
        phc: fn(&T) -> &Phc,
    ) {
        self.observer = observer;
        self.reported_lost = 0;
        self.change_law(state, phc, |_, _| {});
    }

    /// Applies a PHC law change `f(state, t)` at the current true time `t`. With an observer
    /// the change runs inside its update, so the time of the change is read after readers were
    /// warned and the new law (`phc(state)`'s) is published before the driver's access returns.
    pub(crate) fn change_law<T>(
        &self,
        state: &mut T,
        phc: fn(&T) -> &Phc,
        f: impl FnOnce(&mut T, u64),
    ) {
        let clock = &*self.clock;
        let Some(obs) = self.observer.as_ref() else {
            f(state, clock.now_ns());
            return;
        };
        let mut f = Some(f);
        obs.phc_law_update(&mut || -> PhcLaw {
            let t = clock.now_ns();
            if let Some(f) = f.take() {
                f(state, t);
            }
            phc(state).law()
        });
    }
}
