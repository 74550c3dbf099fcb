//! What a NIC model's MAC/PHY is attached to (DESIGN.md §4 "Wire").
//!
//! A frame on the wire carries its departure instant; the receiving side computes its arrival
//! as departure + cable delay, so timestamps depend only on the models' true time, never on
//! when a host thread got round to moving the frame. All instants are true time of the
//! model's [`TimeSource`](crate::clock::TimeSource): in real-time mode that is absolute
//! CLOCK_MONOTONIC ([`HostClock`](crate::clock::HostClock)), which two processes on one host
//! share.
//!
//! - [`Loopback`]: frames come back to the sending NIC after the cable delay.
//! - [`Disconnected`]: no cable; the link is down and frames vanish.
//! - [`UnixDatagramWire`] (Linux): one end of a Unix datagram socket, for two model
//!   instances in different processes, or a model and a benchmark tool.
//!
//! The [`Cable`] holds the path's realism and faults: delay (per direction, so asymmetry),
//! seeded jitter and random loss, and deterministic loss injection (`drop_next`).
//!
//! Link negotiation: each end's PHY publishes a [`LinkOffer`] (its autonegotiation
//! advertisement, or the mode it is forced to) with [`WirePort::publish`], and reads the other
//! end's with [`WirePort::partner`]; both ends resolve the link from the same two offers, so
//! they agree. A port that carries no offers ([`Loopback`], a TAP bridge's end that never
//! publishes) has no partner offer: the PHY then treats its partner as an autonegotiating one
//! that advertises every mode.

use std::collections::VecDeque;
use std::time::Duration;

use crate::rng::SplitMix64;

#[cfg(target_os = "linux")]
pub(crate) mod unix;
#[cfg(target_os = "linux")]
pub use unix::{
    Datagram, HEADER_LEN, MAGIC, UnixDatagramWire, VERSION, decode_any, decode_datagram,
    encode_datagram, encode_hello,
};

/// A frame as it reaches a NIC's PHY.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WireFrame {
    /// The frame from the destination MAC on, without preamble or FCS.
    pub data: Vec<u8>,
    /// True time at which the frame's first bit reaches this NIC's PHY.
    pub arrival_ns: u64,
}

/// Counters a port keeps (all zero for ports that keep none).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct WireStats {
    /// Frames handed to [`WirePort::transmit`].
    pub sent: u64,
    /// Frames handed out by [`WirePort::poll_rx`].
    pub received: u64,
    /// Frames lost on the cable ([`Cable::drop_next`], [`Cable::loss`]).
    pub lost: u64,
    /// Datagrams that were not a valid wire frame (dropped).
    pub malformed: u64,
    /// Frames dropped because the arrival queue was full ([`MAX_QUEUED`]).
    pub overflow: u64,
    /// Frames that could not be sent (no peer yet, socket buffer full, peer gone).
    pub send_errors: u64,
    /// Datagrams from others than the wire's peer (dropped): on a bound end, a HELLO from a
    /// uid other than root or its own, or a frame from another address than the peer's.
    pub foreign: u64,
}

/// Copper link modes (speed and duplex), one bit each, in the order IEEE 802.3 Annex 28B.3
/// prefers them (a higher bit wins): 2.5GBASE-T full (802.3bz adds it above 1000BASE-T) >
/// 1000BASE-T full > half > 100BASE-TX full > half > 10BASE-T full > half.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LinkModes(u8);

impl LinkModes {
    /// No mode (a PHY that is powered down offers none).
    pub const NONE: Self = Self(0);
    /// 10BASE-T half duplex.
    pub const HALF_10: Self = Self(1 << 0);
    /// 10BASE-T full duplex.
    pub const FULL_10: Self = Self(1 << 1);
    /// 100BASE-TX half duplex.
    pub const HALF_100: Self = Self(1 << 2);
    /// 100BASE-TX full duplex.
    pub const FULL_100: Self = Self(1 << 3);
    /// 1000BASE-T half duplex.
    pub const HALF_1000: Self = Self(1 << 4);
    /// 1000BASE-T full duplex.
    pub const FULL_1000: Self = Self(1 << 5);
    /// 2.5GBASE-T (full duplex only).
    pub const FULL_2500: Self = Self(1 << 6);
    /// Every mode above.
    pub const ALL: Self = Self(0x7F);

