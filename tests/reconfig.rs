//! Reconfiguration of a running, locked two-host lab through the path a user has:
//! `ptpctl tstamp on|off FILTER` (the clock scheme's privileged `SetTstamp`, which ptpd passes
//! to its driver as `SetTstampConfig`). Judged on ground truth, as `tests/faults.rs` is: the
//! slave's (host1) TRUE offset from the models' laws, the models' own counters (igcd
//! `--emu-faults` `stats`) and the driver's.
//!
//! Seed 003's lesson: an RX filter change must not reset the link or the rings. Checked as
//! - no link change: the models' STATUS.LU transitions (`link_changes`, down and up each
//!   counted, so a bounce that is over before anyone looks still shows) and port resets
//!   unchanged on both NICs, and no write to the registers that reset or re-arm the link or the
//!   rings (`datapath_writes`: CTRL, RCTL, TCTL, RXDCTL/TXDCTL, ring bases/lengths; not
//!   SRRCTL, whose TIMESTAMP bit is the RX stamp switch);
//! - no dropped frame: every RX drop counter of both models (`rx_dropped`) and both cable-loss
//!   counters unchanged, and the frame count conserved at each hop — sender model → cable →
//!   receiver model → receiver driver's RX ring pass, and driver → its model on TX. At each hop
//!   the lag (upstream count − downstream count, the downstream read first so a frame in flight
//!   can only add to it) is the least of 10 reads; it must be the same after the change as
//!   before: a frame lost in between would raise it for good;
//! - the true offset, sampled every 50 ms throughout, within 2·M + q, M the largest |true
//!   offset| over a steady window as long as the change's, q the stamp quantum.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ptp_ipc::{PortState, Stats};
use redox_ptp::figures::{LOCK_NS, OffsetStats};
use redox_ptp::lab::{Lab, LabConfig};

const SLAVE: u32 = 1;
const MASTER: u32 = 0;

/// A two-host lab with fault sockets (for the models' counters), locked; clocks 20 µs and
/// oscillators up to ±5 ppm apart so the servo settles in about 15 s.
fn start(seed: u64) -> Lab {
    let c = LabConfig {
        seed,
        faults: true,
        initial_offset_ms: 0.02,
        ppm_spread: 10.0,
        ..LabConfig::default()
    };
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_ptplab"));
    let lab = Lab::start(c, &exe, None).unwrap();
    let t = within(&lab, LOCK_NS, Duration::from_secs(90)).unwrap_or_else(|e| fail(&lab, &e));
    eprintln!("seed {seed}: locked (true offset) after {:.1} s", t.0);
    lab
}

fn fail(lab: &Lab, e: &str) -> ! {
    panic!("{e}\n{}", lab.logs())
}

