//! igbd end to end on ptp-emu's i210, i350 and 82576 models (real time, loopback cable): TX and
//! RX timestamps reach the event sink, a TX stamp that never comes is reported lost after the
//! timeout and frees the pair, and the 82576's TX stamp — which raises no interrupt — is polled
//! by the time-sync IRQ thread within its bound while the host is busy.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use igbd::Options;
use intel_common::daemon::EventSink;
use intel_common::igb::Igb;
use intel_regs::e1000::TSYNCTXCTL;
use intel_regs::igb as r;
use ptp_emu::igb::Igb as Model;
use ptp_ipc::time::mono_ns;
use ptp_ipc::{DriverEvent, DriverReply, DriverRequest, LostReason, RxFilter};
use ptp_pci::IrqSupport;
use ptp_pci::emulated::EmuFunction;

/// The emulated cable's delay (igbd's default `--cable-delay-ns`).
const CABLE_NS: i128 = 50;
/// Longest any event is waited for: far beyond every bound here, so only a lost event ends it.
const PATIENCE: Duration = Duration::from_secs(10);

/// Every event, with the host monotonic time it arrived.
#[derive(Default)]
struct Events(Mutex<Vec<(u64, DriverEvent)>>);

impl EventSink for Events {
    fn send(&self, ev: DriverEvent) {
        self.0.lock().unwrap().push((mono_ns(), ev));
    }
}

impl Events {
    fn find<T>(&self, f: impl Fn(u64, &DriverEvent) -> Option<T>) -> Option<T> {
        self.0.lock().unwrap().iter().find_map(|(t, e)| f(*t, e))
    }

    /// Waits (bounded) for the first event `f` picks.
    fn wait<T>(&self, what: &str, f: impl Fn(u64, &DriverEvent) -> Option<T>) -> T {
        let t = Instant::now();
        loop {
            if let Some(x) = self.find(&f) {
                return x;
            }
            assert!(t.elapsed() < PATIENCE, "no {what} within {PATIENCE:?}");
            std::thread::sleep(Duration::from_micros(200));
        }
    }

    /// (stamp, arrival time) of the TX stamp for `cookie`.
    fn tx_stamp(&self, cookie: u64) -> (u64, u64) {
        self.wait(&format!("TX stamp {cookie}"), |t, e| match e {
            DriverEvent::TxTimestamp { cookie: c, ns } if *c == cookie => Some((*ns, t)),
            _ => None,
        })
    }

    fn tx_stamps(&self) -> BTreeMap<u64, usize> {
        let mut m = BTreeMap::new();
        for (_, e) in self.0.lock().unwrap().iter() {
            if let DriverEvent::TxTimestamp { cookie, .. } = e {
                *m.entry(*cookie).or_default() += 1;
            }
        }
        m
    }
}

/// A PTPv2 Sync frame with sequenceId `seq`.
fn sync_frame(seq: u16) -> Vec<u8> {
    let mut f = vec![0u8; 60];
    f[..6].copy_from_slice(&[0x01, 0x1b, 0x19, 0, 0, 0]);
    f[12..14].copy_from_slice(&0x88F7u16.to_be_bytes());
    f[15] = 2;
    f[44..46].copy_from_slice(&seq.to_be_bytes());
    f
}

struct Rig {
    dev: intel_common::daemon::Device<EmuFunction<Model>, Igb>,
    events: Arc<Events>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

fn rig(model: &str, extra: &[&str], setup: impl FnOnce(&EmuFunction<Model>)) -> Rig {
    let mut args = vec![
        "--emulate",
        model,
        "--wire",
        "loopback",
        "--link-wait-ms",
        "500",
        // The IRQ thread's path (the 82576's kick and poll among it) unless a test passes
        // --tx-inline-us.
        "--tx-inline-us",
        "off",
    ];
    args.extend_from_slice(extra);
    let opts = Options::parse(args.iter().map(Into::into))
        .unwrap()
        .unwrap();
    let (nic, name) = igbd::options::emulated_model(opts.emulate.unwrap(), &opts).unwrap();
    let func = intel_emulate::function(&opts, nic, name);
    setup(&func);
    let dev = intel_common::daemon::Device::bring_up(func, &opts, Default::default(), 1).unwrap();
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
    fn send(&self, cookie: u64) {
        let req = DriverRequest::SendPtp {
            cookie,
            want_ts: true,
            frame: sync_frame(cookie as u16),
        };
        assert_eq!(self.dev.handle(req, &*self.events), None, "send {cookie}");
    }

    fn tstamp_config(&self, rx_filter: RxFilter) {
        let req = DriverRequest::SetTstampConfig {
            tx_on: true,
            rx_filter,
        };
        assert_eq!(
            self.dev.handle(req, &*self.events),
            Some(DriverReply::TstampConfig {
                tx_on: true,
                rx_filter
            })
        );
    }

    fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for t in self.threads {
            t.join().unwrap();
        }
    }
}

