//! Shared-memory ring channels with signal suppression (issue 16): the hot path between a
//! driver and ptpd without a syscall per message.
//!
//! A region (memfd on Linux, the driver's own memory served by its scheme on Redox) holds two single-producer /
//! single-consumer rings, one per direction, of fixed-size slots carrying one encoded message
//! each (the `wire` encoding; a message larger than a slot is refused, never cut). The two
//! sides are A (the creator, which offers the region) and B (which attaches).
//!
//! Signal suppression: a consumer that finds its ring empty announces that it will sleep
//! (`consumer_sleeping`), re-checks the ring, and only then waits on its bell; a producer that
//! publishes a message signals the peer's bell only when that flag is set (and clears it). Both
//! sides use a SeqCst fence between their store and their load (store head / load flag against
//! store flag / load head), so at least one of them sees the other: either the consumer finds
//! the message on its re-check, or the producer finds the flag and signals — no lost wake-up.
//! A consumer with work never makes a syscall. The same handshake runs the other way for a
//! producer waiting for space in a full ring (`producer_waiting`).
//!
//! Bells: two per side (one for "data in your ring", one for "space in your ring"), so a thread
//! waiting to send and one waiting to receive on the same endpoint never take each other's
//! signal. Eventfds on Linux, polled together with the control socket the region was
//! passed over, whose hang-up tells a waiter that the peer process is gone; on Redox a counter
//! word per bell in the region plus a pipe the client passes to the driver with `sendfd`,
//! waited in bounded slices that re-check the peer's liveness (`redox.rs`: why not a futex).
//! Every wait is bounded by the caller's timeout; a clean close sets the side's `closed` word.
//!
//! [`RingEndpoint`] implements [`Transport`](crate::transport::Transport), so a `Channel` over a
//! ring pair is used exactly like one over a socket. A thread that waits on other descriptors
//! too (a driver's main loop) sleeps on the ring with [`RingEndpoint::prepare_sleep`], a poll of
//! [`RingEndpoint::readable_fd`] beside its own descriptors, and [`RingEndpoint::end_sleep`]:
//! the same announce-then-recheck handshake. The driver channel uses rings through
//! `transport::DriverTransport` (issue 16).

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::transport::{Transport, TransportError};

mod layout;
mod map;
mod probe;
// Used by the Redox driver's pool (and host-tested everywhere).
#[cfg_attr(not(target_os = "redox"), allow(dead_code))]
mod segment;
pub use layout::{
    CONTROL_LEN, Geometry, MAGIC, MAX_REGION, MAX_SLOT, MAX_SLOTS, MIN_SLOT, VERSION,
};
use layout::{Control, RingView};
use map::Mapping;
#[doc(hidden)]
pub use probe::{RegionProbe, probe_region};
#[cfg_attr(not(target_os = "redox"), allow(unused_imports))]
use segment::Segment;
pub use segment::{Lent, RingPool};

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::{accept_ring, offer_ring};

#[cfg(target_os = "redox")]
mod redox;
#[cfg(target_os = "redox")]
pub use redox::{attach_ring_mapped, create_ring_pool};

/// Why a ring operation failed.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum RingError {
    #[error("ring header magic {0:#018x} is not a ring's")]
    BadMagic(u64),
    #[error("ring layout version {0} (this build speaks {VERSION})")]
    BadVersion(u32),
    #[error(
        "ring geometry {slot_size} B x {slot_count} slots out of bounds \
         (slot {MIN_SLOT}..={MAX_SLOT} B, a multiple of 8; count a power of two 2..={MAX_SLOTS})"
    )]
    BadGeometry { slot_size: u32, slot_count: u32 },
    #[error("ring region of {have} bytes is smaller than its header says ({need})")]
    RegionTooSmall { have: usize, need: usize },
    /// Nothing was sent.
    #[error("message of {len} bytes exceeds the ring's slot payload of {max}")]
    TooLarge { len: usize, max: usize },
    /// The ring is full (back-pressure); nothing was sent.
    #[error("ring full")]
    Full,
    /// Every segment of a driver's [`RingPool`] serves a connection (or its client has not
    /// let go of it yet).
    #[error("all {segments} ring segments are in use")]
    NoFreeSegment { segments: usize },
    #[error("timed out")]
    Timeout,
    /// The peer closed its end or its process is gone; or this end was shut down.
    #[error("ring peer gone")]
    PeerGone,
    /// The peer wrote inconsistent indices or slot lengths.
    #[error("ring corrupt: {0}")]
    Corrupt(&'static str),
    /// The region or setup message the peer passed is not acceptable.
    #[error("ring setup: {0}")]
    Setup(String),
    /// The first message on the control connection was not a ring offer (e.g. a driver that
    /// refused the connection and said why): its bytes, for the caller to decode.
    #[error("no ring offered: a {}-byte message came instead", .0.len())]
    NotOffered(Vec<u8>),
    #[error("{0}")]
    Io(String),
}

