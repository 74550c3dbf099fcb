//! The daemons' emulate feature: what igcd and igbd need to run on a register-level model
//! (`--emulate MODEL`) rather than on a PCI function. The shared driver crate (intel-common)
//! parses the options and runs the daemon on whatever [`OpenFunction`] hands it; only this crate
//! links the emulator (ptp-emu), and only the daemons' `emulate` feature links this crate, so a
//! production build (the Redox recipe) carries no model.
//!
//! Also home of the tests that run intel-common's family code against the models (tests/).

use std::time::Duration;

use intel_common::daemon::options::{EmuTx, Wire};
use intel_common::daemon::{Error, Options};
#[cfg(any(target_os = "linux", target_os = "redox"))]
use intel_common::daemon::{OpenFunction, run_emulated, run_pcid};
use intel_common::family::Family;

/// What every emulated NIC shares, whatever its family: a locally administered MAC derived
/// from the process id (so two emulated hosts differ), its name, the seed, the wire `--wire`
/// names with `--cable-*` noise, and the `--truth` writer.
pub struct EmulatedSetup {
    pub mac: [u8; 6],
    pub name: String,
    pub seed: u64,
    pub wire: Option<Box<dyn ptp_emu::wire::WirePort>>,
    pub truth: Option<ptp_emu::truth::SharedObserver>,
    /// The SDPs' socket (`--pins`).
    pub pins: Option<Box<dyn ptp_emu::pinwire::PinLink>>,
    /// Where the model runs its TX engine (`--emu-tx`).
    pub tx_engine: ptp_emu::TxEngine,
}

/// The family-independent part of an emulated NIC for `model` (logged).
pub fn setup<Fam: Family>(opts: &Options<Fam>, model: &str) -> Result<EmulatedSetup, Error> {
    use ptp_emu::wire::{Cable, Loopback, WirePort};
    let pid = std::process::id();
    let mac = [
        0x02,
        0x1b,
        0x21,
        (pid >> 16) as u8,
        (pid >> 8) as u8,
        pid as u8,
    ];
    let seed = opts.seed.unwrap_or(pid.into());
    let name = if opts.name.is_empty() {
        model.to_string()
    } else {
        opts.name.clone()
    };
    log::info!(
        "{name}: emulated cable {} ns ± {} ns, loss {}; stamps quantum {} ns ± {} ns; seed \
         {seed}",
        opts.cable_delay_ns,
        opts.cable_jitter_ns,
        opts.cable_loss,
        opts.stamp_quantum_ns,
        opts.stamp_jitter_ns,
    );
    // The NIC and its cable draw from different streams of the one seed.
    let cable = Cable::new(opts.cable_delay_ns)
        .with_jitter(opts.cable_jitter_ns)
        .with_loss(opts.cable_loss)
        .with_seed(seed);
    let wire: Option<Box<dyn WirePort>> = match &opts.wire {
        Wire::None => None,
        Wire::Loopback => Some(Box::new(Loopback::default().with_cable(cable))),
        w => Some(socket_wire(w, cable)?),
    };
    let truth = match &opts.truth {
        Some(p) => {
            let w = ptp_emu::truth::TruthWriter::create(p)
                .map_err(|e| Error::Other(format!("--truth {}: {e}", p.display())))?;
            log::info!("{name}: ground truth published at {}", p.display());
            Some(std::sync::Arc::new(w) as ptp_emu::truth::SharedObserver)
        }
        None => None,
    };
    let pins = match &opts.pins {
        Some(p) => Some(pin_socket(p)?),
        None => None,
    };
    let tx_engine = match opts.emu_tx {
        EmuTx::Sync => ptp_emu::TxEngine::Sync,
        EmuTx::Thread => ptp_emu::TxEngine::Thread,
    };
    log::info!("{name}: TX engine runs {tx_engine:?} (--emu-tx)");
    Ok(EmulatedSetup {
        mac,
        name,
        seed,
        wire,
        truth,
        pins,
        tx_engine,
    })
}

