//! How the igb parts timestamp frames: the [`Mac`] hooks of the shared queue-0 engines.
//!
//! - TX (§7.5): one pair, TXSTMPL/H. A frame with MAC_TSTAMP latches PHC(departure) + nothing
//!   when TSYNCTXCTL.ENABLED is set and VALID clear, and sets VALID; with VALID still set the
//!   stamp is lost. i210/i350 raise TSICR.TXTS; the 82576 raises nothing (its driver polls
//!   VALID, §7.5). The i210 stamp is PHC(departure) − TX latency (§8.4: Linux compensates on
//!   the i210 only), so a driver adding the latency gets exactly PHC(departure).
//! - RX, i210/i350 (§8.2): with SRRCTL(0).TIMESTAMP, TSYNCRXCTL.ENABLED and TYPE = ALL (and,
//!   on the i210, RXPBS.CFG_TS_EN) every frame gets the 16-byte header: dwords 0–1 zero
//!   (reserved: newer Linux drops a stamp whose dwords 0–1 are not zero), dwords 2–3 = SYSTIML,
//!   SYSTIMH in the family's raw format — a little-endian u64 at byte 8. Another TYPE stamps
//!   nothing and is recorded as unmodelled (§8.2: Linux widens every filter to ALL on these).
//! - RX, 82576 (§8.3): register mode, filtered by TSYNCRXCTL.TYPE, TSYNCRXCFG and ETQF; see
//!   [`ptp_match`]. A matching frame latches RXSTMPL/H (and RXSATRL/H) and gets status TS
//!   (b16) when TSYNCRXCTL.VALID is clear; while VALID is set (until RXSTMPH is read) a
//!   matching frame gets no stamp and is counted (`rx_stamps_missed_held`).

use intel_regs::igb::{
    RXPBS, RxStatus, RxTsType, TSYNCRXCFG, TsCause, TsyncRxCtl, etqf, latency_ns_i210, reg, rxpbs,
    srrctl,
};
use ptp_pci::emulated::DeviceHost;

use super::{Igb, IgbPart};
use crate::nic::{Mac, Port, RxStamp, q};
use crate::phc::TimeFormat;

/// Ethertypes (IEEE 802.3): PTP over Ethernet, IPv4.
const ETH_P_1588: u16 = 0x88F7;
const ETH_P_IPV4: u16 = 0x0800;
/// IANA: PTP event messages go to UDP port 319.
const PTP_EVENT_PORT: u16 = 319;
/// ETQF filters the 82576 has (Linux e1000_regs.h E1000_ETQF(n), n < 8).
const ETQF_FILTERS: u32 = 8;

/// Where a PTP message sits in a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Transport {
    L2,
    L4,
}

/// A PTP message found in a frame: transport and the fields the 82576 filters on.
#[derive(Debug, Clone, Copy)]
pub(super) struct PtpMsg {
    transport: Transport,
    /// versionPTP (1 or 2).
    version: u8,
    /// v2 messageType (b3:0 of byte 0); v1 control field (byte 32).
    kind: u8,
    pub(super) sequence_id: u16,
    /// The first six bytes of the source identity (v1 sourceUuid, v2 sourcePortIdentity).
    source: [u8; 6],
}

fn be16(d: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*d.get(at)?, *d.get(at + 1)?]))
}

/// The PTP message of an untagged frame over L2 or IPv4/UDP port 319, if any.
/// \[assumption\] VLAN-tagged frames and IPv6 are not parsed (never stamped).
pub(super) fn parse_ptp(d: &[u8]) -> Option<PtpMsg> {
    let (transport, at) = match be16(d, 12)? {
        ETH_P_1588 => (Transport::L2, 14),
        ETH_P_IPV4 => {
            let ihl = (*d.get(14)? as usize & 0xF) * 4;
            let udp = 14 + ihl;
            if *d.get(14 + 9)? != 17 || be16(d, udp + 2)? != PTP_EVENT_PORT {
                return None;
            }
            (Transport::L4, udp + 8)
        }
        _ => return None,
    };
    let ptp = d.get(at..)?;
    if ptp.len() < 34 {
        return None;
    }
    // v1 starts with versionPTP as a big-endian u16; v2 keeps it in byte 1's low nibble.
    let (version, kind, src) = if be16(ptp, 0)? == 1 {
        (1, ptp[32], 22)
    } else {
        (ptp[1] & 0xF, ptp[0] & 0xF, 20)
    };
    let mut source = [0u8; 6];
    source.copy_from_slice(&ptp[src..src + 6]);
    Some(PtpMsg {
        transport,
        version,
        kind,
        sequence_id: be16(ptp, 30)?,
        source,
    })
}

