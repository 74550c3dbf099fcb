//! The igb family (intel_common::igb) against ptp-emu's register-level i210, i350 and 82576
//! models under a virtual clock: PHC operations and latching, the adjfine formula per MAC, the
//! timecounter across the counter's wrap, TX and RX stamp delivery, the 82576 RXSTMP hold and
//! the release of a latch held too long. Deterministic: the model's time moves only when the
//! test advances it.

use std::sync::Arc;
use std::time::Duration;

use intel_common::Regs;
use intel_common::clock::{ClockHw, Phc, ppb_to_scaled_ppm};
use intel_common::daemon::device::{VECTOR_OTHER, VECTORS};
use intel_common::family::{Family, IrqLayout, Rearm, RxFrame};
use intel_common::igb::{Igb, Mac};
use intel_common::ring::{RxRing, TxRing};
use intel_common::txts::{Delivered, Reservation, TxTimestamps};
use intel_regs::igb as r;
use ptp_emu::clock::VirtualClock;
use ptp_emu::igb::{Igb as Model, IgbConfig};
use ptp_emu::wire::Loopback;
use ptp_ipc::RxFilter;
use ptp_pci::emulated::{EmuBar, EmuFunction, EmuIrq};
use ptp_pci::{IrqVector, IrqWait, PciFunction};

const T0: u64 = 1_700_000_000_000_000_000;
const S: u64 = 1_000_000_000;
const CABLE_NS: u64 = 50;
const MODELS: [&str; 3] = ["i210", "i350", "82576"];

struct Rig {
    name: &'static str,
    clock: VirtualClock,
    func: EmuFunction<Model>,
    regs: Arc<Regs<EmuBar<Model>>>,
    fam: Igb,
    other: EmuIrq,
    tx: TxRing,
    rx: RxRing,
    ts: TxTimestamps,
}

/// The model `name`, brought up by the family as igbd does, cabled to itself.
fn rig_with(name: &'static str, cfg: impl FnOnce(&mut IgbConfig)) -> Rig {
    let clock = VirtualClock::new(0);
    let mut c = IgbConfig::for_name(name, clock.source()).unwrap();
    cfg(&mut c);
    let (vendor, device) = (0x8086, c.device_id);
    let mut nic = Model::new(c).unwrap();
    nic.nic_mut().attach_wire(Box::new(Loopback::new(CABLE_NS)));
    let mut func = EmuFunction::new(nic, name);
    let (_, fam) = <Igb as Family>::probe(vendor, device).unwrap();
    let regs = Arc::new(Regs::new(func.map_bar(0).unwrap()));
    fam.reset(&regs).unwrap();
    let mut v = func.alloc_vectors(VECTORS).unwrap();
    let other = v.swap_remove(VECTOR_OTHER as usize);
    func.poll(); // the wire decides the link
    assert!(fam.link_up(&regs, Duration::from_millis(10)).up, "{name}");
    let tx = TxRing::new(&mut func, 64).unwrap();
    let rx = RxRing::new(&mut func, 64).unwrap();
    fam.setup_tx(&regs, &tx);
    fam.setup_rx(&regs, &rx);
    fam.enable_irqs(&regs, IrqLayout::Split);
    fam.ptp_reset(&regs, T0);
    let ts = TxTimestamps::new(fam.ts_regs(), 1);
    ts.enable(&regs, fam.tsynctxctl_on());
    let _ = fam.read_causes(&regs, r::TsCause::empty());
    fam.rearm(&regs, Rearm::Other);
    let _ = other.wait(Duration::ZERO);
    Rig {
        name,
        clock,
        func,
        regs,
        fam,
        other,
        tx,
        rx,
        ts,
    }
}

fn rig(name: &'static str) -> Rig {
    rig_with(name, |_| {})
}

fn sync_frame(seq: u16) -> Vec<u8> {
    let mut f = vec![0u8; 58];
    f[12..14].copy_from_slice(&0x88F7u16.to_be_bytes());
    f[15] = 2;
    f[44..46].copy_from_slice(&seq.to_be_bytes());
    f
}

