//! The driver channel on Linux hosts: who gets in, the hello, and which connection drives the
//! NIC (DESIGN.md §2).
//!
//! - A peer whose SO_PEERCRED/SO_PEERGROUPS the [`ChannelAccess`] rule refuses gets
//!   `Closed { PermissionDenied }` and is closed at once (logged).
//! - An allowed peer must send `Hello` first, within [`HELLO_TIMEOUT`]; until then it holds
//!   nothing. Otherwise it gets `Closed { NoHello }`.
//! - After its hello a connection gets igcd's hello (`Restarted`, `Link`) and replaces the one
//!   that drove the NIC so far, which gets `Closed { Replaced }`: a stale or hung ptpd cannot
//!   keep a new one out, and a connection that never says hello cannot block anyone.
//!
//! - A `HelloRing` instead of `Hello` asks for a shared-memory ring pair (issue 16): the driver
//!   offers it on the connection before anything else, then sends its hello and all later
//!   messages over the ring and reads requests from it; the socket only tells either side that
//!   the other's process is gone (`ptp_ipc::transport::DriverTransport`).
//!
//! One thread (the main one) polls the listener, the connections waiting for their hello and
//! the current connection together, so accepting never waits on a peer and requests reach the
//! device from one thread only, as before. A current ring connection takes part in that poll
//! through its data bell: the loop announces its sleep on the ring (`prepare_sleep`, which
//! re-checks the ring), polls the bell's eventfd with the sockets, then withdraws the
//! announcement (`end_sleep`), so a request published at any moment either is seen by the
//! re-check or rings the bell. While requests keep coming the loop drains the ring without a
//! syscall. Two threads send on a ring (the IRQ thread's events, this thread's replies); a full
//! ring makes each wait at most [`SEND_TIMEOUT`], then the message is dropped, counted in the
//! ring's `full_drops` and logged.

use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use ptp_ipc::ring::{Geometry, RingConfig, offer_ring};
use ptp_ipc::transport::{
    Channel, ChannelError, DriverTransport, PeerCred, SeqpacketListener, Transport, TransportError,
};
use ptp_ipc::{CloseReason, DriverEvent, DriverRequest, DriverToPtpd, PtpdToDriver};
use ptp_pci::PciFunction;

use super::Error;
use super::access::ChannelAccess;
use super::requests::{SEND_TIMEOUT, Step, answer, ring_geometry};
use super::{Device, EventSink};
use crate::family::Family;

pub type DriverChannel = Channel<DriverTransport, DriverToPtpd, PtpdToDriver>;

/// How long a new connection may take to say hello.
pub const HELLO_TIMEOUT: Duration = Duration::from_secs(2);
/// Connections waiting for their hello at once; more are refused with `Busy`.
const MAX_PENDING: usize = 8;
/// The longest poll: an idle loop still goes round.
const IDLE_WAIT: Duration = Duration::from_secs(1);
/// Requests served from the current connection per round, so accepting is never starved.
const BATCH: usize = 64;
/// A closing notice is best effort: the peer may not be reading.
const CLOSE_TIMEOUT: Duration = Duration::from_millis(50);

/// The connection that drives the NIC, shared with the IRQ thread (events).
#[derive(Default)]
pub struct Sink {
    conn: Mutex<Option<Arc<DriverChannel>>>,
}

