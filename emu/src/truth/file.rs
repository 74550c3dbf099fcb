//! The truth record as a shared file mapping (unix): layout, seqlock, writer and reader.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::ptr::NonNull;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering, fence};
use std::time::{Duration, Instant};

use super::{DriverClock, ModelObserver, TruthError};
use crate::clock::{HostClock, TimeSource};
use crate::phc::{LawParts, PhcLaw, TimeFormat};

/// Size of the file and of its mapping.
pub const TRUTH_FILE_LEN: usize = 4096;
/// Word 0 of an initialised record: "PTPTRUTH" little-endian.
pub const TRUTH_MAGIC: u64 = u64::from_le_bytes(*b"PTPTRUTH");
/// Layout version; readers refuse any other.
pub const TRUTH_VERSION: u64 = 4;
/// How long a reader waits for a writer inside an update before [`TruthError::Busy`]: an
/// update is a few stores, so this only runs out when the writer was preempted for longer
/// than any scheduler delay a busy host shows, or died mid-update.
const MAX_WAIT: Duration = Duration::from_millis(50);
/// Attempts that spin before the reader starts yielding the CPU (to a preempted writer).
const SPINS: u32 = 100;
/// Whole-offset attempts in [`true_offset`] before `Busy`.
const MAX_OFFSET_TRIES: u32 = 1_000;

/// The shared record (see the module docs of [`crate::truth`] for the table).
#[repr(C)]
struct Record {
    magic: AtomicU64,
    version: AtomicU64,
    seq: AtomicU64,
    valid: AtomicU64,
    generation: AtomicU64,
    base_t: AtomicU64,
    base_lo: AtomicU64,
    base_hi: AtomicU64,
    rem_lo: AtomicU64,
    rem_hi: AtomicU64,
    timinca: AtomicU64,
    osc_ppb: AtomicU64,
    running: AtomicU64,
    bar_reads: AtomicU64,
    bar_writes: AtomicU64,
    wire_lost: AtomicU64,
    format: AtomicU64,
    drv_valid: AtomicU64,
    drv_count: AtomicU64,
    drv_fp_lo: AtomicU64,
    drv_fp_hi: AtomicU64,
    drv_mask: AtomicU64,
    drv_shift: AtomicU64,
    drv_mult: AtomicU64,
    drv_mult_shift: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Record>() <= TRUTH_FILE_LEN);
// Atomic loads on a read-only shared mapping are sound only for lock-free atomics no wider
// than a pointer: AtomicU64 on the 64-bit targets built for.
const _: () = assert!(std::mem::size_of::<AtomicU64>() <= std::mem::size_of::<usize>());

/// One consistent read of the record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TruthSnapshot {
    /// The PHC law in force.
    pub law: PhcLaw,
    /// The driver's timecounter over the PHC, when its driver serves one (i350, 82576).
    pub driver: Option<DriverClock>,
    /// Law changes this writer has published.
    pub generation: u64,
    /// BAR reads the driver made against the model (free-running, not part of the seqlock).
    pub bar_reads: u64,
    /// BAR writes the driver made.
    pub bar_writes: u64,
    /// Frames the cable towards this port lost.
    pub wire_lost: u64,
}

impl TruthSnapshot {
    /// The served clock at host instant `t`, ns (see "The clock a PTP service sees").
    pub fn ns_at(&self, t: u64) -> u64 {
        served_ns(&self.law, self.driver.as_ref(), t)
    }
}

/// The time the PTP service reads at `t`: through the driver's timecounter when there is one.
fn served_ns(law: &PhcLaw, driver: Option<&DriverClock>, t: u64) -> u64 {
    match driver {
        Some(d) => d.ns_of(law.raw_at(t)),
        None => law.ns_at(t),
    }
}

/// One consistent read of the clock part of the record.
struct Clock {
    law: PhcLaw,
    driver: Option<DriverClock>,
    generation: u64,
}

impl Record {
    fn check_header(&self) -> Result<(), TruthError> {
        if self.magic.load(Ordering::Acquire) != TRUTH_MAGIC {
            return Err(TruthError::BadMagic);
        }
        match self.version.load(Ordering::Relaxed) {
            TRUTH_VERSION => Ok(()),
            got => Err(TruthError::BadVersion {
                got,
                want: TRUTH_VERSION,
            }),
        }
    }

