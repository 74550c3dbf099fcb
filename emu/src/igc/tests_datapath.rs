//! Behaviour tests of the i225 data path (part 2), written from intel-timesync.md §7–§10 and
//! seed 000 patch 4/4, not from a driver. Deterministic: a [`VirtualClock`] the test advances
//! and a [`MemHost`] holding the rings and buffers; one test runs the real-time model thread.

use std::sync::{Arc, Mutex};

use super::*;
use crate::clock::VirtualClock;
use crate::host::MemHost;
use crate::phc::NS_PER_S;
use crate::wire::{Cable, Disconnected, Loopback, WireFrame};

mod offload;
mod txsync;

const S: u64 = NS_PER_S;
/// True time at the start of every test.
const START: u64 = 1_000_000;
/// SYSTIM at `START`.
const SYSTIM0: u64 = 1_700_000_000 * S + 123_456_789;
/// Loopback cable delay.
const DELAY: u64 = 300;
const N: u32 = 8;
const TX_RING: u64 = 0x10_0000;
const TX_BUF: u64 = 0x20_0000;
const RX_RING: u64 = 0x30_0000;
const RX_BUF: u64 = 0x40_0000;
const BUF: u64 = 0x800;
/// MSI-X vectors: "other", RX queue 0, TX queue 0.
const OTHER: u32 = 0;
const RXV: u32 = 1;
const TXV: u32 = 2;
/// TX latency at 2.5 Gb/s, RX latency at 2.5 Gb/s (§8.4 current igc).
const TX_LAT_2500: u64 = 1325;
const RX_LAT_2500: u64 = 1485;

/// Records what the model transmits (frame, departure) and never delivers anything.
#[derive(Clone, Default)]
struct Recorder(Arc<Mutex<Vec<Sent>>>);

/// A transmitted frame and its departure instant.
type Sent = (Vec<u8>, u64);

impl Recorder {
    fn take(&self) -> Vec<Sent> {
        std::mem::take(&mut *self.0.lock().unwrap())
    }
}

impl WirePort for Recorder {
    fn transmit(&mut self, frame: &[u8], departure_ns: u64) {
        self.0.lock().unwrap().push((frame.to_vec(), departure_ns));
    }
    fn poll_rx(&mut self, _now_ns: u64) -> Option<WireFrame> {
        None
    }
    fn next_arrival(&self) -> Option<u64> {
        None
    }
}

/// Records the cable-loss totals a model reports.
#[derive(Default)]
struct LossObserver(Mutex<Vec<u64>>);

impl crate::truth::ModelObserver for LossObserver {
    fn phc_law_update(&self, change: &mut dyn FnMut() -> crate::phc::PhcLaw) {
        change();
    }
    fn bar_read(&self) {}
    fn bar_write(&self) {}
    fn wire_lost(&self, total: u64) {
        self.0.lock().unwrap().push(total);
    }
}

/// A received frame as the write-back describes it.
#[derive(Debug)]
struct Rx {
    status: u32,
    /// Descriptor length (header included).
    len: usize,
    /// The timestamp header's dwords when TSIP.
    header: Option<[u32; 4]>,
    frame: Vec<u8>,
}

/// RCTL of the test rig: igc's bits plus unicast and multicast promiscuous (as igcd).
const RCTL_PROMISC: u32 = rctl::EN | rctl::BAM | rctl::SECRC | rctl::LPE | rctl::UPE | rctl::MPE;

struct Rig {
    clock: VirtualClock,
    dev: I225,
    host: MemHost,
    tx_tail: u32,
    rx_next: u32,
    rx_tail: u32,
}

impl Rig {
    /// A brought-up device on a loopback plug.
    fn new() -> Self {
        Self::with(|_| {}, Box::new(Loopback::new(DELAY)))
    }

    fn with(f: impl FnOnce(&mut I225Config), wire: Box<dyn WirePort>) -> Self {
        let clock = VirtualClock::new(START);
        let mut cfg = I225Config::i225(clock.source());
        cfg.initial_systim_ns = SYSTIM0;
        f(&mut cfg);
        let mut host = MemHost::new();
        for base in [TX_RING, TX_BUF, RX_RING, RX_BUF] {
            host.add_region(base, 0x1_0000);
        }
        let mut dev = I225::new(cfg);
        dev.attach_wire(wire);
        let mut r = Self {
            clock,
            dev,
            host,
            tx_tail: 0,
            rx_next: 0,
            rx_tail: 0,
        };
        r.bring_up();
        r
    }

    fn rd(&mut self, off: u32) -> u32 {
        self.dev.read32(0, off, &mut self.host)
    }

    fn wr(&mut self, off: u32, v: u32) {
        self.dev.write32(0, off, v, &mut self.host);
    }

    /// MSI-X vectors raised since the last call.
    fn irqs(&mut self) -> Vec<u32> {
        self.host.take().into_iter().map(u32::from).collect()
    }

    fn poll(&mut self) -> Option<Duration> {
        self.dev.poll(&mut self.host)
    }

    /// §10.2 steps 2–4 (no PHY dance: the model's link is up with SLU).
    fn bring_up(&mut self) {
        self.wr(CTRL, Ctrl::SLU.bits());
        self.wr(txdctl(0), 0);
        self.wr(tdlen(0), N * 16);
        self.wr(tdbal(0), TX_RING as u32);
        self.wr(tdbah(0), (TX_RING >> 32) as u32);
        self.wr(tdh(0), 0);
        self.wr(tdt(0), 0);
        self.wr(txdctl(0), 8 | 1 << 8 | 16 << 16 | xdctl::QUEUE_ENABLE);
        self.wr(
            TCTL,
            tctl::EN | tctl::PSP | tctl::RTLC | 15 << tctl::CT_SHIFT,
        );
        self.wr(rxdctl(0), 0);
        self.wr(rdbal(0), RX_RING as u32);
        self.wr(rdbah(0), (RX_RING >> 32) as u32);
        self.wr(rdlen(0), N * 16);
        self.wr(rdh(0), 0);
        self.wr(rdt(0), 0);
        self.wr(
            srrctl(0),
            (256 << 2) | (2048 >> 10) | srrctl::DESCTYPE_ADV_ONEBUF,
        );
        for i in 0..N {
            self.post_rx(i);
        }
        self.wr(rxdctl(0), 8 | 8 << 8 | 4 << 16 | xdctl::QUEUE_ENABLE);
        self.rx_tail = N - 1;
        self.wr(rdt(0), self.rx_tail);
        // Promiscuous, as igcd programs it (the address filter has tests of its own).
        self.wr(RCTL, RCTL_PROMISC);
        self.poll();
        self.rd(ICR);
        self.host.take();
        assert!(self.dev.link_up());
    }

