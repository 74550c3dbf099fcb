//! What differs between the Intel families a daemon drives (DESIGN.md §5): [`Family`] is the
//! seam between the shared daemon ([`crate::daemon`]) and one family module ([`crate::igc`] for
//! i225/i226, [`crate::igb`] for i210/i211, i350 and 82576).
//!
//! A family says how many TX timestamp sets it has and where they are, how SYSTIM is latched,
//! read and written and how adjfine becomes TIMINCA (its [`Family::Clock`]), where RX stamps
//! come from (in the buffer or in RXSTMPL/H), whether TX stamps raise an interrupt, its
//! latency table, and how reset, link and interrupts are programmed. Everything else — rings,
//! threads, the TX slot table, requests, the channel and the clock page — is written once.

use std::time::Duration;

use intel_regs::e1000::{IntCause, RxStatus, Status, TsCause, TsyncTxCtl, reg};
use intel_regs::ids::Part;
use ptp_ipc::RxFilter;
use ptp_pci::Mmio;

use crate::clock::ClockHw;
use crate::mac::{self, MacRegs};
use crate::ring::{RxRing, TxRing};
use crate::txts::TsRegs;
use crate::{HwError, Regs};

/// Link state decoded from STATUS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Link {
    pub up: bool,
    pub speed_mbps: u32,
}

/// A running PHC that a previous driver instance left configured, kept at start instead of
/// reset (warm attach): what [`Family::warm_phc`] found.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WarmPhc {
    /// SYSTIM at the second probe read, ns.
    pub phc_ns: u64,
    /// The frequency offset TIMINCA holds, in `scaled_ppm`.
    pub scaled_ppm: i64,
    /// How fast SYSTIM advanced against the host's monotonic clock over the probe, ppm.
    pub measured_ppm: f64,
    /// TX stamps latched for the dead instance (TXTT bits set): no request owns them.
    pub pending_tx: u32,
}

impl std::fmt::Display for WarmPhc {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "SYSTIM {}.{:09} s, TIMINCA {:+.3} ppm, advancing at {:+.0} ppm of the host clock, {} \
             TX stamp(s) of the previous instance discarded",
            self.phc_ns / 1_000_000_000,
            self.phc_ns % 1_000_000_000,
            crate::clock::scaled_ppm_to_ppb(self.scaled_ppm) / 1000.0,
            self.measured_ppm,
            self.pending_tx
        )
    }
}

/// MSI-X vector assignment (every family): queues on 0, the "other" causes (link, time sync)
/// on their own vector so the timestamp IRQ thread is woken only by time-sync work.
pub const VECTOR_QUEUES: u16 = 0;
pub const VECTOR_OTHER: u16 = 1;
pub const VECTORS: u16 = 2;

/// How the interrupt causes are spread over vectors.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IrqLayout {
    /// MSI-X: "other" causes (link, time sync) on one vector, queue 0 on another.
    Split,
    /// One MSI-X vector for every cause.
    SingleMsix,
    /// MSI, the legacy line or none: every cause in ICR.
    Shared,
}

/// Which vector to re-arm after its causes were handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rearm {
    Other,
    Queues,
    Single,
}

/// What one read of the "other" causes found, decoded by the family.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Causes {
    /// ICR.TS: a time-sync interrupt.
    pub time_sync: bool,
    /// TSICR.TXTS: the TX stamp registers hold a stamp.
    pub tx_stamp: bool,
    /// ICR.LSC: the link changed.
    pub link: bool,
    /// The TSICR causes read (or cleared) with ICR.TS: what the pins handle beside TXTS.
    pub tsicr: TsCause,
    /// Any cause of the "other" vector.
    pub other: bool,
    /// Any cause a single-vector driver enabled.
    pub any: bool,
}

