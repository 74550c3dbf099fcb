//! The shared region's layout and the lock-free single-producer/single-consumer rings in it.
//!
//! ```text
//! line 0      RegionHeader: magic, version, slot size, slot count, generation (written by the
//!             creator; a region served to one connection after another, as a Redox driver's
//!             pool segment is, is re-initialised with a new generation for each: `reinit`)
//! line 1      closed[2]: side A / side B has gone (set on drop or shutdown)
//! line 2      bell[4]: per-side data/space wake words, index 2*side + kind (Redox: the truth
//!             of "signalled" beside the doorbell pipes; unused on Linux)
//! line 3      pid[2]: per-side process ids (Redox liveness; informational on Linux)
//! lines 4-7   ring 0 control (A → B): head | tail | consumer_sleeping | producer_waiting
//! lines 8-11  ring 1 control (B → A)
//! then        ring 0 slots, ring 1 slots: `slot_count` slots of `slot_size` bytes each,
//!             a slot = u32 little-endian length + payload
//! ```
//!
//! Everything in the control part is an atomic, so any bit pattern a peer writes is a valid
//! value. Each side keeps its own index (producer: head, consumer: tail) in local memory and
//! only publishes it: a peer scribbling over the shared copy cannot move our position, only
//! make its own view inconsistent, which the bound checks below turn into [`RingError::Corrupt`].

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering, fence};

use super::RingError;

/// "PTPRING1", little-endian.
pub const MAGIC: u64 = u64::from_le_bytes(*b"PTPRING1");
/// Layout version; a peer built with another layout is refused on attach. 2: the header's
/// generation word (an attacher from version 1 would not notice its region being re-used).
pub const VERSION: u32 = 2;
/// The generation of a fresh region ([`init`]); [`reinit`] counts up from there.
pub const FIRST_GENERATION: u64 = 1;
/// Cache line size the control words are spread over (head and tail on separate lines, so the
/// producer's and the consumer's stores do not bounce one line between cores).
pub const LINE: usize = 64;
/// Bytes of a slot taken by the length prefix.
pub const SLOT_PREFIX: usize = 4;
/// Slot size bounds: a slot holds at least a small message, at most the largest wire message
/// (with its prefix, rounded up to the multiple of 8 every slot size is: 4104, where the
/// unrounded 4100 was itself an invalid size and the largest valid slot, 4096, could not carry
/// a 4093..=4096-byte message).
pub const MIN_SLOT: u32 = 64;
pub const MAX_SLOT: u32 = (crate::wire::MAX_MESSAGE + SLOT_PREFIX).next_multiple_of(8) as u32;
/// At most this many slots per ring (2^16 × 4 KiB = 256 MiB would already be absurd).
pub const MAX_SLOTS: u32 = 1 << 16;
/// Rings in a region: one per direction.
pub const RINGS: usize = 2;
/// Largest region an attacher maps (both rings at the geometry bounds).
pub const MAX_REGION: usize = CONTROL_LEN + RINGS * MAX_SLOT as usize * MAX_SLOTS as usize;

#[repr(C, align(64))]
pub(super) struct RegionHeader {
    pub magic: AtomicU64,
    pub version: AtomicU32,
    pub slot_size: AtomicU32,
    pub slot_count: AtomicU32,
    /// Which connection the region serves: an endpoint whose generation differs is stale (its
    /// peer re-initialised the region for someone else) and sees the peer gone.
    pub generation: AtomicU64,
}

#[repr(C, align(64))]
pub(super) struct Line<T>(pub T);

#[repr(C)]
pub(super) struct RingCtl {
    /// Next sequence number the producer writes (published after the slot is written).
    pub head: Line<AtomicU64>,
    /// Next sequence number the consumer reads (published after the slot is copied out).
    pub tail: Line<AtomicU64>,
    /// 1 while the consumer is (about to be) asleep waiting for data.
    pub consumer_sleeping: Line<AtomicU32>,
    /// 1 while the producer is (about to be) asleep waiting for space.
    pub producer_waiting: Line<AtomicU32>,
}

#[repr(C)]
pub(super) struct Control {
    pub header: RegionHeader,
    pub closed: Line<[AtomicU32; 2]>,
    pub bell: Line<[AtomicU32; 4]>,
    pub pid: Line<[AtomicU32; 2]>,
    pub rings: [RingCtl; RINGS],
}

