//! The client of a driver channel, one implementation for ptpd's `DriverLink` and for tsperf
//! (issue 16: "tsperf drives the same channel ptpd uses").
//!
//! [`connect_driver`] connects to a driver's channel (a SOCK_SEQPACKET socket on Linux, a
//! scheme handle on Redox: [`DriverConn`]) and says hello in the chosen [`ChannelMode`]:
//! - `Socket`: a plain `Hello`; every message then goes over the socket, as before issue 16.
//! - `Ring`: `HelloRing`; the driver answers with a shared-memory ring pair passed over the
//!   socket ([`crate::ring::offer_ring`]) and from then on sends *everything* over the ring (its
//!   hello, replies, timestamps, frames), and reads everything from it. The socket carries no
//!   messages after the offer; it stays open as the liveness signal (its hang-up tells a side
//!   asleep on the ring that the peer process is gone). On Redox the offer says "map this
//!   handle" ([`crate::ring::mapped_offer`]: the driver's own memory, served to that handle
//!   alone; booted in CI, tests/redox_boot.rs), the client
//!   passes the driver its doorbell pipes over the handle, and a sleeping side checks the peer's
//!   pid (the client also in the kernel's context table).
//!
//! Why all traffic and not only the hot path: one ordered stream keeps the order the protocol
//! relies on (the driver's hello before any event, a `Closed` notice after the last reply), one
//! reader waits on one thing, and control requests are too rare for their path to matter.

use std::path::Path;
use std::time::Duration;

#[cfg(target_os = "redox")]
pub use super::SchemeConn as DriverConn;
#[cfg(target_os = "linux")]
pub use super::SeqpacketConn as DriverConn;
use super::{Transport, TransportError};
use crate::msg::{CloseReason, DriverEvent, DriverRequest, DriverToPtpd, PtpdToDriver};
use crate::ring::{RingConfig, RingEndpoint, RingError, RingStats};
use crate::wire::{MAX_MESSAGE, Wire};

/// Which transport a driver channel's messages take.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ChannelMode {
    /// Every message over the SOCK_SEQPACKET socket.
    Socket,
    /// Every message over a shared-memory ring pair; the socket only for liveness.
    #[default]
    Ring,
}

impl ChannelMode {
    pub fn name(self) -> &'static str {
        match self {
            ChannelMode::Socket => "socket",
            ChannelMode::Ring => "ring",
        }
    }
}

impl std::str::FromStr for ChannelMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "socket" => Ok(ChannelMode::Socket),
            "ring" => Ok(ChannelMode::Ring),
            _ => Err(format!("channel mode {s:?}: want \"ring\" or \"socket\"")),
        }
    }
}

/// The default busy-poll window of either end of a driver channel's ring: none (pure
/// blocking). Measured on the 2-core development machine (release, `ptpctl bench` through
/// ptpd, socket and ring hosts interleaved): a fixed 200-poll spin made the exact read's p50
/// 24.5 µs against the socket's 18-20 µs (a spinning thread holds the CPU its peer needs to
/// answer); with none, 19-21 µs, while the stamp stream at 100 000/s still took half the
/// socket's wake-ups per stamp (tsperf --rate). The adaptive window (`--busy-poll-us`,
/// [`crate::ring::busy_poll_deadline`]) is opt-in until measured otherwise (docs/results.md).
pub const DRIVER_RING_BUSY_POLL: Duration = Duration::ZERO;

/// The ring a client asks for: slots that carry any message (the wire's [`MAX_MESSAGE`] and
/// the slot prefix), 256 per direction (about 1 MiB each way).
pub fn client_ring() -> RingConfig {
    RingConfig {
        geometry: crate::ring::Geometry {
            slot_size: crate::ring::MAX_SLOT,
            slot_count: 256,
        },
        busy_poll: DRIVER_RING_BUSY_POLL,
    }
}

/// The largest ring a driver accepts from a client's `HelloRing` (per direction, bytes).
pub const MAX_CLIENT_RING: usize = 4 << 20;

/// A driver channel's transport, either kind, behind one [`Transport`].
pub enum DriverTransport {
    Socket(DriverConn),
    /// The ring carries the messages; `conn` is the socket it was passed over, kept open.
    Ring {
        ring: Box<RingEndpoint>,
        conn: DriverConn,
    },
}

impl DriverTransport {
    pub fn mode(&self) -> ChannelMode {
        match self {
            DriverTransport::Socket(_) => ChannelMode::Socket,
            DriverTransport::Ring { .. } => ChannelMode::Ring,
        }
    }

    /// The socket (the whole channel in `Socket` mode; the liveness signal in `Ring` mode).
    pub fn conn(&self) -> &DriverConn {
        match self {
            DriverTransport::Socket(c) | DriverTransport::Ring { conn: c, .. } => c,
        }
    }

