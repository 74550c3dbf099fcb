//! Bounded waits on descriptors (Linux): poll until an event or an absolute deadline.
//!
//! Every Linux wait on a descriptor in the workspace goes through [`poll_until`]: EINTR restarts
//! the wait with the time left (never the whole timeout again), and the time left is handed to
//! the kernel in nanoseconds (`ppoll`), so a wait never wakes just before its deadline and
//! spins. Redox's absolute kernel deadlines are in [`crate::deadline`].

use std::io;
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

use rustix::event::Timespec;
pub use rustix::event::{PollFd, PollFlags};

/// `now + timeout`; `None` (no end) for a timeout too large to represent.
pub fn deadline_after(timeout: Duration) -> Option<Instant> {
    Instant::now().checked_add(timeout)
}

/// `d` as a kernel timespec, saturating (the kernel saturates the deadline it makes of it).
fn timespec(d: Duration) -> Timespec {
    Timespec::try_from(d).unwrap_or(Timespec {
        tv_sec: i64::MAX,
        tv_nsec: 0,
    })
}

/// Polls `fds` until one reports an event (`Ok(n)`: `n` of them did, see their `revents`) or
/// `deadline` passes (`Ok(0)`); `None` waits without end. A deadline already past still polls
/// once without blocking, so what is ready is never missed.
pub fn poll_until(fds: &mut [PollFd<'_>], deadline: Option<Instant>) -> io::Result<usize> {
    loop {
        let left = deadline.map(|d| d.saturating_duration_since(Instant::now()));
        let ts = left.map(timespec);
        match rustix::event::poll(fds, ts.as_ref()) {
            Ok(n) => return Ok(n),
            Err(rustix::io::Errno::INTR) if left.is_some_and(|l| l.is_zero()) => return Ok(0),
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// One poll of `fds` of at most `wait`: how many reported an event, 0 if none did or a signal
/// interrupted it (for a serving loop that checks its stop flag after every wait, so a signal
/// ends the wait at once).
pub fn poll_once(fds: &mut [PollFd<'_>], wait: Duration) -> io::Result<usize> {
    match rustix::event::poll(fds, Some(&timespec(wait))) {
        Err(rustix::io::Errno::INTR) => Ok(0),
        r => Ok(r?),
    }
}

/// Waits until `fd` reports one of `events` (or an error or hang-up, which are always
/// reported), at most until `deadline`: the events it reported, or `None` at the deadline.
pub fn wait_fd(
    fd: impl AsFd,
    events: PollFlags,
    deadline: Option<Instant>,
) -> io::Result<Option<PollFlags>> {
    let mut p = [PollFd::new(&fd, events)];
    Ok((poll_until(&mut p, deadline)? > 0).then(|| p[0].revents()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::net::{UnixDatagram, UnixStream};

    #[test]
    fn a_wait_ends_at_its_deadline_not_before() {
        let (a, _b) = UnixDatagram::pair().unwrap();
        let t0 = Instant::now();
        let got = wait_fd(&a, PollFlags::IN, deadline_after(Duration::from_millis(30))).unwrap();
        assert_eq!(got, None);
        assert!(
            t0.elapsed() >= Duration::from_millis(30),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn a_sub_millisecond_wait_is_not_rounded_to_a_spin() {
        // A millisecond timeout would round 700 µs down to poll(0): the caller's loop spins.
        let (a, _b) = UnixDatagram::pair().unwrap();
        for _ in 0..3 {
            let t0 = Instant::now();
            let got = wait_fd(
                &a,
                PollFlags::IN,
                deadline_after(Duration::from_micros(700)),
            );
            assert_eq!(got.unwrap(), None);
            assert!(
                t0.elapsed() >= Duration::from_micros(700),
                "{:?}",
                t0.elapsed()
            );
        }
        let mut fds = [PollFd::new(&a, PollFlags::IN)];
        let t0 = Instant::now();
        assert_eq!(poll_once(&mut fds, Duration::from_micros(700)).unwrap(), 0);
        assert!(
            t0.elapsed() >= Duration::from_micros(700),
            "{:?}",
            t0.elapsed()
        );
    }

    #[test]
    fn a_ready_descriptor_is_reported_even_at_a_past_deadline() {
        let (a, b) = UnixDatagram::pair().unwrap();
        b.send(b"x").unwrap();
        let past = Some(Instant::now() - Duration::from_millis(1));
        let got = wait_fd(&a, PollFlags::IN, past).unwrap();
        assert!(got.is_some_and(|r| r.contains(PollFlags::IN)), "{got:?}");
        let mut fds = [
            PollFd::new(&b, PollFlags::IN),
            PollFd::new(&a, PollFlags::IN),
        ];
        assert_eq!(poll_until(&mut fds, past).unwrap(), 1);
        assert!(fds[0].revents().is_empty() && fds[1].revents().contains(PollFlags::IN));
    }

    #[test]
    fn a_hang_up_is_reported_whatever_was_asked() {
        let (a, b) = UnixStream::pair().unwrap();
        drop(b);
        let got = wait_fd(
            &a,
            PollFlags::empty(),
            deadline_after(Duration::from_secs(5)),
        )
        .unwrap();
        assert!(got.is_some_and(|r| r.contains(PollFlags::HUP)), "{got:?}");
    }
}
