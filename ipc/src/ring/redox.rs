//! Redox backing of a ring pair: the region is the driver's own memory, lent to one connection
//! at a time and mapped by its client through the driver handle the offer came on (the
//! driver's scheme answers `mmap_prep` for the handle it lent the segment to, and for no other).
//! Each side's two bells are a
//! counter word in the region (`bell[2 * side + kind]`, counted up by whoever rings it: the
//! truth of "signalled", as on every OS) and a pipe that wakes the sleeper.
//!
//! Why pipes and not a futex on the word: the kernel this project boots in CI (56947e1a,
//! 2026-06) wakes a FUTEX_WAIT only from the waiter's own address space (`FutexEntry` keeps the
//! waiter's address space and FUTEX_WAKE skips entries of another), so a wake from the other
//! process never arrived and every request waited out its slice (issue 22, failure 2; later
//! kernels key on the physical page alone). A pipe wakes across processes on every kernel, and
//! is what Linux's eventfds are here. The **client** makes all four pipes (a driver in its
//! `setrens(0, 0)` sandbox can open nothing) and passes the driver its halves — the read ends
//! of the driver's data and space bells, the write ends of the client's — with one `sendfd`
//! (SYS_CALL with `CallFlags::FD`) on the driver handle, tagged [`DOORBELL_TAG`]. Until they
//! arrive (between the offer and the client's attach) the driver's bell only ticks its word
//! and its sleeper wakes at the next slice.
//!
//! A sleeper waits on an event queue holding its bell's pipe, a self-pipe (a wake-up from our
//! own side: [`Bell::ring_own`], shutdown) and a `time` scheme timer armed at an **absolute**
//! monotonic deadline (`crate::deadline`: a relative timeout there was issue 22, failure 1).
//! Queue, timer and self-pipe of a driver's segment are made with the segment, before the
//! sandbox. One thread sleeps on a bell at a time; a second waiter of the same kind polls the
//! word every millisecond (rare: two threads of one side blocked on a full ring).
//!
//! There is no hang-up to poll for, so a waiting side wakes at least every [`SLICE`] to check
//! that the peer is still there: `kill(pid, 0)` on the pid it published in the region, and on
//! the client side also the kernel's context table (`/scheme/sys/context`, [`crate::sys_context`]):
//! a killed igcd that nobody has reaped yet still answers `kill`, but has left the table. The
//! driver handle cannot be asked instead: a read sent to igcd's scheme just as igcd was killed
//! never returned on this kernel (the boot test's ptpd hung so under load, 2 runs in 3). The
//! driver side needs neither: a dead client's handle is closed (`on_close`).
//! Who can write a segment: the driver and the client whose handle it is lent to; nobody else
//! can name it. (Until issue 23 segments were `/scheme/shm/<name>`, which any process could map
//! writable.) Each connection gets new memory, so a client that kept its mapping after its
//! connection ended writes only to pages the driver no longer uses. The kernel cannot shrink a
//! mapping under either side; a client that writes nonsense into its own ring meets the
//! ring's bound checks (typed errors).
//!
//! A driver makes its segments before the sandbox ([`create_ring_pool`]) and lends them to one
//! connection after another ([`RingPool`], `segment.rs`); a client attaches with
//! [`attach_ring_mapped`].

use std::ffi::c_int;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};
use std::time::Duration;

use event::{EventFlags, EventQueue};
use libredox::Fd;

use super::layout::{self, Geometry};
use super::map::Mapping;
use super::{
    Bell, DOORBELL_FDS, DOORBELL_TAG, RingEndpoint, RingError, RingPool, Segment, Wake, Woken,
};
use crate::deadline::{deadline_ns, slice_end_ns};
use crate::redox::timer::{Timer, mono_ns};

/// Longest single sleep before the peer's liveness is checked again.
const SLICE: Duration = Duration::from_millis(100);
/// How often a second waiter on a bell another thread sleeps on re-checks the word.
const CONTENDED_POLL: Duration = Duration::from_millis(1);

fn rx_err(what: &str, e: libredox::error::Error) -> RingError {
    RingError::Io(format!("{what}: {e}"))
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pipe whose both ends never block: a full pipe already means "rung", an empty one is
/// drained.
fn pipe() -> Result<(Fd, Fd), RingError> {
    let mut fds: [c_int; 2] = [-1; 2];
    // Safety: `fds` is a writable array of two c_ints, as pipe(2) requires.
    if unsafe { libc::pipe(fds.as_mut_ptr()) } != 0 {
        return Err(RingError::Io(format!(
            "doorbell pipe: {}",
            std::io::Error::last_os_error()
        )));
    }
    for fd in fds {
        // Safety: plain fcntl calls on descriptors we just made.
        let ok = unsafe {
            let fl = libc::fcntl(fd, libc::F_GETFL);
            fl >= 0 && libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) >= 0
        };
        if !ok {
            return Err(RingError::Io(format!(
                "doorbell pipe non-blocking: {}",
                std::io::Error::last_os_error()
            )));
        }
    }
    Ok((Fd::new(fds[0] as usize), Fd::new(fds[1] as usize)))
}

