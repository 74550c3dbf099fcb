//! Latency distributions of one ramp step, in an HDR histogram: memory is fixed by the value
//! range and precision, not by the number of samples, so p99.9 at 400 000 requests/s costs the
//! same as at 1 000/s.

use hdrhistogram::Histogram;

/// Highest latency recorded exactly (60 s); anything above is clamped to it.
const MAX_NS: u64 = 60_000_000_000;
/// Significant decimal digits kept: every percentile is within 0.1 % of the true sample.
const SIGFIG: u8 = 3;

/// Latency samples in nanoseconds.
#[derive(Debug, Clone)]
pub struct Latency {
    h: Histogram<u64>,
}

impl Default for Latency {
    fn default() -> Self {
        Self {
            // Constant, valid bounds (1 ≤ low, high ≥ 2·low, sigfig ≤ 5): creation cannot fail.
            h: Histogram::new_with_bounds(1, MAX_NS, SIGFIG).expect("valid histogram bounds"),
        }
    }
}

impl Latency {
    pub fn record_ns(&mut self, ns: u64) {
        // The histogram's lowest trackable value is 1 ns; a zero latency is recorded as 1 ns.
        self.h.saturating_record(ns.max(1));
    }

    pub fn len(&self) -> u64 {
        self.h.len()
    }

    pub fn is_empty(&self) -> bool {
        self.h.is_empty()
    }

    /// The value at quantile `q` (0..=1), ns; 0 when empty.
    pub fn quantile_ns(&self, q: f64) -> u64 {
        if self.h.is_empty() {
            0
        } else {
            self.h.value_at_quantile(q)
        }
    }

    /// min/mean/max/stddev and p50/p99/p99.9, in µs.
    pub fn summary(&self) -> Summary {
        if self.h.is_empty() {
            return Summary::default();
        }
        let us = |ns: u64| ns as f64 / 1e3;
        Summary {
            n: self.h.len(),
            min: us(self.h.min()),
            mean: self.h.mean() / 1e3,
            max: us(self.h.max()),
            stddev: self.h.stdev() / 1e3,
            p50: us(self.h.value_at_quantile(0.5)),
            p99: us(self.h.value_at_quantile(0.99)),
            p999: us(self.h.value_at_quantile(0.999)),
        }
    }
}

/// A latency distribution's summary, µs.
#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: u64,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    pub stddev: f64,
    pub p50: f64,
    pub p99: f64,
    pub p999: f64,
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Within the histogram's precision (3 significant digits).
    fn close(a: f64, b: f64) -> bool {
        (a - b).abs() <= b.abs() * 1e-3 + 1e-9
    }

    #[test]
    fn percentiles_of_a_known_distribution() {
        // 1..=1000 µs, one sample each: p50 = 500, p99 = 990, p99.9 = 999 µs.
        let mut l = Latency::default();
        for us in 1..=1000u64 {
            l.record_ns(us * 1000);
        }
        let s = l.summary();
        assert_eq!(s.n, 1000);
        assert!(close(s.min, 1.0) && close(s.max, 1000.0), "{s:?}");
        assert!(close(s.mean, 500.5), "{s:?}");
        assert!(close(s.p50, 500.0), "{s:?}");
        assert!(close(s.p99, 990.0), "{s:?}");
        assert!(close(s.p999, 999.0), "{s:?}");
        // Population stddev of 1..=1000 is 288.67.
        assert!((s.stddev - 288.67).abs() < 0.5, "{s:?}");
    }

    #[test]
    fn a_rare_tail_shows_in_p999_not_in_p99() {
        let mut l = Latency::default();
        for _ in 0..9_980 {
            l.record_ns(50_000);
        }
        for _ in 0..20 {
            l.record_ns(5_000_000);
        }
        let s = l.summary();
        assert!(close(s.p99, 50.0), "{s:?}");
        assert!(close(s.p999, 5000.0), "{s:?}");
    }

    #[test]
    fn empty_and_out_of_range_samples() {
        assert_eq!(Latency::default().summary(), Summary::default());
        let mut l = Latency::default();
        l.record_ns(0);
        l.record_ns(u64::MAX);
        let s = l.summary();
        assert_eq!(s.n, 2);
        assert!(close(s.max, MAX_NS as f64 / 1e3), "{s:?}");
    }
}
