//! The Linux backend against a fake sysfs tree in a temporary directory: every bad setup gives
//! its typed error and leaves the tree as it was (or as it was before a failed bind).

use std::fs;
use std::os::unix::fs::{FileExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::config::{COMMAND_BUS_MASTER, COMMAND_INTX_DISABLE, COMMAND_MEMORY, ConfigSpace};
use super::dma::{PageFrame, decode_pagemap, phys_addr};
use super::*;
use crate::{IrqVector, IrqWait, Mmio};

const ADDR: &str = "0000:00:04.0";

/// A sysfs/dev/proc tree with one i225 at [`ADDR`] and the drivers uio_pci_generic and igc.
struct Fake {
    root: PathBuf,
}

impl Drop for Fake {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

fn write(p: &Path, data: impl AsRef<[u8]>) {
    fs::create_dir_all(p.parent().unwrap()).unwrap();
    fs::write(p, data).unwrap();
}

impl Fake {
    fn new() -> Self {
        static N: AtomicU32 = AtomicU32::new(0);
        let root = std::env::temp_dir().join(format!(
            "ptp-pci-linux-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let f = Fake { root };
        let dev = f.dev_dir();
        write(&dev.join("vendor"), "0x8086\n");
        write(&dev.join("device"), "0x15f3\n");
        write(&dev.join("irq"), "11\n");
        let mut config = vec![0u8; 256];
        config[0..4].copy_from_slice(&0x15f3_8086u32.to_le_bytes());
        config[8..12].copy_from_slice(&0x0200_0003u32.to_le_bytes());
        write(&dev.join("config"), config);
        // BAR0 memory (0x200), BAR2 I/O ports (0x100), the rest absent.
        let mut res = String::from("0x00000000fe000000 0x00000000fe0fffff 0x0000000000040200\n");
        res += "0x0000000000000000 0x0000000000000000 0x0000000000000000\n";
        res += "0x000000000000c000 0x000000000000c01f 0x0000000000040101\n";
        write(&dev.join("resource"), res);
        write(&dev.join("resource0"), vec![0u8; 0x2_0000]);
        write(&dev.join("driver_override"), "");
        fs::create_dir_all(dev.join("uio/uio0")).unwrap();
        write(&f.root.join("dev/uio0"), "");
        for d in ["uio_pci_generic", "igc"] {
            write(&f.drivers().join(d).join("bind"), "");
            write(&f.drivers().join(d).join("unbind"), "");
        }
        write(&f.root.join("sys/bus/pci/drivers_probe"), "");
        write(&f.root.join("proc/pagemap"), "");
        f
    }

    fn dev_dir(&self) -> PathBuf {
        self.root.join("sys/bus/pci/devices").join(ADDR)
    }

    fn drivers(&self) -> PathBuf {
        self.root.join("sys/bus/pci/drivers")
    }

    fn bind_link(&self, driver: &str) {
        let target = PathBuf::from("../../drivers").join(driver);
        std::os::unix::fs::symlink(target, self.dev_dir().join("driver")).unwrap();
    }

    fn read(&self, rel: &str) -> String {
        fs::read_to_string(self.root.join(rel)).unwrap()
    }

    fn opts(&self) -> LinuxPciOptions {
        LinuxPciOptions {
            unbind: false,
            backend: Backend::Auto,
            modprobe: None,
            sysfs: self.root.join("sys"),
            dev: self.root.join("dev"),
            pagemap: self.root.join("proc/pagemap"),
            // Opens that must succeed cannot map a hugepage on a host without any.
            reserve_dma: false,
        }
    }

    /// Every sysfs file a bind or an undo writes, with what it holds.
    fn writes(&self) -> Vec<(String, String)> {
        let mut v = vec![(
            "driver_override".to_string(),
            fs::read_to_string(self.dev_dir().join("driver_override")).unwrap(),
        )];
        v.push((
            "drivers_probe".into(),
            self.read("sys/bus/pci/drivers_probe"),
        ));
        for d in ["uio_pci_generic", "igc"] {
            for op in ["bind", "unbind"] {
                let p = self.drivers().join(d).join(op);
                v.push((
                    format!("{d}/{op}"),
                    fs::read_to_string(p).unwrap_or_default(),
                ));
            }
        }
        v
    }

    fn untouched(&self) -> bool {
        self.writes().iter().all(|(_, s)| s.is_empty())
    }
}

fn open_err(opts: &LinuxPciOptions) -> LinuxPciError {
    match LinuxPci::open(ADDR, opts) {
        Ok(_) => panic!("opened {ADDR} in a bad setup"),
        Err(e) => e,
    }
}

#[test]
fn addresses_parse_in_both_spellings_and_bad_ones_are_typed_errors() {
    let a = PciAddr::parse("0000:03:1f.7").unwrap();
    assert_eq!((a.domain, a.bus, a.device, a.function), (0, 3, 0x1f, 7));
    assert_eq!(
        PciAddr::parse("03:00.1").unwrap().to_string(),
        "0000:03:00.1"
    );
    assert_eq!(
        PciAddr::parse("ABCD:Ef:00.0").unwrap().to_string(),
        "abcd:ef:00.0"
    );
    for bad in [
        "",
        "zz",
        "0000:03:00",
        "0000:03:20.0",
        "0000:03:00.8",
        "00000:03:00.0",
        "0000:003:00.0",
        "0000:03:0g.0",
        "1:2:3:4.0",
        "0000:03:00.-1",
        "+0:03:00.0",
        "0000:03:00.0 ",
    ] {
        match PciAddr::parse(bad) {
            Err(LinuxPciError::BadAddress { addr, .. }) => assert_eq!(addr, bad),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
}

#[test]
fn no_such_address_names_the_missing_path() {
    let f = Fake::new();
    match LinuxPci::open("0000:00:1f.7", &f.opts()) {
        Err(LinuxPciError::NoSuchDevice { addr, path }) => {
            assert_eq!(addr, "0000:00:1f.7");
            assert!(path.ends_with("sys/bus/pci/devices/0000:00:1f.7"), "{path}");
        }
        other => panic!("{:?}", other.map(|_| ())),
    }
    assert!(matches!(
        LinuxPci::peek_ids("0000:00:1f.7", &f.opts()),
        Err(LinuxPciError::NoSuchDevice { .. })
    ));
    assert_eq!(
        LinuxPci::peek_ids(ADDR, &f.opts()).unwrap(),
        (0x8086, 0x15f3)
    );
}

#[test]
fn a_device_bound_to_a_kernel_driver_is_refused_and_left_alone() {
    let f = Fake::new();
    f.bind_link("igc");
    let e = open_err(&f.opts());
    assert_eq!(
        e,
        LinuxPciError::BoundToDriver {
            addr: ADDR.into(),
            driver: "igc".into()
        }
    );
    let msg = e.to_string();
    assert!(
        msg.contains("--unbind") && msg.contains("/sys/bus/pci/drivers/igc/unbind"),
        "{msg}"
    );
    assert!(f.untouched(), "{:?}", f.writes());
}

#[test]
fn a_failed_bind_after_unbind_gives_the_device_back_to_its_driver() {
    // The fake kernel binds nothing: after unbind + drivers_probe, `driver` still says igc.
    let f = Fake::new();
    f.bind_link("igc");
    let opts = LinuxPciOptions {
        unbind: true,
        ..f.opts()
    };
    match open_err(&opts) {
        LinuxPciError::BindFailed { driver, detail, .. } => {
            assert_eq!(driver, UIO_DRIVER);
            assert!(detail.contains("igc"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    let w: std::collections::HashMap<_, _> = f.writes().into_iter().collect();
    assert_eq!(w["igc/unbind"], ADDR, "unbound first");
    assert_eq!(w["drivers_probe"], ADDR, "then probed");
    // Undone in reverse: the override cleared, the original driver bound again.
    assert_eq!(w["driver_override"], "\n");
    assert_eq!(w["igc/bind"], ADDR);
    assert_eq!(
        w["uio_pci_generic/unbind"], "",
        "never bound, so never unbound"
    );
}

#[test]
fn a_missing_module_is_a_typed_error_and_changes_nothing() {
    let f = Fake::new();
    fs::remove_dir_all(f.drivers().join("uio_pci_generic")).unwrap();
    match open_err(&f.opts()) {
        LinuxPciError::ModuleMissing { module, .. } => assert_eq!(module, UIO_DRIVER),
        other => panic!("{other:?}"),
    }
    // A modprobe that fails: its failure is reported.
    let opts = LinuxPciOptions {
        modprobe: Some("false".into()),
        unbind: true,
        ..f.opts()
    };
    f.bind_link("igc");
    match open_err(&opts) {
        LinuxPciError::ModuleMissing { module, detail } => {
            assert_eq!(module, UIO_DRIVER);
            assert!(detail.contains("false uio_pci_generic"), "{detail}");
        }
        other => panic!("{other:?}"),
    }
    // Checked before unbinding: igc still has it.
    assert!(f.untouched(), "{:?}", f.writes());
}

/// A kernfs attribute with no store method: opening it for writing is refused even to root.
fn read_only_kernfs_file() -> PathBuf {
    [
        "/sys/kernel/mm/transparent_hugepage/hpage_pmd_size",
        "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages",
        "/sys/kernel/profiling",
    ]
    .iter()
    .map(PathBuf::from)
    .find(|p| fs::OpenOptions::new().write(true).open(p).is_err() && p.exists())
    .expect("no read-only kernfs attribute to stand in for a refused sysfs write")
}

#[test]
fn a_refused_sysfs_write_is_permission_denied() {
    let f = Fake::new();
    let ov = f.dev_dir().join("driver_override");
    fs::remove_file(&ov).unwrap();
    std::os::unix::fs::symlink(read_only_kernfs_file(), &ov).unwrap();
    match open_err(&f.opts()) {
        LinuxPciError::PermissionDenied { what } => {
            assert!(what.contains("driver_override"), "{what}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        f.read("sys/bus/pci/drivers_probe"),
        "",
        "stopped at the refused step"
    );
}

/// Run in a child as uid 65534 by `not_root_is_permission_denied` (ignored on its own).
#[test]
#[ignore]
fn child_open_as_nobody() {
    let Ok(root) = std::env::var("PTP_PCI_FAKE_ROOT") else {
        return;
    };
    let opts = LinuxPciOptions {
        modprobe: None,
        sysfs: Path::new(&root).join("sys"),
        dev: Path::new(&root).join("dev"),
        pagemap: Path::new(&root).join("proc/pagemap"),
        ..LinuxPciOptions::default()
    };
    match LinuxPci::open(ADDR, &opts) {
        Err(LinuxPciError::PermissionDenied { what }) => println!("CHILD-DENIED {what}"),
        other => panic!("as uid 65534: {:?}", other.map(|_| ())),
    }
}

#[test]
fn not_root_is_permission_denied() {
    use std::os::unix::process::CommandExt;
    // Safety: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        // Already not root: the check itself.
        let f = Fake::new();
        assert!(matches!(
            open_err(&f.opts()),
            LinuxPciError::PermissionDenied { .. }
        ));
        return;
    }
    let f = Fake::new();
    for dir in ["", "sys", "sys/bus", "sys/bus/pci", "sys/bus/pci/devices"] {
        fs::set_permissions(f.root.join(dir), fs::Permissions::from_mode(0o755)).unwrap();
    }
    let out = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "linux::tests::child_open_as_nobody",
            "--ignored",
            "--nocapture",
        ])
        .env("PTP_PCI_FAKE_ROOT", &f.root)
        .uid(65534)
        .gid(65534)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("CHILD-DENIED running as uid 65534"), "{text}");
    assert!(f.untouched());
}

#[test]
fn already_bound_to_uio_it_opens_config_bars_and_the_intx_line() {
    let f = Fake::new();
    f.bind_link(UIO_DRIVER);
    let mut pci = LinuxPci::open(ADDR, &f.opts()).expect("open");
    assert!(f.untouched(), "no rebinding needed: {:?}", f.writes());
    let ids = pci.ids();
    assert_eq!(
        (ids.vendor, ids.device, ids.class, ids.revision),
        (0x8086, 0x15f3, 2, 3)
    );
    assert_eq!(pci.address(), ADDR);
    assert_eq!(pci.driver_name(), UIO_DRIVER);
    // Memory decoding, bus mastering and INTx-disable set, through the config file.
    let cmd = fs::read(f.dev_dir().join("config")).unwrap();
    let cmd = u16::from_le_bytes([cmd[4], cmd[5]]);
    assert_eq!(
        cmd,
        COMMAND_MEMORY | COMMAND_BUS_MASTER | COMMAND_INTX_DISABLE
    );
    // BAR0 is the resource0 file, mapped shared: a register write lands in it.
    let bar = pci.map_bar(0).unwrap();
    bar.write32(0xB600, 0x1234_5678);
    assert_eq!(bar.read32(0xB600), 0x1234_5678);
    let mut word = [0u8; 4];
    fs::File::open(f.dev_dir().join("resource0"))
        .unwrap()
        .read_exact_at(&mut word, 0xB600)
        .unwrap();
    assert_eq!(u32::from_le_bytes(word), 0x1234_5678);
    assert_eq!(pci.map_bar(2).unwrap_err(), PciError::NotMemoryBar(2));
    assert_eq!(pci.map_bar(1).unwrap_err(), PciError::NoSuchBar(1));
    assert_eq!(pci.map_bar(6).unwrap_err(), PciError::NoSuchBar(6));
    // UIO offers the INTx line only; MSI-X is refused, INTx given once.
    let s = pci.irq_support();
    assert_eq!((s.msix_entries, s.msi, s.legacy_line), (0, false, Some(11)));
    assert!(pci.alloc_irq_mode(IrqMode::MsiX { vectors: 2 }).is_err());
    assert_eq!(
        pci.alloc_irq_mode(IrqMode::Legacy { line: 11 })
            .unwrap()
            .len(),
        1
    );
    assert!(pci.alloc_irq_mode(IrqMode::Legacy { line: 11 }).is_err());
    let cmd = fs::read(f.dev_dir().join("config")).unwrap();
    assert_eq!(
        u16::from_le_bytes([cmd[4], cmd[5]]) & COMMAND_INTX_DISABLE,
        0,
        "INTx enabled"
    );
}

#[test]
fn dma_with_a_pagemap_that_hides_frames_is_a_typed_error() {
    let f = Fake::new();
    f.bind_link(UIO_DRIVER);
    let mut pci = LinuxPci::open(ADDR, &f.opts()).unwrap();
    // An empty pagemap reads short: an error, never a made-up address.
    assert!(pci.alloc_dma(4096).is_err());
    // Unit: entries as an unprivileged reader sees them (present, PFN 0).
    let path = f.root.join("proc/pagemap");
    let pm = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    let va = 0x1234_5000usize + 0x18;
    let slot = (va / 4096) as u64 * 8;
    pm.write_all_at(&(1u64 << 63).to_le_bytes(), slot).unwrap();
    assert_eq!(
        phys_addr(&pm, &path, va).unwrap_err(),
        LinuxPciError::PfnHidden {
            pagemap: path.display().to_string()
        }
    );
    pm.write_all_at(&((1u64 << 63) | 0xabcde).to_le_bytes(), slot)
        .unwrap();
    assert_eq!(phys_addr(&pm, &path, va).unwrap(), 0xabcde * 4096 + 0x18);
    pm.write_all_at(&0xabcdeu64.to_le_bytes(), slot).unwrap();
    assert!(matches!(
        phys_addr(&pm, &path, va),
        Err(LinuxPciError::Dma(_))
    ));
    assert_eq!(
        decode_pagemap(1 << 63 | 1 << 55 | 7),
        PageFrame::Frame(7),
        "flag bits ignored"
    );
    assert_eq!(
        decode_pagemap(1 << 62 | 7),
        PageFrame::NotPresent,
        "swapped"
    );
}

#[test]
fn dma_memory_has_its_physical_address_from_the_real_pagemap() {
    // Safety: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return; // PFNs read 0 without root: covered by the test above.
    }
    let mut arena = dma::PhysArena::new("/proc/self/pagemap", None);
    let r = arena.alloc(4096).expect("one page is always contiguous");
    assert_ne!(r.bus_addr(), 0);
    assert_eq!(r.bus_addr() % 4096, 0);
    assert_eq!(r.read64(4088), 0, "zeroed");
    r.write64(8, u64::MAX);
    assert_eq!(r.read64(8), u64::MAX);
    assert!(matches!(arena.alloc(0), Err(LinuxPciError::Dma(_))));
    assert!(matches!(
        arena.alloc(dma::HUGEPAGE + 1),
        Err(LinuxPciError::Dma(_))
    ));
}

/// UIO's protocol: a 4-byte count per interrupt; the kernel set COMMAND.INTX_DISABLE, which
/// the vector clears once the driver is done (ack, or the next wait).
#[test]
fn a_uio_vector_fires_on_a_count_and_rearms_intx_through_config() {
    let f = Fake::new();
    let cfg_file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(f.dev_dir().join("config"))
        .unwrap();
    let cfg = Arc::new(ConfigSpace::new(Arc::new(cfg_file), 0));
    let mut fds = [0i32; 2];
    // Safety: pipe2 fills two descriptors.
    let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_NONBLOCK | libc::O_CLOEXEC) };
    assert_eq!(r, 0);
    // Safety: the descriptors are new and owned here.
    let (rd, wr) = unsafe { (fs::File::from_raw_fd(fds[0]), fs::File::from_raw_fd(fds[1])) };
    let irq = LinuxIrq::uio(rd, cfg.clone());
    let t = Instant::now();
    assert_eq!(irq.wait(Duration::from_millis(20)), IrqWait::TimedOut);
    assert!(t.elapsed() >= Duration::from_millis(20));
    // The interrupt: the kernel masks INTx, uio reports count 1.
    cfg.update_command(COMMAND_INTX_DISABLE, true).unwrap();
    (&wr).write_all_at_pipe(&1u32.to_le_bytes());
    assert_eq!(irq.wait(Duration::from_secs(5)), IrqWait::Fired);
    assert_ne!(
        cfg.command().unwrap() & COMMAND_INTX_DISABLE,
        0,
        "still masked while handled"
    );
    irq.ack();
    assert_eq!(
        cfg.command().unwrap() & COMMAND_INTX_DISABLE,
        0,
        "re-armed by ack"
    );
    // Without an ack, the next wait re-arms.
    cfg.update_command(COMMAND_INTX_DISABLE, true).unwrap();
    (&wr).write_all_at_pipe(&2u32.to_le_bytes());
    assert_eq!(irq.wait(Duration::from_secs(5)), IrqWait::Fired);
    assert_eq!(irq.wait(Duration::from_millis(1)), IrqWait::TimedOut);
    assert_eq!(
        cfg.command().unwrap() & COMMAND_INTX_DISABLE,
        0,
        "re-armed by the next wait"
    );
    // Re-armed once only: an ack after the wait's re-arm writes nothing more.
    irq.ack();
    assert_eq!(cfg.command().unwrap() & COMMAND_INTX_DISABLE, 0);
    drop(wr);
    assert_eq!(
        irq.wait(Duration::from_secs(5)),
        IrqWait::Closed,
        "writer gone"
    );
}

trait PipeWrite {
    fn write_all_at_pipe(self, data: &[u8]);
}

impl PipeWrite for &fs::File {
    fn write_all_at_pipe(self, data: &[u8]) {
        use std::io::Write;
        let mut w = self;
        w.write_all(data).unwrap();
    }
}

use std::os::fd::FromRawFd;

/// Without an IOMMU, open maps the first DMA hugepage itself: a setup without hugepages (or
/// whose pagemap cannot be read) fails inside open, where a binding is still undone.
#[test]
fn open_fails_early_when_dma_memory_cannot_be_had() {
    let f = Fake::new();
    f.bind_link(UIO_DRIVER);
    let opts = LinuxPciOptions {
        reserve_dma: true,
        pagemap: f.root.join("proc/no-such-pagemap"),
        ..f.opts()
    };
    match open_err(&opts) {
        LinuxPciError::Io { what, .. } => assert!(what.contains("no-such-pagemap"), "{what}"),
        other => panic!("{other:?}"),
    }
    let meminfo = fs::read_to_string("/proc/meminfo").unwrap();
    let free = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("HugePages_Free:"))
        .map(|v| v.trim().parse::<u64>().unwrap());
    if free == Some(0) {
        // This host has no free hugepage: the typed error that says how to reserve some.
        let opts = LinuxPciOptions {
            reserve_dma: true,
            pagemap: "/proc/self/pagemap".into(),
            ..f.opts()
        };
        let e = open_err(&opts);
        assert!(matches!(e, LinuxPciError::NoHugepages { .. }), "{e:?}");
        assert!(e.to_string().contains("/proc/sys/vm/nr_hugepages"), "{e}");
    }
}
