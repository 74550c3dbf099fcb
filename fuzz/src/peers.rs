//! Checks for the decoders that read another process's bytes outside the ptpd/driver channel
//! (issue 23): the device host's proxy protocol, the pcid channel, the ring set-up and the
//! region an attacher reads, the lab's wire datagrams and the fault-injection commands.

use std::sync::{Mutex, OnceLock};

use igcd::faults::FaultCommand;
use ptp_emu::proxy::config::{ConfigSpace, PciProfile, PcieProfile};
use ptp_emu::proxy::proto::{self, Message, RamRegion, cmd};
use ptp_emu::wire::{Cable, UnixDatagramWire, WirePort};
use ptp_ipc::ring::{self, CONTROL_LEN, RingError};
use ptp_pci::PciIds;
use ptp_pci::emulated::EmuFunction;
use ptp_pci::pcid_proto::{self, MsixTable, PciBar, Request, Response};

/// The device host's socket as `Server::serve_one` reads it, message after message: a
/// descriptor count (byte, mod 10: the fds SCM_RIGHTS brought, as integers), the 16-byte
/// header, its payload. A header announcing an impossible size or a short payload ends the
/// stream, as it ends the server's session. Each decoded message re-encodes with the client's
/// encoders to the bytes that matter and decodes back to itself; config accesses go to a
/// [`ConfigSpace`] whose identity no peer may change.
pub fn proxy_proto(mut data: &[u8]) {
    let ids = PciIds {
        vendor: 0x8086,
        device: 0x15f3,
        class: 2,
        revision: 3,
        ..PciIds::default()
    };
    // The I225's layout (capabilities, BAR0, the MSI-X BAR3), as the device host presents it.
    let pcie = PcieProfile {
        msix_vectors: 5,
        link_speed: 2,
        link_width: 1,
    };
    let mut cfg = ConfigSpace::new(&PciProfile::intel_gbe(ids, 1 << 20, 1 << 14, pcie));
    let identity = |c: &ConfigSpace| [0, 8, 0x2c].map(|a| c.read(a, 4));
    let before = identity(&cfg);
    while let Some((&nfds, rest)) = data.split_first() {
        let Some((hdr, rest)) = rest.split_first_chunk::<{ proto::HEADER_LEN }>() else {
            return;
        };
        let Ok(h) = proto::decode_header(hdr) else {
            return;
        };
        assert!(h.size <= proto::MAX_PAYLOAD);
        // The header's meaningful bytes (4..8 is padding) are what the encoder writes.
        let again = proto::encode_header(h.cmd, h.size);
        assert_eq!((&again[..4], &again[8..]), (&hdr[..4], &hdr[8..]));
        let Some((payload, rest)) = rest.split_at_checked(h.size) else {
            return;
        };
        data = rest;
        let fds: Vec<u32> = (0..u32::from(nfds % 10)).collect();
        if let Ok(m) = proto::decode(h.cmd, payload, fds) {
            check_proxy_message(&m, payload);
            apply_config(&mut cfg, &m);
        }
    }
    assert_eq!(
        identity(&cfg),
        before,
        "a config write changed the function's identity"
    );
    assert_eq!(
        cfg.bar0_base() % u64::from(cfg.bar0_len()),
        0,
        "BAR0 misaligned"
    );
}

fn check_proxy_message(m: &Message<u32>, payload: &[u8]) {
    let (c, encoded): (i32, Vec<u8>) = match *m {
        Message::CfgWrite { addr, val, len } => (
            cmd::PCI_CFGWRITE,
            proto::encode_cfg(addr, val, len.into()).to_vec(),
        ),
        Message::CfgRead { addr, len } => {
            let val = u32::from_le_bytes(payload[4..8].try_into().expect("12-byte payload"));
            (
                cmd::PCI_CFGREAD,
                proto::encode_cfg(addr, val, len.into()).to_vec(),
            )
        }
        Message::BarWrite {
            addr,
            val,
            size,
            memory,
        } => (cmd::BAR_WRITE, bar_bytes(addr, val, size, memory, payload)),
        Message::BarRead { addr, size, memory } => {
            let val = u64::from_le_bytes(payload[8..16].try_into().expect("24-byte payload"));
            (cmd::BAR_READ, bar_bytes(addr, val, size, memory, payload))
        }
        Message::SyncSysmem(ref regions) => return check_sysmem(regions, payload),
        Message::SetIrqfd { irq, resample } => {
            assert_eq!((irq, resample), (0, 1), "descriptors out of order");
            return;
        }
        Message::DeviceReset => return,
    };
    assert_eq!(encoded, payload, "decode accepted a non-canonical {m:?}");
    let back = proto::decode(c, &encoded, Vec::<u32>::new()).expect("an encoded access decodes");
    assert_eq!(&back, m);
}

