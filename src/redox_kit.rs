//! Redox guests for tests: the Redox test kit (`../shared/redox-kit`, a fixture outside this
//! repository; see its README) links our daemons for `x86_64-unknown-redox`, stages an initfs
//! image and boots it under QEMU (TCG, q35, one vCPU, as the kit's `run-qemu`).
//!
//! [`Kit::find`] checks every prerequisite and names the command that installs a missing one;
//! [`build`] builds the programs, [`make_image`] the image, and [`RedoxVm`] boots it — with,
//! optionally, our NIC model served over `x-pci-proxy-dev` (`ptplab devhost`, as for the Linux
//! guests), so pcid enumerates it and pcid-spawner starts igcd on it (issue 27).

use std::ffi::OsString;
use std::io::Read;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::vm::{inherit_and_tie, socketpair};

/// The Redox target.
pub const TARGET: &str = "x86_64-unknown-redox";
/// A cold Redox build of the workspace's daemons takes about 1.5 min on 2 cores.
pub const BUILD_BOUND: Duration = Duration::from_secs(1200);
const MKIMAGE_BOUND: Duration = Duration::from_secs(180);

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The kit and the tools it needs.
#[derive(Debug, Clone)]
pub struct Kit {
    /// The kit's directory.
    pub dir: PathBuf,
    /// `redoxfs-ar` (from crates.io's redoxfs).
    pub redoxfs_ar: PathBuf,
}

/// `cmd ARGS` runs and exits 0.
fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

impl Kit {
    /// Every prerequisite, or the first missing one with the command that installs it.
    pub fn find() -> Result<Kit, String> {
        let dir = std::env::var_os("REDOX_KIT")
            .map(PathBuf::from)
            .unwrap_or_else(|| workspace().join("../shared/redox-kit"));
        for f in ["mkimage", "redox-link", "boot/kernel", "sysroot/lib/libc.a"] {
            if !dir.join(f).exists() {
                return Err(format!(
                    "the Redox kit is missing ({} not found): put it at ../shared/redox-kit or \
                     set REDOX_KIT=/path/to/redox-kit",
                    dir.join(f).display()
                ));
            }
        }
        if !runs("ld.lld", &["--version"]) {
            return Err("ld.lld is missing: apt-get install -y lld".into());
        }
        let gcc = Path::new("/usr/lib/gcc/x86_64-linux-gnu");
        let libgcc_eh = std::fs::read_dir(gcc)
            .into_iter()
            .flatten()
            .flatten()
            .any(|d| d.path().join("libgcc_eh.a").exists());
        if !libgcc_eh {
            return Err("libgcc_eh.a is missing: apt-get install -y libgcc-12-dev".into());
        }
        let home_ar =
            std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/redoxfs-ar"));
        let redoxfs_ar = match (runs("redoxfs-ar", &["--help"]), home_ar) {
            (true, _) => PathBuf::from("redoxfs-ar"),
            (false, Some(p)) if p.exists() => p,
            _ => {
                return Err(
                    "redoxfs-ar is missing: apt-get install -y pkg-config libfuse3-dev \
                            && cargo install redoxfs --version 0.8.0 --locked"
                        .into(),
                );
            }
        };
        if !runs("qemu-system-x86_64", &["--version"]) {
            return Err("qemu-system-x86_64 is missing: apt-get install -y qemu-system-x86".into());
        }
        let sysroot = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
            .args(["--print", "sysroot"])
            .output()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
            .unwrap_or_default();
        if !Path::new(&sysroot)
            .join("lib/rustlib")
            .join(TARGET)
            .exists()
        {
            return Err(format!(
                "the {TARGET} standard library is missing: rustup target add {TARGET}"
            ));
        }
        Ok(Kit { dir, redoxfs_ar })
    }

