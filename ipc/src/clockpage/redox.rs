//! Redox backing of the clock page: a 4 KiB file of the `shm` scheme (`/scheme/shm/<name>`,
//! served by ipcd), mapped MAP_SHARED by `mapped.rs`: read-write by the writer, read-only by
//! readers.
//!
//! Facts (ipcd's `shm` scheme in `base` **[U]**; relibc's `shm_open` resolves to the same
//! paths): `O_CREAT` creates a segment, `ftruncate` sizes it, `mmap` of a handle maps the
//! segment's pages into the caller, so every mapping of one name shares memory. The scheme has
//! no access modes, no permissions and no locks: any process may map a segment writable, and a
//! second writer is not detected (no `InUse` here). Readers stay safe whatever another process
//! writes (all-atomic page, bounded seqlock retries), but on Redox the page's read-only-ness is
//! a convention, not enforced. Not run on Redox yet ([I]).

use std::fs::{File, OpenOptions};
use std::path::Path;

use super::ClockPageError;
use super::mapped::io_err;

/// Opens (creating it if needed) the writer's segment. Nothing to lock: see above.
pub(super) fn create_locked(path: &Path) -> Result<(File, Option<File>), ClockPageError> {
    OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map(|f| (f, None))
        .map_err(|e| io_err("create clock page", path, &e))
}
