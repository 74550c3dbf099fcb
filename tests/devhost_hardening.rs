//! The device host (`ptplab devhost --listen`) against hostile peers, with real processes
//! (issue 23): its socket file is private whatever the umask, the kernel's word on each peer
//! decides who is served, a silent peer cannot keep the driver out, and guest RAM that could
//! shrink under the model is refused — the NIC process lives and the next igcd attaches.
//!
//! Switching uid needs root. CI runs as root; elsewhere these tests fail rather than pass
//! without having checked anything.

mod common;

use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::net::UnixStream;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::{TempDir, exe};
use intel_regs::igc::{CTRL, Ctrl, TCTL, tctl, tdbah, tdbal, tdh, tdlen, tdt, txdctl, xdctl};
use ptp_emu::proxy::client::exchange;
use ptp_emu::proxy::proto::{self, RamRegion, cmd};
use redox_ptp::lab::{self, HostPaths};
use redox_ptp::procs::Children;

const NOBODY: u32 = 65534;
/// Set in the environment of this binary re-run as uid 65534: the peer's socket path.
const PEER_ENV: &str = "DEVHOST_HARDENING_PEER";
/// Where the test's peers place BAR0 (as igcd's client does).
const BAR0: u64 = 0xFEB0_0000;

fn require_root(test: &str) {
    // Safety: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "needs root (runs a peer as uid {NOBODY}); run the tests as root, or skip this one \
         with `-- --skip {test}`"
    );
}

/// One device host with its directory, an igcd and a ptpd on it when asked.
struct Devhost {
    kids: Children,
    paths: HostPaths,
    sock: PathBuf,
    report: PathBuf,
    log: PathBuf,
    _dir: TempDir,
}

impl Devhost {
    /// Starts `ptplab devhost --listen` with `extra` options, under umask 000 if `umask0`.
    fn start(tag: &str, umask0: bool, extra: &[&str]) -> Self {
        let dir = TempDir::new(tag);
        let paths = HostPaths::new(&dir.0, 0);
        std::fs::create_dir_all(&paths.dir).unwrap();
        let (sock, report, log) = (
            paths.dir.join("nic.sock"),
            paths.dir.join("nic.json"),
            paths.dir.join("nic.log"),
        );
        let mut cmd = Command::new(exe());
        cmd.arg("devhost")
            .arg("--listen")
            .arg(&sock)
            .arg("--report")
            .arg(&report)
            .arg("--truth")
            .arg(&paths.truth)
            .args(["--name", "host0"])
            .args(extra)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(&log).unwrap());
        if umask0 {
            // Safety: runs in the forked child before exec; umask is async-signal-safe.
            unsafe {
                cmd.pre_exec(|| {
                    libc::umask(0);
                    Ok(())
                });
            }
        }
        let mut kids = Children::default();
        kids.spawn("devhost", cmd).unwrap();
        let mut d = Self {
            kids,
            paths,
            sock,
            report,
            log,
            _dir: dir,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        while !d.sock.exists() {
            assert!(Instant::now() < deadline, "no socket\n{}", d.logs());
            if let Some(how) = d.running() {
                panic!("the device host {how}\n{}", d.logs());
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        d
    }

    /// How the device host ended, if it did (reaps it).
    fn running(&mut self) -> Option<String> {
        self.kids
            .take_exited()
            .into_iter()
            .find(|(n, _)| n == "devhost")
            .map(|(_, s)| redox_ptp::procs::describe_exit(&s))
    }

    /// Starts root's igcd on the device host and a ptpd on it; waits until ptpd has the driver.
    fn attach_igcd(&mut self, within: Duration) {
        let log = self.paths.dir.join("igcd.log");
        let mut cmd = Command::new(exe());
        cmd.arg("igcd")
            .arg("--devhost")
            .arg(&self.sock)
            .args(["--name", "host0"])
            .arg("--channel")
            .arg(&self.paths.channel)
            .arg("--clock-page")
            .arg(&self.paths.clock_page)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&log).unwrap())
            .stderr(std::fs::File::create(&log).unwrap());
        self.kids.spawn("igcd", cmd).unwrap();
        lab::spawn_ptpd(&mut self.kids, &exe(), &self.paths, 0, "").unwrap();
        if let Err(e) = lab::wait_ready(&self.paths, within) {
            panic!("igcd did not attach: {e}\n{}", self.logs());
        }
    }

