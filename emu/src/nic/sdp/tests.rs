//! The pins on every part that has them, driven the way Linux's drivers drive them (register
//! order from igc_pin_extts/igc_pin_perout and igb_pin_extts/igb_pin_perout; the interrupt side
//! from igc_tsync_interrupt/igb_tsync_interrupt) and judged on the true instants, not on what
//! a driver of ours reads. Deterministic: a [`VirtualClock`] advanced by hand.

use intel_regs::e1000::{
    AUXSTMPH, AUXSTMPH0, AUXSTMPL, AUXSTMPL0, CTRL, CTRL_EXT, Ctrl, CtrlExt, FREQOUT, IntCause,
    SdpOut, TRGTTIMH, TRGTTIMH0, TRGTTIML, TRGTTIML0, TSAUXC, TSICR, TSIM, TSSDP, TsCause, Tsauxc,
    Tssdp,
};
use ptp_pci::emulated::{Device, DeviceHost};

use super::{PinEdge, PinStats};
use crate::clock::VirtualClock;
use crate::host::RecordingHost;
use crate::igb::{Igb, IgbConfig, IgbPart};
use crate::igc::{I225, I225Config};
use crate::phc::{NS_PER_S, PhcLaw, TimeFormat};

const S: u64 = NS_PER_S;

/// What these tests need of a model beyond [`Device`].
trait PinModel: Device {
    fn sched(&mut self, e: PinEdge);
    fn edges(&mut self) -> Vec<PinEdge>;
    fn law(&self) -> PhcLaw;
    fn stats(&self) -> PinStats;
    fn osc(&mut self, ppb: i64);
}

macro_rules! pin_model {
    ($t:ty) => {
        impl PinModel for $t {
            fn sched(&mut self, e: PinEdge) {
                self.schedule_pin_edge(e)
            }
            fn edges(&mut self) -> Vec<PinEdge> {
                self.take_pin_edges()
            }
            fn law(&self) -> PhcLaw {
                self.phc_law()
            }
            fn stats(&self) -> PinStats {
                self.pin_stats()
            }
            fn osc(&mut self, ppb: i64) {
                self.set_osc_error_ppb(ppb)
            }
        }
    };
}
pin_model!(I225);
pin_model!(Igb);

struct Rig {
    clock: VirtualClock,
    dev: Box<dyn PinModel>,
    host: RecordingHost,
    format: TimeFormat,
    icr: u32,
}

/// Every part with pins.
const PARTS: [&str; 4] = ["i225", "i226", "i210", "i350"];

impl Rig {
    /// `part` with its clock counting (TSAUXC = 0, Linux's PTP reset), a crystal 3.7 ppm fast,
    /// TIMINCA slowing it by a little, IMS.TS set.
    fn new(part: &str) -> Self {
        let clock = VirtualClock::new(1_000);
        let igb = |p: IgbPart| {
            let cfg = IgbConfig::new(p, clock.source());
            Box::new(Igb::new(cfg).expect("valid config")) as Box<dyn PinModel>
        };
        let (dev, format, icr): (Box<dyn PinModel>, _, _) = match part {
            "i225" => (
                Box::new(I225::new(I225Config::i225(clock.source()))),
                TimeFormat::Igc,
                intel_regs::igc::ICR,
            ),
            "i226" => (
                Box::new(I225::new(I225Config::i226(clock.source()))),
                TimeFormat::Igc,
                intel_regs::igc::ICR,
            ),
            "i210" => (igb(IgbPart::I210), TimeFormat::I210, intel_regs::igb::ICR),
            "i350" => (igb(IgbPart::I350), TimeFormat::I350, intel_regs::igb::ICR),
            "82576" => (
                igb(IgbPart::E82576),
                TimeFormat::E82576,
                intel_regs::igb::ICR,
            ),
            _ => unreachable!("{part}"),
        };
        let mut r = Self {
            clock,
            dev,
            host: RecordingHost::new(),
            format,
            icr,
        };
        r.wr(TSAUXC, 0);
        r.dev.osc(3_700);
        r.wr(intel_regs::e1000::TIMINCA, 0x8000_0123);
        let ims = if icr == intel_regs::igc::ICR {
            intel_regs::igc::IMS
        } else {
            intel_regs::igb::IMS
        };
        r.wr(ims, IntCause::TS.bits());
        r
    }

