//! The RX data path of queue 0 (intel-timesync.md §9 descriptors, §10 rings), shared by the
//! igc and igb models.
//!
//! A frame the wire delivers (at its arrival instant, from `Device::poll`) goes into the
//! buffer named by the read descriptor at RDH, optionally behind a 16-byte timestamp header;
//! the descriptor is written back in the advanced format, RDH advances and ICR.RXT0 is raised
//! (routed through IVAR0 in MSI-X mode). Queues 1–3 are register storage only.
//!
//! # Assumptions
//!
//! - Destination-address filtering (`addrfilter`: RAL/RAH, MTA with RCTL.MO, UPE/MPE, BAM)
//!   drops what the MAC would not accept (`rx_filtered`).
//! - Length limits, checked on frames that passed the filter (the datasheet's RUC/ROC count
//!   such frames \[U: the i210 wording\]). The model's wire carries frames without their FCS,
//!   so a frame of `n` bytes is `n + 4` on the cable. Under 64 bytes with FCS: a runt, dropped
//!   and counted (`rx_runt`, RUC). Over the long-packet limit: dropped and counted
//!   (`rx_oversize`, ROC). The limit is RLPML.RLPML (b13:0, with FCS) when RCTL.LPE is set
//!   (igc sets LPE and writes RLPML = the largest frame its MTU allows, igc_set_rx_mode;
//!   igc_rx_fifo_flush_base relies on LPE with RLPML = 0 rejecting every frame), else 1518,
//!   1522 with an 802.1Q tag (IEEE 802.3 maximum frame sizes) \[U\].
//! - A frame longer than one buffer is written across consecutive descriptors from RDH, each
//!   buffer filled before the next: every descriptor written back with DD and its own length,
//!   EOP only on the last (Linux igc_clean_rx_irq / igc_is_non_eop gathers them with
//!   igc_add_rx_frag). The 16-byte timestamp header leads the first buffer only and TSIP is
//!   set on the first descriptor only (igc and igb strip a header from any descriptor with
//!   TSIP); status bits of a register-mode stamp (82576's TS) go on the last, where igb reads
//!   them (igb_process_skb_fields gets the EOP descriptor).
//! - \[assumption\] No on-chip packet buffer: a frame that finds RCTL.EN or
//!   RXDCTL(0).QUEUE_ENABLE clear, or the link down, is dropped and counted at once
//!   (`rx_not_ready`); one that finds fewer free descriptors than it needs (RDH..RDT) is dropped
//!   as missed (`rx_missed`, MPC). The family's stamp is taken once one descriptor is free, so a
//!   frame missed for want of the others has been stamped (as a part stamps at the MAC).
//! - Buffer size: SRRCTL.BSIZEPKT KB; \[assumption\] BSIZEPKT = 0 falls back to RCTL.SZ
//!   (0 → 2048, 1 → 1024, 2 → 512, 3 → 256 bytes). DESCTYPE is not checked: the advanced
//!   one-buffer format is always used.
//! - With RCTL.SECRC clear the frame is followed by its 4-byte FCS (CRC-32), as hardware
//!   stores it; igc sets SECRC.
//! - Write-back (§9): DW0/DW1 = 0 (no RSS or packet type), DW2 = DD (| EOP on the last)
//!   (| TSIP on the first), DW3 = that buffer's length (including the 16-byte header with
//!   TSIP; no VLAN field). \[assumption\] A buffer address DMA cannot reach: the frame's
//!   descriptors are consumed and written back with RXE as well (`rx_dma_errors`); an
//!   unreadable descriptor drops the frame and leaves RDH alone.
//! - Timestamp: the family's ([`Mac::rx_stamp`]): a 16-byte header in front of the frame
//!   with TSIP in the write-back status (§8.1, §8.2), or status bits only (82576's TS, §8.3).

use intel_regs::e1000::*;
use ptp_pci::emulated::DeviceHost;

use super::addrfilter;
use super::irq::QueueCause;
use super::tx::Ring;
use super::{Mac, Port, RxStamp, q};
use crate::wire::WireFrame;

