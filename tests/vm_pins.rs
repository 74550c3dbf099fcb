//! Issue 29, Linux's judgement of the pins: a Debian 6.1 guest whose i225 is our model (device
//! host `--pins`) runs Linux's igc and linuxptp's ts2phc on the PHC, a generic PPS source on
//! SDP1 fed by the lab GPS receiver (`ptplab gps`). Linux's code, written for the real part,
//! must get its external timestamps from the model: its PIN_SETFUNC, its EXTTS_REQUEST2 (both
//! edges, as igc demands), its AUTT1 interrupt and AUXSTMP reads. Judged twice:
//!
//! - by ts2phc: it reaches its locked state (`s2`) with its offsets within [`LOCK_NS`];
//! - on ground truth: the guest's PHC, from the model's record, reads a whole second (within
//!   [`LOCK_NS`]) at the true instant of each of the last pulses (+ the model's latch delay).
//!
//! Then Linux's periodic output: `phc-pins` (our testptp stand-in, src/bin/phc-pins.rs) asks
//! igc for a 1 PPS on SDP0 (PTP_PIN_SETFUNC, PTP_PEROUT_REQUEST2); every edge the model puts on
//! the pin wire must fall at the true instant the guest's PHC reads its grid point.
//!
//! The guest's clock is set from the host's to the second first: ts2phc takes a pulse's
//! second from it and tells the pulse's edges apart by it (with `pulsewidth` 400 ms it
//! tolerates 200 ms). Only the phase is judged: the seconds follow the guest's clock (UTC or
//! TAI, as its ts2phc build decides).
//!
//! Needs the VM packages (tests/vm_igc.rs); fails with the apt-get line without them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use ptp_emu::truth::TruthReader;
use redox_ptp::procs::Children;
use redox_ptp::vm::{GuestSetup, Vm, VmConfig, fresh_dir};

/// A functional bound, as tests/vm_ptp.rs's: the stamps are exact, the guest's servo runs under
/// TCG.
const LOCK_NS: i64 = 1_000;
const CMD: Duration = Duration::from_secs(60);
/// The model's input latch delay (ptp_emu `PinsConfig::default`).
const LATCH_NS: u64 = 8;

/// ts2phc's "offset" lines: (offset ns, servo state).
fn ts2phc_offsets(log: &str) -> Vec<(i64, String)> {
    log.lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            w.find(|x| *x == "offset")?;
            let off = w.next()?.parse().ok()?;
            Some((off, w.next()?.to_string()))
        })
        .collect()
}

#[test]
fn ts2phc_offset_lines_parse() {
    let log = "ts2phc[100.1]: eth0 offset     -123 s0 freq      +0\n\
               ts2phc[101.1]: eth0 offset       12 s2 freq  -3000\nother line\n";
    assert_eq!(
        ts2phc_offsets(log),
        [(-123, "s0".to_string()), (12, "s2".to_string())]
    );
}

