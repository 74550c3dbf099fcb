//! What the tests need, and the decision of what to install given what the machine has.
//! Pure: [`decide`] takes an observed [`State`] (from `probe.rs`, or a fake one in the tests
//! below) and returns the [`Plan`]; nothing here touches the machine.

use std::collections::BTreeSet;
use std::fmt;
use std::path::{Path, PathBuf};

/// A group of Debian packages and why the tests need it.
pub struct AptGroup {
    pub why: &'static str,
    pub packages: &'static [&'static str],
}

/// Every Debian package the tests and gates use beyond a bookworm system with Rust (gcc,
/// libc6-dev and binutils come with any working Rust install: rustc links with `cc`).
pub const APT_GROUPS: [AptGroup; 3] = [
    AptGroup {
        // tests/vm_igc.rs, vm_ptp.rs, vm_linux_tools.rs (ptplab --linux-igc): Linux guests on
        // the emulated NICs under bookworm's QEMU 7.2 (10.0 segfaults realizing
        // x-pci-proxy-dev under TCG); `ip netns` for tests/ptp4l_tap.rs; ping for
        // tests/redox_device.rs (a TAP peer pings the Redox guest's smolnetd).
        why: "VM and TAP tests: QEMU 7.2, the Debian kernel, busybox, linuxptp, ethtool, ip, ping",
        packages: &[
            "qemu-system-x86",
            "linux-image-amd64",
            "busybox-static",
            "linuxptp",
            "ethtool",
            "iproute2",
            "iputils-ping",
        ],
    },
    AptGroup {
        // The kit's redox-link needs ld.lld and libgcc_eh.a; redoxfs 0.8's fuser needs
        // pkg-config and libfuse3 to build (the kit README says it builds without; it does not).
        why: "tests/redox_boot.rs: linking for Redox (lld, libgcc) and building redoxfs-ar",
        packages: &["lld", "libgcc-12-dev", "pkg-config", "libfuse3-dev"],
    },
    AptGroup {
        // .ci/mutants applies its patches with patch(1); libfuzzer-sys compiles libFuzzer's
        // C++; the kit's mkimage partitions the image with parted (its python3 fallback is
        // not in bookworm's base either).
        why: "gates: patch (.ci/mutants), g++ (libFuzzer), parted (the kit's mkimage)",
        packages: &["patch", "g++", "parted"],
    },
];

/// For each group with a package in `pkgs`: "why: those packages".
pub fn reasons(pkgs: &[String]) -> Vec<String> {
    APT_GROUPS
        .iter()
        .filter_map(|g| {
            let mine: Vec<&str> = g
                .packages
                .iter()
                .copied()
                .filter(|p| pkgs.iter().any(|m| m == p))
                .collect();
            (!mine.is_empty()).then(|| format!("{}: {}", g.why, mine.join(" ")))
        })
        .collect()
}

/// The packages unpacked from bookworm-backports for QEMU 10 (as src/vm/qemu10.rs PACKAGES).
pub const QEMU10_PACKAGES: [&str; 4] = [
    "qemu-system-x86",
    "qemu-system-common",
    "qemu-system-data",
    "seabios",
];
/// Where tests/vm_igb*.rs look for QEMU 10 (src/vm/qemu10.rs DEFAULT_ROOT, ROOT_ENV).
pub const QEMU10_DEFAULT_ROOT: &str = "/var/cache/redox-ptp/qemu10";
pub const QEMU10_ROOT_ENV: &str = "REDOX_PTP_QEMU10";
pub const BACKPORTS: &str = "bookworm-backports";
/// rustfmt and clippy for the gates; the Redox std for the type-check and tests/redox_boot.rs.
pub const RUSTUP_COMPONENTS: [&str; 2] = ["rustfmt", "clippy"];
pub const REDOX_TARGET: &str = "x86_64-unknown-redox";

