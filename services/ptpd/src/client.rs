//! The client library applications use to reach ptpd's clock scheme.
//!
//! One [`Client`] on every platform; only how a request and its reply are carried differs:
//! - Linux hosts: a SOCK_SEQPACKET socket ([`DEFAULT_SOCKET`]), one datagram each way.
//! - Redox: the `/scheme/ptp` control handle (see `platform_redox.rs` for the scheme). One
//!   request is one `call` on the handle: the payload carries the encoded [`ClockRequest`] (its
//!   length in `metadata[0]`) and comes back holding the encoded [`ClockReply`]. The wait is
//!   bounded by ptpd, which answers every request within its own driver timeout.

use std::path::{Path, PathBuf};

use ptp_ipc::transport::{ChannelError, TransportError};
use ptp_ipc::{
    Caps, ClockError, ClockReply, ClockRequest, ClockStatus, ExtTsEvent, PinConfig, PinFunction,
    RxFilter, Stats, TimeXSample,
};

/// Where the clock scheme lives when nothing else is said (Linux hosts).
#[cfg(target_os = "linux")]
pub const DEFAULT_SOCKET: &str = "/run/redox-ptp/ptp.sock";
/// Where the clock scheme lives when nothing else is said: its control handle.
#[cfg(target_os = "redox")]
pub const DEFAULT_SOCKET: &str = "/scheme/ptp/ctl";
/// The environment variable that overrides it.
pub const SOCKET_ENV: &str = "PTP_SOCKET";

#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("cannot reach ptpd at {path}: {err} (is ptpd running? set {SOCKET_ENV} or --socket)")]
    Connect { path: PathBuf, err: TransportError },
    #[error("ptpd connection: {0}")]
    Channel(#[from] ChannelError),
    #[error("{0}")]
    Clock(ClockErrorDisplay),
    #[error("unexpected reply from ptpd: {0}")]
    Unexpected(String),
}

/// A [`ClockError`] with an errno-style message.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockErrorDisplay(pub ClockError);

impl std::fmt::Display for ClockErrorDisplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self.0 {
            ClockError::InvalidArgument => "invalid argument (EINVAL)",
            ClockError::PermissionDenied => "permission denied (EPERM)",
            ClockError::NoDevice => "no such device: the clock's driver is not running (ENODEV)",
            ClockError::Restarted => "the driver restarted during the request; retry",
            ClockError::Timeout => "the driver did not answer in time (ETIMEDOUT)",
            ClockError::Unsupported => "operation not supported (EOPNOTSUPP)",
            ClockError::Busy => "device busy (EBUSY)",
            ClockError::Io => "I/O error (EIO)",
        })
    }
}

impl ClientError {
    /// The typed clock error, if that is what this is.
    pub fn clock_error(&self) -> Option<ClockError> {
        match self {
            Self::Clock(c) => Some(c.0),
            _ => None,
        }
    }
}

/// A connection to ptpd's clock scheme. Requests are answered in order.
pub struct Client {
    conn: carrier::Conn,
}

/// The socket (Redox: scheme) path from `explicit`, else the environment, else the default.
pub fn socket_path(explicit: Option<&Path>) -> PathBuf {
    explicit
        .map(Path::to_path_buf)
        .or_else(|| std::env::var_os(SOCKET_ENV).map(PathBuf::from))
        .unwrap_or_else(|| PathBuf::from(DEFAULT_SOCKET))
}

macro_rules! expect {
    ($reply:expr, $pat:pat => $out:expr) => {
        match $reply {
            $pat => Ok($out),
            ClockReply::Error(e) => Err(ClientError::Clock(ClockErrorDisplay(e))),
            other => Err(ClientError::Unexpected(format!("{other:?}"))),
        }
    };
}

impl Client {
    pub fn connect(path: &Path) -> Result<Self, ClientError> {
        let conn = carrier::Conn::connect(path).map_err(|err| ClientError::Connect {
            path: path.to_owned(),
            err,
        })?;
        Ok(Self { conn })
    }

    /// One request, one reply.
    pub fn call(&self, req: &ClockRequest) -> Result<ClockReply, ClientError> {
        Ok(self.conn.call(req)?)
    }

