//! Carries out a [`Plan`]'s actions, then checks that nothing is left to do.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

use crate::Error;
use crate::plan::{Action, BACKPORTS, Plan, QEMU10_PACKAGES, decide};
use crate::probe;

/// Prints the plan; with `dry_run` stops there. Otherwise refuses on a blocker (each with its
/// fix), runs every action, probes again and fails if anything is still missing.
pub fn provision(repo: &Path, dry_run: bool) -> Result<(), Error> {
    let start = Instant::now();
    let plan = decide(&probe::probe(repo));
    print_plan(&plan);
    if dry_run {
        return if plan.blockers.is_empty() {
            Ok(())
        } else {
            Err(blocked(&plan))
        };
    }
    if !plan.blockers.is_empty() {
        return Err(blocked(&plan));
    }
    if plan.actions.is_empty() {
        return Ok(());
    }
    for action in &plan.actions {
        println!("provision: {action}");
        apply(action)?;
    }
    let after = decide(&probe::probe(repo));
    if !after.actions.is_empty() {
        let left: Vec<String> = after.actions.iter().map(|a| a.to_string()).collect();
        return Err(Error::Blocked(format!(
            "still missing after provisioning; by hand:\n  {}",
            left.join("\n  ")
        )));
    }
    println!(
        "provision: everything present ({})",
        crate::gates::secs(start.elapsed())
    );
    Ok(())
}

fn blocked(plan: &Plan) -> Error {
    let lines: Vec<String> = plan.blockers.iter().map(|b| format!("- {b}")).collect();
    Error::Blocked(lines.join("\n"))
}

fn print_plan(plan: &Plan) {
    if plan.actions.is_empty() {
        println!("provision: nothing to install");
    } else {
        println!("provision: would run, in order:");
        for a in &plan.actions {
            let root = if a.needs_root() { " (root)" } else { "" };
            println!("  {a}{root}");
            if *a == Action::DowngradeQemuUtils {
                println!("      for QEMU 7.2: the installed backports qemu-utils Breaks it");
            }
            if let Action::AptInstall(pkgs) = a {
                for why in crate::plan::reasons(pkgs) {
                    println!("      for {why}");
                }
            }
        }
    }
}

/// One action; a failure names the step, why (with the likely cause) and the command to rerun.
fn apply(action: &Action) -> Result<(), Error> {
    let fail = |why: String| Error::Step {
        step: action.to_string(),
        why,
    };
    match action {
        Action::AddSource { file, line } => {
            if let Some(dir) = file.parent() {
                std::fs::create_dir_all(dir)
                    .map_err(|e| fail(format!("{}: {e}", dir.display())))?;
            }
            std::fs::write(file, format!("{line}\n"))
                .map_err(|e| fail(format!("{}: {e}", file.display())))
        }
        // --error-on=any: by default an unreachable mirror is only a warning, and the failure
        // would show later as "Release 'bookworm-backports' ... was not found".
        Action::AptUpdate => run(Command::new("apt-get").args(["update", "--error-on=any"]))
            .map_err(|e| {
                fail(format!(
                    "{e}: a Debian mirror could not be reached (network?)"
                ))
            }),
        Action::DowngradeQemuUtils => run(Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args([
                "install",
                "-y",
                "--no-install-recommends",
                "--allow-downgrades",
            ])
            .arg("qemu-utils/bookworm"))
        .map_err(|e| fail(format!("{e}: bookworm's qemu-utils could not be installed"))),
        Action::AptInstall(pkgs) => run(Command::new("apt-get")
            .env("DEBIAN_FRONTEND", "noninteractive")
            .args(["install", "-y", "--no-install-recommends"])
            .args(pkgs))
        .map_err(|e| {
            fail(format!(
                "{e}: a Debian mirror could not be reached (network?)"
            ))
        }),
        Action::UnpackQemu10 { root } => unpack_qemu10(root).map_err(fail),
        Action::RustupComponents(c) => {
            run(Command::new("rustup").args(["component", "add"]).args(c)).map_err(fail)
        }
        Action::RustupTarget(t) => {
            run(Command::new("rustup").args(["target", "add", t])).map_err(fail)
        }
        Action::CargoInstall { krate, version } => {
            let mut cmd = Command::new("cargo");
            cmd.args(["install", "--locked", krate]);
            if let Some(v) = version {
                cmd.args(["--version", v]);
            }
            crate::scrub_cargo_env(&mut cmd);
            run(&mut cmd)
                .map_err(|e| fail(format!("{e}: crates.io could not be reached (network?)")))
        }
    }
}

/// apt-get download into a scratch directory, dpkg -x into a sibling of `root`, renamed into
/// place: a half-made tree is never found.
fn unpack_qemu10(root: &Path) -> Result<(), String> {
    let parent = root.parent().unwrap_or(Path::new("/"));
    std::fs::create_dir_all(parent).map_err(|e| format!("{}: {e}", parent.display()))?;
    let debs = parent.join(format!(".qemu10-debs.{}", std::process::id()));
    let tree = parent.join(format!(".qemu10-tree.{}", std::process::id()));
    let result = (|| {
        std::fs::create_dir_all(&debs).map_err(|e| format!("{}: {e}", debs.display()))?;
        let specs = QEMU10_PACKAGES.map(|p| format!("{p}/{BACKPORTS}"));
        run(Command::new("apt-get")
            .arg("download")
            .args(&specs)
            .current_dir(&debs))?;
        let dir = std::fs::read_dir(&debs).map_err(|e| format!("{}: {e}", debs.display()))?;
        for deb in dir.flatten().map(|e| e.path()) {
            run(Command::new("dpkg").arg("-x").arg(&deb).arg(&tree))?;
        }
        let _ = std::fs::remove_dir_all(root);
        std::fs::rename(&tree, root).map_err(|e| format!("{}: {e}", root.display()))?;
        probe::qemu10(root).map(|v| println!("provision: QEMU {v} in {}", root.display()))
    })();
    let _ = std::fs::remove_dir_all(&debs);
    let _ = std::fs::remove_dir_all(&tree);
    result
}

/// Runs `cmd` with its output shown; an error names it and its exit status.
fn run(cmd: &mut Command) -> Result<(), String> {
    let status = cmd.status().map_err(|e| format!("{cmd:?}: {e}"))?;
    if status.success() {
        Ok(())
    } else {
        Err(format!("{cmd:?}: {status}"))
    }
}
