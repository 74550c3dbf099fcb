//! The clock page on a slow bus (issue 27): igcd in a Redox guest on our i225 behind QEMU's
//! proxy took 20-30 µs per register read with nothing preempted, over the 20 µs bracket a
//! reading needed to anchor the clock page — so the page held no sample and `ptpd bench`
//! failed on it. The driver and the model share a virtual clock here; every access costs
//! [`ACCESS_NS`], and one read can be preempted on top.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use intel_common::Regs;
use intel_common::clock::{PageSample, Phc};
use intel_common::igc::{self, Igc};
use ptp_emu::clock::VirtualClock;
use ptp_emu::igc::{I225, I225Config};
use ptp_pci::emulated::{EmuBar, EmuFunction};
use ptp_pci::{Mmio, PciFunction};

const T0: u64 = 1_700_000_000_000_000_000;
/// One read's cost on the proxied bus, as the Redox boot showed it (beyond the 20 µs bound).
const ACCESS_NS: u64 = 30_000;
/// A preemption on top of one read.
const PREEMPT_NS: u64 = 2_000_000;

struct SlowBus {
    bar: EmuBar<I225>,
    clock: VirtualClock,
    /// Reads still to go before the preempted one (0: none armed).
    preempt_in: AtomicU64,
}

impl Mmio for SlowBus {
    fn read32(&self, offset: u32) -> u32 {
        self.clock.advance(ACCESS_NS / 2);
        if self.preempt_in.load(Ordering::Relaxed) == 1 {
            self.clock.advance(PREEMPT_NS);
        }
        let _ = self
            .preempt_in
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
        let v = self.bar.read32(offset);
        self.clock.advance(ACCESS_NS / 2);
        v
    }
    fn write32(&self, offset: u32, value: u32) {
        self.clock.advance(ACCESS_NS);
        self.bar.write32(offset, value);
    }
}

struct Shared(Arc<SlowBus>);

impl Mmio for Shared {
    fn read32(&self, offset: u32) -> u32 {
        self.0.read32(offset)
    }
    fn write32(&self, offset: u32, value: u32) {
        self.0.write32(offset, value)
    }
}

#[test]
fn a_slow_bus_still_fills_the_clock_page_and_a_preempted_read_does_not() {
    let clock = VirtualClock::new(1_000_000_000);
    let mut func = EmuFunction::new(I225::new(I225Config::i225(clock.source())), "slow");
    let bus = Arc::new(SlowBus {
        bar: func.map_bar(0).unwrap(),
        clock: clock.clone(),
        preempt_in: AtomicU64::new(0),
    });
    let regs = Arc::new(Regs::new(Shared(bus.clone())));
    igc::ptp_reset(&regs, T0);
    let published: Arc<Mutex<Vec<PageSample>>> = Arc::default();
    let p = published.clone();
    let c = clock.clone();
    let phc = Phc::new(regs, Igc)
        .with_host_clock(move || c.now())
        .with_publisher(move |s| p.lock().unwrap().push(*s));
    for _ in 0..5 {
        phc.gettime();
    }
    let n = published.lock().unwrap().len();
    assert_eq!(
        n, 5,
        "every unpreempted reading on the slow bus anchors the page"
    );
    // The latching read (the first of the two) preempted: the reading is kept from the page.
    bus.preempt_in.store(1, Ordering::Relaxed);
    let r = phc.gettime();
    assert_eq!(
        published.lock().unwrap().len(),
        5,
        "a preempted reading reached the page"
    );
    let truth = func.with_device(|d| d.phc_now_ns());
    assert!(truth >= r.phc_ns, "the reading itself is still a PHC time");
    phc.gettime();
    assert_eq!(published.lock().unwrap().len(), 6);
}