    pub fn clocks(&self) -> Result<u32, ClientError> {
        expect!(self.call(&ClockRequest::List)?, ClockReply::Count { clocks } => clocks)
    }
    pub fn get(&self, clock: u32) -> Result<u64, ClientError> {
        expect!(self.call(&ClockRequest::Get { clock })?, ClockReply::Time { ns } => ns)
    }
    pub fn gettimex(&self, clock: u32, samples: u8) -> Result<Vec<TimeXSample>, ClientError> {
        expect!(self.call(&ClockRequest::GetTimeX { clock, samples })?, ClockReply::TimeX { samples } => samples)
    }
    pub fn set(&self, clock: u32, ns: u64) -> Result<(), ClientError> {
        expect!(self.call(&ClockRequest::Set { clock, ns })?, ClockReply::Done => ())
    }
    pub fn adj(&self, clock: u32, delta_ns: i64) -> Result<(), ClientError> {
        expect!(self.call(&ClockRequest::Adj { clock, delta_ns })?, ClockReply::Done => ())
    }
    pub fn freq(&self, clock: u32, scaled_ppm: i64) -> Result<(), ClientError> {
        expect!(self.call(&ClockRequest::Freq { clock, scaled_ppm })?, ClockReply::Done => ())
    }
    pub fn caps(&self, clock: u32) -> Result<Caps, ClientError> {
        expect!(self.call(&ClockRequest::Caps { clock })?, ClockReply::Caps(c) => c)
    }
    pub fn status(&self, clock: u32) -> Result<ClockStatus, ClientError> {
        expect!(self.call(&ClockRequest::Status { clock })?, ClockReply::Status(s) => s)
    }
    pub fn stats(&self, clock: u32) -> Result<Stats, ClientError> {
        expect!(self.call(&ClockRequest::Stats { clock })?, ClockReply::Stats(s) => s)
    }
    /// Privileged: TX timestamping on/off and the RX filter; what the driver applied.
    pub fn set_tstamp(
        &self,
        clock: u32,
        tx_on: bool,
        rx_filter: RxFilter,
    ) -> Result<(bool, RxFilter), ClientError> {
        let req = ClockRequest::SetTstamp {
            clock,
            tx_on,
            rx_filter,
        };
        expect!(self.call(&req)?, ClockReply::Tstamp { tx_on, rx_filter } => (tx_on, rx_filter))
    }
    /// Every pin's assignment.
    pub fn pins(&self, clock: u32) -> Result<Vec<PinConfig>, ClientError> {
        expect!(self.call(&ClockRequest::Pins { clock })?, ClockReply::Pins(p) => p)
    }
    /// Privileged: assigns `func` on channel `chan` to `pin`.
    pub fn set_pin(
        &self,
        clock: u32,
        pin: u8,
        func: PinFunction,
        chan: u8,
    ) -> Result<(), ClientError> {
        let req = ClockRequest::SetPin {
            clock,
            pin,
            func,
            chan,
        };
        expect!(self.call(&req)?, ClockReply::Done => ())
    }
    /// Privileged: external timestamps on channel `chan` on or off.
    pub fn ext_ts(&self, clock: u32, chan: u8, on: bool) -> Result<(), ClientError> {
        expect!(self.call(&ClockRequest::ExtTs { clock, chan, on })?, ClockReply::Done => ())
    }
    /// Privileged: a periodic output (period 0 stops it); the first edge's PHC time.
    pub fn per_out(
        &self,
        clock: u32,
        chan: u8,
        start_ns: u64,
        period_ns: u64,
    ) -> Result<u64, ClientError> {
        let req = ClockRequest::PerOut {
            clock,
            chan,
            start_ns,
            period_ns,
        };
        expect!(self.call(&req)?, ClockReply::PerOut { first_ns } => first_ns)
    }
    /// Privileged: PPS events on or off.
    pub fn pps(&self, clock: u32, on: bool) -> Result<(), ClientError> {
        expect!(self.call(&ClockRequest::Pps { clock, on })?, ClockReply::Done => ())
    }
    /// The clock's time source (`Unsupported` without one).
    pub fn source(&self, clock: u32) -> Result<ptp_ipc::SourceStatus, ClientError> {
        expect!(self.call(&ClockRequest::Source { clock })?, ClockReply::Source(s) => s)
    }
    /// External timestamps numbered above `after`: (the first's number, how many were no
    /// longer held, the events).
    pub fn ext_ts_events(
        &self,
        clock: u32,
        after: u64,
    ) -> Result<(u64, u64, Vec<ExtTsEvent>), ClientError> {
        let req = ClockRequest::Events { clock, after };
        expect!(self.call(&req)?, ClockReply::Events { first_seq, lost, events } => (first_seq, lost, events))
    }
}

