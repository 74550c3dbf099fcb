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
//!   drops what the MAC would not accept (`rx_filtered`); RCTL.LPE is not enforced.
//! - \[assumption\] No on-chip packet buffer: a frame that finds RCTL.EN or
//!   RXDCTL(0).QUEUE_ENABLE clear, the link down, or no free descriptor (RDH = RDT) is dropped
//!   and counted at once (`rx_not_ready` / `rx_missed`). Frames under 14 bytes are dropped
//!   (`rx_runt`). A frame (plus header) larger than the buffer is dropped (`rx_too_big`); the
//!   model never spreads a frame over several descriptors.
//! - Buffer size: SRRCTL.BSIZEPKT KB; \[assumption\] BSIZEPKT = 0 falls back to RCTL.SZ
//!   (0 → 2048, 1 → 1024, 2 → 512, 3 → 256 bytes). DESCTYPE is not checked: the advanced
//!   one-buffer format is always used.
//! - With RCTL.SECRC clear the frame is followed by its 4-byte FCS (CRC-32), as hardware
//!   stores it; igc sets SECRC.
//! - Write-back (§9): DW0/DW1 = 0 (no RSS or packet type), DW2 = DD | EOP (| TSIP),
//!   DW3 = length (including the 16-byte header with TSIP; no VLAN field).
//!   \[assumption\] A buffer address DMA cannot reach consumes the descriptor with
//!   DW2 = DD | EOP | RXE and length 0 (`rx_dma_errors`); an unreadable descriptor drops the
//!   frame and leaves RDH alone.
//! - Timestamp: the family's ([`Mac::rx_stamp`]): a 16-byte header in front of the frame
//!   with TSIP in the write-back status (§8.1, §8.2), or status bits only (82576's TS, §8.3).

use intel_regs::e1000::*;
use ptp_pci::emulated::DeviceHost;

use super::addrfilter;
use super::irq::QueueCause;
use super::tx::Ring;
use super::{Mac, Port, RxStamp, q};
use crate::wire::WireFrame;

/// Shortest frame accepted: an Ethernet header.
const MIN_RX_FRAME: usize = 14;
/// Advanced RX write-back status: RX data error (§9 RXE b31).
const STAT_RXE: u32 = 1 << 31;
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

/// The descriptor at RDH and its buffer address, if the frame can be taken (counts why not).
fn take_descriptor(
    p: &mut Port,
    dst: &[u8; 6],
    host: &mut dyn DeviceHost,
) -> Option<(Ring, u64, u64)> {
    let rctl = p.regs.get(RCTL);
    if rctl & rctl::EN == 0 || p.rxq(q::DCTL) & xdctl::QUEUE_ENABLE == 0 || !p.link.up {
        p.stats.rx_not_ready += 1;
        return None;
    }
    if !addrfilter::accepts(&p.regs, dst) {
        p.stats.rx_filtered += 1;
        return None;
    }
    let ring = Ring::from_regs(
        p.rxq(q::BAL),
        p.rxq(q::BAH),
        p.rxq(q::LEN),
        p.rxq(q::HEAD),
        p.rxq(q::TAIL),
    );
    let Some(ring) = ring.filter(|r| r.posted() > 0) else {
        p.stats.rx_missed += 1;
        p.hwstats.rx_missed();
        return None;
    };
    let mut qw0 = [0u8; 8];
    let Some(desc_addr) = ring
        .desc_addr(ring.head)
        .filter(|&a| host.dma_read(a, &mut qw0))
    else {
        p.stats.rx_dma_errors += 1;
        return None;
    };
    Some((ring, desc_addr, u64::from_le_bytes(qw0)))
}

/// One frame reaches the MAC.
fn receive<M: Mac>(m: &mut M, f: WireFrame, host: &mut dyn DeviceHost) {
    if f.data.len() < MIN_RX_FRAME {
        m.port().stats.rx_runt += 1;
        return;
    }
    let mut dst = [0u8; 6];
    dst.copy_from_slice(&f.data[..6]);
    let Some((ring, desc_addr, buf_addr)) = take_descriptor(m.port(), &dst, host) else {
        return;
    };
    let stamp = m.rx_stamp(f.arrival_ns, &f.data);
    let p = m.port();
    let mut buf = Vec::with_capacity(16 + f.data.len() + 4);
    let mut status = rxd::STAT_DD | rxd::STAT_EOP;
    match stamp {
        RxStamp::None => {}
        RxStamp::Header(h) => {
            buf.extend_from_slice(&h);
            status |= rxd::STAT_TSIP;
        }
        RxStamp::Status(bits) => status |= bits,
    }
    buf.extend_from_slice(&f.data);
    if p.regs.get(RCTL) & rctl::SECRC == 0 {
        buf.extend_from_slice(&crc32(&f.data).to_le_bytes());
    }
    if buf.len() > rx_buffer_len(p) || buf.len() > u16::MAX as usize {
        p.stats.rx_too_big += 1;
        p.hwstats.rx_oversize();
        return;
    }
    let (status, len) = if host.dma_write(buf_addr, &buf) {
        p.stats.rx_frames += 1;
        p.stats.rx_bytes += f.data.len() as u64;
        p.hwstats.rx_accepted(f.data.len(), dst);
        if stamp != RxStamp::None {
            p.stats.rx_stamped += 1;
        }
        (status, buf.len() as u32)
    } else {
        p.stats.rx_dma_errors += 1;
        (rxd::STAT_DD | rxd::STAT_EOP | STAT_RXE, 0)
    };
    let mut wb = [0u8; 16];
    wb[8..12].copy_from_slice(&status.to_le_bytes());
    wb[12..16].copy_from_slice(&len.to_le_bytes());
    let _ = host.dma_write(desc_addr, &wb);
    p.regs.set(p.map.rx0 + q::HEAD, (ring.head + 1) % ring.n);
    let ivar = p.regs.get(p.map.ivar0);
    p.irq.queue_cause(0, QueueCause::Rx, ivar, host);
}

#[cfg(test)]
mod tests {
    use super::crc32;

    #[test]
    fn crc32_check_value() {
        assert_eq!(crc32(b"123456789"), 0xCBF4_3926);
    }
}
