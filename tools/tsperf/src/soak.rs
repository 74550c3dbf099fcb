//! `--soak SECS` (issue 17): one daemon, a short ramp to find the highest rate it sustains
//! (the ntpperf capacity at 99.9 % on time; else, on a busy host, the highest step with 0 lost
//! and ≥ 99 % stamped at any latency, [`sustained`]; else the ramp's start), then SECS at that
//! rate in 5 s steps on the same daemon. Reports the daemon's RSS, open fds and threads at
//! the start and the end of the soak (flat: RSS within [`RSS_TOLERANCE_KB`], fds and threads
//! equal) and accounts for every stamp requested during it, on both sides:
//! - tsperf: sent = on time + late + invalid (stamps) + skipped + lost (no answer within the
//!   200 ms hard timeout, or reported lost);
//! - the daemon's `Stats`: requests (accepted into a set + skipped for want of one) =
//!   delivered + reported lost + still held, over the soak;
//! - between the two: tsperf's sent = the daemon's requests, tsperf's stamps = the daemon's
//!   delivered minus any that came after tsperf's hard timeout.

use std::time::Duration;

use serde_json::{Value, json};

use crate::Options;
use crate::driver::Driver;
use crate::figures::capacity_at;
use crate::ramp::{self, RampConfig, Target};
use crate::step::Step;

/// RSS growth over the soak still called flat (allocator noise, lazily touched pages).
pub const RSS_TOLERANCE_KB: i64 = 1024;
/// Length of one soak step (each ends with a drain of at most the hard timeout).
const CHUNK: Duration = Duration::from_secs(5);

/// A process's size now, from /proc.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ProcSize {
    pub rss_kb: i64,
    pub fds: i64,
    pub threads: i64,
}

impl ProcSize {
    pub fn of(pid: u32) -> Result<Self, String> {
        let dir = format!("/proc/{pid}");
        let status = std::fs::read_to_string(format!("{dir}/status"))
            .map_err(|e| format!("{dir}/status: {e}"))?;
        let field = |k: &str| -> Option<i64> {
            let l = status.lines().find_map(|l| l.strip_prefix(k))?;
            l.split_whitespace().next()?.parse().ok()
        };
        let fds = std::fs::read_dir(format!("{dir}/fd"))
            .map_err(|e| format!("{dir}/fd: {e}"))?
            .count() as i64;
        Ok(Self {
            rss_kb: field("VmRSS:").ok_or("no VmRSS")?,
            fds,
            threads: field("Threads:").ok_or("no Threads")?,
        })
    }

    /// Flat: RSS grew by at most [`RSS_TOLERANCE_KB`], fds and threads unchanged.
    pub fn flat(start: Self, end: Self) -> bool {
        end.rss_kb - start.rss_kb <= RSS_TOLERANCE_KB
            && end.fds == start.fds
            && end.threads == start.threads
    }
}

/// tsperf's own counts over the soak, every step summed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Tally {
    pub sent: u64,
    pub on_time: u64,
    pub late: u64,
    pub invalid: u64,
    pub skipped: u64,
    pub lost: u64,
}

impl Tally {
    fn add(&mut self, s: &Step) {
        self.sent += s.sent;
        self.on_time += s.on_time;
        self.late += s.late;
        self.invalid += s.invalid;
        self.skipped += s.skipped;
        self.lost += s.lost;
    }

    pub fn stamps(&self) -> u64 {
        self.on_time + self.late + self.invalid
    }

    /// Every request in exactly one class.
    pub fn balanced(&self) -> bool {
        self.sent == self.stamps() + self.skipped + self.lost
    }
}

/// The daemon's side over the soak: `Stats` differences.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct DaemonTally {
    /// Accepted into a set + skipped for want of one.
    pub requests: u64,
    pub delivered: u64,
    /// Reported lost (skipped ones included), each a `TxTimestampLost`.
    pub lost: u64,
    /// Held in a set at the end (requests − delivered − lost).
    pub held: i64,
}

