//! Behaviour tests of the igb data path's timestamps (§7.5, §8.2, §8.3), written from
//! intel-timesync.md, not from a driver: a [`MemHost`] holds queue 0's rings at the e1000
//! offsets, a [`Loopback`] carries frames, the [`VirtualClock`] is advanced by hand.

use super::*;
use crate::clock::VirtualClock;
use crate::host::MemHost;
use crate::phc::NS_PER_S;
use crate::wire::Loopback;
use intel_regs::igc::txd;

const S: u64 = NS_PER_S;
const DELAY: u64 = 500;
/// Descriptors per ring; ring and buffer bus addresses; buffer stride.
const N: u32 = 8;
const TXR: u64 = 0x1_0000;
const RXR: u64 = 0x2_0000;
const TXB: u64 = 0x3_0000;
const RXB: u64 = 0x4_0000;
const STRIDE: u64 = 0x800;
/// The i210's (TX, RX) latency at 1 Gb/s (§8.4).
const I210_LAT_1G: (u64, u64) = (178, 448);

struct Dp {
    clock: VirtualClock,
    dev: Igb,
    host: MemHost,
    sent: u32,
    seen: u32,
}

/// Advanced descriptor write-back of one received frame: status, length, buffer.
struct Got {
    status: u32,
    buf: Vec<u8>,
}

impl Dp {
    /// `part` with its clock started (Linux's PTP reset), queue 0 up on a loopback plug.
    fn new(part: IgbPart) -> Self {
        let clock = VirtualClock::new(S);
        let mut cfg = IgbConfig::new(part, clock.source());
        cfg.initial_systim_ns = 1_000 * S;
        let mut dev = Igb::new(cfg).unwrap();
        dev.nic_mut().attach_wire(Box::new(Loopback::new(DELAY)));
        let mut host = MemHost::new();
        for region in [TXR, RXR, TXB, RXB] {
            host.add_region(region, 0x1_0000);
        }
        let mut dp = Self {
            clock,
            dev,
            host,
            sent: 0,
            seen: 0,
        };
        for i in 0..N {
            let addr = RXB + u64::from(i) * STRIDE;
            assert!(dp.host.write(RXR + u64::from(i) * 16, &addr.to_le_bytes()));
        }
        let start = match part {
            IgbPart::E82576 => (TIMINCA, timinca::INCPERIOD_82576 | timinca::INCVALUE_82576),
            _ => (TSAUXC, 0),
        };
        let ring_len = N * 16;
        let setup = [
            start,
            (CTRL, Ctrl::SLU.bits()),
            (tdbal(0), TXR as u32),
            (tdlen(0), ring_len),
            (txdctl(0), xdctl::QUEUE_ENABLE),
            (TCTL, tctl::EN | tctl::PSP),
            (rdbal(0), RXR as u32),
            (rdlen(0), ring_len),
            (srrctl(0), 2 | srrctl::DESCTYPE_ADV_ONEBUF),
            (rxdctl(0), xdctl::QUEUE_ENABLE),
            (rdt(0), N - 1),
            (
                RCTL,
                rctl::EN | rctl::SECRC | rctl::UPE | rctl::MPE | rctl::BAM,
            ),
            (TSYNCTXCTL, TsyncTxCtl::ENABLED.bits()),
        ];
        for (off, v) in setup {
            dp.wr(off, v);
        }
        dp.dev.poll(&mut dp.host);
        dp.rd(ICR);
        dp.host.take();
        dp
    }

    fn rd(&mut self, off: u32) -> u32 {
        self.dev.read32(0, off, &mut self.host)
    }

    fn wr(&mut self, off: u32, v: u32) {
        self.dev.write32(0, off, v, &mut self.host);
    }

