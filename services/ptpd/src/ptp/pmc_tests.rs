//! linuxptp's `pmc -u` against a running engine's management socket: each supported GET is
//! answered with what `ptpctl status` (the clock scheme's status) shows, and a SET from root
//! changes what the next GET reads while one from another uid is refused. Fails, not skips,
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
    let server = MgmtServer::start(&sock, r.board.clone(), None).unwrap();
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
            "GET PRIORITY2",
            "GET GRANDMASTER_SETTINGS_NP",
        ],
    );
    let s = status(&r);
    let own = crate::testing::pmc_identity(eui64_from_mac(MAC));
    assert_eq!(out.matches(" RESPONSE MANAGEMENT ").count(), 8, "{out}");
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
    assert_eq!(crate::testing::pmc_field(&out, "priority2"), "128");
    assert!(server.counters.answered.load(Ordering::Relaxed) >= 9);
    drop(server);
    assert!(!sock.exists(), "socket file removed on drop");
    let _ = std::fs::remove_dir_all(&dir);
}

/// This process's effective uid (the owner of its /proc entry).
fn effective_uid() -> u32 {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").unwrap().uid()
}

/// A scratch directory everyone may write (pmc run as another uid binds its socket there).
fn open_dir(name: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let dir = std::env::temp_dir().join(format!("ptpd-pmc-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o1777)).unwrap();
    dir
}

#[test]
fn pmc_set_from_root_changes_priority1_and_another_uid_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    use std::os::unix::process::CommandExt;

    use crate::mgmt_socket::SetAccess;
    use crate::ptp::config::MgmtPolicy;

    let mut s = settings(1, fast_port(NetworkTransport::L2));
    s.instance.management = MgmtPolicy {
        priority1: true,
        priority2: false,
        network_set: false,
    };
    let r = rig_with(s, MAC, SimPhc::new(1e12, 0.0), Instant::now());
    assert!(wait_for(Duration::from_secs(10), || r
        .board
        .mgmt()
        .is_some()));
    let dir = open_dir("set");
    let sock = dir.join("ptp4l");
    let set = SetAccess {
        engine: r.engine.manager(),
        privileged_uids: vec![],
    };
    let server = MgmtServer::start(&sock, r.board.clone(), Some(set)).unwrap();
    // Anyone may send to it (the uid decides what a SET may do, not the file mode).
    std::fs::set_permissions(&sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let root = effective_uid() == 0;
    if root {
        let out = pmc(&sock, &dir, &["SET PRIORITY1 7", "GET DEFAULT_DATA_SET"]);
        assert!(
            out.contains("RESPONSE MANAGEMENT PRIORITY1"),
            "{out} {:?}",
            server.counters
        );
        assert_eq!(crate::testing::pmc_field(&out, "priority1"), "7", "{out}");
        assert!(
            out.lines()
                .filter(|l| l.trim_start().starts_with("priority1"))
                .all(|l| l.split_whitespace().nth(1) == Some("7")),
            "SET's answer and DEFAULT_DATA_SET both say 7:\n{out}"
        );
        // Not listed in management_settable: refused even for root.
        let out = pmc(&sock, &dir, &["SET PRIORITY2 9", "GET PRIORITY2"]);
        assert!(out.contains("MANAGEMENT_ERROR_STATUS"), "{out}");
        assert_eq!(crate::testing::pmc_field(&out, "priority2"), "128", "{out}");
        // Another uid (nobody): refused, and priority1 stays 7.
        let client = dir.join("pmc-nobody");
        let out =
            crate::testing::pmc_command(0, &sock, &client, &["SET PRIORITY1 3", "GET PRIORITY1"])
                .uid(65534)
                .gid(65534)
                .output()
                .expect("running pmc as nobody");
        let out = String::from_utf8_lossy(&out.stdout).into_owned();
        assert!(out.contains("MANAGEMENT_ERROR_STATUS"), "{out}");
        assert_eq!(crate::testing::pmc_field(&out, "priority1"), "7", "{out}");
        assert_eq!(r.board.mgmt().unwrap().default.priority1, 7);
    } else {
        // Not root: this uid is unprivileged; its SET is refused and nothing changes
        // (the decision itself is unit-tested in manage.rs).
        let out = pmc(&sock, &dir, &["SET PRIORITY1 7", "GET PRIORITY1"]);
        assert!(out.contains("MANAGEMENT_ERROR_STATUS"), "{out}");
        assert_eq!(crate::testing::pmc_field(&out, "priority1"), "1", "{out}");
    }
    drop(server);
    let _ = std::fs::remove_dir_all(&dir);
}

/// The write-then-read management session (the Redox scheme's `mgmt` handle) over a running
/// engine: replies queue per request, SETs honour the session's uid.
#[test]
fn session_answers_writes_with_reads_and_checks_the_uid() {
    use crate::mgmt_access::{MgmtSession, SessionError, SetAccess};
    use crate::ptp::config::MgmtPolicy;
    use crate::ptp::mgmt::{Action, MgmtRequest, id, parse};

    let mut s = settings(1, fast_port(NetworkTransport::L2));
    s.instance.management = MgmtPolicy {
        priority1: true,
        ..MgmtPolicy::default()
    };
    let r = rig_with(s, MAC, SimPhc::new(1e12, 0.0), Instant::now());
    assert!(wait_for(Duration::from_secs(10), || r
        .board
        .mgmt()
        .is_some()));
    let set = SetAccess {
        engine: r.engine.manager(),
        privileged_uids: vec![1000],
    };
    // Domain 0, as this engine's clock; multicast, as pmc's default.
    let req = |action, mid, data: Vec<u8>| {
        MgmtRequest {
            sdo_and_version: [0x0D, 0x12],
            domain: 0,
            unicast: false,
            ..crate::ptp::mgmt::test_request(action, mid, data, 3)
        }
        .encode()
    };
    let mut buf = [0u8; 1500];
    // A SET's answer comes from the engine thread: the read says Empty until it is there.
    let read_answer = |s: &mut MgmtSession, buf: &mut [u8]| {
        let t = std::time::Instant::now();
        loop {
            match s.read(buf, &r.board, Some(&set)) {
                Err(SessionError::Empty) if t.elapsed() < Duration::from_secs(5) => {
                    std::thread::sleep(Duration::from_millis(1));
                }
                other => return other,
            }
        }
    };
    let mut user = MgmtSession::new(1001);
    assert_eq!(
        user.read(&mut buf, &r.board, Some(&set)),
        Err(SessionError::Empty)
    );
    assert!(matches!(
        user.write(&[0x0D, 0x02, 0x00], &r.board, Some(&set)),
        Err(SessionError::Malformed(_))
    ));
    // GET: one reply, which a small buffer does not take away.
    let get = req(Action::Get, id::DEFAULT_DATA_SET, vec![]);
    assert_eq!(user.write(&get, &r.board, Some(&set)), Ok(get.len()));
    assert!(matches!(
        user.read(&mut buf[..10], &r.board, Some(&set)),
        Err(SessionError::TooSmall(_))
    ));
    let n = user.read(&mut buf, &r.board, Some(&set)).unwrap();
    let reply = parse(&buf[..n]).unwrap();
    assert_eq!(reply.data, r.board.mgmt().unwrap().default.encode());
    assert_eq!(
        user.read(&mut buf, &r.board, Some(&set)),
        Err(SessionError::Empty)
    );
    // SET from an unprivileged uid: an error status, priority1 unchanged.
    let set1 = req(Action::Set, id::PRIORITY1, vec![5, 0]);
    user.write(&set1, &r.board, Some(&set)).unwrap();
    let n = read_answer(&mut user, &mut buf).unwrap();
    assert_eq!(&buf[48..50], &[0x00, 0x02], "MANAGEMENT_ERROR_STATUS");
    assert!(n >= 54);
    assert_eq!(r.board.mgmt().unwrap().default.priority1, 1);
    // From a privileged uid: applied.
    let mut admin = MgmtSession::new(1000);
    admin.write(&set1, &r.board, Some(&set)).unwrap();
    let n = read_answer(&mut admin, &mut buf).unwrap();
    assert_eq!(parse(&buf[..n]).unwrap().data, vec![5, 0]);
    assert_eq!(r.board.mgmt().unwrap().default.priority1, 5);
}
