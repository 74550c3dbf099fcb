//! Exact decimal seconds ⇄ nanoseconds (no float rounding for `set`/`adj`).

/// Parses "[-]S[.FFFFFFFFF]" into nanoseconds. More than 9 fractional digits is an error rather
/// than a silent rounding.
pub fn parse_seconds(s: &str) -> Result<i128, String> {
    let bad = || format!("bad SECONDS {s:?} (want e.g. 12.5 or -0.000001)");
    let (neg, body) = match s.strip_prefix('-') {
        Some(b) => (true, b),
        None => (false, s.strip_prefix('+').unwrap_or(s)),
    };
    let (int, frac) = body.split_once('.').unwrap_or((body, ""));
    if (int.is_empty() && frac.is_empty())
        || !int.bytes().all(|b| b.is_ascii_digit())
        || !frac.bytes().all(|b| b.is_ascii_digit())
        || frac.len() > 9
        || int.len() > 12
    {
        return Err(bad());
    }
    let i: i128 = if int.is_empty() {
        0
    } else {
        int.parse().map_err(|_| bad())?
    };
    let f: i128 = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse().map_err(|_| bad())?
    };
    let ns = i * 1_000_000_000 + f;
    Ok(if neg { -ns } else { ns })
}

/// Formats nanoseconds as "[-]S.FFFFFFFFF".
pub fn fmt_seconds(ns: i128) -> String {
    let sign = if ns < 0 { "-" } else { "" };
    let a = ns.unsigned_abs();
    format!("{sign}{}.{:09}", a / 1_000_000_000, a % 1_000_000_000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_exactly() {
        assert_eq!(parse_seconds("1.000000001"), Ok(1_000_000_001));
        assert_eq!(parse_seconds("-0.5"), Ok(-500_000_000));
        assert_eq!(parse_seconds(".25"), Ok(250_000_000));
        assert_eq!(parse_seconds("42"), Ok(42_000_000_000));
        for bad in ["", "-", "1.0000000001", "1e3", "abc", "1.2.3", "."] {
            assert!(parse_seconds(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn formats_round_trip() {
        for ns in [0i128, 1, -1, 1_500_000_000, -2_000_000_001] {
            assert_eq!(parse_seconds(&fmt_seconds(ns)), Ok(ns));
        }
    }
}
