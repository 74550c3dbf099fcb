//! Redox backing of the clock page: a 4 KiB file of the `shm` scheme (`/scheme/shm/<name>`,
//! served by ipcd), mapped MAP_SHARED: read-write by the writer, read-only by readers.
//!
//! Facts (ipcd's `shm` scheme in `base` **[U]**; relibc's `shm_open` resolves to the same
//! paths): `O_CREAT` creates a segment, `ftruncate` sizes it, `mmap` of a handle maps the
//! segment's pages into the caller, so every mapping of one name shares memory. The scheme has
//! no access modes, no permissions and no locks: any process may map a segment writable, and a
//! second writer is not detected (no `InUse` here). Readers stay safe whatever another process
//! writes (all-atomic page, bounded seqlock retries), but on Redox the page's read-only-ness is
//! a convention, not enforced. Not run on Redox yet ([I]).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

use super::{ClockPageError, PAGE_SIZE, Page};

fn io_err(what: &str, path: &Path, e: &std::io::Error) -> ClockPageError {
    ClockPageError::Io(format!("{what} {}: {e}", path.display()))
}

/// A mapped page. The writer keeps its handle open, so the segment outlives any reader's.
pub(super) struct Mapping {
    ptr: NonNull<Page>,
    _file: Option<File>,
}

// Safety: the mapping is only accessed through `&Page`, all atomics, so sharing or sending it
// between threads is as safe as sharing `&[AtomicU64]`; the pointer stays valid until Drop.
unsafe impl Send for Mapping {}
// Safety: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(super) fn create(path: &Path) -> Result<Self, ClockPageError> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(path)
            .map_err(|e| io_err("create clock page", path, &e))?;
        file.set_len(PAGE_SIZE as u64)
            .map_err(|e| io_err("size clock page", path, &e))?;
        let ptr = map(&file, libc::PROT_READ | libc::PROT_WRITE, path)?;
        Ok(Mapping {
            ptr,
            _file: Some(file),
        })
    }

    pub(super) fn open(path: &Path) -> Result<Self, ClockPageError> {
        let file = File::open(path).map_err(|e| io_err("open clock page", path, &e))?;
        let len = file
            .metadata()
            .map_err(|e| io_err("stat clock page", path, &e))?
            .len();
        // The shm scheme refuses a mapping beyond the segment (ERANGE): check first for a
        // clear error.
        if len < PAGE_SIZE as u64 {
            return Err(ClockPageError::BadMagic);
        }
        let ptr = map(&file, libc::PROT_READ, path)?;
        Ok(Mapping { ptr, _file: None })
    }

    pub(super) fn page(&self) -> &Page {
        // Safety: `ptr` points to a live, page-aligned mapping of PAGE_SIZE >= size_of::<Page>()
        // bytes that stays mapped while `self` lives. `Page` is all atomics, for which any bit
        // pattern is valid and concurrent access from other processes is not a data race; a
        // read-only mapping is only ever loaded from (see the size assertion in mod.rs).
        unsafe { self.ptr.as_ref() }
    }
}

fn map(file: &File, prot: libc::c_int, path: &Path) -> Result<NonNull<Page>, ClockPageError> {
    // Safety: a fresh shared mapping of an open file at an address the kernel chooses, so no
    // existing memory is affected.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            PAGE_SIZE,
            prot,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    if p == libc::MAP_FAILED {
        return Err(io_err(
            "mmap clock page",
            path,
            &std::io::Error::last_os_error(),
        ));
    }
    NonNull::new(p.cast::<Page>()).ok_or_else(|| ClockPageError::Io("mmap returned null".into()))
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // Safety: `ptr` is the start of a PAGE_SIZE mapping made in `map` and not unmapped
        // elsewhere; no reference derived from it outlives `self`.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), PAGE_SIZE) };
    }
}