/// The BAR payload the client would send for this access, with the input's ignored bytes
/// (the memory flag's value beyond non-zero, the padding after it) so it compares whole.
fn bar_bytes(addr: u64, val: u64, size: u8, memory: bool, payload: &[u8]) -> Vec<u8> {
    assert!(matches!(size, 1 | 2 | 4 | 8));
    assert_eq!(memory, payload[20] != 0);
    let mut b = proto::encode_bar(addr, val, size.into(), memory).to_vec();
    b[20..].copy_from_slice(&payload[20..]);
    b
}

/// Region i rides in descriptor i; every region is non-empty, ends below 2^64 and sits at a
/// representable file offset; the client's encoding of the regions decodes to them again.
fn check_sysmem(regions: &[(RamRegion, u32)], payload: &[u8]) {
    assert!((1..=proto::MAX_FDS).contains(&regions.len()));
    for (i, (r, fd)) in regions.iter().enumerate() {
        assert_eq!(*fd as usize, i);
        assert!(r.size > 0 && r.gpa.checked_add(r.size).is_some());
        assert!(i64::try_from(r.offset).is_ok());
    }
    let plain: Vec<RamRegion> = regions.iter().map(|(r, _)| *r).collect();
    let enc = proto::encode_sysmem(&plain);
    for i in 0..regions.len() {
        for at in [i * 8, 64 + i * 8, 128 + i * 8] {
            assert_eq!(enc[at..at + 8], payload[at..at + 8]);
        }
    }
    let fds: Vec<u32> = (0..regions.len() as u32).collect();
    let Ok(Message::SyncSysmem(back)) = proto::decode(cmd::SYNC_SYSMEM, &enc, fds) else {
        panic!("encoded regions do not decode");
    };
    assert_eq!(back, regions);
}

fn apply_config(cfg: &mut ConfigSpace, m: &Message<u32>) {
    match *m {
        Message::CfgWrite { addr, val, len } => cfg.write(addr, val, len),
        Message::CfgRead { addr, len } => {
            let v = u64::from(cfg.read(addr, len));
            assert!(v < 1 << (8 * u32::from(len)), "{len}-byte read gave {v:#x}");
        }
        Message::DeviceReset => cfg.reset(),
        _ => {}
    }
}

/// What igcd reads from pcid on Redox (`RedoxPciFunction::call`: a length-prefixed response)
/// and pcid's side of the requests. bincode has one encoding per value, so whatever decodes
/// re-encodes to the input; no decoded sequence holds more than the input did. A decoded
/// MSI-X description is located against the BARs the config response gave (the last one seen,
/// else none): every entry of a located table lies in its memory BAR below 4 GiB.
pub fn pcid_channel(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    if which % 2 == 1 {
        if let Ok(r) = Request::decode(bytes) {
            assert_eq!(r.encode(), bytes, "non-canonical request {r:?}");
        }
        return;
    }
    // A stream of frames, as the channel carries them one after another.
    let mut bars = [PciBar::None; 6];
    let mut rest = bytes;
    while let Some((prefix, tail)) = rest.split_first_chunk::<{ pcid_proto::LEN_PREFIX }>() {
        let Ok(len) = pcid_proto::frame_len(*prefix) else {
            return;
        };
        let Some((payload, tail)) = tail.split_at_checked(len) else {
            return;
        };
        rest = tail;
        let Ok(r) = Response::decode(payload) else {
            continue;
        };
        assert_eq!(r.encode(), payload, "non-canonical response {r:?}");
        check_response(&r, payload.len(), &mut bars);
    }
}

