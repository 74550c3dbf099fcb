//! IEEE 1588-2019 management messages (clause 15): the request decoder and the RESPONSE /
//! MANAGEMENT_ERROR_STATUS encoders, plus the data sets ptpd answers with, laid out as
//! IEEE 1588 (and linuxptp, for its `_NP` ids) puts them on the wire. Pure byte work: the
//! engine snapshot that fills the data sets and the sockets live elsewhere.
//!
//! The decoder is total: any byte string gives a [`MgmtRequest`] or a [`MgmtError`].

use ptp_ipc::PortState;

/// Common header (34) + management header (14).
const HEADER_LEN: usize = 48;
/// tlvType + lengthField.
const TLV_HEAD: usize = 4;
const MSG_TYPE_MANAGEMENT: u8 = 0x0D;
const CONTROL_MANAGEMENT: u8 = 0x04;
/// logMessageInterval of a management message (IEEE 1588 Table 42).
const LOG_INTERVAL_NONE: u8 = 0x7F;
const TLV_MANAGEMENT: u16 = 0x0001;
const TLV_MANAGEMENT_ERROR_STATUS: u16 = 0x0002;
/// flagField octet 0, unicastFlag: echoed so a unicast request gets a unicast-flagged reply.
const FLAG_UNICAST: u8 = 0x04;

/// Management ids ptpd knows (IEEE 1588 Table 59; `_NP` ones are linuxptp's).
pub mod id {
    pub const DEFAULT_DATA_SET: u16 = 0x2000;
    pub const CURRENT_DATA_SET: u16 = 0x2001;
    pub const PARENT_DATA_SET: u16 = 0x2002;
    pub const TIME_PROPERTIES_DATA_SET: u16 = 0x2003;
    pub const PORT_DATA_SET: u16 = 0x2004;
    pub const PRIORITY1: u16 = 0x2005;
    pub const PRIORITY2: u16 = 0x2006;
    pub const TIME_STATUS_NP: u16 = 0xC000;
    pub const PORT_PROPERTIES_NP: u16 = 0xC004;
}

/// Why bytes are not a management request ptpd can act on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum MgmtError {
    #[error("message truncated: {got} bytes, need {need}")]
    Truncated { need: usize, got: usize },
    #[error("messageType {0:#x} is not Management")]
    NotManagement(u8),
    #[error("versionPTP {0} is not 2")]
    Version(u8),
    #[error("actionField {0} is not a management action")]
    Action(u8),
    #[error("TLV type {0:#06x} is not MANAGEMENT")]
    TlvType(u16),
    #[error("TLV lengthField {0} is shorter than a managementId")]
    TlvLength(u16),
}

/// actionField (IEEE 1588 Table 57).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Action {
    Get = 0,
    Set = 1,
    Response = 2,
    Command = 3,
    Acknowledge = 4,
}

impl TryFrom<u8> for Action {
    type Error = MgmtError;
    fn try_from(v: u8) -> Result<Self, MgmtError> {
        Ok(match v {
            0 => Self::Get,
            1 => Self::Set,
            2 => Self::Response,
            3 => Self::Command,
            4 => Self::Acknowledge,
            other => return Err(MgmtError::Action(other)),
        })
    }
}

/// managementErrorId (IEEE 1588 Table 109).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorId {
    ResponseTooBig = 0x0001,
    NoSuchId = 0x0002,
    WrongLength = 0x0003,
    WrongValue = 0x0004,
    NotSetable = 0x0005,
    NotSupported = 0x0006,
    GeneralError = 0xFFFE,
}

/// PortIdentity: clockIdentity + portNumber; portNumber 0xFFFF and clock all-ones address all.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PortIdentity {
    pub clock: [u8; 8],
    pub port: u16,
}

impl PortIdentity {
    fn read(b: &[u8]) -> Self {
        let mut clock = [0; 8];
        clock.copy_from_slice(&b[..8]);
        Self {
            clock,
            port: u16::from_be_bytes([b[8], b[9]]),
        }
    }

    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.clock);
        out.extend_from_slice(&self.port.to_be_bytes());
    }

    /// Whether a request's targetPortIdentity addresses this port (wildcards: IEEE 1588 15.3.1).
    pub fn addressed_by(&self, target: &PortIdentity) -> bool {
        (target.clock == [0xFF; 8] || target.clock == self.clock)
            && (target.port == 0xFFFF || target.port == self.port)
    }
}

/// A decoded management message.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MgmtRequest {
    /// Octet 0 (majorSdoId | messageType) and 1 (minorVersionPTP | versionPTP), echoed.
    pub sdo_and_version: [u8; 2],
    pub domain: u8,
    pub minor_sdo: u8,
    pub unicast: bool,
    pub source: PortIdentity,
    pub sequence_id: u16,
    pub target: PortIdentity,
    pub starting_boundary_hops: u8,
    pub boundary_hops: u8,
    pub action: Action,
    pub management_id: u16,
    /// The TLV's dataField (empty or zero-filled in a GET).
    pub data: Vec<u8>,
}

