//! Redox: a driver daemon (igcd, igbd), on the function pcid-spawner hands it or on an
//! emulated NIC (`--emulate`, loopback wire), through one serve loop
//! (shared/reference/redox-platform.md). Scheme, clock page and log names carry the family's
//! short name ([`Family::SHORT`]): `ptpdrv.<name>_igc`, `ptpdrv.<name>_igb`.
//!
//! Start-up is [`super::startup::start`] over [`RedoxPlatform`]: readiness, the function, the
//! scheme names (a dead instance's taken back), log file and clock page (first try), bring-up,
//! the scheme sockets with their request queues, event queue, timer and wake pipe, the driver
//! threads, the sandbox thread (retries the log file and clock page until their schemes exist,
//! then `setrens(0, 0)`, or after the grace period), and readiness. After `setrens` no scheme
//! can be opened, including `/scheme/rand`, which a std `HashMap` needs (§14: `ReadinessBased`
//! built after it aborted igcd). Once a scheme of ours is registered, the serving thread makes
//! no call that goes through the namespace manager (startup's module documentation).
//!
//! Threads: the IRQ threads and the watchdog are [`Device::start_threads`]'s, as on Linux (the
//! time-sync causes are handled on the IRQ thread, DESIGN.md §5), so the irq fds belong to them
//! and not to the main loop. The main loop is one `redox_event` queue over the scheme sockets,
//! the wake pipe (events from the IRQ threads) and a time-scheme timer (periodic retry of
//! parked reads, event posting, and the sandbox thread's outcome).

mod channel;
mod logging;
mod net;
mod stop;

use std::cell::RefCell;
use std::sync::Arc;

use event::{EventFlags, EventQueue};
use ptp_ipc::clockpage::ClockPageWriter;
use ptp_ipc::redox::daemon::Readiness;
use ptp_ipc::redox::scheme::{ClaimError, claim_scheme_name, scheme_socket};
use ptp_ipc::redox::timer::{Timer, mono_ns};
use ptp_pci::PciFunction;
use ptp_pci::redox::RedoxPciFunction;
use redox_scheme::scheme::{SchemeSync, register_sync_scheme};
use redox_scheme::wrappers::ReadinessBased;
use redox_scheme::{Response, SignalBehavior, Socket};

pub use logging::Tee as LogTarget;
pub use net::{NetAdapter, NetError, NetScheme, PortNet};

use super::startup::{self, Namespace, Platform, RealClock};
use super::{Device, Error, Options, WATCHDOG_PERIOD};
use crate::family::Family;
use channel::{ChannelScheme, RingWorkers, SharedPage, SharedPool, Sink, WakePipe};

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

/// One registered scheme with its request queue (parked requests included). The socket lives
/// as long as the process, so the queue can borrow it for good.
struct Served<S> {
    socket: &'static Socket,
    queue: ReadinessBased<'static>,
    scheme: RefCell<S>,
}

