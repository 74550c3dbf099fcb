//! What a set of ramps amounts to: per run, the ntpperf capacities at ≥ 99.9 % and ≥ 99 % on
//! time (0 lost), the peak goodput, and the cost and latency at the capacity step; over runs,
//! the median and range of each; for `--compare-sets`, the 4-sets / 1-set ratios.

use serde_json::{Value, json};

use crate::figures::{self, Spread, show, show_or, show_spread};
use crate::step::Step;

/// The project's target for the capacity of 4 TX timestamp sets over 1 set.
pub const TARGET_RATIO: f64 = 3.5;
/// The project's target for register reads per delivered stamp (4 sets, at capacity).
pub const TARGET_READS_PER_TS: f64 = 3.0;

/// The two thresholds reported, % on time.
pub const THRESHOLDS: [(f64, &str); 2] = [(99.9, "999"), (99.0, "99")];

/// One step, the figures quoted from it.
fn digest(s: &Step) -> Value {
    json!({
        "rate": s.rate.round(), "on_time_pct": s.pct(s.on_time), "skipped_pct": s.pct(s.skipped),
        "goodput_per_s": s.goodput_per_s,
        "latency_us": {"p50": s.latency.p50, "p99": s.latency.p99, "p999": s.latency.p999},
        "driver_mmio_reads_per_ts": s.driver_reads_per_ts,
        "model_bar_reads_per_ts": s.model_reads_per_ts,
    })
}

/// One ramp of one target.
#[derive(Debug, Clone)]
pub struct RunFigures {
    pub steps: Vec<Step>,
    /// Capacity at each of [`THRESHOLDS`].
    pub capacity: [Option<f64>; 2],
    pub peak_goodput: Option<f64>,
}

impl RunFigures {
    pub fn of(steps: Vec<Step>) -> Self {
        Self {
            capacity: THRESHOLDS.map(|(pct, _)| figures::capacity_at(&steps, pct)),
            peak_goodput: figures::peak_goodput(&steps),
            steps,
        }
    }

    /// Whether the capacity at threshold `i` is the ramp's last step and the ramp did not end
    /// by failing there: the path may take more, the figure is a lower bound (raise `--max`).
    pub fn at_ramp_top(&self, i: usize) -> bool {
        let last = self.steps.last();
        self.capacity[i].is_some() && last.map(|s| s.rate) == self.capacity[i]
    }

    /// The step the capacity at threshold `i` was taken from.
    pub fn at_capacity(&self, i: usize) -> Option<&Step> {
        figures::capacity_step(&self.steps, THRESHOLDS[i].0)
    }

    fn to_json(&self, run: usize) -> Value {
        let mut v = json!({
            "run": run, "steps": self.steps.len(),
            "peak_goodput_per_s": self.peak_goodput.map(f64::round),
            "last_step": self.steps.last().map(digest),
        });
        for (i, (_, tag)) in THRESHOLDS.iter().enumerate() {
            v[format!("capacity_{tag}_per_s")] = self.capacity[i].map(f64::round).into();
            v[format!("at_capacity_{tag}")] = self.at_capacity(i).map(digest).into();
            v[format!("capacity_{tag}_at_ramp_top")] = self.at_ramp_top(i).into();
        }
        v
    }
}

/// One target over all runs.
#[derive(Debug, Clone)]
pub struct TargetSummary {
    pub target: String,
    pub runs: Vec<RunFigures>,
}

impl TargetSummary {
    pub fn capacity(&self, i: usize) -> Spread {
        Spread::of(&self.runs.iter().map(|r| r.capacity[i]).collect::<Vec<_>>())
    }

    pub fn peak_goodput(&self) -> Spread {
        Spread::of(&self.runs.iter().map(|r| r.peak_goodput).collect::<Vec<_>>())
    }

    /// A figure of the capacity step at threshold `i`, over the runs that reached it.
    pub fn at_capacity(&self, i: usize, f: impl Fn(&Step) -> Option<f64>) -> Spread {
        let v: Vec<Option<f64>> = self
            .runs
            .iter()
            .map(|r| r.at_capacity(i).and_then(&f))
            .collect();
        Spread::of_defined(&v)
    }

