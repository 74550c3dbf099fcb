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

/// ptpctl as its own process, with its stderr captured.
fn run_binary(args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_ptpctl"))
        .args(args)
        .output()
        .unwrap()
}

#[test]
fn with_output_an_error_is_written_there_once_and_not_also_to_stderr() {
    // issue 22, failure 6: on Redox --output /scheme/debug and stderr (logd) both end on the
    // serial console, which showed every error twice.
    let out = temp("once");
    let o = out.to_str().unwrap();
    let sock = temp("no-ptpd-once.sock");
    let s = sock.to_str().unwrap();
    for json in [false, true] {
        let mut args = vec!["--socket", s, "--output", o, "get"];
        if json {
            args.insert(0, "--json");
        }
        let r = run_binary(&args);
        assert_eq!(r.status.code(), Some(1));
        assert_eq!(String::from_utf8_lossy(&r.stderr), "", "json {json}");
        assert_eq!(String::from_utf8_lossy(&r.stdout), "", "json {json}");
    }
    let text = std::fs::read_to_string(&out).unwrap();
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), 2, "{text:?}");
    assert!(lines[0].starts_with("ptpctl: cannot reach ptpd"), "{text}");
    assert!(lines[1].contains("\"ok\":false"), "{text}");
    let _ = std::fs::remove_file(&out);
}

#[test]
fn without_output_an_error_still_goes_to_stderr() {
    let sock = temp("no-ptpd-stderr.sock");
    let r = run_binary(&["--socket", sock.to_str().unwrap(), "get"]);
    assert_eq!(r.status.code(), Some(1));
    assert!(
        String::from_utf8_lossy(&r.stderr).starts_with("ptpctl: cannot reach ptpd"),
        "{r:?}"
    );
}

#[test]
fn an_output_this_uid_may_not_open_is_replaced_by_stdout_and_a_missing_one_is_not() {
    // Redox's kernel refuses /scheme/debug to every uid but 0 with EPERM, whatever the flags.
    use std::io::{Error, ErrorKind};
    // EPERM: 1 on Linux and on Redox.
    assert!(ptpctl::stdout_instead(&Error::from_raw_os_error(1)));
    assert!(ptpctl::stdout_instead(&Error::from(
        ErrorKind::PermissionDenied
    )));
    assert!(!ptpctl::stdout_instead(&Error::from(ErrorKind::NotFound)));
}
