//! igcd when interrupts do not arrive, on the emulated i225 with a loopback cable: a vector that
//! works, one that never fires, one that fires late, no vector at all (`--poll-irq`), and a
//! function offering only MSI (one vector for every cause). In every case each TX timestamp
//! reaches ptpd's sink exactly once, and the IRQ thread polls exactly when it must.

#![cfg(feature = "emulate")]

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use igcd::daemon::{Device, EventSink};
use ptp_emu::igc::I225;
use ptp_ipc::{DriverEvent, DriverRequest};
use ptp_pci::emulated::{EmuFunction, IrqFault};
use ptp_pci::{IrqMode, IrqSupport};

/// The events igcd sent, and the name of the thread that sent each TX timestamp.
#[derive(Default)]
struct Events(Mutex<Vec<DriverEvent>>, Mutex<Vec<String>>);

impl EventSink for Events {
    fn send(&self, ev: DriverEvent) {
        if matches!(ev, DriverEvent::TxTimestamp { .. }) {
            let t = std::thread::current();
            self.1
                .lock()
                .unwrap()
                .push(t.name().unwrap_or("?").to_string());
        }
        self.0.lock().unwrap().push(ev);
    }
}

impl Events {
    /// TX timestamps received, per cookie.
    fn stamps(&self) -> BTreeMap<u64, usize> {
        let mut m = BTreeMap::new();
        for e in self.0.lock().unwrap().iter() {
            if let DriverEvent::TxTimestamp { cookie, .. } = e {
                *m.entry(*cookie).or_default() += 1;
            }
        }
        m
    }

    fn ptp_frames(&self) -> usize {
        let ev = self.0.lock().unwrap();
        ev.iter()
            .filter(|e| matches!(e, DriverEvent::PtpFrame { .. }))
            .count()
    }
}

/// A PTPv2 Sync frame (an event message, so the model stamps it on the way in too).
fn sync_frame(seq: u8) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[0x01, 0x1b, 0x19, 0, 0, 0]);
    f[12..14].copy_from_slice(&0x88F7u16.to_be_bytes());
    f[14] = 0x00; // Sync
    f[15] = 2;
    f[44] = seq;
    f
}

