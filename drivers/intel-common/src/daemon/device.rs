//! Bring-up, the data path and the driver's threads, independent of the transport that
//! carries requests (DESIGN.md §5).
//!
//! Threads:
//! - the caller's thread serves ptpd's requests ([`Device::handle`]), including `SendPtp`, which
//!   reserves a TX timestamp set and posts the frame;
//! - `irq-other` blocks on the "other" MSI-X vector: link changes and TX timestamps, retrieved
//!   right there (seed 000 patch 3/4, seed 001), never in a deferred worker. On a part without
//!   a TX timestamp interrupt (82576) the same thread polls the stamp registers every
//!   `--tx-poll-us` while a request is pending; the transmit path raises the vector by software
//!   to start it;
//! - `queues` blocks on the queue vector: received frames to ptpd, TX descriptor reclaim;
//! - without two MSI-X vectors (one MSI-X entry, MSI, the legacy line, or none) one `irq`
//!   thread does both;
//! - `watchdog`: frees TX timestamp sets older than the timeout and refreshes the clock page.
//!
//! Interrupts are taken in the first mode of [`ptp_pci::irq_modes`] that works (MSI-X, MSI,
//! legacy line, polled). An IRQ thread whose interrupts stop arriving polls its cause registers
//! at `--irq-poll-us` ([`crate::irq::Pacer`]); `--poll-irq` polls from the start.
//!
//! With `--irq-mode napi` ([`crate::irq::Napi`]; the default is `plain`) an IRQ thread does not re-arm its
//! vector right after handling its causes: while its vector stays auto-masked it polls again
//! (TX stamps by TSYNCTXCTL's valid bits, frames by their descriptors) as long as polls find
//! work, and spins a bounded while when a TX stamp it asked for is due; then it clears its vector's pending bit and the causes its polling left,
//! re-arms, and polls once more, so work that came just before the re-arm is taken and work
//! after it raises the interrupt. A pass that leaves nothing to poll for re-arms as plain mode
//! does. `--irq-mode plain` handles the causes once per interrupt.

use std::sync::atomic::{AtomicBool, AtomicU8, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::Duration;

use intel_regs::ids::Part;
use ptp_ipc::clockpage::{ClockPageWriter, ClockSample};
use ptp_ipc::time::mono_ns;
use ptp_ipc::{Caps, DriverError, DriverEvent, DriverReply, DriverRequest, LostReason, RxFilter};
use ptp_pci::{IrqMode, IrqVector, IrqWait, PciFunction};

use super::{Error, Options};
use crate::Regs;
use crate::clock::{ClockHw, PageSample, Phc};
// The vector assignment lives with the families that program it; re-exported for callers.
use crate::family::{Family, IrqLayout, Link, Rearm, RxFrame};
pub use crate::family::{VECTOR_OTHER, VECTOR_QUEUES, VECTORS};
use crate::irq::{IrqStyle, Napi, Pacer, SPIN_GAP};
use crate::pins::PinPort;
use crate::ring::{BUF_LEN, RxRing, TxRing};
use crate::service::{self, Counters, DataPath};
use crate::txts::{Reservation, TxTimestamps};

/// Where the driver's threads send events (the current ptpd connection, if any).
pub trait EventSink: Send + Sync + 'static {
    fn send(&self, ev: DriverEvent);
}

/// The clock page, once it exists: on Linux its directory may appear after the driver, so the
/// page can be attached after bring-up (`startup::Deferred`). Until then samples go nowhere and
/// `Caps` names no page.
#[derive(Default)]
pub struct ClockPageSlot {
    page: OnceLock<(Arc<ClockPageWriter>, String)>,
}

impl std::fmt::Debug for ClockPageSlot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ClockPageSlot({:?})", self.path())
    }
}

impl ClockPageSlot {
    /// A slot holding `writer` (published at `path`) from the start.
    pub fn with(writer: Arc<ClockPageWriter>, path: String) -> Self {
        let s = Self::default();
        s.attach(writer, path);
        s
    }

    /// Attaches the page; false if one is attached already.
    pub fn attach(&self, writer: Arc<ClockPageWriter>, path: String) -> bool {
        self.page.set((writer, path)).is_ok()
    }

    /// Where the page is published, once it is.
    pub fn path(&self) -> Option<&str> {
        self.page.get().map(|(_, p)| p.as_str())
    }

    /// Publishes one PHC sample of driver instance `generation`, if the page is there.
    fn publish(&self, s: &PageSample, generation: u64) {
        if let Some((w, _)) = self.page.get() {
            w.publish(&ClockSample {
                phc_ns: s.phc_ns,
                mono_ns: s.mono_ns,
                rate_ppb: s.rate_ppb,
                generation,
            });
        }
    }
}

/// How often the watchdog runs.
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(100);
/// How long the IRQ threads block on their vector before checking their causes anyway (and the
/// stop flag): the bound after which a pending cause counts as a missed interrupt
/// (`intel_common::irq`).
const IRQ_WAIT: Duration = Duration::from_millis(100);
/// Descriptors per ring.
const RING_LEN: usize = 256;
/// Frames handled per queue-thread pass before re-arming.
const RX_BUDGET: usize = 64;
/// Smallest and largest frame accepted from ptpd (no FCS).
const MIN_FRAME: usize = 14;
const MAX_FRAME: usize = 1514;

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A brought-up NIC of family `Fam`.
pub struct Device<F: PciFunction, Fam: Family> {
    /// Kept so the mappings, vectors and DMA stay valid for the daemon's life.
    pub func: F,
    pub part: &'static Part,
    pub regs: Arc<Regs<F::Bar>>,
    pub phc: Arc<Phc<F::Bar, Fam::Clock>>,
    pub counters: Arc<Counters>,
    pub caps: Caps,
    pub data: Arc<Data<F::Bar, Fam>>,
    /// The busy-poll window of the driver's end of each client ring (`--busy-poll-us`).
    pub busy_poll: Duration,
    /// How interrupts are taken, and the vectors.
    pub irq_mode: IrqMode,
    irqs: Irqs<F::Irq>,
    rt: ptp_ipc::rt::RtConfig,
    irq_style: IrqStyle,
    poll_irq: bool,
    irq_poll: Duration,
    tx_poll: Duration,
    /// Set once an IRQ thread polls its cause registers.
    polling: Arc<AtomicBool>,
    page: Arc<ClockPageSlot>,
}