    pub fn ring(&self) -> Option<&RingEndpoint> {
        match self {
            DriverTransport::Ring { ring, .. } => Some(ring),
            DriverTransport::Socket(_) => None,
        }
    }

    /// The ring's counters (`None` in socket mode).
    pub fn ring_stats(&self) -> Option<RingStats> {
        self.ring().map(|r| r.stats())
    }
}

impl Transport for DriverTransport {
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError> {
        match self {
            DriverTransport::Socket(c) => c.send(msg, timeout),
            DriverTransport::Ring { ring, .. } => Transport::send(ring, msg, timeout),
        }
    }

    /// `Some(ZERO)` polls without spinning (a ring's `try_recv`).
    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        match self {
            DriverTransport::Socket(c) => c.recv(buf, timeout),
            DriverTransport::Ring { ring, .. } if timeout == Some(Duration::ZERO) => {
                match ring.try_recv(buf) {
                    Ok(true) => Ok(()),
                    Ok(false) => Err(TransportError::Timeout),
                    Err(e) => Err(e.into()),
                }
            }
            DriverTransport::Ring { ring, .. } => Transport::recv(ring, buf, timeout),
        }
    }

    fn shutdown(&self) {
        if let DriverTransport::Ring { ring, .. } = self {
            ring.close();
        }
        self.conn().shutdown();
    }
}

/// Connects to the driver channel at `path` and says hello (sequence number `seq`) in `mode`,
/// waiting at most `timeout` for a ring's offer. In `Socket` mode a hello that could not be
/// sent is not an error here: a driver that refused us at once has closed, and its reason waits
/// on the socket for the caller to read.
///
/// A driver that does not take the ring hello (one from before rings, or a Redox driver with
/// no ring segment free or none at all) answers `Closed { NoHello }`: the client then connects
/// again with the plain hello and gets the socket ([`DriverTransport::mode`] says which it got;
/// logged).
///
/// Errors: the socket's own (`NotFound`, `PermissionDenied`, ...); in `Ring` mode a driver that
/// refused the connection: `PermissionDenied` for its access rule, `Io` naming its reason
/// otherwise.
pub fn connect_driver(
    path: &Path,
    mode: ChannelMode,
    seq: u32,
    timeout: Duration,
) -> Result<DriverTransport, TransportError> {
    match hello(path, mode, seq, timeout) {
        Err(Refused::NoRing) => {
            log::warn!(
                "driver at {} does not offer rings: its channel stays on the socket",
                path.display()
            );
            hello(path, ChannelMode::Socket, seq, timeout).map_err(Refused::into_error)
        }
        r => r.map_err(Refused::into_error),
    }
}

/// Why [`hello`] got no channel.
enum Refused {
    /// The driver refused the ring hello as one it does not know.
    NoRing,
    Other(TransportError),
}

impl Refused {
    fn into_error(self) -> TransportError {
        match self {
            Refused::NoRing => TransportError::Io("driver refused the plain hello".into()),
            Refused::Other(e) => e,
        }
    }
}

impl From<TransportError> for Refused {
    fn from(e: TransportError) -> Self {
        Refused::Other(e)
    }
}

/// One connection and its hello in `mode`.
fn hello(
    path: &Path,
    mode: ChannelMode,
    seq: u32,
    timeout: Duration,
) -> Result<DriverTransport, Refused> {
    let conn = open(path)?;
    let cfg = client_ring();
    let request = match mode {
        ChannelMode::Socket => DriverRequest::Hello,
        ChannelMode::Ring => DriverRequest::HelloRing {
            slot_size: cfg.geometry.slot_size,
            slot_count: cfg.geometry.slot_count,
        },
    };
    let hello = PtpdToDriver { seq, request }.to_bytes();
    let sent = conn.send(&hello, Some(timeout));
    if mode == ChannelMode::Socket {
        if let Err(e) = sent {
            log::debug!("hello to {} not delivered: {e}", path.display());
        }
        return Ok(DriverTransport::Socket(conn));
    }
    sent?;
    match accept(&conn, timeout, cfg.busy_poll) {
        Ok(ring) => Ok(DriverTransport::Ring {
            ring: Box::new(ring),
            conn,
        }),
        Err(RingError::NotOffered(bytes)) => Err(refusal(&bytes, path)),
        // Offered but not usable here (a segment we cannot map, doorbells the driver would not
        // take): the socket still works, so that is the channel.
        Err(e @ (RingError::Setup(_) | RingError::Io(_))) => {
            log::warn!("ring from {} not usable: {e}", path.display());
            Err(Refused::NoRing)
        }
        Err(e) => Err(Refused::Other(e.into())),
    }
}

