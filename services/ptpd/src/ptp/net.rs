//! PTP over the wire: building the Ethernet frames ptpd hands to a driver (IEEE 1588-2019
//! Annex E for L2, Annex C for UDPv4), taking received frames apart, and the sanity checks
//! that keep malformed input away from statime.
//!
//! Everything here is total: any byte string yields a value or a typed error, never a panic.

use std::net::Ipv4Addr;

use ptp_ipc::frame::{ETHERTYPE_IPV4, ETHERTYPE_PTP, PTP_EVENT_PORT, PTP_GENERAL_PORT, Transport};

use super::config::{NetworkTransport, TimeProperties};

/// Annex E: the multicast address of all messages except the peer-delay ones.
pub const L2_PRIMARY: [u8; 6] = [0x01, 0x1B, 0x19, 0x00, 0x00, 0x00];
/// Annex E: the peer-delay (link-local) multicast address, never forwarded by bridges.
pub const L2_PEER: [u8; 6] = [0x01, 0x80, 0xC2, 0x00, 0x00, 0x0E];
/// Annex C: 224.0.1.129, all messages except the peer-delay ones.
pub const IPV4_PRIMARY: Ipv4Addr = Ipv4Addr::new(224, 0, 1, 129);
/// Annex C: 224.0.0.107, peer-delay messages.
pub const IPV4_PEER: Ipv4Addr = Ipv4Addr::new(224, 0, 0, 107);
/// TTL of PTP multicast, as ptp4l's `udp_ttl` default: PTP never crosses a router unmodified.
pub const UDP_TTL: u8 = 1;
/// Smallest Ethernet frame without FCS; shorter frames are padded with zeros (receivers use
/// the PTP messageLength, so padding is harmless).
pub const MIN_ETH_FRAME: usize = 60;
/// Length of the PTP common header.
pub const PTP_HEADER_LEN: usize = 34;
/// statime serialises into 1024-byte buffers; nothing longer is a frame we produced.
pub const MAX_PTP_PAYLOAD: usize = 1024;

/// PTP messageType values (IEEE 1588-2019 table 36).
pub mod msg {
    pub const SYNC: u8 = 0x0;
    pub const DELAY_REQ: u8 = 0x1;
    pub const PDELAY_REQ: u8 = 0x2;
    pub const PDELAY_RESP: u8 = 0x3;
    pub const FOLLOW_UP: u8 = 0x8;
    pub const DELAY_RESP: u8 = 0x9;
    pub const PDELAY_RESP_FOLLOW_UP: u8 = 0xA;
    pub const ANNOUNCE: u8 = 0xB;
    pub const SIGNALING: u8 = 0xC;
    pub const MANAGEMENT: u8 = 0xD;

    /// ptp4l's spelling, for logs.
    pub fn name(t: u8) -> &'static str {
        match t {
            SYNC => "SYNC",
            DELAY_REQ => "DELAY_REQ",
            PDELAY_REQ => "PDELAY_REQ",
            PDELAY_RESP => "PDELAY_RESP",
            FOLLOW_UP => "FOLLOW_UP",
            DELAY_RESP => "DELAY_RESP",
            PDELAY_RESP_FOLLOW_UP => "PDELAY_RESP_FOLLOW_UP",
            ANNOUNCE => "ANNOUNCE",
            SIGNALING => "SIGNALING",
            MANAGEMENT => "MANAGEMENT",
            _ => "RESERVED",
        }
    }
}

/// Why a frame could not be built or taken apart.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    #[error("PTP message of {0} bytes is too long")]
    TooLong(usize),
    #[error("PTP message shorter than its header ({0} bytes)")]
    Truncated(usize),
    #[error("not a PTP frame")]
    NotPtp,
    #[error("messageLength {declared} exceeds the {available} bytes received")]
    BadLength { declared: usize, available: usize },
    #[error("UDP length field is inconsistent with the frame")]
    BadUdpLength,
    #[error("IPv4 header checksum mismatch")]
    BadIpChecksum,
    #[error("{0} carried on the wrong UDP port")]
    WrongPort(&'static str),
    #[error("timestamp or correctionField out of range")]
    BadTime,
}

