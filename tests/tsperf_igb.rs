//! tsperf against igbd beside igcd, one short ramp per family in one run (`ptplab tsperf --nic
//! i225,i210,i350,82576`): the ntpperf measurement runs through the real path (a separate daemon
//! process on each emulated part, loopback wire), every stamp it gets is a valid one — its PHC
//! time, mapped to host time through the daemon's clock page, lies between the request's submit
//! and its delivery — and the model's own register counters reach the report. A smoke test, not a figure: the capacities for
//! the README come from a full ramp on a quiet machine.

use std::path::PathBuf;
use std::process::Command;

use serde_json::Value;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// Runs a 2-step ramp (200 and 300 requests/s, 0.5 s each) against each of `nics`; its JSON
/// lines.
fn short_ramps(nics: &str) -> Vec<Value> {
    let out = Command::new(exe())
        .args(["tsperf", "--nic", nics, "--json"])
        .args(["--start", "200", "--max", "400", "--step-secs", "0.5"])
        .args(["--limit-secs", "5"])
        .output()
        .expect("run ptplab tsperf");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "tsperf --nic {nics}: {}\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}")))
        .collect()
}

#[test]
fn tsperf_ramps_through_igbd_on_every_igb_family_beside_the_i225() {
    let lines = short_ramps("i225,i210,i350,82576");
    let (steps, summary): (Vec<&Value>, Vec<&Value>) =
        lines.iter().partition(|v| v.get("summary").is_none());
    assert_eq!(summary.len(), 1, "{lines:?}");
    let targets = summary[0]["targets"].as_array().expect("targets");
    // tsperf drives each daemon over the channel ptpd uses by default (the ring).
    let nics = [
        (
            "i225",
            "igcd, emulated i225, 4 TX timestamp sets, ring channel",
        ),
        (
            "i210",
            "igbd, emulated i210, 1 TX timestamp set, ring channel",
        ),
        (
            "i350",
            "igbd, emulated i350, 1 TX timestamp set, ring channel",
        ),
        (
            "82576",
            "igbd, emulated 82576, 1 TX timestamp set, ring channel",
        ),
    ];
    assert_eq!(targets.len(), nics.len(), "{targets:?}");
    for (k, (nic, target)) in nics.into_iter().enumerate() {
        assert_eq!(targets[k]["target"], target);
        let steps: Vec<&&Value> = steps.iter().filter(|s| s["target"] == target).collect();
        assert!(!steps.is_empty(), "{nic}: no step");
        let mut on_time = 0;
        for s in &steps {
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
            targets[k]["capacity_99_per_s"]["median"]
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
        &["--nic", "i225,i226", "--compare-sets"],
        &["--nic", "i225,i350", "--sets", "2"],
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
