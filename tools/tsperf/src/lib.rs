//! tsperf: measures the TX-timestamp path the way ntpperf measures a server (reference
//! ptp-and-benchmarks §3): a ramp of timestamp requests through the real path — a separate igcd
//! process on an emulated i225 with a loopback wire, driven over its driver channel as ptpd
//! drives it — with per-step delivery classes and latency.
//!
//! Modes: the ramp (default); `--compare-sets` (1 set vs 4 sets, capacity ratio);
//! `--kernel-baseline` (the same ramp against Linux software TX timestamps on loopback in a
//! private network namespace); `--rx` (received-frame throughput by RX filter).

pub mod driver;
pub mod kernel;
pub mod ramp;
pub mod rx;
pub mod stats;

use std::ffi::OsString;
use std::process::ExitCode;
use std::time::Duration;

use serde_json::json;

use crate::driver::{Driver, IgcdCommand};
use crate::ramp::{RampConfig, Step, Target};

pub const USAGE: &str = "\
usage: tsperf [options]
  (default)            ramp TX-timestamp requests through igcd on an emulated i225
  --compare-sets       run the ramp with 1 and with 4 timestamp sets; print the capacity ratio
  --kernel-baseline    also run the ramp against Linux software TX timestamps (SO_TIMESTAMPING,
                       UDP on loopback in a private network namespace; needs root)
  --rx                 received-frame throughput through igcd with RX filter NONE, PTP_V2_EVENT
                       and ALL, side by side
options:
  --sets N             TX timestamp sets for the plain ramp (default 4)
  --start RATE         first rate, requests/s (default 1000)
  --max RATE           last rate (default 400000)
  --step-secs S        length of a step (default 1)
  --limit-secs S       stop the whole run after S (default 120)
  --json               one JSON object per step, then a summary object
  --wire loopback|none what the emulated NIC is cabled to (default loopback: every frame comes
                       back and is delivered to the requester as a received PTP frame)
  --igcd PATH          the igcd binary (default: next to tsperf)
";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Ramp,
    CompareSets,
    KernelBaseline,
    Rx,
}

#[derive(Debug, Clone)]
pub struct Options {
    pub mode: Mode,
    pub sets: u8,
    pub json: bool,
    pub ramp: RampConfig,
    pub igcd: IgcdCommand,
    pub wire: String,
}

pub fn parse(
    args: impl IntoIterator<Item = OsString>,
    igcd: IgcdCommand,
) -> Result<Option<Options>, String> {
    use lexopt::prelude::*;
    let bad = |e: lexopt::Error| e.to_string();
    let mut o = Options {
        mode: Mode::Ramp,
        sets: 4,
        json: false,
        ramp: RampConfig::default(),
        igcd,
        wire: "loopback".into(),
    };
    let mut p = lexopt::Parser::from_args(args);
    let secs = |v: f64, what: &str| {
        if v.is_finite() && v > 0.0 && v < 3600.0 {
            Ok(Duration::from_secs_f64(v))
        } else {
            Err(format!("{what} must be within (0, 3600) seconds"))
        }
    };
    while let Some(arg) = p.next().map_err(bad)? {
        match arg {
            Long("compare-sets") => o.mode = Mode::CompareSets,
            Long("kernel-baseline") => o.mode = Mode::KernelBaseline,
            Long("rx") => o.mode = Mode::Rx,
            Long("sets") => {
                o.sets = p.value().map_err(bad)?.parse().map_err(bad)?;
                if !(1..=4).contains(&o.sets) {
                    return Err("--sets must be 1..=4".into());
                }
            }
            Long("start") => o.ramp.start_rate = p.value().map_err(bad)?.parse().map_err(bad)?,
            Long("max") => o.ramp.max_rate = p.value().map_err(bad)?.parse().map_err(bad)?,
            Long("step-secs") => {
                o.ramp.step = secs(p.value().map_err(bad)?.parse().map_err(bad)?, "--step-secs")?
            }
            Long("limit-secs") => {
                o.ramp.time_limit = secs(
                    p.value().map_err(bad)?.parse().map_err(bad)?,
                    "--limit-secs",
                )?
            }
            Long("json") => o.json = true,
            Long("igcd") => o.igcd = vec![p.value().map_err(bad)?],
            Long("wire") => {
                o.wire = p.value().map_err(bad)?.string().map_err(bad)?;
                if !matches!(o.wire.as_str(), "loopback" | "none") {
                    return Err("--wire must be loopback or none".into());
                }
            }
            Long("help") | Short('h') => return Ok(None),
            _ => return Err(bad(arg.unexpected())),
        }
    }
    if !(o.ramp.start_rate >= 1.0
        && o.ramp.start_rate <= o.ramp.max_rate
        && o.ramp.max_rate <= 10e6)
    {
        return Err("need 1 ≤ --start ≤ --max ≤ 10000000".into());
    }
    Ok(Some(o))
}

