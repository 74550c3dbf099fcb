//! A cable end on a Linux TAP device (`ptplab tap-bridge`): frames pass between an emulated
//! NIC's wire (one [`UnixDatagramWire`](ptp_emu::wire::UnixDatagramWire) end) and a TAP
//! interface inside a network namespace, so unmodified Linux software (ptp4l -S, pmc, tcpdump)
//! meets the model on an ordinary interface while the model keeps its hardware timestamps.
//!
//! Time. The wire carries departure instants in CLOCK_MONOTONIC. TAP → wire: a frame departs
//! when the bridge reads it (Linux took its software TX stamp earlier, when the frame was
//! queued to the TAP). Wire → TAP: a frame is written once its arrival instant has come, and
//! Linux takes its software RX stamp during that write. Both directions therefore add a
//! latency ≥ 0 to the model's cable delay, so the path asymmetry a PTP peer sees is at most
//! the mean path delay it measures — the bound the TAP system tests use.
//!
//! Namespaces. The wire socket is made first, in the caller's network namespace (the
//! connecting end binds an *abstract* address, and abstract Unix names are per namespace);
//! only then does the process enter `/run/netns/NAME` and create the TAP there. Nothing is
//! configured in the caller's namespace.

use crate::signals::{StopFlag, stop_flag, stop_on_interrupt};
use std::ffi::OsString;
use std::io;
use std::net::Ipv4Addr;
use std::path::PathBuf;
use std::process::{Command, ExitCode, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};

use ptp_emu::phc::wrap_diff_ns;
use ptp_emu::truth::{TruthError, TruthReader};
use ptp_emu::wire::WireStats;

#[cfg(target_os = "linux")]
mod linux;
#[cfg(target_os = "linux")]
pub use linux::TapBridge;

/// The TAP's address when the lab runs UDPv4 over it (a private /24 that exists only inside
/// the namespace).
pub const TAP_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 1);
/// The lab host's UDPv4 source address on that /24 (same subnet, so Linux's reverse-path
/// filter accepts its frames).
pub const HOST_ADDR: Ipv4Addr = Ipv4Addr::new(10, 213, 0, 2);
/// Prefix length of [`TAP_ADDR`]'s subnet.
pub const PREFIX_LEN: u8 = 24;

pub const USAGE: &str = "\
usage: ptplab tap-bridge --wire bind:PATH|connect:PATH --netns NAME [options]
Joins one end of an emulated cable to a TAP interface created inside network namespace NAME
(which must exist: ip netns add NAME). Frames from the TAP depart on the wire when read; frames
from the wire are written to the TAP at their arrival instant. Needs root. Stops on SIGTERM or
SIGINT and prints its counters.
  --tap IFNAME            TAP interface name (default tap0)
  --addr A.B.C.D/LEN      IPv4 address of the TAP (default: none)
  --cable-delay-ns NS     delay of the cable towards the TAP (default 50)
  --ready-file PATH       created once the TAP is up (for scripts and the lab)
  --rt-priority PRIO      run SCHED_FIFO at PRIO (1..=98): the bridge's wake-up latency is
                          part of each frame's path, and a busy host delays an ordinary
                          process by up to milliseconds (default: not real-time)
";

/// Why the bridge cannot start or run.
#[derive(Debug, thiserror::Error)]
pub enum TapError {
    #[error("tap-bridge needs root (it enters a network namespace and creates a TAP device)")]
    NotRoot,
    #[error(
        "network namespace {name:?} not found (create it with `ip netns add {name}`): {source}"
    )]
    NoNetns { name: String, source: io::Error },
    #[error("entering network namespace {name:?}: {source}")]
    Setns { name: String, source: io::Error },
    #[error("/dev/net/tun is missing or unusable (is the tun module loaded?): {0}")]
    NoTun(io::Error),
    #[error("creating TAP {name:?}: {source}")]
    TapCreate { name: String, source: io::Error },
    #[error("configuring TAP {name:?} ({what}): {source}")]
    TapConfig {
        name: String,
        what: &'static str,
        source: io::Error,
    },
    #[error("wire {path}: {source}")]
    Wire { path: PathBuf, source: io::Error },
    #[error("waiting for frames: {0}")]
    Poll(io::Error),
    #[error("{0}")]
    Usage(String),
    #[error("ip netns {what} {name}: {detail}")]
    Netns {
        what: &'static str,
        name: String,
        detail: String,
    },
    #[error("SCHED_FIFO priority {priority}: {source}")]
    RealTime { priority: i32, source: io::Error },
    #[error("tap-bridge needs a Linux host")]
    Unsupported,
}

