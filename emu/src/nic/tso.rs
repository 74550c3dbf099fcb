//! TCP (and UDP) segmentation of a frame posted with DCMD.TSE (intel-timesync.md §9: TSE is
//! cmd_type_len b31; Linux igc_main.c igc_tso / igc_tx_olinfo_status).
//!
//! The driver posts one header (MACLEN + IPLEN + L4LEN bytes, as the context descriptor in
//! the data descriptor's IDX slot gives them) followed by PAYLEN payload bytes (olinfo_status
//! b31:14), gathered over any number of data descriptors up to EOP. The MAC sends it as
//! ⌈PAYLEN / MSS⌉ frames, each the header followed by the next MSS payload bytes (the last
//! one shorter), with, per segment:
//!
//! - IPv4 (TUCMD.IPV4): total length = IPLEN + L4LEN + segment payload; identification = the
//!   posted one + segment index (igc_tso zeroes tot_len and leaves the ID for the hardware;
//!   Linux's own software segmentation, inet_gso_segment, numbers them the same way).
//!   The header checksum is inserted when POPTS.IXSM asks (igc sets it for IPv4 TSO).
//! - IPv6: payload length = IPLEN − 40 + L4LEN + segment payload (igc_tso zeroes it).
//! - TCP (L4T 1): sequence number = the posted one + index × MSS; FIN and PSH only on the
//!   last segment, CWR only on the first (tcp_gso_segment in net/ipv4/tcp_offload.c does
//!   the same to software segments; \[U\] for the part: its DTXTCPFLGL/H flag masks at their
//!   82599/i210 defaults, which the model does not make writable).
//! - UDP (L4T 0, igc's GSO_UDP_L4): length = L4LEN + segment payload.
//! - L4 checksum (POPTS.TXSM): igc_tso leaves in the field the pseudo-header sum *without*
//!   the length (csum_replace_by_diff of paylen); the MAC adds each segment's L4 length
//!   (L4LEN + payload) and sums header and payload (`csum::insert`).
//!
//! \[U\] A request the model cannot carry out is malformed (dropped and counted, never sent
//! whole): an L4 type other than TCP/UDP, MSS 0, an L4LEN too short for its header, a header
//! that is not followed by at least one payload byte, buffers whose length is not header +
//! PAYLEN, or a segment longer than [`super::tx::MAX_TX_FRAME`].

use super::csum::{self, L4, TxContext};

/// olinfo_status PAYLEN (b31:14).
const PAYLEN_SHIFT: u32 = 14;
/// olinfo_status POPTS.TXSM.
const POPTS_TXSM: u32 = 1 << 9;
/// TCP flag bits (byte 13 of the header).
const TCP_FIN: u8 = 0x01;
const TCP_PSH: u8 = 0x08;
const TCP_CWR: u8 = 0x80;
/// Shortest TCP and UDP headers.
const TCP_HDR: usize = 20;
const UDP_HDR: usize = 8;
/// Shortest IPv4 and IPv6 headers.
const IPV4_HDR: usize = 20;
const IPV6_HDR: usize = 40;

/// Why a TSE frame cannot be segmented.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub(crate) enum TsoError {
    #[error("L4 type is neither TCP nor UDP")]
    L4Type,
    #[error("MSS {0} (zero, or a segment longer than the largest frame)")]
    Mss(usize),
    #[error(
        "header lengths MACLEN {maclen} IPLEN {iplen} L4LEN {l4len} do not fit a {frame}-byte frame"
    )]
    Header {
        maclen: usize,
        iplen: usize,
        l4len: usize,
        frame: usize,
    },
    #[error("PAYLEN {paylen} but {posted} payload bytes posted")]
    Paylen { paylen: usize, posted: usize },
}

/// A TSE frame checked against its context, ready to be cut into segments.
pub(crate) struct Tso<'a> {
    data: &'a [u8],
    ctx: TxContext,
    olinfo: u32,
    /// Header bytes (MACLEN + IPLEN + L4LEN).
    hdr: usize,
}

impl<'a> Tso<'a> {
    /// Checks `data` (the gathered buffers) against context `ctx` and `olinfo`'s PAYLEN.
    pub(crate) fn new(data: &'a [u8], olinfo: u32, ctx: &TxContext) -> Result<Self, TsoError> {
        let min_l4 = match ctx.l4 {
            L4::Tcp => TCP_HDR,
            L4::Udp => UDP_HDR,
            L4::Other => return Err(TsoError::L4Type),
        };
        let min_ip = if ctx.ipv4 { IPV4_HDR } else { IPV6_HDR };
        let hdr = ctx.maclen + ctx.iplen + ctx.l4len;
        if ctx.l4len < min_l4 || ctx.iplen < min_ip || ctx.maclen < 14 || hdr >= data.len() {
            return Err(TsoError::Header {
                maclen: ctx.maclen,
                iplen: ctx.iplen,
                l4len: ctx.l4len,
                frame: data.len(),
            });
        }
        if ctx.mss == 0 || hdr + ctx.mss > super::tx::MAX_TX_FRAME {
            return Err(TsoError::Mss(ctx.mss));
        }
        let paylen = (olinfo >> PAYLEN_SHIFT) as usize;
        if data.len() - hdr != paylen {
            return Err(TsoError::Paylen {
                paylen,
                posted: data.len() - hdr,
            });
        }
        Ok(Self {
            data,
            ctx: *ctx,
            olinfo,
            hdr,
        })
    }