    fn rd(&mut self, off: u32) -> u32 {
        self.dev.read32(0, off, &mut self.host)
    }

    fn wr(&mut self, off: u32, v: u32) {
        self.dev.write32(0, off, v, &mut self.host);
    }

    /// Runs the model to true time `t` as its thread would (a poll there).
    fn run_to(&mut self, t: u64) {
        self.clock.set(t.max(self.clock.now()));
        let host: &mut dyn DeviceHost = &mut self.host;
        self.dev.poll(host);
    }

    fn now(&self) -> u64 {
        self.clock.now()
    }

    fn phc_now(&self) -> u64 {
        self.dev.law().ns_at(self.now())
    }

    /// TRGTTIML/H for SYSTIM `ns` in the part's format.
    fn target_regs(&self, ns: u64) -> (u32, u32) {
        match self.format {
            TimeFormat::I350 => (ns as u32, (ns >> 32) as u32),
            _ => ((ns % S) as u32, (ns / S) as u32),
        }
    }

    /// An AUXSTMPL/H pair as SYSTIM ns.
    fn stamp_ns(&self, l: u32, h: u32) -> u64 {
        match self.format {
            TimeFormat::I350 => (u64::from(h & 0xFF) << 32) | u64::from(l),
            _ => u64::from(h) * S + u64::from(l),
        }
    }

    /// Pin `pin`'s direction: the read-modify-write of CTRL and CTRL_EXT the drivers do.
    fn set_dir(&mut self, pin: usize, output: bool) {
        let mut c = Ctrl::from_bits_retain(self.rd(CTRL));
        let mut e = CtrlExt::from_bits_retain(self.rd(CTRL_EXT));
        if let Some(d) = Ctrl::sdp_dir(pin) {
            c.set(d, output);
        }
        if let Some(d) = CtrlExt::sdp_dir(pin) {
            e.set(d, output);
        }
        self.wr(CTRL, c.bits());
        self.wr(CTRL_EXT, e.bits());
    }

    /// EXTTS on `pin` into stamp `n`, in the drivers' order: TSSDP (AUXn_SEL, the pin's
    /// TS_SDP_EN off), CTRL/CTRL_EXT (input), TSAUXC.EN_TSn, TSIM.AUTTn.
    fn extts(&mut self, n: usize, pin: usize) {
        let sdp = Tssdp::from_bits_retain(self.rd(TSSDP))
            .with_out(pin, None)
            .with_aux(n, pin);
        self.wr(TSSDP, sdp.bits());
        self.set_dir(pin, false);
        let aux = self.rd(TSAUXC) | Tsauxc::en_ts(n).bits();
        self.wr(TSAUXC, aux);
        let im = self.rd(TSIM) | TsCause::autt(n).bits();
        self.wr(TSIM, im);
    }

    /// A periodic output on `pin` from channel `n` starting at SYSTIM `start`: target-time
    /// mode (`half` None: TTn, EN_TTn, TSIM.TTn) or clock mode (FCn, FREQOUT = half,
    /// EN_CLKn, with STn when `st`), in the drivers' order.
    fn perout(&mut self, n: usize, pin: usize, start: u64, half: Option<u32>, st: bool) {
        let src = match half {
            Some(_) => SdpOut::Fc(n),
            None => SdpOut::Tt(n),
        };
        let sdp = Tssdp::from_bits_retain(self.rd(TSSDP)).with_out(pin, Some(src));
        self.wr(TSSDP, sdp.bits());
        self.set_dir(pin, true);
        let (l, h) = self.target_regs(start);
        self.wr(TRGTTIMH[n], h);
        self.wr(TRGTTIML[n], l);
        let mut aux = Tsauxc::from_bits_retain(self.rd(TSAUXC));
        if let Some(half) = half {
            self.wr(FREQOUT[n], half);
            aux |= Tsauxc::en_clk(n);
            aux.set(Tsauxc::st(n), st);
        } else {
            aux |= Tsauxc::en_tt(n);
            let im = self.rd(TSIM) | TsCause::tt(n).bits();
            self.wr(TSIM, im);
        }
        self.wr(TSAUXC, aux.bits());
    }

