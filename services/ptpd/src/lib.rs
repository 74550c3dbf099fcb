//! ptpd: the PTP service (DESIGN.md §6).
//!
//! It connects to one driver channel per clock ([`driver_link`]), survives driver restarts
//! (reconnecting, and answering `NoDevice` while a driver is gone), and serves the clock scheme
//! ([`scheme`]) to applications, which use the [`client`] library.

// The client library: Unix socket on Linux hosts, the `/scheme/ptp` handle on Redox.
#[cfg(any(target_os = "linux", target_os = "redox"))]
pub mod client;
pub mod config;
pub mod driver_link;
pub mod mgmt_access;
#[cfg(target_os = "linux")]
pub mod mgmt_socket;
#[cfg(target_os = "linux")]
pub mod platform_linux;
#[cfg(target_os = "redox")]
pub mod platform_redox;
pub mod ptp;
pub mod scheme;
pub mod service;
#[cfg(target_os = "linux")]
#[doc(hidden)]
pub mod testing;
pub mod timesource;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

pub const USAGE: &str = "\
usage: ptpd -f CONFIG.toml
  -f, --config PATH   configuration (see services/ptpd/src/config.rs)
  --help
";

/// statime logs every filter step at info level; ptpd writes its own ptp4l-style lines, so
/// statime's are only shown from warnings up unless RUST_LOG asks for more.
pub const DEFAULT_LOG_FILTER: &str = "info,statime=warn";

/// Entry point shared by the `ptpd` binary and `ptplab ptpd ...`.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let path = match parse_args(args) {
        Ok(Some(p)) => p,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ptpd: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let env = env_logger::Env::default().default_filter_or(DEFAULT_LOG_FILTER);
    let _ = env_logger::Builder::from_env(env)
        .format(|buf, rec| {
            use std::io::Write;
            writeln!(buf, "ptpd: {}: {}", rec.level(), rec.args())
        })
        .try_init();
    let config = match config::Config::load(&path) {
        Ok(c) => c,
        Err(e) => {
            log::error!("{e}");
            return ExitCode::from(2);
        }
    };
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn parse_args(args: impl IntoIterator<Item = OsString>) -> Result<Option<PathBuf>, String> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut path = None;
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Short('f') | Long("config") => {
                path = Some(p.value().map_err(|e| e.to_string())?.into())
            }
            Long("help") | Short('h') => return Ok(None),
            _ => return Err(arg.unexpected().to_string()),
        }
    }
    path.map(Some)
        .ok_or_else(|| "-f CONFIG is required".to_string())
}

/// Runs the service until it fails.
pub fn run(config: config::Config) -> Result<(), String> {
    #[cfg(target_os = "linux")]
    {
        platform_linux::run(config)
    }
    #[cfg(target_os = "redox")]
    {
        platform_redox::run(config)
    }
    #[cfg(not(any(target_os = "linux", target_os = "redox")))]
    {
        let _ = config;
        Err("this platform has no clock scheme transport yet".into())
    }
}