/// The vectors of the chosen [`IrqMode`].
enum Irqs<I> {
    /// MSI-X: the "other" causes and the queues each on their own vector and thread.
    Split { other: Arc<I>, queues: Arc<I> },
    /// One vector for every cause (one MSI-X entry, MSI or INTx), or none (polled): one thread.
    Shared { irq: Option<Arc<I>>, msix: bool },
}

impl<I> Irqs<I> {
    fn layout(&self) -> IrqLayout {
        match self {
            Irqs::Split { .. } => IrqLayout::Split,
            Irqs::Shared { msix: true, .. } => IrqLayout::SingleMsix,
            Irqs::Shared { msix: false, .. } => IrqLayout::Shared,
        }
    }

    fn new(mode: IrqMode, mut v: Vec<I>) -> Self {
        match mode {
            IrqMode::MsiX { vectors } if vectors >= VECTORS && v.len() >= 2 => {
                let other = Arc::new(v.swap_remove(VECTOR_OTHER as usize));
                let queues = Arc::new(v.swap_remove(VECTOR_QUEUES as usize));
                Irqs::Split { other, queues }
            }
            _ => Irqs::Shared {
                msix: matches!(mode, IrqMode::MsiX { .. }),
                irq: v.pop().map(Arc::new),
            },
        }
    }
}

/// Keeps a running, sane PHC a previous instance left (warm attach: the MAC quiesced, no port
/// reset, so neither the timer nor the link is touched) or resets the port (cold start, also
/// with `cold`). What the pending TX stamp sets held is discarded when timestamping is enabled
/// ([`TxTimestamps::enable`] reads every set): no request of this instance owns them.
fn attach_or_reset<M: ptp_pci::Mmio, Fam: Family>(
    fam: &Fam,
    regs: &crate::Regs<M>,
    cold: bool,
) -> Result<Option<crate::family::WarmPhc>, Error> {
    let warm = if cold {
        Err("--cold-start".to_string())
    } else {
        fam.warm_phc(regs)
    };
    match warm {
        Ok(w) => {
            log::info!("warm attach: PHC kept ({w})");
            fam.quiesce(regs);
            Ok(Some(w))
        }
        Err(why) => {
            log::info!("cold start: {why}; resetting the port and the PHC");
            fam.reset(regs)?;
            Ok(None)
        }
    }
}

/// The PHC as the daemon serves it: kept at its frequency (warm) or reset to the host's wall
/// clock, as Linux's igc_ptp_reset does (cold); every sample published to `page`.
fn start_phc<M: ptp_pci::Mmio, Fam: Family>(
    fam: &Fam,
    regs: &Arc<Regs<M>>,
    warm: Option<crate::family::WarmPhc>,
    page: Arc<ClockPageSlot>,
    generation: u64,
) -> Arc<Phc<M, Fam::Clock>> {
    let mut phc = Phc::new(regs.clone(), fam.clock());
    match warm {
        Some(w) => {
            fam.ptp_rearm(regs);
            phc = phc.with_freq(w.scaled_ppm);
        }
        None => fam.ptp_reset(regs, ptp_ipc::time::realtime_ns()),
    }
    let phc = Arc::new(phc.with_publisher(move |s: &PageSample| page.publish(s, generation)));
    log::info!("PHC running, {} ns", phc.gettime().phc_ns);
    phc
}

/// What the daemon tells ptpd about the part.
fn caps<M: ptp_pci::Mmio, Fam: Family>(
    part: &Part,
    ids: &ptp_pci::PciIds,
    fam: &Fam,
    regs: &Regs<M>,
    tx_ts_sets: u8,
) -> Caps {
    Caps {
        part: part.name.to_string(),
        vendor_id: ids.vendor,
        device_id: ids.device,
        mac: fam.read_mac(regs),
        max_adj_ppb: fam.clock().max_adj_ppb(),
        tx_ts_sets,
        rx_filters: fam.rx_filters().iter().fold(0, |m, f| m | 1 << *f as u8),
        n_ext_ts: if fam.has_pins() {
            crate::pins::N_EXTTS as u8
        } else {
            0
        },
        n_per_out: if fam.has_pins() {
            crate::pins::N_PEROUT as u8
        } else {
            0
        },
        cross_timestamp: fam.cross_timestamp(),
        // Filled in per `Caps` request: the page may be attached later.
        clock_page: String::new(),
    }
}

/// Allocates interrupts in the first mode of [`ptp_pci::irq_modes`] that succeeds (polling
/// always does).
fn alloc_irqs<F: PciFunction>(func: &mut F, poll: bool) -> (IrqMode, Vec<F::Irq>) {
    for mode in ptp_pci::irq_modes(func.irq_support(), VECTORS, poll) {
        match func.alloc_irq_mode(mode) {
            Ok(v) if v.len() == usize::from(mode.vectors()) => return (mode, v),
            Ok(v) => log::warn!("interrupts: {mode} gave {} vectors", v.len()),
            Err(e) => log::warn!("interrupts: {mode} failed: {e}"),
        }
    }
    (IrqMode::Polled, Vec::new())
}

