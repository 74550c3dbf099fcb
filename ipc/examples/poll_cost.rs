//! What a poll costs through `ptp_ipc::poll` (rustix) against a raw `libc::poll`, on the
//! ring's bell (an eventfd): `cargo run --release -p ptp-ipc --example poll_cost`.
//!
//! Two cases: a bell already rung (the wake-up path: poll returns at once) and an idle one,
//! each with a deadline already past so no call sleeps; `poll_once` shows the syscall alone. Prints ns per call, the median of 7 rounds.

#[cfg(target_os = "linux")]
fn main() {
    use std::os::fd::{AsRawFd, OwnedFd};
    use std::time::Instant;

    use ptp_ipc::poll::{PollFd, PollFlags, poll_once, poll_until};
    use std::time::Duration;

    const N: u32 = 200_000;
    let bell = |n| rustix::event::eventfd(n, rustix::event::EventfdFlags::NONBLOCK).unwrap();
    let (fd, idle) = (bell(1), bell(0));
    let raw = |f: &OwnedFd| {
        let t = Instant::now();
        for _ in 0..N {
            let mut p = libc::pollfd {
                fd: f.as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            };
            // Safety: one live pollfd.
            std::hint::black_box(unsafe { libc::poll(&mut p, 1, 0) });
        }
        t.elapsed().as_nanos() as f64 / f64::from(N)
    };
    let ours = |f: &OwnedFd| {
        let t = Instant::now();
        for _ in 0..N {
            let mut p = [PollFd::new(f, PollFlags::IN)];
            std::hint::black_box(poll_until(&mut p, Some(Instant::now())).unwrap());
        }
        t.elapsed().as_nanos() as f64 / f64::from(N)
    };
    let once = |f: &OwnedFd| {
        let t = Instant::now();
        for _ in 0..N {
            let mut p = [PollFd::new(f, PollFlags::IN)];
            std::hint::black_box(poll_once(&mut p, Duration::ZERO).unwrap());
        }
        t.elapsed().as_nanos() as f64 / f64::from(N)
    };
    let median = |f: &dyn Fn() -> f64| {
        let mut v: Vec<f64> = (0..7).map(|_| f()).collect();
        v.sort_by(f64::total_cmp);
        v[3]
    };
    for (name, f) in [("bell rung", &fd), ("bell idle", &idle)] {
        let (a, b, c) = (median(&|| raw(f)), median(&|| ours(f)), median(&|| once(f)));
        println!("{name}: poll_once (no deadline arithmetic) {c:.0} ns");
        println!(
            "{name}: libc::poll {a:.0} ns, ptp_ipc::poll::poll_until {b:.0} ns ({:+.1}%)",
            (b / a - 1.0) * 100.0
        );
    }
}

#[cfg(not(target_os = "linux"))]
fn main() {}
