//! Writes the seed corpora under `corpus/<target>/`: valid encodings of every message kind,
//! frames of each transport, configs from ptpd's tests. Run from `fuzz/`:
//! `cargo run --bin gen_corpus` (files are named by index; existing ones are overwritten).

use std::net::Ipv4Addr;
use std::path::Path;

use ptp_ipc::*;
use ptpd::ptp::config::NetworkTransport;
use ptpd::ptp::mgmt::{self, Action, MgmtRequest, PortIdentity};
use ptpd::ptp::net::FrameBuilder;

fn write(target: &str, seeds: &[Vec<u8>]) {
    let dir = Path::new("corpus").join(target);
    std::fs::create_dir_all(&dir).expect("corpus dir");
    for (i, s) in seeds.iter().enumerate() {
        std::fs::write(dir.join(format!("seed-{i:03}")), s).expect("write seed");
    }
    println!("{target}: {} seeds", seeds.len());
}

fn tagged<M: Wire>(tag: u8, m: &M) -> Vec<u8> {
    let mut v = vec![tag];
    m.encode(&mut v);
    v
}

fn requests() -> Vec<DriverRequest> {
    use DriverRequest::*;
    vec![
        Hello,
        SendPtp {
            cookie: 7,
            want_ts: true,
            frame: ptp_payload(0, 44),
        },
        GetTime,
        GetTimeX { samples: 3 },
        SetTime {
            ns: 1_700_000_000_000_000_000,
        },
        AdjTime { delta_ns: -1500 },
        AdjFine { scaled_ppm: 65536 },
        SetTstampConfig {
            tx_on: true,
            rx_filter: RxFilter::PtpV2Event,
        },
        Caps,
        Stats,
        GetFreq,
    ]
}

fn caps() -> Caps {
    Caps {
        part: "i225".into(),
        vendor_id: 0x8086,
        device_id: 0x15f3,
        mac: [2, 0, 0, 0, 0, 1],
        max_adj_ppb: 62_499_999,
        tx_ts_sets: 4,
        rx_filters: 0x1f,
        n_ext_ts: 2,
        n_per_out: 2,
        cross_timestamp: false,
        clock_page: "/dev/shm/ptp-a".into(),
    }
}

fn driver_to_ptpd() -> Vec<DriverToPtpd> {
    let s = TimeXSample {
        sys_before_ns: 1,
        phc_ns: 2,
        sys_after_ns: 3,
    };
    let replies = vec![
        DriverReply::Done,
        DriverReply::Time { ns: 42 },
        DriverReply::TimeX {
            samples: vec![s, s],
        },
        DriverReply::TstampConfig {
            tx_on: false,
            rx_filter: RxFilter::All,
        },
        DriverReply::Caps(caps()),
        DriverReply::Stats(Stats {
            tx_requested: 9,
            rx_frames: 4,
            ..Stats::default()
        }),
        DriverReply::Error(DriverError::Other("gone".into())),
        DriverReply::Error(DriverError::Busy),
        DriverReply::Freq {
            scaled_ppm: -262_144,
        },
    ];
    let mut v: Vec<DriverToPtpd> = replies
        .into_iter()
        .map(|reply| DriverToPtpd::Reply { seq: 5, reply })
        .collect();
    v.extend(driver_events().into_iter().map(DriverToPtpd::Event));
    v
}

fn driver_events() -> Vec<DriverEvent> {
    vec![
        DriverEvent::TxTimestamp {
            cookie: 7,
            ns: 1 << 50,
        },
        DriverEvent::TxTimestampLost {
            cookie: 8,
            reason: LostReason::Timeout,
        },
        DriverEvent::PtpFrame {
            rx_ns: Some(99),
            frame: frames().swap_remove(0),
        },
        DriverEvent::PtpFrame {
            rx_ns: None,
            frame: frames().swap_remove(6),
        },
        DriverEvent::Link {
            up: true,
            speed_mbps: 1000,
        },
        DriverEvent::Restarted { generation: 2 },
        DriverEvent::Closed {
            reason: CloseReason::Replaced,
        },
    ]
}

fn clock_requests() -> Vec<ClockRequest> {
    use ClockRequest::*;
    vec![
        List,
        Get { clock: 0 },
        GetTimeX {
            clock: 0,
            samples: 5,
        },
        Set {
            clock: 1,
            ns: 1 << 40,
        },
        Adj {
            clock: 0,
            delta_ns: -7,
        },
        Freq {
            clock: 0,
            scaled_ppm: -3_000_000,
        },
        Caps { clock: 1 },
        Status { clock: 0 },
        Stats { clock: 2 },
        SetTstamp {
            clock: 0,
            tx_on: false,
            rx_filter: ptp_ipc::RxFilter::All,
        },
    ]
}

fn clock_replies() -> Vec<ClockReply> {
    vec![
        ClockReply::Count { clocks: 2 },
        ClockReply::Time { ns: 3 },
        ClockReply::Done,
        ClockReply::Error(ClockError::Busy),
        ClockReply::Caps(caps()),
        ClockReply::Status(ClockStatus {
            driver_up: true,
            port_state: PortState::Slave,
            ..ClockStatus::default()
        }),
        ClockReply::TimeX {
            samples: vec![TimeXSample::default(); 3],
        },
        ClockReply::Stats(Stats::default()),
        ClockReply::Tstamp {
            tx_on: true,
            rx_filter: ptp_ipc::RxFilter::PtpV2L2Event,
        },
    ]
}

/// A PTP header of `message_type` (version 2), `len` bytes long.
fn ptp_payload(message_type: u8, len: u16) -> Vec<u8> {
    let mut p = vec![0u8; usize::from(len)];
    p[0] = message_type;
    p[1] = 2;
    p[2..4].copy_from_slice(&len.to_be_bytes());
    p[30..32].copy_from_slice(&77u16.to_be_bytes());
    p
}