    fn post_rx(&mut self, i: u32) {
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&(RX_BUF + i as u64 * BUF).to_le_bytes());
        assert!(self.host.write(RX_RING + i as u64 * 16, &d));
    }

    /// Posts `frame` in one data descriptor with `extra` command bits; returns its index.
    fn send(&mut self, frame: &[u8], extra: u32) -> u32 {
        let i = self.tx_tail;
        self.write_tx_desc(
            i,
            TX_BUF + i as u64 * BUF,
            frame,
            txd::EOP | txd::RS | extra,
        );
        self.tx_tail = (i + 1) % N;
        self.wr(tdt(0), self.tx_tail);
        i
    }

    fn write_tx_desc(&mut self, i: u32, buf: u64, data: &[u8], cmd: u32) {
        if !data.is_empty() {
            assert!(self.host.write(buf, data));
        }
        let len = data.len() as u32;
        let mut d = [0u8; 16];
        d[..8].copy_from_slice(&buf.to_le_bytes());
        let cmd = txd::DTYP_DATA | txd::DEXT | txd::IFCS | cmd | (len & txd::DTALEN_MASK);
        d[8..12].copy_from_slice(&cmd.to_le_bytes());
        d[12..16].copy_from_slice(&(len << txd::PAYLEN_SHIFT).to_le_bytes());
        assert!(self.host.write(TX_RING + i as u64 * 16, &d));
    }

    fn tx_dd(&mut self, i: u32) -> bool {
        self.host.read_u32(TX_RING + i as u64 * 16 + 12) & TxStatus::DD.bits() != 0
    }

    /// The next completed RX descriptor, re-posting a buffer for it.
    fn take_rx(&mut self) -> Option<Rx> {
        let i = self.rx_next;
        let desc = RX_RING + i as u64 * 16;
        let status = self.host.read_u32(desc + 8);
        if status & RxStatus::DD.bits() == 0 {
            return None;
        }
        let len = (self.host.read_u32(desc + 12) & 0xFFFF) as usize;
        let buf = self.host.read(RX_BUF + i as u64 * BUF, len).unwrap();
        let (header, frame) = if status & RxStatus::TSIP.bits() != 0 {
            let (h, f) = buf.split_at(TS_HDR_LEN);
            let dw = |k: usize| u32::from_le_bytes(h[4 * k..4 * k + 4].try_into().unwrap());
            (Some([dw(0), dw(1), dw(2), dw(3)]), f.to_vec())
        } else {
            (None, buf)
        };
        self.rx_next = (i + 1) % N;
        // Give the slot at the old tail back and advance RDT (§10.2 refill).
        let t = self.rx_tail;
        self.post_rx(t);
        self.post_rx(i);
        self.rx_tail = (t + 1) % N;
        self.wr(rdt(0), self.rx_tail);
        Some(Rx {
            status,
            len,
            header,
            frame,
        })
    }

    /// Injects `frame` arriving at `arrival` through the attached loopback and polls at
    /// `arrival` (or now, if later).
    fn inject(&mut self, frame: &[u8], arrival: u64) -> Option<Rx> {
        let delay = DELAY;
        self.dev
            .wire_mut()
            .unwrap()
            .transmit(frame, arrival - delay);
        if self.clock.now() < arrival {
            self.clock.set(arrival);
        }
        self.poll();
        self.take_rx()
    }

    /// MSI-X as igc sets it up (§6), with queue 0 RX on `RXV`, TX on `TXV`.
    fn msix_setup(&mut self) {
        self.wr(
            GPIE,
            gpie::MSIX_MODE | gpie::PBA | gpie::EIAME | gpie::NSICR,
        );
        self.wr(IVAR_MISC, (OTHER | IVAR_VALID) << 8);
        self.wr(IVAR0, (RXV | IVAR_VALID) | (TXV | IVAR_VALID) << 8);
        let mask = 1 << OTHER | 1 << RXV | 1 << TXV;
        self.wr(EIAC, mask);
        self.wr(EIAM, mask);
        self.wr(EIMS, mask);
        self.wr(
            IMS,
            IntCause::LSC.bits()
                | IntCause::DOUTSYNC.bits()
                | IntCause::DRSTA.bits()
                | IntCause::TS.bits(),
        );
        self.wr(TSIM, TsCause::TXTS.bits());
        self.host.take();
    }

    /// TX stamping on (§7.4 enable value) and RX stamping with filter `ty` (§8.1).
    fn enable_ts(&mut self, ty: u32) {
        self.wr(
            TSYNCTXCTL,
            TsyncTxCtl::ENABLED.bits() | TsyncTxCtl::TXSYNSIG.bits(),
        );
        let pbs = self.rd(RXPBS);
        self.wr(RXPBS, pbs | rxpbs::CFG_TS_EN);
        let s = self.rd(srrctl(0));
        self.wr(srrctl(0), s | srrctl::TIMESTAMP);
        self.wr(
            TSYNCRXCTL,
            TsyncRxCtl::ENABLED.bits() | ty | TsyncRxCtl::RXSYNSIG.bits(),
        );
    }

    /// The "other" vector's handler (§6): ICR, TSICR if ICR.TS, re-arm. It re-arms the TX
    /// vector too, so every TXDW message shows in the tests.
    fn handle_other(&mut self) -> u32 {
        let icr = self.rd(ICR);
        let ts = if icr & IntCause::TS.bits() != 0 {
            self.rd(TSICR)
        } else {
            0
        };
        self.wr(EIMS, 1 << OTHER | 1 << TXV);
        ts
    }

    /// Reads TX set `n` as L then H (§7.1): the stamp in ns.
    fn read_set(&mut self, n: usize) -> u64 {
        let l = self.rd(TXSTMPL[n]);
        let h = self.rd(TXSTMPH[n]);
        h as u64 * S + l as u64
    }
}

/// SYSTIM at true time `t` for a PHC started at (`START`, `SYSTIM0`) with crystal error
/// `ppb` and TIMINCA 0, from the §4 equation: the 2^32·3200 tick factors cancel exactly.
fn phc_at(t: u64, ppb: i64) -> u64 {
    let dt = (t - START) as u128;
    SYSTIM0 + (dt * (1_000_000_000i128 + ppb as i128) as u128 / 1_000_000_000) as u64
}

fn stamp_ns(h: [u32; 4]) -> u64 {
    h[3] as u64 * S + h[2] as u64
}

// --- Frame builders ---

/// A frame as it is on the cable: padded to the 60-byte minimum (without FCS), as the
/// sender's MAC does with TCTL.PSP; a shorter one is a runt the receiver drops.
fn eth(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0x01, 0x1b, 0x19, 0, 0, 0, 0x02, 0, 0, 0, 0, 1];
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f.resize(f.len().max(60), 0);
    f
}

fn vlan(ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut tagged = vec![0x00, 0x05];
    tagged.extend_from_slice(&ethertype.to_be_bytes());
    tagged.extend_from_slice(payload);
    eth(0x8100, &tagged)
}

/// A 44-byte PTP header: messageType, versionPTP.
fn ptp(msg_type: u8, version: u8) -> Vec<u8> {
    let mut p = vec![0u8; 44];
    p[0] = msg_type;
    p[1] = version;
    p[2..4].copy_from_slice(&44u16.to_be_bytes());
    p
}

/// PTPv1 header start: versionPTP = 1 as a 16-bit field.
fn ptp_v1() -> Vec<u8> {
    let mut p = vec![0u8; 124];
    p[1] = 1;
    p
}

fn ipv4_udp(dport: u16, payload: &[u8]) -> Vec<u8> {
    let total = (20 + 8 + payload.len()) as u16;
    let mut ip = vec![0x45, 0];
    ip.extend_from_slice(&total.to_be_bytes());
    ip.extend_from_slice(&[0, 1, 0x40, 0, 1, 17, 0, 0, 10, 0, 0, 1, 224, 0, 1, 129]);
    ip.extend_from_slice(&319u16.to_be_bytes());
    ip.extend_from_slice(&dport.to_be_bytes());
    ip.extend_from_slice(&(8 + payload.len() as u16).to_be_bytes());
    ip.extend_from_slice(&[0, 0]);
    ip.extend_from_slice(payload);
    ip
}

fn test_frame(len: usize, seed: u8) -> Vec<u8> {
    let mut f = eth(0x88B5, &[]);
    f.truncate(14);
    f.extend((0..len - 14).map(|i| (i as u8).wrapping_mul(7) ^ seed));
    f
}

// --- TX → wire → RX ---

#[test]
fn frame_goes_tx_loopback_rx_with_write_backs() {
    let mut r = Rig::new();
    let frame = test_frame(100, 1);
    let i = r.send(&frame, 0);
    assert!(!r.tx_dd(i), "nothing happens before the model runs");
    let next = r.poll();
    assert!(r.tx_dd(i), "DD written back for RS");
    assert_eq!(r.rd(tdh(0)), 1);
    assert_ne!(r.rd(ICR) & IntCause::TXDW.bits(), 0);
    // Departure = now + 1 µs pipeline; arrival DELAY later.
    let arrival = START + DEFAULT_TX_PIPELINE_NS + DELAY;
    assert_eq!(next, Some(Duration::from_nanos(arrival - START)));
    r.clock.set(arrival - 1);
    r.poll();
    assert!(r.take_rx().is_none(), "not arrived yet");
    r.clock.set(arrival);
    assert_eq!(r.poll(), None, "nothing more scheduled");
    let rx = r.take_rx().expect("received");
    assert_eq!(rx.status, RxStatus::DD.bits() | RxStatus::EOP.bits());
    assert_eq!(rx.len, 100);
    assert_eq!(rx.frame, frame);
    assert_eq!(r.rd(rdh(0)), 1);
    assert_ne!(r.rd(ICR) & IntCause::RXT0.bits(), 0);
    let st = r.dev.stats();
    assert_eq!((st.tx_frames, st.rx_frames, st.rx_bytes), (1, 1, 100));

    // TCTL.PSP pads a short frame to 60 bytes; without SECRC the FCS follows the frame.
    r.wr(RCTL, rctl::EN | rctl::UPE | rctl::MPE);
    let short = test_frame(20, 2);
    r.send(&short, 0);
    r.poll();
    r.clock.advance(10_000);
    r.poll();
    let rx = r.take_rx().unwrap();
    assert_eq!(rx.len, 64);
    assert_eq!(&rx.frame[..20], &short[..]);
    assert!(rx.frame[20..60].iter().all(|&b| b == 0));
}

