//! The sequencing against a fake guest: a model of the stack (a PHC, igcd and ptpd processes,
//! the channel) that answers ptpctl like the real one.

use std::collections::HashMap;
use std::time::Duration;

use serde_json::json;

use super::{Checker, Plan};
use crate::guest::{Daemon, Exit, Guest, GuestError, Ran, User};
use crate::report::{Check, Verdict};

const S: i128 = 1_000_000_000;

/// The fake stack. `igcd_restarts` false: a killed igcd's scheme stays registered, so a second
/// igcd exits with "File exists" (the Redox behaviour issue 22 reports).
struct Fake {
    now: i128,
    phc_at: (i128, i128),
    ppb: f64,
    igcd: Option<u32>,
    ptpd: Option<u32>,
    ring_segments: bool,
    /// The clock page a `shm` segment (the form before issue 23).
    shared_memory: bool,
    igcd_restarts: bool,
    ptpd_restarts: bool,
    connects: u64,
    logs: HashMap<Daemon, Vec<String>>,
    exited: HashMap<Daemon, String>,
    lines: Vec<String>,
}

impl Fake {
    fn new(igcd_restarts: bool) -> Fake {
        Fake {
            now: 0,
            phc_at: (0, 5 * S),
            ppb: 0.0,
            igcd: Some(8),
            ptpd: Some(9),
            ring_segments: true,
            shared_memory: false,
            igcd_restarts,
            ptpd_restarts: true,
            connects: 1,
            logs: HashMap::new(),
            exited: HashMap::new(),
            lines: Vec::new(),
        }
    }

    fn phc(&self) -> i128 {
        let dt = self.now - self.phc_at.0;
        self.phc_at.1 + dt + (dt as f64 * self.ppb / 1e9) as i128
    }

    fn set_phc(&mut self, ns: i128) {
        self.phc_at = (self.now, ns);
    }

    fn reply(&mut self, user: User, words: &[&str]) -> serde_json::Value {
        let err = |code: &str| json!({"ok": false, "error": code, "code": code});
        let write = matches!(words[0], "set" | "adj" | "freq");
        if write && user == User::Unprivileged {
            return err("PermissionDenied");
        }
        let up = self.igcd.is_some();
        if !up && words[0] != "status" {
            return err("NoDevice");
        }
        let arg = |i: usize| words[i].parse::<f64>().unwrap();
        match words[0] {
            "status" => json!({"ok": true, "driver_up": up, "link_up": up,
                "connects": self.connects}),
            "get" => json!({"ok": true, "ns": self.phc() as u64}),
            "set" => {
                self.set_phc((arg(1) * 1e9) as i128);
                json!({"ok": true})
            }
            "adj" => {
                self.set_phc(self.phc() + (arg(1) * 1e9) as i128);
                json!({"ok": true})
            }
            "freq" => {
                self.set_phc(self.phc());
                self.ppb = arg(1);
                json!({"ok": true})
            }
            "cmp" => json!({"ok": true, "offset_ns": (self.phc() - self.real()) as i64,
                "window_ns": 20_000}),
            "caps" => json!({"ok": true, "part": "Intel i225-LM", "vendor_id": 0x8086,
                "device_id": 0x15f2, "max_adj_ppb": 62_499_999, "tx_ts_sets": 4,
                "clock_page": if self.shared_memory { "/scheme/shm/ptp-igc-emu0" }
                    else { "/scheme/ptpdrv.emu0_igc/clock" }}),
            "stats" => json!({"ok": true, "mmio_reads": self.now as u64}),
            "bench" => json!({"ok": true, "n": 1000, "exact_p50_ns": 1_500_000,
                "page_p50_ns": 4_000}),
            other => panic!("verb {other}"),
        }
    }

    fn real(&self) -> i128 {
        self.now + 3 * S
    }

    fn log(&mut self, d: Daemon, line: &str) {
        self.logs.entry(d).or_default().push(line.to_string());
    }
}

impl Guest for Fake {
    fn ptpctl(&mut self, user: User, args: &[&str], _t: Duration) -> Result<Ran, GuestError> {
        let (m0, r0) = (self.now, self.real());
        self.now += 5_000_000;
        // ptpctl as fixed for issue 22 failure 6: `--output` carries errors alone, and a path
        // uid 1000 may not open (/scheme/debug) becomes stdout with a warning.
        let output = args.iter().position(|a| *a == "--output");
        let clock = args
            .iter()
            .position(|a| *a == "--clock")
            .map(|i| args[i + 1]);
        let json = args.contains(&"--json");
        let mut skip = false;
        let words: Vec<&str> = args
            .iter()
            .copied()
            .filter(|a| {
                let keep = !skip && !matches!(*a, "--json" | "--output" | "--clock");
                skip = matches!(*a, "--output" | "--clock");
                keep
            })
            .collect();
        let (mut stdout, mut stderr) = (String::new(), String::new());
        let mut code = 0;
        if clock.is_some_and(|c| c != "0") {
            code = 2;
            if output.is_none() {
                stderr = "ptpctl: no such clock\n".into();
            }
        } else if self.ptpd.is_some() {
            let reply = self.reply(user, &words);
            stdout = match (json, reply["ns"].as_u64()) {
                (false, Some(ns)) => format!(
                    "clock time is {}.{:09}\n",
                    ns / 1_000_000_000,
                    ns % 1_000_000_000
                ),
                _ => format!("{reply}\n"),
            };
            if output.is_some() && user == User::Unprivileged {
                stderr = "ptpctl: --output /scheme/debug: Operation not permitted; writing to stdout instead\n".into();
            }
        } else {
            code = 1;
        }
        self.now += 5_000_000;
        Ok(Ran {
            exit: Exit::Code(code),
            stdout,
            stderr,
            mono: (m0, self.now),
            real: (r0, self.real()),
        })
    }