    /// The kit, or None when `test` is skipped for lack of it — a failure (panic) under
    /// `REDOX_PTP_REQUIRE_REDOX=1` (CI).
    pub fn or_skip(test: &str) -> Option<Kit> {
        match Kit::find() {
            Ok(k) => Some(k),
            Err(missing) if std::env::var("REDOX_PTP_REQUIRE_REDOX").as_deref() == Ok("1") => {
                panic!("REDOX_PTP_REQUIRE_REDOX=1 and {missing}")
            }
            Err(missing) => {
                eprintln!("{test}: SKIPPED: {missing}");
                None
            }
        }
    }
}

/// Runs `cmd` to its end within `bound` (killed after it): its combined output, or why not.
pub fn run_bounded(cmd: &mut Command, bound: Duration, what: &str) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let drain = |r: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| format!("{what}: {e}"))? {
            break Some(st);
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    match status {
        Some(st) if st.success() => Ok(text),
        Some(st) => Err(format!("{what} failed ({st}):\n{text}")),
        None => Err(format!(
            "{what} did not finish within {bound:?} (killed):\n{text}"
        )),
    }
}

/// The workspace's programs every Redox test boots (one set, so the tests share one build).
pub const PACKAGES: [&str; 5] = ["igcd", "ptpd", "ptpctl", "igbd", "ptp-redox-check"];

/// Builds [`PACKAGES`] for Redox in `target_dir` (never the outer cargo's: its lock is held
/// while tests run) and returns the directory holding the executables.
pub fn build(kit: &Kit, target_dir: &Path) -> Result<PathBuf, String> {
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace())
        .args(["build", "--release", "--locked", "--target", TARGET]);
    for p in PACKAGES {
        cmd.args(["-p", p]);
    }
    cmd.env("CARGO_TARGET_DIR", target_dir)
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_REDOX_LINKER",
            kit.dir.join("redox-link"),
        )
        .env("RUSTC_BOOTSTRAP", "1");
    run_bounded(&mut cmd, BUILD_BOUND, "the Redox build")?;
    Ok(target_dir.join(TARGET).join("release"))
}

/// Copies `(built name, name in the image)` from `release` into `dir` (made afresh).
pub fn stage_bins(release: &Path, dir: &Path, names: &[(&str, &str)]) -> Result<(), String> {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    for (from, to) in names {
        std::fs::copy(release.join(from), dir.join(to))
            .map_err(|e| format!("staging {from}: {e}"))?;
    }
    Ok(())
}

