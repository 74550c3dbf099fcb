//! Faults injected into the emulated i225s of a running, locked two-host lab (igcd
//! `--emu-faults`, `ptplab --faults`), each judged on ground truth: the TRUE offset of the slave
//! (host1) from the two models' published laws, the model's own counters (what it swallowed,
//! which set latched) and the driver's and ptpd's reports.
//!
//! Bounds: "steady" is measured in each run before its fault, once the servo has settled
//! (`steady_bound`): M, the largest |true offset| over 2 s. "Back within bound" means 10
//! samples in a row within 2·M + q (q: the stamp quantum), the issue's "2× its steady-state
//! max" plus the quantisation the servo cannot see below. "Lock kept" means SLAVE throughout
//! and |true offset| ≤ LOCK_NS (the lab's lock band). The loss tests bound the mean by the
//! run's own batch-means standard error. Faults go to the master's NIC unless said otherwise:
//! its Sync stamps are what the slave's offset rests on.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use ptp_ipc::{PortState, Stats};
use redox_ptp::figures::{LOCK_NS, OffsetStats};
use redox_ptp::lab::{Lab, LabConfig};

const SLAVE: u32 = 1;
const MASTER: u32 = 0;

/// A two-host lab with fault sockets, locked. Clocks start 20 µs and oscillators up to ±5 ppm
/// apart (the lab's defaults are 1 ms and ±20 ppm) so the servo settles in about 15 s instead
/// of 27 s: every fault is injected after that, so the start only costs test time.
fn start(seed: u64, loss: f64, announce_receipt_timeout: u8) -> Lab {
    start_with(LabConfig {
        seed,
        loss,
        announce_receipt_timeout,
        ..LabConfig::default()
    })
}

/// [`start`] with `c`'s own settings beside the fault socket and the near start.
fn start_with(c: LabConfig) -> Lab {
    let (seed, loss) = (c.seed, c.loss);
    let c = LabConfig {
        faults: true,
        initial_offset_ms: 0.02,
        ppm_spread: 10.0,
        ..c
    };
    let exe = std::path::PathBuf::from(env!("CARGO_BIN_EXE_ptplab"));
    let lab = Lab::start(c, &exe, None).unwrap();
    let (t, _) = lock(&lab, LOCK_NS, Duration::from_secs(90));
    eprintln!("seed {seed}, loss {loss}: locked (true offset) after {t:.1} s");
    lab
}

/// Waits until the slave is SLAVE with |true offset| ≤ `ns` in 10 samples in a row, 100 ms
/// apart; the seconds it took and the largest |true offset| seen as SLAVE meanwhile.
fn wait_within(lab: &Lab, ns: i64, timeout: Duration) -> Result<(f64, i64), String> {
    let t0 = Instant::now();
    let (mut good, mut last, mut worst) = (0, None, 0);
    while t0.elapsed() < timeout {
        if let Ok(s) = lab.sample(SLAVE, 0.0) {
            let slave = s.status.port_state == PortState::Slave;
            if slave && let Some(o) = s.true_offset_ns {
                worst = worst.max(o.abs());
            }
            let ok = slave && s.true_offset_ns.is_some_and(|o| o.abs() <= ns);
            good = if ok { good + 1 } else { 0 };
            if good >= 10 {
                return Ok((t0.elapsed().as_secs_f64(), worst));
            }
            last = Some(s);
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Err(format!(
        "not within ±{ns} ns (true) in {timeout:?}; last {last:?}"
    ))
}

fn lock(lab: &Lab, ns: i64, timeout: Duration) -> (f64, i64) {
    wait_within(lab, ns, timeout).unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()))
}

