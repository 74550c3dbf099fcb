//! The driver side of the register funnel: every register access of a driver goes through
//! [`Regs`], which counts reads and writes (the deterministic cost figures in `Stats`) and
//! offers bounded polls.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use ptp_pci::Mmio;

use crate::HwError;

/// A BAR plus access counters. Shared by the main thread, the IRQ thread and the watchdog.
#[derive(Debug)]
pub struct Regs<M> {
    bar: M,
    reads: AtomicU64,
    writes: AtomicU64,
}

impl<M: Mmio> Regs<M> {
    pub fn new(bar: M) -> Self {
        Self {
            bar,
            reads: AtomicU64::new(0),
            writes: AtomicU64::new(0),
        }
    }

    #[inline]
    pub fn read(&self, offset: u32) -> u32 {
        self.reads.fetch_add(1, Ordering::Relaxed);
        self.bar.read32(offset)
    }

    #[inline]
    pub fn write(&self, offset: u32, value: u32) {
        self.writes.fetch_add(1, Ordering::Relaxed);
        self.bar.write32(offset, value)
    }

    /// Read-modify-write: sets `set` and clears `clear`.
    pub fn modify(&self, offset: u32, set: u32, clear: u32) {
        let v = self.read(offset);
        self.write(offset, (v & !clear) | set);
    }

    /// MMIO reads issued so far.
    pub fn reads(&self) -> u64 {
        self.reads.load(Ordering::Relaxed)
    }

    /// MMIO writes issued so far.
    pub fn writes(&self) -> u64 {
        self.writes.load(Ordering::Relaxed)
    }

    /// Polls `offset` until `value & mask == want`, sleeping `step` between reads, for at most
    /// `timeout`. Never unbounded: a device that never answers gives [`HwError::Timeout`].
    pub fn poll(
        &self,
        what: &'static str,
        offset: u32,
        mask: u32,
        want: u32,
        timeout: Duration,
        step: Duration,
    ) -> Result<u32, HwError> {
        let start = Instant::now();
        loop {
            let v = self.read(offset);
            if v & mask == want {
                return Ok(v);
            }
            if start.elapsed() >= timeout {
                return Err(HwError::Timeout {
                    what,
                    waited_ms: start.elapsed().as_millis() as u64,
                });
            }
            std::thread::sleep(step);
        }
    }
}
