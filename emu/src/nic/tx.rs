//! The TX data path of queue 0 (intel-timesync.md §9 descriptors, §10 rings, §7 stamps),
//! shared by the igc and igb models: the stamp itself is the family's ([`Mac::tx_stamp`]).
//!
//! When TCTL.EN, TXDCTL(0).QUEUE_ENABLE and the link are up and TDT ≠ TDH, the engine fetches
//! advanced TX descriptors by DMA from TDH on, gathers the buffers of one frame until EOP,
//! hands the frame to the wire, writes back DD where RS was set, advances TDH and raises
//! ICR.TXDW. It runs from [`Device::poll`](ptp_pci::emulated::Device::poll) (a TDT write
//! wakes the model thread: [`TxEngine::Thread`]), inside the TDT write itself
//! ([`TxEngine::Sync`]), or from an armed read ([`ReadAction::ReleaseTx`](super::ReadAction)).
//! Queues 1–3 are register storage only.
//!
//! # Where the engine runs
//!
//! Both modes run the same [`run_tx`]: the departure instant, the stamp latched for it, the
//! write-back, TXDW and the time-sync interrupt are the model's, computed from the model's
//! clock when the engine runs. What differs is *when* it runs:
//!
//! - [`TxEngine::Thread`] (the default): the TDT write wakes the model thread, which runs the
//!   engine when the host scheduler lets it — a wake-up and a thread hand-off per doorbell,
//!   and on a busy host tens of µs or more during which the clock keeps running, so the
//!   frame's departure (and its stamp) is later than the doorbell by that hand-off, which
//!   hardware does not have.
//! - [`TxEngine::Sync`]: the write of TDT runs the engine on the writer's thread, under the
//!   bus lock the write already holds; the frame's departure is `tx_pipeline_ns` after the
//!   doorbell (or the end of the previous frame's serialisation at the link speed, whichever is
//!   later), as the model defines it, with no host scheduling in between. Frames posted by
//!   several TDT writes are each processed at their own write; back-to-back frames still queue
//!   behind each other's serialisation (`tx_busy_until`), so their departures are spaced as in
//!   the threaded mode. As in the threaded mode the stamp (the PHC at the departure instant)
//!   and its interrupt become visible when the engine runs, which is up to `tx_pipeline_ns`
//!   plus any serialisation wait *before* the departure instant they describe: the model has
//!   no timer to deliver them later, and a driver that read them "too early" cannot tell, since
//!   the value is the departure's. A TDT write that leaves work behind (frames not yet
//!   sendable: link down, queue disabled, a held engine, a stalled descriptor) or puts a frame
//!   on a loopback wire that this port receives itself still wakes the model thread.
//!
//! # Assumptions
//!
//! - \[assumption\] The ring size is TDLEN b19:7 / 16 (the reference: "multiple of 128");
//!   TDH or TDT at or past the ring size leave the queue idle.
//! - \[assumption\] A descriptor DMA cannot read stalls the queue (TDH stays, counted in
//!   `tx_dma_errors`): the hardware cannot know what it holds. It is retried at every poll.
//! - \[assumption\] Only advanced descriptors (DEXT) are understood. Context descriptors
//!   (DTYP 0x2) load their context slot; a data descriptor's POPTS.IXSM/TXSM insert the
//!   checksums that context describes (`csum`). A frame whose first data descriptor has
//!   DCMD.TSE is segmented as its context's MSS and L4LEN describe (`tso`): each segment is a
//!   frame on the wire, counted in `tx_tso_segments` (and TSCTC once per TSO frame). A legacy
//!   descriptor, another DTYP, a zero DTALEN, a frame over [`MAX_TX_FRAME`] (a TSE frame:
//!   over [`MAX_TSO_FRAME`]), a buffer DMA cannot read or a TSO request `tso` refuses makes
//!   the frame malformed: it is dropped and counted, and its descriptors up to its EOP (or all
//!   posted ones) are consumed and written back, so the queue never wedges.
//! - A frame spans data descriptors up to the one with EOP (§9); context descriptors may sit
//!   between them. \[assumption\] A frame whose EOP is not posted yet waits for it; if the
//!   ring is full (n − 1 descriptors posted) without an EOP, it can never complete and is
//!   malformed.
//! - Without TSE, PAYLEN is ignored; the frame is the concatenated DTALEN bytes. With TSE,
//!   PAYLEN must match them (`tso`). With TCTL.PSP, frames (and segments) under 60 bytes are
//!   padded with zeros to 60 (the FCS is not on the model's wire).
//! - \[assumption\] A TSE frame with MAC_TSTAMP has its first segment stamped.
//! - Write-back sets only DW3 = DD (§9: "DW3 status, DD b0, written only when RS was set");
//!   the rest of the descriptor keeps what the driver wrote \[assumption\].
//! - Departure: the first frame of an idle link leaves `tx_pipeline_ns` after the engine
//!   runs; later ones wait for the previous frame's serialisation (preamble, FCS and
//!   inter-frame gap included) at the link speed.
//! - The TX stamp (a frame with MAC_TSTAMP) is latched by the family's [`Mac::tx_stamp`]
//!   when the engine processes the frame, from the PHC at the departure instant.
//! - PHY loopback (BMCR.LOOPBACK, `phy`): the frame goes to this port's own RX path, arriving
//!   at its departure instant, and not to the wire (counted in `tx_loopback`); Linux igb's
//!   offline self-test sends its loopback frames so (igb_ethtool.c igb_integrated_phy_loopback,
//!   igb_run_loopback_test). \[U\] The PHY's own latency is not modelled.

