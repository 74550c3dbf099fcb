//! Bounded waits (reference §6, §12): relibc's `redox_event_queue_get_events_v1` ignores its
//! timeout argument, so a one-shot timer of the kernel `time` scheme, subscribed in the same
//! event queue, is what bounds a wait.

use std::sync::atomic::{AtomicU64, Ordering};

use libredox::Fd;
use libredox::error::Result;
use libredox::flag::{CLOCK_MONOTONIC, O_CLOEXEC, O_RDWR};

pub use crate::deadline::timespec_bytes;

/// CLOCK_MONOTONIC in nanoseconds (0 if unreadable: waits then end early, never late).
pub fn mono_ns() -> u64 {
    match libredox::call::clock_gettime(CLOCK_MONOTONIC) {
        Ok(ts) if ts.tv_sec >= 0 => (ts.tv_sec as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(ts.tv_nsec.max(0) as u64),
        _ => 0,
    }
}

/// A one-shot CLOCK_MONOTONIC timer (`/scheme/time/4`): writing an absolute `TimeSpec` arms
/// it; EVENT_READ fires once the clock passes it (§12). Open it before `setrens` (§10).
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

    /// Arms for monotonic time `deadline_ns`. Timers of earlier arms may still fire: waiters
    /// re-check the clock rather than trusting an event.
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
