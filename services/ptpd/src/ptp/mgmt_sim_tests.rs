//! Management in the deterministic simulation. Over the PTP ports (what `pmc -2` / `pmc -4`
//! send), frames in and frames out: a request reaches a running core as a received frame, and
//! the reply must leave on the same port as a general message that decodes to the data set the
//! core's own state says. And SETs: a privileged SET of priority1 changes the data sets and
//! the BMCA's outcome; an unprivileged or unconfigured one changes nothing.

use std::net::Ipv4Addr;

use ptp_ipc::DriverEvent;

use super::config::{DelayMechanism, MgmtPolicy, NetworkTransport};
use super::manage::Outcome;
use super::mgmt::{self, Action, MgmtRequest, PortIdentity, id, port_state_code};
use super::net::{self, FrameBuilder, msg};
use super::sim::{SimPhc, World, init_log, port};

const S: u64 = 1_000_000_000;
const PMC: PortIdentity = PortIdentity {
    clock: [0x52, 0x54, 0x00, 0xFF, 0xFE, 0x12, 0x34, 0x56],
    port: 0x0B0C,
};
const ALL: PortIdentity = PortIdentity {
    clock: [0xFF; 8],
    port: 0xFFFF,
};

fn get(domain: u8, target: PortIdentity, mid: u16, seq: u16) -> MgmtRequest {
    MgmtRequest {
        sdo_and_version: [0x0D, 0x12],
        domain,
        minor_sdo: 0,
        unicast: false,
        source: PMC,
        sequence_id: seq,
        target,
        starting_boundary_hops: 1,
        boundary_hops: 1,
        action: Action::Get,
        management_id: mid,
        data: Vec::new(),
    }
}

/// A master (node 0, priority1 1) and a slave (node 1) after `secs` of protocol.
fn world(transport: NetworkTransport, secs: u64) -> World {
    world_with(transport, secs, MgmtPolicy::default())
}

fn world_with(transport: NetworkTransport, secs: u64, management: MgmtPolicy) -> World {
    init_log();
    let p = port(transport, DelayMechanism::E2E);
    let phcs = [
        SimPhc::new(1_000.0 * S as f64, 0.0),
        SimPhc::new(1_000.0 * S as f64 + 1e6, 10.0),
    ];
    let mut w = World::with_management([p.clone(), p], [1, 128], phcs, management);
    w.run_until(secs * S, |_| {});
    w
}

/// [`ask_raw`], each reply decoded (RESPONSEs with a management TLV).
fn ask(
    w: &mut World,
    node: usize,
    transport: NetworkTransport,
    payload: &[u8],
) -> Vec<MgmtRequest> {
    ask_raw(w, node, transport, payload)
        .iter()
        .map(|p| mgmt::parse(p).unwrap())
        .collect()
}

/// Hands `payload`, framed as pmc on another host would, to `node`, and returns the
/// management messages it sent back, checking each is a general message on the primary
/// address from the node's own MAC.
fn ask_raw(
    w: &mut World,
    node: usize,
    transport: NetworkTransport,
    payload: &[u8],
) -> Vec<Vec<u8>> {
    let mut b = FrameBuilder::new(
        transport,
        [2, 0, 0, 0, 0, 0x99],
        Ipv4Addr::new(10, 0, 0, 99),
    );
    let frame = b.build(payload, false, false).unwrap();
    let before = w.nodes[node].drv.st().outbox.len();
    w.nodes[node]
        .core
        .on_event(0, DriverEvent::PtpFrame { rx_ns: None, frame }, w.t);
    let mac = w.nodes[node].drv.st().mac;
    let out: Vec<Vec<u8>> = w.nodes[node].drv.st().outbox[before..]
        .iter()
        .map(|(cookie, want_ts, f)| {
            assert!(
                *cookie == 0 && !*want_ts,
                "a management reply wants no TX stamp"
            );
            f.clone()
        })
        .collect();
    out.iter()
        .filter_map(|f| {
            let m = net::parse(f).expect("a reply decodes (UDP: general port 320)");
            (m.message_type == msg::MANAGEMENT).then(|| {
                assert_eq!(&f[6..12], &mac, "sent from the node's MAC");
                let dst: &[u8] = match transport {
                    NetworkTransport::L2 => &net::L2_PRIMARY,
                    NetworkTransport::UdpV4 => &f[30..34],
                };
                if transport == NetworkTransport::UdpV4 {
                    assert_eq!(dst, &net::IPV4_PRIMARY.octets());
                } else {
                    assert_eq!(&f[..6], dst);
                }
                m.payload.to_vec()
            })
        })
        .collect()
}

