//! A wire over a Unix datagram socket (Linux): one end per NIC model, so two driver processes
//! (or a driver and a benchmark tool) exchange frames with their departure instants.
//!
//! # Datagram format (version 2)
//!
//! Every datagram is a 16-byte header followed by the frame (from the destination MAC on, no
//! FCS). Integers are little-endian.
//!
//! | Bytes | Field |
//! |---|---|
//! | 0..4 | magic `b"PTPW"` |
//! | 4 | version, 2 |
//! | 5 | flags: b0 HELLO (no frame; announces the sender's address), b1 OFFER (no frame: the payload is the sender's [`LinkOffer`]); at most one of them; other bits ignored |
//! | 6..8 | payload length, u16 (must equal the datagram length − 16; 0 for HELLO, [`LinkOffer::LEN`] for OFFER) |
//! | 8..16 | departure instant, u64 ns of the sender's true time (CLOCK_MONOTONIC in real time; 0 for HELLO and OFFER) |
//!
//! Version 2 added OFFER (version 1 ignored b1 and would have taken an offer for a frame).
//! An end sends its offer when its PHY publishes a new one, and again to a peer it has just
//! learned (HELLO) or reconnected to; a send that fails is retried at the next poll. A HELLO
//! forgets the previous peer's offer.
//!
//! The receiving end computes arrival = departure + its [`Cable`]'s delay ± its jitter, and
//! draws the cable's random loss (the cable towards the receiver, default
//! [`Cable::DEFAULT_DELAY_NS`], no jitter, no loss). Anything else (short, wrong magic or
//! version, length mismatch) is counted in [`WireStats::malformed`] and dropped.

use std::io;
use std::os::fd::AsRawFd;
use std::os::linux::net::SocketAddrExt;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::{SocketAddr, UnixDatagram};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use ptp_ipc::transport::SocketAccess;
use ptp_ipc::transport::sockfile::{self, SocketFile};

use super::{ArrivalQueue, Cable, LinkOffer, WireFrame, WirePort, WireStats};

/// First four bytes of every datagram.
pub const MAGIC: [u8; 4] = *b"PTPW";
/// Header version this code writes and accepts.
pub const VERSION: u8 = 2;
/// Length of the datagram header.
pub const HEADER_LEN: usize = 16;

const FLAG_HELLO: u8 = 1;
const FLAG_OFFER: u8 = 2;
/// Largest frame the header can describe.
const MAX_FRAME: usize = u16::MAX as usize;
/// Datagrams read per [`WirePort::poll_rx`] call before handing out a frame, so a flooding
/// peer cannot keep the model in one call forever.
const DRAIN_PER_POLL: usize = 256;
/// Poll interval while datagrams keep arriving.
const BUSY_POLL_INTERVAL: Duration = Duration::from_micros(20);
/// Default [`UnixDatagramWire::set_poll_interval`].
const DEFAULT_POLL_INTERVAL: Duration = Duration::from_millis(1);

/// A sender's address as the bound end sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum PeerName {
    Path(PathBuf),
    /// Linux abstract namespace ([`UnixDatagramWire::connect`] binds one): no file, so no
    /// file mode keeps anyone from sending from or to it.
    Abstract(Vec<u8>),
}

impl PeerName {
    pub(crate) fn to_addr(&self) -> io::Result<SocketAddr> {
        match self {
            Self::Path(p) => SocketAddr::from_pathname(p),
            Self::Abstract(n) => SocketAddr::from_abstract_name(n),
        }
    }
}

/// Whom datagrams go to.
#[derive(Debug)]
enum Peer {
    /// The socket is connected (socketpair end, [`UnixDatagramWire::connect`]): the kernel
    /// delivers only what its peer sends.
    Connected,
    /// A bound socket: sends to the peer learned from the last HELLO whose sender the kernel
    /// says (SCM_CREDENTIALS) is root or `own_uid`, and takes frames only from that peer.
    Learned {
        own_uid: u32,
        peer: Option<(PeerName, SocketAddr)>,
    },
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
    _file: Option<SocketFile>,
    /// The path [`Self::connect`] reached, to reconnect when the bound end restarts (its new
    /// socket is a new file: datagrams to the old one are refused).
    connect_path: Option<PathBuf>,
    /// Host monotonic time of the last reconnect attempt (attempts are rate-limited).
    last_reconnect: Option<std::time::Instant>,
    /// A reconnect's HELLO could not be sent: send it before the next frame (the bound end
    /// takes frames only from a peer that said HELLO).
    hello_due: bool,
    /// This end's last published link offer.
    offer: Option<LinkOffer>,
    /// The peer has not been sent [`Self::offer`] yet (no peer known, or the send failed).
    offer_due: bool,
    /// The peer's last offer; `None` until it sends one.
    partner: Option<LinkOffer>,
}

