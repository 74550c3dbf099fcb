//! A wire over a Unix datagram socket (Linux): one end per NIC model, so two driver processes
//! (or a driver and a benchmark tool) exchange frames with their departure instants.
//!
//! # Datagram format (version 1)
//!
//! Every datagram is a 16-byte header followed by the frame (from the destination MAC on, no
//! FCS). Integers are little-endian.
//!
//! | Bytes | Field |
//! |---|---|
//! | 0..4 | magic `b"PTPW"` |
//! | 4 | version, 1 |
//! | 5 | flags: b0 HELLO (no frame; announces the sender's address), other bits ignored |
//! | 6..8 | frame length, u16 (must equal the datagram length − 16; 0 for HELLO) |
//! | 8..16 | departure instant, u64 ns of the sender's true time (CLOCK_MONOTONIC in real time) |
//!
//! The receiving end computes arrival = departure + its [`Cable`]'s delay ± its jitter, and
//! draws the cable's random loss (the cable towards the receiver, default
//! [`Cable::DEFAULT_DELAY_NS`], no jitter, no loss). Anything else (short, wrong magic or
//! version, length mismatch) is counted in [`WireStats::malformed`] and dropped.

use std::io;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use super::{ArrivalQueue, Cable, WireFrame, WirePort, WireStats};

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"PTPW";
/// Header version this code writes and accepts.
pub const VERSION: u8 = 1;
/// Length of the datagram header.
pub const HEADER_LEN: usize = 16;

const FLAG_HELLO: u8 = 1;
/// Largest frame the header can describe.
const MAX_FRAME: usize = u16::MAX as usize;
/// Datagrams read per [`WirePort::poll_rx`] call before handing out a frame, so a flooding
/// peer cannot keep the model in one call forever.
const DRAIN_PER_POLL: usize = 256;
/// Poll interval while datagrams keep arriving.
const BUSY_POLL_INTERVAL: Duration = Duration::from_micros(20);
/// Default [`UnixDatagramWire::set_poll_interval`].
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// Whom datagrams go to.
#[derive(Debug)]
enum Peer {
    /// The socket is connected (socketpair end, [`UnixDatagramWire::connect`]).
    Connected,
    /// A bound socket that replies to the address of the last valid datagram.
    Learned(Option<SocketAddr>),
}

/// One end of a wire over a Unix `SOCK_DGRAM` socket. Non-blocking; never panics.
#[derive(Debug)]
pub struct UnixDatagramWire {
    sock: UnixDatagram,
    peer: Peer,
    cable: Cable,
    queue: ArrivalQueue,
    stats: WireStats,
    rx_buf: Box<[u8]>,
    tx_buf: Vec<u8>,
    poll_interval: Duration,
    /// Whether the last drain found datagrams: while traffic flows the socket is polled every
    /// [`BUSY_POLL_INTERVAL`], since a Unix datagram queue holds only a few messages
    /// (net.unix.max_dgram_qlen, 10 by default) and would otherwise cap a flow at ~10 per poll.
    busy: bool,
    /// Socket file created by [`Self::bind`], removed on drop.
    bound_path: Option<PathBuf>,
    /// The path [`Self::connect`] reached, to reconnect when the bound end restarts (its new
    /// socket is a new file: datagrams to the old one are refused).
    connect_path: Option<PathBuf>,
    /// Host monotonic time of the last reconnect attempt (attempts are rate-limited).
    last_reconnect: Option<std::time::Instant>,
}

/// Reconnect attempts to a vanished bound end are at most this frequent.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(100);

/// Encodes one datagram (`None` if the frame is longer than the header can describe).
pub fn encode_datagram(frame: &[u8], departure_ns: u64) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(HEADER_LEN + frame.len());
    encode_into(&mut out, frame, departure_ns, 0).then_some(out)
}

/// Decodes one datagram into (departure_ns, frame); `None` if malformed or a HELLO.
pub fn decode_datagram(d: &[u8]) -> Option<(u64, &[u8])> {
    match decode(d)? {
        (_, _, true) => None,
        (dep, frame, false) => Some((dep, frame)),
    }
}

fn encode_into(out: &mut Vec<u8>, frame: &[u8], departure_ns: u64, flags: u8) -> bool {
    let Ok(len) = u16::try_from(frame.len()) else {
        return false;
    };
    out.clear();
    out.extend_from_slice(&MAGIC);
    out.push(VERSION);
    out.push(flags);
    out.extend_from_slice(&len.to_le_bytes());
    out.extend_from_slice(&departure_ns.to_le_bytes());
    out.extend_from_slice(frame);
    true
}

