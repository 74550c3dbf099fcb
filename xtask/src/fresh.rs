//! `cargo xtask fresh-check`: the two README commands in a new clone, as on a fresh machine
//! as far as this one can pretend without being changed: apt sees bookworm's stock sources (no
//! backports suite) and empty package lists through a sandboxed `APT_CONFIG`, and the QEMU 10
//! tree is a new empty location, so provisioning adds the suite, fetches the lists and unpacks
//! QEMU 10 for real. What cannot be pretended safely: Debian packages that are installed stay
//! installed (removing them would break the other builds sharing the machine); the decision
//! for a machine without them is unit-tested in plan.rs and shown by `provision --dry-run`.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;
use crate::gates::secs;
use crate::plan::{BACKPORTS, QEMU10_ROOT_ENV, has_suite};

pub struct Options {
    pub quick: bool,
    /// Run `cargo xtask test`; without, only `cargo xtask provision` after the lab.
    pub tests: bool,
    pub keep: bool,
}

pub fn check(repo: &Path, opts: Options) -> Result<(), Error> {
    let work = std::env::temp_dir().join(format!("redox-ptp-fresh-{}", std::process::id()));
    std::fs::create_dir(&work).map_err(|e| Error::Fresh(format!("{}: {e}", work.display())))?;
    println!("fresh-check: working in {}", work.display());
    let result = run_in(repo, &work, &opts);
    if opts.keep {
        println!("fresh-check: kept {}", work.display());
    } else {
        let _ = std::fs::remove_dir_all(&work);
    }
    let times = result?;
    println!("\nfresh-check passed:");
    for (what, took) in times {
        println!("  {what:<48} {}", secs(took));
    }
    Ok(())
}

/// Sandbox, clone, then each command timed.
fn run_in(repo: &Path, work: &Path, opts: &Options) -> Result<Vec<(String, Duration)>, Error> {
    let dirty = crate::probe::stdout_of(
        Command::new("git")
            .arg("-C")
            .arg(repo)
            .args(["status", "--porcelain"]),
    );
    if dirty.is_some_and(|d| !d.trim().is_empty()) {
        println!(
            "fresh-check: note: uncommitted changes in {} are not in the clone",
            repo.display()
        );
    }
    let apt_config = apt_sandbox(&work.join("apt"))?;
    let clone = work.join("redox-ptp");
    step(
        Command::new("git")
            .arg("clone")
            .arg("--quiet")
            .arg(repo)
            .arg(&clone),
        "git clone",
    )?;
    // The kit is not in the repository; the clone finds it where the original does.
    let kit = std::env::var_os("REDOX_KIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo.join("../shared/redox-kit"));
    let env = [
        ("APT_CONFIG", apt_config),
        (QEMU10_ROOT_ENV, work.join("qemu10")),
        ("REDOX_KIT", kit.canonicalize().unwrap_or(kit)),
    ];
    let cargo = |args: &[&str]| {
        let mut c = Command::new("cargo");
        c.args(args)
            .current_dir(&clone)
            .envs(env.iter().map(|(k, v)| (k, v)));
        crate::scrub_cargo_env(&mut c);
        c
    };
    println!("\nfresh-check: what provisioning would do here:");
    step(
        &mut cargo(&["xtask", "provision", "--dry-run"]),
        "provision --dry-run",
    )?;
    let mut times = Vec::new();
    let lab = ["run", "--release", "--", "--duration", "5"];
    times.push(timed(
        &mut cargo(&lab),
        "cargo run --release -- --duration 5",
    )?);
    let test: Vec<&str> = match (opts.tests, opts.quick) {
        (false, _) => vec!["xtask", "provision"],
        (true, false) => vec!["xtask", "test"],
        (true, true) => vec!["xtask", "test", "--quick"],
    };
    times.push(timed(
        &mut cargo(&test),
        &format!("cargo {}", test.join(" ")),
    )?);
    Ok(times)
}

/// An apt configuration seeing the machine's sources minus any backports file, with its own
/// empty lists and cache (so the real ones are neither read nor written). Returns its path.
fn apt_sandbox(dir: &Path) -> Result<PathBuf, Error> {
    let io = |p: &Path, e: std::io::Error| Error::Fresh(format!("{}: {e}", p.display()));
    let parts = dir.join("sources.list.d");
    for d in [
        parts.clone(),
        dir.join("lists/partial"),
        dir.join("cache/archives/partial"),
    ] {
        std::fs::create_dir_all(&d).map_err(|e| io(&d, e))?;
    }
    let real = Path::new("/etc/apt");
    let mut files = vec![real.join("sources.list")];
    if let Ok(rd) = std::fs::read_dir(real.join("sources.list.d")) {
        // apt reads only these; other names (e.g. *.disabled) are left out.
        let read = |p: &PathBuf| p.extension().is_some_and(|e| e == "list" || e == "sources");
        files.extend(rd.flatten().map(|e| e.path()).filter(read));
    }
    let mut kept = Vec::new();
    for f in files {
        let Ok(text) = std::fs::read_to_string(&f) else {
            continue;
        };
        if has_suite(&[(f.clone(), text.clone())], BACKPORTS) {
            continue;
        }
        let dest = match f.parent() == Some(real) {
            true => dir.join("sources.list"),
            false => parts.join(f.file_name().unwrap_or_default()),
        };
        std::fs::write(&dest, &text).map_err(|e| io(&dest, e))?;
        kept.push(f.display().to_string());
    }
    let conf = dir.join("apt.conf");
    let text = format!(
        "Dir::Etc::sourcelist \"{d}/sources.list\";\nDir::Etc::sourceparts \"{d}/sources.list.d\";\n\
         Dir::State::lists \"{d}/lists\";\nDir::Cache \"{d}/cache\";\n",
        d = dir.display()
    );
    std::fs::write(&conf, text).map_err(|e| io(&conf, e))?;
    println!(
        "fresh-check: apt sandbox {} with {} (no {BACKPORTS}, no package lists)",
        conf.display(),
        kept.join(", ")
    );
    Ok(conf)
}

fn step(cmd: &mut Command, what: &str) -> Result<(), Error> {
    timed(cmd, what).map(|_| ())
}

/// Runs `cmd` (output shown) and returns its wall time; a failure names `what`.
fn timed(cmd: &mut Command, what: &str) -> Result<(String, Duration), Error> {
    println!("\n== fresh-check: {what}");
    let start = Instant::now();
    let status = cmd
        .status()
        .map_err(|e| Error::Fresh(format!("{what}: {e}")))?;
    let took = start.elapsed();
    if !status.success() {
        return Err(Error::Fresh(format!(
            "{what} failed ({status}) after {}",
            secs(took)
        )));
    }
    println!("== fresh-check: {what} ok ({})", secs(took));
    Ok((what.to_string(), took))
}