    /// ICR.TS is pending (read-to-clear).
    fn icr_ts(&mut self) -> bool {
        self.rd(self.icr) & IntCause::TS.bits() != 0
    }
}

/// `t` is the first instant SYSTIM reads at least `target` under `law`.
fn is_first_instant(law: &PhcLaw, t: u64, target: u64) -> bool {
    law.ns_at(t) >= target && law.ns_at(t - 1) < target
}

#[test]
fn an_edge_on_the_routed_pin_latches_systim_into_auxstmp_and_raises_autt() {
    for part in PARTS {
        for (n, pin) in [(0, 1), (1, 3)] {
            let mut r = Rig::new(part);
            r.extts(n, pin);
            assert!(!r.icr_ts(), "{part}");
            let t = r.now() + 250_000_123;
            r.dev.sched(PinEdge {
                pin: pin as u8,
                t,
                high: true,
            });
            r.run_to(t - 1);
            assert_eq!(r.rd(TSICR) & TsCause::autt(n).bits(), 0, "{part}: early");
            r.run_to(t + 40_000);
            assert!(r.icr_ts(), "{part}: ICR.TS");
            assert_eq!(r.rd(TSICR), TsCause::autt(n).bits(), "{part}");
            let (l, h) = (r.rd(AUXSTMPL[n]), r.rd(AUXSTMPH[n]));
            let want = r.dev.law().ns_at(t + super::PinsConfig::default().latch_ns);
            assert_eq!(r.stamp_ns(l, h), want, "{part} n{n} pin{pin}");
            assert_eq!(r.dev.stats().stamps, 1);
        }
    }
}

#[test]
fn a_stamp_is_held_until_auxstmph_is_read_and_later_edges_are_missed_until_then() {
    for part in PARTS {
        let mut r = Rig::new(part);
        r.extts(0, 0);
        let t0 = r.now() + 1_000;
        for (i, dt) in [0u64, 500, 900].into_iter().enumerate() {
            r.dev.sched(PinEdge {
                pin: 0,
                t: t0 + dt,
                high: i % 2 == 0,
            });
        }
        r.run_to(t0 + 2_000);
        let first = r.dev.law().ns_at(t0 + 8);
        // TSAUXC shows the held stamp (AUTT0); a driver's write-back of it changes nothing.
        let aux = r.rd(TSAUXC);
        assert_ne!(aux & Tsauxc::AUTT0.bits(), 0, "{part}");
        r.wr(TSAUXC, aux & !Tsauxc::AUTT0.bits());
        assert_ne!(
            r.rd(TSAUXC) & Tsauxc::AUTT0.bits(),
            0,
            "{part}: AUTT0 is status"
        );
        assert_eq!(r.dev.stats().stamps_missed, 2, "{part}");
        let (l, h) = (r.rd(AUXSTMPL0), r.rd(AUXSTMPH0));
        assert_eq!(r.stamp_ns(l, h), first, "{part}: the first edge's stamp");
        assert_eq!(
            r.rd(TSAUXC) & Tsauxc::AUTT0.bits(),
            0,
            "{part}: freed by AUXSTMPH0"
        );
        let t1 = r.now() + 3_000;
        r.dev.sched(PinEdge {
            pin: 0,
            t: t1,
            high: false,
        });
        r.run_to(t1 + 10);
        let (l, h) = (r.rd(AUXSTMPL0), r.rd(AUXSTMPH0));
        assert_eq!(
            r.stamp_ns(l, h),
            r.dev.law().ns_at(t1 + 8),
            "{part}: the next edge"
        );
    }
}

#[test]
fn edges_on_another_pin_an_output_or_with_en_ts_off_latch_nothing() {
    for part in PARTS.into_iter().chain(["82576"]) {
        let mut r = Rig::new(part);
        r.extts(0, 2);
        r.set_dir(1, true);
        let aux = r.rd(TSAUXC);
        r.wr(TSAUXC, aux & !Tsauxc::EN_TS0.bits());
        let t = r.now() + 1_000;
        r.dev.sched(PinEdge {
            pin: 2,
            t,
            high: true,
        });
        r.dev.sched(PinEdge {
            pin: 1,
            t: t + 1,
            high: true,
        });
        r.dev.sched(PinEdge {
            pin: 3,
            t: t + 2,
            high: true,
        });
        r.run_to(t + 100);
        assert_eq!(r.rd(TSICR), 0, "{part}");
        assert_eq!(r.dev.stats().stamps, 0, "{part}");
        if part != "82576" {
            assert_eq!(r.dev.stats().edges_in_on_output, 1, "{part}");
        }
    }
}