impl Rig {
    fn phc(&self) -> Phc<EmuBar<Model>, intel_common::igb::IgbClock> {
        let c = self.clock.clone();
        Phc::new(self.regs.clone(), self.fam.clock()).with_host_clock(move || c.now())
    }

    /// Lets the model run 10 µs.
    fn run_model(&self) {
        self.clock.advance(10_000);
        self.func.poll();
    }

    /// The transmit path as igbd's: reserve, post, ring the doorbell.
    fn send(&mut self, cookie: u64, seq: u16) -> Reservation {
        let res = self.ts.reserve(cookie, 0);
        let cmd = match res {
            Reservation::Set(s) => self.fam.tx_tstamp_cmd(s),
            _ => 0,
        };
        let tail = self.tx.post(&sync_frame(seq), cmd).unwrap();
        self.regs.write(self.fam.tdt(), tail);
        res
    }

    /// The time-sync thread's pass: on i210/i350 it needs the TXTS interrupt, on 82576 it
    /// polls (and must see no interrupt).
    fn tx_pass(&self) -> Vec<Delivered> {
        if self.fam.has_tx_ts_irq() {
            assert_eq!(
                self.other.wait(Duration::ZERO),
                IrqWait::Fired,
                "{}",
                self.name
            );
            let c = self.fam.read_causes(&self.regs, r::TsCause::empty());
            assert!(c.tx_stamp, "{}: TSICR.TXTS", self.name);
            let got = self.ts.retrieve(&self.regs).delivered().to_vec();
            self.fam.rearm(&self.regs, Rearm::Other);
            got
        } else {
            assert_ne!(
                self.other.wait(Duration::ZERO),
                IrqWait::Fired,
                "82576 has no TXTS"
            );
            self.ts.retrieve(&self.regs).delivered().to_vec()
        }
    }

    /// Received frames through the family's RX path: (stamp, sequenceId) of each PTP frame.
    fn rx_pass(&mut self, filter: RxFilter) -> Vec<(Option<u64>, u16)> {
        let (_, rx_lat) = self.fam.latency_ns(1000);
        let mut out = Vec::new();
        let (fam, regs) = (&self.fam, &self.regs);
        let tail = self.rx.poll(8, |meta, buf| {
            match fam.rx_frame(&**regs, filter, meta.status, &buf[..meta.len], rx_lat) {
                RxFrame::Ptp { rx_ns, frame } => {
                    out.push((rx_ns, u16::from_be_bytes([frame[44], frame[45]])))
                }
                RxFrame::Other { .. } => panic!("a Sync frame classified as other"),
            }
        });
        if let Some(t) = tail {
            self.regs.write(self.fam.rdt(), t);
        }
        out
    }

    fn truth_ns(&self) -> u64 {
        self.func.with_device(|d| d.phc_now_ns())
    }
}

#[test]
fn bring_up_touches_only_implemented_registers_and_starts_the_clock() {
    for name in MODELS {
        let rig = rig(name);
        let phc = rig.phc();
        assert_eq!(phc.gettime().phc_ns, T0, "{name}");
        rig.clock.advance(S);
        assert_eq!(phc.gettime().phc_ns, T0 + S, "{name}: SYSTIM counts");
        rig.func.with_device(|d| {
            assert!(d.phc_running(), "{name}");
            assert_eq!(d.nic().unimplemented_accesses(), vec![], "{name}");
        });
    }
}

#[test]
fn every_read_latches_the_current_time() {
    // i210/i350 latch on SYSTIMR, 82576 on SYSTIML: a driver that latches on the wrong register
    // reads the previous sample on i210/i350 (the model keeps SYSTIML/H until the latch).
    for name in MODELS {
        let rig = rig(name);
        let phc = rig.phc();
        for step in [1_234_567_890u64, 7, 999_999_999] {
            rig.clock.advance(step);
            let want = match rig.fam.mac() {
                // The i210's own ns view is SYSTIM; i350/82576 count from power-on (0) and the
                // timecounter maps that count to T0.
                Mac::I210 => rig.truth_ns(),
                _ => T0 + rig.truth_ns(),
            };
            assert_eq!(phc.gettime().phc_ns, want, "{name}");
            let x = phc.gettimex(3).unwrap();
            assert!(x.iter().all(|s| s.phc_ns == want), "{name}: {x:?}");
        }
    }
}

