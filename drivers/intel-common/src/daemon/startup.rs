//! igcd's start-up as an ordered sequence of steps over a [`Platform`], so the order that
//! matters on Redox is one piece of code the host can test (shared/reference/redox-platform.md
//! §9, §10, §14):
//!
//! 1. readiness protocol (it may fork, so before any thread);
//! 2. the PCI function (pcid channel, or an emulated model);
//! 3. the scheme names this driver will serve: a name a live instance holds fails here, before
//!    bring-up touches the NIC; a dead instance's name is taken back ([`Platform::claim_names`]);
//! 4. the NIC claimed: BAR 0 mapped and the DMA a dead predecessor left running stopped, before
//!    this process allocates anything large that the NIC could be writing into
//!    ([`Device::claim`]);
//! 5. a first try at the log file and the clock page (and the ring segments), if their schemes
//!    are there yet;
//! 6. the rest of bring-up: interrupt vectors, DMA rings, link, PHC ([`Device::from_claimed`]);
//! 7. everything the serve loop needs: scheme sockets with their request queues (whose
//!    `HashMap` draws random keys from `/scheme/rand`), the event queue, timer and wake pipe;
//! 8. the driver threads, and the sandbox thread ([`Deferred::run`]): it retries what step 5
//!    could not open and then enters the sandbox (`setrens(0, 0)`), once nothing is missing or
//!    [`SANDBOX_GRACE`] has passed: after it no scheme can be opened any more;
//! 9. readiness.
//!
//! Nothing that goes through the namespace (an open, `setrens`) runs on the serving thread once
//! a scheme of ours is registered: Redox's namespace manager is single-threaded and forwards an
//! open to the scheme's daemon synchronously, so an open of ours queued behind a client's open
//! of our scheme would wait on a manager that waits on us (issue 22, failure 4: the whole
//! system stopped). Hence the sandbox thread.
//!
//! `/scheme/logging` (ramfs@logging) may come up after igcd, since init does not order it
//! before pcid-spawner. (The clock page needed `/scheme/shm` too until issue 23; on Redox it is
//! igcd's own memory now, served by its channel scheme, and never waits. On Linux it is a file
//! whose directory may appear late.)

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use ptp_ipc::clockpage::ClockPageWriter;
use ptp_pci::PciFunction;

use super::{ClockPageSlot, Device, Error, EventSink, Options};
use crate::family::Family;

/// How long igcd stays outside the sandbox waiting for its log file and clock page.
pub const SANDBOX_GRACE: Duration = Duration::from_secs(30);
/// How often the sandbox thread retries what is missing.
pub const RETRY: Duration = Duration::from_millis(100);

/// The namespace operations of start-up that may be retried: they run on the sandbox thread
/// (and once on the main thread before any scheme of ours is registered).
pub trait Namespace: Send + 'static {
    /// Opens the log file: its path, or why not (yet).
    fn open_log(&mut self) -> Result<String, String>;
    /// Creates the clock page (and, on Redox, the ring segments with it), or why not (yet).
    fn open_clock_page(&mut self) -> Result<(Arc<ClockPageWriter>, String), String>;
    /// Drops every scheme but `memory` and `pipe` from the namespace.
    fn enter_sandbox(&mut self) -> Result<(), Error>;
}

/// The sandbox thread's clock: monotonic nanoseconds, and a bounded sleep.
pub trait Clock: Send + 'static {
    fn now_ns(&self) -> u64;
    fn sleep(&self, d: Duration);
}

/// The host's monotonic clock and `thread::sleep`.
pub struct RealClock(pub fn() -> u64);

impl Clock for RealClock {
    fn now_ns(&self) -> u64 {
        (self.0)()
    }
    fn sleep(&self, d: Duration) {
        std::thread::sleep(d);
    }
}

/// What a platform provides to the start-up sequence. Every method that opens something in the
/// namespace is called before the first scheme registration, or from the sandbox thread.
pub trait Platform {
    type Func: PciFunction;
    type Fam: Family;
    type Readiness;
    /// Where the driver threads' events go.
    type Sink: EventSink;
    /// The schemes, their request queues and the serve loop's descriptors.
    type Serving;
    /// What the sandbox thread opens with.
    type Ns: Namespace;

    /// Chooses and starts the readiness protocol.
    fn readiness(&mut self) -> Result<Self::Readiness, Error>;
    /// Opens the PCI function the driver owns.
    fn function(&mut self) -> Result<Self::Func, Error>;
    /// Makes sure the scheme names [`Platform::serving`] will register are free: fails if a
    /// running instance serves one, takes back a name a dead instance left.
    fn claim_names(&mut self) -> Result<(), Error>;
    /// The log file's and clock page's opener (the function's name is known by now).
    fn namespace(&mut self) -> Self::Ns;
    /// Creates and registers the schemes with their request queues, and the loop's descriptors.
    /// Everything that needs the namespace comes before the first registration.
    fn serving(
        &mut self,
        dev: &Arc<Device<Self::Func, Self::Fam>>,
    ) -> Result<(Self::Serving, Arc<Self::Sink>), Error>;
    /// Signals readiness.
    fn ready(&mut self, r: Self::Readiness) -> Result<(), Error>;
}

/// What is still to be opened before the sandbox, and when to stop waiting for it.
pub struct Deferred<N> {
    ns: N,
    log: Result<String, String>,
    page: Result<String, String>,
    deadline_ns: u64,
    slot: Arc<ClockPageSlot>,
    sandboxed: Arc<AtomicBool>,
}

