//! The gates `cargo xtask test` runs, in order, each named; the first failure stops the run.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::Error;

/// One gate: a name and the command (program, arguments, extra environment).
pub struct Gate {
    pub name: &'static str,
    pub program: &'static str,
    pub args: Vec<&'static str>,
    pub env: Vec<(&'static str, &'static str)>,
    /// Skipped by `--quick` (the slow ones: minutes of mutation runs and fuzzing).
    pub slow: bool,
}

/// The daemons and libraries meant for Redox (each must type-check for Redox).
const REDOX_PKGS_NO_DEFAULT: [&str; 8] = [
    "ptp-ipc",
    "ptp-pci",
    "intel-regs",
    "intel-common",
    "igcd",
    "igbd",
    "ptpd",
    "ptpctl",
];
/// With default features: igcd/igbd --emulate run on Redox too (recipes/ptp-emu), and
/// tests/redox_boot.rs's in-guest check.
const REDOX_PKGS_DEFAULT: [&str; 5] = ["igcd", "igbd", "ptpd", "ptpctl", "ptp-redox-check"];

/// Every gate, in the order CI has always run them.
pub fn all() -> Vec<Gate> {
    let gate = |name, program, args: Vec<&'static str>| Gate {
        name,
        program,
        args,
        env: vec![],
        slow: false,
    };
    // redox-scheme 0.12 enables a nightly feature: RUSTC_BOOTSTRAP (shared/reference/
    // redox-platform.md §1). clippy type-checks like `cargo check` and also lints the
    // cfg(target_os = "redox") code the host build never sees.
    let redox_env = vec![("RUSTC_BOOTSTRAP", "1"), ("RUSTFLAGS", "-D warnings")];
    let redox_clippy = |name, pkgs: &[&'static str], extra: &[&'static str]| {
        let mut args = vec!["clippy", "--locked", "--target", "x86_64-unknown-redox"];
        args.extend(pkgs.iter().flat_map(|p| ["-p", p]));
        args.extend(extra);
        args.extend(["--", "-D", "warnings"]);
        Gate {
            env: redox_env.clone(),
            ..gate(name, "cargo", args)
        }
    };
    vec![
        gate("fmt", "cargo", vec!["fmt", "--all", "--check"]),
        gate(
            "clippy",
            "cargo",
            vec![
                "clippy",
                "--workspace",
                "--all-targets",
                "--locked",
                "--",
                "-D",
                "warnings",
            ],
        ),
        // The TAP/netns tests and tests/redox_boot.rs skip when run by hand without root or
        // the kit; here a skip is a failure.
        Gate {
            env: vec![
                ("REDOX_PTP_REQUIRE_TAP", "1"),
                ("REDOX_PTP_REQUIRE_REDOX", "1"),
            ],
            ..gate("tests", "cargo", vec!["test", "--workspace", "--locked"])
        },
        // Each pre-fix form (igc TX timestamp fixes, gettimex, the lab) must fail its test.
        Gate {
            slow: true,
            ..gate("mutants", ".ci/mutants", vec![])
        },
        // Every decoder for 20 s, one per core (about 3-5 min with the build).
        Gate {
            slow: true,
            ..gate("fuzz", "fuzz/run.sh", vec!["20"])
        },
        redox_clippy(
            "redox-clippy-no-default-features",
            &REDOX_PKGS_NO_DEFAULT,
            &["--no-default-features"],
        ),
        redox_clippy("redox-clippy", &REDOX_PKGS_DEFAULT, &[]),
        // The relibc symbols the Redox binaries import (the minimum Redox).
        gate("redox-imports", ".ci/redox-imports", vec![]),
    ]
}

/// The gates to run: every one, or from the one named `from` on; `quick` leaves out the slow.
pub fn select(quick: bool, from: Option<&str>) -> Result<Vec<Gate>, String> {
    let all = all();
    let start = match from {
        None => 0,
        Some(name) => all.iter().position(|g| g.name == name).ok_or_else(|| {
            let names: Vec<&str> = all.iter().map(|g| g.name).collect();
            format!("no gate {name:?}; the gates: {}", names.join(", "))
        })?,
    };
    Ok(all
        .into_iter()
        .skip(start)
        .filter(|g| !(quick && g.slow))
        .collect())
}

impl Gate {
    /// The command as a shell line (environment first).
    pub fn shell(&self) -> String {
        let env: Vec<String> = self
            .env
            .iter()
            .map(|(k, v)| {
                if v.contains(' ') {
                    format!("{k}=\"{v}\"")
                } else {
                    format!("{k}={v}")
                }
            })
            .collect();
        let mut words = env;
        words.push(self.program.to_string());
        words.extend(self.args.iter().map(|a| a.to_string()));
        words.join(" ")
    }
}

