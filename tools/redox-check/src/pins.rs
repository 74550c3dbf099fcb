//! `ptp-redox-check pins`: the pins of the device pcid gave the driver, driven through ptpd's
//! clock scheme as a user would (issue 29 on Redox): once ptpd serves the clock, SDP0 set to a
//! periodic output and a 1 PPS started, then SDP1 set to external timestamps and four events
//! read. One console line per step, for the host test to judge on ground truth:
//!
//! ```text
//! REDOX-PINS perout first_ns 1796507810000000000
//! REDOX-PINS extts 1796507812000000123 1796507812100000123 ...
//! ```

use std::time::{Duration, Instant};

/// The line prefix the host test reads.
pub const PREFIX: &str = "REDOX-PINS";
/// The longest wait for ptpd to serve the clock.
const UP_WITHIN: Duration = Duration::from_secs(120);
const PTPCTL: &str = "/scheme/initfs/bin/ptpctl";

/// `ptpctl --json ARGS`: its JSON answer, or why not.
fn ptpctl(args: &[&str]) -> Result<serde_json::Value, String> {
    let out = std::process::Command::new(PTPCTL)
        .arg("--json")
        .args(args)
        .stdin(crate::guest::null_input())
        .output()
        .map_err(|e| format!("ptpctl: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    let v: serde_json::Value = serde_json::from_str(text.trim())
        .map_err(|e| format!("ptpctl {args:?}: {e}: {}", text.trim()))?;
    if v["ok"] != serde_json::Value::Bool(true) {
        return Err(format!("ptpctl {args:?}: {}", text.trim()));
    }
    Ok(v)
}

/// The whole check, its lines through `say`.
pub fn run(say: impl Fn(&str)) -> Result<(), String> {
    let t0 = Instant::now();
    while ptpctl(&["status"]).map_or(true, |v| v["driver_up"] != true) {
        if t0.elapsed() > UP_WITHIN {
            return Err(format!("ptpd's driver not up within {UP_WITHIN:?}"));
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    ptpctl(&["pin", "0", "perout", "0"])?;
    let v = ptpctl(&["perout", "0", "1"])?;
    say(&format!("{PREFIX} perout first_ns {}", v["first_ns"]));
    ptpctl(&["pin", "1", "extts", "0"])?;
    let v = ptpctl(&["-n", "4", "--timeout", "20", "extts", "0"])?;
    let ns: Vec<String> = v["events_ns"]
        .as_array()
        .ok_or("no events_ns")?
        .iter()
        .map(|x| x.to_string())
        .collect();
    say(&format!("{PREFIX} extts {}", ns.join(" ")));
    Ok(())
}
