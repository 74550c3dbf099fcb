//! `igcd --pci` on this host in bad setups (issue 15, test 3): each a clear message on stderr
//! and a non-zero exit, and nothing rebound.

#![cfg(target_os = "linux")]

use std::path::Path;
use std::process::{Command, Output};

fn igcd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_igcd"))
        .args(args)
        .env("RUST_LOG", "info")
        .output()
        .expect("igcd runs")
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_missing_address_exits_1_naming_it() {
    // Domain ffff does not exist on a PC (and certainly not bus ff device 1f function 7 in it).
    let addr = "ffff:ff:1f.7";
    assert!(!Path::new("/sys/bus/pci/devices").join(addr).exists());
    let o = igcd(&["--pci", addr, "--channel", "/nonexistent/igcd.sock"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let e = stderr(&o);
    assert!(
        e.contains(&format!(
            "no PCI device {addr}: /sys/bus/pci/devices/{addr} does not exist"
        )),
        "{e}"
    );
}

#[test]
fn a_malformed_address_exits_1_and_usage_errors_exit_2() {
    let o = igcd(&["--pci", "03:00", "--channel", "/nonexistent/igcd.sock"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("bad PCI address \"03:00\""),
        "{}",
        stderr(&o)
    );
    let o = igcd(&["--unbind", "--channel", "/nonexistent/igcd.sock"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(
        stderr(&o).contains("--unbind needs --pci ADDR"),
        "{}",
        stderr(&o)
    );
}

/// A device of this host that igcd does not drive (anything but an i225/i226) is refused from
/// its sysfs IDs before anything is rebound: its driver stays. Never passes --unbind here.
#[test]
fn a_device_igcd_does_not_drive_is_refused_and_stays_bound() {
    let Ok(dir) = std::fs::read_dir("/sys/bus/pci/devices") else {
        eprintln!("no /sys/bus/pci on this host: nothing to check");
        return;
    };
    let read = |p: &Path| std::fs::read_to_string(p).unwrap_or_default();
    let dev = dir
        .flatten()
        .map(|e| e.path())
        .find(|p| read(&p.join("vendor")).trim() != "0x8086" && p.join("device").exists());
    let Some(dev) = dev else {
        eprintln!("no non-Intel PCI device on this host: nothing to check");
        return;
    };
    let addr = dev.file_name().unwrap().to_string_lossy().into_owned();
    let driver_before = std::fs::read_link(dev.join("driver")).ok();
    let override_before = read(&dev.join("driver_override"));
    let o = igcd(&["--pci", &addr, "--channel", "/nonexistent/igcd.sock"]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let want = format!(
        "unsupported device {}:{}",
        read(&dev.join("vendor")).trim().trim_start_matches("0x"),
        read(&dev.join("device")).trim().trim_start_matches("0x")
    );
    assert!(stderr(&o).contains(&want), "{}: {}", want, stderr(&o));
    assert!(stderr(&o).contains("igcd drives i225/i226 parts only; nothing was rebound"));
    assert_eq!(std::fs::read_link(dev.join("driver")).ok(), driver_before);
    assert_eq!(read(&dev.join("driver_override")), override_before);
}