impl From<RingError> for TransportError {
    fn from(e: RingError) -> Self {
        match e {
            RingError::TooLarge { len, .. } => TransportError::TooLarge(len),
            RingError::Full | RingError::Timeout => TransportError::Timeout,
            RingError::PeerGone => TransportError::Disconnected,
            e => TransportError::Io(e.to_string()),
        }
    }
}

/// The tag of a ring offer on Redox: "map the handle this came on, this many bytes". The
/// segment is the driver's own memory, served by its scheme's `mmap_prep` to the handle it is
/// lent to and to no other: there is no name another process could open (issue 23: `shm`
/// segments, which any process may map writable, were the form before).
const MAPPED_OFFER_TAG: &[u8; 8] = b"PTPRINGM";

/// The control-channel message that offers a ring of `len` bytes mapped through the handle.
pub fn mapped_offer(len: usize) -> Vec<u8> {
    let mut m = MAPPED_OFFER_TAG.to_vec();
    m.extend_from_slice(&(len as u64).to_le_bytes());
    m
}

/// The region length of a mapped ring offer; `None` for any other message, or a length no
/// ring region can have (too short for the header, or above the largest region).
pub fn parse_mapped_offer(msg: &[u8]) -> Option<usize> {
    let rest = msg.strip_prefix(MAPPED_OFFER_TAG.as_slice())?;
    let len = u64::from_le_bytes(rest.try_into().ok()?);
    let len = usize::try_from(len).ok()?;
    layout::check_region_len(len).ok().map(|()| len)
}

/// Linux setup message: tag, layout version, region length (u64 LE); the region's memfd and
/// the bells ride along with it (`linux.rs`).
const SETUP_TAG: &[u8; 7] = b"PTPRING";
/// Bytes of a setup message.
pub const SETUP_LEN: usize = 16;

/// The setup message that offers a region of `len` bytes.
pub fn setup_message(len: usize) -> [u8; SETUP_LEN] {
    let mut msg = [0u8; SETUP_LEN];
    msg[..7].copy_from_slice(SETUP_TAG);
    msg[7] = layout::VERSION as u8;
    msg[8..].copy_from_slice(&(len as u64).to_le_bytes());
    msg
}

/// Decodes the first message on a ring's control connection: the region length the offer
/// announces (informational: the attacher maps the sealed memfd's own size), `NotOffered` with
/// the bytes for anything that is not an offer, `BadVersion` for another layout.
pub fn decode_setup(msg: &[u8]) -> Result<u64, RingError> {
    let Some((head, len)) = msg.split_first_chunk::<8>() else {
        return Err(RingError::NotOffered(msg.to_vec()));
    };
    let Ok(len) = <[u8; 8]>::try_from(len) else {
        return Err(RingError::NotOffered(msg.to_vec()));
    };
    if &head[..7] != SETUP_TAG {
        return Err(RingError::NotOffered(msg.to_vec()));
    }
    if u32::from(head[7]) != VERSION {
        return Err(RingError::BadVersion(head[7].into()));
    }
    Ok(u64::from_le_bytes(len))
}

/// How a region is made.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingConfig {
    pub geometry: Geometry,
    /// The busy-poll window ([`busy_poll_deadline`]): how long after its last message sent or
    /// received an endpoint keeps polling an empty ring before it announces sleep, so at a high
    /// rate the next message is picked up without a wake-up. Zero: pure blocking.
    pub busy_poll: Duration,
}

impl Default for RingConfig {
    /// 256 slots of 512 bytes per direction (a PTP event frame with its header fits; a bigger
    /// message gets `TooLarge`): 257 KiB in all.
    fn default() -> Self {
        RingConfig {
            geometry: Geometry {
                slot_size: 512,
                slot_count: 256,
            },
            busy_poll: Duration::from_micros(20),
        }
    }
}

