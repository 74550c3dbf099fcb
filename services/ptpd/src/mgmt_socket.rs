//! Linux host: IEEE 1588 management over a local Unix datagram socket, the way ptp4l offers
//! `/var/run/ptp4l` to `pmc -u`. GETs are answered from the engine's latest
//! [`MgmtSnapshot`](crate::ptp::manage::MgmtSnapshot); SETs go to the engine thread, which
//! carries out what the configuration allows for a privileged peer: root or one of
//! `privileged_uids`, as the clock scheme decides, from the sender's credentials that the
//! kernel attaches to each datagram (SO_PASSCRED / SCM_CREDENTIALS: a datagram socket has no
//! connected peer for SO_PEERCRED).

use std::collections::HashMap;
use std::io::ErrorKind;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::mgmt_access::SetAccess;
use crate::mgmt_access::answer;
use crate::ptp::PtpStatusBoard;
use crate::ptp::manage::Outcome;
use crate::ptp::mgmt;
use crate::scheme::FloodLimit;

/// How long a receive waits before the loop looks at its stop flag.
const POLL: Duration = Duration::from_millis(200);
/// A requester that does not drain its socket is not waited for.
const SEND_TIMEOUT: Duration = Duration::from_millis(100);
/// Requests per second one requester (a bound socket path) is answered; what it sends beyond
/// that, after a burst, is dropped before it is decoded. pmc sends a handful per run.
const SENDER_RATE_PER_S: u32 = 1_000;
const SENDER_BURST: u32 = 100;
/// Requesters tracked at once; when more have sent, the table starts afresh (bounded memory).
const MAX_SENDERS: usize = 1_024;

/// What the server has done, for tests and diagnostics.
#[derive(Debug, Default)]
pub struct MgmtCounters {
    pub answered: AtomicU64,
    /// Requests that did not decode (dropped).
    pub malformed: AtomicU64,
    /// Requests for another domain or clock, or before the instance started (dropped).
    pub ignored: AtomicU64,
    /// SETs the engine did not answer in time (dropped).
    pub engine_timeouts: AtomicU64,
    /// Requests beyond their sender's flood limit (dropped undecoded).
    pub flood_dropped: AtomicU64,
}

/// Counts one more `what` and logs the total at powers of two (a flood cannot flood the log).
fn count(c: &AtomicU64, what: &str) {
    let n = c.fetch_add(1, Ordering::Relaxed) + 1;
    if n.is_power_of_two() {
        log::info!("management socket: {n} {what} so far");
    }
}

/// The running server; dropping it stops the thread and removes the socket file.
pub struct MgmtServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub counters: Arc<MgmtCounters>,
}

impl MgmtServer {
    /// Binds `path` (replacing a stale socket file) and serves requests from `board`; SETs
    /// through `set` (without it every SET gets NOT_SUPPORTED).
    pub fn start(
        path: &Path,
        board: PtpStatusBoard,
        set: Option<SetAccess>,
    ) -> Result<Self, String> {
        // A stale socket from an earlier run is replaced; any other file is left alone (and
        // the bind below fails on it).
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(path);
        }
        let sock = UnixDatagram::bind(path)
            .map_err(|e| format!("management socket {}: {e}", path.display()))?;
        // Anyone may send GETs (SETs are checked on the sender's kernel credentials), so the
        // mode is 0666 whatever the umask: under 022 bind left 0755 and no other user could
        // send (issue 23).
        std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o666))
            .map_err(|e| format!("management socket {}: chmod: {e}", path.display()))?;
        sock.set_read_timeout(Some(POLL))
            .and_then(|()| sock.set_write_timeout(Some(SEND_TIMEOUT)))
            .and_then(|()| pass_credentials(&sock))
            .map_err(|e| format!("management socket {}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(MgmtCounters::default());
        let (s, c) = (stop.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("mgmt".into())
            .spawn(move || serve(&sock, &board, set.as_ref(), &s, &c))
            .map_err(|e| format!("management thread: {e}"))?;
        log::info!("management (pmc -u) on {}", path.display());
        Ok(Self {
            path: path.to_owned(),
            stop,
            thread: Some(thread),
            counters,
        })
    }
}

impl Drop for MgmtServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::remove_file(&self.path);
    }
}

