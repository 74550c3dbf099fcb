//! A ring region served to one connection after another (issue 16, the Redox driver side).
//!
//! A Redox driver makes its ring segments before its `setrens(0, 0)` sandbox (their doorbell
//! queues and timers cannot be opened inside) and re-uses them: for each new connection a
//! segment no endpoint of ours holds any more gets new memory ([`Segment::new_private`]) and is
//! initialised ([`layout::reinit`]: fresh indices, flags and pids under a new generation) and
//! its side A is made; the client maps side B through its driver handle.
//! An endpoint made for an earlier generation is stale: every operation of it reports
//! [`RingError::PeerGone`], and its `close` leaves the new connection's `closed` word alone.
//! This part is the same on every OS (host-tested here); the mapping is in `redox.rs`.

use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

use super::layout::{self, Geometry};
use super::map::Mapping;
use super::{Bell, RingEndpoint, RingError};

/// Makes side A's bell on segment `index`'s mapping (the OS's kind: Redox doorbell pipes,
/// whose waiting half the pool made for that segment before the sandbox).
pub(super) type MakeBell = Box<dyn Fn(&Mapping, usize) -> Box<dyn Bell> + Send + Sync>;

/// A mapped region and the generation it was last initialised with.
pub(super) struct Segment {
    /// Shared with the live endpoint (at most one of ours: [`Segment::renew`] checks).
    map: Arc<Mapping>,
    generation: u64,
    /// Each connection gets new memory ([`Segment::new_private`]): what an earlier client
    /// still maps is no longer ours, so it cannot scribble on its successor's ring.
    fresh: bool,
}

impl Segment {
    /// Takes the mapping of a whole region and writes a fresh header for `g` into it (the
    /// largest geometry it will serve: the region must hold it).
    pub(super) fn new(map: Mapping, g: Geometry) -> Result<Self, RingError> {
        if map.len() < g.region_len() {
            return Err(RingError::RegionTooSmall {
                have: map.len(),
                need: g.region_len(),
            });
        }
        layout::init(map.control(), g);
        Ok(Segment {
            map: Arc::new(map),
            generation: layout::FIRST_GENERATION,
            fresh: false,
        })
    }

    /// A region of this process's own memory for geometry `g`, served to clients from the
    /// owner's scheme (`mmap_prep`) rather than from a shared-memory object, and replaced by
    /// new memory for every connection.
    #[cfg_attr(not(target_os = "redox"), allow(dead_code))]
    pub(super) fn new_private(g: Geometry) -> Result<Self, RingError> {
        let mut seg = Self::new(Mapping::anonymous(g.region_len())?, g)?;
        seg.fresh = true;
        Ok(seg)
    }

    /// Where the region is in this process's memory, and its length (what a scheme's
    /// `mmap_prep` returns to map it into the client).
    pub(super) fn region(&self) -> (usize, usize) {
        (self.map.base() as usize, self.map.len())
    }

    /// Whether an endpoint made by [`Segment::renew`] is still alive.
    pub(super) fn in_use(&self) -> bool {
        Arc::strong_count(&self.map) > 1
    }

    /// Whether a ring pair of geometry `g` fits the region.
    pub(super) fn holds(&self, g: Geometry) -> bool {
        g.region_len() <= self.map.len()
    }

    /// The generation of the connection the segment serves (or served last).
    #[cfg(test)]
    pub(super) fn generation(&self) -> u64 {
        self.generation
    }

    /// Re-initialises the region for geometry `g` under the next generation and returns its
    /// side A, with the bell `bell` makes on the mapping. Refused while an endpoint of an
    /// earlier generation is alive in this process (`Setup`: two side-A endpoints would share
    /// one ring), and for a `g` the region cannot hold (`RegionTooSmall`); a refusal changes
    /// nothing.
    pub(super) fn renew(
        &mut self,
        g: Geometry,
        busy_poll: Duration,
        bell: impl FnOnce(&Mapping) -> Box<dyn Bell>,
    ) -> Result<RingEndpoint, RingError> {
        if self.in_use() {
            return Err(RingError::Setup(
                "ring segment still held by an earlier connection's endpoint".into(),
            ));
        }
        if !self.holds(g) {
            return Err(RingError::RegionTooSmall {
                have: self.map.len(),
                need: g.region_len(),
            });
        }
        if self.fresh {
            // Not in use: ours is the only reference, and dropping it unmaps the old memory
            // here (a client still mapping it keeps its pages, no longer shared with us).
            self.map = Arc::new(Mapping::anonymous(self.map.len())?);
        }
        self.generation = self.generation.wrapping_add(1);
        layout::reinit(self.map.control(), g, self.generation);
        let bell = bell(&self.map);
        Ok(RingEndpoint::on_shared(
            self.map.clone(),
            g,
            self.generation,
            0,
            busy_poll,
            bell,
        ))
    }