#[test]
fn settime_and_adjtime_land_exactly() {
    for name in MODELS {
        let rig = rig(name);
        let phc = rig.phc();
        let x = 1_800_000_000 * S + 123_456_789;
        phc.settime(x).unwrap();
        assert_eq!(phc.gettime().phc_ns, x, "{name}");
        rig.clock.advance(S / 2);
        assert_eq!(phc.gettime().phc_ns, x + S / 2, "{name}");
        let r = phc.adjtime_report(3 * S as i64).unwrap();
        assert!(r.verified, "{name}: {r:?}");
        assert_eq!(phc.gettime().phc_ns, x + S / 2 + 3 * S, "{name}");
        phc.adjtime(-(S as i64) / 4).unwrap();
        assert_eq!(phc.gettime().phc_ns, x + S / 2 + 3 * S - S / 4, "{name}");
        // Beyond the range is a typed error, and changes nothing.
        assert!(phc.settime(u64::MAX).is_err(), "{name}");
        assert_eq!(phc.gettime().phc_ns, x + S / 2 + 3 * S - S / 4, "{name}");
    }
}

#[test]
fn adjfine_runs_the_clock_at_the_requested_rate() {
    // Resolution per second of PHC time: i210/i350 TIMINCA's 2^-32 ns per 8 ns tick; 82576
    // the timecounter's rate, 2^-40 (TIMINCA's IncValue unit, 2^-19 ns per 16 ns = 119 ppb, is
    // no longer used for frequency).
    for name in MODELS {
        let rig = rig(name);
        let phc = rig.phc();
        let step_ppb = match rig.fam.mac() {
            Mac::E82576 => 1e9 / 2f64.powi(40),
            _ => 1e9 / (8.0 * 2f64.powi(32)),
        };
        for ppb in [100_000.0, -250_000.0, 31_250.0, 37.0, 0.0] {
            phc.adjfine(ppb_to_scaled_ppm(ppb)).unwrap();
            let a = phc.gettime().phc_ns;
            rig.clock.advance(S);
            let b = phc.gettime().phc_ns;
            let got = (b - a) as f64 - 1e9;
            assert!(
                (got - ppb).abs() <= step_ppb + 2.0,
                "{name}: asked {ppb} ppb, ran {got} ppb (resolution {step_ppb})"
            );
        }
        let max = rig.fam.clock().max_adj_ppb() as f64;
        assert!(phc.adjfine(ppb_to_scaled_ppm(max + 1.0)).is_err(), "{name}");
    }
}

/// Runs the clock across the hardware counter's wrap in 100 ms reads (the watchdog's pace)
/// and checks the PHC never jumps: the timecounter extends the count past it.
fn across_the_wrap(name: &'static str, wrap_ns: u64) {
    let rig = rig_with(name, |c| c.initial_systim_ns = wrap_ns - S);
    let phc = rig.phc();
    let start = phc.gettime().phc_ns;
    assert_eq!(start, T0, "{name}");
    for i in 1..=30u64 {
        rig.clock.advance(S / 10);
        assert_eq!(phc.gettime().phc_ns, T0 + i * S / 10, "{name} at {i}");
    }
    let raw = rig.func.with_device(|d| d.phc_now_ns());
    assert!(
        raw < S * 3,
        "{name}: the model's counter wrapped ({raw} ns)"
    );
}

#[test]
fn i350_time_continues_across_the_40_bit_wrap() {
    across_the_wrap("i350", 1 << r::NBITS_82580);
}

#[test]
fn e82576_time_continues_across_the_cycle_counter_wrap() {
    // 2^64 counts of 2^-19 ns: 2^45 ns, about 9.77 h.
    across_the_wrap("82576", 1 << 45);
}

