//! igcd's emulated models: `--emulate i225|i226` on a register-level i225 (host builds).

#[cfg(feature = "emulate")]
use crate::{Error, Options};

/// Builds the emulated PCI function for `model`, cabled as `--wire` says, with its model thread
/// running in real time.
#[cfg(feature = "emulate")]
pub fn emulated_function(
    model: &str,
    opts: &Options,
) -> Result<ptp_pci::emulated::EmuFunction<ptp_emu::igc::I225>, Error> {
    let (nic, name) = emulated_model(model, opts)?;
    Ok(intel_emulate::function(opts, nic, name))
}

/// The model `emulated_function` serves, with its name: cabled as `--wire` says, publishing
/// to `--truth`. Also what `ptplab devhost` serves to a QEMU guest.
#[cfg(feature = "emulate")]
pub fn emulated_model(model: &str, opts: &Options) -> Result<(ptp_emu::igc::I225, String), Error> {
    use ptp_emu::clock::HostClock;
    use ptp_emu::igc::{I225, I225Config};

    let mut cfg = match model {
        "i225" => I225Config::i225(HostClock::new().source()),
        "i226" => I225Config::i226(HostClock::new().source()),
        other => return Err(Error::Usage(format!("igcd emulates no {other:?}"))),
    };
    let setup = intel_emulate::setup(opts, model)?;
    cfg.mac = setup.mac;
    cfg.osc_error_ppb = (opts.osc_ppm * 1000.0).round() as i64;
    cfg.stamp_quantum_ns = opts.stamp_quantum_ns;
    cfg.stamp_jitter_ns = opts.stamp_jitter_ns;
    cfg.seed = setup.seed;
    let mut nic = I225::new(cfg);
    nic.set_tx_engine(setup.tx_engine);
    if let Some(w) = setup.wire {
        nic.attach_wire(w);
    }
    if let Some(p) = setup.pins {
        nic.attach_pins(p);
    }
    if setup.truth.is_some() {
        nic.set_observer(setup.truth);
    }
    Ok((nic, setup.name))
}