/// The data path state shared by the request thread and the IRQ threads.
pub struct Data<M: ptp_pci::Mmio, Fam> {
    fam: Arc<Fam>,
    layout: IrqLayout,
    regs: Arc<Regs<M>>,
    counters: Arc<Counters>,
    tx: Mutex<TxRing>,
    rx: Mutex<RxRing>,
    pub txts: TxTimestamps,
    rx_filter: AtomicU8,
    speed_mbps: AtomicU32,
    link_up: AtomicBool,
    tx_ts_timeout_ns: u64,
    /// How long the posting thread looks for its own TX stamp (`--tx-inline-us`).
    tx_inline: Option<Duration>,
    /// Valid bits that showed a set's previous stamp ([`crate::txts::Retrieval::repeated`]).
    repeated: std::sync::atomic::AtomicU64,
    /// Where non-PTP frames go once a network stack is attached ([`Device::attach_netstack`]).
    netstack: std::sync::OnceLock<NetQueue>,
    /// The SDPs, on parts whose pins are served ([`Family::has_pins`]).
    pins: Option<PinPort>,
}

/// Received frames for the network stack, and how to tell its event loop about them.
struct NetQueue {
    tx: crossbeam_channel::Sender<Vec<u8>>,
    notify: Box<dyn Fn() + Send + Sync>,
}

/// Frames a network stack has not taken yet are dropped (and counted) beyond this.
const NET_RX_QUEUE: usize = 256;

/// The general frame path for a network stack (smolnetd on Redox): any frame out, every
/// non-PTP frame in. PTP frames keep going to ptpd.
pub struct NetPort<M: ptp_pci::Mmio, Fam> {
    data: Arc<Data<M, Fam>>,
    rx: crossbeam_channel::Receiver<Vec<u8>>,
}

/// Why the network stack's frame was not sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NetSendError {
    #[error("bad frame length")]
    BadFrame,
    #[error("transmit ring full or link down")]
    Busy,
}

/// A sink for events nobody receives (a network-stack frame asks for no timestamp).
struct NoEvents;

impl EventSink for NoEvents {
    fn send(&self, _ev: DriverEvent) {}
}

impl<M: ptp_pci::Mmio, Fam: Family> NetPort<M, Fam> {
    /// Sends one frame (no FCS), without a timestamp.
    pub fn send(&self, frame: &[u8]) -> Result<(), NetSendError> {
        match self.data.send(0, false, frame, &NoEvents) {
            DriverReply::Done => Ok(()),
            DriverReply::Error(DriverError::BadFrame) => Err(NetSendError::BadFrame),
            _ => Err(NetSendError::Busy),
        }
    }

    /// Moves the next received frame into `buf` (truncating a longer one); `None` if none.
    pub fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        let f = self.rx.try_recv().ok()?;
        let n = f.len().min(buf.len());
        buf[..n].copy_from_slice(&f[..n]);
        Some(n)
    }

    pub fn rx_pending(&self) -> bool {
        !self.rx.is_empty()
    }

    pub fn link_up(&self) -> bool {
        self.data.link_up.load(Ordering::Relaxed)
    }
}

/// A NIC taken over from whoever drove it before: probed, BAR 0 mapped, and its DMA stopped
/// (the port reset, or on a warm attach only the queues, the PHC kept). Nothing is allocated
/// yet: the start-up takes this step before it makes its own memory (see [`Device::claim`]).
pub struct Claimed<F: PciFunction, Fam: Family> {
    func: F,
    part: &'static Part,
    fam: Fam,
    regs: Arc<Regs<F::Bar>>,
    warm: Option<crate::family::WarmPhc>,
}

impl<F: PciFunction, Fam: Family> Device<F, Fam> {
    /// Probes, resets and initialises the NIC (reference §10.2), with bounded waits. PHC samples
    /// go to the clock page in `page` (when there is one), stamped with `generation`.
    pub fn bring_up(
        func: F,
        opts: &Options<Fam>,
        page: Arc<ClockPageSlot>,
        generation: u64,
    ) -> Result<Self, Error> {
        Self::from_claimed(Self::claim(func, opts)?, opts, page, generation)
    }

    /// The first touch of the NIC: probe, map BAR 0, stop the DMA a previous driver left
    /// running. A driver that died without stopping its queues (SIGKILL, a fault) leaves the
    /// NIC writing received frames and descriptor write-backs into memory the kernel has freed
    /// and hands to the next process that asks, the new driver first; nothing in the kit's
    /// Redox stops it (no IOMMU; pcid keeps bus mastering on when a channel closes, base
    /// 9dd6901d `drivers/pcid/src/scheme.rs` `on_close`). So this runs before the driver
    /// allocates anything large (log, clock page, ring segments, DMA rings).
    pub fn claim(mut func: F, opts: &Options<Fam>) -> Result<Claimed<F, Fam>, Error> {
        let ids = func.ids();
        let (part, fam) = Fam::probe(ids.vendor, ids.device)?;
        log::info!(
            "{} ({:04x}:{:04x} rev {}) at {}",
            part.name,
            ids.vendor,
            ids.device,
            ids.revision,
            func.address()
        );
        let bar = func.map_bar(0)?;
        let regs = Arc::new(Regs::new(bar));
        if crate::mac::dma_running(&regs, &fam.mac_regs()) {
            log::warn!(
                "the NIC was still moving data: the previous driver did not stop it (killed or \
                 crashed); without an IOMMU it may have written into memory freed since"
            );
        }
        let warm = attach_or_reset(&fam, &regs, opts.cold_start)?;
        Ok(Claimed {
            func,
            part,
            fam,
            regs,
            warm,
        })
    }

