//! Proof that the clock page's seqlock never returns a torn sample when writer and readers are
//! separate processes (as driver and clients are).
//!
//! The parent test re-executes this test binary as one writer and two reader processes (the
//! role and page path go in environment variables; the child tests do nothing without them).
//! The writer publishes samples whose fields are consistent by construction — (k, 3k+1, k as
//! f64, !k) — as fast as it can for 1.5 s once both readers are attached; each reader checks
//! every sample it reads and that k never goes back, until it sees the final sample. Every wait
//! is bounded (10 s), so a broken child fails the test instead of hanging it.
#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ptp_ipc::clockpage::{ClockPageError, ClockPageReader, ClockPageWriter, ClockSample};

const ROLE: &str = "PTP_IPC_STRESS_ROLE";
const PAGE: &str = "PTP_IPC_STRESS_PAGE";
const WRITE_FOR: Duration = Duration::from_millis(1500);
/// k of the last sample; readers stop when they see it.
const DONE: u64 = 1 << 60;
const READERS: usize = 2;

fn sample(k: u64) -> ClockSample {
    ClockSample {
        phc_ns: k,
        mono_ns: k.wrapping_mul(3).wrapping_add(1),
        rate_ppb: k as f64,
        generation: !k,
    }
}

/// Children synchronise through marker files next to the page: `<what>-<pid>`.
fn mark(page: &str, what: &str) {
    let dir = Path::new(page).parent().unwrap();
    std::fs::write(dir.join(format!("{what}-{}", std::process::id())), b"").unwrap();
}

/// Waits (bounded) until every reader has left a `what` mark.
fn wait_for_marks(page: &str, what: &str) {
    let dir = Path::new(page).parent().unwrap();
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let n = std::fs::read_dir(dir)
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .is_ok_and(|e| e.file_name().to_string_lossy().starts_with(what))
            })
            .count();
        if n >= READERS {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "only {n} readers reached '{what}'"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

fn child_env() -> Option<(String, String)> {
    Some((std::env::var(ROLE).ok()?, std::env::var(PAGE).ok()?))
}

#[test]
fn child_writer() {
    let Some((role, page)) = child_env() else {
        return;
    };
    if role != "writer" {
        return;
    }
    let w = ClockPageWriter::create(&page).expect("create page");
    // Race the readers for the whole window, however late a loaded machine starts them.
    wait_for_marks(&page, "ready");
    let start = Instant::now();
    let mut k = 1;
    while start.elapsed() < WRITE_FOR {
        // Check the clock only every 1024 publishes, so the page changes as fast as possible.
        for _ in 0..1024 {
            w.publish(&sample(k));
            k += 1;
        }
    }
    w.publish(&sample(DONE));
    println!("STRESS writer publishes={k}");
    // Keep the page valid (a dropped writer marks it empty) until the readers saw DONE.
    wait_for_marks(&page, "done");
}

#[test]
fn child_reader() {
    let Some((role, page)) = child_env() else {
        return;
    };
    if role != "reader" {
        return;
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    let r = loop {
        match ClockPageReader::open(&page) {
            Ok(r) => break r,
            Err(e) if Instant::now() > deadline => panic!("open: {e}"),
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    };
    mark(&page, "ready");
    // Marks "done" however this function ends (a panic too), so the writer never waits for a
    // reader that failed.
    struct Done<'a>(&'a str);
    impl Drop for Done<'_> {
        fn drop(&mut self) {
            mark(self.0, "done");
        }
    }
    let _done = Done(&page);
    let (mut reads, mut changes, mut busy, mut last) = (0u64, 0u64, 0u64, 0u64);
    loop {
        assert!(Instant::now() < deadline, "never saw the final sample");
        match r.read() {
            Ok(s) => {
                let k = s.phc_ns;
                // Compare bit patterns: `sample(k)` must be reproduced exactly.
                let want = sample(k);
                assert!(
                    s.mono_ns == want.mono_ns
                        && s.rate_ppb.to_bits() == want.rate_ppb.to_bits()
                        && s.generation == want.generation,
                    "TORN READ after {reads} reads: {s:?}"
                );
                assert!(k >= last, "went back from {last} to {k}");
                reads += 1;
                if k != last {
                    changes += 1;
                    last = k;
                }
                if k == DONE {
                    break;
                }
            }
            Err(ClockPageError::Busy) => busy += 1,
            Err(ClockPageError::Empty) => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    println!("STRESS reader reads={reads} changes={changes} busy={busy}");
}

fn field(out: &str, key: &str) -> u64 {
    out.split_whitespace()
        .find_map(|w| w.strip_prefix(key)?.strip_prefix('='))
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no {key}= in child output:\n{out}"))
}

#[test]
fn clockpage_no_torn_reads_across_processes() {
    let dir = std::env::temp_dir().join(format!("ptpipc-stress-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let page = dir.join("page");
    let exe = std::env::current_exe().unwrap();
    let spawn = |role: &str, test: &str| {
        Command::new(&exe)
            .args(["--exact", test, "--nocapture", "--test-threads=1"])
            .env(ROLE, role)
            .env(PAGE, &page)
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
    };
    let writer = spawn("writer", "child_writer");
    let readers: Vec<_> = (0..READERS)
        .map(|_| spawn("reader", "child_reader"))
        .collect();

    let mut outputs = Vec::new();
    let mut failures = String::new();
    for child in std::iter::once(writer).chain(readers) {
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned();
        if !out.status.success() {
            let err = String::from_utf8_lossy(&out.stderr);
            failures += &format!("child failed: {}\n{text}\n{err}\n", out.status);
        }
        outputs.push(text);
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failures.is_empty(), "{failures}");

    let publishes = field(&outputs[0], "publishes");
    eprintln!("writer: {publishes} publishes");
    for out in &outputs[1..] {
        let (reads, changes) = (field(out, "reads"), field(out, "changes"));
        eprintln!(
            "reader: {reads} reads, {changes} distinct samples, busy={}",
            field(out, "busy")
        );
        // The readers must really have raced the writer, not read a quiet page. On a loaded
        // 2-core machine (the whole suite in parallel) a reader may be descheduled for most of
        // the run, so the bounds are low; tens of changes already mean reads interleaved with
        // publishes.
        assert!(reads > 1_000, "too few reads: {reads}");
        assert!(changes > 20, "reader saw too few updates: {changes}");
    }
}