struct Rig {
    dev: Device<EmuFunction<I225>>,
    events: Arc<Events>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

/// igcd on an emulated i225 with a loopback cable, `setup` applied to the function first.
fn rig(extra: &[&str], setup: impl FnOnce(&EmuFunction<I225>)) -> Rig {
    let mut args = vec![
        "--emulate",
        "i225",
        "--wire",
        "loopback",
        "--link-wait-ms",
        "500",
        // These tests are about the IRQ thread's path: every stamp is its.
        "--tx-inline-us",
        "off",
    ];
    args.extend_from_slice(extra);
    let (opts, func) = common::emulated(&args);
    setup(&func);
    let dev = common::bring_up(&opts, func);
    let events = Arc::new(Events::default());
    let stop = Arc::new(AtomicBool::new(false));
    let threads = dev.start_threads(events.clone(), stop.clone());
    Rig {
        dev,
        events,
        stop,
        threads,
    }
}

impl Rig {
    /// Sends `n` Sync frames asking for TX stamps, `gap` apart, and waits (bounded) until each
    /// stamp arrived; returns the stamps per cookie once the last has had time to be doubled.
    fn stamp(&self, n: u64, gap: Duration) -> BTreeMap<u64, usize> {
        for cookie in 1..=n {
            let req = DriverRequest::SendPtp {
                cookie,
                want_ts: true,
                frame: sync_frame(cookie as u8),
            };
            assert_eq!(self.dev.handle(req, &*self.events), None, "send {cookie}");
            std::thread::sleep(gap);
        }
        let t = Instant::now();
        while self.events.stamps().len() < n as usize {
            assert!(
                t.elapsed() < Duration::from_secs(10),
                "stamps so far: {:?}",
                self.events.stamps()
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        // A late interrupt arriving after its stamp was polled must not deliver it again.
        std::thread::sleep(Duration::from_millis(400));
        self.events.stamps()
    }

    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

fn once_each(n: u64) -> BTreeMap<u64, usize> {
    (1..=n).map(|c| (c, 1)).collect()
}

#[test]
fn a_working_vector_stays_interrupt_driven() {
    let r = rig(&[], |_| {});
    assert_eq!(r.dev.irq_mode, IrqMode::MsiX { vectors: 2 });
    assert_eq!(r.stamp(5, Duration::from_millis(20)), once_each(5));
    assert!(!r.dev.irq_polling());
    r.finish();
}

/// Linux igc fix 3/4 (seed 000, "Retrieve TX timestamp during interrupt handling"): the thread
/// that takes the TXTS interrupt reads the stamps and sends them on itself; before the fix the
/// interrupt only scheduled a worker, and each stamp also waited for that worker to run.
/// Checked with two vectors (the "other" vector's thread) and with one MSI vector for every
/// cause (the one IRQ thread), each stamp sent once.
#[test]
fn tx_stamps_are_retrieved_by_the_thread_that_took_the_interrupt() {
    let split = rig(&[], |_| {});
    let msi = rig(&[], |f| {
        f.offer_irqs(IrqSupport {
            msix_entries: 0,
            msi: true,
            legacy_line: Some(11),
        })
    });
    for (r, thread) in [(split, "irq-other"), (msi, "irq")] {
        assert_eq!(r.stamp(5, Duration::from_millis(20)), once_each(5));
        assert!(!r.dev.irq_polling(), "{thread}: the interrupts came");
        let senders = r.events.1.lock().unwrap().clone();
        assert_eq!(senders, vec![thread; 5], "threads that sent the stamps");
        r.finish();
    }
}

#[test]
fn a_vector_that_never_fires_is_replaced_by_polling() {
    let r = rig(&[], |f| f.set_irq_fault(IrqFault::Never));
    assert_eq!(r.dev.irq_mode, IrqMode::MsiX { vectors: 2 });
    // Each stamp first waits out one bounded wait (100 ms); the second miss switches.
    assert_eq!(r.stamp(5, Duration::from_millis(150)), once_each(5));
    assert!(r.dev.irq_polling());
    // Once polling, a stamp arrives within a few poll intervals, not a bounded wait.
    let t = Instant::now();
    let req = DriverRequest::SendPtp {
        cookie: 99,
        want_ts: true,
        frame: sync_frame(99),
    };
    assert_eq!(r.dev.handle(req, &*r.events), None);
    while !r.events.stamps().contains_key(&99) {
        assert!(t.elapsed() < Duration::from_secs(10));
        std::thread::sleep(Duration::from_millis(1));
    }
    assert!(r.events.ptp_frames() > 0, "received frames are polled too");
    r.finish();
}

#[test]
fn a_vector_that_fires_after_the_bound_is_replaced_by_polling_without_duplicates() {
    let r = rig(&[], |f| {
        f.set_irq_fault(IrqFault::Late(Duration::from_millis(250)))
    });
    assert_eq!(r.stamp(5, Duration::from_millis(300)), once_each(5));
    assert!(r.dev.irq_polling());
    r.finish();
}

#[test]
fn a_vector_that_fires_late_within_the_bound_stays_interrupt_driven() {
    let r = rig(&[], |f| {
        f.set_irq_fault(IrqFault::Late(Duration::from_millis(5)))
    });
    assert_eq!(r.stamp(5, Duration::from_millis(20)), once_each(5));
    assert!(!r.dev.irq_polling());
    r.finish();
}

#[test]
fn told_to_poll_it_takes_no_vector() {
    let r = rig(&["--poll-irq", "--irq-poll-us", "500"], |_| {});
    assert_eq!(r.dev.irq_mode, IrqMode::Polled);
    assert!(r.dev.irq_polling());
    assert_eq!(r.stamp(5, Duration::from_millis(5)), once_each(5));
    assert!(r.events.ptp_frames() > 0);
    r.finish();
}

#[test]
fn one_msi_vector_serves_every_cause() {
    let r = rig(&[], |f| {
        f.offer_irqs(IrqSupport {
            msix_entries: 0,
            msi: true,
            legacy_line: Some(11),
        })
    });
    assert_eq!(r.dev.irq_mode, IrqMode::Msi);
    assert_eq!(r.stamp(5, Duration::from_millis(20)), once_each(5));
    assert!(r.events.ptp_frames() >= 5, "looped-back frames arrive");
    assert!(!r.dev.irq_polling(), "MSI delivered every cause");
    r.finish();
}

#[test]
fn one_msix_entry_serves_every_cause() {
    let r = rig(&[], |f| {
        f.offer_irqs(IrqSupport {
            msix_entries: 1,
            ..IrqSupport::default()
        })
    });
    assert_eq!(r.dev.irq_mode, IrqMode::MsiX { vectors: 1 });
    assert_eq!(r.stamp(5, Duration::from_millis(20)), once_each(5));
    assert!(r.events.ptp_frames() >= 5);
    assert!(!r.dev.irq_polling());
    r.finish();
}

#[test]
fn a_function_without_interrupts_is_polled() {
    let r = rig(&[], |f| f.offer_irqs(IrqSupport::default()));
    assert_eq!(r.dev.irq_mode, IrqMode::Polled);
    assert_eq!(r.stamp(3, Duration::from_millis(5)), once_each(3));
    r.finish();
}
