//! Writes the seed corpora under `corpus/<target>/`: valid encodings of every message kind,
//! frames of each transport, configs from ptpd's tests. Run from `fuzz/`:
//! `cargo run --bin gen_corpus` (files are named by index; existing ones are overwritten).

use std::net::Ipv4Addr;
use std::path::Path;

use ptp_emu::proxy::proto::{self, RamRegion, cmd};
use ptp_emu::wire;
use ptp_ipc::*;
use ptp_pci::pcid_proto;
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
    let tsip = intel_regs::e1000::RxStatus::TSIP.bits();
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

/// One proxy message as the stream carries it: descriptor count, header, payload.
fn proxy(nfds: u8, c: i32, payload: &[u8]) -> Vec<u8> {
    let mut v = vec![nfds];
    v.extend_from_slice(&proto::encode_header(c, payload.len()));
    v.extend_from_slice(payload);
    v
}

/// What QEMU sends a device host, one kind per seed, and a boot-like session: guest RAM, the
/// INTx eventfds, the IDs read, BAR0 assigned and enabled, register accesses, a reset.
fn proxy_streams() -> Vec<Vec<u8>> {
    let ram = [
        RamRegion {
            gpa: 0,
            size: 0xA_0000,
            offset: 0,
        },
        RamRegion {
            gpa: 0x10_0000,
            size: 0x7F0_0000,
            offset: 0x10_0000,
        },
    ];
    let bar0 = 0xFEB0_0000u64;
    let msgs = [
        proxy(2, cmd::SYNC_SYSMEM, &proto::encode_sysmem(&ram)),
        proxy(2, cmd::SET_IRQFD, &[]),
        proxy(0, cmd::PCI_CFGREAD, &proto::encode_cfg(0, 0, 4)),
        proxy(
            0,
            cmd::PCI_CFGWRITE,
            &proto::encode_cfg(0x10, bar0 as u32, 4),
        ),
        proxy(0, cmd::PCI_CFGWRITE, &proto::encode_cfg(0x04, 0x0006, 2)),
        proxy(0, cmd::PCI_CFGREAD, &proto::encode_cfg(0x3d, 0, 1)),
        proxy(
            0,
            cmd::BAR_WRITE,
            &proto::encode_bar(bar0 + 0xB604, 0x8000_0000, 4, true),
        ),
        proxy(0, cmd::BAR_READ, &proto::encode_bar(bar0 + 0x8, 0, 4, true)),
        proxy(
            0,
            cmd::BAR_READ,
            &proto::encode_bar(bar0 + 0xB65C, 0, 8, true),
        ),
        proxy(0, cmd::DEVICE_RESET, &[]),
    ];
    let mut out: Vec<Vec<u8>> = msgs.to_vec();
    out.push(msgs.concat());
    out
}

/// The function igcd is handed on Redox: an i225 with a 32-bit, a port and a 64-bit BAR and a
/// legacy interrupt line.
fn pcid_function() -> pcid_proto::FunctionInfo {
    use pcid_proto::*;
    let mut bars = [PciBar::None; 6];
    bars[0] = PciBar::Memory32 {
        addr: 0xFC20_0000,
        size: 0x10_0000,
    };
    bars[2] = PciBar::Port(0xE000);
    bars[3] = PciBar::Memory64 {
        addr: 0x40_0000_0000,
        size: 0x4000,
    };
    FunctionInfo {
        addr: PciAddress {
            segment: 0,
            bus: 3,
            device: 0,
            function: 0,
        },
        bars,
        // An option ROM, so the corpus carries the `rom` field pcid 9dd6901d sends.
        rom: Some(pcid_proto::PciRom {
            addr: 0xFEB0_0000,
            size: 0x4_0000,
            enabled: false,
        }),
        legacy_interrupt_line: Some(LegacyInterruptLine {
            irq: 11,
            phandled: Some((1, [2, 3, 4], 3)),
        }),
        full_device_id: FullDeviceId {
            vendor_id: 0x8086,
            device_id: 0x15F3,
            class: 2,
            subclass: 0,
            interface: 0,
            revision: 3,
        },
    }
}

/// One pcid response of each kind; keep the order: `pcid_messages` replays [1], [2] and [8] as
/// igcd's start.
fn pcid_responses() -> Vec<pcid_proto::Response> {
    use pcid_proto::*;
    let msix = PcidMsixInfo {
        table_bar: 3,
        table_offset: 0,
        table_size: 5,
        pba_bar: 3,
        pba_offset: 0x2000,
    };
    vec![
        Response::EnabledDevice,
        Response::Config(pcid_function()),
        Response::AllFeatures(vec![Feature::Msi, Feature::MsiX]),
        Response::VendorCapabilities(vec![vec![9, 0, 1], vec![]]),
        Response::FeatureEnabled(Feature::MsiX),
        Response::FeatureStatus(Feature::Msi, false),
        Response::Error(ServerError::NonexistentFeature(Feature::Msi)),
        Response::Error(ServerError::InvalidBitPattern),
        Response::FeatureInfo(Feature::MsiX, FeatureInfo::MsiX(msix)),
        Response::FeatureInfo(
            Feature::Msi,
            FeatureInfo::Msi(MsiInfo {
                log2_multiple_message_capable: 2,
                is_64bit: true,
                has_per_vector_masking: false,
            }),
        ),
        Response::SetFeatureInfo(Feature::Msi),
        Response::ReadConfig(0x15F3_8086),
        Response::WriteConfig,
    ]
}

