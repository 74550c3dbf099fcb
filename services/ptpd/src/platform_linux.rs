//! Linux host: driver channels are SOCK_SEQPACKET sockets igcd serves; the clock scheme is a
//! SOCK_SEQPACKET socket whose peer credentials decide privilege.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use ptp_ipc::transport::{
    Channel, ChannelError, ChannelMode, DriverTransport, SeqpacketConn, SeqpacketListener,
    TransportError, connect_driver,
};
use ptp_ipc::{ClockError, ClockReply, ClockRequest};

use crate::config::Config;
use crate::driver_link::Connector;
use crate::scheme::{ClockScheme, FloodLimit};

/// Connects to a driver's seqpacket socket; with `ChannelMode::Ring` the messages then go over
/// a shared-memory ring the driver offers on it (the client tsperf uses too).
pub struct UnixConnector {
    pub path: PathBuf,
    pub mode: ChannelMode,
}

/// How long a driver may take to offer its ring after our hello.
const RING_SETUP: Duration = Duration::from_secs(2);

impl Connector for UnixConnector {
    type T = DriverTransport;
    fn connect(&self) -> Result<DriverTransport, TransportError> {
        SeqpacketConn::connect(&self.path).map(DriverTransport::Socket)
    }
    fn connect_hello(&self, seq: ptp_ipc::Seq) -> Result<DriverTransport, TransportError> {
        connect_driver(&self.path, self.mode, seq, RING_SETUP).map(crate::service::tune)
    }
    fn describe(&self) -> String {
        format!("{} ({})", self.path.display(), self.mode.name())
    }
    fn describe_connected(&self, t: &DriverTransport) -> String {
        format!("{} ({})", self.path.display(), t.mode().name())
    }
}

/// Concurrent clients other than root beyond this are refused (each has a thread).
const MAX_CLIENTS: usize = 64;
/// Concurrent clients of one uid other than root: one user's idle connections cannot take the
/// places of everyone else's.
const MAX_CLIENTS_PER_UID: usize = 16;
/// All concurrent clients, root's too: each costs a thread and a descriptor.
const MAX_CONNECTIONS: usize = 128;
/// How long a refused client's EBUSY answer may take to send.
const REFUSE_TIMEOUT: Duration = Duration::from_millis(10);
/// At most this many queued messages of a refused client are drained before closing (a few
/// fit in its socket buffer; beyond, the close resets it as before).
const REFUSE_DRAIN_MAX: usize = 64;
/// A client that sends nothing for this long is disconnected.
const CLIENT_IDLE: Duration = Duration::from_secs(600);
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

pub fn run(config: Config) -> Result<(), String> {
    // The PTP engine runs alongside the clock scheme for the life of the process.
    let (scheme, engine) = crate::service::start(&config, |c| UnixConnector {
        path: c.channel.clone(),
        mode: match c.channel_mode {
            crate::config::ChannelMode::Ring => ChannelMode::Ring,
            crate::config::ChannelMode::Socket => ChannelMode::Socket,
        },
    })?;
    let set = engine.as_ref().map(|e| crate::mgmt_socket::SetAccess {
        engine: e.manager(),
        privileged_uids: config.privileged_uids.clone(),
    });
    let _mgmt = match (&config.management_socket, scheme.ptp_status()) {
        (Some(path), Some(board)) => Some(crate::mgmt_socket::MgmtServer::start(
            path,
            board.clone(),
            set,
        )?),
        _ => None,
    };
    let listener = SeqpacketListener::bind(&config.socket)
        .map_err(|e| format!("clock scheme at {}: {e}", config.socket.display()))?;
    log::info!(
        "serving {} clock(s) on {}",
        config.clocks.len(),
        config.socket.display()
    );
    let slots = Arc::new(Slots::default());
    let rate = config.client_requests_per_s;
    loop {
        // Bounded like every wait; no client yet just means another turn of the loop.
        let (conn, cred) = match listener.accept(Some(Duration::from_secs(1))) {
            Ok(c) => c,
            Err(TransportError::Timeout) => continue,
            Err(e) => return Err(format!("accept: {e}")),
        };
        let Some(slot) = Slots::take(&slots, cred.uid) else {
            refuse(&scheme, Channel::new(conn), cred.pid, cred.uid);
            continue;
        };
        let scheme = scheme.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("client:{}", cred.pid))
            .spawn(move || {
                serve_client(&scheme, Channel::new(conn), cred.uid, rate);
                drop(slot);
            });
        if let Err(e) = spawned {
            log::warn!("cannot serve client pid {}: {e}", cred.pid);
        }
    }
}