impl<S: SchemeSync> Served<S> {
    /// Creates the socket and the queue (its `HashMap` may open `/scheme/rand`), then
    /// registers `name` in the current namespace: all of it before `setrens`.
    fn register(name: &str, scheme: S) -> Result<Self, Error> {
        let socket: &'static Socket = Box::leak(Box::new(
            scheme_socket(true).map_err(|e| os("scheme socket", e))?,
        ));
        let queue = ReadinessBased::new(socket, QUEUE);
        let scheme = RefCell::new(scheme);
        register_sync_scheme(socket, name, &mut *scheme.borrow_mut())
            .map_err(|e| os(&format!("register scheme {name}"), e))?;
        Ok(Self {
            socket,
            queue,
            scheme,
        })
    }

    /// Reads and handles new requests, retries parked ones, writes the responses and posts
    /// EVENT_READ to `readable` handles.
    fn pump(&mut self, read_new: bool, readable: impl Fn(&S) -> Vec<usize>) -> Result<(), Error> {
        let scheme = &self.scheme;
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

/// The schemes and descriptors the serve loop runs on.
/// The network scheme smolnetd uses, over the data path's frame port.
type NetServed<M, Fam> = Served<NetScheme<PortNet<M, Fam>>>;

pub struct Serving<F: PciFunction, Fam: Family> {
    chan: Served<ChannelScheme<F, Fam>>,
    net: Option<NetServed<F::Bar, Fam>>,
    queue: EventQueue<Source>,
    timer: Timer,
}

/// Opens the function and names it (the name in scheme, page and log paths).
type MakeFunction<F, Fam> = Box<dyn FnOnce(&Options<Fam>) -> Result<(F, String), Error>>;

/// Redox's side of the start-up sequence, for a function made by `make`.
pub struct RedoxPlatform<F, Fam> {
    make: Option<MakeFunction<F, Fam>>,
    opts: Options<Fam>,
    /// The name in scheme, page and log paths (`pci-…` or the emulated NIC's).
    name: String,
    generation: u64,
    /// The old pcid-spawner waits for exit: the fork protocol (§9).
    waits_for_exit: bool,
    /// Register `network.<name>_igc` for smolnetd (not for an emulated NIC: smolnetd takes the
    /// first `network*` scheme, which must stay the real one).
    netstack: bool,
    /// The ring segments of the driver channel, made with the clock page (before the sandbox).
    rings: SharedPool,
    /// The clock page, served read-only by the channel scheme as `clock`.
    page: SharedPage,
}

impl<F, Fam: Family> RedoxPlatform<F, Fam> {
    fn chan_name(&self) -> String {
        format!("ptpdrv.{}_{}", self.name, Fam::SHORT)
    }
    fn net_name(&self) -> String {
        format!("network.{}_{}", self.name, Fam::SHORT)
    }
}

/// The log file, clock page and sandbox, opened from the sandbox thread.
pub struct RedoxNs {
    name: String,
    short: &'static str,
    /// Where readers find the page: `/scheme/<channel scheme>/clock`.
    page_path: String,
    page: SharedPage,
    rings: SharedPool,
    rings_tried: bool,
    /// `--ring-segments`: how many to make (0: none).
    ring_segments: usize,
}

impl RedoxNs {
    /// Makes the driver channel's ring segments (igcd's own memory, `ptp-ring-<pid>-<k>` in
    /// logs), each sized
    /// for the ring a client asks by default; without them clients get the plain channel.
    /// Tried once, when the clock page was created.
    fn make_rings(&mut self) {
        if std::mem::replace(&mut self.rings_tried, true) {
            return;
        }
        let n = self.ring_segments;
        if n == 0 {
            log::info!("ring channel: none (--ring-segments 0): clients get the plain channel");
            return;
        }
        let prefix = format!("ptp-ring-{}", std::process::id());
        let g = ptp_ipc::transport::client_ring().geometry;
        match ptp_ipc::ring::create_ring_pool(&prefix, n, g) {
            Ok(pool) => {
                log::info!(
                    "ring channel: {n} segments {prefix}-* of {} B, each mapped only by the \
                     client it is lent to",
                    g.region_len()
                );
                *self.rings.lock().unwrap_or_else(|e| e.into_inner()) = Some(pool);
            }
            Err(e) => log::warn!("no ring segments ({e}): clients get the plain channel"),
        }
    }
}

impl Namespace for RedoxNs {
    fn open_log(&mut self) -> Result<String, String> {
        logging::open(&self.name, self.short)
    }

    fn open_clock_page(&mut self) -> Result<(Arc<ClockPageWriter>, String), String> {
        // igcd's own memory, lent read-only by the channel scheme: no other process can write
        // it (a `/scheme/shm` segment, the form before issue 23, any process could).
        let w = match self.page.get() {
            Some(w) => w.clone(),
            None => {
                let w = Arc::new(ClockPageWriter::private().map_err(|e| e.to_string())?);
                self.page.get_or_init(|| w).clone()
            }
        };
        self.make_rings();
        Ok((w, self.page_path.clone()))
    }

    fn enter_sandbox(&mut self) -> Result<(), Error> {
        libredox::call::setrens(0, 0)
            .map(|_| ())
            .map_err(|e| os("setrens", e))
    }
}

/// Makes sure scheme `name` can be registered: a dead instance's name is taken back, a live
/// one's is an error before bring-up touches the NIC (`ptp_ipc::redox::scheme`).
fn claim(name: &str) -> Result<(), Error> {
    match claim_scheme_name(name) {
        Ok(true) => {
            log::info!("/scheme/{name}: left by a server that is gone; name taken back");
            Ok(())
        }
        Ok(false) => Ok(()),
        Err(e @ ClaimError::Running { .. }) => Err(Error::Other(format!(
            "{e}; not starting a second driver for this NIC"
        ))),
        Err(e) => Err(Error::Other(e.to_string())),
    }
}

impl<F: PciFunction, Fam: Family> Platform for RedoxPlatform<F, Fam> {
    type Func = F;
    type Readiness = Readiness;
    type Sink = Sink;
    type Serving = Serving<F, Fam>;
    type Fam = Fam;
    type Ns = RedoxNs;

    fn readiness(&mut self) -> Result<Readiness, Error> {
        Readiness::start(self.waits_for_exit).map_err(|e| os("readiness", e))
    }

    fn function(&mut self) -> Result<F, Error> {
        let make = self
            .make
            .take()
            .ok_or_else(|| Error::Other("the function was opened already".into()))?;
        let (func, name) = make(&self.opts)?;
        self.name = name;
        Ok(func)
    }

    fn claim_names(&mut self) -> Result<(), Error> {
        claim(&self.chan_name())?;
        if self.netstack {
            claim(&self.net_name())?;
        }
        Ok(())
    }

    fn namespace(&mut self) -> RedoxNs {
        if let Some(p) = &self.opts.clock_page {
            log::warn!(
                "--clock-page {} ignored on Redox: the page is served read-only at \
                 /scheme/{}/clock",
                p.display(),
                self.chan_name()
            );
        }
        RedoxNs {
            name: self.name.clone(),
            short: Fam::SHORT,
            page_path: format!("/scheme/{}/clock", self.chan_name()),
            page: self.page.clone(),
            rings: self.rings.clone(),
            rings_tried: false,
            ring_segments: self.opts.ring_segments,
        }
    }

    fn serving(
        &mut self,
        dev: &Arc<Device<F, Fam>>,
    ) -> Result<(Serving<F, Fam>, Arc<Sink>), Error> {
        // Every descriptor that needs the namespace first: once a scheme is registered a client
        // may open it, and the namespace manager waits on us until we answer.
        let sink = Arc::new(Sink::new(WakePipe::new().map_err(|e| os("pipe", e))?));
        let timer = Timer::open().map_err(|e| os("/scheme/time", e))?;
        let queue = EventQueue::<Source>::new().map_err(|e| os("event queue", e))?;
        let chan_name = self.chan_name();
        let access = super::access::ChannelAccess::for_this_process(&self.opts);
        // Threads cannot be relied on to start inside the sandbox: made now, idle until a ring.
        let workers = RingWorkers::start(&sink, self.opts.ring_segments)
            .map_err(|e| os("ring workers", e))?;
        let chan = ChannelScheme::new(
            dev.clone(),
            sink.clone(),
            chan_name.clone(),
            self.generation,
            access,
            (self.rings.clone(), workers),
            self.page.clone(),
        );
        // The network scheme before the channel: ptpd retries the channel's name all the time.
        let net = if self.netstack {
            let net_name = self.net_name();
            // Non-PTP frames go to smolnetd through this scheme; each one wakes the loop.
            let waker = sink.clone();
            let port = dev
                .attach_netstack(move || waker.wake_pipe().wake())
                .ok_or_else(|| Error::Other("network stack already attached".into()))?;
            let mac = dev.caps.mac;
            Some(Served::register(
                &net_name,
                NetScheme::new(PortNet { port, mac }, net_name.clone()),
            )?)
        } else {
            log::info!("no network scheme: an emulated NIC is not offered to smolnetd");
            None
        };
        let chan = Served::register(&chan_name, chan)?;
        // Ring clients pass their doorbells with sendfd: taking them needs the socket.
        chan.scheme.borrow_mut().set_socket(chan.socket);
        let sub = |fd: usize, src: Source| {
            queue
                .subscribe(fd, src, EventFlags::READ)
                .map_err(|e| os("subscribe", e))
        };
        sub(chan.socket.inner().raw(), Source::Channel)?;
        if let Some(s) = &net {
            sub(s.socket.inner().raw(), Source::Net)?;
        }
        sub(sink.wake_pipe().read_fd(), Source::Wake)?;
        sub(timer.raw(), Source::Timer)?;
        log::info!("serving ptpd on /scheme/{chan_name}/ptp");
        let serving = Serving {
            chan,
            net,
            queue,
            timer,
        };
        Ok((serving, sink))
    }

    fn ready(&mut self, r: Readiness) -> Result<(), Error> {
        r.ready().map_err(|e| os("readiness", e))
    }
}

/// Runs the daemon on the function pcid handed us, until SIGTERM or a fatal error.
pub fn run_pcid<Fam: Family>(opts: Options<Fam>) -> Result<(), Error> {
    let by_pcid = started_by_pcid();
    let make = move |o: &Options<Fam>| {
        let mut func = match (&o.pci, by_pcid) {
            (Some(a), false) => {
                let addr = ptp_pci::pcid_proto::PciAddress::parse(a).ok_or_else(|| {
                    Error::Usage(format!("--pci {a:?}: not a PCI address (0000:03:00.0)"))
                })?;
                RedoxPciFunction::open(&addr)
            }
            _ => RedoxPciFunction::from_env(),
        }
        .map_err(ptp_pci::PciError::from)?;
        let name = func.name();
        log::info!("{name}: {:?}", func.info().full_device_id);
        // Before setrens: DMA allocations after it still need the translation handle (§4, §10).
        func.prepare_dma().map_err(ptp_pci::PciError::from)?;
        Ok((func, name))
    };
    serve(Box::new(make), opts, by_pcid, true)
}

/// Runs the daemon on a function `make` builds (an emulated NIC): no fork protocol (init units wait
/// for `INIT_NOTIFY`), no network scheme.
pub fn run_emulated<F: PciFunction + 'static, Fam: Family>(
    make: impl FnOnce(&Options<Fam>) -> Result<F, Error> + 'static,
    opts: Options<Fam>,
) -> Result<(), Error> {
    let name = if opts.name.is_empty() {
        "emu0".to_string()
    } else {
        opts.name.clone()
    };
    serve(
        Box::new(move |o: &Options<Fam>| Ok((make(o)?, name))),
        opts,
        false,
        false,
    )
}