/// Whether the 82576 stamps `m` under TSYNCRXCTL `ctl`, TSYNCRXCFG `cfg` and the ETQF
/// filters `etqf` (§8.3, §2.2):
///
/// - TYPE L2_V2 (0x00): L2 v2 with messageType = TSYNCRXCFG b11:8;
/// - L4_V1 (0x02): UDP v1 with control = TSYNCRXCFG b7:0;
/// - L2_L4_V2 (0x04): L2 or UDP v2 with messageType = TSYNCRXCFG b11:8;
/// - EVENT_V2 (0x0A): L2 or UDP v2 event messages (messageType 0–3);
/// - anything else (ALL among them, "not possible on 82576"): nothing.
///
/// An L2 message also needs an enabled ETQF with the 1588 bit for ethertype 0x88F7 (Linux
/// programs ETQF(3); QEMU requires one). \[U\] L4 needs no FTQF/IMIR programming here.
pub(super) fn ptp_match(m: &PtpMsg, ctl: TsyncRxCtl, cfg: u32, etqf: impl Fn(u32) -> u32) -> bool {
    let l2_ok = (0..ETQF_FILTERS).any(|n| {
        let f = etqf(n);
        f & (etqf::FILTER_ENABLE | etqf::F1588) == etqf::FILTER_ENABLE | etqf::F1588
            && (f & etqf::ETYPE_MASK) as u16 == ETH_P_1588
    });
    if m.transport == Transport::L2 && !l2_ok {
        return false;
    }
    let v2_type = ((cfg >> 8) & 0xF) as u8;
    match ctl.rx_type() {
        Some(RxTsType::L2V2) => m.transport == Transport::L2 && m.version == 2 && m.kind == v2_type,
        Some(RxTsType::L4V1) => {
            m.transport == Transport::L4 && m.version == 1 && m.kind == cfg as u8
        }
        Some(RxTsType::L2L4V2) => m.version == 2 && m.kind == v2_type,
        Some(RxTsType::EventV2) => m.version == 2 && m.kind < 4,
        Some(RxTsType::All) | None => false,
    }
}

/// RXSATRL/RXSATRH for a latched message: the source identity's first four bytes, then its
/// next two and the sequenceId in b31:16 (§1 "source-ID / sequenceId latch") \[U: byte order\].
fn attributes(m: &PtpMsg) -> (u32, u32) {
    let s = m.source;
    let l = u32::from_le_bytes([s[0], s[1], s[2], s[3]]);
    let h = u32::from(u16::from_le_bytes([s[4], s[5]])) | u32::from(m.sequence_id) << 16;
    (l, h)
}

impl Igb {
    /// The (TX, RX) latency the part's stamps are compensated by (§8.4: i210 only).
    fn latency(&self) -> (i64, i64) {
        match self.part {
            IgbPart::I210 | IgbPart::I211 => {
                let (tx, rx) = latency_ns_i210(self.port.link.speed.mbps());
                (i64::from(tx), i64::from(rx))
            }
            IgbPart::I350 | IgbPart::E82576 => (0, 0),
        }
    }

