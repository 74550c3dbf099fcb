//! The scenarios of issue 22's stage 1, in order, each ending in named verdicts:
//!
//! 1. `default-ready`: init's ptpd (default config: the ring channel) serves `status`, driver up;
//! 2. `verb-*`: every ptpctl verb as root, each judged on its result (set reads back, adj steps,
//!    freq changes the rate `cmp` measures, ...); `bench` also prints its figures;
//! 3. `unpriv-*`: uid 1000 reads, and set/adj/freq get EPERM;
//! 4. `igcd-*`: igcd killed (its pid from `/scheme/sys/context`), started by hand, ptpd
//!    reconnects, and what became of the PHC (warm attach);
//! 5. `ptpd-*`: ptpd killed and started by hand, ptpctl works again;
//! 6. `ring-refused-*`: igcd restarted with `--ring-segments 0`: ptpd falls back to the socket
//!    and serves, bench over the socket.
//!
//! Every wait is bounded; a scenario whose precondition failed says so and moves on.

use std::time::Duration;

use serde_json::Value;

use crate::guest::{Exit, Guest, Ran, User};
use crate::judge::{self, Judged};
use crate::report::{Check, FIGURE, STEP, Verdict};
use ptp_ipc::sys_context as context;

/// What the check needs to know about the image.
#[derive(Debug, Clone)]
pub struct Plan {
    /// ptpd's configuration file, for the restart by hand.
    pub ptpd_config: String,
    /// Reads per path in `ptpctl bench`.
    pub bench_n: usize,
}

/// A ptpctl run's bound.
const CTL_TIMEOUT: Duration = Duration::from_secs(15);
/// `bench`'s bound: n exact reads even at the 100 ms request timeout stay inside it for n ≤ 1000.
const BENCH_TIMEOUT: Duration = Duration::from_secs(150);
/// How long a restarted daemon may take to be served / connected again.
const RECONNECT_WITHIN: Duration = Duration::from_secs(30);
/// How long a killed process may take to leave the context table / the driver to go down.
const GONE_WITHIN: Duration = Duration::from_secs(10);
/// The value `verb-set` sets (2023-11-14T22:13:20Z): far from the boot-time PHC.
const SET_TO_S: i128 = 1_700_000_000;
/// `verb-adj`'s step.
const STEP_S: i128 = 10;
const S: i128 = 1_000_000_000;
const IGCD_ARGS: [&str; 6] = ["--emulate", "i225", "--wire", "loopback", "--name", "emu0"];
/// igbd on an emulated i210 cabled to itself (not in ptpd's config: it only has to serve).
const IGBD_ARGS: [&str; 6] = ["--emulate", "i210", "--wire", "loopback", "--name", "emu1"];

/// Runs the scenarios against `g`, printing each verdict; returns them all.
pub struct Checker<'g, G: Guest> {
    g: &'g mut G,
    plan: Plan,
    pub results: Vec<Check>,
}

impl<'g, G: Guest> Checker<'g, G> {
    pub fn new(g: &'g mut G, plan: Plan) -> Self {
        Checker {
            g,
            plan,
            results: Vec::new(),
        }
    }

    /// Every scenario, in order.
    pub fn run_all(&mut self) {
        let serving = self.default_ready();
        if serving {
            self.verbs();
            self.bench("bench", "default");
            self.unprivileged();
        } else {
            for name in ["verb-*", "bench", "unpriv-*"] {
                self.record(Check::fail(
                    name,
                    "not run: ptpd is not serving (default-ready)",
                ));
            }
        }
        self.igcd_restart();
        let ptpd_by_hand = self.ptpd_restart();
        self.ring_refused(ptpd_by_hand);
        self.igbd_serves();
    }

    fn step(&mut self, name: &str) {
        self.g.emit(&format!("{STEP} {name}"));
    }

    fn record(&mut self, c: Check) {
        self.g.emit(&c.to_string());
        self.results.push(c);
    }

    fn judged(&mut self, name: &str, r: Judged) -> bool {
        let ok = r.is_ok();
        self.record(match r {
            Ok(d) => Check::ok(name, d),
            Err(d) => Check::fail(name, d),
        });
        ok
    }

