//! Descriptors passed over a Unix socket with SCM_RIGHTS (Linux), written once for the ring
//! set-up and the device proxy.
//!
//! Every descriptor received is owned at once (closed on drop), whatever is wrong with the
//! message, so a hostile or confused peer cannot leak descriptors into our table; each is
//! close-on-exec from the moment it arrives (MSG_CMSG_CLOEXEC).

use std::io::{self, IoSlice, IoSliceMut};
use std::mem::MaybeUninit;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

use rustix::net::{
    RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags, ReturnFlags, SendAncillaryBuffer,
    SendAncillaryMessage, SendFlags,
};

/// Most descriptors one message may carry here (the ring set-up passes five).
pub const MAX_FDS: usize = 8;

/// Sends `data` with `fds` attached, once (MSG_NOSIGNAL; `dontwait` adds MSG_DONTWAIT): the
/// bytes sent, or the errno (EAGAIN, EPIPE, EINTR … are the caller's to handle).
pub fn send_with_fds(
    sock: impl AsFd,
    data: &[u8],
    fds: &[BorrowedFd<'_>],
    dontwait: bool,
) -> io::Result<usize> {
    if fds.len() > MAX_FDS {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "too many descriptors",
        ));
    }
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = SendAncillaryBuffer::new(&mut space);
    if !fds.is_empty() && !control.push(SendAncillaryMessage::ScmRights(fds)) {
        return Err(io::Error::other("control buffer too small"));
    }
    let mut flags = SendFlags::NOSIGNAL;
    if dontwait {
        flags |= SendFlags::DONTWAIT;
    }
    Ok(rustix::net::sendmsg(
        sock,
        &[IoSlice::new(data)],
        &mut control,
        flags,
    )?)
}

/// One message received by [`recv_with_fds`].
#[derive(Debug)]
pub struct Received {
    /// Bytes of data (0: the peer closed, on a stream or sequenced-packet socket).
    pub len: usize,
    /// The descriptors that came with it, owned.
    pub fds: Vec<OwnedFd>,
    /// The data or the descriptors did not all fit (MSG_TRUNC or MSG_CTRUNC): whatever did
    /// arrive is in `fds`, and closes with them.
    pub truncated: bool,
}

/// Receives one message into `buf` with up to [`MAX_FDS`] descriptors, once (`dontwait` adds
/// MSG_DONTWAIT); errno as the caller's to handle.
pub fn recv_with_fds(sock: impl AsFd, buf: &mut [u8], dontwait: bool) -> io::Result<Received> {
    let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(MAX_FDS))];
    let mut control = RecvAncillaryBuffer::new(&mut space);
    let mut flags = RecvFlags::CMSG_CLOEXEC;
    if dontwait {
        flags |= RecvFlags::DONTWAIT;
    }
    let m = rustix::net::recvmsg(sock, &mut [IoSliceMut::new(buf)], &mut control, flags)?;
    let mut fds = Vec::new();
    for msg in control.drain() {
        if let RecvAncillaryMessage::ScmRights(it) = msg {
            fds.extend(it);
        }
    }
    Ok(Received {
        len: m.bytes,
        fds,
        truncated: m.flags.intersects(ReturnFlags::TRUNC | ReturnFlags::CTRUNC),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::os::unix::net::UnixDatagram;

    #[test]
    fn descriptors_arrive_owned_and_close_on_exec() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let (x, _y) = UnixDatagram::pair().unwrap();
        assert_eq!(
            send_with_fds(&a, b"hi", &[x.as_fd(), x.as_fd()], false).unwrap(),
            2
        );
        let mut buf = [0u8; 8];
        let r = recv_with_fds(&b, &mut buf, true).unwrap();
        assert_eq!(
            (r.len, &buf[..2], r.fds.len(), r.truncated),
            (2, &b"hi"[..], 2, false)
        );
        for fd in &r.fds {
            assert_ne!(fd.as_raw_fd(), x.as_raw_fd(), "a new descriptor, not ours");
            // Safety: F_GETFD on a descriptor we own.
            let fl = unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_GETFD) };
            assert_eq!(fl & libc::FD_CLOEXEC, libc::FD_CLOEXEC);
        }
    }

    #[test]
    fn too_many_descriptors_are_refused_and_a_short_buffer_is_truncation() {
        let (a, b) = UnixDatagram::pair().unwrap();
        let many = vec![a.as_fd(); MAX_FDS + 1];
        let e = send_with_fds(&a, b"x", &many, false).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        send_with_fds(&a, b"long", &[a.as_fd()], false).unwrap();
        let mut buf = [0u8; 2];
        let r = recv_with_fds(&b, &mut buf, true).unwrap();
        assert!(r.truncated);
        assert_eq!(r.fds.len(), 1);
        let e = recv_with_fds(&b, &mut buf, true).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::WouldBlock);
    }
}