#[test]
fn multi_buffer_frame_waits_for_its_eop() {
    let mut r = Rig::new();
    let frame = test_frame(300, 3);
    let (a, rest) = frame.split_at(100);
    let (b, c) = rest.split_at(150);
    r.write_tx_desc(0, TX_BUF, a, 0);
    r.write_tx_desc(1, TX_BUF + BUF, b, txd::RS);
    r.wr(tdt(0), 2);
    r.poll();
    assert_eq!(r.rd(tdh(0)), 0, "EOP not posted yet: the frame waits");
    r.write_tx_desc(2, TX_BUF + 2 * BUF, c, txd::EOP | txd::RS);
    r.wr(tdt(0), 3);
    r.poll();
    assert_eq!(r.rd(tdh(0)), 3);
    assert!(!r.tx_dd(0) && r.tx_dd(1) && r.tx_dd(2), "DD only where RS");
    r.clock.advance(10_000);
    r.poll();
    assert_eq!(r.take_rx().unwrap().frame, frame);
}

#[test]
fn back_to_back_frames_depart_a_serialisation_time_apart() {
    let rec = Recorder::default();
    let mut r = Rig::with(|_| {}, Box::new(rec.clone()));
    r.send(&test_frame(100, 0), 0);
    r.send(&test_frame(100, 0), 0);
    r.poll();
    let sent = rec.take();
    let dep = START + DEFAULT_TX_PIPELINE_NS;
    // (100 + 24) bytes at 2.5 Gb/s = 396.8 ns, rounded up.
    assert_eq!(
        sent.iter().map(|s| s.1).collect::<Vec<_>>(),
        [dep, dep + 397]
    );
}

// --- TX timestamps (§7) ---

#[test]
fn tx_stamp_is_phc_at_departure_minus_tx_latency() {
    let rec = Recorder::default();
    let ppb = 12_345;
    let mut r = Rig::with(|c| c.osc_error_ppb = ppb, Box::new(rec.clone()));
    r.enable_ts(RxTsType::All as u32);
    r.clock.advance(7_777);
    r.send(&test_frame(60, 0), txd::MAC_TSTAMP);
    r.poll();
    let dep = rec.take()[0].1;
    assert_eq!(dep, START + 7_777 + DEFAULT_TX_PIPELINE_NS);
    assert_eq!(
        r.rd(TSYNCTXCTL) & TsyncTxCtl::TXTT_ANY.bits(),
        TsyncTxCtl::txtt(0).bits()
    );
    // A driver adding the §8.4 TX latency gets exactly PHC(departure).
    assert_eq!(r.read_set(0) + TX_LAT_2500, phc_at(dep, ppb));
    assert_eq!(r.dev.stats().tx_stamps_latched, 1);

    // At 100 Mb/s the latency is 58 ns.
    r.dev.set_link_speed(LinkSpeed::Mbps100, &mut r.host);
    r.clock.advance(1_000_000);
    r.send(&test_frame(60, 0), txd::MAC_TSTAMP);
    r.poll();
    let dep = rec.take()[0].1;
    assert_eq!(r.read_set(0) + 58, phc_at(dep, ppb));

    // Without MAC_TSTAMP, or with TSYNCTXCTL.ENABLED clear, nothing latches.
    r.send(&test_frame(60, 0), 0);
    r.wr(TSYNCTXCTL, 0);
    r.send(&test_frame(60, 0), txd::MAC_TSTAMP);
    r.clock.advance(1_000_000);
    r.poll();
    assert_eq!(rec.take().len(), 2);
    assert_eq!(r.dev.txtt(), 0);
    assert_eq!(r.dev.stats().tx_stamps_latched, 2);
}

fn set_bits(n: u32) -> u32 {
    txd::MAC_TSTAMP | n << txd::TSTAMP_REG_SHIFT
}

#[test]
fn all_four_sets_hold_stamps_at_once() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    for n in 0..4 {
        r.send(&test_frame(60, n as u8), set_bits(n));
        r.clock.advance(10_000);
        r.poll();
        assert_eq!(r.dev.txtt(), (1 << (n + 1)) - 1);
    }
    assert_eq!(r.rd(TSYNCTXCTL) & 0xF, 0xF);
    let stamps: Vec<u64> = (0..4).map(|n| r.dev.tx_stamp(n).to_ns()).collect();
    assert!(stamps.windows(2).all(|w| w[1] > w[0] + 9_000), "{stamps:?}");
    // Reading 3, 2, 1 by L then H releases each; set 0 last.
    for n in (1..4).rev() {
        assert_eq!(r.read_set(n), stamps[n]);
        assert_eq!(r.dev.txtt() & (1 << n), 0);
    }
    assert_eq!(r.dev.txtt(), 1);
    assert_eq!(
        r.dev.stats().tx_stamps_released,
        3,
        "sets 3, 2, 1 handed over"
    );
    assert_eq!(r.read_set(0), stamps[0]);
    assert_eq!(r.dev.txtt(), 0);
    // A second read of a released set hands nothing over.
    r.read_set(0);
    assert_eq!(r.dev.stats().tx_stamps_released, 4);
}

#[test]
fn a_stamp_into_a_busy_set_is_lost() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    r.send(&test_frame(60, 0), set_bits(2));
    r.poll();
    let first = r.dev.tx_stamp(2);
    r.clock.advance(50_000);
    r.send(&test_frame(60, 0), set_bits(2));
    r.poll();
    assert_eq!(r.dev.tx_stamp(2), first, "the unread stamp is kept");
    let st = r.dev.stats();
    assert_eq!(
        (st.tx_stamps_latched, st.tx_stamps_lost, st.tx_frames),
        (1, 1, 2)
    );
    // Once released, the set takes stamps again.
    r.read_set(2);
    r.send(&test_frame(60, 0), set_bits(2));
    r.poll();
    assert_ne!(r.dev.tx_stamp(2), first);
    assert_eq!(r.dev.txtt(), 1 << 2);
}

#[test]
fn txstmph_n_releases_set_n_and_l_alone_changes_nothing() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    for n in 0..4 {
        r.send(&test_frame(60, 0), set_bits(n));
    }
    r.poll();
    assert_eq!(r.dev.txtt(), 0xF);
    for l in TXSTMPL {
        r.rd(l);
    }
    assert_eq!(r.dev.txtt(), 0xF, "TXSTMPL reads release nothing");
    r.rd(TXSTMPH[2]);
    assert_eq!(r.dev.txtt(), 0b1011);
    r.rd(TXSTMPH[1]);
    assert_eq!(r.dev.txtt(), 0b1001);
    // Software cannot clear TXTT through TSYNCTXCTL [assumption].
    r.wr(TSYNCTXCTL, TsyncTxCtl::ENABLED.bits());
    assert_eq!(r.rd(TSYNCTXCTL), TsyncTxCtl::ENABLED.bits() | 0b1001);
}

#[test]
fn txstmph0_releases_all_sets_unless_configured_off() {
    for clears_all in [true, false] {
        let mut r = Rig::with(
            |c| c.txstmph0_clears_all = clears_all,
            Box::new(Loopback::new(DELAY)),
        );
        r.enable_ts(RxTsType::All as u32);
        for n in 0..4 {
            r.send(&test_frame(60, 0), set_bits(n));
        }
        r.poll();
        r.rd(TXSTMPH[0]);
        let want = if clears_all { 0 } else { 0b1110 };
        assert_eq!(r.dev.txtt(), want, "clears_all = {clears_all}");
    }
    // The runtime switch does the same.
    let mut r = Rig::new();
    r.dev.set_txstmph0_clears_all(false);
    r.enable_ts(RxTsType::All as u32);
    r.send(&test_frame(60, 0), set_bits(3));
    r.poll();
    r.rd(TXSTMPH[0]);
    assert_eq!(r.dev.txtt(), 0b1000);
}

// --- The §7.2 quirk ---

/// Stamp into set 1, interrupt, handled via set 1 only; returns the rig.
fn first_txts_handled_via_set_1(quirk: bool) -> Rig {
    let mut r = Rig::with(|c| c.tx_stamp_quirk = quirk, Box::new(Recorder::default()));
    r.msix_setup();
    r.enable_ts(RxTsType::All as u32);
    r.send(&test_frame(60, 0), set_bits(1));
    r.poll();
    assert_eq!(
        r.irqs(),
        [OTHER, TXV],
        "TXTS on other, TXDW on the TX vector"
    );
    assert_eq!(r.dev.txts_gate_open(), !quirk);
    // A multi-set driver without the workaround: TSICR, TSYNCTXCTL, set 1 only.
    assert_eq!(r.handle_other(), TsCause::TXTS.bits());
    assert_eq!(r.rd(TSYNCTXCTL) & 0xF, 0b10);
    r.read_set(1);
    r.host.take();
    r
}

