//! Fixed-rate steps (`--rate LIST`, and after each `--compare-sets` run): what one delivered
//! TX stamp costs on each driver channel (issue 16), every figure computed from counters read
//! before and after the step:
//! - delivery latency p50/p99/p999 (NIC latch → arrival at the requester), from the step;
//! - wake-ups per stamp: voluntary context switches (each one a block in poll/recv/futex that
//!   a wake-up ended) of tsperf's reader thread, and of all igcd's threads, from
//!   `/proc/<pid>/task/<tid>/status` — the same count for the socket and the ring path;
//! - CPU per stamp: `/proc/<pid>/task/*/schedstat` (ns on CPU) of igcd, of tsperf's reader
//!   thread and of tsperf as a whole (its sender thread keeps the schedule);
//! - over the ring, our end's own counters per stamp (sleeps, wake-ups, signals sent).

use std::collections::BTreeMap;
use std::time::Duration;

use ptp_ipc::ring::RingStats;
use ptp_ipc::transport::ChannelMode;
use serde_json::{Value, json};

use crate::Options;
use crate::driver::Driver;
use crate::figures::Spread;
use crate::ramp::{self, RampConfig};

/// CPU ns and voluntary context switches of one task directory (`/proc/<pid>/task/<tid>`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TaskCounts {
    pub cpu_ns: u64,
    pub switches: u64,
}

impl TaskCounts {
    fn sum<'a>(all: impl IntoIterator<Item = &'a TaskCounts>) -> TaskCounts {
        all.into_iter()
            .fold(TaskCounts::default(), |a, b| a.add(*b))
    }

    fn add(self, o: TaskCounts) -> TaskCounts {
        TaskCounts {
            cpu_ns: self.cpu_ns + o.cpu_ns,
            switches: self.switches + o.switches,
        }
    }

    fn since(self, before: TaskCounts) -> TaskCounts {
        TaskCounts {
            cpu_ns: self.cpu_ns.saturating_sub(before.cpu_ns),
            switches: self.switches.saturating_sub(before.switches),
        }
    }
}

/// Reads one task's counters; `None` when it has gone.
pub fn task_counts(dir: &std::path::Path) -> Option<TaskCounts> {
    let sched = std::fs::read_to_string(dir.join("schedstat")).ok()?;
    let status = std::fs::read_to_string(dir.join("status")).ok()?;
    Some(TaskCounts {
        cpu_ns: sched.split_whitespace().next()?.parse().ok()?,
        switches: status
            .lines()
            .find_map(|l| l.strip_prefix("voluntary_ctxt_switches:"))?
            .trim()
            .parse()
            .ok()?,
    })
}

/// The sum over every thread of process `pid` (threads that exit meanwhile are skipped).
pub fn process_counts(pid: u32) -> Result<TaskCounts, String> {
    let dir = format!("/proc/{pid}/task");
    let mut total = TaskCounts::default();
    for e in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let e = e.map_err(|e| e.to_string())?;
        if let Some(c) = task_counts(&e.path()) {
            total = total.add(c);
        }
    }
    Ok(total)
}

/// Per thread name (`/proc/<pid>/task/<tid>/comm`; threads of one name summed) of process
/// `pid`: which of igcd's threads the wake-ups are.
pub fn counts_by_thread(pid: u32) -> Result<BTreeMap<String, TaskCounts>, String> {
    let dir = format!("/proc/{pid}/task");
    let mut by = BTreeMap::new();
    for e in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let path = e.map_err(|e| e.to_string())?.path();
        let (Some(c), Ok(name)) = (
            task_counts(&path),
            std::fs::read_to_string(path.join("comm")),
        ) else {
            continue;
        };
        let slot: &mut TaskCounts = by.entry(name.trim().to_string()).or_default();
        *slot = slot.add(c);
    }
    Ok(by)
}

fn thread_counts(tid: i32) -> Result<TaskCounts, String> {
    let dir = std::path::PathBuf::from(format!("/proc/self/task/{tid}"));
    task_counts(&dir).ok_or_else(|| format!("{}: unreadable", dir.display()))
}

