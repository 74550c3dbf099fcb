//! Set-up the igcd integration tests share: the options a test passes, the emulated i225 they
//! name, and a driver brought up on it.

use igcd::Options;
use igcd::daemon::Device;
use ptp_emu::igc::I225;
use ptp_pci::emulated::EmuFunction;

/// The parsed `args` and the emulated function their `--emulate` names, not yet brought up
/// (a test may prepare the model first).
pub fn emulated(args: &[&str]) -> (Options, EmuFunction<I225>) {
    let opts = Options::parse(args.iter().map(Into::into))
        .unwrap()
        .unwrap();
    let func = igcd::options::emulated_function(opts.emulate.unwrap(), &opts).unwrap();
    (opts, func)
}

/// A driver brought up, as the daemon does, on the function [`emulated`] gives.
pub fn bring_up(opts: &Options, func: EmuFunction<I225>) -> Device<EmuFunction<I225>> {
    Device::bring_up(func, opts, Default::default(), 1).unwrap()
}

/// [`emulated`] then [`bring_up`].
#[allow(dead_code)] // not every test binary brings a driver up unprepared
pub fn device(args: &[&str]) -> Device<EmuFunction<I225>> {
    let (opts, func) = emulated(args);
    bring_up(&opts, func)
}
