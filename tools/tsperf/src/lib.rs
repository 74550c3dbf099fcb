//! tsperf: measures the TX-timestamp path the way ntpperf measures a server (reference
//! ptp-and-benchmarks §3): a ramp of timestamp requests through the real path — a separate
//! driver process (igcd on an emulated i225/i226, or igbd on an i210/i211/i350/82576: `--nic`,
//! several side by side) with a loopback wire, driven over its driver channel as ptpd drives it
//! — with per-step delivery classes and latency.
//!
//! Modes: the ramp (default); `--compare-sets` (1 set vs 4 sets, capacity ratio);
//! `--kernel-baseline` (the same ramp against Linux software TX timestamps on loopback in a
//! private network namespace); `--rx` (received-frame throughput by RX filter).
//! Any of them can run under load: `--load N` keeps N busy processes beside the daemons
//! throughout and names them, with the CPU time they got, in every summary.
//!
//! Issue 16's table (driver channel over the socket vs the shared-memory ring, interleaved in
//! each run, beside the kernel; about 6 minutes on the 2-core development machine):
//! `tsperf --compare-sets --kernel-baseline --channel socket,ring --rate 10000,30000 --runs 5
//! --json`, then `tsperf --rx --channel socket,ring --runs 5 --json` (RX frames/s).

pub mod driver;
pub mod figures;
pub mod fixed;
pub mod floor;
pub mod kernel;
pub mod load;
pub mod ramp;
pub mod report;
pub mod rx;
pub mod soak;
pub mod stats;
pub mod step;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use ptp_ipc::transport::ChannelMode;

use crate::driver::{Driver, IgcdCommand, daemon_for};
use crate::load::{Load, LoadGuard, LoadKind};
use crate::ramp::{RampConfig, Target};
use crate::report::{CompareSets, RunFigures, TargetSummary};
use crate::stats::Latency;
use crate::step::Step;