/// One fixed-rate step's figures.
#[derive(Debug, Clone, Default)]
pub struct FixedFigures {
    pub stamps: u64,
    pub on_time_pct: f64,
    pub p50_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub reader_wakeups_per_stamp: f64,
    pub driver_wakeups_per_stamp: f64,
    pub driver_cpu_ns_per_stamp: f64,
    pub reader_cpu_ns_per_stamp: f64,
    pub client_cpu_ns_per_stamp: f64,
    /// Our ring end's sleeps, wake-ups and signals sent, per stamp (ring channel only).
    pub ring_per_stamp: Option<[f64; 3]>,
    /// `driver_wakeups_per_stamp` by the driver's thread names.
    pub driver_wakeups_by_thread: BTreeMap<String, f64>,
    /// Register reads per stamp, from the device model's BAR counter (issue 26's figure).
    pub model_reads_per_stamp: Option<f64>,
    /// One cross-process wake-up measured right after the step ([`crate::floor`]): p50 and
    /// p99.9, µs; `None` if it could not be measured.
    pub wakeup_floor_us: Option<(f64, f64)>,
}

/// Ping-pongs of the wake-up floor after each step (about half a second on a 2-core VM).
const FLOOR_SAMPLES: usize = 10_000;

/// Counters around a step.
struct Snapshot {
    /// The driver's threads by name (its total is their sum).
    driver_threads: BTreeMap<String, TaskCounts>,
    reader: TaskCounts,
    client: TaskCounts,
    ring: Option<RingStats>,
}

fn snapshot(d: &Driver) -> Result<Snapshot, String> {
    Ok(Snapshot {
        driver_threads: counts_by_thread(d.pid())?,
        reader: thread_counts(d.reader_tid())?,
        client: process_counts(std::process::id())?,
        ring: d.ring_stats(),
    })
}

/// Runs one step at `rate` on `d` and computes its figures.
pub fn measure(
    d: &mut Driver,
    rate: f64,
    cfg: &RampConfig,
    next_id: &mut u64,
) -> Result<FixedFigures, String> {
    let before = snapshot(d)?;
    let s = ramp::run_step(d, rate, cfg, next_id);
    let after = snapshot(d)?;
    let wakeup_floor_us = match crate::floor::cross_process(FLOOR_SAMPLES) {
        Ok(h) => Some((
            h.quantile_ns(0.5) as f64 / 1e3,
            h.quantile_ns(0.999) as f64 / 1e3,
        )),
        Err(e) => {
            eprintln!("tsperf: no wake-up floor: {e}");
            None
        }
    };
    let stamps = s.on_time + s.late;
    if stamps == 0 {
        return Err(format!("no stamp delivered at {rate}/s"));
    }
    let per = |v: u64| v as f64 / stamps as f64;
    let (drv, rdr, cli) = (
        TaskCounts::sum(after.driver_threads.values())
            .since(TaskCounts::sum(before.driver_threads.values())),
        after.reader.since(before.reader),
        after.client.since(before.client),
    );
    let ring_per_stamp = match (before.ring, after.ring) {
        (Some(a), Some(b)) => Some([
            per(b.sleeps - a.sleeps),
            per(b.wakeups - a.wakeups),
            per(b.signals - a.signals),
        ]),
        _ => None,
    };
    let driver_wakeups_by_thread = after
        .driver_threads
        .iter()
        .map(|(name, a)| {
            let b = before.driver_threads.get(name).copied().unwrap_or_default();
            (name.clone(), per(a.since(b).switches))
        })
        .collect();
    Ok(FixedFigures {
        stamps,
        on_time_pct: s.pct(s.on_time),
        p50_us: s.latency.p50,
        p99_us: s.latency.p99,
        p999_us: s.latency.p999,
        reader_wakeups_per_stamp: per(rdr.switches),
        driver_wakeups_per_stamp: per(drv.switches),
        driver_cpu_ns_per_stamp: per(drv.cpu_ns),
        reader_cpu_ns_per_stamp: per(rdr.cpu_ns),
        client_cpu_ns_per_stamp: per(cli.cpu_ns),
        ring_per_stamp,
        driver_wakeups_by_thread,
        model_reads_per_stamp: s.model_reads_per_ts,
        wakeup_floor_us,
    })
}

/// Per (channel, rate): the runs' figures.
pub struct Table {
    rows: Vec<(ChannelMode, f64, Vec<FixedFigures>)>,
}

