//! Ring pairs between two processes: the test binary re-runs itself as the peer (the ignored
//! `ring_child` test, selected by environment), connected over a SOCK_SEQPACKET listener that
//! carries the region and the bells.
//!
//! - a stress run: millions of messages in random bursts and pauses from a child producer; every
//!   message arrives, in order, intact, and no wait of the consumer ends by its timeout while a
//!   message had been waiting longer than half that timeout (a lost wake-up);
//! - peer death on either side (SIGKILL, so no clean close): the survivor, asleep in recv or in
//!   a send on a full ring, gets `PeerGone` long before its timeout.
#![cfg(target_os = "linux")]

use std::os::fd::AsRawFd;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use ptp_ipc::ring::{
    Geometry, RingConfig, RingEndpoint, RingError, RingStats, accept_ring, offer_ring,
};
use ptp_ipc::time::mono_ns;
use ptp_ipc::transport::{SeqpacketConn, SeqpacketListener};

const LONG: Duration = Duration::from_secs(20);
const SETUP: Duration = Duration::from_secs(10);
/// Message header in the stress run: sequence number, publish time (CLOCK_MONOTONIC ns).
const HDR: usize = 16;

fn cfg() -> RingConfig {
    RingConfig {
        // Small slots and a short ring, so the producer also meets a full ring.
        geometry: Geometry::new(64, 64).unwrap(),
        busy_poll: std::time::Duration::from_micros(20),
    }
}

/// A socket path for this test in the temp dir (removed by the listener's drop).
fn sock_path(tag: &str) -> PathBuf {
    static N: AtomicU32 = AtomicU32::new(0);
    let n = N.fetch_add(1, Ordering::Relaxed);
    std::env::temp_dir().join(format!("ptpring-{tag}-{}-{n}", std::process::id()))
}

/// Starts this test binary as the peer in `role`, connected to a fresh listener; returns the
/// child and the parent's end of the control connection.
fn spawn(role: &str, env: &[(&str, String)]) -> (Child, SeqpacketConn, SeqpacketListener) {
    let path = sock_path(role);
    let l = SeqpacketListener::bind(&path).unwrap();
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args([
        "--ignored",
        "--exact",
        "ring_child",
        "--nocapture",
        "--test-threads=1",
    ])
    .env("RING_CHILD", role)
    .env("RING_SOCK", &path)
    .stdout(Stdio::piped());
    for (k, v) in env {
        cmd.env(k, v);
    }
    let child = cmd.spawn().unwrap();
    let (conn, cred) = l.accept(Some(SETUP)).unwrap();
    assert_eq!(cred.pid as u32, child.id(), "the connection is the child's");
    (child, conn, l)
}

/// Deterministic generator (xorshift64), so a failing run can be repeated from its seed.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

fn fill(seq: u64, len: usize, out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&seq.to_le_bytes());
    out.extend_from_slice(&mono_ns().to_le_bytes());
    out.extend((HDR..len).map(|k| (seq as usize + k) as u8));
}

fn stats_line(s: &RingStats) -> String {
    format!(
        "sent={} received={} signals={} sleeps={} wakeups={} wait_timeouts={} full_events={} \
         full_drops={}",
        s.sent,
        s.received,
        s.signals,
        s.sleeps,
        s.wakeups,
        s.wait_timeouts,
        s.full_events,
        s.full_drops
    )
}

