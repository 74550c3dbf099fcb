//! Issue 23: every file, socket and directory the lab's daemons create has the owner and mode
//! the README's inventory ("Who may do what") gives it, whatever the umask. The lab runs here
//! under umask 000, the worst a careless service manager can hand down: before issue 23 the
//! runtime directories were 0777 (anyone could plant a symlink where a daemon binds or
//! writes), ptpd's configuration and the logs 0666, the device host's and the wire's sockets
//! 0777. Anything in the runtime directory the inventory does not name fails the test too, so
//! a new object cannot appear without a line in the README.
//!
//! One test in this file: it changes the process's umask, which its children inherit.

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use redox_ptp::lab::{Lab, LabConfig};

fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// What an entry of the runtime directory is, and the mode it must have.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Dir,
    File,
    Socket,
}

/// The inventory of a lab host directory and the lab's own: (name pattern, kind, mode). A
/// `*` in a pattern stands for any text.
const INVENTORY: &[(&str, Kind, u32)] = &[
    ("host*", Kind::Dir, 0o755),
    // igcd's driver channel: igcd's uid only, peer credentials checked at accept.
    ("igc0.sock", Kind::Socket, 0o600),
    // ptpd's clock socket: anyone may read clocks; writes are checked by uid.
    ("ptp.sock", Kind::Socket, 0o666),
    // IEEE 1588 management (pmc -u): GETs from anyone, SETs by uid.
    ("ptp4l", Kind::Socket, 0o666),
    ("clock0.page", Kind::File, 0o644),
    ("clock0.page.lock", Kind::File, 0o600),
    ("truth", Kind::File, 0o644),
    ("ptpd.toml", Kind::File, 0o644),
    ("*.log", Kind::File, 0o644),
    // Fault injection and the device host: the lab's uid (and root) only.
    ("faults.sock", Kind::Socket, 0o600),
    ("nic.sock", Kind::Socket, 0o600),
    // The cable between two NICs: the lab's uid only.
    ("wire*.sock", Kind::Socket, 0o600),
];

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        Some((pre, post)) => {
            name.len() >= pre.len() + post.len() && name.starts_with(pre) && name.ends_with(post)
        }
        None => pattern == name,
    }
}

fn kind_of(m: &std::fs::Metadata) -> Option<Kind> {
    let t = m.file_type();
    if t.is_dir() {
        Some(Kind::Dir)
    } else if t.is_file() {
        Some(Kind::File)
    } else if t.is_socket() {
        Some(Kind::Socket)
    } else {
        None
    }
}

/// Every entry under `dir` (recursively) that breaks the inventory, as text.
fn violations(dir: &Path, uid: u32, out: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        out.push(format!("{}: cannot list", dir.display()));
        return;
    };
    for e in entries.flatten() {
        let path = e.path();
        let name = e.file_name().to_string_lossy().into_owned();
        let Ok(m) = std::fs::symlink_metadata(&path) else {
            continue; // gone meanwhile (a private bind directory)
        };
        let mode = m.permissions().mode() & 0o7777;
        let kind = kind_of(&m);
        match INVENTORY
            .iter()
            .find(|(p, k, _)| matches(p, &name) && Some(*k) == kind)
        {
            Some((_, _, want)) if mode != *want => out.push(format!(
                "{}: mode {mode:04o}, the inventory says {want:04o}",
                path.display()
            )),
            Some(_) if m.uid() != uid => out.push(format!(
                "{}: owned by uid {}, not the lab's {uid}",
                path.display(),
                m.uid()
            )),
            Some(_) => {}
            None => out.push(format!(
                "{}: {kind:?} mode {mode:04o} is not in the inventory",
                path.display()
            )),
        }
        if kind == Some(Kind::Dir) {
            violations(&path, uid, out);
        }
    }
}

/// Starts a lab with `cfg`, lets it serve, and returns what breaks the inventory (with a
/// listing to read it by).
fn check_lab(cfg: LabConfig) -> Result<(), String> {
    let lab = Lab::start(cfg, &exe(), None)?;
    let root = lab.rt.path.clone();
    // Every socket exists once the hosts serve; give the daemons a moment to make the rest.
    let t0 = Instant::now();
    while lab.sample(1, 0.0).is_err() && t0.elapsed() < Duration::from_secs(60) {
        std::thread::sleep(Duration::from_millis(200));
    }
    std::thread::sleep(Duration::from_secs(1));
    // Safety: getuid has no preconditions.
    let uid = unsafe { libc::getuid() };
    let root_mode = std::fs::metadata(&root).unwrap().permissions().mode() & 0o7777;
    let mut bad = Vec::new();
    if root_mode != 0o755 {
        bad.push(format!(
            "{}: mode {root_mode:04o}, not 0755",
            root.display()
        ));
    }
    violations(&root, uid, &mut bad);
    let listing = std::process::Command::new("ls")
        .arg("-laR")
        .arg(&root)
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).into_owned())
        .unwrap_or_default();
    drop(lab);
    if bad.is_empty() {
        Ok(())
    } else {
        Err(format!(
            "{} objects break the inventory:\n{}\n\n{listing}",
            bad.len(),
            bad.join("\n")
        ))
    }
}

#[test]
fn under_umask_000_every_object_the_lab_creates_has_its_inventory_mode() {
    // Safety: umask has no preconditions; this file's only test, so no other thread of this
    // process creates files meanwhile.
    unsafe { libc::umask(0) };
    // The lab cannot combine the two yet: fault sockets with in-process NICs, then device
    // hosts.
    let faults = LabConfig {
        seed: 23,
        faults: true,
        ..LabConfig::default()
    };
    let devhost = LabConfig {
        seed: 24,
        nic_process: true,
        ..LabConfig::default()
    };
    let results = [check_lab(faults), check_lab(devhost)];
    let failed: Vec<_> = results.into_iter().filter_map(Result::err).collect();
    assert!(failed.is_empty(), "{}", failed.join("\n\n"));
}