use intel_regs::e1000::*;
use ptp_pci::emulated::DeviceHost;

use super::csum;
use super::irq::QueueCause;
use super::tso::Tso;
use super::{Mac, q};

/// Which thread runs the TX engine after a TDT write (module docs, "Where the engine runs").
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum TxEngine {
    /// The TDT write wakes the model thread, whose poll runs the engine.
    #[default]
    Thread,
    /// The TDT write runs the engine on the writer's thread, inside the write.
    Sync,
}

impl std::str::FromStr for TxEngine {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "thread" => Ok(Self::Thread),
            "sync" => Ok(Self::Sync),
            _ => Err(format!("bad TX engine {s:?} (sync, thread)")),
        }
    }
}

impl super::Port {
    /// Chooses where a TDT write runs the TX engine from now on.
    pub fn set_tx_engine(&mut self, engine: TxEngine) {
        self.tx_engine = engine;
        self.tx_sync_wake = false;
    }

    /// Where a TDT write runs the TX engine.
    pub fn tx_engine(&self) -> TxEngine {
        self.tx_engine
    }

    /// Whether `offset` of `bar` is queue 0's TDT.
    fn is_tdt(&self, bar: u8, offset: u32) -> bool {
        bar == 0 && offset & !3 == self.map.tx0 + q::TAIL
    }

    /// `Device::write_wakes_model` for TDT: `Some(wake)` when the write was queue 0's TDT under
    /// [`TxEngine::Sync`] (the engine already ran; wake only for what it left behind), `None`
    /// for anything else (the model's own answer stands).
    pub(crate) fn tdt_write_wakes(&self, bar: u8, offset: u32) -> Option<bool> {
        (self.tx_engine == TxEngine::Sync && self.is_tdt(bar, offset)).then_some(self.tx_sync_wake)
    }
}

/// After a BAR write (`Device::write32`): under [`TxEngine::Sync`] a write of queue 0's TDT
/// runs the engine now, on the writer's thread, and notes whether the model thread is still
/// needed ([`super::Port::tdt_write_wakes`]).
pub(crate) fn after_write<M: Mac>(m: &mut M, bar: u8, offset: u32, host: &mut dyn DeviceHost) {
    let p = m.port();
    if p.tx_engine != TxEngine::Sync || !p.is_tdt(bar, offset) {
        return;
    }
    let arrival = |p: &super::Port| p.wire.as_ref().and_then(|w| w.next_arrival());
    let before = arrival(p);
    run_tx(m, host, false);
    let p = m.port();
    let after = arrival(p);
    let left = p.txq(q::HEAD) != p.txq(q::TAIL);
    p.tx_sync_wake = left || (after.is_some() && after != before);
}