fn check_response(r: &Response, len: usize, bars: &mut [PciBar; 6]) {
    match r {
        Response::AllFeatures(f) => assert!(f.len() * 4 <= len),
        Response::VendorCapabilities(c) => {
            assert!(c.iter().map(|v| v.len() + 8).sum::<usize>() <= len);
        }
        Response::Config(info) => *bars = info.bars,
        Response::FeatureInfo(_, pcid_proto::FeatureInfo::MsiX(m)) => {
            if let Ok(t) = MsixTable::locate(m, bars) {
                let (_, bar_len) = bars[usize::from(t.bar)].memory().expect("a memory BAR");
                let last = t.entries.checked_sub(1).and_then(|i| t.entry(i));
                if let Some(e) = last {
                    assert!(u64::from(e) + 16 <= bar_len.min(1 << 32));
                }
                assert_eq!(t.entry(t.entries), None);
            }
        }
        _ => {}
    }
}

/// Offset of ring 0's published head in a region (line 4, `ipc/src/ring/layout.rs`).
const RING0_HEAD: usize = 4 * 64;

/// A ring's first control message and the region behind it, as an attacher reads them. Byte 0
/// picks: the Linux setup message (decodes to its announced length and re-encodes to the
/// input), the Redox mapped offer (a length a ring region can have, which round-trips), or a
/// whole region ([`ring::probe_region`]): a geometry that fits the region, and exactly the
/// messages an independent reading of the bytes says ring 0 holds.
pub fn ring_setup(data: &[u8]) {
    let Some((&which, bytes)) = data.split_first() else {
        return;
    };
    match which % 3 {
        0 => match ring::decode_setup(bytes) {
            Ok(len) => assert_eq!(ring::setup_message(len as usize)[..], bytes[..]),
            Err(RingError::NotOffered(b)) => assert_eq!(b, bytes),
            Err(e) => assert!(matches!(e, RingError::BadVersion(v) if v != ring::VERSION)),
        },
        1 => {
            if let Some(len) = ring::parse_mapped_offer(bytes) {
                assert!((ring::CONTROL_LEN..=ring::MAX_REGION).contains(&len), "{len}");
                assert_eq!(ring::mapped_offer(len), bytes);
            }
        }
        _ => check_region(bytes),
    }
}

fn check_region(region: &[u8]) {
    let Ok(p) = ring::probe_region(region) else {
        return;
    };
    let g = p.geometry;
    assert!(g.region_len() <= region.len());
    let head = u64::from_le_bytes(region[RING0_HEAD..RING0_HEAD + 8].try_into().expect("8"));
    if head > u64::from(g.slot_count) {
        assert_eq!(
            p.received,
            [Err(RingError::Corrupt(
                "producer's head is beyond the ring"
            ))]
        );
        return;
    }
    assert_eq!(p.received.len() as u64, head);
    for (i, got) in p.received.iter().enumerate() {
        let slot = CONTROL_LEN + i * g.slot_size as usize;
        let len = u32::from_le_bytes(region[slot..slot + 4].try_into().expect("4")) as usize;
        match got {
            Ok(m) => assert_eq!(m[..], region[slot + 4..slot + 4 + len]),
            Err(e) => {
                assert!(
                    len > g.max_payload(),
                    "slot {i} of {len} bytes refused: {e}"
                );
            }
        }
    }
}