    /// The rest of the bring-up on a claimed NIC: interrupts, link, rings, PHC, timestamping.
    pub fn from_claimed(
        c: Claimed<F, Fam>,
        opts: &Options<Fam>,
        page: Arc<ClockPageSlot>,
        generation: u64,
    ) -> Result<Self, Error> {
        let Claimed {
            mut func,
            part,
            fam,
            regs,
            warm,
        } = c;
        let fam = Arc::new(fam);
        let (irq_mode, vectors) = alloc_irqs(&mut func, opts.poll_irq);
        log::info!("interrupts: {irq_mode}");
        let irqs = Irqs::new(irq_mode, vectors);
        let link = fam.link_up(&regs, opts.link_wait);
        log::info!(
            "link {} {} Mb/s",
            if link.up { "up" } else { "down" },
            link.speed_mbps
        );
        let tx = TxRing::new(&mut func, RING_LEN)?;
        let rx = RxRing::new(&mut func, RING_LEN)?;
        fam.setup_tx(&regs, &tx);
        fam.setup_rx(&regs, &rx);
        fam.enable_irqs(&regs, irqs.layout());
        let phc = start_phc(&*fam, &regs, warm, page.clone(), generation);
        let counters = Arc::new(Counters::default());
        let txts = TxTimestamps::new(fam.ts_regs(), opts.tx_ts_sets);
        // TX timestamping is on from the start, as a PTP NIC is used; RX stays NONE until asked
        // for (seed 002: stamping every frame costs throughput).
        txts.enable(&regs, fam.tsynctxctl_on());
        fam.apply_rx_filter(&regs, RxFilter::None)?;
        let caps = caps(part, &func.ids(), &*fam, &regs, txts.sets());
        log::info!(
            "TX timestamping on ({} set{}), RX filter NONE",
            txts.sets(),
            if txts.sets() == 1 { "" } else { "s" }
        );
        let pins = fam.has_pins().then(PinPort::default);
        let data = Arc::new(Data {
            fam,
            layout: irqs.layout(),
            regs: regs.clone(),
            counters: counters.clone(),
            tx: Mutex::new(tx),
            rx: Mutex::new(rx),
            txts,
            rx_filter: AtomicU8::new(RxFilter::None as u8),
            speed_mbps: AtomicU32::new(link.speed_mbps),
            link_up: AtomicBool::new(link.up),
            tx_ts_timeout_ns: opts.tx_ts_timeout.as_nanos() as u64,
            tx_inline: opts.tx_inline,
            repeated: Default::default(),
            netstack: std::sync::OnceLock::new(),
            pins,
        });
        Ok(Self {
            func,
            part,
            regs,
            phc,
            counters,
            caps,
            data,
            irq_mode,
            irqs,
            rt: opts.rt,
            busy_poll: opts.busy_poll,
            irq_style: opts.irq_style,
            poll_irq: opts.poll_irq,
            irq_poll: opts.irq_poll,
            tx_poll: opts.tx_poll,
            polling: Arc::new(AtomicBool::new(false)),
            page,
        })
    }

    /// Stops the NIC's DMA and interrupts for a driver on its way out (SIGTERM, a fatal
    /// error), the PHC left running for the next driver's warm attach. Without it the NIC
    /// keeps receiving into this process's memory after the kernel has freed it
    /// ([`Device::claim`]).
    pub fn stop_dma(&self) {
        self.data.stop_dma();
    }

    /// The end of a daemon's serve loop, whatever ended it (`ended_by`: the stop signal's
    /// name, or `None` for an error, which the caller reports): the driver's threads told to
    /// stop (`threads`, as given to [`Device::start_threads`]), the DMA stopped, the PHC left
    /// running, and one line saying so.
    pub fn shut_down(&self, threads: &AtomicBool, ended_by: Option<&str>) {
        threads.store(true, Ordering::Relaxed);
        self.stop_dma();
        match ended_by {
            Some(sig) => log::info!("{sig}: DMA stopped, the PHC left running; exiting"),
            None => log::warn!("DMA stopped, the PHC left running; exiting on the error below"),
        }
    }