/// A client beyond the limits gets EBUSY as its answer, then the connection closes (its
/// request, sent or not, gets that answer: `client::Client` reads it after a failed send).
fn refuse<C: Connector>(
    scheme: &ClockScheme<C>,
    chan: Channel<SeqpacketConn, ClockReply, ClockRequest>,
    pid: i32,
    uid: u32,
) {
    let _ = chan.send(&ClockReply::Error(ClockError::Busy), Some(REFUSE_TIMEOUT));
    // Closing an AF_UNIX stream/seqpacket socket with unread data in its receive queue sets
    // ECONNRESET on the peer, which its next recv reports before the queued EBUSY: the client
    // saw "peer disconnected" (tests/hostile_clients.rs, about 1 run in 4). So: shut down
    // (nothing more can be queued; the client still reads EBUSY, then EOF), drain what the
    // client already sent (its request is usually there before accept), then close. No wait:
    // after the shutdown, recv returns what is queued, then EOF.
    chan.shutdown();
    for _ in 0..REFUSE_DRAIN_MAX {
        match chan.recv(Some(Duration::ZERO)) {
            Ok(_)
            | Err(ChannelError::Decode(_))
            | Err(ChannelError::Transport(TransportError::TooLarge(_))) => {}
            Err(_) => break,
        }
    }
    let n = scheme
        .counters()
        .clients_refused
        .fetch_add(1, Ordering::Relaxed)
        + 1;
    if n.is_power_of_two() {
        log::warn!(
            "refusing client pid {pid} (uid {uid}): {MAX_CONNECTIONS} clients, {MAX_CLIENTS} \
             not root or {MAX_CLIENTS_PER_UID} of this uid already; {n} refused so far"
        );
    }
}

/// Client places: every client counts towards [`MAX_CONNECTIONS`]; others than root (trusted,
/// so it gets in while the rest are full) also towards [`MAX_CLIENTS`] and
/// [`MAX_CLIENTS_PER_UID`].
#[derive(Default)]
struct Slots {
    per_uid: Mutex<HashMap<u32, usize>>,
}

/// A client's place, given back on drop.
struct Slot {
    slots: Arc<Slots>,
    uid: u32,
}