impl Sink {
    fn current(&self) -> MutexGuard<'_, Option<Arc<DriverChannel>>> {
        self.conn.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl EventSink for Sink {
    fn send(&self, ev: DriverEvent) {
        let conn = self.current().clone();
        if let Some(c) = conn
            && let Err(e) = c.send(&DriverToPtpd::Event(ev), Some(SEND_TIMEOUT))
        {
            log::warn!("event not delivered: {e}");
        }
    }
}

/// Tells the peer why, then closes the connection.
fn close(chan: &DriverChannel, reason: CloseReason) {
    let _ = chan.send(
        &DriverToPtpd::Event(DriverEvent::Closed { reason }),
        Some(CLOSE_TIMEOUT),
    );
    chan.shutdown();
    // Closing a Unix socket with unread messages makes the peer's next read fail with
    // ECONNRESET before it gets our notice. After the shutdown nothing new can arrive, so
    // reading off what is queued (bounded by the socket buffer) lets the notice through.
    let mut buf = Vec::new();
    while chan
        .transport()
        .recv(&mut buf, Some(Duration::ZERO))
        .is_ok()
    {}
}

/// An allowed connection that has not said hello yet.
struct Pending {
    chan: DriverChannel,
    cred: PeerCred,
    deadline: Instant,
}

/// The channel's state on the main thread.
struct Server<'a, F: PciFunction, Fam: Family> {
    dev: &'a Device<F, Fam>,
    sink: &'a Sink,
    access: &'a ChannelAccess,
    generation: u64,
    pending: Vec<Pending>,
    /// Who holds the current connection, for logs.
    holder: Option<PeerCred>,
}

/// Serves the driver channel on `listener` until accepting fails (an error) or `term` is set.
pub fn serve<F: PciFunction, Fam: Family>(
    dev: &Device<F, Fam>,
    listener: &SeqpacketListener,
    access: &ChannelAccess,
    sink: &Sink,
    generation: u64,
    term: &AtomicBool,
) -> Result<(), Error> {
    let mut s = Server {
        dev,
        sink,
        access,
        generation,
        pending: Vec::new(),
        holder: None,
    };
    loop {
        if term.load(Ordering::Relaxed) {
            return Ok(());
        }
        let current = sink.current().clone();
        let mut fds = vec![listener.as_raw_fd()];
        fds.extend(
            s.pending
                .iter()
                .map(|p| p.chan.transport().conn().as_raw_fd()),
        );
        fds.extend(current.iter().map(|c| c.transport().conn().as_raw_fd()));
        let now = Instant::now();
        let mut wait = s
            .pending
            .iter()
            .map(|p| p.deadline.saturating_duration_since(now))
            .fold(IDLE_WAIT, Duration::min);
        // A ring: sleep only after announcing it (or not at all when requests wait).
        let ring = current.as_ref().and_then(|c| c.transport().ring());
        let asleep = match ring.map(|r| r.prepare_sleep()) {
            Some(Ok(true)) => {
                fds.extend(ring.and_then(|r| r.readable_fd()));
                true
            }
            Some(_) => {
                wait = Duration::ZERO;
                false
            }
            None => false,
        };
        let ready = poll_readable(&fds, wait);
        if asleep && let Some(r) = ring {
            r.end_sleep();
        }
        let ready = ready?;
        // fds: the listener, the `n` pending connections, then the current one's socket (and
        // its ring's bell).
        let n = s.pending.len();
        if ready[0] {
            s.accept(listener)?;
        }
        s.settle_pending(&ready[1..=n]);
        if let Some(c) = &current {
            if ring.is_some() {
                // The ring is checked every round (no syscall); its socket only for hang-up.
                if ready[n + 1] {
                    s.check_ring_socket(c);
                }
                s.serve_ready(c);
            } else if ready[n + 1] {
                s.serve_ready(c);
            }
        }
    }
}

/// Which of `fds` are readable (or hung up, or in error: their next call says so), waiting at
/// most `wait`. EINTR counts as nothing ready.
fn poll_readable(fds: &[RawFd], wait: Duration) -> Result<Vec<bool>, Error> {
    use ptp_ipc::poll::{PollFd, PollFlags, poll_once};
    // Safety: every descriptor belongs to the listener, a connection or a ring this loop holds
    // for the whole call, so each stays open while borrowed.
    let fds: Vec<BorrowedFd<'_>> = fds
        .iter()
        .map(|&fd| unsafe { BorrowedFd::borrow_raw(fd) })
        .collect();
    let mut p: Vec<PollFd<'_>> = fds
        .iter()
        .map(|fd| PollFd::new(fd, PollFlags::IN))
        .collect();
    poll_once(&mut p, wait).map_err(|e| Error::Other(format!("poll driver channel: {e}")))?;
    Ok(p.iter().map(|p| !p.revents().is_empty()).collect())
}