fn need(b: &[u8], n: usize) -> Result<(), MgmtError> {
    if b.len() < n {
        Err(MgmtError::Truncated {
            need: n,
            got: b.len(),
        })
    } else {
        Ok(())
    }
}

/// Decodes a management message; bytes after messageLength (transport padding) are ignored.
pub fn parse(b: &[u8]) -> Result<MgmtRequest, MgmtError> {
    need(b, 4)?;
    if b[0] & 0x0F != MSG_TYPE_MANAGEMENT {
        return Err(MgmtError::NotManagement(b[0] & 0x0F));
    }
    if b[1] & 0x0F != 2 {
        return Err(MgmtError::Version(b[1] & 0x0F));
    }
    let len = usize::from(u16::from_be_bytes([b[2], b[3]]));
    need(b, len)?;
    let b = &b[..len];
    need(b, HEADER_LEN + TLV_HEAD)?;
    let action = Action::try_from(b[46] & 0x0F)?;
    let tlv_type = u16::from_be_bytes([b[48], b[49]]);
    if tlv_type != TLV_MANAGEMENT {
        return Err(MgmtError::TlvType(tlv_type));
    }
    let tlv_len = u16::from_be_bytes([b[50], b[51]]);
    if tlv_len < 2 {
        return Err(MgmtError::TlvLength(tlv_len));
    }
    let end = HEADER_LEN + TLV_HEAD + usize::from(tlv_len);
    need(b, end)?;
    Ok(MgmtRequest {
        sdo_and_version: [b[0], b[1]],
        domain: b[4],
        minor_sdo: b[5],
        unicast: b[6] & FLAG_UNICAST != 0,
        source: PortIdentity::read(&b[20..30]),
        sequence_id: u16::from_be_bytes([b[30], b[31]]),
        target: PortIdentity::read(&b[34..44]),
        starting_boundary_hops: b[44],
        boundary_hops: b[45],
        action,
        management_id: u16::from_be_bytes([b[52], b[53]]),
        data: b[HEADER_LEN + TLV_HEAD + 2..end].to_vec(),
    })
}

impl MgmtRequest {
    /// The message as `pmc` would send it (the inverse of [`parse`]; an odd-length dataField
    /// is padded), for requesters and tests.
    pub fn encode(&self) -> Vec<u8> {
        let padded = self.data.len() + self.data.len() % 2;
        let total = HEADER_LEN + TLV_HEAD + 2 + padded;
        let mut out = Vec::with_capacity(total);
        out.push((self.sdo_and_version[0] & 0xF0) | MSG_TYPE_MANAGEMENT);
        out.push(self.sdo_and_version[1]);
        out.extend_from_slice(&u16::try_from(total).unwrap_or(u16::MAX).to_be_bytes());
        out.push(self.domain);
        out.push(self.minor_sdo);
        out.push(if self.unicast { FLAG_UNICAST } else { 0 });
        out.push(0);
        out.extend_from_slice(&[0; 12]); // correctionField, messageTypeSpecific
        self.source.write(&mut out);
        out.extend_from_slice(&self.sequence_id.to_be_bytes());
        out.push(CONTROL_MANAGEMENT);
        out.push(LOG_INTERVAL_NONE);
        self.target.write(&mut out);
        out.extend_from_slice(&[
            self.starting_boundary_hops,
            self.boundary_hops,
            self.action as u8,
            0,
        ]);
        out.extend_from_slice(&TLV_MANAGEMENT.to_be_bytes());
        out.extend_from_slice(&u16::try_from(2 + padded).unwrap_or(u16::MAX).to_be_bytes());
        out.extend_from_slice(&self.management_id.to_be_bytes());
        out.extend_from_slice(&self.data);
        out.resize(total, 0);
        out
    }
}

/// Header of a reply from `responder` to `req`, with a TLV of `tlv_len` bytes to follow.
fn reply_header(
    req: &MgmtRequest,
    responder: PortIdentity,
    action: Action,
    tlv_len: usize,
) -> Vec<u8> {
    let total = HEADER_LEN + tlv_len;
    let mut out = Vec::with_capacity(total);
    out.push((req.sdo_and_version[0] & 0xF0) | MSG_TYPE_MANAGEMENT);
    out.push(req.sdo_and_version[1]);
    out.extend_from_slice(&u16::try_from(total).unwrap_or(u16::MAX).to_be_bytes());
    out.push(req.domain);
    out.push(req.minor_sdo);
    out.push(if req.unicast { FLAG_UNICAST } else { 0 });
    out.push(0);
    out.extend_from_slice(&[0; 8]); // correctionField
    out.extend_from_slice(&[0; 4]); // messageTypeSpecific
    responder.write(&mut out);
    out.extend_from_slice(&req.sequence_id.to_be_bytes());
    out.push(CONTROL_MANAGEMENT);
    out.push(LOG_INTERVAL_NONE);
    req.source.write(&mut out);
    // IEEE 1588 15.3.3: a reply starts with the hops the request has left.
    let hops = req.starting_boundary_hops.saturating_sub(req.boundary_hops);
    out.extend_from_slice(&[hops, hops, action as u8, 0]);
    out
}

