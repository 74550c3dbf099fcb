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