    /// The set with these bits (`None` if a bit names no mode).
    pub const fn from_bits(bits: u8) -> Option<Self> {
        if bits & !Self::ALL.0 == 0 {
            Some(Self(bits))
        } else {
            None
        }
    }

    /// The bits (one per mode, see the constants).
    pub const fn bits(self) -> u8 {
        self.0
    }

    /// Whether every mode of `other` is in `self`.
    pub const fn contains(self, other: Self) -> bool {
        self.0 & other.0 == other.0
    }

    /// Whether the set is empty.
    pub const fn is_empty(self) -> bool {
        self.0 == 0
    }

    /// The preferred mode of the set (its highest bit), if any.
    pub const fn best(self) -> Option<Self> {
        if self.0 == 0 {
            None
        } else {
            Some(Self(1 << (7 - self.0.leading_zeros())))
        }
    }
}

impl std::ops::BitOr for LinkModes {
    type Output = Self;
    fn bitor(self, rhs: Self) -> Self {
        Self(self.0 | rhs.0)
    }
}

impl std::ops::BitAnd for LinkModes {
    type Output = Self;
    fn bitand(self, rhs: Self) -> Self {
        Self(self.0 & rhs.0)
    }
}

/// What one end of a cable offers its link partner: its PHY's autonegotiation advertisement
/// (IEEE 802.3 clause 28 base page, clause 40 1000BASE-T and clause 126 MultiGBASE-T pages),
/// or the one mode it is forced to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct LinkOffer {
    /// Autonegotiating (`modes` is the advertisement) or forced (`modes` is the one mode).
    pub autoneg: bool,
    /// The modes advertised, or the forced mode; empty: no link (PHY powered down).
    pub modes: LinkModes,
    /// PAUSE (b0) and ASM_DIR (b1) advertised (IEEE 802.3 28.2.1.2.3).
    pub pause: u8,
    /// Negotiations this end started (restart, reset, reconfiguration), wrapping: a new value
    /// tells the partner the link went down and came back.
    pub generation: u16,
}

impl LinkOffer {
    /// Bytes of [`to_bytes`](Self::to_bytes).
    pub const LEN: usize = 4;
    const AUTONEG: u8 = 1 << 0;
    const PAUSE_SHIFT: u8 = 1;
    const PAUSE_MASK: u8 = 0b11;

    /// Encoded: modes, flags (b0 autoneg, b2:1 pause), generation (u16 little-endian).
    pub fn to_bytes(self) -> [u8; Self::LEN] {
        let flags = (u8::from(self.autoneg) * Self::AUTONEG)
            | ((self.pause & Self::PAUSE_MASK) << Self::PAUSE_SHIFT);
        let g = self.generation.to_le_bytes();
        [self.modes.bits(), flags, g[0], g[1]]
    }

    /// Decodes [`to_bytes`](Self::to_bytes)' form; `None` for another length, an unknown mode
    /// bit or an unknown flag.
    pub fn from_bytes(b: &[u8]) -> Option<Self> {
        let &[modes, flags, g0, g1] = b else {
            return None;
        };
        let known = Self::AUTONEG | Self::PAUSE_MASK << Self::PAUSE_SHIFT;
        if flags & !known != 0 {
            return None;
        }
        Some(Self {
            autoneg: flags & Self::AUTONEG != 0,
            modes: LinkModes::from_bits(modes)?,
            pause: (flags >> Self::PAUSE_SHIFT) & Self::PAUSE_MASK,
            generation: u16::from_le_bytes([g0, g1]),
        })
    }
}