/// Which end of the wire socket the bridge holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WireEnd {
    Bind(PathBuf),
    Connect(PathBuf),
}

/// What the bridge is started with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BridgeOptions {
    pub wire: WireEnd,
    pub netns: String,
    pub tap: String,
    pub addr: Option<(Ipv4Addr, u8)>,
    pub cable_delay_ns: u64,
    pub ready_file: Option<PathBuf>,
    pub rt_priority: Option<i32>,
}

/// The bridge's counters (printed at exit).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BridgeStats {
    /// Frames read from the TAP and put on the wire.
    pub tap_to_wire: u64,
    /// Frames taken off the wire and written to the TAP.
    pub wire_to_tap: u64,
    /// Sum and maximum over those frames of how long after its arrival instant each was
    /// written (ns): the bridge's own share of the wire → TAP latency (the sender's share,
    /// from its departure instant to its datagram reaching the bridge, is included when the
    /// frame was already due on receipt).
    pub late_ns_sum: u64,
    pub late_ns_max: u64,
    /// Writes to the TAP that failed (frame dropped).
    pub tap_write_errors: u64,
    /// The wire end's own counters.
    pub wire: WireStats,
}

/// Interface names Linux accepts: 1..=15 bytes, no '/', ':' or whitespace.
pub fn valid_ifname(s: &str) -> bool {
    (1..16).contains(&s.len())
        && s.bytes()
            .all(|b| b.is_ascii_graphic() && b != b'/' && b != b':')
}

fn parse_addr(s: &str) -> Result<(Ipv4Addr, u8), TapError> {
    let bad = || TapError::Usage(format!("bad --addr {s:?} (A.B.C.D/LEN)"));
    let (a, l) = s.split_once('/').ok_or_else(bad)?;
    let len: u8 = l.parse().map_err(|_| bad())?;
    if !(1..=32).contains(&len) {
        return Err(bad());
    }
    Ok((a.parse().map_err(|_| bad())?, len))
}

fn value(p: &mut lexopt::Parser) -> Result<String, TapError> {
    p.value()
        .map_err(|e| TapError::Usage(e.to_string()))?
        .into_string()
        .map_err(|v| TapError::Usage(format!("not UTF-8: {v:?}")))
}