/// Largest frame the engine gathers (bytes); longer ones are malformed.
pub const MAX_TX_FRAME: usize = 16 * 1024;
/// Largest TSE frame the engine gathers: PAYLEN's 18 bits (b31:14) behind the longest header a
/// context describes (MACLEN 127 + IPLEN 511 + L4LEN 255).
pub const MAX_TSO_FRAME: usize = (1 << 18) - 1 + 127 + 511 + 255;
/// Frames shorter than this are padded with TCTL.PSP (64-byte minimum less the FCS).
const MIN_FRAME: usize = 60;
/// Bytes on the wire besides the frame: preamble + SFD (8), FCS (4), inter-frame gap (12).
const WIRE_OVERHEAD: u64 = 24;

/// TDLEN/RDLEN bits the ring size is taken from: b19:7 \[assumption: the igb-family field
/// width; the low 7 bits are ignored, so a ring is a multiple of 8 descriptors\]. Bounds a ring
/// to 65 528 descriptors, and so every walk of it.
const LEN_MASK: u32 = 0x000F_FF80;

/// A ring as its registers describe it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ring {
    pub(crate) base: u64,
    /// Descriptors.
    pub(crate) n: u32,
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

impl Ring {
    /// The ring from BAL/BAH/LEN/H/T; `None` if it is unusable (no descriptors, pointers
    /// out of range).
    pub(crate) fn from_regs(bal: u32, bah: u32, len: u32, head: u32, tail: u32) -> Option<Self> {
        let n = (len & LEN_MASK) / 16;
        (n > 0 && head < n && tail < n).then_some(Self {
            base: (bah as u64) << 32 | bal as u64,
            n,
            head,
            tail,
        })
    }

    /// Bus address of descriptor `i`.
    pub(crate) fn desc_addr(&self, i: u32) -> Option<u64> {
        self.base.checked_add(i as u64 * 16)
    }

    /// Descriptors between head and tail.
    pub(crate) fn posted(&self) -> u32 {
        (self.tail + self.n - self.head) % self.n
    }
}

/// What the engine found at TDH.
enum Fetch {
    /// Nothing to send (yet).
    Idle,
    /// A complete frame.
    Frame {
        data: Vec<u8>,
        /// cmd_type_len of the first data descriptor (MAC_TSTAMP, TSTAMP_REG).
        first_cmd: u32,
        /// olinfo_status of the first data descriptor (POPTS, context IDX).
        olinfo: u32,
        consumed: u32,
        rs: Vec<u32>,
    },
    /// A broken frame to drop.
    Malformed { consumed: u32, rs: Vec<u32> },
    /// The descriptor at TDH cannot be read: stall there.
    Stalled,
}

/// One 16-byte TX descriptor: QW0 (buffer address, or a context's vlan_macip_lens and
/// launch time), DW2 (cmd_type_len / type_tucmd_mlhl), DW3 (olinfo_status / mss_l4len_idx).
fn read_desc(host: &mut dyn DeviceHost, ring: &Ring, i: u32) -> Option<(u64, u32, u32)> {
    let mut d = [0u8; 16];
    if !host.dma_read(ring.desc_addr(i)?, &mut d) {
        return None;
    }
    let addr = u64::from_le_bytes(d[0..8].try_into().ok()?);
    let cmd = u32::from_le_bytes(d[8..12].try_into().ok()?);
    let dw3 = u32::from_le_bytes(d[12..16].try_into().ok()?);
    Some((addr, cmd, dw3))
}

const DTYP_MASK: u32 = 0xF << 20;
/// cmd_type_len DCMD.TSE (b31, §9): TCP segmentation.
const TSE: u32 = 1 << 31;
const DTYP_CTXT: u32 = 0x2 << 20;