    /// For the daemon (not for tests that hold a `Device`): from now on a panic on any thread
    /// stops the NIC's DMA and ends the process with status 101, after the panic's own message.
    /// Unwinding would skip [`Device::stop_dma`] and exit with the NIC still receiving into the
    /// memory the exit frees, or leave a process whose IRQ or queue thread is gone serving on.
    /// [`Family::quiesce`] takes no lock a panicking thread could hold: register writes only.
    pub fn stop_dma_on_panic(&self)
    where
        F::Bar: 'static,
        Fam: 'static,
    {
        let data = self.data.clone();
        let before = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            before(info);
            data.stop_dma();
            log::error!("panic: DMA stopped, the PHC left running; exiting");
            std::process::exit(101);
        }));
    }

    /// Attaches a network stack: from now on non-PTP frames are queued for it (instead of only
    /// counted) and `notify` runs after each one, so its event loop can wake. Once per device.
    pub fn attach_netstack(
        &self,
        notify: impl Fn() + Send + Sync + 'static,
    ) -> Option<NetPort<F::Bar, Fam>> {
        let (tx, rx) = crossbeam_channel::bounded(NET_RX_QUEUE);
        self.data
            .netstack
            .set(NetQueue {
                tx,
                notify: Box::new(notify),
            })
            .ok()?;
        Some(NetPort {
            data: self.data.clone(),
            rx,
        })
    }

    /// Whether an IRQ thread polls its cause registers (told to, no vector, or interrupts that
    /// did not arrive).
    pub fn irq_polling(&self) -> bool {
        self.polling.load(Ordering::Relaxed)
    }

    /// RX stamps the part took that no frame got (82576's held latch), so far.
    pub fn rx_stamps_lost(&self) -> u64 {
        self.data.fam.rx_stamps_lost()
    }

    /// The link as last seen.
    pub fn link(&self) -> Link {
        Link {
            up: self.data.link_up.load(Ordering::Relaxed),
            speed_mbps: self.data.speed_mbps.load(Ordering::Relaxed),
        }
    }

    /// Executes one request from ptpd; events it causes (lost timestamps) go to `sink`.
    /// Returns the reply to send, or `None` for a successful `SendPtp`, which is answered only
    /// on error (its outcome arrives as `TxTimestamp`/`TxTimestampLost`): at timestamping rates
    /// a reply per frame would double the channel's traffic.
    pub fn handle<S: EventSink>(&self, req: DriverRequest, sink: &S) -> Option<DriverReply> {
        let dp = Requests {
            data: &self.data,
            sink,
        };
        let is_send = matches!(req, DriverRequest::SendPtp { .. });
        let mut reply = service::dispatch(&self.phc, &self.caps, &self.counters, &dp, req);
        if is_send && reply == DriverReply::Done {
            return None;
        }
        match &mut reply {
            DriverReply::Stats(s) => {
                let c = self.data.txts.counters();
                s.tx_requested = c.requested;
                s.tx_skipped = c.skipped;
                s.tx_timeouts = c.timeouts;
            }
            DriverReply::Caps(c) => c.clock_page = self.page.path().unwrap_or_default().into(),
            _ => {}
        }
        Some(reply)
    }

    /// Starts the IRQ threads and the watchdog; they run until `stop` is set.
    pub fn start_threads<S: EventSink>(
        &self,
        sink: Arc<S>,
        stop: Arc<AtomicBool>,
    ) -> Vec<std::thread::JoinHandle<()>> {
        let spawn = |name: &str, f: Box<dyn FnOnce() + Send>| {
            std::thread::Builder::new()
                .name(name.into())
                .spawn(f)
                .expect("spawn driver thread")
        };
        let rt = self.rt;
        // One thread per vector (or one for all causes): each gets its own handles to the
        // shared state and its own pacer.
        let tx_poll = self.tx_poll;
        let style = self.irq_style;
        log::info!("IRQ threads: {style:?}");
        let irq_thread = |name: &'static str, irq: Option<&Arc<F::Irq>>, role: Role| {
            let (data, irq, sink, stop) =
                (self.data.clone(), irq.cloned(), sink.clone(), stop.clone());
            let pacer = Pacer::new(
                name,
                irq.is_some(),
                self.poll_irq,
                IRQ_WAIT,
                self.irq_poll,
                self.polling.clone(),
            );
            spawn(
                name,
                Box::new(move || {
                    // Bulk frame work stays at normal priority (Linux does it in softirq
                    // context, falling back to the normal-priority ksoftirqd under load): at
                    // real-time priority it would starve the consumers it feeds.
                    if !matches!(role, Role::Queues) {
                        ptp_ipc::rt::apply(&rt, name);
                    }
                    let body = IrqThread {
                        data: &data,
                        sink: &*sink,
                        stop: &stop,
                        role,
                        tx_poll,
                        style,
                    };
                    body.run(irq.as_deref(), pacer)
                }),
            )
        };
        let mut threads = match &self.irqs {
            Irqs::Split { other, queues } => vec![
                irq_thread("irq-other", Some(other), Role::Other),
                irq_thread("queues", Some(queues), Role::Queues),
            ],
            Irqs::Shared { irq, msix } => {
                vec![irq_thread("irq", irq.as_ref(), Role::All { msix: *msix })]
            }
        };
        let (data, phc) = (self.data.clone(), self.phc.clone());
        threads.push(spawn(
            "watchdog",
            Box::new(move || watchdog(&data, &phc, &*sink, &stop)),
        ));
        threads
    }
}

/// The watchdog thread until `stop`: frees TX stamp sets whose stamp never came, runs the
/// family's periodic work, and samples the PHC.
fn watchdog<M: ptp_pci::Mmio, Fam: Family, S: EventSink + ?Sized>(
    data: &Data<M, Fam>,
    phc: &Phc<M, Fam::Clock>,
    sink: &S,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        for lost in data
            .txts
            .expire(&data.regs, mono_ns(), data.tx_ts_timeout_ns)
        {
            log::warn!("TX timestamp for cookie {} timed out", lost.cookie);
            data.lost(sink, lost.cookie, lost.reason);
        }
        data.fam.watchdog(&data.regs, mono_ns());
        // A fresh sample keeps the clock page and its rate estimate current (and a
        // timecounter family's count extended across its wrap).
        phc.gettime();
        std::thread::sleep(WATCHDOG_PERIOD);
    }
}

/// Every other way out (an error after bring-up, a test's end): a dropped driver leaves no DMA
/// running into memory about to be freed ([`Device::claim`]). The PHC keeps running.
impl<F: PciFunction, Fam: Family> Drop for Device<F, Fam> {
    fn drop(&mut self) {
        self.data.stop_dma();
    }
}

impl<M: ptp_pci::Mmio, Fam: Family> Data<M, Fam> {
    /// [`Device::stop_dma`].
    fn stop_dma(&self) {
        self.fam.quiesce(&self.regs);
    }

    fn lost<S: EventSink + ?Sized>(&self, sink: &S, cookie: u64, reason: LostReason) {
        Counters::bump(&self.counters.tx_lost);
        sink.send(DriverEvent::TxTimestampLost { cookie, reason });
    }

    fn rx_filter(&self) -> RxFilter {
        RxFilter::from_code(self.rx_filter.load(Ordering::Relaxed)).unwrap_or(RxFilter::None)
    }

    /// Latency compensation for the current link speed (reference §8.4).
    fn latency(&self) -> (u64, u64) {
        self.fam.latency_ns(self.speed_mbps.load(Ordering::Relaxed))
    }