impl<F: PciFunction, Fam: Family> Server<'_, F, Fam> {
    /// Accepts one connection: refuses it, or queues it for its hello.
    fn accept(&mut self, listener: &SeqpacketListener) -> Result<(), Error> {
        let (conn, cred) = match listener.accept(Some(Duration::ZERO)) {
            Ok(c) => c,
            Err(TransportError::Timeout) => return Ok(()),
            Err(e) => return Err(e.into()),
        };
        let chan = DriverChannel::new(DriverTransport::Socket(conn));
        if !permitted(self.access, &chan, cred) {
            log::warn!(
                "driver channel: refused pid {} (uid {}, gid {}): allowed are {}",
                cred.pid,
                cred.uid,
                cred.gid,
                self.access
            );
            close(&chan, CloseReason::PermissionDenied);
        } else if self.pending.len() >= MAX_PENDING {
            log::warn!(
                "driver channel: refused pid {}: {MAX_PENDING} connections wait for their hello",
                cred.pid
            );
            close(&chan, CloseReason::Busy);
        } else {
            self.pending.push(Pending {
                chan,
                cred,
                deadline: Instant::now() + HELLO_TIMEOUT,
            });
        }
        Ok(())
    }

    /// Promotes the pending connections that said hello, closes those that said anything else
    /// or nothing in time.
    fn settle_pending(&mut self, ready: &[bool]) {
        let now = Instant::now();
        let pending = std::mem::take(&mut self.pending);
        for (i, p) in pending.into_iter().enumerate() {
            let outcome = if ready.get(i) == Some(&true) {
                match p.chan.recv(Some(Duration::ZERO)) {
                    Ok(PtpdToDriver {
                        request: DriverRequest::Hello,
                        ..
                    }) => Ok(Some(None)),
                    Ok(PtpdToDriver {
                        request:
                            DriverRequest::HelloRing {
                                slot_size,
                                slot_count,
                            },
                        ..
                    }) => ring_geometry(slot_size, slot_count).map(|g| Some(Some(g))),
                    Ok(m) => Err(format!("{:?} before hello", m.request)),
                    Err(ChannelError::Transport(TransportError::Timeout)) => Ok(None),
                    Err(e) => Err(format!("before hello: {e}")),
                }
            } else {
                Ok(None)
            };
            match outcome {
                Ok(Some(None)) => self.take_over(p.chan, p.cred),
                Ok(Some(Some(g))) => match with_ring(p.chan, g, self.dev.busy_poll) {
                    Ok(chan) => self.take_over(chan, p.cred),
                    Err((chan, why)) => self.refuse_late(
                        Pending {
                            chan,
                            cred: p.cred,
                            deadline: p.deadline,
                        },
                        &why,
                    ),
                },
                Ok(None) if now < p.deadline => self.pending.push(p),
                Ok(None) => self.refuse_late(p, &format!("no hello within {HELLO_TIMEOUT:?}")),
                Err(why) => self.refuse_late(p, &why),
            }
        }
    }

    fn refuse_late(&self, p: Pending, why: &str) {
        log::warn!(
            "driver channel: pid {} (uid {}) closed: {why}",
            p.cred.pid,
            p.cred.uid
        );
        close(&p.chan, CloseReason::NoHello);
    }

    /// Sends igcd's hello on `chan` and makes it the connection that drives the NIC.
    fn take_over(&mut self, chan: DriverChannel, cred: PeerCred) {
        // The generation tells ptpd whether this is a new driver instance.
        let link = self.dev.link();
        let hello = [
            DriverEvent::Restarted {
                generation: self.generation,
            },
            DriverEvent::Link {
                up: link.up,
                speed_mbps: link.speed_mbps,
            },
        ];
        if hello.into_iter().any(|ev| {
            chan.send(&DriverToPtpd::Event(ev), Some(SEND_TIMEOUT))
                .is_err()
        }) {
            return;
        }
        let old = self.sink.current().replace(Arc::new(chan));
        match (old, self.holder.replace(cred)) {
            (Some(old), was) => {
                close(&old, CloseReason::Replaced);
                log::warn!(
                    "ptpd connection of pid {} replaced by pid {} (uid {}); the old one is closed",
                    was.map_or(0, |c| c.pid),
                    cred.pid,
                    cred.uid
                );
            }
            (None, _) => log::info!("ptpd connected (pid {}, uid {})", cred.pid, cred.uid),
        }
    }

    /// Serves the requests waiting on the current connection, at most [`BATCH`].
    fn serve_ready(&mut self, chan: &Arc<DriverChannel>) {
        // Replaced this round: nothing more from it reaches the device.
        if !self
            .sink
            .current()
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, chan))
        {
            return;
        }
        for _ in 0..BATCH {
            match answer(self.dev, self.sink, chan, chan.recv(Some(Duration::ZERO))) {
                Step::Served => {}
                Step::Idle => return,
                Step::Gone => return self.drop_current(chan),
                Step::Failed => {
                    chan.shutdown();
                    return self.drop_current(chan);
                }
            }
        }
    }

    /// The socket of a ring connection turned readable: its peer hung up (drop the
    /// connection), or sent something it should not (read off and logged, so the poll does not
    /// spin on it).
    fn check_ring_socket(&mut self, chan: &Arc<DriverChannel>) {
        let conn = chan.transport().conn();
        let mut buf = Vec::new();
        for _ in 0..BATCH {
            match conn.recv(&mut buf, Some(Duration::ZERO)) {
                Ok(()) => log::warn!(
                    "driver channel: {} bytes on a ring connection's socket ignored",
                    buf.len()
                ),
                Err(TransportError::Timeout) => return,
                Err(_) => {
                    chan.shutdown();
                    return self.drop_current(chan);
                }
            }
        }
    }

    fn drop_current(&mut self, chan: &Arc<DriverChannel>) {
        let mut cur = self.sink.current();
        if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, chan)) {
            *cur = None;
            let pid = self.holder.take().map_or(0, |c| c.pid);
            log::info!("ptpd disconnected (pid {pid})");
        }
    }
}

