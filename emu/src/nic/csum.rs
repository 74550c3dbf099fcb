//! TX checksum insertion from advanced context descriptors (intel-timesync.md §9; Linux
//! igc_main.c igc_tx_csum / igc_tx_ctxtdesc / igc_tx_olinfo_status, igc_base.h).
//!
//! A context descriptor (DTYP 0x2) holds, for context slot IDX (mss_l4len_idx b6:4):
//! IPLEN (vlan_macip_lens b8:0) and MACLEN (b15:9), the IPv4 flag TUCMD.IPV4
//! (type_tucmd_mlhl b10) and L4T (b12:11: 0 UDP, 1 TCP, 2 SCTP), and for segmentation
//! (`tso`) L4LEN (mss_l4len_idx b15:8) and MSS (b31:16) (igc_tso: IGC_ADVTXD_L4LEN_SHIFT 8,
//! IGC_ADVTXD_MSS_SHIFT 16). A data descriptor's POPTS (olinfo_status b13:8) asks for
//! insertion with the context in its IDX (b6:4):
//!
//! - IXSM (b8): the IPv4 header checksum over IPLEN bytes at MACLEN, its field (header byte
//!   10) taken as zero \[U: the hardware overwrites it; Linux zeroes it for TSO anyway\].
//! - TXSM (b9): the UDP or TCP checksum over the frame from MACLEN + IPLEN to its end,
//!   starting from what the checksum field holds (Linux seeds it with the pseudo-header sum
//!   for CHECKSUM_PARTIAL), its one's complement written to the field (UDP byte 6, TCP 16).
//!   A UDP result of 0 is sent as 0xFFFF (0 means "no checksum", RFC 768) \[U\]. The sum
//!   runs to the end of the frame as posted (before TCTL.PSP padding) \[U\].
//!
//! SCTP (CRC32c) is not modelled (igc offers SCTP CRC offload, so such a frame is sent
//! unchanged and counted). A context whose offsets fall outside the frame inserts nothing and
//! is counted too. TSO segments go through [`insert`] one by one (`tso`).

/// L4 type field of a context descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum L4 {
    #[default]
    Udp,
    Tcp,
    /// SCTP or the reserved value.
    Other,
}

/// One context slot, as the last context descriptor for it left it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct TxContext {
    pub(crate) maclen: usize,
    pub(crate) iplen: usize,
    pub(crate) ipv4: bool,
    pub(crate) l4: L4,
    /// L4 header length (TSO).
    pub(crate) l4len: usize,
    /// Maximum segment size: payload bytes per segment (TSO).
    pub(crate) mss: usize,
}

/// Context slots per queue (IDX is 3 bits).
pub(crate) const SLOTS: usize = 8;

/// olinfo_status POPTS bits.
const POPTS_IXSM: u32 = 1 << 8;
const POPTS_TXSM: u32 = 1 << 9;
/// type_tucmd_mlhl fields.
const TUCMD_IPV4: u32 = 1 << 10;
const L4T_SHIFT: u32 = 11;
const MACLEN_SHIFT: u32 = 9;
const IDX_SHIFT: u32 = 4;
/// mss_l4len_idx fields.
const L4LEN_SHIFT: u32 = 8;
const MSS_SHIFT: u32 = 16;

/// The slot a context (`mss_l4len_idx`) or data (`olinfo_status`) descriptor names.
pub(crate) fn slot(dword3: u32) -> usize {
    ((dword3 >> IDX_SHIFT) & 7) as usize
}

