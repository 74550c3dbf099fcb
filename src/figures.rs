//! The lab's figures: lock time, rms and max offset, computed the same way from two sources —
//! the TRUE offset (exact, from the emulated PHCs' published laws, `ptp_emu::truth`) and the
//! servo's own estimate (statime's offset_from_master) — so the two can be shown side by side.

use ptp_ipc::{ClockStatus, PortState};
use serde_json::{Value, json};

/// A slave is locked once its offset stays within ±this, in ns, for the rest of the run.
pub const LOCK_NS: i64 = 100;

/// One sample of one host.
#[derive(Debug, Clone, Default)]
pub struct Sample {
    /// Seconds since the lab started (monotonic).
    pub t: f64,
    /// The host's status as ptpd reports it (the servo's view).
    pub status: ClockStatus,
    /// PHC(host) − PHC(its PTP parent) at one instant, exact; `None` when the parent is not
    /// running or its record could not be read.
    pub true_offset_ns: Option<i64>,
    /// PHC(host) − PHC(grandmaster), exact; `None` as above or when the grandmaster is not a
    /// lab host.
    pub true_gm_offset_ns: Option<i64>,
}

/// Which offset a figure is computed from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Source {
    /// The exact offset from the truth records, against the PTP parent.
    True,
    /// The servo's estimate (offset_from_master).
    Servo,
}

/// One point of an offset series: `None` when the host was not SLAVE (never locked then).
pub type Point = (f64, Option<i64>);

/// The series a figure is computed from. A sample where the host was SLAVE but the truth could
/// not be read is left out (nothing is known about it); a non-SLAVE sample counts as unlocked.
pub fn series(points: &[Sample], src: Source) -> Vec<Point> {
    points
        .iter()
        .filter_map(|p| {
            if p.status.port_state != PortState::Slave {
                return Some((p.t, None));
            }
            match src {
                Source::True => p.true_offset_ns.map(|o| (p.t, Some(o))),
                Source::Servo => Some((p.t, Some(p.status.offset_ns))),
            }
        })
        .collect()
}

/// When the series came within ±[`LOCK_NS`] and stayed there to its end: the time of the first
/// sample of that final run of locked samples. `None` if the last sample is not locked.
pub fn lock_time(s: &[Point]) -> Option<f64> {
    let locked = |p: &Point| p.1.is_some_and(|o| o.abs() <= LOCK_NS);
    if !s.last().is_some_and(locked) {
        return None;
    }
    match s.iter().rposition(|p| !locked(p)) {
        Some(k) => s.get(k + 1).map(|p| p.0),
        None => s.first().map(|p| p.0),
    }
}

/// Summary statistics of an offset series.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct OffsetStats {
    pub n: usize,
    pub mean_ns: f64,
    /// Sample standard deviation (0 for one sample).
    pub sd_ns: f64,
    pub rms_ns: f64,
    pub max_abs_ns: i64,
}

/// Standard error of the mean of an autocorrelated series, by batch means: a locked servo's
/// offset wanders slowly, so neighbouring samples are not independent and σ/√N would understate
/// the uncertainty. The means of `batches` contiguous batches are close to independent when a
/// batch is longer than the wander's correlation time (a few sync intervals in the lab), so
/// SE = sd(batch means)/√B. `None` with fewer than 2 batches or 2 samples per batch.
pub fn batch_se(v: &[i64], batches: usize) -> Option<f64> {
    let len = v.len().checked_div(batches)?;
    if len < 2 || batches < 2 {
        return None;
    }
    let means: Vec<i64> = v
        .chunks_exact(len)
        .take(batches)
        .map(|c| (c.iter().sum::<i64>() as f64 / c.len() as f64).round() as i64)
        .collect();
    Some(OffsetStats::of(&means)?.sd_ns / (batches as f64).sqrt())
}

impl OffsetStats {
    /// Statistics of `v`; `None` if empty.
    pub fn of(v: &[i64]) -> Option<Self> {
        if v.is_empty() {
            return None;
        }
        let n = v.len() as f64;
        let mean = v.iter().map(|&x| x as f64).sum::<f64>() / n;
        let ss = v.iter().map(|&x| (x as f64 - mean).powi(2)).sum::<f64>();
        Some(Self {
            n: v.len(),
            mean_ns: mean,
            sd_ns: if v.len() > 1 {
                (ss / (n - 1.0)).sqrt()
            } else {
                0.0
            },
            rms_ns: (v.iter().map(|&x| (x as f64).powi(2)).sum::<f64>() / n).sqrt(),
            max_abs_ns: v.iter().map(|x| x.abs()).max().unwrap_or(0),
        })
    }

    fn json(&self) -> Value {
        json!({"n": self.n, "mean_ns": self.mean_ns, "sd_ns": self.sd_ns, "rms_ns": self.rms_ns,
            "max_abs_ns": self.max_abs_ns})
    }
}

/// Statistics of the samples from `t0` on; `None` if there are none or the host was not SLAVE
/// at one of them.
pub fn since(s: &[Point], t0: f64) -> Option<OffsetStats> {
    let v: Option<Vec<i64>> = s.iter().filter(|p| p.0 >= t0).map(|p| p.1).collect();
    OffsetStats::of(&v?)
}

/// Lock time and the statistics after lock and over the second half of a run.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Figures {
    pub lock_time_s: Option<f64>,
    pub after_lock: Option<OffsetStats>,
    pub second_half: Option<OffsetStats>,
}

impl Figures {
    /// The figures of `points` from `src`, for a run that lasted `duration_s`.
    pub fn of(points: &[Sample], src: Source, duration_s: f64) -> Self {
        let s = series(points, src);
        let lock = lock_time(&s);
        Self {
            lock_time_s: lock,
            after_lock: lock.and_then(|t| since(&s, t)),
            second_half: since(&s, duration_s / 2.0),
        }
    }