/// A NIC's attachment to the wire.
///
/// The model calls [`transmit`](Self::transmit) when a frame leaves its MAC and
/// [`poll_rx`](Self::poll_rx) from its `poll` to collect frames whose arrival instant has
/// come. Implementations must never panic on any input.
pub trait WirePort: Send {
    /// A frame leaves this NIC; its first bit is on the wire at `departure_ns`.
    fn transmit(&mut self, frame: &[u8], departure_ns: u64);
    /// The earliest frame that has arrived by `now_ns` (arrival ≤ now), if any.
    fn poll_rx(&mut self, now_ns: u64) -> Option<WireFrame>;
    /// Arrival instant of the earliest frame already known to the port. Frames a peer process
    /// has sent but the port has not read yet are not known: see
    /// [`poll_interval`](Self::poll_interval).
    fn next_arrival(&self) -> Option<u64>;
    /// Whether a link partner is there (STATUS.LU needs it).
    fn link_up(&self) -> bool {
        true
    }
    /// For ports fed from outside the model (a socket): how often the model should call
    /// [`poll_rx`](Self::poll_rx) even with nothing scheduled. `None`: frames only appear
    /// through this port's own `transmit` (or a test), so [`next_arrival`](Self::next_arrival)
    /// is enough.
    fn poll_interval(&self) -> Option<Duration> {
        None
    }
    /// The cable towards this port, for fault injection; `None` if the port has none.
    fn cable_mut(&mut self) -> Option<&mut Cable> {
        None
    }
    /// The port's counters.
    fn stats(&self) -> WireStats {
        WireStats::default()
    }
    /// This end's PHY offers `offer` to the partner (called when it changes). Ports that
    /// carry no offers drop it.
    fn publish(&mut self, _offer: LinkOffer) {}
    /// The partner's last published offer; `None` if it published none (or the port carries
    /// none): the PHY treats such a partner as advertising every mode.
    fn partner(&self) -> Option<LinkOffer> {
        None
    }
}

/// The physical path a frame takes to reach a port: a fixed delay, jitter and loss.
///
/// A cable belongs to the *receiving* end: a port applies its own cable to every frame it
/// receives ([`Loopback`] to the frames it returns). The two directions of a link are
/// therefore two independent cables, and an asymmetric path needs no extra field: give the
/// two ends different [`delay_ns`](Self::delay_ns) (e.g. `igcd --cable-delay-ns` per process),
/// and PTP's mean-path-delay sees half the difference as an offset, as on real links.
///
/// Randomness (jitter, [`loss`](Self::loss)) comes from a [`SplitMix64`] seeded by
/// [`with_seed`](Self::with_seed) (default seed 0): the same seed and the same departures give
/// the same arrivals and losses.
#[derive(Debug, Clone, PartialEq)]
pub struct Cable {
    /// Propagation delay, ns (about 5 ns per metre of copper).
    pub delay_ns: u64,
    /// Packet delay variation, ns: each frame's arrival is moved by a uniform draw from
    /// −jitter..=+jitter (integer ns), but never before its departure. Frames closer together
    /// than twice the jitter may swap places (the arrival queue orders by arrival).
    pub jitter_ns: u64,
    /// Probability that a frame is lost, drawn per frame; in addition to [`Self::drop_next`].
    /// Values ≤ 0 (or NaN) lose nothing, ≥ 1 lose everything.
    pub loss: f64,
    /// Frames still to be lost ([`Cable::drop_next`]).
    drop_pending: u64,
    rng: SplitMix64,
}

impl Cable {
    /// Delay of the default cable: ten metres.
    pub const DEFAULT_DELAY_NS: u64 = 50;

    /// A cable with `delay_ns` propagation delay, no jitter and no loss.
    pub fn new(delay_ns: u64) -> Self {
        Self {
            delay_ns,
            jitter_ns: 0,
            loss: 0.0,
            drop_pending: 0,
            rng: SplitMix64::stream(0, RNG_STREAM),
        }
    }

    /// Sets the jitter (uniform ±`jitter_ns`, see [`Self::jitter_ns`]); builder style.
    pub fn with_jitter(mut self, jitter_ns: u64) -> Self {
        self.jitter_ns = jitter_ns;
        self
    }

    /// Sets the random loss probability per frame (see [`Self::loss`]); builder style.
    pub fn with_loss(mut self, loss: f64) -> Self {
        self.loss = loss;
        self
    }

    /// Reseeds the cable's PRNG (jitter and loss draws restart from `seed`); builder style.
    pub fn with_seed(mut self, seed: u64) -> Self {
        self.rng = SplitMix64::stream(seed, RNG_STREAM);
        self
    }

    /// Loses the next `n` frames that take this cable (deterministic loss injection; adds to
    /// any loss still pending).
    pub fn drop_next(&mut self, n: u64) {
        self.drop_pending = self.drop_pending.saturating_add(n);
    }