fn answers_gets_on_the_port(transport: NetworkTransport) {
    let mut w = world(transport, 20);
    let slave = 1;
    let own = w.nodes[slave].core.clock_identity().unwrap();
    let gm = w.nodes[0].core.clock_identity().unwrap();
    let r = ask(
        &mut w,
        slave,
        transport,
        &get(0, ALL, id::DEFAULT_DATA_SET, 41).encode(),
    );
    assert_eq!(r.len(), 1, "{r:?}");
    assert_eq!(r[0].action, Action::Response);
    assert_eq!(r[0].sequence_id, 41);
    assert_eq!(r[0].target, PMC, "the reply goes to the requester");
    assert_eq!(
        r[0].source,
        PortIdentity {
            clock: own,
            port: 0
        }
    );
    assert_eq!(r[0].management_id, id::DEFAULT_DATA_SET);
    let snap = w.nodes[slave].core.mgmt_snapshot().unwrap();
    assert_eq!(r[0].data, snap.default.encode());
    assert_eq!(r[0].data[4], 128, "priority1");
    assert_eq!(&r[0].data[10..18], &own, "clockIdentity");

    let r = ask(
        &mut w,
        slave,
        transport,
        &get(0, ALL, id::PARENT_DATA_SET, 42).encode(),
    );
    assert_eq!(r.len(), 1);
    assert_eq!(
        &r[0].data[24..32],
        &gm,
        "grandmasterIdentity is the master's"
    );

    let one = PortIdentity {
        clock: own,
        port: 1,
    };
    let r = ask(
        &mut w,
        slave,
        transport,
        &get(0, one, id::PORT_DATA_SET, 43).encode(),
    );
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].source, one);
    let state = w.nodes[slave].core.snapshot(0).port_state;
    assert_eq!(r[0].data[10], port_state_code(state));
    assert_eq!(r[0].data[10], port_state_code(ptp_ipc::PortState::Slave));

    // An unknown id: MANAGEMENT_ERROR_STATUS NOT_SUPPORTED.
    let r = ask_raw(&mut w, slave, transport, &get(0, ALL, 0x2007, 44).encode());
    assert_eq!(r.len(), 1);
    assert_eq!(&r[0][30..32], &44u16.to_be_bytes(), "sequenceId");
    assert_eq!(r[0][46] & 0x0F, Action::Response as u8);
    assert_eq!(&r[0][48..50], &[0x00, 0x02], "MANAGEMENT_ERROR_STATUS");
    assert_eq!(&r[0][52..54], &[0x00, 0x06], "NOT_SUPPORTED");
    let st = w.nodes[slave].core.stats().snapshot();
    assert_eq!(st.mgmt_answered, 4, "{st:?}");
    assert_eq!(st.mgmt_malformed, 0);
}

#[test]
fn l2_management_gets_are_answered_on_the_port() {
    answers_gets_on_the_port(NetworkTransport::L2);
}

#[test]
fn udp4_management_gets_are_answered_on_the_port() {
    answers_gets_on_the_port(NetworkTransport::UdpV4);
}