    /// The raw SYSTIM value of a stamp taken at true instant `t`, moved by `latency_ns` and
    /// passed through the configured jitter/quantum (`tx`: which noise stream).
    fn stamp_raw(&mut self, t: u64, latency_ns: i64, tx: bool) -> u64 {
        let f = self.format();
        let phc = &self.tsync.phc;
        let exact = f.add_ns(phc.ns_at_instant(t), latency_ns);
        let ns = if tx {
            self.port.noise.tx(exact)
        } else {
            self.port.noise.rx(exact)
        };
        raw_from_ns(f, ns, phc.raw_at_instant(t), phc.ns_at_instant(t))
    }

    /// Whether the in-buffer enables of §8.2 are all on and TYPE = ALL.
    fn buffer_stamps(&self) -> bool {
        let r = &self.port.regs;
        let ctl = r.get_reg(reg::TSYNCRXCTL);
        let pbs = matches!(self.part, IgbPart::I210 | IgbPart::I211)
            .then(|| r.get(RXPBS) & rxpbs::CFG_TS_EN != 0)
            .unwrap_or(true);
        pbs && self.port.rxq(q::SRRCTL) & srrctl::TIMESTAMP != 0
            && ctl.contains(TsyncRxCtl::ENABLED)
            && ctl.rx_type() == Some(RxTsType::All)
    }

    /// 82576 register mode (module docs).
    fn register_stamp(&mut self, arrival: u64, data: &[u8]) -> RxStamp {
        let r = &self.port.regs;
        let ctl = r.get_reg(reg::TSYNCRXCTL);
        if !ctl.contains(TsyncRxCtl::ENABLED) {
            return RxStamp::None;
        }
        let Some(m) = parse_ptp(data) else {
            return RxStamp::None;
        };
        if !ptp_match(&m, ctl, r.get(TSYNCRXCFG), |n| {
            r.get(intel_regs::igb::etqf(n))
        }) {
            return RxStamp::None;
        }
        if self.rx_pair.valid {
            self.port.stats.rx_stamps_missed_held += 1;
            self.rx_pair.lost += 1;
            return RxStamp::None;
        }
        let raw = self.stamp_raw(arrival, 0, false);
        self.rx_pair.latch(raw, attributes(&m));
        RxStamp::Status(RxStatus::TS)
    }
}

/// The raw register value for a stamp of `ns` (the ns view): s:ns and 40-bit ns follow from
/// `ns`; the 82576 count keeps the sub-ns bits of the exact count `exact_raw` (taken at ns
/// view `exact_ns`) when no noise moved the stamp, so an exact stamp is the counter itself.
fn raw_from_ns(f: TimeFormat, ns: u64, exact_raw: u64, exact_ns: u64) -> u64 {
    match f {
        TimeFormat::Igc | TimeFormat::I210 => {
            let t = crate::phc::SysTime::from_ns(ns);
            (t.sec as u64) << 32 | t.nsec as u64
        }
        TimeFormat::I350 => ns,
        TimeFormat::E82576 if ns == exact_ns => exact_raw,
        TimeFormat::E82576 => ns << crate::phc::E82576_SHIFT,
    }
}

impl Mac for Igb {
    fn port(&mut self) -> &mut Port {
        &mut self.port
    }

    fn tx_stamp(&mut self, departure: u64, _first_cmd: u32, host: &mut dyn DeviceHost) {
        if !self.tx_enabled() {
            return;
        }
        let (tx_lat, _) = self.latency();
        let raw = self.stamp_raw(departure, -tx_lat, true);
        if self.tx_pair.latch(raw, (0, 0)) && self.part.has_ts_interrupt() {
            self.tsync.cause.raise(TsCause::TXTS);
            self.update_ts(host);
        }
    }

    fn rx_stamp(&mut self, arrival: u64, data: &[u8]) -> RxStamp {
        if self.part == IgbPart::E82576 {
            return self.register_stamp(arrival, data);
        }
        if !self.buffer_stamps() {
            return RxStamp::None;
        }
        let (_, rx_lat) = self.latency();
        let raw = self.stamp_raw(arrival, rx_lat, false);
        let mut h = [0u8; 16];
        h[8..16].copy_from_slice(&raw.to_le_bytes());
        RxStamp::Header(h)
    }
}
