//! ptpctl: phc_ctl-style verbs against ptpd's clock scheme (DESIGN.md §7).
//!
//! Every verb prints one human line, or with `--json` one JSON object per command.

pub mod bench;
pub mod compare;
pub mod pins;
pub mod units;

use std::ffi::OsString;
use std::path::PathBuf;
use std::process::ExitCode;

use ptpd::client::{Client, ClientError, socket_path};
use serde_json::{Value, json};

/// The default clock scheme path the usage text names (the client's `DEFAULT_SOCKET`).
#[cfg(target_os = "redox")]
macro_rules! default_socket {
    () => {
        "/scheme/ptp/ctl"
    };
}
#[cfg(not(target_os = "redox"))]
macro_rules! default_socket {
    () => {
        "/run/redox-ptp/ptp.sock"
    };
}

pub const USAGE: &str = concat!(
    "\
usage: ptpctl [--socket PATH] [--clock N] [--json] [--output PATH] COMMAND [ARGS]
commands (phc_ctl style):
  get                 read the PHC
  set [SECONDS]       set the PHC (default: to CLOCK_REALTIME)
  adj SECONDS         step the PHC by SECONDS (may be negative)
  freq PPB            set the frequency offset in ppb (absolute, from nominal)
  cmp                 PHC minus CLOCK_REALTIME, from the tightest of 10 gettimex samples
  caps                what the clock can do
  status              driver, link and PTP port state
  stats               driver counters
  tstamp on|off FILTER
                      privileged: TX timestamping on or off and the RX filter (none, all,
                      ptp_v2_event, ptp_v2_l2_event, ptp_v2_l4_event, ptp_v2_l2_sync,
                      ptp_v2_l2_delay_req, ptp_v2_l4_sync, ptp_v2_l4_delay_req) on the running
                      clock; never resets the link or the rings; ptpd re-applies its own
                      configuration when the driver reconnects
  pins                the SDP pins, as testptp -l lists them
  pin PIN FUNC [CHAN] privileged: FUNC none, extts or perout (or 0, 1, 2) on channel CHAN
                      (default 0), as testptp -L; a channel another pin had moves here
  extts CHAN on|off   privileged: external timestamps on channel CHAN on or off
  extts CHAN -n N [--timeout SECONDS]
                      privileged: on, print N events as testptp -e does (\"event index C at
                      S.NNNNNNNNN\"), off again; fails if one takes longer than SECONDS (10)
  perout CHAN PERIOD [START]
                      privileged: a periodic output every PERIOD seconds from PHC time START
                      (default: the next whole second + 2, as testptp -p); PERIOD 0 stops it;
                      prints the first edge (a START already passed moves on by whole periods)
  pps on|off          privileged: PPS events (one per PHC second) on or off
  bench [-n N]        exact-path vs clock-page read latency (default N = 10000)
  compare SOCKET [CLOCK] [-n N]
                      PHC minus the PHC of another ptpd (SOCKET, clock CLOCK, default 0) on
                      this host: gettimex reads A, B, A, each line with the bound the reads
                      resolve (default N = 1)
options:
  --socket PATH       ptpd's clock scheme (default $PTP_SOCKET, else ",
    default_socket!(),
    ")
  --clock N           which clock (default 0)
  --json              one JSON object per command
  --output PATH       append the output (and any error, then not also on stderr) to PATH
                      instead of stdout, e.g. /scheme/debug on Redox, so a boot script can
                      read it without a shell; a PATH this uid may not open (Redox's
                      /scheme/debug for any uid but 0) is replaced by stdout, with a warning
"
);

/// A parsed command line.
#[derive(Debug, Clone, PartialEq)]
pub struct Args {
    pub socket: Option<PathBuf>,
    pub clock: u32,
    pub json: bool,
    /// Where the output goes instead of stdout.
    pub output: Option<PathBuf>,
    pub command: Command,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Command {
    Get,
    Set(Option<u64>),
    Adj(i64),
    Freq(f64),
    Cmp,
    Caps,
    Status,
    Stats,
    Tstamp {
        tx_on: bool,
        rx_filter: ptp_ipc::RxFilter,
    },
    Bench {
        n: usize,
    },
    Compare {
        other: PathBuf,
        other_clock: u32,
        n: usize,
    },
    Pin(pins::PinCommand),
}

#[derive(Debug)]
pub enum Error {
    Usage(String),
    Client(ClientError),
    Other(String),
}

impl std::fmt::Display for Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Error::Usage(s) | Error::Other(s) => f.write_str(s),
            Error::Client(e) => write!(f, "{e}"),
        }
    }
}