/// Samples the slave every 50 ms for `dur`, or until `done` says so, asserting the lock is
/// kept: SLAVE throughout, |true offset| ≤ LOCK_NS.
fn keep_locked(lab: &Lab, dur: Duration, mut done: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while t0.elapsed() < dur && !done() {
        if let Ok(s) = lab.sample(SLAVE, 0.0) {
            assert!(
                s.status.port_state == PortState::Slave,
                "left SLAVE: {s:?}\nslave's ptpd:\n{}",
                ptpd_states(lab)
            );
            if let Some(o) = s.true_offset_ns {
                assert!(o.abs() <= LOCK_NS, "lock lost: true offset {o} ns: {s:?}");
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits until the servo has settled and returns the steady bound 2·M + q. Right after lock
/// the true offset still decays (by about 0.6× a second here: a 60 ns tail at the lock band's
/// entry); settled = the largest |true offset| of a 2 s window is at least 0.7× the previous
/// window's, i.e. no longer shrinking. M is that window's largest |true offset|.
fn steady_bound(lab: &Lab, mut exits: Option<&mut Vec<String>>) -> i64 {
    let t0 = Instant::now();
    let mut prev: Option<i64> = None;
    loop {
        let off = match slave_window(lab, Duration::from_secs(2)) {
            Ok(off) => off,
            Err(e) => {
                let Some(exits) = exits.as_deref_mut() else {
                    panic!("left SLAVE while settling: {e}\n{}", ptpd_states(lab));
                };
                exits.push(e);
                wait_within(lab, LOCK_NS, Duration::from_secs(60))
                    .unwrap_or_else(|e| panic!("no re-lock after leaving SLAVE: {e}"));
                prev = None;
                continue;
            }
        };
        let s = OffsetStats::of(&off).expect("samples");
        if let Some(p) = prev
            && s.max_abs_ns * 10 >= p * 7
        {
            let b = 2 * s.max_abs_ns + i64::from(lab.cfg.quantum_ns);
            eprintln!(
                "settled {:.0} s after lock: {s:?}; steady bound ±{b} ns",
                t0.elapsed().as_secs_f64()
            );
            return b;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(90),
            "the servo did not settle: last 2 s {s:?}"
        );
        prev = Some(s.max_abs_ns);
    }
}

fn model(lab: &Lab, i: u32) -> HashMap<String, String> {
    lab.fault(i, "stats")
        .unwrap_or_else(|e| panic!("{e}"))
        .into_iter()
        .collect()
}

fn count(m: &HashMap<String, String>, k: &str) -> u64 {
    m[k].parse().unwrap()
}

fn per_set(m: &HashMap<String, String>) -> Vec<u64> {
    m["per_set"]
        .split(',')
        .map(|x| x.parse().unwrap())
        .collect()
}

fn driver(lab: &Lab, i: u32) -> Stats {
    lab.clients[i as usize].as_ref().unwrap().stats(0).unwrap()
}

/// The slave ptpd's state changes and master selections, for a failure message.
fn ptpd_states(lab: &Lab) -> String {
    let log = std::fs::read_to_string(lab.hosts[SLAVE as usize].dir.join("ptpd.log"));
    let keep = ["master", " to ", "link", "announce"];
    log.unwrap_or_default()
        .lines()
        .filter(|l| keep.iter().any(|k| l.contains(k)))
        .collect::<Vec<_>>()
        .join("\n")
}

/// Lines of host `i`'s ptpd log containing `what`.
fn ptpd_lines(lab: &Lab, i: u32, what: &str) -> usize {
    let log = std::fs::read_to_string(lab.hosts[i as usize].dir.join("ptpd.log")).unwrap();
    log.lines().filter(|l| l.contains(what)).count()
}

/// Waits (bounded) until `f` holds; false if it never did.
fn eventually(timeout: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t0 = Instant::now();
    while t0.elapsed() < timeout {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    f()
}

/// TX requests the driver holds a set for now: requested − delivered − lost, the least of a
/// few reads (a Sync's stamp is in flight for microseconds of every 125 ms).
fn held_sets(lab: &Lab, i: u32) -> u64 {
    (0..5)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(30));
            let d = driver(lab, i);
            d.tx_requested - d.tx_delivered - d.tx_lost
        })
        .min()
        .unwrap()
}

const PTPD_TIMEOUT: &str = "timed out waiting for a TX timestamp";

#[test]
fn lost_tx_stamps_are_each_reported_and_every_set_still_stamps() {
    let lab = start(11, 0.0, 3);
    let bound = steady_bound(&lab, None);
    let (d0, m0) = (driver(&lab, MASTER), model(&lab, MASTER));
    let p0 = ptpd_lines(&lab, MASTER, PTPD_TIMEOUT);
    // The master's Syncs: 3 swallowed hold sets 0–2 until the driver's 1 s timeout, so the next
    // Syncs take set 3; then 2 (set 2 takes over), then 1 (set 1). Each phase outlasts the
    // timeout, so every set is free again before the next.
    let mut phases = Vec::new();
    for n in [3u64, 2, 1] {
        let before = per_set(&model(&lab, MASTER));
        lab.fault(MASTER, &format!("drop-tx-stamps {n}")).unwrap();
        keep_locked(&lab, Duration::from_millis(2000), || false);
        let after = per_set(&model(&lab, MASTER));
        phases.push((
            n,
            before
                .iter()
                .zip(&after)
                .map(|(b, a)| a - b)
                .collect::<Vec<_>>(),
        ));
    }
    let reported = eventually(Duration::from_secs(5), || {
        driver(&lab, MASTER).tx_lost - d0.tx_lost >= 6
    });
    let (d1, m1) = (driver(&lab, MASTER), model(&lab, MASTER));
    let dropped = count(&m1, "dropped") - count(&m0, "dropped");
    let ptpd = ptpd_lines(&lab, MASTER, PTPD_TIMEOUT) - p0;
    let latched: Vec<u64> = per_set(&m1)
        .iter()
        .zip(per_set(&m0))
        .map(|(a, b)| a - b)
        .collect();
    eprintln!(
        "phases (stamps dropped, stamps latched per set): {phases:?}; model dropped {dropped}; \
         driver timeouts {}, lost {}, skipped {}, delivered {}; ptpd timeouts logged {ptpd}; \
         latched per set over the test {latched:?}",
        d1.tx_timeouts - d0.tx_timeouts,
        d1.tx_lost - d0.tx_lost,
        d1.tx_skipped - d0.tx_skipped,
        d1.tx_delivered - d0.tx_delivered,
    );
    assert!(reported, "driver reported {} lost", d1.tx_lost - d0.tx_lost);
    assert_eq!(dropped, 6, "the model swallowed {dropped}, not 6");
    // Each swallowed stamp reported lost by the driver (after its timeout) and by ptpd (its own
    // 50 ms wait), exactly once in the driver; no request went unstamped for want of a set.
    assert_eq!(d1.tx_timeouts - d0.tx_timeouts, dropped);
    assert_eq!(d1.tx_lost - d0.tx_lost, dropped);
    assert_eq!(
        d1.tx_skipped, d0.tx_skipped,
        "requests found every set busy"
    );
    assert!(ptpd >= dropped as usize, "ptpd logged {ptpd} timeouts");
    // No set leaked: every set latched stamps after the faults began, and set 0 (the first
    // free one) again after the last; nothing is held now.
    assert!(
        latched.iter().all(|&n| n > 0),
        "a set never stamped again: {latched:?}"
    );
    let last_phase = &phases[2].1;
    assert!(
        eventually(Duration::from_secs(2), || {
            per_set(&model(&lab, MASTER))[0] > per_set(&m1)[0]
        }),
        "set 0 latched nothing after the faults; last phase {last_phase:?}"
    );
    assert_eq!(held_sets(&lab, MASTER), 0, "a TX timestamp set stays held");
    let (t, worst) = wait_within(&lab, bound, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    eprintln!("true offset back within ±{bound} ns {t:.1} s after the faults (max {worst} ns)");
}

#[test]
fn a_stuck_valid_bit_times_its_set_out_and_the_set_recovers_when_cleared() {
    let lab = start(12, 0.0, 3);
    let bound = steady_bound(&lab, None);
    let (d0, m0) = (driver(&lab, MASTER), model(&lab, MASTER));
    // Set 0 is the one every Sync takes first: stuck, each request on it latches nothing (the
    // set looks busy) while TXTT_0 still reads set with the old stamp behind it.
    lab.fault(MASTER, "stick-txtt 0").unwrap();
    keep_locked(&lab, Duration::from_millis(2500), || false);
    lab.fault(MASTER, "clear-txtt 0").unwrap();
    let m1 = model(&lab, MASTER);
    let busy = count(&m1, "lost") - count(&m0, "lost");
    let stuck_reads = count(&m1, "stuck_reads") - count(&m0, "stuck_reads");
    // Every request that found the set stuck is timed out and reported lost — never handed the
    // stale stamp the set still shows.
    let timed_out = eventually(Duration::from_secs(3), || {
        driver(&lab, MASTER).tx_timeouts - d0.tx_timeouts >= busy
    });
    let d1 = driver(&lab, MASTER);
    eprintln!(
        "stuck 2.5 s: model lost {busy} stamps to the busy set, {stuck_reads} releasing reads \
         survived; driver timeouts {}, lost {}, delivered {}",
        d1.tx_timeouts - d0.tx_timeouts,
        d1.tx_lost - d0.tx_lost,
        d1.tx_delivered - d0.tx_delivered
    );
    assert!(busy >= 1 && stuck_reads >= 1, "the fault did not bite");
    assert!(
        timed_out,
        "the driver did not time the stuck set's requests out"
    );
    assert_eq!(d1.tx_timeouts - d0.tx_timeouts, busy);
    assert_eq!(d1.tx_lost - d0.tx_lost, busy);
    // Cleared: set 0 stamps again and nothing stays held.
    assert!(
        eventually(Duration::from_secs(2), || {
            per_set(&model(&lab, MASTER))[0] > per_set(&m1)[0]
        }),
        "set 0 did not stamp again after the bit was cleared"
    );
    assert_eq!(held_sets(&lab, MASTER), 0, "a TX timestamp set stays held");
    let (t, worst) = wait_within(&lab, bound, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    eprintln!("true offset back within ±{bound} ns {t:.1} s after clearing (max {worst} ns)");
}

#[test]
fn dropped_interrupts_delay_stamps_but_lose_none_and_keep_lock() {
    // The interrupt path: with the inline stamp (the default) the thread that sends a frame
    // takes its stamp with the interrupt gated, and no time-sync interrupt is raised to drop.
    let lab = start_with(LabConfig {
        seed: 13,
        tx_inline_us: None,
        ..LabConfig::default()
    });
    let bound = steady_bound(&lab, None);
    let (d0, m0) = (driver(&lab, MASTER), model(&lab, MASTER));
    // 16 time-sync interrupts of the master (its Sync stamps: ~2 s of them) raise no message;
    // ICR.TS still shows, so the driver's bounded wait finds them.
    const N: u64 = 16;
    lab.fault(MASTER, &format!("drop-ts-irqs {N}")).unwrap();
    let t0 = Instant::now();
    keep_locked(&lab, Duration::from_secs(15), || {
        count(&model(&lab, MASTER), "ts_irqs_dropped") - count(&m0, "ts_irqs_dropped") >= N
    });
    let took = t0.elapsed().as_secs_f64();
    // Stamps that were due when the last interrupt was dropped still come.
    keep_locked(&lab, Duration::from_secs(1), || false);
    let (d1, m1) = (driver(&lab, MASTER), model(&lab, MASTER));
    let dropped = count(&m1, "ts_irqs_dropped") - count(&m0, "ts_irqs_dropped");
    let latched = count(&m1, "latched") - count(&m0, "latched");
    eprintln!(
        "{dropped} interrupts dropped over {took:.1} s; model latched {latched}; driver \
         delivered {}, lost {}, interrupts handled {}",
        d1.tx_delivered - d0.tx_delivered,
        d1.tx_lost - d0.tx_lost,
        d1.interrupts - d0.interrupts
    );
    assert_eq!(dropped, N, "the fault did not run its course");
    assert_eq!(d1.tx_lost, d0.tx_lost, "stamps lost to dropped interrupts");
    assert!(
        d1.tx_delivered - d0.tx_delivered + 1 >= latched,
        "latched {latched}, delivered {}",
        d1.tx_delivered - d0.tx_delivered
    );
    let (t, worst) = wait_within(&lab, bound, Duration::from_secs(15))
        .unwrap_or_else(|e| panic!("{e}\n{}", lab.logs()));
    eprintln!("true offset within ±{bound} ns {t:.1} s later (max {worst} ns)");
}

/// A 1.5 s link-down on both ends: the slave shows FAULTY at once, and once the link is back it
/// is SLAVE again, within its steady bound after at most [`FLAP_RELOCK`], and meanwhile as
/// SLAVE never outside the lock band ([`LOCK_NS`]) or, if further, [`FLAP_EXCURSION`] × the
/// bound past the offset it came back with (the holdover's drift). The Announces lost meanwhile
/// make statime take the port through MASTER, which starts a new servo; its first seconds
/// wander by 10–72 ns here (a fixed 4 × the bound failed once in CI at 72 ns). Before ptpd kept
/// the frequency in force across that (clock.rs `TracedFilter::rebase_if_fresh`), the new servo
/// restarted from the PHC's frequency at ptpd's start: up to 6.7 µs as SLAVE, 13–14 s to get
/// back within the bound. With it: about 2.5 s.
#[test]
fn a_link_flap_takes_the_slave_out_of_slave_and_it_relocks() {
    let lab = start(14, 0.0, 3);
    let bound = steady_bound(&lab, None);
    // The cable is pulled: both PHYs lose the link (STATUS.LU clear, ICR.LSC).
    let down = Instant::now();
    for i in [MASTER, SLAVE] {
        lab.fault(i, "link down").unwrap();
    }
    let mut seen = None;
    let left = eventually(Duration::from_secs(2), || {
        let s = lab.status(SLAVE).unwrap();
        seen = Some((s.port_state, s.link_up));
        s.port_state != PortState::Slave && !s.link_up
    });
    assert!(left, "slave still {seen:?} with the cable pulled");
    let left_after = down.elapsed().as_secs_f64();
    std::thread::sleep(Duration::from_millis(1500).saturating_sub(down.elapsed()));
    let up = Instant::now();
    for i in [MASTER, SLAVE] {
        lab.fault(i, "link up").unwrap();
    }
    // The true offset it comes back with: what holding over (1.5 s down, then the seconds to
    // SLAVE) left, set by how well the frequency was known before the flap, not by the servo.
    let mut entry = 0;
    let back = eventually(Duration::from_secs(20), || {
        let s = lab.sample(SLAVE, 0.0).unwrap();
        entry = s.true_offset_ns.unwrap_or(0).abs();
        s.status.port_state == PortState::Slave
    });
    let slave_after = up.elapsed().as_secs_f64();
    assert!(
        back,
        "not SLAVE again 20 s after the link came back\n{}",
        lab.logs()
    );
    let (t, worst) = wait_within(&lab, bound, FLAP_RELOCK.saturating_sub(up.elapsed()))
        .unwrap_or_else(|e| panic!("{e} ({FLAP_RELOCK:?} after link up)\n{}", lab.logs()));
    eprintln!(
        "link down: slave {:?} after {left_after:.2} s; link up: SLAVE after {slave_after:.1} \
         s with true offset {entry} ns, within ±{bound} ns {:.1} s after link up (max {worst} \
         ns as SLAVE)",
        seen,
        slave_after + t
    );
    let limit = LOCK_NS.max(entry + FLAP_EXCURSION * bound);
    assert!(
        worst <= limit,
        "true offset reached {worst} ns as SLAVE after the flap, beyond ±{limit} ns (the lock \
         band, or the {entry} ns it came back with + {FLAP_EXCURSION} × ±{bound} ns)\n{}",
        ptpd_states(&lab)
    );
    assert!(lab.status(SLAVE).unwrap().link_up);
    assert_eq!(lab.status(MASTER).unwrap().port_state, PortState::Master);
}

/// Time from link up until the slave is back within its steady bound after a link flap.
const FLAP_RELOCK: Duration = Duration::from_secs(8);
/// Largest |true offset| as SLAVE after a link flap beyond the offset it came back with, in
/// steady bounds.
const FLAP_EXCURSION: i64 = 4;

/// Locks under `loss` per direction; over 8 s as SLAVE the mean true offset is 0 within 6
/// batch-means standard errors + q (no asymmetry: the truth is 0) and its rms within the lock
/// band.
///
/// A lossy cable also costs Announces, and statime 0.4 drops a parent that has fewer than 2
/// Announces within 4 announce intervals (`bmc::foreign_master`): the slave then selects its own
/// clock and goes MASTER until the parent qualifies again (seen at 10 %, mostly on a loaded
/// machine: "SLAVE to MASTER on RS_GRAND_MASTER"). That is counted and reported, not failed: the
/// window restarts once the slave is back within its steady bound (at most 3 times).
fn locks_under_loss(seed: u64, loss: f64, art: u8) {
    let lab = start(seed, loss, art);
    let mut exits = Vec::new();
    let bound = steady_bound(&lab, Some(&mut exits));
    let q = f64::from(lab.cfg.quantum_ns);
    let off = loop {
        match slave_window(&lab, Duration::from_secs(8)) {
            Ok(off) => break off,
            Err(e) => {
                let (t, worst) = wait_within(&lab, bound, Duration::from_secs(60))
                    .unwrap_or_else(|e| panic!("no re-lock after leaving SLAVE: {e}"));
                eprintln!(
                    "left SLAVE ({e}); back within ±{bound} ns after {t:.1} s (max {worst} ns)"
                );
                exits.push(e);
                assert!(exits.len() <= 3, "left SLAVE {} times", exits.len());
            }
        }
    };
    let s = OffsetStats::of(&off).unwrap();
    let se = redox_ptp::figures::batch_se(&off, 10).unwrap();
    let b = 6.0 * se + q;
    let lost: Vec<u64> = (0..2)
        .map(|i| lab.truth_snapshot(i).unwrap().wire_lost)
        .collect();
    eprintln!(
        "loss {loss}: true offset {s:?}, SE {se:.2} ns, mean bound ±{b:.1} ns; frames lost \
         towards host0, host1 {lost:?}; left SLAVE {} times: {exits:?}",
        exits.len()
    );
    assert!(lost.iter().all(|&n| n > 0), "no frame lost: {lost:?}");
    assert!(
        s.mean_ns.abs() <= b,
        "mean {:.1} ns beyond ±{b:.1}",
        s.mean_ns
    );
    assert!(s.rms_ns <= LOCK_NS as f64, "{s:?}");
}

/// The slave's true offsets every 50 ms for `dur`, all as SLAVE within the lock band; an error
/// naming the state (and the slave ptpd's last state change) if it leaves SLAVE.
fn slave_window(lab: &Lab, dur: Duration) -> Result<Vec<i64>, String> {
    let t0 = Instant::now();
    let mut off = Vec::new();
    while t0.elapsed() < dur {
        if let Ok(s) = lab.sample(SLAVE, 0.0) {
            if s.status.port_state != PortState::Slave {
                let states = ptpd_states(lab);
                let last = states.lines().rfind(|l| l.contains(" to "));
                return Err(format!(
                    "{:?} after {:.1} s; {}",
                    s.status.port_state,
                    t0.elapsed().as_secs_f64(),
                    last.unwrap_or("")
                ));
            }
            if let Some(o) = s.true_offset_ns {
                assert!(o.abs() <= LOCK_NS, "lock lost: true offset {o} ns: {s:?}");
                off.push(o);
            }
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    Ok(off)
}

#[test]
fn one_percent_frame_loss_locks_on_the_truth() {
    locks_under_loss(15, 0.01, 3);
}

#[test]
fn ten_percent_frame_loss_locks_on_the_truth() {
    locks_under_loss(16, 0.10, 3);
}
