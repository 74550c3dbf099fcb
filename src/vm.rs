//! The VM runner: a Linux guest (the Debian kernel with its own igc driver, busybox, linuxptp)
//! under QEMU/TCG whose NIC is our i225 model, served by `ptplab devhost` over QEMU's
//! `x-pci-proxy-dev` (shared/reference/qemu-proxy.md).
//!
//! [`Vm::boot`] builds (or reuses) the initramfs, starts the device host and QEMU on the two
//! ends of a socketpair, and waits for the guest's `/init` to say it is ready. [`Vm::run`]
//! sends one shell command line over the serial console and returns its output, exit status
//! and the host CLOCK_MONOTONIC instants it was sent and its end was seen — a bracket for
//! comparing what the guest read with the model's ground truth. [`Vm::shutdown`] (or drop)
//! powers the guest off and stops both processes, with bounded waits.
//!
//! Guest kernel options: `irqpoll nolapic_timer nohz=off` make the guest call igc's legacy
//! handler on every 4 ms timer tick, since under TCG nothing delivers the proxy's INTx.
//! `pci=nomsi` ([`PROXY_APPEND`]) keeps the guest off MSI and MSI-X, which the model
//! advertises as the part does but QEMU 7.2's proxy cannot deliver (`ptp_emu::proxy`).

mod initramfs;
pub mod lock;
mod nic;
mod qemu10;
pub mod report;

pub use initramfs::{APT_LINE, GuestSetup, Packages};
pub use nic::{NicVmConfig, dgram_loop, dgram_pair, hub_loop};
pub use qemu10::Qemu10;
pub use report::{assert_report_clean, report_problems};

use std::ffi::OsString;
use std::io::{BufRead, BufReader, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use ptp_ipc::time::mono_ns;

/// The guest kernel command line.
pub const APPEND: &str = "console=ttyS0 irqpoll nolapic_timer nohz=off panic=-1 quiet";

/// Added for a guest whose NIC is served over `x-pci-proxy-dev`: the function advertises MSI
/// and MSI-X, which have no path to the guest there (`ptp_emu::proxy`); with MSI-X enabled
/// Linux igc would wait for messages that never come (and `irqpoll` polls only shared
/// handlers, which MSI-X vectors are not). With `pci=nomsi`, pci_enable_msix_range and
/// pci_enable_msi fail and igc falls back to its shared INTx handler by itself
/// (igc_set_interrupt_capability).
pub const PROXY_APPEND: &str = "pci=nomsi";

/// Why a VM could not be run.
#[derive(Debug, thiserror::Error)]
pub enum VmError {
    /// A package (or a file it provides) is not installed.
    #[error(
        "the VM runner needs packages that are not installed (missing: {missing}); install them with:\n  {apt}"
    )]
    MissingPackages {
        /// What was not found.
        missing: String,
        /// The apt-get line.
        apt: &'static str,
    },
    /// QEMU 10 (for QEMU's own `-device igb`) is not there or does not run.
    #[error(
        "QEMU 10 from bookworm-backports is needed for -device igb: {why}; provision it with:\n  {command}"
    )]
    Qemu10 {
        /// What was wrong.
        why: String,
        /// The shell lines that provision it.
        command: String,
    },
    /// A file operation failed.
    #[error("{path}: {err}")]
    Io {
        /// The file.
        path: String,
        /// The error.
        err: std::io::Error,
    },
    /// The initramfs could not be built.
    #[error("initramfs: {0}")]
    Build(String),
    /// A process could not be started.
    #[error("starting {what}: {err}")]
    Spawn {
        /// Which process.
        what: &'static str,
        /// The error.
        err: std::io::Error,
    },
    /// The guest did not get as far as asked in time.
    #[error("guest: {what} not seen within {secs} s; console tail:\n{tail}")]
    Timeout {
        /// What was awaited.
        what: String,
        /// The wait.
        secs: u64,
        /// The last console lines.
        tail: String,
    },
    /// The device host exited while the guest ran (QEMU carries on without the device).
    #[error("the device host exited ({status}); its log:\n{logs}")]
    DevhostExited {
        /// Its exit status.
        status: String,
        /// The tails of qemu.log and devhost.log.
        logs: String,
    },
    /// QEMU exited early (or its console closed), with the tails of QEMU's and the device
    /// host's logs.
    #[error("qemu exited early; console tail:\n{console}\n{logs}")]
    Exited {
        /// The last console lines.
        console: String,
        /// The last lines of qemu.log and devhost.log.
        logs: String,
    },
}

