//! Redox backing of a ring pair: the region is a `shm` scheme segment (`/scheme/shm/<name>`,
//! served by ipcd; every mapping of one name shares its pages), each side's two bells futexes on
//! its words in the region (`bell[2 * side + kind]`, counted up by the peer on every signal).
//!
//! Facts and assumptions: the futex syscall keys a wait on the physical page, so a wait on a
//! word of a shared mapping is woken by another process's FUTEX_WAKE on its own mapping of the
//! same page; FUTEX_WAIT's `val2` is a relative `TimeSpec` timeout **[I]**, not run on Redox yet
//! (type-checked only, like the rest of this module). The `shm` scheme has no permissions and
//! no seals: any process that knows the name can map the segment and scribble on it, which the
//! ring's bound checks turn into typed errors; it cannot shrink it under us (ipcd keeps the size
//! given at creation) **[I]**.
//!
//! There is no hang-up to poll for, so a waiting side wakes at least every [`SLICE`] to check
//! that the peer process still exists (`kill(pid, 0)` on the pid it published in the region).
//!
//! A driver cannot open `/scheme/shm` in its `setrens(0, 0)` sandbox, so it makes its segments
//! beforehand ([`create_ring_pool`]) and lends them to one connection after another
//! ([`RingPool`], `segment.rs`); a client attaches either kind with [`attach_ring_named`].

use std::fs::{File, OpenOptions};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::layout::{self, Geometry};
use super::map::Mapping;
use super::{Bell, RingConfig, RingEndpoint, RingError, RingPool, Segment, Wake, Woken};

/// Longest single futex wait before the peer's liveness is checked again.
const SLICE: Duration = Duration::from_millis(100);

fn path(name: &str) -> Result<String, RingError> {
    let ok = !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b));
    if !ok {
        return Err(RingError::Setup(format!("bad shm segment name {name:?}")));
    }
    Ok(format!("/scheme/shm/{name}"))
}

fn io_err(what: &str, p: &str, e: &std::io::Error) -> RingError {
    RingError::Io(format!("{what} {p}: {e}"))
}

/// The Redox bell: futex words inside the mapping (`Mapping` outlives the bell: both live in
/// the same `RingEndpoint`, the mapping dropped last). Index `Wake as usize`.
struct FutexBell {
    mine: [*const AtomicU32; 2],
    peer: [*const AtomicU32; 2],
    peer_pid: *const AtomicU32,
    /// Our bell words' values when we last consumed a signal on them.
    seen: [AtomicU32; 2],
    /// The segment's file, for an endpoint that owns its segment alone (a pool keeps its own).
    _file: Option<File>,
}

// Safety: the pointers refer to atomics in a shared mapping that outlives the bell; atomics may
// be used from any thread.
unsafe impl Send for FutexBell {}
// Safety: as above.
unsafe impl Sync for FutexBell {}

/// A word of the bell's mapping, borrowed no longer than the bell.
fn word(_bell: &FutexBell, p: *const AtomicU32) -> &AtomicU32 {
    // Safety: `p` points into the mapping, which outlives the bell (see FutexBell).
    unsafe { &*p }
}

fn wake(w: &AtomicU32) {
    w.fetch_add(1, Ordering::SeqCst);
    // Safety: `w` is a live, aligned 32-bit word; FUTEX_WAKE reads nothing else.
    let _ = unsafe {
        syscall::call::futex(
            w.as_ptr().cast(),
            syscall::flag::FUTEX_WAKE,
            i32::MAX,
            0,
            std::ptr::null_mut(),
        )
    };
}

impl FutexBell {
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
        rc == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
    }
}

impl Bell for FutexBell {
    fn ring_peer(&self, w: Wake) -> Result<(), RingError> {
        wake(word(self, self.peer[w as usize]));
        Ok(())
    }

    fn ring_own(&self, w: Wake) {
        wake(word(self, self.mine[w as usize]));
    }

    fn ring_self(&self) {
        for p in self.mine {
            wake(word(self, p));
        }
    }