/// Bytes before the first slot.
pub const CONTROL_LEN: usize = std::mem::size_of::<Control>();
const _: () = assert!(CONTROL_LEN == 12 * LINE);
const _: () = assert!(std::mem::align_of::<Control>() == LINE);

/// A ring geometry, checked: `slot_size` in [MIN_SLOT, MAX_SLOT] and a multiple of 8,
/// `slot_count` a power of two in [2, MAX_SLOTS].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Geometry {
    pub slot_size: u32,
    pub slot_count: u32,
}

impl Geometry {
    pub fn new(slot_size: u32, slot_count: u32) -> Result<Self, RingError> {
        let ok_size = (MIN_SLOT..=MAX_SLOT).contains(&slot_size) && slot_size % 8 == 0;
        let ok_count = (2..=MAX_SLOTS).contains(&slot_count) && slot_count.is_power_of_two();
        if !ok_size || !ok_count {
            return Err(RingError::BadGeometry {
                slot_size,
                slot_count,
            });
        }
        Ok(Geometry {
            slot_size,
            slot_count,
        })
    }

    /// Largest payload a slot holds.
    pub fn max_payload(&self) -> usize {
        self.slot_size as usize - SLOT_PREFIX
    }

    /// Bytes of the whole region (control part and both rings' slots). Cannot overflow: both
    /// factors are bounded above.
    pub fn region_len(&self) -> usize {
        CONTROL_LEN + RINGS * self.slot_size as usize * self.slot_count as usize
    }
}

/// A region size an attacher may map: the control part at least, the largest geometry's at
/// most.
pub(super) fn check_region_len(len: usize) -> Result<(), RingError> {
    if len < CONTROL_LEN {
        return Err(RingError::RegionTooSmall {
            have: len,
            need: CONTROL_LEN,
        });
    }
    if len > MAX_REGION {
        return Err(RingError::Setup(format!(
            "region of {len} bytes exceeds the largest ring region ({MAX_REGION})"
        )));
    }
    Ok(())
}

/// Writes a fresh header into a zeroed region; the magic last, so an attacher that sees it sees
/// the rest.
pub(super) fn init(ctl: &Control, g: Geometry) {
    ctl.header
        .generation
        .store(FIRST_GENERATION, Ordering::Relaxed);
    ctl.header.version.store(VERSION, Ordering::Relaxed);
    ctl.header.slot_size.store(g.slot_size, Ordering::Relaxed);
    ctl.header.slot_count.store(g.slot_count, Ordering::Relaxed);
    ctl.header.magic.store(MAGIC, Ordering::Release);
}

/// Re-initialises a region that served an earlier connection for a new one with `generation`:
/// the new generation first (so a stale endpoint of the old one stops at its next operation,
/// [`RingError::PeerGone`]), the magic withdrawn while the rest is reset (indices, sleep flags,
/// `closed`, pids), then the header and the magic, published last as in [`init`]. The bell
/// words are counters and keep counting: a waiter compares them with what it last saw, so
/// winding them back could hide a signal. The slots are left as they are: only published
/// slots are read, and none are after the reset.
///
/// The caller makes sure no endpoint of its own on the region is alive, and that the peer of
/// the earlier connection has let go of it (a Redox driver: its client's scheme handle is
/// closed). A stale endpoint that is still running cannot be stopped: one that checked its
/// generation just before the new one was stored may still publish an index or its `closed`
/// word after the reset, which the new connection sees as phantom messages or
/// [`RingError::Corrupt`]. The generation only tells an idle stale endpoint, and an attacher
/// racing the reset (see [`validate_generation`]), that the region has moved on.
pub(super) fn reinit(ctl: &Control, g: Geometry, generation: u64) {
    ctl.header.generation.store(generation, Ordering::SeqCst);
    ctl.header.magic.store(0, Ordering::SeqCst);
    // Pairs with the acquire fence in `validate_generation`: an attacher that reads any of the
    // stores below also reads the new generation on its re-check.
    fence(Ordering::Release);
    for w in ctl.closed.0.iter().chain(&ctl.pid.0) {
        w.store(0, Ordering::Relaxed);
    }
    for r in &ctl.rings {
        r.head.0.store(0, Ordering::Relaxed);
        r.tail.0.store(0, Ordering::Relaxed);
        r.consumer_sleeping.0.store(0, Ordering::Relaxed);
        r.producer_waiting.0.store(0, Ordering::Relaxed);
    }
    ctl.header.version.store(VERSION, Ordering::Relaxed);
    ctl.header.slot_size.store(g.slot_size, Ordering::Relaxed);
    ctl.header.slot_count.store(g.slot_count, Ordering::Relaxed);
    ctl.header.magic.store(MAGIC, Ordering::Release);
}

