//! Linux host transport: Unix-domain SOCK_SEQPACKET sockets (DESIGN.md §2).
//!
//! SOCK_SEQPACKET keeps message boundaries, is connection-oriented (a peer that dies is seen at
//! once as EOF, unlike SOCK_DGRAM) and carries peer credentials (SO_PEERCRED), which is what the
//! clock scheme's privilege check uses.
//!
//! All sockets are CLOEXEC and non-blocking; waiting is done by [`crate::poll`] to a deadline, so a timeout bounds the whole call even across EINTR and spurious wake-ups, and
//! several threads may send on one socket concurrently without one blocking inside send(2) after
//! another took the space poll(2) announced.

use std::ffi::c_int;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileTypeExt;
use std::path::Path;
use std::time::{Duration, Instant};

use super::sockfile::SocketFile;
use super::{Transport, TransportError, check_send_len};
use crate::poll::PollFlags;
use crate::wire::MAX_MESSAGE;

/// Credentials of the process at the other end, as the kernel recorded them (SO_PEERCRED): for
/// an accepted connection the client at connect(2) time, for a client the server at listen(2).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct PeerCred {
    pub pid: i32,
    pub uid: u32,
    pub gid: u32,
}

fn os_err(what: &str, path: Option<&Path>, e: &io::Error) -> TransportError {
    match path {
        Some(p) => TransportError::Io(format!("{what} {}: {e}", p.display())),
        None => TransportError::Io(format!("{what}: {e}")),
    }
}

/// Converts a syscall's -1 into the errno as `io::Error`.
fn cvt(rc: c_int) -> io::Result<c_int> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A fresh non-blocking, close-on-exec SOCK_SEQPACKET socket.
fn new_socket() -> Result<OwnedFd, TransportError> {
    let ty = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
    // Safety: plain syscall with constant arguments; no memory is passed.
    let fd = cvt(unsafe { libc::socket(libc::AF_UNIX, ty, 0) })
        .map_err(|e| os_err("socket", None, &e))?;
    // Safety: `fd` was just returned by socket(2) and nothing else owns it.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// `path` as a `sockaddr_un` and its length.
fn sockaddr(path: &Path) -> Result<(libc::sockaddr_un, libc::socklen_t), TransportError> {
    // Safety: sockaddr_un is a plain C struct for which all-zero bytes are a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = path.as_os_str().as_bytes();
    // One byte stays for the terminating NUL (already zero).
    if bytes.is_empty() || bytes.len() >= addr.sun_path.len() || bytes.contains(&0) {
        return Err(TransportError::Io(format!(
            "socket path {} is empty, contains NUL or exceeds {} bytes",
            path.display(),
            addr.sun_path.len() - 1
        )));
    }
    for (d, &s) in addr.sun_path.iter_mut().zip(bytes) {
        *d = s as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + bytes.len() + 1;
    Ok((addr, len as libc::socklen_t))
}

/// `now + timeout`; `None` (wait forever) for no timeout or one too large to represent.
fn deadline(timeout: Option<Duration>) -> Option<Instant> {
    timeout.and_then(crate::poll::deadline_after)
}

/// Waits until `fd` reports one of `events` (or an error/hang-up, which the caller's next
/// syscall reports), at most until `deadline`. A deadline already past is a timeout without a
/// poll: the caller's retry found nothing to do, so a poll that says "ready" would spin.
fn wait(
    fd: BorrowedFd<'_>,
    events: PollFlags,
    deadline: Option<Instant>,
) -> Result<(), TransportError> {
    if deadline.is_some_and(|d| d <= Instant::now()) {
        return Err(TransportError::Timeout);
    }
    match crate::poll::wait_fd(fd, events, deadline) {
        Ok(None) => Err(TransportError::Timeout),
        Ok(Some(r)) if r.contains(PollFlags::NVAL) => {
            Err(TransportError::Io("poll: descriptor not open".into()))
        }
        Ok(Some(_)) => Ok(()),
        Err(e) => Err(os_err("poll", None, &e)),
    }
}

fn is_would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

/// errnos meaning the connection is gone.
fn is_disconnect(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EPIPE | libc::ECONNRESET | libc::ENOTCONN | libc::ESHUTDOWN)
    )
}

/// Who may connect to a listener, by its socket file's owner, group and mode (connecting needs
/// write permission on the file).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SocketAccess {
    /// Permission bits of the socket file.
    pub mode: u32,
    /// Owner to give the file (`None`: the creating process's uid).
    pub owner: Option<u32>,
    /// Group to give the file (`None`: the creating process's gid).
    pub group: Option<u32>,
}

impl SocketAccess {
    /// Anyone may connect: privilege is decided from the peer's credentials alone.
    pub const PUBLIC: Self = Self {
        mode: 0o666,
        owner: None,
        group: None,
    };
    /// Only the owner (and root) may connect.
    pub const OWNER_ONLY: Self = Self {
        mode: 0o600,
        owner: None,
        group: None,
    };
}

