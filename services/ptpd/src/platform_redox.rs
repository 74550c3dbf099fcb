//! Redox: driver channels are scheme handles (`SchemeConn`), and the clock scheme is
//! `/scheme/ptp`, served with redox-scheme 0.12 (shared/reference/redox-platform.md §8).
//! Type-checked for x86_64-unknown-redox, not yet run on Redox.
//!
//! The scheme (see [`PtpScheme`]):
//! - `/scheme/ptp/<n>`: clock `n`. `read` of at least 8 bytes returns its time as a
//!   little-endian u64 of nanoseconds (the exact path, through the driver); `call` carries any
//!   other operation on clock `n`: the payload holds an encoded [`ClockRequest`] (the ptp-ipc
//!   wire format) whose length is `metadata[0]`, and is overwritten with the encoded
//!   [`ClockReply`], whose length the call returns. Requests naming another clock are refused
//!   with `InvalidArgument`.
//! - `/scheme/ptp` or `/scheme/ptp/ctl`: the control handle; `call` as above for any clock
//!   (what the client library and ptpctl use).
//! - Privilege: the caller's uid at `open` decides (root or `privileged_uids` may set/adjust):
//!   redox-scheme 0.12 does not pass a trustworthy uid with `call` (its `SchemeSync::call`
//!   documents only pid and id as correct), so the uid is recorded per handle at open.
//! - Errors of `read` map [`ClockError`] to errnos; `call` returns them inside the reply.
//! - `/scheme/ptp/mgmt` (when PTP runs): IEEE 1588 management, what `pmc -u` gets from ptp4l's
//!   socket on Linux. Each `write` is one management message (as pmc sends it); its replies
//!   wait for the following `read`s, one message per read (EAGAIN when none is waiting,
//!   EMSGSIZE when the buffer is too small, which leaves the reply waiting; EINVAL for a
//!   message that does not decode; ETIMEDOUT when the engine does not answer a SET). SETs are
//!   privileged as clock writes are: by the uid recorded at open ([`MgmtSession`]).
//!
//! The scheme is served on the main thread, one request at a time: a request waits for its
//! driver at most `request_timeout_ms`, so a slow driver delays other clients by that much.
//! ptpd does not `setrens(0, 0)`: it opens driver schemes again whenever a driver restarts, and
//! its engine and link threads draw random keys and seeds (`/scheme/rand`) as they go.

use ptp_ipc::redox::daemon::Readiness;
use ptp_ipc::redox::scheme::{Handles, SchemeHandle, claim_scheme_name, copy_path, scheme_socket};
use ptp_ipc::transport::{
    ChannelMode, DriverTransport, SchemeConn, TransportError, connect_driver,
};
use ptp_ipc::{ClockError, ClockReply, ClockRequest, Wire};
use redox_scheme::scheme::{SchemeState, SchemeSync, register_sync_scheme};
use redox_scheme::{CallerCtx, OpenResult, RequestKind, SignalBehavior};
use std::collections::HashMap;

use syscall::error::{
    EAGAIN, EBADF, EBUSY, ECANCELED, EINVAL, EIO, EMSGSIZE, ENODEV, ENOENT, EOPNOTSUPP, EPERM,
    ETIMEDOUT, Error, Result,
};
use syscall::schemev2::NewFdFlags;

use crate::config::Config;
use crate::driver_link::Connector;
use crate::mgmt_access::{MgmtSession, SessionError, SetAccess};
use crate::ptp::PtpStatusBoard;
use crate::scheme::ClockScheme;

/// The scheme name: clients open `/scheme/ptp/...`.
pub const SCHEME: &str = "ptp";

/// Connects to a driver channel scheme, e.g. `/scheme/ptpdrv.pci-0000-03-00.0_igc/ptp`; with
/// `ChannelMode::Ring` the messages then go over a ring the driver lends to this handle, mapped
/// through it (the client Linux hosts use too: `connect_driver`).
pub struct SchemeConnector {
    pub path: String,
    pub mode: ChannelMode,
}