    /// Transmits `frame` with MAC_TSTAMP when `stamp`; returns the true departure instant
    /// (the engine runs now; the first frame leaves `tx_pipeline_ns` later).
    fn transmit(&mut self, frame: &[u8], stamp: bool) -> u64 {
        let i = self.sent % N;
        let buf = TXB + u64::from(i) * STRIDE;
        assert!(self.host.write(buf, frame));
        let len = frame.len() as u32;
        let ts = if stamp { txd::MAC_TSTAMP } else { 0 };
        let cmd = txd::DTYP_DATA | txd::DEXT | txd::IFCS | txd::EOP | txd::RS | ts | len;
        let desc = [
            buf.to_le_bytes(),
            (u64::from(len << 14) << 32 | u64::from(cmd)).to_le_bytes(),
        ];
        assert!(
            self.host
                .write(TXR + u64::from(i) * 16, desc.as_flattened())
        );
        self.sent += 1;
        let departure = self.clock.now() + DEFAULT_TX_PIPELINE_NS;
        self.wr(tdt(0), self.sent % N);
        self.dev.poll(&mut self.host);
        departure
    }

    /// Delivers `frame` at true time `arrival` (≥ now) through the loopback and polls.
    fn arrive(&mut self, frame: &[u8], arrival: u64) -> Option<Got> {
        let wire = self.dev.nic_mut().wire_mut().unwrap();
        wire.transmit(frame, arrival - DELAY);
        self.clock.set(arrival);
        self.dev.poll(&mut self.host);
        self.take()
    }

    /// The next written-back RX descriptor, its slot given back to the ring.
    fn take(&mut self) -> Option<Got> {
        let i = self.seen % N;
        let desc = RXR + u64::from(i) * 16;
        let status = self.host.read_u32(desc + 8);
        if status & 1 == 0 {
            return None;
        }
        let len = (self.host.read_u32(desc + 12) & 0xFFFF) as usize;
        let buf = self.host.read(RXB + u64::from(i) * STRIDE, len).unwrap();
        let addr = RXB + u64::from(i) * STRIDE;
        assert!(
            self.host
                .write(desc, &[addr.to_le_bytes(), [0; 8]].concat())
        );
        self.seen += 1;
        self.wr(rdt(0), (self.seen + N - 1) % N);
        Some(Got { status, buf })
    }

    /// SYSTIM's raw value at true instant `t` (the exact stamp of an event then).
    fn raw_at(&self, t: u64) -> u64 {
        let law = self.dev.phc_law();
        law.raw_at(t)
    }
}

/// A PTPv2 message over L2: `msg_type` (0 Sync, 1 Delay_Req, 8 Follow_Up), `seq`.
fn ptp_l2(msg_type: u8, seq: u16) -> Vec<u8> {
    let mut f = vec![
        0x01, 0x1B, 0x19, 0, 0, 0, 0x02, 0, 0, 0, 0, 0x01, 0x88, 0xF7,
    ];
    let mut p = [0u8; 44];
    p[0] = msg_type;
    p[1] = 2;
    p[20..26].copy_from_slice(&[0xAA, 0xBB, 0xCC, 0xDD, 0xEE, 0xFF]);
    p[30..32].copy_from_slice(&seq.to_be_bytes());
    f.extend_from_slice(&p);
    // Padded to the 60-byte minimum, as the sender's MAC does (TCTL.PSP): shorter is a runt.
    f.resize(60, 0);
    f
}

/// A frame that is not PTP (ethertype 0x0806, ARP).
fn not_ptp() -> Vec<u8> {
    let mut f = vec![0xFF; 6];
    f.extend_from_slice(&[0x02, 0, 0, 0, 0, 2, 0x08, 0x06]);
    f.resize(60, 0);
    f
}

// --- TX (§7.5) ---

