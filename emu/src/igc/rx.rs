//! The RX data path of queue 0 (intel-timesync.md §8.1 stamps in the packet buffer, §8.4
//! latencies, §9 descriptors, §10 rings).
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
//! - Timestamp (§8.1): with RXPBS.CFG_TS_EN, SRRCTL(0).TIMESTAMP and TSYNCRXCTL.ENABLED all
//!   set and TSYNCRXCTL.TYPE = ALL (§2.2: the only type Linux's igc programs; another TYPE
//!   stamps nothing and is recorded as unmodelled), every frame gets a 16-byte header in
//!   front: dwords 2–3 = the TIMER0SEL timer's ns, s; dwords 0–1 = the TIMER1SEL timer's.
//!   Only timer 0 (SYSTIM0) is modelled: a selection of timer 1–3 reads 0 \[U\] and is
//!   recorded as unmodelled. igc selects timer 0 for both, so dwords 0–1 repeat 2–3. The value is PHC(arrival) + RX latency for the
//!   link speed (§8.4, in PHC ns), so a driver subtracting the latency gets exactly
//!   PHC(arrival), SYSTIM as it was at the arrival instant even if the model processes the
//!   frame later; with the configured jitter and quantum (`noise`), that value plus jitter,
//!   truncated to the quantum.

use intel_regs::igc::*;
use ptp_pci::emulated::DeviceHost;

use super::I225;
use super::addrfilter;
use super::irq::QueueCause;
use super::tx::Ring;
use crate::phc::{SysTime, wrap_add_ns};
use crate::wire::WireFrame;

/// Shortest frame accepted: an Ethernet header.
const MIN_RX_FRAME: usize = 14;
/// Advanced RX write-back status: RX data error (§9 RXE b31).
const STAT_RXE: u32 = 1 << 31;
/// Frames taken from the wire per poll, so a flooding peer cannot hold the bus lock forever;
/// more are left for the next poll (which then comes at once).
pub(super) const RX_PER_POLL: usize = 1024;

/// SRRCTL's TIMERnSEL field (n = 0: b18:17, n = 1: b15:14): which of the four timers the
/// header's dword pair for it holds.
fn timer_sel(srrctl_v: u32, n: u32) -> u32 {
    let shift = if n == 0 {
        srrctl::TIMER0SEL_SHIFT
    } else {
        srrctl::TIMER1SEL_SHIFT
    };
    (srrctl_v >> shift) & 3
}

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

impl I225 {
    /// Takes every frame that has arrived by now from the wire (bounded); true if more are
    /// due already.
    pub(super) fn run_rx(&mut self, host: &mut dyn DeviceHost) -> bool {
        let now = self.now();
        for _ in 0..RX_PER_POLL {
            let Some(f) = self.wire.as_mut().and_then(|w| w.poll_rx(now)) else {
                return false;
            };
            self.receive(f, host);
        }
        self.wire
            .as_ref()
            .and_then(|w| w.next_arrival())
            .is_some_and(|a| a <= now)
    }

    /// Whether a frame gets an in-buffer timestamp: the three §8.1 enables and TYPE = ALL, the
    /// only type documented for i225 (§2.2: Linux igc_ptp.c igc_ptp_set_timestamp_mode
    /// programs ALL for every filter). Another TYPE stamps nothing here and is recorded as an
    /// unmodelled configuration when written (`record_rx_ts_config`).
    fn rx_stamps(&self) -> bool {
        let ctl = self.regs.get(TSYNCRXCTL);
        self.regs.get(RXPBS) & rxpbs::CFG_TS_EN != 0
            && self.regs.get(srrctl(0)) & srrctl::TIMESTAMP != 0
            && ctl & tsyncrxctl::ENABLED != 0
            && ctl & tsyncrxctl::TYPE_MASK == tsyncrxctl::TYPE_ALL
    }

    /// Records TSYNCRXCTL and SRRCTL values the model does not implement: an enabled TYPE
    /// other than ALL, and a TIMER0SEL/TIMER1SEL naming timers 1–3 (only SYSTIM0 is modelled).
    pub(super) fn record_rx_ts_config(&mut self, offset: u32, v: u32) {
        let unmodelled = if offset == TSYNCRXCTL {
            v & tsyncrxctl::ENABLED != 0 && v & tsyncrxctl::TYPE_MASK != tsyncrxctl::TYPE_ALL
        } else {
            v & srrctl::TIMESTAMP != 0 && (timer_sel(v, 0) != 0 || timer_sel(v, 1) != 0)
        };
        if unmodelled {
            self.unimpl.record_value(offset, v);
        }
    }

