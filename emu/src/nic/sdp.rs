//! The software-definable pins (SDP0–3) and their time-sync functions, shared by the i225/i226
//! and i210/i350 models (intel-timesync.md §2.3; how drivers use them: Linux igc_ptp.c and
//! igb_ptp.c, `igc_pin_extts`/`igc_pin_perout`, `igb_pin_extts`/`igb_pin_perout`, and the
//! TT/AUTT handling in `igc_tsync_interrupt`/`igb_tsync_interrupt`).
//!
//! A pin is a wire with an exact true instant for every edge: an input edge is scheduled with
//! its true time ([`Pins::schedule`]) and latched there, an output edge is computed at the true
//! instant SYSTIM reaches the programmed value ([`Phc::t_reaching_ns`]) and handed out
//! ([`Pins::take_edges`]) with that instant, so ground truth covers both. The engine is a
//! state machine advanced to the access's true time before every register access and poll
//! ([`Pins::advance`]); between accesses the PHC's law is fixed, so every instant is exact.
//!
//! - **Direction**: CTRL.SDP0/1_DIR, CTRL_EXT.SDP2/3_DIR (set = output).
//! - **Inputs**: an edge on the pin TSSDP.AUXn_SEL names, with AUXn_TS_SDP_EN and
//!   TSAUXC.EN_TSn set, latches SYSTIM into AUXSTMPLn/Hn, sets the TSAUXC.AUTTn status and
//!   raises TSICR.AUTTn. Every edge latches: the drivers program no polarity and Linux demands
//!   both edges under PTP_STRICT_FLAGS. While AUTTn is set the stamp is held and later edges
//!   are missed (counted); reading AUXSTMPHn frees it \[U: inferred from the drivers, which
//!   never write AUTTn and read L then H\]. The latch samples SYSTIM [`PinsConfig::latch_ns`]
//!   after the edge \[U: no datasheet figure at hand; 8 ns, one 125 MHz synchroniser cycle,
//!   chosen\].
//! - **Target time** n: with TSAUXC.EN_TTn, when SYSTIM reaches TRGTTIMn the pins TSSDP routes
//!   to TTn toggle, TSICR.TTn is raised and EN_TTn clears unless DIS_TS_CLEAR (igc_defines.h:
//!   "disable EN_TT0/1 auto clear"). A target already passed when it is enabled never fires
//!   (commit 84a192e46106: a past start means no output). A settime that jumps over an armed
//!   target fires it at the jump \[U\]. Timer-select bits (TRGTTIML b31:30) other than
//!   SYSTIM0 name timers the model does not have: such a target never fires \[U\].
//! - **Clock output** n: with TSAUXC.EN_CLKn the pins routed to FCn toggle every FREQOUTn ns of
//!   SYSTIM. With STn the first toggle is at TRGTTIMn (the i225 manual as cited by commit
//!   5e91c72e560c); without it the phase is wherever SYSTIM stood when it was enabled, one
//!   half period later \[U\] — the misalignment that commit fixed. A start already passed
//!   continues on the grid it defines (the hardware's catch-up is not modelled \[U\]).
//! - **SYS_WRAP**: while TSIM enables it, TSICR.SYS_WRAP is raised each time SYSTIM's
//!   seconds roll over (Linux uses it as the PPS event; once per second is inferred) \[U\].
//! - **Software pins**: an output pin no timer drives follows CTRL/CTRL_EXT's SDPn_DATA bit;
//!   reads of those bits return every pin's level (igb's 82580 PEROUT reads the level there;
//!   igc defines none of these bits: \[U\] for i225).
//! - TSAUXC.SAMP_AUTn (igb: "latch SYSTIM into AUXSTMP") samples SYSTIM into AUXSTMPn at the
//!   write and self-clears \[U\]; PLSG (pulse instead of toggle) is stored only \[U: used by no
//!   driver\].

use std::collections::VecDeque;
use std::time::Duration;

use intel_regs::e1000::{
    AUXSTMPH, AUXSTMPL, Ctrl, CtrlExt, FREQOUT, SdpOut, TRGTTIMH, TRGTTIML, TSSDP,
    TsCause as Cause, Tsauxc, Tssdp,
};

