//! Deadlines for bounded waits, as Redox's kernel takes them: absolute CLOCK_MONOTONIC instants.
//!
//! Redox's `time` scheme timers and its FUTEX_WAIT both take an *absolute* monotonic deadline
//! (kernel `src/syscall/futex.rs` stores the `TimeSpec` as `context.wake`, compared with the
//! clock by the scheduler). The first Redox ring bell passed a relative 100 ms there, so every
//! wait ended at once and every waiter spun (issue 22, failure 1). Everything a Redox wait arms
//! goes through these functions, which are plain arithmetic and tested on every host.

use std::time::Duration;

/// Nanoseconds in a `Duration`, saturating.
fn ns(d: Duration) -> u64 {
    u64::try_from(d.as_nanos()).unwrap_or(u64::MAX)
}

/// The absolute monotonic instant a wait of `timeout` begun at `now_ns` ends (`None`: no end).
pub fn deadline_ns(now_ns: u64, timeout: Option<Duration>) -> Option<u64> {
    timeout.map(|t| now_ns.saturating_add(ns(t)))
}

/// The absolute instant one sleep of a sliced wait ends: one `slice` from `now_ns`, or the
/// deadline if that comes first. `None` once the deadline has passed (the wait is over).
pub fn slice_end_ns(now_ns: u64, deadline: Option<u64>, slice: Duration) -> Option<u64> {
    let end = now_ns.saturating_add(ns(slice));
    match deadline {
        Some(d) if d <= now_ns => None,
        Some(d) => Some(end.min(d)),
        None => Some(end),
    }
}

/// The kernel's `TimeSpec { tv_sec: i64, tv_nsec: i32 }` (16 bytes with padding) for an
/// absolute instant in nanoseconds.
pub fn timespec_bytes(abs_ns: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    let sec = i64::try_from(abs_ns / 1_000_000_000).unwrap_or(i64::MAX);
    let nsec = (abs_ns % 1_000_000_000) as i32;
    b[..8].copy_from_slice(&sec.to_le_bytes());
    b[8..12].copy_from_slice(&nsec.to_le_bytes());
    b
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    #[test]
    fn a_deadline_is_absolute_not_the_timeout() {
        // Issue 22, failure 1: 100 ms handed to the kernel as "100 ms" meant an instant just
        // after boot, long past: the wait returned at once. Here the deadline is now + 100 ms.
        let now = 3_600 * 1_000 * MS;
        let d = deadline_ns(now, Some(Duration::from_millis(100)));
        assert_eq!(d, Some(now + 100 * MS));
        assert!(
            d.unwrap() > now,
            "a deadline in the future, not a relative span"
        );
        assert_eq!(deadline_ns(now, None), None);
        assert_eq!(
            deadline_ns(u64::MAX - 1, Some(Duration::MAX)),
            Some(u64::MAX)
        );
    }

    #[test]
    fn a_slice_ends_at_the_slice_or_the_deadline_whichever_first() {
        let now = 5_000 * MS;
        let slice = Duration::from_millis(100);
        assert_eq!(slice_end_ns(now, None, slice), Some(now + 100 * MS));
        assert_eq!(
            slice_end_ns(now, Some(now + 30 * MS), slice),
            Some(now + 30 * MS)
        );
        assert_eq!(
            slice_end_ns(now, Some(now + 900 * MS), slice),
            Some(now + 100 * MS)
        );
        assert_eq!(
            slice_end_ns(now, Some(now), slice),
            None,
            "deadline reached"
        );
        assert_eq!(slice_end_ns(now, Some(now - 1), slice), None);
    }

    #[test]
    fn timespec_bytes_are_seconds_then_nanoseconds_little_endian() {
        let b = timespec_bytes(12 * 1_000_000_000 + 345);
        assert_eq!(i64::from_le_bytes(b[..8].try_into().unwrap()), 12);
        assert_eq!(i32::from_le_bytes(b[8..12].try_into().unwrap()), 345);
        assert_eq!(&b[12..], &[0; 4]);
    }
}
