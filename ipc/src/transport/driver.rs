//! The client of a driver channel, one implementation for ptpd's `DriverLink` and for tsperf
//! (issue 16: "tsperf drives the same channel ptpd uses").
//!
//! [`connect_driver`] connects to a driver's SOCK_SEQPACKET socket and says hello in the chosen
//! [`ChannelMode`]:
//! - `Socket`: a plain `Hello`; every message then goes over the socket, as before issue 16.
//! - `Ring`: `HelloRing`; the driver answers with a shared-memory ring pair passed over the
//!   socket ([`crate::ring::offer_ring`]) and from then on sends *everything* over the ring (its
//!   hello, replies, timestamps, frames), and reads everything from it. The socket carries no
//!   messages after the offer; it stays open as the liveness signal (its hang-up tells a side
//!   asleep on the ring that the peer process is gone).
//!
//! Why all traffic and not only the hot path: one ordered stream keeps the order the protocol
//! relies on (the driver's hello before any event, a `Closed` notice after the last reply), one
//! reader waits on one thing, and control requests are too rare for their path to matter.

use std::path::Path;
use std::time::Duration;

use super::{SeqpacketConn, Transport, TransportError};
use crate::msg::{CloseReason, DriverEvent, DriverRequest, DriverToPtpd, PtpdToDriver};
use crate::ring::{RingConfig, RingEndpoint, RingError, RingStats, accept_ring};
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

/// The ring a client asks for: slots that carry any message (the wire's [`MAX_MESSAGE`] and
/// the slot prefix), 256 per direction (about 1 MiB each way).
pub fn client_ring() -> RingConfig {
    RingConfig {
        geometry: crate::ring::Geometry {
            slot_size: crate::ring::MAX_SLOT,
            slot_count: 256,
        },
        ..RingConfig::default()
    }
}

/// The largest ring a driver accepts from a client's `HelloRing` (per direction, bytes).
pub const MAX_CLIENT_RING: usize = 4 << 20;

/// A driver channel's transport, either kind, behind one [`Transport`].
pub enum DriverTransport {
    Socket(SeqpacketConn),
    /// The ring carries the messages; `conn` is the socket it was passed over, kept open.
    Ring {
        ring: Box<RingEndpoint>,
        conn: SeqpacketConn,
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
    pub fn conn(&self) -> &SeqpacketConn {
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
/// Errors: the socket's own (`NotFound`, `PermissionDenied`, ...); in `Ring` mode a driver that
/// refused the connection: `PermissionDenied` for its access rule, `Io` naming its reason
/// otherwise (an older driver without rings says `NoHello`: use `ChannelMode::Socket`).
pub fn connect_driver(
    path: &Path,
    mode: ChannelMode,
    seq: u32,
    timeout: Duration,
) -> Result<DriverTransport, TransportError> {
    let conn = SeqpacketConn::connect(path)?;
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
    match accept_ring(&conn, timeout, cfg.spin) {
        Ok(ring) => Ok(DriverTransport::Ring {
            ring: Box::new(ring),
            conn,
        }),
        Err(RingError::NotOffered(bytes)) => Err(refusal(&bytes, path)),
        Err(e) => Err(e.into()),
    }
}

/// What a driver that answered a ring hello with a message instead of a ring meant.
fn refusal(bytes: &[u8], path: &Path) -> TransportError {
    debug_assert!(bytes.len() <= MAX_MESSAGE);
    let at = path.display();
    match DriverToPtpd::decode(bytes) {
        Ok(DriverToPtpd::Event(DriverEvent::Closed {
            reason: CloseReason::PermissionDenied,
        })) => TransportError::PermissionDenied(format!("driver at {at} refuses this process")),
        Ok(DriverToPtpd::Event(DriverEvent::Closed {
            reason: CloseReason::NoHello,
        })) => TransportError::Io(format!(
            "driver at {at} did not take the ring hello (a driver without rings? \
             channel_mode = \"socket\")"
        )),
        Ok(DriverToPtpd::Event(DriverEvent::Closed { reason })) => {
            TransportError::Io(format!("driver at {at} closed the connection ({reason:?})"))
        }
        Ok(m) => TransportError::Io(format!("driver at {at} sent {m:?} instead of a ring")),
        Err(e) => TransportError::Io(format!("driver at {at}: no ring offered ({e})")),
    }
}
