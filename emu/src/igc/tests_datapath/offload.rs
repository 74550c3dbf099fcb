//! Issue 24: TCP segmentation (DCMD.TSE with an advanced context descriptor, the frame
//! spanning several data descriptors), RX frames spanning descriptors (jumbo), and the length
//! limits (runts, RLPML). Expected frames are built here from the protocol definitions (RFC 791
//! / 793 / 8200 headers and checksums), not from the model's code.

use super::*;

/// Statistics registers read here (igc_regs.h).
const MPC: u32 = 0x4010;
const GPTC: u32 = 0x4080;
const RUC: u32 = 0x40A4;
const ROC: u32 = 0x40AC;
const TSCTC: u32 = 0x40F8;
const RLPML: u32 = 0x5004;

/// cmd_type_len DCMD.TSE and the context descriptor's DTYP (§9).
const TSE: u32 = 1 << 31;
const DTYP_CTXT: u32 = 0x2 << 20;
/// type_tucmd_mlhl TUCMD.IPV4 and L4T = TCP (igc_defines.h).
const TUCMD_IPV4: u32 = 1 << 10;
const L4T_TCP: u32 = 1 << 11;
/// POPTS IXSM | TXSM in olinfo_status b9:8 (igc_tx_olinfo_status: IXSM for IPv4 only).
const POPTS_IXSM_TXSM: u32 = 0b11 << 8;
const POPTS_TXSM: u32 = 0b10 << 8;

const SRC4: [u8; 4] = [10, 0, 0, 1];
const DST4: [u8; 4] = [10, 0, 0, 2];
const SEQ: u32 = 0xFFFF_F000;
const IP_ID: u16 = 0xFFFE;
/// TCP flags as posted: CWR | ACK | PSH | FIN.
const FLAGS: u8 = 0x80 | 0x10 | 0x08 | 0x01;
/// A 32-byte TCP header (12 bytes of options, as Linux sends with timestamps).
const TCP_HDR: usize = 32;

/// One's-complement checksum of `parts` concatenated (RFC 1071), complemented.
fn inet_csum(parts: &[&[u8]]) -> u16 {
    !ones_sum(&parts.concat())
}

fn tcp_header(seq: u32, flags: u8, check: u16) -> Vec<u8> {
    let mut t = vec![0x13, 0x89, 0x00, 0x50];
    t.extend_from_slice(&seq.to_be_bytes());
    t.extend_from_slice(&777u32.to_be_bytes());
    t.extend_from_slice(&[(TCP_HDR as u8 / 4) << 4, flags, 0x01, 0xF6]);
    t.extend_from_slice(&check.to_be_bytes());
    t.extend_from_slice(&[0, 0, 1, 1, 8, 10, 0, 0, 0, 1, 0, 0, 0, 2]);
    t
}

fn ipv4_header(total: u16, id: u16, check: u16) -> Vec<u8> {
    let mut h = vec![0x45, 0];
    h.extend_from_slice(&total.to_be_bytes());
    h.extend_from_slice(&id.to_be_bytes());
    h.extend_from_slice(&[0x40, 0, 64, 6]);
    h.extend_from_slice(&check.to_be_bytes());
    h.extend_from_slice(&SRC4);
    h.extend_from_slice(&DST4);
    h
}

fn mac_header(ethertype: u16) -> Vec<u8> {
    let mut m = vec![0x02, 0, 0, 0, 0, 2, 0x02, 0, 0, 0, 0, 1];
    m.extend_from_slice(&ethertype.to_be_bytes());
    m
}

/// Segment `k` of `n` as it must be on the wire: payload `p`, every field from its RFC.
fn expected_v4_segment(k: usize, n: usize, mss: usize, p: &[u8]) -> Vec<u8> {
    let mut flags = FLAGS;
    if k > 0 {
        flags &= !0x80;
    }
    if k + 1 < n {
        flags &= !0x09;
    }
    let seq = SEQ.wrapping_add((k * mss) as u32);
    let tcp_len = (TCP_HDR + p.len()) as u16;
    let pseudo = [&SRC4[..], &DST4, &[0, 6], &tcp_len.to_be_bytes()].concat();
    let tcp0 = tcp_header(seq, flags, 0);
    let tcp = tcp_header(seq, flags, inet_csum(&[&pseudo, &tcp0, p]));
    let id = IP_ID.wrapping_add(k as u16);
    let ip0 = ipv4_header(20 + tcp_len, id, 0);
    let ip = ipv4_header(20 + tcp_len, id, inet_csum(&[&ip0]));
    [mac_header(0x0800), ip, tcp, p.to_vec()].concat()
}

