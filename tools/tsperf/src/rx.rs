//! `tsperf --rx`: the cost of RX timestamping, in one run. tsperf is the far end of igcd's
//! emulated wire (a Unix datagram wire, frames carrying their departure instants) and offers
//! PTPv2 Sync frames; igcd delivers them to tsperf as `PtpFrame` events, with RX stamps when
//! the filter asks. For each filter — NONE, PTP_V2_EVENT, ALL — two figures:
//! - igcd CPU time per delivered frame at a fixed offered rate (from /proc, robust to noise);
//! - delivered frames/s when offered more than it can take (throughput).
//!
//! Seed 002: a Microchip driver lost 8 % throughput timestamping every frame.

use std::time::{Duration, Instant};

use ptp_emu::wire::{UnixDatagramWire, WirePort};
use ptp_ipc::RxFilter;
use ptp_ipc::ring::RingStats;
use ptp_ipc::time::mono_ns;
use ptp_ipc::transport::ChannelMode;
use serde_json::json;

use crate::Options;
use crate::driver::{Driver, TempDir, sync_frame};
use crate::figures::Spread;

/// CPU time of a process (all its threads), in ns, from /proc/<pid>/task/*/schedstat, whose
/// first field is nanoseconds on CPU (clock-tick accounting in /proc/<pid>/stat is far too
/// coarse for this).
pub(crate) fn cpu_ns(pid: u32) -> Result<u64, String> {
    let dir = format!("/proc/{pid}/task");
    let mut total = 0u64;
    for e in std::fs::read_dir(&dir).map_err(|e| format!("{dir}: {e}"))? {
        let p = e.map_err(|e| e.to_string())?.path().join("schedstat");
        // A thread may exit between listing and reading; skip it.
        if let Ok(s) = std::fs::read_to_string(&p) {
            total += s
                .split_whitespace()
                .next()
                .and_then(|v| v.parse::<u64>().ok())
                .unwrap_or(0);
        }
    }
    Ok(total)
}

struct Round {
    delivered: u64,
    stamped: u64,
    cpu_ns: u64,
    secs: f64,
    /// Frames handed to the wire, and of those not sent (igcd's socket buffer full).
    offered: u64,
    send_errors: u64,
    /// Our end's ring counters over the round (`None` over the socket).
    ring: Option<RingStats>,
}

/// Offers frames at `rate` (None: as fast as the wire takes them) for `dur`, then counts what
/// igcd delivered.
fn offer(
    d: &Driver,
    wire: &mut UnixDatagramWire,
    rate: Option<f64>,
    dur: Duration,
) -> Result<Round, String> {
    while d.frames().try_recv().is_ok() {}
    let frame = sync_frame(1);
    let (wire0, ring0) = (wire.stats(), d.ring_stats());
    let cpu0 = cpu_ns(d.pid())?;
    let start = Instant::now();
    let mut k = 0u64;
    let (mut delivered, mut stamped) = (0u64, 0u64);
    while start.elapsed() < dur {
        match rate {
            Some(r) => {
                let due = start + Duration::from_secs_f64(k as f64 / r);
                let wait = due.saturating_duration_since(Instant::now());
                if wait > Duration::from_micros(20) {
                    std::thread::sleep(wait);
                }
            }
            // Saturation without spinning: bursts of 8 (the peer's datagram queue holds ~10),
            // then yield the CPU to the path under test.
            None if k % 8 == 0 => std::thread::sleep(Duration::from_micros(50)),
            None => {}
        }
        wire.transmit(&frame, mono_ns());
        k += 1;
        while let Ok((_, rx)) = d.frames().try_recv() {
            delivered += 1;
            stamped += rx.is_some() as u64;
        }
    }
    let secs = start.elapsed().as_secs_f64();
    // Frames still in flight are counted for a short drain.
    let drain = Instant::now() + Duration::from_millis(100);
    while let Ok((_, rx)) = d.frames().recv_deadline(drain) {
        delivered += 1;
        stamped += rx.is_some() as u64;
    }
    let cpu_ns = cpu_ns(d.pid())? - cpu0;
    let wire1 = wire.stats();
    Ok(Round {
        delivered,
        stamped,
        cpu_ns,
        secs,
        offered: wire1.sent - wire0.sent,
        send_errors: wire1.send_errors - wire0.send_errors,
        ring: ring0.zip(d.ring_stats()).map(|(a, b)| ring_delta(&a, &b)),
    })
}