    /// JSON fields named `<prefix>_lock_time_s`, `<prefix>_rms_ns`, ... .
    pub fn json_fields(&self, prefix: &str, out: &mut serde_json::Map<String, Value>) {
        let f = |k: &str| format!("{prefix}_{k}");
        let a = self.after_lock;
        let h = self.second_half;
        out.insert(f("lock_time_s"), json!(self.lock_time_s));
        out.insert(f("rms_ns"), json!(a.map(|s| s.rms_ns)));
        out.insert(f("max_abs_ns"), json!(a.map(|s| s.max_abs_ns)));
        out.insert(f("rms_second_half_ns"), json!(h.map(|s| s.rms_ns)));
        out.insert(f("max_abs_second_half_ns"), json!(h.map(|s| s.max_abs_ns)));
        out.insert(f("after_lock"), json!(a.map(|s| s.json())));
        out.insert(f("second_half"), json!(h.map(|s| s.json())));
    }

    /// One line for the human summary.
    pub fn describe(&self) -> String {
        let st = |s: Option<OffsetStats>| {
            s.map_or("—".to_string(), |s| {
                format!("rms {:.1} ns, max {} ns", s.rms_ns, s.max_abs_ns)
            })
        };
        format!(
            "{}; after lock {}; second half {}",
            self.lock_time_s
                .map_or("not locked".to_string(), |t| format!("locked at {t:.1} s")),
            st(self.after_lock),
            st(self.second_half)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batch_se_is_the_spread_of_batch_means() {
        // Batches of 2 with means 0, 10, 20, 30: sd = 12.91, SE = sd / 2.
        let v = [-1, 1, 9, 11, 19, 21, 29, 31];
        let se = batch_se(&v, 4).unwrap();
        assert!((se - 12.909_944 / 2.0).abs() < 1e-3, "{se}");
        // Within-batch noise does not count, a trend between batches does.
        assert_eq!(batch_se(&[5, -5, 5, -5, 5, -5], 3), Some(0.0));
        assert_eq!(batch_se(&[1, 2, 3], 2), None);
        assert_eq!(batch_se(&[1, 2, 3, 4], 0), None);
    }

    fn slave(t: f64, servo: i64, truth: Option<i64>) -> Sample {
        Sample {
            t,
            status: ClockStatus {
                port_state: PortState::Slave,
                offset_ns: servo,
                ..ClockStatus::default()
            },
            true_offset_ns: truth,
            true_gm_offset_ns: truth,
        }
    }

    fn other(t: f64, state: PortState) -> Sample {
        Sample {
            t,
            status: ClockStatus {
                port_state: state,
                ..ClockStatus::default()
            },
            ..Sample::default()
        }
    }

    #[test]
    fn a_late_dip_moves_the_lock_time_after_it() {
        let mut p: Vec<Sample> = (0..50).map(|k| slave(k as f64, 0, Some(20))).collect();
        p[40].true_offset_ns = Some(-101);
        let f = Figures::of(&p, Source::True, 50.0);
        assert_eq!(f.lock_time_s, Some(41.0));
        let a = f.after_lock.unwrap();
        assert_eq!((a.n, a.max_abs_ns), (9, 20));
        // The dip counts in the second half's figures.
        assert_eq!(f.second_half.unwrap().max_abs_ns, 101);
        // Exactly ±100 ns is locked.
        p[40].true_offset_ns = Some(100);
        assert_eq!(Figures::of(&p, Source::True, 50.0).lock_time_s, Some(0.0));
    }

    #[test]
    fn an_estimate_that_says_locked_while_the_truth_is_300_ns_off_is_not_locked() {
        let p: Vec<Sample> = (0..20).map(|k| slave(k as f64, 3, Some(300))).collect();
        let servo = Figures::of(&p, Source::Servo, 20.0);
        let truth = Figures::of(&p, Source::True, 20.0);
        assert_eq!(servo.lock_time_s, Some(0.0));
        assert_eq!(servo.after_lock.unwrap().rms_ns, 3.0);
        assert_eq!(truth.lock_time_s, None);
        assert_eq!(truth.after_lock, None);
        let h = truth.second_half.unwrap();
        assert_eq!((h.n, h.rms_ns, h.max_abs_ns), (10, 300.0, 300));
    }

    #[test]
    fn not_slave_is_not_locked_and_unknown_truth_is_skipped() {
        let mut p = vec![other(0.0, PortState::Listening)];
        p.extend((1..10).map(|k| slave(k as f64, 0, Some(5))));
        p.push(other(10.0, PortState::Master));
        assert_eq!(lock_time(&series(&p, Source::True)), None);
        assert_eq!(since(&series(&p, Source::True), 5.0), None);
        p.pop();
        // A sample without truth says nothing: neither locked nor unlocked.
        p[3].true_offset_ns = None;
        let s = series(&p, Source::True);
        assert_eq!(s.len(), 9);
        assert_eq!(lock_time(&s), Some(1.0));
        assert_eq!(lock_time(&[]), None);
    }

    #[test]
    fn rms_max_mean_and_sd_are_the_textbook_ones() {
        let s = OffsetStats::of(&[3, -4, 3, -4]).unwrap();
        assert_eq!(s.max_abs_ns, 4);
        assert_eq!(s.mean_ns, -0.5);
        assert!((s.rms_ns - 12.5f64.sqrt()).abs() < 1e-12);
        assert!((s.sd_ns - (49.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert_eq!(OffsetStats::of(&[7]).unwrap().sd_ns, 0.0);
        assert_eq!(OffsetStats::of(&[]), None);
    }
}