/// The lab's wire: datagrams (split from the input at 0xFF 0xFE 0xFD) sent over a socketpair
/// into a [`UnixDatagramWire`] whose cable the first 8 bytes set (delay, jitter, seed). Every
/// datagram decodes as `decode_any` says, re-encodes to itself (only the ignored flag bits may
/// differ), and the wire delivers exactly the valid non-HELLO frames not lost, each no earlier
/// than its departure and at most delay + jitter after it, counting every other datagram.
pub fn wire_datagram(data: &[u8]) {
    let Some((cable, rest)) = data.split_first_chunk::<8>() else {
        return;
    };
    let delay = u64::from(u16::from_le_bytes([cable[0], cable[1]]));
    let jitter = u64::from(u16::from_le_bytes([cable[2], cable[3]]));
    let seed = u64::from(u32::from_le_bytes([cable[4], cable[5], cable[6], cable[7]]));
    let Ok((raw, end)) = std::os::unix::net::UnixDatagram::pair() else {
        return;
    };
    let Ok(w) = UnixDatagramWire::from_socket(end) else {
        return;
    };
    let mut w = w.with_cable(Cable::new(delay).with_jitter(jitter).with_seed(seed));
    // Well within the socket's datagram queue (and never blocking on it).
    let grams: Vec<&[u8]> = split(rest, &[0xFF, 0xFE, 0xFD]).take(64).collect();
    if raw.set_nonblocking(true).is_err() {
        return;
    }
    let mut want = Vec::new();
    for d in &grams {
        if raw.send(d).is_err() {
            return; // the socket buffer is full: not the decoder's business
        }
        check_datagram(d, &mut want);
    }
    // One frame per call, and a call may drain malformed datagrams only.
    let got: Vec<_> = (0..2 * grams.len() + 2)
        .filter_map(|_| w.poll_rx(u64::MAX))
        .collect();
    let s = w.stats();
    let valid = grams
        .iter()
        .filter(|d| ptp_emu::wire::decode_any(d).is_some())
        .count();
    assert_eq!(s.malformed as usize, grams.len() - valid);
    assert_eq!(s.received + s.lost, want.len() as u64);
    assert_eq!(got.len() as u64, s.received);
    // Each frame delivered is one sent, arriving within its cable's bounds. Frames come in
    // arrival order and every window is as wide, so pairing each with the earliest departure
    // that fits finds a pairing whenever one exists.
    assert!(got.is_sorted_by_key(|f| f.arrival_ns));
    for f in &got {
        let fits = |(dep, d): &&(u64, &[u8])| {
            let latest = dep.saturating_add(delay).saturating_add(jitter);
            *d == f.data && (*dep..=latest).contains(&f.arrival_ns)
        };
        let first = want
            .iter()
            .filter(fits)
            .min_by_key(|(dep, _)| *dep)
            .copied();
        let i = first
            .and_then(|w| want.iter().position(|x| *x == w))
            .expect("a frame nobody sent, or out of bounds");
        want.remove(i);
    }
}

fn check_datagram<'a>(d: &'a [u8], frames: &mut Vec<(u64, &'a [u8])>) {
    use ptp_emu::wire::{Datagram, HEADER_LEN, LinkOffer, decode_any, decode_datagram};
    let Some(datagram) = decode_any(d) else {
        assert_eq!(decode_datagram(d), None);
        return;
    };
    // The header's departure field, kept as sent (only a frame's is used).
    let dep_field = || u64::from_le_bytes(d[8..16].try_into().expect("a decoded header"));
    match datagram {
        Datagram::Frame(dep, frame) => {
            frames.push((dep, frame));
            let mut canonical =
                ptp_emu::wire::encode_datagram(frame, dep).expect("a decoded frame encodes");
            // Flag bits the decoder ignores may differ; the HELLO and OFFER bits may not.
            assert_eq!(canonical[5] & 3, d[5] & 3);
            canonical[5] = d[5];
            assert_eq!(canonical, d);
            assert_eq!(decode_datagram(d), Some((dep, frame)));
        }
        Datagram::Hello => {
            assert_eq!(d.len(), HEADER_LEN, "a HELLO carries nothing");
            let mut h = ptp_emu::wire::encode_hello();
            h[8..16].copy_from_slice(&dep_field().to_le_bytes());
            h[5] = d[5];
            assert_eq!(h, d);
            assert_eq!(decode_datagram(d), None);
        }
        Datagram::Offer(o) => {
            let body = &d[HEADER_LEN..];
            assert_eq!(LinkOffer::from_bytes(body), Some(o));
            assert_eq!(&o.to_bytes()[..], body, "an offer re-encodes to itself");
            assert_eq!(decode_datagram(d), None);
        }
    }
}

