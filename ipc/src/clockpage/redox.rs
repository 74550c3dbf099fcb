//! Redox backing of a file-backed clock page ([`super::ClockPageWriter::create`]), e.g. a
//! segment of the `shm` scheme. igcd and igbd do not use it any more (issue 23): the `shm`
//! scheme has no access modes, no permissions and no locks, so any process could map such a
//! page writable. They publish with [`super::ClockPageWriter::private`] instead, in their own
//! memory, and their channel scheme lends it read-only (`/scheme/ptpdrv.<name>/clock`); readers
//! open that path like any file. Readers stay safe whatever a writer does (all-atomic page,
//! bounded seqlock retries).

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
