//! Pure judgements of what ptpctl and the daemons printed: each returns the detail of an `ok`
//! or the reason of a `FAIL`. No I/O here, so every rule is unit-tested on the host.

use serde_json::Value;

use crate::guest::Exit;

/// A judgement: `Ok(detail)` or `Err(why it failed)`.
pub type Judged = Result<String, String>;

/// Tolerance of a clock comparison over `span_ns`: 2 ms for the reads themselves (a process
/// spawn under TCG is coarse, but a read is one point inside its bracket) plus 200 ppm of the
/// span (the PHC's rate against the guest's monotonic clock, nominal after `freq 0`).
pub fn slack_ns(span_ns: i128) -> i128 {
    2_000_000 + span_ns.abs() / 5_000
}

/// The JSON object ptpctl `--json` printed: the last stdout line that parses as one.
pub fn ptpctl_json(stdout: &str) -> Option<Value> {
    stdout
        .lines()
        .rev()
        .filter(|l| l.trim_start().starts_with('{'))
        .find_map(|l| serde_json::from_str(l.trim()).ok())
}

/// `{"ok": true, ...}`, else the error ptpctl reported.
pub fn ok_reply(v: &Value) -> Result<&Value, String> {
    if v["ok"] == Value::Bool(true) {
        Ok(v)
    } else {
        Err(format!(
            "ptpctl failed: {} (code {})",
            v["error"].as_str().unwrap_or("?"),
            v["code"]
        ))
    }
}

fn int(v: &Value, key: &str) -> Result<i128, String> {
    v[key]
        .as_i64()
        .map(i128::from)
        .or_else(|| v[key].as_u64().map(i128::from))
        .ok_or_else(|| format!("no integer {key:?} in {v}"))
}

fn float(v: &Value, key: &str) -> Result<f64, String> {
    v[key]
        .as_f64()
        .ok_or_else(|| format!("no number {key:?} in {v}"))
}

/// The clock reading of `get`.
pub fn get_ns(v: &Value) -> Result<i128, String> {
    int(ok_reply(v)?, "ns")
}

/// `status`: the driver is up (and what else it says).
pub fn status_up(v: &Value) -> Judged {
    let v = ok_reply(v)?;
    let detail = format!(
        "driver_up {}, link_up {} {} Mb/s, generation {}, connects {}, port {}",
        v["driver_up"],
        v["link_up"],
        v["link_speed_mbps"],
        v["generation"],
        v["connects"],
        v["port_state"]
    );
    if v["driver_up"] == Value::Bool(true) {
        Ok(detail)
    } else {
        Err(detail)
    }
}

/// `caps`: an Intel part with a clock page (bench needs it) and a frequency range.
pub fn caps(v: &Value) -> Judged {
    let v = ok_reply(v)?;
    let part = v["part"].as_str().unwrap_or("");
    let page = v["clock_page"].as_str().unwrap_or("");
    let detail = format!(
        "{part} [{:#06x}:{:#06x}], max_adj {} ppb, {} TX sets, clock page {page:?}",
        int(v, "vendor_id")?,
        int(v, "device_id")?,
        v["max_adj_ppb"],
        v["tx_ts_sets"]
    );
    if int(v, "vendor_id")? != 0x8086 || part.is_empty() {
        return Err(format!("not an Intel part: {detail}"));
    }
    if page.is_empty() {
        return Err(format!("no clock page (bench cannot run): {detail}"));
    }
    if int(v, "max_adj_ppb")? <= 0 {
        return Err(format!("no frequency range: {detail}"));
    }
    Ok(detail)
}

/// Two clock reads `before` and `after`, each somewhere inside its process's bracket on the
/// guest's monotonic clock: `after − before − step` must lie in `[lo, hi]` (widened by the
/// slack), where `lo` = after's start − before's end and `hi` = after's end − before's start.
pub fn moved_by(before: i128, after: i128, step: i128, lo: i128, hi: i128) -> Judged {
    let d = after - before - step;
    let s = slack_ns(hi);
    let detail = format!(
        "moved {:.6} s for a step of {:.6} s; {:.6} s beyond the step, expected {:.6}..{:.6} s",
        secs(after - before),
        secs(step),
        secs(d),
        secs(lo),
        secs(hi)
    );
    if (lo - s..=hi + s).contains(&d) {
        Ok(detail)
    } else {
        Err(detail)
    }
}

pub fn secs(ns: i128) -> f64 {
    ns as f64 / 1e9
}

