//! Issue 17's crash-loop limit, end to end through the lab's supervisor (the policy itself is
//! unit-tested in src/procs.rs): a daemon killed again each time it comes back is restarted
//! after a backoff doubling from 100 ms, and its 6th death within 30 s is a crash loop — the
//! supervisor reports it, names the daemon and its exit, and starts it no more. The other
//! host's daemons are left running throughout. A daemon that then stays up longer than the
//! window is restarted after the first delay again, not the escalated one.
//!
//! Each restart delay is measured from outside the supervisor: from the kill (and from the
//! death, seen by waitid without reaping) to the new process's start time, which the
//! kernel records at fork (/proc/PID/stat field 22, CLOCK_BOOTTIME in clock ticks). It must be
//! at least the backoff and at most the backoff plus the slack the test's own supervision loop
//! adds, measured in the same run: the supervisor learns of the death and starts the daemon
//! only inside `Lab::supervise`, which the test calls every 20 ms, so its restart can come one
//! loop period (the longest gap between two calls, however a busy host stretched it) plus one
//! call's duration after the backoff ran out. The supervisor's own record is checked too, but
//! not trusted for time.
//!
//! Broken forms this fails on: a supervisor without the limit (the 6th death restarted), one
//! without backoff (restarts within a few ms), one that waits longer than its backoff (e.g.
//! doubles it once more, or waits `max`), one whose window never lets old restarts go, or one
//! that restarts the wrong child.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redox_ptp::lab::{Lab, LabConfig};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// CLOCK_BOOTTIME, ns: the clock of a process's start time in /proc/PID/stat.
fn boottime_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // Safety: `ts` is a valid, writable timespec for the call's duration.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_BOOTTIME, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_BOOTTIME)");
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The fields of /proc/PID/stat after the command name (field 3, the state, first); `None`
/// once the process is gone.
fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 1..];
    Some(rest.split_whitespace().map(str::to_string).collect())
}

