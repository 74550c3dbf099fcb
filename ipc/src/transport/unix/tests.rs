use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use super::*;
use crate::testutil::TempDir;

const LONG: Duration = Duration::from_secs(5);

fn is_cloexec(fd: RawFd) -> bool {
    // Safety: F_GETFD on an open descriptor reads its flags; no memory is passed.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFD) };
    flags >= 0 && flags & libc::FD_CLOEXEC != 0
}

#[test]
fn peer_credentials_are_ours() {
    let dir = TempDir::new("cred");
    let l = SeqpacketListener::bind(dir.path().join("s")).unwrap();
    let c = SeqpacketConn::connect(l.path()).unwrap();
    let (s, cred) = l.accept(Some(LONG)).unwrap();
    // Safety: getuid/getgid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::getuid(), libc::getgid()) };
    let me = PeerCred {
        pid: std::process::id() as i32,
        uid,
        gid,
    };
    assert_eq!(cred, me);
    assert_eq!(s.peer_cred().unwrap(), me);
    assert_eq!(c.peer_cred().unwrap(), me);
    for fd in [l.as_raw_fd(), c.as_raw_fd(), s.as_raw_fd()] {
        assert!(is_cloexec(fd));
    }
}

#[test]
fn socket_file_mode_and_removal() {
    let dir = TempDir::new("mode");
    let path = dir.path().join("s");
    let l = SeqpacketListener::bind(&path).unwrap();
    let m = std::fs::metadata(&path).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!(m.permissions().mode() & 0o777, 0o666);
    drop(l);
    assert!(!path.exists(), "listener removes its socket file");
}

#[test]
fn restricted_socket_file_gets_exactly_its_mode_and_group() {
    let dir = TempDir::new("mode0600");
    let path = dir.path().join("s");
    let l = SeqpacketListener::bind_with(&path, SocketAccess::OWNER_ONLY).unwrap();
    let m = std::fs::symlink_metadata(&path).unwrap();
    assert!(m.file_type().is_socket());
    assert_eq!(m.permissions().mode() & 0o7777, 0o600);
    // Safety: geteuid/getegid cannot fail and touch no memory.
    let (uid, gid) = unsafe { (libc::geteuid(), libc::getegid()) };
    assert_eq!((m.uid(), m.gid()), (uid, gid));
    // The private directory the socket was bound in is gone; only the socket remains.
    let names: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, [std::ffi::OsString::from("s")]);
    // Still the listening socket: a client gets through and is accepted.
    let _c = SeqpacketConn::connect(&path).unwrap();
    l.accept(Some(LONG)).unwrap();
    drop(l);
    assert!(!path.exists());

    let access = SocketAccess {
        mode: 0o660,
        owner: None,
        group: Some(gid),
    };
    let _l = SeqpacketListener::bind_with(&path, access).unwrap();
    let m = std::fs::symlink_metadata(&path).unwrap();
    assert_eq!((m.permissions().mode() & 0o7777, m.gid()), (0o660, gid));
}

#[test]
fn peer_groups_are_ours() {
    let dir = TempDir::new("groups");
    let l = SeqpacketListener::bind(dir.path().join("s")).unwrap();
    let _c = SeqpacketConn::connect(l.path()).unwrap();
    let (s, _) = l.accept(Some(LONG)).unwrap();
    let mut want = vec![0 as libc::gid_t; 256];
    // Safety: `want` is writable for the 256 entries passed as its size.
    let n = unsafe { libc::getgroups(256, want.as_mut_ptr()) };
    assert!(n >= 0);
    want.truncate(n as usize);
    let mut got = s.peer_groups().unwrap();
    got.sort_unstable();
    want.sort_unstable();
    assert_eq!(got, want);
}

