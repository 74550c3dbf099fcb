//! The clock page (DESIGN.md §2): a read-only shared page through which a driver publishes its
//! latest PHC sample, so clients read the PHC time with no IPC and no MMIO.
//!
//! One writer process ([`ClockPageWriter`], the driver) republishes after every PHC sample or
//! adjustment; any number of reader processes ([`ClockPageReader`]) map the page read-only.
//! Consistency comes from a seqlock: the writer makes the sequence counter odd, stores the
//! fields, then makes it even again; a reader retries while the counter is odd or changed under
//! it. Every field is an `AtomicU64` (the `f64` rate as its bits), so no access is a data race
//! even though the readers are other processes; a reader never blocks the writer.
//!
//! Backing: a 4 KiB file mapped `MAP_SHARED` on Linux hosts; on Redox the driver's own memory
//! ([`ClockPageWriter::private`]) lent read-only by its scheme (see `redox.rs`); other
//! OSes get [`ClockPageError::Unsupported`].

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering, fence};

// `mapped` is the page as a shared file mapping; `platform` is how the writer's file is made
// (and, on Linux, locked), or on other OSes a stub that refuses.
#[cfg(any(target_os = "linux", target_os = "redox"))]
mod mapped;
#[cfg(target_os = "linux")]
#[path = "linux.rs"]
mod platform;
#[cfg(target_os = "redox")]
#[path = "redox.rs"]
mod platform;
#[cfg(not(any(target_os = "linux", target_os = "redox")))]
#[path = "unsupported.rs"]
mod platform;

#[cfg(any(target_os = "linux", target_os = "redox"))]
use mapped::Mapping;
#[cfg(not(any(target_os = "linux", target_os = "redox")))]
use platform::Mapping;

/// Size of the mapping.
pub const PAGE_SIZE: usize = 4096;
/// First word of an initialised page: "PTPCLKPG" in little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PTPCLKPG");
/// Layout version of [`Page`]; bump on any change, readers refuse other versions.
pub const LAYOUT_VERSION: u64 = 1;
/// Read attempts before [`ClockPageError::Busy`]: well beyond one update (a few stores), so
/// `Busy` means the writer was preempted or died inside an update, never contention.
pub const MAX_READ_SPINS: u32 = 10_000;

/// What a driver publishes: one PHC reading and the host monotonic time it was taken at, plus
/// the PHC's rate, so a reader can extrapolate the PHC time to "now" (see
/// [`ClockSample::phc_at`]).
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct ClockSample {
    /// PHC time, ns.
    pub phc_ns: u64,
    /// CLOCK_MONOTONIC at the same instant, ns.
    pub mono_ns: u64,
    /// PHC rate relative to host monotonic, minus 1, in ppb (+100 = the PHC gains 100 ns/s).
    pub rate_ppb: f64,
    /// The driver generation (changes when the driver or its device restarts).
    pub generation: u64,
}

impl ClockSample {
    /// The PHC time at host monotonic time `mono_ns`, extrapolated from this sample with its
    /// rate; also for `mono_ns` before the sample. Saturates at 0 and `u64::MAX`; a non-finite
    /// rate is treated as 0.
    pub fn phc_at(&self, mono_ns: u64) -> u64 {
        let dt = i128::from(mono_ns) - i128::from(self.mono_ns);
        // f64 holds |dt| exactly up to 2^53 ns (104 days); the correction's error is far below
        // 1 ns for any sane rate and interval. `as` maps NaN to 0 and saturates infinities.
        let corr = (dt as f64 * self.rate_ppb * 1e-9).round() as i128;
        let t = i128::from(self.phc_ns)
            .saturating_add(dt)
            .saturating_add(corr);
        t.clamp(0, i128::from(u64::MAX)) as u64
    }
}

