//! i210/i211, i350/i354 and 82576 (Linux `igb`) as one [`Family`] whose behaviour follows the
//! MAC ([`Mac`]). Section numbers refer to `shared/reference/intel-timesync.md`.
//!
//! What differs per MAC (§3, §4, §7.5, §8):
//! - i210/i211: SYSTIM is s:ns latched by the SYSTIMR read; written directly; stamps in s:ns;
//!   RX stamps in the buffer; TXTS interrupt; latency compensated.
//! - i350: a 40-bit ns counter latched by SYSTIMR, extended to 64-bit ns by a software
//!   [`TimeCounter`] (settime and adjtime never write SYSTIM, as Linux); RX stamps in the buffer;
//!   TXTS interrupt.
//! - 82576: a 64-bit cycle counter (ns << 19, TIMINCA IncPeriod/IncValue) latched by SYSTIML,
//!   through the same timecounter, which also carries the frequency (TIMINCA stays nominal:
//!   see [`IgbClock::set_freq`](crate::clock::ClockHw::set_freq)); no TX stamp interrupt (the daemon's time-sync thread polls
//!   TSYNCTXCTL.VALID while a stamp is pending); RX stamps only in RXSTMPL/H, one latch held
//!   until RXSTMPH is read and owned by the frame whose descriptor has TS (as Linux igb), the
//!   lost ones counted.

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use intel_regs::ids::{self, Part};
use intel_regs::igb::{
    self as r, IntCause, RxStatus, RxTsType, Status, TsCause, Tsauxc, TsyncRxCtl, TsyncTxCtl, reg,
    timinca, txd,
};
use ptp_ipc::RxFilter;
use ptp_pci::Mmio;

use crate::clock::ClockHw;
use crate::family::VECTOR_OTHER;
use crate::family::{
    Causes, Family, IrqLayout, Link, RxFrame, in_buffer_rx_frame, keeps_rx_stamp, sec_ns,
};
use crate::mac::{self, MacRegs};
use crate::txts::{StampFormat, TsRegs};
use crate::{HwError, Regs};

const NS_PER_S: u64 = 1_000_000_000;
/// An 82576 RX latch nobody claimed for this long is released (Linux igb_ptp_rx_hang: 5 s).
const RX_LATCH_HANG_NS: u64 = 5 * NS_PER_S;

/// The MAC behind an igb device.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mac {
    I210,
    I350,
    E82576,
}

impl Mac {
    fn of(part: &Part) -> Option<Self> {
        match part.family {
            ids::Family::I210 => Some(Mac::I210),
            ids::Family::I350 => Some(Mac::I350),
            ids::Family::I82576 => Some(Mac::E82576),
            ids::Family::Igc => None,
        }
    }

    /// How SYSTIM counts: (width mask, fraction bits below ns) for a timecounter MAC.
    fn counter(self) -> Option<(u64, u32)> {
        match self {
            Mac::I210 => None,
            Mac::I350 => Some(((1 << r::NBITS_82580) - 1, 0)),
            Mac::E82576 => Some((u64::MAX, timinca::TSYNC_SHIFT_82576)),
        }
    }
}

/// A timecounter's mapping from counter value to time: `count` reads as `fp` (ns · 2^`shift`),
/// and a later count `c` as `fp + (((c − count) mod (mask + 1)) · mult >> mult_shift)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimeCounterState {
    pub count: u64,
    pub fp: u128,
    pub mask: u64,
    pub shift: u32,
    /// The rate, as a fixed-point multiplier of 2^`mult_shift` (nominal).
    pub mult: u64,
    pub mult_shift: u32,
}

/// Fraction bits of a timecounter's rate multiplier: 2^-40 ≈ 0.0009 ppb per unit, and an
/// advance of half the 82576's 64-bit count times the multiplier still fits in a u128.
pub const TC_MULT_SHIFT: u32 = 40;
/// The nominal multiplier.
pub const TC_MULT_NOMINAL: u64 = 1 << TC_MULT_SHIFT;

/// The multiplier for a frequency offset in Linux `scaled_ppm` (ppm · 2^16): 2^40 · (1 +
/// scaled_ppm / (2^16 · 10^6)) = 2^40 + scaled_ppm · 2^24 / 10^6, rounded to nearest.
pub fn tc_mult_for(scaled_ppm: i64) -> u64 {
    let d = i128::from(scaled_ppm) << 24;
    let adj = (d + d.signum() * 500_000) / 1_000_000;
    (i128::from(TC_MULT_NOMINAL) + adj).clamp(1, i128::from(u64::MAX)) as u64
}

/// Receives every change of a timecounter's mapping: runs the change it is given (which
/// returns the new mapping) as one update of what it publishes.
pub type TimeCounterSink = dyn Fn(&mut dyn FnMut() -> TimeCounterState) + Send + Sync;

static TIMECOUNTER_SINK: std::sync::OnceLock<Box<TimeCounterSink>> = std::sync::OnceLock::new();