fn frames() -> Vec<Vec<u8>> {
    let mut out = vec![];
    for t in [NetworkTransport::L2, NetworkTransport::UdpV4] {
        let mut b = FrameBuilder::new(t, [2, 0, 0, 0, 0, 1], Ipv4Addr::new(192, 0, 2, 1));
        for (mt, len) in [(0u8, 44u16), (1, 44), (8, 44), (9, 54), (0xB, 64), (2, 54)] {
            out.push(
                b.build(&ptp_payload(mt, len), mt < 4, mt == 2)
                    .expect("frame"),
            );
        }
    }
    // VLAN-tagged L2 Sync.
    let mut v = out[0][..12].to_vec();
    v.extend_from_slice(&[0x81, 0x00, 0x00, 0x05]);
    v.extend_from_slice(&out[0][12..]);
    out.push(v);
    out
}

fn rx_buffers() -> Vec<Vec<u8>> {
    let tsip = intel_regs::e1000::rxd::STAT_TSIP;
    let mut out = vec![];
    for (status, hdr) in [(tsip | 3, true), (3, false), (tsip, false)] {
        for f in frames().into_iter().take(3) {
            let mut v = status.to_le_bytes().to_vec();
            v.push(2); // PtpV2Event
            v.extend_from_slice(&100u64.to_le_bytes());
            if hdr {
                v.extend_from_slice(&[0; 8]);
                v.extend_from_slice(&((5u64 << 32) | 123).to_le_bytes());
            }
            v.extend_from_slice(&f);
            out.push(v);
        }
    }
    out
}

fn configs() -> Vec<Vec<u8>> {
    let base = "socket = \"/x\"\n[[clock]]\nname = \"a\"\nchannel = \"/a\"\n";
    let full = "socket = \"/x\"\nprivileged_uids = [7]\nrequest_timeout_ms = 500\n\
        client_requests_per_s = 2000\n\
        management_socket = \"/m\"\nmanagement_settable = [\"priority1\"]\n\
        management_network_set = true\n\
        [ptp]\ndomainNumber = 3\npriority1 = 10\npriority2 = 20\nclientOnly = false\n\
        clockIdentity = \"00005e.fffe.005301\"\nlogSyncInterval = -3\n\
        logAnnounceInterval = 0\nlogMinDelayReqInterval = -2\nlogMinPdelayReqInterval = -1\n\
        announceReceiptTimeout = 4\ndelay_mechanism = \"P2P\"\nnetwork_transport = \"UDPv4\"\n\
        summary_interval = 2\ntx_timestamp_timeout = 20\nmax_frequency = 100000\n\
        step_threshold = 0.00002\nutc_offset = 37\ncurrentUtcOffsetValid = true\n\
        [[clock]]\nname = \"a\"\nchannel = \"/a\"\n\
        [clock.ptp]\nnetwork_transport = \"L2\"\nsource_ip = \"192.0.2.1\"\nmasterOnly = true\n\
        [[clock]]\nname = \"b\"\nchannel = \"/b\"\n\
        [[clock]]\nname = \"c\"\nchannel = \"/c\"\n[clock.ptp]\nenabled = false\n";
    vec![
        base.into(),
        format!("[ptp]\n{base}").into(),
        format!("[ptp]\nenabled = false\n{base}").into(),
        full.into(),
    ]
}

fn mgmt_requests() -> Vec<Vec<u8>> {
    let ids = [
        mgmt::id::DEFAULT_DATA_SET,
        mgmt::id::CURRENT_DATA_SET,
        mgmt::id::PARENT_DATA_SET,
        mgmt::id::TIME_PROPERTIES_DATA_SET,
        mgmt::id::PORT_DATA_SET,
        mgmt::id::PRIORITY1,
        mgmt::id::TIME_STATUS_NP,
        mgmt::id::PORT_PROPERTIES_NP,
    ];
    let mut out: Vec<Vec<u8>> = ids
        .iter()
        .map(|&management_id| request(Action::Get, management_id, vec![]))
        .collect();
    out.push(request(Action::Set, mgmt::id::PRIORITY1, vec![12, 0]));
    out.push(request(Action::Command, 0x2007, vec![1, 2, 3]));
    out
}

fn request(action: Action, management_id: u16, data: Vec<u8>) -> Vec<u8> {
    MgmtRequest {
        sdo_and_version: [0x0D, 0x02],
        domain: 0,
        minor_sdo: 0,
        unicast: true,
        source: PortIdentity {
            clock: [9; 8],
            port: 31000,
        },
        sequence_id: 4,
        target: PortIdentity {
            clock: [0xFF; 8],
            port: 0xFFFF,
        },
        starting_boundary_hops: 1,
        boundary_hops: 1,
        action,
        management_id,
        data,
    }
    .encode()
}

fn main() {
    let mut ipc = vec![];
    for r in requests() {
        ipc.push(tagged(0, &PtpdToDriver { seq: 3, request: r }));
    }
    ipc.extend(driver_to_ptpd().iter().map(|m| tagged(1, m)));
    ipc.extend(clock_requests().iter().map(|m| tagged(2, m)));
    ipc.extend(clock_replies().iter().map(|m| tagged(3, m)));
    write("ipc_wire", &ipc);
    let reqs: Vec<Vec<u8>> = clock_requests()
        .iter()
        .enumerate()
        .map(|(i, m)| tagged(i as u8, m))
        .collect();
    write("clock_request", &reqs);
    write("ptp_frame", &frames());
    write("rx_ts_header", &rx_buffers());
    write("ptpd_config", &configs());
    write("mgmt_tlv", &mgmt_requests());
}
