//! The start-up order against a namespace double that refuses every open after `setrens`, as
//! Redox does (reference §10, §14), and that records every namespace call the serving thread
//! makes after a scheme of ours is registered: on Redox the single-threaded namespace manager
//! may be forwarding a client's open to us at that moment, and waits for our answer while our
//! call waits for it (issue 22, failure 4: igcd started before ipcd stopped the whole system).
//! On the emulated i225.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::thread::ThreadId;
use std::time::Duration;

use ptp_emu::igc::I225;
use ptp_ipc::clockpage::{ClockPageReader, ClockPageWriter};
use ptp_ipc::{DriverEvent, DriverReply, DriverRequest};
use ptp_pci::emulated::EmuFunction;
use ptp_pci::{Capability, DmaRegion, PciError, PciFunction, PciIds};

use intel_common::daemon::startup::*;
use intel_common::daemon::{Error, EventSink};
use intel_common::igc::Igc;

use crate::Options;
use crate::daemon::Device;

/// The namespace as the daemon sees it: what it opened, in order, what it tried to open after
/// `setrens`, and what the serving thread asked of it after registering a scheme.
#[derive(Default)]
struct Ns {
    events: Vec<String>,
    sandboxed: bool,
    refused: Vec<String>,
    /// The thread that registered our first scheme (the serving thread).
    serving: Option<ThreadId>,
    on_serving_thread: Vec<String>,
    /// A scheme name left by an instance: `Some(true)` while its server runs.
    held: Option<bool>,
}

type Shared = Arc<Mutex<Ns>>;

fn lock(ns: &Shared) -> MutexGuard<'_, Ns> {
    ns.lock().unwrap()
}

/// Records an open of `what`; refused (false) once sandboxed.
fn open(ns: &Shared, what: &str) -> bool {
    let mut ns = lock(ns);
    if ns.serving == Some(std::thread::current().id()) {
        ns.on_serving_thread.push(what.to_string());
    }
    if ns.sandboxed {
        ns.refused.push(what.to_string());
        return false;
    }
    ns.events.push(what.to_string());
    true
}

/// The emulated function, with its interrupt vectors counted as irq-scheme opens (BARs and DMA
/// come from the `memory` scheme, which stays after `setrens`).
struct Recorded {
    inner: EmuFunction<I225>,
    ns: Shared,
}

impl PciFunction for Recorded {
    type Bar = <EmuFunction<I225> as PciFunction>::Bar;
    type Irq = <EmuFunction<I225> as PciFunction>::Irq;
    fn ids(&self) -> PciIds {
        self.inner.ids()
    }
    fn address(&self) -> String {
        self.inner.address()
    }
    fn config_read32(&self, offset: u16) -> u32 {
        self.inner.config_read32(offset)
    }
    fn config_write32(&mut self, offset: u16, value: u32) {
        self.inner.config_write32(offset, value)
    }
    fn capabilities(&self) -> Vec<Capability> {
        self.inner.capabilities()
    }
    fn map_bar(&mut self, bar: u8) -> Result<Self::Bar, PciError> {
        // From the memory scheme, which stays after setrens: recorded for the order only.
        lock(&self.ns).events.push(format!("BAR {bar}"));
        self.inner.map_bar(bar)
    }
    fn alloc_vectors(&mut self, count: u16) -> Result<Vec<Self::Irq>, PciError> {
        if !open(&self.ns, "irq vectors") {
            return Err(PciError::Unavailable("no irq scheme".into()));
        }
        self.inner.alloc_vectors(count)
    }
    fn alloc_dma(&mut self, len: usize) -> Result<DmaRegion, PciError> {
        self.inner.alloc_dma(len)
    }
}

#[derive(Default)]
struct Events(Mutex<Vec<DriverEvent>>);

impl EventSink for Events {
    fn send(&self, ev: DriverEvent) {
        self.0.lock().unwrap().push(ev);
    }
}

/// A platform whose `shm` and `logging` schemes exist from the `n`th attempt on (`None`:
/// never).
struct Fake {
    ns: Shared,
    shm_from: Option<u32>,
    logging_from: Option<u32>,
    tries: Arc<Tries>,
    page: PathBuf,
}

