//! `--output PATH`: results (and errors) are appended to PATH instead of stdout, one line per
//! run, so a boot script can collect them without a shell. No ptpd runs here, so every command
//! ends in the "cannot reach ptpd" error, which is what lands in the file.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

fn run(args: &[&str]) -> ExitCode {
    ptpctl::main_with_args(args.iter().map(OsString::from))
}

fn temp(name: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("ptpctl-{}-{name}", std::process::id()));
    let _ = std::fs::remove_file(&p);
    p
}

#[test]
fn output_appends_one_line_per_run_including_errors() {
    let out = temp("out");
    let o = out.to_str().unwrap();
    let sock = temp("no-ptpd.sock");
    let s = sock.to_str().unwrap();
    assert_eq!(
        run(&["--socket", s, "--json", "--output", o, "get"]),
        ExitCode::FAILURE
    );
    assert_eq!(
        run(&["--socket", s, "--output", o, "caps"]),
        ExitCode::FAILURE
    );
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text:?}");
    let v: serde_json::Value = serde_json::from_str(lines[0]).unwrap();
    assert_eq!(v["ok"], false);
    assert!(v["error"].as_str().unwrap().contains(s), "{v}");
    assert!(
        lines[1].starts_with("ptpctl: cannot reach ptpd"),
        "{}",
        lines[1]
    );
    let _ = std::fs::remove_file(&out);
}

#[test]
fn an_output_path_that_cannot_be_opened_is_a_usage_error() {
    let dir = temp("no-such-dir");
    let o = dir.join("out");
    assert_eq!(
        run(&["--output", o.to_str().unwrap(), "get"]),
        ExitCode::from(2)
    );
}

#[test]
fn usage_names_this_platforms_default_clock_scheme() {
    assert!(
        ptpctl::USAGE.contains(&format!("else {})", ptpd::client::DEFAULT_SOCKET)),
        "{}",
        ptpctl::USAGE
    );
    assert!(ptpctl::USAGE.contains("--output PATH"));
}