/// How long a driver may take to offer its ring after our hello.
const RING_SETUP: std::time::Duration = std::time::Duration::from_secs(2);

impl Connector for SchemeConnector {
    type T = DriverTransport;
    fn connect(&self) -> std::result::Result<DriverTransport, TransportError> {
        SchemeConn::connect(&self.path).map(DriverTransport::Socket)
    }
    fn connect_hello(
        &self,
        seq: ptp_ipc::Seq,
    ) -> std::result::Result<DriverTransport, TransportError> {
        connect_driver(std::path::Path::new(&self.path), self.mode, seq, RING_SETUP)
            .map(crate::service::tune)
    }
    fn describe(&self) -> String {
        format!("{} ({})", self.path, self.mode.name())
    }
    fn describe_connected(&self, t: &DriverTransport) -> String {
        format!("{} ({})", self.path, t.mode().name())
    }
}

/// The errno of a clock error (DESIGN.md §2: EINVAL, EPERM, ENODEV, restarted, timeout).
pub fn errno(e: ClockError) -> i32 {
    match e {
        ClockError::InvalidArgument => EINVAL,
        ClockError::PermissionDenied => EPERM,
        ClockError::NoDevice => ENODEV,
        // "Retry": the request was cut short by a driver restart.
        ClockError::Restarted => ECANCELED,
        ClockError::Timeout => ETIMEDOUT,
        ClockError::Unsupported => EOPNOTSUPP,
        ClockError::Busy => EBUSY,
        ClockError::Io => EIO,
    }
}

/// The clock a request addresses (`None` for `List`).
fn target(req: &ClockRequest) -> Option<u32> {
    req.clock()
}

enum Handle {
    Root,
    /// `clock: None` is the control handle.
    Clock {
        clock: Option<u32>,
        uid: u32,
    },
    /// A management client; its session lives in [`PtpScheme::sessions`].
    Mgmt,
}

/// What the `mgmt` path answers from.
pub struct MgmtAccess {
    pub board: PtpStatusBoard,
    pub set: Option<SetAccess>,
}

/// The errno of a management session error.
fn session_errno(e: &SessionError) -> i32 {
    match e {
        SessionError::Malformed(_) => EINVAL,
        SessionError::Empty => EAGAIN,
        SessionError::TooSmall(_) => EMSGSIZE,
        SessionError::Busy => ETIMEDOUT,
    }
}

impl SchemeHandle for Handle {
    const ROOT: Self = Handle::Root;
    fn is_root(&self) -> bool {
        matches!(self, Handle::Root)
    }
}

/// `/scheme/ptp` over the transport-independent [`ClockScheme`].
pub struct PtpScheme<'s, C: Connector> {
    clocks: &'s ClockScheme<C>,
    handles: Handles<Handle>,
    mgmt: Option<MgmtAccess>,
    /// The management sessions, by handle id.
    sessions: HashMap<usize, MgmtSession>,
}

impl<'s, C: Connector> PtpScheme<'s, C> {
    pub fn new(clocks: &'s ClockScheme<C>, mgmt: Option<MgmtAccess>) -> Self {
        Self {
            clocks,
            handles: Handles::default(),
            mgmt,
            sessions: HashMap::new(),
        }
    }

    fn open_mgmt(&mut self, uid: u32) -> Result<usize> {
        if self.mgmt.is_none() {
            return Err(Error::new(ENOENT));
        }
        let id = self.handles.insert(Handle::Mgmt);
        self.sessions.insert(id, MgmtSession::new(uid));
        Ok(id)
    }

    fn reply(&self, bound: Option<u32>, uid: u32, req: ClockRequest) -> ClockReply {
        match (bound, target(&req)) {
            (Some(n), Some(t)) if n != t => ClockReply::Error(ClockError::InvalidArgument),
            _ => self.clocks.handle(req, uid),
        }
    }
}

