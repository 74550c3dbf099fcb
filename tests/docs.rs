//! Issue 25: the README is a front page and the detail lives in `docs/*.md`, so text moved
//! between pages must keep its references, and the front page must not quote a figure its
//! source does not give. Two checks, on the files alone (no build of anything, no network):
//!
//! - `links_resolve`: every relative link and image in README.md and docs/*.md names a file
//!   that exists inside the repository, and every `#anchor` a heading of its target page, by
//!   GitHub's slug rules (lowercase; a space is `-`; punctuation other than `-` and `_` dropped;
//!   a repeated heading gets `-1`, `-2`, …). Links inside code (fenced blocks, code spans) are
//!   not links and are not read.
//! - `headline_figures_come_from_results`: every number in the "Result" column of the README's
//!   "Headline results" table also appears in docs/results.md, where it is given with its runs
//!   and spread. Numbers are compared with their thousands separators removed (space, U+202F,
//!   U+2009, U+00A0: a thin space in one page and a plain one in the other agree), and a ratio
//!   keeps its `×` (`2.25×` must be a ratio there too). Not figures: numbers inside code, inside
//!   identifiers (`ptp4l`, `i225`, `7e3cc27`) and issue numbers (`issue 28`).
//!
//! This is membership, not meaning: a README figure changed to another value that results.md
//! happens to give elsewhere (19.8 s to the 19.7 s of one run) still passes.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// README.md and every docs/*.md, in a fixed order.
fn pages() -> Vec<PathBuf> {
    let root = root();
    let mut docs: Vec<PathBuf> = std::fs::read_dir(root.join("docs"))
        .expect("docs/")
        .map(|e| e.expect("docs/ entry").path())
        .filter(|p| p.extension().is_some_and(|e| e == "md"))
        .collect();
    docs.sort();
    let mut all = vec![root.join("README.md")];
    all.extend(docs);
    all
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn shown(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap_or(path)
        .display()
        .to_string()
}

/// A fence opener or closer: its character and length, if the line is one.
fn fence(line: &str) -> Option<(char, usize)> {
    let t = line.trim_start();
    let c = t.chars().next().filter(|c| *c == '`' || *c == '~')?;
    let n = t.chars().take_while(|x| *x == c).count();
    (n >= 3).then_some((c, n))
}

/// The page split into blocks of prose: runs of non-blank lines outside fenced code, each
/// with the 1-based number of its first line. Code spans are blanked (same length, newlines
/// kept), so what is left is what renders as text, links and headings.
fn prose_blocks(text: &str) -> Vec<(usize, String)> {
    let mut blocks = Vec::new();
    let mut cur: Option<(usize, String)> = None;
    let mut open: Option<(char, usize)> = None;
    for (i, line) in text.lines().enumerate() {
        if let Some((c, n)) = open {
            if fence(line).is_some_and(|(c2, n2)| c2 == c && n2 >= n)
                && line.trim().chars().all(|x| x == c)
            {
                open = None;
            }
            continue;
        }
        if let Some(f) = fence(line) {
            open = Some(f);
            blocks.extend(cur.take());
            continue;
        }
        if line.trim().is_empty() {
            blocks.extend(cur.take());
            continue;
        }
        match &mut cur {
            Some((_, b)) => {
                b.push('\n');
                b.push_str(line);
            }
            None => cur = Some((i + 1, line.to_string())),
        }
    }
    blocks.extend(cur);
    blocks
        .into_iter()
        .map(|(n, b)| (n, blank_code_spans(&b)))
        .collect()
}

/// Code spans (a run of N backticks up to the next run of exactly N) replaced by spaces; a
/// run with no closer is literal, as in CommonMark.
fn blank_code_spans(s: &str) -> String {
    let c: Vec<char> = s.chars().collect();
    let mut out = c.clone();
    let run = |i: usize| c[i..].iter().take_while(|x| **x == '`').count();
    let mut i = 0;
    while i < c.len() {
        if c[i] != '`' {
            i += 1;
            continue;
        }
        let n = run(i);
        let mut j = i + n;
        let mut close = None;
        while j < c.len() {
            if c[j] == '`' {
                let m = run(j);
                if m == n {
                    close = Some(j);
                    break;
                }
                j += m;
            } else {
                j += 1;
            }
        }
        match close {
            Some(j) => {
                for x in &mut out[i..j + n] {
                    if *x != '\n' {
                        *x = ' ';
                    }
                }
                i = j + n;
            }
            None => i += n,
        }
    }
    out.into_iter().collect()
}

/// Every link and image target in a block of prose, with the block line it is on:
/// `[text](target "title")`, `![alt](target)`, `[ref]: target`, and HTML `src="…"`/`href="…"`.
fn link_targets(block: &str) -> Vec<(usize, String)> {
    let mut out = Vec::new();
    for (k, line) in block.lines().enumerate() {
        // Reference definitions: `[label]: target`.
        let t = line.trim_start();
        let definition = t
            .find("]:")
            .filter(|e| t.starts_with('[') && !t[..*e].contains("]("));
        if let Some(end) = definition {
            let target = t[end + 2..].split_whitespace().next().unwrap_or("");
            out.push((k, target.trim_matches(|c| c == '<' || c == '>').to_string()));
        }
        for attr in ["src=\"", "href=\""] {
            let mut rest = line;
            while let Some(p) = rest.find(attr) {
                let after = &rest[p + attr.len()..];
                let end = after.find('"').unwrap_or(after.len());
                out.push((k, after[..end].to_string()));
                rest = &after[end..];
            }
        }
        let chars: Vec<char> = line.chars().collect();
        let mut i = 0;
        while i + 1 < chars.len() {
            if chars[i] == ']' && chars[i + 1] == '(' {
                let mut depth = 1;
                let mut j = i + 2;
                while j < chars.len() && depth > 0 {
                    match chars[j] {
                        '(' => depth += 1,
                        ')' => depth -= 1,
                        _ => {}
                    }
                    j += 1;
                }
                // `j` is past the closing `)`, or at the end of an unclosed target.
                let end = if depth == 0 { j - 1 } else { j };
                let inner: String = chars[i + 2..end].iter().collect();
                let inner = inner.trim();
                let target = match inner.strip_prefix('<') {
                    Some(r) => r.split('>').next().unwrap_or(""),
                    None => inner.split_whitespace().next().unwrap_or(""),
                };
                out.push((k, target.to_string()));
                i = j;
            } else {
                i += 1;
            }
        }
    }
    out
}

fn is_external(target: &str) -> bool {
    let scheme = target.split(':').next().unwrap_or("");
    target.contains(':')
        && !scheme.is_empty()
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c))
}

