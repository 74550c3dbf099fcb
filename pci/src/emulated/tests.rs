//! The emulated backend against a trivial fake device.

use super::*;
use crate::config::{Capability, find_msix};
use std::time::Instant;

/// A fake device: register 0x0 is scratch, a write to 0x4 raises MSI-X vector `value`,
/// a write to 0x8 copies 8 bytes from the DMA address in 0x10/0x14 to that address + 8,
/// register 0xC counts polls, and 0x18 is read-to-clear.
#[derive(Default)]
struct Fake {
    scratch: u32,
    dma_lo: u32,
    dma_hi: u32,
    polls: u32,
    rc: u32,
}

impl Device for Fake {
    fn ids(&self) -> PciIds {
        PciIds {
            vendor: 0x8086,
            device: 0x15F2,
            class: 0x02,
            revision: 3,
            ..PciIds::default()
        }
    }
    fn bar_len(&self, bar: u8) -> Option<u32> {
        (bar == 0).then_some(0x100)
    }
    fn msix_vectors(&self) -> u16 {
        2
    }
    fn read32(&mut self, _bar: u8, offset: u32, _host: &mut dyn DeviceHost) -> u32 {
        match offset {
            0x0 => self.scratch,
            0xC => self.polls,
            0x18 => std::mem::take(&mut self.rc),
            _ => 0,
        }
    }
    fn write32(&mut self, _bar: u8, offset: u32, value: u32, host: &mut dyn DeviceHost) {
        match offset {
            0x0 => self.scratch = value,
            0x4 => host.raise_msix(value as u16),
            0x8 => {
                let addr = self.dma_lo as u64 | (self.dma_hi as u64) << 32;
                let mut buf = [0u8; 8];
                if host.dma_read(addr, &mut buf) {
                    assert!(host.dma_write(addr + 8, &buf));
                }
            }
            0x10 => self.dma_lo = value,
            0x14 => self.dma_hi = value,
            0x18 => self.rc = value,
            _ => {}
        }
    }
    fn poll(&mut self, _host: &mut dyn DeviceHost) -> Option<Duration> {
        self.polls += 1;
        None
    }
}

#[test]
fn config_space_shows_ids_and_msix() {
    let f = EmuFunction::new(Fake::default(), "fake");
    let ids = f.ids();
    assert_eq!(
        (ids.vendor, ids.device, ids.class, ids.revision),
        (0x8086, 0x15F2, 0x02, 3)
    );
    let caps = f.capabilities();
    let msix = find_msix(&caps).expect("MSI-X capability");
    assert_eq!(msix.table_size, 2);
    assert_eq!(msix.table_bar, 3);
    assert!(matches!(caps[0], Capability::MsiX(_)));
}

#[test]
fn bar_reads_and_writes_reach_the_model() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    let bar = f.map_bar(0).unwrap();
    bar.write32(0x0, 0xDEAD_BEEF);
    assert_eq!(bar.read32(0x0), 0xDEAD_BEEF);
    // Read side effects happen once per read.
    bar.write32(0x18, 7);
    assert_eq!(bar.read32(0x18), 7);
    assert_eq!(bar.read32(0x18), 0);
    assert_eq!(f.mmio_counts(), (3, 2));
    assert_eq!(f.map_bar(1).unwrap_err(), PciError::NoSuchBar(1));
}

#[test]
#[should_panic(expected = "outside BAR")]
fn out_of_range_access_is_refused() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    let bar = f.map_bar(0).unwrap();
    bar.read32(0x100);
}

#[test]
fn interrupt_wakes_a_waiting_thread() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    let bar = f.map_bar(0).unwrap();
    let vectors = f.alloc_vectors(2).unwrap();
    let v1 = vectors[1].clone();
    // Raise the interrupt only once the waiter is asleep in the kernel after announcing the
    // wait (state 'S'): nothing between the two sleeps, so it is blocked in `wait`, and the
    // interrupt wakes a blocked thread rather than being found already pending.
    let waiter = ptp_ipc::testing::spawn_blocked("irq-waiter", Duration::from_secs(5), move || {
        let t = Instant::now();
        (v1.wait(Duration::from_secs(5)), t.elapsed())
    });
    bar.write32(0x4, 1);
    let (r, took) = waiter.join().unwrap();
    assert_eq!(r, IrqWait::Fired, "after {took:?}");
    // Woken by the interrupt, not by the 5 s timeout.
    assert!(took < Duration::from_secs(4), "{took:?}");
    // Only vector 1 fired.
    assert_eq!(
        vectors[0].wait(Duration::from_millis(10)),
        IrqWait::TimedOut
    );
    // An interrupt raised before the wait is not lost.
    bar.write32(0x4, 0);
    assert_eq!(vectors[0].wait(Duration::from_millis(10)), IrqWait::Fired);
    assert_eq!(
        vectors[0].wait(Duration::from_millis(10)),
        IrqWait::TimedOut
    );
}

