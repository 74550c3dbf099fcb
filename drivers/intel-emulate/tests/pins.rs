//! The drivers' pin operations (intel_common::pins) against the i225 and i210 models under a
//! virtual clock: EXTTS events carry SYSTIM at the true instant of the edge, periodic outputs in
//! both modes put their edges where SYSTIM reads the requested grid, assignments move as Linux's
//! PTP core moves them, and a reset loses nothing. Judged on the models' true edge instants.

use std::sync::Arc;

use intel_common::Regs;
use intel_common::family::Family;
use intel_common::pins::{PerOutRequest, PinError, PinEvent, PinFunc, Pins};
use intel_common::{igb, igc};
use intel_regs::e1000::{TSAUXC, TsCause, Tsauxc, reg};
use ptp_emu::clock::VirtualClock;
use ptp_emu::igb::{Igb as IgbModel, IgbConfig};
use ptp_emu::igc::{I225, I225Config, PinEdge};
use ptp_emu::phc::PhcLaw;
use ptp_pci::PciFunction;
use ptp_pci::emulated::{Device, EmuBar, EmuFunction};

const T0: u64 = 1_700_000_000_000_000_000;
const S: u64 = 1_000_000_000;
/// The models' input latch delay (ptp_emu's `PinsConfig::default`).
const LATCH_NS: u64 = 8;

trait Model: Device + Send + 'static {
    fn sched(&mut self, e: PinEdge);
    fn edges(&mut self) -> Vec<PinEdge>;
    fn law(&self) -> PhcLaw;
}

macro_rules! model {
    ($t:ty) => {
        impl Model for $t {
            fn sched(&mut self, e: PinEdge) {
                self.schedule_pin_edge(e)
            }
            fn edges(&mut self) -> Vec<PinEdge> {
                self.take_pin_edges()
            }
            fn law(&self) -> PhcLaw {
                self.phc_law()
            }
        }
    };
}
model!(I225);
model!(IgbModel);

struct Rig<D: Device> {
    clock: VirtualClock,
    func: EmuFunction<D>,
    regs: Arc<Regs<EmuBar<D>>>,
    pins: Pins,
}

fn i225() -> Rig<I225> {
    let clock = VirtualClock::new(1_000);
    let mut func = EmuFunction::new(I225::new(I225Config::i225(clock.source())), "i225");
    let regs = Arc::new(Regs::new(func.map_bar(0).unwrap()));
    igc::reset(&regs).unwrap();
    igc::ptp_reset(&regs, T0);
    Rig {
        clock,
        func,
        regs,
        pins: Pins::default(),
    }
}

fn i210() -> Rig<IgbModel> {
    let clock = VirtualClock::new(1_000);
    let c = IgbConfig::for_name("i210", clock.source()).unwrap();
    let device = c.device_id;
    let mut func = EmuFunction::new(IgbModel::new(c).unwrap(), "i210");
    let (_, fam) = <igb::Igb as Family>::probe(0x8086, device).unwrap();
    let regs = Arc::new(Regs::new(func.map_bar(0).unwrap()));
    fam.reset(&regs).unwrap();
    fam.ptp_reset(&regs, T0);
    Rig {
        clock,
        func,
        regs,
        pins: Pins::default(),
    }
}

impl<D: Model> Rig<D> {
    fn phc_now(&self) -> u64 {
        let t = self.clock.now();
        self.func.with_device(|d| d.law().ns_at(t))
    }

    /// Moves true time on in 1 ms polls, handling the time-sync causes as the IRQ thread
    /// would (one TSICR read per pass); the events.
    fn run(&mut self, ns: u64) -> Vec<PinEvent> {
        let mut events = Vec::new();
        let end = self.clock.now() + ns;
        while self.clock.now() < end {
            self.clock.advance(1_000_000.min(end - self.clock.now()));
            self.func.poll();
            let tsicr = self.regs.get(reg::TSICR);
            self.pins.handle(&self.regs, tsicr, |e| events.push(e));
        }
        events
    }
}

