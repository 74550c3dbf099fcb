//! igcd: one daemon per i225/i226 PCI function (DESIGN.md §1, §5).
//!
//! The daemon is `intel_common::daemon` over the i225 family ([`intel_common::igc::Igc`]);
//! what is igcd's own is its emulated models (`--emulate i225|i226`, [`options`]).

#[cfg(all(feature = "emulate", target_os = "linux"))]
pub mod faults;
pub mod options;

use std::ffi::OsString;
use std::process::ExitCode;

use intel_common::igc::Igc;

pub use intel_common::daemon::Error;

/// igcd's command line.
pub type Options = intel_common::daemon::Options<Igc>;

/// The daemon over the i225 family.
pub mod daemon {
    pub use intel_common::daemon::{ClockPageSlot, EventSink, NetPort, NetSendError};

    /// A brought-up i225/i226.
    pub type Device<F> = intel_common::daemon::Device<F, intel_common::igc::Igc>;
}

/// Entry point shared by the `igcd` binary and `ptplab igcd ...`.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    intel_common::daemon::main_with_args::<Igc>(args, run)
}

/// Opens the device the options name and runs the daemon until it fails.
pub fn run(opts: Options) -> Result<(), Error> {
    #[cfg(all(feature = "emulate", target_os = "linux"))]
    if let Some(path) = opts.devhost.clone() {
        return intel_common::daemon::run_emulated(
            move |_: &Options| Ok(ptp_emu::proxy::client::ProxyFunction::connect(&path)?),
            opts,
        );
    }
    #[cfg(all(feature = "emulate", target_os = "linux"))]
    if let (Some(model), Some(path)) = (opts.emulate, opts.emu_faults.clone()) {
        // The model's fault socket beside the daemon (`faults`): built with the function, so
        // it reaches the NIC the driver runs on.
        return intel_common::daemon::run_emulated(
            move |o: &Options| {
                let (nic, label) = options::emulated_model(model, o)?;
                let f = intel_emulate::function(o, nic, label);
                faults::serve(&path, f.control())?;
                Ok(f)
            },
            opts,
        );
    }
    #[cfg(all(feature = "emulate", any(target_os = "linux", target_os = "redox")))]
    return intel_emulate::run(opts, options::emulated_model);
    #[cfg(not(all(feature = "emulate", any(target_os = "linux", target_os = "redox"))))]
    intel_common::daemon::run_pcid(opts)
}

#[cfg(all(test, feature = "emulate"))]
mod startup_tests;