    /// Turns `seq` odd and returns the odd value (a value left odd by a dead writer is reused,
    /// so the counter still moves past everything a reader saw).
    fn begin(&self) -> u64 {
        let odd = self.seq.load(Ordering::Relaxed) | 1;
        self.seq.store(odd, Ordering::Relaxed);
        // The odd store is ordered before everything the update does, including the model's
        // read of the host clock for the change (see "Why the truth is exact").
        fence(Ordering::SeqCst);
        odd
    }

    fn end(&self, odd: u64) {
        self.seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    fn store_law(&self, valid: bool, law: Option<&PhcLaw>) {
        let p = law.map(PhcLaw::parts).unwrap_or_default();
        self.valid.store(u64::from(valid), Ordering::Relaxed);
        if valid {
            self.generation.fetch_add(1, Ordering::Relaxed);
        }
        self.base_t.store(p.base_t, Ordering::Relaxed);
        self.base_lo.store(p.base as u64, Ordering::Relaxed);
        self.base_hi.store((p.base >> 64) as u64, Ordering::Relaxed);
        self.rem_lo.store(p.rem as u64, Ordering::Relaxed);
        self.rem_hi.store((p.rem >> 64) as u64, Ordering::Relaxed);
        self.timinca.store(u64::from(p.timinca), Ordering::Relaxed);
        self.osc_ppb.store(p.osc_ppb as u64, Ordering::Relaxed);
        self.running.store(u64::from(p.running), Ordering::Relaxed);
        self.format.store(p.format.code(), Ordering::Relaxed);
    }

    fn store_driver(&self, d: Option<&DriverClock>) {
        let d = d.copied().unwrap_or_default();
        self.drv_count.store(d.count, Ordering::Relaxed);
        self.drv_fp_lo.store(d.fp as u64, Ordering::Relaxed);
        self.drv_fp_hi.store((d.fp >> 64) as u64, Ordering::Relaxed);
        self.drv_mask.store(d.mask, Ordering::Relaxed);
        self.drv_shift.store(u64::from(d.shift), Ordering::Relaxed);
        self.drv_mult.store(d.mult, Ordering::Relaxed);
        self.drv_mult_shift
            .store(u64::from(d.mult_shift), Ordering::Relaxed);
    }

    /// The driver clock words as loaded (possibly torn): `Err` for one no writer stores.
    fn load_driver(&self) -> Result<Option<DriverClock>, TruthError> {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        if l(&self.drv_valid) != 1 {
            return Ok(None);
        }
        let shift = l(&self.drv_shift);
        let mult_shift = l(&self.drv_mult_shift);
        let d = DriverClock {
            count: l(&self.drv_count),
            fp: u128::from(l(&self.drv_fp_lo)) | u128::from(l(&self.drv_fp_hi)) << 64,
            mask: l(&self.drv_mask),
            shift: shift.min(64) as u32,
            mult: l(&self.drv_mult),
            mult_shift: mult_shift.min(64) as u32,
        };
        // A mask that is not 2^k − 1, a shift past the fraction bits, or a rate of zero or
        // with a fraction past 63 bits would give a meaningless clock.
        let ok = d.mask != 0
            && d.mask.wrapping_add(1) & d.mask == 0
            && shift < 64
            && d.mult != 0
            && mult_shift < 64;
        if ok {
            Ok(Some(d))
        } else {
            Err(TruthError::Corrupt)
        }
    }

    /// The record's fields as loaded (possibly torn; the caller validates with `seq`).
    fn load_law(&self) -> (u64, u64, LawParts) {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let wide = |lo: &AtomicU64, hi: &AtomicU64| u128::from(l(lo)) | u128::from(l(hi)) << 64;
        let parts = LawParts {
            base_t: l(&self.base_t),
            base: wide(&self.base_lo, &self.base_hi),
            rem: wide(&self.rem_lo, &self.rem_hi),
            timinca: l(&self.timinca) as u32,
            osc_ppb: l(&self.osc_ppb) as i64,
            running: l(&self.running) != 0,
            // Only a torn read (rejected by `seq`) sees a code this layout's writer never stores.
            format: TimeFormat::from_code(l(&self.format)).unwrap_or_default(),
        };
        (l(&self.valid), l(&self.generation), parts)
    }

    /// A consistent law with the driver clock, and the even `seq` it was read under (bounded
    /// retries).
    fn read_law(&self) -> Result<(Clock, u64), TruthError> {
        self.check_header()?;
        let mut deadline = None;
        for k in 0u32.. {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let (valid, generation, parts) = self.load_law();
                let driver = self.load_driver();
                // Pairs with the writer's fence: if a load above saw a later update's store,
                // the re-load below sees that update's odd (or a later) value.
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    if valid != 1 {
                        return Err(TruthError::Empty);
                    }
                    let law = PhcLaw::from_parts(parts).ok_or(TruthError::Corrupt)?;
                    let driver = driver?;
                    let clock = Clock {
                        law,
                        driver,
                        generation,
                    };
                    return Ok((clock, s1));
                }
            }
            if k < SPINS {
                std::hint::spin_loop();
                continue;
            }
            let end = *deadline.get_or_insert_with(|| Instant::now() + MAX_WAIT);
            if Instant::now() >= end {
                break;
            }
            std::thread::yield_now();
        }
        Err(TruthError::Busy)
    }

    /// Whether `seq` still reads `s`, with every earlier load (and host-clock read) ordered
    /// before the check.
    fn unchanged(&self, s: u64) -> bool {
        fence(Ordering::SeqCst);
        self.seq.load(Ordering::Relaxed) == s
    }
}