/// The counters `b` minus `a` (a round's share).
fn ring_delta(a: &RingStats, b: &RingStats) -> RingStats {
    RingStats {
        sent: b.sent - a.sent,
        received: b.received - a.received,
        signals: b.signals - a.signals,
        sleeps: b.sleeps - a.sleeps,
        wakeups: b.wakeups - a.wakeups,
        wait_timeouts: b.wait_timeouts - a.wait_timeouts,
        full_events: b.full_events - a.full_events,
        full_drops: b.full_drops - a.full_drops,
        busy_poll_hits: b.busy_poll_hits - a.busy_poll_hits,
        busy_poll_misses: b.busy_poll_misses - a.busy_poll_misses,
    }
}

/// One offered round and igcd's own RX counters over it (a Stats request on each side of the
/// round, outside its timed window), so a round that delivered nothing says where the frames
/// stopped: at the wire (`send_errors`), in the NIC and driver (igcd's `rx_frames`), or on the
/// channel (igcd received them, we did not).
fn offer_counted(
    d: &mut Driver,
    wire: &mut UnixDatagramWire,
    rate: Option<f64>,
    dur: Duration,
) -> Result<(Round, u64), String> {
    let rx0 = d.stats()?.rx_frames;
    let r = offer(d, wire, rate, dur)?;
    let rx1 = d.stats()?.rx_frames;
    Ok((r, rx1.saturating_sub(rx0)))
}

/// A round's figures on stderr: every round with `TSPERF_RX_TRACE` set, and always a round that
/// delivered nothing (a stall must never hide inside a median).
fn trace(what: &str, f: RxFilter, r: &Round, igcd_rx: u64) {
    if r.delivered > 0 && std::env::var_os("TSPERF_RX_TRACE").is_none() {
        return;
    }
    eprintln!(
        "tsperf rx: {what} {f:?}: delivered {} (stamped {}) in {:.3} s; offered {} ({} not \
         sent); igcd received {igcd_rx}; ring {:?}",
        r.delivered, r.stamped, r.secs, r.offered, r.send_errors, r.ring
    );
}

/// Rounds over the three filters unless `--runs` says otherwise; medians and ranges are
/// reported (the per-frame CPU figure is noisy on a small shared machine).
pub const DEFAULT_ROUNDS: usize = 5;

/// Each `--channel` in turn, a fresh igcd for each.
pub fn run(o: &Options) -> Result<(), String> {
    for mode in &o.channels {
        run_channel(o, *mode)?;
    }
    Ok(())
}

/// The filters, interleaved in this order in every round, and their names in the report.
const FILTERS: [RxFilter; 3] = [RxFilter::None, RxFilter::PtpV2Event, RxFilter::All];
const NAMES: [&str; 3] = ["NONE", "PTP_V2_EVENT", "ALL"];

/// Per filter, in [`FILTERS`] order, over the rounds: igcd CPU ns per delivered frame at the
/// fixed rate, delivered frames/s saturated, and whether every round stamped exactly the frames
/// the filter asks for.
struct Figures {
    cpu: Vec<Spread>,
    tput: Vec<Spread>,
    stamped_ok: [bool; 3],
}

fn run_channel(o: &Options, mode: ChannelMode) -> Result<(), String> {
    let dir = TempDir::new("rx")?;
    let wire_path = dir.0.join("wire.sock");
    let wire_arg = format!("bind:{}", wire_path.display());
    let mut d = Driver::start_in(dir, &o.igcd, &o.nics[0], 4, &wire_arg, &[], mode)?;
    let mut wire = UnixDatagramWire::connect(&wire_path).map_err(|e| format!("wire: {e}"))?;
    let dur = o.ramp.step.max(Duration::from_millis(500));
    // A rate the path sustains on a small machine, for the per-frame CPU cost.
    let fixed = o.ramp.start_rate.clamp(1000.0, 20_000.0).max(5000.0);
    let f = measure(o.runs, &mut d, &mut wire, fixed, dur)?;
    if o.json {
        print_json(o, mode, fixed, &f);
    } else {
        print_table(o, mode, fixed, &f);
    }
    if f.stamped_ok.iter().any(|ok| !ok) {
        return Err("a filter did not stamp exactly the frames it should".into());
    }
    Ok(())
}