/// Reconnect attempts to a vanished bound end are at most this frequent.
const RECONNECT_INTERVAL: Duration = Duration::from_millis(100);

/// What a valid datagram carries.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Datagram<'a> {
    /// A frame and its departure instant.
    Frame(u64, &'a [u8]),
    /// A connecting end's greeting: it teaches the bound end where to send.
    Hello,
    /// An end's autonegotiation offer.
    Offer(LinkOffer),
}

/// Encodes one datagram (`None` if the frame is longer than the header can describe).
pub fn encode_datagram(frame: &[u8], departure_ns: u64) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(HEADER_LEN + frame.len());
    encode_into(&mut out, frame, departure_ns, 0).then_some(out)
}

/// Decodes one datagram into (departure_ns, frame); `None` if malformed, a HELLO or an OFFER.
pub fn decode_datagram(d: &[u8]) -> Option<(u64, &[u8])> {
    match decode_any(d)? {
        Datagram::Frame(dep, frame) => Some((dep, frame)),
        Datagram::Hello | Datagram::Offer(_) => None,
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

/// What a valid datagram carries; `None` if malformed.
/// A HELLO datagram, as [`UnixDatagramWire::connect`] sends it (departure 0, no frame).
pub fn encode_hello() -> Vec<u8> {
    let mut hello = Vec::with_capacity(HEADER_LEN);
    encode_into(&mut hello, &[], 0, FLAG_HELLO);
    hello
}

/// What a valid datagram carries, HELLO and OFFER included; `None` if malformed: the decoding
/// every datagram a [`UnixDatagramWire`] reads goes through (public for the fuzz target).
pub fn decode_any(d: &[u8]) -> Option<Datagram<'_>> {
    let (hdr, frame) = d.split_at_checked(HEADER_LEN)?;
    if hdr[0..4] != MAGIC || hdr[4] != VERSION {
        return None;
    }
    let len = u16::from_le_bytes([hdr[6], hdr[7]]) as usize;
    let dep = u64::from_le_bytes(hdr[8..16].try_into().ok()?);
    if len != frame.len() {
        return None;
    }
    match hdr[5] & (FLAG_HELLO | FLAG_OFFER) {
        0 => Some(Datagram::Frame(dep, frame)),
        FLAG_HELLO if len == 0 => Some(Datagram::Hello),
        FLAG_OFFER => LinkOffer::from_bytes(frame).map(Datagram::Offer),
        _ => None,
    }
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
            _file: None,
            connect_path: None,
            last_reconnect: None,
            hello_due: false,
            offer: None,
            offer_due: false,
            partner: None,
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

    /// Binds a socket at `path`, its file mode 0600 from the moment it exists (the lab runs
    /// every process as one uid). It sends to the peer that last said HELLO, if the kernel
    /// says that sender is root or this process's uid, and takes frames only from that peer
    /// (others are counted in [`WireStats::foreign`]); until a HELLO, transmitted frames are
    /// dropped and counted in [`WireStats::send_errors`]. A socket file left by a process
    /// that died is replaced; a live one (`AddrInUse`) or another kind of file is not. The
    /// socket file is removed when the wire is dropped.
    pub fn bind(path: impl AsRef<Path>) -> io::Result<Self> {
        let (sock, file) = bind_owner_only(path.as_ref())?;
        // Safety: geteuid has no preconditions.
        let own_uid = unsafe { libc::geteuid() };
        let mut w = Self::with_socket(
            sock,
            Peer::Learned {
                own_uid,
                peer: None,
            },
        )?;
        w._file = Some(file);
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
        self.sock.send(&encode_hello()).map(|_| ())
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
        if self.sock.connect(path).is_err() {
            return false;
        }
        self.hello_due = self.hello().is_err();
        if self.hello_due {
            return false;
        }
        // A new bound end: it has not heard our offer, and we have not heard its.
        self.partner = None;
        self.offer_due = self.offer.is_some();
        self.send_offer();
        true
    }

    /// Sends this end's offer if the peer has not had it yet; it stays due if the send fails
    /// (or no peer is known), for the next poll to retry.
    fn send_offer(&mut self) {
        let Some(offer) = self.offer.filter(|_| self.offer_due) else {
            return;
        };
        let mut d = Vec::with_capacity(HEADER_LEN + LinkOffer::LEN);
        encode_into(&mut d, &offer.to_bytes(), 0, FLAG_OFFER);
        let sent = match &self.peer {
            Peer::Connected => self.sock.send(&d),
            Peer::Learned {
                peer: Some((_, to)),
                ..
            } => self.sock.send_to_addr(&d, to),
            Peer::Learned { peer: None, .. } => return,
        };
        self.offer_due = sent.is_err();
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

    /// Whether a datagram from `from`, sent by `uid`, is taken. A HELLO is (and teaches its
    /// address) only from root or our own uid; a frame only from the learned peer. On a
    /// connected socket the kernel has already checked the sender.
    fn admit(
        peer: &mut Peer,
        stats: &mut WireStats,
        hello: bool,
        from: Option<PeerName>,
        uid: Option<u32>,
    ) -> bool {
        let Peer::Learned { own_uid, peer } = peer else {
            return true;
        };
        let ok = if hello {
            let trusted = uid.is_some_and(|u| u == 0 || u == *own_uid);
            match from.map(|f| f.to_addr().map(|a| (f, a))) {
                Some(Ok(learned)) if trusted => {
                    *peer = Some(learned);
                    true
                }
                _ => false,
            }
        } else {
            from.is_some() && peer.as_ref().map(|(n, _)| n) == from.as_ref()
        };
        if !ok {
            stats.foreign += 1;
        }
        ok
    }

    /// Reads every datagram waiting in the socket (bounded per call) into the queue.
    fn drain(&mut self) {
        self.busy = false;
        for _ in 0..DRAIN_PER_POLL {
            let (n, from, uid) = match self.peer {
                Peer::Connected => match self.sock.recv(&mut self.rx_buf) {
                    Ok(n) => (n, None, None),
                    Err(_) => return,
                },
                Peer::Learned { .. } => match recv_with_cred(&self.sock, &mut self.rx_buf) {
                    Ok(r) => r,
                    Err(_) => return,
                },
            };
            self.busy = true;
            let Some(d) = self.rx_buf.get(..n) else {
                return;
            };
            let Some(datagram) = decode_any(d) else {
                self.stats.malformed += 1;
                continue;
            };
            let hello = datagram == Datagram::Hello;
            if !Self::admit(&mut self.peer, &mut self.stats, hello, from, uid) {
                continue;
            }
            let (dep, frame) = match datagram {
                Datagram::Frame(dep, frame) => (dep, frame),
                Datagram::Hello => {
                    // A (new) peer: it has not heard our offer; its own follows its HELLO.
                    self.partner = None;
                    self.offer_due = self.offer.is_some();
                    continue;
                }
                Datagram::Offer(o) => {
                    self.partner = Some(o);
                    continue;
                }
            };
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
        if self.hello_due {
            self.hello_due = self.hello().is_err();
        }
        let mut sent = match &self.peer {
            Peer::Connected => self.sock.send(&self.tx_buf),
            Peer::Learned {
                peer: Some((_, to)),
                ..
            } => self.sock.send_to_addr(&self.tx_buf, to),
            Peer::Learned { peer: None, .. } => Err(io::ErrorKind::NotConnected.into()),
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
        self.send_offer();
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

    fn publish(&mut self, offer: LinkOffer) {
        if self.offer != Some(offer) {
            self.offer = Some(offer);
            self.offer_due = true;
        }
        self.send_offer();
    }

    fn partner(&self) -> Option<LinkOffer> {
        self.partner
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

/// A datagram socket bound at `path` with file mode 0600 from the moment it exists, the
/// sender's credentials attached to every datagram it receives; a socket file a dead process
/// left is replaced, a live one (`AddrInUse`) or another kind of file is not. The file goes
/// with the returned [`SocketFile`]. The lab's wire and the pin wire (`crate::pinwire`).
pub(crate) fn bind_owner_only(path: &Path) -> io::Result<(UnixDatagram, SocketFile)> {
    let live = |p: &Path| UnixDatagram::unbound().is_ok_and(|s| s.connect(p).is_ok());
    if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) && live(path) {
        return Err(io::ErrorKind::AddrInUse.into());
    }
    sockfile::remove_stale(path, live).map_err(io::Error::other)?;
    let mut bound = None;
    let file = SocketFile::bind_private(path, SocketAccess::OWNER_ONLY, |tmp| {
        bound = Some(UnixDatagram::bind(tmp)?);
        Ok(())
    })
    .map_err(io::Error::other)?;
    let sock = bound.ok_or_else(|| io::Error::other("socket not bound"))?;
    pass_credentials(&sock)?;
    Ok((sock, file))
}

/// Asks the kernel to attach the sender's credentials to every datagram received.
fn pass_credentials(sock: &UnixDatagram) -> io::Result<()> {
    let on: libc::c_int = 1;
    // Safety: the fd is a live socket owned by `sock`; the option value is a c_int that
    // outlives the call, and its size is passed with it.
    let r = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PASSCRED,
            (&raw const on).cast(),
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// One datagram (non-blocking): its length, the sender's address (`None`: unnamed) and the
/// sender's uid from SCM_CREDENTIALS (`None` if the kernel attached none).
pub(crate) fn recv_with_cred(
    sock: &UnixDatagram,
    buf: &mut [u8],
) -> io::Result<(usize, Option<PeerName>, Option<u32>)> {
    // Safety: sockaddr_un is a plain C struct; all-zero is a valid (empty) value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    // Safety: msghdr is a plain C struct (null pointers, zero lengths); filled in below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    // u64 elements: cmsghdr alignment. Room for one SCM_CREDENTIALS (32 bytes) and more.
    let mut control = [0u64; 16];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    msg.msg_name = (&raw mut addr).cast();
    msg.msg_namelen = size_of::<libc::sockaddr_un>() as libc::socklen_t;
    msg.msg_iov = &raw mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = size_of_val(&control);
    // Safety: every pointer in `msg` refers to a live local (`addr`, `iov` over `buf`,
    // `control`) with the length given beside it; recvmsg writes only within those.
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &raw mut msg, libc::MSG_DONTWAIT) };
    let n = usize::try_from(n).map_err(|_| io::Error::last_os_error())?;
    Ok((n, peer_name(&addr, msg.msg_namelen), sender_uid(&msg)))
}

/// A sender's address: a pathname, an abstract name, or `None` (unnamed).
fn peer_name(addr: &libc::sockaddr_un, len: libc::socklen_t) -> Option<PeerName> {
    let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
    let len = (len as usize).checked_sub(base)?.min(addr.sun_path.len());
    let raw: Vec<u8> = addr.sun_path[..len].iter().map(|&c| c as u8).collect();
    match raw.split_first() {
        None => None,
        Some((0, name)) => Some(PeerName::Abstract(name.to_vec())),
        Some(_) => {
            let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
            let path = std::ffi::OsStr::from_bytes(&raw[..end]);
            Some(PeerName::Path(PathBuf::from(path)))
        }
    }
}

/// The uid in a received message's SCM_CREDENTIALS, if any.
fn sender_uid(msg: &libc::msghdr) -> Option<u32> {
    // Safety: `msg` was filled by recvmsg, so its control buffer and length describe the
    // control messages the kernel wrote; CMSG_FIRSTHDR/NXTHDR stay within them, and a
    // ucred is read (unaligned) only from a header of that type whose length covers it.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(msg);
        while !c.is_null() {
            let h = &*c;
            let need = libc::CMSG_LEN(size_of::<libc::ucred>() as u32) as usize;
            if h.cmsg_level == libc::SOL_SOCKET
                && h.cmsg_type == libc::SCM_CREDENTIALS
                && h.cmsg_len as usize >= need
            {
                let cred: libc::ucred = std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                return Some(cred.uid);
            }
            c = libc::CMSG_NXTHDR(msg, c);
        }
    }
    None
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
        b.publish(offer(4));
        b.transmit(b"one", 10);
        assert!(a.poll_rx(u64::MAX).is_some());
        assert_eq!(a.partner(), Some(offer(4)));
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
        assert_eq!(
            a2.partner(),
            Some(offer(4)),
            "the reconnect resent the offer"
        );
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
        bad_version[4] = 1;
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

    fn offer(generation: u16) -> LinkOffer {
        LinkOffer {
            autoneg: true,
            modes: crate::wire::LinkModes::FULL_100,
            pause: 3,
            generation,
        }
    }

    #[test]
    fn offers_cross_a_pair_and_are_not_frames() {
        let (mut a, mut b) = UnixDatagramWire::pair().unwrap();
        assert_eq!(b.partner(), None, "nothing published yet");
        a.publish(offer(1));
        assert_eq!(b.poll_rx(u64::MAX), None, "an offer is no frame");
        assert_eq!(b.partner(), Some(offer(1)));
        assert_eq!(a.partner(), None);
        // Publishing the same offer again sends nothing new; a new one replaces it.
        a.publish(offer(1));
        a.publish(offer(2));
        a.transmit(b"frame", 0);
        assert_eq!(b.poll_rx(u64::MAX).unwrap().data, b"frame");
        assert_eq!(b.partner(), Some(offer(2)));
        let s = b.stats();
        assert_eq!((s.received, s.malformed), (1, 0));
    }

    #[test]
    fn a_bound_end_sends_its_offer_to_each_peer_that_says_hello() {
        let path = tmp_path("offer");
        let _ = std::fs::remove_file(&path);
        let mut server = UnixDatagramWire::bind(&path).unwrap();
        server.publish(offer(7));
        assert!(server.offer_due, "no peer yet: kept for later");
        let mut client = UnixDatagramWire::connect(&path).unwrap();
        client.publish(offer(9));
        assert_eq!(server.poll_rx(u64::MAX), None);
        assert_eq!(server.partner(), Some(offer(9)));
        assert_eq!(client.poll_rx(u64::MAX), None);
        assert_eq!(
            client.partner(),
            Some(offer(7)),
            "sent once the HELLO taught the peer"
        );
        // The client restarts: its HELLO makes the server forget the old offer and resend its own.
        drop(client);
        let mut again = UnixDatagramWire::connect(&path).unwrap();
        assert_eq!(server.poll_rx(u64::MAX), None);
        assert_eq!(server.partner(), None, "the new peer has published nothing");
        assert_eq!(again.poll_rx(u64::MAX), None);
        assert_eq!(again.partner(), Some(offer(7)));
    }

    #[test]
    fn malformed_offers_are_counted_and_change_nothing() {
        let (raw, peer) = UnixDatagram::pair().unwrap();
        let mut w = UnixDatagramWire::from_socket(peer).unwrap();
        let mut good = Vec::new();
        encode_into(&mut good, &offer(3).to_bytes(), 0, FLAG_OFFER);
        let mut short = Vec::new();
        encode_into(&mut short, &offer(3).to_bytes()[..3], 0, FLAG_OFFER);
        let mut unknown_mode = good.clone();
        unknown_mode[HEADER_LEN] = 0x80;
        let mut unknown_flag = good.clone();
        unknown_flag[HEADER_LEN + 1] = 0x10;
        let mut both = good.clone();
        both[5] = FLAG_OFFER | FLAG_HELLO;
        for d in [&short, &unknown_mode, &unknown_flag, &both] {
            raw.send(d).unwrap();
        }
        assert_eq!(w.poll_rx(u64::MAX), None);
        assert_eq!(w.partner(), None);
        assert_eq!(w.stats().malformed, 4);
        raw.send(&good).unwrap();
        assert_eq!(w.poll_rx(u64::MAX), None);
        assert_eq!(w.partner(), Some(offer(3)));
        assert_eq!(decode_datagram(&good), None, "no frame");
    }

    fn wait_for(what: &str, mut f: impl FnMut() -> bool) {
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while !f() {
            assert!(std::time::Instant::now() < deadline, "never: {what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    fn mode(p: &Path) -> u32 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(p).unwrap().permissions().mode() & 0o777
    }

    #[test]
    fn a_restarted_connecting_end_is_learned_and_strangers_are_not_heard() {
        let path = tmp_path("relearn");
        let _ = std::fs::remove_file(&path);
        let mut server = UnixDatagramWire::bind(&path).unwrap();
        assert_eq!(mode(&path), 0o600, "the lab runs every process as one uid");
        let old = UnixDatagramWire::connect(&path).unwrap();
        assert_eq!(server.poll_rx(u64::MAX), None);
        // The connecting end's NIC restarts: a new socket, a new address, a new HELLO.
        drop(old);
        let mut new = UnixDatagramWire::connect(&path).unwrap();
        assert_eq!(server.poll_rx(u64::MAX), None);
        server.transmit(b"to the new one", 10);
        wait_for("the new peer hears the bound end", || {
            new.poll_rx(u64::MAX).is_some()
        });
        // Strangers that said no HELLO (even of our uid) are not heard, unnamed or named.
        let frame = encode_datagram(b"stranger", 0).unwrap();
        UnixDatagram::unbound()
            .unwrap()
            .send_to(&frame, &path)
            .unwrap();
        let name = format!("ptp-wire-test/{}/stranger", std::process::id());
        let named =
            UnixDatagram::bind_addr(&SocketAddr::from_abstract_name(name).unwrap()).unwrap();
        named.send_to(&frame, &path).unwrap();
        new.transmit(b"from the peer", 20);
        assert_eq!(server.poll_rx(u64::MAX).unwrap().data, b"from the peer");
        assert_eq!(server.poll_rx(u64::MAX), None);
        assert_eq!(server.stats().foreign, 2);
    }

    /// A sockaddr_un for `name` (abstract if `abstract_ns`), built before a fork.
    fn raw_addr(name: &[u8], abstract_ns: bool) -> (libc::sockaddr_un, libc::socklen_t) {
        // Safety: all-zero bytes are a valid sockaddr_un.
        let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        a.sun_family = libc::AF_UNIX as libc::sa_family_t;
        let skip = usize::from(abstract_ns);
        assert!(name.len() + skip < a.sun_path.len());
        for (d, &s) in a.sun_path[skip..].iter_mut().zip(name) {
            *d = s as libc::c_char;
        }
        let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + skip + name.len();
        (a, (len + usize::from(!abstract_ns)) as libc::socklen_t)
    }

    /// Runs `sleep` as uid/gid `uid` after it sent `datagrams` to `to` from an abstract
    /// address of its own (which the sleeping process keeps). The errno of a failed send comes
    /// back as the spawn's error.
    fn send_as(uid: u32, to: &Path, datagrams: Vec<Vec<u8>>) -> io::Result<std::process::Child> {
        use std::os::unix::process::CommandExt;
        let (dst, dst_len) = raw_addr(to.as_os_str().as_bytes(), false);
        let me = format!("ptp-wire-test/{}/uid{uid}", std::process::id());
        let (src, src_len) = raw_addr(me.as_bytes(), true);
        let mut cmd = std::process::Command::new("sleep");
        cmd.arg("5").uid(uid).gid(uid);
        // Safety: the closure runs in the forked child after the uid switch and before exec;
        // it makes only async-signal-safe syscalls (socket, bind, sendto) on data prepared
        // before the fork, and allocates nothing.
        unsafe {
            cmd.pre_exec(move || {
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_DGRAM, 0);
                if fd < 0 || libc::bind(fd, (&raw const src).cast(), src_len) < 0 {
                    return Err(io::Error::last_os_error());
                }
                for d in &datagrams {
                    let to = (&raw const dst).cast();
                    if libc::sendto(fd, d.as_ptr().cast(), d.len(), 0, to, dst_len) < 0 {
                        return Err(io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        cmd.spawn()
    }

    /// Issue 23: the bound end answered whoever sent last, and its mode came from the umask.
    #[test]
    fn a_hello_or_frame_from_another_uid_does_not_redirect_the_bound_end() {
        // Safety: geteuid has no preconditions.
        let euid = unsafe { libc::geteuid() };
        assert_eq!(
            euid, 0,
            "needs root (sends as uid 65534); run the tests as root, or skip this one with \
             `-- --skip a_hello_or_frame_from_another_uid`"
        );
        let path = tmp_path("foreign");
        let _ = std::fs::remove_file(&path);
        let mut server = UnixDatagramWire::bind(&path).unwrap();
        let mut client = UnixDatagramWire::connect(&path).unwrap();
        assert_eq!(server.poll_rx(u64::MAX), None);
        let mut hello = Vec::new();
        encode_into(&mut hello, &[], 0, FLAG_HELLO);
        let intruder = || vec![hello.clone(), encode_datagram(b"intruder", 0).unwrap()];
        // The socket file keeps other uids out...
        assert_eq!(mode(&path), 0o600);
        let refused = send_as(65534, &path, intruder()).unwrap_err();
        assert_eq!(refused.raw_os_error(), Some(libc::EACCES), "{refused}");
        // ...and were it open to them (an abstract address, a wider mode), the kernel's word
        // on the sender still decides: uid 65534's HELLO teaches nothing, its frame is dropped.
        std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o666))
            .unwrap();
        let mut held = send_as(65534, &path, intruder()).expect("sent as uid 65534");
        let mut got = Vec::new();
        wait_for("the intruder's datagrams read", || {
            got.extend(server.poll_rx(u64::MAX));
            server.stats().foreign == 2
        });
        assert!(got.is_empty(), "took a frame from uid 65534: {got:?}");
        server.transmit(b"to the client", 10);
        wait_for("the legitimate peer still hears the bound end", || {
            client.poll_rx(u64::MAX).is_some()
        });
        assert_eq!(server.stats().send_errors, 0);
        let _ = held.kill();
        let _ = held.wait();
    }
}