/// The region's current generation.
pub(super) fn generation(ctl: &Control) -> u64 {
    ctl.header.generation.load(Ordering::Acquire)
}

/// As [`validate`], and the generation the header belongs to. Read like a seqlock: the
/// generation before and after the header, so a header read while [`reinit`] rewrote it (a
/// geometry of one generation, counted as another's) is refused, `Setup`.
pub(super) fn validate_generation(ctl: &Control, len: usize) -> Result<(Geometry, u64), RingError> {
    let before = generation(ctl);
    let g = validate(ctl, len)?;
    fence(Ordering::Acquire);
    let after = ctl.header.generation.load(Ordering::Relaxed);
    if before != after {
        return Err(RingError::Setup(
            "ring region re-initialised while it was attached".into(),
        ));
    }
    Ok((g, before))
}

/// Reads and checks the header of a region `len` bytes long; the geometry is copied out once
/// and never read from shared memory again.
pub(super) fn validate(ctl: &Control, len: usize) -> Result<Geometry, RingError> {
    let magic = ctl.header.magic.load(Ordering::Acquire);
    if magic != MAGIC {
        return Err(RingError::BadMagic(magic));
    }
    let version = ctl.header.version.load(Ordering::Relaxed);
    if version != VERSION {
        return Err(RingError::BadVersion(version));
    }
    let g = Geometry::new(
        ctl.header.slot_size.load(Ordering::Relaxed),
        ctl.header.slot_count.load(Ordering::Relaxed),
    )?;
    if len < g.region_len() {
        return Err(RingError::RegionTooSmall {
            have: len,
            need: g.region_len(),
        });
    }
    Ok(g)
}

/// One direction's ring inside a mapped region. Holds raw pointers into the mapping; the
/// owner (`Endpoint`) keeps the mapping alive longer than any `RingView`.
#[derive(Clone, Copy)]
pub(super) struct RingView {
    pub ctl: *const RingCtl,
    pub slots: *mut u8,
    pub geom: Geometry,
}

// Safety: the pointers refer to a shared mapping whose control words are atomics; slot bytes
// are only touched by the side that owns the slot under the head/tail protocol (a misbehaving
// peer can only make us copy garbage, which is bound-checked). The mapping outlives the view.
unsafe impl Send for RingView {}
// Safety: as above.
unsafe impl Sync for RingView {}

impl RingView {
    fn ctl(&self) -> &RingCtl {
        // Safety: `ctl` points into the live mapping (see the type's docs); all fields atomics.
        unsafe { &*self.ctl }
    }

    fn slot(&self, seq: u64) -> *mut u8 {
        let idx = (seq & (self.geom.slot_count as u64 - 1)) as usize;
        // Safety: idx < slot_count, so the slot lies inside the `slot_count * slot_size` bytes
        // the region was checked to hold after `slots`.
        unsafe { self.slots.add(idx * self.geom.slot_size as usize) }
    }

    /// Producer: copies `msg` into the slot at `head` and publishes it. `Ok(false)`: full.
    pub fn try_push(&self, head: &mut u64, msg: &[u8]) -> Result<bool, RingError> {
        if msg.len() > self.geom.max_payload() {
            return Err(RingError::TooLarge {
                len: msg.len(),
                max: self.geom.max_payload(),
            });
        }
        let tail = self.ctl().tail.0.load(Ordering::Acquire);
        let used = head.wrapping_sub(tail);
        if used > self.geom.slot_count as u64 {
            return Err(RingError::Corrupt("consumer's tail is ahead of our head"));
        }
        if used == self.geom.slot_count as u64 {
            return Ok(false);
        }
        let p = self.slot(*head);
        let len = (msg.len() as u32).to_le_bytes();
        // Safety: the slot is ours until `head` is published (the consumer has released it:
        // used < slot_count), it holds SLOT_PREFIX + max_payload bytes, and `msg` fits.
        unsafe {
            std::ptr::copy_nonoverlapping(len.as_ptr(), p, SLOT_PREFIX);
            std::ptr::copy_nonoverlapping(msg.as_ptr(), p.add(SLOT_PREFIX), msg.len());
        }
        *head = head.wrapping_add(1);
        self.ctl().head.0.store(*head, Ordering::Release);
        Ok(true)
    }