/// Rings a doorbell pipe: one byte, never blocking.
fn knock(fd: &Fd) {
    let _ = fd.write(&[1]);
}

/// Empties a doorbell pipe (non-blocking).
fn drain(fd: &Fd) {
    let mut buf = [0u8; 64];
    while matches!(fd.read(&mut buf), Ok(n) if n > 0) {}
}

const SRC_TIMER: usize = 0;
const SRC_OWN: usize = 1;
const SRC_BELL: usize = 2;

/// Where one bell's sleeper sleeps: an event queue over the bell's pipe (adopted per
/// connection), a self-pipe and a timer.
struct Waiter {
    queue: EventQueue<usize>,
    timer: Timer,
    own: (Fd, Fd),
    bell_rd: Mutex<Option<Fd>>,
    sleeper: Mutex<()>,
}

impl Waiter {
    /// Opens `/scheme/event` and `/scheme/time`: before the sandbox.
    fn new() -> Result<Self, RingError> {
        let queue = EventQueue::new().map_err(|e| rx_err("doorbell event queue", e))?;
        let timer = Timer::open().map_err(|e| rx_err("doorbell timer", e))?;
        let own = pipe()?;
        for (fd, src) in [(timer.raw(), SRC_TIMER), (own.0.raw(), SRC_OWN)] {
            queue
                .subscribe(fd, src, EventFlags::READ)
                .map_err(|e| rx_err("doorbell subscribe", e))?;
        }
        Ok(Self {
            queue,
            timer,
            own,
            bell_rd: Mutex::new(None),
            sleeper: Mutex::new(()),
        })
    }

    /// Makes `rd` the pipe the peer rings (replacing a former connection's).
    fn adopt(&self, rd: Fd) -> Result<(), RingError> {
        self.forget();
        self.queue
            .subscribe(rd.raw(), SRC_BELL, EventFlags::READ)
            .map_err(|e| rx_err("doorbell subscribe", e))?;
        *lock(&self.bell_rd) = Some(rd);
        Ok(())
    }

    fn forget(&self) {
        if let Some(old) = lock(&self.bell_rd).take() {
            let _ = self.queue.unsubscribe(old.raw());
        }
    }

    fn kick(&self) {
        knock(&self.own.1);
    }

    /// Sleeps until a pipe of ours is rung or monotonic time `end_ns` passes (or, while another
    /// thread sleeps here, for at most [`CONTENDED_POLL`]). Callers re-check the word after.
    fn sleep_until(&self, end_ns: u64) -> Result<(), RingError> {
        let _guard = match self.sleeper.try_lock() {
            Ok(g) => g,
            Err(TryLockError::Poisoned(p)) => p.into_inner(),
            Err(TryLockError::WouldBlock) => {
                let left = Duration::from_nanos(end_ns.saturating_sub(mono_ns()));
                std::thread::sleep(left.min(CONTENDED_POLL));
                return Ok(());
            }
        };
        let now = mono_ns();
        if end_ns <= now {
            return Ok(());
        }
        self.timer
            .ensure_by(end_ns, now)
            .map_err(|e| rx_err("arm doorbell timer", e))?;
        match self.queue.next_event() {
            Ok(_) => {}
            Err(e) if e.is_interrupt() => {}
            Err(e) => return Err(rx_err("doorbell event queue", e)),
        }
        drain(&self.own.0);
        if let Some(rd) = lock(&self.bell_rd).as_ref() {
            drain(rd);
        }
        Ok(())
    }
}

/// One side's doorbell descriptors, kept across the connections of a driver's pool segment.
struct Doorbells {
    /// Indexed by `Wake as usize`.
    waiters: [Waiter; 2],
    /// The write ends of the peer's bells.
    peer_wr: [Mutex<Option<Fd>>; 2],
}

impl Doorbells {
    fn new() -> Result<Arc<Self>, RingError> {
        Ok(Arc::new(Self {
            waiters: [Waiter::new()?, Waiter::new()?],
            peer_wr: [Mutex::new(None), Mutex::new(None)],
        }))
    }

    fn adopt(&self, rd: [Fd; 2], peer_wr: [Fd; 2]) -> Result<(), RingError> {
        for (w, fd) in self.waiters.iter().zip(rd) {
            w.adopt(fd)?;
        }
        for (slot, fd) in self.peer_wr.iter().zip(peer_wr) {
            *lock(slot) = Some(fd);
        }
        // Whoever slept before the pipes came re-checks now, not at the end of its slice.
        self.waiters.iter().for_each(Waiter::kick);
        Ok(())
    }

