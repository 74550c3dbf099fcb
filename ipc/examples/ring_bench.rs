//! Ring pair vs SOCK_SEQPACKET socket pair, the same `Transport` calls on both: messages per
//! second at saturation, and at fixed rates the delivery latency and the consumer's wake-ups
//! per message (voluntary context switches of the receiving thread, RUSAGE_THREAD: one per
//! sleep, whatever the transport sleeps in).
//!
//! `cargo run --release -p ptp-ipc --example ring_bench -- [--n N] [--size BYTES]
//! [--rates R1,R2,...]` (defaults: 1000000 messages of 64 bytes; rates 10000,100000).
//! Producer and consumer are two threads of one process; a short run for a quick look, not a
//! figure for the README on a busy machine.

use std::time::{Duration, Instant};

use ptp_ipc::ring::{RingConfig, accept_ring, offer_ring};
use ptp_ipc::time::mono_ns;
use ptp_ipc::transport::{SeqpacketConn, Transport};

const LONG: Option<Duration> = Some(Duration::from_secs(10));

struct Args {
    n: u64,
    size: usize,
    rates: Vec<u64>,
}

fn parse() -> Result<Args, String> {
    let mut a = Args {
        n: 1_000_000,
        size: 64,
        rates: vec![10_000, 100_000],
    };
    let mut it = std::env::args().skip(1);
    while let Some(k) = it.next() {
        let v = it.next().ok_or(format!("{k} needs a value"))?;
        let bad = |_| format!("bad value {v:?} for {k}");
        match k.as_str() {
            "--n" => a.n = v.parse().map_err(bad)?,
            "--size" => a.size = v.parse().map_err(bad)?,
            "--rates" => {
                a.rates = v
                    .split(',')
                    .map(|r| r.parse().map_err(bad))
                    .collect::<Result<_, _>>()?
            }
            _ => return Err(format!("unknown option {k}")),
        }
    }
    if !(16..=500).contains(&a.size) || a.n == 0 {
        return Err("--size must be 16..=500 (a ring slot holds 508), --n above 0".into());
    }
    Ok(a)
}

/// Voluntary context switches of the calling thread so far.
fn vcsw() -> u64 {
    // Safety: rusage is a plain C struct for which all-zero bytes are valid.
    let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
    // Safety: `ru` is writable and outlives the call.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut ru) };
    ru.ru_nvcsw as u64
}

struct Run {
    secs: f64,
    consumer_vcsw: u64,
    /// Delivery latencies in ns (paced runs only).
    lat: Vec<u64>,
}

/// Sends `n` messages from a thread (paced at `rate`/s, or flat out when 0) and receives them
/// here.
fn run<T: Transport + 'static>(tx: T, rx: &T, n: u64, size: usize, rate: u64) -> Run {
    let producer = std::thread::spawn(move || {
        let mut msg = vec![0u8; size];
        let t0 = mono_ns();
        for i in 0..n {
            if let Some(step) = (i * 1_000_000_000).checked_div(rate) {
                let due = t0 + step;
                while mono_ns() < due {
                    std::hint::spin_loop();
                }
            }
            msg[..8].copy_from_slice(&mono_ns().to_le_bytes());
            tx.send(&msg, LONG).expect("send");
        }
        tx
    });
    let mut buf = Vec::new();
    let mut lat = Vec::with_capacity(if rate > 0 { n as usize } else { 0 });
    let (v0, t0) = (vcsw(), Instant::now());
    for _ in 0..n {
        rx.recv(&mut buf, LONG).expect("recv");
        if rate > 0 {
            let sent = u64::from_le_bytes(buf[..8].try_into().expect("8 bytes"));
            lat.push(mono_ns().saturating_sub(sent));
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let consumer_vcsw = vcsw() - v0;
    // Keep the producer's end open until everything was received.
    drop(producer.join().expect("producer"));
    Run {
        secs,
        consumer_vcsw,
        lat,
    }
}

fn pct(sorted: &[u64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let i = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[i] as f64 / 1000.0
}

fn report(name: &str, rate: u64, n: u64, mut r: Run) {
    r.lat.sort_unstable();
    let mode = if rate == 0 {
        "saturate".to_string()
    } else {
        format!("{rate}/s")
    };
    println!(
        "{name:<7} {mode:>9} {:>12.0} {:>10.4} {:>9.1} {:>9.1} {:>9.1}",
        n as f64 / r.secs,
        r.consumer_vcsw as f64 / n as f64,
        pct(&r.lat, 0.5),
        pct(&r.lat, 0.99),
        pct(&r.lat, 0.999),
    );
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("ring_bench: {e}");
            std::process::exit(2);
        }
    };
    println!(
        "{} messages of {} bytes per run\ntransport      mode        msg/s   wake/msg  p50(us)   p99(us)  p999(us)",
        a.n, a.size
    );
    for &rate in std::iter::once(&0).chain(&a.rates) {
        // Paced runs are capped at ~2 s each.
        let n = if rate == 0 { a.n } else { a.n.min(rate * 2) };
        let (s1, s2) = SeqpacketConn::pair().expect("socketpair");
        report("socket", rate, n, run(s1, &s2, n, a.size, rate));
        let (c1, c2) = SeqpacketConn::pair().expect("socketpair");
        let ring_a = offer_ring(&c1, RingConfig::default()).expect("offer");
        let ring_b = accept_ring(&c2, Duration::from_secs(5), RingConfig::default().busy_poll)
            .expect("accept");
        let r = run(ring_a, &ring_b, n, a.size, rate);
        let s = ring_b.stats();
        report("ring", rate, n, r);
        println!(
            "        (ring consumer: sleeps {} wake-ups {} signals to producer {})",
            s.sleeps, s.wakeups, s.signals
        );
    }
}
