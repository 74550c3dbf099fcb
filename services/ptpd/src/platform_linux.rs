//! Linux host: driver channels are SOCK_SEQPACKET sockets igcd serves; the clock scheme is a
//! SOCK_SEQPACKET socket whose peer credentials decide privilege.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use ptp_ipc::transport::{
    Channel, ChannelError, ChannelMode, DriverTransport, SeqpacketConn, SeqpacketListener,
    TransportError, connect_driver,
};
use ptp_ipc::{ClockError, ClockReply, ClockRequest};

use crate::config::Config;
use crate::driver_link::Connector;
use crate::scheme::ClockScheme;

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
        connect_driver(&self.path, self.mode, seq, RING_SETUP)
    }
    fn describe(&self) -> String {
        format!("{} ({})", self.path.display(), self.mode.name())
    }
}

/// Concurrent clients other than root beyond this are refused (each has a thread).
const MAX_CLIENTS: usize = 64;
/// Concurrent clients of one uid other than root: one user's idle connections cannot take the
/// places of everyone else's.
const MAX_CLIENTS_PER_UID: usize = 16;
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
    loop {
        // Bounded like every wait; no client yet just means another turn of the loop.
        let (conn, cred) = match listener.accept(Some(Duration::from_secs(1))) {
            Ok(c) => c,
            Err(TransportError::Timeout) => continue,
            Err(e) => return Err(format!("accept: {e}")),
        };
        let Some(slot) = Slots::take(&slots, cred.uid) else {
            log::warn!(
                "refusing client pid {} (uid {}): {MAX_CLIENTS} clients, or \
                 {MAX_CLIENTS_PER_UID} of this uid, already",
                cred.pid,
                cred.uid
            );
            continue;
        };
        let scheme = scheme.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("client:{}", cred.pid))
            .spawn(move || {
                serve_client(&scheme, Channel::new(conn), cred.uid);
                drop(slot);
            });
        if let Err(e) = spawned {
            log::warn!("cannot serve client pid {}: {e}", cred.pid);
        }
    }
}

/// Client places: root is not counted (it is trusted, and must always get in), others count
/// towards [`MAX_CLIENTS`] and [`MAX_CLIENTS_PER_UID`].
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
        if uid != 0 {
            let mut m = slots.lock();
            let total: usize = m.values().sum();
            let mine = m.entry(uid).or_insert(0);
            if total >= MAX_CLIENTS || *mine >= MAX_CLIENTS_PER_UID {
                return None;
            }
            *mine += 1;
        }
        Some(Slot {
            slots: slots.clone(),
            uid,
        })
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        if self.uid == 0 {
            return;
        }
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
) {
    loop {
        let reply = match chan.recv(Some(CLIENT_IDLE)) {
            Ok(req) => scheme.handle(req, uid),
            // A malformed request gets a typed answer, so the client never hangs.
            Err(ChannelError::Decode(e)) => {
                log::debug!("malformed clock request: {e}");
                ClockReply::Error(ClockError::InvalidArgument)
            }
            Err(_) => return,
        };
        if chan.send(&reply, Some(SEND_TIMEOUT)).is_err() {
            return;
        }
    }
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
}