#[test]
fn the_posting_thread_takes_its_own_stamp_on_every_family() {
    // --tx-inline-us 0 with the TX engine inside the tail write: every stamp is there at the
    // posting thread's one look, so no time-sync interrupt is raised (i210/i350: TSIM gated
    // meanwhile) and the 82576's IRQ thread is not kicked to poll for it.
    for model in ["i210", "i350", "82576"] {
        let r = rig(model, &["--emu-tx", "sync", "--tx-inline-us", "0"], |_| {});
        // Quiet first: the link's interrupt taken.
        std::thread::sleep(Duration::from_millis(50));
        let before = r.dev.counters.ts_wakeups.load(Ordering::Relaxed);
        for cookie in 1..=5u64 {
            r.send(cookie);
            r.events.tx_stamp(cookie);
        }
        assert_eq!(r.events.tx_stamps().len(), 5, "{model}: each stamp once");
        let woke = r.dev.counters.ts_wakeups.load(Ordering::Relaxed) - before;
        assert_eq!(woke, 0, "{model}: time-sync wake-ups");
        assert_eq!(
            r.dev.counters.interrupts.load(Ordering::Relaxed),
            0,
            "{model}"
        );
        r.finish();
    }
}

#[test]
fn tx_and_rx_timestamps_reach_ptpd_on_every_family() {
    for model in ["i210", "i211", "i350", "82576"] {
        let r = rig(model, &[], |_| {});
        r.tstamp_config(RxFilter::PtpV2L2Event);
        for cookie in 1..=5u64 {
            r.send(cookie);
            let (tx, _) = r.events.tx_stamp(cookie);
            let rx = r.events.wait("RX frame", |_, e| match e {
                DriverEvent::PtpFrame { rx_ns, frame }
                    if frame[44..46] == sync_frame(cookie as u16)[44..46] =>
                {
                    Some(*rx_ns)
                }
                _ => None,
            });
            let rx = rx.unwrap_or_else(|| panic!("{model}: frame {cookie} has no RX stamp"));
            // Both stamps are the PHC at the frame's first bit (i210: after the driver's
            // latency compensation), so they differ by the cable.
            let d = rx as i128 - tx as i128;
            assert!((d - CABLE_NS).abs() <= 1, "{model}: rx − tx = {d} ns");
        }
        assert_eq!(r.events.tx_stamps().len(), 5, "{model}: each stamp once");
        assert_eq!(r.dev.rx_stamps_lost(), 0, "{model}");
        let ts_irqs = r.dev.counters.interrupts.load(Ordering::Relaxed);
        if model == "82576" {
            assert_eq!(ts_irqs, 0, "82576 raises no time-sync interrupt");
        } else {
            assert!(ts_irqs >= 5, "{model}: TXTS interrupts {ts_irqs}");
        }
        // GetFreq reports what AdjFine set (a restarted ptpd's base, issue 17).
        let freq = |req| r.dev.handle(req, &*r.events);
        let scaled_ppm = -262_144;
        assert_eq!(
            freq(DriverRequest::AdjFine { scaled_ppm }),
            Some(DriverReply::Done)
        );
        assert_eq!(
            freq(DriverRequest::GetFreq),
            Some(DriverReply::Freq { scaled_ppm }),
            "{model}"
        );
        r.finish();
    }
}