#[test]
fn quirk_gate_holds_txts_until_txstmph0_is_read() {
    let mut r = first_txts_handled_via_set_1(true);
    r.clock.advance(100_000);
    r.send(&test_frame(60, 0), set_bits(1));
    r.poll();
    assert_eq!(r.irqs(), [TXV], "no TXTS interrupt: the gate is closed");
    assert_eq!(r.dev.txtt(), 0b10, "the stamp itself latched");
    assert_eq!(
        r.dev.peek(TSICR),
        TsCause::TXTS.bits(),
        "and the cause shows in TSICR"
    );
    assert_eq!(r.dev.peek(ICR) & IntCause::TS.bits(), 0);
    assert_eq!(r.dev.stats().txts_held_by_quirk, 1);
    // Reading TXSTMPL_0 does nothing; TXSTMPH_0 reopens the gate and the pending TXTS fires.
    r.rd(TXSTMPL[0]);
    assert!(r.irqs().is_empty());
    r.rd(TXSTMPH[0]);
    assert_eq!(r.irqs(), [OTHER]);
    assert!(
        !r.dev.txts_gate_open(),
        "closed again behind the raised interrupt"
    );
    assert_eq!(r.handle_other(), TsCause::TXTS.bits());
    // Reading TXSTMPH_0 with nothing pending leaves the gate open for the next stamp.
    r.rd(TXSTMPH[0]);
    assert!(r.dev.txts_gate_open());
    r.send(&test_frame(60, 0), set_bits(2));
    r.poll();
    assert_eq!(r.irqs(), [OTHER, TXV]);
}

#[test]
fn ideal_part_raises_every_txts() {
    let mut r = first_txts_handled_via_set_1(false);
    r.clock.advance(100_000);
    r.send(&test_frame(60, 0), set_bits(1));
    r.poll();
    assert_eq!(r.irqs(), [OTHER, TXV]);
    assert_eq!(r.dev.stats().txts_held_by_quirk, 0);
    // And the quirk can be switched on at run time.
    r.handle_other();
    r.read_set(1);
    r.dev.set_tx_stamp_quirk(true);
    r.send(&test_frame(60, 0), set_bits(1));
    r.poll();
    r.handle_other();
    r.read_set(1);
    r.host.take();
    r.send(&test_frame(60, 0), set_bits(1));
    r.poll();
    assert_eq!(r.irqs(), [TXV]);
}

#[test]
fn hold_hook_lands_a_stamp_between_two_named_reads() {
    // §7.2: the driver finds TXTT_0 clear, reads TXSTMPL_0 ("old"), TXSTMPH_0, TXSTMPL_0
    // ("new"). A stamp landing right after the first TXSTMPL_0 read is released by the
    // TXSTMPH_0 read before its valid bit is seen; only old != new reveals it.
    let rec = Recorder::default();
    let mut r = Rig::with(|_| {}, Box::new(rec.clone()));
    r.msix_setup();
    r.enable_ts(RxTsType::All as u32);
    r.send(&test_frame(60, 0), set_bits(0));
    r.poll();
    r.handle_other();
    let a = r.read_set(0);
    r.host.take();

    r.clock.advance(1_000_000);
    assert!(r.dev.hold_tx_until_read(TXSTMPL[0], 1));
    r.send(&test_frame(60, 0), set_bits(0));
    r.poll();
    assert_eq!(r.dev.stats().tx_frames, 1, "held");
    assert_eq!(r.dev.armed_reads(), 1);

    assert_eq!(r.rd(TSYNCTXCTL) & TsyncTxCtl::txtt(0).bits(), 0);
    assert_eq!(r.dev.stats().tx_frames, 1, "other reads do not release");
    let old = r.rd(TXSTMPL[0]);
    assert_eq!(old as u64, a % S, "the value read is from before the stamp");
    assert_eq!(r.dev.stats().tx_frames, 2, "released right after that read");
    assert_eq!(r.dev.txtt(), 1, "the stamp landed in set 0");
    assert_eq!(r.dev.armed_reads(), 0);
    let dep = rec.take()[1].1;
    let b = phc_at(dep, 0) - TX_LAT_2500;
    let h = r.rd(TXSTMPH[0]);
    assert_eq!(r.dev.txtt(), 0, "released unseen by the H read");
    let new = r.rd(TXSTMPL[0]);
    assert_ne!(new, old, "the workaround's comparison catches it");
    assert_eq!(h as u64 * S + new as u64, b);
}

#[test]
fn hold_hook_counts_the_nth_read() {
    let mut r = Rig::new();
    r.dev.hold_tx_until_read(TSYNCTXCTL, 3);
    r.send(&test_frame(60, 0), 0);
    r.poll();
    r.rd(TSYNCTXCTL);
    r.rd(TSYNCTXCTL);
    r.poll();
    assert_eq!(r.dev.stats().tx_frames, 0);
    r.rd(TSYNCTXCTL);
    assert_eq!(r.dev.stats().tx_frames, 1);
    // Disarming resumes the engine at the next poll.
    r.dev.hold_tx_until_read(ICR, 1);
    r.send(&test_frame(60, 0), 0);
    r.poll();
    assert_eq!(r.dev.stats().tx_frames, 1);
    r.dev.disarm_reads();
    r.poll();
    assert_eq!(r.dev.stats().tx_frames, 2);
}

// --- RX timestamps (§8.1) ---

#[test]
fn rx_type_all_stamps_every_frame_and_other_types_are_unmodelled() {
    let frames: [(&str, Vec<u8>); 9] = [
        ("l2_sync", eth(0x88F7, &ptp(0x0, 2))),
        ("l2_announce", eth(0x88F7, &ptp(0xB, 2))),
        ("l2_pdelay_resp", eth(0x88F7, &ptp(0x3, 2))),
        ("vlan_l2_sync", vlan(0x88F7, &ptp(0x0, 2))),
        ("udp319_sync", eth(0x0800, &ipv4_udp(319, &ptp(0x0, 2)))),
        (
            "udp320_follow_up",
            eth(0x0800, &ipv4_udp(320, &ptp(0x8, 2))),
        ),
        ("udp319_v1", eth(0x0800, &ipv4_udp(319, &ptp_v1()))),
        ("ipv4_dns", eth(0x0800, &ipv4_udp(53, &[0; 32]))),
        ("arp", eth(0x0806, &[0; 28])),
    ];
    let mut r = Rig::new();
    // §2.2: only TYPE_ALL is documented for i225 (igc programs 0x418): every frame stamped.
    r.enable_ts(RxTsType::All as u32);
    for (name, frame) in &frames {
        let arrival = r.clock.now() + 10_000;
        let rx = r.inject(frame, arrival).expect(name);
        assert_eq!(rx.frame, *frame, "{name}");
        assert_eq!(rx.len, TS_HDR_LEN + frame.len());
        assert_eq!(
            rx.status,
            RxStatus::DD.bits() | RxStatus::EOP.bits() | RxStatus::TSIP.bits()
        );
        let h = rx.header.expect(name);
        assert_eq!(stamp_ns(h), phc_at(arrival, 0) + RX_LAT_2500, "{name}");
        assert_eq!((h[0], h[1]), (h[2], h[3]), "TIMER1SEL = TIMER0SEL = 0");
    }
    assert!(r.dev.unimplemented_accesses().is_empty());
    // Any other TYPE: no match rule is documented, so nothing is stamped and the value is
    // recorded as unmodelled (at TSYNCRXCTL).
    for ty in [0x00, 0x02, 0x04, 0x06, 0x0A, 0x0C, 0x0E] {
        r.enable_ts(ty);
        for (name, frame) in &frames {
            let arrival = r.clock.now() + 10_000;
            let rx = r.inject(frame, arrival).expect(name);
            assert!(rx.header.is_none(), "TYPE {ty:#x}, {name}");
            assert_eq!(rx.status, RxStatus::DD.bits() | RxStatus::EOP.bits());
        }
    }
    let u = r.dev.unimplemented_accesses();
    assert_eq!(u.len(), 1);
    assert_eq!((u[0].offset, u[0].writes), (TSYNCRXCTL, 7));
}