/// The peer process. Ignored in normal runs; the tests below start it with RING_CHILD set.
#[test]
#[ignore = "peer process of the ring tests: started by them with RING_CHILD set"]
fn ring_child() {
    let Ok(role) = std::env::var("RING_CHILD") else {
        return;
    };
    let path = std::env::var("RING_SOCK").unwrap();
    let conn = SeqpacketConn::connect(&path).unwrap();
    let ep = match role.as_str() {
        // The offering side (A) of the pair.
        "hold-offer" => offer_ring(&conn, cfg()).unwrap(),
        _ => accept_ring(&conn, SETUP, cfg().busy_poll).unwrap(),
    };
    match role.as_str() {
        "produce" => child_produce(&ep),
        // Sends three messages, then waits in recv until killed (at most a minute).
        "hold-offer" => {
            for m in [b"one".as_slice(), b"two", b"three"] {
                ep.send_bytes(m, Some(LONG)).unwrap();
            }
            let _ = ep.recv_bytes(&mut Vec::new(), Some(Duration::from_secs(60)));
        }
        // Attached, never receives: sleeps until killed (at most a minute).
        "sink" => {
            ep.send_bytes(b"ready", Some(LONG)).unwrap();
            std::thread::sleep(Duration::from_secs(60));
        }
        r => panic!("unknown child role {r}"),
    }
}

fn child_produce(ep: &RingEndpoint) {
    let n: u64 = std::env::var("RING_N").unwrap().parse().unwrap();
    let mut rng = Rng(std::env::var("RING_SEED").unwrap().parse().unwrap());
    let max = ep.max_message();
    let long_us: u64 = std::env::var("RING_LONG_PAUSE_US")
        .unwrap()
        .parse()
        .unwrap();
    let long = Duration::from_micros(long_us);
    let (mut seq, mut pauses, mut long_pauses, mut buf) = (0u64, 0u64, 0u64, Vec::new());
    while seq < n {
        // Bursts of 1..=2000 messages; after most of them a pause of up to 500 us, long enough
        // for the consumer to give up spinning and sleep.
        let burst = 1 + rng.next() % 2000;
        for _ in 0..burst.min(n - seq) {
            let len = HDR + (rng.next() as usize % (max - HDR + 1));
            fill(seq, len, &mut buf);
            ep.send_bytes(&buf, Some(LONG)).unwrap();
            seq += 1;
        }
        let r = rng.next();
        if r % 32 == 0 {
            // Now and then longer than the consumer's wait slice: a signal lost at the end of
            // this burst leaves a message waiting through a whole slice.
            long_pauses += 1;
            std::thread::sleep(long);
        } else if r % 4 != 0 {
            pauses += 1;
            std::thread::sleep(Duration::from_micros(rng.next() % 500));
        }
    }
    let s = stats_line(&ep.stats());
    println!("CHILD pauses={pauses} long_pauses={long_pauses} {s}");
}

/// This run's scheduling noise: the worst overshoot of a 1 ms sleep over 50 tries.
fn sleep_overshoot() -> Duration {
    (0..50)
        .map(|_| {
            let t = Instant::now();
            std::thread::sleep(Duration::from_millis(1));
            t.elapsed().saturating_sub(Duration::from_millis(1))
        })
        .max()
        .unwrap()
}

/// Checks one stress message: its sequence number and its content.
fn check(buf: &[u8], want: u64, max: usize) -> u64 {
    assert!(
        (HDR..=max).contains(&buf.len()),
        "message {want}: {} bytes",
        buf.len()
    );
    let seq = u64::from_le_bytes(buf[..8].try_into().unwrap());
    assert_eq!(seq, want, "out of order or lost");
    for (k, &b) in buf.iter().enumerate().skip(HDR) {
        assert_eq!(
            b,
            (seq as usize + k) as u8,
            "message {seq} byte {k} corrupted"
        );
    }
    u64::from_le_bytes(buf[8..16].try_into().unwrap())
}

