//! The igc driver logic against the emulated i225 in deterministic mode (a virtual clock the
//! test advances): bring-up, PHC operations and their exact register costs, the "other" vector.

use std::sync::Arc;
use std::time::{Duration, Instant};

use intel_common::clock::{Phc, ppb_to_scaled_ppm};
use intel_common::igc::{self, Igc};
use intel_common::{HwError, Regs};
use intel_regs::igc as r;
use ptp_emu::clock::VirtualClock;
use ptp_emu::igc::{I225, I225Config};
use ptp_pci::emulated::{EmuBar, EmuFunction, EmuIrq};
use ptp_pci::{IrqVector, IrqWait, Mmio, PciFunction};

const T0: u64 = 1_700_000_000_000_000_000;

struct Rig {
    clock: VirtualClock,
    func: EmuFunction<I225>,
    regs: Arc<Regs<EmuBar<I225>>>,
    other: EmuIrq,
}

fn rig() -> Rig {
    let clock = VirtualClock::new(0);
    let mut func = EmuFunction::new(I225::new(I225Config::i225(clock.source())), "test");
    let regs = Arc::new(Regs::new(func.map_bar(0).unwrap()));
    igc::reset(&regs).unwrap();
    let mut v = func.alloc_vectors(igc::VECTORS).unwrap();
    let other = v.swap_remove(igc::VECTOR_OTHER as usize);
    let link = igc::link_up(&regs, Duration::from_millis(10));
    assert!(link.up);
    assert_eq!(link.speed_mbps, 2500);
    igc::enable_msix(&regs);
    igc::ptp_reset(&regs, T0);
    Rig {
        clock,
        func,
        regs,
        other,
    }
}

fn phc(rig: &Rig) -> Phc<EmuBar<I225>, Igc> {
    Phc::new(rig.regs.clone(), Igc)
}

#[test]
fn bring_up_programs_the_model() {
    let rig = rig();
    rig.func.with_device(|d| {
        assert_eq!(d.phc_now_ns(), T0);
        assert!(d.link_up());
        assert_eq!(d.peek(r::TSIM), r::TsCause::TXTS.bits());
        assert_ne!(d.peek(r::IMS) & r::IntCause::TS.bits(), 0);
        assert_ne!(d.peek(r::CTRL_EXT) & r::ctrl_ext::DRV_LOAD, 0);
        assert_eq!(d.peek(r::IVAR_MISC), (igc::VECTOR_OTHER as u32 | 0x80) << 8);
        assert_eq!(d.tsauxc(), r::Tsauxc::empty());
        assert_eq!(d.port_resets(), 1);
        // igcd's bring-up touches only registers the model implements.
        assert_eq!(d.unimplemented_accesses(), vec![]);
    });
}

#[test]
fn gettime_and_gettimex_cost_exactly_two_systim_reads_per_sample() {
    let rig = rig();
    let phc = phc(&rig);
    rig.clock.advance(1_234_567_890);
    rig.func.with_device(|d| d.reset_counters());
    let before = rig.regs.reads();

    let s = phc.gettime();
    assert_eq!(s.phc_ns, T0 + 1_234_567_890);
    assert_eq!(rig.regs.reads() - before, 2);

    let samples = phc.gettimex(25).unwrap();
    assert_eq!(samples.len(), 25);
    assert!(samples.iter().all(|s| s.phc_ns == T0 + 1_234_567_890));
    assert!(samples.iter().all(|s| s.sys_before_ns <= s.sys_after_ns));
    assert_eq!(rig.regs.reads() - before, 2 + 2 * 25);
    rig.func.with_device(|d| {
        assert_eq!(d.reads(r::SYSTIML), 26);
        assert_eq!(d.reads(r::SYSTIMH), 26);
        // Nothing else was read: no SYSTIMR, no status polls.
        assert_eq!(d.total_reads(), 52);
    });
    assert!(matches!(phc.gettimex(0), Err(HwError::InvalidArgument(_))));
    assert!(matches!(phc.gettimex(26), Err(HwError::InvalidArgument(_))));
}

#[test]
fn gettimex_pairs_are_consistent_across_a_second_boundary() {
    // The latch makes L and H one sample even when the clock crosses a second between them;
    // with the virtual clock we can put the boundary exactly there.
    let rig = rig();
    let phc = phc(&rig);
    rig.clock.advance(999_999_999 - (T0 % 1_000_000_000));
    let l = rig.regs.read(r::SYSTIML);
    rig.clock.advance(10);
    let h = rig.regs.read(r::SYSTIMH);
    assert_eq!(
        h as u64 * 1_000_000_000 + l as u64,
        T0 - T0 % 1_000_000_000 + 999_999_999
    );
    assert_eq!(
        phc.gettime().phc_ns,
        T0 - T0 % 1_000_000_000 + 1_000_000_009
    );
}