/// A context descriptor's slot contents.
pub(crate) fn parse(vlan_macip_lens: u32, type_tucmd_mlhl: u32, mss_l4len_idx: u32) -> TxContext {
    TxContext {
        l4len: ((mss_l4len_idx >> L4LEN_SHIFT) & 0xFF) as usize,
        mss: (mss_l4len_idx >> MSS_SHIFT) as usize,
        iplen: (vlan_macip_lens & 0x1FF) as usize,
        maclen: ((vlan_macip_lens >> MACLEN_SHIFT) & 0x7F) as usize,
        ipv4: type_tucmd_mlhl & TUCMD_IPV4 != 0,
        l4: match (type_tucmd_mlhl >> L4T_SHIFT) & 3 {
            0 => L4::Udp,
            1 => L4::Tcp,
            _ => L4::Other,
        },
    }
}

/// What [`insert`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// No POPTS bit set.
    None,
    /// Every requested checksum was written.
    Inserted,
    /// A request the model cannot honour (offsets outside the frame, SCTP): frame unchanged
    /// from that point.
    Skipped,
}

/// One's-complement sum of `b` as big-endian 16-bit words (an odd last byte padded with 0).
pub(crate) fn sum16(b: &[u8]) -> u32 {
    let mut s: u32 = 0;
    let mut it = b.chunks_exact(2);
    for w in &mut it {
        s += u16::from_be_bytes([w[0], w[1]]) as u32;
        s = (s & 0xFFFF) + (s >> 16);
    }
    if let [last] = it.remainder() {
        s += (*last as u32) << 8;
    }
    s
}

pub(crate) fn fold(mut s: u32) -> u16 {
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

/// Inserts the checksums `olinfo` asks for, with context `ctx`.
pub(crate) fn insert(frame: &mut [u8], olinfo: u32, ctx: &TxContext) -> Outcome {
    if olinfo & (POPTS_IXSM | POPTS_TXSM) == 0 {
        return Outcome::None;
    }
    let ip = ctx.maclen;
    let l4 = ip + ctx.iplen;
    if olinfo & POPTS_IXSM != 0 {
        if !ctx.ipv4 || ctx.iplen < 20 || l4 > frame.len() {
            return Outcome::Skipped;
        }
        frame[ip + 10..ip + 12].fill(0);
        let c = !fold(sum16(&frame[ip..l4]));
        frame[ip + 10..ip + 12].copy_from_slice(&c.to_be_bytes());
    }
    if olinfo & POPTS_TXSM != 0 {
        let field = match ctx.l4 {
            L4::Udp => 6,
            L4::Tcp => 16,
            L4::Other => return Outcome::Skipped,
        };
        if l4 + field + 2 > frame.len() {
            return Outcome::Skipped;
        }
        let mut c = !fold(sum16(&frame[l4..]));
        if ctx.l4 == L4::Udp && c == 0 {
            c = 0xFFFF;
        }
        frame[l4 + field..l4 + field + 2].copy_from_slice(&c.to_be_bytes());
    }
    Outcome::Inserted
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sum16_matches_rfc1071_example() {
        // RFC 1071 §3: 0001 f203 f4f5 f6f7 sums to ddf2.
        assert_eq!(
            fold(sum16(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7])),
            0xddf2
        );
        assert_eq!(fold(sum16(&[0xff])), 0xff00);
    }

    #[test]
    fn parse_reads_the_linux_layout() {
        // igc_tx_csum for IPv4/UDP behind a 14-byte MAC header: IPLEN 20, MACLEN 14 << 9.
        let c = parse(20 | 14 << 9, 0x2 << 20 | 1 << 29 | TUCMD_IPV4, 0);
        assert_eq!(
            c,
            TxContext {
                maclen: 14,
                iplen: 20,
                ipv4: true,
                l4: L4::Udp,
                l4len: 0,
                mss: 0,
            }
        );
        // igc_tso for IPv6/TCP: L4LEN 32 << 8, MSS 1428 << 16.
        let c = parse(40 | 18 << 9, 1 << 11, 32 << 8 | 1428 << 16 | 1 << 4);
        assert_eq!((c.l4, c.l4len, c.mss), (L4::Tcp, 32, 1428));
        assert_eq!(slot(3 << 4), 3);
    }
}