/// Builds the frames of one port.
#[derive(Debug, Clone)]
pub struct FrameBuilder {
    pub transport: NetworkTransport,
    pub mac: [u8; 6],
    pub src_ip: Ipv4Addr,
    /// IPv4 identification, incremented per datagram.
    ip_id: u16,
}

/// The Ethernet multicast address of an IPv4 multicast group (RFC 1112 §6.4).
pub fn ipv4_multicast_mac(ip: Ipv4Addr) -> [u8; 6] {
    let o = ip.octets();
    [0x01, 0x00, 0x5E, o[1] & 0x7F, o[2], o[3]]
}

/// The Internet checksum (RFC 1071) of `data`.
pub fn internet_checksum(data: &[u8]) -> u16 {
    let mut sum: u32 = 0;
    let mut chunks = data.chunks_exact(2);
    for c in &mut chunks {
        sum += u32::from(u16::from_be_bytes([c[0], c[1]]));
    }
    if let [last] = chunks.remainder() {
        sum += u32::from(*last) << 8;
    }
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

impl FrameBuilder {
    pub fn new(transport: NetworkTransport, mac: [u8; 6], src_ip: Ipv4Addr) -> Self {
        Self {
            transport,
            mac,
            src_ip,
            ip_id: 0,
        }
    }

    /// Wraps a PTP message (as statime serialised it) into an Ethernet frame. `event` picks
    /// UDP port 319 over 320; `link_local` the peer-delay addresses.
    pub fn build(
        &mut self,
        payload: &[u8],
        event: bool,
        link_local: bool,
    ) -> Result<Vec<u8>, NetError> {
        if payload.len() > MAX_PTP_PAYLOAD {
            return Err(NetError::TooLong(payload.len()));
        }
        if payload.len() < PTP_HEADER_LEN {
            return Err(NetError::Truncated(payload.len()));
        }
        let mut f = Vec::with_capacity(14 + 28 + payload.len());
        match self.transport {
            NetworkTransport::L2 => {
                f.extend_from_slice(if link_local { &L2_PEER } else { &L2_PRIMARY });
                f.extend_from_slice(&self.mac);
                f.extend_from_slice(&ETHERTYPE_PTP.to_be_bytes());
                f.extend_from_slice(payload);
            }
            NetworkTransport::UdpV4 => {
                let dst = if link_local { IPV4_PEER } else { IPV4_PRIMARY };
                let port = if event {
                    PTP_EVENT_PORT
                } else {
                    PTP_GENERAL_PORT
                };
                f.extend_from_slice(&ipv4_multicast_mac(dst));
                f.extend_from_slice(&self.mac);
                f.extend_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
                let udp_len = 8 + payload.len();
                let total = 20 + udp_len;
                let id = self.ip_id;
                self.ip_id = self.ip_id.wrapping_add(1);
                let mut ip = [0u8; 20];
                ip[0] = 0x45;
                ip[2..4].copy_from_slice(&(total as u16).to_be_bytes());
                ip[4..6].copy_from_slice(&id.to_be_bytes());
                // Don't fragment: a PTP message always fits one frame.
                ip[6] = 0x40;
                ip[8] = UDP_TTL;
                ip[9] = 17;
                ip[12..16].copy_from_slice(&self.src_ip.octets());
                ip[16..20].copy_from_slice(&dst.octets());
                let csum = internet_checksum(&ip);
                ip[10..12].copy_from_slice(&csum.to_be_bytes());
                f.extend_from_slice(&ip);
                f.extend_from_slice(&port.to_be_bytes());
                f.extend_from_slice(&port.to_be_bytes());
                f.extend_from_slice(&(udp_len as u16).to_be_bytes());
                // UDP checksum 0 = none, allowed over IPv4 (RFC 768) and what keeps a one-step
                // correction (or our Announce rewrite) from having to recompute it.
                f.extend_from_slice(&[0, 0]);
                f.extend_from_slice(payload);
            }
        }
        if f.len() < MIN_ETH_FRAME {
            f.resize(MIN_ETH_FRAME, 0);
        }
        Ok(f)
    }
}

/// A received PTP message, located in its frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Received<'a> {
    pub transport: Transport,
    /// The PTP message, trimmed to its messageLength (Ethernet padding removed).
    pub payload: &'a [u8],
    pub message_type: u8,
    pub version: u8,
    pub domain: u8,
}