use crate::nic::tscause::TsCause;
use crate::phc::{NS_PER_S, Phc, TimeFormat};

#[cfg(test)]
mod tests;

/// SDPs on the modelled parts (IGC_N_SDP, IGB_N_SDP).
pub const SDP_PINS: usize = Tssdp::PINS;
/// External edges waiting for their instant, at most (more are dropped and counted).
pub const MAX_PENDING_EDGES: usize = 4096;

/// An edge on an SDP: the pin, its true (host CLOCK_MONOTONIC) instant, the level after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PinEdge {
    /// SDP number (0..[`SDP_PINS`]).
    pub pin: u8,
    /// True instant, host CLOCK_MONOTONIC ns (the models' time source).
    pub t: u64,
    /// The level after the edge (rising: true).
    pub high: bool,
}

/// Counters of the pin engine.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinStats {
    /// External edges that arrived on a pin.
    pub edges_in: u64,
    /// Of those, arriving on a pin configured as an output (contention; ignored).
    pub edges_in_on_output: u64,
    /// Edges dropped because [`MAX_PENDING_EDGES`] were waiting.
    pub edges_dropped: u64,
    /// Auxiliary stamps latched.
    pub stamps: u64,
    /// Edges a stamp missed because the previous one was not read yet.
    pub stamps_missed: u64,
    /// Target times reached.
    pub tt_fired: u64,
    /// Output edges produced.
    pub edges_out: u64,
}

/// Model parameters.
#[derive(Debug, Clone, Copy)]
pub struct PinsConfig {
    /// How long after an input edge SYSTIM is sampled, ns (module docs).
    pub latch_ns: u64,
}

impl Default for PinsConfig {
    fn default() -> Self {
        Self { latch_ns: 8 }
    }
}

/// What the engine touches outside itself: the clock, TSAUXC and the cause pair.
pub(crate) struct Ctx<'a> {
    pub phc: &'a Phc,
    pub tsauxc: &'a mut Tsauxc,
    pub cause: &'a mut TsCause,
}

/// One thing that happens at an instant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Event {
    Input,
    Target(usize),
    Clock(usize),
    Wrap,
}

