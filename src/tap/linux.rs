//! The Linux half of the TAP cable end: entering the namespace, the TAP device (TUNSETIFF,
//! SIOCSIF*), and the forwarding loop.

use std::fs::File;
use std::io::{self, Read, Write};
use std::net::Ipv4Addr;
use std::os::fd::{AsRawFd, FromRawFd};
use std::os::unix::fs::OpenOptionsExt;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ptp_emu::wire::{Cable, UnixDatagramWire, WirePort};
use ptp_ipc::time::mono_ns;

use super::{BridgeOptions, BridgeStats, TapError, WireEnd};

/// Longest single wait, so a stop request is seen even if its signal raced the wait.
const MAX_WAIT: Duration = Duration::from_millis(100);
/// Frames moved from the TAP per wake-up before the wire side gets its turn.
const TAP_READS_PER_WAKE: usize = 64;
/// Shortest frame on the cable without its FCS (64 bytes with it, IEEE 802.3).
const MIN_FRAME: usize = 60;

/// A running bridge: the TAP (inside the namespace) and the wire end (outside it).
pub struct TapBridge {
    tap: File,
    wire: UnixDatagramWire,
    stats: BridgeStats,
    buf: Box<[u8]>,
}

impl TapBridge {
    /// Makes the wire end (in the caller's namespace), then moves this thread into the
    /// namespace and creates, addresses and raises the TAP there.
    pub fn open(o: &BridgeOptions) -> Result<Self, TapError> {
        // Safety: geteuid has no preconditions.
        if unsafe { libc::geteuid() } != 0 {
            return Err(TapError::NotRoot);
        }
        let wire = match &o.wire {
            WireEnd::Bind(p) => UnixDatagramWire::bind(p),
            WireEnd::Connect(p) => UnixDatagramWire::connect(p),
        };
        let path = match &o.wire {
            WireEnd::Bind(p) | WireEnd::Connect(p) => p.clone(),
        };
        let wire = wire
            .map_err(|source| TapError::Wire { path, source })?
            .with_cable(Cable::new(o.cable_delay_ns));
        // Frames due in the future wait in ppoll's timeout: no default 50 µs timer slack on
        // top of their arrival instant.
        // Safety: PR_SET_TIMERSLACK takes a plain integer and affects only this thread.
        unsafe { libc::prctl(libc::PR_SET_TIMERSLACK, 1 as libc::c_ulong) };
        if let Some(priority) = o.rt_priority {
            let param = libc::sched_param {
                sched_priority: priority,
            };
            // Safety: pid 0 is the calling thread; `param` is a valid sched_param.
            if unsafe { libc::sched_setscheduler(0, libc::SCHED_FIFO, &param) } != 0 {
                let source = io::Error::last_os_error();
                return Err(TapError::RealTime { priority, source });
            }
        }
        enter_netns(&o.netns)?;
        let tap = create_tap(&o.tap)?;
        configure(&o.tap, o.addr)?;
        Ok(Self {
            tap,
            wire,
            stats: BridgeStats::default(),
            buf: vec![0; 65_536].into_boxed_slice(),
        })
    }

    /// Forwards frames both ways until `stop` is set.
    pub fn run(&mut self, stop: &AtomicBool) -> Result<BridgeStats, TapError> {
        while !stop.load(Ordering::SeqCst) {
            self.deliver_due();
            let now = mono_ns();
            let wait = match self.wire.next_arrival() {
                Some(a) => Duration::from_nanos(a.saturating_sub(now)).min(MAX_WAIT),
                None => MAX_WAIT,
            };
            if self.wait(wait)? {
                self.forward_from_tap();
            }
        }
        Ok(self.stats())
    }

    /// The counters so far.
    pub fn stats(&self) -> BridgeStats {
        BridgeStats {
            wire: self.wire.stats(),
            ..self.stats
        }
    }

    /// Writes every frame whose arrival instant has come to the TAP (Linux stamps it now).
    fn deliver_due(&mut self) {
        let now = mono_ns();
        while let Some(f) = self.wire.poll_rx(now) {
            // One write is one frame: the TAP takes all of it or none.
            match self.tap.write(&f.data) {
                Ok(n) if n == f.data.len() => {
                    self.stats.wire_to_tap += 1;
                    let late = mono_ns().saturating_sub(f.arrival_ns);
                    self.stats.late_ns_sum = self.stats.late_ns_sum.saturating_add(late);
                    self.stats.late_ns_max = self.stats.late_ns_max.max(late);
                }
                _ => self.stats.tap_write_errors += 1,
            }
        }
    }

    /// Reads what the TAP holds; each frame departs on the wire at the instant it was read.
    fn forward_from_tap(&mut self) {
        for _ in 0..TAP_READS_PER_WAKE {
            let n = match self.tap.read(&mut self.buf) {
                Ok(n) if n > 0 => n,
                _ => return,
            };
            let departure = mono_ns();
            // The bridge is the far end's MAC: a short frame leaves it padded to the 60-byte
            // minimum (TCTL.PSP on an Intel part). Linux hands a TAP frames as built (a
            // 42-byte ARP reply), and a model receiving one drops it as a runt.
            if n < MIN_FRAME {
                self.buf[n..MIN_FRAME].fill(0);
            }
            self.wire.transmit(&self.buf[..n.max(MIN_FRAME)], departure);
            self.stats.tap_to_wire += 1;
        }
    }