impl VmError {
    fn io(path: &Path, err: std::io::Error) -> Self {
        Self::Io {
            path: path.display().to_string(),
            err,
        }
    }
}

/// How to boot a VM.
#[derive(Debug, Clone)]
pub struct VmConfig {
    /// The device host command: program and leading arguments (e.g. `[ptplab, "devhost"]`).
    pub devhost: Vec<OsString>,
    /// Arguments for the device host's model (`--wire`, `--truth`, `--link-speed`, ...).
    pub devhost_args: Vec<OsString>,
    /// Where logs, the device host's report and the console transcript go.
    pub run_dir: PathBuf,
    /// Where the initramfs is cached (by package versions).
    pub cache_dir: PathBuf,
    /// Longest wait for the guest's `/init` to be ready.
    pub boot_timeout: Duration,
}

/// One console line with the host CLOCK_MONOTONIC instant it was read.
#[derive(Debug, Clone)]
pub struct ConsoleLine {
    /// When the line was read (ns).
    pub at_ns: u64,
    /// The line without its line ending.
    pub text: String,
}

/// The output of one [`Vm::run`].
#[derive(Debug, Clone)]
pub struct CmdOutput {
    /// Output lines (the guest's `/init` keeps kernel messages off the console meanwhile).
    pub lines: Vec<String>,
    /// Exit status.
    pub rc: i32,
    /// CLOCK_MONOTONIC when the command line was sent (the guest ran it after this).
    pub sent_ns: u64,
    /// CLOCK_MONOTONIC when its end marker was read (the guest finished before this).
    pub done_ns: u64,
}

impl CmdOutput {
    /// All lines joined.
    pub fn text(&self) -> String {
        self.lines.join("\n")
    }
}

#[derive(Default)]
struct Console {
    lines: Mutex<(Vec<ConsoleLine>, bool)>,
    cond: Condvar,
}

/// A running guest.
pub struct Vm {
    qemu: Child,
    /// None for a guest whose NIC is QEMU's own model ([`Vm::boot_qemu_nic`]).
    devhost: Option<Child>,
    stdin: Option<ChildStdin>,
    console: Arc<Console>,
    reader: Option<std::thread::JoinHandle<()>>,
    next_cmd: u64,
    /// Where the logs are.
    pub run_dir: PathBuf,
    /// The device host's JSON report (written when it stops).
    pub report_path: PathBuf,
}

/// A stream socketpair, both ends close-on-exec.
pub(crate) fn socketpair() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // Safety: socketpair writes two descriptors into the live array on success.
    let r = unsafe {
        libc::socketpair(
            libc::AF_UNIX,
            libc::SOCK_STREAM | libc::SOCK_CLOEXEC,
            0,
            fds.as_mut_ptr(),
        )
    };
    if r != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // Safety: both descriptors are fresh and owned by nobody else.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// Makes `cmd`'s child inherit `fd` (clears close-on-exec in the child only) and die with us.
pub(crate) fn inherit_and_tie(cmd: &mut Command, fd: i32) {
    // Safety: the closure runs between fork and exec and only calls async-signal-safe
    // functions (fcntl, prctl, getppid, _exit).
    unsafe {
        cmd.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0
                || libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() == 1 {
                libc::_exit(1);
            }
            Ok(())
        });
    }
}

fn log_file(dir: &Path, name: &str) -> Result<std::fs::File, VmError> {
    let p = dir.join(name);
    std::fs::File::create(&p).map_err(|e| VmError::io(&p, e))
}