/// `t` is the first instant SYSTIM reads at least `ns`.
fn first_instant(law: &PhcLaw, t: u64, ns: u64) -> bool {
    law.ns_at(t) >= ns && law.ns_at(t - 1) < ns
}

fn extts_events_carry_systim_at_the_edge<D: Model>(mut r: Rig<D>, part: &str) {
    r.pins.set_func(&r.regs, 3, PinFunc::ExtTs, 1).unwrap();
    r.pins.extts(&r.regs, 1, true).unwrap();
    assert_eq!(
        r.regs.get(reg::TSIM),
        TsCause::TXTS | TsCause::AUTT1,
        "{part}"
    );
    let edges: Vec<u64> = (1..=3).map(|k| r.clock.now() + k * S + 777).collect();
    for (i, &t) in edges.iter().enumerate() {
        r.func.with_device(|d| {
            d.sched(PinEdge {
                pin: 3,
                t,
                high: i % 2 == 0,
            })
        });
    }
    let got = r.run(4 * S);
    let law = r.func.with_device(|d| d.law());
    let want: Vec<PinEvent> = edges
        .iter()
        .map(|&t| PinEvent::ExtTs {
            chan: 1,
            ns: law.ns_at(t + LATCH_NS),
        })
        .collect();
    assert_eq!(got, want, "{part}");
    // Off: further edges give nothing.
    r.pins.extts(&r.regs, 1, false).unwrap();
    let t = r.clock.now() + 1_000;
    r.func.with_device(|d| {
        d.sched(PinEdge {
            pin: 3,
            t,
            high: true,
        })
    });
    assert!(r.run(S).is_empty(), "{part}");
}

#[test]
fn extts_events_carry_systim_at_the_true_edge_i225() {
    extts_events_carry_systim_at_the_edge(i225(), "i225");
}

#[test]
fn extts_events_carry_systim_at_the_true_edge_i210() {
    extts_events_carry_systim_at_the_edge(i210(), "i210");
}

/// A 1 PPS output (clock mode: half period 500 ms) and a 3 s one (target-time mode, re-armed on
/// each TT interrupt) from a start in the past: edges on the requested grid, from the first
/// grid point after arming, at the true instants SYSTIM reaches them.
fn perout_edges_land_on_the_grid<D: Model>(mut r: Rig<D>, part: &str) {
    r.pins.set_func(&r.regs, 0, PinFunc::PerOut, 0).unwrap();
    r.pins.set_func(&r.regs, 2, PinFunc::PerOut, 1).unwrap();
    let now = r.phc_now();
    let pps = PerOutRequest {
        start_ns: (now / S) * S - 5 * S + 250,
        period_ns: S,
    };
    let slow = PerOutRequest {
        start_ns: now + 100 * S + 17,
        period_ns: 3 * S,
    };
    let first = r.pins.perout(&r.regs, 0, Some(pps), now).unwrap();
    assert!(first > now && first % S == 250, "{part}: {first}");
    assert_eq!(
        r.pins.perout(&r.regs, 1, Some(slow), now).unwrap(),
        slow.start_ns
    );
    // The slow one starts 100 s on: run until 7 s past it.
    let law = r.func.with_device(|d| d.law());
    r.run(107 * S);
    let edges = r.func.with_device(|d| d.edges());
    for (pin, start, half) in [(0u8, first, S / 2), (2, slow.start_ns, 3 * S / 2)] {
        let e: Vec<&PinEdge> = edges.iter().filter(|e| e.pin == pin).collect();
        assert!(e.len() >= 4, "{part} pin {pin}: {}", e.len());
        for (k, x) in e.iter().enumerate() {
            let at = start + k as u64 * half;
            assert!(first_instant(&law, x.t, at), "{part} pin {pin} edge {k}");
            assert_eq!(x.high, k % 2 == 0, "{part} pin {pin} edge {k}");
        }
    }
    // Stopping a channel stops its pin.
    r.pins.perout(&r.regs, 0, None, r.phc_now()).unwrap();
    r.run(2 * S);
    let after = r.func.with_device(|d| d.edges());
    assert!(after.iter().all(|e| e.pin == 2), "{part}: {after:?}");
}