    /// Waits up to `timeout` for the TAP or the wire socket; true if the TAP is readable.
    /// EINTR ends the wait (the loop then looks at its stop flag).
    fn wait(&self, timeout: Duration) -> Result<bool, TapError> {
        use ptp_ipc::poll::{PollFd, PollFlags, poll_once};
        let mut fds = [
            PollFd::new(&self.tap, PollFlags::IN),
            PollFd::new(&self.wire, PollFlags::IN),
        ];
        poll_once(&mut fds, timeout).map_err(TapError::Poll)?;
        Ok(fds[0].revents().contains(PollFlags::IN))
    }
}

/// Moves the calling thread into network namespace `name` (`/run/netns/NAME`).
fn enter_netns(name: &str) -> Result<(), TapError> {
    let f = File::open(format!("/run/netns/{name}")).map_err(|source| TapError::NoNetns {
        name: name.into(),
        source,
    })?;
    // Safety: `f` is an open namespace file for the duration of the call.
    if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
        return Err(TapError::Setns {
            name: name.into(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(())
}

/// An `ifreq` naming `name`, all else zero.
fn ifreq(name: &str) -> libc::ifreq {
    // Safety: ifreq is a plain C struct (a name array and a union of plain C members), for
    // which all-zero bytes are a valid value.
    let mut r: libc::ifreq = unsafe { std::mem::zeroed() };
    for (d, s) in r
        .ifr_name
        .iter_mut()
        .zip(name.bytes().take(libc::IFNAMSIZ - 1))
    {
        *d = s as libc::c_char;
    }
    r
}

/// Opens /dev/net/tun and attaches a new TAP `name` to it (no packet-info header, so reads and
/// writes are bare Ethernet frames). The TAP goes away when the file is closed.
fn create_tap(name: &str) -> Result<File, TapError> {
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NONBLOCK)
        .open("/dev/net/tun")
        .map_err(TapError::NoTun)?;
    let mut r = ifreq(name);
    r.ifr_ifru.ifru_flags = (libc::IFF_TAP | libc::IFF_NO_PI) as libc::c_short;
    // Safety: TUNSETIFF reads and writes one ifreq, which `r` is, on an open tun file.
    if unsafe { libc::ioctl(f.as_raw_fd(), libc::TUNSETIFF, &mut r) } != 0 {
        return Err(TapError::TapCreate {
            name: name.into(),
            source: io::Error::last_os_error(),
        });
    }
    Ok(f)
}

fn sockaddr_v4(a: Ipv4Addr) -> libc::sockaddr {
    let sin = libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: 0,
        sin_addr: libc::in_addr {
            s_addr: u32::from_ne_bytes(a.octets()),
        },
        sin_zero: [0; 8],
    };
    const _: () =
        assert!(std::mem::size_of::<libc::sockaddr_in>() == std::mem::size_of::<libc::sockaddr>());
    // Safety: both are 16-byte plain C structs (checked above); the kernel reads this
    // sockaddr as the sockaddr_in its family field says it is.
    unsafe { std::mem::transmute::<libc::sockaddr_in, libc::sockaddr>(sin) }
}

/// Sets the TAP's IPv4 address (if any) and raises it, through a socket of the namespace.
fn configure(name: &str, addr: Option<(Ipv4Addr, u8)>) -> Result<(), TapError> {
    let err = |what: &'static str| TapError::TapConfig {
        name: name.into(),
        what,
        source: io::Error::last_os_error(),
    };
    // Safety: socket(2) with constant arguments; the result is checked and owned below.
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        return Err(err("socket"));
    }
    // Safety: `fd` is a fresh descriptor nothing else owns.
    let sock = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
    let s = sock.as_raw_fd();
    let ioctl = |req: libc::Ioctl, r: &mut libc::ifreq, what| {
        // Safety: each SIOC[GS]IF* request used here reads or writes one ifreq, which `r` is.
        if unsafe { libc::ioctl(s, req, r as *mut libc::ifreq) } != 0 {
            return Err(err(what));
        }
        Ok(())
    };
    if let Some((a, len)) = addr {
        let mut r = ifreq(name);
        r.ifr_ifru.ifru_addr = sockaddr_v4(a);
        ioctl(libc::SIOCSIFADDR, &mut r, "address")?;
        let mask = u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0);
        r.ifr_ifru.ifru_netmask = sockaddr_v4(Ipv4Addr::from(mask));
        ioctl(libc::SIOCSIFNETMASK, &mut r, "netmask")?;
    }
    let mut r = ifreq(name);
    ioctl(libc::SIOCGIFFLAGS, &mut r, "get flags")?;
    // Safety: SIOCGIFFLAGS filled the flags member of the union.
    let flags = unsafe { r.ifr_ifru.ifru_flags };
    r.ifr_ifru.ifru_flags = flags | libc::IFF_UP as libc::c_short;
    ioctl(libc::SIOCSIFFLAGS, &mut r, "up")
}
