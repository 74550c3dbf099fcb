//! Reads the machine's [`State`]: dpkg, apt's sources (where `apt-config` says they are, so
//! `APT_CONFIG` is honoured), the QEMU 10 tree, rustup, the cargo tools and the Redox kit.
//! Read-only and quick (a few short commands; no network).

use std::collections::BTreeSet;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use crate::plan::{APT_GROUPS, CARGO_TOOLS, QEMU10_DEFAULT_ROOT, QEMU10_ROOT_ENV, Rustup, State};

/// The files tests/redox_boot.rs needs from the kit.
const KIT_FILES: [&str; 4] = ["mkimage", "redox-link", "boot/kernel", "sysroot/lib/libc.a"];

/// The state of this machine, for the checkout at `repo`.
pub fn probe(repo: &Path) -> State {
    let (sourcelist, sourceparts) = apt_source_paths();
    let qemu10_root = std::env::var_os(QEMU10_ROOT_ENV)
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(QEMU10_DEFAULT_ROOT));
    State {
        // /proc/self belongs to the effective uid.
        root: std::fs::metadata("/proc/self").is_ok_and(|m| m.uid() == 0),
        installed: installed_packages(),
        qemu_utils: qemu_utils(),
        sources: read_sources(&sourcelist, &sourceparts),
        sourceparts,
        qemu10: qemu10(&qemu10_root),
        qemu10_root,
        rustup: rustup(),
        tools: CARGO_TOOLS
            .iter()
            .filter(|t| has_binary(t.bin))
            .map(|t| t.bin.to_string())
            .collect(),
        kit: kit(repo),
    }
}

/// stdout of a command that succeeded, else None (stderr discarded: absence is the answer).
pub fn stdout_of(cmd: &mut Command) -> Option<String> {
    let out = cmd.stderr(Stdio::null()).output().ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Which of our packages dpkg has fully installed. dpkg-query exits non-zero when one is
/// unknown to it, so its stdout is read regardless.
fn installed_packages() -> BTreeSet<String> {
    let pkgs = APT_GROUPS.iter().flat_map(|g| g.packages.iter());
    let out = Command::new("dpkg-query")
        .args(["-W", "-f=${Package} ${Status}\\n"])
        .args(pkgs)
        .stderr(Stdio::null())
        .output();
    let Ok(out) = out else {
        return BTreeSet::new();
    };
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.ends_with(" install ok installed"))
        .filter_map(|l| l.split_whitespace().next())
        .map(|p| p.split(':').next().unwrap_or(p).to_string())
        .collect()
}

/// The version of qemu-utils when dpkg has it fully installed.
fn qemu_utils() -> Option<String> {
    let out = stdout_of(Command::new("dpkg-query").args([
        "-W",
        "-f=${Status}|${Version}",
        "qemu-utils",
    ]))?;
    let (status, version) = out.trim().split_once('|')?;
    (status == "install ok installed").then(|| version.to_string())
}

/// apt's sources.list and sources.list.d, as apt itself resolves them.
fn apt_source_paths() -> (PathBuf, PathBuf) {
    let mut list = PathBuf::from("/etc/apt/sources.list");
    let mut parts = PathBuf::from("/etc/apt/sources.list.d");
    let shell = stdout_of(Command::new("apt-config").args([
        "shell",
        "L",
        "Dir::Etc::sourcelist/f",
        "P",
        "Dir::Etc::sourceparts/d",
    ]));
    for line in shell.unwrap_or_default().lines() {
        let unquote = |v: &str| PathBuf::from(v.trim_matches('\''));
        if let Some(v) = line.strip_prefix("L=") {
            list = unquote(v);
        } else if let Some(v) = line.strip_prefix("P=") {
            parts = unquote(v);
        }
    }
    (list, parts)
}

/// The contents of the sources file and of every *.list / *.sources in the parts directory.
fn read_sources(list: &Path, parts: &Path) -> Vec<(PathBuf, String)> {
    let mut files = vec![list.to_path_buf()];
    if let Ok(dir) = std::fs::read_dir(parts) {
        let mut more: Vec<PathBuf> = dir
            .flatten()
            .map(|e| e.path())
            .filter(|p| p.extension().is_some_and(|e| e == "list" || e == "sources"))
            .collect();
        more.sort();
        files.extend(more);
    }
    files
        .into_iter()
        .filter_map(|p| std::fs::read_to_string(&p).ok().map(|t| (p, t)))
        .collect()
}

/// The tree's QEMU version when it runs, is ≥ 10 and has the igb model; else why not.
pub fn qemu10(root: &Path) -> Result<String, String> {
    let bin = root.join("usr/bin/qemu-system-x86_64");
    if !bin.exists() {
        return Err(format!("{} does not exist", bin.display()));
    }
    let text = stdout_of(Command::new(&bin).arg("--version"))
        .ok_or_else(|| format!("{} --version failed", bin.display()))?;
    let version: String = text
        .split("QEMU emulator version ")
        .nth(1)
        .unwrap_or("")
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    let major: u32 = version.split('.').next().unwrap_or("").parse().unwrap_or(0);
    if major < 10 {
        return Err(format!("{} is QEMU {version:?}, not 10+", bin.display()));
    }
    // A missing library or firmware shows here, not in a test.
    let help = stdout_of(
        Command::new(&bin)
            .arg("-L")
            .arg(root.join("usr/share/seabios"))
            .arg("-L")
            .arg(root.join("usr/share/qemu"))
            .args(["-device", "igb,help"]),
    );
    match help {
        Some(_) => Ok(version),
        None => Err(format!("{} -device igb,help failed", bin.display())),
    }
}

/// rustup's installed components (host suffix removed) and targets; None without rustup.
fn rustup() -> Option<Rustup> {
    let comps = stdout_of(Command::new("rustup").args(["component", "list", "--installed"]))?;
    let targets = stdout_of(Command::new("rustup").args(["target", "list", "--installed"]))?;
    let host = stdout_of(Command::new("rustc").arg("-vV"))
        .and_then(|t| {
            t.lines()
                .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        })
        .unwrap_or_default();
    let suffix = format!("-{host}");
    Some(Rustup {
        components: comps
            .lines()
            .map(|c| {
                c.trim()
                    .strip_suffix(&suffix)
                    .unwrap_or(c.trim())
                    .to_string()
            })
            .collect(),
        targets: targets.lines().map(|t| t.trim().to_string()).collect(),
    })
}

/// In PATH, or in cargo's bin directory (where `cargo install` puts it, maybe not in PATH).
pub fn has_binary(name: &str) -> bool {
    let in_path = std::env::var_os("PATH")
        .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join(name).is_file()));
    in_path || cargo_bin_dir().join(name).is_file()
}

/// `$CARGO_HOME/bin`, else `~/.cargo/bin`.
pub fn cargo_bin_dir() -> PathBuf {
    std::env::var_os("CARGO_HOME")
        .map(PathBuf::from)
        .or_else(|| std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo")))
        .unwrap_or_else(|| PathBuf::from("/root/.cargo"))
        .join("bin")
}

/// The kit tests/redox_boot.rs uses: `$REDOX_KIT`, else `../shared/redox-kit`.
fn kit(repo: &Path) -> Result<PathBuf, String> {
    let kit = std::env::var_os("REDOX_KIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("../shared/redox-kit"));
    match KIT_FILES.iter().map(|f| kit.join(f)).find(|p| !p.exists()) {
        Some(p) => Err(format!("{} not found", p.display())),
        None => Ok(kit),
    }
}