impl<C: Connector> SchemeSync for PtpScheme<'_, C> {
    fn scheme_root(&mut self) -> Result<usize> {
        Ok(self.handles.open_root())
    }

    fn openat(
        &mut self,
        fd: usize,
        path: &str,
        _flags: usize,
        _fcntl_flags: u32,
        ctx: &CallerCtx,
    ) -> Result<OpenResult> {
        self.handles.check_root(fd)?;
        let clock = match path.trim_matches('/') {
            "mgmt" => {
                return Ok(OpenResult::ThisScheme {
                    number: self.open_mgmt(ctx.uid)?,
                    flags: NewFdFlags::empty(),
                });
            }
            "" | "ctl" => None,
            n => {
                let n: u32 = n.parse().map_err(|_| Error::new(ENOENT))?;
                if n as usize >= self.clocks.links().len() {
                    return Err(Error::new(ENOENT));
                }
                Some(n)
            }
        };
        Ok(OpenResult::ThisScheme {
            number: self.handles.insert(Handle::Clock {
                clock,
                uid: ctx.uid,
            }),
            flags: NewFdFlags::empty(),
        })
    }

    fn read(
        &mut self,
        id: usize,
        buf: &mut [u8],
        _offset: u64,
        _fcntl_flags: u32,
        _ctx: &CallerCtx,
    ) -> Result<usize> {
        if let Some(session) = self.sessions.get_mut(&id) {
            let (board, set) = match self.mgmt.as_ref() {
                Some(m) => (&m.board, m.set.as_ref()),
                None => return Err(Error::new(EBADF)),
            };
            return session
                .read(buf, board, set)
                .map_err(|e| Error::new(session_errno(&e)));
        }
        let (clock, uid) = match self.handles.get(id) {
            Some(Handle::Clock {
                clock: Some(c),
                uid,
            }) => (*c, *uid),
            Some(_) => return Err(Error::new(EINVAL)),
            None => return Err(Error::new(EBADF)),
        };
        if buf.len() < 8 {
            return Err(Error::new(EINVAL));
        }
        match self.clocks.handle(ClockRequest::Get { clock }, uid) {
            ClockReply::Time { ns } => {
                buf[..8].copy_from_slice(&ns.to_le_bytes());
                Ok(8)
            }
            ClockReply::Error(e) => Err(Error::new(errno(e))),
            _ => Err(Error::new(EIO)),
        }
    }

    /// Only management handles are written to: one management message per write.
    fn write(
        &mut self,
        id: usize,
        buf: &[u8],
        _offset: u64,
        _fcntl_flags: u32,
        _ctx: &CallerCtx,
    ) -> Result<usize> {
        let (Some(session), Some(m)) = (self.sessions.get_mut(&id), self.mgmt.as_ref()) else {
            return Err(Error::new(if self.handles.get(id).is_some() {
                EINVAL
            } else {
                EBADF
            }));
        };
        session.write(buf, &m.board, m.set.as_ref()).map_err(|e| {
            log::debug!("management write: {e}");
            Error::new(session_errno(&e))
        })
    }

    fn call(
        &mut self,
        id: usize,
        payload: &mut [u8],
        metadata: &[u64],
        _ctx: &CallerCtx,
    ) -> Result<usize> {
        let (bound, uid) = match self.handles.get(id) {
            Some(Handle::Clock { clock, uid }) => (*clock, *uid),
            Some(Handle::Root | Handle::Mgmt) => return Err(Error::new(EINVAL)),
            None => return Err(Error::new(EBADF)),
        };
        let len = metadata
            .first()
            .and_then(|l| usize::try_from(*l).ok())
            .filter(|l| *l <= payload.len())
            .ok_or(Error::new(EINVAL))?;
        let reply = match ClockRequest::decode(&payload[..len]) {
            Ok(req) => self.reply(bound, uid, req),
            // A malformed request gets a typed answer, as on Linux.
            Err(e) => {
                log::debug!("malformed clock request: {e}");
                ClockReply::Error(ClockError::InvalidArgument)
            }
        };
        let mut out = Vec::with_capacity(128);
        if reply.try_encode(&mut out).is_err() {
            ClockReply::Error(ClockError::Io).encode(&mut out);
        }
        if out.len() > payload.len() {
            return Err(Error::new(EMSGSIZE));
        }
        payload[..out.len()].copy_from_slice(&out);
        Ok(out.len())
    }

    fn fpath(&mut self, id: usize, buf: &mut [u8], _ctx: &CallerCtx) -> Result<usize> {
        let path = match self.handles.get(id) {
            Some(Handle::Clock { clock: Some(c), .. }) => format!("/scheme/{SCHEME}/{c}"),
            Some(Handle::Clock { clock: None, .. }) => format!("/scheme/{SCHEME}/ctl"),
            Some(Handle::Root) => format!("/scheme/{SCHEME}"),
            Some(Handle::Mgmt) => format!("/scheme/{SCHEME}/mgmt"),
            None => return Err(Error::new(EBADF)),
        };
        Ok(copy_path(&path, buf))
    }

    fn on_close(&mut self, id: usize) {
        self.handles.remove(id);
        self.sessions.remove(&id);
    }
}