/// Parses `ptplab tap-bridge` arguments; `Ok(None)` for --help.
pub fn parse(args: impl IntoIterator<Item = OsString>) -> Result<Option<BridgeOptions>, TapError> {
    use lexopt::prelude::*;
    let bad = |e: lexopt::Error| TapError::Usage(e.to_string());
    let mut p = lexopt::Parser::from_args(args);
    let (mut wire, mut netns, mut addr, mut ready_file) = (None, None, None, None);
    let mut rt_priority = None;
    let (mut tap, mut cable_delay_ns) = ("tap0".to_string(), 50u64);
    while let Some(arg) = p.next().map_err(bad)? {
        match arg {
            Long("wire") => {
                let v = value(&mut p)?;
                wire = Some(match v.split_once(':') {
                    Some(("bind", p)) if !p.is_empty() => WireEnd::Bind(p.into()),
                    Some(("connect", p)) if !p.is_empty() => WireEnd::Connect(p.into()),
                    _ => return Err(TapError::Usage(format!("bad --wire {v:?}"))),
                });
            }
            Long("netns") => netns = Some(value(&mut p)?),
            Long("tap") => tap = value(&mut p)?,
            Long("addr") => addr = Some(parse_addr(&value(&mut p)?)?),
            Long("cable-delay-ns") => {
                cable_delay_ns = value(&mut p)?
                    .parse()
                    .ok()
                    .filter(|&d| d <= 1_000_000_000)
                    .ok_or_else(|| TapError::Usage("--cable-delay-ns must be ≤ 1 s".into()))?;
            }
            Long("ready-file") => ready_file = Some(PathBuf::from(value(&mut p)?)),
            Long("rt-priority") => {
                let prio = value(&mut p)?.parse().ok().filter(|p| (1..=98).contains(p));
                rt_priority = Some(
                    prio.ok_or_else(|| TapError::Usage("--rt-priority must be 1..=98".into()))?,
                );
            }
            Long("help") | Short('h') => return Ok(None),
            _ => return Err(bad(arg.unexpected())),
        }
    }
    let wire = wire.ok_or_else(|| TapError::Usage("--wire is required".into()))?;
    let netns = netns.ok_or_else(|| TapError::Usage("--netns is required".into()))?;
    for n in [&netns, &tap] {
        if !valid_ifname(n) {
            return Err(TapError::Usage(format!("bad name {n:?}")));
        }
    }
    Ok(Some(BridgeOptions {
        wire,
        netns,
        tap,
        addr,
        cable_delay_ns,
        ready_file,
        rt_priority,
    }))
}

static STOP: StopFlag = stop_flag();

/// `ptplab tap-bridge ARGS`.
pub fn main_with_args(args: impl IntoIterator<Item = OsString>) -> ExitCode {
    let opts = match parse(args) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tap-bridge: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    if let Err(code) = stop_on_interrupt("tap-bridge", &STOP) {
        return code;
    }
    match run(&opts) {
        Ok(s) => {
            println!(
                "tap-bridge: stopped; {} frames tap→wire, {} wire→tap, {} tap write errors, \
                 wire→tap written {} ns after arrival on average (max {} ns), wire {:?}",
                s.tap_to_wire,
                s.wire_to_tap,
                s.tap_write_errors,
                s.late_ns_sum.checked_div(s.wire_to_tap).unwrap_or(0),
                s.late_ns_max,
                s.wire
            );
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("tap-bridge: {e}");
            ExitCode::FAILURE
        }
    }
}

#[cfg(target_os = "linux")]
fn run(o: &BridgeOptions) -> Result<BridgeStats, TapError> {
    let mut b = TapBridge::open(o)?;
    println!(
        "tap-bridge: {} up in netns {} ({:?})",
        o.tap, o.netns, o.wire
    );
    if let Some(p) = &o.ready_file {
        std::fs::write(p, format!("{}\n", o.tap))
            .map_err(|e| TapError::Usage(format!("--ready-file {}: {e}", p.display())))?;
    }
    b.run(&STOP)
}

#[cfg(not(target_os = "linux"))]
fn run(_: &BridgeOptions) -> Result<BridgeStats, TapError> {
    Err(TapError::Unsupported)
}

/// A network namespace made with `ip netns add` and removed with `ip netns del` on drop
/// (including while a panicking test unwinds).
#[derive(Debug)]
pub struct Netns {
    name: String,
}

fn ip(args: &[&str], what: &'static str, name: &str) -> Result<(), TapError> {
    let out = Command::new("ip")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| TapError::Netns {
            what,
            name: name.into(),
            detail: format!("running ip: {e}"),
        })?;
    if out.status.success() {
        return Ok(());
    }
    Err(TapError::Netns {
        what,
        name: name.into(),
        detail: String::from_utf8_lossy(&out.stderr).trim().to_string(),
    })
}

impl Netns {
    /// Creates namespace `name` (an error if it exists).
    pub fn create(name: &str) -> Result<Self, TapError> {
        if !valid_ifname(name) {
            return Err(TapError::Usage(format!("bad namespace name {name:?}")));
        }
        ip(&["netns", "add", name], "add", name)?;
        Ok(Self { name: name.into() })
    }

