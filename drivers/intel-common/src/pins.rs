//! The software-definable pins (SDP0–3) as a PTP clock offers them, written once for i225/i226
//! and i210/i211 (both keep SYSTIM as seconds and nanoseconds): a function per pin (none,
//! external timestamps, periodic output), two EXTTS channels latching SYSTIM on a pin's edges
//! into AUXSTMP0/1, two PEROUT channels driving a pin from a target time or a clock output, and
//! a PPS event from SYS_WRAP (intel-timesync.md §2.3, §2.4).
//!
//! The register sequences are Linux's (igc_ptp.c `igc_pin_extts`/`igc_pin_perout`/
//! `igc_ptp_feature_enable_i225`, igb_ptp.c for the i210): TSSDP, then CTRL, then CTRL_EXT, then
//! TSAUXC and TSIM; clock-output mode (FREQOUT, EN_CLKn with STn) when the half period is at
//! most 70 ms or exactly 125, 250 or 500 ms, target-time mode (TRGTTIM re-armed by half a period
//! on each TTn interrupt) otherwise; a half period under 8 ns refused. Where this module
//! differs from Linux, on purpose:
//!
//! - A start time already passed (or too close to arm) moves forward by whole periods, keeping
//!   the phase the caller asked for; Linux's igc moves only the seconds (commit 84a192e46106),
//!   which keeps the phase only for whole-second periods, and its i210 path not at all.
//! - [`Pins::reapply`] restores every pin after a reset; Linux's PTP reset writes TSAUXC = 0
//!   and TSSDP = 0 and only re-enables PPS, while the PTP core still reports the pins set.
//! - An EXTTS event is one edge, rising or falling: the hardware latches both (Linux demands
//!   both edges under PTP_STRICT_FLAGS) and the caller filters by pulse width if it must, as
//!   ts2phc does.

use intel_regs::e1000::{
    AUXSTMPH, AUXSTMPL, Ctrl, CtrlExt, FREQOUT, SdpOut, TRGTTIMH, TRGTTIML, TsCause, Tsauxc, Tssdp,
    reg,
};
use ptp_ipc::{DriverError, DriverEvent, DriverReply, DriverRequest, ExtTsEvent, PinConfig};
use ptp_pci::Mmio;

use crate::Regs;

/// SDPs per port (IGC_N_SDP, IGB_N_SDP).
pub const N_PINS: usize = Tssdp::PINS;
/// External-timestamp and periodic-output channels (IGC_N_EXTTS, IGC_N_PEROUT).
pub const N_EXTTS: usize = 2;
pub const N_PEROUT: usize = 2;
/// The shortest half period the outputs take (Linux: "half < 8 ns → -EINVAL").
pub const MIN_HALF_PERIOD_NS: u64 = 8;
/// How far ahead of SYSTIM a start must lie to be armed safely over a slow bus.
pub const ARM_MARGIN_NS: u64 = 20_000_000;

const NS_PER_S: u64 = 1_000_000_000;

/// What a pin does: the channel's type (Linux `enum ptp_pin_function`, PHYSYNC excepted).
pub use ptp_ipc::PinFunction as PinFunc;

/// One pin's assignment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PinAssign {
    pub func: PinFunc,
    pub chan: u8,
}

/// Why a pin request was refused (each maps to one `DriverError`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PinError {
    #[error("no such pin or channel")]
    Invalid,
    #[error("no pin is assigned to this channel")]
    NoPin,
    #[error("half period below {MIN_HALF_PERIOD_NS} ns")]
    PeriodTooShort,
}

/// A periodic output's request: the first edge (SYSTIM ns) and the period.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PerOutRequest {
    pub start_ns: u64,
    pub period_ns: u64,
}

/// A running periodic output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct PerOut {
    /// The next target-time edge (target-time mode) or the first edge (clock mode), ns.
    next_ns: u64,
    half_ns: u64,
    clock_mode: bool,
}

/// What the pins report from one look at TSICR.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinEvent {
    /// An edge on the pin of EXTTS channel `chan`, SYSTIM ns.
    ExtTs { chan: u8, ns: u64 },
    /// SYSTIM's seconds rolled over (PPS on).
    Pps,
}

/// The pins' state: their assignment and what each channel runs.
#[derive(Debug, Clone, Default)]
pub struct Pins {
    assign: [PinAssign; N_PINS],
    extts: [bool; N_EXTTS],
    perout: [Option<PerOut>; N_PEROUT],
    pps: bool,
}