/// Entry point shared by the `tsperf` binary and `ptplab tsperf ...` (which passes itself as
/// the igcd command).
pub fn main_with_args(args: impl IntoIterator<Item = OsString>, igcd: IgcdCommand) -> ExitCode {
    let o = match parse(args, igcd) {
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
    let r = match o.mode {
        Mode::Ramp => run_ramp(&o).map(|_| ()),
        Mode::CompareSets => compare_sets(&o),
        Mode::KernelBaseline => kernel_baseline(&o),
        Mode::Rx => rx::run(&o),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tsperf: {e}");
            ExitCode::FAILURE
        }
    }
}

fn ramp_target<T: Target>(t: &mut T, o: &Options) -> Vec<Step> {
    let name = t.name();
    if !o.json {
        println!("# {name}");
        println!("{}", ramp::HEADER);
    }
    ramp::run(t, &o.ramp, |s| {
        if o.json {
            println!("{}", s.to_json(&name));
        } else {
            println!("{}", s.row());
        }
    })
}

fn summary(name: &str, steps: &[Step]) -> serde_json::Value {
    let cap = ramp::capacity(steps);
    let at_cap = steps.iter().find(|s| Some(s.rate) == cap);
    json!({
        "target": name,
        "capacity_per_s": cap.map(f64::round),
        "capacity_99_per_s": ramp::capacity_at(steps, 99.0).map(f64::round),
        "peak_on_time_per_s": ramp::peak_on_time(steps).map(f64::round),
        "latency_p99_us_at_capacity": at_cap.map(|s| s.latency.p99),
        "mmio_reads_per_ts_at_capacity": at_cap.and_then(|s| s.mmio_reads_per_ts),
        "mmio_reads_per_ts_at_last_step": steps.last().and_then(|s| s.mmio_reads_per_ts),
    })
}

fn run_ramp(o: &Options) -> Result<Vec<Step>, String> {
    let mut d = Driver::start(&o.igcd, o.sets, &o.wire)?;
    let steps = ramp_target(&mut d, o);
    let s = summary(&d.name(), &steps);
    let wake = wakeup_ns();
    if o.json {
        let mut s = s;
        s["summary"] = true.into();
        s["wakeup_ns"] = wake.into();
        println!("{s}");
    } else {
        println!(
            "capacity (≥ 99.9 % on time, none lost): {} req/s; p99 latency there {} µs; one blocking wake-up here ≈ {:.1} µs",
            s["capacity_per_s"],
            s["latency_p99_us_at_capacity"],
            wake as f64 / 1e3
        );
    }
    Ok(steps)
}

