//! Linux host backing of the clock page: a 4 KiB file (mapped by `mapped.rs`) whose writer
//! holds an exclusive flock, so a second live writer gets `InUse`.

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::ClockPageError;
use super::mapped::io_err;

/// Opens (creating it if needed) the writer's file, locked, readable by everyone and writable
/// by its owner only (mode 0644): clients map it PROT_READ, and one that opens it for writing
/// gets EACCES.
pub(super) fn create_locked(path: &Path) -> Result<File, ClockPageError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(0o644)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io_err("create clock page", path, &e))?;
    // An existing file must be a page this uid made: not another user's file it could rewrite
    // or chmod back, not a hard link to someone else's file that sizing would truncate.
    let m = file
        .metadata()
        .map_err(|e| io_err("stat clock page", path, &e))?;
    // Safety: geteuid has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if !m.file_type().is_file() || m.uid() != euid || m.nlink() != 1 {
        return Err(ClockPageError::Io(format!(
            "clock page {}: exists as something this process did not create (owner uid {}, \
             {} links); remove it or choose another path",
            path.display(),
            m.uid(),
            m.nlink()
        )));
    }
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
    Ok(file)
}