/// RESPONSE to `req` carrying `data` (a data set's bytes), padded to an even length.
pub fn build_response(req: &MgmtRequest, responder: PortIdentity, data: &[u8]) -> Vec<u8> {
    let padded = data.len() + data.len() % 2;
    let mut out = reply_header(req, responder, Action::Response, TLV_HEAD + 2 + padded);
    out.extend_from_slice(&TLV_MANAGEMENT.to_be_bytes());
    out.extend_from_slice(&u16::try_from(2 + padded).unwrap_or(u16::MAX).to_be_bytes());
    out.extend_from_slice(&req.management_id.to_be_bytes());
    out.extend_from_slice(data);
    out.resize(HEADER_LEN + TLV_HEAD + 2 + padded, 0);
    out
}

/// MANAGEMENT_ERROR_STATUS reply to `req` (no displayData).
pub fn build_error(req: &MgmtRequest, responder: PortIdentity, error: ErrorId) -> Vec<u8> {
    let action = match req.action {
        Action::Command => Action::Acknowledge,
        _ => Action::Response,
    };
    let mut out = reply_header(req, responder, action, TLV_HEAD + 8);
    out.extend_from_slice(&TLV_MANAGEMENT_ERROR_STATUS.to_be_bytes());
    out.extend_from_slice(&8u16.to_be_bytes());
    out.extend_from_slice(&(error as u16).to_be_bytes());
    out.extend_from_slice(&req.management_id.to_be_bytes());
    out.extend_from_slice(&[0; 4]);
    out
}

/// portState enumeration on the wire (IEEE 1588 Table 20: INITIALIZING = 1 … SLAVE = 9).
pub fn port_state_code(s: PortState) -> u8 {
    s as u8 + 1
}

/// TimeInterval: nanoseconds scaled by 2^16, saturating.
fn time_interval(ns: i64) -> [u8; 8] {
    ns.saturating_mul(1 << 16).to_be_bytes()
}

/// ClockQuality (IEEE 1588 5.3.7).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClockQuality {
    pub class: u8,
    pub accuracy: u8,
    pub offset_scaled_log_variance: u16,
}

impl ClockQuality {
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&[self.class, self.accuracy]);
        out.extend_from_slice(&self.offset_scaled_log_variance.to_be_bytes());
    }
}

/// DEFAULT_DATA_SET (IEEE 1588 15.5.3.3.1), 20 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DefaultDataSet {
    pub two_step: bool,
    pub slave_only: bool,
    pub number_ports: u16,
    pub priority1: u8,
    pub quality: ClockQuality,
    pub priority2: u8,
    pub clock_identity: [u8; 8],
    pub domain: u8,
}

impl DefaultDataSet {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(20);
        out.push(u8::from(self.two_step) | u8::from(self.slave_only) << 1);
        out.push(0);
        out.extend_from_slice(&self.number_ports.to_be_bytes());
        out.push(self.priority1);
        self.quality.write(&mut out);
        out.push(self.priority2);
        out.extend_from_slice(&self.clock_identity);
        out.extend_from_slice(&[self.domain, 0]);
        out
    }
}

/// CURRENT_DATA_SET (15.5.3.4.1), 18 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CurrentDataSet {
    pub steps_removed: u16,
    pub offset_from_master_ns: i64,
    pub mean_path_delay_ns: i64,
}

impl CurrentDataSet {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(18);
        out.extend_from_slice(&self.steps_removed.to_be_bytes());
        out.extend_from_slice(&time_interval(self.offset_from_master_ns));
        out.extend_from_slice(&time_interval(self.mean_path_delay_ns));
        out
    }
}

/// PARENT_DATA_SET (15.5.3.5.1), 32 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParentDataSet {
    pub parent_port: PortIdentity,
    pub parent_stats: bool,
    pub observed_offset_scaled_log_variance: u16,
    pub observed_phase_change_rate: i32,
    pub gm_priority1: u8,
    pub gm_quality: ClockQuality,
    pub gm_priority2: u8,
    pub gm_identity: [u8; 8],
}