impl From<ClientError> for Error {
    fn from(e: ClientError) -> Self {
        Error::Client(e)
    }
}

pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<Args>, Error> {
    use lexopt::prelude::*;
    let bad = |e: lexopt::Error| Error::Usage(e.to_string());
    let mut p = lexopt::Parser::from_args(args);
    let (mut socket, mut clock, mut json, mut output) = (None, 0u32, false, None);
    let mut words: Vec<String> = Vec::new();
    let mut n: Option<usize> = None;
    let mut timeout: Option<std::time::Duration> = None;
    while let Some(arg) = p.next().map_err(bad)? {
        match arg {
            Long("socket") => socket = Some(p.value().map_err(bad)?.into()),
            Long("clock") => clock = p.value().map_err(bad)?.parse().map_err(bad)?,
            Long("json") => json = true,
            Long("output") => output = Some(p.value().map_err(bad)?.into()),
            Short('n') => n = Some(p.value().map_err(bad)?.parse().map_err(bad)?),
            Long("timeout") => {
                let w = p.value().map_err(bad)?.string().map_err(bad)?;
                let ns = units::parse_seconds(&w).map_err(Error::Usage)?;
                let ns = u64::try_from(ns)
                    .ok()
                    .filter(|&n| n > 0)
                    .ok_or_else(|| Error::Usage(format!("bad --timeout {w:?}")))?;
                timeout = Some(std::time::Duration::from_nanos(ns));
            }
            Long("help") | Short('h') => return Ok(None),
            Value(v) => words.push(v.string().map_err(bad)?),
            // Negative numbers ("adj -0.5") arrive as options; take them as words.
            Short(c) if c.is_ascii_digit() || c == '.' => {
                let rest = p.optional_value().map(|v| v.to_string_lossy().into_owned());
                words.push(format!("-{c}{}", rest.unwrap_or_default()));
            }
            _ => return Err(bad(arg.unexpected())),
        }
    }
    let need = |w: Option<&String>, what: &str| {
        w.cloned()
            .ok_or_else(|| Error::Usage(format!("missing {what}")))
    };
    let command = match words.first().map(String::as_str) {
        None => return Err(Error::Usage("missing command".into())),
        Some("get") => Command::Get,
        Some("set") => Command::Set(match words.get(1) {
            None => None,
            Some(s) => {
                let ns = units::parse_seconds(s).map_err(Error::Usage)?;
                Some(u64::try_from(ns).map_err(|_| Error::Usage("time must be ≥ 0".into()))?)
            }
        }),
        Some("adj") => {
            let ns = units::parse_seconds(&need(words.get(1), "SECONDS")?).map_err(Error::Usage)?;
            Command::Adj(i64::try_from(ns).map_err(|_| Error::Usage("step out of range".into()))?)
        }
        Some("freq") => {
            let w = need(words.get(1), "PPB")?;
            let ppb: f64 = w
                .parse()
                .map_err(|_| Error::Usage(format!("bad PPB {w:?}")))?;
            if !ppb.is_finite() {
                return Err(Error::Usage(format!("bad PPB {w:?}")));
            }
            Command::Freq(ppb)
        }
        Some("cmp") => Command::Cmp,
        Some("caps") => Command::Caps,
        Some("status") => Command::Status,
        Some("stats") => Command::Stats,
        Some("tstamp") => tstamp(words.get(1), words.get(2))?,
        Some("bench") => Command::Bench {
            n: positive(n.unwrap_or(10_000))?,
        },
        Some("compare") => Command::Compare {
            other: need(words.get(1), "SOCKET")?.into(),
            other_clock: match words.get(2) {
                None => 0,
                Some(w) => w
                    .parse()
                    .map_err(|_| Error::Usage(format!("bad CLOCK {w:?}")))?,
            },
            n: positive(n.unwrap_or(1))?,
        },
        Some("pins" | "pin" | "extts" | "perout" | "pps") => {
            let (c, took) = pins::parse(&words, n, timeout)?;
            if let Some(extra) = words.get(took) {
                return Err(Error::Usage(format!(
                    "{}: unexpected argument {extra:?}",
                    words[0]
                )));
            }
            return Ok(Some(Args {
                socket,
                clock,
                json,
                output,
                command: Command::Pin(c),
            }));
        }
        Some(other) => return Err(Error::Usage(format!("unknown command {other:?}"))),
    };
    // A word the command does not take is an error, not ignored: `bench 1000` once ran the
    // default 10 000 reads (issue 27's boot), the count belongs to `-n`.
    let takes = match command {
        Command::Set(_) | Command::Adj(_) | Command::Freq(_) => 2,
        Command::Tstamp { .. } | Command::Compare { .. } => 3,
        _ => 1,
    };
    if let Some(extra) = words.get(takes) {
        return Err(Error::Usage(format!(
            "{}: unexpected argument {extra:?}{}",
            words[0],
            if matches!(command, Command::Bench { .. }) && extra.parse::<usize>().is_ok() {
                " (the count is -n N)"
            } else {
                ""
            }
        )));
    }
    Ok(Some(Args {
        socket,
        clock,
        json,
        output,
        command,
    }))
}