/// A host wall clock stepped back between a sample's two CLOCK_REALTIME readings (fa81a8f):
/// that bracket ends before it starts and says nothing. gettimex still returns every sample as
/// read, and anchors the clock page on the narrowest bracket that is not stepped back, or on
/// none. Subtracting the readings (the pre-fix form) panics here (debug) or wraps (release).
#[test]
fn gettimex_skips_a_bracket_the_wall_clock_stepped_back_in() {
    let rig = rig();
    rig.clock.advance(3_000_000_000);
    let mono = rig.clock.now();
    let published = Arc::new(std::sync::Mutex::new(Vec::new()));
    // The wall clock's readings, in call order: three brackets, then the reading that maps
    // REALTIME to the monotonic timescale. Bracket 0 is 30 us wide (beyond the 20 us the page
    // takes), bracket 1 steps back 1 s, bracket 2 is 400 ns wide.
    let readings = [
        5_000_000_000,
        5_000_030_000,
        6_000_000_000,
        5_000_000_000,
        5_000_001_000,
        5_000_001_400,
        5_000_002_000,
    ];
    let wall = |readings: Vec<u64>| {
        let next = std::sync::atomic::AtomicUsize::new(0);
        move || readings[next.fetch_add(1, std::sync::atomic::Ordering::SeqCst) % readings.len()]
    };
    let c = rig.clock.clone();
    let sink = published.clone();
    let phc = phc(&rig)
        .with_host_clock(move || c.now())
        .with_wall_clock(wall(readings.to_vec()))
        .with_publisher(move |s| sink.lock().unwrap().push(*s));
    let got = phc.gettimex(3).expect("gettimex");
    let brackets: Vec<(u64, u64)> = got
        .iter()
        .map(|s| (s.sys_before_ns, s.sys_after_ns))
        .collect();
    assert_eq!(
        brackets,
        [
            (5_000_000_000, 5_000_030_000),
            (6_000_000_000, 5_000_000_000),
            (5_000_001_000, 5_000_001_400)
        ]
    );
    // Bracket 2's middle, 800 ns before the mapping reading, on the monotonic timescale.
    let page = published.lock().unwrap().clone();
    assert_eq!(page.len(), 1, "{page:?}");
    assert_eq!(
        (page[0].phc_ns, page[0].mono_ns),
        (T0 + 3_000_000_000, mono - 800)
    );

    // Every bracket stepped back: the samples as read, and nothing for the page.
    published.lock().unwrap().clear();
    let sink = published.clone();
    let phc = self::phc(&rig)
        .with_wall_clock(wall(vec![2_000_000_000, 1_000_000_000]))
        .with_publisher(move |s| sink.lock().unwrap().push(*s));
    let got = phc.gettimex(2).expect("gettimex");
    assert!(
        got.iter().all(|s| s.sys_after_ns < s.sys_before_ns),
        "{got:?}"
    );
    assert_eq!(*published.lock().unwrap(), []);
}

#[test]
fn settime_writes_l_then_h_and_takes_effect() {
    let rig = rig();
    let phc = phc(&rig);
    rig.func.with_device(|d| d.reset_counters());
    phc.settime(42_000_000_007).unwrap();
    rig.func.with_device(|d| {
        assert_eq!(d.phc_now_ns(), 42_000_000_007);
        assert_eq!((d.writes(r::SYSTIML), d.writes(r::SYSTIMH)), (1, 1));
        // No read was needed to publish the new anchor.
        assert_eq!(d.total_reads(), 0);
    });
    let last = phc.last_sample().unwrap();
    assert_eq!(last.phc_ns, 42_000_000_007);
    assert!(matches!(
        phc.settime(u64::MAX),
        Err(HwError::InvalidArgument(_))
    ));
}

