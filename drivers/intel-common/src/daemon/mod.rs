//! The driver daemon every family shares (DESIGN.md §1, §5): one daemon per PCI function, which
//! owns the device through [`ptp_pci::PciFunction`], brings it up and runs its threads — the
//! main thread serves ptpd's requests over the driver channel, the time-sync IRQ thread handles
//! link and TX timestamp causes, the queue thread the frames, and the watchdog refreshes the
//! clock page and frees stale TX timestamp slots. It never runs protocol logic.
//!
//! Generic over [`Family`]: `igcd` and `igbd` are this daemon with their family and their
//! emulated models.

pub mod access;
pub mod device;
#[cfg(target_os = "linux")]
mod linux_channel;
pub mod options;
#[cfg(target_os = "linux")]
mod platform_linux;
#[cfg(target_os = "redox")]
pub mod platform_redox;
#[cfg(any(target_os = "linux", target_os = "redox"))]
mod requests;
pub mod startup;

use std::ffi::OsString;
use std::process::ExitCode;

pub use device::{ClockPageSlot, Device, EventSink, NetPort, NetSendError, WATCHDOG_PERIOD};
pub use options::Options;

use crate::family::Family;

/// Errors that stop the daemon.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("{0}")]
    Usage(String),
    #[error("hardware: {0}")]
    Hw(#[from] crate::HwError),
    #[error("pci: {0}")]
    Pci(#[from] ptp_pci::PciError),
    #[error("channel: {0}")]
    Transport(#[from] ptp_ipc::transport::TransportError),
    #[error("clock page: {0}")]
    ClockPage(#[from] ptp_ipc::clockpage::ClockPageError),
    /// The Linux userspace PCI backend (`--pci`).
    #[cfg(target_os = "linux")]
    #[error("{0}")]
    LinuxPci(#[from] ptp_pci::linux::LinuxPciError),
    #[error("{0}")]
    Other(String),
}

/// Parses the command line, sets up logging and runs `run` until it fails; the entry point of
/// the daemon binaries (and of `ptplab igcd ...`).
pub fn main_with_args<Fam: Family>(
    args: impl IntoIterator<Item = OsString>,
    run: impl FnOnce(Options<Fam>) -> Result<(), Error>,
) -> ExitCode {
    let opts = match Options::<Fam>::parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", options::usage::<Fam>());
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("{}: {e}\n\n{}", Fam::DAEMON, options::usage::<Fam>());
            return ExitCode::from(2);
        }
    };
    init_logging(Fam::DAEMON, &opts.name);
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

/// What builds the NIC of a daemon that drives no PCI function of its own (`--emulate`,
/// `--devhost`). The daemons' emulate feature implements it (crate intel-emulate), so this crate
/// links no model; any `FnOnce(&Options<Fam>) -> Result<F, Error>` is one.
pub trait OpenFunction<Fam: Family>: 'static {
    type Function: ptp_pci::PciFunction + 'static;
    fn open(self, opts: &Options<Fam>) -> Result<Self::Function, Error>;
}

impl<Fam, F, C> OpenFunction<Fam> for C
where
    Fam: Family,
    F: ptp_pci::PciFunction + 'static,
    C: FnOnce(&Options<Fam>) -> Result<F, Error> + 'static,
{
    type Function = F;
    fn open(self, opts: &Options<Fam>) -> Result<F, Error> {
        self(opts)
    }
}

/// Runs the daemon on the function `open` builds (an emulated NIC) until it fails.
#[cfg(any(target_os = "linux", target_os = "redox"))]
pub fn run_emulated<Fam: Family>(
    open: impl OpenFunction<Fam>,
    opts: Options<Fam>,
) -> Result<(), Error> {
    // Redox: the function is built inside the start-up sequence, after the readiness protocol
    // (the model thread must not exist when it forks).
    #[cfg(target_os = "redox")]
    return platform_redox::run_emulated(move |o: &Options<Fam>| open.open(o), opts);
    #[cfg(target_os = "linux")]
    {
        let func = open.open(&opts)?;
        platform_linux::run(func, opts)
    }
}

/// Runs the daemon on the function `--pci` names (Linux; on Redox through its pcid channel), or
/// on the one pcid-spawner handed it (Redox), until it fails.
pub fn run_pcid<Fam: Family>(opts: Options<Fam>) -> Result<(), Error> {
    #[cfg(target_os = "linux")]
    if opts.pci.is_some() {
        return platform_linux::run_pci(opts);
    }
    #[cfg(not(any(target_os = "linux", target_os = "redox")))]
    if opts.pci.is_some() {
        return Err(Error::Usage("--pci needs a Linux or Redox host".into()));
    }
    // Redox: the channel pcid-spawner handed us, or with `--pci ADDR` the function's channel
    // opened by path (a driver restarted by hand).
    #[cfg(target_os = "redox")]
    if platform_redox::started_by_pcid() || opts.pci.is_some() {
        return platform_redox::run_pcid(opts);
    }
    let _ = opts;
    Err(Error::Usage(format!(
        "no device: pass --emulate {}, --pci ADDR (Linux) or start under pcid (Redox)",
        Fam::MODELS.join("|")
    )))
}
