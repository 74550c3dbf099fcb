//! Linux host: IEEE 1588 management over a local Unix datagram socket, the way ptp4l offers
//! `/var/run/ptp4l` to `pmc -u`. Requests are answered from the engine's latest
//! [`MgmtSnapshot`](crate::ptp::manage::MgmtSnapshot); nothing is settable yet, so every SET
//! gets NOT_SUPPORTED whoever sends it.

use std::io::ErrorKind;
use std::os::unix::fs::FileTypeExt;
use std::os::unix::net::UnixDatagram;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

use crate::ptp::PtpStatusBoard;
use crate::ptp::manage::Outcome;
use crate::ptp::mgmt;

/// How long a receive waits before the loop looks at its stop flag.
const POLL: Duration = Duration::from_millis(200);
/// A requester that does not drain its socket is not waited for.
const SEND_TIMEOUT: Duration = Duration::from_millis(100);

/// What the server has done, for tests and diagnostics.
#[derive(Debug, Default)]
pub struct MgmtCounters {
    pub answered: AtomicU64,
    /// Requests that did not decode (dropped).
    pub malformed: AtomicU64,
    /// Requests for another domain or clock, or before the instance started (dropped).
    pub ignored: AtomicU64,
}

/// The running server; dropping it stops the thread and removes the socket file.
pub struct MgmtServer {
    path: PathBuf,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
    pub counters: Arc<MgmtCounters>,
}

impl MgmtServer {
    /// Binds `path` (replacing a stale socket file) and serves requests from `board`.
    pub fn start(path: &Path, board: PtpStatusBoard) -> Result<Self, String> {
        // A stale socket from an earlier run is replaced; any other file is left alone (and
        // the bind below fails on it).
        if std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_socket()) {
            let _ = std::fs::remove_file(path);
        }
        let sock = UnixDatagram::bind(path)
            .map_err(|e| format!("management socket {}: {e}", path.display()))?;
        sock.set_read_timeout(Some(POLL))
            .and_then(|()| sock.set_write_timeout(Some(SEND_TIMEOUT)))
            .map_err(|e| format!("management socket {}: {e}", path.display()))?;
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(MgmtCounters::default());
        let (s, c) = (stop.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("mgmt".into())
            .spawn(move || serve(&sock, &board, &s, &c))
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

fn serve(sock: &UnixDatagram, board: &PtpStatusBoard, stop: &AtomicBool, c: &MgmtCounters) {
    let mut buf = [0u8; 1500];
    while !stop.load(Ordering::Relaxed) {
        let (n, peer) = match sock.recv_from(&mut buf) {
            Ok(r) => r,
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => continue,
            Err(e) => {
                log::warn!("management socket: {e}");
                std::thread::sleep(POLL);
                continue;
            }
        };
        let req = match mgmt::parse(&buf[..n]) {
            Ok(r) => r,
            Err(e) => {
                c.malformed.fetch_add(1, Ordering::Relaxed);
                log::debug!("management request dropped: {e}");
                continue;
            }
        };
        let outcome = board.mgmt().map_or(Outcome::Ignore, |s| s.answer(&req));
        let (Outcome::Reply(replies), Some(to)) = (outcome, peer.as_pathname()) else {
            c.ignored.fetch_add(1, Ordering::Relaxed);
            continue;
        };
        for r in replies {
            if let Err(e) = sock.send_to(&r, to) {
                log::debug!("management reply to {}: {e}", to.display());
            }
        }
        c.answered.fetch_add(1, Ordering::Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replaces_a_stale_socket_but_never_another_file() {
        let dir = std::env::temp_dir().join(format!("ptpd-mgmt-sock-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("not-a-socket");
        std::fs::write(&file, b"keep").unwrap();
        assert!(MgmtServer::start(&file, PtpStatusBoard::new(1)).is_err());
        assert_eq!(std::fs::read(&file).unwrap(), b"keep");
        let stale = dir.join("ptp4l");
        drop(UnixDatagram::bind(&stale).unwrap());
        assert!(stale.exists());
        let server = MgmtServer::start(&stale, PtpStatusBoard::new(1)).unwrap();
        drop(server);
        assert!(!stale.exists());
        let _ = std::fs::remove_dir_all(&dir);
    }
}
