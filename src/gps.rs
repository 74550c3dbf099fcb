//! `ptplab gps`: a lab GPS receiver. A pulse (rising at each true second, falling `--width-ms`
//! later) on an emulated NIC's SDP wire (`--pins`, ptp_emu::pinwire), every edge sent ahead of
//! its instant so the model latches it exactly; with `--nmea PATH`, the time of day as a
//! receiver gives it: an RMC sentence naming each second's UTC, written 100 ms after its pulse
//! to PATH (a FIFO ptpd's time source reads: `tod_source = "nmea"`); one JSON line per pulse on
//! stdout (the second, its true host instant), so a judge knows what was sent.
//!
//! # The lab's true time
//!
//! A GPS pulse marks a second of GPS time, a fixed 19 s behind TAI, the PTP timescale. The lab
//! has no such clock; its true time is host CLOCK_MONOTONIC plus one constant, `--epoch-ns`:
//! by default CLOCK_REALTIME − CLOCK_MONOTONIC when the receiver starts plus the TAI − UTC
//! offset ([`TAI_MINUS_UTC_S`]), so the pulses fall on the lab's TAI seconds and a PHC locked
//! to them reads TAI as a PTP grandmaster's should. The first JSON line gives the epoch; every
//! judge evaluates true time with it.

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use ptp_emu::igc::PinEdge;
use ptp_emu::rng::SplitMix64;
use ptp_ipc::time::mono_ns;

use crate::signals::{StopFlag, stop_flag, stop_on_interrupt};

/// TAI − UTC since 2017 (IERS Bulletin C): what `--epoch-ns` adds to CLOCK_REALTIME.
pub const TAI_MINUS_UTC_S: i64 = 37;
/// How long before its instant an edge is sent.
const AHEAD: Duration = Duration::from_millis(300);
const NS: u64 = 1_000_000_000;

pub const USAGE: &str = "\
usage: ptplab gps --pins PATH [--pin N] [--width-ms MS] [--delay-ns NS] [--jitter-ns NS]
                  [--seed N] [--count N] [--epoch-ns NS] [--nmea PATH]
A GPS receiver's pulse per second on an emulated NIC's SDP wire (igcd/igbd --pins PATH).
  --pins PATH        the NIC's pin socket
  --pin N            which SDP the antenna cable is on (default 0)
  --width-ms MS      pulse width (default 100)
  --delay-ns NS      cable delay added to every edge (default 0)
  --jitter-ns NS     each pulse uniformly ±NS off the second, seeded (default 0)
  --seed N           the jitter's seed (default 1)
  --count N          stop after N pulses (default: until SIGINT/SIGTERM)
  --epoch-ns NS      true time = CLOCK_MONOTONIC + NS (default: CLOCK_REALTIME − CLOCK_MONOTONIC
                     now, plus TAI − UTC)
  --nmea PATH        an RMC sentence per second (its UTC), 100 ms after the pulse, to PATH (a
                     FIFO or a file; skipped while a FIFO has no reader)
Prints one JSON object per line: first {\"epoch_ns\"}, then per pulse {\"second\", \"t_mono\"}.
";

/// Parsed options.
#[derive(Debug, Clone, PartialEq)]
pub struct GpsOptions {
    pub pins: PathBuf,
    pub pin: u8,
    pub width_ns: u64,
    pub delay_ns: u64,
    pub jitter_ns: u64,
    pub seed: u64,
    pub count: Option<u64>,
    pub epoch_ns: Option<i128>,
    pub nmea: Option<PathBuf>,
}

fn value<T: std::str::FromStr>(p: &mut lexopt::Parser, what: &str) -> Result<T, String> {
    let v = p.value().map_err(|e| e.to_string())?;
    let s = v.to_string_lossy();
    s.parse().map_err(|_| format!("bad {what} {s:?}"))
}

/// Parses the command line; `Ok(None)` for `--help`.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<GpsOptions>, String> {
    use lexopt::prelude::*;
    let mut p = lexopt::Parser::from_args(args);
    let mut o = GpsOptions {
        pins: PathBuf::new(),
        pin: 0,
        width_ns: 100_000_000,
        delay_ns: 0,
        jitter_ns: 0,
        seed: 1,
        count: None,
        epoch_ns: None,
        nmea: None,
    };
    let mut pins = None;
    while let Some(arg) = p.next().map_err(|e| e.to_string())? {
        match arg {
            Long("pins") => pins = Some(PathBuf::from(p.value().map_err(|e| e.to_string())?)),
            Long("pin") => o.pin = value(&mut p, "--pin")?,
            Long("width-ms") => o.width_ns = value::<u64>(&mut p, "--width-ms")? * 1_000_000,
            Long("delay-ns") => o.delay_ns = value(&mut p, "--delay-ns")?,
            Long("jitter-ns") => o.jitter_ns = value(&mut p, "--jitter-ns")?,
            Long("seed") => o.seed = value(&mut p, "--seed")?,
            Long("count") => o.count = Some(value(&mut p, "--count")?),
            Long("epoch-ns") => o.epoch_ns = Some(value(&mut p, "--epoch-ns")?),
            Long("nmea") => o.nmea = Some(PathBuf::from(p.value().map_err(|e| e.to_string())?)),
            Long("help") | Short('h') => return Ok(None),
            other => return Err(other.unexpected().to_string()),
        }
    }
    o.pins = pins.ok_or("missing --pins PATH")?;
    if o.pin >= 4 {
        return Err(format!("--pin {}: the parts have SDP0..SDP3", o.pin));
    }
    if o.width_ns == 0 || o.width_ns >= NS / 2 {
        return Err("--width-ms must be between 1 and 499".into());
    }
    if o.jitter_ns >= NS / 4 {
        return Err("--jitter-ns must stay under 250 ms".into());
    }
    Ok(Some(o))
}