#[test]
fn tx_and_rx_stamps_are_departure_and_arrival() {
    for name in MODELS {
        let mut rig = rig(name);
        rig.fam
            .apply_rx_filter(&rig.regs, RxFilter::PtpV2L2Event)
            .unwrap();
        let phc = rig.phc();
        let before = phc.gettime().phc_ns;
        assert_eq!(rig.send(1, 1), Reservation::Set(0));
        rig.run_model();
        rig.run_model();
        let after = phc.gettime().phc_ns;
        let got = rig.tx_pass();
        assert_eq!(got.len(), 1, "{name}");
        assert_eq!(got[0].cookie, 1);
        let (tx_lat, _) = rig.fam.latency_ns(1000);
        let tx_ns = rig.fam.tx_stamp_ns(got[0].raw_ns) + tx_lat;
        assert!(
            (before..=after).contains(&tx_ns),
            "{name}: {before} {tx_ns} {after}"
        );
        let rx = rig.rx_pass(RxFilter::PtpV2L2Event);
        assert_eq!(rx.len(), 1, "{name}");
        let rx_ns = rx[0].0.unwrap_or_else(|| panic!("{name}: no RX stamp"));
        assert_eq!(
            rx_ns - tx_ns,
            CABLE_NS,
            "{name}: arrival − departure is the cable"
        );
        assert_eq!(rig.fam.rx_stamps_lost(), 0, "{name}");
        // The pair was released: the next request is stamped too.
        assert_eq!(rig.send(2, 2), Reservation::Set(0));
        rig.run_model();
        assert_eq!(rig.tx_pass().len(), 1, "{name}: second stamp");
    }
}

#[test]
fn e82576_a_second_frame_before_the_rxstmph_read_gets_no_stamp_and_is_reported() {
    let mut rig = rig("82576");
    rig.fam
        .apply_rx_filter(&rig.regs, RxFilter::PtpV2L2Event)
        .unwrap();
    // Two Syncs back to back: the second arrives while the first one's stamp is latched.
    for seq in [10, 11] {
        let tail = rig.tx.post(&sync_frame(seq), 0).unwrap();
        rig.regs.write(rig.fam.tdt(), tail);
    }
    rig.run_model();
    rig.run_model();
    let rx = rig.rx_pass(RxFilter::PtpV2L2Event);
    assert_eq!(rx.len(), 2);
    assert!(rx[0].0.is_some() && rx[0].1 == 10, "{rx:?}");
    assert_eq!(rx[1], (None, 11), "the held latch stamped nothing");
    assert_eq!(rig.fam.rx_stamps_lost(), 1);
    rig.func.with_device(|d| {
        assert_eq!(d.stats().rx_stamps_missed_held, 1);
        assert!(!d.rx_stamp_valid(), "the driver released the latch");
    });
    // Released: the next frame is stamped again.
    let tail = rig.tx.post(&sync_frame(12), 0).unwrap();
    rig.regs.write(rig.fam.tdt(), tail);
    rig.run_model();
    rig.run_model();
    let rx = rig.rx_pass(RxFilter::PtpV2L2Event);
    assert!(matches!(rx[..], [(Some(_), 12)]), "{rx:?}");
    assert_eq!(rig.fam.rx_stamps_lost(), 1);
}

#[test]
fn e82576_a_latch_nobody_claims_is_released_after_five_seconds() {
    let rig = rig("82576");
    rig.fam
        .apply_rx_filter(&rig.regs, RxFilter::PtpV2L2Event)
        .unwrap();
    let mut tx = rig.tx;
    let tail = tx.post(&sync_frame(1), 0).unwrap();
    rig.regs.write(rig.fam.tdt(), tail);
    rig.clock.advance(10_000);
    rig.func.poll();
    rig.clock.advance(10_000);
    rig.func.poll();
    // The frame is never read (as if dropped): the watchdog sees the latch held.
    assert!(rig.func.with_device(|d| d.rx_stamp_valid()));
    rig.fam.watchdog(&rig.regs, 0);
    rig.fam.watchdog(&rig.regs, 4 * S);
    assert!(
        rig.func.with_device(|d| d.rx_stamp_valid()),
        "held < 5 s: kept"
    );
    assert_eq!(rig.fam.rx_stamps_lost(), 0);
    rig.fam.watchdog(&rig.regs, 5 * S + 1);
    assert!(!rig.func.with_device(|d| d.rx_stamp_valid()), "released");
    assert_eq!(rig.fam.rx_stamps_lost(), 1);
}