/// A time-sync block holding pins: the register paths every model shares.
pub(crate) trait PinBlock {
    /// The pins and what they touch.
    fn split(&mut self) -> (&mut Pins, Ctx<'_>);

    /// Runs the pins up to true time `t` (edges, targets, clock outputs, SYS_WRAP).
    fn advance_pins(&mut self, t: u64) {
        let (p, mut cx) = self.split();
        p.advance(t, &mut cx);
    }

    /// The true instant the pins next have something to do.
    fn pins_due(&mut self) -> Option<u64> {
        let (p, cx) = self.split();
        p.next_due(&cx)
    }

    /// A TRGTTIML (`high` false) or TRGTTIMH write of target `n` at `t`.
    fn write_trgttim(&mut self, n: usize, high: bool, v: u32, t: u64) {
        self.advance_pins(t);
        let (p, cx) = self.split();
        p.write_trgttim(n, high, v, t, &cx);
    }

    /// The pins' part of a TSAUXC write at `t` (after the caller applied DISABLE0).
    fn pins_tsauxc(&mut self, v: Tsauxc, t: u64) {
        let (p, mut cx) = self.split();
        p.write_tsauxc(v, t, &mut cx);
    }

    /// A read of a pin register with its side effect (AUXSTMPHn frees its stamp), or `None`
    /// for any other offset.
    fn read_pin_reg(&mut self, offset: u32) -> Option<u32> {
        let (p, cx) = self.split();
        match sdp_channel(offset, &AUXSTMPH) {
            Some(n) => Some(p.read_auxstmph(n, cx.tsauxc)),
            None => p.peek(offset),
        }
    }

    /// A write of a pin register at `t` (TSSDP, TRGTTIML/H, FREQOUT; AUXSTMPL/H are the
    /// hardware's \[U: read-only\]); false for any other offset.
    fn write_pin_reg(&mut self, offset: u32, v: u32, t: u64) -> bool {
        let is = |regs: &[u32; 2]| sdp_channel(offset, regs);
        if offset == TSSDP {
            self.advance_pins(t);
            self.split().0.tssdp = Tssdp::from_bits_retain(v);
        } else if let Some(n) = is(&TRGTTIML) {
            self.write_trgttim(n, false, v, t);
        } else if let Some(n) = is(&TRGTTIMH) {
            self.write_trgttim(n, true, v, t);
        } else if let Some(n) = is(&FREQOUT) {
            self.split().0.freqout[n] = v;
        } else if is(&AUXSTMPL).is_none() && is(&AUXSTMPH).is_none() {
            return false;
        }
        true
    }
}

/// The pin state. See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Pins {
    pub(crate) cfg: PinsConfig,
    pub(crate) tssdp: Tssdp,
    trgttiml: [u32; 2],
    trgttimh: [u32; 2],
    pub(crate) freqout: [u32; 2],
    /// AUXSTMPLn/Hn.
    aux: [(u32, u32); 2],
    level: [bool; SDP_PINS],
    /// From CTRL/CTRL_EXT: direction (true = output).
    out_dir: [bool; SDP_PINS],
    /// Target n fires when SYSTIM reaches it (it was ahead when it was programmed).
    tt_armed: [bool; 2],
    /// Clock output n's next toggle, SYSTIM ns.
    clk_next: [Option<u64>; 2],
    /// SYS_WRAP is raised while TSIM enables it.
    wrap_on: bool,
    /// External edges not yet reached, in time order.
    pending: VecDeque<PinEdge>,
    /// Output edges produced, for the host to take.
    out: Vec<PinEdge>,
    /// The instant the engine has been advanced to.
    t_done: u64,
    pub(crate) stats: PinStats,
}

impl Pins {
    pub(crate) fn new(cfg: PinsConfig, t: u64) -> Self {
        Self {
            cfg,
            tssdp: Tssdp::empty(),
            trgttiml: [0; 2],
            trgttimh: [0; 2],
            freqout: [0; 2],
            aux: [(0, 0); 2],
            level: [false; SDP_PINS],
            out_dir: [false; SDP_PINS],
            tt_armed: [false; 2],
            clk_next: [None; 2],
            wrap_on: false,
            pending: VecDeque::new(),
            out: Vec::new(),
            t_done: t,
            stats: PinStats::default(),
        }
    }

    /// An external edge on `edge.pin` at its true instant (in the past or the future).
    pub(crate) fn schedule(&mut self, edge: PinEdge) {
        if usize::from(edge.pin) >= SDP_PINS || self.pending.len() >= MAX_PENDING_EDGES {
            self.stats.edges_dropped += 1;
            return;
        }
        let at = self.pending.partition_point(|e| e.t <= edge.t);
        self.pending.insert(at, edge);
    }

    /// Output edges produced since the last call, in time order.
    pub(crate) fn take_edges(&mut self) -> Vec<PinEdge> {
        std::mem::take(&mut self.out)
    }

    /// Every pin's level now.
    pub(crate) fn levels(&self) -> [bool; SDP_PINS] {
        self.level
    }

    /// Runs everything due up to true time `t`, in time order.
    pub(crate) fn advance(&mut self, t: u64, cx: &mut Ctx) {
        while let Some((at, ev)) = self.next_event(cx) {
            if at > t {
                break;
            }
            self.t_done = self.t_done.max(at);
            self.apply(at, ev, cx);
        }
        self.t_done = self.t_done.max(t);
    }

    /// The true instant of the next thing due, if any is known.
    pub(crate) fn next_due(&self, cx: &Ctx) -> Option<u64> {
        self.events(cx).map(|(at, _)| at).min()
    }

    fn next_event(&self, cx: &Ctx) -> Option<(u64, Event)> {
        self.events(cx).min_by_key(|&(at, _)| at)
    }