/// Runs `gates` in `repo`, in order, stopping at the first failure (named in the error).
/// Returns each gate's wall time.
pub fn run(repo: &Path, gates: &[Gate]) -> Result<Vec<(&'static str, Duration)>, Error> {
    let mut times = Vec::new();
    for (i, g) in gates.iter().enumerate() {
        println!("\n== [{}/{}] {}: {}", i + 1, gates.len(), g.name, g.shell());
        let start = Instant::now();
        let mut cmd = Command::new(g.program);
        cmd.args(&g.args)
            .envs(g.env.iter().copied())
            .current_dir(repo);
        crate::scrub_cargo_env(&mut cmd);
        let status = cmd.status().map_err(|e| Error::Gate {
            name: g.name,
            why: format!("{}: {e}", g.program),
        })?;
        let took = start.elapsed();
        if !status.success() {
            return Err(Error::Gate {
                name: g.name,
                why: format!("{status} after {}", secs(took)),
            });
        }
        println!("== {} ok ({})", g.name, secs(took));
        times.push((g.name, took));
    }
    Ok(times)
}

/// "12.3 s" / "4 min 05 s".
pub fn secs(d: Duration) -> String {
    let s = d.as_secs_f64();
    if s < 60.0 {
        format!("{s:.1} s")
    } else {
        format!("{} min {:02} s", d.as_secs() / 60, d.as_secs() % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The order CI relies on, and the variables that make a skipped privileged test fail.
    #[test]
    fn gates_run_in_ci_order_with_the_require_variables() {
        let names: Vec<&str> = all().iter().map(|g| g.name).collect();
        assert_eq!(
            names,
            [
                "fmt",
                "clippy",
                "tests",
                "mutants",
                "fuzz",
                "redox-clippy-no-default-features",
                "redox-clippy",
                "redox-imports"
            ]
        );
        let tests = all().into_iter().find(|g| g.name == "tests").unwrap();
        assert_eq!(
            tests.shell(),
            "REDOX_PTP_REQUIRE_TAP=1 REDOX_PTP_REQUIRE_REDOX=1 cargo test --workspace --locked"
        );
        let slow: Vec<&str> = all().iter().filter(|g| g.slow).map(|g| g.name).collect();
        assert_eq!(slow, ["mutants", "fuzz"]);
    }

    #[test]
    fn from_starts_at_the_named_gate_and_quick_leaves_out_the_slow() {
        let names = |g: Vec<Gate>| g.iter().map(|g| g.name).collect::<Vec<_>>();
        assert_eq!(names(select(false, None).unwrap()).len(), 8);
        assert_eq!(
            names(select(true, Some("tests")).unwrap()),
            [
                "tests",
                "redox-clippy-no-default-features",
                "redox-clippy",
                "redox-imports"
            ]
        );
        assert_eq!(
            names(select(false, Some("redox-clippy")).unwrap()),
            ["redox-clippy", "redox-imports"]
        );
        let e = select(false, Some("nope")).map(|_| ()).unwrap_err();
        assert!(
            e.contains("no gate \"nope\"") && e.contains("mutants"),
            "{e}"
        );
    }

    #[test]
    fn every_script_gate_exists_and_is_executable() {
        use std::os::unix::fs::PermissionsExt;
        let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        for g in all().iter().filter(|g| g.program.contains('/')) {
            let m = std::fs::metadata(repo.join(g.program)).expect(g.program);
            assert!(m.permissions().mode() & 0o111 != 0, "{}", g.program);
        }
    }

    /// A failing gate stops the run and is named; the ones after it do not run.
    #[test]
    fn the_first_failure_stops_the_run_by_name() {
        let dir = std::env::temp_dir().join(format!("xtask-gates-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let g = |name, program, args: Vec<&'static str>| Gate {
            name,
            program,
            args,
            env: vec![],
            slow: false,
        };
        let gates = [
            g("first", "true", vec![]),
            g("second", "false", vec![]),
            g("third", "touch", vec!["ran-third"]),
        ];
        let err = run(&dir, &gates).unwrap_err();
        let ran_third = dir.join("ran-third").exists();
        let _ = std::fs::remove_dir_all(&dir);
        assert!(matches!(err, Error::Gate { name: "second", .. }), "{err}");
        assert!(err.to_string().contains("`second`"), "{err}");
        assert!(!ran_third);
    }
}
