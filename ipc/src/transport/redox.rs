//! Redox transport, client side: a handle on a scheme served by the peer (DESIGN.md §2).
//!
//! The server (a driver) registers a scheme, e.g. `ptpdrv.pci-0000-03-00.0_igc`, and the client
//! opens `/scheme/<name>/ptp`. One `write` carries one whole request, one `read` returns one
//! whole message (the server's [`super::mailbox::Mailbox`]); a read of 0 bytes is end of file
//! (the server closed the conversation). The handle is opened `O_NONBLOCK`, so an empty
//! mailbox answers EAGAIN at once, and waiting is done here in an event queue over the handle,
//! a time-scheme timer (the timeout, §12) and a pipe (`shutdown` wakes a waiting reader).

use std::ffi::c_int;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use event::{EventFlags, EventQueue};
use libredox::Fd;
use libredox::errno;
use libredox::flag::{O_CLOEXEC, O_NONBLOCK, O_RDWR};

use super::{Transport, TransportError, check_send_len};
use crate::redox::timer::{Timer, mono_ns};
use crate::wire::MAX_MESSAGE;

const SRC_CONN: usize = 0;
const SRC_TIMER: usize = 1;
const SRC_WAKE: usize = 2;

/// How long a sender sleeps between attempts while the server's queue is full: sends are rare
/// and the server drains its queue in its event loop, so polling keeps the reader's event
/// queue to the reader alone.
const SEND_RETRY: Duration = Duration::from_millis(1);

fn io(what: &str, path: &str, e: libredox::error::Error) -> TransportError {
    TransportError::Io(format!("{what} {path}: {e}"))
}

/// errnos that mean the server side is gone.
fn is_disconnect(e: libredox::error::Error) -> bool {
    matches!(
        e.errno(),
        errno::EPIPE
            | errno::ECONNRESET
            | errno::ENOTCONN
            | errno::ESHUTDOWN
            | errno::EBADF
            | errno::ENODEV
    )
}

/// One connection to a scheme-served channel.
pub struct SchemeConn {
    fd: Fd,
    path: String,
    queue: EventQueue<usize>,
    timer: Timer,
    wake: [c_int; 2],
    down: AtomicBool,
    /// One waiting reader at a time owns the event queue.
    reader: Mutex<()>,
}

impl SchemeConn {
    /// Opens `path` (e.g. `/scheme/ptpdrv.pci-0000-03-00.0_igc/ptp`). A missing scheme or path
    /// gives `NotFound`, so a client can retry until the server is up.
    pub fn connect(path: &str) -> Result<Self, TransportError> {
        let fd = match Fd::open(path, O_RDWR | O_NONBLOCK | O_CLOEXEC, 0) {
            Ok(fd) => fd,
            Err(e) if matches!(e.errno(), errno::ENOENT | errno::ENODEV) => {
                return Err(TransportError::NotFound(format!("{path}: {e}")));
            }
            Err(e) if matches!(e.errno(), errno::EPERM | errno::EACCES) => {
                return Err(TransportError::PermissionDenied(format!("{path}: {e}")));
            }
            Err(e) => return Err(io("open", path, e)),
        };
        let queue = EventQueue::new().map_err(|e| io("event queue for", path, e))?;
        let timer = Timer::open().map_err(|e| io("timer for", path, e))?;
        let mut wake: [c_int; 2] = [-1; 2];
        // Safety: `wake` is a writable array of two c_ints, as pipe(2) requires.
        if unsafe { libc::pipe(wake.as_mut_ptr()) } != 0 {
            return Err(TransportError::Io(format!(
                "pipe for {path}: {}",
                std::io::Error::last_os_error()
            )));
        }
        let conn = Self {
            fd,
            path: path.to_string(),
            queue,
            timer,
            wake,
            down: AtomicBool::new(false),
            reader: Mutex::new(()),
        };
        for (raw, src) in [
            (conn.fd.raw(), SRC_CONN),
            (conn.timer.raw(), SRC_TIMER),
            (conn.wake[0] as usize, SRC_WAKE),
        ] {
            conn.queue
                .subscribe(raw, src, EventFlags::READ)
                .map_err(|e| io("subscribe", path, e))?;
        }
        Ok(conn)
    }

    pub fn path(&self) -> &str {
        &self.path
    }

