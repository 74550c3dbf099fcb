//! `ptp-redox-check [BIN_DIR [PTPD_CONFIG]]`: see the library. Defaults to the initfs paths of
//! the test image (`/scheme/initfs/bin`, `/scheme/initfs/etc/ptpd.toml`).
//! `ptp-redox-check net ADDR/LEN PORT SECONDS`: the network check ([`ptp_redox_check::net`]).
//! `ptp-redox-check restart PROGRAM ADDR SLAVE_SECS`: a driver restarted by hand
//! ([`ptp_redox_check::restart`]).

use ptp_redox_check::{guest, run, scenarios::Plan};

fn net(args: &[String]) -> std::process::ExitCode {
    let console = guest::Console::open("/scheme/debug");
    let say = |l: &str| console.line(l);
    match ptp_redox_check::net::parse(args).and_then(|p| ptp_redox_check::net::run(&p, say)) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("{} FAIL {e}", ptp_redox_check::net::PREFIX));
            std::process::ExitCode::FAILURE
        }
    }
}

fn restart(args: &[String]) -> std::process::ExitCode {
    use ptp_redox_check::restart;
    let console = guest::Console::open("/scheme/debug");
    let say = |l: &str| console.line(l);
    match restart::parse(args).and_then(|p| restart::run(&p, say)) {
        Ok(_) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("{} FAIL {e}", restart::PREFIX));
            std::process::ExitCode::FAILURE
        }
    }
}

fn main() -> std::process::ExitCode {
    let all: Vec<String> = std::env::args().skip(1).collect();
    if all.first().map(String::as_str) == Some("net") {
        return net(&all[1..]);
    }
    if all.first().map(String::as_str) == Some("restart") {
        return restart(&all[1..]);
    }
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "/scheme/initfs/bin".into());
    let config = args
        .next()
        .unwrap_or_else(|| "/scheme/initfs/etc/ptpd.toml".into());
    let console = guest::Console::open("/scheme/debug");
    let mut g = guest::System::new(bin, console.clone());
    let plan = Plan {
        ptpd_config: config,
        bench_n: 1000,
    };
    let failed = run(&mut g, plan);
    if cfg!(target_os = "redox") {
        if let Err(e) = guest::power_off() {
            console.line(&format!("ptp-redox-check: power off: {e}"));
        }
    }
    if failed == 0 {
        std::process::ExitCode::SUCCESS
    } else {
        std::process::ExitCode::FAILURE
    }
}
