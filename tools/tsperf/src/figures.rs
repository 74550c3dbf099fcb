//! The figures tsperf reports, as pure functions of what a ramp recorded: how one request is
//! classed, a step's goodput, the capacity at a threshold, and the median and spread over runs.
//! Definitions: reference ptp-and-benchmarks §3.1–3.2 (ntpperf) and DESIGN.md §7 (classes).

use crate::step::Step;

/// How one request ended, from tsperf's point of view.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// A valid stamp delivered at most the on-time bound after the submit.
    OnTime,
    /// A valid stamp delivered after the on-time bound but within the hard timeout.
    Late,
    /// The driver had no free timestamp set: the frame went out without a stamp.
    Skipped,
    /// No stamp: the driver gave it up, nothing came, or it came after the hard timeout.
    Lost,
    /// A stamp that cannot belong to the request: latched before its submit or after its
    /// arrival (beyond `slack_ns` for the PHC → host mapping).
    Invalid,
}

/// What a request's completion said, in host monotonic ns.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Seen {
    Stamp { arrival_ns: u64, latch_ns: u64 },
    Skipped,
    Lost,
}

/// The bounds a request is classed by.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Delivered within this of the submit (inclusive) is on time: ptp4l 3.x's 1 ms.
    pub on_time_ns: u64,
    /// Delivered later than this is lost: timestamped-socket's 200 ms.
    pub hard_ns: u64,
    /// Tolerance of the latch-instant check.
    pub slack_ns: u64,
}

/// Classes one request submitted at `submit_ns`; `None` = no completion arrived at all.
pub fn classify(submit_ns: u64, seen: Option<Seen>, b: &Bounds) -> Class {
    match seen {
        None | Some(Seen::Lost) => Class::Lost,
        Some(Seen::Skipped) => Class::Skipped,
        Some(Seen::Stamp {
            arrival_ns,
            latch_ns,
        }) => {
            if latch_ns.saturating_add(b.slack_ns) < submit_ns
                || latch_ns > arrival_ns.saturating_add(b.slack_ns)
            {
                return Class::Invalid;
            }
            let took = arrival_ns.saturating_sub(submit_ns);
            if took <= b.on_time_ns {
                Class::OnTime
            } else if took <= b.hard_ns {
                Class::Late
            } else {
                Class::Lost
            }
        }
    }
}

/// Stamps delivered on time per second of the time the step really took (its first submit to
/// the latest of its schedule's end, its last submit and its last on-time delivery), never the
/// requested rate times a fraction: a sender that needed 2 s for 1 s of requests halves it.
pub fn goodput(on_time: u64, elapsed_ns: u64) -> Option<f64> {
    (elapsed_ns > 0).then(|| on_time as f64 * 1e9 / elapsed_ns as f64)
}

/// Whether a step counts towards the capacity at `pct` % (see [`capacity_at`]).
pub fn meets(s: &Step, pct: f64) -> bool {
    s.sent > 0 && !s.sender_behind && s.lost == 0 && s.pct(s.on_time) >= pct
}

/// The capacity at `pct` % on time, ntpperf's summary figure: the highest offered rate among
/// the steps that
/// - delivered at least `pct` % of their requests' stamps on time (late, skipped and invalid
///   ones count against it),
/// - lost none (one lost request disqualifies a step, whatever its on-time share), and
/// - whose sender kept the rate.
///
/// It is the HIGHEST such step, not the first: ntpperf's summary is "the highest rate with
/// ≥ 99.9 % on time and 0 lost" (reference ptp-and-benchmarks §3.2), so a step missed because
/// of one scheduling stall does not hide a higher step that met the bound. `None` when no step
/// met it: the capacity was "not reached" (below the ramp's start).
pub fn capacity_at(steps: &[Step], pct: f64) -> Option<f64> {
    capacity_step(steps, pct).map(|s| s.rate)
}

/// The step [`capacity_at`] takes its rate from.
pub fn capacity_step(steps: &[Step], pct: f64) -> Option<&Step> {
    steps
        .iter()
        .filter(|s| meets(s, pct))
        .max_by(|a, b| a.rate.total_cmp(&b.rate))
}

/// The highest goodput of any step (stamps on time per elapsed second).
pub fn peak_goodput(steps: &[Step]) -> Option<f64> {
    steps
        .iter()
        .filter_map(|s| s.goodput_per_s)
        .max_by(f64::total_cmp)
}

/// `a / b` when both exist and `b > 0`.
pub fn ratio(a: Option<f64>, b: Option<f64>) -> Option<f64> {
    match (a, b) {
        (Some(a), Some(b)) if b > 0.0 => Some(a / b),
        _ => None,
    }
}

/// One figure over several runs: its median and its range.
#[derive(Debug, Clone, PartialEq)]
pub struct Spread {
    /// The per-run values, in run order (`None` = not reached in that run).
    pub runs: Vec<Option<f64>>,
    pub median: Option<f64>,
    pub min: Option<f64>,
    pub max: Option<f64>,
    /// Runs in which the figure had a value.
    pub reached_in: usize,
}

