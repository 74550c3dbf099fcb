//! Linux backing of a ring pair: the region is a sealed memfd, each side's bell an eventfd, and
//! both are passed with SCM_RIGHTS over the SOCK_SEQPACKET control connection, which then also
//! tells a sleeping side that its peer's process is gone (POLLHUP once every copy of the peer's
//! end is closed, which the kernel does when a process dies however it dies).

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::time::{Duration, Instant};

use super::layout::{self, Geometry};
use super::map::Mapping;
use super::{Bell, RingConfig, RingEndpoint, RingError, Wake, Woken, decode_setup, setup_message};
use crate::transport::SeqpacketConn;

/// Descriptors in the setup message: region, the attacher's data and space bells, the
/// creator's data and space bells.
const SETUP_FDS: usize = 5;

fn io_err(what: &str) -> RingError {
    RingError::Io(format!("{what}: {}", io::Error::last_os_error()))
}

/// Takes ownership of a descriptor a syscall just returned (or reports its errno).
fn owned(fd: libc::c_int, what: &str) -> Result<OwnedFd, RingError> {
    if fd < 0 {
        return Err(io_err(what));
    }
    // Safety: `fd` was just returned by the kernel to us and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

pub(super) fn new_eventfd() -> Result<OwnedFd, RingError> {
    // Safety: plain syscall with constant arguments.
    owned(
        unsafe { libc::eventfd(0, libc::EFD_CLOEXEC | libc::EFD_NONBLOCK) },
        "eventfd",
    )
}

/// A memfd of `len` bytes whose size is sealed (unless `!sealed`, for tests), so the attacher may map it without fearing
/// SIGBUS from a later shrink.
pub(super) fn new_region(len: usize, sealed: bool) -> Result<OwnedFd, RingError> {
    let flags = libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING;
    // Safety: the name is a NUL-terminated literal; constant flags.
    let fd = owned(
        unsafe { libc::memfd_create(c"ptp-ring".as_ptr(), flags) },
        "memfd_create",
    )?;
    // Safety: plain syscall on a descriptor we own.
    if unsafe { libc::ftruncate(fd.as_raw_fd(), len as libc::off_t) } < 0 {
        return Err(io_err("ftruncate ring region"));
    }
    if !sealed {
        return Ok(fd);
    }
    let seals = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    // Safety: plain fcntl on a descriptor we own.
    if unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_ADD_SEALS, seals) } < 0 {
        return Err(io_err("seal ring region"));
    }
    Ok(fd)
}

/// Polls `fds` until one reports an event or `deadline` passes (`Ok(false)`); EINTR-safe.
fn poll_until(fds: &mut [libc::pollfd], deadline: Option<Instant>) -> Result<bool, RingError> {
    loop {
        let ms = match deadline {
            None => -1,
            Some(d) => {
                let left = d.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Ok(false);
                }
                // Rounded up: never wake just before the deadline and spin.
                left.as_nanos()
                    .div_ceil(1_000_000)
                    .try_into()
                    .unwrap_or(libc::c_int::MAX)
            }
        };
        // Safety: `fds` is a valid, writable array of `fds.len()` pollfds for the call.
        let rc = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if rc > 0 {
            return Ok(true);
        }
        if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::Interrupted {
            return Err(io_err("poll"));
        }
    }
}

/// Adds one to an eventfd's counter. Never blocks (the descriptors are non-blocking; a full
/// counter already means "signalled").
fn bump(fd: BorrowedFd<'_>) -> Result<(), RingError> {
    let one = 1u64.to_ne_bytes();
    // Safety: writes 8 bytes from a live local buffer.
    let rc = unsafe { libc::write(fd.as_raw_fd(), one.as_ptr().cast(), one.len()) };
    if rc < 0 && io::Error::last_os_error().kind() != io::ErrorKind::WouldBlock {
        return Err(io_err("write eventfd"));
    }
    Ok(())
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
        let pfd = |fd: RawFd, events| libc::pollfd {
            fd,
            events,
            revents: 0,
        };
        // The control socket is watched for hang-up only (events 0): its data is not ours.
        let mut fds = [
            pfd(mine.as_raw_fd(), libc::POLLIN),
            pfd(self.control.as_raw_fd(), 0),
        ];
        if !poll_until(&mut fds, deadline)? {
            return Ok(Woken::Timeout);
        }
        if fds[0].revents & libc::POLLIN != 0 {
            let mut v = [0u8; 8];
            // Safety: reads at most 8 bytes into a live local buffer; resets the counter.
            unsafe { libc::read(mine.as_raw_fd(), v.as_mut_ptr().cast(), v.len()) };
            return Ok(Woken::Signal);
        }
        if fds[1].revents & (libc::POLLHUP | libc::POLLERR | libc::POLLNVAL) != 0 {
            return Err(RingError::PeerGone);
        }
        Err(RingError::Io(format!(
            "poll: unexpected events {:#x}/{:#x}",
            fds[0].revents, fds[1].revents
        )))
    }

    fn readable_fd(&self, w: Wake) -> Option<i32> {
        Some(self.mine[w as usize].as_raw_fd())
    }

    fn clear(&self, w: Wake) -> bool {
        let mut v = [0u8; 8];
        // Safety: reads at most 8 bytes into a live local buffer; the descriptor is
        // non-blocking, so an unsignalled bell returns EAGAIN at once.
        let rc = unsafe { libc::read(self.mine[w as usize].as_raw_fd(), v.as_mut_ptr().cast(), 8) };
        rc == 8
    }
}