    /// Segments the frame makes.
    pub(crate) fn count(&self) -> usize {
        (self.data.len() - self.hdr).div_ceil(self.ctx.mss)
    }

    /// Segment `k` (< [`Self::count`]) as it leaves the MAC (module docs).
    pub(crate) fn segment(&self, k: usize) -> Vec<u8> {
        let c = &self.ctx;
        let start = self.hdr + k * c.mss;
        let end = (start + c.mss).min(self.data.len());
        let mut f = Vec::with_capacity(self.hdr + end - start);
        f.extend_from_slice(&self.data[..self.hdr]);
        f.extend_from_slice(&self.data[start..end]);
        let (ip, l4) = (c.maclen, c.maclen + c.iplen);
        // Lengths fit 16 bits: a segment is at most MAX_TX_FRAME bytes (checked in `new`).
        let l4_bytes = c.l4len + end - start;
        if c.ipv4 {
            put16(&mut f, ip + 2, (c.iplen + l4_bytes) as u16);
            let id = get16(&f, ip + 4).wrapping_add(k as u16);
            put16(&mut f, ip + 4, id);
        } else {
            put16(&mut f, ip + 4, (c.iplen - IPV6_HDR + l4_bytes) as u16);
        }
        let field = match c.l4 {
            L4::Tcp => {
                let seq = get32(&f, l4 + 4).wrapping_add((k * c.mss) as u32);
                f[l4 + 4..l4 + 8].copy_from_slice(&seq.to_be_bytes());
                if k + 1 < self.count() {
                    f[l4 + 13] &= !(TCP_FIN | TCP_PSH);
                }
                if k > 0 {
                    f[l4 + 13] &= !TCP_CWR;
                }
                l4 + 16
            }
            _ => {
                put16(&mut f, l4 + 4, l4_bytes as u16);
                l4 + 6
            }
        };
        if self.olinfo & POPTS_TXSM != 0 {
            // The seed lacks the length: add this segment's before the sum.
            let seeded = csum::fold(get16(&f, field) as u32 + l4_bytes as u32);
            put16(&mut f, field, seeded);
        }
        csum::insert(&mut f, self.olinfo, c);
        f
    }
}

fn get16(f: &[u8], at: usize) -> u16 {
    u16::from_be_bytes([f[at], f[at + 1]])
}

fn put16(f: &mut [u8], at: usize, v: u16) {
    f[at..at + 2].copy_from_slice(&v.to_be_bytes());
}

fn get32(f: &[u8], at: usize) -> u32 {
    u32::from_be_bytes([f[at], f[at + 1], f[at + 2], f[at + 3]])
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ctx(l4: L4, l4len: usize, mss: usize) -> TxContext {
        TxContext {
            maclen: 14,
            iplen: 20,
            ipv4: true,
            l4,
            l4len,
            mss,
        }
    }

    #[test]
    fn bad_requests_are_refused_not_guessed() {
        let data = vec![0u8; 14 + 20 + 20 + 100];
        let ol = |paylen: u32| paylen << PAYLEN_SHIFT;
        assert!(Tso::new(&data, ol(100), &ctx(L4::Tcp, 20, 40)).is_ok());
        let e = |c: TxContext, o: u32| Tso::new(&data, o, &c).err();
        assert_eq!(e(ctx(L4::Other, 20, 40), ol(100)), Some(TsoError::L4Type));
        assert_eq!(e(ctx(L4::Tcp, 20, 0), ol(100)), Some(TsoError::Mss(0)));
        assert_eq!(
            e(ctx(L4::Tcp, 20, 40_000), ol(100)),
            Some(TsoError::Mss(40_000))
        );
        assert!(matches!(
            e(ctx(L4::Tcp, 12, 40), ol(108)),
            Some(TsoError::Header { .. })
        ));
        assert!(matches!(
            e(ctx(L4::Tcp, 120, 40), ol(0)),
            Some(TsoError::Header { .. })
        ));
        assert_eq!(
            e(ctx(L4::Tcp, 20, 40), ol(99)),
            Some(TsoError::Paylen {
                paylen: 99,
                posted: 100
            })
        );
        let t = Tso::new(&data, ol(100), &ctx(L4::Tcp, 20, 40)).unwrap();
        assert_eq!(t.count(), 3);
        assert_eq!(t.segment(2).len(), 54 + 20);
    }
}
