//! A one-host lab for system tests: igcd on an emulated i225 and ptpd, as real processes
//! started through the `ptplab` multi-call binary, in a private temporary directory.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::Duration;

use ptpd::client::Client;
use redox_ptp::lab::{self, HostPaths};
use redox_ptp::procs::Children;

pub fn exe() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_ptplab"))
}

/// A temporary directory removed on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        let p = std::env::temp_dir().join(format!(
            "redox-ptp-test-{tag}-{}-{}",
            std::process::id(),
            ptp_ipc::time::mono_ns()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

pub struct Host {
    pub kids: Children,
    pub paths: HostPaths,
    pub osc_ppm: f64,
    // Last, so the directory goes after the processes.
    pub dir: TempDir,
}

impl Host {
    /// Starts igcd (oscillator `osc_ppm` off) and ptpd (with `extra` config), waits until ready.
    pub fn start(tag: &str, osc_ppm: f64, extra: &str) -> Self {
        Self::start_nic(tag, "i225", osc_ppm, extra, |_| Vec::new())
    }

    /// [`Self::start`] on emulated `nic` (igcd or igbd), the driver given the arguments
    /// `driver_args` returns for the host's directory.
    pub fn start_nic(
        tag: &str,
        nic: &str,
        osc_ppm: f64,
        extra: &str,
        driver_args: impl FnOnce(&Path) -> Vec<String>,
    ) -> Self {
        let dir = TempDir::new(tag);
        let paths = HostPaths::new(&dir.0, 0);
        std::fs::create_dir_all(&paths.dir).unwrap();
        let args = driver_args(&paths.dir);
        let mut kids = Children::default();
        lab::spawn_igcd(&mut kids, &exe(), &paths, 0, nic, osc_ppm, &args).unwrap();
        lab::spawn_ptpd(&mut kids, &exe(), &paths, 0, extra).unwrap();
        let host = Self {
            kids,
            paths,
            osc_ppm,
            dir,
        };
        host.ready();
        host
    }

    pub fn ready(&self) -> Client {
        lab::wait_ready(&self.paths, Duration::from_secs(10))
            .unwrap_or_else(|e| panic!("{e}\nlogs:\n{}", self.logs()))
    }

    pub fn client(&self) -> Client {
        Client::connect(&self.paths.socket).unwrap()
    }

    pub fn kill_igcd(&mut self) {
        self.kids.stop("host0/igcd");
    }

    pub fn start_igcd(&mut self) {
        lab::spawn_igcd(
            &mut self.kids,
            &exe(),
            &self.paths,
            0,
            "i225",
            self.osc_ppm,
            &[],
        )
        .unwrap();
    }

    pub fn socket(&self) -> &Path {
        &self.paths.socket
    }

    pub fn logs(&self) -> String {
        ["igcd.log", "igbd.log", "ptpd.log"]
            .iter()
            .map(|f| {
                format!(
                    "--- {f}\n{}",
                    std::fs::read_to_string(self.paths.dir.join(f)).unwrap_or_default()
                )
            })
            .collect()
    }

    /// Runs `ptplab ptpctl ARGS` against this host.
    pub fn ptpctl(&self, args: &[&str]) -> Output {
        Command::new(exe())
            .arg("ptpctl")
            .arg("--socket")
            .arg(self.socket())
            .args(args)
            .output()
            .unwrap()
    }
}
