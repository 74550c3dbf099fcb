//! The pcid match files under `recipes/` list exactly the device IDs of the drivers' tables
//! (ids.rs), and the recipes install them where pcid-spawner looks (reference §2, §13).

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use intel_regs::ids::{IGB_PARTS, IGC_PARTS, Part, VENDOR_INTEL};

fn recipes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../recipes")
}

fn load(path: &Path) -> toml::Table {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    toml::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Every (vendor, device) a match file routes to `driver`, with duplicates kept so they can
/// be caught. Also checks the keys pcid's config understands and the entry's shape.
fn matched_ids(file: &Path, driver: &str) -> Vec<(u16, u16)> {
    let t = load(file);
    let entries = t
        .get("drivers")
        .and_then(|d| d.as_array())
        .unwrap_or_else(|| panic!("{}: no [[drivers]]", file.display()));
    let mut ids = Vec::new();
    let known = [
        "name",
        "class",
        "subclass",
        "interface",
        "vendor",
        "device",
        "ids",
        "device_id_range",
        "command",
    ];
    for e in entries {
        let e = e.as_table().expect("[[drivers]] entry is a table");
        for k in e.keys() {
            assert!(
                known.contains(&k.as_str()),
                "{}: unknown key {k}",
                file.display()
            );
        }
        let cmd = e
            .get("command")
            .and_then(|c| c.as_array())
            .expect("command is required");
        if cmd.first().and_then(|c| c.as_str()) != Some(driver) {
            continue;
        }
        assert_eq!(
            e.get("class").and_then(|c| c.as_integer()),
            Some(0x02),
            "{driver}: match network controllers only"
        );
        assert!(
            e.get("vendor").is_none() && e.get("device").is_none(),
            "{driver}: use `ids` (vendor/device are ignored next to it)"
        );
        let table = e.get("ids").and_then(|i| i.as_table()).expect("ids table");
        for (vendor, devices) in table {
            let v = u16::from_str_radix(vendor.trim_start_matches("0x"), 16)
                .unwrap_or_else(|_| panic!("vendor key {vendor} is not hex"));
            for d in devices.as_array().expect("device list") {
                let d = d.as_integer().expect("device id is an integer");
                ids.push((v, u16::try_from(d).expect("device id fits u16")));
            }
        }
    }
    ids
}

/// The match file of `driver` lists exactly the IDs of `parts`, each once.
fn check_match_file(driver: &str, parts: &[Part]) {
    let got = matched_ids(&recipes().join(format!("{driver}/{driver}.toml")), driver);
    let set: BTreeSet<(u16, u16)> = got.iter().copied().collect();
    assert_eq!(set.len(), got.len(), "duplicate IDs in {driver}.toml");
    let want: BTreeSet<(u16, u16)> = parts.iter().map(|p| (VENDOR_INTEL, p.device)).collect();
    let missing: Vec<_> = want.difference(&set).collect();
    let extra: Vec<_> = set.difference(&want).collect();
    assert!(
        missing.is_empty() && extra.is_empty(),
        "{driver}.toml vs its parts table: missing {missing:04x?}, extra {extra:04x?}"
    );
}

#[test]
fn igcd_match_file_lists_exactly_igc_parts() {
    check_match_file("igcd", IGC_PARTS);
}

#[test]
fn igbd_match_file_lists_exactly_igb_parts() {
    check_match_file("igbd", IGB_PARTS);
}

#[test]
fn no_device_is_claimed_by_two_drivers() {
    let igc: BTreeSet<u16> = IGC_PARTS.iter().map(|p| p.device).collect();
    let igb: BTreeSet<u16> = IGB_PARTS.iter().map(|p| p.device).collect();
    assert_eq!(igc.intersection(&igb).count(), 0);
}

#[test]
fn recipes_build_and_install_what_redox_expects() {
    let igcd = load(&recipes().join("igcd/recipe.toml"));
    let build = igcd["build"].as_table().expect("[build]");
    assert_eq!(build["template"].as_str(), Some("custom"));
    let script = build["script"].as_str().expect("script");
    for needle in [
        "--no-default-features",
        "/usr/lib/drivers/",
        "/usr/lib/pcid.d/",
        "recipes/${driver}/${driver}.toml",
        "DRIVERS=\"igcd igbd\"",
    ] {
        assert!(script.contains(needle), "igcd recipe lacks {needle}");
    }

    let ptpd = load(&recipes().join("ptpd/recipe.toml"));
    let script = ptpd["build"]["script"].as_str().expect("script");
    for needle in [
        "-p ptpd",
        "-p ptpctl",
        "/usr/bin",
        "/usr/lib/init.d/",
        "/etc/ptpd.toml",
    ] {
        assert!(script.contains(needle), "ptpd recipe lacks {needle}");
    }
    for f in ["ptpd.service", "ptpd.toml"] {
        assert!(
            script.contains(&format!("recipes/ptpd/{f}")),
            "ptpd recipe lacks {f}"
        );
    }

    let unit = load(&recipes().join("ptpd/ptpd.service"));
    assert_eq!(unit["service"]["cmd"].as_str(), Some("/usr/bin/ptpd"));
    assert_eq!(unit["service"]["type"].as_str(), Some("notify"));
}

/// A broken match file must fail the check: the checker itself is tested on bad input.
#[test]
fn checker_catches_missing_and_extra_ids() {
    let dir = std::env::temp_dir().join(format!("pcid-match-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let f = dir.join("igcd.toml");
    std::fs::write(
        &f,
        "[[drivers]]\nclass = 0x02\nids = { 0x8086 = [0x15F2, 0x1234, 0x1234] }\ncommand = [\"igcd\"]\n",
    )
    .unwrap();
    let got = matched_ids(&f, "igcd");
    assert_eq!(
        got,
        vec![(0x8086, 0x15F2), (0x8086, 0x1234), (0x8086, 0x1234)]
    );
    let set: BTreeSet<_> = got.iter().copied().collect();
    assert_ne!(set.len(), got.len());
    assert!(!IGC_PARTS.iter().any(|p| p.device == 0x1234));
    let _ = std::fs::remove_dir_all(&dir);
}