#[test]
fn connect_to_missing_path_is_not_found() {
    let dir = TempDir::new("missing");
    let path = dir.path().join("nobody");
    match SeqpacketConn::connect(&path) {
        Err(TransportError::NotFound(msg)) => {
            assert!(msg.contains("nobody"), "{msg}");
            assert!(msg.contains("No such file"), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    let long = dir.path().join("x".repeat(200));
    assert!(matches!(
        SeqpacketConn::connect(long),
        Err(TransportError::Io(_))
    ));
}

#[test]
fn stale_socket_file_is_refused_then_replaced() {
    let dir = TempDir::new("stale");
    let path = dir.path().join("s");
    // A listener that died without removing its file (std's UnixListener does not remove it).
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    assert!(path.exists());
    assert!(matches!(
        SeqpacketConn::connect(&path),
        Err(TransportError::NotFound(_))
    ));
    let l = SeqpacketListener::bind(&path).unwrap();
    let _c = SeqpacketConn::connect(&path).unwrap();
    l.accept(Some(LONG)).unwrap();
}

#[test]
fn bind_does_not_steal_or_destroy() {
    let dir = TempDir::new("steal");
    let path = dir.path().join("s");
    let _l = SeqpacketListener::bind(&path).unwrap();
    assert!(matches!(
        SeqpacketListener::bind(&path),
        Err(TransportError::Io(_))
    ));
    let file = dir.path().join("f");
    std::fs::write(&file, b"keep").unwrap();
    assert!(matches!(
        SeqpacketListener::bind(&file),
        Err(TransportError::Io(_))
    ));
    assert_eq!(std::fs::read(&file).unwrap(), b"keep");
}

#[test]
fn accept_timeout() {
    let dir = TempDir::new("acc");
    let l = SeqpacketListener::bind(dir.path().join("s")).unwrap();
    let t = Instant::now();
    assert_eq!(
        l.accept(Some(Duration::from_millis(50))).err(),
        Some(TransportError::Timeout)
    );
    assert!(t.elapsed() >= Duration::from_millis(50));
}

/// A record larger than MAX_MESSAGE is reported (MSG_TRUNC), not cut; the next one arrives.
#[test]
fn oversized_record_is_detected() {
    let (a, b) = SeqpacketConn::pair().unwrap();
    let big = vec![1u8; MAX_MESSAGE + 904];
    // Safety: `big` is a valid readable buffer of `big.len()` bytes for the call.
    let rc = unsafe {
        libc::send(
            a.as_raw_fd(),
            big.as_ptr().cast(),
            big.len(),
            libc::MSG_NOSIGNAL,
        )
    };
    assert_eq!(rc as usize, big.len());
    a.send(b"next", None).unwrap();
    let mut buf = Vec::new();
    assert_eq!(
        b.recv(&mut buf, Some(LONG)),
        Err(TransportError::TooLarge(big.len()))
    );
    b.recv(&mut buf, Some(LONG)).unwrap();
    assert_eq!(buf, b"next");
}

/// A datagram socket bound in place: at its mode from the start, its address the path itself
/// (peers like pmc answer to it), the process umask untouched.
#[test]
fn bound_in_place_has_its_mode_its_own_name_and_leaves_the_umask() {
    use std::os::unix::net::UnixDatagram;

    use crate::transport::sockfile::SocketFile;
    let dir = TempDir::new("inplace");
    // Safety: umask(2) takes no pointers; read it by setting it and putting it back.
    let before = unsafe { libc::umask(0o022) };
    // Safety: as above.
    unsafe { libc::umask(before) };
    for (name, access) in [
        ("pub", SocketAccess::PUBLIC),
        ("own", SocketAccess::OWNER_ONLY),
    ] {
        let path = dir.path().join(name);
        let (file, sock) =
            SocketFile::bind_in_place(&path, access, |p| UnixDatagram::bind(p)).unwrap();
        let m = std::fs::symlink_metadata(&path).unwrap();
        assert_eq!(m.mode() & 0o777, access.mode, "{name}");
        let addr = sock.local_addr().unwrap();
        assert_eq!(addr.as_pathname(), Some(path.as_path()));
        assert!(SocketFile::bind_in_place(&path, access, |p| UnixDatagram::bind(p)).is_err());
        drop(file);
        assert!(!path.exists(), "removed on drop");
    }
    // Safety: as above.
    let after = unsafe { libc::umask(before) };
    assert_eq!(after, before, "the process umask is unchanged");
}
