//! Linux backing of a ring pair: the region is a sealed memfd, each side's bell an eventfd, and
//! both are passed with SCM_RIGHTS over the SOCK_SEQPACKET control connection, which then also
//! tells a sleeping side that its peer's process is gone (POLLHUP once every copy of the peer's
//! end is closed, which the kernel does when a process dies however it dies).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::time::{Duration, Instant};

use super::layout::{self, Geometry};
use super::map::Mapping;
use super::{Bell, RingConfig, RingEndpoint, RingError, Wake, Woken, decode_setup, setup_message};
use crate::poll::{PollFd, PollFlags};
use crate::transport::SeqpacketConn;

/// Descriptors in the setup message: region, the attacher's data and space bells, the
/// creator's data and space bells.
const SETUP_FDS: usize = 5;

pub(super) fn new_eventfd() -> Result<OwnedFd, RingError> {
    use rustix::event::EventfdFlags;
    rustix::event::eventfd(0, EventfdFlags::CLOEXEC | EventfdFlags::NONBLOCK)
        .map_err(|e| RingError::Io(format!("eventfd: {e}")))
}

/// A sealed memfd of `len` bytes ([`crate::shm::memfd`]; unsealed for tests).
pub(super) fn new_region(len: usize, sealed: bool) -> Result<OwnedFd, RingError> {
    crate::shm::memfd("ptp-ring", len, sealed)
        .map_err(|e| RingError::Io(format!("ring region: {e}")))
}

/// Polls `fds` until one reports an event or `deadline` passes (`Ok(false)`).
fn poll_until(fds: &mut [PollFd<'_>], deadline: Option<Instant>) -> Result<bool, RingError> {
    crate::poll::poll_until(fds, deadline)
        .map(|n| n > 0)
        .map_err(|e| RingError::Io(format!("poll: {e}")))
}

/// Adds one to an eventfd's counter. Never blocks (the descriptors are non-blocking; a full
/// counter already means "signalled").
fn bump(fd: BorrowedFd<'_>) -> Result<(), RingError> {
    match rustix::io::write(fd, &1u64.to_ne_bytes()) {
        Ok(_) | Err(rustix::io::Errno::AGAIN) => Ok(()),
        Err(e) => Err(RingError::Io(format!("write eventfd: {e}"))),
    }
}

/// The Linux bells: our two eventfds (data, space), the peer's two, and a duplicate of the
/// control socket whose hang-up means the peer process is gone.
struct EventfdBell {
    mine: [OwnedFd; 2],
    peer: [OwnedFd; 2],
    control: OwnedFd,
}

impl Bell for EventfdBell {
    fn ring_peer(&self, w: Wake) -> Result<(), RingError> {
        bump(self.peer[w as usize].as_fd())
    }

    fn ring_own(&self, w: Wake) {
        let _ = bump(self.mine[w as usize].as_fd());
    }

    fn ring_self(&self) {
        for fd in &self.mine {
            let _ = bump(fd.as_fd());
        }
    }

    fn wait(&self, w: Wake, timeout: Option<Duration>) -> Result<Woken, RingError> {
        let mine = &self.mine[w as usize];
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        // The control socket is watched for hang-up only (no events): its data is not ours.
        let mut fds = [
            PollFd::new(mine, PollFlags::IN),
            PollFd::new(&self.control, PollFlags::empty()),
        ];
        if !poll_until(&mut fds, deadline)? {
            return Ok(Woken::Timeout);
        }
        let (own, control) = (fds[0].revents(), fds[1].revents());
        if own.contains(PollFlags::IN) {
            // Resets the counter; an empty one (a racing clear) is as good.
            let _ = rustix::io::read(mine, &mut [0u8; 8]);
            return Ok(Woken::Signal);
        }
        if control.intersects(PollFlags::HUP | PollFlags::ERR | PollFlags::NVAL) {
            return Err(RingError::PeerGone);
        }
        Err(RingError::Io(format!(
            "poll: unexpected events {own:?}/{control:?}"
        )))
    }

    fn readable_fd(&self, w: Wake) -> Option<i32> {
        Some(self.mine[w as usize].as_raw_fd())
    }

    fn clear(&self, w: Wake) -> bool {
        // The descriptor is non-blocking: an unsignalled bell returns EAGAIN at once.
        rustix::io::read(&self.mine[w as usize], &mut [0u8; 8]) == Ok(8)
    }
}

/// The connection's descriptor, borrowed for as long as the connection.
pub(super) fn sock(conn: &SeqpacketConn) -> BorrowedFd<'_> {
    conn.as_fd()
}

fn dup(fd: BorrowedFd<'_>) -> Result<OwnedFd, RingError> {
    fd.try_clone_to_owned()
        .map_err(|e| RingError::Io(format!("dup control socket: {e}")))
}