#[test]
fn perout_edges_land_on_the_requested_grid_i225() {
    perout_edges_land_on_the_grid(i225(), "i225");
}

#[test]
fn perout_edges_land_on_the_requested_grid_i210() {
    perout_edges_land_on_the_grid(i210(), "i210");
}

#[test]
fn requests_without_a_pin_or_out_of_range_are_refused() {
    let mut r = i225();
    assert_eq!(r.pins.extts(&r.regs, 0, true), Err(PinError::NoPin));
    assert_eq!(
        r.pins.set_func(&r.regs, 4, PinFunc::ExtTs, 0),
        Err(PinError::Invalid)
    );
    assert_eq!(
        r.pins.set_func(&r.regs, 0, PinFunc::PerOut, 2),
        Err(PinError::Invalid)
    );
    r.pins.set_func(&r.regs, 1, PinFunc::PerOut, 0).unwrap();
    let short = PerOutRequest {
        start_ns: 0,
        period_ns: 15,
    };
    assert_eq!(
        r.pins.perout(&r.regs, 0, Some(short), 0),
        Err(PinError::PeriodTooShort)
    );
    // Nothing was programmed by the refusals.
    assert_eq!(
        r.regs.read(TSAUXC) & (Tsauxc::en_clk(0) | Tsauxc::en_tt(0)).bits(),
        0
    );
}

/// As Linux's PTP core: assigning a (function, channel) another pin holds takes it from that
/// pin, whose channel stops.
#[test]
fn a_channel_moves_to_the_pin_last_assigned() {
    let mut r = i225();
    r.pins.set_func(&r.regs, 0, PinFunc::ExtTs, 0).unwrap();
    r.pins.extts(&r.regs, 0, true).unwrap();
    r.pins.set_func(&r.regs, 2, PinFunc::ExtTs, 0).unwrap();
    let a = r.pins.assignments();
    assert_eq!((a[0].func, a[2].func), (PinFunc::None, PinFunc::ExtTs));
    assert!(
        !r.regs.get(reg::TSAUXC).contains(Tsauxc::EN_TS0),
        "stopped with its pin"
    );
    r.pins.extts(&r.regs, 0, true).unwrap();
    assert_eq!(r.regs.get(reg::TSSDP).aux_pin(0), Some(2));
}

/// Linux's PTP reset writes TSAUXC = 0 and TSSDP = 0 and leaves the pins dead; `reapply` puts
/// them back, and the output keeps its grid.
#[test]
fn reapply_restores_the_pins_after_a_ptp_reset() {
    let mut r = i225();
    r.pins.set_func(&r.regs, 1, PinFunc::PerOut, 0).unwrap();
    let now = r.phc_now();
    let first = r
        .pins
        .perout(
            &r.regs,
            0,
            Some(PerOutRequest {
                start_ns: (now / S + 1) * S,
                period_ns: S,
            }),
            now,
        )
        .unwrap();
    r.run(2 * S);
    igc::ptp_reset(&r.regs, r.phc_now());
    let _ = r.func.with_device(|d| d.edges());
    r.run(2 * S);
    assert!(
        r.func.with_device(|d| d.edges()).is_empty(),
        "the reset stopped it"
    );
    r.pins.reapply(&r.regs, r.phc_now());
    let law = r.func.with_device(|d| d.law());
    r.run(3 * S);
    let e = r.func.with_device(|d| d.edges());
    assert!(e.len() >= 4);
    for x in &e {
        let ns = law.ns_at(x.t);
        assert_eq!((ns - first) % (S / 2), 0, "{x:?} off the grid");
        assert!(first_instant(&law, x.t, ns));
    }
}