    fn start(&mut self, d: Daemon, args: &[&str]) -> Result<(), GuestError> {
        self.exited.remove(&d);
        self.logs.remove(&d);
        match d {
            Daemon::Igcd if !self.igcd_restarts => {
                self.log(d, "register scheme ptpdrv.emu0_igc: File exists");
                self.exited.insert(d, "exit status: 1".into());
            }
            Daemon::Igcd => {
                self.ring_segments = !args.contains(&"--ring-segments");
                self.igcd = Some(20);
                self.log(d, "igcd[emu0]: INFO: readiness: none (foreground)");
                self.log(
                    d,
                    "igcd[emu0]: INFO: cold start: x; resetting the port and the PHC",
                );
                self.log(
                    d,
                    "igcd[emu0]: INFO: serving ptpd on /scheme/ptpdrv.emu0_igc/ptp",
                );
                self.set_phc(S / 2);
                self.connects += 1;
                let ch = if self.ring_segments { "ring" } else { "socket" };
                let line = format!("ptpd: INFO: emu0: connected to driver at x ({ch})");
                self.log(Daemon::Ptpd, &line);
            }
            Daemon::Igbd => {
                self.log(
                    d,
                    "igbd[emu1]: INFO: Intel I210 (8086:1533 rev 3) at emu:emu1",
                );
                self.log(
                    d,
                    "igbd[emu1]: INFO: serving ptpd on /scheme/ptpdrv.emu1_igb/ptp",
                );
            }
            Daemon::Ptpd => {
                self.log(d, "ptpd: INFO: emu0: connected to driver at x (ring)");
                if self.ptpd_restarts {
                    self.ptpd = Some(21);
                    self.connects = 1;
                    self.log(d, "ptpd: INFO: serving 1 clock(s) on /scheme/ptp");
                } else {
                    self.log(d, "ptpd: ERROR: register scheme ptp: File exists");
                    self.exited.insert(d, "exit status: 1".into());
                }
            }
        }
        Ok(())
    }

    fn log_of(&self, d: Daemon) -> Vec<String> {
        self.logs.get(&d).cloned().unwrap_or_default()
    }

    fn exited(&mut self, d: Daemon) -> Option<String> {
        self.exited.get(&d).cloned()
    }

    fn stop(&mut self, d: Daemon) {
        if d == Daemon::Igcd && self.igcd == Some(20) {
            self.igcd = None;
        }
    }

    fn processes(&mut self) -> Result<String, GuestError> {
        let mut t = String::from("PID EUID EGID STAT CPU AFFINITY TIME PRIVATE SHARED NAME\n");
        let row = |pid: u32, name: &str| {
            format!("{pid} 0 0 UB ? ~0 00:00:00.10 1.00 MB 0 B /scheme/initfs/bin/{name}\n")
        };
        t.extend(self.igcd.map(|p| row(p, "igcd-emu")));
        t.extend(self.ptpd.map(|p| row(p, "ptpd")));
        Ok(t)
    }

    fn kill(&mut self, pid: u32) -> Result<(), GuestError> {
        if self.igcd == Some(pid) {
            self.igcd = None;
        }
        if self.ptpd == Some(pid) {
            self.ptpd = None;
        }
        Ok(())
    }

    fn mono_ns(&self) -> i128 {
        self.now
    }

    /// igcd as fixed for issue 23: the page read-only at its scheme, no ring to a handle that
    /// was not lent one. `shared_memory`: the form before (a `shm` segment anyone may map).
    fn map_probe(&mut self, path: &str, writable: bool) -> Result<u64, i32> {
        match (path, writable, self.shared_memory) {
            (p, _, true) if p.starts_with("/scheme/shm/") => Ok(ptp_ipc::clockpage::MAGIC),
            ("/scheme/ptpdrv.emu0_igc/clock", false, _) => Ok(ptp_ipc::clockpage::MAGIC),
            ("/scheme/ptpdrv.emu0_igc/clock" | "/scheme/ptpdrv.emu0_igc/ptp", true, _) => {
                Err(libc::EACCES)
            }
            _ => Err(libc::ENOENT),
        }
    }

