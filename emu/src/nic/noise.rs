//! Timestamp noise: jitter and quantisation of the TX and RX stamps the model latches
//! ([`I225Config::stamp_jitter_ns`](super::I225Config::stamp_jitter_ns),
//! [`I225Config::stamp_quantum_ns`](super::I225Config::stamp_quantum_ns)).
//!
//! A latched stamp is the exact value (PHC(departure) − TX latency, PHC(arrival) + RX latency)
//! plus a uniform integer draw from −jitter..=+jitter ns, then truncated down to a multiple of
//! the quantum, as a counter advancing in steps of the quantum would show it. Truncation
//! biases stamps by −(quantum − 1)/2 ns on average (a real part's bias too; in a PTP exchange
//! it mostly cancels between the two ends). \[assumption\] The grid is aligned to SYSTIM 0, in
//! SYSTIM nanoseconds, also after software sets or adjusts SYSTIM. Jitter wraps on the
//! family's SYSTIM circle (2^32 s for s:ns parts, 2^40 ns on i350, 2^45 ns on 82576).
//!
//! TX and RX draw from separate [`SplitMix64`] streams of [`I225Config::seed`](super::I225Config::seed),
//! so the noise on one direction does not depend on how much traffic the other carried. With
//! both knobs 0 (the default) stamps are exact and nothing is drawn.

use crate::phc::TimeFormat;
use crate::rng::SplitMix64;

/// Stream ids of the two directions (see [`SplitMix64::stream`]).
const TX_STREAM: u64 = 0x7E57_0001;
const RX_STREAM: u64 = 0x7E57_0002;

/// The noise applied to latched stamps.
#[derive(Debug, Clone)]
pub(crate) struct StampNoise {
    quantum_ns: u32,
    jitter_ns: u32,
    /// The SYSTIM circle the stamps live on.
    format: TimeFormat,
    tx: SplitMix64,
    rx: SplitMix64,
}

impl StampNoise {
    /// Noise on the i225 circle (2^32 s).
    pub(crate) fn new(quantum_ns: u32, jitter_ns: u32, seed: u64) -> Self {
        Self::with_format(TimeFormat::Igc, quantum_ns, jitter_ns, seed)
    }

    /// Noise on `format`'s circle.
    pub(crate) fn with_format(
        format: TimeFormat,
        quantum_ns: u32,
        jitter_ns: u32,
        seed: u64,
    ) -> Self {
        Self {
            quantum_ns,
            jitter_ns,
            format,
            tx: SplitMix64::stream(seed, TX_STREAM),
            rx: SplitMix64::stream(seed, RX_STREAM),
        }
    }

    /// A TX stamp as latched, from its exact value (PHC ns).
    pub(crate) fn tx(&mut self, exact_ns: u64) -> u64 {
        Self::apply(
            exact_ns,
            self.quantum_ns,
            self.jitter_ns,
            self.format,
            &mut self.tx,
        )
    }

    /// An RX stamp as written to the buffer header, from its exact value (PHC ns).
    pub(crate) fn rx(&mut self, exact_ns: u64) -> u64 {
        Self::apply(
            exact_ns,
            self.quantum_ns,
            self.jitter_ns,
            self.format,
            &mut self.rx,
        )
    }

    fn apply(exact_ns: u64, quantum: u32, jitter: u32, f: TimeFormat, rng: &mut SplitMix64) -> u64 {
        let ns = if jitter == 0 {
            exact_ns
        } else {
            f.add_ns(exact_ns, rng.symmetric(jitter.into()))
        };
        match quantum {
            0 | 1 => ns,
            q => ns - ns % u64::from(q),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_by_default() {
        let mut n = StampNoise::new(0, 0, 1);
        for ns in [0, 1, 7, 999_999_999, 1_234_567_891] {
            assert_eq!((n.tx(ns), n.rx(ns)), (ns, ns));
        }
        let mut one = StampNoise::new(1, 0, 1);
        assert_eq!(one.tx(12_345), 12_345);
    }

    #[test]
    fn quantisation_truncates_down_to_multiples() {
        let mut n = StampNoise::new(8, 0, 1);
        for ns in 0..100u64 {
            let t = n.tx(ns);
            assert_eq!(t % 8, 0);
            assert!(t <= ns && ns - t < 8, "{ns} -> {t}");
            assert_eq!(n.rx(ns), t);
        }
        assert_eq!(n.tx(1_000_000_015), 1_000_000_008);
        let mut odd = StampNoise::new(3, 0, 1);
        assert_eq!((odd.tx(10), odd.tx(12), odd.rx(0)), (9, 12, 0));
    }

    #[test]
    fn jitter_is_bounded_symmetric_and_reproducible() {
        let draws = |seed| {
            let mut n = StampNoise::new(0, 20, seed);
            (0..10_000u64)
                .map(|i| {
                    let exact = 1_000_000 + i * 1_000;
                    (
                        n.tx(exact) as i64 - exact as i64,
                        n.rx(exact) as i64 - exact as i64,
                    )
                })
                .collect::<Vec<_>>()
        };
        let a = draws(11);
        for &(t, r) in &a {
            assert!((-20..=20).contains(&t) && (-20..=20).contains(&r));
        }
        let tx: Vec<i64> = a.iter().map(|d| d.0).collect();
        assert!(tx.contains(&-20) && tx.contains(&20));
        assert!((tx.iter().sum::<i64>() as f64 / tx.len() as f64).abs() < 1.0);
        assert_ne!(
            tx,
            a.iter().map(|d| d.1).collect::<Vec<_>>(),
            "TX and RX streams"
        );
        assert_eq!(draws(11), a);
        assert_ne!(draws(12), a);
    }

    #[test]
    fn jitter_then_quantum() {
        let mut n = StampNoise::new(8, 5, 3);
        for i in 0..10_000u64 {
            let exact = 5_000 + i * 13;
            let t = n.tx(exact);
            assert_eq!(t % 8, 0);
            // exact − 5 − 7 ≤ t ≤ exact + 5.
            assert!(t + 12 >= exact && t <= exact + 5, "{exact} -> {t}");
        }
        // Jitter below SYSTIM 0 wraps like SYSTIM does, then lands on the grid.
        let mut w = StampNoise::new(8, 5, 3);
        for _ in 0..100 {
            assert_eq!(w.rx(0) % 8, 0);
        }
    }
}
