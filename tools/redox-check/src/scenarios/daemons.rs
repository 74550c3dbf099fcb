//! 4. igcd killed and started by hand, 5. ptpd killed and started by hand, 6. a ring refused.

use std::time::Duration;

use super::{
    Checker, GONE_WITHIN, IGBD_ARGS, IGCD_ARGS, RECONNECT_WITHIN, ns_dur, pids, tail, verdict_check,
};
use crate::guest::{Daemon, Guest};
use crate::judge::{self, Judged};
use crate::report::Check;

/// How long a daemon started by hand may take to say it serves.
const SERVING_WITHIN: Duration = Duration::from_secs(60);

impl<G: Guest> Checker<'_, G> {
    /// Kills the one running `program` found in `/scheme/sys/context` and waits until it has
    /// left the table: its pid and how long that took.
    fn kill_program(&mut self, program: &str) -> Result<(u32, Duration), String> {
        let found = pids(self.g, program)?;
        let [pid] = found[..] else {
            return Err(format!(
                "expected one {program} in /scheme/sys/context, found {found:?}"
            ));
        };
        self.g.kill(pid).map_err(|e| e.to_string())?;
        let t0 = self.g.mono_ns();
        loop {
            if !pids(self.g, program)?.contains(&pid) {
                return Ok((pid, ns_dur(self.g.mono_ns() - t0)));
            }
            if self.g.mono_ns() - t0 >= GONE_WITHIN.as_nanos() as i128 {
                return Err(format!(
                    "{program} pid {pid} still listed {GONE_WITHIN:?} after SIGKILL"
                ));
            }
            self.g.sleep(Duration::from_millis(100));
        }
    }

    /// Waits until the hand-started `d` logs a line containing `needle`, or exits.
    fn wait_log(&mut self, d: Daemon, needle: &str, within: Duration) -> Judged {
        let t0 = self.g.mono_ns();
        loop {
            let lines = self.g.log_of(d);
            if let Some(l) = lines.iter().find(|l| l.contains(needle)) {
                return Ok(format!("after {:?}: {l}", ns_dur(self.g.mono_ns() - t0)));
            }
            if let Some(how) = self.g.exited(d) {
                return Err(format!(
                    "{} exited ({how}): {}",
                    d.program(),
                    tail(&lines, 4)
                ));
            }
            if self.g.mono_ns() - t0 >= within.as_nanos() as i128 {
                return Err(format!(
                    "no {needle:?} from {} within {within:?}: {}",
                    d.program(),
                    tail(&lines, 4)
                ));
            }
            self.g.sleep(Duration::from_millis(100));
        }
    }

    /// 4. igcd killed, started by hand; ptpd reconnects; the PHC across it.
    pub(super) fn igcd_restart(&mut self) {
        self.step("igcd-kill");
        let connects = self.connects();
        let before = self.get();
        let r = self.kill_program(Daemon::Igcd.program()).and_then(|(pid, t)| {
            let (v, t2) = self.wait_driver(false, GONE_WITHIN).map_err(|e| {
                format!("pid {pid} killed, gone after {t:?}, but ptpd did not see it: {e}")
            })?;
            Ok(format!(
                "pid {pid} killed, gone after {t:?}; ptpd saw the driver down after {t2:?} ({})",
                judge::status_up(&v).unwrap_err()
            ))
        });
        self.judged("igcd-kill", r);

        self.step("igcd-by-hand");
        let r = self.start_igcd(&IGCD_ARGS);
        let started = self.judged("igcd-by-hand", r);

        self.step("igcd-restart-reconnect");
        let r = self.wait_reconnect(connects, RECONNECT_WITHIN);
        let back = self.judged("igcd-restart-reconnect", r);

        self.step("igcd-restart-phc");
        let c = match (before, back, started) {
            (Ok((b, rb)), true, true) => match self.get() {
                Ok((a, ra)) => {
                    let log = self.g.log_of(Daemon::Igcd);
                    let said = judge::attach_kind(log.iter().map(String::as_str));
                    let (lo, hi) = (ra.mono.0 - rb.mono.1, ra.mono.1 - rb.mono.0);
                    verdict_check(
                        "igcd-restart-phc",
                        judge::phc_across_restart(b, a, lo, hi, said),
                    )
                }
                Err(e) => Check::fail("igcd-restart-phc", format!("get after the restart: {e}")),
            },
            (Err(e), ..) => Check::fail(
                "igcd-restart-phc",
                format!("no reading before the kill: {e}"),
            ),
            _ => Check::fail(
                "igcd-restart-phc",
                "not judged: igcd did not come back (above)",
            ),
        };
        self.record(c);
    }

    /// Starts igcd by hand with `args` and waits until it serves its scheme.
    fn start_igcd(&mut self, args: &[&str]) -> Judged {
        self.g
            .start(Daemon::Igcd, args)
            .map_err(|e| e.to_string())?;
        let serving = self.wait_log(Daemon::Igcd, "serving ptpd on", SERVING_WITHIN)?;
        let log = self.g.log_of(Daemon::Igcd);
        let mode = log.iter().find(|l| l.contains("readiness:")).cloned();
        Ok(format!(
            "{serving}; {}",
            mode.unwrap_or_else(|| "no readiness line".into())
        ))
    }

    /// 5. ptpd killed and started by hand; ptpctl works again. True if a ptpd by hand serves.
    pub(super) fn ptpd_restart(&mut self) -> bool {
        self.step("ptpd-kill");
        let r = self
            .kill_program(Daemon::Ptpd.program())
            .and_then(|(pid, t)| match self.ctl(&["status"]) {
                Ok((v, _)) if v["ok"] == true => {
                    Err(format!("pid {pid} killed, but status still answers: {v}"))
                }
                Ok((v, _)) => Ok(format!(
                    "pid {pid} killed, gone after {t:?}; ptpctl: {}",
                    v["error"]
                )),
                Err(e) => Ok(format!("pid {pid} killed, gone after {t:?}; ptpctl: {e}")),
            });
        self.judged("ptpd-kill", r);

        self.step("ptpd-by-hand");
        let config = self.plan.ptpd_config.clone();
        let r = self
            .g
            .start(Daemon::Ptpd, &["-f", &config])
            .map_err(|e| e.to_string())
            .and_then(|()| self.wait_log(Daemon::Ptpd, "serving ", RECONNECT_WITHIN));
        self.judged("ptpd-by-hand", r);

        self.step("ptpd-restart-serves");
        let r = self.wait_driver(true, RECONNECT_WITHIN).and_then(|(_, t)| {
            let (ns, _) = self.get()?;
            let log = self.g.log_of(Daemon::Ptpd);
            let ch =
                judge::channel_of(log.iter().map(String::as_str)).unwrap_or_else(|| "?".into());
            Ok(format!(
                "serves after {t:?} over the {ch} channel; get {:.6} s",
                judge::secs(ns)
            ))
        });
        self.judged("ptpd-restart-serves", r)
    }

    /// Scenario 7: igbd (the i210/i350/82576 driver) on an emulated i210, started by hand,
    /// comes up and serves its driver channel; then it is stopped.
    pub(super) fn igbd_serves(&mut self) {
        self.step("igbd-by-hand");
        let r = self
            .g
            .start(Daemon::Igbd, &IGBD_ARGS)
            .map_err(|e| e.to_string())
            .and_then(|()| {
                let want = "serving ptpd on /scheme/ptpdrv.emu1_igb/ptp";
                self.wait_log(Daemon::Igbd, want, SERVING_WITHIN)
            });
        self.judged("igbd-by-hand", r);
        self.g.stop(Daemon::Igbd);
    }

    /// 6. igcd restarted with `--ring-segments 0`: ptpd falls back to the socket and serves.
    pub(super) fn ring_refused(&mut self, ptpd_by_hand: bool) {
        self.step("ring-refused-igcd");
        // ptpd's log lines and connections from here on belong to the new igcd.
        let seen = self.g.log_of(Daemon::Ptpd).len();
        let connects = self.connects();
        let r = self.stop_igcd().and_then(|()| {
            let mut args = IGCD_ARGS.to_vec();
            args.extend(["--ring-segments", "0"]);
            self.start_igcd(&args)
        });
        let igcd = self.judged("ring-refused-igcd", r);

        self.step("ring-refused-fallback");
        let r = if !ptpd_by_hand {
            Err("not judged: no ptpd started by hand serves (ptpd-restart-serves)".into())
        } else if !igcd {
            Err("not judged: igcd with --ring-segments 0 did not start (ring-refused-igcd)".into())
        } else {
            self.socket_fallback(seen, connects)
        };
        let fallback = self.judged("ring-refused-fallback", r);
        if fallback {
            self.bench("ring-refused-bench", "socket");
        } else {
            self.record(Check::fail(
                "ring-refused-bench",
                "not run: no socket fallback (above)",
            ));
        }
    }

    /// Stops whichever igcd runs (the hand-started one, then any left in the context table) and
    /// waits for ptpd to see the driver down.
    fn stop_igcd(&mut self) -> Result<(), String> {
        self.g.stop(Daemon::Igcd);
        if !pids(self.g, Daemon::Igcd.program())?.is_empty() {
            self.kill_program(Daemon::Igcd.program())?;
        }
        // A ptpd that is not there cannot report it; the start below is judged either way.
        let _ = self.wait_driver(false, GONE_WITHIN);
        Ok(())
    }

    /// ptpd (by hand) reconnects over the socket and serves; its log lines from `seen` on and
    /// its connections after the `connects`-th are the new igcd's.
    fn socket_fallback(&mut self, seen: usize, connects: u64) -> Judged {
        let up = self.wait_reconnect(connects, RECONNECT_WITHIN)?;
        // The connection line may trail the status through the log pipe.
        let t0 = self.g.mono_ns();
        let channel = loop {
            let log = self.g.log_of(Daemon::Ptpd);
            let new = log[seen.min(log.len())..].iter().map(String::as_str);
            if let Some(ch) = judge::channel_of(new) {
                break ch;
            }
            if self.g.mono_ns() - t0 >= LOG_LAG.as_nanos() as i128 {
                return Err(format!(
                    "{up}, but ptpd logged no new connection: {}",
                    tail(&log, 4)
                ));
            }
            self.g.sleep(Duration::from_millis(100));
        };
        if channel != "socket" {
            return Err(format!(
                "ptpd reconnected over the {channel} channel, not the socket"
            ));
        }
        let (ns, _) = self.get()?;
        Ok(format!(
            "over the socket: {up}; get {:.6} s",
            judge::secs(ns)
        ))
    }
}

/// How long a daemon's log line may trail what ptpctl already sees.
const LOG_LAG: Duration = Duration::from_secs(5);
