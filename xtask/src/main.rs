//! `cargo xtask`: the project's test command and what it needs.
//!
//! - `cargo xtask test [--quick]`: provisions (below), then runs every gate in order (fmt,
//!   clippy, the workspace tests with the REQUIRE variables, mutants, fuzz, Redox clippy ×2,
//!   Redox imports), stopping at the first failure by name. `--quick` skips mutants and fuzz;
//!   `--from GATE` starts at the named gate (e.g. after fixing the one that failed).
//! - `cargo xtask provision [--dry-run]`: installs what the tests need, only what is missing:
//!   Debian packages, QEMU 10 unpacked from bookworm-backports (the suite added from the
//!   machine's own mirror when absent), rustfmt/clippy and the Redox target, redoxfs-ar and
//!   cargo-fuzz. `--dry-run` prints what it would do.
//! - `cargo xtask fresh-check [--quick] [--no-tests] [--keep]`: a new clone in a temporary
//!   directory, with apt seeing no backports suite and no QEMU 10 tree, runs the two README
//!   commands (the lab for 5 s, then `cargo xtask test`) and reports how long each took.
//!
//! Rust rather than a script: the decision (what is missing → what to run) is a pure function
//! with unit tests fed fake machine states (plan.rs), which a shell script could not have.
//! The gates that are scripts already (.ci/mutants, fuzz/run.sh, .ci/redox-imports) stay so.

mod apply;
mod fresh;
mod gates;
mod plan;
mod probe;

use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode};
use std::time::Instant;

/// Why a command failed; each says what to do.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("cannot provision what the tests need:\n{0}")]
    Blocked(String),
    #[error(
        "provisioning step failed: {why}\n  the step by hand: {step}\n  \
         once fixed, rerun: cargo xtask provision"
    )]
    Step { step: String, why: String },
    #[error("gate `{name}` failed: {why}")]
    Gate { name: &'static str, why: String },
    #[error(
        "the tests need root (TAP devices, network namespaces, switching to uid 65534; \
         REDOX_PTP_REQUIRE_TAP=1 makes their absence a failure): run as root, e.g. \
         `sudo env \"PATH=$PATH\" cargo xtask test`"
    )]
    NotRoot,
    #[error("fresh-check: {0}")]
    Fresh(String),
    #[error("{0}\n\n{USAGE}")]
    Usage(String),
}

const USAGE: &str = "usage: cargo xtask test [--quick] [--from GATE]
                                          provision, then every gate (from GATE on)
       cargo xtask provision [--dry-run]  install what the tests need (only what is missing)
       cargo xtask fresh-check [--quick] [--no-tests] [--keep]
                                          a new clone runs the two README commands";

fn main() -> ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match dispatch(&args) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("\nxtask: {e}");
            ExitCode::FAILURE
        }
    }
}

fn dispatch(args: &[String]) -> Result<(), Error> {
    let (cmd, flags) = args
        .split_first()
        .ok_or_else(|| Error::Usage("no command".into()))?;
    // `--from NAME`: the one option with a value, taken out before the flags are checked.
    let (from, flags) = take_value(flags, "--from")?;
    let flag = |name: &str| flags.iter().any(|f| f == name);
    let known: &[&str] = match cmd.as_str() {
        "test" => &["--quick"],
        "provision" => &["--dry-run"],
        "fresh-check" => &["--quick", "--no-tests", "--keep"],
        "help" | "--help" | "-h" => {
            println!("{USAGE}");
            return Ok(());
        }
        other => return Err(Error::Usage(format!("unknown command {other:?}"))),
    };
    if let Some(f) = flags.iter().find(|f| !known.contains(&f.as_str())) {
        return Err(Error::Usage(format!("unknown option {f:?} for {cmd}")));
    }
    if from.is_some() && cmd != "test" {
        return Err(Error::Usage(format!(
            "--from is an option of test, not {cmd}"
        )));
    }
    let repo = repo();
    match cmd.as_str() {
        "test" => {
            let gates = gates::select(flag("--quick"), from.as_deref()).map_err(Error::Usage)?;
            test(&repo, gates)
        }
        "provision" => apply::provision(&repo, flag("--dry-run")),
        _ => fresh::check(
            &repo,
            fresh::Options {
                quick: flag("--quick"),
                tests: !flag("--no-tests"),
                keep: flag("--keep"),
            },
        ),
    }
}

/// `flags` without `name VALUE`, and VALUE.
fn take_value(flags: &[String], name: &str) -> Result<(Option<String>, Vec<String>), Error> {
    let mut rest = Vec::new();
    let mut value = None;
    let mut it = flags.iter();
    while let Some(f) = it.next() {
        if f == name {
            let v = it
                .next()
                .ok_or_else(|| Error::Usage(format!("{name} needs a value")))?;
            value = Some(v.clone());
        } else {
            rest.push(f.clone());
        }
    }
    Ok((value, rest))
}

/// Provision, then the gates; a summary of each gate's time at the end.
fn test(repo: &Path, gates: Vec<gates::Gate>) -> Result<(), Error> {
    let start = Instant::now();
    apply::provision(repo, false)?;
    if !probe::probe(repo).root {
        return Err(Error::NotRoot);
    }
    let times = gates::run(repo, &gates)?;
    println!("\n== all {} gates passed", times.len());
    for (name, took) in times {
        println!("  {name:<34} {}", gates::secs(took));
    }
    println!(
        "  {:<34} {}",
        "total (with provisioning)",
        gates::secs(start.elapsed())
    );
    Ok(())
}

/// The workspace root (xtask/..).
fn repo() -> PathBuf {
    let here = Path::new(env!("CARGO_MANIFEST_DIR"));
    here.parent().unwrap_or(here).to_path_buf()
}

/// Drops the variables `cargo run` set for xtask itself, so a nested cargo (or a test reading
/// them at run time) sees its own.
pub fn scrub_cargo_env(cmd: &mut Command) {
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        if k.starts_with("CARGO_PKG_")
            || matches!(
                k,
                "CARGO_MANIFEST_DIR"
                    | "CARGO_MANIFEST_PATH"
                    | "CARGO_CRATE_NAME"
                    | "CARGO_BIN_NAME"
                    | "CARGO_PRIMARY_PACKAGE"
            )
        {
            cmd.env_remove(k);
        }
    }
}
