//! The driver side of the register funnel: every register access of a driver goes through
//! [`Regs`], which counts reads and writes (the deterministic cost figures in `Stats`) and
//! offers bounded polls. Registers whose bits carry meaning are read and written typed
//! ([`Regs::get`], [`Regs::set`], [`Regs::update`], [`Regs::wait_for`] over an
//! `intel_regs::fields::Reg<T>`); the others through the raw `u32` path.

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use intel_regs::fields::{Reg, RegBits};
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

    /// Typed read of a register whose bits carry meaning.
    #[inline]
    pub fn get<T: RegBits>(&self, reg: Reg<T>) -> T {
        T::from_reg(self.read(reg.offset()))
    }

    /// Typed write: `reg` takes only its own bit type.
    ///
    /// ```
    /// # use intel_common::Regs;
    /// # use intel_regs::igc::{Ctrl, reg};
    /// # struct Bar;
    /// # impl ptp_pci::Mmio for Bar {
    /// #     fn read32(&self, _: u32) -> u32 { 0 }
    /// #     fn write32(&self, _: u32, _: u32) {}
    /// # }
    /// let regs = Regs::new(Bar);
    /// regs.set(reg::CTRL, Ctrl::SLU);
    /// ```
    ///
    /// An interrupt cause written to CTRL does not compile:
    ///
    /// ```compile_fail,E0308
    /// # use intel_common::Regs;
    /// # use intel_regs::igc::{IntCause, reg};
    /// # struct Bar;
    /// # impl ptp_pci::Mmio for Bar {
    /// #     fn read32(&self, _: u32) -> u32 { 0 }
    /// #     fn write32(&self, _: u32, _: u32) {}
    /// # }
    /// let regs = Regs::new(Bar);
    /// regs.set(reg::CTRL, IntCause::TXDW);
    /// ```
    #[inline]
    pub fn set<T: RegBits>(&self, reg: Reg<T>, value: T) {
        self.write(reg.offset(), value.to_reg())
    }

    /// Typed read-modify-write: sets `set` and clears `clear`.
    pub fn update<T: RegBits>(&self, reg: Reg<T>, set: T, clear: T) {
        self.modify(reg.offset(), set.to_reg(), clear.to_reg())
    }

    /// Typed [`Regs::poll`]: waits for `value & mask == want`.
    pub fn wait_for<T: RegBits>(
        &self,
        what: &'static str,
        reg: Reg<T>,
        mask: T,
        want: T,
        timeout: Duration,
        step: Duration,
    ) -> Result<T, HwError> {
        let (mask, want) = (mask.to_reg(), want.to_reg());
        self.poll(what, reg.offset(), mask, want, timeout, step)
            .map(T::from_reg)
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