/// Publishes every timecounter of this process through `sink` from now on: an emulated
/// daemon's ground truth (`--truth`), since the clock ptpd reads on i350/82576 is the
/// timecounter, not SYSTIM. One sink per process (a daemon drives one device); `false` if one
/// was set already.
pub fn publish_timecounters_to(sink: Box<TimeCounterSink>) -> bool {
    TIMECOUNTER_SINK.set(sink).is_ok()
}

/// The mutable part of a [`TimeCounter`].
#[derive(Debug, Clone, Copy)]
struct TcBase {
    /// The counter at the last reading.
    count: u64,
    /// ns · 2^shift then.
    fp: u128,
    /// The rate (see [`TimeCounterState::mult`]).
    mult: u64,
}

impl TcBase {
    /// The fixed-point time a counter advance of `delta` adds at the current rate.
    fn scaled(&self, delta: u64) -> u128 {
        (u128::from(delta) * u128::from(self.mult)) >> TC_MULT_SHIFT
    }
}

/// A software clock extending a hardware counter that wraps (Linux's timecounter, §3): time =
/// the ns at the last reading plus the counter's advance since, taken modulo its width and
/// scaled by the rate multiplier (the 82576's frequency, as Linux's cyclecounter `mult`;
/// nominal elsewhere). Kept in fixed point (ns · 2^shift) so that no fraction is lost between
/// readings. Must be read at least once per half wrap (the watchdog reads the clock every
/// 100 ms; the shortest wrap, i350's, is 18 min).
#[derive(Debug)]
pub struct TimeCounter {
    mask: u64,
    shift: u32,
    state: Mutex<TcBase>,
}