/// Creates a region for `cfg`, passes it with both bells over `conn`, and returns side A. The
/// peer attaches with [`accept_ring`]; `conn` stays usable for control traffic.
pub fn offer_ring(conn: &SeqpacketConn, cfg: RingConfig) -> Result<RingEndpoint, RingError> {
    let g = Geometry::new(cfg.geometry.slot_size, cfg.geometry.slot_count)?;
    let len = g.region_len();
    let region = new_region(len, true)?;
    let map = Mapping::map(region.as_fd(), len)?;
    layout::init(map.control(), g);
    let bell_a = [new_eventfd()?, new_eventfd()?];
    let bell_b = [new_eventfd()?, new_eventfd()?];
    let msg = setup_message(len);
    let fds = [
        region.as_fd(),
        bell_b[0].as_fd(),
        bell_b[1].as_fd(),
        bell_a[0].as_fd(),
        bell_a[1].as_fd(),
    ];
    send_fds(sock(conn), &msg, &fds)?;
    let bell = EventfdBell {
        mine: bell_a,
        peer: bell_b,
        control: dup(sock(conn))?,
    };
    Ok(RingEndpoint::new(map, g, 0, cfg.busy_poll, Box::new(bell)))
}

/// Receives a region offered by [`offer_ring`] over `conn` (waiting at most `timeout`), checks
/// it (setup message, sealed size, header) and returns side B. `busy_poll` as in [`RingConfig`].
pub fn accept_ring(
    conn: &SeqpacketConn,
    timeout: Duration,
    busy_poll: Duration,
) -> Result<RingEndpoint, RingError> {
    let deadline = Instant::now().checked_add(timeout);
    let (msg, mut fds) = recv_fds(sock(conn), deadline)?;
    // The length it announces is not trusted: the sealed memfd's own size is what is mapped.
    decode_setup(&msg)?;
    if fds.len() != SETUP_FDS {
        return Err(RingError::Setup(format!(
            "{} descriptors, want {SETUP_FDS}",
            fds.len()
        )));
    }
    // In order: region, our data and space bells, the peer's (length checked above).
    let mut it = fds.drain(..);
    let mut next = || {
        it.next()
            .ok_or_else(|| RingError::Setup("descriptors missing".into()))
    };
    let (region, mine, peer) = (next()?, [next()?, next()?], [next()?, next()?]);
    let len = sealed_len(region.as_fd())?;
    for fd in mine.iter().chain(&peer) {
        set_nonblocking(fd.as_fd())?;
    }
    let map = Mapping::map(region.as_fd(), len)?;
    let g = layout::validate(map.control(), map.len())?;
    let bell = EventfdBell {
        mine,
        peer,
        control: dup(sock(conn))?,
    };
    Ok(RingEndpoint::new(map, g, 1, busy_poll, Box::new(bell)))
}

/// The region's size, refused unless the creator can no longer shrink it (a shrink under our
/// mapping would turn our next access into SIGBUS) and it is within the geometry's bounds.
fn sealed_len(fd: BorrowedFd<'_>) -> Result<usize, RingError> {
    let sealed =
        rustix::fs::fcntl_get_seals(fd).is_ok_and(|s| s.contains(rustix::fs::SealFlags::SHRINK));
    if !sealed {
        return Err(RingError::Setup(
            "region is not a memfd sealed against shrinking".into(),
        ));
    }
    let st = rustix::fs::fstat(fd).map_err(|e| RingError::Io(format!("fstat ring region: {e}")))?;
    let len = usize::try_from(st.st_size).unwrap_or(usize::MAX);
    layout::check_region_len(len)?;
    Ok(len)
}

/// A bell passed by the peer must never block our writes, whatever it really is.
fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<(), RingError> {
    use rustix::fs::OFlags;
    rustix::fs::fcntl_getfl(fd)
        .and_then(|fl| rustix::fs::fcntl_setfl(fd, fl | OFlags::NONBLOCK))
        .map_err(|e| RingError::Io(format!("set bell non-blocking: {e}")))
}

pub(super) fn send_fds(
    sock: BorrowedFd<'_>,
    msg: &[u8],
    fds: &[BorrowedFd<'_>; SETUP_FDS],
) -> Result<(), RingError> {
    let deadline = Instant::now().checked_add(Duration::from_secs(5));
    loop {
        let e = match crate::fdpass::send_with_fds(sock, msg, fds, true) {
            Ok(_) => return Ok(()),
            Err(e) => e,
        };
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => {
                if !poll_until(&mut [PollFd::new(&sock, PollFlags::OUT)], deadline)? {
                    return Err(RingError::Timeout);
                }
            }
            _ if e.raw_os_error() == Some(libc::EPIPE) => return Err(RingError::PeerGone),
            _ => return Err(RingError::Io(format!("sendmsg ring setup: {e}"))),
        }
    }
}

/// Receives one setup record and the descriptors passed with it (each owned at once, so none
/// leaks whatever is wrong with the message).
fn recv_fds(
    sock: BorrowedFd<'_>,
    deadline: Option<Instant>,
) -> Result<(Vec<u8>, Vec<OwnedFd>), RingError> {
    let mut data = [0u8; 64];
    loop {
        let e = match crate::fdpass::recv_with_fds(sock, &mut data, true) {
            Ok(r) if r.truncated => {
                return Err(RingError::Setup("setup message truncated".into()));
            }
            Ok(r) if r.len == 0 => return Err(RingError::PeerGone),
            Ok(r) => return Ok((data[..r.len].to_vec(), r.fds)),
            Err(e) => e,
        };
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => {
                if !poll_until(&mut [PollFd::new(&sock, PollFlags::IN)], deadline)? {
                    return Err(RingError::Timeout);
                }
            }
            _ => return Err(RingError::Io(format!("recvmsg ring setup: {e}"))),
        }
    }
}