    /// Sends one frame, asking for a TX timestamp when `want_ts`.
    fn send<S: EventSink + ?Sized>(
        &self,
        cookie: u64,
        want_ts: bool,
        frame: &[u8],
        sink: &S,
    ) -> DriverReply {
        if !(MIN_FRAME..=MAX_FRAME).contains(&frame.len()) {
            return DriverReply::Error(DriverError::BadFrame);
        }
        if !self.link_up.load(Ordering::Relaxed) {
            if want_ts {
                self.lost(sink, cookie, LostReason::NotSent);
            }
            return DriverReply::Error(DriverError::Busy);
        }
        let (set, lost) = if want_ts {
            match self.txts.reserve(cookie, mono_ns()) {
                Reservation::Set(s) => (Some(s), None),
                Reservation::Skipped => (None, Some(LostReason::NoFreeSlot)),
                Reservation::Disabled => (None, Some(LostReason::Disabled)),
            }
        } else {
            (None, None)
        };
        let cmd = set.map_or(0, |s| self.fam.tx_tstamp_cmd(s));
        let posted = {
            let mut tx = lock(&self.tx);
            tx.reclaim();
            tx.post(frame, cmd)
        };
        match posted {
            Ok(tail) => {
                let inline = self.tx_inline.filter(|_| set.is_some());
                if inline.is_some() {
                    self.fam
                        .gate_tx_stamp_irq(&self.regs, false, self.pin_causes());
                }
                self.regs.write(self.fam.tdt(), tail);
                Counters::bump(&self.counters.tx_frames);
                if let Some(reason) = lost {
                    self.lost(sink, cookie, reason);
                }
                let taken = inline.is_some_and(|w| self.take_inline(sink, cookie, w));
                if set.is_some() && !taken && !self.fam.has_tx_ts_irq() {
                    // No interrupt will announce the stamp: wake the time-sync thread so it
                    // polls while the request is pending.
                    self.fam.kick(&self.regs, self.layout);
                }
                DriverReply::Done
            }
            Err(_) => {
                if let Some(s) = set {
                    self.txts.cancel(s, cookie);
                }
                if want_ts {
                    self.lost(sink, cookie, LostReason::NotSent);
                }
                DriverReply::Error(DriverError::Busy)
            }
        }
    }

    fn set_tstamp_config<S: EventSink + ?Sized>(
        &self,
        tx_on: bool,
        filter: RxFilter,
        sink: &S,
    ) -> DriverReply {
        // Validate before touching anything: a refused filter changes nothing.
        if let Err(e) = self.fam.check_rx_filter(filter) {
            return DriverReply::Error(e.into());
        }
        if let Err(e) = self.fam.apply_rx_filter(&self.regs, filter) {
            return DriverReply::Error(e.into());
        }
        self.rx_filter.store(filter as u8, Ordering::Relaxed);
        if tx_on && !self.txts.enabled() {
            self.txts.enable(&self.regs, self.fam.tsynctxctl_on());
        } else if !tx_on && self.txts.enabled() {
            for l in self.txts.disable(&self.regs) {
                self.lost(sink, l.cookie, l.reason);
            }
        }
        log::info!(
            "timestamping: TX {}, RX {:?}",
            if tx_on { "on" } else { "off" },
            filter
        );
        DriverReply::TstampConfig {
            tx_on,
            rx_filter: filter,
        }
    }

    /// The stamp of the frame just posted for `cookie`, looked for on this thread (the one
    /// holding the request) for up to `window` while the TX stamp interrupt is gated, so that
    /// a stamp that comes fast costs the IRQ thread no wake-up. Returns whether it was taken;
    /// the interrupt is open again either way.
    ///
    /// Each look clears the cause first, so a stamp landing after a look latches it again.
    /// A stamp missed by the window's looks gets one more, still gated: one that landed
    /// meanwhile is taken with its cause cleared, so opening the gate raises nothing for it
    /// (under load the gate could otherwise open on a latched cause while this thread was
    /// preempted, and the IRQ thread would wake for a stamp this thread then takes).
    /// Opening the gate with a cause latched raises the interrupt in our models, but the
    /// datasheet does not say so for TSIM; so when requests are still pending after the gate
    /// opens, one more clear-and-look takes a stamp that came in between, and a later one
    /// finds the cause clear and raises it as usual.
    fn take_inline<S: EventSink + ?Sized>(&self, sink: &S, cookie: u64, window: Duration) -> bool {
        let deadline = mono_ns().saturating_add(window.as_nanos() as u64);
        let look = || {
            self.clear_tx_cause(sink);
            self.retrieve_tx(sink)
                .delivered()
                .iter()
                .any(|d| d.cookie == cookie)
        };
        let mut taken = look();
        while !taken && mono_ns() < deadline {
            std::hint::spin_loop();
            taken = look();
        }
        if !taken {
            taken = look();
        }
        self.fam
            .gate_tx_stamp_irq(&self.regs, true, self.pin_causes());
        if self.txts.pending() > 0 {
            self.clear_tx_cause(sink);
            self.retrieve_tx(sink);
        }
        taken
    }

    /// Clears the TX stamp cause; pin causes a read-to-clear took with it are handled.
    fn clear_tx_cause<S: EventSink + ?Sized>(&self, sink: &S) {
        let other = self.fam.clear_tx_stamp_cause(&self.regs);
        self.pin_events(other, sink);
    }

    /// The TSICR causes the pins enabled (none without pins).
    fn pin_causes(&self) -> intel_regs::e1000::TsCause {
        self.pins.as_ref().map(PinPort::causes).unwrap_or_default()
    }

    /// Hands the pins their causes of a TSICR look and sends the events on.
    fn pin_events<S: EventSink + ?Sized>(&self, tsicr: intel_regs::e1000::TsCause, sink: &S) {
        if let Some(p) = &self.pins {
            for e in p.handle(&self.regs, tsicr, ptp_ipc::time::realtime_ns) {
                sink.send(e);
            }
        }
    }

    /// A pin request (Unsupported on a part without served pins).
    fn pin_request(&self, req: DriverRequest) -> DriverReply {
        let Some(p) = &self.pins else {
            return DriverReply::Error(DriverError::Unsupported);
        };
        let clock = self.fam.clock();
        p.request(&self.regs, req, || {
            let latch = clock.latch(&self.regs);
            clock.finish(&self.regs, latch)
        })
    }