#[test]
fn a_target_time_toggles_its_pin_at_the_true_instant_and_clears_en_tt() {
    for part in PARTS {
        for (n, pin) in [(0, 2), (1, 0)] {
            let mut r = Rig::new(part);
            let start = r.phc_now() + 1_500_000_007;
            r.perout(n, pin, start, None, false);
            let law = r.dev.law();
            r.run_to(r.now() + 1_600_000_000);
            let e = r.dev.edges();
            assert_eq!(e.len(), 1, "{part}");
            assert_eq!((e[0].pin as usize, e[0].high), (pin, true), "{part}");
            assert!(is_first_instant(&law, e[0].t, start), "{part}: {e:?}");
            assert_eq!(r.rd(TSICR), TsCause::tt(n).bits(), "{part}");
            assert_eq!(
                r.rd(TSAUXC) & Tsauxc::en_tt(n).bits(),
                0,
                "{part}: auto-clear"
            );
            // The level shows in CTRL/CTRL_EXT's data bit.
            let (c, x) = (
                Ctrl::from_bits_retain(r.rd(CTRL)),
                CtrlExt::from_bits_retain(r.rd(CTRL_EXT)),
            );
            let level = match (Ctrl::sdp_data(pin), CtrlExt::sdp_data(pin)) {
                (Some(b), _) => c.contains(b),
                (_, Some(b)) => x.contains(b),
                _ => unreachable!(),
            };
            assert!(level, "{part}");
            // The next edge as igc_tsync_interrupt re-arms it: L, H, then EN_TTn again.
            let next = start + 500_000_000;
            let (l, h) = r.target_regs(next);
            r.wr(TRGTTIML[n], l);
            r.wr(TRGTTIMH[n], h);
            let aux = r.rd(TSAUXC) | Tsauxc::en_tt(n).bits();
            r.wr(TSAUXC, aux);
            let law = r.dev.law();
            r.run_to(r.now() + S);
            let e = r.dev.edges();
            assert_eq!(e.len(), 1, "{part}");
            assert!(
                !e[0].high && is_first_instant(&law, e[0].t, next),
                "{part}: {e:?}"
            );
        }
    }
}

#[test]
fn a_target_already_passed_never_fires_unless_dis_ts_clear_keeps_re_arming() {
    for part in PARTS {
        let mut r = Rig::new(part);
        r.run_to(r.now() + S);
        let past = r.phc_now() - 1;
        r.perout(0, 0, past, None, false);
        r.run_to(r.now() + 3 * S);
        assert!(r.dev.edges().is_empty(), "{part}: commit 84a192e46106");
        assert_eq!(r.rd(TSICR), 0, "{part}");
        // DIS_TS_CLEAR: EN_TT0 stays set after the target fires.
        let aux = r.rd(TSAUXC) | Tsauxc::DIS_TS_CLEAR.bits();
        r.wr(TSAUXC, aux);
        let (l, h) = r.target_regs(r.phc_now() + 1_000);
        r.wr(TRGTTIMH0, h);
        r.wr(TRGTTIML0, l);
        r.run_to(r.now() + 10_000);
        assert_eq!(r.dev.edges().len(), 1, "{part}");
        assert_ne!(r.rd(TSAUXC) & Tsauxc::EN_TT0.bits(), 0, "{part}");
    }
}

#[test]
fn a_clock_output_with_st_toggles_on_the_grid_of_its_start_time() {
    for part in PARTS {
        let mut r = Rig::new(part);
        let half = 500_000_000u32;
        let start = (r.phc_now() / S + 2) * S;
        r.perout(1, 3, start, Some(half), true);
        let law = r.dev.law();
        r.run_to(r.now() + 5 * S);
        let e = r.dev.edges();
        assert!(e.len() >= 6, "{part}: {e:?}");
        for (k, edge) in e.iter().enumerate() {
            let at = start + k as u64 * u64::from(half);
            assert!(is_first_instant(&law, edge.t, at), "{part} edge {k}");
            assert_eq!(edge.high, k % 2 == 0, "{part} edge {k}");
        }
        // Clock outputs raise no interrupt; disabling stops the edges.
        assert_eq!(r.rd(TSICR), 0, "{part}");
        let aux = r.rd(TSAUXC) & !Tsauxc::EN_CLK1.bits();
        r.wr(TSAUXC, aux);
        r.run_to(r.now() + 2 * S);
        assert!(r.dev.edges().is_empty(), "{part}");
    }
}