/// What the driver does with one received buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RxFrame<'a> {
    /// A PTP frame for ptpd, with its RX timestamp (latency-compensated) if the filter keeps it.
    Ptp { rx_ns: Option<u64>, frame: &'a [u8] },
    /// Anything else (counted; the netstack's, once one is attached).
    Other { frame: &'a [u8] },
}

/// One NIC family's behaviour. Methods take `&self`: one daemon may drive MACs that differ
/// (igbd: i210, i350, 82576), and a family may keep state shared with its clock (the igb
/// timecounter that TX and RX stamps are converted through).
pub trait Family: Send + Sync + Sized + Clone + std::fmt::Debug + 'static {
    /// The SYSTIM clock, handed to [`crate::clock::Phc`].
    type Clock: ClockHw + 'static;

    /// The daemon's name (`igcd`, `igbd`): logs and usage.
    const DAEMON: &'static str;
    /// The short name in scheme, clock page and log paths (`igc`, `igb`).
    const SHORT: &'static str;
    /// The `--emulate` names this daemon accepts.
    const MODELS: &'static [&'static str];
    /// The most TX timestamp sets any part of the family has.
    const MAX_TX_SETS: u8;

    /// Identifies the part behind `vendor:device` and the behaviour it needs.
    fn probe(vendor: u16, device: u16) -> Result<(&'static Part, Self), HwError>;
    /// The clock of this part (sharing the family's state where it has any).
    fn clock(&self) -> Self::Clock;

    /// Where the family's MAC registers differ ([`mac`]).
    fn mac_regs(&self) -> MacRegs;
    /// STATUS decoded into the link state (the speed bits differ).
    fn link_from_status(&self, status: Status) -> Link;
    /// The ICR causes a single-vector or polled driver enables.
    fn shared_causes(&self) -> IntCause;

    /// Resets the port with bounded waits.
    fn reset<M: Mmio>(&self, regs: &Regs<M>) -> Result<(), HwError> {
        mac::reset(regs, &self.mac_regs())
    }
    /// Takes ownership from firmware, asks for link and waits at most `wait` for it.
    fn link_up<M: Mmio>(&self, regs: &Regs<M>, wait: Duration) -> Link {
        self.link_from_status(mac::link_up(regs, wait))
    }
    /// The link as STATUS shows it now.
    fn link<M: Mmio>(&self, regs: &Regs<M>) -> Link {
        self.link_from_status(regs.get(reg::STATUS))
    }
    /// The MAC address the NVM preloaded.
    fn read_mac<M: Mmio>(&self, regs: &Regs<M>) -> [u8; 6] {
        mac::read_mac(regs)
    }
    /// Programs TX queue 0 over `ring` and enables the transmitter.
    fn setup_tx<M: Mmio>(&self, regs: &Regs<M>, ring: &TxRing) {
        mac::setup_tx(regs, &self.mac_regs(), ring)
    }
    /// Programs RX queue 0 over `ring` and enables the receiver.
    fn setup_rx<M: Mmio>(&self, regs: &Regs<M>, ring: &RxRing) {
        mac::setup_rx(regs, &self.mac_regs(), ring)
    }
    /// TX tail register of queue 0.
    fn tdt(&self) -> u32 {
        self.mac_regs().tdt()
    }
    /// RX tail register of queue 0.
    fn rdt(&self) -> u32 {
        self.mac_regs().rdt()
    }

    /// Routes and enables the causes for `layout` (§6): MSI-X with the "other" causes and the
    /// queues on their own vectors, everything on one MSI-X vector, or plain ICR.
    fn enable_irqs<M: Mmio>(&self, regs: &Regs<M>, layout: IrqLayout) {
        let m = self.mac_regs();
        match layout {
            IrqLayout::Split => {
                mac::route_other_msix(regs, &m, VECTOR_OTHER);
                mac::route_queue_msix(regs, VECTOR_QUEUES);
            }
            IrqLayout::SingleMsix => {
                mac::route_other_msix(regs, &m, 0);
                mac::route_queue_msix(regs, 0);
            }
            IrqLayout::Shared => mac::route_shared(regs, &m, self.shared_causes()),
        }
    }
    /// Re-enables a vector (auto-masked when it fired) after its causes were handled.
    fn rearm<M: Mmio>(&self, regs: &Regs<M>, which: Rearm) {
        let v = match which {
            Rearm::Other => 1 << VECTOR_OTHER,
            Rearm::Queues => 1 << VECTOR_QUEUES,
            Rearm::Single => 1,
        };
        regs.write(intel_regs::igc::EIMS, v);
    }
    /// Reads (and so clears) the causes of the "other" vector; `pins`: the time-sync causes the
    /// pins have enabled beside TXTS (their TSICR bits must be read, not just cleared).
    fn read_causes<M: Mmio>(&self, regs: &Regs<M>, pins: TsCause) -> Causes;
    /// Raises the vector the time-sync thread waits on, by software, so that it wakes now.
    fn kick<M: Mmio>(&self, regs: &Regs<M>, layout: IrqLayout);

    /// PTP reset: the clock counting, time-sync causes enabled, the time set to `now_ns`.
    fn ptp_reset<M: Mmio>(&self, regs: &Regs<M>, now_ns: u64);
    /// The PHC as a previous driver left it, if it runs sanely and the family can keep it
    /// across drivers (warm attach); else why not. By default a family resets it.
    fn warm_phc<M: Mmio>(&self, regs: &Regs<M>) -> Result<WarmPhc, String> {
        let _ = regs;
        Err("this family always resets its PHC".into())
    }
    /// The warm path's reset: DMA and interrupts stopped without a port reset, so the timer
    /// and the link are left alone.
    fn quiesce<M: Mmio>(&self, regs: &Regs<M>) {
        mac::quiesce(regs, &self.mac_regs())
    }
    /// The warm counterpart of [`Family::ptp_reset`]: time-sync causes enabled, the timer
    /// (SYSTIM, TIMINCA, TSAUXC) untouched.
    fn ptp_rearm<M: Mmio>(&self, regs: &Regs<M>) {
        let _ = regs;
    }
    /// Where the TX stamp sets are.
    fn ts_regs(&self) -> TsRegs;
    /// TSYNCTXCTL value that enables TX timestamping.
    fn tsynctxctl_on(&self) -> TsyncTxCtl;
    /// Descriptor command bits that ask for a stamp in `set`.
    fn tx_tstamp_cmd(&self, set: u8) -> u32;
    /// Whether a TX stamp raises TSICR.TXTS; without it the time-sync thread polls while a
    /// request is pending.
    fn has_tx_ts_irq(&self) -> bool;
    /// Opens or closes the TX stamp cause's path to the interrupt (TSIM.TXTS) around a look
    /// for a stamp by the thread that posted its frame (`--tx-inline-us`). Opening with the
    /// cause latched raises ICR.TS then in our models (the rising edge of `TSICR & TSIM`); the
    /// driver does not rely on it (`Data::take_inline`). Nothing on parts without the interrupt.
    /// `pins`: the causes the pins keep enabled either way.
    fn gate_tx_stamp_irq<M: Mmio>(&self, regs: &Regs<M>, open: bool, pins: TsCause);
    /// Clears a latched TX stamp cause (TSICR.TXTS) before a look at the stamp registers, so
    /// that a stamp landing after the look latches it again. Returns the other causes a
    /// read-to-clear took with it (the pins' to handle); a write-1-to-clear takes none.
    fn clear_tx_stamp_cause<M: Mmio>(&self, regs: &Regs<M>) -> TsCause;
    /// Whether the part's SDPs are served ([`crate::pins`]): SYSTIM in seconds and ns.
    fn has_pins(&self) -> bool {
        false
    }
    /// A raw TX stamp (as [`crate::txts::Delivered::raw_ns`]) in PHC ns.
    fn tx_stamp_ns(&self, raw: u64) -> u64;

    /// The RX filters this part can serve.
    fn rx_filters(&self) -> &'static [RxFilter];
    /// Whether `filter` can be served (checked before anything is touched).
    fn check_rx_filter(&self, filter: RxFilter) -> Result<(), HwError>;
    /// Applies an RX filter without touching the link or the rings.
    fn apply_rx_filter<M: Mmio>(&self, regs: &Regs<M>, filter: RxFilter) -> Result<(), HwError>;
    /// Classifies one received buffer and finds its stamp (in the buffer, or in RXSTMPL/H).
    fn rx_frame<'a, M: Mmio>(
        &self,
        regs: &Regs<M>,
        filter: RxFilter,
        status: RxStatus,
        buf: &'a [u8],
        rx_latency_ns: u64,
    ) -> RxFrame<'a>;
    /// RX stamps the part took but no frame got (82576: a held latch), so far.
    fn rx_stamps_lost(&self) -> u64 {
        0
    }
    /// Periodic upkeep from the watchdog (82576: release an RX latch held too long).
    fn watchdog<M: Mmio>(&self, _regs: &Regs<M>, _now_ns: u64) {}

    /// (TX, RX) latency compensation at a link speed, ns.
    fn latency_ns(&self, speed_mbps: u32) -> (u64, u64);
    /// Whether gettimex brackets are tight enough to offer cross timestamps.
    fn cross_timestamp(&self) -> bool {
        true
    }
}