/// Shortest frame accepted, without FCS: 64 bytes with it (IEEE 802.3 minimum).
const MIN_RX_FRAME: usize = 60;
/// The FCS every frame has on the cable (the model's wire leaves it out).
const FCS_LEN: usize = 4;
/// Longest frame with FCS when RCTL.LPE is clear: untagged, and with an 802.1Q tag.
const MAX_STD_FRAME: usize = 1518;
const MAX_TAGGED_FRAME: usize = 1522;
/// RLPML (Linux igc_regs.h IGC_RLPML, e1000_regs.h E1000_RLPML) and its RLPML field.
pub(crate) const RLPML: u32 = 0x5004;
const RLPML_MASK: u32 = 0x3FFF;
/// RLPML after power-on or reset: 9728 bytes \[U: the i210/82576 datasheets' initial value;
/// Linux's MAX_JUMBO_FRAME_SIZE 0x2600 in igc.h and igb.h is the same\]. A driver that sets
/// RCTL.LPE without writing RLPML (igcd, igbd) relies on it.
pub(crate) const RLPML_POWER_ON: u32 = 0x2600;
/// Frames taken from the wire per poll, so a flooding peer cannot hold the bus lock forever;
/// more are left for the next poll (which then comes at once).
pub(crate) const RX_PER_POLL: usize = 1024;

/// CRC-32 (IEEE 802.3), as the FCS.
fn crc32(data: &[u8]) -> u32 {
    let mut crc = !0u32;
    for &b in data {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = (crc >> 1) ^ (0xEDB8_8320 & (crc & 1).wrapping_neg());
        }
    }
    !crc
}

/// Takes every frame that has arrived by now from the wire (bounded); true if more are due
/// already.
pub(crate) fn run_rx<M: Mac>(m: &mut M, host: &mut dyn DeviceHost) -> bool {
    let now = m.port().now();
    for _ in 0..RX_PER_POLL {
        let Some(f) = m.port().wire.as_mut().and_then(|w| w.poll_rx(now)) else {
            return false;
        };
        receive(m, f, host);
    }
    m.port()
        .wire
        .as_ref()
        .and_then(|w| w.next_arrival())
        .is_some_and(|a| a <= now)
}

/// The RX buffer size: SRRCTL.BSIZEPKT KB, or RCTL.SZ when it is 0.
fn rx_buffer_len(p: &Port) -> usize {
    match p.rxq(q::SRRCTL) & 0x7F {
        0 => 2048 >> ((p.regs.get(RCTL) >> 16) & 3),
        kb => kb as usize * 1024,
    }
}

/// The long-packet limit (bytes with FCS) for `data` (module docs).
fn max_frame(p: &Port, data: &[u8]) -> usize {
    if p.regs.get(RCTL) & rctl::LPE != 0 {
        (p.regs.get(RLPML) & RLPML_MASK) as usize
    } else if data.get(12..14) == Some(&[0x81, 0x00]) {
        MAX_TAGGED_FRAME
    } else {
        MAX_STD_FRAME
    }
}

/// Whether the MAC takes `data` in: receiver enabled, address filter, length limits (each
/// refusal counted).
fn admit(p: &mut Port, data: &[u8]) -> bool {
    let rctl = p.regs.get(RCTL);
    if rctl & rctl::EN == 0 || p.rxq(q::DCTL) & xdctl::QUEUE_ENABLE == 0 || !p.link.up {
        p.stats.rx_not_ready += 1;
        return false;
    }
    // A frame too short to hold a destination address cannot match a filter: a runt.
    if let Some(dst) = data.get(..6).and_then(|d| <&[u8; 6]>::try_from(d).ok())
        && !addrfilter::accepts(&p.regs, dst)
    {
        p.stats.rx_filtered += 1;
        return false;
    }
    if data.len() < MIN_RX_FRAME {
        p.stats.rx_runt += 1;
        p.hwstats.rx_undersize();
        return false;
    }
    if data.len() + FCS_LEN > max_frame(p, data) {
        p.stats.rx_oversize += 1;
        p.hwstats.rx_oversize();
        return false;
    }
    true
}

/// Queue 0's RX ring with at least `need` free descriptors, or `None` (counted as missed).
fn free_ring(p: &mut Port, need: usize) -> Option<Ring> {
    let ring = Ring::from_regs(
        p.rxq(q::BAL),
        p.rxq(q::BAH),
        p.rxq(q::LEN),
        p.rxq(q::HEAD),
        p.rxq(q::TAIL),
    );
    let ring = ring.filter(|r| r.posted() as usize >= need);
    if ring.is_none() {
        p.stats.rx_missed += 1;
        p.hwstats.rx_missed();
    }
    ring
}