/// The largest busy-poll window taken (`--busy-poll-us`): beyond a millisecond a poller costs
/// a core for nothing a sleep would not do as well.
pub const MAX_BUSY_POLL: Duration = Duration::from_millis(1);

/// Until when an endpoint whose last message went or came at `last_work_ns` polls an empty ring
/// at `now_ns`, with busy-poll `window_ns`: `None` (sleep at once) with no window or once the
/// window since that work has passed — an idle endpoint never spins, one at a high rate
/// always finds its next message while polling. Adaptive and bounded: the spin never outlasts
/// `window_ns` after the last work, whenever it starts.
pub fn busy_poll_deadline(last_work_ns: u64, window_ns: u64, now_ns: u64) -> Option<u64> {
    let end = last_work_ns.saturating_add(window_ns);
    (window_ns > 0 && now_ns < end).then_some(end)
}

/// What a wait on our bell ended with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Woken {
    Signal,
    Timeout,
}

/// Which of a side's two bells: a consumer sleeps on `Data`, a producer on a full ring on
/// `Space`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wake {
    Data = 0,
    Space = 1,
}

/// A side's doorbells: how it wakes its peer and waits to be woken.
pub(crate) trait Bell: Send + Sync {
    /// Rings the peer's bell `w` (its `wait(w, ..)` returns `Signal`).
    fn ring_peer(&self, w: Wake) -> Result<(), RingError>;
    /// Wakes all our own waiters (shutdown).
    fn ring_self(&self);
    /// Rings our own bell `w` (hands a wake-up on to another thread waiting on it).
    fn ring_own(&self, w: Wake);
    /// Waits for our bell `w` at most `timeout` (`None`: until rung or the peer dies). A dead
    /// peer is `Err(PeerGone)`.
    fn wait(&self, w: Wake, timeout: Option<Duration>) -> Result<Woken, RingError>;
    /// A descriptor that turns readable when our bell `w` rings, for a caller that waits on it
    /// together with other descriptors (`poll`); `None` where a bell is not a descriptor.
    fn readable_fd(&self, _w: Wake) -> Option<i32> {
        None
    }
    /// Consumes a pending signal on our bell `w` without waiting; `true` if there was one.
    fn clear(&self, _w: Wake) -> bool {
        false
    }
    /// Takes the doorbell descriptors the peer passed (Redox: [`DOORBELL_FDS`] pipe ends sent
    /// over the driver handle); refused where bells need none.
    fn adopt_fds(&self, _fds: &[usize]) -> Result<(), RingError> {
        Err(RingError::Setup("this bell takes no descriptors".into()))
    }
}

/// Descriptors a Redox client passes to the driver with its ring (see `redox.rs`): the read
/// ends of the driver's data and space doorbells, the write ends of the client's.
pub const DOORBELL_FDS: usize = 4;
/// The metadata word of that fd-passing call, so a driver tells it from anything else.
pub const DOORBELL_TAG: u64 = u64::from_le_bytes(*b"PTPBELL1");

/// Counters of one endpoint (its own actions; the peer keeps its own).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RingStats {
    pub sent: u64,
    pub received: u64,
    /// Signals this side sent to the peer (peer asleep on an empty ring or a full one).
    pub signals: u64,
    /// Waits on our bell (after announcing sleep and re-checking).
    pub sleeps: u64,
    /// Waits that ended by a signal (including a stale one left from an earlier handshake).
    pub wakeups: u64,
    /// Waits that ended by their timeout.
    pub wait_timeouts: u64,
    /// Sends that found the ring full.
    pub full_events: u64,
    /// Sends that gave up on a full ring when their timeout ran out: messages not delivered,
    /// counted here (never lost silently).
    pub full_drops: u64,
    /// Busy-polls that found a message within the window (a wake-up saved).
    pub busy_poll_hits: u64,
    /// Busy-polls that ran to the window's end and then slept (CPU spent for nothing).
    pub busy_poll_misses: u64,
}

#[derive(Default)]
struct Counters {
    sent: AtomicU64,
    received: AtomicU64,
    signals: AtomicU64,
    sleeps: AtomicU64,
    wakeups: AtomicU64,
    wait_timeouts: AtomicU64,
    full_events: AtomicU64,
    full_drops: AtomicU64,
    busy_poll_hits: AtomicU64,
    busy_poll_misses: AtomicU64,
}