/// A tool `cargo install` provides.
pub struct CargoTool {
    pub bin: &'static str,
    pub krate: &'static str,
    pub version: Option<&'static str>,
}
/// redoxfs-ar for the kit's mkimage; cargo-fuzz for fuzz/run.sh.
pub const CARGO_TOOLS: [CargoTool; 2] = [
    CargoTool {
        bin: "redoxfs-ar",
        krate: "redoxfs",
        version: Some("0.8.0"),
    },
    CargoTool {
        bin: "cargo-fuzz",
        krate: "cargo-fuzz",
        version: None,
    },
];

/// What the machine has, as far as the plan cares.
#[derive(Debug, Clone)]
pub struct State {
    pub root: bool,
    /// Packages dpkg reports "install ok installed" (only the ones asked about matter).
    pub installed: BTreeSet<String>,
    /// apt's source files (path, content): sources.list and sources.list.d/*.
    pub sources: Vec<(PathBuf, String)>,
    /// apt's sources.list.d (where the backports line goes).
    pub sourceparts: PathBuf,
    /// The installed qemu-utils version, if any (dpkg's, e.g. `1:10.0.2+ds-2~bpo12+1`).
    pub qemu_utils: Option<String>,
    /// The QEMU 10 tree: Ok(version) when it runs and is ≥ 10, else why not.
    pub qemu10: Result<String, String>,
    pub qemu10_root: PathBuf,
    /// None: no rustup.
    pub rustup: Option<Rustup>,
    /// The [`CARGO_TOOLS`] binaries found.
    pub tools: BTreeSet<String>,
    /// The Redox kit (not in any registry): Ok(path) or what is missing.
    pub kit: Result<PathBuf, String>,
}

/// What rustup has installed.
#[derive(Debug, Clone, Default)]
pub struct Rustup {
    /// Component names without the host suffix ("clippy", not "clippy-x86_64-unknown-linux-gnu").
    pub components: BTreeSet<String>,
    pub targets: BTreeSet<String>,
}

/// One provisioning step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Adds `line` as `file` (the backports suite, from the machine's own mirror).
    AddSource {
        file: PathBuf,
        line: String,
    },
    AptUpdate,
    /// qemu-utils back to bookworm's 7.2: a backports qemu-utils (≥ 8, which some Debian
    /// images carry for qemu-img) Breaks bookworm's qemu-system-common 7.2, so apt refuses
    /// QEMU 7.2 beside it ("qemu-utils : Breaks: qemu-system-common (< 1:8.0+dfsg-5~)"). Seen
    /// on a fresh machine of this project's kind, 2026-12-02.
    DowngradeQemuUtils,
    AptInstall(Vec<String>),
    /// apt-get download the backports packages, dpkg -x them into `root`.
    UnpackQemu10 {
        root: PathBuf,
    },
    RustupComponents(Vec<String>),
    RustupTarget(String),
    CargoInstall {
        krate: String,
        version: Option<String>,
    },
}

/// Why provisioning cannot proceed; each says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Blocker {
    NotRoot(Vec<String>),
    NoRustup,
    NoMirror,
    Kit(String),
}

/// The steps, in order, and what stands in their way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plan {
    pub actions: Vec<Action>,
    pub blockers: Vec<Blocker>,
}

impl Action {
    /// apt and the unpacked tree under /var/cache need root; rustup and cargo do not.
    pub fn needs_root(&self) -> bool {
        matches!(
            self,
            Action::AddSource { .. }
                | Action::AptUpdate
                | Action::DowngradeQemuUtils
                | Action::AptInstall(_)
                | Action::UnpackQemu10 { .. }
        )
    }
}

