//! The host clocks the whole project uses (clock page, gettimex brackets).
//!
//! Read through `clock_gettime` directly rather than `std::time`, because `Instant` has no
//! defined epoch (the clock page must carry a CLOCK_MONOTONIC value another process can compare
//! with its own) and `SystemTime` is not guaranteed to be CLOCK_REALTIME on every target.

/// Reads `clock` as nanoseconds. Both clocks used here cannot fail with a valid `timespec`
/// pointer; if the OS ever reports an error we return 0 rather than panicking in a daemon's hot
/// path, and a debug build asserts.
fn read(clock: libc::clockid_t) -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: `ts` is a valid, writable timespec that lives across the call; clock_gettime only
    // writes through the pointer.
    let rc = unsafe { libc::clock_gettime(clock, &mut ts) };
    debug_assert_eq!(rc, 0, "clock_gettime({clock}) failed");
    if rc != 0 || ts.tv_sec < 0 {
        return 0;
    }
    (ts.tv_sec as u64)
        .saturating_mul(1_000_000_000)
        .saturating_add(ts.tv_nsec as u64)
}

/// CLOCK_MONOTONIC in nanoseconds: the host time base of the clock page.
pub fn mono_ns() -> u64 {
    read(libc::CLOCK_MONOTONIC)
}

/// CLOCK_REALTIME in nanoseconds: the host clock gettimex brackets the PHC read with (as Linux's
/// PTP_SYS_OFFSET_EXTENDED).
pub fn realtime_ns() -> u64 {
    read(libc::CLOCK_REALTIME)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clocks_are_sane() {
        let a = mono_ns();
        let b = mono_ns();
        assert!(a > 0 && b >= a);
        // Later than 2020-01-01 and matches SystemTime within a second.
        let rt = realtime_ns();
        assert!(rt > 1_577_836_800_000_000_000);
        let sys = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        assert!(sys.abs_diff(rt) < 1_000_000_000);
    }
}
