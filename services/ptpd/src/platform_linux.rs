//! Linux host: driver channels are SOCK_SEQPACKET sockets igcd serves; the clock scheme is a
//! SOCK_SEQPACKET socket whose peer credentials decide privilege.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use ptp_ipc::transport::{Channel, ChannelError, SeqpacketConn, SeqpacketListener, TransportError};
use ptp_ipc::{ClockError, ClockReply, ClockRequest};

use crate::config::Config;
use crate::driver_link::Connector;
use crate::scheme::ClockScheme;

/// Connects to a driver's seqpacket socket.
pub struct UnixConnector(pub PathBuf);

impl Connector for UnixConnector {
    type T = SeqpacketConn;
    fn connect(&self) -> Result<SeqpacketConn, TransportError> {
        SeqpacketConn::connect(&self.0)
    }
    fn describe(&self) -> String {
        self.0.display().to_string()
    }
}

/// Concurrent clients beyond this are refused (each has a thread).
const MAX_CLIENTS: usize = 64;
/// A client that sends nothing for this long is disconnected.
const CLIENT_IDLE: Duration = Duration::from_secs(600);
const SEND_TIMEOUT: Duration = Duration::from_secs(1);

pub fn run(config: Config) -> Result<(), String> {
    // The PTP engine runs alongside the clock scheme for the life of the process.
    let (scheme, _engine) = crate::scheme::start(&config, |c| UnixConnector(c.channel.clone()))?;
    let listener = SeqpacketListener::bind(&config.socket)
        .map_err(|e| format!("clock scheme at {}: {e}", config.socket.display()))?;
    log::info!(
        "serving {} clock(s) on {}",
        config.clocks.len(),
        config.socket.display()
    );
    let clients = Arc::new(AtomicUsize::new(0));
    loop {
        // Bounded like every wait; no client yet just means another turn of the loop.
        let (conn, cred) = match listener.accept(Some(Duration::from_secs(1))) {
            Ok(c) => c,
            Err(TransportError::Timeout) => continue,
            Err(e) => return Err(format!("accept: {e}")),
        };
        if clients.fetch_add(1, Ordering::AcqRel) >= MAX_CLIENTS {
            clients.fetch_sub(1, Ordering::AcqRel);
            log::warn!(
                "refusing client pid {}: {MAX_CLIENTS} clients already",
                cred.pid
            );
            continue;
        }
        let scheme = scheme.clone();
        let clients = clients.clone();
        let spawned = std::thread::Builder::new()
            .name(format!("client:{}", cred.pid))
            .spawn(move || {
                serve_client(&scheme, Channel::new(conn), cred.uid);
                clients.fetch_sub(1, Ordering::AcqRel);
            });
        if let Err(e) = spawned {
            log::warn!("cannot serve client pid {}: {e}", cred.pid);
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
