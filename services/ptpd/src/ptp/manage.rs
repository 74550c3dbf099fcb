//! Management answers: a read-only snapshot of the engine's data sets (published by the
//! engine thread, read by whatever transport carries management requests), the rules for
//! answering a decoded request from it, and the decision on a SET ([`decide_set`]), which the
//! engine carries out. COMMAND is refused with NOT_SUPPORTED.

use super::config::MgmtPolicy;
use super::mgmt::{
    self, Action, CurrentDataSet, DefaultDataSet, ErrorId, MgmtRequest, ParentDataSet, PortDataSet,
    PortIdentity, PortPropertiesNp, TimePropertiesDataSet, TimeStatusNp, id,
};

/// One port's data sets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortEntry {
    pub ds: PortDataSet,
    pub properties: PortPropertiesNp,
}

/// The engine's state as management data sets, taken at one instant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MgmtSnapshot {
    pub default: DefaultDataSet,
    pub current: CurrentDataSet,
    pub parent: ParentDataSet,
    pub time_properties: TimePropertiesDataSet,
    pub time_status: TimeStatusNp,
    pub ports: Vec<PortEntry>,
}

/// What to do with a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Replies to send back to the requester (one per addressed port for port data sets).
    Reply(Vec<Vec<u8>>),
    /// Not for us (other domain, other clock or port) or not a request: silently ignored.
    Ignore,
}

/// A change a SET asks for, once allowed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetOp {
    Priority1(u8),
    Priority2(u8),
}

impl SetOp {
    /// The dataField of the RESPONSE (the value now in force, and the reserved octet).
    pub fn data(self) -> [u8; 2] {
        match self {
            Self::Priority1(v) | Self::Priority2(v) => [v, 0],
        }
    }
}

/// Decides a SET addressed to this clock: the change to make, or the error to answer with.
/// `privileged`: the transport vouches for the requester (the local socket's peer is root or
/// in `privileged_uids`; network SETs only with `management_network_set`). Ids ptpd cannot
/// set at all, and any SET from an unprivileged requester, get NOT_SUPPORTED; a settable id
/// the configuration does not list gets NOT_SETABLE.
pub fn decide_set(
    req: &MgmtRequest,
    privileged: bool,
    policy: &MgmtPolicy,
) -> Result<SetOp, ErrorId> {
    let allowed = match req.management_id {
        id::PRIORITY1 => policy.priority1,
        id::PRIORITY2 => policy.priority2,
        _ => return Err(ErrorId::NotSupported),
    };
    if !privileged {
        return Err(ErrorId::NotSupported);
    }
    if !allowed {
        return Err(ErrorId::NotSetable);
    }
    // priority1/priority2 and a reserved octet (IEEE 1588 15.5.3.4.4); pmc sends both.
    let [v, _] = req.data[..] else {
        return Err(ErrorId::WrongLength);
    };
    Ok(match req.management_id {
        id::PRIORITY1 => SetOp::Priority1(v),
        _ => SetOp::Priority2(v),
    })
}

impl MgmtSnapshot {
    /// The identity clock-level replies come from: port 0, as ptp4l answers them.
    pub fn clock_port(&self) -> PortIdentity {
        PortIdentity {
            clock: self.default.clock_identity,
            port: 0,
        }
    }

    /// Whether `req` is a request (GET, SET, COMMAND) in our domain addressed to this clock.
    pub fn for_us(&self, req: &MgmtRequest) -> bool {
        let clock = self.default.clock_identity;
        req.domain == self.default.domain
            && matches!(req.action, Action::Get | Action::Set | Action::Command)
            && (req.target.clock == [0xFF; 8] || req.target.clock == clock)
    }

