//! `ptplab tap-bridge` as a process, frame by frame: the test holds the other end of the wire
//! (in its own network namespace) and a packet socket on the TAP inside the namespace the test
//! creates. Checks the timing rules (a frame from the wire reaches the TAP no earlier than its
//! arrival instant; a frame from the TAP departs when the bridge reads it), the counters printed
//! on SIGTERM, and the typed errors for a missing namespace and a non-root caller.
//!
//! Needs root, `ip` and /dev/net/tun; skips otherwise unless `REDOX_PTP_REQUIRE_TAP=1`.

use std::ffi::CString;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use ptp_emu::wire::{UnixDatagramWire, WirePort};
use ptp_ipc::time::mono_ns;
use redox_ptp::tap::Netns;

/// IEEE 802 local experimental ethertype: nothing else on the TAP uses it.
const ETHERTYPE: u16 = 0x88B5;

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

fn available(test: &str) -> bool {
    // Safety: geteuid has no preconditions.
    let root = unsafe { libc::geteuid() } == 0;
    let ip = ["/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"]
        .iter()
        .any(|p| Path::new(p).exists());
    let tun = Path::new("/dev/net/tun").exists();
    if root && ip && tun {
        return true;
    }
    let msg = format!("{test}: needs root ({root}), ip from iproute2 ({ip}), /dev/net/tun ({tun})");
    if std::env::var("REDOX_PTP_REQUIRE_TAP").as_deref() == Ok("1") {
        panic!("{msg} (REDOX_PTP_REQUIRE_TAP=1)");
    }
    eprintln!("skipping {msg}; set REDOX_PTP_REQUIRE_TAP=1 to fail instead");
    false
}

struct TempDir(PathBuf);

impl TempDir {
    fn new(tag: &str) -> Self {
        let p =
            std::env::temp_dir().join(format!("rptp-{tag}-{}-{}", std::process::id(), mono_ns()));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A bridge process, killed on drop if still running.
struct Bridge(Child);

impl Drop for Bridge {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn bridge_cmd(wire: &Path, ns: &str) -> Command {
    let mut c = Command::new(exe());
    c.arg("tap-bridge")
        .arg("--wire")
        .arg(format!("bind:{}", wire.display()))
        .args(["--netns", ns])
        .stdin(Stdio::null());
    c
}

/// A raw packet socket for [`ETHERTYPE`] on `ifname` inside namespace `ns`, made on a thread
/// that enters the namespace (a socket stays in the namespace it was made in, whichever thread
/// uses it later). Receives time out after 5 s.
fn packet_socket(ns: &str, ifname: &str) -> io::Result<OwnedFd> {
    let (ns, ifname) = (ns.to_string(), CString::new(ifname).unwrap());
    std::thread::spawn(move || -> io::Result<OwnedFd> {
        let f = std::fs::File::open(format!("/run/netns/{ns}"))?;
        // Safety: `f` is an open namespace file; only this short-lived thread moves.
        if unsafe { libc::setns(f.as_raw_fd(), libc::CLONE_NEWNET) } != 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: if_nametoindex reads a NUL-terminated string, which `ifname` is.
        let index = unsafe { libc::if_nametoindex(ifname.as_ptr()) };
        let proto = ETHERTYPE.to_be() as i32;
        // Safety: socket(2) with constant arguments; checked below.
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW, proto) };
        if index == 0 || fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // Safety: `fd` is a fresh descriptor nothing else owns.
        let sock = unsafe { OwnedFd::from_raw_fd(fd) };
        // Safety: sockaddr_ll is a plain C struct; all-zero is a valid value.
        let mut sll: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        sll.sll_family = libc::AF_PACKET as u16;
        sll.sll_protocol = ETHERTYPE.to_be();
        sll.sll_ifindex = index as i32;
        let tv = libc::timeval {
            tv_sec: 5,
            tv_usec: 0,
        };
        // Safety: bind and setsockopt read a sockaddr_ll and a timeval of the sizes given.
        let r = unsafe {
            libc::bind(
                sock.as_raw_fd(),
                (&raw const sll).cast(),
                std::mem::size_of::<libc::sockaddr_ll>() as u32,
            ) | libc::setsockopt(
                sock.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                (&raw const tv).cast(),
                std::mem::size_of::<libc::timeval>() as u32,
            )
        };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(sock)
    })
    .join()
    .unwrap()
}

fn frame(tag: &[u8]) -> Vec<u8> {
    let mut f = vec![0x02, 0, 0, 0, 0, 0x01, 0x02, 0, 0, 0, 0, 0x02];
    f.extend_from_slice(&ETHERTYPE.to_be_bytes());
    f.extend_from_slice(tag);
    f.resize(60, 0);
    f
}

/// Receives frames on `sock` (each recv bounded by its 5 s timeout) until one carries `tag`
/// right after the Ethernet header; the CLOCK_MONOTONIC instant it was received.
fn receive_tagged(sock: &OwnedFd, tag: &[u8]) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut buf = [0u8; 2048];
    while Instant::now() < deadline {
        // Safety: `buf` is valid for writes of its length.
        let n = unsafe { libc::recv(sock.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len(), 0) };
        let t = mono_ns();
        if n >= 14 + tag.len() as isize && buf[14..14 + tag.len()] == *tag {
            return t;
        }
    }
    panic!("frame {tag:?} never reached the TAP");
}

