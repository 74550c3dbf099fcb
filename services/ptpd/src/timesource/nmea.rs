//! The time of day from a GPS receiver's NMEA sentences (ts2phc's `nmea` source, with
//! `tod_source = "nmea"` and `nmea_serialport`): the receiver sends an RMC sentence for each
//! second after its pulse, so a pulse belongs to the second after the one the last RMC received
//! before it named (ts2phc: "rounded to the previous boundary, since RMC arrives after the
//! pulse"). Only `$G?RMC` with status `A` (a fix) and a valid checksum counts; an RMC older than
//! [`MAX_RMC_AGE_NS`] names nothing.
//!
//! The port is read line by line on a thread of its own: a serial device (set its speed with
//! `stty`, or let gpsd own it and feed a pseudo-terminal) or, in the lab, a FIFO `ptplab gps
//! --nmea` writes.

use std::collections::VecDeque;
use std::io::Read;
use std::path::Path;
use std::sync::{Arc, Mutex};

/// An RMC received longer ago than this says nothing about the pulse now.
pub const MAX_RMC_AGE_NS: u64 = 2_000_000_000;
/// The longest sentence NMEA 0183 allows (82) and some slack; longer lines are dropped.
const MAX_LINE: usize = 128;

/// Why a line is not a usable RMC.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NmeaError {
    #[error("not an RMC sentence")]
    NotRmc,
    #[error("bad checksum")]
    Checksum,
    #[error("no fix (status {0:?})")]
    NoFix(String),
    #[error("bad {0}")]
    Field(&'static str),
}

fn num(s: &str, what: &'static str) -> Result<i64, NmeaError> {
    s.parse().map_err(|_| NmeaError::Field(what))
}

/// Days from 1970-01-01 to the civil date (proleptic Gregorian; Howard Hinnant's algorithm).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (m + if m > 2 { -3 } else { 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// The UTC second (Unix time) an RMC sentence names.
pub fn parse_rmc(line: &str) -> Result<i64, NmeaError> {
    let line = line.trim_end();
    let body = line.strip_prefix('$').ok_or(NmeaError::NotRmc)?;
    let (body, sum) = body.split_once('*').ok_or(NmeaError::Checksum)?;
    let want = u8::from_str_radix(sum.get(..2).ok_or(NmeaError::Checksum)?, 16)
        .map_err(|_| NmeaError::Checksum)?;
    if body.bytes().fold(0u8, |a, b| a ^ b) != want {
        return Err(NmeaError::Checksum);
    }
    let f: Vec<&str> = body.split(',').collect();
    if f.first()
        .is_none_or(|t| t.len() != 5 || !t.ends_with("RMC") || !t.starts_with('G'))
    {
        return Err(NmeaError::NotRmc);
    }
    let get = |i: usize| f.get(i).copied().unwrap_or("");
    if get(2) != "A" {
        return Err(NmeaError::NoFix(get(2).to_string()));
    }
    let (t, d) = (get(1), get(9));
    if t.len() < 6 || d.len() != 6 || !t.is_char_boundary(6) {
        return Err(NmeaError::Field("time or date"));
    }
    let (hh, mm, ss) = (
        num(&t[0..2], "hour")?,
        num(&t[2..4], "minute")?,
        num(&t[4..6], "second")?,
    );
    let (day, mon, yy) = (
        num(&d[0..2], "day")?,
        num(&d[2..4], "month")?,
        num(&d[4..6], "year")?,
    );
    if hh > 23 || mm > 59 || ss > 60 || !(1..=31).contains(&day) || !(1..=12).contains(&mon) {
        return Err(NmeaError::Field("time or date"));
    }
    // Two-digit years: 1980 (the GPS epoch) to 2079.
    let year = if yy >= 80 { 1900 + yy } else { 2000 + yy };
    Ok(days_from_civil(year, mon, day) * 86_400 + hh * 3600 + mm * 60 + ss)
}