    fn events<'a>(&'a self, cx: &'a Ctx) -> impl Iterator<Item = (u64, Event)> + 'a {
        let phc = cx.phc;
        let done = self.t_done;
        let input = self.pending.front().map(|e| (e.t.max(done), Event::Input));
        let targets = (0..2).filter_map(move |n| {
            // The enable first: this runs before every register access, and the instant costs
            // a 128-bit division.
            if !(cx.tsauxc.contains(Tsauxc::en_tt(n)) && self.tt_armed[n]) {
                return None;
            }
            let at = phc.t_reaching_ns(self.target_ns(n, phc.format())?)?;
            Some((at.max(done), Event::Target(n)))
        });
        let clocks = (0..2).filter_map(move |n| {
            if !cx.tsauxc.contains(Tsauxc::en_clk(n)) {
                return None;
            }
            let at = phc.t_reaching_ns(self.clk_next[n]?)?;
            Some((at.max(done), Event::Clock(n)))
        });
        let wrap = self.wrap_on.then(|| {
            let next = (phc.ns_at(done) / NS_PER_S + 1) * NS_PER_S;
            Some((phc.t_reaching_ns(next)?.max(done), Event::Wrap))
        });
        input
            .into_iter()
            .chain(targets)
            .chain(clocks)
            .chain(wrap.flatten())
    }

    fn apply(&mut self, at: u64, ev: Event, cx: &mut Ctx) {
        match ev {
            Event::Input => {
                if let Some(e) = self.pending.pop_front() {
                    self.input(e, cx);
                }
            }
            Event::Target(n) => {
                self.tt_armed[n] = false;
                if !cx.tsauxc.contains(Tsauxc::DIS_TS_CLEAR) {
                    *cx.tsauxc -= Tsauxc::en_tt(n);
                }
                cx.cause.raise(Cause::tt(n));
                self.stats.tt_fired += 1;
                self.toggle_routed(SdpOut::Tt(n), at);
            }
            Event::Clock(n) => {
                let half = u64::from(self.freqout[n]);
                self.clk_next[n] = self.clk_next[n].filter(|_| half > 0).map(|x| x + half);
                self.toggle_routed(SdpOut::Fc(n), at);
            }
            Event::Wrap => cx.cause.raise(Cause::SYS_WRAP),
        }
    }

    /// An external edge reaches its pin: the pin's level, and the stamps sampling it.
    fn input(&mut self, e: PinEdge, cx: &mut Ctx) {
        let pin = usize::from(e.pin);
        self.stats.edges_in += 1;
        if self.out_dir[pin] {
            self.stats.edges_in_on_output += 1;
            return;
        }
        self.level[pin] = e.high;
        for n in 0..2 {
            if !cx.tsauxc.contains(Tsauxc::en_ts(n)) || self.tssdp.aux_pin(n) != Some(pin) {
                continue;
            }
            if cx.tsauxc.contains(Tsauxc::autt(n)) {
                self.stats.stamps_missed += 1;
                continue;
            }
            self.aux[n] = split_raw(cx.phc, e.t + self.cfg.latch_ns);
            *cx.tsauxc |= Tsauxc::autt(n);
            cx.cause.raise(Cause::autt(n));
            self.stats.stamps += 1;
        }
    }

    /// Toggles every output pin TSSDP routes to `src`, at true instant `at`.
    fn toggle_routed(&mut self, src: SdpOut, at: u64) {
        for pin in 0..SDP_PINS {
            if self.out_dir[pin] && self.tssdp.out(pin) == Some(src) {
                self.set_level(pin, !self.level[pin], at);
            }
        }
    }

    fn set_level(&mut self, pin: usize, high: bool, at: u64) {
        if self.level[pin] == high {
            return;
        }
        self.level[pin] = high;
        self.stats.edges_out += 1;
        self.out.push(PinEdge {
            pin: pin as u8,
            t: at,
            high,
        });
    }

