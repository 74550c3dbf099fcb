//! The request side of a driver daemon, shared by every family: turns typed IPC requests into
//! PHC operations and counters into `Stats`. The daemon owns transport and threads; this module
//! owns meaning.

use std::sync::atomic::{AtomicU64, Ordering};

use ptp_ipc::{Caps, DriverError, DriverReply, DriverRequest, Stats};
use ptp_pci::Mmio;

use crate::clock::{ClockHw, Phc};

/// Counters updated by the IRQ thread, the transmit path and the watchdog.
#[derive(Debug, Default)]
pub struct Counters {
    pub tx_requested: AtomicU64,
    pub tx_delivered: AtomicU64,
    pub tx_skipped: AtomicU64,
    pub tx_timeouts: AtomicU64,
    pub tx_lost: AtomicU64,
    pub quirk_recoveries: AtomicU64,
    pub interrupts: AtomicU64,
    pub tx_frames: AtomicU64,
    pub rx_frames: AtomicU64,
    pub rx_timestamped: AtomicU64,
    pub rx_other: AtomicU64,
    pub irq_wakeups: AtomicU64,
    pub ts_wakeups: AtomicU64,
    pub napi_polls: AtomicU64,
    pub spin_work: AtomicU64,
    pub spin_idle: AtomicU64,
}

impl Counters {
    #[inline]
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// A snapshot, with the funnel's MMIO counts.
    pub fn snapshot(&self, mmio_reads: u64, mmio_writes: u64) -> Stats {
        let g = |c: &AtomicU64| c.load(Ordering::Relaxed);
        Stats {
            tx_requested: g(&self.tx_requested),
            tx_delivered: g(&self.tx_delivered),
            tx_skipped: g(&self.tx_skipped),
            tx_timeouts: g(&self.tx_timeouts),
            tx_lost: g(&self.tx_lost),
            quirk_recoveries: g(&self.quirk_recoveries),
            interrupts: g(&self.interrupts),
            mmio_reads,
            mmio_writes,
            tx_frames: g(&self.tx_frames),
            rx_frames: g(&self.rx_frames),
            rx_timestamped: g(&self.rx_timestamped),
            rx_other: g(&self.rx_other),
            irq_wakeups: g(&self.irq_wakeups),
            ts_wakeups: g(&self.ts_wakeups),
            napi_polls: g(&self.napi_polls),
            spin_work: g(&self.spin_work),
            spin_idle: g(&self.spin_idle),
        }
    }
}

/// Requests that are not clock operations (frames, timestamp configuration) go to the family's
/// data path.
pub trait DataPath {
    fn handle(&self, req: DriverRequest) -> DriverReply;
}

/// A data path for a driver without rings yet: every frame request is refused with a typed
/// `Unsupported`, never silently dropped.
#[derive(Debug, Default)]
pub struct NoDataPath;

impl DataPath for NoDataPath {
    fn handle(&self, _req: DriverRequest) -> DriverReply {
        DriverReply::Error(DriverError::Unsupported)
    }
}

/// Dispatches one request.
pub fn dispatch<M: Mmio, H: ClockHw, D: DataPath>(
    phc: &Phc<M, H>,
    caps: &Caps,
    counters: &Counters,
    data: &D,
    req: DriverRequest,
) -> DriverReply {
    let done = |r: Result<(), crate::HwError>| match r {
        Ok(()) => DriverReply::Done,
        Err(e) => DriverReply::Error(e.into()),
    };
    match req {
        DriverRequest::GetTime => DriverReply::Time {
            ns: phc.gettime().phc_ns,
        },
        DriverRequest::GetTimeX { samples } => match phc.gettimex(samples) {
            Ok(samples) => DriverReply::TimeX { samples },
            Err(e) => DriverReply::Error(e.into()),
        },
        DriverRequest::SetTime { ns } => done(phc.settime(ns)),
        DriverRequest::AdjTime { delta_ns } => done(phc.adjtime(delta_ns)),
        DriverRequest::AdjFine { scaled_ppm } => done(phc.adjfine(scaled_ppm)),
        // What the hardware runs at, also after a warm attach (`Phc::with_freq`).
        DriverRequest::GetFreq => DriverReply::Freq {
            scaled_ppm: phc.freq_scaled_ppm(),
        },
        DriverRequest::Caps => DriverReply::Caps(caps.clone()),
        DriverRequest::Stats => {
            let regs = phc.regs();
            DriverReply::Stats(counters.snapshot(regs.reads(), regs.writes()))
        }
        other @ (DriverRequest::SendPtp { .. }
        | DriverRequest::SetTstampConfig { .. }
        | DriverRequest::GetPins
        | DriverRequest::SetPin { .. }
        | DriverRequest::ExtTs { .. }
        | DriverRequest::PerOut { .. }
        | DriverRequest::Pps { .. }) => data.handle(other),
        // The channel's handshake, answered by the channel before a device sees anything.
        DriverRequest::Hello | DriverRequest::HelloRing { .. } => {
            DriverReply::Error(DriverError::InvalidArgument)
        }
    }
}
