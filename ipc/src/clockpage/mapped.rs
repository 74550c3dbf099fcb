//! The clock page as a 4 KiB file mapped MAP_SHARED (read-write by the writer, read-only by
//! readers), on the OSes that have one: the mapping, its checks and its lifetime are here; how
//! the writer's file is created and locked is the platform's (`linux.rs`, `redox.rs`).

use std::fs::File;
use std::os::fd::AsRawFd;
use std::path::Path;
use std::ptr::NonNull;

use super::{ClockPageError, PAGE_SIZE, Page, platform};

pub(super) fn io_err(what: &str, path: &Path, e: &std::io::Error) -> ClockPageError {
    ClockPageError::Io(format!("{what} {}: {e}", path.display()))
}

/// A mapped page. The writer's also keeps its file open: on Linux its flock marks the live
/// writer; on Redox the open handle keeps the segment alive beyond any reader's.
pub(super) struct Mapping {
    ptr: NonNull<Page>,
    _file: Option<File>,
    /// The writer's held lock (Linux: `<page>.lock`), released when the writer goes.
    _lock: Option<File>,
}

// Safety: the mapping is only accessed through `&Page`, whose fields are all atomics, so sharing
// or sending it between threads is as safe as sharing `&[AtomicU64]`; the pointer stays valid
// until Drop unmaps it.
unsafe impl Send for Mapping {}
// Safety: as above.
unsafe impl Sync for Mapping {}

impl Mapping {
    pub(super) fn create(path: &Path) -> Result<Self, ClockPageError> {
        let (file, lock) = platform::create_locked(path)?;
        file.set_len(PAGE_SIZE as u64)
            .map_err(|e| io_err("size clock page", path, &e))?;
        let ptr = map(&file, libc::PROT_READ | libc::PROT_WRITE, path)?;
        Ok(Mapping {
            ptr,
            _file: Some(file),
            _lock: lock,
        })
    }

    /// A page of this process's own zeroed memory, present (a scheme lending it with
    /// `mmap_prep` must not hand out a page not yet backed).
    pub(super) fn private() -> Result<Self, ClockPageError> {
        // Safety: a fresh private anonymous mapping at an address the kernel picks, so no
        // existing memory is affected.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                PAGE_SIZE,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            let e = std::io::Error::last_os_error();
            return Err(ClockPageError::Io(format!("mmap clock page memory: {e}")));
        }
        let ptr = NonNull::new(p.cast::<Page>())
            .ok_or_else(|| ClockPageError::Io("mmap returned null".into()))?;
        // Safety: the first byte of the page just mapped, which nothing else uses yet.
        unsafe { ptr.as_ptr().cast::<u8>().write_volatile(0) };
        Ok(Mapping {
            ptr,
            _file: None,
            _lock: None,
        })
    }

    pub(super) fn open(path: &Path) -> Result<Self, ClockPageError> {
        let file = File::open(path).map_err(|e| io_err("open clock page", path, &e))?;
        let len = file
            .metadata()
            .map_err(|e| io_err("stat clock page", path, &e))?
            .len();
        // Refuse short files: on Linux touching a mapped page beyond the end of its file raises
        // SIGBUS; a Redox driver's scheme refuses a mapping beyond the page, and checking
        // first gives a clear error.
        if len < PAGE_SIZE as u64 {
            return Err(ClockPageError::BadMagic);
        }
        let ptr = map(&file, libc::PROT_READ, path)?;
        // The mapping outlives the descriptor.
        Ok(Mapping {
            ptr,
            _file: None,
            _lock: None,
        })
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
    // Safety: a fresh shared mapping of an open file; the kernel picks the address, so no
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
