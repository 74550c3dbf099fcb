//! Linux host: the driver channel is a SOCK_SEQPACKET socket ptpd connects to, and the clock
//! page is a file in the runtime directory.

use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use ptp_ipc::clockpage::ClockPageWriter;
use ptp_ipc::transport::SeqpacketListener;
use ptp_pci::PciFunction;

use super::access::ChannelAccess;
use super::linux_channel::{self, Sink};
use super::{ClockPageSlot, Device, Error, Options};
use crate::family::Family;

/// `--pci ADDR`: refuses a device the family does not drive before anything is rebound, then
/// binds and opens it ([`ptp_pci::linux`]) and runs the daemon on it.
pub fn run_pci<Fam: Family>(opts: Options<Fam>) -> Result<(), Error> {
    use ptp_pci::linux::{LinuxPci, LinuxPciOptions};
    let addr = opts
        .pci
        .clone()
        .ok_or_else(|| Error::Usage("--pci ADDR is required".into()))?;
    if opts.channel.is_none() {
        return Err(Error::Usage("--channel PATH is required".into()));
    }
    let pci_opts = LinuxPciOptions {
        unbind: opts.unbind,
        ..LinuxPciOptions::default()
    };
    let (vendor, device) = LinuxPci::peek_ids(&addr, &pci_opts)?;
    if let Err(e) = Fam::probe(vendor, device) {
        return Err(Error::Other(format!(
            "--pci {addr}: {e}: {} drives {} parts only; nothing was rebound",
            Fam::DAEMON,
            Fam::MODELS.join("/")
        )));
    }
    let func = LinuxPci::open(&addr, &pci_opts)?;
    run(func, opts)
}

pub fn run<F: PciFunction, Fam: Family>(func: F, opts: Options<Fam>) -> Result<(), Error> {
    let channel_path = opts
        .channel
        .clone()
        .ok_or_else(|| Error::Usage("--channel PATH is required".into()))?;
    let generation = ptp_ipc::time::realtime_ns() ^ (std::process::id() as u64) << 48;
    let page = match &opts.clock_page {
        Some(p) => ClockPageSlot::with(
            Arc::new(ClockPageWriter::create(p)?),
            p.display().to_string(),
        ),
        None => ClockPageSlot::default(),
    };
    let dev = Device::<F, Fam>::bring_up(func, &opts, Arc::new(page), generation)?;
    dev.stop_dma_on_panic();
    let sink = Arc::new(Sink::default());
    let stop = Arc::new(AtomicBool::new(false));
    let _threads = dev.start_threads(sink.clone(), stop.clone());
    // SIGTERM/SIGINT end the serve loop (within its bounded wait) instead of the process, so
    // that the NIC's DMA is stopped before the memory it writes into is freed (Device::claim).
    let term = Arc::new(AtomicBool::new(false));
    for sig in [libc::SIGTERM, libc::SIGINT] {
        signal_hook::flag::register(sig, term.clone())
            .map_err(|e| Error::Other(format!("signal handler: {e}")))?;
    }

    // Root, igcd's own uid and the configured uid/gid only: by the socket file's mode, and
    // again by the peer's credentials at accept (linux_channel).
    let access = ChannelAccess::for_this_process(&opts);
    let listener = SeqpacketListener::bind_with(&channel_path, access.socket_access())?;
    log::info!("serving ptpd on {} ({access})", channel_path.display());
    // After the other threads exist: a thread inherits its creator's policy.
    ptp_ipc::rt::apply(&opts.rt, "channel");
    let out = linux_channel::serve(&dev, &listener, &access, &sink, generation, &term);
    dev.shut_down(&stop, out.as_ref().ok().map(|()| "stop signal"));
    out
}