    /// `ptpctl --json ARGS` as `user`: its JSON reply, or why there is none.
    fn ctl_as(&mut self, user: User, args: &[&str], t: Duration) -> Result<(Value, Ran), String> {
        let mut all = vec!["--json"];
        all.extend_from_slice(args);
        let ran = self.g.ptpctl(user, &all, t).map_err(|e| e.to_string())?;
        if let Exit::TimedOut(t) = ran.exit {
            return Err(format!(
                "ptpctl {} timed out after {t:?} (killed)",
                args.join(" ")
            ));
        }
        match judge::ptpctl_json(&ran.stdout) {
            Some(v) => Ok((v, ran)),
            None => Err(format!(
                "ptpctl {}: no JSON reply ({:?}; stderr {:?})",
                args.join(" "),
                ran.exit,
                ran.stderr.trim()
            )),
        }
    }

    fn ctl(&mut self, args: &[&str]) -> Result<(Value, Ran), String> {
        self.ctl_as(User::Root, args, CTL_TIMEOUT)
    }

    /// A root `get`: the reading and its run.
    fn get(&mut self) -> Result<(i128, Ran), String> {
        let (v, ran) = self.ctl(&["get"])?;
        Ok((judge::get_ns(&v)?, ran))
    }

    /// Polls `status` every 250 ms until the driver is `up` (or not), within `within`: the last
    /// status and the time it took, or the last thing seen.
    fn wait_driver(&mut self, up: bool, within: Duration) -> Result<(Value, Duration), String> {
        let t0 = self.g.mono_ns();
        loop {
            let last = match self.ctl(&["status"]) {
                Ok((v, _)) if (judge::status_up(&v).is_ok()) == up => {
                    return Ok((v, ns_dur(self.g.mono_ns() - t0)));
                }
                Ok((v, _)) => v.to_string(),
                Err(e) => e,
            };
            if self.g.mono_ns() - t0 >= within.as_nanos() as i128 {
                let want = if up { "up" } else { "down" };
                return Err(format!("driver not {want} within {within:?}; last: {last}"));
            }
            self.g.sleep(Duration::from_millis(250));
        }
    }

    /// ptpd's count of driver connections (`status`'s `connects`), 0 when it does not answer.
    fn connects(&mut self) -> u64 {
        self.ctl(&["status"])
            .ok()
            .and_then(|(v, _)| v["connects"].as_u64())
            .unwrap_or(0)
    }

    /// Polls `status` every 250 ms until the driver is up on a connection newer than the
    /// `before`-th (a status still up from the old connection does not count).
    fn wait_reconnect(&mut self, before: u64, within: Duration) -> Judged {
        let t0 = self.g.mono_ns();
        loop {
            let last = match self.ctl(&["status"]) {
                Ok((v, _)) if v["connects"].as_u64().unwrap_or(0) > before => {
                    match judge::status_up(&v) {
                        Ok(d) => {
                            let t = ns_dur(self.g.mono_ns() - t0);
                            return Ok(format!("reconnected after {t:?}: {d}"));
                        }
                        Err(d) => d,
                    }
                }
                Ok((v, _)) => format!(
                    "still connection {before}: {}",
                    judge::status_up(&v).unwrap_or_else(|e| e)
                ),
                Err(e) => e,
            };
            if self.g.mono_ns() - t0 >= within.as_nanos() as i128 {
                return Err(format!(
                    "no new driver connection within {within:?}; last: {last}"
                ));
            }
            self.g.sleep(Duration::from_millis(250));
        }
    }

    /// 1. init's ptpd serves with the default config.
    fn default_ready(&mut self) -> bool {
        self.step("default-ready");
        let r = self.wait_driver(true, RECONNECT_WITHIN).map(|(v, t)| {
            format!(
                "init's ptpd serves after {t:?}: {}",
                judge::status_up(&v).unwrap_or_default()
            )
        });
        self.judged("default-ready", r)
    }
}

pub(crate) fn ns_dur(ns: i128) -> Duration {
    Duration::from_nanos(ns.max(0) as u64)
}

mod daemons;
mod verbs;

#[cfg(test)]
mod tests;

/// The pids of `program` in `/scheme/sys/context`, or why they could not be read.
fn pids<G: Guest>(g: &mut G, program: &str) -> Result<Vec<u32>, String> {
    let text = g.processes().map_err(|e| e.to_string())?;
    Ok(context::pids_of(&context::parse(&text), program))
}

/// The last few lines of a daemon's log, for a failure's detail.
fn tail(lines: &[String], n: usize) -> String {
    let from = lines.len().saturating_sub(n);
    lines[from..].join(" | ")
}

/// A figure line.
fn figure_line(v: &Value) -> String {
    format!("{FIGURE} {v}")
}

/// For the checks that report a verdict other than ok/FAIL.
fn verdict_check(name: &str, (v, d): (Verdict, String)) -> Check {
    Check::new(name, v, d)
}