/// GitHub's anchor for a heading's text.
fn slug(heading: &str) -> String {
    // Links keep only their text; emphasis and code marks are punctuation and drop out.
    let mut text = String::new();
    let mut rest = heading;
    while let Some(p) = rest.find("](") {
        let close = rest[p..].find(')').map_or(rest.len(), |c| p + c + 1);
        text.push_str(&rest[..p]);
        rest = &rest[close..];
    }
    text.push_str(rest);
    let mut s = String::new();
    for c in text.trim().chars() {
        if c.is_alphanumeric() {
            s.extend(c.to_lowercase());
        } else if c == ' ' {
            s.push('-');
        } else if c == '-' || c == '_' {
            s.push(c);
        }
    }
    s
}

/// The anchors a page offers: its headings' slugs (ATX and setext, outside code), with
/// GitHub's `-N` suffixes for repeats, and explicit HTML `id`/`name` attributes.
fn anchors(text: &str) -> BTreeSet<String> {
    let mut headings = Vec::new();
    for (_, block) in prose_blocks(text) {
        let lines: Vec<&str> = block.lines().collect();
        for (k, line) in lines.iter().enumerate() {
            let t = line.trim_start();
            let hashes = t.chars().take_while(|c| *c == '#').count();
            if (1..=6).contains(&hashes) && (t.len() == hashes || t[hashes..].starts_with(' ')) {
                let h = t[hashes..].trim().trim_end_matches('#').trim_end();
                headings.push(h.to_string());
            } else if let Some(next) = lines.get(k + 1) {
                let n = next.trim();
                let underline =
                    !n.is_empty() && (n.chars().all(|c| c == '=') || n.chars().all(|c| c == '-'));
                if underline && k == 0 && !t.starts_with('|') {
                    headings.push(t.trim().to_string());
                }
            }
        }
        for attr in ["id=\"", "name=\""] {
            let mut rest = block.as_str();
            while let Some(p) = rest.find(attr) {
                let after = &rest[p + attr.len()..];
                let end = after.find('"').unwrap_or(after.len());
                headings.push(format!("\u{0}{}", &after[..end]));
                rest = &after[end..];
            }
        }
    }
    let mut seen = BTreeSet::new();
    for h in headings {
        if let Some(explicit) = h.strip_prefix('\u{0}') {
            seen.insert(explicit.to_string());
            continue;
        }
        let base = slug(&h);
        let mut s = base.clone();
        let mut n = 0;
        while seen.contains(&s) {
            n += 1;
            s = format!("{base}-{n}");
        }
        seen.insert(s);
    }
    seen
}