    /// Drops a former connection's descriptors (its endpoint is gone: nobody sleeps here).
    fn reset(&self) {
        self.waiters.iter().for_each(Waiter::forget);
        for slot in &self.peer_wr {
            lock(slot).take();
        }
    }

    fn ring_peer(&self, w: Wake) {
        if let Some(fd) = lock(&self.peer_wr[w as usize]).as_ref() {
            knock(fd);
        }
    }
}

/// The Redox bell: counter words inside the mapping plus the side's [`Doorbells`] (`Mapping`
/// outlives the bell: both live in the same `RingEndpoint`, the mapping dropped last).
struct PipeBell {
    mine: [*const AtomicU32; 2],
    peer: [*const AtomicU32; 2],
    peer_pid: *const AtomicU32,
    /// Our bell words' values when we last consumed a signal on them.
    seen: [AtomicU32; 2],
    doors: Arc<Doorbells>,
    /// Client side: look the driver's pid up in the kernel's context table too.
    probe: bool,
    /// When the peer's liveness was last checked (monotonic ns; 0: never).
    last_check: AtomicU64,
}

// Safety: the pointers refer to atomics in a shared mapping that outlives the bell; atomics may
// be used from any thread. `Doorbells` is Send + Sync.
unsafe impl Send for PipeBell {}
// Safety: as above.
unsafe impl Sync for PipeBell {}

/// A word of the bell's mapping, borrowed no longer than the bell.
fn word(_bell: &PipeBell, p: *const AtomicU32) -> &AtomicU32 {
    // Safety: `p` points into the mapping, which outlives the bell (see PipeBell).
    unsafe { &*p }
}

impl PipeBell {
    fn peer_alive(&self) -> bool {
        let pid = word(self, self.peer_pid).load(Ordering::Relaxed);
        // 0: the peer has not attached yet; out of range: not a pid we can ask about.
        let Ok(pid) = libc::pid_t::try_from(pid) else {
            return true;
        };
        if pid <= 0 {
            return true;
        }
        // Safety: signal 0 only checks that the process exists; nothing is delivered.
        let rc = unsafe { libc::kill(pid, 0) };
        let exists = rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        exists && (!self.probe || context_lists(pid as u32))
    }

    /// [`Self::peer_alive`] at most once per [`SLICE`] (across waits and threads): each check
    /// is a call to procmgr and, client side, a read of the context table, too dear for every
    /// wait of a request stream (a check per wait doubled the exact read's p50 over the ring).
    fn peer_alive_checked(&self) -> bool {
        let now = mono_ns();
        let last = self.last_check.load(Ordering::Relaxed);
        if now.saturating_sub(last) < SLICE.as_nanos() as u64 {
            return true;
        }
        self.last_check.store(now, Ordering::Relaxed);
        self.peer_alive()
    }

    /// Consumes a signal on our bell `w` if its word moved since we last looked.
    fn take_signal(&self, w: Wake) -> bool {
        let seen = &self.seen[w as usize];
        let now = word(self, self.mine[w as usize]).load(Ordering::SeqCst);
        seen.swap(now, Ordering::Relaxed) != now
    }
}

impl Bell for PipeBell {
    fn ring_peer(&self, w: Wake) -> Result<(), RingError> {
        word(self, self.peer[w as usize]).fetch_add(1, Ordering::SeqCst);
        self.doors.ring_peer(w);
        Ok(())
    }

    fn ring_own(&self, w: Wake) {
        word(self, self.mine[w as usize]).fetch_add(1, Ordering::SeqCst);
        self.doors.waiters[w as usize].kick();
    }

    fn ring_self(&self) {
        for w in [Wake::Data, Wake::Space] {
            self.ring_own(w);
        }
    }

    fn wait(&self, w: Wake, timeout: Option<Duration>) -> Result<Woken, RingError> {
        let deadline = deadline_ns(mono_ns(), timeout);
        loop {
            if self.take_signal(w) {
                return Ok(Woken::Signal);
            }
            if !self.peer_alive_checked() {
                return Err(RingError::PeerGone);
            }
            let Some(end) = slice_end_ns(mono_ns(), deadline, SLICE) else {
                return Ok(Woken::Timeout);
            };
            self.doors.waiters[w as usize].sleep_until(end)?;
        }
    }

    fn adopt_fds(&self, fds: &[usize]) -> Result<(), RingError> {
        let [d, s, pd, ps]: [usize; DOORBELL_FDS] = fds.try_into().map_err(|_| {
            RingError::Setup(format!(
                "{} doorbell descriptors, want {DOORBELL_FDS}",
                fds.len()
            ))
        })?;
        self.doors
            .adopt([Fd::new(d), Fd::new(s)], [Fd::new(pd), Fd::new(ps)])
    }
}

