//! Golden bytes below are written out by hand from IEEE 1588 clause 15 and linuxptp's tlv.h
//! layouts, not produced by the encoders.

use proptest::prelude::*;

use super::*;

const US: [u8; 8] = [0x00, 0x1B, 0x21, 0xFF, 0xFE, 0x00, 0x00, 0x01];
const PMC: [u8; 8] = [0x52, 0x54, 0x00, 0xFF, 0xFE, 0x12, 0x34, 0x56];
const GM: [u8; 8] = [0xA0, 0xA1, 0xA2, 0xFF, 0xFE, 0xA3, 0xA4, 0xA5];

fn me() -> PortIdentity {
    PortIdentity { clock: US, port: 1 }
}

/// What `pmc -b 0 'GET <id>'` sends: version 2.1, domain 0, wildcard target, empty data.
fn get_request(id: u16, start_hops: u8, hops: u8) -> Vec<u8> {
    let mut b = vec![0x0D, 0x12, 0x00, 0x36, 0x00, 0x00, 0x00, 0x00];
    b.extend_from_slice(&[0; 12]); // correctionField, messageTypeSpecific
    b.extend_from_slice(&PMC);
    b.extend_from_slice(&[0x0B, 0x0C, 0x00, 0x07, 0x04, 0x7F]);
    b.extend_from_slice(&[0xFF; 10]);
    b.extend_from_slice(&[start_hops, hops, 0x00, 0x00, 0x00, 0x01, 0x00, 0x02]);
    b.extend_from_slice(&id.to_be_bytes());
    assert_eq!(b.len(), 54);
    b
}

/// The reply header ptpd must send for `get_request(_, 0, 0)` with messageLength `len`.
fn reply_head(len: u8, action: u8) -> Vec<u8> {
    let mut b = vec![0x0D, 0x12, 0x00, len, 0x00, 0x00, 0x00, 0x00];
    b.extend_from_slice(&[0; 12]);
    b.extend_from_slice(&US);
    b.extend_from_slice(&[0x00, 0x01, 0x00, 0x07, 0x04, 0x7F]);
    b.extend_from_slice(&PMC);
    b.extend_from_slice(&[0x0B, 0x0C, 0x00, 0x00, action, 0x00]);
    b
}

fn quality() -> ClockQuality {
    ClockQuality {
        class: 248,
        accuracy: 0xFE,
        offset_scaled_log_variance: 0xFFFF,
    }
}

#[test]
fn parses_a_pmc_get() {
    let r = parse(&get_request(id::CURRENT_DATA_SET, 0, 0)).unwrap();
    assert_eq!(r.action, Action::Get);
    assert_eq!(r.management_id, 0x2001);
    assert_eq!(r.sequence_id, 7);
    assert_eq!(
        r.source,
        PortIdentity {
            clock: PMC,
            port: 0x0B0C
        }
    );
    assert_eq!(
        r.target,
        PortIdentity {
            clock: [0xFF; 8],
            port: 0xFFFF
        }
    );
    assert!(r.data.is_empty());
    assert!(me().addressed_by(&r.target));
    assert!(!me().addressed_by(&PortIdentity {
        clock: GM,
        port: 0xFFFF
    }));
    assert!(!me().addressed_by(&PortIdentity { clock: US, port: 2 }));
}

#[test]
fn current_data_set_response_golden() {
    let req = parse(&get_request(id::CURRENT_DATA_SET, 0, 0)).unwrap();
    let ds = CurrentDataSet {
        steps_removed: 1,
        offset_from_master_ns: -250,
        mean_path_delay_ns: 1000,
    };
    let mut want = reply_head(72, 2);
    want.extend_from_slice(&[0x00, 0x01, 0x00, 0x14, 0x20, 0x01]);
    want.extend_from_slice(&[0x00, 0x01]);
    want.extend_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0x06, 0x00, 0x00]);
    want.extend_from_slice(&[0x00, 0x00, 0x00, 0x00, 0x03, 0xE8, 0x00, 0x00]);
    assert_eq!(build_response(&req, me(), &ds.encode()), want);
}

