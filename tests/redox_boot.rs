//! Issue 22, stage 1: the emulated stack booted on a real Redox kernel.
//!
//! Builds igcd (default features: the emulator; installed as `igcd-emu`), ptpd, ptpctl and the
//! in-guest check (`tools/redox-check`) for `x86_64-unknown-redox`, links them with the Redox
//! kit's relibc (`../shared/redox-kit`, or `REDOX_KIT`), makes an image with the units from
//! `recipes/` as shipped (only `/usr/bin/` → `/scheme/initfs/bin/` and `/etc/` →
//! `/scheme/initfs/etc/`: the kit's image has only the initfs) plus the check's oneshot unit,
//! boots it under QEMU (TCG, as the kit's `run-qemu`) and judges the serial console: one named
//! assertion per scenario; the bench figures are printed.
//!
//! Needs the kit, `ld.lld`, `redoxfs-ar`, `qemu-system-x86_64`, libgcc and the Redox target;
//! without one it says which and how to install it, and is skipped — unless
//! `REDOX_PTP_REQUIRE_REDOX=1` (CI), where that is a failure.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use ptp_redox_check::report::{Check, Serial, Verdict};
use serde_json::Value;

/// The whole boot, from QEMU's start.
const BOOT_BOUND: Duration = Duration::from_secs(420);
/// Silence on the serial console before the check program started (boot, igcd, ptpd).
const STALL_BEFORE_CHECK: Duration = Duration::from_secs(90);
/// Silence once it runs: its longest step is a bench bounded at 150 s in the guest.
const STALL_IN_CHECK: Duration = Duration::from_secs(200);
/// The Redox build (cold: about 1.5 min on 2 cores).
const BUILD_BOUND: Duration = Duration::from_secs(1200);
const MKIMAGE_BOUND: Duration = Duration::from_secs(180);
const TARGET: &str = "x86_64-unknown-redox";

fn workspace() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// What the test runs with.
struct Tools {
    kit: PathBuf,
    redoxfs_ar: PathBuf,
}

