//! Log output on Redox: stderr, plus a file in the `logging` scheme once the PCI name is known
//! (`/scheme/logging/net/pci/<name>_<family>.log`, the category NIC drivers use, reference §11).
//! The file must be opened before `setrens` (§10). `/scheme/logging` may appear after igcd starts,
//! so opening is retried until the sandbox is entered (`startup::Deferred`, on the sandbox
//! thread); without it, stderr alone remains. A fresh ramfs@logging has no `net/pci/`: it is
//! created.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::sync::{Mutex, OnceLock};

static FILE: OnceLock<Mutex<File>> = OnceLock::new();

/// The env_logger target: every record to stderr, and to the log file when open.
pub struct Tee;

impl Write for Tee {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if let Some(f) = FILE.get() {
            // A failing log file must not take the driver down: the record is on stderr.
            let _ = f.lock().unwrap_or_else(|e| e.into_inner()).write_all(buf);
        }
        std::io::stderr().write_all(buf)?;
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

/// Opens the log file for function `name` (creating its directory), and returns its path; the
/// error names what failed, for the log line of the attempt that gives up.
pub fn open(name: &str, short: &str) -> Result<String, String> {
    const DIR: &str = "/scheme/logging/net/pci";
    let path = format!("{DIR}/{name}_{short}.log");
    if FILE.get().is_some() {
        return Ok(path);
    }
    std::fs::create_dir_all(DIR).map_err(|e| format!("{DIR}: {e}"))?;
    let f = OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(|e| format!("{path}: {e}"))?;
    let _ = FILE.set(Mutex::new(f));
    Ok(path)
}
