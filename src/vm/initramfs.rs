//! The guest's initramfs, built from packages installed on this machine: the Debian kernel's
//! vmlinuz, igc.ko and the userspace-driver modules (uio, uio_pci_generic, the VFIO set) with
//! their modules.dep dependencies, busybox-static, linuxptp's ptp4l, pmc and phc_ctl, ethtool,
//! optionally our own binaries ([`GuestSetup`]), and the shared libraries all of them link (from
//! `ldd`). Cached by the package versions (`dpkg-query`) and the binaries' size and mtime, so an
//! upgrade or a rebuilt binary makes a new one.
//!
//! The modules sit at their real paths under `/lib/modules/RELEASE` with a modules.dep trimmed
//! to them, so busybox `modprobe` loads them by name. `/init` loads igc unless the kernel
//! command line says `modprobe.blacklist=igc` (a guest whose NIC a userspace driver takes).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::Command;

use super::VmError;

/// What CI (and a user) runs to get everything the VM runner needs. bookworm's own QEMU 7.2:
/// QEMU 10.0 (bookworm-backports) segfaults realizing `x-pci-proxy-dev` under TCG (checked
/// 2026-12-01: `kvm_vm_ioctl` with no KVM state, from the INTx irqfd setup).
pub const APT_LINE: &str = "apt-get update && apt-get install -y --no-install-recommends \
qemu-system-x86 linux-image-amd64 busybox-static linuxptp ethtool \
(on a machine with QEMU 10 from backports: apt-get install --allow-downgrades \
qemu-system-x86/bookworm qemu-system-common/bookworm qemu-system-data/bookworm qemu-system-gui/bookworm)";

/// Packages whose versions key the cache.
const PACKAGES: &[&str] = &[
    "linux-image-amd64",
    "busybox-static",
    "linuxptp",
    "ethtool",
    "qemu-system-x86",
];
const QEMU: &str = "/usr/bin/qemu-system-x86_64";
const BUSYBOX: &str = "/bin/busybox";
/// Dynamically linked programs copied in, with the guest path they get.
const PROGRAMS: &[&str] = &[
    "/usr/sbin/ptp4l",
    "/usr/sbin/pmc",
    "/usr/sbin/phc_ctl",
    "/usr/sbin/ethtool",
];

/// Modules offered to the guest's `modprobe` besides igc (not loaded by `/init`): what a
/// userspace PCI driver binds the NIC with. VFIO has no no-IOMMU mode in Debian's kernel, but
/// the modules load.
const OFFERED_MODULES: &[&str] = &[
    "uio",
    "uio_pci_generic",
    "vfio",
    "vfio_iommu_type1",
    "vfio-pci",
];

/// What a guest gets beyond the base set.
#[derive(Debug, Clone, Default)]
pub struct GuestSetup {
    /// Host programs put in the guest's `/usr/bin` under their file names (debug info
    /// stripped when `strip` is installed), with the shared libraries they link.
    pub binaries: Vec<PathBuf>,
    /// Extra kernel command-line words (e.g. `modprobe.blacklist=igc`, `hugepages=32`).
    pub append: Vec<String>,
}

impl GuestSetup {
    /// A guest for a userspace driver: `binaries`, igc not loaded, `hugepages` 2 MiB pages
    /// reserved at boot (DMA memory without an IOMMU).
    pub fn userspace(binaries: Vec<PathBuf>, hugepages: u32) -> Self {
        Self {
            binaries,
            append: vec![
                "modprobe.blacklist=igc".into(),
                format!("hugepages={hugepages}"),
            ],
        }
    }

    /// The cache key part for the binaries: path, size and mtime of each (a rebuild changes
    /// the mtime).
    fn key(&self) -> Result<String, VmError> {
        let mut k = String::new();
        for b in &self.binaries {
            let m = std::fs::metadata(b).map_err(|e| VmError::io(b, e))?;
            let mtime = m
                .modified()
                .ok()
                .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
                .map_or(0, |d| d.as_nanos());
            k.push_str(&format!("{}:{}:{mtime};", b.display(), m.len()));
        }
        Ok(k)
    }
}