/// `tstamp on|off FILTER`: both words required, each checked.
fn tstamp(tx: Option<&String>, filter: Option<&String>) -> Result<Command, Error> {
    let tx_on = match tx.map(String::as_str) {
        Some("on") => true,
        Some("off") => false,
        Some(w) => return Err(Error::Usage(format!("bad TX {w:?}: on or off"))),
        None => return Err(Error::Usage("missing on|off".into())),
    };
    let f = filter.ok_or_else(|| Error::Usage("missing FILTER".into()))?;
    let rx_filter = ptp_ipc::RxFilter::from_name(f)
        .ok_or_else(|| Error::Usage(format!("unknown RX filter {f:?}")))?;
    Ok(Command::Tstamp { tx_on, rx_filter })
}

fn positive(n: usize) -> Result<usize, Error> {
    if n == 0 {
        return Err(Error::Usage("-n must be > 0".into()));
    }
    Ok(n)
}

/// Entry point shared by the `ptpctl` binary and `ptplab ptpctl ...`.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let args = match parse(args) {
        Ok(Some(a)) => a,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("ptpctl: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    let mut out = match Output::open(args.output.as_deref()) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("ptpctl: {e}");
            return ExitCode::from(2);
        }
    };
    match run(&args) {
        Ok((human, value)) => {
            let line = if args.json { value.to_string() } else { human };
            if out.line(&line) {
                ExitCode::SUCCESS
            } else {
                ExitCode::FAILURE
            }
        }
        Err(e) => {
            report(&mut out, args.json, &e);
            ExitCode::FAILURE
        }
    }
}

/// Writes a command's error once: with `--output`, to the output only (on Redox both it and
/// stderr usually end on the serial console, which showed every error twice); without, as JSON
/// on stdout (`--json`) and as text on stderr.
fn report(out: &mut Output, json: bool, e: &Error) {
    let text = format!("ptpctl: {e}");
    if json {
        let code = match e {
            Error::Client(c) => c.clock_error().map(|c| format!("{c:?}")),
            _ => None,
        };
        out.line(&json!({"ok": false, "error": e.to_string(), "code": code}).to_string());
    } else if out.chosen {
        out.line(&text);
    }
    if !out.chosen {
        eprintln!("{text}");
    }
}

/// Where results go: stdout, or the `--output` file opened for appending.
struct Output {
    file: Option<std::fs::File>,
    /// `--output` was given: errors go there, not also to stderr.
    chosen: bool,
}

impl Output {
    fn open(path: Option<&std::path::Path>) -> Result<Self, Error> {
        use std::fs::OpenOptions;
        let Some(p) = path else {
            return Ok(Output {
                file: None,
                chosen: false,
            });
        };
        // Opening without O_CREAT first: a scheme such as /scheme/debug takes writes but
        // need not accept creation.
        let opened = OpenOptions::new()
            .append(true)
            .open(p)
            .or_else(|_| OpenOptions::new().append(true).create(true).open(p));
        let file = match opened {
            Ok(f) => Some(f),
            Err(e) if stdout_instead(&e) => {
                eprintln!(
                    "ptpctl: --output {}: {e}; writing to stdout instead",
                    p.display()
                );
                None
            }
            Err(e) => return Err(Error::Other(format!("--output {}: {e}", p.display()))),
        };
        Ok(Output { file, chosen: true })
    }