impl Received<'_> {
    pub fn is_event(&self) -> bool {
        self.message_type < 4
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Takes a received frame apart: the transport, and the PTP message trimmed to its
/// messageLength. IPv4 frames must carry a valid header checksum and a UDP length that fits;
/// event messages must arrive on port 319 and general ones on 320.
pub fn parse(frame: &[u8]) -> Result<Received<'_>, NetError> {
    let info = ptp_ipc::frame::classify(frame).ok_or(NetError::NotPtp)?;
    let mut end = frame.len();
    if let Transport::Udp4 { dst_port } = info.transport {
        let l4 = info.offset.checked_sub(8).ok_or(NetError::NotPtp)?;
        // classify() found the IPv4 header just before the UDP one; locate it again to check it.
        let et_at = if be16(frame, 12) == Some(ptp_ipc::frame::ETHERTYPE_VLAN) {
            16
        } else {
            12
        };
        let l3 = et_at + 2;
        let ihl = usize::from(*frame.get(l3).ok_or(NetError::NotPtp)? & 0xF) * 4;
        if ihl < 20 || l3 + ihl != l4 {
            return Err(NetError::NotPtp);
        }
        let ip = frame.get(l3..l3 + ihl).ok_or(NetError::NotPtp)?;
        if internet_checksum(ip) != 0 {
            return Err(NetError::BadIpChecksum);
        }
        let udp_len = usize::from(be16(frame, l4 + 4).ok_or(NetError::BadUdpLength)?);
        if udp_len < 8 || l4 + udp_len > frame.len() {
            return Err(NetError::BadUdpLength);
        }
        end = l4 + udp_len;
        let event = info.is_event();
        if event && dst_port != PTP_EVENT_PORT {
            return Err(NetError::WrongPort("event message"));
        }
        if !event && dst_port != PTP_GENERAL_PORT {
            return Err(NetError::WrongPort("general message"));
        }
    }
    let body = frame.get(info.offset..end).ok_or(NetError::NotPtp)?;
    if body.len() < PTP_HEADER_LEN {
        return Err(NetError::Truncated(body.len()));
    }
    let declared = usize::from(u16::from_be_bytes([body[2], body[3]]));
    if declared < PTP_HEADER_LEN || declared > body.len() {
        return Err(NetError::BadLength {
            declared,
            available: body.len(),
        });
    }
    Ok(Received {
        transport: info.transport,
        payload: &body[..declared],
        message_type: info.message_type,
        version: info.version,
        domain: body[4],
    })
}

/// correctionField in whole ns (floor), IEEE 1588 stores ns × 2^16.
fn correction_ns(p: &[u8]) -> Option<i128> {
    let raw = i64::from_be_bytes(p.get(8..16)?.try_into().ok()?);
    Some(i128::from(raw >> 16))
}

/// The 10-byte timestamp at `at`, in ns.
fn timestamp_ns(p: &[u8], at: usize) -> Option<i128> {
    let b = p.get(at..at + 10)?;
    let secs = u64::from_be_bytes([0, 0, b[0], b[1], b[2], b[3], b[4], b[5]]);
    let nanos = u32::from_be_bytes([b[6], b[7], b[8], b[9]]);
    Some(i128::from(secs) * 1_000_000_000 + i128::from(nanos))
}

/// Minimum message lengths of the messages statime parses (IEEE 1588-2019 §13).
fn min_len(message_type: u8) -> usize {
    match message_type {
        msg::SYNC | msg::DELAY_REQ | msg::FOLLOW_UP => 44,
        msg::DELAY_RESP | msg::PDELAY_REQ | msg::PDELAY_RESP | msg::PDELAY_RESP_FOLLOW_UP => 54,
        msg::ANNOUNCE => 64,
        _ => PTP_HEADER_LEN,
    }
}