/// The connection's descriptor, borrowed for as long as the connection.
pub(super) fn sock(conn: &SeqpacketConn) -> BorrowedFd<'_> {
    // Safety: the descriptor belongs to `conn`, which stays open for the borrow's lifetime.
    unsafe { BorrowedFd::borrow_raw(conn.as_raw_fd()) }
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
        region.as_raw_fd(),
        bell_b[0].as_raw_fd(),
        bell_b[1].as_raw_fd(),
        bell_a[0].as_raw_fd(),
        bell_a[1].as_raw_fd(),
    ];
    send_fds(sock(conn), &msg, &fds)?;
    let bell = EventfdBell {
        mine: bell_a,
        peer: bell_b,
        control: dup(sock(conn))?,
    };
    Ok(RingEndpoint::new(map, g, 0, cfg.spin, Box::new(bell)))
}

/// Receives a region offered by [`offer_ring`] over `conn` (waiting at most `timeout`), checks
/// it (setup message, sealed size, header) and returns side B. `spin` as in [`RingConfig`].
pub fn accept_ring(
    conn: &SeqpacketConn,
    timeout: Duration,
    spin: u32,
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
    Ok(RingEndpoint::new(map, g, 1, spin, Box::new(bell)))
}

/// The region's size, refused unless the creator can no longer shrink it (a shrink under our
/// mapping would turn our next access into SIGBUS) and it is within the geometry's bounds.
fn sealed_len(fd: BorrowedFd<'_>) -> Result<usize, RingError> {
    // Safety: plain fcntl on a descriptor we own.
    let seals = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GET_SEALS) };
    if seals < 0 || seals & libc::F_SEAL_SHRINK == 0 {
        return Err(RingError::Setup(
            "region is not a memfd sealed against shrinking".into(),
        ));
    }
    // Safety: `st` is a plain C struct for which all-zero bytes are valid; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // Safety: `st` is writable and outlives the call.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io_err("fstat ring region"));
    }
    let len = usize::try_from(st.st_size).unwrap_or(usize::MAX);
    layout::check_region_len(len)?;
    Ok(len)
}

/// A bell passed by the peer must never block our writes, whatever it really is.
fn set_nonblocking(fd: BorrowedFd<'_>) -> Result<(), RingError> {
    // Safety: plain fcntl calls on a descriptor we own.
    let ok = unsafe {
        let fl = libc::fcntl(fd.as_raw_fd(), libc::F_GETFL);
        fl >= 0 && libc::fcntl(fd.as_raw_fd(), libc::F_SETFL, fl | libc::O_NONBLOCK) >= 0
    };
    if !ok {
        return Err(io_err("set bell non-blocking"));
    }
    Ok(())
}

/// Room for the control message of SETUP_FDS descriptors (aligned for cmsghdr).
#[repr(C, align(8))]
struct CmsgBuf([u8; 64]);

fn cmsg_space(n: usize) -> usize {
    // Safety: CMSG_SPACE is pure arithmetic.
    unsafe { libc::CMSG_SPACE((n * std::mem::size_of::<RawFd>()) as u32) as usize }
}