    fn real_ns(&self) -> i128 {
        self.real()
    }

    fn sleep(&mut self, d: Duration) {
        self.now += d.as_nanos() as i128;
    }

    fn emit(&mut self, line: &str) {
        self.lines.push(line.to_string());
    }
}

fn run(fake: &mut Fake) -> Vec<Check> {
    let plan = Plan {
        ptpd_config: "/scheme/initfs/etc/ptpd.toml".into(),
        bench_n: 1000,
    };
    let mut c = Checker::new(fake, plan);
    c.run_all();
    c.results
}

fn verdict(results: &[Check], name: &str) -> Verdict {
    results
        .iter()
        .find(|c| c.name == name)
        .unwrap_or_else(|| panic!("no check {name}: {results:#?}"))
        .verdict
}

#[test]
fn a_working_stack_passes_every_check_and_reports_the_cold_start() {
    let mut fake = Fake::new(true);
    let results = run(&mut fake);
    let failed: Vec<_> = results
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .collect();
    assert!(failed.is_empty(), "{failed:#?}");
    assert_eq!(verdict(&results, "igcd-restart-phc"), Verdict::Info);
    let figures: Vec<_> = fake
        .lines
        .iter()
        .filter(|l| l.starts_with("REDOX-FIGURE"))
        .collect();
    assert_eq!(figures.len(), 2, "{figures:?}");
    assert!(figures[1].contains("\"channel\":\"socket\""), "{figures:?}");
    for name in [
        "verb-set",
        "verb-adj",
        "verb-freq",
        "verb-cmp",
        "unpriv-set",
        "ptpd-by-hand",
    ] {
        assert_eq!(verdict(&results, name), Verdict::Ok, "{name}");
    }
}

/// The form before issue 23 (a `shm` clock page anyone may map writable) fails by name.
#[test]
fn a_clock_page_in_shared_memory_fails_the_memory_checks() {
    let mut fake = Fake::new(true);
    fake.shared_memory = true;
    let results = run(&mut fake);
    assert_eq!(verdict(&results, "mem-page-path"), Verdict::Fail);
    assert_eq!(verdict(&results, "mem-page-read-only"), Verdict::Fail);
    assert_eq!(verdict(&results, "mem-ring-unlent"), Verdict::Ok);
    assert_eq!(verdict(&results, "verb-get"), Verdict::Ok);
}

#[test]
fn an_igcd_that_cannot_restart_fails_its_checks_by_name_and_the_rest_still_run() {
    let mut fake = Fake::new(false);
    let results = run(&mut fake);
    assert_eq!(verdict(&results, "verb-get"), Verdict::Ok);
    assert_eq!(verdict(&results, "igcd-kill"), Verdict::Ok);
    let by_hand = results.iter().find(|c| c.name == "igcd-by-hand").unwrap();
    assert_eq!(by_hand.verdict, Verdict::Fail);
    assert!(by_hand.detail.contains("File exists"), "{by_hand:?}");
    assert_eq!(verdict(&results, "igcd-restart-reconnect"), Verdict::Fail);
    assert_eq!(verdict(&results, "ring-refused-fallback"), Verdict::Fail);
    // ptpd itself restarts, and says the driver is not there.
    assert_eq!(verdict(&results, "ptpd-kill"), Verdict::Ok);
}

#[test]
fn a_stack_that_does_not_serve_fails_default_ready_and_skips_the_verbs() {
    let mut fake = Fake::new(true);
    fake.igcd = None;
    let results = run(&mut fake);
    assert_eq!(verdict(&results, "default-ready"), Verdict::Fail);
    assert!(
        results
            .iter()
            .any(|c| c.name == "verb-*" && c.detail.contains("not run"))
    );
}

#[test]
fn a_ptpd_that_cannot_register_its_scheme_again_fails_by_hand_though_it_connected() {
    let mut fake = Fake::new(true);
    fake.ptpd_restarts = false;
    let results = run(&mut fake);
    let by_hand = results.iter().find(|c| c.name == "ptpd-by-hand").unwrap();
    assert_eq!(by_hand.verdict, Verdict::Fail);
    assert!(by_hand.detail.contains("File exists"), "{by_hand:?}");
    assert_eq!(verdict(&results, "ring-refused-fallback"), Verdict::Fail);
}

#[test]
fn a_driver_still_up_on_the_old_connection_is_not_a_reconnection() {
    // igcd "restarts" but ptpd never makes a new connection: connects stays put.
    let mut fake = Fake::new(true);
    fake.connects = 1;
    let mut c = Checker::new(
        &mut fake,
        Plan {
            ptpd_config: String::new(),
            bench_n: 10,
        },
    );
    let r = c.wait_reconnect(1, Duration::from_secs(2));
    assert!(r.unwrap_err().contains("no new driver connection"));
    let r = c.wait_reconnect(0, Duration::from_secs(2));
    assert!(r.is_ok(), "{r:?}");
}
