//! The `network.<pci name>_igc` scheme smolnetd uses (reference §7), generic over the frame
//! path so the driver's data path plugs in behind [`NetAdapter`].
//!
//! Paths: `""` is the data handle (one `read` = one received frame without FCS, one `write` =
//! one frame out), `"mac"` the 6-byte MAC. Only uid 0 may open either (EACCES). A read with no
//! frame answers EAGAIN to an O_NONBLOCK caller and parks (EWOULDBLOCK) otherwise; the event
//! loop retries parked reads and posts EVENT_READ to every data handle while a frame is pending.

use super::super::{NetPort, NetSendError};
use crate::family::Family;
use ptp_ipc::redox::scheme::{Handles, SchemeHandle, copy_path};
use redox_scheme::scheme::SchemeSync;
use redox_scheme::{CallerCtx, OpenResult};
use syscall::error::{
    EACCES, EAGAIN, EBADF, EINVAL, ENETDOWN, ENOBUFS, ENOENT, EWOULDBLOCK, Error, Result,
};
use syscall::flag::{EventFlags, O_NONBLOCK};
use syscall::schemev2::NewFdFlags;

/// Why a frame could not be sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum NetError {
    /// Shorter than an Ethernet header or longer than the MTU allows.
    #[error("bad frame of {0} bytes")]
    BadFrame(usize),
    /// The transmit ring is full; retry.
    #[error("transmit ring full")]
    Busy,
    #[error("link down")]
    LinkDown,
}

impl NetError {
    fn errno(self) -> i32 {
        match self {
            NetError::BadFrame(_) => EINVAL,
            NetError::Busy => ENOBUFS,
            NetError::LinkDown => ENETDOWN,
        }
    }
}

/// What the network scheme needs from a NIC driver's frame path.
pub trait NetAdapter {
    fn mac(&self) -> [u8; 6];
    /// Whether this adapter moves frames at all; the daemon registers the network scheme only
    /// then, so smolnetd (which takes the first `network*` scheme) is never handed a dead NIC.
    fn carries_frames(&self) -> bool;
    /// Sends one frame (no FCS).
    fn send(&self, frame: &[u8]) -> std::result::Result<(), NetError>;
    /// Moves the next received frame (no FCS) into `buf`; `None` when none is pending. A frame
    /// longer than `buf` is truncated, as smolnetd's 1500-byte reads expect (§7).
    fn recv(&self, buf: &mut [u8]) -> Option<usize>;
    /// Whether a received frame is pending.
    fn rx_pending(&self) -> bool;
}

/// The daemon's adapter: the data path's general frame port ([`NetPort`]): frames from smolnetd go
/// out through the TX ring without a timestamp; every received non-PTP frame is queued here
/// (PTP frames keep going to ptpd).
pub struct PortNet<M: ptp_pci::Mmio, Fam> {
    pub port: NetPort<M, Fam>,
    pub mac: [u8; 6],
}

impl<M: ptp_pci::Mmio, Fam: Family> NetAdapter for PortNet<M, Fam> {
    fn mac(&self) -> [u8; 6] {
        self.mac
    }
    fn carries_frames(&self) -> bool {
        true
    }
    fn send(&self, frame: &[u8]) -> std::result::Result<(), NetError> {
        self.port.send(frame).map_err(|e| match e {
            NetSendError::BadFrame => NetError::BadFrame(frame.len()),
            NetSendError::Busy if !self.port.link_up() => NetError::LinkDown,
            NetSendError::Busy => NetError::Busy,
        })
    }
    fn recv(&self, buf: &mut [u8]) -> Option<usize> {
        self.port.recv(buf)
    }
    fn rx_pending(&self) -> bool {
        self.port.rx_pending()
    }
}

enum Handle {
    Root,
    Data,
    Mac,
}

impl SchemeHandle for Handle {
    const ROOT: Self = Handle::Root;
    fn is_root(&self) -> bool {
        matches!(self, Handle::Root)
    }
}

/// The network scheme over adapter `A`.
pub struct NetScheme<A: NetAdapter> {
    adapter: A,
    name: String,
    handles: Handles<Handle>,
}

impl<A: NetAdapter> NetScheme<A> {
    /// `name` is the registered scheme name, e.g. `network.pci-0000-03-00.0_igc`.
    pub fn new(adapter: A, name: String) -> Self {
        Self {
            adapter,
            name,
            handles: Handles::default(),
        }
    }

    pub fn adapter(&self) -> &A {
        &self.adapter
    }

    /// Data handles to post EVENT_READ to: every one, while a frame is pending.
    pub fn readable_handles(&self) -> Vec<usize> {
        if !self.adapter.rx_pending() {
            return Vec::new();
        }
        self.handles
            .iter()
            .filter(|(_, h)| matches!(h, Handle::Data))
            .map(|(id, _)| id)
            .collect()
    }
}

impl<A: NetAdapter> SchemeSync for NetScheme<A> {
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
        if ctx.uid != 0 {
            return Err(Error::new(EACCES));
        }
        let (h, flags) = match path.trim_matches('/') {
            "" => (Handle::Data, NewFdFlags::empty()),
            "mac" => (Handle::Mac, NewFdFlags::POSITIONED),
            _ => return Err(Error::new(ENOENT)),
        };
        Ok(OpenResult::ThisScheme {
            number: self.handles.insert(h),
            flags,
        })
    }

    fn read(
        &mut self,
        id: usize,
        buf: &mut [u8],
        offset: u64,
        fcntl_flags: u32,
        _ctx: &CallerCtx,
    ) -> Result<usize> {
        match self.handles.get(id) {
            Some(Handle::Data) => match self.adapter.recv(buf) {
                Some(n) => Ok(n),
                None if fcntl_flags as usize & O_NONBLOCK != 0 => Err(Error::new(EAGAIN)),
                None => Err(Error::new(EWOULDBLOCK)),
            },
            Some(Handle::Mac) => {
                let mac = self.adapter.mac();
                let start = usize::try_from(offset).unwrap_or(usize::MAX).min(mac.len());
                let n = (mac.len() - start).min(buf.len());
                buf[..n].copy_from_slice(&mac[start..start + n]);
                Ok(n)
            }
            _ => Err(Error::new(EBADF)),
        }
    }

    fn write(
        &mut self,
        id: usize,
        buf: &[u8],
        _offset: u64,
        _fcntl_flags: u32,
        _ctx: &CallerCtx,
    ) -> Result<usize> {
        match self.handles.get(id) {
            Some(Handle::Data) => match self.adapter.send(buf) {
                Ok(()) => Ok(buf.len()),
                Err(e) => Err(Error::new(e.errno())),
            },
            _ => Err(Error::new(EBADF)),
        }
    }

    fn fevent(&mut self, id: usize, _flags: EventFlags, _ctx: &CallerCtx) -> Result<EventFlags> {
        match self.handles.get(id) {
            Some(Handle::Data) if self.adapter.rx_pending() => Ok(EventFlags::EVENT_READ),
            Some(_) => Ok(EventFlags::empty()),
            None => Err(Error::new(EBADF)),
        }
    }

    fn fpath(&mut self, id: usize, buf: &mut [u8], _ctx: &CallerCtx) -> Result<usize> {
        let path = match self.handles.get(id) {
            Some(Handle::Mac) => format!("/scheme/{}/mac", self.name),
            Some(_) => format!("/scheme/{}/", self.name),
            None => return Err(Error::new(EBADF)),
        };
        Ok(copy_path(&path, buf))
    }

    fn on_close(&mut self, id: usize) {
        self.handles.remove(id);
    }
}
