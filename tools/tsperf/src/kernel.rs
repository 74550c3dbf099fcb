//! The baseline a Linux user has today: software TX timestamps (SO_TIMESTAMPING with
//! TX_SOFTWARE | OPT_ID | OPT_TSONLY) on a UDP socket over loopback, read from the error queue
//! by a dedicated thread — in a private network namespace this tool creates (and which goes
//! away with its sockets). Reference ptp-and-benchmarks §3.3.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use crossbeam_channel::{Receiver, Sender, unbounded};
use ptp_ipc::poll::{PollFlags, deadline_after, wait_fd};
use ptp_ipc::time::{mono_ns, realtime_ns};

use crate::ramp::{Completion, Outcome, Target};

/// How long a reader waits before it looks at its stop flag again.
const POLL_SLICE: std::time::Duration = std::time::Duration::from_millis(100);

fn errno(what: &str) -> String {
    format!("{what}: {}", std::io::Error::last_os_error())
}

/// Sockets created inside a fresh network namespace, by a thread that then exits.
struct NetnsSockets {
    tx: OwnedFd,
    rx: OwnedFd,
}

fn make_sockets() -> Result<NetnsSockets, String> {
    std::thread::spawn(|| -> Result<NetnsSockets, String> {
        // Safety: unshare(2) affects only this thread, which exits after creating the sockets.
        if unsafe { libc::unshare(libc::CLONE_NEWNET) } != 0 {
            return Err(errno(
                "unshare(CLONE_NEWNET) (tsperf --kernel-baseline needs root)",
            ));
        }
        let sock = |ty| {
            // Safety: plain socket(2) call; the fd is owned immediately.
            let fd = unsafe { libc::socket(libc::AF_INET, ty | libc::SOCK_CLOEXEC, 0) };
            if fd < 0 {
                Err(errno("socket"))
            } else {
                // Safety: fd was just returned by socket(2) and is owned by nobody else.
                Ok(unsafe { OwnedFd::from_raw_fd(fd) })
            }
        };
        // Bring `lo` up in the new namespace.
        let ctl = sock(libc::SOCK_DGRAM)?;
        // Safety: ifreq is plain data; zeroed is a valid initial value.
        let mut ifr: libc::ifreq = unsafe { std::mem::zeroed() };
        for (d, s) in ifr.ifr_name.iter_mut().zip(b"lo\0") {
            *d = *s as libc::c_char;
        }
        ifr.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
        // Safety: SIOCSIFFLAGS reads a valid ifreq we own.
        if unsafe { libc::ioctl(ctl.as_raw_fd(), libc::SIOCSIFFLAGS as _, &ifr) } != 0 {
            return Err(errno("SIOCSIFFLAGS lo up"));
        }
        let rx = sock(libc::SOCK_DGRAM)?;
        let tx = sock(libc::SOCK_DGRAM)?;
        let addr = libc::sockaddr_in {
            sin_family: libc::AF_INET as libc::sa_family_t,
            sin_port: 31_900u16.to_be(),
            sin_addr: libc::in_addr {
                s_addr: u32::from_be_bytes([127, 0, 0, 1]).to_be(),
            },
            sin_zero: [0; 8],
        };
        let alen = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
        // Safety: addr is a valid sockaddr_in of alen bytes.
        if unsafe { libc::bind(rx.as_raw_fd(), (&raw const addr).cast(), alen) } != 0 {
            return Err(errno("bind"));
        }
        // Safety: as above.
        if unsafe { libc::connect(tx.as_raw_fd(), (&raw const addr).cast(), alen) } != 0 {
            return Err(errno("connect"));
        }
        let flags: libc::c_uint = libc::SOF_TIMESTAMPING_TX_SOFTWARE
            | libc::SOF_TIMESTAMPING_SOFTWARE
            | libc::SOF_TIMESTAMPING_OPT_ID
            | libc::SOF_TIMESTAMPING_OPT_TSONLY;
        // Safety: SO_TIMESTAMPING takes an unsigned int option value.
        let r = unsafe {
            libc::setsockopt(
                tx.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_TIMESTAMPING,
                (&raw const flags).cast(),
                std::mem::size_of_val(&flags) as libc::socklen_t,
            )
        };
        if r != 0 {
            return Err(errno("setsockopt(SO_TIMESTAMPING)"));
        }
        Ok(NetnsSockets { tx, rx })
    })
    .join()
    .map_err(|_| "namespace thread panicked".to_string())?
}

/// The kernel-stamping target.
pub struct KernelTarget {
    tx: Arc<OwnedFd>,
    /// Kernel OPT_ID (per successful send, from 0) → ramp id.
    ids: Arc<Mutex<HashMap<u32, u64>>>,
    next_kernel_id: u32,
    completions: Receiver<Completion>,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    payload: [u8; 44],
}

