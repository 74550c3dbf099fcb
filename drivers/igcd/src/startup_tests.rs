//! The start-up order against a namespace double that refuses every open after `setrens`, as
//! Redox does (reference §10, §14), on the emulated i225.

use std::path::PathBuf;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

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

const S: u64 = 1_000_000_000;

/// The namespace as the daemon sees it: what it opened, in order, and what it tried to open
/// after `setrens`.
#[derive(Default)]
struct Ns {
    events: Vec<String>,
    sandboxed: bool,
    refused: Vec<String>,
}

type Shared = Arc<Mutex<Ns>>;

fn lock(ns: &Shared) -> MutexGuard<'_, Ns> {
    ns.lock().unwrap()
}

/// Records an open of `what`; refused (false) once sandboxed.
fn open(ns: &Shared, what: &str) -> bool {
    let mut ns = lock(ns);
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
    shm_tries: u32,
    logging_tries: u32,
    page: PathBuf,
}

fn exists(from: Option<u32>, tries: &mut u32) -> bool {
    *tries += 1;
    from.is_some_and(|n| *tries >= n)
}

impl Platform for Fake {
    type Func = Recorded;
    type Fam = Igc;
    type Readiness = ();
    type Sink = Events;
    type Serving = ();

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
    fn open_log(&mut self) -> bool {
        open(&self.ns, "log file") && exists(self.logging_from, &mut self.logging_tries)
    }
    fn open_clock_page(&mut self) -> Option<(Arc<ClockPageWriter>, String)> {
        if !(open(&self.ns, "clock page") && exists(self.shm_from, &mut self.shm_tries)) {
            return None;
        }
        let w = ClockPageWriter::create(&self.page).unwrap();
        Some((Arc::new(w), self.page.display().to_string()))
    }
    fn serving(&mut self, _dev: &Arc<Device<Recorded>>) -> Result<((), Arc<Events>), Error> {
        // A scheme socket, its registration and its request queue (random keys), per scheme;
        // then the loop's event queue, timer and wake pipe.
        for what in [
            "scheme ptpdrv",
            "queue ptpdrv",
            "scheme network",
            "queue network",
            "event queue",
            "timer",
            "wake pipe",
        ] {
            if !open(&self.ns, what) {
                return Err(Error::Other(format!("{what} refused after setrens")));
            }
        }
        Ok(((), Arc::new(Events::default())))
    }
    fn enter_sandbox(&mut self) -> Result<(), Error> {
        let mut ns = lock(&self.ns);
        ns.events.push("setrens".into());
        ns.sandboxed = true;
        Ok(())
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
        shm_tries: 0,
        logging_tries: 0,
        page,
    }
}

fn stop(s: Started<Fake>, f: &Fake) {
    s.stop.store(true, Ordering::Relaxed);
    for t in s.threads {
        t.join().unwrap();
    }
    let _ = std::fs::remove_file(&f.page);
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

#[test]
fn every_open_comes_before_setrens_and_readiness_last() {
    let mut f = fake(Some(1), Some(1));
    let s = start(&mut f, &emulated_opts(), 7, || 0).expect("start-up");
    assert!(s.deferred.sandboxed());
    {
        let ns = lock(&f.ns);
        assert!(
            ns.refused.is_empty(),
            "opened after setrens: {:?}",
            ns.refused
        );
        assert_eq!(pos(&ns, "readiness"), 0, "{:?}", ns.events);
        let sandbox = pos(&ns, "setrens");
        for what in [
            "pcid channel",
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
        assert_eq!(ns.events.last().map(String::as_str), Some("ready"));
    }
    assert_eq!(caps_page(&s.dev), f.page.display().to_string());
    stop(s, &f);
}

#[test]
fn a_late_clock_page_and_log_file_are_retried_from_the_timer_until_they_exist() {
    // shm answers from the 4th attempt, logging from the 2nd.
    let mut f = fake(Some(4), Some(2));
    let mut s = start(&mut f, &emulated_opts(), 7, || 0).expect("start-up");
    // Ready at once, outside the sandbox, without a page yet.
    assert!(!s.deferred.sandboxed());
    assert_eq!(lock(&f.ns).events.last().map(String::as_str), Some("ready"));
    assert_eq!(caps_page(&s.dev), "");
    let tick = |s: &mut Started<Fake>, f: &mut Fake, t: u64| s.deferred.tick(f, t).unwrap();
    assert!(
        !tick(&mut s, &mut f, S / 10),
        "logging is there, shm not yet"
    );
    assert!(tick(&mut s, &mut f, 2 * S / 10), "shm came up: sandbox now");
    assert!(!tick(&mut s, &mut f, 3 * S / 10), "once only");
    let ns = lock(&f.ns);
    assert!(
        ns.refused.is_empty(),
        "opened after setrens: {:?}",
        ns.refused
    );
    let opens = |what: &str| ns.events.iter().filter(|e| *e == what).count();
    assert_eq!((opens("log file"), opens("clock page")), (2, 4));
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
    let mut s = start(&mut f, &emulated_opts(), 7, || 0).expect("start-up");
    let grace = SANDBOX_GRACE.as_nanos() as u64;
    for t in (1..10).map(|i| i * grace / 10) {
        assert!(
            !s.deferred.tick(&mut f, t).unwrap(),
            "sandboxed early at {t}"
        );
    }
    assert!(s.deferred.tick(&mut f, grace).unwrap());
    let tries = f.shm_tries;
    for t in 1..5 {
        s.deferred.tick(&mut f, grace + t * S).unwrap();
    }
    assert_eq!(f.shm_tries, tries, "no open after setrens");
    assert!(lock(&f.ns).refused.is_empty());
    assert_eq!(caps_page(&s.dev), "");
    stop(s, &f);
}
