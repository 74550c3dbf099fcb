//! Recognising PTP frames on the wire (IEEE 1588-2019 Annex C/E transports), shared by the
//! drivers (which forward PTP frames to ptpd and decide which ones keep an RX timestamp) and by
//! tools. Total: any byte string is classified without panicking.

/// Ethertype of PTP over IEEE 802.3 (Annex E).
pub const ETHERTYPE_PTP: u16 = 0x88F7;
pub const ETHERTYPE_IPV4: u16 = 0x0800;
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// UDP ports of PTP event and general messages (Annex C).
pub const PTP_EVENT_PORT: u16 = 319;
pub const PTP_GENERAL_PORT: u16 = 320;

/// How a PTP message was carried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    L2,
    Udp4 { dst_port: u16 },
}

/// A recognised PTP frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PtpFrameInfo {
    pub transport: Transport,
    /// Offset of the PTP header in the frame.
    pub offset: usize,
    /// messageType (low nibble of byte 0).
    pub message_type: u8,
    /// versionPTP (low nibble of byte 1).
    pub version: u8,
}

impl PtpFrameInfo {
    /// Event messages (Sync, Delay_Req, Pdelay_Req, Pdelay_Resp) are the timestamped ones.
    pub fn is_event(&self) -> bool {
        self.message_type < 4
    }
}

fn be16(b: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*b.get(at)?, *b.get(at + 1)?]))
}

/// Classifies an Ethernet frame (no FCS). `None` = not PTP.
pub fn classify(frame: &[u8]) -> Option<PtpFrameInfo> {
    let mut et_at = 12;
    let mut et = be16(frame, et_at)?;
    if et == ETHERTYPE_VLAN {
        et_at += 4;
        et = be16(frame, et_at)?;
    }
    let l3 = et_at + 2;
    let (transport, offset) = match et {
        ETHERTYPE_PTP => (Transport::L2, l3),
        ETHERTYPE_IPV4 => {
            let vihl = *frame.get(l3)?;
            if vihl >> 4 != 4 || *frame.get(l3 + 9)? != 17 {
                return None;
            }
            // Fragments other than the first carry no UDP header.
            if be16(frame, l3 + 6)? & 0x1FFF != 0 {
                return None;
            }
            let l4 = l3 + (vihl as usize & 0xF) * 4;
            let dst_port = be16(frame, l4 + 2)?;
            if dst_port != PTP_EVENT_PORT && dst_port != PTP_GENERAL_PORT {
                return None;
            }
            (Transport::Udp4 { dst_port }, l4 + 8)
        }
        _ => return None,
    };
    let b0 = *frame.get(offset)?;
    let b1 = *frame.get(offset + 1)?;
    Some(PtpFrameInfo {
        transport,
        offset,
        message_type: b0 & 0x0F,
        version: b1 & 0x0F,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn l2(msg: u8, version: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 44];
        f[12..14].copy_from_slice(&ETHERTYPE_PTP.to_be_bytes());
        f[14] = msg;
        f[15] = version;
        f
    }

    fn udp(port: u16, msg: u8) -> Vec<u8> {
        let mut f = vec![0u8; 14 + 20 + 8 + 44];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        f[14] = 0x45;
        f[23] = 17;
        f[36..38].copy_from_slice(&port.to_be_bytes());
        f[42] = msg;
        f[43] = 2;
        f
    }

    #[test]
    fn recognises_transports_and_messages() {
        let s = classify(&l2(0, 2)).unwrap();
        assert_eq!(
            (s.transport, s.offset, s.is_event(), s.version),
            (Transport::L2, 14, true, 2)
        );
        assert!(!classify(&l2(0xB, 2)).unwrap().is_event());
        let u = classify(&udp(319, 1)).unwrap();
        assert_eq!(u.transport, Transport::Udp4 { dst_port: 319 });
        assert_eq!(u.offset, 42);
        assert!(u.is_event());
        assert!(classify(&udp(320, 8)).is_some());
        assert!(classify(&udp(123, 0)).is_none());
        let mut v = l2(1, 2);
        v.splice(12..12, [0x81, 0x00, 0x00, 0x05]);
        assert_eq!(classify(&v).unwrap().offset, 18);
    }

    #[test]
    fn never_panics_on_short_or_odd_frames() {
        for len in 0..80 {
            for fill in [0u8, 0x45, 0x88, 0xFF] {
                let mut f = vec![fill; len];
                if len >= 14 {
                    f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
                }
                let _ = classify(&f);
                if len >= 14 {
                    f[12..14].copy_from_slice(&ETHERTYPE_PTP.to_be_bytes());
                }
                let _ = classify(&f);
            }
        }
    }
}
