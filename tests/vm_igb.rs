//! Issue 15, test 2: QEMU 10's own 82576 model (`-device igb`, a model written by others) under a
//! Linux guest. First the guest's own Linux igb driver (the baseline: `ethtool -T`, and
//! `phc_ctl` set/adj/freq measured against the guest's clocks); then the same measurements
//! through igbd --pci + ptpd + ptpctl on the same device (tests/vm_igb_igbd.rs).
//!
//! There is no ground truth for QEMU's model: every figure here is the guest's PHC against the
//! guest's own CLOCK_REALTIME (which, with nothing adjusting it, runs with CLOCK_MONOTONIC;
//! `cmp` reads both) and the guest's CLOCK_MONOTONIC from /proc/timer_list.
//!
//! Needs QEMU 10 unpacked from bookworm-backports (`cargo xtask provision` provisions it; the
//! test provisions it itself when the backports lists are there, else FAILS naming the
//! command) besides the VM packages.

mod vm_igb_common;

use redox_ptp::vm::GuestSetup;
use vm_igb_common::{
    FREQ_PPB, Guest, Tool, classify_step, expected_rate_ppb, igb_modules, load_igb,
};

/// Linux igb on QEMU's 82576: time stamping capabilities, and phc_ctl's set, adj and freq. The
/// figures are printed for the README; the asserts are what any working PHC must do.
#[test]
fn linux_igb_baseline_on_qemu_82576() {
    let _one = vm_igb_common::one_vm();
    let mods = igb_modules();
    let setup = GuestSetup {
        binaries: mods.clone(),
        append: Vec::new(),
    };
    let mut g = Guest::boot_with("linux", None, &setup);
    g.run_ok(&load_igb(&mods));
    let ifc = g.wait_netdev();
    let ts = g.run_ok(&format!("ethtool -T {ifc}")).text();
    for cap in [
        "hardware-transmit",
        "hardware-receive",
        "hardware-raw-clock",
        "ptpv2-event",
    ] {
        assert!(ts.contains(cap), "ethtool -T lacks {cap}:\n{ts}");
    }
    assert!(ts.contains("PTP Hardware Clock: 0"), "{ts}");
    let tool = Tool::PhcCtl("/dev/ptp0".into());
    let base = g.measure(&tool);
    eprintln!("[linux igb] {base:#?}");
    base.assert_sane("Linux igb", expected_rate_ppb);
    // Printed, not asserted: what a TIMINCA write does to QEMU's SYSTIM (the README's finding).
    eprintln!(
        "[linux igb] step at freq 0 -> +{FREQ_PPB}: {:?}; at +{FREQ_PPB} -> -{FREQ_PPB}: {:?}; \
         expected rate {} ppb",
        classify_step(base.step_up.ns),
        classify_step(base.step_down.ns),
        expected_rate_ppb(FREQ_PPB)
    );
    g.finish();
}
