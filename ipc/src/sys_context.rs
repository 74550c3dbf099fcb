//! `/scheme/sys/context`: the kernel's table of contexts (threads), one row each. Read by the
//! Redox ring client to tell whether its driver's process still lives (`ring/redox.rs`: a call
//! into a dead server's scheme can block for ever) and by the in-guest check of the Redox boot
//! test (`tools/redox-check`) to find the daemons it kills. Plain parsing, tested on every host.
//!
//! Header and rows as the kit's kernel (56947e1a, `src/scheme/sys/context.rs`) writes them:
//!
//! ```text
//! PID   EUID  EGID  STAT  CPU   AFFINITY   TIME        PRIVATE SHARED  NAME
//! 8     0     0     UB    0     ...        00:00:01.20 5 MB    2 MB    /scheme/initfs/bin/igcd-emu
//! ```
//!
//! Every thread of a process is a row with the same PID; STAT's second letter is `Z` for a dead
//! context not yet reaped.

/// One row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Context {
    pub pid: u32,
    pub euid: u32,
    pub stat: String,
    pub name: String,
}

impl Context {
    /// Dead, not yet reaped.
    pub fn is_dead(&self) -> bool {
        self.stat.contains('Z')
    }

    /// The last path component of the name (`igcd-emu` for `/scheme/initfs/bin/igcd-emu`).
    pub fn program(&self) -> &str {
        let first = self.name.split_whitespace().next().unwrap_or("");
        first.rsplit('/').next().unwrap_or(first)
    }
}

/// The rows of the table; a header or a row that does not parse is skipped.
pub fn parse(text: &str) -> Vec<Context> {
    text.lines().filter_map(parse_row).collect()
}

fn parse_row(line: &str) -> Option<Context> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    if fields.len() < 4 {
        return None;
    }
    let pid = fields[0].parse().ok()?;
    let euid = fields[1].parse().ok()?;
    let name = name_column(&fields);
    Some(Context {
        pid,
        euid,
        stat: fields[3].to_string(),
        name,
    })
}

/// NAME is the last column. The columns before it are PID EUID EGID STAT CPU AFFINITY TIME
/// PRIVATE SHARED, each memory figure two words ("5.12 MB", "512 B"), so NAME starts five words
/// after the TIME column (hh:mm:ss.cc). Without a TIME column, the last word.
fn name_column(fields: &[&str]) -> String {
    match fields.iter().position(|f| is_cpu_time(f)) {
        Some(t) if fields.len() > t + 5 => fields[t + 5..].join(" "),
        _ => fields.last().unwrap_or(&"").to_string(),
    }
}

fn is_cpu_time(f: &str) -> bool {
    f.len() >= 8
        && f.matches(':').count() == 2
        && f.chars()
            .all(|c| c.is_ascii_digit() || c == ':' || c == '.')
}

/// Whether `pid` has a live (not dead) context in the table.
pub fn is_live(rows: &[Context], pid: u32) -> bool {
    rows.iter().any(|c| c.pid == pid && !c.is_dead())
}

/// The live processes (distinct PIDs, threads folded) running `program`.
pub fn pids_of(rows: &[Context], program: &str) -> Vec<u32> {
    let mut pids: Vec<u32> = rows
        .iter()
        .filter(|c| !c.is_dead() && c.pid != 0 && c.program() == program)
        .map(|c| c.pid)
        .collect();
    pids.sort_unstable();
    pids.dedup();
    pids
}

#[cfg(test)]
mod tests {
    use super::*;

    // As the kit's kernel formats it (header, then rows sorted by PID; threads share a PID).
    const TABLE: &str = "\
PID   EUID  EGID  STAT  CPU   AFFINITY   TIME        PRIVATE SHARED  NAME
0     0     0     KR+   0     ~0         00:00:03.10 64.0 KB 0 B     [kmain]
8     0     0     UB    ?     ~0         00:00:01.20 5.12 MB 2.05 MB /scheme/initfs/bin/igcd-emu
8     0     0     UB    ?     ~0         00:00:00.02 1.00 MB 2.05 MB /scheme/initfs/bin/igcd-emu
9     0     0     UB    ?     ~0         00:00:00.50 3.40 MB 0 B     /scheme/initfs/bin/ptpd -f x
12    0     0     UZ    ?     ~0         00:00:00.00 12.0 KB 0 B     /scheme/initfs/bin/igcd-emu
";

    #[test]
    fn rows_parse_with_names_after_the_two_memory_columns() {
        let rows = parse(TABLE);
        assert_eq!(rows.len(), 5, "the header is skipped");
        assert_eq!(rows[1].pid, 8);
        assert_eq!(rows[1].name, "/scheme/initfs/bin/igcd-emu");
        assert_eq!(rows[3].program(), "ptpd");
        assert_eq!(rows[0].name, "[kmain]");
        assert!(rows[4].is_dead());
    }

    #[test]
    fn a_pid_is_live_while_a_context_of_it_is_not_dead() {
        let rows = parse(TABLE);
        assert!(is_live(&rows, 8) && is_live(&rows, 9));
        assert!(!is_live(&rows, 12), "dead, not yet reaped");
        assert!(!is_live(&rows, 13), "not listed");
    }

    #[test]
    fn pids_fold_threads_and_skip_dead_contexts() {
        let rows = parse(TABLE);
        assert_eq!(pids_of(&rows, "igcd-emu"), [8]);
        assert_eq!(pids_of(&rows, "ptpd"), [9]);
        assert!(pids_of(&rows, "ptpctl").is_empty());
    }

    #[test]
    fn a_row_without_a_time_column_takes_its_last_word() {
        let rows = parse("7 0 0 UB weird igcd-emu");
        assert_eq!(rows[0].program(), "igcd-emu");
    }
}