impl Table {
    pub fn new(o: &Options) -> Self {
        let rows = o
            .channels
            .iter()
            .flat_map(|c| o.rates.iter().map(move |r| (*c, *r, Vec::new())))
            .collect();
        Table { rows }
    }

    /// One fresh daemon on `nic` with `sets` over `mode`: a short warm-up, then each rate.
    pub fn run_all(
        &mut self,
        o: &Options,
        (nic, mode): (&str, ChannelMode),
        sets: u8,
        run: usize,
    ) -> Result<(), String> {
        if o.rates.is_empty() {
            return Ok(());
        }
        let mut d = Driver::start(o.daemon(nic).1, nic, sets, &o.wire, mode)?;
        let mut next_id = 1;
        let warm = RampConfig {
            step: Duration::from_millis(300),
            ..o.ramp.clone()
        };
        let _ = ramp::run_step(&mut d, 1000.0, &warm, &mut next_id);
        for (c, rate, runs) in self.rows.iter_mut().filter(|r| r.0 == mode) {
            let f = measure(&mut d, *rate, &o.ramp, &mut next_id)?;
            if o.json {
                println!(
                    "{}",
                    json!({"fixed": true, "run": run, "channel": c.name(), "rate": rate, "figures": to_json(&f)})
                );
            }
            runs.push(f);
        }
        Ok(())
    }

    pub fn print(&self, o: &Options) {
        if self.rows.is_empty() {
            return;
        }
        if o.json {
            let rows: Vec<Value> = self
                .rows
                .iter()
                .map(|(c, rate, runs)| summary_json(*c, *rate, runs))
                .collect();
            let mut v =
                json!({"summary": true, "mode": "fixed_rate", "runs": o.runs, "rows": rows});
            o.load.tag(&mut v);
            println!("{v}");
            return;
        }
        println!(
            "== fixed rate, medians (range) over {} run{}: latency µs; wake-ups = voluntary context \
             switches per stamp; CPU ns per stamp",
            o.runs,
            if o.runs == 1 { "" } else { "s" }
        );
        o.load.print_line();
        for (c, rate, runs) in &self.rows {
            for l in summary_lines(*c, *rate, runs) {
                println!("{l}");
            }
        }
    }
}

/// The figures by name, in one place for JSON and text.
fn named(f: &FixedFigures) -> Vec<(&'static str, Option<f64>)> {
    let ring = |i: usize| f.ring_per_stamp.map(|r| r[i]);
    vec![
        ("on_time_pct", Some(f.on_time_pct)),
        ("latency_p50_us", Some(f.p50_us)),
        ("latency_p99_us", Some(f.p99_us)),
        ("latency_p999_us", Some(f.p999_us)),
        ("reader_wakeups_per_stamp", Some(f.reader_wakeups_per_stamp)),
        ("driver_wakeups_per_stamp", Some(f.driver_wakeups_per_stamp)),
        ("driver_cpu_ns_per_stamp", Some(f.driver_cpu_ns_per_stamp)),
        ("reader_cpu_ns_per_stamp", Some(f.reader_cpu_ns_per_stamp)),
        ("client_cpu_ns_per_stamp", Some(f.client_cpu_ns_per_stamp)),
        ("ring_sleeps_per_stamp", ring(0)),
        ("ring_wakeups_per_stamp", ring(1)),
        ("ring_signals_per_stamp", ring(2)),
        ("model_bar_reads_per_stamp", f.model_reads_per_stamp),
        ("wakeup_floor_p50_us", f.wakeup_floor_us.map(|w| w.0)),
        ("wakeup_floor_p999_us", f.wakeup_floor_us.map(|w| w.1)),
        // Issue 26's goal: ≤ 2 at 10 000/s.
        (
            "p999_over_wakeup_floor_p999",
            f.wakeup_floor_us.map(|w| f.p999_us / w.1),
        ),
    ]
}

fn to_json(f: &FixedFigures) -> Value {
    let mut v = json!({"stamps": f.stamps});
    for (k, x) in named(f) {
        v[k] = x.into();
    }
    v["driver_wakeups_by_thread"] = json!(f.driver_wakeups_by_thread);
    v
}