    /// Answers `req` (already decoded) from this snapshot; a SET gets NOT_SUPPORTED here (the
    /// engine answers the SETs it allows itself, see [`decide_set`]).
    pub fn answer(&self, req: &MgmtRequest) -> Outcome {
        if !self.for_us(req) {
            return Outcome::Ignore;
        }
        let clock = self.clock_port();
        if req.action != Action::Get {
            return Outcome::Reply(vec![mgmt::build_error(req, clock, ErrorId::NotSupported)]);
        }
        let clock_data = match req.management_id {
            id::PRIORITY1 => Some(vec![self.default.priority1, 0]),
            id::PRIORITY2 => Some(vec![self.default.priority2, 0]),
            id::DEFAULT_DATA_SET => Some(self.default.encode()),
            id::CURRENT_DATA_SET => Some(self.current.encode()),
            id::PARENT_DATA_SET => Some(self.parent.encode()),
            id::TIME_PROPERTIES_DATA_SET => Some(self.time_properties.encode()),
            id::TIME_STATUS_NP => Some(self.time_status.encode()),
            _ => None,
        };
        if let Some(data) = clock_data {
            return Outcome::Reply(vec![mgmt::build_response(req, clock, &data)]);
        }
        let port_data = |e: &PortEntry| match req.management_id {
            id::PORT_DATA_SET => Some(e.ds.encode()),
            id::PORT_PROPERTIES_NP => Some(e.properties.encode()),
            _ => None,
        };
        let mut replies = Vec::new();
        for e in &self.ports {
            if !e.ds.port.addressed_by(&req.target) {
                continue;
            }
            match port_data(e) {
                Some(data) => replies.push(mgmt::build_response(req, e.ds.port, &data)),
                None => {
                    replies.push(mgmt::build_error(req, e.ds.port, ErrorId::NotSupported));
                }
            }
        }
        if replies.is_empty() && req.target.port == 0xFFFF {
            // An unknown id sent to every port of a clock without ports still gets an answer.
            replies.push(mgmt::build_error(req, clock, ErrorId::NotSupported));
        }
        Outcome::Reply(replies)
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use ptp_ipc::PortState;

    use super::*;
    use crate::ptp::mgmt::{ClockQuality, parse};

    const US: [u8; 8] = [0x00, 0x1B, 0x21, 0xFF, 0xFE, 0x00, 0x00, 0x01];

    fn port(n: u16) -> PortEntry {
        let pid = PortIdentity { clock: US, port: n };
        PortEntry {
            ds: PortDataSet {
                port: pid,
                state: PortState::Master,
                log_min_delay_req_interval: 0,
                peer_mean_path_delay_ns: 0,
                log_announce_interval: 1,
                announce_receipt_timeout: 3,
                log_sync_interval: 0,
                delay_mechanism: 1,
                log_min_pdelay_req_interval: 0,
                version: 0x12,
            },
            properties: PortPropertiesNp {
                port: pid,
                state: PortState::Master,
                timestamping: 1,
                interface: format!("eth{n}"),
            },
        }
    }

    pub(crate) fn snap() -> MgmtSnapshot {
        let q = ClockQuality {
            class: 248,
            accuracy: 0xFE,
            offset_scaled_log_variance: 0xFFFF,
        };
        MgmtSnapshot {
            default: DefaultDataSet {
                two_step: true,
                slave_only: false,
                number_ports: 2,
                priority1: 128,
                quality: q,
                priority2: 128,
                clock_identity: US,
                domain: 3,
            },
            current: CurrentDataSet {
                steps_removed: 0,
                offset_from_master_ns: 0,
                mean_path_delay_ns: 0,
            },
            parent: ParentDataSet {
                parent_port: PortIdentity { clock: US, port: 0 },
                parent_stats: false,
                observed_offset_scaled_log_variance: 0xFFFF,
                observed_phase_change_rate: 0x7FFF_FFFF,
                gm_priority1: 128,
                gm_quality: q,
                gm_priority2: 128,
                gm_identity: US,
            },
            time_properties: TimePropertiesDataSet {
                current_utc_offset: 37,
                flags: 0x08,
                time_source: 0xA0,
            },
            time_status: TimeStatusNp {
                master_offset_ns: 0,
                ingress_time_ns: 0,
                gm_present: false,
                gm_identity: US,
            },
            ports: vec![port(1), port(2)],
        }
    }

    fn request(domain: u8, target: PortIdentity, action: u8, mid: u16) -> MgmtRequest {
        let mut b = vec![0x0D, 0x02, 0x00, 0x36, domain, 0, 0, 0];
        b.extend_from_slice(&[0; 12]);
        b.extend_from_slice(&[0x52, 0x54, 0x00, 0xFF, 0xFE, 0x12, 0x34, 0x56, 0x00, 0x09]);
        b.extend_from_slice(&[0x00, 0x05, 0x04, 0x7F]);
        b.extend_from_slice(&target.clock);
        b.extend_from_slice(&target.port.to_be_bytes());
        b.extend_from_slice(&[0, 0, action, 0, 0x00, 0x01, 0x00, 0x02]);
        b.extend_from_slice(&mid.to_be_bytes());
        parse(&b).unwrap()
    }

    const ALL: PortIdentity = PortIdentity {
        clock: [0xFF; 8],
        port: 0xFFFF,
    };

    fn replies(o: Outcome) -> Vec<MgmtRequest> {
        match o {
            Outcome::Reply(v) => v.iter().map(|b| parse(b).unwrap()).collect(),
            Outcome::Ignore => panic!("ignored"),
        }
    }

    #[test]
    fn clock_data_sets_answer_once_from_port_zero() {
        let r = replies(snap().answer(&request(3, ALL, 0, id::DEFAULT_DATA_SET)));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].source, PortIdentity { clock: US, port: 0 });
        assert_eq!(r[0].action, Action::Response);
        assert_eq!(r[0].data, snap().default.encode());
    }

    #[test]
    fn port_data_sets_answer_per_addressed_port() {
        let r = replies(snap().answer(&request(3, ALL, 0, id::PORT_PROPERTIES_NP)));
        assert_eq!(r.len(), 2);
        assert_eq!(r[1].source.port, 2);
        let one = PortIdentity { clock: US, port: 2 };
        let r = replies(snap().answer(&request(3, one, 0, id::PORT_DATA_SET)));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].data, port(2).ds.encode());
    }

    #[test]
    fn set_and_unknown_ids_get_not_supported() {
        for (action, mid) in [(1, id::DEFAULT_DATA_SET), (0, 0x2007), (3, 0x0005)] {
            let o = snap().answer(&request(3, ALL, action, mid));
            let Outcome::Reply(v) = o else { panic!() };
            assert!(!v.is_empty());
            for b in v {
                assert_eq!(&b[48..50], &[0x00, 0x02], "error status TLV");
                assert_eq!(&b[52..54], &[0x00, 0x06], "NOT_SUPPORTED");
            }
        }
    }

    #[test]
    fn other_domains_clocks_and_replies_are_ignored() {
        let s = snap();
        assert_eq!(
            s.answer(&request(4, ALL, 0, id::DEFAULT_DATA_SET)),
            Outcome::Ignore
        );
        let other = PortIdentity {
            clock: [1; 8],
            port: 0xFFFF,
        };
        assert_eq!(
            s.answer(&request(3, other, 0, id::DEFAULT_DATA_SET)),
            Outcome::Ignore
        );
        assert_eq!(
            s.answer(&request(3, ALL, 2, id::DEFAULT_DATA_SET)),
            Outcome::Ignore
        );
    }

    #[test]
    fn priorities_are_read_from_the_default_data_set() {
        let mut sn = snap();
        sn.default.priority2 = 77;
        let r = replies(sn.answer(&request(3, ALL, 0, id::PRIORITY2)));
        assert_eq!(r.len(), 1);
        assert_eq!(r[0].data, vec![77, 0]);
        let r = replies(sn.answer(&request(3, ALL, 0, id::PRIORITY1)));
        assert_eq!(r[0].data, vec![128, 0]);
    }

    #[test]
    fn set_decisions() {
        let both = MgmtPolicy {
            priority1: true,
            priority2: true,
            network_set: false,
        };
        let mut set1 = request(3, ALL, 1, id::PRIORITY1);
        set1.data = vec![9, 0];
        let mut set2 = set1.clone();
        set2.management_id = id::PRIORITY2;
        assert_eq!(decide_set(&set1, true, &both), Ok(SetOp::Priority1(9)));
        assert_eq!(decide_set(&set2, true, &both), Ok(SetOp::Priority2(9)));
        // Unprivileged: refused whatever the configuration allows.
        assert_eq!(decide_set(&set1, false, &both), Err(ErrorId::NotSupported));
        // Privileged, but the configuration does not list it.
        let only2 = MgmtPolicy {
            priority1: false,
            ..both
        };
        assert_eq!(decide_set(&set1, true, &only2), Err(ErrorId::NotSetable));
        assert_eq!(decide_set(&set2, true, &only2), Ok(SetOp::Priority2(9)));
        assert_eq!(
            decide_set(&set1, true, &MgmtPolicy::default()),
            Err(ErrorId::NotSetable)
        );
        // Not a settable id at all.
        let mut dds = set1.clone();
        dds.management_id = id::DEFAULT_DATA_SET;
        assert_eq!(decide_set(&dds, true, &both), Err(ErrorId::NotSupported));
        // A dataField of the wrong size.
        for data in [vec![], vec![9], vec![9, 0, 0, 0]] {
            let bad = MgmtRequest {
                data,
                ..set1.clone()
            };
            assert_eq!(decide_set(&bad, true, &both), Err(ErrorId::WrongLength));
        }
    }
}