/// Linux's rule for clock-output mode.
fn clock_mode(half_ns: u64) -> bool {
    half_ns <= 70_000_000 || [125_000_000, 250_000_000, 500_000_000].contains(&half_ns)
}

/// TRGTTIML/H for SYSTIM `ns` (timer 0: igc's select bits 0).
fn target_regs(ns: u64) -> (u32, u32) {
    ((ns % NS_PER_S) as u32, (ns / NS_PER_S) as u32)
}

impl Pins {
    /// The assignment of every pin.
    pub fn assignments(&self) -> [PinAssign; N_PINS] {
        self.assign
    }

    /// The TSIM causes the pins need beside TXTS.
    pub fn tsim(&self) -> TsCause {
        let mut c = TsCause::empty();
        for n in 0..N_EXTTS {
            c.set(TsCause::autt(n), self.extts[n]);
        }
        for n in 0..N_PEROUT {
            let tt = self.perout[n].is_some_and(|p| !p.clock_mode);
            c.set(TsCause::tt(n), tt);
        }
        c.set(TsCause::SYS_WRAP, self.pps);
        c
    }

    fn pin_of(&self, func: PinFunc, chan: usize) -> Option<usize> {
        self.assign
            .iter()
            .position(|a| a.func == func && usize::from(a.chan) == chan)
    }

    /// Assigns `func` on channel `chan` to `pin`. As Linux's PTP core does: a pin that had this
    /// function and channel is set to none (its channel stopped), and the pin's previous
    /// function is stopped.
    pub fn set_func<M: Mmio>(
        &mut self,
        regs: &Regs<M>,
        pin: usize,
        func: PinFunc,
        chan: usize,
    ) -> Result<(), PinError> {
        let chans = match func {
            PinFunc::None => usize::MAX,
            PinFunc::ExtTs => N_EXTTS,
            PinFunc::PerOut => N_PEROUT,
        };
        if pin >= N_PINS || chan >= chans {
            return Err(PinError::Invalid);
        }
        if func != PinFunc::None
            && let Some(other) = self.pin_of(func, chan)
            && other != pin
        {
            self.stop(regs, other);
            self.assign[other] = PinAssign::default();
        }
        self.stop(regs, pin);
        let chan = if func == PinFunc::None { 0 } else { chan as u8 };
        self.assign[pin] = PinAssign { func, chan };
        Ok(())
    }

    /// Stops whatever channel `pin` serves.
    fn stop<M: Mmio>(&mut self, regs: &Regs<M>, pin: usize) {
        let a = self.assign[pin];
        let chan = usize::from(a.chan);
        match a.func {
            PinFunc::ExtTs => {
                let _ = self.extts(regs, chan, false);
            }
            PinFunc::PerOut => {
                let _ = self.perout(regs, chan, None, 0);
            }
            PinFunc::None => {}
        }
    }

    /// Routes `pin` as an input into stamp `chan`, or as an output of `src`: TSSDP, then the
    /// direction in CTRL and CTRL_EXT (Linux's order).
    fn route<M: Mmio>(regs: &Regs<M>, pin: usize, chan: usize, out: Option<SdpOut>) {
        let mut sdp = regs.get(reg::TSSDP);
        match out {
            None => sdp = sdp.with_out(pin, None).with_aux(chan, pin),
            Some(src) => {
                for n in 0..N_EXTTS {
                    if sdp.aux_pin(n) == Some(pin) {
                        sdp = sdp.without_aux(n);
                    }
                }
                sdp = sdp.with_out(pin, Some(src));
            }
        }
        let (mut c, mut e) = (regs.get(reg::CTRL), regs.get(reg::CTRL_EXT));
        if let Some(d) = Ctrl::sdp_dir(pin) {
            c.set(d, out.is_some());
        }
        if let Some(d) = CtrlExt::sdp_dir(pin) {
            e.set(d, out.is_some());
        }
        regs.set(reg::TSSDP, sdp);
        regs.set(reg::CTRL, c);
        regs.set(reg::CTRL_EXT, e);
    }