/// Linux hosts: a typed channel over the clock scheme's SOCK_SEQPACKET socket.
#[cfg(target_os = "linux")]
mod carrier {
    use std::path::Path;
    use std::time::Duration;

    use ptp_ipc::transport::{Channel, ChannelError, SeqpacketConn, TransportError};
    use ptp_ipc::{ClockReply, ClockRequest};

    pub(super) struct Conn {
        chan: Channel<SeqpacketConn, ClockRequest, ClockReply>,
        timeout: Duration,
    }

    impl Conn {
        pub(super) fn connect(path: &Path) -> Result<Self, TransportError> {
            Ok(Self {
                chan: Channel::new(SeqpacketConn::connect(path)?),
                // Above ptpd's own driver timeout, so a slow driver surfaces as its typed Timeout.
                timeout: Duration::from_secs(5),
            })
        }

        pub(super) fn call(&self, req: &ClockRequest) -> Result<ClockReply, ChannelError> {
            match self.chan.send(req, Some(self.timeout)) {
                Ok(()) => self.chan.recv(Some(self.timeout)),
                // ptpd refuses a client beyond its limits with EBUSY and closes: the send may
                // find the connection gone, and the typed answer waiting before its end.
                Err(ChannelError::Transport(TransportError::Disconnected)) => self
                    .chan
                    .recv(Some(Duration::ZERO))
                    .map_err(|_| ChannelError::Transport(TransportError::Disconnected)),
                Err(e) => Err(e),
            }
        }
    }
}

/// Redox: one `call` on the `/scheme/ptp` control handle per request.
#[cfg(target_os = "redox")]
mod carrier {
    use std::path::Path;

    use libredox::Fd;
    use libredox::errno;
    use libredox::flag::{O_CLOEXEC, O_RDWR};
    use ptp_ipc::transport::{ChannelError, TransportError};
    use ptp_ipc::wire::MAX_MESSAGE;
    use ptp_ipc::{ClockReply, ClockRequest, Wire};

    pub(super) struct Conn {
        fd: Fd,
        path: String,
    }

    impl Conn {
        pub(super) fn connect(path: &Path) -> Result<Self, TransportError> {
            let p = path.display().to_string();
            let fd = Fd::open(&p, O_RDWR | O_CLOEXEC, 0).map_err(|e| {
                if matches!(e.errno(), errno::ENOENT | errno::ENODEV) {
                    TransportError::NotFound(format!("{p}: {e}"))
                } else {
                    TransportError::Io(format!("open {p}: {e}"))
                }
            })?;
            Ok(Self { fd, path: p })
        }

        pub(super) fn call(&self, req: &ClockRequest) -> Result<ClockReply, ChannelError> {
            let mut buf = Vec::with_capacity(MAX_MESSAGE);
            req.try_encode(&mut buf)?;
            let len = buf.len() as u64;
            buf.resize(MAX_MESSAGE, 0);
            let n = self
                .fd
                .call_rw(&mut buf, syscall::CallFlags::empty(), &[len])
                .map_err(|e| {
                    ChannelError::Transport(match e.errno() {
                        errno::EBADF | errno::ENODEV | errno::EPIPE => TransportError::Disconnected,
                        _ => TransportError::Io(format!("call {}: {e}", self.path)),
                    })
                })?;
            Ok(ClockReply::decode(&buf[..n.min(MAX_MESSAGE)])?)
        }
    }
}
