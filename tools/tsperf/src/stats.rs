//! Summary statistics of one ramp step.

/// Welford mean/variance plus sorted-sample percentiles.
#[derive(Debug, Default, Clone)]
pub struct Samples {
    v: Vec<f64>,
}

impl Samples {
    pub fn push(&mut self, x: f64) {
        self.v.push(x);
    }

    pub fn len(&self) -> usize {
        self.v.len()
    }

    pub fn is_empty(&self) -> bool {
        self.v.is_empty()
    }

    pub fn summary(&mut self) -> Summary {
        if self.v.is_empty() {
            return Summary::default();
        }
        self.v.sort_by(f64::total_cmp);
        let (mut mean, mut m2) = (0.0, 0.0);
        for (i, x) in self.v.iter().enumerate() {
            let d = x - mean;
            mean += d / (i + 1) as f64;
            m2 += d * (x - mean);
        }
        let n = self.v.len();
        let pct = |p: f64| self.v[(((n - 1) as f64) * p).round() as usize];
        Summary {
            n,
            min: self.v[0],
            mean,
            max: self.v[n - 1],
            stddev: if n > 1 {
                (m2 / (n - 1) as f64).sqrt()
            } else {
                0.0
            },
            p50: pct(0.5),
            p99: pct(0.99),
            p999: pct(0.999),
        }
    }
}

#[derive(Debug, Default, Clone, Copy, PartialEq)]
pub struct Summary {
    pub n: usize,
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

    #[test]
    fn summary_of_known_samples() {
        let mut s = Samples::default();
        for x in 1..=100 {
            s.push(x as f64);
        }
        let m = s.summary();
        assert_eq!((m.n, m.min, m.max, m.p50), (100, 1.0, 100.0, 51.0));
        assert!((m.mean - 50.5).abs() < 1e-9);
        assert!((m.stddev - 29.011).abs() < 1e-3);
        assert_eq!(m.p99, 99.0);
        assert_eq!(Samples::default().summary().n, 0);
    }
}
