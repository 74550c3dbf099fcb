//! Socket files at their final mode from the first instant, and the kernel's word on who is at
//! the other end: shared by every listening socket the system creates on a Linux host (igcd's
//! driver channel, ptpd's management socket, the device host, the lab's wire).
//!
//! bind(2) creates the file with the process umask applied, which may be wider than intended,
//! and a peer can connect in the window before a chmod. [`SocketFile::bind_private`] binds inside
//! a fresh 0700 directory beside the final path (only our uid and root can reach it there), sets
//! owner, group and mode, and only then links it into place (link(2) never replaces a file that
//! appeared meanwhile).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use super::TransportError;
use super::unix::{PeerCred, SocketAccess};

fn os_err(what: &str, path: &Path, e: &io::Error) -> TransportError {
    TransportError::Io(format!("{what} {}: {e}", path.display()))
}

/// A fresh mode-0700 directory beside a socket path, removed (with its one entry) on drop.
struct PrivateDir(PathBuf);

impl PrivateDir {
    fn create(beside: &Path) -> Result<Self, TransportError> {
        let parent = match beside.parent() {
            Some(p) if !p.as_os_str().is_empty() => p,
            _ => Path::new("."),
        };
        let mut last = None;
        for _ in 0..4 {
            // Short, so the socket path inside stays within sun_path.
            let tag = crate::time::mono_ns() as u32 ^ std::process::id().rotate_left(16);
            let dir = parent.join(format!(".s{tag:08x}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => return Ok(Self(dir)),
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => last = Some(e),
                Err(e) => return Err(os_err("mkdir", &dir, &e)),
            }
        }
        let e = last.unwrap_or_else(|| io::Error::from(io::ErrorKind::AlreadyExists));
        Err(os_err("mkdir beside", beside, &e))
    }
}

impl Drop for PrivateDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(self.0.join("s"));
        let _ = std::fs::remove_dir(&self.0);
    }
}

/// A socket file this process created; removed on drop if the path still names it (so a
/// successor's file at the same path is never removed).
#[derive(Debug)]
pub struct SocketFile {
    path: PathBuf,
    /// (device, inode) of the file we linked.
    id: (u64, u64),
}

impl SocketFile {
    /// Binds a socket at `path` through a private directory: `bind` is called with a temporary
    /// path (bind your socket there); the file is then given `access`'s owner, group and mode
    /// and linked at `path`. Fails (nothing left behind) if `path` exists: remove a stale file
    /// first, after checking nothing listens there.
    pub fn bind_private(
        path: &Path,
        access: SocketAccess,
        bind: impl FnOnce(&Path) -> io::Result<()>,
    ) -> Result<Self, TransportError> {
        let private = PrivateDir::create(path)?;
        let tmp = private.0.join("s");
        bind(&tmp).map_err(|e| os_err("bind", &tmp, &e))?;
        if access.owner.is_some() || access.group.is_some() {
            std::os::unix::fs::lchown(&tmp, access.owner, access.group)
                .map_err(|e| os_err("chown", &tmp, &e))?;
        }
        std::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(access.mode & 0o777))
            .map_err(|e| os_err("chmod", &tmp, &e))?;
        std::fs::hard_link(&tmp, path).map_err(|e| os_err("link socket to", path, &e))?;
        drop(private);
        let m = std::fs::symlink_metadata(path).map_err(|e| os_err("stat", path, &e))?;
        Ok(Self {
            path: path.to_owned(),
            id: (m.dev(), m.ino()),
        })
    }

    /// Binds a socket at `path` itself, its file created at `access`'s mode: for a datagram
    /// server whose peers answer to the address its replies come from (pmc does: a socket
    /// bound by [`Self::bind_private`] keeps its temporary name as its address, which is gone).
    ///
    /// bind(2) applies the umask, so `bind` runs on a thread of its own whose umask (unshared
    /// from the process's with CLONE_FS; other threads keep theirs) lets exactly the mode
    /// through. Owner and group are set just after, as is the mode again (a default ACL on
    /// the directory overrides the umask). Fails if `path` exists (see [`remove_stale`]).
    pub fn bind_in_place<T: Send>(
        path: &Path,
        access: SocketAccess,
        bind: impl FnOnce(&Path) -> io::Result<T> + Send,
    ) -> Result<(Self, T), TransportError> {
        let mode = access.mode & 0o777;
        let bound = std::thread::scope(|s| {
            s.spawn(|| {
                // Safety: unshare(2) and umask(2) take no pointers; CLONE_FS gives this thread
                // its own umask, so the process's other threads are unaffected.
                if unsafe { libc::unshare(libc::CLONE_FS) } != 0 {
                    return Err(io::Error::last_os_error());
                }
                // Safety: as above.
                unsafe { libc::umask(0o777 & !mode) };
                bind(path)
            })
            .join()
            .unwrap_or_else(|_| Err(io::Error::other("bind thread panicked")))
        })
        .map_err(|e| os_err("bind", path, &e))?;
        let m = std::fs::symlink_metadata(path).map_err(|e| os_err("stat", path, &e))?;
        // From here on the file is ours: removed on drop (and on the errors below).
        let file = Self {
            path: path.to_owned(),
            id: (m.dev(), m.ino()),
        };
        if access.owner.is_some() || access.group.is_some() {
            std::os::unix::fs::lchown(path, access.owner, access.group)
                .map_err(|e| os_err("chown", path, &e))?;
        }
        if m.mode() & 0o777 != mode {
            std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode))
                .map_err(|e| os_err("chmod", path, &e))?;
        }
        Ok((file, bound))
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for SocketFile {
    fn drop(&mut self) {
        if let Ok(m) = std::fs::symlink_metadata(&self.path) {
            if (m.dev(), m.ino()) == self.id {
                let _ = std::fs::remove_file(&self.path);
            }
        }
    }
}