fn duration_ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

fn bump(c: &AtomicU64) {
    c.fetch_add(1, Ordering::Relaxed);
}

/// One side of a ring pair: sends on one ring, receives from the other.
///
/// `send` and `recv` take `&self`; concurrent senders (or receivers) are serialised by a mutex
/// held only while a slot is copied, never across a wait. Several threads may send at once and
/// wait for space together (a woken sender hands the wake-up on: a driver's IRQ thread and its
/// main thread share one endpoint). Receiving is built for one thread (with two asleep in `recv`
/// at once, one signal may wake only one of them, and a second message then waits for the
/// other's timeout or the next signal).
pub struct RingEndpoint {
    // Field order: the views and bell point into `map`, which is dropped last.
    tx: RingView,
    rx: RingView,
    head: Mutex<u64>,
    tail: Mutex<u64>,
    /// Sending threads waiting for space (see `send_bytes`); held only to change the count
    /// together with the ring's `producer_waiting` flag, never across a wait.
    space_waiters: Mutex<u32>,
    side: usize,
    /// The busy-poll window, ns ([`busy_poll_deadline`]; settable while in use).
    busy_poll_ns: AtomicU64,
    /// When this endpoint last sent or received a message ([`crate::time::mono_ns`]).
    last_work_ns: AtomicU64,
    down: AtomicBool,
    /// The bell reported the peer process gone (no clean close): latched like `closed`.
    gone: AtomicBool,
    counters: Counters,
    /// The region's generation when this endpoint was made: another one means the region now
    /// serves another connection (a re-used Redox segment) and this endpoint is stale.
    generation: u64,
    bell: Box<dyn Bell>,
    /// Shared with the [`Segment`] a re-used region belongs to (the only other holder).
    map: Arc<Mapping>,
}

impl RingEndpoint {
    /// Wraps a mapped, validated region as side `side` (0 = A, 1 = B), at the generation its
    /// header holds now (a region made for one connection: the first).
    #[cfg(target_os = "linux")]
    fn new(
        map: Mapping,
        g: Geometry,
        side: usize,
        busy_poll: Duration,
        bell: Box<dyn Bell>,
    ) -> Self {
        let generation = layout::generation(map.control());
        Self::on_shared(Arc::new(map), g, generation, side, busy_poll, bell)
    }

    /// As [`Self::new`], for the connection of `generation` (the one whose header was checked),
    /// over a mapping a [`Segment`] may keep too.
    fn on_shared(
        map: Arc<Mapping>,
        g: Geometry,
        generation: u64,
        side: usize,
        busy_poll: Duration,
        bell: Box<dyn Bell>,
    ) -> Self {
        let ctl = map.control();
        let ring_len = g.slot_size as usize * g.slot_count as usize;
        // Safety: the region was checked to be at least `g.region_len()` bytes, so both slot
        // arrays lie inside it.
        let slots = |i: usize| unsafe { map.base().add(layout::CONTROL_LEN + i * ring_len) };
        let view = |i: usize| RingView {
            ctl: &ctl.rings[i],
            slots: slots(i),
            geom: g,
        };
        let (tx, rx) = (view(side), view(1 - side));
        ctl.pid.0[side].store(std::process::id(), Ordering::Relaxed);
        RingEndpoint {
            tx,
            rx,
            // A region is fresh when offered: both rings start at sequence 0.
            head: Mutex::new(0),
            tail: Mutex::new(0),
            space_waiters: Mutex::new(0),
            side,
            busy_poll_ns: AtomicU64::new(duration_ns(busy_poll)),
            last_work_ns: AtomicU64::new(0),
            down: AtomicBool::new(false),
            gone: AtomicBool::new(false),
            counters: Counters::default(),
            generation,
            bell,
            map,
        }
    }

    fn ctl(&self) -> &Control {
        self.map.control()
    }

    /// Sets the busy-poll window (clamped to [`MAX_BUSY_POLL`]); zero: pure blocking.
    pub fn set_busy_poll(&self, window: Duration) {
        let ns = duration_ns(window.min(MAX_BUSY_POLL));
        self.busy_poll_ns.store(ns, Ordering::Relaxed);
    }

