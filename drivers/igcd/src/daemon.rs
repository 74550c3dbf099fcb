//! Bring-up and the driver's threads, independent of the transport that carries requests.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use intel_common::Regs;
use intel_common::clock::{PageSample, Phc};
use intel_common::igc::{self, Igc, Link};
use intel_common::service::{self, Counters, NoDataPath};
use intel_regs::ids::Part;
use ptp_ipc::{Caps, DriverEvent, DriverReply, DriverRequest, RxFilter};
use ptp_pci::{IrqVector, IrqWait, PciFunction};

use crate::{Error, Options};

/// Where the IRQ thread and the watchdog send events (the current ptpd connection, if any).
pub trait EventSink: Send + Sync + 'static {
    fn send(&self, ev: DriverEvent);
}

/// How often the watchdog refreshes the clock page (and, with timestamping, checks slots).
pub const WATCHDOG_PERIOD: Duration = Duration::from_millis(100);
/// How long the IRQ thread blocks before re-checking the stop flag.
const IRQ_WAIT: Duration = Duration::from_millis(100);

/// A brought-up i225/i226.
pub struct Device<F: PciFunction> {
    /// Kept so the mapping and vectors stay valid for the daemon's life.
    pub func: F,
    pub part: &'static Part,
    pub regs: Arc<Regs<F::Bar>>,
    pub phc: Arc<Phc<F::Bar, Igc>>,
    pub counters: Arc<Counters>,
    pub caps: Caps,
    pub irq_other: Arc<F::Irq>,
    pub link: Link,
}

impl<F: PciFunction> Device<F> {
    /// Probes, resets and initialises the NIC (reference §10.2), with bounded waits.
    pub fn bring_up(
        mut func: F,
        opts: &Options,
        clock_page: String,
        publish: impl Fn(&PageSample) + Send + Sync + 'static,
    ) -> Result<Self, Error> {
        let ids = func.ids();
        let part = igc::probe(ids.vendor, ids.device)?;
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
        igc::reset(&regs)?;
        let mut vectors = func.alloc_vectors(igc::VECTORS)?;
        let irq_other = Arc::new(vectors.swap_remove(igc::VECTOR_OTHER as usize));
        let link = igc::link_up(&regs, opts.link_wait);
        log::info!(
            "link {} {} Mb/s",
            if link.up { "up" } else { "down" },
            link.speed_mbps
        );
        igc::enable_msix(&regs);
        // The PHC starts at the host's wall-clock time, as Linux's igc_ptp_reset does.
        igc::ptp_reset(&regs, ptp_ipc::time::realtime_ns());
        let phc = Arc::new(Phc::new(regs.clone(), Igc).with_publisher(publish));
        let first = phc.gettime();
        log::info!("PHC running, {} ns", first.phc_ns);
        let caps = Caps {
            part: part.name.to_string(),
            vendor_id: ids.vendor,
            device_id: ids.device,
            max_adj_ppb: intel_regs::igc::MAX_ADJ_PPB,
            tx_ts_sets: 0,
            rx_filters: 1 << RxFilter::None as u8,
            n_ext_ts: 0,
            n_per_out: 0,
            cross_timestamp: true,
            clock_page,
        };
        Ok(Self {
            func,
            part,
            regs,
            phc,
            counters: Arc::new(Counters::default()),
            caps,
            irq_other,
            link,
        })
    }

    /// Executes one request from ptpd.
    pub fn handle(&self, req: DriverRequest) -> DriverReply {
        service::dispatch(&self.phc, &self.caps, &self.counters, &NoDataPath, req)
    }

    /// Starts the IRQ thread and the watchdog; they run until `stop` is set.
    pub fn start_threads<S: EventSink>(
        &self,
        sink: Arc<S>,
        stop: Arc<AtomicBool>,
    ) -> Vec<std::thread::JoinHandle<()>> {
        let mut threads = Vec::new();
        {
            let regs = self.regs.clone();
            let irq = self.irq_other.clone();
            let counters = self.counters.clone();
            let stop = stop.clone();
            let sink = sink.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("irq-other".into())
                    .spawn(move || irq_thread(&regs, &*irq, &counters, &*sink, &stop))
                    .expect("spawn IRQ thread"),
            );
        }
        {
            let phc = self.phc.clone();
            threads.push(
                std::thread::Builder::new()
                    .name("watchdog".into())
                    .spawn(move || {
                        while !stop.load(Ordering::Relaxed) {
                            // A fresh sample keeps the clock page and its rate estimate current.
                            phc.gettime();
                            std::thread::sleep(WATCHDOG_PERIOD);
                        }
                    })
                    .expect("spawn watchdog"),
            );
        }
        threads
    }
}

/// The IRQ thread: the only place the "other" causes are read. Time-sync causes are handled
/// here, never deferred (seed 000, patch 3/4).
fn irq_thread<M: ptp_pci::Mmio, I: IrqVector + ?Sized, S: EventSink + ?Sized>(
    regs: &Regs<M>,
    irq: &I,
    counters: &Counters,
    sink: &S,
    stop: &AtomicBool,
) {
    while !stop.load(Ordering::Relaxed) {
        match irq.wait(IRQ_WAIT) {
            IrqWait::TimedOut => continue,
            IrqWait::Closed => break,
            IrqWait::Fired => {}
        }
        let causes = igc::read_other_causes(regs);
        if causes.icr & intel_regs::igc::icr::TS != 0 {
            Counters::bump(&counters.interrupts);
        }
        if causes.icr & intel_regs::igc::icr::LSC != 0 {
            let link = igc::link_from_status(regs.read(intel_regs::igc::STATUS));
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
        igc::rearm_other(regs);
    }
}