    /// Starts or stops external timestamps on channel `chan` (its pin must be assigned).
    pub fn extts<M: Mmio>(
        &mut self,
        regs: &Regs<M>,
        chan: usize,
        on: bool,
    ) -> Result<(), PinError> {
        if chan >= N_EXTTS {
            return Err(PinError::Invalid);
        }
        let mut aux = regs.get(reg::TSAUXC);
        if on {
            let pin = self.pin_of(PinFunc::ExtTs, chan).ok_or(PinError::NoPin)?;
            Self::route(regs, pin, chan, None);
        }
        aux.set(Tsauxc::en_ts(chan), on);
        self.extts[chan] = on;
        regs.set(reg::TSAUXC, aux);
        regs.set(reg::TSIM, TsCause::TXTS | self.tsim());
        Ok(())
    }

    /// Starts (`Some`) or stops a periodic output on channel `chan`. `now_ns` is SYSTIM now; a
    /// start closer than [`ARM_MARGIN_NS`] moves on by whole periods. Returns the SYSTIM of the
    /// first edge (0 when stopped).
    pub fn perout<M: Mmio>(
        &mut self,
        regs: &Regs<M>,
        chan: usize,
        req: Option<PerOutRequest>,
        now_ns: u64,
    ) -> Result<u64, PinError> {
        if chan >= N_PEROUT {
            return Err(PinError::Invalid);
        }
        let mut aux =
            regs.get(reg::TSAUXC) - (Tsauxc::en_tt(chan) | Tsauxc::en_clk(chan) | Tsauxc::st(chan));
        let Some(req) = req.filter(|r| r.period_ns > 0) else {
            self.perout[chan] = None;
            regs.set(reg::TSAUXC, aux);
            regs.set(reg::TSIM, TsCause::TXTS | self.tsim());
            return Ok(0);
        };
        let half = req.period_ns / 2;
        if half < MIN_HALF_PERIOD_NS {
            return Err(PinError::PeriodTooShort);
        }
        let pin = self.pin_of(PinFunc::PerOut, chan).ok_or(PinError::NoPin)?;
        let earliest = now_ns + ARM_MARGIN_NS;
        let start = match req.start_ns {
            s if s >= earliest => s,
            s => s + (earliest - s).div_ceil(req.period_ns) * req.period_ns,
        };
        let cm = clock_mode(half);
        let src = if cm {
            SdpOut::Fc(chan)
        } else {
            SdpOut::Tt(chan)
        };
        Self::route(regs, pin, chan, Some(src));
        let (l, h) = target_regs(start);
        regs.write(TRGTTIMH[chan], h);
        regs.write(TRGTTIML[chan], l);
        if cm {
            regs.write(FREQOUT[chan], half as u32);
            aux |= Tsauxc::en_clk(chan) | Tsauxc::st(chan);
        } else {
            aux |= Tsauxc::en_tt(chan);
        }
        self.perout[chan] = Some(PerOut {
            next_ns: start,
            half_ns: half,
            clock_mode: cm,
        });
        regs.set(reg::TSAUXC, aux);
        regs.set(reg::TSIM, TsCause::TXTS | self.tsim());
        Ok(start)
    }

    /// PPS events (TSIM.SYS_WRAP) on or off.
    pub fn pps<M: Mmio>(&mut self, regs: &Regs<M>, on: bool) {
        self.pps = on;
        regs.set(reg::TSIM, TsCause::TXTS | self.tsim());
    }

    /// The time-sync causes of one TSICR read: target-time outputs re-armed half a period on
    /// (L, H, then EN_TTn, as igc_tsync_interrupt does), stamps read L then H (the H read frees
    /// the stamp for the next edge). Calls `event` for each event, in TSICR's order.
    pub fn handle<M: Mmio>(
        &mut self,
        regs: &Regs<M>,
        tsicr: TsCause,
        mut event: impl FnMut(PinEvent),
    ) {
        if tsicr.contains(TsCause::SYS_WRAP) && self.pps {
            event(PinEvent::Pps);
        }
        for n in 0..N_PEROUT {
            let Some(p) = self.perout[n].as_mut().filter(|p| !p.clock_mode) else {
                continue;
            };
            if !tsicr.contains(TsCause::tt(n)) {
                continue;
            }
            p.next_ns += p.half_ns;
            let (l, h) = target_regs(p.next_ns);
            regs.write(TRGTTIML[n], l);
            regs.write(TRGTTIMH[n], h);
            regs.update(reg::TSAUXC, Tsauxc::en_tt(n), Tsauxc::empty());
        }
        for n in 0..N_EXTTS {
            if tsicr.contains(TsCause::autt(n)) && self.extts[n] {
                let l = u64::from(regs.read(AUXSTMPL[n]) & 0x3FFF_FFFF);
                let h = u64::from(regs.read(AUXSTMPH[n]));
                event(PinEvent::ExtTs {
                    chan: n as u8,
                    ns: h * NS_PER_S + l,
                });
            }
        }
    }

