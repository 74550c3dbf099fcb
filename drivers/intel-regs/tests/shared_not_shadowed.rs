//! `igc` and `igb` re-export `e1000` with a glob, and a glob import gives way silently to an item
//! of the same name. A family that declared a shared name again would make `igb::X` and
//! `e1000::X` two constants that can drift apart while code written for both families uses
//! `e1000::X`. This reads the three sources and fails on any such redeclaration.

use std::collections::BTreeSet;

/// Every `pub const` / `pub const fn` / `pub mod` item of a register-map source, as its module
/// path (`ctrl::RST`, `ral`, `rah`, `mdic`).
fn items(src: &str) -> BTreeSet<String> {
    let mut path: Vec<&str> = Vec::new();
    let mut out = BTreeSet::new();
    for line in src.lines() {
        let t = line.trim_start();
        let name = |rest: &str| {
            rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                .next()
                .unwrap_or_default()
                .to_string()
        };
        let full = |n: String| path.iter().map(|p| format!("{p}::")).collect::<String>() + &n;
        if let Some(rest) = t.strip_prefix("pub mod ") {
            out.insert(format!("mod {}", full(name(rest))));
            if t.ends_with('{') {
                path.push(rest.split(' ').next().unwrap_or_default());
            }
        } else if let Some(rest) = t.strip_prefix("pub const fn ") {
            out.insert(full(name(rest)));
        } else if let Some(rest) = t.strip_prefix("pub const ") {
            out.insert(full(name(rest)));
        } else if line.starts_with('}') {
            path.pop();
        }
    }
    out
}

const E1000: &str = include_str!("../src/e1000.rs");

#[test]
fn the_parser_sees_nested_and_top_level_items() {
    let e = items(E1000);
    for want in [
        "CTRL",
        "ral",
        "mdic::READY",
        "mod mdic",
        "reg::CTRL",
        "mod reg",
        "mod rah",
        "rah::AV",
        "txd::RS",
    ] {
        assert!(e.contains(want), "{want} not found in e1000.rs: {e:?}");
    }
}

#[test]
fn no_family_redeclares_a_shared_item() {
    let shared = items(E1000);
    for (family, src) in [
        ("igc", include_str!("../src/igc.rs")),
        ("igb", include_str!("../src/igb.rs")),
    ] {
        // A family extends a shared group by redeclaring the module (`pub mod ctrl` with
        // `pub use crate::e1000::ctrl::*` inside); its constants must be new names.
        let again: Vec<_> = items(src)
            .into_iter()
            .filter(|i| !i.starts_with("mod ") && shared.contains(i))
            .collect();
        assert!(
            again.is_empty(),
            "{family} redeclares e1000 items: {again:?}"
        );
    }
}
