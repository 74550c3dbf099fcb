//! The lines the check program prints on the serial console, and their parser (the host test
//! reads them back from the serial log).
//!
//! ```text
//! REDOX-CHECK-STEP <name>                  a check starts (the host's stall timer restarts)
//! REDOX-CHECK <name> ok|FAIL|info <detail> one verdict
//! REDOX-FIGURE {json}                      a figure (bench percentiles, with the channel)
//! REDOX-CHECK-LOG <daemon>: <line>         a line of a daemon the check started by hand
//! REDOX-CHECK-DONE                         the end
//! ```

use std::fmt;

pub const CHECK: &str = "REDOX-CHECK";
pub const STEP: &str = "REDOX-CHECK-STEP";
pub const FIGURE: &str = "REDOX-FIGURE";
pub const LOG: &str = "REDOX-CHECK-LOG";
pub const DONE: &str = "REDOX-CHECK-DONE";

/// What a check found. `Info` is an observation that is not a failure: what the check saw where
/// the thing asked for cannot exist on this setup (it says why).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Ok,
    Fail,
    Info,
}

impl Verdict {
    fn word(self) -> &'static str {
        match self {
            Verdict::Ok => "ok",
            Verdict::Fail => "FAIL",
            Verdict::Info => "info",
        }
    }

    fn from_word(w: &str) -> Option<Self> {
        match w {
            "ok" => Some(Verdict::Ok),
            "FAIL" => Some(Verdict::Fail),
            "info" => Some(Verdict::Info),
            _ => None,
        }
    }
}

/// One verdict line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Check {
    pub name: String,
    pub verdict: Verdict,
    pub detail: String,
}

impl Check {
    pub fn ok(name: &str, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Ok, detail)
    }

    pub fn fail(name: &str, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Fail, detail)
    }

    pub fn info(name: &str, detail: impl Into<String>) -> Self {
        Self::new(name, Verdict::Info, detail)
    }

    pub fn new(name: &str, verdict: Verdict, detail: impl Into<String>) -> Self {
        // One line each: a detail with a newline would end the record early.
        let detail = detail.into().replace(['\n', '\r'], " | ");
        Check {
            name: name.to_string(),
            verdict,
            detail,
        }
    }

    /// Parses the part of a line from `REDOX-CHECK ` on (anything before it is ignored).
    pub fn parse(line: &str) -> Option<Check> {
        let at = find_word(line, CHECK)?;
        let rest = &line[at + CHECK.len()..];
        let rest = rest.strip_prefix(' ')?;
        let mut it = rest.splitn(3, ' ');
        let name = it.next()?.to_string();
        let verdict = Verdict::from_word(it.next()?)?;
        let detail = it.next().unwrap_or("").trim_end().to_string();
        Some(Check {
            name,
            verdict,
            detail,
        })
    }
}

impl fmt::Display for Check {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{CHECK} {} {} {}",
            self.name,
            self.verdict.word(),
            self.detail
        )
    }
}

/// Where `word` starts in `line` as a whole token (followed by a space or the end).
fn find_word(line: &str, word: &str) -> Option<usize> {
    let mut from = 0;
    while let Some(i) = line[from..].find(word) {
        let at = from + i;
        let after = &line[at + word.len()..];
        if after.is_empty() || after.starts_with(' ') {
            return Some(at);
        }
        from = at + word.len();
    }
    None
}

/// The text of a serial line without ANSI escape sequences (logd colours) and carriage returns.
pub fn strip_ansi(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\u{1b}' => {
                // CSI: ESC [ parameters final-byte (0x40..=0x7e); other escapes: one char.
                if chars.peek() == Some(&'[') {
                    chars.next();
                    for d in chars.by_ref() {
                        if ('\u{40}'..='\u{7e}').contains(&d) {
                            break;
                        }
                    }
                } else {
                    chars.next();
                }
            }
            '\r' => {}
            _ => out.push(c),
        }
    }
    out
}

/// Everything the check program printed, read back from a serial log.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct Serial {
    pub checks: Vec<Check>,
    /// Each figure's JSON text.
    pub figures: Vec<String>,
    /// The steps started, in order.
    pub steps: Vec<String>,
    pub done: bool,
    /// Every line, ANSI codes stripped.
    pub lines: Vec<String>,
}

impl Serial {
    pub fn parse(log: &str) -> Serial {
        let mut s = Serial::default();
        for raw in log.lines() {
            let line = strip_ansi(raw);
            if let Some(at) = find_word(&line, STEP) {
                let name = line[at + STEP.len()..].trim();
                s.steps.push(name.to_string());
            } else if let Some(at) = find_word(&line, FIGURE) {
                s.figures.push(line[at + FIGURE.len()..].trim().to_string());
            } else if find_word(&line, DONE).is_some() {
                s.done = true;
            } else if find_word(&line, LOG).is_none() {
                s.checks.extend(Check::parse(&line));
            }
            s.lines.push(line);
        }
        s
    }

    /// The verdict named `name` (the last one, if printed twice).
    pub fn check(&self, name: &str) -> Option<&Check> {
        self.checks.iter().rev().find(|c| c.name == name)
    }

    /// Lines of init-started daemons (not forwarded by the check) containing `needle`.
    pub fn daemon_lines<'a>(&'a self, needle: &'a str) -> impl Iterator<Item = &'a str> + 'a {
        self.lines
            .iter()
            .filter(move |l| l.contains(needle) && !l.contains(LOG))
            .map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_check_line_round_trips_and_newlines_in_details_are_flattened() {
        let c = Check::fail("verb-set", "read back 3 s\nexpected 1 s");
        let line = c.to_string();
        assert_eq!(
            line,
            "REDOX-CHECK verb-set FAIL read back 3 s | expected 1 s"
        );
        assert_eq!(Check::parse(&format!("logd junk {line}")), Some(c));
        assert_eq!(
            Check::parse("REDOX-CHECK x ok").unwrap().verdict,
            Verdict::Ok
        );
        assert_eq!(Check::parse("REDOX-CHECK x maybe why"), None);
        assert_eq!(Check::parse("REDOX-CHECK-STEP x"), None);
    }

    #[test]
    fn ansi_colours_and_carriage_returns_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[32mptpd: INFO\u{1b}[0m: up\r"),
            "ptpd: INFO: up"
        );
        assert_eq!(strip_ansi("plain"), "plain");
    }

    #[test]
    fn a_serial_log_yields_steps_checks_figures_and_done() {
        let log = "kernel noise\r\n\
            REDOX-CHECK-STEP default-ready\r\n\
            \u{1b}[1mREDOX-CHECK default-ready ok driver up\u{1b}[0m\r\n\
            REDOX-CHECK-LOG ptpd: REDOX-CHECK fake FAIL quoted\n\
            REDOX-FIGURE {\"figure\":\"bench\"}\n\
            REDOX-CHECK verb-get FAIL no reply\n\
            REDOX-CHECK-DONE\n";
        let s = Serial::parse(log);
        assert_eq!(s.steps, ["default-ready"]);
        assert_eq!(s.checks.len(), 2, "the forwarded log line is not a verdict");
        assert_eq!(s.check("default-ready").unwrap().detail, "driver up");
        assert_eq!(s.check("verb-get").unwrap().verdict, Verdict::Fail);
        assert_eq!(s.figures, ["{\"figure\":\"bench\"}"]);
        assert!(s.done);
        assert_eq!(s.daemon_lines("REDOX-CHECK").count(), 4);
    }
}