#[test]
fn malformed_foreign_and_misaddressed_management_is_not_answered() {
    let t = NetworkTransport::L2;
    let mut w = world(t, 5);
    let before = w.nodes[0].core.stats().snapshot();
    let good = get(0, ALL, id::DEFAULT_DATA_SET, 1).encode();
    let mut bad_tlv = good.clone();
    bad_tlv[49] = 9; // tlvType 9
    let mut short_tlv = good.clone();
    short_tlv[50..52].copy_from_slice(&40u16.to_be_bytes()); // TLV runs past the message
    for b in [bad_tlv, short_tlv] {
        assert!(ask(&mut w, 0, t, &b).is_empty());
    }
    let other_clock = PortIdentity {
        clock: [1; 8],
        port: 0xFFFF,
    };
    assert!(
        ask(
            &mut w,
            0,
            t,
            &get(0, other_clock, id::DEFAULT_DATA_SET, 2).encode()
        )
        .is_empty()
    );
    // Another domain is dropped before management sees it.
    assert!(ask(&mut w, 0, t, &get(3, ALL, id::DEFAULT_DATA_SET, 3).encode()).is_empty());
    // A reply from another node is not a request.
    let mut resp = get(0, ALL, id::DEFAULT_DATA_SET, 4);
    resp.action = Action::Response;
    assert!(ask(&mut w, 0, t, &resp.encode()).is_empty());
    let s = w.nodes[0].core.stats().snapshot();
    assert_eq!(s.mgmt_malformed - before.mgmt_malformed, 2, "{s:?}");
    assert_eq!(s.mgmt_ignored - before.mgmt_ignored, 2);
    assert_eq!(s.rx_foreign_domain - before.rx_foreign_domain, 1);
    assert_eq!(s.mgmt_answered, before.mgmt_answered);
    // And the node still answers a good one.
    assert_eq!(ask(&mut w, 0, t, &good).len(), 1);
}

fn set(mid: u16, value: u8, seq: u16) -> MgmtRequest {
    MgmtRequest {
        action: Action::Set,
        data: vec![value, 0],
        ..get(0, ALL, mid, seq)
    }
}

/// The one reply of an outcome, raw.
fn only_reply(o: Outcome) -> Vec<u8> {
    match o {
        Outcome::Reply(mut v) if v.len() == 1 => v.remove(0),
        other => panic!("expected one reply, got {other:?}"),
    }
}

/// managementErrorId of a MANAGEMENT_ERROR_STATUS reply, `None` for any other reply.
fn error_id(reply: &[u8]) -> Option<u16> {
    (reply[48..50] == [0x00, 0x02]).then(|| u16::from_be_bytes([reply[52], reply[53]]))
}

fn roles(w: &World) -> [ptp_ipc::PortState; 2] {
    [
        w.nodes[0].core.snapshot(0).port_state,
        w.nodes[1].core.snapshot(0).port_state,
    ]
}

const PRIOS: MgmtPolicy = MgmtPolicy {
    priority1: true,
    priority2: true,
    network_set: false,
};

#[test]
fn privileged_set_priority1_hands_the_grandmaster_role_over() {
    use ptp_ipc::PortState::{Master, Slave};
    let mut w = world_with(NetworkTransport::L2, 20, PRIOS);
    assert_eq!(roles(&w), [Master, Slave]);
    let id0 = w.nodes[0].core.clock_identity().unwrap();
    let id1 = w.nodes[1].core.clock_identity().unwrap();
    let t = w.t;
    // The slave (priority1 128) is set to 0, better than the master's 1.
    let reply = only_reply(w.nodes[1].core.manage(&set(id::PRIORITY1, 0, 5), true, t));
    let r = mgmt::parse(&reply).unwrap();
    assert_eq!(
        (r.action, r.sequence_id, r.target),
        (Action::Response, 5, PMC)
    );
    assert_eq!(
        (r.management_id, r.data.as_slice()),
        (id::PRIORITY1, &[0u8, 0][..])
    );
    let snap = w.nodes[1].core.mgmt_snapshot().unwrap();
    assert_eq!(
        snap.default.priority1, 0,
        "DEFAULT_DATA_SET shows the new value"
    );
    let got = w.nodes[1]
        .core
        .manage(&get(0, ALL, id::PRIORITY1, 6), false, t);
    assert_eq!(mgmt::parse(&only_reply(got)).unwrap().data, vec![0, 0]);
    // The BMCA now picks node 1: it becomes master and grandmaster, node 0 its slave.
    let deadline = w.t + 30 * S;
    w.run_until(deadline, |_| {});
    assert_eq!(roles(&w), [Slave, Master]);
    assert_eq!(w.nodes[0].core.snapshot(0).grandmaster, id1);
    assert_eq!(w.nodes[1].core.snapshot(0).grandmaster, id1);
    let p0 = w.nodes[0].core.mgmt_snapshot().unwrap().parent;
    assert_eq!((p0.gm_identity, p0.gm_priority1), (id1, 0));
    assert_ne!(id0, id1);
    // And a SET of priority2 on node 0 leaves the roles alone (priority1 decides first).
    let t = w.t;
    let reply = only_reply(w.nodes[0].core.manage(&set(id::PRIORITY2, 3, 7), true, t));
    assert_eq!(error_id(&reply), None);
    assert_eq!(
        w.nodes[0].core.mgmt_snapshot().unwrap().default.priority2,
        3
    );
    let deadline = w.t + 20 * S;
    w.run_until(deadline, |_| {});
    assert_eq!(roles(&w), [Slave, Master]);
}