/// Walks the posted descriptors from TDH for one frame; context descriptors on the way load
/// their slot in `ctx`.
fn fetch(
    host: &mut dyn DeviceHost,
    ring: &Ring,
    ctx: &mut [csum::TxContext; csum::SLOTS],
) -> Fetch {
    let posted = ring.posted();
    if posted == 0 {
        return Fetch::Idle;
    }
    let mut data = Vec::new();
    let mut first = None;
    let mut rs = Vec::new();
    let mut bad = false;
    for k in 0..posted {
        let i = (ring.head + k) % ring.n;
        let Some((addr, cmd, dw3)) = read_desc(host, ring, i) else {
            // Nothing is known about an unreadable descriptor: stop in front of it, after
            // dropping what was gathered before it (if anything).
            return if k == 0 {
                Fetch::Stalled
            } else {
                Fetch::Malformed { consumed: k, rs }
            };
        };
        if cmd & txd::RS != 0 {
            rs.push(i);
        }
        let eop = cmd & txd::EOP != 0;
        if !bad {
            let dtyp = cmd & DTYP_MASK;
            if cmd & txd::DEXT != 0 && dtyp == DTYP_CTXT {
                ctx[csum::slot(dw3)] = csum::parse(addr as u32, cmd, dw3);
                continue;
            }
            let len = (cmd & txd::DTALEN_MASK) as usize;
            // TSE on the first data descriptor (igc sets it on all of them) decides the limit.
            let limit = match first.map_or(cmd, |(c, _)| c) & TSE {
                0 => MAX_TX_FRAME,
                _ => MAX_TSO_FRAME,
            };
            let ok = cmd & txd::DEXT != 0
                && dtyp == txd::DTYP_DATA
                && len != 0
                && data.len() + len <= limit
                && {
                    let start = data.len();
                    data.resize(start + len, 0);
                    host.dma_read(addr, &mut data[start..])
                };
            if ok {
                first.get_or_insert((cmd, dw3));
            } else {
                bad = true;
            }
        }
        if eop {
            return match (bad, first) {
                (false, Some((first_cmd, olinfo))) => Fetch::Frame {
                    data,
                    first_cmd,
                    olinfo,
                    consumed: k + 1,
                    rs,
                },
                _ => Fetch::Malformed {
                    consumed: k + 1,
                    rs,
                },
            };
        }
    }
    if bad || posted == ring.n - 1 {
        Fetch::Malformed {
            consumed: posted,
            rs,
        }
    } else {
        Fetch::Idle
    }
}

/// Runs the TX engine of queue 0 until the posted descriptors are used up (bounded by the
/// ring size). `forced`: run even while an armed read holds the engine (the release).
pub(crate) fn run_tx<M: Mac>(m: &mut M, host: &mut dyn DeviceHost, forced: bool) {
    let p = m.port();
    if !forced && p.hooks.tx_held() {
        return;
    }
    let tctl = p.regs.get(TCTL);
    if tctl & tctl::EN == 0 || p.txq(q::DCTL) & xdctl::QUEUE_ENABLE == 0 || !p.link.up {
        return;
    }
    let Some(mut ring) = Ring::from_regs(
        p.txq(q::BAL),
        p.txq(q::BAH),
        p.txq(q::LEN),
        p.txq(q::HEAD),
        p.txq(q::TAIL),
    ) else {
        return;
    };
    let mut wrote_back = false;
    for _ in 0..ring.n {
        let fetched = fetch(host, &ring, &mut m.port().tx_ctx);
        let Some((consumed, rs)) = process(m, fetched, tctl, host) else {
            break;
        };
        for i in rs {
            if let Some(a) = ring.desc_addr(i) {
                let _ = host.dma_write(a + 12, &TxStatus::DD.bits().to_le_bytes());
                wrote_back = true;
            }
        }
        ring.head = (ring.head + consumed) % ring.n;
        let p = m.port();
        p.regs.set(p.map.tx0 + q::HEAD, ring.head);
    }
    if wrote_back {
        let p = m.port();
        let ivar = p.regs.get(p.map.ivar0);
        p.irq.queue_cause(0, QueueCause::Tx, ivar, host);
    }
}