impl DaemonTally {
    pub fn between(a: &ptp_ipc::Stats, b: &ptp_ipc::Stats) -> Self {
        let requests = (b.tx_requested + b.tx_skipped) - (a.tx_requested + a.tx_skipped);
        let delivered = b.tx_delivered - a.tx_delivered;
        let lost = b.tx_lost - a.tx_lost;
        Self {
            requests,
            delivered,
            lost,
            held: requests as i64 - delivered as i64 - lost as i64,
        }
    }
}

/// Runs the soak on the first `--nic` and `--channel`.
pub fn run(o: &Options, secs: Duration) -> Result<(), String> {
    let nic = o.nics[0].as_str();
    let mut d = Driver::start(
        o.daemon(nic).1,
        nic,
        o.sets_for(nic),
        &o.wire,
        o.channels[0],
    )?;
    let name = d.name();
    let steps = ramp::run(&mut d, &o.ramp, |s| print_step(o, "ramp", &name, s));
    let rate = capacity_at(&steps, 99.9)
        .or_else(|| sustained(&steps))
        .unwrap_or(o.ramp.start_rate);
    // Requests of the ramp's last (failed) step still held time out in the daemon first.
    std::thread::sleep(Duration::from_secs(2));
    let (pid, me) = (d.pid(), std::process::id());
    let (size0, mine0, st0) = (ProcSize::of(pid)?, ProcSize::of(me)?, d.stats()?);
    let cfg = RampConfig {
        step: CHUNK,
        ..o.ramp.clone()
    };
    let mut tally = Tally::default();
    // Ids above the ramp's, so a straggler of the ramp is never taken for a soak request.
    let mut next_id = 1 << 40;
    let t0 = std::time::Instant::now();
    while t0.elapsed() < secs {
        let s = ramp::run_step(&mut d, rate, &cfg, &mut next_id);
        print_step(o, "soak", &name, &s);
        tally.add(&s);
    }
    let took = t0.elapsed().as_secs_f64();
    let (size1, mine1, st1) = (ProcSize::of(pid)?, ProcSize::of(me)?, d.stats()?);
    let daemon = DaemonTally::between(&st0, &st1);
    let mut v = json!({"summary": true, "mode": "soak", "target": name, "rate": rate.round(),
        "secs": took, "daemon_start": size_json(size0), "daemon_end": size_json(size1),
        "tsperf_start": size_json(mine0), "tsperf_end": size_json(mine1),
        "flat": ProcSize::flat(size0, size1), "rss_tolerance_kb": RSS_TOLERANCE_KB,
        "tsperf": tally_json(&tally), "daemon": daemon_json(&daemon)});
    o.load.tag(&mut v);
    if o.json {
        println!("{v}");
    } else {
        print_summary(
            &name,
            rate,
            took,
            (size0, size1),
            (mine0, mine1),
            &tally,
            &daemon,
        );
        o.load.print_line();
    }
    let ok = tally.balanced()
        && daemon.held == 0
        && tally.sent == daemon.requests
        && tally.stamps() <= daemon.delivered;
    if !ok {
        return Err(format!(
            "stamps not accounted for: tsperf {tally:?}, daemon {daemon:?}"
        ));
    }
    if !ProcSize::flat(size0, size1) {
        return Err(format!("the daemon grew: {size0:?} → {size1:?}"));
    }
    Ok(())
}

/// The highest step that lost nothing, kept its rate and had ≥ 99 % of its requests stamped
/// (on time or late): what the daemon sustains when a busy host puts no step at 99.9 % on time.
pub fn sustained(steps: &[Step]) -> Option<f64> {
    steps
        .iter()
        .filter(|s| s.sent > 0 && !s.sender_behind && s.lost == 0)
        .filter(|s| s.pct(s.on_time + s.late) >= 99.0)
        .map(|s| s.rate)
        .max_by(f64::total_cmp)
}

fn print_step(o: &Options, phase: &str, name: &str, s: &Step) {
    if o.json {
        let mut v = s.to_json(1, name);
        v["phase"] = phase.into();
        println!("{v}");
    } else {
        println!("{phase:<5} {}", s.row());
    }
}

