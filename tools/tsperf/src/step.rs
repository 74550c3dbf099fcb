//! The result of one ramp step: what the ramp measures and the figures judge (its own module,
//! so `figures` and `ramp` both use it without depending on each other).

use serde_json::json;

use crate::stats::Summary;

/// The result of one step.
#[derive(Debug, Clone, Default)]
pub struct Step {
    /// The requested rate, /s.
    pub rate: f64,
    pub sent: u64,
    pub on_time: u64,
    pub late: u64,
    pub skipped: u64,
    pub lost: u64,
    pub invalid: u64,
    /// From the first submit to the latest of the schedule's end, the last submit and the last
    /// on-time delivery, ns.
    pub elapsed_ns: u64,
    /// Stamps delivered on time per elapsed second ([`crate::figures::goodput`]).
    pub goodput_per_s: Option<f64>,
    /// Delivery latency (NIC latch → arrival at the requester), µs.
    pub latency: Summary,
    /// Submit → arrival, µs.
    pub turnaround: Summary,
    /// Register reads per stamp received in this step: the driver's funnel count.
    pub driver_reads_per_ts: Option<f64>,
    /// The same from the device model's own BAR counters.
    pub model_reads_per_ts: Option<f64>,
    /// The sender could not keep the rate (more than 10 % short over the step).
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

    /// Requests submitted per elapsed second.
    pub fn achieved_rate(&self) -> Option<f64> {
        (self.elapsed_ns > 0).then(|| self.sent as f64 * 1e9 / self.elapsed_ns as f64)
    }

    pub fn to_json(&self, run: usize, target: &str) -> serde_json::Value {
        let l = &self.latency;
        json!({
            "run": run, "target": target, "rate": self.rate.round(), "sent": self.sent,
            "elapsed_s": self.elapsed_ns as f64 / 1e9,
            "achieved_rate_per_s": self.achieved_rate(),
            "on_time": self.on_time, "late": self.late, "skipped": self.skipped,
            "lost": self.lost, "invalid": self.invalid,
            "on_time_pct": self.pct(self.on_time), "late_pct": self.pct(self.late),
            "skipped_pct": self.pct(self.skipped), "lost_pct": self.pct(self.lost),
            "invalid_pct": self.pct(self.invalid),
            "goodput_per_s": self.goodput_per_s,
            "latency_us": {"min": l.min, "mean": l.mean, "max": l.max,
                "stddev": l.stddev, "p50": l.p50, "p99": l.p99, "p999": l.p999},
            "turnaround_us": {"p50": self.turnaround.p50, "p99": self.turnaround.p99,
                "p999": self.turnaround.p999},
            "driver_mmio_reads_per_ts": self.driver_reads_per_ts,
            "model_bar_reads_per_ts": self.model_reads_per_ts,
            "sender_behind": self.sender_behind,
        })
    }

    pub fn row(&self) -> String {
        let opt =
            |v: Option<f64>, d: usize| v.map(|m| format!("{m:.d$}")).unwrap_or_else(|| "-".into());
        format!(
            "{:>8.0} {:>8} | {:>7.3}% {:>6.2}% {:>6.2}% {:>6.2}% {:>6.2}% | {:>8} | {:>7.1} {:>7.1} {:>8.1} {:>9.1} | {:>6} {:>6}{}",
            self.rate,
            self.sent,
            self.pct(self.on_time),
            self.pct(self.late),
            self.pct(self.skipped),
            self.pct(self.lost),
            self.pct(self.invalid),
            opt(self.goodput_per_s, 0),
            self.latency.p50,
            self.latency.p99,
            self.latency.p999,
            self.latency.max,
            opt(self.driver_reads_per_ts, 2),
            opt(self.model_reads_per_ts, 2),
            if self.sender_behind {
                "  sender behind"
            } else {
                ""
            },
        )
    }
}