fn compare_sets(o: &Options) -> Result<(), String> {
    let mut results = Vec::new();
    for sets in [1u8, 4] {
        let mut d = Driver::start(&o.igcd, sets, &o.wire)?;
        let steps = ramp_target(&mut d, o);
        results.push((sets, d.name(), steps));
    }
    let ratio_at = |pct: f64| {
        let c1 = ramp::capacity_at(&results[0].2, pct);
        let c4 = ramp::capacity_at(&results[1].2, pct);
        let r = match (c1, c4) {
            (Some(a), Some(b)) if a > 0.0 => Some(b / a),
            _ => None,
        };
        (c1.map(f64::round), c4.map(f64::round), r)
    };
    let (c1, c4, ratio) = ratio_at(99.9);
    let (k1, k4, kratio) = ratio_at(99.0);
    let g1 = ramp::peak_on_time(&results[0].2);
    let g4 = ramp::peak_on_time(&results[1].2);
    let gratio = match (g1, g4) {
        (Some(a), Some(b)) if a > 0.0 => Some(b / a),
        _ => None,
    };
    let mmio4 = summary(&results[1].1, &results[1].2);
    let last4 = results[1].2.last();
    if o.json {
        println!(
            "{}",
            json!({"summary": true, "compare_sets": true,
                "capacity_1_set": c1, "capacity_4_sets": c4, "capacity_ratio": ratio,
                "capacity_99_1_set": k1, "capacity_99_4_sets": k4, "capacity_99_ratio": kratio,
                "peak_on_time_1_set": g1.map(f64::round), "peak_on_time_4_sets": g4.map(f64::round),
                "peak_on_time_ratio": gratio,
                "mmio_reads_per_ts_4_sets_at_capacity": mmio4["mmio_reads_per_ts_at_capacity"],
                "mmio_reads_per_ts_4_sets_at_last_step": last4.and_then(|s| s.mmio_reads_per_ts),
                "last_step_rate_4_sets": last4.map(|s| s.rate.round())})
        );
    } else {
        let f = |r: Option<f64>| {
            r.map(|r| format!("{r:.2}x"))
                .unwrap_or_else(|| "n/a".into())
        };
        println!(
            "capacity ≥ 99.9 % on time: 1 set {c1:?}/s, 4 sets {c4:?}/s, ratio {}\n\
             capacity ≥ 99 % on time:   1 set {k1:?}/s, 4 sets {k4:?}/s, ratio {}\n\
             peak on-time stamps/s:     1 set {:?}/s, 4 sets {:?}/s, ratio {}\n\
             MMIO reads per timestamp, 4 sets: {} at capacity, {:?} at the last step ({:?}/s)",
            f(ratio),
            f(kratio),
            g1.map(f64::round),
            g4.map(f64::round),
            f(gratio),
            mmio4["mmio_reads_per_ts_at_capacity"],
            last4.and_then(|s| s.mmio_reads_per_ts),
            last4.map(|s| s.rate.round())
        );
    }
    Ok(())
}

fn kernel_baseline(o: &Options) -> Result<(), String> {
    let mut k = kernel::KernelTarget::start()?;
    let ksteps = ramp_target(&mut k, o);
    drop(k);
    let mut d = Driver::start(&o.igcd, o.sets, &o.wire)?;
    let dsteps = ramp_target(&mut d, o);
    let ks = summary("linux software TX timestamps (loopback, netns)", &ksteps);
    let ds = summary(&d.name(), &dsteps);
    if o.json {
        println!(
            "{}",
            json!({"summary": true, "kernel_baseline": ks, "igcd": ds})
        );
    } else {
        println!(
            "capacity: linux software {} req/s (p99 {} µs) | igcd {} req/s (p99 {} µs)",
            ks["capacity_per_s"],
            ks["latency_p99_us_at_capacity"],
            ds["capacity_per_s"],
            ds["latency_p99_us_at_capacity"]
        );
    }
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
    let mut v = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let t = Instant::now();
        if a_tx.send(()).is_err() || b_rx.recv().is_err() {
            break;
        }
        v.push(t.elapsed().as_nanos() as u64 / 2);
    }
    drop(a_tx);
    let _ = echo.join();
    v.sort_unstable();
    v.get(v.len() / 2).copied().unwrap_or(0)
}
