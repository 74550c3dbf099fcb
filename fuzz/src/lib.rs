//! The checks behind each fuzz target, and the seeds `gen_corpus` writes. Each check asserts
//! what must hold for any input: the decoder returns (never panics) and, where an encoder
//! exists, decode(encode(x)) == x for every decoded x. The targets under `fuzz_targets/` only
//! call these.

mod peers;
pub use peers::{fault_command, pcid_channel, proxy_proto, ring_setup, wire_datagram};

use std::path::Path;
use std::sync::OnceLock;
use std::time::Duration;

use intel_common::family::{self, RxFrame};
use ptp_ipc::transport::{InProc, TransportError};
use ptp_ipc::{ClockReply, ClockRequest, DriverToPtpd, PtpdToDriver, RxFilter, Wire};
use ptpd::driver_link::{Connector, DriverLink};
use ptpd::ptp::mgmt;
use ptpd::scheme::ClockScheme;

/// One message type: decode; if it decodes, its encoding is the input (the wire format has one
/// encoding per message) and decodes back to it.
fn wire_round_trip<M: Wire + PartialEq + std::fmt::Debug>(bytes: &[u8]) {
    let Ok(m) = M::decode(bytes) else { return };
    let mut out = Vec::new();
    m.try_encode(&mut out).expect("a decoded message encodes");
    assert_eq!(
        out, bytes,
        "decode accepted a non-canonical encoding of {m:?}"
    );
    assert_eq!(M::decode(&out).as_ref(), Ok(&m));
}

/// ipc messages, both directions of both channels; the first byte picks the type.
pub fn ipc_wire(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => wire_round_trip::<PtpdToDriver>(bytes),
        1 => wire_round_trip::<DriverToPtpd>(bytes),
        2 => wire_round_trip::<ClockRequest>(bytes),
        _ => wire_round_trip::<ClockReply>(bytes),
    }
}

/// A driver that is never there: every clock answers as while its driver is down.
struct Absent;

impl Connector for Absent {
    type T = InProc;
    fn connect(&self) -> Result<InProc, TransportError> {
        Err(TransportError::NotFound("fuzz: no driver".into()))
    }
    fn describe(&self) -> String {
        "fuzz".into()
    }
}

fn scheme() -> &'static ClockScheme<Absent> {
    static S: OnceLock<ClockScheme<Absent>> = OnceLock::new();
    S.get_or_init(|| {
        let links = vec![
            DriverLink::start("a", Absent, None),
            DriverLink::start("b", Absent, None),
        ];
        ClockScheme::new(links, vec![1000], Duration::from_millis(1))
    })
}

/// The clock scheme's request path as ptpd runs it: the datagram is decoded, and a request
/// that decodes is answered (privilege, validation, clock lookup) by the scheme; a reply always
/// encodes and decodes back to itself. Byte 0 picks the caller's uid (root, privileged, other).
pub fn clock_request(data: &[u8]) {
    let Some((&who, bytes)) = data.split_first() else {
        return;
    };
    let Ok(req) = ClockRequest::decode(bytes) else {
        return;
    };
    let uid = [0, 1000, 65534][usize::from(who % 3)];
    let reply = scheme().handle(req, uid);
    let mut out = Vec::new();
    reply.try_encode(&mut out).expect("every reply encodes");
    assert_eq!(ClockReply::decode(&out), Ok(reply));
}

/// PTP frames as the drivers classify them (ptp_ipc::frame::classify, the RX filter decision
/// of every filter) and as ptpd's network layer parses them.
pub fn ptp_frame(frame: &[u8]) {
    let info = ptp_ipc::frame::classify(frame);
    if let Some(i) = info {
        assert!(
            i.offset + 2 <= frame.len(),
            "header offset {} beyond {}",
            i.offset,
            frame.len()
        );
    }
    for f in RxFilter::ALL {
        let kept = family::keeps_rx_stamp(f, frame);
        assert!(
            !kept || info.is_some() || f == RxFilter::All,
            "{f:?} kept a non-PTP frame"
        );
    }
    if let Ok(m) = ptpd::ptp::net::parse(frame) {
        let _ = ptpd::ptp::net::check_times(&m, Some(0));
        let _ = ptpd::ptp::net::source_port_identity(m.payload);
        let _ = ptpd::ptp::net::announce_grandmaster(m.payload);
        rebuild(&m);
    }
}