/// Waits until the slave is SLAVE with |true offset| ≤ `ns` in 10 samples in a row, 100 ms
/// apart: the seconds it took and the largest |true offset| seen as SLAVE meanwhile.
fn within(lab: &Lab, ns: i64, timeout: Duration) -> Result<(f64, i64), String> {
    let t0 = Instant::now();
    let (mut good, mut worst, mut last) = (0, 0, None);
    while t0.elapsed() < timeout {
        if let Ok(s) = lab.sample(SLAVE, 0.0) {
            let slave = s.status.port_state == PortState::Slave;
            let off = s.true_offset_ns.filter(|_| slave);
            worst = worst.max(off.map_or(0, i64::abs));
            good = if off.is_some_and(|o| o.abs() <= ns) {
                good + 1
            } else {
                0
            };
            if good >= 10 {
                return Ok((t0.elapsed().as_secs_f64(), worst));
            }
            last = Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!("not within ±{ns} ns in {timeout:?}; last {last:?}"))
}

/// The slave's true offsets every 50 ms for `dur`, each as SLAVE within ±`ns`; `act` runs
/// before the first sample at each of its instants (seconds into the window).
fn window(lab: &Lab, dur: Duration, ns: i64, mut act: impl FnMut(f64)) -> Vec<i64> {
    let t0 = Instant::now();
    let mut off = Vec::new();
    while t0.elapsed() < dur {
        act(t0.elapsed().as_secs_f64());
        if let Ok(s) = lab.sample(SLAVE, 0.0) {
            let at = t0.elapsed().as_secs_f64();
            if s.status.port_state != PortState::Slave {
                fail(lab, &format!("left SLAVE {at:.2} s into the window: {s:?}"));
            }
            if let Some(o) = s.true_offset_ns {
                if o.abs() > ns {
                    fail(
                        lab,
                        &format!("true offset {o} ns beyond ±{ns} at {at:.2} s"),
                    );
                }
                off.push(o);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    off
}

/// Waits for the servo to settle (the largest |true offset| of a 2 s window no longer
/// shrinking: ≥ 0.7× the previous one), then returns M over a steady window of `dur`.
fn steady_max(lab: &Lab, dur: Duration) -> i64 {
    let t0 = Instant::now();
    let mut prev: Option<i64> = None;
    loop {
        let m = OffsetStats::of(&window(lab, Duration::from_secs(2), LOCK_NS, |_| {}))
            .expect("samples")
            .max_abs_ns;
        if prev.is_some_and(|p| m * 10 >= p * 7) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(90), "no settling: {m}");
        prev = Some(m);
    }
    let s = OffsetStats::of(&window(lab, dur, LOCK_NS, |_| {})).expect("samples");
    eprintln!(
        "settled {:.0} s after lock; steady {dur:?}: {s:?}",
        t0.elapsed().as_secs_f64()
    );
    s.max_abs_ns
}

/// `ptpctl tstamp on|off FILTER` against host `i`, as a user runs it; what it printed.
fn ptpctl_tstamp(lab: &Lab, i: u32, tx: &str, filter: &str) -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_ptplab"))
        .arg("ptpctl")
        .arg("--socket")
        .arg(&lab.hosts[i as usize].socket)
        .args(["--json", "tstamp", tx, filter])
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "ptpctl tstamp {tx} {filter} on host{i}: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_str(text.trim()).unwrap();
    assert_eq!(v["tx_on"], tx == "on", "{v}");
    assert_eq!(v["rx_filter"], filter, "{v}");
    v
}

fn model(lab: &Lab, i: u32) -> HashMap<String, u64> {
    lab.fault(i, "stats")
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .filter_map(|(k, v)| Some((k, v.parse().ok()?)))
        .collect()
}

fn driver(lab: &Lab, i: u32) -> Stats {
    lab.clients[i as usize].as_ref().unwrap().stats(0).unwrap()
}

/// The per-hop lags of [`conservation`]: [0→1 cable, 1→0 cable, host0 RX, host1 RX, host0 TX,
/// host1 TX], each the least of 10 reads 20 ms apart.
fn lags(lab: &Lab) -> [i64; 6] {
    let mut best = [i64::MAX; 6];
    for _ in 0..10 {
        // Downstream first: a frame in flight between the reads can only add to a lag.
        let d: Vec<Stats> = [MASTER, SLAVE].map(|i| driver(lab, i)).into();
        let m: Vec<HashMap<String, u64>> = [MASTER, SLAVE].map(|i| model(lab, i)).into();
        let w: Vec<u64> = [MASTER, SLAVE]
            .map(|i| lab.truth_snapshot(i).unwrap().wire_lost)
            .into();
        let d2: Vec<Stats> = [MASTER, SLAVE].map(|i| driver(lab, i)).into();
        let m2: Vec<HashMap<String, u64>> = [MASTER, SLAVE].map(|i| model(lab, i)).into();
        let arrived = |k: usize| (m[k]["rx_frames"] + m[k]["rx_dropped"] + w[k]) as i64;
        let now = [
            m2[0]["tx_frames"] as i64 - arrived(1),
            m2[1]["tx_frames"] as i64 - arrived(0),
            m2[0]["rx_frames"] as i64 - d[0].rx_frames as i64,
            m2[1]["rx_frames"] as i64 - d[1].rx_frames as i64,
            d2[0].tx_frames as i64 - m[0]["tx_frames"] as i64,
            d2[1].tx_frames as i64 - m[1]["tx_frames"] as i64,
        ];
        for (b, n) in best.iter_mut().zip(now) {
            *b = (*b).min(n);
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    best
}

/// The counters a reconfiguration must leave alone, both hosts.
fn untouched(lab: &Lab) -> Vec<(u32, &'static str, u64)> {
    let keys = [
        "link_changes",
        "port_resets",
        "datapath_writes",
        "rx_dropped",
    ];
    let mut v = Vec::new();
    for i in [MASTER, SLAVE] {
        let m = model(lab, i);
        v.extend(keys.iter().map(|&k| (i, k, m[k])));
        v.push((i, "wire_lost", lab.truth_snapshot(i).unwrap().wire_lost));
    }
    v
}

/// Asserts the link, the rings and every frame came through: `before` taken with
/// [`untouched`] and [`lags`] before the change.
fn assert_no_disturbance(lab: &Lab, before: &(Vec<(u32, &str, u64)>, [i64; 6])) {
    let after = (untouched(lab), lags(lab));
    let link = lab.status(SLAVE).unwrap().link_up && lab.status(MASTER).unwrap().link_up;
    eprintln!(
        "untouched before {:?}\n          after  {:?}\nlags (cable 0→1, 1→0, RX ring 0, 1, TX \
         0, 1) before {:?} after {:?}",
        before.0, after.0, before.1, after.1
    );
    assert!(link, "a link is down");
    assert_eq!(after.0, before.0, "the link or the rings were touched");
    assert_eq!(after.1, before.1, "frames went missing");
}

#[test]
fn rx_filter_changes_while_locked_touch_neither_link_nor_rings_nor_the_offset() {
    let lab = start(31);
    // Each step holds 2 s; the steady window is as long as the whole change.
    let steps = [
        (SLAVE, "ptp_v2_event"),
        (MASTER, "ptp_v2_event"),
        (SLAVE, "all"),
        (MASTER, "all"),
        (SLAVE, "ptp_v2_l2_event"),
        (MASTER, "ptp_v2_l2_event"),
    ];
    let dur = Duration::from_millis(1000 * steps.len() as u64 + 1000);
    let m = steady_max(&lab, dur);
    let bound = 2 * m + i64::from(lab.cfg.quantum_ns);
    let before = (untouched(&lab), lags(&lab));
    let d0 = [MASTER, SLAVE].map(|i| driver(&lab, i));
    let mut next = 0;
    let off = window(&lab, dur, bound, |t| {
        while next < steps.len() && t >= next as f64 {
            let (i, f) = steps[next];
            ptpctl_tstamp(&lab, i, "on", f);
            next += 1;
        }
    });
    assert_eq!(next, steps.len());
    let s = OffsetStats::of(&off).unwrap();
    let d1 = [MASTER, SLAVE].map(|i| driver(&lab, i));
    eprintln!(
        "RX filter event → all → l2_event on both hosts: true offset {s:?} within ±{bound} ns \
         (2·{m} + q); RX stamped frames over the change: host0 {}, host1 {}",
        d1[0].rx_timestamped - d0[0].rx_timestamped,
        d1[1].rx_timestamped - d0[1].rx_timestamped
    );
    assert_no_disturbance(&lab, &before);
}

/// TX timestamping off: the driver still sends every frame but stamps none and reports each
/// request lost at once (`TxTimestampLost{Disabled}`); ptpd drops the message's context (a
/// master sends no Follow_Up for that Sync, a slave has no Delay_Req time), so the slave gets
/// no new offset and holds over on its last frequency, staying SLAVE. Turned on again, stamps
/// flow at once and the slave is back within the steady bound.
#[test]
fn tx_timestamping_off_holds_over_and_relocks_when_on_again() {
    let lab = start(32);
    let off_for = Duration::from_secs(3);
    let m = steady_max(&lab, off_for);
    let bound = 2 * m + i64::from(lab.cfg.quantum_ns);
    let before = (untouched(&lab), lags(&lab));
    let lost_log = |i: u32| {
        let log = std::fs::read_to_string(lab.hosts[i as usize].dir.join("ptpd.log")).unwrap();
        log.matches("TX timestamp lost (Disabled)").count()
    };
    for i in [MASTER, SLAVE] {
        ptpctl_tstamp(&lab, i, "off", "ptp_v2_l2_event");
    }
    // Counted from here: a stamp in flight when TX went off is reported lost by the disable
    // itself, before this.
    std::thread::sleep(Duration::from_millis(100));
    let (d0, m0) = (
        [MASTER, SLAVE].map(|i| driver(&lab, i)),
        [MASTER, SLAVE].map(|i| model(&lab, i)),
    );
    let p0 = [MASTER, SLAVE].map(lost_log);
    // Holdover: SLAVE throughout, within the lock band (the bound of 2·M + q is for after).
    let held = OffsetStats::of(&window(&lab, off_for, LOCK_NS, |_| {})).unwrap();
    let (d1, m1) = (
        [MASTER, SLAVE].map(|i| driver(&lab, i)),
        [MASTER, SLAVE].map(|i| model(&lab, i)),
    );
    for i in [MASTER, SLAVE] {
        ptpctl_tstamp(&lab, i, "on", "ptp_v2_l2_event");
    }
    let p1 = [MASTER, SLAVE].map(lost_log);
    let (t, worst) =
        within(&lab, bound, Duration::from_secs(20)).unwrap_or_else(|e| fail(&lab, &e));
    let d2 = [MASTER, SLAVE].map(|i| driver(&lab, i));
    let k = |i: usize| {
        format!(
            "host{i}: driver lost {}, delivered {}, requested {}; model latched {}; ptpd logged \
             {} lost (Disabled)",
            d1[i].tx_lost - d0[i].tx_lost,
            d1[i].tx_delivered - d0[i].tx_delivered,
            d1[i].tx_requested - d0[i].tx_requested,
            m1[i]["latched"] - m0[i]["latched"],
            p1[i] - p0[i]
        )
    };
    eprintln!(
        "TX off {off_for:?}: {}; {}; slave held over: true offset {held:?}; TX on: back within \
         ±{bound} ns (2·{m} + q) after {t:.1} s (max {worst} ns as SLAVE)",
        k(0),
        k(1),
    );
    for i in [0, 1] {
        // Nothing stamped while off, and every request that wanted a stamp reported lost,
        // to the driver's counters and to ptpd (which logs each it was waiting for).
        assert_eq!(
            m1[i]["latched"], m0[i]["latched"],
            "host{i} latched while off"
        );
        assert_eq!(d1[i].tx_delivered, d0[i].tx_delivered, "host{i} delivered");
        assert_eq!(
            d1[i].tx_requested, d0[i].tx_requested,
            "host{i} reserved a set"
        );
        let lost = d1[i].tx_lost - d0[i].tx_lost;
        assert!(lost > 0, "host{i}: no request while off?");
        assert!(
            p1[i] - p0[i] >= lost as usize,
            "host{i}: ptpd logged {} of {lost} lost",
            p1[i] - p0[i]
        );
        // On again: stamps flow.
        assert!(
            d2[i].tx_delivered > d1[i].tx_delivered,
            "host{i}: no stamp after on"
        );
    }
    assert_no_disturbance(&lab, &before);
}