/// A shipped unit or config with its paths pointed at the initfs (comments untouched): the
/// kit's image has only the initfs, so `/usr/bin/` is `/scheme/initfs/bin/` and `/etc/` is
/// `/scheme/initfs/etc/`.
pub fn initfs_paths(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with('#') {
                l.to_string()
            } else {
                l.replace("/etc/", "/scheme/initfs/etc/")
                    .replace("/usr/bin/", "/scheme/initfs/bin/")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The kit's `mkimage`: its daemons and base units, `bins`, `units` (over the kit's); with
/// `with_pci`, pcid, pcid-spawner, smolnetd and e1000d too.
pub fn make_image(
    kit: &Kit,
    bins: &Path,
    units: &Path,
    img: &Path,
    with_pci: bool,
) -> Result<(), String> {
    let mut mk = Command::new(kit.dir.join("mkimage"));
    mk.args([
        "-o".as_ref(),
        img.as_os_str(),
        "-b".as_ref(),
        bins.as_os_str(),
    ])
    .args(["-u".as_ref(), units.as_os_str()])
    .env("REDOXFS_AR", &kit.redoxfs_ar);
    if with_pci {
        mk.arg("--with-pci");
    }
    run_bounded(&mut mk, MKIMAGE_BOUND, "mkimage").map(drop)
}

/// Sends Enter to the bootloader's video-mode menu through QEMU's monitor (as run-qemu does).
fn sendkey(mon: &Path) {
    use std::io::Write;
    if let Ok(mut s) = std::os::unix::net::UnixStream::connect(mon) {
        let _ = s.write_all(b"sendkey ret\n");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// A NIC model for the guest: `ptplab devhost` on one end of a socketpair, QEMU's
/// `x-pci-proxy-dev` on the other (shared/reference/qemu-proxy.md).
#[derive(Debug, Clone)]
pub struct ProxyNic {
    /// The device host command: program and leading arguments (`[ptplab, "devhost"]`).
    pub devhost: Vec<OsString>,
    /// The model's options (`--wire`, `--truth`, `--seed`, ...).
    pub args: Vec<OsString>,
    /// The PCI slot on the guest's root bus (`addr=` of the device): the function is
    /// `0000:00:<slot>.0`, so igcd's scheme names hold `pci-0000-00-<slot>.0`.
    pub slot: u8,
}

/// A booted (or booting) Redox guest; stopped on drop.
pub struct RedoxVm {
    qemu: Child,
    devhost: Option<Child>,
    /// The serial console's file.
    pub serial: PathBuf,
    mon: PathBuf,
    started: Instant,
    keys: u32,
    /// The device host's JSON report (written when it stops).
    pub report: Option<PathBuf>,
}

impl RedoxVm {
    /// Boots `img`, the serial console to `dir/serial.log`, QEMU's and the device host's logs
    /// beside it; with `nic`, its model served as a PCI function of the guest.
    pub fn boot(img: &Path, dir: &Path, nic: Option<&ProxyNic>) -> Result<RedoxVm, String> {
        std::fs::create_dir_all(dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let serial = dir.join("serial.log");
        let mon = dir.join("qemu.mon");
        let _ = std::fs::remove_file(&mon);
        std::fs::write(&serial, b"").map_err(|e| format!("{}: {e}", serial.display()))?;
        let log =
            |name: &str| std::fs::File::create(dir.join(name)).map_err(|e| format!("{name}: {e}"));
        let mut qemu = Command::new("qemu-system-x86_64");
        qemu.args(["-accel", "tcg", "-smp", "1", "-m", "1024"])
            .args(["-display", "none", "-no-reboot", "-net", "none"])
            .arg("-serial")
            .arg(format!("file:{}", serial.display()))
            .arg("-monitor")
            .arg(format!("unix:{},server,nowait", mon.display()))
            .arg("-drive")
            .arg(format!("file={},format=raw,snapshot=on", img.display()))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(log("qemu.log")?);
        let (mut devhost, mut report, mut qemu_end) = (None, None, None);
        match nic {
            None => {
                qemu.args(["-machine", "q35"]);
            }
            Some(nic) => {
                let (dev_end, q_end) = socketpair().map_err(|e| format!("socketpair: {e}"))?;
                let rep = dir.join("devhost.json");
                let mut d = Command::new(&nic.devhost[0]);
                d.args(&nic.devhost[1..])
                    .arg("--socket-fd")
                    .arg(dev_end.as_raw_fd().to_string())
                    .arg("--report")
                    .arg(&rep)
                    .args(&nic.args)
                    .stdin(Stdio::null())
                    .stdout(log("devhost.log")?)
                    .stderr(log("devhost.log")?);
                inherit_and_tie(&mut d, dev_end.as_raw_fd());
                devhost = Some(d.spawn().map_err(|e| format!("devhost: {e}"))?);
                report = Some(rep);
                // The model maps guest RAM for DMA: a shared memfd backend.
                qemu.args(["-object", "memory-backend-memfd,id=mem,size=1024M,share=on"])
                    .args(["-machine", "q35,memory-backend=mem"])
                    .arg("-device")
                    .arg(format!(
                        "x-pci-proxy-dev,id=nic0,fd={},addr={:#x}",
                        q_end.as_raw_fd(),
                        nic.slot
                    ));
                inherit_and_tie(&mut qemu, q_end.as_raw_fd());
                qemu_end = Some(q_end);
            }
        }
        let spawned = qemu.spawn();
        drop(qemu_end);
        let qemu = match spawned {
            Ok(q) => q,
            Err(e) => {
                if let Some(mut d) = devhost {
                    let _ = d.kill();
                    let _ = d.wait();
                }
                return Err(format!("qemu-system-x86_64: {e}"));
            }
        };
        Ok(RedoxVm {
            qemu,
            devhost,
            serial,
            mon,
            started: Instant::now(),
            keys: 0,
            report,
        })
    }

    /// The serial console so far (lossy UTF-8, ANSI colours left in).
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&std::fs::read(&self.serial).unwrap_or_default()).into_owned()
    }

    /// Time since QEMU started.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Answers the bootloader's menu until the kernel prints (every 3 s from 4 s, 12 times
    /// at most); call it every few hundred ms while waiting.
    pub fn tend(&mut self, text: &str) {
        let kernel_up = text.contains("Redox OS starting") || text.contains("init:");
        let due = Duration::from_secs(4 + 3 * u64::from(self.keys));
        if !kernel_up && self.keys < 12 && self.started.elapsed() >= due {
            sendkey(&self.mon);
            self.keys += 1;
        }
    }

    /// Why the guest cannot go on, if it cannot: QEMU or the device host exited.
    pub fn gone(&mut self) -> Option<String> {
        if let Ok(Some(st)) = self.qemu.try_wait() {
            return Some(format!("QEMU exited ({st})"));
        }
        if let Some(d) = self.devhost.as_mut()
            && let Ok(Some(st)) = d.try_wait()
        {
            return Some(format!("the device host exited ({st})"));
        }
        None
    }

    /// Waits until `done(serial text)` holds, tending the bootloader; Err on timeout, a
    /// silent console for `stall`, or an exit.
    pub fn wait_for(
        &mut self,
        what: &str,
        done: impl Fn(&str) -> bool,
        bound: Duration,
        stall: Duration,
    ) -> Result<String, String> {
        let t0 = Instant::now();
        let (mut seen, mut changed) = (usize::MAX, Instant::now());
        loop {
            let text = self.text();
            if done(&text) {
                return Ok(text);
            }
            self.tend(&text);
            if let Some(why) = self.gone() {
                return Err(format!("{what}: not seen before {why}"));
            }
            if text.len() != seen {
                (seen, changed) = (text.len(), Instant::now());
            }
            if changed.elapsed() > stall {
                return Err(format!("{what}: the console was silent for {stall:?}"));
            }
            if t0.elapsed() > bound {
                return Err(format!("{what}: not seen within {bound:?}"));
            }
            std::thread::sleep(Duration::from_millis(300));
        }
    }

    /// Stops QEMU, then the device host (SIGTERM: it writes its report), bounded.
    pub fn stop(&mut self) {
        let _ = self.qemu.kill();
        let _ = self.qemu.wait();
        if let Some(mut d) = self.devhost.take() {
            // Safety: kill(2) on our unreaped child's pid, which cannot have been reused.
            unsafe {
                libc::kill(d.id() as i32, libc::SIGTERM);
            }
            let deadline = Instant::now() + Duration::from_secs(5);
            while Instant::now() < deadline && matches!(d.try_wait(), Ok(None)) {
                std::thread::sleep(Duration::from_millis(20));
            }
            let _ = d.kill();
            let _ = d.wait();
        }
        let _ = std::fs::remove_file(&self.mon);
    }
}

impl Drop for RedoxVm {
    fn drop(&mut self) {
        self.stop();
    }
}

/// The serial text without ANSI colour sequences (the base daemons colour their logs).
pub fn strip_ansi(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' && chars.peek() == Some(&'[') {
            chars.next();
            for d in chars.by_ref() {
                if d.is_ascii_alphabetic() {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shipped_paths_point_at_the_initfs_and_comments_stay() {
        let t = initfs_paths("# /usr/bin/x\ncmd = \"/usr/bin/ptpd\"\nargs = [\"/etc/ptpd.toml\"]");
        assert_eq!(
            t,
            "# /usr/bin/x\ncmd = \"/scheme/initfs/bin/ptpd\"\nargs = [\"/scheme/initfs/etc/ptpd.toml\"]\n"
        );
    }

    #[test]
    fn colours_are_stripped() {
        assert_eq!(
            strip_ansi("\u{1b}[1;32mINFO\u{1b}[0m pcid: x"),
            "INFO pcid: x"
        );
        assert_eq!(strip_ansi("plain \u{1b}"), "plain \u{1b}");
    }
}
