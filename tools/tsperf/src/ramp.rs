//! The ntpperf-style ramp (reference ptp-and-benchmarks §3.2): a start rate, ×1.5 steps of fixed
//! length, until more than half the requests fail, the sender falls behind, or a maximum.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use ptp_ipc::time::mono_ns;
use serde_json::json;

use crate::stats::{Samples, Summary};

/// How a request ended, as the target reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// A timestamp; `latch_mono_ns` is the NIC's latch instant mapped to host monotonic time.
    Stamp { latch_mono_ns: u64 },
    /// No timestamp set was free (the driver skipped it).
    Skipped,
    /// The driver gave up on it (timeout, reset, not sent).
    Lost,
}

/// One completion.
#[derive(Debug, Clone, Copy)]
pub struct Completion {
    pub id: u64,
    pub arrival_mono_ns: u64,
    pub outcome: Outcome,
}

/// What the ramp drives.
pub trait Target {
    /// Human name for tables.
    fn name(&self) -> String;
    /// Submits request `id` now.
    fn submit(&mut self, id: u64) -> Result<(), String>;
    /// Where completions arrive.
    fn completions(&self) -> &Receiver<Completion>;
    /// Register reads per delivered stamp since the last call, if the target can tell.
    fn mmio_reads(&mut self) -> Option<(u64, u64)> {
        None
    }
}

#[derive(Debug, Clone)]
pub struct RampConfig {
    pub start_rate: f64,
    pub max_rate: f64,
    pub factor: f64,
    pub step: Duration,
    /// On time: delivered within this of the submit (ptp4l 3.x's tx_timestamp_timeout).
    pub on_time: Duration,
    /// Later than this is lost (timestamped-socket's 200 ms).
    pub hard_timeout: Duration,
    /// Stop the whole ramp after this long.
    pub time_limit: Duration,
}

impl Default for RampConfig {
    fn default() -> Self {
        Self {
            start_rate: 1000.0,
            max_rate: 400_000.0,
            factor: 1.5,
            step: Duration::from_secs(1),
            on_time: Duration::from_millis(1),
            hard_timeout: Duration::from_millis(200),
            time_limit: Duration::from_secs(120),
        }
    }
}

/// The result of one step.
#[derive(Debug, Clone)]
pub struct Step {
    pub rate: f64,
    pub sent: u64,
    pub on_time: u64,
    pub late: u64,
    pub skipped: u64,
    pub lost: u64,
    pub invalid: u64,
    /// Delivery latency (NIC latch → arrival at the requester), µs.
    pub latency: Summary,
    /// Submit → arrival, µs.
    pub turnaround: Summary,
    pub mmio_reads_per_ts: Option<f64>,
    /// The sender could not keep the rate (more than 10 ms behind).
    pub sender_behind: bool,
}

impl Step {
    pub fn pct(&self, n: u64) -> f64 {
        if self.sent == 0 {
            0.0
        } else {
            100.0 * n as f64 / self.sent as f64
        }
    }

    pub fn to_json(&self, target: &str) -> serde_json::Value {
        json!({
            "target": target, "rate": self.rate.round(), "sent": self.sent,
            "on_time_pct": self.pct(self.on_time), "late_pct": self.pct(self.late),
            "skipped_pct": self.pct(self.skipped), "lost_pct": self.pct(self.lost),
            "invalid_pct": self.pct(self.invalid),
            "latency_us": {"min": self.latency.min, "mean": self.latency.mean, "max": self.latency.max,
                "stddev": self.latency.stddev, "p50": self.latency.p50, "p99": self.latency.p99, "p999": self.latency.p999},
            "turnaround_us": {"p50": self.turnaround.p50, "p99": self.turnaround.p99},
            "mmio_reads_per_ts": self.mmio_reads_per_ts,
            "sender_behind": self.sender_behind,
        })
    }

    pub fn row(&self) -> String {
        format!(
            "{:>8.0} {:>8} | {:>7.2}% {:>6.2}% {:>6.2}% {:>6.2}% {:>6.2}% | {:>8.1} {:>8.1} {:>9.1} {:>8.1} {:>8.1} | {:>5}",
            self.rate,
            self.sent,
            self.pct(self.on_time),
            self.pct(self.late),
            self.pct(self.skipped),
            self.pct(self.lost),
            self.pct(self.invalid),
            self.latency.min,
            self.latency.mean,
            self.latency.max,
            self.latency.stddev,
            self.latency.p99,
            self.mmio_reads_per_ts
                .map(|m| format!("{m:.2}"))
                .unwrap_or_else(|| "-".into()),
        )
    }
}

pub const HEADER: &str = "    rate     sent |  ontime   late  skipped  lost invalid | latency µs: min     mean       max   stddev      p99 | mmio/ts";

