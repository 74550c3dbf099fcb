//! The ntpperf-style ramp (reference ptp-and-benchmarks §3.2): a start rate, ×1.5 steps of fixed
//! length, until more than half the requests fail, the sender falls behind, or a maximum.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use crossbeam_channel::Receiver;
use ptp_ipc::time::mono_ns;

use crate::figures::{self, Bounds, Class, Seen};
use crate::stats::Latency;
use crate::step::Step;

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

/// Cumulative register-read counters of a target, where it has them.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Reads through the driver's own register funnel (its `Stats::mmio_reads`).
    pub driver_reads: Option<u64>,
    /// BAR reads the device model itself counted (the ground-truth record).
    pub model_reads: Option<u64>,
}

/// What the ramp drives.
pub trait Target {
    /// Human name for tables.
    fn name(&self) -> String;
    /// Submits request `id` now.
    fn submit(&mut self, id: u64) -> Result<(), String>;
    /// Where completions arrive.
    fn completions(&self) -> &Receiver<Completion>;
    /// The register-read counters now, if the target has any.
    fn counters(&mut self) -> Counters {
        Counters::default()
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

pub const HEADER: &str = "    rate     sent |   ontime    late  skipped  lost invalid | goodput/s | latency µs: p50   p99   p99.9       max | mmio reads/stamp: driver model";

/// What a step's sender did.
struct Sent {
    /// Request id → submit instant (mono ns).
    submitted: HashMap<u64, u64>,
    /// Completions seen so far (and requests whose submit failed, as lost).
    results: HashMap<u64, Completion>,
    start_ns: u64,
    end_ns: u64,
    /// Not every request went out, or not within 10 % of the rate.
    behind: bool,
}

/// Offers `rate × cfg.step` requests at their due instants (a stall is caught up in a burst,
/// as ntpperf's sender does); gives up at twice the step's length.
fn send<T: Target>(t: &mut T, rate: f64, cfg: &RampConfig, next_id: &mut u64) -> Sent {
    let n = (rate * cfg.step.as_secs_f64()).round().max(1.0) as u64;
    let period = Duration::from_secs_f64(1.0 / rate);
    let rx = t.completions().clone();
    let mut out = Sent {
        submitted: HashMap::with_capacity(n as usize),
        results: HashMap::with_capacity(n as usize),
        start_ns: 0,
        end_ns: 0,
        behind: false,
    };
    let start = Instant::now();
    out.start_ns = mono_ns();
    let mut k = 0u64;
    while k < n && start.elapsed() < cfg.step * 2 {
        let due = start + period.mul_f64(k as f64);
        if Instant::now() < due {
            // Collect completions while waiting, so the channel never backs up.
            while let Ok(c) = rx.try_recv() {
                out.results.insert(c.id, c);
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
        out.submitted.insert(id, mono_ns());
        if t.submit(id).is_err() {
            let c = Completion {
                id,
                arrival_mono_ns: mono_ns(),
                outcome: Outcome::Lost,
            };
            out.results.insert(id, c);
        }
        k += 1;
    }
    out.end_ns = mono_ns();
    out.behind = k < n || (k as f64) < 0.9 * rate * start.elapsed().as_secs_f64();
    out
}

/// Runs one step at `rate` for `cfg.step`, then drains for `cfg.hard_timeout`.
pub fn run_step<T: Target>(t: &mut T, rate: f64, cfg: &RampConfig, next_id: &mut u64) -> Step {
    let before = t.counters();
    let mut sent = send(t, rate, cfg, next_id);
    drain(
        t.completions(),
        &sent.submitted,
        &mut sent.results,
        cfg.hard_timeout,
    );
    let after = t.counters();
    // The step lasts at least its schedule, longer if the sender was late.
    let end_ns = sent.end_ns.max(sent.start_ns + cfg.step.as_nanos() as u64);
    let mut s = classify(
        rate,
        &sent.submitted,
        &sent.results,
        cfg,
        sent.start_ns,
        end_ns,
    );
    s.sender_behind = sent.behind;
    let stamps = s.on_time + s.late + s.invalid;
    let per_ts = |a: Option<u64>, b: Option<u64>| match (a, b) {
        (Some(a), Some(b)) if stamps > 0 => Some(b.saturating_sub(a) as f64 / stamps as f64),
        _ => None,
    };
    s.driver_reads_per_ts = per_ts(before.driver_reads, after.driver_reads);
    s.model_reads_per_ts = per_ts(before.model_reads, after.model_reads);
    s
}

/// Waits up to `hard_timeout` for every outstanding completion: what is still missing then is
/// lost.
fn drain(
    rx: &Receiver<Completion>,
    submitted: &HashMap<u64, u64>,
    results: &mut HashMap<u64, Completion>,
    hard_timeout: Duration,
) {
    let deadline = Instant::now() + hard_timeout;
    // Late completions of an earlier step may still arrive: only this step's requests count.
    let mut pending = submitted
        .keys()
        .filter(|id| !results.contains_key(id))
        .count();
    while pending > 0 {
        match rx.recv_deadline(deadline) {
            Ok(c) => {
                if submitted.contains_key(&c.id) && results.insert(c.id, c).is_none() {
                    pending -= 1;
                }
            }
            Err(_) => break,
        }
    }
    while let Ok(c) = rx.try_recv() {
        results.insert(c.id, c);
    }
}

/// Classes every request of a step and summarises them.
fn classify(
    rate: f64,
    submitted: &HashMap<u64, u64>,
    results: &HashMap<u64, Completion>,
    cfg: &RampConfig,
    start_ns: u64,
    window_end_ns: u64,
) -> Step {
    let mut s = Step {
        rate,
        sent: submitted.len() as u64,
        ..Step::default()
    };
    let (mut lat, mut turn) = (Latency::default(), Latency::default());
    let bounds = Bounds {
        on_time_ns: cfg.on_time.as_nanos() as u64,
        hard_ns: cfg.hard_timeout.as_nanos() as u64,
        // Slack for the stamp-to-host mapping (clock page extrapolation).
        slack_ns: 20_000,
    };
    let mut end_ns = window_end_ns;
    for (id, &sub) in submitted {
        let seen = results.get(id).map(|c| match c.outcome {
            Outcome::Stamp { latch_mono_ns } => Seen::Stamp {
                arrival_ns: c.arrival_mono_ns,
                latch_ns: latch_mono_ns,
            },
            Outcome::Skipped => Seen::Skipped,
            Outcome::Lost => Seen::Lost,
        });
        let class = figures::classify(sub, seen, &bounds);
        match class {
            Class::OnTime => s.on_time += 1,
            Class::Late => s.late += 1,
            Class::Skipped => s.skipped += 1,
            Class::Lost => s.lost += 1,
            Class::Invalid => {
                s.invalid += 1;
                // The first few, with their times, so a wrong time can be traced.
                if s.invalid <= 3 {
                    eprintln!(
                        "tsperf: invalid stamp at {rate}/s: request {id} submitted at {sub} ns, \
                         {seen:?} (host monotonic ns)"
                    );
                }
            }
        }
        if let (
            Class::OnTime | Class::Late,
            Some(Seen::Stamp {
                arrival_ns,
                latch_ns,
            }),
        ) = (class, seen)
        {
            lat.record_ns(arrival_ns.saturating_sub(latch_ns));
            turn.record_ns(arrival_ns.saturating_sub(sub));
            if class == Class::OnTime {
                end_ns = end_ns.max(arrival_ns);
            }
        }
    }
    s.elapsed_ns = end_ns.saturating_sub(start_ns);
    s.goodput_per_s = figures::goodput(s.on_time, s.elapsed_ns);
    s.latency = lat.summary();
    s.turnaround = turn.summary();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crossbeam_channel::{Sender, unbounded};

    /// Completes every request inside `submit`: every 10th skipped, the rest stamped at the
    /// submit instant; counts 3 register reads per request (driver) and 4 (model).
    struct Fake {
        tx: Sender<Completion>,
        rx: Receiver<Completion>,
        submits: u64,
    }

    impl Target for Fake {
        fn name(&self) -> String {
            "fake".into()
        }
        fn submit(&mut self, id: u64) -> Result<(), String> {
            self.submits += 1;
            let now = mono_ns();
            let outcome = if id % 10 == 0 {
                Outcome::Skipped
            } else {
                Outcome::Stamp { latch_mono_ns: now }
            };
            let c = Completion {
                id,
                arrival_mono_ns: now,
                outcome,
            };
            self.tx.send(c).map_err(|e| e.to_string())
        }
        fn completions(&self) -> &Receiver<Completion> {
            &self.rx
        }
        fn counters(&mut self) -> Counters {
            Counters {
                driver_reads: Some(3 * self.submits),
                model_reads: Some(4 * self.submits),
            }
        }
    }

    #[test]
    fn a_step_sends_its_schedule_and_counts_every_request() {
        let (tx, rx) = unbounded();
        let mut f = Fake { tx, rx, submits: 0 };
        let cfg = RampConfig {
            step: Duration::from_secs(1),
            ..RampConfig::default()
        };
        let mut id = 1;
        // A 1 s step: the sender would have to stall for over a second to give up early.
        let s = run_step(&mut f, 400.0, &cfg, &mut id);
        // 400/s × 1 s = 400 requests, ids 1..=400: 40 skipped (every 10th).
        assert_eq!(s.sent, 400);
        assert_eq!(s.skipped, 40);
        assert_eq!((s.lost, s.invalid), (0, 0));
        assert_eq!(s.on_time + s.late, 360);
        assert_eq!(s.latency.n, 360);
        // Reads per stamp received: 3 × 400 / 360 and 4 × 400 / 360.
        let close = |a: Option<f64>, b: f64| a.is_some_and(|a| (a - b).abs() < 1e-9);
        assert!(close(s.driver_reads_per_ts, 1200.0 / 360.0), "{s:?}");
        assert!(close(s.model_reads_per_ts, 1600.0 / 360.0), "{s:?}");
        // The step lasted at least its schedule.
        assert!(s.elapsed_ns >= 1_000_000_000, "{s:?}");
    }

    #[test]
    fn goodput_of_a_step_is_over_the_time_it_took() {
        // 1000 requests scheduled for 1 s at 1000/s went out over 2 s, each stamped at once.
        let mut submitted = HashMap::new();
        let mut results = HashMap::new();
        let t0 = 1_000_000_000u64;
        for id in 0..1000u64 {
            let at = t0 + id * 2_000_000;
            submitted.insert(id, at);
            let outcome = Outcome::Stamp { latch_mono_ns: at };
            let c = Completion {
                id,
                arrival_mono_ns: at + 10_000,
                outcome,
            };
            results.insert(id, c);
        }
        let cfg = RampConfig::default();
        let send_end = t0 + 2_000_000_000;
        let s = classify(1000.0, &submitted, &results, &cfg, t0, send_end);
        assert_eq!(s.on_time, 1000);
        assert_eq!(s.elapsed_ns, 2_000_000_000);
        assert_eq!(s.goodput_per_s, Some(500.0));
        // A late request's arrival does not stretch the window; an on-time one does.
        results.get_mut(&999).unwrap().arrival_mono_ns = send_end + 100_000_000;
        let s = classify(1000.0, &submitted, &results, &cfg, t0, send_end);
        assert_eq!((s.on_time, s.late, s.elapsed_ns), (999, 1, 2_000_000_000));
    }
}
