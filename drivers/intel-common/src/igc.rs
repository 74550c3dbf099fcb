//! i225/i226 (Linux `igc`): bring-up, the SYSTIM clock, and the "other" interrupt cause.
//! Section numbers refer to `shared/reference/intel-timesync.md`.

use std::time::Duration;

use intel_regs::ids::{self, Part};
use intel_regs::igc::{
    self as r, IntCause, RxStatus, RxTsType, Status, TsCause, Tsauxc, TsyncRxCtl, TsyncTxCtl, reg,
    timadj, timinca, txd,
};
use ptp_pci::Mmio;

use ptp_ipc::RxFilter;

use crate::clock::ClockHw;
use crate::family::{Causes, Family, IrqLayout};
pub use crate::family::{Link, RxFrame, keeps_rx_stamp};
use crate::family::{in_buffer_rx_frame, sec_ns, split_ts_header};
use crate::mac::{self, MacRegs};
use crate::ring::{RxRing, TxRing};
use crate::txts::TsRegs;
use crate::{HwError, Regs};

pub use crate::family::{VECTOR_OTHER, VECTOR_QUEUES, VECTORS};

/// Where the i225's MAC registers differ from igb's (§6, §10.1).
pub const MAC: MacRegs = MacRegs {
    icr: reg::ICR,
    ims: reg::IMS,
    imc: reg::IMC,
    rxq: r::rdbal(0),
    txq: r::tdbal(0),
};

/// Identifies the part behind `vendor:device`.
pub fn probe(vendor: u16, device: u16) -> Result<&'static Part, HwError> {
    ids::igc_part(vendor, device).ok_or(HwError::UnsupportedDevice { vendor, device })
}

/// The MAC address the NVM preloaded into RAL0/RAH0 (§10.1).
pub fn read_mac<M: Mmio>(regs: &Regs<M>) -> [u8; 6] {
    mac::read_mac(regs)
}

/// Decodes STATUS (§10.1) as Linux's igc does (igc_mac.c: igc_get_speed_and_duplex_copper):
/// the i225 sets SPEED_1000 at both 1 and 2.5 Gb/s, and SPEED_2500 beside it only at 2.5 Gb/s,
/// so SPEED_2500 counts only under SPEED_1000. No speed bit means 10 Mb/s.
pub fn link_from_status(s: Status) -> Link {
    let speed_mbps = if s.contains(Status::SPEED_1000) {
        if s.contains(Status::SPEED_2500) {
            2500
        } else {
            1000
        }
    } else if s.contains(Status::SPEED_100) {
        100
    } else {
        10
    };
    Link {
        up: s.contains(Status::LU),
        speed_mbps,
    }
}

/// Resets the port and waits for the NVM auto-read, as `igc_reset_hw_base` (§10.2 step 1).
pub fn reset<M: Mmio>(regs: &Regs<M>) -> Result<(), HwError> {
    mac::reset(regs, &MAC)
}

/// Takes ownership from firmware and asks for link (§10.2 step 2). Returns the link state after
/// waiting at most `wait` for it (a missing cable is not an error: the link event comes later).
pub fn link_up<M: Mmio>(regs: &Regs<M>, wait: Duration) -> Link {
    link_from_status(mac::link_up(regs, wait))
}

/// MSI-X routing (§6): the "other" causes to [`VECTOR_OTHER`], auto-clear and auto-mask on it,
/// and link-state, DMA-out-of-sync and reset-asserted causes enabled.
pub fn enable_msix<M: Mmio>(regs: &Regs<M>) {
    mac::route_other_msix(regs, &MAC, VECTOR_OTHER);
}

/// The time-sync causes enabled in TSIM (§2.4): TX timestamps only. [`read_other_causes`]
/// relies on it being the only one.
pub const TSIM_ON: TsCause = TsCause::TXTS;

/// PTP reset as `igc_ptp_reset` (§5): timer 0 counting, no SDP routing, the TX-timestamp cause
/// enabled, the time restored to `now_ns`.
pub fn ptp_reset<M: Mmio>(regs: &Regs<M>, now_ns: u64) {
    regs.modify(r::TIMADJ, timadj::ADJUST_METH, 0);
    regs.set(reg::TSAUXC, Tsauxc::empty());
    regs.write(r::TSSDP, 0);
    regs.set(reg::TSIM, TSIM_ON);
    regs.update(reg::IMS, IntCause::TS, IntCause::empty());
    Igc.write(regs, now_ns.min(Igc.max_time_ns()));
}

