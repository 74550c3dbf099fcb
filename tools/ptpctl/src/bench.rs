//! `ptpctl bench`: the exact path (IPC → ptpd → driver → MMIO) against the clock page (a
//! seqlock read of shared memory, no IPC, no MMIO), in one run.

use std::time::Instant;

use hdrhistogram::Histogram;
use ptpd::client::Client;
use serde_json::{Value, json};

use crate::Error;

/// A latency histogram, 1 ns to 60 s at 3 significant digits (fixed memory whatever `n`).
fn histogram() -> Result<Histogram<u64>, Error> {
    Histogram::new_with_bounds(1, 60_000_000_000, 3).map_err(|e| Error::Other(e.to_string()))
}

/// The longest wait for a driver's first clock page sample.
const PAGE_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

fn record(h: &mut Histogram<u64>, since: Instant) {
    h.saturating_record((since.elapsed().as_nanos() as u64).max(1));
}

pub fn run(c: &Client, clock: u32, n: usize) -> Result<(String, Value), Error> {
    let caps = c.caps(clock)?;
    if caps.clock_page.is_empty() {
        return Err(Error::Other("the driver publishes no clock page".into()));
    }
    let page = ptp_ipc::clockpage::ClockPageReader::open(std::path::Path::new(&caps.clock_page))
        .map_err(|e| Error::Other(format!("clock page {}: {e}", caps.clock_page)))?;

    // A driver publishes its first sample a moment after it starts (on a slow bus, after its
    // first precise reading): wait for it, bounded, rather than fail a bench run at boot.
    let t = Instant::now();
    while let Err(ptp_ipc::clockpage::ClockPageError::Empty) = page.read() {
        if t.elapsed() > PAGE_WAIT {
            return Err(Error::Other(format!(
                "clock page {}: no sample within {PAGE_WAIT:?}",
                caps.clock_page
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // Warm up both paths (page faults, connection, caches).
    for _ in 0..100.min(n) {
        c.get(clock)?;
        let _ = page.read();
    }

    let before = c.stats(clock)?;
    let mut exact = histogram()?;
    for _ in 0..n {
        let t = Instant::now();
        c.get(clock)?;
        record(&mut exact, t);
    }
    let after = c.stats(clock)?;

    let mut fast = histogram()?;
    let mut sink = 0u64;
    for _ in 0..n {
        let t = Instant::now();
        let s = page
            .read()
            .map_err(|e| Error::Other(format!("clock page: {e}")))?;
        sink = sink.wrapping_add(s.phc_at(ptp_ipc::time::mono_ns()));
        record(&mut fast, t);
    }
    std::hint::black_box(sink);

    let q = |h: &Histogram<u64>, q: f64| {
        if h.is_empty() {
            0
        } else {
            h.value_at_quantile(q)
        }
    };
    let (e50, e99, e999) = (q(&exact, 0.5), q(&exact, 0.99), q(&exact, 0.999));
    let (f50, f99, f999) = (q(&fast, 0.5), q(&fast, 0.99), q(&fast, 0.999));
    let ratio = e50 as f64 / f50.max(1) as f64;
    // The driver's watchdog also reads the clock (2 reads per 100 ms), so this is an upper bound.
    let mmio_per_read = (after.mmio_reads - before.mmio_reads) as f64 / n as f64;
    let human = format!(
        "exact path (ptpd → driver → MMIO): p50 {e50} ns  p99 {e99} ns  p99.9 {e999} ns\n\
         clock page (no IPC, no MMIO):      p50 {f50} ns  p99 {f99} ns  p99.9 {f999} ns\n\
         p50 ratio: {ratio:.0}x   MMIO reads per exact read: {mmio_per_read:.3}   (n = {n})"
    );
    let v = json!({"ok": true, "command": "bench", "clock": clock, "n": n,
        "exact_p50_ns": e50, "exact_p99_ns": e99, "exact_p999_ns": e999,
        "page_p50_ns": f50, "page_p99_ns": f99, "page_p999_ns": f999,
        "p50_ratio": ratio, "mmio_reads_per_exact_read": mmio_per_read});
    Ok((human, v))
}