    fn rx_buffer_len(&self) -> usize {
        match self.regs.get(srrctl(0)) & 0x7F {
            0 => 2048 >> ((self.regs.get(RCTL) >> 16) & 3),
            kb => kb as usize * 1024,
        }
    }

    /// One frame reaches the MAC.
    fn receive(&mut self, f: WireFrame, host: &mut dyn DeviceHost) {
        if f.data.len() < MIN_RX_FRAME {
            self.stats.rx_runt += 1;
            return;
        }
        let rctl = self.regs.get(RCTL);
        if rctl & rctl::EN == 0
            || self.regs.get(rxdctl(0)) & xdctl::QUEUE_ENABLE == 0
            || !self.link.up
        {
            self.stats.rx_not_ready += 1;
            return;
        }
        let mut dst = [0u8; 6];
        dst.copy_from_slice(&f.data[..6]);
        if !addrfilter::accepts(&self.regs, &dst) {
            self.stats.rx_filtered += 1;
            return;
        }
        let r = &self.regs;
        let ring = Ring::from_regs(
            r.get(rdbal(0)),
            r.get(rdbah(0)),
            r.get(rdlen(0)),
            r.get(rdh(0)),
            r.get(rdt(0)),
        );
        let Some(ring) = ring.filter(|r| r.posted() > 0) else {
            self.stats.rx_missed += 1;
            self.hwstats.rx_missed();
            return;
        };
        let Some(desc_addr) = ring.desc_addr(ring.head) else {
            self.stats.rx_dma_errors += 1;
            return;
        };
        let mut qw0 = [0u8; 8];
        if !host.dma_read(desc_addr, &mut qw0) {
            self.stats.rx_dma_errors += 1;
            return;
        }
        let buf_addr = u64::from_le_bytes(qw0);

        let stamp = self.rx_stamps();
        let mut buf = Vec::with_capacity(TS_HDR_LEN + f.data.len() + 4);
        if stamp {
            let (_, rx_lat) = latency_ns(self.link.speed.mbps());
            let exact = wrap_add_ns(self.tsync.phc.ns_at_instant(f.arrival_ns), rx_lat as i64);
            let ns = self.noise.rx(exact);
            let t = SysTime::from_ns(ns);
            // Dwords 0-1: the TIMER1SEL timer, 2-3: the TIMER0SEL timer (§8.1).
            let sel = self.regs.get(srrctl(0));
            for k in [1, 0] {
                let (nsec, sec) = if timer_sel(sel, k) == 0 {
                    (t.nsec, t.sec)
                } else {
                    (0, 0)
                };
                buf.extend_from_slice(&nsec.to_le_bytes());
                buf.extend_from_slice(&sec.to_le_bytes());
            }
        }
        buf.extend_from_slice(&f.data);
        if rctl & rctl::SECRC == 0 {
            buf.extend_from_slice(&crc32(&f.data).to_le_bytes());
        }
        if buf.len() > self.rx_buffer_len() || buf.len() > u16::MAX as usize {
            self.stats.rx_too_big += 1;
            self.hwstats.rx_oversize();
            return;
        }

        let (status, len) = if host.dma_write(buf_addr, &buf) {
            self.stats.rx_frames += 1;
            self.stats.rx_bytes += f.data.len() as u64;
            self.hwstats.rx_accepted(f.data.len(), dst);
            let tsip = if stamp {
                self.stats.rx_stamped += 1;
                rxd::STAT_TSIP
            } else {
                0
            };
            (rxd::STAT_DD | rxd::STAT_EOP | tsip, buf.len() as u32)
        } else {
            self.stats.rx_dma_errors += 1;
            (rxd::STAT_DD | rxd::STAT_EOP | STAT_RXE, 0)
        };
        let mut wb = [0u8; 16];
        wb[8..12].copy_from_slice(&status.to_le_bytes());
        wb[12..16].copy_from_slice(&len.to_le_bytes());
        let _ = host.dma_write(desc_addr, &wb);
        self.regs.set(rdh(0), (ring.head + 1) % ring.n);
        let ivar = self.regs.get(IVAR0);
        self.irq.queue_cause(0, QueueCause::Rx, ivar, host);
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