#[test]
fn stress_across_processes_no_lost_wakeup() {
    let n: u64 = std::env::var("RING_STRESS_N")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let seed = mono_ns() | 1;
    // The wait slice: far above this run's own scheduling noise (30x the worst overshoot of a
    // 1 ms sleep), so a wait that runs out while a message had waited more than half of it is a
    // lost signal, not a slow scheduler.
    let noise = sleep_overshoot();
    let slice = (noise * 30).clamp(Duration::from_millis(20), Duration::from_secs(2));
    let long_pause = slice * 3 / 2;
    let env = [
        ("RING_N", n.to_string()),
        ("RING_SEED", seed.to_string()),
        ("RING_LONG_PAUSE_US", long_pause.as_micros().to_string()),
    ];
    let (child, conn, _l) = spawn("produce", &env);
    let ep = offer_ring(&conn, cfg()).unwrap();
    let max = ep.max_message();
    let (mut buf, mut late, mut idle, mut max_age) = (Vec::new(), 0u64, 0u64, 0u64);
    let t0 = Instant::now();
    let mut next = 0u64;
    while next < n {
        let before = ep.stats().wait_timeouts;
        match ep.recv_bytes(&mut buf, Some(slice)) {
            Ok(()) => {}
            // The producer paused longer than a slice: nothing was waiting.
            Err(RingError::Timeout) if t0.elapsed() < Duration::from_secs(600) => {
                idle += 1;
                continue;
            }
            Err(e) => panic!("after {next} of {n} messages (seed {seed}): {e}"),
        }
        let age = mono_ns().saturating_sub(check(&buf, next, max));
        max_age = max_age.max(age);
        if ep.stats().wait_timeouts > before && age > slice.as_nanos() as u64 / 2 {
            late += 1;
            // Fail at once: with signals lost, the rest of the run would crawl a slice at a time.
            assert!(
                late < 3,
                "message {next} waited {:.1} ms through a timed-out wait (slice {slice:?}, \
                 seed {seed}): lost wake-ups",
                age as f64 / 1e6
            );
        }
        next += 1;
    }
    let elapsed = t0.elapsed();
    // Then the child exits, and that is a typed end, not a wait.
    assert_eq!(
        ep.recv_bytes(&mut buf, Some(LONG)),
        Err(RingError::PeerGone)
    );
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "child: {:?}", out.status);
    let child_line = String::from_utf8_lossy(&out.stdout);
    let child_line = child_line
        .lines()
        .find(|l| l.starts_with("CHILD"))
        .unwrap_or("");
    let s = ep.stats();
    eprintln!(
        "stress: {n} messages in {elapsed:.2?} (seed {seed}); slice {slice:?} (noise {noise:?}); \
         late wake-ups {late}, idle slices {idle}, max age {:.3} ms; consumer {}; \
         wake-ups/message {:.4}; {child_line}",
        max_age as f64 / 1e6,
        stats_line(&s),
        s.wakeups as f64 / n as f64,
    );
    assert_eq!(
        late, 0,
        "consumer slept through a waiting message (seed {seed})"
    );
    // The run went through the sleep/wake path, or it proved nothing about it.
    assert!(s.sleeps > 100 && s.wakeups > 100, "{s:?}");
}

/// Waits until `fd` is readable or `slice` passes; `true` if readable.
fn poll_fd(fd: i32, other: i32, slice: Duration) -> bool {
    let mut p = [
        libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        },
        // The control socket, for hang-up only (as the driver's loop polls it).
        libc::pollfd {
            fd: other,
            events: 0,
            revents: 0,
        },
    ];
    let ms = slice.as_millis() as libc::c_int;
    // Safety: two valid pollfds for the call.
    let rc = unsafe { libc::poll(p.as_mut_ptr(), 2, ms) };
    rc > 0
}