    pub fn busy_poll(&self) -> Duration {
        Duration::from_nanos(self.busy_poll_ns.load(Ordering::Relaxed))
    }

    fn worked(&self) {
        if self.busy_poll_ns.load(Ordering::Relaxed) > 0 {
            self.last_work_ns
                .store(crate::time::mono_ns(), Ordering::Relaxed);
        }
    }

    /// The largest message a slot carries.
    pub fn max_message(&self) -> usize {
        self.tx.geom.max_payload()
    }

    pub fn geometry(&self) -> Geometry {
        self.tx.geom
    }

    pub fn stats(&self) -> RingStats {
        let c = &self.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        RingStats {
            sent: l(&c.sent),
            received: l(&c.received),
            signals: l(&c.signals),
            sleeps: l(&c.sleeps),
            wakeups: l(&c.wakeups),
            wait_timeouts: l(&c.wait_timeouts),
            full_events: l(&c.full_events),
            full_drops: l(&c.full_drops),
            busy_poll_hits: l(&c.busy_poll_hits),
            busy_poll_misses: l(&c.busy_poll_misses),
        }
    }

    /// The region was re-initialised for another connection: its indices are no longer ours.
    fn stale(&self) -> bool {
        layout::generation(self.ctl()) != self.generation
    }

    /// The peer closed or died, or the region was re-initialised for another connection.
    fn peer_closed(&self) -> bool {
        self.gone.load(Ordering::Acquire)
            || self.ctl().closed.0[1 - self.side].load(Ordering::Acquire) != 0
            || self.stale()
    }

    fn check_up(&self) -> Result<(), RingError> {
        if self.down.load(Ordering::Acquire) || self.peer_closed() {
            return Err(RingError::PeerGone);
        }
        Ok(())
    }

    fn signal_peer(&self, w: Wake) -> Result<(), RingError> {
        bump(&self.counters.signals);
        self.bell.ring_peer(w)
    }

    /// Sends without waiting: `Err(Full)` when the ring has no free slot (counted).
    pub fn try_send(&self, msg: &[u8]) -> Result<(), RingError> {
        self.check_up()?;
        let pushed = {
            let mut head = lock(&self.head);
            self.tx.try_push(&mut head, msg)?
        };
        if !pushed {
            bump(&self.counters.full_events);
            return Err(RingError::Full);
        }
        bump(&self.counters.sent);
        self.worked();
        if self.tx.take_consumer_sleeping() {
            self.signal_peer(Wake::Data)?;
        }
        Ok(())
    }

