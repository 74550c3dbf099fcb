//! The sysfs side of a function: its attributes, its driver, and binding it to a userspace
//! driver with every step undone if a later one fails.

use std::io::ErrorKind;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use super::{LinuxPciError, PciAddr};

/// A sysfs tree (`/sys` on a host; a directory of plain files in tests).
#[derive(Debug, Clone)]
pub struct Sysfs {
    root: PathBuf,
}

/// Maps an I/O error on `path` to a typed error: permission problems are their own kind.
pub(crate) fn io_err(what: &str, path: &Path, e: std::io::Error) -> LinuxPciError {
    match e.kind() {
        ErrorKind::PermissionDenied => LinuxPciError::PermissionDenied {
            what: format!("{what} {}: {e}", path.display()),
        },
        _ => LinuxPciError::Io {
            what: format!("{what} {}", path.display()),
            err: e.to_string(),
        },
    }
}

impl Sysfs {
    pub fn new(root: impl Into<PathBuf>) -> Self {
        Self { root: root.into() }
    }

    pub fn device_dir(&self, addr: &PciAddr) -> PathBuf {
        self.root.join("bus/pci/devices").join(addr.to_string())
    }

    pub fn driver_dir(&self, driver: &str) -> PathBuf {
        self.root.join("bus/pci/drivers").join(driver)
    }

    /// One attribute of the function, trimmed.
    pub fn attr(&self, addr: &PciAddr, name: &str) -> Result<String, LinuxPciError> {
        let p = self.device_dir(addr).join(name);
        std::fs::read_to_string(&p)
            .map(|s| s.trim().to_string())
            .map_err(|e| io_err("reading", &p, e))
    }

    /// A hexadecimal attribute (`0x8086`).
    pub fn hex_attr(&self, addr: &PciAddr, name: &str) -> Result<u32, LinuxPciError> {
        let s = self.attr(addr, name)?;
        u32::from_str_radix(s.trim_start_matches("0x"), 16).map_err(|_| LinuxPciError::Io {
            what: format!("{addr}/{name}"),
            err: format!("{s:?} is not hexadecimal"),
        })
    }

    /// Vendor and device ID from sysfs, without touching the device.
    pub fn ids(&self, addr: &PciAddr) -> Result<(u16, u16), LinuxPciError> {
        Ok((
            self.hex_attr(addr, "vendor")? as u16,
            self.hex_attr(addr, "device")? as u16,
        ))
    }

    /// The driver bound to the function, if any (the name its `driver` link points at).
    pub fn driver(&self, addr: &PciAddr) -> Option<String> {
        let link = std::fs::read_link(self.device_dir(addr).join("driver")).ok()?;
        Some(link.file_name()?.to_string_lossy().into_owned())
    }

    /// The IOMMU group the function is in, if the kernel has an IOMMU for it.
    pub fn iommu_group(&self, addr: &PciAddr) -> Option<u32> {
        let link = std::fs::read_link(self.device_dir(addr).join("iommu_group")).ok()?;
        link.file_name()?.to_str()?.parse().ok()
    }

    /// Writes `value` to an attribute file (one `write`, as sysfs wants).
    pub fn write(&self, path: &Path, value: &str) -> Result<(), LinuxPciError> {
        use std::io::Write;
        // Truncating, as a shell's `echo >` does (sysfs ignores it; plain files in tests need it).
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .open(path)
            .map_err(|e| io_err("opening", path, e))?;
        f.write_all(value.as_bytes())
            .map_err(|e| io_err("writing", path, e))
    }

    /// Makes sure `driver` is registered, loading its module with `modprobe` when given.
    pub fn ensure_driver(
        &self,
        driver: &str,
        modprobe: Option<&Path>,
    ) -> Result<(), LinuxPciError> {
        if self.driver_dir(driver).is_dir() {
            return Ok(());
        }
        let Some(modprobe) = modprobe else {
            return Err(LinuxPciError::ModuleMissing {
                module: driver.to_string(),
                detail: "not loaded, and loading modules is off".into(),
            });
        };
        let detail = match run_bounded(modprobe, driver, MODPROBE_TIMEOUT) {
            Ok(None) => String::new(),
            Ok(Some(stderr)) => format!("{} {driver}: {stderr}", modprobe.display()),
            Err(e) => format!("{}: {e}", modprobe.display()),
        };
        if self.driver_dir(driver).is_dir() {
            return Ok(());
        }
        Err(LinuxPciError::ModuleMissing {
            module: driver.to_string(),
            detail: if detail.is_empty() {
                "modprobe succeeded but the driver did not register".into()
            } else {
                detail
            },
        })
    }
}

/// How long `modprobe` may take.
const MODPROBE_TIMEOUT: Duration = Duration::from_secs(20);