/// Open attempts so far (the sandbox thread makes them, the test reads them).
#[derive(Default)]
struct Tries {
    shm: AtomicU32,
    logging: AtomicU32,
}

/// The namespace half the sandbox thread owns.
struct FakeNs {
    ns: Shared,
    shm_from: Option<u32>,
    logging_from: Option<u32>,
    tries: Arc<Tries>,
    page: PathBuf,
}

fn exists(from: Option<u32>, tries: &AtomicU32) -> bool {
    let n = tries.fetch_add(1, Ordering::Relaxed) + 1;
    from.is_some_and(|from| n >= from)
}

impl Namespace for FakeNs {
    fn open_log(&mut self) -> Result<String, String> {
        if open(&self.ns, "log file") && exists(self.logging_from, &self.tries.logging) {
            Ok("log".into())
        } else {
            Err("no /scheme/logging".into())
        }
    }
    fn open_clock_page(&mut self) -> Result<(Arc<ClockPageWriter>, String), String> {
        if !(open(&self.ns, "clock page") && exists(self.shm_from, &self.tries.shm)) {
            return Err("no /scheme/shm".into());
        }
        let w = ClockPageWriter::create(&self.page).unwrap();
        Ok((Arc::new(w), self.page.display().to_string()))
    }
    fn enter_sandbox(&mut self) -> Result<(), Error> {
        // setrens is a call to the namespace manager too.
        open(&self.ns, "setrens");
        lock(&self.ns).sandboxed = true;
        Ok(())
    }
}

/// A clock that moves only when the sandbox thread sleeps: its retries run at once, and as
/// many as the grace period holds.
#[derive(Clone, Default)]
struct FakeClock(Arc<AtomicU64>);

impl Clock for FakeClock {
    fn now_ns(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
    fn sleep(&self, d: Duration) {
        self.0.fetch_add(d.as_nanos() as u64, Ordering::Relaxed);
    }
}

impl Platform for Fake {
    type Func = Recorded;
    type Fam = Igc;
    type Readiness = ();
    type Sink = Events;
    type Serving = ();
    type Ns = FakeNs;

