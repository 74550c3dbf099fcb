//! Issue 29, the pins end to end with real processes: igcd (i225) and igbd (i210) on emulated
//! NICs whose SDPs are wired to sockets (`--pins`), ptpd, and `ptpctl` as a user runs it. The
//! lab GPS receiver (`ptplab gps`) pulses a pin; `ptpctl extts` must print, for every edge, the
//! PHC's time at the edge's true instant, exactly as the ground-truth record says. A periodic
//! output (`ptpctl perout`) is watched on the pin wire like an oscilloscope: every edge must
//! fall at the true instant the PHC reads its grid point.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{Host, exe};
use ptp_emu::pinwire::PinClient;
use ptp_emu::truth::TruthReader;
use serde_json::Value;

/// The models' input latch (ptp_emu's `PinsConfig::default`, documented as chosen).
const LATCH_NS: u64 = 8;

fn pins_path(dir: &Path) -> PathBuf {
    dir.join("pins.sock")
}

fn host(nic: &str) -> Host {
    Host::start_nic(&format!("pins-{nic}"), nic, 4.0, "", |dir| {
        vec!["--pins".into(), pins_path(dir).display().to_string()]
    })
}

/// `ptpctl --json ARGS` on `h`: its JSON answer (panics with the logs if it failed).
fn ptpctl(h: &Host, args: &[&str]) -> Value {
    let mut a = vec!["--json"];
    a.extend(args);
    let o = h.ptpctl(&a);
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(
        o.status.success(),
        "ptpctl {args:?}: {text}{}\n{}",
        String::from_utf8_lossy(&o.stderr),
        h.logs()
    );
    serde_json::from_str(text.trim()).unwrap_or_else(|e| panic!("{text}: {e}"))
}

/// The PHC (ns) at true instant `t` from the ground-truth record, checking that the law read
/// was already in force at `t` (a later change would make the evaluation wrong).
fn phc_at(h: &Host, t: u64) -> u64 {
    let snap = TruthReader::open(&h.paths.truth)
        .unwrap()
        .snapshot()
        .unwrap();
    assert!(
        snap.law.parts().base_t <= t,
        "the PHC's law changed after the edge"
    );
    snap.ns_at(t)
}

fn extts_events_are_the_phc_at_the_gps_edges(nic: &str) {
    let h = host(nic);
    ptpctl(&h, &["pin", "1", "extts", "0"]);
    // The reader first (it turns the channel on), then the GPS: its first pulse is ≥ 300 ms on.
    let reader = Command::new(exe())
        .args(["ptpctl", "--socket"])
        .arg(h.socket())
        .args(["--json", "-n", "6", "--timeout", "5", "extts", "0"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let gps = Command::new(exe())
        .arg("gps")
        .arg("--pins")
        .arg(pins_path(&h.paths.dir))
        .args([
            "--pin",
            "1",
            "--count",
            "3",
            "--width-ms",
            "200",
            "--jitter-ns",
            "5000",
        ])
        .output()
        .unwrap();
    assert!(
        gps.status.success(),
        "{}",
        String::from_utf8_lossy(&gps.stderr)
    );
    let out = reader.wait_with_output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}\n{}",
        String::from_utf8_lossy(&out.stderr),
        h.logs()
    );
    let got: Vec<u64> = serde_json::from_str::<Value>(text.trim()).unwrap()["events_ns"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_u64().unwrap())
        .collect();
    // Every edge the GPS sent (rising and falling: the part stamps both), as the truth says.
    let mut want = Vec::new();
    for line in String::from_utf8_lossy(&gps.stdout).lines().skip(1) {
        let v: Value = serde_json::from_str(line).unwrap();
        let (t, w) = (
            v["t_mono"].as_u64().unwrap(),
            v["width_ns"].as_u64().unwrap(),
        );
        want.push(phc_at(&h, t + LATCH_NS));
        want.push(phc_at(&h, t + w + LATCH_NS));
    }
    assert_eq!(got, want, "{nic}: external timestamps against the truth");
}

#[test]
fn extts_events_are_the_phc_at_the_gps_edges_i225() {
    extts_events_are_the_phc_at_the_gps_edges("i225");
}

#[test]
fn extts_events_are_the_phc_at_the_gps_edges_i210() {
    extts_events_are_the_phc_at_the_gps_edges("i210");
}

/// What the scope saw within 8 s, until every `(pin, n)` of `want` has at least n edges.
fn scope_edges(scope: &PinClient, want: &[(u8, usize)]) -> Vec<ptp_emu::igc::PinEdge> {
    let mut got: Vec<ptp_emu::igc::PinEdge> = Vec::new();
    let enough = |got: &[ptp_emu::igc::PinEdge]| {
        want.iter()
            .all(|&(pin, n)| got.iter().filter(|e| e.pin == pin).count() >= n)
    };
    let end = std::time::Instant::now() + Duration::from_secs(8);
    while !enough(&got) && std::time::Instant::now() < end {
        if let Some(e) = scope.recv(Duration::from_millis(500)).unwrap() {
            got.push(e);
        }
    }
    got
}

fn perout_edges_fall_where_the_phc_reads_the_grid(nic: &str) {
    let h = host(nic);
    let scope = PinClient::connect(pins_path(&h.paths.dir)).unwrap();
    // Clock mode (half period 250 ms ≤ 500 ms) on SDP0, target-time mode (half 1.5 s) on SDP2.
    ptpctl(&h, &["pin", "0", "perout", "0"]);
    ptpctl(&h, &["pin", "2", "perout", "1"]);
    let fast = ptpctl(&h, &["perout", "0", "0.5"]);
    let slow = ptpctl(&h, &["perout", "1", "3"]);
    let seen = scope_edges(&scope, &[(0, 6), (2, 3)]);
    for (pin, v, half, n) in [
        (0u8, &fast, 250_000_000u64, 6),
        (2, &slow, 1_500_000_000, 3),
    ] {
        let first = v["first_ns"].as_u64().unwrap();
        let got: Vec<_> = seen.iter().filter(|e| e.pin == pin).collect();
        assert!(
            got.len() >= n,
            "{nic} pin {pin}: {} edges\n{}",
            got.len(),
            h.logs()
        );
        for (k, e) in got.iter().enumerate() {
            let at = first + k as u64 * half;
            let (before, after) = (phc_at(&h, e.t - 1), phc_at(&h, e.t));
            assert!(
                before < at && after >= at,
                "{nic} pin {pin} edge {k}: the PHC read {before}..{after} around it, grid {at}"
            );
            assert_eq!(e.high, k % 2 == 0, "{nic} pin {pin} edge {k}");
        }
    }
    // Stopped: no more edges on SDP0.
    ptpctl(&h, &["perout", "0", "0"]);
    std::thread::sleep(Duration::from_millis(300));
    while scope.recv(Duration::from_millis(10)).unwrap().is_some() {}
    std::thread::sleep(Duration::from_millis(600));
    let mut late = Vec::new();
    while let Some(e) = scope.recv(Duration::from_millis(10)).unwrap() {
        late.push(e);
    }
    assert!(
        late.iter().all(|e| e.pin != 0),
        "{nic}: SDP0 still toggles: {late:?}"
    );
}

#[test]
fn perout_edges_fall_where_the_phc_reads_the_grid_i225() {
    perout_edges_fall_where_the_phc_reads_the_grid("i225");
}

#[test]
fn perout_edges_fall_where_the_phc_reads_the_grid_i210() {
    perout_edges_fall_where_the_phc_reads_the_grid("i210");
}