impl<N: Namespace> Deferred<N> {
    /// Nothing open yet; gives up waiting at monotonic `deadline_ns`.
    pub fn new(ns: N, slot: Arc<ClockPageSlot>, deadline_ns: u64) -> Self {
        let none = || Err("not tried".to_string());
        Self {
            ns,
            log: none(),
            page: none(),
            deadline_ns,
            slot,
            sandboxed: Arc::new(AtomicBool::new(false)),
        }
    }

    fn done(&self) -> bool {
        self.log.is_ok() && self.page.is_ok()
    }

    /// Opens what became available; true once nothing is missing. `first` logs why something
    /// is missing (later attempts stay quiet).
    pub fn attempt(&mut self, first: bool) -> bool {
        if self.log.is_err() {
            self.log = self.ns.open_log();
            match &self.log {
                Ok(path) => log::info!("logging to {path}"),
                Err(e) if first => log::info!("no log file yet ({e}); retrying"),
                Err(_) => {}
            }
        }
        if self.page.is_err() {
            self.page = self.ns.open_clock_page().map(|(w, path)| {
                log::info!("clock page at {path}");
                self.slot.attach(w, path.clone());
                path
            });
            if let (Err(e), true) = (&self.page, first) {
                log::info!("no clock page yet ({e}); retrying");
            }
        }
        self.done()
    }

    /// The sandbox thread's body: retries every [`RETRY`] until nothing is missing or the
    /// deadline has passed, then enters the sandbox, logging what it gave up and why.
    pub fn run(mut self, clock: &impl Clock) -> Result<(), Error> {
        while !self.attempt(false) && clock.now_ns() < self.deadline_ns {
            clock.sleep(RETRY);
        }
        if let Err(e) = &self.log {
            log::warn!("no log file ({e}); logging to stderr only");
        }
        if let Err(e) = &self.page {
            log::warn!("no clock page ({e}); clients use the exact path");
        }
        self.ns.enter_sandbox()?;
        self.sandboxed.store(true, Ordering::Release);
        log::info!("sandboxed: only the memory and pipe schemes remain");
        Ok(())
    }
}

/// The sandbox thread, watched from the serve loop.
pub struct SandboxThread {
    handle: Option<JoinHandle<Result<(), Error>>>,
    sandboxed: Arc<AtomicBool>,
}

impl SandboxThread {
    /// Starts `deferred` on a thread of its own.
    pub fn spawn<N: Namespace>(deferred: Deferred<N>, clock: impl Clock) -> Result<Self, Error> {
        let sandboxed = deferred.sandboxed.clone();
        let handle = std::thread::Builder::new()
            .name("sandbox".into())
            .spawn(move || deferred.run(&clock))
            .map_err(|e| Error::Other(format!("sandbox thread: {e}")))?;
        Ok(Self {
            handle: Some(handle),
            sandboxed,
        })
    }

    pub fn sandboxed(&self) -> bool {
        self.sandboxed.load(Ordering::Acquire)
    }

    /// The thread's outcome once it has ended (a failed `setrens` is fatal, as before); `Ok`
    /// while it runs and after it succeeded. Never blocks on a running thread.
    pub fn check(&mut self) -> Result<(), Error> {
        if !self.handle.as_ref().is_some_and(JoinHandle::is_finished) {
            return Ok(());
        }
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Other("the sandbox thread panicked".into())),
            None => Ok(()),
        }
    }

    /// Waits for the thread to end (tests; the daemon never joins it).
    pub fn join(&mut self) -> Result<(), Error> {
        match self.handle.take().map(JoinHandle::join) {
            Some(Ok(r)) => r,
            Some(Err(_)) => Err(Error::Other("the sandbox thread panicked".into())),
            None => Ok(()),
        }
    }
}

/// A started driver: what the serve loop runs on.
pub struct Started<P: Platform> {
    pub dev: Arc<Device<P::Func, P::Fam>>,
    pub serving: P::Serving,
    pub sink: Arc<P::Sink>,
    pub sandbox: SandboxThread,
    pub stop: Arc<AtomicBool>,
    pub threads: Vec<JoinHandle<()>>,
}

/// Runs the start-up sequence (module documentation).
pub fn start<P: Platform>(
    p: &mut P,
    opts: &Options<P::Fam>,
    generation: u64,
    clock: impl Clock,
) -> Result<Started<P>, Error> {
    let readiness = p.readiness()?;
    let func = p.function()?;
    p.claim_names()?;
    // The previous driver's DMA stopped before this process makes its own memory.
    let claimed = Device::claim(func, opts)?;
    let slot = Arc::new(ClockPageSlot::default());
    let grace = u64::try_from(SANDBOX_GRACE.as_nanos()).unwrap_or(u64::MAX);
    let deadline = clock.now_ns().saturating_add(grace);
    let mut deferred = Deferred::new(p.namespace(), slot.clone(), deadline);
    // No scheme of ours is registered yet: nobody can be waiting on us.
    deferred.attempt(true);
    let dev = Arc::new(Device::from_claimed(claimed, opts, slot, generation)?);
    let (serving, sink) = p.serving(&dev)?;
    let stop = Arc::new(AtomicBool::new(false));
    let threads = dev.start_threads(sink.clone(), stop.clone());
    let sandbox = SandboxThread::spawn(deferred, clock)?;
    p.ready(readiness)?;
    Ok(Started {
        dev,
        serving,
        sink,
        sandbox,
        stop,
        threads,
    })
}
