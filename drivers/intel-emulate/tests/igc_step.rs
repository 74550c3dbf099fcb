//! adjtime against the emulated i225 when the write is late: the driver and the model share a
//! virtual clock, and the bus between them can stall a SYSTIMH write as a preempted userspace
//! driver or a busy bus would. Each step is measured on the model's own PHC (ground truth),
//! not through the driver's reads, and must land within the bound the driver reports.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use intel_common::Regs;
use intel_common::clock::{Phc, StepReport};
use intel_common::igc::{self, Igc};
use intel_regs::igc as r;
use ptp_emu::clock::VirtualClock;
use ptp_emu::igc::{I225, I225Config};
use ptp_pci::emulated::{EmuBar, EmuFunction};
use ptp_pci::{Mmio, PciFunction};

const T0: u64 = 1_700_000_000_000_000_000;
/// Virtual time one register access takes, half before the device acts and half after.
const ACCESS_NS: u64 = 100;
/// A stall longer than a scheduler tick's worth of preemption seen on a loaded host.
const STALL_NS: u64 = 300_000;

/// The funnel's end: an emulated BAR whose accesses take virtual time, and whose SYSTIMH
/// writes can be held back (the time source jumps between the SYSTIML and SYSTIMH writes).
struct StallBus {
    bar: EmuBar<I225>,
    clock: VirtualClock,
    /// Extra delay of each coming SYSTIMH write, in order.
    stalls: Mutex<VecDeque<u64>>,
}

impl StallBus {
    fn stall_next_writes(&self, n: usize) {
        self.stalls
            .lock()
            .unwrap()
            .extend(std::iter::repeat_n(STALL_NS, n));
    }
}

impl Mmio for StallBus {
    fn read32(&self, offset: u32) -> u32 {
        self.clock.advance(ACCESS_NS / 2);
        let v = self.bar.read32(offset);
        self.clock.advance(ACCESS_NS / 2);
        v
    }

    fn write32(&self, offset: u32, value: u32) {
        self.clock.advance(ACCESS_NS / 2);
        if offset == r::SYSTIMH
            && let Some(d) = self.stalls.lock().unwrap().pop_front()
        {
            self.clock.advance(d);
        }
        self.bar.write32(offset, value);
        self.clock.advance(ACCESS_NS / 2);
    }
}

struct Rig {
    clock: VirtualClock,
    func: EmuFunction<I225>,
    bus: Arc<StallBus>,
    phc: Phc<Shared, Igc>,
}

/// The driver's handle on the bus the test also holds.
struct Shared(Arc<StallBus>);

impl Mmio for Shared {
    fn read32(&self, offset: u32) -> u32 {
        self.0.read32(offset)
    }
    fn write32(&self, offset: u32, value: u32) {
        self.0.write32(offset, value)
    }
}

fn rig() -> Rig {
    let clock = VirtualClock::new(1_000_000_000);
    let mut func = EmuFunction::new(I225::new(I225Config::i225(clock.source())), "step");
    let bus = Arc::new(StallBus {
        bar: func.map_bar(0).unwrap(),
        clock: clock.clone(),
        stalls: Mutex::new(VecDeque::new()),
    });
    let regs = Arc::new(Regs::new(Shared(bus.clone())));
    igc::ptp_reset(&regs, T0);
    let c = clock.clone();
    let phc = Phc::new(regs, Igc).with_host_clock(move || c.now());
    Rig {
        clock,
        func,
        bus,
        phc,
    }
}

/// Steps by `delta`; returns the driver's report and the true step error: how far the
/// model's PHC moved beyond the true time that passed (a perfect crystal at nominal rate),
/// minus `delta`.
fn step(rig: &Rig, delta: i64) -> (StepReport, i128) {
    let (t0, p0) = (rig.clock.now(), rig.func.with_device(|d| d.phc_now_ns()));
    let report = rig.phc.adjtime_report(delta).unwrap();
    let (t1, p1) = (rig.clock.now(), rig.func.with_device(|d| d.phc_now_ns()));
    let err = (p1 as i128 - p0 as i128) - (t1 as i128 - t0 as i128) - delta as i128;
    eprintln!("adjtime({delta}): true error {err} ns, {report:?}");
    (report, err)
}

fn systimh_writes(rig: &Rig) -> u64 {
    rig.func.with_device(|d| d.writes(r::SYSTIMH))
}

/// The step lands within its own bound, and that bound is under half the step, so a no-op, a
/// sign flip or a stall left in the step cannot pass.
fn assert_within(delta: i64, report: &StepReport, err: i128) {
    assert!(
        err.unsigned_abs() <= report.bound_ns as u128,
        "adjtime({delta}) is off by {err} ns, beyond its bound {} ns",
        report.bound_ns
    );
    assert!(
        (report.bound_ns as u128) < delta.unsigned_abs() as u128 / 2,
        "adjtime({delta}): bound {} ns cannot tell the step from a no-op",
        report.bound_ns
    );
}

#[test]
fn a_write_stalled_mid_step_is_corrected_to_within_the_bound() {
    let rig = rig();
    for delta in [1000, -333, 1_000_000, -1_500_000_000] {
        rig.bus.stall_next_writes(1);
        let (report, err) = step(&rig, delta);
        assert_within(delta, &report, err);
        assert!(report.verified, "{report:?}");
        assert!(report.corrections >= 1, "the stalled write went unnoticed");
    }
    assert_eq!(rig.phc.step_counts().steps, 4);
    assert_eq!(rig.phc.step_counts().unverified, 0);
}

#[test]
fn the_bus_latency_learned_once_lands_the_next_step_at_its_first_write() {
    let rig = rig();
    // The first step learns how long a write takes to land (two accesses here).
    let (report, err) = step(&rig, 5_000);
    assert_within(5_000, &report, err);
    let writes = systimh_writes(&rig);
    for delta in [1000, -333] {
        let (report, err) = step(&rig, delta);
        assert_within(delta, &report, err);
        assert_eq!(report.corrections, 0, "{report:?}");
    }
    assert_eq!(systimh_writes(&rig) - writes, 2);
}

#[test]
fn a_write_stalled_every_time_stops_after_three_corrections_and_says_so() {
    let rig = rig();
    rig.bus.stall_next_writes(100);
    let before = systimh_writes(&rig);
    let (report, err) = step(&rig, 1000);
    // Bounded: the first write and three corrections, never a loop.
    assert_eq!(systimh_writes(&rig) - before, 4);
    assert_eq!((report.corrections, report.verified), (3, false));
    // The report still tells the truth about how far off the step is.
    assert!(
        err.unsigned_abs() <= report.bound_ns as u128,
        "off by {err} ns, bound {} ns",
        report.bound_ns
    );
    assert!(report.bound_ns >= STALL_NS, "{report:?}");
    assert_eq!(rig.phc.step_counts().unverified, 1);
    assert_eq!(rig.phc.step_counts().corrections, 3);
    // Stalls teach nothing about the bus: once they stop, the next step lands.
    rig.bus.stalls.lock().unwrap().clear();
    let (report, err) = step(&rig, -333);
    assert_within(-333, &report, err);
    assert!(report.verified);
}