impl Spread {
    /// "Not reached" ranks below every value (a capacity not reached is below the ramp's
    /// start). The median is the middle value of the ranked runs, or the mean of the two middle
    /// ones for an even count — "not reached" when either of those is: a figure reached in only
    /// half the runs has no median.
    pub fn of(runs: &[Option<f64>]) -> Self {
        let mut v: Vec<Option<f64>> = runs.to_vec();
        // None < Some(x); values by total order.
        v.sort_by(|a, b| match (a, b) {
            (None, None) => std::cmp::Ordering::Equal,
            (None, Some(_)) => std::cmp::Ordering::Less,
            (Some(_), None) => std::cmp::Ordering::Greater,
            (Some(a), Some(b)) => a.total_cmp(b),
        });
        let n = v.len();
        let median = match n {
            0 => None,
            _ if n % 2 == 1 => v[n / 2],
            _ => match (v[n / 2 - 1], v[n / 2]) {
                (Some(a), Some(b)) => Some((a + b) / 2.0),
                _ => None,
            },
        };
        Self {
            runs: runs.to_vec(),
            median,
            min: v.first().copied().flatten(),
            max: v.last().copied().flatten(),
            reached_in: runs.iter().filter(|r| r.is_some()).count(),
        }
    }

    /// The same over only the runs where the figure exists (ratios, and figures of a capacity
    /// step, are undefined — not low — in a run whose capacity was not reached). The median
    /// exists only when the figure does in more than half of the runs, as for [`Self::of`].
    pub fn of_defined(runs: &[Option<f64>]) -> Self {
        let defined: Vec<Option<f64>> = runs.iter().copied().filter(Option::is_some).collect();
        let s = Self::of(&defined);
        Self {
            runs: runs.to_vec(),
            median: s.median.filter(|_| 2 * defined.len() > runs.len()),
            ..s
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({
            "per_run": self.runs, "median": self.median, "min": self.min, "max": self.max,
            "reached_in_runs": self.reached_in, "runs": self.runs.len(),
        })
    }
}

/// A figure for people: the value with `unit`, or "not reached".
pub fn show(v: Option<f64>, decimals: usize, unit: &str) -> String {
    show_or(v, decimals, unit, "not reached")
}

/// A figure for people: the value with `unit`, or `none`.
pub fn show_or(v: Option<f64>, decimals: usize, unit: &str, none: &str) -> String {
    v.map(|v| format!("{v:.decimals$}{unit}"))
        .unwrap_or_else(|| none.into())
}

/// "median (range min – max, reached in k/N runs)" for people; `none` stands for a missing value.
pub fn show_spread(s: &Spread, decimals: usize, unit: &str, none: &str) -> String {
    let f = |v| show_or(v, decimals, unit, none);
    if s.runs.len() <= 1 {
        return f(s.median);
    }
    if s.reached_in == 0 {
        return format!("{none} (all {} runs)", s.runs.len());
    }
    format!(
        "{} (range {} – {}, in {}/{} runs)",
        f(s.median),
        f(s.min),
        f(s.max),
        s.reached_in,
        s.runs.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const B: Bounds = Bounds {
        on_time_ns: 1_000_000,
        hard_ns: 200_000_000,
        slack_ns: 20_000,
    };

    fn stamp(arrival_ns: u64, latch_ns: u64) -> Option<Seen> {
        Some(Seen::Stamp {
            arrival_ns,
            latch_ns,
        })
    }

    #[test]
    fn on_time_bound_is_inclusive_and_late_and_lost_follow() {
        let s = 10_000_000;
        assert_eq!(classify(s, stamp(s + 1_000_000, s + 10), &B), Class::OnTime);
        assert_eq!(classify(s, stamp(s + 1_000_001, s + 10), &B), Class::Late);
        assert_eq!(classify(s, stamp(s + 200_000_000, s + 10), &B), Class::Late);
        assert_eq!(classify(s, stamp(s + 200_000_001, s + 10), &B), Class::Lost);
        assert_eq!(classify(s, None, &B), Class::Lost);
        assert_eq!(classify(s, Some(Seen::Lost), &B), Class::Lost);
        assert_eq!(classify(s, Some(Seen::Skipped), &B), Class::Skipped);
    }

    #[test]
    fn a_stamp_outside_submit_to_arrival_is_invalid() {
        let s = 10_000_000;
        // Latched before the request was made (beyond the slack).
        assert_eq!(classify(s, stamp(s + 50, s - 20_001), &B), Class::Invalid);
        assert_eq!(classify(s, stamp(s + 50, s - 20_000), &B), Class::OnTime);
        // Latched after it was delivered.
        assert_eq!(
            classify(s, stamp(s + 50, s + 50 + 20_001), &B),
            Class::Invalid
        );
        // A zero (unmapped) stamp is invalid.
        assert_eq!(classify(s, stamp(s + 50, 0), &B), Class::Invalid);
    }

    fn step(rate: f64, sent: u64, on_time: u64, lost: u64) -> Step {
        Step {
            rate,
            sent,
            on_time,
            late: sent - on_time - lost,
            lost,
            ..Step::default()
        }
    }

    #[test]
    fn capacity_is_the_highest_step_meeting_the_bound_not_the_first() {
        // 99.95 %, 99.85 %, 99.95 % on time: the third step (the highest meeting) counts.
        let steps = [
            step(1000.0, 20_000, 19_990, 0),
            step(1500.0, 20_000, 19_970, 0),
            step(2250.0, 20_000, 19_990, 0),
            step(3375.0, 20_000, 10_000, 0),
        ];
        assert_eq!(capacity_at(&steps, 99.9), Some(2250.0));
        // At 99 % the step at 3375/s (50 %) still does not count.
        assert_eq!(capacity_at(&steps, 99.0), Some(2250.0));
        assert_eq!(capacity_at(&steps, 99.96), None);
    }

    #[test]
    fn one_lost_request_disqualifies_a_step() {
        // 99.995 % on time but one lost: never counts, at any threshold.
        let steps = [step(1000.0, 20_000, 19_999, 1)];
        assert_eq!(capacity_at(&steps, 99.9), None);
        assert_eq!(capacity_at(&steps, 50.0), None);
        let steps = [
            step(1000.0, 20_000, 19_999, 0),
            step(1500.0, 20_000, 19_999, 1),
        ];
        assert_eq!(capacity_at(&steps, 99.9), Some(1000.0));
    }

    #[test]
    fn a_step_whose_sender_fell_behind_or_sent_nothing_does_not_count() {
        let mut s = step(5000.0, 20_000, 20_000, 0);
        s.sender_behind = true;
        assert_eq!(capacity_at(&[s], 99.0), None);
        assert_eq!(capacity_at(&[step(5000.0, 0, 0, 0)], 0.0), None);
        assert_eq!(capacity_at(&[], 99.9), None);
    }

    #[test]
    fn skipped_and_invalid_count_against_on_time() {
        let mut s = step(1000.0, 10_000, 9_985, 0);
        s.late = 0;
        s.skipped = 10;
        s.invalid = 5;
        // 99.85 %: misses 99.9, meets 99.
        assert_eq!(capacity_at(std::slice::from_ref(&s), 99.9), None);
        assert_eq!(capacity_at(&[s], 99.0), Some(1000.0));
    }

    #[test]
    fn goodput_is_per_elapsed_second() {
        assert_eq!(goodput(1000, 1_000_000_000), Some(1000.0));
        // 1 s of requests that took 2 s: half.
        assert_eq!(goodput(1000, 2_000_000_000), Some(500.0));
        assert_eq!(goodput(0, 1_000_000_000), Some(0.0));
        assert_eq!(goodput(10, 0), None);
        let mut a = step(1000.0, 1000, 1000, 0);
        a.goodput_per_s = goodput(1000, 2_000_000_000);
        let mut b = step(700.0, 700, 700, 0);
        b.goodput_per_s = goodput(700, 1_000_000_000);
        assert_eq!(peak_goodput(&[a, b]), Some(700.0));
        assert_eq!(peak_goodput(&[]), None);
    }

    #[test]
    fn median_and_range_over_runs() {
        let s = Spread::of(&[Some(3.0), Some(1.0), Some(2.0)]);
        assert_eq!(
            (s.median, s.min, s.max, s.reached_in),
            (Some(2.0), Some(1.0), Some(3.0), 3)
        );
        let s = Spread::of(&[Some(4.0), Some(1.0), Some(2.0), Some(10.0)]);
        assert_eq!((s.median, s.min, s.max), (Some(3.0), Some(1.0), Some(10.0)));
        // Not reached ranks lowest.
        let s = Spread::of(&[None, Some(5.0), Some(7.0)]);
        assert_eq!(
            (s.median, s.min, s.max, s.reached_in),
            (Some(5.0), None, Some(7.0), 2)
        );
        let s = Spread::of(&[None, Some(5.0)]);
        assert_eq!((s.median, s.min, s.max), (None, None, Some(5.0)));
        let s = Spread::of(&[None, None, Some(5.0)]);
        assert_eq!(s.median, None);
        assert_eq!(Spread::of(&[]).median, None);
        // Ratios: only the runs where both capacities existed.
        let s = Spread::of_defined(&[None, Some(4.0), Some(3.0)]);
        assert_eq!((s.median, s.min, s.max), (Some(3.5), Some(3.0), Some(4.0)));
        assert_eq!(s.runs, vec![None, Some(4.0), Some(3.0)]);
        assert_eq!(s.reached_in, 2);
        // Defined in only half the runs: no median, the range still shows.
        let s = Spread::of_defined(&[None, Some(4.0)]);
        assert_eq!((s.median, s.min, s.max), (None, Some(4.0), Some(4.0)));
    }

    #[test]
    fn ratio_and_display_say_not_reached() {
        assert_eq!(ratio(Some(8.0), Some(2.0)), Some(4.0));
        assert_eq!(ratio(Some(8.0), None), None);
        assert_eq!(ratio(Some(8.0), Some(0.0)), None);
        assert_eq!(show(None, 0, "/s"), "not reached");
        assert_eq!(show(Some(1234.4), 0, "/s"), "1234/s");
    }
}
