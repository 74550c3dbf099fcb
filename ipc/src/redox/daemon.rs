//! Readiness towards whoever started the daemon (reference §9).
//!
//! - Newer init / pcid-spawner **[U]** pass a pipe fd in `INIT_NOTIFY` and wait for one byte:
//!   no fork, set the fd close-on-exec, write `0` when ready.
//! - Older ones (redox-daemon 0.1 protocol) wait for the started process to exit: fork; the
//!   parent waits on a private pipe and exits with the byte the child writes when ready (1 if
//!   the child dies first).
//!
//! Using redox-daemon 0.1.3 under the newer spawner would leak the INIT_NOTIFY write end into
//! the forked child, which never writes it, and hang boot (§9 risk): hence this shim.
//! [`Readiness::start`] must run before the process starts any thread (fork copies only the
//! calling thread).

use std::ffi::c_int;

/// The environment variable of the newer readiness protocol.
pub const INIT_NOTIFY: &str = "INIT_NOTIFY";

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaemonError {
    #[error("{INIT_NOTIFY}={0:?} is not a descriptor")]
    BadNotifyFd(String),
    #[error("{op}: {err}")]
    Os { op: &'static str, err: String },
}

fn last_os(op: &'static str) -> DaemonError {
    DaemonError::Os {
        op,
        err: std::io::Error::last_os_error().to_string(),
    }
}

/// The pending readiness signal.
#[derive(Debug)]
pub struct Readiness {
    fd: c_int,
    how: &'static str,
}

impl Readiness {
    /// Chooses the protocol. In the fork case this returns only in the child; the parent waits
    /// for the child's byte and exits the process.
    pub fn start() -> Result<Self, DaemonError> {
        if let Ok(v) = std::env::var(INIT_NOTIFY) {
            let fd: c_int = v
                .trim()
                .parse()
                .map_err(|_| DaemonError::BadNotifyFd(v.clone()))?;
            // Safety: fcntl on a descriptor number; no memory is passed.
            if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
                return Err(last_os("fcntl(INIT_NOTIFY)"));
            }
            return Ok(Self {
                fd,
                how: INIT_NOTIFY,
            });
        }
        let mut fds: [c_int; 2] = [-1; 2];
        // Safety: `fds` is a writable array of two c_ints, as pipe(2) requires.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(last_os("pipe"));
        }
        let [rd, wr] = fds;
        // Safety: fork(2) takes no arguments; the caller guarantees no other thread runs.
        match unsafe { libc::fork() } {
            -1 => Err(last_os("fork")),
            0 => {
                // Safety: closing our copy of the read end, which nothing else uses.
                unsafe { libc::close(rd) };
                Ok(Self {
                    fd: wr,
                    how: "fork",
                })
            }
            _child => {
                // Safety: closing our copy of the write end, so the read sees EOF when the
                // child exits without signalling.
                unsafe { libc::close(wr) };
                let mut byte = [1u8; 1];
                let n = loop {
                    // Safety: reads at most one byte into `byte`, which outlives the call.
                    let n = unsafe { libc::read(rd, byte.as_mut_ptr().cast(), 1) };
                    if n < 0
                        && std::io::Error::last_os_error().kind() == std::io::ErrorKind::Interrupted
                    {
                        continue;
                    }
                    break n;
                };
                let status = if n == 1 { c_int::from(byte[0]) } else { 1 };
                // Safety: ends the parent at once without running destructors or atexit
                // handlers that belong to the child's resources.
                unsafe { libc::_exit(status) }
            }
        }
    }

    /// Signals readiness (one `0` byte) and closes the descriptor.
    pub fn ready(self) -> Result<(), DaemonError> {
        let byte = [0u8; 1];
        // Safety: writes one byte from `byte`, which outlives the call, to our descriptor.
        let n = unsafe { libc::write(self.fd, byte.as_ptr().cast(), 1) };
        let r = if n == 1 {
            Ok(())
        } else {
            Err(last_os("readiness write"))
        };
        // Safety: the descriptor is ours and not used after this.
        unsafe { libc::close(self.fd) };
        log::debug!("readiness signalled ({})", self.how);
        r
    }
}