pub const USAGE: &str = "\
usage: tsperf [options]
  (default)            ramp TX-timestamp requests through the driver of each --nic (igcd on
                       an emulated i225 by default); the capacities side by side
  --compare-sets       run the ramp with 1 and with 4 timestamp sets; print both capacities
                       (ntpperf: highest rate with ≥ 99.9 % / ≥ 99 % on time, 0 lost) and ratios
  --kernel-baseline    also run the ramp against Linux software TX timestamps (SO_TIMESTAMPING,
                       UDP on loopback in a private network namespace; needs root)
  --rx                 received-frame throughput through igcd with RX filter NONE, PTP_V2_EVENT
                       and ALL, side by side
  --soak SECS          a ramp (bound it with --limit-secs), then SECS at the highest rate the
                       daemon sustained (capacity at 99.9 % on time, else the highest step
                       with 0 lost and ≥ 99 % stamped at any latency) on the same
                       daemon in 5 s steps: its RSS, fds and threads at the soak's start and end
                       (flat: RSS within 1 MiB, fds and threads equal) and every stamp accounted
                       for (tsperf's classes and the daemon's Stats); exit 1 if either fails
  --rate LIST          fixed-rate steps (requests/s, comma-separated) instead of a ramp: delivery
                       latency p50/p99/p999, wake-ups per stamp (voluntary context switches of
                       tsperf's reader thread and of all igcd threads, /proc), CPU per stamp
                       (schedstat of igcd and of tsperf), the client ring's counters; with
                       --compare-sets, run after each run's ramps on 4 sets
options:
  --channel LIST       the driver channel's transport, comma-separated: ring (shared-memory
                       ring, the default, as ptpd) | socket (SOCK_SEQPACKET only); with several,
                       each run measures each in turn (interleaved)
  --nic LIST           emulated NICs, comma-separated: i225|i226 (igcd) or i210|i211|i350|82576
                       (igbd, one TX timestamp pair); each run ramps each NIC in turn with a
                       fresh daemon; --compare-sets and --rx take one i225|i226 (default i225)
  --kernel-baseline    with --compare-sets: the kernel ramp in each run too
  --sets N             TX timestamp sets for the plain ramp (default: 4 on i225/i226, 1 on igb
                       parts, which have no more)
  --start RATE         first rate, requests/s (default 1000)
  --max RATE           last rate (default 400000)
  --step-secs S        length of a step (default 1)
  --limit-secs S       end a ramp after S (default 120)
  --runs N             repeat the whole ramp (or both --compare-sets ramps) N times, a fresh igcd
                       each time; per-run figures, medians and ranges (default 1; --rx: rounds,
                       default 5)
  --json               one JSON object per step, then a summary object
  --wire loopback|none what the emulated NIC is cabled to (default loopback: every frame comes
                       back and is delivered to the requester as a received PTP frame)
  --igcd PATH          the igcd binary (default: next to tsperf)
  --igbd PATH          the igbd binary (default: next to tsperf)
  --daemon-arg ARG     one more argument for every igcd/igbd tsperf starts (repeatable, in
                       order; e.g. --daemon-arg=--irq-mode --daemon-arg=napi)
  --load N             N busy processes (nice 0, SCHED_OTHER) beside the daemons for the whole
                       run, every mode and run; their CPU seconds in every summary (0..=64,
                       default 0: none)
  --load-kind cpu|mem  what each --load process does: cpu (a shell busy loop, the default) or
                       mem (dd zero-filling a 64 MiB buffer over and over: memory bandwidth)
  --rt                 real-time service on the time path, as ptpd's `rt = true`: each daemon
                       gets --rt (its IRQ and channel threads SCHED_FIFO 50) and tsperf's
                       reader thread, which stands in for ptpd's driver link, runs SCHED_FIFO 50
                       too; a refusal is logged (default: normal priority)
  --rt-priority PRIO   --rt at PRIO (1..=98)
  --cpu N              pin those threads to CPU N
  --busy-poll-us US    both ends of the ring keep polling up to US µs after each message before
                       sleeping (each daemon gets --busy-poll-us; 0..=1000, default 0); the
                       fixed-rate table's CPU per stamp shows what it costs
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ramp,
    CompareSets,
    KernelBaseline,
    Rx,
    /// `--rate` without `--compare-sets`: fixed-rate steps.
    Fixed,
    /// `--soak SECS`: a short ramp, then SECS at its capacity on the same daemon.
    Soak,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    /// TX timestamp sets asked for (`--sets`); `None`: each NIC's maximum.
    pub sets: Option<u8>,
    pub json: bool,
    pub ramp: RampConfig,
    /// The emulated NICs (`--nic`), ramped in this order.
    pub nics: Vec<String>,
    pub igcd: IgcdCommand,
    pub igbd: IgcdCommand,
    pub wire: String,
    /// Whole ramps (or compare-sets pairs) to run; `--rx`: interleaved rounds.
    pub runs: usize,
    /// Driver channel transports to measure (`--channel`), each in turn.
    pub channels: Vec<ChannelMode>,
    /// Fixed rates (`--rate`).
    pub rates: Vec<f64>,
    /// `--compare-sets --kernel-baseline`: the kernel ramp in each compare run.
    pub with_kernel: bool,
    /// `--soak SECS`: how long the soak runs.
    pub soak: Duration,
    /// `--load N`, `--load-kind`: what runs beside the daemons (and, once started, its pids).
    pub load: Load,
}

/// How to start each daemon: `igcd` and `igbd` commands (a binary, or `ptplab` + a verb).
#[derive(Debug, Clone, Default)]
pub struct Daemons {
    pub igcd: IgcdCommand,
    pub igbd: IgcdCommand,
}

impl Options {
    /// The daemon driving `nic` and how to start it.
    pub fn daemon(&self, nic: &str) -> (&'static str, &IgcdCommand) {
        match daemon_for(nic) {
            Some("igbd") => ("igbd", &self.igbd),
            _ => ("igcd", &self.igcd),
        }
    }

    /// The TX timestamp sets a ramp on `nic` uses: `--sets`, or all the part has.
    pub fn sets_for(&self, nic: &str) -> u8 {
        self.sets.unwrap_or(max_sets(nic))
    }
}

/// TX timestamp sets of an emulated NIC: 4 on igc parts, one pair on igb parts.
fn max_sets(nic: &str) -> u8 {
    if daemon_for(nic) == Some("igbd") {
        1
    } else {
        4
    }
}

/// The command line as read, before the checks and defaults that need all of it.
struct Cmdline {
    o: Options,
    /// `--kernel-baseline`: a mode of its own, or the kernel ramp within `--compare-sets`.
    kernel: bool,
    /// `--daemon-arg`s, added to both daemon commands once the whole line is read.
    daemon_args: Vec<OsString>,
}

pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    daemons: Daemons,
) -> Result<Option<Options>, String> {
    use lexopt::prelude::*;
    let mut c = Cmdline {
        o: Options {
            mode: Mode::Ramp,
            sets: None,
            json: false,
            ramp: RampConfig::default(),
            nics: vec!["i225".into()],
            igcd: daemons.igcd,
            igbd: daemons.igbd,
            wire: "loopback".into(),
            runs: 0,
            channels: vec![ChannelMode::Ring],
            rates: Vec::new(),
            with_kernel: false,
            soak: Duration::ZERO,
            load: Load::default(),
        },
        kernel: false,
        daemon_args: Vec::new(),
    };
    let mut p = lexopt::Parser::from_args(args);
    while let Some(arg) = p.next().map_err(bad)? {
        // Owned, so the option groups below can take the option's value from `p`.
        let name = match arg {
            Long("help") | Short('h') => return Ok(None),
            Long(name) => name.to_string(),
            _ => return Err(bad(arg.unexpected())),
        };
        let known = mode_option(&name, &mut p, &mut c)?
            || ramp_option(&name, &mut p, &mut c.o)?
            || daemon_option(&name, &mut p, &mut c)?
            || load_option(&name, &mut p, &mut c.o)?;
        if !known {
            return Err(bad(Long(&name).unexpected()));
        }
    }
    finish(c).map(Some)
}

fn bad(e: lexopt::Error) -> String {
    e.to_string()
}

/// The option's value, parsed.
fn parsed<T: std::str::FromStr>(p: &mut lexopt::Parser) -> Result<T, String>
where
    T::Err: Into<Box<dyn std::error::Error + Send + Sync + 'static>>,
{
    use lexopt::ValueExt;
    p.value().map_err(bad)?.parse().map_err(bad)
}

/// The option's value as a (UTF-8) string.
fn string(p: &mut lexopt::Parser) -> Result<String, String> {
    use lexopt::ValueExt;
    p.value().map_err(bad)?.string().map_err(bad)
}

fn secs(v: f64, what: &str) -> Result<Duration, String> {
    if v.is_finite() && v > 0.0 && v < 3600.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(format!("{what} must be within (0, 3600) seconds"))
    }
}

/// The modes and the output form; false if `name` is not one of them.
fn mode_option(name: &str, p: &mut lexopt::Parser, c: &mut Cmdline) -> Result<bool, String> {
    let o = &mut c.o;
    match name {
        "compare-sets" => o.mode = Mode::CompareSets,
        "kernel-baseline" => c.kernel = true,
        "rx" => o.mode = Mode::Rx,
        "soak" => {
            o.mode = Mode::Soak;
            o.soak = Duration::from_secs(parsed(p)?);
            if o.soak.is_zero() || o.soak > Duration::from_secs(24 * 3600) {
                return Err("--soak must be 1..=86400 seconds".into());
            }
        }
        "json" => o.json = true,
        _ => return Ok(false),
    }
    Ok(true)
}