/// Removes a socket file at `path` that nothing listens on; fails if a listener answers or the
/// path is something else.
fn remove_stale(path: &Path) -> Result<(), TransportError> {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => match SeqpacketConn::connect(path) {
            Ok(_) => Err(TransportError::Io(format!(
                "bind {}: another process is listening there",
                path.display()
            ))),
            Err(TransportError::NotFound(_)) => match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(os_err("remove stale socket", Some(path), &e))
                }
                _ => Ok(()),
            },
            Err(e) => Err(e),
        },
        Ok(_) => Err(TransportError::Io(format!(
            "bind {}: exists and is not a socket",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(os_err("stat", Some(path), &e)),
    }
}

/// A listening SOCK_SEQPACKET socket bound to a path. Removes the socket file when dropped
/// (if the file is still the one it created).
#[derive(Debug)]
pub struct SeqpacketListener {
    fd: OwnedFd,
    /// The socket file; removed on drop if it is still ours.
    file: SocketFile,
}

impl SeqpacketListener {
    /// Binds and listens at `path` with a socket file anyone may connect to
    /// ([`SocketAccess::PUBLIC`]): privilege is decided from the peer's credentials (`accept`
    /// returns them), not from the file mode.
    pub fn bind(path: impl AsRef<Path>) -> Result<Self, TransportError> {
        Self::bind_with(path, SocketAccess::PUBLIC)
    }

    /// Binds and listens at `path`, its socket file owned and moded as `access` says.
    ///
    /// A socket file already at `path` is removed first if nothing listens on it (stale, from a
    /// process that died); if a live listener answers, or the path is not a socket, binding
    /// fails with `Io` rather than stealing or destroying it.
    ///
    /// Race-free: bind(2) creates the file with the process umask applied, which may be wider
    /// than `access`, and a client can connect in the window before a chmod. So the socket is
    /// bound inside a fresh 0700 directory beside `path` (only our uid and root can reach it
    /// there), given its owner, group and mode, and only then linked at `path` (link(2) never
    /// replaces a file that appeared meanwhile); the directory is removed.
    pub fn bind_with(path: impl AsRef<Path>, access: SocketAccess) -> Result<Self, TransportError> {
        let path = path.as_ref();
        sockaddr(path)?;
        remove_stale(path)?;
        let fd = new_socket()?;
        let file = SocketFile::bind_private(path, access, |tmp| {
            let (addr, len) = sockaddr(tmp).map_err(|e| io::Error::other(e.to_string()))?;
            // Safety: `addr` is a valid sockaddr_un of `len` bytes that outlives the call.
            cvt(unsafe { libc::bind(fd.as_raw_fd(), (&raw const addr).cast(), len) }).map(drop)
        })?;
        // Safety: plain syscall on a socket we own.
        cvt(unsafe { libc::listen(fd.as_raw_fd(), 64) })
            .map_err(|e| os_err("listen", Some(path), &e))?;
        Ok(SeqpacketListener { fd, file })
    }

    /// Accepts one connection and returns it with the client's credentials. `timeout: None`
    /// waits forever.
    pub fn accept(
        &self,
        timeout: Option<Duration>,
    ) -> Result<(SeqpacketConn, PeerCred), TransportError> {
        let deadline = deadline(timeout);
        loop {
            let flags = libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
            let (addr, len) = (std::ptr::null_mut(), std::ptr::null_mut());
            // Safety: null address/length pointers are allowed (the address is not wanted).
            match cvt(unsafe { libc::accept4(self.fd.as_raw_fd(), addr, len, flags) }) {
                Ok(fd) => {
                    // Safety: `fd` was just returned by accept4(2) and nothing else owns it.
                    let fd = unsafe { OwnedFd::from_raw_fd(fd) };
                    let conn = SeqpacketConn { fd };
                    let cred = conn.peer_cred()?;
                    return Ok((conn, cred));
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                // The client gave up before we accepted it: wait for the next one.
                Err(e) if e.raw_os_error() == Some(libc::ECONNABORTED) => {}
                Err(e) if is_would_block(&e) => wait(self.fd.as_fd(), PollFlags::IN, deadline)?,
                Err(e) => return Err(os_err("accept", Some(self.file.path()), &e)),
            }
        }
    }

    pub fn path(&self) -> &Path {
        self.file.path()
    }
}

impl AsRawFd for SeqpacketListener {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

/// One connected SOCK_SEQPACKET endpoint. Closes its descriptor when dropped.
#[derive(Debug)]
pub struct SeqpacketConn {
    fd: OwnedFd,
}

impl SeqpacketConn {
    /// Connects to a listener at `path`. No listener there (the path does not exist, or a stale
    /// socket file refuses) gives `TransportError::NotFound` naming the path and the errno; a
    /// socket file we may not write to gives `PermissionDenied`; a listener whose backlog is
    /// full gives `Io` (retry later) rather than blocking.
    pub fn connect(path: impl AsRef<Path>) -> Result<Self, TransportError> {
        let path = path.as_ref();
        let (addr, len) = sockaddr(path)?;
        let fd = new_socket()?;
        loop {
            // Safety: `addr` is a valid sockaddr_un of `len` bytes that outlives the call.
            match cvt(unsafe { libc::connect(fd.as_raw_fd(), (&raw const addr).cast(), len) }) {
                Ok(_) => return Ok(SeqpacketConn { fd }),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ECONNREFUSED)) => {
                    return Err(TransportError::NotFound(format!("{}: {e}", path.display())));
                }
                Err(e) if matches!(e.raw_os_error(), Some(libc::EACCES | libc::EPERM)) => {
                    let msg = format!("{}: {e}", path.display());
                    return Err(TransportError::PermissionDenied(msg));
                }
                Err(e) => return Err(os_err("connect", Some(path), &e)),
            }
        }
    }

    /// A connected pair (socketpair(2)), e.g. for a parent and the child it spawns.
    pub fn pair() -> Result<(Self, Self), TransportError> {
        let ty = libc::SOCK_SEQPACKET | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK;
        let mut fds = [-1 as c_int; 2];
        // Safety: `fds` is a writable array of two c_ints, as socketpair(2) requires.
        cvt(unsafe { libc::socketpair(libc::AF_UNIX, ty, 0, fds.as_mut_ptr()) })
            .map_err(|e| os_err("socketpair", None, &e))?;
        // Safety: both descriptors were just created by socketpair(2) and nothing else owns them.
        let (a, b) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        Ok((SeqpacketConn { fd: a }, SeqpacketConn { fd: b }))
    }

    /// The peer's credentials (SO_PEERCRED).
    pub fn peer_cred(&self) -> Result<PeerCred, TransportError> {
        super::sockfile::peer_cred(self.fd.as_fd())
    }
}

impl SeqpacketConn {
    /// The peer's supplementary groups as the kernel recorded them at connect(2)
    /// ([`super::sockfile::peer_groups`]).
    pub fn peer_groups(&self) -> Result<Vec<u32>, TransportError> {
        super::sockfile::peer_groups(self.fd.as_fd())
    }
}

impl AsRawFd for SeqpacketConn {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsFd for SeqpacketConn {
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }
}

impl Transport for SeqpacketConn {
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError> {
        check_send_len(msg)?;
        let deadline = deadline(timeout);
        let flags = libc::MSG_NOSIGNAL | libc::MSG_DONTWAIT;
        loop {
            // Safety: `msg` is a valid readable buffer of `msg.len()` bytes for the call.
            let rc =
                unsafe { libc::send(self.fd.as_raw_fd(), msg.as_ptr().cast(), msg.len(), flags) };
            if rc >= 0 {
                // SOCK_SEQPACKET sends whole records or nothing.
                return if rc as usize == msg.len() {
                    Ok(())
                } else {
                    Err(TransportError::Io(format!(
                        "send: short write {rc} of {}",
                        msg.len()
                    )))
                };
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                Some(libc::EMSGSIZE) => return Err(TransportError::TooLarge(msg.len())),
                _ if is_would_block(&e) => wait(self.fd.as_fd(), PollFlags::OUT, deadline)?,
                _ if is_disconnect(&e) => return Err(TransportError::Disconnected),
                _ => return Err(os_err("send", None, &e)),
            }
        }
    }

    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        buf.clear();
        buf.reserve(MAX_MESSAGE);
        let deadline = deadline(timeout);
        // MSG_TRUNC makes recv return the record's real length even when it did not fit, so an
        // oversized record is reported instead of being silently cut.
        let flags = libc::MSG_DONTWAIT | libc::MSG_TRUNC;
        loop {
            let spare = buf.spare_capacity_mut();
            // Safety: `spare` is writable memory of at least MAX_MESSAGE bytes (reserved above);
            // recv writes at most that many.
            let rc = unsafe {
                libc::recv(
                    self.fd.as_raw_fd(),
                    spare.as_mut_ptr().cast(),
                    MAX_MESSAGE,
                    flags,
                )
            };
            if rc > 0 {
                let n = rc as usize;
                if n > MAX_MESSAGE {
                    return Err(TransportError::TooLarge(n));
                }
                // Safety: the kernel initialised the first `n` bytes of the spare capacity.
                unsafe { buf.set_len(n) };
                return Ok(());
            }
            if rc == 0 {
                // EOF: the peer closed or either side shut down (empty records are never sent).
                return Err(TransportError::Disconnected);
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => {}
                _ if is_would_block(&e) => wait(self.fd.as_fd(), PollFlags::IN, deadline)?,
                _ if is_disconnect(&e) => return Err(TransportError::Disconnected),
                _ => return Err(os_err("recv", None, &e)),
            }
        }
    }

    fn shutdown(&self) {
        // Safety: plain syscall on a descriptor we own; it stays open (closed only on Drop), so
        // no other file can be hit through a reused descriptor number.
        let _ = unsafe { libc::shutdown(self.fd.as_raw_fd(), libc::SHUT_RDWR) };
    }
}

#[cfg(test)]
mod tests;