/// The default epoch: CLOCK_REALTIME − CLOCK_MONOTONIC now, plus TAI − UTC.
pub fn default_epoch_ns() -> i128 {
    crate::tap::realtime_minus_mono().0 + i128::from(TAI_MINUS_UTC_S) * i128::from(NS)
}

/// The true host instant of the pulse of true second `second` (before cable delay and jitter).
pub fn pulse_mono(second: u64, epoch_ns: i128) -> Option<u64> {
    u64::try_from(i128::from(second) * i128::from(NS) - epoch_ns).ok()
}

static STOP: StopFlag = stop_flag();

pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let o = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ptplab gps: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(code) = stop_on_interrupt("gps", &STOP) {
        return code;
    }
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("ptplab gps: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(target_os = "linux")]
fn run(o: &GpsOptions) -> Result<(), String> {
    use std::io::Write;
    use std::sync::atomic::Ordering;
    let link = ptp_emu::pinwire::PinClient::connect(&o.pins)
        .map_err(|e| format!("--pins {}: {e}", o.pins.display()))?;
    let epoch = o.epoch_ns.unwrap_or_else(default_epoch_ns);
    let mut out = std::io::stdout().lock();
    let line = |out: &mut std::io::StdoutLock, s: String| {
        let _ = writeln!(out, "{s}");
        let _ = out.flush();
    };
    line(&mut out, format!("{{\"epoch_ns\": {epoch}}}"));
    let mut rng = SplitMix64::stream(o.seed, 0x0067_7073);
    let mut nmea_out = NmeaOut::default();
    let ahead = AHEAD.as_nanos() as u64;
    let first = u64::try_from((i128::from(mono_ns() + ahead) + epoch) / i128::from(NS) + 1)
        .map_err(|_| "the epoch puts true time before 0")?;
    for second in first.. {
        if STOP.load(Ordering::Relaxed) || o.count.is_some_and(|n| second - first >= n) {
            break;
        }
        let jitter = rng.symmetric(o.jitter_ns);
        let base = pulse_mono(second, epoch).ok_or("the epoch puts a pulse before boot")?;
        let t = base.saturating_add_signed(jitter) + o.delay_ns;
        // Sent AHEAD before the rising edge, in one go with the falling one.
        while mono_ns() + ahead < t && !STOP.load(Ordering::Relaxed) {
            let left = t - ahead - mono_ns();
            std::thread::sleep(Duration::from_nanos(left.min(50_000_000)));
        }
        for (edge_t, high) in [(t, true), (t + o.width_ns, false)] {
            link.send(PinEdge {
                pin: o.pin,
                t: edge_t,
                high,
            })
            .map_err(|e| format!("sending a pulse: {e}"))?;
        }
        line(
            &mut out,
            format!(
                "{{\"second\": {second}, \"t_mono\": {t}, \"width_ns\": {}}}",
                o.width_ns
            ),
        );
        if let Some(p) = &o.nmea {
            while mono_ns() < base + RMC_AFTER_NS && !STOP.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(5));
            }
            let utc = second as i64 - TAI_MINUS_UTC_S;
            nmea_out.send(p, &ptpd::timesource::nmea::rmc_sentence(utc));
        }
    }
    Ok(())
}

/// When after its pulse a receiver's RMC sentence leaves.
const RMC_AFTER_NS: u64 = 100_000_000;

/// The NMEA port: opened without blocking (a FIFO with no reader yet is skipped this second and
/// tried again the next), reopened after a write fails (the reader went away).
#[derive(Default)]
struct NmeaOut {
    file: Option<std::fs::File>,
}

impl NmeaOut {
    fn send(&mut self, path: &std::path::Path, sentence: &str) {
        use std::io::Write;
        use std::os::unix::fs::OpenOptionsExt;
        if self.file.is_none() {
            self.file = std::fs::OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_NONBLOCK)
                .open(path)
                .ok();
        }
        if let Some(f) = &mut self.file
            && f.write_all(sentence.as_bytes()).is_err()
        {
            self.file = None;
        }
    }
}

#[cfg(not(target_os = "linux"))]
fn run(_: &GpsOptions) -> Result<(), String> {
    Err("the lab GPS needs a Linux host".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<GpsOptions>, String> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn options_parse_and_bad_ones_are_refused() {
        let o = p(&["--pins", "/x", "--pin", "2", "--jitter-ns", "40"])
            .unwrap()
            .unwrap();
        assert_eq!((o.pin, o.jitter_ns, o.width_ns), (2, 40, 100_000_000));
        for bad in [
            &[][..],
            &["--pins", "/x", "--pin", "4"],
            &["--pins", "/x", "--width-ms", "0"],
            &["--pins", "/x", "--width-ms", "500"],
            &["--pins", "/x", "--jitter-ns", "300000000"],
            &["--pins", "/x", "--pin", "x"],
            &["--pins", "/x", "extra"],
        ] {
            assert!(p(bad).is_err(), "{bad:?}");
        }
        assert_eq!(p(&["--help"]).unwrap(), None);
    }

    #[test]
    fn pulses_fall_on_the_true_seconds_of_the_epoch() {
        let epoch = 1_700_000_037_000_000_000i128 - 5_000;
        assert_eq!(pulse_mono(1_700_000_037, epoch), Some(5_000));
        assert_eq!(pulse_mono(1_700_000_038, epoch), Some(1_000_005_000));
        assert_eq!(pulse_mono(1, epoch), None);
    }
}