/// An RMC sentence for UTC second `utc` (the lab receiver's, and the tests').
pub fn rmc_sentence(utc: i64) -> String {
    let days = utc.div_euclid(86_400);
    let secs = utc.rem_euclid(86_400);
    // civil_from_days (Hinnant), inverse of days_from_civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    let body = format!(
        "GPRMC,{:02}{:02}{:02}.00,A,4807.038,N,01131.000,E,0.0,0.0,{:02}{:02}{:02},,,A",
        secs / 3600,
        secs / 60 % 60,
        secs % 60,
        d,
        m,
        y % 100
    );
    let sum = body.bytes().fold(0u8, |a, b| a ^ b);
    format!("${body}*{sum:02X}\r\n")
}

/// Reads the receiver's port on a thread of its own (a serial read blocks; the runner never
/// waits on it) into `track`, each RMC with CLOCK_REALTIME at its arrival; opened again when
/// it is missing or its writer went away. Runs for the life of the process.
pub fn spawn_reader(path: &Path, track: Arc<Mutex<TodTrack>>) -> std::io::Result<()> {
    let path = path.to_owned();
    std::thread::Builder::new()
        .name("nmea".into())
        .spawn(move || read_forever(&path, &track))
        .map(|_| ())
}

fn read_forever(path: &Path, track: &Mutex<TodTrack>) {
    use std::io::BufRead;
    let mut told = false;
    loop {
        let f = match std::fs::File::open(path) {
            Ok(f) => f,
            Err(e) => {
                if !std::mem::replace(&mut told, true) {
                    log::warn!("time source: NMEA port {}: {e}; retrying", path.display());
                }
                std::thread::sleep(REOPEN);
                continue;
            }
        };
        told = false;
        let mut r = std::io::BufReader::new(f.take(u64::MAX));
        let mut line = Vec::with_capacity(MAX_LINE);
        loop {
            line.clear();
            match r
                .by_ref()
                .take(MAX_LINE as u64)
                .read_until(b'\n', &mut line)
            {
                Ok(0) | Err(_) => break,
                Ok(_) => {
                    let now = ptp_ipc::time::realtime_ns();
                    if let Ok(utc) = parse_rmc(&String::from_utf8_lossy(&line)) {
                        track
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(utc, now);
                    }
                }
            }
        }
        std::thread::sleep(REOPEN);
    }
}

/// How long the reader waits before opening the port again.
const REOPEN: std::time::Duration = std::time::Duration::from_millis(100);

/// The RMCs seen, each with CLOCK_REALTIME at its arrival (the last few).
#[derive(Debug, Default)]
pub struct TodTrack {
    rmcs: VecDeque<(i64, u64)>,
}

impl TodTrack {
    pub fn push(&mut self, utc: i64, recv_sys_ns: u64) {
        if self.rmcs.len() == 8 {
            self.rmcs.pop_front();
        }
        self.rmcs.push_back((utc, recv_sys_ns));
    }

    /// The UTC second of a pulse whose stamp arrived at `event_sys_ns`: the second after the
    /// last RMC received before it, if that RMC is recent.
    pub fn second_of(&self, event_sys_ns: u64) -> Option<i64> {
        let &(utc, recv) = self.rmcs.iter().rev().find(|(_, r)| *r < event_sys_ns)?;
        (event_sys_ns - recv <= MAX_RMC_AGE_NS).then_some(utc + 1)
    }
}

/// Tells a pulse's on-time edges from the others without a clock: consecutive edges of one
/// pulse are `pulsewidth` apart, of two pulses a second minus it. An edge that follows the
/// other kind by the right gap is on time; the first edge, and any after a gap that fits
/// neither (a lost edge, a step), are not.
#[derive(Debug, Default)]
pub struct EdgeGaps {
    prev_ns: Option<u64>,
}