/// The shell command doing the step by hand (printed by --dry-run and in errors).
impl fmt::Display for Action {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Action::AddSource { file, line } => write!(f, "echo '{line}' > {}", file.display()),
            Action::AptUpdate => write!(f, "apt-get update --error-on=any"),
            Action::DowngradeQemuUtils => write!(
                f,
                "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends \
                 --allow-downgrades qemu-utils/bookworm"
            ),
            Action::AptInstall(p) => write!(
                f,
                "DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends {}",
                p.join(" ")
            ),
            Action::UnpackQemu10 { root } => {
                let specs: Vec<String> = QEMU10_PACKAGES
                    .iter()
                    .map(|p| format!("{p}/{BACKPORTS}"))
                    .collect();
                write!(
                    f,
                    "d=$(mktemp -d) && (cd \"$d\" && apt-get download {}) && mkdir -p {r} && \
                     for x in \"$d\"/*.deb; do dpkg -x \"$x\" {r}; done",
                    specs.join(" "),
                    r = root.display()
                )
            }
            Action::RustupComponents(c) => write!(f, "rustup component add {}", c.join(" ")),
            Action::RustupTarget(t) => write!(f, "rustup target add {t}"),
            Action::CargoInstall { krate, version } => match version {
                Some(v) => write!(f, "cargo install {krate} --version {v} --locked"),
                None => write!(f, "cargo install {krate} --locked"),
            },
        }
    }
}

impl fmt::Display for Blocker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Blocker::NotRoot(steps) => write!(
                f,
                "not root, and these steps need root:\n    {}\n  run as root, e.g. \
                 `sudo env \"PATH=$PATH\" cargo xtask provision`",
                steps.join("\n    ")
            ),
            Blocker::NoRustup => write!(
                f,
                "rustup not found: the Redox target ({REDOX_TARGET}) and rustfmt/clippy come \
                 from rustup; install Rust with https://rustup.rs"
            ),
            Blocker::NoMirror => write!(
                f,
                "QEMU 10 needs the {BACKPORTS} suite and no Debian mirror was found in apt's \
                 sources to add it from: add `deb <mirror> {BACKPORTS} main` to \
                 /etc/apt/sources.list.d/{BACKPORTS}.list"
            ),
            Blocker::Kit(why) => write!(
                f,
                "{why}: the Redox kit (prebuilt Redox kernel, relibc and tools; in no registry) \
                 must be at ../shared/redox-kit beside the checkout, or set REDOX_KIT=/path/to/kit"
            ),
        }
    }
}

/// The plan for `state`: apt first (sources, one update, installs, QEMU 10), then rustup,
/// then cargo tools (redoxfs needs the -dev packages apt installs).
pub fn decide(state: &State) -> Plan {
    let mut plan = Plan::default();
    let missing: Vec<String> = APT_GROUPS
        .iter()
        .flat_map(|g| g.packages.iter())
        .filter(|p| !state.installed.contains(**p))
        .map(|p| p.to_string())
        .collect();
    let need_qemu10 = state.qemu10.is_err();
    if need_qemu10 && !has_suite(&state.sources, BACKPORTS) {
        match mirror(&state.sources) {
            Some(m) => plan.actions.push(Action::AddSource {
                file: state.sourceparts.join(format!("{BACKPORTS}.list")),
                line: format!("deb {m} {BACKPORTS} main"),
            }),
            None => plan.blockers.push(Blocker::NoMirror),
        }
    }
    if !missing.is_empty() || need_qemu10 {
        plan.actions.push(Action::AptUpdate);
    }
    let needs_qemu72 = missing.iter().any(|p| p == "qemu-system-x86");
    if needs_qemu72 && state.qemu_utils.as_deref().is_some_and(breaks_qemu72) {
        plan.actions.push(Action::DowngradeQemuUtils);
    }
    if !missing.is_empty() {
        plan.actions.push(Action::AptInstall(missing));
    }
    if need_qemu10 {
        plan.actions.push(Action::UnpackQemu10 {
            root: state.qemu10_root.clone(),
        });
    }
    rust_steps(state, &mut plan);
    if let Err(why) = &state.kit {
        plan.blockers.push(Blocker::Kit(why.clone()));
    }
    let root_steps: Vec<String> = plan
        .actions
        .iter()
        .filter(|a| a.needs_root())
        .map(|a| a.to_string())
        .collect();
    if !state.root && !root_steps.is_empty() {
        plan.blockers.insert(0, Blocker::NotRoot(root_steps));
    }
    plan
}