/// The `--pins` socket (Linux hosts).
#[cfg(target_os = "linux")]
fn pin_socket(p: &std::path::Path) -> Result<Box<dyn ptp_emu::pinwire::PinLink>, Error> {
    let s = ptp_emu::pinwire::PinSocket::bind(p)
        .map_err(|e| Error::Other(format!("--pins {}: {e}", p.display())))?;
    log::info!("SDPs wired to {}", p.display());
    Ok(Box::new(s))
}

#[cfg(not(target_os = "linux"))]
fn pin_socket(p: &std::path::Path) -> Result<Box<dyn ptp_emu::pinwire::PinLink>, Error> {
    Err(Error::Usage(format!(
        "--pins {} needs a Linux host",
        p.display()
    )))
}

/// Wraps a model in a PCI function whose model thread runs in real time (with `--rt`, 10
/// levels above the driver's threads: hardware is never preempted by its driver).
pub fn function<Fam: Family, D: ptp_pci::emulated::Device + Send + 'static>(
    opts: &Options<Fam>,
    nic: D,
    name: String,
) -> ptp_pci::emulated::EmuFunction<D> {
    let mut f = ptp_pci::emulated::EmuFunction::new(nic, name);
    // The model thread also polls the wire; 1 ms bounds how late an arriving frame is
    // noticed when nothing else wakes the model (arrival stamps do not depend on it).
    f.start_model_thread_with(Duration::from_millis(1), opts.rt.raised(10));
    f
}

/// A `bind:`/`connect:` wire: a Unix datagram socket, which only Linux hosts have.
#[cfg(target_os = "linux")]
fn socket_wire(
    wire: &Wire,
    cable: ptp_emu::wire::Cable,
) -> Result<Box<dyn ptp_emu::wire::WirePort>, Error> {
    use ptp_emu::wire::UnixDatagramWire;
    let io = |what: &str, p: &std::path::Path, e: std::io::Error| {
        Error::Other(format!("wire {what} {}: {e}", p.display()))
    };
    Ok(match wire {
        Wire::Bind(p) => Box::new(
            UnixDatagramWire::bind(p)
                .map_err(|e| io("bind", p, e))?
                .with_cable(cable),
        ),
        Wire::Connect(p) => Box::new(
            UnixDatagramWire::connect(p)
                .map_err(|e| io("connect", p, e))?
                .with_cable(cable),
        ),
        Wire::None | Wire::Loopback => {
            return Err(Error::Other(format!("{wire:?} is not a socket wire")));
        }
    })
}

/// Elsewhere (Redox) an emulated port can be cabled to itself only.
#[cfg(not(target_os = "linux"))]
fn socket_wire(
    wire: &Wire,
    _cable: ptp_emu::wire::Cable,
) -> Result<Box<dyn ptp_emu::wire::WirePort>, Error> {
    Err(Error::Usage(format!(
        "--wire {wire:?} needs a Linux host; use --wire loopback or none here"
    )))
}

/// A daemon's emulated model for `--emulate MODEL`, with its name.
pub type EmulatedModel<Fam, D> = fn(&str, &Options<Fam>) -> Result<(D, String), Error>;

/// Runs the daemon until it fails: on the NIC `model` builds for `--emulate MODEL` (its model
/// thread running in real time), else on the function `--pci` names or pcid-spawner handed it.
#[cfg(any(target_os = "linux", target_os = "redox"))]
pub fn run<Fam: Family, D: ptp_pci::emulated::Device + Send + 'static>(
    opts: Options<Fam>,
    model: EmulatedModel<Fam, D>,
) -> Result<(), Error> {
    match opts.emulate {
        Some(name) => run_emulated(open_model(name, model), opts),
        None => run_pcid(opts),
    }
}

/// What opens `model`'s NIC once the daemon's start-up asks for it.
#[cfg(any(target_os = "linux", target_os = "redox"))]
fn open_model<Fam: Family, D: ptp_pci::emulated::Device + Send + 'static>(
    name: &'static str,
    model: EmulatedModel<Fam, D>,
) -> impl OpenFunction<Fam> {
    move |o: &Options<Fam>| {
        let (nic, label) = model(name, o)?;
        Ok(function(o, nic, label))
    }
}