/// Runs one step at `rate` for `cfg.step`, then drains for `cfg.hard_timeout`.
pub fn run_step<T: Target>(t: &mut T, rate: f64, cfg: &RampConfig, next_id: &mut u64) -> Step {
    let _ = t.mmio_reads();
    let mut submitted: HashMap<u64, u64> = HashMap::new();
    let period = Duration::from_secs_f64(1.0 / rate);
    let start = Instant::now();
    let mut k = 0u64;
    let mut sender_behind = false;
    let mut results: HashMap<u64, Completion> = HashMap::new();
    let rx = t.completions().clone();
    while start.elapsed() < cfg.step {
        let due = start + period.mul_f64(k as f64);
        let now = Instant::now();
        if now < due {
            // Collect completions while waiting, so the channel never backs up.
            while let Ok(c) = rx.try_recv() {
                results.insert(c.id, c);
            }
            // Sleep, never spin: a spinning sender would take a core from the path under test
            // on a 2-core machine. Requests due within 20 µs go out now (ntpperf batches too).
            let wait = due.saturating_duration_since(Instant::now());
            if wait > Duration::from_micros(20) {
                std::thread::sleep(wait);
            }
        }
        let id = *next_id;
        *next_id += 1;
        submitted.insert(id, mono_ns());
        if t.submit(id).is_err() {
            results.insert(
                id,
                Completion {
                    id,
                    arrival_mono_ns: mono_ns(),
                    outcome: Outcome::Lost,
                },
            );
        }
        k += 1;
    }
    // The sender fell behind if it could not keep the rate over the step (a single stall is
    // caught up in a burst, as ntpperf's sender does; only a sustained shortfall ends the ramp).
    let expected = rate * start.elapsed().as_secs_f64();
    sender_behind |= (k as f64) < 0.9 * expected;
    // Drain: everything still outstanding after the hard timeout is lost.
    let deadline = Instant::now() + cfg.hard_timeout;
    while results.len() < submitted.len() {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        match rx.recv_timeout(left) {
            Ok(c) => {
                results.insert(c.id, c);
            }
            Err(_) => break,
        }
    }
    while let Ok(c) = rx.try_recv() {
        results.insert(c.id, c);
    }
    let mmio = t.mmio_reads();
    classify(rate, &submitted, &results, cfg, sender_behind, mmio)
}

fn classify(
    rate: f64,
    submitted: &HashMap<u64, u64>,
    results: &HashMap<u64, Completion>,
    cfg: &RampConfig,
    sender_behind: bool,
    mmio: Option<(u64, u64)>,
) -> Step {
    let mut s = Step {
        rate,
        sent: submitted.len() as u64,
        on_time: 0,
        late: 0,
        skipped: 0,
        lost: 0,
        invalid: 0,
        latency: Summary::default(),
        turnaround: Summary::default(),
        mmio_reads_per_ts: None,
        sender_behind,
    };
    let (mut lat, mut turn) = (Samples::default(), Samples::default());
    let on_time = cfg.on_time.as_nanos() as u64;
    let hard = cfg.hard_timeout.as_nanos() as u64;
    // Slack for the stamp-to-host mapping (clock page extrapolation).
    let eps = 20_000;
    for (id, &sub) in submitted {
        let Some(c) = results.get(id) else {
            s.lost += 1;
            continue;
        };
        match c.outcome {
            Outcome::Skipped => s.skipped += 1,
            Outcome::Lost => s.lost += 1,
            Outcome::Stamp { latch_mono_ns } => {
                let took = c.arrival_mono_ns.saturating_sub(sub);
                // A stamp outside [submit, arrival] is not a stamp of this request.
                if latch_mono_ns + eps < sub || latch_mono_ns > c.arrival_mono_ns + eps {
                    s.invalid += 1;
                    continue;
                }
                if took <= on_time {
                    s.on_time += 1;
                } else if took <= hard {
                    s.late += 1;
                } else {
                    s.lost += 1;
                    continue;
                }
                lat.push(c.arrival_mono_ns.saturating_sub(latch_mono_ns) as f64 / 1e3);
                turn.push(took as f64 / 1e3);
            }
        }
    }
    s.latency = lat.summary();
    s.turnaround = turn.summary();
    s.mmio_reads_per_ts = mmio
        .and_then(|(reads, delivered)| (delivered > 0).then(|| reads as f64 / delivered as f64));
    s
}

/// Runs the ramp; `report` sees each step as it completes.
pub fn run<T: Target>(t: &mut T, cfg: &RampConfig, mut report: impl FnMut(&Step)) -> Vec<Step> {
    // Sleeps end within ~1 µs of their deadline instead of the default 50 µs timer slack.
    // Safety: prctl(PR_SET_TIMERSLACK) only changes this thread's timer slack.
    unsafe {
        libc::prctl(libc::PR_SET_TIMERSLACK, 1000 as libc::c_ulong);
    }
    let mut steps = Vec::new();
    let mut rate = cfg.start_rate;
    let mut next_id = 1;
    let start = Instant::now();
    while rate <= cfg.max_rate && start.elapsed() < cfg.time_limit {
        let s = run_step(t, rate, cfg, &mut next_id);
        report(&s);
        let failed = s.pct(s.lost + s.invalid + s.skipped) > 50.0;
        let behind = s.sender_behind;
        steps.push(s);
        if failed || behind {
            break;
        }
        rate *= cfg.factor;
    }
    steps
}

/// The most timestamps per second delivered on time at any step (rate × on-time fraction): the
/// path's goodput. Unlike a threshold capacity it does not hinge on whether one scheduling
/// stall happened to fall into a step.
pub fn peak_on_time(steps: &[Step]) -> Option<f64> {
    steps
        .iter()
        .map(|s| s.rate * s.pct(s.on_time) / 100.0)
        .fold(None, |m, r| Some(m.map_or(r, |m: f64| m.max(r))))
}

/// The highest rate with ≥ 99.9 % on time and nothing lost (the ntpperf-style criterion).
pub fn capacity(steps: &[Step]) -> Option<f64> {
    capacity_at(steps, 99.9)
}

/// The highest rate with at least `pct` % on time and nothing lost. On a small, busy host
/// scheduling stalls of a millisecond or more make 0.1–0.5 % of requests late at any rate
/// (reference ptp-and-benchmarks §3.3 saw the same with kernel stamps), so the 99 % knee is the
/// figure that shows the path's capacity there.
pub fn capacity_at(steps: &[Step], pct: f64) -> Option<f64> {
    steps
        .iter()
        .filter(|s| !s.sender_behind && s.pct(s.on_time) >= pct && s.lost == 0)
        .map(|s| s.rate)
        .fold(None, |m, r| Some(m.map_or(r, |m: f64| m.max(r))))
}