#[test]
fn rx_header_timer_selection() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    let base = r.dev.peek(srrctl(0));
    let sync = eth(0x88F7, &ptp(0, 2));
    // TIMER1SEL = timer 2: dwords 0-1 name an unmodelled timer (0); dwords 2-3 stay timer 0.
    r.wr(srrctl(0), base | 2 << srrctl::TIMER1SEL_SHIFT);
    let at = r.clock.now() + 10_000;
    let h = r.inject(&sync, at).unwrap().header.unwrap();
    assert_eq!((h[0], h[1]), (0, 0));
    assert_eq!(stamp_ns(h), phc_at(at, 0) + RX_LAT_2500);
    // TIMER0SEL = timer 1: the pair igc reads is now the unmodelled timer's.
    r.wr(srrctl(0), base | 1 << srrctl::TIMER0SEL_SHIFT);
    let at = r.clock.now() + 10_000;
    let h = r.inject(&sync, at).unwrap().header.unwrap();
    assert_eq!((h[2], h[3]), (0, 0));
    assert_eq!(h[1] as u64 * S + h[0] as u64, phc_at(at, 0) + RX_LAT_2500);
    let u = r.dev.unimplemented_accesses();
    assert_eq!((u.len(), u[0].offset, u[0].writes), (1, srrctl(0), 2));
}

#[test]
fn rx_header_is_phc_at_arrival_even_when_processed_after_a_rate_change() {
    let ppb = -40_000;
    let mut r = Rig::with(|c| c.osc_error_ppb = ppb, Box::new(Loopback::new(DELAY)));
    r.enable_ts(RxTsType::All as u32);
    let arrival = START + 5 * S;
    r.dev
        .wire_mut()
        .unwrap()
        .transmit(&eth(0x88F7, &ptp(0, 2)), arrival - DELAY);
    // The driver changes the frequency and steps the clock after the arrival but before the
    // model gets to the frame.
    r.clock.set(arrival + 1_000);
    r.wr(TIMINCA, 1_000_000);
    r.clock.set(arrival + 2_000);
    r.wr(SYSTIML, 0);
    r.wr(SYSTIMH, 5);
    r.clock.set(arrival + 3_000);
    r.poll();
    let rx = r.take_rx().unwrap();
    assert_eq!(
        stamp_ns(rx.header.unwrap()),
        phc_at(arrival, ppb) + RX_LAT_2500
    );

    // At 1 Gb/s the RX latency is 300 ns.
    r.dev.set_link_speed(LinkSpeed::Mbps1000, &mut r.host);
    let arrival = r.clock.now() + 500;
    let rx = r.inject(&eth(0x88F7, &ptp(0, 2)), arrival).unwrap();
    let phc = r.dev.tsync.phc.ns_at_instant(arrival);
    assert_eq!(stamp_ns(rx.header.unwrap()), phc + 300);
}

#[test]
fn no_rx_header_when_any_of_the_three_enables_is_off() {
    let sync = eth(0x88F7, &ptp(0, 2));
    for off in 0..3 {
        let mut r = Rig::new();
        r.enable_ts(RxTsType::All as u32);
        match off {
            0 => r.wr(RXPBS, 0),
            1 => r.wr(srrctl(0), r.dev.peek(srrctl(0)) & !srrctl::TIMESTAMP),
            _ => r.wr(TSYNCRXCTL, RxTsType::All as u32),
        }
        let at = r.clock.now() + 1_000;
        let rx = r.inject(&sync, at).unwrap();
        assert!(rx.header.is_none(), "enable {off} off");
        assert_eq!(rx.status & RxStatus::TSIP.bits(), 0);
        assert_eq!(rx.len, sync.len());
    }
}

#[test]
fn rx_drops_are_counted() {
    let mut r = Rig::new();
    let f = test_frame(64, 0);
    // Seven descriptors posted: the eighth frame finds none.
    for k in 0..8 {
        r.dev.wire_mut().unwrap().transmit(&f, START + k * 1_000);
    }
    r.clock.set(START + 100_000);
    r.poll();
    let st = r.dev.stats();
    assert_eq!((st.rx_frames, st.rx_missed), (7, 1));
    assert_eq!(r.rd(rdh(0)), r.rd(rdt(0)));
    // Over the long-packet limit (RLPML, with FCS), runt (under 64 with FCS), RX disabled.
    while r.take_rx().is_some() {}
    r.wr(0x5004, 1522);
    let now = r.clock.now();
    assert!(r.inject(&test_frame(1519, 0), now + 10).is_none());
    assert!(r.inject(&test_frame(1518, 0), now + 20).is_some());
    assert!(r.inject(&[0u8; 13], now + 30).is_none());
    assert!(r.inject(&test_frame(59, 0), now + 35).is_none());
    assert!(r.inject(&test_frame(60, 0), now + 36).is_some());
    r.wr(RCTL, 0);
    assert!(r.inject(&f, now + 40).is_none());
    let st = r.dev.stats();
    assert_eq!(
        (st.rx_oversize, st.rx_runt, st.rx_not_ready, st.rx_frames),
        (1, 2, 1, 9)
    );
}

// --- Malformed TX ---

#[test]
fn malformed_tx_descriptors_are_dropped_and_counted() {
    let mut r = Rig::new();
    let f = test_frame(80, 0);
    // A buffer DMA cannot reach.
    r.write_tx_desc(0, 0xdead_0000, &[], txd::EOP | txd::RS | 80);
    // A zero-length descriptor.
    r.write_tx_desc(1, TX_BUF, &[], txd::EOP | txd::RS);
    // Then a good frame.
    r.write_tx_desc(2, TX_BUF + 2 * BUF, &f, txd::EOP | txd::RS);
    r.wr(tdt(0), 3);
    r.poll();
    assert_eq!(r.rd(tdh(0)), 3);
    assert!(r.tx_dd(0) && r.tx_dd(1) && r.tx_dd(2));
    let st = r.dev.stats();
    assert_eq!((st.tx_malformed, st.tx_frames), (2, 1));
    // A full ring without EOP can never complete: dropped, ring emptied.
    for i in 3..N + 2 {
        let i = i % N;
        r.write_tx_desc(i, TX_BUF + i as u64 * BUF, &f[..10], txd::RS);
    }
    r.wr(tdt(0), 2);
    r.poll();
    assert_eq!(r.rd(tdh(0)), 2);
    assert_eq!(r.dev.stats().tx_malformed, 3);
    // A legacy (no DEXT) descriptor.
    let mut d = [0u8; 16];
    d[..8].copy_from_slice(&TX_BUF.to_le_bytes());
    d[8..12].copy_from_slice(&(txd::EOP | txd::RS | 60).to_le_bytes());
    r.host.write(TX_RING + 2 * 16, &d);
    r.wr(tdt(0), 3);
    r.poll();
    assert_eq!(r.dev.stats().tx_malformed, 4);
    assert_eq!(r.rd(tdh(0)), 3);
}

#[test]
fn garbage_rings_never_panic_or_escape_the_ring() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let mut rnd = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    for _ in 0..300 {
        let i = (rnd() % N as u64) as u32;
        let mut d = [0u8; 16];
        let addr = if rnd() % 2 == 0 {
            TX_BUF + rnd() % 0x1_0000
        } else {
            rnd()
        };
        d[..8].copy_from_slice(&addr.to_le_bytes());
        d[8..16].copy_from_slice(&rnd().to_le_bytes());
        r.host.write(TX_RING + i as u64 * 16, &d);
        r.host.write(RX_RING + i as u64 * 16, &d);
        match rnd() % 8 {
            0 => r.wr(tdlen(0), rnd() as u32),
            1 => r.wr(rdlen(0), rnd() as u32),
            2 => r.wr(srrctl(0), rnd() as u32),
            3 => r.wr(rdt(0), (rnd() % 10) as u32),
            _ => r.wr(tdt(0), (rnd() % 10) as u32),
        }
        let len = (rnd() % 3000) as usize;
        let frame: Vec<u8> = (0..len).map(|_| rnd() as u8).collect();
        let now = r.clock.now();
        r.dev.wire_mut().unwrap().transmit(&frame, now);
        r.clock.advance(rnd() % 5_000);
        let head = r.dev.peek(tdh(0));
        r.poll();
        // Where the engine moved the head, it stayed in the ring. (A ring shrunk under a head
        // the engine left further on is unusable and keeps that head: TDLEN now reads only
        // its b19:7, issue 24.)
        let n = (r.dev.peek(tdlen(0)) & !0x7F) / 16;
        if n > 0 && r.dev.peek(tdt(0)) < n && r.dev.peek(tdh(0)) != head {
            assert!(r.dev.peek(tdh(0)) < n);
        }
    }
}

// --- Faults ---

#[test]
fn injected_tx_stamp_loss() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    r.dev.drop_tx_stamps(1);
    r.send(&test_frame(60, 0), set_bits(0));
    r.send(&test_frame(60, 0), set_bits(1));
    r.poll();
    assert_eq!(r.dev.txtt(), 0b10, "first stamp swallowed, second latched");
    let st = r.dev.stats();
    assert_eq!(
        (st.tx_frames, st.tx_stamps_dropped, st.tx_stamps_latched),
        (2, 1, 1)
    );
    assert_eq!(
        r.dev.peek(TSICR),
        TsCause::TXTS.bits(),
        "only the latched stamp raised TXTS"
    );
}

