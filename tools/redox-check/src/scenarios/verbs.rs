//! 2. every ptpctl verb as root, 3. the unprivileged client, and bench's figures.

use std::time::Duration;

use super::{BENCH_TIMEOUT, CTL_TIMEOUT, Checker, S, SET_TO_S, STEP_S, figure_line};
use crate::guest::{Guest, Ran, User};
use crate::judge::{self, Judged};

/// One verb's check.
type Verb<C> = fn(&mut C) -> Judged;
/// A rule judging one ptpctl run.
type Rule<'a> = &'a dyn Fn(&Ran) -> Judged;

/// How long `verb-freq` lets the changed rate run between its two `cmp`s.
const RATE_INTERVAL: Duration = Duration::from_secs(4);

impl<G: Guest> Checker<'_, G> {
    /// 2. caps, get, set, adj, freq, cmp, status, stats (bench separately).
    pub(super) fn verbs(&mut self) {
        let steps: [(&str, Verb<Self>); 8] = [
            ("verb-caps", Self::caps),
            ("verb-get", Self::get_verb),
            ("verb-set", Self::set_verb),
            ("verb-adj", Self::adj_verb),
            ("verb-freq", Self::freq_verb),
            ("verb-cmp", Self::cmp_verb),
            ("verb-status", Self::status_verb),
            ("verb-stats", Self::stats_verb),
        ];
        for (name, f) in steps {
            self.step(name);
            let r = f(self);
            self.judged(name, r);
        }
    }

    fn caps(&mut self) -> Judged {
        judge::caps(&self.ctl(&["caps"])?.0)
    }

    fn get_verb(&mut self) -> Judged {
        let (ns, _) = self.get()?;
        if ns <= 0 {
            return Err(format!("clock time {ns} ns"));
        }
        Ok(format!("clock time is {:.6} s", judge::secs(ns)))
    }

    /// set then get: reads back the value set, plus the time between (the set landed somewhere
    /// in its run's bracket, the get somewhere in its own).
    fn set_verb(&mut self) -> Judged {
        let (v, set) = self.ctl(&["set", &SET_TO_S.to_string()])?;
        judge::ok_reply(&v)?;
        let (got, get) = self.get()?;
        let (lo, hi) = (get.mono.0 - set.mono.1, get.mono.1 - set.mono.0);
        judge::moved_by(SET_TO_S * S, got, 0, lo, hi)
            .map(|d| format!("set {SET_TO_S} s, read back: {d}"))
    }

    /// get, adj +10 s, get: moved by the step plus the time between the reads.
    fn adj_verb(&mut self) -> Judged {
        let (b, rb) = self.get()?;
        judge::ok_reply(&self.ctl(&["adj", &STEP_S.to_string()])?.0)?;
        let (a, ra) = self.get()?;
        judge::moved_by(
            b,
            a,
            STEP_S * S,
            ra.mono.0 - rb.mono.1,
            ra.mono.1 - rb.mono.0,
        )
    }

    /// freq +F, cmp, wait, cmp, freq 0: the rate between the cmps is F.
    fn freq_verb(&mut self) -> Judged {
        let max = self.ctl(&["caps"])?.0["max_adj_ppb"].as_i64().unwrap_or(0);
        let ppb = (max / 2).clamp(0, 10_000_000) as f64;
        judge::ok_reply(&self.ctl(&["freq", &ppb.to_string()])?.0)?;
        let c1 = self.ctl(&["cmp"]);
        self.g.sleep(RATE_INTERVAL);
        let c2 = self.ctl(&["cmp"]);
        let back = self.ctl(&["freq", "0"]);
        let ((v1, r1), (v2, r2)) = (c1?, c2?);
        judge::ok_reply(&back?.0).map_err(|e| format!("freq 0 afterwards: {e}"))?;
        let off = |v: &serde_json::Value| v["offset_ns"].as_i64().map(i128::from);
        let win = |v: &serde_json::Value| v["window_ns"].as_i64().map(i128::from).unwrap_or(0);
        let (Some(o1), Some(o2)) = (off(judge::ok_reply(&v1)?), off(judge::ok_reply(&v2)?)) else {
            return Err(format!("cmp without offset_ns: {v1} {v2}"));
        };
        let mid = |r: &crate::guest::Ran| (r.real.0 + r.real.1) / 2;
        let spread = (r1.real.1 - r1.real.0 + r2.real.1 - r2.real.0) / 2;
        judge::rate(
            o1,
            o2,
            win(&v1) + win(&v2),
            mid(&r2) - mid(&r1),
            spread,
            ppb,
        )
    }

    /// get between realtime reads, then cmp: the offsets agree.
    fn cmp_verb(&mut self) -> Judged {
        let (phc, ran) = self.get()?;
        let (v, _) = self.ctl(&["cmp"])?;
        judge::cmp_consistent(&v, phc, ran.real.0, ran.real.1)
    }

    fn status_verb(&mut self) -> Judged {
        let (v, _) = self.ctl(&["status"])?;
        let d = judge::status_up(&v)?;
        if v["link_up"] != serde_json::Value::Bool(true) {
            return Err(format!("link down: {d}"));
        }
        Ok(d)
    }

    /// stats, get, stats: the driver read registers for the get.
    fn stats_verb(&mut self) -> Judged {
        let (b, _) = self.ctl(&["stats"])?;
        self.get()?;
        let (a, _) = self.ctl(&["stats"])?;
        judge::stats_moved(&b, &a)
    }

    /// `bench`: figures printed as a REDOX-FIGURE line labelled with `channel`.
    pub(super) fn bench(&mut self, name: &str, channel: &str) -> bool {
        self.step(name);
        let n = self.plan.bench_n.to_string();
        let r = self
            .ctl_as(User::Root, &["bench", "-n", &n], BENCH_TIMEOUT)
            .and_then(|(v, _)| judge::bench(&v, channel));
        match r {
            Ok((detail, mut fig)) => {
                fig["check"] = name.into();
                self.g.emit(&figure_line(&fig));
                self.judged(name, Ok(detail))
            }
            Err(e) => self.judged(name, Err(e)),
        }
    }

    /// 3. uid 1000: get works, set/adj/freq are refused with EPERM.
    pub(super) fn unprivileged(&mut self) {
        self.step("unpriv-get");
        let r = self
            .ctl_as(User::Unprivileged, &["get"], CTL_TIMEOUT)
            .and_then(|(v, _)| judge::get_ns(&v))
            .map(|ns| format!("uid 1000 reads {:.6} s", judge::secs(ns)));
        self.judged("unpriv-get", r);
        let tries: [(&str, &[&str]); 3] = [
            ("unpriv-set", &["set", "1"]),
            ("unpriv-adj", &["adj", "1"]),
            ("unpriv-freq", &["freq", "1000"]),
        ];
        for (name, args) in tries {
            self.step(name);
            let r = self
                .ctl_as(User::Unprivileged, args, CTL_TIMEOUT)
                .and_then(|(v, _)| judge::eperm(&v));
            self.judged(name, r);
        }
        self.output_checks();
        self.memory_checks();
    }

    /// Issue 23: the clock page and ring segments are igcd's own memory, lent by its scheme:
    /// the page read-only to anyone, a ring only to the handle it was lent to. Probed as root,
    /// which the refusals do not exempt (they are per handle, not per uid).
    fn memory_checks(&mut self) {
        self.step("mem-page-path");
        let page = self.ctl(&["caps"]).and_then(|(v, _)| {
            v.get("clock_page")
                .and_then(|p| p.as_str())
                .map(str::to_string)
                .ok_or_else(|| format!("caps has no clock_page: {v}"))
        });
        let judged = match &page {
            Ok(p) if p.starts_with("/scheme/ptpdrv.") && p.ends_with("/clock") => {
                Ok(format!("the clock page is served by the driver at {p}"))
            }
            Ok(p) => Err(format!("the clock page is {p}, not the driver's scheme")),
            Err(e) => Err(e.clone()),
        };
        let served = self.judged("mem-page-path", judged);
        self.step("mem-page-read-only");
        let r = match page {
            Ok(p) if served => {
                judge::page_read_only(&p, self.g.map_probe(&p, false), self.g.map_probe(&p, true))
            }
            _ => Err("not run: no clock page on the driver's scheme".into()),
        };
        self.judged("mem-page-read-only", r);
        self.step("mem-ring-unlent");
        let chan = "/scheme/ptpdrv.emu0_igc/ptp";
        let r = judge::ring_unlent(chan, self.g.map_probe(chan, true));
        self.judged("mem-ring-unlent", r);
    }

    /// Issue 22 failure 6: `--output /scheme/debug` for uid 1000, and an error written once.
    fn output_checks(&mut self) {
        let unpriv = |r: &Ran| judge::output_unprivileged(&r.exit, &r.stdout, &r.stderr);
        let once = |r: &Ran| judge::output_error_once(&r.exit, &r.stderr);
        let runs: [(&str, User, &[&str], Rule); 2] = [
            (
                "output-unpriv",
                User::Unprivileged,
                &["--output", "/scheme/debug", "get"],
                &unpriv,
            ),
            (
                "output-error-once",
                User::Root,
                &["--output", "/scheme/debug", "--clock", "7", "get"],
                &once,
            ),
        ];
        for (name, user, args, rule) in runs {
            self.step(name);
            let r = self
                .g
                .ptpctl(user, args, CTL_TIMEOUT)
                .map_err(|e| e.to_string());
            self.judged(name, r.and_then(|ran| rule(&ran)));
        }
    }
}