    /// Side B on a mapping of a region someone offered: the header checked together with the
    /// generation it belongs to (a later re-initialisation makes this endpoint stale).
    pub(super) fn attach(
        map: Mapping,
        busy_poll: Duration,
        bell: impl FnOnce(&Mapping) -> Box<dyn Bell>,
    ) -> Result<RingEndpoint, RingError> {
        let (g, generation) = layout::validate_generation(map.control(), map.len())?;
        let bell = bell(&map);
        Ok(RingEndpoint::on_shared(
            Arc::new(map),
            g,
            generation,
            1,
            busy_poll,
            bell,
        ))
    }
}

/// One segment of a [`RingPool`].
struct Entry {
    name: String,
    seg: Segment,
    /// Lent to a connection that has not ended yet (see [`RingPool::release`]).
    lent: bool,
    /// A file backing the segment, kept as long as the mapping (none for private memory).
    _backing: Option<File>,
}

/// A segment lent to a new connection: the name to offer the client, and side A.
pub struct Lent {
    /// Which segment, for [`RingPool::release`].
    pub index: usize,
    pub name: String,
    /// Bytes of the region (what the client maps: at least the ring pair's).
    pub region_len: usize,
    pub ring: RingEndpoint,
}

/// Ring segments made once (a Redox driver: before its sandbox) and lent to one connection
/// after another. A segment is lent again only after [`RingPool::release`] (its connection
/// ended: the client let go of the region) and once no endpoint of ours on it is alive;
/// lending re-initialises it under a new generation ([`Segment::renew`]).
pub struct RingPool {
    entries: Vec<Entry>,
    bell: MakeBell,
}

impl RingPool {
    pub(super) fn new(bell: MakeBell) -> Self {
        RingPool {
            entries: Vec::new(),
            bell,
        }
    }

    pub(super) fn add(&mut self, name: String, seg: Segment, backing: Option<File>) {
        self.entries.push(Entry {
            name,
            seg,
            lent: false,
            _backing: backing,
        });
    }

    /// Segments in the pool.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Segments lent to connections that have not been released.
    pub fn lent(&self) -> usize {
        self.entries.iter().filter(|e| e.lent).count()
    }

    /// Renews a free segment for a ring pair of geometry `g` (see [`Segment::renew`]).
    /// `RegionTooSmall` when no segment of the pool holds `g`, `NoFreeSegment` when every one
    /// that does is lent or still held.
    pub fn lend(&mut self, g: Geometry, busy_poll: Duration) -> Result<Lent, RingError> {
        if !self.entries.iter().any(|e| e.seg.holds(g)) {
            let have = self.entries.iter().map(|e| e.seg.map.len()).max();
            return Err(RingError::RegionTooSmall {
                have: have.unwrap_or(0),
                need: g.region_len(),
            });
        }
        let (bell, segments) = (&self.bell, self.entries.len());
        let (index, e) = self
            .entries
            .iter_mut()
            .enumerate()
            .find(|(_, e)| !e.lent && !e.seg.in_use() && e.seg.holds(g))
            .ok_or(RingError::NoFreeSegment { segments })?;
        let ring = e.seg.renew(g, busy_poll, |m| bell(m, index))?;
        e.lent = true;
        Ok(Lent {
            index,
            name: e.name.clone(),
            region_len: e.seg.region().1,
            ring,
        })
    }

    /// Where lent segment `index` is in this process's memory, and its length; `None` if it is
    /// not lent (a scheme maps it only for the connection it is lent to).
    pub fn lent_region(&self, index: usize) -> Option<(usize, usize)> {
        self.entries
            .get(index)
            .filter(|e| e.lent)
            .map(|e| e.seg.region())
    }

    /// The connection segment `index` was lent to has ended and its client has let go of the
    /// region: it may be lent again once our own endpoint on it is gone too.
    pub fn release(&mut self, index: usize) {
        if let Some(e) = self.entries.get_mut(index) {
            e.lent = false;
        }
    }
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use std::os::fd::{AsFd, OwnedFd};
    use std::time::Duration;

    use super::super::linux::new_region;
    use super::super::{Wake, Woken};
    use super::*;

    /// A bell that never rings: these tests only use the non-waiting calls.
    struct Mute;