#[test]
fn poll_style_consumer_across_processes_no_lost_wakeup() {
    // The driver's main loop: drain with try_recv, then prepare_sleep / poll the data bell's
    // descriptor with another one / end_sleep. A message that waited more than half a slice
    // when a poll ran out is a lost wake-up. Bounded: 300 000 messages (about 3 s in debug).
    let n: u64 = 300_000;
    let seed = mono_ns() | 1;
    let noise = sleep_overshoot();
    let slice = (noise * 30).clamp(Duration::from_millis(20), Duration::from_secs(2));
    let env = [
        ("RING_N", n.to_string()),
        ("RING_SEED", seed.to_string()),
        (
            "RING_LONG_PAUSE_US",
            (slice * 3 / 2).as_micros().to_string(),
        ),
    ];
    let (child, conn, _l) = spawn("produce", &env);
    let ep = offer_ring(&conn, cfg()).unwrap();
    let (fd, sock) = (ep.readable_fd().unwrap(), conn.as_raw_fd());
    let max = ep.max_message();
    let (mut buf, mut next, mut late, mut timed_out) = (Vec::new(), 0u64, 0u64, false);
    let t0 = Instant::now();
    while next < n {
        assert!(t0.elapsed() < Duration::from_secs(120), "stalled at {next}");
        if ep.try_recv(&mut buf).unwrap() {
            let age = mono_ns().saturating_sub(check(&buf, next, max));
            if timed_out && age > slice.as_nanos() as u64 / 2 {
                late += 1;
                assert!(
                    late < 3,
                    "message {next} waited {age} ns through a timed-out poll (seed {seed})"
                );
            }
            timed_out = false;
            next += 1;
            continue;
        }
        if !ep.prepare_sleep().unwrap() {
            continue;
        }
        timed_out = !poll_fd(fd, sock, slice);
        ep.end_sleep();
    }
    let s = ep.stats();
    assert!(child.wait_with_output().unwrap().status.success());
    eprintln!(
        "poll-style: {n} messages in {:.2?} (seed {seed}), slice {slice:?}; late {late}; {}",
        t0.elapsed(),
        stats_line(&s)
    );
    assert_eq!(late, 0, "lost wake-ups (seed {seed})");
    assert!(
        s.sleeps > 100 && s.wakeups > 100,
        "the sleep path ran: {s:?}"
    );
}

/// Kills `child` after `after` from another thread.
fn kill_later(mut child: Child, after: Duration) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        std::thread::sleep(after);
        child.kill().unwrap();
        child.wait().unwrap();
    })
}

#[test]
fn offering_peer_killed_while_we_sleep_in_recv() {
    // The child is side A (it offered the region); we are B.
    let (child, conn, _l) = spawn("hold-offer", &[]);
    let ep = accept_ring(&conn, SETUP, std::time::Duration::ZERO).unwrap();
    let mut buf = Vec::new();
    for want in [b"one".as_slice(), b"two", b"three"] {
        ep.recv_bytes(&mut buf, Some(LONG)).unwrap();
        assert_eq!(buf, want);
    }
    let killer = kill_later(child, Duration::from_millis(100));
    let t0 = Instant::now();
    assert_eq!(
        ep.recv_bytes(&mut buf, Some(LONG)),
        Err(RingError::PeerGone)
    );
    let waited = t0.elapsed();
    killer.join().unwrap();
    assert!(ep.stats().sleeps >= 1, "we were asleep when it died");
    assert!(waited < LONG / 2, "death seen after {waited:?}");
    // Latched: later calls fail at once, without waiting.
    assert_eq!(ep.try_send(b"x"), Err(RingError::PeerGone));
    assert_eq!(
        ep.recv_bytes(&mut buf, Some(LONG)),
        Err(RingError::PeerGone)
    );
}

#[test]
fn accepting_peer_killed_while_we_wait_on_a_full_ring() {
    // The child is side B and never receives; we are A.
    let (child, conn, _l) = spawn("sink", &[]);
    let ep = offer_ring(&conn, cfg()).unwrap();
    let mut buf = Vec::new();
    ep.recv_bytes(&mut buf, Some(LONG)).unwrap();
    assert_eq!(buf, b"ready");
    let mut queued = 0;
    while ep.try_send(b"unread").is_ok() {
        queued += 1;
    }
    assert_eq!(queued, 64, "the ring fills, then refuses");
    let killer = kill_later(child, Duration::from_millis(100));
    let t0 = Instant::now();
    assert_eq!(ep.send_bytes(b"more", Some(LONG)), Err(RingError::PeerGone));
    let waited = t0.elapsed();
    killer.join().unwrap();
    assert!(ep.stats().sleeps >= 1, "we were asleep when it died");
    assert!(waited < LONG / 2, "death seen after {waited:?}");
}