/// Whether our child `pid` has exited and can be reaped; it is left unreaped.
fn exited(pid: u32) -> bool {
    // Safety: all-zero is a valid siginfo_t (plain integers and a union of them).
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // Safety: `info` is a valid, writable siginfo_t for the call's duration.
    let rc = unsafe {
        libc::waitid(
            libc::P_PID,
            pid,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    assert_eq!(rc, 0, "waitid({pid}): {}", std::io::Error::last_os_error());
    // Safety: waitid filled `info` (si_pid stays 0 if the child has not exited).
    unsafe { info.si_pid() != 0 }
}

/// When `pid` was forked, on CLOCK_BOOTTIME in ns rounded down to a clock tick, and the tick.
fn start_ns(pid: u32) -> (u64, u64) {
    // Safety: sysconf has no memory effects.
    let hz = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as u64;
    let f = stat_fields(pid).unwrap_or_else(|| panic!("/proc/{pid}/stat"));
    let ticks: u64 = f[19].parse().expect("starttime");
    let tick = 1_000_000_000 / hz;
    (ticks * tick, tick)
}

/// One restart, timed from outside the supervisor (CLOCK_BOOTTIME, ns).
#[derive(Debug)]
struct Timed {
    new_pid: u32,
    /// Just before the SIGKILL.
    killed: u64,
    /// When the old process was first seen dead (waitid reported its exit).
    died: u64,
    /// The new process's fork, rounded down to `tick`.
    started: u64,
    tick: u64,
    /// When the first `supervise` call after the death ended: the supervisor dated the death
    /// inside it.
    noticed: u64,
    /// The longest gap between the starts of two successive `supervise` calls, and the
    /// longest call.
    gap: u64,
    longest_call: u64,
}

impl Timed {
    /// The latest the new process may start for a supervisor that restarts after `backoff`:
    /// the backoff from when it noticed the death, plus one loop gap (the call before the one
    /// that restarts began before the due time) and one call (the fork happens inside it).
    fn latest(&self, backoff: Duration) -> u64 {
        self.noticed + backoff.as_nanos() as u64 + self.gap + self.longest_call
    }

    fn ms(ns: u64) -> f64 {
        ns as f64 / 1e6
    }

    /// Asserts the restart came no sooner than `backoff` after the kill and no later than
    /// [`Self::latest`].
    fn check(&self, what: &str, backoff: Duration) {
        let b = backoff.as_nanos() as u64;
        let delay = self.started.saturating_sub(self.died);
        let slack = self.latest(backoff) - self.died - b;
        eprintln!(
            "{what}: restarted {:.1} ms after the death ({:.1} ms after the kill), backoff {backoff:?}, \
             allowed up to {:.1} ms (slack: noticed after {:.1} ms, loop gap {:.1} ms, call {:.1} ms)",
            Self::ms(delay),
            Self::ms(self.started.saturating_sub(self.killed)),
            Self::ms(b + slack),
            Self::ms(self.noticed - self.died),
            Self::ms(self.gap),
            Self::ms(self.longest_call),
        );
        // The start time is rounded down: the fork was before `started + tick`.
        assert!(
            self.started + self.tick >= self.killed + b,
            "{what}: restarted sooner than the backoff {backoff:?}: {self:?}"
        );
        assert!(
            self.started <= self.latest(backoff),
            "{what}: restarted {:.1} ms after the death, later than the backoff {backoff:?} plus \
             the {:.1} ms the supervision loop accounts for: {self:?}",
            Self::ms(delay),
            Self::ms(slack)
        );
    }
}

/// Kills host1's ptpd (`pid`) and supervises, every 20 ms, until it runs again under another
/// pid; the restart timed from outside, or the supervisor's error.
fn kill_and_time(lab: &mut Lab, pid: u32) -> Result<Timed, String> {
    let killed = boottime_ns();
    let p = lab.signal(1, "ptpd", libc::SIGKILL)?;
    assert_eq!(p, pid, "host1/ptpd's pid");
    let t0 = Instant::now();
    // Dead once it can be reaped. /proc shows the main thread a zombie ("Z") while the other
    // threads still exit, and waitpid does not report it yet then: ask waitid, leaving the
    // status for the supervisor to reap (WNOWAIT).
    while !exited(pid) {
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(format!("{pid} still alive 10 s after SIGKILL"));
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let died = boottime_ns();
    let mut calls: Vec<(u64, u64)> = Vec::new();
    loop {
        let start = boottime_ns();
        let r = lab.supervise();
        calls.push((start, boottime_ns()));
        r?;
        if let Some(new_pid) = lab.pid(1, "ptpd").filter(|&p| p != pid) {
            let (started, tick) = start_ns(new_pid);
            return Ok(Timed {
                new_pid,
                killed,
                died,
                started,
                tick,
                noticed: calls[0].1,
                gap: calls.windows(2).map(|w| w[1].0 - w[0].0).max().unwrap_or(0),
                longest_call: calls.iter().map(|(s, e)| e - s).max().unwrap_or(0),
            });
        }
        if t0.elapsed() > Duration::from_secs(20) {
            return Err("host1/ptpd not restarted within 20 s of its death".into());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn a_daemon_that_keeps_dying_is_restarted_with_backoff_then_given_up() {
    let cfg = LabConfig {
        seed: 23,
        ..LabConfig::default()
    };
    let mut lab = Lab::start(cfg, &exe(), None).unwrap();
    let policy = lab.supervisor.policy;
    let others: Vec<(&str, Option<u32>)> = ["igcd", "ptpd"]
        .into_iter()
        .map(|r| (r, lab.pid(0, r)))
        .collect();
    let mut pid = lab.pid(1, "ptpd").expect("host1's ptpd runs");
    // `limit` deaths are restarted, each after twice the previous delay.
    for k in 0..policy.limit {
        let t = kill_and_time(&mut lab, pid)
            .unwrap_or_else(|e| panic!("death {}: {e}\n{}", k + 1, lab.logs()));
        t.check(
            &format!("death {}", k + 1),
            policy.first * 2u32.pow(k as u32),
        );
        pid = t.new_pid;
    }
    let restarts = &lab.supervisor.restarts;
    assert_eq!(restarts.len(), policy.limit, "{restarts:?}");
    for r in restarts {
        assert_eq!(r.name, "host1/ptpd");
        assert_eq!(r.why, "killed by signal 9 (SIGKILL)");
        assert!(r.restarted.is_some(), "{r:?}");
    }
    // The next death inside the window is a crash loop: reported, not restarted.
    lab.signal(1, "ptpd", libc::SIGKILL).unwrap();
    let t0 = Instant::now();
    let err = loop {
        if let Err(e) = lab.supervise() {
            break e;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no crash loop reported: {:?}",
            lab.supervisor.restarts
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    eprintln!("supervisor: {err}");
    assert!(
        err.contains("host1/ptpd") && err.contains("SIGKILL") && err.contains("crash loop"),
        "{err}"
    );
    std::thread::sleep(policy.first * 4);
    assert_eq!(lab.pid(1, "ptpd"), None, "restarted after the crash loop");
    assert_eq!(lab.supervisor.restarts.len(), policy.limit);
    for (r, p) in others {
        assert_eq!(lab.pid(0, r), p, "host0's {r} was disturbed");
    }
}

/// The window lets old restarts go: after three deaths (backoff 100, 200, 400 ms) the daemon
/// stays up longer than the window, and its next death is restarted after 100 ms again, not
/// 800 ms. The window is shortened to 3 s for the test (the lab's is 30 s).
#[test]
fn a_daemon_that_stays_up_longer_than_the_window_gets_the_first_delay_again() {
    let cfg = LabConfig {
        seed: 24,
        ..LabConfig::default()
    };
    let mut lab = Lab::start(cfg, &exe(), None).unwrap();
    lab.supervisor.policy.window = Duration::from_secs(3);
    let policy = lab.supervisor.policy;
    let mut pid = lab.pid(1, "ptpd").expect("host1's ptpd runs");
    let mut last = None;
    for k in 0..3 {
        let t = kill_and_time(&mut lab, pid)
            .unwrap_or_else(|e| panic!("death {}: {e}\n{}", k + 1, lab.logs()));
        t.check(&format!("death {}", k + 1), policy.first * 2u32.pow(k));
        pid = t.new_pid;
        last = Some(t);
    }
    // Up for longer than the window since its last restart (and so since the death the
    // supervisor dated it by), supervised all along.
    let up_from = last.map(|t| t.started + t.tick).unwrap();
    let until = up_from + policy.window.as_nanos() as u64 + 500_000_000;
    while boottime_ns() < until {
        lab.supervise().unwrap();
        assert_eq!(lab.pid(1, "ptpd"), Some(pid), "host1/ptpd died on its own");
        std::thread::sleep(Duration::from_millis(50));
    }
    let t = kill_and_time(&mut lab, pid).unwrap_or_else(|e| panic!("death 4: {e}\n{}", lab.logs()));
    let escalated = policy.first * 8;
    // A supervisor that kept the old restarts waits at least `escalated` after the death.
    assert!(
        t.started + t.tick < t.killed + escalated.as_nanos() as u64,
        "death 4 after a stay longer than the window: restarted no sooner than the escalated \
         {escalated:?}: {t:?}"
    );
    t.check("death 4 (window passed)", policy.first);
}