#[test]
fn i210_tx_pair_latches_once_raises_txts_and_the_h_read_releases_it() {
    let mut d = Dp::new(IgbPart::I210);
    d.wr(IMS, IntCause::TS.bits());
    d.wr(TSIM, TsCause::TXTS.bits());
    let dep = d.transmit(&ptp_l2(0, 1), true);
    assert_eq!(
        d.rd(TSYNCTXCTL) & TsyncTxCtl::VALID.bits(),
        TsyncTxCtl::VALID.bits()
    );
    assert_eq!(d.host.take(), vec![0], "ICR.TS raised the (MSI) interrupt");
    assert_eq!(d.rd(ICR) & IntCause::TS.bits(), IntCause::TS.bits());
    assert_eq!(d.rd(TSICR), TsCause::TXTS.bits());
    // The stamp is PHC(departure) − the i210's 1 Gb/s TX latency, s:ns.
    let want = crate::phc::SysTime::from_ns(d.dev.phc_law().ns_at(dep) - I210_LAT_1G.0);
    let (l, h) = (d.rd(TXSTMPL), d.rd(TSYNCTXCTL));
    assert_eq!(l, want.nsec);
    assert_ne!(
        h & TsyncTxCtl::VALID.bits(),
        0,
        "a TXSTMPL read alone releases nothing"
    );
    // A second request while the pair is full is lost.
    d.clock.advance(S);
    d.transmit(&ptp_l2(0, 2), true);
    assert_eq!(d.dev.stats().tx_stamps_lost, 1);
    assert_eq!(d.rd(TXSTMPL), want.nsec, "the first stamp stays");
    assert_eq!(d.rd(TXSTMPH), want.sec);
    assert_eq!(
        d.rd(TSYNCTXCTL) & TsyncTxCtl::VALID.bits(),
        0,
        "the TXSTMPH read released it"
    );
    d.clock.advance(S);
    let dep3 = d.transmit(&ptp_l2(0, 3), true);
    assert!(d.dev.tx_stamp_valid());
    let want3 = d.dev.phc_law().ns_at(dep3) - I210_LAT_1G.0;
    assert_eq!(
        (d.rd(TXSTMPL), d.rd(TXSTMPH)),
        ((want3 % S) as u32, (want3 / S) as u32)
    );
    assert_eq!(d.dev.stats().tx_stamps_latched, 2);
}

#[test]
fn e82576_tx_stamp_is_the_raw_count_and_raises_no_interrupt() {
    let mut d = Dp::new(IgbPart::E82576);
    d.wr(IMS, IntCause::TS.bits());
    d.wr(TSIM, TsCause::TXTS.bits());
    let dep = d.transmit(&ptp_l2(1, 9), true);
    assert!(
        d.dev.tx_stamp_valid(),
        "VALID is the only sign: the driver polls it"
    );
    assert!(d.host.take().is_empty(), "no TXTS interrupt on the 82576");
    assert_eq!(d.rd(ICR) & IntCause::TS.bits(), 0);
    let raw = d.raw_at(dep);
    assert_eq!(raw >> 19, d.dev.phc_law().ns_at(dep), "count = ns << 19");
    assert_eq!(
        (d.rd(TXSTMPL), d.rd(TXSTMPH)),
        (raw as u32, (raw >> 32) as u32)
    );
    assert!(!d.dev.tx_stamp_valid());
}

#[test]
fn no_stamp_without_mac_tstamp_or_with_tsynctxctl_disabled() {
    let mut d = Dp::new(IgbPart::I350);
    d.transmit(&ptp_l2(0, 1), false);
    assert!(!d.dev.tx_stamp_valid());
    d.wr(TSYNCTXCTL, 0);
    d.transmit(&ptp_l2(0, 2), true);
    assert!(!d.dev.tx_stamp_valid());
    assert_eq!(d.dev.stats().tx_frames, 2);
}

// --- RX in the buffer (§8.2) ---

