//! Warm attach (issue 17): what a restarted igcd accepts as a running, sane PHC left by a
//! previous instance, on the emulated i225 in real time (the check watches SYSTIM advance
//! against the host clock), and that the warm path's quiesce leaves the timer and link alone.

use std::sync::Arc;
use std::time::Duration;

use intel_common::Regs;
use intel_common::clock::{ClockHw, ppb_to_scaled_ppm};
use intel_common::family::Family;
use intel_common::igc::{self, Igc};
use intel_regs::igc as r;
use ptp_emu::clock::HostClock;
use ptp_emu::igc::{I225, I225Config};
use ptp_pci::PciFunction;
use ptp_pci::emulated::{EmuBar, EmuFunction};

fn model() -> (EmuFunction<I225>, Arc<Regs<EmuBar<I225>>>) {
    let mut func = EmuFunction::new(
        I225::new(I225Config::i225(HostClock::new().source())),
        "warm",
    );
    let regs = Arc::new(Regs::new(func.map_bar(0).unwrap()));
    (func, regs)
}

/// As a driver leaves the part: reset, link, PTP reset, TX stamping on, a frequency set.
fn configure(regs: &Regs<EmuBar<I225>>, ppb: f64) {
    igc::reset(regs).unwrap();
    assert!(igc::link_up(regs, Duration::from_millis(10)).up);
    igc::ptp_reset(regs, 1_700_000_000_000_000_000);
    regs.set(r::reg::TSYNCTXCTL, Igc.tsynctxctl_on());
    Igc.set_freq(regs, ppb_to_scaled_ppm(ppb));
}

#[test]
fn a_power_on_phc_is_not_kept() {
    let (_f, regs) = model();
    let e = igc::warm_phc(&regs).unwrap_err();
    assert!(e.contains("TX timestamping off"), "{e}");
}

#[test]
fn a_configured_running_phc_is_kept_with_its_frequency() {
    let (f, regs) = model();
    configure(&regs, 12_345.0);
    let w = igc::warm_phc(&regs).unwrap();
    assert!(
        (w.scaled_ppm - ppb_to_scaled_ppm(12_345.0)).abs() <= 6,
        "{w:?}"
    );
    assert_eq!(w.pending_tx, 0);
    assert!(w.phc_ns > 1_700_000_000_000_000_000, "{w:?}");
    assert!(w.to_string().contains("TIMINCA +12.345 ppm"), "{w}");
    // The warm path's quiesce: no port reset, the link and the timer's rate untouched.
    let (resets, inca) = f.with_device(|d| (d.port_resets(), d.peek(r::TIMINCA)));
    Igc.quiesce(&regs);
    igc::ptp_rearm(&regs);
    f.with_device(|d| {
        assert_eq!(d.port_resets(), resets);
        assert_eq!(d.peek(r::TIMINCA), inca);
        assert!(d.link_up());
        assert_eq!(d.peek(r::RCTL), 0);
        assert_eq!(d.peek(r::TSIM), r::TsCause::TXTS.bits());
    });
}

#[test]
fn a_stopped_timer_is_not_kept() {
    let (_f, regs) = model();
    configure(&regs, 0.0);
    regs.set(r::reg::TSAUXC, r::Tsauxc::DISABLE0);
    let e = igc::warm_phc(&regs).unwrap_err();
    assert!(e.contains("timer 0 stopped"), "{e}");
}

#[test]
fn timinca_decodes_back_to_the_frequency_asked_for() {
    for ppb in [0.0, 1.0, -1.0, 7_165.3, -62_499_999.0, 62_499_999.0] {
        let s = ppb_to_scaled_ppm(ppb);
        let back = igc::scaled_ppm_of_timinca(igc::timinca_for(s));
        // One INCVALUE unit is 78125 / 2^14 ≈ 4.8 scaled_ppm.
        assert!((back - s).abs() <= 5, "{ppb} ppb: {s} -> {back}");
    }
}
