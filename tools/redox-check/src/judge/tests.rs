use serde_json::json;

use super::*;
use crate::report::Verdict;

const S: i128 = 1_000_000_000;

#[test]
fn the_last_json_line_of_stdout_is_the_reply() {
    let out = "noise\n{\"ok\":true,\"ns\":5}\n";
    assert_eq!(get_ns(&ptpctl_json(out).unwrap()), Ok(5));
    assert_eq!(ptpctl_json("ptpctl: no such file\n"), None);
    let err = json!({"ok": false, "error": "no device", "code": "NoDevice"});
    assert!(get_ns(&err).unwrap_err().contains("NoDevice"));
}

#[test]
fn status_is_up_only_with_the_driver_up() {
    assert!(status_up(&json!({"ok": true, "driver_up": true})).is_ok());
    assert!(status_up(&json!({"ok": true, "driver_up": false})).is_err());
    assert!(status_up(&json!({"ok": false, "error": "x"})).is_err());
}

#[test]
fn caps_need_an_intel_part_with_a_clock_page() {
    let good = json!({"ok": true, "part": "Intel i225-LM", "vendor_id": 0x8086,
        "device_id": 0x15f2, "max_adj_ppb": 62499999, "tx_ts_sets": 4,
        "clock_page": "/scheme/shm/ptp-igc-emu0"});
    assert!(caps(&good).is_ok());
    let mut no_page = good.clone();
    no_page["clock_page"] = json!("");
    assert!(caps(&no_page).unwrap_err().contains("no clock page"));
    let mut other = good;
    other["vendor_id"] = json!(0x10ec);
    assert!(caps(&other).is_err());
}

#[test]
fn a_step_is_judged_within_the_brackets_of_the_two_reads() {
    // Reads 0.5 s apart (brackets 0.4..0.6 s), stepped by 10 s.
    assert!(moved_by(100 * S, 110 * S + S / 2, 10 * S, 4 * S / 10, 6 * S / 10).is_ok());
    // Not stepped at all.
    assert!(moved_by(100 * S, 100 * S + S / 2, 10 * S, 4 * S / 10, 6 * S / 10).is_err());
    // Stepped twice.
    assert!(moved_by(100 * S, 120 * S + S / 2, 10 * S, 4 * S / 10, 6 * S / 10).is_err());
}

#[test]
fn a_read_back_must_follow_the_set_value() {
    let t = 1_700_000_000 * S;
    assert!(moved_by(t, t + S / 10, 0, S / 20, S / 5).is_ok());
    // Read back before the value set, or far after the span: wrong.
    assert!(moved_by(t, t - S, 0, S / 20, S / 5).is_err());
    assert!(moved_by(t, t + S, 0, S / 20, S / 5).is_err());
}

#[test]
fn the_measured_rate_must_match_the_frequency_set() {
    // 10 ms over 2 s = 5e6 ppb.
    assert!(rate(0, 10_000_000, 1_000_000, 2 * S, S / 100, 5e6).is_ok());
    assert!(rate(0, 0, 1_000_000, 2 * S, S / 100, 5e6).is_err());
    assert!(rate(0, 10_000_000, 0, 0, 0, 5e6).is_err());
    // 20 % off, with the interval known to 1 %: wrong.
    assert!(rate(0, 12_000_000, 1_000_000, 2 * S, S / 50, 5e6).is_err());
}

#[test]
fn cmp_must_agree_with_a_get_between_realtime_reads() {
    let v = |off: i128| json!({"ok": true, "offset_ns": off as i64, "window_ns": 30_000});
    // get read 1000 s while realtime was 10..10.1 s: offset 989.9..990 s.
    assert!(cmp_consistent(&v(990 * S - S / 20), 1000 * S, 10 * S, 10 * S + S / 10).is_ok());
    assert!(cmp_consistent(&v(900 * S), 1000 * S, 10 * S, 10 * S + S / 10).is_err());
    let empty = json!({"ok": true, "offset_ns": 990 * S as i64, "window_ns": 0});
    assert!(cmp_consistent(&empty, 1000 * S, 10 * S, 10 * S).is_err());
}

