//! The driver channel on Redox: scheme `ptpdrv.<pci name>_<family>` (`_igc`, `_igb`), path
//! `ptp` (DESIGN.md §2).
//!
//! ptpd opens `/scheme/ptpdrv.<pci name>_igc/ptp` (uid 0 only) and speaks the same messages as
//! over a Linux SOCK_SEQPACKET socket: one `write` = one encoded `PtpdToDriver`, one `read` =
//! one encoded `DriverToPtpd` (a reply or an event) from the handle's [`Mailbox`]; a read of 0
//! bytes means this conversation is over (a newer ptpd connection replaced it). Requests are
//! executed inside the `write`, on the main thread, so a reply is queued before the write
//! returns; events come from the IRQ threads through [`Sink`], which wakes the main loop to
//! answer parked reads and post EVENT_READ.
//!
//! Privilege: the caller's uid and gid at open decide ([`ChannelAccess`]: root, igcd's own uid,
//! `--allow-uid`, `--allow-gid`); anyone else gets EPERM. They are taken at open, as
//! redox-scheme 0.12 passes correct ids with `openat` but not with every later call.
//!
//! As on Linux, a handle drives the NIC only after its `Hello` (the first write): igcd answers
//! with its own hello (`Restarted`, `Link`) and the handle replaces the current one, which reads
//! `Closed { Replaced }` and then end of file. A handle that writes anything else first reads
//! `Closed { NoHello }` and gets EPIPE; one that never writes holds nothing. A `HelloRing`
//! (issue 16) gets the same: rings are not offered here yet, and the client says the plain
//! hello on a new handle.

use std::ffi::c_int;
use std::sync::{Arc, Mutex, MutexGuard};

use ptp_ipc::redox::scheme::{Handles, SchemeHandle, copy_path};
use ptp_ipc::transport::mailbox::{Mailbox, ReadOutcome};
use ptp_ipc::{CloseReason, DriverEvent, DriverRequest, DriverToPtpd, PtpdToDriver, Wire};
use ptp_pci::PciFunction;
use redox_scheme::scheme::SchemeSync;
use redox_scheme::{CallerCtx, OpenResult};
use syscall::error::{EAGAIN, EBADF, EMSGSIZE, ENOENT, EPERM, EPIPE, EWOULDBLOCK, Error, Result};
use syscall::flag::{EventFlags, O_NONBLOCK};
use syscall::schemev2::NewFdFlags;

use super::super::access::ChannelAccess;
use super::super::{Device, EventSink};
use crate::family::Family;

/// A self-pipe: any thread may wake the main event loop without blocking (§10: `pipe` stays
/// available after `setrens(0, 0)`).
pub struct WakePipe {
    rd: c_int,
    wr: c_int,
}

impl WakePipe {
    pub fn new() -> std::io::Result<Self> {
        let mut fds: [c_int; 2] = [-1; 2];
        // Safety: `fds` is a writable array of two c_ints, as pipe(2) requires.
        if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        for fd in fds {
            // Safety: fcntl on descriptors we just created; no memory is passed.
            unsafe {
                let fl = libc::fcntl(fd, libc::F_GETFL);
                libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK);
                libc::fcntl(fd, libc::F_SETFD, libc::FD_CLOEXEC);
            }
        }
        Ok(Self {
            rd: fds[0],
            wr: fds[1],
        })
    }

    /// The end the event loop subscribes.
    pub fn read_fd(&self) -> usize {
        self.rd as usize
    }

    /// Wakes the loop. Never blocks: a full pipe already holds a wake-up.
    pub fn wake(&self) {
        let b = [1u8];
        // Safety: writes one byte from `b`, alive for the call, to our non-blocking pipe.
        let _ = unsafe { libc::write(self.wr, b.as_ptr().cast(), 1) };
    }

    /// Empties the pipe (bounded: it is non-blocking and holds at most its capacity).
    pub fn drain(&self) {
        let mut buf = [0u8; 64];
        // Safety: reads at most 64 bytes into `buf`, which outlives each call.
        while unsafe { libc::read(self.rd, buf.as_mut_ptr().cast(), buf.len()) } > 0 {}
    }
}

impl Drop for WakePipe {
    fn drop(&mut self) {
        // Safety: both ends are ours and unused after this.
        unsafe {
            libc::close(self.rd);
            libc::close(self.wr);
        }
    }
}