#[test]
fn error_status_golden() {
    let req = parse(&get_request(0x2005, 0, 0)).unwrap();
    let mut want = reply_head(60, 2);
    want.extend_from_slice(&[0x00, 0x02, 0x00, 0x08, 0x00, 0x06, 0x20, 0x05, 0, 0, 0, 0]);
    assert_eq!(build_error(&req, me(), ErrorId::NotSupported), want);
}

#[test]
fn reply_carries_the_remaining_boundary_hops() {
    let req = parse(&get_request(id::CURRENT_DATA_SET, 3, 1)).unwrap();
    let out = build_error(&req, me(), ErrorId::NotSupported);
    assert_eq!(&out[44..48], &[2, 2, 2, 0]);
}

#[test]
fn odd_data_is_padded_and_the_reply_parses_back() {
    let req = parse(&get_request(id::PORT_PROPERTIES_NP, 0, 0)).unwrap();
    let ds = PortPropertiesNp {
        port: me(),
        state: PortState::Master,
        timestamping: 1,
        interface: "eth0".into(),
    };
    let data = ds.encode();
    let mut want = US.to_vec();
    want.extend_from_slice(&[0x00, 0x01, 0x06, 0x01, 0x04, b'e', b't', b'h', b'0']);
    assert_eq!(data, want);
    let out = build_response(&req, me(), &data);
    assert_eq!(out.len(), 48 + 6 + 18);
    assert_eq!(&out[50..52], &[0x00, 20]);
    let back = parse(&out).unwrap();
    assert_eq!(back.action, Action::Response);
    assert_eq!(back.target, req.source);
    assert_eq!(back.source, me());
    assert_eq!(back.sequence_id, 7);
    assert_eq!(&back.data[..17], &data[..]);
    assert_eq!(back.data[17], 0);
}

#[test]
fn default_data_set_golden() {
    let ds = DefaultDataSet {
        two_step: true,
        slave_only: false,
        number_ports: 1,
        priority1: 128,
        quality: quality(),
        priority2: 127,
        clock_identity: US,
        domain: 24,
    };
    let mut want = vec![0x01, 0x00, 0x00, 0x01, 0x80, 0xF8, 0xFE, 0xFF, 0xFF, 0x7F];
    want.extend_from_slice(&US);
    want.extend_from_slice(&[24, 0]);
    assert_eq!(ds.encode(), want);
}

#[test]
fn parent_data_set_golden() {
    let ds = ParentDataSet {
        parent_port: PortIdentity { clock: GM, port: 1 },
        parent_stats: false,
        observed_offset_scaled_log_variance: 0xFFFF,
        observed_phase_change_rate: 0x7FFF_FFFF,
        gm_priority1: 128,
        gm_quality: quality(),
        gm_priority2: 128,
        gm_identity: GM,
    };
    let mut want = GM.to_vec();
    want.extend_from_slice(&[0x00, 0x01, 0x00, 0x00, 0xFF, 0xFF, 0x7F, 0xFF, 0xFF, 0xFF]);
    want.extend_from_slice(&[0x80, 0xF8, 0xFE, 0xFF, 0xFF, 0x80]);
    want.extend_from_slice(&GM);
    assert_eq!(ds.encode(), want);
}

#[test]
fn time_properties_golden() {
    let ds = TimePropertiesDataSet {
        current_utc_offset: 37,
        flags: 0x08,
        time_source: 0xA0,
    };
    assert_eq!(ds.encode(), [0x00, 0x25, 0x08, 0xA0]);
}

