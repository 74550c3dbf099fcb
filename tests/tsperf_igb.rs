//! tsperf against igbd, one short ramp per igb family (`ptplab tsperf --nic i210|i350|82576`):
//! the ntpperf measurement runs through the real path (a separate igbd process on the emulated
//! part, loopback wire), every stamp it gets is a valid one — its PHC time, mapped to host time
//! through igbd's clock page, lies between the request's submit and its delivery — and the
//! model's own register counters reach the report. A smoke test, not a figure: the capacities for
//! the README come from a full ramp on a quiet machine.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// Runs a 2-step ramp (200 and 400 requests/s, 0.5 s each) against `nic`; its JSON lines.
fn short_ramp(nic: &str) -> Vec<Value> {
    let out = Command::new(exe())
        .args(["tsperf", "--nic", nic, "--json"])
        .args(["--start", "200", "--max", "400", "--step-secs", "0.5"])
        .args(["--limit-secs", "5"])
        .output()
        .expect("run ptplab tsperf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tsperf --nic {nic}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn tsperf_ramps_through_igbd_on_every_igb_family() {
    for nic in ["i210", "i350", "82576"] {
        let lines = short_ramp(nic);
        let target = format!("igbd, emulated {nic}, 1 TX timestamp set");
        let (steps, summary): (Vec<&Value>, Vec<&Value>) =
            lines.iter().partition(|v| v.get("summary").is_none());
        assert_eq!(summary.len(), 1, "{nic}: {lines:?}");
        assert_eq!(summary[0]["targets"][0]["target"], target.as_str());
        assert!(!steps.is_empty(), "{nic}: no step");
        let mut on_time = 0;
        for s in &steps {
            assert_eq!(s["target"], target.as_str(), "{s}");
            // A stamp outside submit..delivery would be a wrong time, not a slow one.
            assert_eq!(s["invalid"], 0, "{nic}: invalid stamps in {s}");
            assert!(
                s["model_bar_reads_per_ts"]
                    .as_f64()
                    .is_some_and(|r| r > 0.0),
                "{nic}: no model counters in {s}"
            );
            on_time += s["on_time"].as_u64().unwrap();
        }
        eprintln!(
            "{nic}: {} steps, {on_time} stamps on time; capacity (99 %) {}",
            steps.len(),
            summary[0]["targets"][0]["capacity_99_per_s"]["median"]
        );
        assert!(on_time > 0, "{nic}: no stamp on time");
    }
}

#[test]
fn tsperf_refuses_what_an_igb_part_cannot_do() {
    for args in [
        &["--nic", "i350", "--sets", "4"][..],
        &["--nic", "82576", "--compare-sets"],
        &["--nic", "i210", "--rx"],
        &["--nic", "e1000"],
    ] {
        let out = Command::new(exe())
            .arg("tsperf")
            .args(args)
            .output()
            .expect("run ptplab tsperf");
        assert_eq!(out.status.code(), Some(2), "{args:?} accepted");
    }
}