/// Handles one fetch: sends a complete frame (checksums, padding), counts a dropped one.
/// Returns the descriptors consumed and those to write back, or `None` to stop the queue.
fn process<M: Mac>(
    m: &mut M,
    fetched: Fetch,
    tctl: u32,
    host: &mut dyn DeviceHost,
) -> Option<(u32, Vec<u32>)> {
    let p = m.port();
    Some(match fetched {
        Fetch::Idle => return None,
        Fetch::Frame {
            data,
            first_cmd,
            olinfo,
            consumed,
            rs,
        } if first_cmd & TSE != 0 => {
            send_tso(m, &data, first_cmd, olinfo, tctl, host);
            (consumed, rs)
        }
        Fetch::Frame {
            mut data,
            first_cmd,
            olinfo,
            consumed,
            rs,
        } => {
            let ctx = p.tx_ctx[csum::slot(olinfo)];
            match csum::insert(&mut data, olinfo, &ctx) {
                csum::Outcome::None => {}
                csum::Outcome::Inserted => p.stats.tx_csum_inserted += 1,
                csum::Outcome::Skipped => p.stats.tx_csum_skipped += 1,
            }
            pad(&mut data, tctl);
            send_frame(m, &data, first_cmd, host);
            (consumed, rs)
        }
        Fetch::Malformed { consumed, rs } => {
            p.stats.tx_malformed += 1;
            (consumed, rs)
        }
        Fetch::Stalled => {
            p.stats.tx_dma_errors += 1;
            return None;
        }
    })
}

/// With TCTL.PSP, pads a short frame with zeros to the 60-byte minimum.
fn pad(data: &mut Vec<u8>, tctl: u32) {
    if tctl & tctl::PSP != 0 && data.len() < MIN_FRAME {
        data.resize(MIN_FRAME, 0);
    }
}

/// A TSE frame: its segments leave the MAC one after the other (`tso`), or, if the model
/// cannot segment it, it is dropped as malformed (logged once).
fn send_tso<M: Mac>(
    m: &mut M,
    data: &[u8],
    first_cmd: u32,
    olinfo: u32,
    tctl: u32,
    host: &mut dyn DeviceHost,
) {
    let p = m.port();
    let ctx = p.tx_ctx[csum::slot(olinfo)];
    let tso = match Tso::new(data, olinfo, &ctx) {
        Ok(t) => t,
        Err(e) => {
            if p.stats.tx_malformed == 0 {
                log::warn!("{} model: TSO frame dropped: {e}", p.unimpl.name());
            }
            p.stats.tx_malformed += 1;
            return;
        }
    };
    p.stats.tx_tso_packets += 1;
    p.hwstats.tso_sent();
    for k in 0..tso.count() {
        let mut seg = tso.segment(k);
        pad(&mut seg, tctl);
        let cmd = match k {
            0 => first_cmd,
            _ => first_cmd & !txd::MAC_TSTAMP,
        };
        send_frame(m, &seg, cmd, host);
        m.port().stats.tx_tso_segments += 1;
    }
}

/// One frame leaves the MAC: departure instant, TX stamp (the family's), wire.
fn send_frame<M: Mac>(m: &mut M, data: &[u8], first_cmd: u32, host: &mut dyn DeviceHost) {
    let p = m.port();
    let departure = p
        .now()
        .saturating_add(p.tx_pipeline_ns)
        .max(p.tx_busy_until);
    let bits = (data.len().max(MIN_FRAME) as u64 + WIRE_OVERHEAD) * 8;
    let mbps = p.link.speed.mbps() as u64;
    p.tx_busy_until = departure.saturating_add((bits * 1000).div_ceil(mbps));
    p.stats.tx_frames += 1;
    p.stats.tx_bytes += data.len() as u64;
    p.hwstats.tx_sent(data);
    if first_cmd & txd::MAC_TSTAMP != 0 {
        m.tx_stamp(departure, first_cmd, host);
    }
    let p = m.port();
    if p.phy.loopback() {
        // PHY loopback: the frame comes back to this MAC's RX as it leaves, not to the wire.
        p.stats.tx_loopback += 1;
        let frame = crate::wire::WireFrame {
            data: data.to_vec(),
            arrival_ns: departure,
        };
        super::rx::receive(m, frame, host);
        return;
    }
    match p.wire.as_mut() {
        Some(w) => w.transmit(data, departure),
        None => p.stats.tx_no_wire += 1,
    }
}
