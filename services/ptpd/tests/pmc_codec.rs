//! linuxptp's own `pmc` against ptpd's management codec over a Unix datagram socket, the way
//! `pmc -u` talks to ptp4l: each supported GET is decoded, answered with known data-set values,
//! and pmc must print those values. Fails (not skips) without pmc: CI installs linuxptp.

use std::os::unix::net::UnixDatagram;
use std::process::Stdio;
use std::time::Duration;

use ptp_ipc::PortState;
use ptpd::ptp::mgmt::{self, ClockQuality, ErrorId, PortIdentity, id};
use ptpd::testing::{pmc_command, pmc_field};

const US: [u8; 8] = [0x00, 0x1B, 0x21, 0xFF, 0xFE, 0x00, 0x00, 0x01];
const GM: [u8; 8] = [0xA0, 0xA1, 0xA2, 0xFF, 0xFE, 0xA3, 0xA4, 0xA5];
const ME: PortIdentity = PortIdentity { clock: US, port: 1 };

fn quality() -> ClockQuality {
    ClockQuality {
        class: 248,
        accuracy: 0xFE,
        offset_scaled_log_variance: 0xFFFF,
    }
}

/// The data set ptpd would answer `id` with, or None for an id it does not support.
fn answer(mid: u16) -> Option<Vec<u8>> {
    Some(match mid {
        id::DEFAULT_DATA_SET => mgmt::DefaultDataSet {
            two_step: true,
            slave_only: false,
            number_ports: 1,
            priority1: 128,
            quality: quality(),
            priority2: 127,
            clock_identity: US,
            domain: 24,
        }
        .encode(),
        id::CURRENT_DATA_SET => mgmt::CurrentDataSet {
            steps_removed: 1,
            offset_from_master_ns: -250,
            mean_path_delay_ns: 1000,
        }
        .encode(),
        id::PARENT_DATA_SET => mgmt::ParentDataSet {
            parent_port: PortIdentity { clock: GM, port: 1 },
            parent_stats: false,
            observed_offset_scaled_log_variance: 0xFFFF,
            observed_phase_change_rate: 0x7FFF_FFFF,
            gm_priority1: 100,
            gm_quality: quality(),
            gm_priority2: 101,
            gm_identity: GM,
        }
        .encode(),
        id::TIME_PROPERTIES_DATA_SET => mgmt::TimePropertiesDataSet {
            current_utc_offset: 37,
            flags: 0x08,
            time_source: 0xA0,
        }
        .encode(),
        id::PORT_DATA_SET => mgmt::PortDataSet {
            port: ME,
            state: PortState::Slave,
            log_min_delay_req_interval: 0,
            peer_mean_path_delay_ns: 0,
            log_announce_interval: 1,
            announce_receipt_timeout: 3,
            log_sync_interval: -3,
            delay_mechanism: 1,
            log_min_pdelay_req_interval: 0,
            version: 0x02,
        }
        .encode(),
        id::TIME_STATUS_NP => mgmt::TimeStatusNp {
            master_offset_ns: -5,
            ingress_time_ns: 1_000_000_000,
            gm_present: true,
            gm_identity: GM,
        }
        .encode(),
        id::PORT_PROPERTIES_NP => mgmt::PortPropertiesNp {
            port: ME,
            state: PortState::Slave,
            timestamping: 1,
            interface: "eth0".into(),
        }
        .encode(),
        _ => return None,
    })
}