impl ParentDataSet {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(32);
        self.parent_port.write(&mut out);
        out.extend_from_slice(&[u8::from(self.parent_stats), 0]);
        out.extend_from_slice(&self.observed_offset_scaled_log_variance.to_be_bytes());
        out.extend_from_slice(&self.observed_phase_change_rate.to_be_bytes());
        out.push(self.gm_priority1);
        self.gm_quality.write(&mut out);
        out.push(self.gm_priority2);
        out.extend_from_slice(&self.gm_identity);
        out
    }
}

/// TIME_PROPERTIES_DATA_SET (15.5.3.6.1), 4 bytes. `flags`: LI_61 bit 0, LI_59 1, UTCV 2,
/// PTP 3, TTRA 4, FTRA 5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimePropertiesDataSet {
    pub current_utc_offset: i16,
    pub flags: u8,
    pub time_source: u8,
}

impl TimePropertiesDataSet {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = self.current_utc_offset.to_be_bytes().to_vec();
        out.extend_from_slice(&[self.flags, self.time_source]);
        out
    }
}

/// PORT_DATA_SET (15.5.3.7.1), 26 bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortDataSet {
    pub port: PortIdentity,
    pub state: PortState,
    pub log_min_delay_req_interval: i8,
    pub peer_mean_path_delay_ns: i64,
    pub log_announce_interval: i8,
    pub announce_receipt_timeout: u8,
    pub log_sync_interval: i8,
    /// delayMechanism: 1 E2E, 2 P2P.
    pub delay_mechanism: u8,
    pub log_min_pdelay_req_interval: i8,
    /// minorVersionPTP << 4 | versionPTP.
    pub version: u8,
}

impl PortDataSet {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(26);
        self.port.write(&mut out);
        out.push(port_state_code(self.state));
        out.extend_from_slice(&self.log_min_delay_req_interval.to_be_bytes());
        out.extend_from_slice(&time_interval(self.peer_mean_path_delay_ns));
        out.extend_from_slice(&self.log_announce_interval.to_be_bytes());
        out.push(self.announce_receipt_timeout);
        out.extend_from_slice(&self.log_sync_interval.to_be_bytes());
        out.push(self.delay_mechanism);
        out.extend_from_slice(&self.log_min_pdelay_req_interval.to_be_bytes());
        out.push(self.version);
        out
    }
}

/// linuxptp's TIME_STATUS_NP, 50 bytes. ptpd has no gPTP follow-up information, so the rate
/// and phase-change fields are zero.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TimeStatusNp {
    pub master_offset_ns: i64,
    pub ingress_time_ns: i64,
    pub gm_present: bool,
    pub gm_identity: [u8; 8],
}

impl TimeStatusNp {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(50);
        out.extend_from_slice(&self.master_offset_ns.to_be_bytes());
        out.extend_from_slice(&self.ingress_time_ns.to_be_bytes());
        // cumulativeScaledRateOffset, scaledLastGmPhaseChange, gmTimeBaseIndicator,
        // lastGmPhaseChange (ScaledNs, 12 bytes).
        out.extend_from_slice(&[0; 4 + 4 + 2 + 12]);
        out.extend_from_slice(&i32::from(self.gm_present).to_be_bytes());
        out.extend_from_slice(&self.gm_identity);
        out
    }
}

/// linuxptp's PORT_PROPERTIES_NP: port, state, timestamping (linuxptp's enum: 0 software,
/// 1 hardware, …), interface name as a PTPText (truncated at 255 bytes).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PortPropertiesNp {
    pub port: PortIdentity,
    pub state: PortState,
    pub timestamping: u8,
    pub interface: String,
}

impl PortPropertiesNp {
    pub fn encode(&self) -> Vec<u8> {
        let name = self.interface.as_bytes();
        let name = &name[..name.len().min(255)];
        let mut out = Vec::with_capacity(13 + name.len());
        self.port.write(&mut out);
        out.extend_from_slice(&[port_state_code(self.state), self.timestamping]);
        out.push(u8::try_from(name.len()).unwrap_or(u8::MAX));
        out.extend_from_slice(name);
        out
    }
}

/// A unicast management request as pmc sends it to domain 3, for the transports' tests.
#[cfg(test)]
pub(crate) fn test_request(action: Action, mid: u16, data: Vec<u8>, seq: u16) -> MgmtRequest {
    MgmtRequest {
        sdo_and_version: [0x0D, 0x02],
        domain: 3,
        minor_sdo: 0,
        unicast: true,
        source: PortIdentity {
            clock: [7; 8],
            port: 1,
        },
        sequence_id: seq,
        target: PortIdentity {
            clock: [0xFF; 8],
            port: 0xFFFF,
        },
        starting_boundary_hops: 0,
        boundary_hops: 0,
        action,
        management_id: mid,
        data,
    }
}

#[cfg(test)]
#[path = "mgmt_tests.rs"]
mod tests;