/// (departure, frame, hello) of a valid datagram.
fn decode(d: &[u8]) -> Option<(u64, &[u8], bool)> {
    let (hdr, frame) = d.split_at_checked(HEADER_LEN)?;
    if hdr[0..4] != MAGIC || hdr[4] != VERSION {
        return None;
    }
    let hello = hdr[5] & FLAG_HELLO != 0;
    let len = u16::from_le_bytes([hdr[6], hdr[7]]) as usize;
    let dep = u64::from_le_bytes(hdr[8..16].try_into().ok()?);
    if len != frame.len() || (hello && len != 0) {
        return None;
    }
    Some((dep, frame, hello))
}

impl UnixDatagramWire {
    fn with_socket(sock: UnixDatagram, peer: Peer) -> io::Result<Self> {
        sock.set_nonblocking(true)?;
        Ok(Self {
            sock,
            peer,
            cable: Cable::default(),
            queue: ArrivalQueue::default(),
            stats: WireStats::default(),
            rx_buf: vec![0; HEADER_LEN + MAX_FRAME + 1].into_boxed_slice(),
            tx_buf: Vec::new(),
            poll_interval: DEFAULT_POLL_INTERVAL,
            busy: false,
            bound_path: None,
            connect_path: None,
            last_reconnect: None,
        })
    }

    /// Two connected ends (a socketpair): one per NIC model.
    pub fn pair() -> io::Result<(Self, Self)> {
        let (a, b) = UnixDatagram::pair()?;
        Ok((
            Self::with_socket(a, Peer::Connected)?,
            Self::with_socket(b, Peer::Connected)?,
        ))
    }

    /// Wraps an already connected socket, e.g. a socketpair end a lab passed to a driver
    /// process.
    pub fn from_socket(sock: UnixDatagram) -> io::Result<Self> {
        Self::with_socket(sock, Peer::Connected)
    }

    /// Binds a socket at `path` (which must not exist). It sends to whoever sent the last
    /// valid datagram (or HELLO) from an address it can reply to; until then transmitted
    /// frames are dropped and counted in [`WireStats::send_errors`]. The socket file is
    /// removed when the wire is dropped.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref();
        // A socket file left by a killed process is stale when nothing answers it; a live one
        // is refused rather than stolen.
        if std::fs::symlink_metadata(path).is_ok() {
            let probe = UnixDatagram::unbound()?;
            match probe.connect(path) {
                Ok(()) => return Err(io::ErrorKind::AddrInUse.into()),
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    std::fs::remove_file(path)?;
                }
                Err(e) => return Err(e),
            }
        }
        let sock = UnixDatagram::bind(path)?;
        let mut w = Self::with_socket(sock, Peer::Learned(None))?;
        w.bound_path = Some(path.to_path_buf());
        Ok(w)
    }

    /// Connects to a socket made by [`Self::bind`] at `path`. This end gets a unique abstract
    /// address (so the bound end can reply) and announces it with a HELLO datagram.
    pub fn connect(path: impl AsRef<Path>) -> io::Result<Self> {
        static SEQ: AtomicU64 = AtomicU64::new(0);
        let name = format!(
            "redox-ptp-wire/{}/{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        let sock = UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name.as_bytes())?)?;
        sock.connect(path.as_ref())?;
        let mut w = Self::with_socket(sock, Peer::Connected)?;
        w.connect_path = Some(path.as_ref().to_path_buf());
        w.hello()?;
        Ok(w)
    }

    fn hello(&self) -> io::Result<()> {
        let mut hello = Vec::with_capacity(HEADER_LEN);
        encode_into(&mut hello, &[], 0, FLAG_HELLO);
        self.sock.send(&hello).map(|_| ())
    }

    /// The bound end went away (a restarted NIC binds a new socket at the same path):
    /// reconnect and say hello, at most every [`RECONNECT_INTERVAL`]. True if reconnected.
    fn reconnect(&mut self) -> bool {
        let Some(path) = &self.connect_path else {
            return false;
        };
        let now = std::time::Instant::now();
        if self
            .last_reconnect
            .is_some_and(|t| now.duration_since(t) < RECONNECT_INTERVAL)
        {
            return false;
        }
        self.last_reconnect = Some(now);
        self.sock.connect(path).is_ok() && self.hello().is_ok()
    }

    /// Replaces the cable towards this end (builder style).
    pub fn with_cable(mut self, cable: Cable) -> Self {
        self.cable = cable;
        self
    }

    /// The cable towards this end: delay, jitter and loss applied to received frames, loss
    /// injection.
    pub fn cable(&mut self) -> &mut Cable {
        &mut self.cable
    }

    /// How often a model should poll this port (default 1 ms); see
    /// [`WirePort::poll_interval`]. Frames still get their exact arrival stamps when polled
    /// late; only delivery to the driver waits.
    pub fn set_poll_interval(&mut self, every: Duration) {
        self.poll_interval = every;
    }

    /// Reads every datagram waiting in the socket (bounded per call) into the queue.
    fn drain(&mut self) {
        self.busy = false;
        for _ in 0..DRAIN_PER_POLL {
            let (n, from) = match self.peer {
                Peer::Connected => match self.sock.recv(&mut self.rx_buf) {
                    Ok(n) => (n, None),
                    Err(_) => return,
                },
                Peer::Learned(_) => match self.sock.recv_from(&mut self.rx_buf) {
                    Ok((n, a)) => (n, Some(a)),
                    Err(_) => return,
                },
            };
            self.busy = true;
            let Some(d) = self.rx_buf.get(..n) else {
                return;
            };
            let Some((dep, frame, hello)) = decode(d) else {
                self.stats.malformed += 1;
                continue;
            };
            if let (Peer::Learned(peer), Some(from)) = (&mut self.peer, from)
                && (from.as_pathname().is_some() || from.as_abstract_name().is_some())
            {
                *peer = Some(from);
            }
            if hello {
                continue;
            }
            let Some(arrival_ns) = self.cable.carry(dep) else {
                self.stats.lost += 1;
                continue;
            };
            let frame = WireFrame {
                data: frame.to_vec(),
                arrival_ns,
            };
            if !self.queue.push(frame) {
                self.stats.overflow += 1;
            }
        }
    }
}

