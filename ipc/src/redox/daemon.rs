//! Readiness towards whoever started the daemon (reference §9), in the mode
//! [`crate::readiness::choose`] picks:
//!
//! - `INIT_NOTIFY`: set the fd close-on-exec, write `0` when ready;
//! - fork (a starter that waits for exit): the parent waits on a private pipe and exits with the
//!   byte the child writes when ready (1 if the child dies first);
//! - foreground (started by hand): nothing to signal.
//!
//! Using redox-daemon 0.1.3 under the newer spawner would leak the INIT_NOTIFY write end into
//! the forked child, which never writes it, and hang boot (§9 risk): hence this shim.
//! [`Readiness::start`] must run before the process starts any thread (fork copies only the
//! calling thread).

use std::ffi::c_int;

pub use crate::readiness::{INIT_NOTIFY, ReadinessMode};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DaemonError {
    #[error("{op}: {err}")]
    Os { op: &'static str, err: String },
}

fn last_os(op: &'static str) -> DaemonError {
    DaemonError::Os {
        op,
        err: std::io::Error::last_os_error().to_string(),
    }
}

/// Whether `fd` is an open descriptor of this process.
fn fd_is_open(fd: i32) -> bool {
    // Safety: F_GETFD reads the descriptor's flags; no memory is passed.
    unsafe { libc::fcntl(fd, libc::F_GETFD) >= 0 }
}

/// The pending readiness signal.
#[derive(Debug)]
pub struct Readiness {
    /// Where the byte goes (`None` in the foreground).
    fd: Option<c_int>,
    mode: ReadinessMode,
}

impl Readiness {
    /// Chooses the protocol from the environment and logs it. `starter_waits_for_exit`: the
    /// process was started by something that waits for it to exit (the older pcid-spawner).
    /// In the fork case this returns only in the child; the parent waits for the child's byte
    /// and exits the process.
    pub fn start(starter_waits_for_exit: bool) -> Result<Self, DaemonError> {
        let env = std::env::var(INIT_NOTIFY).ok();
        let choice = crate::readiness::choose(env.as_deref(), fd_is_open, starter_waits_for_exit);
        if let Some(why) = &choice.ignored {
            log::warn!("readiness: {why}; ignored");
        }
        log::info!("readiness: {}", choice.mode);
        match choice.mode {
            ReadinessMode::Notify(fd) => {
                // Safety: fcntl on a descriptor number; no memory is passed.
                if unsafe { libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC) } < 0 {
                    return Err(last_os("fcntl(INIT_NOTIFY)"));
                }
                Ok(Self {
                    fd: Some(fd),
                    mode: choice.mode,
                })
            }
            ReadinessMode::Fork => Ok(Self {
                fd: Some(fork_and_wait()?),
                mode: choice.mode,
            }),
            ReadinessMode::Foreground => Ok(Self {
                fd: None,
                mode: choice.mode,
            }),
        }
    }

    pub fn mode(&self) -> ReadinessMode {
        self.mode
    }

    /// Signals readiness (one `0` byte) and closes the descriptor. A starter that has gone
    /// away (EPIPE) is logged, not fatal: the daemon is ready either way.
    pub fn ready(self) -> Result<(), DaemonError> {
        let Some(fd) = self.fd else {
            log::info!("ready (nobody to notify)");
            return Ok(());
        };
        let byte = [0u8; 1];
        // Safety: writes one byte from `byte`, which outlives the call, to our descriptor.
        let n = unsafe { libc::write(fd, byte.as_ptr().cast(), 1) };
        let r = if n == 1 {
            log::debug!("readiness signalled ({})", self.mode);
            Ok(())
        } else {
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EPIPE) {
                log::warn!("readiness: the starter is gone ({e}); running on");
                Ok(())
            } else {
                Err(last_os("readiness write"))
            }
        };
        // Safety: the descriptor is ours and not used after this.
        unsafe { libc::close(fd) };
        r
    }
}

/// The fork protocol: returns the pipe's write end in the child; the parent never returns.
fn fork_and_wait() -> Result<c_int, DaemonError> {
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
            Ok(wr)
        }
        _child => {
            // Safety: closing our copy of the write end, so the read sees EOF when the child
            // exits without signalling.
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
            // Safety: ends the parent at once without running destructors or atexit handlers
            // that belong to the child's resources.
            unsafe { libc::_exit(status) }
        }
    }
}