#[test]
fn bridge_keeps_arrival_instants_and_departure_on_read() {
    if !available("bridge_keeps_arrival_instants_and_departure_on_read") {
        return;
    }
    let ns = Netns::unique("rptp-br").unwrap();
    let dir = TempDir::new("bridge");
    let (wire_path, ready, out) = (dir.0.join("w.sock"), dir.0.join("ready"), dir.0.join("out"));
    let mut cmd = bridge_cmd(&wire_path, ns.name());
    cmd.arg("--ready-file").arg(&ready);
    cmd.stdout(std::fs::File::create(&out).unwrap());
    let mut bridge = Bridge(cmd.spawn().unwrap());
    let t0 = Instant::now();
    while !ready.exists() {
        assert!(bridge.0.try_wait().unwrap().is_none(), "bridge exited");
        assert!(t0.elapsed() < Duration::from_secs(10), "bridge never ready");
        std::thread::sleep(Duration::from_millis(10));
    }
    let mut wire = UnixDatagramWire::connect(&wire_path).unwrap();
    let sock = packet_socket(ns.name(), "tap0").unwrap();

    // Wire → TAP: a frame that departs 300 ms from now must not reach the TAP before its
    // arrival instant (departure + the bridge's 50 ns cable).
    let departure = mono_ns() + 300_000_000;
    wire.transmit(&frame(b"to-tap"), departure);
    let got = receive_tagged(&sock, b"to-tap");
    assert!(
        got >= departure + 50,
        "written {} ns before its arrival instant",
        departure + 50 - got
    );
    eprintln!(
        "wire→TAP: received {} µs after the arrival instant",
        (got - departure - 50) / 1000
    );

    // TAP → wire: the departure instant lies between our send and our receipt of the frame.
    let f = frame(b"to-wire");
    let before = mono_ns();
    // Safety: `f` is valid for reads of its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), f.as_ptr().cast(), f.len(), 0) };
    assert_eq!(sent, f.len() as isize, "{}", io::Error::last_os_error());
    let deadline = Instant::now() + Duration::from_secs(10);
    let arrival = loop {
        if let Some(w) = wire.poll_rx(u64::MAX)
            && w.data.get(14..21) == Some(&b"to-wire"[..])
        {
            break w.arrival_ns;
        }
        assert!(Instant::now() < deadline, "frame never left the TAP");
        std::thread::sleep(Duration::from_millis(1));
    };
    let after = mono_ns();
    let dep = arrival - 50; // our end's default cable
    assert!(
        (before..=after).contains(&dep),
        "departure {dep} outside [{before}, {after}]"
    );
    eprintln!(
        "TAP→wire: departure {} µs after the send",
        (dep - before) / 1000
    );

    // A frame shorter than the 60-byte minimum (Linux hands a TAP a 42-byte ARP reply as
    // built) leaves the bridge zero-padded to 60, as the far end's MAC sends it: the models
    // drop shorter frames as runts.
    let short = frame(b"short")[..42].to_vec();
    // Safety: `short` is valid for reads of its length.
    let sent = unsafe { libc::send(sock.as_raw_fd(), short.as_ptr().cast(), short.len(), 0) };
    assert_eq!(sent, 42, "{}", io::Error::last_os_error());
    let deadline = Instant::now() + Duration::from_secs(10);
    let padded = loop {
        if let Some(w) = wire.poll_rx(u64::MAX)
            && w.data.get(14..19) == Some(&b"short"[..])
        {
            break w.data;
        }
        assert!(Instant::now() < deadline, "short frame never left the TAP");
        std::thread::sleep(Duration::from_millis(1));
    };
    assert_eq!(
        padded,
        [short, vec![0; 18]].concat(),
        "padded to 60 with zeros"
    );

    // SIGTERM: a clean exit with the counters. Exactly one frame came from the wire; the TAP
    // also sent Linux's own (IPv6 neighbour discovery and the like).
    // Safety: kill(2) on our unreaped child's pid.
    unsafe { libc::kill(bridge.0.id() as i32, libc::SIGTERM) };
    let t0 = Instant::now();
    let status = loop {
        if let Some(s) = bridge.0.try_wait().unwrap() {
            break s;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(5),
            "bridge ignored SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(10));
    };
    let text = std::fs::read_to_string(&out).unwrap();
    assert!(status.success(), "{status}: {text}");
    assert!(text.contains(", 1 wire→tap, 0 tap write errors"), "{text}");
    assert!(!wire_path.exists(), "bound socket file left behind");
}

#[test]
fn bridge_errors_are_typed_and_said() {
    if !available("bridge_errors_are_typed_and_said") {
        return;
    }
    let dir = TempDir::new("bridge-err");
    let missing = format!("rptp-none-{}", std::process::id());
    let out = bridge_cmd(&dir.0.join("a.sock"), &missing)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(
        err.contains(&format!("network namespace {missing:?} not found")),
        "{err}"
    );
    // As an unprivileged user (nobody).
    let out = bridge_cmd(&dir.0.join("b.sock"), &missing)
        .uid(65534)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(err.contains("tap-bridge needs root"), "{err}");
    let out = Command::new(exe())
        .args(["tap-bridge", "--netns", "x"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2), "usage error");
}