#[test]
fn injected_stuck_txtt() {
    let mut r = Rig::new();
    r.enable_ts(RxTsType::All as u32);
    r.send(&test_frame(60, 0), set_bits(1));
    r.poll();
    r.dev.stick_txtt(1, Some(2));
    r.rd(TXSTMPH[1]);
    r.rd(TXSTMPH[1]);
    assert_eq!(r.dev.txtt(), 0b10, "survives two releasing reads");
    r.rd(TXSTMPH[1]);
    assert_eq!(r.dev.txtt(), 0);
    assert_eq!(r.dev.stats().txtt_stuck_reads, 2);
    // Stuck until cleared: the set looks busy, so new stamps are lost.
    r.dev.stick_txtt(2, None);
    assert_eq!(r.dev.txtt(), 0b100);
    for _ in 0..5 {
        r.rd(TXSTMPH[2]);
        r.rd(TXSTMPH[0]);
    }
    r.send(&test_frame(60, 0), set_bits(2));
    r.poll();
    assert_eq!(r.dev.txtt(), 0b100);
    assert_eq!(r.dev.stats().tx_stamps_lost, 1);
    r.dev.clear_stuck_txtt(2);
    assert_eq!(r.dev.txtt(), 0);
}

#[test]
fn injected_time_sync_interrupt_loss() {
    let mut r = Rig::new();
    r.msix_setup();
    r.enable_ts(RxTsType::All as u32);
    r.dev.drop_ts_interrupts(1);
    r.send(&test_frame(60, 0), set_bits(0));
    r.poll();
    assert_eq!(r.irqs(), [TXV], "no message on the other vector");
    assert_ne!(
        r.dev.peek(ICR) & IntCause::TS.bits(),
        0,
        "but the cause is set"
    );
    assert_eq!(r.dev.stats().ts_irqs_dropped, 1);
    // A polling driver recovers; the next stamp interrupts again.
    assert_eq!(r.handle_other(), TsCause::TXTS.bits());
    r.read_set(0);
    r.send(&test_frame(60, 0), set_bits(0));
    r.poll();
    assert_eq!(r.irqs(), [OTHER, TXV]);
}

#[test]
fn injected_wire_loss_and_link_flap() {
    let mut r = Rig::new();
    assert!(r.dev.wire_drop_next(1));
    r.send(&test_frame(60, 1), 0);
    r.send(&test_frame(60, 2), 0);
    r.poll();
    r.clock.advance(10_000);
    r.poll();
    assert_eq!(r.take_rx().unwrap().frame, test_frame(60, 2));
    assert!(r.take_rx().is_none());
    assert_eq!(r.dev.wire_stats().lost, 1);

    // The loss reaches an observer (the ground-truth record's counter), once.
    let obs = Arc::new(LossObserver::default());
    r.dev.set_observer(Some(obs.clone()));
    assert!(r.dev.wire_drop_next(2));
    for k in 4..7 {
        r.send(&test_frame(60, k), 0);
    }
    r.poll();
    r.clock.advance(10_000);
    r.poll();
    r.poll();
    assert_eq!(
        *obs.0.lock().unwrap(),
        vec![3],
        "1 lost before, 2 now; reported once"
    );

    // Cable pulled: TX waits in the ring, LSC raised; plugged back: it goes.
    r.rd(ICR);
    r.dev.set_cable(false, &mut r.host);
    assert_ne!(r.rd(ICR) & IntCause::LSC.bits(), 0);
    let i = r.send(&test_frame(60, 3), 0);
    r.poll();
    assert!(!r.tx_dd(i));
    r.dev.set_cable(true, &mut r.host);
    r.poll();
    assert!(r.tx_dd(i));
}

#[test]
fn wire_decides_the_link_and_no_wire_keeps_part_1_behaviour() {
    let mut r = Rig::new();
    r.dev.attach_wire(Box::new(Disconnected::default()));
    r.rd(ICR);
    r.poll();
    assert!(!r.dev.link_up());
    assert_ne!(r.rd(ICR) & IntCause::LSC.bits(), 0);
    // No wire: link per cable and SLU; frames go nowhere but complete (and stamp).
    r.dev.detach_wire();
    r.poll();
    assert!(r.dev.link_up());
    r.enable_ts(RxTsType::All as u32);
    let i = r.send(&test_frame(60, 0), set_bits(0));
    r.poll();
    assert!(r.tx_dd(i));
    assert_eq!(r.dev.txtt(), 1);
    assert_eq!(r.dev.stats().tx_no_wire, 1);
}

// --- Queue interrupts (§6 IVAR0) ---

#[test]
fn queue_interrupts_route_via_ivar0() {
    let mut r = Rig::new();
    r.msix_setup();
    r.send(&test_frame(60, 0), 0);
    r.poll();
    assert_eq!(r.irqs(), [TXV]);
    r.clock.advance(10_000);
    r.poll();
    assert_eq!(r.irqs(), [RXV]);
    // EIAM auto-masked both: the next frame sends nothing until the driver re-arms.
    r.take_rx();
    r.send(&test_frame(60, 0), 0);
    r.poll();
    r.clock.advance(10_000);
    r.poll();
    assert!(r.irqs().is_empty());
    // Re-arming sends the causes that came while masked (§6 "EIMS = mask" at the end of the
    // handler).
    r.wr(EIMS, 1 << RXV | 1 << TXV);
    assert_eq!(r.irqs(), [RXV, TXV]);
    // Swapping the vectors in IVAR0 entry 0 moves the messages.
    r.wr(IVAR0, (TXV | IVAR_VALID) | (RXV | IVAR_VALID) << 8);
    r.wr(EIMS, 1 << RXV | 1 << TXV);
    r.take_rx();
    r.send(&test_frame(60, 0), 0);
    r.poll();
    assert_eq!(r.irqs(), [RXV], "TX now on vector 1");
    r.clock.advance(10_000);
    r.poll();
    assert_eq!(r.irqs(), [TXV], "RX now on vector 2");
    // Without VALID, no message.
    r.wr(IVAR0, 0);
    r.wr(EIMS, 1 << RXV | 1 << TXV);
    r.take_rx();
    r.send(&test_frame(60, 0), 0);
    r.poll();
    r.clock.advance(10_000);
    r.poll();
    assert!(r.irqs().is_empty());
    assert_eq!(r.dev.stats().rx_frames, 4);
}

#[test]
fn queue_interrupts_without_msix_use_ims() {
    let mut r = Rig::new();
    r.wr(IMS, IntCause::RXT0.bits() | IntCause::TXDW.bits());
    r.send(&test_frame(60, 0), 0);
    r.poll();
    assert_eq!(r.irqs(), [0]);
    r.clock.advance(10_000);
    r.poll();
    assert_eq!(r.irqs(), [0], "RXT0 is a new cause");
    r.send(&test_frame(60, 0), 0);
    r.poll();
    assert!(r.irqs().is_empty(), "TXDW still pending: no new edge");
    assert_eq!(
        r.rd(ICR) & (IntCause::RXT0.bits() | IntCause::TXDW.bits()),
        IntCause::RXT0.bits() | IntCause::TXDW.bits()
    );
    r.send(&test_frame(60, 0), 0);
    r.poll();
    assert_eq!(
        r.irqs(),
        [0],
        "after the ICR read, the next cause interrupts"
    );
}

// --- Two models on one Unix datagram wire ---

#[cfg(target_os = "linux")]
#[test]
fn two_models_over_a_unix_datagram_wire() {
    use crate::wire::UnixDatagramWire;
    let (a, b) = UnixDatagramWire::pair().unwrap();
    let b = b.with_cable(Cable::new(77));
    let rec_b_ppb = 3_000;
    let mut ra = Rig::with(|_| {}, Box::new(a));
    let mut rb = Rig::with(
        |c| {
            c.osc_error_ppb = rec_b_ppb;
            c.device_id = ids::EMU_I226;
        },
        Box::new(b),
    );
    // One true time for both (as CLOCK_MONOTONIC is in real time).
    rb.clock = ra.clock.clone();
    rb.dev.port.clock = ra.clock.source();
    ra.enable_ts(RxTsType::All as u32);
    rb.enable_ts(RxTsType::All as u32);
    let sync = eth(0x88F7, &ptp(0, 2));
    // Posted unpadded (58 bytes): TCTL.PSP pads it to 60 on the cable.
    ra.send(&sync[..58], set_bits(0));
    ra.poll();
    let dep = ra.read_set(0) + TX_LAT_2500 - SYSTIM0 + START;
    ra.clock.advance(10_000);
    rb.poll();
    let rx = rb.take_rx().unwrap();
    assert_eq!(rx.frame, sync, "padded to 60");
    assert_eq!(
        stamp_ns(rx.header.unwrap()) - RX_LAT_2500,
        phc_at(dep + 77, rec_b_ppb)
    );
}