    /// TRGTTIMn as a SYSTIM ns value in the family's format; `None` for a target on another
    /// timer (igc's select bits) or a part without pins.
    fn target_ns(&self, n: usize, format: TimeFormat) -> Option<u64> {
        let (l, h) = (self.trgttiml[n], u64::from(self.trgttimh[n]));
        match format {
            TimeFormat::Igc | TimeFormat::I210 => {
                (l >> 30 == 0).then(|| h * NS_PER_S + u64::from(l & 0x3FFF_FFFF))
            }
            TimeFormat::I350 => Some(((h & 0xFF) << 32) | u64::from(l)),
            TimeFormat::E82576 => None,
        }
    }

    // --- Register accesses (the caller advances the engine to `t` first) ---

    /// TRGTTIML/Hn write. With EN_TTn set the target re-arms against the new value.
    pub(crate) fn write_trgttim(&mut self, n: usize, high: bool, v: u32, t: u64, cx: &Ctx) {
        if high {
            self.trgttimh[n] = v;
        } else {
            self.trgttiml[n] = v;
        }
        if cx.tsauxc.contains(Tsauxc::en_tt(n)) {
            self.arm_target(n, t, cx.phc);
        }
    }

    /// A pin register's value without side effects, or `None` for any other offset.
    pub(crate) fn peek(&self, offset: u32) -> Option<u32> {
        let is = |regs: &[u32; 2]| sdp_channel(offset, regs);
        if offset == TSSDP {
            return Some(self.tssdp.bits());
        }
        if let Some(n) = is(&TRGTTIML) {
            return Some(self.trgttiml[n]);
        }
        if let Some(n) = is(&TRGTTIMH) {
            return Some(self.trgttimh[n]);
        }
        if let Some(n) = is(&FREQOUT) {
            return Some(self.freqout[n]);
        }
        if let Some(n) = is(&AUXSTMPL) {
            return Some(self.aux[n].0);
        }
        is(&AUXSTMPH).map(|n| self.aux[n].1)
    }

    /// AUXSTMPHn: frees the stamp for the next edge (clears TSAUXC.AUTTn) \[U\].
    fn read_auxstmph(&mut self, n: usize, tsauxc: &mut Tsauxc) -> u32 {
        *tsauxc -= Tsauxc::autt(n);
        self.aux[n].1
    }

    /// A TSAUXC write of `new` (the AUTT status bits keep their state: software cannot set
    /// or clear them \[U\]); starts and stops targets and clocks that changed. Returns the
    /// value TSAUXC now holds.
    pub(crate) fn write_tsauxc(&mut self, new: Tsauxc, t: u64, cx: &mut Ctx) -> Tsauxc {
        let status = Tsauxc::autt(0) | Tsauxc::autt(1);
        let old = *cx.tsauxc;
        let mut v = (new - status) | (old & status);
        for n in 0..2 {
            let samp = Tsauxc::samp_aut(n);
            if v.contains(samp) {
                self.aux[n] = split_raw(cx.phc, t);
                v -= samp;
            }
            if v.contains(Tsauxc::en_tt(n)) && !old.contains(Tsauxc::en_tt(n)) {
                self.arm_target(n, t, cx.phc);
            }
            let clk = Tsauxc::en_clk(n);
            if !v.contains(clk) {
                self.clk_next[n] = None;
            } else if !old.contains(clk) {
                self.start_clock(n, v.contains(Tsauxc::st(n)), t, cx.phc);
            }
        }
        *cx.tsauxc = v;
        v
    }

    fn arm_target(&mut self, n: usize, t: u64, phc: &Phc) {
        let now = phc.ns_at(t);
        self.tt_armed[n] = self.target_ns(n, phc.format()).is_some_and(|x| x > now);
    }

    fn start_clock(&mut self, n: usize, aligned: bool, t: u64, phc: &Phc) {
        let half = u64::from(self.freqout[n]);
        let now = phc.ns_at(t);
        self.clk_next[n] = match (half, aligned, self.target_ns(n, phc.format())) {
            (0, _, _) => None,
            (_, true, Some(start)) if start > now => Some(start),
            (_, true, Some(start)) => Some(start + (now - start).div_ceil(half).max(1) * half),
            (_, true, None) => None,
            (_, false, _) => Some(now + half),
        };
    }

