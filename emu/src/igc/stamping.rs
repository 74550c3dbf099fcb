//! How an i225/i226 timestamps frames: the [`Mac`] hooks of the shared queue-0 engines.
//!
//! - TX (§7.1): the set named by TSTAMP_REG (b17:16) latches PHC(departure) − TX latency
//!   (§8.4), so a driver adding the latency gets exactly PHC(departure) \[assumption: the
//!   latency is applied in PHC nanoseconds, which differs from PHC(departure − latency) by
//!   latency × rate error, far below 1 ns\]; TSICR.TXTS goes through the §7.2 gate.
//! - RX (§8.1): with RXPBS.CFG_TS_EN, SRRCTL(0).TIMESTAMP and TSYNCRXCTL.ENABLED all
//!   set and TSYNCRXCTL.TYPE = ALL (§2.2: the only type Linux's igc programs; another TYPE
//!   stamps nothing and is recorded as unmodelled), every frame gets a 16-byte header in
//!   front: dwords 2–3 = the TIMER0SEL timer's ns, s; dwords 0–1 = the TIMER1SEL timer's.
//!   Only timer 0 (SYSTIM0) is modelled: a selection of timer 1–3 reads 0 \[U\] and is
//!   recorded as unmodelled. igc selects timer 0 for both, so dwords 0–1 repeat 2–3. The
//!   value is PHC(arrival) + RX latency for the link speed (§8.4, in PHC ns), so a driver
//!   subtracting the latency gets exactly PHC(arrival), SYSTIM as it was at the arrival
//!   instant even if the model processes the frame later; with the configured jitter and
//!   quantum (`noise`), that value plus jitter, truncated to the quantum.

use intel_regs::igc::*;
use ptp_pci::emulated::DeviceHost;

use super::I225;
use super::txstamp::Latch;
use crate::nic::{Mac, Port, RxStamp};
use crate::phc::{SysTime, wrap_add_ns};

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

impl I225 {
    /// Whether a frame gets an in-buffer timestamp: the three §8.1 enables and TYPE = ALL.
    fn rx_stamps(&self) -> bool {
        let r = &self.port.regs;
        let ctl = r.get_reg(reg::TSYNCRXCTL);
        r.get(RXPBS) & rxpbs::CFG_TS_EN != 0
            && r.get(srrctl(0)) & srrctl::TIMESTAMP != 0
            && ctl.contains(TsyncRxCtl::ENABLED)
            && ctl.rx_type() == Some(RxTsType::All)
    }

    /// Records TSYNCRXCTL and SRRCTL values the model does not implement: an enabled TYPE
    /// other than ALL, and a TIMER0SEL/TIMER1SEL naming timers 1–3 (only SYSTIM0 is modelled).
    pub(super) fn record_rx_ts_config(&mut self, offset: u32, v: u32) {
        let unmodelled = if offset == TSYNCRXCTL {
            let ctl = TsyncRxCtl::from_bits_retain(v);
            ctl.contains(TsyncRxCtl::ENABLED) && ctl.rx_type() != Some(RxTsType::All)
        } else {
            v & srrctl::TIMESTAMP != 0 && (timer_sel(v, 0) != 0 || timer_sel(v, 1) != 0)
        };
        if unmodelled {
            self.port.unimpl.record_value(offset, v);
        }
    }
}

impl Mac for I225 {
    fn port(&mut self) -> &mut Port {
        &mut self.port
    }

    fn tx_stamp(&mut self, departure: u64, first_cmd: u32, host: &mut dyn DeviceHost) {
        if !self.txs.enabled() {
            return;
        }
        let set = ((first_cmd >> txd::TSTAMP_REG_SHIFT) & 3) as usize;
        let (tx_lat, _) = latency_ns(self.port.link.speed.mbps());
        let exact = wrap_add_ns(self.tsync.phc.ns_at_instant(departure), -(tx_lat as i64));
        let ns = self.port.noise.tx(exact);
        if self.txs.latch(set, SysTime::from_ns(ns)) == Latch::Latched {
            if self.tsync.raise_txts() {
                self.port.stats.txts_held_by_quirk += 1;
            }
            self.update_ts(host);
        }
    }

    fn rx_stamp(&mut self, arrival: u64, _data: &[u8]) -> RxStamp {
        if !self.rx_stamps() {
            return RxStamp::None;
        }
        let (_, rx_lat) = latency_ns(self.port.link.speed.mbps());
        let exact = wrap_add_ns(self.tsync.phc.ns_at_instant(arrival), rx_lat as i64);
        let t = SysTime::from_ns(self.port.noise.rx(exact));
        // Dwords 0-1: the TIMER1SEL timer, 2-3: the TIMER0SEL timer (§8.1).
        let sel = self.port.regs.get(srrctl(0));
        let mut h = [0u8; 16];
        for (i, k) in [1, 0].into_iter().enumerate() {
            let (nsec, sec) = if timer_sel(sel, k) == 0 {
                (t.nsec, t.sec)
            } else {
                (0, 0)
            };
            h[i * 8..i * 8 + 4].copy_from_slice(&nsec.to_le_bytes());
            h[i * 8 + 4..i * 8 + 8].copy_from_slice(&sec.to_le_bytes());
        }
        RxStamp::Header(h)
    }
}