#[test]
fn port_data_set_golden() {
    let ds = PortDataSet {
        port: me(),
        state: PortState::Slave,
        log_min_delay_req_interval: 0,
        peer_mean_path_delay_ns: 0,
        log_announce_interval: 1,
        announce_receipt_timeout: 3,
        log_sync_interval: -3,
        delay_mechanism: 1,
        log_min_pdelay_req_interval: 0,
        version: 0x02,
    };
    let mut want = US.to_vec();
    want.extend_from_slice(&[0x00, 0x01, 0x09, 0x00, 0, 0, 0, 0, 0, 0, 0, 0]);
    want.extend_from_slice(&[0x01, 0x03, 0xFD, 0x01, 0x00, 0x02]);
    assert_eq!(ds.encode(), want);
}

#[test]
fn time_status_np_golden() {
    let ds = TimeStatusNp {
        master_offset_ns: -5,
        ingress_time_ns: 1_000_000_000,
        gm_present: true,
        gm_identity: GM,
    };
    let mut want = vec![0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 0xFB];
    want.extend_from_slice(&[0x00, 0x00, 0x00, 0x00, 0x3B, 0x9A, 0xCA, 0x00]);
    want.extend_from_slice(&[0; 22]);
    want.extend_from_slice(&[0x00, 0x00, 0x00, 0x01]);
    want.extend_from_slice(&GM);
    assert_eq!(ds.encode(), want);
}

#[test]
fn typed_errors() {
    let good = get_request(id::DEFAULT_DATA_SET, 0, 0);
    let mut b = good.clone();
    b[0] = 0x0B;
    assert_eq!(parse(&b), Err(MgmtError::NotManagement(0x0B)));
    let mut b = good.clone();
    b[1] = 0x11;
    assert_eq!(parse(&b), Err(MgmtError::Version(1)));
    let mut b = good.clone();
    b[46] = 5;
    assert_eq!(parse(&b), Err(MgmtError::Action(5)));
    let mut b = good.clone();
    b[49] = 0x02;
    assert_eq!(parse(&b), Err(MgmtError::TlvType(2)));
    let mut b = good.clone();
    b[51] = 1;
    assert_eq!(parse(&b), Err(MgmtError::TlvLength(1)));
    let mut b = good.clone();
    b[51] = 4; // TLV claims 2 data bytes past messageLength, into the transport's padding
    b.extend_from_slice(&[0; 8]);
    assert_eq!(parse(&b), Err(MgmtError::Truncated { need: 56, got: 54 }));
    // Transport padding after messageLength is ignored.
    let mut b = good;
    b.extend_from_slice(&[0xEE; 10]);
    assert!(parse(&b).unwrap().data.is_empty());
}

proptest! {
    #[test]
    fn arbitrary_bytes_never_panic(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse(&b);
    }

    #[test]
    fn every_truncation_is_an_error(cut in 0usize..54) {
        let b = get_request(id::TIME_STATUS_NP, 0, 0);
        prop_assert!(parse(&b[..cut]).is_err());
    }

    #[test]
    fn mutated_requests_never_panic(at in 0usize..54, v in any::<u8>()) {
        let mut b = get_request(id::TIME_STATUS_NP, 0, 0);
        b[at] = v;
        if let Ok(r) = parse(&b) {
            // Whatever parses can be answered, and the answer parses.
            let out = build_response(&r, me(), &r.data);
            prop_assert!(parse(&out).is_ok());
        }
    }
}

#[test]
fn encodes_a_request_as_pmc_sends_it() {
    let golden = get_request(id::PORT_DATA_SET, 1, 1);
    let r = parse(&golden).unwrap();
    assert_eq!(r.encode(), golden);
    // An odd dataField is padded to an even TLV length.
    let set = MgmtRequest {
        action: Action::Set,
        data: vec![7],
        ..r
    };
    let b = set.encode();
    assert_eq!(&b[2..4], &56u16.to_be_bytes());
    assert_eq!(&b[50..52], &4u16.to_be_bytes());
    assert_eq!(b[46], 1);
    assert_eq!(parse(&b).unwrap().data, vec![7, 0]);
}