    /// Writes one line in a single write, so lines of concurrent writers do not interleave;
    /// false (reported on stderr) if it could not be written.
    fn line(&mut self, text: &str) -> bool {
        use std::io::Write;
        let r = match &mut self.file {
            None => writeln!(std::io::stdout(), "{text}"),
            Some(f) => f.write_all(format!("{text}\n").as_bytes()),
        };
        r.map_err(|e| eprintln!("ptpctl: writing the output: {e}"))
            .is_ok()
    }
}

/// Whether an `--output` path this process may not open is replaced by stdout rather than
/// refused: Redox's kernel debug scheme (`/scheme/debug`, the serial console) refuses every
/// open by a uid other than 0 with EPERM, whatever the flags, so an unprivileged ptpctl started
/// by init (whose stdout is logd's `/scheme/log`, the same console) could not report at all.
/// A path that does not exist or cannot be created stays a usage error.
pub fn stdout_instead(e: &std::io::Error) -> bool {
    e.kind() == std::io::ErrorKind::PermissionDenied
}

/// Runs one command; returns the human line and the JSON object.
pub fn run(args: &Args) -> Result<(String, Value), Error> {
    let path = socket_path(args.socket.as_deref());
    let c = Client::connect(&path)?;
    let clock = args.clock;
    Ok(match &args.command {
        Command::Get => {
            let ns = c.get(clock)?;
            (
                format!("clock time is {}", units::fmt_seconds(ns as i128)),
                json!({"ok": true, "command": "get", "clock": clock, "ns": ns}),
            )
        }
        Command::Set(t) => {
            let ns = t.unwrap_or_else(ptp_ipc::time::realtime_ns);
            c.set(clock, ns)?;
            (
                format!("set clock time to {}", units::fmt_seconds(ns as i128)),
                json!({"ok": true, "command": "set", "clock": clock, "ns": ns}),
            )
        }
        Command::Adj(d) => {
            c.adj(clock, *d)?;
            (
                format!(
                    "adjusted clock by {} seconds",
                    units::fmt_seconds(*d as i128)
                ),
                json!({"ok": true, "command": "adj", "clock": clock, "delta_ns": d}),
            )
        }
        Command::Freq(ppb) => {
            let scaled = (ppb * 65.536).round() as i64;
            c.freq(clock, scaled)?;
            (
                format!("adjusted clock frequency offset to {ppb} ppb"),
                json!({"ok": true, "command": "freq", "clock": clock, "ppb": ppb, "scaled_ppm": scaled}),
            )
        }
        Command::Cmp => cmp_report(&c, clock)?,
        Command::Caps => caps_report(&c, clock)?,
        Command::Status => status_report(&c, clock)?,
        Command::Stats => stats_report(&c, clock)?,
        Command::Tstamp { tx_on, rx_filter } => {
            let (tx, rx) = c.set_tstamp(clock, *tx_on, *rx_filter)?;
            let tx_word = if tx { "on" } else { "off" };
            (
                format!("timestamping: TX {tx_word}, RX {}", rx.name()),
                json!({"ok": true, "command": "tstamp", "clock": clock, "tx_on": tx,
                    "rx_filter": rx.name()}),
            )
        }
        Command::Bench { n } => bench::run(&c, clock, *n)?,
        Command::Compare {
            other,
            other_clock,
            n,
        } => {
            let b = Client::connect(other)?;
            compare::run(&c, clock, &b, *other_clock, *n)?
        }
        Command::Pin(p) => pins::run(&c, clock, p)?,
    })
}

/// `cmp`: PHC minus CLOCK_REALTIME from the tightest of 10 gettimex samples.
fn cmp_report(c: &Client, clock: u32) -> Result<(String, Value), Error> {
    let samples = c.gettimex(clock, 10)?;
    let best = ptp_ipc::TimeXSample::tightest(&samples)
        .ok_or_else(|| Error::Other("no usable gettimex sample".into()))?;
    let offset = best.offset_ns();
    let window = best.bracket_ns().unwrap_or_default();
    Ok((
        format!("offset from CLOCK_REALTIME is {offset}ns (window {window}ns)"),
        json!({"ok": true, "command": "cmp", "clock": clock, "offset_ns": offset as i64, "window_ns": window}),
    ))
}