/// The ramp, its repeats and the fixed-rate steps; false if `name` is not one of them.
fn ramp_option(name: &str, p: &mut lexopt::Parser, o: &mut Options) -> Result<bool, String> {
    match name {
        "sets" => o.sets = Some(parsed(p)?),
        "start" => o.ramp.start_rate = parsed(p)?,
        "max" => o.ramp.max_rate = parsed(p)?,
        "step-secs" => o.ramp.step = secs(parsed(p)?, "--step-secs")?,
        "limit-secs" => o.ramp.time_limit = secs(parsed(p)?, "--limit-secs")?,
        "runs" => {
            o.runs = parsed(p)?;
            if !(1..=100).contains(&o.runs) {
                return Err("--runs must be 1..=100".into());
            }
        }
        "rate" => {
            o.rates = string(p)?
                .split(',')
                .map(|r| r.parse::<f64>().map_err(|e| format!("--rate {r:?}: {e}")))
                .collect::<Result<_, _>>()?;
            if o.rates.iter().any(|r| !(1.0..=10e6).contains(r)) {
                return Err("--rate must be within 1..=10000000".into());
            }
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// What is measured and how its daemons start; false if `name` is not one of these options.
fn daemon_option(name: &str, p: &mut lexopt::Parser, c: &mut Cmdline) -> Result<bool, String> {
    let o = &mut c.o;
    match name {
        "nic" => o.nics = string(p)?.split(',').map(str::to_string).collect(),
        "channel" => {
            o.channels = string(p)?
                .split(',')
                .map(str::parse)
                .collect::<Result<_, _>>()
                .map_err(|e| format!("--channel: {e}"))?;
        }
        "wire" => {
            o.wire = string(p)?;
            if !matches!(o.wire.as_str(), "loopback" | "none") {
                return Err("--wire must be loopback or none".into());
            }
        }
        "igcd" => o.igcd = vec![p.value().map_err(bad)?],
        "igbd" => o.igbd = vec![p.value().map_err(bad)?],
        "daemon-arg" => c.daemon_args.push(p.value().map_err(bad)?),
        _ => return Ok(false),
    }
    Ok(true)
}

/// The load run beside the daemons; false if `name` is not one of its options.
fn load_option(name: &str, p: &mut lexopt::Parser, o: &mut Options) -> Result<bool, String> {
    match name {
        "load" => {
            o.load.procs = parsed(p)?;
            if o.load.procs > load::MAX_PROCS {
                return Err(format!("--load must be 0..={}", load::MAX_PROCS));
            }
        }
        "load-kind" => o.load.kind = LoadKind::parse(&string(p)?)?,
        "rt" => {
            o.load
                .rt
                .priority
                .get_or_insert(ptp_ipc::rt::DEFAULT_PRIORITY);
        }
        "rt-priority" => o.load.rt.priority = Some(ptp_ipc::rt::parse_priority(&string(p)?)?),
        "cpu" => o.load.rt.cpu = Some(parsed(p)?),
        "busy-poll-us" => {
            let us: u64 = parsed(p)?;
            if us > 1000 {
                return Err("--busy-poll-us must be 0..=1000".into());
            }
            o.load.busy_poll = Duration::from_micros(us);
        }
        _ => return Ok(false),
    }
    Ok(true)
}

/// The checks and defaults that need the whole command line.
fn finish(c: Cmdline) -> Result<Options, String> {
    let Cmdline {
        mut o,
        kernel,
        daemon_args,
    } = c;
    if !(o.ramp.start_rate >= 1.0
        && o.ramp.start_rate <= o.ramp.max_rate
        && o.ramp.max_rate <= 10e6)
    {
        return Err("need 1 ≤ --start ≤ --max ≤ 10000000".into());
    }
    match (kernel, o.mode) {
        (true, Mode::CompareSets) => o.with_kernel = true,
        (true, _) => o.mode = Mode::KernelBaseline,
        _ => {}
    }
    if o.mode == Mode::Ramp && !o.rates.is_empty() {
        o.mode = Mode::Fixed;
    }
    check_nics(&o)?;
    if o.load.kind != LoadKind::default() && o.load.procs == 0 {
        return Err("--load-kind needs --load N (N ≥ 1)".into());
    }
    // After the whole command line: `--igcd PATH` replaces the command, these follow it.
    let mut rt_args: Vec<OsString> = o.load.rt.to_args().into_iter().map(Into::into).collect();
    if !o.load.busy_poll.is_zero() {
        let us = o.load.busy_poll.as_micros().to_string();
        rt_args.extend(["--busy-poll-us".into(), us.into()]);
    }
    let daemon_args: Vec<OsString> = rt_args.into_iter().chain(daemon_args).collect();
    o.igcd.extend(daemon_args.iter().cloned());
    o.igbd.extend(daemon_args);
    if o.runs == 0 {
        o.runs = if o.mode == Mode::Rx {
            rx::DEFAULT_ROUNDS
        } else {
            1
        };
    }
    Ok(o)
}

/// Checks `--nic` and `--sets` against each other and the mode: igb parts have one TX stamp
/// pair; --compare-sets and --rx measure one igc part.
fn check_nics(o: &Options) -> Result<(), String> {
    for nic in &o.nics {
        if daemon_for(nic).is_none() {
            return Err(format!(
                "unknown --nic {nic:?} (i225, i226, i210, i211, i350 or 82576)"
            ));
        }
        let max = max_sets(nic);
        if o.sets.is_some_and(|n| !(1..=max).contains(&n)) {
            return Err(format!("--sets must be 1..={max} on the {nic}"));
        }
    }
    let one_igc = matches!(&o.nics[..], [n] if daemon_for(n) == Some("igcd"));
    if matches!(o.mode, Mode::CompareSets | Mode::Rx) && !one_igc {
        return Err("--compare-sets and --rx run on one i225 or i226".into());
    }
    Ok(())
}

/// Entry point shared by the `tsperf` binary and `ptplab tsperf ...` (which passes itself as
/// the daemon commands).
pub fn main_with_args(args: impl IntoIterator<Item = OsString>, daemons: Daemons) -> ExitCode {
    let mut o = match parse(args, daemons) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{USAGE}");
            return ExitCode::SUCCESS;
        }
        Err(e) => {
            eprintln!("tsperf: {e}\n\n{USAGE}");
            return ExitCode::from(2);
        }
    };
    match run_loaded(&mut o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tsperf: {e}");
            ExitCode::FAILURE
        }
    }
}

