//! `ptplab --scenario` on real processes (issue 28): the lab's disturbance scenarios run end to
//! end through the command a user types, and each slave is judged on ground truth from the
//! scenario summary. The servo itself is judged scenario by scenario, PI against statime's
//! Kalman filter, in simulated time (`services/ptpd/src/ptp/servo_sim.rs`); here the point is
//! that the lab makes each disturbance happen and ptpd's servo rides it out on the emulated
//! hardware.
//!
//! Bounds: a slave must be locked (|true offset| ≤ LOCK_NS to the end) before the
//! disturbance at 20 s and again at the end; a link flap or a ptpd restart must not move the
//! true offset past the lock band while the slave is SLAVE. The holdover the run predicts (the
//! frequency error the servo was left with, against what the models' oscillators call for, times
//! the time without Syncs, plus the steady maximum) is printed beside it, not asserted: a fresh
//! servo's re-fitted frequency adds to it (see `judge`).

use std::path::PathBuf;
use std::process::Command;

use redox_ptp::figures::LOCK_NS;
use redox_ptp::lab::scenario::EVENT_AT_S;
use serde_json::Value;

fn ptplab() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// Runs `ptplab --scenario NAME --seed SEED --json --duration 32`; the summary line.
fn run(name: &str, seed: u64) -> Value {
    let out = Command::new(ptplab())
        .args(["--scenario", name, "--json", "--duration", "32"])
        .args(["--seed", &seed.to_string()])
        .output()
        .expect("ptplab runs");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ptplab --scenario {name}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    let last = stdout.lines().last().expect("a summary line");
    serde_json::from_str(last).expect("the summary is JSON")
}

/// The slave's scenario figures, its host summary, and the frequency (ppb) its oscillator
/// needs to follow the master's (the models' own oscillator errors).
fn slave(summary: &Value) -> (&Value, &Value, f64) {
    let sc = &summary["scenario"]["slaves"][0];
    let host = sc["host"].as_u64().expect("a slave") as usize;
    let hosts = summary["hosts"].as_array().unwrap();
    let osc = |i: usize| hosts[i]["oscillator_ppm"].as_f64().unwrap();
    // (1 + osc_s)(1 + f) = 1 + osc_m, to first order f = osc_m − osc_s.
    let needed = (osc(host ^ 1) - osc(host)) * 1000.0;
    (sc, &hosts[host], needed)
}

fn judge(name: &str, seed: u64, without_syncs_s: f64) {
    let s = run(name, seed);
    let (sc, host, needed) = slave(&s);
    eprintln!("{name}: {sc}");
    assert_eq!(sc["stack"], "ptpd");
    let event = sc["event_at_s"].as_f64().expect("the disturbance happened");
    assert!(event >= EVENT_AT_S, "{sc}");
    let before = sc["lock_before_event_s"].as_f64();
    assert!(before.is_some(), "not locked before the disturbance: {sc}");
    assert!(
        sc["relock_after_event_s"].as_f64().is_some(),
        "not locked at the end: {sc}"
    );
    let exc = sc["excursion_ns"]
        .as_i64()
        .expect("true offsets after the event");
    let steady = sc["steady_max_abs_ns"].as_i64().expect("a steady state");
    let freq_err = (host["freq_ppb"].as_f64().unwrap() - needed).abs();
    let holdover = (freq_err * without_syncs_s).ceil() as i64 + steady;
    // The holdover alone would bound a servo that kept its frequency; a fresh servo (statime
    // starts one when the port leaves SLAVE) fits the frequency again from 4 Syncs, σ ≈ 14 ppb
    // with 8 ns stamps, and slews for a second on it: in CI (debug build, busy) a flap moved
    // 23 ns against a holdover of 18. So the bound is the lab's lock band; the holdover is shown.
    eprintln!("{name}: excursion {exc} ns, holdover alone {holdover} ns, steady max {steady} ns");
    assert!(
        exc <= LOCK_NS,
        "{name}: the slave moved {exc} ns after the disturbance, out of the lock band \
         (holdover alone {holdover} ns: {freq_err:.2} ppb × {without_syncs_s} s + {steady} ns): {sc}"
    );
}

/// The slave's link goes down for 3 s: it holds over on its frequency (FAULTY, then MASTER as
/// the parent's Announces age out) and comes back to SLAVE without a step.
#[test]
fn a_link_flap_is_held_over_within_the_lock_band() {
    judge("link-flap", 42, 3.0 + 2.0);
}

/// The slave's ptpd is killed and restarted by the lab's supervisor: the PHC keeps the
/// frequency the driver holds, and the new servo starts from it.
#[test]
fn a_ptpd_restart_keeps_the_clock_within_the_lock_band() {
    judge("ptpd-restart", 43, 2.0);
}
