//! Linux host backing of the clock page: a 4 KiB file (mapped by `mapped.rs`) whose writer
//! holds an exclusive flock on a lock file beside it (`<page>.lock`, mode 0600), so a second
//! live writer gets `InUse`. Not on the page itself: flock needs only a descriptor, and the
//! page is readable by everyone, so any reader could hold the lock and keep igcd from starting
//! (issue 23: uid 65534 did, with `flock -x PAGE`).

use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::Path;

use super::ClockPageError;
use super::mapped::io_err;

/// Opens (creating it if needed) a file this uid alone owns at `path`, read-write with
/// O_NOFOLLOW, mode `mode`: an existing one must be a regular file of this uid with one link
/// (not another user's file it could rewrite or chmod, nor a hard link sizing would truncate).
fn open_own(path: &Path, mode: u32, what: &str) -> Result<File, ClockPageError> {
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .mode(mode)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(|e| io_err(&format!("create {what}"), path, &e))?;
    let m = file
        .metadata()
        .map_err(|e| io_err(&format!("stat {what}"), path, &e))?;
    // Safety: geteuid has no preconditions and touches no memory.
    let euid = unsafe { libc::geteuid() };
    if !m.file_type().is_file() || m.uid() != euid || m.nlink() != 1 {
        return Err(ClockPageError::Io(format!(
            "{what} {}: exists as something this process did not create (owner uid {}, \
             {} links); remove it or choose another path",
            path.display(),
            m.uid(),
            m.nlink()
        )));
    }
    // Whatever the umask (readers are unprivileged clients; the lock is the writer's alone).
    file.set_permissions(std::fs::Permissions::from_mode(mode))
        .map_err(|e| io_err(&format!("chmod {what}"), path, &e))?;
    Ok(file)
}

/// The lock file of the page at `path`: `<path>.lock`.
pub(super) fn lock_path(path: &Path) -> std::path::PathBuf {
    let mut p = path.as_os_str().to_owned();
    p.push(".lock");
    p.into()
}

/// Opens (creating it if needed) the writer's file, readable by everyone and writable by its
/// owner only (mode 0644): clients map it PROT_READ, and one that opens it for writing gets
/// EACCES. Also returns the held lock (`<path>.lock`, 0600): a second writer gets `InUse`.
pub(super) fn create_locked(path: &Path) -> Result<(File, Option<File>), ClockPageError> {
    let lp = lock_path(path);
    let lock = open_own(&lp, 0o600, "clock page lock")?;
    // Safety: flock on a descriptor we own; no memory is passed.
    if unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
        let e = std::io::Error::last_os_error();
        return Err(if e.kind() == std::io::ErrorKind::WouldBlock {
            ClockPageError::InUse(path.display().to_string())
        } else {
            io_err("lock clock page", &lp, &e)
        });
    }
    let file = open_own(path, 0o644, "clock page")?;
    Ok((file, Some(lock)))
}