    pub fn to_json(&self) -> Value {
        let mut v = json!({
            "target": self.target, "runs": self.runs.len(),
            "peak_goodput_per_s": self.peak_goodput().to_json(),
            "per_run": self.runs.iter().enumerate().map(|(i, r)| r.to_json(i + 1)).collect::<Vec<_>>(),
        });
        for (i, (_, tag)) in THRESHOLDS.iter().enumerate() {
            v[format!("capacity_{tag}_per_s")] = self.capacity(i).to_json();
            v[format!("at_capacity_{tag}")] = json!({
                "driver_mmio_reads_per_ts": self.at_capacity(i, |s| s.driver_reads_per_ts).to_json(),
                "model_bar_reads_per_ts": self.at_capacity(i, |s| s.model_reads_per_ts).to_json(),
                "latency_p50_us": self.at_capacity(i, |s| Some(s.latency.p50)).to_json(),
                "latency_p99_us": self.at_capacity(i, |s| Some(s.latency.p99)).to_json(),
                "latency_p999_us": self.at_capacity(i, |s| Some(s.latency.p999)).to_json(),
            });
        }
        v
    }

    /// Lines for people, ntpperf figures first.
    pub fn lines(&self) -> Vec<String> {
        const NR: &str = "not reached";
        let mut out = vec![format!("{}:", self.target)];
        for (i, (pct, _)) in THRESHOLDS.iter().enumerate() {
            let top = self.runs.iter().filter(|r| r.at_ramp_top(i)).count();
            out.push(format!(
                "  capacity (≥ {pct} % on time, 0 lost): {}{}",
                show_spread(&self.capacity(i), 0, "/s", NR),
                if top > 0 {
                    format!(" — the ramp's top step in {top} run(s): a lower bound, raise --max")
                } else {
                    String::new()
                }
            ));
        }
        for (i, (pct, _)) in THRESHOLDS.iter().enumerate() {
            if self.capacity(i).reached_in == 0 {
                continue;
            }
            let l =
                |f: fn(&Step) -> Option<f64>| show_spread(&self.at_capacity(i, f), 1, " µs", "-");
            let mut line = format!(
                "  at the ≥ {pct} % capacity step: latency p50 {} p99 {} p99.9 {}",
                l(|s| Some(s.latency.p50)),
                l(|s| Some(s.latency.p99)),
                l(|s| Some(s.latency.p999)),
            );
            let driver = self.at_capacity(i, |s| s.driver_reads_per_ts);
            let model = self.at_capacity(i, |s| s.model_reads_per_ts);
            if driver.reached_in + model.reached_in > 0 {
                line += &format!(
                    "; register reads per stamp: model {}, driver funnel {}",
                    show_spread(&model, 2, "", "not counted"),
                    show_spread(&driver, 2, "", "not counted"),
                );
            }
            out.push(line);
        }
        out.push(format!(
            "  peak goodput (on-time stamps per elapsed second, any step): {}",
            show_spread(&self.peak_goodput(), 0, "/s", "none")
        ));
        out
    }
}

/// `--compare-sets`: 1 set and 4 sets over the same runs.
pub struct CompareSets {
    pub one: TargetSummary,
    pub four: TargetSummary,
}

impl CompareSets {
    /// The per-run ratio of a figure (4 sets / 1 set), over the runs where both exist.
    fn ratio(&self, f: impl Fn(&RunFigures) -> Option<f64>) -> Spread {
        let v: Vec<Option<f64>> = self
            .one
            .runs
            .iter()
            .zip(&self.four.runs)
            .map(|(a, b)| figures::ratio(f(b), f(a)))
            .collect();
        Spread::of_defined(&v)
    }

    /// The register reads per stamp the MMIO target is judged on: the model's count at the
    /// 4-set ≥ 99.9 % capacity when the model counted, else the driver's funnel count.
    fn reads_at_capacity(&self) -> (Spread, &'static str) {
        let model = self.four.at_capacity(0, |s| s.model_reads_per_ts);
        if model.reached_in > 0 {
            (model, "model")
        } else {
            (
                self.four.at_capacity(0, |s| s.driver_reads_per_ts),
                "driver",
            )
        }
    }

