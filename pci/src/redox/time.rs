//! Bounded waits on Redox: an event queue over the awaited fd and a one-shot timer of the kernel
//! `time` scheme (reference §6, §12). relibc's `redox_event_queue_get_events_v1` ignores its
//! timeout argument, so a timer fd in the same queue is what bounds every wait.

use std::sync::atomic::{AtomicU64, Ordering};

use libredox::Fd;
use libredox::error::Result;
use libredox::flag::{CLOCK_MONOTONIC, O_CLOEXEC, O_RDWR};

/// CLOCK_MONOTONIC in nanoseconds (0 if the clock cannot be read, which only a broken kernel
/// does; callers then time out early rather than never).
pub fn mono_ns() -> u64 {
    match libredox::call::clock_gettime(CLOCK_MONOTONIC) {
        Ok(ts) if ts.tv_sec >= 0 => (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec.max(0) as u64),
        _ => 0,
    }
}

/// The kernel's `TimeSpec { tv_sec: i64, tv_nsec: i32 }` (16 bytes with padding, §12) for an
/// absolute time in nanoseconds.
pub fn timespec_bytes(ns: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    let sec = i64::try_from(ns / 1_000_000_000).unwrap_or(i64::MAX);
    let nsec = (ns % 1_000_000_000) as i32;
    b[..8].copy_from_slice(&sec.to_le_bytes());
    b[8..12].copy_from_slice(&nsec.to_le_bytes());
    b
}

/// A one-shot CLOCK_MONOTONIC timer: `/scheme/time/4`; writing an absolute `TimeSpec` arms it,
/// and EVENT_READ fires when the clock passes it (§12).
pub struct Timer {
    fd: Fd,
    /// The latest expiry armed (0: none).
    armed: AtomicU64,
}

impl Timer {
    pub fn open() -> Result<Self> {
        let path = format!("/scheme/time/{CLOCK_MONOTONIC}");
        Ok(Self {
            fd: Fd::open(&path, O_RDWR | O_CLOEXEC, 0)?,
            armed: AtomicU64::new(0),
        })
    }

    /// Arms the timer for monotonic time `deadline_ns`. A timer that fires for an earlier
    /// deadline later is harmless: every waiter re-checks the clock.
    pub fn arm_at(&self, deadline_ns: u64) -> Result<()> {
        self.fd.write(&timespec_bytes(deadline_ns)).map(|_| ())
    }

    /// Makes the timer fire no later than `deadline_ns` (`now_ns` being the current time):
    /// arms it unless an expiry armed earlier is still pending and comes first. Waits that
    /// return early (an interrupt, a message) thus leave at most one kernel timer per period
    /// behind instead of one each; the early expiry costs one extra loop, which re-arms.
    pub fn ensure_by(&self, deadline_ns: u64, now_ns: u64) -> Result<()> {
        let armed = self.armed.load(Ordering::Relaxed);
        if armed > now_ns && armed <= deadline_ns {
            return Ok(());
        }
        self.arm_at(deadline_ns)?;
        self.armed.store(deadline_ns, Ordering::Relaxed);
        Ok(())
    }

    pub fn raw(&self) -> usize {
        self.fd.raw()
    }
}
