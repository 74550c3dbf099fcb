//! How the VM tests judge a lock on ground truth, written once: sample the models' true offset
//! (and whether the slave follows the expected master) every [`LockRule::every`]; locked once
//! [`LockRule::samples`] samples in a row are within [`LockRule::bound_ns`] and following; then
//! [`LockRule::after`] samples more must all stay inside, and the slave must still follow at
//! the end. Whether it follows can be costly to ask (pmc or ptpctl in a guest), so the sampler
//! is told when to ask: every sample until the lock, once at the end.

use std::time::{Duration, Instant};

/// The rule: bound, run length, sampling period, deadline, samples after the lock.
#[derive(Debug, Clone, Copy)]
pub struct LockRule {
    pub bound_ns: i64,
    pub samples: usize,
    pub every: Duration,
    pub within: Duration,
    pub after: usize,
}

impl LockRule {
    /// The VM tests' rule: 20 samples in a row within 1 µs, 4 per second, then 10 s more.
    pub fn vm(within: Duration) -> Self {
        Self {
            bound_ns: 1_000,
            samples: 20,
            every: Duration::from_millis(250),
            within,
            after: 40,
        }
    }
}

/// A lock and the true offsets after it.
#[derive(Debug, Clone)]
pub struct LockFigures {
    /// Seconds from the start of [`LockRule::judge`] to the lock.
    pub lock_s: f64,
    /// The [`LockRule::after`] true offsets after the lock, ns.
    pub after: Vec<i64>,
    pub mean_ns: f64,
    pub rms_ns: f64,
    pub max_abs_ns: i64,
}

/// Why there is no lock.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum LockError {
    /// No run of in-bound, following samples long enough before the deadline.
    #[error("no lock within {within:?}: last (true offset ns, following) {last:?}")]
    NoLock {
        within: Duration,
        last: Vec<(i64, bool)>,
    },
    /// Locked, then a sample after it left the bound or the slave left its master.
    #[error("lost the lock: {after:?} (still following: {following})")]
    Lost { after: Vec<i64>, following: bool },
}

impl LockRule {
    /// Samples `sample(ask)` → (true offset ns, following) until locked, then judges the
    /// samples after the lock. With `ask` false the sampler need not find out whether the
    /// slave follows (its answer is ignored).
    pub fn judge(
        &self,
        mut sample: impl FnMut(bool) -> (i64, bool),
    ) -> Result<LockFigures, LockError> {
        let start = Instant::now();
        let (mut run, mut last) = (0, Vec::new());
        while run < self.samples {
            if start.elapsed() > self.within {
                return Err(LockError::NoLock {
                    within: self.within,
                    last,
                });
            }
            std::thread::sleep(self.every);
            let (off, following) = sample(true);
            run = if following && off.abs() <= self.bound_ns {
                run + 1
            } else {
                0
            };
            last.push((off, following));
            if last.len() > 12 {
                last.remove(0);
            }
        }
        let lock_s = start.elapsed().as_secs_f64();
        let mut after = Vec::with_capacity(self.after);
        for _ in 0..self.after {
            std::thread::sleep(self.every);
            after.push(sample(false).0);
        }
        let following = sample(true).1;
        let max_abs_ns = after.iter().map(|o| o.abs()).max().unwrap_or(0);
        if max_abs_ns > self.bound_ns || !following {
            return Err(LockError::Lost { after, following });
        }
        let n = after.len().max(1) as f64;
        let mean_ns = after.iter().sum::<i64>() as f64 / n;
        let rms_ns = (after.iter().map(|&o| (o as f64).powi(2)).sum::<f64>() / n).sqrt();
        Ok(LockFigures {
            lock_s,
            after,
            mean_ns,
            rms_ns,
            max_abs_ns,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rule() -> LockRule {
        LockRule {
            bound_ns: 10,
            samples: 3,
            every: Duration::ZERO,
            within: Duration::from_secs(5),
            after: 4,
        }
    }

    /// Hands out `v` in order (after the lock the following flag is only read when asked).
    fn feed(v: Vec<(i64, bool)>) -> impl FnMut(bool) -> (i64, bool) {
        let mut it = v.into_iter();
        move |_| it.next().unwrap_or((1_000_000, false))
    }

    #[test]
    fn a_run_of_in_bound_following_samples_locks_and_the_after_samples_are_judged() {
        let s = [
            (50, true),
            (5, true),
            (5, false),
            (1, true),
            (-2, true),
            (3, true),
        ];
        let after = [(4, false), (-4, true), (0, true), (2, true), (0, true)];
        let f = rule().judge(feed([&s[..], &after[..]].concat())).unwrap();
        assert_eq!(f.after, vec![4, -4, 0, 2]);
        assert_eq!(f.max_abs_ns, 4);
        assert!((f.mean_ns - 0.5).abs() < 1e-9);
        assert!((f.rms_ns - 3.0).abs() < 1e-9);
    }

    #[test]
    fn a_sample_out_of_bound_or_not_following_after_the_lock_is_a_lost_lock() {
        let lock = vec![(0, true); 3];
        let out = rule().judge(feed(
            [
                lock.clone(),
                vec![(0, true), (11, true), (0, true), (0, true), (0, true)],
            ]
            .concat(),
        ));
        assert!(
            matches!(
                out,
                Err(LockError::Lost {
                    following: true,
                    ..
                })
            ),
            "{out:?}"
        );
        let left = rule().judge(feed([lock, vec![(0, true); 4], vec![(0, false)]].concat()));
        assert!(
            matches!(
                left,
                Err(LockError::Lost {
                    following: false,
                    ..
                })
            ),
            "{left:?}"
        );
    }

    #[test]
    fn no_run_long_enough_before_the_deadline_is_no_lock() {
        let r = LockRule {
            within: Duration::from_millis(20),
            every: Duration::from_millis(1),
            ..rule()
        };
        let out = r.judge(|_| (0, false));
        assert!(matches!(out, Err(LockError::NoLock { .. })), "{out:?}");
    }
}