impl TimeCounter {
    /// A counter of `mask + 1` values, each 2^-shift ns; time 0 at count 0 until [`Self::set`].
    pub fn new(mask: u64, shift: u32) -> Self {
        Self {
            mask,
            shift,
            state: Mutex::new(TcBase {
                count: 0,
                fp: 0,
                mult: TC_MULT_NOMINAL,
            }),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, TcBase> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// From now on `count` reads as `ns` (settime, and every step).
    pub fn set(&self, count: u64, ns: u64) {
        let (mask, shift) = (self.mask, self.shift);
        self.update(|g| {
            g.count = count & mask;
            g.fp = u128::from(ns) << shift;
        });
    }

    /// Moves the time by `delta_ns` (Linux timecounter_adjtime); the counter is untouched.
    pub fn adjust(&self, delta_ns: i64) {
        let d = (delta_ns.unsigned_abs() as u128) << self.shift;
        self.update(|g| {
            g.fp = if delta_ns < 0 {
                g.fp.saturating_sub(d)
            } else {
                g.fp.saturating_add(d)
            }
        });
    }

    /// Takes a fresh counter reading: advances the base and returns the time in ns.
    pub fn read(&self, count: u64) -> u64 {
        let (mask, shift) = (self.mask, self.shift);
        self.update(|g| {
            Self::advance(g, count, mask);
            (g.fp >> shift) as u64
        })
    }

    /// Changes the rate at counter reading `count`: the time up to it accumulates at the old
    /// rate, so the clock never steps (as Linux's timecounter_read before a `mult` change).
    pub fn set_rate(&self, count: u64, mult: u64) {
        let mask = self.mask;
        self.update(|g| {
            Self::advance(g, count, mask);
            g.mult = mult.max(1);
        });
    }

    /// The current rate multiplier.
    pub fn mult(&self) -> u64 {
        self.lock().mult
    }

    fn advance(g: &mut TcBase, count: u64, mask: u64) {
        let delta = count.wrapping_sub(g.count) & mask;
        g.fp = g.fp.wrapping_add(g.scaled(delta));
        g.count = count & mask;
    }

    /// Applies `f` to the state under the lock, inside the process's [`TimeCounterSink`]'s
    /// update when there is one, so the published mapping changes exactly with this one.
    fn update<R: Default>(&self, f: impl FnOnce(&mut TcBase) -> R) -> R {
        let mut g = self.lock();
        let Some(sink) = TIMECOUNTER_SINK.get() else {
            return f(&mut g);
        };
        let (mask, shift) = (self.mask, self.shift);
        let (mut f, mut out) = (Some(f), R::default());
        sink(&mut || {
            if let Some(f) = f.take() {
                out = f(&mut g);
            }
            TimeCounterState {
                count: g.count,
                fp: g.fp,
                mask,
                shift,
                mult: g.mult,
                mult_shift: TC_MULT_SHIFT,
            }
        });
        // A sink that did not run the change: apply it anyway.
        if let Some(f) = f.take() {
            out = f(&mut g);
        }
        out
    }

    /// The time of a stamp `count` (TX or RX) without moving the base: a count up to half a wrap
    /// behind the last reading is taken as earlier, not as a wrap ahead (stamps are usually
    /// older than the last clock read).
    pub fn to_ns(&self, count: u64) -> u64 {
        let g = self.lock();
        let ahead = count.wrapping_sub(g.count) & self.mask;
        let fp = if ahead > self.mask / 2 {
            let behind = g.count.wrapping_sub(count) & self.mask;
            g.fp.saturating_sub(g.scaled(behind))
        } else {
            g.fp + g.scaled(ahead)
        };
        (fp >> self.shift) as u64
    }
}

/// The SYSTIM clock of an igb MAC. `tc` is shared with the family, which converts stamps
/// through it.
#[derive(Debug, Clone)]
pub struct IgbClock {
    mac: Mac,
    tc: Option<std::sync::Arc<TimeCounter>>,
}

impl IgbClock {
    /// The raw SYSTIM count from a latched (L, H) pair.
    fn count(&self, l: u32, h: u32) -> u64 {
        match self.mac {
            Mac::I350 => ((h as u64 & 0xFF) << 32) | l as u64,
            _ => ((h as u64) << 32) | l as u64,
        }
    }
}

impl IgbClock {
    /// 82576 frequency in software, as a Linux cyclecounter's `mult`: the counter is read and
    /// the timecounter re-based at the new rate in one step. Unlike a TIMINCA write this never
    /// steps the clock — QEMU 10's model rebases SYSTIM with the wrong sign at every TIMINCA
    /// write (2^41 ns when IncValue shrinks; see emu/src/igb.rs) — and it has no quantum (the
    /// part's IncValue step is 2^-19 ns per 16 ns, 119 ppb; 2^-40 here).
    fn set_rate_82576<M: Mmio>(&self, regs: &Regs<M>, tc: &TimeCounter, scaled_ppm: i64) {
        let l = regs.read(r::SYSTIML);
        let h = regs.read(r::SYSTIMH);
        tc.set_rate(self.count(l, h), tc_mult_for(scaled_ppm));
    }
}

impl ClockHw for IgbClock {
    /// SYSTIML when the SYSTIML read is the latch (82576); `None` after a SYSTIMR latch.
    type Latch = Option<u32>;

    fn max_adj_ppb(&self) -> u32 {
        match self.mac {
            Mac::E82576 => r::MAX_ADJ_PPB_82576,
            _ => r::MAX_ADJ_PPB_I210,
        }
    }

    fn max_time_ns(&self) -> u64 {
        match self.mac {
            Mac::I210 => u32::MAX as u64 * NS_PER_S + (NS_PER_S - 1),
            // The timecounter's 64-bit ns.
            _ => u64::MAX >> 1,
        }
    }

    fn latch<M: Mmio>(&self, regs: &Regs<M>) -> Option<u32> {
        match self.mac {
            // "Latches on lowest register read": SYSTIMR on 82580 and later (§3).
            Mac::I210 | Mac::I350 => {
                let _ = regs.read(r::SYSTIMR);
                None
            }
            Mac::E82576 => Some(regs.read(r::SYSTIML)),
        }
    }

    fn finish<M: Mmio>(&self, regs: &Regs<M>, latch: Option<u32>) -> u64 {
        let l = latch.unwrap_or_else(|| regs.read(r::SYSTIML));
        let h = regs.read(r::SYSTIMH);
        match &self.tc {
            None => h as u64 * NS_PER_S + l as u64,
            Some(tc) => tc.read(self.count(l, h)),
        }
    }

    fn write<M: Mmio>(&self, regs: &Regs<M>, ns: u64) {
        match &self.tc {
            None => {
                // L then H: the H write commits the pair.
                regs.write(r::SYSTIML, (ns % NS_PER_S) as u32);
                regs.write(r::SYSTIMH, (ns / NS_PER_S) as u32);
            }
            // Software time: the counter runs on, the timecounter is re-based (Linux
            // timecounter_init).
            Some(tc) => {
                let latch = self.latch(regs);
                let l = latch.unwrap_or_else(|| regs.read(r::SYSTIML));
                let h = regs.read(r::SYSTIMH);
                tc.set(self.count(l, h), ns);
            }
        }
    }

    /// i210/i350: TIMINCA. 82576: the timecounter's rate, TIMINCA staying nominal (see
    /// [`IgbClock::set_rate_82576`]).
    fn set_freq<M: Mmio>(&self, regs: &Regs<M>, scaled_ppm: i64) {
        match (&self.tc, self.mac) {
            (Some(tc), Mac::E82576) => self.set_rate_82576(regs, tc, scaled_ppm),
            _ => regs.write(r::TIMINCA, timinca_for(self.mac, scaled_ppm)),
        }
    }

    /// i350/82576: the timecounter moves, SYSTIM runs on (Linux igb_ptp_adjtime_82576).
    fn step_exact(&self, delta_ns: i64) -> bool {
        self.tc.as_ref().map(|tc| tc.adjust(delta_ns)).is_some()
    }
}

/// TIMINCA for a frequency offset (§4). i210/i350: INCVALUE = (|scaled_ppm| << 13) / 15625
/// (2^-32 ns per 8 ns tick), ISGN to slow down. 82576: IncPeriod 1 and IncValue = 16 << 19
/// ± (ppb << 14) / 1953125, ppb = scaled_ppm · 1000 / 2^16 rounded as Linux's
/// scaled_ppm_to_ppb. Callers range-check against max_adj, so nothing overflows.
pub fn timinca_for(mac: Mac, scaled_ppm: i64) -> u32 {
    match mac {
        Mac::I210 | Mac::I350 => {
            let rate = (scaled_ppm.unsigned_abs() << 13) / 15_625;
            let mut v = rate as u32 & timinca::INCVALUE_MASK;
            if scaled_ppm < 0 {
                v |= timinca::ISGN;
            }
            v
        }
        Mac::E82576 => {
            let ppb = ((1 + scaled_ppm as i128) * 125) >> 13;
            let rate = ((ppb.unsigned_abs()) << 14) / 1_953_125;
            let base = timinca::INCVALUE_82576 as i128;
            let inc = if ppb < 0 {
                base - rate as i128
            } else {
                base + rate as i128
            };
            timinca::INCPERIOD_82576 | (inc as u32 & timinca::INCVALUE_MASK_82576)
        }
    }
}

/// The internal PHY's MDIC address on igb parts (Linux e1000_82575.c: phy.addr = 1; QEMU's
/// model answers no other).
const PHY_ADDR: u32 = 1;
/// PHY register 0 (BMCR) bits: AUTO_NEG_EN (b12), RESTART_AUTO_NEG (b9).
const BMCR_AUTO_NEG: u32 = (1 << 12) | (1 << 9);
/// Linux waits up to 1920 × 50 µs for an MDIC cycle (e1000_read_phy_reg_mdic).
const MDIC_TIMEOUT: Duration = Duration::from_millis(100);

/// One MDIC cycle on [`PHY_ADDR`]: the data read (or written).
fn mdic<M: Mmio>(regs: &Regs<M>, reg: u32, op: u32, data: u32) -> Result<u32, HwError> {
    use intel_regs::igb::mdic as m;
    let cmd = (data & m::DATA_MASK) | (reg << m::REG_SHIFT) | (PHY_ADDR << m::PHY_SHIFT) | op;
    regs.write(r::MDIC, cmd);
    let v = regs.poll(
        "MDIC ready",
        r::MDIC,
        m::READY,
        m::READY,
        MDIC_TIMEOUT,
        Duration::from_micros(50),
    )?;
    if v & m::ERROR != 0 {
        return Err(HwError::Unsupported(
            "MDIC cycle ended with ERROR (no PHY at address 1)",
        ));
    }
    Ok(v & m::DATA_MASK)
}

/// BMCR |= AUTO_NEG_EN | RESTART_AUTO_NEG.
fn restart_autoneg<M: Mmio>(regs: &Regs<M>) -> Result<(), HwError> {
    use intel_regs::igb::mdic as m;
    let bmcr = mdic(regs, 0, m::OP_READ, 0)?;
    mdic(regs, 0, m::OP_WRITE, bmcr | BMCR_AUTO_NEG).map(drop)
}

/// One igb port: the MAC, its timecounter (i350, 82576) and the 82576 RX latch bookkeeping.
#[derive(Debug, Clone)]
pub struct Igb {
    mac: Mac,
    tc: Option<std::sync::Arc<TimeCounter>>,
    rx: std::sync::Arc<RxLatch>,
}

/// 82576 register-mode RX stamps: how many were lost, and since when a latch is held with no
/// frame claiming it.
#[derive(Debug, Default)]
struct RxLatch {
    lost: AtomicU64,
    /// Stamps whose RXSATRH sequenceId was not the frame's (kept; see rx_frame_82576).
    seq_disagreed: AtomicU64,
    held_since: Mutex<Option<u64>>,
}

impl Igb {
    /// The family for `mac`.
    pub fn new(mac: Mac) -> Self {
        let tc = mac
            .counter()
            .map(|(mask, shift)| std::sync::Arc::new(TimeCounter::new(mask, shift)));
        Self {
            mac,
            tc,
            rx: Default::default(),
        }
    }

    pub fn mac(&self) -> Mac {
        self.mac
    }

    /// A raw count (i350, 82576) or s:ns value (i210) in PHC ns.
    fn raw_to_ns(&self, raw: u64) -> u64 {
        match &self.tc {
            None => sec_ns(raw),
            Some(tc) => {
                let mask = if self.mac == Mac::I350 {
                    (1 << r::NBITS_82580) - 1
                } else {
                    u64::MAX
                };
                tc.to_ns(raw & mask)
            }
        }
    }
}

/// Identifies an igb part.
pub fn probe(vendor: u16, device: u16) -> Result<&'static Part, HwError> {
    ids::igb_part(vendor, device).ok_or(HwError::UnsupportedDevice { vendor, device })
}

/// Decodes STATUS: SPEED_1000, SPEED_100, else 10 Mb/s.
pub fn link_from_status(s: Status) -> Link {
    let speed_mbps = if s.contains(Status::SPEED_1000) {
        1000
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

/// The ICR causes a single-vector or polled driver enables (RXDMT0: the cause [`Family::kick`]
/// raises through ICS).
const SHARED_CAUSES: IntCause = IntCause::LSC
    .union(IntCause::DOUTSYNC)
    .union(IntCause::DRSTA)
    .union(IntCause::RXT0)
    .union(IntCause::TXDW)
    .union(IntCause::RXDMT0);
/// ICR causes of the "other" vector.
const OTHER_CAUSES: IntCause = IntCause::LSC
    .union(IntCause::TS)
    .union(IntCause::DOUTSYNC)
    .union(IntCause::DRSTA);
/// Where the igb MAC registers differ from igc's: the e1000 ICR block and queue offsets (§6,
/// e1000_regs.h).
const MAC: MacRegs = MacRegs {
    icr: reg::ICR,
    ims: reg::IMS,
    imc: reg::IMC,
    rxq: r::rdbal(0),
    txq: r::tdbal(0),
};

fn ts_regs(format: StampFormat) -> TsRegs {
    TsRegs {
        ctl: reg::TSYNCTXCTL,
        low: &r::TXSTMPL_SETS,
        high: &r::TXSTMPH_SETS,
        txstmph0_quirk: false,
        h0_clears_all: false,
        format,
        // Linux's igb reads the pair only once VALID is set, and the reference says nothing of
        // TXSTMPL without it on these parts: keep to the valid bit.
        probe_low: false,
    }
}

impl Family for Igb {
    type Clock = IgbClock;
    const DAEMON: &'static str = "igbd";
    const SHORT: &'static str = "igb";
    const MODELS: &'static [&'static str] = &["i210", "i211", "i350", "82576"];
    const MAX_TX_SETS: u8 = 1;

    fn probe(vendor: u16, device: u16) -> Result<(&'static Part, Self), HwError> {
        let part = probe(vendor, device)?;
        let mac = Mac::of(part).ok_or(HwError::UnsupportedDevice { vendor, device })?;
        Ok((part, Igb::new(mac)))
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

    /// A missing EECD.AUTO_RD is tolerated, as Linux igb does ([`mac::reset_with`]).
    fn reset<M: Mmio>(&self, regs: &Regs<M>) -> Result<(), HwError> {
        mac::reset_with(regs, &MAC, false)
    }

    /// Restarts the PHY's autonegotiation first, as Linux igb's copper link setup ends
    /// (igb_copper_link_autoneg: PHY_CONTROL |= AUTO_NEG_EN | RESTART_AUTO_NEG). QEMU's 82576
    /// model (-device igb) clears STATUS.LU on CTRL.RST and sets it again only 500 ms after such
    /// a restart; our models keep the link and ignore the restart.
    fn link_up<M: Mmio>(&self, regs: &Regs<M>, wait: Duration) -> Link {
        if let Err(e) = restart_autoneg(regs) {
            log::warn!("PHY autonegotiation restart: {e}");
        }
        self.link_from_status(mac::link_up(regs, wait))
    }

    fn clock(&self) -> IgbClock {
        IgbClock {
            mac: self.mac,
            tc: self.tc.clone(),
        }
    }

    fn read_causes<M: Mmio>(&self, regs: &Regs<M>, pins: TsCause) -> Causes {
        let icr_v = regs.get(reg::ICR);
        // TSICR is read only on ICR.TS: the read clears it, no write-back (§2.4).
        let tsicr = if icr_v.contains(IntCause::TS) && (self.has_tx_ts_irq() || !pins.is_empty()) {
            regs.get(reg::TSICR)
        } else {
            TsCause::empty()
        };
        Causes {
            time_sync: icr_v.contains(IntCause::TS),
            tx_stamp: tsicr.contains(TsCause::TXTS),
            tsicr,
            link: icr_v.contains(IntCause::LSC),
            other: icr_v.intersects(OTHER_CAUSES),
            any: icr_v.intersects(SHARED_CAUSES | IntCause::TS),
        }
    }

    fn kick<M: Mmio>(&self, regs: &Regs<M>, layout: IrqLayout) {
        // As igb's watchdog raises its own vectors: EICS under MSI-X, ICS.RXDMT0 otherwise.
        match layout {
            IrqLayout::Split => regs.write(r::EICS, 1 << VECTOR_OTHER),
            IrqLayout::SingleMsix => regs.write(r::EICS, 1),
            IrqLayout::Shared => regs.set(reg::ICS, IntCause::RXDMT0),
        }
    }

    fn ptp_reset<M: Mmio>(&self, regs: &Regs<M>, now_ns: u64) {
        match self.mac {
            // The counter powers on stopped (TIMINCA 0): IncPeriod 1, IncValue 16 << 19.
            Mac::E82576 => regs.write(
                r::TIMINCA,
                timinca::INCPERIOD_82576 | timinca::INCVALUE_82576,
            ),
            // TSAUXC powers on with DISABLE0: SYSTIM counts only once it is cleared.
            Mac::I210 | Mac::I350 => {
                regs.set(reg::TSAUXC, Tsauxc::empty());
                regs.write(r::TSSDP, 0);
                regs.set(reg::TSIM, TsCause::TXTS);
                regs.update(reg::IMS, IntCause::TS, IntCause::empty());
            }
        }
        let clock = self.clock();
        clock.write(regs, now_ns.min(clock.max_time_ns()));
    }

    fn ts_regs(&self) -> TsRegs {
        ts_regs(match self.mac {
            Mac::I210 => StampFormat::SecNs,
            _ => StampFormat::Raw,
        })
    }

    fn tsynctxctl_on(&self) -> TsyncTxCtl {
        TsyncTxCtl::ENABLED
    }

    fn tx_tstamp_cmd(&self, _set: u8) -> u32 {
        // One pair: no set select bits.
        txd::MAC_TSTAMP
    }

    fn has_tx_ts_irq(&self) -> bool {
        self.mac != Mac::E82576
    }

    fn gate_tx_stamp_irq<M: Mmio>(&self, regs: &Regs<M>, open: bool, pins: TsCause) {
        if self.has_tx_ts_irq() {
            let on = if open {
                TsCause::TXTS
            } else {
                TsCause::empty()
            };
            regs.set(reg::TSIM, on | pins);
        }
    }

    fn clear_tx_stamp_cause<M: Mmio>(&self, regs: &Regs<M>) -> TsCause {
        if !self.has_tx_ts_irq() {
            return TsCause::empty();
        }
        // igb's TSICR is read-to-clear (`read_causes`): the pins' causes it took are theirs.
        regs.get(reg::TSICR) - TsCause::TXTS
    }

    /// The i210/i211 (SYSTIM in seconds and ns); the i350's 40-bit counter would need its
    /// stamps through the timecounter, and the 82576 has no pins.
    fn has_pins(&self) -> bool {
        self.mac == Mac::I210
    }

    fn tx_stamp_ns(&self, raw: u64) -> u64 {
        match self.mac {
            Mac::I210 => raw,
            _ => self.raw_to_ns(raw),
        }
    }

    fn rx_filters(&self) -> &'static [RxFilter] {
        match self.mac {
            // EVENT_V2, or L2_V2 with one message type, behind the L2 ethertype filter only
            // (§8.3; no UDP queue filters here).
            Mac::E82576 => &[
                RxFilter::None,
                RxFilter::PtpV2L2Event,
                RxFilter::PtpV2L2Sync,
                RxFilter::PtpV2L2DelayReq,
            ],
            // TYPE_ALL in the buffer; the driver keeps what the filter asks for (§8.2).
            _ => &[
                RxFilter::None,
                RxFilter::All,
                RxFilter::PtpV2Event,
                RxFilter::PtpV2L2Event,
                RxFilter::PtpV2L4Event,
                RxFilter::PtpV2L2Sync,
                RxFilter::PtpV2L2DelayReq,
                RxFilter::PtpV2L4Sync,
                RxFilter::PtpV2L4DelayReq,
            ],
        }
    }

    fn check_rx_filter(&self, filter: RxFilter) -> Result<(), HwError> {
        if self.rx_filters().contains(&filter) {
            Ok(())
        } else if self.mac == Mac::E82576 {
            Err(HwError::Unsupported(
                "82576 stamps L2 PTPv2 event frames only (all, Sync or Delay_Req)",
            ))
        } else {
            Err(HwError::Unsupported("PTPv1 RX timestamping"))
        }
    }

    fn apply_rx_filter<M: Mmio>(&self, regs: &Regs<M>, filter: RxFilter) -> Result<(), HwError> {
        self.check_rx_filter(filter)?;
        match self.mac {
            Mac::E82576 => apply_rx_filter_82576(regs, filter),
            _ => apply_rx_filter_in_buffer(self.mac, regs, filter),
        }
        Ok(())
    }

    fn rx_frame<'a, M: Mmio>(
        &self,
        regs: &Regs<M>,
        filter: RxFilter,
        status: RxStatus,
        buf: &'a [u8],
        rx_latency_ns: u64,
    ) -> RxFrame<'a> {
        match self.mac {
            Mac::E82576 => self.rx_frame_82576(regs, filter, status, buf),
            _ => in_buffer_rx_frame(filter, status, buf, rx_latency_ns, |raw| {
                self.raw_to_ns(raw)
            }),
        }
    }