#[test]
fn stats_must_count_register_reads() {
    let s = |n: u64| json!({"ok": true, "mmio_reads": n});
    assert!(stats_moved(&s(10), &s(12)).is_ok());
    assert!(stats_moved(&s(10), &s(10)).is_err());
}

#[test]
fn bench_needs_both_paths_and_the_page_faster() {
    let b = |e: f64, f: f64| json!({"ok": true, "n": 500, "exact_p50_ns": e, "page_p50_ns": f});
    let (detail, fig) = bench(&b(1.5e6, 4e3), "ring").unwrap();
    assert!(detail.contains("ring"), "{detail}");
    assert_eq!(fig["channel"], "ring");
    assert_eq!(fig["exact_p50_ns"], 1.5e6);
    assert!(bench(&b(1e3, 4e3), "ring").is_err());
    assert!(bench(&b(0.0, 0.0), "ring").is_err());
}

#[test]
fn only_permission_denied_counts_as_eperm() {
    assert!(eperm(&json!({"ok": false, "error": "e", "code": "PermissionDenied"})).is_ok());
    assert!(eperm(&json!({"ok": false, "error": "e", "code": "NoDevice"})).is_err());
    assert!(eperm(&json!({"ok": true})).is_err());
}

#[test]
fn the_channel_is_the_last_connection_line() {
    let lines = [
        "ptpd: INFO: emu0: connected to driver at /scheme/ptpdrv.emu0_igc/ptp (ring)",
        "ptpd: WARN: emu0: driver channel closed; reconnecting",
        "ptpd: INFO: emu0: connected to driver at /scheme/ptpdrv.emu0_igc/ptp (socket)",
    ];
    assert_eq!(channel_of(lines).as_deref(), Some("socket"));
    assert_eq!(
        channel_of(lines[..2].iter().copied()).as_deref(),
        Some("ring")
    );
    assert_eq!(channel_of(["nothing"]), None);
}

#[test]
fn a_phc_across_a_restart_is_kept_reported_or_failed() {
    let warm = Some("igcd[emu0]: INFO: warm attach: PHC kept (x)");
    let cold_line = "igcd[emu0]: INFO: cold start: y; resetting the port and the PHC";
    let cold = Some(cold_line);
    let kept = (1000 * S, 1005 * S);
    let reset = (1000 * S, S / 2);
    let v = |(b, a): (i128, i128), said| phc_across_restart(b, a, 4 * S, 6 * S, said).0;
    assert_eq!(v(kept, warm), Verdict::Ok);
    assert_eq!(v(reset, cold), Verdict::Info);
    assert_eq!(v(reset, warm), Verdict::Fail);
    assert_eq!(v(kept, cold), Verdict::Fail);
    assert_eq!(v(reset, None), Verdict::Fail);
    assert_eq!(attach_kind(["a", cold_line]), cold);
}

#[test]
fn ptpctl_output_as_e960b12_had_it_fails_both_checks() {
    // uid 1000 could not open /scheme/debug: exit 2, nothing answered.
    let refused = "ptpctl: --output /scheme/debug: Operation not permitted (os error 1)";
    assert!(output_unprivileged(&Exit::Code(2), "", refused).is_err());
    let fallback = "ptpctl: --output /scheme/debug: Operation not permitted; writing to stdout";
    assert!(output_unprivileged(&Exit::Code(0), "clock time is 1.5\n", fallback).is_ok());
    // Every error also on stderr: printed twice on the console.
    let twice = output_error_once(&Exit::Code(2), "ptpctl: no such device");
    assert!(twice.unwrap_err().contains("stderr as well"));
    assert!(output_error_once(&Exit::Code(2), "").is_ok());
    assert!(output_error_once(&Exit::Code(0), "").is_err(), "must fail");
}