    pub fn to_json(&self) -> Value {
        let (reads, counter) = self.reads_at_capacity();
        let r999 = self.ratio(|r| r.capacity[0]);
        let r99 = self.ratio(|r| r.capacity[1]);
        json!({
            "summary": true, "mode": "compare_sets", "runs": self.one.runs.len(),
            "one_set": self.one.to_json(), "four_sets": self.four.to_json(),
            "ratio_capacity_999": r999.to_json(), "ratio_capacity_99": r99.to_json(),
            "ratio_peak_goodput": self.ratio(|r| r.peak_goodput).to_json(),
            "targets": {
                "ratio_at_least": TARGET_RATIO,
                "ratio_capacity_999_median_met": r999.median.map(|m| m >= TARGET_RATIO),
                "ratio_capacity_99_median_met": r99.median.map(|m| m >= TARGET_RATIO),
                "reads_per_ts_at_most": TARGET_READS_PER_TS,
                "reads_per_ts_counter": counter,
                "reads_per_ts_4_sets_at_capacity_999_median_met":
                    reads.median.map(|m| m <= TARGET_READS_PER_TS),
            },
        })
    }

    pub fn lines(&self) -> Vec<String> {
        let runs = self.one.runs.len();
        let met = |m: Option<f64>, ok: fn(f64) -> bool| match m {
            Some(m) if ok(m) => "met",
            Some(_) => "NOT met",
            None => "undetermined (a capacity was not reached)",
        };
        let mut out = vec![format!(
            "== ntpperf capacity: the highest rate with ≥ P % of stamps on time (≤ 1 ms) and 0 lost; \
             medians (range) over {runs} run{}",
            if runs == 1 { "" } else { "s" }
        )];
        const NR: &str = "not reached";
        const UNDEF: &str = "undefined (a capacity not reached)";
        for (i, (pct, _)) in THRESHOLDS.iter().enumerate() {
            let r = self.ratio(|r| r.capacity[i]);
            out.push(format!(
                "capacity ≥ {pct} %: 1 set {} | 4 sets {} | ratio {} — target ≥ {TARGET_RATIO}×: {}",
                show_spread(&self.one.capacity(i), 0, "/s", NR),
                show_spread(&self.four.capacity(i), 0, "/s", NR),
                show_spread(&r, 2, "×", UNDEF),
                met(r.median, |m| m >= TARGET_RATIO),
            ));
        }
        let (reads, counter) = self.reads_at_capacity();
        out.push(format!(
            "register reads per stamp, 4 sets, at the ≥ 99.9 % capacity ({counter} count): {} — target ≤ {TARGET_READS_PER_TS}: {}",
            show_spread(&reads, 2, "", "-"),
            met(reads.median, |m| m <= TARGET_READS_PER_TS),
        ));
        out.push(format!(
            "peak goodput ratio (on-time stamps per elapsed second, extra): {}",
            show_spread(&self.ratio(|r| r.peak_goodput), 2, "×", UNDEF)
        ));
        out.extend(self.one.lines());
        out.extend(self.four.lines());
        for (k, (a, b)) in self.one.runs.iter().zip(&self.four.runs).enumerate() {
            out.push(format!(
                "run {}: ≥ 99.9 %: 1 set {}, 4 sets {}, ratio {} | ≥ 99 %: 1 set {}, 4 sets {}, ratio {}",
                k + 1,
                show(a.capacity[0], 0, "/s"),
                show(b.capacity[0], 0, "/s"),
                show_or(figures::ratio(b.capacity[0], a.capacity[0]), 2, "×", "undefined"),
                show(a.capacity[1], 0, "/s"),
                show(b.capacity[1], 0, "/s"),
                show_or(figures::ratio(b.capacity[1], a.capacity[1]), 2, "×", "undefined"),
            ));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn step(rate: f64, on_time: u64, lost: u64, reads: f64) -> Step {
        Step {
            rate,
            sent: 10_000,
            on_time,
            late: 10_000 - on_time - lost,
            lost,
            driver_reads_per_ts: Some(reads),
            ..Step::default()
        }
    }

    fn run(caps: [(f64, u64); 3]) -> RunFigures {
        RunFigures::of(
            caps.iter()
                .map(|&(r, ok)| step(r, ok, 0, r / 1000.0))
                .collect(),
        )
    }

    #[test]
    fn compare_sets_ratios_medians_and_not_reached() {
        // 1 set: ≥ 99.9 % never reached in run 1; 4 sets reached in both runs.
        let one = TargetSummary {
            target: "1".into(),
            runs: vec![
                run([(1000.0, 9_950), (1500.0, 9_900), (2250.0, 5_000)]),
                run([(1000.0, 9_995), (1500.0, 9_950), (2250.0, 5_000)]),
            ],
        };
        let four = TargetSummary {
            target: "4".into(),
            runs: vec![
                run([(1000.0, 10_000), (1500.0, 9_995), (2250.0, 9_950)]),
                run([(1000.0, 10_000), (1500.0, 9_995), (2250.0, 9_992)]),
            ],
        };
        let c = CompareSets { one, four };
        let v = c.to_json();
        assert_eq!(
            v["one_set"]["capacity_999_per_s"]["per_run"][0],
            Value::Null
        );
        assert_eq!(v["one_set"]["capacity_999_per_s"]["per_run"][1], 1000.0);
        // Median of {not reached, 1000}: not reached.
        assert_eq!(v["one_set"]["capacity_999_per_s"]["median"], Value::Null);
        assert_eq!(v["four_sets"]["capacity_999_per_s"]["median"], 1875.0);
        // The ratio exists only in run 2 (2250 / 1000): one run of two has no median.
        assert_eq!(v["ratio_capacity_999"]["per_run"][1], 2.25);
        assert_eq!(v["ratio_capacity_999"]["median"], Value::Null);
        assert_eq!(v["ratio_capacity_999"]["reached_in_runs"], 1);
        assert_eq!(v["targets"]["ratio_capacity_999_median_met"], Value::Null);
        // ≥ 99 %: 1 set 1500 both runs, 4 sets 2250 both: 1.5×, short of the 3.5× target.
        assert_eq!(v["ratio_capacity_99"]["median"], 1.5);
        assert_eq!(v["targets"]["ratio_capacity_99_median_met"], false);
        // MMIO at the 4-set ≥ 99.9 % capacity step (1.5 and 2.25 reads): driver count.
        assert_eq!(v["targets"]["reads_per_ts_counter"], "driver");
        assert_eq!(
            v["four_sets"]["at_capacity_999"]["driver_mmio_reads_per_ts"]["median"],
            1.875
        );
        let text = c.lines().join("\n");
        assert!(text.contains("1 set not reached"), "{text}");
    }

    #[test]
    fn a_capacity_at_the_ramps_top_is_flagged_as_a_lower_bound() {
        let r = RunFigures::of(vec![
            step(1000.0, 10_000, 0, 5.0),
            step(1500.0, 9_950, 0, 4.0),
        ]);
        // ≥ 99 %: the top step (1500) — a lower bound; ≥ 99.9 %: 1000, below the top.
        assert_eq!(r.capacity, [Some(1000.0), Some(1500.0)]);
        assert!(!r.at_ramp_top(0));
        assert!(r.at_ramp_top(1));
        assert_eq!(r.to_json(1)["capacity_99_at_ramp_top"], true);
        let none = RunFigures::of(vec![step(1000.0, 5_000, 0, 5.0)]);
        assert!(!none.at_ramp_top(0));
    }

    #[test]
    fn a_lost_request_moves_the_capacity_step_down() {
        let r = RunFigures::of(vec![
            step(1000.0, 10_000, 0, 5.0),
            step(1500.0, 9_999, 1, 4.0),
        ]);
        assert_eq!(r.capacity, [Some(1000.0), Some(1000.0)]);
        assert_eq!(
            r.at_capacity(0).map(|s| s.driver_reads_per_ts),
            Some(Some(5.0))
        );
    }
}