#[test]
fn a_stamp_that_never_comes_is_lost_after_the_timeout_and_frees_the_pair() {
    for model in ["i210", "i350", "82576"] {
        let r = rig(model, &["--tx-ts-timeout-ms", "200"], |_| {});
        // Behind the driver's back the part stops stamping: the request stays pending.
        r.dev.regs.set(r::reg::TSYNCTXCTL, r::TsyncTxCtl::empty());
        let sent = mono_ns();
        r.send(1);
        let lost_at = r.events.wait("timeout", |t, e| match e {
            DriverEvent::TxTimestampLost {
                cookie: 1,
                reason: LostReason::Timeout,
            } => Some(t),
            _ => None,
        });
        assert!(
            lost_at - sent >= 200_000_000,
            "{model}: lost after {} ms, before the timeout",
            (lost_at - sent) / 1_000_000
        );
        // The pair is free again: with stamping back on, the next request is stamped.
        r.dev.regs.set(r::reg::TSYNCTXCTL, r::TsyncTxCtl::ENABLED);
        r.send(2);
        r.events.tx_stamp(2);
        assert!(!r.events.tx_stamps().contains_key(&1), "{model}");
        let stats = r.dev.handle(DriverRequest::Stats, &*r.events);
        match stats {
            Some(DriverReply::Stats(s)) => {
                assert_eq!((s.tx_timeouts, s.tx_delivered), (1, 1), "{model}");
            }
            other => panic!("{model}: {other:?}"),
        }
        r.finish();
    }
}

/// Quantile `q` of `v` (sorted in place).
fn quantile(v: &mut [u64], q: f64) -> u64 {
    v.sort_unstable();
    v[((v.len() - 1) as f64 * q).round() as usize]
}

/// The 82576 poll interval the timing tests run with.
const POLL_US: u64 = 200;
/// The emulated NIC's model thread sleeps at most this between passes (its EmuFunction).
const MODEL_SLEEP_NS: u64 = 1_000_000;
/// How long the IRQ thread waits for an interrupt when nothing is due: a stamp that waited it
/// out is the failure these tests look for (no kick, or no poll while a stamp is pending).
const IRQ_WAIT_NS: u64 = 100_000_000;

/// Delivery times of one run and their bound.
struct Delivery {
    median: u64,
    max: u64,
    bound: u64,
}

/// Sends `n` stamped frames one at a time on `r` (an 82576 started with `--tx-poll-us
/// POLL_US`), with `spinners` threads keeping the CPUs busy, and returns the delivery times
/// with their bound. Each frame's transmission is held until the driver's first TSYNCTXCTL
/// read after it was posted, so the kick's look always comes too early and only the poll
/// finds the stamp. The bound: a stamp waits for one model pass, the IRQ thread's wake-up
/// (the kick), one poll interval and, without an interrupt vector, one `irq_poll_ns` sleep;
/// each of those three wake-ups may be late by as much as the worst delay a thread saw in this
/// run: the lateness of a `POLL_US` sleep, or the longest a spinner (always runnable) was kept
/// off the CPU. A sleeper alone under-reports the second: CFS favours fresh wakers, while a
/// driver thread still running its pass competes as the spinners do (CI: 3.9 ms delivery
/// against a sleeper's 0.67 ms worst lateness, from a stall only the spinners would have seen).
fn delivery(r: &Rig, n: u64, spinners: usize, irq_poll_ns: u64) -> Delivery {
    let busy = Arc::new(AtomicBool::new(true));
    let spin: Vec<_> = (0..spinners)
        .map(|_| {
            let b = busy.clone();
            std::thread::spawn(move || {
                let (mut last, mut max_gap) = (mono_ns(), 0);
                while b.load(Ordering::Relaxed) {
                    let now = mono_ns();
                    max_gap = max_gap.max(now - last);
                    last = now;
                }
                max_gap
            })
        })
        .collect();
    let probe = {
        let b = busy.clone();
        std::thread::spawn(move || {
            let mut late = Vec::new();
            while b.load(Ordering::Relaxed) {
                let t = mono_ns();
                std::thread::sleep(Duration::from_micros(POLL_US));
                late.push((mono_ns() - t).saturating_sub(POLL_US * 1000));
            }
            late
        })
    };
    let mut delays = Vec::new();
    for cookie in 1..=n {
        let held = r
            .dev
            .func
            .with_device(|d| d.nic_mut().hold_tx_until_read(TSYNCTXCTL, 1));
        assert!(held);
        let sent = mono_ns();
        r.send(cookie);
        let (_, got) = r.events.tx_stamp(cookie);
        delays.push(got - sent);
        // The hold was taken: the stamp came after a look that missed it.
        assert_eq!(r.dev.func.with_device(|d| d.nic().armed_reads()), 0);
        std::thread::sleep(Duration::from_millis(5));
    }
    busy.store(false, Ordering::Relaxed);
    let max_stall = spin
        .into_iter()
        .map(|s| s.join().unwrap())
        .max()
        .unwrap_or(0);
    let mut late = probe.join().unwrap();
    let max_late = *late.iter().max().unwrap();
    let bound = MODEL_SLEEP_NS + POLL_US * 1000 + irq_poll_ns + 3 * max_late.max(max_stall);
    let median = quantile(&mut delays, 0.5);
    eprintln!(
        "82576 TX stamp delivery ({spinners} spinners, {:?}): median {} µs, p90 {} µs, max {} \
         µs; wake-up lateness median {} µs, max {} µs ({} samples); longest stall of a \
         runnable spinner {} µs; bound {} µs",
        r.dev.irq_mode,
        median / 1000,
        quantile(&mut delays, 0.9) / 1000,
        delays.iter().max().unwrap() / 1000,
        quantile(&mut late, 0.5) / 1000,
        max_late / 1000,
        late.len(),
        max_stall / 1000,
        bound / 1000
    );
    // The failure the tests look for is a stamp that waited out the 100 ms IRQ wait: however
    // busy the host, a median past half of it is that failure, not noise.
    let bound = bound.min(IRQ_WAIT_NS / 2);
    assert_eq!(r.events.tx_stamps().len(), n as usize);
    Delivery {
        median,
        max: *delays.iter().max().unwrap(),
        bound,
    }
}

