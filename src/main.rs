//! ptplab: boots emulated PTP hosts as real processes. See `cargo run --release -- --help`.
//!
//! The binary is also a multi-call entry for the daemons it starts (`ptplab igcd ...`,
//! `ptplab igbd ...`,
//! `ptplab ptpd ...`, `ptplab ptpctl ...`, `ptplab tsperf ...`,
//! `ptplab devhost ...`, `ptplab tap-bridge ...`, `ptplab gps ...`), so `cargo run` needs no other binary built: each host
//! is still separate processes running the daemons' own entry points.

use std::process::ExitCode;

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1).peekable();
    match args.peek().and_then(|a| a.to_str()) {
        Some("igcd") => igcd::main_with_args(args.skip(1)),
        Some("igbd") => igbd::main_with_args(args.skip(1)),
        Some("ptpd") => ptpd::main_with_args(args.skip(1)),
        Some("ptpctl") => ptpctl::main_with_args(args.skip(1)),
        Some("devhost") => redox_ptp::devhost::main_with_args(args.skip(1)),
        Some("tap-bridge") => redox_ptp::tap::main_with_args(args.skip(1)),
        Some("gps") => redox_ptp::gps::main_with_args(args.skip(1)),
        Some("tsperf") => {
            // tsperf starts the daemon as a separate process: this same binary, `ptplab igcd`
            // or `ptplab igbd`.
            let verb = |v: &str| {
                std::env::current_exe()
                    .map(|p| vec![p.into_os_string(), v.into()])
                    .unwrap_or_default()
            };
            let daemons = tsperf::Daemons {
                igcd: verb("igcd"),
                igbd: verb("igbd"),
            };
            tsperf::main_with_args(args.skip(1), daemons)
        }
        _ => redox_ptp::lab::main_with_args(args),
    }
}