#[test]
fn i350_and_i210_put_the_raw_stamp_at_byte_8_of_a_16_byte_header() {
    for part in [IgbPart::I350, IgbPart::I210] {
        let mut d = Dp::new(part);
        let s = d.rd(srrctl(0));
        d.wr(srrctl(0), s | srrctl::TIMESTAMP);
        d.wr(
            TSYNCRXCTL,
            TsyncRxCtl::ENABLED.bits() | (RxTsType::All as u32),
        );
        let at = 3 * S + 77;
        let frame = not_ptp();
        if part == IgbPart::I210 {
            let g = d.arrive(&frame, at).unwrap();
            assert_eq!(
                g.status & RxStatus::TSIP.bits(),
                0,
                "i210 also needs RXPBS.CFG_TS_EN"
            );
            d.wr(RXPBS, rxpbs::CFG_TS_EN);
        }
        let at = at + S;
        let g = d.arrive(&frame, at).unwrap();
        assert_ne!(g.status & RxStatus::TSIP.bits(), 0, "{part:?}");
        assert_eq!(&g.buf[..8], &[0; 8], "dwords 0-1 reserved");
        let stamp = u64::from_le_bytes(g.buf[8..16].try_into().unwrap());
        let lat = if part == IgbPart::I210 {
            I210_LAT_1G.1
        } else {
            0
        };
        let ns = d.dev.phc_law().ns_at(at) + lat;
        let want = match part {
            IgbPart::I350 => ns,
            _ => ((ns / S) << 32) | (ns % S),
        };
        assert_eq!(stamp, want, "{part:?}");
        assert_eq!(&g.buf[16..], &frame[..], "the frame follows the header");
        assert_eq!(d.dev.stats().rx_stamped, 1);
    }
}

// --- RX registers (§8.3) ---

/// 82576 PTP RX set-up as Linux's V2 event filter: ETQF(3) for 0x88F7 with the 1588 bit,
/// TSYNCRXCTL = ENABLED | EVENT_V2.
fn e82576_rx(d: &mut Dp) {
    d.wr(etqf(3), etqf::FILTER_ENABLE | etqf::F1588 | 0x88F7);
    d.wr(
        TSYNCRXCTL,
        TsyncRxCtl::ENABLED.bits() | (RxTsType::EventV2 as u32),
    );
}

#[test]
fn e82576_rxstmp_holds_until_rxstmph_is_read_and_a_second_frame_goes_unstamped() {
    let mut d = Dp::new(IgbPart::E82576);
    e82576_rx(&mut d);
    let t1 = 2 * S;
    let g = d.arrive(&ptp_l2(0, 41), t1).unwrap();
    assert_eq!(g.status & RxStatus::TS.bits(), RxStatus::TS.bits());
    assert_eq!(
        g.status & RxStatus::TSIP.bits(),
        0,
        "register mode: no header"
    );
    assert_eq!(
        d.rd(TSYNCRXCTL) & TsyncRxCtl::VALID.bits(),
        TsyncRxCtl::VALID.bits()
    );
    // Second Sync before RXSTMPH is read: received, but not stamped.
    let g2 = d.arrive(&ptp_l2(0, 42), t1 + S).unwrap();
    assert_eq!(g2.status & RxStatus::TS.bits(), 0);
    assert_eq!(d.dev.stats().rx_stamps_missed_held, 1);
    let raw = d.raw_at(t1);
    assert_eq!(d.rd(RXSTMPL), raw as u32, "still the first frame's stamp");
    assert_eq!(d.rd(RXSATRH) >> 16, 41, "sequenceId of the stamped frame");
    assert_eq!(d.rd(RXSATRL), 0xDDCC_BBAA, "source identity bytes 0-3");
    assert_ne!(
        d.rd(TSYNCRXCTL) & TsyncRxCtl::VALID.bits(),
        0,
        "RXSTMPL/RXSATR reads keep it"
    );
    assert_eq!(d.rd(RXSTMPH), (raw >> 32) as u32);
    assert_eq!(
        d.rd(TSYNCRXCTL) & TsyncRxCtl::VALID.bits(),
        0,
        "RXSTMPH released it"
    );
    let t3 = t1 + 2 * S;
    let g3 = d.arrive(&ptp_l2(1, 43), t3).unwrap();
    assert_ne!(g3.status & RxStatus::TS.bits(), 0);
    assert_eq!(d.rd(RXSTMPL), d.raw_at(t3) as u32);
}