#[cfg(target_os = "linux")]
fn open(path: &Path) -> Result<DriverConn, TransportError> {
    DriverConn::connect(path)
}

#[cfg(target_os = "redox")]
fn open(path: &Path) -> Result<DriverConn, TransportError> {
    let p = path
        .to_str()
        .ok_or_else(|| TransportError::Io(format!("{}: not UTF-8", path.display())))?;
    DriverConn::connect(p)
}

/// Takes the ring the driver offers on `conn` (the region and bells passed over it).
#[cfg(target_os = "linux")]
fn accept(
    conn: &DriverConn,
    timeout: Duration,
    busy_poll: Duration,
) -> Result<RingEndpoint, RingError> {
    crate::ring::accept_ring(conn, timeout, busy_poll)
}

/// Takes the ring the driver offers on `conn`: a segment mapped through `conn` itself.
#[cfg(target_os = "redox")]
fn accept(
    conn: &DriverConn,
    timeout: Duration,
    busy_poll: Duration,
) -> Result<RingEndpoint, RingError> {
    let mut buf = Vec::new();
    conn.recv(&mut buf, Some(timeout)).map_err(|e| match e {
        TransportError::Timeout => RingError::Timeout,
        TransportError::Disconnected => RingError::PeerGone,
        e => RingError::Io(e.to_string()),
    })?;
    match crate::ring::parse_mapped_offer(&buf) {
        Some(len) => crate::ring::attach_ring_mapped(len, busy_poll, conn.raw()),
        None => Err(RingError::NotOffered(buf)),
    }
}

/// What a driver that answered a ring hello with a message instead of a ring meant.
fn refusal(bytes: &[u8], path: &Path) -> Refused {
    debug_assert!(bytes.len() <= MAX_MESSAGE);
    let at = path.display();
    Refused::Other(match DriverToPtpd::decode(bytes) {
        Ok(DriverToPtpd::Event(DriverEvent::Closed {
            reason: CloseReason::PermissionDenied,
        })) => TransportError::PermissionDenied(format!("driver at {at} refuses this process")),
        Ok(DriverToPtpd::Event(DriverEvent::Closed {
            reason: CloseReason::NoHello,
        })) => return Refused::NoRing,
        Ok(DriverToPtpd::Event(DriverEvent::Closed { reason })) => {
            TransportError::Io(format!("driver at {at} closed the connection ({reason:?})"))
        }
        Ok(m) => TransportError::Io(format!("driver at {at} sent {m:?} instead of a ring")),
        Err(e) => TransportError::Io(format!("driver at {at}: no ring offered ({e})")),
    })
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use crate::transport::{Channel, SeqpacketListener};

    /// A driver from before rings: refuses anything but `Hello` first with `Closed { NoHello }`
    /// (as igcd did), answers a `Hello` with `Restarted`. Serves `n` connections.
    fn old_driver(l: SeqpacketListener, n: usize) -> std::thread::JoinHandle<Vec<DriverRequest>> {
        std::thread::spawn(move || {
            let mut seen = Vec::new();
            for _ in 0..n {
                let (c, _) = l.accept(Some(Duration::from_secs(5))).unwrap();
                let chan = Channel::<_, DriverToPtpd, PtpdToDriver>::new(c);
                let m = chan.recv(Some(Duration::from_secs(5))).unwrap();
                let answer = match m.request {
                    DriverRequest::Hello => DriverEvent::Restarted { generation: 7 },
                    _ => DriverEvent::Closed {
                        reason: CloseReason::NoHello,
                    },
                };
                seen.push(m.request);
                chan.send(&DriverToPtpd::Event(answer), Some(Duration::from_secs(1)))
                    .unwrap();
                // Held until the client has read the answer.
                let _ = chan.recv(Some(Duration::from_millis(200)));
            }
            seen
        })
    }

    #[test]
    fn a_driver_without_rings_gets_the_plain_hello_next() {
        let path = std::env::temp_dir().join(format!("drvring-old-{}", std::process::id()));
        let l = SeqpacketListener::bind(&path).unwrap();
        let driver = old_driver(l, 2);
        let t = connect_driver(&path, ChannelMode::Ring, 1, Duration::from_secs(2)).unwrap();
        assert_eq!(t.mode(), ChannelMode::Socket, "fell back to the socket");
        let chan = Channel::<_, PtpdToDriver, DriverToPtpd>::new(t);
        assert_eq!(
            chan.recv(Some(Duration::from_secs(2))).unwrap(),
            DriverToPtpd::Event(DriverEvent::Restarted { generation: 7 })
        );
        drop(chan);
        let seen = driver.join().unwrap();
        assert!(
            matches!(seen[0], DriverRequest::HelloRing { .. }),
            "{seen:?}"
        );
        assert_eq!(seen[1], DriverRequest::Hello);
    }
}