/// The serve loop over any function: start-up, then one event loop until a stop signal or a
/// fatal error, then the NIC's DMA stopped.
fn serve<F: PciFunction, Fam: Family>(
    make: MakeFunction<F, Fam>,
    opts: Options<Fam>,
    waits_for_exit: bool,
    netstack: bool,
) -> Result<(), Error> {
    let generation = ptp_ipc::time::realtime_ns() ^ (u64::from(std::process::id()) << 48);
    let mut p = RedoxPlatform {
        make: Some(make),
        opts: opts.clone(),
        name: String::new(),
        generation,
        waits_for_exit,
        netstack,
        rings: SharedPool::default(),
        page: SharedPage::default(),
    };
    let mut s = startup::start(&mut p, &opts, generation, RealClock(mono_ns))?;
    s.dev.stop_dma_on_panic();
    if let Err(e) = stop::catch(s.sink.wake_pipe().write_fd()) {
        log::warn!("SIGTERM not caught ({e}): a stop leaves the NIC's DMA running");
    }
    // Refused here, and logged so: Redox offers no real-time class (ptp_ipc::rt).
    ptp_ipc::rt::apply(&opts.rt, "channel");
    let out = serve_loop(&mut s);
    // Whatever ended the loop, the NIC must not go on writing into memory that is freed when
    // this process exits.
    s.dev.shut_down(&s.stop, out.as_ref().ok().copied());
    out.map(drop)
}