#[test]
fn e82576_refuses_filters_it_cannot_stamp_and_changes_nothing() {
    let rig = rig("82576");
    for f in [RxFilter::All, RxFilter::PtpV2L4Event, RxFilter::PtpV2Event] {
        assert!(rig.fam.check_rx_filter(f).is_err(), "{f:?}");
        assert!(rig.fam.apply_rx_filter(&rig.regs, f).is_err(), "{f:?}");
        assert_eq!(rig.func.with_device(|d| d.peek(r::TSYNCRXCTL)), 0);
    }
}

/// A PTPv2 L2 event message of `msg_type` (0 Sync, 1 Delay_Req) with sequenceId `seq`.
fn event_frame(msg_type: u8, seq: u16) -> Vec<u8> {
    let mut f = sync_frame(seq);
    f[14] = msg_type;
    f
}

#[test]
fn per_message_filters_stamp_only_their_message() {
    for name in MODELS {
        for (filter, want) in [(RxFilter::PtpV2L2Sync, 0), (RxFilter::PtpV2L2DelayReq, 1)] {
            let mut rig = rig(name);
            rig.fam.apply_rx_filter(&rig.regs, filter).unwrap();
            // The unwanted message first: on the 82576 it must not take the one latch.
            for (seq, ty) in [(1, 1 - want), (2, want)] {
                let tail = rig.tx.post(&event_frame(ty, seq), 0).unwrap();
                rig.regs.write(rig.fam.tdt(), tail);
                rig.run_model();
                rig.run_model();
            }
            let rx = rig.rx_pass(filter);
            assert_eq!(rx.len(), 2, "{name} {filter:?}");
            assert_eq!(rx[0], (None, 1), "{name} {filter:?}: the other message");
            assert!(
                rx[1].0.is_some() && rx[1].1 == 2,
                "{name} {filter:?}: {rx:?}"
            );
            assert_eq!(rig.fam.rx_stamps_lost(), 0, "{name} {filter:?}");
            if name == "82576" {
                // The hardware filter itself picks the message (§8.3): TYPE_L2_V2 with the
                // type in TSYNCRXCFG b11:8; the part stamped one frame, not two.
                let (ctl, cfg) = rig
                    .func
                    .with_device(|d| (d.peek(r::TSYNCRXCTL), d.peek(r::TSYNCRXCFG)));
                let ctl = r::TsyncRxCtl::from_bits_retain(ctl);
                assert_eq!(ctl.rx_type(), Some(r::RxTsType::L2V2));
                assert_eq!(cfg, u32::from(want) << 8);
                assert_eq!(
                    rig.func.with_device(|d| d.stats().rx_stamped),
                    1,
                    "{filter:?}"
                );
            }
        }
    }
}

#[test]
fn e82576_adjfine_keeps_timinca_nominal_and_never_steps() {
    // QEMU 10's model steps SYSTIM at every TIMINCA write (emu/src/igb.rs): igbd steers the
    // 82576 in its timecounter instead, accumulating at each change.
    let rig = rig("82576");
    let phc = rig.phc();
    let nominal = r::timinca::INCPERIOD_82576 | r::timinca::INCVALUE_82576;
    let mut expect = phc.gettime().phc_ns;
    for ppb in [100_000.0, -100_000.0, 37.0, 0.0] {
        phc.adjfine(ppb_to_scaled_ppm(ppb)).unwrap();
        assert_eq!(
            rig.func.with_device(|d| d.peek(r::TIMINCA)),
            nominal,
            "{ppb}"
        );
        // The clock did not move at the change; then it runs at the new rate.
        assert_eq!(phc.gettime().phc_ns, expect, "{ppb}: stepped at the change");
        rig.clock.advance(S / 10);
        let got = phc.gettime().phc_ns;
        let want = expect as f64 + 1e8 * (1.0 + ppb * 1e-9);
        assert!((got as f64 - want).abs() <= 1.0, "{ppb}: {got} vs {want}");
        expect = got;
    }
}