/// Whether the peer's credentials pass `access` (its primary and supplementary groups count).
fn permitted(access: &ChannelAccess, chan: &DriverChannel, cred: PeerCred) -> bool {
    let mut gids = chan.transport().conn().peer_groups().unwrap_or_else(|e| {
        log::warn!("driver channel: groups of pid {} unknown: {e}", cred.pid);
        Vec::new()
    });
    gids.push(cred.gid);
    access.permits(cred.uid, &gids)
}

/// Offers a ring of geometry `g` on a connection that said `HelloRing`; the channel over the
/// ring (and the socket, kept for liveness), or the socket channel back with why not.
fn with_ring(
    chan: DriverChannel,
    g: Geometry,
    busy_poll: Duration,
) -> Result<DriverChannel, (DriverChannel, String)> {
    let cfg = RingConfig {
        geometry: g,
        busy_poll,
    };
    let DriverTransport::Socket(conn) = chan.into_transport() else {
        unreachable!("a pending connection is a socket");
    };
    match offer_ring(&conn, cfg) {
        Ok(ring) => Ok(DriverChannel::new(DriverTransport::Ring {
            ring: Box::new(ring),
            conn,
        })),
        Err(e) => Err((
            DriverChannel::new(DriverTransport::Socket(conn)),
            format!("ring not offered: {e}"),
        )),
    }
}
