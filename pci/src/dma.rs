//! DMA memory shared between a driver and its device.
//!
//! All accesses are atomic (relaxed) loads and stores of naturally aligned words: on real
//! hardware this is ordinary cached memory the NIC snoops, and in emulation the device model
//! runs on another thread, so plain loads and stores would be a data race. Ordering against the
//! device (descriptor before tail write, DD before payload) is the driver's job, with fences.

use std::any::Any;
use std::ptr::NonNull;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU32, AtomicU64, Ordering};

/// A zeroed, physically contiguous region with its bus address.
pub struct DmaRegion {
    ptr: NonNull<u8>,
    len: usize,
    bus: u64,
    _owner: Arc<dyn Any + Send + Sync>,
}

impl std::fmt::Debug for DmaRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("DmaRegion")
            .field("len", &self.len)
            .field("bus", &format_args!("{:#x}", self.bus))
            .finish()
    }
}

// Safety: the region is only accessed through atomics; the owner keeps it alive.
unsafe impl Send for DmaRegion {}
// Safety: as above.
unsafe impl Sync for DmaRegion {}

impl DmaRegion {
    /// # Safety
    /// `ptr..ptr+len` must be valid, 8-byte aligned memory that stays mapped while `owner`
    /// lives, and that nothing accesses other than through atomics (or the device).
    pub unsafe fn new(
        ptr: NonNull<u8>,
        len: usize,
        bus: u64,
        owner: Arc<dyn Any + Send + Sync>,
    ) -> Self {
        Self {
            ptr,
            len,
            bus,
            _owner: owner,
        }
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The address the device uses for byte 0 of the region.
    pub fn bus_addr(&self) -> u64 {
        self.bus
    }

    #[inline]
    fn at<T>(&self, offset: usize) -> *const T {
        let size = std::mem::size_of::<T>();
        assert!(
            offset % size == 0 && offset + size <= self.len,
            "DMA access at {offset:#x} (+{size}) outside region of {:#x} bytes",
            self.len
        );
        // Safety: bounds checked above.
        unsafe { self.ptr.as_ptr().add(offset).cast::<T>() }
    }

    pub fn read32(&self, offset: usize) -> u32 {
        // Safety: `at` checked bounds and alignment; the memory is live (owner) and only
        // accessed atomically.
        u32::from_le(unsafe { &*self.at::<AtomicU32>(offset) }.load(Ordering::Relaxed))
    }

    pub fn write32(&self, offset: usize, value: u32) {
        // Safety: as in `read32`.
        unsafe { &*self.at::<AtomicU32>(offset) }.store(value.to_le(), Ordering::Relaxed)
    }

    pub fn read64(&self, offset: usize) -> u64 {
        // Safety: as in `read32`.
        u64::from_le(unsafe { &*self.at::<AtomicU64>(offset) }.load(Ordering::Relaxed))
    }

    pub fn write64(&self, offset: usize, value: u64) {
        // Safety: as in `read32`.
        unsafe { &*self.at::<AtomicU64>(offset) }.store(value.to_le(), Ordering::Relaxed)
    }

    /// Copies bytes out of the region. Returns false (copying nothing) when out of bounds.
    pub fn read_bytes(&self, offset: usize, out: &mut [u8]) -> bool {
        let Some(end) = offset.checked_add(out.len()) else {
            return false;
        };
        if end > self.len {
            return false;
        }
        for (i, b) in out.iter_mut().enumerate() {
            *b = self.byte(offset + i).load(Ordering::Relaxed);
        }
        true
    }

    /// Copies bytes into the region. Returns false (copying nothing) when out of bounds.
    pub fn write_bytes(&self, offset: usize, data: &[u8]) -> bool {
        let Some(end) = offset.checked_add(data.len()) else {
            return false;
        };
        if end > self.len {
            return false;
        }
        for (i, b) in data.iter().enumerate() {
            self.byte(offset + i).store(*b, Ordering::Relaxed);
        }
        true
    }

    #[inline]
    fn byte(&self, offset: usize) -> &AtomicU8 {
        debug_assert!(offset < self.len);
        // Safety: callers checked `offset < len`; AtomicU8 has alignment 1.
        unsafe { &*self.ptr.as_ptr().add(offset).cast::<AtomicU8>() }
    }
}

/// Heap-backed DMA memory for the emulated backend: 8-byte aligned, zeroed.
pub(crate) struct HeapDma {
    words: Box<[AtomicU64]>,
}

impl HeapDma {
    pub(crate) fn new(len: usize) -> Arc<Self> {
        let words = len.div_ceil(8);
        Arc::new(Self {
            words: (0..words).map(|_| AtomicU64::new(0)).collect(),
        })
    }

    pub(crate) fn len(&self) -> usize {
        self.words.len() * 8
    }

    pub(crate) fn base(&self) -> NonNull<u8> {
        NonNull::new(self.words.as_ptr() as *mut u8).expect("boxed slice pointer is non-null")
    }

    /// A region over the whole buffer at `bus`.
    pub(crate) fn region(self: &Arc<Self>, bus: u64, len: usize) -> DmaRegion {
        let owner: Arc<dyn Any + Send + Sync> = self.clone();
        // Safety: the words live as long as `owner`, are 8-byte aligned, and are only accessed
        // through atomics (here and in the emulated device's DMA host).
        unsafe { DmaRegion::new(self.base(), len.min(self.len()), bus, owner) }
    }
}
