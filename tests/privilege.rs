//! Privilege on every channel (issue 11), with real processes: who may drive a NIC through
//! igcd's driver channel, who may change a clock through ptpd, and that nobody who connects and
//! then stays silent can block either daemon.
//!
//! Switching uid needs root. CI runs as root; elsewhere these tests fail rather than pass
//! without having checked anything.

mod common;

use std::ffi::CString;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::{Host, TempDir, exe};
use ptp_emu::truth::TruthReader;
use ptp_ipc::transport::{Channel, SeqpacketConn, TransportError};
use ptp_ipc::{CloseReason, DriverEvent, DriverRequest, DriverToPtpd, PtpdToDriver};
use redox_ptp::lab::{self, HostPaths};

const NOBODY: u32 = 65534;

fn require_root(test: &str) {
    // Safety: geteuid has no preconditions.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(
        euid, 0,
        "needs root (runs processes as uid {NOBODY}); run the tests as root, or skip this one \
         with `-- --skip {test}`"
    );
}

/// Lets every user reach `p` (directories from `p` up to the temporary directory get 0755).
fn open_path_to(p: &Path) {
    let mut p = p.to_path_buf();
    while let Some(parent) = p.parent() {
        if parent == std::env::temp_dir() {
            break;
        }
        std::fs::set_permissions(parent, std::fs::Permissions::from_mode(0o755)).unwrap();
        p = parent.to_path_buf();
    }
}