/// Writes one raw descriptor at ring slot `i`.
fn put_desc(r: &mut Rig, i: u32, qw0: u64, dw2: u32, dw3: u32) {
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&qw0.to_le_bytes());
    d[8..12].copy_from_slice(&dw2.to_le_bytes());
    d[12..16].copy_from_slice(&dw3.to_le_bytes());
    assert!(r.host.write(TX_RING + i as u64 * 16, &d));
}

/// Posts a TSO frame as igc_tso / igc_tx_map do: a context descriptor (slot `idx`), then the
/// header and the payload in `chunks` (each its own data descriptor, TSE on all, PAYLEN and
/// POPTS on the first, EOP | RS on the last). Rings the doorbell.
fn post_tso(r: &mut Rig, macip: u32, tucmd: u32, mss_l4: u32, hdr: &[u8], chunks: &[&[u8]]) {
    let idx = 1;
    let popts = match tucmd & TUCMD_IPV4 {
        0 => POPTS_TXSM,
        _ => POPTS_IXSM_TXSM,
    };
    let paylen: usize = chunks.iter().map(|c| c.len()).sum();
    put_desc(
        r,
        0,
        macip as u64,
        DTYP_CTXT | txd::DEXT | tucmd,
        mss_l4 | idx << 4,
    );
    let bufs: Vec<&[u8]> = std::iter::once(hdr).chain(chunks.iter().copied()).collect();
    for (k, b) in bufs.iter().enumerate() {
        let addr = TX_BUF + k as u64 * 0x2000;
        assert!(r.host.write(addr, b));
        let last = k + 1 == bufs.len();
        let eop = if last { txd::EOP | txd::RS } else { 0 };
        let cmd = txd::DTYP_DATA | txd::DEXT | txd::IFCS | TSE | eop | b.len() as u32;
        let olinfo = match k {
            0 => (paylen as u32) << txd::PAYLEN_SHIFT | popts | idx << 4,
            _ => 0,
        };
        put_desc(r, k as u32 + 1, addr, cmd, olinfo);
    }
    r.tx_tail = bufs.len() as u32 + 1;
    r.wr(tdt(0), r.tx_tail);
}

fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i * 31 % 251) as u8).collect()
}

fn recorder_rig() -> (Rig, Recorder) {
    let rec = Recorder::default();
    (Rig::with(|_| {}, Box::new(rec.clone())), rec)
}

#[test]
fn a_tso_ipv4_frame_leaves_as_mss_segments_with_fixed_headers_and_checksums() {
    let (mut r, rec) = recorder_rig();
    let (mss, p) = (1000, payload(2500));
    // As igc_tso leaves the header: tot_len 0, IP check csum_fold(0), TCP check the
    // pseudo-header sum without the length.
    let seed = !inet_csum(&[&SRC4, &DST4, &[0, 6]]);
    let hdr = [
        mac_header(0x0800),
        ipv4_header(0, IP_ID, 0xFFFF),
        tcp_header(SEQ, FLAGS, seed),
    ]
    .concat();
    let mss_l4 = (TCP_HDR as u32) << 8 | (mss as u32) << 16;
    post_tso(
        &mut r,
        20 | 14 << 9,
        TUCMD_IPV4 | L4T_TCP,
        mss_l4,
        &hdr,
        &[&p[..1500], &p[1500..]],
    );
    r.poll();
    let sent: Vec<Vec<u8>> = rec.take().into_iter().map(|(f, _)| f).collect();
    let want: Vec<Vec<u8>> = p
        .chunks(mss)
        .enumerate()
        .map(|(k, c)| expected_v4_segment(k, 3, mss, c))
        .collect();
    assert_eq!(sent.len(), 3, "2500 bytes at MSS 1000");
    for (k, (got, want)) in sent.iter().zip(&want).enumerate() {
        assert_eq!(got, want, "segment {k}");
    }
    assert!(r.tx_dd(3), "the EOP descriptor is written back");
    let st = r.dev.stats();
    assert_eq!(
        (
            st.tx_tso_packets,
            st.tx_tso_segments,
            st.tx_frames,
            st.tx_malformed
        ),
        (1, 3, 3, 0)
    );
    assert_eq!((r.rd(TSCTC), r.rd(GPTC)), (1, 3));
}