    /// Frames still to be lost.
    pub fn drops_pending(&self) -> u64 {
        self.drop_pending
    }

    /// Carries one frame that departed at `departure_ns`: its arrival instant, or `None` if
    /// it is lost (an injected [`drop_next`](Self::drop_next) first, then the random
    /// [`loss`](Self::loss)). Arrival = departure + delay ± jitter, never before departure.
    pub fn carry(&mut self, departure_ns: u64) -> Option<u64> {
        if self.drop_pending > 0 {
            self.drop_pending -= 1;
            return None;
        }
        if self.loss > 0.0 && self.rng.chance(self.loss) {
            return None;
        }
        let nominal = departure_ns.saturating_add(self.delay_ns);
        if self.jitter_ns == 0 {
            return Some(nominal);
        }
        let j = self.rng.symmetric(self.jitter_ns);
        let arrival = if j >= 0 {
            nominal.saturating_add(j.unsigned_abs())
        } else {
            nominal.saturating_sub(j.unsigned_abs())
        };
        Some(arrival.max(departure_ns))
    }
}

/// [`SplitMix64::stream`] id of a cable's draws (distinct from the NIC models' streams, so one
/// seed can feed both).
const RNG_STREAM: u64 = 0xCAB1E;

impl Default for Cable {
    fn default() -> Self {
        Self::new(Self::DEFAULT_DELAY_NS)
    }
}

/// Frames a port holds before dropping new ones: bounds memory when nobody polls.
pub const MAX_QUEUED: usize = 4096;

/// Frames in flight towards a port, ordered by arrival (equal arrivals keep their order).
#[derive(Debug, Clone, Default)]
pub(crate) struct ArrivalQueue {
    frames: VecDeque<WireFrame>,
}

impl ArrivalQueue {
    /// Queues a frame; false (frame dropped) when [`MAX_QUEUED`] frames are waiting.
    pub(crate) fn push(&mut self, frame: WireFrame) -> bool {
        if self.frames.len() >= MAX_QUEUED {
            return false;
        }
        // Usually in order already: scan from the back.
        let pos = self
            .frames
            .iter()
            .rposition(|f| f.arrival_ns <= frame.arrival_ns)
            .map_or(0, |i| i + 1);
        self.frames.insert(pos, frame);
        true
    }

    pub(crate) fn pop_due(&mut self, now_ns: u64) -> Option<WireFrame> {
        if self.frames.front()?.arrival_ns <= now_ns {
            self.frames.pop_front()
        } else {
            None
        }
    }

    pub(crate) fn next_arrival(&self) -> Option<u64> {
        self.frames.front().map(|f| f.arrival_ns)
    }

    pub(crate) fn len(&self) -> usize {
        self.frames.len()
    }
}

/// Frames come back to the sending NIC after the cable delay (a loopback plug).
#[derive(Debug, Clone, Default)]
pub struct Loopback {
    cable: Cable,
    queue: ArrivalQueue,
    stats: WireStats,
}

impl Loopback {
    /// A loopback plug whose frames return `delay_ns` after departure.
    pub fn new(delay_ns: u64) -> Self {
        Self {
            cable: Cable::new(delay_ns),
            ..Self::default()
        }
    }

    /// Replaces the cable (builder style).
    pub fn with_cable(mut self, cable: Cable) -> Self {
        self.cable = cable;
        self
    }

    /// The cable (delay, jitter, loss, loss injection).
    pub fn cable(&mut self) -> &mut Cable {
        &mut self.cable
    }

    /// Frames in flight.
    pub fn in_flight(&self) -> usize {
        self.queue.len()
    }
}

impl WirePort for Loopback {
    fn transmit(&mut self, frame: &[u8], departure_ns: u64) {
        self.stats.sent += 1;
        let Some(arrival_ns) = self.cable.carry(departure_ns) else {
            self.stats.lost += 1;
            return;
        };
        let queued = self.queue.push(WireFrame {
            data: frame.to_vec(),
            arrival_ns,
        });
        if !queued {
            self.stats.overflow += 1;
        }
    }

    fn poll_rx(&mut self, now_ns: u64) -> Option<WireFrame> {
        let f = self.queue.pop_due(now_ns)?;
        self.stats.received += 1;
        Some(f)
    }

