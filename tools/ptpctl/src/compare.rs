//! `compare`: one PHC against another PHC of the same host, each read through its ptpd with
//! gettimex (the PHC latch bracketed by CLOCK_REALTIME in the driver), in the order A, B, A.
//!
//! A's offset from CLOCK_REALTIME is interpolated to the middle of B's bracket, so
//! `PHC_a − PHC_b` is known at that instant within half B's bracket plus half the wider of A's
//! two brackets (each offset is known within half its bracket; a linear interpolation between
//! two such values is known within the larger error). That bound is printed with every sample:
//! it is what the reading can resolve, not an estimate of anyone's sync error.

use ptp_ipc::TimeXSample;
use ptpd::client::Client;
use serde_json::{Value, json};

use crate::Error;

/// gettimex samples per read; the tightest bracket is kept.
const SAMPLES_PER_READ: u8 = 5;

/// One read: PHC − CLOCK_REALTIME at the bracket's middle, the middle, and the bracket width.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Read {
    pub offset_ns: i128,
    pub mid_ns: i128,
    pub window_ns: i128,
}

impl Read {
    /// The tightest of `samples`.
    pub fn tightest(samples: &[TimeXSample]) -> Option<Read> {
        let s = TimeXSample::tightest(samples)?;
        Some(Read {
            offset_ns: s.offset_ns(),
            mid_ns: s.mid_ns(),
            window_ns: i128::from(s.bracket_ns()?),
        })
    }
}

/// `PHC_a − PHC_b` at B's read, and what it is known within.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub diff_ns: i128,
    pub uncertainty_ns: i128,
    /// CLOCK_REALTIME of B's read.
    pub at_ns: i128,
}

/// Combines the reads A, B, A (see the module docs).
pub fn sandwich(a1: Read, b: Read, a2: Read) -> Sample {
    let span = (a2.mid_ns - a1.mid_ns).max(1);
    let a_at_b = a1.offset_ns + (a2.offset_ns - a1.offset_ns) * (b.mid_ns - a1.mid_ns) / span;
    Sample {
        diff_ns: a_at_b - b.offset_ns,
        uncertainty_ns: (b.window_ns + 1) / 2 + (a1.window_ns.max(a2.window_ns) + 1) / 2,
        at_ns: b.mid_ns,
    }
}

fn read(c: &Client, clock: u32) -> Result<Read, Error> {
    let samples = c.gettimex(clock, SAMPLES_PER_READ)?;
    Read::tightest(&samples).ok_or_else(|| Error::Other("no usable gettimex sample".into()))
}

/// `n` sandwiched samples of A (`a`, `clock`) against B (`b`, `b_clock`).
pub fn run(
    a: &Client,
    clock: u32,
    b: &Client,
    b_clock: u32,
    n: usize,
) -> Result<(String, Value), Error> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        let a1 = read(a, clock)?;
        let rb = read(b, b_clock)?;
        let a2 = read(a, clock)?;
        out.push(sandwich(a1, rb, a2));
    }
    let human = out
        .iter()
        .map(|s| {
            format!(
                "offset from the other PHC is {}ns (+/- {}ns)",
                s.diff_ns, s.uncertainty_ns
            )
        })
        .collect::<Vec<_>>()
        .join("\n");
    let samples: Vec<Value> = out
        .iter()
        .map(|s| json!({"diff_ns": s.diff_ns as i64, "uncertainty_ns": s.uncertainty_ns as i64, "at_ns": s.at_ns as i64}))
        .collect();
    Ok((
        human,
        json!({"ok": true, "command": "compare", "clock": clock, "other_clock": b_clock, "samples": samples}),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn r(offset_ns: i128, mid_ns: i128, window_ns: i128) -> Read {
        Read {
            offset_ns,
            mid_ns,
            window_ns,
        }
    }

    #[test]
    fn a_is_interpolated_to_b_and_the_bound_is_the_brackets() {
        // A drifts 1000 ns over 1 ms against CLOCK_REALTIME; B is read a quarter of the way.
        let s = sandwich(
            r(5_000, 0, 40),
            r(2_000, 250_000, 30),
            r(6_000, 1_000_000, 60),
        );
        assert_eq!(s.diff_ns, 5_250 - 2_000);
        assert_eq!(s.uncertainty_ns, 15 + 30);
        assert_eq!(s.at_ns, 250_000);
        // Two reads of A at one instant (a coarse clock) divide by nothing.
        let s = sandwich(r(7, 10, 0), r(3, 10, 0), r(7, 10, 0));
        assert_eq!((s.diff_ns, s.uncertainty_ns), (4, 0));
    }

    #[test]
    fn the_tightest_sample_is_read() {
        let x = |b, p, a| TimeXSample {
            sys_before_ns: b,
            phc_ns: p,
            sys_after_ns: a,
        };
        let got = Read::tightest(&[x(100, 1_000, 300), x(400, 1_350, 420)]).unwrap();
        assert_eq!(got, r(1_350 - 410, 410, 20));
        assert_eq!(Read::tightest(&[]), None);
    }
}