impl EdgeGaps {
    /// Whether the edge stamped `ns` is an on-time edge (`falling`: the falling edge marks the
    /// second).
    pub fn on_time(&mut self, ns: u64, pulsewidth_ns: u64, falling: bool) -> bool {
        let prev = self.prev_ns.replace(ns);
        let Some(gap) = prev.and_then(|p| ns.checked_sub(p)) else {
            return false;
        };
        let want = if falling {
            pulsewidth_ns
        } else {
            1_000_000_000 - pulsewidth_ns
        };
        let tol = pulsewidth_ns.min(1_000_000_000 - pulsewidth_ns) / 2;
        gap.abs_diff(want) < tol
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rmc_sentences_round_trip_and_bad_ones_are_typed_errors() {
        for utc in [315_964_800i64, 951_782_400, 1_796_507_803, 3_000_000_000] {
            assert_eq!(
                parse_rmc(&rmc_sentence(utc)),
                Ok(utc),
                "{}",
                rmc_sentence(utc)
            );
        }
        // A receiver's own sentence (NMEA 0183 example): 12:35:19 UTC, 23 March 1994.
        assert_eq!(
            parse_rmc("$GPRMC,123519,A,4807.038,N,01131.000,E,022.4,084.4,230394,003.1,W*6A"),
            Ok(764_426_119)
        );
        let good = rmc_sentence(1_796_507_803);
        assert_eq!(
            parse_rmc(&good.replace("*", "*0")),
            Err(NmeaError::Checksum)
        );
        assert_eq!(
            parse_rmc(&good.replacen('A', "V", 1)),
            Err(NmeaError::Checksum)
        );
        let body = "GPRMC,120000.00,V,,,,,,,010126,,,N";
        let sum = body.bytes().fold(0u8, |a, b| a ^ b);
        assert!(matches!(
            parse_rmc(&format!("${body}*{sum:02X}")),
            Err(NmeaError::NoFix(_))
        ));
        let gga = "GPGGA,120000.00,4807.038,N,01131.000,E,1,08,0.9,545.4,M,46.9,M,,";
        let sum = gga.bytes().fold(0u8, |a, b| a ^ b);
        assert_eq!(
            parse_rmc(&format!("${gga}*{sum:02X}")),
            Err(NmeaError::NotRmc)
        );
        for junk in [
            "",
            "$",
            "$*",
            "$GPRMC*00",
            "GPRMC,1",
            "$GPRMC,99,A*",
            "\u{e9}\u{e9}*zz",
        ] {
            assert!(parse_rmc(junk).is_err(), "{junk:?}");
        }
    }

    #[test]
    fn a_pulse_is_named_by_the_last_rmc_before_it() {
        let mut t = TodTrack::default();
        t.push(100, 5_200_000_000);
        t.push(101, 6_200_000_000);
        // The pulse of second 102 arrives at 7.0 s, before RMC 102 (at 7.2 s).
        assert_eq!(t.second_of(7_000_001_000), Some(102));
        t.push(102, 7_200_000_000);
        assert_eq!(t.second_of(7_000_001_000), Some(102));
        // RMCs stopped: nothing names a pulse 3 s on.
        assert_eq!(t.second_of(10_300_000_000), None);
    }

    #[test]
    fn on_time_edges_are_told_by_their_gaps() {
        let (pw, s) = (100_000_000u64, 1_000_000_000u64);
        let mut g = EdgeGaps::default();
        let edges = [
            s,
            s + pw,
            2 * s,
            2 * s + pw,
            3 * s,
            4 * s,
            4 * s + pw,
            5 * s,
        ];
        let got: Vec<bool> = edges.iter().map(|&e| g.on_time(e, pw, false)).collect();
        // The first edge is unknown; the pulse at 3 s lost its falling edge, so 4 s is not
        // told (a 1 s gap) but 5 s is.
        assert_eq!(got, [false, false, true, false, true, false, false, true]);
        let mut g = EdgeGaps::default();
        let falling: Vec<bool> = edges[..4].iter().map(|&e| g.on_time(e, pw, true)).collect();
        assert_eq!(falling, [false, true, false, true]);
    }
}