/// Why a clock page cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClockPageError {
    /// An OS error, with the operation, the path and the errno text.
    #[error("{0}")]
    Io(String),
    /// The file is not an initialised clock page (too small, or no magic yet).
    #[error("not a clock page (bad magic)")]
    BadMagic,
    /// A clock page of another layout version.
    #[error("clock page layout version {got}, expected {want}")]
    BadVersion { got: u64, want: u64 },
    /// The writer stayed inside an update for all of [`MAX_READ_SPINS`] attempts (preempted, or
    /// died mid-update). Retry later, or take the IPC path.
    #[error("clock page busy: writer inside an update")]
    Busy,
    /// No sample published yet (or the writer has since shut down cleanly).
    #[error("clock page holds no sample")]
    Empty,
    /// Another live writer holds the page.
    #[error("clock page in use by another writer: {0}")]
    InUse(String),
    /// No clock page backing on this OS yet.
    #[error("clock pages are not supported on this OS yet")]
    Unsupported,
}

/// The page layout, shared between processes. Only the first `size_of::<Page>()` bytes of the
/// page are used; the rest is zero.
#[repr(C)]
struct Page {
    magic: AtomicU64,
    version: AtomicU64,
    /// Seqlock counter: odd while an update is in progress.
    seq: AtomicU64,
    // The record, protected by `seq`:
    /// 1 once a sample is published, 0 when none is (fresh page, writer shut down).
    valid: AtomicU64,
    phc_ns: AtomicU64,
    mono_ns: AtomicU64,
    rate_bits: AtomicU64,
    generation: AtomicU64,
}

const _: () = assert!(std::mem::size_of::<Page>() <= PAGE_SIZE);
// Readers do atomic loads on read-only memory, which is only sound for lock-free atomics no
// larger than a pointer: true for AtomicU64 on the 64-bit targets we build for.
const _: () = assert!(std::mem::size_of::<AtomicU64>() <= std::mem::size_of::<usize>());

impl Page {
    /// One seqlock update: `seq` odd, Release fence, the stores, `seq` even with Release.
    fn write(&self, f: impl FnOnce(&Page)) {
        let s = self.seq.load(Ordering::Relaxed);
        // An odd value left by a writer that died mid-update is reused as-is, so the counter
        // still moves past every value a reader may have seen.
        let odd = s | 1;
        self.seq.store(odd, Ordering::Relaxed);
        // Orders the odd store before the field stores for any reader that sees one of them.
        fence(Ordering::Release);
        f(self);
        self.seq.store(odd.wrapping_add(1), Ordering::Release);
    }

    fn store_sample(&self, valid: bool, s: &ClockSample) {
        self.valid.store(u64::from(valid), Ordering::Relaxed);
        self.phc_ns.store(s.phc_ns, Ordering::Relaxed);
        self.mono_ns.store(s.mono_ns, Ordering::Relaxed);
        self.rate_bits
            .store(s.rate_ppb.to_bits(), Ordering::Relaxed);
        self.generation.store(s.generation, Ordering::Relaxed);
    }

    fn check_header(&self) -> Result<(), ClockPageError> {
        if self.magic.load(Ordering::Acquire) != MAGIC {
            return Err(ClockPageError::BadMagic);
        }
        match self.version.load(Ordering::Relaxed) {
            LAYOUT_VERSION => Ok(()),
            got => Err(ClockPageError::BadVersion {
                got,
                want: LAYOUT_VERSION,
            }),
        }
    }

    /// Prepares the page for a new writer. A page of our layout (from a previous writer that
    /// readers may still have mapped) is taken over in place: its sample is invalidated through
    /// a normal update, so readers see `Empty` until the first publish, never the old epoch's
    /// sample, and the counter never goes back. Anything else is initialised with the magic
    /// stored last (Release), so a reader that sees the magic sees an initialised page.
    fn init(&self) {
        if self.check_header().is_ok() {
            self.write(|p| p.store_sample(false, &ClockSample::default()));
        } else {
            self.magic.store(0, Ordering::Relaxed);
            self.version.store(LAYOUT_VERSION, Ordering::Relaxed);
            self.seq.store(0, Ordering::Relaxed);
            self.store_sample(false, &ClockSample::default());
            self.magic.store(MAGIC, Ordering::Release);
        }
    }