#[test]
fn a_tso_ipv6_frame_gets_payload_lengths_and_v6_checksums() {
    let (mut r, rec) = recorder_rig();
    let (mss, p) = (600, payload(1000));
    let src6: Vec<u8> = (0..16).map(|i| 0x20 + i).collect();
    let dst6: Vec<u8> = (0..16).map(|i| 0x40 + i).collect();
    let ipv6 = |plen: u16| {
        let mut h = vec![0x60, 0, 0, 0];
        h.extend_from_slice(&plen.to_be_bytes());
        h.extend_from_slice(&[6, 64]);
        [h, src6.clone(), dst6.clone()].concat()
    };
    let seed = !inet_csum(&[&src6, &dst6, &[0, 6]]);
    let hdr = [mac_header(0x86DD), ipv6(0), tcp_header(SEQ, 0x18, seed)].concat();
    let mss_l4 = (TCP_HDR as u32) << 8 | (mss as u32) << 16;
    post_tso(&mut r, 40 | 14 << 9, L4T_TCP, mss_l4, &hdr, &[&p]);
    r.poll();
    let sent = rec.take();
    assert_eq!(sent.len(), 2);
    for (k, c) in p.chunks(mss).enumerate() {
        let tcp_len = (TCP_HDR + c.len()) as u32;
        let flags = if k == 0 { 0x10 } else { 0x18 };
        let seq = SEQ.wrapping_add((k * mss) as u32);
        let pseudo = [&src6[..], &dst6, &tcp_len.to_be_bytes(), &[0, 0, 0, 6]].concat();
        let check = inet_csum(&[&pseudo, &tcp_header(seq, flags, 0), c]);
        let want = [
            mac_header(0x86DD),
            ipv6(tcp_len as u16),
            tcp_header(seq, flags, check),
            c.to_vec(),
        ]
        .concat();
        assert_eq!(sent[k].0, want, "segment {k}");
    }
}

#[test]
fn a_tso_frame_whose_paylen_disagrees_is_dropped_and_counted_and_the_queue_goes_on() {
    let (mut r, rec) = recorder_rig();
    let p = payload(300);
    let hdr = [
        mac_header(0x0800),
        ipv4_header(0, 1, 0),
        tcp_header(1, 0x10, 0),
    ]
    .concat();
    let mss_l4 = (TCP_HDR as u32) << 8 | 100 << 16;
    post_tso(
        &mut r,
        20 | 14 << 9,
        TUCMD_IPV4 | L4T_TCP,
        mss_l4,
        &hdr,
        &[&p],
    );
    // PAYLEN one byte short of what the buffers hold.
    let olinfo = 299 << txd::PAYLEN_SHIFT | POPTS_IXSM_TXSM | 1 << 4;
    assert!(r.host.write(TX_RING + 16 + 12, &olinfo.to_le_bytes()));
    r.poll();
    assert!(
        rec.take().is_empty(),
        "nothing segmented, nothing sent whole"
    );
    assert!(r.tx_dd(2));
    let st = r.dev.stats();
    assert_eq!(
        (st.tx_malformed, st.tx_tso_packets, st.tx_frames),
        (1, 0, 0)
    );
    let f = test_frame(100, 3);
    r.send(&f, 0);
    r.poll();
    assert_eq!(rec.take()[0].0, f);
}

/// Delivers `frame` from the loopback at `at` and runs the model.
fn arrive(r: &mut Rig, frame: &[u8], at: u64) {
    r.dev.wire_mut().unwrap().transmit(frame, at - DELAY);
    r.clock.set(at);
    r.poll();
}

