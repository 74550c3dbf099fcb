//! The i225 clock path end to end: app → ptpd → igcd → emulated NIC registers and back, with
//! every piece a separate process (issue: the i225 clock path).

mod common;

use std::process::Command;
use std::time::{Duration, Instant};

use common::{Host, exe};
use ptp_emu::truth::{TruthReader, TruthSnapshot};
use ptp_ipc::ClockError;
use ptp_ipc::time::realtime_ns;

const NS: i128 = 1_000_000_000;

/// PHC minus CLOCK_REALTIME at a moment, from the tightest of 25 gettimex samples; returns
/// (host midpoint, offset, width of the bracketing window).
fn offset_window(c: &ptpd::client::Client) -> (i128, i128, u64) {
    let s = c.gettimex(0, 25).unwrap();
    // A bracket the wall clock stepped back in says nothing; there is always another.
    let b = ptp_ipc::TimeXSample::tightest(&s).expect("a sample with an ordered bracket");
    (
        b.mid_ns(),
        b.offset_ns(),
        b.bracket_ns().unwrap_or_default(),
    )
}

#[test]
fn set_then_get_round_trips() {
    let h = Host::start("set", 0.0, "");
    let c = h.client();
    let target: u64 = 1_000_000 * NS as u64 + 123_456_789;
    let t0 = Instant::now();
    c.set(0, target).unwrap();
    let got = c.get(0).unwrap();
    let bound = t0.elapsed().as_nanos() as u64;
    // The clock runs on from the set value: never behind it, and ahead by at most the time the
    // two requests took.
    assert!(got >= target, "got {got} < set {target}");
    assert!(
        got - target <= bound,
        "got {got} is {} ns past the set value (bound {bound})",
        got - target
    );
}

/// The true size of a step: PHC_after(t) − PHC_before(t) at one host instant `t`, from the
/// emulated PHC's published laws before and after it. Both laws run at the same rate (checked),
/// so the difference is the same at every `t`; each side truncates to whole ns.
fn true_step(before: &TruthSnapshot, after: &TruthSnapshot) -> i128 {
    let (b, a) = (before.law.parts(), after.law.parts());
    assert!(
        after.generation > before.generation,
        "the step wrote no SYSTIM"
    );
    assert_eq!(
        (b.timinca, b.osc_ppb, b.running),
        (a.timinca, a.osc_ppb, a.running),
        "the rate changed across the step"
    );
    let t = a.base_t.max(b.base_t);
    after.law.ns_at(t) as i128 - before.law.ns_at(t) as i128
}

/// The error bounds igcd logged for its steps, in order ("adjtime D ns: step error bound B ns").
fn logged_step_bounds(h: &Host) -> Vec<u64> {
    let log = std::fs::read_to_string(h.paths.dir.join("igcd.log")).unwrap_or_default();
    log.lines()
        .filter_map(|l| l.split_once("step error bound ")?.1.split(' ').next())
        .map(|b| b.parse().unwrap())
        .collect()
}

#[test]
fn adj_moves_the_clock_by_the_amount() {
    let h = Host::start("adj", 0.0, "");
    let c = h.client();
    let truth = TruthReader::open(&h.paths.truth).unwrap();
    // Measured exactly, from the model's own law, against the bound igcd states for each step:
    // half of each host-clock bracket around its base read and its read-back (when, within
    // them, SYSTIM latched), the read-back's residual against the step's law, 2 ns of
    // truncation and 100 ppm of rate doubt over the step's span (drivers/intel-common
    // clock.rs, `step_report`). A step counts only when that bound is under its size, so a
    // no-op (off by |delta|) or a sign flip (2·|delta|) cannot pass; a step preempted so long
    // that its bound is wider is still checked against it, then tried again. The smallest
    // steps are a few µs: a debug build on a loaded 2-core machine has host-clock brackets that
    // put the bound near 1 µs (650–1030 ns seen with a second `cargo test` beside it), so a
    // sub-µs step cannot be resolved here at all; steps of +1000 and −333 ns are exercised
    // exactly on a virtual clock (drivers/intel-emulate/tests/igc_step.rs, igc_model.rs).
    let mut steps = 0;
    for delta in [5000i64, -3333, 1_000_000, -1_500_000_000] {
        let mut tries = Vec::new();
        loop {
            let before = truth.snapshot().unwrap();
            c.adj(0, delta).unwrap();
            let after = truth.snapshot().unwrap();
            steps += 1;
            let err = true_step(&before, &after) - delta as i128;
            let bounds = logged_step_bounds(&h);
            let Some(&bound) = bounds.get(steps - 1) else {
                panic!(
                    "igcd logged {} step lines for {steps} steps (RUST_LOG hides info?)\n{}",
                    bounds.len(),
                    h.logs()
                )
            };
            assert!(
                err.unsigned_abs() <= bound as u128,
                "adj {delta}: truly off by {err} ns, beyond igcd's bound {bound} ns"
            );
            if bound < delta.unsigned_abs() {
                eprintln!(
                    "adj {delta}: truly off by {err} ns, bound {bound} ns, {} retries",
                    tries.len()
                );
                break;
            }
            tries.push(bound);
            assert!(
                tries.len() < 20,
                "adj {delta}: bounds {tries:?} ns never resolve the step"
            );
        }
    }
}

