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
//! `Closed { NoHello }` and gets EPIPE; one that never writes holds nothing.
//!
//! Rings (issue 16): a `HelloRing` is answered, in the handle's mailbox, with an offer to map
//! the handle itself ([`ptp_ipc::ring::mapped_offer`]): a segment of the [`RingPool`] made
//! before the sandbox is lent to the handle, given new memory and initialised under a new
//! generation, the client maps it through its handle (`mmap_prep` serves the segment lent to
//! that handle and nothing to any other), and from then on
//! every message of the connection goes over the ring, as on Linux: igcd's hello, replies,
//! events (the IRQ threads send on the ring directly) and requests. The handle stays open as
//! the liveness signal (its close ends the connection and releases the segment). The main loop
//! answers the ring's requests, as it answers a handle's: it cannot sleep on the ring's doorbell
//! itself, so the segment's [`RingWorkers`] thread (made before the sandbox too) sleeps on the
//! ring for it (`wait_readable`, the ring's announce-then-recheck handshake), wakes the loop
//! through the wake pipe, and sleeps again only once the loop found the ring empty: a client
//! that keeps requests coming is served without further wake-ups. A ring larger
//! than the pool's segments, or none free (a segment is lent again only after its client's
//! handle closed, and it is new memory then, so a stale client cannot write into the next
//! connection's ring), or no pool (`--ring-segments 0`): the answer is `Closed { NoHello }` as
//! before, and the
//! client says the plain hello on a new handle. That refusal is read from the mailbox, so the
//! `HelloRing` write itself succeeds.
//!
//! The clock page (issue 23): path `clock` of the same scheme, open to anyone, is the page the
//! driver publishes in its own memory; `mmap_prep` lends it read-only and refuses a writable
//! mapping (EACCES), and the kernel does not let a borrowed read-only mapping be made writable
//! later (mprotect of a non-owned grant may only drop rights). Only igcd writes it. It was a
//! `/scheme/shm` segment before, which any process could map writable.

use std::cell::Cell;
use std::ffi::c_int;
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

use ptp_ipc::clockpage::{ClockPageWriter, PAGE_SIZE};
use ptp_ipc::redox::scheme::{Handles, SchemeHandle, copy_path};
use ptp_ipc::ring::{DOORBELL_FDS, DOORBELL_TAG, Lent, RingEndpoint, RingPool, mapped_offer};
use ptp_ipc::transport::mailbox::{Mailbox, ReadOutcome};
use ptp_ipc::{CloseReason, DriverEvent, DriverRequest, DriverToPtpd, PtpdToDriver, Wire};
use ptp_pci::PciFunction;
use redox_scheme::scheme::SchemeSync;
use redox_scheme::{CallerCtx, OpenResult, SendFdRequest, Socket};
use syscall::data::Stat;
use syscall::error::{
    EACCES, EAGAIN, EBADF, EINVAL, EMSGSIZE, ENOENT, EOPNOTSUPP, EPERM, EPIPE, EWOULDBLOCK, Error,
    Result,
};
use syscall::flag::{EventFlags, FobtainFdFlags, MODE_FILE, MapFlags, MunmapFlags, O_NONBLOCK};
use syscall::schemev2::NewFdFlags;

use super::super::access::ChannelAccess;
use super::super::requests::{DriverEnd, SEND_TIMEOUT, Step, answer, ring_geometry};
use super::super::{Device, EventSink};
use crate::family::Family;

/// The longest a ring worker waits (for a request, or for the loop to drain the ring) before
/// it checks that its connection is still the current one.
const RING_IDLE: Duration = Duration::from_secs(1);
/// Requests answered from a ring per pass of the loop, so the schemes are never starved.
const BATCH: usize = 64;
/// A closing notice on a ring is best effort: the peer may not be reading.
const CLOSE_TIMEOUT: Duration = Duration::from_millis(50);

/// The driver's end of a ring connection, and its worker's hand-off to the main loop.
struct RingConn {
    chan: DriverEnd<RingEndpoint>,
    /// Set by the worker when the ring has something for the loop; cleared by the loop once
    /// it found the ring empty (or the connection ended), which lets the worker sleep again.
    raised: Mutex<bool>,
    drained: Condvar,
}