/// Runs the mode with `--load`'s processes beside it from start to end; the guard kills them
/// however this returns or unwinds.
fn run_loaded(o: &mut Options) -> Result<(), String> {
    let mut load = LoadGuard::start(o.load.procs, o.load.kind)?;
    o.load.pids = load.pids();
    driver::set_reader(o.load.rt, o.load.busy_poll);
    match o.mode {
        Mode::Ramp => run_ramp(o),
        Mode::CompareSets => compare_sets(o),
        Mode::KernelBaseline => kernel_baseline(o),
        Mode::Rx => rx::run(o),
        Mode::Fixed => fixed::run(o),
        Mode::Soak => soak::run(o, o.soak),
    }?;
    // A load process gone early would make the figures lie about the load they name.
    load.check()
}

/// Runs one ramp against `t`, printing each step as it completes.
fn ramp_target<T: Target>(t: &mut T, o: &Options, run: usize) -> Vec<Step> {
    let name = t.name();
    if !o.json {
        println!("# run {run}: {name}");
        println!("{}", ramp::HEADER);
    }
    ramp::run(t, &o.ramp, |s| {
        if o.json {
            println!("{}", s.to_json(run, &name));
        } else {
            println!("{}", s.row());
        }
    })
}

/// One ramp of `nic`'s daemon with `sets` TX timestamp sets, a fresh daemon, added to `runs`.
fn driver_runs(
    o: &Options,
    (nic, mode): (&str, ChannelMode),
    sets: u8,
    runs: &mut TargetSummary,
    run: usize,
) -> Result<(), String> {
    let mut d = Driver::start(o.daemon(nic).1, nic, sets, &o.wire, mode)?;
    runs.target = d.name();
    let steps = ramp_target(&mut d, o, run);
    runs.runs.push(RunFigures::of(steps));
    Ok(())
}

fn empty(target: &str) -> TargetSummary {
    TargetSummary {
        target: target.into(),
        runs: Vec::new(),
    }
}

fn print_summary(o: &Options, mode: &str, targets: &[&TargetSummary]) {
    let wake = wakeup_ns();
    if o.json {
        let mut v = json!({"summary": true, "mode": mode, "runs": o.runs, "wakeup_ns": wake});
        o.load.tag(&mut v);
        v["targets"] = targets
            .iter()
            .map(|t| t.to_json())
            .collect::<Vec<_>>()
            .into();
        println!("{v}");
    } else {
        println!(
            "== ntpperf capacity: the highest rate with ≥ P % of stamps on time (≤ 1 ms) and 0 lost; \
             medians (range) over {} run{}",
            o.runs,
            if o.runs == 1 { "" } else { "s" }
        );
        o.load.print_line();
        for t in targets {
            for l in t.lines() {
                println!("{l}");
            }
        }
        println!(
            "one blocking wake-up on this machine ≈ {:.1} µs",
            wake as f64 / 1e3
        );
    }
}

/// Every (`--nic`, `--channel`) pair, NIC-major, in order.
fn nic_channels(o: &Options) -> Vec<(&str, ChannelMode)> {
    o.nics
        .iter()
        .flat_map(|n| o.channels.iter().map(move |c| (n.as_str(), *c)))
        .collect()
}

/// A summary per (`--nic`, `--channel`), in order.
fn nic_targets(o: &Options) -> Vec<TargetSummary> {
    nic_channels(o)
        .iter()
        .map(|(n, c)| empty(&format!("{} ({} channel)", o.daemon(n).0, c.name())))
        .collect()
}

/// One ramp of every `--nic` over every `--channel` in turn (run `run`), into `targets`.
fn ramp_each_nic(o: &Options, targets: &mut [TargetSummary], run: usize) -> Result<(), String> {
    for (nc, t) in nic_channels(o).into_iter().zip(targets.iter_mut()) {
        driver_runs(o, nc, o.sets_for(nc.0), t, run)?;
    }
    Ok(())
}