    fn wait(&self, w: Wake, timeout: Option<Duration>) -> Result<Woken, RingError> {
        let deadline = timeout.and_then(|t| Instant::now().checked_add(t));
        let mine = word(self, self.mine[w as usize]);
        let seen = &self.seen[w as usize];
        loop {
            let last = seen.load(Ordering::Relaxed);
            let now = mine.load(Ordering::SeqCst);
            if now != last {
                seen.store(now, Ordering::Relaxed);
                return Ok(Woken::Signal);
            }
            if !self.peer_alive() {
                return Err(RingError::PeerGone);
            }
            let left = match deadline {
                None => SLICE,
                Some(d) => d.saturating_duration_since(Instant::now()),
            };
            if left.is_zero() {
                return Ok(Woken::Timeout);
            }
            let t = left.min(SLICE);
            let ts = syscall::TimeSpec {
                tv_sec: t.as_secs() as i64,
                tv_nsec: t.subsec_nanos() as i32,
            };
            // Safety: `mine` is a live, aligned 32-bit word; `ts` outlives the call. The wait
            // returns at once if the word is no longer `last` (a signal raced us).
            let _ = unsafe {
                syscall::call::futex(
                    mine.as_ptr().cast(),
                    syscall::flag::FUTEX_WAIT,
                    last as i32,
                    (&raw const ts) as usize,
                    std::ptr::null_mut(),
                )
            };
        }
    }
}

fn bell(map: &Mapping, side: usize, file: Option<File>) -> FutexBell {
    let ctl = map.control();
    let words =
        |s: usize| -> [*const AtomicU32; 2] { [&ctl.bell.0[2 * s], &ctl.bell.0[2 * s + 1]] };
    let seen = |k: usize| AtomicU32::new(ctl.bell.0[2 * side + k].load(Ordering::SeqCst));
    FutexBell {
        mine: words(side),
        peer: words(1 - side),
        peer_pid: &ctl.pid.0[1 - side],
        seen: [seen(0), seen(1)],
        _file: file,
    }
}

/// Creates the segment `/scheme/shm/<name>` for `cfg` and returns side A; the peer attaches
/// with [`attach_ring_named`] after learning the name over the control channel.
pub fn create_ring_named(name: &str, cfg: RingConfig) -> Result<RingEndpoint, RingError> {
    let g = Geometry::new(cfg.geometry.slot_size, cfg.geometry.slot_count)?;
    let (file, map) = new_segment(name, g.region_len())?;
    layout::init(map.control(), g);
    let bell = bell(&map, 0, Some(file));
    Ok(RingEndpoint::new(map, g, 0, cfg.spin, Box::new(bell)))
}

/// Creates the segment `/scheme/shm/<name>` (refused if it exists), `len` bytes, mapped.
fn new_segment(name: &str, len: usize) -> Result<(File, Mapping), RingError> {
    let p = path(name)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&p)
        .map_err(|e| io_err("create ring segment", &p, &e))?;
    file.set_len(len as u64)
        .map_err(|e| io_err("size ring segment", &p, &e))?;
    let map = Mapping::map(file.as_fd(), len)?;
    Ok((file, map))
}

/// Side A's bell on a pool segment (the pool keeps the file).
fn pool_bell(map: &Mapping) -> Box<dyn Bell> {
    Box::new(bell(map, 0, None))
}

/// Creates `count` segments `/scheme/shm/<prefix>-<k>`, each sized for a ring pair of
/// geometry `largest`, for a driver to lend to one connection after another ([`RingPool`]):
/// made before `setrens(0, 0)`, after which `/scheme/shm` can no longer be opened. A
/// connection gets its segment's name in a [`super::named_offer`].
pub fn create_ring_pool(
    prefix: &str,
    count: usize,
    largest: Geometry,
) -> Result<RingPool, RingError> {
    let mut pool = RingPool::new(pool_bell);
    let len = largest.region_len();
    for k in 0..count {
        let name = format!("{prefix}-{k}");
        let (file, map) = new_segment(&name, len)?;
        pool.add(name, Segment::new(map, largest)?, Some(file));
    }
    Ok(pool)
}

/// Attaches to a segment made by [`create_ring_named`] or lent from a [`RingPool`] as side B,
/// checking its header.
pub fn attach_ring_named(name: &str, spin: u32) -> Result<RingEndpoint, RingError> {
    let p = path(name)?;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&p)
        .map_err(|e| io_err("open ring segment", &p, &e))?;
    let len = file
        .metadata()
        .map_err(|e| io_err("stat ring segment", &p, &e))?
        .len();
    let len = usize::try_from(len).unwrap_or(usize::MAX);
    layout::check_region_len(len)?;
    let map = Mapping::map(file.as_fd(), len)?;
    // Checked with its generation: a driver's pool segment serves one connection after another.
    Segment::attach(map, spin, |m| Box::new(bell(m, 1, Some(file))))
}