/// The frequency measured from two `cmp` offsets taken about `interval` ns apart (each somewhere
/// in a process bracket, `spread` ns wide on average) against the one set (`ppb`): within the
/// offsets' windows, the interval's uncertainty and 2 % of the setting.
pub fn rate(
    off1: i128,
    off2: i128,
    windows: i128,
    interval: i128,
    spread: i128,
    ppb: f64,
) -> Judged {
    if interval <= 0 {
        return Err(format!("no interval between the cmp reads ({interval} ns)"));
    }
    let measured = (off2 - off1) as f64 / interval as f64 * 1e9;
    let per_ns = 1e9 / interval as f64;
    let tolerance =
        windows as f64 * per_ns + ppb.abs() * spread as f64 / interval as f64 + ppb.abs() / 50.0;
    let detail = format!(
        "set {ppb} ppb, measured {measured:.0} ppb over {:.3} s (± {tolerance:.0} ppb)",
        secs(interval)
    );
    if (measured - ppb).abs() <= tolerance {
        Ok(detail)
    } else {
        Err(detail)
    }
}

/// `cmp`'s offset (PHC − CLOCK_REALTIME) against a `get` of `phc` bracketed by realtime reads
/// `r0`..`r1` just before it.
pub fn cmp_consistent(v: &Value, phc: i128, r0: i128, r1: i128) -> Judged {
    let v = ok_reply(v)?;
    let off = int(v, "offset_ns")?;
    let window = int(v, "window_ns")?;
    let (lo, hi) = (phc - r1, phc - r0);
    let s = slack_ns(r1 - r0) + window;
    let detail = format!(
        "offset {:.6} s (window {window} ns); get said {:.6}..{:.6} s",
        secs(off),
        secs(lo),
        secs(hi)
    );
    if window <= 0 {
        return Err(format!("empty window: {detail}"));
    }
    if (lo - s..=hi + s).contains(&off) {
        Ok(detail)
    } else {
        Err(detail)
    }
}

/// `stats` before and after some reads: the driver's register reads moved.
pub fn stats_moved(before: &Value, after: &Value) -> Judged {
    let (b, a) = (ok_reply(before)?, ok_reply(after)?);
    let (rb, ra) = (int(b, "mmio_reads")?, int(a, "mmio_reads")?);
    let detail = format!(
        "mmio_reads {rb} -> {ra}, interrupts {}, tx_frames {}, rx_frames {}",
        a["interrupts"], a["tx_frames"], a["rx_frames"]
    );
    if ra > rb { Ok(detail) } else { Err(detail) }
}

/// `bench`: both paths measured, the clock page the faster. Returns the figure's JSON too.
pub fn bench(v: &Value, channel: &str) -> Result<(String, Value), String> {
    let v = ok_reply(v)?;
    let (e50, f50) = (float(v, "exact_p50_ns")?, float(v, "page_p50_ns")?);
    let figure = serde_json::json!({
        "figure": "bench", "channel": channel, "n": v["n"],
        "exact_p50_ns": v["exact_p50_ns"], "exact_p99_ns": v["exact_p99_ns"],
        "exact_p999_ns": v["exact_p999_ns"], "page_p50_ns": v["page_p50_ns"],
        "page_p99_ns": v["page_p99_ns"], "page_p999_ns": v["page_p999_ns"],
        "mmio_reads_per_exact_read": v["mmio_reads_per_exact_read"],
    });
    let detail = format!(
        "{channel}: exact read p50 {:.1} µs, clock page p50 {:.2} µs",
        e50 / 1e3,
        f50 / 1e3
    );
    if e50 <= 0.0 || f50 <= 0.0 {
        return Err(format!("a path measured nothing: {detail}"));
    }
    if f50 > e50 {
        return Err(format!(
            "the clock page is slower than the exact path: {detail}"
        ));
    }
    Ok((detail, figure))
}

/// An unprivileged `set`/`adj`/`freq`: refused with EPERM (`PermissionDenied`).
pub fn eperm(v: &Value) -> Judged {
    if v["ok"] == Value::Bool(true) {
        return Err(format!("allowed: {v}"));
    }
    let code = v["code"].as_str().unwrap_or("");
    if code == "PermissionDenied" {
        Ok(format!("refused: {}", v["error"].as_str().unwrap_or("")))
    } else {
        Err(format!("failed, but not with EPERM: {v}"))
    }
}

