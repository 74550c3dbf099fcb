//! Linux host backing of the clock page: a 4 KiB file mapped MAP_SHARED (read-write by the
//! writer, read-only by readers).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;
use std::ptr::NonNull;

use super::{ClockPageError, PAGE_SIZE, Page};

fn io_err(what: &str, path: &Path, e: &std::io::Error) -> ClockPageError {
    ClockPageError::Io(format!("{what} {}: {e}", path.display()))
}

/// A mapped page. The writer's also keeps the file open: its flock marks the live writer.
pub(super) struct Mapping {
    ptr: NonNull<Page>,
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
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(path)
            .map_err(|e| io_err("create clock page", path, &e))?;
        // Safety: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            let e = std::io::Error::last_os_error();
            return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
                ClockPageError::InUse(path.display().to_string())
            } else {
                io_err("lock clock page", path, &e)
            });
        }
        // Readable by everyone whatever the umask: readers are unprivileged clients.
        file.set_permissions(std::fs::Permissions::from_mode(0o644))
            .map_err(|e| io_err("chmod clock page", path, &e))?;
        file.set_len(PAGE_SIZE as u64)
            .map_err(|e| io_err("size clock page", path, &e))?;
        let ptr = map(&file, libc::PROT_READ | libc::PROT_WRITE, path)?;
        Ok(Mapping {
            ptr,
            _lock: Some(file),
        })
    }

    pub(super) fn open(path: &Path) -> Result<Self, ClockPageError> {
        let file = File::open(path).map_err(|e| io_err("open clock page", path, &e))?;
        let len = file
            .metadata()
            .map_err(|e| io_err("stat clock page", path, &e))?
            .len();
        // Touching a mapped page beyond the end of its file raises SIGBUS: refuse short files.
        if len < PAGE_SIZE as u64 {
            return Err(ClockPageError::BadMagic);
        }
        let ptr = map(&file, libc::PROT_READ, path)?;
        // The mapping outlives the descriptor.
        Ok(Mapping { ptr, _lock: None })
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
