//! Bookkeeping every scheme server here shares (igcd's driver channel and network schemes,
//! ptpd's `/scheme/ptp`): the table of open handles with the scheme root in it, `fpath`'s
//! copy-out, and taking back the name a dead server left registered ([`claim_scheme_name`]).

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

/// A scheme socket, made as redox-scheme 0.12's `Socket::create`/`nonblock` make it (a `dup`
/// of the namespace's scheme-creation capability, then close-on-exec and the socket flags), but
/// with relibc's POSIX `fcntl` instead of libredox's `redox_fcntl_v0`. That symbol entered
/// relibc only on 2026-07-01, and every libredox redox-scheme 0.12 accepts (0.1.18–0.1.25)
/// imports it from `call::fcntl`; `Socket::create` is the only caller in these daemons, so
/// making the socket here lets them link against an older relibc (README, minimum Redox).
pub fn scheme_socket(nonblock: bool) -> std::io::Result<redox_scheme::Socket> {
    use libredox::flag::{O_CLOEXEC, O_FSYNC, O_NONBLOCK};
    /// O_EXLOCK (redox_syscall's flag; relibc's libc has no name for it).
    const O_EXLOCK: i32 = 0x0020_0000;
    const CAP: &str = "/scheme/namespace/scheme-creation-cap";
    let cap = libredox::Fd::open(CAP, O_CLOEXEC, 0)?;
    let fd = cap.dup(b"create-scheme")?;
    let owned = libredox_0_1::Fd::new(fd);
    let c_fd = libc::c_int::try_from(fd)
        .map_err(|_| std::io::Error::other(format!("descriptor {fd} out of range")))?;
    let flags = O_FSYNC | O_EXLOCK | if nonblock { O_NONBLOCK } else { 0 };
    // Safety: fcntl on the descriptor just created; no memory is passed.
    let ok = unsafe {
        libc::fcntl(c_fd, libc::F_SETFD, libc::FD_CLOEXEC) >= 0
            && libc::fcntl(c_fd, libc::F_SETFL, flags) >= 0
    };
    if !ok {
        return Err(std::io::Error::last_os_error());
    }
    // Safety: `owned` is a scheme socket made exactly as `Socket::create_inner` makes one, and
    // nothing else owns the descriptor.
    Ok(unsafe { redox_scheme::Socket::from_fd(owned) })
}

/// Why a scheme name could not be claimed.
#[derive(Debug, thiserror::Error)]
pub enum ClaimError {
    /// A live server answers on the name: a second instance must not start.
    #[error("{path} is served by a running process (it answered: {answer})")]
    Running { path: String, answer: String },
    #[error("{op}: {err}")]
    Io { op: String, err: std::io::Error },
}

/// Makes sure scheme `name` can be registered (issue 22, failure 5). A name stays in the
/// namespace manager's table after its server died: listed in `/scheme`, an open of it fails
/// with ENODEV, and registering it again with EEXIST, until someone unlinks `/scheme/<name>`
/// (base 9dd6901d's namespace manager grants that to any process of the namespace). So: a name
/// not listed is free; a listed one whose open is answered (whatever the answer) has a running
/// server, [`ClaimError::Running`]; a listed one that gives ENODEV is a dead server's, and is
/// unlinked (`Ok(true)`: taken back). igcd claims before bring-up touches the NIC, ptpd before
/// it starts its engine.
pub fn claim_scheme_name(name: &str) -> std::result::Result<bool, ClaimError> {
    let io = |op: String| move |err| ClaimError::Io { op, err };
    let listed = std::fs::read_dir("/scheme")
        .map_err(io("list /scheme".into()))?
        .filter_map(std::result::Result::ok)
        .any(|d| d.file_name() == name);
    if !listed {
        return Ok(false);
    }
    let path = format!("/scheme/{name}");
    let answer = match std::fs::File::open(&path) {
        Ok(_) => "opened".to_string(),
        Err(e) if e.raw_os_error() != Some(syscall::error::ENODEV) => e.to_string(),
        Err(_) => {
            std::fs::remove_file(&path).map_err(io(format!("unlink a dead server's {path}")))?;
            return Ok(true);
        }
    };
    Err(ClaimError::Running { path, answer })
}