/// A shared mapping of a truth file.
struct Mapping {
    ptr: NonNull<Record>,
}

// Safety: the mapping is only accessed through `&Record`, all atomics, so sharing or sending it
// between threads is as safe as sharing `&[AtomicU64]`; the pointer stays valid until Drop.
unsafe impl Send for Mapping {}
// Safety: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    fn new(file: &File, prot: libc::c_int, path: &Path) -> Result<Self, TruthError> {
        // Safety: a fresh shared mapping of an open file of at least TRUTH_FILE_LEN bytes (the
        // callers check or set the length); the kernel picks the address, so no existing
        // memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                TRUTH_FILE_LEN,
                prot,
                libc::MAP_SHARED,
                file.as_raw_fd(),
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io_err("mmap", path, &std::io::Error::last_os_error()));
        }
        let ptr = NonNull::new(p.cast::<Record>())
            .ok_or_else(|| TruthError::Io("mmap returned null".into()))?;
        Ok(Self { ptr })
    }

    fn record(&self) -> &Record {
        // Safety: `ptr` is a live, page-aligned mapping of TRUTH_FILE_LEN ≥ size_of::<Record>()
        // bytes that stays mapped while `self` lives; `Record` is all atomics, valid for any
        // bits and for concurrent access from other processes. A read-only mapping is only
        // loaded from (readers never store).
        unsafe { self.ptr.as_ref() }
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: `ptr` is the start of a TRUTH_FILE_LEN mapping made in `new`, unmapped only
        // here; no reference derived from it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), TRUTH_FILE_LEN) };
    }
}

fn io_err(what: &str, path: &Path, e: &std::io::Error) -> TruthError {
    if e.kind() == std::io::ErrorKind::NotFound {
        return TruthError::Missing(path.display().to_string());
    }
    TruthError::Io(format!("{what} {}: {e}", path.display()))
}

/// The model's side: publishes the PHC law and counts BAR accesses and cable losses.
///
/// One writer per file (the model serialises its updates; an internal lock makes concurrent
/// `phc_law_update` calls safe anyway).
pub struct TruthWriter {
    map: Mapping,
    update: Mutex<()>,
}

/// `create`'s open failed: a symlink at `path` is [`TruthError::Foreign`]. O_NOFOLLOW makes
/// that ELOOP, but EACCES when another user's symlink sits in a sticky directory (as /tmp):
/// Linux refuses O_CREAT there before it looks at the link, so the path is checked again.
fn foreign_or_io(path: &Path, e: &std::io::Error) -> TruthError {
    let symlink = || std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if e.raw_os_error() == Some(libc::ELOOP)
        || (e.raw_os_error() == Some(libc::EACCES) && symlink())
    {
        return TruthError::Foreign {
            path: path.display().to_string(),
            why: "a symbolic link".into(),
        };
    }
    io_err("create", path, e)
}