/// The warm counterpart of [`ptp_reset`]: the TX-timestamp cause enabled, the timer left
/// running as it is.
pub fn ptp_rearm<M: Mmio>(regs: &Regs<M>) {
    regs.set(reg::TSIM, TSIM_ON);
    regs.update(reg::IMS, IntCause::TS, IntCause::empty());
}

/// How long [`warm_phc`] watches SYSTIM advance.
const WARM_PROBE: Duration = Duration::from_millis(20);
/// The rate SYSTIM may show against the host over the probe: the part's range (±62.5 ppm·10³)
/// plus 5 % for the probe reads' latency; the check is for a stopped or wild timer, not a
/// measurement.
const WARM_RATE_TOLERANCE: f64 = 0.0625 + 0.05;

/// Whether the PHC a previous driver left can be kept (§2.3, §4): timer 0 counting (TSAUXC
/// DISABLE0 clear), TX timestamping on (TSYNCTXCTL.ENABLED: a driver configured it; the
/// power-on value is 0), TIMINCA within the part's range, and SYSTIM advancing at a plausible
/// rate between two reads [`WARM_PROBE`] apart.
pub fn warm_phc<M: Mmio>(regs: &Regs<M>) -> Result<crate::family::WarmPhc, String> {
    let aux = regs.get(reg::TSAUXC);
    if aux.contains(Tsauxc::DISABLE0) {
        return Err(format!("timer 0 stopped (TSAUXC {:#010x})", aux.bits()));
    }
    let ctl = regs.get(reg::TSYNCTXCTL);
    if !ctl.contains(TsyncTxCtl::ENABLED) {
        return Err(format!(
            "TX timestamping off (TSYNCTXCTL {:#x}): no driver configured this PHC",
            ctl.bits()
        ));
    }
    let inca = regs.read(r::TIMINCA);
    let scaled_ppm = scaled_ppm_of_timinca(inca);
    if scaled_ppm.unsigned_abs() as u128 * 1000 > u128::from(r::MAX_ADJ_PPB) * 65536 {
        return Err(format!("TIMINCA {inca:#x} beyond the part's range"));
    }
    let read = || {
        let l = Igc.latch(regs);
        let host = ptp_ipc::time::mono_ns();
        (Igc.finish(regs, l), host)
    };
    let (a, ha) = read();
    std::thread::sleep(WARM_PROBE);
    let (b, hb) = read();
    let (dp, dh) = (b as f64 - a as f64, (hb - ha) as f64);
    let rate = dp / dh - 1.0;
    if rate.is_nan() || rate.abs() > WARM_RATE_TOLERANCE {
        return Err(format!(
            "SYSTIM moved {dp:.0} ns in {dh:.0} ns of host time: not a running clock"
        ));
    }
    Ok(crate::family::WarmPhc {
        phc_ns: b,
        scaled_ppm,
        measured_ppm: rate * 1e6,
        pending_tx: (ctl & TsyncTxCtl::TXTT_ANY).bits().count_ones(),
    })
}

/// The frequency offset a TIMINCA value holds, in `scaled_ppm` (the inverse of
/// [`timinca_for`], exact to one INCVALUE unit).
pub fn scaled_ppm_of_timinca(v: u32) -> i64 {
    let rate = i64::from(v & timinca::INCVALUE_MASK);
    let scaled = (rate * 78_125 + (1 << 13)) >> 14;
    if v & timinca::ISGN != 0 {
        -scaled
    } else {
        scaled
    }
}

/// Causes taken by one pass of the "other" interrupt handler.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct OtherCauses {
    pub icr: IntCause,
    /// The TSICR causes cleared when ICR.TS is set: [`TSIM_ON`], the only ones that raise it.
    pub tsicr: TsCause,
}

