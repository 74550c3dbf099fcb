//! QEMU 10 beside bookworm's 7.2: `-device igb` (QEMU's own 82576 model, time sync since 8.1)
//! needs QEMU ≥ 8.1, while our proxied i225 needs 7.2 (10.0 segfaults realizing
//! `x-pci-proxy-dev` under TCG). So 10.x is not installed: its packages from bookworm-backports
//! are fetched with `apt-get download` and unpacked with `dpkg -x` into a directory of their own,
//! and QEMU runs from there with `-L` pointing at the unpacked firmware (SeaBIOS from backports
//! too: QEMU 10 depends on a newer one than bookworm's).
//!
//! [`Qemu10::find_or_provision`] finds that tree (`$REDOX_PTP_QEMU10`, else
//! [`DEFAULT_ROOT`]) or makes it; `cargo xtask provision` (run by `cargo xtask test`) provisions
//! it the same way before the tests, adding the backports suite when absent.

use std::path::{Path, PathBuf};
use std::process::Command;

use super::VmError;

/// Where the unpacked tree lives unless `$REDOX_PTP_QEMU10` names another.
pub const DEFAULT_ROOT: &str = "/var/cache/redox-ptp/qemu10";
/// The environment variable naming the tree.
pub const ROOT_ENV: &str = "REDOX_PTP_QEMU10";
/// The packages unpacked, each taken from bookworm-backports (one suite, so their versions
/// match: qemu-system-x86 depends on the exact common/data version).
pub const PACKAGES: [&str; 4] = [
    "qemu-system-x86",
    "qemu-system-common",
    "qemu-system-data",
    "seabios",
];
/// The lowest major version accepted: the one checked here (the igb model has time sync since 8.1).
const MIN_MAJOR: u32 = 10;

/// An unpacked QEMU ≥ 10.
#[derive(Debug, Clone)]
pub struct Qemu10 {
    /// The tree `dpkg -x` filled.
    pub root: PathBuf,
    /// `qemu-system-x86_64` in it.
    pub binary: PathBuf,
    /// What `--version` says, e.g. "10.0.2".
    pub version: String,
}

/// The shell lines that provision the tree at `root` (quoted in errors): `cargo xtask provision`,
/// which also adds the backports suite from the machine's own Debian mirror when absent, or the
/// same steps by hand (with the suite already in apt's sources).
pub fn provision_command(root: &Path) -> String {
    let pkgs: Vec<String> = PACKAGES
        .iter()
        .map(|p| format!("{p}/bookworm-backports"))
        .collect();
    format!(
        "cargo xtask provision (as root), or by hand: apt-get update && d=$(mktemp -d) && (cd \"$d\" && apt-get download {}) && \
         mkdir -p {r} && for f in \"$d\"/*.deb; do dpkg -x \"$f\" {r}; done",
        pkgs.join(" "),
        r = root.display()
    )
}

impl Qemu10 {
    /// The tree's location: `$REDOX_PTP_QEMU10`, else [`DEFAULT_ROOT`].
    pub fn default_root() -> PathBuf {
        std::env::var_os(ROOT_ENV)
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(DEFAULT_ROOT))
    }

    /// The unpacked QEMU at `root`, checked to run and to be new enough.
    pub fn find(root: &Path) -> Result<Self, VmError> {
        let binary = root.join("usr/bin/qemu-system-x86_64");
        let missing = |why: String| VmError::Qemu10 {
            why,
            command: provision_command(root),
        };
        if !binary.exists() {
            return Err(missing(format!("{} does not exist", binary.display())));
        }
        let out = Command::new(&binary)
            .arg("--version")
            .output()
            .map_err(|e| missing(format!("{} --version: {e}", binary.display())))?;
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        let version = parse_version(&text).ok_or_else(|| {
            missing(format!(
                "{} --version said {:?} (exit {}; stderr {:?})",
                binary.display(),
                text.trim(),
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            ))
        })?;
        let major = version
            .split('.')
            .next()
            .and_then(|m| m.parse::<u32>().ok());
        if major.is_none_or(|m| m < MIN_MAJOR) {
            return Err(missing(format!(
                "{} is QEMU {version}; -device igb with time sync needs {MIN_MAJOR}+",
                binary.display()
            )));
        }
        Ok(Self {
            root: root.to_path_buf(),
            binary,
            version,
        })
    }

    /// [`Self::find`], or provision with apt-get download + dpkg -x first (needs the
    /// bookworm-backports lists; an error quotes the command).
    pub fn find_or_provision(root: &Path) -> Result<Self, VmError> {
        if let Ok(q) = Self::find(root) {
            return Ok(q);
        }
        provision(root)?;
        Self::find(root)
    }

    /// `-L` directories: the unpacked firmware first (QEMU also searches its built-in
    /// /usr/share/qemu and /usr/share/seabios, which belong to 7.2 and bookworm's SeaBIOS).
    pub fn firmware_dirs(&self) -> Vec<PathBuf> {
        vec![
            self.root.join("usr/share/seabios"),
            self.root.join("usr/share/qemu"),
        ]
    }
}