    /// A new namespace with a name unique to this process: `PREFIX-<pid>-<n>`.
    pub fn unique(prefix: &str) -> Result<Self, TapError> {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let n = SEQ.fetch_add(1, Ordering::Relaxed);
        Self::create(&format!("{prefix}-{}-{n}", std::process::id()))
    }

    pub fn name(&self) -> &str {
        &self.name
    }

    /// `ip netns exec NAME PROGRAM`, not yet run.
    pub fn command(&self, program: &str) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", &self.name, program]);
        c
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        if let Err(e) = ip(&["netns", "del", &self.name], "del", &self.name) {
            eprintln!("{e}");
        }
    }
}

/// CLOCK_REALTIME − CLOCK_MONOTONIC now (ns), from the narrowest of 16 (mono, realtime, mono)
/// brackets, and that bracket's half-width. Constant while nobody steps the wall clock (NTP
/// slews both clocks alike).
pub fn realtime_minus_mono() -> (i128, u64) {
    (0..16)
        .map(|_| {
            let a = ptp_ipc::time::mono_ns();
            let r = ptp_ipc::time::realtime_ns();
            let b = ptp_ipc::time::mono_ns();
            let mid = (i128::from(a) + i128::from(b)) / 2;
            (i128::from(r) - mid, b.saturating_sub(a) / 2)
        })
        .min_by_key(|&(_, half)| half)
        .unwrap_or((0, u64::MAX))
}

/// An emulated PHC's offset from CLOCK_REALTIME (the clock `ptp4l -S` runs on), ns: its exact
/// time from the ground-truth record at a CLOCK_MONOTONIC instant, minus CLOCK_REALTIME at that
/// instant; and the uncertainty of the latter (half-width of the bracket, ns).
pub fn phc_minus_realtime(truth: &TruthReader) -> Result<(i64, u64), TruthError> {
    let (phc, t) = truth.now()?;
    let (d, half) = realtime_minus_mono();
    let rt = (i128::from(t) + d).clamp(0, i128::from(u64::MAX)) as u64;
    Ok((wrap_diff_ns(phc, rt), half))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Option<BridgeOptions>, TapError> {
        parse(args.iter().map(OsString::from))
    }

    #[test]
    fn options_parse_and_bad_ones_are_usage_errors() {
        let o = p(&[
            "--wire",
            "connect:/x/w.sock",
            "--netns",
            "ns1",
            "--addr",
            "10.213.0.1/24",
        ])
        .unwrap()
        .unwrap();
        assert_eq!(o.wire, WireEnd::Connect("/x/w.sock".into()));
        assert_eq!(o.tap, "tap0");
        assert_eq!(o.addr, Some((TAP_ADDR, 24)));
        assert_eq!(o.cable_delay_ns, 50);
        for bad in [
            &["--netns", "a"][..],
            &["--wire", "bind:/w"],
            &["--wire", "tcp:/w", "--netns", "a"],
            &["--wire", "bind:/w", "--netns", "a/b"],
        ] {
            assert!(matches!(p(bad), Err(TapError::Usage(_))), "{bad:?}");
        }
        for extra in [
            &["--tap", "0123456789abcdef"][..],
            &["--addr", "10.0.0.1"],
            &["--addr", "10.0.0.1/33"],
            &["--cable-delay-ns", "-1"],
            &["--rt-priority", "99"],
        ] {
            let mut bad = vec!["--wire", "bind:/w", "--netns", "a"];
            bad.extend_from_slice(extra);
            assert!(matches!(p(&bad), Err(TapError::Usage(_))), "{bad:?}");
        }
        assert!(p(&["--help"]).unwrap().is_none());
    }

    #[test]
    fn realtime_minus_mono_matches_the_clocks() {
        let (d, half) = realtime_minus_mono();
        let direct =
            i128::from(ptp_ipc::time::realtime_ns()) - i128::from(ptp_ipc::time::mono_ns());
        // Generous: two clock reads on a busy machine, not a precision claim.
        assert!((d - direct).abs() < 50_000_000, "{d} vs {direct}");
        assert!(half < 50_000_000);
    }
}