/// `cmd ARGS` runs and exits 0.
fn runs(cmd: &str, args: &[&str]) -> bool {
    Command::new(cmd)
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

/// Every prerequisite, or the first missing one with the command that installs it.
fn prerequisites() -> Result<Tools, String> {
    let kit = std::env::var_os("REDOX_KIT")
        .map(PathBuf::from)
        .unwrap_or_else(|| workspace().join("../shared/redox-kit"));
    for f in ["mkimage", "redox-link", "boot/kernel", "sysroot/lib/libc.a"] {
        if !kit.join(f).exists() {
            return Err(format!(
                "the Redox kit is missing ({} not found): put it at ../shared/redox-kit or set \
                 REDOX_KIT=/path/to/redox-kit",
                kit.join(f).display()
            ));
        }
    }
    if !runs("ld.lld", &["--version"]) {
        return Err("ld.lld is missing: apt-get install -y lld".into());
    }
    let gcc = Path::new("/usr/lib/gcc/x86_64-linux-gnu");
    let libgcc_eh = std::fs::read_dir(gcc)
        .into_iter()
        .flatten()
        .flatten()
        .any(|d| d.path().join("libgcc_eh.a").exists());
    if !libgcc_eh {
        return Err("libgcc_eh.a is missing: apt-get install -y libgcc-12-dev".into());
    }
    let home_ar = std::env::var_os("HOME").map(|h| PathBuf::from(h).join(".cargo/bin/redoxfs-ar"));
    let redoxfs_ar = match (runs("redoxfs-ar", &["--help"]), home_ar) {
        (true, _) => PathBuf::from("redoxfs-ar"),
        (false, Some(p)) if p.exists() => p,
        _ => {
            return Err(
                "redoxfs-ar is missing: apt-get install -y pkg-config libfuse3-dev && \
                        cargo install redoxfs --version 0.8.0 --locked"
                    .into(),
            );
        }
    };
    if !runs("qemu-system-x86_64", &["--version"]) {
        return Err("qemu-system-x86_64 is missing: apt-get install -y qemu-system-x86".into());
    }
    let sysroot = Command::new(std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into()))
        .args(["--print", "sysroot"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    if !Path::new(&sysroot)
        .join("lib/rustlib")
        .join(TARGET)
        .exists()
    {
        return Err(format!(
            "the {TARGET} standard library is missing: rustup target add {TARGET}"
        ));
    }
    Ok(Tools { kit, redoxfs_ar })
}

/// Runs `cmd` to its end within `bound` (killed after it): its combined output, or why not.
fn run_bounded(cmd: &mut Command, bound: Duration, what: &str) -> Result<String, String> {
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("{what}: cannot start: {e}"))?;
    let drain = |r: Option<Box<dyn std::io::Read + Send>>| {
        std::thread::spawn(move || {
            let mut s = String::new();
            if let Some(mut r) = r {
                let _ = r.read_to_string(&mut s);
            }
            s
        })
    };
    let out = drain(child.stdout.take().map(|r| Box::new(r) as _));
    let err = drain(child.stderr.take().map(|r| Box::new(r) as _));
    let t0 = Instant::now();
    let status = loop {
        if let Some(st) = child.try_wait().map_err(|e| format!("{what}: {e}"))? {
            break Some(st);
        }
        if t0.elapsed() > bound {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let text = format!(
        "{}{}",
        out.join().unwrap_or_default(),
        err.join().unwrap_or_default()
    );
    match status {
        Some(st) if st.success() => Ok(text),
        Some(st) => Err(format!("{what} failed ({st}):\n{text}")),
        None => Err(format!(
            "{what} did not finish within {bound:?} (killed):\n{text}"
        )),
    }
}

/// Builds the four programs for Redox in a target dir of their own (never the outer cargo's
/// lock) and stages them under the names the units use.
fn build(tools: &Tools, work: &Path) -> Result<PathBuf, String> {
    let target_dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("redox-target");
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let mut cmd = Command::new(cargo);
    cmd.current_dir(workspace())
        .args(["build", "--release", "--locked", "--target", TARGET])
        .args([
            "-p",
            "igcd",
            "-p",
            "ptpd",
            "-p",
            "ptpctl",
            "-p",
            "ptp-redox-check",
        ])
        .env("CARGO_TARGET_DIR", &target_dir)
        .env(
            "CARGO_TARGET_X86_64_UNKNOWN_REDOX_LINKER",
            tools.kit.join("redox-link"),
        )
        .env("RUSTC_BOOTSTRAP", "1");
    run_bounded(&mut cmd, BUILD_BOUND, "the Redox build")?;
    let out = target_dir.join(TARGET).join("release");
    let bins = work.join("bins");
    std::fs::create_dir_all(&bins).map_err(|e| format!("{}: {e}", bins.display()))?;
    for (from, to) in [
        ("igcd", "igcd-emu"),
        ("ptpd", "ptpd"),
        ("ptpctl", "ptpctl"),
        ("ptp-redox-check", "ptp-redox-check"),
    ] {
        std::fs::copy(out.join(from), bins.join(to)).map_err(|e| format!("staging {from}: {e}"))?;
    }
    Ok(bins)
}

/// A shipped unit or config with its paths pointed at the initfs (comments untouched).
fn initfs_paths(text: &str) -> String {
    text.lines()
        .map(|l| {
            if l.trim_start().starts_with('#') {
                l.to_string()
            } else {
                l.replace("/etc/", "/scheme/initfs/etc/")
                    .replace("/usr/bin/", "/scheme/initfs/bin/")
            }
        })
        .collect::<Vec<_>>()
        .join("\n")
        + "\n"
}

/// The units from recipes/ as shipped (paths rewritten), the check's unit, ptpd's config.
fn stage_units(work: &Path) -> Result<PathBuf, String> {
    let units = work.join("units");
    let _ = std::fs::remove_dir_all(&units);
    std::fs::create_dir_all(&units).map_err(|e| format!("{}: {e}", units.display()))?;
    let ws = workspace();
    for (from, to) in [
        ("recipes/ptp-emu/igcd-emu.service", "19_igcd_emu.service"),
        ("recipes/ptpd/ptpd.service", "20_ptpd.service"),
        (
            "recipes/ptp-emu/ptp-emu-check.service",
            "29_ptp_emu_check.service",
        ),
        ("recipes/ptp-emu/ptpd-emu.toml", "ptpd.toml"),
        (
            "tools/redox-check/40_ptp_redox_check.service",
            "40_ptp_redox_check.service",
        ),
    ] {
        let text = std::fs::read_to_string(ws.join(from)).map_err(|e| format!("{from}: {e}"))?;
        std::fs::write(units.join(to), initfs_paths(&text)).map_err(|e| format!("{to}: {e}"))?;
    }
    Ok(units)
}

/// How the boot ended.
#[derive(Debug, PartialEq)]
enum End {
    /// The check printed REDOX-CHECK-DONE.
    Done,
    /// QEMU exited by itself (the guest powered off before DONE, or crashed).
    Exited(String),
    /// Nothing new on the console for this long.
    Stalled(Duration),
    TimedOut,
}

/// Sends Enter to the bootloader's video-mode menu through QEMU's monitor (as run-qemu does).
fn sendkey(mon: &Path) {
    use std::io::Write;
    if let Ok(mut s) = std::os::unix::net::UnixStream::connect(mon) {
        let _ = s.write_all(b"sendkey ret\n");
        std::thread::sleep(Duration::from_millis(300));
    }
}

/// Boots `img` under QEMU with the kit's run-qemu flags, the serial console to `log`, until the
/// check is done, the console stalls, or the bound.
fn boot(img: &Path, log: &Path) -> Result<(End, Duration), String> {
    let mon = log.with_extension("mon");
    let _ = std::fs::remove_file(&mon);
    std::fs::write(log, b"").map_err(|e| format!("{}: {e}", log.display()))?;
    let mut qemu = Command::new("qemu-system-x86_64")
        .args([
            "-machine", "q35", "-accel", "tcg", "-smp", "1", "-m", "1024",
        ])
        .args(["-display", "none", "-no-reboot", "-net", "none"])
        .arg("-serial")
        .arg(format!("file:{}", log.display()))
        .arg("-monitor")
        .arg(format!("unix:{},server,nowait", mon.display()))
        .arg("-drive")
        .arg(format!("file={},format=raw,snapshot=on", img.display()))
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("qemu-system-x86_64: {e}"))?;
    let t0 = Instant::now();
    let (mut keys, mut seen, mut changed) = (0u32, 0usize, Instant::now());
    let end = loop {
        std::thread::sleep(Duration::from_millis(500));
        let text = String::from_utf8_lossy(&std::fs::read(log).unwrap_or_default()).into_owned();
        let el = t0.elapsed();
        let kernel_up = text.contains("Redox OS starting") || text.contains("init:");
        if !kernel_up && keys < 12 && el >= Duration::from_secs(4 + 3 * u64::from(keys)) {
            sendkey(&mon);
            keys += 1;
        }
        if text.contains(ptp_redox_check::report::DONE) {
            break End::Done;
        }
        if let Ok(Some(st)) = qemu.try_wait() {
            break End::Exited(format!("{st}"));
        }
        if text.len() != seen {
            (seen, changed) = (text.len(), Instant::now());
        }
        let stall = if text.contains(ptp_redox_check::report::STEP) {
            STALL_IN_CHECK
        } else {
            STALL_BEFORE_CHECK
        };
        if changed.elapsed() > stall {
            break End::Stalled(stall);
        }
        if el > BOOT_BOUND {
            break End::TimedOut;
        }
    };
    let _ = qemu.kill();
    let _ = qemu.wait();
    let _ = std::fs::remove_file(&mon);
    Ok((end, t0.elapsed()))
}

/// One named host assertion: ok with its detail, or why it failed.
type Assertion = (&'static str, Result<String, String>);

/// The guest checks named `names` (a trailing `*` is a prefix) all ok or info, at least one.
fn group(serial: &Serial, names: &[&str]) -> Result<String, String> {
    let mut found: Vec<&Check> = Vec::new();
    for n in names {
        let hits: Vec<&Check> = match n.strip_suffix('*') {
            Some(p) => serial
                .checks
                .iter()
                .filter(|c| c.name.starts_with(p))
                .collect(),
            None => serial.check(n).into_iter().collect(),
        };
        if hits.is_empty() {
            return Err(format!("the check printed no verdict for {n}"));
        }
        found.extend(hits);
    }
    let bad: Vec<String> = found
        .iter()
        .filter(|c| c.verdict == Verdict::Fail)
        .map(|c| format!("{}: {}", c.name, c.detail))
        .collect();
    if bad.is_empty() {
        Ok(found
            .iter()
            .map(|c| format!("{}: {}", c.name, c.detail))
            .collect::<Vec<_>>()
            .join("\n      "))
    } else {
        Err(bad.join("\n      "))
    }
}

/// The init-started ptpd's channel, from its `connected to driver at … (mode)` line.
fn init_ptpd_channel(serial: &Serial) -> Option<String> {
    ptp_redox_check::judge::channel_of(
        serial
            .daemon_lines("ptpd")
            .filter(|l| l.contains("connected to driver at"))
            .take(1),
    )
}

/// Before the check ran: did the kernel, init and the stack come up, and if not, where it stopped.
fn stack_came_up(serial: &Serial, end: &End) -> Result<String, String> {
    if !serial.steps.is_empty() {
        return Ok(format!(
            "the check program started ({} steps)",
            serial.steps.len()
        ));
    }
    let last = serial
        .lines
        .iter()
        .rev()
        .find(|l| !l.trim().is_empty())
        .cloned()
        .unwrap_or_default();
    if !serial.lines.iter().any(|l| l.contains("Redox OS starting")) {
        return Err(format!(
            "the kernel never started ({end:?}); last line: {last:?}"
        ));
    }
    let connected = serial
        .daemon_lines("connected to driver at")
        .next()
        .map(str::to_string);
    let ready = serial.daemon_lines("\"driver_up\":").next().is_some();
    Err(match (connected, ready) {
        (Some(c), false) if c.contains("(ring)") => format!(
            "ptpd connected to the driver over the ring ({c:?}) and then never became ready: \
             init waits for its readiness byte, so 29_ptp_emu_check and the check program never \
             ran ({end:?}; issue 22 failures 1-2: ring waits that return at once / a wake-up that \
             never arrives)"
        ),
        (Some(c), _) => format!(
            "ptpd connected ({c:?}) but the check program never started ({end:?}); last line: {last:?}"
        ),
        (None, _) => format!(
            "ptpd never connected to igcd and the check never started ({end:?}); last line: {last:?}"
        ),
    })
}

/// Every assertion, in scenario order.
fn judge(serial: &Serial, end: &End) -> Vec<Assertion> {
    let channel = init_ptpd_channel(serial);
    // ptpctl's JSON line (keys sorted): {"clients_refused":0,...,"ok":true,...}.
    let shipped_check = serial
        .daemon_lines("\"ok\":")
        .find(|l| l.trim_start().starts_with('{'))
        .map(str::to_string);
    vec![
        (
            "stack up, check program started",
            stack_came_up(serial, end),
        ),
        (
            "default config: ptpd on the ring channel",
            match channel.as_deref() {
                Some("ring") => Ok("init's ptpd: connected to driver ... (ring)".into()),
                other => Err(format!(
                    "init's ptpd connected over {other:?}, not the ring"
                )),
            },
        ),
        (
            "shipped 29_ptp_emu_check: driver up",
            match shipped_check {
                Some(l) if l.contains("\"driver_up\":true") => Ok(l),
                other => Err(format!("its JSON status line: {other:?}")),
            },
        ),
        (
            "default config: ptpd ready and serving",
            group(serial, &["default-ready"]),
        ),
        ("every ptpctl verb as root", group(serial, &["verb-*"])),
        ("bench over the default channel", group(serial, &["bench"])),
        (
            "unprivileged client: reads, EPERM on writes",
            group(serial, &["unpriv-*"]),
        ),
        (
            "igcd killed and restarted by hand",
            group(serial, &["igcd-*"]),
        ),
        (
            "ptpd killed and restarted by hand",
            group(serial, &["ptpd-*"]),
        ),
        (
            "ring refused: fallback to the socket",
            group(serial, &["ring-refused-*"]),
        ),
        (
            "check finished",
            if *end == End::Done {
                Ok("REDOX-CHECK-DONE".into())
            } else {
                Err(format!("no REDOX-CHECK-DONE: {end:?}"))
            },
        ),
    ]
}

/// The figures, with the init ptpd's channel where the check could only say "default".
fn figures(serial: &Serial) -> Vec<String> {
    let channel = init_ptpd_channel(serial).unwrap_or_else(|| "?".into());
    serial
        .figures
        .iter()
        .map(|f| match serde_json::from_str::<Value>(f) {
            Ok(mut v) => {
                if v["channel"] == "default" {
                    v["channel"] = format!("{channel} (init's ptpd, default config)").into();
                }
                v.to_string()
            }
            Err(_) => f.clone(),
        })
        .collect()
}

/// Builds, boots and judges; returns the serial log's path and the assertions.
fn boot_and_judge(tools: &Tools) -> Result<(PathBuf, Vec<Assertion>), String> {
    let work = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("redox-boot");
    std::fs::create_dir_all(&work).map_err(|e| format!("{}: {e}", work.display()))?;
    let t = Instant::now();
    let bins = build(tools, &work)?;
    eprintln!(
        "redox_boot: built for Redox in {:.0} s",
        t.elapsed().as_secs_f64()
    );
    let units = stage_units(&work)?;
    let img = work.join("ptp.img");
    let t = Instant::now();
    let mut mk = Command::new(tools.kit.join("mkimage"));
    mk.args([
        "-o".as_ref(),
        img.as_os_str(),
        "-b".as_ref(),
        bins.as_os_str(),
    ])
    .args(["-u".as_ref(), units.as_os_str()])
    .env("REDOXFS_AR", &tools.redoxfs_ar);
    run_bounded(&mut mk, MKIMAGE_BOUND, "mkimage")?;
    eprintln!("redox_boot: image in {:.0} s", t.elapsed().as_secs_f64());
    let log = work.join("serial.log");
    let (end, took) = boot(&img, &log)?;
    eprintln!(
        "redox_boot: booted and checked in {:.0} s ({end:?}); serial log {}",
        took.as_secs_f64(),
        log.display()
    );
    let text = String::from_utf8_lossy(&std::fs::read(&log).unwrap_or_default()).into_owned();
    let serial = Serial::parse(&text);
    for f in figures(&serial) {
        eprintln!("redox_boot: figure {f}");
    }
    Ok((log, judge(&serial, &end)))
}

#[test]
fn redox_boot() {
    let t0 = Instant::now();
    let tools = match prerequisites() {
        Ok(t) => t,
        Err(missing) if std::env::var("REDOX_PTP_REQUIRE_REDOX").as_deref() == Ok("1") => {
            panic!("REDOX_PTP_REQUIRE_REDOX=1 and {missing}")
        }
        Err(missing) => {
            eprintln!("redox_boot: SKIPPED: {missing}");
            return;
        }
    };
    let (log, assertions) = boot_and_judge(&tools).unwrap_or_else(|e| panic!("{e}"));
    let mut failed = Vec::new();
    for (name, r) in &assertions {
        match r {
            Ok(d) => eprintln!("redox_boot: ok   {name}\n      {d}"),
            Err(e) => {
                eprintln!("redox_boot: FAIL {name}\n      {e}");
                failed.push(*name);
            }
        }
    }
    eprintln!("redox_boot: {:.0} s in all", t0.elapsed().as_secs_f64());
    assert!(
        failed.is_empty(),
        "Redox boot: {} of {} assertions failed: {}; serial log: {}",
        failed.len(),
        assertions.len(),
        failed.join("; "),
        log.display()
    );
}

#[test]
fn shipped_units_get_initfs_paths_and_keep_their_comments() {
    let unit = "# installed as /usr/lib/init.d/x, see /etc/ptpd.toml\n[service]\n\
                cmd = \"/usr/bin/ptpd\"\nargs = [\"-f\", \"/etc/ptpd.toml\"]\n";
    let out = initfs_paths(unit);
    assert!(out.contains("cmd = \"/scheme/initfs/bin/ptpd\""), "{out}");
    assert!(out.contains("\"/scheme/initfs/etc/ptpd.toml\""), "{out}");
    assert!(
        out.starts_with("# installed as /usr/lib/init.d/x, see /etc/ptpd.toml\n"),
        "{out}"
    );
}

#[test]
fn a_boot_that_hangs_after_the_ring_connection_says_so() {
    // The shipped stack at e960b12 (issue 22, failures 1-2): ptpd connects over the ring and
    // never writes its readiness byte, so init never starts the check.
    let log = "kernel::arch::x86_shared::start:INFO -- Redox OS starting...\r\n\
        igcd[emu0]: INFO: serving ptpd on /scheme/ptpdrv.emu0_igc/ptp\r\n\
        \u{1b}[32mptpd: INFO: emu0: connected to driver at /scheme/ptpdrv.emu0_igc/ptp (ring)\r\n";
    let serial = Serial::parse(log);
    let end = End::Stalled(STALL_BEFORE_CHECK);
    let why = stack_came_up(&serial, &end).unwrap_err();
    assert!(
        why.contains("over the ring") && why.contains("never became ready"),
        "{why}"
    );
    let a = judge(&serial, &end);
    let failed: Vec<_> = a
        .iter()
        .filter(|(_, r)| r.is_err())
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(failed[0], "stack up, check program started");
    assert!(
        !failed.contains(&"default config: ptpd on the ring channel"),
        "{failed:?}"
    );
    assert!(failed.contains(&"check finished"), "{failed:?}");
}