/// PTP messageType values (IEEE 1588-2008 Table 19).
pub const MSG_SYNC: u8 = 0x0;
pub const MSG_DELAY_REQ: u8 = 0x1;

/// Whether a frame stamped by the hardware keeps its stamp under `filter` (a part stamps more
/// than asked when its hardware filter is wider, e.g. TYPE_ALL).
pub fn keeps_rx_stamp(filter: RxFilter, frame: &[u8]) -> bool {
    use ptp_ipc::frame::{Transport, classify};
    let info = classify(frame);
    let event_v2 = |t: fn(&Transport) -> bool| {
        info.is_some_and(|i| i.version == 2 && i.is_event() && t(&i.transport))
    };
    fn l2(t: &Transport) -> bool {
        matches!(t, Transport::L2)
    }
    fn l4(t: &Transport) -> bool {
        matches!(t, Transport::Udp4 { dst_port: 319 })
    }
    let v2_type = |t: fn(&Transport) -> bool, ty: u8| {
        info.is_some_and(|i| i.version == 2 && i.message_type == ty && t(&i.transport))
    };
    match filter {
        RxFilter::None | RxFilter::PtpV1L4Event => false,
        RxFilter::All => true,
        RxFilter::PtpV2Event => event_v2(|t| l2(t) || l4(t)),
        RxFilter::PtpV2L2Event => event_v2(l2),
        RxFilter::PtpV2L4Event => event_v2(l4),
        RxFilter::PtpV2L2Sync => v2_type(l2, MSG_SYNC),
        RxFilter::PtpV2L2DelayReq => v2_type(l2, MSG_DELAY_REQ),
        RxFilter::PtpV2L4Sync => v2_type(l4, MSG_SYNC),
        RxFilter::PtpV2L4DelayReq => v2_type(l4, MSG_DELAY_REQ),
    }
}

