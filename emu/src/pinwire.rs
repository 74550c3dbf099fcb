//! SDP pins as wires between processes: a model's pins ([`crate::igc::I225::attach_pins`],
//! [`crate::igb::Igb::attach_pins`]) exchange edges, each with its true instant, with a lab GPS
//! receiver, an oscilloscope, or another NIC's pins.
//!
//! # Datagram format (version 1)
//!
//! 24 bytes, little-endian:
//!
//! | Bytes | Field |
//! |---|---|
//! | 0..4 | magic `b"PTPP"` |
//! | 4 | version, 1 |
//! | 5 | kind: 0 EDGE, 1 SUBSCRIBE (no edge: send me the outputs) |
//! | 6 | pin (SDP number) |
//! | 7 | level after the edge: 0 or 1 |
//! | 8..16 | the edge's true instant, u64 ns of host CLOCK_MONOTONIC (0 for SUBSCRIBE) |
//! | 16..24 | reserved, 0 |
//!
//! An input edge may be sent ahead of its instant (a GPS receiver knows when its next pulse
//! is): the model latches it when true time reaches it, exactly. The NIC's end ([`PinSocket`])
//! is a socket file of mode 0600 that takes datagrams only from root or its own uid (the
//! kernel's SCM_CREDENTIALS): a pulse steers a GPS-disciplined clock, so only the lab's own
//! processes may send one. Anything malformed is counted and dropped; [`decode`] never panics.

use crate::nic::sdp::PinEdge;

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"PTPP";
/// The format version this code writes and accepts.
pub const VERSION: u8 = 1;
/// Every datagram's length.
pub const MSG_LEN: usize = 24;
/// Subscribers a pin socket sends its outputs to, at most (the oldest is dropped for a new one).
pub const MAX_SUBSCRIBERS: usize = 8;

/// One datagram.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PinMsg {
    /// An edge on a pin, at its true instant.
    Edge(PinEdge),
    /// Send me the outputs.
    Subscribe,
}

/// Why a datagram is not a pin message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PinMsgError {
    /// Not [`MSG_LEN`] bytes.
    #[error("length {0}, want {MSG_LEN}")]
    Length(usize),
    /// Not [`MAGIC`].
    #[error("bad magic")]
    Magic,
    /// Another format version.
    #[error("version {0}, want {VERSION}")]
    Version(u8),
    /// A kind other than EDGE or SUBSCRIBE.
    #[error("unknown kind {0}")]
    Kind(u8),
    /// A level other than 0 or 1.
    #[error("level {0} is neither 0 nor 1")]
    Level(u8),
}

/// Encodes one message.
pub fn encode(m: PinMsg) -> [u8; MSG_LEN] {
    let mut b = [0u8; MSG_LEN];
    b[..4].copy_from_slice(&MAGIC);
    b[4] = VERSION;
    if let PinMsg::Edge(e) = m {
        b[6] = e.pin;
        b[7] = u8::from(e.high);
        b[8..16].copy_from_slice(&e.t.to_le_bytes());
    } else {
        b[5] = 1;
    }
    b
}

/// Decodes one datagram (total: any bytes give a message or a typed error).
pub fn decode(b: &[u8]) -> Result<PinMsg, PinMsgError> {
    let b: &[u8; MSG_LEN] = b.try_into().map_err(|_| PinMsgError::Length(b.len()))?;
    if b[..4] != MAGIC {
        return Err(PinMsgError::Magic);
    }
    if b[4] != VERSION {
        return Err(PinMsgError::Version(b[4]));
    }
    let high = match b[7] {
        0 => false,
        1 => true,
        l => return Err(PinMsgError::Level(l)),
    };
    let mut t = [0u8; 8];
    t.copy_from_slice(&b[8..16]);
    match b[5] {
        0 => Ok(PinMsg::Edge(PinEdge {
            pin: b[6],
            t: u64::from_le_bytes(t),
            high,
        })),
        1 => Ok(PinMsg::Subscribe),
        k => Err(PinMsgError::Kind(k)),
    }
}