    fn rx_stamps_lost(&self) -> u64 {
        self.rx.lost.load(Ordering::Relaxed)
    }

    fn watchdog<M: Mmio>(&self, regs: &Regs<M>, now_ns: u64) {
        if self.mac == Mac::E82576 {
            self.rx_latch_hang(regs, now_ns);
        }
    }

    fn latency_ns(&self, speed_mbps: u32) -> (u64, u64) {
        match self.mac {
            Mac::I210 => {
                let (tx, rx) = r::latency_ns_i210(speed_mbps);
                (tx as u64, rx as u64)
            }
            // Linux compensates the i210 only; the models stamp the others uncompensated.
            _ => (0, 0),
        }
    }
}

/// i210/i350: every frame stamped into the buffer (TYPE_ALL, SRRCTL.TIMESTAMP, and on i210
/// RXPBS.CFG_TS_EN, §8.2); the driver keeps the stamps the filter asks for.
fn apply_rx_filter_in_buffer<M: Mmio>(part: Mac, regs: &Regs<M>, filter: RxFilter) {
    let on = (filter != RxFilter::None).then_some(TsyncRxCtl::ENABLED.with_rx_type(RxTsType::All));
    mac::in_buffer_rx_stamps(regs, &MAC, on, part == Mac::I210);
}