#[test]
fn linux_ts2phc_locks_the_guest_phc_to_the_gps_pulse_on_our_pins() {
    let dir = fresh_dir("vm-pins");
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_ptplab"));
    let (pins, truth) = (dir.join("pins.sock"), dir.join("vm.truth"));
    let args: Vec<OsString> = vec![
        "--seed".into(),
        "29".into(),
        "--osc-ppm".into(),
        "7".into(),
        "--truth".into(),
        truth.clone().into(),
        "--pins".into(),
        pins.clone().into(),
    ];
    let cfg = VmConfig {
        devhost: vec![exe.clone().into(), "devhost".into()],
        devhost_args: args,
        run_dir: dir.join("vm"),
        cache_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-cache"),
        boot_timeout: Duration::from_secs(120),
    };
    let setup = GuestSetup {
        binaries: vec![
            "/usr/sbin/ts2phc".into(),
            env!("CARGO_BIN_EXE_phc-pins").into(),
        ],
        append: vec![],
    };
    let mut vm = Vm::boot_with(&cfg, &setup).unwrap_or_else(|e| panic!("{e}"));
    let run = |vm: &mut Vm, c: &str| vm.run(c, CMD).unwrap_or_else(|e| panic!("{c}: {e}")).text();
    // The guest's clock to the host's second, sent just after a host second begins.
    let now = ptp_ipc::time::realtime_ns();
    std::thread::sleep(Duration::from_nanos(1_000_000_000 - now % 1_000_000_000));
    let s = ptp_ipc::time::realtime_ns() / 1_000_000_000;
    run(&mut vm, &format!("date -u -s @{s} > /dev/null"));
    run(&mut vm, "ip link set eth0 up");
    let conf = "[global]\\nuse_syslog 0\\nlogging_level 7\\nts2phc.pulsewidth 400000000\\n\
                [eth0]\\nts2phc.pin_index 1\\nts2phc.channel 0\\nts2phc.extts_polarity both\\n";
    run(&mut vm, &format!("printf '{conf}' > /tmp/ts2phc.cfg"));
    run(
        &mut vm,
        "ts2phc -f /tmp/ts2phc.cfg -s generic -m > /tmp/ts2phc.log 2>&1 &",
    );
    let mut kids = Children::default();
    let epoch = redox_ptp::gps::default_epoch_ns();
    let gps_log = dir.join("gps.log");
    let mut gps = std::process::Command::new(&exe);
    gps.arg("gps")
        .arg("--pins")
        .arg(&pins)
        .args(["--pin", "1", "--width-ms", "400"])
        .arg("--epoch-ns")
        .arg(epoch.to_string())
        .stdout(std::fs::File::create(&gps_log).unwrap())
        .stderr(std::fs::File::create(dir.join("gps.err")).unwrap());
    kids.spawn("gps", gps).unwrap();
    // ts2phc locked: 8 offsets in a row in s2, each within the bound.
    let t0 = Instant::now();
    let locked = loop {
        let log = run(&mut vm, "cat /tmp/ts2phc.log");
        let o = ts2phc_offsets(&log);
        let tail = &o[o.len().saturating_sub(8)..];
        if tail.len() == 8 && tail.iter().all(|(x, s)| s == "s2" && x.abs() <= LOCK_NS) {
            break tail.to_vec();
        }
        let gone = kids.exited();
        assert!(
            gone.is_empty(),
            "the GPS receiver exited: {gone:?}: {}",
            std::fs::read_to_string(dir.join("gps.err")).unwrap_or_default()
        );
        assert!(
            t0.elapsed() < Duration::from_secs(120),
            "ts2phc did not lock within 120 s:\n{log}\n{}\n{}",
            run(&mut vm, "dmesg | tail -n 20"),
            run(
                &mut vm,
                "ps; ls -l /dev/ptp* /usr/bin/ts2phc; cat /tmp/ts2phc.cfg; date"
            )
        );
        std::thread::sleep(Duration::from_secs(2));
    };
    eprintln!(
        "ts2phc locked {:.1} s after the GPS started; its last offsets: {locked:?}",
        t0.elapsed().as_secs_f64()
    );
    // Ground truth: the guest's PHC at the pulses' true instants. The guest steers its PHC
    // after every pulse, so each pulse is judged under the law in force at its instant: every
    // law is recorded (by generation) for 6 s, and a pulse counts only when the laws around it
    // were all seen.
    let reader = TruthReader::open(&truth).unwrap();
    let mut laws: Vec<ptp_emu::truth::TruthSnapshot> = Vec::new();
    let watch = Instant::now();
    while watch.elapsed() < Duration::from_secs(6) {
        let snap = reader.snapshot().unwrap();
        if laws.last().is_none_or(|l| l.generation != snap.generation) {
            laws.push(snap);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let text = std::fs::read_to_string(&gps_log).unwrap();
    let pulses: Vec<u64> = text
        .lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok()?["t_mono"].as_u64())
        .collect();
    let errs: Vec<i64> = pulses
        .iter()
        .filter_map(|&t| {
            let at = t + LATCH_NS;
            // The last law that began by `at`, its successor seen (or none: still in force).
            let i = laws.iter().rposition(|l| l.law.parts().base_t <= at)?;
            let next_ok = laws
                .get(i + 1)
                .is_none_or(|n| n.generation == laws[i].generation + 1);
            let prev_ok = i > 0 && laws[i - 1].generation + 1 == laws[i].generation;
            (next_ok && prev_ok).then(|| {
                let frac = (laws[i].ns_at(at) as i64).rem_euclid(1_000_000_000);
                if frac > 500_000_000 {
                    frac - 1_000_000_000
                } else {
                    frac
                }
            })
        })
        .collect();
    eprintln!("guest PHC at the last pulses, ns off a whole second (truth): {errs:?}");
    assert!(!errs.is_empty(), "no pulse since the PHC's last law change");
    assert!(
        errs.iter().all(|e| e.abs() <= LOCK_NS),
        "the guest PHC is off the pulse: {errs:?}"
    );
    perout_from_linux(&mut vm, &pins, &reader);
    drop(kids);
    let report = vm.shutdown().expect("the device host's report");
    let problems = redox_ptp::vm::report_problems(&report);
    assert!(problems.is_empty(), "device host: {problems:?}");
}

/// Linux's igc drives a 1 PPS output on SDP0 (PTP_PIN_SETFUNC, PTP_PEROUT_REQUEST2 from
/// `phc-pins`, as testptp -L 0,2 -p 1000000000 does; igc picks its clock-output mode for a 1 s
/// period): every edge the model puts on the pin wire is at the true instant the guest's PHC
/// reads its grid point (start + k × 500 ms), rising on the second.
fn perout_from_linux(vm: &mut Vm, pins: &std::path::Path, reader: &TruthReader) {
    vm.run("killall ts2phc; sleep 0.5", CMD).unwrap();
    let scope = ptp_emu::pinwire::PinClient::connect(pins).unwrap();
    let out = vm
        .run("phc-pins -d /dev/ptp0 -i 0 -L 0,2 -p 1000000000", CMD)
        .unwrap();
    let text = out.text();
    assert_eq!(out.rc, 0, "phc-pins: {text}");
    let start: u64 = text
        .split_whitespace()
        .skip_while(|w| *w != "start")
        .nth(1)
        .and_then(|w| w.split('.').next()?.parse().ok())
        .unwrap_or_else(|| panic!("no start in {text:?}"));
    let mut edges = Vec::new();
    let end = Instant::now() + Duration::from_secs(10);
    while edges.len() < 4 && Instant::now() < end {
        if let Some(e) = scope.recv(Duration::from_millis(500)).unwrap()
            && e.pin == 0
        {
            edges.push(e);
        }
    }
    assert!(
        edges.len() >= 4,
        "{} edges on SDP0 from Linux's PEROUT",
        edges.len()
    );
    let snap = reader.snapshot().unwrap();
    let mut errs = Vec::new();
    for (k, e) in edges.iter().enumerate() {
        assert!(
            snap.law.parts().base_t <= e.t,
            "the guest PHC's law changed"
        );
        let grid = start * 1_000_000_000 + k as u64 * 500_000_000;
        let (before, at) = (snap.ns_at(e.t - 1), snap.ns_at(e.t));
        assert!(
            before < grid && at >= grid,
            "edge {k}: the guest PHC read {before}..{at}, grid {grid}"
        );
        assert_eq!(e.high, k % 2 == 0, "edge {k}");
        errs.push(at - grid);
    }
    eprintln!(
        "Linux's 1 PPS on SDP0: {} edges, each where the PHC reads its grid point",
        errs.len()
    );
}