    /// The handle's descriptor (a ring client passes its doorbells over it).
    pub fn raw(&self) -> usize {
        self.fd.raw()
    }

    fn check_up(&self) -> Result<(), TransportError> {
        if self.down.load(Ordering::Acquire) {
            Err(TransportError::Disconnected)
        } else {
            Ok(())
        }
    }

    /// Waits for an event on the handle, the timer or the wake pipe, at most until `deadline`.
    fn wait(&self, deadline: Option<u64>) -> Result<(), TransportError> {
        if let Some(d) = deadline {
            let now = mono_ns();
            if now >= d {
                return Err(TransportError::Timeout);
            }
            self.timer
                .ensure_by(d, now)
                .map_err(|e| io("arm timer for", &self.path, e))?;
        }
        match self.queue.next_event() {
            Ok(_) => Ok(()),
            Err(e) if e.is_interrupt() => Ok(()),
            Err(e) => Err(io("event queue of", &self.path, e)),
        }
    }
}

fn deadline(timeout: Option<Duration>) -> Option<u64> {
    timeout.map(|t| mono_ns().saturating_add(u64::try_from(t.as_nanos()).unwrap_or(u64::MAX)))
}

impl Transport for SchemeConn {
    fn send(&self, msg: &[u8], timeout: Option<Duration>) -> Result<(), TransportError> {
        check_send_len(msg)?;
        let deadline = deadline(timeout);
        loop {
            self.check_up()?;
            match self.fd.write(msg) {
                Ok(n) if n == msg.len() => return Ok(()),
                Ok(n) => {
                    return Err(TransportError::Io(format!(
                        "write {}: short write {n} of {}",
                        self.path,
                        msg.len()
                    )));
                }
                Err(e) if e.is_interrupt() => {}
                Err(e) if e.is_wouldblock() => {
                    if deadline.is_some_and(|d| mono_ns() >= d) {
                        return Err(TransportError::Timeout);
                    }
                    std::thread::sleep(SEND_RETRY);
                }
                Err(e) if e.errno() == errno::EMSGSIZE => {
                    return Err(TransportError::TooLarge(msg.len()));
                }
                Err(e) if is_disconnect(e) => return Err(TransportError::Disconnected),
                Err(e) => return Err(io("write", &self.path, e)),
            }
        }
    }

    fn recv(&self, buf: &mut Vec<u8>, timeout: Option<Duration>) -> Result<(), TransportError> {
        buf.clear();
        buf.resize(MAX_MESSAGE, 0);
        let deadline = deadline(timeout);
        let result = (|| {
            loop {
                self.check_up()?;
                match self.fd.read(buf) {
                    Ok(0) => return Err(TransportError::Disconnected),
                    Ok(n) => return Ok(n.min(MAX_MESSAGE)),
                    Err(e) if e.is_interrupt() => {}
                    Err(e) if e.is_wouldblock() => {
                        // A second concurrent reader polls instead of sharing the event queue.
                        match self.reader.try_lock() {
                            Ok(_guard) => self.wait(deadline)?,
                            Err(_) => {
                                if deadline.is_some_and(|d| mono_ns() >= d) {
                                    return Err(TransportError::Timeout);
                                }
                                std::thread::sleep(SEND_RETRY);
                            }
                        }
                    }
                    Err(e) if e.errno() == errno::EMSGSIZE => {
                        return Err(TransportError::TooLarge(MAX_MESSAGE + 1));
                    }
                    Err(e) if is_disconnect(e) => return Err(TransportError::Disconnected),
                    Err(e) => return Err(io("read", &self.path, e)),
                }
            }
        })();
        match result {
            Ok(n) => {
                buf.truncate(n);
                Ok(())
            }
            Err(e) => {
                buf.clear();
                Err(e)
            }
        }
    }

    fn shutdown(&self) {
        self.down.store(true, Ordering::Release);
        let byte = [1u8];
        // Safety: writes one byte from `byte` (alive for the call) to our own pipe; a full pipe
        // (EAGAIN) already holds a wake-up.
        let _ = unsafe { libc::write(self.wake[1], byte.as_ptr().cast(), 1) };
    }
}

impl Drop for SchemeConn {
    fn drop(&mut self) {
        for fd in self.wake {
            // Safety: both pipe ends are ours and nothing uses them after this.
            unsafe { libc::close(fd) };
        }
    }
}