/// What is wrong with one relative link from `page`, if anything.
fn check_link(page: &Path, target: &str) -> Option<String> {
    if target.is_empty() {
        return Some("empty target".into());
    }
    let (path, anchor) = match target.split_once('#') {
        Some((p, a)) => (p, Some(a)),
        None => (target, None),
    };
    let root = root();
    let file = if path.is_empty() {
        page.to_path_buf()
    } else if let Some(abs) = path.strip_prefix('/') {
        root.join(abs)
    } else {
        page.parent().expect("page's directory").join(path)
    };
    let Ok(real) = file.canonicalize() else {
        return Some(format!("no such file: {}", shown(&file)));
    };
    if !real.starts_with(root.canonicalize().expect("repository root")) {
        return Some(format!(
            "outside the repository: {} (does not resolve on GitHub)",
            real.display()
        ));
    }
    let anchor = anchor?;
    if real.extension().is_some_and(|e| e == "md") && real.is_file() {
        let offered = anchors(&read(&real));
        if !offered.contains(anchor) {
            return Some(format!(
                "no heading #{anchor} in {} (its anchors: {})",
                shown(&real),
                offered.into_iter().collect::<Vec<_>>().join(", ")
            ));
        }
    } else {
        // GitHub's only anchors in a non-Markdown file are line numbers.
        let line = anchor.strip_prefix('L').unwrap_or("");
        let ok = line
            .split("-L")
            .all(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()));
        if !ok {
            return Some(format!(
                "#{anchor} is not a line anchor of {}",
                shown(&real)
            ));
        }
    }
    None
}

#[test]
fn links_resolve() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for page in pages() {
        for (first, block) in prose_blocks(&read(&page)) {
            for (k, target) in link_targets(&block) {
                if is_external(&target) {
                    continue;
                }
                checked += 1;
                if let Some(why) = check_link(&page, &target) {
                    broken.push(format!("{}:{}: ({target}) {why}", shown(&page), first + k));
                }
            }
        }
    }
    assert!(
        broken.is_empty(),
        "{} broken link(s) in README.md and docs/*.md:\n  {}",
        broken.len(),
        broken.join("\n  ")
    );
    // The README alone links every docs page; finding almost none means the parser broke.
    assert!(checked >= 20, "only {checked} relative links found");
}

/// The characters that may group a number's thousands.
const THOUSANDS: [char; 4] = [' ', '\u{202F}', '\u{2009}', '\u{00A0}'];

/// The figures in a stretch of prose (code already blanked), normalised: thousands groups
/// joined (`1 177` → `1177`), decimals kept as written (`1.2` ≠ `1.20`), signs dropped; a ratio
/// keeps its sign (`2.25×` is not the `2.25` of some other row).
/// Not figures: digits inside a word (`ptp4l`, `i225`, `x86_64`, `7e3cc27`, `0x15F2`), after a
/// dot that is not a decimal point (`0.1.18`) and the number after "issue"/"issues".
fn figures(text: &str) -> Vec<String> {
    let c: Vec<char> = text.chars().collect();
    let digit = |i: usize| c.get(i).is_some_and(|x| x.is_ascii_digit());
    let mut out = Vec::new();
    let mut i = 0;
    while i < c.len() {
        let starts =
            digit(i) && (i == 0 || !(c[i - 1].is_alphanumeric() || "_.".contains(c[i - 1])));
        if !starts {
            i += 1;
            continue;
        }
        let mut j = i;
        while digit(j) {
            j += 1;
        }
        let mut n: String = c[i..j].iter().collect();
        if j - i <= 3 {
            while c.get(j).is_some_and(|x| THOUSANDS.contains(x))
                && (1..=3).all(|k| digit(j + k))
                && !digit(j + 4)
            {
                n.extend(&c[j + 1..j + 4]);
                j += 4;
            }
        }
        if c.get(j) == Some(&'.') && digit(j + 1) {
            n.push('.');
            j += 1;
            while digit(j) {
                n.push(c[j]);
                j += 1;
            }
        }
        // A word that goes on with more digits is an identifier (a hash, a hex ID), not a
        // number with a unit.
        let mut w = j;
        let mut identifier = false;
        while c.get(w).is_some_and(|x| x.is_alphanumeric() || *x == '_') {
            identifier |= c[w].is_ascii_digit() || c[w] == '_';
            w += 1;
        }
        let before: String = c[..i].iter().collect::<String>().to_lowercase();
        let before = before.trim_end();
        let issue = before.ends_with("issue") || before.ends_with("issues");
        if c.get(j) == Some(&'×') {
            n.push('×');
        }
        if !identifier && !issue {
            out.push(n);
        }
        i = w.max(j);
    }
    out
}

/// A table row's cells, split on `|` outside code (the row's code spans are already blank, so
/// only an escaped `\|` needs care).
fn cells(row: &str) -> Vec<String> {
    let t = row.trim();
    let t = t.strip_prefix('|').unwrap_or(t);
    let t = t.strip_suffix('|').unwrap_or(t);
    let mut out = vec![String::new()];
    let mut prev = ' ';
    for ch in t.chars() {
        if ch == '|' && prev != '\\' {
            out.push(String::new());
        } else {
            out.last_mut().expect("a cell").push(ch);
        }
        prev = ch;
    }
    out.into_iter().map(|s| s.trim().to_string()).collect()
}