#[test]
fn e82576_tx_stamps_are_polled_promptly_in_every_interrupt_mode() {
    // One MSI-X entry (kicked through EICS), MSI (through ICS), no interrupt at all (the IRQ
    // thread sleeps --irq-poll-us, 1000 µs, between passes).
    let modes = [
        (
            IrqSupport {
                msix_entries: 1,
                ..IrqSupport::default()
            },
            0,
        ),
        (
            IrqSupport {
                msix_entries: 0,
                msi: true,
                legacy_line: Some(11),
            },
            0,
        ),
        (IrqSupport::default(), 1_000_000),
    ];
    for (irqs, irq_poll_ns) in modes {
        let r = rig("82576", &["--tx-poll-us", "200"], |f| f.offer_irqs(irqs));
        let d = delivery(&r, 10, 0, irq_poll_ns);
        // The median: a mode without its kick or poll makes every stamp wait out the IRQ
        // wait, while a host busy beside the test stalls a few (CI-like load at 7236e24: a
        // p90 of 2.8 ms against a 1.7 ms bound from a probe that happened to see 0.17 ms).
        assert!(
            d.median <= d.bound,
            "{irqs:?}: median {} ns beyond {} ns",
            d.median,
            d.bound
        );
        r.finish();
    }
}

#[test]
fn e82576_poll_delivers_within_its_bound_under_a_busy_host() {
    let r = rig("82576", &["--tx-poll-us", "200"], |_| {});
    // Two spinning threads: the 2-core host is fully busy besides the driver and the model.
    let d = delivery(&r, 40, 2, 0);
    // The poll at its interval: the median stamp within the bound the run's own scheduling
    // noise allows.
    assert!(
        d.median <= d.bound,
        "median delivery {} ns beyond {} ns: the poll does not run at its interval",
        d.median,
        d.bound
    );
    // Every stamp short of the IRQ wait: one that waited it out (no kick, or no poll while
    // pending) is the failure this test is for, and it is rare when the stamp is usually there
    // at the first look. Not the bound above: a delivery crosses the model's, the IRQ
    // thread's and the reader's wake-ups, and the busy host stalls one of them a scheduler
    // slice now and then, past what one probe thread saw (CI at 7236e24: 2.9 ms against 2.6).
    // A host that stalls a runnable thread for tens of ms (more load beside than the test's
    // own spinners) cannot tell that failure from noise: then only the median is judged.
    if d.bound < IRQ_WAIT_NS / 2 {
        assert!(
            d.max < IRQ_WAIT_NS / 2,
            "slowest delivery {} ns: a stamp waited out the IRQ thread's {IRQ_WAIT_NS} ns wait",
            d.max
        );
    } else {
        eprintln!("slowest delivery not judged: the host stalls threads past half the IRQ wait");
    }
    r.finish();
}