/// The host files a VM boots from.
#[derive(Debug, Clone)]
pub struct Packages {
    /// `qemu-system-x86_64`.
    pub qemu: PathBuf,
    /// The kernel image.
    pub vmlinuz: PathBuf,
    /// `uname -r` of that kernel.
    pub kernel_release: String,
    /// `name=version` of every package, the cache key.
    pub versions: Vec<String>,
}

fn dpkg_field(pkg: &str, field: &str) -> Option<String> {
    let out = Command::new("dpkg-query")
        .args(["-W", "-f", &format!("${{{field}}}"), pkg])
        .output()
        .ok()?;
    let s = String::from_utf8_lossy(&out.stdout).trim().to_string();
    (out.status.success() && !s.is_empty()).then_some(s)
}

impl Packages {
    /// Finds everything, or names what is missing with the apt-get line.
    pub fn find() -> Result<Self, VmError> {
        let mut missing = Vec::new();
        let mut versions = Vec::new();
        for p in PACKAGES {
            match dpkg_field(p, "Version") {
                Some(v) => versions.push(format!("{p}={v}")),
                None => missing.push(p.to_string()),
            }
        }
        // linux-image-amd64 depends on the versioned image, e.g. linux-image-6.1.0-57-amd64.
        let kernel_release = dpkg_field("linux-image-amd64", "Depends")
            .and_then(|d| {
                d.split([',', ' '])
                    .find_map(|t| t.strip_prefix("linux-image-").map(str::to_string))
            })
            .unwrap_or_default();
        let vmlinuz = PathBuf::from(format!("/boot/vmlinuz-{kernel_release}"));
        let mut files = vec![
            PathBuf::from(QEMU),
            PathBuf::from(BUSYBOX),
            vmlinuz.clone(),
            igc_module(&kernel_release),
        ];
        files.extend(PROGRAMS.iter().map(PathBuf::from));
        for f in &files {
            if !f.exists() {
                missing.push(f.display().to_string());
            }
        }
        if let Some(v) = versions.iter().find(|v| v.starts_with("qemu-system-x86=")) {
            // Epoch 1, then the upstream major: only 7.x is known to work (see APT_LINE).
            let major = v
                .split([':', '.'])
                .nth(1)
                .and_then(|m| m.parse::<u32>().ok());
            if major.is_none_or(|m| m >= 10) {
                missing.push(format!(
                    "{v} cannot serve x-pci-proxy-dev under TCG; need 7.2"
                ));
            }
        }
        if !missing.is_empty() {
            return Err(VmError::MissingPackages {
                missing: missing.join(", "),
                apt: APT_LINE,
            });
        }
        Ok(Self {
            qemu: QEMU.into(),
            vmlinuz,
            kernel_release,
            versions,
        })
    }

    fn modules_dir(&self) -> PathBuf {
        PathBuf::from(format!("/lib/modules/{}", self.kernel_release))
    }

