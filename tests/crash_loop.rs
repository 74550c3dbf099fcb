//! Issue 17's crash-loop limit, end to end through the lab's supervisor (the policy itself is
//! unit-tested in src/procs.rs): a daemon killed again each time it comes back is restarted
//! after a backoff doubling from 100 ms, and its 6th death within 30 s is a crash loop — the
//! supervisor reports it, names the daemon and its exit, and starts it no more. The other
//! host's daemons are left running throughout.
//!
//! Broken forms this fails on: a supervisor without the limit (the 6th death restarted), one
//! without backoff (restarts within a few ms), or one that restarts the wrong child.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use redox_ptp::lab::{Lab, LabConfig};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// Supervises until `role` of host `i` runs again under a pid other than `old`; its new pid,
/// or the supervisor's error.
fn until_restarted(lab: &mut Lab, i: u32, role: &str, old: u32) -> Result<u32, String> {
    let t0 = Instant::now();
    while t0.elapsed() < Duration::from_secs(20) {
        lab.supervise()?;
        if let Some(p) = lab.pid(i, role).filter(|&p| p != old) {
            return Ok(p);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    Err(format!("host{i}/{role} not restarted within 20 s"))
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
        lab.signal(1, "ptpd", libc::SIGKILL).unwrap();
        pid = until_restarted(&mut lab, 1, "ptpd", pid)
            .unwrap_or_else(|e| panic!("death {}: {e}\n{}", k + 1, lab.logs()));
    }
    let restarts = &lab.supervisor.restarts;
    assert_eq!(restarts.len(), policy.limit, "{restarts:?}");
    for (k, r) in restarts.iter().enumerate() {
        assert_eq!(r.name, "host1/ptpd");
        assert_eq!(r.why, "killed by signal 9 (SIGKILL)");
        let nominal = policy.first * 2u32.pow(k as u32);
        let took = r.restarted.expect("restarted") - r.died;
        eprintln!(
            "death {}: restarted after {took:?} (backoff {nominal:?})",
            k + 1
        );
        assert!(
            took >= nominal,
            "death {}: restarted after {took:?} < {nominal:?}",
            k + 1
        );
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
