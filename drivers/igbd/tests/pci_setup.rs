//! `igbd --pci` on this host with an address that does not exist (issue 15, test 3).

#![cfg(target_os = "linux")]

#[test]
fn a_missing_address_exits_1_naming_it() {
    let addr = "ffff:ff:1f.6";
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_igbd"))
        .args(["--pci", addr, "--channel", "/nonexistent/igbd.sock"])
        .output()
        .expect("igbd runs");
    let e = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("igbd: ERROR: no PCI device {addr}")),
        "{e}"
    );
}
