//! Bookkeeping every scheme server here shares (igcd's driver channel and network schemes,
//! ptpd's `/scheme/ptp`): the table of open handles with the scheme root in it, and `fpath`'s
//! copy-out.

use std::collections::BTreeMap;

use syscall::error::{EBADF, Error, Result};

/// A scheme's per-handle state. One value is the scheme root: what `scheme_root` hands out and
/// the only handle `openat` accepts as its directory.
pub trait SchemeHandle {
    const ROOT: Self;
    fn is_root(&self) -> bool;
}

/// The open handles of one scheme, by id; ids are handed out in order and never reused.
pub struct Handles<H> {
    map: BTreeMap<usize, H>,
    next_id: usize,
}

impl<H> Default for Handles<H> {
    fn default() -> Self {
        Self {
            map: BTreeMap::new(),
            next_id: 0,
        }
    }
}

impl<H> Handles<H> {
    /// Adds `h` under a fresh id.
    pub fn insert(&mut self, h: H) -> usize {
        let id = self.next_id;
        self.next_id += 1;
        self.map.insert(id, h);
        id
    }

    pub fn get(&self, id: usize) -> Option<&H> {
        self.map.get(&id)
    }

    pub fn remove(&mut self, id: usize) -> Option<H> {
        self.map.remove(&id)
    }

    pub fn iter(&self) -> impl Iterator<Item = (usize, &H)> {
        self.map.iter().map(|(id, h)| (*id, h))
    }
}

impl<H: SchemeHandle> Handles<H> {
    /// `scheme_root`: a new root handle.
    pub fn open_root(&mut self) -> usize {
        self.insert(H::ROOT)
    }

    /// `openat`'s check of its directory handle: EBADF unless `fd` is a root handle.
    pub fn check_root(&self, fd: usize) -> Result<()> {
        match self.get(fd) {
            Some(h) if h.is_root() => Ok(()),
            _ => Err(Error::new(EBADF)),
        }
    }
}

/// `fpath`: copies as much of `path` as fits into `buf`; returns the bytes copied.
pub fn copy_path(path: &str, buf: &mut [u8]) -> usize {
    let n = path.len().min(buf.len());
    buf[..n].copy_from_slice(&path.as_bytes()[..n]);
    n
}