/// Status and length of RX descriptor `i`'s write-back.
fn rx_wb(r: &mut Rig, i: u32) -> (u32, usize) {
    let d = RX_RING + i as u64 * 16;
    let len = r.host.read_u32(d + 12) & 0xFFFF;
    (r.host.read_u32(d + 8), len as usize)
}

#[test]
fn a_9000_byte_frame_spans_five_2k_descriptors_header_first_eop_last() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    assert_eq!(r.rd(RLPML), 0x2600, "power-on long-packet limit");
    let f = test_frame(9000, 5);
    let at = r.clock.now() + 10_000;
    arrive(&mut r, &f, at);
    let wbs: Vec<(u32, usize)> = (0..6).map(|i| rx_wb(&mut r, i)).collect();
    let (dd, eop, tsip) = (
        RxStatus::DD.bits(),
        RxStatus::EOP.bits(),
        RxStatus::TSIP.bits(),
    );
    assert_eq!(
        wbs,
        [
            (dd | tsip, 2048),
            (dd, 2048),
            (dd, 2048),
            (dd, 2048),
            (dd | eop, TS_HDR_LEN + 9000 - 4 * 2048),
            (0, 0),
        ]
    );
    let mut got = Vec::new();
    for (i, (_, len)) in wbs.iter().enumerate().take(5) {
        got.extend(r.host.read(RX_BUF + i as u64 * BUF, *len).unwrap());
    }
    let h: Vec<u32> = got[..16]
        .chunks(4)
        .map(|c| u32::from_le_bytes(c.try_into().unwrap()))
        .collect();
    assert_eq!(
        h[3] as u64 * S + h[2] as u64,
        phc_at(at, 0) + RX_LAT_2500,
        "the header leads the first buffer"
    );
    assert_eq!(got[16..], f[..]);
    assert_eq!(r.rd(rdh(0)), 5);
    assert_eq!(r.dev.stats().rx_frames, 1);
    // Two descriptors left (RDH 5, RDT 7): a frame needing three is missed, RDH stays.
    arrive(&mut r, &test_frame(5000, 6), at + 100_000);
    assert_eq!(
        (r.rd(rdh(0)), r.dev.stats().rx_missed, r.rd(MPC)),
        (5, 1, 1)
    );
}

#[test]
fn frames_over_the_long_packet_limit_are_dropped_and_counted_in_roc() {
    let mut r = Rig::new();
    let at = r.clock.now() + 10_000;
    // LPE (the rig's RCTL): RLPML 9728 with FCS.
    arrive(&mut r, &test_frame(9725, 1), at);
    assert_eq!(rx_wb(&mut r, 0), (0, 0), "nothing written");
    assert_eq!((r.dev.stats().rx_oversize, r.rd(ROC)), (1, 1));
    // LPE clear: 1518 with FCS, 1522 with an 802.1Q tag.
    r.wr(RCTL, RCTL_PROMISC & !rctl::LPE);
    arrive(&mut r, &test_frame(1515, 2), at + 10_000);
    let mut tagged = test_frame(1518, 3);
    tagged[12..14].copy_from_slice(&[0x81, 0x00]);
    arrive(&mut r, &tagged, at + 20_000);
    arrive(&mut r, &test_frame(1514, 4), at + 30_000);
    assert_eq!((r.dev.stats().rx_oversize, r.rd(ROC)), (2, 1));
    assert_eq!(r.dev.stats().rx_frames, 2);
    assert_eq!(r.take_rx().unwrap().frame, tagged);
}

#[test]
fn a_50_byte_runt_is_dropped_and_counted_in_ruc() {
    let mut r = Rig::new();
    let at = r.clock.now() + 10_000;
    arrive(&mut r, &test_frame(50, 1), at);
    assert_eq!(rx_wb(&mut r, 0), (0, 0), "not delivered");
    assert_eq!(r.rd(rdh(0)), 0);
    assert_eq!((r.dev.stats().rx_runt, r.rd(RUC), r.rd(RUC)), (1, 1, 0));
    // 60 bytes (64 with FCS) is the minimum frame: delivered.
    let f = test_frame(60, 2);
    arrive(&mut r, &f, at + 10_000);
    assert_eq!(r.take_rx().unwrap().frame, f);
    assert_eq!((r.dev.stats().rx_runt, r.dev.stats().rx_frames), (1, 1));
}