    fn readiness(&mut self) -> Result<(), Error> {
        lock(&self.ns).events.push("readiness".into());
        Ok(())
    }
    fn function(&mut self) -> Result<Recorded, Error> {
        if !open(&self.ns, "pcid channel") {
            return Err(Error::Other("refused".into()));
        }
        let opts = emulated_opts();
        let inner = crate::options::emulated_function(opts.emulate.unwrap(), &opts)?;
        Ok(Recorded {
            inner,
            ns: self.ns.clone(),
        })
    }
    fn claim_names(&mut self) -> Result<(), Error> {
        open(&self.ns, "claim ptpdrv");
        let mut ns = lock(&self.ns);
        match ns.held {
            Some(true) => Err(Error::Other("served by a running process".into())),
            Some(false) => {
                ns.held = None;
                Ok(())
            }
            None => Ok(()),
        }
    }
    fn namespace(&mut self) -> FakeNs {
        FakeNs {
            ns: self.ns.clone(),
            shm_from: self.shm_from,
            logging_from: self.logging_from,
            tries: self.tries.clone(),
            page: self.page.clone(),
        }
    }
    fn serving(&mut self, _dev: &Arc<Device<Recorded>>) -> Result<((), Arc<Events>), Error> {
        // The loop's event queue, timer and wake pipe; then per scheme its socket and request
        // queue (random keys) and its registration, the channel's last.
        for what in [
            "event queue",
            "timer",
            "wake pipe",
            "scheme network",
            "queue network",
            "register network",
            "scheme ptpdrv",
            "queue ptpdrv",
            "register ptpdrv",
        ] {
            if !open(&self.ns, what) {
                return Err(Error::Other(format!("{what} refused after setrens")));
            }
            if what == "register ptpdrv" {
                let mut ns = lock(&self.ns);
                if ns.held.is_some() {
                    return Err(Error::Other("register ptpdrv: File exists".into()));
                }
                // From here on ptpd (which retries the channel's name) may be in the namespace
                // manager, waiting on us. (The network scheme's registration just before it is
                // the one call that cannot come earlier: smolnetd could open that name then.)
                ns.serving = Some(std::thread::current().id());
            }
        }
        Ok(((), Arc::new(Events::default())))
    }
    fn ready(&mut self, _r: ()) -> Result<(), Error> {
        lock(&self.ns).events.push("ready".into());
        Ok(())
    }
}

fn emulated_opts() -> Options {
    let args = ["--emulate", "i225", "--link-wait-ms", "500"];
    Options::parse(args.iter().map(Into::into))
        .unwrap()
        .unwrap()
}

fn fake(shm_from: Option<u32>, logging_from: Option<u32>) -> Fake {
    static N: AtomicU32 = AtomicU32::new(0);
    let page = std::env::temp_dir().join(format!(
        "igcd-startup-{}-{}.page",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    Fake {
        ns: Shared::default(),
        shm_from,
        logging_from,
        tries: Arc::default(),
        page,
    }
}

/// Starts, and waits for the sandbox thread to end: its outcome, and the started driver.
fn start_and_sandbox(f: &mut Fake, clock: &FakeClock) -> Started<Fake> {
    let mut s = start(f, &emulated_opts(), 7, clock.clone()).expect("start-up");
    s.sandbox.join().expect("sandbox thread");
    assert!(s.sandbox.sandboxed());
    s
}

fn stop(s: Started<Fake>, f: &Fake) {
    s.stop.store(true, Ordering::Relaxed);
    for t in s.threads {
        t.join().unwrap();
    }
    let _ = std::fs::remove_file(&f.page);
    // The writer's lock beside the page (ptp_ipc::clockpage, Linux).
    let mut lock = f.page.clone().into_os_string();
    lock.push(".lock");
    let _ = std::fs::remove_file(lock);
}

fn caps_page<F: PciFunction>(dev: &Device<F>) -> String {
    match dev.handle(DriverRequest::Caps, &Events::default()) {
        Some(DriverReply::Caps(c)) => c.clock_page,
        other => panic!("caps: {other:?}"),
    }
}

fn pos(ns: &Ns, what: &str) -> usize {
    ns.events
        .iter()
        .position(|e| e == what)
        .unwrap_or_else(|| panic!("{what} never happened: {:?}", ns.events))
}

/// No namespace call from the serving thread once a scheme is registered, none after setrens.
fn assert_no_deadlock_and_no_open_in_sandbox(ns: &Ns) {
    assert!(
        ns.on_serving_thread.is_empty(),
        "the serving thread called the namespace manager after registering a scheme \
         (it may be waiting on us): {:?}; all: {:?}",
        ns.on_serving_thread,
        ns.events
    );
    assert!(
        ns.refused.is_empty(),
        "opened after setrens: {:?}",
        ns.refused
    );
}

#[test]
fn every_open_comes_before_setrens_and_none_on_the_serving_thread() {
    let mut f = fake(Some(1), Some(1));
    let clock = FakeClock::default();
    let s = start_and_sandbox(&mut f, &clock);
    {
        let ns = lock(&f.ns);
        assert!(ns.sandboxed);
        assert_no_deadlock_and_no_open_in_sandbox(&ns);
        assert_eq!(pos(&ns, "readiness"), 0, "{:?}", ns.events);
        let sandbox = pos(&ns, "setrens");
        for what in [
            "pcid channel",
            "claim ptpdrv",
            "log file",
            "clock page",
            "irq vectors",
            "scheme ptpdrv",
            "queue ptpdrv",
            "queue network",
            "event queue",
            "timer",
            "wake pipe",
        ] {
            assert!(
                pos(&ns, what) < sandbox,
                "{what} after setrens: {:?}",
                ns.events
            );
        }
        // The clock page is there at once: the sandbox thread had nothing to retry.
        assert_eq!(clock.now_ns(), 0);
        assert!(pos(&ns, "ready") > pos(&ns, "register ptpdrv"));
    }
    assert_eq!(caps_page(&s.dev), f.page.display().to_string());
    stop(s, &f);
}

#[test]
fn a_late_clock_page_and_log_file_are_retried_off_the_serving_thread_until_they_exist() {
    // igcd before ipcd and ramfs@logging: shm answers from the 4th attempt, logging from the
    // 2nd (issue 22, failure 4).
    let mut f = fake(Some(4), Some(2));
    let clock = FakeClock::default();
    let s = start_and_sandbox(&mut f, &clock);
    let ns = lock(&f.ns);
    assert!(ns.sandboxed);
    assert_no_deadlock_and_no_open_in_sandbox(&ns);
    let opens = |what: &str| ns.events.iter().filter(|e| *e == what).count();
    assert_eq!((opens("log file"), opens("clock page")), (2, 4));
    // Ready without waiting for them, right after the registration.
    assert!(pos(&ns, "ready") > pos(&ns, "register ptpdrv"));
    // The 1st attempt before bring-up, the 2nd as the sandbox thread starts, then one per
    // RETRY; the sandbox at once after the 4th.
    assert_eq!(clock.now_ns(), 2 * RETRY.as_nanos() as u64);
    drop(ns);
    // The page is published from now on, and named in Caps.
    assert_eq!(caps_page(&s.dev), f.page.display().to_string());
    s.dev.phc.gettime();
    let sample = ClockPageReader::open(&f.page).unwrap().read().unwrap();
    assert_eq!(sample.generation, 7);
    stop(s, &f);
}

#[test]
fn a_scheme_that_never_appears_is_given_up_when_the_grace_period_ends() {
    let mut f = fake(None, Some(1));
    let clock = FakeClock::default();
    let s = start_and_sandbox(&mut f, &clock);
    let grace = SANDBOX_GRACE.as_nanos() as u64;
    assert_eq!(
        clock.now_ns(),
        grace,
        "gave up at the end of the grace period"
    );
    let tries = f.tries.shm.load(Ordering::Relaxed);
    assert_eq!(u64::from(tries), 2 + grace / RETRY.as_nanos() as u64);
    let ns = lock(&f.ns);
    assert!(ns.sandboxed);
    assert_no_deadlock_and_no_open_in_sandbox(&ns);
    drop(ns);
    assert_eq!(caps_page(&s.dev), "");
    stop(s, &f);
}

#[test]
fn a_name_a_running_instance_serves_fails_before_bring_up() {
    let mut f = fake(Some(1), Some(1));
    lock(&f.ns).held = Some(true);
    let e = start(&mut f, &emulated_opts(), 7, FakeClock::default())
        .err()
        .expect("start-up must fail");
    assert!(e.to_string().contains("running"), "{e}");
    let ns = lock(&f.ns);
    assert!(
        !ns.events.iter().any(|e| e == "irq vectors"),
        "bring-up ran before the name was found taken: {:?}",
        ns.events
    );
}

/// The NIC is claimed (BAR 0 mapped, a predecessor's DMA stopped: `Device::claim`) after the
/// name check and before the driver makes its log file, clock page and ring segments or takes
/// vectors: a NIC a killed driver left running must not be writing into this process's new
/// memory (docs/redox.md, "What the restart found").
#[test]
fn the_nic_is_claimed_after_the_name_check_and_before_any_allocation() {
    let mut f = fake(Some(1), Some(1));
    let s = start_and_sandbox(&mut f, &FakeClock::default());
    let ns = lock(&f.ns);
    let bar = pos(&ns, "BAR 0");
    assert!(pos(&ns, "claim ptpdrv") < bar, "{:?}", ns.events);
    for later in ["log file", "clock page", "irq vectors", "scheme ptpdrv"] {
        assert!(
            bar < pos(&ns, later),
            "{later} before the claim: {:?}",
            ns.events
        );
    }
    drop(ns);
    stop(s, &f);
}

#[test]
fn a_dead_instance_s_name_is_taken_back_before_bring_up() {
    // issue 22, failure 5: the name a killed igcd registered stays until someone removes it.
    let mut f = fake(Some(1), Some(1));
    lock(&f.ns).held = Some(false);
    let s = start_and_sandbox(&mut f, &FakeClock::default());
    let ns = lock(&f.ns);
    assert!(pos(&ns, "claim ptpdrv") < pos(&ns, "irq vectors"));
    assert!(ns.held.is_none());
    drop(ns);
    stop(s, &f);
}
