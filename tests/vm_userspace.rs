//! Issue 15, tests 1 and 3 in a Linux guest: our binaries (the multi-call `ptplab`: igcd, ptpd,
//! ptpctl) run inside a guest whose NIC is our i225 model served over x-pci-proxy-dev, with
//! Linux's igc kept off it (`modprobe.blacklist=igc`), the userspace-driver modules on offer and
//! hugepages reserved at boot.
//!
//! Needs the VM packages (see tests/vm_igc.rs); fails with the apt-get line without them.

use std::ffi::OsString;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use redox_ptp::vm::{CmdOutput, GuestSetup, Vm, VmConfig};

/// One VM at a time: TCG guests on a 2-core machine starve each other.
static ONE_VM: Mutex<()> = Mutex::new(());

const CMD: Duration = Duration::from_secs(60);
/// 2 MiB pages reserved at boot: DMA memory for a driver without an IOMMU.
const HUGEPAGES: u32 = 32;
/// Finds the model's PCI address in the guest: the one Intel Ethernet controller (class
/// 0x0200) on QEMU's bus.
const FIND_NIC: &str = "for d in /sys/bus/pci/devices/*; do \
                        [ $(cat $d/vendor) = 0x8086 ] && [ $(cat $d/class) = 0x020000 ] \
                        && basename $d; done; true";

struct Guest {
    vm: Vm,
    dir: PathBuf,
    _one: std::sync::MutexGuard<'static, ()>,
}

impl Drop for Guest {
    fn drop(&mut self) {
        if !std::thread::panicking() {
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// A new directory under the temporary directory, unique to this process and moment.
fn fresh_dir(tag: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "redox-ptp-{tag}-{}-{}",
        std::process::id(),
        ptp_ipc::time::mono_ns()
    ));
    std::fs::create_dir_all(&dir).unwrap();
    dir
}

/// Boots a guest with `setup`, its NIC our model (`devhost_args` for the model).
fn boot(tag: &str, setup: &GuestSetup, devhost_args: Vec<OsString>) -> Guest {
    let one = ONE_VM.lock().unwrap_or_else(|e| e.into_inner());
    let dir = fresh_dir(&format!("vmus-{tag}"));
    let exe = PathBuf::from(env!("CARGO_BIN_EXE_ptplab"));
    let cfg = VmConfig {
        devhost: vec![exe.into(), "devhost".into()],
        devhost_args,
        run_dir: dir.join("vm"),
        cache_dir: PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("vm-cache"),
        boot_timeout: Duration::from_secs(120),
    };
    let t0 = Instant::now();
    let vm = Vm::boot_with(&cfg, setup).unwrap_or_else(|e| panic!("[{tag}] {e}"));
    eprintln!("[{tag}] guest ready in {:.1} s", t0.elapsed().as_secs_f64());
    Guest { vm, dir, _one: one }
}

impl Guest {
    fn run(&mut self, cmd: &str) -> CmdOutput {
        let out = self
            .vm
            .run(cmd, CMD)
            .unwrap_or_else(|e| panic!("{cmd}: {e}"));
        eprintln!("$ {cmd}  (rc {})\n{}", out.rc, out.text());
        out
    }

    fn run_ok(&mut self, cmd: &str) -> String {
        let out = self.run(cmd);
        assert_eq!(out.rc, 0, "{cmd} failed:\n{}", out.text());
        out.text()
    }

    /// The NIC's PCI address (`0000:00:0N.0`).
    fn nic_addr(&mut self) -> String {
        let a = self.run_ok(FIND_NIC).trim().to_string();
        assert!(
            a.starts_with("0000:"),
            "the model's function not found: {a:?}"
        );
        a
    }

    /// The driver bound to `addr`, or "" if none.
    fn driver_of(&mut self, addr: &str) -> String {
        let d = format!("/sys/bus/pci/devices/{addr}/driver");
        self.run(&format!("[ -e {d} ] && basename $(readlink {d})"))
            .text()
            .trim()
            .to_string()
    }
}

fn userspace_setup() -> GuestSetup {
    GuestSetup::userspace(vec![env!("CARGO_BIN_EXE_ptplab").into()], HUGEPAGES)
}

/// The guest carries what a userspace driver needs, and nothing binds the NIC before it:
/// igc is blacklisted (not loaded, the function driverless), our binary runs, the hugepages
/// are reserved, the uio and VFIO modules load by name, and uio_pci_generic takes the model's
/// function (a /dev/uio node appears, its config space readable through sysfs).
#[test]
fn guest_plumbing_for_a_userspace_driver() {
    let mut g = boot("plumbing", &userspace_setup(), Vec::new());
    let console = g.vm.console_lines();
    assert!(
        console.iter().any(|l| l.text == "@@IGC-BLACKLISTED"),
        "/init did not see the blacklist"
    );
    assert_eq!(g.run("[ -e /sys/module/igc ]").rc, 1, "igc is loaded");
    let addr = g.nic_addr();
    assert_eq!(g.driver_of(&addr), "", "something bound the NIC");
    let help = g.run("ptplab igcd --help");
    assert!(help.text().contains("--emulate"), "{}", help.text());
    let huge = g.run_ok("grep HugePages_Total /proc/meminfo");
    let total: u32 = huge.split_whitespace().nth(1).unwrap().parse().unwrap();
    assert_eq!(total, HUGEPAGES, "{huge}");
    g.run_ok("modprobe vfio-pci && modprobe vfio_iommu_type1 && [ -e /dev/vfio/vfio ]");
    g.run_ok("modprobe uio_pci_generic && [ -d /sys/module/uio ]");
    let dev = g.run_ok(&format!("cat /sys/bus/pci/devices/{addr}/device"));
    let dev = dev.trim().trim_start_matches("0x").to_string();
    g.run_ok(&format!(
        "echo 8086 {dev} > /sys/bus/pci/drivers/uio_pci_generic/new_id"
    ));
    assert_eq!(g.driver_of(&addr), "uio_pci_generic");
    let uio = g.run_ok(&format!("ls /sys/bus/pci/devices/{addr}/uio"));
    assert!(uio.trim().starts_with("uio"), "{uio}");
    g.run_ok(&format!("[ -c /dev/{} ]", uio.trim()));
    // Vendor and device ID, little-endian, through the sysfs config file.
    let id = g.run_ok(&format!(
        "hexdump -n 4 -e '4/1 \"%02x\"' /sys/bus/pci/devices/{addr}/config; echo"
    ));
    assert_eq!(id.trim(), format!("8680{}{}", &dev[2..], &dev[..2]));
}