/// Each driver thread's wake-ups per stamp: median and range over `runs` (a thread missing
/// from a run counts as not reached there).
fn thread_spreads(runs: &[FixedFigures]) -> Vec<(String, Spread)> {
    let mut names: Vec<&String> = runs
        .iter()
        .flat_map(|f| f.driver_wakeups_by_thread.keys())
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .map(|n| {
            let v: Vec<Option<f64>> = runs
                .iter()
                .map(|f| f.driver_wakeups_by_thread.get(n).copied())
                .collect();
            (n.clone(), Spread::of_defined(&v))
        })
        .collect()
}

/// Each figure's median and range over `runs`.
fn spreads(runs: &[FixedFigures]) -> Vec<(&'static str, Spread)> {
    let Some(first) = runs.first() else {
        return Vec::new();
    };
    let names: Vec<&'static str> = named(first).into_iter().map(|(k, _)| k).collect();
    names
        .iter()
        .enumerate()
        .map(|(i, k)| {
            let v: Vec<Option<f64>> = runs.iter().map(|f| named(f)[i].1).collect();
            (*k, Spread::of_defined(&v))
        })
        .collect()
}

fn summary_json(c: ChannelMode, rate: f64, runs: &[FixedFigures]) -> Value {
    let mut v = json!({"channel": c.name(), "rate": rate, "runs": runs.len()});
    for (k, s) in spreads(runs) {
        v[k] = s.to_json();
    }
    let threads: serde_json::Map<String, Value> = thread_spreads(runs)
        .into_iter()
        .map(|(n, s)| (n, s.to_json()))
        .collect();
    v["driver_wakeups_by_thread"] = Value::Object(threads);
    v
}

fn summary_lines(c: ChannelMode, rate: f64, runs: &[FixedFigures]) -> Vec<String> {
    let mut out = vec![format!("{} channel at {rate:.0}/s:", c.name())];
    for (k, s) in spreads(runs) {
        if s.median.is_some() {
            out.push(format!(
                "  {k:<26} {}",
                crate::figures::show_spread(&s, 3, "", "-")
            ));
        }
    }
    for (n, s) in thread_spreads(runs) {
        out.push(format!(
            "    wake-ups per stamp, {n:<15} {}",
            crate::figures::show_spread(&s, 3, "", "-")
        ));
    }
    out
}

/// `--rate` alone: per run, a fresh daemon per (NIC, channel) in turn, each rate on it.
pub fn run(o: &Options) -> Result<(), String> {
    let mut t = Table::new(o);
    let nic = o.nics[0].as_str();
    for run in 1..=o.runs {
        for c in &o.channels {
            t.run_all(o, (nic, *c), o.sets_for(nic), run)?;
        }
    }
    t.print(o);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A named thread that blocks and is woken `n` times shows up under its name with at least
    /// `n` voluntary switches more than before.
    #[test]
    fn wakeups_are_counted_per_thread_name() {
        let pid = std::process::id();
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let (ack_tx, ack_rx) = std::sync::mpsc::channel::<()>();
        let t = std::thread::Builder::new()
            .name("tsperf-wake".into())
            .spawn(move || {
                // Named once running: std names the thread from inside it, after spawn returns.
                ack_tx.send(()).unwrap();
                while rx.recv().is_ok() {
                    ack_tx.send(()).unwrap();
                }
            })
            .unwrap();
        ack_rx.recv().unwrap();
        let switches = || counts_by_thread(pid).unwrap()["tsperf-wake"].switches;
        let before = switches();
        for _ in 0..20 {
            std::thread::sleep(Duration::from_millis(2));
            tx.send(()).unwrap();
            ack_rx.recv().unwrap();
        }
        assert!(switches() >= before + 20, "{before} -> {}", switches());
        drop(tx);
        t.join().unwrap();
    }

    #[test]
    fn thread_spreads_take_medians_per_name() {
        let fig = |a: f64, b: Option<f64>| FixedFigures {
            driver_wakeups_by_thread: [("irq".to_string(), a)]
                .into_iter()
                .chain(b.map(|b| ("model".to_string(), b)))
                .collect(),
            ..FixedFigures::default()
        };
        let runs = [fig(1.0, Some(0.5)), fig(3.0, None), fig(2.0, Some(0.7))];
        let s: BTreeMap<String, Spread> = thread_spreads(&runs).into_iter().collect();
        assert_eq!(s["irq"].median, Some(2.0));
        assert_eq!(s["model"].median, Some(0.6));
        assert_eq!(s["model"].reached_in, 2);
    }
}