/// What a model's pins are wired to: edges in (polled by the model thread), edges out.
pub trait PinLink: Send {
    /// Edges that came in since the last call.
    fn recv(&mut self) -> Vec<PinEdge>;
    /// Output edges the pins produced.
    fn send(&mut self, edges: &[PinEdge]);
}

/// Counters of a pin socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PinSocketStats {
    /// Edges received.
    pub edges_in: u64,
    /// Output edges sent (to every subscriber).
    pub edges_out: u64,
    /// Datagrams that did not decode.
    pub malformed: u64,
    /// Datagrams from a uid that is neither root nor ours.
    pub foreign: u64,
    /// Sends to a subscriber that failed.
    pub send_errors: u64,
}

#[cfg(target_os = "linux")]
pub use socket::{PinClient, PinSocket};

#[cfg(target_os = "linux")]
mod socket {
    use std::io;
    use std::os::linux::net::SocketAddrExt;
    use std::os::unix::net::{SocketAddr, UnixDatagram};
    use std::path::Path;
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use ptp_ipc::transport::sockfile::SocketFile;

    use super::*;
    use crate::wire::unix::{PeerName, bind_owner_only, recv_with_cred};

    /// Datagrams read per [`PinLink::recv`], so a flooding sender cannot hold the model.
    const DRAIN: usize = 256;

    /// A model's end: bound at a path (mode 0600), taking edges and subscriptions from root or
    /// its own uid, sending output edges to its subscribers. The file goes when it is dropped.
    pub struct PinSocket {
        sock: UnixDatagram,
        own_uid: u32,
        subscribers: Vec<PeerName>,
        /// The socket's counters.
        pub stats: PinSocketStats,
        _file: SocketFile,
    }

    impl PinSocket {
        /// Binds at `path`; a socket file a dead process left is replaced, a live one is not.
        pub fn bind(path: impl AsRef<Path>) -> io::Result<Self> {
            let (sock, file) = bind_owner_only(path.as_ref())?;
            sock.set_nonblocking(true)?;
            Ok(Self {
                sock,
                // Safety: geteuid has no preconditions.
                own_uid: unsafe { libc::geteuid() },
                subscribers: Vec::new(),
                stats: PinSocketStats::default(),
                _file: file,
            })
        }
    }

    impl PinLink for PinSocket {
        fn recv(&mut self) -> Vec<PinEdge> {
            let mut out = Vec::new();
            let mut buf = [0u8; 64];
            for _ in 0..DRAIN {
                let Ok((n, from, uid)) = recv_with_cred(&self.sock, &mut buf) else {
                    break;
                };
                if !uid.is_some_and(|u| u == 0 || u == self.own_uid) {
                    self.stats.foreign += 1;
                    continue;
                }
                match decode(&buf[..n]) {
                    Ok(PinMsg::Edge(e)) => {
                        self.stats.edges_in += 1;
                        out.push(e);
                    }
                    Ok(PinMsg::Subscribe) => {
                        if let Some(f) = from.filter(|f| !self.subscribers.contains(f)) {
                            if self.subscribers.len() == MAX_SUBSCRIBERS {
                                self.subscribers.remove(0);
                            }
                            self.subscribers.push(f);
                        }
                    }
                    Err(_) => self.stats.malformed += 1,
                }
            }
            out
        }

        fn send(&mut self, edges: &[PinEdge]) {
            for e in edges {
                let b = encode(PinMsg::Edge(*e));
                self.stats.edges_out += 1;
                for s in &self.subscribers {
                    let sent = s.to_addr().and_then(|a| self.sock.send_to_addr(&b, &a));
                    if sent.is_err() {
                        self.stats.send_errors += 1;
                    }
                }
            }
        }
    }

    /// The other end: a GPS receiver, an oscilloscope, a test. Bound to a unique abstract
    /// address so the NIC can answer it.
    pub struct PinClient {
        sock: UnixDatagram,
    }