    /// Stops everything (the device host last, by SIGTERM) and returns its report.
    fn finish(&mut self) -> serde_json::Value {
        self.kids.stop("host0/ptpd");
        self.kids.stop("igcd");
        self.kids.stop("devhost");
        let text = std::fs::read_to_string(&self.report)
            .unwrap_or_else(|e| panic!("no report: {e}\n{}", self.logs()));
        serde_json::from_str(&text).unwrap()
    }

    fn devhost_log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn logs(&self) -> String {
        ["nic.log", "igcd.log", "ptpd.log"]
            .iter()
            .map(|f| {
                let text = std::fs::read_to_string(self.paths.dir.join(f)).unwrap_or_default();
                format!("--- {f}\n{text}")
            })
            .collect()
    }
}

/// A scripted driver speaking the proxy protocol, as igcd's client or QEMU would.
struct Peer {
    sock: UnixStream,
}

impl Peer {
    fn connect(path: &Path) -> std::io::Result<Self> {
        let sock = UnixStream::connect(path)?;
        sock.set_read_timeout(Some(Duration::from_secs(5)))?;
        sock.set_write_timeout(Some(Duration::from_secs(5)))?;
        Ok(Self { sock })
    }

    /// Sends one message; for an access, returns the RET value (an error if the device host
    /// closed the connection instead of answering).
    fn call(
        &mut self,
        c: i32,
        payload: &[u8],
        fds: &[BorrowedFd<'_>],
        reply: bool,
    ) -> std::io::Result<u64> {
        exchange(&mut self.sock, c, payload, fds, reply)
    }

    /// Assigns BAR0 and enables memory decoding and bus mastering, as firmware would.
    fn set_up(&mut self) -> std::io::Result<()> {
        self.call(
            cmd::PCI_CFGWRITE,
            &proto::encode_cfg(0x10, BAR0 as u32, 4),
            &[],
            true,
        )?;
        self.call(cmd::PCI_CFGWRITE, &proto::encode_cfg(0x04, 6, 2), &[], true)?;
        Ok(())
    }

    fn bar_write(&mut self, off: u32, v: u32) -> std::io::Result<()> {
        let p = proto::encode_bar(BAR0 + u64::from(off), v.into(), 4, true);
        self.call(cmd::BAR_WRITE, &p, &[], true).map(drop)
    }

    /// Points TX queue 0's ring at `ring` (guest-physical) and hands the model one
    /// descriptor: its next poll reads the descriptor there (a DMA read).
    fn kick_tx_dma(&mut self, ring: u64) -> std::io::Result<()> {
        self.bar_write(CTRL, Ctrl::SLU.bits())?;
        self.bar_write(txdctl(0), 0)?;
        self.bar_write(tdlen(0), 8 * 16)?;
        self.bar_write(tdbal(0), ring as u32)?;
        self.bar_write(tdbah(0), (ring >> 32) as u32)?;
        self.bar_write(tdh(0), 0)?;
        self.bar_write(tdt(0), 0)?;
        self.bar_write(txdctl(0), 8 | 1 << 8 | 16 << 16 | xdctl::QUEUE_ENABLE)?;
        self.bar_write(TCTL, tctl::EN | tctl::PSP)?;
        self.bar_write(tdt(0), 1)
    }
}

/// A memfd of `len` bytes with `seals`.
fn memfd(len: u64, seals: libc::c_int) -> OwnedFd {
    // Safety: memfd_create with a static C string; ftruncate and F_ADD_SEALS on the fd we own.
    unsafe {
        let fd = libc::memfd_create(
            c"hostile-ram".as_ptr(),
            libc::MFD_CLOEXEC | libc::MFD_ALLOW_SEALING,
        );
        assert!(fd >= 0);
        assert_eq!(libc::ftruncate(fd, len as libc::off_t), 0);
        if seals != 0 {
            assert_eq!(libc::fcntl(fd, libc::F_ADD_SEALS, seals), 0);
        }
        OwnedFd::from_raw_fd(fd)
    }
}

/// Not a test of its own: the unprivileged peer, when `run_peer_as_nobody` runs this binary as
/// uid 65534 with [`PEER_ENV`] set. It connects, sends DEVICE_RESET and prints what happened.
#[test]
fn peer_process() {
    let Ok(path) = std::env::var(PEER_ENV) else {
        return;
    };
    let outcome = match Peer::connect(Path::new(&path)) {
        Err(e) => format!("connect-error {}", e.raw_os_error().unwrap_or(-1)),
        Ok(mut p) => match p.call(cmd::DEVICE_RESET, &[], &[], true) {
            Ok(v) => format!("answered {v}"),
            Err(e) => format!("closed ({e})"),
        },
    };
    println!("PEER {outcome}");
    std::process::exit(0);
}

/// Runs [`peer_process`] as uid 65534 against `sock`; its one line of outcome.
fn run_peer_as_nobody(sock: &Path) -> String {
    let out = Command::new(std::env::current_exe().unwrap())
        .args(["peer_process", "--exact", "--nocapture", "--test-threads=1"])
        .env(PEER_ENV, sock)
        .uid(NOBODY)
        .gid(NOBODY)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    text.lines()
        .find_map(|l| l.split_once("PEER ").map(|(_, o)| o))
        .unwrap_or_else(|| {
            panic!(
                "the peer printed no outcome: {text}\n{}",
                String::from_utf8_lossy(&out.stderr)
            )
        })
        .to_string()
}

/// Started under umask 000 the socket file is 0600 and root's, so uid 65534 cannot connect;
/// with the file opened up to everyone, the SO_PEERCRED check still closes it unserved (its
/// DEVICE_RESET never reaches the model); root's igcd then attaches.
#[test]
fn under_umask_000_only_root_reaches_the_device_host() {
    require_root("under_umask_000_only_root_reaches_the_device_host");
    let mut d = Devhost::start("devhost-umask", true, &[]);
    let m = std::fs::symlink_metadata(&d.sock).unwrap();
    assert_eq!(
        (m.mode() & 0o777, m.uid()),
        (0o600, 0),
        "socket file mode {:o}",
        m.mode() & 0o777
    );
    let o = run_peer_as_nobody(&d.sock);
    assert_eq!(
        o,
        format!("connect-error {}", libc::EACCES),
        "by the file mode"
    );

    // The file mode is one layer; the peer check at accept is the other.
    std::fs::set_permissions(&d.sock, std::fs::Permissions::from_mode(0o666)).unwrap();
    let o = run_peer_as_nobody(&d.sock);
    assert!(o.starts_with("closed"), "uid {NOBODY} was served: {o}");

    d.attach_igcd(Duration::from_secs(15));
    let log = d.devhost_log();
    let report = d.finish();
    assert_eq!(report["resets"], 0, "a DEVICE_RESET reached the model");
    assert_eq!(report["peers_refused"], 1, "{report}");
    assert!(
        log.contains(&format!("uid {NOBODY} gid {NOBODY}")) && log.contains("closed unserved"),
        "the refusal is logged:\n{log}"
    );
}

/// `--allow-uid` gives that uid the socket file and admits it.
#[test]
fn allow_uid_admits_that_uid() {
    require_root("allow_uid_admits_that_uid");
    let mut d = Devhost::start("devhost-allow", true, &["--allow-uid", "65534"]);
    let m = std::fs::symlink_metadata(&d.sock).unwrap();
    assert_eq!((m.mode() & 0o777, m.uid()), (0o600, NOBODY));
    let o = run_peer_as_nobody(&d.sock);
    assert_eq!(o, "answered 0");
    let report = d.finish();
    assert_eq!(report["resets"], 1, "{report}");
    assert_eq!(report["peers_refused"], 0, "{report}");
}

/// A peer (root, so admitted) that connects and says nothing holds the one-client service
/// only until the set-up bound: igcd, queued behind it, attaches.
#[test]
fn a_silent_peer_does_not_keep_igcd_out() {
    require_root("a_silent_peer_does_not_keep_igcd_out");
    let mut d = Devhost::start("devhost-silent", false, &[]);
    let silent = UnixStream::connect(&d.sock).unwrap();
    // Let the device host take the silent peer as its client before igcd queues up.
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    d.attach_igcd(Duration::from_secs(15));
    let took = t0.elapsed();
    drop(silent);
    let log = d.devhost_log();
    let report = d.finish();
    assert!(
        log.contains("gone (no set-up within 2s"),
        "the silent peer was dropped at its bound:\n{log}"
    );
    assert_eq!(report["client_timeouts"], 1, "{report}");
    assert!(took < Duration::from_secs(15), "igcd took {took:?}");
}

/// Hands the device host `ram` as guest RAM (`size` bytes declared); `shrink` then truncates
/// it, as a hostile driver would once it is mapped; then points a TX ring at its second page
/// and kicks the model's DMA there. Returns whether the connection was still
/// served after SYNC_SYSMEM.
fn hostile_sysmem(d: &Devhost, ram: &OwnedFd, size: u64, shrink: bool) -> bool {
    let gpa = 0x1_0000_0000;
    let mut p = Peer::connect(&d.sock).unwrap();
    p.set_up().unwrap();
    let region = RamRegion {
        gpa,
        size,
        offset: 0,
    };
    let sysmem = proto::encode_sysmem(&[region]);
    p.call(cmd::SYNC_SYSMEM, &sysmem, &[ram.as_fd()], false)
        .unwrap();
    // A round trip: SYNC_SYSMEM has no reply; once this is answered it has been applied.
    let served = p
        .call(cmd::PCI_CFGREAD, &proto::encode_cfg(0, 0, 2), &[], true)
        .is_ok();
    if shrink {
        // Safety: ftruncate on a descriptor we own.
        assert_eq!(unsafe { libc::ftruncate(ram.as_raw_fd(), 0) }, 0);
    }
    let _ = p.kick_tx_dma(gpa + 4096);
    std::thread::sleep(Duration::from_millis(300));
    served
}

/// A short memfd (declared larger than the file) and an unsealed one (shrunk after the
/// hand-over) are refused at SYNC_SYSMEM with the typed error: the model's DMA never touches
/// them, the NIC process lives and root's igcd attaches afterwards.
#[test]
fn short_and_unsealed_memfds_are_refused_and_the_nic_lives() {
    require_root("short_and_unsealed_memfds_are_refused_and_the_nic_lives");
    let mut d = Devhost::start("devhost-memfd", false, &[]);
    let sealed = libc::F_SEAL_SHRINK | libc::F_SEAL_GROW | libc::F_SEAL_SEAL;
    let short = memfd(4096, sealed);
    let served_short = hostile_sysmem(&d, &short, 8192, false);
    if let Some(how) = d.running() {
        panic!("a short memfd killed the NIC process ({how})\n{}", d.logs());
    }
    let unsealed = memfd(8192, 0);
    let served_unsealed = hostile_sysmem(&d, &unsealed, 8192, true);
    if let Some(how) = d.running() {
        panic!(
            "a shrunk memfd killed the NIC process ({how})\n{}",
            d.logs()
        );
    }
    assert!(
        !served_short && !served_unsealed,
        "a client with bad guest RAM was still served (short: {served_short}, unsealed: \
         {served_unsealed})"
    );
    d.attach_igcd(Duration::from_secs(15));
    let log = d.devhost_log();
    let report = d.finish();
    assert_eq!(report["ram_refused"], 2, "{report}");
    assert!(
        log.contains("refused: file of 4096 bytes, the region ends at byte 8192"),
        "{log}"
    );
    assert!(log.contains("lack F_SEAL_SHRINK|F_SEAL_GROW"), "{log}");
}