/// `caps`: What the clock can do.
fn caps_report(c: &Client, clock: u32) -> Result<(String, Value), Error> {
    let k = c.caps(clock)?;
    let mac = k
        .mac
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    Ok((
        format!(
            "{} [{:04x}:{:04x}] {mac}\n  maximum frequency adjustment: {} ppb\n  TX timestamp sets: {}\n  RX filters: {:#x}\n  cross timestamping: {}\n  clock page: {}",
            k.part,
            k.vendor_id,
            k.device_id,
            k.max_adj_ppb,
            k.tx_ts_sets,
            k.rx_filters,
            k.cross_timestamp,
            if k.clock_page.is_empty() {
                "-"
            } else {
                &k.clock_page
            }
        ),
        json!({"ok": true, "command": "caps", "clock": clock, "part": k.part,
            "vendor_id": k.vendor_id, "device_id": k.device_id, "mac": mac, "max_adj_ppb": k.max_adj_ppb,
            "tx_ts_sets": k.tx_ts_sets, "rx_filters": k.rx_filters,
            "cross_timestamp": k.cross_timestamp, "clock_page": k.clock_page}),
    ))
}

/// `status`: The driver's and the PTP port's state.
fn status_report(c: &Client, clock: u32) -> Result<(String, Value), Error> {
    let s = c.status(clock)?;
    let gm: String = s.grandmaster.iter().map(|b| format!("{b:02x}")).collect();
    // The time source, if the clock has one ([clock.ts2phc]).
    let src = c.source(clock).ok();
    let (src_text, src_json) = match src {
        Some(t) => {
            let state = match t.state {
                2 => "LOCKED",
                3 => "HOLDOVER",
                _ => "FREERUN",
            };
            (
                format!(
                    "; time source {state} (clockClass {}, offset {} ns, {} pulses, {} steps)",
                    t.clock_class, t.offset_ns, t.pulses, t.steps
                ),
                json!({"state": state, "clock_class": t.clock_class, "offset_ns": t.offset_ns,
                    "pulses": t.pulses, "steps": t.steps}),
            )
        }
        None => (String::new(), Value::Null),
    };
    Ok((
        format!(
            "driver {} (generation {:#x}, {} connects), link {} {} Mb/s, port {}, offset {} ns, path delay {} ns, freq {:.3} ppb, gm {gm}, steps removed {}; clock scheme: {} clients refused, {} malformed requests, {} throttled",
            if s.driver_up { "up" } else { "DOWN" },
            s.generation,
            s.connects,
            if s.link_up { "up" } else { "down" },
            s.link_speed_mbps,
            s.port_state.name(),
            s.offset_ns,
            s.mean_path_delay_ns,
            s.freq_scaled_ppm as f64 / 65.536,
            s.steps_removed,
            s.clients_refused,
            s.requests_malformed,
            s.requests_throttled
        ) + &src_text,
        json!({"ok": true, "command": "status", "clock": clock, "driver_up": s.driver_up,
            "generation": s.generation, "connects": s.connects, "link_up": s.link_up,
            "link_speed_mbps": s.link_speed_mbps, "port_state": s.port_state.name(),
            "offset_ns": s.offset_ns, "mean_path_delay_ns": s.mean_path_delay_ns,
            "freq_ppb": s.freq_scaled_ppm as f64 / 65.536, "grandmaster": gm,
            "steps_removed": s.steps_removed, "clients_refused": s.clients_refused,
            "requests_malformed": s.requests_malformed,
            "requests_throttled": s.requests_throttled, "time_source": src_json}),
    ))
}