#[test]
fn e82576_filters_general_messages_non_ptp_and_missing_etqf() {
    let mut d = Dp::new(IgbPart::E82576);
    d.wr(
        TSYNCRXCTL,
        TsyncRxCtl::ENABLED.bits() | (RxTsType::EventV2 as u32),
    );
    let g = d.arrive(&ptp_l2(0, 1), S).unwrap();
    assert_eq!(g.status & RxStatus::TS.bits(), 0, "L2 needs a 1588 ETQF");
    e82576_rx(&mut d);
    for (t, f) in [(2 * S, ptp_l2(8, 2)), (3 * S, not_ptp())] {
        let g = d.arrive(&f, t).unwrap();
        assert_eq!(g.status & RxStatus::TS.bits(), 0, "Follow_Up / non-PTP");
    }
    assert!(!d.dev.rx_stamp_valid());
    // L2_V2 with TSYNCRXCFG's V2 message type (b11:8) = Delay_Req.
    d.wr(TSYNCRXCFG, 1 << 8);
    d.wr(
        TSYNCRXCTL,
        TsyncRxCtl::ENABLED.bits() | (RxTsType::L2V2 as u32),
    );
    let sync = d.arrive(&ptp_l2(0, 3), 4 * S).unwrap();
    let req = d.arrive(&ptp_l2(1, 4), 5 * S).unwrap();
    assert_eq!(
        (
            sync.status & RxStatus::TS.bits(),
            req.status & RxStatus::TS.bits()
        ),
        (0, RxStatus::TS.bits())
    );
    assert_eq!(d.dev.stats().rx_stamped, 1);
}

#[test]
fn e82576_rx_stamp_sets_no_header_even_with_the_buffer_enables() {
    let mut d = Dp::new(IgbPart::E82576);
    let s = d.rd(srrctl(0));
    d.wr(srrctl(0), s | srrctl::TIMESTAMP);
    d.wr(
        TSYNCRXCTL,
        TsyncRxCtl::ENABLED.bits() | (RxTsType::All as u32),
    );
    let g = d.arrive(&ptp_l2(0, 1), S).unwrap();
    assert_eq!(
        g.status & (RxStatus::TS.bits() | RxStatus::TSIP.bits()),
        0,
        "TYPE ALL is not possible"
    );
    assert_eq!(
        d.dev.nic().unimplemented_accesses().len(),
        1,
        "recorded as unmodelled"
    );
}

/// Linux igb's loopback self-test set-up for the i210 (igb_ethtool.c
/// igb_integrated_phy_loopback): BMCR = 0x4140 (loopback, 1000 Mb/s full duplex) through
/// MDIC, then CTRL forced. Its frame (dst broadcast) comes back on RX at once and never
/// reaches the cable; clearing loopback sends the next one to the cable again.
#[test]
fn phy_loopback_returns_frames_to_rx_and_not_to_the_wire() {
    let mut d = Dp::new(IgbPart::I210);
    let mdic_write = |reg: u32, v: u32| 1 << 26 | reg << 16 | v;
    d.wr(MDIC, mdic_write(0, 0x4140));
    // E1000_CTRL_SPD_1000 is b9, E1000_CTRL_FD b0.
    d.wr(
        CTRL,
        Ctrl::SLU.bits() | Ctrl::FRCSPD.bits() | Ctrl::FRCDPX.bits() | 1 << 9 | 1,
    );
    let mut frame = vec![0xFF; 256];
    frame[138] = 0xBE;
    frame[140] = 0xAF;
    d.transmit(&frame, false);
    let got = d
        .take()
        .expect("looped back at once, without the cable's delay");
    assert_eq!(got.buf, frame);
    assert_eq!(d.dev.nic().wire_stats().sent, 0);
    assert_eq!(d.dev.stats().tx_loopback, 1);
    d.wr(MDIC, mdic_write(0, 0x1140));
    d.transmit(&frame, false);
    assert!(d.take().is_none(), "on the cable now");
    assert_eq!(d.dev.nic().wire_stats().sent, 1);
}