fn serve(
    sock: &UnixDatagram,
    board: &PtpStatusBoard,
    set: Option<&SetAccess>,
    stop: &AtomicBool,
    c: &MgmtCounters,
) {
    let mut buf = [0u8; 1500];
    let mut senders: HashMap<PathBuf, FloodLimit> = HashMap::new();
    while !stop.load(Ordering::Relaxed) {
        let (n, peer, uid) = match recv_with_uid(sock, &mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => {
                log::warn!("management socket: {e}");
                std::thread::sleep(POLL);
                continue;
            }
        };
        if !within_limit(&mut senders, peer.as_deref()) {
            count(&c.flood_dropped, "requests dropped by the flood limit");
            continue;
        }
        let req = match mgmt::parse(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                count(&c.malformed, "malformed requests dropped");
                log::debug!("management request dropped: {e}");
                continue;
            }
        };
        let Some(outcome) = answer(req, uid, board, set) else {
            c.engine_timeouts.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        let (Outcome::Reply(replies), Some(to)) = (outcome, peer) else {
            c.ignored.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        for r in replies {
            if let Err(e) = sock.send_to(&r, &to) {
                log::debug!("management reply to {}: {e}", to.display());
            }
        }
        c.answered.fetch_add(1, Ordering::Relaxed);
    }
}

/// Whether a request from `peer` is within its flood limit. Unnamed senders cannot be answered
/// and are not tracked (they are counted as ignored after decoding).
fn within_limit(senders: &mut HashMap<PathBuf, FloodLimit>, peer: Option<&Path>) -> bool {
    let Some(p) = peer else { return true };
    let now = Instant::now();
    if senders.len() >= MAX_SENDERS && !senders.contains_key(p) {
        senders.clear();
    }
    senders
        .entry(p.to_owned())
        .or_insert_with(|| FloodLimit::new(SENDER_RATE_PER_S, SENDER_BURST, now))
        .admit(now)
}

/// Asks the kernel to attach the sender's credentials to every datagram received.
fn pass_credentials(sock: &UnixDatagram) -> std::io::Result<()> {
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
        Err(std::io::Error::last_os_error())
    }
}

/// One datagram: its length, the sender's bound path (`None`: unnamed, cannot be answered)
/// and the sender's uid from SCM_CREDENTIALS (`None` if the kernel attached none).
fn recv_with_uid(
    sock: &UnixDatagram,
    buf: &mut [u8],
) -> std::io::Result<(usize, Option<PathBuf>, Option<u32>)> {
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
    let n = unsafe { libc::recvmsg(sock.as_raw_fd(), &raw mut msg, 0) };
    let n = usize::try_from(n).map_err(|_| std::io::Error::last_os_error())?;
    Ok((n, peer_path(&addr, msg.msg_namelen), sender_uid(&msg)))
}

/// The pathname of a sender's address (abstract and unnamed addresses have none).
fn peer_path(addr: &libc::sockaddr_un, len: libc::socklen_t) -> Option<PathBuf> {
    let base = std::mem::offset_of!(libc::sockaddr_un, sun_path);
    let len = (len as usize).checked_sub(base)?.min(addr.sun_path.len());
    let raw: Vec<u8> = addr.sun_path[..len].iter().map(|&c| c as u8).collect();
    let end = raw.iter().position(|&b| b == 0).unwrap_or(raw.len());
    (end > 0).then(|| PathBuf::from(std::ffi::OsStr::from_bytes(&raw[..end])))
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

    #[test]
    fn a_flooding_sender_is_limited_and_the_table_stays_bounded() {
        let mut senders = HashMap::new();
        let flooder = Path::new("/tmp/flooder");
        let admitted = (0..10 * SENDER_BURST)
            .filter(|_| within_limit(&mut senders, Some(flooder)))
            .count();
        // The burst, and what the rate allows while this loop runs (well under a second).
        assert!(
            admitted >= SENDER_BURST as usize && admitted < 2 * SENDER_BURST as usize,
            "{admitted}"
        );
        // Another sender is not affected.
        assert!(within_limit(&mut senders, Some(Path::new("/tmp/pmc"))));
        for i in 0..3 * MAX_SENDERS {
            within_limit(&mut senders, Some(&PathBuf::from(format!("/tmp/s{i}"))));
        }
        assert!(senders.len() <= MAX_SENDERS);
    }

    #[test]
    fn replaces_a_stale_socket_but_never_another_file() {
        let dir = std::env::temp_dir().join(format!("ptpd-mgmt-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-a-socket");
        std::fs::write(&file, b"keep").unwrap();
        assert!(MgmtServer::start(&file, PtpStatusBoard::new(1), None).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        let stale = dir.join("ptp4l");
        drop(UnixDatagram::bind(&stale).unwrap());
        assert!(stale.exists());
        let server = MgmtServer::start(&stale, PtpStatusBoard::new(1), None).unwrap();
        // Issue 23: the mode came from the umask (0755 under 022: only root could send GETs).
        let mode = std::fs::metadata(&stale).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o666, "anyone may send GETs");
        drop(server);
        assert!(!stale.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