/// Takes the causes of the "other" vector: reads ICR (read-to-clear, also clears EICR's bit)
/// and, if ICR.TS, clears TSICR's enabled causes by writing 1 to them (§2.4). Re-arming is
/// [`rearm_other`], after the causes are handled.
///
/// ICR.TS is raised by `TSICR & TSIM`, and TSIM holds only [`TSIM_ON`], so a TSICR read would
/// tell nothing more; the write costs no round trip. It comes before the handler looks at the
/// stamp registers, so a stamp that lands after it raises TXTS again: not the read-then-write-
/// back the Feb 2024 fixes removed, which cleared causes that came between the two.
pub fn read_other_causes<M: Mmio>(regs: &Regs<M>) -> OtherCauses {
    read_other_causes_with(regs, TsCause::empty())
}

/// [`read_other_causes`] with the pins' causes `pins` enabled too: then TSICR is read (which
/// clears it, §2.4, no write-back), since which of the causes came matters.
pub fn read_other_causes_with<M: Mmio>(regs: &Regs<M>, pins: TsCause) -> OtherCauses {
    let icr_v = regs.get(reg::ICR);
    let tsicr = match (icr_v.contains(IntCause::TS), pins.is_empty()) {
        (false, _) => TsCause::empty(),
        (true, true) => {
            regs.set(reg::TSICR, TSIM_ON);
            TSIM_ON
        }
        (true, false) => regs.get(reg::TSICR),
    };
    OtherCauses { icr: icr_v, tsicr }
}

/// Re-enables the "other" vector (it was auto-masked by EIAM when it fired).
pub fn rearm_other<M: Mmio>(regs: &Regs<M>) {
    regs.write(r::EIMS, 1 << VECTOR_OTHER);
}

/// The i225 SYSTIM clock: SYSTIML holds nanoseconds and latches SYSTIMH (seconds) when read
/// ("igc: Remove references to SYSTIMR register", §3).
#[derive(Debug, Clone, Copy, Default)]
pub struct Igc;

const NS_PER_S: u64 = 1_000_000_000;

impl ClockHw for Igc {
    type Latch = u32;

    fn max_adj_ppb(&self) -> u32 {
        r::MAX_ADJ_PPB
    }

    fn max_time_ns(&self) -> u64 {
        (u32::MAX as u64) * NS_PER_S + (NS_PER_S - 1)
    }

    #[inline]
    fn latch<M: Mmio>(&self, regs: &Regs<M>) -> u32 {
        regs.read(r::SYSTIML)
    }

    #[inline]
    fn finish<M: Mmio>(&self, regs: &Regs<M>, ns: u32) -> u64 {
        let s = regs.read(r::SYSTIMH) as u64;
        s * NS_PER_S + ns as u64
    }

    fn write<M: Mmio>(&self, regs: &Regs<M>, ns: u64) {
        // L then H: the pair takes effect on the H write (§5, settime64).
        regs.write(r::SYSTIML, (ns % NS_PER_S) as u32);
        regs.write(r::SYSTIMH, (ns / NS_PER_S) as u32);
    }

    fn set_freq<M: Mmio>(&self, regs: &Regs<M>, scaled_ppm: i64) {
        regs.write(r::TIMINCA, timinca_for(scaled_ppm));
    }
}

/// TIMINCA for a frequency offset (§4): INCVALUE = (|scaled_ppm| << 14) / 78125 in units of
/// 2^-32 ns per 3.2 ns tick, ISGN set to slow down. Callers range-check against MAX_ADJ_PPB, so
/// the shift cannot overflow.
pub fn timinca_for(scaled_ppm: i64) -> u32 {
    let rate = ((scaled_ppm.unsigned_abs()) << 14) / 78_125;
    let mut v = (rate as u32) & timinca::INCVALUE_MASK;
    if scaled_ppm < 0 {
        v |= timinca::ISGN;
    }
    v
}

/// The four TX timestamp sets of i225/i226 (§7.4) and the TXSTMPH_0 interrupt-clear bug (§7.2).
pub const TS_REGS: TsRegs = TsRegs {
    ctl: reg::TSYNCTXCTL,
    low: &r::TXSTMPL,
    high: &r::TXSTMPH,
    txstmph0_quirk: true,
    h0_clears_all: true,
    format: crate::txts::StampFormat::SecNs,
    probe_low: true,
};

