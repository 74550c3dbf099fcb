//! What QEMU's 82576 model (`-device igb`, QEMU 10) needed from the igb family, each against a
//! scripted register file (tests/vm_igb_igbd.rs runs the real thing in a guest):
//! - reset goes on when EECD.AUTO_RD never sets (QEMU's EECD lacks it; Linux igb tolerates it);
//! - link-up restarts the PHY's autonegotiation through MDIC at PHY address 1 (QEMU raises
//!   STATUS.LU only 500 ms after such a restart);
//! - an RX stamp belongs to the frame whose descriptor has TS, as Linux igb decides, whatever
//!   RXSATRH holds (on QEMU's model its sequenceId half read 0 for every Sync).

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use intel_common::Regs;
use intel_common::family::{Family, RxFrame};
use intel_common::igb::Igb;
use intel_regs::igb as r;
use intel_regs::igb::mdic;
use ptp_ipc::RxFilter;
use ptp_pci::Mmio;

/// A register file: reads return what was stored; MDIC completes at once (READY) with PHY
/// register 0 reading `bmcr`; every MDIC write is logged.
#[derive(Default)]
struct Script {
    regs: Mutex<HashMap<u32, u32>>,
    mdic_log: Mutex<Vec<u32>>,
}

impl Script {
    fn set(&self, off: u32, v: u32) {
        self.regs.lock().unwrap().insert(off, v);
    }
}

impl Mmio for Script {
    fn read32(&self, off: u32) -> u32 {
        self.regs.lock().unwrap().get(&off).copied().unwrap_or(0)
    }

    fn write32(&self, off: u32, v: u32) {
        if off == r::MDIC {
            self.mdic_log.lock().unwrap().push(v);
            // A read of PHY reg 0 returns BMCR 0x1140 (autoneg on, 1000 full).
            let data = if v & mdic::OP_READ != 0 {
                0x1140
            } else {
                v & 0xFFFF
            };
            self.set(off, (v & !0xFFFF) | data | mdic::READY);
            return;
        }
        self.set(off, v);
    }
}

fn e82576() -> Igb {
    Igb::probe(0x8086, 0x10C9).unwrap().1
}

#[test]
fn reset_goes_on_without_auto_rd() {
    let s = Script::default();
    let regs = Regs::new(&s);
    let t = Instant::now();
    e82576()
        .reset(&regs)
        .expect("a missing EECD.AUTO_RD is not fatal on igb");
    assert!(t.elapsed() < Duration::from_secs(2));
}

#[test]
fn link_up_restarts_autonegotiation_on_phy_1() {
    let s = Script::default();
    let _ = e82576().link_up(&Regs::new(&s), Duration::from_millis(5));
    let log = s.mdic_log.lock().unwrap().clone();
    let phy = |v: u32| (v & mdic::PHY_MASK) >> mdic::PHY_SHIFT;
    let reg = |v: u32| (v & mdic::REG_MASK) >> mdic::REG_SHIFT;
    let write = log
        .iter()
        .find(|&&v| v & mdic::OP_WRITE != 0)
        .unwrap_or_else(|| panic!("no MDIC write in {log:x?}"));
    assert_eq!((phy(*write), reg(*write)), (1, 0), "{write:#x}");
    // AUTO_NEG_EN (b12) and RESTART_AUTO_NEG (b9) on top of what was read.
    assert_eq!(write & 0xFFFF, 0x1140 | 0x1200, "{write:#x}");
}

/// An L2 PTPv2 Sync with sequenceId `seq`.
fn sync_frame(seq: u16) -> Vec<u8> {
    let mut f = vec![0u8; 14 + 44];
    f[..6].copy_from_slice(&[0x01, 0x1B, 0x19, 0, 0, 0]);
    f[12..14].copy_from_slice(&0x88F7u16.to_be_bytes());
    f[14] = 0x00; // Sync
    f[15] = 0x02;
    f[16..18].copy_from_slice(&44u16.to_be_bytes());
    f[14 + 30..14 + 32].copy_from_slice(&seq.to_be_bytes());
    f
}

fn rx_stamp(status: r::RxStatus, rxsatrh_seq: u16, frame_seq: u16) -> Option<u64> {
    let s = Script::default();
    s.set(r::RXSATRH, u32::from(rxsatrh_seq) << 16);
    s.set(r::RXSTMPH, 0x10);
    let regs = Regs::new(&s);
    let buf = sync_frame(frame_seq);
    match e82576().rx_frame(&regs, RxFilter::PtpV2L2Event, status, &buf, 0) {
        RxFrame::Ptp { rx_ns, .. } => rx_ns,
        RxFrame::Other { .. } => panic!("a Sync is PTP"),
    }
}

#[test]
fn rx_stamp_follows_the_descriptor_ts_bit() {
    let ts = r::RxStatus::TS;
    assert!(rx_stamp(ts, 0x1234, 0x1234).is_some(), "sequenceId agrees");
    // QEMU: RXSATRH b31:16 read 0 for every Sync, whatever its sequenceId.
    assert!(rx_stamp(ts, 0, 0x1234).is_some(), "RXSATRH disagrees");
    assert!(
        rx_stamp(r::RxStatus::empty(), 0x1234, 0x1234).is_none(),
        "no TS: not stamped"
    );
}

/// SYSTIM that advances 1 ms (in 82576 counts, ns << 19) at every SYSTIML read, as a clock
/// read from a preempted thread or a slow guest sees it.
struct RunningSystim(Script);

impl Mmio for RunningSystim {
    fn read32(&self, off: u32) -> u32 {
        if off == r::SYSTIML {
            let v = (u64::from(self.0.read32(r::SYSTIMH)) << 32 | u64::from(self.0.read32(off)))
                + (1_000_000u64 << 19);
            self.0.set(r::SYSTIMH, (v >> 32) as u32);
            self.0.set(off, v as u32);
        }
        self.0.read32(off)
    }

    fn write32(&self, off: u32, v: u32) {
        self.0.write32(off, v)
    }
}

/// adjtime on the 82576 moves its timecounter by exactly the delta, as Linux's
/// timecounter_adjtime: a read-modify-write loses whatever the counter ran between the read
/// and the write (seen in a TCG guest: µs off where Linux igb was exact).
#[test]
fn e82576_adjtime_is_exact() {
    use intel_common::clock::Phc;
    let fam = e82576();
    let regs = std::sync::Arc::new(Regs::new(RunningSystim(Script::default())));
    let phc = Phc::new(regs, fam.clock());
    // The timecounter's reading of a fixed count, through an RX stamp of that count.
    let tc_ns = |count: u64| {
        let s = Script::default();
        s.set(r::RXSTMPL, count as u32);
        s.set(r::RXSTMPH, (count >> 32) as u32);
        let buf = sync_frame(1);
        match fam.rx_frame(
            &Regs::new(&s),
            RxFilter::PtpV2L2Event,
            r::RxStatus::TS,
            &buf,
            0,
        ) {
            RxFrame::Ptp {
                rx_ns: Some(ns), ..
            } => ns,
            other => panic!("{other:?}"),
        }
    };
    let before = tc_ns(1 << 40);
    phc.adjtime(2_250_000_000).unwrap();
    assert_eq!(tc_ns(1 << 40) as i128 - before as i128, 2_250_000_000);
}