#[test]
fn unprivileged_or_unconfigured_sets_change_nothing() {
    let mut w = world_with(
        NetworkTransport::L2,
        10,
        MgmtPolicy {
            priority2: false,
            ..PRIOS
        },
    );
    let before = w.nodes[1].core.mgmt_snapshot().unwrap();
    let t = w.t;
    let core = &mut w.nodes[1].core;
    // Unprivileged: NOT_SUPPORTED.
    let r = only_reply(core.manage(&set(id::PRIORITY1, 0, 1), false, t));
    assert_eq!(error_id(&r), Some(0x0006));
    // Privileged, but priority2 is not listed as settable: NOT_SETABLE.
    let r = only_reply(core.manage(&set(id::PRIORITY2, 0, 2), true, t));
    assert_eq!(error_id(&r), Some(0x0005));
    // Not settable at all: NOT_SUPPORTED.
    let r = only_reply(core.manage(&set(id::DEFAULT_DATA_SET, 0, 3), true, t));
    assert_eq!(error_id(&r), Some(0x0006));
    assert_eq!(core.mgmt_snapshot().unwrap().default, before.default);
    let deadline = w.t + 10 * S;
    w.run_until(deadline, |_| {});
    assert_eq!(
        roles(&w),
        [ptp_ipc::PortState::Master, ptp_ipc::PortState::Slave]
    );
}

#[test]
fn network_sets_need_the_configuration() {
    for network_set in [false, true] {
        let t = NetworkTransport::UdpV4;
        let policy = MgmtPolicy {
            network_set,
            ..PRIOS
        };
        let mut w = world_with(t, 10, policy);
        let r = ask_raw(&mut w, 1, t, &set(id::PRIORITY1, 0, 9).encode());
        assert_eq!(r.len(), 1);
        let p1 = w.nodes[1].core.mgmt_snapshot().unwrap().default.priority1;
        if network_set {
            assert_eq!(error_id(&r[0]), None);
            assert_eq!(mgmt::parse(&r[0]).unwrap().data, vec![0, 0]);
            assert_eq!(p1, 0);
        } else {
            assert_eq!(error_id(&r[0]), Some(0x0006), "refused from the network");
            assert_eq!(p1, 128);
        }
    }
}

#[test]
fn time_status_np_reports_the_last_sync_from_the_parent() {
    let w = world(NetworkTransport::L2, 20);
    let gm = w.nodes[0].core.clock_identity().unwrap();
    let master = w.nodes[0].core.mgmt_snapshot().unwrap().time_status;
    let slave = w.nodes[1].core.mgmt_snapshot().unwrap().time_status;
    assert_eq!((master.ingress_time_ns, master.gm_present), (0, false));
    assert_eq!(master.gm_identity, gm);
    assert_eq!((slave.gm_present, slave.gm_identity), (true, gm));
    // Syncs come every 2^-4 s (sim::port): the last one reached the slave's PHC less than
    // two intervals ago (one, plus the wire and driver latencies).
    let phc_now = w.nodes[1].drv.st().phc.at(w.t);
    let age_ns = phc_now - slave.ingress_time_ns as f64;
    assert!(
        (0.0..2.0 * 62.5e6).contains(&age_ns),
        "ingress_time {} is {age_ns} ns before the slave's PHC now",
        slave.ingress_time_ns
    );
}
