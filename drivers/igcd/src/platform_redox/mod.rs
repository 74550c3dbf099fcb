//! Redox: igcd as a PCI driver daemon started by pcid-spawner (shared/reference/
//! redox-platform.md). Type-checked for x86_64-unknown-redox, not yet run on Redox.
//!
//! Start-up order (§9, §10): readiness protocol first (it may fork, so before any thread);
//! the pcid channel; logging; BARs, vectors, DMA and link through the generic
//! [`Device::bring_up`]; the clock page; the scheme sockets and the loop's wake pipe and timer;
//! then `setrens(0, 0)`, readiness, the driver threads and the event loop.
//!
//! Threads: the IRQ threads and the watchdog are [`Device::start_threads`]'s, as on Linux (the
//! time-sync causes are handled on the IRQ thread, DESIGN.md §5), so the irq fds belong to them
//! and not to the main loop. The main loop is one `redox_event` queue over the scheme sockets,
//! the wake pipe (events from the IRQ threads) and a time-scheme timer (periodic retry of
//! parked reads and event posting).

mod channel;
mod logging;
mod net;

use std::cell::RefCell;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;

use event::{EventFlags, EventQueue};
use ptp_ipc::clockpage::ClockPageWriter;
use ptp_ipc::redox::daemon::Readiness;
use ptp_ipc::redox::timer::{Timer, mono_ns};
use ptp_pci::redox::RedoxPciFunction;
use redox_scheme::scheme::{SchemeSync, register_sync_scheme};
use redox_scheme::wrappers::ReadinessBased;
use redox_scheme::{Response, SignalBehavior, Socket};

pub use logging::Tee as LogTarget;
pub use net::{IgcNet, NetAdapter, NetError, NetScheme};

use crate::daemon::{Device, WATCHDOG_PERIOD, clock_page_publisher};
use crate::{Error, Options};
use channel::{ChannelScheme, Sink, WakePipe};

/// Requests read from a scheme socket per pass.
const QUEUE: usize = 32;

event::user_data! {
    enum Source {
        Channel,
        Net,
        Wake,
        Timer,
    }
}

fn os(what: &str, e: impl std::fmt::Display) -> Error {
    Error::Other(format!("{what}: {e}"))
}

/// Whether this process was started by pcid-spawner (the channel fd is in the environment).
pub fn started_by_pcid() -> bool {
    std::env::var_os(ptp_pci::redox::CHANNEL_ENV).is_some()
}

/// One scheme socket with its request queue (parked requests included).
struct Served<'s> {
    socket: &'s Socket,
    queue: ReadinessBased<'s>,
}

impl<'s> Served<'s> {
    fn new(socket: &'s Socket) -> Self {
        Self {
            socket,
            queue: ReadinessBased::new(socket, QUEUE),
        }
    }

    /// Reads and handles new requests, retries parked ones, writes the responses and posts
    /// EVENT_READ to `readable` handles.
    fn pump<S: SchemeSync>(
        &mut self,
        scheme: &RefCell<S>,
        read_new: bool,
        readable: impl Fn(&S) -> Vec<usize>,
    ) -> Result<(), Error> {
        if read_new {
            // Ok(false) is EOF: the kernel dropped the scheme, nothing more will come.
            if !self
                .queue
                .read_requests()
                .map_err(|e| os("scheme read", e))?
            {
                return Err(Error::Other("scheme socket closed".into()));
            }
            self.queue.process_requests(|| scheme.borrow_mut());
        }
        self.queue
            .poll_all_requests(|| scheme.borrow_mut())
            .map_err(|e| os("scheme retry", e))?;
        self.queue
            .write_responses()
            .map_err(|e| os("scheme write", e))?;
        for id in readable(&scheme.borrow()) {
            let ev = Response::post_fevent(id, syscall::EventFlags::EVENT_READ.bits());
            self.socket
                .write_response(ev, SignalBehavior::Restart)
                .map_err(|e| os("fevent", e))?;
        }
        Ok(())
    }
}

