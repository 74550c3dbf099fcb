//! linuxptp's pmc over the network (`pmc -2` on L2, `pmc -4` on UDPv4), as it talks to ptp4l:
//! a lab host (igcd on an emulated i225 + ptpd, real processes) whose cable ends in a TAP
//! device in a network namespace, where pmc runs. ptpd answers the GETs on its PTP port with
//! what the clock scheme's status shows, and refuses a SET from the network (the default).
//!
//! Needs root, pmc, ip and /dev/net/tun. Without them the tests skip with the reason, unless
//! `REDOX_PTP_REQUIRE_TAP=1` (set by `cargo xtask test`): then they fail.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use ptp_ipc::PortState;
use ptpd::testing::{pmc_field, pmc_identity, pmc_path};
use redox_ptp::lab::{Lab, LabConfig};
use redox_ptp::tap::Netns;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// Whether the test can run here; skips (false) or panics with what is missing.
fn available(test: &str) -> bool {
    use std::os::unix::fs::MetadataExt;
    let mut missing = Vec::new();
    // The owner of /proc/self is this process's effective uid.
    if std::fs::metadata("/proc/self").map(|m| m.uid()).ok() != Some(0) {
        missing.push("root (network namespaces and TAP devices)");
    }
    if !["/usr/sbin/pmc", "/usr/bin/pmc", "/usr/local/sbin/pmc"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        missing.push("pmc (apt-get install -y linuxptp)");
    }
    if !["/usr/sbin/ip", "/usr/bin/ip", "/sbin/ip", "/bin/ip"]
        .iter()
        .any(|p| Path::new(p).exists())
    {
        missing.push("ip (apt-get install -y iproute2)");
    }
    if !Path::new("/dev/net/tun").exists() {
        missing.push("/dev/net/tun");
    }
    if missing.is_empty() {
        return true;
    }
    let msg = format!("{test}: needs {}", missing.join(", "));
    if std::env::var("REDOX_PTP_REQUIRE_TAP").as_deref() == Ok("1") {
        panic!("{msg} (REDOX_PTP_REQUIRE_TAP=1)");
    }
    eprintln!("skipping {msg}; set REDOX_PTP_REQUIRE_TAP=1 to fail instead");
    false
}

/// `pmc -2|-4 -i tap0 -b 0 CMDS…` in the namespace; its stdout.
fn pmc_net(ns: &Netns, transport: &str, cmds: &[&str]) -> String {
    let out = ns
        .command(&pmc_path().to_string_lossy())
        .arg(if transport == "UDPv4" { "-4" } else { "-2" })
        .args(["-i", "tap0", "-b", "0", "-d", "0"])
        .args(cmds)
        .output()
        .expect("running pmc in the namespace");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn gets_over_the_network(transport: &str) {
    let test = format!("pmc_over_{transport}");
    if !available(&test) {
        return;
    }
    let ns = Netns::unique("rpmc").unwrap();
    let cfg = LabConfig {
        hosts: 1,
        tap: Some(ns.name().into()),
        transport: transport.into(),
        ..LabConfig::default()
    };
    let lab = Lab::start(cfg, &exe(), None).unwrap();
    // Alone on its cable, the host becomes master (and grandmaster) after its announce timeout.
    let t0 = Instant::now();
    while lab.status(0).map(|s| s.port_state) != Ok(PortState::Master) {
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "{test}: host never MASTER: {:?}\n{}",
            lab.status(0),
            lab.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let out = pmc_net(
        &ns,
        transport,
        &[
            "GET DEFAULT_DATA_SET",
            "GET PARENT_DATA_SET",
            "GET PORT_DATA_SET",
            "GET TIME_STATUS_NP",
            "GET GRANDMASTER_SETTINGS_NP",
            "SET PRIORITY1 3",
            "GET PRIORITY1",
        ],
    );
    eprintln!("{test}: pmc said:\n{out}");
    let s = lab.status(0).unwrap();
    let own = pmc_identity(lab.identity(0).unwrap());
    assert_eq!(
        out.matches(" RESPONSE MANAGEMENT ").count(),
        5,
        "{test}: the four GETs and PRIORITY1 answered\n{out}\n{}",
        lab.logs()
    );
    // GRANDMASTER_SETTINGS_NP is not supported; a SET from the network is refused.
    assert_eq!(
        out.matches("RESPONSE MANAGEMENT_ERROR_STATUS").count(),
        2,
        "{out}"
    );
    assert_eq!(pmc_field(&out, "clockIdentity"), own);
    assert_eq!(pmc_field(&out, "priority1"), "100", "unchanged by the SET");
    assert_eq!(
        pmc_field(&out, "grandmasterIdentity"),
        pmc_identity(s.grandmaster)
    );
    assert_eq!(pmc_field(&out, "portIdentity"), format!("{own}-1"));
    assert_eq!(pmc_field(&out, "portState"), s.port_state.name());
    assert_eq!(pmc_field(&out, "gmPresent"), "false");
}

#[test]
fn pmc_over_l2_reads_the_port() {
    gets_over_the_network("L2");
}

#[test]
fn pmc_over_udpv4_reads_the_port() {
    gets_over_the_network("UDPv4");
}