impl Slots {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u32, usize>> {
        self.per_uid.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A place for a client of `uid`, if one is free.
    fn take(slots: &Arc<Self>, uid: u32) -> Option<Slot> {
        let mut m = slots.lock();
        let all: usize = m.values().sum();
        let others = all - m.get(&0).copied().unwrap_or(0);
        let mine = m.entry(uid).or_insert(0);
        let limited = uid != 0 && (others >= MAX_CLIENTS || *mine >= MAX_CLIENTS_PER_UID);
        if all >= MAX_CONNECTIONS || limited {
            if *mine == 0 {
                m.remove(&uid);
            }
            return None;
        }
        *mine += 1;
        Some(Slot {
            slots: slots.clone(),
            uid,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut m = self.slots.lock();
        if let Some(n) = m.get_mut(&self.uid) {
            *n -= 1;
            if *n == 0 {
                m.remove(&self.uid);
            }
        }
    }
}

fn serve_client<C: Connector>(
    scheme: &ClockScheme<C>,
    chan: Channel<SeqpacketConn, ClockReply, ClockRequest>,
    uid: u32,
    rate_per_s: u32,
) {
    let c = scheme.counters();
    let mut limit = FloodLimit::new(rate_per_s, rate_per_s / 10, Instant::now());
    // Whether the next request was already waiting before the last reply went out.
    let mut queued = false;
    loop {
        let reply = match chan.recv(Some(CLIENT_IDLE)) {
            Ok(req) => Ok(req),
            // A malformed or oversized request gets a typed answer, so the client never hangs.
            Err(
                e
                @ (ChannelError::Decode(_) | ChannelError::Transport(TransportError::TooLarge(_))),
            ) => {
                c.requests_malformed.fetch_add(1, Ordering::Relaxed);
                log::debug!("malformed clock request: {e}");
                Err(ClockError::InvalidArgument)
            }
            Err(_) => return,
        };
        // A request sent before the answer to the one before it (pipelined), malformed or not,
        // is charged to the client's flood limit; one that waited for its answer is not, so a
        // client calling back to back (ptpctl bench) runs at its own round-trip rate.
        let wait = if queued {
            limit.delay(Instant::now())
        } else {
            Duration::ZERO
        };
        if !wait.is_zero() {
            c.requests_throttled.fetch_add(1, Ordering::Relaxed);
            std::thread::sleep(wait);
        }
        let reply = match reply {
            Ok(req) => scheme.handle(req, uid),
            Err(e) => ClockReply::Error(e),
        };
        // Looked at before the reply goes out: a client that waits for its answers cannot have
        // sent the next request yet, so only a pipelining one is ever charged. (Looking after the
        // send raced: the woken client's next request often arrived before the poll, and a
        // sequential client was throttled about one request in four.)
        queued = readable_now(chan.transport());
        if chan.send(&reply, Some(SEND_TIMEOUT)).is_err() {
            return;
        }
    }
}

/// Whether a message is waiting on `conn` at this instant (or it hung up).
fn readable_now(conn: &SeqpacketConn) -> bool {
    use ptp_ipc::poll::{PollFlags, wait_fd};
    // A deadline already past polls once without blocking.
    matches!(wait_fd(conn, PollFlags::IN, Some(std::time::Instant::now())), Ok(Some(r)) if r.contains(PollFlags::IN))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_uid_cannot_take_every_place() {
        let slots = Arc::new(Slots::default());
        let nobody: Vec<Slot> = (0..MAX_CLIENTS_PER_UID)
            .map(|_| Slots::take(&slots, 65534).expect("a place"))
            .collect();
        assert!(Slots::take(&slots, 65534).is_none(), "per-uid cap");
        // Another user and root still get in.
        let other = Slots::take(&slots, 4242).expect("another uid's place");
        assert!(Slots::take(&slots, 0).is_some());
        // Places come back when clients go.
        drop(nobody);
        assert!(Slots::take(&slots, 65534).is_some());
        drop(other);
        assert!(slots.lock().is_empty());
    }

    #[test]
    fn the_total_is_bounded_but_not_for_root() {
        let slots = Arc::new(Slots::default());
        let all: Vec<Slot> = (0..MAX_CLIENTS as u32)
            .map(|i| Slots::take(&slots, 1000 + i).expect("a place"))
            .collect();
        assert_eq!(all.len(), MAX_CLIENTS);
        assert!(Slots::take(&slots, 5000).is_none(), "total cap");
        let root: Vec<Slot> = (0..3).map(|_| Slots::take(&slots, 0).unwrap()).collect();
        assert_eq!(root.len(), 3);
    }

    #[test]
    fn root_too_is_bounded_by_the_connection_limit() {
        let slots = Arc::new(Slots::default());
        let root: Vec<Slot> = (0..MAX_CONNECTIONS)
            .map(|_| Slots::take(&slots, 0).expect("a place"))
            .collect();
        assert!(Slots::take(&slots, 0).is_none(), "connection cap");
        assert!(Slots::take(&slots, 1000).is_none(), "connection cap");
        assert_eq!(slots.lock().len(), 1, "a refused uid leaves no entry");
        drop(root);
        assert!(slots.lock().is_empty());
    }
}
