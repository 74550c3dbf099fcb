//! linuxptp's `pmc -u` against a running engine's management socket: each supported GET is
//! answered with what `ptpctl status` (the clock scheme's status) shows. Fails, not skips,
//! without pmc.

use std::path::Path;

use super::*;
use crate::mgmt_socket::MgmtServer;

fn pmc(socket: &Path, dir: &Path, cmds: &[&str]) -> String {
    crate::testing::run_pmc(0, socket, &dir.join("pmc"), cmds)
}

#[test]
fn pmc_reads_a_master_engine() {
    let r = rig(1);
    assert!(wait_for(Duration::from_secs(10), || {
        status(&r).port_state == PortState::Master && r.board.mgmt().is_some()
    }));
    let dir = std::env::temp_dir().join(format!("ptpd-pmc-engine-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let sock = dir.join("ptp4l");
    let server = MgmtServer::start(&sock, r.board.clone()).unwrap();
    let out = pmc(
        &sock,
        &dir,
        &[
            "GET DEFAULT_DATA_SET",
            "GET CURRENT_DATA_SET",
            "GET PARENT_DATA_SET",
            "GET TIME_PROPERTIES_DATA_SET",
            "GET PORT_DATA_SET",
            "GET TIME_STATUS_NP",
            "GET PORT_PROPERTIES_NP",
            "GET PRIORITY1",
        ],
    );
    let s = status(&r);
    let own = crate::testing::pmc_identity(eui64_from_mac(MAC));
    assert_eq!(out.matches(" RESPONSE MANAGEMENT ").count(), 7, "{out}");
    assert!(out.contains("RESPONSE MANAGEMENT_ERROR_STATUS"), "{out}");
    assert_eq!(crate::testing::pmc_field(&out, "clockIdentity"), own);
    assert_eq!(crate::testing::pmc_field(&out, "priority1"), "1");
    assert_eq!(crate::testing::pmc_field(&out, "domainNumber"), "0");
    assert_eq!(
        crate::testing::pmc_field(&out, "stepsRemoved"),
        s.steps_removed.to_string()
    );
    assert_eq!(crate::testing::pmc_field(&out, "grandmasterIdentity"), own);
    assert_eq!(crate::testing::pmc_field(&out, "gmIdentity"), own);
    assert_eq!(crate::testing::pmc_field(&out, "gmPresent"), "false");
    assert_eq!(crate::testing::pmc_field(&out, "currentUtcOffset"), "37");
    assert_eq!(
        crate::testing::pmc_field(&out, "portIdentity"),
        format!("{own}-1")
    );
    // PORT_DATA_SET and PORT_PROPERTIES_NP both print it.
    let states: Vec<&str> = out
        .lines()
        .filter_map(|l| l.trim().strip_prefix("portState"))
        .map(str::trim)
        .collect();
    assert_eq!(states, [s.port_state.name(); 2], "{out}");
    assert_eq!(crate::testing::pmc_field(&out, "interface"), "fake0");
    assert_eq!(crate::testing::pmc_field(&out, "logSyncInterval"), "-3");
    assert!(server.counters.answered.load(Ordering::Relaxed) >= 8);
    drop(server);
    assert!(!sock.exists(), "socket file removed on drop");
    let _ = std::fs::remove_dir_all(&dir);
}