    fn read(&self) -> Result<ClockSample, ClockPageError> {
        self.check_header()?;
        for _ in 0..MAX_READ_SPINS {
            let s1 = self.seq.load(Ordering::Acquire);
            if s1 & 1 == 0 {
                let valid = self.valid.load(Ordering::Relaxed);
                let sample = ClockSample {
                    phc_ns: self.phc_ns.load(Ordering::Relaxed),
                    mono_ns: self.mono_ns.load(Ordering::Relaxed),
                    rate_ppb: f64::from_bits(self.rate_bits.load(Ordering::Relaxed)),
                    generation: self.generation.load(Ordering::Relaxed),
                };
                // Pairs with the writer's Release fence: if any load above saw a store of a
                // later update, the reload below sees that update's odd (or a later) value.
                fence(Ordering::Acquire);
                if self.seq.load(Ordering::Relaxed) == s1 {
                    return if valid == 1 {
                        Ok(sample)
                    } else {
                        Err(ClockPageError::Empty)
                    };
                }
            }
            std::hint::spin_loop();
        }
        Err(ClockPageError::Busy)
    }
}

/// The single writer of a clock page (the driver).
///
/// Holds an exclusive lock on the page while alive (a second writer gets `InUse`), and
/// serialises its own `publish` calls, so the seqlock always has exactly one writer.
pub struct ClockPageWriter {
    map: Mapping,
    publish_lock: Mutex<()>,
}

impl ClockPageWriter {
    /// Creates the page at `path` (or takes over an existing one in place, so readers that
    /// mapped it before a driver restart keep working) and leaves it `Empty` until the first
    /// [`publish`](Self::publish). On Linux the file gets mode 0644: any user may read it.
    pub fn create(path: impl AsRef<Path>) -> Result<Self, ClockPageError> {
        let map = Mapping::create(path.as_ref())?;
        map.page().init();
        Ok(ClockPageWriter {
            map,
            publish_lock: Mutex::new(()),
        })
    }

    /// A page in this process's own memory rather than a file, `Empty` until the first
    /// [`publish`](Self::publish): for a driver that serves it to readers itself (Redox: its
    /// scheme maps [`Self::region`] into a reader read-only, so only the driver can write it).
    #[cfg(any(target_os = "linux", target_os = "redox"))]
    pub fn private() -> Result<Self, ClockPageError> {
        let map = Mapping::private()?;
        map.page().init();
        Ok(ClockPageWriter {
            map,
            publish_lock: Mutex::new(()),
        })
    }

    /// The page's address in this process ([`PAGE_SIZE`] bytes, page-aligned).
    pub fn region(&self) -> usize {
        std::ptr::from_ref(self.map.page()) as usize
    }

    /// Publishes a sample. Wait-free for readers; never fails.
    pub fn publish(&self, sample: &ClockSample) {
        // The guarded data is `()`: a poisoned lock leaves nothing inconsistent.
        let _g = self.publish_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.map.page().write(|p| p.store_sample(true, sample));
    }

    /// Reads back the current sample (as a reader would).
    pub fn read(&self) -> Result<ClockSample, ClockPageError> {
        self.map.page().read()
    }
}

impl Drop for ClockPageWriter {
    /// A cleanly stopping writer marks the page `Empty`, so readers stop extrapolating from a
    /// PHC nobody maintains any more. (After a crash readers keep the last sample; its
    /// `mono_ns` tells its age.)
    fn drop(&mut self) {
        let _g = self.publish_lock.lock().unwrap_or_else(|p| p.into_inner());
        self.map
            .page()
            .write(|p| p.store_sample(false, &ClockSample::default()));
    }
}

/// A read-only view of a clock page.
pub struct ClockPageReader {
    map: Mapping,
}

impl ClockPageReader {
    /// Maps the page at `path` read-only and checks its magic and layout version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, ClockPageError> {
        let map = Mapping::open(path.as_ref())?;
        map.page().check_header()?;
        Ok(ClockPageReader { map })
    }

    /// The current sample: a consistent snapshot of one `publish`, never a mix of two.
    /// Bounded: `Busy` after [`MAX_READ_SPINS`] attempts.
    pub fn read(&self) -> Result<ClockSample, ClockPageError> {
        self.map.page().read()
    }

    /// The PHC time now, extrapolated from the current sample with CLOCK_MONOTONIC.
    #[cfg(unix)]
    pub fn phc_now(&self) -> Result<u64, ClockPageError> {
        let s = self.read()?;
        Ok(s.phc_at(crate::time::mono_ns()))
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests;