/// The buffer addresses (QW0) of the `n` descriptors from RDH, or `None` if DMA cannot read
/// one (counted).
fn buffer_addrs(
    p: &mut Port,
    ring: &Ring,
    n: usize,
    host: &mut dyn DeviceHost,
) -> Option<Vec<u64>> {
    let mut addrs = Vec::with_capacity(n);
    for k in 0..n as u32 {
        let mut qw0 = [0u8; 8];
        let read = ring
            .desc_addr((ring.head + k) % ring.n)
            .is_some_and(|a| host.dma_read(a, &mut qw0));
        if !read {
            p.stats.rx_dma_errors += 1;
            return None;
        }
        addrs.push(u64::from_le_bytes(qw0));
    }
    Some(addrs)
}

/// One frame reaches the MAC.
pub(crate) fn receive<M: Mac>(m: &mut M, f: WireFrame, host: &mut dyn DeviceHost) {
    let p = m.port();
    if !admit(p, &f.data) || free_ring(p, 1).is_none() {
        return;
    }
    let stamp = m.rx_stamp(f.arrival_ns, &f.data);
    let p = m.port();
    let mut buf = Vec::with_capacity(16 + f.data.len() + FCS_LEN);
    if let RxStamp::Header(h) = stamp {
        buf.extend_from_slice(&h);
    }
    buf.extend_from_slice(&f.data);
    if p.regs.get(RCTL) & rctl::SECRC == 0 {
        buf.extend_from_slice(&crc32(&f.data).to_le_bytes());
    }
    let bsize = rx_buffer_len(p);
    let Some(ring) = free_ring(p, buf.len().div_ceil(bsize)) else {
        return;
    };
    let Some(addrs) = buffer_addrs(p, &ring, buf.len().div_ceil(bsize), host) else {
        return;
    };
    let written = buf
        .chunks(bsize)
        .zip(&addrs)
        .fold(true, |ok, (chunk, &a)| host.dma_write(a, chunk) && ok);
    let mut first = RxStatus::DD;
    let mut last = RxStatus::DD | RxStatus::EOP;
    match stamp {
        RxStamp::None => {}
        RxStamp::Header(_) => first |= RxStatus::TSIP,
        RxStamp::Status(bits) => last |= bits,
    }
    if written {
        p.stats.rx_frames += 1;
        p.stats.rx_bytes += f.data.len() as u64;
        let dst = <[u8; 6]>::try_from(&f.data[..6]).unwrap_or_default();
        p.hwstats.rx_accepted(f.data.len(), dst);
        if stamp != RxStamp::None {
            p.stats.rx_stamped += 1;
        }
    } else {
        p.stats.rx_dma_errors += 1;
        (first, last) = (first | RxStatus::RXE, last | RxStatus::RXE);
    }
    let n = addrs.len();
    for (k, chunk) in buf.chunks(bsize).enumerate() {
        let status = match k {
            0 if n == 1 => first | last,
            0 => first,
            _ if k + 1 == n => last,
            _ => RxStatus::DD,
        };
        write_back(
            &ring,
            (ring.head + k as u32) % ring.n,
            status,
            chunk.len(),
            host,
        );
    }
    p.regs
        .set(p.map.rx0 + q::HEAD, (ring.head + n as u32) % ring.n);
    let ivar = p.regs.get(p.map.ivar0);
    p.irq.queue_cause(0, QueueCause::Rx, ivar, host);
}

/// Writes back descriptor `i` (advanced format, §9): status in DW2, length in DW3.
fn write_back(ring: &Ring, i: u32, status: RxStatus, len: usize, host: &mut dyn DeviceHost) {
    let mut wb = [0u8; 16];
    wb[8..12].copy_from_slice(&status.bits().to_le_bytes());
    wb[12..16].copy_from_slice(&(len as u32).to_le_bytes());
    if let Some(a) = ring.desc_addr(i) {
        let _ = host.dma_write(a, &wb);
    }
}

#[cfg(test)]
mod tests {
    use super::crc32;

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }
}