/// The largest |correctionField| accepted (ns). Transparent clocks add residence times of µs
/// to ms; a second is already absurd, and the bound keeps every time statime derives from a
/// message within a second of the stamp it corrects (which the step guard in
/// `clock::PhcClock::step_clock` relies on).
pub const MAX_CORRECTION_NS: i128 = 1_000_000_000;

/// statime 0.4 computes `recv − correction` and `origin + correction` on an unsigned fixed-point
/// time, which overflows (and panics in debug builds) when a peer sends a correctionField
/// larger than the timestamp it corrects. Such a message is nonsense; refuse it here.
/// `rx_ns` is the hardware receive stamp of an event message.
pub fn check_times(m: &Received<'_>, rx_ns: Option<u64>) -> Result<(), NetError> {
    let p = m.payload;
    if p.len() < min_len(m.message_type) {
        return Err(NetError::Truncated(p.len()));
    }
    let corr = correction_ns(p).ok_or(NetError::BadTime)?;
    if corr.abs() > MAX_CORRECTION_NS {
        return Err(NetError::BadTime);
    }
    // A margin of 1 µs absorbs the sub-ns fraction and rounding inside statime.
    const MARGIN: i128 = 1_000;
    let ok = |t: i128| t >= MARGIN;
    let fine = match m.message_type {
        msg::SYNC | msg::PDELAY_RESP => rx_ns.is_none_or(|rx| ok(i128::from(rx) - corr)),
        msg::DELAY_REQ | msg::PDELAY_REQ => true,
        msg::FOLLOW_UP | msg::PDELAY_RESP_FOLLOW_UP => {
            ok(timestamp_ns(p, 34).ok_or(NetError::BadTime)? + corr)
        }
        msg::DELAY_RESP => ok(timestamp_ns(p, 34).ok_or(NetError::BadTime)? - corr),
        _ => true,
    };
    if fine { Ok(()) } else { Err(NetError::BadTime) }
}

/// The source port identity (clock identity, port number) of a PTP message.
pub fn source_port_identity(payload: &[u8]) -> Option<([u8; 8], u16)> {
    let id: [u8; 8] = payload.get(20..28)?.try_into().ok()?;
    Some((id, be16(payload, 28)?))
}

/// The grandmasterIdentity of an Announce.
pub fn announce_grandmaster(payload: &[u8]) -> Option<[u8; 8]> {
    payload.get(53..61)?.try_into().ok()
}

/// flagField bits of octet 7 (IEEE 1588-2019 table 37).
mod flags {
    pub const LEAP61: u8 = 1 << 0;
    pub const LEAP59: u8 = 1 << 1;
    pub const UTC_OFFSET_VALID: u8 = 1 << 2;
    pub const PTP_TIMESCALE: u8 = 1 << 3;
    pub const TIME_TRACEABLE: u8 = 1 << 4;
    pub const FREQUENCY_TRACEABLE: u8 = 1 << 5;
}

/// Makes an Announce we originate as grandmaster carry `tp` (see `ptp/mod.rs`, "timescale"):
/// statime 0.4 overwrites its time properties with "PTP timescale, UTC offset unknown" whenever
/// a port becomes master, and offers no way to set them afterwards, so ptpd corrects the
/// message on its way out. Only the flags, currentUtcOffset and timeSource change; leap flags
/// stay as statime set them. Returns whether the message was changed.
pub fn rewrite_announce(payload: &mut [u8], tp: &TimeProperties) -> bool {
    if payload.len() < 64 || payload[0] & 0x0F != msg::ANNOUNCE {
        return false;
    }
    let keep = payload[7] & (flags::LEAP61 | flags::LEAP59);
    let mut f = keep;
    if tp.utc_offset_valid {
        f |= flags::UTC_OFFSET_VALID;
    }
    if tp.ptp_timescale {
        f |= flags::PTP_TIMESCALE;
    }
    if tp.time_traceable {
        f |= flags::TIME_TRACEABLE;
    }
    if tp.frequency_traceable {
        f |= flags::FREQUENCY_TRACEABLE;
    }
    payload[7] = f;
    payload[44..46].copy_from_slice(&tp.utc_offset.to_be_bytes());
    payload[63] = tp.time_source;
    true
}