#[test]
fn legacy_intx_level_follows_icr_and_ims_at_the_e1000_offsets() {
    let mut d = Dp::new(IgbPart::I210);
    d.transmit(&not_ptp(), false);
    assert!(
        !d.dev.nic().intx_level(),
        "TXDW pending but masked: INTx stays low"
    );
    d.wr(IMS, IntCause::TXDW.bits());
    assert!(
        d.dev.nic().intx_level(),
        "TXDW pending and enabled: INTx asserted"
    );
    assert_ne!(d.rd(ICR) & IntCause::TXDW.bits(), 0);
    assert!(!d.dev.nic().intx_level(), "the ICR read cleared it");
}

proptest::proptest! {
    /// The 82576 filter's frame parser takes any bytes without panicking, and whatever it
    /// finds, the match under any TSYNCRXCTL/TSYNCRXCFG/ETQF is total.
    #[test]
    fn ptp_parser_and_filter_are_total(
        frame in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..120),
        ctl in proptest::prelude::any::<u32>(),
        cfg in proptest::prelude::any::<u32>(),
        f in proptest::prelude::any::<u32>(),
    ) {
        if let Some(m) = super::stamping::parse_ptp(&frame) {
            let ctl = intel_regs::igb::TsyncRxCtl::from_bits_retain(ctl);
            let _ = super::stamping::ptp_match(&m, ctl, cfg, |_| f);
        }
    }
}

/// A PTP message over IPv4/UDP to port `port`: `ptp` is the PTP payload.
fn ptp_udp(port: u16, ptp: &[u8]) -> Vec<u8> {
    let mut f = vec![
        0x01, 0x00, 0x5E, 0, 1, 0x81, 0x02, 0, 0, 0, 0, 0x01, 0x08, 0x00,
    ];
    let mut ip = [0u8; 20];
    ip[0] = 0x45;
    ip[9] = 17;
    f.extend_from_slice(&ip);
    f.extend_from_slice(&[0x01, 0x3F]);
    f.extend_from_slice(&port.to_be_bytes());
    f.extend_from_slice(&[0, 0, 0, 0]);
    f.extend_from_slice(ptp);
    f
}

#[test]
fn e82576_stamps_udp_event_messages_and_v1_by_control_field() {
    let mut d = Dp::new(IgbPart::E82576);
    d.wr(
        TSYNCRXCTL,
        TsyncRxCtl::ENABLED.bits() | (RxTsType::EventV2 as u32),
    );
    let v2_sync = &ptp_l2(0, 7)[14..];
    let general = d.arrive(&ptp_udp(320, v2_sync), S).unwrap();
    assert_eq!(
        general.status & RxStatus::TS.bits(),
        0,
        "port 320 is not the event port"
    );
    let g = d.arrive(&ptp_udp(319, v2_sync), 2 * S).unwrap();
    assert_ne!(g.status & RxStatus::TS.bits(), 0, "UDP needs no ETQF");
    assert_eq!(d.rd(RXSATRH) >> 16, 7);
    d.rd(RXSTMPH);
    // PTPv1 (versionPTP 1 as a big-endian u16), control field 1 = Delay_Req at byte 32.
    let mut v1 = [0u8; 40];
    v1[1] = 1;
    v1[32] = 1;
    d.wr(
        TSYNCRXCTL,
        TsyncRxCtl::ENABLED.bits() | (RxTsType::L4V1 as u32),
    );
    d.wr(TSYNCRXCFG, 0);
    let sync = d.arrive(&ptp_udp(319, &v1), 3 * S).unwrap();
    d.wr(TSYNCRXCFG, 1);
    let req = d.arrive(&ptp_udp(319, &v1), 4 * S).unwrap();
    assert_eq!(
        (
            sync.status & RxStatus::TS.bits(),
            req.status & RxStatus::TS.bits()
        ),
        (0, RxStatus::TS.bits())
    );
    assert_eq!(d.rd(RXSTMPL), d.raw_at(4 * S) as u32);
}