    /// Retrieves the TX stamps the registers hold and sends them on.
    fn retrieve_tx<S: EventSink + ?Sized>(&self, sink: &S) -> crate::txts::Retrieval {
        let got = self.txts.service(&self.regs);
        let (tx_lat, _) = self.latency();
        for d in got.delivered() {
            Counters::bump(&self.counters.tx_delivered);
            sink.send(DriverEvent::TxTimestamp {
                cookie: d.cookie,
                ns: self.fam.tx_stamp_ns(d.raw_ns) + tx_lat,
            });
        }
        if got.recovered > 0 {
            self.counters
                .quirk_recoveries
                .fetch_add(got.recovered, Ordering::Relaxed);
        }
        if got.repeated > 0 {
            // Logged at the 1st, 2nd, 4th, ...: a stuck bit shows on every pass.
            let n = self.repeated.fetch_add(got.repeated, Ordering::Relaxed) + got.repeated;
            if n.is_power_of_two() {
                log::warn!(
                    "TX timestamp set showed its previous stamp as new ({n} times): valid bit \
                     not released; its request waits for the timeout"
                );
            }
        }
        got
    }

    /// Whether the time-sync thread must poll the TX stamp registers: the part has no TX
    /// stamp interrupt and a request is pending.
    fn tx_poll_due(&self) -> bool {
        !self.fam.has_tx_ts_irq() && self.txts.pending() > 0
    }
}

/// The data-path half of request handling, with the sink for the events it causes.
struct Requests<'a, M: ptp_pci::Mmio, Fam, S: EventSink> {
    data: &'a Data<M, Fam>,
    sink: &'a S,
}

impl<M: ptp_pci::Mmio, Fam: Family, S: EventSink> DataPath for Requests<'_, M, Fam, S> {
    fn handle(&self, req: DriverRequest) -> DriverReply {
        match req {
            DriverRequest::SendPtp {
                cookie,
                want_ts,
                frame,
            } => self.data.send(cookie, want_ts, &frame, self.sink),
            DriverRequest::SetTstampConfig { tx_on, rx_filter } => {
                self.data.set_tstamp_config(tx_on, rx_filter, self.sink)
            }
            req @ (DriverRequest::GetPins
            | DriverRequest::SetPin { .. }
            | DriverRequest::ExtTs { .. }
            | DriverRequest::PerOut { .. }
            | DriverRequest::Pps { .. }) => self.data.pin_request(req),
            _ => DriverReply::Error(DriverError::Unsupported),
        }
    }
}

/// The causes one IRQ thread serves.
#[derive(Debug, Clone, Copy)]
enum Role {
    /// The "other" MSI-X vector: link changes and TX timestamps.
    Other,
    /// The queue MSI-X vector: received frames, TX descriptor reclaim.
    Queues,
    /// Everything, on one vector (`msix`: an MSI-X entry, re-armed through EIMS) or none.
    All { msix: bool },
}

impl Role {
    fn serves_time_sync(self) -> bool {
        !matches!(self, Role::Queues)
    }
}

/// One IRQ thread: its shared state, its causes and how it polls.
struct IrqThread<'a, M: ptp_pci::Mmio, Fam, S: ?Sized> {
    data: &'a Data<M, Fam>,
    sink: &'a S,
    stop: &'a AtomicBool,
    role: Role,
    tx_poll: Duration,
    style: IrqStyle,
}

