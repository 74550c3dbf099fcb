//! Which received frames get a timestamp: the TSYNCRXCTL.TYPE filter (intel-timesync.md
//! §2.2, §8.1).
//!
//! The reference gives the TYPE values and names only; their exact matching rules are the
//! model's definition \[assumption\], chosen from the names and the igb register-mode filters
//! (§8.3: L2 = ethertype 0x88F7, L4 = UDP port 319):
//!
//! | TYPE | Name | Stamps |
//! |---|---|---|
//! | 0x08 | ALL | every frame |
//! | 0x00 | L2_V2 | ethertype 0x88F7 with versionPTP 2 |
//! | 0x04 | L2_L4_V2 | L2_V2, or UDP to port 319 or 320 with versionPTP 2 |
//! | 0x0A | EVENT_V2 | versionPTP 2 event messages (messageType 0–3: Sync, Delay_Req, Pdelay_Req, Pdelay_Resp) over L2 or UDP port 319 |
//! | 0x02 | L4_V1 | UDP to port 319 with versionPTP 1 |
//! | 0x06, 0x0C, 0x0E | reserved | nothing |
//!
//! versionPTP is the low nibble of byte 1 of the PTP header (v1 carries a 16-bit version
//! there, so its low byte is 1 as well); messageType the low nibble of byte 0. UDP means
//! IPv4 (any IHL, not a non-first fragment) or IPv6 with UDP as the first next header
//! \[assumption: IPv6 extension headers are not walked\], matched on the destination port.
//! Up to two VLAN tags (0x8100 / 0x88A8) may precede the ethertype. Parsing never indexes out
//! of bounds: a truncated frame is simply not PTP.

use intel_regs::igc::tsyncrxctl;

const ETH_P_PTP: u16 = 0x88F7;
const ETH_P_IPV4: u16 = 0x0800;
const ETH_P_IPV6: u16 = 0x86DD;
const ETH_P_8021Q: u16 = 0x8100;
const ETH_P_8021AD: u16 = 0x88A8;
const IPPROTO_UDP: u8 = 17;
/// PTP event port.
pub(super) const PTP_EVENT_PORT: u16 = 319;
/// PTP general port.
pub(super) const PTP_GENERAL_PORT: u16 = 320;

/// How a PTP message travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Transport {
    /// Ethernet, ethertype 0x88F7.
    L2,
    /// UDP to this destination port (319 or 320).
    Udp(u16),
}

/// What the filter needs to know about a PTP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct PtpInfo {
    pub(super) transport: Transport,
    /// versionPTP (low nibble of byte 1).
    pub(super) version: u8,
    /// messageType (low nibble of byte 0).
    pub(super) msg_type: u8,
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    let s = b.get(at..at.checked_add(2)?)?;
    Some(u16::from_be_bytes([s[0], s[1]]))
}

/// The PTP header's first two bytes at `at`, if present.
fn ptp_at(frame: &[u8], at: usize, transport: Transport) -> Option<PtpInfo> {
    let h = frame.get(at..at.checked_add(2)?)?;
    Some(PtpInfo {
        transport,
        version: h[1] & 0x0F,
        msg_type: h[0] & 0x0F,
    })
}

/// The UDP header at `udp`: a PTP message if its destination port is 319 or 320.
fn udp_ptp(frame: &[u8], udp: usize) -> Option<PtpInfo> {
    let port = be16(frame, udp.checked_add(2)?)?;
    if port != PTP_EVENT_PORT && port != PTP_GENERAL_PORT {
        return None;
    }
    ptp_at(frame, udp.checked_add(8)?, Transport::Udp(port))
}

/// Classifies a frame (destination MAC first, no FCS): `Some` for PTP over L2 or UDP.
pub(super) fn classify(frame: &[u8]) -> Option<PtpInfo> {
    let mut off = 12;
    let mut ethertype = be16(frame, off)?;
    for _ in 0..2 {
        if ethertype != ETH_P_8021Q && ethertype != ETH_P_8021AD {
            break;
        }
        off += 4;
        ethertype = be16(frame, off)?;
    }
    let l3 = off + 2;
    match ethertype {
        ETH_P_PTP => ptp_at(frame, l3, Transport::L2),
        ETH_P_IPV4 => {
            let vihl = *frame.get(l3)?;
            let ihl = (vihl & 0x0F) as usize * 4;
            if vihl >> 4 != 4 || ihl < 20 || *frame.get(l3 + 9)? != IPPROTO_UDP {
                return None;
            }
            // A non-first fragment carries no UDP header.
            if be16(frame, l3 + 6)? & 0x1FFF != 0 {
                return None;
            }
            udp_ptp(frame, l3 + ihl)
        }
        ETH_P_IPV6 => {
            if *frame.get(l3)? >> 4 != 6 || *frame.get(l3 + 6)? != IPPROTO_UDP {
                return None;
            }
            udp_ptp(frame, l3 + 40)
        }
        _ => None,
    }
}

/// Whether TSYNCRXCTL.TYPE `ty` (already masked with `TYPE_MASK`) stamps `frame`.
pub(super) fn type_matches(ty: u32, frame: &[u8]) -> bool {
    if ty == tsyncrxctl::TYPE_ALL {
        return true;
    }
    let Some(p) = classify(frame) else {
        return false;
    };
    let l2 = p.transport == Transport::L2;
    let port = match p.transport {
        Transport::Udp(port) => port,
        Transport::L2 => 0,
    };
    match ty {
        tsyncrxctl::TYPE_L2_V2 => l2 && p.version == 2,
        tsyncrxctl::TYPE_L2_L4_V2 => p.version == 2 && (l2 || port != 0),
        tsyncrxctl::TYPE_EVENT_V2 => {
            p.version == 2 && p.msg_type <= 3 && (l2 || port == PTP_EVENT_PORT)
        }
        tsyncrxctl::TYPE_L4_V1 => p.version == 1 && port == PTP_EVENT_PORT,
        _ => false,
    }
}