/// `stats`: The driver's counters.
fn stats_report(c: &Client, clock: u32) -> Result<(String, Value), Error> {
    let s = c.stats(clock)?;
    let v = json!({"ok": true, "command": "stats", "clock": clock,
        "tx_requested": s.tx_requested, "tx_delivered": s.tx_delivered,
        "tx_skipped": s.tx_skipped, "tx_timeouts": s.tx_timeouts, "tx_lost": s.tx_lost,
        "quirk_recoveries": s.quirk_recoveries, "interrupts": s.interrupts,
        "mmio_reads": s.mmio_reads, "mmio_writes": s.mmio_writes,
        "tx_frames": s.tx_frames, "rx_frames": s.rx_frames,
        "rx_timestamped": s.rx_timestamped, "rx_other": s.rx_other});
    Ok((format!("{s:?}"), v))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cmd(words: &[&str]) -> Result<Command, Error> {
        parse(words.iter().map(OsString::from)).map(|a| a.unwrap().command)
    }

    #[test]
    fn tstamp_parses_and_bad_values_are_usage_errors() {
        assert_eq!(
            cmd(&["tstamp", "off", "ptp_v2_event"]).unwrap(),
            Command::Tstamp {
                tx_on: false,
                rx_filter: ptp_ipc::RxFilter::PtpV2Event
            }
        );
        assert_eq!(
            cmd(&["tstamp", "on", "ALL"]).unwrap(),
            Command::Tstamp {
                tx_on: true,
                rx_filter: ptp_ipc::RxFilter::All
            }
        );
        for bad in [
            &["tstamp"][..],
            &["tstamp", "on"],
            &["tstamp", "yes", "all"],
            &["tstamp", "on", "ptp_v3"],
        ] {
            assert!(matches!(cmd(bad), Err(Error::Usage(_))), "{bad:?}");
        }
    }

    #[test]
    fn words_a_command_does_not_take_are_usage_errors() {
        assert_eq!(
            cmd(&["-n", "1000", "bench"]).unwrap(),
            Command::Bench { n: 1000 }
        );
        let Err(Error::Usage(e)) = cmd(&["bench", "1000"]) else {
            panic!("bench 1000 accepted")
        };
        assert!(e.contains("-n N"), "{e}");
        assert_eq!(cmd(&["adj", "-0.5"]).unwrap(), Command::Adj(-500_000_000));
        for bad in [
            &["get", "x"][..],
            &["status", "0"],
            &["adj", "1", "2"],
            &["tstamp", "on", "all", "x"],
            &["compare", "/s", "1", "2"],
        ] {
            assert!(matches!(cmd(bad), Err(Error::Usage(_))), "{bad:?}");
        }
        assert!(cmd(&["compare", "/s", "1"]).is_ok());
        assert!(cmd(&["set"]).is_ok() && cmd(&["set", "5"]).is_ok());
    }

    #[test]
    fn pin_verbs_parse_as_testptp_numbers_them_and_bad_ones_are_usage_errors() {
        use pins::PinCommand as P;
        use ptp_ipc::PinFunction as F;
        let pin = |w: &[&str]| match cmd(w) {
            Ok(Command::Pin(p)) => p,
            other => panic!("{w:?}: {other:?}"),
        };
        assert_eq!(pin(&["pins"]), P::List);
        assert_eq!(
            pin(&["pin", "1", "extts"]),
            P::Set {
                pin: 1,
                func: F::ExtTs,
                chan: 0
            }
        );
        // testptp -L 2,2 with -i 1.
        assert_eq!(
            pin(&["pin", "2", "2", "1"]),
            P::Set {
                pin: 2,
                func: F::PerOut,
                chan: 1
            }
        );
        assert_eq!(pin(&["extts", "1", "off"]), P::ExtTs { chan: 1, on: false });
        assert_eq!(
            pin(&["-n", "5", "--timeout", "2.5", "extts", "0"]),
            P::ExtTsRead {
                chan: 0,
                count: 5,
                timeout: std::time::Duration::from_millis(2500)
            }
        );
        assert_eq!(
            pin(&["perout", "0", "1"]),
            P::PerOut {
                chan: 0,
                period_ns: 1_000_000_000,
                start_ns: None
            }
        );
        assert_eq!(
            pin(&["perout", "1", "0.5", "100.25"]),
            P::PerOut {
                chan: 1,
                period_ns: 500_000_000,
                start_ns: Some(100_250_000_000)
            }
        );
        assert_eq!(pin(&["pps", "on"]), P::Pps { on: true });
        for bad in [
            &["pin"][..],
            &["pin", "1"],
            &["pin", "1", "physync"],
            &["pin", "1", "3"],
            &["pin", "300", "extts"],
            &["pin", "1", "extts", "0", "x"],
            &["extts"],
            &["extts", "0"],
            &["extts", "0", "maybe"],
            &["-n", "2", "extts", "0", "on"],
            &["-n", "0", "extts", "0"],
            &["--timeout", "0", "-n", "1", "extts", "0"],
            &["perout", "0"],
            &["perout", "0", "-1"],
            &["perout", "0", "1", "2", "3"],
            &["pps"],
            &["pps", "on", "now"],
        ] {
            assert!(matches!(cmd(bad), Err(Error::Usage(_))), "{bad:?}");
        }
    }
}