fn size_json(s: ProcSize) -> Value {
    json!({"rss_kb": s.rss_kb, "fds": s.fds, "threads": s.threads})
}

fn tally_json(t: &Tally) -> Value {
    json!({"sent": t.sent, "on_time": t.on_time, "late": t.late, "invalid": t.invalid,
        "skipped": t.skipped, "lost": t.lost, "balanced": t.balanced()})
}

fn daemon_json(d: &DaemonTally) -> Value {
    json!({"requests": d.requests, "delivered": d.delivered, "lost": d.lost, "held": d.held})
}

fn print_summary(
    name: &str,
    rate: f64,
    took: f64,
    daemon: (ProcSize, ProcSize),
    mine: (ProcSize, ProcSize),
    t: &Tally,
    d: &DaemonTally,
) {
    let size = |(a, b): (ProcSize, ProcSize)| {
        format!(
            "RSS {} → {} kB, fds {} → {}, threads {} → {}",
            a.rss_kb, b.rss_kb, a.fds, b.fds, a.threads, b.threads
        )
    };
    println!("== soak: {name} at {rate:.0}/s for {took:.0} s");
    println!(
        "  daemon: {} ({})",
        size(daemon),
        if ProcSize::flat(daemon.0, daemon.1) {
            "flat"
        } else {
            "NOT flat"
        }
    );
    println!("  tsperf: {}", size(mine));
    println!(
        "  tsperf: sent {} = stamps {} (on time {}, late {}, invalid {}) + skipped {} + lost {}",
        t.sent,
        t.stamps(),
        t.on_time,
        t.late,
        t.invalid,
        t.skipped,
        t.lost
    );
    println!(
        "  daemon: requests {} = delivered {} + reported lost {} + held {}",
        d.requests, d.delivered, d.lost, d.held
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tallies_balance_only_when_every_request_is_counted_once() {
        let mut t = Tally::default();
        let s = Step {
            sent: 10,
            on_time: 6,
            late: 1,
            skipped: 2,
            lost: 1,
            ..Step::default()
        };
        t.add(&s);
        assert!(t.balanced());
        assert_eq!(t.stamps(), 7);
        t.sent += 1;
        assert!(!t.balanced());
        let a = ptp_ipc::Stats {
            tx_requested: 100,
            tx_skipped: 5,
            tx_delivered: 90,
            tx_lost: 15,
            ..Default::default()
        };
        let b = ptp_ipc::Stats {
            tx_requested: 200,
            tx_skipped: 6,
            tx_delivered: 185,
            tx_lost: 20,
            ..a
        };
        let d = DaemonTally::between(&a, &b);
        assert_eq!((d.requests, d.delivered, d.lost, d.held), (101, 95, 5, 1));
    }

    #[test]
    fn sustained_is_the_highest_step_that_stamped_99_percent_and_lost_none() {
        let step = |rate: f64, on_time: u64, late: u64, lost: u64| Step {
            rate,
            sent: 1000,
            on_time,
            late,
            lost,
            skipped: 1000 - on_time - late - lost,
            ..Step::default()
        };
        let steps = [
            step(1000.0, 970, 25, 0),
            step(2000.0, 960, 31, 0),
            step(3000.0, 990, 9, 1),
            step(4000.0, 900, 50, 0),
        ];
        assert_eq!(sustained(&steps), Some(2000.0));
        assert_eq!(sustained(&steps[3..]), None);
    }

    #[test]
    fn flat_allows_the_rss_tolerance_only() {
        let a = ProcSize {
            rss_kb: 10_000,
            fds: 12,
            threads: 6,
        };
        assert!(ProcSize::flat(a, a));
        let grown = ProcSize {
            rss_kb: 10_000 + RSS_TOLERANCE_KB + 1,
            ..a
        };
        assert!(!ProcSize::flat(a, grown));
        assert!(!ProcSize::flat(a, ProcSize { fds: 13, ..a }));
        assert!(ProcSize::of(std::process::id()).unwrap().fds > 0);
    }
}