/// The event loop: until a stop signal (its name) or a fatal error.
fn serve_loop<P: Platform<Sink = Sink, Serving = Serving<F, Fam>>, F: PciFunction, Fam: Family>(
    s: &mut startup::Started<P>,
) -> Result<&'static str, Error> {
    let period = u64::try_from(WATCHDOG_PERIOD.as_nanos()).unwrap_or(u64::MAX);
    let serving = &mut s.serving;
    serving
        .timer
        .arm_at(mono_ns().saturating_add(period))
        .map_err(|e| os("timer", e))?;
    loop {
        let ev = match serving.queue.next_event() {
            Ok(ev) => ev,
            // A signal handler ran (SIGTERM lands here, its wake byte in the pipe).
            Err(e) if e.errno() == syscall::error::EINTR => {
                if let Some(sig) = stop::requested() {
                    return Ok(sig);
                }
                continue;
            }
            Err(e) => return Err(os("event queue", e)),
        };
        let (chan_new, net_new) = match ev.user_data {
            Source::Channel => (true, false),
            Source::Net => (false, true),
            Source::Wake => {
                s.sink.wake_pipe().drain();
                if let Some(sig) = stop::requested() {
                    return Ok(sig);
                }
                (false, false)
            }
            Source::Timer => {
                serving
                    .timer
                    .arm_at(mono_ns().saturating_add(period))
                    .map_err(|e| os("timer", e))?;
                s.sandbox.check()?;
                (false, false)
            }
        };
        // A ring's requests first: a ring connection ended here has its handle's end of file
        // posted by the pump.
        serving.chan.scheme.borrow().serve_ring();
        serving
            .chan
            .pump(chan_new, ChannelScheme::readable_handles)?;
        if let Some(q) = &mut serving.net {
            q.pump(net_new, NetScheme::readable_handles)?;
        }
    }
}
