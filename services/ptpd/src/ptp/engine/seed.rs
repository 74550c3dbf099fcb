//! Seeds for the ports' random number generators: statime draws the jitter of Delay_Req and
//! Announce timing from them. Not secrets, but two ptpds on one network should not draw the
//! same sequence, and a missing entropy device must not stop PTP.
//!
//! Booting ptpd on the Redox test kit's image (issue 27) found `StdRng::from_entropy` panicking
//! the engine thread with "No such device": getrandom 0.2 reads `/dev/urandom` on Redox, and an
//! image without a root file system has no `/dev`. The chain is now: the OS's source
//! (getrandom), then the entropy files named for the platform (`/scheme/rand` on Redox), then
//! the monotonic clock and the pid, with a warning that says why.

use std::io::Read;

use rand::rngs::{OsRng, StdRng};
use rand::{RngCore, SeedableRng};

/// Where a seed came from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SeedSource {
    /// The operating system's generator.
    Os,
    /// An entropy file (its path).
    File(String),
    /// Neither was available: the clock and the pid, with the reasons the others failed.
    Clock(Vec<String>),
}

/// Entropy files tried after the OS's generator.
#[cfg(target_os = "redox")]
pub const ENTROPY_FILES: &[&str] = &["/scheme/rand"];
#[cfg(not(target_os = "redox"))]
pub const ENTROPY_FILES: &[&str] = &[];

/// A seed from the first source that gives one: `os`, then each of `files`, then the clock.
pub fn seed_from(
    os: impl FnOnce() -> Result<u64, String>,
    files: &[&str],
    clock: impl FnOnce() -> u64,
) -> (u64, SeedSource) {
    let mut why = Vec::new();
    match os() {
        Ok(s) => return (s, SeedSource::Os),
        Err(e) => why.push(format!("OS generator: {e}")),
    }
    for f in files {
        let mut b = [0u8; 8];
        match std::fs::File::open(f).and_then(|mut h| h.read_exact(&mut b)) {
            Ok(()) => return (u64::from_le_bytes(b), SeedSource::File((*f).to_string())),
            Err(e) => why.push(format!("{f}: {e}")),
        }
    }
    (clock(), SeedSource::Clock(why))
}

fn os_seed() -> Result<u64, String> {
    let mut b = [0u8; 8];
    OsRng.try_fill_bytes(&mut b).map_err(|e| e.to_string())?;
    Ok(u64::from_le_bytes(b))
}

fn clock_seed() -> u64 {
    ptp_ipc::time::mono_ns() ^ (u64::from(std::process::id()) << 32)
}

/// The generator of port index `port` (logged as PTP port number `port + 1`): from `base` (the configured seed, for reproducible runs) or
/// from the chain above, logging a fallback.
pub fn port_rng(base: Option<u64>, port: usize) -> StdRng {
    if let Some(seed) = base {
        return StdRng::seed_from_u64(seed.wrapping_add(port as u64));
    }
    let (seed, source) = seed_from(os_seed, ENTROPY_FILES, clock_seed);
    match source {
        SeedSource::Os => {}
        SeedSource::File(f) => log::info!("port {}: random seed from {f}", port + 1),
        SeedSource::Clock(why) => log::warn!(
            "port {}: no entropy source ({}); random seed from the clock and the pid",
            port + 1,
            why.join("; ")
        ),
    }
    StdRng::seed_from_u64(seed.wrapping_add(port as u64))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_os_generator_comes_first() {
        let (s, src) = seed_from(|| Ok(7), &["/nonexistent"], || 9);
        assert_eq!((s, src), (7, SeedSource::Os));
    }

    #[test]
    fn a_missing_os_generator_falls_back_to_a_file_then_the_clock() {
        let dir = std::env::temp_dir().join(format!("ptpd-seed-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("rand");
        std::fs::write(&file, 0x1122_3344_5566_7788u64.to_le_bytes()).unwrap();
        let f = file.to_str().unwrap();
        let (s, src) = seed_from(|| Err("No such device".into()), &["/nonexistent", f], || 9);
        assert_eq!(
            (s, src),
            (0x1122_3344_5566_7788, SeedSource::File(f.into()))
        );
        // A file too short to give 8 bytes is no source either.
        std::fs::write(&file, [1, 2, 3]).unwrap();
        let (s, src) = seed_from(|| Err("No such device".into()), &["/nonexistent", f], || 9);
        assert_eq!(s, 9);
        let SeedSource::Clock(why) = src else {
            panic!("{src:?}")
        };
        assert_eq!(why.len(), 3, "{why:?}");
        assert!(why[0].contains("No such device"), "{why:?}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[test]
    fn configured_seeds_are_reproducible_and_differ_per_port() {
        let a = port_rng(Some(5), 0).next_u64();
        assert_eq!(a, port_rng(Some(5), 0).next_u64());
        assert_ne!(a, port_rng(Some(5), 1).next_u64());
    }
}