/// Runs igcd on the function pcid handed us, until a fatal error.
pub fn run(opts: Options) -> Result<(), Error> {
    let readiness = Readiness::start().map_err(|e| os("readiness", e))?;
    let mut func = RedoxPciFunction::from_env().map_err(ptp_pci::PciError::from)?;
    let pci_name = func.name();
    logging::open(&pci_name);
    log::info!("{pci_name}: {:?}", func.info().full_device_id);
    // Before setrens: DMA allocations after it still need the translation handle (§4, §10).
    func.prepare_dma().map_err(ptp_pci::PciError::from)?;

    // The clock page: a shm segment readers map (ipc/src/clockpage/redox.rs).
    let generation = ptp_ipc::time::realtime_ns() ^ (u64::from(std::process::id()) << 48);
    let page_path = opts
        .clock_page
        .as_ref()
        .map(|p| p.display().to_string())
        .unwrap_or_else(|| format!("/scheme/shm/ptp-igc-{pci_name}"));
    let page = match ClockPageWriter::create(&page_path) {
        Ok(w) => Some(Arc::new(w)),
        Err(e) => {
            log::warn!("no clock page at {page_path}: {e}");
            None
        }
    };
    let page_path = if page.is_some() {
        page_path
    } else {
        String::new()
    };
    let publisher = clock_page_publisher(page, generation);
    let dev = Device::bring_up(func, &opts, page_path, publisher)?;

    let sink = Arc::new(Sink::new(WakePipe::new().map_err(|e| os("pipe", e))?));
    let chan_name = format!("ptpdrv.{pci_name}_igc");
    let chan_socket = Socket::nonblock().map_err(|e| os("scheme socket", e))?;
    let chan = RefCell::new(ChannelScheme::new(
        &dev,
        sink.clone(),
        chan_name.clone(),
        generation,
    ));
    register_sync_scheme(&chan_socket, &chan_name, &mut *chan.borrow_mut())
        .map_err(|e| os(&format!("register scheme {chan_name}"), e))?;

    let net_name = format!("network.{pci_name}_igc");
    // Non-PTP frames go to smolnetd through this scheme; each one wakes the loop.
    let waker = sink.clone();
    let port = dev
        .attach_netstack(move || waker.wake_pipe().wake())
        .ok_or_else(|| Error::Other("network stack already attached".into()))?;
    let net = RefCell::new(NetScheme::new(
        IgcNet {
            port,
            mac: dev.caps.mac,
        },
        net_name.clone(),
    ));
    let net_socket = if net.borrow().adapter().carries_frames() {
        let s = Socket::nonblock().map_err(|e| os("scheme socket", e))?;
        register_sync_scheme(&s, &net_name, &mut *net.borrow_mut())
            .map_err(|e| os(&format!("register scheme {net_name}"), e))?;
        Some(s)
    } else {
        log::warn!("{net_name} not registered: the adapter moves no frames");
        None
    };

    let timer = Timer::open().map_err(|e| os("/scheme/time", e))?;
    let queue = EventQueue::<Source>::new().map_err(|e| os("event queue", e))?;
    let sub = |fd: usize, src: Source| {
        queue
            .subscribe(fd, src, EventFlags::READ)
            .map_err(|e| os("subscribe", e))
    };
    sub(chan_socket.inner().raw(), Source::Channel)?;
    if let Some(s) = &net_socket {
        sub(s.inner().raw(), Source::Net)?;
    }
    sub(sink.wake_pipe().read_fd(), Source::Wake)?;
    sub(timer.raw(), Source::Timer)?;

    // Everything is open: drop into a namespace with only `memory` and `pipe` (§10).
    libredox::call::setrens(0, 0).map_err(|e| os("setrens", e))?;
    readiness.ready().map_err(|e| os("readiness", e))?;
    log::info!("serving ptpd on /scheme/{chan_name}/ptp");

    let stop = Arc::new(AtomicBool::new(false));
    let _threads = dev.start_threads(sink.clone(), stop);

    let mut chan_q = Served::new(&chan_socket);
    let mut net_q = net_socket.as_ref().map(Served::new);
    let period = u64::try_from(WATCHDOG_PERIOD.as_nanos()).unwrap_or(u64::MAX);
    timer
        .arm_at(mono_ns().saturating_add(period))
        .map_err(|e| os("timer", e))?;
    loop {
        let ev = queue.next_event().map_err(|e| os("event queue", e))?;
        let (chan_new, net_new) = match ev.user_data {
            Source::Channel => (true, false),
            Source::Net => (false, true),
            Source::Wake => {
                sink.wake_pipe().drain();
                (false, false)
            }
            Source::Timer => {
                timer
                    .arm_at(mono_ns().saturating_add(period))
                    .map_err(|e| os("timer", e))?;
                (false, false)
            }
        };
        chan_q.pump(&chan, chan_new, ChannelScheme::readable_handles)?;
        if let Some(q) = &mut net_q {
            q.pump(&net, net_new, NetScheme::readable_handles)?;
        }
    }
}
