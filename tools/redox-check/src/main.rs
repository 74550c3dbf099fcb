//! `ptp-redox-check [BIN_DIR [PTPD_CONFIG]]`: see the library. Defaults to the initfs paths of
//! the test image (`/scheme/initfs/bin`, `/scheme/initfs/etc/ptpd.toml`).
//! `ptp-redox-check net ADDR/LEN PORT SECONDS`: the network check ([`ptp_redox_check::net`]).
//! `ptp-redox-check restart PROGRAM ADDR SLAVE_SECS`: a driver restarted by hand
//! ([`ptp_redox_check::restart`]).
//! `ptp-redox-check pins`: the device's pins through ptpd ([`ptp_redox_check::pins`]).

use ptp_redox_check::{guest, run, scenarios::Plan};

/// A mode's job: its plan and where its lines go.
type Job<P> = fn(&P, &dyn Fn(&str)) -> Result<(), String>;

/// A one-job mode (`net`, `restart`): its lines and its failure on the serial console.
fn mode<P>(
    args: &[String],
    prefix: &str,
    parse: fn(&[String]) -> Result<P, String>,
    run: Job<P>,
) -> std::process::ExitCode {
    let console = guest::Console::open("/scheme/debug");
    let say = |l: &str| console.line(l);
    match parse(args).and_then(|p| run(&p, &say)) {
        Ok(()) => std::process::ExitCode::SUCCESS,
        Err(e) => {
            say(&format!("{prefix} FAIL {e}"));
            std::process::ExitCode::FAILURE
        }
    }
}

fn main() -> std::process::ExitCode {
    let all: Vec<String> = std::env::args().skip(1).collect();
    use ptp_redox_check::{net, pins, restart};
    match all.first().map(String::as_str) {
        Some("net") => {
            return mode(&all[1..], net::PREFIX, net::parse, |p, say| {
                net::run(p, say).map(drop)
            });
        }
        Some("pins") => {
            return mode(
                &all[1..],
                pins::PREFIX,
                |_| Ok(()),
                |_: &(), say| pins::run(say),
            );
        }
        Some("restart") => {
            return mode(&all[1..], restart::PREFIX, restart::parse, |p, say| {
                restart::run(p, say).map(drop)
            });
        }
        _ => {}
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