    /// The cache file name: these versions and the `/init` this build writes (so a changed
    /// script or module set is a new file).
    fn cache_name(&self, init: &str, extra: &str) -> String {
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        let versions = self.versions.join(";");
        for b in versions.bytes().chain(init.bytes()).chain(extra.bytes()) {
            h = (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
        }
        let kind = if extra.is_empty() { "" } else { "bin-" };
        format!("initramfs-{}-{kind}{h:016x}.cpio", self.kernel_release)
    }
}

fn igc_module(release: &str) -> PathBuf {
    PathBuf::from(format!(
        "/lib/modules/{release}/kernel/drivers/net/ethernet/intel/igc/igc.ko"
    ))
}

/// The initramfs for `pkgs` and `setup` in `cache_dir`, built if absent.
pub fn ensure_with(
    pkgs: &Packages,
    cache_dir: &Path,
    setup: &GuestSetup,
) -> Result<PathBuf, VmError> {
    let deps = ModuleSet::resolve(pkgs)?;
    let init = init_script();
    let extra = format!("{}{}", setup.key()?, deps.dep_text);
    let name = pkgs.cache_name(&init, &extra);
    let path = cache_dir.join(&name);
    if path.exists() {
        return Ok(path);
    }
    std::fs::create_dir_all(cache_dir).map_err(|e| VmError::io(cache_dir, e))?;
    let bytes = build(pkgs, &deps, &init, &setup.binaries)?;
    let tmp = cache_dir.join(format!(".{name}.{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|e| VmError::io(&tmp, e))?;
    std::fs::rename(&tmp, &path).map_err(|e| VmError::io(&path, e))?;
    if !setup.binaries.is_empty() {
        prune_stale(cache_dir, &name);
    }
    Ok(path)
}

/// Removes archives with binaries other than `keep` last written over an hour ago: each rebuild
/// of a binary leaves one behind, and tens of MB each add up. The hour leaves any archive a
/// concurrent boot may be about to open alone.
fn prune_stale(cache_dir: &Path, keep: &str) {
    let Ok(entries) = std::fs::read_dir(cache_dir) else {
        return;
    };
    for e in entries.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        let stale = e
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|age| age > std::time::Duration::from_secs(3600));
        if name != keep && name.contains("-bin-") && name.ends_with(".cpio") && stale {
            let _ = std::fs::remove_file(e.path());
        }
    }
}

/// The modules the guest gets: their paths relative to the modules directory, and the
/// modules.dep lines for exactly these.
struct ModuleSet {
    dir: PathBuf,
    rel: BTreeSet<String>,
    dep_text: String,
}

/// A module's name as modprobe compares it (`vfio-pci` and `vfio_pci` are one module).
fn module_name(rel: &str) -> String {
    let file = rel.rsplit('/').next().unwrap_or(rel);
    file.trim_end_matches(".ko").replace('-', "_")
}

impl ModuleSet {
    /// igc and [`OFFERED_MODULES`] with their dependencies, from modules.dep.
    fn resolve(pkgs: &Packages) -> Result<Self, VmError> {
        let dir = pkgs.modules_dir();
        let dep_file = dir.join("modules.dep");
        let deps = std::fs::read_to_string(&dep_file).map_err(|e| VmError::io(&dep_file, e))?;
        let lines: Vec<(&str, &str)> = deps.lines().filter_map(|l| l.split_once(':')).collect();
        let mut rel = BTreeSet::new();
        let mut dep_text = String::new();
        for want in std::iter::once("igc").chain(OFFERED_MODULES.iter().copied()) {
            let want = want.replace('-', "_");
            let (module, rest) = lines
                .iter()
                .find(|(m, _)| module_name(m) == want)
                .ok_or_else(|| {
                    VmError::Build(format!("{want} is not in {}", dep_file.display()))
                })?;
            for m in std::iter::once(*module).chain(rest.split_whitespace()) {
                if rel.insert(m.to_string()) {
                    let line = lines.iter().find(|(l, _)| *l == m);
                    let deps_of = line.map_or("", |(_, d)| d.trim());
                    dep_text.push_str(&format!("{m}: {deps_of}\n"));
                }
            }
        }
        Ok(Self { dir, rel, dep_text })
    }
}

/// Shared libraries (and the loader) `programs` link, from ldd.
fn libraries(programs: &[PathBuf]) -> Result<BTreeSet<PathBuf>, VmError> {
    let mut libs = BTreeSet::new();
    for p in programs {
        let out = Command::new("ldd")
            .arg(p)
            .output()
            .map_err(|e| VmError::io(Path::new("ldd"), e))?;
        for l in String::from_utf8_lossy(&out.stdout).lines() {
            let path = match l.split_once("=>") {
                Some((_, r)) => r.split_whitespace().next(),
                None => l.split_whitespace().next(),
            };
            if let Some(path) = path.filter(|p| p.starts_with('/')) {
                libs.insert(PathBuf::from(path));
            }
        }
    }
    Ok(libs)
}

/// The guest's /init: mounts, loads igc (unless blacklisted on the kernel command line), then
/// runs commands read from the console, one per line, each framed by `@@S n` / `@@E n rc`
/// lines ([`super::Vm::run`]).
fn init_script() -> String {
    let mut s = String::from(
        "#!/bin/busybox sh\n\
         /bin/busybox mkdir -p /proc /sys /dev /tmp /run /var/run /usr/bin /usr/sbin /sbin\n\
         /bin/busybox --install -s\n\
         mount -t proc proc /proc\n\
         mount -t sysfs sys /sys\n\
         mount -t devtmpfs dev /dev\n\
         mkdir -p /dev/hugepages\n\
         mount -t hugetlbfs none /dev/hugepages\n\
         export PATH=/usr/sbin:/usr/bin:/sbin:/bin\n",
    );
    // The same archive serves guests with and without igc: the kernel's own blacklist word
    // decides (insmod/modprobe here would ignore it).
    s.push_str(
        "if grep -qE 'modprobe[.]blacklist=([^ ]*,)?igc([, ]|$)' /proc/cmdline; then\n\
         echo @@IGC-BLACKLISTED\n\
         else modprobe igc || echo \"@@INSMOD-FAILED igc\"\n\
         fi\n",
    );
    // Kernel messages stay in dmesg, off the console the commands' output shares.
    s.push_str(
        "dmesg -n 1\n\
         stty -echo 2>/dev/null\n\
         echo @@READY\n\
         n=0\n\
         while IFS= read -r line; do\n\
         n=$((n+1))\n\
         echo \"@@S $n\"\n\
         eval \"$line\" 2>&1\n\
         echo \"@@E $n $?\"\n\
         done\n\
         poweroff -f\n",
    );
    s
}

/// `src` without its debug info (`strip --strip-debug`: a debug build's binary shrinks from
/// ~70 MB to ~17 MB, which the guest holds in RAM twice while unpacking), or as is without
/// `strip`.
fn stripped(src: &Path) -> Result<Vec<u8>, VmError> {
    let tmp = std::env::temp_dir().join(format!(
        "redox-ptp-strip-{}-{}",
        std::process::id(),
        ptp_ipc::time::mono_ns()
    ));
    let ok = Command::new("strip")
        .arg("--strip-debug")
        .arg("-o")
        .arg(&tmp)
        .arg(src)
        .stderr(std::process::Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    let data = if ok {
        std::fs::read(&tmp)
    } else {
        std::fs::read(src)
    };
    let _ = std::fs::remove_file(&tmp);
    data.map_err(|e| VmError::io(src, e))
}

/// The archive's bytes (newc cpio, uncompressed: the kernel takes it as is).
fn build(
    pkgs: &Packages,
    mods: &ModuleSet,
    init: &str,
    binaries: &[PathBuf],
) -> Result<Vec<u8>, VmError> {
    let mut c = Cpio::default();
    for d in [
        "bin", "sbin", "dev", "lib", "lib64", "usr", "usr/sbin", "usr/bin",
    ] {
        c.dir(d);
    }
    c.device("dev/console", 5, 1);
    c.file_from("bin/busybox", Path::new(BUSYBOX), 0o755)?;
    let mut programs: Vec<PathBuf> = PROGRAMS.iter().map(PathBuf::from).collect();
    for p in PROGRAMS {
        c.file_from(p.trim_start_matches('/'), Path::new(p), 0o755)?;
    }
    for b in binaries {
        let name = b
            .file_name()
            .ok_or_else(|| VmError::Build(format!("{}: no file name", b.display())))?;
        c.file(
            &format!("usr/bin/{}", name.to_string_lossy()),
            &stripped(b)?,
            0o755,
        );
        programs.push(b.clone());
    }
    for lib in libraries(&programs)? {
        let guest = lib.to_string_lossy().trim_start_matches('/').to_string();
        c.parents(&guest);
        c.file_from(&guest, &lib, 0o755)?;
    }
    let guest_dir = format!("lib/modules/{}", pkgs.kernel_release);
    for m in &mods.rel {
        let guest = format!("{guest_dir}/{m}");
        c.parents(&guest);
        c.file_from(&guest, &mods.dir.join(m), 0o644)?;
    }
    c.file(
        &format!("{guest_dir}/modules.dep"),
        mods.dep_text.as_bytes(),
        0o644,
    );
    c.file("init", init.as_bytes(), 0o755);
    Ok(c.finish())
}

/// A newc ("070701") cpio writer.
#[derive(Default)]
struct Cpio {
    out: Vec<u8>,
    ino: u32,
    dirs: BTreeSet<String>,
}

impl Cpio {
    fn entry(&mut self, name: &str, mode: u32, data: &[u8], rdev: (u32, u32)) {
        self.ino += 1;
        let hdr = format!(
            "070701{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}{:08x}",
            self.ino,
            mode,
            0,
            0,
            1,
            0,
            data.len(),
            0,
            0,
            rdev.0,
            rdev.1,
            name.len() + 1,
            0
        );
        self.out.extend_from_slice(hdr.as_bytes());
        self.out.extend_from_slice(name.as_bytes());
        self.out.push(0);
        self.pad();
        self.out.extend_from_slice(data);
        self.pad();
    }

    fn pad(&mut self) {
        while self.out.len() % 4 != 0 {
            self.out.push(0);
        }
    }

    fn dir(&mut self, name: &str) {
        if self.dirs.insert(name.to_string()) {
            self.entry(name, 0o040_755, &[], (0, 0));
        }
    }

    /// Every parent directory of `path`.
    fn parents(&mut self, path: &str) {
        let parts: Vec<&str> = path.split('/').collect();
        for i in 1..parts.len() {
            self.dir(&parts[..i].join("/"));
        }
    }

    fn device(&mut self, name: &str, major: u32, minor: u32) {
        self.entry(name, 0o020_600, &[], (major, minor));
    }

    fn file(&mut self, name: &str, data: &[u8], perm: u32) {
        self.entry(name, 0o100_000 | perm, data, (0, 0));
    }

    fn file_from(&mut self, name: &str, src: &Path, perm: u32) -> Result<(), VmError> {
        let data = std::fs::read(src).map_err(|e| VmError::io(src, e))?;
        self.file(name, &data, perm);
        Ok(())
    }

    fn finish(mut self) -> Vec<u8> {
        self.entry("TRAILER!!!", 0, &[], (0, 0));
        while self.out.len() % 512 != 0 {
            self.out.push(0);
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_rebuilt_binary_changes_the_cache_name() {
        let dir = std::env::temp_dir().join(format!("redox-ptp-key-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let bin = dir.join("prog");
        std::fs::write(&bin, b"v1").unwrap();
        let pkgs = Packages {
            qemu: QEMU.into(),
            vmlinuz: "/boot/vmlinuz-x".into(),
            kernel_release: "x".into(),
            versions: vec!["linuxptp=1".into()],
        };
        let setup = GuestSetup::userspace(vec![bin.clone()], 4);
        let name = |s: &GuestSetup| pkgs.cache_name("init", &s.key().unwrap());
        let first = name(&setup);
        assert_eq!(first, name(&setup), "same binary, same archive");
        assert!(first.contains("-bin-"), "{first}");
        assert!(!name(&GuestSetup::default()).contains("-bin-"));
        // A rebuild: same size, later mtime.
        let f = std::fs::File::options().write(true).open(&bin).unwrap();
        let later = std::time::SystemTime::now() + std::time::Duration::from_secs(5);
        f.set_modified(later).unwrap();
        assert_ne!(
            first,
            name(&setup),
            "a rebuilt binary must make a new archive"
        );
        assert!(matches!(
            GuestSetup::userspace(vec![dir.join("absent")], 4).key(),
            Err(VmError::Io { .. })
        ));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn cpio_newc_layout() {
        let mut c = Cpio::default();
        c.file("init", b"abc", 0o755);
        let out = c.finish();
        assert_eq!(&out[..6], b"070701");
        // Header (110 bytes) + "init\0" padded to 4 → data at 116.
        assert_eq!(&out[116..119], b"abc");
        assert_eq!(&out[6 + 8..6 + 16], b"000081ed", "mode: regular file 0755");
        assert_eq!(out.len() % 512, 0);
        let trailer = out.windows(10).position(|w| w == b"TRAILER!!!");
        assert!(trailer.is_some());
    }
}
