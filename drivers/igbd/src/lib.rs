//! igbd: one daemon per i210/i211, i350/i354 or 82576 PCI function (DESIGN.md §1, §5).
//!
//! The same daemon as igcd — `intel_common::daemon`: bring-up, IRQ threads, driver channel,
//! clock page, Redox main loop — over the igb family ([`intel_common::igb::Igb`]), whose
//! behaviour follows the MAC the device ID names. What is igbd's own is its emulated models
//! (`--emulate i210|i211|i350|82576`, [`options`]).

pub mod options;

use std::ffi::OsString;
use std::process::ExitCode;

use intel_common::igb::Igb;

pub use intel_common::daemon::Error;

/// igbd's command line.
pub type Options = intel_common::daemon::Options<Igb>;

/// Entry point of the `igbd` binary.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    intel_common::daemon::main_with_args::<Igb>(args, run)
}

/// Opens the device the options name and runs the daemon until it fails.
pub fn run(opts: Options) -> Result<(), Error> {
    if opts.emu_faults.is_some() {
        return Err(Error::Usage(
            "--emu-faults: igbd's models take no injected faults yet (igcd's i225 does)".into(),
        ));
    }
    #[cfg(all(feature = "emulate", any(target_os = "linux", target_os = "redox")))]
    return intel_emulate::run(opts, options::emulated_model);
    #[cfg(not(all(feature = "emulate", any(target_os = "linux", target_os = "redox"))))]
    intel_common::daemon::run_pcid(opts)
}