/// Removes a socket file at `path` left by a process that died: only if it is a socket and
/// `listening(path)` says nothing answers there. A live listener, or a path that is not a
/// socket, is an `Io` error (never stolen or destroyed); a missing path is fine.
pub fn remove_stale(
    path: &Path,
    listening: impl FnOnce(&Path) -> bool,
) -> Result<(), TransportError> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.file_type().is_socket() => {
            if listening(path) {
                return Err(TransportError::Io(format!(
                    "bind {}: another process is listening there",
                    path.display()
                )));
            }
            match std::fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => {
                    Err(os_err("remove stale socket", path, &e))
                }
                _ => Ok(()),
            }
        }
        Ok(_) => Err(TransportError::Io(format!(
            "bind {}: exists and is not a socket",
            path.display()
        ))),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(os_err("stat", path, &e)),
    }
}

/// The credentials the kernel recorded for the peer of a connected Unix socket (SO_PEERCRED):
/// for an accepted connection the client at connect(2) time.
pub fn peer_cred(fd: BorrowedFd<'_>) -> Result<PeerCred, TransportError> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = std::mem::size_of::<libc::ucred>() as libc::socklen_t;
    // Safety: `cred` and `len` are valid and writable; `len` holds the size of `cred`.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&raw mut cred).cast(),
            &mut len,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(TransportError::Io(format!("getsockopt(SO_PEERCRED): {e}")));
    }
    Ok(PeerCred {
        pid: cred.pid,
        uid: cred.uid,
        gid: cred.gid,
    })
}

/// SO_PEERGROUPS (Linux ≥ 4.13; the value of every architecture but mips and sparc, which
/// this project does not build for).
const SO_PEERGROUPS: libc::c_int = 59;
/// Upper bound of supplementary groups read (Linux's NGROUPS_MAX is 65536; a peer with more
/// than this is judged by the first ones).
const MAX_PEER_GROUPS: usize = 256;

/// The supplementary groups of the peer of a connected Unix socket, as the kernel recorded them
/// at connect(2) (SO_PEERGROUPS); none if it has more than [`MAX_PEER_GROUPS`] (then only its
/// primary gid, in [`PeerCred`], can count).
pub fn peer_groups(fd: BorrowedFd<'_>) -> Result<Vec<u32>, TransportError> {
    let mut groups = vec![0u32; MAX_PEER_GROUPS];
    let mut len = std::mem::size_of_val(groups.as_slice()) as libc::socklen_t;
    // Safety: `groups` is writable for `len` bytes, and `len` is valid and writable.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_SOCKET,
            SO_PEERGROUPS,
            groups.as_mut_ptr().cast(),
            &mut len,
        )
    };
    if rc < 0 {
        let e = io::Error::last_os_error();
        // ERANGE: more groups than the buffer holds, and nothing was filled in.
        if e.raw_os_error() == Some(libc::ERANGE) {
            return Ok(Vec::new());
        }
        return Err(TransportError::Io(format!(
            "getsockopt(SO_PEERGROUPS): {e}"
        )));
    }
    groups.truncate(len as usize / std::mem::size_of::<u32>());
    Ok(groups)
}