impl<M: ptp_pci::Mmio, Fam: Family, S: EventSink + ?Sized> IrqThread<'_, M, Fam, S> {
    /// Waits on the vector (or not, when polling, see `crate::irq`), handles the causes after
    /// every wait, re-arms the vector after it fired or left work behind, and acknowledges an
    /// interrupt that was its device's. The time-sync thread of a part without a TX stamp
    /// interrupt waits at most `tx_poll` while a stamp is pending and then reads the stamp
    /// registers; that poll is not a missed interrupt to the pacer. With [`IrqStyle::Napi`] a
    /// pass that followed an interrupt or found work is followed by polling ([`Self::napi`])
    /// before the vector is re-armed, and, if it polled, by one more poll after it.
    fn run<I: IrqVector + ?Sized>(&self, irq: Option<&I>, mut pacer: Pacer) {
        let data = self.data;
        while !self.stop.load(Ordering::Relaxed) {
            let poll_tx = self.role.serves_time_sync() && data.tx_poll_due();
            let woke = pacer.wait_at_most(irq, poll_tx.then_some(self.tx_poll));
            if woke == IrqWait::Closed {
                break;
            }
            if woke == IrqWait::Fired {
                Counters::bump(&data.counters.irq_wakeups);
                if self.role.serves_time_sync() {
                    Counters::bump(&data.counters.ts_wakeups);
                }
            }
            let work = self.pass();
            // A session that did not poll (nothing due, no frames) leaves the vector as plain
            // mode does: what came after the pass fires at the re-arm, and the quiescing
            // reads (ICR, TSYNCTXCTL) would find nothing.
            let polled = match self.style {
                IrqStyle::Napi(n) if woke == IrqWait::Fired || work => self.napi(n, work),
                _ => false,
            };
            if polled {
                self.quiesce();
            }
            if woke == IrqWait::Fired || work {
                self.rearm();
            }
            if polled {
                // Work that came after the last poll but before the re-arm raised no
                // interrupt if `quiesce` cleared its cause: take it now.
                self.poll();
            }
            if work && let Some(v) = irq {
                v.ack();
            }
            pacer.record(woke, work);
        }
    }

    /// One pass over the thread's causes (after a wait); whether it found work.
    fn pass(&self) -> bool {
        let (data, sink) = (self.data, self.sink);
        let work = match self.role {
            Role::Other => other_causes(data, sink, true).other,
            Role::Queues => queue_pass(data, sink),
            Role::All { .. } => {
                let causes = other_causes(data, sink, true);
                let frames = queue_pass(data, sink);
                causes.any || frames
            }
        };
        if self.role.serves_time_sync() && data.tx_poll_due() {
            data.retrieve_tx(sink);
        }
        work
    }

    /// One poll without reading the cause registers: TX stamps by their valid bits (one
    /// register read), received frames by their descriptors (memory). Whether it found work.
    fn poll(&self) -> bool {
        let (data, sink) = (self.data, self.sink);
        let mut found = false;
        if self.role.serves_time_sync() && data.txts.ready(&data.regs) {
            data.retrieve_tx(sink);
            found = true;
        }
        if !matches!(self.role, Role::Other) {
            found |= queue_pass(data, sink);
        }
        found
    }

    /// Whether a TX stamp this thread serves is due (a request waits for it): what a spin may
    /// catch. Frames are not predicted: a thread polls for them only while polls find some.
    fn stamp_due(&self) -> bool {
        self.role.serves_time_sync() && self.data.txts.pending() > 0
    }

    /// NAPI-style polling after a pass (`first_work`: whether it found work), with the vector
    /// still masked: polls run while they find work (at most `n.budget` that do, Linux NAPI's
    /// "complete when a poll finds less than its budget" in its simplest form); a poll that
    /// finds nothing while a stamp is due starts a spin of at most `n.spin`. Bounded by the
    /// budget and the spin, and by `stop`. Whether it polled at all.
    fn napi(&self, n: Napi, first_work: bool) -> bool {
        let c = &self.data.counters;
        let serves_queues = !matches!(self.role, Role::Other);
        let mut more = first_work && serves_queues;
        let mut found_passes = 0;
        let mut idle_since: Option<std::time::Instant> = None;
        let mut polled = false;
        while found_passes < n.budget && !self.stop.load(Ordering::Relaxed) {
            if !more && !self.stamp_due() {
                break;
            }
            polled = true;
            Counters::bump(&c.napi_polls);
            if self.poll() {
                more = serves_queues;
                found_passes += 1;
                if idle_since.take().is_some() {
                    Counters::bump(&c.spin_work);
                }
                continue;
            }
            more = false;
            if !self.stamp_due() {
                break;
            }
            let since = *idle_since.get_or_insert_with(std::time::Instant::now);
            if since.elapsed() >= n.spin {
                Counters::bump(&c.spin_idle);
                break;
            }
            let gap = std::time::Instant::now();
            while gap.elapsed() < SPIN_GAP {
                std::hint::spin_loop();
            }
        }
        polled
    }

    /// Before re-arming after polling: clears the vector's pending bit and the causes that
    /// work taken by polling left set (handling whatever they show), so the re-arm does not
    /// fire for work already done. A cause raised after this fires at the re-arm.
    fn quiesce(&self) {
        let (data, regs) = (self.data, &*self.data.regs);
        let bit = match (self.role, data.layout) {
            (_, IrqLayout::Shared) => 0,
            (_, IrqLayout::SingleMsix) => 1,
            (Role::Queues, _) => 1 << VECTOR_QUEUES,
            _ => 1 << VECTOR_OTHER,
        };
        if bit != 0 {
            regs.write(intel_regs::e1000::EICR, bit);
        }
        if self.role.serves_time_sync() {
            other_causes(data, self.sink, false);
        }
    }

    /// Re-enables the thread's vector (auto-masked when it fired).
    fn rearm(&self) {
        let (fam, regs) = (&self.data.fam, &*self.data.regs);
        match self.role {
            Role::Other => fam.rearm(regs, Rearm::Other),
            Role::Queues => fam.rearm(regs, Rearm::Queues),
            Role::All { msix: true } => fam.rearm(regs, Rearm::Single),
            Role::All { msix: false } => {}
        }
    }
}

/// Handles the "other" causes (link changes, TX timestamps); returns what was found. `count`:
/// a time-sync cause counts as an interrupt handled (not when it is read before a re-arm).
fn other_causes<M: ptp_pci::Mmio, Fam: Family, S: EventSink + ?Sized>(
    data: &Data<M, Fam>,
    sink: &S,
    count: bool,
) -> crate::family::Causes {
    let regs = &*data.regs;
    let causes = data.fam.read_causes(regs, data.pin_causes());
    if causes.time_sync && count {
        Counters::bump(&data.counters.interrupts);
    }
    if causes.tx_stamp {
        data.retrieve_tx(sink);
    }
    data.pin_events(causes.tsicr, sink);
    if causes.link {
        let link = data.fam.link(regs);
        data.link_up.store(link.up, Ordering::Relaxed);
        data.speed_mbps.store(link.speed_mbps, Ordering::Relaxed);
        log::info!(
            "link {} {} Mb/s",
            if link.up { "up" } else { "down" },
            link.speed_mbps
        );
        sink.send(DriverEvent::Link {
            up: link.up,
            speed_mbps: link.speed_mbps,
        });
    }
    causes
}

/// Received frames go to ptpd (PTP) or the network stack; TX descriptors are reclaimed.
/// Returns whether any frame was received.
fn queue_pass<M: ptp_pci::Mmio, Fam: Family, S: EventSink + ?Sized>(
    data: &Data<M, Fam>,
    sink: &S,
) -> bool {
    let regs = &*data.regs;
    let filter = data.rx_filter();
    let (_, rx_lat) = data.latency();
    let mut frames = false;
    loop {
        let tail = lock(&data.rx).poll(RX_BUDGET, |meta, buf| {
            frames = true;
            Counters::bump(&data.counters.rx_frames);
            let buf = &buf[..meta.len.min(BUF_LEN)];
            match data.fam.rx_frame(regs, filter, meta.status, buf, rx_lat) {
                RxFrame::Other { frame } => {
                    Counters::bump(&data.counters.rx_other);
                    if let Some(q) = data.netstack.get() {
                        // A full queue drops the frame, as a full RX ring would.
                        if q.tx.try_send(frame.to_vec()).is_ok() {
                            (q.notify)();
                        }
                    }
                }
                RxFrame::Ptp { rx_ns, frame } => {
                    if rx_ns.is_some() {
                        Counters::bump(&data.counters.rx_timestamped);
                    }
                    sink.send(DriverEvent::PtpFrame {
                        rx_ns,
                        frame: frame.to_vec(),
                    });
                }
            }
        });
        match tail {
            Some(t) => regs.write(data.fam.rdt(), t),
            None => break,
        }
    }
    lock(&data.tx).reclaim();
    frames
}