/// `ptplab ptpctl --socket SOCKET --json ARGS` run as `uid`.
fn ptpctl_as(uid: u32, socket: &Path, args: &[&str]) -> Output {
    Command::new(exe())
        .arg("ptpctl")
        .arg("--socket")
        .arg(socket)
        .arg("--json")
        .args(args)
        .uid(uid)
        .gid(uid)
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The PHC's law generation (how many times its law changed: set, step, frequency) and its time
/// now, exactly, from the emulated NIC's ground-truth record.
fn phc_truth(h: &Host) -> (u64, u64) {
    let t = TruthReader::open(&h.paths.truth).unwrap();
    (t.snapshot().unwrap().generation, t.now().unwrap().0)
}

/// Asserts the PHC still reads the host's wall clock (the emulated PHC starts there and only a
/// set or step moves it away): a set to 1 234 567 s would be off by decades.
fn assert_phc_not_set(h: &Host) {
    let (_, phc) = phc_truth(h);
    let off = phc as i128 - ptp_ipc::time::realtime_ns() as i128;
    assert!(
        off.abs() < 60_000_000_000,
        "PHC is {off} ns off the wall clock: it was set\n{}",
        h.logs()
    );
}

/// One syscall to try as `nobody`, prepared before the fork (the child may not allocate).
enum Try {
    Open(CString, libc::c_int),
    Connect(libc::sockaddr_un, libc::socklen_t),
}

fn sockaddr(p: &Path) -> (libc::sockaddr_un, libc::socklen_t) {
    use std::os::unix::ffi::OsStrExt;
    // Safety: all-zero bytes are a valid sockaddr_un.
    let mut a: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    a.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let b = p.as_os_str().as_bytes();
    assert!(b.len() < a.sun_path.len());
    for (d, &s) in a.sun_path.iter_mut().zip(b) {
        *d = s as libc::c_char;
    }
    let len = std::mem::offset_of!(libc::sockaddr_un, sun_path) + b.len() + 1;
    (a, len as libc::socklen_t)
}

/// Runs `what` in a child as uid/gid `nobody` (no supplementary groups), `count` times, and, if
/// every attempt succeeded, execs `program` with the descriptors still open. The errno of the
/// first failure comes back as the spawn's error.
fn as_nobody(what: Try, count: usize, program: &str) -> std::io::Result<Child> {
    let mut cmd = Command::new(program);
    cmd.uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .stdout(Stdio::null());
    if program == "sleep" {
        cmd.arg("30");
    }
    // Safety: the closure runs in the forked child after the uid switch and before exec; it
    // makes only async-signal-safe syscalls (open, socket, connect) on data prepared before
    // the fork, and allocates nothing.
    unsafe {
        cmd.pre_exec(move || {
            for _ in 0..count {
                let rc = match &what {
                    Try::Open(path, flags) => libc::open(path.as_ptr(), *flags),
                    Try::Connect(addr, len) => {
                        // No CLOEXEC: the connection outlives exec, held by `program`.
                        let fd = libc::socket(libc::AF_UNIX, libc::SOCK_SEQPACKET, 0);
                        if fd < 0 {
                            fd
                        } else {
                            libc::connect(fd, (addr as *const libc::sockaddr_un).cast(), *len)
                        }
                    }
                };
                if rc < 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            Ok(())
        });
    }
    cmd.spawn()
}

/// The errno `what` fails with as `nobody`, or `None` if it succeeds.
fn errno_as_nobody(what: Try) -> Option<i32> {
    match as_nobody(what, 1, "true") {
        Ok(mut c) => {
            c.wait().unwrap();
            None
        }
        Err(e) => Some(e.raw_os_error().expect("an errno")),
    }
}

/// A ptpd of uid `nobody`'s own, its clock pointed at `channel`, listing `nobody` among its
/// privileged uids: the attack of issue 11.
fn start_rogue_ptpd(h: &mut Host, channel: &Path) -> PathBuf {
    let dir = h.dir.0.join("rogue");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let socket = dir.join("ptp.sock");
    let config = dir.join("ptpd.toml");
    std::fs::write(
        &config,
        format!(
            "socket = {:?}\nprivileged_uids = [{NOBODY}]\n[[clock]]\nname = \"stolen\"\n\
             channel = {:?}\n",
            socket.display().to_string(),
            channel.display().to_string()
        ),
    )
    .unwrap();
    let log = std::fs::File::create(dir.join("ptpd.log")).unwrap();
    let mut cmd = Command::new(exe());
    cmd.arg("ptpd")
        .arg("-f")
        .arg(&config)
        .uid(NOBODY)
        .gid(NOBODY)
        .stdin(Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log);
    h.kids.spawn("rogue/ptpd", cmd).unwrap();
    socket
}

/// Runs `ptpctl set 1234567` through the rogue ptpd until its driver link has tried igcd and
/// reports why it has no driver; asserts that no attempt succeeded and returns the last reply.
fn rogue_set_until_settled(h: &Host, socket: &Path) -> String {
    let t = Instant::now();
    loop {
        let out = ptpctl_as(NOBODY, socket, &["set", "1234567"]);
        let text = stdout(&out);
        assert!(
            !out.status.success(),
            "the rogue ptpd set the NIC's clock: {text}\n{}",
            h.logs()
        );
        if text.contains("\"code\":\"PermissionDenied\"") || t.elapsed() > Duration::from_secs(10) {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn unprivileged_ptpd_pointed_at_igcd_is_refused_and_the_phc_does_not_move() {
    require_root("unprivileged_ptpd_pointed_at_igcd_is_refused_and_the_phc_does_not_move");
    let mut h = Host::start("rogue", 0.0, "");
    open_path_to(&h.paths.channel);
    let gen0 = phc_truth(&h).0;
    let channel = h.paths.channel.clone();
    let socket = start_rogue_ptpd(&mut h, &channel);

    // Layer 1, the socket file: mode 0600, so the connect itself fails (EACCES).
    let text = rogue_set_until_settled(&h, &socket);
    assert!(text.contains("\"code\":\"PermissionDenied\""), "{text}");
    // Layer 2, the peer's credentials: with the file opened up (a misconfiguration), igcd
    // still refuses uid 65534 at accept and says so.
    std::fs::set_permissions(&channel, std::fs::Permissions::from_mode(0o666)).unwrap();
    let igcd_log = h.paths.dir.join("igcd.log");
    let t = Instant::now();
    while !std::fs::read_to_string(&igcd_log)
        .unwrap()
        .contains("refused pid")
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "igcd never refused the rogue ptpd\n{}",
            h.logs()
        );
        let out = ptpctl_as(NOBODY, &socket, &["set", "1234567"]);
        assert!(!out.status.success(), "{}", stdout(&out));
        std::thread::sleep(Duration::from_millis(100));
    }
    let text = rogue_set_until_settled(&h, &socket);
    assert!(text.contains("\"code\":\"PermissionDenied\""), "{text}");
    let status = stdout(&ptpctl_as(NOBODY, &socket, &["status"]));
    assert!(status.contains("\"driver_up\":false"), "{status}");
    let rogue_log = std::fs::read_to_string(h.dir.0.join("rogue/ptpd.log")).unwrap();
    assert!(rogue_log.contains("refuses this process"), "{rogue_log}");

    // The PHC did not move: no law change at all, and it still reads the wall clock.
    assert_eq!(phc_truth(&h).0, gen0, "the PHC's law changed\n{}", h.logs());
    assert_phc_not_set(&h);
    // The real ptpd kept its connection throughout, and can still set the clock: the check
    // above would have seen a change.
    let c = h.client();
    let st = c.status(0).unwrap();
    assert!(st.driver_up && st.connects == 1, "{st:?}\n{}", h.logs());
    c.adj(0, 1_000_000).unwrap();
    assert!(phc_truth(&h).0 > gen0, "an allowed step left no trace");
}

#[test]
fn allow_uid_lets_that_uid_drive_the_nic() {
    require_root("allow_uid_lets_that_uid_drive_the_nic");
    let dir = TempDir::new("allowuid");
    let paths = HostPaths::new(&dir.0, 0);
    let mut kids = redox_ptp::procs::Children::default();
    let extra = ["--allow-uid".to_string(), NOBODY.to_string()];
    lab::spawn_igcd(&mut kids, &exe(), &paths, 0, "i225", 0.0, &extra).unwrap();
    let t = Instant::now();
    while !paths.channel.exists() {
        assert!(t.elapsed() < Duration::from_secs(10), "no channel");
        std::thread::sleep(Duration::from_millis(10));
    }
    // The socket file belongs to the allowed uid, mode 0600.
    let m = std::fs::symlink_metadata(&paths.channel).unwrap();
    assert_eq!((m.uid(), m.mode() & 0o7777), (NOBODY, 0o600));
    open_path_to(&paths.channel);
    let mut h = Host {
        kids,
        paths,
        osc_ppm: 0.0,
        dir,
    };
    let channel = h.paths.channel.clone();
    let socket = start_rogue_ptpd(&mut h, &channel);
    let t = Instant::now();
    loop {
        let out = ptpctl_as(NOBODY, &socket, &["adj", "1000000"]);
        if out.status.success() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "the allowed uid's ptpd never got the driver: {}\n{}",
            stdout(&out),
            h.logs()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn unprivileged_client_of_ptpd_may_read_but_not_change_the_clock() {
    require_root("unprivileged_client_of_ptpd_may_read_but_not_change_the_clock");
    let h = Host::start("eperm2", 0.0, "privileged_uids = [4242]");
    open_path_to(h.socket());
    let gen0 = phc_truth(&h).0;
    for args in [
        &["set", "1234567"][..],
        &["adj", "1000000000"],
        &["freq", "100000"],
    ] {
        let out = ptpctl_as(NOBODY, h.socket(), args);
        let text = stdout(&out);
        assert!(
            !out.status.success(),
            "{args:?} succeeded as nobody: {text}"
        );
        assert!(
            text.contains("\"code\":\"PermissionDenied\""),
            "{args:?}: {text}"
        );
    }
    assert_eq!(phc_truth(&h).0, gen0, "a refused request changed the PHC");
    // get, gettimex (cmp), caps and status are for everyone.
    for args in [&["get"][..], &["cmp"], &["caps"], &["status"]] {
        let out = ptpctl_as(NOBODY, h.socket(), args);
        assert!(
            out.status.success(),
            "{args:?} as nobody: {}{}",
            stdout(&out),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // A uid listed in privileged_uids may steer.
    let out = ptpctl_as(4242, h.socket(), &["freq", "10"]);
    assert!(
        out.status.success(),
        "freq as privileged uid 4242: {}{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_ne!(
        phc_truth(&h).0,
        gen0,
        "the privileged freq did not change the PHC"
    );
}

#[test]
fn silent_clients_of_ptpd_block_nobody() {
    require_root("silent_clients_of_ptpd_block_nobody");
    let h = Host::start("silent", 0.0, "");
    open_path_to(h.socket());
    // More idle connections from one user than ptpd has places in all; they never read or
    // write, and are held open by a `sleep` of that user.
    let (addr, len) = sockaddr(h.socket());
    let mut idle = as_nobody(Try::Connect(addr, len), 80, "sleep").unwrap();
    let held = Instant::now();
    // Let ptpd accept them all (it refuses those beyond its per-uid bound).
    let t = Instant::now();
    while !std::fs::read_to_string(h.paths.dir.join("ptpd.log"))
        .unwrap()
        .contains("refusing client")
    {
        assert!(
            t.elapsed() < Duration::from_secs(10),
            "ptpd saw no surplus\n{}",
            h.logs()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // Root and another user are served at once, not after the idle clients' timeout.
    let t = Instant::now();
    let c = h.client();
    c.get(0).unwrap();
    let out = ptpctl_as(4242, h.socket(), &["get"]);
    assert!(
        out.status.success(),
        "uid 4242 locked out by idle clients: {}{}\n{}",
        stdout(&out),
        String::from_utf8_lossy(&out.stderr),
        h.logs()
    );
    let served = t.elapsed();
    assert!(
        served < Duration::from_secs(5),
        "served after {served:?} while idle clients were held"
    );
    assert!(
        idle.try_wait().unwrap().is_none(),
        "the idle connections were gone before the check ({:?})",
        held.elapsed()
    );
    let _ = idle.kill();
    let _ = idle.wait();
}

type RawDriverChannel = Channel<SeqpacketConn, PtpdToDriver, DriverToPtpd>;

/// Waits (bounded) for the next message on a raw driver connection that is not a frame event.
fn next_driver_message(c: &RawDriverChannel, within: Duration) -> Option<DriverToPtpd> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match c.recv(Some(left)) {
            Ok(DriverToPtpd::Event(DriverEvent::PtpFrame { .. })) => {}
            Ok(m) => return Some(m),
            Err(e) if e.is_disconnected() => return None,
            Err(e) => panic!("driver channel: {e}"),
        }
    }
}

#[test]
fn silent_or_stale_driver_connections_do_not_keep_ptpd_out() {
    let dir = TempDir::new("stale");
    let paths = HostPaths::new(&dir.0, 0);
    let mut kids = redox_ptp::procs::Children::default();
    lab::spawn_igcd(&mut kids, &exe(), &paths, 0, "i225", 0.0, &[]).unwrap();
    let connect = || {
        let t = Instant::now();
        loop {
            match SeqpacketConn::connect(&paths.channel) {
                Ok(c) => return RawDriverChannel::new(c),
                Err(TransportError::NotFound(_)) if t.elapsed() < Duration::from_secs(10) => {
                    std::thread::sleep(Duration::from_millis(10))
                }
                Err(e) => panic!("{e}"),
            }
        }
    };
    // A peer that connects first and never says hello ...
    let silent = connect();
    let silent_at = Instant::now();
    // ... and a stale ptpd: it says hello, gets igcd's, then never speaks again.
    let stale = connect();
    let hello = PtpdToDriver {
        seq: 1,
        request: DriverRequest::Hello,
    };
    stale.send(&hello, Some(Duration::from_secs(1))).unwrap();
    match next_driver_message(&stale, Duration::from_secs(5)) {
        Some(DriverToPtpd::Event(DriverEvent::Restarted { .. })) => {}
        other => panic!("igcd's hello: {other:?}"),
    }
    // The real ptpd takes the NIC over, and works.
    lab::spawn_ptpd(&mut kids, &exe(), &paths, 0, "").unwrap();
    let mut h = Host {
        kids,
        paths,
        osc_ppm: 0.0,
        dir,
    };
    let c = h.ready();
    c.set(0, 1_700_000_000_000_000_000).unwrap();
    assert!(c.get(0).unwrap() >= 1_700_000_000_000_000_000);
    // The stale connection was told, then closed.
    let mut told = None;
    while let Some(m) = next_driver_message(&stale, Duration::from_secs(5)) {
        if let DriverToPtpd::Event(DriverEvent::Closed { reason }) = m {
            told = Some(reason);
        }
    }
    assert_eq!(told, Some(CloseReason::Replaced), "{}", h.logs());
    // The silent one is closed within the hello timeout (2 s), with the reason.
    let m = next_driver_message(&silent, Duration::from_secs(10));
    let waited = silent_at.elapsed();
    assert_eq!(
        m,
        Some(DriverToPtpd::Event(DriverEvent::Closed {
            reason: CloseReason::NoHello
        }))
    );
    assert!(next_driver_message(&silent, Duration::from_secs(5)).is_none());
    assert!(waited < Duration::from_secs(8), "closed after {waited:?}");
    // ptpd still holds the NIC, on its first connection.
    let st = c.status(0).unwrap();
    assert!(st.driver_up && st.connects == 1, "{st:?}\n{}", h.logs());
    h.kids.stop_all();
}

#[test]
fn channel_socket_is_private_and_the_clock_page_read_only_to_others() {
    require_root("channel_socket_is_private_and_the_clock_page_read_only_to_others");
    let h = Host::start("modes", 0.0, "");
    open_path_to(&h.paths.channel);
    // Safety: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let m = std::fs::symlink_metadata(&h.paths.channel).unwrap();
    assert_eq!(
        (m.mode() & 0o7777, m.uid()),
        (0o600, me),
        "driver channel socket"
    );
    let (addr, len) = sockaddr(&h.paths.channel);
    assert_eq!(
        errno_as_nobody(Try::Connect(addr, len)),
        Some(libc::EACCES),
        "uid {NOBODY} connecting to the driver channel"
    );
    let page = &h.paths.clock_page;
    let m = std::fs::metadata(page).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o644, me), "clock page");
    let cpath = CString::new(page.as_os_str().as_encoded_bytes()).unwrap();
    assert_eq!(
        errno_as_nobody(Try::Open(cpath.clone(), libc::O_WRONLY)),
        Some(libc::EACCES),
        "uid {NOBODY} opening the clock page for writing"
    );
    assert_eq!(
        errno_as_nobody(Try::Open(cpath.clone(), libc::O_RDWR)),
        Some(libc::EACCES)
    );
    assert_eq!(
        errno_as_nobody(Try::Open(cpath, libc::O_RDONLY)),
        None,
        "readers must be able to map it"
    );
}

/// Issue 23's flock attack: uid 65534 may read the clock page (0644), so it may also flock it,
/// and while the one-writer lock was a flock on the page, `flock -x PAGE` held by uid 65534 made
/// a restarted igcd exit ("clock page in use by another writer"). The lock is on `<page>.lock`
/// (0600) now: igcd restarts, ptpd gets its driver back, the page is still igcd's.
#[test]
fn unprivileged_flock_on_the_clock_page_does_not_keep_igcd_from_restarting() {
    require_root("unprivileged_flock_on_the_clock_page_does_not_keep_igcd_from_restarting");
    use std::os::fd::AsRawFd;
    let mut h = Host::start("flock", 0.0, "");
    let page = h.paths.clock_page.clone();
    open_path_to(&page);
    let client = h.ready();
    let before = client.status(0).unwrap().connects;
    // As in the issue: `flock -x PAGE sleep` (blocking: under the old lock it waits for the
    // running igcd to die), then igcd is killed and restarted.
    let mut holder = Command::new("flock")
        // --no-fork: the process killed below is the one holding the lock.
        .args(["--exclusive", "--no-fork"])
        .arg(&page)
        .args(["sleep", "60"])
        .uid(NOBODY)
        .gid(NOBODY)
        .spawn()
        .unwrap();
    h.kill_igcd();
    // With igcd gone, only uid 65534 can hold a flock on the page: wait (bounded) until another
    // descriptor's LOCK_EX|LOCK_NB fails.
    let probe = std::fs::File::open(&page).unwrap();
    let t0 = Instant::now();
    loop {
        // Safety: flock on a descriptor we own; no memory is passed.
        if unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) } != 0 {
            break;
        }
        // Safety: as above.
        unsafe { libc::flock(probe.as_raw_fd(), libc::LOCK_UN) };
        if let Some(st) = holder.try_wait().unwrap() {
            panic!("uid {NOBODY}'s flock on the page ended: {st}");
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "no flock on the page"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(probe);
    h.start_igcd();
    // Back once ptpd has its driver on a new connection, from the restarted igcd.
    let t0 = Instant::now();
    let outcome = loop {
        if let Some((_, st)) = h.kids.exited().into_iter().find(|(n, _)| n == "host0/igcd") {
            break Err(format!("the restarted igcd exited: {st}"));
        }
        if let Ok(st) = client.status(0)
            && st.driver_up
            && st.connects > before
        {
            break Ok(());
        }
        if t0.elapsed() > Duration::from_secs(15) {
            break Err("ptpd has no driver 15 s after igcd's restart".to_string());
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let logs = h.logs();
    let _ = holder.kill();
    let _ = holder.wait();
    outcome.unwrap_or_else(|e| panic!("under uid {NOBODY}'s flock on the page: {e}\n{logs}"));
    assert!(!logs.contains("in use"), "{logs}");
    // Safety: geteuid has no preconditions.
    let me = unsafe { libc::geteuid() };
    let m = std::fs::metadata(&page).unwrap();
    assert_eq!((m.mode() & 0o7777, m.uid()), (0o644, me), "clock page");
    h.kids.stop_all();
}