/// Puts grandmasterClockQuality's class and accuracy into an Announce we originate (statime
/// 0.4 keeps its defaultDS quality private at class 248; see [`crate::timesource`]).
pub fn rewrite_announce_quality(payload: &mut [u8], class: u8, accuracy: u8) -> bool {
    if payload.len() < 64 || payload[0] & 0x0F != msg::ANNOUNCE {
        return false;
    }
    payload[48] = class;
    payload[49] = accuracy;
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ptp_msg(t: u8, len: usize) -> Vec<u8> {
        let mut p = vec![0u8; len];
        p[0] = t;
        p[1] = 2;
        p[2..4].copy_from_slice(&(len as u16).to_be_bytes());
        p
    }

    #[test]
    fn l2_frames_use_annex_e_addresses() {
        let mac = [2, 0, 0, 0, 0, 1];
        let mut b = FrameBuilder::new(NetworkTransport::L2, mac, Ipv4Addr::UNSPECIFIED);
        let p = ptp_msg(msg::SYNC, 44);
        let f = b.build(&p, true, false).unwrap();
        assert_eq!(&f[0..6], &L2_PRIMARY);
        assert_eq!(&f[6..12], &mac);
        assert_eq!(&f[12..14], &[0x88, 0xF7]);
        assert_eq!(f.len(), 60, "padded to the Ethernet minimum");
        let r = parse(&f).unwrap();
        assert_eq!(r.payload, &p[..], "padding trimmed by messageLength");
        assert_eq!(r.transport, Transport::L2);
        let f = b.build(&ptp_msg(msg::PDELAY_REQ, 54), true, true).unwrap();
        assert_eq!(&f[0..6], &L2_PEER);
        assert_eq!(f.len(), 68);
    }

    #[test]
    fn udp4_frames_have_valid_headers_for_both_groups() {
        let mac = [2, 0, 0, 0, 0, 1];
        let src = Ipv4Addr::new(192, 0, 2, 1);
        let mut b = FrameBuilder::new(NetworkTransport::UdpV4, mac, src);
        for (event, ll, group, port) in [
            (true, false, IPV4_PRIMARY, 319u16),
            (false, false, IPV4_PRIMARY, 320),
            (true, true, IPV4_PEER, 319),
            (false, true, IPV4_PEER, 320),
        ] {
            let t = if event { msg::SYNC } else { msg::FOLLOW_UP };
            let p = ptp_msg(t, 44);
            let f = b.build(&p, event, ll).unwrap();
            assert_eq!(&f[0..6], &ipv4_multicast_mac(group));
            assert_eq!(&f[12..14], &[0x08, 0x00]);
            assert_eq!(internet_checksum(&f[14..34]), 0, "IPv4 checksum verifies");
            assert_eq!(&f[26..30], &src.octets());
            assert_eq!(&f[30..34], &group.octets());
            assert_eq!(f[22], 1, "TTL 1");
            assert_eq!(u16::from_be_bytes([f[36], f[37]]), port);
            assert_eq!(u16::from_be_bytes([f[38], f[39]]), 8 + 44);
            assert_eq!(u16::from_be_bytes([f[16], f[17]]), 20 + 8 + 44);
            let r = parse(&f).unwrap();
            assert_eq!(r.payload, &p[..]);
            assert_eq!(r.transport, Transport::Udp4 { dst_port: port });
        }
        assert_eq!(
            ipv4_multicast_mac(IPV4_PRIMARY),
            [0x01, 0x00, 0x5E, 0x00, 0x01, 0x81]
        );
        assert_eq!(
            ipv4_multicast_mac(IPV4_PEER),
            [0x01, 0x00, 0x5E, 0x00, 0x00, 0x6B]
        );
    }

    #[test]
    fn checksum_matches_a_known_header() {
        // RFC 1071-style example (Wikipedia's IPv4 header checksum example): 0xB861.
        let h = [
            0x45, 0x00, 0x00, 0x73, 0x00, 0x00, 0x40, 0x00, 0x40, 0x11, 0x00, 0x00, 0xc0, 0xa8,
            0x00, 0x01, 0xc0, 0xa8, 0x00, 0xc7,
        ];
        assert_eq!(internet_checksum(&h), 0xB861);
    }

    #[test]
    fn parse_rejects_bad_frames() {
        let mut b = FrameBuilder::new(NetworkTransport::UdpV4, [2; 6], Ipv4Addr::LOCALHOST);
        let mut f = b.build(&ptp_msg(msg::SYNC, 44), true, false).unwrap();
        f[24] ^= 1; // corrupt the IPv4 checksum
        assert_eq!(parse(&f), Err(NetError::BadIpChecksum));
        // An event message on the general port.
        let f = b.build(&ptp_msg(msg::SYNC, 44), false, false).unwrap();
        assert!(matches!(parse(&f), Err(NetError::WrongPort(_))));
        // messageLength beyond the frame.
        let mut l2 = FrameBuilder::new(NetworkTransport::L2, [2; 6], Ipv4Addr::LOCALHOST);
        let mut p = ptp_msg(msg::ANNOUNCE, 64);
        p[2..4].copy_from_slice(&500u16.to_be_bytes());
        let f = l2.build(&p, false, false).unwrap();
        assert!(matches!(parse(&f), Err(NetError::BadLength { .. })));
        assert_eq!(parse(&[0u8; 10]), Err(NetError::NotPtp));
        // Total on every prefix and filler.
        let good = b.build(&ptp_msg(msg::ANNOUNCE, 64), false, false).unwrap();
        for len in 0..good.len() {
            let _ = parse(&good[..len]);
        }
    }

    #[test]
    fn time_sanity() {
        let mut p = ptp_msg(msg::FOLLOW_UP, 44);
        // origin 0 s and a negative correction: statime would underflow.
        p[8..16].copy_from_slice(&(-(5i64 << 16)).to_be_bytes());
        let f = FrameBuilder::new(NetworkTransport::L2, [2; 6], Ipv4Addr::LOCALHOST)
            .build(&p, false, false)
            .unwrap();
        let r = parse(&f).unwrap();
        assert_eq!(check_times(&r, None), Err(NetError::BadTime));
        p[34..40].copy_from_slice(&[0, 0, 0, 0, 0, 10]);
        let f = FrameBuilder::new(NetworkTransport::L2, [2; 6], Ipv4Addr::LOCALHOST)
            .build(&p, false, false)
            .unwrap();
        assert_eq!(check_times(&parse(&f).unwrap(), None), Ok(()));
        // Sync whose correction exceeds its RX stamp.
        let mut s = ptp_msg(msg::SYNC, 44);
        s[8..16].copy_from_slice(&(1_000_000i64 << 16).to_be_bytes());
        let f = FrameBuilder::new(NetworkTransport::L2, [2; 6], Ipv4Addr::LOCALHOST)
            .build(&s, true, false)
            .unwrap();
        let r = parse(&f).unwrap();
        assert_eq!(check_times(&r, Some(10)), Err(NetError::BadTime));
        assert_eq!(check_times(&r, Some(10_000_000_000)), Ok(()));
        // Too short for its type.
        let f = FrameBuilder::new(NetworkTransport::L2, [2; 6], Ipv4Addr::LOCALHOST)
            .build(&ptp_msg(msg::ANNOUNCE, 40), false, false)
            .unwrap();
        assert!(matches!(
            check_times(&parse(&f).unwrap(), None),
            Err(NetError::Truncated(_))
        ));
    }

    #[test]
    fn announce_rewrite_sets_time_properties() {
        let mut p = ptp_msg(msg::ANNOUNCE, 64);
        p[7] = flags::PTP_TIMESCALE | flags::LEAP61;
        let tp = TimeProperties {
            utc_offset_valid: true,
            ..TimeProperties::default()
        };
        assert!(rewrite_announce(&mut p, &tp));
        assert_eq!(
            p[7],
            flags::PTP_TIMESCALE | flags::UTC_OFFSET_VALID | flags::LEAP61
        );
        assert_eq!(i16::from_be_bytes([p[44], p[45]]), 37);
        assert_eq!(p[63], 0xA0);
        let mut sync = ptp_msg(msg::SYNC, 44);
        assert!(!rewrite_announce(&mut sync, &tp));
    }
}