/// Issue 22 failure 6: `ptpctl --output /scheme/debug get` as uid 1000 (the kernel's debug
/// scheme admits only uid 0) must still answer: on stdout, with a warning, exit status 0.
pub fn output_unprivileged(exit: &Exit, stdout: &str, stderr: &str) -> Judged {
    match exit {
        Exit::Code(0) if stdout.contains("clock time is") => Ok(format!(
            "answered on stdout ({}); stderr {:?}",
            stdout.trim(),
            stderr.trim()
        )),
        _ => Err(format!(
            "{exit:?}: stdout {:?}, stderr {:?} (ptpctl at e960b12 exited 2: --output /scheme/debug: Operation not permitted)",
            stdout.trim(),
            stderr.trim()
        )),
    }
}

/// Issue 22 failure 6: a failing `ptpctl --output PATH` writes its error there only, not also
/// on stderr (on Redox both reach the console: every error was printed twice).
pub fn output_error_once(exit: &Exit, stderr: &str) -> Judged {
    match exit {
        Exit::Code(0) => Err("the command was meant to fail (clock 7 does not exist)".into()),
        Exit::TimedOut(t) => Err(format!("timed out after {t:?}")),
        _ if stderr.trim().is_empty() => Ok(format!("{exit:?}; the error went to --output only")),
        _ => Err(format!(
            "{exit:?}; the error went to stderr as well as --output: {:?}",
            stderr.trim()
        )),
    }
}

/// The channel of ptpd's last `connected to driver at … (ring|socket)` among `lines`.
pub fn channel_of<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<String> {
    lines
        .into_iter()
        .filter(|l| l.contains("connected to driver at"))
        .filter_map(|l| {
            let open = l.rfind('(')?;
            let close = l[open..].find(')')? + open;
            Some(l[open + 1..close].to_string())
        })
        .last()
}

/// What a restarted igcd said about its PHC: warm attach or cold start (the line itself).
pub fn attach_kind<'a>(lines: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    lines
        .into_iter()
        .find(|l| l.contains("warm attach:") || l.contains("cold start:"))
}

/// The PHC across an igcd restart: read `before` and `after` (bracket `lo`..`hi` as in
/// [`moved_by`]). Kept → ok. Reset, and igcd said it cold-started → info (an emulated NIC's model
/// lives in igcd's own process, so there is nothing to attach to). Reset while igcd claimed a
/// warm attach, or kept with no word from igcd → FAIL.
pub fn phc_across_restart(
    before: i128,
    after: i128,
    lo: i128,
    hi: i128,
    igcd_said: Option<&str>,
) -> (crate::report::Verdict, String) {
    use crate::report::Verdict;
    let kept = moved_by(before, after, 0, lo, hi);
    let said = igcd_said.unwrap_or("igcd logged neither `warm attach` nor `cold start`");
    match (&kept, said.contains("cold start:")) {
        (Ok(d), false) if igcd_said.is_some() => (Verdict::Ok, format!("PHC kept: {d}; {said}")),
        (Ok(d), _) => (Verdict::Fail, format!("PHC continued ({d}) but {said}")),
        (Err(d), true) => (
            Verdict::Info,
            format!(
                "PHC not kept ({d}): the restarted igcd cold-started ({said}); the emulated \
                 i225's model lived in the killed igcd, so no warm attach can exist here"
            ),
        ),
        (Err(d), false) => (Verdict::Fail, format!("PHC not kept ({d}); {said}")),
    }
}

#[cfg(test)]
mod tests;

/// The clock page maps read-only (its magic is there) and a writable mapping is refused.
pub fn page_read_only(path: &str, read: Result<u64, i32>, write: Result<u64, i32>) -> Judged {
    match (read, write) {
        (Ok(w), _) if w != ptp_ipc::clockpage::MAGIC => Err(format!(
            "{path} maps read-only but its first word is {w:#x}, not the magic"
        )),
        (Ok(_), Err(e)) => Ok(format!(
            "{path}: read-only mapping works, a writable one is refused (errno {e})"
        )),
        (Ok(_), Ok(_)) => Err(format!("{path} can be mapped writable by a reader")),
        (Err(e), _) => Err(format!("{path} cannot be mapped read-only (errno {e})")),
    }
}

/// A driver handle that was not lent a ring segment cannot map one.
pub fn ring_unlent(path: &str, write: Result<u64, i32>) -> Judged {
    match write {
        Err(e) => Ok(format!("a fresh handle on {path} maps nothing (errno {e})")),
        Ok(w) => Err(format!(
            "a fresh handle on {path} mapped a page (first word {w:#x}): a segment it was not lent"
        )),
    }
}