/// Runs `prog arg`, killing it after `timeout`: `Ok(None)` on success, `Ok(Some(stderr))` on
/// failure.
fn run_bounded(prog: &Path, arg: &str, timeout: Duration) -> std::io::Result<Option<String>> {
    let mut child = Command::new(prog)
        .arg(arg)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()?;
    let deadline = Instant::now() + timeout;
    let status = loop {
        if let Some(st) = child.try_wait()? {
            break st;
        }
        if Instant::now() >= deadline {
            let _ = child.kill();
            let _ = child.wait();
            return Ok(Some(format!("still running after {timeout:?}; killed")));
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    if status.success() {
        return Ok(None);
    }
    let mut err = String::new();
    if let Some(mut e) = child.stderr.take() {
        use std::io::Read;
        let _ = e.read_to_string(&mut err);
    }
    Ok(Some(format!("{status}: {}", err.trim())))
}

/// One sysfs step already taken, and how to take it back.
#[derive(Debug)]
enum Undo {
    /// We unbound the function from this kernel driver: bind it back.
    Rebind(String),
    /// We set `driver_override`: clear it.
    ClearOverride,
    /// We bound the function to this driver: unbind it.
    Unbind(String),
}

/// Binding a function to a userspace driver. Dropped without [`Binding::keep`], it undoes its
/// steps in reverse, so a failure never leaves the function half-bound.
#[derive(Debug)]
pub struct Binding<'a> {
    sysfs: &'a Sysfs,
    addr: PciAddr,
    undo: Vec<Undo>,
}

impl<'a> Binding<'a> {
    pub fn new(sysfs: &'a Sysfs, addr: PciAddr) -> Self {
        Self {
            sysfs,
            addr,
            undo: Vec::new(),
        }
    }

    /// Unbinds the function from `driver`.
    pub fn unbind_from(&mut self, driver: &str) -> Result<(), LinuxPciError> {
        let p = self.sysfs.driver_dir(driver).join("unbind");
        self.sysfs.write(&p, &self.addr.to_string())?;
        self.undo.push(Undo::Rebind(driver.to_string()));
        log::info!("{}: unbound from {driver}", self.addr);
        Ok(())
    }

    /// Binds the (unbound) function to `driver` through `driver_override` and `drivers_probe`,
    /// and checks that it took: a driver's probe may refuse a device, which the write to
    /// `drivers_probe` does not report.
    pub fn bind_to(&mut self, driver: &str) -> Result<(), LinuxPciError> {
        let dev = self.sysfs.device_dir(&self.addr);
        self.sysfs.write(&dev.join("driver_override"), driver)?;
        self.undo.push(Undo::ClearOverride);
        let probe = self.sysfs.root.join("bus/pci/drivers_probe");
        self.sysfs.write(&probe, &self.addr.to_string())?;
        match self.sysfs.driver(&self.addr) {
            Some(d) if d == driver => {
                self.undo.push(Undo::Unbind(driver.to_string()));
                log::info!("{}: bound to {driver}", self.addr);
                Ok(())
            }
            other => Err(LinuxPciError::BindFailed {
                addr: self.addr.to_string(),
                driver: driver.to_string(),
                detail: match other {
                    Some(d) => format!("{d} took it instead"),
                    None => "its probe refused the device (see dmesg)".into(),
                },
            }),
        }
    }

    /// Keeps what was done: the function stays bound.
    pub fn keep(mut self) {
        self.undo.clear();
    }

    fn undo_one(&self, step: &Undo) -> Result<(), LinuxPciError> {
        let addr = self.addr.to_string();
        let dev = self.sysfs.device_dir(&self.addr);
        match step {
            Undo::Unbind(d) => self
                .sysfs
                .write(&self.sysfs.driver_dir(d).join("unbind"), &addr),
            // A newline clears the override.
            Undo::ClearOverride => self.sysfs.write(&dev.join("driver_override"), "\n"),
            Undo::Rebind(d) => self
                .sysfs
                .write(&self.sysfs.driver_dir(d).join("bind"), &addr),
        }
    }
}

impl Drop for Binding<'_> {
    fn drop(&mut self) {
        while let Some(step) = self.undo.pop() {
            match self.undo_one(&step) {
                Ok(()) => log::info!("{}: undone: {step:?}", self.addr),
                Err(e) => log::error!("{}: undoing {step:?}: {e}", self.addr),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_hanging_modprobe_is_killed_at_its_deadline() {
        let t = Instant::now();
        let r = run_bounded(Path::new("sleep"), "30", Duration::from_millis(200)).unwrap();
        assert!(r.unwrap().contains("killed"));
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(
            run_bounded(Path::new("true"), "x", Duration::from_secs(10)).unwrap(),
            None
        );
        let e = run_bounded(Path::new("false"), "x", Duration::from_secs(10)).unwrap();
        assert!(e.unwrap().contains("exit status: 1"));
    }
}
