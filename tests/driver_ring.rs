//! The driver channel over the shared-memory ring (issue 16), with real processes (igcd and
//! ptpd through the `ptplab` multi-call binary; tsperf's driver client, which is the one
//! ptpd's driver link uses):
//! - a client's `HelloRing` gets a ring; a TX timestamp round-trips over it, and the driver's
//!   hello and a control reply come over it too;
//! - a client that says the plain `Hello` (every client before rings) still gets the socket;
//! - igcd SIGKILLed while ptpd holds a ring: ptpd answers `NoDevice`, then reconnects (over a
//!   new ring) to the restarted igcd;
//! - ptpd SIGKILLed while it holds a ring: igcd drops the connection (from the socket's hang-up,
//!   not from a newer client replacing it), and a new ptpd gets a new ring.
#![cfg(target_os = "linux")]

mod common;

use std::ffi::OsString;
use std::time::{Duration, Instant};

use common::{TempDir, exe};
use ptp_ipc::ClockError;
use ptp_ipc::transport::ChannelMode;
use ptpd::client::{ClientError, ClockErrorDisplay};
use redox_ptp::lab::{self, HostPaths};
use redox_ptp::procs::Children;
use tsperf::driver::Driver;
use tsperf::ramp::{Outcome, Target};

fn igcd_cmd() -> Vec<OsString> {
    vec![exe().into(), "igcd".into()]
}

/// Submits `n` timestamped Syncs one after the other (each once the previous one's stamp came
/// back: the NIC has 4 timestamp sets), and returns how many came back stamped.
fn stamps(d: &mut Driver, n: u64) -> u64 {
    let mut got = 0;
    for id in 1..=n {
        d.submit(id).unwrap();
        match d.completions().recv_timeout(Duration::from_secs(5)) {
            Ok(c) if c.id == id && matches!(c.outcome, Outcome::Stamp { .. }) => got += 1,
            Ok(c) => panic!("request {id}: {c:?}"),
            Err(_) => break,
        }
    }
    got
}

#[test]
fn a_tx_stamp_round_trips_over_the_ring() {
    let mut d = Driver::start(&igcd_cmd(), "i225", 4, "loopback", ChannelMode::Ring).unwrap();
    assert_eq!(d.mode(), ChannelMode::Ring);
    assert_eq!(stamps(&mut d, 50), 50);
    // A control request and its reply take the ring as well.
    let st = d.stats().unwrap();
    assert!(st.tx_requested >= 50, "{st:?}");
    let r = d.ring_stats().expect("a ring");
    // Received: igcd's hello (Restarted, Link), 50 stamps, the Stats reply (and looped-back
    // frames); sent: 50 SendPtp and the Stats request.
    assert!(r.received >= 53, "{r:?}");
    assert_eq!(r.sent, 51, "{r:?}");
}

#[test]
fn a_client_without_the_ring_hello_still_gets_the_socket() {
    let mut d = Driver::start(&igcd_cmd(), "i225", 4, "loopback", ChannelMode::Socket).unwrap();
    assert_eq!(d.mode(), ChannelMode::Socket);
    assert!(d.ring_stats().is_none());
    assert_eq!(stamps(&mut d, 20), 20);
    assert!(d.stats().unwrap().tx_requested >= 20);
}

fn sigkill(pid: u32) {
    // Safety: kill with a pid of our own child; no memory is involved.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
}

fn log(paths: &HostPaths, f: &str) -> String {
    std::fs::read_to_string(paths.dir.join(f)).unwrap_or_default()
}

fn logs(paths: &HostPaths) -> String {
    format!(
        "--- igcd.log\n{}--- ptpd.log\n{}",
        log(paths, "igcd.log"),
        log(paths, "ptpd.log")
    )
}

/// Waits (bounded) until `f` holds.
fn within(limit: Duration, mut f: impl FnMut() -> bool) -> bool {
    let t = Instant::now();
    while t.elapsed() < limit {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    false
}

#[test]
fn igcd_killed_under_a_ring_then_restarted_ptpd_reconnects() {
    let dir = TempDir::new("ring-igcd-kill");
    let paths = HostPaths::new(&dir.0, 0);
    let mut kids = Children::default();
    let igcd = lab::spawn_igcd(&mut kids, &exe(), &paths, 0, "i225", 0.0, &[]).unwrap();
    lab::spawn_ptpd(&mut kids, &exe(), &paths, 0, "").unwrap();
    let c = lab::wait_ready(&paths, Duration::from_secs(15)).unwrap();
    c.get(0).unwrap();
    assert!(
        log(&paths, "ptpd.log").contains("(ring)"),
        "ptpd's default is the ring\n{}",
        logs(&paths)
    );
    sigkill(igcd);
    let no_device = within(Duration::from_secs(5), || {
        matches!(
            c.get(0),
            Err(ClientError::Clock(ClockErrorDisplay(ClockError::NoDevice)))
        )
    });
    assert!(no_device, "ptpd did not report NoDevice\n{}", logs(&paths));
    // Reaped (a zombie still holds its clock page: the page's writer check asks kill(pid, 0)).
    kids.stop("host0/igcd");
    lab::spawn_igcd(&mut kids, &exe(), &paths, 0, "i225", 0.0, &[]).unwrap();
    let back = within(Duration::from_secs(10), || c.get(0).is_ok());
    assert!(back, "ptpd did not reconnect\n{}", logs(&paths));
    let st = c.status(0).unwrap();
    assert!(st.driver_up, "{st:?}");
    let connected = log(&paths, "ptpd.log")
        .matches("connected to driver at")
        .count();
    assert!(connected >= 2, "{}", logs(&paths));
}

#[test]
fn ptpd_killed_under_a_ring_igcd_drops_it_and_serves_a_new_one() {
    let dir = TempDir::new("ring-ptpd-kill");
    let paths = HostPaths::new(&dir.0, 0);
    let mut kids = Children::default();
    lab::spawn_igcd(&mut kids, &exe(), &paths, 0, "i225", 0.0, &[]).unwrap();
    let ptpd = lab::spawn_ptpd(&mut kids, &exe(), &paths, 0, "").unwrap();
    lab::wait_ready(&paths, Duration::from_secs(15))
        .unwrap()
        .get(0)
        .unwrap();
    sigkill(ptpd);
    // Seen by igcd itself: the socket's hang-up, with no newer client to replace the old one.
    let dropped = within(Duration::from_secs(5), || {
        log(&paths, "igcd.log").contains(&format!("ptpd disconnected (pid {ptpd})"))
    });
    assert!(dropped, "igcd kept a dead client's ring\n{}", logs(&paths));
    lab::spawn_ptpd(&mut kids, &exe(), &paths, 0, "").unwrap();
    let c = lab::wait_ready(&paths, Duration::from_secs(15)).unwrap();
    c.get(0).unwrap();
    let st = c.status(0).unwrap();
    assert!(st.driver_up, "{st:?}");
}
