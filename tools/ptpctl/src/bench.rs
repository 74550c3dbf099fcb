//! `ptpctl bench`: the exact path (IPC → ptpd → driver → MMIO) against the clock page (a
//! seqlock read of shared memory, no IPC, no MMIO), in one run.

use std::time::Instant;

use ptpd::client::Client;
use serde_json::{Value, json};

use crate::Error;

fn percentile(sorted: &[u64], p: f64) -> u64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

pub fn run(c: &Client, clock: u32, n: usize) -> Result<(String, Value), Error> {
    let caps = c.caps(clock)?;
    if caps.clock_page.is_empty() {
        return Err(Error::Other("the driver publishes no clock page".into()));
    }
    let page = ptp_ipc::clockpage::ClockPageReader::open(std::path::Path::new(&caps.clock_page))
        .map_err(|e| Error::Other(format!("clock page {}: {e}", caps.clock_page)))?;

    // Warm up both paths (page faults, connection, caches).
    for _ in 0..100.min(n) {
        c.get(clock)?;
        let _ = page.read();
    }

    let before = c.stats(clock)?;
    let mut exact = Vec::with_capacity(n);
    for _ in 0..n {
        let t = Instant::now();
        c.get(clock)?;
        exact.push(t.elapsed().as_nanos() as u64);
    }
    let after = c.stats(clock)?;

    let mut fast = Vec::with_capacity(n);
    let mut sink = 0u64;
    for _ in 0..n {
        let t = Instant::now();
        let s = page
            .read()
            .map_err(|e| Error::Other(format!("clock page: {e}")))?;
        sink = sink.wrapping_add(s.phc_at(ptp_ipc::time::mono_ns()));
        fast.push(t.elapsed().as_nanos() as u64);
    }
    std::hint::black_box(sink);

    exact.sort_unstable();
    fast.sort_unstable();
    let (e50, e99) = (percentile(&exact, 0.5), percentile(&exact, 0.99));
    let (f50, f99) = (percentile(&fast, 0.5), percentile(&fast, 0.99));
    let ratio = e50 as f64 / f50.max(1) as f64;
    // The driver's watchdog also reads the clock (2 reads per 100 ms), so this is an upper bound.
    let mmio_per_read = (after.mmio_reads - before.mmio_reads) as f64 / n as f64;
    let human = format!(
        "exact path (ptpd → driver → MMIO): p50 {e50} ns  p99 {e99} ns\n\
         clock page (no IPC, no MMIO):      p50 {f50} ns  p99 {f99} ns\n\
         p50 ratio: {ratio:.0}x   MMIO reads per exact read: {mmio_per_read:.3}   (n = {n})"
    );
    let v = json!({"ok": true, "command": "bench", "clock": clock, "n": n,
        "exact_p50_ns": e50, "exact_p99_ns": e99,
        "page_p50_ns": f50, "page_p99_ns": f99,
        "p50_ratio": ratio, "mmio_reads_per_exact_read": mmio_per_read});
    Ok((human, v))
}