impl WirePort for UnixDatagramWire {
    fn transmit(&mut self, frame: &[u8], departure_ns: u64) {
        self.stats.sent += 1;
        if !encode_into(&mut self.tx_buf, frame, departure_ns, 0) {
            self.stats.send_errors += 1;
            return;
        }
        let mut sent = match &self.peer {
            Peer::Connected => self.sock.send(&self.tx_buf),
            Peer::Learned(Some(to)) => self.sock.send_to_addr(&self.tx_buf, to),
            Peer::Learned(None) => Err(io::ErrorKind::NotConnected.into()),
        };
        if let Err(e) = &sent
            && matches!(
                e.kind(),
                io::ErrorKind::ConnectionRefused
                    | io::ErrorKind::NotFound
                    | io::ErrorKind::NotConnected
            )
            && self.reconnect()
        {
            sent = self.sock.send(&self.tx_buf);
        }
        if sent.is_err() {
            self.stats.send_errors += 1;
        }
    }

    fn poll_rx(&mut self, now_ns: u64) -> Option<WireFrame> {
        self.drain();
        let f = self.queue.pop_due(now_ns)?;
        self.stats.received += 1;
        Some(f)
    }

    fn next_arrival(&self) -> Option<u64> {
        self.queue.next_arrival()
    }

    fn poll_interval(&self) -> Option<Duration> {
        Some(if self.busy {
            BUSY_POLL_INTERVAL.min(self.poll_interval)
        } else {
            self.poll_interval
        })
    }

    fn cable_mut(&mut self) -> Option<&mut Cable> {
        Some(&mut self.cable)
    }

    fn stats(&self) -> WireStats {
        self.stats
    }
}

/// The socket, for a caller that waits for datagrams with poll(2) instead of polling
/// [`WirePort::poll_rx`] on a timer (e.g. a bridge to a TAP device, whose frames must leave
/// as soon as they arrive).
impl std::os::fd::AsFd for UnixDatagramWire {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        self.sock.as_fd()
    }
}