/// TSYNCTXCTL to enable TX timestamping: ENABLED | TXSYNSIG (igc writes 0x30, §2.1).
pub const TSYNCTXCTL_ON: TsyncTxCtl = TsyncTxCtl::ENABLED.union(TsyncTxCtl::TXSYNSIG);

/// Descriptor bits that ask for a timestamp in `set` (§7.1: MAC_TSTAMP, TSTAMP_REG b17:16).
pub fn tx_tstamp_cmd(set: u8) -> u32 {
    txd::MAC_TSTAMP | ((set as u32 & 3) << txd::TSTAMP_REG_SHIFT)
}

/// Programs TX queue 0 over `ring` and enables the transmitter (§10.2 step 3).
pub fn setup_tx<M: Mmio>(regs: &Regs<M>, ring: &TxRing) {
    mac::setup_tx(regs, &MAC, ring);
}

/// Programs RX queue 0 over `ring` and enables the receiver (§10.2 step 4).
pub fn setup_rx<M: Mmio>(regs: &Regs<M>, ring: &RxRing) {
    mac::setup_rx(regs, &MAC, ring);
}

/// Routes queue 0's RX and TX causes to [`VECTOR_QUEUES`] (IVAR0 entry 0, §6) with auto-clear
/// and auto-mask, and enables it.
pub fn enable_queue_irqs<M: Mmio>(regs: &Regs<M>) {
    mac::route_queue_msix(regs, VECTOR_QUEUES);
}

/// Re-enables the queue vector after its work is done.
pub fn rearm_queues<M: Mmio>(regs: &Regs<M>) {
    regs.write(r::EIMS, 1 << VECTOR_QUEUES);
}

/// The ICR causes a single-vector or polled driver enables: the "other" causes of
/// [`enable_msix`] plus queue 0's RX and TX write-backs (the time-sync cause is added by
/// [`ptp_reset`]).
pub const SHARED_CAUSES: IntCause = IntCause::LSC
    .union(IntCause::DOUTSYNC)
    .union(IntCause::DRSTA)
    .union(IntCause::RXT0)
    .union(IntCause::TXDW);

/// One MSI-X vector for every cause (§6): MSI-X mode, the "other" causes (IVAR_MISC) and
/// queue 0's RX and TX causes (IVAR0) all on vector 0, auto-cleared and auto-masked.
pub fn enable_single_msix<M: Mmio>(regs: &Regs<M>) {
    mac::route_other_msix(regs, &MAC, 0);
    mac::route_queue_msix(regs, 0);
}

/// Re-enables the single MSI-X vector of [`enable_single_msix`].
pub fn rearm_single_msix<M: Mmio>(regs: &Regs<M>) {
    regs.write(r::EIMS, 1);
}

/// MSI, a legacy line, or no interrupt at all (polled): no MSI-X mode, every cause in ICR
/// (read-to-clear), enabled in IMS, so one ICR read per pass sees them all.
pub fn enable_shared_irqs<M: Mmio>(regs: &Regs<M>) {
    mac::route_shared(regs, &MAC, SHARED_CAUSES);
}

/// The TSYNCRXCTL type for a requested RX filter. The i225 has one documented type, ALL
/// (intel-timesync.md §2.2; Linux igc_ptp.c igc_ptp_set_timestamp_mode programs ALL for every
/// request): the part stamps every frame and the driver keeps the stamps of the frames the
/// request covers (see [`keeps_rx_stamp`]). PTPv1 is refused.
pub fn rx_filter_type(filter: RxFilter) -> Result<Option<RxTsType>, HwError> {
    Ok(match filter {
        RxFilter::None => None,
        RxFilter::All
        | RxFilter::PtpV2Event
        | RxFilter::PtpV2L4Event
        | RxFilter::PtpV2L2Event
        | RxFilter::PtpV2L2Sync
        | RxFilter::PtpV2L2DelayReq
        | RxFilter::PtpV2L4Sync
        | RxFilter::PtpV2L4DelayReq => Some(RxTsType::All),
        RxFilter::PtpV1L4Event => return Err(HwError::Unsupported("PTPv1 RX timestamping")),
    })
}

