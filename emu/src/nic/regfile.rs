//! Plain dword storage and MMIO counters.

use intel_regs::fields::{Reg, RegBits};

/// Storage behind every offset of a BAR that the model gives no behaviour to: a write sticks
/// and reads back (DESIGN.md §4 "unmodelled offsets read back what was written"). Offsets past
/// the end read 0 and swallow writes, so no offset can panic.
#[derive(Debug, Clone)]
pub(crate) struct RegFile {
    words: Box<[u32]>,
}

impl RegFile {
    /// `len` bytes of zeroed registers.
    pub(crate) fn new(len: u32) -> Self {
        Self {
            words: vec![0; (len / 4) as usize].into_boxed_slice(),
        }
    }

    pub(crate) fn get(&self, offset: u32) -> u32 {
        self.words.get((offset / 4) as usize).copied().unwrap_or(0)
    }

    pub(crate) fn set(&mut self, offset: u32, value: u32) {
        if let Some(w) = self.words.get_mut((offset / 4) as usize) {
            *w = value;
        }
    }

    /// A register whose bits carry meaning, typed.
    pub(crate) fn get_reg<T: RegBits>(&self, reg: Reg<T>) -> T {
        T::from_reg(self.get(reg.offset()))
    }

    pub(crate) fn set_reg<T: RegBits>(&mut self, reg: Reg<T>, value: T) {
        self.set(reg.offset(), value.to_reg())
    }

    /// Back to all zeroes (the caller then loads the non-zero power-on values).
    pub(crate) fn clear(&mut self) {
        self.words.fill(0);
    }
}

/// Per-register MMIO counters for BAR0 (the deterministic cost figures of DESIGN.md §4) and
/// totals over every BAR the model serves.
#[derive(Debug, Clone)]
pub(crate) struct Counters {
    reads: Box<[u64]>,
    writes: Box<[u64]>,
    pub(crate) total_reads: u64,
    pub(crate) total_writes: u64,
}

impl Counters {
    pub(crate) fn new(bar0_len: u32) -> Self {
        let n = (bar0_len / 4) as usize;
        Self {
            reads: vec![0; n].into_boxed_slice(),
            writes: vec![0; n].into_boxed_slice(),
            total_reads: 0,
            total_writes: 0,
        }
    }

    pub(crate) fn count_read(&mut self, offset: u32) {
        if let Some(c) = self.reads.get_mut((offset / 4) as usize) {
            *c += 1;
        }
    }

    pub(crate) fn count_write(&mut self, offset: u32) {
        if let Some(c) = self.writes.get_mut((offset / 4) as usize) {
            *c += 1;
        }
    }

    pub(crate) fn reads(&self, offset: u32) -> u64 {
        if offset % 4 != 0 {
            return 0;
        }
        self.reads.get((offset / 4) as usize).copied().unwrap_or(0)
    }

    pub(crate) fn writes(&self, offset: u32) -> u64 {
        if offset % 4 != 0 {
            return 0;
        }
        self.writes.get((offset / 4) as usize).copied().unwrap_or(0)
    }

    pub(crate) fn reset(&mut self) {
        self.reads.fill(0);
        self.writes.fill(0);
        self.total_reads = 0;
        self.total_writes = 0;
    }
}