    fn next_arrival(&self) -> Option<u64> {
        self.queue.next_arrival()
    }

    fn cable_mut(&mut self) -> Option<&mut Cable> {
        Some(&mut self.cable)
    }

    fn stats(&self) -> WireStats {
        self.stats
    }
}

/// No cable: the link partner is missing, so the link stays down and anything transmitted
/// vanishes.
#[derive(Debug, Clone, Copy, Default)]
pub struct Disconnected {
    sent: u64,
}

impl WirePort for Disconnected {
    fn transmit(&mut self, _frame: &[u8], _departure_ns: u64) {
        self.sent += 1;
    }

    fn poll_rx(&mut self, _now_ns: u64) -> Option<WireFrame> {
        None
    }

    fn next_arrival(&self) -> Option<u64> {
        None
    }

    fn link_up(&self) -> bool {
        false
    }

    fn stats(&self) -> WireStats {
        WireStats {
            sent: self.sent,
            ..WireStats::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn loopback_returns_frames_at_departure_plus_delay_in_order() {
        let mut l = Loopback::new(100);
        l.transmit(b"second", 2_000);
        l.transmit(b"first", 1_000);
        assert_eq!(l.next_arrival(), Some(1_100));
        assert_eq!(l.poll_rx(1_099), None);
        let f = l.poll_rx(5_000).unwrap();
        assert_eq!((f.data.as_slice(), f.arrival_ns), (&b"first"[..], 1_100));
        let f = l.poll_rx(5_000).unwrap();
        assert_eq!((f.data.as_slice(), f.arrival_ns), (&b"second"[..], 2_100));
        assert_eq!(l.poll_rx(u64::MAX), None);
        assert!(l.link_up());
    }

    #[test]
    fn cable_loss_is_deterministic() {
        let mut l = Loopback::new(0);
        l.cable_mut().unwrap().drop_next(2);
        for i in 0..4u8 {
            l.transmit(&[i], 10 + i as u64);
        }
        let got: Vec<u8> = std::iter::from_fn(|| l.poll_rx(100))
            .map(|f| f.data[0])
            .collect();
        assert_eq!(got, [2, 3]);
        let s = l.stats();
        assert_eq!((s.sent, s.lost, s.received), (4, 2, 2));
    }

    /// Arrivals (or `None` for a lost frame) of `n` frames departing 10 µs apart.
    fn carry_many(mut cable: Cable, n: u64) -> Vec<Option<u64>> {
        (0..n).map(|i| cable.carry(i * 10_000)).collect()
    }

    #[test]
    fn cable_jitter_stays_within_bounds_and_is_reproducible() {
        let cable = || Cable::new(100).with_jitter(30).with_seed(42);
        let got = carry_many(cable(), 10_000);
        let mut offsets = Vec::new();
        for (i, a) in got.iter().enumerate() {
            let off = a.expect("no loss configured") as i64 - i as i64 * 10_000 - 100;
            assert!((-30..=30).contains(&off), "frame {i}: jitter {off}");
            offsets.push(off);
        }
        assert!(offsets.contains(&-30) && offsets.contains(&30) && offsets.contains(&0));
        let mean = offsets.iter().sum::<i64>() as f64 / offsets.len() as f64;
        assert!(mean.abs() < 1.0, "mean jitter {mean}");
        assert_eq!(carry_many(cable(), 10_000), got, "same seed, same arrivals");
        let other = carry_many(Cable::new(100).with_jitter(30).with_seed(43), 10_000);
        assert_ne!(other, got, "another seed, other arrivals");
        // No jitter: exact, whatever the seed.
        let exact = carry_many(Cable::new(100).with_seed(42), 3);
        assert_eq!(exact, [Some(100), Some(10_100), Some(20_100)]);
    }

    #[test]
    fn cable_jitter_never_makes_arrival_precede_departure() {
        let mut c = Cable::new(10).with_jitter(1_000).with_seed(1);
        let mut clamped = 0;
        for i in 0..10_000u64 {
            let dep = i * 7;
            let a = c.carry(dep).unwrap();
            assert!(a >= dep, "arrival {a} before departure {dep}");
            assert!(a <= dep + 1_010);
            clamped += u64::from(a == dep);
        }
        assert!(clamped > 4_000, "most draws below −10 ns clamp: {clamped}");
        // At the ends of time.
        assert_eq!(c.carry(0).map(|a| a <= 1_010), Some(true));
        assert_eq!(c.carry(u64::MAX), Some(u64::MAX));
    }

    #[test]
    fn cable_random_loss_rate_is_close_to_p_and_reproducible() {
        for p in [0.01, 0.1, 0.5] {
            let run = |seed| carry_many(Cable::new(50).with_loss(p).with_seed(seed), 10_000);
            let got = run(7);
            let lost = got.iter().filter(|a| a.is_none()).count() as f64;
            let rate = lost / 10_000.0;
            // Within 4 standard deviations of a binomial(10 000, p): ±1.2 points at p = 0.1.
            let sigma = (p * (1.0 - p) / 10_000.0).sqrt();
            assert!((rate - p).abs() < 4.0 * sigma, "p = {p}: loss rate {rate}");
            assert_eq!(run(7), got, "same seed, same losses");
            assert_ne!(run(8), got, "another seed, other losses");
            // Survivors arrive exactly (no jitter configured).
            for (i, a) in got.iter().enumerate() {
                assert!(a.is_none_or(|a| a == i as u64 * 10_000 + 50));
            }
        }
        assert!(
            carry_many(Cable::new(0).with_loss(0.0), 1000)
                .iter()
                .all(Option::is_some)
        );
    }

    #[test]
    fn random_loss_adds_to_injected_loss_and_is_counted() {
        let mut l = Loopback::new(0).with_cable(Cable::new(5).with_loss(0.25).with_seed(3));
        l.cable().drop_next(10);
        for i in 0..10_000u64 {
            l.transmit(&[0], i);
            while l.poll_rx(u64::MAX).is_some() {}
        }
        let s = l.stats();
        assert_eq!(s.sent, 10_000);
        assert_eq!(s.lost + s.received, 10_000);
        // 10 injected, then ~25 % of the other 9 990.
        let random = (s.lost - 10) as f64 / 9_990.0;
        assert!((random - 0.25).abs() < 0.02, "random loss rate {random}");
    }

    #[test]
    fn queue_is_bounded() {
        let mut l = Loopback::new(0);
        for _ in 0..MAX_QUEUED + 3 {
            l.transmit(&[0], 0);
        }
        assert_eq!(l.in_flight(), MAX_QUEUED);
        assert_eq!(l.stats().overflow, 3);
    }

    #[test]
    fn link_modes_order_and_offer_encoding() {
        let m = LinkModes::HALF_100 | LinkModes::FULL_10 | LinkModes::HALF_10;
        assert_eq!(
            m.best(),
            Some(LinkModes::HALF_100),
            "100 half beats 10 full"
        );
        assert_eq!(LinkModes::ALL.best(), Some(LinkModes::FULL_2500));
        assert_eq!(LinkModes::NONE.best(), None);
        assert_eq!(LinkModes::from_bits(0x80), None);
        let o = LinkOffer {
            autoneg: true,
            modes: LinkModes::FULL_1000 | LinkModes::FULL_100,
            pause: 0b10,
            generation: 0x1234,
        };
        assert_eq!(o.to_bytes(), [0x28, 0b101, 0x34, 0x12]);
        assert_eq!(LinkOffer::from_bytes(&o.to_bytes()), Some(o));
        assert_eq!(
            LinkOffer::from_bytes(&[0x28, 0b1000, 0, 0]),
            None,
            "unknown flag"
        );
        assert_eq!(LinkOffer::from_bytes(&[0x28, 1, 0]), None, "short");
        // Ports without offers drop them and report no partner.
        let mut l = Loopback::new(0);
        l.publish(o);
        assert_eq!(l.partner(), None);
    }

    #[test]
    fn disconnected_is_link_down_and_silent() {
        let mut d = Disconnected::default();
        d.transmit(&[1, 2, 3], 5);
        assert!(!d.link_up());
        assert_eq!(d.poll_rx(u64::MAX), None);
        assert_eq!(d.next_arrival(), None);
        assert_eq!(d.stats().sent, 1);
    }
}