fn os(what: &str, e: impl std::fmt::Display) -> String {
    format!("{what}: {e}")
}

pub fn run(config: Config) -> std::result::Result<(), String> {
    // First, before the driver link threads: the fork fallback must not copy a running thread.
    // init starts ptpd as a `notify` unit; run by hand it stays in the foreground.
    let readiness = Readiness::start(false).map_err(|e| os("readiness", e))?;
    // A killed ptpd's name stays registered (issue 22): taken back before anything starts; a
    // running ptpd's is an error (a second one must not steer the same clocks).
    match claim_scheme_name(SCHEME) {
        Ok(true) => log::info!("/scheme/{SCHEME}: left by a ptpd that is gone; name taken back"),
        Ok(false) => {}
        Err(e) => return Err(format!("{e}; not starting a second ptpd")),
    }
    // The PTP engine runs beside the scheme for the life of the process, as on Linux.
    let (clocks, engine) = crate::service::start(&config, |c| SchemeConnector {
        path: c.channel.display().to_string(),
        mode: match c.channel_mode {
            crate::config::ChannelMode::Ring => ChannelMode::Ring,
            crate::config::ChannelMode::Socket => ChannelMode::Socket,
        },
    })?;
    let mgmt = clocks.ptp_status().map(|board| MgmtAccess {
        board: board.clone(),
        set: engine.as_ref().map(|e| SetAccess {
            engine: e.manager(),
            privileged_uids: config.privileged_uids.clone(),
        }),
    });
    let socket = scheme_socket(false).map_err(|e| os("scheme socket", e))?;
    let mut scheme = PtpScheme::new(&clocks, mgmt);
    register_sync_scheme(&socket, SCHEME, &mut scheme).map_err(|e| os("register scheme ptp", e))?;
    // Registered: clients can open /scheme/ptp now (§9: scheme first, then readiness).
    readiness.ready().map_err(|e| os("readiness", e))?;
    log::info!(
        "serving {} clock(s) on /scheme/{SCHEME}",
        config.clocks.len()
    );
    let mut state = SchemeState::new();
    loop {
        let Some(req) = socket
            .next_request(SignalBehavior::Restart)
            .map_err(|e| os("scheme read", e))?
        else {
            return Err("scheme socket closed".into());
        };
        let resp = match req.kind() {
            RequestKind::Call(c) => c.handle_sync(&mut scheme, &mut state),
            RequestKind::OnClose { id } => {
                scheme.on_close(id);
                continue;
            }
            // Nothing here parks, so there is nothing to cancel; fd passing and mmap are not
            // offered.
            _ => continue,
        };
        socket
            .write_response(resp, SignalBehavior::Restart)
            .map_err(|e| os("scheme write", e))?;
    }
}
