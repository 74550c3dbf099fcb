//! The attacher's view of a region whose every byte a peer wrote, over plain memory: the same
//! header check (`layout::validate_generation`, what an attacher runs on a mapped region) and
//! the same ring reads and writes (`RingView`) as a [`RingEndpoint`](super::RingEndpoint) of
//! side B, without a mapping or bells. For the fuzz target (fuzz/, `ring_region`) and tests:
//! nothing in the daemons calls it.

use super::RingError;
use super::layout::{self, CONTROL_LEN, Control, Geometry, LINE, RingView};

/// What side B made of a region.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionProbe {
    /// The geometry the header declares (checked against the region's length).
    pub geometry: Geometry,
    /// The header's generation.
    pub generation: u64,
    /// Each receive from ring 0 (A → B) from a fresh tail, in order, until the ring was empty
    /// or an error that would repeat (a head beyond the ring); a bad slot length is an `Err`
    /// item and the next slot is read, as `try_recv` does on its next call.
    pub received: Vec<Result<Vec<u8>, RingError>>,
    /// The first send into ring 1 (B → A) from a fresh head: `Ok(false)` full, `Err` when the
    /// peer's published tail is inconsistent.
    pub sent: Result<bool, RingError>,
}

/// One cache line of the copy: keeps the region's control part as aligned as a mapping.
#[derive(Clone, Copy)]
#[repr(C, align(64))]
struct Block([u8; LINE]);

/// Checks and reads `region` as an attacher (side B) would a mapped region of that length.
/// Never panics; every inconsistency is a typed error.
#[doc(hidden)]
pub fn probe_region(region: &[u8]) -> Result<RegionProbe, RingError> {
    layout::check_region_len(region.len())?;
    let mut blocks = vec![Block([0; LINE]); region.len().div_ceil(LINE)];
    let base = blocks.as_mut_ptr().cast::<u8>();
    // Safety: `blocks` holds at least `region.len()` bytes and does not overlap `region`.
    unsafe { std::ptr::copy_nonoverlapping(region.as_ptr(), base, region.len()) };
    // Safety: `base` is 64-byte aligned (Block) and the copy is at least CONTROL_LEN bytes
    // (check_region_len); Control is all atomics, valid for any bytes. `blocks` is neither
    // moved nor freed while `ctl` or the views below are used (they end with this function).
    let ctl = unsafe { &*base.cast::<Control>() };
    let (g, generation) = layout::validate_generation(ctl, region.len())?;
    let ring_len = g.slot_size as usize * g.slot_count as usize;
    let view = |i: usize| RingView {
        ctl: &ctl.rings[i],
        // Safety: validate checked region.len() ≥ g.region_len(), so both slot arrays lie
        // inside the copy.
        slots: unsafe { base.add(CONTROL_LEN + i * ring_len) },
        geom: g,
    };
    let (rx, tx) = (view(0), view(1));
    let mut received = Vec::new();
    let mut tail = 0u64;
    // pending() bounds a fresh tail's receives by slot_count; one more finds the ring empty.
    for _ in 0..=g.slot_count {
        let mut buf = Vec::new();
        match rx.try_pop(&mut tail, &mut buf) {
            Ok(true) => received.push(Ok(buf)),
            Ok(false) => break,
            Err(e @ RingError::Corrupt("slot length exceeds the slot")) => received.push(Err(e)),
            Err(e) => {
                received.push(Err(e));
                break;
            }
        }
    }
    let sent = tx.try_push(&mut 0, b"probe");
    drop(blocks);
    Ok(RegionProbe {
        geometry: g,
        generation,
        received,
        sent,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ring::{MAGIC, VERSION, decode_setup, setup_message};

    /// A region of geometry 64 B × 2 as `init` writes it, ring 0 holding `msgs` (head = count).
    fn region(msgs: &[&[u8]]) -> Vec<u8> {
        let g = Geometry::new(64, 2).unwrap();
        let mut r = vec![0u8; g.region_len()];
        r[0..8].copy_from_slice(&MAGIC.to_le_bytes());
        r[8..12].copy_from_slice(&VERSION.to_le_bytes());
        r[12..16].copy_from_slice(&64u32.to_le_bytes());
        r[16..20].copy_from_slice(&2u32.to_le_bytes());
        r[24..32].copy_from_slice(&layout::FIRST_GENERATION.to_le_bytes());
        for (i, m) in msgs.iter().enumerate() {
            let at = CONTROL_LEN + i * 64;
            r[at..at + 4].copy_from_slice(&(m.len() as u32).to_le_bytes());
            r[at + 4..at + 4 + m.len()].copy_from_slice(m);
        }
        r[4 * LINE..4 * LINE + 8].copy_from_slice(&(msgs.len() as u64).to_le_bytes());
        r
    }

    #[test]
    fn a_region_written_as_init_and_try_push_do_is_read_back() {
        let p = probe_region(&region(&[b"one", b"two"])).unwrap();
        assert_eq!(p.geometry, Geometry::new(64, 2).unwrap());
        assert_eq!(p.generation, layout::FIRST_GENERATION);
        assert_eq!(p.received, [Ok(b"one".to_vec()), Ok(b"two".to_vec())]);
        assert_eq!(p.sent, Ok(true));
    }

    #[test]
    fn hostile_indices_and_lengths_are_typed_errors() {
        let mut r = region(&[b"one"]);
        // Head beyond the ring.
        r[4 * LINE..4 * LINE + 8].copy_from_slice(&3u64.to_le_bytes());
        let p = probe_region(&r).unwrap();
        assert_eq!(
            p.received,
            [Err(RingError::Corrupt(
                "producer's head is beyond the ring"
            ))]
        );
        // A slot length past the slot, then a good slot; ring 1's tail ahead of our head.
        let mut r = region(&[b"one", b"two"]);
        r[CONTROL_LEN..CONTROL_LEN + 4].copy_from_slice(&61u32.to_le_bytes());
        r[9 * LINE..9 * LINE + 8].copy_from_slice(&5u64.to_le_bytes());
        let p = probe_region(&r).unwrap();
        assert_eq!(
            p.received,
            [
                Err(RingError::Corrupt("slot length exceeds the slot")),
                Ok(b"two".to_vec())
            ]
        );
        assert_eq!(
            p.sent,
            Err(RingError::Corrupt("consumer's tail is ahead of our head"))
        );
        // Too short for its geometry, or for a header.
        let r = region(&[]);
        assert!(matches!(
            probe_region(&r[..r.len() - 1]),
            Err(RingError::RegionTooSmall { .. })
        ));
        assert!(matches!(
            probe_region(&r[..10]),
            Err(RingError::RegionTooSmall { .. })
        ));
    }

    #[test]
    fn setup_messages_decode_to_their_length_and_others_come_back() {
        assert_eq!(decode_setup(&setup_message(4096)), Ok(4096));
        let mut m = setup_message(4096);
        m[7] = 9;
        assert_eq!(decode_setup(&m), Err(RingError::BadVersion(9)));
        for other in [
            &b"hello"[..],
            &setup_message(1)[..15],
            &[setup_message(1).as_slice(), &[0]].concat(),
        ] {
            assert_eq!(
                decode_setup(other),
                Err(RingError::NotOffered(other.to_vec()))
            );
        }
    }
}