/// "QEMU emulator version 10.0.2 (Debian ...)" → "10.0.2".
fn parse_version(text: &str) -> Option<String> {
    let rest = text.split("QEMU emulator version ").nth(1)?;
    let v: String = rest
        .chars()
        .take_while(|c| c.is_ascii_digit() || *c == '.')
        .collect();
    (!v.is_empty()).then_some(v)
}

/// Downloads the packages into a scratch directory and unpacks them into `root` (via a sibling
/// temporary tree renamed into place, so a half-made tree is never found).
fn provision(root: &Path) -> Result<(), VmError> {
    let fail = |why: String| VmError::Qemu10 {
        why,
        command: provision_command(root),
    };
    let parent = root.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|e| fail(format!("{}: {e}", parent.display())))?;
    let tag = std::process::id();
    let debs = parent.join(format!(".qemu10-debs.{tag}"));
    let tree = parent.join(format!(".qemu10-tree.{tag}"));
    let result = (|| {
        std::fs::create_dir_all(&debs).map_err(|e| fail(format!("{}: {e}", debs.display())))?;
        let specs: Vec<String> = PACKAGES
            .iter()
            .map(|p| format!("{p}/bookworm-backports"))
            .collect();
        run(Command::new("apt-get")
            .arg("download")
            .args(&specs)
            .current_dir(&debs))
        .map_err(&fail)?;
        let entries =
            std::fs::read_dir(&debs).map_err(|e| fail(format!("{}: {e}", debs.display())))?;
        for deb in entries.flatten().map(|e| e.path()) {
            run(Command::new("dpkg").arg("-x").arg(&deb).arg(&tree)).map_err(&fail)?;
        }
        let _ = std::fs::remove_dir_all(root);
        std::fs::rename(&tree, root).map_err(|e| fail(format!("{}: {e}", root.display())))
    })();
    let _ = std::fs::remove_dir_all(&debs);
    let _ = std::fs::remove_dir_all(&tree);
    result
}

/// Runs `cmd`; its stderr tail in the error when it fails.
fn run(cmd: &mut Command) -> Result<(), String> {
    let shown = format!("{cmd:?}");
    let out = cmd.output().map_err(|e| format!("{shown}: {e}"))?;
    if out.status.success() {
        return Ok(());
    }
    let err = String::from_utf8_lossy(&out.stderr);
    let tail: Vec<&str> = err.lines().rev().take(5).collect();
    Err(format!(
        "{shown} exited {}: {}",
        out.status,
        tail.into_iter().rev().collect::<Vec<_>>().join(" | ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn version_line_parses() {
        let v = parse_version(
            "QEMU emulator version 10.0.2 (Debian 1:10.0.2+ds-2+deb13u1~bpo12+1)\nCopyright",
        );
        assert_eq!(v.as_deref(), Some("10.0.2"));
        assert_eq!(parse_version("something else"), None);
    }

    #[test]
    fn a_missing_tree_is_a_typed_error_naming_the_command() {
        let root = std::env::temp_dir().join(format!("no-qemu10-{}", std::process::id()));
        let e = Qemu10::find(&root).unwrap_err();
        let msg = e.to_string();
        assert!(matches!(e, VmError::Qemu10 { .. }), "{msg}");
        assert!(msg.contains("does not exist"), "{msg}");
        for p in PACKAGES {
            assert!(msg.contains(&format!("{p}/bookworm-backports")), "{msg}");
        }
        assert!(
            msg.contains(&format!("dpkg -x \"$f\" {}", root.display())),
            "{msg}"
        );
    }

    #[test]
    fn an_old_qemu_is_refused() {
        // A fake qemu-system-x86_64 reporting 7.2.
        let root = std::env::temp_dir().join(format!("old-qemu10-{}", std::process::id()));
        let bin = root.join("usr/bin");
        std::fs::create_dir_all(&bin).unwrap();
        let exe = bin.join("qemu-system-x86_64");
        std::fs::write(
            &exe,
            "#!/bin/sh\necho 'QEMU emulator version 7.2.22 (Debian)'\n",
        )
        .unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let msg = Qemu10::find(&root).unwrap_err().to_string();
        let _ = std::fs::remove_dir_all(&root);
        assert!(msg.contains("is QEMU 7.2.22"), "{msg}");
    }
}