    /// Sends, waiting at most `timeout` for a free slot (`None`: until one frees or the peer
    /// goes). A full ring past the timeout is `Err(Timeout)`; nothing is dropped silently.
    pub fn send_bytes(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), RingError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            match self.try_send(msg) {
                Err(RingError::Full) => {}
                r => return r,
            }
            let left = remaining(deadline).inspect_err(|_| bump(&self.counters.full_drops))?;
            if !self.announce_space_wait() {
                self.end_space_wait(false);
                continue;
            }
            let r = self.sleep(Wake::Space, left);
            self.end_space_wait(true);
            r?;
        }
    }

    /// A sender about to wait for space: counts itself and announces the wait to the consumer
    /// (then re-checks); `false` when space freed meanwhile.
    fn announce_space_wait(&self) -> bool {
        let mut n = lock32(&self.space_waiters);
        *n += 1;
        let head = *lock(&self.head);
        self.tx.producer_may_sleep(head)
    }

    /// A sender done waiting. Several sending threads (a driver's IRQ thread and its main
    /// thread) may wait at once, but the consumer's release rings the space bell once and the
    /// first thread to wake consumes it: a thread that `slept` hands the wake-up on to the
    /// others, and the last one out withdraws the announcement (while another still waits, the
    /// consumer must keep signalling). Without this, a second waiter slept to its timeout.
    fn end_space_wait(&self, slept: bool) {
        let mut n = lock32(&self.space_waiters);
        *n = n.saturating_sub(1);
        if *n == 0 {
            self.tx.producer_awake();
        } else if slept {
            self.bell.ring_own(Wake::Space);
        }
    }

    /// Receives without waiting: `Ok(false)` when the ring is empty (and the peer is up).
    pub fn try_recv(&self, buf: &mut Vec<u8>) -> Result<bool, RingError> {
        // Stale: what is queued belongs to the next connection (and our tail is not its).
        if self.down.load(Ordering::Acquire) || self.stale() {
            return Err(RingError::PeerGone);
        }
        // Read before popping: a peer that closed after its last message has that message
        // delivered first.
        let closed = self.peer_closed();
        let got = {
            let mut tail = lock(&self.tail);
            self.rx.try_pop(&mut tail, buf)?
        };
        if got {
            bump(&self.counters.received);
            self.worked();
            if self.rx.take_producer_waiting() {
                self.signal_peer(Wake::Space)?;
            }
            return Ok(true);
        }
        if closed {
            return Err(RingError::PeerGone);
        }
        Ok(false)
    }

    /// Receives one message into `buf`, waiting at most `timeout` (`None`: until one comes or
    /// the peer goes). Spins `spin` polls, then announces sleep and waits on the bell.
    pub fn recv_bytes(
        &self,
        buf: &mut Vec<u8>,
        timeout: Option<Duration>,
    ) -> Result<(), RingError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if self.try_recv(buf)? {
                return Ok(());
            }
            if self.spin_for_data() {
                continue;
            }
            let left = remaining(deadline)?;
            let tail = *lock(&self.tail);
            if !self.rx.consumer_may_sleep(tail) || self.peer_closed() {
                self.rx.consumer_awake();
                continue;
            }
            let r = self.sleep(Wake::Data, left);
            self.rx.consumer_awake();
            match r {
                // Messages the peer left before dying are still delivered.
                Err(RingError::PeerGone) => {
                    return match self.try_recv(buf)? {
                        true => Ok(()),
                        false => Err(RingError::PeerGone),
                    };
                }
                r => r?,
            }
        }
    }

    /// For a thread that waits on the ring together with other descriptors (a daemon's main
    /// loop polling its sockets too): spins briefly, then announces sleep and re-checks the ring.
    /// `Ok(true)`: the caller may now wait on [`Self::readable_fd`] (with its other
    /// descriptors) and must call [`Self::end_sleep`] afterwards; `Ok(false)`: a message is
    /// already waiting (or the peer closed: the next `try_recv` says so), don't sleep. The same
    /// handshake as [`Self::recv_bytes`]: a message published after the announcement rings the
    /// bell, one published before it is seen by the re-check, so no wake-up is lost.
    pub fn prepare_sleep(&self) -> Result<bool, RingError> {
        if self.down.load(Ordering::Acquire) {
            return Err(RingError::PeerGone);
        }
        if self.spin_for_data() {
            return Ok(false);
        }
        let tail = *lock(&self.tail);
        if !self.rx.consumer_may_sleep(tail) || self.peer_closed() {
            self.rx.consumer_awake();
            return Ok(false);
        }
        bump(&self.counters.sleeps);
        Ok(true)
    }

    /// For a thread that watches the ring while another drains it (a Redox driver, whose main
    /// loop cannot sleep on the ring's doorbell): waits at most `timeout` (`None`: for ever) until a message
    /// is waiting or the peer has closed, without taking anything. `Ok(true)`: the next
    /// `try_recv` has something to say; `Ok(false)`: the timeout passed; `Err(PeerGone)`: this
    /// end is shut, stale, or the peer's process is gone. The same announce-then-recheck
    /// handshake as [`Self::recv_bytes`]; the drainer must not be receiving meanwhile (the
    /// sleep announcement would be withdrawn under the watcher).
    pub fn wait_readable(&self, timeout: Option<Duration>) -> Result<bool, RingError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        loop {
            if self.down.load(Ordering::Acquire) || self.stale() {
                return Err(RingError::PeerGone);
            }
            let tail = *lock(&self.tail);
            if !matches!(self.rx.pending(tail), Ok(0)) || self.peer_closed() {
                return Ok(true);
            }
            let Ok(left) = remaining(deadline) else {
                return Ok(false);
            };
            if !self.rx.consumer_may_sleep(tail) || self.peer_closed() {
                self.rx.consumer_awake();
                continue;
            }
            let r = self.sleep(Wake::Data, left);
            self.rx.consumer_awake();
            r?;
        }
    }

    /// Takes the doorbell descriptors the peer passed for this connection (Redox driver side:
    /// the pipe ends its client sent with `sendfd`); until then the bell only ticks its word and
    /// a waiter here sleeps in bounded slices.
    pub fn adopt_doorbells(&self, fds: &[usize]) -> Result<(), RingError> {
        self.bell.adopt_fds(fds)
    }

    /// The descriptor that turns readable when the peer signals data after
    /// [`Self::prepare_sleep`] (Linux: the data eventfd); `None` on Redox (its doorbells are pipes
    /// behind an event queue of the bell's own).
    pub fn readable_fd(&self) -> Option<i32> {
        self.bell.readable_fd(Wake::Data)
    }

    /// Ends a wait begun with [`Self::prepare_sleep`] (however it ended): withdraws the sleep
    /// announcement and consumes the signal if one came (counted as a wake-up). The caller
    /// watches the peer's liveness itself (e.g. the control socket's hang-up in the same poll).
    pub fn end_sleep(&self) -> bool {
        self.rx.consumer_awake();
        let signalled = self.bell.clear(Wake::Data);
        if signalled {
            bump(&self.counters.wakeups);
        }
        signalled
    }

    /// Busy-polls the receive ring within the window after the last work
    /// ([`busy_poll_deadline`]); `true` when data (or an inconsistency, which the next pop
    /// reports) showed up. The clock is read every 32 polls (a poll is a few ns).
    fn spin_for_data(&self) -> bool {
        let window = self.busy_poll_ns.load(Ordering::Relaxed);
        let last = self.last_work_ns.load(Ordering::Relaxed);
        let Some(end) = busy_poll_deadline(last, window, crate::time::mono_ns()) else {
            return false;
        };
        let tail = *lock(&self.tail);
        loop {
            for _ in 0..32 {
                if !matches!(self.rx.pending(tail), Ok(0)) || self.peer_closed() {
                    bump(&self.counters.busy_poll_hits);
                    return true;
                }
                std::hint::spin_loop();
            }
            if crate::time::mono_ns() >= end {
                bump(&self.counters.busy_poll_misses);
                return false;
            }
        }
    }

    /// One wait on our bell, counted.
    fn sleep(&self, w: Wake, left: Option<Duration>) -> Result<(), RingError> {
        bump(&self.counters.sleeps);
        let woken = self.bell.wait(w, left).inspect_err(|e| {
            if *e == RingError::PeerGone {
                self.gone.store(true, Ordering::Release);
            }
        })?;
        match woken {
            Woken::Signal => bump(&self.counters.wakeups),
            Woken::Timeout => bump(&self.counters.wait_timeouts),
        }
        if self.down.load(Ordering::Acquire) {
            return Err(RingError::PeerGone);
        }
        Ok(())
    }

    /// Marks this side closed and wakes both sides' waiters: ours return `PeerGone`, the peer
    /// drains what is queued, then sees `PeerGone`.
    /// A stale endpoint (its region re-initialised for another connection) leaves the region's
    /// `closed` word alone: it belongs to the new connection.
    pub fn close(&self) {
        self.down.store(true, Ordering::Release);
        if !self.stale() {
            self.ctl().closed.0[self.side].store(1, Ordering::Release);
        }
        let _ = self.bell.ring_peer(Wake::Data);
        let _ = self.bell.ring_peer(Wake::Space);
        self.bell.ring_self();
    }
}

impl Drop for RingEndpoint {
    fn drop(&mut self) {
        self.close();
    }
}

/// Time left until `deadline`; `Err(Timeout)` when it has passed.
fn remaining(deadline: Option<Instant>) -> Result<Option<Duration>, RingError> {
    match deadline {
        None => Ok(None),
        Some(d) => {
            let left = d.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(RingError::Timeout);
            }
            Ok(Some(left))
        }
    }
}

fn lock32(m: &Mutex<u32>) -> std::sync::MutexGuard<'_, u32> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// The index mutexes guard a plain integer: a panic while one was held leaves nothing broken.
fn lock(m: &Mutex<u64>) -> std::sync::MutexGuard<'_, u64> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Transport for RingEndpoint {
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError> {
        if msg.is_empty() {
            return Err(TransportError::Io("empty messages cannot be sent".into()));
        }
        Ok(self.send_bytes(msg, timeout)?)
    }

    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        Ok(self.recv_bytes(buf, timeout)?)
    }

    fn shutdown(&self) {
        self.close();
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
