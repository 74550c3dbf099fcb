//! igcd's start-up as an ordered sequence of steps over a [`Platform`], so the order that
//! matters on Redox is one piece of code the host can test (shared/reference/redox-platform.md
//! §9, §10, §14):
//!
//! 1. readiness protocol (it may fork, so before any thread);
//! 2. the PCI function (pcid channel, or an emulated model);
//! 3. the log file and the clock page, if their schemes are there yet;
//! 4. bring-up: BARs, interrupt vectors, DMA, link ([`Device::bring_up`]);
//! 5. everything the serve loop needs: scheme sockets with their request queues (whose
//!    `HashMap` draws random keys from `/scheme/rand`), the event queue, timer and wake pipe;
//! 6. the driver threads;
//! 7. the sandbox (`setrens(0, 0)`), once the log file and clock page are open or
//!    [`SANDBOX_GRACE`] has passed: after it no scheme can be opened any more;
//! 8. readiness.
//!
//! `/scheme/shm` (ipcd) and `/scheme/logging` (ramfs@logging) may come up after igcd, since init
//! orders neither before pcid-spawner. Step 3 therefore does not give up: [`Deferred::tick`],
//! run from the serve loop's timer, retries whatever is missing and enters the sandbox when
//! nothing is, or when the grace period ends (then without what is still missing, logged).

use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::time::Duration;

use ptp_ipc::clockpage::ClockPageWriter;
use ptp_pci::PciFunction;

use super::{ClockPageSlot, Device, Error, EventSink, Options};
use crate::family::Family;

/// How long igcd stays outside the sandbox waiting for `/scheme/shm` and `/scheme/logging`.
pub const SANDBOX_GRACE: Duration = Duration::from_secs(30);

/// What a platform provides to the start-up sequence. Every method that opens something in the
/// namespace is called before [`Platform::enter_sandbox`], and none after it.
pub trait Platform {
    type Func: PciFunction;
    type Fam: Family;
    type Readiness;
    /// Where the driver threads' events go.
    type Sink: EventSink;
    /// The schemes, their request queues and the serve loop's descriptors.
    type Serving;

    /// Chooses and starts the readiness protocol.
    fn readiness(&mut self) -> Result<Self::Readiness, Error>;
    /// Opens the PCI function the driver owns.
    fn function(&mut self) -> Result<Self::Func, Error>;
    /// Opens the log file; false while its scheme is not there.
    fn open_log(&mut self) -> bool;
    /// Creates the clock page; `None` while its scheme is not there.
    fn open_clock_page(&mut self) -> Option<(Arc<ClockPageWriter>, String)>;
    /// Creates and registers the schemes with their request queues, and the loop's descriptors.
    fn serving(
        &mut self,
        dev: &Arc<Device<Self::Func, Self::Fam>>,
    ) -> Result<(Self::Serving, Arc<Self::Sink>), Error>;
    /// Drops every scheme but `memory` and `pipe` from the namespace.
    fn enter_sandbox(&mut self) -> Result<(), Error>;
    /// Signals readiness.
    fn ready(&mut self, r: Self::Readiness) -> Result<(), Error>;
}

/// What is still to be opened before the sandbox, and when to stop waiting for it.
#[derive(Debug)]
pub struct Deferred {
    log: bool,
    page: bool,
    sandboxed: bool,
    deadline_ns: u64,
    slot: Arc<ClockPageSlot>,
}

impl Deferred {
    /// Nothing open yet; gives up waiting at monotonic `deadline_ns`.
    pub fn new(slot: Arc<ClockPageSlot>, deadline_ns: u64) -> Self {
        Self {
            log: false,
            page: false,
            sandboxed: false,
            deadline_ns,
            slot,
        }
    }

    pub fn sandboxed(&self) -> bool {
        self.sandboxed
    }

    /// Opens what became available; enters the sandbox once nothing is missing or the grace
    /// period is over. Does nothing once sandboxed. Returns whether it entered the sandbox now.
    pub fn tick<P: Platform>(&mut self, p: &mut P, now_ns: u64) -> Result<bool, Error> {
        if self.sandboxed {
            return Ok(false);
        }
        if !self.log && p.open_log() {
            self.log = true;
        }
        if !self.page
            && let Some((w, path)) = p.open_clock_page()
        {
            log::info!("clock page at {path}");
            self.slot.attach(w, path);
            self.page = true;
        }
        let done = self.log && self.page;
        if !done && now_ns < self.deadline_ns {
            return Ok(false);
        }
        if !self.log {
            log::warn!("no log file: /scheme/logging did not appear; logging to stderr only");
        }
        if !self.page {
            log::warn!("no clock page: /scheme/shm did not appear; clients use the exact path");
        }
        p.enter_sandbox()?;
        self.sandboxed = true;
        log::info!("sandboxed: only the memory and pipe schemes remain");
        Ok(true)
    }
}

/// A started driver: what the serve loop runs on.
pub struct Started<P: Platform> {
    pub dev: Arc<Device<P::Func, P::Fam>>,
    pub serving: P::Serving,
    pub sink: Arc<P::Sink>,
    pub deferred: Deferred,
    pub stop: Arc<AtomicBool>,
    pub threads: Vec<std::thread::JoinHandle<()>>,
}

/// Runs the start-up sequence (module documentation). `now_ns` reads the monotonic clock.
pub fn start<P: Platform>(
    p: &mut P,
    opts: &Options<P::Fam>,
    generation: u64,
    now_ns: impl Fn() -> u64,
) -> Result<Started<P>, Error> {
    let readiness = p.readiness()?;
    let func = p.function()?;
    let slot = Arc::new(ClockPageSlot::default());
    let grace = u64::try_from(SANDBOX_GRACE.as_nanos()).unwrap_or(u64::MAX);
    let mut deferred = Deferred::new(slot.clone(), now_ns().saturating_add(grace));
    deferred.log = p.open_log();
    if let Some((w, path)) = p.open_clock_page() {
        slot.attach(w, path);
        deferred.page = true;
    }
    let dev = Arc::new(Device::bring_up(func, opts, slot, generation)?);
    let (serving, sink) = p.serving(&dev)?;
    let stop = Arc::new(AtomicBool::new(false));
    let threads = dev.start_threads(sink.clone(), stop.clone());
    deferred.tick(p, now_ns())?;
    p.ready(readiness)?;
    Ok(Started {
        dev,
        serving,
        sink,
        deferred,
        stop,
        threads,
    })
}
