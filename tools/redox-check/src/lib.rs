//! ptp-redox-check: the in-guest half of `tests/redox_boot.rs`.
//!
//! Runs inside a booted Redox image as a oneshot init unit after ptpd, as root. It drives issue
//! 22's stage-1 scenarios by spawning the project's binaries from the initfs (`ptpctl`,
//! `igcd-emu`, `ptpd`), judges what they print, and writes one line per check to the serial
//! console (`/scheme/debug`), then powers the guest off:
//!
//! ```text
//! REDOX-CHECK default-ready ok init's ptpd serves after 12ms: driver_up true, ...
//! REDOX-CHECK igcd-by-hand FAIL igcd-emu exited (exit status: 1): ... File exists
//! REDOX-FIGURE {"figure":"bench","channel":"socket","exact_p50_ns":1500000,...}
//! REDOX-CHECK-DONE
//! ```
//!
//! The host test reads them back with [`report::Serial`]. The sequencing is in [`scenarios`],
//! the rules in [`judge`] (pure, unit-tested here), the processes in [`guest`].

pub mod guest;
pub mod judge;
pub mod net;
pub mod pins;
pub mod report;
pub mod restart;
pub mod scenarios;

use std::time::Duration;

/// The whole run: every scenario, the summary, `REDOX-CHECK-DONE`. Returns the number of
/// failed checks.
pub fn run(g: &mut impl guest::Guest, plan: scenarios::Plan) -> usize {
    let mut c = scenarios::Checker::new(g, plan);
    c.run_all();
    let failed = c
        .results
        .iter()
        .filter(|r| r.verdict == report::Verdict::Fail)
        .count();
    let total = c.results.len();
    drop(c);
    g.emit(
        &report::Check::new(
            "summary",
            if failed == 0 {
                report::Verdict::Ok
            } else {
                report::Verdict::Fail
            },
            format!("{} of {total} checks failed", failed),
        )
        .to_string(),
    );
    g.emit(report::DONE);
    // Let the console drain before the power goes.
    g.sleep(Duration::from_millis(200));
    failed
}