/// Applies an RX filter without touching the link or the rings (§8.1 enable/disable order):
/// reconfiguring timestamping never takes the link down (seed 003).
pub fn apply_rx_filter<M: Mmio>(regs: &Regs<M>, filter: RxFilter) -> Result<(), HwError> {
    let on = rx_filter_type(filter)?
        .map(|ty| (TsyncRxCtl::ENABLED | TsyncRxCtl::RXSYNSIG).with_rx_type(ty));
    mac::in_buffer_rx_stamps(regs, &MAC, on, true);
    Ok(())
}

/// Classifies one received buffer: strips the timestamp header, keeps the stamp only when
/// `filter` asks for this frame, and subtracts the RX latency of the link (§8.4).
pub fn rx_frame(filter: RxFilter, status: RxStatus, buf: &[u8], rx_latency_ns: u64) -> RxFrame<'_> {
    in_buffer_rx_frame(filter, status, buf, rx_latency_ns, sec_ns)
}

/// Splits a received buffer into (timer-0 stamp in ns, frame) when the write-back says the
/// device put a timestamp header in front (TSIP, §8.1: dwords 2–3 = timer 0 ns, s).
pub fn split_rx_stamp(status: RxStatus, buf: &[u8]) -> (Option<u64>, &[u8]) {
    if !status.contains(RxStatus::TSIP) || buf.len() < r::TS_HDR_LEN {
        return (None, buf);
    }
    let (raw, frame) = split_ts_header(status, buf);
    (raw.map(sec_ns), frame)
}

/// The i225/i226 as a [`Family`]: four TX sets with the TXSTMPH_0 quirk, s:ns SYSTIM latched
/// by SYSTIML, stamps in the RX buffer, a TXTS interrupt, the igc latency table.
impl Family for Igc {
    type Clock = Igc;
    const DAEMON: &'static str = "igcd";
    const SHORT: &'static str = "igc";
    const MODELS: &'static [&'static str] = &["i225", "i226"];
    const MAX_TX_SETS: u8 = 4;

    fn probe(vendor: u16, device: u16) -> Result<(&'static Part, Self), HwError> {
        Ok((probe(vendor, device)?, Igc))
    }
    fn clock(&self) -> Igc {
        Igc
    }
    fn mac_regs(&self) -> MacRegs {
        MAC
    }
    fn link_from_status(&self, status: Status) -> Link {
        link_from_status(status)
    }
    fn shared_causes(&self) -> IntCause {
        SHARED_CAUSES
    }
    fn read_causes<M: Mmio>(&self, regs: &Regs<M>, pins: TsCause) -> Causes {
        let c = read_other_causes_with(regs, pins);
        Causes {
            time_sync: c.icr.contains(IntCause::TS),
            tx_stamp: c.tsicr.contains(TsCause::TXTS),
            tsicr: c.tsicr,
            link: c.icr.contains(IntCause::LSC),
            other: c.icr.intersects(OTHER_CAUSES),
            any: c.icr.intersects(SHARED_CAUSES | IntCause::TS),
        }
    }
    fn kick<M: Mmio>(&self, _regs: &Regs<M>, _layout: IrqLayout) {
        // TX stamps raise TXTS: nothing to wake by hand.
    }
    fn ptp_reset<M: Mmio>(&self, regs: &Regs<M>, now_ns: u64) {
        ptp_reset(regs, now_ns)
    }
    fn warm_phc<M: Mmio>(&self, regs: &Regs<M>) -> Result<crate::family::WarmPhc, String> {
        warm_phc(regs)
    }
    fn ptp_rearm<M: Mmio>(&self, regs: &Regs<M>) {
        ptp_rearm(regs)
    }
    fn ts_regs(&self) -> TsRegs {
        TS_REGS
    }
    fn tsynctxctl_on(&self) -> TsyncTxCtl {
        TSYNCTXCTL_ON
    }
    fn tx_tstamp_cmd(&self, set: u8) -> u32 {
        tx_tstamp_cmd(set)
    }
    fn has_tx_ts_irq(&self) -> bool {
        true
    }
    fn gate_tx_stamp_irq<M: Mmio>(&self, regs: &Regs<M>, open: bool, pins: TsCause) {
        regs.set(reg::TSIM, if open { TSIM_ON | pins } else { pins });
    }
    fn clear_tx_stamp_cause<M: Mmio>(&self, regs: &Regs<M>) -> TsCause {
        // Write-1-to-clear, as `read_other_causes` does (§2.4): no read, no other cause taken.
        regs.set(reg::TSICR, TSIM_ON);
        TsCause::empty()
    }
    fn has_pins(&self) -> bool {
        true
    }
    fn tx_stamp_ns(&self, raw: u64) -> u64 {
        raw
    }
    fn rx_filters(&self) -> &'static [RxFilter] {
        &[
            RxFilter::None,
            RxFilter::All,
            RxFilter::PtpV2Event,
            RxFilter::PtpV2L2Event,
            RxFilter::PtpV2L4Event,
            RxFilter::PtpV2L2Sync,
            RxFilter::PtpV2L2DelayReq,
            RxFilter::PtpV2L4Sync,
            RxFilter::PtpV2L4DelayReq,
        ]
    }
    fn check_rx_filter(&self, filter: RxFilter) -> Result<(), HwError> {
        rx_filter_type(filter).map(|_| ())
    }
    fn apply_rx_filter<M: Mmio>(&self, regs: &Regs<M>, filter: RxFilter) -> Result<(), HwError> {
        apply_rx_filter(regs, filter)
    }
    fn rx_frame<'a, M: Mmio>(
        &self,
        _regs: &Regs<M>,
        filter: RxFilter,
        status: RxStatus,
        buf: &'a [u8],
        rx_latency_ns: u64,
    ) -> RxFrame<'a> {
        rx_frame(filter, status, buf, rx_latency_ns)
    }
    fn latency_ns(&self, speed_mbps: u32) -> (u64, u64) {
        let (tx, rx) = r::latency_ns(speed_mbps);
        (tx as u64, rx as u64)
    }
}

