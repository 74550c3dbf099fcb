//! TX and RX descriptor rings with advanced descriptors (reference §9, §10), shared by the igc
//! and igb families: the layouts and the DD/TSIP/MAC_TSTAMP bits are the same.
//!
//! A ring only moves memory: it fills descriptors and buffers, tells the caller which tail to
//! write, and reads write-backs. Register writes (TDT/RDT) stay with the caller, behind the funnel.

use std::sync::atomic::{Ordering, fence};

use intel_regs::e1000::{RxStatus, TxStatus, txd};
use ptp_pci::{DmaRegion, PciFunction};

use crate::HwError;

/// Bytes per descriptor.
pub const DESC_LEN: usize = 16;
/// Bytes per packet buffer (SRRCTL.BSIZEPKT = 2 KB; frames here are ≤ 1522 bytes).
pub const BUF_LEN: usize = 2048;

/// The ring is full; the frame was not queued.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RingFull;

/// One transmit ring.
pub struct TxRing {
    desc: DmaRegion,
    bufs: DmaRegion,
    len: usize,
    /// Next descriptor software fills (TDT after the write).
    tail: usize,
    /// Next descriptor software reclaims.
    clean: usize,
}

impl TxRing {
    /// Allocates `len` descriptors (a multiple of 8: TDLEN is in 128-byte units) and buffers.
    pub fn new<F: PciFunction>(func: &mut F, len: usize) -> Result<Self, HwError> {
        assert!(
            len >= 8 && len % 8 == 0,
            "ring length must be a multiple of 8"
        );
        Ok(Self {
            desc: func.alloc_dma(len * DESC_LEN)?,
            bufs: func.alloc_dma(len * BUF_LEN)?,
            len,
            tail: 0,
            clean: 0,
        })
    }

    pub fn len(&self) -> usize {
        self.len
    }

    pub fn is_empty(&self) -> bool {
        self.tail == self.clean
    }

    /// Bus address of descriptor 0 (for TDBAL/TDBAH).
    pub fn bus_addr(&self) -> u64 {
        self.desc.bus_addr()
    }

    /// Bytes of descriptor memory (for TDLEN).
    pub fn byte_len(&self) -> u32 {
        (self.len * DESC_LEN) as u32
    }

    /// Descriptors in flight.
    pub fn in_flight(&self) -> usize {
        (self.tail + self.len - self.clean) % self.len
    }

    /// Queues one frame in one descriptor with `cmd_extra` (MAC_TSTAMP and the set bits) and
    /// returns the new tail to write to TDT. One slot always stays empty so that TDT == TDH
    /// means "empty" to the hardware.
    pub fn post(&mut self, frame: &[u8], cmd_extra: u32) -> Result<u32, RingFull> {
        if frame.len() > BUF_LEN || frame.is_empty() {
            // Callers validate length first; treat it as unqueueable rather than truncate.
            return Err(RingFull);
        }
        let next = (self.tail + 1) % self.len;
        if next == self.clean {
            return Err(RingFull);
        }
        let i = self.tail;
        let buf_off = i * BUF_LEN;
        self.bufs.write_bytes(buf_off, frame);
        let len = frame.len() as u32;
        let d = i * DESC_LEN;
        self.desc.write64(d, self.bufs.bus_addr() + buf_off as u64);
        let cmd = txd::DTYP_DATA | txd::DEXT | txd::IFCS | txd::EOP | txd::RS | len | cmd_extra;
        self.desc.write64(
            d + 8,
            cmd as u64 | ((len << txd::PAYLEN_SHIFT) as u64) << 32,
        );
        // The buffer and descriptor must be visible to the device before the tail write that
        // hands them over.
        fence(Ordering::Release);
        self.tail = next;
        Ok(next as u32)
    }

    /// Reclaims descriptors the device has finished (DD in the write-back); returns how many.
    pub fn reclaim(&mut self) -> usize {
        let mut n = 0;
        while self.clean != self.tail {
            let d = self.clean * DESC_LEN;
            let status = TxStatus::from_bits_retain(self.desc.read32(d + 12));
            if !status.contains(TxStatus::DD) {
                break;
            }
            fence(Ordering::Acquire);
            self.desc.write64(d + 8, 0);
            self.clean = (self.clean + 1) % self.len;
            n += 1;
        }
        n
    }
}

/// One received frame as the ring reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RxMeta {
    /// Write-back status_error (DD, EOP, TSIP, ...).
    pub status: RxStatus,
    /// Length written by the device (includes the timestamp header when TSIP).
    pub len: usize,
}

/// One receive ring.
pub struct RxRing {
    desc: DmaRegion,
    bufs: DmaRegion,
    len: usize,
    /// Next descriptor to look at.
    next: usize,
}

impl RxRing {
    pub fn new<F: PciFunction>(func: &mut F, len: usize) -> Result<Self, HwError> {
        assert!(
            len >= 8 && len % 8 == 0,
            "ring length must be a multiple of 8"
        );
        let r = Self {
            desc: func.alloc_dma(len * DESC_LEN)?,
            bufs: func.alloc_dma(len * BUF_LEN)?,
            len,
            next: 0,
        };
        for i in 0..len {
            r.arm(i);
        }
        fence(Ordering::Release);
        Ok(r)
    }

    pub fn bus_addr(&self) -> u64 {
        self.desc.bus_addr()
    }

    pub fn byte_len(&self) -> u32 {
        (self.len * DESC_LEN) as u32
    }

    /// The tail that hands every descriptor but one to the device.
    pub fn initial_tail(&self) -> u32 {
        (self.len - 1) as u32
    }

    fn arm(&self, i: usize) {
        let d = i * DESC_LEN;
        self.desc
            .write64(d, self.bufs.bus_addr() + (i * BUF_LEN) as u64);
        // The header address overlays the write-back's status: zero means "not done".
        self.desc.write64(d + 8, 0);
    }

    /// Takes up to `budget` completed frames, calling `f(meta, bytes)` for each, re-arms their
    /// descriptors, and returns the new tail to write to RDT (None when nothing completed).
    pub fn poll(&mut self, budget: usize, mut f: impl FnMut(RxMeta, &[u8])) -> Option<u32> {
        let mut done = 0;
        let mut buf = [0u8; BUF_LEN];
        while done < budget {
            let d = self.next * DESC_LEN;
            let status = RxStatus::from_bits_retain(self.desc.read32(d + 8));
            if !status.contains(RxStatus::DD) {
                break;
            }
            // Read the length and the buffer only after seeing DD.
            fence(Ordering::Acquire);
            let len = (self.desc.read32(d + 12) & 0xFFFF) as usize;
            let len = len.min(BUF_LEN);
            self.bufs.read_bytes(self.next * BUF_LEN, &mut buf[..len]);
            f(RxMeta { status, len }, &buf[..len]);
            self.arm(self.next);
            self.next = (self.next + 1) % self.len;
            done += 1;
        }
        if done == 0 {
            return None;
        }
        fence(Ordering::Release);
        // The descriptor before `next` is the last one handed back.
        Some(((self.next + self.len - 1) % self.len) as u32)
    }
}