// --- Real time, through the emulated PCI backend ---

#[test]
fn real_time_model_thread_loops_a_frame_back_and_fires_the_rx_vector() {
    use crate::clock::HostClock;
    use ptp_pci::emulated::EmuFunction;
    use ptp_pci::{IrqVector, IrqWait, Mmio, PciFunction};

    let mut dev = I225::new_i225(HostClock::new().source());
    dev.attach_wire(Box::new(Loopback::new(50)));
    let mut func = EmuFunction::new(dev, "rt");
    let bar = func.map_bar(0).unwrap();
    let vectors = func.alloc_vectors(MSIX_VECTORS).unwrap();
    let ring = func.alloc_dma(4096).unwrap();
    let (txr, txb, rxr, rxb) = (0, 1024, 2048, 3072);
    let bus = ring.bus_addr();
    func.start_model_thread(Duration::from_millis(5));

    bar.write32(CTRL, Ctrl::SLU.bits());
    bar.write32(
        GPIE,
        gpie::MSIX_MODE | gpie::PBA | gpie::EIAME | gpie::NSICR,
    );
    bar.write32(IVAR0, (RXV | IVAR_VALID) | (TXV | IVAR_VALID) << 8);
    bar.write32(EIAC, 1 << RXV | 1 << TXV);
    bar.write32(EIMS, 1 << RXV | 1 << TXV);
    bar.write32(rdbal(0), (bus + rxr) as u32);
    bar.write32(rdbah(0), ((bus + rxr) >> 32) as u32);
    bar.write32(rdlen(0), 128);
    bar.write32(srrctl(0), 1 | srrctl::DESCTYPE_ADV_ONEBUF);
    ring.write64(rxr as usize, bus + rxb);
    bar.write32(rxdctl(0), xdctl::QUEUE_ENABLE);
    bar.write32(rdt(0), 1);
    bar.write32(RCTL, rctl::EN | rctl::SECRC | rctl::UPE | rctl::MPE);
    bar.write32(tdbal(0), (bus + txr) as u32);
    bar.write32(tdbah(0), ((bus + txr) >> 32) as u32);
    bar.write32(tdlen(0), 128);
    bar.write32(txdctl(0), xdctl::QUEUE_ENABLE);
    bar.write32(TCTL, tctl::EN | tctl::PSP);
    let frame = test_frame(90, 9);
    ring.write_bytes(txb as usize, &frame);
    ring.write64(txr as usize, bus + txb);
    let cmd = txd::DTYP_DATA | txd::DEXT | txd::IFCS | txd::EOP | txd::RS | 90;
    ring.write32(txr as usize + 8, cmd);
    bar.write32(tdt(0), 1);

    let rx_irq = &vectors[RXV as usize];
    assert_eq!(rx_irq.wait(Duration::from_secs(5)), IrqWait::Fired);
    assert_ne!(ring.read32(rxr as usize + 8) & RxStatus::DD.bits(), 0);
    assert_eq!(ring.read32(rxr as usize + 12) & 0xFFFF, 90);
    let mut got = vec![0; 90];
    assert!(ring.read_bytes(rxb as usize, &mut got));
    assert_eq!(got, frame);
    assert_ne!(ring.read32(txr as usize + 12) & TxStatus::DD.bits(), 0);
    assert_eq!(vectors[TXV as usize].count(), 1);
}

// --- Timestamp noise (I225Config::stamp_quantum_ns, stamp_jitter_ns, seed) ---

/// Loops `n` PTP frames back, 100 µs apart, through a rig with stamp quantum `q`, jitter `j`
/// and `seed`: (TX stamp, its exact value, RX stamp, its exact value) for each.
fn looped_stamps(q: u32, j: u32, seed: u64, n: usize) -> Vec<[u64; 4]> {
    let mut r = Rig::with(
        |c| {
            c.stamp_quantum_ns = q;
            c.stamp_jitter_ns = j;
            c.seed = seed;
        },
        Box::new(Loopback::new(DELAY)),
    );
    r.enable_ts(RxTsType::All as u32);
    let sync = eth(0x88F7, &ptp(0, 2));
    (0..n)
        .map(|_| {
            r.clock.advance(100_000);
            let dep = r.clock.now() + DEFAULT_TX_PIPELINE_NS;
            r.send(&sync, set_bits(0));
            r.poll();
            let tx = r.read_set(0);
            r.clock.set(dep + DELAY);
            r.poll();
            let rx = stamp_ns(r.take_rx().unwrap().header.unwrap());
            [
                tx,
                phc_at(dep, 0) - TX_LAT_2500,
                rx,
                phc_at(dep + DELAY, 0) + RX_LAT_2500,
            ]
        })
        .collect()
}

#[test]
fn stamp_quantum_truncates_tx_and_rx_stamps() {
    let got = looped_stamps(8, 0, 0, 50);
    let mut rounded = 0;
    for [tx, tx_exact, rx, rx_exact] in got {
        assert_eq!(tx, tx_exact - tx_exact % 8, "TX");
        assert_eq!(rx, rx_exact - rx_exact % 8, "RX");
        rounded += u32::from(tx != tx_exact) + u32::from(rx != rx_exact);
    }
    assert!(rounded > 0, "the exact values were not all on the grid");
    // Default: exact.
    for [tx, tx_exact, rx, rx_exact] in looped_stamps(0, 0, 0, 5) {
        assert_eq!((tx, rx), (tx_exact, rx_exact));
    }
}

#[test]
fn stamp_jitter_is_bounded_quantised_and_reproducible_per_seed() {
    let got = looped_stamps(8, 20, 42, 200);
    for &[tx, tx_exact, rx, rx_exact] in &got {
        for (t, exact) in [(tx, tx_exact), (rx, rx_exact)] {
            assert_eq!(t % 8, 0);
            // Jitter ±20, then truncation by up to 7.
            assert!(t + 27 >= exact && t <= exact + 20, "{t} vs exact {exact}");
        }
    }
    let spread: std::collections::BTreeSet<i64> =
        got.iter().map(|s| s[0] as i64 - s[1] as i64).collect();
    assert!(spread.len() > 3, "TX stamps jitter: {spread:?}");
    assert_eq!(looped_stamps(8, 20, 42, 200), got, "same seed, same stamps");
    assert_ne!(
        looped_stamps(8, 20, 43, 200),
        got,
        "another seed, other stamps"
    );
}

// --- RX address filter and statistics (Linux igc_mac.c, igc_regs.h) ---

/// A 64-byte frame to destination `dst`.
fn to(dst: [u8; 6]) -> Vec<u8> {
    let mut f = test_frame(64, 3);
    f[..6].copy_from_slice(&dst);
    f
}

/// MTA register and bit for `a` under MO `mo`, as Linux igc_hash_mc_addr computes it
/// (written out independently of the model: bit_shift 4 for 128 registers, +1/+2/+4 by MO).
fn linux_mta(a: [u8; 6], mo: u32) -> (u32, u32) {
    let shift = 4 + [0, 1, 2, 4][mo as usize];
    let h = ((a[4] as u32 >> (8 - shift)) | (a[5] as u32) << shift) & 0xFFF;
    ((h >> 5) & 0x7F, h & 0x1F)
}