impl RingConn {
    fn new(ring: RingEndpoint) -> Self {
        Self {
            chan: DriverEnd::new(ring),
            raised: Mutex::new(false),
            drained: Condvar::new(),
        }
    }

    fn flag(&self) -> MutexGuard<'_, bool> {
        self.raised.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn raise(&self) {
        *self.flag() = true;
    }

    fn is_raised(&self) -> bool {
        *self.flag()
    }

    /// The loop is done with what the worker raised: the worker may sleep on the ring again.
    fn settle(&self) {
        *self.flag() = false;
        self.drained.notify_all();
    }

    /// The worker waits at most `t` for [`Self::settle`]; `true` if it came.
    fn wait_settled(&self, t: Duration) -> bool {
        let g = self.flag();
        let (g, _) = self
            .drained
            .wait_timeout_while(g, t, |raised| *raised)
            .unwrap_or_else(|e| e.into_inner());
        !*g
    }
}

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

    /// The end a signal handler writes to (`stop`).
    pub fn write_fd(&self) -> c_int {
        self.wr
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

/// The connection that drives the NIC: its handle's mailbox (its identity) and, for a ring
/// connection, the ring every message goes over.
#[derive(Clone)]
struct Current {
    mb: Arc<Mailbox>,
    ring: Option<Arc<RingConn>>,
}

impl Current {
    fn is(&self, mb: &Arc<Mailbox>) -> bool {
        Arc::ptr_eq(&self.mb, mb)
    }
}

/// Where the IRQ threads' events go: the current ptpd connection.
pub struct Sink {
    current: Mutex<Option<Current>>,
    wake: WakePipe,
}

impl Sink {
    pub fn new(wake: WakePipe) -> Self {
        Self {
            current: Mutex::new(None),
            wake,
        }
    }

    fn current(&self) -> MutexGuard<'_, Option<Current>> {
        self.current.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn is_current(&self, mb: &Arc<Mailbox>) -> bool {
        self.current().as_ref().is_some_and(|c| c.is(mb))
    }

    /// Ends `mb`'s connection as the current one, if it is (its ring is shut, its handle reads
    /// end of file).
    fn drop_current(&self, mb: &Arc<Mailbox>) {
        let cur = {
            let mut c = self.current();
            match c.as_ref() {
                Some(x) if x.is(mb) => c.take(),
                _ => None,
            }
        };
        if let Some(c) = cur {
            if let Some(r) = &c.ring {
                r.chan.shutdown();
                r.settle();
            }
            c.mb.close();
            log::info!("ptpd disconnected");
        }
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
        let cur = self.current().clone();
        match cur {
            Some(Current { ring: Some(r), .. }) => {
                if let Err(e) = r.chan.send(&DriverToPtpd::Event(ev), Some(SEND_TIMEOUT)) {
                    log::warn!("event not delivered: {e}");
                }
            }
            Some(Current { mb, ring: None }) => self.push(&mb, &DriverToPtpd::Event(ev)),
            None => {}
        }
    }
}

/// Queues the reason on `mb`, then ends it (its reads see the reason, then end of file: a
/// `close` would discard it, and a client refused a ring would read only the end of file and
/// never learn to say the plain hello — issue 22, failure 3).
fn close(sink: &Sink, mb: &Mailbox, reason: CloseReason) {
    sink.push(mb, &DriverToPtpd::Event(DriverEvent::Closed { reason }));
    mb.finish();
}

/// Ends connection `c` with `reason`: over its ring when it has one (then the ring is shut,
/// which stops its worker), and its handle's reads at end of file.
fn end(sink: &Sink, c: &Current, reason: CloseReason) {
    match &c.ring {
        Some(r) => {
            let _ = r.chan.send(
                &DriverToPtpd::Event(DriverEvent::Closed { reason }),
                Some(CLOSE_TIMEOUT),
            );
            r.chan.shutdown();
            r.settle();
            c.mb.close();
        }
        None => close(sink, &c.mb, reason),
    }
}

enum Handle {
    Root,
    /// A connection: its mailbox, and the pool segment lent to it (released at close).
    Ptp {
        mb: Arc<Mailbox>,
        lent: Cell<Option<usize>>,
    },
    /// The clock page, for reading.
    Clock,
}

/// A ring connection for a worker: the ring, and the mailbox of its handle (whose identity
/// tells whether it is still the current connection).
struct Job {
    conn: Arc<RingConn>,
    mb: Arc<Mailbox>,
}

/// One thread per pool segment, made before the sandbox, watching the ring of the connection
/// its segment serves for the main loop (which cannot sleep on a ring's doorbell).
pub struct RingWorkers {
    jobs: Vec<Sender<Job>>,
}

impl RingWorkers {
    pub fn start(sink: &Arc<Sink>, n: usize) -> std::io::Result<Self> {
        let mut jobs = Vec::with_capacity(n);
        for k in 0..n {
            let (tx, rx) = channel();
            let sink = sink.clone();
            std::thread::Builder::new()
                .name(format!("ring{k}"))
                .spawn(move || work(&sink, rx))?;
            jobs.push(tx);
        }
        Ok(Self { jobs })
    }

    /// Hands `job` to the worker of segment `index`; `false` if that worker is gone.
    fn give(&self, index: usize, job: Job) -> bool {
        self.jobs.get(index).is_some_and(|t| t.send(job).is_ok())
    }
}

fn work(sink: &Sink, jobs: Receiver<Job>) {
    for job in jobs {
        watch(sink, &job);
        // The job's ring is dropped here: its segment may be lent again once released.
    }
}

/// Wakes the main loop whenever ring connection `job` has requests (or has ended), until it is
/// no longer the current connection.
fn watch(sink: &Sink, job: &Job) {
    while sink.is_current(&job.mb) {
        let ended = match job.conn.chan.transport().wait_readable(Some(RING_IDLE)) {
            Ok(false) => continue,
            Ok(true) => false,
            // Shut, stale, or the client died: the loop's next receive says which.
            Err(_) => true,
        };
        job.conn.raise();
        sink.wake.wake();
        if ended {
            return;
        }
        while !job.conn.wait_settled(RING_IDLE) {
            if !sink.is_current(&job.mb) {
                return;
            }
        }
    }
}

impl SchemeHandle for Handle {
    const ROOT: Self = Handle::Root;
    fn is_root(&self) -> bool {
        matches!(self, Handle::Root)
    }
}

/// The ring segments a driver lends, once made (`None` before, or with `--ring-segments 0`).
pub type SharedPool = Arc<Mutex<Option<RingPool>>>;
/// The clock page, once made by the start-up thread; served read-only as path `clock`.
pub type SharedPage = Arc<std::sync::OnceLock<Arc<ClockPageWriter>>>;

/// The driver channel scheme.
pub struct ChannelScheme<F: PciFunction, Fam: Family> {
    dev: Arc<Device<F, Fam>>,
    sink: Arc<Sink>,
    name: String,
    generation: u64,
    access: ChannelAccess,
    handles: Handles<Handle>,
    rings: SharedPool,
    workers: RingWorkers,
    page: SharedPage,
    /// The scheme socket, to take the descriptors a ring client passes (set once registered).
    socket: Option<&'static Socket>,
}

impl<F: PciFunction, Fam: Family> ChannelScheme<F, Fam> {
    pub fn new(
        dev: Arc<Device<F, Fam>>,
        sink: Arc<Sink>,
        name: String,
        generation: u64,
        access: ChannelAccess,
        rings: (SharedPool, RingWorkers),
        page: SharedPage,
    ) -> Self {
        Self {
            dev,
            sink,
            name,
            generation,
            access,
            handles: Handles::default(),
            rings: rings.0,
            workers: rings.1,
            page,
            socket: None,
        }
    }

    pub fn set_socket(&mut self, socket: &'static Socket) {
        self.socket = Some(socket);
    }

    /// The ring of handle `id`'s connection, if it is the current one and has a ring.
    fn ring_of(&self, id: usize) -> Result<Arc<RingConn>> {
        let Some(Handle::Ptp { mb, lent }) = self.handles.get(id) else {
            return Err(Error::new(EBADF));
        };
        match self.sink.current().clone() {
            Some(Current {
                mb: m,
                ring: Some(r),
            }) if lent.get().is_some() && Arc::ptr_eq(&m, mb) => Ok(r),
            _ => Err(Error::new(EPIPE)),
        }
    }

    /// Answers the hello of connection `new`: igcd's own hello (over its ring, when it has
    /// one), then `new` replaces the current connection. `false` if the hello could not be
    /// sent (a ring already full: nothing changed).
    fn take_over(&self, new: Current, pid: usize) -> bool {
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
        match &new.ring {
            Some(r) => {
                let sent = hello
                    .into_iter()
                    .try_for_each(|ev| r.chan.send(&DriverToPtpd::Event(ev), Some(SEND_TIMEOUT)));
                if let Err(e) = sent {
                    log::warn!("driver channel: pid {pid}: hello not sent on the ring: {e}");
                    return false;
                }
            }
            None => hello
                .into_iter()
                .for_each(|ev| self.sink.push(&new.mb, &DriverToPtpd::Event(ev))),
        }
        let old = self.sink.current().replace(new);
        if let Some(old) = old {
            end(&self.sink, &old, CloseReason::Replaced);
            log::warn!("ptpd connection replaced by pid {pid}; the previous one is closed");
        } else {
            log::info!("ptpd connected (pid {pid})");
        }
        true
    }

    /// A segment of the pool for a `HelloRing` of this geometry, or why not.
    fn lend(&self, slot_size: u32, slot_count: u32) -> Result<Lent, String> {
        let g = ring_geometry(slot_size, slot_count)?;
        let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
        let pool = rings
            .as_mut()
            .ok_or("no ring segments (--ring-segments 0, or they could not be made)")?;
        pool.lend(g, self.dev.busy_poll)
            .map_err(|e| format!("no ring segment: {e}"))
    }

    /// Answers handle `id`'s `HelloRing`: a segment's name in its mailbox and igcd's hello on
    /// the ring, which then carries the connection (its worker answers the requests); or
    /// `Closed { NoHello }` in the mailbox, after which the client says the plain hello.
    fn offer_ring(&self, id: usize, mb: &Arc<Mailbox>, size: (u32, u32), pid: usize) {
        let lent = match self.lend(size.0, size.1) {
            Ok(l) => l,
            Err(why) => {
                log::info!("driver channel: pid {pid}: {why}; plain hello next");
                return close(&self.sink, mb, CloseReason::NoHello);
            }
        };
        if let Some(Handle::Ptp { lent: l, .. }) = self.handles.get(id) {
            l.set(Some(lent.index));
        }
        // The offer first: the client reads it from the handle, maps the segment through the
        // handle, then reads everything from the ring.
        if let Err(e) = mb.push(&mapped_offer(lent.region_len)) {
            log::warn!("driver channel: pid {pid}: ring offer not queued: {e}");
            return mb.close();
        }
        self.sink.wake.wake();
        let (index, name) = (lent.index, lent.name);
        let conn = Arc::new(RingConn::new(lent.ring));
        let cur = Current {
            mb: mb.clone(),
            ring: Some(conn.clone()),
        };
        if !self.take_over(cur, pid) {
            return mb.close();
        }
        let job = Job {
            conn,
            mb: mb.clone(),
        };
        if !self.workers.give(index, job) {
            log::error!("driver channel: the worker of ring segment {index} is gone");
            return self.sink.drop_current(mb);
        }
        log::info!("driver channel: pid {pid} on ring segment {name}");
    }

    /// Answers the requests waiting on the current connection's ring, at most [`BATCH`] (the
    /// loop comes round again for more), once its worker raised them. Requests reach the
    /// device from this thread only, as a handle's do.
    pub fn serve_ring(&self) {
        let Some(cur) = self.sink.current().clone() else {
            return;
        };
        let Some(rc) = cur.ring.as_deref().filter(|r| r.is_raised()) else {
            return;
        };
        for _ in 0..BATCH {
            let received = rc.chan.recv(Some(Duration::ZERO));
            match answer(&self.dev, &*self.sink, &rc.chan, received) {
                Step::Served => {}
                Step::Idle => return rc.settle(),
                Step::Gone | Step::Failed => return self.sink.drop_current(&cur.mb),
            }
        }
        self.sink.wake.wake();
    }

    /// Handles with a message (or end of file) to read: the loop posts EVENT_READ to them.
    pub fn readable_handles(&self) -> Vec<usize> {
        self.handles
            .iter()
            .filter(|(_, h)| matches!(h, Handle::Ptp { mb, .. } if mb.readable()))
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
        match path.trim_matches('/') {
            "ptp" => {}
            // Anyone may read the PHC's published time; nobody but igcd may write it.
            "clock" if self.page.get().is_some() => {
                return Ok(OpenResult::ThisScheme {
                    number: self.handles.insert(Handle::Clock),
                    flags: NewFdFlags::empty(),
                });
            }
            _ => return Err(Error::new(ENOENT)),
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
        let h = Handle::Ptp {
            mb: Arc::new(Mailbox::new()),
            lent: Cell::new(None),
        };
        Ok(OpenResult::ThisScheme {
            number: self.handles.insert(h),
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
        let Some(Handle::Ptp { mb, .. }) = self.handles.get(id) else {
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
        let Some(Handle::Ptp { mb, lent }) = self.handles.get(id) else {
            return Err(Error::new(EBADF));
        };
        if mb.is_closed() {
            return Err(Error::new(EPIPE));
        }
        // As on Linux: a ring connection's messages go over the ring; its handle only says it
        // is alive.
        if lent.get().is_some() {
            log::warn!(
                "driver channel: {} bytes on a ring connection's handle ignored",
                buf.len()
            );
            return Ok(buf.len());
        }
        let mb = mb.clone();
        let current = self.sink.is_current(&mb);
        match PtpdToDriver::decode(buf) {
            Ok(PtpdToDriver {
                request: DriverRequest::Hello,
                ..
            }) => {
                // A repeated hello changes nothing.
                if !current {
                    let new = Current {
                        mb: mb.clone(),
                        ring: None,
                    };
                    self.take_over(new, ctx.pid);
                }
            }
            // Accepted either way: the offer or the refusal waits in the mailbox (a failed
            // write would keep the client from reading the refusal that sends it to the plain
            // hello, `connect_driver`).
            Ok(PtpdToDriver {
                request:
                    DriverRequest::HelloRing {
                        slot_size,
                        slot_count,
                    },
                ..
            }) if !current => self.offer_ring(id, &mb, (slot_size, slot_count), ctx.pid),
            // A ring asked for on a connection that has its channel already changes nothing.
            Ok(PtpdToDriver {
                request: DriverRequest::HelloRing { .. },
                ..
            }) => {}
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

    /// A ring client's doorbells ([`DOORBELL_FDS`] pipe ends tagged [`DOORBELL_TAG`]), passed
    /// right after it attached the segment its handle was lent. Anything else is refused; the
    /// descriptors of a refused call are closed.
    fn on_sendfd(&mut self, req: &SendFdRequest) -> Result<usize> {
        let socket = self.socket.ok_or(Error::new(EOPNOTSUPP))?;
        let n = req.num_fds();
        if req.arg() != DOORBELL_TAG || n != DOORBELL_FDS {
            log::warn!(
                "driver channel: {n} descriptors with tag {:#x} refused",
                req.arg()
            );
            return Err(Error::new(EINVAL));
        }
        let mut fds = [0usize; DOORBELL_FDS];
        req.obtain_fd(socket, FobtainFdFlags::empty(), &mut fds)?;
        let ring = self.ring_of(req.id()).inspect_err(|_| {
            fds.into_iter().for_each(|fd| drop(libredox::Fd::new(fd)));
        })?;
        // Taken by the bell either way (closed by it on failure).
        ring.chan.transport().adopt_doorbells(&fds).map_err(|e| {
            log::warn!("driver channel: doorbells not taken: {e}");
            Error::new(EINVAL)
        })?;
        log::debug!("driver channel: ring doorbells taken");
        Ok(n)
    }

    fn fevent(&mut self, id: usize, _flags: EventFlags, _ctx: &CallerCtx) -> Result<EventFlags> {
        match self.handles.get(id) {
            Some(Handle::Ptp { mb, .. }) if mb.readable() => {
                Ok(EventFlags::EVENT_READ | EventFlags::EVENT_WRITE)
            }
            Some(_) => Ok(EventFlags::EVENT_WRITE),
            None => Err(Error::new(EBADF)),
        }
    }

    fn fpath(&mut self, id: usize, buf: &mut [u8], _ctx: &CallerCtx) -> Result<usize> {
        let path = match self.handles.get(id) {
            Some(Handle::Ptp { .. }) => format!("/scheme/{}/ptp", self.name),
            Some(Handle::Clock) => format!("/scheme/{}/clock", self.name),
            Some(Handle::Root) => format!("/scheme/{}", self.name),
            None => return Err(Error::new(EBADF)),
        };
        Ok(copy_path(&path, buf))
    }

    /// Maps the clock page (read-only, for anyone) or the ring segment lent to this handle
    /// (read-write, for its client alone) into the caller: the address of the memory in igcd,
    /// which the kernel then borrows. Anything else is refused.
    fn mmap_prep(
        &mut self,
        id: usize,
        offset: u64,
        size: usize,
        flags: MapFlags,
        ctx: &CallerCtx,
    ) -> Result<usize> {
        let (addr, len) = match self.handles.get(id) {
            Some(Handle::Clock) => {
                if flags.contains(MapFlags::PROT_WRITE) {
                    log::warn!(
                        "clock page: writable mapping refused to pid {} (uid {})",
                        ctx.pid,
                        ctx.uid
                    );
                    return Err(Error::new(EACCES));
                }
                let page = self.page.get().ok_or(Error::new(EBADF))?;
                (page.region(), PAGE_SIZE)
            }
            Some(Handle::Ptp { lent, .. }) => {
                let k = lent.get().ok_or(Error::new(EACCES))?;
                let rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
                let pool = rings.as_ref().ok_or(Error::new(EACCES))?;
                pool.lent_region(k).ok_or(Error::new(EACCES))?
            }
            _ => return Err(Error::new(EBADF)),
        };
        // The memory is whole pages (mmap rounds it up; relibc asks for whole pages too).
        if offset != 0 || size == 0 || size > len.next_multiple_of(PAGE_SIZE) {
            log::warn!(
                "driver channel: mapping of {size} B at {offset} refused to pid {} (have {len} B)",
                ctx.pid
            );
            return Err(Error::new(EINVAL));
        }
        Ok(addr)
    }

    /// The kernel tells us a mapping went; nothing to do (the memory stays ours).
    fn munmap(
        &mut self,
        _id: usize,
        _offset: u64,
        _size: usize,
        _flags: MunmapFlags,
        _ctx: &CallerCtx,
    ) -> Result<()> {
        Ok(())
    }

    /// The clock page's size and read-only mode, which readers check before mapping it.
    fn fstat(&mut self, id: usize, stat: &mut Stat, _ctx: &CallerCtx) -> Result<()> {
        match self.handles.get(id) {
            Some(Handle::Clock) => {
                stat.st_mode = MODE_FILE | 0o444;
                stat.st_size = PAGE_SIZE as u64;
                Ok(())
            }
            Some(_) => Err(Error::new(EOPNOTSUPP)),
            None => Err(Error::new(EBADF)),
        }
    }

    fn on_close(&mut self, id: usize) {
        if let Some(Handle::Ptp { mb, lent }) = self.handles.remove(id) {
            self.sink.drop_current(&mb);
            mb.close();
            // The client has let go of its ring (it closes the ring before the handle, or its
            // process is gone): the segment may serve the next connection.
            if let Some(k) = lent.get() {
                let mut rings = self.rings.lock().unwrap_or_else(|e| e.into_inner());
                if let Some(pool) = rings.as_mut() {
                    pool.release(k);
                }
            }
        }
    }
}