/// Runs `pmc -u` with `cmds` against a socket answered by the codec; pmc's stdout.
fn run_pmc(tag: &str, cmds: &[&str]) -> String {
    let dir = std::env::temp_dir().join(format!("ptpd-pmc-{}-{tag}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let server_path = dir.join("ptp4l");
    let server = UnixDatagram::bind(&server_path).unwrap();
    server
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut cmd = pmc_command(24, &server_path, &dir.join("pmc"), cmds);
    cmd.stdout(Stdio::piped()).stderr(Stdio::piped());
    let child = cmd.spawn().expect("spawning pmc");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 1500];
    let mut answered = 0;
    while answered < cmds.len() && std::time::Instant::now() < deadline {
        let Ok((n, peer)) = server.recv_from(&mut buf) else {
            continue;
        };
        let req = mgmt::parse(&buf[..n]).expect("pmc's request decodes");
        assert_eq!(req.action, mgmt::Action::Get);
        assert_eq!(req.domain, 24);
        let reply = match answer(req.management_id) {
            Some(data) => mgmt::build_response(&req, ME, &data),
            None => mgmt::build_error(&req, ME, ErrorId::NotSupported),
        };
        let to = peer.as_pathname().expect("pmc binds a path").to_owned();
        server.send_to(&reply, to).unwrap();
        answered += 1;
    }
    let out = child.wait_with_output().unwrap();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        answered,
        cmds.len(),
        "pmc sent fewer requests than commands"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn pmc_decodes_every_supported_data_set() {
    let out = run_pmc(
        "all",
        &[
            "GET DEFAULT_DATA_SET",
            "GET CURRENT_DATA_SET",
            "GET PARENT_DATA_SET",
            "GET TIME_PROPERTIES_DATA_SET",
            "GET PORT_DATA_SET",
            "GET TIME_STATUS_NP",
            "GET PORT_PROPERTIES_NP",
        ],
    );
    let responses = out.matches("001b21.fffe.000001-1 seq").count();
    assert_eq!(responses, 7, "pmc output:\n{out}");
    // DEFAULT_DATA_SET
    assert_eq!(pmc_field(&out, "twoStepFlag"), "1");
    assert_eq!(pmc_field(&out, "numberPorts"), "1");
    assert_eq!(pmc_field(&out, "priority1"), "128");
    assert_eq!(pmc_field(&out, "clockClass"), "248");
    assert_eq!(pmc_field(&out, "clockAccuracy"), "0xfe");
    assert_eq!(pmc_field(&out, "offsetScaledLogVariance"), "0xffff");
    assert_eq!(pmc_field(&out, "priority2"), "127");
    assert_eq!(pmc_field(&out, "clockIdentity"), "001b21.fffe.000001");
    assert_eq!(pmc_field(&out, "domainNumber"), "24");
    // CURRENT_DATA_SET
    assert_eq!(pmc_field(&out, "stepsRemoved"), "1");
    assert_eq!(
        pmc_field(&out, "offsetFromMaster").parse::<f64>().unwrap(),
        -250.0
    );
    assert_eq!(
        pmc_field(&out, "meanPathDelay").parse::<f64>().unwrap(),
        1000.0
    );
    // PARENT_DATA_SET
    assert_eq!(
        pmc_field(&out, "parentPortIdentity"),
        "a0a1a2.fffe.a3a4a5-1"
    );
    assert_eq!(pmc_field(&out, "grandmasterPriority1"), "100");
    assert_eq!(pmc_field(&out, "grandmasterPriority2"), "101");
    assert_eq!(pmc_field(&out, "grandmasterIdentity"), "a0a1a2.fffe.a3a4a5");
    // TIME_PROPERTIES_DATA_SET
    assert_eq!(pmc_field(&out, "currentUtcOffset"), "37");
    assert_eq!(pmc_field(&out, "ptpTimescale"), "1");
    assert_eq!(pmc_field(&out, "timeSource"), "0xa0");
    // PORT_DATA_SET
    assert_eq!(pmc_field(&out, "portIdentity"), "001b21.fffe.000001-1");
    assert_eq!(pmc_field(&out, "portState"), "SLAVE");
    assert_eq!(pmc_field(&out, "logSyncInterval"), "-3");
    assert_eq!(pmc_field(&out, "announceReceiptTimeout"), "3");
    assert_eq!(pmc_field(&out, "delayMechanism"), "1");
    // TIME_STATUS_NP
    assert_eq!(pmc_field(&out, "master_offset"), "-5");
    assert_eq!(pmc_field(&out, "ingress_time"), "1000000000");
    assert_eq!(pmc_field(&out, "gmPresent"), "true");
    assert_eq!(pmc_field(&out, "gmIdentity"), "a0a1a2.fffe.a3a4a5");
    // PORT_PROPERTIES_NP
    assert_eq!(pmc_field(&out, "interface"), "eth0");
}

#[test]
fn pmc_reads_not_supported() {
    let out = run_pmc("err", &["GET GRANDMASTER_SETTINGS_NP"]);
    // This pmc prints the TLV type of an error reply but not its error id.
    assert!(
        out.contains("001b21.fffe.000001-1 seq 0 RESPONSE MANAGEMENT_ERROR_STATUS"),
        "pmc output:\n{out}"
    );
}