/// ptpd's encoder round trip: a parsed PTP message wrapped again (both transports) parses to
/// the same message.
fn rebuild(m: &ptpd::ptp::net::Received<'_>) {
    use ptpd::ptp::config::NetworkTransport;
    for t in [NetworkTransport::L2, NetworkTransport::UdpV4] {
        let mut b = ptpd::ptp::net::FrameBuilder::new(t, [2, 0, 0, 0, 0, 1], [192, 0, 2, 1].into());
        let Ok(f) = b.build(m.payload, m.is_event(), false) else {
            continue; // longer than ptpd sends
        };
        let again = ptpd::ptp::net::parse(&f).expect("a frame ptpd built parses");
        assert_eq!(again.payload, m.payload);
        assert_eq!(
            (again.message_type, again.version),
            (m.message_type, m.version)
        );
    }
}

/// The in-buffer RX timestamp header (igc, i210/i350): the write-back status and filter from
/// the first 5 bytes, the RX latency from the next 8, the buffer after. The stamp is taken
/// only with the TSIP bit and a whole header; the frame is always the buffer's tail.
pub fn rx_ts_header(data: &[u8]) {
    if data.len() < 13 {
        return;
    }
    use intel_regs::e1000::RxStatus;
    let status =
        RxStatus::from_bits_retain(u32::from_le_bytes(data[0..4].try_into().expect("4 bytes")));
    let filter = RxFilter::ALL[usize::from(data[4]) % RxFilter::ALL.len()];
    let latency = u64::from_le_bytes(data[5..13].try_into().expect("8 bytes"));
    let buf = &data[13..];
    let stamped = status.contains(RxStatus::TSIP) && buf.len() >= 16;
    let (raw, frame) = intel_common::igc::split_rx_stamp(status, buf);
    assert_eq!(raw.is_some(), stamped);
    assert!(buf.ends_with(frame) && frame.len() == buf.len() - if stamped { 16 } else { 0 });
    let rx = intel_common::igc::rx_frame(filter, status, buf, latency);
    check_rx(rx, buf, stamped);
    // i350-style: the raw count converted by a caller's function.
    let rx = family::in_buffer_rx_frame(filter, status, buf, latency, |r| r.wrapping_mul(8));
    check_rx(rx, buf, stamped);
}

fn check_rx(rx: RxFrame<'_>, buf: &[u8], stamped: bool) {
    let skip = if stamped { 16 } else { 0 };
    match rx {
        RxFrame::Ptp { rx_ns, frame } => {
            assert_eq!(frame, &buf[skip..]);
            assert!(stamped || rx_ns.is_none(), "a stamp without a header");
        }
        RxFrame::Other { frame } => assert_eq!(frame, &buf[skip..]),
        #[allow(unreachable_patterns)]
        _ => {}
    }
}

/// ptpd's configuration: TOML → Config (top level, [[clock]], [ptp] and [clock.ptp]), then the
/// resolved PTP settings. Any text gives a Config or a ConfigError.
pub fn ptpd_config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Ok(c) = ptpd::config::Config::from_str(text, Path::new("fuzz.toml")) {
        // from_str validated the PTP settings, so resolving them again succeeds.
        c.ptp_settings().expect("a validated config resolves");
        let _ = c.request_timeout();
    }
}

/// IEEE 1588 management requests (ptpd's pmc -u socket and the network port): decode; a
/// decoded request re-encodes to the same request (an odd dataField comes back padded), and
/// the RESPONSE built for it decodes as the answer to it (and an error status is built).
pub fn mgmt_tlv(data: &[u8]) {
    let Ok(req) = mgmt::parse(data) else { return };
    let again = mgmt::parse(&req.encode()).expect("an encoded request parses");
    let mut want = req.clone();
    want.data.resize(req.data.len() + req.data.len() % 2, 0);
    assert_eq!(again, want);
    let me = mgmt::PortIdentity {
        clock: [1; 8],
        port: 1,
    };
    let r = mgmt::build_response(&req, me, &req.data);
    let r = mgmt::parse(&r).expect("a RESPONSE parses");
    assert_eq!((r.sequence_id, r.target), (req.sequence_id, req.source));
    let _ = mgmt::build_error(&req, me, mgmt::ErrorId::NoSuchId);
}