    /// TSIM changed: SYS_WRAP is raised while it is enabled.
    pub(crate) fn set_tsim(&mut self, tsim: Cause) {
        self.wrap_on = tsim.contains(Cause::SYS_WRAP);
    }

    /// CTRL/CTRL_EXT as written: directions and software levels (a software output drives its
    /// level now, at `t`).
    pub(crate) fn write_ctrl(&mut self, ctrl: Ctrl, ext: CtrlExt, t: u64) {
        for pin in 0..SDP_PINS {
            let (dir, data) = match (Ctrl::sdp_dir(pin), CtrlExt::sdp_dir(pin)) {
                (Some(d), _) => (
                    ctrl.contains(d),
                    Ctrl::sdp_data(pin).is_some_and(|b| ctrl.contains(b)),
                ),
                (_, Some(d)) => (
                    ext.contains(d),
                    CtrlExt::sdp_data(pin).is_some_and(|b| ext.contains(b)),
                ),
                _ => continue,
            };
            self.out_dir[pin] = dir;
            if dir && self.tssdp.out(pin).is_none() {
                self.set_level(pin, data, t);
            }
        }
    }

    /// CTRL as read: its SDP0/1 level bits show the pins.
    pub(crate) fn ctrl_read(&self, v: Ctrl) -> Ctrl {
        let mut v = v - (Ctrl::SDP0_DATA | Ctrl::SDP1_DATA);
        for (pin, bit) in [(0, Ctrl::SDP0_DATA), (1, Ctrl::SDP1_DATA)] {
            v.set(bit, self.level[pin]);
        }
        v
    }

    /// CTRL_EXT as read: its SDP2/3 level bits show the pins.
    pub(crate) fn ctrl_ext_read(&self, v: CtrlExt) -> CtrlExt {
        let mut v = v - (CtrlExt::SDP2_DATA | CtrlExt::SDP3_DATA);
        for (pin, bit) in [(2, CtrlExt::SDP2_DATA), (3, CtrlExt::SDP3_DATA)] {
            v.set(bit, self.level[pin]);
        }
        v
    }
}

/// The pins' share of a model's poll at true time `t`: edges in from `link`, the pins run up to
/// `t`, their output edges out; how long until they next need the model. The caller raises the
/// interrupt their causes call for.
pub(crate) fn poll_pins(
    link: &mut Option<Box<dyn crate::pinwire::PinLink>>,
    block: &mut impl PinBlock,
    t: u64,
) -> Option<Duration> {
    link_in(link, block.split().0);
    block.advance_pins(t);
    link_out(link, block.split().0);
    let due = block.pins_due()?;
    Some(Duration::from_nanos(due.saturating_sub(t)))
}

/// Edges that came in on `link` go to their pins (before the pins run).
fn link_in(link: &mut Option<Box<dyn crate::pinwire::PinLink>>, pins: &mut Pins) {
    if let Some(l) = link {
        for e in l.recv() {
            pins.schedule(e);
        }
    }
}

/// Output edges the pins produced go out on `link` (kept for [`Pins::take_edges`] without one).
fn link_out(link: &mut Option<Box<dyn crate::pinwire::PinLink>>, pins: &mut Pins) {
    if let Some(l) = link {
        let out = pins.take_edges();
        if !out.is_empty() {
            l.send(&out);
        }
    }
}

/// Which channel's register `offset` is in a per-channel pair (`TRGTTIML`, `FREQOUT`, ...).
pub(crate) fn sdp_channel(offset: u32, regs: &[u32; 2]) -> Option<usize> {
    regs.iter().position(|&r| r == offset)
}

/// The earlier of two optional poll deadlines.
pub(crate) fn sooner(a: Option<Duration>, b: Option<Duration>) -> Option<Duration> {
    match (a, b) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// SYSTIM at instant `t` as the (low, high) register pair of its format.
fn split_raw(phc: &Phc, t: u64) -> (u32, u32) {
    let raw = phc.raw_at_instant(t);
    (raw as u32, (raw >> 32) as u32)
}