impl Drop for UnixDatagramWire {
    fn drop(&mut self) {
        if let Some(p) = self.bound_path.take() {
            let _ = std::fs::remove_file(p);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tmp_path(tag: &str) -> PathBuf {
        std::env::temp_dir().join(format!("ptp-wire-{}-{tag}.sock", std::process::id()))
    }

    #[test]
    fn a_stale_socket_file_is_replaced_and_a_live_one_refused() {
        let path = tmp_path("stale");
        let _ = std::fs::remove_file(&path);
        // A socket whose process died leaves its file behind (std does not unlink).
        drop(UnixDatagram::bind(&path).unwrap());
        assert!(path.exists());
        let live = UnixDatagramWire::bind(&path).unwrap();
        assert_eq!(
            UnixDatagramWire::bind(&path).unwrap_err().kind(),
            io::ErrorKind::AddrInUse
        );
        drop(live);
        assert!(!path.exists());
    }

    #[test]
    fn the_connecting_end_follows_a_restarted_bound_end() {
        let path = tmp_path("restart");
        let _ = std::fs::remove_file(&path);
        let mut a = UnixDatagramWire::bind(&path).unwrap();
        let mut b = UnixDatagramWire::connect(&path).unwrap();
        b.transmit(b"one", 10);
        assert!(a.poll_rx(u64::MAX).is_some());
        // The bound end's NIC restarts: a new socket at the same path.
        drop(a);
        let mut a2 = UnixDatagramWire::bind(&path).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        let got = loop {
            b.transmit(b"two", 20);
            if let Some(f) = a2.poll_rx(u64::MAX) {
                break f;
            }
            assert!(std::time::Instant::now() < deadline, "never reconnected");
            std::thread::sleep(Duration::from_millis(20));
        };
        assert_eq!(got.data, b"two");
        // And the new bound end learned where to reply.
        a2.transmit(b"back", 30);
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while b.poll_rx(u64::MAX).is_none() {
            assert!(std::time::Instant::now() < deadline, "no reply");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn pair_carries_frames_with_departure_plus_cable_delay() {
        let (mut a, b) = UnixDatagramWire::pair().unwrap();
        let mut b = b.with_cable(Cable::new(70));
        a.transmit(b"hello wire", 1_000);
        a.transmit(b"again", 2_000);
        assert_eq!(b.poll_rx(1_069), None, "not arrived yet");
        assert_eq!(b.next_arrival(), Some(1_070));
        let f = b.poll_rx(1_070).unwrap();
        assert_eq!(
            (f.data.as_slice(), f.arrival_ns),
            (&b"hello wire"[..], 1_070)
        );
        let f = b.poll_rx(u64::MAX).unwrap();
        assert_eq!((f.data.as_slice(), f.arrival_ns), (&b"again"[..], 2_070));
        // Default cable the other way: 50 ns.
        b.transmit(b"back", 10);
        assert_eq!(a.poll_rx(60).unwrap().arrival_ns, 60);
        assert_eq!(a.stats().received, 1);
        assert_eq!(b.stats().sent, 1);
    }

    #[test]
    fn malformed_datagrams_are_counted_and_dropped() {
        let (raw, peer) = UnixDatagram::pair().unwrap();
        let mut w = UnixDatagramWire::from_socket(peer).unwrap();
        let good = encode_datagram(b"ok", 5).unwrap();
        let mut bad_magic = good.clone();
        bad_magic[0] ^= 1;
        let mut bad_version = good.clone();
        bad_version[4] = 2;
        let mut bad_len = good.clone();
        bad_len[6] = 3;
        let mut hello_with_frame = good.clone();
        hello_with_frame[5] = FLAG_HELLO;
        for d in [
            &[][..],
            &good[..15],
            &bad_magic,
            &bad_version,
            &bad_len,
            &hello_with_frame,
            &good,
        ] {
            raw.send(d).unwrap();
        }
        let f = w.poll_rx(u64::MAX).unwrap();
        assert_eq!((f.data.as_slice(), f.arrival_ns), (&b"ok"[..], 55));
        assert_eq!(w.poll_rx(u64::MAX), None);
        assert_eq!(w.stats().malformed, 6);
        assert_eq!(decode_datagram(&good), Some((5, &b"ok"[..])));
        assert_eq!(decode_datagram(&bad_len), None);
    }

    #[test]
    fn bind_and_connect_learn_each_other() {
        let path = tmp_path("bind");
        let _ = std::fs::remove_file(&path);
        let mut server = UnixDatagramWire::bind(&path).unwrap();
        server.transmit(b"too early", 0);
        assert_eq!(server.stats().send_errors, 1, "no peer yet");
        let mut client = UnixDatagramWire::connect(&path).unwrap();
        // The HELLO teaches the server its peer, and is no frame.
        assert_eq!(server.poll_rx(u64::MAX), None);
        server.transmit(b"to client", 100);
        assert_eq!(client.poll_rx(u64::MAX).unwrap().data, b"to client");
        client.transmit(b"to server", 200);
        assert_eq!(server.poll_rx(u64::MAX).unwrap().arrival_ns, 250);
        drop(server);
        assert!(!path.exists(), "socket file removed");
        // The peer is gone: sending fails quietly.
        client.transmit(b"into the void", 300);
        assert_eq!(client.stats().send_errors, 1);
    }

    #[test]
    fn loss_injection_applies_to_received_frames() {
        let (mut a, mut b) = UnixDatagramWire::pair().unwrap();
        b.cable().drop_next(1);
        a.transmit(&[1], 0);
        a.transmit(&[2], 0);
        assert_eq!(b.poll_rx(u64::MAX).unwrap().data, [2]);
        assert_eq!(b.stats().lost, 1);
    }
}