    impl Bell for Mute {
        fn ring_peer(&self, _w: Wake) -> Result<(), RingError> {
            Ok(())
        }
        fn ring_self(&self) {}
        fn ring_own(&self, _w: Wake) {}
        fn wait(&self, _w: Wake, timeout: Option<Duration>) -> Result<Woken, RingError> {
            std::thread::sleep(timeout.unwrap_or(Duration::from_millis(1)));
            Ok(Woken::Timeout)
        }
    }

    fn mute(_: &Mapping, _: usize) -> Box<dyn Bell> {
        Box::new(Mute)
    }

    fn small() -> Geometry {
        Geometry::new(64, 4).unwrap()
    }

    /// A segment for `g` and the region's descriptor (for more mappings: the attaching
    /// process's).
    fn segment_for(g: Geometry) -> (Segment, OwnedFd) {
        let len = g.region_len();
        let fd = new_region(len, false).unwrap();
        let seg = Segment::new(Mapping::map(fd.as_fd(), len).unwrap(), g).unwrap();
        (seg, fd)
    }

    /// A segment of 4 slots of 64 bytes.
    fn segment() -> (Segment, OwnedFd) {
        segment_for(small())
    }

    /// Side B on the whole region, as the Redox client maps it (its size from the file).
    fn attach(fd: &OwnedFd) -> RingEndpoint {
        let file = std::fs::File::from(fd.try_clone().unwrap());
        let len = file.metadata().unwrap().len() as usize;
        Segment::attach(
            Mapping::map(fd.as_fd(), len).unwrap(),
            Duration::ZERO,
            |m| mute(m, 0),
        )
        .unwrap()
    }

    fn renew(seg: &mut Segment) -> Result<RingEndpoint, RingError> {
        seg.renew(small(), Duration::ZERO, |m| mute(m, 0))
    }

    /// `n` messages each way (several wraps of the 4-slot rings), each checked.
    fn exchange(a: &RingEndpoint, b: &RingEndpoint, n: u8, tag: u8) {
        let mut buf = Vec::new();
        for i in 0..n {
            a.try_send(&[tag, i]).unwrap();
            assert!(b.try_recv(&mut buf).unwrap());
            assert_eq!(buf, [tag, i], "A -> B {i}");
            b.try_send(&[i, tag]).unwrap();
            assert!(a.try_recv(&mut buf).unwrap());
            assert_eq!(buf, [i, tag], "B -> A {i}");
        }
    }

    /// The pool of a Redox driver: each connection's memory is new, so bytes an earlier
    /// connection left (which an earlier client may still map and write) are not in it. On
    /// the shared form (`Segment::new`) the old slot bytes survive a renewal.
    #[test]
    fn a_private_segment_gets_new_memory_for_each_connection() {
        let g = small();
        let mut seg = Segment::new_private(g).unwrap();
        let a = renew(&mut seg).unwrap();
        a.try_send(&[0xAB; 32]).unwrap();
        let (base, len) = seg.region();
        // Safety: `base..base+len` is the live mapping the segment owns.
        let old = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
        // The whole 32-byte message, not one byte of it: the header holds the endpoints' pids,
        // and a pid with a 0xAB byte made the renewed region "contain" it (CI-like run at
        // 4d4a454, pids climbing under a test loop beside).
        let message = |m: &[u8]| m.windows(32).any(|w| w == [0xAB; 32]);
        assert!(message(old), "the message is in the region");
        drop(a);
        let _a = renew(&mut seg).unwrap();
        let (base, len) = seg.region();
        // Safety: as above, for the segment's new mapping.
        let new = unsafe { std::slice::from_raw_parts(base as *const u8, len) };
        assert!(
            !message(new),
            "the earlier connection's bytes are in the renewed region"
        );
    }

    #[test]
    fn a_renewed_segment_serves_the_next_connection_from_sequence_zero() {
        let (mut seg, fd) = segment();
        let a = renew(&mut seg).unwrap();
        let b = attach(&fd);
        exchange(&a, &b, 10, 1);
        let first = seg.generation();
        drop((a, b));
        let a = renew(&mut seg).unwrap();
        assert_ne!(seg.generation(), first);
        let b = attach(&fd);
        // Without the reset the shared indices stay at 10 while both new sides start at 0.
        exchange(&a, &b, 10, 2);
        let mut buf = Vec::new();
        assert!(!a.try_recv(&mut buf).unwrap());
        assert!(!b.try_recv(&mut buf).unwrap());
    }