/// A measured PHC rate and how well this run's samples determine it.
#[derive(Debug, Clone, Copy)]
struct Rate {
    /// PHC rate relative to CLOCK_REALTIME, minus one, in ppb.
    ppb: f64,
    /// Standard error of `ppb` (see [`measured_rate`]).
    se_ppb: f64,
    /// Points in the final fit.
    n: usize,
    /// Lag-1 autocorrelation of the fit's residuals.
    rho: f64,
    /// Residual scatter and the scatter the brackets alone imply (ns).
    sigma_res_ns: f64,
    sigma_bracket_ns: f64,
}

/// PHC rate relative to the host clock by least squares over `dur` of gettimex samples, with
/// the standard error of the slope from this run's own scatter.
fn measured_rate(c: &ptpd::client::Client, dur: Duration) -> Rate {
    let start = Instant::now();
    let mut all = Vec::new();
    while start.elapsed() < dur {
        all.push(offset_window(c));
        std::thread::sleep(Duration::from_millis(1));
    }
    // Samples whose bracket was stretched by preemption carry most of the noise: keep those
    // no wider than the median window.
    let mut w: Vec<u64> = all.iter().map(|p| p.2).collect();
    w.sort_unstable();
    let limit = w[w.len() / 2];
    let kept: Vec<&(i128, i128, u64)> = all.iter().filter(|p| p.2 <= limit).collect();
    let x0 = kept[0].0;
    let pts: Vec<(f64, f64, f64)> = kept
        .iter()
        .map(|p| ((p.0 - x0) as f64, p.1 as f64, p.2 as f64))
        .collect();
    // Least squares, then once more without the samples more than 4 MADs off the first line:
    // a burst of disturbed samples (the host preempted mid-bracket in a way the window does not
    // show) must not tilt the fit.
    let (a, b) = fit(&pts);
    let mut res: Vec<f64> = pts.iter().map(|p| (p.1 - (a + b * p.0)).abs()).collect();
    res.sort_by(f64::total_cmp);
    let mad = res[res.len() / 2].max(1.0);
    let pts: Vec<(f64, f64, f64)> = pts
        .into_iter()
        .filter(|p| (p.1 - (a + b * p.0)).abs() <= 4.0 * mad)
        .collect();
    let (a, b) = fit(&pts);
    // Standard error of the slope: σ / √Sxx. σ is the residual scatter, but never less than
    // what the brackets alone imply (the PHC was read somewhere inside each window of width w:
    // a uniform error of variance w²/12). Residuals of neighbouring samples can be correlated
    // (a slow host disturbance spans several); with lag-1 autocorrelation ρ > 0 the effective
    // number of independent points is n(1 − ρ)/(1 + ρ), which widens the SE accordingly.
    let n = pts.len() as f64;
    let r: Vec<f64> = pts.iter().map(|p| p.1 - (a + b * p.0)).collect();
    let var_res = r.iter().map(|e| e * e).sum::<f64>() / (n - 2.0);
    let var_bracket = pts.iter().map(|p| p.2 * p.2 / 12.0).sum::<f64>() / n;
    let rho = (r.windows(2).map(|e| e[0] * e[1]).sum::<f64>()
        / r.iter().map(|e| e * e).sum::<f64>().max(f64::MIN_POSITIVE))
    .clamp(0.0, 0.99);
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let se = (var_res.max(var_bracket) / sxx).sqrt() * ((1.0 + rho) / (1.0 - rho)).sqrt();
    Rate {
        ppb: b * 1e9,
        se_ppb: se * 1e9,
        n: pts.len(),
        rho,
        sigma_res_ns: var_res.sqrt(),
        sigma_bracket_ns: var_bracket.sqrt(),
    }
}