/// TSYNCRXCFG's PTPv2 messageType field, b11:8 (Linux e1000_defines.h
/// E1000_TSYNCRXCFG_PTP_V2_MSGID_MASK 0x0F00; _SYNC_MESSAGE 0x0000, _DELAY_REQ_MESSAGE 0x0100).
const TSYNCRXCFG_V2_MSG_SHIFT: u32 = 8;

/// The 82576's TSYNCRXCTL type and TSYNCRXCFG for a filter the part serves (§8.3), `None` for
/// off. The per-message filters are TYPE_L2_V2 with the message type in TSYNCRXCFG, as Linux
/// igb programmed HWTSTAMP_FILTER_PTP_V2_L2_SYNC / _DELAY_REQ before it widened them to
/// EVENT_V2 (igb_main.c igb_hwtstamp_ioctl, 2.6.3x: TYPE_L2_L4_V2 with
/// E1000_TSYNCRXCFG_PTP_V2_SYNC_MESSAGE / _DELAY_REQ_MESSAGE; L2_V2 here since only the L2
/// ethertype filter is set). QEMU 10's model ignores TYPE and always matches the message type
/// in TSYNCRXCFG, so these are the only filters that give a master its Delay_Req stamps there.
fn rx_ctl_82576(filter: RxFilter) -> Option<(RxTsType, u32)> {
    use crate::family::{MSG_DELAY_REQ, MSG_SYNC};
    let by_type = |ty: u8| (RxTsType::L2V2, u32::from(ty) << TSYNCRXCFG_V2_MSG_SHIFT);
    match filter {
        RxFilter::PtpV2L2Event => Some((RxTsType::EventV2, 0)),
        RxFilter::PtpV2L2Sync => Some(by_type(MSG_SYNC)),
        RxFilter::PtpV2L2DelayReq => Some(by_type(MSG_DELAY_REQ)),
        _ => None,
    }
}

