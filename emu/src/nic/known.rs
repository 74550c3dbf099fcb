//! The record of accesses to BAR0 offsets a model does not implement, and the per-offset
//! bitmap a model builds from its table of implemented offsets.
//!
//! "Implemented" means the model gives the register its behaviour or the part's register is
//! plain read/write configuration whose storage is what a driver sees. Every access to any
//! other offset still reads back what was written (DESIGN.md §4), but is counted per offset
//! and logged once: what a driver touched there is the model's to-do list. Values a model does
//! not implement at an implemented offset are recorded the same way, as writes.

use std::collections::BTreeMap;

/// One unmodelled offset and how often it was accessed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct UnimplementedAccess {
    /// BAR0 byte offset (dword-aligned).
    pub offset: u32,
    /// Reads of it.
    pub reads: u64,
    /// Writes to it.
    pub writes: u64,
}

/// One bit per dword of a BAR: the implemented set, built once from a table predicate so the
/// check on every register access costs no table walk.
#[derive(Debug)]
pub(crate) struct OffsetMap {
    bits: Box<[u64]>,
}

impl OffsetMap {
    /// The map of a `len`-byte BAR whose dword offsets `f` says are implemented.
    pub(crate) fn build(len: u32, f: impl Fn(u32) -> bool) -> Self {
        let dwords = (len / 4) as usize;
        let mut bits = vec![0u64; dwords.div_ceil(64)].into_boxed_slice();
        for d in 0..dwords {
            if f(d as u32 * 4) {
                bits[d / 64] |= 1 << (d % 64);
            }
        }
        Self { bits }
    }

    /// Whether dword-aligned `offset` is in the set.
    pub(crate) fn contains(&self, offset: u32) -> bool {
        let d = (offset / 4) as usize;
        self.bits
            .get(d / 64)
            .is_some_and(|w| w & (1 << (d % 64)) != 0)
    }
}

/// Accesses to offsets outside a model's implemented set, per offset.
#[derive(Debug, Clone)]
pub(crate) struct Unimplemented {
    /// The part, for the log ("i225", "i210", ...).
    name: &'static str,
    seen: BTreeMap<u32, (u64, u64)>,
}

impl Unimplemented {
    pub(crate) fn new(name: &'static str) -> Self {
        Self {
            name,
            seen: BTreeMap::new(),
        }
    }

    /// The part's name, for logs.
    pub(crate) fn name(&self) -> &'static str {
        self.name
    }

    /// Counts an access; the first one to an offset is logged.
    pub(crate) fn record(&mut self, offset: u32, write: bool) {
        let e = self.seen.entry(offset).or_insert_with(|| {
            log::warn!(
                "{} model: {} of unmodelled BAR0 offset {offset:#07x}",
                self.name,
                if write { "write" } else { "read" }
            );
            (0, 0)
        });
        if write {
            e.1 += 1;
        } else {
            e.0 += 1;
        }
    }

    /// Counts a register value the model does not implement (as a write to `offset`); the
    /// first one at an offset is logged.
    pub(crate) fn record_value(&mut self, offset: u32, v: u32) {
        let e = self.seen.entry(offset).or_insert_with(|| {
            log::warn!(
                "{} model: unmodelled value {v:#010x} written to BAR0 offset {offset:#07x}",
                self.name
            );
            (0, 0)
        });
        e.1 += 1;
    }

    pub(crate) fn list(&self) -> Vec<UnimplementedAccess> {
        self.seen
            .iter()
            .map(|(&offset, &(reads, writes))| UnimplementedAccess {
                offset,
                reads,
                writes,
            })
            .collect()
    }

    pub(crate) fn clear(&mut self) {
        self.seen.clear();
    }
}
