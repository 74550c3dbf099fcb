//! The pin verbs (`pins`, `pin`, `extts`, `perout`, `pps`): Linux's testptp `-l`, `-L`, `-e`,
//! `-p` and `-P` over ptpd's clock scheme, printing what testptp prints so a script written for
//! one reads the other.

use std::time::{Duration, Instant};

use ptp_ipc::PinFunction;
use ptpd::client::Client;
use serde_json::{Value, json};

use crate::{Error, units};

/// How often `extts -n` asks ptpd for new events.
const EVENT_POLL: Duration = Duration::from_millis(50);

/// A pin verb, parsed.
#[derive(Debug, Clone, PartialEq)]
pub enum PinCommand {
    List,
    Set {
        pin: u8,
        func: PinFunction,
        chan: u8,
    },
    ExtTs {
        chan: u8,
        on: bool,
    },
    /// On, `count` events printed (each within `timeout`), off again.
    ExtTsRead {
        chan: u8,
        count: usize,
        timeout: Duration,
    },
    PerOut {
        chan: u8,
        period_ns: u64,
        start_ns: Option<u64>,
    },
    Pps {
        on: bool,
    },
}

fn num<T: std::str::FromStr>(w: Option<&String>, what: &str) -> Result<T, Error> {
    let w = w.ok_or_else(|| Error::Usage(format!("missing {what}")))?;
    w.parse()
        .map_err(|_| Error::Usage(format!("bad {what} {w:?}")))
}

fn on_off(w: Option<&String>) -> Result<bool, Error> {
    match w.map(String::as_str) {
        Some("on" | "1") => Ok(true),
        Some("off" | "0") => Ok(false),
        Some(w) => Err(Error::Usage(format!("bad {w:?}: on or off"))),
        None => Err(Error::Usage("missing on|off".into())),
    }
}

/// Parses `words` (the verb first); `n` and `timeout` are the `-n` and `--timeout` options.
/// Returns the command and how many words it took.
pub fn parse(
    words: &[String],
    n: Option<usize>,
    timeout: Option<Duration>,
) -> Result<(PinCommand, usize), Error> {
    let w = |i: usize| words.get(i);
    Ok(match words[0].as_str() {
        "pins" => (PinCommand::List, 1),
        "pin" => {
            let pin = num(w(1), "PIN")?;
            let f = w(2).ok_or_else(|| Error::Usage("missing FUNC".into()))?;
            let func =
                PinFunction::parse(f).ok_or_else(|| Error::Usage(format!("bad FUNC {f:?}")))?;
            let chan = match w(3) {
                None => 0,
                Some(_) => num(w(3), "CHAN")?,
            };
            (
                PinCommand::Set { pin, func, chan },
                3 + usize::from(w(3).is_some()),
            )
        }
        "extts" => {
            let chan = num(w(1), "CHAN")?;
            match (n, w(2)) {
                (Some(0), _) => return Err(Error::Usage("-n must be > 0".into())),
                (Some(count), None) => {
                    let timeout = timeout.unwrap_or(Duration::from_secs(10));
                    (
                        PinCommand::ExtTsRead {
                            chan,
                            count,
                            timeout,
                        },
                        2,
                    )
                }
                (None, w2) => (
                    PinCommand::ExtTs {
                        chan,
                        on: on_off(w2)?,
                    },
                    3,
                ),
                (Some(_), Some(_)) => {
                    return Err(Error::Usage("extts: on|off or -n N, not both".into()));
                }
            }
        }
        "perout" => {
            let chan = num(w(1), "CHAN")?;
            let p = w(2).ok_or_else(|| Error::Usage("missing PERIOD".into()))?;
            let period_ns = u64::try_from(units::parse_seconds(p).map_err(Error::Usage)?)
                .map_err(|_| Error::Usage("PERIOD must be ≥ 0".into()))?;
            let start_ns = match w(3) {
                None => None,
                Some(s) => Some(
                    u64::try_from(units::parse_seconds(s).map_err(Error::Usage)?)
                        .map_err(|_| Error::Usage("START must be ≥ 0".into()))?,
                ),
            };
            (
                PinCommand::PerOut {
                    chan,
                    period_ns,
                    start_ns,
                },
                3 + usize::from(w(3).is_some()),
            )
        }
        "pps" => (PinCommand::Pps { on: on_off(w(1))? }, 2),
        other => return Err(Error::Usage(format!("unknown command {other:?}"))),
    })
}