/// 82576: the 1588 ethertype filter and the type [`rx_ctl_82576`] gives (§8.3), or off.
fn apply_rx_filter_82576<M: Mmio>(regs: &Regs<M>, filter: RxFilter) {
    let f = r::etqf(r::etqf::FILTER_1588);
    let Some((ty, cfg)) = rx_ctl_82576(filter) else {
        regs.set(reg::TSYNCRXCTL, TsyncRxCtl::empty());
        regs.write(f, 0);
        return;
    };
    regs.write(
        f,
        r::etqf::FILTER_ENABLE | r::etqf::F1588 | ptp_ipc::frame::ETHERTYPE_PTP as u32,
    );
    regs.write(r::TSYNCRXCFG, cfg);
    regs.set(reg::TSYNCRXCTL, TsyncRxCtl::ENABLED.with_rx_type(ty));
    // Release a stale latch: RXSTMPH on the part, RXSATRH on QEMU's model.
    let _ = regs.read(r::RXSATRH);
    let _ = regs.read(r::RXSTMPH);
}

/// sequenceId of a PTP frame (header bytes 30–31).
fn sequence_id(frame: &[u8]) -> Option<u16> {
    let at = ptp_ipc::frame::classify(frame)?.offset + 30;
    Some(u16::from_be_bytes([*frame.get(at)?, *frame.get(at + 1)?]))
}