/// Whether an installed qemu-utils `version` (dpkg's `[epoch:]upstream-revision`) Breaks
/// bookworm's qemu-system-common 7.2: from upstream 8.0 on it does.
fn breaks_qemu72(version: &str) -> bool {
    let upstream = version.split_once(':').map_or(version, |(_, v)| v);
    let major = upstream.split(['.', '+', '~', '-']).next().unwrap_or("");
    major.parse::<u32>().is_ok_and(|m| m >= 8)
}

/// rustup components and target, then the cargo-installed tools.
fn rust_steps(state: &State, plan: &mut Plan) {
    match &state.rustup {
        None => plan.blockers.push(Blocker::NoRustup),
        Some(r) => {
            let comps: Vec<String> = RUSTUP_COMPONENTS
                .iter()
                .filter(|c| !r.components.contains(**c))
                .map(|c| c.to_string())
                .collect();
            if !comps.is_empty() {
                plan.actions.push(Action::RustupComponents(comps));
            }
            if !r.targets.contains(REDOX_TARGET) {
                plan.actions
                    .push(Action::RustupTarget(REDOX_TARGET.to_string()));
            }
        }
    }
    for t in CARGO_TOOLS.iter().filter(|t| !state.tools.contains(t.bin)) {
        plan.actions.push(Action::CargoInstall {
            krate: t.krate.to_string(),
            version: t.version.map(str::to_string),
        });
    }
}

/// Lines of apt sources that are not comments.
fn live_lines(sources: &[(PathBuf, String)]) -> impl Iterator<Item = (&Path, &str)> {
    sources.iter().flat_map(|(p, text)| {
        text.lines()
            .map(str::trim)
            .filter(|l| !l.is_empty() && !l.starts_with('#'))
            .map(move |l| (p.as_path(), l))
    })
}

/// Whether any live one-line (`deb URI SUITE ...`) or deb822 (`Suites: ...`) entry names `suite`.
pub fn has_suite(sources: &[(PathBuf, String)], suite: &str) -> bool {
    live_lines(sources).any(|(_, l)| {
        let words: Vec<&str> = l.split_whitespace().collect();
        match words.first() {
            Some(&"deb") => after_options(&words[1..]).get(1) == Some(&suite),
            Some(&"Suites:") => words[1..].contains(&suite),
            _ => false,
        }
    })
}

/// The first Debian mirror in apt's sources (deb822 `URIs:` or a one-line `deb`), skipping
/// the security archive (it has no backports).
pub fn mirror(sources: &[(PathBuf, String)]) -> Option<String> {
    live_lines(sources)
        .filter_map(|(_, l)| {
            let words: Vec<&str> = l.split_whitespace().collect();
            match words.first() {
                Some(&"URIs:") => words.get(1).map(|s| s.to_string()),
                Some(&"deb") => after_options(&words[1..]).first().map(|s| s.to_string()),
                _ => None,
            }
        })
        .find(|uri| !uri.contains("security"))
}

