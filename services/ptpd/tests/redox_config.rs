//! The default configuration the Redox recipe installs as /etc/ptpd.toml is valid.

use std::path::Path;

#[test]
fn recipe_default_config_parses() {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recipes/ptpd/ptpd.toml");
    let text = std::fs::read_to_string(&path).expect("recipes/ptpd/ptpd.toml");
    let c = ptpd::config::Config::from_str(&text, &path).expect("valid ptpd config");
    assert_eq!(c.clocks.len(), 1);
    let ch = c.clocks[0].channel.display().to_string();
    assert!(
        ch.starts_with("/scheme/ptpdrv.") && ch.ends_with("_igc/ptp"),
        "{ch}"
    );
}

/// The optional emulated-stack package: its ptpd configuration names the channel igcd serves
/// for `--name emu0`, and its init units run what the package installs.
#[test]
fn emulated_stack_recipe_is_consistent() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recipes/ptp-emu");
    let read = |f: &str| std::fs::read_to_string(dir.join(f)).expect(f);
    let path = dir.join("ptpd-emu.toml");
    let c = ptpd::config::Config::from_str(&read("ptpd-emu.toml"), &path).expect("valid");
    assert_eq!(c.clocks.len(), 1);
    assert_eq!(
        c.clocks[0].channel.display().to_string(),
        "/scheme/ptpdrv.emu0_igc/ptp"
    );
    let unit = |f: &str| -> toml::Value { toml::from_str(&read(f)).expect(f) };
    let igcd = unit("igcd-emu.service");
    assert_eq!(igcd["service"]["cmd"].as_str(), Some("/usr/bin/igcd-emu"));
    assert_eq!(igcd["service"]["type"].as_str(), Some("notify"));
    let args: Vec<&str> = igcd["service"]["args"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| a.as_str().unwrap())
        .collect();
    assert_eq!(
        args,
        ["--emulate", "i225", "--wire", "loopback", "--name", "emu0"]
    );
    let check = unit("ptp-emu-check.service");
    assert_eq!(check["service"]["cmd"].as_str(), Some("/usr/bin/ptpctl"));
    let recipe = read("recipe.toml");
    for installed in [
        "/usr/bin/igcd-emu",
        "/usr/lib/init.d/19_igcd_emu.service",
        "/usr/lib/init.d/29_ptp_emu_check.service",
        "/etc/ptpd-emu.toml",
    ] {
        assert!(recipe.contains(installed), "recipe installs {installed}");
    }
    // The emulator is in the default features the recipe builds with.
    assert!(!recipe.contains("--no-default-features"));
}
