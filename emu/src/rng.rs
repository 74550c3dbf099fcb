//! A tiny seeded PRNG for the models' noise (timestamp jitter, cable jitter and loss).
//!
//! SplitMix64 (Steele, Lea, Flood 2014; the generator Java's `SplittableRandom` and the
//! xoshiro authors use for seeding): 64 bits of state, one add and one mix per draw, good
//! enough statistics for noise and, above all, the same sequence for the same seed on every
//! platform. Not for anything cryptographic.

/// Golden-ratio increment of SplitMix64.
const GAMMA: u64 = 0x9E37_79B9_7F4A_7C15;

/// The SplitMix64 output function (a bijection on u64).
const fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A SplitMix64 generator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub const fn new(seed: u64) -> Self {
        Self { state: seed }
    }

    /// Stream `stream` of `seed`: independent generators for different consumers of one seed
    /// (TX stamps, RX stamps, a cable), so that draws by one never shift another's sequence.
    pub const fn stream(seed: u64, stream: u64) -> Self {
        Self::new(seed ^ mix(stream.wrapping_add(GAMMA)))
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(GAMMA);
        mix(self.state)
    }

    /// Uniform in `0..n` (0 when `n` is 0). Lemire's multiply-shift with rejection: unbiased.
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            return 0;
        }
        let threshold = n.wrapping_neg() % n;
        loop {
            let m = self.next_u64() as u128 * n as u128;
            if m as u64 >= threshold {
                return (m >> 64) as u64;
            }
        }
    }

    /// Uniform integer in `-bound..=bound` (0 when `bound` is 0). `bound` is capped at
    /// `i64::MAX`.
    pub fn symmetric(&mut self, bound: u64) -> i64 {
        if bound == 0 {
            return 0;
        }
        let b = bound.min(i64::MAX as u64);
        // 2b + 1 values; at b = i64::MAX that is 2^64 − 1, which fits.
        self.below(2 * b + 1) as i64 - b as i64
    }

    /// Uniform in `[0, 1)` with 53 random bits.
    pub fn unit_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// True with probability `p` (false for `p` ≤ 0 or NaN, true for `p` ≥ 1).
    pub fn chance(&mut self, p: f64) -> bool {
        // NaN compares false: never.
        if p.is_nan() || p <= 0.0 {
            return false;
        }
        self.unit_f64() < p
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reference_values() {
        // First outputs of SplitMix64 seeded with 1234567 (the reference implementation).
        let mut r = SplitMix64::new(1234567);
        assert_eq!(r.next_u64(), 6457827717110365317);
        assert_eq!(r.next_u64(), 3203168211198807973);
    }

    #[test]
    fn bounded_draws_stay_in_range() {
        let mut r = SplitMix64::new(7);
        for _ in 0..10_000 {
            assert!(r.below(10) < 10);
            assert!((-3..=3).contains(&r.symmetric(3)));
            let u = r.unit_f64();
            assert!((0.0..1.0).contains(&u));
        }
        assert_eq!(r.below(0), 0);
        assert_eq!(r.symmetric(0), 0);
        assert!(!r.chance(0.0) && !r.chance(f64::NAN) && r.chance(1.0));
        let s = r.symmetric(u64::MAX);
        assert!(s >= -i64::MAX);
    }

    #[test]
    fn symmetric_hits_both_ends() {
        let mut r = SplitMix64::new(99);
        let draws: Vec<i64> = (0..1000).map(|_| r.symmetric(2)).collect();
        for v in -2..=2 {
            assert!(draws.contains(&v), "{v} never drawn");
        }
    }

    #[test]
    fn streams_differ() {
        let a = SplitMix64::stream(5, 0).next_u64();
        let b = SplitMix64::stream(5, 1).next_u64();
        let c = SplitMix64::stream(6, 0).next_u64();
        assert!(a != b && a != c && b != c);
        assert_eq!(SplitMix64::stream(5, 1).next_u64(), b);
    }
}