/// An existing record may be taken over only if this uid made it: a regular file it owns with
/// one link (else chmod and truncate would act on someone else's file, and a planted file would
/// forge the truth).
fn check_own(file: &File, path: &Path) -> Result<(), TruthError> {
    use std::os::unix::fs::MetadataExt;
    let m = file.metadata().map_err(|e| io_err("stat", path, &e))?;
    // Safety: geteuid has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    let why = if !m.file_type().is_file() {
        "not a regular file".to_string()
    } else if m.uid() != euid {
        format!("owned by uid {}, not this process's {euid}", m.uid())
    } else if m.nlink() != 1 {
        format!("{} hard links", m.nlink())
    } else {
        return Ok(());
    };
    Err(TruthError::Foreign {
        path: path.display().to_string(),
        why,
    })
}

impl TruthWriter {
    /// Creates the record at `path` (mode 0644), or takes over an existing one in place so a
    /// reader that mapped it before a daemon restart keeps reading the new model. The record
    /// is empty, with zeroed counters, until the first law is published.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, TruthError> {
        let path = path.as_ref();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            // Kept: a previous writer's record is taken over in place (see above).
            .truncate(false)
            .mode(0o644)
            // A planted symlink is refused (ELOOP), never followed.
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| foreign_or_io(path, &e))?;
        check_own(&file, path)?;
        file.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| io_err("chmod", path, &e))?;
        file.set_len(TRUTH_FILE_LEN as u64)
            .map_err(|e| io_err("size", path, &e))?;
        let map = Mapping::new(&file, libc::PROT_READ | libc::PROT_WRITE, path)?;
        let r = map.record();
        if r.check_header().is_ok() {
            let odd = r.begin();
            r.store_law(false, None);
            r.drv_valid.store(0, Ordering::Relaxed);
            r.generation.store(0, Ordering::Relaxed);
            r.end(odd);
        } else {
            r.magic.store(0, Ordering::Relaxed);
            r.version.store(TRUTH_VERSION, Ordering::Relaxed);
            r.seq.store(0, Ordering::Relaxed);
            r.generation.store(0, Ordering::Relaxed);
            r.store_law(false, None);
            r.drv_valid.store(0, Ordering::Relaxed);
            r.store_driver(None);
            r.magic.store(TRUTH_MAGIC, Ordering::Release);
        }
        for c in [&r.bar_reads, &r.bar_writes, &r.wire_lost] {
            c.store(0, Ordering::Relaxed);
        }
        Ok(Self {
            map,
            update: Mutex::new(()),
        })
    }

    /// Publishes `law` (for a law that is already in force; a model uses
    /// [`ModelObserver::phc_law_update`]).
    pub fn publish(&self, law: &PhcLaw) {
        self.phc_law_update(&mut || law.clone());
    }

    /// Starts an update and never ends it, as a writer that died mid-update would: readers
    /// then get [`TruthError::Busy`]. For tests of that path.
    #[doc(hidden)]
    pub fn abandon_update(&self) {
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        self.map.record().begin();
    }
}

impl ModelObserver for TruthWriter {
    fn phc_law_update(&self, change: &mut dyn FnMut() -> PhcLaw) {
        // The guarded data is `()`: a poisoned lock leaves nothing inconsistent.
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        let r = self.map.record();
        let odd = r.begin();
        let law = change();
        r.store_law(true, Some(&law));
        r.end(odd);
    }

    fn bar_read(&self) {
        self.map.record().bar_reads.fetch_add(1, Ordering::Relaxed);
    }

    fn driver_clock_update(&self, change: &mut dyn FnMut() -> Option<DriverClock>) {
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        let r = self.map.record();
        let odd = r.begin();
        let d = change();
        r.drv_valid.store(u64::from(d.is_some()), Ordering::Relaxed);
        r.store_driver(d.as_ref());
        r.end(odd);
    }

    fn bar_write(&self) {
        self.map.record().bar_writes.fetch_add(1, Ordering::Relaxed);
    }

    fn wire_lost(&self, total: u64) {
        self.map.record().wire_lost.store(total, Ordering::Relaxed);
    }
}

