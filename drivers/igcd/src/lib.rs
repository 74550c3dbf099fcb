//! igcd: one daemon per i225/i226 PCI function (DESIGN.md §1, §5).
//!
//! The daemon owns the device through [`ptp_pci::PciFunction`], brings it up, and then runs three
//! threads: the main thread serves ptpd's requests over the driver channel, the IRQ thread blocks
//! on the "other" MSI-X vector (link and time-sync causes), and the watchdog refreshes the clock
//! page and (with timestamping) frees stale TX timestamp slots. It never runs protocol logic.

pub mod access;
pub mod daemon;
#[cfg(target_os = "linux")]
mod linux_channel;
pub mod options;
#[cfg(target_os = "linux")]
mod platform_linux;
#[cfg(target_os = "redox")]
pub mod platform_redox;
pub mod startup;

use std::ffi::OsString;
use std::process::ExitCode;

pub use options::Options;

/// Errors that stop the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("hardware: {0}")]
    Hw(#[from] intel_common::HwError),
    #[error("pci: {0}")]
    Pci(#[from] ptp_pci::PciError),
    #[error("channel: {0}")]
    Transport(#[from] ptp_ipc::transport::TransportError),
    #[error("clock page: {0}")]
    ClockPage(#[from] ptp_ipc::clockpage::ClockPageError),
    #[error("{0}")]
    Other(String),
}

/// Entry point shared by the `igcd` binary and `ptplab igcd ...`.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let opts = match Options::parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", options::USAGE);
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("igcd: {e}\n\n{}", options::USAGE);
            return ExitCode::from(2);
        }
    };
    init_logging("igcd", &opts.name);
    match run(opts) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            log::error!("{e}");
            ExitCode::FAILURE
        }
    }
}

fn init_logging(prog: &str, name: &str) {
    let tag = if name.is_empty() {
        prog.to_string()
    } else {
        format!("{prog}[{name}]")
    };
    let mut b = env_logger::Builder::from_env(env_logger::Env::default().default_filter_or("info"));
    b.format(move |buf, rec| {
        use std::io::Write;
        writeln!(buf, "{tag}: {}: {}", rec.level(), rec.args())
    });
    // Redox: stderr plus the logging scheme's file (reference §11).
    #[cfg(target_os = "redox")]
    b.target(env_logger::Target::Pipe(Box::new(
        platform_redox::LogTarget,
    )));
    let _ = b.try_init();
}

/// Opens the device the options name and runs the daemon until it fails.
#[cfg_attr(not(feature = "emulate"), allow(unused_variables))]
pub fn run(opts: Options) -> Result<(), Error> {
    // Redox: the emulated function is built inside the start-up sequence, after the readiness
    // protocol (the model thread must not exist when it forks).
    #[cfg(all(feature = "emulate", target_os = "redox"))]
    if let Some(model) = opts.emulate {
        return platform_redox::run_emulated(
            move |o: &Options| options::emulated_function(model, o),
            opts,
        );
    }
    #[cfg(all(feature = "emulate", not(target_os = "redox")))]
    if let Some(model) = opts.emulate {
        let func = options::emulated_function(model, &opts)?;
        return platform_run(func, opts);
    }
    // Redox: the function pcid-spawner handed us (no --emulate).
    #[cfg(target_os = "redox")]
    if platform_redox::started_by_pcid() {
        return platform_redox::run_pcid(opts);
    }
    Err(Error::Usage(
        "no device: pass --emulate i225|i226 or start under pcid (Redox)".into(),
    ))
}

#[cfg(target_os = "linux")]
fn platform_run<F>(func: F, opts: Options) -> Result<(), Error>
where
    F: ptp_pci::PciFunction,
    F::Bar: 'static,
{
    platform_linux::run(func, opts)
}

#[cfg(not(any(target_os = "linux", target_os = "redox")))]
#[allow(dead_code)]
fn platform_run<F: ptp_pci::PciFunction>(_func: F, _opts: Options) -> Result<(), Error> {
    Err(Error::Other(
        "this platform has no host transport yet".into(),
    ))
}