/// Runs a pin verb on `clock`.
pub fn run(c: &Client, clock: u32, cmd: &PinCommand) -> Result<(String, Value), Error> {
    Ok(match *cmd {
        PinCommand::List => {
            let pins = c.pins(clock)?;
            if pins.is_empty() {
                return Err(Error::Other(format!("clock {clock} has no pins")));
            }
            let lines: Vec<String> = pins
                .iter()
                .map(|p| {
                    format!(
                        "name SDP{} index {} func {} chan {}",
                        p.pin, p.pin, p.func as u8, p.chan
                    )
                })
                .collect();
            let js: Vec<Value> = pins
                .iter()
                .map(|p| json!({"pin": p.pin, "func": p.func.name(), "chan": p.chan}))
                .collect();
            (
                lines.join("\n"),
                json!({"ok": true, "command": "pins", "clock": clock, "pins": js}),
            )
        }
        PinCommand::Set { pin, func, chan } => {
            c.set_pin(clock, pin, func, chan)?;
            (
                "set pin function okay".into(),
                json!({"ok": true, "command": "pin", "clock": clock, "pin": pin,
                    "func": func.name(), "chan": chan}),
            )
        }
        PinCommand::ExtTs { chan, on } => {
            c.ext_ts(clock, chan, on)?;
            (
                format!(
                    "external time stamp request okay ({})",
                    if on { "on" } else { "off" }
                ),
                json!({"ok": true, "command": "extts", "clock": clock, "chan": chan, "on": on}),
            )
        }
        PinCommand::ExtTsRead {
            chan,
            count,
            timeout,
        } => read_events(c, clock, chan, count, timeout)?,
        PinCommand::PerOut {
            chan,
            period_ns,
            start_ns,
        } => {
            // As testptp -p: from the PHC's next whole second + 2 unless told.
            let start = match start_ns {
                Some(s) => s,
                None => (c.get(clock)? / 1_000_000_000 + 2) * 1_000_000_000,
            };
            let first = c.per_out(clock, chan, start, period_ns)?;
            let human = if period_ns == 0 {
                "periodic output request okay (stopped)".to_string()
            } else {
                format!(
                    "periodic output request okay, first edge at {}",
                    units::fmt_seconds(first as i128)
                )
            };
            (
                human,
                json!({"ok": true, "command": "perout", "clock": clock, "chan": chan,
                    "period_ns": period_ns, "first_ns": first}),
            )
        }
        PinCommand::Pps { on } => {
            c.pps(clock, on)?;
            (
                "pps for system time request okay".into(),
                json!({"ok": true, "command": "pps", "clock": clock, "on": on}),
            )
        }
    })
}

/// `extts CHAN -n N`: on, `count` events of channel `chan` (each within `timeout` of the one
/// before), off again whatever happened. Lines as testptp -e prints them.
fn read_events(
    c: &Client,
    clock: u32,
    chan: u8,
    count: usize,
    timeout: Duration,
) -> Result<(String, Value), Error> {
    // Events numbered from here on are ours.
    let (next, _, _) = c.ext_ts_events(clock, u64::MAX)?;
    let mut after = next.saturating_sub(1);
    c.ext_ts(clock, chan, true)?;
    let got = collect(c, clock, chan, count, timeout, &mut after);
    let off = c.ext_ts(clock, chan, false);
    let events = got?;
    off?;
    let lines: Vec<String> = events
        .iter()
        .map(|ns| {
            format!(
                "event index {chan} at {}.{:09}",
                ns / 1_000_000_000,
                ns % 1_000_000_000
            )
        })
        .collect();
    Ok((
        format!("external time stamp request okay\n{}", lines.join("\n")),
        json!({"ok": true, "command": "extts", "clock": clock, "chan": chan, "events_ns": events}),
    ))
}

fn collect(
    c: &Client,
    clock: u32,
    chan: u8,
    count: usize,
    timeout: Duration,
    after: &mut u64,
) -> Result<Vec<u64>, Error> {
    let mut out = Vec::new();
    let mut since = Instant::now();
    while out.len() < count {
        let (first, lost, events) = c.ext_ts_events(clock, *after)?;
        if lost > 0 {
            return Err(Error::Other(format!(
                "{lost} event(s) lost before they were read"
            )));
        }
        if !events.is_empty() {
            since = Instant::now();
        }
        *after = first + events.len() as u64 - 1;
        out.extend(events.iter().filter(|e| e.chan == chan).map(|e| e.ns));
        if out.len() < count {
            if since.elapsed() > timeout {
                return Err(Error::Other(format!(
                    "no external time stamp on channel {chan} within {timeout:?} ({} of {count})",
                    out.len()
                )));
            }
            std::thread::sleep(EVENT_POLL);
        }
    }
    out.truncate(count);
    Ok(out)
}