    /// Consumer: copies the message at `tail` into `buf` and releases its slot. `Ok(false)`:
    /// empty. A length beyond the slot skips the slot and fails with `Corrupt`.
    pub fn try_pop(&self, tail: &mut u64, buf: &mut Vec<u8>) -> Result<bool, RingError> {
        let avail = self.pending(*tail)?;
        if avail == 0 {
            return Ok(false);
        }
        let p = self.slot(*tail);
        let mut len = [0u8; SLOT_PREFIX];
        // Safety: the slot was published by the producer (avail > 0) and lies in the region.
        unsafe { std::ptr::copy_nonoverlapping(p, len.as_mut_ptr(), SLOT_PREFIX) };
        let len = u32::from_le_bytes(len) as usize;
        let ok = len <= self.geom.max_payload();
        if ok {
            buf.clear();
            buf.reserve(len);
            // Safety: `len` was bound-checked against the slot; `buf` has room for `len` bytes.
            unsafe {
                std::ptr::copy_nonoverlapping(p.add(SLOT_PREFIX), buf.as_mut_ptr(), len);
                buf.set_len(len);
            }
        }
        *tail = tail.wrapping_add(1);
        self.ctl().tail.0.store(*tail, Ordering::Release);
        if !ok {
            return Err(RingError::Corrupt("slot length exceeds the slot"));
        }
        Ok(true)
    }

    /// Messages published and not yet consumed, bound-checked against the ring's size.
    pub fn pending(&self, tail: u64) -> Result<u64, RingError> {
        let head = self.ctl().head.0.load(Ordering::Acquire);
        let avail = head.wrapping_sub(tail);
        if avail > self.geom.slot_count as u64 {
            return Err(RingError::Corrupt("producer's head is beyond the ring"));
        }
        Ok(avail)
    }

    /// Free slots as the producer sees them (0 when the peer's tail is inconsistent: the next
    /// push reports that).
    pub fn free(&self, head: u64) -> u64 {
        let tail = self.ctl().tail.0.load(Ordering::Acquire);
        (self.geom.slot_count as u64).saturating_sub(head.wrapping_sub(tail))
    }

    /// Consumer: announce sleep, then re-check (Dekker with the producer's `wake_consumer`):
    /// `true` when it may sleep.
    pub fn consumer_may_sleep(&self, tail: u64) -> bool {
        self.ctl().consumer_sleeping.0.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if !matches!(self.pending(tail), Ok(0)) {
            self.ctl().consumer_sleeping.0.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn consumer_awake(&self) {
        self.ctl().consumer_sleeping.0.store(0, Ordering::Relaxed);
    }

    /// Producer, after publishing: whether the consumer announced sleep (and so needs a
    /// signal). Clears the flag, so one sleep costs at most one signal.
    pub fn take_consumer_sleeping(&self) -> bool {
        fence(Ordering::SeqCst);
        let w = &self.ctl().consumer_sleeping.0;
        w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::SeqCst) != 0
    }

    /// Producer: announce a wait for space, then re-check: `true` when it may sleep.
    pub fn producer_may_sleep(&self, head: u64) -> bool {
        self.ctl().producer_waiting.0.store(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        if self.free(head) > 0 {
            self.ctl().producer_waiting.0.store(0, Ordering::Relaxed);
            return false;
        }
        true
    }

    pub fn producer_awake(&self) {
        self.ctl().producer_waiting.0.store(0, Ordering::Relaxed);
    }

    /// Consumer, after releasing a slot: whether the producer waits for space (clears it).
    pub fn take_producer_waiting(&self) -> bool {
        fence(Ordering::SeqCst);
        let w = &self.ctl().producer_waiting.0;
        w.load(Ordering::Relaxed) != 0 && w.swap(0, Ordering::SeqCst) != 0
    }
}
