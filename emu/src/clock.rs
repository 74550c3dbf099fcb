//! True time for the models (DESIGN.md §4).
//!
//! A model never reads the host clock itself: it asks an injected [`TimeSource`] how much true
//! time has elapsed. Tests inject a [`VirtualClock`] and advance it by hand (deterministic mode,
//! which reproduces races exactly); the lab injects a [`HostClock`] (real-time mode).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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

/// Host CLOCK_MONOTONIC, absolute (real-time mode).
///
/// The reading is the kernel's monotonic clock itself, not time since the `HostClock` was
/// created: two models in different processes on one host then share a timebase, which the
/// wire needs, since a frame carries its departure instant and the receiving model timestamps
/// it at departure + cable delay (DESIGN.md §4 "Wire"). CLOCK_MONOTONIC does not jump with
/// wall-clock changes, which is what an oscillator needs.
///
/// On targets without `clock_gettime` (none of the supported ones) it falls back to
/// `std::time::Instant` since the first use in the process, which still shares a timebase
/// within one process.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostClock {
    _private: (),
}

impl HostClock {
    /// A handle to the host's monotonic clock (all handles read the same clock).
    pub fn new() -> Self {
        Self { _private: () }
    }

    /// This clock as the shared [`TimeSource`] a model config takes.
    pub fn source(&self) -> Arc<dyn TimeSource> {
        Arc::new(*self)
    }
}

impl TimeSource for HostClock {
    fn now_ns(&self) -> u64 {
        monotonic_ns()
    }
}

/// CLOCK_MONOTONIC in ns.
#[cfg(unix)]
fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: `ts` is a valid, writable timespec for the duration of the call; CLOCK_MONOTONIC
    // is always supported, and on the impossible failure `ts` stays zeroed.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    if rc != 0 {
        return 0;
    }
    let sec = u64::try_from(ts.tv_sec).unwrap_or(0);
    let nsec = u64::try_from(ts.tv_nsec).unwrap_or(0);
    sec.saturating_mul(1_000_000_000).saturating_add(nsec)
}

/// Fallback: `Instant` since the first call in this process.
#[cfg(not(unix))]
fn monotonic_ns() -> u64 {
    use std::sync::OnceLock;
    static ORIGIN: OnceLock<Instant> = OnceLock::new();
    let origin = *ORIGIN.get_or_init(Instant::now);
    u64::try_from(origin.elapsed().as_nanos()).unwrap_or(u64::MAX)
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

    #[cfg(unix)]
    #[test]
    fn host_clock_is_absolute_clock_monotonic() {
        // Two independent handles (as in two processes) agree: the reading is the kernel clock,
        // not time since creation.
        let a = HostClock::new().now_ns();
        std::thread::sleep(std::time::Duration::from_millis(2));
        let late = HostClock::new();
        let b = late.now_ns();
        assert!(b >= a + 2_000_000, "{a} {b}");
        assert!(a > 0);
    }
}