impl KernelTarget {
    pub fn start() -> Result<Self, String> {
        let s = make_sockets()?;
        let tx = Arc::new(s.tx);
        let rx = s.rx;
        let ids: Arc<Mutex<HashMap<u32, u64>>> = Arc::default();
        let (ctx, crx) = unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let mut threads = Vec::new();
        {
            let (tx, ids, stop) = (tx.clone(), ids.clone(), stop.clone());
            threads.push(std::thread::spawn(move || {
                errqueue_reader(&tx, &ids, &ctx, &stop)
            }));
        }
        {
            let stop = stop.clone();
            // Drain the receiver so loopback never pushes back.
            threads.push(std::thread::spawn(move || {
                let mut buf = [0u8; 256];
                while !stop.load(Ordering::Relaxed) {
                    if matches!(
                        wait_fd(&rx, PollFlags::IN, deadline_after(POLL_SLICE)),
                        Ok(Some(_))
                    ) {
                        // Safety: buf is valid for its length.
                        unsafe {
                            libc::recv(
                                rx.as_raw_fd(),
                                buf.as_mut_ptr().cast(),
                                buf.len(),
                                libc::MSG_DONTWAIT,
                            )
                        };
                    }
                }
            }));
        }
        Ok(Self {
            tx,
            ids,
            next_kernel_id: 0,
            completions: crx,
            stop,
            threads,
            payload: [0; 44],
        })
    }
}

impl Drop for KernelTarget {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Target for KernelTarget {
    fn name(&self) -> String {
        "linux software TX timestamps (UDP, loopback, netns)".into()
    }

    fn submit(&mut self, id: u64) -> Result<(), String> {
        self.payload[30..32].copy_from_slice(&(id as u16).to_be_bytes());
        // Record the mapping first: the stamp can arrive before send(2) returns.
        self.ids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.next_kernel_id, id);
        // Safety: payload is valid for its length.
        let r = unsafe {
            libc::send(
                self.tx.as_raw_fd(),
                self.payload.as_ptr().cast(),
                self.payload.len(),
                0,
            )
        };
        if r < 0 {
            self.ids
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .remove(&self.next_kernel_id);
            return Err(errno("send"));
        }
        self.next_kernel_id = self.next_kernel_id.wrapping_add(1);
        Ok(())
    }

    fn completions(&self) -> &Receiver<Completion> {
        &self.completions
    }
}

fn errqueue_reader(
    tx: &OwnedFd,
    ids: &Mutex<HashMap<u32, u64>>,
    out: &Sender<Completion>,
    stop: &AtomicBool,
) {
    let fd = tx.as_raw_fd();
    let mut control = [0u64; 64];
    let mut data = [0u8; 64];
    let mut rt_minus_mono = realtime_ns() as i128 - mono_ns() as i128;
    let mut last_sync = mono_ns();
    while !stop.load(Ordering::Relaxed) {
        // POLLERR (a completion on the error queue) is always reported.
        if !matches!(
            wait_fd(tx, PollFlags::empty(), deadline_after(POLL_SLICE)),
            Ok(Some(_))
        ) {
            continue;
        }
        loop {
            let mut iov = libc::iovec {
                iov_base: data.as_mut_ptr().cast(),
                iov_len: data.len(),
            };
            // Safety: msghdr is plain data; zeroed is valid before we fill it in.
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr().cast();
            msg.msg_controllen = std::mem::size_of_val(&control) as _;
            // Safety: msg points at buffers valid for the call.
            let n = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
            if n < 0 {
                break;
            }
            let arrival = mono_ns();
            if arrival - last_sync > 100_000_000 {
                rt_minus_mono = realtime_ns() as i128 - mono_ns() as i128;
                last_sync = arrival;
            }
            let (mut stamp, mut kid) = (None, None);
            // Safety: the CMSG_* macros walk the control buffer the kernel filled, bounded by
            // msg_controllen.
            unsafe {
                let mut c = libc::CMSG_FIRSTHDR(&msg);
                while !c.is_null() {
                    let h = &*c;
                    if h.cmsg_level == libc::SOL_SOCKET && h.cmsg_type == libc::SCM_TIMESTAMPING {
                        let ts = libc::CMSG_DATA(c).cast::<libc::timespec>().read_unaligned();
                        stamp = Some(ts.tv_sec as i128 * 1_000_000_000 + ts.tv_nsec as i128);
                    } else if h.cmsg_level == libc::SOL_IP && h.cmsg_type == libc::IP_RECVERR {
                        let e = libc::CMSG_DATA(c)
                            .cast::<libc::sock_extended_err>()
                            .read_unaligned();
                        if e.ee_origin == libc::SO_EE_ORIGIN_TIMESTAMPING {
                            kid = Some(e.ee_data);
                        }
                    }
                    c = libc::CMSG_NXTHDR(&msg, c);
                }
            }
            let (Some(rt), Some(k)) = (stamp, kid) else {
                continue;
            };
            let Some(id) = ids.lock().unwrap_or_else(|e| e.into_inner()).remove(&k) else {
                continue;
            };
            let _ = out.send(Completion {
                id,
                arrival_mono_ns: arrival,
                outcome: Outcome::Stamp {
                    latch_mono_ns: (rt - rt_minus_mono).max(0) as u64,
                },
            });
        }
    }
}