/// ICR causes of the "other" vector (enabled by [`enable_msix`] and [`ptp_reset`]).
const OTHER_CAUSES: IntCause = IntCause::LSC
    .union(IntCause::TS)
    .union(IntCause::DOUTSYNC)
    .union(IntCause::DRSTA);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timinca_matches_linux_formula() {
        // +1 ppm = 65536 scaled_ppm: (65536 << 14) / 78125 = 13743.
        assert_eq!(timinca_for(65_536), 13_743);
        assert_eq!(timinca_for(-65_536), 13_743 | timinca::ISGN);
        assert_eq!(timinca_for(0), 0);
        // max_adj stays below the sign bit.
        let max = crate::clock::ppb_to_scaled_ppm(r::MAX_ADJ_PPB as f64);
        assert_eq!(timinca_for(max) & timinca::ISGN, 0);
    }

    #[test]
    fn status_decodes_speed() {
        // The part at 2.5 Gb/s: SPEED_1000 and SPEED_2500 together.
        assert_eq!(
            link_from_status(Status::LU | Status::SPEED_1000 | Status::SPEED_2500),
            Link {
                up: true,
                speed_mbps: 2500
            }
        );
        assert_eq!(
            link_from_status(Status::LU | Status::SPEED_1000).speed_mbps,
            1000
        );
        assert_eq!(
            link_from_status(Status::LU | Status::SPEED_100).speed_mbps,
            100
        );
        // SPEED_2500 without SPEED_1000 is not a 2.5 Gb/s link to Linux's igc: it reads 10.
        assert_eq!(
            link_from_status(Status::LU | Status::SPEED_2500).speed_mbps,
            10
        );
        assert_eq!(link_from_status(Status::empty()).speed_mbps, 10);
        assert!(!link_from_status(Status::SPEED_1000).up);
    }

    #[test]
    fn every_rx_filter_programs_type_all() {
        for f in [
            RxFilter::All,
            RxFilter::PtpV2Event,
            RxFilter::PtpV2L4Event,
            RxFilter::PtpV2L2Event,
        ] {
            assert_eq!(rx_filter_type(f).unwrap(), Some(RxTsType::All), "{f:?}");
        }
        assert_eq!(rx_filter_type(RxFilter::None).unwrap(), None);
        assert!(rx_filter_type(RxFilter::PtpV1L4Event).is_err());
    }

    #[test]
    fn probe_names_parts() {
        assert_eq!(probe(0x8086, 0x125B).unwrap().name, "Intel i226-LM");
        assert!(matches!(
            probe(0x8086, 0x1533),
            Err(HwError::UnsupportedDevice { .. })
        ));
    }
}
