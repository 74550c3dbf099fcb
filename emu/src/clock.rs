//! True time for the models (DESIGN.md §4).
//!
//! A model never reads the host clock itself: it asks an injected [`TimeSource`] how much true
//! time has elapsed. Tests inject a [`VirtualClock`] and advance it by hand (deterministic mode,
//! which reproduces races exactly); the lab injects a [`HostClock`] (real-time mode).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// Elapsed true time, in nanoseconds, as the model sees it.
///
/// Implementations must be monotonic (never go backwards); the PHC model treats a step back
/// as "no time elapsed" rather than running backwards.
pub trait TimeSource: Send + Sync {
    /// Nanoseconds of true time since the source's origin.
    fn now_ns(&self) -> u64;
}

impl<T: TimeSource + ?Sized> TimeSource for Arc<T> {
    fn now_ns(&self) -> u64 {
        (**self).now_ns()
    }
}

/// A clock that only moves when a test moves it (deterministic mode).
///
/// Cloning gives another handle to the same clock, so a test keeps one handle and gives the
/// model another.
#[derive(Debug, Clone, Default)]
pub struct VirtualClock {
    ns: Arc<AtomicU64>,
}

impl VirtualClock {
    /// A clock reading `start_ns`.
    pub fn new(start_ns: u64) -> Self {
        Self {
            ns: Arc::new(AtomicU64::new(start_ns)),
        }
    }

    /// Moves the clock forward by `ns` (saturating at `u64::MAX`, ~584 years).
    pub fn advance(&self, ns: u64) {
        // fetch_update with a closure that always returns Some cannot fail.
        let _ = self
            .ns
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                Some(t.saturating_add(ns))
            });
    }

    /// Sets the clock to `ns`. Setting it backwards is allowed (a test may want to check that
    /// the models tolerate it) but breaks the monotonic contract of [`TimeSource`].
    pub fn set(&self, ns: u64) {
        self.ns.store(ns, Ordering::Release);
    }

    /// The current reading.
    pub fn now(&self) -> u64 {
        self.ns.load(Ordering::Acquire)
    }

    /// This clock as the shared [`TimeSource`] a model config takes.
    pub fn source(&self) -> Arc<dyn TimeSource> {
        Arc::new(self.clone())
    }
}

impl TimeSource for VirtualClock {
    fn now_ns(&self) -> u64 {
        self.now()
    }
}

/// Host monotonic time since the clock was created (real-time mode).
///
/// `std::time::Instant` is CLOCK_MONOTONIC on Linux: it does not jump with wall-clock changes,
/// which is what an oscillator needs.
#[derive(Debug, Clone, Copy)]
pub struct HostClock {
    origin: Instant,
}

impl HostClock {
    /// A clock reading 0 now.
    pub fn new() -> Self {
        Self {
            origin: Instant::now(),
        }
    }

    /// This clock as the shared [`TimeSource`] a model config takes.
    pub fn source(&self) -> Arc<dyn TimeSource> {
        Arc::new(*self)
    }
}

impl Default for HostClock {
    fn default() -> Self {
        Self::new()
    }
}

impl TimeSource for HostClock {
    fn now_ns(&self) -> u64 {
        u64::try_from(self.origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn virtual_clock_handles_share_time() {
        let c = VirtualClock::new(5);
        let src = c.source();
        c.advance(10);
        assert_eq!(src.now_ns(), 15);
        c.set(100);
        assert_eq!(src.now_ns(), 100);
        c.advance(u64::MAX);
        assert_eq!(c.now(), u64::MAX);
    }

    #[test]
    fn host_clock_is_monotonic() {
        let c = HostClock::new();
        let a = c.now_ns();
        let b = c.now_ns();
        assert!(b >= a);
    }
}