/// `rounds` rounds of each filter at the `fixed` rate, then saturated, `dur` each.
fn measure(
    rounds: usize,
    d: &mut Driver,
    wire: &mut UnixDatagramWire,
    fixed: f64,
    dur: Duration,
) -> Result<Figures, String> {
    // Interleave the filters over the rounds so drift affects them alike; keep medians.
    let mut cpu: Vec<Vec<f64>> = vec![Vec::new(); FILTERS.len()];
    let mut tput: Vec<Vec<f64>> = vec![Vec::new(); FILTERS.len()];
    let mut stamped_ok = [true; 3];
    for _round in 0..rounds {
        for (i, f) in FILTERS.iter().enumerate() {
            d.set_rx_filter(*f)?;
            let (r, igcd_rx) = offer_counted(d, wire, Some(fixed), dur)?;
            trace("fixed", *f, &r, igcd_rx);
            if r.delivered > 0 {
                cpu[i].push(r.cpu_ns as f64 / r.delivered as f64);
            }
            let want_stamps = *f != RxFilter::None;
            stamped_ok[i] &= if want_stamps {
                r.stamped == r.delivered
            } else {
                r.stamped == 0
            };
            let (r, igcd_rx) = offer_counted(d, wire, None, dur)?;
            trace("saturated", *f, &r, igcd_rx);
            tput[i].push(r.delivered as f64 / r.secs);
        }
    }
    let spread = |v: &[f64]| Spread::of(&v.iter().copied().map(Some).collect::<Vec<_>>());
    Ok(Figures {
        cpu: cpu.iter().map(|v| spread(v)).collect(),
        tput: tput.iter().map(|v| spread(v)).collect(),
        stamped_ok,
    })
}

/// A figure's median (NaN if no round had it).
fn med(s: &Spread) -> f64 {
    s.median.unwrap_or(f64::NAN)
}

/// One JSON object per filter.
fn print_json(o: &Options, mode: ChannelMode, fixed: f64, f: &Figures) {
    let Figures {
        cpu,
        tput,
        stamped_ok,
    } = f;
    for i in 0..3 {
        let mut v = json!({"rx_filter": NAMES[i], "channel": mode.name(), "offered_fixed_per_s": fixed, "rounds": o.runs,
            "igcd_cpu_ns_per_frame": cpu[i].to_json(),
            "cpu_cost_vs_none_pct": 100.0 * (med(&cpu[i]) / med(&cpu[0]) - 1.0),
            "throughput_per_s": tput[i].to_json(),
            "throughput_loss_vs_none_pct": 100.0 * (1.0 - med(&tput[i]) / med(&tput[0])),
            "stamps_as_filter_says": stamped_ok[i]});
        o.load.tag(&mut v);
        println!("{v}");
    }
}

/// A header and one row per filter.
fn print_table(o: &Options, mode: ChannelMode, fixed: f64, f: &Figures) {
    let Figures {
        cpu,
        tput,
        stamped_ok,
    } = f;
    println!(
        "# RX through igcd (emulated i225, tsperf as the wire peer), {} channel, medians (range) of {} interleaved rounds",
        mode.name(),
        o.runs
    );
    o.load.print_line();
    println!(
        "filter         | igcd CPU/frame at {fixed:.0}/s          vs NONE | delivered/s saturated           vs NONE | stamps as asked"
    );
    let range = |s: &Spread| {
        format!(
            "{:.0}–{:.0}",
            s.min.unwrap_or(f64::NAN),
            s.max.unwrap_or(f64::NAN)
        )
    };
    for i in 0..3 {
        println!(
            "{:<14} | {:>8.0} ns ({:>13}) {:>+7.1}% | {:>8.0} ({:>13}) {:>+7.1}% | {}",
            NAMES[i],
            med(&cpu[i]),
            range(&cpu[i]),
            100.0 * (med(&cpu[i]) / med(&cpu[0]) - 1.0),
            med(&tput[i]),
            range(&tput[i]),
            100.0 * (med(&tput[i]) / med(&tput[0]) - 1.0),
            if stamped_ok[i] { "yes" } else { "NO" }
        );
    }
}