/// Link targets dropped (`[docs/x.md](docs/x.md)` keeps its text), so paths are not read.
fn without_link_targets(s: &str) -> String {
    let mut out = String::new();
    let mut rest = s;
    while let Some(p) = rest.find("](") {
        out.push_str(&rest[..=p]);
        let after = &rest[p + 2..];
        rest = after.find(')').map_or("", |c| &after[c + 1..]);
    }
    out.push_str(rest);
    out
}

/// Numbers in the headline table that are not measurements and have no place in
/// docs/results.md, each with the text it must stand in (so the exception cannot outlive it)
/// and why it is not a measurement.
/// (None today: the Redox row's count of named checks was dropped rather than excepted.)
const NOT_MEASUREMENTS: &[(&str, &str)] = &[];

#[test]
fn headline_figures_come_from_results() {
    let root = root();
    let readme = read(&root.join("README.md"));
    let results: BTreeSet<String> = prose_blocks(&read(&root.join("docs/results.md")))
        .iter()
        .flat_map(|(_, b)| figures(&without_link_targets(b)))
        .collect();

    // The first table after the heading, in the README's prose (code spans blanked).
    let blocks = prose_blocks(&readme);
    let at = blocks
        .iter()
        .position(|(_, b)| b.lines().next().map(str::trim) == Some("## Headline results"))
        .expect("README.md has a \"## Headline results\" heading");
    let (first, table) = blocks[at + 1..]
        .iter()
        .take_while(|(_, b)| !b.trim_start().starts_with('#'))
        .find(|(_, b)| b.trim_start().starts_with('|'))
        .expect("a table under \"## Headline results\"");
    let rows: Vec<&str> = table
        .lines()
        .take_while(|l| l.trim_start().starts_with('|'))
        .collect();
    let header = cells(rows[0]);
    let col = header
        .iter()
        .position(|h| h == "Result")
        .unwrap_or_else(|| panic!("no \"Result\" column in {header:?}"));

    let mut missing = Vec::new();
    let mut found = 0;
    let mut used = BTreeSet::new();
    for (k, row) in rows.iter().enumerate().skip(2) {
        let cs = cells(row);
        let mut result = without_link_targets(cs.get(col).map_or("", String::as_str));
        for (phrase, _) in NOT_MEASUREMENTS {
            if result.contains(phrase) {
                result = result.replace(phrase, " ");
                used.insert(*phrase);
            }
        }
        for n in figures(&result) {
            found += 1;
            if !results.contains(&n) {
                missing.push(format!(
                    "README.md:{}: {n} (row \"{}\")",
                    first + k,
                    cs.first().map_or("", String::as_str)
                ));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "README.md quotes {} headline figure(s) that docs/results.md does not give (add the \
         measurement there with its runs and spread, or correct the README):\n  {}",
        missing.len(),
        missing.join("\n  ")
    );
    let stale: Vec<&str> = NOT_MEASUREMENTS
        .iter()
        .map(|(p, _)| *p)
        .filter(|p| !used.contains(p))
        .collect();
    assert!(
        stale.is_empty(),
        "exceptions no longer in the headline table (drop them from NOT_MEASUREMENTS): {stale:?}"
    );
    // Rows with measurements exist; a table the parser misread would give none.
    assert!(
        found >= 8,
        "only {found} figures read from the headline table"
    );
}

#[test]
fn figures_are_read_as_written() {
    assert_eq!(
        figures("1.2 ns rms / 3 ns max; lock in 19.8 s (medians of 3)"),
        ["1.2", "3", "19.8", "3"]
    );
    assert_eq!(
        figures("about 1 177× faster, 1\u{202F}177, 1\u{2009}177; 2.25×"),
        ["1177×", "1177", "1177", "2.25×"]
    );
    assert_eq!(
        figures("ptp4l on i225 at 7e3cc27, 0x15F2, x86_64; issue 28; −2 619 … 12 345 678"),
        ["2619", "12345678"]
    );
    // A group needs exactly three digits: "of 3 runs" and "4 1500" are not one number.
    assert_eq!(figures("4 sets vs 1 set, 4 1500"), ["4", "1", "4", "1500"]);
    assert_eq!(
        slug("Where this departs from DESIGN.md, and why"),
        "where-this-departs-from-designmd-and-why"
    );
    assert_eq!(
        slug("Inventory: everything the system creates, who may use it"),
        "inventory-everything-the-system-creates-who-may-use-it"
    );
}