/// Whether `pid` has a live context in the kernel's table (`true` when the table cannot be
/// read: then `kill` alone decides, as before).
fn context_lists(pid: u32) -> bool {
    match std::fs::read_to_string("/scheme/sys/context") {
        Ok(text) => crate::sys_context::is_live(&crate::sys_context::parse(&text), pid),
        Err(_) => true,
    }
}

fn bell(map: &Mapping, side: usize, doors: Arc<Doorbells>, probe: bool) -> PipeBell {
    let ctl = map.control();
    let words =
        |s: usize| -> [*const AtomicU32; 2] { [&ctl.bell.0[2 * s], &ctl.bell.0[2 * s + 1]] };
    let seen = |k: usize| AtomicU32::new(ctl.bell.0[2 * side + k].load(Ordering::SeqCst));
    PipeBell {
        mine: words(side),
        peer: words(1 - side),
        peer_pid: &ctl.pid.0[1 - side],
        seen: [seen(0), seen(1)],
        doors,
        probe,
        last_check: AtomicU64::new(0),
    }
}

/// Makes `count` segments of the driver's own memory, each sized for a ring pair of geometry
/// `largest`, with the waiting half of each segment's doorbells, for a driver to lend to one
/// connection after another ([`RingPool`]): made before `setrens(0, 0)`, after which the event
/// and time schemes cannot be opened. Each is new memory for every connection
/// ([`Segment::new_private`]). A connection maps its segment through its own driver handle
/// (the driver's `mmap_prep` serves the segment lent to that handle and nothing else), after
/// a [`super::mapped_offer`]; its doorbells' pipes come from the client
/// ([`RingEndpoint::adopt_doorbells`]). `prefix` names the segments in logs.
pub fn create_ring_pool(
    prefix: &str,
    count: usize,
    largest: Geometry,
) -> Result<RingPool, RingError> {
    let doors = (0..count)
        .map(|_| Doorbells::new())
        .collect::<Result<Vec<_>, _>>()?;
    let mut pool = RingPool::new(Box::new(move |map: &Mapping, k: usize| {
        let d = doors[k].clone();
        // A new connection: the former one's pipes go (its endpoint is gone, see `renew`).
        d.reset();
        Box::new(bell(map, 0, d, false)) as Box<dyn Bell>
    }));
    for k in 0..count {
        pool.add(
            format!("{prefix}-{k}"),
            Segment::new_private(largest)?,
            None,
        );
    }
    Ok(pool)
}

/// Attaches as side B to the `len`-byte segment a driver lent to the handle `driver_fd` (its
/// [`super::mapped_offer`]), mapped through that handle and checked, and passes the driver its
/// doorbell pipes over the same handle.
pub fn attach_ring_mapped(
    len: usize,
    busy_poll: Duration,
    driver_fd: usize,
) -> Result<RingEndpoint, RingError> {
    layout::check_region_len(len)?;
    let fd = c_int::try_from(driver_fd)
        .map_err(|_| RingError::Setup(format!("driver handle {driver_fd} out of range")))?;
    // Safety: `driver_fd` is the caller's open driver handle, which outlives this call.
    let handle = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let map = Mapping::map(handle, len)?;
    let doors = Doorbells::new()?;
    let [(a_data_rd, a_data_wr), (a_space_rd, a_space_wr)] = [pipe()?, pipe()?];
    let [(b_data_rd, b_data_wr), (b_space_rd, b_space_wr)] = [pipe()?, pipe()?];
    doors.adopt([b_data_rd, b_space_rd], [a_data_wr, a_space_wr])?;
    // Checked with its generation: a driver's pool segment serves one connection after another.
    let ring = Segment::attach(map, busy_poll, |m| Box::new(bell(m, 1, doors, true)))?;
    send_doorbells(driver_fd, [a_data_rd, a_space_rd, b_data_wr, b_space_wr])?;
    Ok(ring)
}

/// Moves the driver's doorbell halves to it (`sendfd` as SYS_CALL with `CallFlags::FD`: the
/// descriptors leave our table). On failure they may be gone already: they are leaked rather
/// than closed, since their numbers may have been reused by then.
fn send_doorbells(driver_fd: usize, fds: [Fd; DOORBELL_FDS]) -> Result<(), RingError> {
    let raw = fds.map(Fd::into_raw);
    let mut bytes = [0u8; DOORBELL_FDS * size_of::<usize>()];
    for (chunk, fd) in bytes.chunks_exact_mut(size_of::<usize>()).zip(raw) {
        chunk.copy_from_slice(&fd.to_ne_bytes());
    }
    syscall::call_wo(driver_fd, &bytes, syscall::CallFlags::FD, &[DOORBELL_TAG])
        .map(|_| ())
        .map_err(|e| RingError::Setup(format!("passing the driver its doorbells: {e}")))
}