/// The form commit 5e91c72e560c fixed ("igc: Fix PPS delta between two synchronized
/// end-points"): without ST the output runs, but not on the start time's grid.
#[test]
fn a_clock_output_without_st_is_off_the_grid_of_its_start_time() {
    for part in PARTS {
        let mut r = Rig::new(part);
        r.run_to(r.now() + 123_456_789);
        let half = 500_000_000u64;
        let start = (r.phc_now() / S + 2) * S;
        r.perout(0, 1, start, Some(half as u32), false);
        r.run_to(r.now() + 4 * S);
        let law = r.dev.law();
        let e = r.dev.edges();
        assert!(e.len() >= 6, "{part}");
        let off_grid = e
            .iter()
            .filter(|x| (law.ns_at(x.t) + half - start % half) % half > 1_000)
            .count();
        assert_eq!(off_grid, e.len(), "{part}: {e:?}");
    }
}

#[test]
fn sys_wrap_is_raised_at_each_phc_second_while_tsim_enables_it() {
    for part in PARTS {
        let mut r = Rig::new(part);
        r.run_to(r.now() + 3 * S);
        assert_eq!(r.rd(TSICR), 0, "{part}: masked, nothing");
        r.wr(TSIM, TsCause::SYS_WRAP.bits());
        let law = r.dev.law();
        let next = (r.phc_now() / S + 1) * S;
        let due = law.t_reaching_ns(next).expect("running");
        r.run_to(due - 1);
        assert_eq!(r.rd(TSICR), 0, "{part}: not before the second");
        r.run_to(due);
        assert!(r.icr_ts(), "{part}");
        assert_eq!(r.rd(TSICR), TsCause::SYS_WRAP.bits(), "{part}");
        r.run_to(due + S / 2);
        assert_eq!(r.rd(TSICR), 0, "{part}: once per second");
    }
}

#[test]
fn a_software_output_pin_follows_its_data_bit() {
    for part in PARTS {
        let mut r = Rig::new(part);
        r.set_dir(2, true);
        let x = r.rd(CTRL_EXT) | CtrlExt::SDP2_DATA.bits();
        r.wr(CTRL_EXT, x);
        let t = r.now();
        let e = r.dev.edges();
        assert_eq!(
            e,
            vec![PinEdge {
                pin: 2,
                t,
                high: true
            }],
            "{part}"
        );
        assert_ne!(r.rd(CTRL_EXT) & CtrlExt::SDP2_DATA.bits(), 0, "{part}");
        // An input pin's data bit shows the wire, not what was written.
        r.set_dir(0, false);
        let c = r.rd(CTRL) | Ctrl::SDP0_DATA.bits();
        r.wr(CTRL, c);
        assert_eq!(r.rd(CTRL) & Ctrl::SDP0_DATA.bits(), 0, "{part}");
    }
}

#[test]
fn the_poll_deadline_is_the_next_pin_instant() {
    for part in PARTS {
        let mut r = Rig::new(part);
        let start = r.phc_now() + 700_000_000;
        r.perout(0, 0, start, None, false);
        let due = r.dev.law().t_reaching_ns(start).expect("running");
        let host: &mut dyn DeviceHost = &mut r.host;
        let wait = r.dev.poll(host).expect("a deadline");
        assert_eq!(wait.as_nanos() as u64, due - r.clock.now(), "{part}");
    }
}

#[test]
fn igc_targets_on_timers_1_to_3_never_fire() {
    let mut r = Rig::new("i225");
    let start = r.phc_now() + 1_000_000;
    r.perout(0, 0, start, None, false);
    let l = r.rd(TRGTTIML0) | 1 << intel_regs::igc::TRGTTIML_TIMER_SEL_SHIFT;
    r.wr(TRGTTIML0, l);
    r.run_to(r.now() + S);
    assert!(r.dev.edges().is_empty());
}