fn run_ramp(o: &Options) -> Result<(), String> {
    let mut t = nic_targets(o);
    for run in 1..=o.runs {
        ramp_each_nic(o, &mut t, run)?;
    }
    print_summary(o, "ramp", &t.iter().collect::<Vec<_>>());
    Ok(())
}

/// `--compare-sets`: per run, each channel's 1-set and 4-set ramps (and the kernel's, with
/// `--kernel-baseline`; the `--rate` steps on 4 sets), interleaved so drift hits all alike.
fn compare_sets(o: &Options) -> Result<(), String> {
    let nic = o.nics[0].as_str();
    let mut pairs: Vec<CompareSets> = o
        .channels
        .iter()
        .map(|c| CompareSets {
            one: empty(&format!("1 set ({} channel)", c.name())),
            four: empty(&format!("4 sets ({} channel)", c.name())),
        })
        .collect();
    let mut kernel = empty("linux software TX timestamps");
    let mut fixed = fixed::Table::new(o);
    for run in 1..=o.runs {
        if o.with_kernel {
            kernel_ramp(o, &mut kernel, run)?;
        }
        for (c, pair) in o.channels.iter().zip(pairs.iter_mut()) {
            driver_runs(o, (nic, *c), 1, &mut pair.one, run)?;
            driver_runs(o, (nic, *c), 4, &mut pair.four, run)?;
            fixed.run_all(o, (nic, *c), 4, run)?;
        }
    }
    for (c, pair) in o.channels.iter().zip(&pairs) {
        if o.json {
            let mut v = pair.to_json();
            v["channel"] = c.name().into();
            o.load.tag(&mut v);
            println!("{v}");
        } else {
            println!("== {} channel", c.name());
            o.load.print_line();
            for l in pair.lines() {
                println!("{l}");
            }
        }
    }
    if o.with_kernel {
        print_summary(o, "kernel_baseline", &[&kernel]);
    }
    fixed.print(o);
    Ok(())
}

/// One kernel-baseline ramp (run `run`), into `k`.
fn kernel_ramp(o: &Options, k: &mut TargetSummary, run: usize) -> Result<(), String> {
    let mut kt = kernel::KernelTarget::start()?;
    k.target = kt.name();
    let steps = ramp_target(&mut kt, o, run);
    k.runs.push(RunFigures::of(steps));
    Ok(())
}

fn kernel_baseline(o: &Options) -> Result<(), String> {
    let mut k = empty("linux software TX timestamps");
    let mut d = nic_targets(o);
    for run in 1..=o.runs {
        kernel_ramp(o, &mut k, run)?;
        ramp_each_nic(o, &mut d, run)?;
    }
    let mut all = vec![&k];
    all.extend(d.iter());
    print_summary(o, "kernel_baseline", &all);
    Ok(())
}