impl Vm {
    /// Boots a guest (see the module docs); fails with the apt-get line if packages are missing.
    pub fn boot(cfg: &VmConfig) -> Result<Self, VmError> {
        Self::boot_with(cfg, &GuestSetup::default())
    }

    /// [`Vm::boot`] with `setup`'s binaries in the guest and its kernel command-line words.
    pub fn boot_with(cfg: &VmConfig, setup: &GuestSetup) -> Result<Self, VmError> {
        let pkgs = Packages::find()?;
        let initrd = initramfs::ensure_with(&pkgs, &cfg.cache_dir, setup)?;
        std::fs::create_dir_all(&cfg.run_dir).map_err(|e| VmError::io(&cfg.run_dir, e))?;
        let (dev_end, qemu_end) = socketpair().map_err(|err| VmError::Spawn {
            what: "socketpair",
            err,
        })?;
        let report_path = cfg.run_dir.join("devhost.json");
        let devhost = spawn_devhost(cfg, &dev_end, &report_path)?;
        drop(dev_end);
        let append = [APPEND, PROXY_APPEND]
            .into_iter()
            .chain(setup.append.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let qemu = match spawn_qemu(cfg, &pkgs, &initrd, &qemu_end, &append) {
            Ok(q) => q,
            Err(e) => {
                stop_child(devhost, Duration::from_secs(2));
                return Err(e);
            }
        };
        drop(qemu_end);
        Self::attach(
            qemu,
            Some(devhost),
            &cfg.run_dir,
            report_path,
            cfg.boot_timeout,
        )
    }

    /// Reads the console of a started QEMU and waits for the guest's `/init` to be ready.
    fn attach(
        mut qemu: Child,
        devhost: Option<Child>,
        run_dir: &Path,
        report_path: PathBuf,
        boot_timeout: Duration,
    ) -> Result<Self, VmError> {
        let stdout = qemu.stdout.take();
        let stdin = qemu.stdin.take();
        let console = Arc::new(Console::default());
        let reader = stdout.map(|out| {
            let c = console.clone();
            let transcript = run_dir.join("console.log");
            std::thread::spawn(move || read_console(out, &c, &transcript))
        });
        let mut vm = Self {
            qemu,
            devhost,
            stdin,
            console,
            reader,
            next_cmd: 0,
            run_dir: run_dir.to_path_buf(),
            report_path,
        };
        vm.wait_line(|l| l == "@@READY", 0, boot_timeout, "the guest's /init")?;
        vm.check_devhost()?;
        if let Some(l) = vm
            .console_lines()
            .iter()
            .find(|l| l.text.starts_with("@@INSMOD-FAILED"))
        {
            return Err(VmError::Build(format!("guest: {}", l.text)));
        }
        Ok(vm)
    }

    /// The tails of qemu.log and devhost.log.
    fn log_tails(&self) -> String {
        let tail = |f: &str| {
            let text = std::fs::read_to_string(self.run_dir.join(f)).unwrap_or_default();
            let lines: Vec<&str> = text.lines().rev().take(15).collect();
            let lines: Vec<&str> = lines.into_iter().rev().collect();
            format!("--- {f}\n{}", lines.join("\n"))
        };
        format!("{}\n{}", tail("qemu.log"), tail("devhost.log"))
    }

    /// An early exit, with the tails of the logs.
    fn exited(&self, console: String) -> VmError {
        VmError::Exited {
            console,
            logs: self.log_tails(),
        }
    }

    /// Fails if the device host has exited: the guest would run on without its NIC.
    fn check_devhost(&mut self) -> Result<(), VmError> {
        let Some(devhost) = self.devhost.as_mut() else {
            return Ok(());
        };
        match devhost.try_wait() {
            Ok(None) => Ok(()),
            Ok(Some(status)) => Err(VmError::DevhostExited {
                status: status.to_string(),
                logs: self.log_tails(),
            }),
            Err(e) => Err(VmError::io(Path::new("devhost"), e)),
        }
    }

    /// Process ids of QEMU and the device host (0 without one).
    pub fn pids(&self) -> (u32, u32) {
        (self.qemu.id(), self.devhost.as_ref().map_or(0, Child::id))
    }

    /// Every console line so far.
    pub fn console_lines(&self) -> Vec<ConsoleLine> {
        lock(&self.console.lines).0.clone()
    }

    /// Waits for a line at index ≥ `from` matching `pred`; returns its index.
    fn wait_line(
        &mut self,
        pred: impl Fn(&str) -> bool,
        from: usize,
        timeout: Duration,
        what: &str,
    ) -> Result<usize, VmError> {
        let deadline = Instant::now() + timeout;
        let mut g = lock(&self.console.lines);
        loop {
            if let Some(i) = g.0.iter().skip(from).position(|l| pred(&l.text)) {
                return Ok(from + i);
            }
            let now = Instant::now();
            if now >= deadline || g.1 {
                let tail: Vec<String> =
                    g.0.iter()
                        .rev()
                        .take(30)
                        .rev()
                        .map(|l| l.text.clone())
                        .collect();
                let exited = g.1;
                drop(g);
                if exited {
                    return Err(self.exited(tail.join("\n")));
                }
                return Err(VmError::Timeout {
                    what: what.to_string(),
                    secs: timeout.as_secs(),
                    tail: tail.join("\n"),
                });
            }
            g = self
                .console
                .cond
                .wait_timeout(g, deadline - now)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }

    /// Runs one shell command line in the guest (busybox sh `eval`), waiting at most `timeout`.
    pub fn run(&mut self, cmd: &str, timeout: Duration) -> Result<CmdOutput, VmError> {
        self.check_devhost()?;
        self.next_cmd += 1;
        let n = self.next_cmd;
        let from = lock(&self.console.lines).0.len();
        let sent_ns = mono_ns();
        let line = format!("{}\n", cmd.replace('\n', " "));
        let sent = self
            .stdin
            .as_mut()
            .is_some_and(|s| s.write_all(line.as_bytes()).and_then(|_| s.flush()).is_ok());
        if !sent {
            return Err(self.exited(String::new()));
        }
        let start = format!("@@S {n}");
        let end = format!("@@E {n} ");
        let s = self.wait_line(|l| l == start, from, timeout, &format!("start of {cmd:?}"))?;
        let e = self.wait_line(
            |l| l.starts_with(&end),
            s,
            timeout,
            &format!("end of {cmd:?}"),
        )?;
        let all = self.console_lines();
        let rc = all[e].text[end.len()..].trim().parse().unwrap_or(-1);
        let lines = all[s + 1..e].iter().map(|l| l.text.clone()).collect();
        Ok(CmdOutput {
            lines,
            rc,
            sent_ns,
            done_ns: all[e].at_ns,
        })
    }

    /// Powers the guest off and stops QEMU and the device host (bounded waits); returns the
    /// device host's report if it wrote one.
    pub fn shutdown(mut self) -> Option<serde_json::Value> {
        self.stop();
        let text = std::fs::read_to_string(&self.report_path).ok()?;
        serde_json::from_str(&text).ok()
    }

    fn stop(&mut self) {
        if let Some(mut s) = self.stdin.take() {
            let _ = s.write_all(b"poweroff -f\n");
        }
        // QEMU exits on poweroff (-no-reboot); the device host then sees EOF and writes its
        // report. Either is killed if it overstays.
        wait_or_kill(&mut self.qemu, Duration::from_secs(10));
        if let Some(d) = self.devhost.as_mut() {
            wait_or_kill(d, Duration::from_secs(5));
        }
        if let Some(r) = self.reader.take() {
            let _ = r.join();
        }
    }
}

impl Drop for Vm {
    fn drop(&mut self) {
        self.stop();
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

fn read_console(out: std::process::ChildStdout, c: &Console, transcript: &Path) {
    let mut log = std::fs::File::create(transcript).ok();
    let mut r = BufReader::new(out);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match r.read_until(b'\n', &mut buf) {
            Ok(0) | Err(_) => break,
            Ok(_) => {
                let at_ns = mono_ns();
                let text = String::from_utf8_lossy(&buf)
                    .trim_end_matches(['\r', '\n'])
                    .to_string();
                if let Some(f) = log.as_mut() {
                    let _ = writeln!(f, "{text}");
                }
                lock(&c.lines).0.push(ConsoleLine { at_ns, text });
                c.cond.notify_all();
            }
        }
    }
    lock(&c.lines).1 = true;
    c.cond.notify_all();
}

fn spawn_devhost(cfg: &VmConfig, end: &OwnedFd, report: &Path) -> Result<Child, VmError> {
    let (prog, lead) = cfg
        .devhost
        .split_first()
        .ok_or(VmError::Build("no device host command".into()))?;
    let fd = end.as_raw_fd();
    let log = log_file(&cfg.run_dir, "devhost.log")?;
    let mut cmd = Command::new(prog);
    cmd.args(lead)
        .arg("--socket-fd")
        .arg(fd.to_string())
        .arg("--report")
        .arg(report)
        .args(&cfg.devhost_args)
        .stdin(Stdio::null())
        .stdout(log.try_clone().map_err(|e| VmError::io(&cfg.run_dir, e))?)
        .stderr(log);
    inherit_and_tie(&mut cmd, fd);
    cmd.spawn().map_err(|err| VmError::Spawn {
        what: "devhost",
        err,
    })
}

fn spawn_qemu(
    cfg: &VmConfig,
    pkgs: &Packages,
    initrd: &Path,
    end: &OwnedFd,
    append: &str,
) -> Result<Child, VmError> {
    let fd = end.as_raw_fd();
    let mut cmd = Command::new(&pkgs.qemu);
    cmd.args([
        "-accel",
        "tcg",
        "-smp",
        "1",
        "-m",
        "512",
        "-nodefaults",
        "-no-reboot",
    ])
    .args(["-display", "none", "-monitor", "none", "-serial", "stdio"])
    .args(["-object", "memory-backend-memfd,id=mem,size=512M,share=on"])
    .args(["-machine", "pc,memory-backend=mem"])
    .arg("-kernel")
    .arg(&pkgs.vmlinuz)
    .arg("-initrd")
    .arg(initrd)
    .args(["-append", append])
    .args(["-device", &format!("x-pci-proxy-dev,id=nic0,fd={fd}")])
    .stdin(Stdio::piped())
    .stdout(Stdio::piped())
    .stderr(log_file(&cfg.run_dir, "qemu.log")?);
    inherit_and_tie(&mut cmd, fd);
    cmd.spawn()
        .map_err(|err| VmError::Spawn { what: "qemu", err })
}

/// Waits up to `grace` for `c` to exit, then SIGKILLs and reaps it.
fn wait_or_kill(c: &mut Child, grace: Duration) {
    let deadline = Instant::now() + grace;
    while Instant::now() < deadline {
        if matches!(c.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = c.kill();
    let _ = c.wait();
}

fn stop_child(mut c: Child, grace: Duration) {
    // Safety: kill(2) on our unreaped child's pid, which cannot have been reused.
    unsafe {
        libc::kill(c.id() as i32, libc::SIGTERM);
    }
    wait_or_kill(&mut c, grace);
}

/// A new directory under the temporary directory for a VM test's files, unique to this process
/// and moment.
pub fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redox-ptp-{tag}-{}-{}",
        std::process::id(),
        ptp_ipc::time::mono_ns()
    ));
    std::fs::create_dir_all(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    dir
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn missing_packages_message_names_them_and_the_apt_line() {
        let e = VmError::MissingPackages {
            missing: "linuxptp, /usr/sbin/ptp4l".into(),
            apt: APT_LINE,
        };
        let msg = e.to_string();
        assert!(msg.contains("missing: linuxptp, /usr/sbin/ptp4l"), "{msg}");
        assert!(
            msg.contains("apt-get install -y --no-install-recommends"),
            "{msg}"
        );
        for p in [
            "qemu-system-x86",
            "linux-image-amd64",
            "busybox-static",
            "linuxptp",
            "ethtool",
        ] {
            assert!(APT_LINE.contains(p), "{p}");
        }
    }
}