/// `bytes` cut at every occurrence of `sep` (no empty trailing piece).
fn split<'a>(bytes: &'a [u8], sep: &'a [u8]) -> impl Iterator<Item = &'a [u8]> + 'a {
    let mut rest = Some(bytes);
    std::iter::from_fn(move || {
        let r = rest?;
        match r.windows(sep.len()).position(|w| w == sep) {
            Some(i) => {
                rest = Some(&r[i + sep.len()..]);
                Some(&r[..i])
            }
            None => {
                rest = None;
                (!r.is_empty()).then_some(r)
            }
        }
    })
}

/// The text of a command as the lab writes it (the fault socket's table, `igcd::faults`).
fn fault_text(c: FaultCommand) -> String {
    match c {
        FaultCommand::DropTxStamps(n) => format!("drop-tx-stamps {n}"),
        FaultCommand::StickTxtt(s) => format!("stick-txtt {s}"),
        FaultCommand::ClearTxtt(s) => format!("clear-txtt {s}"),
        FaultCommand::DropTsIrqs(n) => format!("drop-ts-irqs {n}"),
        FaultCommand::Link(up) => format!("link {}", if up { "up" } else { "down" }),
        FaultCommand::Stats => "stats".into(),
    }
}

fn fault_model() -> &'static Mutex<EmuFunction<ptp_emu::igc::I225>> {
    static M: OnceLock<Mutex<EmuFunction<ptp_emu::igc::I225>>> = OnceLock::new();
    M.get_or_init(|| {
        let clock = std::sync::Arc::new(ptp_emu::clock::VirtualClock::new(0));
        let nic = ptp_emu::igc::I225::new_i225(clock);
        Mutex::new(EmuFunction::new(nic, "fuzz"))
    })
}

/// The fault socket's session (`igcd::faults`): each message (split at newlines) read as the
/// session reads it (lossy UTF-8), parsed; a parsed command's canonical text parses to it
/// again, and it is applied to an i225 model (one model for the whole run, so faults pile up
/// as on a long-lived socket). `stats` answers every field the lab reads, each a number (or
/// up/down, or the per-set list).
pub fn fault_command(data: &[u8]) {
    for msg in data.split(|&b| b == b'\n') {
        let text = String::from_utf8_lossy(msg);
        let Ok(c) = text.parse::<FaultCommand>() else {
            continue;
        };
        assert_eq!(fault_text(c).parse::<FaultCommand>(), Ok(c));
        let nic = fault_model().lock().unwrap_or_else(|p| p.into_inner());
        let reply = nic.with_device_host(|d, h| igcd::faults::apply(d, h, c));
        drop(nic);
        if c == FaultCommand::Stats {
            check_stats(&reply);
        } else {
            assert!(reply.is_empty(), "{c:?} answered {reply:?}");
        }
    }
}

fn check_stats(reply: &str) {
    const KEYS: [&str; 13] = [
        "latched",
        "lost",
        "dropped",
        "stuck_reads",
        "ts_irqs_dropped",
        "per_set",
        "link",
        "link_changes",
        "port_resets",
        "datapath_writes",
        "tx_frames",
        "rx_frames",
        "rx_dropped",
    ];
    let fields: Vec<(&str, &str)> = reply
        .split_whitespace()
        .filter_map(|kv| kv.split_once('='))
        .collect();
    assert_eq!(
        fields.iter().map(|f| f.0).collect::<Vec<_>>(),
        KEYS,
        "{reply}"
    );
    for (k, v) in fields {
        let ok = match k {
            "link" => v == "up" || v == "down",
            "per_set" => {
                v.split(',').count() == 4 && v.split(',').all(|n| n.parse::<u64>().is_ok())
            }
            _ => v.parse::<u64>().is_ok(),
        };
        assert!(ok, "{k}={v}");
    }
}