/// Skips a one-line entry's `[option=value ...]` block.
fn after_options<'a>(words: &'a [&'a str]) -> &'a [&'a str] {
    if words.first().is_some_and(|w| w.starts_with('[')) {
        let end = words.iter().position(|w| w.ends_with(']')).unwrap_or(0);
        &words[end + 1..]
    } else {
        words
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// debian:bookworm out of the box: its deb822 debian.sources, no backports, nothing of
    /// ours installed, rustup with only the default profile, no cargo tools.
    fn fresh_bookworm() -> State {
        let debian_sources = "Types: deb\n\
            # http://snapshot.debian.org/archive/debian/20250520T000000Z\n\
            URIs: http://deb.debian.org/debian\n\
            Suites: bookworm bookworm-updates\n\
            Components: main\n\
            Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg\n\n\
            Types: deb\n\
            URIs: http://deb.debian.org/debian-security\n\
            Suites: bookworm-security\n\
            Components: main\n";
        State {
            root: true,
            installed: BTreeSet::new(),
            sources: vec![(
                PathBuf::from("/etc/apt/sources.list.d/debian.sources"),
                debian_sources.to_string(),
            )],
            sourceparts: PathBuf::from("/etc/apt/sources.list.d"),
            qemu_utils: None,
            qemu10: Err("/var/cache/redox-ptp/qemu10/usr/bin/qemu-system-x86_64 missing".into()),
            qemu10_root: PathBuf::from(QEMU10_DEFAULT_ROOT),
            rustup: Some(Rustup {
                components: ["cargo", "rustc", "rust-std"]
                    .iter()
                    .map(|c| c.to_string())
                    .collect(),
                targets: ["x86_64-unknown-linux-gnu".to_string()].into(),
            }),
            tools: BTreeSet::new(),
            kit: Ok(PathBuf::from("/work/shared/redox-kit")),
        }
    }

    /// Everything present: what this machine has after one provisioning.
    fn provisioned() -> State {
        let mut s = fresh_bookworm();
        s.installed = APT_GROUPS
            .iter()
            .flat_map(|g| g.packages.iter().map(|p| p.to_string()))
            .collect();
        s.sources.push((
            PathBuf::from("/etc/apt/sources.list.d/bookworm-backports.list"),
            "deb http://deb.debian.org/debian bookworm-backports main\n".into(),
        ));
        s.qemu10 = Ok("10.0.2".into());
        let r = s.rustup.as_mut().unwrap();
        r.components.insert("clippy".into());
        r.components.insert("rustfmt".into());
        r.targets.insert(REDOX_TARGET.into());
        s.tools = CARGO_TOOLS.iter().map(|t| t.bin.to_string()).collect();
        s
    }

    fn all_packages() -> Vec<String> {
        APT_GROUPS
            .iter()
            .flat_map(|g| g.packages.iter().map(|p| p.to_string()))
            .collect()
    }

    #[test]
    fn a_fresh_bookworm_gets_the_full_plan_in_order() {
        let plan = decide(&fresh_bookworm());
        assert_eq!(plan.blockers, vec![], "{plan:?}");
        assert_eq!(
            plan.actions,
            vec![
                Action::AddSource {
                    file: PathBuf::from("/etc/apt/sources.list.d/bookworm-backports.list"),
                    line: "deb http://deb.debian.org/debian bookworm-backports main".into(),
                },
                Action::AptUpdate,
                Action::AptInstall(all_packages()),
                Action::UnpackQemu10 {
                    root: PathBuf::from(QEMU10_DEFAULT_ROOT)
                },
                Action::RustupComponents(vec!["rustfmt".into(), "clippy".into()]),
                Action::RustupTarget(REDOX_TARGET.into()),
                Action::CargoInstall {
                    krate: "redoxfs".into(),
                    version: Some("0.8.0".into())
                },
                Action::CargoInstall {
                    krate: "cargo-fuzz".into(),
                    version: None
                },
            ]
        );
    }

    /// A backports qemu-utils (as this project's machines have for qemu-img) would make apt
    /// refuse QEMU 7.2; bookworm's own qemu-utils, or none, needs nothing.
    #[test]
    fn a_backports_qemu_utils_is_downgraded_before_qemu_72_is_installed() {
        let mut s = fresh_bookworm();
        s.qemu_utils = Some("1:10.0.2+ds-2+deb13u1~bpo12+1".into());
        let plan = decide(&s);
        let at = |a: &Action| plan.actions.iter().position(|b| b == a);
        let (down, install) = (
            at(&Action::DowngradeQemuUtils),
            at(&Action::AptInstall(all_packages())),
        );
        assert!(down.is_some() && down < install, "{plan:?}");
        assert!(at(&Action::AptUpdate) < down);
        for v in ["1:7.2+dfsg-7+deb12u18+b3", "garbage"] {
            s.qemu_utils = Some(v.into());
            assert_eq!(at_of(&decide(&s), &Action::DowngradeQemuUtils), None, "{v}");
        }
        // QEMU 7.2 already installed: nothing to make room for.
        let mut p = provisioned();
        p.qemu_utils = Some("1:10.0.2+ds-2".into());
        assert_eq!(decide(&p), Plan::default());
    }

    fn at_of(plan: &Plan, a: &Action) -> Option<usize> {
        plan.actions.iter().position(|b| b == a)
    }

    #[test]
    fn a_provisioned_machine_gets_nothing() {
        assert_eq!(decide(&provisioned()), Plan::default());
    }

    #[test]
    fn only_the_missing_pieces_are_planned() {
        let mut s = provisioned();
        s.installed.remove("linuxptp");
        s.installed.remove("parted");
        s.tools.remove("cargo-fuzz");
        let plan = decide(&s);
        assert_eq!(
            plan.actions,
            vec![
                Action::AptUpdate,
                Action::AptInstall(vec!["linuxptp".into(), "parted".into()]),
                Action::CargoInstall {
                    krate: "cargo-fuzz".into(),
                    version: None
                },
            ]
        );
    }

    #[test]
    fn a_working_qemu10_needs_no_backports_suite() {
        let mut s = provisioned();
        s.sources.truncate(1);
        assert_eq!(decide(&s), Plan::default());
        s.qemu10 = Err("QEMU 7.2.22".into());
        let plan = decide(&s);
        assert!(
            matches!(plan.actions[0], Action::AddSource { .. }),
            "{plan:?}"
        );
        assert_eq!(plan.actions[1], Action::AptUpdate);
    }

    #[test]
    fn not_root_is_a_blocker_naming_each_root_step() {
        let mut s = fresh_bookworm();
        s.root = false;
        let plan = decide(&s);
        let Some(Blocker::NotRoot(steps)) = plan.blockers.first() else {
            panic!("{plan:?}");
        };
        assert_eq!(steps.len(), 4, "{steps:?}");
        assert!(steps[0].contains("bookworm-backports main"), "{steps:?}");
        assert!(steps[2].contains("apt-get install") && steps[2].contains("linuxptp"));
        assert!(plan.blockers[0].to_string().contains("sudo"));
        // rustup and cargo steps need no root: not root with only those missing is fine.
        let mut s = provisioned();
        s.root = false;
        s.tools.clear();
        assert_eq!(decide(&s).blockers, vec![]);
    }

    #[test]
    fn no_mirror_no_rustup_and_no_kit_are_blockers() {
        let mut s = fresh_bookworm();
        s.sources = vec![(PathBuf::from("/etc/apt/sources.list"), "# empty\n".into())];
        s.rustup = None;
        s.kit = Err("/nowhere/mkimage not found".into());
        let b = decide(&s).blockers;
        assert!(b.contains(&Blocker::NoMirror), "{b:?}");
        assert!(b.contains(&Blocker::NoRustup), "{b:?}");
        assert!(
            b.iter().any(|b| b.to_string().contains("REDOX_KIT")),
            "{b:?}"
        );
    }

    #[test]
    fn one_line_sources_with_options_and_comments() {
        let list = vec![(
            PathBuf::from("/etc/apt/sources.list"),
            "# deb http://old.example/debian bookworm-backports main\n\
             deb [signed-by=/k.gpg arch=amd64] http://mirror.example/debian bookworm main\n\
             deb http://security.debian.org/debian-security bookworm-security main\n"
                .to_string(),
        )];
        assert!(
            !has_suite(&list, BACKPORTS),
            "a commented line does not count"
        );
        assert!(has_suite(&list, "bookworm"));
        assert_eq!(
            mirror(&list).as_deref(),
            Some("http://mirror.example/debian")
        );
    }

    /// The QEMU 10 location and packages must be the ones the tests look for.
    #[test]
    fn qemu10_constants_match_the_lab() {
        let src = include_str!("../../src/vm/qemu10.rs");
        assert!(src.contains(&format!("DEFAULT_ROOT: &str = \"{QEMU10_DEFAULT_ROOT}\"")));
        assert!(src.contains(&format!("ROOT_ENV: &str = \"{QEMU10_ROOT_ENV}\"")));
        for p in QEMU10_PACKAGES {
            assert!(src.contains(&format!("\"{p}\",")), "{p}");
        }
    }
}