/// Least-squares line y = a + b·x through (x, y, _).
fn fit(pts: &[(f64, f64, f64)]) -> (f64, f64) {
    let n = pts.len() as f64;
    let mx = pts.iter().map(|p| p.0).sum::<f64>() / n;
    let my = pts.iter().map(|p| p.1).sum::<f64>() / n;
    let sxy: f64 = pts.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    let sxx: f64 = pts.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let b = sxy / sxx;
    (my - b * mx, b)
}

/// How many standard errors a measured rate may be off. For a normally distributed estimate,
/// P(|Z| > 5.3) ≈ 1.2e-7; the test makes two such checks, so a correct clock fails one with
/// probability below 1e-6. The slope of a fit over thousands of points is close to normal even
/// when single offsets are not, and the SE above is widened for correlated residuals.
const K_SE: f64 = 5.3;
/// Below this the SE is not trusted: the model's rate is exact only to the INCVALUE and float
/// rounding of the expectation, far below it.
const FLOOR_PPB: f64 = 0.05;

#[test]
fn freq_changes_the_measured_rate_as_the_model_predicts() {
    // A 5 ppm oscillator error, so the test also checks that adjfine composes with it.
    let h = Host::start("freq", 5.0, "");
    let c = h.client();
    let ppb = 20_000.0;
    let scaled = (ppb * 65.536f64).round() as i64;
    let base = measured_rate(&c, Duration::from_secs(6));
    c.freq(0, scaled).unwrap();
    let adjusted = measured_rate(&c, Duration::from_secs(6));
    // The model's expectation: INCVALUE = (scaled << 14) / 78125 in 2^-32 ns per 3.2 ns tick,
    // multiplying the oscillator's (1 + 5 ppm).
    let inc = ((scaled as u64) << 14) / 78_125;
    let adj = inc as f64 / 4_294_967_296.0 / 3.2;
    let expect_delta = (1.0 + 5e-6) * adj * 1e9;
    let delta = adjusted.ppb - base.ppb;
    let se = base.se_ppb.hypot(adjusted.se_ppb);
    let bound = (K_SE * se).max(FLOOR_PPB);
    let base_bound = (K_SE * base.se_ppb).max(FLOOR_PPB);
    for (name, r) in [("base", &base), ("adjusted", &adjusted)] {
        eprintln!(
            "rate {name}: {:.3} ± {:.3} ppb (n {}, ρ {:.2}, σ residuals {:.1} ns, σ brackets {:.1} ns)",
            r.ppb, r.se_ppb, r.n, r.rho, r.sigma_res_ns, r.sigma_bracket_ns
        );
    }
    eprintln!("rate delta {delta:.3} ppb, model {expect_delta:.3}, bound {bound:.3}");
    // 20 000 ppb applied as 19 000 (wrong scale) or −20 000 (wrong sign) is off by ≥ 1000 ppb;
    // the bound is a few ppb at most unless the run's own scatter says it cannot tell.
    assert!(
        bound < 100.0,
        "this run cannot resolve the rate: SE {se:.3} ppb ({base:?}, {adjusted:?})"
    );
    assert!(
        (delta - expect_delta).abs() <= bound,
        "rate changed by {delta:.3} ppb, model predicts {expect_delta:.3} ppb, bound {bound:.3} \
         ({K_SE} SE; base {base:?}, adjusted {adjusted:?})"
    );
    assert!(
        (base.ppb - 5000.0).abs() <= base_bound,
        "free-running rate {:.3} ppb, oscillator is 5000 ppb, bound {base_bound:.3}",
        base.ppb
    );
}

