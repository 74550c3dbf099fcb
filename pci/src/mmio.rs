//! The register funnel: every BAR access in the project goes through [`Mmio`].

use std::ptr::NonNull;
use std::sync::Arc;

/// 32-bit register access at a byte offset into one BAR.
///
/// `&self` on both methods: registers are shared between the main thread and the IRQ thread,
/// as on hardware. Reads may have side effects (read-to-clear ICR/TSICR, SYSTIML latching
/// SYSTIMH), which is why a read is never elided or reordered by the funnel.
pub trait Mmio: Send + Sync {
    fn read32(&self, offset: u32) -> u32;
    fn write32(&self, offset: u32, value: u32);
}

impl<T: Mmio + ?Sized> Mmio for &T {
    #[inline]
    fn read32(&self, offset: u32) -> u32 {
        (**self).read32(offset)
    }
    #[inline]
    fn write32(&self, offset: u32, value: u32) {
        (**self).write32(offset, value)
    }
}

impl<T: Mmio + ?Sized> Mmio for Arc<T> {
    #[inline]
    fn read32(&self, offset: u32) -> u32 {
        (**self).read32(offset)
    }
    #[inline]
    fn write32(&self, offset: u32, value: u32) {
        (**self).write32(offset, value)
    }
}

/// Keeps a mapping alive; dropped when the last [`VolatileMmio`] clone goes.
pub trait Mapping: Send + Sync {}

/// A memory-mapped BAR on real hardware: volatile 32-bit loads and stores.
#[derive(Clone)]
pub struct VolatileMmio {
    base: NonNull<u8>,
    len: usize,
    _mapping: Arc<dyn Mapping>,
}

impl std::fmt::Debug for VolatileMmio {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolatileMmio")
            .field("base", &self.base)
            .field("len", &self.len)
            .finish()
    }
}

// Safety: the pointer refers to device memory that is valid for the life of `_mapping`;
// volatile accesses from several threads are what the hardware expects.
unsafe impl Send for VolatileMmio {}
// Safety: as above; the type hands out no references into device memory.
unsafe impl Sync for VolatileMmio {}

impl VolatileMmio {
    /// # Safety
    /// `base..base+len` must be a mapping of device registers (uncacheable), valid and not
    /// unmapped for as long as `mapping` lives, and 4-byte aligned.
    pub unsafe fn new(base: NonNull<u8>, len: usize, mapping: Arc<dyn Mapping>) -> Self {
        Self {
            base,
            len,
            _mapping: mapping,
        }
    }

    #[inline]
    fn reg(&self, offset: u32) -> *mut u32 {
        let offset = offset as usize;
        // Out-of-range or unaligned offsets are driver bugs; fail loudly rather than touch
        // memory outside the BAR.
        assert!(
            offset % 4 == 0 && offset + 4 <= self.len,
            "MMIO offset {offset:#x} outside BAR of {:#x} bytes",
            self.len
        );
        // Safety: checked to lie inside the mapping just above.
        unsafe { self.base.as_ptr().add(offset).cast::<u32>() }
    }
}

impl Mmio for VolatileMmio {
    #[inline]
    fn read32(&self, offset: u32) -> u32 {
        // Safety: `reg` returns an aligned pointer inside the live mapping; device registers
        // must be accessed with volatile loads so none is elided or merged.
        u32::from_le(unsafe { self.reg(offset).read_volatile() })
    }
    #[inline]
    fn write32(&self, offset: u32, value: u32) {
        // Safety: as in `read32`.
        unsafe { self.reg(offset).write_volatile(value.to_le()) }
    }
}