    impl PinClient {
        /// Connects to the pin socket at `path` and subscribes to its outputs.
        pub fn connect(path: impl AsRef<Path>) -> io::Result<Self> {
            static SEQ: AtomicU64 = AtomicU64::new(0);
            let name = format!(
                "redox-ptp-pins/{}/{}",
                std::process::id(),
                SEQ.fetch_add(1, Ordering::Relaxed)
            );
            let sock = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
            sock.connect(path.as_ref())?;
            sock.send(&encode(PinMsg::Subscribe))?;
            Ok(Self { sock })
        }

        /// Sends an edge on `edge.pin` at `edge.t` (which may lie ahead).
        pub fn send(&self, edge: PinEdge) -> io::Result<()> {
            self.sock.send(&encode(PinMsg::Edge(edge))).map(|_| ())
        }

        /// The next output edge, waiting at most `timeout`; `Ok(None)` when none came.
        /// Malformed datagrams are skipped.
        pub fn recv(&self, timeout: Duration) -> io::Result<Option<PinEdge>> {
            let deadline = std::time::Instant::now() + timeout;
            let mut buf = [0u8; 64];
            loop {
                let left = deadline.saturating_duration_since(std::time::Instant::now());
                if left.is_zero() {
                    return Ok(None);
                }
                self.sock.set_read_timeout(Some(left))?;
                match self.sock.recv(&mut buf) {
                    Ok(n) => {
                        if let Ok(PinMsg::Edge(e)) = decode(&buf[..n]) {
                            return Ok(Some(e));
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                        ) =>
                    {
                        return Ok(None);
                    }
                    Err(e) => return Err(e),
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_round_trip_and_anything_else_is_a_typed_error() {
        let e = PinEdge {
            pin: 3,
            t: 0x0102_0304_0506_0708,
            high: true,
        };
        assert_eq!(decode(&encode(PinMsg::Edge(e))), Ok(PinMsg::Edge(e)));
        assert_eq!(decode(&encode(PinMsg::Subscribe)), Ok(PinMsg::Subscribe));
        let good = encode(PinMsg::Edge(e));
        assert_eq!(decode(&good[..23]), Err(PinMsgError::Length(23)));
        let mut b = good;
        b[0] = b'X';
        assert_eq!(decode(&b), Err(PinMsgError::Magic));
        let mut b = good;
        b[4] = 2;
        assert_eq!(decode(&b), Err(PinMsgError::Version(2)));
        let mut b = good;
        b[5] = 7;
        assert_eq!(decode(&b), Err(PinMsgError::Kind(7)));
        let mut b = good;
        b[7] = 2;
        assert_eq!(decode(&b), Err(PinMsgError::Level(2)));
        // Every byte string of every length up to 40: no panic.
        for len in 0..40 {
            for fill in [0u8, 1, 0xFF] {
                let _ = decode(&vec![fill; len]);
            }
        }
    }

    #[cfg(target_os = "linux")]
    #[test]
    fn a_client_drives_the_socket_and_hears_its_outputs() {
        let path = std::env::temp_dir().join(format!("ptp-pins-{}.sock", std::process::id()));
        let mut s = PinSocket::bind(&path).unwrap();
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600);
        let c = PinClient::connect(&path).unwrap();
        let e = PinEdge {
            pin: 1,
            t: 42,
            high: true,
        };
        c.send(e).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        assert_eq!(s.recv(), vec![e]);
        let out = PinEdge {
            pin: 0,
            t: 77,
            high: false,
        };
        s.send(&[out]);
        assert_eq!(
            c.recv(std::time::Duration::from_secs(2)).unwrap(),
            Some(out)
        );
        assert_eq!(c.recv(std::time::Duration::from_millis(20)).unwrap(), None);
        // A second live binder is refused.
        assert!(PinSocket::bind(&path).is_err());
    }
}