#[test]
fn adjtime_steps_by_the_amount() {
    let rig = rig();
    // The driver reads the model's virtual clock as its host clock, and it stands still: every
    // bracket is exact, the write lands when it is made, so the step is exactly delta — read
    // back once and never rewritten. (Steps whose writes land late: tests/igc_step.rs.)
    let c = rig.clock.clone();
    let phc = phc(&rig).with_host_clock(move || c.now());
    for delta in [1_000_000_000i64, -333, 5, 0] {
        let writes = rig.func.with_device(|d| d.writes(r::SYSTIMH));
        let before = rig.func.with_device(|d| d.phc_now_ns());
        let report = phc.adjtime_report(delta).unwrap();
        let after = rig.func.with_device(|d| d.phc_now_ns());
        assert_eq!(after as i128 - before as i128, delta as i128, "{report:?}");
        assert_eq!(rig.func.with_device(|d| d.writes(r::SYSTIMH)) - writes, 1);
        assert_eq!((report.residual_ns, report.corrections), (0, 0));
        assert!(report.verified);
    }
    // A step below zero is refused, and nothing is written.
    let now = rig.func.with_device(|d| d.phc_now_ns()) as i64;
    let writes = rig.func.with_device(|d| d.writes(r::SYSTIMH));
    assert!(matches!(
        phc.adjtime(-now - 10_000_000_000),
        Err(HwError::InvalidArgument(_))
    ));
    assert_eq!(rig.func.with_device(|d| d.writes(r::SYSTIMH)), writes);
    assert_eq!(rig.func.with_device(|d| d.phc_now_ns()), now as u64);
}

#[test]
fn adjfine_programs_timinca_and_the_model_follows() {
    let rig = rig();
    let phc = phc(&rig);
    let scaled = ppb_to_scaled_ppm(100_000.0); // +100 ppm
    phc.adjfine(scaled).unwrap();
    let expect = igc::timinca_for(scaled);
    assert_eq!(rig.func.with_device(|d| d.timinca()), expect);
    // Over 1 s of true time the PHC gains INCVALUE · 2^-32 / 3.2 ns per ns.
    let t = rig.func.with_device(|d| d.phc_now_ns());
    rig.clock.advance(1_000_000_000);
    let gained = rig.func.with_device(|d| d.phc_now_ns()) - t - 1_000_000_000;
    let model = (expect as u128 * 1_000_000_000 * 1000 / (1u128 << 32) / 3200) as u64;
    assert!(
        gained.abs_diff(model) <= 1,
        "gained {gained} ns, expected {model}"
    );
    assert!((99_990..=100_000).contains(&gained), "{gained}");

    // Negative, then out of range: refused, register untouched.
    phc.adjfine(-scaled).unwrap();
    assert_eq!(
        rig.func.with_device(|d| d.timinca()),
        expect | r::timinca::ISGN
    );
    let too_big = ppb_to_scaled_ppm(62_500_000.0);
    assert!(matches!(
        phc.adjfine(too_big),
        Err(HwError::InvalidArgument(_))
    ));
    assert!(matches!(
        phc.adjfine(i64::MIN),
        Err(HwError::InvalidArgument(_))
    ));
    assert_eq!(
        rig.func.with_device(|d| d.timinca()),
        expect | r::timinca::ISGN
    );
    assert_eq!(phc.freq_scaled_ppm(), -scaled);
}

#[test]
fn time_sync_cause_wakes_the_other_vector_and_rearms() {
    let rig = rig();
    let _ = igc::read_other_causes(&rig.regs);
    igc::rearm_other(&rig.regs);
    let _ = rig.other.wait(Duration::from_millis(1));
    rig.func
        .with_device_host(|d, host| d.raise_tsicr(r::TsCause::TXTS, host));
    assert_eq!(rig.other.wait(Duration::from_secs(1)), IrqWait::Fired);
    let causes = igc::read_other_causes(&rig.regs);
    assert!(causes.icr.contains(r::IntCause::TS));
    assert_eq!(causes.tsicr, r::TsCause::TXTS);
    // Read-to-clear: a second read sees nothing.
    assert!(
        !igc::read_other_causes(&rig.regs)
            .icr
            .contains(r::IntCause::TS)
    );
    igc::rearm_other(&rig.regs);
    // After re-arming, the next cause fires again.
    rig.func
        .with_device_host(|d, host| d.raise_tsicr(r::TsCause::TXTS, host));
    assert_eq!(rig.other.wait(Duration::from_secs(1)), IrqWait::Fired);
}

/// A device that never finishes its NVM auto-read.
struct Dead;
impl Mmio for Dead {
    fn read32(&self, _offset: u32) -> u32 {
        0
    }
    fn write32(&self, _offset: u32, _value: u32) {}
}

#[test]
fn a_device_that_never_answers_gives_a_bounded_timeout() {
    let regs = Regs::new(Dead);
    let t = Instant::now();
    let err = igc::reset(&regs).unwrap_err();
    assert!(
        matches!(err, HwError::Timeout { what, .. } if what.contains("AUTO_RD")),
        "{err}"
    );
    assert!(t.elapsed() < Duration::from_secs(2));
    assert!(!igc::link_up(&regs, Duration::from_millis(20)).up);
}
