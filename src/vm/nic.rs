//! Guests whose NIC is one of QEMU's own device models (`-device igb`, QEMU's 82576) rather than
//! ours: QEMU 10 ([`Qemu10`]) with no device host, the NIC's backend a `-netdev` of QEMU's, so
//! two such guests can share one network ([`dgram_pair`]).

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::initramfs::{self, GuestSetup, Packages};
use super::qemu10::Qemu10;
use super::{APPEND, Vm, VmError, log_file};

/// How to boot a guest on a QEMU NIC model.
#[derive(Debug, Clone)]
pub struct NicVmConfig {
    /// The QEMU that has the model.
    pub qemu: Qemu10,
    /// The `-netdev` value, e.g. from [`dgram_pair`].
    pub netdev: String,
    /// The `-device` value; `netdev=` must name the netdev's id.
    pub device: String,
    /// Further NICs, each a (`-netdev`, `-device`) pair with ids of their own (see
    /// [`dgram_loop`] for two NICs of one guest cabled to each other).
    pub more_nics: Vec<(String, String)>,
    /// A virtual Intel IOMMU: machine q35 and `-device intel-iommu,caching-mode=on` before the
    /// NIC, so the NIC gets an IOMMU group and vfio-pci can take it (the guest also needs
    /// `intel_iommu=on`). Else machine pc, no IOMMU.
    pub iommu: bool,
    /// Where logs and the console transcript go.
    pub run_dir: PathBuf,
    /// Where the initramfs is cached.
    pub cache_dir: PathBuf,
    /// Longest wait for the guest's `/init`.
    pub boot_timeout: Duration,
}

/// `-netdev` values (id `n0`) for two guests cabled to each other: unix datagram sockets
/// `a.sock` and `b.sock` in `dir`, each guest sending to the other's. A frame sent before the
/// peer's QEMU has bound its socket is dropped, as on a cable whose far end is down.
pub fn dgram_pair(dir: &Path) -> (String, String) {
    dgram_cable(dir, ["n0", "n0"])
}

/// `-netdev` values (ids `n0` and `n1`) for two NICs of one guest cabled to each other, as
/// [`dgram_pair`] cables two guests.
pub fn dgram_loop(dir: &Path) -> (String, String) {
    dgram_cable(dir, ["n0", "n1"])
}

/// `-netdev` values (ids `n0` and `n1`) for two NICs of one guest on one QEMU hub (hub 0):
/// a frame one NIC sends reaches the other inside the same QEMU call (no socket, no main-loop
/// wake-up in between), so the path delay does not depend on how busy the host is.
pub fn hub_loop() -> (String, String) {
    let one = |id: &str| format!("hubport,id={id},hubid=0");
    (one("n0"), one("n1"))
}

fn dgram_cable(dir: &Path, ids: [&str; 2]) -> (String, String) {
    let a = dir.join("a.sock");
    let b = dir.join("b.sock");
    let one = |id: &str, local: &Path, remote: &Path| {
        format!(
            "dgram,id={id},local.type=unix,local.path={},remote.type=unix,remote.path={}",
            local.display(),
            remote.display()
        )
    };
    (one(ids[0], &a, &b), one(ids[1], &b, &a))
}

impl Vm {
    /// Boots a guest whose NIC is `cfg.device` on QEMU 10, with `setup`'s binaries and kernel
    /// words. No device host: [`Vm::shutdown`] returns no report.
    pub fn boot_qemu_nic(cfg: &NicVmConfig, setup: &GuestSetup) -> Result<Self, VmError> {
        let pkgs = Packages::find()?;
        let initrd = initramfs::ensure_with(&pkgs, &cfg.cache_dir, setup)?;
        std::fs::create_dir_all(&cfg.run_dir).map_err(|e| VmError::io(&cfg.run_dir, e))?;
        let append = std::iter::once(APPEND)
            .chain(setup.append.iter().map(String::as_str))
            .collect::<Vec<_>>()
            .join(" ");
        let mut cmd = Command::new(&cfg.qemu.binary);
        for dir in cfg.qemu.firmware_dirs() {
            cmd.arg("-L").arg(dir);
        }
        cmd.args(qemu_args(&pkgs.vmlinuz, &initrd, &append, cfg.iommu))
            .args(["-netdev", &cfg.netdev, "-device", &cfg.device])
            .args(
                cfg.more_nics
                    .iter()
                    .flat_map(|(n, d)| ["-netdev", n.as_str(), "-device", d.as_str()]),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file(&cfg.run_dir, "qemu.log")?);
        // Safety: the closure runs between fork and exec and only calls prctl, which is
        // async-signal-safe: QEMU dies with the test that started it.
        unsafe {
            use std::os::unix::process::CommandExt;
            cmd.pre_exec(|| {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let qemu = cmd
            .spawn()
            .map_err(|err| VmError::Spawn { what: "qemu", err })?;
        let report = cfg.run_dir.join("no-device-host.json");
        Self::attach(qemu, None, &cfg.run_dir, report, cfg.boot_timeout)
    }
}

/// The machine: one TCG vCPU, 512 MiB, serial console on stdio, nothing else by default; with
/// `iommu`, q35 and its intel-iommu (caching-mode: the guest reports every mapping, as VFIO's
/// DMA maps need when a device model sits behind an emulated IOMMU).
fn qemu_args(vmlinuz: &Path, initrd: &Path, append: &str, iommu: bool) -> Vec<OsString> {
    let mut a: Vec<OsString> = [
        "-accel",
        "tcg",
        "-smp",
        "1",
        "-m",
        "512",
        "-nodefaults",
        "-no-reboot",
        "-display",
        "none",
        "-monitor",
        "none",
        "-serial",
        "stdio",
        "-machine",
        if iommu { "q35" } else { "pc" },
    ]
    .iter()
    .map(OsString::from)
    .collect();
    if iommu {
        a.extend(["-device".into(), "intel-iommu,caching-mode=on".into()]);
    }
    a.extend(["-kernel".into(), vmlinuz.into(), "-initrd".into()]);
    a.extend([initrd.into(), "-append".into(), append.into()]);
    a
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iommu_gives_q35_and_intel_iommu() {
        let args = |iommu| {
            let a = qemu_args(Path::new("k"), Path::new("i"), "", iommu);
            a.iter()
                .map(|s| s.to_string_lossy().into_owned())
                .collect::<Vec<_>>()
                .join(" ")
        };
        assert!(args(false).contains("-machine pc "), "{}", args(false));
        assert!(!args(false).contains("intel-iommu"));
        assert!(args(true).contains("-machine q35 -device intel-iommu,caching-mode=on "));
    }

    #[test]
    fn dgram_pair_cross_connects() {
        let (a, b) = dgram_pair(Path::new("/x"));
        assert_eq!(
            a,
            "dgram,id=n0,local.type=unix,local.path=/x/a.sock,remote.type=unix,remote.path=/x/b.sock"
        );
        assert_eq!(
            b,
            "dgram,id=n0,local.type=unix,local.path=/x/b.sock,remote.type=unix,remote.path=/x/a.sock"
        );
        let (a, b) = dgram_loop(Path::new("/x"));
        assert!(a.starts_with("dgram,id=n0,local.type=unix,local.path=/x/a.sock,"));
        assert!(b.starts_with("dgram,id=n1,local.type=unix,local.path=/x/b.sock,"));
        assert!(b.ends_with("remote.path=/x/a.sock"));
    }
}