#[test]
fn rx_address_filter_accepts_as_the_mac_does_and_counts_drops() {
    let mut r = Rig::new();
    let base = rctl::EN | rctl::BAM | rctl::SECRC | rctl::LPE;
    r.wr(RCTL, base);
    let own = r.dev.mac();
    let other = [0x02, 0, 0, 0, 0x99, 0x99];
    let lldp = [0x01, 0x80, 0xC2, 0, 0, 0x0E];
    let mut t = r.clock.now();
    let mut rx = |r: &mut Rig, dst: [u8; 6]| {
        t += 10_000;
        r.inject(&to(dst), t).is_some()
    };
    assert!(rx(&mut r, own), "RAL0/RAH0 exact match");
    assert!(rx(&mut r, [0xFF; 6]), "broadcast with BAM");
    assert!(!rx(&mut r, other), "foreign unicast");
    assert!(!rx(&mut r, lldp), "multicast with an empty MTA");
    assert_eq!(r.dev.stats().rx_filtered, 2);
    // MTA hash, MO = 0: 01:80:c2:00:00:0e hashes to register 7, bit 0.
    let (reg, bit) = linux_mta(lldp, 0);
    assert_eq!((reg, bit), (7, 0));
    r.wr(MTA + 4 * reg, 1 << bit);
    assert!(rx(&mut r, lldp), "MTA bit set");
    // MO = 3 takes other address bits: the same MTA bit no longer matches.
    r.wr(RCTL, base | 3 << 12);
    assert!(!rx(&mut r, lldp));
    let (reg3, bit3) = linux_mta(lldp, 3);
    assert_ne!((reg3, bit3), (reg, bit));
    r.wr(MTA + 4 * reg3, 1 << bit3);
    assert!(rx(&mut r, lldp));
    // A second RAR entry, only while AV and ASEL = destination.
    r.wr(ral(3), u32::from_le_bytes([0x02, 0, 0, 0]));
    r.wr(rah(3), 0x9999);
    assert!(!rx(&mut r, other), "no AV");
    r.wr(rah(3), 0x9999 | rah::AV | 1 << 16);
    assert!(!rx(&mut r, other), "source-address entry");
    r.wr(rah(3), 0x9999 | rah::AV);
    assert!(rx(&mut r, other));
    // Promiscuous modes and BAM.
    r.wr(RCTL, rctl::EN | rctl::SECRC);
    assert!(!rx(&mut r, [0xFF; 6]), "broadcast without BAM");
    assert!(!rx(&mut r, [0x02, 1, 2, 3, 4, 5]));
    r.wr(RCTL, rctl::EN | rctl::SECRC | rctl::UPE);
    assert!(rx(&mut r, [0x02, 1, 2, 3, 4, 5]), "UPE");
    assert!(!rx(&mut r, [0x01, 1, 2, 3, 4, 5]), "UPE is not MPE");
    r.wr(RCTL, rctl::EN | rctl::SECRC | rctl::MPE);
    assert!(rx(&mut r, [0x01, 1, 2, 3, 4, 5]), "MPE");
    assert_eq!(r.dev.stats().rx_filtered, 8);
}

#[test]
fn statistics_count_frames_and_clear_on_read() {
    let mut r = Rig::new();
    // igc_clear_hw_cntrs_base-style: read the block once (it starts at zero).
    for o in (0x4000..=0x4138).step_by(4) {
        assert_eq!(r.rd(o), 0, "{o:#x}");
    }
    let f = to([0xFF; 6]);
    r.send(&f, 0);
    r.poll();
    let t = r.clock.now() + 10_000;
    assert!(r.inject(&f, t).is_some());
    let octets = f.len() as u32 + 4;
    // GPRC, BPRC, GORCL/H, GPTC, BPTC, GOTCL/H, PRC64/PTC64 buckets (68 bytes: 65–127).
    assert_eq!(r.rd(0x4074), 2, "GPRC: looped-back frame + injected frame");
    assert_eq!(r.rd(0x4074), 0, "clear on read");
    assert_eq!(r.rd(0x4078), 2, "BPRC");
    assert_eq!((r.rd(0x4088), r.rd(0x408C)), (2 * octets, 0), "GORCL/H");
    assert_eq!(r.rd(0x4088), 0, "the high read cleared the pair");
    assert_eq!(r.rd(0x4080), 1, "GPTC");
    assert_eq!(r.rd(0x40F4), 1, "BPTC");
    assert_eq!((r.rd(0x4090), r.rd(0x4094)), (octets, 0), "GOTCL/H");
    assert_eq!((r.rd(0x4060), r.rd(0x40DC)), (2, 1), "PRC127, PTC127");
    r.wr(0x4074, 55);
    assert_eq!(r.rd(0x4074), 0, "read-only");
}

// --- TX checksum insertion (Linux igc_tx_csum) ---

/// RFC 1071 sum of `b`, folded (written here apart from the model's).
fn ones_sum(b: &[u8]) -> u16 {
    let mut s: u64 = b
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], *w.get(1).unwrap_or(&0)]) as u64)
        .sum();
    while s > 0xFFFF {
        s = (s & 0xFFFF) + (s >> 16);
    }
    s as u16
}

/// UDP pseudo-header sum of an IPv4 datagram at `ip` (source, destination, protocol, UDP
/// length), as Linux seeds the UDP checksum field for CHECKSUM_PARTIAL.
fn udp_pseudo(f: &[u8], ip: usize) -> u16 {
    let mut p = f[ip + 12..ip + 20].to_vec();
    p.extend_from_slice(&[0, 17]);
    p.extend_from_slice(&f[ip + 24..ip + 26]);
    ones_sum(&p)
}

impl Rig {
    /// Posts a context descriptor for slot `idx` (igc_tx_ctxtdesc layout) and one data
    /// descriptor carrying `frame` with `popts` (b13:8 of olinfo_status) and context `idx`.
    fn send_with_ctx(&mut self, frame: &[u8], idx: u32, tucmd: u32, popts: u32) {
        let c = self.tx_tail;
        let mut d = [0u8; 16];
        d[0..4].copy_from_slice(&(20u32 | 14 << 9).to_le_bytes());
        d[8..12].copy_from_slice(&(0x2 << 20 | txd::DEXT | tucmd).to_le_bytes());
        d[12..16].copy_from_slice(&(idx << 4).to_le_bytes());
        assert!(self.host.write(TX_RING + c as u64 * 16, &d));
        let i = (c + 1) % N;
        let buf = TX_BUF + i as u64 * BUF;
        self.write_tx_desc(i, buf, frame, txd::EOP | txd::RS);
        let len = frame.len() as u32;
        let olinfo = len << txd::PAYLEN_SHIFT | popts << 8 | idx << 4;
        assert!(
            self.host
                .write(TX_RING + i as u64 * 16 + 12, &olinfo.to_le_bytes())
        );
        self.tx_tail = (i + 1) % N;
        self.wr(tdt(0), self.tx_tail);
    }

    /// Sends and loops back one frame; the frame as received.
    fn loop_ctx(&mut self, frame: &[u8], idx: u32, tucmd: u32, popts: u32) -> Vec<u8> {
        self.send_with_ctx(frame, idx, tucmd, popts);
        self.poll();
        self.clock.advance(100_000);
        self.poll();
        self.take_rx().expect("looped back").frame
    }
}

#[test]
fn tx_inserts_ipv4_and_udp_checksums_from_the_context() {
    let mut r = Rig::new();
    let mut f = eth(0x0800, &ipv4_udp(319, &ptp(0, 2)));
    let seed = udp_pseudo(&f, 14);
    f[14 + 20 + 6..14 + 20 + 8].copy_from_slice(&seed.to_be_bytes());
    const IPV4: u32 = 1 << 10;
    // No POPTS: the frame goes out as posted (IP checksum 0, UDP field = the seed).
    let out = r.loop_ctx(&f, 1, IPV4, 0);
    assert_eq!(out, f);
    // TXSM (UDP, as igc_tx_csum) and IXSM, context slot 1.
    let out = r.loop_ctx(&f, 1, IPV4, 0b11);
    assert_eq!(
        ones_sum(&out[14..34]),
        0xFFFF,
        "IPv4 header checksum verifies"
    );
    assert_ne!(out[24..26], [0, 0]);
    let ip_len = out.len() - 14 - 20;
    assert_eq!(u16::from_be_bytes([out[38], out[39]]) as usize, ip_len);
    let mut udp_sum = ones_sum(&out[34..]) as u32 + udp_pseudo(&out, 14) as u32;
    udp_sum = (udp_sum & 0xFFFF) + (udp_sum >> 16);
    assert_eq!(
        udp_sum, 0xFFFF,
        "UDP checksum verifies with the pseudo-header"
    );
    assert_eq!(out[34 + 8..], f[34 + 8..], "payload untouched");
    assert_eq!(r.dev.stats().tx_csum_inserted, 1);
    // TXSM alone leaves the IP header as posted.
    let out = r.loop_ctx(&f, 2, IPV4, 0b10);
    assert_eq!(out[24..26], [0, 0]);
    assert_eq!(out[40..42], out_udp(&f));
    // SCTP (L4T 2) is not modelled: unchanged and counted.
    let out = r.loop_ctx(&f, 0, IPV4 | 2 << 11, 0b10);
    assert_eq!(out, f);
    assert_eq!(
        (
            r.dev.stats().tx_csum_inserted,
            r.dev.stats().tx_csum_skipped
        ),
        (2, 1)
    );
}

/// The UDP checksum the TXSM-only frame must carry (computed here).
fn out_udp(f: &[u8]) -> [u8; 2] {
    let mut g = f.to_vec();
    g[40..42].fill(0);
    let mut s = ones_sum(&g[34..]) as u32 + udp_pseudo(&g, 14) as u32;
    s = (s & 0xFFFF) + (s >> 16);
    let c = !(s as u16);
    (if c == 0 { 0xFFFF } else { c }).to_be_bytes()
}