#[test]
fn out_of_range_values_get_einval() {
    let h = Host::start("einval", 0.0, "");
    let c = h.client();
    let err = |r: Result<(), ptpd::client::ClientError>| r.unwrap_err().clock_error();
    // Beyond igc's max_adj of 62 499 999 ppb.
    assert_eq!(
        err(c.freq(0, (62_500_000.0f64 * 65.536) as i64 + 1)),
        Some(ClockError::InvalidArgument)
    );
    assert_eq!(err(c.freq(0, i64::MIN)), Some(ClockError::InvalidArgument));
    // SYSTIMH holds u32 seconds.
    assert_eq!(
        err(c.set(0, (u32::MAX as u64 + 1) * NS as u64)),
        Some(ClockError::InvalidArgument)
    );
    // A step that would take the clock below zero.
    assert_eq!(
        err(c.adj(0, -(realtime_ns() as i64) - 1_000 * NS as i64)),
        Some(ClockError::InvalidArgument)
    );
    assert_eq!(
        c.gettimex(0, 0).unwrap_err().clock_error(),
        Some(ClockError::InvalidArgument)
    );
    assert_eq!(
        c.gettimex(0, 26).unwrap_err().clock_error(),
        Some(ClockError::InvalidArgument)
    );
    // No such clock.
    assert_eq!(
        c.get(7).unwrap_err().clock_error(),
        Some(ClockError::NoDevice)
    );
    // The bad requests changed nothing: frequency still nominal per status.
    assert_eq!(c.status(0).unwrap().freq_scaled_ppm, 0);
}

#[test]
fn killing_igcd_gives_enodev_promptly_and_recovers_on_restart() {
    let mut h = Host::start("restart", 0.0, "");
    let c = h.client();
    let gen1 = c.status(0).unwrap().generation;
    c.get(0).unwrap();
    h.kill_igcd();
    let t = Instant::now();
    let err = loop {
        match c.get(0) {
            Err(e) => break e,
            Ok(_) => {
                assert!(
                    t.elapsed() < Duration::from_secs(1),
                    "ptpd still answers 1 s after igcd died"
                );
                std::thread::sleep(Duration::from_millis(5));
            }
        }
    };
    assert!(
        t.elapsed() < Duration::from_secs(1),
        "ENODEV took {:?}",
        t.elapsed()
    );
    assert_eq!(err.clock_error(), Some(ClockError::NoDevice), "{err}");
    assert!(!c.status(0).unwrap().driver_up);
    // The same client connection keeps working once the driver is back.
    h.start_igcd();
    let t = Instant::now();
    while c.get(0).is_err() {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "no recovery:\n{}",
            h.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let st = c.status(0).unwrap();
    assert!(st.driver_up);
    assert_ne!(
        st.generation, gen1,
        "a restarted driver must report a new generation"
    );
    assert_eq!(
        st.connects,
        2,
        "ptpd reconnected more than once:\n{}",
        h.logs()
    );
}

#[test]
fn ptpctl_without_ptpd_fails_clearly() {
    let dir = common::TempDir::new("noptpd");
    let out = Command::new(exe())
        .args(["ptpctl", "--socket"])
        .arg(dir.0.join("nothing.sock"))
        .arg("get")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("cannot reach ptpd"), "{err}");
    assert!(err.contains("nothing.sock"), "{err}");
}

#[test]
fn ptpctl_verbs_and_json() {
    let h = Host::start("ptpctl", 0.0, "");
    let json = |args: &[&str]| -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let out = h.ptpctl(&a);
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    };
    assert_eq!(json(&["caps"])["part"], "Intel i225-LM");
    assert_eq!(json(&["caps"])["max_adj_ppb"], 62_499_999);
    assert_eq!(json(&["set", "5000.5"])["ns"], 5_000_500_000_000u64);
    let got = json(&["get"])["ns"].as_u64().unwrap();
    assert!(
        (5_000_500_000_000..5_010_000_000_000).contains(&got),
        "{got}"
    );
    assert_eq!(json(&["adj", "-0.5"])["delta_ns"], -500_000_000);
    assert_eq!(json(&["freq", "-12.5"])["scaled_ppm"], -819);
    let cmp = json(&["cmp"]);
    assert!(cmp["window_ns"].as_u64().unwrap() < 10_000_000);
    let st = json(&["status"]);
    assert_eq!(st["driver_up"], true);
    assert_eq!(st["link_up"], true);
    let b = json(&["bench", "-n", "200"]);
    assert!(b["page_p50_ns"].as_u64().unwrap() < b["exact_p50_ns"].as_u64().unwrap());
    // gettime through the exact path costs the driver 2 MMIO reads (SYSTIML, SYSTIMH); the
    // watchdog's refreshes add a few.
    let per = b["mmio_reads_per_exact_read"].as_f64().unwrap();
    assert!((2.0..2.5).contains(&per), "{per}");
}