impl Igb {
    /// 82576 register-mode RX: a frame whose descriptor says TS owns the latch, as Linux igb
    /// decides (igb_ptp_rx_rgtstamp: "only one packet can be time stamped at a time, we know
    /// that the register values must belong to this one"); reading RXSATRH, RXSTMPL, RXSTMPH
    /// releases it (RXSTMPH on the part, RXSATRH on QEMU's model). RXSATRH's sequenceId is only
    /// cross-checked and a disagreement logged: on QEMU's model it read 0 for every Sync, and no
    /// driver source says what the part puts there. A frame the filter wants that has no TS (the latch was held) is counted lost.
    fn rx_frame_82576<'a, M: Mmio>(
        &self,
        regs: &Regs<M>,
        filter: RxFilter,
        status: RxStatus,
        frame: &'a [u8],
    ) -> RxFrame<'a> {
        if ptp_ipc::frame::classify(frame).is_none() {
            return RxFrame::Other { frame };
        }
        let wanted = keeps_rx_stamp(filter, frame);
        let mut rx_ns = None;
        if status.contains(RxStatus::TS) {
            let seq = (regs.read(r::RXSATRH) >> 16) as u16;
            let l = regs.read(r::RXSTMPL);
            let h = regs.read(r::RXSTMPH);
            *self.rx.held_since.lock().unwrap_or_else(|e| e.into_inner()) = None;
            rx_ns = Some(self.raw_to_ns((h as u64) << 32 | l as u64));
            if sequence_id(frame).is_some_and(|s| s != seq) {
                let n = self.rx.seq_disagreed.fetch_add(1, Ordering::Relaxed) + 1;
                if n.is_power_of_two() {
                    log::info!(
                        "82576: RXSATRH's sequenceId disagreed with the stamped frame's {n} \
                         time(s) (kept the stamp: the descriptor's TS bit decides)"
                    );
                }
            }
        }
        if wanted && rx_ns.is_none() {
            let n = self.rx.lost.fetch_add(1, Ordering::Relaxed) + 1;
            // Logged at 1, 2, 4, 8, ... so a burst cannot flood the log.
            if n.is_power_of_two() {
                log::warn!(
                    "82576: {n} PTP event frame(s) without their RX stamp so far (the latch was \
                     held by an earlier frame, or the filter does not stamp this message type)"
                );
            }
        }
        RxFrame::Ptp {
            rx_ns: rx_ns.filter(|_| wanted),
            frame,
        }
    }

    /// Releases an RX latch held longer than [`RX_LATCH_HANG_NS`] with no frame claiming it
    /// (its frame was dropped), counting the stamp lost.
    fn rx_latch_hang<M: Mmio>(&self, regs: &Regs<M>, now_ns: u64) {
        let mut since = self.rx.held_since.lock().unwrap_or_else(|e| e.into_inner());
        if !regs.get(reg::TSYNCRXCTL).contains(TsyncRxCtl::VALID) {
            *since = None;
            return;
        }
        match *since {
            None => *since = Some(now_ns),
            Some(t) if now_ns.saturating_sub(t) > RX_LATCH_HANG_NS => {
                let _ = regs.read(r::RXSTMPH);
                *since = None;
                self.rx.lost.fetch_add(1, Ordering::Relaxed);
                log::warn!("82576: RX stamp latch held for 5 s with no frame; released");
            }
            Some(_) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn timinca_i210_matches_linux_formula() {
        // +1 ppm = 65536 scaled_ppm: (65536 << 13) / 15625 = 34359.
        assert_eq!(timinca_for(Mac::I210, 65_536), 34_359);
        assert_eq!(timinca_for(Mac::I350, -65_536), 34_359 | timinca::ISGN);
        assert_eq!(timinca_for(Mac::I210, 0), 0);
        let max = crate::clock::ppb_to_scaled_ppm(r::MAX_ADJ_PPB_I210 as f64);
        assert_eq!(timinca_for(Mac::I210, max) & timinca::ISGN, 0);
    }

    #[test]
    fn timinca_82576_is_nominal_plus_the_ppb_term() {
        let nominal = timinca::INCPERIOD_82576 | timinca::INCVALUE_82576;
        assert_eq!(nominal, 0x0180_0000);
        assert_eq!(timinca_for(Mac::E82576, 0), nominal);
        // +1 ppm: ppb 1000 → (1000 << 14) / 1953125 = 8 units of 2^-19 ns per 16 ns.
        assert_eq!(timinca_for(Mac::E82576, 65_536), nominal + 8);
        assert_eq!(timinca_for(Mac::E82576, -65_536), nominal - 8);
        // +100 ppm: (100000 << 14) / 1953125 = 838.
        assert_eq!(timinca_for(Mac::E82576, 100 * 65_536), nominal + 838);
        // max_adj keeps IncValue inside its 24 bits and IncPeriod untouched.
        let max = crate::clock::ppb_to_scaled_ppm(r::MAX_ADJ_PPB_82576 as f64);
        assert_eq!(timinca_for(Mac::E82576, max) >> 24, 1);
        assert_eq!(timinca_for(Mac::E82576, -max) >> 24, 1);
    }

    #[test]
    fn timecounter_extends_a_wrapping_counter() {
        // A 40-bit ns counter (i350): set near the wrap, read across it.
        let mask = (1u64 << 40) - 1;
        let tc = TimeCounter::new(mask, 0);
        tc.set(mask - 10, 5_000_000_000_000);
        assert_eq!(tc.read(mask), 5_000_000_000_010);
        assert_eq!(tc.read(5), 5_000_000_000_016);
        // A stamp taken just before the last reading is earlier, not a wrap ahead.
        assert_eq!(tc.to_ns(mask - 1), 5_000_000_000_009);
        assert_eq!(tc.to_ns(100), 5_000_000_000_111);
    }

    #[test]
    fn timecounter_keeps_the_fraction_of_a_shifted_count() {
        // 82576: 2^-19 ns units over the full 64 bits, wrapping.
        let tc = TimeCounter::new(u64::MAX, 19);
        let start = u64::MAX - (3 << 19) + 1;
        tc.set(start, 1_000);
        // Half a ns at a time: no half may be lost between readings.
        let mut c = start;
        for _ in 0..20 {
            c = c.wrapping_add(1 << 18);
            tc.read(c);
        }
        assert!(c < start, "the count wrapped");
        assert_eq!(tc.read(c), 1_010);
    }

    #[test]
    fn probe_knows_every_family_member() {
        for (dev, mac) in [
            (0x1533, Mac::I210),
            (0x1539, Mac::I210),
            (0x1521, Mac::I350),
            (0x10C9, Mac::E82576),
        ] {
            let (_, f) = <Igb as Family>::probe(0x8086, dev).unwrap();
            assert_eq!(f.mac(), mac);
        }
        assert!(<Igb as Family>::probe(0x8086, 0x15F2).is_err());
    }
}