pub(super) fn send_fds(
    sock: BorrowedFd<'_>,
    msg: &[u8],
    fds: &[RawFd; SETUP_FDS],
) -> Result<(), RingError> {
    let mut cbuf = CmsgBuf([0; 64]);
    let mut iov = libc::iovec {
        iov_base: msg.as_ptr() as *mut libc::c_void,
        iov_len: msg.len(),
    };
    // Safety: msghdr is a plain C struct for which all-zero bytes are valid.
    let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    hdr.msg_control = cbuf.0.as_mut_ptr().cast();
    hdr.msg_controllen = cmsg_space(SETUP_FDS) as _;
    let data_len = std::mem::size_of_val(fds);
    // Safety: the control buffer holds CMSG_SPACE(data_len) <= 64 bytes, so the first header
    // and its data fit; the fd bytes are copied from a live array.
    unsafe {
        let c = libc::CMSG_FIRSTHDR(&hdr);
        (*c).cmsg_level = libc::SOL_SOCKET;
        (*c).cmsg_type = libc::SCM_RIGHTS;
        (*c).cmsg_len = libc::CMSG_LEN(data_len as u32) as _;
        std::ptr::copy_nonoverlapping(fds.as_ptr().cast::<u8>(), libc::CMSG_DATA(c), data_len);
    }
    loop {
        // Safety: `hdr` points at live iovec and control buffers for the call.
        let rc = unsafe { libc::sendmsg(sock.as_raw_fd(), &hdr, libc::MSG_NOSIGNAL) };
        if rc >= 0 {
            return Ok(());
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => {
                let mut p = [libc::pollfd {
                    fd: sock.as_raw_fd(),
                    events: libc::POLLOUT,
                    revents: 0,
                }];
                let deadline = Instant::now().checked_add(Duration::from_secs(5));
                if !poll_until(&mut p, deadline)? {
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
    let mut cbuf = CmsgBuf([0; 64]);
    loop {
        let mut iov = libc::iovec {
            iov_base: data.as_mut_ptr().cast(),
            iov_len: data.len(),
        };
        // Safety: msghdr is a plain C struct for which all-zero bytes are valid.
        let mut hdr: libc::msghdr = unsafe { std::mem::zeroed() };
        hdr.msg_iov = &mut iov;
        hdr.msg_iovlen = 1;
        hdr.msg_control = cbuf.0.as_mut_ptr().cast();
        hdr.msg_controllen = cbuf.0.len() as _;
        let flags = libc::MSG_DONTWAIT | libc::MSG_CMSG_CLOEXEC;
        // Safety: `hdr` points at live, writable data and control buffers for the call.
        let rc = unsafe { libc::recvmsg(sock.as_raw_fd(), &mut hdr, flags) };
        if rc > 0 {
            let fds = take_fds(&hdr);
            if hdr.msg_flags & (libc::MSG_CTRUNC | libc::MSG_TRUNC) != 0 {
                return Err(RingError::Setup("setup message truncated".into()));
            }
            return Ok((data[..rc as usize].to_vec(), fds));
        }
        if rc == 0 {
            return Err(RingError::PeerGone);
        }
        let e = io::Error::last_os_error();
        match e.kind() {
            io::ErrorKind::Interrupted => {}
            io::ErrorKind::WouldBlock => {
                let mut p = [libc::pollfd {
                    fd: sock.as_raw_fd(),
                    events: libc::POLLIN,
                    revents: 0,
                }];
                if !poll_until(&mut p, deadline)? {
                    return Err(RingError::Timeout);
                }
            }
            _ => return Err(RingError::Io(format!("recvmsg ring setup: {e}"))),
        }
    }
}

/// Every SCM_RIGHTS descriptor in a received message, owned.
fn take_fds(hdr: &libc::msghdr) -> Vec<OwnedFd> {
    let mut out = Vec::new();
    // Safety: `hdr` was filled by recvmsg; the CMSG_* walkers stay within msg_controllen and
    // each SCM_RIGHTS payload holds (cmsg_len - CMSG_LEN(0)) / 4 descriptors the kernel just
    // installed in our table, which nothing else owns.
    unsafe {
        let mut c = libc::CMSG_FIRSTHDR(hdr);
        while !c.is_null() {
            if (*c).cmsg_level == libc::SOL_SOCKET && (*c).cmsg_type == libc::SCM_RIGHTS {
                let bytes = (*c).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let p = libc::CMSG_DATA(c).cast::<RawFd>();
                for i in 0..bytes / std::mem::size_of::<RawFd>() {
                    out.push(OwnedFd::from_raw_fd(p.add(i).read_unaligned()));
                }
            }
            c = libc::CMSG_NXTHDR(hdr, c);
        }
    }
    out
}
