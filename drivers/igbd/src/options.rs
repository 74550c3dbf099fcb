//! igbd's emulated models: `--emulate i210|i211|i350|82576` on ptp-emu's register-level igb
//! model (host builds).

#[cfg(feature = "emulate")]
use crate::{Error, Options};

/// The emulated NIC for `--emulate model`, with its name: cabled as `--wire` says, publishing
/// to `--truth`.
#[cfg(feature = "emulate")]
pub fn emulated_model(model: &str, opts: &Options) -> Result<(ptp_emu::igb::Igb, String), Error> {
    use ptp_emu::clock::HostClock;
    use ptp_emu::igb::{Igb, IgbConfig};

    let bad = |e: ptp_emu::igb::IgbError| Error::Usage(format!("--emulate {model}: {e}"));
    let mut cfg = IgbConfig::for_name(model, HostClock::new().source()).map_err(bad)?;
    let setup = intel_emulate::setup(opts, model)?;
    cfg.mac = setup.mac;
    cfg.osc_error_ppb = (opts.osc_ppm * 1000.0).round() as i64;
    cfg.stamp_quantum_ns = opts.stamp_quantum_ns;
    cfg.stamp_jitter_ns = opts.stamp_jitter_ns;
    cfg.seed = setup.seed;
    let mut nic = Igb::new(cfg).map_err(bad)?;
    nic.nic_mut().set_tx_engine(setup.tx_engine);
    if let Some(w) = setup.wire {
        nic.nic_mut().attach_wire(w);
    }
    if let Some(p) = setup.pins {
        nic.attach_pins(p);
    }
    if let Some(t) = setup.truth.clone() {
        // i350/82576: ptpd reads the timecounter, so the truth record carries its mapping.
        intel_common::igb::publish_timecounters_to(Box::new(move |change| {
            t.driver_clock_update(&mut || {
                let s = change();
                Some(ptp_emu::truth::DriverClock {
                    count: s.count,
                    fp: s.fp,
                    mask: s.mask,
                    shift: s.shift,
                    mult: s.mult,
                    mult_shift: s.mult_shift,
                })
            })
        }));
    }
    if setup.truth.is_some() {
        nic.set_observer(setup.truth);
    }
    Ok((nic, setup.name))
}