#[test]
fn masked_msix_raises_nothing_and_drop_closes_vectors() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    let bar = f.map_bar(0).unwrap();
    let vectors = f.alloc_vectors(1).unwrap();
    let cap = find_msix(&f.capabilities()).unwrap().cap_offset;
    f.config_write32(cap, 0); // MSI-X enable off
    bar.write32(0x4, 0);
    assert_eq!(
        vectors[0].wait(Duration::from_millis(10)),
        IrqWait::TimedOut
    );
    drop(bar);
    drop(f);
    assert_eq!(vectors[0].wait(Duration::from_secs(5)), IrqWait::Closed);
}

#[test]
fn too_many_vectors_is_an_error() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    assert!(matches!(f.alloc_vectors(3), Err(PciError::Interrupts(_))));
}

#[test]
fn dma_memory_is_shared_with_the_device() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    let bar = f.map_bar(0).unwrap();
    let dma = f.alloc_dma(64).unwrap();
    assert!(dma.bus_addr() >= DMA_BUS_BASE);
    dma.write64(0, 0x0123_4567_89AB_CDEF);
    bar.write32(0x10, dma.bus_addr() as u32);
    bar.write32(0x14, (dma.bus_addr() >> 32) as u32);
    bar.write32(0x8, 1);
    assert_eq!(dma.read64(8), 0x0123_4567_89AB_CDEF);
    // A second region gets a distinct bus range.
    let dma2 = f.alloc_dma(16).unwrap();
    assert!(dma2.bus_addr() >= dma.bus_addr() + 4096);
}

#[test]
fn model_thread_polls_after_writes() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    let bar = f.map_bar(0).unwrap();
    f.start_model_thread(Duration::from_secs(10));
    let start = bar.read32(0xC);
    bar.write32(0x0, 1);
    let deadline = Instant::now() + Duration::from_secs(5);
    while bar.read32(0xC) == start {
        assert!(Instant::now() < deadline, "model thread never polled");
        std::thread::sleep(Duration::from_millis(1));
    }
}

#[test]
fn deterministic_poll_without_thread() {
    let f = EmuFunction::new(Fake::default(), "fake");
    assert_eq!(f.poll(), None);
    assert_eq!(f.with_device(|d| d.polls), 1);
}

#[test]
fn an_injected_fault_drops_or_delays_every_message() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    let bar = f.map_bar(0).unwrap();
    let v = f.alloc_vectors(1).unwrap().remove(0);
    // Works.
    bar.write32(0x4, 0);
    assert_eq!(v.wait(Duration::from_millis(10)), IrqWait::Fired);
    // Never: the message is gone for good.
    f.set_irq_fault(IrqFault::Never);
    bar.write32(0x4, 0);
    assert_eq!(v.wait(Duration::from_millis(50)), IrqWait::TimedOut);
    // Late: nothing at once, the message after the delay.
    f.set_irq_fault(IrqFault::Late(Duration::from_millis(100)));
    let t = Instant::now();
    bar.write32(0x4, 0);
    assert_eq!(v.wait(Duration::from_millis(20)), IrqWait::TimedOut);
    assert_eq!(v.wait(Duration::from_secs(5)), IrqWait::Fired);
    assert!(
        t.elapsed() >= Duration::from_millis(100),
        "{:?}",
        t.elapsed()
    );
    assert_eq!(v.count(), 2, "the dropped message never arrives");
}

#[test]
fn the_offered_interrupt_modes_are_the_ones_allocated() {
    let mut f = EmuFunction::new(Fake::default(), "fake");
    assert_eq!(f.irq_support().msix_entries, 2);
    f.offer_irqs(IrqSupport {
        msix_entries: 0,
        msi: true,
        legacy_line: None,
    });
    assert!(matches!(
        f.alloc_irq_mode(IrqMode::MsiX { vectors: 1 }),
        Err(PciError::Interrupts(_))
    ));
    assert!(f.alloc_irq_mode(IrqMode::Legacy { line: 5 }).is_err());
    assert!(f.alloc_irq_mode(IrqMode::Polled).unwrap().is_empty());
    let v = f.alloc_irq_mode(IrqMode::Msi).unwrap();
    assert_eq!(v.len(), 1);
    // The model's single message (vector 0) reaches it.
    f.map_bar(0).unwrap().write32(0x4, 0);
    assert_eq!(v[0].wait(Duration::from_millis(10)), IrqWait::Fired);
}