/// One pcid request of each kind a driver sends.
fn pcid_requests() -> Vec<pcid_proto::Request> {
    use pcid_proto::*;
    vec![
        Request::EnableDevice,
        Request::RequestConfig,
        Request::RequestFeatures,
        Request::RequestVendorCapabilities,
        Request::EnableFeature(Feature::MsiX),
        Request::FeatureInfo(Feature::MsiX),
        Request::SetFeatureInfo(SetFeatureInfo::Msi {
            multi_message_enable: Some(0),
            message_address_and_data: Some(MsiAddrAndData {
                addr: 0xFEE0_0000,
                data: 0x41,
            }),
            mask_bits: None,
        }),
        Request::SetFeatureInfo(SetFeatureInfo::MsiX {
            function_mask: Some(false),
        }),
        Request::ReadConfig(0x10),
        Request::WriteConfig(0x04, 0x0406),
    ]
}

/// pcid's responses of an i225 session (tag 0, framed) and igcd's requests (tag 1).
fn pcid_messages() -> Vec<Vec<u8>> {
    let responses = pcid_responses();
    let mut out: Vec<Vec<u8>> = responses
        .iter()
        .map(|r| [&[0][..], &r.encode_frame()].concat())
        .collect();
    // igcd's start on Redox: config, then the MSI-X table located against its BARs.
    let session = [&responses[1], &responses[2], &responses[8]];
    let mut s = vec![0];
    session.iter().for_each(|r| s.extend(r.encode_frame()));
    out.push(s);
    let requests = pcid_requests();
    out.extend(requests.iter().map(|r| [&[1][..], &r.encode()].concat()));
    out
}

/// A region as `layout::init` leaves it (geometry `slot_size` × `slots`, generation 1) with
/// `msgs` published in ring 0 (A → B) as `try_push` writes them: a u32 LE length, the bytes.
/// Offsets from ipc/src/ring/layout.rs: header on line 0, ring 0's head on line 4.
fn ring_region(slot_size: u32, slots: u32, msgs: &[&[u8]]) -> Vec<u8> {
    let g = ring::Geometry::new(slot_size, slots).expect("seed geometry");
    let mut r = vec![0u8; g.region_len()];
    r[0..8].copy_from_slice(&ring::MAGIC.to_le_bytes());
    r[8..12].copy_from_slice(&ring::VERSION.to_le_bytes());
    r[12..16].copy_from_slice(&slot_size.to_le_bytes());
    r[16..20].copy_from_slice(&slots.to_le_bytes());
    r[24..32].copy_from_slice(&1u64.to_le_bytes());
    for (i, m) in msgs.iter().enumerate() {
        let at = ring::CONTROL_LEN + i * slot_size as usize;
        r[at..at + 4].copy_from_slice(&(m.len() as u32).to_le_bytes());
        r[at + 4..at + 4 + m.len()].copy_from_slice(m);
    }
    r[256..264].copy_from_slice(&(msgs.len() as u64).to_le_bytes());
    r
}

/// Tag 0: Linux setup messages; 1: Redox mapped offers; 2: regions holding driver messages.
fn ring_seeds() -> Vec<Vec<u8>> {
    let g = ring::RingConfig::default().geometry;
    let mut out = vec![
        [&[0][..], &ring::setup_message(g.region_len())].concat(),
        [&[0][..], &ring::setup_message(1024)].concat(),
        [&[1][..], &ring::mapped_offer(g.region_len())].concat(),
        [&[1][..], &ring::mapped_offer(4096)].concat(),
    ];
    let mut hello = Vec::new();
    PtpdToDriver {
        seq: 1,
        request: DriverRequest::Hello,
    }
    .encode(&mut hello);
    let mut stamp = Vec::new();
    DriverToPtpd::Event(driver_events().swap_remove(0)).encode(&mut stamp);
    out.push([&[2][..], &ring_region(64, 2, &[&hello, b"x"])].concat());
    out.push([&[2][..], &ring_region(64, 4, &[&stamp, &hello, &[]])].concat());
    out.push([&[2][..], &ring_region(128, 2, &[])].concat());
    out
}

/// A cable (delay 50 ns, jitter 10 ns, seed 7) and datagrams separated by FF FE FD: a HELLO,
/// then PTP frames as igcd's wire sends them.
fn wire_seeds() -> Vec<Vec<u8>> {
    let sep = [0xFF, 0xFE, 0xFD];
    let mut cable = 50u16.to_le_bytes().to_vec();
    cable.extend_from_slice(&10u16.to_le_bytes());
    cable.extend_from_slice(&7u32.to_le_bytes());
    let grams: Vec<Vec<u8>> =
        std::iter::once(wire::encode_hello())
            .chain(frames().iter().enumerate().map(|(i, f)| {
                wire::encode_datagram(f, 1_000_000 + 125_000 * i as u64).expect("frame")
            }))
            .collect();
    let mut out: Vec<Vec<u8>> = grams
        .iter()
        .take(4)
        .map(|g| [&cable[..], g].concat())
        .collect();
    out.push([cable.clone(), grams.join(&sep[..])].concat());
    out
}

/// Every command of the fault socket's table, one per seed, and a lab's session.
fn fault_seeds() -> Vec<Vec<u8>> {
    let cmds = [
        "drop-tx-stamps 3",
        "stick-txtt 1",
        "clear-txtt 1",
        "drop-ts-irqs 20",
        "link down",
        "link up",
        "stats",
    ];
    let mut out: Vec<Vec<u8>> = cmds.iter().map(|c| c.as_bytes().to_vec()).collect();
    out.push(cmds.join("\n").into_bytes());
    out
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
    write("proxy_proto", &proxy_streams());
    write("pcid_channel", &pcid_messages());
    write("ring_setup", &ring_seeds());
    write("wire_datagram", &wire_seeds());
    write("fault_command", &fault_seeds());
}