/// The in-buffer RX path (§8.1, §8.2): strips the timestamp header (status bit TSIP), keeps
/// the stamp only when `filter` asks for this frame, converts it with `to_ns` (the header's
/// dwords 2–3 as one LE u64) and subtracts the RX latency of the link (§8.4).
pub fn in_buffer_rx_frame(
    filter: RxFilter,
    status: RxStatus,
    buf: &[u8],
    rx_latency_ns: u64,
    to_ns: impl FnOnce(u64) -> u64,
) -> RxFrame<'_> {
    let (raw, frame) = split_ts_header(status, buf);
    if ptp_ipc::frame::classify(frame).is_none() {
        return RxFrame::Other { frame };
    }
    let rx_ns = raw
        .filter(|_| keeps_rx_stamp(filter, frame))
        .map(|raw| to_ns(raw).saturating_sub(rx_latency_ns));
    RxFrame::Ptp { rx_ns, frame }
}

/// A stamp whose high word is seconds and low word nanoseconds (i225, i210: SYSTIMH:SYSTIML,
/// the RX header's dwords 3:2), in ns.
pub fn sec_ns(raw: u64) -> u64 {
    (raw >> 32) * 1_000_000_000 + (raw & 0xFFFF_FFFF)
}

/// The 16-byte timestamp header the in-buffer mode puts before a frame (TSIP, §8.1): its
/// dwords 2–3 as one little-endian u64 (igc and i210: ns | s << 32; i350: the raw count).
pub fn split_ts_header(status: RxStatus, buf: &[u8]) -> (Option<u64>, &[u8]) {
    const HDR: usize = 16;
    if !status.contains(RxStatus::TSIP) || buf.len() < HDR {
        return (None, buf);
    }
    let mut b = [0u8; 8];
    b.copy_from_slice(&buf[8..16]);
    (Some(u64::from_le_bytes(b)), &buf[HDR..])
}