impl Drop for TruthWriter {
    /// A cleanly stopping writer empties the record: nobody maintains that PHC any more. (After
    /// a crash the last law stays; the lab knows which daemons it stopped.)
    fn drop(&mut self) {
        let _g = self.update.lock().unwrap_or_else(|p| p.into_inner());
        let r = self.map.record();
        let odd = r.begin();
        r.store_law(false, None);
        r.drv_valid.store(0, Ordering::Relaxed);
        r.end(odd);
    }
}

/// A read-only view of a truth record.
pub struct TruthReader {
    map: Mapping,
}

impl TruthReader {
    /// Maps the record at `path` read-only and checks its size, magic and version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, TruthError> {
        let path = path.as_ref();
        let file = File::open(path).map_err(|e| io_err("open", path, &e))?;
        let len = file.metadata().map_err(|e| io_err("stat", path, &e))?.len();
        // A mapping beyond the end of the file would fault on access: refuse short files.
        if len != TRUTH_FILE_LEN as u64 {
            return Err(TruthError::BadSize {
                got: len,
                want: TRUTH_FILE_LEN as u64,
            });
        }
        let map = Mapping::new(&file, libc::PROT_READ, path)?;
        map.record().check_header()?;
        Ok(Self { map })
    }

    /// The law in force and the counters, consistently (bounded retries; `Busy` if a writer
    /// stays inside an update).
    pub fn snapshot(&self) -> Result<TruthSnapshot, TruthError> {
        let r = self.map.record();
        let (c, _) = r.read_law()?;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Ok(TruthSnapshot {
            law: c.law,
            driver: c.driver,
            generation: c.generation,
            bar_reads: l(&r.bar_reads),
            bar_writes: l(&r.bar_writes),
            wire_lost: l(&r.wire_lost),
        })
    }

    /// The served PHC time now, exactly, and the host instant it is for.
    pub fn now(&self) -> Result<(u64, u64), TruthError> {
        let r = self.map.record();
        for _ in 0..MAX_OFFSET_TRIES {
            let (c, s) = r.read_law()?;
            let t = HostClock::new().now_ns();
            if r.unchanged(s) {
                return Ok((served_ns(&c.law, c.driver.as_ref(), t), t));
            }
        }
        Err(TruthError::Busy)
    }
}

/// A true offset between two emulated PHCs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TrueOffset {
    /// PHC_a(t) − PHC_b(t), ns, of the served clocks (SYSTIM truncated to whole ns on both
    /// sides, as the registers read; across the 2^32 s wrap, the short way round).
    pub offset_ns: i64,
    /// The host CLOCK_MONOTONIC instant `t`, ns.
    pub at_t: u64,
}

/// `a − b` at `t` of the served clocks: on their common SYSTIM circle when both serve SYSTIM
/// and it wraps alike, plainly otherwise (a driver's 64-bit timecounter does not wrap).
fn offset_between(a: &Clock, b: &Clock, t: u64) -> i64 {
    let (fa, fb) = (a.law.format(), b.law.format());
    let na = served_ns(&a.law, a.driver.as_ref(), t);
    let nb = served_ns(&b.law, b.driver.as_ref(), t);
    let plain = a.driver.is_some() || b.driver.is_some() || fa.wrap_ns() != fb.wrap_ns();
    if plain {
        (i128::from(na) - i128::from(nb)).clamp(i64::MIN.into(), i64::MAX.into()) as i64
    } else {
        fa.diff_ns(na, nb)
    }
}

/// `PHC_a(t) − PHC_b(t)` at one host instant `t`, taken after both laws were read and checked
/// still in force after it (see "Why the truth is exact").
pub fn true_offset(a: &TruthReader, b: &TruthReader) -> Result<TrueOffset, TruthError> {
    let (ra, rb) = (a.map.record(), b.map.record());
    for _ in 0..MAX_OFFSET_TRIES {
        let (la, sa) = ra.read_law()?;
        let (lb, sb) = rb.read_law()?;
        let t = HostClock::new().now_ns();
        if ra.unchanged(sa) && rb.unchanged(sb) {
            return Ok(TrueOffset {
                offset_ns: offset_between(&la, &lb, t),
                at_t: t,
            });
        }
    }
    Err(TruthError::Busy)
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