/// Where the IRQ threads' events go: the mailbox of the current ptpd connection.
pub struct Sink {
    current: Mutex<Option<Arc<Mailbox>>>,
    wake: WakePipe,
}

impl Sink {
    pub fn new(wake: WakePipe) -> Self {
        Self {
            current: Mutex::new(None),
            wake,
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Arc<Mailbox>>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub fn wake_pipe(&self) -> &WakePipe {
        &self.wake
    }

    fn push(&self, mb: &Mailbox, msg: &DriverToPtpd) {
        let mut buf = Vec::with_capacity(128);
        match msg.try_encode(&mut buf) {
            Ok(()) => match mb.push(&buf) {
                Ok(()) => self.wake.wake(),
                Err(e) => log::warn!("message to ptpd dropped: {e}"),
            },
            Err(e) => log::warn!("message to ptpd not encodable: {e}"),
        }
    }
}

impl EventSink for Sink {
    fn send(&self, ev: DriverEvent) {
        let mb = self.current().clone();
        if let Some(mb) = mb {
            self.push(&mb, &DriverToPtpd::Event(ev));
        }
    }
}

/// Queues the reason on `mb`, then ends it (its reads see the reason, then end of file).
fn close(sink: &Sink, mb: &Mailbox, reason: CloseReason) {
    sink.push(mb, &DriverToPtpd::Event(DriverEvent::Closed { reason }));
    mb.close();
}

enum Handle {
    Root,
    Ptp(Arc<Mailbox>),
}

impl SchemeHandle for Handle {
    const ROOT: Self = Handle::Root;
    fn is_root(&self) -> bool {
        matches!(self, Handle::Root)
    }
}

/// The driver channel scheme.
pub struct ChannelScheme<F: PciFunction, Fam: Family> {
    dev: Arc<Device<F, Fam>>,
    sink: Arc<Sink>,
    name: String,
    generation: u64,
    access: ChannelAccess,
    handles: Handles<Handle>,
}

impl<F: PciFunction, Fam: Family> ChannelScheme<F, Fam> {
    pub fn new(
        dev: Arc<Device<F, Fam>>,
        sink: Arc<Sink>,
        name: String,
        generation: u64,
        access: ChannelAccess,
    ) -> Self {
        Self {
            dev,
            sink,
            name,
            generation,
            access,
            handles: Handles::default(),
        }
    }

    /// Answers the hello on `mb`: igcd's own hello, then `mb` replaces the current handle.
    fn take_over(&self, mb: &Arc<Mailbox>, pid: usize) {
        // The generation tells ptpd whether this is a new driver instance.
        let link = self.dev.link();
        for ev in [
            DriverEvent::Restarted {
                generation: self.generation,
            },
            DriverEvent::Link {
                up: link.up,
                speed_mbps: link.speed_mbps,
            },
        ] {
            self.sink.push(mb, &DriverToPtpd::Event(ev));
        }
        if let Some(old) = self.sink.current().replace(mb.clone()) {
            close(&self.sink, &old, CloseReason::Replaced);
            log::warn!("ptpd connection replaced by pid {pid}; the previous one is closed");
        } else {
            log::info!("ptpd connected (pid {pid})");
        }
    }

    /// Handles with a message (or end of file) to read: the loop posts EVENT_READ to them.
    pub fn readable_handles(&self) -> Vec<usize> {
        self.handles
            .iter()
            .filter(|(_, h)| matches!(h, Handle::Ptp(mb) if mb.readable()))
            .map(|(id, _)| id)
            .collect()
    }
}

impl<F: PciFunction, Fam: Family> SchemeSync for ChannelScheme<F, Fam> {
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
        if path.trim_matches('/') != "ptp" {
            return Err(Error::new(ENOENT));
        }
        if !self.access.permits(ctx.uid, &[ctx.gid]) {
            log::warn!(
                "driver channel: refused pid {} (uid {}, gid {}): allowed are {}",
                ctx.pid,
                ctx.uid,
                ctx.gid,
                self.access
            );
            return Err(Error::new(EPERM));
        }
        // Nothing is served before the handle's hello (`write`).
        let mb = Arc::new(Mailbox::new());
        Ok(OpenResult::ThisScheme {
            number: self.handles.insert(Handle::Ptp(mb)),
            flags: NewFdFlags::empty(),
        })
    }

    fn read(
        &mut self,
        id: usize,
        buf: &mut [u8],
        _offset: u64,
        fcntl_flags: u32,
        _ctx: &CallerCtx,
    ) -> Result<usize> {
        let Some(Handle::Ptp(mb)) = self.handles.get(id) else {
            return Err(Error::new(EBADF));
        };
        match mb.pop_into(buf) {
            ReadOutcome::Message(n) => Ok(n),
            ReadOutcome::Closed => Ok(0),
            ReadOutcome::TooSmall { .. } => Err(Error::new(EMSGSIZE)),
            ReadOutcome::Empty if fcntl_flags as usize & O_NONBLOCK != 0 => Err(Error::new(EAGAIN)),
            ReadOutcome::Empty => Err(Error::new(EWOULDBLOCK)),
        }
    }

    fn write(
        &mut self,
        id: usize,
        buf: &[u8],
        _offset: u64,
        _fcntl_flags: u32,
        ctx: &CallerCtx,
    ) -> Result<usize> {
        let Some(Handle::Ptp(mb)) = self.handles.get(id) else {
            return Err(Error::new(EBADF));
        };
        if mb.is_closed() {
            return Err(Error::new(EPIPE));
        }
        let mb = mb.clone();
        let current = self
            .sink
            .current()
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(c, &mb));
        match PtpdToDriver::decode(buf) {
            Ok(PtpdToDriver {
                request: DriverRequest::Hello,
                ..
            }) => {
                // A repeated hello changes nothing.
                if !current {
                    self.take_over(&mb, ctx.pid);
                }
            }
            // Rings are not offered on Redox yet: the segment would have to exist before the
            // sandbox (setrens) that forbids opening /scheme/shm later. The client's refusal
            // handling then says the plain hello (`connect_driver`).
            Ok(PtpdToDriver {
                request: DriverRequest::HelloRing { .. },
                ..
            }) if !current => {
                log::info!(
                    "driver channel: pid {}: no ring on Redox; plain hello next",
                    ctx.pid
                );
                close(&self.sink, &mb, CloseReason::NoHello);
                return Err(Error::new(EPIPE));
            }
            Ok(m) if !current => {
                log::warn!(
                    "driver channel: pid {} closed: {:?} before hello",
                    ctx.pid,
                    m.request
                );
                close(&self.sink, &mb, CloseReason::NoHello);
                return Err(Error::new(EPIPE));
            }
            Ok(PtpdToDriver { seq, request }) => {
                if let Some(reply) = self.dev.handle(request, &*self.sink) {
                    self.sink.push(&mb, &DriverToPtpd::Reply { seq, reply });
                }
            }
            // As on Linux: a malformed request is reported and dropped, the channel stays up.
            Err(e) => log::warn!("malformed request dropped: {e}"),
        }
        Ok(buf.len())
    }

    fn fevent(&mut self, id: usize, _flags: EventFlags, _ctx: &CallerCtx) -> Result<EventFlags> {
        match self.handles.get(id) {
            Some(Handle::Ptp(mb)) if mb.readable() => {
                Ok(EventFlags::EVENT_READ | EventFlags::EVENT_WRITE)
            }
            Some(_) => Ok(EventFlags::EVENT_WRITE),
            None => Err(Error::new(EBADF)),
        }
    }

    fn fpath(&mut self, id: usize, buf: &mut [u8], _ctx: &CallerCtx) -> Result<usize> {
        let path = match self.handles.get(id) {
            Some(Handle::Ptp(_)) => format!("/scheme/{}/ptp", self.name),
            Some(Handle::Root) => format!("/scheme/{}", self.name),
            None => return Err(Error::new(EBADF)),
        };
        Ok(copy_path(&path, buf))
    }

    fn on_close(&mut self, id: usize) {
        if let Some(Handle::Ptp(mb)) = self.handles.remove(id) {
            let mut cur = self.sink.current();
            if cur.as_ref().is_some_and(|c| Arc::ptr_eq(c, &mb)) {
                *cur = None;
                log::info!("ptpd disconnected");
            }
            mb.close();
        }
    }
}