    #[test]
    fn a_stale_attacher_sees_its_peer_gone_and_cannot_reach_the_next_connection() {
        let (mut seg, fd) = segment();
        let a1 = renew(&mut seg).unwrap();
        let stale = attach(&fd);
        exchange(&a1, &stale, 3, 1);
        // The driver ends the old connection; the old client still has the region mapped.
        drop(a1);
        let a2 = renew(&mut seg).unwrap();
        let mut buf = Vec::new();
        assert_eq!(stale.try_send(b"stale"), Err(RingError::PeerGone));
        assert_eq!(stale.try_recv(&mut buf), Err(RingError::PeerGone));
        assert!(
            !a2.try_recv(&mut buf).unwrap(),
            "nothing of the stale side's"
        );
        let b2 = attach(&fd);
        exchange(&a2, &b2, 6, 2);
        // The stale endpoint going away does not close the new connection.
        drop(stale);
        assert!(!a2.try_recv(&mut buf).unwrap());
        exchange(&a2, &b2, 2, 3);
    }

    #[test]
    fn a_segment_is_not_renewed_while_our_endpoint_on_it_lives() {
        let (mut seg, _fd) = segment();
        assert!(!seg.in_use());
        let a = renew(&mut seg).unwrap();
        assert!(seg.in_use());
        let generation = seg.generation();
        assert!(matches!(renew(&mut seg), Err(RingError::Setup(_))));
        assert_eq!(
            seg.generation(),
            generation,
            "a refused renewal changes nothing"
        );
        drop(a);
        assert!(!seg.in_use());
        renew(&mut seg).unwrap();
    }

    #[test]
    fn a_renewal_may_choose_a_smaller_geometry_and_the_attacher_takes_it_from_the_header() {
        let big = Geometry::new(128, 8).unwrap();
        let (mut seg, fd) = segment_for(big);
        let a = renew(&mut seg).unwrap();
        let b = attach(&fd);
        assert_eq!(b.geometry(), small());
        exchange(&a, &b, 9, 1);
        drop((a, b));
        let too_big = Geometry::new(256, 8).unwrap();
        assert!(matches!(
            seg.renew(too_big, Duration::ZERO, |m| mute(m, 0)),
            Err(RingError::RegionTooSmall { .. })
        ));
        let a = seg.renew(big, Duration::ZERO, |m| mute(m, 0)).unwrap();
        let b = attach(&fd);
        assert_eq!(b.geometry(), big);
        exchange(&a, &b, 20, 2);
    }

    /// A pool of `n` segments of the small geometry, and their descriptors.
    fn pool(n: usize) -> (RingPool, Vec<OwnedFd>) {
        let mut pool = RingPool::new(Box::new(mute));
        let mut fds = Vec::new();
        for k in 0..n {
            let (seg, fd) = segment();
            pool.add(format!("seg-{k}"), seg, None);
            fds.push(fd);
        }
        (pool, fds)
    }

    #[test]
    fn a_pool_lends_each_segment_once_until_it_is_released_and_no_longer_held() {
        let (mut pool, fds) = pool(2);
        let l0 = pool.lend(small(), Duration::ZERO).unwrap();
        let l1 = pool.lend(small(), Duration::ZERO).unwrap();
        assert_ne!(l0.index, l1.index);
        assert_eq!((l0.name.as_str(), l1.name.as_str()), ("seg-0", "seg-1"));
        assert_eq!(pool.lent(), 2);
        assert_eq!(
            pool.lend(small(), Duration::ZERO).err(),
            Some(RingError::NoFreeSegment { segments: 2 })
        );
        // Released, but our endpoint still lives: not lent again.
        pool.release(l0.index);
        assert!(matches!(
            pool.lend(small(), Duration::ZERO),
            Err(RingError::NoFreeSegment { .. })
        ));
        // Our endpoint gone but the connection not released: not lent again either.
        drop(l1.ring);
        assert!(matches!(
            pool.lend(small(), Duration::ZERO),
            Err(RingError::NoFreeSegment { .. })
        ));
        let idx0 = l0.index;
        drop(l0.ring);
        let again = pool.lend(small(), Duration::ZERO).unwrap();
        assert_eq!(again.index, idx0);
        let b = attach(&fds[idx0]);
        exchange(&again.ring, &b, 5, 7);
    }

    #[test]
    fn a_pool_refuses_a_ring_larger_than_its_segments() {
        let (mut pool, _fds) = pool(1);
        let big = Geometry::new(4104, 256).unwrap();
        match pool.lend(big, Duration::ZERO) {
            Err(RingError::RegionTooSmall { have, need }) => {
                assert_eq!((have, need), (small().region_len(), big.region_len()));
            }
            r => panic!("{:?}", r.map(|l| l.name)),
        }
        assert_eq!(pool.lent(), 0, "a refusal lends nothing");
        pool.lend(small(), Duration::ZERO).unwrap();
    }
}