/// The latency of one blocking wake-up on this machine (a thread blocked on a channel, woken by
/// another): the unit the delivery target is expressed in. Median of 2000 ping-pongs / 2.
pub fn wakeup_ns() -> u64 {
    use std::time::Instant;
    let (a_tx, a_rx) = crossbeam_channel::bounded::<()>(0);
    let (b_tx, b_rx) = crossbeam_channel::bounded::<()>(0);
    let echo = std::thread::spawn(move || {
        while a_rx.recv().is_ok() {
            if b_tx.send(()).is_err() {
                break;
            }
        }
    });
    let mut h = Latency::default();
    for _ in 0..2000 {
        let t = Instant::now();
        if a_tx.send(()).is_err() || b_rx.recv().is_err() {
            break;
        }
        h.record_ns(t.elapsed().as_nanos() as u64 / 2);
    }
    drop(a_tx);
    let _ = echo.join();
    h.quantile_ns(0.5)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn opts(args: &[&str]) -> Result<Options, String> {
        let daemons = Daemons {
            igcd: vec!["igcd-bin".into()],
            igbd: vec!["igbd-bin".into()],
        };
        parse(args.iter().map(OsString::from), daemons).map(|o| o.expect("not --help"))
    }

    #[test]
    fn nic_list_picks_each_daemon_and_its_sets() {
        let o = opts(&["--nic", "i225,i210,82576"]).unwrap();
        assert_eq!(o.nics, ["i225", "i210", "82576"]);
        let picked: Vec<(&str, u8)> = o
            .nics
            .iter()
            .map(|n| (o.daemon(n).0, o.sets_for(n)))
            .collect();
        assert_eq!(picked, [("igcd", 4), ("igbd", 1), ("igbd", 1)]);
        assert_eq!(o.daemon("i350").1, &vec![OsString::from("igbd-bin")]);
        // --sets 1 applies to every NIC; the default NIC is the i225.
        let o = opts(&["--nic", "i226,i350", "--sets", "1"]).unwrap();
        assert_eq!(o.sets_for("i226"), 1);
        assert_eq!(opts(&[]).unwrap().nics, ["i225"]);
        for bad in [
            &["--nic", "i225,"][..],
            &["--nic", "i210", "--sets", "2"],
            &["--nic", "i225", "--sets", "5"],
            &["--nic", "i350", "--rx"],
            &["--channel", "ring,shm"],
            &["--rate", "0"],
        ] {
            assert!(opts(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn rt_reaches_the_daemons_and_the_reader() {
        let o = parse(
            ["--rt", "--cpu", "1"].map(OsString::from),
            Daemons {
                igcd: vec!["igcd".into()],
                igbd: vec!["igbd".into()],
            },
        )
        .unwrap()
        .unwrap();
        assert_eq!(o.load.rt.priority, Some(50));
        let want: Vec<OsString> = ["igcd", "--rt-priority", "50", "--cpu", "1"]
            .map(OsString::from)
            .into();
        assert_eq!(o.igcd, want);
        let line = o.load.line().unwrap();
        assert!(
            line.contains("SCHED_FIFO 50") && line.contains("pinned to CPU 1"),
            "{line}"
        );
    }

    #[test]
    fn daemon_args_follow_every_daemon_command_in_order() {
        let o = opts(&[
            "--daemon-arg=--irq-mode",
            "--igcd",
            "my-igcd",
            "--daemon-arg",
            "napi",
        ])
        .unwrap();
        let want = |p: &str| -> Vec<OsString> {
            [p, "--irq-mode", "napi"]
                .iter()
                .map(OsString::from)
                .collect()
        };
        assert_eq!(o.igcd, want("my-igcd"));
        assert_eq!(o.igbd, want("igbd-bin"));
        assert_eq!(opts(&[]).unwrap().igcd, vec![OsString::from("igcd-bin")]);
    }

    #[test]
    fn load_takes_0_to_64_processes_of_a_kind() {
        let o = opts(&[]).unwrap();
        assert_eq!(
            (o.load.procs, o.load.kind),
            (0, LoadKind::Cpu),
            "no load by default"
        );
        assert_eq!(opts(&["--load", "0"]).unwrap().load.procs, 0);
        let o = opts(&["--load", "3"]).unwrap();
        assert_eq!((o.load.procs, o.load.kind), (3, LoadKind::Cpu));
        let o = opts(&["--load-kind", "mem", "--load=64"]).unwrap();
        assert_eq!((o.load.procs, o.load.kind), (64, LoadKind::Mem));
        let e = opts(&["--load", "65"]).unwrap_err();
        assert!(e.contains("0..=64"), "{e}");
        for bad in [
            &["--load", "x"][..],
            &["--load", "-1"],
            &["--load"],
            &["--load", "1", "--load-kind", "gpu"],
            &["--load-kind", "mem"],
        ] {
            assert!(opts(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn channels_rates_and_the_kernel_with_compare_sets() {
        let o = opts(&[]).unwrap();
        assert_eq!(o.channels, [ChannelMode::Ring], "ring by default, as ptpd");
        let o = opts(&["--channel", "socket,ring", "--rate", "10000,50000"]).unwrap();
        assert_eq!(o.channels, [ChannelMode::Socket, ChannelMode::Ring]);
        assert_eq!(
            (o.mode, o.rates.as_slice()),
            (Mode::Fixed, &[10000.0, 50000.0][..])
        );
        let o = opts(&["--kernel-baseline", "--compare-sets", "--rate", "10000"]).unwrap();
        assert_eq!((o.mode, o.with_kernel), (Mode::CompareSets, true));
        let o = opts(&["--kernel-baseline"]).unwrap();
        assert_eq!((o.mode, o.with_kernel), (Mode::KernelBaseline, false));
    }
}