    /// Puts every pin and channel back after a reset cleared TSSDP and TSAUXC (`now_ns`: SYSTIM
    /// now; a periodic output resumes on its own grid).
    pub fn reapply<M: Mmio>(&mut self, regs: &Regs<M>, now_ns: u64) {
        for chan in 0..N_EXTTS {
            if self.extts[chan] {
                let _ = self.extts(regs, chan, true);
            }
        }
        for chan in 0..N_PEROUT {
            if let Some(p) = self.perout[chan] {
                let req = PerOutRequest {
                    start_ns: p.next_ns,
                    period_ns: p.half_ns * 2,
                };
                let _ = self.perout(regs, chan, Some(req), now_ns);
            }
        }
        regs.set(reg::TSIM, TsCause::TXTS | self.tsim());
    }
}

/// The pins as a daemon serves them: [`Pins`] behind the spin lock the IRQ thread takes, the
/// causes they enabled readable without it (the TX-stamp gate and the cause read need them on
/// every pass), and the channel's pin requests.
#[derive(Debug, Default)]
pub struct PinPort {
    pins: spin::Mutex<Pins>,
    causes: std::sync::atomic::AtomicU32,
}

impl PinPort {
    /// The TSICR causes the pins enabled (TSIM beside TXTS).
    pub fn causes(&self) -> TsCause {
        TsCause::from_bits_retain(self.causes.load(std::sync::atomic::Ordering::Relaxed))
    }

    /// One pin request of the channel (`GetPins`, `SetPin`, `ExtTs`, `PerOut`, `Pps`);
    /// `now_ns` reads SYSTIM (for a periodic output's start). Anything else is refused.
    pub fn request<M: Mmio>(
        &self,
        regs: &Regs<M>,
        req: DriverRequest,
        now_ns: impl FnOnce() -> u64,
    ) -> DriverReply {
        let mut p = self.pins.lock();
        let r = match req {
            DriverRequest::GetPins => {
                let pins = (0..N_PINS)
                    .map(|i| {
                        let a = p.assign[i];
                        PinConfig {
                            pin: i as u8,
                            func: a.func,
                            chan: a.chan,
                        }
                    })
                    .collect();
                return DriverReply::Pins(pins);
            }
            DriverRequest::SetPin { pin, func, chan } => p
                .set_func(regs, pin.into(), func, chan.into())
                .map(|()| DriverReply::Done),
            DriverRequest::ExtTs { chan, on } => {
                p.extts(regs, chan.into(), on).map(|()| DriverReply::Done)
            }
            DriverRequest::PerOut {
                chan,
                start_ns,
                period_ns,
            } => {
                let req = (period_ns > 0).then_some(PerOutRequest {
                    start_ns,
                    period_ns,
                });
                p.perout(regs, chan.into(), req, now_ns())
                    .map(|first_ns| DriverReply::PerOut { first_ns })
            }
            DriverRequest::Pps { on } => {
                p.pps(regs, on);
                Ok(DriverReply::Done)
            }
            _ => return DriverReply::Error(DriverError::Unsupported),
        };
        self.causes
            .store(p.tsim().bits(), std::sync::atomic::Ordering::Relaxed);
        r.unwrap_or_else(|e| {
            DriverReply::Error(match e {
                // Linux: -EBUSY when no pin carries the channel.
                PinError::NoPin => DriverError::Busy,
                PinError::Invalid | PinError::PeriodTooShort => DriverError::InvalidArgument,
            })
        })
    }

    /// The pins' share of one TSICR look (`tsicr`): the events, as the channel carries them
    /// (`sys_now` stamps a PPS with CLOCK_REALTIME).
    pub fn handle<M: Mmio>(
        &self,
        regs: &Regs<M>,
        tsicr: TsCause,
        sys_now: impl Fn() -> u64,
    ) -> Vec<DriverEvent> {
        if !tsicr.intersects(self.causes()) {
            return Vec::new();
        }
        let mut out = Vec::new();
        self.pins.lock().handle(regs, tsicr, |e| {
            out.push(match e {
                PinEvent::ExtTs { chan, ns } => DriverEvent::ExtTs(ExtTsEvent { chan, ns }),
                PinEvent::Pps => DriverEvent::Pps { sys_ns: sys_now() },
            })
        });
        out
    }
}
